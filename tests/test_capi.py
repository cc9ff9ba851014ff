"""The C API (poolgrad/include/poolgrad.h, poolgrad/_capi.pyx): every operator through the function table
(called with ctypes, which releases the GIL around each call), statuses and messages for misuse, and the two
example extensions built in a temporary folder and run from several threads without the GIL."""
from __future__ import annotations

import contextlib
import ctypes
import os
import shutil
import subprocess
import sys
import sysconfig
import threading
from typing import Iterator

import numpy as np
import pytest

import poolgrad as pg
from poolgrad import _capi
from poolgrad.dtypes import bfloat16

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OK, NULLPTR, INVALID = 0, 161001, 161002
CODES = {np.dtype(np.float32): 1, np.dtype(np.float64): 2, np.dtype(np.float16): 3, np.dtype(bfloat16): 4,
         np.dtype(np.int32): 5, np.dtype(np.int64): 6}


class Tensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("dtype", ctypes.c_int32), ("ndim", ctypes.c_int32),
                ("shape", ctypes.c_int64 * 8), ("strides", ctypes.c_int64 * 8)]


class Params(ctypes.Structure):
    _fields_ = [("kernel", ctypes.c_int64 * 2), ("stride", ctypes.c_int64 * 2), ("padding", ctypes.c_int64 * 2),
                ("dilation", ctypes.c_int64 * 2), ("ceil_mode", ctypes.c_int32),
                ("count_include_pad", ctypes.c_int32), ("divisor_override", ctypes.c_int64),
                ("cube_math_type", ctypes.c_int32), ("layout", ctypes.c_int32), ("tf_padding", ctypes.c_int32),
                ("check_orig_output", ctypes.c_int32), ("deterministic", ctypes.c_int32),
                ("num_threads", ctypes.c_int32)]


CREATE = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(ctypes.c_void_p), ctypes.c_int32, ctypes.POINTER(Tensor),
                          ctypes.c_int32, ctypes.POINTER(Params))
EXECUTE = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.POINTER(Tensor), ctypes.c_int32)
DESTROY = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
LAST_ERROR = ctypes.CFUNCTYPE(ctypes.c_char_p)
COUNT = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_int32, ctypes.POINTER(ctypes.c_int32),
                         ctypes.POINTER(ctypes.c_int32))


class Table(ctypes.Structure):
    _fields_ = [("abi_version", ctypes.c_uint32), ("table_size", ctypes.c_uint32), ("plan_create", CREATE),
                ("plan_execute", EXECUTE), ("plan_destroy", DESTROY), ("last_error", LAST_ERROR),
                ("op_tensor_count", COUNT)]


def _table() -> Table:
    get = ctypes.pythonapi.PyCapsule_GetPointer
    get.restype, get.argtypes = ctypes.c_void_p, [ctypes.py_object, ctypes.c_char_p]
    return Table.from_address(get(_capi._C_API, b"poolgrad._capi._C_API"))


API = _table()


def tensor(a: np.ndarray | None, spec: np.ndarray | None = None) -> Tensor:
    """The descriptor of ``a`` (or of ``spec``'s signature with a NULL pointer when ``a`` is None)."""
    ref = a if a is not None else spec
    t = Tensor()
    t.data = None if a is None else a.__array_interface__["data"][0]
    t.dtype = CODES[ref.dtype]
    t.ndim = ref.ndim
    for d in range(ref.ndim):
        t.shape[d] = ref.shape[d]
        t.strides[d] = ref.strides[d] // ref.itemsize
    return t


def params(**kw) -> Params:
    p = Params()
    p.dilation[:] = [1, 1]
    p.count_include_pad, p.deterministic = 1, -1
    for k, v in kw.items():
        if isinstance(v, tuple):
            getattr(p, k)[:] = list(v)
        else:
            setattr(p, k, v)
    return p


def error() -> str:
    return API.last_error().decode()


def create(op: int, arrays: list, p: Params, with_data: bool = False) -> tuple[int, ctypes.c_void_p]:
    ts = (Tensor * len(arrays))(*[tensor(a if with_data else None, a) for a in arrays])
    plan = ctypes.c_void_p()
    return API.plan_create(ctypes.byref(plan), op, ts, len(arrays), ctypes.byref(p)), plan


def execute(plan: ctypes.c_void_p, arrays: list) -> int:
    ts = (Tensor * len(arrays))(*[tensor(a) for a in arrays])
    return API.plan_execute(plan, ts, len(arrays))


def run(op: int, inputs: list, outputs: list, p: Params) -> None:
    status, plan = create(op, inputs + outputs, p)
    assert status == OK, error()
    try:
        assert execute(plan, inputs + outputs) == OK, error()
        assert error() == ""
    finally:
        API.plan_destroy(plan)


def _same(a: np.ndarray, b: np.ndarray) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


@contextlib.contextmanager
def forward_plan_from_threads(op: int, pr, xs: list, wants: list) -> Iterator[tuple]:
    """A C plan of max forward ``op`` (parameters ``pr``) made for ``xs[0]``, executed 10 times from each of 4
    threads at once (thread j on ``xs[j]``, into its own outputs): every status OK, no execute took the GIL, the
    bits of ``wants`` (the Python API's results).  Yields (plan, the GIL-execute count before), then destroys
    the plan."""
    outs = [(np.full_like(w[0], np.nan), np.full_like(w[1], -1)) for w in wants]
    status, plan = create(op, [xs[0], *outs[0]], pr)
    assert status == OK, error()
    statuses: list[int] = []

    def work(j: int) -> None:
        for _ in range(10):
            statuses.append(execute(plan, [xs[j], *outs[j]]))

    try:
        before = _capi.gil_executes()
        _in_threads(work, 4)
        assert statuses == [OK] * 40 and _capi.gil_executes() == before
        assert all(_same(o[0], w[0]) and _same(o[1], w[1]) for o, w in zip(outs, wants))
        yield plan, before
    finally:
        API.plan_destroy(plan)


def _in_threads(work, n: int) -> None:
    """Run ``work(k)`` for k in range(n) in n Python threads at once and wait for all of them."""
    threads = [threading.Thread(target=work, args=(k,)) for k in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def _pair_without_the_gil(bplan, bargs: list, wants: list, fplan, fargs: list, fwants: list) -> int:
    """Four threads run a backward and a forward plan ten times each, thread j on ``bargs[j]`` / ``fargs[j]``
    (outputs last); every execute succeeds without the GIL and leaves the Python API's result (``wants[j]``,
    ``fwants[j]``) in its output.  Returns the GIL-execute count from before."""
    statuses: list[int] = []

    def work(j: int) -> None:
        for _ in range(10):
            statuses.append(execute(bplan, bargs[j]))
            statuses.append(execute(fplan, fargs[j]))

    before = _capi.gil_executes()
    _in_threads(work, 4)
    assert statuses == [OK] * 80 and _capi.gil_executes() == before
    assert all(_same(a[-1], w) for a, w in zip(bargs, wants))
    assert all(_same(a[-1], w) for a, w in zip(fargs, fwants))
    return before


def test_table_header():
    assert API.abi_version == _capi.ABI_VERSION == 1
    assert API.table_size == ctypes.sizeof(Table)
    nin, nout = ctypes.c_int32(), ctypes.c_int32()
    counts = []
    for op in range(1, 10):
        assert API.op_tensor_count(op, ctypes.byref(nin), ctypes.byref(nout)) == OK
        counts.append((nin.value, nout.value))
    assert counts == [(1, 2), (3, 1), (1, 2), (3, 1), (1, 1), (2, 1), (1, 1), (3, 1), (3, 1)]
    assert API.op_tensor_count(0, ctypes.byref(nin), ctypes.byref(nout)) == INVALID
    assert API.op_tensor_count(1, None, ctypes.byref(nout)) == NULLPTR
    header = open(os.path.join(pg.get_include(), "poolgrad.h")).read()
    assert "#define POOLGRAD_ABI_VERSION 1\n" in header
    assert os.path.exists(os.path.join(pg.get_include(), "poolgrad_capi.pxd"))


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16, bfloat16], ids=["f32", "f64", "f16", "bf16"])
@pytest.mark.parametrize("layout", [0, 1], ids=["NCHW", "NHWC"])
def test_every_operator_matches_the_python_api(dtype, layout):
    rng = np.random.default_rng(3)
    lay = ("NCHW", "NHWC")[layout]
    x = rng.standard_normal((2, 3, 9, 7)).astype(dtype)
    if layout:
        x = np.ascontiguousarray(x.transpose(0, 2, 3, 1))
    # 1, 2: max pooling with indices
    y, ind = pg.max_pool2d_with_indices(x, 3, 2, 1, layout=lay)
    cy, cind = np.empty_like(y), np.empty_like(ind)
    run(1, [x], [cy, cind], params(kernel=(3, 3), stride=(2, 2), padding=(1, 1), layout=layout))
    assert _same(cy, y) and _same(cind, ind)
    go = rng.standard_normal(y.shape).astype(dtype)
    gx = np.full_like(x, np.nan)
    run(2, [go, x, ind], [gx], params(kernel=(3, 3), stride=(2, 2), padding=(1, 1), layout=layout))
    assert _same(gx, pg.max_pool2d_with_indices_backward(go, x, ind, 3, 2, 1, layout=lay))
    # 3, 4: adaptive (output size from y's shape), int32 indices
    ay, aind = pg.adaptive_max_pool2d(x, (4, 5), layout=lay, index_dtype=np.int32)
    cy, cind = np.empty_like(ay), np.empty_like(aind)
    run(3, [x], [cy, cind], params(layout=layout))
    assert _same(cy, ay) and _same(cind, aind)
    ago = rng.standard_normal(ay.shape).astype(dtype)
    run(4, [ago, x, aind], [gx], params(layout=layout))
    assert _same(gx, pg.adaptive_max_pool2d_backward(ago, x, aind, layout=lay))
    # 5, 6: average pooling (divisor_override, count_include_pad=False, ceil_mode)
    av = pg.avg_pool2d(x, 3, 2, 1, True, False, layout=lay)
    cav = np.empty_like(av)
    p = params(kernel=(3, 3), stride=(2, 2), padding=(1, 1), ceil_mode=1, count_include_pad=0, layout=layout)
    run(5, [x], [cav], p)
    assert _same(cav, av)
    avgo = rng.standard_normal(av.shape).astype(dtype)
    run(6, [avgo, x], [gx], p)
    assert _same(gx, pg.avg_pool2d_backward(avgo, x, 3, 2, 1, True, False, layout=lay))
    p = params(kernel=(2, 3), divisor_override=5, layout=layout)
    ref = pg.avg_pool2d_backward(rng.standard_normal(pg.avg_pool2d(x, (2, 3), divisor_override=5,
                                                                   layout=lay).shape).astype(dtype),
                                 x, (2, 3), divisor_override=5, layout=lay)
    # 7, 8: TensorFlow max pooling, SAME padding
    ks = [1, 1, 3, 3] if layout == 0 else [1, 3, 3, 1]
    st = [1, 1, 2, 2] if layout == 0 else [1, 2, 2, 1]
    ty = pg.max_pool(x, ks, st, "SAME", lay)
    cty = np.empty_like(ty)
    p = params(kernel=(3, 3), stride=(2, 2), tf_padding=1, layout=layout, check_orig_output=1)
    run(7, [x], [cty], p)
    assert _same(cty, ty)
    tg = rng.standard_normal(ty.shape).astype(dtype)
    run(8, [x, ty, tg], [gx], p)
    assert _same(gx, pg.max_pool_grad(x, ty, tg, ks, st, "SAME", lay))
    # 9: element-wise, 3-D and a non-contiguous dy
    dy = rng.standard_normal((5, 4, 6)).astype(dtype)[:, ::2]
    ex = rng.standard_normal((5, 2, 6)).astype(dtype)
    ey = np.where(rng.random(ex.shape) < 0.5, ex, 0).astype(dtype)
    dx = np.empty_like(ex)
    run(9, [dy, ex, ey], [dx], params())
    assert _same(dx, pg.max_pooling_grad(dy, ex, ey))
    assert ref.shape == x.shape


def test_statuses_and_messages():
    x = np.zeros((1, 2, 6, 6), np.float32)
    y, ind = pg.max_pool2d_with_indices(x, 2)
    go, gx = np.ones_like(y), np.empty_like(x)
    p = params(kernel=(2, 2))
    ts = (Tensor * 4)(*[tensor(None, a) for a in (go, x, ind, gx)])
    plan = ctypes.c_void_p()
    assert API.plan_create(None, 2, ts, 4, ctypes.byref(p)) == NULLPTR
    assert error() == "poolgrad_plan_create: plan is NULL"
    assert API.plan_create(ctypes.byref(plan), 2, None, 4, ctypes.byref(p)) == NULLPTR
    assert API.plan_create(ctypes.byref(plan), 2, ts, 4, None) == NULLPTR
    assert API.plan_create(ctypes.byref(plan), 10, ts, 4, ctypes.byref(p)) == INVALID
    assert "unknown operator 10" in error()
    bad = (Tensor * 4)(*[tensor(None, a) for a in (go, x, ind, gx)])
    bad[1].dtype = 9
    assert API.plan_create(ctypes.byref(plan), 2, bad, 4, ctypes.byref(p)) == INVALID
    assert error() == ("poolgrad_plan_create: tensor 1: unknown dtype code 9 (expected 1..6, "
                       "POOLGRAD_FLOAT32..INT64)")
    bad[1].dtype, bad[1].ndim = 1, 9
    assert API.plan_create(ctypes.byref(plan), 2, bad, 4, ctypes.byref(p)) == INVALID
    bad[1].ndim, bad[1].strides[1] = 4, 1 << 62     # axis 1 has 2 elements: 2**62 elements apart
    assert API.plan_create(ctypes.byref(plan), 2, bad, 4, ctypes.byref(p)) == INVALID
    assert "spans more memory than can exist" in error()
    bad[1].strides[1], bad[1].shape[2] = 36, -1
    assert API.plan_create(ctypes.byref(plan), 2, bad, 4, ctypes.byref(p)) == INVALID
    # the Python API's own validation, message and code
    assert create(2, [go, x, ind.astype(np.float32), gx], p)[0] == INVALID
    assert error() == ("poolgrad_plan_create(max_pool2d_with_indices_backward): indices: expected dtype int32 or "
                       "int64, got float32")
    assert create(2, [go, x, ind, gx], params(kernel=(2, 2), layout=7))[0] == INVALID
    assert "params.layout" in error()
    assert create(2, [go, x, ind, gx], params(kernel=(2, 2), deterministic=5))[0] == INVALID
    assert "deterministic" in error()
    assert create(7, [x, y], params(kernel=(2, 2), tf_padding=3))[0] == INVALID
    assert "params.tf_padding" in error()
    assert create(1, [x, y[..., :2], ind], p)[0] == INVALID       # forward output of the wrong shape
    assert error().startswith("poolgrad_plan_create(max_pool2d_with_indices): y: expected shape (1, 2, 3, 3)")

    status, plan = create(2, [go, x, ind, gx], p)
    assert status == OK
    try:
        good = (Tensor * 4)(*[tensor(a) for a in (go, x, ind, gx)])
        assert API.plan_execute(None, good, 4) == NULLPTR
        assert API.plan_execute(plan, None, 4) == NULLPTR
        assert API.plan_execute(plan, good, 3) == INVALID
        for i, field, value in ((0, "data", None), (3, "data", None)):
            t = (Tensor * 4)(*[tensor(a) for a in (go, x, ind, gx)])
            setattr(t[i], field, value)
            assert API.plan_execute(plan, t, 4) == NULLPTR
            assert error() == f"poolgrad_plan_execute: tensor {i}: data is NULL"
        t = (Tensor * 4)(*[tensor(a) for a in (go, x, ind, gx)])
        t[2].strides[3] = -1
        assert API.plan_execute(plan, t, 4) == INVALID
        assert error() == ("poolgrad_plan_execute: tensor 2: the plan was made for strides[3] = 1 elements, "
                           "got -1")
        t[2].strides[3], t[3].shape[1] = 1, 3
        assert API.plan_execute(plan, t, 4) == INVALID
        t[3].shape[1], t[0].dtype = 2, 2
        assert API.plan_execute(plan, t, 4) == INVALID
        assert "dtype" in error()
        bad_ind = ind.copy()
        bad_ind[0, 1, 2, 2] = -1
        assert execute(plan, [go, x, bad_ind, gx]) == INVALID
        assert "got -1 at position (n=0, c=1, oh=2, ow=2)" in error()
        assert execute(plan, [go, x, ind, x]) == INVALID             # out overlaps an input
        assert "out: must not share memory with x" in error()
        assert execute(plan, [go, x, ind, gx]) == OK and error() == ""
        misaligned = np.ndarray(x.shape, x.dtype, np.zeros(x.nbytes + 4, np.uint8), offset=2)
        assert execute(plan, [go, misaligned, ind, gx]) == INVALID
        assert "aligned" in error()
    finally:
        API.plan_destroy(plan)
    API.plan_destroy(None)      # a no-op


def test_zero_batch_and_null_data():
    x = np.zeros((0, 2, 4, 4), np.float32)
    y, ind = pg.max_pool2d_with_indices(x, 2)
    gx = np.empty_like(x)
    status, plan = create(2, [y, x, ind, gx], params(kernel=(2, 2)))
    assert status == OK, error()
    try:
        ts = (Tensor * 4)(*[tensor(None, a) for a in (y, x, ind, gx)])
        assert API.plan_execute(plan, ts, 4) == OK, error()
    finally:
        API.plan_destroy(plan)


def _build(src: str, dest, env_extra: dict | None = None) -> None:
    shutil.copytree(os.path.join(ROOT, "examples", src), dest)
    env = dict(os.environ, PYTHONPATH=ROOT, **(env_extra or {}))
    res = subprocess.run([sys.executable, "setup.py", "-q", "build_ext", "--inplace"], cwd=dest, env=env,
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]


CHECK = """
import numpy as np, poolgrad as pg, {mod} as m
rng = np.random.default_rng(5)
x = rng.standard_normal((2, 3, 12, 10)).astype(np.float32)
y, ind = pg.max_pool2d_with_indices(x, 3, 2)
go = rng.standard_normal(y.shape).astype(np.float32)
out = np.full((4,) + x.shape, np.nan, np.float32)
m.backward(go, x, ind, out, 3, 2, {args})
ref = pg.max_pool2d_with_indices_backward(go, x, ind, 3, 2)
assert all(np.array_equal(o, ref) for o in out), "mismatch"
print("ok", pg.__file__)
"""


def _run(dest, code: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([ROOT, str(dest)]))
    return subprocess.run([sys.executable, "-c", code], cwd=dest, env=env, capture_output=True, text=True,
                          timeout=300)


def _needs_compiler():
    if shutil.which(sysconfig.get_config_var("CC").split()[0] if sysconfig.get_config_var("CC") else "cc") is None:
        pytest.fail("no C compiler: the C API tests build the examples")


def test_c_example_from_several_threads(tmp_path):
    _needs_compiler()
    _build("c_ext", tmp_path / "c")
    res = _run(tmp_path / "c", CHECK.format(mod="pg_c_example", args="4, 25"))
    assert res.returncode == 0 and res.stdout.startswith("ok " + ROOT), res.stdout + res.stderr
    res = _run(tmp_path / "c", "import pg_c_example as m; print(m.error_statuses())")
    assert res.returncode == 0, res.stderr
    statuses = [s for s, _ in eval(res.stdout)]
    assert statuses == [NULLPTR, INVALID, INVALID, INVALID, OK, NULLPTR, INVALID, NULLPTR, INVALID, OK]
    res = _run(tmp_path / "c", TF_CHECK)
    assert res.returncode == 0 and res.stdout.strip() == "ok 0", res.stdout + res.stderr


# TensorFlow's MaxPoolGrad through the C example (op 8): 4 POSIX threads, none taking the GIL in execute.
TF_CHECK = """
import numpy as np, poolgrad as pg, pg_c_example as m
from poolgrad import _capi
rng = np.random.default_rng(6)
x = rng.standard_normal((2, 16, 8, 8)).astype(np.float32)
ks = [1, 1, 3, 3]
st = [1, 1, 2, 2]
y = pg.max_pool(x, ks, st, "VALID", "NCHW")
g = rng.standard_normal(y.shape).astype(np.float32)
out = np.full((4,) + x.shape, np.nan, np.float32)
before = _capi.gil_executes()
m.backward(x, y, g, out, 3, 2, 4, 25, 8)
ref = pg.max_pool_grad(x, y, g, ks, st, "VALID", "NCHW")
assert all(np.array_equal(o, ref) for o in out), "mismatch"
print("ok", _capi.gil_executes() - before)
"""


def test_cython_example_in_a_nogil_prange(tmp_path):
    _needs_compiler()
    _build("cython_ext", tmp_path / "cy")
    res = _run(tmp_path / "cy", CHECK.format(mod="pg_cy_example", args="25"))
    assert res.returncode == 0 and res.stdout.startswith("ok " + ROOT), res.stdout + res.stderr
    res = _run(tmp_path / "cy", TF_CHECK.replace("pg_c_example", "pg_cy_example")
               .replace("m.backward(x, y, g, out, 3, 2, 4, 25, 8)", "m.tf_backward(x, y, g, out, 3, 2, 25)"))
    assert res.returncode == 0 and res.stdout.strip() == "ok 0", res.stdout + res.stderr


def test_header_newer_than_the_library_fails_cleanly_at_import(tmp_path):
    _needs_compiler()
    _build("c_ext", tmp_path / "c", {"CFLAGS": "-DPOOLGRAD_REQUIRED_ABI_VERSION=2"})
    res = _run(tmp_path / "c", "import pg_c_example")
    assert res.returncode == 1
    assert ("ImportError: poolgrad C API: this extension was built against ABI version 2, but the installed "
            "poolgrad provides version 1") in res.stderr


def test_three_dimensional_inputs_and_adaptive_output_rank():
    rng = np.random.default_rng(4)
    x = rng.standard_normal((3, 7, 6)).astype(np.float32)       # (C, H, W), no batch axis
    ay, aind = pg.adaptive_max_pool2d(x, (2, 4))
    cy, cind = np.empty_like(ay), np.empty_like(aind)
    run(3, [x], [cy, cind], params())
    assert _same(cy, ay) and _same(cind, aind)
    xh = np.ascontiguousarray(x.transpose(1, 2, 0))              # (H, W, C)
    ay, aind = pg.adaptive_max_pool2d(xh, (2, 4), layout="NHWC")
    cy, cind = np.empty_like(ay), np.empty_like(aind)
    run(3, [xh], [cy, cind], params(layout=1))
    assert _same(cy, ay) and _same(cind, aind)
    assert create(3, [x, cy[0], cind[0]], params())[0] == INVALID
    assert error() == ("poolgrad_plan_create(adaptive_max_pool2d): y: expected a 3-D or 4-D array, got 2-D "
                       "with shape (4, 3)")


def test_in_place_max_pooling_grad_and_partial_overlap():
    rng = np.random.default_rng(7)
    dy = rng.standard_normal((4, 5)).astype(np.float32)
    x = rng.standard_normal((4, 5)).astype(np.float32)
    y = np.where(rng.random(x.shape) < 0.5, x, 0).astype(np.float32)
    want = pg.max_pooling_grad(dy, x, y)
    status, plan = create(9, [dy, x, y, np.empty_like(dy)], params())
    assert status == OK
    try:
        assert execute(plan, [dy, x, y, dy]) == OK, error()       # out is dy exactly: in place, as in Python
        assert _same(dy, want)
        big = np.zeros((5, 5), np.float32)
        assert execute(plan, [big[:4], x, y, big[1:]]) == INVALID  # any other overlap is refused
        assert "out: must not share memory with dy" in error()
    finally:
        API.plan_destroy(plan)


def test_max_pooling_grad_executes_without_the_gil():
    """max_pooling_grad's plan holds its kernel call captured below the dispatcher: executes run it without
    taking the GIL (counted by _capi.gil_executes), from several threads at once, with the Python API's bits;
    an out that meets an input takes the checked path (in place allowed, other overlaps refused)."""
    rng = np.random.default_rng(8)
    x = rng.standard_normal((2, 3, 9, 7)).astype(np.float32)
    y = np.where(rng.random(x.shape) < 0.5, x, 0).astype(np.float32)
    dys = [rng.standard_normal(x.shape).astype(np.float32) for _ in range(4)]
    wants = [pg.max_pooling_grad(dy, x, y) for dy in dys]
    outs = [np.empty_like(x) for _ in dys]
    status, plan = create(9, [dys[0], x, y, outs[0]], params())
    assert status == OK, error()
    statuses: list[int] = []

    def work(k: int) -> None:
        for _ in range(50):
            statuses.append(execute(plan, [dys[k], x, y, outs[k]]))

    try:
        before = _capi.gil_executes()
        _in_threads(work, 4)
        assert statuses == [OK] * 200 and _capi.gil_executes() == before
        assert all(_same(o, w) for o, w in zip(outs, wants))
        inplace = dys[0].copy()
        assert execute(plan, [inplace, x, y, inplace]) == OK and _same(inplace, wants[0])
        assert execute(plan, [dys[1], x, y, x]) == INVALID and "out: must not share memory with x" in error()
        misaligned = np.ndarray(x.shape, x.dtype, np.zeros(x.nbytes + 4, np.uint8), offset=2)
        assert execute(plan, [dys[1], misaligned, y, outs[1]]) == INVALID
        assert "x: the plan was made for an aligned array, got a misaligned one" in error()
        assert _capi.gil_executes() == before + 3
    finally:
        API.plan_destroy(plan)


# TensorFlow max pooling configurations, one per kernel path its plans capture below the dispatcher: (NCHW shape,
# data format (1: NHWC), ksize, strides, padding, threads, the path).
TF_PASSES = [
    ((2, 16, 8, 8), 0, 2, 2, "VALID", 1, "planes"),     # groups of small NCHW planes as channels-last tiles
    ((1, 3, 40, 37), 0, 3, 2, "SAME", 2, "plane"),      # big NCHW planes: the plane rows, bands over 2 threads
    ((2, 16, 12, 12), 1, 3, 2, "SAME", 2, "channel"),   # channels-last, lanes over C
]


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16, bfloat16])
@pytest.mark.parametrize("case", TF_PASSES, ids=lambda c: c[-1])
def test_tf_max_pool_executes_without_the_gil(case, dtype):
    """TensorFlow's max_pool and max_pool_grad plans hold their kernel calls captured below the dispatcher:
    executes run them without the GIL (each with per-call rings and scratch of its own), from several threads
    at once, with the Python API's bits; an out that meets an input still takes the checked path and its
    message."""
    shape, layout, k, s, pad, nt, _ = case
    fmt = ("NCHW", "NHWC")[layout]
    ks, st = ([1, 1, k, k], [1, 1, s, s]) if layout == 0 else ([1, k, k, 1], [1, s, s, 1])
    rng = np.random.default_rng(25)
    x = rng.standard_normal(shape).astype(dtype)
    if layout:
        x = np.ascontiguousarray(x.transpose(0, 2, 3, 1))
    x.flat[::7] = x.flat[1::7]                              # ties: the first maximum wins
    y = pg.max_pool(x, ks, st, pad, fmt, num_threads=nt)
    gs = [rng.standard_normal(y.shape).astype(dtype) for _ in range(4)]
    wants = [pg.max_pool_grad(x, y, g, ks, st, pad, fmt, num_threads=nt) for g in gs]
    xs = [rng.standard_normal(x.shape).astype(dtype) for _ in range(4)]
    fwants = [pg.max_pool(v, ks, st, pad, fmt, num_threads=nt) for v in xs]
    outs = [np.full_like(x, np.nan) for _ in gs]
    fouts = [np.full_like(y, np.nan) for _ in xs]
    pr = params(kernel=(k, k), stride=(s, s), tf_padding=int(pad == "SAME"), layout=layout, num_threads=nt)
    status, bplan = create(8, [x, y, gs[0], outs[0]], pr)
    assert status == OK, error()
    status, fplan = create(7, [xs[0], fouts[0]], pr)
    assert status == OK, error()
    try:
        before = _pair_without_the_gil(bplan, [[x, y, gs[j], outs[j]] for j in range(4)], wants,
                                       fplan, [[xs[j], fouts[j]] for j in range(4)], fwants)
        assert execute(bplan, [x, y, gs[0], x]) == INVALID and "out: must not share memory with x1" in error()
        assert _capi.gil_executes() == before + 1
    finally:
        API.plan_destroy(bplan)
        API.plan_destroy(fplan)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16, bfloat16])
@pytest.mark.parametrize("layout", [0, 1], ids=["NCHW", "NHWC"])
def test_tf_max_pool_grad_checks_x2_without_the_gil(dtype, layout):
    """MAX_POOL_GRAD with check_orig_output: execute runs the captured forward, compares x2 with it (NaN equals
    NaN, 16-bit values widened) and runs the captured gradient, all without the GIL, from several threads at
    once; an x2 that differs anywhere takes the checked plan: the Python API's error, word for word, and out
    left as it was."""
    fmt = ("NCHW", "NHWC")[layout]
    rng = np.random.default_rng(9)
    x = rng.standard_normal((2, 16, 7, 9)).astype(dtype)
    x[0, 1, 2, 3] = np.nan
    if layout:
        x = np.ascontiguousarray(x.transpose(0, 2, 3, 1))
    ks, st = ([1, 1, 3, 3], [1, 1, 2, 2]) if layout == 0 else ([1, 3, 3, 1], [1, 2, 2, 1])
    y = pg.max_pool(x, ks, st, "SAME", fmt)
    assert np.isnan(y.astype(np.float32)).any()
    gs = [rng.standard_normal(y.shape).astype(dtype) for _ in range(4)]
    wants = [pg.max_pool_grad(x, y, g, ks, st, "SAME", fmt) for g in gs]
    outs = [np.full_like(x, np.nan) for _ in gs]
    pr = params(kernel=(3, 3), stride=(2, 2), tf_padding=1, layout=layout, check_orig_output=1, num_threads=1)
    status, plan = create(8, [x, y, gs[0], outs[0]], pr)
    assert status == OK, error()
    statuses: list[int] = []

    def work(j: int) -> None:
        for _ in range(10):
            statuses.append(execute(plan, [x, y, gs[j], outs[j]]))

    try:
        before = _capi.gil_executes()
        _in_threads(work, 4)
        assert statuses == [OK] * 40 and _capi.gil_executes() == before
        assert all(_same(o, w) for o, w in zip(outs, wants))
        wrong = y.copy()
        wrong.flat[wrong.size - 3] = 7
        with pytest.raises(pg.ParamInvalidError) as exc:
            pg.max_pool_grad(x, wrong, gs[0], ks, st, "SAME", fmt, check_orig_output=True)
        kept = outs[0].copy()
        assert execute(plan, [x, wrong, gs[0], outs[0]]) == INVALID and str(exc.value) in error()
        assert _same(outs[0], kept)
        assert _capi.gil_executes() == before + 1
    finally:
        API.plan_destroy(plan)


@pytest.mark.parametrize("dtype", [np.float32, np.float16, bfloat16])
@pytest.mark.parametrize("window", [(2, 2, "VALID"), (3, 1, "SAME"), (3, 2, "SAME")])
def test_tf_max_pool_grad_few_channels_executes_one_kernel_without_the_gil(dtype, window):
    """Channels-last inputs with few channels: the Python API composes the gradient (argmax forward, then the
    scatter: two kernel calls), a C plan runs the fused kernel instead (one call, replayed without the GIL);
    the bits are the same, with overlapping windows too (sums of several hits per cell)."""
    k, s, pad = window
    rng = np.random.default_rng(9)
    xl = np.ascontiguousarray(rng.standard_normal((2, 3, 9, 8)).astype(dtype).transpose(0, 2, 3, 1))
    xl[0, 1:3, 2:4, 1] = 1.5                      # ties: the first maximum in window order wins on both paths
    ksl, stl = [1, k, k, 1], [1, s, s, 1]
    yl = pg.max_pool(xl, ksl, stl, pad, "NHWC")
    gls = [rng.standard_normal(yl.shape).astype(dtype) for _ in range(4)]
    wants = [pg.max_pool_grad(xl, yl, g, ksl, stl, pad, "NHWC") for g in gls]
    outs = [np.empty_like(xl) for _ in gls]
    status, plan = create(8, [xl, yl, gls[0], outs[0]], params(kernel=(k, k), stride=(s, s), layout=1,
                                                                tf_padding=1 if pad == "SAME" else 0))
    assert status == OK, error()
    try:
        before = _capi.gil_executes()
        statuses: list[int] = []

        def work(i: int) -> None:
            for _ in range(5):
                statuses.append(execute(plan, [xl, yl, gls[i], outs[i]]))
        _in_threads(work, 4)
        assert statuses == [OK] * 20 and _capi.gil_executes() == before
        assert all(_same(o, w) for o, w in zip(outs, wants))
    finally:
        API.plan_destroy(plan)


def test_one_c_plan_from_several_threads_without_the_gil():
    rng = np.random.default_rng(6)
    x = rng.standard_normal((2, 4, 20, 20)).astype(np.float32)
    y, ind = pg.max_pool2d_with_indices(x, 3, 2, 1)
    gos = [rng.standard_normal(y.shape).astype(np.float32) for _ in range(4)]
    wants = [pg.avg_pool2d_backward(g, x, 3, 2, 1) for g in gos]
    outs = [np.empty_like(x) for _ in gos]
    status, plan = create(6, [gos[0], x, outs[0]], params(kernel=(3, 3), stride=(2, 2), padding=(1, 1)))
    assert status == OK
    statuses: list[int] = []

    def work(k: int) -> None:
        for _ in range(50):
            statuses.append(execute(plan, [gos[k], x, outs[k]]))     # ctypes releases the GIL for the call

    try:
        _in_threads(work, 4)
    finally:
        API.plan_destroy(plan)
    assert statuses == [OK] * 200
    assert all(_same(o, w) for o, w in zip(outs, wants))


def test_the_worked_example_of_the_docs(tmp_path):
    """docs/C_API.md's complete C module, its setup.py and its Python snippet, exactly as printed there."""
    _needs_compiler()
    text = open(os.path.join(ROOT, "docs", "C_API.md"), encoding="utf-8").read()
    text = text[text.index("### Worked example (C)"):text.index("### Worked example (Cython)")]
    blocks = [b.split("\n", 1)[1] for b in text.split("```")[1::2]]
    c_src, setup_py, snippet = blocks
    assert c_src.startswith("/* doc_example.c")
    (tmp_path / "doc_example.c").write_text(c_src)
    (tmp_path / "setup.py").write_text(setup_py)
    env = dict(os.environ, PYTHONPATH=ROOT)
    res = subprocess.run([sys.executable, "setup.py", "-q", "build_ext", "--inplace"], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    res = _run(tmp_path, snippet + "\nprint('ok')\n")
    assert res.returncode == 0 and res.stdout.strip() == "ok", res.stdout + res.stderr


# Max pooling backward configurations, one per fast pass its plan can capture below the dispatcher:
# (NCHW shape, layout (1: NHWC), deterministic, kernel, stride, padding, threads, the pass).
MAX_BACKWARD_PASSES = [
    ((4, 16, 9, 7), 0, 1, 3, 2, 1, 2, "planes"),        # many small NCHW planes: scatter_backward_planes
    ((1, 2, 40, 300), 0, 1, 3, 2, 1, 2, "bands"),       # deterministic bands: scatter_backward
    ((1, 2, 24, 5000), 0, 0, 3, 1, 1, 7, "atomic"),     # nondeterministic thin bands: the atomic scatter
    ((2, 64, 12, 12), 1, 1, 2, 2, 0, 2, "gather"),      # channels-last, little window overlap: gather_backward_cl
]


_TEMP_SCRATCH, _TEMP_FLAGS, _TEMP_HITS = 0, 1, 2      # poolgrad/_launch.pxd


def _scatter_plans() -> dict:
    import gc
    return {id(o): o for o in gc.get_objects() if type(o).__name__ == "ScatterBackwardPlan"}


def _pass_of(plan) -> str:
    scatter = plan.scatter
    if scatter.gather:
        return "gather"
    if scatter.last_pass.__name__ == "scatter_backward_planes":
        return "planes"
    return "atomic" if scatter.use_atomic else "bands"


@pytest.mark.parametrize("case,dtype", [(c, d) for c in MAX_BACKWARD_PASSES for d in (np.float32, bfloat16)
                                        # the atomic scatter is float32 / float64 only (16-bit takes bands)
                                        if not (c[-1] == "atomic" and d is bfloat16)],
                         ids=lambda v: v[-1] if isinstance(v, tuple) else np.dtype(v).name)
def test_max_pool_backward_executes_without_the_gil(case, dtype):
    """Each fast pass of max_pool2d_with_indices_backward runs in execute without the GIL (its per-call
    scratch, flags and hit counters allocated per execute), from several threads at once, with the Python API's
    bits; data that needs the checked path - an index outside its window (legal), an index outside the plane
    (the error) - takes the GIL path, which redoes the call: the same result, the same message."""
    shape, layout, det, k, s, p, nt, fast = case
    lay = ("NCHW", "NHWC")[layout]
    rng = np.random.default_rng(21)
    x = rng.standard_normal(shape).astype(dtype)
    if layout:
        x = np.ascontiguousarray(x.transpose(0, 2, 3, 1))
    _, ind = pg.max_pool2d_with_indices(x, k, s, p, layout=lay)
    gos = [rng.standard_normal(ind.shape).astype(dtype) for _ in range(4)]
    kw = dict(layout=lay, deterministic=bool(det), num_threads=nt)
    wants = [pg.max_pool2d_with_indices_backward(g, x, ind, k, s, p, **kw) for g in gos]
    outs = [np.full_like(x, np.nan) for _ in gos]
    old = _scatter_plans()
    status, plan = create(2, [gos[0], x, ind, outs[0]],
                          params(kernel=(k, k), stride=(s, s), padding=(p, p), layout=layout, deterministic=det,
                                 num_threads=nt))
    assert status == OK, error()
    made = [o for i, o in _scatter_plans().items() if i not in old]
    assert [_pass_of(o) for o in made] == [fast]
    # the per-call buffers each replay allocates: hit counters (gather), else scratch and flags
    assert made[0].launch.kernel.temps == ((_TEMP_HITS,) if fast == "gather" else (_TEMP_SCRATCH, _TEMP_FLAGS))
    statuses: list[int] = []

    def work(j: int) -> None:
        for _ in range(10):
            statuses.append(execute(plan, [gos[j], x, ind, outs[j]]))

    def same(a: np.ndarray, b: np.ndarray) -> bool:
        # the atomic scatter adds in whatever order the threads meet (nondeterministic mode)
        return _same(a, b) if det else a.shape == b.shape and np.allclose(a, b, rtol=1e-6, atol=1e-6)

    try:
        before = _capi.gil_executes()
        _in_threads(work, 4)
        assert statuses == [OK] * 40 and _capi.gil_executes() == before
        assert all(same(o, w) for o, w in zip(outs, wants))
        # an index far outside its window (legal): the kernel reports it, the checked path redoes the call
        H, W = shape[2], shape[3]
        far = ind.copy()
        far.flat[0] = H * W - 1
        got = np.full_like(x, np.nan)
        assert execute(plan, [gos[1], x, far, got]) == OK, error()
        assert same(got, pg.max_pool2d_with_indices_backward(gos[1], x, far, k, s, p, **kw))
        assert _capi.gil_executes() == before + 1
        # an index outside the plane: the Python API's error, word for word
        bad = ind.copy()
        bad.flat[bad.size // 2] = H * W
        with pytest.raises(pg.ParamInvalidError) as exc:
            pg.max_pool2d_with_indices_backward(gos[1], x, bad, k, s, p, **kw)
        assert execute(plan, [gos[1], x, bad, got]) == INVALID
        assert str(exc.value) in error()
        assert _capi.gil_executes() == before + 2
    finally:
        API.plan_destroy(plan)


def test_adaptive_max_pool_backward_executes_without_the_gil():
    """adaptive_max_pool2d_backward shares the scatter plans: clean data runs without the GIL."""
    rng = np.random.default_rng(22)
    x = rng.standard_normal((2, 5, 11, 13)).astype(np.float32)
    _, ind = pg.adaptive_max_pool2d(x, (4, 5), index_dtype=np.int32)
    go = rng.standard_normal(ind.shape).astype(np.float32)
    gx = np.full_like(x, np.nan)
    status, plan = create(4, [go, x, ind, gx], params())
    assert status == OK, error()
    try:
        before = _capi.gil_executes()
        for _ in range(3):
            assert execute(plan, [go, x, ind, gx]) == OK, error()
        assert _capi.gil_executes() == before
        assert _same(gx, pg.adaptive_max_pool2d_backward(go, x, ind))
    finally:
        API.plan_destroy(plan)


# Max pooling forward configurations, one per kernel its plan can capture: (NCHW shape, layout (1: NHWC),
# kernel, stride, padding, adaptive output size or None).
MAX_FORWARD_PASSES = [
    ((2, 3, 9, 7), 0, 3, 2, 1, None),          # PyTorch-style windows, a vectorised row at a time (uniform)
    ((2, 64, 12, 12), 1, 3, 2, 1, None),       # channels-last lanes over C (through the uniform dispatcher)
    ((4, 16, 9, 7), 0, 3, 2, 1, None),         # groups of small planes as channels-last tiles (planes)
    ((2, 5, 11, 13), 0, 0, 0, 0, (4, 5)),      # adaptive windows, NCHW
    ((2, 64, 11, 13), 1, 0, 0, 0, (4, 5)),     # adaptive windows, channels-last (argmax_forward)
    ((2, 3, 11, 13), 1, 0, 0, 0, (4, 5)),      # adaptive windows, few channels: the per-window scan
]


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16, bfloat16])
@pytest.mark.parametrize("case", MAX_FORWARD_PASSES)
def test_max_pool_forward_executes_without_the_gil(case, dtype):
    """max_pool2d_with_indices / adaptive_max_pool2d plans whose outputs are laid out as the plan allocates its
    own write them straight from the captured kernel call, without the GIL, from several threads at once, with
    the Python API's bits; outputs laid out otherwise (or overlapping) take the GIL path, which copies."""
    shape, layout, k, s, p, size = case
    lay = ("NCHW", "NHWC")[layout]
    rng = np.random.default_rng(23)
    xs = [rng.standard_normal(shape).astype(dtype) for _ in range(4)]
    if layout:
        xs = [np.ascontiguousarray(x.transpose(0, 2, 3, 1)) for x in xs]
    if size is None:
        wants = [pg.max_pool2d_with_indices(x, k, s, p, layout=lay) for x in xs]
        op, pr = 1, params(kernel=(k, k), stride=(s, s), padding=(p, p), layout=layout)
    else:
        wants = [pg.adaptive_max_pool2d(x, size, layout=lay) for x in xs]
        op, pr = 3, params(layout=layout)
    with forward_plan_from_threads(op, pr, xs, wants) as (plan, before):
        # the same signature in a memory the plan does not allocate in: y inside a bigger buffer is fine (the
        # strides are what count), indices overlapping y take the GIL path
        y, ind = wants[1]
        buf = np.full(y.size + ind.size * (ind.itemsize // y.itemsize) + 8, np.nan, y.dtype)
        cy = np.ndarray(y.shape, y.dtype, buf, 0, y.strides)
        ci = np.full_like(ind, -1)
        assert execute(plan, [xs[1], cy, ci]) == OK and _same(cy, y) and _same(ci, ind)
        assert _capi.gil_executes() == before
        alias = np.ndarray(ind.shape, ind.dtype, buf, 0)        # shares y's bytes
        assert execute(plan, [xs[1], cy, alias]) == OK
        assert _capi.gil_executes() == before + 1
    # a plan for outputs in another memory order than the plan's own: its executes copy, with the GIL
    fy, fi = np.asfortranarray(np.full_like(wants[2][0], np.nan)), np.asfortranarray(np.full_like(wants[2][1], -1))
    status, plan = create(op, [xs[2], fy, fi], pr)
    assert status == OK, error()
    try:
        before = _capi.gil_executes()
        assert execute(plan, [xs[2], fy, fi]) == OK
        assert _capi.gil_executes() == before + 1
        assert _same(np.ascontiguousarray(fy), wants[2][0]) and _same(np.ascontiguousarray(fi), wants[2][1])
    finally:
        API.plan_destroy(plan)


# Average pooling configurations: (NCHW shape, layout (1: NHWC), kernel, stride, padding, ceil_mode,
# count_include_pad, divisor_override): both layouts, padding with ceil_mode, uneven windows with an override.
AVG_CASES = [
    ((2, 3, 9, 7), 0, (3, 3), 2, 1, 1, 0, 0),
    ((1, 2, 40, 300), 0, (2, 2), 2, 0, 0, 1, 0),
    ((2, 40, 12, 12), 1, (2, 3), 1, 0, 0, 1, 5),
    ((2, 40, 12, 12), 1, (3, 3), 2, 1, 1, 0, 0),
]


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16, bfloat16])
@pytest.mark.parametrize("case", AVG_CASES)
def test_avg_pool_executes_without_the_gil(case, dtype):
    """avg_pool2d_backward and avg_pool2d (outputs laid out as the plan allocates) run their captured kernel
    calls without the GIL, each execute with scratch of its own, from several threads at once, with the Python
    API's bits; an out that meets an input still takes the checked path and its message."""
    shape, layout, k, s, p, ceil, inc, div = case
    lay = ("NCHW", "NHWC")[layout]
    rng = np.random.default_rng(24)
    x = rng.standard_normal(shape).astype(dtype)
    if layout:
        x = np.ascontiguousarray(x.transpose(0, 2, 3, 1))
    kw = dict(layout=lay, divisor_override=div or None)
    pr = params(kernel=k, stride=(s, s), padding=(p, p), ceil_mode=ceil, count_include_pad=inc,
                divisor_override=div, layout=layout)
    y = pg.avg_pool2d(x, k, s, p, bool(ceil), bool(inc), **kw)
    gos = [rng.standard_normal(y.shape).astype(dtype) for _ in range(4)]
    wants = [pg.avg_pool2d_backward(g, x, k, s, p, bool(ceil), bool(inc), **kw) for g in gos]
    xs = [rng.standard_normal(x.shape).astype(dtype) for _ in range(4)]
    fwants = [pg.avg_pool2d(v, k, s, p, bool(ceil), bool(inc), **kw) for v in xs]
    outs = [np.full_like(x, np.nan) for _ in gos]
    fouts = [np.full_like(y, np.nan) for _ in xs]
    status, bplan = create(6, [gos[0], x, outs[0]], pr)
    assert status == OK, error()
    status, fplan = create(5, [xs[0], fouts[0]], pr)
    assert status == OK, error()
    try:
        before = _pair_without_the_gil(bplan, [[gos[j], x, outs[j]] for j in range(4)], wants,
                                       fplan, [[xs[j], fouts[j]] for j in range(4)], fwants)
        assert execute(bplan, [gos[0], x, x]) == INVALID and "out: must not share memory with x" in error()
        assert _capi.gil_executes() == before + 1
    finally:
        API.plan_destroy(bplan)
        API.plan_destroy(fplan)
