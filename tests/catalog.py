"""One table of every public poolgrad operator: how to build a valid small call and how to compute its reference.

Shared by ``test_fuzz.py``, ``test_bad_inputs.py`` and ``test_crash_isolation.py`` (``import catalog``; pytest
puts tests/ on sys.path).  Deliberately light: imports NumPy, poolgrad and ``poolgrad.slow`` only (no torch, no
TensorFlow, no pgtest), so a subprocess can import it cheaply.

Vocabulary
----------
* ``OPS[name]`` is an :class:`OpSpec`: the public function (resolved lazily, so a module that does not import yet
  only fails the entries that use it), its array arguments in API order, whether it is a forward or a backward,
  and the family (``max``, ``adaptive``, ``avg``, ``tf``, ``elementwise``).
* :func:`make_case` builds a :class:`Case`: keyword arguments for a *valid* call (arrays in the API layout, the
  parameters in whatever form the caller chose: int, 1- or 2-sequence, ndarray, ...) plus the normalised
  parameters (pairs) the references need.  ``Case.reference()`` recomputes the expected result from the arrays
  *currently* in ``Case.kwargs`` (so a test may re-stride or broadcast them first) with ``poolgrad.slow``.
* Results and references are compared in the logical NCHW 4-D view (``Case.logical``); elementwise ops as is.

The normalisation here is written independently of ``poolgrad.params`` (it is what the spec says, not what the
library does), so a parsing bug in the library shows up as a mismatch.
"""
from __future__ import annotations

import ctypes
import importlib
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

import poolgrad
from poolgrad.dtypes import bfloat16

DTYPES = [np.dtype(np.float32), np.dtype(np.float64), np.dtype(np.float16), bfloat16]
DTYPE_IDS = ["f32", "f64", "f16", "bf16"]
INDEX_DTYPES = [np.dtype(np.int32), np.dtype(np.int64)]
LAYOUTS = ["NCHW", "NHWC"]
NULLPTR, INVALID = 161001, 161002


# ----------------------------------------------------------------------------------------------------------------
# The table
# ----------------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class OpSpec:
    name: str
    module: str                 # poolgrad.<module>
    family: str                 # max | adaptive | avg | tf | elementwise
    kind: str                   # forward | backward
    arrays: tuple[str, ...]     # array arguments, API order
    layout_kw: str | None       # "layout" (torch-style), "data_format" (tf) or None (elementwise)
    index_input: str | None = None     # the argument holding flat indices (index-taking backwards)
    returns_indices: bool = False      # forward returning (y, indices)

    @property
    def func(self) -> Callable:
        return getattr(importlib.import_module(f"poolgrad.{self.module}"), self.name)

    @property
    def backward(self) -> bool:
        return self.kind == "backward"

    @property
    def ranks(self) -> tuple[int, ...]:
        return (4,) if self.family == "tf" else (3, 4)


OPS: dict[str, OpSpec] = {s.name: s for s in [
    OpSpec("max_pool2d_with_indices", "max_pool_indices", "max", "forward", ("x",), "layout", returns_indices=True),
    OpSpec("max_pool2d_with_indices_backward", "max_pool_indices", "max", "backward", ("grad_output", "x", "indices"),
           "layout", index_input="indices"),
    OpSpec("adaptive_max_pool2d", "adaptive", "adaptive", "forward", ("x",), "layout", returns_indices=True),
    OpSpec("adaptive_max_pool2d_backward", "adaptive", "adaptive", "backward", ("grad_output", "x", "indices"),
           "layout", index_input="indices"),
    OpSpec("avg_pool2d", "avg_pool", "avg", "forward", ("x",), "layout"),
    OpSpec("avg_pool2d_backward", "avg_pool", "avg", "backward", ("grad_output", "x"), "layout"),
    OpSpec("max_pool", "tf_max_pool", "tf", "forward", ("x",), "data_format"),
    OpSpec("max_pool_grad", "tf_max_pool", "tf", "backward", ("x1", "x2", "grad"), "data_format"),
    OpSpec("max_pooling_grad", "elementwise", "elementwise", "backward", ("dy", "x", "y"), None),
]}
FORWARDS = [n for n, s in OPS.items() if s.kind == "forward"]
BACKWARDS = [n for n, s in OPS.items() if s.kind == "backward"]
INDEX_BACKWARDS = [n for n, s in OPS.items() if s.index_input]

# A small valid parameter set per family (API forms); make_case(params=...) overrides entries.
DEFAULT_PARAMS: dict[str, dict[str, Any]] = {
    "max": dict(kernel_size=3, stride=2, padding=1, dilation=1, ceil_mode=False),
    "adaptive": dict(output_size=(3, 2)),
    "avg": dict(kernel_size=3, stride=2, padding=1, ceil_mode=False, count_include_pad=True,
                divisor_override=None),
    "avg_backward": dict(cube_math_type=0),
    "tf": dict(ksize=None, strides=None, padding="SAME"),    # None: (1, 3, 3, 1) / (1, 2, 2, 1) in data_format
    "elementwise": {},
}
DEFAULT_SHAPE = (2, 3, 6, 5)        # logical NCHW
DEFAULT_ELEM_SHAPE = (2, 3, 4, 4)


# ----------------------------------------------------------------------------------------------------------------
# Parameter normalisation (the spec's reading, independent of poolgrad.params)
# ----------------------------------------------------------------------------------------------------------------
def pair(value: Any) -> tuple[int, int]:
    """int / 1- or 2-sequence / 1-D ndarray -> (h, w)."""
    if isinstance(value, np.ndarray):
        value = value.tolist()
    if isinstance(value, (list, tuple)):
        return int(value[0]), int(value[-1])
    return int(value), int(value)


def stride_pair(value: Any, kernel: tuple[int, int]) -> tuple[int, int]:
    if value is None or (isinstance(value, (list, tuple, np.ndarray)) and len(value) == 0):
        return kernel
    return pair(value)


def as_form(p: tuple[int, int], form: str) -> Any:
    """Express the pair ``p`` in an API form: int, npint, list1, tuple1, list2, tuple2, array2, array1."""
    h, w = p
    if form in ("int", "npint", "list1", "tuple1", "array1") and h != w:
        form = "tuple2"
    return {"int": h, "npint": np.int64(h), "list1": [h], "tuple1": (h,), "array1": np.array([h]),
            "list2": [h, w], "tuple2": (h, w), "array2": np.array([h, w], dtype=np.int32)}[form]


FORMS = ["int", "npint", "list1", "tuple1", "array1", "list2", "tuple2", "array2"]


def torch_out_size(size: int, k: int, s: int, p: int, d: int, ceil_mode: bool) -> int:
    """Spec §1.2 output length (exact integers)."""
    num = size + 2 * p - d * (k - 1) - 1
    out = (-(-num // s) if ceil_mode else num // s) + 1
    if ceil_mode and (out - 1) * s >= size + p:
        out -= 1
    return out


def max_padding_limit(k: int, d: int) -> int:
    return ((k - 1) * d + 1) // 2


def has_empty_window(size: int, out: int, k: int, s: int, p: int, d: int) -> bool:
    """Whether some torch-style window (lattice ``o*s - p + j*d``) contains no input cell."""
    return any(not any(0 <= o * s - p + j * d < size for j in range(k)) for o in range(out))


def tf_out_size(size: int, k: int, s: int, padding: str) -> int:
    return -(-(size - k + 1) // s) if padding == "VALID" else -(-size // s)


def tf_window(hw: tuple[int, int], data_format: str) -> tuple[int, int, int, int]:
    h, w = hw
    return (1, h, w, 1) if data_format == "NHWC" else (1, 1, h, w)


def tf_hw(seq: Any, data_format: str) -> tuple[int, int]:
    seq = list(np.asarray(seq).tolist()) if isinstance(seq, np.ndarray) else list(seq)
    return (int(seq[1]), int(seq[2])) if data_format == "NHWC" else (int(seq[2]), int(seq[3]))


def adaptive_out(output_size: Any, hw: tuple[int, int]) -> tuple[int, int]:
    seq = [output_size] if isinstance(output_size, (int, np.integer)) else list(output_size)
    if len(seq) == 1:
        seq = seq * 2
    return tuple(hw[a] if v is None else int(v) for a, v in enumerate(seq))


# ----------------------------------------------------------------------------------------------------------------
# Arrays
# ----------------------------------------------------------------------------------------------------------------
def values(rng: np.random.Generator, shape: tuple[int, ...], dtype: Any, kind: str = "normal") -> np.ndarray:
    """Random values of ``kind``: normal, ties (small integers), nan (20 % NaN), inf (±inf), special (a mix of
    ±0, ±inf, NaN, subnormal-ish and ordinary values)."""
    shape = tuple(shape)
    if kind == "ties":
        v = rng.integers(-2, 3, size=shape).astype(np.float64)
    else:
        v = rng.standard_normal(shape)
    if kind == "nan":
        v[rng.random(shape) < 0.2] = np.nan
    elif kind == "inf":
        r = rng.random(shape)
        v[r < 0.1] = np.inf
        v[(r >= 0.1) & (r < 0.2)] = -np.inf
    elif kind == "special":
        pool = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e-30, -1e-30, 1.0, -1.0, 2.0])
        mask = rng.random(shape) < 0.5
        v[mask] = pool[rng.integers(0, len(pool), size=shape)][mask]
    return v.astype(dtype)


def to_api(a4: np.ndarray, layout: str, rank: int) -> np.ndarray:
    """Logical NCHW 4-D -> C-contiguous array in ``layout`` (rank 3 drops N, which must be 1)."""
    a = a4.transpose(0, 2, 3, 1) if layout == "NHWC" else a4
    if rank == 3:
        assert a.shape[0] == 1
        a = a[0]
    return np.ascontiguousarray(a)


def to_logical(a: Any, layout: str | None) -> np.ndarray:
    """API array (3-D or 4-D in ``layout``) -> logical NCHW 4-D view; ``layout=None`` returns it unchanged."""
    a = np.asarray(a)
    if layout is None:
        return a
    if a.ndim == 3:
        a = a[np.newaxis]
    return a.transpose(0, 3, 1, 2) if layout == "NHWC" else a


# Memory orders a test may give an array (same logical shape; only "broadcast" changes values).
ORDERS = ["c", "f", "sliced", "negative", "permuted", "channels_last", "misaligned", "padded", "misaligned_sliced",
          "broadcast"]
WRITABLE_ORDERS = [o for o in ORDERS if o != "broadcast"]


def restride(a: np.ndarray, order: str, perm: tuple[int, ...] | None = None, axis: int = 0) -> np.ndarray:
    """``a``'s values (for "broadcast": ``a`` with one axis collapsed to its first entry) in another memory order.

    * c / f: contiguous copies; sliced: every other element (offset 1) of a zero-filled buffer twice as big;
    * negative: negative strides on every axis; permuted: a buffer stored in axis order ``perm`` viewed back;
    * channels_last: for 4-D arrays, the axis-1 dimension stored innermost (an NHWC buffer viewed as NCHW);
    * misaligned: data at an odd byte address (itemsize > 1); padded: a one-byte gap after every element (byte
      strides that are not multiples of the itemsize); misaligned_sliced: every other element of an odd-addressed
      buffer, in reverse along axis 0; broadcast: zero stride along ``axis`` (read-only).
    """
    a = np.asarray(a)
    if order == "c":
        return np.ascontiguousarray(a).copy()
    if order == "f":
        return np.asfortranarray(a).copy()
    if order == "sliced":
        big = np.zeros(tuple(2 * n + 1 for n in a.shape), dtype=a.dtype)
        sl = tuple(slice(1, 1 + 2 * n, 2) for n in a.shape)
        big[sl] = a
        return big[sl]
    if order == "negative":
        flip = tuple(slice(None, None, -1) for _ in a.shape)
        return np.ascontiguousarray(a[flip])[flip]
    if order == "channels_last":
        if a.ndim != 4:
            return restride(a, "permuted", tuple(reversed(range(a.ndim))))
        perm = (0, 2, 3, 1)
        order = "permuted"
    if order == "permuted":
        perm = tuple(perm) if perm is not None else tuple(reversed(range(a.ndim)))
        return np.ascontiguousarray(a.transpose(perm)).transpose(np.argsort(perm))
    if order == "misaligned":
        if a.dtype.itemsize == 1 or a.size == 0:
            return a.copy()
        buf = bytearray(a.nbytes + 1)
        out = np.frombuffer(buf, dtype=a.dtype, count=a.size, offset=1).reshape(a.shape)
        out[...] = a
        assert not out.flags.aligned
        return out
    if order in ("padded", "misaligned_sliced"):
        if a.dtype.itemsize == 1 or a.size == 0:
            return a.copy()
        item = a.dtype.itemsize
        inner = item + 1 if order == "padded" else 2 * item
        strides = [inner]
        for n in reversed(a.shape[1:]):
            strides.insert(0, strides[0] * n * (1 if order == "padded" else 2))
        nbytes = sum((n - 1) * st for n, st in zip(a.shape, strides)) + item
        buf = bytearray(nbytes + 1)
        out = np.ndarray(a.shape, a.dtype, buffer=buf, offset=1, strides=strides)
        if order == "misaligned_sliced" and a.ndim:
            out = np.ndarray(a.shape, a.dtype, buffer=buf, offset=1 + (a.shape[0] - 1) * strides[0],
                             strides=[-strides[0]] + strides[1:])
        out[...] = a
        return out
    if order == "broadcast":
        if a.ndim == 0 or a.size == 0:
            return a.copy()
        axis = axis % a.ndim
        if a.shape[axis] == 0:
            return a.copy()
        first = np.take(a, [0], axis=axis)
        return np.broadcast_to(first, a.shape)
    raise ValueError(order)


def byte_range(a: np.ndarray) -> bytes:
    """The raw bytes of memory ``a`` spans (``np.byte_bounds``): catches writes to an input's elements *and* to
    the gaps between them, without materialising a huge zero-stride view."""
    if a.size == 0:
        return b""
    lo, hi = np.lib.array_utils.byte_bounds(a) if hasattr(np.lib, "array_utils") else np.byte_bounds(a)
    return ctypes.string_at(lo, hi - lo)


def snapshot_raw(arrays: dict[str, Any]) -> dict[str, bytes]:
    return {k: byte_range(v) for k, v in arrays.items() if isinstance(v, np.ndarray)}


def assert_raw_untouched(before: dict[str, bytes], arrays: dict[str, Any]) -> None:
    for k, v in arrays.items():
        if isinstance(v, np.ndarray) and k in before:
            assert byte_range(v) == before[k], f"{k} (or memory between its elements) was modified"


# ----------------------------------------------------------------------------------------------------------------
# Cases
# ----------------------------------------------------------------------------------------------------------------
@dataclass
class Case:
    op: OpSpec
    kwargs: dict[str, Any]
    layout: str | None
    rank: int
    dtype: np.dtype
    norm: dict[str, Any] = field(default_factory=dict)
    # (exception class, parameter name) when the call is well formed but the spec makes it an error
    # (a torch-style max-pool window that contains no input cell).
    expect_error: tuple[type, str] | None = None

    def call(self, **override: Any) -> Any:
        return self.op.func(**{**self.kwargs, **override})

    def arrays(self) -> dict[str, Any]:
        """The array arguments (and ``out`` when it is an ndarray), by name."""
        res = {n: self.kwargs[n] for n in self.op.arrays if n in self.kwargs}
        if isinstance(self.kwargs.get("out"), np.ndarray):
            res["out"] = self.kwargs["out"]
        return res

    def inputs(self) -> dict[str, Any]:
        return {n: self.kwargs[n] for n in self.op.arrays if n in self.kwargs}

    def logical(self, a: Any) -> np.ndarray:
        return to_logical(a, self.layout)

    @property
    def main_input(self) -> str:
        """The array whose shape, dtype and memory order the result follows (x, x1 or dy)."""
        if self.op.family == "tf" and self.op.backward:
            return "x1"
        return "dy" if self.op.family == "elementwise" else "x"

    @property
    def x_shape4(self) -> tuple[int, ...]:
        return self.logical(self.kwargs[self.main_input]).shape

    def output_shape(self) -> tuple[int, ...]:
        """Shape of a backward's result (the shape of x / x1 / dy)."""
        return np.shape(self.kwargs[self.main_input])

    def reference(self) -> dict[str, np.ndarray]:
        """Expected results from the arrays now in ``kwargs``: float64 values (``"y"`` or ``"grad"``) and int64
        ``"indices"``, logical NCHW (elementwise: ``"grad"`` bit-exact in the input dtype)."""
        from poolgrad import slow
        from poolgrad.slow import adaptive as s_ad, avg_pool as s_avg, elementwise as s_el, tf_max_pool as s_tf
        L = {n: np.asarray(self.logical(self.kwargs[n])) for n in self.op.arrays}
        n = self.norm
        name = self.op.name
        if name == "max_pool2d_with_indices":
            y, ind = slow.max_pool2d_with_indices(L["x"], n["kernel"], n["stride"], n["padding"], n["dilation"],
                                                  n["ceil_mode"])
            return {"y": y, "indices": ind}
        if name == "max_pool2d_with_indices_backward":
            return {"grad": slow.max_pool2d_with_indices_backward(L["grad_output"], L["x"].shape, L["indices"])}
        if name == "adaptive_max_pool2d":
            y, ind = s_ad.adaptive_max_pool2d(L["x"], n["output_size"])
            return {"y": y, "indices": ind}
        if name == "adaptive_max_pool2d_backward":
            return {"grad": s_ad.adaptive_max_pool2d_backward(L["grad_output"], L["x"].shape, L["indices"])}
        if name == "avg_pool2d":
            return {"y": s_avg.avg_pool2d(L["x"], n["kernel"], n["stride"], n["padding"], n["ceil_mode"],
                                          n["count_include_pad"], n["divisor_override"])}
        if name == "avg_pool2d_backward":
            return {"grad": s_avg.avg_pool2d_backward(L["grad_output"], L["x"].shape, n["kernel"], n["stride"],
                                                      n["padding"], n["ceil_mode"], n["count_include_pad"],
                                                      n["divisor_override"], n["cube_math_type"])}
        if name == "max_pool":
            return {"y": s_tf.max_pool(L["x"], n["ksize"], n["strides"], n["padding"])}
        if name == "max_pool_grad":
            return {"grad": s_tf.max_pool_grad(L["x1"], L["grad"], n["ksize"], n["strides"], n["padding"])}
        if name == "max_pooling_grad":
            return {"grad": s_el.max_pooling_grad(self.kwargs["dy"], self.kwargs["x"], self.kwargs["y"])}
        raise KeyError(name)

    def result_dict(self, res: Any) -> dict[str, np.ndarray]:
        """The call's result in the form of :meth:`reference` (logical NCHW views, not converted)."""
        if self.op.returns_indices:
            y, ind = res
            return {"y": self.logical(y), "indices": self.logical(ind)}
        return {("grad" if self.op.backward else "y"): self.logical(res)}

    def canonical(self) -> "Case":
        """The same problem as C-contiguous logical NCHW 4-D arrays with layout NCHW (``data_format="NCHW"`` with
        permuted ksize/strides for tf), no ``out``: the baseline a deterministic result must equal bit for bit."""
        kw = {k: v for k, v in self.kwargs.items() if k not in ("out",)}
        if self.op.family == "elementwise":
            for a in self.op.arrays:
                kw[a] = np.ascontiguousarray(kw[a])
            return Case(self.op, kw, None, self.rank, self.dtype, dict(self.norm))
        for a in self.op.arrays:
            kw[a] = np.ascontiguousarray(self.logical(kw[a]))
        kw[self.op.layout_kw] = "NCHW"
        if self.op.family == "tf":
            kw["ksize"] = tf_window(self.norm["ksize"], "NCHW")
            kw["strides"] = tf_window(self.norm["strides"], "NCHW")
        return Case(self.op, kw, "NCHW", 4, self.dtype, dict(self.norm), self.expect_error)


def make_case(op: str | OpSpec, *, shape: tuple[int, ...] | None = None, dtype: Any = np.float32,
              layout: str | None = None, rank: int = 4, index_dtype: Any = np.int64,
              params: dict[str, Any] | None = None, values_kind: str = "normal", grad_kind: str = "normal",
              index_mode: str = "argmax", seed: int = 0) -> Case:
    """A valid call of ``op`` on a logical NCHW ``shape`` (elementwise: any shape).

    ``params`` overrides :data:`DEFAULT_PARAMS` (API forms).  ``index_mode`` for index-taking backwards:
    ``"argmax"`` (the reference forward's indices) or ``"random"`` (anywhere in the H*W plane, which the spec
    allows).  ``rank=3`` needs N == 1.  The arrays are C-contiguous in ``layout``.
    """
    spec = OPS[op] if isinstance(op, str) else op
    dtype = np.dtype(dtype)
    rng = np.random.default_rng(seed)
    fam = spec.family
    if fam == "elementwise":
        return _make_elementwise(spec, shape or DEFAULT_ELEM_SHAPE, dtype, rng, values_kind, grad_kind)
    layout = layout or ("NHWC" if fam == "tf" else "NCHW")
    shape = tuple(shape or DEFAULT_SHAPE)
    if rank == 3 and shape[0] != 1:
        raise ValueError("rank 3 needs N == 1")
    N, C, H, W = shape
    p = dict(DEFAULT_PARAMS[fam])
    if fam == "avg" and spec.backward:
        p.update(DEFAULT_PARAMS["avg_backward"])
    if fam == "tf":
        p["ksize"], p["strides"] = tf_window((3, 3), layout), tf_window((2, 2), layout)
    p.update(params or {})
    norm: dict[str, Any] = {}
    expect_error = None
    x4 = values(rng, shape, dtype, values_kind)

    if fam in ("max", "avg"):
        k = pair(p["kernel_size"])
        norm["kernel"] = k
        norm["stride"] = stride_pair(p.get("stride"), k)
        norm["padding"] = pair(p["padding"])
        norm["dilation"] = pair(p.get("dilation", 1))
        norm["ceil_mode"] = bool(p["ceil_mode"])
        out_hw = tuple(torch_out_size(n, *a, norm["ceil_mode"]) for n, *a in
                       zip((H, W), k, norm["stride"], norm["padding"], norm["dilation"]))
        if fam == "avg":
            norm["count_include_pad"] = bool(p["count_include_pad"])
            norm["divisor_override"] = p["divisor_override"] or None
            norm["cube_math_type"] = p.get("cube_math_type", 0)
        else:
            norm["empty_window"] = any(has_empty_window(n, o, *a) for n, o, *a in
                                       zip((H, W), out_hw, k, norm["stride"], norm["padding"], norm["dilation"]))
            if norm["empty_window"] and spec.kind == "forward":
                # spec: windows are clipped to the input and padding never wins, so a window with no input
                # cell has no maximum; the forward rejects it (the backward takes any in-plane index)
                expect_error = (poolgrad.ParamInvalidError, "x")
    elif fam == "adaptive":
        out_hw = adaptive_out(p["output_size"], (H, W))
        norm["output_size"] = out_hw
    else:  # tf
        norm["ksize"] = tf_hw(p["ksize"], layout)
        norm["strides"] = tf_hw(p["strides"], layout)
        pad = p["padding"]
        norm["padding"] = pad.decode() if isinstance(pad, bytes) else pad
        out_hw = tuple(tf_out_size(n, k, s, norm["padding"]) for n, k, s in
                       zip((H, W), norm["ksize"], norm["strides"]))
    out4 = (N, C) + tuple(out_hw)

    kw: dict[str, Any] = {}
    api = lambda a4: to_api(a4, layout, rank)  # noqa: E731
    if spec.kind == "forward":
        kw["x"] = api(x4)
    elif fam in ("max", "adaptive"):
        if index_mode == "argmax" and not norm.get("empty_window"):
            from poolgrad import slow
            from poolgrad.slow import adaptive as s_ad
            if fam == "max":
                _, ind = slow.max_pool2d_with_indices(x4, norm["kernel"], norm["stride"], norm["padding"],
                                                      norm["dilation"], norm["ceil_mode"])
            else:
                _, ind = s_ad.adaptive_max_pool2d(x4, out_hw)
        else:
            ind = rng.integers(0, H * W, size=out4)
        kw["grad_output"] = api(values(rng, out4, dtype, grad_kind))
        kw["x"] = api(x4)
        kw["indices"] = api(ind.astype(index_dtype))
    elif fam == "avg":
        kw["grad_output"] = api(values(rng, out4, dtype, grad_kind))
        kw["x"] = api(x4)
    else:  # tf backward
        from poolgrad.slow import tf_max_pool as s_tf
        x2 = s_tf.max_pool(x4, norm["ksize"], norm["strides"], norm["padding"]).astype(dtype)
        kw["x1"] = api(x4)
        kw["x2"] = api(x2)
        kw["grad"] = api(values(rng, out4, dtype, grad_kind))
    for key, val in p.items():
        if key == "dilation" and fam == "avg":
            continue
        kw[key] = val
    kw[spec.layout_kw] = layout
    if spec.returns_indices:
        kw["index_dtype"] = index_dtype
    if fam == "avg" and not spec.backward:
        kw.pop("cube_math_type", None)
    if fam == "adaptive" and spec.backward:
        kw.pop("output_size")           # read from grad_output's shape
    return Case(spec, kw, layout, rank, dtype, norm, expect_error)


def _make_elementwise(spec: OpSpec, shape: tuple[int, ...], dtype: np.dtype, rng: np.random.Generator,
                      values_kind: str, grad_kind: str) -> Case:
    x = values(rng, shape, dtype, values_kind)
    other = values(rng, shape, dtype, values_kind)
    equal = rng.random(shape) < 0.5
    y = np.where(equal, x, other).astype(dtype)
    if values_kind == "special":     # -0.0 == +0.0 must select
        zero = (x.astype(np.float64) == 0) & (rng.random(shape) < 0.5)
        y = np.where(zero, -x, y).astype(dtype)
    dy = values(rng, shape, dtype, grad_kind)
    return Case(spec, {"dy": dy, "x": x, "y": y}, None, len(shape), dtype, {})


def dtype_id(dt: Any) -> str:
    return DTYPE_IDS[DTYPES.index(np.dtype(dt))]


__all__ = ["OPS", "OpSpec", "Case", "make_case", "FORWARDS", "BACKWARDS", "INDEX_BACKWARDS",
           "DTYPES", "DTYPE_IDS", "INDEX_DTYPES", "LAYOUTS", "ORDERS", "WRITABLE_ORDERS", "FORMS", "restride",
           "values", "to_api", "to_logical", "pair", "stride_pair", "as_form", "torch_out_size",
           "max_padding_limit", "has_empty_window", "tf_out_size", "tf_window", "tf_hw", "adaptive_out",
           "snapshot_raw", "assert_raw_untouched", "byte_range", "NULLPTR", "INVALID"]
