"""Big tensors: index arithmetic is 64-bit throughout.  Marked ``slow`` (deselected by default; it allocates a
4.3 GB float16 gradient and took 16 s here):

    python -m pytest -m slow tests/test_big.py
"""
from __future__ import annotations

import numpy as np
import pytest

import poolgrad as pg


@pytest.mark.slow
def test_scatter_backward_on_a_plane_of_more_than_2_31_cells():
    H = W = 46400                                        # H*W = 2,152,960,000 > 2**31
    x = np.lib.stride_tricks.as_strided(np.zeros(1, np.float16), (1, 1, H, W), (0, 0, 0, 0))  # shape only
    k = 400
    Ho = Wo = H // k
    rng = np.random.default_rng(0)
    oh = np.arange(Ho)[:, None]
    ow = np.arange(Wo)[None, :]
    ih = oh * k + rng.integers(0, k, size=(Ho, Wo))
    iw = ow * k + rng.integers(0, k, size=(Ho, Wo))
    ind = (ih * W + iw).astype(np.int64)[None, None]
    assert ind.max() > 2**31
    go = rng.uniform(1, 2, size=(1, 1, Ho, Wo)).astype(np.float16)
    gx = pg.max_pool2d_with_indices_backward(go, x, ind, k, deterministic=True)
    assert gx.shape == (1, 1, H, W) and gx.dtype == np.float16
    flat = gx.reshape(-1)
    picks = rng.integers(0, Ho * Wo, size=2000)
    np.testing.assert_array_equal(flat[ind.reshape(-1)[picks]], go.reshape(-1)[picks])
    assert np.count_nonzero(flat[-W * 50:]) == np.count_nonzero(ind.reshape(-1) >= H * W - W * 50)
    with pytest.raises(pg.ParamInvalidError, match="int32"):
        pg.max_pool2d_with_indices_backward(go, x, ind.astype(np.int32), k)
