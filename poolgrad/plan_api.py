"""Public plans: validate and plan an operator call once, then run it many times with only the data checks.

Every operator has a factory, ``plan_<operator>``, that takes the operator's arguments - each array either as an
example ``numpy.ndarray`` or as an :class:`ArraySpec` (shape, dtype, strides, alignment), plus every parameter,
``out``, ``deterministic`` and ``num_threads`` - validates all of them exactly as the operator does (raising the
same errors), plans the work, and returns a :class:`~poolgrad._capi.Plan`::

    plan = poolgrad.plan_max_pool2d_with_indices_backward(go, x, ind, 3, 2, num_threads=1)
    for go, x, ind in batches:          # same shapes, dtypes and strides every time
        gx = plan(go, x, ind)

A call of a plan checks, in compiled code, that each array is a ``numpy.ndarray`` of exactly the plan's dtype,
shape, strides (bytes) and alignment - a mismatch raises :class:`ParamInvalidError` naming the argument and what
differs - and then does only what depends on the data: the ``out=`` overlap check, the allocation of the result,
the kernels, the index range check.  The values of the example arrays are never read.

Fixed when the plan is made: ``deterministic=None`` and ``num_threads=None`` are resolved then (the process-wide
determinism setting and ``omp_get_max_threads()`` of that moment), so later changes of either do not affect an
existing plan.  A plan made with ``out=`` must be called with an ``out`` of the same signature (it is written and
returned); a plan made without one allocates its result and refuses ``out``.

After its first call a plan replays that call's recorded kernel call (``poolgrad._launch``: outputs, kernel views
and the dispatcher call in compiled code, or below the dispatcher where the kernel module records its struct) and
falls back to the operator's own run whenever the data needs a check's message.

Thread safety: a plan holds no per-call state.  Its scratch arrays come from a pool per plan (a run takes a set no
other run holds and gives it back), decisions taken on the first run are idempotent, the launch record is
read-only once made (each replay copies what it fills in), so several Python threads may call one plan at
once.  The kernels release the GIL while they run, except a replayed kernel call on arrays of less than
``poolgrad._launch.NOGIL_BYTES`` (256 KiB) in all: releasing and retaking the GIL would cost 10-15% of such a
call, whose kernel takes microseconds.
"""
from __future__ import annotations

import operator
from typing import Any, Callable, Sequence, TypeVar

import numpy as np

from . import adaptive, avg_pool, elementwise, max_pool_indices, tf_max_pool
from ._capi import Plan
from .config import resolve_deterministic, resolve_num_threads
from .errors import ParamInvalidError, ParamNullptrError

__all__ = ["ArraySpec", "Plan", "plan_max_pool2d_with_indices", "plan_max_pool2d_with_indices_backward",
           "plan_adaptive_max_pool2d", "plan_adaptive_max_pool2d_backward", "plan_avg_pool2d",
           "plan_avg_pool2d_backward", "plan_max_pool", "plan_max_pool_grad", "plan_max_pooling_grad"]

IntOrPair = int | Sequence[int]
ArrayOrSpec = Any   # numpy.ndarray or ArraySpec


class ArraySpec:
    """The signature of an array a plan will be called with, for making a plan without example data.

    Parameters
    ----------
    shape : sequence of int
        The array's shape.
    dtype : dtype-like
        Its dtype (e.g. ``numpy.float32``, ``poolgrad.bfloat16``, ``numpy.int64``).
    strides : sequence of int, optional
        Its strides in bytes, as ``numpy.ndarray.strides``; None means those of ``numpy.empty(shape, dtype)``
        (C-contiguous).
    aligned : bool, default True
        Whether the data pointer (and every stride) is aligned to the item size, as NumPy's ``aligned`` flag.
    """

    __slots__ = ("shape", "dtype", "strides", "aligned")

    def __init__(self, shape: Sequence[int], dtype: Any, strides: Sequence[int] | None = None,
                 aligned: bool = True) -> None:
        try:
            self.shape = tuple(operator.index(n) for n in shape)
        except TypeError:
            raise ParamInvalidError(f"ArraySpec: shape must be a sequence of ints, got {shape!r}") from None
        if any(n < 0 for n in self.shape):
            raise ParamInvalidError(f"ArraySpec: shape must not be negative, got {self.shape}")
        try:
            self.dtype = np.dtype(dtype)
        except TypeError:
            raise ParamInvalidError(f"ArraySpec: dtype must be a NumPy dtype, got {dtype!r}") from None
        if strides is None:
            if 0 in self.shape:
                # what NumPy gives an empty array (no memory is allocated for it)
                self.strides = np.empty(self.shape, self.dtype).strides
            else:
                steps, acc = [], self.dtype.itemsize
                for n in reversed(self.shape):
                    steps.append(acc)
                    acc *= n
                self.strides = tuple(reversed(steps))
        else:
            try:
                self.strides = tuple(operator.index(s) for s in strides)
            except TypeError:
                raise ParamInvalidError(f"ArraySpec: strides must be a sequence of ints, got {strides!r}") from None
            if len(self.strides) != len(self.shape):
                raise ParamInvalidError(f"ArraySpec: {len(self.strides)} strides for a {len(self.shape)}-D shape")
        self.aligned = bool(aligned)

    @classmethod
    def like(cls, arr: np.ndarray) -> "ArraySpec":
        """The spec of an existing array."""
        return cls(arr.shape, arr.dtype, arr.strides, bool(arr.flags.aligned))

    def example(self) -> np.ndarray:
        """A zero-filled array of this signature (its own memory, so examples never overlap each other).

        The memory is ``calloc``'d and never written, so even a large example costs address space, not RAM."""
        item = self.dtype.itemsize
        if 0 in self.shape:
            lo = hi = 0
        else:
            lo = sum(min(0, (n - 1) * s) for n, s in zip(self.shape, self.strides))
            hi = sum(max(0, (n - 1) * s) for n, s in zip(self.shape, self.strides)) + item
        raw = np.zeros(hi - lo + 128, np.uint8)
        offset = (-raw.ctypes.data) % 64 - lo
        if not self.aligned:
            offset += 1 if item > 1 else 0
            if item == 1:
                raise ParamInvalidError("ArraySpec: a 1-byte dtype is always aligned")
        return np.ndarray(self.shape, self.dtype, buffer=raw, offset=offset, strides=self.strides)

    def __repr__(self) -> str:
        return (f"ArraySpec(shape={self.shape}, dtype={self.dtype}, strides={self.strides}, "
                f"aligned={self.aligned})")


def _example(arg: Any, name: str) -> np.ndarray:
    """The example array for argument ``name``: an ndarray as given, or an ArraySpec's zero-filled example."""
    if arg is None:
        raise ParamNullptrError(f"{name}: expected an array or an ArraySpec, got None")
    if isinstance(arg, ArraySpec):
        return arg.example()
    if type(arg) is np.ndarray:
        return arg
    raise ParamInvalidError(f"{name}: a plan is made from a numpy.ndarray or an ArraySpec, got "
                            f"{type(arg).__name__}")


def _make(op: str, names: tuple[str, ...], args: tuple, out: Any, planner: Callable[..., tuple],
          deterministic: Any, num_threads: Any, backward: bool) -> Plan:
    """Validate and plan through the operator's own planner, then wrap its internal plan in a checked Plan.

    ``planner(examples, out, det, nthreads)`` runs the operator's ``_plan_*`` function (every check the operator
    makes, same errors) and returns its (internal plan, validated arrays)."""
    examples = tuple(_example(a, n) for a, n in zip(args, names))
    out_ex = None if out is None else _example(out, "out")
    det = resolve_deterministic(deterministic) if backward else None
    nthreads = resolve_num_threads(num_threads)
    run, _ = planner(examples, out_ex, det, nthreads)
    return Plan(op, run, names, examples, out_ex, backward, det, nthreads)


F = TypeVar("F", bound=Callable[..., Plan])


def _documented(arrays: tuple[str, ...], params: str | None, result: str, note: str = "") -> Callable[[F], F]:
    """Give a factory its docstring, written once here for all nine: ``arrays`` are the array arguments of a
    call, ``params`` the operator's other arguments, ``result`` what a call returns, ``note`` a sentence about
    the parameters (e.g. which of them still depends on the data)."""

    def apply(factory: F) -> F:
        op = factory.__name__[len("plan_"):]
        forward = op in ("max_pool2d_with_indices", "adaptive_max_pool2d", "avg_pool2d", "max_pool")
        call = ", ".join(arrays)
        lines = [f"Plan :func:`poolgrad.{op}`; called as ``plan({call})``"
                 + ("" if forward else " (``out=`` too when made with one)") + f", returns ``{result}``.",
                 "", "Parameters", "----------",
                 f"{call} : numpy.ndarray or ArraySpec",
                 "    Examples of the arrays every call will pass (their values are not read) or their signatures."]
        if params:
            lines += [params, f"    As for :func:`poolgrad.{op}`." + (f" {note}" if note else "")]
        if forward:
            lines += ["num_threads", "    As for the operator, resolved now (None: ``omp_get_max_threads()`` of this"
                      " moment)."]
        else:
            lines += ["out : numpy.ndarray or ArraySpec, optional",
                      f"    The signature of every call's ``out``; None: calls allocate ``{result}``."
                      + (f" {note}" if note and not params else ""),
                      "deterministic, num_threads",
                      "    As for the operator, resolved now (None: the process-wide setting /"
                      " ``omp_get_max_threads()`` of this moment)."]
        lines += ["", "Returns", "-------", "Plan", "    Raises what the operator raises for these arguments."]
        factory.__doc__ = "\n".join(lines)
        return factory

    return apply


# ---- max pooling with indices ----

@_documented(("x",), "kernel_size, stride, padding, dilation, ceil_mode, layout, index_dtype", "(y, indices)")
def plan_max_pool2d_with_indices(x: ArrayOrSpec, kernel_size: IntOrPair, stride: IntOrPair | None = None,
                                 padding: IntOrPair = 0, dilation: IntOrPair = 1, ceil_mode: bool = False, *,
                                 layout: str = "NCHW", index_dtype: Any = np.int64,
                                 num_threads: int | None = None) -> Plan:
    return _make("max_pool2d_with_indices", ("x",), (x,), None,
                 lambda ex, out, det, nt: max_pool_indices._plan_forward(
                     ex[0], kernel_size, stride, padding, dilation, ceil_mode, layout, index_dtype, nt),
                 None, num_threads, False)


@_documented(("grad_output", "x", "indices"), "kernel_size, stride, padding, dilation, ceil_mode, layout",
             "grad_x")
def plan_max_pool2d_with_indices_backward(grad_output: ArrayOrSpec, x: ArrayOrSpec, indices: ArrayOrSpec,
                                          kernel_size: IntOrPair, stride: IntOrPair | None = None,
                                          padding: IntOrPair = 0, dilation: IntOrPair = 1,
                                          ceil_mode: bool = False, *, layout: str = "NCHW",
                                          out: ArrayOrSpec | None = None, deterministic: bool | None = None,
                                          num_threads: int | None = None) -> Plan:
    return _make("max_pool2d_with_indices_backward", ("grad_output", "x", "indices"), (grad_output, x, indices),
                 out, lambda ex, o, det, nt: max_pool_indices._plan_backward(
                     *ex, kernel_size, stride, padding, dilation, ceil_mode, layout, o, det, nt),
                 deterministic, num_threads, True)


# ---- adaptive max pooling ----

@_documented(("x",), "output_size, layout, index_dtype", "(y, indices)")
def plan_adaptive_max_pool2d(x: ArrayOrSpec, output_size: int | Sequence[int | None], *, layout: str = "NCHW",
                             index_dtype: Any = np.int64, num_threads: int | None = None) -> Plan:
    return _make("adaptive_max_pool2d", ("x",), (x,), None,
                 lambda ex, out, det, nt: adaptive._plan_forward(ex[0], output_size, layout, index_dtype, nt),
                 None, num_threads, False)


@_documented(("grad_output", "x", "indices"), "layout", "grad_x")
def plan_adaptive_max_pool2d_backward(grad_output: ArrayOrSpec, x: ArrayOrSpec, indices: ArrayOrSpec, *,
                                      layout: str = "NCHW", out: ArrayOrSpec | None = None,
                                      deterministic: bool | None = None, num_threads: int | None = None) -> Plan:
    return _make("adaptive_max_pool2d_backward", ("grad_output", "x", "indices"), (grad_output, x, indices), out,
                 lambda ex, o, det, nt: adaptive._plan_backward(*ex, layout, o, det, nt),
                 deterministic, num_threads, True)


# ---- average pooling ----

@_documented(("x",), "kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override, layout",
             "y")
def plan_avg_pool2d(x: ArrayOrSpec, kernel_size: IntOrPair, stride: IntOrPair | None = None,
                    padding: IntOrPair = 0, ceil_mode: bool = False, count_include_pad: bool = True,
                    divisor_override: int | None = None, *, layout: str = "NCHW",
                    num_threads: int | None = None) -> Plan:
    return _make("avg_pool2d", ("x",), (x,), None,
                 lambda ex, out, det, nt: avg_pool._plan_forward(
                     ex[0], kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override, layout,
                     nt),
                 None, num_threads, False)


@_documented(("grad_output", "x"), "kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override, "
             "cube_math_type, layout", "grad_x")
def plan_avg_pool2d_backward(grad_output: ArrayOrSpec, x: ArrayOrSpec, kernel_size: IntOrPair,
                             stride: IntOrPair | None = None, padding: IntOrPair = 0, ceil_mode: bool = False,
                             count_include_pad: bool = True, divisor_override: int | None = None,
                             cube_math_type: int = 0, *, layout: str = "NCHW", out: ArrayOrSpec | None = None,
                             deterministic: bool | None = None, num_threads: int | None = None) -> Plan:
    return _make("avg_pool2d_backward", ("grad_output", "x"), (grad_output, x), out,
                 lambda ex, o, det, nt: avg_pool._plan_backward(
                     *ex, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override,
                     cube_math_type, layout, o, det, nt),
                 deterministic, num_threads, True)


# ---- TensorFlow max pooling ----

@_documented(("x",), "ksize, strides, padding, data_format", "y")
def plan_max_pool(x: ArrayOrSpec, ksize: Sequence[int], strides: Sequence[int], padding: str | bytes,
                  data_format: str = "NHWC", *, num_threads: int | None = None) -> Plan:
    return _make("max_pool", ("x",), (x,), None,
                 lambda ex, out, det, nt: tf_max_pool._plan_forward(ex[0], ksize, strides, padding, data_format,
                                                                    nt),
                 None, num_threads, False)


@_documented(("x1", "x2", "grad"), "ksize, strides, padding, data_format, check_orig_output", "grad_x1",
             note="``check_orig_output`` compares ``x2`` on every call (it depends on the data).")
def plan_max_pool_grad(x1: ArrayOrSpec, x2: ArrayOrSpec, grad: ArrayOrSpec, ksize: Sequence[int],
                       strides: Sequence[int], padding: str | bytes, data_format: str = "NHWC", *,
                       check_orig_output: bool = False, out: ArrayOrSpec | None = None,
                       deterministic: bool | None = None, num_threads: int | None = None) -> Plan:
    return _make("max_pool_grad", ("x1", "x2", "grad"), (x1, x2, grad), out,
                 lambda ex, o, det, nt: tf_max_pool._plan_backward(
                     *ex, ksize, strides, padding, data_format, check_orig_output, o, det, nt),
                 deterministic, num_threads, True)


# ---- element-wise max pooling gradient ----

@_documented(("dy", "x", "y"), None, "dx", note="At call time ``out`` may be ``dy`` itself.")
def plan_max_pooling_grad(dy: ArrayOrSpec, x: ArrayOrSpec, y: ArrayOrSpec, *, out: ArrayOrSpec | None = None,
                          deterministic: bool | None = None, num_threads: int | None = None) -> Plan:
    return _make("max_pooling_grad", ("dy", "x", "y"), (dy, x, y), out,
                 lambda ex, o, det, nt: elementwise._plan(*ex, o, det, nt),
                 deterministic, num_threads, True)
