"""Where the time of the TF ``max_pool`` / ``max_pool_grad`` goes on small planes (issue 8 item 3, brief tfsmall).

    PYTHONPATH=. python bench/experiments/tf_small_planes.py [calls]

For 2x16x8x8 (bench/overhead.py's row) and 8x256x13x13 (NCHW, k2s2 VALID, float32, 1 thread) it times, one call at
a time and interleaved in blocks (bench/overhead.py's harness): the plain function, a plan, the bare kernel call
(the launch record's arguments replayed straight into ``_tf_max_pool``), and PyTorch's ATen twin.  Medians in us;
ratios, not absolute times, are what carries across runs on a shared machine.
"""
from __future__ import annotations

import statistics
import sys

import numpy as np
import torch

import poolgrad as pg
from poolgrad import _tf_max_pool, tf_max_pool

sys.path.insert(0, __file__.rsplit("/", 2)[0])
from overhead import _median_us  # noqa: E402

SHAPES = [(2, 16, 8, 8), (8, 256, 13, 13)]
K = [1, 1, 2, 2]


def main() -> None:
    calls = int(sys.argv[1]) if len(sys.argv) > 1 else 10_000
    torch.set_num_threads(1)
    print("| shape | op | function us | plan us | kernel us | PyTorch us | fn/PT | plan/PT | kernel/PT |")
    print("|---|---|---|---|---|---|---|---|---|")
    for shape in SHAPES:
        n = calls if np.prod(shape) < 10**5 else max(400, calls // 50)
        x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
        y = pg.max_pool(x, K, K, "VALID", "NCHW", num_threads=1)
        gy = np.ones_like(y)
        xt, gyt = torch.from_numpy(x), torch.from_numpy(gy)
        _, it = torch.ops.aten.max_pool2d_with_indices(xt, [2, 2], [2, 2])
        fplan = pg.plan_max_pool(x, K, K, "VALID", "NCHW", num_threads=1)
        bplan = pg.plan_max_pool_grad(x, y, gy, K, K, "VALID", "NCHW", num_threads=1)
        fplan(x)
        bplan(x, y, gy)
        # the kernels' own arguments, captured from one call
        cap = {}
        orig_f, orig_b = _tf_max_pool.max_pool, _tf_max_pool.max_pool_grad
        _tf_max_pool.max_pool = lambda *a: (cap.__setitem__("f", a), orig_f(*a))[1]
        _tf_max_pool.max_pool_grad = lambda *a: (cap.__setitem__("b", a), orig_b(*a))[1]
        try:
            tf_max_pool._Pool(x, K, K, "VALID", "NCHW", "x").forward(x, 1)
            pool = tf_max_pool._Pool(x, K, K, "VALID", "NCHW", "x1")
            gx = np.empty_like(x)
            tf_max_pool._run_grad(pool, x, gy, gx, 1)
        finally:
            _tf_max_pool.max_pool, _tf_max_pool.max_pool_grad = orig_f, orig_b
        fa, ba = cap["f"], cap.get("b")
        rows = {
            "max_pool": (lambda: pg.max_pool(x, K, K, "VALID", "NCHW", num_threads=1), lambda: fplan(x),
                         lambda: orig_f(*fa), lambda: torch.ops.aten.max_pool2d_with_indices(xt, [2, 2], [2, 2])),
            "max_pool_grad": (
                lambda: pg.max_pool_grad(x, y, gy, K, K, "VALID", "NCHW", num_threads=1), lambda: bplan(x, y, gy),
                (lambda: orig_b(*ba)) if ba else (lambda: None),
                lambda: torch.ops.aten.max_pool2d_with_indices_backward(gyt, xt, [2, 2], [2, 2], [0, 0], [1, 1],
                                                                        False, it)),
        }
        for name, fns in rows.items():
            t = [[] for _ in fns]
            for _ in range(4):
                for i, fn in enumerate(fns):
                    t[i] += _median_us(fn, n // 4, block=min(1000, n // 4))
            m = [statistics.median(v) / 1e3 for v in t]
            print(f"| {'x'.join(map(str, shape))} | {name} | {m[0]:.2f} | {m[1]:.2f} | {m[2]:.2f} | {m[3]:.2f} | "
                  f"{m[0] / m[3]:.2f} | {m[1] / m[3]:.2f} | {m[2] / m[3]:.2f} |", flush=True)


if __name__ == "__main__":
    main()
