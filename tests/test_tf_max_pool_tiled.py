"""The tiled path of the TensorFlow-compatible max_pool forward (tf_max_pool.TILED; pgtf_ftile_* in
src_c/pg_tf_max_pool.h): windows that tile the input (k == s, no padding, two columns wide) on plane-contiguous
memory.  Where it is taken and where it is not, and that it gives the bits of the paths it replaces (the planes
path and the plane path, each forced with a monkeypatch) for every dtype, ties, NaNs (payloads, signs, signalling
NaNs), signed zeros, every instruction-set level, 1 - 3 threads, memory orders, plans and the reference."""
from __future__ import annotations

import numpy as np
import pytest

import pgtest
import poolgrad as pg
from pgtest import DTYPES, DTYPE_IDS
from poolgrad import _tf_max_pool, config, tf_max_pool
from poolgrad.slow import tf_max_pool as slow
from poolgrad.tf_max_pool import max_pool
from test_tf_max_pool_gather import NOT_TAKEN as GATHER_NOT_TAKEN, TAKEN as GATHER_TAKEN

# The tiled forward and the gather gradient take the same windows: the gather tests' cases (comments there), plus
# planes of one output row each, which the forward pairs across planes; and a SAME case with clipped windows.
TAKEN = GATHER_TAKEN + [((3, 1, 2, 8), (2, 2), "VALID")]
NOT_TAKEN = GATHER_NOT_TAKEN + [((2, 16, 7, 7), (2, 2), (2, 2), "SAME")]

# special x values by dtype, as bit patterns of the storage type: signed zeros, infinities, quiet NaNs with
# payloads and sign, signalling NaNs (stored quiet by every path for the 16-bit types)
SPECIAL = {
    "f32": (np.uint32, [0x80000000, 0x00000000, 0x7F800000, 0xFF800000, 0x7FC00123, 0xFFC00001, 0x7F800001,
                        0xFF812345]),
    "f64": (np.uint64, [1 << 63, 0, 0x7FF0000000000000, 0xFFF0000000000000, 0x7FF8000000000123,
                        0x7FF0000000000001, 0xFFF0000000000ABC]),
    "f16": (np.uint16, [0x8000, 0x0000, 0x7C00, 0xFC00, 0x7E01, 0xFE03, 0x7C01, 0xFC11, 0x0001, 0x8001]),
    "bf16": (np.uint16, [0x8000, 0x0000, 0x7F80, 0xFF80, 0x7FC1, 0xFFC3, 0x7F81, 0xFF91, 0x0001, 0x8001]),
}
DT = {np.dtype(np.float32): "f32", np.dtype(np.float64): "f64", np.dtype(np.float16): "f16",
      np.dtype(pgtest.bfloat16): "bf16"}


def _p4(hw):
    return [1, 1, hw[0], hw[1]]


def _input(rng, shape, dtype, kind):
    """x of values ``kind`` ("special": ties of small integers with the dtype's special values spread in)."""
    x = pgtest.random_values(rng, shape, dtype, "ties" if kind == "special" else kind)
    if kind == "special":
        pgtest.spread_bits(rng, x, SPECIAL[DT[np.dtype(dtype)]][1])
    return x


def _tiled_arg(monkeypatch, fn):
    """The ``tiled`` argument of every kernel call ``fn`` makes (the dispatcher's last positional argument)."""
    return pgtest.last_args_of_calls(monkeypatch, _tf_max_pool, "max_pool", fn)


def _old_paths(monkeypatch, fn):
    """``fn()`` on the paths the tiled path replaces: the planes path (where the planes are small) and the plane
    path."""
    return pgtest.results_with_switches(monkeypatch, tf_max_pool, [{"TILED": False}, {"TILED": False, "PLANES": False}],
                                        fn)


def _assert_ref(got, x, k, s, pad):
    """Exactly the reference's values (a maximum is one of the window's values; NaN for NaN)."""
    ref = slow.max_pool(x, k, s, pad)
    np.testing.assert_array_equal(pgtest.as64(got), ref)


def test_taken_where_the_windows_tile(monkeypatch):
    """Taken for every TAKEN case (NCHW memory, 1 - 3 threads), never where the windows overlap, leave gaps, are
    clipped or are not two columns wide, nor for channels-last memory, nor with TILED off; the gradient's own
    switch (GATHER) does not turn it off."""
    rng = np.random.default_rng(0)
    for shape, k, pad in TAKEN:
        x = _input(rng, shape, np.float32, "normal")
        for threads in (1, 2, 3):
            seen = _tiled_arg(monkeypatch, lambda: max_pool(x, _p4(k), _p4(k), pad, "NCHW", num_threads=threads))
            assert seen and all(v > 0 for v in seen), (shape, k, pad, threads, seen)
        with monkeypatch.context() as m:
            m.setattr(tf_max_pool, "GATHER", False)
            seen = _tiled_arg(monkeypatch, lambda: max_pool(x, _p4(k), _p4(k), pad, "NCHW"))
        assert seen and all(v > 0 for v in seen)
        with monkeypatch.context() as m:
            m.setattr(tf_max_pool, "TILED", False)
            seen = _tiled_arg(monkeypatch, lambda: max_pool(x, _p4(k), _p4(k), pad, "NCHW"))
        assert seen == [0] * len(seen) and seen
    for shape, k, s, pad in NOT_TAKEN:
        x = _input(rng, shape, np.float32, "normal")
        seen = _tiled_arg(monkeypatch, lambda: max_pool(x, _p4(k), _p4(s), pad, "NCHW"))
        assert seen == [0] * len(seen) and seen, (shape, k, s, pad)
    # channels-last memory (16 channels: the channels-last kernel)
    x = np.ascontiguousarray(pgtest.random_values(rng, (2, 8, 8, 16), np.float32))
    seen = _tiled_arg(monkeypatch, lambda: max_pool(x, [1, 2, 2, 1], [1, 2, 2, 1], "VALID"))
    assert seen == [0] * len(seen) and seen


def test_float16_takes_it_on_rows_it_is_faster_on(monkeypatch):
    """float16 (TILED_F16_MIN_WO): taken with 2, 4 or at least 8 windows a row, not with 1, 3, 5, 6 or 7."""
    rng = np.random.default_rng(6)
    for wo, taken in ((1, False), (2, True), (3, False), (4, True), (5, False), (6, False), (7, False),
                      (8, True), (9, True), (16, True)):
        x = _input(rng, (2, 3, 4, 2 * wo), np.float16, "normal")
        seen = _tiled_arg(monkeypatch, lambda: max_pool(x, [1, 1, 2, 2], [1, 1, 2, 2], "VALID", "NCHW"))
        assert seen and all((v > 0) == taken for v in seen), (wo, seen)


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_bits_of_the_old_paths(dtype, monkeypatch):
    """Bit for bit the planes path's and the plane path's result (ties, NaNs, signed zeros, signalling NaNs), at
    1 - 3 threads, and the reference's values (float16 on every row width: TILED_F16_MIN_WO off)."""
    monkeypatch.setattr(tf_max_pool, "TILED_F16_MIN_WO", 0)
    rng = np.random.default_rng(1)
    for shape, k, pad in TAKEN:
        for kind in ("normal", "ties", "nan", "special"):
            x = _input(rng, shape, dtype, kind)
            want = max_pool(x, _p4(k), _p4(k), pad, "NCHW", num_threads=1)
            for old in _old_paths(monkeypatch, lambda: max_pool(x, _p4(k), _p4(k), pad, "NCHW", num_threads=2)):
                assert old.tobytes() == want.tobytes(), (shape, k, pad, kind)
            for threads in (2, 3):
                got = max_pool(x, _p4(k), _p4(k), pad, "NCHW", num_threads=threads)
                assert got.tobytes() == want.tobytes(), (shape, k, pad, kind, threads)
            _assert_ref(want, x, k, k, pad)


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_not_taken_cases_keep_their_bits(dtype):
    """Where it is not taken (SAME with clipping, odd sizes, k != s, 3-column windows) the results are still the
    reference's values and the same for 1 - 3 threads."""
    rng = np.random.default_rng(5)
    for shape, k, s, pad in NOT_TAKEN:
        x = _input(rng, shape, dtype, "special")
        want = max_pool(x, _p4(k), _p4(s), pad, "NCHW", num_threads=1)
        _assert_ref(want, x, k, s, pad)
        for threads in (2, 3):
            assert max_pool(x, _p4(k), _p4(s), pad, "NCHW", num_threads=threads).tobytes() == want.tobytes()


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_every_isa_level(dtype, monkeypatch):
    """Every instruction-set variant of the vector code (and its chunk widths) gives the plane path's bits."""
    monkeypatch.setattr(tf_max_pool, "TILED_F16_MIN_WO", 0)
    rng = np.random.default_rng(2)
    for shape, k, pad in TAKEN:
        x = _input(rng, shape, dtype, "special")
        with monkeypatch.context() as m:
            m.setattr(tf_max_pool, "TILED", False)
            m.setattr(tf_max_pool, "PLANES", False)
            want = max_pool(x, _p4(k), _p4(k), pad, "NCHW", num_threads=2)
        for level in config.supported_isa_levels():
            with config.set_isa_level(level):
                got = max_pool(x, _p4(k), _p4(k), pad, "NCHW", num_threads=2)
            assert got.tobytes() == want.tobytes(), (shape, k, pad, level)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16], ids=["f32", "f64", "f16"])
def test_memory_orders(dtype, monkeypatch):
    """Strided, negative, Fortran and permuted x (non-unit W strides: the scalar windows; Fortran: the
    channels-last kernels) and NHWC-format arrays over NCHW memory give the contiguous call's bits."""
    monkeypatch.setattr(tf_max_pool, "TILED_F16_MIN_WO", 0)
    rng = np.random.default_rng(3)
    for shape, k, pad in [TAKEN[0], TAKEN[1], TAKEN[6], TAKEN[9]]:
        x = _input(rng, shape, dtype, "special")
        want = max_pool(x, _p4(k), _p4(k), pad, "NCHW", num_threads=2)
        for name, xv in pgtest.strided_variants(x):
            got = max_pool(xv, _p4(k), _p4(k), pad, "NCHW", num_threads=2)
            assert np.ascontiguousarray(got).tobytes() == want.tobytes(), (shape, name)
        # data_format NHWC over plane-contiguous memory: the tiled path too
        xt = x.transpose(0, 2, 3, 1)
        ks = [1, k[0], k[1], 1]
        seen = _tiled_arg(monkeypatch, lambda: max_pool(xt, ks, ks, pad, "NHWC"))
        assert seen and all(v > 0 for v in seen)
        got = max_pool(xt, ks, ks, pad, "NHWC", num_threads=3)
        assert np.ascontiguousarray(got.transpose(0, 3, 1, 2)).tobytes() == want.tobytes(), shape


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_plans_replay_it(dtype):
    """A plan replays the tiled call (no per-call buffers in its record) with the function's bits, and a plan
    made on the old path keeps those bits too."""
    rng = np.random.default_rng(4)
    for shape, k, pad in (TAKEN[0], TAKEN[8]):
        for threads in (1, 2):
            x = _input(rng, shape, dtype, "special")
            want = max_pool(x, _p4(k), _p4(k), pad, "NCHW", num_threads=threads)
            plan = pg.plan_max_pool(x, _p4(k), _p4(k), pad, "NCHW", num_threads=threads)
            for _ in range(3):
                assert plan(x).tobytes() == want.tobytes()
            rec = plan._launch_record
            assert rec is not None and rec.kernel is not None and rec.kernel.temps == ()
            x2 = _input(rng, shape, dtype, "nan")
            assert plan(x2).tobytes() == max_pool(x2, _p4(k), _p4(k), pad, "NCHW").tobytes()


def test_dispatcher_refuses_tables_that_do_not_tile():
    """The kernel entry point checks the window tables before it takes the tiled path (a planner bug would
    otherwise read and write wrong cells)."""
    x = np.zeros((1, 1, 8, 8), np.float32)
    y = np.empty((1, 1, 4, 4), np.float32)
    ok = np.arange(4, dtype=np.int64) * 2
    part = np.array([0, 4], np.int64)
    ro = np.zeros(3, np.int32)
    for hlo, hhi in ((ok, ok + 2), (ok + 1, ok + 3), (ok, ok + 3)):
        args = ("f32", x, y, hlo, hhi, ok, ok + 2, part, False, ro, False, 0, 0, 2, 2, 0, 1, 0, None, 1)
        if hlo is ok and hhi[0] == 2:
            _tf_max_pool.max_pool(*args)
            continue
        with pytest.raises(ValueError, match="do not tile"):
            _tf_max_pool.max_pool(*args)
