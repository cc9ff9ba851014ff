"""The max-pooling forward's kernel call alone on small NCHW planes, by path (issue 10: the flat 2x2 forward).

    PYTHONPATH=. python bench/experiments/maxflat_kernels.py                  # default shapes, float32, 1 thread
    PYTHONPATH=. python bench/experiments/maxflat_kernels.py --dtype float64 --rounds 9 --shapes 2x16x8x8

For each shape (kernel 2, stride 2, or adaptive halving with ``--adaptive``) a plan is made per path - ``flat``
(pg_flat2 on the planes as they lie), ``tiles`` (the planes forward: channels-last tiles) and ``rows`` (the
vectorised row kernel, planes path off) - and its captured kernel call is timed alone (``Launch.kernel_ns``,
the time K of bench/plan_overhead.py, per-call buffers included, no allocation).  The paths are interleaved
round by round (a burst of load on the shared machine hits all of them); the table gives the median of the
rounds in ns per input element and each path's time over the flat one.
"""
from __future__ import annotations

import argparse
import statistics
import sys

import numpy as np

import poolgrad as pg
from poolgrad import _max_pool_indices, indexed

SHAPES = ["2x16x8x8", "8x16x8x8", "1x64x16x16", "1x832x14x14", "8x832x14x14", "1x64x28x28", "8x64x32x32",
          "1x256x4x4"]
ALWAYS = ((float("inf"), 1 << 40),)
NEVER = ((float("inf"), 0),)


def _plan(x: np.ndarray, path: str, adaptive: bool, threads: int):
    """A plan that runs ``path``, with its kernel call captured, and the arrays kernel_ns needs."""
    saved = indexed.FLAT_2X2, indexed.PLANES_MAX_CELLS, indexed.FLAT_MIN_FILL
    indexed.FLAT_2X2 = path == "flat"
    indexed.FLAT_MIN_FILL = 0.0             # the flat kernel wherever it can run, however few lanes it fills
    indexed.PLANES_MAX_CELLS = NEVER if path == "rows" else saved[1]
    real = _max_pool_indices.argmax_forward_planes
    seen: list[str] = []

    def spy(*args, record=None):            # takes record=, so the plan still captures the kernel call
        seen.append(real(*args, record=record))
        return seen[-1]

    _max_pool_indices.argmax_forward_planes = spy
    try:
        pg.plans.clear()
        if adaptive:
            plan = pg.plan_adaptive_max_pool2d(x, (x.shape[2] // 2, x.shape[3] // 2), num_threads=threads)
        else:
            plan = pg.plan_max_pool2d_with_indices(x, 2, 2, num_threads=threads)
        for _ in range(2):          # the first call records the launch, the second captures the kernel call
            y, ind = plan(x)
    finally:
        indexed.FLAT_2X2, indexed.PLANES_MAX_CELLS, indexed.FLAT_MIN_FILL = saved
        _max_pool_indices.argmax_forward_planes = real
        pg.plans.clear()
    # the path really taken, as the dispatcher reports it
    assert ("flat" in seen) == (path == "flat") and (path == "rows") == (not seen), (path, seen)
    launch = plan._launch_record
    assert launch is not None and launch.kernel is not None, path
    return launch, (x, np.empty_like(y), np.empty_like(ind)), (y, ind)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shapes", nargs="+", default=SHAPES)
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--reps", type=int, default=2000, help="kernel calls per round (kernel_ns: median of 9 parts)")
    ap.add_argument("--adaptive", action="store_true")
    ap.add_argument("--paths", nargs="+", default=["flat", "tiles", "rows"])
    ap.add_argument("--apart", action="store_true",
                    help="every other channel of a twice as wide array: planes apart, so none packed")
    args = ap.parse_args(argv)
    print(f"| shape | {args.dtype} {'adaptive' if args.adaptive else 'k2s2'}{' apart' if args.apart else ''} | "
          + " | ".join(f"{p} ns/elem" for p in args.paths) + " | "
          + " | ".join(f"{p}/flat" for p in args.paths if p != "flat") + " |")
    print("|---|---|" + "---|" * (2 * len(args.paths) - 1))
    for spec in args.shapes:
        shape = tuple(int(v) for v in spec.split("x"))
        x = np.random.default_rng(0).standard_normal(shape).astype(args.dtype)
        if args.apart:
            wide = np.zeros((shape[0], 2 * shape[1]) + shape[2:], args.dtype)
            wide[:, ::2] = x
            x = wide[:, ::2]
        made = {p: _plan(x, p, args.adaptive, args.threads) for p in args.paths}
        results = [r for _, _, r in made.values()]
        for y, ind in results[1:]:                      # every path: the same bits
            assert np.array_equal(y.view(np.uint8), results[0][0].view(np.uint8))
            assert np.array_equal(ind, results[0][1])
        times: dict[str, list[float]] = {p: [] for p in args.paths}
        reps = max(9, args.reps * 4096 // max(x.size, 1))
        for _ in range(args.rounds):
            for p in args.paths:
                launch, arrays, _ = made[p]
                times[p].append(launch.kernel_ns(*arrays, reps=reps) / x.size)
        med = {p: statistics.median(t) for p, t in times.items()}
        base = med.get("flat")
        ratios = " | ".join(f"{med[p] / base:.2f}" if base else "-" for p in args.paths if p != "flat")
        print(f"| {spec} | | " + " | ".join(f"{med[p]:.3f}" for p in args.paths) + f" | {ratios} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
