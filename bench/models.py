"""poolgrad versus PyTorch on every pooling layer of standard CNNs (issue 8, item 1).

For each layer of ``bench/cnn_layers.py`` (VGG-16, ResNet-50, AlexNet, GoogLeNet, Inception-v3, DenseNet-121,
SqueezeNet-1.1 and an adaptive-max head), batch size, layout (NCHW, channels-last NHWC), thread count and output
mode, both libraries run the layer on the same float32 arrays (PyTorch sees poolgrad's arrays through
``torch.from_numpy``, channels-last as a permuted view), in the same process, with the same thread count:

* phases: ``fwdbwd`` = the forward, then the backward on its indices, as a training step runs them; ``bwd`` = the
  backward alone on fixed indices (these two by default); ``fwd`` = the forward alone.
* modes: ``alloc`` = every call allocates its outputs, as users call them; ``out`` = every call that can write a
  preallocated output does (PyTorch's ``.out`` / ``.grad_input`` overloads for forward and backward, poolgrad's
  ``out=`` for the backward; poolgrad's forwards take no ``out=`` and allocate in both modes).

Before anything is timed, every configuration's outputs are compared with PyTorch's: forward values, indices
and gradients (indices equal, values and gradients within float32 rounding); a configuration that differs is
reported (in the output, the JSON and the tables) and not timed, and the run exits with status 1.  Timing is interleaved: each round
calls every (library, phase) once, in a rotating order, and each figure is the median over the rounds.  Beside
every row: the bytes the phase must move divided by its time, as a fraction of the copy rate of the row's own
thread count (``poolgrad._bandwidth``, measured at the start and at the end of the run; the higher is used).
Per model, "pooling cost of one training step" is the sum over its layers (times their ``count``) of the
``fwdbwd`` medians.

    python bench/models.py --models resnet50 --batches 8 --threads 2 --reps 3      # a quick look
    python bench/models.py --json bench/results/models.json                        # everything
    python bench/models.py --from-json bench/results/models.json --markdown        # tables of a saved run

Run it from the repository root with ``PYTHONPATH=.`` to measure that tree's build; without it, Python imports
the installed poolgrad.  Only ratios measured in one run mean anything on a shared machine.
"""
from __future__ import annotations

import argparse
import gc
import json
import math
import os
import statistics
import sys
import time
from typing import Any, Callable

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cnn_layers import LAYERS, MODELS, Layer, layers_of  # noqa: E402

PHASES = ("fwdbwd", "bwd", "fwd")
# the phases issue 8 asks for; the forward alone is one option away (--phases fwdbwd bwd fwd)
DEFAULT_PHASES = ("fwdbwd", "bwd")
MODES = ("alloc", "out")
LAYOUTS = ("NCHW", "NHWC")
LIBS = ("poolgrad", "torch")


def _all_threads() -> int:
    from poolgrad.config import resolve_num_threads
    return resolve_num_threads(None)


def phase_bytes(layer: Layer, batch: int, phase: str, index_bytes: int = 8) -> int:
    """Bytes a phase must move at least (float32): the forward reads x and writes y (and the indices); the
    backward reads grad_output (and the indices) and writes grad_x once."""
    x = batch * layer.c * layer.h * layer.w * 4
    ho, wo = layer.out_hw()
    y = batch * layer.c * ho * wo * 4
    ind = batch * layer.c * ho * wo * index_bytes if layer.op != "avg" else 0
    fwd, bwd = x + y + ind, y + ind + x
    return {"fwd": fwd, "bwd": bwd, "fwdbwd": fwd + bwd}[phase]


class LayerRun:
    """The arrays of one (layer, batch, layout) and the callables of both libraries for a thread count and a
    mode.  poolgrad and PyTorch read the same x and grad_output bytes."""

    def __init__(self, layer: Layer, batch: int, layout: str, seed: int = 0) -> None:
        import torch
        self.layer, self.batch, self.layout = layer, batch, layout
        rng = np.random.default_rng(seed)
        shape = (batch, layer.c, layer.h, layer.w)
        x4 = rng.standard_normal(shape, dtype=np.float32)
        self.x = np.ascontiguousarray(x4.transpose(0, 2, 3, 1)) if layout == "NHWC" else x4
        ho, wo = layer.out_hw()
        gshape = (batch, ho, wo, layer.c) if layout == "NHWC" else (batch, layer.c, ho, wo)
        self.gy = rng.standard_normal(gshape, dtype=np.float32)
        # PyTorch's views of the same memory: logical NCHW, channels-last strides for NHWC
        self.xt = self._t(self.x)
        self.gyt = self._t(self.gy)
        k, s, p, ceil = layer.kernel, layer.stride, layer.padding, layer.ceil_mode
        aten = torch.ops.aten
        if layer.op == "max":
            kk, ss, pp = [k, k], [s, s], [p, p]
            self._t_fwd = lambda: aten.max_pool2d_with_indices(self.xt, kk, ss, pp, [1, 1], ceil)
            self._t_fwd_out = lambda y, i: aten.max_pool2d_with_indices.out(self.xt, kk, ss, pp, [1, 1], ceil,
                                                                            out=y, indices=i)
            self._t_bwd = lambda i: aten.max_pool2d_with_indices_backward(self.gyt, self.xt, kk, ss, pp, [1, 1],
                                                                          ceil, i)
            self._t_bwd_out = lambda i, g: aten.max_pool2d_with_indices_backward.grad_input(
                self.gyt, self.xt, kk, ss, pp, [1, 1], ceil, i, grad_input=g)
        elif layer.op == "avg":
            kk, ss, pp = [k, k], [s, s], [p, p]
            self._t_fwd = lambda: aten.avg_pool2d(self.xt, kk, ss, pp, ceil, True, None)
            self._t_fwd_out = lambda y: aten.avg_pool2d.out(self.xt, kk, ss, pp, ceil, True, None, out=y)
            self._t_bwd = lambda: aten.avg_pool2d_backward(self.gyt, self.xt, kk, ss, pp, ceil, True, None)
            self._t_bwd_out = lambda g: aten.avg_pool2d_backward.grad_input(self.gyt, self.xt, kk, ss, pp, ceil,
                                                                            True, None, grad_input=g)
        elif layer.op == "adaptive_max":
            osz = list(layer.out_hw())
            self._t_fwd = lambda: aten.adaptive_max_pool2d(self.xt, osz)
            self._t_fwd_out = lambda y, i: aten.adaptive_max_pool2d.out(self.xt, osz, out=y, indices=i)
            self._t_bwd = lambda i: aten.adaptive_max_pool2d_backward(self.gyt, self.xt, i)
            self._t_bwd_out = lambda i, g: aten.adaptive_max_pool2d_backward.grad_input(self.gyt, self.xt, i,
                                                                                         grad_input=g)
        else:
            raise ValueError(f"unknown pooling op {layer.op!r}")
        # fixed forward results for the backward-alone phase (both libraries' own indices)
        self.t_ref = self._t_fwd()
        # ... copied out of poolgrad's block cache: held there for the whole run, poolgrad's fixture would take the
        # room the timed forwards' recycled outputs need (VGG-16 pool1 at batch 32: 310 of the cache's 512 MiB),
        # and every timed forward would map and fault fresh pages instead (measured with and without such a held
        # result, bench/experiments/clfwd_rows.py --hold-ref: 109 ms against 64 ms, the kernel alone 59 ms)
        ref = self._pg_fwd(None)
        self.pg_ref = tuple(np.array(a) for a in ref) if isinstance(ref, tuple) else np.array(ref)

    def _t(self, a: np.ndarray) -> Any:
        import torch
        t = torch.from_numpy(a)
        return t.permute(0, 3, 1, 2) if self.layout == "NHWC" else t

    def _pg_fwd(self, nt: int | None) -> Any:
        import poolgrad as pg
        L = self.layer
        if L.op == "max":
            return pg.max_pool2d_with_indices(self.x, L.kernel, L.stride, L.padding, 1, L.ceil_mode,
                                              layout=self.layout, num_threads=nt)
        if L.op == "avg":
            return pg.avg_pool2d(self.x, L.kernel, L.stride, L.padding, L.ceil_mode, True, layout=self.layout,
                                 num_threads=nt)
        return pg.adaptive_max_pool2d(self.x, L.out_hw(), layout=self.layout, num_threads=nt)

    def _pg_bwd(self, fwd: Any, gx: np.ndarray | None, nt: int) -> np.ndarray:
        import poolgrad as pg
        L = self.layer
        if L.op == "max":
            return pg.max_pool2d_with_indices_backward(self.gy, self.x, fwd[1], L.kernel, L.stride, L.padding, 1,
                                                       L.ceil_mode, layout=self.layout, out=gx, num_threads=nt)
        if L.op == "avg":
            return pg.avg_pool2d_backward(self.gy, self.x, L.kernel, L.stride, L.padding, L.ceil_mode, True,
                                          layout=self.layout, out=gx, num_threads=nt)
        return pg.adaptive_max_pool2d_backward(self.gy, self.x, fwd[1], layout=self.layout, out=gx,
                                               num_threads=nt)

    def callables(self, nt: int, mode: str, phases: tuple[str, ...]) -> dict[tuple[str, str], Callable[[], Any]]:
        """{(library, phase): fn}; every fn returns what the phase produced (forward: y or (y, indices);
        backward and fwdbwd: grad_x), so that the results can be checked before they are timed."""
        import torch
        gx = np.empty_like(self.x) if mode == "out" else None
        avg = self.layer.op == "avg"
        fns: dict[tuple[str, str], Callable[[], Any]] = {}

        def pg_fwdbwd() -> np.ndarray:
            return self._pg_bwd(self._pg_fwd(nt), gx, nt)
        fns["poolgrad", "fwd"] = lambda: self._pg_fwd(nt)
        fns["poolgrad", "bwd"] = lambda: self._pg_bwd(self.pg_ref, gx, nt)
        fns["poolgrad", "fwdbwd"] = pg_fwdbwd

        if mode == "out":
            ref = self.t_ref
            ty, ti = (torch.empty_like(ref), None) if avg else (torch.empty_like(ref[0]), torch.empty_like(ref[1]))
            tg = torch.empty_like(self.xt)
            if avg:
                t_fwd = lambda: self._t_fwd_out(ty)  # noqa: E731
                t_bwd = lambda: self._t_bwd_out(tg)  # noqa: E731

                def t_fwdbwd() -> Any:
                    self._t_fwd_out(ty)
                    return self._t_bwd_out(tg)
            else:
                t_fwd = lambda: self._t_fwd_out(ty, ti)  # noqa: E731
                t_bwd = lambda: self._t_bwd_out(ref[1], tg)  # noqa: E731

                def t_fwdbwd() -> Any:
                    self._t_fwd_out(ty, ti)
                    return self._t_bwd_out(ti, tg)
        else:
            if avg:
                t_fwd = self._t_fwd
                t_bwd = lambda: self._t_bwd()  # noqa: E731

                def t_fwdbwd() -> Any:
                    self._t_fwd()
                    return self._t_bwd()
            else:
                t_fwd = self._t_fwd
                t_bwd = lambda: self._t_bwd(self.t_ref[1])  # noqa: E731

                def t_fwdbwd() -> Any:
                    return self._t_bwd(self._t_fwd()[1])
        fns["torch", "fwd"], fns["torch", "bwd"], fns["torch", "fwdbwd"] = t_fwd, t_bwd, t_fwdbwd
        return {key: fn for key, fn in fns.items() if key[1] in phases}

    def check(self, fns: dict[tuple[str, str], Callable[[], Any]]) -> None:
        """Run every callable once and compare poolgrad's results with PyTorch's; raises AssertionError with
        the layer and phase on any difference."""
        what = f"{self.layer.key} batch {self.batch} {self.layout}"
        for phase in PHASES:
            if ("poolgrad", phase) not in fns:
                continue
            got, want = fns["poolgrad", phase](), fns["torch", phase]()
            if phase == "fwd":
                if self.layer.op == "avg":
                    _close(self._nchw(got), want, f"{what}: forward values")
                else:
                    _close(self._nchw(got[0]), want[0], f"{what}: forward values")
                    if not np.array_equal(self._nchw(got[1]), want[1].numpy()):
                        raise AssertionError(f"{what}: forward indices differ from PyTorch's")
            else:
                _close(self._nchw(got), want, f"{what}: {phase} gradient")

    def _nchw(self, a: np.ndarray) -> np.ndarray:
        return a.transpose(0, 3, 1, 2) if self.layout == "NHWC" else a


def _close(got: np.ndarray, want: Any, what: str) -> None:
    """``got`` (logical NCHW) agrees with the tensor ``want`` to float32 rounding: overlapping windows add several
    gradients into one cell, and PyTorch and poolgrad may add them in different orders."""
    g, w = got, want.numpy()
    if g.shape != w.shape:
        raise AssertionError(f"{what}: shape {g.shape}, PyTorch {w.shape}")
    if not np.allclose(g, w, rtol=1e-5, atol=1e-6):
        bad = int(np.argmax(np.abs(g - w)))
        raise AssertionError(f"{what}: differs from PyTorch (largest gap {np.abs(g - w).flat[bad]:.3g})")


CLOCKS = {"wall": time.perf_counter, "thread": time.thread_time}


def interleaved(fns: dict[Any, Callable[[], Any]], reps: int, warmup: int, max_seconds: float,
                clock: str = "wall") -> dict[Any, float]:
    """Medians of round-robin timing (see ``poolgrad.benchmark.interleaved_medians``)."""
    from poolgrad.benchmark import interleaved_medians
    return interleaved_medians(fns, reps, warmup, max_seconds, CLOCKS[clock])


def copy_rates(threads: list[int], nbytes: int) -> dict[int, float]:
    """Copy rate GB/s (read + write) per thread count, with poolgrad's OpenMP copy kernel."""
    from poolgrad.benchmark import copy_rate
    return {nt: copy_rate(nt, nbytes)[0] for nt in threads}


def run(layers: list[Layer], batches: list[int], layouts: list[str], threads: list[int], modes: list[str],
        phases: tuple[str, ...], reps: int, warmup: int = 2, max_seconds: float = 20.0, copy_bytes: int = 256 << 20,
        progress: Callable[[str], None] | None = print, clock: str = "wall") -> dict:
    """Check and time every configuration; returns the JSON-able result (rows, copy rates, environment).
    ``clock="thread"`` (one thread only) times the calling thread's CPU time instead of wall time."""
    if clock == "thread" and any(nt != 1 for nt in threads):
        raise ValueError("--clock thread measures one-thread calls only (other threads' CPU time is not counted)")
    import torch

    import poolgrad
    say = progress or (lambda m: None)
    start_rates = copy_rates(threads, copy_bytes)
    say("copy rate at start: " + ", ".join(f"{t} thread(s) {r:.1f} GB/s" for t, r in start_rates.items()))
    rows: list[dict] = []
    t_start = time.time()
    for layer in layers:
        for batch in batches:
            for layout in layouts:
                lr = LayerRun(layer, batch, layout)
                for nt in threads:
                    torch.set_num_threads(nt)
                    for mode in modes:
                        fns = lr.callables(nt, mode, phases)
                        row = {"model": layer.model, "layer": layer.name, "op": layer.op,
                               "geometry": layer.describe(), "count": layer.count, "batch": batch,
                               "layout": layout, "threads": nt, "mode": mode}
                        try:
                            lr.check(fns)
                        except AssertionError as exc:
                            # a wrong result is not timed; the run goes on and reports it (main exits 1)
                            row["error"] = str(exc)
                            rows.append(row)
                            say(f"CHECK FAILED, not timed: {exc}")
                            continue
                        med = interleaved(fns, reps, warmup, max_seconds, clock)
                        for phase in phases:
                            row[f"poolgrad_{phase}_s"] = med["poolgrad", phase]
                            row[f"torch_{phase}_s"] = med["torch", phase]
                            row[f"bytes_{phase}"] = phase_bytes(layer, batch, phase)
                        rows.append(row)
                        say(_row_line(row, phases))
                        del fns
                del lr
                gc.collect()
    end_rates = copy_rates(threads, copy_bytes)
    say("copy rate at end: " + ", ".join(f"{t} thread(s) {r:.1f} GB/s" for t, r in end_rates.items()))
    rates = {t: max(start_rates[t], end_rates[t]) for t in threads}
    for row in rows:
        row["copy_gbs"] = rates[row["threads"]]
    return {"rows": rows, "errors": [r["error"] for r in rows if "error" in r], "phases": list(phases),
            "reps": reps, "warmup": warmup, "clock": clock,
            "copy_gbs_start": {str(t): r for t, r in start_rates.items()},
            "copy_gbs_end": {str(t): r for t, r in end_rates.items()},
            "copy_gbs": {str(t): r for t, r in rates.items()}, "seconds": time.time() - t_start,
            "poolgrad": poolgrad.__version__, "poolgrad_file": poolgrad.__file__, "torch": torch.__version__,
            "deterministic_default": poolgrad.is_deterministic(), "cpu_count": os.cpu_count()}


def _row_line(row: dict, phases: tuple[str, ...]) -> str:
    text = (f"{row['model']}/{row['layer']:<24} {row['geometry']:<22} b{row['batch']:<3} {row['layout']} "
            f"{row['threads']}t {row['mode']:<5}")
    for phase in phases:
        pg, t = row[f"poolgrad_{phase}_s"], row[f"torch_{phase}_s"]
        text += f"  {phase} {pg * 1e3:8.3f} ms {t / pg:5.2f}x"
    return text


# ---------------------------------------------------------------------------------------------------------------
# Tables


def model_totals(result: dict) -> list[dict]:
    """Per model and (batch, layout, threads, mode): the sum over the model's layers (times their count) of each
    phase's median, for both libraries.  A model appears only where all its layers were measured."""
    phases = result["phases"]
    groups: dict[tuple, list[dict]] = {}
    for r in result["rows"]:
        groups.setdefault((r["model"], r["batch"], r["layout"], r["threads"], r["mode"]), []).append(r)
    totals = []
    for (model, batch, layout, nt, mode), rows in groups.items():
        if any("error" in r for r in rows):
            continue
        if model in MODELS and {r["layer"] for r in rows} != {L.name for L in LAYERS if L.model == model}:
            continue
        t = {"model": model, "batch": batch, "layout": layout, "threads": nt, "mode": mode, "layers": len(rows)}
        for phase in phases:
            for lib in LIBS:
                t[f"{lib}_{phase}_s"] = sum(r["count"] * r[f"{lib}_{phase}_s"] for r in rows)
        totals.append(t)
    return totals


def _ratio(r: dict, phase: str) -> float:
    return r[f"torch_{phase}_s"] / r[f"poolgrad_{phase}_s"]


def geomean(values: list[float]) -> float:
    """Geometric mean (the summary statistic of speed ratios)."""
    return math.exp(statistics.fmean(math.log(v) for v in values)) if values else float("nan")


def summary(result: dict) -> list[dict]:
    """Per (layout, mode, threads, phase): geometric mean, minimum and maximum of PyTorch time / poolgrad time
    over the layer rows, and how many rows are below 1.0x."""
    out = []
    keys = sorted({(r["layout"], r["mode"], r["threads"]) for r in result["rows"]})
    for layout, mode, nt in keys:
        rows = [r for r in result["rows"]
                if (r["layout"], r["mode"], r["threads"]) == (layout, mode, nt) and "error" not in r]
        if not rows:
            continue
        for phase in result["phases"]:
            ratios = [_ratio(r, phase) for r in rows]
            out.append({"layout": layout, "mode": mode, "threads": nt, "phase": phase, "rows": len(rows),
                        "geomean": geomean(ratios), "min": min(ratios), "max": max(ratios),
                        "below_1": sum(x < 1.0 for x in ratios)})
    return out


def pivot(result: dict, mode: str, phase: str = "fwdbwd") -> str:
    """Markdown: one row per (model, batch), one column per (layout, threads): PyTorch time / poolgrad time of
    the model's training-step pooling cost in ``mode``, with poolgrad's milliseconds."""
    totals = [t for t in model_totals(result) if t["mode"] == mode]
    cols = sorted({(t["layout"], t["threads"]) for t in totals})
    head = "| model | batch |" + "".join(f" {lay} {nt}t |" for lay, nt in cols)
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    order = {m: i for i, m in enumerate(MODELS)}
    for model, batch in sorted({(t["model"], t["batch"]) for t in totals}, key=lambda k: (order.get(k[0], 99), k)):
        line = f"| {model} | {batch} |"
        for lay, nt in cols:
            t = next((t for t in totals if (t["model"], t["batch"], t["layout"], t["threads"]) ==
                      (model, batch, lay, nt)), None)
            line += (f" {_ratio(t, phase):.2f}x ({t[f'poolgrad_{phase}_s'] * 1e3:.1f} ms) |" if t else " - |")
        lines.append(line)
    return "\n".join(lines)


def markdown(result: dict, tables: tuple[str, ...] = ("summary", "models", "layers")) -> str:
    """Markdown of a run: the summary of ratios, the per-model training-step totals and the per-layer rows
    (each phase: poolgrad ms, PyTorch ms, ratio = PyTorch time / poolgrad time, and both libraries' % of the
    copy rate of the row's thread count)."""
    phases = result["phases"]
    rates = ", ".join(f"{t} thread(s) {r:.1f} GB/s" for t, r in result["copy_gbs"].items())
    errors = result.get("errors", [])
    parts = [f"**{len(errors)} configuration(s) gave results that differ from PyTorch's and were not timed:** "
             + "; ".join(errors)] if errors else []
    parts += [f"Copy rate (read + write, `poolgrad._bandwidth`, the higher of the run's start and end): {rates}. "
             f"Medians ({'calling-thread CPU time' if result.get('clock') == 'thread' else 'wall time'}) of "
             f"{result['reps']} interleaved rounds after {result['warmup']} warm-up rounds; ratio = "
             "PyTorch time / poolgrad time (> 1: poolgrad faster)."]
    if "summary" in tables:
        lines = ["| layout | mode | threads | phase | layer rows | geomean | min | max | rows < 1.0x |",
                 "|---|---|---|---|---|---|---|---|---|"]
        for s in summary(result):
            lines.append(f"| {s['layout']} | {s['mode']} | {s['threads']} | {s['phase']} | {s['rows']} | "
                         f"{s['geomean']:.2f}x | {s['min']:.2f}x | {s['max']:.2f}x | {s['below_1']} |")
        parts.append("\n".join(lines))
    if "pivot" in tables:
        # the training step (fwdbwd) when it was measured, else each phase that was
        for mode in sorted({r["mode"] for r in result["rows"]}):
            for phase in ["fwdbwd"] if "fwdbwd" in phases else phases:
                parts.append(f"Pooling cost per model, `{mode}` mode, `{phase}` (ratio, poolgrad ms):\n\n"
                             + pivot(result, mode, phase))
    if "models" in tables:
        head = "| model | batch | layout | threads | mode |"
        for phase in phases:
            head += f" poolgrad {phase} ms | PyTorch {phase} ms | ratio |"
        lines = [head, "|" + "---|" * (head.count("|") - 1)]
        for t in model_totals(result):
            line = f"| {t['model']} | {t['batch']} | {t['layout']} | {t['threads']} | {t['mode']} |"
            for phase in phases:
                line += (f" {t[f'poolgrad_{phase}_s'] * 1e3:.2f} | {t[f'torch_{phase}_s'] * 1e3:.2f} | "
                         f"{_ratio(t, phase):.2f}x |")
            lines.append(line)
        parts.append("\n".join(lines))
    if "layers" in tables:
        head = "| layer | geometry | batch | layout | thr | mode |"
        for phase in phases:
            head += f" pg {phase} ms | PyTorch ms | ratio | pg % copy | PyTorch % copy |"
        lines = [head, "|" + "---|" * (head.count("|") - 1)]
        for r in result["rows"]:
            times = f" (x{r['count']})" if r["count"] > 1 else ""
            line = (f"| {r['model']}/{r['layer']}{times} | {r['geometry']} | {r['batch']} | {r['layout']} | "
                    f"{r['threads']} | {r['mode']} |")
            if "error" in r:
                lines.append(line + f" check failed, not timed: {r['error']} |")
                continue
            for phase in phases:
                pg, t = r[f"poolgrad_{phase}_s"], r[f"torch_{phase}_s"]
                peak = r["copy_gbs"] * 1e9
                line += (f" {pg * 1e3:.3f} | {t * 1e3:.3f} | {t / pg:.2f}x | "
                         f"{r[f'bytes_{phase}'] / pg / peak:.0%} | {r[f'bytes_{phase}'] / t / peak:.0%} |")
            lines.append(line)
        parts.append("\n".join(lines))
    return "\n\n".join(parts) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", nargs="*", choices=MODELS, metavar="MODEL",
                        help=f"models (default all: {', '.join(MODELS)})")
    parser.add_argument("--layers", nargs="*", metavar="SUBSTRING",
                        help="only layers whose model/name contains one of these")
    parser.add_argument("--batches", type=int, nargs="*", default=[1, 8, 32])
    parser.add_argument("--layouts", nargs="*", choices=LAYOUTS, default=list(LAYOUTS))
    parser.add_argument("--threads", type=int, nargs="*", help="thread counts (default: 1 and all)")
    parser.add_argument("--modes", nargs="*", choices=MODES, default=list(MODES))
    parser.add_argument("--phases", nargs="*", choices=PHASES, default=list(DEFAULT_PHASES),
                        help="fwdbwd, bwd (default) and fwd")
    parser.add_argument("--reps", type=int, default=7, help="timed rounds per configuration (default 7)")
    parser.add_argument("--warmup", type=int, default=2, help="untimed rounds first (default 2)")
    parser.add_argument("--max-seconds", type=float, default=20.0,
                        help="stop a configuration's rounds after this long (at least 3 rounds; default 20)")
    parser.add_argument("--clock", choices=tuple(CLOCKS), default="wall",
                        help="wall time (default) or, for one-thread runs, the calling thread's CPU time "
                             "(steady on a shared machine: waits for a core are not counted)")
    parser.add_argument("--json", help="write the result to this JSON file")
    parser.add_argument("--markdown", nargs="?", const="-", metavar="FILE",
                        help="write the markdown tables to FILE (or stdout)")
    parser.add_argument("--tables", nargs="*", choices=("summary", "pivot", "models", "layers"),
                        help="which markdown tables (default: summary, models and layers in --markdown FILE, "
                             "summary and pivot on stdout)")
    parser.add_argument("--from-json", metavar="FILE", help="render the tables of a saved run, time nothing")
    args = parser.parse_args(argv)
    if args.from_json:
        with open(args.from_json) as fh:
            result = json.load(fh)
    else:
        layers = layers_of(args.models)
        if args.layers:
            layers = [L for L in layers if any(s in L.key for s in args.layers)]
        if not layers:
            parser.error("no layer selected")
        threads = args.threads or sorted({1, _all_threads()})
        phases = tuple(p for p in PHASES if p in args.phases)
        if args.clock == "thread" and threads != [1]:
            parser.error("--clock thread needs --threads 1")
        result = run(layers, args.batches, args.layouts, threads, args.modes, phases, args.reps, args.warmup,
                     args.max_seconds, clock=args.clock)
        if args.json:
            with open(args.json, "w") as fh:
                json.dump(result, fh, indent=1)
    text = markdown(result, tuple(args.tables or ("summary", "models", "layers")))
    if args.markdown and args.markdown != "-":
        with open(args.markdown, "w") as fh:
            fh.write(text)
    elif args.markdown or args.from_json:
        print(text)
    else:
        print()
        print(markdown(result, tuple(args.tables or ("summary", "pivot"))))
    return 1 if result.get("errors") else 0


if __name__ == "__main__":
    sys.exit(main())
