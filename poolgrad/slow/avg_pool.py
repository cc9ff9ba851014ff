"""Reference average pooling (PyTorch semantics) and its backward with CANN's cube_math_type, NCHW float64 loops.

Arrays are logical NCHW 4-D.  Every output window is handled on its own (a Python loop over output positions,
NumPy over N and C), the divisor is recomputed from its definition, and all arithmetic is float64 except the
explicit roundings that cube_math_type asks for.
"""
from __future__ import annotations

import numpy as np

from .max_pool_indices import _out_size


def _window(o: int, k: int, s: int, p: int, size: int) -> tuple[int, int, int]:
    """(first, end, pool_size): the clipped window [first, end) of output o and its length before clipping."""
    start = o * s - p
    end = min(start + k, size + p)
    pool = end - start
    return max(start, 0), min(end, size), pool


def _divisor(pool: int, clipped: int, count_include_pad: bool, divisor_override: int | None) -> int:
    if divisor_override:
        return divisor_override
    return pool if count_include_pad else clipped


def avg_pool2d(x: np.ndarray, kernel: tuple[int, int], stride: tuple[int, int], padding: tuple[int, int],
               ceil_mode: bool = False, count_include_pad: bool = True,
               divisor_override: int | None = None) -> np.ndarray:
    """(N, C, H, W) -> float64 window averages."""
    N, C, H, W = x.shape
    Ho = _out_size(H, kernel[0], stride[0], padding[0], 1, ceil_mode)
    Wo = _out_size(W, kernel[1], stride[1], padding[1], 1, ceil_mode)
    xf = np.asarray(x).astype(np.float64)
    y = np.empty((N, C, Ho, Wo))
    for oh in range(Ho):
        h0, h1, ph = _window(oh, kernel[0], stride[0], padding[0], H)
        for ow in range(Wo):
            w0, w1, pw = _window(ow, kernel[1], stride[1], padding[1], W)
            div = _divisor(ph * pw, (h1 - h0) * (w1 - w0), count_include_pad, divisor_override)
            y[:, :, oh, ow] = xf[:, :, h0:h1, w0:w1].sum(axis=(2, 3)) / div
    return y


def round_hf32(values: np.ndarray) -> np.ndarray:
    """float32 values rounded to HF32 (8 exponent, 11 explicit mantissa bits, nearest-even), as float64.

    Written with frexp/round (not bit tricks): the quantum of a float32 in [2**e, 2**(e+1)) is 2**(e-11), and
    2**(-126-11) for subnormals.  Values that round past the float32 range become inf on the float32 cast."""
    v = np.asarray(values, dtype=np.float32).astype(np.float64)
    out = v.copy()
    fin = np.isfinite(v) & (v != 0)
    _, e = np.frexp(v[fin])                     # v = m * 2**e with 0.5 <= |m| < 1
    q = np.maximum(e - 1, -126) - 11
    out[fin] = np.ldexp(np.round(np.ldexp(v[fin], -q)), q)  # np.round: half to even
    return out


def round_f16(values: np.ndarray) -> np.ndarray:
    """Values rounded once to float16 (NumPy's conversion, from float32 or float64 directly), as float64."""
    return np.asarray(values).astype(np.float16).astype(np.float64)


def _acc(dtype: np.dtype) -> type:
    return np.float64 if np.dtype(dtype) == np.float64 else np.float32


def avg_pool2d_backward(grad_output: np.ndarray, x_shape: tuple[int, int, int, int], kernel: tuple[int, int],
                        stride: tuple[int, int], padding: tuple[int, int], ceil_mode: bool = False,
                        count_include_pad: bool = True, divisor_override: int | None = None,
                        cube_math_type: int = 0) -> np.ndarray:
    """float64 grad_x: each output adds ``t = grad_output / divisor`` to every cell of its clipped window.

    ``cube_math_type`` (by the dtype of ``grad_output``): 1 and 3 on float32, ``t = hf32(grad) *
    hf32(float32(1) / float32(divisor))``; 2, ``t = f16(grad) * f16(acc(1) / acc(divisor))`` with acc float64
    for float64 input, float32 otherwise; else (0, or 1 on other dtypes) the exact quotient.
    """
    dtype = np.dtype(grad_output.dtype)
    is_f32 = dtype == np.float32
    if cube_math_type == 3 and not is_f32:
        raise ValueError("USE_HF32 needs float32")
    if cube_math_type == 2 and dtype not in (np.float16, np.float32, np.float64):
        raise ValueError("USE_FP16 needs float16, float32 or float64")
    hf32 = cube_math_type in (1, 3) and is_f32
    f16 = cube_math_type == 2
    if hf32:
        go = round_hf32(grad_output)
    elif f16:
        go = round_f16(grad_output)
    else:
        go = np.asarray(grad_output).astype(np.float64)
    N, C, H, W = x_shape
    Ho, Wo = go.shape[2], go.shape[3]
    gx = np.zeros((N, C, H, W))
    acc = _acc(dtype)
    for oh in range(Ho):
        h0, h1, ph = _window(oh, kernel[0], stride[0], padding[0], H)
        for ow in range(Wo):
            w0, w1, pw = _window(ow, kernel[1], stride[1], padding[1], W)
            div = _divisor(ph * pw, (h1 - h0) * (w1 - w0), count_include_pad, divisor_override)
            if hf32 or f16:
                recip = acc(1) / acc(div)
                mult = round_hf32(np.float32(recip)) if hf32 else round_f16(recip)
                t = go[:, :, oh, ow] * float(mult)
            else:
                t = go[:, :, oh, ow] / div
            gx[:, :, h0:h1, w0:w1] += t[:, :, None, None]
    return gx
