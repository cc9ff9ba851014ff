"""Validation: the one module that checks and parses what users pass (scikit-image's ``_preprocess_input`` idea).

Every public function runs its arrays and parameters through these helpers before anything is allocated or any
kernel runs; each raises :class:`~poolgrad.errors.ParamNullptrError` (161001, a missing array) or
:class:`~poolgrad.errors.ParamInvalidError` (161002, anything else) with a message that names the parameter, what
was expected and what was given.  Kernels receive only what passed here, so they never fail.

One rule for bool parameters (``ceil_mode``, ``count_include_pad``, ``check_orig_output``, ``deterministic``,
``set_deterministic``): Python ``bool``, ``numpy.bool_`` and the integers 0 and 1 (Python or NumPy) are
accepted, as ``torch.nn.functional`` accepts ``ceil_mode=1``; every other value is refused.
"""
from __future__ import annotations

import operator
from typing import Any, Iterable, Sequence

import numpy as np

from .dtypes import SUPPORTED_DTYPES, dtype_code
from .errors import ParamInvalidError, ParamNullptrError
from .geometry import PoolGeometry, to_nchw

__all__ = [
    "MAX_PARAM", "as_array", "check_dtype", "check_same_dtype", "check_index_dtype", "parse_index_dtype",
    "check_rank", "parse_layout", "parse_bool", "as_int", "parse_pair", "parse_stride", "parse_output_size",
    "parse_divisor", "parse_cube_math_type", "CUBE_MATH_TYPES", "parse_tf_window", "parse_tf_padding",
    "parse_pool", "check_input", "check_grad_like", "check_indices", "prepare_out", "check_no_overlap",
    "check_allocatable",
]

# Parameters (kernel sizes, strides, paddings, dilations, output sizes) above this are refused: every product the
# kernels form from them then stays far inside int64.
MAX_PARAM = 2 ** 31 - 1

_LAYOUTS = ("NCHW", "NHWC")

#: ``cube_math_type`` values (CANN's names).
CUBE_MATH_TYPES = {0: "KEEP_DTYPE", 1: "ALLOW_FP32_DOWN_PRECISION", 2: "USE_FP16", 3: "USE_HF32"}

_INT64_MIN, _INT64_MAX = -2 ** 63, 2 ** 63 - 1


# ---- arrays ----

def as_array(obj: Any, name: str) -> np.ndarray:
    """Return ``obj`` as an ndarray without copying, or raise.

    Accepts NumPy arrays and objects NumPy can view without a copy (``__dlpack__``, ``__array_interface__``,
    ``__array__``, the buffer protocol).  None raises :class:`ParamNullptrError`; Python scalars, lists and
    other non-array objects raise :class:`ParamInvalidError` (no silent conversion of nested lists).
    """
    if obj is None:
        raise ParamNullptrError(f"{name}: expected an array, got None")
    if isinstance(obj, np.ndarray):
        return obj
    if isinstance(obj, (list, tuple, str, bytes, int, float, complex, bool, dict, set)):
        raise ParamInvalidError(f"{name}: expected an array (numpy.ndarray or an object exposing __dlpack__ "
                                f"or the buffer protocol), got {type(obj).__name__}")
    if hasattr(obj, "__dlpack__"):
        try:
            return np.from_dlpack(obj)
        except (TypeError, ValueError, BufferError, RuntimeError):
            pass
    if hasattr(obj, "__array_interface__") or hasattr(obj, "__array__"):
        try:
            return np.asarray(obj)
        except Exception as exc:  # noqa: BLE001 - any failure of a foreign object is the caller's input error
            raise ParamInvalidError(f"{name}: could not be viewed as an array ({exc})") from None
    try:
        memoryview(obj)
    except TypeError:
        raise ParamInvalidError(f"{name}: expected an array (numpy.ndarray or an object exposing __dlpack__ "
                                f"or the buffer protocol), got {type(obj).__name__}") from None
    return np.asarray(obj)


def check_dtype(arr: np.ndarray, name: str) -> str:
    """Raise unless ``arr`` has one of the four supported float dtypes; return its kernel code."""
    code = dtype_code(arr.dtype)
    if code is None:
        names = ", ".join(str(d) for d in SUPPORTED_DTYPES)
        raise ParamInvalidError(f"{name}: expected dtype one of ({names}), got {arr.dtype}")
    return code


def check_same_dtype(arr: np.ndarray, name: str, ref: np.ndarray, ref_name: str) -> None:
    """Raise unless ``arr`` has the dtype of ``ref`` (poolgrad never casts silently)."""
    if arr.dtype != ref.dtype:
        raise ParamInvalidError(f"{name}: expected dtype {ref.dtype} (the dtype of {ref_name}), got {arr.dtype}")


def check_index_dtype(arr: np.ndarray, name: str, plane_size: int) -> str:
    """Raise unless ``arr`` holds int32 or int64 indices able to address a plane of ``plane_size`` cells."""
    if arr.dtype == np.int64:
        return "i64"
    if arr.dtype == np.int32:
        if plane_size > np.iinfo(np.int32).max:
            raise ParamInvalidError(f"{name}: int32 indices cannot address a plane of H*W = {plane_size} cells "
                                    f"(more than 2**31 - 1); expected int64, got int32")
        return "i32"
    raise ParamInvalidError(f"{name}: expected dtype int32 or int64, got {arr.dtype}")


def check_rank(arr: np.ndarray, name: str, ranks: Iterable[int]) -> None:
    ranks = tuple(ranks)
    if arr.ndim not in ranks:
        want = " or ".join(f"{r}-D" for r in ranks)
        raise ParamInvalidError(f"{name}: expected a {want} array, got {arr.ndim}-D with shape {arr.shape}")


def parse_index_dtype(index_dtype: Any, plane_size: int) -> tuple[np.dtype, str]:
    """The ``index_dtype=`` of a forward: int32 or int64 (int32 only when it can address an H*W plane)."""
    try:
        idt = np.dtype(index_dtype)
    except (TypeError, ValueError):
        raise ParamInvalidError(f"index_dtype: expected int32 or int64, got {index_dtype!r}") from None
    if idt not in (np.dtype(np.int32), np.dtype(np.int64)):
        raise ParamInvalidError(f"index_dtype: expected int32 or int64, got {idt}")
    return idt, check_index_dtype(np.empty(0, idt), "index_dtype", plane_size)


def check_input(x: Any, layout: Any, name: str = "x") -> tuple[np.ndarray, str, str]:
    """Validate a pooling input: 3-D (one image) or 4-D, a supported float dtype, no zero C/H/W."""
    x = as_array(x, name)
    layout = parse_layout(layout)
    check_rank(x, name, (3, 4))
    dt = check_dtype(x, name)
    x4 = to_nchw(x, layout)
    if 0 in x4.shape[1:]:
        raise ParamInvalidError(f"{name}: expected non-zero C, H and W, got shape {x.shape} ({layout})")
    return x, layout, dt


def check_grad_like(arr: Any, name: str, x: np.ndarray, expected: tuple[int, ...], what: str) -> np.ndarray:
    """An array that must have ``x``'s rank and dtype and exactly ``expected`` shape."""
    arr = as_array(arr, name)
    check_rank(arr, name, (x.ndim,))
    check_same_dtype(arr, name, x, "x")
    if arr.shape != expected:
        raise ParamInvalidError(f"{name}: expected shape {expected} for {what}, got {arr.shape}")
    return arr


def check_indices(indices: Any, x4: np.ndarray, rank: int, expected: tuple[int, ...], what: str,
                  name: str = "indices") -> tuple[np.ndarray, str]:
    """int32/int64 indices of ``expected`` shape; int32 only when it can address every cell of an H*W plane."""
    indices = as_array(indices, name)
    check_rank(indices, name, (rank,))
    it = check_index_dtype(indices, name, x4.shape[2] * x4.shape[3])
    if indices.shape != expected:
        raise ParamInvalidError(f"{name}: expected shape {expected} for {what}, got {indices.shape}")
    return indices, it



# ---- parameters ----

def parse_layout(layout: Any, name: str = "layout") -> str:
    """``"NCHW"`` or ``"NHWC"`` (str or bytes, case-sensitive)."""
    if isinstance(layout, bytes):
        try:
            layout = layout.decode("ascii")
        except UnicodeDecodeError:
            pass
    if not isinstance(layout, str) or layout not in _LAYOUTS:
        raise ParamInvalidError(f"{name}: expected 'NCHW' or 'NHWC', got {layout!r}")
    return layout


def parse_bool(value: Any, name: str) -> bool:
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if isinstance(value, (int, np.integer)) and int(value) in (0, 1):
        return bool(value)
    raise ParamInvalidError(f"{name}: expected a bool (or 0 / 1), got {value!r}")


def as_int(value: Any, name: str, expected: str, shown: Any = None) -> int:
    """``value`` as a Python int (a Python or NumPy integer; bools and everything else are refused with
    ``ParamInvalidError("{name}: expected {expected}, got ...")``, showing ``shown`` if given, else ``value``)."""
    if not isinstance(value, (bool, np.bool_)):
        try:
            return operator.index(value)
        except TypeError:
            pass
    shown = value if shown is None else shown
    raise ParamInvalidError(f"{name}: expected {expected}, got {shown!r}")


def _as_int(value: Any, name: str) -> int:
    return as_int(value, name, "an int or a sequence of 1 or 2 ints")


def _as_seq(value: Any, name: str) -> list[int] | None:
    """Sequence form of an int-or-sequence parameter (None when ``value`` is a single int)."""
    if isinstance(value, (bool, np.bool_)):
        raise ParamInvalidError(f"{name}: expected an int or a sequence of 1 or 2 ints, got {value!r}")
    if isinstance(value, (int, np.integer)):
        return None
    if isinstance(value, np.ndarray):
        if value.ndim != 1:
            raise ParamInvalidError(f"{name}: expected an int or a sequence of 1 or 2 ints, got an array of "
                                    f"shape {value.shape}")
        value = value.tolist()
    if isinstance(value, (list, tuple)):
        return [_as_int(v, name) for v in value]
    raise ParamInvalidError(f"{name}: expected an int or a sequence of 1 or 2 ints, got {value!r}")


def parse_pair(value: Any, name: str, minimum: int = 1) -> tuple[int, int]:
    """An int or a sequence of 1 or 2 ints -> (h, w), each ``>= minimum`` and at most 2**31 - 1."""
    seq = _as_seq(value, name)
    if seq is None:
        pair = (_as_int(value, name),) * 2
    elif len(seq) in (1, 2):
        pair = (seq[0], seq[-1])
    else:
        raise ParamInvalidError(f"{name}: expected an int or a sequence of 1 or 2 ints, got {len(seq)} values "
                                f"{tuple(seq)}")
    for v in pair:
        if v < minimum or v > MAX_PARAM:
            bound = "a positive int" if minimum == 1 else f"ints >= {minimum}"
            raise ParamInvalidError(f"{name}: expected {bound} (at most {MAX_PARAM}), got {value!r}")
    return pair


def parse_stride(value: Any, kernel: tuple[int, int], name: str = "stride") -> tuple[int, int]:
    """None or an empty sequence means the kernel size (PyTorch's and CANN's convention)."""
    if value is None:
        return kernel
    if isinstance(value, (list, tuple)) and len(value) == 0:
        return kernel
    if isinstance(value, np.ndarray) and value.size == 0 and value.ndim == 1:
        return kernel
    return parse_pair(value, name)


def parse_pool(x4: np.ndarray, kernel_size: Any, stride: Any, padding: Any, dilation: Any, ceil_mode: Any
               ) -> PoolGeometry:
    """Checked PyTorch-style pooling parameters over ``x4``'s (H, W) -> :class:`PoolGeometry`.

    ``dilation`` None: a pooling without dilation (average pooling), whose padding limit is half the kernel;
    otherwise half the effective kernel ``(k - 1) * d + 1``.  The output must be at least 1 x 1.
    """
    kernel = parse_pair(kernel_size, "kernel_size")
    step = parse_stride(stride, kernel)
    pad = parse_pair(padding, "padding", minimum=0)
    dil = parse_pair(dilation, "dilation") if dilation is not None else None
    ceil = parse_bool(ceil_mode, "ceil_mode")
    for axis, (k, p, d) in enumerate(zip(kernel, pad, dil or (1, 1))):
        limit = ((k - 1) * d + 1) // 2
        if p > limit:
            if dil is None:
                raise ParamInvalidError(
                    f"padding: expected at most {limit} along {'HW'[axis]} (pad should be at most half of kernel "
                    f"size: kernel_size={kernel}), got {pad}")
            raise ParamInvalidError(
                f"padding: expected at most {limit} along {'HW'[axis]} (pad should be at most half of effective "
                f"kernel size: kernel_size={kernel}, dilation={dil}), got {pad}")
    geo = PoolGeometry((int(x4.shape[2]), int(x4.shape[3])), kernel, step, pad, dil, ceil)
    if min(geo.out) < 1:
        raise ParamInvalidError(
            f"x: output size is too small: input (H, W) = {geo.hw} with {geo.describe()} gives {geo.out}")
    return geo


def parse_output_size(output_size: Any, hw: tuple[int, int]) -> tuple[int, int]:
    """int, or 1-2 entries each a positive int or None (None keeps that input size, as in PyTorch)."""
    if isinstance(output_size, (bool, np.bool_)):
        raise ParamInvalidError(f"output_size: expected a positive int or a sequence of 1 or 2, got "
                                f"{output_size!r}")
    if isinstance(output_size, (int, np.integer)):
        seq = [output_size]
    elif isinstance(output_size, (list, tuple)) and len(output_size) in (1, 2):
        seq = list(output_size)
    else:
        raise ParamInvalidError(f"output_size: expected a positive int or a sequence of 1 or 2, got "
                                f"{output_size!r}")
    if len(seq) == 1:
        seq = seq * 2
    result = []
    for axis, v in enumerate(seq):
        if v is None:
            result.append(hw[axis])
            continue
        if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer)):
            raise ParamInvalidError(f"output_size: expected positive ints (or None), got {output_size!r}")
        if not 1 <= int(v) <= MAX_PARAM:
            raise ParamInvalidError(f"output_size: expected positive ints (at most {MAX_PARAM}), got "
                                    f"{output_size!r}")
        result.append(int(v))
    return result[0], result[1]


def parse_divisor(value: Any) -> int:
    """None or 0 (not used) or a non-zero int64 (negative allowed, as in PyTorch); bools are refused."""
    if value is None:
        return 0
    d = as_int(value, "divisor_override", "None or an int")
    if not _INT64_MIN <= d <= _INT64_MAX:
        raise ParamInvalidError(f"divisor_override: expected an int64 value, got {d}")
    return d


def parse_cube_math_type(value: Any, x: np.ndarray, dt: str) -> int:
    """0-3 (bools refused), and the dtype restrictions of USE_HF32 (float32 only) and USE_FP16 (no bfloat16)."""
    want = ", ".join(f"{k} ({v})" for k, v in CUBE_MATH_TYPES.items())
    mode = as_int(value, "cube_math_type", f"one of {want}")
    if mode not in CUBE_MATH_TYPES:
        raise ParamInvalidError(f"cube_math_type: expected one of {want}, got {mode}")
    if mode == 3 and dt != "f32":
        raise ParamInvalidError(f"cube_math_type: 3 (USE_HF32) expects float32 input, got x of dtype {x.dtype}")
    if mode == 2 and dt == "bf16":
        raise ParamInvalidError(f"cube_math_type: 2 (USE_FP16) does not support bfloat16 input, got x of "
                                f"dtype {x.dtype}")
    return mode


def parse_tf_window(value: Any, name: str, data_format: str) -> tuple[int, int]:
    """A length-4 sequence of ints in ``data_format`` order, 1 at N and C, positive at H and W -> (h, w)."""
    expected = f"a sequence of 4 ints in {data_format} order"
    if isinstance(value, np.ndarray):
        if value.ndim != 1:
            raise ParamInvalidError(f"{name}: expected {expected}, got an array of shape {value.shape}")
        value = value.tolist()
    if not isinstance(value, (list, tuple)):
        raise ParamInvalidError(f"{name}: expected {expected}, got {value!r}")
    if len(value) != 4:
        raise ParamInvalidError(f"{name}: expected {expected}, got {len(value)} values {tuple(value)!r}")
    ints = [as_int(v, name, expected, shown=tuple(value)) for v in value]
    nc = (0, 3) if data_format == "NHWC" else (0, 1)
    hw = (1, 2) if data_format == "NHWC" else (2, 3)
    if ints[nc[0]] != 1 or ints[nc[1]] != 1:
        raise ParamInvalidError(
            f"{name}: expected 1 in the N and C positions ({name}[{nc[0]}] and {name}[{nc[1]}] for "
            f"{data_format}; pooling across the batch or the channels is not supported), got {tuple(ints)}")
    for i in hw:
        if not 1 <= ints[i] <= MAX_PARAM:
            raise ParamInvalidError(f"{name}: expected positive H and W entries (at most {MAX_PARAM}) in "
                                    f"{data_format} order, got {tuple(ints)}")
    return ints[hw[0]], ints[hw[1]]


def parse_tf_padding(padding: Any) -> str:
    """``"SAME"`` or ``"VALID"`` (str or ASCII bytes, case-sensitive as in TensorFlow)."""
    if isinstance(padding, bytes):
        try:
            padding = padding.decode("ascii")
        except UnicodeDecodeError:
            pass
    if not isinstance(padding, str) or padding not in ("SAME", "VALID"):
        raise ParamInvalidError(f"padding: expected 'SAME' or 'VALID', got {padding!r}")
    return padding



# ---- outputs ----

def prepare_out(out: Any, x: np.ndarray, inputs: Sequence[tuple[str, np.ndarray]], name: str = "out",
                allow_same: np.ndarray | None = None) -> np.ndarray:
    """Validate a user-supplied ``out`` (callers allocate when there is none).

    ``out`` must be a writeable ndarray with ``x``'s shape and dtype that shares no memory with any input;
    ``allow_same`` names the one input ``out`` may be exactly (same data pointer, shape and strides).
    """
    if not isinstance(out, np.ndarray):
        raise ParamInvalidError(f"{name}: expected None or a numpy.ndarray, got {type(out).__name__}")
    if out.shape != x.shape:
        raise ParamInvalidError(f"{name}: expected shape {x.shape} (the shape of the input), got {out.shape}")
    if out.dtype != x.dtype:
        raise ParamInvalidError(f"{name}: expected dtype {x.dtype}, got {out.dtype}")
    if not out.flags.writeable:
        raise ParamInvalidError(f"{name}: expected a writeable array, got a read-only one")
    check_no_overlap(out, inputs, name, allow_same)
    return out


def check_allocatable(shape: Sequence[int], name: str, what: str) -> None:
    """An output of ``shape`` must be addressable at all (its byte size fits in a signed 64-bit index): beyond
    that NumPy raises its own ``ValueError`` without a code.  Merely huge outputs fail later with MemoryError."""
    count = 1
    for n in shape:
        count *= int(n)
    if count * 8 > np.iinfo(np.intp).max:
        raise ParamInvalidError(f"{name}: {what} would have shape {tuple(shape)}, too large to allocate")


def check_no_overlap(out: np.ndarray, inputs: Sequence[tuple[str, np.ndarray]], name: str = "out",
                     allow_same: np.ndarray | None = None) -> None:
    """The per-call half of :func:`prepare_out`: ``out`` (already checked for shape, dtype and writeability)
    shares no memory with any input (``allow_same``: the one input it may be exactly)."""
    if out.size == 0:
        return
    for in_name, arr in inputs:
        if arr is None or arr.size == 0:
            continue
        if allow_same is not None and arr is allow_same and _same_view(out, arr):
            continue
        if _overlaps(out, arr):
            raise ParamInvalidError(f"{name}: must not share memory with {in_name}")


def _same_view(a: np.ndarray, b: np.ndarray) -> bool:
    return (a.__array_interface__["data"][0] == b.__array_interface__["data"][0]
            and a.shape == b.shape and a.strides == b.strides)


def _overlaps(a: np.ndarray, b: np.ndarray) -> bool:
    if not np.may_share_memory(a, b):
        return False
    try:
        return bool(np.shares_memory(a, b, max_work=100_000))
    except np.exceptions.TooHardError:
        return True  # cannot prove the views disjoint: refuse rather than risk aliasing
