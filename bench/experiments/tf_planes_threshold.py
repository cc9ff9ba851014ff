"""The planes path of the TF max pooling (groups of small NCHW planes as channels-last tiles) against the plane
path, by plane size: the measurement behind ``tf_max_pool.TF_PLANES_TILE_BYTES``.

    PYTHONPATH=. python bench/experiments/tf_planes_threshold.py [rounds] [threads]

Both paths through plans (kernel time plus the plan's small per-call cost), NCHW, about 2**19 input elements per
tensor, interleaved rounds, medians; prints time(planes) / time(plane path) for the forward and the gradient.
"""
from __future__ import annotations

import statistics
import sys
import time

import numpy as np

import poolgrad as pg
from poolgrad import tf_max_pool

SIDES = [7, 13, 14, 28, 32, 45, 46, 56]
CFGS = [(2, 2, "VALID"), (3, 2, "SAME")]


def _plans(x: np.ndarray, k: int, s: int, pad: str, nt: int, planes: bool) -> tuple:
    old = tf_max_pool.PLANES
    tf_max_pool.PLANES = planes
    try:
        K, S = [1, 1, k, k], [1, 1, s, s]
        y = pg.max_pool(x, K, S, pad, "NCHW", num_threads=nt)
        g = np.ones_like(y)
        f = pg.plan_max_pool(x, K, S, pad, "NCHW", num_threads=nt)
        b = pg.plan_max_pool_grad(x, y, g, K, S, pad, "NCHW", num_threads=nt)
        f(x)            # a plan's kernel choices are made on its first run: here, under this setting
        b(x, y, g)
        return (lambda: f(x)), (lambda: b(x, y, g))
    finally:
        tf_max_pool.PLANES = old


def _time(fn, reps: int) -> float:
    t = time.perf_counter()
    for _ in range(reps):
        fn()
    return (time.perf_counter() - t) / reps


def main() -> None:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 7
    nt = int(sys.argv[2]) if len(sys.argv) > 2 else 1
    print(f"threads {nt}: planes / plane path (median of {rounds} interleaved rounds)")
    print("| dtype | planes | k s pad | cell bytes/plane | forward | gradient |\n|---|---|---|---|---|---|")
    for dt in (np.float32, pg.dtypes.bfloat16 if hasattr(pg, "dtypes") else np.float16):
        for side in SIDES:
            planes = max(8, (1 << 19) // (side * side))
            x = np.random.default_rng(0).standard_normal((1, planes, side, side)).astype(dt)
            for k, s, pad in CFGS:
                on, off = _plans(x, k, s, pad, nt, True), _plans(x, k, s, pad, nt, False)
                reps = max(3, int(2e-3 / max(_time(off[1], 1), 1e-6)))
                r = [[], []]
                for _ in range(rounds):
                    for i in range(2):          # each pair back to back: a burst of load hits both
                        r[i].append(_time(on[i], reps) / _time(off[i], reps))
                print(f"| {np.dtype(dt).name} | {planes}x{side}x{side} | k{k}s{s} {pad} | "
                      f"{side * side * np.dtype(dt).itemsize} | {statistics.median(r[0]):.2f} | "
                      f"{statistics.median(r[1]):.2f} |", flush=True)


if __name__ == "__main__":
    main()
