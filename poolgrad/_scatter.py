"""Planning and running the index-scatter backward shared by max_pool2d_with_indices_backward and
adaptive_max_pool2d_backward (kernels in ``_max_pool_indices.pyx``)."""
from __future__ import annotations

from typing import Any, Callable

import numpy as np

from . import _max_pool_indices
from ._launch import Launch
from .errors import ParamInvalidError
from .memory import ScratchPool, thread_rows
from .planning import channel_inner, split_evenly, threads_for

# Most grad_x cells of a 16-bit band, which is summed in a float64 scratch band (so one thread needs at most
# 8 MiB).  float32/float64 bands need no scratch and are as tall as load balance allows: every band re-reads the
# output rows whose windows straddle its edges and skips, with a branch it cannot predict, the indices that fall
# outside it; on channels-last 112x112x64 images 64 Ki-element bands cost twice the time of whole-image bands,
# while keeping a band in L2 bought nothing measurable (1 Mi against 256 Ki-element bands on 8x64xHxH NHWC
# k3s2p1, H = 80-160, equal within noise).  Capping float32 bands at 1 Mi elements made the step issue 8 found:
# NHWC 1x256x4xW k3s2p1 at one thread, W 1024 -> 2048 cut the 4-row image into 2-row bands, 0.55 -> 1.46 ns per
# element (fastest of 9; whole-image bands 0.60), and W = 3072 into three, 2.83 ns (whole image 0.63).
BAND_MAX = 1 << 20
# With few planes, cut them into at least this many bands per thread.  More bands balance better but re-read
# more boundary rows: on 1x3x1024x1024 k3s1 at 2 threads, 2-6 per thread were best and 16 cost 10-30% more.
SCATTER_BANDS_PER_THREAD = 4
# Nondeterministic float32/float64 with fewer planes than threads uses the atomic kernel when bands would be
# less than this many window heights tall.
THIN_BANDS = 4
# Many NCHW planes (at least 8, one band per plane: see _max_pool_indices.plane_groups) of at most this many
# cells take the planes scatter (``scatter_backward_planes``: one flat loop per plane over per-output window
# tables, no per-band and per-row bookkeeping).  Measured at one thread, batch 8, float32, band kernel time /
# planes kernel time (medians of 9-11 interleaved runs, loaded machine): 832x7x7 k3s1p1 1.56, 512x14x14 k3s1p1 1.36, 256x13x13
# k3s2 1.47, 832x14x14 k2s2 1.18, 768x17x17 k3s2 1.21; 256x56x56 k2s2 1.02 and 64x112x112 k3s2p1 0.99 (equal
# within noise, and so no step at the limit).  Larger planes keep the band kernel, whose tables are per row.
PLANES_MAX_CELLS = 112 * 112


class ScatterPlan:
    """The work items and kernel choice of one scatter shape (planning depends only on shapes, strides, the
    window tables, the mode and the thread count, never on the data); :meth:`run` executes it."""

    def __init__(self, dt: str, it: str, go4: np.ndarray, gx4: np.ndarray, row_lo: np.ndarray,
                 row_hi: np.ndarray, deterministic: bool, nthreads: int, index_name: str = "indices",
                 col_lo: np.ndarray | None = None, col_hi: np.ndarray | None = None) -> None:
        N, C, H, W = gx4.shape
        Ho = go4.shape[2]
        self.dt, self.it, self.row_lo, self.row_hi, self.index_name = dt, it, row_lo, row_hi, index_name
        self.nthreads = nthreads = threads_for(gx4.size + go4.size, nthreads)
        self.channel = channel = channel_inner(gx4)
        units = N if channel else N * C                 # independent planes (or images, channels-last)
        row_elems = W * (C if channel else 1)           # grad_x elements in one row of one unit
        self.narrow = narrow = dt in ("f16", "bf16")
        # 16-bit bands are float64 scratch: at most BAND_MAX // 2 cells keep it within BAND_MAX float32 cells' bytes
        nb = nb_min = -(-H * row_elems // (BAND_MAX // 2)) if narrow else 1
        if nthreads > 1 and units * nb < SCATTER_BANDS_PER_THREAD * nthreads:
            nb = max(nb, -(-SCATTER_BANDS_PER_THREAD * nthreads // units))
            # equal bands under a static schedule: a whole number of items per thread (3 planes on 2 threads
            # in 9 bands leave one thread 5 items and the other 4)
            nb = next((b for b in range(nb, 2 * nb + 1) if units * b % nthreads == 0), nb)
        # Nondeterministic mode may split the outputs instead and add atomically where chunks meet; that only
        # pays when bands would be so thin that re-reading the output rows that straddle band edges costs more.
        # Bands won wherever they are a few windows tall (1x1x2048^2 k3s1 at 2 threads: 2.2 ms banded, 2.4 ms
        # atomic; channels-last 1x1024^2x3: 1.7 against 2.3 ms).
        span = int(np.max(row_hi - row_lo)) if len(row_lo) else 0
        # Channels-last rows are W * C elements long: a band a few rows tall re-reads the long output rows that
        # straddle its edges and skips, with a branch it cannot predict, the indices that belong to its
        # neighbours.  Where the bands cut for the threads would be thinner than THIN_BANDS windows, the scatter
        # cuts fewer bands, THIN_BANDS windows tall or whole images, and runs as many threads as there are
        # bands.  At batch 1 and 2 threads, float32, medians of 7, thin bands (nondeterministic: the atomic
        # kernel) against one thread on the whole image: 1x14x14x480 k3s1p1 706 (762) against 185 us,
        # 1x17x17x768 k3s2 332 (376) against 138, 1x28x28x256 k3s1p1 912 (1271) against 435; two bands of 14
        # rows on that last one 310 against 487 us at one thread in another run, 1x27x27x192 k3s2 50 against 82.
        # At batch 8 the same layer keeps both threads (2245 against 4069 us on 8x28x28x256).  The gather
        # (below) splits rows, not bands, and keeps every thread.
        self.scatter_threads = nthreads
        if channel and nb > nb_min and H < THIN_BANDS * span * nb:
            nb = max(nb_min, H // (THIN_BANDS * span)) if span else nb_min
            self.scatter_threads = min(nthreads, units * nb)
        self.use_atomic = use_atomic = ((not deterministic) and not narrow and units < self.scatter_threads
                                        and H < THIN_BANDS * span * nb)
        if use_atomic:
            self.part = split_evenly(Ho, -(-SCATTER_BANDS_PER_THREAD * nthreads // units))
            self.band_oa = self.band_ob = None
            self.scratch_elems = 0
        else:
            self.part = part = split_evenly(H, nb)
            self.band_oa = np.searchsorted(row_hi, part[:-1], side="right").astype(np.int64)
            self.band_ob = np.searchsorted(row_lo, part[1:], side="left").astype(np.int64)
            rows = int(np.max(np.diff(part)))
            # 16-bit: a float64 band (two float32 slots per cell: correctly rounded sums, see the kernel), then one
            # output row per thread, where a contiguous grad_output row is widened at once
            widen = go4.shape[3] * (C if channel else 1) if narrow else 0
            self.scratch_elems = 2 * rows * row_elems + widen if narrow else 0
        self.items = units * (len(self.part) - 1)
        # An output whose window holds no input row (padding and dilation can do that) reaches no band, so the
        # banded kernels would never see its index: such problems go straight to the exact plane-by-plane pass.
        self.empty_window = bool(np.any(row_hi <= row_lo))
        # Many whole NCHW planes (one band each) up to PLANES_MAX_CELLS cells run through the planes kernel:
        # groups of 32-64 planes (or one of 8-31) as work items, the same sums without the band kernel's per-band
        # and per-row bookkeeping.
        self.plane_groups = 0
        if (not channel and not use_atomic and len(self.part) == 2 and not self.empty_window
                and H * W <= PLANES_MAX_CELLS):
            self.plane_groups = _max_pool_indices.plane_groups(units, nthreads)
            if self.plane_groups:
                self.items = self.plane_groups
                Wo = go4.shape[3]
                self.out_lo = np.repeat(row_lo.astype(np.int64) * W, Wo)
                self.out_span = np.repeat((row_hi - row_lo).astype(np.int64) * W, Wo)
        # With the windows' column spans, a channels-last problem may run as a gather over grad_x instead
        # (``gather_backward_cl``: lanes over C, every cell written once, the same bits as the deterministic
        # scatter, in both modes); the kernel declines (None) where it does not apply, and the plan remembers.
        self.gather = (channel and col_lo is not None and not self.empty_window
                       and not np.any(col_hi <= col_lo))
        self.col_lo, self.col_hi = col_lo, col_hi
        self.last_pass: Callable[..., None] | None = None    # the fast pass run() called last
        elems = self.scratch_elems
        self.scratch = ScratchPool((lambda: thread_rows(self.nthreads, elems, np.float32)) if elems else _no_scratch)

    def run(self, go4: np.ndarray, ind4: np.ndarray, gx4: np.ndarray, prezeroed: bool = False) -> None:
        """``gx4 = 0; gx4[n, c, flat(ind4)] += go4`` (``prezeroed``: ``gx4`` is known to be all zeros).

        Raises ParamInvalidError naming the first (row-major) index outside ``[0, H*W)``."""
        if self.gather:
            bad = _max_pool_indices.gather_backward_cl(*self.gather_args(go4, ind4, gx4))
            if bad is not None:
                if bad:
                    self.fallback(go4, ind4, gx4)
                return
            self.gather = False
        flags = np.zeros(self.items, np.int8)
        if not self.empty_window:
            scratch = self.scratch.take()
            fn, args = self.fast_pass(go4, ind4, gx4, scratch, flags, prezeroed)
            fn(*args)
            self.last_pass = fn
            self.scratch.give(scratch)
        if self.empty_window or np.count_nonzero(flags):
            self.fallback(go4, ind4, gx4)

    # Kernel views in the argument lists below (and so in launch records): grad_x, grad_output, indices.
    GX, GO, IND = 2, 3, 4

    def gather_args(self, go4: np.ndarray, ind4: np.ndarray, gx4: np.ndarray) -> tuple[Any, ...]:
        """Arguments of ``gather_backward_cl`` for these kernel views."""
        return (self.dt, self.it, gx4, go4, ind4, self.row_lo, self.row_hi, self.col_lo, self.col_hi,
                self.nthreads)

    def fast_pass(self, go4: np.ndarray, ind4: np.ndarray, gx4: np.ndarray, scratch: Any, flags: Any,
                  prezeroed: bool) -> tuple[Callable[..., None], tuple[Any, ...]]:
        """The scatter's fast pass - kernel and arguments - chosen here only, for run() and for the launch
        records that replay it."""
        if self.plane_groups:
            return (_max_pool_indices.scatter_backward_planes,
                    (self.dt, self.it, gx4, go4, ind4, self.row_lo, self.row_hi, self.out_lo, self.out_span,
                     self.plane_groups, scratch, flags, self.nthreads, prezeroed))
        return (_max_pool_indices.scatter_backward,
                (self.dt, self.it, gx4, go4, ind4, self.row_lo, self.row_hi, self.part, self.band_oa,
                 self.band_ob, self.channel, not self.use_atomic, scratch, flags, self.scatter_threads, prezeroed))

    def launch(self, go4: np.ndarray, ind4: np.ndarray, gx4: np.ndarray) -> Launch | None:
        """A launch record of :meth:`run` over views like these, with sources grad_output 0, x 1, indices 2 and
        grad_x 3 (the caller adds the views at GX, GO and IND), or None where run() does more than one kernel
        call (windows without input rows)."""
        if self.gather:
            rec = Launch(_max_pool_indices.gather_backward_cl, self.gather_args(go4, ind4, gx4), 3,
                         kernel_records=True)
            rec.expect_false()
        elif self.empty_window:
            return None
        else:
            # stand-ins for the per-call scratch set and flags, which the record finds by identity
            scratch, flags = object(), object()
            fn, args = self.fast_pass(go4, ind4, gx4, scratch, flags, False)
            if fn is not self.last_pass:      # run() called another kernel: this record would not be its call
                return None
            rec = Launch(fn, args, 3, kernel_records=True)
            if not (rec.scratch(self.scratch, scratch) and rec.flags(flags, self.items)):
                return None
        return rec

    def fallback(self, go4: np.ndarray, ind4: np.ndarray, gx4: np.ndarray) -> None:
        """Some index lies outside its window's rows (legal) or outside the plane (an error): redo every plane
        exactly and deterministically, range-checking as we go."""
        N, C, H, W = gx4.shape
        nthreads = self.nthreads
        scratch = thread_rows(nthreads, 2 * H * W, np.float32) if self.narrow else _no_scratch()
        badpos = np.empty(N * C, np.int64)
        _max_pool_indices.scatter_fallback(self.dt, self.it, gx4, go4, ind4, self.row_lo, self.row_hi, scratch,
                                           badpos, nthreads)
        bad = np.flatnonzero(badpos >= 0)
        if bad.size:
            plane = int(bad[0])
            n, c = divmod(plane, C)
            oh, ow = divmod(int(badpos[plane]), go4.shape[3])
            value = int(ind4[n, c, oh, ow])
            raise ParamInvalidError(
                f"{self.index_name}: expected every index in [0, H*W) = [0, {H * W}), got {value} at position "
                f"(n={n}, c={c}, oh={oh}, ow={ow})")


def _no_scratch() -> np.ndarray:
    """What the kernels take for scratch when they need none."""
    return np.empty((1, 1), np.float32)


def scatter_grad(dt: str, it: str, go4: np.ndarray, ind4: np.ndarray, gx4: np.ndarray,
                 row_lo: np.ndarray, row_hi: np.ndarray, deterministic: bool, nthreads: int,
                 index_name: str = "indices", prezeroed: bool = False, col_lo: np.ndarray | None = None,
                 col_hi: np.ndarray | None = None) -> None:
    """Plan and run one scatter (see :class:`ScatterPlan`) over logical-NCHW views (``gx4`` dense in H/W)."""
    ScatterPlan(dt, it, go4, gx4, row_lo, row_hi, deterministic, nthreads, index_name, col_lo,
                col_hi).run(go4, ind4, gx4, prezeroed)
