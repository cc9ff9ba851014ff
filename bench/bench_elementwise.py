"""pytest-benchmark suite for the element-wise max_pooling_grad, beside np.where on the same arrays.

    python -m pytest bench/bench_elementwise.py --benchmark-columns=median,ops --benchmark-group-by=param:dtype
"""
from __future__ import annotations

import numpy as np
import pytest

import poolgrad as pg

N = 1 << 26


def _arrays(dtype):
    rng = np.random.default_rng(0)
    dt = pg.bfloat16 if dtype == "bfloat16" else np.dtype(dtype)
    x = rng.integers(0, 4, size=N).astype(np.float32).astype(dt)
    y = rng.integers(0, 4, size=N).astype(np.float32).astype(dt)
    dy = rng.standard_normal(N, dtype=np.float32).astype(dt)
    return dy, x, y


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("threads", [1, None])
def test_max_pooling_grad(benchmark, dtype, threads):
    dy, x, y = _arrays(dtype)
    benchmark(pg.max_pooling_grad, dy, x, y, num_threads=threads)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_numpy_where_baseline(benchmark, dtype):
    dy, x, y = _arrays(dtype)
    zero = np.zeros((), dy.dtype)
    benchmark(np.where, x == y, dy, zero)
