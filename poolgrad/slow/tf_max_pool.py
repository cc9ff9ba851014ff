"""Reference TensorFlow-style max pooling (``max_pool``) and its gradient (``max_pool_grad``).

Logical NCHW 4-D arrays, Python loops over output positions, float64 arithmetic.  Shares no code with the
compiled kernels (not even the output-size formula).

``nan_rule`` selects the window scan rule:

* ``"poolgrad"`` (the spec): a cell replaces the current maximum if it is greater or NaN (first maximum on
  ties, NaN beats every number, the last NaN in row-major order wins);
* ``"tf"``: TensorFlow's CPU ``MaxPoolGrad`` — the first cell is taken, later cells replace the maximum only if
  strictly greater (so a NaN wins only as the first cell of its window, and nothing replaces a NaN).
"""
from __future__ import annotations

import math

import numpy as np


def out_size(size: int, k: int, s: int, padding: str) -> tuple[int, int]:
    """(output length, padding before) along one axis for TF's ``"SAME"`` / ``"VALID"``."""
    if padding == "VALID":
        return math.ceil((size - k + 1) / s), 0
    out = math.ceil(size / s)
    total = max(0, (out - 1) * s + k - size)
    return out, total // 2


def _windows(x: np.ndarray, ksize: tuple[int, int], strides: tuple[int, int], padding: str):
    N, C, H, W = x.shape
    Ho, ph = out_size(H, ksize[0], strides[0], padding)
    Wo, pw = out_size(W, ksize[1], strides[1], padding)
    for oh in range(Ho):
        rows = [r for r in range(oh * strides[0] - ph, oh * strides[0] - ph + ksize[0]) if 0 <= r < H]
        for ow in range(Wo):
            cols = [c for c in range(ow * strides[1] - pw, ow * strides[1] - pw + ksize[1]) if 0 <= c < W]
            yield oh, ow, [(r, c) for r in rows for c in cols]   # row-major scan order


def _argmax(values: list[float], nan_rule: str) -> int:
    best, arg = values[0], 0
    for i, v in enumerate(values[1:], 1):
        if v > best or (nan_rule == "poolgrad" and math.isnan(v)):
            best, arg = v, i
    return arg


def max_pool(x: np.ndarray, ksize: tuple[int, int], strides: tuple[int, int], padding: str,
             nan_rule: str = "poolgrad") -> np.ndarray:
    """Window maxima (float64) of a logical NCHW array; windows clipped to the input (padding never wins)."""
    N, C, H, W = x.shape
    Ho, _ = out_size(H, ksize[0], strides[0], padding)
    Wo, _ = out_size(W, ksize[1], strides[1], padding)
    xf = np.asarray(x).astype(np.float64)
    y = np.empty((N, C, Ho, Wo))
    for n in range(N):
        for c in range(C):
            for oh, ow, cells in _windows(xf, ksize, strides, padding):
                vals = [xf[n, c, r, q] for r, q in cells]
                y[n, c, oh, ow] = vals[_argmax(vals, nan_rule)]
    return y


def max_pool_grad(x1: np.ndarray, grad: np.ndarray, ksize: tuple[int, int], strides: tuple[int, int],
                  padding: str, nan_rule: str = "poolgrad", acc_dtype: object = None) -> np.ndarray:
    """Gradient w.r.t. ``x1``: each output's ``grad`` added at its window's argmax, outputs visited in
    row-major order (n, c, oh, ow) — so each cell sums its contributions in output row-major order.

    The sums are float64 unless ``acc_dtype`` is given: then every partial sum is rounded to it (how a kernel
    that accumulates in the storage type behaves, e.g. TensorFlow's float16 ``MaxPoolGrad``)."""
    N, C, H, W = x1.shape
    xf = np.asarray(x1).astype(np.float64)
    gf = np.asarray(grad).astype(np.float64)
    if acc_dtype is not None:
        gf = np.asarray(grad).astype(acc_dtype)
    gx = np.zeros((N, C, H, W), dtype=np.float64 if acc_dtype is None else acc_dtype)
    for n in range(N):
        for c in range(C):
            for oh, ow, cells in _windows(xf, ksize, strides, padding):
                vals = [xf[n, c, r, q] for r, q in cells]
                r, q = cells[_argmax(vals, nan_rule)]
                gx[n, c, r, q] += gf[n, c, oh, ow]
    return gx
