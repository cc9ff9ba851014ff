"""Timing machinery behind ``python -m poolgrad`` and ``bench/compare.py``.

Every case times poolgrad and, where installed, PyTorch (and TensorFlow for ``max_pool_grad``) on the same
arrays, in the same process, with the same thread count, each called the way users call it (the output is
allocated by the call), and reports achieved bandwidth as a fraction of the
copy bandwidth measured in the same run (``np.copyto`` of a large float32 array, read + write bytes).  Only
ratios measured in one run mean anything on a shared machine.
"""
from __future__ import annotations

import dataclasses
import statistics
import sys
import time
from typing import Any, Callable, Iterable

import numpy as np

from .config import resolve_num_threads

__all__ = ["Case", "copy_bandwidth", "median_time", "run_cases", "format_table", "default_cases", "has_torch"]


def has_torch() -> bool:
    try:
        import torch  # noqa: F401
    except ImportError:
        return False
    return True


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


def median_time(fn: Callable[[], Any], reps: int = 7, warmup: int = 1, max_seconds: float = 5.0) -> float:
    """Median wall time of ``fn()`` over ``reps`` runs (fewer if they exceed ``max_seconds`` in total)."""
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
        for other in ("torch", "tf"):
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
    for other, name in (("torch", "torch"), ("tf", "TF")):
        if f"vs_{other}" in r:
            text += f"  {r[f'vs_{other}']:6.2f}x vs {name}"
    return text


def format_table(rows: list[dict], bandwidth: float) -> str:
    """Markdown table of the rows (time, GB/s, % of copy bandwidth, speed-up over PyTorch / TensorFlow)."""
    head = ("| op | shape | layout | dtype | threads | mode | poolgrad ms | GB/s | % of copy | PyTorch ms | "
            "vs PyTorch | TF ms | vs TF |")
    lines = [f"copy bandwidth measured in this run: {bandwidth:.1f} GB/s", "", head,
             "|" + "---|" * (head.count("|") - 1)]
    for r in rows:
        det = {True: "det", False: "nondet", None: "-"}[r["deterministic"]]
        t_ms = f"{r['torch_s'] * 1e3:.2f}" if "torch_s" in r else "n/a"
        t_x = f"{r['vs_torch']:.2f}x" if "vs_torch" in r else "n/a"
        f_ms = f"{r['tf_s'] * 1e3:.2f}" if "tf_s" in r else "n/a"
        f_x = f"{r['vs_tf']:.2f}x" if "vs_tf" in r else "n/a"
        lines.append(f"| {r['op']} | {r['shape']}{(' ' + r['extra']) if r['extra'] else ''} | {r['layout']} | "
                     f"{r['dtype']} | {r['threads']} | {det} | {r['poolgrad_s'] * 1e3:.2f} | {r['gbs']:.1f} | "
                     f"{100 * r['frac_copy']:.0f}% | {t_ms} | {t_x} | {f_ms} | {f_x} |")
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


def max_pool_backward_case(N: int, C: int, H: int, W: int, k: int, s: int, p: int, layout: str, dtype: str,
                           threads: int, deterministic: bool, index_dtype: Any = np.int64) -> Case:
    """``max_pool2d_with_indices_backward`` versus ``torch.ops.aten.max_pool2d_with_indices_backward``."""
    from .max_pool import max_pool2d_with_indices, max_pool2d_with_indices_backward

    def make(nt: int) -> dict:
        rng = np.random.default_rng(0)
        x4 = rng.standard_normal((N, C, H, W), dtype=np.float32)
        dt = _np_dtype(dtype)
        x = _layout(x4, layout).astype(dt)
        y, ind = max_pool2d_with_indices(x, k, s, p, layout=layout, index_dtype=index_dtype)
        go = rng.standard_normal(y.shape, dtype=np.float32).astype(dt)
        fns: dict[str, Any] = {
            "poolgrad": lambda: max_pool2d_with_indices_backward(go, x, ind, k, s, p, layout=layout,
                                                                 deterministic=deterministic, num_threads=nt),
            "bytes": go.nbytes + ind.nbytes + x.nbytes,
        }
        if has_torch():
            import torch
            xt = _torch_in_layout(x4, layout, dtype)
            _, it = torch.nn.functional.max_pool2d(xt, k, s, p, return_indices=True)
            got = _torch_grad(go, layout, dtype)

            def run_torch() -> None:
                torch.set_num_threads(nt)
                torch.ops.aten.max_pool2d_with_indices_backward(got, xt, [k, k], [s, s], [p, p], [1, 1], False,
                                                                it)
            fns["torch"] = run_torch
        return fns

    idx = "i32" if np.dtype(index_dtype) == np.int32 else "i64"
    return Case("max_pool2d_with_indices_backward", f"{N}x{C}x{H}x{W} k{k}s{s}p{p}", layout, dtype, threads,
                deterministic, make, extra=idx if idx == "i32" else "")


def adaptive_backward_case(N: int, C: int, H: int, W: int, out_hw: tuple[int, int], layout: str, dtype: str,
                           threads: int, deterministic: bool) -> Case:
    """``adaptive_max_pool2d_backward`` versus ``torch.ops.aten.adaptive_max_pool2d_backward``."""
    from .adaptive import adaptive_max_pool2d, adaptive_max_pool2d_backward

    def make(nt: int) -> dict:
        rng = np.random.default_rng(0)
        x4 = rng.standard_normal((N, C, H, W), dtype=np.float32)
        dt = _np_dtype(dtype)
        x = _layout(x4, layout).astype(dt)
        y, ind = adaptive_max_pool2d(x, out_hw, layout=layout)
        go = rng.standard_normal(y.shape, dtype=np.float32).astype(dt)
        fns: dict[str, Any] = {
            "poolgrad": lambda: adaptive_max_pool2d_backward(go, x, ind, layout=layout,
                                                             deterministic=deterministic, num_threads=nt),
            "bytes": go.nbytes + ind.nbytes + x.nbytes,
        }
        if has_torch():
            import torch
            xt = _torch_in_layout(x4, layout, dtype)
            _, it = torch.nn.functional.adaptive_max_pool2d(xt, out_hw, return_indices=True)
            got = _torch_grad(go, layout, dtype)

            def run_torch() -> None:
                torch.set_num_threads(nt)
                torch.ops.aten.adaptive_max_pool2d_backward(got, xt, it)
            fns["torch"] = run_torch
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


def _max_pool_suite(threads: list[int], quick: bool) -> list[Case]:
    big = (8, 64, 112, 112) if quick else (32, 64, 112, 112)
    few = (1, 3, 512, 512) if quick else (1, 3, 1024, 1024)
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
    big = (8, 64, 112, 112) if quick else (32, 64, 112, 112)
    cases = []
    for nt in threads:
        for layout in ("NCHW", "NHWC"):
            for out_hw in ((7, 7), (13, 13)):
                for det in (True, False):
                    cases.append(adaptive_backward_case(*big, out_hw, layout, "f32", nt, det))
            cases.append(adaptive_backward_case(*big, (7, 7), layout, "bf16", nt, True))
    return cases


CASE_BUILDERS["max_pool2d_with_indices_backward"] = _max_pool_suite
CASE_BUILDERS["adaptive_max_pool2d_backward"] = _adaptive_suite


def default_cases(threads: Iterable[int] | None = None, quick: bool = False) -> list[Case]:
    """The built-in workload of ``python -m poolgrad``."""
    if threads is None:
        threads = sorted({1, resolve_num_threads(None)})
    cases = []
    big = (8, 64, 112, 112) if quick else (32, 64, 112, 112)
    for nt in threads:
        for layout in ("NCHW", "NHWC"):
            for dtype in ("f32", "bf16"):
                for det in (True, False):
                    cases.append(max_pool_backward_case(*big, 3, 2, 1, layout, dtype, nt, det))
            cases.append(max_pool_backward_case(1, 3, 1024, 1024, 3, 1, 1, layout, "f32", nt, True))
    return cases


def main(argv: list[str] | None = None) -> int:
    from .selfcheck import self_check
    import argparse
    parser = argparse.ArgumentParser(prog="python -m poolgrad", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="smaller workload (for smoke tests)")
    parser.add_argument("--reps", type=int, default=7)
    parser.add_argument("--threads", type=int, nargs="*", help="thread counts (default: 1 and all)")
    parser.add_argument("--no-bench", action="store_true", help="only run the self-check")
    args = parser.parse_args(argv)
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
    rows, bw = run_cases(default_cases(args.threads, args.quick), reps=args.reps,
                         progress=lambda m: print("  " + m, flush=True))
    print()
    print(format_table(rows, bw))
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
