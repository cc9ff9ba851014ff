"""adaptive_max_pool2d and its backward versus the reference and PyTorch."""
from __future__ import annotations

import itertools

import numpy as np
import pytest

import pgtest
import poolgrad as pg
from poolgrad.slow import adaptive as slow
from pgtest import DTYPES, DTYPE_IDS, LAYOUTS, needs_torch, torch

CASES = [((2, 3, 10, 13), (3, 4)), ((1, 2, 5, 7), (9, 11)), ((2, 2, 16, 16), (4, 4)), ((1, 3, 7, 7), (1, 1)),
         ((1, 1, 13, 5), (13, 5)), ((1, 2, 9, 6), (4, 6))]


@pytest.mark.parametrize("shape,osz", CASES)
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_forward_and_backward_match_reference(shape, osz, dtype):
    rng = np.random.default_rng(0)
    x4 = rng.integers(-3, 4, size=shape).astype(dtype)
    y_ref, i_ref = slow.adaptive_max_pool2d(x4, osz)
    go4 = rng.standard_normal(i_ref.shape).astype(dtype)
    g_ref = slow.adaptive_max_pool2d_backward(go4, shape, i_ref).astype(dtype).astype(np.float64)
    for layout, idt in itertools.product(LAYOUTS, [np.int32, np.int64]):
        y, ind = pg.adaptive_max_pool2d(pgtest.to_layout(x4, layout), osz, layout=layout, index_dtype=idt)
        np.testing.assert_array_equal(pgtest.from_layout(ind, layout), i_ref)
        np.testing.assert_array_equal(pgtest.as64(pgtest.from_layout(y, layout)), y_ref.astype(dtype).astype(float))
        for det, nt in itertools.product([True, False], [1, 2, 3]):
            g = pg.adaptive_max_pool2d_backward(pgtest.to_layout(go4, layout), pgtest.to_layout(x4, layout), ind,
                                                layout=layout, deterministic=det, num_threads=nt)
            np.testing.assert_allclose(pgtest.as64(pgtest.from_layout(g, layout)), g_ref, **pgtest.tolerance(dtype))


@needs_torch
@pytest.mark.parametrize("shape,osz", CASES + [((2, 4, 112, 112), (7, 7)), ((1, 2, 112, 112), (13, 13))])
def test_matches_torch(shape, osz):
    rng = np.random.default_rng(1)
    x = rng.standard_normal(shape)
    x[rng.random(shape) < 0.05] = np.nan
    xt = torch.from_numpy(x)
    yt, it = torch.nn.functional.adaptive_max_pool2d(xt, osz, return_indices=True)
    y, ind = pg.adaptive_max_pool2d(x, osz)
    np.testing.assert_array_equal(ind, it.numpy())
    np.testing.assert_array_equal(y, yt.numpy())
    go = rng.standard_normal(ind.shape)
    ref = torch.ops.aten.adaptive_max_pool2d_backward(torch.from_numpy(go), xt, it).numpy()
    for det in (True, False):
        g = pg.adaptive_max_pool2d_backward(go, x, ind, deterministic=det, num_threads=2)
        np.testing.assert_allclose(g, ref, rtol=1e-14, atol=1e-14)


def test_deterministic_bitwise_over_threads():
    rng = np.random.default_rng(2)
    x = rng.standard_normal((1, 3, 200, 150)).astype(np.float32)
    y, ind = pg.adaptive_max_pool2d(x, (7, 9))
    go = rng.standard_normal(y.shape).astype(np.float32)
    outs = [pg.adaptive_max_pool2d_backward(go, x, ind, deterministic=True, num_threads=t).tobytes()
            for t in pgtest.THREADS]
    assert all(o == outs[0] for o in outs)


def test_output_size_forms_and_errors():
    x = np.zeros((1, 2, 8, 6), np.float32)
    assert pg.adaptive_max_pool2d(x, 3)[0].shape == (1, 2, 3, 3)
    assert pg.adaptive_max_pool2d(x, (None, 2))[0].shape == (1, 2, 8, 2)
    assert pg.adaptive_max_pool2d(x, [4])[0].shape == (1, 2, 4, 4)
    for bad in (0, -1, (1, 2, 3), (), 2.5, "3", True, (0, 2), None):
        with pytest.raises(pg.ParamInvalidError) as exc:
            pg.adaptive_max_pool2d(x, bad)
        assert exc.value.code == 161002 and "output_size" in str(exc.value)
    y, ind = pg.adaptive_max_pool2d(x, 3)
    with pytest.raises(pg.ParamInvalidError, match="grad_output"):
        pg.adaptive_max_pool2d_backward(y[:, :1], x, ind)
    with pytest.raises(pg.ParamInvalidError, match="indices"):
        pg.adaptive_max_pool2d_backward(y, x, ind[:, :, :2])
    with pytest.raises(pg.ParamNullptrError):
        pg.adaptive_max_pool2d_backward(y, x, None)
    bad = ind.copy()
    bad[0, 1, 2, 0] = 48
    with pytest.raises(pg.ParamInvalidError, match=r"n=0, c=1, oh=2, ow=0"):
        pg.adaptive_max_pool2d_backward(y, x, bad)


def test_unaddressable_output_size_is_a_parameter_error():
    """An output whose byte size cannot even be indexed is refused with 161002, not NumPy's bare ValueError."""
    x = np.zeros((1, 1, 1, 1), np.float32)
    with pytest.raises(pg.ParamInvalidError, match="too large") as info:
        pg.adaptive_max_pool2d(x, (2 ** 31 - 1, 2 ** 31 - 1))
    assert info.value.code == 161002
