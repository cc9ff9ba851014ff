"""The tiled path of the TF ``max_pool`` forward against the paths it replaces (issue 10, brief tffwd).

    PYTHONPATH=. python bench/experiments/tffwd_ab.py [rounds] [threads] [dtype]

For each shape (NCHW, ``dtype`` - float32 unless given: float64, float16, bfloat16 -, ``threads`` threads) two forward plans are made from the same array, one planned
with ``tf_max_pool.TILED`` off (the planes path for small planes, the plane path for big ones) and one with it on.
They are timed in alternation, ``rounds`` rounds of a block of calls each; printed: the medians per plan call
(output allocation included) and per captured kernel call alone (``Launch.kernel_ns``, no allocation), and the
ratios tiled / old (below 1 is faster).  On a shared machine only the ratios mean anything.
"""
from __future__ import annotations

import statistics
import sys
import time

import numpy as np

import poolgrad as pg
from poolgrad import tf_max_pool

# (shape NCHW, window = stride, padding, block of calls per round)
SHAPES = [
    ((2, 16, 8, 8), (2, 2), "VALID", 2000),         # bench/plan_overhead.py's row
    ((8, 256, 13, 13), (2, 2), "VALID", 40),        # odd planes: a row and a column past the last window
    ((8, 512, 14, 14), (2, 2), "VALID", 20),        # VGG-16 pool5, batch 8
    ((8, 128, 28, 28), (2, 2), "VALID", 20),
    ((8, 64, 32, 32), (2, 2), "VALID", 20),
    ((8, 192, 56, 56), (2, 2), "VALID", 6),         # a real big layer
    ((8, 64, 112, 112), (2, 2), "VALID", 3),        # VGG-16 pool1, batch 8 (26 MB)
    ((1, 64, 112, 112), (3, 3), "SAME", 6),         # not k == s: the old path in both plans (a control)
]


def _plan(x, k, pad, threads, tiled):
    saved = tf_max_pool.TILED
    tf_max_pool.TILED = tiled
    try:
        ks = [1, 1, k[0], k[1]]
        plan = pg.plan_max_pool(x, ks, ks, pad, "NCHW", num_threads=threads)
        y = plan(x)             # plans its work under the patched constant
        plan(x)                 # captures the kernel call
    finally:
        tf_max_pool.TILED = saved
    return plan, y


def _block_us(fn, n):
    t0 = time.perf_counter_ns()
    for _ in range(n):
        fn()
    return (time.perf_counter_ns() - t0) / n / 1e3


def _kernel_us(plan, x, y, n):
    return plan._launch_record.kernel_ns(x, np.empty_like(y), reps=n) / 1e3


def main() -> int:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 9
    threads = int(sys.argv[2]) if len(sys.argv) > 2 else 1
    dtype = np.dtype(pg.bfloat16 if sys.argv[3:] == ["bfloat16"] else (sys.argv[3] if len(sys.argv) > 3 else "float32"))
    print(f"threads {threads}, {rounds} rounds, {dtype}")
    print("| shape | k=s | old plan us | tiled plan us | plan tiled/old | old kernel us | tiled kernel us | "
          "kernel tiled/old | path |")
    print("|---|---|---|---|---|---|---|---|---|")
    for shape, k, pad, block in SHAPES:
        x = np.random.default_rng(0).standard_normal(shape).astype(dtype)
        old, y_o = _plan(x, k, pad, threads, False)
        new, y_n = _plan(x, k, pad, threads, True)
        assert y_o.tobytes() == y_n.tobytes(), shape
        a, b, ka, kb = [], [], [], []
        for _ in range(rounds):
            a.append(_block_us(lambda: old(x), block))
            b.append(_block_us(lambda: new(x), block))
            ka.append(_kernel_us(old, x, y_o, block))
            kb.append(_kernel_us(new, x, y_n, block))
        ma, mb, mka, mkb = (statistics.median(v) for v in (a, b, ka, kb))
        ks = [1, 1, k[0], k[1]]
        taken = tf_max_pool._forward_tiles(tf_max_pool._Pool(x, ks, ks, pad, "NCHW", "x"), x, False, threads)
        print(f"| {'x'.join(map(str, shape))} | {k[0]}x{k[1]} {pad} | {ma:.2f} | {mb:.2f} | {mb / ma:.2f} | "
              f"{mka:.2f} | {mkb:.2f} | {mkb / mka:.2f} | {'tiled' if taken else 'old'} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
