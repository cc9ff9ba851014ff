"""Reference max pooling with indices (PyTorch semantics), NCHW float64 loops."""
from __future__ import annotations

import math
from typing import Iterable

import numpy as np


def _out_size(size: int, k: int, s: int, p: int, d: int, ceil_mode: bool) -> int:
    num = size + 2 * p - d * (k - 1) - 1
    out = (math.ceil(num / s) if ceil_mode else math.floor(num / s)) + 1
    if ceil_mode and (out - 1) * s >= size + p:
        out -= 1
    return out


def window_argmax(xf: np.ndarray, rows: Iterable[int], cols: Iterable[int]) -> tuple[np.ndarray, np.ndarray]:
    """Max and flat argmax ``ih * W + iw`` of every (n, c) plane of ``xf`` over the window ``rows x cols``,
    scanned row-major, a cell replacing the running maximum if it is greater or NaN."""
    N, C, _, W = xf.shape
    y = np.empty((N, C))
    ind = np.empty((N, C), np.int64)
    cells = [(ih, iw) for ih in rows for iw in cols]
    for n in range(N):
        for c in range(C):
            best, arg = -math.inf, None
            for ih, iw in cells:
                v = xf[n, c, ih, iw]
                if arg is None or v > best or math.isnan(v):
                    best, arg = v, ih * W + iw
            y[n, c], ind[n, c] = best, arg
    return y, ind


def max_pool2d_with_indices(x: np.ndarray, kernel: tuple[int, int], stride: tuple[int, int],
                            padding: tuple[int, int], dilation: tuple[int, int] = (1, 1),
                            ceil_mode: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """(N, C, H, W) -> values (float64) and int64 flat indices, scanning each window row-major with
    "replace if greater or NaN"."""
    N, C, H, W = x.shape
    Ho = _out_size(H, kernel[0], stride[0], padding[0], dilation[0], ceil_mode)
    Wo = _out_size(W, kernel[1], stride[1], padding[1], dilation[1], ceil_mode)
    xf = x.astype(np.float64)
    y = np.empty((N, C, Ho, Wo))
    ind = np.empty((N, C, Ho, Wo), np.int64)
    for oh in range(Ho):
        rows = [ih for a in range(kernel[0]) if 0 <= (ih := oh * stride[0] - padding[0] + a * dilation[0]) < H]
        for ow in range(Wo):
            cols = [iw for b in range(kernel[1]) if 0 <= (iw := ow * stride[1] - padding[1] + b * dilation[1]) < W]
            y[:, :, oh, ow], ind[:, :, oh, ow] = window_argmax(xf, rows, cols)
    return y, ind


def max_pool2d_with_indices_backward(grad_output: np.ndarray, x_shape: tuple[int, int, int, int],
                                     indices: np.ndarray) -> np.ndarray:
    """grad_x[n, c].flat[indices] += grad_output, in float64, outputs visited in row-major order."""
    N, C, H, W = x_shape
    gx = np.zeros((N, C, H * W))
    # NaN gradients are valid input (signalling ones too, which the widening and the adds flag as invalid)
    with np.errstate(invalid="ignore"):
        go = grad_output.astype(np.float64)
        for n in range(N):
            for c in range(C):
                np.add.at(gx[n, c], indices[n, c].reshape(-1), go[n, c].reshape(-1))
    return gx.reshape(N, C, H, W)
