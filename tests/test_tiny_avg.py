"""The float32 / float64 NCHW average-pooling forward by whole planes (issue 10: ``pg_avg_plane`` in
src_c/pg_avg.h, one work item per plane, the plane's sums divided at once where its divisors are in output-row
order): bit for bit against the per-row path it replaces and against the reference, over odd shapes, padding,
ceil_mode, count_include_pad, divisor_override, strided views, special values and thread counts."""
from __future__ import annotations

import numpy as np
import pytest

import pgtest
from poolgrad import avg_pool as avg_mod
from poolgrad import plan_avg_pool2d
from poolgrad.avg_pool import avg_pool2d, avg_pool2d_backward
from poolgrad.slow import avg_pool as slow

# kernel, stride, padding, ceil_mode, count_include_pad, divisor_override
GEOMS = [((2, 2), (2, 2), (0, 0), False, True, None), ((3, 3), (2, 2), (1, 1), True, False, None),
         ((3, 3), (1, 1), (1, 1), False, True, None), ((2, 3), (1, 2), (1, 1), True, True, -3),
         ((4, 4), (3, 3), (2, 2), True, False, None), ((5, 3), (4, 1), (2, 0), False, True, 7),
         ((1, 1), (1, 1), (0, 0), False, True, None), ((2, 2), (3, 3), (1, 1), True, True, None),
         ((5, 5), (1, 1), (2, 2), False, False, None), ((3, 20), (1, 1), (1, 10), False, True, None)]
SHAPES = [(2, 16, 8, 8), (1, 3, 7, 9), (3, 5, 13, 11), (1, 9, 1, 17), (2, 4, 16, 5), (2, 3, 9, 7)]
ROWS = 1 << 40          # AVG_ITEMS_PER_THREAD that no problem reaches: the per-row forward


def _values(rng: np.random.Generator, shape: tuple, dtype: np.dtype) -> np.ndarray:
    """Normal values with signed zeros, infinities, NaN and subnormals sprinkled in."""
    x = rng.standard_normal(shape)
    special = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e-310, -1e-42, 1e30])
    pick = rng.random(shape) < 0.08
    x[pick] = rng.choice(special, size=int(pick.sum()))
    return x.astype(dtype)


def _run(monkeypatch, mode: str, x: np.ndarray, geom: tuple, threads: int) -> np.ndarray:
    """avg_pool2d through one forward path: "flat" (planes, divided at once), "plane" (planes, row by row),
    "rows" (one item per output row, as before planes)."""
    monkeypatch.setattr(avg_mod, "PLANE_MAX_BYTES", 0 if mode == "plane" else 128 << 10)
    monkeypatch.setattr(avg_mod, "AVG_ITEMS_PER_THREAD", ROWS if mode == "rows" else 8)
    return avg_pool2d(x, *geom, num_threads=threads)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_plane_forward_bits_match_rows_and_reference(dtype, monkeypatch):
    monkeypatch.setattr(avg_mod, "threads_for", lambda work, nthreads: nthreads)
    rng = np.random.default_rng(10)
    for shape in SHAPES:
        for gi, geom in enumerate(GEOMS):
            x4 = _values(rng, shape, np.dtype(dtype))
            k, s, p, ceil, cip, div = geom
            if any(2 * p[a] > k[a] or shape[2 + a] + 2 * p[a] < k[a] for a in (0, 1)):
                continue                # padding over half the window, or no output: rejected by validation
            want = slow.avg_pool2d(x4, k, s, p, ceil, cip, div)
            for vi, (name, x) in enumerate(pgtest.strided_variants(x4)):
                threads = (1, 2, 3)[(gi + vi) % 3]
                rows = _run(monkeypatch, "rows", x, geom, threads)
                for mode in ("flat", "plane"):
                    got = _run(monkeypatch, mode, x, geom, threads)
                    assert got.tobytes() == rows.tobytes(), (shape, geom, name, mode, threads)
                np.testing.assert_allclose(rows.astype(np.float64), want, equal_nan=True,
                                           **pgtest.tolerance(np.dtype(dtype)), err_msg=f"{shape} {geom} {name}")


def test_plane_forward_same_bits_for_any_thread_count(monkeypatch):
    monkeypatch.setattr(avg_mod, "threads_for", lambda work, nthreads: nthreads)
    x = _values(np.random.default_rng(11), (3, 7, 12, 10), np.dtype(np.float32))
    base = avg_pool2d(x, 3, 2, 1, True, False, num_threads=1)
    for threads in (2, 3, 4, 7):
        assert avg_pool2d(x, 3, 2, 1, True, False, num_threads=threads).tobytes() == base.tobytes()


def test_plan_replays_plane_forward():
    """The plan's replayed kernel call (poolgrad._launch) gives the plain call's bits, call after call."""
    rng = np.random.default_rng(12)
    x = rng.standard_normal((2, 16, 8, 8)).astype(np.float32)
    plan = plan_avg_pool2d(x, 2, 2, num_threads=1)
    for _ in range(3):
        x = rng.standard_normal(x.shape).astype(np.float32)
        assert plan(x).tobytes() == avg_pool2d(x, 2, 2, num_threads=1).tobytes()


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_plane_backward_k_le_stride_bits_match_ring_and_reference(dtype, monkeypatch):
    """The float32 / float64 backward's whole planes with one output row per input row (pg_avg_bplane0: kernel
    <= stride down the rows, cube_math_type 0) against the ring path (PLANE_MAX_BYTES 0), bit for bit, and the
    reference; grad_output in several memory orders (strided rows take the generic plane code)."""
    monkeypatch.setattr(avg_mod, "threads_for", lambda work, nthreads: nthreads)
    rng = np.random.default_rng(13)
    geoms = [g for g in GEOMS if g[0][0] <= g[1][0]] + [((2, 3), (2, 1), (1, 1), True, False, None),
                                                       ((1, 4), (3, 2), (0, 2), False, True, -5)]
    for shape in SHAPES:
        for gi, geom in enumerate(geoms):
            k, s, p, ceil, cip, div = geom
            if any(2 * p[a] > k[a] or shape[2 + a] + 2 * p[a] < k[a] for a in (0, 1)):
                continue
            x = np.zeros(shape, dtype)
            y = avg_pool2d(x, *geom, num_threads=1)
            go4 = _values(rng, y.shape, np.dtype(dtype))
            want = slow.avg_pool2d_backward(go4, shape, k, s, p, ceil, cip, div, 0)
            for vi, (name, go) in enumerate(pgtest.strided_variants(go4)):
                threads = (1, 2, 3)[(gi + vi) % 3]
                monkeypatch.setattr(avg_mod, "PLANE_MAX_BYTES", 128 << 10)
                got = avg_pool2d_backward(go, x, *geom, num_threads=threads)
                monkeypatch.setattr(avg_mod, "PLANE_MAX_BYTES", 0)
                ring = avg_pool2d_backward(go, x, *geom, num_threads=threads)
                assert got.tobytes() == ring.tobytes(), (shape, geom, name, threads)
                finite = np.isfinite(want)
                np.testing.assert_allclose(got.astype(np.float64)[finite], want[finite],
                                           **pgtest.tolerance(np.dtype(dtype)), err_msg=f"{shape} {geom} {name}")
