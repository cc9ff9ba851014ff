"""The flat forward of 2x2 windows that tile small NCHW planes exactly (issue 10: ``pg_flat2`` in pg_argmax.h,
``indexed.FLAT_2X2``): forced on and off and compared bit for bit with the planes forward it replaces (the
channels-last tiles) and with the slow reference, over shapes where it is taken (plane counts around the 32-plane
group, one to many output rows per vector, the last block of a plane partial, float32 and float64, int32 and
int64 indices, strided channels, adaptive halving) and where it just is not (odd sizes, padding, ceil_mode that
adds a window, dilation, overlapping windows, output rows longer than a vector, 16-bit types, strided rows),
NaN and tied inputs, 1 to 3 threads, every ISA level this CPU runs, and plan replays."""
from __future__ import annotations

import numpy as np
import pytest

import pgtest
import poolgrad as pg
from poolgrad import _max_pool_indices, indexed, slow
from pgtest import DTYPES, DTYPE_IDS

KINDS = ["normal", "ties", "nan"]

# (N, C, H, W): Wo = 4 (4 rows per vector), 7 (2 rows, the last block of a 14-row plane one row), 16 (a whole
# float32 vector per row), 1 (16 rows, more than the plane has), 2 on 40 rows (blocks 8 + 8 + 4); plane counts
# 8, 31, 32, 33, 64, 97, 130
TAKEN = [(2, 16, 8, 8), (1, 8, 14, 14), (1, 31, 4, 6), (3, 11, 6, 2), (1, 33, 40, 4), (2, 32, 2, 32),
         (1, 97, 10, 12), (2, 65, 6, 16)]
# planes of at most half a vector of outputs, side by side in a vector (2x2 planes: 16 per vector, 4x4: 4, 4x8:
# 2, 6x4: 2 with 4 spare lanes; the last vector of a group partial)
PACKED = [(8, 16, 2, 2), (2, 17, 4, 4), (1, 45, 4, 8), (3, 13, 6, 4), (1, 130, 4, 4)]
# float64 takes output rows up to 8 lanes: (16 -> 8 one row per vector, 6 -> 3 two rows)
TAKEN_F64 = [(2, 16, 8, 16), (1, 40, 12, 6)]
# (N, C, H, W, kernel, stride, padding, dilation, ceil_mode) that the flat forward does not take
NOT_TAKEN = [
    (2, 16, 9, 8, 2, 2, 0, 1, False),      # odd H: the last input row is no window's
    (2, 16, 8, 9, 2, 2, 0, 1, False),      # odd W
    (2, 16, 9, 9, 2, 2, 0, 1, True),       # ceil_mode adds a one-cell window
    (2, 16, 8, 8, 2, 2, 1, 1, False),      # padding
    (2, 16, 8, 8, 2, 2, 0, 2, False),      # dilation
    (2, 16, 8, 8, 2, 1, 0, 1, False),      # overlapping windows
    (2, 16, 8, 8, 3, 3, 1, 1, True),       # 3x3 windows
    (1, 32, 4, 34, 2, 2, 0, 1, False),     # float32 output rows of 17 lanes
]


def _bits(a: np.ndarray) -> np.ndarray:
    """The raw bits of a float array (NaN payloads compared too)."""
    return np.ascontiguousarray(a).view(f"u{a.dtype.itemsize}")


_PLANES = _max_pool_indices.argmax_forward_planes


def _spy(monkeypatch) -> list:
    """Record the path every planes-forward call reports (``"flat"`` or ``"planes"``).  The spy takes no
    ``record=``, so plans call it on every run instead of capturing the kernel call below it."""
    taken: list = []
    monkeypatch.setattr(_max_pool_indices, "argmax_forward_planes",
                        lambda *a, **k: taken.append(_PLANES(*a, **k)) or taken[-1])
    return taken


def _both(monkeypatch, run):
    """``run()`` with the flat forward forced on wherever it can run (however few lanes it fills), then off: the
    two results and the paths reported."""
    taken = _spy(monkeypatch)
    monkeypatch.setattr(indexed, "FLAT_2X2", True)
    monkeypatch.setattr(indexed, "FLAT_MIN_FILL", 0.0)
    got = run()
    flat_paths = list(taken)
    taken.clear()
    monkeypatch.setattr(indexed, "FLAT_2X2", False)
    old = run()
    assert taken and set(taken) == {"planes"}
    return got, old, flat_paths


def _expect_flat() -> str:
    """The path a taken case reports: the flat kernel is AVX-512 only, lower levels run the tiles."""
    return "flat" if pg.config.isa_level() == "avx512" else "planes"


def _ref(x, k=2, s=2, p=0, d=1, ceil=False):
    """The slow reference's values and indices (square parameters)."""
    return slow.max_pool2d_with_indices(x, (k, k), (s, s), (p, p), (d, d), ceil)


def _same(got, old) -> None:
    np.testing.assert_array_equal(_bits(got[0]), _bits(old[0]))
    np.testing.assert_array_equal(got[1], old[1])
    assert got[1].dtype == old[1].dtype


def _reference(x4, y, ind, ref_y, ref_i) -> None:
    np.testing.assert_array_equal(ind, ref_i)
    np.testing.assert_array_equal(pgtest.as64(y), ref_y)
    flat = x4.reshape(x4.shape[0], x4.shape[1], -1)
    picked = np.take_along_axis(flat, ind.reshape(flat.shape[0], flat.shape[1], -1).astype(np.int64), axis=2)
    np.testing.assert_array_equal(_bits(y.reshape(picked.shape)), _bits(picked))


def _cases():
    for shape in TAKEN + PACKED:
        yield shape, np.dtype(np.float32)
    for shape in TAKEN_F64 + TAKEN[:3] + PACKED[:3]:
        yield shape, np.dtype(np.float64)


@pytest.mark.parametrize("shape,dtype", list(_cases()), ids=lambda v: "x".join(map(str, v))
                         if isinstance(v, tuple) else np.dtype(v).name)
@pytest.mark.parametrize("kind", KINDS)
def test_taken_matches_tiles_and_reference(monkeypatch, shape, dtype, kind):
    rng = np.random.default_rng(sum(shape))
    x = pgtest.random_values(rng, shape, dtype, kind)
    ref_y, ref_i = _ref(x)
    for index_dtype in (np.int32, np.int64):
        for threads in (1, 2, 3):
            for ceil in (False, True):          # even sizes: ceil_mode adds no window
                got, old, paths = _both(monkeypatch, lambda: pg.max_pool2d_with_indices(
                    x, 2, 2, 0, 1, ceil, index_dtype=index_dtype, num_threads=threads))
                assert paths == [_expect_flat()]
                _same(got, old)
                _reference(x, *got, ref_y, ref_i)


@pytest.mark.parametrize("shape,dtype", list(_cases()), ids=lambda v: "x".join(map(str, v))
                         if isinstance(v, tuple) else np.dtype(v).name)
def test_adaptive_halving(monkeypatch, shape, dtype):
    """Adaptive pooling to half the size has the same windows."""
    rng = np.random.default_rng(3)
    x = pgtest.random_values(rng, shape, dtype, "ties")
    out_hw = (shape[2] // 2, shape[3] // 2)
    ref_y, ref_i = slow.adaptive_max_pool2d(x, out_hw)
    for threads in (1, 3):
        got, old, paths = _both(monkeypatch, lambda: pg.adaptive_max_pool2d(x, out_hw, num_threads=threads))
        assert paths == [_expect_flat()]
        _same(got, old)
        _reference(x, *got, ref_y, ref_i)


@pytest.mark.parametrize("cfg", NOT_TAKEN)
@pytest.mark.parametrize("kind", ["ties", "nan"])
def test_not_taken(monkeypatch, cfg, kind):
    N, C, H, W, k, s, p, d, ceil = cfg
    rng = np.random.default_rng(H * W)
    x = pgtest.random_values(rng, (N, C, H, W), np.float32, kind)
    got, old, paths = _both(monkeypatch, lambda: pg.max_pool2d_with_indices(x, k, s, p, d, ceil, num_threads=2))
    assert paths == ["planes"]
    _same(got, old)
    _reference(x, *got, *_ref(x, k, s, p, d, ceil))


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_dtypes_and_long_rows(monkeypatch, dtype):
    """16-bit types keep the tiles; float64 rows of 9 outputs (more than one vector) too."""
    rng = np.random.default_rng(5)
    for shape in [(2, 16, 8, 8), (1, 32, 4, 18)]:
        x = pgtest.random_values(rng, shape, dtype, "nan")
        got, old, paths = _both(monkeypatch, lambda: pg.max_pool2d_with_indices(x, 2, 2))
        fits = dtype == np.float32 or (dtype == np.float64 and shape[3] <= 16)
        assert paths == [_expect_flat() if fits else "planes"]
        _same(got, old)
        _reference(x, *got, *_ref(x))


@pytest.mark.parametrize("view", ["strided_c", "sliced_rows", "negative", "misaligned"])
@pytest.mark.parametrize("hw", [(8, 10), (4, 4)])
def test_views(monkeypatch, view, hw):
    """Planes apart in memory (a channel stride: 4x4 planes then go a plane per vector, not packed) and a
    misaligned buffer (copied first) are taken; rows that are not dense and negative strides are not (the tiles
    read them with strides)."""
    rng = np.random.default_rng(9)
    H, W = hw
    x4 = pgtest.random_values(rng, (2, 40, H, W), np.float32, "ties")
    expect = _expect_flat()
    if view == "strided_c":
        big = np.zeros((2, 80, H, W), np.float32)
        big[:, ::2] = x4
        x = big[:, ::2]
    elif view == "sliced_rows":
        big = np.zeros((2, 40, 2 * H, W), np.float32)
        big[:, :, ::2] = x4
        x = big[:, :, ::2]
        expect = "planes"
    elif view == "negative":
        flip = np.ascontiguousarray(x4[::-1, ::-1, ::-1, ::-1])
        x = flip[::-1, ::-1, ::-1, ::-1]
        expect = "planes"
    else:
        raw = np.zeros(x4.nbytes + 1, np.uint8)
        x = raw[1:].view(np.float32).reshape(x4.shape)
        x[...] = x4
    for threads in (1, 2, 3):
        got, old, paths = _both(monkeypatch, lambda: pg.max_pool2d_with_indices(x, 2, 2, num_threads=threads))
        assert paths == [expect]
        _same(got, old)
        _reference(x4, *got, *_ref(x4))


def test_every_isa_level(monkeypatch):
    """The flat kernel runs at AVX-512 only; every level gives the same bits (lower ones run the tiles)."""
    rng = np.random.default_rng(13)
    for dtype in (np.float32, np.float64):
        x = pgtest.random_values(rng, (2, 33, 12, 8), dtype, "nan")
        want = pg.max_pool2d_with_indices(x, 2, 2)
        for level in pg.config.supported_isa_levels():
            with pg.config.set_isa_level(level):
                taken = _spy(monkeypatch)
                got = pg.max_pool2d_with_indices(x, 2, 2, num_threads=2)
                assert taken == ["flat" if level == "avx512" else "planes"], level
                monkeypatch.undo()
            _same(got, want)


def test_signed_zeros_and_nan_payloads(monkeypatch):
    """Ties between -0.0 and +0.0 keep the first in window order, and the last NaN of a window wins with its
    payload: the values are the input elements themselves."""
    x = np.zeros((1, 8, 4, 4), np.float32)
    bits = x.view(np.uint32)
    bits[0, 0, 0, 0] = 0x80000000                  # -0.0 first, +0.0 after: -0.0 stays
    bits[0, 1, 1, 1] = 0x80000000                  # +0.0 first: stays
    bits[0, 2, 0, 1], bits[0, 2, 1, 0] = 0x7fc00001, 0xffc00002        # two NaNs: the later one (row 1) wins
    bits[0, 3, 0, 0], bits[0, 3, 1, 1] = 0x7f800001, 0x7fc00003        # signalling NaN, then a quiet one
    bits[0, 4, 2, 3] = 0x7f800000                  # +inf among zeros
    bits[0, 5, 3, 2] = 0xff800000                  # -inf: not a maximum
    got, old, paths = _both(monkeypatch, lambda: pg.max_pool2d_with_indices(x, 2, 2))
    assert paths == [_expect_flat()]
    _same(got, old)
    _reference(x, *got, *_ref(x))
    assert got[0].view(np.uint32)[0, 0, 0, 0] == 0x80000000
    assert got[1][0, 2, 0, 0] == 4 and got[0].view(np.uint32)[0, 2, 0, 0] == 0xffc00002
    assert got[1][0, 3, 0, 0] == 5 and got[0].view(np.uint32)[0, 3, 0, 0] == 0x7fc00003


def test_default_threshold(monkeypatch):
    """By default the flat forward runs where its vectors fill at least FLAT_MIN_FILL of their lanes (16 float32
    or 8 float64: whole planes side by side where small planes lie one after another, else whole output rows of
    one plane), the tiles elsewhere."""
    taken = _spy(monkeypatch)
    apart = np.zeros((1, 64, 4, 4), np.float32)[:, ::2]         # planes 32 cells apart: no packing
    for x, flat in [(np.zeros((2, 16, 8, 8), np.float32), True),      # 4 rows of 4: 16 of 16 lanes
                    (np.zeros((1, 32, 6, 6), np.float32), True),      # 3 rows of 3: 9 of 16
                    (np.zeros((1, 32, 4, 4), np.float32), True),      # 4 planes of 2x2: 16 of 16
                    (np.zeros((1, 32, 2, 6), np.float32), True),      # 5 planes of 1x3: 15 of 16
                    (np.zeros((1, 32, 2, 2), np.float64), True),      # 8 planes of 1x1: 8 of 8
                    (apart, False),                                   # 2 rows of 2 of one plane: 4 of 16
                    (np.zeros((1, 64, 2, 2), np.float32)[:, ::2], False),    # 1 of 16
                    (np.zeros((1, 64, 4, 4), np.float64)[:, ::2], True),     # 4 of 8
                    (np.zeros((1, 32, 8, 8), np.float16), False)]:
        taken.clear()
        pg.max_pool2d_with_indices(x, 2, 2)
        assert taken == ["flat" if flat and _expect_flat() == "flat" else "planes"], (x.shape, x.dtype)


def test_plan_replays(monkeypatch):
    """A plan records the flat call once and replays it on other arrays (and through other outputs: the
    kernel call's pointers are moved, the windows kept)."""
    rng = np.random.default_rng(17)
    xs = [pgtest.random_values(rng, (2, 16, 8, 8), np.float32, kind) for kind in KINDS]
    for index_dtype in (np.int32, np.int64):
        plan = pg.plan_max_pool2d_with_indices(xs[0], 2, 2, index_dtype=index_dtype, num_threads=1)
        aplan = pg.plan_adaptive_max_pool2d(xs[0], (4, 4), index_dtype=index_dtype, num_threads=1)
        for _ in range(3):
            for x in xs:
                y, ind = plan(x)
                ay, aind = aplan(x)
                ref_y, ref_i = _ref(x)
                _reference(x, y, ind, ref_y, ref_i)
                _reference(x, ay, aind, ref_y, ref_i)
                assert ind.dtype == index_dtype
        assert plan._launch_record is not None and plan._launch_record.kernel is not None
        assert aplan._launch_record is not None and aplan._launch_record.kernel is not None


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("adaptive", [False, True])
def test_c_api_executes_without_the_gil(dtype, adaptive):
    """C API plans capture the flat kernel call too: executes from several threads at once run it without the
    GIL, with the Python API's bits."""
    from test_capi import forward_plan_from_threads, params
    rng = np.random.default_rng(29)
    xs = [pgtest.random_values(rng, (2, 16, 8, 8), dtype, kind) for kind in KINDS + ["normal"]]
    if adaptive:
        wants = [pg.adaptive_max_pool2d(x, (4, 4)) for x in xs]
        op, pr = 3, params()
    else:
        wants = [pg.max_pool2d_with_indices(x, 2, 2) for x in xs]
        op, pr = 1, params(kernel=(2, 2), stride=(2, 2), padding=(0, 0))
    with forward_plan_from_threads(op, pr, xs, wants):
        pass
