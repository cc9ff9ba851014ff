"""Determinism switch, thread-count resolution and build configuration."""
from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

import poolgrad as pg
from poolgrad import config


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
    assert cfg["tf_max_pool_isa"] in ("baseline", "avx2", "avx512") and "tf_max_pool_isa" in text
    assert isinstance(cfg["avg_pool_simd"], str) and isinstance(cfg["f16c_rows"], bool)
    assert cfg["argmax_isa"] in ("baseline", "avx2", "avx512") and "argmax_isa" in text
    assert cfg["buffer_cache_limit"] == pg.buffer_cache_info()["limit"]


def test_errors_hierarchy():
    assert issubclass(pg.ParamNullptrError, pg.PoolGradError) and issubclass(pg.ParamNullptrError, TypeError)
    assert issubclass(pg.ParamInvalidError, pg.PoolGradError) and issubclass(pg.ParamInvalidError, ValueError)
    assert pg.ParamNullptrError("x").code == 161001 == pg.ACLNN_ERR_PARAM_NULLPTR
    assert pg.ParamInvalidError("x").code == 161002 == pg.ACLNN_ERR_PARAM_INVALID
