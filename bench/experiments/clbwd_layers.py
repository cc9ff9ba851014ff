"""Channels-last max / adaptive-max backward, poolgrad against PyTorch, per layer of bench/cnn_layers.py.

Both libraries write preallocated outputs (kernel level), one thread, the calling thread's CPU time; every
round times a burst of calls of each library in turn (interleaved), and each figure is the median over rounds.
Gradients are checked against PyTorch first.  Run from the worktree root:

    PYTHONPATH=. python bench/experiments/clbwd_layers.py [--batches 1 8] [--layers pool5 adaptive] [--rounds 9]
"""
from __future__ import annotations

import argparse
import math
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402
import torch  # noqa: E402

from cnn_layers import LAYERS  # noqa: E402
from models import LayerRun  # noqa: E402


def burst(fn, budget: float = 2e-3) -> int:
    """Calls per timed burst: about ``budget`` seconds of CPU time."""
    t0 = time.thread_time()
    fn()
    dt = max(time.thread_time() - t0, 1e-6)
    return max(1, min(2000, int(budget / dt)))


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--batches", type=int, nargs="*", default=[1, 8, 32])
    ap.add_argument("--layers", nargs="*", default=None)
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--index32", action="store_true", help="poolgrad with int32 indices (not PyTorch's)")
    args = ap.parse_args()
    torch.set_num_threads(1)
    seen = set()
    ratios = []
    for layer in LAYERS:
        if layer.op == "avg":
            continue
        key = (layer.op, layer.c, layer.h, layer.w, layer.kernel, layer.stride, layer.padding, layer.ceil_mode,
               layer.output_size)
        if key in seen or (args.layers and not any(s in layer.key for s in args.layers)):
            continue
        seen.add(key)
        for b in args.batches:
            run = LayerRun(layer, b, "NHWC")
            fns = run.callables(1, "out", ("bwd",))
            pg_fn, pt_fn = fns["poolgrad", "bwd"], fns["torch", "bwd"]
            if args.index32:
                import poolgrad as pg
                L = layer
                gx = np.empty_like(run.x)
                if L.op == "max":
                    _, i32 = pg.max_pool2d_with_indices(run.x, L.kernel, L.stride, L.padding, 1, L.ceil_mode,
                                                        layout="NHWC", index_dtype=np.int32, num_threads=1)
                    pg_fn = lambda: pg.max_pool2d_with_indices_backward(  # noqa: E731
                        run.gy, run.x, i32, L.kernel, L.stride, L.padding, 1, L.ceil_mode, layout="NHWC",
                        out=gx, num_threads=1)
                else:
                    _, i32 = pg.adaptive_max_pool2d(run.x, L.out_hw(), layout="NHWC", index_dtype=np.int32,
                                                    num_threads=1)
                    pg_fn = lambda: pg.adaptive_max_pool2d_backward(  # noqa: E731
                        run.gy, run.x, i32, layout="NHWC", out=gx, num_threads=1)
            got = np.asarray(pg_fn()).transpose(0, 3, 1, 2)
            want = pt_fn().numpy()
            if not np.allclose(got, want, rtol=1e-5, atol=1e-6):
                print("MISMATCH", layer.key, b)
                return 1
            reps = {"pg": burst(pg_fn), "pt": burst(pt_fn)}
            times: dict[str, list[float]] = {"pg": [], "pt": []}
            for r in range(args.rounds):
                order = (("pg", pg_fn), ("pt", pt_fn)) if r % 2 == 0 else (("pt", pt_fn), ("pg", pg_fn))
                for lab, fn in order:
                    n = reps[lab]
                    t0 = time.thread_time()
                    for _ in range(n):
                        fn()
                    times[lab].append((time.thread_time() - t0) / n)
            pg_t, pt_t = statistics.median(times["pg"]), statistics.median(times["pt"])
            ratios.append(pt_t / pg_t)
            print(f"{layer.key:38s} {layer.describe():26s} b{b:<3d} pg {pg_t * 1e6:9.1f} us  "
                  f"pt {pt_t * 1e6:9.1f} us  {pt_t / pg_t:5.2f}x", flush=True)
    print(f"geomean {math.exp(sum(map(math.log, ratios)) / len(ratios)):.3f} over {len(ratios)} rows")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
