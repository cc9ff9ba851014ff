"""Cliff finder (issue 8, item 4): sweep batch size, plane size, channels and row width across every planner
threshold of every operator and print the time per element with the step between neighbouring sizes.

Each sweep varies one size of one operator (float32, both layouts where the threshold depends on the layout,
1 and all threads) so that it crosses the thresholds named in its description, times all of its sizes
interleaved (each round calls every size once) and divides the median and the fastest of the rounds by the number
of input elements.  A step is flagged when both change by more than ``--limit`` (1.5x) between neighbouring sizes
(noise on a shared machine only adds time, so a step the fastest rounds do not show is a slow spell):

* ``rise``: the bigger size costs more per element - a cliff;
* ``drop``: the bigger size costs less per element although both calls take at least ``--floor`` seconds, so
  per-call overhead cannot explain it - the smaller size is on a slow path.

Every flagged step is timed again on its own (the two sizes interleaved, more rounds) and reported as
``confirmed`` only if it is still beyond the limit.  Backwards write a preallocated ``out=`` (kernel level),
except in the sweep across the output-recycling size, which allocates on purpose.

    python bench/sweep.py                                  # every sweep, 1 and all threads
    python bench/sweep.py --ops avg_bwd --threads 2        # one operator
    python bench/sweep.py --list                           # the sweeps and the thresholds found in this build

Run it from the repository root with ``PYTHONPATH=.`` to measure that tree's build.  Timings on a shared machine
are noisy; only the ratios between neighbours, measured in one interleaved run, are reported.
"""
from __future__ import annotations

import argparse
import dataclasses
import importlib
import json
import sys
from typing import Any, Callable

import numpy as np

OPS = ("max_bwd", "max_fwd", "adaptive_bwd", "adaptive_fwd", "avg_bwd", "avg_fwd", "tf_grad", "elementwise")

# The planner thresholds, read from this build for the report: (modules that may hold it, attribute, what it
# switches).  The Python layer is being reorganised, so a name is looked up in each module in turn (the first
# that has it wins); one that none has is reported as not found, and the sweeps still cross the sizes where it was.
THRESHOLDS: list[tuple[tuple[str, ...], str, str]] = [
    (("poolgrad.planning", "poolgrad.config"), "GRAIN",
     "elements per thread below which fewer threads run (every operator)"),
    (("poolgrad.memory", "poolgrad.buffers"), "MIN_BYTES",
     "outputs this big are recycled instead of freshly mapped (allocating calls)"),
    (("poolgrad._scatter",), "BAND_MAX", "most grad_x cells per 16-bit band of the index scatter (half of it: float64 "
                                         "scratch; max/adaptive bwd)"),
    (("poolgrad._scatter",), "PLANES_MAX_CELLS", "largest NCHW plane of the planes scatter (max/adaptive bwd)"),
    (("poolgrad.indexed",), "PLANES_MAX_CELLS", "largest NCHW plane (by window density) of the planes forward"),
    (("poolgrad._scatter",), "SCATTER_BANDS_PER_THREAD", "bands per thread when there are few planes (max/adaptive bwd)"),
    (("poolgrad._scatter",), "THIN_BANDS", "atomic instead of banded scatter when bands are thinner (nondet)"),
    (("poolgrad.indexed", "poolgrad.max_pool_indices"), "UNIFORM_MAX_ROW",
     "widest row (W*C lanes) of the vectorised forward"),
    (("poolgrad.indexed", "poolgrad.max_pool_indices"), "UNIFORM_MAX_CELLS",
     "largest kernel (cells) of the vectorised forward"),
    (("poolgrad.avg_pool",), "AVG_ITEMS_PER_THREAD", "work items per thread before planes are cut in bands (avg bwd)"),
    (("poolgrad.avg_pool",), "STREAM_MIN_BYTES", "grad_x this big is written with streaming stores (avg bwd)"),
    (("poolgrad.avg_pool",), "DV_REPEAT_MAX", "channels-last divisor table repeated over C up to this size"),
    (("poolgrad.tf_max_pool",), "COMPOSE_MAX_C", "channels-last with fewer channels: composed argmax + scatter"),
    (("poolgrad.tf_max_pool",), "MIN_BAND_WINDOWS", "fewest window heights per band (max_pool_grad)"),
    (("poolgrad.tf_max_pool",), "TF_ITEMS_PER_THREAD", "bands per thread when there are few images (max_pool_grad)"),
    (("poolgrad.tf_max_pool",), "STREAM_BYTES", "grad_x this big is written with streaming stores (max_pool_grad)"),
    (("poolgrad.tf_max_pool",), "RING_BUDGET", "per-thread ring bytes (huge windows x huge rows only; not swept)"),
    (("poolgrad._max_pool_indices",), "CL_STREAM_BYTES", "channels-last forward outputs (values + indices) this "
                                                         "big are written with streaming stores (max/adaptive fwd)"),
    (("poolgrad._avg_pool",), "CL_STREAM_BYTES", "channels-last float32/64 forward outputs this big are written "
                                                 "with streaming stores (avg fwd)"),
    (("poolgrad.elementwise",), "_GRAIN", "elements per thread (max_pooling_grad)"),
    (("poolgrad.elementwise",), "_BLOCKS_PER_THREAD", "blocks per thread (max_pooling_grad)"),
]
# A threshold of a compiled module that Python cannot read (a cdef constant), for the record.
COMPILED_THRESHOLDS = ["_max_pool_indices.pyx.in PHASE_MAX_C = 16 (channels-last forward splits strided rows into "
                       "phases below 16 channels)",
                       "_max_pool_indices.pyx.in PLANES_MIN = 8 (fewest NCHW planes of the planes kernels; one group "
                       "below PG_CL_LANES = 32)"]


def lookup(modules: tuple[str, ...], name: str) -> tuple[str | None, Any]:
    """(module that has ``name``, its value), or (None, None) when none of ``modules`` has it."""
    for mod in modules:
        try:
            m = importlib.import_module(mod)
        except ImportError:
            continue
        if hasattr(m, name):
            return mod, getattr(m, name)
    return None, None


def thresholds() -> list[tuple[str, Any, str]]:
    """(module.attribute, value or None when this build has no such name, what it switches)."""
    found = []
    for mods, name, what in THRESHOLDS:
        mod, value = lookup(mods, name)
        found.append((f"{mod or mods[0]}.{name}", value, what))
    return found


@dataclasses.dataclass
class Sweep:
    """One operator, one varied size.  ``points`` are dicts with N, C, H, W (and ``k``, ``s``, ``p``, ``n`` or
    ``out_hw`` where the operator needs them); ``label`` names the varied size in each point."""

    op: str
    name: str
    crosses: str
    layout: str
    label: str
    points: list[dict]
    deterministic: bool | None = None
    alloc: bool = False
    dtype: str = "float32"

    @property
    def key(self) -> str:
        det = {None: "", True: " det", False: " nondet"}[self.deterministic]
        dt = "" if self.dtype == "float32" else f" {self.dtype}"
        return f"{self.op} {self.name} {self.layout}{det}{dt}{' alloc' if self.alloc else ''}"


def _pts(label: str, values: list[int], **fixed: Any) -> list[dict]:
    return [dict(fixed, **{label: v}) for v in values]


def sweeps(ops: tuple[str, ...] = OPS, layouts: tuple[str, ...] = ("NCHW", "NHWC")) -> list[Sweep]:
    """Every sweep of these operators and layouts (see the ``crosses`` text of each)."""
    out: list[Sweep] = []
    pool_ops = [o for o in ("max_bwd", "max_fwd", "adaptive_bwd", "adaptive_fwd", "avg_bwd", "avg_fwd", "tf_grad")
                if o in ops]
    small_batches = [1, 2, 4, 8, 12, 16, 20, 24, 28, 32, 40, 48]
    big_batches = [1, 2, 3, 4, 6, 8, 10, 12, 14, 16]
    for op in pool_ops:
        geo = ({"out_hw": (7, 7)} if op.startswith("adaptive") else
               {"k": 3, "s": 2, "p": 0} if op == "tf_grad" else {"k": 3, "s": 2, "p": 1})
        for layout in layouts:
            out.append(Sweep(op, "batch of 512x14x14", "streaming-store sizes (8 MiB of grad_x at batch 21), GRAIN",
                             layout, "N", _pts("N", small_batches, C=512, H=14, W=14, **geo)))
            out.append(Sweep(op, "batch of 64x56x56", "bands per thread (few planes/images), streaming stores "
                             "(batch 11), atomic scatter (batch 1, nondet)", layout, "N",
                             _pts("N", big_batches, C=64, H=56, W=56, **geo)))
            out.append(Sweep(op, "batch of 64x8x8", "GRAIN (one thread below 32768 elements per thread)", layout,
                             "N", _pts("N", [1, 2, 4, 8, 12, 16, 24, 32, 48], C=64, H=8, W=8, **geo)))
            out.append(Sweep(op, "plane of 1x3xHxH", "BAND_MAX (16-bit max bwd bands of at most 512 Ki cells), "
                             "phase splits",
                             layout, "H", [dict(N=1, C=3, H=h, W=h, **geo) for h in
                                           [128, 256, 384, 512, 640, 768, 896, 1024, 1152, 1280, 1536]]))
            out.append(Sweep(op, "plane of 8x64xHxH", "BAND_MAX in channels-last (16-bit max bwd: H*W*C > 512 Ki "
                             "at H=96), indexed.PLANES_MAX_CELLS (NCHW max fwd, density 2.25: 96x96)", layout,
                             "H", [dict(N=8, C=64, H=h, W=h, **geo) for h in [32, 48, 64, 80, 96, 112, 128, 144,
                                                                                 160]]))
        if "NHWC" in layouts:
            out.append(Sweep(op, "channels of 8xCx56x56", "PHASE_MAX_C (16), COMPOSE_MAX_C (8), vector widths",
                             "NHWC", "C", _pts("C", [2, 3, 4, 6, 7, 8, 9, 12, 15, 16, 17, 24, 32], N=8, H=56, W=56,
                                               **geo)))
            out.append(Sweep(op, "row width of 1x256x4xW", "UNIFORM_MAX_ROW (W*C > 1 Mi lanes at W=4096), "
                             "DV_REPEAT_MAX (Wo*C > 1 Mi at W > 8192 for stride 2)", "NHWC", "W",
                             _pts("W", [1024, 2048, 3072, 4096, 4352, 6144, 8192, 8704], N=1, C=256, H=4, **geo)))
    if "max_bwd" in ops:
        for layout in layouts:
            out.append(Sweep("max_bwd", "batch of 64x56x56", "atomic (nondet, fewer planes than threads) vs banded",
                             layout, "N", _pts("N", big_batches, C=64, H=56, W=56, k=3, s=2, p=1),
                             deterministic=False))
        out.append(Sweep("max_bwd", "batch of 64x56x56", "buffers.MIN_BYTES: allocating calls recycle grad_x of "
                         ">= 32 MiB (batch 42)", "NCHW", "N",
                         _pts("N", [28, 32, 36, 40, 41, 42, 44, 48, 56], C=64, H=56, W=56, k=3, s=2, p=1),
                         alloc=True))
    if "max_bwd" in ops and "NHWC" in layouts:
        out.append(Sweep("max_bwd", "row width of 1x256x4xW", "BAND_MAX // 2 (float64 bands of the 16-bit scatter: "
                         "4*W*C > 512 Ki cells at W=512)", "NHWC", "W",
                         _pts("W", [256, 384, 512, 640, 768, 1024, 1536, 2048], N=1, C=256, H=4, k=3, s=2, p=1),
                         dtype="float16"))
    if "NCHW" in layouts:
        # the planes kernels: PLANES_MAX_CELLS of the forward (by window density) and of the scatter, and the
        # fewest planes of one group (plane_groups: 32)
        for op in [o for o in ("max_fwd", "max_bwd") if o in ops]:
            fwd = op == "max_fwd"
            if fwd:
                out.append(Sweep(op, "plane of 2x64xHxH k2s2", "indexed.PLANES_MAX_CELLS, density 1 (56x56)", "NCHW",
                                 "H", [dict(N=2, C=64, H=h, W=h, k=2, s=2, p=0) for h in [32, 40, 48, 56, 64, 80]]))
            out.append(Sweep(op, "plane of 2x64xHxH k3s1p1", "indexed.PLANES_MAX_CELLS, density 9 (120x120)" if fwd
                             else "_scatter.PLANES_MAX_CELLS (112x112)", "NCHW", "H",
                             [dict(N=2, C=64, H=h, W=h, k=3, s=1, p=1) for h in [80, 96, 104, 112, 120, 128, 144]]))
            out.append(Sweep(op, "planes of Nx4x28x28", "PLANES_MIN (8 planes: N = 2), one padded group up to 31 "
                             "planes, groups of 32-64 from N = 8", "NCHW", "N",
                             _pts("N", [1, 2, 3, 4, 6, 7, 8, 9, 12, 16, 32], C=4, H=28, W=28, k=3, s=1, p=1)))
    if "max_fwd" in ops:
        out.append(Sweep("max_fwd", "global window kxk on 1x1xkxk", "UNIFORM_MAX_CELLS (k*k > 65536 at k=257)",
                         "NCHW", "k", [dict(N=1, C=1, H=k, W=k, k=k, s=k, p=0)
                                       for k in [200, 232, 248, 255, 256, 257, 264, 288]]))
    if "elementwise" in ops:
        out.append(Sweep("elementwise", "n elements", "GRAIN, blocks per thread", "-", "n",
                         _pts("n", [1 << 12, 1 << 14, 1 << 15, 3 << 14, 1 << 16, 3 << 15, 1 << 17, 1 << 18, 1 << 19,
                                    1 << 20, 1 << 22, 1 << 24], N=1, C=1, H=1, W=1)))
    return out


def make_call(sw: Sweep, pt: dict, nt: int) -> tuple[Callable[[], Any], int]:
    """The call of one sweep point with ``nt`` threads, and its number of input elements."""
    import poolgrad as pg
    rng = np.random.default_rng(0)
    if sw.op == "elementwise":
        n = pt["n"]
        x = rng.integers(0, 4, n).astype(np.float32)
        y = rng.integers(0, 4, n).astype(np.float32)
        dy = rng.standard_normal(n, dtype=np.float32)
        res = np.empty_like(dy)
        return (lambda: pg.max_pooling_grad(dy, x, y, out=res, num_threads=nt)), n
    N, C, H, W = pt["N"], pt["C"], pt["H"], pt["W"]
    nhwc = sw.layout == "NHWC"
    x = rng.standard_normal((N, H, W, C) if nhwc else (N, C, H, W), dtype=np.float32).astype(sw.dtype)
    gx = None if sw.alloc else np.empty_like(x)
    lay = sw.layout
    det = sw.deterministic
    if sw.op in ("adaptive_bwd", "adaptive_fwd"):
        y, ind = pg.adaptive_max_pool2d(x, pt["out_hw"], layout=lay)
        if sw.op == "adaptive_fwd":
            return (lambda: pg.adaptive_max_pool2d(x, pt["out_hw"], layout=lay, num_threads=nt)), x.size
        go = rng.standard_normal(y.shape, dtype=np.float32)
        return (lambda: pg.adaptive_max_pool2d_backward(go, x, ind, layout=lay, out=gx, deterministic=det,
                                                        num_threads=nt)), x.size
    k, s, p = pt["k"], pt["s"], pt["p"]
    if sw.op in ("max_bwd", "max_fwd"):
        if sw.op == "max_fwd":
            return (lambda: pg.max_pool2d_with_indices(x, k, s, p, layout=lay, num_threads=nt)), x.size
        y, ind = pg.max_pool2d_with_indices(x, k, s, p, layout=lay)
        go = rng.standard_normal(y.shape, dtype=np.float32).astype(sw.dtype)
        return (lambda: pg.max_pool2d_with_indices_backward(go, x, ind, k, s, p, layout=lay, out=gx,
                                                            deterministic=det, num_threads=nt)), x.size
    if sw.op in ("avg_bwd", "avg_fwd"):
        if sw.op == "avg_fwd":
            return (lambda: pg.avg_pool2d(x, k, s, p, layout=lay, num_threads=nt)), x.size
        y = pg.avg_pool2d(x, k, s, p, layout=lay)
        go = rng.standard_normal(y.shape, dtype=np.float32)
        return (lambda: pg.avg_pool2d_backward(go, x, k, s, p, layout=lay, out=gx, num_threads=nt)), x.size
    if sw.op == "tf_grad":
        ksize, strides = ([1, k, k, 1], [1, s, s, 1]) if nhwc else ([1, 1, k, k], [1, 1, s, s])
        x2 = pg.max_pool(x, ksize, strides, "VALID", data_format=lay)
        g = rng.standard_normal(x2.shape, dtype=np.float32)
        return (lambda: pg.max_pool_grad(x, x2, g, ksize, strides, "VALID", data_format=lay, out=gx,
                                         deterministic=det, num_threads=nt)), x.size
    raise ValueError(f"unknown operator {sw.op!r}")


def find_steps(per_elem: list[float], totals: list[float], limit: float, floor: float) -> list[tuple[int, str]]:
    """Indices ``i`` of the steps ``i -> i + 1`` beyond ``limit`` in time per element, with their kind:
    ``rise`` (the bigger size is dearer per element) or ``drop`` (cheaper, while both calls take >= ``floor``
    seconds)."""
    flags = []
    for i in range(len(per_elem) - 1):
        r = per_elem[i + 1] / per_elem[i]
        if r > limit:
            flags.append((i, "rise"))
        elif r < 1 / limit and min(totals[i], totals[i + 1]) >= floor:
            flags.append((i, "drop"))
    return flags


def _beyond(ratio: float, kind: str, limit: float) -> bool:
    return ratio > limit if kind == "rise" else ratio < 1 / limit


def run_sweep(sw: Sweep, nt: int, reps: int, limit: float, floor: float,
              timer: Callable[..., dict] | None = None) -> dict:
    """Time one sweep with ``nt`` threads; returns its points (median and fastest seconds, ns per element, step
    to the next size) and the flagged steps.

    A step is flagged when the median *and* the fastest time per element both step beyond the limit (noise on a
    shared machine only adds time, so a step the fastest runs do not show is a slow spell, not a cliff); each
    flagged step is then timed again on its own and marked confirmed when both ratios are still beyond it."""
    if timer is None:
        from poolgrad.benchmark import interleaved_times as timer
    calls = [make_call(sw, pt, nt) for pt in sw.points]
    times = timer({i: fn for i, (fn, _) in enumerate(calls)}, reps, 1, 60.0)
    n = [calls[i][1] for i in range(len(calls))]
    med = [float(np.median(times[i])) for i in range(len(calls))]
    best = [min(times[i]) for i in range(len(calls))]
    per_med = [med[i] / n[i] for i in range(len(calls))]
    per_best = [best[i] / n[i] for i in range(len(calls))]
    flags = []
    by_best = set(find_steps(per_best, best, limit, floor))
    for i, kind in find_steps(per_med, med, limit, floor):
        if (i, kind) not in by_best:
            continue
        again = timer({0: calls[i][0], 1: calls[i + 1][0]}, max(9, 2 * reps), 1, 30.0)
        r_med = (float(np.median(again[1])) / n[i + 1]) / (float(np.median(again[0])) / n[i])
        r_best = (min(again[1]) / n[i + 1]) / (min(again[0]) / n[i])
        flags.append({"from": sw.points[i][sw.label], "to": sw.points[i + 1][sw.label], "kind": kind,
                      "ratio": per_med[i + 1] / per_med[i], "ratio_best": per_best[i + 1] / per_best[i],
                      "ratio_again": r_med, "ratio_best_again": r_best,
                      "confirmed": _beyond(r_med, kind, limit) and _beyond(r_best, kind, limit)})
    del calls
    last = len(sw.points) - 1
    return {"sweep": sw.key, "op": sw.op, "name": sw.name, "crosses": sw.crosses, "layout": sw.layout,
            "threads": nt, "label": sw.label, "points": [
                {sw.label: pt[sw.label], "elements": n[i], "seconds": med[i], "best_seconds": best[i],
                 "ns_per_element": 1e9 * per_med[i], "best_ns_per_element": 1e9 * per_best[i],
                 "step": per_med[i + 1] / per_med[i] if i < last else None,
                 "best_step": per_best[i + 1] / per_best[i] if i < last else None}
                for i, pt in enumerate(sw.points)],
            "flags": flags}


def flag_text(f: dict) -> str:
    """One flagged step in words."""
    return (f"{f['kind']} {f['from']} -> {f['to']}: {f['ratio']:.2f}x (fastest {f['ratio_best']:.2f}x), "
            f"again {f['ratio_again']:.2f}x (fastest {f['ratio_best_again']:.2f}x) "
            f"{'CONFIRMED' if f['confirmed'] else '(not reproduced)'}")


def format_result(res: dict) -> str:
    """A sweep's lines: size, median ms, ns per element (median, fastest), step to the next size, flag."""
    lines = [f"{res['sweep']}, {res['threads']} thread(s) - crosses: {res['crosses']}"]
    flagged = {f["from"]: f for f in res["flags"]}
    for pt in res["points"]:
        v = pt[res["label"]]
        step = (f"{pt['step']:5.2f}x ({pt['best_step']:5.2f}x)" if pt["step"] is not None else " " * 15)
        mark = f"  <- {flag_text(flagged[v])}" if v in flagged else ""
        lines.append(f"  {res['label']}={v!s:<8} {pt['seconds'] * 1e3:10.3f} ms {pt['ns_per_element']:8.3f} "
                     f"({pt['best_ns_per_element']:8.3f}) ns/elem  step {step}{mark}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ops", nargs="*", choices=OPS, default=list(OPS))
    parser.add_argument("--layouts", nargs="*", choices=("NCHW", "NHWC"), default=["NCHW", "NHWC"])
    parser.add_argument("--threads", type=int, nargs="*", help="thread counts (default: 1 and all)")
    parser.add_argument("--reps", type=int, default=5, help="timed rounds per sweep (default 5)")
    parser.add_argument("--limit", type=float, default=1.5, help="flag steps beyond this ratio (default 1.5)")
    parser.add_argument("--floor", type=float, default=1e-3,
                        help="a drop is flagged only when both calls take at least this many seconds (default 1e-3)")
    parser.add_argument("--match", nargs="*", metavar="SUBSTRING", help="only sweeps whose key contains one of these")
    parser.add_argument("--list", action="store_true", help="list the sweeps and thresholds; time nothing")
    parser.add_argument("--json", help="write the results to this JSON file")
    args = parser.parse_args(argv)
    from poolgrad.config import resolve_num_threads
    print("planner thresholds in this build:")
    for name, value, what in thresholds():
        print(f"  {name:<42} {'(not found)' if value is None else value!s:>10}  {what}")
    for line in COMPILED_THRESHOLDS:
        print(f"  {line}")
    todo = [s for s in sweeps(tuple(args.ops), tuple(args.layouts))
            if not args.match or any(m in s.key for m in args.match)]
    threads = args.threads or sorted({1, resolve_num_threads(None)})
    if args.list:
        for s in todo:
            print(f"{s.key}: {s.label} in {[p[s.label] for p in s.points]} - crosses {s.crosses}")
        return 0
    results = []
    for s in todo:
        for nt in threads:
            res = run_sweep(s, nt, args.reps, args.limit, args.floor)
            results.append(res)
            print(format_result(res), flush=True)
    print(f"\nflagged steps (median and fastest time per element both beyond {args.limit}x between neighbouring "
          "sizes; CONFIRMED = both still beyond it when the pair is timed again):")
    n = 0
    for res in results:
        for f in res["flags"]:
            n += 1
            print(f"  {res['sweep']}, {res['threads']} thread(s), {res['label']} {flag_text(f)}")
    if n == 0:
        print("  none")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"thresholds": [(k, v, w) for k, v, w in thresholds()], "results": results}, fh, indent=1,
                      default=str)
    return 0


if __name__ == "__main__":
    sys.exit(main())
