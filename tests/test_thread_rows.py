"""Helpers of poolgrad/memory.py not covered through the operators: the per-thread scratch layout."""
from __future__ import annotations

import numpy as np
import pytest

from poolgrad.memory import thread_rows


@pytest.mark.parametrize("dtype", [np.uint8, np.int32, np.float32, np.float64])
@pytest.mark.parametrize("nthreads,n", [(1, 1), (2, 3), (3, 56), (7, 1000), (4, 16)])
def test_thread_rows_never_share_a_cache_line(dtype, nthreads, n):
    rows = thread_rows(nthreads, n, dtype)
    item = np.dtype(dtype).itemsize
    assert rows.shape[0] == nthreads and rows.shape[1] >= n and rows.dtype == dtype
    assert rows.flags.c_contiguous and rows.flags.writeable
    starts = [rows[t].__array_interface__["data"][0] for t in range(nthreads)]
    assert all(a % 64 == 0 for a in starts)
    # the n used elements of a row end at least one whole line before the next row starts
    assert all(a + n * item + 64 <= b for a, b in zip(starts, starts[1:]))
