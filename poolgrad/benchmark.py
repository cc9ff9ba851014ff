"""The benchmark of ``python -m poolgrad``: the default workload, timed in this process.

Every case times poolgrad and, where installed, PyTorch on the same arrays with the same thread count,
interleaved (each repetition calls every library once, so a slow spell of a shared machine hits all of them
alike), and reports the median.  Achieved bandwidth is reported beside every row as a fraction of the copy rate
measured with the row's own thread count (:func:`copy_rate`, an OpenMP ``memcpy`` in ``poolgrad._bandwidth``):
only ratios measured in one run mean anything on a shared machine.

The multi-framework comparison (TensorFlow and JAX worker processes, the full case suite, the table merger)
lives in ``bench/`` and builds on the case builders here.
"""
from __future__ import annotations

import dataclasses
import statistics
import sys
import time
from typing import Any, Callable, Iterable

import numpy as np

from .config import resolve_num_threads

__all__ = ["Case", "copy_rate", "median_time", "interleaved_times", "interleaved_medians", "run_cases", "format_table",
           "default_cases", "has_torch", "main", "max_pool_backward_case", "adaptive_backward_case",
           "avg_backward_case", "max_pool_grad_case", "elementwise_case", "forward_case"]

# Libraries a case may time beside poolgrad in this process: (key in the case's callables, name in the table).
# bench/ adds TensorFlow and JAX, which run in worker processes.
COMPARATORS: list[tuple[str, str]] = [("torch", "PyTorch"), ("numpy", "NumPy")]

# Bytes each thread copies when measuring the copy rate: far beyond the last-level cache (32 MiB here), so the
# rate is the memory's, as it is for the big benchmark rows.
COPY_BYTES = 256 << 20


def has_torch() -> bool:
    """True when PyTorch can be imported (the comparison column is then filled)."""
    try:
        import torch  # noqa: F401
    except ImportError:
        return False
    return True


@dataclasses.dataclass
class Case:
    """One benchmark row.

    ``make(threads)`` builds the inputs once and returns ``{"poolgrad": fn, "torch": fn (optional), "numpy": fn
    (optional), "bytes": bytes that must move per call, "arrays": the inputs by name}``.  ``out``: every library
    writes into one preallocated output where it can (poolgrad's ``out=``, PyTorch's ``out=`` / ``grad_input=``
    overloads), which times the kernels without the allocation.  ``params``: the window parameters, for
    ``bench/`` workers that rebuild the call in another framework.
    """

    op: str
    shape: str
    layout: str
    dtype: str
    threads: int
    deterministic: bool | None
    make: Callable[[int], dict[str, Any]]
    extra: str = ""
    out: bool = False
    params: dict[str, Any] = dataclasses.field(default_factory=dict)


def copy_rate(threads: int, nbytes: int = COPY_BYTES, reps: int = 5) -> tuple[float, int]:
    """Copy rate with ``threads`` threads in GB/s (bytes read + bytes written per second; median of ``reps``
    copies of ``nbytes`` after one untimed copy that maps the pages), and the number of threads that actually
    copied (1 in a build without OpenMP)."""
    from . import _bandwidth
    src = np.ones(nbytes, np.uint8)
    dst = np.empty_like(src)
    used = _bandwidth.copy(src, dst, threads)
    t = median_time(lambda: _bandwidth.copy(src, dst, threads), reps=reps, warmup=0)
    return 2 * nbytes / t / 1e9, used


def median_time(fn: Callable[[], Any], reps: int = 7, warmup: int = 3, max_seconds: float = 5.0) -> float:
    """Median wall time of ``fn()`` over ``reps`` runs (fewer, but at least 3, if they exceed ``max_seconds``
    in total), after ``warmup`` untimed runs: the first calls that touch freshly mapped output memory are much
    slower here, for every library alike."""
    return interleaved_medians({"fn": fn}, reps, warmup, max_seconds)["fn"]


def interleaved_times(fns: dict[Any, Callable[[], Any]], reps: int = 7, warmup: int = 3,
                      max_seconds: float = 5.0, clock: Callable[[], float] = time.perf_counter
                      ) -> dict[Any, list[float]]:
    """Times of every callable, timed round-robin: each of ``reps`` rounds calls each function once (in a
    rotating order, so none always runs right after another), after ``warmup`` untimed rounds.  Rounds stop
    early (after at least 3) once ``max_seconds`` of wall time have passed.  ``clock``: wall time by default;
    ``time.thread_time`` counts only the calling thread's CPU time, which is the whole cost of a one-thread
    call (OpenMP and ATen run a one-thread region in the caller) and leaves out the waits for a core that a
    shared machine adds."""
    names = list(fns)
    times: dict[Any, list[float]] = {k: [] for k in names}
    for _ in range(warmup):
        for k in names:
            fns[k]()
    start = time.perf_counter()
    for r in range(reps):
        for j in range(len(names)):
            k = names[(r + j) % len(names)]
            t0 = clock()
            fns[k]()
            times[k].append(clock() - t0)
        if time.perf_counter() - start > max_seconds and r + 1 >= 3:
            break
    return times


def interleaved_medians(fns: dict[Any, Callable[[], Any]], reps: int = 7, warmup: int = 3,
                        max_seconds: float = 5.0, clock: Callable[[], float] = time.perf_counter
                        ) -> dict[Any, float]:
    """Median time of every callable over the rounds of :func:`interleaved_times`."""
    return {k: statistics.median(v)
            for k, v in interleaved_times(fns, reps, warmup, max_seconds, clock).items()}


def run_cases(cases: Iterable[Case], reps: int = 7, progress: Callable[[str], None] | None = None,
              rates: dict[int, float] | None = None) -> tuple[list[dict[str, Any]], dict[int, float]]:
    """Time every case; returns (rows, {thread count: copy rate GB/s}).

    ``rates`` gives copy rates already measured; any thread count missing there is measured here first.
    """
    cases = list(cases)
    rates = dict(rates or {})
    for nt in sorted({c.threads for c in cases} - set(rates)):
        rates[nt], used = copy_rate(nt)
        if progress:
            progress(f"copy rate with {nt} thread(s): {rates[nt]:.1f} GB/s (read + write; {used} thread(s) "
                     "copied)")
    set_torch_threads: Callable[[int], None] | None = None
    if has_torch():
        import torch
        set_torch_threads = torch.set_num_threads
    rows: list[dict[str, Any]] = []
    for i, case in enumerate(cases, 1):
        fns = case.make(case.threads)
        if set_torch_threads is not None:
            set_torch_threads(case.threads)
        rate = rates[case.threads]
        row: dict[str, Any] = {"op": case.op, "shape": case.shape, "layout": case.layout, "dtype": case.dtype,
                               "threads": case.threads, "deterministic": case.deterministic,
                               "extra": case.extra, "out": case.out, "bytes": fns["bytes"], "copy_gbs": rate}
        timed = {k: fns[k] for k in ["poolgrad"] + [o for o, _ in COMPARATORS] if fns.get(k) is not None}
        med = interleaved_medians(timed, reps)
        row["poolgrad_s"] = med["poolgrad"]
        row["gbs"] = fns["bytes"] / row["poolgrad_s"] / 1e9
        row["frac_copy"] = row["gbs"] / rate
        for other, _ in COMPARATORS:
            if other in med:
                row[f"{other}_s"] = med[other]
                row[f"vs_{other}"] = med[other] / row["poolgrad_s"]
        rows.append(row)
        if progress:
            progress(f"[{i}/{len(cases)}] " + row_text(row))
        del fns
    return rows, rates


def _mode(r: dict[str, Any]) -> str:
    return {True: "det", False: "nondet", None: "-"}[r["deterministic"]]


def row_text(r: dict[str, Any], comparators: list[tuple[str, str]] | None = None) -> str:
    """One row as a line of progress output."""
    text = (f"{r['op']:<34} {r['shape']:<26} {r['layout']:<4} {r['dtype']:<4} {r['threads']:>2}t {_mode(r):<6} "
            f"{r['poolgrad_s'] * 1e3:9.3f} ms {r['gbs']:6.1f} GB/s {100 * r['frac_copy']:4.0f}% of "
            f"{r['copy_gbs']:.0f}")
    for other, name in comparators or COMPARATORS:
        if f"vs_{other}" in r:
            text += f"  {r[f'vs_{other}']:6.2f}x vs {name}"
    return text


def format_table(rows: list[dict[str, Any]], comparators: list[tuple[str, str]] | None = None) -> str:
    """Markdown table of the rows: time, GB/s, the copy rate of the row's thread count and the row's fraction of
    it, and each other library's time and speed-up (its time / poolgrad's time) where it was measured."""
    others = [(k, name) for k, name in (comparators or COMPARATORS) if any(f"{k}_s" in r for r in rows)]
    head = "| op | shape | layout | dtype | threads | mode | poolgrad ms | GB/s | copy GB/s | % of copy |"
    for _, name in others:
        head += f" {name} ms | vs {name} |"
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for r in rows:
        line = (f"| {r['op']} | {r['shape']}{(' ' + r['extra']) if r['extra'] else ''} | {r['layout']} | "
                f"{r['dtype']} | {r['threads']} | {_mode(r)} | {r['poolgrad_s'] * 1e3:.3f} | {r['gbs']:.1f} | "
                f"{r['copy_gbs']:.1f} | {100 * r['frac_copy']:.0f}% |")
        for k, _ in others:
            line += (f" {r[f'{k}_s'] * 1e3:.3f} | {r[f'vs_{k}']:.2f}x |" if f"{k}_s" in r else " n/a | n/a |")
        lines.append(line)
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------------------------
# Case builders (bench/suite.py builds the full comparison suite from them)


def np_dtype(name: str) -> np.dtype[Any]:
    """The NumPy dtype of a short dtype name (f32, f64, f16, bf16)."""
    from .dtypes import bfloat16
    dt: np.dtype[Any] = np.dtype({"f32": np.float32, "f64": np.float64, "f16": np.float16, "bf16": bfloat16}[name])
    return dt


def _torch_dtype(name: str) -> Any:
    import torch
    return {"f32": torch.float32, "f64": torch.float64, "f16": torch.float16, "bf16": torch.bfloat16}[name]


def _torch_in_layout(arr_nchw: np.ndarray, layout: str, dtype: str) -> Any:
    """A torch tensor (logical NCHW) with the memory format matching ``layout``."""
    import torch
    t = torch.from_numpy(arr_nchw.astype(np.float32)).to(_torch_dtype(dtype))
    if layout == "NHWC":
        t = t.contiguous(memory_format=torch.channels_last)
    return t


def _torch_grad(go: np.ndarray, layout: str, dtype: str) -> Any:
    """A poolgrad-layout gradient array as a logical-NCHW torch tensor (bfloat16 through its bits)."""
    import torch
    if dtype == "bf16":
        t = torch.from_numpy(np.ascontiguousarray(go).view(np.int16)).view(torch.bfloat16)
    else:
        t = torch.from_numpy(np.ascontiguousarray(go))
    return t.permute(0, 3, 1, 2) if layout == "NHWC" else t


def _layout(a4: np.ndarray, layout: str) -> np.ndarray:
    return np.ascontiguousarray(a4.transpose(0, 2, 3, 1) if layout == "NHWC" else a4)


def _case_input(shape: tuple[int, ...], layout: str, dtype: str) -> tuple[np.random.Generator, np.ndarray,
                                                                          np.ndarray]:
    """(rng, x4 float32 logical NCHW, x in ``layout`` and ``dtype``), the same for every run of a case."""
    rng = np.random.default_rng(0)
    x4 = rng.standard_normal(shape, dtype=np.float32)
    return rng, x4, _layout(x4, layout).astype(np_dtype(dtype))


def _torch_timer(out: bool, like: Any, call: Callable[[], Any],
                 call_out: Callable[[Any], Any]) -> Callable[[], None]:
    """A PyTorch call to time: ``call()`` allocating its output, or with ``out`` ``call_out(t)`` writing into one
    tensor ``t`` shaped like ``like``, allocated once here."""
    import torch
    if not out:
        return lambda: call()
    tout = torch.empty_like(like)
    return lambda: call_out(tout)


def max_pool_backward_case(N: int, C: int, H: int, W: int, k: int, s: int, p: int, layout: str, dtype: str,
                           threads: int, deterministic: bool, index_dtype: Any = np.int64,
                           out: bool = False) -> Case:
    """``max_pool2d_with_indices_backward`` versus ``torch.ops.aten.max_pool2d_with_indices_backward``."""
    from .max_pool_indices import max_pool2d_with_indices, max_pool2d_with_indices_backward

    def make(nt: int) -> dict[str, Any]:
        rng, x4, x = _case_input((N, C, H, W), layout, dtype)
        y, ind = max_pool2d_with_indices(x, k, s, p, layout=layout, index_dtype=index_dtype)
        go = rng.standard_normal(y.shape, dtype=np.float32).astype(x.dtype)
        gx = np.empty_like(x) if out else None
        fns: dict[str, Any] = {
            "poolgrad": lambda: max_pool2d_with_indices_backward(go, x, ind, k, s, p, layout=layout, out=gx,
                                                                 deterministic=deterministic, num_threads=nt),
            "bytes": go.nbytes + ind.nbytes + x.nbytes,
            "arrays": {"x": x, "grad_output": go, "indices": ind},
        }
        if has_torch():
            import torch
            xt = _torch_in_layout(x4, layout, dtype)
            _, it = torch.nn.functional.max_pool2d(xt, k, s, p, return_indices=True)
            args = (_torch_grad(go, layout, dtype), xt, [k, k], [s, s], [p, p], [1, 1], False, it)
            op = torch.ops.aten.max_pool2d_with_indices_backward
            fns["torch"] = _torch_timer(out, xt, lambda: op(*args), lambda t: op.grad_input(*args, grad_input=t))
        return fns

    idx = "i32" if np.dtype(index_dtype) == np.int32 else ""
    return Case("max_pool2d_with_indices_backward", f"{N}x{C}x{H}x{W} k{k}s{s}p{p}", layout, dtype, threads,
                deterministic, make, extra=idx, out=out, params={"kind": "max", "k": k, "s": s, "p": p})


def adaptive_backward_case(N: int, C: int, H: int, W: int, out_hw: tuple[int, int], layout: str, dtype: str,
                           threads: int, deterministic: bool, out: bool = False) -> Case:
    """``adaptive_max_pool2d_backward`` versus ``torch.ops.aten.adaptive_max_pool2d_backward``."""
    from .adaptive import adaptive_max_pool2d, adaptive_max_pool2d_backward

    def make(nt: int) -> dict[str, Any]:
        rng, x4, x = _case_input((N, C, H, W), layout, dtype)
        y, ind = adaptive_max_pool2d(x, out_hw, layout=layout)
        go = rng.standard_normal(y.shape, dtype=np.float32).astype(x.dtype)
        gx = np.empty_like(x) if out else None
        fns: dict[str, Any] = {
            "poolgrad": lambda: adaptive_max_pool2d_backward(go, x, ind, layout=layout, out=gx,
                                                             deterministic=deterministic, num_threads=nt),
            "bytes": go.nbytes + ind.nbytes + x.nbytes,
            "arrays": {"x": x, "grad_output": go, "indices": ind},
        }
        if has_torch():
            import torch
            xt = _torch_in_layout(x4, layout, dtype)
            _, it = torch.nn.functional.adaptive_max_pool2d(xt, out_hw, return_indices=True)
            args = (_torch_grad(go, layout, dtype), xt, it)
            op = torch.ops.aten.adaptive_max_pool2d_backward
            fns["torch"] = _torch_timer(out, xt, lambda: op(*args), lambda t: op.grad_input(*args, grad_input=t))
        return fns

    return Case("adaptive_max_pool2d_backward", f"{N}x{C}x{H}x{W} -> {out_hw[0]}x{out_hw[1]}", layout, dtype,
                threads, deterministic, make, out=out, params={"kind": "adaptive", "out_hw": tuple(out_hw)})


def avg_backward_case(N: int, C: int, H: int, W: int, k: int, s: int, p: int, layout: str, dtype: str,
                      threads: int, deterministic: bool, out: bool = False) -> Case:
    """``avg_pool2d_backward`` versus ``torch.ops.aten.avg_pool2d_backward``."""
    from .avg_pool import avg_pool2d, avg_pool2d_backward

    def make(nt: int) -> dict[str, Any]:
        rng, x4, x = _case_input((N, C, H, W), layout, dtype)
        y = avg_pool2d(x, k, s, p, layout=layout)
        go = rng.standard_normal(y.shape, dtype=np.float32).astype(x.dtype)
        gx = np.empty_like(x) if out else None
        fns: dict[str, Any] = {
            "poolgrad": lambda: avg_pool2d_backward(go, x, k, s, p, layout=layout, deterministic=deterministic,
                                                    out=gx, num_threads=nt),
            "bytes": go.nbytes + x.nbytes,
            "arrays": {"x": x, "grad_output": go},
        }
        if has_torch():
            import torch
            xt = _torch_in_layout(x4, layout, dtype)
            args = (_torch_grad(go, layout, dtype), xt, [k, k], [s, s], [p, p], False, True, None)
            op = torch.ops.aten.avg_pool2d_backward
            fns["torch"] = _torch_timer(out, xt, lambda: op(*args), lambda t: op.grad_input(*args, grad_input=t))
        return fns

    return Case("avg_pool2d_backward", f"{N}x{C}x{H}x{W} k{k}s{s}p{p}", layout, dtype, threads, deterministic,
                make, out=out, params={"kind": "avg", "k": k, "s": s, "p": p})


def max_pool_grad_case(N: int, H: int, W: int, C: int, k: int, s: int, padding: str, layout: str, dtype: str,
                       threads: int, deterministic: bool, out: bool = False) -> Case:
    """TF-style ``max_pool_grad`` (argmax recomputed from x1).  PyTorch has no such operator; bench/suite.py
    times TensorFlow's ``MaxPoolGrad`` on the same arrays in a worker process."""
    from .tf_max_pool import max_pool, max_pool_grad

    ksize = [1, k, k, 1] if layout == "NHWC" else [1, 1, k, k]
    strides = [1, s, s, 1] if layout == "NHWC" else [1, 1, s, s]

    def make(nt: int) -> dict[str, Any]:
        rng = np.random.default_rng(0)
        xh = rng.standard_normal((N, H, W, C), dtype=np.float32)
        dt = np_dtype(dtype)
        x1 = (xh if layout == "NHWC" else np.ascontiguousarray(xh.transpose(0, 3, 1, 2))).astype(dt)
        x2 = max_pool(x1, ksize, strides, padding, data_format=layout)
        grad = rng.standard_normal(x2.shape, dtype=np.float32).astype(dt)
        gx = np.empty_like(x1) if out else None
        return {
            "poolgrad": lambda: max_pool_grad(x1, x2, grad, ksize, strides, padding, data_format=layout, out=gx,
                                              deterministic=deterministic, num_threads=nt),
            "bytes": x1.nbytes + grad.nbytes + x1.nbytes,
            "arrays": {"x1": x1, "x2": x2, "grad": grad},
        }

    return Case("max_pool_grad", f"{N}x{H}x{W}x{C} k{k}s{s} {padding}", layout, dtype, threads, deterministic,
                make, out=out, params={"kind": "tf_max", "ksize": ksize, "strides": strides, "padding": padding})


def elementwise_case(n: int, dtype: str, threads: int, out: bool = False) -> Case:
    """``max_pooling_grad`` versus ``np.where(x == y, dy, 0)`` and ``torch.where``."""
    from .elementwise import max_pooling_grad

    def make(nt: int) -> dict[str, Any]:
        rng = np.random.default_rng(0)
        dt = np_dtype(dtype)
        x = rng.integers(0, 4, size=n).astype(np.float32).astype(dt)
        y = rng.integers(0, 4, size=n).astype(np.float32).astype(dt)
        dy = rng.standard_normal(n, dtype=np.float32).astype(dt)
        zero16 = np.zeros((), dt)
        res = np.empty_like(dy)

        def numpy_out() -> None:
            np.copyto(res, np.where(x == y, dy, zero16))
        fns: dict[str, Any] = {"poolgrad": lambda: max_pooling_grad(dy, x, y, out=res if out else None,
                                                                    num_threads=nt),
                               "numpy": numpy_out if out else (lambda: np.where(x == y, dy, zero16)),
                               "bytes": 4 * dy.nbytes, "arrays": {"dy": dy, "x": x, "y": y}}
        if has_torch():
            import torch
            if dtype == "bf16":
                tx, ty, tdy = (torch.from_numpy(a.view(np.int16)).view(torch.bfloat16) for a in (x, y, dy))
            else:
                tx, ty, tdy = (torch.from_numpy(a) for a in (x, y, dy))
            zero = torch.zeros((), dtype=tdy.dtype)
            fns["torch"] = _torch_timer(out, tdy, lambda: torch.where(tx == ty, tdy, zero),
                                        lambda t: torch.where(tx == ty, tdy, zero, out=t))
        return fns

    size = f"{n >> 20}M" if n >= 1 << 20 else f"{n >> 10}K" if n >= 1 << 10 else str(n)
    return Case("max_pooling_grad", f"{size} elements", "-", dtype, threads, None, make, out=out)


def forward_case(op: str, N: int, C: int, H: int, W: int, k: int, s: int, p: int, layout: str, dtype: str,
                 threads: int) -> Case:
    """The forward companions: ``max_pool2d_with_indices`` versus ``torch.nn.functional.max_pool2d(...,
    return_indices=True)`` and ``avg_pool2d`` versus ``torch.nn.functional.avg_pool2d``.  Both libraries allocate
    their outputs (poolgrad's forwards take no ``out=``), with or without ``--out``."""
    from .avg_pool import avg_pool2d
    from .max_pool_indices import max_pool2d_with_indices

    def make(nt: int) -> dict[str, Any]:
        _, x4, x = _case_input((N, C, H, W), layout, dtype)
        if op == "max_pool2d_with_indices":
            y, ind = max_pool2d_with_indices(x, k, s, p, layout=layout)
            fns: dict[str, Any] = {
                "poolgrad": lambda: max_pool2d_with_indices(x, k, s, p, layout=layout, num_threads=nt),
                "bytes": x.nbytes + y.nbytes + ind.nbytes}
        else:
            y = avg_pool2d(x, k, s, p, layout=layout)
            fns = {"poolgrad": lambda: avg_pool2d(x, k, s, p, layout=layout, num_threads=nt),
                   "bytes": x.nbytes + y.nbytes}
        fns["arrays"] = {"x": x}
        if has_torch():
            import torch
            xt = _torch_in_layout(x4, layout, dtype)
            if op == "max_pool2d_with_indices":
                fns["torch"] = lambda: torch.nn.functional.max_pool2d(xt, k, s, p, return_indices=True)
            else:
                fns["torch"] = lambda: torch.nn.functional.avg_pool2d(xt, k, s, p)
        return fns

    return Case(op, f"{N}x{C}x{H}x{W} k{k}s{s}p{p}", layout, dtype, threads, None, make,
                params={"kind": "max" if op == "max_pool2d_with_indices" else "avg", "k": k, "s": s, "p": p})


def shapes(quick: bool) -> tuple[tuple[int, int, int, int], tuple[int, int, int, int]]:
    """(big batch of small images, batch 1 of big images), NCHW: the two regimes of the default workload."""
    return ((8, 64, 112, 112), (1, 3, 512, 512)) if quick else ((32, 64, 112, 112), (1, 3, 1024, 1024))


def default_cases(threads: Iterable[int] | None = None, quick: bool = False, out: bool = False) -> list[Case]:
    """The workload of ``python -m poolgrad``: the max-pooling backward in both layouts, float32 and bfloat16,
    both determinism modes, and one row each of every other operator, at 1 and all threads."""
    if threads is None:
        threads = sorted({1, resolve_num_threads(None)})
    cases = []
    big, few = shapes(quick)
    n, c, h, w = big
    for nt in threads:
        for layout in ("NCHW", "NHWC"):
            for dtype in ("f32", "bf16"):
                for det in (True, False):
                    cases.append(max_pool_backward_case(*big, 3, 2, 1, layout, dtype, nt, det, out=out))
            cases.append(max_pool_backward_case(*few, 3, 1, 1, layout, "f32", nt, True, out=out))
        cases.append(adaptive_backward_case(*big, (7, 7), "NCHW", "f32", nt, True, out=out))
        for layout in ("NCHW", "NHWC"):
            cases.append(avg_backward_case(*big, 3, 2, 1, layout, "f32", nt, True, out=out))
        cases.append(max_pool_grad_case(n, h, w, c, 3, 2, "SAME", "NHWC", "f32", nt, True, out=out))
        cases.append(elementwise_case((1 << 22) if quick else (1 << 24), "f32", nt, out=out))
        for op in ("max_pool2d_with_indices", "avg_pool2d"):
            cases.append(forward_case(op, *big, 3, 2, 1, "NHWC", "f32", nt))
    return cases


def main(argv: list[str] | None = None) -> int:
    """``python -m poolgrad``: the configuration, the self-check, then (unless ``--no-bench``) the benchmark."""
    import argparse
    from .config import show_config
    from .selfcheck import self_check
    parser = argparse.ArgumentParser(prog="python -m poolgrad", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="smaller workload (for smoke tests)")
    parser.add_argument("--reps", type=int, default=7, help="timed repetitions per row (default 7)")
    parser.add_argument("--threads", type=int, nargs="*", help="thread counts (default: 1 and all)")
    parser.add_argument("--out", action="store_true",
                        help="time the kernels alone: every library writes a preallocated output where it can")
    parser.add_argument("--no-bench", action="store_true", help="only run the self-check")
    args = parser.parse_args(argv)
    print("poolgrad configuration:")
    show_config()
    print("\nself-check against the NumPy reference:", flush=True)
    ok = self_check(progress=lambda m: print("  " + m, flush=True))
    if not ok:
        print("SELF-CHECK FAILED")
        return 1
    if args.no_bench:
        return 0
    print("\nbenchmark (medians of interleaved runs; ratios are PyTorch time / poolgrad time, same process and "
          "threads; % of copy is against the copy rate of the row's thread count):", flush=True)
    if not has_torch():
        print("  (PyTorch is not installed: no comparison column)")
    threads = args.threads or sorted({1, resolve_num_threads(None)})
    rows, _ = run_cases(default_cases(threads, args.quick, args.out), reps=args.reps,
                        progress=lambda m: print("  " + m, flush=True))
    print()
    print(format_table(rows))
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
