"""Cost of float64 accumulation for the float32 average backward (issue 11 item 3), estimated from the kernels
that exist: float32 (float32 sums), float16 (float64 sums, half the bytes) and float64, 1 thread, out=.

    python bench/experiments/avg_accumulation_cost.py      # from the tree to measure
"""
import sys, os, time, statistics
sys.path.insert(0, os.getcwd())
import numpy as np, poolgrad as pg
rng = np.random.default_rng(0)
res = {}
cases = [((8, 64, 112, 112), (3, 2, 1)), ((1, 3, 1024, 1024), (3, 1, 1)), ((16, 512, 14, 14), (2, 2, 0))]
for rnd in range(7):
    for shape, (k, s, p) in cases:
        for dt in (np.float32, np.float16, np.float64):
            x = np.zeros(shape, dt)
            y = pg.avg_pool2d(x, k, s, p)
            go = rng.standard_normal(y.shape).astype(dt)
            out = np.empty_like(x)
            f = lambda: pg.avg_pool2d_backward(go, x, k, s, p, out=out, num_threads=1)
            f()
            ts = []
            for _ in range(5):
                t0 = time.perf_counter(); f(); ts.append(time.perf_counter() - t0)
            res.setdefault((shape, np.dtype(dt).name), []).append(min(ts))
for shape, _ in cases:
    t32 = statistics.median(res[(shape, "float32")])
    print(shape, " ".join(f"{n}: {statistics.median(res[(shape, n)])*1e3:.2f} ms ({statistics.median(res[(shape, n)])/t32:.2f}x)"
                          for n in ("float32", "float16", "float64")))
