"""Thread safety: Python threads calling every operator concurrently get the serial results, and the GIL is
released inside the kernels."""
from __future__ import annotations

import gc
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np

import poolgrad as pg
from poolgrad import avg_pool, tf_max_pool


def _workload(seed: int) -> list:
    """One call of every backward and forward operator on inputs derived from ``seed``."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((2, 3, 20, 17)).astype(np.float32)
    y, ind = pg.max_pool2d_with_indices(x, 3, 2, 1)
    go = rng.standard_normal(y.shape).astype(np.float32)
    ya, ia = pg.adaptive_max_pool2d(x, (5, 4))
    goa = rng.standard_normal(ya.shape).astype(np.float32)
    yv = avg_pool.avg_pool2d(x, 3, 2, 1)
    xh = np.ascontiguousarray(x.transpose(0, 2, 3, 1))
    yt = tf_max_pool.max_pool(xh, [1, 3, 3, 1], [1, 2, 2, 1], "SAME")
    dy = rng.standard_normal(x.shape).astype(np.float32)
    return [
        lambda: pg.max_pool2d_with_indices(x, 3, 2, 1),
        lambda: pg.max_pool2d_with_indices_backward(go, x, ind, 3, 2, 1, deterministic=True),
        lambda: pg.adaptive_max_pool2d_backward(goa, x, ia, deterministic=True),
        lambda: avg_pool.avg_pool2d_backward(rng.standard_normal(yv.shape).astype(np.float32) * 0 + yv, x, 3, 2, 1,
                                             deterministic=True),
        lambda: tf_max_pool.max_pool_grad(xh, yt, yt, [1, 3, 3, 1], [1, 2, 2, 1], "SAME", deterministic=True),
        lambda: pg.max_pooling_grad(dy, x, np.maximum(x, 0)),
    ]


def _result_bytes(result) -> bytes:
    if isinstance(result, tuple):
        return b"".join(np.ascontiguousarray(r).tobytes() for r in result)
    return np.ascontiguousarray(result).tobytes()


def test_concurrent_calls_match_serial():
    seeds = list(range(12))
    work = {s: _workload(s) for s in seeds}
    serial = {(s, i): _result_bytes(fn()) for s in seeds for i, fn in enumerate(work[s])}
    jobs = [(s, i) for s in seeds for i in range(len(work[s]))] * 3
    with ThreadPoolExecutor(max_workers=8) as pool:
        results = list(pool.map(lambda key: (key, _result_bytes(work[key[0]][key[1]]())), jobs))
    for key, got in results:
        assert got == serial[key], key


def _longest_pause_while(fn) -> float:
    """Run ``fn`` in a thread; return the longest pause the calling thread saw while spinning meanwhile."""
    go = threading.Event()
    worker = threading.Thread(target=lambda: (go.wait(), fn()))
    longest = 0.0
    # A full garbage collection of a big test process holds the GIL for tens of milliseconds: not a kernel's
    # doing, so the collector is off while measuring (and the spinner allocates nothing).
    enabled = gc.isenabled()
    gc.disable()
    try:
        worker.start()      # the worker blocks on the event, so fn() cannot run before the spinning starts
        last = time.perf_counter()
        go.set()
        while worker.is_alive():
            now = time.perf_counter()
            longest = max(longest, now - last)
            last = now
        worker.join()
    finally:
        if enabled:
            gc.enable()
    return longest


def test_pause_measurement_detects_a_gil_holder():
    """Control for the test below: a C call that keeps the GIL (ctypes.PyDLL never releases it) stalls the
    spinner, so the measurement can tell a released GIL from a held one."""
    import ctypes
    libc = ctypes.PyDLL(None)
    assert _longest_pause_while(lambda: libc.usleep(60000)) > 0.04


def test_gil_released_inside_kernels():
    """While one Python thread runs a long kernel, another keeps running Python code: the longest pause it
    sees is far shorter than the kernel (with the GIL held it would stall for the whole call)."""
    rng = np.random.default_rng(0)
    x = np.zeros((64, 64, 112, 112), np.float32)     # only its shape is read by the backward
    ind = rng.integers(0, 112 * 112, size=(64, 64, 56, 56)).astype(np.int32)   # random: exact fallback path
    go = rng.standard_normal(ind.shape).astype(np.float32)
    out = np.empty_like(x)
    call = lambda: pg.max_pool2d_with_indices_backward(go, x, ind, 3, 2, 1, num_threads=1, out=out)  # noqa: E731
    call()
    t0 = time.perf_counter()
    for _ in range(3):
        call()
    kernel = (time.perf_counter() - t0) / 3
    pause = _longest_pause_while(lambda: [call() for _ in range(3)])
    # CPython's switch interval is 5 ms, so a thread waiting for the GIL gets it back within a few intervals
    # unless the holder never releases it (then the pause is the whole kernel).
    assert kernel > 0.02, "kernel too short for the test to mean anything"
    assert pause < max(0.5 * kernel, 0.015), (pause, kernel)
