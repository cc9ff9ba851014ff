"""Tall-image mode against the plane / ring paths, kernel time only (issue 10: where to set TALL_MAX_W).

    PYTHONPATH=. python bench/experiments/avgflat_threshold.py                 # the default shapes, float32
    PYTHONPATH=. python bench/experiments/avgflat_threshold.py --dtype f64 --shapes 2x16x8x8 8x512x14x14

For each NCHW shape (k2s2 unless --kernel says otherwise) two plans per direction are made, one planned with
TALL_MAX_W = 0 (the old paths) and one with no limit (tall mode where it applies), and their captured kernel
calls (``Launch.kernel_ns``: a median of 9 rounds) are timed alternately, ``--rounds`` times each; the table gives
the medians of those and their ratio tall / old (below 1: tall mode faster).  1 thread unless --threads.
"""
from __future__ import annotations

import argparse
import statistics
import sys

import numpy as np

import poolgrad as pg
from poolgrad import avg_pool as avg_mod

SHAPES = ["2x16x8x8", "8x64x8x8", "4x64x14x14", "4x64x16x16", "4x32x28x28", "4x32x32x32", "2x16x56x56",
          "2x16x64x64", "1x8x112x112", "1x4x224x224",
          # DenseNet-121's transitions (avg 2x2 s2) at batch 1 and 8
          "1x128x56x56", "1x256x28x28", "1x512x14x14", "8x128x56x56", "8x256x28x28", "8x512x14x14"]


def _plans(shape: tuple[int, ...], dtype: np.dtype, k: int, threads: int, limit: int) -> tuple:
    """(forward plan, its arguments, backward plan, its arguments) planned under TALL_MAX_W = limit."""
    saved = avg_mod.TALL_MAX_W
    avg_mod.TALL_MAX_W = limit
    try:
        rng = np.random.default_rng(0)
        x = rng.standard_normal(shape).astype(dtype)
        fwd = pg.plan_avg_pool2d(x, k, k, num_threads=threads)
        y = fwd(x)
        go = rng.standard_normal(y.shape).astype(dtype)
        bwd = pg.plan_avg_pool2d_backward(go, x, k, k, num_threads=threads)
        for _ in range(2):              # the first call records the launch, the second captures the kernel call
            fwd(x)
            bwd(go, x)
    finally:
        avg_mod.TALL_MAX_W = saved
    return (fwd, (x,), y), (bwd, (go, x), x)


def _kernel_ns(made: tuple, reps: int) -> float:
    plan, args, like = made
    launch = plan._launch_record
    return launch.kernel_ns(*args, np.empty_like(like), reps=reps)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shapes", nargs="+", default=SHAPES)
    ap.add_argument("--dtype", choices=["f32", "f64"], default="f32")
    ap.add_argument("--kernel", type=int, default=2, help="kernel == stride")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--budget-ms", type=float, default=40.0, help="rough time per kernel_ns call")
    args = ap.parse_args(argv)
    dtype = np.dtype(np.float32 if args.dtype == "f32" else np.float64)
    print(f"{args.dtype}, k{args.kernel}s{args.kernel}, {args.threads} thread(s), kernel us (medians of "
          f"{args.rounds} alternating rounds)\n"
          "| shape | fwd old | fwd tall | tall/old | bwd old | bwd tall | tall/old |\n|---|---|---|---|---|---|---|")
    for text in args.shapes:
        shape = tuple(int(v) for v in text.split("x"))
        old = _plans(shape, dtype, args.kernel, args.threads, 0)
        tall = _plans(shape, dtype, args.kernel, args.threads, 1 << 30)
        row = [text]
        for d in (0, 1):
            probe = _kernel_ns(old[d], 9)
            reps = int(max(9, min(20000, args.budget_ms * 1e6 / max(probe, 1.0))))
            a: list[float] = []
            b: list[float] = []
            for _ in range(args.rounds):
                a.append(_kernel_ns(old[d], reps))
                b.append(_kernel_ns(tall[d], reps))
            ma, mb = statistics.median(a) / 1e3, statistics.median(b) / 1e3
            row += [f"{ma:.2f}", f"{mb:.2f}", f"{mb / ma:.2f}"]
        print("| " + " | ".join(row) + " |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
