"""What ``poolgrad.torch`` costs on top of poolgrad's kernels, layer by layer (issue 9).

For every distinct pooling layer of the five models of ``poolgrad.torch.models`` (found by running one forward
with hooks on their ``nn.MaxPool2d`` / ``nn.AvgPool2d`` / ``nn.AdaptiveMaxPool2d`` modules at ``--batch`` and
``--size``), plus a few tiny layers where only per-call costs show, this times one forward + backward pair, the
way a training step runs it, six ways:

* ``aten``: PyTorch's own operators called directly (``torch.ops.aten.*`` and ``*_backward``, no autograd);
* ``torch``: ``torch.nn.functional`` + ``torch.autograd.grad`` (what an unconverted model pays);
* ``np``: poolgrad's public NumPy functions on NumPy views of the same memory, with exactly the arguments
  ``poolgrad.torch`` passes (poolgrad's own per-call Python - plan-cache look-up - included);
* ``np_i32``: the same with int32 indices (max and adaptive max only; what an int64 index costs);
* ``ops``: ``torch.ops.poolgrad.*`` and ``*_backward`` (the dispatcher and the tensor <-> NumPy bridge, no
  autograd);
* ``op_ag``: ``torch.ops.poolgrad.*`` forward (int64 indices) + ``torch.autograd.grad``: the operator path
  with its registered autograd formula, which is how eager calls ran before the eager path existed and how they
  still run under the profiler, modes and tracing;
* ``eager``: ``poolgrad.torch`` function + ``torch.autograd.grad`` (what a converted model pays, eager: the
  direct autograd.Function path, int32 indices for channels-last max pooling).

With ``--compile`` two more: ``torch.compile`` (inductor, ``fullgraph=True``) of the PyTorch function and of the
``poolgrad.torch`` function, each + ``torch.autograd.grad`` (``c_torch``, ``c_pg``).

All variants of one row run round-robin (``poolgrad.benchmark.interleaved_times``, rotating order) on the same
input and incoming gradient; each cell is a median.  The wrapper's cost is ``eager - np`` (and ``ops - np``
without autograd); a ratio ``torch / eager`` above 1 means the converted layer is faster.  Only differences and
ratios within one row mean anything on a shared machine.

Usage: python bench/experiments/torch_overhead.py [--batch 32] [--size 112] [--threads 1] [--reps 9]
       [--formats NCHW channels_last] [--only SUBSTRING] [--compile] [--json FILE]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from typing import Any, Callable

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

import poolgrad as pg  # noqa: E402
import poolgrad.torch as pt  # noqa: E402
from poolgrad.benchmark import interleaved_times  # noqa: E402
from poolgrad.torch import _ops  # noqa: E402
from poolgrad.torch.models import MODELS  # noqa: E402

Layer = tuple[str, tuple[int, ...], tuple]      # (op, NCHW input shape, parameters as the module holds them)


def model_layers(batch: int, size: int) -> dict[Layer, list[str]]:
    """Every distinct pooling layer of the five models, with the models that have it."""
    found: dict[Layer, list[str]] = {}
    for name, make in MODELS.items():
        model = make(num_classes=10)
        seen: list[Layer] = []

        def hook(mod: nn.Module, inputs: tuple, _out: Any) -> None:
            shape = tuple(inputs[0].shape)
            if type(mod) is nn.MaxPool2d:
                seen.append(("max", shape, (mod.kernel_size, mod.stride, mod.padding, mod.dilation,
                                            mod.ceil_mode)))
            elif type(mod) is nn.AvgPool2d:
                seen.append(("avg", shape, (mod.kernel_size, mod.stride, mod.padding, mod.ceil_mode,
                                            mod.count_include_pad, mod.divisor_override)))
            elif type(mod) is nn.AdaptiveMaxPool2d:
                seen.append(("adaptive", shape, (mod.output_size,)))

        handles = [m.register_forward_hook(hook) for m in model.modules()
                   if type(m) in (nn.MaxPool2d, nn.AvgPool2d, nn.AdaptiveMaxPool2d)]
        with torch.no_grad():
            model(torch.zeros(1, 3, size, size))
        for h in handles:
            h.remove()
        for op, shape, params in seen:
            key = (op, (batch, *shape[1:]), params)
            found.setdefault(key, [])
            if name not in found[key]:
                found[key].append(name)
    return found


TINY: dict[Layer, list[str]] = {
    ("max", (1, 2, 8, 8), (3, 2, 1, 1, False)): ["tiny"],
    ("avg", (1, 2, 8, 8), (3, 2, 1, False, True, None)): ["tiny"],
    ("adaptive", (1, 2, 8, 8), ((3, 3),)): ["tiny"],
}


def _pairs(*values: Any) -> list[list[int]]:
    return [[v, v] if isinstance(v, int) else list(v) for v in values]


def variants(layer: Layer, x: torch.Tensor, threads: int, compiled: bool) -> dict[str, Callable[[], Any]]:
    """The callables of one row; each runs one forward and one backward of ``layer`` on ``x`` and one fixed
    incoming gradient (in the output's memory format, as the next layer's backward gives it)."""
    op, _, params = layer
    cl = _ops.is_channels_last(x)
    xr = x.detach().requires_grad_()
    lay = _ops._layout(cl)
    det = torch.are_deterministic_algorithms_enabled()
    fns: dict[str, Callable[[], Any]] = {}
    if op == "max":
        k, s, p, d = _pairs(*params[:4])
        ceil = params[4]
        ours: Callable = lambda t: pt.max_pool2d(t, k, s, p, d, ceil)          # noqa: E731
        theirs: Callable = lambda t: F.max_pool2d(t, k, s, p, d, ceil)         # noqa: E731

        def aten() -> Any:
            y, i = torch.ops.aten.max_pool2d_with_indices(x, k, s, p, d, ceil)
            return torch.ops.aten.max_pool2d_with_indices_backward(go, x, k, s, p, d, ceil, i)

        def np_api(index_dtype: Any) -> Callable[[], Any]:
            def run() -> Any:
                y, i = pg.max_pool2d_with_indices(xn, k, s, p, d, ceil, layout=lay, index_dtype=index_dtype,
                                                  num_threads=threads)
                return pg.max_pool2d_with_indices_backward(gon, xn, i, k, s, p, d, ceil, layout=lay,
                                                           deterministic=det, num_threads=threads)
            return run

        def ops() -> Any:
            y, i = torch.ops.poolgrad.max_pool2d_with_indices(x, k, s, p, d, ceil)
            return torch.ops.poolgrad.max_pool2d_with_indices_backward(go, x, i, k, s, p, d, ceil)

        fns.update(aten=aten, np=np_api(np.int64), np_i32=np_api(np.int32), ops=ops)
        via_op: Callable = lambda t: torch.ops.poolgrad.max_pool2d_with_indices(t, k, s, p, d, ceil)[0]  # noqa: E731
    elif op == "avg":
        k, s, p = _pairs(*params[:3])
        ceil, cip, div = params[3:]
        ours = lambda t: pt.avg_pool2d(t, k, s, p, ceil, cip, div)             # noqa: E731
        theirs = lambda t: F.avg_pool2d(t, k, s, p, ceil, cip, div)            # noqa: E731

        def aten() -> Any:
            torch.ops.aten.avg_pool2d(x, k, s, p, ceil, cip, div)
            return torch.ops.aten.avg_pool2d_backward(go, x, k, s, p, ceil, cip, div)

        def np_avg() -> Any:
            pg.avg_pool2d(xn, k, s, p, ceil, cip, div, layout=lay, num_threads=threads)
            return pg.avg_pool2d_backward(gon, xn, k, s, p, ceil, cip, div, layout=lay, deterministic=det,
                                          num_threads=threads)

        def ops() -> Any:
            torch.ops.poolgrad.avg_pool2d(x, k, s, p, ceil, cip, div)
            return torch.ops.poolgrad.avg_pool2d_backward(go, x, k, s, p, ceil, cip, div)

        fns.update(aten=aten, np=np_avg, ops=ops)
        via_op = lambda t: torch.ops.poolgrad.avg_pool2d(t, k, s, p, ceil, cip, div)  # noqa: E731
    else:
        (o,) = _pairs(params[0])
        ours = lambda t: pt.adaptive_max_pool2d(t, o)                          # noqa: E731
        theirs = lambda t: F.adaptive_max_pool2d(t, o)                         # noqa: E731

        def aten() -> Any:
            y, i = torch.ops.aten.adaptive_max_pool2d(x, o)
            return torch.ops.aten.adaptive_max_pool2d_backward(go, x, i)

        def np_api(index_dtype: Any) -> Callable[[], Any]:
            def run() -> Any:
                y, i = pg.adaptive_max_pool2d(xn, o, layout=lay, index_dtype=index_dtype, num_threads=threads)
                return pg.adaptive_max_pool2d_backward(gon, xn, i, layout=lay, deterministic=det,
                                                       num_threads=threads)
            return run

        def ops() -> Any:
            y, i = torch.ops.poolgrad.adaptive_max_pool2d(x, o)
            return torch.ops.poolgrad.adaptive_max_pool2d_backward(go, x, i)

        fns.update(aten=aten, np=np_api(np.int64), np_i32=np_api(np.int32), ops=ops)
        via_op = lambda t: torch.ops.poolgrad.adaptive_max_pool2d(t, o)[0]  # noqa: E731

    with torch.no_grad():
        go = torch.randn_like(theirs(x))          # randn_like keeps the memory format
    xn, gon = _ops._numpy_view(x, cl), _ops._numpy_view(go, cl)

    def with_autograd(fn: Callable) -> Callable[[], Any]:
        def run() -> Any:
            return torch.autograd.grad(fn(xr), xr, go)
        return run

    fns["torch"] = with_autograd(theirs)
    fns["op_ag"] = with_autograd(via_op)
    fns["eager"] = with_autograd(ours)
    if compiled:
        fns["c_torch"] = with_autograd(torch.compile(theirs, fullgraph=True))
        fns["c_pg"] = with_autograd(torch.compile(ours, fullgraph=True))
    return fns


def describe(layer: Layer) -> str:
    op, shape, params = layer
    return f"{op} {'x'.join(map(str, shape))} {params}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--size", type=int, default=112)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--reps", type=int, default=9)
    parser.add_argument("--formats", nargs="*", default=["NCHW", "channels_last"],
                        choices=["NCHW", "channels_last"])
    parser.add_argument("--only", default="", help="only layers whose description contains this")
    parser.add_argument("--no-tiny", action="store_true", help="leave out the tiny per-call rows")
    parser.add_argument("--compile", action="store_true", help="also time torch.compile (inductor) of both")
    parser.add_argument("--json", help="write the rows (every repetition) to this file")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    layers = {} if args.no_tiny else dict(TINY)
    layers.update(model_layers(args.batch, args.size))
    rows = []
    cols = ["aten", "torch", "np", "np_i32", "ops", "op_ag", "eager"] + (["c_torch", "c_pg"] if args.compile else [])
    print(f"# batch {args.batch}, size {args.size}, {args.threads} thread(s), medians of {args.reps} (ms); "
          f"wrapper = eager - np; ratio = torch / eager")
    print("| layer | models | format | " + " | ".join(cols) + " | wrapper ms | wrapper % | torch/eager |")
    print("|---|---|---|" + "---|" * (len(cols) + 3))
    for layer, models in layers.items():
        if args.only not in describe(layer):
            continue
        for fmt in args.formats:
            torch.manual_seed(0)
            x = torch.randn(layer[1])
            if fmt == "channels_last":
                x = x.contiguous(memory_format=torch.channels_last)
            fns = variants(layer, x, args.threads, args.compile)
            times = interleaved_times(fns, reps=args.reps, warmup=2, max_seconds=20.0)
            med = {k: statistics.median(v) * 1e3 for k, v in times.items()}
            wrapper = med["eager"] - med["np"]
            row = {"layer": describe(layer), "models": models, "format": fmt, "threads": args.threads,
                   "median_ms": med, "all_s": times}
            rows.append(row)
            cells = " | ".join(f"{med[c]:.3f}" if c in med else "-" for c in cols)
            print(f"| {describe(layer)} | {','.join(models)} | {fmt} | {cells} | {wrapper:.3f} | "
                  f"{100 * wrapper / med['eager']:.0f}% | {med['torch'] / med['eager']:.2f}x |", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
