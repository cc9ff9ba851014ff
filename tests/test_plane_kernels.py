"""The small-plane NCHW max-pooling kernels (issue 8, item 2): groups of planes as channels-last tiles in the
forward (``indexed.PlaneArgmax``), forced on and compared bit for bit with the path they replace and with the
slow reference, over dtypes, index dtypes, plane counts around the 32-plane group (fewer than one group, odd,
not a multiple of the group), padding, ceil_mode, dilation, adaptive windows, strided / misaligned / negative
views and thread counts 1-3."""
from __future__ import annotations

import numpy as np
import pytest

import pgtest
import poolgrad as pg
from poolgrad import _max_pool_indices, _scatter, indexed, slow
from pgtest import DTYPES, DTYPE_IDS
from poolgrad.dtypes import kernel_view

# (N, C, H, W, kernel, stride, padding, dilation, ceil_mode): plane counts N * C of 7 (below PLANES_MIN: the old
# path on both sides), 8 and 31 (one group padded to a vector block), 32, 33, 45, 64, 97, 130 (groups of uneven
# size), windows with padding, dilation, ceil_mode, overlap, non-square shapes
CASES = [
    (1, 7, 7, 7, (3, 3), (1, 1), (1, 1), (1, 1), True),
    (2, 4, 6, 9, (3, 2), (2, 1), (1, 1), (1, 2), True),
    (1, 31, 7, 7, (3, 3), (1, 1), (1, 1), (1, 1), True),
    (1, 32, 13, 13, (3, 3), (2, 2), (0, 0), (1, 1), False),
    (3, 11, 9, 11, (3, 3), (2, 2), (1, 1), (1, 1), False),
    (5, 9, 7, 7, (3, 3), (1, 1), (1, 1), (1, 1), True),
    (2, 32, 14, 14, (2, 2), (2, 2), (0, 0), (1, 1), True),
    (1, 97, 8, 9, (2, 3), (3, 1), (1, 1), (3, 2), True),
    (2, 65, 9, 8, (3, 3), (2, 3), (2, 1), (2, 1), True),
    (1, 64, 5, 5, (5, 5), (1, 1), (2, 2), (1, 1), False),
    (2, 33, 4, 4, (4, 4), (4, 4), (0, 0), (1, 1), False),
]
KINDS = ["normal", "ties", "nan"]
ALWAYS = ((float("inf"), 1 << 40),)      # PLANES_MAX_CELLS that sends every NCHW problem to the planes path
NEVER = ((float("inf"), 0),)             # ... and none


def _bits(a: np.ndarray) -> np.ndarray:
    """The raw bits of a float array (NaN payloads compared too)."""
    return np.ascontiguousarray(a).view(f"u{a.dtype.itemsize}")


def _forward(monkeypatch, limit, x, cfg, index_dtype, threads):
    monkeypatch.setattr(indexed, "PLANES_MAX_CELLS", limit)
    _, _, _, _, k, s, p, d, ceil = cfg
    return pg.max_pool2d_with_indices(x, k, s, p, d, ceil, index_dtype=index_dtype, num_threads=threads)


def _check(monkeypatch, x, x4, cfg, index_dtype, threads, reference):
    y, ind = _forward(monkeypatch, ALWAYS, x, cfg, index_dtype, threads)
    y0, ind0 = _forward(monkeypatch, NEVER, x, cfg, index_dtype, threads)
    np.testing.assert_array_equal(_bits(y), _bits(y0))
    np.testing.assert_array_equal(ind, ind0)
    assert ind.dtype == index_dtype
    if not reference:
        return
    _, _, _, _, k, s, p, d, ceil = cfg
    ref_y, ref_i = slow.max_pool2d_with_indices(x4, k, s, p, d, ceil)
    np.testing.assert_array_equal(ind, ref_i)
    np.testing.assert_array_equal(pgtest.as64(y), ref_y)
    # the stored values are the input elements themselves, bit for bit
    flat = x4.reshape(x4.shape[0], x4.shape[1], -1)
    picked = np.take_along_axis(flat, ind.reshape(flat.shape[0], flat.shape[1], -1).astype(np.int64), axis=2)
    np.testing.assert_array_equal(_bits(y.reshape(picked.shape)), _bits(picked))


@pytest.mark.parametrize("cfg", CASES)
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("kind", KINDS)
def test_forward_matches_old_path_and_reference(monkeypatch, cfg, dtype, kind):
    N, C, H, W = cfg[:4]
    rng = np.random.default_rng(C * 100 + H)
    x4 = pgtest.random_values(rng, (N, C, H, W), dtype, kind)
    for index_dtype in (np.int32, np.int64):
        for threads in (1, 2, 3):
            _check(monkeypatch, x4, x4, cfg, index_dtype, threads, reference=threads == 1)


@pytest.mark.parametrize("view", ["sliced_hw", "strided_c", "misaligned", "negative", "channels_last_few"])
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_forward_views(monkeypatch, view, dtype):
    """H/W slices and a channel stride (planes read with strides), a misaligned buffer (copied first), negative
    strides, and channels-last storage with fewer channels than the channels-last kernel takes (planes far
    apart: C is the contiguous axis, so the planes path does not apply and both sides run the old kernels)."""
    cfg = (3, 40, 9, 10, (3, 3), (2, 2), (1, 1), (1, 1), True)
    rng = np.random.default_rng(7)
    x4 = pgtest.random_values(rng, (3, 40, 9, 10), dtype, "ties")
    if view == "sliced_hw":
        big = np.zeros((3, 40, 18, 20), dtype)
        big[:, :, ::2, ::2] = x4
        x = big[:, :, ::2, ::2]
    elif view == "strided_c":
        big = np.zeros((3, 80, 9, 10), dtype)
        big[:, ::2] = x4
        x = big[:, ::2]
    elif view == "misaligned":
        raw = np.zeros(x4.size * x4.itemsize + 1, np.uint8)
        x = raw[1:].view(dtype).reshape(x4.shape)
        x[...] = x4
    elif view == "negative":
        flip = np.ascontiguousarray(x4[::-1, ::-1, ::-1, ::-1])
        x = flip[::-1, ::-1, ::-1, ::-1]
    else:
        x4 = x4[:, :20]
        cfg = (3, 20) + cfg[2:]
        x = np.ascontiguousarray(x4.transpose(0, 2, 3, 1)).transpose(0, 3, 1, 2)
    for threads in (1, 2, 3):
        _check(monkeypatch, x, x4, cfg, np.int64, threads, reference=threads == 1)


@pytest.mark.parametrize("dtype", [np.dtype(np.float16), pgtest.bfloat16], ids=["f16", "bf16"])
def test_forward_keeps_nan_payloads(monkeypatch, dtype):
    """16-bit maxima travel through the tiles as raw bits and are narrowed back exactly: signalling and quiet
    NaNs keep every payload bit."""
    rng = np.random.default_rng(3)
    x4 = pgtest.random_values(rng, (1, 40, 6, 6), dtype, "normal")
    bits = x4.view(np.uint16)
    nan_bits = [0x7c01, 0xfd55, 0x7e00, 0x7fff] if dtype == np.float16 else [0x7f81, 0xffc0, 0x7fa5, 0xff81]
    for i, b in enumerate(nan_bits):
        bits[0, 3 + i, 2 * i % 6, 1] = b
    _check(monkeypatch, x4, x4, (1, 40, 6, 6, (2, 2), (2, 2), (0, 0), (1, 1), False), np.int64, 2, True)


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("out_hw", [(7, 7), (3, 5), (20, 11), (1, 1)])
def test_adaptive_forward(monkeypatch, dtype, out_hw):
    """Adaptive windows (uneven, overlapping, more outputs than inputs) through the same tiles."""
    rng = np.random.default_rng(11)
    x4 = pgtest.random_values(rng, (2, 37, 14, 9), dtype, "ties")
    for threads in (1, 2, 3):
        monkeypatch.setattr(indexed, "PLANES_MAX_CELLS", ALWAYS)
        y, ind = pg.adaptive_max_pool2d(x4, out_hw, num_threads=threads)
        monkeypatch.setattr(indexed, "PLANES_MAX_CELLS", NEVER)
        y0, ind0 = pg.adaptive_max_pool2d(x4, out_hw, num_threads=threads)
        np.testing.assert_array_equal(_bits(y), _bits(y0))
        np.testing.assert_array_equal(ind, ind0)
        if threads > 1:
            continue
        ref_y, ref_i = slow.adaptive_max_pool2d(x4, out_hw)
        np.testing.assert_array_equal(ind, ref_i)
        np.testing.assert_array_equal(pgtest.as64(y), ref_y)


@pytest.mark.parametrize("adaptive", [False, True])
def test_forward_paths_taken(monkeypatch, adaptive):
    """The comparisons above compare two different kernels: the dispatchers report the path they ran."""
    taken = []
    for name in ("argmax_forward", "argmax_forward_uniform", "argmax_forward_planes"):
        fn = getattr(_max_pool_indices, name)
        monkeypatch.setattr(_max_pool_indices, name, lambda *a, _fn=fn: taken.append(_fn(*a)) or taken[-1])
    x = np.zeros((2, 40, 5, 6), np.float32)
    fn = (lambda: pg.adaptive_max_pool2d(x, 3)) if adaptive else (lambda: pg.max_pool2d_with_indices(x, 2))
    fn()
    monkeypatch.setattr(indexed, "PLANES_MAX_CELLS", NEVER)
    fn()
    assert taken == ["planes", "windows" if adaptive else "rows"]


def test_forward_thresholds(monkeypatch):
    """Where the planes forward runs by default: small planes, at least PLANES_MIN of them; not large planes for
    their windows (PLANES_MAX_CELLS), not fewer than 8 planes."""
    seen = []
    fn = _max_pool_indices.argmax_forward_planes
    monkeypatch.setattr(_max_pool_indices, "argmax_forward_planes", lambda *a: seen.append(a[2].shape) or fn(*a))
    for shape, k, s, expect in [((8, 64, 14, 14), 2, 2, True), ((1, 7, 14, 14), 2, 2, False),
                                ((1, 8, 14, 14), 2, 2, True),
                                ((1, 32, 7, 7), 3, 1, True), ((1, 64, 64, 64), 2, 2, False),
                                ((1, 64, 64, 64), 3, 1, True), ((1, 32, 128, 128), 3, 1, False)]:
        seen.clear()
        pg.max_pool2d_with_indices(np.zeros(shape, np.float32), k, s, k // 2 if s == 1 else 0)
        assert bool(seen) == expect, shape


def test_plane_groups():
    """Groups hold 32-64 planes; with at least as many groups as threads, a multiple of the thread count; 8 to
    31 planes make one group, fewer none."""
    for planes in range(32, 700, 7):
        for nt in (1, 2, 3, 4):
            g = _max_pool_indices.plane_groups(planes, nt)
            bounds = [i * planes // g for i in range(g + 1)]
            sizes = np.diff(bounds)
            assert sizes.min() >= 32 and sizes.max() <= 64
            if planes // 32 >= nt:
                assert g % nt == 0
    assert [_max_pool_indices.plane_groups(p, 2) for p in (1, 7, 8, 31)] == [0, 0, 1, 1]


# ---------------------------------------------------------------- backward: the planes scatter

def _backward(monkeypatch, limit, go, x, ind, cfg, **kw):
    monkeypatch.setattr(_scatter, "PLANES_MAX_CELLS", limit)
    if cfg is None:
        return pg.adaptive_max_pool2d_backward(go, x, ind, **kw)
    _, _, _, _, k, s, p, d, ceil = cfg
    return pg.max_pool2d_with_indices_backward(go, x, ind, k, s, p, d, ceil, **kw)


def _check_backward(monkeypatch, go, x, ind, cfg, **kw):
    """Planes scatter (forced on) == band scatter (planes off), bit for bit; returns grad_x."""
    gx = _backward(monkeypatch, 1 << 40, go, x, ind, cfg, **kw)
    gx0 = _backward(monkeypatch, 0, go, x, ind, cfg, **kw)
    np.testing.assert_array_equal(_bits(gx), _bits(gx0))
    return gx


@pytest.mark.parametrize("cfg", CASES)
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_backward_matches_band_scatter_and_reference(monkeypatch, cfg, dtype):
    N, C, H, W, k, s, p, d, ceil = cfg
    rng = np.random.default_rng(C * 10 + W)
    x = pgtest.random_values(rng, (N, C, H, W), dtype, "ties")
    for index_dtype in (np.int32, np.int64):
        _, ind = pg.max_pool2d_with_indices(x, k, s, p, d, ceil, index_dtype=index_dtype)
        go = pgtest.random_values(rng, ind.shape, dtype)
        for det in (True, False):
            for threads in (1, 2, 3):
                gx = _check_backward(monkeypatch, go, x, ind, cfg, deterministic=det, num_threads=threads)
                if det and threads == 1:
                    ref = slow.max_pool2d_with_indices_backward(go, x.shape, ind)
                    np.testing.assert_allclose(pgtest.as64(gx), ref, **pgtest.tolerance(dtype))


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("out_hw", [(7, 7), (3, 5), (20, 11)])
def test_backward_adaptive(monkeypatch, dtype, out_hw):
    rng = np.random.default_rng(5)
    x = pgtest.random_values(rng, (2, 37, 14, 9), dtype, "ties")
    _, ind = pg.adaptive_max_pool2d(x, out_hw)
    go = pgtest.random_values(rng, ind.shape, dtype)
    for threads in (1, 2, 3):
        gx = _check_backward(monkeypatch, go, x, ind, None, deterministic=True, num_threads=threads)
    np.testing.assert_allclose(pgtest.as64(gx), slow.adaptive_max_pool2d_backward(go, x.shape, ind),
                               **pgtest.tolerance(dtype))


@pytest.mark.parametrize("view", ["strided_go", "strided_ind", "strided_out", "misaligned_go", "negative"])
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_backward_views(monkeypatch, view, dtype):
    """grad_output / indices that are not dense planes (the row loop of the planes kernel), a strided out=
    (written through a dense copy), a misaligned grad_output (copied), negative strides."""
    cfg = (3, 40, 9, 10, (3, 3), (1, 1), (1, 1), (1, 1), True)
    rng = np.random.default_rng(9)
    x = pgtest.random_values(rng, (3, 40, 9, 10), dtype, "ties")
    _, ind = pg.max_pool2d_with_indices(x, *cfg[4:])
    go = pgtest.random_values(rng, ind.shape, dtype)
    kw = {}
    if view == "strided_go":
        big = np.zeros(go.shape[:3] + (2 * go.shape[3],), dtype)
        big[..., ::2] = go
        go = big[..., ::2]
    elif view == "strided_ind":
        big = np.zeros(ind.shape[:2] + (2 * ind.shape[2],) + ind.shape[3:], ind.dtype)
        big[:, :, ::2] = ind
        ind = big[:, :, ::2]
    elif view == "strided_out":
        kw["out"] = np.zeros((3, 80, 9, 10), dtype)[:, ::2]
    elif view == "misaligned_go":
        raw = np.zeros(go.size * go.itemsize + 1, np.uint8)
        moved = raw[1:].view(dtype).reshape(go.shape)
        moved[...] = go
        go = moved
    else:
        go = np.ascontiguousarray(go[::-1, ::-1, ::-1, ::-1])[::-1, ::-1, ::-1, ::-1]
        ind = np.ascontiguousarray(ind[::-1, ::-1, ::-1, ::-1])[::-1, ::-1, ::-1, ::-1]
    ref = slow.max_pool2d_with_indices_backward(go, x.shape, ind)
    for threads in (1, 2, 3):
        gx = _check_backward(monkeypatch, go, x, ind, cfg, deterministic=True, num_threads=threads, **kw)
        np.testing.assert_allclose(pgtest.as64(gx), ref, **pgtest.tolerance(dtype))


@pytest.mark.parametrize("where", ["other_row", "bad"])
def test_backward_index_outside_window(monkeypatch, where):
    """An index outside its window's rows but inside the plane is legal: the planes kernel flags it and the exact
    pass reruns (same bits as the band kernel's route); one outside the plane raises the same message."""
    cfg = (2, 40, 7, 7, (3, 3), (1, 1), (1, 1), (1, 1), True)
    rng = np.random.default_rng(2)
    x = rng.standard_normal((2, 40, 7, 7)).astype(np.float32)
    _, ind = pg.max_pool2d_with_indices(x, 3, 1, 1, 1, True)
    go = rng.standard_normal(ind.shape).astype(np.float32)
    ind = ind.copy()
    ind[1, 33, 0, 2] = 48 if where == "other_row" else 49
    if where == "bad":
        msgs = []
        for limit in (1 << 40, 0):
            monkeypatch.setattr(_scatter, "PLANES_MAX_CELLS", limit)
            with pytest.raises(pg.ParamInvalidError) as err:
                pg.max_pool2d_with_indices_backward(go, x, ind, 3, 1, 1, 1, True)
            msgs.append(str(err.value))
        assert msgs[0] == msgs[1] and "(n=1, c=33, oh=0, ow=2)" in msgs[0]
        return
    gx = _check_backward(monkeypatch, go, x, ind, cfg, deterministic=True, num_threads=2)
    np.testing.assert_allclose(gx, slow.max_pool2d_with_indices_backward(go, x.shape, ind),
                               **pgtest.tolerance(np.dtype(np.float32)))


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_backward_prezeroed(monkeypatch, dtype):
    """grad_x known to be zeros (a fresh allocation: the kernels skip zeroing it): same bits."""
    rng = np.random.default_rng(4)
    x = pgtest.random_values(rng, (2, 40, 7, 7), dtype, "ties")
    _, ind = pg.max_pool2d_with_indices(x, 3, 1, 1, 1, True)
    go = pgtest.random_values(rng, ind.shape, dtype)
    row_lo, row_hi = np.maximum(np.arange(7) - 1, 0), np.minimum(np.arange(7) + 2, 7)
    out = []
    for limit in (1 << 40, 0):
        monkeypatch.setattr(_scatter, "PLANES_MAX_CELLS", limit)
        gx = np.zeros(x.shape, dtype)
        dt = {"float32": "f32", "float64": "f64", "float16": "f16", "bfloat16": "bf16"}[np.dtype(dtype).name]
        _scatter.scatter_grad(dt, "i64", kernel_view(go), ind, kernel_view(gx), row_lo, row_hi, True, 2,
                              prezeroed=True)
        out.append(gx)
    np.testing.assert_array_equal(_bits(out[0]), _bits(out[1]))
    np.testing.assert_array_equal(_bits(out[0]), _bits(pg.max_pool2d_with_indices_backward(go, x, ind, 3, 1, 1,
                                                                                            1, True)))


def test_backward_path_taken(monkeypatch):
    taken = []
    for name in ("scatter_backward", "scatter_backward_planes"):
        fn = getattr(_max_pool_indices, name)
        monkeypatch.setattr(_max_pool_indices, name, lambda *a, _fn=fn, _n=name: taken.append(_n) or _fn(*a))
    x = np.zeros((2, 40, 7, 7), np.float32)
    _, ind = pg.max_pool2d_with_indices(x, 3, 1, 1)
    go = np.ones(ind.shape, np.float32)
    pg.max_pool2d_with_indices_backward(go, x, ind, 3, 1, 1)
    monkeypatch.setattr(_scatter, "PLANES_MAX_CELLS", 0)
    pg.max_pool2d_with_indices_backward(go, x, ind, 3, 1, 1)
    assert taken == ["scatter_backward_planes", "scatter_backward"]
