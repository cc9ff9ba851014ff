"""TensorFlow-compatible max pooling: ``max_pool`` (``tf.nn.max_pool2d``) and ``max_pool_grad``
(``tf.raw_ops.MaxPoolGrad``, the CANN ``MaxPoolGrad`` operator, seed 000).

Differences from TensorFlow's CPU kernels, all deliberate (see the docstrings):

* ``data_format="NCHW"`` is supported (TensorFlow's CPU kernels refuse it), with any memory strides.
* NaN: a window's argmax follows the spec's rule - a cell replaces the running maximum if it is greater *or NaN*,
  so NaN beats every number and the last NaN in row-major scan order wins.  TensorFlow's ``MaxPoolGrad`` takes a
  NaN only when it is the first cell of its window (later cells replace the maximum only when strictly greater,
  which is never true against or for a NaN), and ``tf.nn.max_pool2d`` ignores NaNs unless the window is all NaN.
* A window of ``-inf`` gives ``-inf`` in :func:`max_pool` (TensorFlow's forward gives ``-FLT_MAX``).
* float16/bfloat16 gradients are accumulated in float64 and rounded once (TensorFlow's float16 kernel sums in
  float16).  A float16/bfloat16 signalling NaN comes out of :func:`max_pool` quiet (payload kept).
* ``x2``'s values are ignored, as in TensorFlow and CANN, unless ``check_orig_output=True`` asks to verify them.

Both functions run the kernels of ``_tf_max_pool.pyx`` (see its docstring for the band / ring design).
"""
from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np

from . import _tf_max_pool
from ._launch import Launch
from ._scatter import scatter_grad
from .config import resolve_deterministic, resolve_num_threads
from .dtypes import kernel_view
from .errors import ParamInvalidError
from .geometry import tf_output_size, tf_windows, to_nchw
from .indexed import uniform_argmax
from .memory import (OutputLayout, ScratchPool, alloc_like_order, kernel_friendly, kernel_input, kernel_output,
                     thread_rows)
from .plans import OP_IDS, call, make_key
from .planning import channel_inner, threads_for
from .validation import (as_array, check_dtype, check_rank, parse_bool, parse_layout, parse_tf_padding,
                         parse_tf_window, check_no_overlap, prepare_out)

__all__ = ["max_pool", "max_pool_grad"]

IntSeq4 = Sequence[int]

_FWD, _BWD = OP_IDS["max_pool"], OP_IDS["max_pool_grad"]

# Aim for at least this many work items (image or plane bands) per thread, for balance.
TF_ITEMS_PER_THREAD = 4
# Channels-last inputs with fewer channels than this take the composed gradient (_run_grad_composed): the fused
# kernel's channel vectors do not fill there.  Measured on 1x1024x1024x3 k3s1 SAME: 14.8 -> 8.1 ms at 1 thread,
# 8.0 -> 4.5 ms at 2; with 16 channels the fused kernel was faster (1.1 against 1.4 ms on 8x112x112x16 k3s2).
COMPOSE_MAX_C = 8
# A band is at least this many times the window height (bounds the halo recomputation at band edges).
MIN_BAND_WINDOWS = 2
# Upper bound on the per-thread accumulation ring (bytes); only huge windows times huge rows reach it.
RING_BUDGET = 32 << 20
# grad_x is written with streaming stores (no read for ownership, no cache pollution) where that cannot cost a
# partial-line write: at least STREAM_BYTES in all, in rows (the values the kernel stores at once: W of a plane,
# W * C of a channels-last image row) that start and end on 16-byte boundaries (_stream_rows; the kernel checks
# each row's address too, pg_stream_whole), so that rows written in address order fill every line with
# streaming stores alone.  A line that gets ordinary stores (the unaligned head or tail of a row) as well as
# streaming ones is written twice: 56-byte rows (NCHW 24x512x14x14 k3s2, 9 MiB) took 3.8x - 4.3x the time of
# cached stores, the batch 20 -> 24 cliff of issue 8 (5.8x per element in bench/sweep.py) when the rule was the
# size alone.  With the rule, streamed / cached CPU time (float32, 1 thread, k3s2 VALID, out= preallocated,
# median of 9 interleaved rounds, ``PYTHONPATH=. python bench/experiments/tf_stream_rows.py 9 1``): 448-byte
# rows (NCHW 32x64x112x112, bench/suite.py's row) 0.98x, 4 KiB rows at 8 - 16 MiB 0.94x - 0.97x, channels-last
# rows of 14 - 28 KiB at 9 - 24 MiB 0.94x - 0.99x, 112 - 256-byte rows 1.06x - 1.13x; bfloat16 0.91x - 1.12x;
# below the size 0.2 MiB: 1.27x.  One thread is mostly compute-bound here; the size threshold is kept as it was
# (2-thread timings on this shared machine were not usable when this was measured).
STREAM_BYTES = 8 << 20
# The channels-last kernel's ring offsets are int32 (vectorisation): a ring (at most max(2 * RING_BUDGET, one
# row)) must hold fewer elements, so rows of W*C >= RING_INT32 elements take the plane path.
RING_INT32 = 1 << 30
# Plane path: run the unclipped windows of a row in vector lanes (False: scalar loop only; for tests).
VECTOR_PLANE = True
# Small planes (plane-contiguous memory) run as groups of planes interleaved into channels-last tiles, vector
# lanes over planes (_tf_max_pool._planes_*): planes of at most TF_PLANES_MAX_CELLS cells, at least
# TF_PLANES_MIN planes, groups of at most 64 planes and TF_PLANES_TILE_BYTES of x per tile (L1/L2-sized tiles).
# The plane path spends its time on per-row and per-window overheads there (rows of 4 - 14 windows fill a part
# of one vector).  Measured, planes path / plane path time through plans, NCHW, ~2**19 elements, 1 thread,
# median of 5 interleaved rounds (``PYTHONPATH=. python bench/experiments/tf_planes_threshold.py 5 1``), forward
# and gradient: float32 7x7 0.11 - 0.28, 13x13 / 14x14 0.21 - 0.44, 28x28 0.48 - 0.80, 32x32 k3s2 SAME 0.38 /
# 0.52 but k2s2 VALID 2.35 / 1.26 (16 windows per row: exactly the plane path's AVX-512 vector), 45x45 1.0 - 1.6;
# bfloat16 7x7 - 14x14 0.21 - 0.53, 28x28 0.79 - 1.06, 32x32 0.56 - 1.51, 45x45 and up 1.09 - 1.94.  So the
# limit is 28x28 cells for every dtype.  On bench/overhead.py's 2x16x8x8 k2s2 (32 planes, one group) the
# kernel call went from 27.7 to 5.1 us (gradient) and 21.5 to 3.0 us (forward), median of 8000 calls
# (``PYTHONPATH=. python bench/experiments/tf_small_planes.py 8000``, before and after).
TF_PLANES_MIN = 8
TF_PLANES_MAX_CELLS = 28 * 28
TF_PLANES_TILE_BYTES = 64 << 10
# False: never the planes path (for tests).
PLANES = True
# The gather path (_tf_max_pool's ``gather``, pgtf_gather_* in src_c/pg_tf_max_pool.h) for plane-contiguous
# memory where the windows tile the input without overlap or clipping (k == s, no padding: VALID, or SAME where
# s divides the size) and are two columns wide (its vector code's case; k2s2 is the common one): every grad_x
# cell then lies in at most one window, so the gradient is a gather - each cell gets its window's grad if it is
# the window's argmax, else 0 - with no ring, scatter, zeroing pass or tiles.  Taken at every size: gather / ring
# path time through plans with out=, NCHW float32 k2s2 VALID, median of 9 interleaved rounds
# (``PYTHONPATH=. python bench/experiments/tfgrad_ab.py 9 1``, shared machine, load 3 - 5): 2x16x8x8 0.44,
# 8x256x13x13 0.74, 8x512x14x14 0.50, 8x128x28x28 0.42, 8x64x32x32 0.30, 8x192x56x56 0.36, 8x64x112x112 0.49
# (the control row, 1x64x112x112 k3s2 SAME, same path on both sides: 1.07); at 2 threads 0.12 - 0.86, the
# largest on 8x64x112x112 (26 MB, where the ring path's streaming stores help it).
# False: never the gather path (for tests).
GATHER = True
# The forward of the gather path's case (same test: _tile_items) takes the tiled path (_tf_max_pool's ``tiled``,
# pgtf_ftile_* in src_c/pg_tf_max_pool.h): whole output rows of all planes, vector chunks straight from the
# planes, instead of the planes path's tile copies or the plane path's per-plane rows.  Taken at every size:
# tiled / old time of the captured kernel call, NCHW float32 k2s2 VALID, median of 9 interleaved rounds
# (``PYTHONPATH=. python bench/experiments/tffwd_ab.py 5 1``, shared machine, load 1 - 3): 2x16x8x8 0.58,
# 8x256x13x13 0.40, 8x512x14x14 0.36, 8x128x28x28 0.21, 8x64x32x32 0.18, 8x192x56x56 0.24, 8x64x112x112 0.36
# (the control row, 1x64x112x112 k3s2 SAME, old path on both sides: 0.95).  2-thread timings on this shared
# 2-core machine were not usable (12 ms scheduler slices on both sides), so the rule is the 1-thread one.
# False: never the tiled forward (for tests).
TILED = True
# float16 only takes it with at least this many windows a row, or 2 or 4 (one vector chunk takes two output rows):
# its exact lane-wise widening costs more than the planes path's copies on rows of 5 - 7 windows.  tiled / old
# kernel time, float16 (``... tffwd_ab.py 5 1 float16``, load 3): 8x256x13x13 (6 windows) 1.28, 8x512x14x14 (7)
# 1.22, 8x128x28x28 (14) 0.63, 8x64x32x32 (16) 0.38, 2x16x8x8 (4) 0.46; bfloat16 0.29 - 0.80 at every one of
# these sizes, float64 0.25 - 0.62.
TILED_F16_MIN_WO = 8


class _Pool:
    """Validated x (x1), parameters, output shape and window tables."""

    def __init__(self, x: Any, ksize: Any, strides: Any, padding: Any, data_format: Any, name: str) -> None:
        self.name = name
        x = as_array(x, name)
        self.data_format = parse_layout(data_format, "data_format")
        check_rank(x, name, (4,))
        self.dt = check_dtype(x, name)
        self.ksize = parse_tf_window(ksize, "ksize", self.data_format)
        self.strides = parse_tf_window(strides, "strides", self.data_format)
        self.padding = parse_tf_padding(padding)
        self.x = x                              # the validated input of the planning call (see forget_data)
        self.shape, self.dtype = x.shape, x.dtype
        x4 = to_nchw(x, self.data_format)
        N, C, H, W = x4.shape
        if 0 in (C, H, W):
            raise ParamInvalidError(f"{name}: expected non-zero C, H and W, got shape {x.shape} "
                                    f"({self.data_format})")
        (Ho, ph), (Wo, pw) = (tf_output_size(n, k, s, self.padding)
                              for n, k, s in zip((H, W), self.ksize, self.strides))
        if Ho < 1 or Wo < 1:
            raise ParamInvalidError(
                f"{name}: output size is too small: input (H, W) = {(H, W)} with {self.describe()} gives "
                f"{(Ho, Wo)} (VALID padding needs the window to fit in the input)")
        self.out_hw = (Ho, Wo)
        self.pads = (ph, pw)                    # padding cells before the first row / column
        self.hlo, self.hhi = tf_windows(H, Ho, self.ksize[0], self.strides[0], ph)
        self.wlo, self.whi = tf_windows(W, Wo, self.ksize[1], self.strides[1], pw)
        self.out_shape = (N, C, Ho, Wo) if self.data_format == "NCHW" else (N, Ho, Wo, C)
        # Planning results for this shape (kernel choices, bands, rings), filled on first use and shared by every
        # rebound copy: a plan's calls all have x's shape, strides and flags (see plans.py).
        self.memo: dict[Any, Any] = {}

    def forget_data(self) -> None:
        """Drop the array of the call that built this pool: a cached plan keeps the pool, and must not keep a
        caller's (possibly huge, possibly recycled) input alive.  Every later use passes x explicitly."""
        self.x = None

    def describe(self) -> str:
        return (f"ksize (H, W) = {self.ksize}, strides (H, W) = {self.strides}, padding={self.padding!r}, "
                f"data_format={self.data_format!r}")

    def kernel_x(self, x4: np.ndarray) -> tuple[np.ndarray, bool]:
        """x (a logical-NCHW view) as the kernels read it, and whether the channels-last kernels apply (C
        unit-strided in memory)."""
        friendly = self.memo.get("x friendly")
        if friendly is None:
            friendly = self.memo["x friendly"] = kernel_friendly(x4)
        if not friendly:
            x4 = kernel_input(x4)
        channel = channel_inner(x4)
        if channel and x4.strides[1] != x4.dtype.itemsize:
            # channels-last but C not unit-strided (a sliced buffer): one dense copy beats C strided plane passes
            x4 = np.ascontiguousarray(x4.transpose(0, 2, 3, 1)).transpose(0, 3, 1, 2)
        if channel and x4.shape[1] * x4.shape[3] >= RING_INT32:
            channel = False     # int32 ring offsets in the vectorised channels-last kernel: giant rows go plane
        return x4, channel

    def plane_vector_run(self, ring_elems: int) -> tuple[bool, int, int, int, int, int]:
        """The unclipped windows along W (one contiguous run) for the plane path's vector lanes."""
        kw, sw = self.ksize[1], self.strides[1]
        pw = self.pads[1]
        full = np.flatnonzero((self.wlo == np.arange(len(self.wlo)) * sw - pw) & (self.whi - self.wlo == kw))
        ow_a, ow_b = (int(full[0]), int(full[-1]) + 1) if full.size else (0, 0)
        return VECTOR_PLANE and ow_b > ow_a and ring_elems < RING_INT32, ow_a, ow_b, sw, kw, pw

    def plane_groups(self, x4: np.ndarray, channel: bool, nthreads: int) -> int:
        """Work items of the planes path for kernel view ``x4`` (0: not taken; see TF_PLANES_TILE_BYTES)."""
        N, C, H, W = x4.shape
        planes = N * C
        gmax = min(64, TF_PLANES_TILE_BYTES // (H * W * x4.dtype.itemsize))
        if (channel or not PLANES or H * W > TF_PLANES_MAX_CELLS or gmax < TF_PLANES_MIN
                or planes < TF_PLANES_MIN):
            return 0
        groups = -(-planes // gmax)
        if nthreads > 1:            # enough items to balance, each of >= TF_PLANES_MIN planes where possible
            groups = max(groups, min(planes // TF_PLANES_MIN, TF_ITEMS_PER_THREAD * nthreads))
        return groups

    def forward(self, x: np.ndarray, nthreads: int) -> np.ndarray:
        """Window maxima of ``x`` (this pool's shape, strides and flags), in x's memory order (the spec's NaN
        rule)."""
        order = self.memo.get("y")
        if order is None:
            order = self.memo["y"] = OutputLayout(x, self.out_shape)
        y = order.empty(x.dtype)
        if x.shape[0] == 0:
            return y
        x4, channel = self.kernel_x(to_nchw(x, self.data_format))
        plan = self.memo.get(("forward", nthreads))
        if plan is None:
            N, C, H, W = x4.shape
            Ho = self.out_hw[0]
            units = N if channel else N * C
            nparts = 1
            if nthreads > 1 and units < TF_ITEMS_PER_THREAD * nthreads:
                nparts = min(Ho, -(-TF_ITEMS_PER_THREAD * nthreads // units))
            tiled = _forward_tiles(self, x4, channel, nthreads)
            groups = 0 if tiled else self.plane_groups(x4, channel, nthreads)
            scratch = None
            if tiled:
                nparts = 1
            if groups:
                nparts = 1
                nbytes = _tf_max_pool.planes_scratch_bytes(self.dt, H, W, Ho, self.out_hw[1], -(-units // groups),
                                                           0)
                scratch = ScratchPool(lambda: thread_rows(min(nthreads, groups), nbytes, np.uint8))
            part = (np.arange(nparts + 1, dtype=np.int64) * Ho) // nparts
            threads = min(nthreads, tiled or groups or units * nparts)
            win_h = int(np.max(self.hhi - self.hlo))
            plan = self.memo[("forward", nthreads)] = (part, win_h, self.plane_vector_run(W), threads, groups,
                                                       scratch, tiled)
        part, win_h, vec, threads, groups, scratch_pool, tiled = plan
        xk, yk = kernel_view(x4), kernel_view(to_nchw(y, self.data_format))
        scratch = scratch_pool.take() if groups else None
        args = (self.dt, xk, yk, self.hlo, self.hhi, self.wlo, self.whi, part, channel, np.zeros(win_h, np.int32),
                *vec, threads, groups, scratch, tiled)
        _tf_max_pool.max_pool(*args)
        if groups:
            scratch_pool.give(scratch)
        if ("launch", nthreads) not in self.memo:
            # the first run's kernel call, recorded for _launch.Runner (sources x 0, y 1; the int32 zeros are
            # only read; the planes path's scratch comes from its pool on every replay, or is the per-call
            # buffer of a replay of the call captured below the dispatcher)
            rec = Launch(_tf_max_pool.max_pool, args, 1, kernel_records=True)
            self.memo[("launch", nthreads)] = (rec.output(y) and rec.view(1, 0, x, xk) and rec.view(2, 1, y, yk)
                                               and (not groups or rec.scratch(scratch_pool, scratch)) and rec)
        return y


def _check_like_output(arr: Any, name: str, pool: _Pool) -> np.ndarray:
    arr = as_array(arr, name)
    check_rank(arr, name, (4,))
    if arr.dtype != pool.dtype:
        raise ParamInvalidError(f"{name}: expected dtype {pool.dtype} (the dtype of x1), got {arr.dtype}")
    if arr.shape != pool.out_shape:
        raise ParamInvalidError(f"{name}: expected shape {pool.out_shape} for {pool.describe()} and x1 of shape "
                                f"{pool.shape}, got {arr.shape}")
    return arr


def max_pool(x: Any, ksize: IntSeq4, strides: IntSeq4, padding: str | bytes, data_format: str = "NHWC", *,
             num_threads: int | None = None) -> np.ndarray:
    """2-D max pooling with TensorFlow's parameters (``tf.nn.max_pool2d``); produces the ``x2`` of
    :func:`max_pool_grad`.

    Parameters
    ----------
    x : array_like
        4-D input, (N, H, W, C) for ``data_format="NHWC"`` or (N, C, H, W) for ``"NCHW"``; float32, float64,
        float16 or bfloat16; any memory strides.
    ksize, strides : sequence of 4 ints
        Window size and stride in ``data_format`` order; the N and C entries must be 1, H and W positive.
    padding : {"SAME", "VALID"}
        TensorFlow's padding (str or bytes, case-sensitive).  VALID: ``out = ceil((in - k + 1) / s)``; SAME:
        ``out = ceil(in / s)`` with ``max(0, (out - 1) * s + k - in)`` padding cells, ``total // 2`` before.
        Padding cells are never selected.
    data_format : {"NHWC", "NCHW"}
        Logical axis order of ``x`` and of the result.
    num_threads : int, optional
        OpenMP threads; default ``omp_get_max_threads()`` at call time.

    Returns
    -------
    ndarray
        Window maxima, dtype of ``x``, in ``x``'s memory order.  Windows are clipped to the input and scanned
        row-major; NaN beats every number (TensorFlow ignores NaNs unless a window is all NaN), and an all
        ``-inf`` window gives ``-inf`` (TensorFlow gives the lowest finite value).

    Raises
    ------
    ParamNullptrError
        ``x`` is None.
    ParamInvalidError
        Any invalid dtype, rank, shape, parameter, or an output size below 1.
    """
    key = make_key(_FWD, (x,), (ksize, strides, padding, data_format, num_threads))
    return call(key, (x,), lambda: _plan_forward(x, ksize, strides, padding, data_format, num_threads))


def _plan_forward(x: Any, ksize: Any, strides: Any, padding: Any, data_format: Any, num_threads: Any,
                  ) -> tuple[Any, tuple]:
    pool = _Pool(x, ksize, strides, padding, data_format, "x")
    nthreads = resolve_num_threads(num_threads)
    x = pool.x
    pool.forget_data()
    return _Run(lambda x: pool.forward(x, nthreads), pool.memo, ("launch", nthreads)), (x,)


class _Run:
    """A plan's run function, with the launch record (``launch``, read by ``_launch.Runner``) that its first run
    leaves in the pool's memo under ``key``."""

    __slots__ = ("fn", "memo", "key", "launch")

    def __init__(self, fn: Callable[..., np.ndarray], memo: dict[Any, Any], key: Any) -> None:
        self.fn, self.memo, self.key = fn, memo, key
        self.launch: Launch | bool | None = None

    def __call__(self, *arrays: Any) -> np.ndarray:
        result = self.fn(*arrays)
        if self.launch is None:
            self.launch = self.memo.get(self.key)
        return result


def max_pool_grad(x1: Any, x2: Any, grad: Any, ksize: IntSeq4, strides: IntSeq4, padding: str | bytes,
                  data_format: str = "NHWC", *, check_orig_output: bool = False, out: np.ndarray | None = None,
                  deterministic: bool | None = None, num_threads: int | None = None) -> np.ndarray:
    """Gradient of :func:`max_pool` with respect to its input (``tf.raw_ops.MaxPoolGrad``, CANN ``MaxPoolGrad``).

    For every output window the argmax is recomputed from ``x1`` and ``grad`` is added there; overlapping
    windows accumulate.  The argmax rule: windows clipped to the input, scanned row-major, a cell replaces the
    running maximum if it is greater or NaN - ties go to the first maximum, NaN beats every number, the last
    NaN wins.  (TensorFlow's CPU kernel differs only for NaN: it takes a NaN only as the first cell of a
    window.)

    Parameters
    ----------
    x1 : array_like
        The forward input, 4-D in ``data_format``; float32, float64, float16 or bfloat16; any strides.
    x2 : array_like
        The forward output: checked for shape (the output shape of ``x1`` and the parameters) and dtype
        (``x1``'s); its values are not used unless ``check_orig_output``.
    grad : array_like
        Gradient of the forward output; shape of ``x2``, dtype of ``x1``.
    ksize, strides : sequence of 4 ints
        In ``data_format`` order; N and C entries 1, H and W positive.
    padding : {"SAME", "VALID"}
        As for :func:`max_pool` (str or bytes, case-sensitive).
    data_format : {"NHWC", "NCHW"}
        Logical axis order of all arrays (TensorFlow's CPU kernel supports only NHWC; both are supported here).
    check_orig_output : bool, default False
        Verify that ``x2`` equals the recomputed window maxima (NaN equals NaN) and raise
        :class:`ParamInvalidError` naming the first mismatching position: catches passing the wrong tensor.
        Costs one extra forward pass.
    out : ndarray, optional
        Writeable array with ``x1``'s shape and dtype sharing no memory with an input; returned.
    deterministic : bool, optional
        Accepted for API uniformity (None: the process-wide setting).  The kernel is always atomic-free and
        bitwise identical for every run and thread count, so both modes give the same result.
    num_threads : int, optional
        OpenMP threads; default ``omp_get_max_threads()`` at call time.

    Returns
    -------
    ndarray
        ``grad_x1``: shape and dtype of ``x1``, in ``x1``'s memory order (or ``out``).  float16/bfloat16 are
        accumulated in float64 and rounded once; every cell sums its contributions in output row-major order.

    Raises
    ------
    ParamNullptrError
        ``x1``, ``x2`` or ``grad`` is None.
    ParamInvalidError
        Any invalid dtype, rank, shape, parameter, an output size below 1, a bad ``out``, or (with
        ``check_orig_output``) an ``x2`` that is not the max pooling of ``x1``.  Inputs are never modified.
    """
    key = make_key(_BWD, (x1, x2, grad, out), (ksize, strides, padding, data_format, check_orig_output,
                                                deterministic, num_threads))
    return call(key, (x1, x2, grad, out),
                lambda: _plan_backward(x1, x2, grad, ksize, strides, padding, data_format, check_orig_output, out,
                                       deterministic, num_threads))


def _plan_backward(x1: Any, x2: Any, grad: Any, ksize: Any, strides: Any, padding: Any, data_format: Any,
                   check_orig_output: Any, out: Any, deterministic: Any, num_threads: Any) -> tuple[Any, tuple]:
    pool = _Pool(x1, ksize, strides, padding, data_format, "x1")
    x1 = pool.x
    x2 = _check_like_output(x2, "x2", pool)
    grad = _check_like_output(grad, "grad", pool)
    check = parse_bool(check_orig_output, "check_orig_output")
    resolve_deterministic(deterministic)          # validated; one kernel serves both modes (see docstring)
    nthreads = resolve_num_threads(num_threads)
    if out is not None:
        prepare_out(out, x1, [("x1", x1), ("x2", x2), ("grad", grad)])
    order = OutputLayout(x1, x1.shape)
    pool.forget_data()

    def run(x1: np.ndarray, x2: np.ndarray, grad: np.ndarray, out: Any) -> np.ndarray:
        if out is None:
            gx = order.empty(x1.dtype)
        else:
            check_no_overlap(out, (("x1", x1), ("x2", x2), ("grad", grad)))
            gx = out
        if x1.shape[0] == 0:
            return gx
        fmt = pool.data_format
        if check:
            _check_orig_output(pool, x1, x2, nthreads)
        called = _run_grad(pool, to_nchw(x1, fmt), to_nchw(grad, fmt), to_nchw(gx, fmt), nthreads)
        if "grad launch" not in pool.memo:
            pool.memo["grad launch"] = (not check and called is not None
                                        and _grad_launch(pool, *called, x1, grad, gx, out is None, nthreads))
        return gx

    return _Run(run, pool.memo, "grad launch"), (x1, x2, grad, out)


def one_kernel_call(run: Any) -> None:
    """Make the gradient plan ``run`` (the internal plan of a ``max_pool_grad`` plan, before its first run) run the
    fused kernel on channels-last inputs with few channels too, instead of the composed gradient.

    The C API's execute runs a plan's one captured kernel call without the GIL; the composed gradient is two calls
    with an indices array between them, which it cannot replay, so C plans would take the GIL on that path.  The
    fused kernel gives the same bits (both sum every cell's hits in output row-major order) at about 1.8x the
    composed gradient's time there (see ``COMPOSE_MAX_C``); the Python API keeps the composed one."""
    run.memo["one kernel"] = True


def _grad_launch(pool: _Pool, args: tuple[Any, ...], taken: tuple[np.ndarray, np.ndarray], x1: np.ndarray,
                 grad: np.ndarray, gx: np.ndarray, allocates: bool, nthreads: int) -> Launch | bool:
    """The launch record of the fused gradient's call ``args``, which took the scratch set ``taken`` (sources x1
    0, x2 1, grad 2, grad_x 3), or False where a replay could not do what the run does (copies, a large grad_x
    from the block cache)."""
    rec = Launch(_tf_max_pool.max_pool_grad, args, 3, kernel_records=True)
    if not rec.scratch(pool.memo[("grad", nthreads)][7], taken) or (allocates and not rec.output(gx)):
        return False
    if not allocates:
        rec.takes_out((0, 1, 2))
    return rec.view(1, 0, x1, args[1]) and rec.view(2, 2, grad, args[2]) and rec.view(3, 3, gx, args[3]) and rec


def _check_orig_output(pool: _Pool, x1: np.ndarray, x2: np.ndarray, nthreads: int) -> None:
    y = pool.forward(x1, nthreads)
    a = x2.astype(np.float32) if x2.dtype.itemsize == 2 else x2      # exact widening of the 16-bit types
    b = y.astype(np.float32) if y.dtype.itemsize == 2 else y
    bad = ~((a == b) | (np.isnan(a) & np.isnan(b)))
    if bad.any():
        idx = np.unravel_index(int(np.flatnonzero(bad)[0]), bad.shape)
        names = "nhwc" if pool.data_format == "NHWC" else "nchw"
        where = ", ".join(f"{k}={int(i)}" for k, i in zip(names, idx))
        raise ParamInvalidError(
            f"x2: expected the max pooling of x1 (check_orig_output=True), got {x2[idx]!r} instead of "
            f"{y[idx]!r} at position ({where})")


def _run_grad_composed(pool: _Pool, x4: np.ndarray, g4: np.ndarray, gx4: np.ndarray, nthreads: int) -> bool:
    """Channels-last input with few channels: the argmax by the vectorised PyTorch-style forward (indices
    only), then the banded scatter of max pooling.  Both sum every cell's contributions in output row-major
    order, so the result has the same bits as the fused kernel's.  False if the forward does not apply."""
    x4 = kernel_input(x4)
    N, C, H, W = x4.shape
    it = "i32" if H * W <= np.iinfo(np.int32).max else "i64"
    ind4 = alloc_like_order(x4, (N, C) + pool.out_hw, np.int32 if it == "i32" else np.int64)
    xk = kernel_view(x4)
    if not uniform_argmax(pool.dt, it, xk, None, ind4, pool.ksize, pool.strides, pool.pads, (1, 1),
                          threads_for(ind4.size * pool.ksize[0] * pool.ksize[1], nthreads)):
        return False
    target = kernel_output(gx4)
    scatter_grad(pool.dt, it, kernel_view(kernel_input(g4)), ind4, kernel_view(target), pool.hlo, pool.hhi,
                 True, nthreads, index_name="x1")
    if target is not gx4:
        gx4[...] = target
    return True


def _run_grad(pool: _Pool, x4: np.ndarray, g4: np.ndarray, gx4: np.ndarray, nthreads: int,
              ) -> tuple[tuple[Any, ...], tuple[np.ndarray, np.ndarray]] | None:
    """Plan bands and rings (once per pool shape, see ``_Pool.memo``), prepare kernel-friendly views, run the
    fused kernel.  Returns the kernel's arguments and the scratch set they hold (None: the composed gradient
    ran)."""
    if (channel_inner(x4) and x4.shape[1] < COMPOSE_MAX_C and not pool.memo.get("one kernel")
            and _run_grad_composed(pool, x4, g4, gx4, nthreads)):
        return None
    x4, channel = pool.kernel_x(x4)
    direct = pool.memo.get("grad direct")
    if direct is None:
        # which arrays the kernel addresses directly is fixed by the call key (strides, alignment flags)
        direct = pool.memo["grad direct"] = (kernel_friendly(g4), kernel_output(gx4, dense_hw=False) is gx4)
    if not direct[0]:
        g4 = kernel_input(g4)
    target = gx4 if direct[1] else kernel_output(gx4, dense_hw=False)
    plan = pool.memo.get(("grad", nthreads))
    if plan is None:
        plan = pool.memo[("grad", nthreads)] = _plan_grad(pool, x4, channel, target, nthreads)
    part, band_oa, band_ob, stream, ring_rows, threads, vec, scratch_pool, groups, gather = plan
    scratch, columns = scratch_pool.take()
    args = (pool.dt, kernel_view(x4), kernel_view(g4), kernel_view(target), pool.hlo, pool.hhi, pool.wlo, pool.whi,
            part, band_oa, band_ob, channel, stream, scratch, ring_rows, columns, *vec, threads, groups, gather)
    _tf_max_pool.max_pool_grad(*args)
    scratch_pool.give((scratch, columns))
    if target is not gx4:
        gx4[...] = target
    return args, (scratch, columns)


def _tile_items(pool: _Pool, x4: np.ndarray, channel: bool, nthreads: int, enabled: bool) -> int:
    """Work items of the gather gradient or the tiled forward (0: not taken; see GATHER and TILED): windows two
    columns wide that tile the input from (0, 0) without overlap, gaps or clipping, plane-contiguous memory; runs
    of whole output rows of kernel view ``x4``, one at 1 thread, else TF_ITEMS_PER_THREAD per thread (dynamic
    schedule)."""
    (kh, kw), (Ho, Wo) = pool.ksize, pool.out_hw
    if channel or not enabled or tuple(pool.ksize) != tuple(pool.strides) or kw != 2:
        return 0
    tiles = all(np.array_equal(lo, np.arange(n) * k) and np.array_equal(hi, lo + k)
                for lo, hi, n, k in ((pool.hlo, pool.hhi, Ho, kh), (pool.wlo, pool.whi, Wo, kw)))
    if not tiles:
        return 0
    N, C = x4.shape[:2]
    return 1 if nthreads == 1 else min(N * C * Ho, TF_ITEMS_PER_THREAD * nthreads)


def _forward_tiles(pool: _Pool, x4: np.ndarray, channel: bool, nthreads: int) -> int:
    """Work items of the tiled forward for kernel view ``x4`` (0: not taken; see TILED and TILED_F16_MIN_WO)."""
    if pool.dt == "f16" and pool.out_hw[1] < TILED_F16_MIN_WO and pool.out_hw[1] not in (2, 4):
        return 0
    return _tile_items(pool, x4, channel, nthreads, TILED)


def _gather_items(pool: _Pool, x4: np.ndarray, channel: bool, nthreads: int) -> int:
    """Work items of the gather path for kernel view ``x4`` (0: not taken; see GATHER)."""
    return _tile_items(pool, x4, channel, nthreads, GATHER)


def _plan_grad(pool: _Pool, x4: np.ndarray, channel: bool, target: np.ndarray, nthreads: int) -> tuple:
    """Bands, rings and kernel choices of the fused gradient for one shape (depends on shapes, strides,
    parameters and the thread count only)."""
    N, C, H, W = x4.shape
    acc = np.float32 if pool.dt == "f32" else np.float64
    gather = _gather_items(pool, x4, channel, nthreads)
    if gather:                  # no bands, rings or row offsets (the kernel reads none of these)
        one = np.array([0, 1], np.int64)
        scratch = ScratchPool(lambda: (thread_rows(1, 1, acc), thread_rows(1, 1, np.int32)))
        return (one, one[:1], one[1:], False, 1, min(nthreads, gather), (False, 0, 0, 1, 1, 0), scratch, 0,
                gather)
    win_h = int(np.max(pool.hhi - pool.hlo))
    units = N if channel else N * C
    row_elems = W * (C if channel else 1)
    nb = 1
    groups = pool.plane_groups(x4, channel, nthreads)
    if groups:                  # the planes path: whole planes, one ring per group of planes
        row_elems *= -(-units // groups)
    elif nthreads > 1 and units < TF_ITEMS_PER_THREAD * nthreads:
        nb = -(-TF_ITEMS_PER_THREAD * nthreads // units)
        nb = max(1, min(nb, int(H // (MIN_BAND_WINDOWS * win_h))))
    # the ring's type: float32 sums float32; float64 sums float64 and the 16-bit types (rounded once on store)
    cap_rows = max(1, RING_BUDGET // (np.dtype(acc).itemsize * row_elems))
    rows = min(win_h, -(-H // nb))
    if rows > cap_rows and not groups:   # huge windows and rows: smaller bands keep the ring within budget
        rows = 1 << (cap_rows.bit_length() - 1)
        nb = max(nb, -(-H // rows))
    nb = min(nb, H)
    part = (np.arange(nb + 1, dtype=np.int64) * H) // nb
    rows = min(win_h, int(np.max(np.diff(part))))
    ring_rows = 1 << (rows - 1).bit_length()
    band_oa = np.searchsorted(pool.hhi, part[:-1], side="right").astype(np.int64)
    band_ob = np.searchsorted(pool.hlo, part[1:], side="left").astype(np.int64)
    nthreads = min(nthreads, groups or units * nb)          # idle threads would only cost ring memory
    ring_elems = ring_rows * row_elems
    if groups:                  # ring and tiles (_tf_max_pool.planes_scratch_bytes) in one row per thread
        nbytes = _tf_max_pool.planes_scratch_bytes(pool.dt, H, W, *pool.out_hw, -(-units // groups), ring_rows)
        ring_elems = -(-nbytes // np.dtype(acc).itemsize)
    scratch = ScratchPool(lambda: (thread_rows(nthreads, ring_elems, acc), thread_rows(nthreads, win_h, np.int32)))
    return (part, band_oa, band_ob, not groups and _stream_rows(target, row_elems), ring_rows, nthreads,
            pool.plane_vector_run(ring_rows * W), scratch, groups, 0)


def _stream_rows(target: np.ndarray, row_elems: int) -> bool:
    """Whether the fused gradient writes ``target`` (grad_x, logical NCHW) with streaming stores: see
    STREAM_BYTES.  A row is the ``row_elems`` contiguous values the kernel stores at once (W of a plane, W * C
    of a channels-last image row); rows start at the N, (C,) and H strides.  The kernel also checks, row by row,
    that the row starts on a 16-byte boundary (the base address is not part of the plan's key)."""
    channels_last = row_elems != target.shape[3]
    starts = (target.strides[0], target.strides[2]) if channels_last else target.strides[:3]
    dims = (target.shape[0], target.shape[2]) if channels_last else target.shape[:3]
    return (target.nbytes >= STREAM_BYTES and (row_elems * target.itemsize) % 16 == 0
            and all(st % 16 == 0 for st, n in zip(starts, dims) if n > 1))
