"""Correct rounding of 16-bit results (issue 11): every float16 / bfloat16 output of every operator, cell by
cell, against the *exact* value (Python integers, no floating point) rounded once to the type.

A result passes when it equals the exact value rounded to nearest even, or - where the kernels accumulate in
float64 and the float64 sum may differ from the exact one - when the exact value lies within the float64 error
bound of a rounding boundary of the type (then either neighbour is accepted).  Where that bound cannot be reached
the check is strict: float16 sums (11-bit values over a 40-bit range) are exact in float64 up to 2**13 terms, so
the max-pooling, adaptive and TF backwards, the average forward, and the average backward with one divisor for
every window (it sums first and divides each cell once) must be exactly right.  See docs/ACCURACY.md.

The values come from generators that stress exactly what breaks a float32 accumulator: sums that nearly cancel,
values spanning the whole exponent range (subnormals and values near the largest finite, whose sums overflow),
exact rounding ties; and geometries with up to 16 x 16 windows, padding, ceil_mode and divisor_override.
"""
from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import poolgrad as pg
from poolgrad import _avg_pool, config
from poolgrad.dtypes import bfloat16
from poolgrad.slow import avg_pool as slow_avg
from poolgrad.slow import tf_max_pool as slow_tf
from poolgrad.slow.max_pool_indices import _out_size

F16, BF16 = np.dtype(np.float16), np.dtype(bfloat16)
# (precision in bits with the hidden one, smallest normal exponent, largest exponent, 2**K scales every value of
# the type to an integer)
FORMATS = {F16: (11, -14, 15, 24), BF16: (8, -126, 127, 133)}
U64 = Fraction(1, 2 ** 53)          # unit roundoff of float64
# examples per test: the whole file runs in well under a minute on two shared cores (about 15 s measured)
SETTINGS = settings(max_examples=60, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


# ------------------------------------------------------------------------------------------- exact arithmetic


def round_exact(num: int, den: int, dtype: np.dtype) -> float:
    """``num / den`` (``den > 0``) rounded to nearest even in ``dtype``, as a float (inf past the largest finite)."""
    p, emin, emax, _ = FORMATS[np.dtype(dtype)]
    if num == 0:
        return 0.0
    a = abs(num)
    e = a.bit_length() - den.bit_length()               # 2^(e-1) < a/den < 2^(e+1)
    if a << max(0, -e) < den << max(0, e):
        e -= 1                                          # now 2^e <= a/den < 2^(e+1)
    q = max(e, emin) - (p - 1)                          # the quantum at that exponent
    n, rem = divmod(a << -q, den) if q < 0 else divmod(a, den << q)
    d2 = den if q < 0 else den << q
    if 2 * rem > d2 or (2 * rem == d2 and n & 1):
        n += 1
    value = math.ldexp(n, q) if n.bit_length() + q <= 1024 else math.inf
    if value > math.ldexp((1 << p) - 1, emax - p + 1):
        value = math.inf
    return math.copysign(value, num)


def check_cells(got: np.ndarray, num: np.ndarray, den: int, bound: np.ndarray | None, dtype: np.dtype,
                what: str) -> None:
    """Every cell of ``got`` (16-bit) against the exact value ``num / den`` (object array of ints).

    ``bound`` (float64, per cell) is the float64 error allowed, or None for a strict check."""
    g = got.astype(np.float64)
    for idx in np.ndindex(num.shape):
        n = int(num[idx])
        want = round_exact(n, den, dtype)
        have = float(g[idx])
        if have == want or (math.isnan(have) and math.isnan(want)):
            continue
        if bound is not None:
            b = Fraction(float(bound[idx]))
            e = Fraction(n, den)
            lo, hi = e - b, e + b
            if round_exact(lo.numerator, lo.denominator, dtype) != round_exact(hi.numerator, hi.denominator, dtype):
                continue    # within float64's own error of a rounding boundary: either neighbour is right
        raise AssertionError(f"{what}: cell {idx} is {have!r}, the exact value {float(Fraction(n, den))!r} "
                             f"rounds to {want!r}")


def to_ints(a: np.ndarray) -> np.ndarray:
    """16-bit values as exact integers scaled by 2**K (object array)."""
    k = FORMATS[a.dtype][3]
    return np.vectorize(lambda v: int(v * 2.0 ** k), otypes=[object])(a.astype(np.float64))


# ------------------------------------------------------------------------------------------- value generators


def values(rng: np.random.Generator, shape: tuple, dtype: np.dtype, kind: str) -> np.ndarray:
    """16-bit test values; ``kind`` picks what the sums of neighbouring values stress."""
    p, emin, emax, _ = FORMATS[dtype]
    size = int(np.prod(shape))
    if kind == "normal":
        v = rng.standard_normal(size)
    elif kind == "cancel":              # neighbours of alternating sign and nearly equal size: sums nearly cancel
        sign = np.where((np.indices(shape).sum(axis=0).ravel() % 2) == 0, 1.0, -1.0)
        v = sign * 2.0 ** rng.integers(2, 10) * (1 + rng.integers(-3, 4, size) * 2.0 ** -p)
        v += rng.standard_normal(size) * 2.0 ** -rng.integers(0, 14, size)
    elif kind == "ties":                # few distinct mantissa bits: exact ties of the quotients are frequent
        v = rng.integers(-8, 9, size) * 2.0 ** rng.integers(-3, 3, size)
    elif kind == "wide":                # the whole exponent range, subnormals included
        e = rng.integers(emin - p + 1, emax + 1, size)
        v = rng.choice([-1.0, 1.0], size) * rng.uniform(1, 2, size) * np.exp2(e.astype(np.float64))
    elif kind == "huge":                # near the largest finite: sums overflow
        top = math.ldexp(1.0, emax) * (2 - 2.0 ** (1 - p))
        v = rng.choice([-1.0, 1.0, 1.0], size) * top * rng.uniform(0.5, 1.0, size)
    else:                               # "tiny": subnormals and the smallest normals
        v = rng.choice([-1.0, 1.0], size) * rng.integers(0, 1 << p, size) * 2.0 ** (emin - p + 1)
    out = v.astype(np.float32).astype(dtype).reshape(shape)     # float32 first: exact for both types' ranges
    out[np.isinf(out.astype(np.float64))] = 0
    return out


DTYPE = st.sampled_from([F16, BF16])
KIND = st.sampled_from(["normal", "cancel", "ties", "wide", "huge", "tiny"])


@pytest.fixture(autouse=True)
def _vector_level():
    """Each test may switch the instruction-set level (baseline / AVX2 / AVX-512 row loops); restore afterwards."""
    with config.set_isa_level(config.isa_level()):
        yield
    _avg_pool.set_bf16_convert(True)


# ------------------------------------------------------------------------------------------- average pooling


@st.composite
def avg_case(draw):
    kh, kw = draw(st.integers(1, 16)), draw(st.integers(1, 16))
    sh, sw = draw(st.integers(1, 4)), draw(st.integers(1, 4))
    ph, pw = draw(st.integers(0, kh // 2)), draw(st.integers(0, kw // 2))
    H = draw(st.integers(max(1, kh - 2 * ph), max(1, kh - 2 * ph) + 12))
    W = draw(st.integers(max(1, kw - 2 * pw), max(1, kw - 2 * pw) + 12))
    ceil = draw(st.booleans())
    cip = draw(st.booleans())
    div = draw(st.sampled_from([None, None, None, 0, 1, -3, 7, 9, 64, 255, -4095, 1 << 20]))
    return dict(shape=(1, draw(st.integers(1, 3)), H, W), k=(kh, kw), s=(sh, sw), p=(ph, pw), ceil=ceil, cip=cip,
                div=div, dtype=draw(DTYPE), kind=draw(KIND), seed=draw(st.integers(0, 2 ** 32 - 1)),
                layout=draw(st.sampled_from(["NCHW", "NHWC"])), level=draw(st.sampled_from(config.supported_isa_levels())),
                bf16cvt=draw(st.booleans()))


def _avg_windows(c: dict, H: int, W: int):
    """(oh, ow, (h0, h1, w0, w1), divisor) for every output, PyTorch's rule (poolgrad.slow.avg_pool)."""
    Ho = _out_size(H, c["k"][0], c["s"][0], c["p"][0], 1, c["ceil"])
    Wo = _out_size(W, c["k"][1], c["s"][1], c["p"][1], 1, c["ceil"])
    for oh in range(Ho):
        h0, h1, poolh = slow_avg._window(oh, c["k"][0], c["s"][0], c["p"][0], H)
        for ow in range(Wo):
            w0, w1, poolw = slow_avg._window(ow, c["k"][1], c["s"][1], c["p"][1], W)
            d = slow_avg._divisor(poolh * poolw, (h1 - h0) * (w1 - w0), c["cip"], c["div"])
            yield oh, ow, (h0, h1, w0, w1), d


def _layout(a: np.ndarray, layout: str) -> np.ndarray:
    return a.transpose(0, 2, 3, 1).copy() if layout == "NHWC" else a


def _nchw(a: np.ndarray, layout: str) -> np.ndarray:
    return a.transpose(0, 3, 1, 2) if layout == "NHWC" else a


def _avg_backward_exact(go: np.ndarray, c: dict) -> tuple[np.ndarray, int, np.ndarray, bool]:
    """(numerators, denominator, float64 error bound per cell, strict) of the exact average backward."""
    N, C, H, W = c["shape"]
    dtype = go.dtype
    wins = list(_avg_windows(c, H, W))
    # exact: sum over covering outputs of G / d, over the common denominator L * 2^K
    L = math.lcm(*[abs(d) for *_, d in wins])
    G = to_ints(go)
    num = np.zeros(c["shape"], object)
    num[...] = 0
    terms = np.zeros(c["shape"])
    mag = np.zeros(c["shape"])
    for oh, ow, (h0, h1, w0, w1), d in wins:
        num[:, :, h0:h1, w0:w1] += (G[:, :, oh, ow] * (L // d))[:, :, None, None]
        terms[:, :, h0:h1, w0:w1] += 1
        mag[:, :, h0:h1, w0:w1] += np.abs(go[:, :, oh, ow].astype(np.float64) / d)[:, :, None, None]
    # strict where the float16 sum is exact in float64 and divided once: one divisor for every window
    strict = dtype == F16 and len({d for *_, d in wins}) == 1 and abs(wins[0][3]) < 2 ** 12
    # float64 otherwise: each term rounded once (t = g / d, or g * (L / d) exactly), the sum of n terms n - 1
    # times, the division once; every rounding at most u times the sum of magnitudes
    return num, L << FORMATS[dtype][3], (terms + 2) * float(U64) * mag, strict


@SETTINGS
@given(avg_case())
def test_avg_pool2d_backward_correctly_rounded(c):
    N, C, H, W = c["shape"]
    dtype = c["dtype"]
    wins = list(_avg_windows(c, H, W))
    Ho, Wo = wins[-1][0] + 1, wins[-1][1] + 1
    go = values(np.random.default_rng(c["seed"]), (N, C, Ho, Wo), dtype, c["kind"])
    config.set_isa_level(c["level"])
    _avg_pool.set_bf16_convert(c["bf16cvt"])      # AVX512-BF16's rounding instruction or integer rounding
    x = _layout(np.zeros(c["shape"], dtype), c["layout"])
    got = _nchw(pg.avg_pool2d_backward(_layout(go, c["layout"]), x, c["k"], c["s"], c["p"], c["ceil"], c["cip"],
                                       c["div"], layout=c["layout"]), c["layout"])
    num, den, bound, strict = _avg_backward_exact(go, c)
    check_cells(got, num, den, None if strict else bound, dtype, f"avg backward {c}")


@SETTINGS
@given(avg_case())
def test_avg_pool2d_forward_correctly_rounded(c):
    N, C, H, W = c["shape"]
    dtype = c["dtype"]
    x = values(np.random.default_rng(c["seed"]), c["shape"], dtype, c["kind"])
    config.set_isa_level(c["level"])
    _avg_pool.set_bf16_convert(c["bf16cvt"])      # AVX512-BF16's rounding instruction or integer rounding
    got = _nchw(pg.avg_pool2d(_layout(x, c["layout"]), c["k"], c["s"], c["p"], c["ceil"], c["cip"], c["div"],
                              layout=c["layout"]), c["layout"])
    X = to_ints(x)
    wins = list(_avg_windows(c, H, W))
    x64 = np.abs(x.astype(np.float64))
    for oh, ow, (h0, h1, w0, w1), d in wins:
        s = X[:, :, h0:h1, w0:w1].sum(axis=(2, 3))
        n = (h1 - h0) * (w1 - w0)
        num = s * (1 if d > 0 else -1)
        # float16 window sums are exact in float64 (n <= 256), one division: strict.  bfloat16: n - 1 additions
        # and a division, relative to the sum of magnitudes.
        bound = None if dtype == F16 and abs(d) < 2 ** 12 else \
            (n + 2) * float(U64) * x64[:, :, h0:h1, w0:w1].sum(axis=(2, 3)) / abs(d)
        check_cells(got[:, :, oh, ow], num, abs(d) << FORMATS[dtype][3], bound, dtype,
                    f"avg forward {c} at ({oh}, {ow})")


@pytest.mark.parametrize("cip,ceil", [(True, False), (False, False), (True, True)])
def test_exact_ties_round_to_even(cip, ceil):
    """Issue 11's workload shape (k3 s1 p1: divisor 9, or 4 / 6 / 9 without count_include_pad; k3 s2 with
    ceil_mode: clipped last windows): every cell correctly rounded, also the ~1.8% whose exact value is a
    rounding tie (the kernel sums grad * (L / divisor) and divides once by L)."""
    rng = np.random.default_rng(0)
    c = dict(shape=(2, 3, 24, 23), k=(3, 3), s=(2, 2) if ceil else (1, 1), p=(1, 1), ceil=ceil, cip=cip, div=None)
    wins = list(_avg_windows(c, 24, 23))
    for dtype in (F16, BF16):
        go = values(rng, (2, 3, wins[-1][0] + 1, wins[-1][1] + 1), dtype, "normal")
        got = pg.avg_pool2d_backward(go, np.zeros(c["shape"], dtype), 3, c["s"], 1, ceil, cip)
        num, den, _, _ = _avg_backward_exact(go, c)
        check_cells(got, num, den, None, dtype, f"k3 {c}")


def test_round_to_odd_narrowing():
    """The double -> 16-bit store rounds like one rounding: 1 + 2^-11 + 2^-40 (float16) and 1 + 2^-8 + 2^-40
    (bfloat16) are just above a tie, which a float32 detour rounds down."""
    for dtype, half in ((F16, 2.0 ** -11), (BF16, 2.0 ** -8)):
        x = np.zeros((1, 1, 1, 3), dtype)
        go = np.array([1.0, half, 2.0 ** -24 if dtype == F16 else 2.0 ** -40]).astype(np.float32).astype(dtype)
        # kernel (1, 3) stride 1, padding 1, divisor_override 1: the middle cell sums all three outputs
        got = pg.avg_pool2d_backward(go.reshape(1, 1, 1, 3), x, (1, 3), 1, (0, 1), divisor_override=1)
        assert float(got[0, 0, 0, 1]) == 1 + 2 * half


# ------------------------------------------------------------------------------------------- scatter backwards


def _scatter_exact(go: np.ndarray, idx: np.ndarray, shape: tuple) -> np.ndarray:
    N, C, H, W = shape
    G = to_ints(go)
    num = np.zeros((N, C, H * W), object)
    num[...] = 0
    for n, c, oh, ow in np.ndindex(go.shape):
        num[n, c, int(idx[n, c, oh, ow])] += G[n, c, oh, ow]
    return num.reshape(shape)


def _scatter_bound(go: np.ndarray, idx: np.ndarray, shape: tuple, dtype: np.dtype) -> np.ndarray | None:
    """float16: exact (None); bfloat16: float64 sums, one rounding per term of at most u * sum |g|."""
    if dtype == F16:
        return None
    N, C, H, W = shape
    mag = np.zeros((N, C, H * W))
    cnt = np.zeros((N, C, H * W))
    for n, c, oh, ow in np.ndindex(go.shape):
        mag[n, c, int(idx[n, c, oh, ow])] += abs(float(go[n, c, oh, ow]))
        cnt[n, c, int(idx[n, c, oh, ow])] += 1
    return ((cnt + 1) * float(U64) * mag).reshape(shape)


def _distinct(rng: np.random.Generator, shape: tuple, dtype: np.dtype) -> np.ndarray:
    """Forward inputs with distinct values (an unambiguous argmax in every window)."""
    n = int(np.prod(shape))
    return (rng.permutation(n) - n // 2).astype(np.float32).astype(dtype).reshape(shape)


@SETTINGS
@given(DTYPE, KIND, st.integers(1, 16), st.integers(1, 16), st.integers(1, 3), st.integers(1, 3),
       st.integers(1, 2), st.booleans(), st.booleans(), st.integers(0, 2 ** 32 - 1))
def test_max_pool2d_backward_correctly_rounded(dtype, kind, kh, kw, sh, sw, dil, ceil, det, seed):
    rng = np.random.default_rng(seed)
    ph, pw = rng.integers(0, kh // 2 + 1), rng.integers(0, kw // 2 + 1)
    lo_h, lo_w = max(1, (kh - 1) * dil + 1 - 2 * ph), max(1, (kw - 1) * dil + 1 - 2 * pw)
    H, W = int(rng.integers(lo_h, lo_h + 10)), int(rng.integers(lo_w, lo_w + 10))
    x = _distinct(rng, (1, 2, H, W), dtype)
    try:
        y, idx = pg.max_pool2d_with_indices(x, (kh, kw), (sh, sw), (int(ph), int(pw)), dil, ceil)
    except pg.ParamInvalidError:
        return                          # a window with no input cell: the forward refuses it (documented)
    go = values(rng, y.shape, dtype, kind)
    got = pg.max_pool2d_with_indices_backward(go, x, idx, (kh, kw), (sh, sw), (int(ph), int(pw)), dil, ceil,
                                              deterministic=det)
    check_cells(got, _scatter_exact(go, idx, x.shape), 1 << FORMATS[dtype][3],
                _scatter_bound(go, idx, x.shape, dtype), dtype, "max backward")


@SETTINGS
@given(DTYPE, KIND, st.integers(1, 12), st.integers(1, 12), st.integers(1, 24), st.integers(1, 24),
       st.booleans(), st.integers(0, 2 ** 32 - 1))
def test_adaptive_max_pool2d_backward_correctly_rounded(dtype, kind, H, W, Ho, Wo, det, seed):
    rng = np.random.default_rng(seed)
    x = _distinct(rng, (1, 2, H, W), dtype)
    y, idx = pg.adaptive_max_pool2d(x, (Ho, Wo))      # outputs larger than the input: cells hit many times
    go = values(rng, y.shape, dtype, kind)
    got = pg.adaptive_max_pool2d_backward(go, x, idx, deterministic=det)
    check_cells(got, _scatter_exact(go, idx, x.shape), 1 << FORMATS[dtype][3],
                _scatter_bound(go, idx, x.shape, dtype), dtype, "adaptive backward")


# TF's MaxPoolGrad: NHWC with C = 3 takes the composed path (argmax, then the float64 banded scatter); NHWC with
# C = 8 the fused channels-last kernel and NCHW the fused plane kernel, whose 16-bit rings are float64 too.


@SETTINGS
@given(DTYPE, KIND, st.integers(1, 16), st.integers(1, 16), st.integers(1, 3), st.integers(1, 3),
       st.sampled_from(["SAME", "VALID"]), st.sampled_from(["NHWC", "NCHW"]), st.sampled_from([3, 8]),
       st.integers(0, 2 ** 32 - 1))
def test_tf_max_pool_grad_correctly_rounded(dtype, kind, kh, kw, sh, sw, padding, fmt, C, seed):
    rng = np.random.default_rng(seed)
    H, W = int(rng.integers(kh, kh + 8)), int(rng.integers(kw, kw + 8))
    x = _distinct(rng, (1, C, H, W), dtype)
    xf = x.astype(np.float64)
    Ho, _ = slow_tf.out_size(H, kh, sh, padding)
    Wo, _ = slow_tf.out_size(W, kw, sw, padding)
    idx = np.zeros((1, C, Ho, Wo), np.int64)
    for c in range(C):
        for oh, ow, cells in slow_tf._windows(xf, (kh, kw), (sh, sw), padding):
            r, q = cells[slow_tf._argmax([xf[0, c, r, q] for r, q in cells], "poolgrad")]
            idx[0, c, oh, ow] = r * W + q
    go = values(rng, (1, C, Ho, Wo), dtype, kind)
    to = (lambda a: a.transpose(0, 2, 3, 1).copy()) if fmt == "NHWC" else (lambda a: a)
    ks = [1, kh, kw, 1] if fmt == "NHWC" else [1, 1, kh, kw]
    ss = [1, sh, sw, 1] if fmt == "NHWC" else [1, 1, sh, sw]
    y = pg.max_pool(to(x), ks, ss, padding, data_format=fmt)
    got = pg.max_pool_grad(to(x), y, to(go), ks, ss, padding, data_format=fmt)
    got = got.transpose(0, 3, 1, 2) if fmt == "NHWC" else got
    check_cells(got, _scatter_exact(go, idx, x.shape), 1 << FORMATS[dtype][3],
                _scatter_bound(go, idx, x.shape, dtype), dtype, "TF max_pool_grad")


@pytest.mark.parametrize("dtype", [F16, BF16], ids=["f16", "bf16"])
def test_three_contributions_just_above_a_tie(dtype):
    """The smallest case a float32 accumulator gets wrong: three gradients into one cell whose exact sum lies
    just above a rounding tie (float32 rounds the sum onto the tie, the 16-bit rounding then goes to even)."""
    half, tiny = (2.0 ** -11, 2.0 ** -24) if dtype == F16 else (2.0 ** -8, 2.0 ** -30)
    go = np.array([1.0, half, tiny]).astype(np.float32).astype(dtype).reshape(1, 1, 1, 3)
    want = (1 + 2 * half)
    x = np.zeros((1, 1, 1, 5), dtype)
    x[0, 0, 0, 2] = 1
    y, idx = pg.max_pool2d_with_indices(x, (1, 3), 1)
    assert np.all(idx == 2)
    for det in (True, False):
        got = pg.max_pool2d_with_indices_backward(go, x, idx, (1, 3), 1, deterministic=det)
        assert float(got[0, 0, 0, 2]) == want, ("max", det)
    xa = np.zeros((1, 1, 1, 1), dtype)
    ya, ia = pg.adaptive_max_pool2d(xa, (1, 3))
    assert float(pg.adaptive_max_pool2d_backward(go, xa, ia)[0, 0, 0, 0]) == want, "adaptive"


def _tf_three_into_one(go: np.ndarray, dtype) -> list:
    """TF's MaxPoolGrad with the three gradients ``go`` all landing on one cell (a 1x5 row, 1x3 windows, the
    peak in the middle), through the composed path (NHWC, C = 1), the fused channels-last kernel (NHWC, C = 8)
    and the fused plane kernel (NCHW, C = 1), each at 1 and 2 threads: that cell's value from each run and
    channel (20 values)."""
    got = []
    for fmt, C in (("NHWC", 1), ("NHWC", 8), ("NCHW", 1)):
        x = np.zeros((1, C, 1, 5), dtype)
        x[:, :, 0, 2] = 1
        g = np.broadcast_to(go, (1, C, 1, 3)).astype(dtype)
        to = (lambda a: a.transpose(0, 2, 3, 1).copy()) if fmt == "NHWC" else (lambda a: a)
        ks = [1, 1, 3, 1] if fmt == "NHWC" else [1, 1, 1, 3]
        y = pg.max_pool(to(x), ks, [1, 1, 1, 1], "VALID", data_format=fmt)
        for t in (1, 2):
            gx = pg.max_pool_grad(to(x), y, to(g), ks, [1, 1, 1, 1], "VALID", data_format=fmt, num_threads=t)
            gx = gx.transpose(0, 3, 1, 2) if fmt == "NHWC" else gx
            got += [float(v) for v in gx[0, :, 0, 2]]
    return got


@pytest.mark.parametrize("dtype", [F16, BF16], ids=["f16", "bf16"])
def test_three_contributions_just_above_a_tie_tf(dtype):
    """The same three gradients through TF's MaxPoolGrad, fused kernels and composed path."""
    half, tiny = (2.0 ** -11, 2.0 ** -24) if dtype == F16 else (2.0 ** -8, 2.0 ** -30)
    go = np.array([1.0, half, tiny]).astype(np.float32).astype(dtype)
    assert _tf_three_into_one(go, dtype) == [1 + 2 * half] * 20


def test_bfloat16_sum_past_float32_max_tf():
    """max + max - max of bfloat16 is max: a float32 accumulator overflows to inf on the way (bfloat16's largest
    finite, 3.3895e38, doubled is past FLT_MAX); the float64 ring does not."""
    big = np.array([0x7f7f], np.uint16).view(BF16)[0]
    go = np.array([big, big, -big], BF16)
    assert 2 * float(big) > float(np.finfo(np.float32).max)
    assert _tf_three_into_one(go, BF16) == [float(big)] * 20


def test_max_pooling_grad_copies_bits():
    """aclnnMaxPoolingGrad sums nothing: dy's bits where x == y, +0 elsewhere, for every 16-bit pattern."""
    for dtype in (F16, BF16):
        dy = np.arange(65536, dtype=np.uint16).view(dtype).reshape(256, 256)
        x = np.zeros((256, 256), dtype)
        y = np.zeros((256, 256), dtype)
        y[::2] = 1
        got = pg.max_pooling_grad(dy, x, y)
        assert np.array_equal(got[1::2].view(np.uint16), dy[1::2].view(np.uint16))
        assert not np.any(got[::2].view(np.uint16))


def test_streaming_stores_only_for_whole_aligned_long_rows():
    """Streaming stores pay only on long rows of whole cache lines (measured; avg_pool.py): 14-float rows of a
    big gradient are written through the cache, 1024-float rows are streamed."""
    from poolgrad import avg_pool as avg_mod
    short = np.zeros((32, 512, 14, 14), np.float32)
    assert short.nbytes >= avg_mod.STREAM_MIN_BYTES and not avg_mod._whole_line_rows(short, 14)
    long_rows = np.zeros((3, 1, 1024, 1024), np.float32)
    assert avg_mod._whole_line_rows(long_rows, 1024)
    assert not avg_mod._whole_line_rows(long_rows[:, :, :, 1:], 1023)
