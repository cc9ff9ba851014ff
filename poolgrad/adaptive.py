"""Adaptive max pooling (PyTorch semantics): ``adaptive_max_pool2d`` and its backward (seed 001).

Window ``i`` along an axis of input length ``L`` and output length ``Lo`` covers
``[floor(i*L/Lo), ceil((i+1)*L/Lo))``; the kernels are the ones of :mod:`poolgrad.max_pool_indices` with these windows.
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from .errors import ParamInvalidError
from .max_pool_indices import (argmax_pool, check_grad_like, check_indices, check_input, logical_shape,
                       scatter_backward)
from .config import resolve_num_threads
from .params import MAX_PARAM, adaptive_windows, as_array, check_rank, to_nchw

__all__ = ["adaptive_max_pool2d", "adaptive_max_pool2d_backward"]


def _parse_output_size(output_size: Any, hw: tuple[int, int]) -> tuple[int, int]:
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


def adaptive_max_pool2d(x: Any, output_size: int | Sequence[int | None], *, layout: str = "NCHW",
                        index_dtype: Any = np.int64,
                        num_threads: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Adaptive 2-D max pooling with flat argmax indices (``torch.nn.functional.adaptive_max_pool2d`` with
    ``return_indices=True``).

    Parameters
    ----------
    x : array_like
        (N, C, H, W) or (C, H, W) (``layout="NCHW"``), or (N, H, W, C) / (H, W, C) (``"NHWC"``); float32,
        float64, float16 or bfloat16; any strides.
    output_size : int or sequence of 1 or 2 (int or None)
        (Ho, Wo); None keeps the input size along that axis.  May exceed the input size.
    layout : {"NCHW", "NHWC"}
    index_dtype : int32 or int64
    num_threads : int, optional
        OpenMP threads; default ``omp_get_max_threads()`` at call time.

    Returns
    -------
    y, indices : ndarray
        Window maxima and flat offsets ``ih * W + iw`` in each (n, c) plane (first maximum on ties, NaN wins).
    """
    x, layout, dt = check_input(x, layout)
    nthreads = resolve_num_threads(num_threads)
    x4 = to_nchw(x, layout)
    H, W = x4.shape[2], x4.shape[3]
    out_hw = _parse_output_size(output_size, (H, W))
    return argmax_pool(x, x4, dt, layout,
                       lambda: (adaptive_windows(H, out_hw[0]), adaptive_windows(W, out_hw[1])),
                       (1, 1), out_hw, index_dtype, nthreads)


def adaptive_max_pool2d_backward(grad_output: Any, x: Any, indices: Any, *, layout: str = "NCHW",
                                 out: np.ndarray | None = None, deterministic: bool | None = None,
                                 num_threads: int | None = None) -> np.ndarray:
    """Gradient of :func:`adaptive_max_pool2d` (``aclnnAdaptiveMaxPool2dBackward``).

    ``grad_x`` is zero except ``grad_x[n, c, flat(indices[n, c, oh, ow])] += grad_output[n, c, oh, ow]``.
    The output size is read from ``grad_output``'s shape.

    Parameters
    ----------
    grad_output : array_like
        Gradient of the pooled output: x's rank, dtype, N and C; (Ho, Wo) >= 1.
    x : array_like
        The forward input (only shape, dtype and memory order are used).
    indices : array_like of int32 or int64
        ``grad_output``'s shape; every index in ``[0, H*W)`` (checked, position of the first bad one reported).
    layout : {"NCHW", "NHWC"}
    out : ndarray, optional
        Writeable array of x's shape and dtype overlapping no input; returned.
    deterministic : bool, optional
        True: atomic-free, bitwise identical for every thread count; None: the process-wide setting.
    num_threads : int, optional

    Returns
    -------
    ndarray
        ``grad_x`` (16-bit types accumulated in float32, rounded once).
    """
    x, layout, dt = check_input(x, layout)
    x4 = to_nchw(x, layout)
    N, C, H, W = x4.shape
    go = as_array(grad_output, "grad_output")
    check_rank(go, "grad_output", (x.ndim,))
    go4 = to_nchw(go, layout)
    if go4.shape[:2] != (N, C) or min(go4.shape[2:]) < 1:
        expected = logical_shape(x, layout, C, "Ho", "Wo")
        raise ParamInvalidError(f"grad_output: expected shape {expected} with Ho, Wo >= 1 for x of shape "
                                f"{x.shape} ({layout}), got {go.shape}")
    out_hw = go4.shape[2], go4.shape[3]
    expected = logical_shape(x, layout, C, *out_hw)
    what = f"output_size={out_hw} and x of shape {x.shape}"
    go = check_grad_like(go, "grad_output", x, expected, what)
    indices, it = check_indices(indices, x4, x.ndim, expected, what)
    return scatter_backward(go, x, indices, layout, dt, it, adaptive_windows(H, out_hw[0]),
                            adaptive_windows(W, out_hw[1]), out, deterministic, num_threads)
