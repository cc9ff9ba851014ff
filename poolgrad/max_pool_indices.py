"""Max pooling with argmax indices (PyTorch semantics): ``max_pool2d_with_indices`` and its backward
(``aclnnMaxPool2dWithIndicesBackward``)."""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from .config import resolve_num_threads
from .geometry import logical_shape, to_nchw
from .indexed import ArgmaxPlan, ScatterBackwardPlan
from .plans import OP_IDS, call, make_key
from .validation import check_grad_like, check_indices, check_input, parse_pool

__all__ = ["max_pool2d_with_indices", "max_pool2d_with_indices_backward"]

IntOrPair = int | Sequence[int]

_FWD, _BWD = OP_IDS["max_pool2d_with_indices"], OP_IDS["max_pool2d_with_indices_backward"]


def max_pool2d_with_indices(x: Any, kernel_size: IntOrPair, stride: IntOrPair | None = None,
                            padding: IntOrPair = 0, dilation: IntOrPair = 1, ceil_mode: bool = False, *,
                            layout: str = "NCHW", index_dtype: Any = np.int64,
                            num_threads: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """2-D max pooling returning values and flat argmax indices (``torch.nn.functional.max_pool2d`` with
    ``return_indices=True``).

    Parameters
    ----------
    x : array_like
        (N, C, H, W) or (C, H, W) for ``layout="NCHW"``; (N, H, W, C) or (H, W, C) for ``"NHWC"``. float32,
        float64, float16 or bfloat16, any strides.
    kernel_size, stride, padding, dilation : int or sequence of 1 or 2 ints
        ``stride=None`` (or empty) means ``kernel_size``; ``0 <= padding <= ((kernel_size-1)*dilation+1)//2``.
    ceil_mode : bool
        Round the output size up (the last window must still start inside the input or the left padding).
    layout : {"NCHW", "NHWC"}
        Logical axis order of ``x`` and of the results.
    index_dtype : int32 or int64
        dtype of the returned indices.
    num_threads : int, optional
        OpenMP threads; default ``omp_get_max_threads()`` at call time.

    Returns
    -------
    y : ndarray
        Window maxima, dtype of ``x``, same memory order as ``x``.
    indices : ndarray
        Flat offsets ``ih * W + iw`` of each maximum inside its (n, c) plane. Ties go to the first maximum in
        row-major window order; NaN beats every number and the last NaN in scan order wins.
    """
    key = make_key(_FWD, (x,), (kernel_size, stride, padding, dilation, ceil_mode, layout, index_dtype,
                                num_threads))
    return call(key, (x,), lambda: _plan_forward(x, kernel_size, stride, padding, dilation, ceil_mode, layout,
                                                 index_dtype, num_threads))


def _plan_forward(x: Any, kernel_size: Any, stride: Any, padding: Any, dilation: Any, ceil_mode: Any,
                  layout: Any, index_dtype: Any, num_threads: Any) -> tuple[ArgmaxPlan, tuple]:
    x, layout, dt = check_input(x, layout)
    nthreads = resolve_num_threads(num_threads)
    pp = parse_pool(to_nchw(x, layout), kernel_size, stride, padding, dilation, ceil_mode)
    plan = ArgmaxPlan(x, dt, layout, lambda: (pp.win_h, pp.win_w), pp.dilation, pp.out, index_dtype, nthreads,
                      uniform=pp)
    return plan, (x,)


def max_pool2d_with_indices_backward(grad_output: Any, x: Any, indices: Any, kernel_size: IntOrPair,
                                     stride: IntOrPair | None = None, padding: IntOrPair = 0,
                                     dilation: IntOrPair = 1, ceil_mode: bool = False, *,
                                     layout: str = "NCHW", out: np.ndarray | None = None,
                                     deterministic: bool | None = None,
                                     num_threads: int | None = None) -> np.ndarray:
    """Gradient of :func:`max_pool2d_with_indices` with respect to ``x`` (``aclnnMaxPool2dWithIndicesBackward``).

    ``grad_x`` is zero except ``grad_x[n, c, flat(indices[n, c, oh, ow])] += grad_output[n, c, oh, ow]``.

    Parameters
    ----------
    grad_output : array_like
        Gradient of the pooled output; the shape the forward gives for ``x`` and the parameters, dtype of ``x``.
    x : array_like
        The forward input (only its shape, dtype and memory order are used).
    indices : array_like of int32 or int64
        Flat argmax offsets ``ih * W + iw``, each in ``[0, H*W)`` (checked: a bad one raises
        :class:`ParamInvalidError` naming its position, and nothing outside the output is written).
    kernel_size, stride, padding, dilation, ceil_mode, layout
        As for :func:`max_pool2d_with_indices`.
    out : ndarray, optional
        Writeable array of ``x``'s shape and dtype that overlaps no input; returned.  Its contents are
        unspecified if an error is raised.
    deterministic : bool, optional
        True: atomic-free, bitwise identical for every thread count.  None: the process-wide setting.
    num_threads : int, optional
        OpenMP threads; default ``omp_get_max_threads()`` at call time.

    Returns
    -------
    ndarray
        ``grad_x``, shape and dtype of ``x``. 16-bit types are accumulated in float64 and rounded once.
    """
    key = make_key(_BWD, (grad_output, x, indices, out), (kernel_size, stride, padding, dilation, ceil_mode,
                                                          layout, deterministic, num_threads))
    return call(key, (grad_output, x, indices, out),
                lambda: _plan_backward(grad_output, x, indices, kernel_size, stride, padding, dilation, ceil_mode,
                                       layout, out, deterministic, num_threads))


def _plan_backward(grad_output: Any, x: Any, indices: Any, kernel_size: Any, stride: Any, padding: Any,
                   dilation: Any, ceil_mode: Any, layout: Any, out: Any, deterministic: Any, num_threads: Any,
                   ) -> tuple[ScatterBackwardPlan, tuple]:
    x, layout, dt = check_input(x, layout)
    x4 = to_nchw(x, layout)
    pp = parse_pool(x4, kernel_size, stride, padding, dilation, ceil_mode)
    expected = logical_shape(x, layout, x4.shape[1], *pp.out)
    what = f"{pp.describe()} and x of shape {x.shape}"
    grad_output = check_grad_like(grad_output, "grad_output", x, expected, what)
    indices, it = check_indices(indices, x4, x.ndim, expected, what)
    plan = ScatterBackwardPlan(x, grad_output, indices, layout, dt, it, pp.win_h, pp.win_w, out, deterministic,
                               num_threads)
    return plan, (grad_output, x, indices, out)
