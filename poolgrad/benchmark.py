"""Timing machinery behind ``python -m poolgrad`` and ``bench/compare.py``.

Every case times poolgrad and, where installed, PyTorch (and TensorFlow for ``max_pool_grad``) on the same
arrays, in the same process, with the same thread count, each called the way users call it (the output is
allocated by the call), and reports achieved bandwidth as a fraction of the
copy bandwidth measured in the same run (``np.copyto`` of a large float32 array, read + write bytes).  Only
ratios measured in one run mean anything on a shared machine.
"""
from __future__ import annotations

import dataclasses
import importlib.util
import os
import statistics
import sys
import time
from typing import Any, Callable, Iterable

import numpy as np

from .config import resolve_num_threads

__all__ = ["Case", "copy_bandwidth", "median_time", "run_cases", "format_table", "default_cases", "has_torch"]


# "alloc": every library allocates its output per call, as users call it (the default).  "out": every library
# writes into one preallocated output (poolgrad's out=, PyTorch's *.grad_input / out= overloads), which times the
# kernels alone: in this sandbox first-touch page faults of fresh output memory do not scale with threads and
# can dominate a call.  TensorFlow has no out= form and always allocates.
OUTPUT_MODE = "alloc"

# Other implementations a case may time beside poolgrad: (key in the case's callables, name in the table).
COMPARATORS = [("torch", "PyTorch"), ("tf", "TensorFlow"), ("jax", "JAX"), ("numpy", "NumPy")]


def has_torch() -> bool:
    try:
        import torch  # noqa: F401
    except ImportError:
        return False
    return True


def has_jax() -> bool:
    return importlib.util.find_spec("jax") is not None


# the operators whose gradient JAX can compute (jax_worker)
JAX_OPS = ("max_pool2d_with_indices_backward", "avg_pool2d_backward", "max_pool_grad")


@dataclasses.dataclass
class Case:
    """One benchmark row: ``make()`` builds the inputs once and returns the callables to time."""

    op: str
    shape: str
    layout: str
    dtype: str
    threads: int
    deterministic: bool | None
    make: Callable[[int], dict[str, Any]]   # threads -> {"poolgrad": fn, "torch": fn|None, "tf": fn|None, "bytes": int}
    extra: str = ""


def copy_bandwidth(nbytes: int = 256 << 20, reps: int = 5) -> float:
    """Copy bandwidth in GB/s (bytes read + bytes written per second), median of ``reps`` ``np.copyto``."""
    a = np.ones(nbytes // 4, np.float32)
    b = np.empty_like(a)
    t = median_time(lambda: np.copyto(b, a), reps=reps, warmup=1)
    return 2 * a.nbytes / t / 1e9


def median_time(fn: Callable[[], Any], reps: int = 7, warmup: int = 3, max_seconds: float = 5.0) -> float:
    """Median wall time of ``fn()`` over ``reps`` runs (fewer if they exceed ``max_seconds`` in total), after
    ``warmup`` untimed runs: the first calls that touch freshly mapped output memory are much slower here,
    for every library alike."""
    for _ in range(warmup):
        fn()
    times: list[float] = []
    start = time.perf_counter()
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
        if time.perf_counter() - start > max_seconds and len(times) >= 3:
            break
    return statistics.median(times)


def run_cases(cases: Iterable[Case], reps: int = 7, progress: Callable[[str], None] | None = None,
              bandwidth: float | None = None) -> tuple[list[dict], float]:
    """Time every case; returns (rows, copy bandwidth GB/s)."""
    cases = list(cases)
    if bandwidth is None:
        bandwidth = copy_bandwidth()
        if progress:
            progress(f"copy bandwidth: {bandwidth:.1f} GB/s (np.copyto, read + write)")
    rows = []
    for i, case in enumerate(cases, 1):
        fns = case.make(case.threads)
        row = {"op": case.op, "shape": case.shape, "layout": case.layout, "dtype": case.dtype,
               "threads": case.threads, "deterministic": case.deterministic, "extra": case.extra,
               "bytes": fns["bytes"], "copy_gbs": bandwidth}
        row["poolgrad_s"] = median_time(fns["poolgrad"], reps)
        row["gbs"] = fns["bytes"] / row["poolgrad_s"] / 1e9
        row["frac_copy"] = row["gbs"] / bandwidth
        for other, _ in COMPARATORS:
            fn = fns.get(other)
            if fn is not None:
                row[f"{other}_s"] = median_time(fn, reps)
                row[f"vs_{other}"] = row[f"{other}_s"] / row["poolgrad_s"]
        rows.append(row)
        if progress:
            progress(f"[{i}/{len(cases)}] " + _row_text(row))
        del fns
    return rows, bandwidth


def _row_text(r: dict) -> str:
    det = {True: "det", False: "nondet", None: "-"}[r["deterministic"]]
    text = (f"{r['op']:<34} {r['shape']:<26} {r['layout']:<4} {r['dtype']:<4} {r['threads']:>2}t {det:<6} "
            f"{r['poolgrad_s'] * 1e3:9.2f} ms {r['gbs']:6.1f} GB/s {100 * r['frac_copy']:5.0f}%")
    for other, name in COMPARATORS:
        if f"vs_{other}" in r:
            text += f"  {r[f'vs_{other}']:6.2f}x vs {name}"
    return text


def format_table(rows: list[dict], bandwidth: float) -> str:
    """Markdown table of the rows: time, GB/s, % of the copy bandwidth, and each other library's time and
    speed-up (its time / poolgrad's time) where it was measured."""
    others = [(k, name) for k, name in COMPARATORS if any(f"{k}_s" in r for r in rows)]
    head = "| op | shape | layout | dtype | threads | mode | poolgrad ms | GB/s | % of copy |"
    for _, name in others:
        head += f" {name} ms | vs {name} |"
    lines = [f"copy bandwidth measured in this run: {bandwidth:.1f} GB/s", "", head,
             "|" + "---|" * (head.count("|") - 1)]
    for r in rows:
        det = {True: "det", False: "nondet", None: "-"}[r["deterministic"]]
        line = (f"| {r['op']} | {r['shape']}{(' ' + r['extra']) if r['extra'] else ''} | {r['layout']} | "
                f"{r['dtype']} | {r['threads']} | {det} | {r['poolgrad_s'] * 1e3:.2f} | {r['gbs']:.1f} | "
                f"{100 * r['frac_copy']:.0f}% |")
        for k, _ in others:
            line += (f" {r[f'{k}_s'] * 1e3:.2f} | {r[f'vs_{k}']:.2f}x |" if f"{k}_s" in r else " n/a | n/a |")
        lines.append(line)
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------------------------
# Case builders


def _np_dtype(name: str) -> np.dtype:
    from .dtypes import bfloat16
    return {"f32": np.dtype(np.float32), "f64": np.dtype(np.float64), "f16": np.dtype(np.float16),
            "bf16": bfloat16}[name]


def _torch_dtype(name: str):
    import torch
    return {"f32": torch.float32, "f64": torch.float64, "f16": torch.float16, "bf16": torch.bfloat16}[name]


def _torch_in_layout(arr_nchw: np.ndarray, layout: str, dtype: str):
    """A torch tensor (logical NCHW) with the memory format matching ``layout``."""
    import torch
    t = torch.from_numpy(arr_nchw.astype(np.float32)).to(_torch_dtype(dtype))
    if layout == "NHWC":
        t = t.contiguous(memory_format=torch.channels_last)
    return t


def _layout(a4: np.ndarray, layout: str) -> np.ndarray:
    return np.ascontiguousarray(a4.transpose(0, 2, 3, 1) if layout == "NHWC" else a4)


def _case_input(shape: tuple[int, ...], layout: str, dtype: str) -> tuple[np.random.Generator, np.ndarray, np.ndarray]:
    """(rng, x4 float32 logical NCHW, x in ``layout`` and ``dtype``), the same for every run of a case."""
    rng = np.random.default_rng(0)
    x4 = rng.standard_normal(shape, dtype=np.float32)
    return rng, x4, _layout(x4, layout).astype(_np_dtype(dtype))


def _out_like(x: np.ndarray) -> np.ndarray | None:
    """poolgrad's ``out=`` argument: a preallocated output in --out mode, else None (allocate per call)."""
    return np.empty_like(x) if OUTPUT_MODE == "out" else None


def _torch_timer(nt: int, like: Any, call: Callable[[], Any], call_out: Callable[[Any], Any]) -> Callable[[], None]:
    """A PyTorch call to time with ``nt`` threads: ``call()`` allocating its output, or in --out mode
    ``call_out(t)`` writing into one tensor ``t`` shaped like ``like``, allocated once here."""
    import torch
    tout = torch.empty_like(like) if OUTPUT_MODE == "out" else None

    def run() -> None:
        torch.set_num_threads(nt)
        if tout is None:
            call()
        else:
            call_out(tout)
    return run


def max_pool_backward_case(N: int, C: int, H: int, W: int, k: int, s: int, p: int, layout: str, dtype: str,
                           threads: int, deterministic: bool, index_dtype: Any = np.int64) -> Case:
    """``max_pool2d_with_indices_backward`` versus ``torch.ops.aten.max_pool2d_with_indices_backward``."""
    from .max_pool_indices import max_pool2d_with_indices, max_pool2d_with_indices_backward

    def make(nt: int) -> dict:
        rng, x4, x = _case_input((N, C, H, W), layout, dtype)
        y, ind = max_pool2d_with_indices(x, k, s, p, layout=layout, index_dtype=index_dtype)
        go = rng.standard_normal(y.shape, dtype=np.float32).astype(x.dtype)
        out = _out_like(x)
        fns: dict[str, Any] = {
            "poolgrad": lambda: max_pool2d_with_indices_backward(go, x, ind, k, s, p, layout=layout, out=out,
                                                                 deterministic=deterministic, num_threads=nt),
            "bytes": go.nbytes + ind.nbytes + x.nbytes,
        }
        if has_torch():
            import torch
            xt = _torch_in_layout(x4, layout, dtype)
            _, it = torch.nn.functional.max_pool2d(xt, k, s, p, return_indices=True)
            args = (_torch_grad(go, layout, dtype), xt, [k, k], [s, s], [p, p], [1, 1], False, it)
            op = torch.ops.aten.max_pool2d_with_indices_backward
            fns["torch"] = _torch_timer(nt, xt, lambda: op(*args), lambda t: op.grad_input(*args, grad_input=t))
        fns["jax_args"] = ("max", x, go, _window4(k, layout), _window4(s, layout), _pads4(p, layout))
        return fns

    idx = "i32" if np.dtype(index_dtype) == np.int32 else "i64"
    return Case("max_pool2d_with_indices_backward", f"{N}x{C}x{H}x{W} k{k}s{s}p{p}", layout, dtype, threads,
                deterministic, make, extra=idx if idx == "i32" else "")


def adaptive_backward_case(N: int, C: int, H: int, W: int, out_hw: tuple[int, int], layout: str, dtype: str,
                           threads: int, deterministic: bool) -> Case:
    """``adaptive_max_pool2d_backward`` versus ``torch.ops.aten.adaptive_max_pool2d_backward``."""
    from .adaptive import adaptive_max_pool2d, adaptive_max_pool2d_backward

    def make(nt: int) -> dict:
        rng, x4, x = _case_input((N, C, H, W), layout, dtype)
        y, ind = adaptive_max_pool2d(x, out_hw, layout=layout)
        go = rng.standard_normal(y.shape, dtype=np.float32).astype(x.dtype)
        out = _out_like(x)
        fns: dict[str, Any] = {
            "poolgrad": lambda: adaptive_max_pool2d_backward(go, x, ind, layout=layout, out=out,
                                                             deterministic=deterministic, num_threads=nt),
            "bytes": go.nbytes + ind.nbytes + x.nbytes,
        }
        if has_torch():
            import torch
            xt = _torch_in_layout(x4, layout, dtype)
            _, it = torch.nn.functional.adaptive_max_pool2d(xt, out_hw, return_indices=True)
            args = (_torch_grad(go, layout, dtype), xt, it)
            op = torch.ops.aten.adaptive_max_pool2d_backward
            fns["torch"] = _torch_timer(nt, xt, lambda: op(*args), lambda t: op.grad_input(*args, grad_input=t))
        return fns

    return Case("adaptive_max_pool2d_backward", f"{N}x{C}x{H}x{W} -> {out_hw[0]}x{out_hw[1]}", layout, dtype,
                threads, deterministic, make)


def _torch_grad(go: np.ndarray, layout: str, dtype: str):
    """A poolgrad-layout gradient array as a logical-NCHW torch tensor (bfloat16 through its bits)."""
    import torch
    if dtype == "bf16":
        t = torch.from_numpy(np.ascontiguousarray(go).view(np.int16)).view(torch.bfloat16)
    else:
        t = torch.from_numpy(np.ascontiguousarray(go))
    return t.permute(0, 3, 1, 2) if layout == "NHWC" else t


def avg_backward_case(N: int, C: int, H: int, W: int, k: int, s: int, p: int, layout: str, dtype: str,
                      threads: int, deterministic: bool) -> Case:
    """``avg_pool2d_backward`` versus ``torch.ops.aten.avg_pool2d_backward``."""
    from .avg_pool import avg_pool2d, avg_pool2d_backward

    def make(nt: int) -> dict:
        rng, x4, x = _case_input((N, C, H, W), layout, dtype)
        y = avg_pool2d(x, k, s, p, layout=layout)
        go = rng.standard_normal(y.shape, dtype=np.float32).astype(x.dtype)
        out = _out_like(x)
        fns: dict[str, Any] = {
            "poolgrad": lambda: avg_pool2d_backward(go, x, k, s, p, layout=layout, deterministic=deterministic,
                                                    out=out, num_threads=nt),
            "bytes": go.nbytes + x.nbytes,
        }
        if has_torch():
            import torch
            xt = _torch_in_layout(x4, layout, dtype)
            args = (_torch_grad(go, layout, dtype), xt, [k, k], [s, s], [p, p], False, True, None)
            op = torch.ops.aten.avg_pool2d_backward
            fns["torch"] = _torch_timer(nt, xt, lambda: op(*args), lambda t: op.grad_input(*args, grad_input=t))
        fns["jax_args"] = ("avg", x, go, _window4(k, layout), _window4(s, layout), _pads4(p, layout))
        return fns

    return Case("avg_pool2d_backward", f"{N}x{C}x{H}x{W} k{k}s{s}p{p}", layout, dtype, threads, deterministic,
                make)


def max_pool_grad_case(N: int, H: int, W: int, C: int, k: int, s: int, padding: str, layout: str, dtype: str,
                       threads: int, deterministic: bool) -> Case:
    """TF-style ``max_pool_grad`` (argmax recomputed from x1); TensorFlow's ``MaxPoolGrad`` is timed by
    :func:`tf_worker` in a separate process (NHWC only: TensorFlow's CPU kernel has no NCHW)."""
    from .tf_max_pool import max_pool, max_pool_grad

    ksize = [1, k, k, 1] if layout == "NHWC" else [1, 1, k, k]
    strides = [1, s, s, 1] if layout == "NHWC" else [1, 1, s, s]

    def make(nt: int) -> dict:
        rng = np.random.default_rng(0)
        xh = rng.standard_normal((N, H, W, C), dtype=np.float32)
        dt = _np_dtype(dtype)
        x1 = (xh if layout == "NHWC" else np.ascontiguousarray(xh.transpose(0, 3, 1, 2))).astype(dt)
        x2 = max_pool(x1, ksize, strides, padding, data_format=layout)
        grad = rng.standard_normal(x2.shape, dtype=np.float32).astype(dt)
        out = _out_like(x1)
        return {
            "poolgrad": lambda: max_pool_grad(x1, x2, grad, ksize, strides, padding, data_format=layout, out=out,
                                              deterministic=deterministic, num_threads=nt),
            "bytes": x1.nbytes + grad.nbytes + x1.nbytes,
            "tf_args": (x1, x2, grad, ksize, strides, padding) if layout == "NHWC" else None,
            "jax_args": ("max", x1, grad, tuple(ksize), tuple(strides), padding),
        }

    return Case("max_pool_grad", f"{N}x{H}x{W}x{C} k{k}s{s} {padding}", layout, dtype, threads, deterministic,
                make)


def _case_key(c: Case | dict) -> str:
    get = (lambda k: c[k]) if isinstance(c, dict) else (lambda k: getattr(c, k))
    return "|".join(str(get(k)) for k in ("op", "shape", "layout", "dtype", "threads", "deterministic", "extra"))


def tf_worker(threads: int, ops: Iterable[str] | None, quick: bool, reps: int) -> int:
    """Time ``tf.raw_ops.MaxPoolGrad`` on the arrays of the ``max_pool_grad`` cases for one thread count and
    print one JSON object {case key: seconds}.  TensorFlow's thread pools are sized when it starts, hence one
    process per thread count."""
    import json
    import tensorflow as tf
    tf.config.threading.set_intra_op_parallelism_threads(threads)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    times = {}
    for case in full_cases([threads], ["max_pool_grad"], quick):
        args = case.make(threads).get("tf_args")
        if args is None:
            continue
        x1, x2, grad, ksize, strides, padding = (tf.constant(a) if isinstance(a, np.ndarray) else a for a in args)
        fn = lambda: tf.raw_ops.MaxPoolGrad(orig_input=x1, orig_output=x2, grad=grad, ksize=ksize,  # noqa: E731
                                            strides=strides, padding=padding, data_format="NHWC").numpy()
        times[_case_key(case)] = median_time(fn, reps)
    print("TFTIMES " + json.dumps(times), flush=True)
    return 0


def _window4(v: int, layout: str) -> tuple[int, ...]:
    return (1, v, v, 1) if layout == "NHWC" else (1, 1, v, v)


def _pads4(p: int, layout: str) -> tuple[tuple[int, int], ...]:
    return ((0, 0), (p, p), (p, p), (0, 0)) if layout == "NHWC" else ((0, 0), (0, 0), (p, p), (p, p))


def jax_worker(threads: int, ops: Iterable[str] | None, quick: bool, reps: int) -> int:
    """Time JAX's gradients (``jax.vjp`` of ``lax.reduce_window``, jit-compiled: a ``select_and_scatter_add``
    that recomputes the argmax for max pooling, a padded window sum for average pooling) on the arrays of the
    matching cases, pinned to ``threads`` cores (XLA sizes its pools from the cores it may use), and print one
    JSON object {case key: seconds}.  JAX has no index-based max-pooling backward: its time on the
    ``max_pool2d_with_indices_backward`` rows is the gradient a JAX user would compute for that pooling."""
    import json
    os.sched_setaffinity(0, set(sorted(os.sched_getaffinity(0))[:threads]))
    import jax
    import jax.numpy as jnp
    from jax import lax
    jax.config.update("jax_platforms", "cpu")
    times = {}
    for case in full_cases([threads], ops, quick):
        if case.dtype not in ("f32", "f64") or case.op not in JAX_OPS:
            continue
        fns = case.make(threads)
        kind, x, g, win, strides, pad = fns["jax_args"]
        if kind == "max":
            def f(v, win=win, strides=strides, pad=pad):
                return lax.reduce_window(v, -jnp.inf, lax.max, win, strides, pad)
        else:
            count = float(np.prod(win))

            def f(v, win=win, strides=strides, pad=pad, count=count):
                return lax.reduce_window(v, 0.0, lax.add, win, strides, pad) / count
        grad = jax.jit(lambda v, gv, f=f: jax.vjp(f, v)[1](gv)[0])
        xj, gj = jnp.asarray(x), jnp.asarray(g)
        if grad(xj, gj).shape != x.shape:
            continue
        times[_case_key(case)] = median_time(lambda: grad(xj, gj).block_until_ready(), reps)
        del fns
    print("JAXTIMES " + json.dumps(times), flush=True)
    return 0


def merge_worker_times(rows: list[dict], threads: Iterable[int], ops: Iterable[str] | None, quick: bool,
                       reps: int, command: list[str], worker: str = "tf") -> None:
    """Run :func:`tf_worker` (``worker="tf"``) or :func:`jax_worker` (``"jax"``) once per thread count
    (``command + ['--tf-worker', n]`` / ``['--jax-worker', n]``) and add that library's times and speed ratios
    to the matching rows."""
    import json
    import subprocess
    tag, name = {"tf": ("TFTIMES ", "TensorFlow"), "jax": ("JAXTIMES ", "JAX")}[worker]
    for nt in threads:
        cmd = command + [f"--{worker}-worker", str(nt), "--reps", str(reps)] + (["--quick"] if quick else [])
        if ops:
            cmd += ["--ops", *ops]
        res = subprocess.run(cmd, capture_output=True, text=True)
        lines = [ln for ln in res.stdout.splitlines() if ln.startswith(tag)]
        if res.returncode != 0 or not lines:
            print(f"  ({name} worker for {nt} thread(s) failed: {res.stderr.strip()[-300:]})")
            continue
        times = json.loads(lines[-1][len(tag):])
        for row in rows:
            key = _case_key(row)
            if key in times:
                row[f"{worker}_s"] = times[key]
                row[f"vs_{worker}"] = times[key] / row["poolgrad_s"]


CASE_BUILDERS: dict[str, Callable[..., list[Case]]] = {}


def full_cases(threads: Iterable[int], ops: Iterable[str] | None = None, quick: bool = False) -> list[Case]:
    """The comparison suite of ``bench/compare.py`` (SPEC section 2): both layouts, float32 and 16-bit types,
    1 and all threads, both modes, big batch of small images and batch 1 of big images, overlapping and
    non-overlapping windows."""
    threads = list(threads)
    cases: list[Case] = []
    for name, builder in CASE_BUILDERS.items():
        if ops is None or name in ops:
            cases += builder(threads, quick)
    return cases


def _shapes(quick: bool) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(big batch of small images, batch 1 of big images), NCHW: the two regimes of SPEC section 2."""
    return ((8, 64, 112, 112), (1, 3, 512, 512)) if quick else ((32, 64, 112, 112), (1, 3, 1024, 1024))


def _max_pool_suite(threads: list[int], quick: bool) -> list[Case]:
    big, few = _shapes(quick)
    cases = []
    for nt in threads:
        for layout in ("NCHW", "NHWC"):
            for det in (True, False):
                cases.append(max_pool_backward_case(*big, 3, 2, 1, layout, "f32", nt, det))
            cases.append(max_pool_backward_case(*big, 3, 2, 1, layout, "f32", nt, True, np.int32))
            cases.append(max_pool_backward_case(*big, 2, 2, 0, layout, "f32", nt, True))
            for dtype in ("bf16", "f16"):
                cases.append(max_pool_backward_case(*big, 3, 2, 1, layout, dtype, nt, True))
            for det in (True, False):
                cases.append(max_pool_backward_case(*few, 3, 1, 1, layout, "f32", nt, det))
    return cases


def _adaptive_suite(threads: list[int], quick: bool) -> list[Case]:
    big = _shapes(quick)[0]
    cases = []
    for nt in threads:
        for layout in ("NCHW", "NHWC"):
            for out_hw in ((7, 7), (13, 13)):
                for det in (True, False):
                    cases.append(adaptive_backward_case(*big, out_hw, layout, "f32", nt, det))
            cases.append(adaptive_backward_case(*big, (7, 7), layout, "bf16", nt, True))
    return cases


def _avg_suite(threads: list[int], quick: bool) -> list[Case]:
    big, few = _shapes(quick)
    cases = []
    for nt in threads:
        for layout in ("NCHW", "NHWC"):
            for det in (True, False):
                cases.append(avg_backward_case(*big, 3, 2, 1, layout, "f32", nt, det))
            cases.append(avg_backward_case(*big, 2, 2, 0, layout, "f32", nt, True))
            cases.append(avg_backward_case(*big, 3, 2, 1, layout, "bf16", nt, True))
            cases.append(avg_backward_case(*few, 3, 1, 1, layout, "f32", nt, True))
    return cases


def _tf_suite(threads: list[int], quick: bool) -> list[Case]:
    big = (8, 112, 112, 64) if quick else (32, 112, 112, 64)
    cases = []
    for nt in threads:
        for det in (True, False):
            cases.append(max_pool_grad_case(*big, 3, 2, "SAME", "NHWC", "f32", nt, det))
        cases.append(max_pool_grad_case(*big, 2, 2, "VALID", "NHWC", "f32", nt, True))
        cases.append(max_pool_grad_case(*big, 3, 2, "SAME", "NHWC", "bf16", nt, True))
        cases.append(max_pool_grad_case(*big, 3, 2, "SAME", "NCHW", "f32", nt, True))
        cases.append(max_pool_grad_case(1, 1024, 1024, 3, 3, 1, "SAME", "NHWC", "f32", nt, True))
    return cases


def _elementwise_suite(threads: list[int], quick: bool) -> list[Case]:
    n = (1 << 24) if quick else (1 << 26)
    cases = []
    for nt in threads:
        for dtype in ("f32", "bf16"):
            cases.append(elementwise_case(n, dtype, nt))
    return cases


def elementwise_case(n: int, dtype: str, threads: int) -> Case:
    """``max_pooling_grad`` versus ``np.where(x == y, dy, 0)`` and ``torch.where``."""
    from .elementwise import max_pooling_grad

    def make(nt: int) -> dict:
        rng = np.random.default_rng(0)
        dt = _np_dtype(dtype)
        x = rng.integers(0, 4, size=n).astype(np.float32).astype(dt)
        y = rng.integers(0, 4, size=n).astype(np.float32).astype(dt)
        dy = rng.standard_normal(n, dtype=np.float32).astype(dt)
        zero16 = np.zeros((), dt)
        out = _out_like(dy)
        fns: dict[str, Any] = {"poolgrad": lambda: max_pooling_grad(dy, x, y, out=out, num_threads=nt),
                               "numpy": lambda: np.where(x == y, dy, zero16),
                               "bytes": 4 * dy.nbytes}
        if has_torch():
            import torch
            if dtype == "bf16":
                tx, ty, tdy = (torch.from_numpy(a.view(np.int16)).view(torch.bfloat16) for a in (x, y, dy))
            else:
                tx, ty, tdy = (torch.from_numpy(a) for a in (x, y, dy))
            zero = torch.zeros((), dtype=tdy.dtype)
            fns["torch"] = _torch_timer(nt, tdy, lambda: torch.where(tx == ty, tdy, zero),
                                        lambda t: torch.where(tx == ty, tdy, zero, out=t))
        return fns

    size = f"{n >> 20}M" if n >= 1 << 20 else f"{n >> 10}K" if n >= 1 << 10 else str(n)
    return Case("max_pooling_grad", f"{size} elements", "-", dtype, threads, None, make)


def forward_case(op: str, N: int, C: int, H: int, W: int, k: int, s: int, p: int, layout: str, dtype: str,
                 threads: int) -> Case:
    """The forward companions: ``max_pool2d_with_indices`` versus ``torch.nn.functional.max_pool2d(...,
    return_indices=True)`` and ``avg_pool2d`` versus ``torch.nn.functional.avg_pool2d`` (both allocate their
    outputs in either mode: the forwards take no ``out=``)."""
    from .avg_pool import avg_pool2d
    from .max_pool_indices import max_pool2d_with_indices

    def make(nt: int) -> dict:
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
        if has_torch():
            import torch
            xt = _torch_in_layout(x4, layout, dtype)
            if op == "max_pool2d_with_indices":
                call = lambda: torch.nn.functional.max_pool2d(xt, k, s, p, return_indices=True)  # noqa: E731
            else:
                call = lambda: torch.nn.functional.avg_pool2d(xt, k, s, p)  # noqa: E731

            def run() -> None:
                torch.set_num_threads(nt)
                call()
            fns["torch"] = run
        return fns

    return Case(op, f"{N}x{C}x{H}x{W} k{k}s{s}p{p}", layout, dtype, threads, None, make)


def _forward_suite(threads: list[int], quick: bool) -> list[Case]:
    big, few = _shapes(quick)
    return [forward_case(op, *shape, 3, s, 1, layout, "f32", nt)
            for nt in threads for op in ("max_pool2d_with_indices", "avg_pool2d")
            for layout in ("NCHW", "NHWC") for shape, s in ((big, 2), (few, 1))]


CASE_BUILDERS["max_pool2d_with_indices_backward"] = _max_pool_suite
CASE_BUILDERS["adaptive_max_pool2d_backward"] = _adaptive_suite
CASE_BUILDERS["avg_pool2d_backward"] = _avg_suite
CASE_BUILDERS["max_pool_grad"] = _tf_suite
CASE_BUILDERS["max_pooling_grad"] = _elementwise_suite
CASE_BUILDERS["forwards"] = _forward_suite


def default_cases(threads: Iterable[int] | None = None, quick: bool = False) -> list[Case]:
    """The built-in workload of ``python -m poolgrad``."""
    if threads is None:
        threads = sorted({1, resolve_num_threads(None)})
    cases = []
    big, few = _shapes(quick)
    n, c, h, w = big
    for nt in threads:
        for layout in ("NCHW", "NHWC"):
            for dtype in ("f32", "bf16"):
                for det in (True, False):
                    cases.append(max_pool_backward_case(*big, 3, 2, 1, layout, dtype, nt, det))
            cases.append(max_pool_backward_case(*few, 3, 1, 1, layout, "f32", nt, True))
        # one row of every other operator (bench/compare.py has the full suite)
        cases.append(adaptive_backward_case(*big, (7, 7), "NCHW", "f32", nt, True))
        for layout in ("NCHW", "NHWC"):
            cases.append(avg_backward_case(*big, 3, 2, 1, layout, "f32", nt, True))
        cases.append(max_pool_grad_case(n, h, w, c, 3, 2, "SAME", "NHWC", "f32", nt, True))
        cases.append(elementwise_case((1 << 22) if quick else (1 << 24), "f32", nt))
        for op in ("max_pool2d_with_indices", "avg_pool2d"):
            cases.append(forward_case(op, *big, 3, 2, 1, "NHWC", "f32", nt))
    return cases


def main(argv: list[str] | None = None) -> int:
    from .selfcheck import self_check
    import argparse
    parser = argparse.ArgumentParser(prog="python -m poolgrad", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="smaller workload (for smoke tests)")
    parser.add_argument("--reps", type=int, default=7)
    parser.add_argument("--threads", type=int, nargs="*", help="thread counts (default: 1 and all)")
    parser.add_argument("--no-bench", action="store_true", help="only run the self-check")
    parser.add_argument("--tf-worker", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--ops", nargs="*", help=argparse.SUPPRESS)     # passed to the worker by merge_worker_times
    args = parser.parse_args(argv)
    if args.tf_worker is not None:
        return tf_worker(args.tf_worker, ["max_pool_grad"], args.quick, args.reps)
    from .config import show_config
    print("poolgrad configuration:")
    show_config()
    print("\nself-check against the NumPy reference:", flush=True)
    ok = self_check(progress=lambda m: print("  " + m, flush=True))
    if not ok:
        print("SELF-CHECK FAILED")
        return 1
    if args.no_bench:
        return 0
    print("\nbenchmark (medians; ratios are PyTorch time / poolgrad time, same process and threads):",
          flush=True)
    if not has_torch():
        print("  (PyTorch is not installed: no comparison column)")
    threads = args.threads or sorted({1, resolve_num_threads(None)})
    rows, bw = run_cases(default_cases(threads, args.quick), reps=args.reps,
                         progress=lambda m: print("  " + m, flush=True))
    if importlib.util.find_spec("tensorflow") is not None:
        print("  TensorFlow's MaxPoolGrad, one worker process per thread count ...", flush=True)
        merge_worker_times(rows, threads, ["max_pool_grad"], args.quick, args.reps, [sys.executable, "-m", "poolgrad"])
    print()
    print(format_table(rows, bw))
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
