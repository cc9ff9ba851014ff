"""The four floating dtypes poolgrad computes in, and how their arrays are handed to the kernels.

float16 and bfloat16 arrays reach the kernels as ``uint16`` views (a bfloat16 array cannot export a buffer), and
the C side widens/narrows them itself (``src_c/pg_dtype.h``).
"""
from __future__ import annotations

import ml_dtypes
import numpy as np

__all__ = ["SUPPORTED_DTYPES", "bfloat16", "dtype_code", "kernel_view", "f16_to_f32", "f32_to_f16",
           "bf16_to_f32", "f32_to_bf16", "round_hf32"]

bfloat16 = np.dtype(ml_dtypes.bfloat16)

# dtype -> the suffix of the kernel specialisation (see DTYPES in setup.py)
_CODES = {
    np.dtype(np.float32): "f32",
    np.dtype(np.float64): "f64",
    np.dtype(np.float16): "f16",
    bfloat16: "bf16",
}
SUPPORTED_DTYPES = tuple(_CODES)


def dtype_code(dtype: np.dtype) -> str | None:
    """Kernel suffix for ``dtype`` (``'f32'``, ``'f64'``, ``'f16'``, ``'bf16'``), or None if unsupported."""
    return _CODES.get(np.dtype(dtype))


def kernel_view(arr: np.ndarray) -> np.ndarray:
    """The array as the kernels see it: 16-bit floats reinterpreted as uint16 (no copy)."""
    if arr.dtype.itemsize == 2 and arr.dtype.kind != "u":
        return arr.view(np.uint16)
    return arr


def _convert(fn_name: str, values: np.ndarray, out_dtype: np.dtype) -> np.ndarray:
    from . import _dtypes
    src = np.ascontiguousarray(values).reshape(-1)
    out = np.empty(src.shape, dtype=out_dtype)
    getattr(_dtypes, fn_name)(src, out)
    return out.reshape(np.shape(values))


def f16_to_f32(bits: np.ndarray) -> np.ndarray:
    """Widen raw float16 bit patterns (uint16) to float32 with the kernels' own C routine."""
    return _convert("f16_to_f32", np.asarray(bits, dtype=np.uint16), np.float32)


def f32_to_f16(values: np.ndarray) -> np.ndarray:
    """Round float32 values to float16 bit patterns (uint16), nearest-even, with the kernels' C routine."""
    return _convert("f32_to_f16", np.asarray(values, dtype=np.float32), np.uint16)


def bf16_to_f32(bits: np.ndarray) -> np.ndarray:
    """Widen raw bfloat16 bit patterns (uint16) to float32 with the kernels' C routine."""
    return _convert("bf16_to_f32", np.asarray(bits, dtype=np.uint16), np.float32)


def f32_to_bf16(values: np.ndarray) -> np.ndarray:
    """Round float32 values to bfloat16 bit patterns (uint16), nearest-even, with the kernels' C routine."""
    return _convert("f32_to_bf16", np.asarray(values, dtype=np.float32), np.uint16)


def round_hf32(values: np.ndarray) -> np.ndarray:
    """Round float32 values to HF32 (11 explicit mantissa bits), nearest-even, returned as float32."""
    return _convert("round_hf32", np.asarray(values, dtype=np.float32), np.float32)
