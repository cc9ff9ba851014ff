"""avg_pool2d / avg_pool2d_backward: versus the slow float64 reference and PyTorch, cube_math_type, determinism,
16-bit accuracy, memory orders, and every invalid argument."""
from __future__ import annotations

import numpy as np
import pytest

import pgtest
from pgtest import DTYPE_IDS, DTYPES, LAYOUTS, THREADS, as64, from_layout, to_layout, torch
from poolgrad import config
from poolgrad import avg_pool as avg_mod
from poolgrad.avg_pool import avg_pool2d, avg_pool2d_backward
from poolgrad.dtypes import bfloat16
from poolgrad.errors import ParamInvalidError, ParamNullptrError
from poolgrad.slow import avg_pool as slow


@pytest.fixture
def every_thread(monkeypatch):
    """Use exactly the requested thread count even for small arrays (poolgrad otherwise uses fewer threads
    for little work), so that the tests exercise the parallel split."""
    monkeypatch.setattr(avg_mod, "threads_for", lambda work, nthreads: nthreads)


def _pair(v):
    return (v, v) if isinstance(v, int) else (v[0], v[-1])


# (N, C, H, W), kernel, stride, padding, ceil_mode, count_include_pad, divisor_override
CASES = [
    ((2, 3, 7, 9), 3, 2, 1, False, True, None),            # padding at its maximum (2p <= k)
    ((2, 3, 7, 9), 3, 2, 1, True, False, None),            # ceil_mode: partial last windows
    ((1, 4, 8, 7), (2, 3), (1, 2), 1, True, True, -3),     # negative divisor_override, 2p == k along H
    ((2, 2, 9, 8), 4, 3, 2, True, False, None),            # p = k/2 with ceil_mode, clipped divisors
    ((1, 3, 11, 10), (5, 3), (4, 1), (2, 0), False, True, 7),
    ((2, 3, 6, 5), 1, 1, 0, False, True, None),            # identity
    ((1, 2, 13, 15), (6, 7), (6, 7), 3, True, False, None),  # stride >= 3: one phase per column
    ((1, 2, 9, 9), 2, 3, 1, True, True, 0),                # stride > kernel: uncovered cells; 0 = unused
    ((1, 2, 6, 7), 5, 1, 2, False, False, None),           # 5 rows / columns per sum (the >= 4 paths)
    ((1, 2, 5, 4), (3, 20), 1, (1, 10), False, True, None),  # window far wider than the input: column gather
    ((2, 3, 8, 9), (5, 4), (2, 3), (2, 1), True, False, -1),  # stride 2 with 3 terms, stride 3 with 2
]


def _case_params(case):
    shape, k, s, p, ceil, cip, div = case
    return shape, dict(kernel_size=k, stride=s, padding=p, ceil_mode=ceil, count_include_pad=cip,
                       divisor_override=div)


def _ref_backward(go4, shape, kw, cube_math_type=0):
    return slow.avg_pool2d_backward(go4, shape, _pair(kw["kernel_size"]), _pair(kw["stride"]),
                                    _pair(kw["padding"]), kw["ceil_mode"], kw["count_include_pad"],
                                    kw["divisor_override"], cube_math_type)


def _ref_forward(x4, kw):
    return slow.avg_pool2d(x4, _pair(kw["kernel_size"]), _pair(kw["stride"]), _pair(kw["padding"]),
                           kw["ceil_mode"], kw["count_include_pad"], kw["divisor_override"])


def _random(rng, shape, dtype):
    return rng.standard_normal(shape).astype(dtype)


def _expected(ref64, dtype):
    """The float64 reference rounded to the output dtype, back in float64."""
    return ref64.astype(dtype).astype(np.float64)


def _out_variants(shape, dtype):
    """(name, out, guard): writeable out= views of several memory orders; ``guard`` is the whole buffer, whose
    cells outside the view must stay 7."""
    buf = np.full(tuple(2 * s for s in shape), 7, dtype)
    yield "sliced", buf[tuple(slice(None, None, 2) for _ in shape)], buf
    buf = np.full(shape, 7, dtype)
    yield "negative", buf[tuple(slice(None, None, -1) for _ in shape)], None
    buf = np.full(shape[::-1], 7, dtype)
    yield "permuted", buf.transpose(tuple(reversed(range(len(shape))))), None


# ------------------------------------------------------------------------------------------------ reference


@pytest.mark.parametrize("rank", [3, 4])
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_backward_matches_reference(dtype, layout, rank, every_thread):
    rng = np.random.default_rng(1)
    call = 0
    for case in CASES:
        shape, kw = _case_params(case)
        if rank == 3:
            shape = (1,) + shape[1:]
        x4 = np.zeros(shape, dtype)
        y_shape = _ref_forward(x4, kw).shape
        go4 = _random(rng, y_shape, dtype)
        want = _expected(_ref_backward(go4, shape, kw), dtype)
        x = to_layout(x4, layout, rank)
        go = to_layout(go4, layout, rank)
        runs = [("go " + n, g, x, None) for n, g in pgtest.strided_variants(go)]
        runs += [("x " + n, go, xv, None) for n, xv in pgtest.strided_variants(x)]
        runs += [("out " + n, go, x, (o, guard)) for n, o, guard in _out_variants(x.shape, dtype)]
        for name, g, xv, out in runs:
            call += 1
            threads = THREADS[call % len(THREADS)]
            det = bool(call % 2)
            before = pgtest.snapshot({"go": g, "x": xv})
            res = avg_pool2d_backward(g, xv, **kw, layout=layout, num_threads=threads, deterministic=det,
                                      out=None if out is None else out[0])
            pgtest.assert_untouched(before, {"go": g, "x": xv})
            assert res.shape == x.shape and res.dtype == x.dtype
            if out is not None:
                assert res is out[0]
                if out[1] is not None:
                    mask = np.ones(out[1].shape, bool)
                    mask[tuple(slice(None, None, 2) for _ in x.shape)] = False
                    assert np.all(as64(out[1])[mask] == 7), "wrote outside out="
            np.testing.assert_allclose(as64(from_layout(res, layout)), want, **pgtest.tolerance(dtype),
                                       err_msg=f"{case} {name} threads={threads}")


@pytest.mark.parametrize("rank", [3, 4])
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_forward_matches_reference(dtype, layout, rank, every_thread):
    rng = np.random.default_rng(2)
    for i, case in enumerate(CASES):
        shape, kw = _case_params(case)
        if rank == 3:
            shape = (1,) + shape[1:]
        x4 = _random(rng, shape, dtype)
        want = _expected(_ref_forward(x4, kw), dtype)
        x = to_layout(x4, layout, rank)
        for j, (name, xv) in enumerate(pgtest.strided_variants(x)):
            before = pgtest.snapshot({"x": xv})
            y = avg_pool2d(xv, **kw, layout=layout, num_threads=THREADS[(i + j) % len(THREADS)])
            pgtest.assert_untouched(before, {"x": xv})
            assert y.dtype == x.dtype
            np.testing.assert_allclose(as64(from_layout(y, layout)), want, **pgtest.tolerance(dtype),
                                       err_msg=f"{case} {name}")


def test_nonfinite_values_propagate():
    rng = np.random.default_rng(3)
    shape, kw = _case_params(CASES[1])
    go = rng.standard_normal((2, 3, 4, 5))
    go[0, 0, 1, 2] = np.nan
    go[1, 2, 0, 0] = np.inf
    go[1, 2, 0, 1] = -np.inf
    got = avg_pool2d_backward(go, np.zeros(shape), **kw)
    with np.errstate(invalid="ignore"):
        want = _ref_backward(go, shape, kw)
    np.testing.assert_allclose(got, want, rtol=1e-12, equal_nan=True)
    assert np.isnan(got).any() and np.isinf(got).any()


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_negative_zero_gradients_sum_to_positive_zero(dtype, layout):
    """Sums start from +0 in every code path, so an all -0 gradient gives +0 everywhere (as the float64
    reference does), whatever the loop order or the zero padding inside the kernel."""
    for case in CASES:
        shape, kw = _case_params(case)
        x4 = np.zeros(shape, dtype)
        go4 = -np.zeros(_ref_forward(x4, kw).shape, dtype)
        got = avg_pool2d_backward(to_layout(go4, layout), to_layout(x4, layout), **kw, layout=layout)
        assert not np.signbit(as64(got)).any(), case


# ------------------------------------------------------------------------------------------------ determinism


def _bits(a):
    """The bytes of ``a`` in C order (so views of different memory orders compare by value bits)."""
    return np.ascontiguousarray(a).tobytes()


def _det_problems():
    rng = np.random.default_rng(4)
    yield "nchw f32 k3s1", rng.standard_normal((2, 5, 37, 41)).astype(np.float32), "NCHW", (3, 1, 1, False)
    yield "nhwc f32 k3s2", rng.standard_normal((1, 37, 41, 16)).astype(np.float32), "NHWC", (3, 2, 1, True)
    yield "nchw f16 k2s2", rng.standard_normal((1, 3, 64, 33)).astype(np.float16), "NCHW", (2, 2, 0, True)
    yield "nhwc bf16 k5s2", rng.standard_normal((2, 19, 23, 3)).astype(bfloat16), "NHWC", (5, 2, 2, False)
    # channels-last windows that do not overlap along the row: the forward sums them straight from x
    yield "nhwc f32 k2s2", rng.standard_normal((2, 15, 13, 70)).astype(np.float32), "NHWC", ((2, 3), (2, 3), (1, 1), True)
    # stride-1 rows: whole-plane mode (NCHW, one item per plane), a k > 3 sum plane in the second
    yield "nchw bf16 k3s1", rng.standard_normal((2, 9, 17, 17)).astype(bfloat16), "NCHW", (3, 1, 1, False)
    yield "nchw f16 k5s1", rng.standard_normal((1, 20, 13, 9)).astype(np.float16), "NCHW", ((5, 3), (1, 2), (2, 0), True)


@pytest.mark.parametrize("problem", list(_det_problems()), ids=lambda p: p[0])
def test_bitwise_identical_across_threads_modes_and_strategies(problem, monkeypatch, every_thread):
    _, x, layout, (k, s, p, ceil) = problem
    rng = np.random.default_rng(5)
    y = avg_pool2d(x, k, s, p, ceil, layout=layout)
    go = rng.standard_normal(y.shape).astype(x.dtype)
    base = avg_pool2d_backward(go, x, k, s, p, ceil, layout=layout, num_threads=1, deterministic=True)
    for threads in THREADS:
        for det in (True, False):
            got = avg_pool2d_backward(go, x, k, s, p, ceil, layout=layout, num_threads=threads,
                                      deterministic=det)
            assert got.tobytes() == base.tobytes(), (threads, det)
            fwd = avg_pool2d(x, k, s, p, ceil, layout=layout, num_threads=threads)
            assert fwd.tobytes() == y.tobytes(), threads
    # the other memory order (plane-contiguous <-> channels-last loops) gives the same bits
    other = "NHWC" if layout == "NCHW" else "NCHW"
    x4, go4 = from_layout(x, layout), from_layout(go, layout)
    xo = to_layout(x4, other)
    got = avg_pool2d_backward(to_layout(go4, other), xo, k, s, p, ceil, layout=other, num_threads=3)
    assert _bits(from_layout(got, other)) == _bits(from_layout(base, layout))
    fwd = avg_pool2d(xo, k, s, p, ceil, layout=other, num_threads=2)
    assert _bits(from_layout(fwd, other)) == _bits(from_layout(y, layout))
    # the ring of C rows and the forward's row items instead of whole planes (where the plane modes apply:
    # plane-contiguous memory)
    monkeypatch.setattr(avg_mod, "PLANE_MAX_BYTES", 0)
    assert avg_pool2d_backward(go, x, k, s, p, ceil, layout=layout, num_threads=1).tobytes() == base.tobytes()
    assert avg_pool2d(x, k, s, p, ceil, layout=layout, num_threads=1).tobytes() == y.tobytes()
    monkeypatch.undo()
    # direct column gathers instead of phases
    monkeypatch.setattr(avg_mod, "_column_gather", lambda k, s, wo: True)
    assert avg_pool2d_backward(go, x, k, s, p, ceil, layout=layout, num_threads=2).tobytes() == base.tobytes()
    monkeypatch.setattr(avg_mod, "_column_gather", lambda k, s, wo: False)
    # channels-last divisors broadcast per column instead of repeated per channel
    monkeypatch.setattr(avg_mod, "DV_REPEAT_MAX", 0)
    got = avg_pool2d_backward(to_layout(go4, "NHWC"), to_layout(x4, "NHWC"), k, s, p, ceil, layout="NHWC")
    assert _bits(from_layout(got, "NHWC")) == _bits(from_layout(base, layout))
    # one-row bands (every row its own work item), streaming stores; and the row loops of every instruction-set
    # level this CPU runs (the baseline SSE2 loops, AVX2, AVX-512)
    monkeypatch.setattr(avg_mod, "AVG_ITEMS_PER_THREAD", 10 ** 6)
    monkeypatch.setattr(avg_mod, "_whole_line_rows", lambda gx4, n: True)   # stream any rows when asked to
    for stream_min in (0, 2 ** 62):
        monkeypatch.setattr(avg_mod, "STREAM_MIN_BYTES", stream_min)
        for level in config.supported_isa_levels():
            with config.set_isa_level(level):
                got = avg_pool2d_backward(go, x, k, s, p, ceil, layout=layout, num_threads=3)
            assert got.tobytes() == base.tobytes(), (stream_min, level)


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_plane_modes_match_the_ring(dtype, monkeypatch):
    """Whole-plane modes (backward: stride-1 shifted sums, rows copied from one output row; 16-bit forward: one
    rounding call per plane) against the ring / row loops, bit for bit, over geometries that exercise clipped,
    uncovered and zero-margin rows, several divisors and both value extremes."""
    rng = np.random.default_rng(23)
    geoms = [((3, 3), (1, 1), (1, 1), False, True, None), ((5, 2), (1, 1), (2, 0), True, False, None),
             ((1, 1), (1, 1), (0, 0), False, True, None), ((2, 2), (2, 2), (0, 0), True, True, None),
             ((2, 1), (2, 3), (0, 0), True, False, None), ((3, 3), (3, 2), (1, 1), True, False, -7),
             ((4, 3), (1, 2), (2, 1), False, True, 3), ((7, 7), (1, 1), (3, 3), False, False, None)]
    for (k, s, p, ceil, cip, div) in geoms:
        for H, W in ((7, 9), (14, 14), (17, 23), (31, 32)):
            x = np.zeros((2, 5, H, W), dtype)
            y = avg_pool2d(x, k, s, p, ceil, cip, div)
            for scale in (1.0, 1e-39 if dtype in (bfloat16, np.float32) else 1e-6):
                go = (rng.standard_normal(y.shape) * scale).astype(dtype)
                xv = (rng.standard_normal(x.shape) * scale).astype(dtype)
                args = (k, s, p, ceil, cip, div)
                monkeypatch.setattr(avg_mod, "PLANE_MAX_BYTES", 1 << 30)
                gp, fp = avg_pool2d_backward(go, x, *args, num_threads=1), avg_pool2d(xv, *args, num_threads=1)
                monkeypatch.setattr(avg_mod, "PLANE_MAX_BYTES", 0)
                gr, fr = avg_pool2d_backward(go, x, *args, num_threads=1), avg_pool2d(xv, *args, num_threads=1)
                assert gp.tobytes() == gr.tobytes(), (k, s, p, ceil, cip, div, H, W, scale)
                assert fp.tobytes() == fr.tobytes(), (k, s, p, ceil, cip, div, H, W, scale)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_huge_kernel_and_stride(layout):
    """Parameters up to 2**31 - 1 are valid when the output is non-empty; nothing may scale with them."""
    rng = np.random.default_rng(13)
    k, p = 2 ** 31 - 1, 2 ** 30 - 1                    # 2p <= k, one output per axis on a 3x2 input
    for kw, sw, pw, div in [(k, 1, p, None), ((2, 2), 2 ** 31 - 1, 0, None), ((k, 1), (5, 2 ** 31 - 1), (p, 0), 3)]:
        x4 = np.zeros((1, 2, 3, 2))
        params = dict(kernel_size=kw, stride=sw, padding=pw, ceil_mode=False, count_include_pad=True,
                      divisor_override=div)
        y = avg_pool2d(to_layout(x4, layout), **params, layout=layout)
        go4 = rng.standard_normal(from_layout(y, layout).shape)
        got = avg_pool2d_backward(to_layout(go4, layout), to_layout(x4, layout), **params, layout=layout)
        want = _ref_backward(go4, x4.shape, params)
        np.testing.assert_allclose(from_layout(got, layout), want, rtol=1e-12, atol=1e-300)
        np.testing.assert_allclose(from_layout(y, layout), _ref_forward(x4, params), rtol=1e-12)


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("width", [1, 2, 3])
def test_inputs_narrower_than_the_stride(dtype, width):
    """Fewer input columns than the stride leave fewer column phases than sw (regression: the stride-2 phase
    path read a second phase table entry that a one-column input does not have; found by ASan + hypothesis)."""
    rng = np.random.default_rng(17)
    for k, s, p, ceil in [(2, 2, 0, True), (3, 2, 1, False), (2, 3, 1, True)]:
        x4 = np.zeros((2, 1, 5, width), dtype)
        params = dict(kernel_size=k, stride=s, padding=p, ceil_mode=ceil, count_include_pad=True,
                      divisor_override=None)
        y = avg_pool2d(x4, **params)
        go4 = rng.standard_normal(y.shape).astype(dtype)
        got = avg_pool2d_backward(go4, x4, **params, num_threads=2)
        np.testing.assert_allclose(as64(got), _ref_backward(as64(go4), x4.shape, params).astype(dtype)
                                   .astype(np.float64), **pgtest.tolerance(dtype))


def test_x_values_are_not_read():
    """Only the shape, dtype and memory order of x matter to the backward (as in PyTorch and CANN)."""
    go = np.random.default_rng(14).standard_normal((2, 3, 4, 4)).astype(np.float32)
    x = np.zeros((2, 3, 8, 8), np.float32)
    assert avg_pool2d_backward(go, np.full_like(x, np.nan), 3, 2, 1).tobytes() == \
        avg_pool2d_backward(go, x, 3, 2, 1).tobytes()


def test_memory_order_follows_x():
    x = np.zeros((2, 4, 8, 8), np.float32)
    x_cl = np.ascontiguousarray(x.transpose(0, 2, 3, 1)).transpose(0, 3, 1, 2)   # channels-last buffer
    go = np.ones((2, 4, 4, 4), np.float32)
    got = avg_pool2d_backward(go, x_cl, 2)
    assert np.argsort(got.strides).tolist() == np.argsort(x_cl.strides).tolist()
    assert avg_pool2d(x_cl, 2).strides[1] == 4
    np.testing.assert_array_equal(got, np.full(x.shape, 0.25, np.float32))


def test_torch_tensors_are_accepted():
    if torch is None:
        pytest.skip("PyTorch is not installed")
    x = torch.randn(1, 2, 6, 6, dtype=torch.float64)
    go = torch.randn(1, 2, 3, 3, dtype=torch.float64)
    got = avg_pool2d_backward(go, x, 2)
    want = torch.ops.aten.avg_pool2d_backward(go, x, [2, 2], [2, 2], [0, 0], False, True, None)
    np.testing.assert_allclose(got, want.numpy(), rtol=1e-14)


def test_empty_batch_and_zero_dims():
    x = np.zeros((0, 3, 8, 8), np.float32)
    assert avg_pool2d(x, 2).shape == (0, 3, 4, 4)
    got = avg_pool2d_backward(np.zeros((0, 3, 4, 4), np.float32), x, 2)
    assert got.shape == (0, 3, 8, 8) and got.dtype == np.float32
    for shape in [(2, 0, 8, 8), (2, 3, 0, 8), (2, 3, 8, 0), (0, 8, 8)]:
        with pytest.raises(ParamInvalidError) as info:
            avg_pool2d_backward(np.zeros((2, 3, 4, 4), np.float32), np.zeros(shape, np.float32), 2)
        assert info.value.code == 161002
        with pytest.raises(ParamInvalidError):
            avg_pool2d(np.zeros(shape, np.float32), 2)


# ------------------------------------------------------------------------------------------------ PyTorch


def _torch_cases():
    rng = np.random.default_rng(6)
    for _ in range(24):
        k = (int(rng.integers(1, 6)), int(rng.integers(1, 6)))
        s = (int(rng.integers(1, 5)), int(rng.integers(1, 5)))
        p = (int(rng.integers(0, k[0] // 2 + 1)), int(rng.integers(0, k[1] // 2 + 1)))
        H, W = int(rng.integers(k[0], 17)), int(rng.integers(k[1], 17))
        div = [None, None, 3, -2][int(rng.integers(4))]
        yield (int(rng.integers(1, 3)), int(rng.integers(1, 5)), H, W), k, s, p, bool(rng.integers(2)), \
            bool(rng.integers(2)), div


@pytest.mark.skipif(torch is None, reason="PyTorch is not installed")
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_matches_torch(dtype, layout):
    """Forward (``F.avg_pool2d``) and backward (``aten.avg_pool2d_backward``), torch in float64 then cast."""
    rng = np.random.default_rng(7)
    for shape, k, s, p, ceil, cip, div in _torch_cases():
        x4 = _random(rng, shape, dtype)
        tx = torch.from_numpy(as64(x4))
        ty = torch.nn.functional.avg_pool2d(tx, k, s, p, ceil, cip, div)
        y = avg_pool2d(to_layout(x4, layout), k, s, p, ceil, cip, div, layout=layout)
        assert from_layout(y, layout).shape == tuple(ty.shape)
        np.testing.assert_allclose(as64(from_layout(y, layout)), _expected(ty.numpy(), dtype),
                                   **pgtest.tolerance(dtype))
        go4 = _random(rng, tuple(ty.shape), dtype)
        tgx = torch.ops.aten.avg_pool2d_backward(torch.from_numpy(as64(go4)), tx, list(k), list(s), list(p),
                                                 ceil, cip, div)
        gx = avg_pool2d_backward(to_layout(go4, layout), to_layout(x4, layout), k, s, p, ceil, cip, div,
                                 layout=layout, num_threads=2)
        np.testing.assert_allclose(as64(from_layout(gx, layout)), _expected(tgx.numpy(), dtype),
                                   **pgtest.tolerance(dtype))


@pytest.mark.skipif(torch is None, reason="PyTorch is not installed")
@pytest.mark.parametrize("dtype", [np.dtype(np.float16), bfloat16], ids=["f16", "bf16"])
def test_16bit_more_accurate_than_torch(dtype):
    """Accumulating in float32 and rounding once beats PyTorch's 16-bit arithmetic (errors versus float64)."""
    rng = np.random.default_rng(8)
    x = np.zeros((4, 8, 32, 32), dtype)
    go = (rng.standard_normal((4, 8, 32, 32)) + 3).astype(dtype)  # k3 s1 p1: 9 terms per cell
    exact = _ref_backward(go, x.shape, dict(kernel_size=3, stride=1, padding=1, ceil_mode=False,
                                            count_include_pad=True, divisor_override=None))
    ours = as64(avg_pool2d_backward(go, x, 3, 1, 1))
    tdt = torch.float16 if dtype == np.float16 else torch.bfloat16
    tgo = torch.from_numpy(as64(go)).to(tdt)
    theirs = torch.ops.aten.avg_pool2d_backward(tgo, torch.zeros(x.shape, dtype=tdt), [3, 3], [1, 1], [1, 1],
                                                False, True, None).double().numpy()
    err_ours, err_torch = np.abs(ours - exact), np.abs(theirs - exact)
    print(f"\n{dtype}: mean |error| poolgrad {err_ours.mean():.3g} torch {err_torch.mean():.3g}; "
          f"max poolgrad {err_ours.max():.3g} torch {err_torch.max():.3g}")
    assert err_ours.mean() < 0.6 * err_torch.mean()
    assert err_ours.max() <= err_torch.max()
    # rounding once: within half an ulp of the exact value, up to the float32 accumulation
    ulp = np.spacing(np.abs(exact).astype(dtype).astype(np.float32)).astype(np.float64) * \
        (2 ** 13 if dtype == np.float16 else 2 ** 16)
    assert np.all(err_ours <= 0.5 * ulp * (1 + 1e-2))


# ------------------------------------------------------------------------------------------------ cube_math_type


NONOVERLAP = dict(kernel_size=3, stride=3, padding=0, ceil_mode=False, count_include_pad=True,
                  divisor_override=None)


def _cube(go, x, cube, **kw):
    params = dict(NONOVERLAP)
    params.update(kw)
    return avg_pool2d_backward(go, x, **params, cube_math_type=cube)


@pytest.mark.parametrize("cube", [1, 3])
def test_hf32_modes_float32(cube, monkeypatch):
    rng = np.random.default_rng(9)
    x = np.zeros((2, 3, 9, 12), np.float32)
    go = rng.standard_normal((2, 3, 3, 4)).astype(np.float32)
    got = _cube(go, x, cube)
    # windows do not overlap: every cell is exactly hf32(g) * hf32(1/9), bit for bit
    want = _ref_backward(go, x.shape, NONOVERLAP, cube).astype(np.float32)
    assert got.tobytes() == want.tobytes()
    hf = slow.round_hf32(go)
    assert np.array_equal(hf, as64(poolgrad_round_hf32(go)))
    assert np.any(got != _cube(go, x, 0)), "HF32 rounding must change full-mantissa values"
    # overlapping windows, clipped divisors, layouts and threads: the reference within float32 summation
    kw = dict(kernel_size=3, stride=2, padding=1, ceil_mode=True, count_include_pad=False, divisor_override=None)
    x = np.zeros((2, 3, 9, 9), np.float32)
    go = rng.standard_normal((2, 3, 5, 5)).astype(np.float32)
    want = _ref_backward(go, x.shape, kw, cube)
    for layout, repeat_max in [("NCHW", 1 << 20), ("NHWC", 1 << 20), ("NHWC", 0)]:
        monkeypatch.setattr(avg_mod, "DV_REPEAT_MAX", repeat_max)
        got = avg_pool2d_backward(to_layout(go, layout), to_layout(x, layout), **kw, cube_math_type=cube,
                                  layout=layout, num_threads=3)
        np.testing.assert_allclose(from_layout(got, layout), want, rtol=2e-7, atol=1e-7)


def poolgrad_round_hf32(values):
    from poolgrad.dtypes import round_hf32
    return round_hf32(values)


def test_hf32_reference_rounding_edges():
    """The slow reference's frexp-based HF32 rounding agrees with the C routine on edge cases."""
    bits = np.array([0x3f800800, 0x3f801800, 0x3f8007ff, 0x3f800801, 0x7f7fffff, 0x00000fff, 0x00001800,
                     0x00800800, 0x80801800, 0x7f800000, 0xff800000, 0x00000000, 0x80000000], np.uint32)
    v = bits.view(np.float32)
    with np.errstate(over="ignore"):
        ref = slow.round_hf32(v).astype(np.float32)
    assert ref.tobytes() == poolgrad_round_hf32(v).tobytes()


def test_mode1_leaves_other_dtypes_unchanged():
    rng = np.random.default_rng(10)
    kw = dict(kernel_size=3, stride=2, padding=1)
    for dtype in (np.dtype(np.float64), np.dtype(np.float16), bfloat16):
        x = np.zeros((1, 2, 9, 9), dtype)
        go = rng.standard_normal((1, 2, 5, 5)).astype(dtype)
        assert avg_pool2d_backward(go, x, **kw, cube_math_type=1).tobytes() == \
            avg_pool2d_backward(go, x, **kw, cube_math_type=0).tobytes()


def test_fp16_mode(monkeypatch):
    rng = np.random.default_rng(11)
    # float32: both operands rounded to float16 (1/9 -> float16), product exact in float32
    x = np.zeros((2, 3, 9, 12), np.float32)
    go = (rng.standard_normal((2, 3, 3, 4)) * 100).astype(np.float32)
    got = _cube(go, x, 2)
    want = (slow.round_f16(go) * float(np.float16(np.float32(1) / np.float32(9))))
    assert got.tobytes() == np.repeat(np.repeat(want, 3, 2), 3, 3).astype(np.float32).tobytes()
    assert np.any(got != _cube(go, x, 0))
    # float16 input: grad_output is already float16, only 1/divisor is rounded
    x16, go16 = x.astype(np.float16), go.astype(np.float16)
    want = _ref_backward(go16, x.shape, NONOVERLAP, 2).astype(np.float16)
    assert _cube(go16, x16, 2).tobytes() == want.tobytes()
    # float64: rounded to float16 once (a float32 detour would round 1 + 2**-11 + 2**-40 down to 1)
    x64 = np.zeros((1, 1, 3, 3))
    go64 = np.array([[[[1 + 2.0 ** -11 + 2.0 ** -40]]]])
    got = _cube(go64, x64, 2, divisor_override=1)
    assert np.all(got == 1 + 2.0 ** -10)
    assert np.all(_cube(-go64, x64, 2, divisor_override=1) == -(1 + 2.0 ** -10))
    # overlapping windows versus the reference, every layout
    kw = dict(kernel_size=(3, 2), stride=(1, 2), padding=(1, 1), ceil_mode=True, count_include_pad=True,
              divisor_override=None)
    for dtype in (np.dtype(np.float32), np.dtype(np.float64), np.dtype(np.float16)):
        xx = np.zeros((1, 2, 7, 8), dtype)
        gg = _random(rng, (1, 2, 7, 5), dtype)
        want = _expected(_ref_backward(gg, xx.shape, kw, 2), dtype)
        for layout, repeat_max in [("NCHW", 1 << 20), ("NHWC", 1 << 20), ("NHWC", 0)]:
            monkeypatch.setattr(avg_mod, "DV_REPEAT_MAX", repeat_max)
            got = avg_pool2d_backward(to_layout(gg, layout), to_layout(xx, layout), **kw, cube_math_type=2,
                                      layout=layout)
            np.testing.assert_allclose(as64(from_layout(got, layout)), want, **pgtest.tolerance(dtype))


@pytest.mark.parametrize("dtype,cube", [(bfloat16, 2), (np.float16, 3), (np.float64, 3), (bfloat16, 3)])
def test_cube_math_dtype_rejections(dtype, cube):
    x = np.zeros((1, 2, 4, 4), dtype)
    go = np.zeros((1, 2, 2, 2), dtype)
    before = pgtest.snapshot({"x": x, "go": go})
    with pytest.raises(ParamInvalidError, match="cube_math_type") as info:
        avg_pool2d_backward(go, x, 2, cube_math_type=cube)
    assert info.value.code == 161002
    pgtest.assert_untouched(before, {"x": x, "go": go})


@pytest.mark.parametrize("cube", [-1, 4, 255, True, False, 1.0, "1", None, np.float32(1)])
def test_cube_math_value_rejections(cube):
    x = np.zeros((1, 2, 4, 4), np.float32)
    with pytest.raises(ParamInvalidError, match="cube_math_type") as info:
        avg_pool2d_backward(np.zeros((1, 2, 2, 2), np.float32), x, 2, cube_math_type=cube)
    assert info.value.code == 161002


def test_cube_math_numpy_ints_accepted():
    x = np.zeros((1, 2, 4, 4), np.float32)
    go = np.ones((1, 2, 2, 2), np.float32)
    assert avg_pool2d_backward(go, x, 2, cube_math_type=np.int8(3)).tobytes() == \
        avg_pool2d_backward(go, x, 2, cube_math_type=1).tobytes()


# ------------------------------------------------------------------------------------------------ errors


def _valid():
    x = np.zeros((2, 3, 8, 8), np.float32)
    go = np.ones((2, 3, 4, 4), np.float32)
    return x, go


BAD_PARAMS = [
    ("kernel_size", dict(kernel_size=0)), ("kernel_size", dict(kernel_size=-2)),
    ("kernel_size", dict(kernel_size=(2, 2, 2))), ("kernel_size", dict(kernel_size=())),
    ("kernel_size", dict(kernel_size="2")), ("kernel_size", dict(kernel_size=2.0)),
    ("kernel_size", dict(kernel_size=True)), ("kernel_size", dict(kernel_size=[2, 0])),
    ("kernel_size", dict(kernel_size=None)), ("kernel_size", dict(kernel_size=2 ** 31)),
    ("stride", dict(stride=0)), ("stride", dict(stride=-1)), ("stride", dict(stride=(2, 2, 2))),
    ("stride", dict(stride=1.5)), ("stride", dict(stride=True)),
    ("padding", dict(padding=-1)), ("padding", dict(padding=(0, -1))), ("padding", dict(padding=(1, 2, 3))),
    ("padding", dict(padding=True)), ("padding", dict(kernel_size=3, stride=2, padding=2)),   # 2p > k
    ("padding", dict(kernel_size=(2, 5), padding=(2, 1))),
    ("too small", dict(kernel_size=9)),                                     # 8 + 0 - 9 < 0
    ("ceil_mode", dict(ceil_mode=2)), ("ceil_mode", dict(ceil_mode="yes")), ("ceil_mode", dict(ceil_mode=None)),
    ("count_include_pad", dict(count_include_pad=2)), ("count_include_pad", dict(count_include_pad="no")),
    ("divisor_override", dict(divisor_override=True)), ("divisor_override", dict(divisor_override=1.5)),
    ("divisor_override", dict(divisor_override="2")), ("divisor_override", dict(divisor_override=2 ** 63)),
    ("layout", dict(layout="NCWH")), ("layout", dict(layout=None)), ("layout", dict(layout="nchw")),
    ("num_threads", dict(num_threads=0)), ("num_threads", dict(num_threads=-1)),
    ("num_threads", dict(num_threads=True)), ("num_threads", dict(num_threads=1.5)),
]


@pytest.mark.parametrize("what,bad", BAD_PARAMS, ids=[f"{w}-{i}" for i, (w, _) in enumerate(BAD_PARAMS)])
@pytest.mark.parametrize("fn", ["forward", "backward"])
def test_invalid_parameters(fn, what, bad):
    x, go = _valid()
    kw = dict(kernel_size=2)
    kw.update(bad)
    before = pgtest.snapshot({"x": x, "go": go})
    with pytest.raises(ParamInvalidError) as info:
        if fn == "forward":
            avg_pool2d(x, **kw)
        else:
            avg_pool2d_backward(go, x, **kw)
    assert info.value.code == 161002
    name = "x" if what == "too small" else what
    assert str(info.value).startswith(f"{name}:"), str(info.value)
    pgtest.assert_untouched(before, {"x": x, "go": go})


def test_invalid_backward_only_parameters():
    x, go = _valid()
    before = pgtest.snapshot({"x": x, "go": go})
    for kw in (dict(deterministic="yes"), dict(deterministic=2)):  # 0 and 1 are bools (validation.py)
        with pytest.raises(ParamInvalidError, match="deterministic") as info:
            avg_pool2d_backward(go, x, 2, **kw)
        assert info.value.code == 161002
    pgtest.assert_untouched(before, {"x": x, "go": go})


def test_padding_message_and_divisor_zero_means_unused():
    x, go = _valid()
    with pytest.raises(ParamInvalidError, match=r"padding: expected at most 1"):
        avg_pool2d_backward(go, x, 3, 2, 2)
    assert avg_pool2d_backward(go, x, 2, divisor_override=0).tobytes() == \
        avg_pool2d_backward(go, x, 2).tobytes()
    assert avg_pool2d_backward(go, x, 2, divisor_override=np.int64(-4)).tobytes() == \
        (-avg_pool2d_backward(go, x, 2)).tobytes()


BAD_ARRAYS = [
    ("grad_output", lambda x, go: (go[:, :, :3], x), "expected shape (2, 3, 4, 4)"),
    ("grad_output", lambda x, go: (go[:1], x), "expected shape"),
    ("grad_output", lambda x, go: (go[:, :2], x), "expected shape"),
    ("grad_output", lambda x, go: (go.astype(np.float64), x), "expected dtype float32"),
    ("grad_output", lambda x, go: (go[0], x), "expected a 4-D array"),
    ("grad_output", lambda x, go: (go.tolist(), x), "expected an array"),
    ("x", lambda x, go: (go, x.astype(np.int32)), "expected dtype"),
    ("x", lambda x, go: (go, x[None]), "expected a 3-D or 4-D"),
    ("x", lambda x, go: (go, x[0, 0]), "expected a 3-D or 4-D"),
]


@pytest.mark.parametrize("name,make,msg", BAD_ARRAYS)
def test_invalid_arrays(name, make, msg):
    x, go = _valid()
    g, xx = make(x, go)
    arrays = {"x": x, "go": go, "g": g, "xx": xx}
    before = pgtest.snapshot(arrays)
    with pytest.raises(ParamInvalidError) as info:
        avg_pool2d_backward(g, xx, 2)
    assert info.value.code == 161002
    assert str(info.value).startswith(f"{name}:") and msg in str(info.value), str(info.value)
    pgtest.assert_untouched(before, arrays)


def test_none_arrays_are_nullptr_errors():
    x, go = _valid()
    for args, name in [((None, x), "grad_output"), ((go, None), "x")]:
        with pytest.raises(ParamNullptrError, match=name) as info:
            avg_pool2d_backward(*args, 2)
        assert info.value.code == 161001
        assert isinstance(info.value, TypeError)
    with pytest.raises(ParamNullptrError) as info:
        avg_pool2d(None, 2)
    assert info.value.code == 161001


def test_invalid_out():
    x, go = _valid()
    ro = np.zeros_like(x)
    ro.flags.writeable = False
    big = np.zeros((2, 3, 8, 8), np.float32)
    cases = [
        (np.zeros((2, 3, 8, 7), np.float32), "expected shape"),
        (np.zeros((2, 3, 8, 8), np.float64), "expected dtype"),
        (ro, "writeable"),
        ([[0.0]], "numpy.ndarray"),
        (x, "share memory with x"),
    ]
    for out, msg in cases:
        before = pgtest.snapshot({"x": x, "go": go, "out": out})
        with pytest.raises(ParamInvalidError, match=msg) as info:
            avg_pool2d_backward(go, x, 2, out=out)
        assert info.value.code == 161002
        pgtest.assert_untouched(before, {"x": x, "go": go, "out": out})
    # out overlapping grad_output
    go_big = np.ones((2, 3, 8, 8), np.float32)
    before = pgtest.snapshot({"go_big": go_big, "big": big})
    with pytest.raises(ParamInvalidError, match="share memory with grad_output"):
        avg_pool2d_backward(go_big[:, :, :4, :4], big, 2, out=go_big)
    pgtest.assert_untouched(before, {"go_big": go_big, "big": big})


@pytest.mark.parametrize("dtype", [np.dtype(np.float32), np.dtype(np.float64)], ids=["f32", "f64"])
def test_keep_dtype_is_a_true_division(dtype):
    """cube_math_type=0 divides like PyTorch (``g / 9``), which differs from ``g * (1/9)`` for some values."""
    rng = np.random.default_rng(12)
    x = np.zeros((4, 8, 30, 30), dtype)
    go = rng.standard_normal((4, 8, 10, 10)).astype(dtype)
    got = avg_pool2d_backward(go, x, 3)
    quotient = go / dtype.type(9)
    assert got.tobytes() == np.repeat(np.repeat(quotient, 3, 2), 3, 3).tobytes()
    assert np.any(quotient != go * (dtype.type(1) / dtype.type(9)))
    if torch is not None:
        want = torch.ops.aten.avg_pool2d_backward(torch.from_numpy(go), torch.from_numpy(x), [3, 3], [3, 3],
                                                  [0, 0], False, True, None).numpy()
        assert got.tobytes() == want.tobytes()
