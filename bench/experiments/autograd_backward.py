"""A pooling layer's backward through autograd, as a training step runs it, PyTorch against poolgrad.torch:
``y = pool(x); y.backward(g)`` with ``x`` requiring grad, wall time of the backward call (grad_x allocated by
autograd on both sides), medians of the rounds after two, the two libraries alternating.  ``g`` channels-last
(as a convolution's backward gives it) or contiguous NCHW (a layout change on the way back).

    PYTHONPATH=. python bench/experiments/autograd_backward.py --threads 2      # ResNet-18's stem max pool, b32
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
import poolgrad.torch as pt  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--shape", type=int, nargs=4, default=[32, 64, 112, 112], metavar=("N", "C", "H", "W"))
    ap.add_argument("--pool", type=int, nargs=3, default=[3, 2, 1], metavar=("KERNEL", "STRIDE", "PADDING"))
    ap.add_argument("--rounds", type=int, default=8)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    x = torch.randn(*args.shape).contiguous(memory_format=torch.channels_last).requires_grad_(True)

    def once(fn, channels_last_grad: bool) -> float:
        y = fn(x, *args.pool)
        g = torch.randn_like(y) if channels_last_grad else torch.randn(y.shape)
        t0 = time.perf_counter()
        y.backward(g)
        t1 = time.perf_counter()
        x.grad = None
        return t1 - t0

    for cl in (True, False):
        times: dict[str, list[float]] = {"torch": [], "poolgrad": []}
        for _ in range(args.rounds):
            for name, fn in (("torch", F.max_pool2d), ("poolgrad", pt.max_pool2d)):
                times[name].append(once(fn, cl))
        med = {k: 1e3 * statistics.median(v[2:]) for k, v in times.items()}
        print(f"{args.threads} thread(s), grad {'channels-last' if cl else 'NCHW'}: torch {med['torch']:.1f} ms, "
              f"poolgrad {med['poolgrad']:.1f} ms, torch / poolgrad {med['torch'] / med['poolgrad']:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
