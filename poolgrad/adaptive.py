"""Adaptive max pooling (PyTorch semantics): ``adaptive_max_pool2d`` and its backward (seed 001).

Window ``i`` along an axis of input length ``L`` and output length ``Lo`` covers
``[floor(i*L/Lo), ceil((i+1)*L/Lo))``; the kernels are the ones of :mod:`poolgrad.max_pool_indices` with these windows.
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from .config import resolve_num_threads
from .errors import ParamInvalidError
from .geometry import adaptive_windows, logical_shape, to_nchw
from .indexed import ArgmaxPlan, ScatterBackwardPlan
from .plans import OP_IDS, call, make_key
from .validation import as_array, check_grad_like, check_indices, check_input, check_rank, parse_output_size

__all__ = ["adaptive_max_pool2d", "adaptive_max_pool2d_backward"]

_FWD, _BWD = OP_IDS["adaptive_max_pool2d"], OP_IDS["adaptive_max_pool2d_backward"]


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
        dtype of the returned indices (int32 only when H*W fits in it).
    num_threads : int, optional
        OpenMP threads; default ``omp_get_max_threads()`` at call time.
        OpenMP threads; default ``omp_get_max_threads()`` at call time.

    Returns
    -------
    y, indices : ndarray
        Window maxima and flat offsets ``ih * W + iw`` in each (n, c) plane (first maximum on ties, NaN wins).
    """
    key = make_key(_FWD, (x,), (output_size, layout, index_dtype, num_threads))
    return call(key, (x,), lambda: _plan_forward(x, output_size, layout, index_dtype, num_threads))


def _plan_forward(x: Any, output_size: Any, layout: Any, index_dtype: Any, num_threads: Any,
                  ) -> tuple[ArgmaxPlan, tuple]:
    x, layout, dt = check_input(x, layout)
    nthreads = resolve_num_threads(num_threads)
    x4 = to_nchw(x, layout)
    H, W = x4.shape[2], x4.shape[3]
    out_hw = parse_output_size(output_size, (H, W))
    plan = ArgmaxPlan(x, dt, layout, lambda: (adaptive_windows(H, out_hw[0]), adaptive_windows(W, out_hw[1])),
                      (1, 1), out_hw, index_dtype, nthreads)
    return plan, (x,)


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
        OpenMP threads; default ``omp_get_max_threads()`` at call time.

    Returns
    -------
    ndarray
        ``grad_x`` (16-bit types accumulated in float64, rounded once).
    """
    key = make_key(_BWD, (grad_output, x, indices, out), (layout, deterministic, num_threads))
    return call(key, (grad_output, x, indices, out),
                lambda: _plan_backward(grad_output, x, indices, layout, out, deterministic, num_threads))


def _plan_backward(grad_output: Any, x: Any, indices: Any, layout: Any, out: Any, deterministic: Any,
                   num_threads: Any) -> tuple[ScatterBackwardPlan, tuple]:
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
    plan = ScatterBackwardPlan(x, go, indices, layout, dt, it, adaptive_windows(H, out_hw[0]),
                               adaptive_windows(W, out_hw[1]), out, deterministic, num_threads)
    return plan, (go, x, indices, out)
