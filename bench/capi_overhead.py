"""Per-call time through the C API, against a Python plan and the plain function, on tiny tensors (issue 10,
part 2): max_pool2d_with_indices_backward and max_pooling_grad, whose executes both run their captured kernel
calls without the GIL (the scatter's scratch and flags allocated per call for the first).

    PYTHONPATH=$PWD python bench/capi_overhead.py          # builds examples/c_ext in a temporary folder

The C example runs ``reps`` executes of one plan in one POSIX thread that does not hold the GIL (it keeps its
Python thread state, see docs/C_API.md); the time of a 1-rep run is subtracted so that plan creation and thread
start-up do not count.  The three contenders are interleaved in rounds and the medians of the rounds reported:
on a shared machine compare the ratios, not the absolute times.
"""
from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

import poolgrad as pg

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _per_call(fn, reps: int) -> float:
    t0 = time.perf_counter()
    for _ in range(reps):
        fn()
    return (time.perf_counter() - t0) / reps * 1e6


def _contenders(shape: tuple[int, ...]) -> dict[str, dict]:
    """Per operator: the C example's arguments (one thread writing out[0]) and operator code, and the same call
    through a Python plan and through the plain function, all with out= and one OpenMP thread."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal(shape).astype(np.float32)
    y, ind = pg.max_pool2d_with_indices(x, 2, 2)
    go = np.ones_like(y)
    out = np.empty((1,) + x.shape, np.float32)
    plan = pg.plan_max_pool2d_with_indices_backward(go, x, ind, 2, 2, out=out[0], deterministic=True, num_threads=1)
    # max_pooling_grad: distinct dy, x, y (so that its kernel call is captured: the C execute skips the GIL)
    dy, xm = rng.standard_normal(shape).astype(np.float32), x.copy()
    ym = np.where(rng.random(shape) < 0.5, xm, 0).astype(np.float32)
    mplan = pg.plan_max_pooling_grad(dy, xm, ym, out=out[0], num_threads=1)
    return {
        "max_pool2d_with_indices_backward (no GIL)": dict(
            c_args=(go, x, ind, out, 2, 2, 1), code=2, plan=lambda: plan(go, x, ind, out=out[0]),
            function=lambda: pg.max_pool2d_with_indices_backward(go, x, ind, 2, 2, out=out[0], deterministic=True,
                                                                 num_threads=1)),
        "max_pooling_grad (no GIL)": dict(
            c_args=(dy, xm, ym, out, 1, 1, 1), code=9, plan=lambda: mplan(dy, xm, ym, out=out[0]),
            function=lambda: pg.max_pooling_grad(dy, xm, ym, out=out[0], num_threads=1)),
    }


def main() -> int:
    tmp = tempfile.mkdtemp()
    try:
        src = os.path.join(tmp, "c_ext")
        shutil.copytree(os.path.join(ROOT, "examples", "c_ext"), src)
        subprocess.run([sys.executable, "setup.py", "-q", "build_ext", "--inplace"], cwd=src, check=True,
                       capture_output=True, env=dict(os.environ, PYTHONPATH=ROOT))
        sys.path.insert(0, src)
        import pg_c_example as m
        reps, rounds = 5000, 9
        print("| shape | operator | C execute us | Python plan us | function us | C/plan | C/function |\n"
              "|---|---|---|---|---|---|---|")
        for shape in [(1, 1, 4, 4), (2, 16, 8, 8)]:
            for op, cmp in _contenders(shape).items():
                c, p, f = [], [], []
                for _ in range(rounds):
                    t0 = time.perf_counter()
                    m.backward(*cmp["c_args"], reps + 1, cmp["code"])
                    t1 = time.perf_counter()
                    m.backward(*cmp["c_args"], 1, cmp["code"])
                    t2 = time.perf_counter()
                    c.append(((t1 - t0) - (t2 - t1)) / reps * 1e6)
                    p.append(_per_call(cmp["plan"], reps))
                    f.append(_per_call(cmp["function"], reps))
                mc, mp, mf = statistics.median(c), statistics.median(p), statistics.median(f)
                print(f"| {'x'.join(map(str, shape))} | {op} | {mc:.2f} | {mp:.2f} | {mf:.2f} | {mc / mp:.2f} | "
                      f"{mc / mf:.2f} |", flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
