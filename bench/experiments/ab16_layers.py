"""A/B timing of the 16-bit pooling kernels in two poolgrad trees (issue 11's 10% bound), on real layers.

Cases: the average-pooling layers of ``bench/cnn_layers.py`` (Inception-v3's k3s1p1 branch poolings, DenseNet's
k2s2 transitions) at batch ``--batch`` and issue 11's 4x8x64x64 k3s1p1; float16 and bfloat16; NCHW and NHWC;
1 and 2 threads; ``avg_pool2d_backward`` (``out=`` preallocated) and ``avg_pool2d`` forward (allocating: the
baseline has no ``out=`` for it).  ``--ops max`` instead times the 16-bit max-pooling backwards of the same
module's max layers (``max_pool2d_with_indices_backward``, ``adaptive_max_pool2d_backward`` and TF's
``max_pool_grad``, all with ``out=``), for the report only.

Each tree runs in its own worker process (``sys.path`` points at the tree, which must be built in place); the
two workers are driven interleaved case by case, alternating which goes first, and each answer is the median of
the calls of the case (9 below 2M elements, else 5); a row reports the median over ``--rounds`` rounds of the wall
time and of the process CPU time (``time.process_time``: what the call's threads ran, not the time they waited
for the CPU; for 1 thread the steadier figure on a loaded machine, for 2 threads it includes barrier spinning).
Both workers run with ``GOMP_SPINCOUNT=20000``: libgomp's default (300,000 PAUSEs, ~20 ms on this CPU) keeps the
idle worker's OpenMP thread spinning on a core while the other worker runs its 2-thread case, which put
4-16 ms scheduler delays into most 2-thread rows.  The machine is shared: only the ratios of one run mean
anything.

    python bench/experiments/ab16_layers.py /tmp/pg-base . --rounds 5          # avg, baseline vs this tree
    python bench/experiments/ab16_layers.py /tmp/pg-base . --ops max --rounds 3
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from typing import Any

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from cnn_layers import LAYERS, Layer  # noqa: E402

WORKER = r'''
import sys, json, time, numpy as np
sys.path.insert(0, sys.argv[1])
import poolgrad as pg
from ml_dtypes import bfloat16
assert pg.__file__.startswith(sys.argv[1]), pg.__file__
DT = {"f16": np.float16, "bf16": bfloat16}
cache = {}
def nhwc(a):
    return np.ascontiguousarray(a.transpose(0, 2, 3, 1))
def setup(c):
    key = json.dumps(c)
    if key in cache:
        return cache[key]
    rng = np.random.default_rng(0)
    N, C, H, W = c["shape"]; k, s, p = c["ksp"]; dt = DT[c["dt"]]; lay = c["layout"]; thr = c["thr"]
    x = rng.standard_normal((N, C, H, W)).astype(dt)
    if lay == "NHWC":
        x = nhwc(x)
    out = np.empty_like(x)
    op = c["op"]
    if op in ("avg_bwd", "avg_fwd"):
        y = pg.avg_pool2d(x, k, s, p, layout=lay)
        go = rng.standard_normal(y.shape).astype(dt)
        if op == "avg_bwd":
            f = lambda: pg.avg_pool2d_backward(go, x, k, s, p, layout=lay, out=out, num_threads=thr)
        else:
            f = lambda: pg.avg_pool2d(x, k, s, p, layout=lay, num_threads=thr)
    elif op == "max_bwd":
        y, idx = pg.max_pool2d_with_indices(x, k, s, p, 1, c["ceil"], layout=lay)
        go = rng.standard_normal(y.shape).astype(dt)
        f = lambda: pg.max_pool2d_with_indices_backward(go, x, idx, k, s, p, 1, c["ceil"], layout=lay, out=out,
                                                        num_threads=thr)
    elif op == "adaptive_bwd":
        y, idx = pg.adaptive_max_pool2d(x, c["osize"], layout=lay)
        go = rng.standard_normal(y.shape).astype(dt)
        f = lambda: pg.adaptive_max_pool2d_backward(go, x, idx, layout=lay, out=out, num_threads=thr)
    elif op == "tf_bwd":
        fmt = "NHWC" if lay == "NHWC" else "NCHW"
        ks = [1, k, k, 1] if fmt == "NHWC" else [1, 1, k, k]
        st = [1, s, s, 1] if fmt == "NHWC" else [1, 1, s, s]
        # VALID layers only (cases() skips padded ones); x2 is the real max pool of x1, as TF passes it
        y = pg.max_pool2d_with_indices(x, k, s, 0, layout=lay)[0]
        pad = "VALID"
        g = rng.standard_normal(y.shape).astype(dt)
        f = lambda: pg.max_pool_grad(x, y, g, ks, st, pad, fmt, out=out, num_threads=thr)
    else:
        raise ValueError(op)
    f()
    cache[key] = f
    return f
for line in sys.stdin:
    c = json.loads(line)
    f = setup(c)
    ts, cs = [], []
    for _ in range(c["reps"]):
        t0 = time.perf_counter(); c0 = time.process_time()
        f()
        c1 = time.process_time(); t1 = time.perf_counter()
        ts.append(t1 - t0); cs.append(c1 - c0)
    print(json.dumps([sorted(ts)[len(ts) // 2], sorted(cs)[len(cs) // 2]]), flush=True)
'''


def _reps(n_elems: int) -> int:
    """Enough calls for a stable median on small layers, few on big ones."""
    return 9 if n_elems < 2_000_000 else 5


def cases(ops: str, batch: int) -> list[dict[str, Any]]:
    """The cases of one run, in a fixed order."""
    geoms: list[tuple[str, tuple[int, int, int, int], tuple[int, int, int], dict[str, Any]]] = []
    if ops == "avg":
        for lay in LAYERS:
            if lay.op == "avg":
                geoms.append((lay.key, (batch, lay.c, lay.h, lay.w), (lay.kernel, lay.stride, lay.padding), {}))
        geoms.append(("issue11", (4, 8, 64, 64), (3, 1, 1), {}))
        opnames = ["avg_bwd", "avg_fwd"]
    else:
        seen = set()
        for lay in LAYERS:
            if lay.op == "max" and (lay.c, lay.h) not in seen and lay.c * lay.h * lay.w <= 600_000:
                seen.add((lay.c, lay.h))
                geoms.append((lay.key, (batch, lay.c, lay.h, lay.w), (lay.kernel, lay.stride, lay.padding),
                              {"ceil": lay.ceil_mode, "kind": "max"}))
            if lay.op == "adaptive_max":
                geoms.append((lay.key, (batch, lay.c, lay.h, lay.w), (0, 0, 0),
                              {"osize": list(lay.out_hw()), "kind": "adaptive"}))
        opnames = []
    out = []
    for name, shape, ksp, extra in geoms:
        kinds = opnames or (["adaptive_bwd"] if extra["kind"] == "adaptive" else ["max_bwd", "tf_bwd"])
        for op in kinds:
            if op == "tf_bwd" and (extra.get("ceil") or ksp[2] > 0):
                continue    # TF has no ceil_mode or explicit padding: VALID layers only
            for dt in ("f16", "bf16"):
                for layout in ("NCHW", "NHWC"):
                    for thr in (1, 2):
                        c = dict(op=op, name=name, dt=dt, shape=shape, ksp=ksp, layout=layout, thr=thr,
                                 reps=_reps(shape[0] * shape[1] * shape[2] * shape[3]))
                        c.update({k: v for k, v in extra.items() if k != "kind"})
                        out.append(c)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("base")
    ap.add_argument("new")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--ops", choices=("avg", "max"), default="avg")
    ap.add_argument("--only", default="", help="substring filter on 'op dt layout thrN name'")
    ap.add_argument("--json", default="", help="also write the rows here")
    a = ap.parse_args()
    cs = [c for c in cases(a.ops, a.batch) if a.only in f"{c['op']} {c['dt']} {c['layout']} thr{c['thr']} {c['name']}"]
    procs = {}
    for name, d in (("base", a.base), ("new", a.new)):
        procs[name] = subprocess.Popen([sys.executable, "-c", WORKER, os.path.abspath(d)], stdin=subprocess.PIPE,
                                       stdout=subprocess.PIPE, text=True, cwd="/tmp",
                                       env=dict(os.environ, OMP_NUM_THREADS="2", GOMP_SPINCOUNT="20000"))
    res: dict[int, dict[str, list[list[float]]]] = {i: {"base": [], "new": []} for i in range(len(cs))}
    for r in range(a.rounds):
        for i, c in enumerate(cs):
            order = ("base", "new") if (r + i) % 2 == 0 else ("new", "base")
            for name in order:
                p = procs[name]
                assert p.stdin is not None and p.stdout is not None
                p.stdin.write(json.dumps(c) + "\n")
                p.stdin.flush()
                res[i][name].append(json.loads(p.stdout.readline()))
    rows = []
    for i, c in enumerate(cs):
        b, bc = (statistics.median(t[j] for t in res[i]["base"]) for j in (0, 1))
        n, nc = (statistics.median(t[j] for t in res[i]["new"]) for j in (0, 1))
        rows.append(dict(c, base_ms=b * 1e3, new_ms=n * 1e3, ratio=n / b, base_cpu_ms=bc * 1e3,
                         new_cpu_ms=nc * 1e3, cpu_ratio=nc / bc))
        print(f"{c['op']:12s} {c['dt']:4s} {c['layout']} thr{c['thr']} {c['name']:38s} "
              f"{'x'.join(map(str, c['shape'])):15s} wall base {b * 1e3:8.3f} new {n * 1e3:8.3f} ms "
              f"new/base {n / b:5.3f} | cpu {nc / bc:5.3f}", flush=True)
    for p in procs.values():
        assert p.stdin is not None
        p.stdin.close()
        p.wait()
    print("\nworst new/base per (op, dtype):")
    for key in sorted({(r["op"], r["dt"]) for r in rows}):
        sel = [r for r in rows if (r["op"], r["dt"]) == key]
        for clock in ("ratio", "cpu_ratio"):
            w = max(sel, key=lambda r: r[clock])
            print(f"  {key[0]:12s} {key[1]:4s} {clock:9s} max {w[clock]:5.3f} ({w['layout']} thr{w['thr']} "
                  f"{w['name']}), median {statistics.median(r[clock] for r in sel):5.3f}")
    if a.json:
        with open(a.json, "w") as fh:
            json.dump(rows, fh, indent=1)


if __name__ == "__main__":
    main()
