"""max_pool2d_with_indices and its backward: versus the slow reference, PyTorch, across layouts, strides,
dtypes, thread counts and determinism modes; bad indices; invalid parameters."""
from __future__ import annotations

import itertools

import numpy as np
import pytest

import pgtest
import poolgrad as pg
from poolgrad import slow
from pgtest import DTYPES, DTYPE_IDS, LAYOUTS, needs_torch, torch

# (shape NCHW, kernel, stride, padding, dilation, ceil_mode)
CONFIGS = [
    ((2, 3, 9, 11), (3, 3), (2, 2), (1, 1), (1, 1), False),
    ((1, 2, 17, 13), (3, 2), (1, 2), (1, 1), (1, 1), True),
    ((2, 1, 10, 10), (2, 2), (2, 2), (0, 0), (1, 1), False),
    ((1, 3, 12, 9), (3, 3), (2, 3), (2, 1), (2, 1), True),     # dilation + ceil_mode, padding at its maximum
    ((1, 2, 5, 5), (5, 5), (1, 1), (2, 2), (1, 1), False),
    ((3, 2, 4, 4), (4, 4), (4, 4), (0, 0), (1, 1), False),     # 1x1 output
    ((1, 4, 7, 8), (2, 3), (3, 1), (1, 1), (3, 2), True),
    ((1, 2, 9, 9), (3, 3), (2, 2), (1, 1), (2, 2), True),
]
# PyTorch caps padding at kernel_size // 2 whatever the dilation; the spec (CANN) allows
# ((k - 1) * d + 1) // 2, so configurations beyond PyTorch's cap are checked against the reference only.
TORCH_CONFIGS = [c for c in CONFIGS if all(p <= k // 2 for p, k in zip(c[3], c[1]))]


_data = pgtest.random_values


def _call_fwd(x4, layout, rank, cfg, **kw):
    _, k, s, p, d, ceil = cfg
    y, ind = pg.max_pool2d_with_indices(pgtest.to_layout(x4, layout, rank), k, s, p, d, ceil, layout=layout, **kw)
    return pgtest.from_layout(y, layout), pgtest.from_layout(ind, layout)


@pytest.mark.parametrize("cfg", CONFIGS)
@pytest.mark.parametrize("kind", ["normal", "ties", "nan"])
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_forward_matches_reference(cfg, kind, dtype):
    rng = np.random.default_rng(1)
    x4 = _data(rng, cfg[0], dtype, kind)
    y_ref, i_ref = slow.max_pool2d_with_indices(x4, *cfg[1:])
    for layout in LAYOUTS:
        y, ind = _call_fwd(x4, layout, 4, cfg)
        np.testing.assert_array_equal(ind, i_ref)
        np.testing.assert_array_equal(pgtest.as64(y), y_ref.astype(dtype).astype(np.float64))
        assert y.dtype == dtype and ind.dtype == np.int64


@needs_torch
@pytest.mark.parametrize("cfg", TORCH_CONFIGS)
@pytest.mark.parametrize("kind", ["normal", "ties", "nan"])
def test_forward_matches_torch(cfg, kind):
    rng = np.random.default_rng(2)
    x4 = _data(rng, cfg[0], np.float32, kind)
    _, k, s, p, d, ceil = cfg
    yt, it = torch.nn.functional.max_pool2d(torch.from_numpy(x4), k, s, p, d, ceil, return_indices=True)
    for layout in LAYOUTS:
        y, ind = _call_fwd(x4, layout, 4, cfg, index_dtype=np.int32)
        np.testing.assert_array_equal(ind, it.numpy())
        np.testing.assert_array_equal(y, yt.numpy())
        assert ind.dtype == np.int32


def _bwd(go4, x4, ind4, layout, rank, cfg, **kw):
    _, k, s, p, d, ceil = cfg
    g = pg.max_pool2d_with_indices_backward(pgtest.to_layout(go4, layout, rank), pgtest.to_layout(x4, layout, rank),
                                            pgtest.to_layout(ind4, layout, rank), k, s, p, d, ceil,
                                            layout=layout, **kw)
    return pgtest.from_layout(g, layout)


@pytest.mark.parametrize("cfg", CONFIGS)
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("det", [True, False])
def test_backward_matches_reference(cfg, dtype, det):
    rng = np.random.default_rng(3)
    x4 = _data(rng, cfg[0], dtype, "ties")
    _, ind = slow.max_pool2d_with_indices(x4, *cfg[1:])
    go4 = rng.standard_normal(ind.shape).astype(dtype)
    ref = slow.max_pool2d_with_indices_backward(go4, x4.shape, ind).astype(dtype).astype(np.float64)
    for layout, nt, idt in itertools.product(LAYOUTS, [1, 2, 3], [np.int32, np.int64]):
        g = _bwd(go4, x4, ind.astype(idt), layout, 4, cfg, deterministic=det, num_threads=nt)
        assert g.dtype == dtype and g.shape == x4.shape
        np.testing.assert_allclose(pgtest.as64(g), ref, **pgtest.tolerance(dtype))


@pytest.mark.parametrize("layout", LAYOUTS)
def test_three_d_input(layout):
    rng = np.random.default_rng(4)
    cfg = CONFIGS[0]
    x4 = rng.standard_normal((1,) + cfg[0][1:]).astype(np.float32)
    y, ind = _call_fwd(x4, layout, 3, cfg)
    y4, i4 = slow.max_pool2d_with_indices(x4, *cfg[1:])
    np.testing.assert_array_equal(ind, i4)
    go4 = rng.standard_normal(i4.shape).astype(np.float32)
    g = _bwd(go4, x4, i4, layout, 3, cfg)
    np.testing.assert_allclose(g, slow.max_pool2d_with_indices_backward(go4, x4.shape, i4), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_any_strides_same_result(dtype):
    """Non-contiguous, negative, Fortran and channels-last buffers give bit-identical results."""
    rng = np.random.default_rng(5)
    cfg = ((2, 3, 11, 10), (3, 3), (2, 1), (1, 1), (1, 1), True)
    x4 = _data(rng, cfg[0], dtype, "ties")
    y0, i0 = slow.max_pool2d_with_indices(x4, *cfg[1:])
    go4 = rng.standard_normal(i0.shape).astype(dtype)
    base = _bwd(go4, x4, i0, "NCHW", 4, cfg, deterministic=True)
    _, k, s, p, d, ceil = cfg
    for layout in LAYOUTS:
        xs, gos, ins = (pgtest.to_layout(a, layout) for a in (x4, go4, i0))
        for (nx, xv), (ng, gv), (ni, iv) in zip(pgtest.strided_variants(xs), pgtest.strided_variants(gos),
                                                pgtest.strided_variants(ins)):
            y, ind = pg.max_pool2d_with_indices(xv, k, s, p, d, ceil, layout=layout)
            np.testing.assert_array_equal(pgtest.from_layout(ind, layout), i0, err_msg=nx)
            for det in (True, False):
                g = pg.max_pool2d_with_indices_backward(gv, xv, iv, k, s, p, d, ceil, layout=layout,
                                                        deterministic=det, num_threads=2)
                got = pgtest.from_layout(g, layout)
                if det:
                    assert got.tobytes() == np.ascontiguousarray(base).tobytes(), (nx, ng, ni)
                else:
                    np.testing.assert_allclose(pgtest.as64(got), pgtest.as64(base), **pgtest.tolerance(dtype))


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("shape,cfg_i", [((2, 3, 40, 33), 0), ((1, 1, 130, 17), 1), ((1, 2, 64, 64), 4)])
def test_deterministic_bitwise_over_thread_counts(dtype, shape, cfg_i):
    rng = np.random.default_rng(6)
    cfg = (shape,) + CONFIGS[cfg_i][1:]
    x4 = _data(rng, shape, dtype, "normal")
    _, ind = slow.max_pool2d_with_indices(x4, *cfg[1:])
    go4 = rng.standard_normal(ind.shape).astype(dtype)
    for layout in LAYOUTS:
        outs = [_bwd(go4, x4, ind, layout, 4, cfg, deterministic=True, num_threads=nt).tobytes()
                for nt in pgtest.THREADS]
        assert all(o == outs[0] for o in outs)


def test_few_planes_big_image_uses_bands():
    """N*C = 1 < threads: banded deterministic kernel still exact and identical across thread counts."""
    rng = np.random.default_rng(7)
    x = rng.standard_normal((1, 1, 600, 300)).astype(np.float32)
    y, ind = pg.max_pool2d_with_indices(x, 3, 1, 1)
    go = rng.standard_normal(y.shape).astype(np.float32)
    ref = slow.max_pool2d_with_indices_backward(go, x.shape, ind)
    res = [pg.max_pool2d_with_indices_backward(go, x, ind, 3, 1, 1, deterministic=True, num_threads=t)
           for t in (1, 2, 4)]
    np.testing.assert_allclose(res[0], ref, rtol=1e-6, atol=1e-6)
    assert res[0].tobytes() == res[1].tobytes() == res[2].tobytes()
    nd = pg.max_pool2d_with_indices_backward(go, x, ind, 3, 1, 1, deterministic=False, num_threads=2)
    np.testing.assert_allclose(nd, ref, rtol=1e-6, atol=1e-6)


# strides 1, 2 (phase-split rows) and 3, dilation, clipped windows, ceil_mode, a kernel wider than the input
FAST_FWD_CONFIGS = CONFIGS + [((2, 3, 13, 17), (3, 3), (1, 1), (1, 1), (1, 1), False),
                              ((1, 2, 9, 21), (2, 4), (2, 2), (1, 2), (1, 1), True),
                              ((1, 2, 5, 3), (4, 5), (1, 1), (2, 2), (1, 1), False)]


@pytest.mark.parametrize("cfg", FAST_FWD_CONFIGS)
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_vectorised_forward_equals_per_window_forward(monkeypatch, cfg, layout, dtype):
    """The row-vectorised forward (PyTorch-style windows) and the per-window kernel agree bit for bit: values,
    ties, NaN (the last one wins), signed zeros, NaN payloads; also on negative-stride views."""
    from poolgrad import indexed as max_pool_indices
    rng = np.random.default_rng(21)
    shape, k, st, p, d, ceil = cfg
    for kind in ("ties", "nan"):
        x4 = _data(rng, shape, dtype, kind)
        x4[..., ::3] = -x4[..., ::3] * 0                      # signed zeros among the ties
        x = pgtest.to_layout(x4, layout)[..., ::-1, :] if layout == "NHWC" else pgtest.to_layout(x4, layout)[..., ::-1]
        fast = pg.max_pool2d_with_indices(x, k, st, p, d, ceil, layout=layout, num_threads=2)
        monkeypatch.setattr(max_pool_indices, "UNIFORM_MAX_ROW", 0)
        slow_ = pg.max_pool2d_with_indices(x, k, st, p, d, ceil, layout=layout, num_threads=2)
        monkeypatch.undo()
        np.testing.assert_array_equal(fast[1], slow_[1])
        assert fast[0].tobytes() == slow_[0].tobytes()


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("outside", [False, True])
def test_nondeterministic_thin_bands_use_atomic_kernel(monkeypatch, layout, dtype, outside):
    """Few rows and many threads: nondeterministic mode takes the atomic kernel for NCHW planes (checked with a
    spy; OpenMP builds), which must still equal the reference, also when indices leave their windows (fallback)
    or are out of range.  Channels-last images cut fewer, thicker bands instead (``_scatter``: their long rows
    make thin bands and atomics the slower choice), with the same checks."""
    from poolgrad import _max_pool_indices
    seen = []
    real = _max_pool_indices.scatter_backward

    def spy(*args):
        seen.append(args[11])                          # the kernel's `deterministic` argument
        return real(*args)

    monkeypatch.setattr(_max_pool_indices, "scatter_backward", spy)
    rng = np.random.default_rng(11)
    x4 = rng.standard_normal((1, 2, 24, 5000)).astype(dtype)
    cfg = (x4.shape, (3, 3), (1, 1), (1, 1), (1, 1), False)
    _, ind = pg.max_pool2d_with_indices(x4, 3, 1, 1)
    if outside:
        ind[0, 1, 5, 7] = 23 * 5000 + 5                    # legal, but far outside its window
    go4 = rng.standard_normal(ind.shape).astype(dtype)
    ref = slow.max_pool2d_with_indices_backward(go4, x4.shape, ind)
    g = _bwd(go4, x4, ind, layout, 4, cfg, deterministic=False, num_threads=7)
    # a serial build (no OpenMP) runs one thread: nothing to collide, so the banded kernel
    assert seen == [not pg.get_config()["openmp"] or layout == "NHWC"]
    np.testing.assert_allclose(pgtest.as64(g), ref, **pgtest.tolerance(np.dtype(dtype)))
    bad = ind.copy()
    bad[0, 1, 20, 3] = 24 * 5000
    with pytest.raises(pg.ParamInvalidError, match=r"n=0, c=1, oh=20, ow=3"):
        _bwd(go4, x4, bad, layout, 4, cfg, deterministic=False, num_threads=7)


@pytest.mark.parametrize("det", [True, False])
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_indices_outside_their_window_are_legal(det, layout, dtype):
    """The spec allows any index in the plane; it must still land where it points."""
    rng = np.random.default_rng(8)
    x4 = np.zeros((2, 3, 30, 20), dtype)
    cfg = (x4.shape, (3, 3), (2, 2), (1, 1), (1, 1), False)
    _, ind = slow.max_pool2d_with_indices(x4, *cfg[1:])
    ind = rng.integers(0, 30 * 20, size=ind.shape)            # anywhere in the plane
    go4 = rng.standard_normal(ind.shape).astype(dtype)
    ref = slow.max_pool2d_with_indices_backward(go4, x4.shape, ind)
    for nt in (1, 2, 3):
        g = _bwd(go4, x4, ind, layout, 4, cfg, deterministic=det, num_threads=nt)
        np.testing.assert_allclose(pgtest.as64(g), ref.astype(dtype).astype(np.float64), **pgtest.tolerance(dtype))


@pytest.mark.parametrize("bad", [-1, 600, 2**31 - 1, -2**31, 2**63 - 1, -2**63])
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("det", [True, False])
def test_out_of_range_index_raises_with_position(bad, layout, det):
    x4 = np.zeros((2, 3, 30, 20), np.float32)
    cfg = (x4.shape, (3, 3), (2, 2), (1, 1), (1, 1), False)
    _, ind = slow.max_pool2d_with_indices(x4, *cfg[1:])
    if not np.iinfo(np.int32).min <= bad <= np.iinfo(np.int32).max:
        idt = np.int64
    else:
        idt = np.int32
    ind = ind.astype(idt)
    ind[1, 2, 4, 3] = bad
    ind[1, 2, 6, 0] = bad
    go4 = np.ones(ind.shape, np.float32)
    args = [pgtest.to_layout(a, layout) for a in (go4, x4, ind)]
    before = pgtest.snapshot(dict(zip("gxi", args)))
    with pytest.raises(pg.ParamInvalidError) as exc:
        pg.max_pool2d_with_indices_backward(*args, 3, 2, 1, layout=layout, deterministic=det, num_threads=2)
    assert exc.value.code == 161002
    assert "indices" in str(exc.value) and "n=1, c=2, oh=4, ow=3" in str(exc.value) and str(bad) in str(exc.value)
    pgtest.assert_untouched(before, dict(zip("gxi", args)))


@needs_torch
@pytest.mark.parametrize("cfg", TORCH_CONFIGS)
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_backward_matches_torch(cfg, dtype):
    """Against torch.ops.aten.max_pool2d_with_indices_backward computed in float64, then cast."""
    rng = np.random.default_rng(9)
    x4 = _data(rng, cfg[0], np.float64, "ties")
    _, k, s, p, d, ceil = cfg
    xt = torch.from_numpy(x4)
    yt, it = torch.nn.functional.max_pool2d(xt, k, s, p, d, ceil, return_indices=True)
    go = rng.standard_normal(tuple(yt.shape)).astype(dtype)
    ref = torch.ops.aten.max_pool2d_with_indices_backward(torch.from_numpy(go.astype(np.float64)), xt, list(k),
                                                          list(s), list(p), list(d), ceil, it).numpy()
    for layout in LAYOUTS:
        g = _bwd(go, x4.astype(dtype), it.numpy(), layout, 4, cfg, num_threads=2)
        np.testing.assert_allclose(pgtest.as64(g), ref.astype(dtype).astype(np.float64), **pgtest.tolerance(dtype))


@needs_torch
@pytest.mark.parametrize("dtype", [np.float16, pg.bfloat16], ids=["f16", "bf16"])
def test_16bit_more_accurate_than_torch(dtype):
    """Heavily overlapping windows (k=5, s=1) on a constant input: every output picks the same cell, so many
    gradients pile up in one cell. poolgrad sums in float32 and rounds once; torch sums in the 16-bit type."""
    rng = np.random.default_rng(10)
    x = np.zeros((1, 1, 64, 64))
    x[0, 0, 32, 32] = 1.0
    go = rng.uniform(0.5, 1.5, size=(1, 1, 64, 64)).astype(dtype)
    xt = torch.from_numpy(x)
    _, it = torch.nn.functional.max_pool2d(xt, 5, 1, 2, return_indices=True)
    exact = torch.ops.aten.max_pool2d_with_indices_backward(torch.from_numpy(go.astype(np.float64)), xt, [5, 5],
                                                            [1, 1], [2, 2], [1, 1], False, it).numpy()
    tdt = torch.float16 if dtype == np.float16 else torch.bfloat16
    tor = torch.ops.aten.max_pool2d_with_indices_backward(torch.from_numpy(go.astype(np.float32)).to(tdt),
                                                          xt.to(tdt), [5, 5], [1, 1], [2, 2], [1, 1], False,
                                                          it).float().numpy()
    ours = pg.max_pool2d_with_indices_backward(go, x.astype(dtype), it.numpy(), 5, 1, 2).astype(np.float64)
    err_ours = np.abs(ours - exact).max()
    err_torch = np.abs(tor - exact).max()
    assert err_ours <= np.abs(exact.astype(dtype).astype(np.float64) - exact).max()  # rounded once
    assert err_ours < err_torch


def test_batch_zero_and_out():
    x = np.zeros((0, 3, 8, 8), np.float32)
    y, ind = pg.max_pool2d_with_indices(x, 2)
    assert y.shape == (0, 3, 4, 4) and ind.shape == (0, 3, 4, 4)
    g = pg.max_pool2d_with_indices_backward(y, x, ind, 2)
    assert g.shape == x.shape
    rng = np.random.default_rng(11)
    x = rng.standard_normal((2, 3, 8, 8)).astype(np.float32)
    y, ind = pg.max_pool2d_with_indices(x, 2)
    ref = pg.max_pool2d_with_indices_backward(y, x, ind, 2)
    out = np.full_like(x, 7.0)
    assert pg.max_pool2d_with_indices_backward(y, x, ind, 2, out=out) is out
    np.testing.assert_array_equal(out, ref)
    big = np.full((2, 3, 8, 16), 7.0, np.float32)     # out with an H stride that is not W * W-stride
    view = big[:, :, :, ::2]
    assert pg.max_pool2d_with_indices_backward(y, x, ind, 2, out=view) is view
    np.testing.assert_array_equal(view, ref)
    assert np.all(big[:, :, :, 1::2] == 7.0)


def test_memory_order_follows_input():
    x = np.random.default_rng(0).standard_normal((2, 8, 6, 6)).astype(np.float32)
    xcl = np.ascontiguousarray(x.transpose(0, 2, 3, 1)).transpose(0, 3, 1, 2)   # channels-last viewed as NCHW
    y, ind = pg.max_pool2d_with_indices(xcl, 2)
    assert y.strides[1] == 4 and ind.strides[1] == 8
    g = pg.max_pool2d_with_indices_backward(y, xcl, ind, 2)
    assert g.strides == xcl.strides


BAD_PARAMS = [
    dict(kernel_size=0), dict(kernel_size=-1), dict(kernel_size=(2, 2, 2)), dict(kernel_size=()),
    dict(kernel_size=2.0), dict(kernel_size="2"), dict(kernel_size=True), dict(kernel_size=None),
    dict(stride=0), dict(stride=(1, 2, 3)), dict(stride=-2), dict(stride=1.5),
    dict(padding=-1), dict(padding=2), dict(padding=(0, 0, 0)), dict(padding=1.0),
    dict(dilation=0), dict(dilation=(1, 1, 1)), dict(ceil_mode="yes"), dict(ceil_mode=2),
    dict(kernel_size=11), dict(kernel_size=2**40), dict(layout="NCWH"), dict(layout="nchw"), dict(layout=None),
]


@pytest.mark.parametrize("bad", BAD_PARAMS, ids=[str(b) for b in BAD_PARAMS])
def test_invalid_parameters(bad):
    x = np.zeros((1, 2, 8, 8), np.float32)
    y, ind = pg.max_pool2d_with_indices(x, 3, 2, 1)
    kw = dict(kernel_size=3, stride=2, padding=1, dilation=1, ceil_mode=False)
    kw.update(bad)
    before = pgtest.snapshot({"x": x, "y": y, "i": ind})
    for call in (lambda: pg.max_pool2d_with_indices(x, **kw),
                 lambda: pg.max_pool2d_with_indices_backward(y, x, ind, **kw)):
        with pytest.raises(pg.ParamInvalidError) as exc:
            call()
        assert exc.value.code == 161002 and isinstance(exc.value, ValueError)
    pgtest.assert_untouched(before, {"x": x, "y": y, "i": ind})


def test_invalid_arrays():
    x = np.zeros((1, 2, 8, 8), np.float32)
    y, ind = pg.max_pool2d_with_indices(x, 3, 2, 1)
    f = pg.max_pool2d_with_indices_backward
    for args, name in [((None, x, ind), "grad_output"), ((y, None, ind), "x"), ((y, x, None), "indices")]:
        with pytest.raises(pg.ParamNullptrError) as exc:
            f(*args, 3, 2, 1)
        assert exc.value.code == 161001 and isinstance(exc.value, TypeError) and name in str(exc.value)
    cases = [
        ((y[0], x, ind), "grad_output"), ((y.astype(np.float64), x, ind), "grad_output"),
        ((y[:, :, :3], x, ind), "grad_output"), ((y, x, ind.astype(np.float32)), "indices"),
        ((y, x, ind[:, :1]), "indices"), ((y, x.astype(np.int32), ind), "x"), ((y, x[0, 0], ind), "x"),
        ((y, np.zeros((1, 0, 8, 8), np.float32), ind), "x"), ((y, x.tolist(), ind), "x"),
        ((y, x.astype(np.complex64), ind), "x"), ((y, x, ind.astype(np.uint64)), "indices"),
    ]
    for args, name in cases:
        with pytest.raises(pg.ParamInvalidError) as exc:
            f(*args, 3, 2, 1)
        assert exc.value.code == 161002 and name in str(exc.value), str(exc.value)
    msg = None
    try:
        f(y[:, :, :3], x, ind, 3, 2, 1)
    except pg.ParamInvalidError as e:
        msg = str(e)
    assert "expected shape (1, 2, 4, 4)" in msg and "got (1, 2, 3, 4)" in msg and "kernel_size=(3, 3)" in msg
    for out in (np.zeros((1, 2, 8, 7), np.float32), np.zeros((1, 2, 8, 8), np.float64), x, y, 5):
        with pytest.raises(pg.ParamInvalidError):
            f(y, x, ind, 3, 2, 1, out=out)
    ro = np.zeros_like(x)
    ro.flags.writeable = False
    with pytest.raises(pg.ParamInvalidError, match="writeable"):
        f(y, x, ind, 3, 2, 1, out=ro)
    for nt in (0, -1, 1.5, True):
        with pytest.raises(pg.ParamInvalidError, match="num_threads"):
            f(y, x, ind, 3, 2, 1, num_threads=nt)
    with pytest.raises(pg.ParamInvalidError, match="deterministic"):
        f(y, x, ind, 3, 2, 1, deterministic="yes")
    with pytest.raises(pg.ParamInvalidError, match="index_dtype"):
        pg.max_pool2d_with_indices(x, 2, index_dtype=np.int16)


def test_empty_window_rejected_in_forward():
    # kernel 2, dilation 3, padding 2 on a 1-wide input: the window cells -2 and 1 are both outside
    x = np.zeros((1, 1, 1, 1), np.float32)
    with pytest.raises(pg.ParamInvalidError, match="no input cell"):
        pg.max_pool2d_with_indices(x, 2, 2, 2, 3)


@needs_torch
def test_torch_tensors_accepted_without_copy():
    x = torch.randn(2, 3, 8, 8)
    y, ind = pg.max_pool2d_with_indices(x, 2)
    yt, it = torch.nn.functional.max_pool2d(x, 2, return_indices=True)
    np.testing.assert_array_equal(y, yt.numpy())
    g = pg.max_pool2d_with_indices_backward(torch.from_numpy(y), x, torch.from_numpy(ind), 2)
    assert g.shape == (2, 3, 8, 8)


@needs_torch
def test_bfloat16_torch_tensor_needs_the_documented_view():
    t = torch.randn(1, 2, 4, 4).to(torch.bfloat16)
    with pytest.raises(pg.ParamInvalidError, match="x: could not be viewed"):
        pg.max_pool2d_with_indices(t, 2)
    view = t.view(torch.int16).numpy().view(pg.bfloat16)          # the README's recipe: no copy
    assert np.shares_memory(view, t.view(torch.int16).numpy())
    y, ind = pg.max_pool2d_with_indices(view, 2)
    yt, it = torch.nn.functional.max_pool2d(t.float(), 2, return_indices=True)
    np.testing.assert_array_equal(ind, it.numpy())
    np.testing.assert_array_equal(y.astype(np.float32), yt.numpy())
