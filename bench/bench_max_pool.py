"""pytest-benchmark suite for the index-scatter backwards (max pooling with indices, adaptive max pooling).

    python -m pytest bench/bench_max_pool.py --benchmark-columns=median,ops --benchmark-group-by=param:shape

Not part of the test-suite (``testpaths`` is ``tests/``); timings belong here, never in unit tests.
"""
from __future__ import annotations

import numpy as np
import pytest

import poolgrad as pg

SHAPES = {"32x64x112x112 k3s2p1": ((32, 64, 112, 112), 3, 2, 1), "1x3x1024x1024 k3s1p1": ((1, 3, 1024, 1024), 3, 1, 1)}


def _inputs(shape, k, s, p, layout, dtype, index_dtype=np.int64):
    rng = np.random.default_rng(0)
    x = rng.standard_normal(shape, dtype=np.float32)
    if layout == "NHWC":
        x = np.ascontiguousarray(x.transpose(0, 2, 3, 1))
    x = x.astype(dtype)
    y, ind = pg.max_pool2d_with_indices(x, k, s, p, layout=layout, index_dtype=index_dtype)
    return rng.standard_normal(y.shape).astype(dtype), x, ind


@pytest.mark.parametrize("shape", list(SHAPES))
@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("deterministic", [True, False])
@pytest.mark.parametrize("threads", [1, None])
def test_max_pool_backward(benchmark, shape, layout, dtype, deterministic, threads):
    dims, k, s, p = SHAPES[shape]
    dt = pg.bfloat16 if dtype == "bfloat16" else np.dtype(dtype)
    go, x, ind = _inputs(dims, k, s, p, layout, dt)
    benchmark(pg.max_pool2d_with_indices_backward, go, x, ind, k, s, p, layout=layout,
              deterministic=deterministic, num_threads=threads)


@pytest.mark.parametrize("index_dtype", ["int32", "int64"])
def test_max_pool_backward_index_width(benchmark, index_dtype):
    dims, k, s, p = SHAPES["32x64x112x112 k3s2p1"]
    go, x, ind = _inputs(dims, k, s, p, "NCHW", np.float32, np.dtype(index_dtype))
    benchmark(pg.max_pool2d_with_indices_backward, go, x, ind, k, s, p, deterministic=True)


@pytest.mark.parametrize("out_hw", [(7, 7), (13, 13)])
@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("deterministic", [True, False])
def test_adaptive_backward(benchmark, out_hw, layout, deterministic):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((32, 64, 112, 112), dtype=np.float32)
    if layout == "NHWC":
        x = np.ascontiguousarray(x.transpose(0, 2, 3, 1))
    y, ind = pg.adaptive_max_pool2d(x, out_hw, layout=layout)
    go = rng.standard_normal(y.shape).astype(np.float32)
    benchmark(pg.adaptive_max_pool2d_backward, go, x, ind, layout=layout, deterministic=deterministic)
