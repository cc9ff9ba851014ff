"""Reference adaptive max pooling, NCHW float64 loops."""
from __future__ import annotations

import numpy as np

from .max_pool_indices import max_pool2d_with_indices_backward as _scatter, window_argmax


def _window(i: int, size: int, out: int) -> range:
    return range((i * size) // out, -((-(i + 1) * size) // out))


def adaptive_max_pool2d(x: np.ndarray, output_size: tuple[int, int]) -> tuple[np.ndarray, np.ndarray]:
    N, C, H, W = x.shape
    Ho, Wo = output_size
    xf = x.astype(np.float64)
    y = np.empty((N, C, Ho, Wo))
    ind = np.empty((N, C, Ho, Wo), np.int64)
    for oh in range(Ho):
        for ow in range(Wo):
            y[:, :, oh, ow], ind[:, :, oh, ow] = window_argmax(xf, _window(oh, H, Ho), _window(ow, W, Wo))
    return y, ind


def adaptive_max_pool2d_backward(grad_output: np.ndarray, x_shape: tuple[int, int, int, int],
                                 indices: np.ndarray) -> np.ndarray:
    """The same scatter as max pooling: grad_x[n, c].flat[indices] += grad_output."""
    return _scatter(grad_output, x_shape, indices)
