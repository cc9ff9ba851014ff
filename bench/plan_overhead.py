"""Per-call time through a plan against the plain function and PyTorch on tiny tensors (issue 10, part 1).

    python bench/plan_overhead.py                 # 1x1x4x4 and 2x16x8x8, 1 thread, medians of 10**4 calls
    python bench/plan_overhead.py --calls 20000

Same harness as bench/overhead.py (calls timed one by one after a warm-up, the three contenders interleaved in
blocks so a burst of load on a shared machine hits all of them); this adds the plan column.  Every operator gets
a plan made from the same arrays as the plain call.  PyTorch's column is the ATen operator called directly.

The kernel column is the plan's captured kernel call run alone from compiled code (``Launch.kernel_ns``: median
of 9 rounds, its per-call buffers included, no output allocation): the time K that a plan call and a plain call
share.  With it a row splits into K, the plan's own per-call cost (plan - K) and the plain call's extra cost
(function - plan): a ratio of at most 0.5 needs function - plan >= plan.  "-" where the plan replays no kernel
call.  ``max_pooling_grad`` runs on three times the same array, as in bench/overhead.py (its plan captures the
kernel call on stand-ins: see ``Launch._capture``).
"""
from __future__ import annotations

import argparse
import statistics
import sys
from typing import Callable

import numpy as np

import poolgrad as pg

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from overhead import SHAPES, _median_us, cases  # noqa: E402


def plans(shape: tuple[int, ...]) -> dict[str, Callable[[], object]]:
    """A plan call per operator, on the arrays ``overhead.cases`` uses."""
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    y, ind = pg.max_pool2d_with_indices(x, 2, 2, num_threads=1)
    gy = np.ones_like(y)
    ay, aind = pg.adaptive_max_pool2d(x, (shape[2] // 2, shape[3] // 2), num_threads=1)
    tfy = pg.max_pool(x, [1, 1, 2, 2], [1, 1, 2, 2], "VALID", "NCHW", num_threads=1)
    p = {
        "max_pool2d_with_indices": (pg.plan_max_pool2d_with_indices(x, 2, 2, num_threads=1), (x,)),
        "max_pool2d_with_indices_backward":
            (pg.plan_max_pool2d_with_indices_backward(gy, x, ind, 2, 2, num_threads=1), (gy, x, ind)),
        "adaptive_max_pool2d": (pg.plan_adaptive_max_pool2d(x, ay.shape[2:], num_threads=1), (x,)),
        "adaptive_max_pool2d_backward":
            (pg.plan_adaptive_max_pool2d_backward(gy, x, aind, num_threads=1), (gy, x, aind)),
        "avg_pool2d": (pg.plan_avg_pool2d(x, 2, 2, num_threads=1), (x,)),
        "avg_pool2d_backward": (pg.plan_avg_pool2d_backward(gy, x, 2, 2, num_threads=1), (gy, x)),
        "max_pool (TF)": (pg.plan_max_pool(x, [1, 1, 2, 2], [1, 1, 2, 2], "VALID", "NCHW", num_threads=1), (x,)),
        "max_pool_grad (TF)": (pg.plan_max_pool_grad(x, tfy, gy, [1, 1, 2, 2], [1, 1, 2, 2], "VALID", "NCHW",
                                                     num_threads=1), (x, tfy, gy)),
        "max_pooling_grad": (pg.plan_max_pooling_grad(x, x, x, num_threads=1), (x, x, x)),
    }
    return {name: (lambda plan=plan, args=args: plan(*args)) for name, (plan, args) in p.items()}, p


def kernel_us(plan: pg.Plan, args: tuple, reps: int) -> float | None:
    """Microseconds of the plan's captured kernel call alone (None where it has none)."""
    for _ in range(2):          # the first call records the launch, the second captures the kernel call
        res = plan(*args)
    launch = plan._launch_record
    if launch is None or launch.kernel is None:
        return None
    outs = res if type(res) is tuple else (res,)
    return launch.kernel_ns(*args, *[np.empty_like(o) for o in outs], reps=reps) / 1e3


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--calls", type=int, default=10_000, help="timed calls per case and contender")
    args = ap.parse_args(argv)
    print("| shape | operator | plan us | function us | PyTorch us | kernel us | plan/function | plan/PyTorch |\n"
          "|---|---|---|---|---|---|---|---|")
    for shape in SHAPES:
        through_plan, made = plans(shape)
        for name, ours, theirs in cases(shape):
            a: list[float] = []
            b: list[float] = []
            c: list[float] = []
            for _ in range(4):
                a += _median_us(through_plan[name], args.calls // 4)
                b += _median_us(ours, args.calls // 4)
                if theirs is not None:
                    c += _median_us(theirs, args.calls // 4)
            ma, mb = statistics.median(a) / 1e3, statistics.median(b) / 1e3
            mc = statistics.median(c) / 1e3 if c else float("nan")
            k = kernel_us(*made[name], args.calls)
            ks = "-" if k is None else f"{k:.2f}"
            print(f"| {'x'.join(map(str, shape))} | {name} | {ma:.2f} | {mb:.2f} | {mc:.2f} | {ks} | {ma / mb:.2f} | "
                  f"{ma / mc:.2f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
