"""Element-wise max pooling gradient (``aclnnMaxPoolingGrad``): ``max_pooling_grad``.

The CANN operator takes the forward output ``y`` already expanded to the shape of ``x`` (non-overlapping windows,
each window's maximum repeated over the window), so the backward pass is the element-wise selection
``dx = dy if x == y else 0``.  The kernel is in ``_elementwise.pyx.in``; this module validates, allocates and
plans the iteration (axis coalescing) so that the kernel sees as few and as long rows as the memory layout of
the four arrays allows.
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np

from . import _elementwise
from ._launch import Launch
from .config import resolve_deterministic, resolve_num_threads
from .dtypes import kernel_view
from .errors import ParamInvalidError
from .memory import OutputLayout, alloc_like_order, kernel_friendly, kernel_input
from .plans import OP_IDS, call, make_key
from .planning import GRAIN, threads_for
from .validation import as_array, check_dtype, check_no_overlap, check_same_dtype, prepare_out

__all__ = ["max_pooling_grad"]

MAX_DIMS = 8

_OP = OP_IDS["max_pooling_grad"]

# Elements per thread below which more threads do not pay (config.GRAIN; a module name so tests can shrink it
# to force many small blocks).
_GRAIN = GRAIN

# Work items per thread, taken dynamically: a thread that loses its core to another process for a while leaves
# its remaining blocks to the others instead of stalling the whole call.
_BLOCKS_PER_THREAD = 8


def max_pooling_grad(dy: Any, x: Any, y: Any, *, out: np.ndarray | None = None,
                     deterministic: bool | None = None, num_threads: int | None = None) -> np.ndarray:
    """Gradient of max pooling for an expanded forward output (``aclnnMaxPoolingGrad``).

    ``dx[i] = dy[i] if x[i] == y[i] else 0`` for every element, where ``y`` is the forward max-pooling output
    already expanded to the shape of ``x`` (non-overlapping windows: each window's maximum repeated over the
    window), so exactly the maximal elements receive the upstream gradient.

    Parameters
    ----------
    dy : array_like
        Upstream gradient. 1 to 8 dimensions (0-size allowed), any strides; float32, float64, float16 or
        bfloat16 (``ml_dtypes.bfloat16``).
    x : array_like
        Forward input; the shape and dtype of ``dy``, any strides.
    y : array_like
        Forward output expanded to the shape of ``x``; the shape and dtype of ``dy``, any strides.
    out : ndarray, optional
        Writeable array of ``dy``'s shape and dtype, any strides, that shares no memory with ``x`` or ``y``.
        It may be ``dy`` itself (in place: the same data pointer, shape and strides); any other overlap with
        ``dy`` is an error.  Returned.  An ``out`` the kernel cannot write directly (misaligned, strides that
        are not whole elements, elements that alias each other) is computed into a temporary that is then
        assigned to it with NumPy.
    deterministic : bool, optional
        Validated (None or a bool) and otherwise ignored: every output element is written once by one thread
        from its own three inputs, so the result is always bitwise identical for every run and thread count.
    num_threads : int, optional
        OpenMP threads; default ``omp_get_max_threads()`` at call time.  Small arrays use fewer threads
        (at least 32768 elements per thread).

    Returns
    -------
    ndarray
        ``dx``: the shape and dtype of ``dy``; by default laid out in ``dy``'s memory order.

    Raises
    ------
    ParamNullptrError
        ``dy``, ``x`` or ``y`` is None (code 161001).
    ParamInvalidError
        An unsupported or mixed dtype, 0 or more than 8 dimensions, different shapes, a non-array argument,
        an invalid ``out``, ``deterministic`` or ``num_threads`` (code 161002).  Inputs are never modified
        when an error is raised.

    Notes
    -----
    Equality is IEEE equality: NaN is never equal (not even to itself), ``inf == inf`` and ``-0.0 == +0.0``.
    float16/bfloat16 values compare as their exact float32 widenings do (the kernel evaluates this on the raw
    bits: equal bits and not NaN, or both zeros) and the bits of ``dy`` are copied
    unchanged (a NaN gradient keeps its payload); unselected elements are ``+0.0``.  No arithmetic is done,
    so every dtype is exact.
    """
    key = make_key(_OP, (dy, x, y, out), (deterministic, num_threads))
    return call(key, (dy, x, y, out), lambda: _plan(dy, x, y, out, deterministic, num_threads))


def _plan(dy: Any, x: Any, y: Any, out: Any, deterministic: Any, num_threads: Any) -> tuple[Any, tuple]:
    dy = as_array(dy, "dy")
    x = as_array(x, "x")
    y = as_array(y, "y")
    dt = check_dtype(dy, "dy")
    if not 1 <= dy.ndim <= MAX_DIMS:
        raise ParamInvalidError(f"dy: expected a 1-D to {MAX_DIMS}-D array, got {dy.ndim}-D with shape "
                                f"{dy.shape}")
    for name, arr in (("x", x), ("y", y)):
        check_same_dtype(arr, name, dy, "dy")
        if arr.shape != dy.shape:
            raise ParamInvalidError(f"{name}: expected shape {dy.shape} (the shape of dy), got {arr.shape}")
    resolve_deterministic(deterministic)  # validated; this operator is deterministic in both modes
    nthreads = resolve_num_threads(num_threads)
    # x and y go in as fresh view objects: prepare_out's in-place exemption (``allow_same``) is by identity,
    # and it must cover dy alone even when the caller passes the same array as dy and as x or y.
    if out is not None:
        prepare_out(out, dy, [("dy", dy), ("x", x.view()), ("y", y.view())], allow_same=dy)
    return _Plan(dt, dy, nthreads), (dy, x, y, out)


class _Plan:
    """One validated call shape: allocate (or overlap-check ``out``), run the kernel over the coalesced
    iteration planned on the first run (it depends on the four arrays' shape and strides only)."""

    def __init__(self, dt: str, dy: np.ndarray, nthreads: int) -> None:
        self.dt, self.nthreads = dt, nthreads
        self.order = OutputLayout(dy, dy.shape)
        self.run: tuple | None = None
        # the first run's kernel call, recorded for _launch.Runner (False: not replayable)
        self.launch: Launch | bool | None = None

    def __call__(self, dy: np.ndarray, x: np.ndarray, y: np.ndarray, out: Any) -> np.ndarray:
        if out is None:
            dx = self.order.empty(dy.dtype)
        else:
            check_no_overlap(out, (("dy", dy), ("x", x.view()), ("y", y.view())), allow_same=dy)
            dx = out
        if dx.size == 0:
            return dx
        target = dx
        run = self.run
        if run is None:
            # misaligned, partial-element strides, or self-overlapping (a writeable as_strided view with a zero
            # stride): compute into a dense scratch array in dx's axis order, then let NumPy assign it
            writable = _kernel_writable(dx)
        else:
            writable = run[0]
        if not writable:
            target = alloc_like_order(dx, dx.shape, dx.dtype)
        arrays = [kernel_view(kernel_input(dy)), kernel_view(kernel_input(x)), kernel_view(kernel_input(y)),
                  kernel_view(target)]
        if run is None:
            offsets, shape, strides = _coalesce(arrays)
            total = math.prod(shape)
            nthreads = threads_for(total, self.nthreads, _GRAIN)
            nblocks = 1 if nthreads == 1 else max(nthreads, min(total // _GRAIN, _BLOCKS_PER_THREAD * nthreads))
            run = self.run = (writable, offsets, shape, strides, nblocks, nthreads)
        call = (self.dt, *arrays, *run[1:])
        _elementwise.max_pooling_grad(*call)
        if target is not dx:
            dx[...] = target
        if self.launch is None:
            self.launch = self._launch(call, (dy, x, y, dx), arrays, out is None)
        return dx

    def _launch(self, call: tuple[Any, ...], sources: tuple[np.ndarray, ...], views: list[np.ndarray],
                allocates: bool) -> Launch | bool:
        """The launch record of this plan's kernel call (sources dy 0, x 1, y 2, dx 3; ``views`` the kernel's
        arrays), or False where a replay could not do what the run does (copies, a large dx from the block
        cache).  An ``out`` that is dy itself (allowed) meets dy's bytes, so those calls take the ordinary path."""
        # the kernel's struct addresses the four arrays only: later calls can run it from compiled code
        rec = Launch(_elementwise.max_pooling_grad, call, 3, kernel_records=True)
        if allocates and not rec.output(sources[3]):
            return False
        if not allocates:
            rec.takes_out((0, 1, 2))
        return all(rec.view(1 + k, k, sources[k], views[k]) for k in range(4)) and rec


def _kernel_writable(arr: np.ndarray) -> bool:
    """Whether the kernel may write ``arr`` directly: aligned, whole-element strides, no self-overlap."""
    return kernel_friendly(arr) and not _may_self_overlap(arr)


def _may_self_overlap(arr: np.ndarray) -> bool:
    """True unless the axes of ``arr`` nest without overlap (each stride spans every inner axis).

    This sufficient test accepts every layout NumPy creates (slices, transposes, flips); an array it refuses is
    written through a temporary instead, so a rare false positive costs a copy, never a wrong result."""
    axes = sorted((abs(st), n) for st, n in zip(arr.strides, arr.shape) if n > 1)
    extent = arr.dtype.itemsize
    for st, n in axes:
        if st < extent:
            return True
        extent += st * (n - 1)
    return False


def _coalesce(arrays: list[np.ndarray]) -> tuple[list[int], list[int], list[list[int]]]:
    """Plan the iteration of ``arrays`` = (dy, x, y, dx), which share one non-empty shape.

    Returns per-array element offsets of logical element (0, ..., 0), the coalesced shape and per-array
    element strides: size-1 axes dropped; every axis on which dx runs backwards flipped in all four arrays
    (allowed: the operation is element-wise); axes ordered by dx's strides, largest first; adjacent axes merged
    where they are contiguous with respect to each other in all four arrays.  Any dense layout the four arrays
    share therefore becomes a single unit-stride axis.
    """
    shape = arrays[0].shape
    strides = [[st // a.dtype.itemsize for st in a.strides] for a in arrays]
    offsets = [0, 0, 0, 0]
    axes = [d for d in range(len(shape)) if shape[d] != 1]
    for d in axes:
        if strides[3][d] < 0:
            for k in range(4):
                offsets[k] += strides[k][d] * (shape[d] - 1)
                strides[k][d] = -strides[k][d]
    axes.sort(key=lambda d: (-strides[3][d], -abs(strides[0][d])))
    dims: list[int] = []
    st_out: list[list[int]] = [[], [], [], []]
    for d in axes:
        n = shape[d]
        if dims and all(st_out[k][-1] == strides[k][d] * n for k in range(4)):
            dims[-1] *= n
            for k in range(4):
                st_out[k][-1] = strides[k][d]
            continue
        dims.append(n)
        for k in range(4):
            st_out[k].append(strides[k][d])
    if not dims:  # a single element
        return offsets, [1], [[1], [1], [1], [1]]
    return offsets, dims, st_out
