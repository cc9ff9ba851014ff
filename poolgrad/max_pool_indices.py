"""Max pooling with argmax indices (PyTorch semantics): ``max_pool2d_with_indices`` and its backward."""
from __future__ import annotations

from typing import Any, Callable, Sequence

import functools

import numpy as np

from . import _max_pool_indices
from ._scatter import channel_inner, scatter_grad
from .config import resolve_deterministic, resolve_num_threads, threads_for
from .dtypes import kernel_view
from .errors import ParamInvalidError
from .params import (as_array, check_dtype, check_index_dtype, check_rank, check_same_dtype, kernel_input,
                     kernel_output, parse_bool, parse_layout, parse_pair, parse_stride, pool_output_size,
                     pool_windows, prepare_out, thread_rows, to_nchw, alloc_like_order, alloc_like_order_zeroed)

__all__ = ["max_pool2d_with_indices", "max_pool2d_with_indices_backward"]

IntOrPair = int | Sequence[int]


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


def logical_shape(x: np.ndarray, layout: str, c: int, h: int, w: int) -> tuple[int, ...]:
    """Shape of an array with ``x``'s rank and batch in ``layout`` order for (C, H, W) = (c, h, w)."""
    inner = (c, h, w) if layout == "NCHW" else (h, w, c)
    return inner if x.ndim == 3 else (x.shape[0],) + inner


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


class PoolParams:
    """Parsed torch-style pooling parameters and the per-axis window tables they imply."""

    def __init__(self, x4: np.ndarray, kernel_size: Any, stride: Any, padding: Any, dilation: Any,
                 ceil_mode: Any, max_padding: str = "max") -> None:
        self.kernel = parse_pair(kernel_size, "kernel_size")
        self.stride = parse_stride(stride, self.kernel)
        self.padding = parse_pair(padding, "padding", minimum=0)
        self.dilation = parse_pair(dilation, "dilation")
        self.ceil_mode = parse_bool(ceil_mode, "ceil_mode")
        for axis, (k, p, d) in enumerate(zip(self.kernel, self.padding, self.dilation)):
            limit = ((k - 1) * d + 1) // 2 if max_padding == "max" else k // 2
            if p > limit:
                rule = ("pad should be at most half of effective kernel size" if max_padding == "max"
                        else "pad should be at most half of kernel size")
                raise ParamInvalidError(
                    f"padding: expected at most {limit} along {'HW'[axis]} ({rule}: kernel_size={self.kernel}, "
                    f"dilation={self.dilation}), got {self.padding}")
        H, W = x4.shape[2], x4.shape[3]
        self.out = tuple(pool_output_size(n, k, s, p, d, self.ceil_mode) for n, k, s, p, d in
                         zip((H, W), self.kernel, self.stride, self.padding, self.dilation))
        if min(self.out) < 1:
            raise ParamInvalidError(
                f"x: output size is too small: input (H, W) = {(H, W)} with {self.describe()} gives {self.out}")
        self.hw = (H, W)

    # Window tables are built on first use, so a forward allocates its (possibly impossible) output first.
    @functools.cached_property
    def win_h(self) -> dict[str, np.ndarray]:
        return pool_windows(self.hw[0], self.out[0], self.kernel[0], self.stride[0], self.padding[0],
                            self.dilation[0])

    @functools.cached_property
    def win_w(self) -> dict[str, np.ndarray]:
        return pool_windows(self.hw[1], self.out[1], self.kernel[1], self.stride[1], self.padding[1],
                            self.dilation[1])

    def describe(self) -> str:
        return (f"kernel_size={self.kernel}, stride={self.stride}, padding={self.padding}, "
                f"dilation={self.dilation}, ceil_mode={self.ceil_mode}")


# The vectorised forward keeps one float64 and one int32 scratch row of Wo (times C) lanes per thread and a
# table entry per kernel cell; beyond these sizes the per-window kernel runs instead.
UNIFORM_MAX_ROW = 1 << 20       # also bounds W (times C), the phase-split input row of strided windows
UNIFORM_MAX_CELLS = 1 << 16


def argmax_pool(x: np.ndarray, x4: np.ndarray, dt: str, layout: str,
                windows: Callable[[], tuple[dict, dict]], step: tuple[int, int], out_hw: tuple[int, int],
                index_dtype: Any, nthreads: int, uniform: PoolParams | None = None,
                ) -> tuple[np.ndarray, np.ndarray]:
    """Shared forward: window max and flat argmax for any per-axis window tables.

    ``windows()`` builds the (height, width) tables; it is called after the outputs are allocated, so an
    output size that cannot exist fails in the allocation before any table of that length is built.
    ``uniform``: the windows are PyTorch-style ones from these parameters, which allows the vectorised kernel.
    """
    try:
        idt = np.dtype(index_dtype)
    except (TypeError, ValueError):
        raise ParamInvalidError(f"index_dtype: expected int32 or int64, got {index_dtype!r}") from None
    if idt not in (np.dtype(np.int32), np.dtype(np.int64)):
        raise ParamInvalidError(f"index_dtype: expected int32 or int64, got {idt}")
    it = check_index_dtype(np.empty(0, idt), "index_dtype", x4.shape[2] * x4.shape[3])
    shape = logical_shape(x, layout, x4.shape[1], *out_hw)
    y = alloc_like_order(x, shape, x.dtype)
    ind = alloc_like_order(x, shape, idt)
    win_h, win_w = windows()
    if np.any(win_h["count"] == 0) or np.any(win_w["count"] == 0):
        raise ParamInvalidError("x: some pooling window contains no input cell (padding and dilation leave "
                                "it entirely outside the input)")
    if x4.shape[0] == 0:
        return y, ind
    xk = kernel_view(kernel_input(x4))
    y4 = kernel_view(to_nchw(y, layout))
    nthreads = threads_for(y.size * int(win_h["count"].max()) * int(win_w["count"].max()), nthreads)
    ind4 = to_nchw(ind, layout)
    channel = channel_inner(xk)
    if uniform is None or not uniform_argmax(dt, it, xk, y4, ind4, uniform.kernel, uniform.stride,
                                             uniform.padding, uniform.dilation, nthreads):
        _max_pool_indices.argmax_forward(dt, it, xk, y4, ind4, win_h["start"], win_h["count"], step[0],
                                         win_w["start"], win_w["count"], step[1], channel, nthreads)
    return y, ind


def uniform_argmax(dt: str, it: str, xk: np.ndarray, y4: np.ndarray | None, ind4: np.ndarray,
                   kernel: tuple[int, int], stride: tuple[int, int], padding: tuple[int, int],
                   dilation: tuple[int, int], nthreads: int) -> bool:
    """The vectorised forward for PyTorch-style windows (output (oh, ow) covers rows oh*sh - ph + a*dh and
    columns ow*sw - pw + b*dw, clipped to the input) over logical-NCHW kernel views; ``y4`` None computes the
    indices only.  Returns False, having done nothing, when the row or the kernel is too big for it."""
    channel = channel_inner(xk)
    cd = xk.shape[1] if channel else 1
    lanes = ind4.shape[3] * cd
    if max(lanes, xk.shape[3] * cd) > UNIFORM_MAX_ROW or kernel[0] * kernel[1] > UNIFORM_MAX_CELLS:
        return False
    (kh, kw), (dh, dw) = kernel, dilation
    koff_h = np.repeat(np.arange(kh, dtype=np.int64) * dh, kw)
    koff_w = np.tile(np.arange(kw, dtype=np.int64) * dw, kh)
    best = thread_rows(nthreads, lanes, np.float64)
    kidx = thread_rows(nthreads, lanes, np.int32)
    rows = thread_rows(nthreads, 2 * xk.shape[3] * cd * xk.dtype.itemsize, np.uint8)
    _max_pool_indices.argmax_forward_uniform(dt, it, xk, y4, ind4, tuple(kernel), tuple(stride), tuple(padding),
                                             tuple(dilation), koff_h, koff_w, koff_h * xk.shape[3] + koff_w,
                                             np.arange(lanes, dtype=np.int64) // cd * stride[1],
                                             channel, best, kidx, rows, nthreads)
    return True


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
    x, layout, dt = check_input(x, layout)
    nthreads = resolve_num_threads(num_threads)
    x4 = to_nchw(x, layout)
    pp = PoolParams(x4, kernel_size, stride, padding, dilation, ceil_mode)
    return argmax_pool(x, x4, dt, layout, lambda: (pp.win_h, pp.win_w), pp.dilation, pp.out, index_dtype,
                       nthreads, uniform=pp)


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
        ``grad_x``, shape and dtype of ``x``. 16-bit types are accumulated in float32 and rounded once.
    """
    x, layout, dt = check_input(x, layout)
    x4 = to_nchw(x, layout)
    pp = PoolParams(x4, kernel_size, stride, padding, dilation, ceil_mode)
    expected = logical_shape(x, layout, x4.shape[1], *pp.out)
    what = f"{pp.describe()} and x of shape {x.shape}"
    grad_output = check_grad_like(grad_output, "grad_output", x, expected, what)
    indices, it = check_indices(indices, x4, x.ndim, expected, what)
    return scatter_backward(grad_output, x, indices, layout, dt, it, pp.win_h, pp.win_w, out,
                            deterministic, num_threads)


def scatter_backward(grad_output: np.ndarray, x: np.ndarray, indices: np.ndarray, layout: str, dt: str,
                     it: str, win_h: dict, win_w: dict, out: Any, deterministic: Any, num_threads: Any,
                     ) -> np.ndarray:
    """Validated tail shared with adaptive pooling: resolve modes, allocate, run the scatter kernels."""
    det = resolve_deterministic(deterministic)
    nthreads = resolve_num_threads(num_threads)
    # A large output allocated here may be freshly mapped memory, whose pages the OS zero-fills on first touch:
    # then the kernels skip zeroing it (a full write of grad_x saved).  Recycled or small blocks hold old data.
    if out is None:
        gx, fresh_zeros = alloc_like_order_zeroed(x, x.shape, x.dtype)
    else:
        gx, fresh_zeros = prepare_out(out, x, [("grad_output", grad_output), ("x", x), ("indices", indices)]), False
    gx4 = to_nchw(gx, layout)
    if gx4.shape[0] == 0:
        return gx
    target = kernel_output(gx4)
    scatter_grad(dt, it, kernel_view(kernel_input(to_nchw(grad_output, layout))),
                 kernel_input(to_nchw(indices, layout)), kernel_view(target),
                 win_h["lo"], win_h["hi"], det, nthreads, prezeroed=fresh_zeros and target is gx4,
                 col_lo=win_w["lo"], col_hi=win_w["hi"])
    if target is not gx4:
        gx4[...] = target
    return gx
