"""Channels-last forward rows of bench/models.py, poolgrad against PyTorch 2.13, one thread, CPU time of the calling
thread (issue 8 item 2, the NHWC forward rows below 1.0x).

For every (layer, batch) asked for, float32, NHWC memory, the same arrays on both sides:

* ``torch``: ``aten.max_pool2d_with_indices.out`` / ``aten.avg_pool2d.out`` into preallocated outputs;
* ``pg``: poolgrad's public forward (it allocates; outputs of 32 MiB and more come back from its block cache,
  as they do in a training loop once the previous step's outputs are freed - nothing else is kept alive here);
* max layers also time the compiled dispatcher alone, ``_max_pool_indices.argmax_forward``, writing into
  outputs allocated once (64-byte aligned, outside poolgrad's block cache): ``kern`` as built, ``kern_cached`` with streaming stores
  turned off (CL_STREAM_BYTES raised out of reach around the call), so that one run compares both store kinds;
* avg layers: ``kern`` is the public call planned afresh on every call (plans keep the streaming decision) as
  built, ``kern_cached`` the same with streaming stores turned off (_avg_pool.CL_STREAM_BYTES);
* ``--hold-ref`` keeps one forward result alive, as bench/models.py's backward-alone fixture does;
* ``--stream-all``: ``kern`` streams whatever the output size (to measure below CL_STREAM_BYTES);
* ``--fwdbwd`` (max layers): the public forward then the public backward (``out=``) on its indices, with and
  without streaming stores (plans cleared before every call of both, so both pay the same planning), to see what
  streamed indices cost the backward that reads them next.

Timing is interleaved (each round calls every variant once, in a rotating order) and each figure is the median
of the rounds (poolgrad.benchmark.interleaved_medians), time.thread_time.  Results are checked against PyTorch
first (values and indices equal).  Only ratios measured in one run mean anything on a shared machine.

    PYTHONPATH=. python bench/experiments/clfwd_rows.py                       # the rows of the brief
    PYTHONPATH=. python bench/experiments/clfwd_rows.py --rows vgg16/pool1:32 densenet121/transition3.pool:8
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Any, Callable

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from cnn_layers import LAYERS, Layer  # noqa: E402

DEFAULT_ROWS = ["vgg16/pool1:32", "vgg16/pool1:8", "densenet121/transition1.pool:32",
                "densenet121/transition1.pool:8", "densenet121/transition3.pool:8",
                "densenet121/transition3.pool:32", "densenet121/transition2.pool:8"]


def _windows(size: int, out: int, k: int, s: int, p: int) -> tuple[np.ndarray, np.ndarray]:
    """(first cell, cell count) of PyTorch-style windows along one axis (dilation 1), clipped to [0, size)."""
    first = np.arange(out, dtype=np.int64) * s - p
    start = np.maximum(first, 0)
    stop = np.minimum(first + k, size)
    return start, np.maximum(stop - start, 0).astype(np.int64)


def _aligned(shape: tuple[int, ...], dtype: Any) -> np.ndarray:
    """A new C-contiguous array whose data starts on a 64-byte boundary."""
    n = int(np.prod(shape)) * np.dtype(dtype).itemsize
    raw = np.empty(n + 64, np.uint8)
    off = (-raw.ctypes.data) % 64
    return raw[off:off + n].view(dtype).reshape(shape)


def _layer(key: str) -> Layer:
    for L in LAYERS:
        if L.key == key:
            return L
    raise SystemExit(f"no layer {key!r} in bench/cnn_layers.py")


def variants(L: Layer, batch: int, hold_ref: bool, stream_all: bool = False,
             fwdbwd: bool = False) -> tuple[dict[str, Callable[[], Any]], int, list]:
    """The timed callables of one row, the bytes the forward must move, and what must stay alive."""
    import torch

    import poolgrad as pg
    from poolgrad import _max_pool_indices as mpi
    from poolgrad import plans
    aten = torch.ops.aten
    rng = np.random.default_rng(0)
    x = np.ascontiguousarray(rng.standard_normal((batch, L.c, L.h, L.w), dtype=np.float32).transpose(0, 2, 3, 1))
    xt = torch.from_numpy(x).permute(0, 3, 1, 2)
    ho, wo = L.out_hw()
    k, s, p, ceil = [L.kernel] * 2, [L.stride] * 2, [L.padding] * 2, L.ceil_mode
    ty = torch.empty((batch, L.c, ho, wo)).contiguous(memory_format=torch.channels_last)
    keep: list = []
    fns: dict[str, Callable[[], Any]] = {}
    if L.op == "max":
        ti = torch.empty((batch, L.c, ho, wo), dtype=torch.int64).contiguous(memory_format=torch.channels_last)
        fns["torch"] = lambda: aten.max_pool2d_with_indices.out(xt, k, s, p, [1, 1], ceil, out=ty, indices=ti)

        def api() -> Any:
            return pg.max_pool2d_with_indices(x, L.kernel, L.stride, L.padding, 1, ceil, layout="NHWC",
                                              num_threads=1)
        fns["pg"] = api
        y, ind = api()
        if not (np.array_equal(y.transpose(0, 3, 1, 2), fns["torch"]()[0].numpy())
                and np.array_equal(ind.transpose(0, 3, 1, 2), ti.numpy())):
            raise AssertionError(f"{L.key} batch {batch}: poolgrad differs from PyTorch")
        del y, ind
        # the dispatcher's outputs: outside poolgrad's block cache (which the public call uses), 64-byte aligned
        # as the cache's blocks are
        y = _aligned((batch, ho, wo, L.c), np.float32)
        ind = _aligned((batch, ho, wo, L.c), np.int64)
        keep += [y, ind]
        hs, hc = _windows(L.h, ho, L.kernel, L.stride, L.padding)
        ws, wc = _windows(L.w, wo, L.kernel, L.stride, L.padding)
        args = ("f32", "i64", x.transpose(0, 3, 1, 2), y.transpose(0, 3, 1, 2), ind.transpose(0, 3, 1, 2),
                hs, hc, 1, ws, wc, 1, True, 1)
        saved = mpi.CL_STREAM_BYTES

        def cached() -> Any:
            mpi.CL_STREAM_BYTES = 1 << 62
            try:
                return mpi.argmax_forward(*args)
            finally:
                mpi.CL_STREAM_BYTES = saved
        def kern() -> Any:
            mpi.CL_STREAM_BYTES = 0 if stream_all else saved
            try:
                return mpi.argmax_forward(*args)
            finally:
                mpi.CL_STREAM_BYTES = saved
        fns["kern"] = kern
        fns["kern_cached"] = cached
        if fwdbwd:
            gy = rng.standard_normal((batch, ho, wo, L.c), dtype=np.float32)
            gx = np.empty_like(x)

            def step(limit: int) -> Any:
                # the forward, then the backward on its indices (a training step's pair), with streaming stores
                # from ``limit`` bytes of forward output on; no plan kept from the other variant
                mpi.CL_STREAM_BYTES = limit
                plans.clear()
                try:
                    yy, ii = api()
                    return pg.max_pool2d_with_indices_backward(gy, x, ii, L.kernel, L.stride, L.padding, 1, ceil,
                                                               layout="NHWC", out=gx, num_threads=1)
                finally:
                    mpi.CL_STREAM_BYTES = saved
            fns["step"] = lambda: step(0 if stream_all else saved)
            fns["step_cached"] = lambda: step(1 << 62)
        nbytes = x.nbytes + y.nbytes + ind.nbytes
    elif L.op == "avg":
        fns["torch"] = lambda: aten.avg_pool2d.out(xt, k, s, p, ceil, True, None, out=ty)

        def api() -> Any:
            return pg.avg_pool2d(x, L.kernel, L.stride, L.padding, ceil, True, layout="NHWC", num_threads=1)
        fns["pg"] = api
        from poolgrad import _avg_pool
        saved_avg = _avg_pool.CL_STREAM_BYTES

        def replanned(limit: int) -> Any:
            # the public call planned afresh (plans keep the streaming decision), streaming from ``limit`` bytes
            _avg_pool.CL_STREAM_BYTES = limit
            plans.clear()
            try:
                return api()
            finally:
                _avg_pool.CL_STREAM_BYTES = saved_avg
        fns["kern"] = lambda: replanned(0 if stream_all else saved_avg)
        fns["kern_cached"] = lambda: replanned(1 << 62)
        y = api()
        if not np.array_equal(y.transpose(0, 3, 1, 2), fns["torch"]().numpy()):
            # the sums may be added in another order than PyTorch's: equal to float32 rounding is what is checked
            np.testing.assert_allclose(y.transpose(0, 3, 1, 2), ty.numpy(), rtol=1e-5, atol=1e-6)
        nbytes = x.nbytes + y.nbytes
    else:
        raise SystemExit(f"{L.key}: only max and avg layers here")
    if hold_ref:
        keep.append(fns["pg"]())
    return fns, nbytes, keep


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", nargs="*", default=DEFAULT_ROWS, help="model/layer:batch (default: the brief's rows)")
    ap.add_argument("--reps", type=int, default=9)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--hold-ref", action="store_true", help="keep one forward result alive (bench/models.py's "
                                                            "backward fixture does)")
    ap.add_argument("--stream-all", action="store_true", help="``kern`` (and ``step``) stream every output that "
                                                               "qualifies, whatever its size (CL_STREAM_BYTES 0)")
    ap.add_argument("--fwdbwd", action="store_true", help="max layers: also time the public forward + backward "
                                                           "(out=) pair with and without streaming stores")
    a = ap.parse_args(argv)
    import torch

    import poolgrad
    from poolgrad.benchmark import copy_rate, interleaved_medians
    torch.set_num_threads(1)
    print(f"poolgrad {poolgrad.__file__}, torch {torch.__version__}, 1 thread, thread CPU time, medians of "
          f"{a.reps} interleaved rounds; copy rate (1 thread) {copy_rate(1)[0]:.1f} GB/s")
    print(f"{'row':44} {'torch ms':>9} {'pg ms':>8} {'torch/pg':>8} {'kern ms':>8} {'torch/kern':>10} "
          f"{'cached ms':>9} {'cached/kern':>11} {'pg GB/s':>8}")
    for spec in a.rows:
        key, _, b = spec.rpartition(":")
        L = _layer(key)
        fns, nbytes, keep = variants(L, int(b), a.hold_ref, a.stream_all, a.fwdbwd)
        med = interleaved_medians(fns, a.reps, a.warmup, 120.0, time.thread_time)
        t, g = med["torch"], med["pg"]
        line = f"{key + ' b' + b + ' ' + L.describe():44} {t * 1e3:9.3f} {g * 1e3:8.3f} {t / g:8.2f}"
        if "kern" in med:
            kk, kc = med["kern"], med["kern_cached"]
            line += f" {kk * 1e3:8.3f} {t / kk:10.2f} {kc * 1e3:9.3f} {kc / kk:11.2f}"
        else:
            line += f" {'':8} {'':10} {'':9} {'':11}"
        if "step" in med:
            line += f" {nbytes / g / 1e9:8.1f}  step {med['step'] * 1e3:.3f} ms, cached {med['step_cached'] * 1e3:.3f}"
            print(line + f" ms, cached/streamed {med['step_cached'] / med['step']:.2f}", flush=True)
            continue
        print(line + f" {nbytes / g / 1e9:8.1f}", flush=True)
        del keep


if __name__ == "__main__":
    main()
