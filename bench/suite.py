"""The comparison suite of ``bench/compare.py`` and its TensorFlow / JAX worker processes.

The cases are built with the case builders of ``poolgrad.benchmark`` (the same ones ``python -m poolgrad``
uses).  TensorFlow's intra-op thread count is fixed when TensorFlow starts, so TensorFlow runs in one worker process
per thread count; JAX runs the same way, its process pinned to as many cores as the thread count where the OS
lets a process pin itself (Linux).  Each worker rebuilds the same arrays (same seeds), times its library and
prints one JSON line {case key: seconds} that :func:`merge_worker_times` adds to the rows.
"""
from __future__ import annotations

import importlib.util
import json
import os
import subprocess
from typing import Any, Callable, Iterable

import numpy as np

from poolgrad import benchmark
from poolgrad.benchmark import (Case, adaptive_backward_case, avg_backward_case, elementwise_case, forward_case,
                                max_pool_backward_case, max_pool_grad_case, median_time, shapes)

# Every library the comparison tables can show: poolgrad.benchmark's in-process ones and the workers'.
COMPARATORS = benchmark.COMPARATORS + [("tf", "TensorFlow"), ("jax", "JAX")]

# the operators whose gradient JAX can compute (jax_worker)
JAX_OPS = ("max_pool2d_with_indices_backward", "avg_pool2d_backward", "max_pool_grad")


def has_jax() -> bool:
    """True when JAX is installed (its worker then runs unless ``--no-jax``)."""
    return importlib.util.find_spec("jax") is not None


def has_tf() -> bool:
    """True when TensorFlow is installed (its worker then times ``max_pool_grad``)."""
    return importlib.util.find_spec("tensorflow") is not None


def _max_pool_suite(threads: list[int], quick: bool, out: bool) -> list[Case]:
    big, few = shapes(quick)
    cases = []
    for nt in threads:
        for layout in ("NCHW", "NHWC"):
            for det in (True, False):
                cases.append(max_pool_backward_case(*big, 3, 2, 1, layout, "f32", nt, det, out=out))
            cases.append(max_pool_backward_case(*big, 3, 2, 1, layout, "f32", nt, True, np.int32, out=out))
            cases.append(max_pool_backward_case(*big, 2, 2, 0, layout, "f32", nt, True, out=out))
            for dtype in ("bf16", "f16"):
                cases.append(max_pool_backward_case(*big, 3, 2, 1, layout, dtype, nt, True, out=out))
            for det in (True, False):
                cases.append(max_pool_backward_case(*few, 3, 1, 1, layout, "f32", nt, det, out=out))
    return cases


def _adaptive_suite(threads: list[int], quick: bool, out: bool) -> list[Case]:
    big = shapes(quick)[0]
    cases = []
    for nt in threads:
        for layout in ("NCHW", "NHWC"):
            for out_hw in ((7, 7), (13, 13)):
                for det in (True, False):
                    cases.append(adaptive_backward_case(*big, out_hw, layout, "f32", nt, det, out=out))
            cases.append(adaptive_backward_case(*big, (7, 7), layout, "bf16", nt, True, out=out))
    return cases


def _avg_suite(threads: list[int], quick: bool, out: bool) -> list[Case]:
    big, few = shapes(quick)
    cases = []
    for nt in threads:
        for layout in ("NCHW", "NHWC"):
            for det in (True, False):
                cases.append(avg_backward_case(*big, 3, 2, 1, layout, "f32", nt, det, out=out))
            cases.append(avg_backward_case(*big, 2, 2, 0, layout, "f32", nt, True, out=out))
            cases.append(avg_backward_case(*big, 3, 2, 1, layout, "bf16", nt, True, out=out))
            cases.append(avg_backward_case(*few, 3, 1, 1, layout, "f32", nt, True, out=out))
    return cases


def _tf_suite(threads: list[int], quick: bool, out: bool) -> list[Case]:
    big = (8, 112, 112, 64) if quick else (32, 112, 112, 64)
    cases = []
    for nt in threads:
        for det in (True, False):
            cases.append(max_pool_grad_case(*big, 3, 2, "SAME", "NHWC", "f32", nt, det, out=out))
        cases.append(max_pool_grad_case(*big, 2, 2, "VALID", "NHWC", "f32", nt, True, out=out))
        cases.append(max_pool_grad_case(*big, 3, 2, "SAME", "NHWC", "bf16", nt, True, out=out))
        cases.append(max_pool_grad_case(*big, 3, 2, "SAME", "NCHW", "f32", nt, True, out=out))
        cases.append(max_pool_grad_case(1, 1024, 1024, 3, 3, 1, "SAME", "NHWC", "f32", nt, True, out=out))
    return cases


def _elementwise_suite(threads: list[int], quick: bool, out: bool) -> list[Case]:
    n = (1 << 24) if quick else (1 << 26)
    return [elementwise_case(n, dtype, nt, out=out) for nt in threads for dtype in ("f32", "bf16")]


def _forward_suite(threads: list[int], quick: bool, out: bool) -> list[Case]:
    big, few = shapes(quick)
    return [forward_case(op, *shape, 3, s, 1, layout, "f32", nt)
            for nt in threads for op in ("max_pool2d_with_indices", "avg_pool2d")
            for layout in ("NCHW", "NHWC") for shape, s in ((big, 2), (few, 1))]


CASE_BUILDERS: dict[str, Callable[[list[int], bool, bool], list[Case]]] = {
    "max_pool2d_with_indices_backward": _max_pool_suite,
    "adaptive_max_pool2d_backward": _adaptive_suite,
    "avg_pool2d_backward": _avg_suite,
    "max_pool_grad": _tf_suite,
    "max_pooling_grad": _elementwise_suite,
    "forwards": _forward_suite,
}


def full_cases(threads: Iterable[int], ops: Iterable[str] | None = None, quick: bool = False,
               out: bool = False) -> list[Case]:
    """The comparison suite (SPEC section 2): both layouts, float32 and 16-bit types, 1 and all threads, both
    modes, big batch of small images and batch 1 of big images, overlapping and non-overlapping windows.
    ``ops``: names of :data:`CASE_BUILDERS` (all when None); an unknown name is an error."""
    threads = list(threads)
    ops = list(ops) if ops is not None else None
    unknown = sorted(set(ops or ()) - set(CASE_BUILDERS))
    if unknown:
        raise ValueError(f"unknown operator(s) {unknown}; expected some of {list(CASE_BUILDERS)}")
    cases: list[Case] = []
    for name, builder in CASE_BUILDERS.items():
        if ops is None or name in ops:
            cases += builder(threads, quick, out)
    return cases


def case_key(c: Case | dict) -> str:
    """The key that matches a worker's time to its row."""
    get: Callable[[str], Any] = (lambda k: c[k]) if isinstance(c, dict) else (lambda k: getattr(c, k))
    return "|".join(str(get(k)) for k in ("op", "shape", "layout", "dtype", "threads", "deterministic", "extra"))


def tf_worker(threads: int, ops: Iterable[str] | None, quick: bool, reps: int) -> int:
    """Time ``tf.raw_ops.MaxPoolGrad`` on the arrays of the ``max_pool_grad`` cases (NHWC only: TensorFlow's CPU
    kernel has no NCHW) for one thread count and print ``TFTIMES {case key: seconds}``."""
    import tensorflow as tf
    tf.config.threading.set_intra_op_parallelism_threads(threads)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    times = {}
    for case in full_cases([threads], [o for o in (ops or ["max_pool_grad"]) if o == "max_pool_grad"], quick):
        if case.layout != "NHWC":
            continue
        a = case.make(threads)["arrays"]
        x1, x2, grad = (tf.constant(a[k]) for k in ("x1", "x2", "grad"))
        prm = case.params

        def fn(x1: Any = x1, x2: Any = x2, grad: Any = grad, prm: dict = prm) -> Any:
            return tf.raw_ops.MaxPoolGrad(orig_input=x1, orig_output=x2, grad=grad, ksize=prm["ksize"],
                                          strides=prm["strides"], padding=prm["padding"],
                                          data_format="NHWC").numpy()
        times[case_key(case)] = median_time(fn, reps)
    print("TFTIMES " + json.dumps(times), flush=True)
    return 0


def _jax_window(case: Case) -> tuple[str, tuple, tuple, Any] | None:
    """(kind, window, strides, padding) of ``lax.reduce_window`` for a case, None if JAX has no counterpart
    (adaptive pooling, the forwards, the element-wise op)."""
    prm, lay = case.params, case.layout
    if case.op == "max_pool_grad":
        return ("max", tuple(prm["ksize"]), tuple(prm["strides"]), prm["padding"])
    if case.op not in JAX_OPS:
        return None
    k, s, p = prm["k"], prm["s"], prm["p"]
    win = (1, k, k, 1) if lay == "NHWC" else (1, 1, k, k)
    strides = (1, s, s, 1) if lay == "NHWC" else (1, 1, s, s)
    pads = ((0, 0), (p, p), (p, p), (0, 0)) if lay == "NHWC" else ((0, 0), (0, 0), (p, p), (p, p))
    return (prm["kind"], win, strides, pads)


def jax_worker(threads: int, ops: Iterable[str] | None, quick: bool, reps: int) -> int:
    """Time JAX's gradients (``jax.vjp`` of ``lax.reduce_window``, jit-compiled: a ``select_and_scatter_add``
    that recomputes the argmax for max pooling, a padded window sum for average pooling) on the arrays of the
    matching float cases and print ``JAXTIMES {case key: seconds}``.  XLA sizes its thread pools from the cores
    the process may use, so the process pins itself to ``threads`` cores where the OS allows it (Linux); elsewhere
    it says so on stderr and runs unpinned.  JAX has no index-based max-pooling backward: its time on the
    ``max_pool2d_with_indices_backward`` rows is the gradient a JAX user would compute for that pooling."""
    import sys
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, set(sorted(os.sched_getaffinity(0))[:threads]))
    else:
        print(f"JAX worker: this OS cannot pin a process to cores; JAX runs unpinned for {threads} thread(s)",
              file=sys.stderr)
    import jax
    import jax.numpy as jnp
    from jax import lax
    jax.config.update("jax_platforms", "cpu")
    times = {}
    for case in full_cases([threads], [o for o in (ops or JAX_OPS) if o in JAX_OPS], quick):
        spec = _jax_window(case)
        if case.dtype not in ("f32", "f64") or spec is None:
            continue
        kind, win, strides, pad = spec
        a = case.make(threads)["arrays"]
        x, g = (a["x1"], a["grad"]) if case.op == "max_pool_grad" else (a["x"], a["grad_output"])
        if kind == "max":
            def f(v: Any, win: tuple = win, strides: tuple = strides, pad: Any = pad) -> Any:
                return lax.reduce_window(v, -jnp.inf, lax.max, win, strides, pad)
        else:
            count = float(np.prod(win))

            def f(v: Any, win: tuple = win, strides: tuple = strides, pad: Any = pad, count: float = count) -> Any:
                return lax.reduce_window(v, 0.0, lax.add, win, strides, pad) / count
        grad = jax.jit(lambda v, gv, f=f: jax.vjp(f, v)[1](gv)[0])
        xj, gj = jnp.asarray(x), jnp.asarray(g)
        if grad(xj, gj).shape != x.shape:
            continue
        times[case_key(case)] = median_time(lambda: grad(xj, gj).block_until_ready(), reps)
    print("JAXTIMES " + json.dumps(times), flush=True)
    return 0


def merge_worker_times(rows: list[dict], threads: Iterable[int], ops: Iterable[str] | None, quick: bool,
                       reps: int, command: list[str], worker: str = "tf") -> None:
    """Run :func:`tf_worker` (``worker="tf"``) or :func:`jax_worker` (``"jax"``) once per thread count
    (``command + ['--tf-worker', n]`` / ``['--jax-worker', n]``) and add that library's times and speed ratios
    to the matching rows."""
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
            key = case_key(row)
            if key in times:
                row[f"{worker}_s"] = times[key]
                row[f"vs_{worker}"] = times[key] / row["poolgrad_s"]
