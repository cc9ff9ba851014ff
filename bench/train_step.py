"""Wall time of a full training step (forward, loss, backward, SGD step) of five torchvision-style models,
original against ``poolgrad.torch.convert``-ed, with the share of the step spent in pooling.

    python bench/train_step.py                                   # batch 32, 224x224, 1 and all threads, 3 reps
    python bench/train_step.py --size 112 --reps 2 --json bench/results/train_step.json --markdown
    python bench/train_step.py --report bench/results/train_step_t1_224_r8.json --paired   # tables of a past run

For every (model, memory format, thread count) the original and the converted model (same weights, same
batch) take turns, step after step, and the order of the pair alternates, so a slow phase of a shared machine
hits both alike; each variant's time is the median of ``--reps`` timed steps after ``--warmup`` untimed ones.
Each step's process CPU time (``time.process_time``, all threads) is kept too: on a machine shared with other
jobs it counts only this process's work, so at 1 thread it is the steadier measure of the two (at more threads
it also counts threads spinning while they wait).
One more step of each runs under ``torch.profiler``; the pooling share is the time of the pooling operators the
conversion swaps (max, average and adaptive max pooling, forward and backward, PyTorch's or poolgrad's) over that
profiled step's wall time. Adaptive *average* pooling (ResNet, DenseNet, GoogLeNet, SqueezeNet, VGG heads) is
not one of them and counts as "other".

With ``--compile`` both models run under ``torch.compile`` (inductor; the optimizer step stays eager) and the
first, compiling, step is one of the ``--warmup`` steps.  Inductor lowers PyTorch's own pooling into its generated
code, so no ``aten::*pool*`` event is left to profile: the original's pooling share reads 0 there and means "not
measurable", while the converted model's ``poolgrad::`` operators still show.

In eager mode a converted model's pooling runs through ``poolgrad.torch``'s direct path (no dispatcher); under
the profiler it takes the custom operators instead, so that the ``poolgrad::`` events exist: the profiled pooling
time of a converted model includes the operator path's per-call cost (about 0.1 ms per forward + backward pair
more, bench/experiments/torch_overhead.py), the timed steps do not.

Each finished configuration is appended to ``--json`` at once, so an interrupted run keeps what it measured.
``--paired`` (or ``--report FILE --paired`` on a finished run's JSON) prints the speed-up as the geometric mean
of the per-pair ratios with its 95% confidence interval (:func:`paired`): "slower" is said only where the
whole interval lies below 1, "faster" where it lies above.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import poolgrad.torch as pt  # noqa: E402
from poolgrad.torch.models import MODELS  # noqa: E402

# Profiler event names of the operators convert() swaps (outermost events only, so nothing counts twice).
POOL_EVENTS = {
    "aten::max_pool2d_with_indices", "aten::max_pool2d_with_indices_backward",
    "aten::avg_pool2d", "aten::avg_pool2d_backward",
    "aten::adaptive_max_pool2d", "aten::adaptive_max_pool2d_backward",
    "poolgrad::max_pool2d_with_indices", "poolgrad::max_pool2d_with_indices_backward",
    "poolgrad::avg_pool2d", "poolgrad::avg_pool2d_backward",
    "poolgrad::adaptive_max_pool2d", "poolgrad::adaptive_max_pool2d_backward",
}


class Trainer:
    """One model, its optimizer and a fixed batch; :meth:`step` runs one training step."""

    def __init__(self, model: torch.nn.Module, x: torch.Tensor, target: torch.Tensor) -> None:
        self.model, self.x, self.target = model, x, target
        self.opt = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9)
        self.cpu: list[float] = []

    def step(self) -> float:
        """Wall seconds of one step (its process CPU seconds are added to ``self.cpu``)."""
        c0, t0 = time.process_time(), time.perf_counter()
        self.opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(self.model(self.x), self.target)
        loss.backward()
        self.opt.step()
        t1, c1 = time.perf_counter(), time.process_time()
        self.cpu.append(c1 - c0)
        return t1 - t0

    def profiled_step(self) -> tuple[float, float, dict[str, float]]:
        """(pooling seconds, step seconds, seconds per pooling operator) of one step under the profiler."""
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
            wall = self.step()
        ops = {e.key: e.cpu_time_total * 1e-6 for e in prof.key_averages() if e.key in POOL_EVENTS}
        return sum(ops.values()), wall, ops


def warm_operator_path() -> None:
    """Run each custom operator once, forward and backward, under the profiler (the only place this benchmark
    takes the operator path), so that one-time costs of the first call (lazy imports, registrations) do not land
    in the first profiled step."""
    x = torch.randn(1, 2, 8, 8, requires_grad=True)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]):
        for fn in (lambda t: pt.max_pool2d(t, 2), lambda t: pt.avg_pool2d(t, 2),
                   lambda t: pt.adaptive_max_pool2d(t, 2)):
            fn(x).sum().backward()
            fn(x.contiguous(memory_format=torch.channels_last)).sum().backward()


def run_config(name: str, channels_last: bool, threads: int, args: argparse.Namespace) -> dict:
    torch._dynamo.reset()
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    model = MODELS[name](num_classes=1000)
    x = torch.randn(args.batch, 3, args.size, args.size)
    target = torch.randint(0, 1000, (args.batch,))
    if channels_last:
        model = model.to(memory_format=torch.channels_last)
        x = x.contiguous(memory_format=torch.channels_last)
    converted = pt.convert(model)
    if args.compile:
        model, converted = torch.compile(model), torch.compile(converted)
    pair = {"original": Trainer(model, x, target), "poolgrad": Trainer(converted, x, target)}
    times: dict[str, list[float]] = {k: [] for k in pair}
    for rep in range(args.warmup + args.reps):
        order = list(pair) if rep % 2 == 0 else list(pair)[::-1]
        for k in order:
            t = pair[k].step()
            if rep >= args.warmup:
                times[k].append(t)
    cpu = {k: trainer.cpu[args.warmup:] for k, trainer in pair.items()}
    row = {"model": name, "mode": "compiled" if args.compile else "eager",
           "format": "channels_last" if channels_last else "NCHW", "threads": threads,
           "batch": args.batch, "size": args.size, "reps": args.reps}
    for k, trainer in pair.items():
        pool, wall, ops = trainer.profiled_step()
        row[f"{k}_s"] = statistics.median(times[k])
        row[f"{k}_all_s"] = times[k]
        row[f"{k}_cpu_s"] = statistics.median(cpu[k])
        row[f"{k}_all_cpu_s"] = cpu[k]
        row[f"{k}_pool_share"] = pool / wall
        row[f"{k}_pool_s"] = pool
        row[f"{k}_pool_ops_s"] = ops
    row["speedup"] = row["original_s"] / row["poolgrad_s"]
    row["cpu_speedup"] = row["original_cpu_s"] / row["poolgrad_cpu_s"]
    return row


# Two-sided 95% quantiles of Student's t for 1..30 degrees of freedom (beyond: the normal's 1.96).
_T975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145, 2.131,
         2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042)


def paired(original: list[float], converted: list[float]) -> tuple[float, float, float]:
    """Speed-up of converted over original from steps taken in pairs: (geometric mean of the per-pair ratios
    original / converted, and the 95% confidence interval of that mean).

    The i-th step of each model was taken back to back (``run_config`` alternates the order), so a pair shares
    the machine's state at that moment; the ratio within a pair cancels what drifts between pairs (another
    job, frequency), which the ratio of two medians does not.  The interval is Student's t on the logarithms of
    the ratios: a configuration is *measurably* slower only where the whole interval lies below 1."""
    logs = [math.log(o / c) for o, c in zip(original, converted)]
    n = len(logs)
    mean = statistics.fmean(logs)
    if n < 2:
        return math.exp(mean), float("nan"), float("nan")
    half = (_T975[n - 2] if n - 1 <= len(_T975) else 1.96) * statistics.stdev(logs) / math.sqrt(n)
    return math.exp(mean), math.exp(mean - half), math.exp(mean + half)


def verdict(lo: float, hi: float) -> str:
    """'faster' / 'slower' where the 95% interval lies wholly above / below 1, else 'level'."""
    return "faster" if lo > 1 else "slower" if hi < 1 else "level"


def paired_markdown(rows: list[dict]) -> str:
    """Per configuration: paired speed-up (wall time; at one thread also CPU time) with its 95% interval, the
    verdict, and the profiled pooling time."""
    lines = ["| model | format | thr | steps | original s | converted s | paired speed-up (95% CI) | verdict | "
             "CPU paired speed-up (95% CI) | pooling s orig -> conv (profiled) |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        g, lo, hi = paired(r["original_all_s"], r["poolgrad_all_s"])
        cg, clo, chi = paired(r["original_all_cpu_s"], r["poolgrad_all_cpu_s"])
        lines.append(f"| {r['model']} | {r['format']} | {r['threads']} | {len(r['original_all_s'])} | "
                     f"{r['original_s']:.2f} | {r['poolgrad_s']:.2f} | {g:.3f}x ({lo:.3f}-{hi:.3f}) | "
                     f"{verdict(lo, hi)} | {cg:.3f}x ({clo:.3f}-{chi:.3f}) | "
                     f"{r['original_pool_s']:.3f} -> {r['poolgrad_pool_s']:.3f} |")
    return "\n".join(lines)


def markdown(rows: list[dict]) -> str:
    lines = ["| model | mode | format | thr | original step s | converted step s | speed-up | CPU s orig -> conv | "
             "CPU speed-up | pooling share (orig) | pooling share (conv) | pooling s orig -> conv (profiled) |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['model']} | {r.get('mode', 'eager')} | {r['format']} | {r['threads']} | "
                     f"{r['original_s']:.2f} | "
                     f"{r['poolgrad_s']:.2f} | {r['speedup']:.2f}x | {r['original_cpu_s']:.2f} -> "
                     f"{r['poolgrad_cpu_s']:.2f} | {r['cpu_speedup']:.2f}x | {100 * r['original_pool_share']:.1f}% | "
                     f"{100 * r['poolgrad_pool_share']:.1f}% | {r['original_pool_s']:.3f} -> "
                     f"{r['poolgrad_pool_s']:.3f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", nargs="*", default=list(MODELS), choices=list(MODELS))
    parser.add_argument("--formats", nargs="*", default=["NCHW", "channels_last"], choices=["NCHW", "channels_last"])
    parser.add_argument("--threads", type=int, nargs="*", default=None, help="default: 1 and all cores")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--size", type=int, default=224, help="image height and width")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--compile", action="store_true", help="torch.compile both models (inductor)")
    parser.add_argument("--json", help="append each configuration's row to this JSON file (a list)")
    parser.add_argument("--markdown", action="store_true", help="print the Markdown table at the end")
    parser.add_argument("--paired", action="store_true",
                        help="print the paired table (speed-up with 95%% interval) at the end")
    parser.add_argument("--report", metavar="JSON", help="only print the tables of an earlier run's --json file")
    args = parser.parse_args(argv)
    if args.report:
        with open(args.report) as f:
            done = json.load(f)
        print(paired_markdown(done) if args.paired or not args.markdown else markdown(done))
        return 0
    threads = args.threads or sorted({1, os.cpu_count() or 1})
    warm_operator_path()
    rows: list[dict] = []
    if args.json and os.path.exists(args.json):
        with open(args.json) as f:
            rows = json.load(f)
    for th in threads:
        for fmt in args.formats:
            for name in args.models:
                row = run_config(name, fmt == "channels_last", th, args)
                rows.append(row)
                print(f"{name:14s} {row['mode']:8s} {fmt:13s} {th}t original {row['original_s']:.3f}s poolgrad "
                      f"{row['poolgrad_s']:.3f}s speed-up {row['speedup']:.2f}x (CPU time {row['cpu_speedup']:.2f}x) "
                      f"pooling share "
                      f"{100 * row['original_pool_share']:.1f}% -> {100 * row['poolgrad_pool_share']:.1f}%",
                      flush=True)
                if args.json:
                    with open(args.json, "w") as f:
                        json.dump(rows, f, indent=1)
    if args.markdown:
        print(markdown(rows))
    if args.paired:
        print(paired_markdown(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
