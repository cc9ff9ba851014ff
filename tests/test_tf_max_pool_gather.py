"""The gather path of the TensorFlow-compatible max_pool_grad (tf_max_pool.GATHER; pgtf_gather_* in
src_c/pg_tf_max_pool.h): windows that tile the input (k == s, no padding, two columns wide) on plane-contiguous
memory.  Where it is taken and where it is not, and that it gives the bits of the ring paths it replaces (the
planes path and the plane path, each forced with a monkeypatch) for every dtype, ties, NaNs, special grad values
(-0, infinities, NaN payloads, signalling NaNs), every instruction-set level, 1 - 3 threads, memory orders, plans
and the reference."""
from __future__ import annotations

import numpy as np
import pytest

import pgtest
import poolgrad as pg
from pgtest import DTYPES, DTYPE_IDS
from poolgrad import _tf_max_pool, config, tf_max_pool
from poolgrad.slow import tf_max_pool as slow
from poolgrad.tf_max_pool import max_pool, max_pool_grad

# (shape NCHW, window = stride (h, w), padding): the gather path's cases
TAKEN = [
    ((2, 16, 8, 8), (2, 2), "VALID"),      # bench/plan_overhead.py's row: 4 windows a row, two rows a chunk
    ((1, 3, 9, 11), (2, 2), "VALID"),      # a row and a column past the last window (zeros)
    ((2, 5, 12, 12), (2, 2), "SAME"),      # SAME where the stride divides the size: no padding
    ((1, 2, 4, 4), (2, 2), "VALID"),       # 2 windows a row
    ((1, 3, 6, 2), (2, 2), "VALID"),       # 1 window a row: scalar (float64: two rows in a 2-lane chunk)
    ((1, 2, 5, 7), (2, 2), "VALID"),       # 3 windows a row: scalar for 32- and 16-bit types
    ((1, 4, 6, 70), (2, 2), "VALID"),      # 35 windows: chunks of every width, the last one overlapping
    ((1, 2, 4, 300), (2, 2), "VALID"),     # 150 windows: rows in segments of 64
    ((3, 7, 10, 34), (2, 2), "VALID"),     # 17 windows
    ((2, 3, 10, 9), (3, 2), "VALID"),      # 3 window rows
    ((1, 5, 7, 16), (1, 2), "SAME"),       # 1 window row, 8 windows a row, an odd number of output rows
    ((1, 1, 6, 8), (2, 2), "VALID"),       # 3 output rows: a pair, then one alone
    ((2, 3, 32, 32), (2, 2), "VALID"),     # 16 windows a row
]
# (shape NCHW, ksize, strides, padding): windows that overlap, leave gaps, are clipped or are 3 columns wide
NOT_TAKEN = [
    ((1, 2, 7, 9), (2, 2), (2, 2), "SAME"),
    ((1, 2, 8, 8), (3, 3), (2, 2), "VALID"),
    ((1, 2, 8, 8), (2, 2), (3, 3), "VALID"),
    ((1, 2, 9, 9), (3, 3), (3, 3), "VALID"),
    ((1, 2, 8, 8), (2, 2), (2, 1), "VALID"),
]

# special grad values by dtype, as bit patterns of the storage type: -0, +-inf, quiet NaNs with payloads and sign,
# signalling NaNs (the ring paths store zero + grad: -0 comes out +0, a signalling NaN quiet)
SPECIAL = {
    "f32": (np.uint32, [0x80000000, 0x7F800000, 0xFF800000, 0x7FC00123, 0xFFC00001, 0x7F800001, 0xFF812345]),
    "f64": (np.uint64, [1 << 63, 0x7FF0000000000000, 0xFFF0000000000000, 0x7FF8000000000123,
                        0x7FF0000000000001, 0xFFF0000000000ABC]),
    "f16": (np.uint16, [0x8000, 0x7C00, 0xFC00, 0x7E01, 0xFE03, 0x7C01, 0xFC11, 0x0001, 0x8001]),
    "bf16": (np.uint16, [0x8000, 0x7F80, 0xFF80, 0x7FC1, 0xFFC3, 0x7F81, 0xFF91, 0x0001, 0x8001]),
}
DT = {np.dtype(np.float32): "f32", np.dtype(np.float64): "f64", np.dtype(np.float16): "f16",
      np.dtype(pgtest.bfloat16): "bf16"}


def _p4(hw):
    return [1, 1, hw[0], hw[1]]


def _inputs(rng, shape, k, s, pad, dtype, kind):
    """x (values of ``kind``), its max pooling and a grad with every special value of the dtype in it."""
    x = pgtest.random_values(rng, shape, dtype, kind)
    y = max_pool(x, _p4(k), _p4(s), pad, "NCHW")
    g = pgtest.random_values(rng, y.shape, dtype)
    pgtest.spread_bits(rng, g, SPECIAL[DT[np.dtype(dtype)]][1])
    return x, y, g


def _gather_arg(monkeypatch, fn):
    """The ``gather`` argument of every kernel call ``fn`` makes (the dispatcher's last positional argument)."""
    return pgtest.last_args_of_calls(monkeypatch, _tf_max_pool, "max_pool_grad", fn)


def _old_paths(monkeypatch, fn):
    """``fn()`` on the ring paths the gather path replaces: the planes path (where the planes are small) and the
    plane path."""
    return pgtest.results_with_switches(monkeypatch, tf_max_pool, [{"GATHER": False}, {"GATHER": False, "PLANES": False}],
                                        fn)


def _assert_ref(got, x, g, k, pad):
    ref = slow.max_pool_grad(x, g, k, k, pad)
    dtype = got.dtype
    want = ref.astype(dtype).astype(np.float64)
    np.testing.assert_allclose(pgtest.as64(got), want, equal_nan=True, **pgtest.tolerance(dtype))


def test_taken_where_the_windows_tile(monkeypatch):
    """Taken for every TAKEN case (NCHW memory, 1 - 3 threads), never where the windows overlap, leave gaps, are
    clipped or are not two columns wide, nor for channels-last memory, nor with GATHER off."""
    rng = np.random.default_rng(0)
    for shape, k, pad in TAKEN:
        x, y, g = _inputs(rng, shape, k, k, pad, np.float32, "normal")
        for threads in (1, 2, 3):
            seen = _gather_arg(monkeypatch, lambda: max_pool_grad(x, y, g, _p4(k), _p4(k), pad, "NCHW",
                                                                    num_threads=threads))
            assert seen and all(v > 0 for v in seen), (shape, k, pad, threads, seen)
        with monkeypatch.context() as m:
            m.setattr(tf_max_pool, "GATHER", False)
            seen = _gather_arg(monkeypatch, lambda: max_pool_grad(x, y, g, _p4(k), _p4(k), pad, "NCHW"))
        assert seen == [0] * len(seen) and seen
    for shape, k, s, pad in NOT_TAKEN:
        x, y, g = _inputs(rng, shape, k, s, pad, np.float32, "normal")
        seen = _gather_arg(monkeypatch, lambda: max_pool_grad(x, y, g, _p4(k), _p4(s), pad, "NCHW"))
        assert seen == [0] * len(seen) and seen, (shape, k, s, pad)
    # channels-last memory (16 channels: the fused channels-last kernel)
    x = np.ascontiguousarray(pgtest.random_values(rng, (2, 8, 8, 16), np.float32))
    y = max_pool(x, [1, 2, 2, 1], [1, 2, 2, 1], "VALID")
    seen = _gather_arg(monkeypatch, lambda: max_pool_grad(x, y, np.ones_like(y), [1, 2, 2, 1], [1, 2, 2, 1],
                                                            "VALID"))
    assert seen == [0] * len(seen) and seen


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_bits_of_the_ring_paths(dtype, monkeypatch):
    """Bit for bit the planes path's and the plane path's result (ties, NaNs, special grad values), at 1 - 3
    threads, and close to the reference."""
    rng = np.random.default_rng(1)
    for shape, k, pad in TAKEN:
        for kind in ("normal", "ties", "nan"):
            x, y, g = _inputs(rng, shape, k, k, pad, dtype, kind)
            want = max_pool_grad(x, y, g, _p4(k), _p4(k), pad, "NCHW", num_threads=1)
            for old in _old_paths(monkeypatch, lambda: max_pool_grad(x, y, g, _p4(k), _p4(k), pad, "NCHW",
                                                                       num_threads=2)):
                assert old.tobytes() == want.tobytes(), (shape, k, pad, kind)
            for threads in (2, 3):
                got = max_pool_grad(x, y, g, _p4(k), _p4(k), pad, "NCHW", num_threads=threads)
                assert got.tobytes() == want.tobytes(), (shape, k, pad, kind, threads)
            if kind != "normal":
                continue
            # the reference on finite grads (its sums are float64: the special values are checked above)
            gf = pgtest.random_values(rng, y.shape, dtype)
            _assert_ref(max_pool_grad(x, y, gf, _p4(k), _p4(k), pad, "NCHW"), x, gf, k, pad)


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_every_isa_level(dtype, monkeypatch):
    """Every instruction-set variant of the vector code (and its chunk widths) gives the plane path's bits."""
    rng = np.random.default_rng(2)
    for shape, k, pad in TAKEN:
        x, y, g = _inputs(rng, shape, k, k, pad, dtype, "ties")
        with monkeypatch.context() as m:
            m.setattr(tf_max_pool, "GATHER", False)
            m.setattr(tf_max_pool, "PLANES", False)
            want = max_pool_grad(x, y, g, _p4(k), _p4(k), pad, "NCHW", num_threads=2)
        for level in config.supported_isa_levels():
            with config.set_isa_level(level):
                got = max_pool_grad(x, y, g, _p4(k), _p4(k), pad, "NCHW", num_threads=2)
            assert got.tobytes() == want.tobytes(), (shape, k, pad, level)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16], ids=["f32", "f64", "f16"])
def test_memory_orders(dtype, monkeypatch):
    """Strided, negative, Fortran and permuted x1 / grad / out (non-unit W strides: the scalar windows; Fortran:
    the channels-last kernels) and NHWC-format arrays over NCHW memory give the contiguous call's bits."""
    rng = np.random.default_rng(3)
    for shape, k, pad in [TAKEN[0], TAKEN[1], TAKEN[6], TAKEN[9]]:
        x, y, g = _inputs(rng, shape, k, k, pad, dtype, "ties")
        want = max_pool_grad(x, y, g, _p4(k), _p4(k), pad, "NCHW", num_threads=2)
        for (nx, xv), (ng, gv) in zip(pgtest.strided_variants(x), pgtest.strided_variants(g)):
            got = max_pool_grad(xv, y, gv, _p4(k), _p4(k), pad, "NCHW", num_threads=2)
            assert got.tobytes() == want.tobytes(), (shape, nx, ng)
        for name, out in pgtest.strided_variants(np.zeros_like(x)):
            res = max_pool_grad(x, y, g, _p4(k), _p4(k), pad, "NCHW", out=out, num_threads=3)
            assert res is out
            assert np.ascontiguousarray(out).tobytes() == want.tobytes(), (shape, name)
        # data_format NHWC over plane-contiguous memory: the gather path too
        xt, yt, gt = (a.transpose(0, 2, 3, 1) for a in (x, y, g))
        ks = [1, k[0], k[1], 1]
        seen = _gather_arg(monkeypatch, lambda: max_pool_grad(xt, yt, gt, ks, ks, pad, "NHWC"))
        assert seen and all(v > 0 for v in seen)
        got = max_pool_grad(xt, yt, gt, ks, ks, pad, "NHWC", num_threads=2)
        assert np.ascontiguousarray(got.transpose(0, 3, 1, 2)).tobytes() == want.tobytes(), shape


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_plans_replay_it(dtype):
    """A plan replays the gather call (no per-call buffers in its record: no rings, no row offsets) with the
    function's bits, with and without out=, and check_orig_output keeps its behaviour."""
    rng = np.random.default_rng(4)
    shape, k, pad = TAKEN[0]
    for threads in (1, 2):
        x, y, g = _inputs(rng, shape, k, k, pad, dtype, "nan")
        want = max_pool_grad(x, y, g, _p4(k), _p4(k), pad, "NCHW", num_threads=threads)
        plan = pg.plan_max_pool_grad(x, y, g, _p4(k), _p4(k), pad, "NCHW", num_threads=threads)
        for _ in range(3):
            assert plan(x, y, g).tobytes() == want.tobytes()
        rec = plan._launch_record
        assert rec is not None and rec.kernel is not None and rec.kernel.temps == ()
        oplan = pg.plan_max_pool_grad(x, y, g, _p4(k), _p4(k), pad, "NCHW", out=np.empty_like(x),
                                      num_threads=threads)
        for _ in range(3):
            out = np.full_like(x, 7)
            assert oplan(x, y, g, out=out) is out and out.tobytes() == want.tobytes()
    x, y, g = _inputs(rng, shape, k, k, pad, dtype, "normal")
    assert max_pool_grad(x, y, g, _p4(k), _p4(k), pad, "NCHW", check_orig_output=True).tobytes() == \
        max_pool_grad(x, y, g, _p4(k), _p4(k), pad, "NCHW").tobytes()
    bad = y.copy()
    bad.reshape(-1)[5] = bad.reshape(-1)[5] + np.asarray(1, dtype)
    with pytest.raises(pg.ParamInvalidError, match="check_orig_output"):
        max_pool_grad(x, bad, g, _p4(k), _p4(k), pad, "NCHW", check_orig_output=True)


def test_dispatcher_refuses_tables_that_do_not_tile():
    """The kernel entry point checks the window tables before it takes the gather path (a planner bug would
    otherwise write wrong cells)."""
    x = np.zeros((1, 1, 8, 8), np.float32)
    g = np.zeros((1, 1, 4, 4), np.float32)
    gx = np.empty_like(x)
    ok = np.arange(4, dtype=np.int64) * 2
    one = np.array([0, 1], np.int64)
    scratch, rowoff = np.zeros((1, 1), np.float32), np.zeros((1, 1), np.int32)
    for hlo, hhi in ((ok, ok + 2), (ok + 1, ok + 3), (ok, ok + 3)):
        args = ("f32", x, g, gx, hlo, hhi, ok, ok + 2, one, one[:1], one[1:], False, False, scratch, 1, rowoff,
                False, 0, 0, 1, 1, 0, 1, 0, 1)
        if hlo is ok and hhi[0] == 2:
            _tf_max_pool.max_pool_grad(*args)
            continue
        with pytest.raises(ValueError, match="do not tile"):
            _tf_max_pool.max_pool_grad(*args)
