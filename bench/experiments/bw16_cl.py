"""16-bit vs float32 channels-last max-pooling backward (issue 11 follow-up, brief gather16).

``max_pool2d_with_indices_backward`` with ``layout="NHWC"``, ``out=`` preallocated, on one thread; the three
dtypes of one shape are timed interleaved (round-robin, ``time.thread_time``) so that load from other processes
on the shared machine hits them alike, and the report is the median per dtype and its ratio to float32's.

Usage: ``PYTHONPATH=. python bench/experiments/bw16_cl.py [--reps N] [--layout NHWC|NCHW]`` from the tree whose
in-place build is to be measured (without PYTHONPATH the script's own folder comes first on sys.path and the
installed poolgrad is imported: the first line printed says which one ran).
"""
from __future__ import annotations

import argparse
import time

import numpy as np
from threadpoolctl import threadpool_limits

import poolgrad as pg
from poolgrad.dtypes import bfloat16

# (C, H = W, kernel, stride, padding): k2s2 rows run the gather with one covering output per cell, the (3, 2)
# kernel the gather with 1.5 (its multi-output blocks), k3s2p1 and k3s1p1 the band scatter (cover above
# _max_pool_indices.GATHER_MAX_COVER)
SHAPES = [(512, 14, 2, 2, 0), (832, 14, 2, 2, 0), (256, 28, (3, 2), 2, 0), (64, 112, 3, 2, 1),
          (192, 28, 3, 1, 1)]


def main() -> None:
    """Print one line per (shape, dtype): median milliseconds and the ratio to float32."""
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--reps", type=int, default=21)
    ap.add_argument("--layout", default="NHWC", choices=["NHWC", "NCHW"])
    a = ap.parse_args()
    print("poolgrad from", pg.__file__)
    rng = np.random.default_rng(0)
    for C, H, k, s, p in SHAPES:
        calls = {}
        for dt in (np.float32, np.float16, bfloat16):
            shape = (8, H, H, C) if a.layout == "NHWC" else (8, C, H, H)
            x = rng.standard_normal(shape).astype(dt)
            y, ind = pg.max_pool2d_with_indices(x, k, s, p, layout=a.layout)
            go = rng.standard_normal(y.shape).astype(dt)
            out = np.empty_like(x)
            calls[np.dtype(dt).name] = (lambda go=go, x=x, ind=ind, out=out: pg.max_pool2d_with_indices_backward(
                go, x, ind, k, s, p, layout=a.layout, out=out))
        ts = {n: [] for n in calls}
        for n, f in calls.items():
            f()
        for _ in range(a.reps):
            for n, f in calls.items():
                t = time.thread_time()
                f()
                ts[n].append(time.thread_time() - t)
        ref = float(np.median(ts["float32"]))
        kname = k if isinstance(k, int) else "x".join(map(str, k))
        for n in calls:
            m = float(np.median(ts[n]))
            print(f"{a.layout} 8x{H}x{H}x{C} k{kname}s{s}p{p} {n:9s} {m * 1e3:7.2f} ms  x{m / ref:5.2f}")


if __name__ == "__main__":
    with threadpool_limits(1):
        main()
