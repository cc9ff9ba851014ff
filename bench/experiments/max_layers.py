"""Kernel-level max-pooling comparison with PyTorch on the max layers of standard CNNs (issue 8, item 2).

For every max layer of /work/briefs/layers.md (VGG-16, ResNet-50, AlexNet, GoogLeNet, Inception-v3,
DenseNet-121, SqueezeNet-1.1 and the adaptive-max head), batch 1/8/32, NCHW and channels-last, 1 and 2 threads:
forward (``max_pool2d_with_indices`` / ``adaptive_max_pool2d``) and backward, float32, int64 indices.

Both sides write into outputs that exist before the timed call: PyTorch through its ``.out`` / ``.grad_input``
overloads, poolgrad's backward through ``out=``; poolgrad's forward has no ``out=`` and allocates (blocks of 32 MiB
and more are recycled by ``poolgrad.buffers``, smaller ones come back from the heap).  Two poolgrad columns:

* ``kern``: the time spent inside the compiled ``poolgrad._max_pool_indices`` dispatchers during the call (the
  kernel level the issue asks for; Python validation and planning excluded),
* ``api``: the whole public call (per-call overhead included; that overhead is issue 8 item 3).

Columns ``x kern`` and ``x api`` are ratios of medians; ``x kmin`` is the ratio of the fastest repetitions
(PyTorch's fastest call / poolgrad's fastest kernel time), which is what survives on a machine so loaded that
two-thread calls wait for descheduled threads.

Each row first checks that poolgrad's outputs equal PyTorch's bit for bit (the backward in deterministic mode:
the default nondeterministic mode may add with atomics in another order), then times ``--reps`` interleaved
repetitions (PyTorch, poolgrad, PyTorch, ...) and prints medians.  Ratios > 1 mean poolgrad is faster.  Only
ratios measured in one run mean anything on a shared machine.

Usage: python bench/experiments/max_layers.py [--batches 1 8 32] [--layouts NCHW NHWC] [--threads 1 2]
       [--reps 7] [--only SUBSTRING] [--ops fwd bwd] [--json FILE] [--root DIR] [--clock wall|thread]
"""
from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time

import os

import numpy as np
import torch

# the poolgrad tree to measure: --root DIR (a folder holding a built poolgrad/), default this worktree
_root = sys.argv[sys.argv.index("--root") + 1] if "--root" in sys.argv else \
    os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, _root)
import poolgrad  # noqa: E402
from poolgrad import _max_pool_indices  # noqa: E402

# (name, C, H, kernel, stride, padding, ceil_mode); "adaptive" rows give the output size in place of the kernel
LAYERS = [
    ("vgg.pool1", 64, 224, 2, 2, 0, False),
    ("vgg.pool2", 128, 112, 2, 2, 0, False),
    ("vgg.pool3", 256, 56, 2, 2, 0, False),
    ("vgg.pool4", 512, 28, 2, 2, 0, False),
    ("vgg.pool5", 512, 14, 2, 2, 0, False),
    ("resnet.maxpool", 64, 112, 3, 2, 1, False),       # also DenseNet-121's
    ("alexnet.pool1", 64, 55, 3, 2, 0, False),
    ("alexnet.pool2", 192, 27, 3, 2, 0, False),
    ("alexnet.pool5", 256, 13, 3, 2, 0, False),
    ("googlenet.pool1", 64, 112, 3, 2, 0, True),
    ("googlenet.pool2", 192, 56, 3, 2, 0, True),
    ("googlenet.b3a", 192, 28, 3, 1, 1, True),
    ("googlenet.b3b", 256, 28, 3, 1, 1, True),
    ("googlenet.pool3", 480, 28, 3, 2, 0, True),
    ("googlenet.b4a", 480, 14, 3, 1, 1, True),
    ("googlenet.b4b", 512, 14, 3, 1, 1, True),        # also 4c, 4d
    ("googlenet.b4e", 528, 14, 3, 1, 1, True),
    ("googlenet.pool4", 832, 14, 2, 2, 0, True),
    ("googlenet.b5", 832, 7, 3, 1, 1, True),          # 5a and 5b
    ("inception.pool1", 64, 147, 3, 2, 0, False),
    ("inception.pool2", 192, 71, 3, 2, 0, False),
    ("inception.mixed6a", 288, 35, 3, 2, 0, False),
    ("inception.mixed7a", 768, 17, 3, 2, 0, False),
    ("squeezenet.pool1", 64, 111, 3, 2, 0, True),
    ("squeezenet.pool2", 128, 55, 3, 2, 0, True),
    ("squeezenet.pool3", 256, 27, 3, 2, 0, True),
    ("adaptive.head", 512, 14, "adaptive", 7, None, None),
]

_kernel_time = [0.0]
# --clock thread: CPU time of the calling thread (time.thread_time) instead of wall time.  On a machine so loaded
# that a process waits for a core, the time it waits is not its own: the CPU time of a one-thread call is what
# survives (it still pays for the caches other processes evict).  Meaningless for more than one thread.
_clock = [time.perf_counter]


def _wrap_kernels() -> None:
    """Time every call into the compiled dispatchers (the module attribute is looked up at call time)."""
    for name in dir(_max_pool_indices):
        fn = getattr(_max_pool_indices, name)
        if name.startswith("_") or not callable(fn) or isinstance(fn, type):
            continue

        def timed(*args, _fn=fn, **kw):
            t0 = _clock[0]()
            try:
                return _fn(*args, **kw)
            finally:
                _kernel_time[0] += _clock[0]() - t0
        setattr(_max_pool_indices, name, timed)


def _time(fn) -> tuple[float, float]:
    _kernel_time[0] = 0.0
    t0 = _clock[0]()
    fn()
    return _clock[0]() - t0, _kernel_time[0]


def run_row(layer, batch: int, layout: str, threads: int, ops, reps: int) -> list[dict]:
    name, C, H, k, s, p, ceil = layer
    adaptive = k == "adaptive"
    torch.set_num_threads(threads)
    gen = torch.Generator().manual_seed(batch * 1000 + C + H)
    x = torch.randn(batch, C, H, H, generator=gen)
    if layout == "NHWC":
        x = x.contiguous(memory_format=torch.channels_last)
        fmt = torch.channels_last
        xn = x.permute(0, 2, 3, 1).numpy()
    else:
        fmt = torch.contiguous_format
        xn = x.numpy()
    if adaptive:
        osize = [s, s]
        ref_y, ref_i = torch.ops.aten.adaptive_max_pool2d(x, osize)
        t_fwd = lambda: torch.ops.aten.adaptive_max_pool2d.out(x, osize, out=ty, indices=ti)
        p_fwd = lambda: poolgrad.adaptive_max_pool2d(xn, s, layout=layout, num_threads=threads)
    else:
        args = ([k, k], [s, s], [p, p], [1, 1], ceil)
        ref_y, ref_i = torch.ops.aten.max_pool2d_with_indices(x, *args)
        t_fwd = lambda: torch.ops.aten.max_pool2d_with_indices.out(x, *args, out=ty, indices=ti)
        p_fwd = lambda: poolgrad.max_pool2d_with_indices(xn, k, s, p, 1, ceil, layout=layout, num_threads=threads)
    ty = torch.empty_like(ref_y, memory_format=fmt)
    ti = torch.empty_like(ref_i, memory_format=fmt)
    gy = torch.randn(ref_y.shape, generator=gen).contiguous(memory_format=fmt)
    gx = torch.empty_like(x, memory_format=fmt)
    tonp = (lambda t: t.permute(0, 2, 3, 1).numpy()) if layout == "NHWC" else (lambda t: t.numpy())
    gyn = tonp(gy)
    t_fwd()
    py, pi = p_fwd()
    if not (np.array_equal(py, tonp(ty)) and np.array_equal(pi, tonp(ti))):
        raise AssertionError(f"{name} b{batch} {layout}: forward differs from PyTorch")
    pgx = np.empty_like(xn)
    if adaptive:
        t_bwd = lambda: torch.ops.aten.adaptive_max_pool2d_backward.grad_input(gy, x, ti, grad_input=gx)
        p_bwd = lambda **kw: poolgrad.adaptive_max_pool2d_backward(gyn, xn, pi, layout=layout, out=pgx,
                                                                   num_threads=threads, **kw)
    else:
        t_bwd = lambda: torch.ops.aten.max_pool2d_with_indices_backward.grad_input(
            gy, x, *args, ti, grad_input=gx)
        p_bwd = lambda **kw: poolgrad.max_pool2d_with_indices_backward(gyn, xn, pi, k, s, p, 1, ceil,
                                                                       layout=layout, out=pgx,
                                                                       num_threads=threads, **kw)
    t_bwd()
    p_bwd(deterministic=True)
    if not np.array_equal(pgx, tonp(gx)):
        raise AssertionError(f"{name} b{batch} {layout}: backward differs from PyTorch")
    p_bwd()
    np.testing.assert_allclose(pgx, tonp(gx), rtol=1e-5, atol=1e-6)
    rows = []
    for op, tf, pf in (("fwd", t_fwd, p_fwd), ("bwd", t_bwd, p_bwd)):
        if op not in ops:
            continue
        tf(), pf()                                      # warm-up
        tt, pa, pk = [], [], []
        for _ in range(reps):
            tt.append(_time(tf)[0])
            a, kk = _time(pf)
            pa.append(a)
            pk.append(kk)
        t, a, kk = (statistics.median(v) for v in (tt, pa, pk))
        rows.append(dict(layer=name, batch=batch, layout=layout, threads=threads, op=op,
                         torch_us=t * 1e6, pg_kernel_us=kk * 1e6, pg_api_us=a * 1e6,
                         ratio_kernel=t / kk, ratio_api=t / a, ratio_kernel_min=min(tt) / min(pk)))
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batches", type=int, nargs="+", default=[1, 8, 32])
    ap.add_argument("--layouts", nargs="+", default=["NCHW", "NHWC"])
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--ops", nargs="+", default=["fwd", "bwd"])
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--only", nargs="*", default=None, help="substrings of layer names to keep")
    ap.add_argument("--json", default=None)
    ap.add_argument("--root", default=None, help="folder holding the poolgrad/ to measure (default: this tree)")
    ap.add_argument("--clock", choices=("wall", "thread"), default="wall",
                    help="wall time, or the calling thread's CPU time (one-thread rows on a loaded machine)")
    a = ap.parse_args(argv)
    if a.clock == "thread":
        if a.threads != [1]:
            ap.error("--clock thread measures one-thread calls only (--threads 1)")
        _clock[0] = time.thread_time
    _wrap_kernels()
    layers = [l for l in LAYERS if not a.only or any(o in l[0] for o in a.only)]
    print(f"torch {torch.__version__}, poolgrad {poolgrad.__file__}, deterministic={poolgrad.is_deterministic()}")
    print(f"{'layer':18} {'N':>2} {'layout':6} {'t':>1} {'op':3} {'torch us':>9} {'pg kern':>9} {'pg api':>9} "
          f"{'x kern':>6} {'x api':>6} {'x kmin':>6}")
    rows = []
    for layout in a.layouts:
        for threads in a.threads:
            for batch in a.batches:
                for layer in layers:
                    for r in run_row(layer, batch, layout, threads, a.ops, a.reps):
                        rows.append(r)
                        print(f"{r['layer']:18} {r['batch']:>2} {r['layout']:6} {r['threads']:>1} {r['op']:3} "
                              f"{r['torch_us']:9.1f} {r['pg_kernel_us']:9.1f} {r['pg_api_us']:9.1f} "
                              f"{r['ratio_kernel']:6.2f} {r['ratio_api']:6.2f} {r['ratio_kernel_min']:6.2f}",
                              flush=True)
    print("\ngeometric means of torch/poolgrad (kernel, api), and the worst kernel ratio:")
    for layout in a.layouts:
        for op in a.ops:
            sel = [r for r in rows if r["layout"] == layout and r["op"] == op]
            if sel:
                gk = math.exp(statistics.fmean(math.log(r["ratio_kernel"]) for r in sel))
                ga = math.exp(statistics.fmean(math.log(r["ratio_api"]) for r in sel))
                gm = math.exp(statistics.fmean(math.log(r["ratio_kernel_min"]) for r in sel))
                worst = min(sel, key=lambda r: r["ratio_kernel"])
                print(f"  {layout} {op}: {gk:.2f}x kernel, {ga:.2f}x api, {gm:.2f}x kernel (fastest reps); worst "
                      f"{worst['ratio_kernel']:.2f}x ({worst['layer']} N={worst['batch']} t={worst['threads']})")
    if a.json:
        with open(a.json, "w") as fh:
            json.dump(rows, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
