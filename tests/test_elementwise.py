"""Tests of ``max_pooling_grad`` (aclnnMaxPoolingGrad): ``dx = dy if x == y else 0`` element-wise."""
from __future__ import annotations

import threading

import numpy as np
import pytest

import pgtest
from pgtest import DTYPE_IDS, DTYPES
from poolgrad import elementwise
from poolgrad.dtypes import bf16_to_f32, bfloat16, f16_to_f32
from poolgrad.elementwise import max_pooling_grad
from poolgrad.errors import ParamInvalidError, ParamNullptrError
from poolgrad.slow.elementwise import max_pooling_grad as slow_max_pooling_grad

THREADS = [1, 2, 3, 7]
POOL = np.array([0.0, -0.0, 1.0, -1.0, 2.5, 3.0, 1e-3, np.inf, -np.inf, np.nan])


def bits(a: np.ndarray) -> np.ndarray:
    a = np.asarray(a)
    return a.view(f"u{a.dtype.itemsize}")


def assert_bits_equal(got: np.ndarray, want: np.ndarray) -> None:
    assert got.shape == want.shape and got.dtype == want.dtype
    np.testing.assert_array_equal(bits(got), bits(want))


def make_case(shape, dtype, rng, nan_dy=True):
    """dy, x, y of one shape and dtype, about half of the positions equal, with NaN, +-inf and +-0."""
    x = rng.choice(POOL, size=shape)
    other = rng.choice(POOL, size=shape)
    y = np.where(rng.random(shape) < 0.5, x, other)
    # some +0 / -0 pairs, which must compare equal
    zero = rng.random(shape) < 0.1
    x = np.where(zero, 0.0, x)
    y = np.where(zero, -0.0, y)
    dy = rng.standard_normal(shape) * 4
    if nan_dy:
        dy = np.where(rng.random(shape) < 0.05, np.nan, dy)
    return dy.astype(dtype), x.astype(dtype), y.astype(dtype)


def expected(dy, x, y):
    return slow_max_pooling_grad(dy, x, y)


# ------------------------------------------------------------------------------------------------ values

@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("ndim", range(1, 9))
def test_matches_reference_all_ranks(dtype, ndim):
    rng = np.random.default_rng(ndim)
    shape = tuple(int(s) for s in rng.integers(1, 5, size=ndim))
    if np.prod(shape) < 8:
        shape = (8,) + shape[1:]
    dy, x, y = make_case(shape, dtype, rng)
    got = max_pooling_grad(dy, x, y)
    assert_bits_equal(got, expected(dy, x, y))
    # sanity of the reference itself: the selection is what it should be
    eq = x.astype(np.float64) == y.astype(np.float64)
    assert eq.any() and not eq.all()


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_special_values(dtype):
    nan, inf = np.nan, np.inf
    x = np.array([1.0, 1.0, nan, nan, inf, -inf, inf, -0.0, 0.0, 0.0, 2.0, -2.0], dtype=dtype)
    y = np.array([1.0, 2.0, nan, 1.0, inf, -inf, -inf, 0.0, -0.0, 0.0, -2.0, -2.0], dtype=dtype)
    dy = np.array([10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21], dtype=dtype)
    want = np.array([10, 0, 0, 0, 14, 15, 0, 17, 18, 19, 0, 21], dtype=dtype)
    got = max_pooling_grad(dy, x, y)
    assert_bits_equal(got, want)
    assert not np.signbit(got.astype(np.float64)).any()  # unselected elements are +0.0


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_gradient_bits_copied(dtype):
    """Selected gradients are copied bit for bit: NaN payloads, signalling NaNs, -0.0, subnormals, inf."""
    u = np.dtype(f"u{np.dtype(dtype).itemsize}")
    if u.itemsize == 2:
        pat = [0x7e01, 0x7c01, 0xfe33, 0x8000, 0x0001, 0x7f81, 0xffff, 0x7c00]
    elif u.itemsize == 4:
        pat = [0x7fc00123, 0x7f800001, 0xffc00000, 0x80000000, 0x00000001, 0x7f800000, 0xff812345, 0x3f800000]
    else:
        pat = [0x7ff8000000000123, 0x7ff0000000000001, 0xfff8000000000000, 0x8000000000000000, 1,
               0x7ff0000000000000, 0xfff0000000001234, 0x3ff0000000000000]
    dy = np.array(pat, dtype=u).view(dtype)
    x = np.ones(len(pat), dtype=dtype)
    got = max_pooling_grad(dy, x, x.copy())
    np.testing.assert_array_equal(bits(got), np.array(pat, dtype=u))
    inplace = dy.copy()
    assert max_pooling_grad(inplace, x, x.copy(), out=inplace) is inplace
    np.testing.assert_array_equal(bits(inplace), np.array(pat, dtype=u))


@pytest.mark.parametrize("code", ["f16", "bf16"])
def test_16bit_comparison_all_bit_patterns(code):
    """The 16-bit kernels compare on the bits; check them against comparing the exact float32 widenings
    (the library's own C widening) for all 65,536 patterns against several partners each."""
    dtype = np.dtype(np.float16) if code == "f16" else bfloat16
    widen = f16_to_f32 if code == "f16" else bf16_to_f32
    a = np.arange(65536, dtype=np.uint32).astype(np.uint16)
    partners = [a, a ^ 0x8000, (a + 1).astype(np.uint16), (a - 1).astype(np.uint16), np.zeros_like(a),
                np.full_like(a, 0x8000), a ^ 0x0001, a ^ 0x0040, np.full_like(a, 0x7c00),
                np.full_like(a, 0x7f80)]
    dy = np.full(a.shape, 1.0, dtype=dtype)
    for b in partners:
        want = widen(a) == widen(b)
        got = max_pooling_grad(dy, a.view(dtype), b.view(dtype), num_threads=2)
        np.testing.assert_array_equal(got.astype(np.float32) == 1.0, want)


# ------------------------------------------------------------------------------------------------ layouts

@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_strided_variants_same_layout(dtype):
    rng = np.random.default_rng(1)
    dy, x, y = make_case((3, 4, 5, 6), dtype, rng)
    want = expected(dy, x, y)
    variants = {k: [v for _, v in pgtest.strided_variants(a)] for k, a in (("dy", dy), ("x", x), ("y", y))}
    for i in range(len(variants["dy"])):
        got = max_pooling_grad(variants["dy"][i], variants["x"][i], variants["y"][i])
        assert_bits_equal(got, want)


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_strided_variants_mixed_layouts(dtype):
    rng = np.random.default_rng(2)
    dy, x, y = make_case((5, 3, 7), dtype, rng)
    want = expected(dy, x, y)
    vd = [v for _, v in pgtest.strided_variants(dy)]
    vx = [v for _, v in pgtest.strided_variants(x)]
    vy = [v for _, v in pgtest.strided_variants(y)]
    n = len(vd)
    for i in range(n):
        for j in range(n):
            got = max_pooling_grad(vd[i], vx[j], vy[(i + 2 * j) % n])
            assert_bits_equal(got, want)


def test_transposed_and_broadcast_inputs():
    rng = np.random.default_rng(3)
    dy, x, y = make_case((6, 9), np.float32, rng)
    got = max_pooling_grad(dy.T, x.T, y.T)
    assert_bits_equal(got, expected(dy, x, y).T)
    # a read-only broadcast view is a legal input (reading the same element twice is harmless)
    yb = np.broadcast_to(y[:1], y.shape)
    assert_bits_equal(max_pooling_grad(dy, x, yb), expected(dy, x, np.ascontiguousarray(yb)))


def test_misaligned_and_partial_element_strides():
    rng = np.random.default_rng(4)
    dy, x, y = make_case((40,), np.float32, rng)
    want = expected(dy, x, y)

    def misaligned(a):
        buf = np.zeros(a.nbytes + 1, np.uint8)
        m = buf[1:].view(a.dtype)
        m[...] = a
        assert not m.flags.aligned
        return m

    def odd_stride(a):  # a stride of 6 bytes for 4-byte elements: partial-element strides, misaligned too
        buf = np.zeros(6 * len(a) + 8, np.uint8)
        out = np.ndarray(a.shape, np.float32, buffer=buf, offset=0, strides=(6,))
        out[...] = a
        return out

    for f in (misaligned, odd_stride):
        assert_bits_equal(max_pooling_grad(f(dy), f(x), f(y)), want)
        o = f(np.zeros_like(dy))
        assert max_pooling_grad(dy, x, y, out=o) is o
        assert_bits_equal(np.ascontiguousarray(o), want)
        d = f(dy)
        assert max_pooling_grad(d, x, y, out=d) is d
        assert_bits_equal(np.ascontiguousarray(d), want)


def test_output_follows_dy_memory_order():
    rng = np.random.default_rng(5)
    dy, x, y = make_case((4, 5, 6), np.float64, rng)
    got = max_pooling_grad(np.asfortranarray(dy), x, y)
    assert got.flags.f_contiguous
    perm = (1, 2, 0)
    dyp = np.ascontiguousarray(dy.transpose(perm)).transpose(np.argsort(perm))
    got = max_pooling_grad(dyp, x, y)
    assert np.argsort([-s for s in got.strides]).tolist() == np.argsort([-s for s in dyp.strides]).tolist()
    assert got.flags.c_contiguous is False
    assert_bits_equal(got, expected(dy, x, y))
    assert max_pooling_grad(dy[:, ::2], x[:, ::2], y[:, ::2]).flags.c_contiguous


@pytest.mark.parametrize("shape", [(0,), (3, 0, 2), (0, 5, 1, 1, 1, 1, 1, 2)])
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_zero_size(shape, dtype):
    dy, x, y = (np.empty(shape, dtype) for _ in range(3))
    got = max_pooling_grad(dy, x, y)
    assert got.shape == shape and got.dtype == dtype
    out = np.empty(shape, dtype)
    assert max_pooling_grad(dy, x, y, out=out) is out
    assert max_pooling_grad(dy, x, y, out=dy) is dy


def test_single_element_and_size_one_axes():
    for shape in [(1,), (1, 1, 1), (1, 7, 1), (1,) * 8]:
        dy = np.full(shape, 5.0, np.float32)
        x = np.ones(shape, np.float32)
        assert_bits_equal(max_pooling_grad(dy, x, x.copy()), dy)
        assert_bits_equal(max_pooling_grad(dy, x, x + 1), np.zeros(shape, np.float32))


# ------------------------------------------------------------------------------------------------ out=

@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_out_variants(dtype):
    rng = np.random.default_rng(6)
    dy, x, y = make_case((4, 6, 5), dtype, rng)
    want = expected(dy, x, y)
    snap = pgtest.snapshot({"dy": dy, "x": x, "y": y})
    for name, o in pgtest.strided_variants(np.full(dy.shape, 7, dtype)):
        assert max_pooling_grad(dy, x, y, out=o) is o, name
        assert_bits_equal(np.ascontiguousarray(o), want)
    pgtest.assert_untouched(snap, {"dy": dy, "x": x, "y": y})


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_in_place_into_dy(dtype):
    rng = np.random.default_rng(7)
    dy, x, y = make_case((3, 5, 4), dtype, rng)
    want = expected(dy, x, y)
    for name, d in pgtest.strided_variants(dy):
        d = d.copy(order="K") if name == "contiguous" else d
        assert max_pooling_grad(d, x, y, out=d) is d, name
        assert_bits_equal(np.ascontiguousarray(d), want)
    # in place with different layouts of x and y
    d = dy.copy()
    assert max_pooling_grad(d, np.asfortranarray(x), y[::-1, :, ::-1].copy()[::-1, :, ::-1], out=d) is d
    assert_bits_equal(d, want)


def test_self_overlapping_out_is_written_like_numpy():
    """A writeable out whose elements alias each other (zero stride) is filled as NumPy assignment would."""
    rng = np.random.default_rng(8)
    dy, x, y = make_case((4, 3), np.float32, rng, nan_dy=False)
    buf = np.zeros(3, np.float32)
    o = np.lib.stride_tricks.as_strided(buf, shape=(4, 3), strides=(0, 4), writeable=True)
    assert max_pooling_grad(dy, x, y, out=o) is o
    ref_buf = np.zeros(3, np.float32)
    np.lib.stride_tricks.as_strided(ref_buf, shape=(4, 3), strides=(0, 4), writeable=True)[...] = \
        expected(dy, x, y)
    assert_bits_equal(buf, ref_buf)


# ------------------------------------------------------------------------------------------------ threads

@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_threads_and_determinism(dtype):
    rng = np.random.default_rng(9)
    dy, x, y = make_case((250, 1100), dtype, rng)       # 275,000 elements: up to 8 threads really run
    want = expected(dy, x, y)
    views = [(dy, x, y), (dy[:, 3:-2], x[:, 3:-2], y[:, 3:-2]), (dy.T, np.asfortranarray(x).T, y.T)]
    for d, a, b in views:
        ref = expected(d, a, b)
        for nt in THREADS:
            for det in (None, True, False):
                assert_bits_equal(max_pooling_grad(d, a, b, num_threads=nt, deterministic=det), ref)
    assert_bits_equal(max_pooling_grad(dy, x, y), want)


@pytest.mark.parametrize("grain", [1, 5, 13])
@pytest.mark.parametrize("nt", THREADS)
def test_block_splits_inside_rows(monkeypatch, grain, nt):
    """Tiny work grains make many blocks that start and end in the middle of rows of a strided plan."""
    monkeypatch.setattr(elementwise, "_GRAIN", grain)
    rng = np.random.default_rng(10 + grain)
    dy, x, y = make_case((5, 7, 11), np.float32, rng)
    cases = [(dy, x, y), (dy[:, ::2, 1:], x[:, ::2, 1:], y[:, ::2, 1:]),
             (dy[::-1], np.asfortranarray(x)[::-1], y[::-1]), (dy.transpose(2, 0, 1), x.transpose(2, 0, 1),
                                                               np.ascontiguousarray(y.transpose(2, 0, 1)))]
    for d, a, b in cases:
        assert_bits_equal(max_pooling_grad(d, a, b, num_threads=nt), expected(d, a, b))
        dd = d.copy()
        assert_bits_equal(max_pooling_grad(dd, a, b, out=dd, num_threads=nt), expected(d, a, b))


def test_python_threads_concurrently():
    rng = np.random.default_rng(11)
    cases = [make_case((300, 400), np.float32, rng) for _ in range(4)]
    results = [None] * 4

    def work(i):
        results[i] = max_pooling_grad(*cases[i], num_threads=2)

    ts = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    for case, res in zip(cases, results):
        assert_bits_equal(res, expected(*case))


def test_coalesce_plans():
    a = np.zeros((3, 4, 5), np.float32)
    for v in (a, np.asfortranarray(a), a[::-1, ::-1, ::-1], a.transpose(2, 0, 1)):
        offsets, shape, strides = elementwise._coalesce([v, v, v, v])
        assert shape == [60] and strides == [[1]] * 4
    offsets, shape, strides = elementwise._coalesce([a[:, ::2]] * 4)
    assert shape == [6, 5] and strides[0] == [10, 1]
    offsets, shape, strides = elementwise._coalesce([a[:, 1:3]] * 4)
    assert shape == [3, 10] and strides[0] == [20, 1] and offsets == [0] * 4
    offsets, shape, strides = elementwise._coalesce([a[::-1, ::-1, ::-1]] * 4)
    assert offsets == [-59] * 4 and shape == [60]
    offsets, shape, strides = elementwise._coalesce([a, a.T.copy().T, a, a])
    assert len(shape) == 3
    offsets, shape, strides = elementwise._coalesce([a[:, 0, :1]] * 4)
    assert shape == [3] and strides == [[20]] * 4


# ------------------------------------------------------------------------------------------------ inputs

def test_foreign_inputs():
    x = np.array([1.0, 2.0, 3.0], np.float32)
    dy = memoryview(np.array([4.0, 5.0, 6.0], np.float32))
    assert_bits_equal(max_pooling_grad(dy, x, np.array([1.0, 0.0, 3.0], np.float32)),
                      np.array([4.0, 0.0, 6.0], np.float32))


@pgtest.needs_torch
def test_torch_tensors():
    torch = pgtest.torch
    dy = torch.arange(6, dtype=torch.float32).reshape(2, 3)
    x = torch.tensor([[1.0, 2, 3], [4, 5, 6]])
    y = torch.tensor([[1.0, 0, 3], [0, 5, 0]])
    got = max_pooling_grad(dy, x, y)
    np.testing.assert_array_equal(got, np.array([[0.0, 0, 2], [0, 4, 0]], np.float32))


# ------------------------------------------------------------------------------------------------ errors

def _raises(exc, code, match, fn, *arrays):
    snap = pgtest.snapshot(dict(enumerate(arrays)))
    with pytest.raises(exc, match=match) as info:
        fn()
    assert info.value.code == code
    pgtest.assert_untouched(snap, dict(enumerate(arrays)))


def test_none_inputs():
    a = np.ones(4, np.float32)
    for pos, name in enumerate(["dy", "x", "y"]):
        args = [a, a.copy(), a.copy()]
        args[pos] = None
        _raises(ParamNullptrError, 161001, f"^{name}:", lambda: max_pooling_grad(*args), a)
    assert issubclass(ParamNullptrError, TypeError)


def test_rank_shape_dtype_errors():
    a = np.ones((2, 3), np.float32)
    inv = ParamInvalidError
    s0 = np.ones((), np.float32)
    _raises(inv, 161002, r"^dy: expected a 1-D to 8-D array, got 0-D", lambda: max_pooling_grad(s0, s0, s0), s0)
    s9 = np.ones((1,) * 9, np.float32)
    _raises(inv, 161002, r"^dy: expected a 1-D to 8-D array, got 9-D", lambda: max_pooling_grad(s9, s9, s9), s9)
    b = np.ones((3, 2), np.float32)
    _raises(inv, 161002, r"^x: expected shape \(2, 3\) .*got \(3, 2\)", lambda: max_pooling_grad(a, b, a), a, b)
    _raises(inv, 161002, r"^y: expected shape \(2, 3\)", lambda: max_pooling_grad(a, a, b), a, b)
    _raises(inv, 161002, r"^x: expected shape", lambda: max_pooling_grad(a, a[None], a), a)
    for dt in (np.float64, np.float16, bfloat16):
        c = a.astype(dt)
        _raises(inv, 161002, r"^x: expected dtype float32 .*got", lambda: max_pooling_grad(a, c, a), a, c)
        _raises(inv, 161002, r"^y: expected dtype float32 .*got", lambda: max_pooling_grad(a, a, c), a, c)
        _raises(inv, 161002, r"^x: expected dtype", lambda: max_pooling_grad(c, a, c), a, c)
    for bad in (np.ones((2, 3), np.int32), np.ones((2, 3), np.complex64), np.ones((2, 3), object),
                np.ones((2, 3), bool), np.ones((2, 3), np.uint16)):
        _raises(inv, 161002, r"^dy: expected dtype one of", lambda: max_pooling_grad(bad, bad, bad), bad)
        _raises(inv, 161002, r"^x: expected dtype float32", lambda: max_pooling_grad(a, bad, a), a, bad)


def test_non_array_inputs():
    a = np.ones(3, np.float32)
    for pos, name in enumerate(["dy", "x", "y"]):
        for bad in ([1.0, 2.0, 3.0], 1.0, "abc", (1.0, 2.0, 3.0)):
            args = [a, a.copy(), a.copy()]
            args[pos] = bad
            _raises(ParamInvalidError, 161002, f"^{name}:", lambda: max_pooling_grad(*args), a)


def test_out_errors():
    rng = np.random.default_rng(12)
    dy, x, y = make_case((4, 6), np.float32, rng)
    arrays = (dy, x, y)
    inv = ParamInvalidError

    def call(**kw):
        return lambda: max_pooling_grad(dy, x, y, **kw)

    _raises(inv, 161002, r"^out: expected shape", call(out=np.empty((6, 4), np.float32)), *arrays)
    _raises(inv, 161002, r"^out: expected dtype", call(out=np.empty((4, 6), np.float64)), *arrays)
    ro = np.empty((4, 6), np.float32)
    ro.flags.writeable = False
    _raises(inv, 161002, r"^out: expected a writeable", call(out=ro), *arrays)
    _raises(inv, 161002, r"^out: expected None or a numpy.ndarray", call(out=[0.0] * 24), *arrays)
    _raises(inv, 161002, r"^out: must not share memory with x", call(out=x), *arrays)
    _raises(inv, 161002, r"^out: must not share memory with y", call(out=y), *arrays)
    # partial overlaps with dy: a shifted window, a transposed view, a strided view of the same buffer
    big = np.zeros((5, 6), np.float32)
    big[:4] = dy
    d = big[:4]
    for o in (big[1:], d[::-1], d[:, ::-1], big.reshape(6, 5).T[:4]):
        assert o.shape == d.shape
        _raises(inv, 161002, r"^out: must not share memory with dy",
                lambda: max_pooling_grad(d, x, y, out=o), d, x, y)
    # the same array passed as dy and as x: writing in place would overwrite x
    _raises(inv, 161002, r"^out: must not share memory with x", lambda: max_pooling_grad(x, x, y, out=x),
            x, y)
    _raises(inv, 161002, r"^out: must not share memory with y", lambda: max_pooling_grad(y, x, y, out=y),
            x, y)


def test_option_errors():
    a = np.ones(8, np.float32)
    for bad in ("yes", 2, 0.0, [True]):  # 0 and 1 are bools (the one bool rule, validation.py)
        _raises(ParamInvalidError, 161002, r"^deterministic:",
                lambda: max_pooling_grad(a, a, a, deterministic=bad), a)
    for bad in (0, -1, 1.5, True, "2"):
        _raises(ParamInvalidError, 161002, r"^num_threads:",
                lambda: max_pooling_grad(a, a, a, num_threads=bad), a)
