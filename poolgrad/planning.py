"""Planning: how many threads a call uses and how its work is cut into items.

Pure functions of shapes and strides (no validation, no allocation).  Results never depend on these choices:
every kernel is bitwise deterministic in the thread count and in the cut, or documented otherwise.
"""
from __future__ import annotations

import numpy as np

__all__ = ["GRAIN", "threads_for", "split_evenly", "channel_inner"]

# Elements of work below which one more thread costs more than it saves: waking an OpenMP team and joining it
# takes microseconds, and on a loaded machine a thread that is not scheduled stalls the whole call at the join.
GRAIN = 32768


def threads_for(work: int, nthreads: int, grain: int = GRAIN) -> int:
    """Threads worth using for ``work`` elements (at least one, at most ``nthreads``)."""
    return max(1, min(nthreads, work // grain))


def split_evenly(length: int, count: int) -> np.ndarray:
    """``count + 1`` int64 bounds splitting ``range(length)`` into ``count`` near-equal parts (``count`` clipped
    to ``[1, length]``): the row bands and chunks the kernels' work items own."""
    count = max(1, min(count, length))
    return (np.arange(count + 1, dtype=np.int64) * length) // count


def channel_inner(arr4: np.ndarray) -> bool:
    """True when C is the fastest-varying logical axis of a logical-NCHW view in memory (channels-last
    storage): the kernels then run their channels-last loops."""
    s = [abs(v) for v in arr4.strides]
    return arr4.shape[1] > 1 and s[1] < s[3]
