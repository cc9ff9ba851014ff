"""Streaming stores against the layer that reads the pooled output next (issue 9: whole training steps).

A channels-last max forward writes outputs of ``_max_pool_indices.CL_STREAM_BYTES`` and more with streaming
stores: the layer alone gets faster, but the stores bypass the caches, and in a network the next convolution
reads ``y`` at once - from memory instead of from the last-level cache, which on this machine (105 MB L3) holds
outputs of tens of MB.  This times, one thread, CPU time of the calling thread, interleaved rounds, medians
(poolgrad.benchmark.interleaved_medians), for channels-last float32 layers of the training-step models at
batch 32:

* ``torch``: PyTorch's ``F.max_pool2d`` then the next layer's convolution;
* ``pg``: ``poolgrad.torch.max_pool2d`` (as built) then the same convolution;
* ``pg_nostream``: the same with streaming stores off (CL_STREAM_BYTES raised out of reach; the plan cache is
  emptied around each call of both poolgrad variants, so both plan afresh).

Inputs require grad, so the forwards compute indices as in training.  ``--pool-only`` drops the convolution.

    PYTHONPATH=. python bench/experiments/stream_consumer.py
"""
from __future__ import annotations

import argparse
import os
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
import poolgrad.torch as pt  # noqa: E402
from poolgrad import _max_pool_indices, plans  # noqa: E402
from poolgrad.benchmark import interleaved_medians  # noqa: E402

# (name, C, H, kernel, stride, padding, ceil_mode, next conv's (out channels, kernel, padding))
LAYERS = [
    ("googlenet/maxpool1", 64, 112, 3, 2, 0, True, (64, 1, 0)),
    ("googlenet/maxpool2", 192, 56, 3, 2, 0, True, (64, 1, 0)),
    ("resnet18/maxpool", 64, 112, 3, 2, 1, False, (64, 3, 1)),
    ("vgg11/pool2", 128, 112, 2, 2, 0, False, (256, 3, 1)),
    ("vgg11/pool3", 256, 56, 2, 2, 0, False, (512, 3, 1)),
]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--reps", type=int, default=9)
    ap.add_argument("--pool-only", action="store_true")
    ap.add_argument("--layers", nargs="*", default=[L[0] for L in LAYERS], choices=[L[0] for L in LAYERS])
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    saved = _max_pool_indices.CL_STREAM_BYTES
    print("| layer | y MB | torch ms | pg ms | pg no streaming ms | torch / pg | pg / pg no streaming |\n"
          "|---|---|---|---|---|---|---|")
    for name, C, H, k, s, p, ceil, (oc, ck, cp) in LAYERS:
        if name not in args.layers:
            continue
        x = torch.randn(args.batch, C, H, H).contiguous(memory_format=torch.channels_last).requires_grad_(True)
        w = torch.randn(oc, C, ck, ck).contiguous(memory_format=torch.channels_last)

        def step(pool, stream_bytes=None):
            def run():
                if pool is not F.max_pool2d:
                    plans.clear()
                if stream_bytes is not None:
                    _max_pool_indices.CL_STREAM_BYTES = stream_bytes
                try:
                    y = pool(x, k, s, p, ceil_mode=ceil)
                finally:
                    _max_pool_indices.CL_STREAM_BYTES = saved
                if not args.pool_only:
                    F.conv2d(y.detach(), w, padding=cp)
            return run

        with torch.no_grad():
            y = F.max_pool2d(x, k, s, p, ceil_mode=ceil)
        ymb = y.numel() * 4 / 1e6
        fns = {"torch": step(F.max_pool2d), "pg": step(pt.max_pool2d),
               "pg_nostream": step(pt.max_pool2d, 1 << 62)}
        t = interleaved_medians(fns, reps=args.reps, warmup=2, max_seconds=60, clock=time.thread_time)
        print(f"| {name} | {ymb:.1f} | {1e3 * t['torch']:.2f} | {1e3 * t['pg']:.2f} | "
              f"{1e3 * t['pg_nostream']:.2f} | {t['torch'] / t['pg']:.2f} | "
              f"{t['pg'] / t['pg_nostream']:.2f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
