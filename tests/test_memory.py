"""Memory: no growth over many calls, and the working memory of each operator beyond its output is bounded
by the formula documented in the README ("Memory")."""
from __future__ import annotations

import gc
import tracemalloc

import numpy as np
import pytest

import poolgrad as pg
from poolgrad import _scatter, avg_pool, tf_max_pool


def _rss_bytes() -> int:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * 4096


def _small_calls():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((1, 2, 6, 6)).astype(np.float32)
    y, ind = pg.max_pool2d_with_indices(x, 2)
    ya, ia = pg.adaptive_max_pool2d(x, 3)
    yv = avg_pool.avg_pool2d(x, 2)
    xh = np.ascontiguousarray(x.transpose(0, 2, 3, 1))
    yt = tf_max_pool.max_pool(xh, [1, 2, 2, 1], [1, 2, 2, 1], "VALID")
    bad = ind.copy()
    bad[0, 0, 0, 0] = 99
    def bad_call():
        try:
            pg.max_pool2d_with_indices_backward(y, x, bad, 2)
        except pg.ParamInvalidError:
            pass
    return [
        lambda: pg.max_pool2d_with_indices(x, 2),
        lambda: pg.max_pool2d_with_indices_backward(y, x, ind, 2),
        lambda: pg.adaptive_max_pool2d_backward(ya, x, ia),
        lambda: avg_pool.avg_pool2d_backward(yv, x, 2),
        lambda: tf_max_pool.max_pool_grad(xh, yt, yt, [1, 2, 2, 1], [1, 2, 2, 1], "VALID"),
        lambda: pg.max_pooling_grad(x, x, x),
        bad_call,                                     # the error path must not leak either
    ]


def test_no_growth_over_100000_small_calls():
    calls = _small_calls()
    per_call = 100_000 // len(calls) + 1
    for fn in calls:                                  # warm caches (imports, NumPy's small-array cache)
        for _ in range(200):
            fn()
    gc.collect()
    tracemalloc.start()
    rss0 = _rss_bytes()
    snap0 = tracemalloc.take_snapshot()
    for fn in calls:
        for _ in range(per_call):
            fn()
    gc.collect()
    snap1 = tracemalloc.take_snapshot()
    rss1 = _rss_bytes()
    tracemalloc.stop()
    grown = sum(s.size_diff for s in snap1.compare_to(snap0, "filename"))
    assert grown < 64 * 1024, f"Python-visible memory grew by {grown} bytes over {per_call * len(calls)} calls"
    if not pg.get_config()["asan_build"]:   # ASan's quarantine keeps freed memory mapped, by design
        assert rss1 - rss0 < 4 * 1024 * 1024, f"RSS grew by {rss1 - rss0} bytes"


def _extra_bytes(fn, out_nbytes: int) -> int:
    """Peak traced memory of ``fn()`` beyond the output it returns (NumPy reports to tracemalloc)."""
    gc.collect()
    tracemalloc.start()
    tracemalloc.reset_peak()
    base = tracemalloc.get_traced_memory()[0]
    result = fn()
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    del result
    return peak - base - out_nbytes


TABLES = 64 * 1024       # window/band tables, flags and Python objects: a fixed allowance


@pytest.mark.parametrize("dtype", [np.float32, pg.bfloat16], ids=["f32", "bf16"])
@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("threads", [1, 3])
def test_scatter_working_memory_bound(dtype, layout, threads):
    """max/adaptive backward: float32/float64 need only tables; 16-bit types add, per thread, one float64 band
    of at most min(H*W*C', 2**20) elements and one widened float32 grad_output row of Wo*C' (C' = C
    channels-last)."""
    rng = np.random.default_rng(0)
    shape = (2, 8, 300, 200) if layout == "NCHW" else (2, 300, 200, 8)
    x = rng.standard_normal(shape).astype(dtype)
    y, ind = pg.max_pool2d_with_indices(x, 3, 2, 1, layout=layout)
    go = rng.standard_normal(y.shape).astype(dtype)
    extra = _extra_bytes(lambda: pg.max_pool2d_with_indices_backward(go, x, ind, 3, 2, 1, layout=layout,
                                                                     deterministic=True, num_threads=threads),
                         x.nbytes)
    cs = 8 if layout == "NHWC" else 1
    Wo = y.shape[3] if layout == "NCHW" else y.shape[2]
    bound = TABLES + (threads * (8 * min(300 * 200 * cs, _scatter.BAND_MAX) + 4 * Wo * cs)
                      if np.dtype(dtype).itemsize == 2 else 0)
    assert extra <= bound, (extra, bound)


def test_elementwise_needs_no_working_memory():
    rng = np.random.default_rng(0)
    a = rng.standard_normal((64, 64, 64)).astype(np.float32)
    extra = _extra_bytes(lambda: pg.max_pooling_grad(a, a, a, num_threads=2), a.nbytes)
    assert extra <= 16 * 1024, extra


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, pg.bfloat16], ids=["f32", "f64", "bf16"])
def test_avg_backward_working_memory_bound(layout, dtype):
    """avg backward (gather): per thread, (ceil(kh/sh) + 3) grad_x rows of accumulators (W, times C when
    channels-last) plus one output row; plus the divisor table, (Ho or 1) x Wo (x C) accumulators."""
    rng = np.random.default_rng(0)
    N, C, H, W, k, s, threads = 2, 8, 300, 200, 3, 2, 3
    shape = (N, C, H, W) if layout == "NCHW" else (N, H, W, C)
    x = rng.standard_normal(shape).astype(dtype)
    y = avg_pool.avg_pool2d(x, k, s, 1, count_include_pad=False, layout=layout)
    go = rng.standard_normal(y.shape).astype(dtype)
    Ho, Wo = (y.shape[2], y.shape[3]) if layout == "NCHW" else (y.shape[1], y.shape[2])
    acc = 8 if np.dtype(dtype) == np.float64 else 4
    cs = C if layout == "NHWC" else 1
    # a first 16-bit call imports what it needs (about 0.5 MB of module objects): do that on another shape, so
    # that the measured call still plans and allocates its own scratch but imports nothing (run alone, this
    # test measured the imports too)
    small = np.ascontiguousarray(x[:1, :4, :8, :8] if layout == "NCHW" else x[:1, :8, :8, :4])
    small_g = avg_pool.avg_pool2d(small, k, s, 1, count_include_pad=False, layout=layout)
    avg_pool.avg_pool2d_backward(small_g, small, k, s, 1, count_include_pad=False, layout=layout)
    extra = _extra_bytes(lambda: avg_pool.avg_pool2d_backward(go, x, k, s, 1, count_include_pad=False,
                                                              layout=layout, num_threads=threads), x.nbytes)
    bound = (TABLES + threads * ((-(-k // s) + 3) * W * cs + (Wo + 2 * k) * cs) * acc
             + (Ho + 1) * Wo * cs * acc)
    assert extra <= bound, (extra, bound)


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("dtype", [np.float32, pg.bfloat16], ids=["f32", "bf16"])
def test_tf_max_pool_grad_working_memory_bound(layout, dtype):
    """max_pool_grad (fused argmax + scatter): per thread, a ring of R grad_x rows of accumulators (W, times C
    when channels-last; float32 for float32, float64 for the 16-bit types), R the power of two >= the window
    height (or the band height, if smaller)."""
    rng = np.random.default_rng(0)
    N, C, H, W, k, s, threads = 2, 8, 300, 200, 3, 2, 3
    x = rng.standard_normal((N, H, W, C) if layout == "NHWC" else (N, C, H, W)).astype(dtype)
    ks, st = ([1, k, k, 1], [1, s, s, 1]) if layout == "NHWC" else ([1, 1, k, k], [1, 1, s, s])
    y = tf_max_pool.max_pool(x, ks, st, "SAME", data_format=layout)
    g = rng.standard_normal(y.shape).astype(dtype)
    extra = _extra_bytes(lambda: tf_max_pool.max_pool_grad(x, y, g, ks, st, "SAME", data_format=layout,
                                                           num_threads=threads), x.nbytes)
    ring_rows = 1 << (k - 1).bit_length()
    acc = 4 if np.dtype(dtype) == np.float32 else 8
    bound = TABLES + threads * (ring_rows * W * (C if layout == "NHWC" else 1) * acc + k * 4)
    assert extra <= bound, (extra, bound)
