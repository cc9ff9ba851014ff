"""Side-by-side comparison runner: poolgrad versus PyTorch, TensorFlow (max_pool_grad) and JAX (the gradients
of ``lax.reduce_window`` max and average pooling).

Prints a Markdown table (time, GB/s, fraction of the copy bandwidth measured in the same run, speed-up) and can
write the rows as JSON and a PNG bar chart of the speed-ups.

    python bench/compare.py                       # every operator, 1 thread and all threads
    python bench/compare.py --ops max_pool2d_with_indices_backward --threads 1 2 --json out.json --png out.png
    python bench/compare.py --quick               # smaller shapes
    python bench/compare.py --out                 # kernels alone: every library writes a preallocated output

TensorFlow's intra-op thread count is fixed when TensorFlow starts, so TensorFlow timings run in one worker
process per thread count (``--tf-worker``) on the same arrays (same seeds) and are merged into the rows.  JAX
runs the same way (``--jax-worker``), its process pinned to as many cores as the thread count; ``--no-jax``
skips it (XLA's CPU select-and-scatter is slow: the JAX rows take a few minutes).
"""
from __future__ import annotations

import argparse
import json
import os
import sys

import poolgrad
from poolgrad import benchmark

import suite


def _plot(rows: list[dict], path: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    labels, torch_x, tf_x = [], [], []
    for r in rows:
        det = {True: "det", False: "nd", None: ""}[r["deterministic"]]
        labels.append(f"{r['op'].split('_backward')[0].replace('_pool', 'p')} {r['shape']} {r['layout']} "
                      f"{r['dtype']} {r['threads']}t {det}")
        torch_x.append(r.get("vs_torch", 0.0))
        tf_x.append(r.get("vs_tf", 0.0))
    fig, ax = plt.subplots(figsize=(10, max(3, 0.28 * len(rows))))
    ys = range(len(rows))
    ax.barh([y - 0.2 for y in ys], torch_x, height=0.4, label="vs PyTorch")
    if any(tf_x):
        ax.barh([y + 0.2 for y in ys], tf_x, height=0.4, label="vs TensorFlow")
    ax.axvline(1.0, color="k", lw=0.8)
    ax.set_yticks(list(ys))
    ax.set_yticklabels(labels, fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel("speed-up of poolgrad (other library's time / poolgrad's time)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ops", nargs="*", choices=list(suite.CASE_BUILDERS), metavar="OP",
                        help=f"operators (default all: {', '.join(suite.CASE_BUILDERS)})")
    parser.add_argument("--threads", type=int, nargs="*", help="thread counts (default: 1 and all)")
    parser.add_argument("--reps", type=int, default=7)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--json", help="write the rows to this JSON file")
    parser.add_argument("--png", help="write a bar chart of the speed-ups to this PNG file")
    parser.add_argument("--out", action="store_true",
                        help="time the kernels alone: every library writes into a preallocated output "
                             "(default: each call allocates its output, as users call it)")
    parser.add_argument("--tf-worker", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--jax-worker", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--no-jax", action="store_true", help="skip the JAX columns (JAX compiles slowly)")
    args = parser.parse_args(argv)
    threads = args.threads or sorted({1, os.cpu_count() or 1})
    if args.tf_worker is not None:
        return suite.tf_worker(args.tf_worker, args.ops, args.quick, args.reps)
    if args.jax_worker is not None:
        return suite.jax_worker(args.jax_worker, args.ops, args.quick, args.reps)
    cases = suite.full_cases(threads, args.ops, args.quick, out=args.out)
    print(f"poolgrad {poolgrad.__version__}; {len(cases)} cases; threads {threads}; outputs "
          f"{'preallocated (--out)' if args.out else 'allocated by each call'}", flush=True)
    rows, rates = benchmark.run_cases(cases, reps=args.reps, progress=lambda m: print("  " + m, flush=True))
    if suite.has_tf() and any(c.op == "max_pool_grad" for c in cases):
        suite.merge_worker_times(rows, threads, args.ops, args.quick, args.reps, [sys.executable, __file__])
    if not args.no_jax and suite.has_jax() and any(c.op in suite.JAX_OPS for c in cases):
        suite.merge_worker_times(rows, threads, args.ops, args.quick, args.reps, [sys.executable, __file__],
                                 worker="jax")
    table = benchmark.format_table(rows, suite.COMPARATORS)
    print()
    print(table)
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"copy_gbs": {str(t): r for t, r in rates.items()}, "config": poolgrad.get_config(),
                       "rows": rows}, fh, indent=1, default=str)
    if args.png:
        _plot(rows, args.png)
    return 0


if __name__ == "__main__":
    sys.exit(main())
