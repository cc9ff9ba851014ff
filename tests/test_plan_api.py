"""Public plans (poolgrad/plan_api.py, poolgrad/_capi.pyx): same results and errors as the functions, the
signature check on every call, the data checks on every call, out=, specs, threads."""
from __future__ import annotations

import threading

import numpy as np
import pytest

import poolgrad as pg
from pgtest import DTYPES, DTYPE_IDS, strided_variants

RNG = np.random.default_rng(10)


def _x(shape=(2, 3, 8, 8), dtype=np.float32, layout="NCHW"):
    x = RNG.standard_normal(shape).astype(dtype)
    return np.ascontiguousarray(x.transpose(0, 2, 3, 1)) if layout == "NHWC" else x


def _same(a, b):
    """Bitwise equality of results (tuples compared item by item)."""
    if isinstance(a, tuple):
        return len(a) == len(b) and all(_same(u, v) for u, v in zip(a, b))
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


def cases(dtype=np.float32, layout="NCHW"):
    """(plan factory, function, array args, parameter args, keyword args) for every operator."""
    x = _x(dtype=dtype, layout=layout)
    y, ind = pg.max_pool2d_with_indices(x, 3, 2, 1, layout=layout)
    go = RNG.standard_normal(y.shape).astype(dtype)
    ay, aind = pg.adaptive_max_pool2d(x, (3, 5), layout=layout)
    ago = RNG.standard_normal(ay.shape).astype(dtype)
    av = pg.avg_pool2d(x, 3, 2, 1, layout=layout)
    avgo = RNG.standard_normal(av.shape).astype(dtype)
    x4 = x if x.ndim == 4 else x[None]
    tfx = x4
    tfy = pg.max_pool(tfx, [1, 1, 3, 3], [1, 1, 2, 2], "SAME", "NCHW")
    tfg = RNG.standard_normal(tfy.shape).astype(dtype)
    ex = x.copy()
    ey = np.where(RNG.random(x.shape) < 0.5, x, x + 1).astype(dtype)
    return [
        (pg.plan_max_pool2d_with_indices, pg.max_pool2d_with_indices, (x,), (3, 2, 1), {"layout": layout}),
        (pg.plan_max_pool2d_with_indices_backward, pg.max_pool2d_with_indices_backward, (go, x, ind), (3, 2, 1),
         {"layout": layout}),
        (pg.plan_adaptive_max_pool2d, pg.adaptive_max_pool2d, (x,), ((3, 5),), {"layout": layout}),
        (pg.plan_adaptive_max_pool2d_backward, pg.adaptive_max_pool2d_backward, (ago, x, aind), (),
         {"layout": layout}),
        (pg.plan_avg_pool2d, pg.avg_pool2d, (x,), (3, 2, 1), {"layout": layout}),
        (pg.plan_avg_pool2d_backward, pg.avg_pool2d_backward, (avgo, x), (3, 2, 1), {"layout": layout}),
        (pg.plan_max_pool, pg.max_pool, (tfx,), ([1, 1, 3, 3], [1, 1, 2, 2], "SAME", "NCHW"), {}),
        (pg.plan_max_pool_grad, pg.max_pool_grad, (tfx, tfy, tfg), ([1, 1, 3, 3], [1, 1, 2, 2], "SAME", "NCHW"),
         {}),
        (pg.plan_max_pooling_grad, pg.max_pooling_grad, (ex, ey, ex), (), {}),
    ]


BACKWARD = {pg.plan_max_pool2d_with_indices_backward, pg.plan_adaptive_max_pool2d_backward,
            pg.plan_avg_pool2d_backward, pg.plan_max_pool_grad, pg.plan_max_pooling_grad}
IDS = [f.__name__ for f, *_ in cases()]


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_plan_matches_function_every_operator(dtype, layout):
    for factory, fn, arrays, params, kw in cases(dtype, layout):
        want = fn(*arrays, *params, **kw)
        plan = factory(*arrays, *params, **kw)
        assert plan.operator == fn.__name__
        for _ in range(2):      # the first run takes the lazy decisions, the second reuses them
            assert _same(plan(*arrays), want), fn.__name__
        specs = [pg.ArraySpec.like(a) for a in arrays]
        assert _same(factory(*specs, *params, **kw)(*arrays), want), fn.__name__


@pytest.mark.parametrize("i", range(9), ids=IDS)
def test_plan_with_out_writes_out(i):
    factory, fn, arrays, params, kw = cases()[i]
    if factory not in BACKWARD:
        with pytest.raises(TypeError):
            factory(*arrays, *params, out=np.empty(1), **kw)
        return
    want = fn(*arrays, *params, **kw)
    out = np.full(want.shape, np.nan, want.dtype)
    plan = factory(*arrays, *params, out=pg.ArraySpec.like(out), **kw)
    assert plan.has_out
    assert plan(*arrays, out=out) is out
    assert _same(out, want)
    with pytest.raises(pg.ParamNullptrError, match="out: expected an array, got None"):
        plan(*arrays)
    # the overlap check depends on the data: it runs on every call
    alias = arrays[0] if arrays[0].shape == out.shape and arrays[0].dtype == out.dtype else None
    if alias is not None and fn is not pg.max_pooling_grad:
        with pytest.raises(pg.ParamInvalidError, match="out: must not share memory"):
            plan(*arrays, out=alias)


def test_out_in_place_for_max_pooling_grad():
    dy, x = _x(), _x()
    y = x.copy()
    want = pg.max_pooling_grad(dy, x, y)
    plan = pg.plan_max_pooling_grad(dy, x, y, out=dy)
    assert plan(dy, x, y, out=dy) is dy
    assert _same(dy, want)


@pytest.mark.parametrize("i", range(9), ids=IDS)
def test_planning_raises_what_the_function_raises(i):
    factory, fn, arrays, params, kw = cases()[i]
    bad = [a.astype(np.int16) for a in arrays]
    with pytest.raises(pg.ParamInvalidError) as want:
        fn(*bad, *params, **kw)
    with pytest.raises(pg.ParamInvalidError) as got:
        factory(*bad, *params, **kw)
    assert str(got.value) == str(want.value)


def test_signature_mismatches_name_the_argument_and_the_difference():
    x = _x()
    y, ind = pg.max_pool2d_with_indices(x, 2, 2)
    go = np.ones_like(y)
    plan = pg.plan_max_pool2d_with_indices_backward(go, x, ind, 2, 2)
    with pytest.raises(pg.ParamInvalidError, match=r"^indices: the plan was made for dtype int64, got int32$"):
        plan(go, x, ind.astype(np.int32))
    with pytest.raises(pg.ParamInvalidError, match=r"^x: the plan was made for shape \(2, 3, 8, 8\), got "
                                                   r"\(2, 3, 8, 6\)$"):
        plan(go, x[..., :6], ind)
    with pytest.raises(pg.ParamInvalidError, match=r"^grad_output: the plan was made for strides .* \(bytes\), "
                                                   r"got"):
        plan(np.asfortranarray(go), x, ind)
    with pytest.raises(pg.ParamInvalidError, match=r"^x: the plan was made for shape"):
        plan(go, x[0], ind)
    raw = np.zeros(x.nbytes + 4, np.uint8)
    misaligned = np.ndarray(x.shape, x.dtype, buffer=raw, offset=1)
    misaligned[...] = x
    with pytest.raises(pg.ParamInvalidError, match=r"^x: the plan was made for an aligned array, got a "
                                                   r"misaligned one$"):
        plan(go, misaligned, ind)
    with pytest.raises(pg.ParamInvalidError, match=r"^grad_output: a plan takes numpy.ndarray arguments only"):
        plan(go.tolist(), x, ind)
    with pytest.raises(pg.ParamInvalidError, match=r"^grad_output: a plan takes numpy.ndarray arguments only"):
        plan(np.ma.masked_array(go), x, ind)
    with pytest.raises(pg.ParamNullptrError, match=r"^indices: expected an array, got None$"):
        plan(go, x, None)
    with pytest.raises(pg.ParamInvalidError, match=r"expected 3 arrays \(grad_output, x, indices\), got 2"):
        plan(go, x)
    with pytest.raises(pg.ParamInvalidError, match=r"^out: the plan was made without out="):
        plan(go, x, ind, out=np.empty_like(x))
    # a plan made for a misaligned array wants misaligned ones
    mplan = pg.plan_max_pool2d_with_indices_backward(go, misaligned, ind, 2, 2)
    assert _same(mplan(go, misaligned, ind), plan(go, x, ind))
    with pytest.raises(pg.ParamInvalidError, match=r"^x: the plan was made for a misaligned array"):
        mplan(go, x, ind)


def test_read_only_out_is_refused():
    x = _x()
    y, ind = pg.max_pool2d_with_indices(x, 2, 2)
    go = np.ones_like(y)
    out = np.empty_like(x)
    plan = pg.plan_max_pool2d_with_indices_backward(go, x, ind, 2, 2, out=out)
    out.setflags(write=False)
    with pytest.raises(pg.ParamInvalidError, match=r"^out: expected a writeable array, got a read-only one$"):
        plan(go, x, ind, out=out)


def test_index_range_is_checked_on_every_call():
    x = _x()
    y, ind = pg.max_pool2d_with_indices(x, 2, 2)
    go = np.ones_like(y)
    plan = pg.plan_max_pool2d_with_indices_backward(go, x, ind, 2, 2)
    plan(go, x, ind)
    bad = ind.copy()
    bad[1, 2, 3, 0] = 64
    with pytest.raises(pg.ParamInvalidError, match=r"indices: expected every index in \[0, H\*W\) = \[0, 64\), "
                                                   r"got 64 at position \(n=1, c=2, oh=3, ow=0\)"):
        plan(go, x, bad)
    assert _same(plan(go, x, ind), pg.max_pool2d_with_indices_backward(go, x, ind, 2, 2))


@pytest.mark.parametrize("name", ["fortran", "sliced", "negative", "permuted"])
def test_strided_arrays_and_their_specs(name):
    x0 = _x()
    x = dict(strided_variants(x0))[name]
    y, ind = pg.max_pool2d_with_indices(x, 3, 2, 1)
    go = dict(strided_variants(np.ones_like(y)))[name]
    want = pg.max_pool2d_with_indices_backward(go, x, ind, 3, 2, 1)
    spec = pg.ArraySpec(x.shape, x.dtype, x.strides)
    plan = pg.plan_max_pool2d_with_indices_backward(pg.ArraySpec.like(go), spec, ind, 3, 2, 1)
    assert _same(plan(go, x, ind), want)
    fplan = pg.plan_max_pool2d_with_indices(spec, 3, 2, 1)
    assert _same(fplan(x), (y, ind))


def test_array_spec_validation_and_defaults():
    s = pg.ArraySpec((2, 3, 4), np.float64)
    assert s.strides == (96, 32, 8) and s.aligned
    assert pg.ArraySpec((2, 0, 4), np.float32).strides == np.empty((2, 0, 4), np.float32).strides
    with pytest.raises(pg.ParamInvalidError, match="shape must not be negative"):
        pg.ArraySpec((2, -1), np.float32)
    with pytest.raises(pg.ParamInvalidError, match="2 strides for a 3-D shape"):
        pg.ArraySpec((2, 3, 4), np.float32, (4, 4))
    with pytest.raises(pg.ParamInvalidError, match="dtype must be a NumPy dtype"):
        pg.ArraySpec((2,), "no such dtype")
    ex = pg.ArraySpec((2, 3), np.float32, (-4, 8)).example()
    assert ex.strides == (-4, 8) and ex.flags.aligned
    assert not pg.ArraySpec((2, 3), np.float32, aligned=False).example().flags.aligned
    with pytest.raises(pg.ParamNullptrError, match="x: expected an array or an ArraySpec, got None"):
        pg.plan_avg_pool2d(None, 2)
    with pytest.raises(pg.ParamInvalidError, match="x: a plan is made from a numpy.ndarray or an ArraySpec"):
        pg.plan_avg_pool2d([[[1.0]]], 1)


def test_determinism_and_threads_are_fixed_when_the_plan_is_made():
    x = _x()
    y, ind = pg.max_pool2d_with_indices(x, 2, 2)
    go = np.ones_like(y)
    with pg.deterministic(True):
        plan = pg.plan_max_pool2d_with_indices_backward(go, x, ind, 2, 2, num_threads=3)
    assert plan.deterministic is True and plan.num_threads == (3 if pg.get_config()["openmp"] else 1)
    assert pg.plan_max_pool2d_with_indices_backward(go, x, ind, 2, 2, deterministic=False).deterministic is False
    assert pg.plan_avg_pool2d(x, 2).deterministic is None
    with pytest.raises(pg.ParamInvalidError, match="num_threads"):
        pg.plan_avg_pool2d(x, 2, num_threads=0)
    with pytest.raises(pg.ParamInvalidError, match="deterministic"):
        pg.plan_max_pool2d_with_indices_backward(go, x, ind, 2, 2, deterministic="yes")


def test_deterministic_plans_are_bitwise_identical_across_thread_counts():
    x = _x((3, 5, 33, 31))
    y, ind = pg.max_pool2d_with_indices(x, 3, 1, 1)
    go = RNG.standard_normal(y.shape).astype(np.float32)
    results = [pg.plan_max_pool2d_with_indices_backward(go, x, ind, 3, 1, 1, deterministic=True,
                                                        num_threads=n)(go, x, ind) for n in (1, 2, 3)]
    assert all(_same(r, results[0]) for r in results)


def test_one_plan_from_several_python_threads():
    x = _x((4, 8, 32, 32))
    y, ind = pg.max_pool2d_with_indices(x, 3, 2, 1)
    gos = [RNG.standard_normal(y.shape).astype(np.float32) for _ in range(4)]
    wants = [pg.max_pool2d_with_indices_backward(g, x, ind, 3, 2, 1, deterministic=True) for g in gos]
    plan = pg.plan_max_pool2d_with_indices_backward(gos[0], x, ind, 3, 2, 1, deterministic=True, num_threads=2)
    avg = pg.plan_avg_pool2d_backward(np.ones((4, 8, 16, 16), np.float32), x, 3, 2, 1, num_threads=2)
    avg_want = pg.avg_pool2d_backward(gos[0], x, 3, 2, 1)
    errors: list[str] = []

    def work(k: int) -> None:
        for _ in range(30):
            if not _same(plan(gos[k], x, ind), wants[k]):
                errors.append(f"max {k}")
            if not _same(avg(gos[0], x), avg_want):
                errors.append(f"avg {k}")

    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []


def test_repr_and_attributes():
    x = _x()
    plan = pg.plan_avg_pool2d(x, 2)
    assert repr(plan) == "<poolgrad.Plan avg_pool2d(x: float32[2, 3, 8, 8])>"
    assert plan.names == ("x",) and not plan.has_out
    assert plan.specs[0].shape == x.shape and plan.specs[0].strides == x.strides


def test_empty_batch_through_a_plan_made_from_specs():
    x = np.empty((0, 3, 8, 8), np.float32)
    y, ind = pg.max_pool2d_with_indices(x, 2)
    plan = pg.plan_max_pool2d_with_indices_backward(pg.ArraySpec(y.shape, y.dtype), pg.ArraySpec(x.shape, x.dtype),
                                                    pg.ArraySpec(ind.shape, ind.dtype), 2)
    assert _same(plan(y, x, ind), pg.max_pool2d_with_indices_backward(y, x, ind, 2))
    fplan = pg.plan_max_pool2d_with_indices(pg.ArraySpec(x.shape, x.dtype), 2)
    assert _same(fplan(x), (y, ind))


@pytest.mark.parametrize("shape", [(2, 16, 8, 8), (1, 3, 40, 37)], ids=["small planes", "big planes"])
def test_one_thread_kernels_give_the_bits_of_the_parallel_loop(shape):
    """With one thread the kernel runners loop over the work items without an OpenMP region; the bits are
    those of the parallel loop at two threads (every operator whose plan replays a kernel call)."""
    x = _x(shape)
    y, ind = pg.max_pool2d_with_indices(x, 3, 2, 1)
    go = RNG.standard_normal(y.shape).astype(np.float32)
    ks, st = [1, 1, 3, 3], [1, 1, 2, 2]
    ty = pg.max_pool(x, ks, st, "SAME", "NCHW")
    tg = RNG.standard_normal(ty.shape).astype(np.float32)
    makers = [
        (lambda n: pg.plan_max_pool2d_with_indices(x, 3, 2, 1, num_threads=n), (x,)),
        (lambda n: pg.plan_max_pool2d_with_indices_backward(go, x, ind, 3, 2, 1, deterministic=True,
                                                            num_threads=n), (go, x, ind)),
        (lambda n: pg.plan_avg_pool2d(x, 3, 2, 1, num_threads=n), (x,)),
        (lambda n: pg.plan_avg_pool2d_backward(go, x, 3, 2, 1, num_threads=n), (go, x)),
        (lambda n: pg.plan_max_pool(x, ks, st, "SAME", "NCHW", num_threads=n), (x,)),
        (lambda n: pg.plan_max_pool_grad(x, ty, tg, ks, st, "SAME", "NCHW", num_threads=n), (x, ty, tg)),
    ]
    for make, args in makers:
        one, two = make(1), make(2)
        for _ in range(2):          # the first call records the launch, the second replays it
            a, b = one(*args), two(*args)
            assert _same(a, b)
        assert one._launch_record is not None and one._launch_record.kernel is not None


def test_kernel_calls_from_several_python_threads_never_share_a_buffer():
    """A replayed kernel call takes one of its record's spare per-call blocks (or a new one) atomically: four
    threads running one TensorFlow gradient plan (its rings are per-call scratch) get the single-thread bits."""
    x = _x((2, 16, 8, 8))
    ks, st = [1, 1, 3, 3], [1, 1, 1, 1]
    y = pg.max_pool(x, ks, st, "SAME", "NCHW")
    gs = [RNG.standard_normal(y.shape).astype(np.float32) for _ in range(4)]
    wants = [pg.max_pool_grad(x, y, g, ks, st, "SAME", "NCHW") for g in gs]
    plan = pg.plan_max_pool_grad(x, y, gs[0], ks, st, "SAME", "NCHW", num_threads=1)
    plan(x, y, gs[0])
    plan(x, y, gs[0])               # the first call records the launch, the second captures the kernel call
    launch = plan._launch_record
    assert launch.kernel is not None and launch.kernel.temps == (0, 0)        # rings, row offsets
    assert launch.kernel_ns(x, y, gs[0], np.empty_like(x), reps=18) > 0
    errors: list[int] = []

    def work(k: int) -> None:
        for _ in range(50):
            if not _same(plan(x, y, gs[k]), wants[k]):
                errors.append(k)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_kernel_call_captured_on_one_array_passed_for_several(layout):
    """A plan first called with one array for several inputs (``max_pooling_grad(x, x, x)``, TF's gradient with
    the forward output passed as its own gradient) still captures its kernel call - recorded on stand-ins, as a
    pointer into shared memory could mean either input - and the replay is right on that call's arrays and on
    separate ones afterwards."""
    x = _x((2, 16, 8, 8), layout=layout)
    plan = pg.plan_max_pooling_grad(x, x, x, num_threads=1)
    for _ in range(2):              # the first call records the launch, the second captures the kernel call
        assert _same(plan(x, x, x), pg.max_pooling_grad(x, x, x))
    assert plan._launch_record is not None and plan._launch_record.kernel is not None
    dy, y = _x((2, 16, 8, 8), layout=layout), np.where(RNG.random(x.shape) < 0.5, x, x + 1).astype(x.dtype)
    assert _same(plan(dy, x, y), pg.max_pooling_grad(dy, x, y))
    assert _same(plan(x, x, x), pg.max_pooling_grad(x, x, x))
    x4 = _x((2, 16, 8, 8))
    ks = st = [1, 1, 2, 2]
    ty = pg.max_pool(x4, ks, st, "VALID", "NCHW")
    tplan = pg.plan_max_pool_grad(x4, ty, ty, ks, st, "VALID", "NCHW", num_threads=1)
    for _ in range(2):
        assert _same(tplan(x4, ty, ty), pg.max_pool_grad(x4, ty, ty, ks, st, "VALID", "NCHW"))
    assert tplan._launch_record.kernel is not None
    g = RNG.standard_normal(ty.shape).astype(np.float32)
    assert _same(tplan(x4, ty, g), pg.max_pool_grad(x4, ty, g, ks, st, "VALID", "NCHW"))
