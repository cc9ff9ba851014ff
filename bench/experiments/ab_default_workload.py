"""A/B benchmark of two poolgrad trees (each built in place) on the rows of ``python -m poolgrad`` and of
bench/suite.py's ``max_pool_grad`` suite: one worker process per tree, the same rows timed case by case,
alternating between the trees, median of the rounds.  Kernel level: every row writes a preallocated ``out=``.

    python bench/experiments/ab_default_workload.py BASE_TREE NEW_TREE [rounds] [threads] [--quick] [--match S]

``--match S``: only the rows whose name contains S.

Prints new / base time per row.  Ratios only mean something within one run (the machine is shared)."""
from __future__ import annotations

import json
import statistics
import subprocess
import sys

WORKER = r'''
import sys, json, time
sys.path.insert(0, sys.argv[1])
import poolgrad as pg
from poolgrad import benchmark
assert pg.__file__.startswith(sys.argv[1]), pg.__file__
threads, quick = int(sys.argv[2]), sys.argv[3] == "1"
# one thread: CPU time of the calling thread (the kernel runs there; being descheduled on a shared machine does
# not count); more threads: wall time
clock = time.thread_time if threads == 1 else time.perf_counter
big = (8, 112, 112, 64) if quick else (32, 112, 112, 64)
cases = benchmark.default_cases([threads], quick=quick, out=True)
cases += [benchmark.max_pool_grad_case(*big, 3, 2, "SAME", lay, dt, threads, True, out=True)
          for lay, dt in (("NHWC", "f32"), ("NHWC", "bf16"), ("NCHW", "f32"))]
print(json.dumps([f"{c.op} {c.shape} {c.layout} {c.dtype} {c.threads}t {c.deterministic}" for c in cases]),
      flush=True)
fns = {}
for line in sys.stdin:
    i = int(line)
    if i not in fns:
        fns[i] = cases[i].make(threads)["poolgrad"]
        for _ in range(2):
            fns[i]()
    t0 = clock()
    fns[i]()
    print(clock() - t0, flush=True)
'''


def main() -> None:
    argv = sys.argv[1:]
    match = ""
    if "--match" in argv:
        at = argv.index("--match")
        match = argv[at + 1]
        del argv[at:at + 2]
    args = [a for a in argv if a != "--quick"]
    base, new = args[0], args[1]
    rounds = int(args[2]) if len(args) > 2 else 7
    threads = int(args[3]) if len(args) > 3 else 1
    quick = "1" if "--quick" in sys.argv else "0"
    procs = [subprocess.Popen([sys.executable, "-c", WORKER, tree, str(threads), quick], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True) for tree in (base, new)]
    names = [json.loads(p.stdout.readline()) for p in procs]
    assert names[0] == names[1], "the trees define different rows"
    rows = [i for i, name in enumerate(names[0]) if match in name]
    times: list[list[list[float]]] = [[[], []] for _ in names[0]]
    for r in range(rounds):
        for i in rows:
            order = (0, 1) if (r + i) % 2 == 0 else (1, 0)
            for w in order:
                procs[w].stdin.write(f"{i}\n")
                procs[w].stdin.flush()
                times[i][w].append(float(procs[w].stdout.readline()))
    for p in procs:
        p.stdin.close()
        p.wait()
    print(f"{threads} thread(s), median of {rounds} alternating rounds; new / base")
    for i in rows:
        name, (a, b) = names[0][i], times[i]
        ma, mb = statistics.median(a), statistics.median(b)
        print(f"{name:70} base {ma * 1e3:8.2f} ms  new {mb * 1e3:8.2f} ms  {mb / ma:5.2f}")


if __name__ == "__main__":
    main()
