"""Determinism switch, thread-count resolution, the instruction-set level and build configuration."""
from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

import pgtest
import poolgrad as pg
from poolgrad import _avg_pool, _config, _dtypes, _max_pool_indices, _tf_max_pool, config

# every compiled module whose kernels read the ISA level (each binds to poolgrad._config's cell at import)
LEVEL_READERS = (_avg_pool, _dtypes, _max_pool_indices, _tf_max_pool)


def test_determinism_switch_and_context_manager():
    assert pg.is_deterministic() is False            # the seeds' default
    pg.set_deterministic(True)
    try:
        assert pg.is_deterministic() is True
        with pg.deterministic(False):
            assert pg.is_deterministic() is False
            assert config.resolve_deterministic(None) is False
        assert pg.is_deterministic() is True
    finally:
        pg.set_deterministic(False)
    with pg.deterministic():
        assert pg.is_deterministic() is True
        assert config.resolve_deterministic(False) is False
    assert pg.is_deterministic() is False
    with pytest.raises(pg.ParamInvalidError):
        pg.set_deterministic("yes")
    with pytest.raises(pg.ParamInvalidError):
        config.resolve_deterministic(2)
    # the one bool rule (validation.parse_bool): 0 and 1 are bools for every bool parameter
    assert config.resolve_deterministic(1) is True and config.resolve_deterministic(np.int64(0)) is False


def test_context_manager_restores_on_error():
    with pytest.raises(RuntimeError):
        with pg.deterministic(True):
            raise RuntimeError
    assert pg.is_deterministic() is False


def test_num_threads_resolution():
    assert config.resolve_num_threads(3) == (3 if pg.get_config()["openmp"] else 1)
    assert config.resolve_num_threads(None) >= 1
    for bad in (0, -1, 2.0, "2", True):
        with pytest.raises(pg.ParamInvalidError):
            config.resolve_num_threads(bad)


def test_threadpoolctl_limits_default_thread_count():
    threadpoolctl = pytest.importorskip("threadpoolctl")
    from poolgrad import _config
    with threadpoolctl.threadpool_limits(limits=1, user_api="openmp"):
        assert config.resolve_num_threads(None) == 1
    assert _config.omp_max_threads() >= 1


def test_omp_num_threads_env_is_read_at_call_time():
    code = ("import poolgrad.config as c, os; a = c.resolve_num_threads(None); "
            "print(a)")
    env = dict(os.environ, OMP_NUM_THREADS="3")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ("3" if pg.get_config()["openmp"] else "1")


def test_show_config(capsys):
    pg.show_config()
    text = capsys.readouterr().out
    assert "openmp" in text and "omp_max_threads" in text
    cfg = pg.get_config()
    assert isinstance(cfg["openmp"], bool) and cfg["omp_max_threads"] >= 1
    # one level for every kernel family, the one they run
    assert cfg["isa_level"] == config.isa_level() and "isa_level" in text
    assert not any(key.endswith(("_isa", "_simd", "_rows")) for key in cfg)
    with config.set_isa_level("portable"):
        assert pg.get_config()["isa_level"] == "portable"
    assert cfg["buffer_cache_limit"] == pg.buffer_cache_info()["limit"]


def test_errors_hierarchy():
    assert issubclass(pg.ParamNullptrError, pg.PoolGradError) and issubclass(pg.ParamNullptrError, TypeError)
    assert issubclass(pg.ParamInvalidError, pg.PoolGradError) and issubclass(pg.ParamInvalidError, ValueError)
    assert pg.ParamNullptrError("x").code == 161001 == pg.ACLNN_ERR_PARAM_NULLPTR
    assert pg.ParamInvalidError("x").code == 161002 == pg.ACLNN_ERR_PARAM_INVALID


# ---- the instruction-set level --------------------------------------------------------------------------------

def test_isa_level_defaults_to_the_cpu_and_every_kernel_module_reads_it():
    assert config.ISA_LEVELS == ("portable", "avx2", "avx512")
    assert config.isa_level() == config.cpu_isa_level()      # POOLGRAD_ISA is not set in the test run
    assert config.supported_isa_levels() == config.ISA_LEVELS[:config.ISA_LEVELS.index(config.cpu_isa_level()) + 1]
    for code, level in enumerate(config.supported_isa_levels()):
        with config.set_isa_level(level):
            assert config.isa_level() == level
            assert [m.isa_level() for m in LEVEL_READERS] == [code] * len(LEVEL_READERS)
    top = config.ISA_LEVELS.index(config.cpu_isa_level())
    assert [m.isa_level() for m in LEVEL_READERS] == [top] * len(LEVEL_READERS)


def test_set_isa_level_sets_and_restores():
    before = config.isa_level()
    config.set_isa_level("portable")                 # a plain call sets the level for good
    try:
        assert config.isa_level() == "portable"
        with config.set_isa_level(before):
            assert config.isa_level() == before
            with pytest.raises(RuntimeError):        # the context manager restores on error
                with config.set_isa_level("portable"):
                    raise RuntimeError
            assert config.isa_level() == before
        assert config.isa_level() == "portable"
    finally:
        config.set_isa_level(before)
    assert config.isa_level() == before


@pytest.mark.parametrize("bad", ["AVX2", "baseline", "sse2", "", None, 1, b"avx2"])
def test_set_isa_level_refuses_unknown_names(bad):
    before = config.isa_level()
    with pytest.raises(pg.ParamInvalidError, match=r"level: expected one of 'portable', 'avx2', 'avx512', got"):
        config.set_isa_level(bad)
    assert config.isa_level() == before


def test_set_isa_level_refuses_a_level_above_the_cpu(monkeypatch):
    """A level the CPU does not run would fault on its first wide instruction: refused, naming what is missing.
    (The CPU here runs every level, so a CPU without AVX-512 / AVX2 is simulated.)"""
    before = config.isa_level()
    monkeypatch.setattr(_config, "cpu_isa_level", lambda: 1)
    assert config.cpu_isa_level() == "avx2" and config.supported_isa_levels() == ("portable", "avx2")
    with pytest.raises(pg.ParamInvalidError, match=r"level: 'avx512' needs AVX-512 F, VL, BW and DQ .*this CPU "
                                                   r"does not have \(the highest level it runs is 'avx2'\)"):
        config.set_isa_level("avx512")
    monkeypatch.setattr(_config, "cpu_isa_level", lambda: 0)
    with pytest.raises(pg.ParamInvalidError, match=r"'avx2' needs AVX2, FMA and F16C"):
        config.set_isa_level("avx2")
    with config.set_isa_level("portable"):
        assert config.isa_level() == "portable"
    assert config.isa_level() == before


def _import_with_isa_env(value: str) -> subprocess.CompletedProcess:
    code = ("import poolgrad, poolgrad.config as c; from poolgrad import _avg_pool, _dtypes, _max_pool_indices, "
            "_tf_max_pool as t; print(c.isa_level(), poolgrad.get_config()['isa_level'], "
            "[m.isa_level() for m in (_avg_pool, _dtypes, _max_pool_indices, t)])")
    return subprocess.run([sys.executable, "-c", code], env=dict(os.environ, POOLGRAD_ISA=value),
                          capture_output=True, text=True)


def test_poolgrad_isa_env_is_read_once_at_import():
    for code, level in enumerate(config.supported_isa_levels()):
        res = _import_with_isa_env(level)
        assert res.returncode == 0, res.stderr
        assert res.stdout.strip().split(None, 2) == [level, level, str([code] * 4)]
    res = _import_with_isa_env("")                       # empty: the CPU's level
    assert res.returncode == 0 and res.stdout.split()[0] == config.cpu_isa_level()
    res = _import_with_isa_env("avx")                    # a bad value fails the import, naming the variable
    assert res.returncode != 0
    assert "POOLGRAD_ISA: expected one of 'portable', 'avx2', 'avx512', got 'avx'" in res.stderr


def _every_family(rng: np.random.Generator) -> list[bytes]:
    """One call of every kernel family that has ISA variants, each on the path that runs them, as bytes."""
    out = []
    for dtype in (np.float32, np.float64, np.float16, pgtest.bfloat16):
        # argmax rows (stride 1 and the stride-2 split), channels-last lanes over C, the channels-last gather
        nchw = rng.standard_normal((2, 3, 23, 37)).astype(dtype)
        nhwc = rng.standard_normal((2, 9, 11, 40)).astype(dtype)
        for x, lay, k, s, p in ((nchw, "NCHW", 3, 1, 1), (nchw, "NCHW", 3, 2, 1), (nhwc, "NHWC", 3, 2, 1),
                                (nhwc, "NHWC", 2, 2, 0)):
            y, ind = pg.max_pool2d_with_indices(x, k, s, p, layout=lay, num_threads=2)
            g = rng.standard_normal(y.shape).astype(dtype)
            gx = pg.max_pool2d_with_indices_backward(g, x, ind, k, s, p, layout=lay, num_threads=2)
            out += [y.tobytes(), ind.tobytes(), gx.tobytes()]
        # average pooling row loops (16-bit rounding stores too), with and without a divisor override
        for div in (None, 3):
            y = pg.avg_pool2d(nchw, 3, 2, 1, divisor_override=div, num_threads=2)
            g = rng.standard_normal(y.shape).astype(dtype)
            out += [y.tobytes(), pg.avg_pool2d_backward(g, nchw, 3, 2, 1, divisor_override=div,
                                                        num_threads=2).tobytes()]
        # TensorFlow's max pooling: channels-last blocks and plane rows, forward and fused backward
        for x, fmt, k4, s4 in ((nhwc, "NHWC", [1, 3, 3, 1], [1, 2, 2, 1]), (nchw, "NCHW", [1, 1, 3, 3], [1, 1, 1, 2])):
            y = pg.max_pool(x, k4, s4, "SAME", fmt, num_threads=2)
            g = rng.standard_normal(y.shape).astype(dtype)
            out += [y.tobytes(), pg.max_pool_grad(x, y, g, k4, s4, "SAME", fmt, num_threads=2).tobytes()]
    # the row converters of the 16-bit types (finite values: test_dtypes.py covers NaNs, whose payloads the
    # conversion instructions may treat differently)
    values = (rng.standard_normal(999) * 1000).astype(np.float32)
    wide = np.empty(values.size, np.float32)
    narrow = np.empty(values.size, np.uint16)
    for dtype, widen, narrow_fn in ((np.float16, _dtypes.f16_to_f32_row, _dtypes.f32_to_f16_row),
                                    (pgtest.bfloat16, _dtypes.bf16_to_f32_row, _dtypes.f32_to_bf16_row)):
        widen(values.astype(dtype).view(np.uint16), wide)
        narrow_fn(values, narrow)
        out += [wide.tobytes(), narrow.tobytes()]
    return out


def test_every_kernel_family_gives_the_same_bits_at_every_level():
    """The one override runs every family's variants on this machine; all give the portable loops' bits."""
    want = None
    for level in config.supported_isa_levels():
        with config.set_isa_level(level):
            got = _every_family(np.random.default_rng(5))
        want = got if want is None else want
        assert len(got) == len(want) and all(a == b for a, b in zip(got, want)), level


def test_self_check_runs_every_level(monkeypatch):
    """``python -m poolgrad``'s self-check runs each check at every level the CPU has and names a failing one."""
    from poolgrad import selfcheck
    seen = []

    def check(rng, dtype, layout):
        seen.append(config.isa_level())
        return config.isa_level() != "portable"

    monkeypatch.setattr(selfcheck, "CHECKS", [("probe", check)])
    lines = []
    assert selfcheck.self_check(lines.append) is False
    assert seen == list(config.supported_isa_levels()) * 8          # 4 dtypes x 2 layouts
    assert lines[0].startswith("FAIL probe float32 NCHW") and lines[0].endswith("(at portable)")
    assert config.isa_level() == config.cpu_isa_level()


def _nan_payloads(a: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """a (float32) with a fifth of its cells replaced by quiet NaNs of random sign and payload."""
    u = a.view(np.uint32)
    hit = rng.random(a.shape) < 0.2
    u[hit] = (np.uint32(0x7FC00000) | rng.integers(1, 1 << 22, hit.sum()).astype(np.uint32)
              | (rng.integers(0, 2, hit.sum()).astype(np.uint32) << np.uint32(31)))
    return a


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_average_pooling_nan_collisions_differ_only_in_payload_between_levels(layout):
    """SEMANTICS 8.4's one exception: where two NaNs meet in an average-pooling sum, which one's sign and payload
    the result carries may depend on the level (vector adds may take their operands in either order); that it
    is NaN, and every other value's bits, do not.  Max pooling keeps its NaN terms' order at every level."""
    rng = np.random.default_rng(11)
    shape = (2, 9, 10, 37) if layout == "NHWC" else (2, 37, 9, 10)
    x = _nan_payloads(rng.standard_normal(shape).astype(np.float32), rng)
    g = _nan_payloads(rng.standard_normal(x.shape).astype(np.float32), rng)     # k3s1p1: y has x's shape
    results = {}
    for level in config.supported_isa_levels():
        with config.set_isa_level(level):
            y = pg.avg_pool2d(x, 3, 1, 1, layout=layout)
            yi, ind = pg.max_pool2d_with_indices(x, 3, 1, 1, layout=layout)
            results[level] = (y, pg.avg_pool2d_backward(g, x, 3, 1, 1, layout=layout),
                              pg.max_pool2d_with_indices_backward(g, x, ind, 3, 1, 1, layout=layout))
    want = results["portable"]
    for level, got in results.items():
        for a, b in zip(got[:2], want[:2]):
            nan = np.isnan(b)
            assert np.array_equal(np.isnan(a), nan), level
            assert np.array_equal(a[~nan].view(np.uint32), b[~nan].view(np.uint32)), level
        assert got[2].tobytes() == want[2].tobytes(), level
