"""pytest-benchmark suite for the TensorFlow-compatible max_pool_grad (argmax recomputed from x1, fused).

    python -m pytest bench/bench_tf_max_pool.py --benchmark-columns=median,ops
"""
from __future__ import annotations

import numpy as np
import pytest

import poolgrad as pg


@pytest.mark.parametrize("case", ["k3s2 SAME", "k2s2 VALID"])
@pytest.mark.parametrize("data_format", ["NHWC", "NCHW"])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("threads", [1, None])
def test_max_pool_grad(benchmark, case, data_format, dtype, threads):
    k, s, padding = (3, 2, "SAME") if case == "k3s2 SAME" else (2, 2, "VALID")
    rng = np.random.default_rng(0)
    dt = pg.bfloat16 if dtype == "bfloat16" else np.dtype(dtype)
    x1 = rng.standard_normal((32, 112, 112, 64), dtype=np.float32)
    if data_format == "NCHW":
        x1 = np.ascontiguousarray(x1.transpose(0, 3, 1, 2))
    x1 = x1.astype(dt)
    ksize, strides = ([1, k, k, 1], [1, s, s, 1]) if data_format == "NHWC" else ([1, 1, k, k], [1, 1, s, s])
    x2 = pg.max_pool(x1, ksize, strides, padding, data_format=data_format)
    grad = rng.standard_normal(x2.shape).astype(dt)
    benchmark(pg.max_pool_grad, x1, x2, grad, ksize, strides, padding, data_format=data_format,
              num_threads=threads)
