"""The channels-last (lanes over C) max-pooling kernels: every new path forced on and compared bit for bit with
the path it replaces and with the slow reference, over dtypes, index dtypes, channel counts around the vector
block (odd, below one block, not a multiple of it), padding, dilation, ceil_mode, strided and misaligned views
and thread counts."""
from __future__ import annotations

import contextlib
from typing import Iterator

import numpy as np
import pytest

import pgtest
import poolgrad as pg
from poolgrad import _max_pool_indices, indexed, slow
from pgtest import DTYPES, DTYPE_IDS

# (C, H, W, kernel, stride, padding, dilation, ceil_mode): channel counts at and around the 32-lane block
# (CL_MIN_C is 32), odd, not multiples of the block; windows with padding, dilation, ceil_mode,
# overlap; one below the threshold (the old kernels on both sides)
CASES = [
    (40, 9, 11, (3, 3), (2, 2), (1, 1), (1, 1), False),
    (45, 7, 7, (3, 3), (1, 1), (1, 1), (1, 1), True),
    (63, 8, 9, (2, 2), (2, 2), (0, 0), (1, 1), True),
    (31, 6, 5, (2, 2), (2, 2), (0, 0), (1, 1), True),
    (32, 10, 10, (3, 2), (2, 1), (1, 1), (1, 1), False),
    (33, 9, 8, (3, 3), (2, 3), (2, 1), (2, 1), True),
    (48, 6, 7, (2, 3), (3, 1), (1, 1), (3, 2), True),
    (70, 5, 5, (5, 5), (1, 1), (2, 2), (1, 1), False),
    (97, 6, 6, (2, 2), (2, 2), (0, 0), (1, 1), False),
    (64, 4, 4, (4, 4), (4, 4), (0, 0), (1, 1), False),
]
KINDS = ["normal", "ties", "nan"]


@contextlib.contextmanager
def old_forward() -> Iterator[None]:
    """Run the forward kernels that precede the channels-last one (its threshold raised out of reach)."""
    saved = _max_pool_indices.CL_MIN_C
    _max_pool_indices.CL_MIN_C = 1 << 40
    try:
        yield
    finally:
        _max_pool_indices.CL_MIN_C = saved


def _bits(a: np.ndarray) -> np.ndarray:
    """The raw bits of a float array (NaN payloads compared too)."""
    return np.ascontiguousarray(a).view(f"u{a.dtype.itemsize}")


def _nhwc(x4: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(x4.transpose(0, 2, 3, 1))


def _check_forward(x: np.ndarray, x4: np.ndarray, cfg: tuple, index_dtype, threads: int,
                   reference: bool = True) -> None:
    """New path == old path bit for bit; with ``reference``, also == the slow reference (which is slow)."""
    _, _, _, k, s, p, d, ceil = cfg
    y, ind = pg.max_pool2d_with_indices(x, k, s, p, d, ceil, layout="NHWC", index_dtype=index_dtype,
                                        num_threads=threads)
    with old_forward():
        y0, ind0 = pg.max_pool2d_with_indices(x, k, s, p, d, ceil, layout="NHWC", index_dtype=index_dtype,
                                              num_threads=threads)
    np.testing.assert_array_equal(_bits(y), _bits(y0))
    np.testing.assert_array_equal(ind, ind0)
    if not reference:
        return
    ref_y, ref_i = slow.max_pool2d_with_indices(x4, k, s, p, d, ceil)
    np.testing.assert_array_equal(pgtest.from_layout(ind, "NHWC"), ref_i)
    np.testing.assert_array_equal(pgtest.as64(pgtest.from_layout(y, "NHWC")), ref_y)
    # the stored values are the input elements themselves, bit for bit
    flat = x4.reshape(x4.shape[0], x4.shape[1], -1)
    picked = np.take_along_axis(flat, pgtest.from_layout(ind, "NHWC").reshape(flat.shape[0], flat.shape[1], -1)
                                .astype(np.int64), axis=2)
    np.testing.assert_array_equal(_bits(pgtest.from_layout(y, "NHWC").reshape(picked.shape)), _bits(picked))


@pytest.mark.parametrize("cfg", CASES)
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("kind", KINDS)
def test_forward_matches_old_path_and_reference(cfg, dtype, kind):
    C, H, W = cfg[:3]
    rng = np.random.default_rng(C * 100 + H)
    x4 = pgtest.random_values(rng, (2, C, H, W), dtype, kind)
    for index_dtype in (np.int32, np.int64):
        for threads in (1, 2, 3):
            _check_forward(_nhwc(x4), x4, cfg, index_dtype, threads, reference=threads == 1)


@pytest.mark.parametrize("view", ["wide_pixels", "sliced_hw", "strided_c", "misaligned", "batch_one"])
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_forward_views(view, dtype):
    """Channels contiguous but pixels further apart; H/W slices; a channel stride (old path); a misaligned
    buffer (copied first); batch 1 with few output rows (channel groups as work items)."""
    cfg = (40, 9, 10, (3, 3), (2, 2), (1, 1), (1, 1), True)
    rng = np.random.default_rng(7)
    x4 = pgtest.random_values(rng, (3, 40, 9, 10), dtype, "ties")
    if view == "wide_pixels":
        big = np.zeros((3, 9, 10, 45), dtype)
        big[..., :40] = _nhwc(x4)
        x = big[..., :40]
    elif view == "sliced_hw":
        big = np.zeros((3, 18, 20, 40), dtype)
        big[:, ::2, ::2] = _nhwc(x4)
        x = big[:, ::2, ::2]
    elif view == "strided_c":
        big = np.zeros((3, 9, 10, 80), dtype)
        big[..., ::2] = _nhwc(x4)
        x = big[..., ::2]
    elif view == "misaligned":
        raw = np.zeros(x4.size * x4.itemsize + 1, np.uint8)
        x = raw[1:].view(dtype).reshape(3, 9, 10, 40)
        x[...] = _nhwc(x4)
    else:
        x4 = x4[:1]
        x = _nhwc(x4)
    for threads in (1, 2, 4):
        _check_forward(x, x4, cfg, np.int64, threads, reference=threads == 1)


@pytest.mark.parametrize("dtype", [np.dtype(np.float16), pgtest.bfloat16], ids=["f16", "bf16"])
def test_forward_keeps_nan_payloads(dtype):
    """16-bit maxima are narrowed back exactly: signalling and quiet NaNs keep every payload bit."""
    rng = np.random.default_rng(3)
    x4 = pgtest.random_values(rng, (1, 40, 6, 6), dtype, "normal")
    bits = x4.view(np.uint16)
    nan_bits = [0x7c01, 0xfd55, 0x7e00, 0x7fff] if dtype == np.float16 else [0x7f81, 0xffc0, 0x7fa5, 0xff81]
    for i, b in enumerate(nan_bits):
        bits[0, 3 + i, 2 * i % 6, 1] = b
    _check_forward(_nhwc(x4), x4, (40, 6, 6, (2, 2), (2, 2), (0, 0), (1, 1), False), np.int64, 2)


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("out_hw", [(7, 7), (3, 5), (20, 11), (1, 1)])
def test_adaptive_forward(dtype, out_hw):
    """Adaptive windows (uneven, overlapping, more outputs than inputs) through the same channels-last loop."""
    rng = np.random.default_rng(11)
    x4 = pgtest.random_values(rng, (2, 37, 14, 9), dtype, "ties")
    x = _nhwc(x4)
    for threads in (1, 2, 3):
        y, ind = pg.adaptive_max_pool2d(x, out_hw, layout="NHWC", num_threads=threads)
        with old_forward():
            y0, ind0 = pg.adaptive_max_pool2d(x, out_hw, layout="NHWC", num_threads=threads)
        np.testing.assert_array_equal(_bits(y), _bits(y0))
        np.testing.assert_array_equal(ind, ind0)
        if threads > 1:
            continue
        ref_y, ref_i = slow.adaptive_max_pool2d(x4, out_hw)
        np.testing.assert_array_equal(pgtest.from_layout(ind, "NHWC"), ref_i)
        np.testing.assert_array_equal(pgtest.as64(pgtest.from_layout(y, "NHWC")), ref_y)


@pytest.mark.parametrize("adaptive", [False, True])
def test_paths_taken(monkeypatch, adaptive):
    """The comparisons above compare two different kernels: the dispatchers report the path they ran."""
    taken = []
    for name in ("argmax_forward", "argmax_forward_uniform"):
        fn = getattr(_max_pool_indices, name)
        monkeypatch.setattr(_max_pool_indices, name, lambda *a, _fn=fn: taken.append(_fn(*a)) or taken[-1])
    x = np.zeros((2, 5, 6, 40), np.float32)

    def run() -> None:
        if adaptive:
            pg.adaptive_max_pool2d(x, 3, layout="NHWC")
        else:
            pg.max_pool2d_with_indices(x, 2, layout="NHWC")
    run()
    with old_forward():
        run()
    run_nchw = pg.adaptive_max_pool2d if adaptive else pg.max_pool2d_with_indices
    # NCHW planes this small go to the planes forward by default (tests/test_plane_kernels.py); here the old one
    monkeypatch.setattr(indexed, "PLANES_MAX_CELLS", ((float("inf"), 0),))
    run_nchw(np.ascontiguousarray(x.transpose(0, 3, 1, 2)), 2)
    assert taken == ["channels_last", "windows" if adaptive else "rows", "windows" if adaptive else "rows"]


# ---------------------------------------------------------------- backward: the channels-last gather

def _backward_all_paths(go: np.ndarray, x: np.ndarray, ind: np.ndarray, cfg: tuple | None, **kw) -> list:
    """grad_x from the gather (forced on) and from the scatter (gather off), each as raw bits."""
    out = []
    for limit in (1e9, -1):
        with pgtest.gather_limit(limit):
            if cfg is None:
                gx = pg.adaptive_max_pool2d_backward(go, x, ind, layout="NHWC", **kw)
            else:
                _, _, _, k, s, p, d, ceil = cfg
                gx = pg.max_pool2d_with_indices_backward(go, x, ind, k, s, p, d, ceil, layout="NHWC", **kw)
        out.append(gx)
    return out


@pytest.mark.parametrize("cfg", CASES)
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_backward_gather_matches_scatter_and_reference(cfg, dtype):
    C, H, W, k, s, p, d, ceil = cfg
    rng = np.random.default_rng(C + 7 * H)
    x4 = pgtest.random_values(rng, (2, C, H, W), dtype, "ties")
    x = _nhwc(x4)
    for index_dtype in (np.int32, np.int64):
        y, ind = pg.max_pool2d_with_indices(x, k, s, p, d, ceil, layout="NHWC", index_dtype=index_dtype)
        go = pgtest.random_values(rng, y.shape, dtype, "normal")
        go.reshape(-1)[::7] = -0.0                      # -0.0 + nothing must still store +0.0 bits
        ref = slow.max_pool2d_with_indices_backward(pgtest.from_layout(go, "NHWC"), x4.shape,
                                                    pgtest.from_layout(ind, "NHWC"))
        for det in (True, False):
            for threads in (1, 2, 3):
                gather, scatter = _backward_all_paths(go, x, ind, cfg, deterministic=det, num_threads=threads)
                if det or dtype.itemsize == 2:           # 16-bit is always deterministic
                    np.testing.assert_array_equal(_bits(gather), _bits(scatter))
                np.testing.assert_allclose(pgtest.as64(pgtest.from_layout(gather, "NHWC")), ref,
                                           **pgtest.tolerance(dtype))


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("out_hw", [(7, 7), (3, 5), (20, 11), (1, 1)])
def test_backward_gather_adaptive(dtype, out_hw):
    rng = np.random.default_rng(5)
    x4 = pgtest.random_values(rng, (2, 37, 14, 9), dtype, "ties")
    x = _nhwc(x4)
    y, ind = pg.adaptive_max_pool2d(x, out_hw, layout="NHWC")
    go = pgtest.random_values(rng, y.shape, dtype, "nan")
    for threads in (1, 2, 4):
        gather, scatter = _backward_all_paths(go, x, ind, None, deterministic=True, num_threads=threads)
        np.testing.assert_array_equal(_bits(gather), _bits(scatter))
    ref = slow.adaptive_max_pool2d_backward(pgtest.from_layout(go, "NHWC"), x4.shape,
                                            pgtest.from_layout(ind, "NHWC"))
    np.testing.assert_allclose(pgtest.as64(pgtest.from_layout(gather, "NHWC")), ref, **pgtest.tolerance(dtype))


@pytest.mark.parametrize("where", ["other_column", "other_row", "corner"])
def test_backward_gather_index_outside_window(where):
    """An in-plane index outside its own window (legal) is missed by the gather's hit count, which sends the
    problem to the exact pass: the result is the scatter's."""
    cfg = (40, 8, 8, (2, 2), (2, 2), (0, 0), (1, 1), False)
    rng = np.random.default_rng(1)
    x = _nhwc(pgtest.random_values(rng, (2, 40, 8, 8), np.float32, "normal"))
    y, ind = pg.max_pool2d_with_indices(x, 2, layout="NHWC")
    ind = ind.copy()
    ind[1, 2, 1, 33] = {"other_column": 2 * 8 + 7, "other_row": 7 * 8 + 2, "corner": 63}[where]
    go = pgtest.random_values(rng, y.shape, np.float32, "normal")
    gather, scatter = _backward_all_paths(go, x, ind, cfg, deterministic=True, num_threads=2)
    np.testing.assert_array_equal(gather, scatter)
    ref = slow.max_pool2d_with_indices_backward(pgtest.from_layout(go, "NHWC"), (2, 40, 8, 8),
                                                pgtest.from_layout(ind, "NHWC"))
    np.testing.assert_allclose(pgtest.from_layout(gather, "NHWC"), ref, rtol=1e-6)


def test_backward_gather_bad_index_message():
    """An index outside the plane raises the same error, naming the same position, on both paths."""
    x = np.zeros((1, 4, 4, 40), np.float32)
    y, ind = pg.max_pool2d_with_indices(x, 2, layout="NHWC")
    ind = ind.copy()
    ind[0, 1, 0, 5] = 16
    messages = pgtest.gather_and_scatter_messages(x, y, ind, 2)
    assert messages[0] == messages[1]
    assert "got 16 at position (n=0, c=5, oh=1, ow=0)" in messages[0]


def test_backward_gather_path_taken(monkeypatch):
    """The gather runs for non-overlapping channels-last windows and declines (None) otherwise."""
    taken = []
    fn = _max_pool_indices.gather_backward_cl
    monkeypatch.setattr(_max_pool_indices, "gather_backward_cl", lambda *a: taken.append(fn(*a)) or taken[-1])
    x = np.zeros((2, 6, 6, 40), np.float32)
    for k, s in ((2, 2), (3, 1)):
        y, ind = pg.max_pool2d_with_indices(x, k, s, layout="NHWC")
        pg.max_pool2d_with_indices_backward(np.ones_like(y), x, ind, k, s, layout="NHWC")
    assert taken == [False, None]


@pytest.mark.parametrize("C", [64, 100, 161])
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_forward_channel_groups(C, dtype):
    """Batch 1 with few output rows: each row's channels are split into groups of whole blocks (the last group
    also takes the partial block), one work item each."""
    rng = np.random.default_rng(C)
    x4 = pgtest.random_values(rng, (1, C, 4, 5), dtype, "ties")
    for cfg in ((C, 4, 5, (2, 2), (2, 2), (0, 0), (1, 1), False), (C, 4, 5, (3, 3), (1, 1), (1, 1), (1, 1), True)):
        for threads in (1, 2, 4, 7):
            _check_forward(_nhwc(x4), x4, cfg, np.int32, threads, reference=threads == 2)


def _special_16bit(rng: np.random.Generator, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    """Normal values with 40% specials as raw bits: +-0, quiet and signalling NaNs with payloads, +-inf,
    subnormals and the largest finite values."""
    bits = pgtest.random_values(rng, shape, dtype, "normal").view(np.uint16).copy()
    if dtype == np.float16:
        specials = [0x0000, 0x8000, 0x7E01, 0xFE37, 0x7C05, 0xFD11, 0x7C00, 0xFC00, 0x0001, 0x83FF, 0x7BFF, 0xFBFF]
    else:
        specials = [0x0000, 0x8000, 0x7FC1, 0xFFC5, 0x7F81, 0xFF93, 0x7F80, 0xFF80, 0x0001, 0x807F, 0x7F7F, 0xFF7F]
    pick = rng.random(shape) < 0.4
    bits[pick] = rng.choice(np.array(specials, np.uint16), int(pick.sum()))
    return bits.view(dtype)


@pytest.mark.parametrize("dtype", [np.dtype(np.float16), pgtest.bfloat16], ids=["f16", "bf16"])
@pytest.mark.parametrize("kernel, stride, padding", [(2, 2, 0), (3, 3, 0), ((3, 2), 2, 0), ((3, 2), 2, (1, 0)),
                                                     ((2, 3), 2, (0, 1)), (1, 1, 0)])
def test_backward_16bit_specials_same_bits_every_level_and_layout(dtype, kernel, stride, padding):
    """16-bit channels-last backward (the vectorised gather blocks, and their one-cover shortcut) on gradients
    full of NaNs with payloads, -0, infinities and subnormals: the same bits at every ISA level, and the same
    bits as the NCHW kernels on the same data."""
    rng = np.random.default_rng(11)
    x4 = pgtest.random_values(rng, (2, 40, 12, 11), dtype, "ties")
    x = _nhwc(x4)
    y, ind = pg.max_pool2d_with_indices(x, kernel, stride, padding, layout="NHWC")
    go = _special_16bit(rng, y.shape, dtype)
    nchw = pg.max_pool2d_with_indices_backward(pgtest.from_layout(go, "NHWC"), x4, pgtest.from_layout(ind, "NHWC"),
                                               kernel, stride, padding, deterministic=True)
    for level in pg.config.supported_isa_levels():
        with pg.config.set_isa_level(level):
            gx = pg.max_pool2d_with_indices_backward(go, x, ind, kernel, stride, padding, layout="NHWC",
                                                     deterministic=True)
        np.testing.assert_array_equal(_bits(pgtest.from_layout(gx, "NHWC")), _bits(nchw), err_msg=level)
