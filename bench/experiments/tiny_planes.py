"""Kernel time of the small-plane max forwards, planes (channels-last tiles) against the row kernel, on tiny
NCHW problems (issue 10): which one a planner rule should pick for few small planes.

    PYTHONPATH=. python bench/experiments/tiny_planes.py

Per shape and window: the median of ``Launch.kernel_ns`` (compiled replay of the plan's kernel call, 1 thread)
with ``indexed.PLANES_MAX_CELLS`` forcing each path, the two interleaved over 5 rounds.
"""
from __future__ import annotations

import statistics
import sys

import numpy as np

import poolgrad as pg
from poolgrad import indexed

ALWAYS = ((float("inf"), 1 << 40),)
NEVER = ((float("inf"), 0),)


def kernel_ns(make, x, reps: int) -> float:
    plan = make(x)
    for _ in range(2):
        res = plan(x)
    launch = plan._launch_record
    return launch.kernel_ns(x, *[np.empty_like(o) for o in res], reps=reps)


def main() -> int:
    cases = [((2, 16, 8, 8), "k2s2"), ((2, 16, 8, 8), "adaptive4"), ((1, 32, 8, 8), "k3s2p1"),
             ((2, 32, 14, 14), "k2s2"), ((2, 32, 16, 16), "k2s2"), ((2, 64, 16, 16), "k3s2p1"),
             ((4, 32, 12, 12), "adaptive4"), ((8, 16, 7, 7), "k3s1p1"), ((1, 64, 28, 28), "k2s2")]
    print("| shape | windows | planes ns | rows ns | planes/rows |\n|---|---|---|---|---|")
    for shape, win in cases:
        x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
        if win == "adaptive4":
            def make(a):
                return pg.plan_adaptive_max_pool2d(a, (4, 4), num_threads=1)
        else:
            k, s, p = {"k2s2": (2, 2, 0), "k3s2p1": (3, 2, 1), "k3s1p1": (3, 1, 1)}[win]

            def make(a, k=k, s=s, p=p):
                return pg.plan_max_pool2d_with_indices(a, k, s, p, num_threads=1)
        res: dict[str, list[float]] = {"planes": [], "rows": []}
        for _ in range(5):
            for name, limit in (("planes", ALWAYS), ("rows", NEVER)):
                indexed.PLANES_MAX_CELLS = limit
                res[name].append(kernel_ns(make, x, 2000))
        a, b = statistics.median(res["planes"]), statistics.median(res["rows"])
        print(f"| {'x'.join(map(str, shape))} | {win} | {a:.0f} | {b:.0f} | {a / b:.2f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
