"""pytest-benchmark suite for average pooling's backward (a gather: no zeroing pass, no atomics).

    python -m pytest bench/bench_avg_pool.py --benchmark-columns=median,ops
"""
from __future__ import annotations

import numpy as np
import pytest

import poolgrad as pg

SHAPES = {"32x64x112x112 k3s2p1": ((32, 64, 112, 112), 3, 2, 1), "1x3x1024x1024 k3s1p1": ((1, 3, 1024, 1024), 3, 1, 1)}


@pytest.mark.parametrize("shape", list(SHAPES))
@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
# cube_math_type 1 (HF32 operands) only changes float32; other dtypes run the mode-0 kernel
@pytest.mark.parametrize("dtype,cube_math_type", [("float32", 0), ("float32", 1), ("bfloat16", 0)])
@pytest.mark.parametrize("threads", [1, None])
def test_avg_pool_backward(benchmark, shape, layout, dtype, cube_math_type, threads):
    dims, k, s, p = SHAPES[shape]
    rng = np.random.default_rng(0)
    dt = pg.bfloat16 if dtype == "bfloat16" else np.dtype(dtype)
    x = rng.standard_normal(dims, dtype=np.float32)
    if layout == "NHWC":
        x = np.ascontiguousarray(x.transpose(0, 2, 3, 1))
    x = x.astype(dt)
    go = rng.standard_normal(pg.avg_pool2d(x, k, s, p, layout=layout).shape).astype(dt)
    benchmark(pg.avg_pool2d_backward, go, x, k, s, p, layout=layout, cube_math_type=cube_math_type,
              num_threads=threads)
