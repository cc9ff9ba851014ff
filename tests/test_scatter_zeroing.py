"""The band scatter zeroes each band's grad_x rows lazily (just before the first output row that reaches them,
the rest after the last): every cell of an ``out=`` array that starts as NaNs must come out written, for bands
cut anywhere (thread counts), windows with padding, dilation and ceil_mode, rows no window reaches, both
layouts and both modes."""
from __future__ import annotations

import numpy as np
import pytest

import pgtest
import poolgrad as pg
from poolgrad import slow


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("k, s, p, d, ceil", [(3, 2, 1, 1, False), (2, 2, 0, 1, False), (3, 1, 1, 1, True),
                                               (3, 2, 2, 2, False), (2, 3, 0, 1, False)])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_band_scatter_writes_every_cell_of_out(layout, k, s, p, d, ceil, dtype):
    rng = np.random.default_rng(k * 10 + s)
    x4 = rng.standard_normal((2, 5, 13, 11)).astype(dtype)
    x = np.ascontiguousarray(x4.transpose(0, 2, 3, 1)) if layout == "NHWC" else x4
    y, ind = pg.max_pool2d_with_indices(x, k, s, p, d, ceil, layout=layout)
    go = rng.standard_normal(y.shape).astype(dtype)
    go4 = go.transpose(0, 3, 1, 2) if layout == "NHWC" else go
    ind4 = ind.transpose(0, 3, 1, 2) if layout == "NHWC" else ind
    ref = slow.max_pool2d_with_indices_backward(go4, x4.shape, ind4)
    for det in (True, False):
        for threads in (1, 2, 3, 7):
            out = np.full_like(x, np.nan)
            gx = pg.max_pool2d_with_indices_backward(go, x, ind, k, s, p, d, ceil, layout=layout, out=out,
                                                     deterministic=det, num_threads=threads)
            gx4 = gx.transpose(0, 3, 1, 2) if layout == "NHWC" else gx
            assert not np.isnan(gx4).any(), (det, threads)
            np.testing.assert_allclose(gx4, ref, **pgtest.tolerance(np.dtype(dtype)))


@pytest.mark.parametrize("deterministic", [True, False])
@pytest.mark.parametrize("batch, size, bands, threads", [(1, 14, 1, 1), (1, 28, 2, 2), (8, 14, 1, 4)])
def test_channels_last_thin_bands_are_cut_thicker(batch, size, bands, threads, deterministic):
    """Channels-last scatter: where the bands cut for the threads would be thinner than THIN_BANDS windows, it
    cuts fewer (THIN_BANDS windows tall, or whole images) and runs one thread per band, without atomics.  The
    bits are the one-thread result's either way."""
    from poolgrad._scatter import ScatterPlan
    from poolgrad.geometry import pool_windows
    rng = np.random.default_rng(7)
    x = rng.standard_normal((batch, size, size, 256)).astype(np.float32)
    y, ind = pg.max_pool2d_with_indices(x, 3, 1, 1, layout="NHWC")
    g = rng.standard_normal(y.shape).astype(np.float32)
    rows = pool_windows(size, size, 3, 1, 1, 1)
    gx4, go4 = np.empty_like(x).transpose(0, 3, 1, 2), g.transpose(0, 3, 1, 2)
    plan = ScatterPlan("f32", "i64", go4, gx4, rows["lo"], rows["hi"], deterministic, 4)
    assert plan.nthreads > 1 and len(plan.part) == bands + 1 and plan.scatter_threads == threads
    assert not plan.use_atomic
    want = pg.max_pool2d_with_indices_backward(g, x, ind, 3, 1, 1, layout="NHWC", num_threads=1)
    for nt in (2, 3, 4):
        got = pg.max_pool2d_with_indices_backward(g, x, ind, 3, 1, 1, layout="NHWC", num_threads=nt,
                                                  deterministic=deterministic)
        assert got.tobytes() == want.tobytes()
