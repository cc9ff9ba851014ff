"""When do streaming stores pay in TF ``max_pool_grad``?  Times the fused backward (float32 unless DTYPE=bf16,
k3s2 VALID, ``out=`` preallocated) with grad_x written by streaming stores and by ordinary stores, interleaved,
and prints streamed / cached time per case (median of the rounds), for rows (the contiguous W*C values of
channels-last memory, the W values of a plane) of different lengths and alignments and outputs of different
sizes.  The planner rule in poolgrad/tf_max_pool.py (_stream_rows) cites this run.

    PYTHONPATH=. python bench/experiments/tf_stream_rows.py [rounds] [threads]

Ratios only mean something within one run (the machine is shared)."""
from __future__ import annotations

import statistics
import sys
import time

import numpy as np

import poolgrad as pg
import poolgrad.plans
from poolgrad import tf_max_pool
from poolgrad.dtypes import bfloat16

ROUNDS = int(sys.argv[1]) if len(sys.argv) > 1 else 7
# one thread: the CPU time of the calling thread (the kernel runs there), which being descheduled on a shared
# machine does not inflate; more threads: wall time
CLOCK = time.thread_time if (int(sys.argv[2]) if len(sys.argv) > 2 else 1) == 1 else time.perf_counter
THREADS = int(sys.argv[2]) if len(sys.argv) > 2 else 1
DT = bfloat16 if "bf16" in sys.argv[3:] else np.float32

# (layout, N, C, H, W): row bytes and grad_x bytes are printed beside each result
CASES = [
    ("NCHW", 24, 512, 14, 14),      # 56 B rows (the batch 20 -> 24 cliff of issue 8): not 16-byte multiples
    ("NCHW", 8, 512, 7, 7),         # 28 B rows, 0.8 MiB
    ("NCHW", 48, 128, 28, 28),      # 112 B rows, 18 MiB
    ("NCHW", 12, 64, 56, 56),       # 224 B rows
    ("NCHW", 8, 64, 112, 112),      # 448 B rows (bench/suite.py's NCHW row, quick size)
    ("NCHW", 32, 64, 112, 112),     # 448 B rows, 98 MiB (bench/suite.py's NCHW row)
    ("NCHW", 8, 64, 113, 113),      # 452 B rows: not 16-byte multiples
    ("NCHW", 8, 128, 64, 64),       # 256 B rows
    ("NCHW", 2, 32, 256, 256),      # 1 KiB
    ("NCHW", 1, 4, 1024, 1024),     # 4 KiB, 16 MiB
    ("NCHW", 1, 1, 1024, 1024),     # 4 KiB rows, 4 MiB in all
    ("NCHW", 1, 2, 1024, 1024),     # 8 MiB
    ("NCHW", 1, 3, 1024, 1024),     # 12 MiB
    ("NHWC", 2, 512, 7, 7),         # 14 KiB rows, 0.2 MiB
    ("NHWC", 2, 24, 128, 128),      # 12 KiB rows, 3 MiB
    ("NHWC", 24, 512, 14, 14),      # 28 KiB, 9 MiB
    ("NHWC", 12, 64, 56, 56),       # 14 KiB, 9 MiB
    ("NHWC", 8, 64, 112, 112),      # 28 KiB, 24 MiB (bench/suite.py's NHWC row, quick size)
    ("NHWC", 12, 9, 56, 56),        # 2016 B rows: not 16-byte multiples
]


def make(layout: str, N: int, C: int, H: int, W: int):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((N, H, W, C) if layout == "NHWC" else (N, C, H, W)).astype(DT)
    k4, s4 = ([1, 3, 3, 1], [1, 2, 2, 1]) if layout == "NHWC" else ([1, 1, 3, 3], [1, 1, 2, 2])
    y = pg.max_pool(x, k4, s4, "VALID", layout)
    g = rng.standard_normal(y.shape).astype(DT)
    gx = np.empty_like(x)
    return lambda: pg.max_pool_grad(x, y, g, k4, s4, "VALID", layout, out=gx, num_threads=THREADS), x


def timed(fn, stream: bool) -> float:
    """One call with streaming forced on or off (a fresh plan, so the planner reads the patched rule)."""
    saved = tf_max_pool._stream_rows
    tf_max_pool._stream_rows = lambda target, row_elems: stream
    poolgrad.plans.clear()
    try:
        fn()                                   # plans (untimed)
        t0 = CLOCK()
        fn()
        return CLOCK() - t0
    finally:
        tf_max_pool._stream_rows = saved
        poolgrad.plans.clear()


def main() -> None:
    calls = [make(*c) for c in CASES]
    times = {i: ([], []) for i in range(len(CASES))}
    for _ in range(ROUNDS):
        for i, (fn, _x) in enumerate(calls):
            times[i][0].append(timed(fn, True))
            times[i][1].append(timed(fn, False))
    print(f"{np.dtype(DT).name}, {THREADS} thread(s), median of {ROUNDS} interleaved rounds")
    print(f"{'case':28} {'row B':>7} {'grad_x MiB':>10} {'stream ms':>10} {'cached ms':>10} {'ratio':>6}")
    for i, ((layout, N, C, H, W), (fn, x)) in enumerate(zip(CASES, calls)):
        row = (W * C if layout == "NHWC" else W) * x.itemsize
        s, c = statistics.median(times[i][0]), statistics.median(times[i][1])
        print(f"{layout} {N}x{C}x{H}x{W}".ljust(28) + f" {row:7d} {x.nbytes / 2**20:10.1f} {s * 1e3:10.2f} "
              f"{c * 1e3:10.2f} {s / c:6.2f}")


if __name__ == "__main__":
    main()
