"""Average pooling (PyTorch semantics): ``avg_pool2d`` and its backward ``avg_pool2d_backward``
(``aclnnAvgPool2dBackward``, with CANN's ``cube_math_type``)."""
from __future__ import annotations

import functools
from typing import Any, Sequence

import numpy as np

from . import _avg_pool
from ._launch import Launch
from .config import resolve_deterministic, resolve_num_threads
from .dtypes import kernel_view, round_hf32
from .errors import ParamInvalidError
from .geometry import logical_shape, pool_windows, to_nchw
from .memory import OutputLayout, ScratchPool, kernel_friendly, kernel_input, kernel_output, read_only, thread_rows
from .plans import OP_IDS, call, make_key
from .planning import channel_inner, split_evenly, threads_for
from .validation import (CUBE_MATH_TYPES, check_grad_like, check_input, parse_bool, parse_cube_math_type,
                         check_no_overlap, parse_divisor, parse_pool, prepare_out)

__all__ = ["avg_pool2d", "avg_pool2d_backward", "CUBE_MATH_TYPES"]

_FWD, _BWD = OP_IDS["avg_pool2d"], OP_IDS["avg_pool2d_backward"]

IntOrPair = int | Sequence[int]

# How the kernel forms t from grad_output and the table ``dv`` (see _avg_pool.pyx.in), numbered as
# cube_math_type: 0 grad / divisor, 2 round_f16(grad) * mult, 3 round_hf32(grad) * mult.
_MODE_KEEP, _MODE_FP16, _MODE_HF32 = 0, 2, 3
# Kernel-internal, 16-bit cube_math_type 0 only: t = grad * (L / divisor), each cell's sum divided by L once.
_MODE_SCALED = 4
# L (the least common multiple of the divisors) below this: every L / divisor is an integer below 2^12, so each
# t is exact, and where the float16 sum is exact too (always for one divisor: 40 bits of range plus at most 13
# of count) the cell is correctly rounded: |exact - tie| >= 2^-41 / L relative, more than float64's 2^-53.
SCALED_MAX_LCM = 1 << 12

# Backward work items: one plane (or channels-last image), split into row bands only when there are fewer than
# AVG_ITEMS_PER_THREAD items per thread (items are handed out dynamically, so a thread that the OS delays does not
# hold up the others for long).
AVG_ITEMS_PER_THREAD = 8
# grad_x at least this big is written with streaming stores (it would not stay in cache anyway, and a streaming
# store does not first read the line it writes) - but only where every row is a whole number of cache lines (at
# a row stride of whole lines) and at least STREAM_MIN_ROW_BYTES long.  Streaming a partial line costs a partial-line write: measured here (float32
# backward, 1 thread, out= preallocated, streamed / cached time per element, median of 5 interleaved rounds):
# 14-float rows (32x512x14x14) 9.7x, 56-float rows 7.2x, 112 floats (448 B, not whole lines) 1.56x, and even
# aligned whole-line rows lose until they are long: 128 B 1.31x, 512 B 2.3x, 1 KiB 1.21x, 4 KiB 0.88x.  Before
# this rule, avg_pool2d_backward on 512x14x14 planes jumped from 1.7-2.3 to 12-13 ns per element between batch
# 20 and 24 (issue 8).
STREAM_MIN_BYTES = 8 << 20
STREAM_MIN_ROW_BYTES = 4096
# Plane-contiguous memory: the backward takes a whole plane at once (one row-loop call per plane instead of
# several per row, _bwd_plane in _avg_pool.pyx.in) where its rows are short enough for the per-row call set-up to
# cost more than the extra plane pass, and the 16-bit forward too (_fwd_plane: the plane's quotients rounded at
# once); both only while their plane buffers take at most PLANE_MAX_BYTES of scratch per thread.  Measured here
# (bfloat16, 1 thread, out=, CPU-time medians of 5 rounds, plane / ring time): stride-1 rows (k3s1p1) 35 wide
# 0.75, 42 wide 0.77, 48 wide 0.84, 64 wide 1.08-1.10, 112 wide 1.03; rows copied from one output row each (k2s2)
# 14 wide 0.64, 28 wide 0.84, 42 wide 1.0, 48 wide 1.18, 56 wide 1.19; the forward 0.83-0.99 up to 96 wide.
PLANE_MAX_BYTES = 128 << 10
PLANE_MAX_W = 48
PLANE_COPY_MAX_W = 32
# Tall-image mode (float32 / float64, plane-contiguous NCHW; pg_avg_tall / pg_avg_btall in src_c/pg_avg.h):
# where the windows tile the planes exactly (kernel == stride, no padding, H == Ho * kh, W == Wo * kw) and the
# planes follow one another at one row stride, the N * C planes are one image of N * C * H rows and each pass is
# one loop vectorised across rows and planes, in work items of whole row blocks (kh rows: one output row each).
# Taken for rows of at most TALL_MAX_W values, in chunks of TALL_CHUNK_BYTES of vertical sums (forward) or C rows
# (backward) per scratch row, which stay in L1 between the two passes.  Measured (float32 k2s2, 1 thread, kernel
# time ``Launch.kernel_ns``, tall / old, medians of 7-9 alternating rounds, 2 - 4 runs on a loaded 2-core machine,
# ``PYTHONPATH=. python bench/experiments/avgflat_threshold.py [--shapes ...]``): forward 0.06-0.15 on 8x8 - 32x32
# planes (2x16x8x8 0.11-0.13), 0.07-0.49 on 56x56 - 448x448 planes of 0.8 - 3.2 MB, DenseNet-121's transitions
# 0.10-0.15 at batch 1 and 0.08 (14x14), 0.37 (28x28), 0.48-0.59 (56x56, 12.8 MB, memory-bound) at batch 8;
# backward 0.08-0.15 on 8x8 - 32x32 planes, DenseNet's 0.07-0.22 at batch 1 and 0.17, 0.36, 0.89-0.97 at batch 8,
# 0.32-0.96 on 64x64 - 448x448 (writing grad_x is the cost there; column groups of the block's rows written
# alternately made it 0.99-1.22, hence pg_avg_btall's row-after-row order).  No width lost, so the limit is the
# widest measured: from 1024 float32 values a row may be one the ring path writes with streaming stores
# (STREAM_MIN_ROW_BYTES), which the tall path does not have.
TALL_MAX_W = 448
TALL_CHUNK_BYTES = 8 << 10
# Channels-last: the divisor table is repeated over the channels (so that the division loop runs over contiguous
# W*C values) while that takes at most this many values; bigger tables are broadcast per column in the kernel.
DV_REPEAT_MAX = 1 << 20


class _AvgParams:
    """Parsed and validated avg-pooling parameters (the output size comes from :class:`PoolGeometry`)."""

    def __init__(self, x4: np.ndarray, kernel_size: Any, stride: Any, padding: Any, ceil_mode: Any,
                 count_include_pad: Any, divisor_override: Any) -> None:
        pp = parse_pool(x4, kernel_size, stride, padding, None, ceil_mode)
        self.kernel, self.stride, self.padding, self.ceil_mode = pp.kernel, pp.stride, pp.padding, pp.ceil_mode
        self.out = pp.out
        self.size = (int(x4.shape[2]), int(x4.shape[3]))
        self.count_include_pad = parse_bool(count_include_pad, "count_include_pad")
        self.divisor_override = parse_divisor(divisor_override)

    def describe(self) -> str:
        return (f"kernel_size={self.kernel}, stride={self.stride}, padding={self.padding}, "
                f"ceil_mode={self.ceil_mode}")

    def key(self) -> tuple:
        """Everything the tables below depend on (hashable, for the table cache)."""
        return (self.size, self.out, self.kernel, self.stride, self.padding, self.count_include_pad,
                self.divisor_override)


def _acc_dtype(dt: str) -> np.dtype:
    """float32 for float32; float64 for float64 and the 16-bit types (whose results are then the float64 result
    rounded once, see src_c/pg_avg.h)."""
    return np.dtype(np.float32 if dt == "f32" else np.float64)


def _kernel_mode(cube: int, dt: str) -> int:
    if cube in (1, 3) and dt == "f32":
        return _MODE_HF32
    if cube == 2:
        return _MODE_FP16
    return _MODE_KEEP                                    # KEEP_DTYPE, or mode 1 on non-float32 input


@functools.lru_cache(maxsize=64)
def _windows(key: tuple) -> tuple[np.ndarray, ...]:
    """Per output row / column: the clipped input range [lo, hi) of its window, for both axes."""
    (H, W), (Ho, Wo), (kh, kw), (sh, sw), (ph, pw) = key[:5]
    wh, ww = pool_windows(H, Ho, kh, sh, ph, 1), pool_windows(W, Wo, kw, sw, pw, 1)
    for win in (wh, ww):  # cannot happen with 2p <= k; never hand a kernel an empty window
        if np.any(win["count"] == 0):
            raise ParamInvalidError("x: some pooling window contains no input cell")
    return read_only(wh["lo"], wh["hi"], ww["lo"], ww["hi"])


def _axis_divisor(size: int, out: int, k: int, s: int, p: int, lo: np.ndarray, hi: np.ndarray,
                  count_include_pad: bool) -> np.ndarray:
    """Per-output factor of the divisor along one axis: the window length before clipping (PyTorch's
    ``min(start + k, size + pad) - start``) with count_include_pad, else the clipped length."""
    if not count_include_pad:
        return hi - lo
    start = np.arange(out, dtype=np.int64) * s - p
    return np.minimum(start + k, size + p) - start


@functools.lru_cache(maxsize=64)
def _divisors(key: tuple, acc: str) -> tuple[np.ndarray, np.ndarray]:
    """(table, hidx): the divisor of output (oh, ow) is ``table[hidx[oh], ow]`` in the accumulation type (the
    int64 product converted once, round-to-nearest, as C's int -> float conversion does).  Only edge rows
    differ, so the table has few rows."""
    (H, W), (Ho, Wo), (kh, kw), (sh, sw), (ph, pw), cip, override = key
    if override:
        return read_only(np.full((1, Wo), override, dtype=np.int64).astype(acc), np.zeros(Ho, np.int64))
    lo_h, hi_h, lo_w, hi_w = _windows(key)
    dh = _axis_divisor(H, Ho, kh, sh, ph, lo_h, hi_h, cip)
    dw = _axis_divisor(W, Wo, kw, sw, pw, lo_w, hi_w, cip)
    rows, hidx = np.unique(dh, return_inverse=True)
    return read_only((rows[:, None] * dw[None, :]).astype(acc), hidx.reshape(-1).astype(np.int64))


@functools.lru_cache(maxsize=64)
def _common_multiple(key: tuple) -> int:
    """L, the least common multiple of the divisors of every output window, or 0 when it reaches
    SCALED_MAX_LCM.

    The 16-bit backward (cube_math_type 0) then sums ``grad_output * (L / divisor)`` - integers times 16-bit
    values, exact - and divides each cell once by L (correctly rounded): a float16 sum is exact, so a cell whose
    exact value is a rounding tie of the type (1.8% of the cells of a k3s1 float16 backward on random normal
    gradients, measured) is one in float64 too and rounds to even, where dividing every term first lands it at
    random on either side.  One divisor for every window (count_include_pad without ceil_mode clipping,
    divisor_override) gives L = |divisor|."""
    table = _divisors(key, "d")[0]
    lcm = 1
    for d in np.unique(np.abs(table)).astype(np.int64):
        if d >= SCALED_MAX_LCM:
            return 0
        lcm = np.lcm(lcm, int(d))
        if lcm >= SCALED_MAX_LCM:
            return 0
    return int(lcm)


def _cover(lo: np.ndarray, hi: np.ndarray, size: int) -> tuple[np.ndarray, np.ndarray]:
    """Inverse window table: input cell i lies in the (clipped) windows of outputs [clo[i], chi[i]).

    ``lo``/``hi`` (per output) are non-decreasing, so the outputs covering a cell are contiguous."""
    i = np.arange(size, dtype=np.int64)
    clo = np.searchsorted(hi, i, side="right").astype(np.int64)  # first output with hi > i
    chi = np.searchsorted(lo, i, side="right").astype(np.int64)  # outputs with lo <= i
    return clo, np.maximum(chi, clo)


def _phases(W: int, Wo: int, k: int, s: int, p: int) -> tuple[np.ndarray, np.ndarray, int, int]:
    """Column phases of the backward: input columns ``iw = q*s + r`` are covered by the output columns
    ``q + o[r] + i`` for ``0 <= i < n[r]``, where those outside ``[0, Wo)`` read the zero margins of the t
    row.  Returns (n, o, left margin, right margin), phases ``r < min(s, W)``.

    Output ``ow`` covers ``iw`` when ``0 <= iw - (ow*s - p) < k``, i.e. ``iw + j - m = ow*s`` for some
    ``0 <= j < k`` with ``m = k - 1 - p``: ``j`` runs over ``j_r = (m - r) mod s, j_r + s, ...`` and
    ``ow = q + (r + j - m) / s``."""
    m = k - 1 - p
    r = np.arange(min(s, W), dtype=np.int64)
    j0 = (m - r) % s
    n = np.maximum(-(-(k - j0) // s), 0)
    o = (r + j0 - m) // s
    used = n > 0
    if not used.any():
        return n, o, 0, 0
    first = int(np.min(o[used]))                                   # q = 0
    last = int(np.max(((W - 1 - r) // s + o + n - 1)[used]))       # the last q of each phase
    return n, o, max(0, -first), max(0, last - (Wo - 1))


def _column_gather(k: int, s: int, Wo: int) -> bool:
    """Phases sum ceil(k/s) values per cell, margin zeros included; when the window is much wider than the
    output row that is mostly zeros (and wide margins), so gather each column's covering columns instead.
    Both give the same bits."""
    return -(-k // s) > 2 * Wo + 2


@functools.lru_cache(maxsize=32)
def _backward_tables(key: tuple, acc: str, recip: str, mode: int, channels: int, gather: bool) -> tuple:
    """Every table the backward kernel reads, for one geometry: divisors or multipliers (``1/divisor`` computed
    in ``recip``, then rounded, stored in ``acc``; repeated over ``channels`` when that is > 1), row covers,
    column covers, column phases (none when ``gather``) and the t row's margins."""
    (H, W), (Ho, Wo), (kh, kw), (sh, sw), (ph, pw) = key[:5]
    lo_h, hi_h, lo_w, hi_w = _windows(key)
    divisors, hidx = _divisors(key, acc)
    dv = divisors
    if mode == _MODE_SCALED:  # the integers L / divisor
        dv = (_common_multiple(key) / divisors).astype(acc)
    elif mode != _MODE_KEEP:  # 1/divisor in ``recip``, rounded to HF32 or (once) to float16
        rdiv = _divisors(key, recip)[0]
        mult = rdiv.dtype.type(1) / rdiv
        dv = (round_hf32(mult) if mode == _MODE_HF32 else mult.astype(np.float16)).astype(acc)
    if channels > 1:  # one value per (ow, c)
        dv = np.repeat(dv, channels, axis=1)
    clo_h, chi_h = _cover(lo_h, hi_h, H)
    clo_w, chi_w = _cover(lo_w, hi_w, W)
    if gather:
        ph_n = ph_o = np.zeros(0, np.int64)
        left = right = 0
    else:
        ph_n, ph_o, left, right = _phases(W, Wo, kw, sw, pw)
    return read_only(dv, hidx, clo_h, chi_h, clo_w, chi_w, ph_n, ph_o) + (left, right)


def _whole_line_rows(gx4: np.ndarray, row_elems: int) -> bool:
    """Every grad_x row (``row_elems`` contiguous values) is a whole number of 64-byte cache lines, at least
    STREAM_MIN_ROW_BYTES long, at row strides of whole lines: the only rows streaming stores write faster (see
    above).  The base address may be misaligned (NumPy's large zeroed arrays start 16 bytes into a line): that
    leaves at most two partial lines in a row of 64 or more."""
    nbytes = row_elems * gx4.itemsize
    return (nbytes >= STREAM_MIN_ROW_BYTES and nbytes % 64 == 0
            and all(st % 64 == 0 for st, n in zip(gx4.strides[:3], gx4.shape[:3]) if n > 1))


def _plane_rows(ap: _AvgParams, clo_h: np.ndarray, chi_h: np.ndarray, itemsize: int) -> tuple[int, int, int]:
    """Whole-plane mode of the backward: (rows of the C plane, m, k) where input row ih is covered by output
    rows ``ih - m + [0, k)`` clipped to ``[0, Ho)`` - stride 1 down the rows - and the C plane (m zero rows,
    Ho C rows, zero rows below) plus, for k > 3, an H x W sum plane fit in PLANE_MAX_BYTES; (Ho, 0, 0) where
    every input row is covered by at most one output row (kernel <= stride: DenseNet's k2s2) and the C plane and
    its rounded copy fit; else (0, 0, 0)."""
    (H, W), (Ho, _), (kh, _), (sh, _), (ph, _) = ap.size, ap.out, ap.kernel, ap.stride, ap.padding
    m = kh - 1 - ph
    if int(np.max(chi_h - clo_h)) <= 1:
        return (Ho, 0, 0) if W <= PLANE_COPY_MAX_W and 2 * Ho * W * itemsize <= PLANE_MAX_BYTES else (0, 0, 0)
    if sh != 1 or m < 0 or W > PLANE_MAX_W:
        return 0, 0, 0
    rows = H + kh - 1                          # C plane rows -m .. H - 1 - m + kh - 1
    if rows < m + Ho or (rows + (H if kh > 3 else 0)) * W * itemsize > PLANE_MAX_BYTES:
        return 0, 0, 0
    ih = np.arange(H, dtype=np.int64)
    lo, hi = np.clip(ih - m, 0, Ho), np.clip(ih - m + kh, 0, Ho)
    if not (np.array_equal(lo, clo_h) and np.array_equal(np.maximum(hi, lo), chi_h)):
        return 0, 0, 0
    return rows, m, kh


def _tall_plan(ap: _AvgParams, a4: np.ndarray, nthreads: int, itemsize: int) -> tuple[int, int, int, int]:
    """Tall-image mode for the kernel view ``a4`` (x or grad_x, logical NCHW): (row blocks per work item, kh,
    kw, row blocks per scratch chunk), or zeros where the windows do not tile the planes, the planes are not one
    tall image, or the rows are wider than TALL_MAX_W.  With one thread one item; else AVG_ITEMS_PER_THREAD per
    thread (the split only moves item boundaries: every output is computed the same way)."""
    (H, W), (Ho, Wo), (kh, kw), (sh, sw), (ph, pw) = ap.size, ap.out, ap.kernel, ap.stride, ap.padding
    if ((kh, kw) != (sh, sw) or ph or pw or H != Ho * kh or W != Wo * kw or W > TALL_MAX_W
            or not _avg_pool.tall_stride(a4, kh, kw, Ho, Wo)):
        return 0, 0, 0, 0
    table = _divisors(ap.key(), "d")[0]
    if not np.all(table == table.flat[0]):     # (whole windows: always one divisor; the kernels read dv[0, 0])
        return 0, 0, 0, 0
    rows = a4.shape[0] * a4.shape[1] * Ho
    cap = min(rows, max(1, TALL_CHUNK_BYTES // (W * itemsize)))
    item = rows if nthreads == 1 else max(1, -(-rows // (AVG_ITEMS_PER_THREAD * nthreads)))
    return item, kh, kw, cap


def _round_up(n: int, m: int = 16) -> int:
    return -(-n // m) * m


def avg_pool2d(x: Any, kernel_size: IntOrPair, stride: IntOrPair | None = None, padding: IntOrPair = 0,
               ceil_mode: bool = False, count_include_pad: bool = True, divisor_override: int | None = None, *,
               layout: str = "NCHW", num_threads: int | None = None) -> np.ndarray:
    """2-D average pooling (``torch.nn.functional.avg_pool2d``).

    Parameters
    ----------
    x : array_like
        (N, C, H, W) or (C, H, W) for ``layout="NCHW"``; (N, H, W, C) or (H, W, C) for ``"NHWC"``. float32,
        float64, float16 or bfloat16, any strides.
    kernel_size, stride, padding : int or sequence of 1 or 2 ints
        ``stride=None`` (or empty) means ``kernel_size``; ``0 <= padding`` and ``2 * padding <= kernel_size``.
    ceil_mode : bool
        Round the output size up (the last window must still start inside the input or the left padding).
    count_include_pad : bool
        Divide by the window size including the padding (PyTorch's pre-clip size ``min(start + k, in + pad) -
        start`` per axis) instead of the number of input cells in the window.
    divisor_override : int, optional
        Non-zero: divide every window sum by this value (negative allowed).  None or 0: not used.
    layout : {"NCHW", "NHWC"}
        Logical axis order of ``x`` and of the result.
    num_threads : int, optional
        OpenMP threads; default ``omp_get_max_threads()`` at call time.

    Returns
    -------
    ndarray
        The window averages, dtype of ``x``, same memory order as ``x``.  Each window is summed row by row, then
        column by column, then divided, in the accumulation type: float64 for float16 and bfloat16 inputs, whose
        results are the float64 average rounded once to the type.
    """
    key = make_key(_FWD, (x,), (kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override,
                                layout, num_threads))
    return call(key, (x,), lambda: _plan_forward(x, kernel_size, stride, padding, ceil_mode, count_include_pad,
                                                 divisor_override, layout, num_threads))


def _plan_forward(x: Any, kernel_size: Any, stride: Any, padding: Any, ceil_mode: Any, count_include_pad: Any,
                  divisor_override: Any, layout: Any, num_threads: Any) -> tuple["_ForwardPlan", tuple]:
    x, layout, dt = check_input(x, layout)
    x4 = to_nchw(x, layout)
    ap = _AvgParams(x4, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override)
    return _ForwardPlan(x, layout, dt, ap, resolve_num_threads(num_threads)), (x,)


class _ForwardPlan:
    """One validated forward shape: allocate y, run the kernel (tables and scratch planned on the first run)."""

    def __init__(self, x: np.ndarray, layout: str, dt: str, ap: _AvgParams, nthreads: int) -> None:
        self.layout, self.dt, self.ap, self.nthreads = layout, dt, ap, nthreads
        C = to_nchw(x, layout).shape[1]
        self.order = OutputLayout(x, logical_shape(x, layout, C, *ap.out))
        self.run: tuple | None = None
        # the first run's kernel call, recorded for _launch.Runner (False: not replayable)
        self.launch: Launch | bool | None = None

    def __call__(self, x: np.ndarray) -> np.ndarray:
        y = self.order.empty(x.dtype)
        if y.size == 0:                # N = 0
            return y
        x4 = to_nchw(x, self.layout)
        xk = kernel_view(kernel_input(x4))
        y4 = kernel_view(to_nchw(y, self.layout))
        run = self.run
        if run is None:
            run = self.run = self._plan(xk, y4)
        tables, channel, plane, win, rowacc_off, scratch_pool, nthreads, tall = run
        scratch = scratch_pool.take()
        call = (self.dt, xk, y4, *tables, channel, plane, win, scratch, rowacc_off, nthreads, *tall)
        _avg_pool.forward(*call)
        scratch_pool.give(scratch)
        if self.launch is None:
            # this very call, recorded for _launch.Runner (sources x 0, y 1)
            rec = Launch(_avg_pool.forward, call, 1, kernel_records=True)
            self.launch = (rec.output(y) and rec.scratch(scratch_pool, scratch) and rec.view(1, 0, x, xk)
                           and rec.view(2, 1, y, y4) and rec)
        return y

    def _plan(self, xk: np.ndarray, y4: np.ndarray) -> tuple:
        ap = self.ap
        N, C, H, W = xk.shape
        Ho, Wo = ap.out
        channel = channel_inner(xk)
        cs = C if channel else 1
        acc = _acc_dtype(self.dt)
        dv, hidx = _divisors(ap.key(), acc.char)
        lo_h, hi_h, lo_w, hi_w = _windows(ap.key())
        nthreads = threads_for(N * Ho * Wo * C * min(ap.kernel[0], H) * min(ap.kernel[1], W), self.nthreads)
        rowacc_off = _round_up(W * cs)     # after S, the window rows' sum
        # Planes: one item per plane (where there are planes enough to keep every thread busy, as for the
        # backward's bands); 16-bit plane-contiguous input rounds the quotients of the whole plane at once, float32
        # and float64 just run the plane's rows in one item (a per-row item's set-up cost 58 ns per 8-wide
        # output row, most of 2x16x8x8's kernel time; bench/experiments/tiny_loop.py)
        narrow = self.dt in ("f16", "bf16")
        plane = (not channel and (not narrow or Ho * Wo * acc.itemsize <= PLANE_MAX_BYTES)
                 and N * C >= AVG_ITEMS_PER_THREAD * nthreads)
        # float32 / float64 planes whose sums fit PLANE_MAX_BYTES divide the whole plane's sums at once (the
        # kernel's plane_flat): the divisors then one row per output row, in order
        flat = plane and not narrow and Ho * Wo * acc.itemsize <= PLANE_MAX_BYTES
        if flat:
            dv, hidx = read_only(np.ascontiguousarray(dv[hidx]), np.arange(Ho, dtype=np.int64))
        # rowacc: one channel vector (channels-last), for the 16-bit types one row of Wo quotients or (plane)
        # all Ho * Wo of them, for flat planes all their Ho * Wo sums
        rows = rowacc_off + _round_up(max(cs, Ho * Wo if plane and (narrow or flat) else Wo))
        # tall image: (row blocks per item, kh, kw, row blocks per chunk); a scratch row holds a chunk's vertical
        # sums
        tall = (0, 0, 0, 0)
        if not channel and not narrow and y4.flags.c_contiguous:
            item, kh, kw, chunk = _tall_plan(ap, xk, nthreads, acc.itemsize)
            if item:
                tall = (item, kh, kw, chunk)
                rows = max(rows, _round_up(chunk * W))
        pool = ScratchPool(lambda: thread_rows(nthreads, rows, acc))
        # channels-last windows that do not overlap along the row (kernel <= stride): each summed straight
        # from x, without writing and reading S (DenseNet's k2s2 NHWC float32 forward, batch 8, 1 thread,
        # CPU-time medians: 0.98-1.01x PyTorch's out= time, against 0.82-1.01x through S in the run before)
        win = channel and ap.kernel[1] <= ap.stride[1]
        return (dv, hidx, lo_h, hi_h, lo_w, hi_w), channel, plane, win, rowacc_off, pool, nthreads, tall


def avg_pool2d_backward(grad_output: Any, x: Any, kernel_size: IntOrPair, stride: IntOrPair | None = None,
                        padding: IntOrPair = 0, ceil_mode: bool = False, count_include_pad: bool = True,
                        divisor_override: int | None = None, cube_math_type: int = 0, *, layout: str = "NCHW",
                        out: np.ndarray | None = None, deterministic: bool | None = None,
                        num_threads: int | None = None) -> np.ndarray:
    """Gradient of :func:`avg_pool2d` with respect to ``x`` (``aclnnAvgPool2dBackward``).

    Every input cell of the clipped window of output ``(oh, ow)`` receives ``grad_output[oh, ow] / divisor``,
    where ``divisor`` is ``divisor_override`` if non-zero, else the window size before clipping
    (``count_include_pad=True``) or after clipping (``False``), as in PyTorch.

    Parameters
    ----------
    grad_output : array_like
        Gradient of the pooled output: the shape :func:`avg_pool2d` gives for ``x`` and the parameters, dtype
        of ``x``, any strides.
    x : array_like
        The forward input.  Only its shape, dtype and memory order are used; its values are not read.
    kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override
        As for :func:`avg_pool2d`.
    cube_math_type : int
        CANN's matrix-unit precision, emulated on the CPU.  0 KEEP_DTYPE: ``grad_output / divisor`` (a true
        division) in the accumulation type.  1 ALLOW_FP32_DOWN_PRECISION and 3 USE_HF32: for float32 input,
        ``grad_output`` and the multiplier ``1/divisor`` (computed in float32) are rounded to HF32 (11 mantissa
        bits, nearest-even) and multiplied in float32; mode 1 leaves other dtypes as mode 0; mode 3 accepts only
        float32.  2 USE_FP16: ``grad_output`` and ``1/divisor`` (computed in float32, in float64 for float64
        input) are rounded to float16 (once, also from float64) and multiplied and summed in the accumulation
        type; not for bfloat16.  Any other value is an error.
    layout : {"NCHW", "NHWC"}
        As for :func:`avg_pool2d`.
    out : ndarray, optional
        Writeable array of ``x``'s shape and dtype that overlaps neither input; returned.
    deterministic : bool, optional
        Validated; the kernel is the same in both modes: a gather (each element of ``grad_x`` is computed and
        written once by one thread, no atomics), bitwise identical for every run, thread count and memory
        order.  None: the process-wide setting.
    num_threads : int, optional
        OpenMP threads; default ``omp_get_max_threads()`` at call time.

    Returns
    -------
    ndarray
        ``grad_x``: shape, dtype and (by default) memory order of ``x``.  Each cell is
        ``0 + sum over covering output rows oh (ascending) of (0 + sum over covering output columns ow
        (ascending) of t[oh, ow])`` with ``t = grad_output / divisor`` (``-0`` sums to ``+0``), accumulated in
        float64 for 16-bit types (each result the float64 sum rounded once to the type) and in the input type
        otherwise.
    """
    key = make_key(_BWD, (grad_output, x, out), (kernel_size, stride, padding, ceil_mode, count_include_pad,
                                                  divisor_override, cube_math_type, layout, deterministic,
                                                  num_threads))
    return call(key, (grad_output, x, out),
                lambda: _plan_backward(grad_output, x, kernel_size, stride, padding, ceil_mode, count_include_pad,
                                       divisor_override, cube_math_type, layout, out, deterministic, num_threads))


def _plan_backward(grad_output: Any, x: Any, kernel_size: Any, stride: Any, padding: Any, ceil_mode: Any,
                   count_include_pad: Any, divisor_override: Any, cube_math_type: Any, layout: Any, out: Any,
                   deterministic: Any, num_threads: Any) -> tuple["_BackwardPlan", tuple]:
    x, layout, dt = check_input(x, layout)
    x4 = to_nchw(x, layout)
    ap = _AvgParams(x4, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override)
    cube = parse_cube_math_type(cube_math_type, x, dt)
    expected = logical_shape(x, layout, x4.shape[1], *ap.out)
    grad_output = check_grad_like(grad_output, "grad_output", x, expected,
                                  f"{ap.describe()} and x of shape {x.shape}")
    resolve_deterministic(deterministic)  # validated only: the gather kernel is atomic-free in both modes
    nthreads = resolve_num_threads(num_threads)
    if out is not None:
        prepare_out(out, x, [("grad_output", grad_output), ("x", x)])
    return _BackwardPlan(x, layout, dt, ap, _kernel_mode(cube, dt), nthreads), (grad_output, x, out)


class _BackwardPlan:
    """One validated backward shape: allocate grad_x (or check ``out``'s overlap), run the gather kernel (work
    items, tables and scratch planned on the first run)."""

    def __init__(self, x: np.ndarray, layout: str, dt: str, ap: _AvgParams, mode: int, nthreads: int) -> None:
        self.layout, self.dt, self.ap, self.mode, self.nthreads = layout, dt, ap, mode, nthreads
        self.order = OutputLayout(x, x.shape)
        self.direct: tuple[bool, bool] | None = None
        self.gather: tuple | None = None
        # the first run's kernel call, recorded for _launch.Runner (False: not replayable)
        self.launch: Launch | bool | None = None

    def __call__(self, grad_output: np.ndarray, x: np.ndarray, out: Any) -> np.ndarray:
        if out is None:
            gx = self.order.empty(x.dtype)
        else:
            check_no_overlap(out, (("grad_output", grad_output), ("x", x)))
            gx = out
        gx4 = to_nchw(gx, self.layout)
        if gx4.shape[0] == 0:
            return gx
        go4 = to_nchw(grad_output, self.layout)
        direct = self.direct
        if direct is None:
            # which arrays the kernel addresses directly is fixed by the call key (strides, alignment flags)
            direct = self.direct = (kernel_output(gx4, dense_hw=False) is gx4, kernel_friendly(go4))
        target = gx4 if direct[0] else kernel_output(gx4, dense_hw=False)
        gok = kernel_view(go4 if direct[1] else kernel_input(go4))
        gxk = kernel_view(target)
        gather = self.gather
        if gather is None:
            gather = self.gather = _plan_gather(self.dt, self.ap, gok, gxk, self.mode, self.nthreads)
        args, offsets, pool, nthreads, tall = gather
        scratch = pool.take()
        call = (self.dt, gxk, gok, *args, scratch, offsets, nthreads, *tall)
        _avg_pool.backward(*call)
        pool.give(scratch)
        if not direct[0]:
            gx4[...] = target
        if self.launch is None:
            self.launch = direct[0] and self._launch(call, pool, scratch, grad_output, gx, out is None)
        return gx

    def _launch(self, call: tuple[Any, ...], pool: ScratchPool, scratch: np.ndarray, grad_output: np.ndarray,
                gx: np.ndarray, allocates: bool) -> Launch | bool:
        """The launch record of this plan's kernel call ``call`` (sources grad_output 0, x 1, grad_x 2), or
        False where a replay could not do what the run does (a copy of grad_output, a large grad_x from the block
        cache)."""
        rec = Launch(_avg_pool.backward, call, 2, kernel_records=True)
        if not rec.scratch(pool, scratch) or (allocates and not rec.output(gx)):
            return False
        if not allocates:
            rec.takes_out((0, 1))
        return rec.view(1, 2, gx, call[1]) and rec.view(2, 0, grad_output, call[2]) and rec


def _plan_gather(dt: str, ap: _AvgParams, go4: np.ndarray, gx4: np.ndarray, mode: int,
                 nthreads: int) -> tuple:
    """The work items, tables and scratch of the gather kernel for these kernel views (``gx4`` is fully
    overwritten by a run): (kernel arguments between the arrays and the scratch, scratch offsets, scratch pool,
    threads)."""
    N, C, H, W = gx4.shape
    Ho, Wo = ap.out
    channel = channel_inner(gx4)
    cs = C if channel else 1
    units = N if channel else N * C
    nthreads = threads = threads_for(gx4.size + go4.size, nthreads)
    acc = _acc_dtype(dt)
    gather = _column_gather(ap.kernel[1], ap.stride[1], Wo)
    dv_rep = cs > 1 and _divisors(ap.key(), acc.char)[0].size * cs <= DV_REPEAT_MAX
    # cube_math_type 2 (and 1/3) keep their documented rounding point: 1/divisor computed in float32 for every
    # type but float64, also for the 16-bit types that now accumulate in float64
    recip = "d" if dt == "f64" else "f"
    lcm = _common_multiple(ap.key()) if mode == _MODE_KEEP and dt in ("f16", "bf16") else 0
    if lcm and not np.all(_divisors(ap.key(), "d")[0] == lcm):
        mode = _MODE_SCALED     # (one positive divisor for every window: t = grad, mode 0's fast row loops)
    tables = _backward_tables(ap.key(), acc.char, recip, mode, cs if dv_rep else 1, gather)
    dv, hidx, clo_h, chi_h, clo_w, chi_w, ph_n, ph_o, left, right = tables
    nb = 1
    if nthreads > 1 and units < AVG_ITEMS_PER_THREAD * nthreads:
        nb = -(-AVG_ITEMS_PER_THREAD * nthreads // units)
    part = split_evenly(H, nb)
    nthreads = max(1, min(nthreads, units * (len(part) - 1)))
    cap = max(1, int(np.max(chi_h - clo_h)))  # ring of expanded output rows: the most covering one input row
    stream = gx4.nbytes >= STREAM_MIN_BYTES and _whole_line_rows(gx4, W * cs)
    plane = (0, 0, 0)
    if not channel and len(part) == 2 and not stream:
        plane = _plane_rows(ap, clo_h, chi_h, acc.itemsize)
    # ring, trow (the t row and its zero margins), rowacc, row16 (16-bit row), plane, plane_acc
    sizes = [cap * W * cs, (left + Wo + right) * cs, W * cs, W * cs, plane[0] * W,
             H * W if plane[2] > 3 else Ho * W if plane[0] and plane[2] == 0 else 0]
    offsets = np.cumsum([0] + [_round_up(n) for n in sizes]).astype(np.int64)
    rows = int(offsets[-1])
    # tall image (float32 / float64, grad / divisor): (row blocks per item, kh, kw, row blocks per chunk); a
    # scratch row holds a chunk's C rows
    tall = (0, 0, 0, 0)
    if not channel and dt in ("f32", "f64") and mode == _MODE_KEEP and go4.flags.c_contiguous:
        item, kh, kw, chunk = _tall_plan(ap, gx4, threads, acc.itemsize)
        if item:
            tall = (item, kh, kw, chunk)
            rows = max(rows, _round_up(chunk * W))
            nthreads = max(1, min(threads, -(-N * C * Ho // item)))
    pool = ScratchPool(lambda: thread_rows(nthreads, rows, acc))
    args = (dv, hidx, clo_h, chi_h, clo_w, chi_w, ph_n, ph_o, part, ap.stride[1], left, mode, channel, cap,
            stream, dv_rep, float(lcm)) + plane
    return args, read_only(offsets[:6].copy())[0], pool, nthreads, tall
