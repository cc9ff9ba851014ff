"""The per-call path (poolgrad/plans.py, _callkey.pyx): cached plans give the same bits and the same errors as
planning afresh, keys tell apart everything validation depends on, plans pin no caller array, and one plan serves
concurrent threads."""
from __future__ import annotations

import gc
import threading
import weakref

import numpy as np
import pytest

import catalog
import poolgrad as pg
from poolgrad import plans
from poolgrad._callkey import make_key
from poolgrad._launch import Launch


def _calls():
    """(name, call) for every operator on small arrays, each call building fresh arrays of the same shapes."""
    rng = np.random.default_rng(5)
    x = rng.standard_normal((2, 3, 9, 8)).astype(np.float32)
    y, ind = pg.max_pool2d_with_indices(x, 3, 2, 1)
    ay, aind = pg.adaptive_max_pool2d(x, (4, 3))
    tfy = pg.max_pool(x, [1, 1, 3, 3], [1, 1, 2, 2], "SAME", "NCHW")
    gy = rng.standard_normal(y.shape).astype(np.float32)
    gay = rng.standard_normal(ay.shape).astype(np.float32)
    gavg = rng.standard_normal(pg.avg_pool2d(x, 3, 2, 1).shape).astype(np.float32)
    gtf = rng.standard_normal(tfy.shape).astype(np.float32)
    return [
        ("max fwd", lambda: pg.max_pool2d_with_indices(x.copy(), 3, 2, 1)),
        ("max bwd", lambda: pg.max_pool2d_with_indices_backward(gy.copy(), x.copy(), ind.copy(), 3, 2, 1)),
        ("adaptive fwd", lambda: pg.adaptive_max_pool2d(x.copy(), (4, 3))),
        ("adaptive bwd", lambda: pg.adaptive_max_pool2d_backward(gay.copy(), x.copy(), aind.copy())),
        ("avg fwd", lambda: pg.avg_pool2d(x.copy(), 3, 2, 1)),
        ("avg bwd", lambda: pg.avg_pool2d_backward(gavg.copy(), x.copy(), 3, 2, 1)),
        ("tf fwd", lambda: pg.max_pool(x.copy(), [1, 1, 3, 3], [1, 1, 2, 2], "SAME", "NCHW")),
        ("tf bwd", lambda: pg.max_pool_grad(x.copy(), tfy.copy(), gtf.copy(), [1, 1, 3, 3], [1, 1, 2, 2], "SAME",
                                            "NCHW")),
        ("elementwise", lambda: pg.max_pooling_grad(x.copy(), x.copy(), x.copy())),
    ]


def _bytes(result) -> list[bytes]:
    return [r.tobytes() for r in (result if isinstance(result, tuple) else (result,))]


@pytest.mark.parametrize("case", range(9))
def test_cached_plan_equals_a_fresh_plan(case):
    name, fn = _calls()[case]
    plans.clear()
    first = _bytes(fn())                 # plans and caches
    count = plans.plan_count()
    assert count >= 1, name
    again = _bytes(fn())                 # runs the cached plan on new arrays
    assert plans.plan_count() == count, name
    assert again == first, name


def test_errors_are_never_cached_and_repeat_exactly():
    x = np.zeros((1, 1, 4, 4), np.float32)
    plans.clear()
    messages = set()
    for _ in range(3):
        with pytest.raises(pg.ParamInvalidError) as info:
            pg.max_pool2d_with_indices(x, 5)
        messages.add(str(info.value))
    assert len(messages) == 1 and plans.plan_count() == 0


def test_index_range_is_checked_on_every_call():
    x = np.zeros((1, 1, 4, 4), np.float32)
    y, ind = pg.max_pool2d_with_indices(x, 2)
    gy = np.ones_like(y)
    pg.max_pool2d_with_indices_backward(gy, x, ind, 2)          # plans with good indices
    bad = ind.copy()
    bad[0, 0, 1, 1] = 16
    with pytest.raises(pg.ParamInvalidError, match=r"got 16 at position \(n=0, c=0, oh=1, ow=1\)"):
        pg.max_pool2d_with_indices_backward(gy, x, bad, 2)        # same key: the cached plan still checks


def test_out_overlap_is_checked_on_every_call():
    x = np.zeros((1, 1, 4, 4), np.float32)
    y, ind = pg.max_pool2d_with_indices(x, 2)
    gy = np.ones_like(y)
    out = np.empty_like(x)
    pg.max_pool2d_with_indices_backward(gy, x, ind, 2, out=out)
    with pytest.raises(pg.ParamInvalidError, match="must not share memory with x"):
        pg.max_pool2d_with_indices_backward(gy, x, ind, 2, out=x)   # same shape, strides and flags as `out`


def test_key_tells_apart_what_validation_tells_apart():
    a = np.zeros((1, 1, 4, 4), np.float32)
    base = make_key(1, (a,), (2, None, 0, 1, False, "NCHW"))
    assert base is not None
    assert make_key(1, (a,), (True, None, 0, 1, False, "NCHW")) != base        # kernel_size=True is an error
    assert make_key(1, (a,), ((2, 2), None, 0, 1, False, "NCHW")) != base
    assert make_key(1, (a,), ([2, 2], None, 0, 1, False, "NCHW")) == make_key(1, (a,), ((2, 2), None, 0, 1,
                                                                                       False, "NCHW"))
    assert make_key(1, (a.astype(np.float64),), (2, None, 0, 1, False, "NCHW")) != base
    assert make_key(1, (np.asfortranarray(a[0, 0])[None, None],), (2, None, 0, 1, False, "NCHW")) != base
    ro = a.copy()
    ro.setflags(write=False)
    assert make_key(1, (ro,), (2, None, 0, 1, False, "NCHW")) != base                # writeable flag
    raw = np.zeros(4 * 16 + 1, np.uint8)[1:].view(np.float32).reshape(1, 1, 4, 4)  # misaligned
    assert make_key(1, (raw,), (2, None, 0, 1, False, "NCHW")) != base
    # anything unusual takes the validated path every time
    assert make_key(1, (a,), (np.int64(2), None, 0, 1, False, "NCHW")) is None
    sub = type("Sub", (np.ndarray,), {})
    assert make_key(1, (a.view(sub),), (2,)) is None
    assert make_key(1, ([1, 2],), (2,)) is None


def test_determinism_default_and_thread_count_are_in_the_key():
    a = np.zeros((1, 1, 4, 4), np.float32)
    k0 = make_key(2, (a,), ())
    with pg.deterministic(True):
        assert make_key(2, (a,), ()) != k0
    assert make_key(2, (a,), ()) == k0
    threadpoolctl = pytest.importorskip("threadpoolctl")
    if pg.get_config()["openmp"] and pg.get_config()["omp_max_threads"] > 1:
        with threadpoolctl.threadpool_limits(1, user_api="openmp"):
            assert make_key(2, (a,), ()) != k0


def test_numpy_integer_parameters_still_work_uncached():
    x = np.random.default_rng(1).standard_normal((1, 2, 6, 6)).astype(np.float32)
    want = pg.avg_pool2d(x, 2)
    plans.clear()
    got = pg.avg_pool2d(x, np.int64(2))
    assert got.tobytes() == want.tobytes() and plans.plan_count() == 0


@pytest.mark.parametrize("case", range(9))
def test_plans_pin_no_caller_array(case):
    """A cached plan must not keep the arrays of the call that built it alive (they may be huge, or recycled
    blocks whose reuse waits for their last reference)."""
    name, fn = _calls()[case]
    plans.clear()
    captured = []
    real_call = plans.call

    def spy(key, arrays, build):
        captured.extend(weakref.ref(a) for a in arrays if isinstance(a, np.ndarray))
        return real_call(key, arrays, build)

    plans.call = spy
    try:
        for mod in ("max_pool_indices", "adaptive", "avg_pool", "tf_max_pool", "elementwise"):
            module = __import__(f"poolgrad.{mod}", fromlist=["call"])
            module.call = spy
        result = fn()
    finally:
        plans.call = real_call
        for mod in ("max_pool_indices", "adaptive", "avg_pool", "tf_max_pool", "elementwise"):
            __import__(f"poolgrad.{mod}", fromlist=["call"]).call = real_call
    del result
    gc.collect()
    assert captured and plans.plan_count() >= 1
    assert all(ref() is None for ref in captured), name


@pytest.mark.parametrize("case", range(9))
def test_one_plan_serves_concurrent_threads(case):
    name, fn = _calls()[case]
    plans.clear()
    want = _bytes(fn())
    results, errors = [], []

    def worker():
        try:
            for _ in range(30):
                results.append(_bytes(fn()))
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert len(results) == 120 and all(r == want for r in results), name


def test_cache_is_bounded(monkeypatch):
    monkeypatch.setattr(plans, "MAX_PLANS", 4)
    for n in range(1, 10):
        pg.avg_pool2d(np.zeros((1, 1, n + 1, 4), np.float32), 1)
        assert plans.plan_count() <= 4


# ---- launch records (poolgrad/_launch.pyx): a plan's first run records its kernel call, later calls replay it --

@pytest.mark.parametrize("op", sorted(catalog.OPS))
def test_every_operator_records_a_launch(op):
    """Small calls of every operator replay a recorded kernel call (a regression in a plan's recording would
    silently bring back the interpreter work it saves).  NCHW: TensorFlow's channels-last gradient with fewer
    than 8 channels is two kernel calls (the composed path), which keeps the ordinary path."""
    plans.clear()
    case = catalog.make_case(op, layout=None if catalog.OPS[op].family == "elementwise" else "NCHW")
    case.call()
    _assert_recorded(op)


def _assert_recorded(op):
    (runner,) = plans._plans.values()
    assert isinstance(getattr(runner.plan, "launch", None), Launch), op


@pytest.mark.parametrize("op,variant", [(op, v) for op in sorted(catalog.OPS)
                                        for v in ["f32", "f16", "bf16-NHWC", "f64-rank3", "strided", "out"]
                                        if v != "out" or catalog.OPS[op].backward])
def test_replayed_calls_give_the_first_runs_bits(op, variant):
    """Calls two and three (replays, on new arrays of the same signature) equal call one (the ordinary path)
    bit for bit, for dtypes, layouts, ranks, strided inputs and out=."""
    spec = catalog.OPS[op]
    dtype = {"f16": np.float16, "bf16-NHWC": catalog.bfloat16, "f64-rank3": np.float64}.get(variant, np.float32)
    layout = "NHWC" if variant == "bf16-NHWC" else None
    rank = 3 if variant == "f64-rank3" and spec.family != "tf" else 4
    shape = (1, 3, 6, 5) if rank == 3 else None
    case = catalog.make_case(op, dtype=dtype, layout=layout, rank=rank, shape=shape)

    def fresh(a):
        """A copy in new memory with ``a``'s strides (every other element of a wider buffer when strided)."""
        if variant != "strided":
            return a.copy()
        b = np.zeros(a.shape[:-1] + (2 * a.shape[-1],), a.dtype)[..., ::2]
        b[...] = a
        return b

    plans.clear()
    with pg.deterministic(True):
        results = []
        for _ in range(3):
            out = np.full(case.output_shape(), 7, case.kwargs[case.main_input].dtype) if variant == "out" else None
            kw = {k: (fresh(v) if isinstance(v, np.ndarray) else v) for k, v in case.kwargs.items()}
            if out is not None:
                kw["out"] = out
            res = case.op.func(**kw)
            if out is not None:
                assert res is out
            results.append(_bytes(res))
    assert results[1] == results[0] and results[2] == results[0], (op, variant)


@pytest.mark.parametrize("op", catalog.INDEX_BACKWARDS)
@pytest.mark.parametrize("index_dtype", [np.int32, np.int64])
def test_a_replay_that_meets_a_bad_index_raises_the_ordinary_error(op, index_dtype):
    case = catalog.make_case(op, layout="NHWC", index_dtype=index_dtype)
    plans.clear()
    case.call()                                   # records
    _assert_recorded(op)
    bad = case.kwargs["indices"].copy()
    bad.reshape(-1)[-1] = -3
    with pytest.raises(pg.ParamInvalidError) as replayed:
        case.call(indices=bad)
    plans.clear()
    with pytest.raises(pg.ParamInvalidError) as fresh:
        case.call(indices=bad)                    # the ordinary path, planned afresh
    assert str(replayed.value) == str(fresh.value) and "got -3 at position" in str(replayed.value)


@pytest.mark.parametrize("op", catalog.BACKWARDS)
def test_a_replay_with_an_overlapping_out_raises_the_ordinary_error(op):
    case = catalog.make_case(op, layout=None if op == "max_pooling_grad" else "NCHW")
    plans.clear()
    case.call(out=np.empty_like(case.kwargs[case.main_input]))
    _assert_recorded(op)
    src = case.main_input if op != "max_pooling_grad" else "x"
    with pytest.raises(pg.ParamInvalidError, match=f"must not share memory with {src}"):
        case.call(out=case.kwargs[src])           # same signature as the first out: the plan's record runs


def test_max_pooling_grad_in_place_after_a_recorded_call():
    """dx may be dy itself: a replay sees the overlap by byte ranges, leaves the call to the ordinary path,
    which allows it."""
    rng = np.random.default_rng(3)
    dy, x = rng.standard_normal((2, 3, 4, 4)).astype(np.float32), rng.standard_normal((2, 3, 4, 4)).astype(
        np.float32)
    y = np.where(rng.random(x.shape) < 0.5, x, 0).astype(np.float32)
    want = pg.max_pooling_grad(dy, x, y)
    plans.clear()
    pg.max_pooling_grad(dy.copy(), x, y, out=np.empty_like(dy))
    inplace = dy.copy()
    assert pg.max_pooling_grad(inplace, x, y, out=inplace) is inplace
    assert inplace.tobytes() == want.tobytes()


def test_a_public_plan_replays_and_still_checks_signatures():
    x = np.random.default_rng(2).standard_normal((1, 2, 6, 6)).astype(np.float32)
    y, ind = pg.max_pool2d_with_indices(x, 2)
    plan = pg.plan_max_pool2d_with_indices_backward(y, x, ind, 2, num_threads=1)
    want = pg.max_pool2d_with_indices_backward(y, x, ind, 2, num_threads=1)
    for _ in range(3):
        assert plan(y.copy(), x.copy(), ind.copy()).tobytes() == want.tobytes()
    with pytest.raises(pg.ParamInvalidError, match="the plan was made for dtype int64, got int32"):
        plan(y, x, ind.astype(np.int32))
