"""Streaming stores of the channels-last average forward (_avg_pool.CL_STREAM_BYTES): streamed results are bit
for bit the ordinary-store results - signed zeros, infinities and NaN payloads included - for 2x2 windows, sums
of up to three window columns and wider windows, clipped borders, every thread count and instruction-set level,
and outputs the kernel cannot stream (misaligned, channel vectors that are not whole lines) are left to ordinary
stores."""
from __future__ import annotations

import contextlib
from typing import Iterator

import numpy as np
import pytest

import poolgrad as pg
from poolgrad import _avg_pool, config, memory, plans

NEVER = 1 << 62


@contextlib.contextmanager
def settings(stream_bytes: int, aligned_outputs: bool) -> Iterator[None]:
    """CL_STREAM_BYTES = ``stream_bytes``; ``aligned_outputs``: every output comes from the block cache (64-byte
    aligned) however small; no plan kept from before or after."""
    saved = _avg_pool.CL_STREAM_BYTES, memory.MIN_BYTES
    _avg_pool.CL_STREAM_BYTES = stream_bytes
    if aligned_outputs:
        memory.MIN_BYTES = 0
    plans.clear()
    try:
        yield
    finally:
        _avg_pool.CL_STREAM_BYTES, memory.MIN_BYTES = saved
        plans.clear()


def _values(rng: np.random.Generator, shape: tuple[int, ...], dtype) -> np.ndarray:
    x = rng.standard_normal(shape).astype(dtype)
    u = f"u{x.itemsize}"
    top = 0x7FF8 << 48 if x.itemsize == 8 else 0x7FC00000
    sign = 1 << (8 * x.itemsize - 1)
    special = np.array([0.0, -0.0, np.inf, -np.inf], dtype)
    pick = rng.random(shape) < 0.05
    x[pick] = rng.choice(special, int(pick.sum()))
    pick = rng.random(shape) < 0.05
    x.view(u)[pick] = rng.choice(np.array([top | 1, top | 2 | sign, top | 0x1234], u), int(pick.sum()))
    return x


# (kernel, stride, padding, ceil_mode, count_include_pad): 2x2 windows (the win path), three columns (sum and
# divide in one pass), five columns (sums then one division), clipped windows at the borders
GEOMETRIES = [(2, 2, 0, False, True), (3, 1, 1, False, True), (3, 2, 1, True, False), (5, 1, 2, False, True),
              (2, 2, 1, True, True)]


@pytest.mark.parametrize("geometry", GEOMETRIES, ids=lambda g: "k{}s{}p{}{}{}".format(*g[:3], "c" * g[3],
                                                                                        "i" * g[4]))
@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["f32", "f64"])
@pytest.mark.parametrize("C", [64, 48, 40])
def test_streamed_equals_ordinary(geometry, dtype, C):
    k, s, p, ceil, include = geometry
    rng = np.random.default_rng(C + k)
    x = _values(rng, (2, 9, 10, C), dtype)
    with settings(NEVER, aligned_outputs=False):
        want = pg.avg_pool2d(x, k, s, p, ceil, include, layout="NHWC", num_threads=1)
    u = f"u{x.itemsize}"
    for threads in (1, 2, 3):
        with settings(0, aligned_outputs=True):
            y = pg.avg_pool2d(x, k, s, p, ceil, include, layout="NHWC", num_threads=threads)
            y2 = pg.avg_pool2d(x, k, s, p, ceil, include, layout="NHWC", num_threads=threads)   # replayed plan
        assert y.ctypes.data % 64 == 0
        np.testing.assert_array_equal(y.view(u), want.view(u), err_msg=f"{threads} threads")
        np.testing.assert_array_equal(y2.view(u), want.view(u), err_msg=f"{threads} threads, replay")


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["f32", "f64"])
def test_streamed_at_every_isa_level(dtype):
    rng = np.random.default_rng(5)
    x = _values(rng, (2, 12, 12, 128), dtype)
    u = f"u{x.itemsize}"
    for k, s, p, ceil, include in GEOMETRIES[:2]:
        for level in config.supported_isa_levels():
            # (the ordinary stores at the same level: the levels may pick different NaNs of a NaN + NaN sum)
            with config.set_isa_level(level):
                with settings(NEVER, aligned_outputs=False):
                    want = pg.avg_pool2d(x, k, s, p, ceil, include, layout="NHWC")
                with settings(0, aligned_outputs=True):
                    y = pg.avg_pool2d(x, k, s, p, ceil, include, layout="NHWC", num_threads=2)
            np.testing.assert_array_equal(y.view(u), want.view(u), err_msg=level)
