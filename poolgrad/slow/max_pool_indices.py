"""Reference max pooling with indices (PyTorch semantics), NCHW float64 loops."""
from __future__ import annotations

import math

import numpy as np


def _out_size(size: int, k: int, s: int, p: int, d: int, ceil_mode: bool) -> int:
    num = size + 2 * p - d * (k - 1) - 1
    out = (math.ceil(num / s) if ceil_mode else math.floor(num / s)) + 1
    if ceil_mode and (out - 1) * s >= size + p:
        out -= 1
    return out


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
    for n in range(N):
        for c in range(C):
            for oh in range(Ho):
                for ow in range(Wo):
                    best, arg = -math.inf, None
                    for a in range(kernel[0]):
                        ih = oh * stride[0] - padding[0] + a * dilation[0]
                        if not 0 <= ih < H:
                            continue
                        for b in range(kernel[1]):
                            iw = ow * stride[1] - padding[1] + b * dilation[1]
                            if not 0 <= iw < W:
                                continue
                            v = xf[n, c, ih, iw]
                            if arg is None or v > best or math.isnan(v):
                                best, arg = v, ih * W + iw
                    y[n, c, oh, ow] = best
                    ind[n, c, oh, ow] = arg
    return y, ind


def max_pool2d_with_indices_backward(grad_output: np.ndarray, x_shape: tuple[int, int, int, int],
                                     indices: np.ndarray) -> np.ndarray:
    """grad_x[n, c].flat[indices] += grad_output, in float64, outputs visited in row-major order."""
    N, C, H, W = x_shape
    gx = np.zeros((N, C, H * W))
    go = grad_output.astype(np.float64)
    for n in range(N):
        for c in range(C):
            np.add.at(gx[n, c], indices[n, c].reshape(-1), go[n, c].reshape(-1))
    return gx.reshape(N, C, H, W)
