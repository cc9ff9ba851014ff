"""The float32 / float64 channels-last gather backward (pg_cl_gather.h's channel-innermost rows): the same bits
as the band scatter at every ISA level, for channel counts that are not multiples of any vector width, with
overlapping windows forced through the gather and NaN gradients with distinct payloads landing on one cell;
indices outside their window (in the last channel, where the vector loop's tail runs) still go to the exact
pass, and indices outside the plane still raise the same error."""
from __future__ import annotations

import numpy as np
import pytest

import pgtest
import poolgrad as pg
from poolgrad import _max_pool_indices, slow

FLOATS = [np.dtype(np.float32), np.dtype(np.float64)]


def _bits(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a).view(f"u{a.dtype.itemsize}")


def _gather_and_scatter(go: np.ndarray, x: np.ndarray, ind: np.ndarray, k, s, p, ceil: bool,
                        threads: int) -> list[np.ndarray]:
    """grad_x from the gather (forced on) and from the scatter, each written into an ``out=`` array that
    starts as NaNs, so that a cell the kernel forgets shows."""
    res = []
    for limit in (1e9, -1):
        out = np.full_like(x, np.nan)
        with pgtest.gather_limit(limit):
            res.append(pg.max_pool2d_with_indices_backward(go, x, ind, k, s, p, 1, ceil, layout="NHWC", out=out,
                                                           deterministic=True, num_threads=threads))
    return res


def _nan_gradients(rng: np.random.Generator, shape: tuple, dtype: np.dtype) -> np.ndarray:
    """Normal values, a third of them NaNs of both signs with distinct payloads (quiet and signalling), and -0."""
    go = rng.standard_normal(shape).astype(dtype)
    bits = go.view(f"u{dtype.itemsize}")
    pick = rng.random(shape) < 1 / 3
    if dtype == np.float32:
        nans = (np.uint32(0x7F800001) + rng.integers(0, 1 << 22, shape, dtype=np.uint32)
                | rng.integers(0, 2, shape, dtype=np.uint32) << np.uint32(31))
    else:
        nans = (np.uint64(0x7FF0000000000001) + rng.integers(0, 1 << 51, shape, dtype=np.uint64)
                | rng.integers(0, 2, shape, dtype=np.uint64) << np.uint64(63))
    bits[pick] = nans[pick]
    go.reshape(-1)[::11] = -0.0
    return go


@pytest.mark.parametrize("dtype", FLOATS, ids=["f32", "f64"])
@pytest.mark.parametrize("C", [32, 33, 47, 100])
@pytest.mark.parametrize("k, s, p, ceil", [(3, 1, 1, True), (3, 2, 1, False), (2, 2, 0, True), (2, 2, 0, False)])
def test_gather_same_bits_as_scatter_every_level(dtype, C, k, s, p, ceil):
    """Overlapping windows whose maxima coincide (spikes on a lattice) with NaN gradients: several covering
    outputs add NaNs of different payloads into one cell; the gather returns the scatter's bits.  k2s2 in
    floor mode on 9x10 leaves the last row uncovered: those cells must still be written (zeros)."""
    rng = np.random.default_rng(C + 10 * k)
    x = rng.standard_normal((2, 9, 10, C)).astype(dtype)
    x[:, ::2, ::3, :] += 100                       # the lattice cells win several overlapping windows
    for index_dtype in (np.int32, np.int64):
        y, ind = pg.max_pool2d_with_indices(x, k, s, p, 1, ceil, layout="NHWC", index_dtype=index_dtype)
        go = _nan_gradients(rng, y.shape, dtype)
        expect = None
        for level in pg.config.supported_isa_levels():
            with pg.config.set_isa_level(level):
                for threads in (1, 2):
                    gather, scatter = _gather_and_scatter(go, x, ind, k, s, p, ceil, threads)
                    np.testing.assert_array_equal(_bits(gather), _bits(scatter))
                    if expect is None:
                        expect = _bits(gather)
                    np.testing.assert_array_equal(_bits(gather), expect)
        # and the values (NaN where a NaN was added) against the slow reference
        ref = slow.max_pool2d_with_indices_backward(go.transpose(0, 3, 1, 2), (2, C, 9, 10),
                                                    ind.transpose(0, 3, 1, 2))
        got = expect.view(dtype).reshape(x.shape).transpose(0, 3, 1, 2)
        np.testing.assert_array_equal(np.isnan(got), np.isnan(ref))
        np.testing.assert_allclose(np.nan_to_num(got), np.nan_to_num(ref), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("dtype", FLOATS, ids=["f32", "f64"])
@pytest.mark.parametrize("C", [33, 47, 100])
@pytest.mark.parametrize("where", ["first", "last"])
def test_gather_index_outside_window_any_channel(dtype, C, where):
    """An in-plane index outside its window in the first or the last channel (the vectorised loop's tail for
    these C) escapes the gather's hit count only if the count is wrong: the result must be the scatter's."""
    rng = np.random.default_rng(C)
    x = rng.standard_normal((1, 8, 8, C)).astype(dtype)
    for index_dtype in (np.int32, np.int64):
        y, ind = pg.max_pool2d_with_indices(x, 2, 2, layout="NHWC", index_dtype=index_dtype)
        ind = ind.copy()
        ind[0, 3, 2, 0 if where == "first" else C - 1] = 0          # cell (0, 0): outside window (3, 2)
        go = rng.standard_normal(y.shape).astype(dtype)
        for level in pg.config.supported_isa_levels():
            with pg.config.set_isa_level(level):
                gather, scatter = _gather_and_scatter(go, x, ind, 2, 2, 0, False, 1)
                np.testing.assert_array_equal(_bits(gather), _bits(scatter))
        ref = slow.max_pool2d_with_indices_backward(go.transpose(0, 3, 1, 2), (1, C, 8, 8),
                                                    ind.transpose(0, 3, 1, 2))
        np.testing.assert_allclose(gather.transpose(0, 3, 1, 2), ref, rtol=1e-6)


def test_gather_bad_index_in_last_channel_message():
    """An index outside the plane in the last channel of C = 47 raises the scatter's error on both paths."""
    x = np.zeros((1, 4, 4, 47), np.float32)
    y, ind = pg.max_pool2d_with_indices(x, 2, layout="NHWC")
    ind = ind.copy()
    ind[0, 1, 1, 46] = -3
    messages = pgtest.gather_and_scatter_messages(x, y, ind, 2)
    assert messages[0] == messages[1]
    assert "got -3 at position (n=0, c=46, oh=1, ow=1)" in messages[0]


def test_gather_adaptive_takes_the_gather(monkeypatch):
    """Adaptive max backward channels-last with non-overlapping windows (the 14x14 -> 7x7 head) runs the gather
    and gets the scatter's bits."""
    taken = []
    fn = _max_pool_indices.gather_backward_cl
    monkeypatch.setattr(_max_pool_indices, "gather_backward_cl", lambda *a: taken.append(fn(*a)) or taken[-1])
    rng = np.random.default_rng(3)
    x = rng.standard_normal((2, 14, 14, 72)).astype(np.float32)
    y, ind = pg.adaptive_max_pool2d(x, (7, 7), layout="NHWC")
    go = _nan_gradients(rng, y.shape, np.dtype(np.float32))
    gather = pg.adaptive_max_pool2d_backward(go, x, ind, layout="NHWC", deterministic=True)
    assert taken == [False]
    with pgtest.gather_limit(-1):
        scatter = pg.adaptive_max_pool2d_backward(go, x, ind, layout="NHWC", deterministic=True, num_threads=2)
    np.testing.assert_array_equal(_bits(gather), _bits(scatter))
