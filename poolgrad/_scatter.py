"""Planning and driving the index-scatter backward shared by max_pool2d_with_indices_backward and
adaptive_max_pool2d_backward (kernels in ``_max_pool_indices.pyx``)."""
from __future__ import annotations

import numpy as np

from . import _max_pool_indices
from .config import threads_for
from .errors import ParamInvalidError
from .params import split_evenly, thread_rows

# Most grad_x elements one deterministic work item owns (and so the float32 scratch one thread needs for the
# 16-bit types: 4 MiB).  Bands are otherwise as tall as load balance allows: every band re-reads the output rows
# whose windows straddle its edges, and on channels-last 112x112x64 images 64 Ki-element bands cost twice the
# time of whole-image bands (measured), while keeping a band in L2 bought nothing measurable.
BAND_MAX = 1 << 20
# With few planes, cut them into at least this many bands per thread.  More bands balance better but re-read
# more boundary rows: on 1x3x1024x1024 k3s1 at 2 threads, 2-6 per thread were best and 16 cost 10-30% more.
ITEMS_PER_THREAD = 4
# Nondeterministic float32/float64 with fewer planes than threads uses the atomic kernel when bands would be
# less than this many window heights tall.
THIN_BANDS = 4


def channel_inner(arr4: np.ndarray) -> bool:
    """True when C is the fastest-varying logical axis in memory (channels-last storage)."""
    s = [abs(v) for v in arr4.strides]
    return arr4.shape[1] > 1 and s[1] < s[3]


def scatter_grad(dt: str, it: str, go4: np.ndarray, ind4: np.ndarray, gx4: np.ndarray,
                 row_lo: np.ndarray, row_hi: np.ndarray, deterministic: bool, nthreads: int,
                 index_name: str = "indices", prezeroed: bool = False, col_lo: np.ndarray | None = None,
                 col_hi: np.ndarray | None = None) -> None:
    """``gx4 = 0; gx4[n, c, flat(ind4)] += go4`` over logical-NCHW views (``gx4`` dense in H/W).

    ``prezeroed``: ``gx4`` is known to be all zeros (freshly mapped memory, see ``buffers.take``), so the
    kernels skip zeroing it: a full write of grad_x saved.
    ``col_lo``/``col_hi``: the column spans of the windows (as ``row_lo``/``row_hi`` for rows); given, a
    channels-last problem may run as a gather over grad_x instead (``gather_backward_cl``: lanes over C, every
    cell written once, the same bits as the deterministic scatter, in both modes).

    Raises ParamInvalidError naming the first (row-major) index outside ``[0, H*W)``.
    """
    N, C, H, W = gx4.shape
    Ho = go4.shape[2]
    nthreads = threads_for(gx4.size + go4.size, nthreads)
    channel = channel_inner(gx4)
    # An output whose window holds no input row (padding and dilation can do that) reaches no band, so the
    # banded kernels would never see its index: such problems go straight to the exact plane-by-plane pass.
    empty_window = bool(np.any(row_hi <= row_lo))
    if channel and col_lo is not None and not empty_window and not np.any(col_hi <= col_lo):
        bad = _max_pool_indices.gather_backward_cl(dt, it, gx4, go4, ind4, row_lo, row_hi, col_lo, col_hi,
                                                   nthreads)
        if bad is not None:
            if bad:
                _fallback(dt, it, go4, ind4, gx4, row_lo, row_hi, nthreads, index_name)
            return
    units = N if channel else N * C                 # independent planes (or images, channels-last)
    row_elems = W * (C if channel else 1)           # grad_x elements in one row of one unit
    narrow = dt in ("f16", "bf16")
    nb = -(-H * row_elems // BAND_MAX)
    if nthreads > 1 and units * nb < ITEMS_PER_THREAD * nthreads:
        nb = max(nb, -(-ITEMS_PER_THREAD * nthreads // units))
        # equal bands under a static schedule: a whole number of items per thread (3 planes on 2 threads
        # in 9 bands leave one thread 5 items and the other 4)
        nb = next((b for b in range(nb, 2 * nb + 1) if units * b % nthreads == 0), nb)
    # Nondeterministic mode may split the outputs instead and add atomically where chunks meet; that only pays
    # when bands would be so thin that re-reading the output rows that straddle band edges costs more.  Bands
    # won wherever they are a few windows tall (1x1x2048^2 k3s1 at 2 threads: 2.2 ms banded, 2.4 ms atomic;
    # channels-last 1x1024^2x3: 1.7 against 2.3 ms).
    span = int(np.max(row_hi - row_lo)) if len(row_lo) else 0
    use_atomic = ((not deterministic) and not narrow and units < nthreads
                  and H < THIN_BANDS * span * nb)
    if use_atomic:
        part = split_evenly(Ho, -(-ITEMS_PER_THREAD * nthreads // units))
        band_oa = band_ob = None
        scratch = np.empty((1, 1), np.float32)
    else:
        part = split_evenly(H, nb)
        band_oa = np.searchsorted(row_hi, part[:-1], side="right").astype(np.int64)
        band_ob = np.searchsorted(row_lo, part[1:], side="left").astype(np.int64)
        rows = int(np.max(np.diff(part)))
        # 16-bit: one more output row per thread, where a contiguous grad_output row is widened at once
        widen = go4.shape[3] * (C if channel else 1) if narrow else 0
        scratch = thread_rows(nthreads, rows * row_elems + widen, np.float32) if narrow else \
            np.empty((1, 1), np.float32)
    flags = np.zeros(units * (len(part) - 1), np.int8)
    if not empty_window:
        _max_pool_indices.scatter_backward(dt, it, gx4, go4, ind4, row_lo, row_hi, part, band_oa, band_ob,
                                           channel, not use_atomic, scratch, flags, nthreads,
                                           prezeroed)
    if empty_window or flags.any():
        _fallback(dt, it, go4, ind4, gx4, row_lo, row_hi, nthreads, index_name)


def _fallback(dt: str, it: str, go4: np.ndarray, ind4: np.ndarray, gx4: np.ndarray, row_lo: np.ndarray,
              row_hi: np.ndarray, nthreads: int, index_name: str) -> None:
    """Some index lies outside its window (legal) or outside the plane (an error): redo every plane exactly
    and deterministically, range-checking as we go; raises ParamInvalidError naming the first bad index."""
    N, C, H, W = gx4.shape
    narrow = dt in ("f16", "bf16")
    scratch = thread_rows(nthreads, H * W, np.float32) if narrow else np.empty((1, 1), np.float32)
    badpos = np.empty(N * C, np.int64)
    _max_pool_indices.scatter_fallback(dt, it, gx4, go4, ind4, row_lo, row_hi, scratch, badpos, nthreads)
    bad = np.flatnonzero(badpos >= 0)
    if bad.size:
        plane = int(bad[0])
        n, c = divmod(plane, C)
        oh, ow = divmod(int(badpos[plane]), go4.shape[3])
        value = int(ind4[n, c, oh, ow])
        raise ParamInvalidError(
            f"{index_name}: expected every index in [0, H*W) = [0, {H * W}), got {value} at position "
            f"(n={n}, c={c}, oh={oh}, ow={ow})")
