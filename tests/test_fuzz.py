"""Differential fuzzing (hypothesis) of every public operator, forward and backward.

Each example draws a random problem - shape (3-D inputs, N = 0), parameters in every accepted form and across
their whole valid range, layout, dtype, index dtype, memory order of every array (sliced, Fortran, permuted,
negative strides, channels-last buffer viewed as NCHW, misaligned, zero-stride broadcast), an ``out=`` array,
determinism mode and thread count - and checks:

* the result against the slow NumPy reference (``poolgrad.slow``) with dtype-appropriate tolerances (exact for
  max values, indices and the element-wise operator);
* result dtype, shape, ``out`` identity, default memory order, and that no input (nor the memory between its
  elements) was modified;
* deterministic results (and every forward) bitwise equal to the same problem computed from C-contiguous NCHW
  arrays with another thread count;
* PyTorch (max / adaptive / avg) and TensorFlow (``max_pool_grad``, NHWC, no NaN) where installed;
* out-of-range indices: ``ParamInvalidError`` naming the first bad position, never a crash.

Profiles: ``ci`` (default) and ``long`` (``pytest --hypothesis-profile=long tests/test_fuzz.py``), see conftest.
"""
from __future__ import annotations

import contextlib
import re

import numpy as np
import pytest
from hypothesis import assume, event, given, note
from hypothesis import strategies as st

import catalog
import pgtest
import poolgrad as pg
from pgtest import needs_tf, needs_torch, tf, torch

# NaN/inf arithmetic in the references is intended
pytestmark = pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning",
                                        "ignore:overflow encountered:RuntimeWarning",
                                        "ignore:divide by zero:RuntimeWarning")

OPS = catalog.OPS
THREADS = [None, 1, 2, 3, 4]
DET_MODES = ["true", "false", "none", "ctx_true", "ctx_false"]
VALUE_KINDS = ["normal", "ties", "nan", "inf", "special"]
GRAD_KINDS = ["normal", "nan", "special"]


# ----------------------------------------------------------------------------------------------------------------
# Drawing problems
# ----------------------------------------------------------------------------------------------------------------
def _form(data, p, label):
    return catalog.as_form(p, data.draw(st.sampled_from(catalog.FORMS), label=label))


def _bool_form(data, value, label):
    return data.draw(st.sampled_from([value, np.bool_(value), int(value)]), label=label)


def _batch(data, rank):
    if rank == 3:
        return 1
    return data.draw(st.sampled_from([1, 2, 0, 3]), label="N")


def draw_torch_style(data, family, *, torch_cap=False, dtypes=None, value_kinds=None, kind="forward"):
    """A max/avg Case with random valid parameters.  ``torch_cap`` keeps padding <= kernel_size // 2 (PyTorch's
    own limit, stricter than the spec's for dilated max pooling)."""
    dtype = data.draw(st.sampled_from(dtypes or catalog.DTYPES), label="dtype")
    layout = data.draw(st.sampled_from(catalog.LAYOUTS), label="layout")
    rank = data.draw(st.sampled_from([4, 3]), label="rank")
    k = tuple(data.draw(st.integers(1, 4), label="k") for _ in range(2))
    s = tuple(data.draw(st.integers(1, 4), label="s") for _ in range(2))
    d = tuple(data.draw(st.integers(1, 2), label="d") for _ in range(2)) if family == "max" else (1, 1)
    if family == "max":
        lim = [catalog.max_padding_limit(kk, dd) for kk, dd in zip(k, d)]
        if torch_cap:
            lim = [min(li, kk // 2) for li, kk in zip(lim, k)]
    else:
        lim = [kk // 2 for kk in k]
    p = tuple(data.draw(st.integers(0, li), label="p") for li in lim)
    ceil = data.draw(st.booleans(), label="ceil_mode")
    hw = [max(1, dd * (kk - 1) + 1 - 2 * pp) + data.draw(st.integers(0, 4), label="extra")
          for kk, dd, pp in zip(k, d, p)]
    shape = (_batch(data, rank), data.draw(st.integers(1, 3), label="C"), *hw)
    params = dict(kernel_size=_form(data, k, "kernel_form"), padding=_form(data, p, "padding_form"),
                  ceil_mode=_bool_form(data, ceil, "ceil_form"))
    sform = data.draw(st.sampled_from(["none", "empty", "form"]), label="stride_form")
    params["stride"] = None if sform == "none" else [] if sform == "empty" else _form(data, s, "s_form")
    if sform != "form":
        s = k
    if family == "max":
        params["dilation"] = _form(data, d, "dilation_form")
    else:
        params["count_include_pad"] = _bool_form(data, data.draw(st.booleans(), label="cip"), "cip_form")
        params["divisor_override"] = data.draw(st.one_of(
            st.none(), st.just(0), st.integers(-20, 20).filter(bool),
            st.sampled_from([2 ** 40, -(2 ** 40), 2 ** 62, np.int64(-3)])), label="divisor_override")
        if kind == "backward":
            modes = [0, 1] + ([2] if dtype != pg.bfloat16 else []) + ([3] if dtype == np.float32 else [])
            params["cube_math_type"] = data.draw(st.sampled_from(modes), label="cube_math_type")
    op = ("max_pool2d_with_indices" if family == "max" else "avg_pool2d") + ("_backward" if kind == "backward"
                                                                              else "")
    return catalog.make_case(
        op, shape=shape, dtype=dtype, layout=layout, rank=rank, params=params,
        index_dtype=data.draw(st.sampled_from(catalog.INDEX_DTYPES), label="index_dtype"),
        values_kind=data.draw(st.sampled_from(value_kinds or VALUE_KINDS), label="values"),
        grad_kind=data.draw(st.sampled_from(GRAD_KINDS), label="grad_values"),
        index_mode=data.draw(st.sampled_from(["argmax", "random"]), label="index_mode"),
        seed=data.draw(st.integers(0, 2 ** 32 - 1), label="seed"))


def draw_adaptive(data, kind="forward", dtypes=None, value_kinds=None):
    dtype = data.draw(st.sampled_from(dtypes or catalog.DTYPES), label="dtype")
    layout = data.draw(st.sampled_from(catalog.LAYOUTS), label="layout")
    rank = data.draw(st.sampled_from([4, 3]), label="rank")
    H, W = (data.draw(st.integers(1, 8), label="H"), data.draw(st.integers(1, 8), label="W"))
    shape = (_batch(data, rank), data.draw(st.integers(1, 3), label="C"), H, W)
    oh, ow = data.draw(st.integers(1, H + 3), label="Ho"), data.draw(st.integers(1, W + 3), label="Wo")
    form = data.draw(st.sampled_from(["int", "tuple", "list", "one", "none_h", "none_w", "np"]), label="os_form")
    output_size = {"int": oh, "tuple": (oh, ow), "list": [oh, ow], "one": (oh,), "none_h": (None, ow),
                   "none_w": (oh, None), "np": (np.int64(oh), np.int32(ow))}[form]
    op = "adaptive_max_pool2d" + ("_backward" if kind == "backward" else "")
    return catalog.make_case(
        op, shape=shape, dtype=dtype, layout=layout, rank=rank, params=dict(output_size=output_size),
        index_dtype=data.draw(st.sampled_from(catalog.INDEX_DTYPES), label="index_dtype"),
        values_kind=data.draw(st.sampled_from(value_kinds or VALUE_KINDS), label="values"),
        grad_kind=data.draw(st.sampled_from(GRAD_KINDS), label="grad_values"),
        index_mode=data.draw(st.sampled_from(["argmax", "random"]), label="index_mode"),
        seed=data.draw(st.integers(0, 2 ** 32 - 1), label="seed"))


def draw_tf(data, kind="forward", dtypes=None, value_kinds=None, layouts=None):
    dtype = data.draw(st.sampled_from(dtypes or catalog.DTYPES), label="dtype")
    layout = data.draw(st.sampled_from(layouts or ["NHWC", "NCHW"]), label="data_format")
    k = tuple(data.draw(st.integers(1, 4), label="k") for _ in range(2))
    s = tuple(data.draw(st.integers(1, 4), label="s") for _ in range(2))
    padding = data.draw(st.sampled_from(["SAME", "VALID", b"SAME", b"VALID"]), label="padding")
    valid = padding in ("VALID", b"VALID")
    hw = [(kk if valid else 1) + data.draw(st.integers(0, 5), label="extra") for kk in k]
    shape = (_batch(data, 4), data.draw(st.integers(1, 3), label="C"), *hw)
    wform = data.draw(st.sampled_from([tuple, list, np.array]), label="window_form")
    params = dict(ksize=wform(catalog.tf_window(k, layout)), strides=wform(catalog.tf_window(s, layout)),
                  padding=padding)
    op = "max_pool" + ("_grad" if kind == "backward" else "")
    return catalog.make_case(
        op, shape=shape, dtype=dtype, layout=layout, params=params,
        values_kind=data.draw(st.sampled_from(value_kinds or VALUE_KINDS), label="values"),
        grad_kind=data.draw(st.sampled_from(GRAD_KINDS), label="grad_values"),
        seed=data.draw(st.integers(0, 2 ** 32 - 1), label="seed"))


def draw_elementwise(data):
    ndim = data.draw(st.integers(1, 8), label="ndim")
    hi = 5 if ndim <= 3 else 3 if ndim <= 5 else 2
    shape = tuple(data.draw(st.integers(0 if data.draw(st.integers(0, 9)) == 0 else 1, hi), label="dim")
                  for _ in range(ndim))
    return catalog.make_case(
        "max_pooling_grad", shape=shape, dtype=data.draw(st.sampled_from(catalog.DTYPES), label="dtype"),
        values_kind=data.draw(st.sampled_from(VALUE_KINDS), label="values"),
        grad_kind=data.draw(st.sampled_from(GRAD_KINDS), label="grad_values"),
        seed=data.draw(st.integers(0, 2 ** 32 - 1), label="seed"))


def draw_max_backward(data):
    # includes problems where padding + dilation leave an output window with no input cell
    return draw_torch_style(data, "max", kind="backward")


DRAW = {
    "max_pool2d_with_indices": lambda d: draw_torch_style(d, "max"),
    "max_pool2d_with_indices_backward": draw_max_backward,
    "adaptive_max_pool2d": lambda d: draw_adaptive(d),
    "adaptive_max_pool2d_backward": lambda d: draw_adaptive(d, kind="backward"),
    "avg_pool2d": lambda d: draw_torch_style(d, "avg"),
    "avg_pool2d_backward": lambda d: draw_torch_style(d, "avg", kind="backward"),
    "max_pool": lambda d: draw_tf(d),
    "max_pool_grad": lambda d: draw_tf(d, kind="backward"),
    "max_pooling_grad": draw_elementwise,
}


def draw_memory_orders(data, case):
    """Re-stride every array argument (x1/x2 of max_pool_grad keep their values: x2 must stay x1's pooling)."""
    for name in case.op.arrays:
        arr = case.kwargs[name]
        orders = catalog.ORDERS if name not in ("x1", "x2") else catalog.WRITABLE_ORDERS
        order = data.draw(st.sampled_from(orders), label=f"{name}_order")
        perm = data.draw(st.permutations(range(arr.ndim)), label=f"{name}_perm") if order == "permuted" else None
        axis = data.draw(st.integers(0, max(0, arr.ndim - 1)), label=f"{name}_axis") if order == "broadcast" else 0
        case.kwargs[name] = catalog.restride(arr, order, perm, axis)
    if case.op.family == "elementwise" and data.draw(st.booleans(), label="y_is_x"):
        case.kwargs["y"] = case.kwargs["x"]


def draw_out(data, case):
    """None, a writeable array of the result's shape in any memory order (NaN-filled), or dy itself."""
    choices = ["none"] + catalog.WRITABLE_ORDERS
    if case.op.family == "elementwise" and case.kwargs["dy"].flags.writeable:
        choices.append("inplace")
    which = data.draw(st.sampled_from(choices), label="out")
    if which == "none":
        return None
    if which == "inplace":
        return case.kwargs["dy"]
    shape = case.output_shape()
    perm = data.draw(st.permutations(range(len(shape))), label="out_perm") if which == "permuted" else None
    return catalog.restride(np.full(shape, np.nan, case.dtype), which, perm)


@contextlib.contextmanager
def det_mode(mode):
    """Yields the ``deterministic=`` argument; the ctx_* modes set the process-wide switch instead."""
    if mode.startswith("ctx_"):
        with pg.deterministic(mode == "ctx_true"):
            yield None
    else:
        yield {"true": True, "false": False, "none": None}[mode]


def effective_det(mode):
    return mode in ("true", "ctx_true") or (mode == "none" and pg.is_deterministic())


# ----------------------------------------------------------------------------------------------------------------
# Comparing
# ----------------------------------------------------------------------------------------------------------------
def assert_close(got, ref64, mag64, dtype, what):
    """``got`` (dtype) against the float64 reference rounded once to ``dtype``: NaN and ±inf exactly where the
    reference has them, finite values within pgtest.tolerance scaled by max(|ref|, mag), where ``mag`` is the
    reference computed from absolute values (the summation-error scale under cancellation)."""
    tol = pgtest.tolerance(dtype)
    g = pgtest.as64(got)
    e = np.asarray(ref64).astype(dtype).astype(np.float64)
    assert g.shape == e.shape, (what, g.shape, e.shape)
    assert np.array_equal(np.isnan(g), np.isnan(e)), f"{what}: NaN positions differ"
    inf = np.isinf(g) | np.isinf(e)
    assert np.array_equal(g[inf], e[inf]), f"{what}: infinities differ: {g[inf]} vs {e[inf]}"
    fin = np.isfinite(g) & np.isfinite(e)
    mag = np.zeros_like(e) if mag64 is None else np.nan_to_num(np.abs(mag64), nan=0.0, posinf=0.0)
    scale = np.maximum(np.abs(e), mag)
    with np.errstate(invalid="ignore"):
        err = np.abs(g - e)
    bad = fin & (err > tol["atol"] + tol["rtol"] * scale)
    assert not bad.any(), (f"{what}: {int(bad.sum())} of {bad.size} differ, worst got {g[bad][:5]} expected "
                           f"{e[bad][:5]}")


def magnitude_reference(case):
    """The reference recomputed with every grad/x value made non-negative (error scale of the sums)."""
    kw = dict(case.kwargs)
    src = {"max_pool2d_with_indices_backward": "grad_output", "adaptive_max_pool2d_backward": "grad_output",
           "avg_pool2d_backward": "grad_output", "max_pool_grad": "grad", "avg_pool2d": "x"}.get(case.op.name)
    if src is None:
        return None
    absolute = catalog.Case(case.op, {**kw, src: np.abs(np.asarray(kw[src]))}, case.layout, case.rank,
                            case.dtype, case.norm)
    return np.abs(next(iter(absolute.reference().values())))


def axis_order(a):
    sizes = [i for i in range(a.ndim) if a.shape[i] > 1]
    return tuple(sorted(sizes, key=lambda i: -abs(a.strides[i])))


def check_memory_order(result, like):
    """Default outputs follow the input's memory order (when that order is unambiguous)."""
    axes = [i for i in range(like.ndim) if like.shape[i] > 1 and result.shape[i] > 1]
    st_in = [abs(like.strides[i]) for i in axes]
    if len(set(st_in)) != len(st_in) or 0 in st_in:
        return
    want = tuple(sorted(axes, key=lambda i: -abs(like.strides[i])))
    got = tuple(sorted(axes, key=lambda i: -abs(result.strides[i])))
    assert got == want, f"memory order {got} does not follow the input's {want}"


def bitwise(a):
    return np.ascontiguousarray(np.asarray(a)).tobytes()


def bitwise_nan_canonical(a):
    """Bytes of ``a`` with every NaN replaced by the positive quiet NaN: the sign and payload of a NaN produced
    by ``inf - inf`` or by adding two NaNs depend on the operand order of the adds, which the memory-order paths
    do not share (see test_avg_pool2d_nan_sign_known_issue); every other bit must match."""
    a = np.array(np.asarray(a), copy=True, order="C")
    if a.dtype.kind == "f" or a.dtype == pg.bfloat16:
        a[np.isnan(a)] = np.nan
    return a.tobytes()


def run_differential(data, case):
    """The body shared by every reference test (see the module docstring)."""
    spec = case.op
    draw_memory_orders(data, case)
    nt = data.draw(st.sampled_from(THREADS), label="num_threads")
    extra = {}
    if nt is not None:
        extra["num_threads"] = nt
    mode = "none"
    out = None
    if spec.backward:
        mode = data.draw(st.sampled_from(DET_MODES), label="deterministic")
        out = draw_out(data, case)
        if out is not None:
            case.kwargs["out"] = out
        if spec.family == "tf":
            extra["check_orig_output"] = data.draw(st.booleans(), label="check_orig_output")
    inputs = case.inputs()
    note(f"op={spec.name} layout={case.layout} rank={case.rank} dtype={case.dtype} norm={case.norm} "
         f"params={ {k: v for k, v in case.kwargs.items() if k not in inputs and k != 'out'} } "
         f"shapes={ {k: np.shape(v) for k, v in inputs.items()} } "
         f"strides={ {k: getattr(v, 'strides', None) for k, v in inputs.items()} } nt={nt} mode={mode}")
    event(f"dtype={case.dtype}")
    event(f"layout={case.layout} rank={case.rank}")
    event("empty (a zero-size dimension)" if any(np.size(v) == 0 for v in inputs.values()) else "non-empty")
    if spec.backward:
        event(f"deterministic mode={mode}")
        event(f"out={'none' if out is None else 'given'}")
    inplace = out is not None and out is case.kwargs.get("dy")
    guarded = {k: v for k, v in inputs.items() if not (inplace and v is out)}
    before, raw = pgtest.snapshot(guarded), catalog.snapshot_raw(guarded)

    if case.expect_error is not None:
        exc_type, name = case.expect_error
        with det_mode(mode) as det:
            with pytest.raises(exc_type) as info:
                case.call(**extra, **({} if det is None else {"deterministic": det}))
        assert info.value.code == catalog.INVALID and str(info.value).startswith(f"{name}:"), str(info.value)
        pgtest.assert_untouched(before, guarded)
        catalog.assert_raw_untouched(raw, guarded)
        return

    ref = case.reference()
    mag = magnitude_reference(case)
    with det_mode(mode) as det:
        res = case.call(**extra, **({} if det is None or not spec.backward else {"deterministic": det}))
        is_det = effective_det(mode)
    pgtest.assert_untouched(before, guarded)
    catalog.assert_raw_untouched(raw, guarded)

    got = case.result_dict(res)
    if out is not None:
        assert res is out, "out= must be returned"
    like = case.kwargs[case.main_input]
    results = res if isinstance(res, tuple) else (res,)
    for r in results:
        assert isinstance(r, np.ndarray)
        if out is None:
            check_memory_order(r, like)
    if spec.returns_indices:
        assert results[1].dtype == np.dtype(case.kwargs["index_dtype"])
    assert results[0].dtype == case.dtype
    if spec.backward:
        assert res.shape == np.shape(like)

    for key, expected in ref.items():
        if key == "indices":
            np.testing.assert_array_equal(got[key], expected, err_msg="indices")
        elif spec.family == "elementwise":
            assert bitwise(got[key]) == bitwise(expected), "max_pooling_grad is not bit-exact"
        elif spec.family in ("max", "adaptive", "tf") and not spec.backward:
            np.testing.assert_array_equal(pgtest.as64(got[key]), expected.astype(case.dtype).astype(np.float64),
                                          err_msg="window maxima")
        else:
            assert_close(got[key], expected, mag, case.dtype, spec.name)

    if is_det or not spec.backward:
        # bitwise equal to the C-contiguous NCHW problem computed with another thread count
        nt2 = data.draw(st.sampled_from([t for t in (1, 2, 3, 4) if t != nt]), label="num_threads_2")
        base_case = case.canonical()
        kw2 = {"num_threads": nt2}
        if spec.backward:
            kw2["deterministic"] = True
        if spec.family == "tf" and spec.backward:
            kw2["check_orig_output"] = False
        base = base_case.result_dict(base_case.call(**kw2))
        for key in base:
            assert bitwise_nan_canonical(got[key]) == bitwise_nan_canonical(base[key]), (
                f"{key}: not bitwise identical to the contiguous NCHW result with num_threads={nt2}")


# ----------------------------------------------------------------------------------------------------------------
# Reference tests: one per operator
# ----------------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("op", list(OPS))
@given(data=st.data())
def test_against_reference(op, data):
    run_differential(data, DRAW[op](data))


# ----------------------------------------------------------------------------------------------------------------
# Out-of-range indices
# ----------------------------------------------------------------------------------------------------------------
BAD_VALUES = ["-1", "-HW", "HW", "HW+1", "HW+r", "i32min", "i32max", "i64min", "i64max", "-2**40", "2**40"]


def _bad_value(tag, hw, r):
    return {"-1": -1, "-HW": -hw, "HW": hw, "HW+1": hw + 1, "HW+r": hw + r, "i32min": -2 ** 31,
            "i32max": 2 ** 31 - 1, "i64min": -2 ** 63, "i64max": 2 ** 63 - 1, "-2**40": -2 ** 40,
            "2**40": 2 ** 40}[tag]


@pytest.mark.parametrize("op", catalog.INDEX_BACKWARDS)
@given(data=st.data())
def test_invalid_indices_raise_with_position(op, data):
    """Any index outside [0, H*W) raises ParamInvalidError naming the first bad position (row-major n, c, oh,
    ow) and its value; inputs are untouched; nothing crashes."""
    case = draw_max_backward(data) if op.startswith("max") else draw_adaptive(data, kind="backward")
    case.expect_error = None
    ind4 = case.logical(case.kwargs["indices"]).copy()
    assume(ind4.size > 0)
    H, W = case.x_shape4[2:]
    nbad = data.draw(st.integers(1, 3), label="nbad")
    flat = [data.draw(st.integers(0, ind4.size - 1), label="pos") for _ in range(nbad)]
    vals = [_bad_value(data.draw(st.sampled_from(BAD_VALUES), label="bad"), H * W,
                       data.draw(st.integers(0, 2 ** 20), label="r")) for _ in range(nbad)]
    wide = any(not -2 ** 31 <= v < 2 ** 31 for v in vals)
    ind4 = ind4.astype(np.int64) if wide else ind4
    for f, v in zip(flat, vals):
        ind4.reshape(-1)[f] = v
    case.kwargs["indices"] = catalog.to_api(ind4, case.layout, case.rank)
    draw_memory_orders(data, case)
    # broadcasting may have hidden or duplicated the bad entries: recompute them from what is passed
    passed = case.logical(case.kwargs["indices"])
    bad = np.argwhere((passed < 0) | (passed >= H * W))
    assume(len(bad))
    n, c, oh, ow = (int(v) for v in bad[0])
    value = int(passed[n, c, oh, ow])
    out = draw_out(data, case)
    if out is not None:
        case.kwargs["out"] = out
    mode = data.draw(st.sampled_from(DET_MODES), label="deterministic")
    nt = data.draw(st.sampled_from(THREADS), label="num_threads")
    inputs = case.inputs()
    before, raw = pgtest.snapshot(inputs), catalog.snapshot_raw(inputs)
    with det_mode(mode) as det:
        with pytest.raises(pg.ParamInvalidError) as info:
            case.call(num_threads=nt, **({} if det is None else {"deterministic": det}))
    msg = str(info.value)
    assert info.value.code == catalog.INVALID and isinstance(info.value, ValueError)
    assert "indices" in msg and str(value) in msg, msg
    m = re.search(r"n=(\d+), c=(\d+), oh=(\d+), ow=(\d+)", msg)
    assert m and tuple(int(g) for g in m.groups()) == (n, c, oh, ow), (msg, (n, c, oh, ow))
    pgtest.assert_untouched(before, inputs)
    catalog.assert_raw_untouched(raw, inputs)


# ----------------------------------------------------------------------------------------------------------------
# PyTorch
# ----------------------------------------------------------------------------------------------------------------
def _t(a):
    return torch.from_numpy(np.ascontiguousarray(a))


def _maybe_torch(data, case, name):
    """Pass a torch tensor (DLPack, no copy) instead of the ndarray for some NCHW examples."""
    if case.layout == "NCHW" and data.draw(st.booleans(), label=f"{name}_as_tensor"):
        case.kwargs[name] = torch.from_numpy(np.ascontiguousarray(case.kwargs[name]))


TORCH_DTYPES = [np.dtype(np.float32), np.dtype(np.float64)]


@needs_torch
@given(data=st.data())
def test_max_pool_against_torch(data):
    case = draw_torch_style(data, "max", torch_cap=True, dtypes=TORCH_DTYPES,
                            value_kinds=["normal", "ties", "nan"], kind="backward")
    assume(not case.norm["empty_window"])     # the forward rejects these (PyTorch returns -inf there)
    n = case.norm
    x4 = case.logical(case.kwargs["x"])
    xt = _t(x4)
    if data.draw(st.booleans(), label="torch_channels_last"):
        xt = xt.contiguous(memory_format=torch.channels_last)
    yt, it = torch.nn.functional.max_pool2d(xt, n["kernel"], n["stride"], n["padding"], n["dilation"],
                                            n["ceil_mode"], return_indices=True)
    fwd = catalog.make_case("max_pool2d_with_indices", shape=x4.shape, dtype=case.dtype, layout=case.layout,
                            rank=case.rank, params={k: case.kwargs[k] for k in catalog.DEFAULT_PARAMS["max"]},
                            index_dtype=np.int64)
    fwd.kwargs["x"] = case.kwargs["x"]
    _maybe_torch(data, fwd, "x")
    y, ind = fwd.result_dict(fwd.call()).values()
    np.testing.assert_array_equal(y, yt.numpy())
    np.testing.assert_array_equal(ind, it.numpy())
    go4 = case.logical(case.kwargs["grad_output"])
    case.kwargs["indices"] = catalog.to_api(it.numpy(), case.layout, case.rank)
    _maybe_torch(data, case, "grad_output")
    _maybe_torch(data, case, "indices")
    g = case.logical(case.call(num_threads=data.draw(st.sampled_from(THREADS))))
    ref = torch.ops.aten.max_pool2d_with_indices_backward(_t(go4), xt, list(n["kernel"]), list(n["stride"]),
                                                          list(n["padding"]), list(n["dilation"]),
                                                          n["ceil_mode"], it).numpy()
    mag = torch.ops.aten.max_pool2d_with_indices_backward(_t(np.abs(go4)), xt, list(n["kernel"]),
                                                          list(n["stride"]), list(n["padding"]),
                                                          list(n["dilation"]), n["ceil_mode"], it).numpy()
    assert_close(g, ref, mag, case.dtype, "max_pool2d_with_indices_backward vs torch")


@needs_torch
@given(data=st.data())
def test_adaptive_against_torch(data):
    case = draw_adaptive(data, kind="backward", dtypes=TORCH_DTYPES, value_kinds=["normal", "ties", "nan"])
    x4 = case.logical(case.kwargs["x"])
    xt = _t(x4)
    yt, it = torch.nn.functional.adaptive_max_pool2d(xt, case.norm["output_size"], return_indices=True)
    y, ind = pg.adaptive_max_pool2d(case.kwargs["x"], case.norm["output_size"], layout=case.layout)
    np.testing.assert_array_equal(case.logical(y), yt.numpy())
    np.testing.assert_array_equal(case.logical(ind), it.numpy())
    go4 = case.logical(case.kwargs["grad_output"])
    case.kwargs["indices"] = catalog.to_api(it.numpy(), case.layout, case.rank)
    _maybe_torch(data, case, "grad_output")
    g = case.logical(case.call(deterministic=data.draw(st.booleans(), label="det")))
    ref = torch.ops.aten.adaptive_max_pool2d_backward(_t(go4), xt, it).numpy()
    mag = torch.ops.aten.adaptive_max_pool2d_backward(_t(np.abs(go4)), xt, it).numpy()
    assert_close(g, ref, mag, case.dtype, "adaptive_max_pool2d_backward vs torch")


@needs_torch
@given(data=st.data())
def test_avg_pool_against_torch(data):
    case = draw_torch_style(data, "avg", dtypes=TORCH_DTYPES, value_kinds=["normal", "ties", "nan", "inf"],
                            kind="backward")
    case.kwargs["cube_math_type"] = 0
    n = case.norm
    div = n["divisor_override"]
    assume(div is None or abs(div) < 2 ** 31)       # torch takes an int64 too, but keep the arithmetic tame
    x4 = case.logical(case.kwargs["x"])
    xt = _t(x4)
    yt = torch.nn.functional.avg_pool2d(xt, n["kernel"], n["stride"], n["padding"], n["ceil_mode"],
                                        n["count_include_pad"], div)
    fw_params = {k: case.kwargs[k] for k in catalog.DEFAULT_PARAMS["avg"]}
    y = case.logical(OPS["avg_pool2d"].func(case.kwargs["x"], **fw_params, layout=case.layout))
    mag_y = torch.nn.functional.avg_pool2d(_t(np.abs(x4)), n["kernel"], n["stride"], n["padding"],
                                           n["ceil_mode"], n["count_include_pad"], div).numpy()
    assert_close(y, yt.numpy(), mag_y, case.dtype, "avg_pool2d vs torch")
    go4 = case.logical(case.kwargs["grad_output"])
    _maybe_torch(data, case, "grad_output")
    g = case.logical(case.call())
    args = (list(n["kernel"]), list(n["stride"]), list(n["padding"]), n["ceil_mode"], n["count_include_pad"], div)
    ref = torch.ops.aten.avg_pool2d_backward(_t(go4), xt, *args).numpy()
    mag = torch.ops.aten.avg_pool2d_backward(_t(np.abs(go4)), xt, *args).numpy()
    assert_close(g, ref, np.abs(mag), case.dtype, "avg_pool2d_backward vs torch")


# ----------------------------------------------------------------------------------------------------------------
# TensorFlow
# ----------------------------------------------------------------------------------------------------------------
@needs_tf
@given(data=st.data())
def test_max_pool_grad_against_tensorflow(data):
    """NHWC float32 without NaN (TensorFlow's CPU kernel treats NaN differently, as documented)."""
    case = draw_tf(data, kind="backward", dtypes=[np.dtype(np.float32)], value_kinds=["normal", "ties"],
                   layouts=["NHWC"])
    x1, grad = case.kwargs["x1"], case.kwargs["grad"]
    ksize, strides = list(catalog.tf_window(case.norm["ksize"], "NHWC")), \
        list(catalog.tf_window(case.norm["strides"], "NHWC"))
    padding = case.norm["padding"]
    y_tf = tf.nn.max_pool2d(x1, ksize, strides, padding).numpy()
    y = OPS["max_pool"].func(x1, case.kwargs["ksize"], case.kwargs["strides"], case.kwargs["padding"])
    np.testing.assert_array_equal(y, y_tf)
    g = case.call(num_threads=data.draw(st.sampled_from(THREADS), label="nt"))
    ref = tf.raw_ops.MaxPoolGrad(orig_input=x1, orig_output=y_tf, grad=grad, ksize=ksize, strides=strides,
                                 padding=padding, data_format="NHWC").numpy()
    mag = tf.raw_ops.MaxPoolGrad(orig_input=x1, orig_output=y_tf, grad=np.abs(grad), ksize=ksize,
                                 strides=strides, padding=padding, data_format="NHWC").numpy()
    assert_close(case.logical(g), case.logical(ref), case.logical(mag), case.dtype, "max_pool_grad vs TF")


# ----------------------------------------------------------------------------------------------------------------
# Regression: outputs whose window holds no input cell (found by this file's fuzzing, fixed in _scatter.py)
# ----------------------------------------------------------------------------------------------------------------
# (x shape NCHW, kernel_size, stride, padding, dilation): padding + dilation leave some output window with no input
# cell (the forward rejects such problems; the backward accepts them and must scatter to the given indices).
EMPTY_WINDOW = [
    ((1, 1, 1, 1), (4, 1), None, (3, 0), (2, 1)),
    ((2, 3, 1, 5), (4, 1), None, (3, 0), (2, 1)),
    ((1, 2, 1, 4), (2, 2), None, (2, 1), (3, 1)),
]


@pytest.mark.parametrize("cfg", EMPTY_WINDOW)
@pytest.mark.parametrize("det", [True, False])
def test_empty_window_backward(cfg, det):
    shape, k, s, p, d = cfg
    case = catalog.make_case("max_pool2d_with_indices_backward", shape=shape, index_mode="random", seed=1,
                             params=dict(kernel_size=k, stride=s, padding=p, dilation=d))
    assert case.norm["empty_window"]
    ref = case.reference()["grad"]
    got = case.call(deterministic=det, num_threads=2)
    np.testing.assert_allclose(got, ref, rtol=1e-6, atol=1e-6)
    bad = np.asarray(case.kwargs["indices"]).copy()
    bad.reshape(-1)[-1] = shape[2] * shape[3]                       # one index at H*W
    with pytest.raises(pg.ParamInvalidError, match="indices"):
        case.call(indices=bad, deterministic=det, num_threads=2)


def test_avg_pool2d_nan_from_infinities_is_nan_in_every_memory_order():
    """Found by the long fuzz profile: one window of (-inf, inf, nan, 0.68), kernel (1, 4).  Every memory order
    gives NaN; the *sign bit* of a NaN created by inf - inf may differ between the channels-last and the plane
    kernels (x86 keeps the first operand's NaN), which the README documents as the one exception to bitwise
    identity across memory orders.  Finite results are bitwise identical (checked by the fuzz above)."""
    x4 = np.zeros((1, 2, 1, 4), np.float32)
    x4[0, :, 0] = [-np.inf, np.inf, np.nan, 0.6817505]
    avg = OPS["avg_pool2d"].func
    plane = avg(x4, (1, 4), count_include_pad=False)
    channels_last = avg(np.ascontiguousarray(x4.transpose(0, 2, 3, 1)).transpose(0, 3, 1, 2), (1, 4),
                        count_include_pad=False)
    nhwc = avg(np.ascontiguousarray(x4.transpose(0, 2, 3, 1)), (1, 4), count_include_pad=False, layout="NHWC")
    assert np.isnan(plane).all() and np.isnan(channels_last).all() and np.isnan(nhwc).all()
