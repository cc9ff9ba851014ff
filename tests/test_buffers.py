"""The block cache that recycles large outputs (poolgrad/memory.py): reuse only when nothing refers to a block,
recycled blocks full of old data still give exact results, the limit holds, and threads never share a block."""
from __future__ import annotations

import os
import subprocess
import sys
import threading

import numpy as np
import pytest

import poolgrad as pg
from poolgrad import memory as buffers

SMALL = 1 << 16      # the tests lower MIN_BYTES to this so that they stay small and fast


@pytest.fixture
def cache(monkeypatch):
    """A fresh, empty cache with a low size threshold; the previous state comes back afterwards."""
    monkeypatch.setattr(buffers, "MIN_BYTES", SMALL)
    monkeypatch.setattr(buffers, "_blocks", [])
    monkeypatch.setattr(buffers, "_stats", {"hits": 0, "misses": 0})
    limit = buffers.buffer_cache_limit()
    pg.set_buffer_cache_limit(64 << 20)
    yield buffers
    pg.set_buffer_cache_limit(limit)


def _ptr(a: np.ndarray) -> int:
    return a.__array_interface__["data"][0]


def test_small_requests_are_plain_arrays(cache):
    a, zeroed = cache.take(SMALL - 1)
    assert not zeroed and a.base is None
    assert cache.buffer_cache_info()["blocks"] == 0


def test_reuse_only_after_every_view_is_gone(cache):
    a, zeroed = cache.take(3 * SMALL)
    assert zeroed and not a.any() and _ptr(a) % 64 == 0
    p = _ptr(a)
    view = a[10:20]
    del a
    b, _ = cache.take(3 * SMALL)
    assert _ptr(b) != p                               # the view still holds the first block
    del view, b
    c, zeroed = cache.take(3 * SMALL)
    assert _ptr(c) == p and not zeroed                 # both free: the first one is taken again
    info = cache.buffer_cache_info()
    assert info["hits"] == 1 and info["misses"] == 2


def test_base_reference_keeps_block(cache):
    a, _ = cache.take(2 * SMALL)
    p = _ptr(a)
    base = a.base
    del a
    b, _ = cache.take(2 * SMALL)
    assert _ptr(b) != p
    del base, b


def test_size_window(cache):
    a, _ = cache.take(4 << 20)
    p = _ptr(a)
    del a
    small, _ = cache.take(SMALL)                       # would waste the 4 MiB block: gets its own (2 MiB)
    assert _ptr(small) != p
    same, zeroed = cache.take((4 << 20) - 100)         # same 2 MiB-rounded size: reused
    assert _ptr(same) == p and not zeroed


def test_limit_and_release(cache):
    pg.set_buffer_cache_limit(5 << 20)
    a, _ = cache.take(4 << 20)
    b, _ = cache.take(4 << 20)                         # over the limit while a is in use: not tracked
    assert cache.buffer_cache_info()["blocks"] == 1
    del a, b
    assert pg.buffer_cache_info()["free_bytes"] == 4 << 20
    assert pg.release_buffers() == 4 << 20
    assert pg.buffer_cache_info()["blocks"] == 0
    pg.set_buffer_cache_limit(0)
    c, zeroed = cache.take(4 << 20)
    assert c.base is None and not zeroed
    with pytest.raises(pg.ParamInvalidError, match="nbytes"):
        pg.set_buffer_cache_limit(-1)
    with pytest.raises(pg.ParamInvalidError):
        pg.set_buffer_cache_limit(1.5)


def _ops():
    rng = np.random.default_rng(3)
    x = rng.standard_normal((2, 3, 64, 96)).astype(np.float32)
    y, ind = pg.max_pool2d_with_indices(x, 3, 1, 1)
    ya, ia = pg.adaptive_max_pool2d(x, (20, 30))
    yv = pg.avg_pool2d(x, 3, 2, 1)
    xh = np.ascontiguousarray(x.transpose(0, 2, 3, 1))
    yt = pg.max_pool(xh, [1, 3, 3, 1], [1, 1, 1, 1], "SAME")
    g = rng.standard_normal(y.shape).astype(np.float32)
    return {
        "max": lambda: pg.max_pool2d_with_indices_backward(g, x, ind, 3, 1, 1),
        "adaptive": lambda: pg.adaptive_max_pool2d_backward(ya, x, ia),
        "avg": lambda: pg.avg_pool2d_backward(yv, x, 3, 2, 1),
        "tf": lambda: pg.max_pool_grad(xh, yt, yt, [1, 3, 3, 1], [1, 1, 1, 1], "SAME"),
        "elementwise": lambda: pg.max_pooling_grad(x, x, x),
        "forward": lambda: pg.max_pool2d_with_indices(x, 3, 1, 1)[0],
    }


@pytest.mark.parametrize("name", list(_ops()))
@pytest.mark.parametrize("det", [True, False])
def test_recycled_dirty_blocks_give_exact_results(cache, name, det):
    op = _ops()[name]
    with pg.deterministic(det):
        pg.set_buffer_cache_limit(0)
        ref = op().copy()
        pg.set_buffer_cache_limit(64 << 20)
        first = op()
        first.view(np.uint32).fill(0x7FC00001)       # leave NaN garbage in the block
        del first
        hits = cache.buffer_cache_info()["hits"]
        again = op()
        assert cache.buffer_cache_info()["hits"] > hits
        np.testing.assert_array_equal(again.view(np.uint32), ref.view(np.uint32))


def test_threads_never_share_a_live_block(cache):
    errors = []

    def worker(tag: int) -> None:
        for _ in range(200):
            a, _ = cache.take(2 * SMALL)
            a.fill(tag)
            if not (a == tag).all():
                errors.append(tag)
            del a

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(1, 5)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert cache.buffer_cache_info()["blocks"] <= 4


def test_environment_variable():
    code = "import poolgrad as pg; print(pg.buffer_cache_info()['limit'])"
    for value, expected in (("0", 0), ("100", 100 << 20), ("junk", 512 << 20)):
        env = dict(os.environ, POOLGRAD_BUFFER_CACHE_MB=value)
        res = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
        assert int(res.stdout) == expected
