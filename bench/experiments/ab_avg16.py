"""A/B benchmark of the 16-bit average-pooling kernels: the same cases timed in two poolgrad trees (each built in
place), one worker process per tree, interleaved case by case, median of the rounds (issue 11's 10% bound).

    python bench/experiments/ab_avg16.py BASE_TREE NEW_TREE [rounds]      # F32=1 times float32 instead

Ratios only mean something within one run (the machine is shared)."""
import json, subprocess, sys, statistics, os
WORKER = r'''
import sys, json, time, numpy as np
sys.path.insert(0, sys.argv[1])
import poolgrad as pg
from ml_dtypes import bfloat16
assert pg.__file__.startswith(sys.argv[1]), pg.__file__
DT = {"f16": np.float16, "bf16": bfloat16, "f32": np.float32}
cache = {}
def setup(c):
    key = json.dumps(c)
    if key in cache: return cache[key]
    rng = np.random.default_rng(0)
    N, C, H, W = c["shape"]; k, s, p = c["ksp"]; dt = DT[c["dt"]]
    x = rng.standard_normal((N, C, H, W)).astype(dt)
    if c["layout"] == "NHWC": x = x.transpose(0, 2, 3, 1).copy()
    y = pg.avg_pool2d(x, k, s, p, layout=c["layout"])
    go = rng.standard_normal(y.shape).astype(dt)
    outb = np.empty_like(x)
    if c["op"] == "bwd":
        f = lambda: pg.avg_pool2d_backward(go, x, k, s, p, layout=c["layout"], out=outb, num_threads=c["thr"])
    else:
        f = lambda: pg.avg_pool2d(x, k, s, p, layout=c["layout"], num_threads=c["thr"])
    f(); cache[key] = f; return f
for line in sys.stdin:
    c = json.loads(line); f = setup(c); ts = []
    for _ in range(c["reps"]):
        t0 = time.perf_counter(); f(); ts.append(time.perf_counter() - t0)
    print(json.dumps(sorted(ts)[len(ts) // 2]), flush=True)
'''
def main():
    base, new = sys.argv[1], sys.argv[2]
    rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 5
    cases = []
    for dt in ("f16", "bf16"):
        for op in ("bwd", "fwd"):
            cases.append(dict(op=op, dt=dt, shape=(8, 64, 112, 112), ksp=(3, 2, 1), layout="NCHW", thr=1, reps=5))
            cases.append(dict(op=op, dt=dt, shape=(8, 64, 112, 112), ksp=(3, 2, 1), layout="NHWC", thr=1, reps=5))
            cases.append(dict(op=op, dt=dt, shape=(1, 3, 1024, 1024), ksp=(3, 1, 1), layout="NCHW", thr=1, reps=5))
            cases.append(dict(op=op, dt=dt, shape=(16, 512, 14, 14), ksp=(2, 2, 0), layout="NCHW", thr=1, reps=9))
    if os.environ.get("F32"):
        cases = [dict(c, dt="f32") for c in cases]
    procs = {}
    for name, d in (("base", base), ("new", new)):
        procs[name] = subprocess.Popen([sys.executable, "-c", WORKER, d], stdin=subprocess.PIPE,
                                       stdout=subprocess.PIPE, text=True, cwd="/tmp")
    res = {i: {"base": [], "new": []} for i in range(len(cases))}
    for r in range(rounds):
        for i, c in enumerate(cases):
            order = ("base", "new") if (r + i) % 2 == 0 else ("new", "base")
            for name in order:
                p = procs[name]; p.stdin.write(json.dumps(c) + "\n"); p.stdin.flush()
                res[i][name].append(json.loads(p.stdout.readline()))
    for i, c in enumerate(cases):
        b = statistics.median(res[i]["base"]); n = statistics.median(res[i]["new"])
        print(f"{c['op']} {c['dt']:4s} {c['layout']} {'x'.join(map(str, c['shape'])):14s} k{c['ksp'][0]}s{c['ksp'][1]}p{c['ksp'][2]} thr{c['thr']}: "
              f"base {b*1e3:8.3f} ms  new {n*1e3:8.3f} ms  new/base {n/b:5.3f}")
    for p in procs.values(): p.stdin.close(); p.wait()
main()
