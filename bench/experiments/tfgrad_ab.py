"""The gather path of the TF ``max_pool_grad`` against the ring paths it replaces (issue 10, brief tfgrad).

    PYTHONPATH=. python bench/experiments/tfgrad_ab.py [rounds] [threads]

For each shape (NCHW float32, 1x ``threads``) two plans are made from the same arrays, one planned with
``tf_max_pool.GATHER`` off (the ring paths: planes path for small planes, plane path for big ones) and one with it
on; each call writes a preallocated ``out``.  They are timed in alternation, ``rounds`` rounds of a block of
calls each, and the medians per call are printed with their ratio (gather / ring: below 1 is faster).  On a
shared machine only the ratios mean anything.
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
    ((8, 256, 13, 13), (2, 2), "VALID", 20),        # odd planes: a row and a column past the last window
    ((8, 512, 14, 14), (2, 2), "VALID", 10),        # VGG-16 pool5, batch 8
    ((8, 128, 28, 28), (2, 2), "VALID", 10),
    ((8, 64, 32, 32), (2, 2), "VALID", 10),
    ((8, 192, 56, 56), (2, 2), "VALID", 4),         # a real big layer (the brief's)
    ((8, 64, 112, 112), (2, 2), "VALID", 2),        # VGG-16 pool1, batch 8 (26 MB)
    ((1, 64, 112, 112), (3, 3), "SAME", 4),         # not k == s: the ring path in both plans (a control)
]


def _plan(x, y, g, k, pad, threads, gather):
    saved = tf_max_pool.GATHER
    tf_max_pool.GATHER = gather
    try:
        ks = [1, 1, k[0], k[1]]
        out = np.empty_like(x)
        plan = pg.plan_max_pool_grad(x, y, g, ks, ks, pad, "NCHW", out=out, num_threads=threads)
        plan(x, y, g, out=out)          # plans its work under the patched constants
        plan(x, y, g, out=out)          # captures the kernel call
    finally:
        tf_max_pool.GATHER = saved
    return plan, out


def _block_us(fn, n):
    t0 = time.perf_counter_ns()
    for _ in range(n):
        fn()
    return (time.perf_counter_ns() - t0) / n / 1e3


def main() -> int:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 9
    threads = int(sys.argv[2]) if len(sys.argv) > 2 else 1
    print(f"threads {threads}, {rounds} rounds")
    print("| shape | k=s | ring us | gather us | gather/ring | path |")
    print("|---|---|---|---|---|---|")
    for shape, k, pad, block in SHAPES:
        rng = np.random.default_rng(0)
        x = rng.standard_normal(shape).astype(np.float32)
        ks = [1, 1, k[0], k[1]]
        y = pg.max_pool(x, ks, ks, pad, "NCHW", num_threads=threads)
        g = rng.standard_normal(y.shape).astype(np.float32)
        ring, out_r = _plan(x, y, g, k, pad, threads, False)
        gath, out_g = _plan(x, y, g, k, pad, threads, True)
        assert out_r.tobytes() == out_g.tobytes(), shape
        a, b = [], []
        for _ in range(rounds):
            a.append(_block_us(lambda: ring(x, y, g, out=out_r), block))
            b.append(_block_us(lambda: gath(x, y, g, out=out_g), block))
        ma, mb = statistics.median(a), statistics.median(b)
        taken = gath._launch_record.kernel.temps == ()      # the gather record has no per-call buffers
        print(f"| {'x'.join(map(str, shape))} | {k[0]}x{k[1]} {pad} | {ma:.2f} | {mb:.2f} | {mb / ma:.2f} | "
              f"{'gather' if taken else 'ring'} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
