"""The float32 / float64 NCHW average pooling on planes that are one tall image (issue 10: ``pg_avg_tall`` /
``pg_avg_btall`` in src_c/pg_avg.h, taken where kernel == stride, no padding, the windows tile the planes and the
planes follow one another at one row stride): bit for bit against the plane / ring paths it replaces (forced by
``TALL_MAX_W``), against the float64 reference, at every instruction-set level and thread count, through plans,
and where it just is not taken (odd H, padding, ceil_mode, non-contiguous planes, other cube_math_types)."""
from __future__ import annotations

import numpy as np
import pytest

import pgtest
from poolgrad import _avg_pool, config
from poolgrad import avg_pool as avg_mod
from poolgrad import plan_avg_pool2d, plan_avg_pool2d_backward
from poolgrad.avg_pool import avg_pool2d, avg_pool2d_backward
from poolgrad.slow import avg_pool as slow

# (N, C, H, W), kernel, stride, padding, ceil_mode, count_include_pad, divisor_override, tall expected (for
# contiguous planes)
CASES = [
    ((2, 16, 8, 8), 2, 2, 0, False, True, None, True),           # issue 10's row
    ((1, 3, 14, 14), 2, 2, 0, True, False, None, True),          # DenseNet-121's 14x14, ceil_mode without effect
    ((2, 5, 28, 28), 2, 2, 0, False, True, 3, True),             # divisor_override
    ((1, 2, 56, 56), 2, 2, 0, False, True, -7, True),            # negative divisor_override, 56-wide rows
    ((3, 4, 9, 12), 3, 3, 0, False, True, None, True),           # 3x3 s3: the generic column sums
    ((2, 3, 8, 12), (2, 4), (2, 4), 0, False, True, None, True),  # kw 4
    ((1, 5, 6, 10), (3, 1), (3, 1), 0, False, True, None, True),  # kw 1, kh 3
    ((2, 3, 4, 6), 1, 1, 0, False, True, None, True),            # 1x1: the identity average
    ((1, 40, 2, 2), 2, 2, 0, False, True, None, True),           # one output per plane
    ((2, 3, 5, 12), (5, 6), (5, 6), 0, False, True, None, True),  # one row block per plane, kh 5
    ((2, 3, 9, 8), 2, 2, 0, False, True, None, False),           # odd H: the last row of each plane uncovered
    ((2, 3, 8, 9), 2, 2, 0, True, True, None, False),            # odd W, ceil_mode: clipped last column
    ((2, 3, 9, 9), 2, 2, 0, True, False, None, False),           # ceil_mode with partial windows
    ((2, 3, 8, 8), 2, 2, 1, False, True, None, False),           # padding
    ((2, 3, 8, 8), 2, 1, 0, False, True, None, False),           # overlapping windows (k > s)
    ((2, 3, 9, 9), 2, 3, 0, False, True, None, False),           # gaps (k < s)
    ((2, 3, 8, 8), (2, 4), (2, 2), 0, False, True, None, False),  # kw != sw
]
IDS = [f"{'x'.join(map(str, c[0]))}-k{c[1]}s{c[2]}p{c[3]}{'-ceil' if c[4] else ''}"
       f"{'' if c[6] is None else f'-div{c[6]}'}" for c in CASES]
TALL, OLD = 1 << 30, 0          # TALL_MAX_W values that force each path


def _pair(v):
    return (v, v) if isinstance(v, int) else tuple(v)


def _values(rng: np.random.Generator, shape: tuple, dtype, infinities: bool) -> np.ndarray:
    """Normal values with signed zeros, NaN, subnormals and large values sprinkled in (and infinities: then
    two NaNs can meet in one addition, whose result's sign x86 takes from the operand order)."""
    x = rng.standard_normal(shape)
    special = [0.0, -0.0, np.nan, 1e-310, -1e-42, 1e30, -1e37] + ([np.inf, -np.inf] if infinities else [])
    pick = rng.random(shape) < 0.1
    x[pick] = rng.choice(np.array(special), size=int(pick.sum()))
    return x.astype(dtype)


def _bits(a: np.ndarray, canonical_nan: bool) -> bytes:
    """The bytes of ``a`` (C order), every NaN made the positive quiet NaN when ``canonical_nan``: the sign of a NaN
    made by adding two NaNs is the one bit the paths may not share (tests/test_fuzz.py,
    bitwise_nan_canonical)."""
    a = np.array(a, copy=True, order="C")
    if canonical_nan:
        a[np.isnan(a)] = np.nan
    return a.tobytes()


@pytest.fixture
def planned(monkeypatch):
    """Exactly the requested thread counts, and a record of every tall-mode plan (_tall_plan's answers)."""
    monkeypatch.setattr(avg_mod, "threads_for", lambda work, nthreads: nthreads)
    seen: list[int] = []
    plan = avg_mod._tall_plan

    def spy(*args):
        res = plan(*args)
        seen.append(res[0])
        return res

    monkeypatch.setattr(avg_mod, "_tall_plan", spy)
    return seen


def _forced(monkeypatch, limit: int, fn, *args, **kwargs):
    monkeypatch.setattr(avg_mod, "TALL_MAX_W", limit)
    return fn(*args, **kwargs)


def _check(got: np.ndarray, old: np.ndarray, want: np.ndarray, dtype, infinities: bool, what) -> None:
    assert got.shape == old.shape and got.strides == old.strides, what
    assert _bits(got, infinities) == _bits(old, infinities), what
    finite = np.isfinite(want)
    assert np.array_equal(np.isnan(got), np.isnan(want)), what
    np.testing.assert_allclose(got.astype(np.float64)[finite], want[finite], **pgtest.tolerance(np.dtype(dtype)),
                               err_msg=str(what))


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["f32", "f64"])
@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_forward_tall_bits_match_old_path_and_reference(case, dtype, planned, monkeypatch):
    shape, k, s, p, ceil, cip, div, expect = case
    geom = (_pair(k), _pair(s), _pair(p), ceil, cip, div)
    rng = np.random.default_rng(sum(shape))
    for infinities in (False, True):
        x4 = _values(rng, shape, dtype, infinities)
        with np.errstate(invalid="ignore"):                     # inf - inf in the reference's sums
            want = slow.avg_pool2d(x4.astype(np.float64), *geom)
        for vi, (name, x) in enumerate(pgtest.strided_variants(x4)):
            threads = 1 + (vi + infinities) % 3
            planned.clear()
            got = _forced(monkeypatch, TALL, avg_pool2d, x, *geom, num_threads=threads)
            assert any(planned) == (expect and x.flags.c_contiguous), (name, planned)
            old = _forced(monkeypatch, OLD, avg_pool2d, x, *geom, num_threads=threads)
            _check(got, old, want, dtype, infinities, (name, threads, infinities))


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["f32", "f64"])
@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_backward_tall_bits_match_old_path_and_reference(case, dtype, planned, monkeypatch):
    shape, k, s, p, ceil, cip, div, expect = case
    geom = (_pair(k), _pair(s), _pair(p), ceil, cip, div)
    rng = np.random.default_rng(sum(shape) + 1)
    x = np.zeros(shape, dtype)
    yshape = avg_pool2d(x, *geom).shape
    for infinities in (False, True):
        go4 = _values(rng, yshape, dtype, infinities)
        want = slow.avg_pool2d_backward(go4.astype(np.float64), shape, *geom, 0)
        for vi, (name, go) in enumerate(pgtest.strided_variants(go4)):
            threads = 1 + (vi + infinities) % 3
            planned.clear()
            got = _forced(monkeypatch, TALL, avg_pool2d_backward, go, x, *geom, num_threads=threads)
            assert any(planned) == (expect and go.flags.c_contiguous), (name, planned)
            old = _forced(monkeypatch, OLD, avg_pool2d_backward, go, x, *geom, num_threads=threads)
            _check(got, old, want, dtype, infinities, (name, threads, infinities))


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["f32", "f64"])
def test_backward_into_out_views(dtype, planned, monkeypatch):
    """out= decides too: a contiguous out takes the tall path, a sliced (non-tall) one does not, a slice of whole
    planes at a plane stride of its own does not either; every one gets the old path's bits."""
    rng = np.random.default_rng(5)
    shape = (2, 6, 8, 8)
    x = np.zeros(shape, dtype)
    go = _values(rng, (2, 6, 4, 4), dtype, True)
    want = slow.avg_pool2d_backward(go.astype(np.float64), shape, (2, 2), (2, 2), (0, 0), False, True, None, 0)
    big = np.full((2, 6, 16, 8), 7, dtype)
    for name, out, expect in [("contiguous", np.full(shape, 7, dtype), True),
                              ("sliced", np.full((2, 6, 8, 16), 7, dtype)[..., ::2], False),
                              ("planes apart", big[:, :, :8], False)]:
        planned.clear()
        got = _forced(monkeypatch, TALL, avg_pool2d_backward, go, x, 2, 2, out=out, num_threads=2).copy()
        assert any(planned) == expect, name
        old = _forced(monkeypatch, OLD, avg_pool2d_backward, go, x, 2, 2, out=out, num_threads=2)
        _check(got, np.ascontiguousarray(old), want, dtype, True, name)
    assert (big[:, :, 8:] == 7).all()


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["f32", "f64"])
def test_same_bits_at_every_isa_level_and_thread_count(dtype, planned, monkeypatch):
    """The AVX-512 passes (masked vectors, kw 1 and 2 as permutes), the AVX2 and baseline loops: one result, for
    1 to 5 threads (work items split the row blocks differently), including chunks of the scratch (rows of 56
    values: 36 float32 / 18 float64 row blocks per 8 KiB chunk) and partial last vectors."""
    rng = np.random.default_rng(6)
    for shape, k in [((3, 7, 8, 8), 2), ((2, 9, 56, 56), 2), ((2, 5, 14, 10), (2, 1)), ((1, 7, 6, 9), 3),
                     ((1, 3, 4, 30), 2)]:
        x = _values(rng, shape, dtype, False)
        y0 = avg_pool2d(x, k, num_threads=1)
        go = _values(rng, y0.shape, dtype, False)
        g0 = avg_pool2d_backward(go, x, k, num_threads=1)
        old_y = _forced(monkeypatch, OLD, avg_pool2d, x, k, num_threads=1)
        old_g = _forced(monkeypatch, OLD, avg_pool2d_backward, go, x, k, num_threads=1)
        assert y0.tobytes() == old_y.tobytes() and g0.tobytes() == old_g.tobytes(), shape
        monkeypatch.setattr(avg_mod, "TALL_MAX_W", TALL)
        planned.clear()
        for level in config.supported_isa_levels():
            with config.set_isa_level(level):
                for threads in (1, 2, 3, 5):
                    assert avg_pool2d(x, k, num_threads=threads).tobytes() == y0.tobytes(), (shape, level, threads)
                    g = avg_pool2d_backward(go, x, k, num_threads=threads)
                    assert g.tobytes() == g0.tobytes(), (shape, level, threads)
        assert all(planned), shape


def test_other_cube_math_types_and_16_bit_stay_on_the_old_path(planned, monkeypatch):
    """cube_math_type 2 / 3 (t = round(grad) * multiplier) and float16 / bfloat16 are not tall-mode work."""
    rng = np.random.default_rng(7)
    x = rng.standard_normal((2, 16, 8, 8)).astype(np.float32)
    go = rng.standard_normal((2, 16, 4, 4)).astype(np.float32)
    for cube in (2, 3):
        planned.clear()
        got = _forced(monkeypatch, TALL, avg_pool2d_backward, go, x, 2, 2, cube_math_type=cube)
        assert planned == []
        assert got.tobytes() == _forced(monkeypatch, OLD, avg_pool2d_backward, go, x, 2, 2,
                                        cube_math_type=cube).tobytes()
    for dtype in (np.float16, pgtest.bfloat16):
        planned.clear()
        avg_pool2d(x.astype(dtype), 2, 2)
        avg_pool2d_backward(go.astype(dtype), x.astype(dtype), 2, 2)
        assert planned == []


def test_threshold_leaves_wide_rows_to_the_old_path(planned, monkeypatch):
    """Rows wider than TALL_MAX_W are not planned for the tall path; rows of TALL_MAX_W are."""
    x = np.zeros((1, 2, 4, 16), np.float32)
    go = np.zeros((1, 2, 2, 8), np.float32)
    for limit, expect in ((15, False), (16, True)):
        monkeypatch.setattr(avg_mod, "TALL_MAX_W", limit)
        planned.clear()
        avg_pool2d(x, 2, 2, num_threads=1)
        avg_pool2d_backward(go, x, 2, 2, num_threads=1)
        assert planned == ([4, 4] if expect else [0, 0])       # one item of the 1 * 2 * 2 row blocks


def test_tall_stride_of_views():
    """_avg_pool.tall_stride: the row stride of planes that are one tall image, 0 otherwise."""
    a = np.zeros((2, 3, 8, 8), np.float32)
    assert _avg_pool.tall_stride(a, 2, 2, 4, 4) == 8
    assert _avg_pool.tall_stride(a, 2, 2, 3, 4) == 0                       # windows do not tile H
    assert _avg_pool.tall_stride(a, 4, 2, 2, 4) == 8
    wide = np.zeros((2, 3, 8, 12), np.float32)[..., :8]                   # rows 12 apart, planes 96 apart
    assert _avg_pool.tall_stride(wide, 2, 2, 4, 4) == 12
    assert _avg_pool.tall_stride(np.zeros((2, 3, 9, 8), np.float32)[:, :, :8], 2, 2, 4, 4) == 0
    assert _avg_pool.tall_stride(a[:, ::2], 2, 2, 4, 4) == 0
    assert _avg_pool.tall_stride(a[..., ::2], 2, 2, 4, 2) == 0
    assert _avg_pool.tall_stride(a[:, :, ::-1], 2, 2, 4, 4) == 0
    assert _avg_pool.tall_stride(np.zeros((2, 8, 8, 3), np.float32).transpose(0, 3, 1, 2), 2, 2, 4, 4) == 0
    one = np.zeros((4, 1, 1, 6), np.float32)                               # size-1 axes: any stride
    assert _avg_pool.tall_stride(one, 1, 2, 1, 3) == 6
    assert _avg_pool.tall_stride(np.zeros((4, 2, 1, 6), np.float32)[:, :1], 1, 2, 1, 3) == 12   # planes: rows


@pytest.mark.parametrize("threads", [1, 2])
def test_plans_replay_tall_calls(threads, planned, monkeypatch):
    """The plans' replayed kernel calls (poolgrad._launch) give the plain calls' bits, call after call, on new
    arrays each time (the recorded struct's pointers patched)."""
    monkeypatch.setattr(avg_mod, "TALL_MAX_W", TALL)
    rng = np.random.default_rng(8)
    x = rng.standard_normal((2, 16, 8, 8)).astype(np.float32)
    go = rng.standard_normal((2, 16, 4, 4)).astype(np.float32)
    fwd = plan_avg_pool2d(x, 2, 2, num_threads=threads)
    bwd = plan_avg_pool2d_backward(go, x, 2, 2, num_threads=threads)
    bwd_out = plan_avg_pool2d_backward(go, x, 2, 2, out=np.empty_like(x), num_threads=threads)
    for _ in range(4):
        x = rng.standard_normal(x.shape).astype(np.float32)
        go = rng.standard_normal(go.shape).astype(np.float32)
        out = np.empty_like(x)
        assert fwd(x).tobytes() == avg_pool2d(x, 2, 2, num_threads=threads).tobytes()
        want = avg_pool2d_backward(go, x, 2, 2, num_threads=threads)
        assert bwd(go, x).tobytes() == want.tobytes()
        assert bwd_out(go, x, out=out) is out and out.tobytes() == want.tobytes()
    for plan in (fwd, bwd, bwd_out):
        assert plan._launch_record is not None and plan._launch_record.kernel is not None
    assert all(planned)
