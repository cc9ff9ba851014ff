"""Table-driven bad-input matrix over the five backward operators and their forwards.

Every row starts from a *valid* call built by ``catalog.make_case`` and breaks exactly one thing.  Each row asserts
the exception class (``ParamNullptrError`` - also a ``TypeError`` - for None, ``ParamInvalidError`` - also a
``ValueError`` - for everything else), its ``.code`` (161001 / 161002), that the message names the parameter (the
library's convention: it starts with ``"<parameter>:"``), and that every array handed in - inputs, ``out``, array
parameters - is byte-for-byte unchanged (``pgtest.snapshot``/``assert_untouched`` for ordinary arrays, plus the raw
memory span of every array, gaps included, via ``catalog.snapshot_raw``).

Huge inputs cost no memory: ``np.lib.stride_tricks.as_strided`` over a one-element buffer with all-zero strides
gives a read-only array of any shape whose byte size NumPy can represent (NumPy itself refuses shapes whose
``size * itemsize`` exceeds 2**63 - 1, so H*W of a real array is below 2**62; the 64-bit overflow surface that is
left is the parameters, probed with values like 2**62 and 2**63 that the library must refuse before multiplying).
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import pytest

import catalog
import pgtest
import poolgrad as pg
from poolgrad.dtypes import bfloat16

NULL, INV = pg.ParamNullptrError, pg.ParamInvalidError
F32 = np.dtype(np.float32)


def huge(shape, dtype=np.float32, value=0):
    """A read-only array of ``shape`` backed by one element (all strides 0): no memory is allocated."""
    return np.lib.stride_tricks.as_strided(np.full(1, value, dtype), shape=shape, strides=(0,) * len(shape),
                                           writeable=False)


def readonly(a):
    a = np.array(a, copy=True)
    a.flags.writeable = False
    return a


@dataclass
class Bad:
    id: str
    op: str
    name: str                                 # parameter the message must name
    mutate: Callable[[catalog.Case], None]
    exc: type = INV
    make: dict = field(default_factory=dict)  # make_case keyword arguments
    match: str | None = None                  # extra regex the message must contain
    out_may_change: bool = False              # documented: out's contents are unspecified after this error
    xfail: str | None = None                  # known library bug (strict xfail)


CASES: list[Bad] = []


def add(id, op, name, mutate, **kw):
    CASES.append(Bad(f"{op}-{id}", op, name, mutate, **kw))


def setkw(**changes):
    def m(case):
        case.kwargs.update(changes)
    return m


def setarr(name, fn):
    """Replace array ``name`` by ``fn(array, case)``."""
    def m(case):
        case.kwargs[name] = fn(case.kwargs[name], case)
    return m


def chain(*muts):
    def m(case):
        for f in muts:
            f(case)
    return m


def logical_change(name, fn):
    """Replace array ``name`` by ``fn(logical NCHW copy)`` converted back to the case's layout."""
    def m(case):
        a4 = fn(np.array(case.logical(case.kwargs[name])))
        case.kwargs[name] = catalog.to_api(a4, case.layout, case.rank) if a4.ndim == 4 else a4
    return m


def zero_dim(axis):
    """A logical NCHW array with ``axis`` (1=C, 2=H, 3=W) of length 0."""
    def fn(a4):
        shape = list(a4.shape)
        shape[axis] = 0
        return np.zeros(shape, a4.dtype)
    return fn


OPS = catalog.OPS
ALL = list(OPS)
TORCH_OPS = [n for n in ALL if OPS[n].family in ("max", "adaptive", "avg")]
TORCH_BWD = [n for n in TORCH_OPS if OPS[n].backward]
TORCH_FWD = [n for n in TORCH_OPS if not OPS[n].backward]
BWD = catalog.BACKWARDS
IDX = catalog.INDEX_BACKWARDS
MAXB, AVGB, AVGF, MAXF = ("max_pool2d_with_indices_backward", "avg_pool2d_backward", "avg_pool2d",
                          "max_pool2d_with_indices")

# ---------------------------------------------------------------------------------------------------------------
# 1. None for every array argument (161001, also a TypeError)
for op in ALL:
    for a in OPS[op].arrays:
        add(f"none-{a}", op, a, setkw(**{a: None}), exc=NULL)

# 2. Non-array objects for the main array (and a few others): list, scalar, str, dict, bytes, plain object
for op in ALL:
    a = OPS[op].arrays[0]
    add(f"list-{a}", op, a, setarr(a, lambda v, c: np.asarray(v).tolist()))
    add(f"scalar-{a}", op, a, setkw(**{a: 1.0}))
    add(f"str-{a}", op, a, setkw(**{a: "abc"}))
add("tuple-indices", "max_pool2d_with_indices_backward", "indices", setarr("indices", lambda v, c: tuple(v.ravel())))
add("dict-x", "avg_pool2d_backward", "x", setkw(x={"a": 1}))
add("bytes-grad", "max_pool_grad", "grad", setkw(grad=b"\x00" * 16))
add("object-y", "max_pooling_grad", "y", setkw(y=object()))
add("int-dy", "max_pooling_grad", "dy", setkw(dy=3))

# 3. Wrong ranks
for op in TORCH_OPS:
    add("x-2d", op, "x", setarr("x", lambda v, c: np.ascontiguousarray(v[0, 0])))
    add("x-5d", op, "x", setarr("x", lambda v, c: v[None]))
for op in TORCH_BWD:
    add("grad_output-rank3-vs-4", op, "grad_output", setarr("grad_output", lambda v, c: v[0]))
for op in IDX:
    add("indices-rank5", op, "indices", setarr("indices", lambda v, c: v[None]))
add("x-3d", "max_pool", "x", setarr("x", lambda v, c: v[0]))
add("x1-3d", "max_pool_grad", "x1", setarr("x1", lambda v, c: v[0]))
add("x1-5d", "max_pool_grad", "x1", setarr("x1", lambda v, c: v[None]))
add("x2-3d", "max_pool_grad", "x2", setarr("x2", lambda v, c: v[0]))
add("grad-5d", "max_pool_grad", "grad", setarr("grad", lambda v, c: v[None]))
add("dy-0d", "max_pooling_grad", "dy", setkw(dy=np.array(1.0, np.float32), x=np.array(1.0, np.float32),
                                            y=np.array(1.0, np.float32)))
add("dy-9d", "max_pooling_grad", "dy", setkw(dy=np.zeros((1,) * 9, np.float32), x=np.zeros((1,) * 9, np.float32),
                                            y=np.zeros((1,) * 9, np.float32)))
add("x-rank-differs", "max_pooling_grad", "x", setarr("x", lambda v, c: v[None]))
add("grad_output-3d-x-4d-nhwc", "avg_pool2d_backward", "grad_output",
    setarr("grad_output", lambda v, c: v[0]), make=dict(layout="NHWC"))

# 4. Zero C, H or W (an error, as in the seeds; N = 0 is fine and fuzzed elsewhere)
for op in TORCH_FWD:
    for axis, tag in ((1, "C"), (2, "H"), (3, "W")):
        add(f"x-zero-{tag}", op, "x", logical_change("x", zero_dim(axis)), make=dict(layout="NHWC"))
for op in TORCH_BWD:
    add("x-zero-C", op, "x", logical_change("x", zero_dim(1)))
for axis, tag in ((1, "C"), (2, "H"), (3, "W")):
    add(f"x-zero-{tag}", "max_pool", "x", logical_change("x", zero_dim(axis)))
add("x1-zero-H", "max_pool_grad", "x1", logical_change("x1", zero_dim(2)))

# 5. dtypes: unsupported element types and mixtures (no silent casts)
UNSUPPORTED = [np.int32, np.int64, object, np.complex64, np.bool_, np.longdouble, np.uint16, np.int8]
for i, op in enumerate(ALL):
    a = OPS[op].arrays[0] if OPS[op].family != "tf" or not OPS[op].backward else "x1"
    dts = UNSUPPORTED[i % len(UNSUPPORTED):] + UNSUPPORTED[:i % len(UNSUPPORTED)]
    for dt in dts[:3]:
        add(f"{a}-dtype-{np.dtype(dt).name}", op, a, setarr(a, lambda v, c, dt=dt: np.asarray(v).astype(dt)))
for op in TORCH_BWD:
    add("grad_output-f64-vs-f32", op, "grad_output", setarr("grad_output", lambda v, c: v.astype(np.float64)))
    add("grad_output-bf16-vs-f16", op, "grad_output", setarr("grad_output", lambda v, c: v.astype(bfloat16)),
        make=dict(dtype=np.float16))
add("x2-f16-vs-f32", "max_pool_grad", "x2", setarr("x2", lambda v, c: v.astype(np.float16)))
add("grad-f64-vs-f32", "max_pool_grad", "grad", setarr("grad", lambda v, c: v.astype(np.float64)))
add("x-f64-vs-f32", "max_pooling_grad", "x", setarr("x", lambda v, c: v.astype(np.float64)))
add("y-bf16-vs-f16", "max_pooling_grad", "y", setarr("y", lambda v, c: v.astype(bfloat16)),
    make=dict(dtype=np.float16))
# non-native byte order: same kind and size as a supported dtype, but must not be read as if it were native
add("x-big-endian-f32", MAXF, "x", setarr("x", lambda v, c: v.astype(">f4")))
add("grad_output-big-endian-f32", AVGB, "grad_output", setarr("grad_output", lambda v, c: v.astype(">f4")))
add("dy-big-endian-f64", "max_pooling_grad", "dy", setarr("dy", lambda v, c: v.astype(">f8")),
    make=dict(dtype=np.float64))
add("indices-big-endian-i8", MAXB, "indices", setarr("indices", lambda v, c: v.astype(">i8")))


class _ArrayRaises:
    def __array__(self, *args, **kwargs):
        raise RuntimeError("no")


add("array-protocol-raises-x", AVGF, "x", setkw(x=_ArrayRaises()))
add("array-protocol-raises-indices", "adaptive_max_pool2d_backward", "indices", setkw(indices=_ArrayRaises()))
for op in IDX:
    for dt in (np.float32, np.uint32, np.int16, np.uint64, np.bool_):
        add(f"indices-dtype-{np.dtype(dt).name}", op, "indices", setarr("indices", lambda v, c, dt=dt: v.astype(dt)))
for op in ("max_pool2d_with_indices", "adaptive_max_pool2d"):
    for idt in (np.int16, np.float64, np.uint32, "float"):
        add(f"index_dtype-{idt if isinstance(idt, str) else np.dtype(idt).name}", op, "index_dtype",
            setkw(index_dtype=idt))
    for idt in ("bogus", object()):
        add(f"index_dtype-{type(idt).__name__}", op, "index_dtype", setkw(index_dtype=idt))

# 6. Parameters: out of range, wrong type, wrong length (torch-style)
for i, v in enumerate([0, -1, (2, 2, 2), (), 2.0, "2", True, None, 2 ** 62, [3, 0], np.array([[3]]), 2 ** 31,
                       np.float32(3), (3, -3)]):
    op = (MAXF, MAXB, AVGF, AVGB)[i % 4]
    add(f"kernel_size-{i}", op, "kernel_size", setkw(kernel_size=v))
for i, v in enumerate([0, -1, (1, 2, 3), 1.5, True, 2 ** 63, "1", (2, 0)]):
    op = (MAXB, AVGB, MAXF, AVGF)[i % 4]
    add(f"stride-{i}", op, "stride", setkw(stride=v))
for i, v in enumerate([-1, (1, 1, 1), 1.0, None, 2 ** 62, (0, -1), "1"]):
    op = (AVGB, MAXB, AVGF, MAXF)[i % 4]
    add(f"padding-{i}", op, "padding", setkw(padding=v))
# the max-padding rules: max pooling p <= ((k-1)*d+1)//2, avg pooling 2p <= k
add("padding-above-half-kernel", MAXB, "padding", setkw(kernel_size=3, padding=2))
add("padding-above-half-dilated", MAXF, "padding", setkw(kernel_size=3, dilation=2, padding=3))
add("padding-above-half-dilated-w", MAXB, "padding", setkw(kernel_size=(3, 2), dilation=(1, 3), padding=(1, 3)),
    match="W")
add("padding-2p-gt-k", AVGB, "padding", setkw(kernel_size=3, padding=2))
add("padding-2p-gt-k-w", AVGF, "padding", setkw(kernel_size=(4, 3), padding=(2, 2)), match="W")
for i, v in enumerate([0, -1, 1.5, (1, 1, 1), 2 ** 62, True]):
    add(f"dilation-{i}", (MAXF, MAXB)[i % 2], "dilation", setkw(dilation=v))
for i, v in enumerate(["yes", 2, None, 1.5, -1]):
    add(f"ceil_mode-{i}", (MAXB, AVGF, AVGB, MAXF, MAXB)[i], "ceil_mode", setkw(ceil_mode=v))
for i, v in enumerate([0, -1, (3, 0), (1, 2, 3), (), 2.5, True, "3", 2 ** 62, [None, -1], {3}]):
    add(f"output_size-{i}", "adaptive_max_pool2d", "output_size", setkw(output_size=v))
for i, v in enumerate(["no", 2, None]):
    add(f"count_include_pad-{i}", (AVGF, AVGB, AVGB)[i], "count_include_pad", setkw(count_include_pad=v))
for i, v in enumerate([True, False, 1.5, "2", 2 ** 63, -2 ** 63 - 1, np.float64(2.0)]):
    add(f"divisor_override-{i}", (AVGB, AVGF)[i % 2], "divisor_override", setkw(divisor_override=v))
for i, v in enumerate([4, -1, True, 1.5, "0", None, np.bool_(False)]):
    add(f"cube_math_type-{i}", AVGB, "cube_math_type", setkw(cube_math_type=v))
for mode, dt in ((3, np.float64), (3, np.float16), (3, bfloat16), (2, bfloat16)):
    add(f"cube_math_type-{mode}-{catalog.dtype_id(dt)}", AVGB, "cube_math_type", setkw(cube_math_type=mode),
        make=dict(dtype=dt))
for i, v in enumerate(["NCWH", "nchw", "", None, 1, b"NCHX", "NHWC "]):
    add(f"layout-{i}", TORCH_OPS[i % len(TORCH_OPS)], "layout", setkw(layout=v))
for i, v in enumerate([0, -1, 1.5, True, "2", -2 ** 63]):
    add(f"num_threads-{i}", ALL[(2 * i + 1) % len(ALL)], "num_threads", setkw(num_threads=v))
for i, v in enumerate(["yes", 2, -1, 1.0, []]):  # 0 and 1 are bools (the one bool rule, validation.py)
    add(f"deterministic-{i}", BWD[i % len(BWD)], "deterministic", setkw(deterministic=v))
for i, v in enumerate(["yes", 2, None]):
    add(f"check_orig_output-{i}", "max_pool_grad", "check_orig_output", setkw(check_orig_output=v))

# TensorFlow-style parameters (default data_format NHWC, ksize (1, 3, 3, 1), strides (1, 2, 2, 1))
TFF, TFB = "max_pool", "max_pool_grad"
for i, v in enumerate([(1, 3, 3), (1, 3, 3, 1, 1), 3, None, (2, 3, 3, 1), (1, 3, 3, 2), (1, 0, 3, 1),
                       (1, 3, -1, 1), (1, 3.0, 3, 1), (True, 3, 3, 1), (1, 2 ** 62, 3, 1),
                       np.array([[1, 3, 3, 1]]), "1331"]):
    add(f"ksize-{i}", (TFF, TFB)[i % 2], "ksize", setkw(ksize=v))
add("ksize-nhwc-order-with-nchw", TFB, "ksize", setkw(ksize=(1, 3, 3, 1), strides=(1, 1, 2, 2)),
    make=dict(layout="NCHW"))
add("ksize-C-not-1-nchw", TFF, "ksize", setkw(ksize=(1, 2, 3, 3), strides=(1, 1, 2, 2)), make=dict(layout="NCHW"))
for i, v in enumerate([(1, 2, 2), (2, 2, 2, 1), (1, 2, 2, 3), (1, 0, 2, 1), (1, 2, 2 ** 63 - 1, 1), 2]):
    add(f"strides-{i}", (TFB, TFF)[i % 2], "strides", setkw(strides=v))
for i, v in enumerate(["same", "valid", "Same", "FULL", "EXPLICIT", "", None, 1, b"same", "SAME ", ["SAME"]]):
    add(f"padding-{i}", (TFF, TFB)[i % 2], "padding", setkw(padding=v))
for i, v in enumerate(["NCWH", "nhwc", "", None, "NC", 0]):
    add(f"data_format-{i}", (TFB, TFF)[i % 2], "data_format", setkw(data_format=v))

# 7. Shapes
for op in TORCH_BWD:
    # adaptive: the output size is read from grad_output, so the indices are the ones that no longer fit
    add("grad_output-wrong-H", op, "indices" if OPS[op].family == "adaptive" else "grad_output",
        logical_change("grad_output", lambda a: a[:, :, :-1]))
    add("grad_output-wrong-N", op, "grad_output", logical_change("grad_output", lambda a: a[:1]))
    add("grad_output-wrong-C", op, "grad_output", logical_change("grad_output", lambda a: a[:, :2]),
        make=dict(layout="NHWC"))
add("grad_output-Ho-0", "adaptive_max_pool2d_backward", "grad_output",
    logical_change("grad_output", lambda a: a[:, :, :0]))
add("grad_output-nchw-shape-for-nhwc", MAXB, "grad_output",
    chain(setarr("grad_output", lambda v, c: np.ascontiguousarray(c.logical(v))), setkw(layout="NHWC")),
    make=dict(layout="NHWC", shape=(2, 4, 6, 5)))
for op in IDX:
    add("indices-wrong-shape", op, "indices", logical_change("indices", lambda a: a[:, :, :, :-1]))
add("x2-wrong-shape", TFB, "x2", logical_change("x2", lambda a: a[:, :, :-1]))
add("grad-wrong-shape", TFB, "grad", logical_change("grad", lambda a: a[:, :-1]))
add("x-shape-differs", "max_pooling_grad", "x", setarr("x", lambda v, c: v[..., :-1]))
add("y-shape-differs", "max_pooling_grad", "y", setarr("y", lambda v, c: np.ascontiguousarray(v.swapaxes(0, 1))))
add("output-too-small", MAXF, "x", setkw(kernel_size=7, padding=0), match="too small")
add("output-too-small-dilated", MAXB, "x", setkw(kernel_size=3, dilation=4, padding=0), match="too small")
add("output-too-small", AVGB, "x", setkw(kernel_size=(2, 8), padding=0), match="too small")
add("valid-ksize-gt-H", TFF, "x", setkw(ksize=(1, 7, 1, 1), padding="VALID"), match="too small")
add("valid-ksize-gt-W", TFB, "x1", setkw(ksize=(1, 1, 6, 1), padding="VALID"), match="too small")
add("empty-window", MAXF, "x", setkw(kernel_size=2, stride=2, padding=2, dilation=3),
    make=dict(shape=(1, 1, 1, 1)), match="no input cell")

# 8. Index values outside [0, H*W): the error names indices and the position (default x: H*W = 30)
for op in IDX:
    for layout in ("NCHW", "NHWC"):
        for tag, v, dt in (("-1", -1, np.int64), ("HW", 30, np.int32), ("i32max", 2 ** 31 - 1, np.int32),
                           ("i32min", -2 ** 31, np.int32), ("i64max", 2 ** 63 - 1, np.int64),
                           ("i64min", -2 ** 63, np.int64)):
            def m(case, v=v, dt=dt):
                a4 = np.array(case.logical(case.kwargs["indices"])).astype(dt)
                a4[1, 2, 1, 0] = v
                a4[1, 2, 2, 1] = v
                case.kwargs["indices"] = catalog.to_api(a4, case.layout, case.rank)
            add(f"indices-{tag}-{layout}", op, "indices", m, make=dict(layout=layout),
                match=rf"(?<!\d){re.escape(str(v))}(?!\d).*n=1, c=2, oh=1, ow=0\b", out_may_change=True)
add("indices-bad-in-broadcast", MAXB, "indices",
    setarr("indices", lambda v, c: np.broadcast_to(np.int64(-5), v.shape)), match=r"-5.*n=0, c=0, oh=0, ow=0")

# 9. Huge sizes (zero-stride, no memory) and parameters whose products would overflow 64 bits
HUGE_HW = (1, 1, 2 ** 30, 2 ** 30)            # H*W = 2**60 cells > int32 range; 4 EiB if it were real


def huge_max_call(index_dtype, go_shape=(1, 1, 1, 1), ind_shape=(1, 1, 1, 1)):
    def m(case):
        case.kwargs.update(x=huge(HUGE_HW), grad_output=np.zeros(go_shape, np.float32),
                           indices=np.zeros(ind_shape, index_dtype), kernel_size=2 ** 30, stride=None, padding=0,
                           dilation=1, ceil_mode=False, layout="NCHW")
        if case.op.family == "adaptive":
            for k in ("kernel_size", "stride", "padding", "dilation", "ceil_mode"):
                case.kwargs.pop(k)
    return m


add("huge-x-int32-indices", MAXB, "indices", huge_max_call(np.int32), match="int32")
add("huge-x-int32-indices", "adaptive_max_pool2d_backward", "indices", huge_max_call(np.int32), match="int32")
add("huge-x-wrong-grad_output", MAXB, "grad_output", huge_max_call(np.int64, go_shape=(1, 1, 2, 1)))
add("huge-x-wrong-indices", MAXB, "indices", huge_max_call(np.int64, ind_shape=(1, 1, 1, 2)))
add("huge-x-index_dtype-int32", MAXF, "index_dtype",
    setkw(x=huge(HUGE_HW), kernel_size=2 ** 30, stride=None, padding=0, index_dtype=np.int32), match="int32")
add("huge-x-index_dtype-int32", "adaptive_max_pool2d", "index_dtype",
    setkw(x=huge(HUGE_HW), output_size=1, index_dtype=np.int32), match="int32")
add("huge-x-output-too-small", MAXB, "x",
    chain(huge_max_call(np.int64), setkw(kernel_size=2 ** 31 - 1, padding=0)), match="too small")
add("huge-x-dilation-overflow", MAXF, "x",
    setkw(x=huge(HUGE_HW), kernel_size=2 ** 31 - 1, dilation=2 ** 31 - 1, padding=2 ** 31 - 1), match="too small")
add("huge-x-wrong-grad_output", AVGB, "grad_output",
    setkw(x=huge(HUGE_HW), grad_output=np.zeros((1, 1, 1, 2), np.float32), kernel_size=2 ** 30, stride=None,
          padding=0, layout="NCHW"))
add("huge-x-out-wrong-shape", AVGB, "out",
    setkw(x=huge(HUGE_HW), grad_output=np.zeros((1, 1, 1, 1), np.float32), kernel_size=2 ** 30, stride=None,
          padding=0, layout="NCHW", out=np.zeros((1, 1, 1, 1), np.float32)))
add("huge-x1-wrong-x2", TFB, "x2",
    setkw(x1=huge((2 ** 10, 2 ** 20, 2 ** 20, 1)), x2=np.zeros((1, 1, 1, 1), np.float32),
          grad=np.zeros((1, 1, 1, 1), np.float32), ksize=(1, 2 ** 20, 2 ** 20, 1), strides=(1, 1, 1, 1),
          padding="VALID"))
add("huge-x-int32-ksize", TFF, "ksize", setkw(x=huge((1, 2 ** 30, 2 ** 30, 1)), ksize=(1, 2 ** 31, 1, 1)))
add("huge-dy-vs-small-x", "max_pooling_grad", "x", setkw(dy=huge((2 ** 20, 2 ** 20, 2 ** 20))))
add("huge-y-vs-small-dy", "max_pooling_grad", "y", setarr("y", lambda v, c: huge((2 ** 40, 2 ** 20))))
add("output_size-2**62", "adaptive_max_pool2d", "output_size", setkw(output_size=(2 ** 62, 1)))
add("kernel-2**62-stride-2**62", AVGF, "kernel_size", setkw(kernel_size=2 ** 62, stride=2 ** 62))
add("divisor_override-2**64", AVGB, "divisor_override", setkw(divisor_override=2 ** 64))
add("strides-2**63", TFB, "strides", setkw(strides=(1, 2 ** 63, 1, 1)))
add("ksize-neg-2**63", TFF, "ksize", setkw(ksize=(1, -2 ** 63, 1, 1)))

# 10. out=
for op in BWD:
    add("out-readonly", op, "out", lambda c: c.kwargs.update(out=readonly(np.zeros(c.output_shape(), c.dtype))),
        match="writeable")
add("out-wrong-shape", MAXB, "out", lambda c: c.kwargs.update(out=np.zeros(c.kwargs["grad_output"].shape, F32)))
add("out-wrong-shape-transposed", AVGB, "out",
    lambda c: c.kwargs.update(out=np.zeros(c.output_shape()[::-1], F32)))
add("out-wrong-dtype", AVGB, "out", lambda c: c.kwargs.update(out=np.zeros(c.output_shape(), np.float64)))
add("out-wrong-dtype-bf16-vs-f16", "adaptive_max_pool2d_backward", "out",
    lambda c: c.kwargs.update(out=np.zeros(c.output_shape(), bfloat16)), make=dict(dtype=np.float16))
add("out-list", TFB, "out", lambda c: c.kwargs.update(out=np.zeros(c.output_shape(), F32).tolist()))
add("out-int", "adaptive_max_pool2d_backward", "out", setkw(out=5))
add("out-memoryview", "max_pooling_grad", "out",
    lambda c: c.kwargs.update(out=memoryview(np.zeros(c.output_shape(), F32))))
add("out-is-x", MAXB, "out", lambda c: c.kwargs.update(out=c.kwargs["x"]), match="share memory with x")
add("out-is-x", "adaptive_max_pool2d_backward", "out", lambda c: c.kwargs.update(out=c.kwargs["x"]))
add("out-is-x", AVGB, "out", lambda c: c.kwargs.update(out=c.kwargs["x"]))
add("out-is-x1", TFB, "out", lambda c: c.kwargs.update(out=c.kwargs["x1"]), match="x1")
add("out-is-x", "max_pooling_grad", "out", lambda c: c.kwargs.update(out=c.kwargs["x"]), match=r"\bx\b")
add("out-is-y", "max_pooling_grad", "out", lambda c: c.kwargs.update(out=c.kwargs["y"]), match=r"\by\b")
add("out-is-reversed-dy", "max_pooling_grad", "out", lambda c: c.kwargs.update(out=c.kwargs["dy"][::-1]),
    match="dy")
add("out-is-dy-which-is-x", "max_pooling_grad", "out",
    lambda c: c.kwargs.update(x=c.kwargs["dy"], out=c.kwargs["dy"]), match=r"\bx\b")


def _overlap_grad_output(case):
    """out and grad_output carved from one buffer so that they share a few elements."""
    shape, go = case.output_shape(), case.kwargs["grad_output"]
    n = int(np.prod(shape))
    buf = np.zeros(n + go.size - 3, case.dtype)
    case.kwargs["out"] = buf[:n].reshape(shape)
    view = buf[n - 3:].reshape(go.shape)
    view[...] = go
    case.kwargs["grad_output"] = view


def _overlap_indices(case):
    """out (float64) is a view of the int64 buffer that holds the indices."""
    shape, ind = case.output_shape(), case.kwargs["indices"]
    n = int(np.prod(shape))
    buf = np.zeros(max(n, ind.size + 4), np.int64)
    view = buf[4:4 + ind.size].reshape(ind.shape)
    view[...] = ind
    case.kwargs["indices"] = view
    case.kwargs["out"] = buf.view(np.float64)[:n].reshape(shape)


def _overlap_grad(case):
    shape, g = case.output_shape(), case.kwargs["grad"]
    buf = np.zeros(int(np.prod(shape)) + g.size, case.dtype)
    view = buf[5:5 + g.size].reshape(g.shape)
    view[...] = g
    case.kwargs["grad"] = view
    case.kwargs["out"] = buf[-int(np.prod(shape)):][::-1].reshape(shape)


add("out-overlaps-grad_output", MAXB, "out", _overlap_grad_output, match="grad_output")
add("out-overlaps-grad_output", AVGB, "out", _overlap_grad_output, match="grad_output", make=dict(layout="NHWC"))
add("out-overlaps-indices", MAXB, "out", _overlap_indices, match="indices", make=dict(dtype=np.float64))
add("out-overlaps-indices", "adaptive_max_pool2d_backward", "out", _overlap_indices, match="indices",
    make=dict(dtype=np.float64, layout="NHWC"))
add("out-overlaps-grad", TFB, "out", _overlap_grad, match="grad")

# 11. check_orig_output catches the wrong x2
add("x2-not-the-forward", TFB, "x2", chain(setarr("x2", lambda v, c: v + np.float32(1)),
                                          setkw(check_orig_output=True)), match="position")
add("x2-is-grad", TFB, "x2", chain(lambda c: c.kwargs.update(x2=c.kwargs["grad"].copy()),
                                  setkw(check_orig_output=True)), make=dict(dtype=np.float16))


# ---------------------------------------------------------------------------------------------------------------
def _ids():
    seen = set()
    for b in CASES:
        assert b.id not in seen, f"duplicate case id {b.id}"
        seen.add(b.id)
    return [b.id for b in CASES]


def _params():
    for b in CASES:
        marks = [pytest.mark.xfail(strict=True, reason=b.xfail)] if b.xfail else []
        yield pytest.param(b, id=b.id, marks=marks)


SMALL = 1 << 26


def _arrays(case, include_out):
    res = {k: v for k, v in case.kwargs.items() if isinstance(v, np.ndarray) and (include_out or k != "out")}
    return res


@pytest.mark.parametrize("bad", list(_params()))
def test_bad_input(bad):
    case = catalog.make_case(bad.op, **bad.make)
    bad.mutate(case)
    watched = _arrays(case, include_out=not bad.out_may_change)
    small = {k: v for k, v in watched.items() if v.nbytes < SMALL}
    before, raw = pgtest.snapshot(small), catalog.snapshot_raw(watched)
    with pytest.raises(pg.PoolGradError) as info:
        case.call()
    err = info.value
    msg = str(err)
    assert type(err) is bad.exc, f"expected {bad.exc.__name__}, got {type(err).__name__}: {msg}"
    if bad.exc is NULL:
        assert err.code == catalog.NULLPTR == 161001 and isinstance(err, TypeError)
    else:
        assert err.code == catalog.INVALID == 161002 and isinstance(err, ValueError)
    assert re.match(rf"{re.escape(bad.name)}\b", msg), f"message does not start with {bad.name!r}: {msg}"
    if bad.match:
        assert re.search(bad.match, msg), f"message lacks {bad.match!r}: {msg}"
    pgtest.assert_untouched(before, small)
    catalog.assert_raw_untouched(raw, watched)


def test_case_count():
    """The matrix is as big as promised and every operator is covered by many rows."""
    assert len(_ids()) >= 100
    per_op = {op: sum(b.op == op for b in CASES) for op in catalog.OPS}
    assert min(per_op.values()) >= 8, per_op


# ---------------------------------------------------------------------------------------------------------------
# The documented exception and two positive controls (the bad rows must fail for the stated reason only)
@pytest.mark.parametrize("dtype", catalog.DTYPES, ids=catalog.DTYPE_IDS)
def test_max_pooling_grad_in_place_into_dy_is_allowed(dtype):
    case = catalog.make_case("max_pooling_grad", dtype=dtype, values_kind="special")
    ref = case.reference()["grad"]
    x, y = case.kwargs["x"], case.kwargs["y"]
    before = pgtest.snapshot({"x": x, "y": y})
    dy = case.kwargs["dy"]
    res = case.call(out=dy)
    assert res is dy
    assert dy.tobytes() == ref.tobytes()
    pgtest.assert_untouched(before, {"x": x, "y": y})


@pytest.mark.parametrize("op", list(catalog.OPS))
def test_every_unbroken_case_succeeds(op):
    """Control: the valid calls the matrix breaks do succeed (with every layout the matrix uses)."""
    for make in ({}, {"layout": "NHWC" if OPS[op].family != "tf" else "NCHW"}, {"dtype": np.float16}):
        if OPS[op].family == "elementwise" and "layout" in make:
            continue
        case = catalog.make_case(op, **make)
        case.call()
