"""Channels-last max backward at kernel level: the gather (``gather_backward_cl``) against the band scatter, per
overlapping layer of bench/cnn_layers.py (and any extra geometry), to place ``GATHER_MAX_COVER``.

One thread, float32, int64 or int32 indices, the calling thread's CPU time; each round times a burst of each
path in turn (interleaved), figures are medians over rounds.  Both paths' results are compared bit for bit.
Run from the worktree root:

    PYTHONPATH=. python bench/experiments/clbwd_cover.py [--batches 1 8] [--rounds 9] [--index32]
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402

import poolgrad as pg  # noqa: E402
from poolgrad import _max_pool_indices  # noqa: E402
from poolgrad._scatter import ScatterPlan  # noqa: E402
from cnn_layers import LAYERS  # noqa: E402


def spans(n: int, o: int, k: int, s: int, p: int) -> tuple[np.ndarray, np.ndarray]:
    """PyTorch-style window spans [lo, hi) of o outputs over n inputs."""
    start = np.arange(o, dtype=np.int64) * s - p
    return np.maximum(start, 0), np.minimum(start + k, n)


def cover(lo: np.ndarray, hi: np.ndarray, n: int) -> float:
    return float(np.sum(hi - lo)) / n


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--batches", type=int, nargs="*", default=[1, 8])
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--index32", action="store_true")
    ap.add_argument("--min-cover", type=float, default=1.01, help="skip geometries covering cells less")
    ap.add_argument("--extra", nargs="*", default=[], help="C,H,k,s,p,ceil geometries")
    args = ap.parse_args()
    geos = []
    for L in LAYERS:
        if L.op == "max" and (L.c, L.h, L.kernel, L.stride, L.padding, L.ceil_mode) not in geos:
            geos.append((L.c, L.h, L.kernel, L.stride, L.padding, L.ceil_mode))
    for e in args.extra:
        c, h, k, s, p, ceil = (int(v) for v in e.split(","))
        geos.append((c, h, k, s, p, bool(ceil)))
    idt = np.int32 if args.index32 else np.int64
    it = "i32" if args.index32 else "i64"
    rng = np.random.default_rng(0)
    for C, H, k, s, p, ceil in geos:
        for N in args.batches:
            x = rng.standard_normal((N, H, H, C), dtype=np.float32)
            y, ind = pg.max_pool2d_with_indices(x, k, s, p, 1, ceil, layout="NHWC", index_dtype=idt,
                                                num_threads=1)
            Ho = y.shape[1]
            lo, hi = spans(H, Ho, k, s, p)
            cov = cover(lo, hi, H) ** 2
            if cov < args.min_cover:
                continue
            go = rng.standard_normal(y.shape, dtype=np.float32)
            go4, ind4 = go.transpose(0, 3, 1, 2), ind.transpose(0, 3, 1, 2)
            outs = {}
            plans = {}
            saved = _max_pool_indices.GATHER_MAX_COVER
            try:
                _max_pool_indices.GATHER_MAX_COVER = 1e9
                for path in ("gather", "scatter"):
                    gx = np.empty_like(x)
                    gx4 = gx.transpose(0, 3, 1, 2)
                    plan = ScatterPlan("f32", it, go4, gx4, lo, hi, True, 1, col_lo=lo, col_hi=hi)
                    if path == "scatter":
                        plan.gather = False
                    plan.run(go4, ind4, gx4)
                    outs[path] = gx
                    plans[path] = (plan, gx4)
                assert np.array_equal(outs["gather"].view(np.uint32), outs["scatter"].view(np.uint32))
                times: dict[str, list[float]] = {"gather": [], "scatter": []}
                reps = max(1, int(2e-3 / max(1e-6, N * C * H * H * 2e-9)))
                for r in range(args.rounds):
                    for path in (("gather", "scatter") if r % 2 == 0 else ("scatter", "gather")):
                        plan, gx4 = plans[path]
                        t0 = time.thread_time()
                        for _ in range(reps):
                            plan.run(go4, ind4, gx4)
                        times[path].append((time.thread_time() - t0) / reps)
            finally:
                _max_pool_indices.GATHER_MAX_COVER = saved
            tg, ts = statistics.median(times["gather"]), statistics.median(times["scatter"])
            print(f"{N}x{H}x{H}x{C} k{k}s{s}p{p}{' ceil' if ceil else ''} {it} cover {cov:.2f}: gather "
                  f"{tg * 1e6:8.1f} us  scatter {ts * 1e6:8.1f} us  scatter/gather {ts / tg:.2f}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
