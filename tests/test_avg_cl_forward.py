"""The channels-last average forward on 2x2 windows (DenseNet's k2s2 transitions), pg_avg.h's straight loop:
bit for bit the forward's documented order - each window column summed from +0 down its rows, the columns added
left to right, then one true division - for float32 and float64, signed zeros and infinities included, where two
NaNs meet the left one kept (payload and sign), at every instruction-set level and thread count; and the values
of the plane-contiguous (NCHW) loops where windows are clipped."""
from __future__ import annotations

import numpy as np
import pytest

import poolgrad as pg
from poolgrad import config
from pgtest import THREADS


def _values(rng: np.random.Generator, shape: tuple[int, ...], dtype) -> np.ndarray:
    """Random normal values with signed zeros, infinities, NaN and magnitudes far apart (so that the order of
    the additions shows in the bits)."""
    x = (rng.standard_normal(shape) * 10.0 ** rng.integers(-6, 7, shape)).astype(dtype)
    special = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e-30, -1e30], dtype)
    pick = rng.random(shape) < 0.08
    x[pick] = rng.choice(special, int(pick.sum()))
    # NaNs of both signs and several payloads, dense enough that windows hold two of them in every position
    # (where both terms of a sum are NaN, the left one's bits are kept)
    u = f"u{x.itemsize}"
    top = 0x7FF8 << 48 if x.itemsize == 8 else 0x7FC00000
    sign = 1 << (8 * x.itemsize - 1)
    nans = np.array([top | 1, top | 2 | sign, top | 0x1234, top | sign, top | 7], u)
    pick = rng.random(shape) < 0.15
    x.view(u)[pick] = rng.choice(nans, int(pick.sum()))
    # whole windows of -0.0: the + 0 makes their sum +0
    x[:, :2, :2, :] = -0.0
    return x


def _add_left(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """a + b, keeping a's bits where a is NaN (NumPy, like any compiled loop, may take either NaN of two)."""
    return np.where(np.isnan(a), a, a + b)


def _reference(x: np.ndarray) -> np.ndarray:
    """(((x00 + 0) + x10) + ((x01 + 0) + x11)) / 4 in the array's own precision, NHWC, k2s2 without padding,
    the left NaN kept where both terms of a sum are NaN."""
    z = x.dtype.type(0)
    H, W = x.shape[1] // 2 * 2, x.shape[2] // 2 * 2
    x00, x10 = x[:, 0:H:2, 0:W:2], x[:, 1:H:2, 0:W:2]
    x01, x11 = x[:, 0:H:2, 1:W:2], x[:, 1:H:2, 1:W:2]
    with np.errstate(invalid="ignore", over="ignore"):
        return _add_left(_add_left(x00 + z, x10), _add_left(x01 + z, x11)) / x.dtype.type(4)


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["f32", "f64"])
@pytest.mark.parametrize("shape", [(2, 14, 14, 512), (3, 8, 10, 128), (2, 7, 9, 48), (1, 6, 6, 37)],
                         ids=["512x14", "128x8x10", "odd-48", "c37"])
def test_2x2_windows_bit_for_bit(dtype, shape):
    rng = np.random.default_rng(shape[3])
    x = _values(rng, shape, dtype)
    want = _reference(x)
    u = f"u{x.itemsize}"
    assert (np.isnan(want) & (want.view(u) >> np.array(8 * x.itemsize - 1, u)).astype(bool)).any()
    for level in config.supported_isa_levels():
        with config.set_isa_level(level):
            for threads in THREADS:
                y = pg.avg_pool2d(x, 2, 2, 0, False, True, layout="NHWC", num_threads=threads)
                assert y.shape == want.shape
                np.testing.assert_array_equal(y.view(u), want.view(u), err_msg=f"{level}, {threads} threads")


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["f32", "f64"])
@pytest.mark.parametrize("geometry", [(2, 2, 1, True, True), (2, 2, 1, False, False), (2, 2, 0, True, True)],
                         ids=["pad-ceil", "pad-exclude", "ceil"])
def test_2x2_with_clipped_windows_matches_plane_loops(dtype, geometry):
    """Padding and ceil_mode leave clipped 1x2 / 2x1 / 1x1 windows at the borders beside the 2x2 ones: the
    channels-last result has the bits of the NCHW one (but for the sign and payload of NaNs made by the sums,
    which docs/SEMANTICS.md 8.3 leaves open between the two memory orders)."""
    k, s, p, ceil, include = geometry
    rng = np.random.default_rng(11)
    x = _values(rng, (2, 9, 11, 64), dtype)
    nchw = np.ascontiguousarray(x.transpose(0, 3, 1, 2))
    want = pg.avg_pool2d(nchw, k, s, p, ceil, include, layout="NCHW", num_threads=1)
    for threads in (1, 2, 3):
        y = pg.avg_pool2d(x, k, s, p, ceil, include, layout="NHWC", num_threads=threads)
        got = np.ascontiguousarray(y.transpose(0, 3, 1, 2))
        nan = np.isnan(want)
        np.testing.assert_array_equal(np.isnan(got), nan)
        u = f"u{got.itemsize}"
        np.testing.assert_array_equal(got.view(u)[~nan], want.view(u)[~nan])
