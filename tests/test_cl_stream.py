"""Streaming stores of the channels-last max-pooling forward (pg_cl_argmax.h, CL_STREAM_BYTES): which outputs
qualify, and that streamed results are bit for bit the cached-store results, whatever the outputs' alignment,
dtype, index dtype, channel count, channel grouping and thread count, and through a replayed plan."""
from __future__ import annotations

import contextlib
from typing import Iterator

import numpy as np
import pytest

import pgtest
import poolgrad as pg
from poolgrad import _max_pool_indices as mpi
from poolgrad import config
from poolgrad import plans
from pgtest import DTYPES, DTYPE_IDS


@contextlib.contextmanager
def stream_bytes(value: int) -> Iterator[None]:
    """Run with CL_STREAM_BYTES set to ``value`` (0: stream every output that qualifies; huge: none), with no
    cached plan from before (plans keep what the forward decided)."""
    saved = mpi.CL_STREAM_BYTES
    mpi.CL_STREAM_BYTES = value
    plans.clear()
    try:
        yield
    finally:
        mpi.CL_STREAM_BYTES = saved
        plans.clear()


NEVER = 1 << 62


def _aligned(shape: tuple[int, ...], dtype, offset: int = 0) -> np.ndarray:
    """A C-contiguous array starting ``offset`` bytes after a 64-byte boundary, filled with a marker."""
    dtype = np.dtype(dtype)
    n = int(np.prod(shape)) * dtype.itemsize
    raw = np.empty(n + 128, np.uint8)
    start = (-raw.ctypes.data) % 64 + offset
    a = raw[start:start + n].view(dtype).reshape(shape)
    a.view(np.uint8)[...] = 0xA5
    return a


def _windows(size: int, out: int, k: int, s: int, p: int, d: int) -> tuple[np.ndarray, np.ndarray]:
    """(first cell, cell count) of PyTorch-style windows along one axis, clipped to [0, size)."""
    start = np.empty(out, np.int64)
    count = np.empty(out, np.int64)
    for o in range(out):
        cells = [o * s - p + j * d for j in range(k)]
        inside = [c for c in cells if 0 <= c < size]
        start[o], count[o] = inside[0], len(inside)
    return start, count


def _nchw(a: np.ndarray) -> np.ndarray:
    return a.transpose(0, 3, 1, 2)


def test_stream_mask_rules():
    y = _aligned((2, 8, 8, 64), np.float32)
    ind = _aligned((2, 8, 8, 64), np.int64)
    with stream_bytes(0):
        assert mpi.stream_mask(_nchw(y), _nchw(ind)) == 3
        assert mpi.stream_mask(None, _nchw(ind)) == 2
        # C * itemsize not whole lines: 40 float32 (160 bytes) values, 40 int64 (320 bytes) indices
        y40, i40 = _aligned((2, 8, 8, 40), np.float32), _aligned((2, 8, 8, 40), np.int64)
        assert mpi.stream_mask(_nchw(y40), _nchw(i40)) == 2
        # a pixel stride that is not whole lines (every other pixel: 2 * 64 * 4 bytes is, 3 * 48 * 2 is not)
        assert mpi.stream_mask(_nchw(y[:, :, ::2]), _nchw(ind[:, :, ::2])) == 3
        wide = _aligned((2, 8, 8, 72), np.float16)[..., :64]
        assert mpi.stream_mask(_nchw(wide), _nchw(ind)) == 2
    with stream_bytes(y.nbytes + ind.nbytes + 1):
        assert mpi.stream_mask(_nchw(y), _nchw(ind)) == 0
    with stream_bytes(y.nbytes + ind.nbytes):
        assert mpi.stream_mask(_nchw(y), _nchw(ind)) == 3


# (N, H, W, C, kernel, stride, padding, dilation): C whole lines for every dtype (64, 96, 128), not for some
# (48: 96 bytes of float16), not a multiple of the 32-lane block (96 = 3 blocks, 80: partial block from C - 32)
CASES = [
    (2, 9, 11, 64, 3, 2, 1, 1),
    (3, 8, 8, 96, 2, 2, 0, 1),
    (2, 7, 9, 48, 3, 1, 1, 1),
    (1, 6, 6, 128, 2, 2, 0, 1),      # batch 1, three output rows: channel groups as work items
    (2, 10, 9, 80, 3, 2, 1, 2),
]


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("kind", ["normal", "ties", "nan"])
def test_streamed_equals_cached(case, dtype, kind):
    N, H, W, C, k, s, p, d = case
    rng = np.random.default_rng(N * 1000 + C)
    x4 = pgtest.random_values(rng, (N, C, H, W), dtype, kind)
    x = np.ascontiguousarray(x4.transpose(0, 2, 3, 1))
    ho = (H + 2 * p - d * (k - 1) - 1) // s + 1
    wo = (W + 2 * p - d * (k - 1) - 1) // s + 1
    hs, hc = _windows(H, ho, k, s, p, d)
    ws, wc = _windows(W, wo, k, s, p, d)
    dt = {np.dtype(np.float32): "f32", np.dtype(np.float64): "f64", np.dtype(np.float16): "f16"}.get(
        np.dtype(dtype), "bf16")
    for itype, it in ((np.int32, "i32"), (np.int64, "i64")):
        with stream_bytes(NEVER):
            want_y, want_i = pg.max_pool2d_with_indices(x, k, s, p, d, layout="NHWC", index_dtype=itype)
        for offset in (0, 16, 32):
            for threads in (1, 2, 3):
                for with_y in (True, False):
                    y = _aligned((N, ho, wo, C), dtype, offset)
                    ind = _aligned((N, ho, wo, C), itype, offset)
                    with stream_bytes(0):
                        mask = mpi.stream_mask(_nchw(y) if with_y else None, _nchw(ind))
                        assert mask == ((2 if (C * ind.itemsize) % 64 == 0 else 0)
                                        | (1 if with_y and (C * y.itemsize) % 64 == 0 else 0))
                        if with_y:
                            path = mpi.argmax_forward(dt, it, _nchw(x), _nchw(y), _nchw(ind), hs, hc, d, ws, wc, d,
                                                      True, threads)
                        else:
                            # indices only: the uniform-window entry (the channels-last kernel takes the call
                            # before any of the row kernel's tables or scratch rows is looked at)
                            t64, f64 = np.zeros(1, np.int64), np.zeros((threads, 1), np.float64)
                            path = mpi.argmax_forward_uniform(
                                dt, it, _nchw(x), None, _nchw(ind), (k, k), (s, s), (p, p), (d, d), t64, t64, t64,
                                t64, True, f64, np.zeros((threads, 1), np.int32), np.zeros((threads, 1), np.uint8),
                                threads)
                    assert path == "channels_last"
                    np.testing.assert_array_equal(ind, want_i)
                    if with_y:
                        np.testing.assert_array_equal(y.view(f"u{y.itemsize}"), want_y.view(f"u{y.itemsize}"))
                    else:
                        # indices only: y untouched
                        assert (y.view(np.uint8) == 0xA5).all()


@pytest.mark.parametrize("dtype", [np.float32, np.float16], ids=["f32", "f16"])
def test_public_forward_streams_and_replays_identically(dtype):
    """Streamed outputs at every instruction-set level, and the public call with every output streamed where
    it qualifies: the first (planning) call and the replays of its recorded launch give the cached-store
    results, for several thread counts."""
    rng = np.random.default_rng(3)
    x = np.ascontiguousarray(pgtest.random_values(rng, (3, 64, 12, 12), dtype, "ties").transpose(0, 2, 3, 1))
    with stream_bytes(NEVER):
        want = pg.max_pool2d_with_indices(x, 3, 2, 1, layout="NHWC")
    # every instruction-set level's streaming stores (16-, 32- and 64-byte) on line-aligned outputs
    y = _aligned((3, 6, 6, 64), dtype)
    ind = _aligned((3, 6, 6, 64), np.int64)
    hs, hc = _windows(12, 6, 3, 2, 1, 1)
    dt = "f32" if np.dtype(dtype) == np.float32 else "f16"
    for level in config.supported_isa_levels():
        with config.set_isa_level(level), stream_bytes(0):
            mpi.argmax_forward(dt, "i64", _nchw(x), _nchw(y), _nchw(ind), hs, hc, 1, hs, hc, 1, True, 2)
        np.testing.assert_array_equal(y.view(f"u{y.itemsize}"), want[0].view(f"u{y.itemsize}"), err_msg=level)
        np.testing.assert_array_equal(ind, want[1], err_msg=level)
    for threads in (1, 2, 4):
        with stream_bytes(0):
            for _ in range(3):
                y, ind = pg.max_pool2d_with_indices(x, 3, 2, 1, layout="NHWC", num_threads=threads)
                np.testing.assert_array_equal(y.view(f"u{y.itemsize}"), want[0].view(f"u{y.itemsize}"))
                np.testing.assert_array_equal(ind, want[1])
