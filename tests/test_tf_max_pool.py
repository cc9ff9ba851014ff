"""TensorFlow-compatible max_pool / max_pool_grad: versus the slow reference (dtypes, data formats, memory
orders, SAME/VALID, overlapping and disjoint windows, threads, modes), bitwise determinism, parity with
TensorFlow, the NaN rule, check_orig_output, 16-bit accuracy, and invalid input."""
from __future__ import annotations

import numpy as np
import pytest

import pgtest
import poolgrad as pg
from pgtest import DTYPES, DTYPE_IDS, needs_tf, tf
from poolgrad import config, tf_max_pool
from poolgrad.slow import tf_max_pool as slow
from poolgrad.tf_max_pool import max_pool, max_pool_grad

# (shape NCHW, ksize (h, w), strides (h, w), padding)
CONFIGS = [
    ((2, 3, 9, 11), (3, 3), (2, 2), "SAME"),        # k > s: overlapping windows, odd padding split
    ((1, 5, 10, 7), (2, 3), (3, 1), "VALID"),       # mixed, k < s along H (rows skipped)
    ((2, 4, 12, 12), (2, 2), (2, 2), "SAME"),       # k == s: disjoint
    ((1, 2, 8, 9), (1, 1), (3, 2), "SAME"),         # 1x1 windows with gaps
    ((1, 17, 9, 8), (4, 4), (1, 2), "SAME"),        # C = 17: a vector block plus a scalar rest
    ((1, 70, 7, 6), (3, 2), (2, 1), "VALID"),       # C = 70: wide blocks, single vectors and a rest
    ((2, 1, 6, 5), (6, 5), (1, 1), "VALID"),        # a single global window
    ((1, 3, 5, 4), (7, 9), (2, 3), "SAME"),         # windows larger than the input
]


_data = pgtest.random_values


def _p4(hw, data_format):
    return [1, hw[0], hw[1], 1] if data_format == "NHWC" else [1, 1, hw[0], hw[1]]


def _lay(a4, data_format):
    return pgtest.to_layout(a4, data_format)


def _back(a, data_format):
    return np.asarray(pgtest.from_layout(a, data_format))


def _grad(x4, g4, cfg, data_format, x2=None, **kw):
    _, k, s, pad = cfg
    x1 = _lay(x4, data_format)
    if x2 is None:
        x2 = max_pool(x1, _p4(k, data_format), _p4(s, data_format), pad, data_format)
    gx = max_pool_grad(x1, x2, _lay(g4, data_format), _p4(k, data_format), _p4(s, data_format), pad,
                       data_format, **kw)
    return _back(gx, data_format)


def _ref_case(rng, cfg, dtype, kind):
    shape, k, s, pad = cfg
    x4 = _data(rng, shape, dtype, kind)
    y_ref = slow.max_pool(x4, k, s, pad)
    g4 = _data(rng, y_ref.shape, dtype)
    return x4, g4, y_ref, slow.max_pool_grad(x4, g4, k, s, pad)


def _assert_close_to_ref(got, ref, dtype):
    np.testing.assert_allclose(pgtest.as64(got), ref.astype(dtype).astype(np.float64), **pgtest.tolerance(dtype))


@pytest.mark.parametrize("cfg", CONFIGS)
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("data_format", ["NHWC", "NCHW"])
def test_matches_reference(cfg, dtype, data_format):
    rng = np.random.default_rng(0)
    _, k, s, pad = cfg
    for kind in ("normal", "ties", "nan"):
        x4, g4, y_ref, gx_ref = _ref_case(rng, cfg, dtype, kind)
        y = _back(max_pool(_lay(x4, data_format), _p4(k, data_format), _p4(s, data_format), pad, data_format),
                  data_format)
        assert y.dtype == dtype
        np.testing.assert_array_equal(pgtest.as64(y), y_ref.astype(dtype).astype(np.float64))
        for threads, det in ((1, True), (3, False), (2, None)):
            gx = _grad(x4, g4, cfg, data_format, num_threads=threads, deterministic=det)
            assert gx.dtype == dtype and gx.shape == x4.shape
            _assert_close_to_ref(gx, gx_ref, dtype)


@pytest.mark.parametrize("cfg", CONFIGS[:3] + CONFIGS[5:6])
@pytest.mark.parametrize("dtype", [np.float32, np.float16], ids=["f32", "f16"])
@pytest.mark.parametrize("data_format", ["NHWC", "NCHW"])
def test_memory_orders(cfg, dtype, data_format):
    """Every memory order of x1 / grad / out (sliced, negative, Fortran, channels-last viewed as NCHW, ...) gives
    the result of the contiguous call, bitwise."""
    rng = np.random.default_rng(1)
    _, k, s, pad = cfg
    x4, g4, _, gx_ref = _ref_case(rng, cfg, dtype, "ties")
    want = _grad(x4, g4, cfg, data_format)
    _assert_close_to_ref(want, gx_ref, dtype)
    x1 = _lay(x4, data_format)
    g = _lay(g4, data_format)
    kk, ss = _p4(k, data_format), _p4(s, data_format)
    x2 = max_pool(x1, kk, ss, pad, data_format)
    for (nx, xv), (ng, gv) in zip(pgtest.strided_variants(x1), pgtest.strided_variants(g)):
        got = max_pool_grad(xv, x2, gv, kk, ss, pad, data_format, num_threads=2)
        np.testing.assert_array_equal(_back(got, data_format), want, err_msg=f"x1 {nx}, grad {ng}")
        np.testing.assert_array_equal(max_pool(xv, kk, ss, pad, data_format), x2, err_msg=nx)
    for name, out in pgtest.strided_variants(np.zeros_like(x1)):
        res = max_pool_grad(x1, x2, g, kk, ss, pad, data_format, out=out)
        assert res is out
        np.testing.assert_array_equal(_back(out, data_format), want, err_msg=f"out {name}")


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16, pgtest.bfloat16],
                         ids=["f32", "f64", "f16", "bf16"])
@pytest.mark.parametrize("data_format", ["NHWC", "NCHW"])
def test_bitwise_deterministic_across_threads(dtype, data_format):
    """Few planes / a batch of 1: split into row bands whose windows overlap (halo rows); every thread count, both
    modes and every instruction-set variant give the same bits."""
    rng = np.random.default_rng(2)
    cases = [((1, 20, 61, 23), (3, 3), (2, 2), "SAME"), ((1, 3, 57, 40), (5, 4), (1, 3), "SAME"),
             ((2, 9, 45, 12), (4, 2), (3, 2), "VALID")]
    for cfg in cases:
        (N, C, H, W), k, st, pad = cfg
        out_hw = (slow.out_size(H, k[0], st[0], pad)[0], slow.out_size(W, k[1], st[1], pad)[0])
        x4 = _data(rng, cfg[0], dtype, "ties")
        g4 = _data(rng, (N, C) + out_hw, dtype)
        x2 = max_pool(_lay(x4, data_format), _p4(k, data_format), _p4(st, data_format), pad, data_format)
        want = _grad(x4, g4, cfg, data_format, x2, num_threads=1, deterministic=True)
        for threads in pgtest.THREADS:
            for det in (True, False):
                got = _grad(x4, g4, cfg, data_format, x2, num_threads=threads, deterministic=det)
                assert got.tobytes() == want.tobytes(), (cfg, threads, det)
        for level in config.supported_isa_levels():
            with config.set_isa_level(level):
                got = _grad(x4, g4, cfg, data_format, x2, num_threads=2)
            assert got.tobytes() == want.tobytes(), (cfg, "isa", level)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16], ids=["f32", "f64", "f16"])
def test_wide_rows_every_isa(dtype):
    """Rows wide enough for full vector blocks plus a partial one, with W strides 1 (plain loads), 2 (shuffles) and
    3 (gathers), channels-last blocks of every size: every instruction-set variant against the reference, forward
    and backward."""
    rng = np.random.default_rng(11)
    cases = [((1, 2, 5, 150), (3, 3), (1, 1), "SAME"), ((1, 2, 6, 151), (3, 3), (2, 2), "SAME"),
             ((1, 2, 5, 149), (2, 4), (1, 3), "VALID"), ((1, 1, 4, 97), (3, 2), (2, 2), "VALID"),
             ((1, 77, 5, 6), (3, 3), (2, 1), "SAME")]
    for cfg in cases:
        for kind in ("ties", "nan"):
            x4, g4, y_ref, gx_ref = _ref_case(rng, cfg, dtype, kind)
            for level in config.supported_isa_levels():
                with config.set_isa_level(level):
                    for data_format in ("NCHW", "NHWC"):
                        _assert_close_to_ref(_grad(x4, g4, cfg, data_format, num_threads=2), gx_ref, dtype)
                        y = max_pool(_lay(x4, data_format), _p4(cfg[1], data_format), _p4(cfg[2], data_format),
                                     cfg[3], data_format, num_threads=2)
                        np.testing.assert_array_equal(pgtest.as64(_back(y, data_format)),
                                                      y_ref.astype(dtype).astype(np.float64))


def test_planning_limits(monkeypatch):
    """Forced streaming stores, a tiny ring budget (more, smaller bands), the plane path for channels-last
    memory (the giant-row fallback), many thin bands, the scalar-only plane path and the plane path instead of
    the planes path (groups of planes as channels-last tiles, which the NCHW case takes by default) all give
    the same bits."""
    rng = np.random.default_rng(3)
    cfg = ((2, 19, 33, 14), (5, 3), (2, 2), "SAME")
    x4, g4, _, gx_ref = _ref_case(rng, cfg, np.float32, "ties")
    for data_format in ("NHWC", "NCHW"):
        want = _grad(x4, g4, cfg, data_format, num_threads=3)
        _assert_close_to_ref(want, gx_ref, np.float32)
        for name, value in (("_stream_rows", lambda target, row_elems: True), ("RING_BUDGET", 1), ("RING_INT32", 1),
                            ("TF_ITEMS_PER_THREAD", 50), ("MIN_BAND_WINDOWS", 0.01), ("VECTOR_PLANE", False),
                            ("PLANES", False), ("TF_PLANES_TILE_BYTES", 1)):
            with monkeypatch.context() as m:
                m.setattr(tf_max_pool, name, value)
                got = _grad(x4, g4, cfg, data_format, num_threads=3)
            assert got.tobytes() == want.tobytes(), (data_format, name)


def test_streaming_stores_only_for_whole_16_byte_rows():
    """Streaming stores only for big outputs written in rows that start and end on 16-byte boundaries (the
    measurements are in tf_max_pool.py): the rule looks at the row the kernel stores (W of a plane, W * C
    channels-last), its length and the strides between rows, and the total size."""
    def rows(shape, layout, dtype=np.float32):
        x = np.empty(shape, dtype)
        x4 = np.moveaxis(x, 3, 1) if layout == "NHWC" else x       # the kernel's logical NCHW view
        return tf_max_pool._stream_rows(x4, x4.shape[3] * (x4.shape[1] if layout == "NHWC" else 1))

    assert not rows((24, 512, 14, 14), "NCHW")             # 56 B rows: issue 8's cliff
    assert not rows((24, 512, 14, 14), "NCHW", pgtest.bfloat16)     # 28 B
    assert rows((32, 64, 112, 112), "NCHW")                # 448 B rows
    assert not rows((32, 64, 113, 113), "NCHW")            # 452 B rows
    assert rows((1, 4, 1024, 1024), "NCHW")                # 4 KiB rows, 16 MiB
    assert not rows((1, 1, 1024, 1024), "NCHW")            # 4 MiB: stays in cache
    assert rows((32, 112, 112, 64), "NHWC")                # 28 KiB channels-last rows
    assert rows((32, 112, 112, 64), "NHWC", pgtest.bfloat16)
    assert not rows((64, 112, 113, 9), "NHWC")             # 4068 B rows
    # 16-byte rows at a row stride that is not a multiple of 16 bytes (a view into a wider array)
    wide = np.empty((1, 4, 1024, 1024 + 1), np.float32)[..., :1024]
    assert not tf_max_pool._stream_rows(wide, 1024)


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_streamed_rows_same_bits_at_every_level(dtype, monkeypatch):
    """Forced streaming stores (pg_stream.h: SSE2 and AVX2 copies, 16-bit rows rounded in chunks and streamed)
    write the bits the ordinary stores write, for rows with unaligned heads and tails, at every ISA level."""
    rng = np.random.default_rng(13)
    # rows of 200 values: 16-byte multiples for every dtype (others are stored without streaming); 9 channels:
    # the fused kernel in NHWC too
    cfg = ((2, 9, 17, 200), (3, 3), (2, 2), "SAME")
    x4, g4, _, _ = _ref_case(rng, cfg, dtype, "ties")
    for data_format in ("NCHW", "NHWC"):
        want = _grad(x4, g4, cfg, data_format, num_threads=2)
        with monkeypatch.context() as m:
            m.setattr(tf_max_pool, "_stream_rows", lambda target, row_elems: True)
            for level in config.supported_isa_levels():
                with config.set_isa_level(level):
                    got = _grad(x4, g4, cfg, data_format, num_threads=2)
                assert got.tobytes() == want.tobytes(), (data_format, level)


def test_nchw_equals_transposed_nhwc():
    rng = np.random.default_rng(4)
    for cfg in CONFIGS:
        for dtype in (np.float32, pgtest.bfloat16):
            x4, g4, _, _ = _ref_case(rng, cfg, dtype, "ties")
            a = _grad(x4, g4, cfg, "NCHW")
            b = _grad(x4, g4, cfg, "NHWC")
            assert a.tobytes() == b.tobytes()


def test_nan_rule():
    """NaN beats every number and the last NaN in row-major order wins; ties go to the first maximum."""
    def one_window(values):
        x = np.array(values, np.float32).reshape(1, 1, 1, -1)
        k = [1, 1, 1, x.shape[3]]
        y = max_pool(x, k, [1, 1, 1, 1], "VALID", "NCHW")
        gx = max_pool_grad(x, y, np.ones_like(y), k, [1, 1, 1, 1], "VALID", "NCHW")
        return y.ravel(), gx.ravel()

    nan = np.nan
    for values, want_y, want_idx in [([1, nan, 2], nan, 1), ([nan, 1, 2], nan, 0), ([1, 2, nan], nan, 2),
                                     ([nan, 1, nan], nan, 2), ([3, 1, 3], 3, 0), ([-np.inf, -np.inf], -np.inf, 0),
                                     ([1, 5, 5, 2], 5, 1)]:
        y, gx = one_window(values)
        np.testing.assert_array_equal(y, [want_y])
        np.testing.assert_array_equal(gx, np.eye(len(values), dtype=np.float32)[want_idx], err_msg=str(values))
    # 2-D: row-major scan order decides between the NaN of row 0 and the NaN of row 1
    x = np.array([[1, nan], [nan, 0]], np.float32).reshape(1, 2, 2, 1)
    y = max_pool(x, [1, 2, 2, 1], [1, 1, 1, 1], "VALID")
    gx = max_pool_grad(x, y, np.full_like(y, 7), [1, 2, 2, 1], [1, 1, 1, 1], "VALID")
    np.testing.assert_array_equal(gx.ravel(), [0, 0, 7, 0])


def _tf_grad(x1, x2, grad, ksize, strides, padding):
    """tf.raw_ops.MaxPoolGrad on explicit tensors (with raw NumPy inputs TensorFlow's eager dispatch can silently
    reuse the dtype of an earlier call and compute in float32)."""
    res = tf.raw_ops.MaxPoolGrad(orig_input=tf.constant(x1), orig_output=tf.constant(x2), grad=tf.constant(grad),
                                 ksize=ksize, strides=strides, padding=padding).numpy()
    assert res.dtype == x1.dtype
    return res


def test_nan_bits_do_not_depend_on_the_path():
    """The forward returns the winning NaN with its payload (float32); the 16-bit types return it quiet; either way
    every memory order and instruction-set variant gives the same bits."""
    rng = np.random.default_rng(12)
    x4 = rng.standard_normal((1, 20, 9, 40)).astype(np.float32)
    payload = np.array([0x7FC01234, 0xFFA00001], np.uint32).view(np.float32)      # quiet and signalling NaNs
    x4.reshape(-1)[rng.choice(x4.size, 60, replace=False)] = np.resize(payload, 60)
    for dtype in (np.float32, np.float16):
        xd = x4.astype(dtype) if dtype != np.float32 else x4
        want = None
        for level in config.supported_isa_levels():
            with config.set_isa_level(level):
                for data_format in ("NCHW", "NHWC"):
                    for _, xv in pgtest.strided_variants(_lay(xd, data_format)):
                        y = _back(max_pool(xv, _p4((3, 3), data_format), _p4((2, 2), data_format), "SAME",
                                           data_format), data_format)
                        want = y if want is None else want
                        assert y.tobytes() == want.tobytes(), (dtype, level, data_format)
        if dtype == np.float32:
            assert set(want.view(np.uint32)[np.isnan(want)].tolist()) == {0x7FC01234, 0xFFA00001}


@needs_tf
@pytest.mark.parametrize("cfg", [((2, 5, 13, 11), (3, 3), (2, 2), "SAME"), ((2, 5, 13, 11), (3, 3), (2, 2), "VALID"),
                                 ((1, 8, 12, 10), (2, 2), (2, 2), "SAME"), ((3, 4, 9, 14), (2, 4), (3, 3), "VALID"),
                                 ((1, 33, 16, 9), (4, 3), (1, 1), "SAME"), ((2, 6, 10, 10), (1, 2), (3, 2), "SAME")])
def test_matches_tensorflow(cfg):
    """float32 NHWC without NaN, many ties: TensorFlow sums each cell in output row-major order too, so the results
    agree bitwise, forward and backward."""
    rng = np.random.default_rng(5)
    shape, k, s, pad = cfg
    kk, ss = _p4(k, "NHWC"), _p4(s, "NHWC")
    for kind in ("ties", "normal"):
        x = _lay(_data(rng, shape, np.float32, kind), "NHWC")
        y_tf = tf.nn.max_pool2d(tf.constant(x), kk, ss, pad).numpy()
        assert y_tf.dtype == np.float32
        y = max_pool(x, kk, ss, pad)
        np.testing.assert_array_equal(y, y_tf)
        g = rng.standard_normal(y.shape).astype(np.float32)
        gx_tf = _tf_grad(x, y_tf, g, kk, ss, pad)
        for threads in (1, 2, 3):
            gx = max_pool_grad(x, y, g, kk, ss, pad, num_threads=threads)
            assert gx.tobytes() == gx_tf.tobytes(), (kind, threads)
    # bytes padding is accepted, as in TensorFlow's raw ops
    np.testing.assert_array_equal(max_pool_grad(x, y, g, kk, ss, pad.encode()), gx)


@needs_tf
def test_tensorflow_nan_rule_differs_as_documented():
    """TensorFlow's MaxPoolGrad takes a NaN only as the first cell of a window: the slow reference's "tf" rule
    reproduces it exactly, and poolgrad follows the spec's rule instead."""
    rng = np.random.default_rng(6)
    cfg = ((2, 3, 11, 10), (3, 3), (2, 2), "SAME")
    x4, g4, _, gx_ref = _ref_case(rng, cfg, np.float32, "nan")
    x, g = _lay(x4, "NHWC"), _lay(g4, "NHWC")
    kk, ss = _p4(cfg[1], "NHWC"), _p4(cfg[2], "NHWC")
    gx_tf = _back(_tf_grad(x, max_pool(x, kk, ss, "SAME"), g, kk, ss, "SAME"), "NHWC")
    np.testing.assert_allclose(gx_tf, slow.max_pool_grad(x4, g4, *cfg[1:], nan_rule="tf"), rtol=1e-6, atol=1e-6)
    got = _grad(x4, g4, cfg, "NHWC")
    _assert_close_to_ref(got, gx_ref, np.float32)
    assert not np.array_equal(got, gx_tf)


def test_check_orig_output():
    rng = np.random.default_rng(7)
    cfg = ((2, 3, 9, 11), (3, 3), (2, 2), "SAME")
    for data_format in ("NHWC", "NCHW"):
        for dtype in (np.float32, pgtest.bfloat16):
            x4, g4, _, gx_ref = _ref_case(rng, cfg, dtype, "nan")
            x1, g = _lay(x4, data_format), _lay(g4, data_format)
            kk, ss = _p4(cfg[1], data_format), _p4(cfg[2], data_format)
            x2 = max_pool(x1, kk, ss, "SAME", data_format)
            assert np.isnan(pgtest.as64(x2)).any()          # NaN equals NaN for the check
            gx = max_pool_grad(x1, x2, g, kk, ss, "SAME", data_format, check_orig_output=True)
            _assert_close_to_ref(_back(gx, data_format), gx_ref, dtype)
            bad = x2.copy()
            flat = bad.reshape(-1)
            pos = int(np.flatnonzero(~np.isnan(pgtest.as64(flat)))[3])
            flat[pos] = flat[pos] + np.asarray(1, dtype)
            where = np.unravel_index(pos, bad.shape)
            names = "nhwc" if data_format == "NHWC" else "nchw"
            expect = ", ".join(f"{n}={int(i)}" for n, i in zip(names, where))
            for wrong in (bad, g):                                   # a perturbed x2; grad passed as x2
                arrays = {"x1": x1, "x2": wrong, "grad": g}
                before = pgtest.snapshot(arrays)
                with pytest.raises(pg.ParamInvalidError) as info:
                    max_pool_grad(x1, wrong, g, kk, ss, "SAME", data_format, check_orig_output=True)
                assert info.value.code == 161002 and "x2" in str(info.value)
                pgtest.assert_untouched(before, arrays)
            assert expect in str(pytest.raises(pg.ParamInvalidError, max_pool_grad, x1, bad, g, kk, ss, "SAME",
                                               data_format, check_orig_output=True).value)
            # unchecked, x2's values are not used
            gx2 = max_pool_grad(x1, g, g, kk, ss, "SAME", data_format)
            assert gx2.tobytes() == gx.tobytes()


@needs_tf
def test_16bit_more_accurate_than_tensorflow():
    """Many overlapping windows (k=6, s=1) pile up to 36 gradients on one cell: float32 accumulation rounded once
    beats TensorFlow's float16 accumulation (and bfloat16 accumulation, emulated) against float64."""
    rng = np.random.default_rng(8)
    cfg = ((1, 4, 24, 24), (6, 6), (1, 1), "SAME")
    x4 = rng.integers(0, 4, size=cfg[0]).astype(np.float16)  # few distinct values: big tie groups
    ref = slow.max_pool(x4, *cfg[1:])
    g4 = (rng.random(ref.shape) + 0.5).astype(np.float16)
    exact = slow.max_pool_grad(x4, g4, *cfg[1:])
    ours = _grad(x4, g4, cfg, "NHWC").astype(np.float64)
    x, g = _lay(x4, "NHWC"), _lay(g4, "NHWC")
    kk, ss = _p4(cfg[1], "NHWC"), _p4(cfg[2], "NHWC")
    theirs = _tf_grad(x, max_pool(x, kk, ss, "SAME"), g, kk, ss, "SAME")
    assert theirs.dtype == np.float16                 # TensorFlow's native half kernel ran
    theirs = _back(theirs, "NHWC").astype(np.float64)
    err_ours, err_tf = np.abs(ours - exact).max(), np.abs(theirs - exact).max()
    assert err_ours < err_tf, (err_ours, err_tf)
    # the float32 sums of at most 36 such values are exact, so the result is the exact sum rounded once
    np.testing.assert_array_equal(ours, exact.astype(np.float16).astype(np.float64))
    # bfloat16: versus summing in bfloat16
    xb, gb = x4.astype(pgtest.bfloat16), g4.astype(pgtest.bfloat16)
    exact_b = slow.max_pool_grad(xb, gb, *cfg[1:])
    ours_b = _grad(xb, gb, cfg, "NCHW").astype(np.float64)
    naive_b = slow.max_pool_grad(xb, gb, *cfg[1:], acc_dtype=pgtest.bfloat16).astype(np.float64)
    assert np.abs(ours_b - exact_b).max() < np.abs(naive_b - exact_b).max()
    np.testing.assert_array_equal(ours_b, exact_b.astype(pgtest.bfloat16).astype(np.float64))


def test_empty_batch_and_sizes():
    x = np.zeros((0, 5, 5, 3), np.float32)
    y = max_pool(x, [1, 2, 2, 1], [1, 2, 2, 1], "SAME")
    assert y.shape == (0, 3, 3, 3)
    gx = max_pool_grad(x, y, y, [1, 2, 2, 1], [1, 2, 2, 1], "SAME")
    assert gx.shape == x.shape and gx.dtype == x.dtype
    # output sizes: VALID ceil((in - k + 1) / s), SAME ceil(in / s)
    x = np.zeros((1, 10, 7, 1), np.float32)
    assert max_pool(x, [1, 3, 2, 1], [1, 3, 2, 1], "VALID").shape == (1, 3, 3, 1)
    assert max_pool(x, [1, 3, 2, 1], [1, 3, 2, 1], "SAME").shape == (1, 4, 4, 1)
    assert max_pool(x, [1, 10, 7, 1], [1, 1, 1, 1], "VALID").shape == (1, 1, 1, 1)


def test_num_threads_default_and_modes():
    rng = np.random.default_rng(9)
    cfg = ((2, 3, 9, 11), (3, 3), (2, 2), "SAME")
    x4, g4, _, gx_ref = _ref_case(rng, cfg, np.float32, "normal")
    from threadpoolctl import threadpool_limits
    with threadpool_limits(limits=1, user_api="openmp"):
        _assert_close_to_ref(_grad(x4, g4, cfg, "NHWC"), gx_ref, np.float32)
    with pg.deterministic(True):
        _assert_close_to_ref(_grad(x4, g4, cfg, "NCHW"), gx_ref, np.float32)


# ------------------------------------------------------------------------------------------------ errors

def _valid_args():
    x1 = np.arange(2 * 6 * 5 * 3, dtype=np.float32).reshape(2, 6, 5, 3)
    x2 = max_pool(x1, [1, 2, 2, 1], [1, 2, 2, 1], "SAME")
    grad = np.ones_like(x2)
    return dict(x1=x1, x2=x2, grad=grad, ksize=[1, 2, 2, 1], strides=[1, 2, 2, 1], padding="SAME",
                data_format="NHWC")


BAD = [
    # (overrides, error class, text expected in the message)
    (dict(x1=None), pg.ParamNullptrError, "x1"),
    (dict(x2=None), pg.ParamNullptrError, "x2"),
    (dict(grad=None), pg.ParamNullptrError, "grad"),
    (dict(x1=[[1.0]]), pg.ParamInvalidError, "x1"),
    (dict(ksize=[1, 2, 2]), pg.ParamInvalidError, "ksize"),
    (dict(ksize=[1, 2, 2, 1, 1]), pg.ParamInvalidError, "ksize"),
    (dict(ksize=[2, 2, 2, 1]), pg.ParamInvalidError, "ksize"),
    (dict(ksize=[1, 2, 2, 2]), pg.ParamInvalidError, "ksize"),
    (dict(ksize=[1, 0, 2, 1]), pg.ParamInvalidError, "ksize"),
    (dict(ksize=[1, 2, -1, 1]), pg.ParamInvalidError, "ksize"),
    (dict(ksize=[1, 2.0, 2, 1]), pg.ParamInvalidError, "ksize"),
    (dict(ksize=[1, True, 2, 1]), pg.ParamInvalidError, "ksize"),
    (dict(ksize=2), pg.ParamInvalidError, "ksize"),
    (dict(ksize="1221"), pg.ParamInvalidError, "ksize"),
    (dict(ksize=[1, 2 ** 40, 2, 1]), pg.ParamInvalidError, "ksize"),
    (dict(strides=[1, 2, 2]), pg.ParamInvalidError, "strides"),
    (dict(strides=[1, 2, 2, 2]), pg.ParamInvalidError, "strides"),
    (dict(strides=[1, 0, 2, 1]), pg.ParamInvalidError, "strides"),
    (dict(strides=[1, 2, -2, 1]), pg.ParamInvalidError, "strides"),
    (dict(strides=[1, 2, None, 1]), pg.ParamInvalidError, "strides"),
    (dict(padding="same"), pg.ParamInvalidError, "padding"),
    (dict(padding="EXPLICIT"), pg.ParamInvalidError, "padding"),
    (dict(padding=b"valid"), pg.ParamInvalidError, "padding"),
    (dict(padding=1), pg.ParamInvalidError, "padding"),
    (dict(data_format="NWHC"), pg.ParamInvalidError, "data_format"),
    (dict(data_format="nhwc"), pg.ParamInvalidError, "data_format"),
    (dict(x2=np.ones((2, 3, 3, 2), np.float32)), pg.ParamInvalidError, "x2"),
    (dict(grad=np.ones((2, 3, 2, 3), np.float32)), pg.ParamInvalidError, "grad"),
    (dict(x2=np.ones((2, 3, 3, 3), np.float64)), pg.ParamInvalidError, "x2"),
    (dict(grad=np.ones((2, 3, 3, 3), np.float16)), pg.ParamInvalidError, "grad"),
    (dict(grad=np.ones((2, 3, 3, 3, 1), np.float32)), pg.ParamInvalidError, "grad"),
    (dict(x1=np.ones((6, 5, 3), np.float32)), pg.ParamInvalidError, "x1"),
    (dict(x1=np.ones((1, 2, 6, 5, 3), np.float32)), pg.ParamInvalidError, "x1"),
    (dict(x1=np.ones((2, 6, 5, 3), np.int32)), pg.ParamInvalidError, "x1"),
    (dict(x1=np.ones((2, 6, 5, 0), np.float32)), pg.ParamInvalidError, "x1"),
    (dict(x1=np.ones((2, 0, 5, 3), np.float32)), pg.ParamInvalidError, "x1"),
    (dict(ksize=[1, 7, 2, 1], padding="VALID"), pg.ParamInvalidError, "too small"),
    (dict(check_orig_output="yes"), pg.ParamInvalidError, "check_orig_output"),
    (dict(num_threads=0), pg.ParamInvalidError, "num_threads"),
    (dict(num_threads=-1), pg.ParamInvalidError, "num_threads"),
    (dict(deterministic="no"), pg.ParamInvalidError, "deterministic"),
    (dict(out=np.empty((2, 6, 5, 3), np.float64)), pg.ParamInvalidError, "out"),
    (dict(out=np.empty((2, 6, 5, 4), np.float32)), pg.ParamInvalidError, "out"),
]


@pytest.mark.parametrize("over, cls, text", BAD, ids=[f"{i}:{t}" for i, (_, _, t) in enumerate(BAD)])
def test_invalid_grad_arguments(over, cls, text):
    args = _valid_args()
    args.update(over)
    before = pgtest.snapshot(args)
    with pytest.raises(cls) as info:
        max_pool_grad(**args)
    assert info.value.code == (161001 if cls is pg.ParamNullptrError else 161002)
    assert text in str(info.value)
    pgtest.assert_untouched(before, args)


def test_invalid_out_aliasing_and_forward_arguments():
    args = _valid_args()
    before = pgtest.snapshot(args)
    for alias in (args["x1"], args["x1"][:, :, :, ::-1]):
        with pytest.raises(pg.ParamInvalidError, match="out: must not share memory with x1"):
            max_pool_grad(**args, out=alias)
    with pytest.raises(pg.ParamInvalidError, match="out: expected a writeable"):
        ro = np.empty_like(args["x1"])
        ro.flags.writeable = False
        max_pool_grad(**args, out=ro)
    pgtest.assert_untouched(before, args)
    x = args["x1"]
    for kw, cls, text in [(dict(x=None), pg.ParamNullptrError, "x"),
                          (dict(ksize=[1, 2, 2, 2]), pg.ParamInvalidError, "ksize"),
                          (dict(strides=[2, 1, 1, 1]), pg.ParamInvalidError, "strides"),
                          (dict(padding="Same"), pg.ParamInvalidError, "padding"),
                          (dict(data_format="CHWN"), pg.ParamInvalidError, "data_format"),
                          (dict(x=x[0]), pg.ParamInvalidError, "x"),
                          (dict(ksize=[1, 1, 9, 1], padding="VALID"), pg.ParamInvalidError, "too small")]:
        call = dict(x=x, ksize=[1, 2, 2, 1], strides=[1, 2, 2, 1], padding="SAME")
        call.update(kw)
        with pytest.raises(cls, match=text) as info:
            max_pool(**call)
        assert info.value.code == (161001 if cls is pg.ParamNullptrError else 161002)
    pgtest.assert_untouched(before, args)


def test_messages_name_expected_and_given():
    args = _valid_args()
    args["grad"] = np.ones((2, 3, 2, 3), np.float32)
    with pytest.raises(pg.ParamInvalidError) as info:
        max_pool_grad(**args)
    msg = str(info.value)
    assert "grad: expected shape (2, 3, 3, 3)" in msg and "got (2, 3, 2, 3)" in msg and "ksize" in msg
    args = _valid_args()
    with pytest.raises(pg.ParamInvalidError) as info:
        max_pool_grad(**{**args, "ksize": [1, 2, 2, 3]})
    assert "ksize" in str(info.value) and "(1, 2, 2, 3)" in str(info.value)


def _tie_sums_case(rng, cfg, dtype):
    """x with sparse peaks that win every window they are in (the first one, where a window holds two), and
    gradients 1, half an ulp of 1 and a step far below that: a cell receiving all three has an exact sum just
    above a 16-bit rounding tie, which a float32 running sum rounds onto the tie (then to even, down) in every
    order.  Returns x, grad and the number of gradients each cell receives."""
    shape, k, s, pad = cfg
    x4 = _data(rng, shape, dtype)
    x4[rng.random(shape) < 0.1] = 8
    half, tiny = (2.0 ** -11, 2.0 ** -24) if np.dtype(dtype) == np.float16 else (2.0 ** -8, 2.0 ** -30)
    gshape = slow.max_pool(x4, k, s, pad).shape
    g4 = rng.choice([1.0, half, tiny], size=gshape).astype(dtype)
    return x4, g4, slow.max_pool_grad(x4, np.ones(gshape), k, s, pad)


@pytest.mark.parametrize("cfg", [c for c in CONFIGS if 1 < c[0][1] < tf_max_pool.COMPOSE_MAX_C])
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_composed_gradient_equals_fused_kernel(monkeypatch, cfg, dtype):
    """Channels-last inputs with few channels take the composed gradient (vectorised argmax, then the banded
    scatter); it must give the fused kernel's exact bits (same argmax rule, same summation order; for the 16-bit
    types the same float64 sums rounded once), for every thread count, with ties and NaN, and for 16-bit
    gradients whose sums a float32 accumulator would round twice.  The fused plane kernel (NCHW) gives the same
    bits too."""
    rng = np.random.default_rng(5)
    seen = []
    real = tf_max_pool._run_grad_composed
    monkeypatch.setattr(tf_max_pool, "_run_grad_composed", lambda *a: seen.append(1) or real(*a))
    narrow = np.dtype(dtype).itemsize == 2
    for kind in ("ties", "nan") + (("tie sums",) if narrow else ()):
        if kind == "tie sums":
            x4, g4, hits = _tie_sums_case(np.random.default_rng(5), cfg, dtype)
            gx_ref = slow.max_pool_grad(x4, g4, cfg[1], cfg[2], cfg[3])
        else:
            x4, g4, _, gx_ref = _ref_case(rng, cfg, dtype, kind)
        composed = [_grad(x4, g4, cfg, "NHWC", num_threads=t).tobytes() for t in (1, 2, 3)]
        assert seen and len(set(composed)) == 1
        with monkeypatch.context() as m:
            m.setattr(tf_max_pool, "COMPOSE_MAX_C", 0)
            fused = _grad(x4, g4, cfg, "NHWC", num_threads=2)
        assert composed[0] == fused.tobytes()
        for t in (1, 2, 3):
            assert composed[0] == _grad(x4, g4, cfg, "NCHW", num_threads=t).tobytes()
        _assert_close_to_ref(fused, gx_ref, dtype)
        if kind == "tie sums":
            # where cells receive 3+ gradients the case can fail: a float32 accumulator rounds some cell apart
            wide32 = slow.max_pool_grad(x4, g4, cfg[1], cfg[2], cfg[3], acc_dtype=np.float32).astype(dtype)
            assert np.any(wide32.view(np.uint16) != fused.view(np.uint16)) == (hits.max() >= 3)
            if np.dtype(dtype) == np.float16:
                # float16 terms sum exactly in float64; NumPy rounds float64 to float16 once
                assert np.array_equal(fused.view(np.uint16), gx_ref.astype(np.float16).view(np.uint16))


@pytest.mark.parametrize("cfg", [c for c in CONFIGS if c[0][1] >= tf_max_pool.COMPOSE_MAX_C])
@pytest.mark.parametrize("dtype", DTYPES[2:], ids=DTYPE_IDS[2:])
def test_fused_channel_blocks_sum_16bit_in_float64(monkeypatch, cfg, dtype):
    """The fused channels-last kernel's vector channel blocks (C = 17, 70) and the plane kernel sum 16-bit
    gradients in float64 and round once: the same bits as the composed gradient (forced for these wide inputs),
    for every thread count, on sums a float32 accumulator would round twice."""
    rng = np.random.default_rng(11)
    x4, g4, hits = _tie_sums_case(rng, cfg, dtype)
    assert hits.max() >= 3
    fused = [_grad(x4, g4, cfg, fmt, num_threads=t).tobytes() for fmt in ("NHWC", "NCHW") for t in (1, 2, 3)]
    assert len(set(fused)) == 1
    seen = []
    real = tf_max_pool._run_grad_composed
    monkeypatch.setattr(tf_max_pool, "_run_grad_composed", lambda *a: seen.append(1) or real(*a))
    monkeypatch.setattr(tf_max_pool, "COMPOSE_MAX_C", 1 << 20)
    assert _grad(x4, g4, cfg, "NHWC", num_threads=2).tobytes() == fused[0] and seen
    wide32 = slow.max_pool_grad(x4, g4, cfg[1], cfg[2], cfg[3], acc_dtype=np.float32).astype(dtype)
    assert wide32.tobytes() != fused[0]


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16, pgtest.bfloat16],
                         ids=["f32", "f64", "f16", "bf16"])
def test_planes_path_same_bits_as_plane_path(dtype, monkeypatch):
    """The planes path (groups of small NCHW planes as channels-last tiles) against the plane path it replaces:
    the same bits forward and backward, for groups that span images (N * C not a multiple of the group), a
    partial last group, sliced (non-dense) planes, overlapping and clipped windows, ties and NaN, 1 and 2
    threads, every instruction-set level; and the reference where the test can afford it."""
    rng = np.random.default_rng(21)
    cases = [((3, 5, 8, 8), (2, 2), (2, 2), "VALID"), ((2, 37, 13, 13), (3, 3), (2, 2), "SAME"),
             ((1, 70, 7, 9), (3, 2), (1, 2), "SAME"), ((4, 9, 5, 6), (5, 3), (2, 1), "VALID")]
    for cfg in cases:
        for kind in ("ties", "nan"):
            x4, g4, y_ref, gx_ref = _ref_case(rng, cfg, dtype, kind)
            wide = np.zeros(x4.shape[:3] + (x4.shape[3] + 3,), dtype)
            wide[..., 1:-2] = x4
            sliced = wide[..., 1:-2]                                   # planes with a row stride of W + 3
            for level in config.supported_isa_levels():
                with config.set_isa_level(level):
                    for threads in (1, 2):
                        got = {}
                        for planes in (True, False):
                            with monkeypatch.context() as m:
                                m.setattr(tf_max_pool, "PLANES", planes)
                                got[planes] = [_grad(xx, g4, cfg, "NCHW", num_threads=threads).tobytes()
                                               for xx in (x4, sliced)]
                                got[planes] += [max_pool(xx, _p4(cfg[1], "NCHW"), _p4(cfg[2], "NCHW"), cfg[3],
                                                         "NCHW", num_threads=threads).tobytes()
                                                for xx in (x4, sliced)]
                        assert got[True] == got[False], (cfg, kind, level, threads)
            _assert_close_to_ref(_grad(x4, g4, cfg, "NCHW", num_threads=2), gx_ref, dtype)
