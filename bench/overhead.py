"""Per-call overhead on tiny tensors: poolgrad against PyTorch, every forward and backward (issue 8, item 3).

    python bench/overhead.py                 # 1x1x4x4 and 2x16x8x8, 1 thread, median of 10**4 calls each
    python bench/overhead.py --calls 20000 --json bench/results/overhead.json

On tensors this small the kernels do almost nothing: what is timed is argument handling, planning, allocation
and dispatch.  Calls are timed one by one (``perf_counter_ns``) after a warm-up, and the two libraries are
interleaved in blocks of 1000 calls so that a burst of load on a shared machine hits both.  The PyTorch column
is the ATen operator called directly (``torch.ops.aten``), which skips ``torch.nn.functional``'s own Python
wrapper: the strictest comparison.  poolgrad's TensorFlow-style and element-wise operators have no ATen twin;
they are compared with the PyTorch operator of the same job (``max_pool2d_with_indices`` for TF ``max_pool``, its
backward for ``max_pool_grad``, ``torch.where`` for ``max_pooling_grad``).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from typing import Callable

import numpy as np

import poolgrad as pg

SHAPES = [(1, 1, 4, 4), (2, 16, 8, 8)]


def _median_us(fn: Callable[[], object], calls: int, block: int = 1000) -> list[float]:
    times = []
    for _ in range(block // 10):
        fn()
    for _ in range(max(1, calls // block)):
        for _ in range(block):
            t0 = time.perf_counter_ns()
            fn()
            times.append(time.perf_counter_ns() - t0)
    return times


def cases(shape: tuple[int, ...]) -> list[tuple[str, Callable, Callable | None]]:
    """(name, poolgrad call, PyTorch call) for every operator on ``shape``, 1 thread, kernel 2 stride 2."""
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    y, ind = pg.max_pool2d_with_indices(x, 2, 2, num_threads=1)
    gy = np.ones_like(y)
    ay, aind = pg.adaptive_max_pool2d(x, (shape[2] // 2, shape[3] // 2), num_threads=1)
    tfy = pg.max_pool(x, [1, 1, 2, 2], [1, 1, 2, 2], "VALID", "NCHW", num_threads=1)
    rows: list[tuple[str, Callable, Callable | None]] = [
        ("max_pool2d_with_indices", lambda: pg.max_pool2d_with_indices(x, 2, 2, num_threads=1), None),
        ("max_pool2d_with_indices_backward",
         lambda: pg.max_pool2d_with_indices_backward(gy, x, ind, 2, 2, num_threads=1), None),
        ("adaptive_max_pool2d", lambda: pg.adaptive_max_pool2d(x, ay.shape[2:], num_threads=1), None),
        ("adaptive_max_pool2d_backward",
         lambda: pg.adaptive_max_pool2d_backward(gy, x, aind, num_threads=1), None),
        ("avg_pool2d", lambda: pg.avg_pool2d(x, 2, 2, num_threads=1), None),
        ("avg_pool2d_backward", lambda: pg.avg_pool2d_backward(gy, x, 2, 2, num_threads=1), None),
        ("max_pool (TF)", lambda: pg.max_pool(x, [1, 1, 2, 2], [1, 1, 2, 2], "VALID", "NCHW", num_threads=1),
         None),
        ("max_pool_grad (TF)",
         lambda: pg.max_pool_grad(x, tfy, gy, [1, 1, 2, 2], [1, 1, 2, 2], "VALID", "NCHW", num_threads=1), None),
        ("max_pooling_grad", lambda: pg.max_pooling_grad(x, x, x, num_threads=1), None),
    ]
    try:
        import torch
    except ImportError:
        return rows
    torch.set_num_threads(1)
    xt = torch.from_numpy(x)
    yt, it = torch.ops.aten.max_pool2d_with_indices(xt, [2, 2], [2, 2])
    gyt = torch.ones_like(yt)
    at, ait = torch.ops.aten.adaptive_max_pool2d(xt, list(ay.shape[2:]))
    aten = torch.ops.aten
    twins = {
        "max_pool2d_with_indices": lambda: aten.max_pool2d_with_indices(xt, [2, 2], [2, 2]),
        "max_pool2d_with_indices_backward":
            lambda: aten.max_pool2d_with_indices_backward(gyt, xt, [2, 2], [2, 2], [0, 0], [1, 1], False, it),
        "adaptive_max_pool2d": lambda: aten.adaptive_max_pool2d(xt, list(ay.shape[2:])),
        "adaptive_max_pool2d_backward": lambda: aten.adaptive_max_pool2d_backward(gyt, xt, ait),
        "avg_pool2d": lambda: aten.avg_pool2d(xt, [2, 2], [2, 2]),
        "avg_pool2d_backward": lambda: aten.avg_pool2d_backward(gyt, xt, [2, 2], [2, 2], [0, 0], False, True, None),
        "max_pool (TF)": lambda: aten.max_pool2d_with_indices(xt, [2, 2], [2, 2]),
        "max_pool_grad (TF)":
            lambda: aten.max_pool2d_with_indices_backward(gyt, xt, [2, 2], [2, 2], [0, 0], [1, 1], False, it),
        "max_pooling_grad": lambda: torch.where(xt == xt, xt, 0.0),
    }
    return [(name, ours, twins[name]) for name, ours, _ in rows]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--calls", type=int, default=10_000, help="timed calls per case and library (>= 10**4)")
    ap.add_argument("--json", help="write the rows here")
    args = ap.parse_args(argv)
    rows = []
    print(f"| shape | operator | poolgrad us | PyTorch us | ratio |\n|---|---|---|---|---|")
    for shape in SHAPES:
        for name, ours, theirs in cases(shape):
            a: list[float] = []
            b: list[float] = []
            for _ in range(4):                      # interleave: four rounds of a quarter each
                a += _median_us(ours, args.calls // 4)
                if theirs is not None:
                    b += _median_us(theirs, args.calls // 4)
            ma = statistics.median(a) / 1e3
            mb = statistics.median(b) / 1e3 if b else float("nan")
            rows.append({"shape": shape, "op": name, "poolgrad_us": ma, "torch_us": mb, "calls": len(a)})
            print(f"| {'x'.join(map(str, shape))} | {name} | {ma:.1f} | {mb:.1f} | {ma / mb:.2f} |", flush=True)
    if args.json:
        os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
        with open(args.json, "w") as fh:
            json.dump(rows, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
