"""poolgrad's pooling operators registered with ``torch.library`` (namespace ``poolgrad``).

Six custom operators, each a thin bridge from CPU tensors to poolgrad's public NumPy API:

* ``poolgrad::max_pool2d_with_indices`` / ``poolgrad::max_pool2d_with_indices_backward``
* ``poolgrad::adaptive_max_pool2d`` / ``poolgrad::adaptive_max_pool2d_backward``
* ``poolgrad::avg_pool2d`` / ``poolgrad::avg_pool2d_backward``

Every operator has a fake kernel (shape and stride inference, so ``torch.compile(fullgraph=True)`` and
``torch.export`` can trace through it) and an autograd formula. The backwards are differentiable themselves: the
max and adaptive backwards scatter ``grad_output`` to the saved indices, so their gradient with respect to
``grad_output`` is a gather of the incoming gradient at those indices; the average backward is the transpose of
the average forward, so its gradient is an average pooling with the same parameters.

Tensors reach poolgrad as NumPy views (no copies): a channels-last 4-D tensor is passed as its NHWC permutation
with ``layout="NHWC"``, a bfloat16 tensor is reinterpreted as int16 and then viewed as ``poolgrad.bfloat16``.
Results come back with ``torch.from_numpy`` (sharing memory) in the input's memory format.

Two ways in, one set of kernels (``_*_kernel`` below; bench/experiments/torch_overhead.py measures both ways):

* ``run_max_pool2d``, ``run_adaptive_max_pool2d`` and ``run_avg_pool2d`` (what :mod:`poolgrad.torch` calls) go
  through the custom operators whenever anything may be watching the dispatcher (``torch.compile`` and
  ``torch.export`` tracing, tensor subclasses and fake tensors, dispatch and function modes, ``torch.func``
  transforms, ``torch.jit.trace``, the profiler); in plain eager mode they skip the dispatcher and call the same
  kernels through a small ``torch.autograd.Function``, which saves most of the per-call cost of the operator
  path (custom-op wrappers, a second dispatch below autograd, argument re-packing) and nothing else;
* the operators themselves (``torch.ops.poolgrad.*``), for graphs and for direct use.

The backward of the eager path runs the kernel directly too, unless a graph of the backward is being recorded
(``create_graph=True``), where it calls the backward operator, whose own autograd formula gives double backward.

The thread count (``torch.get_num_threads()``) and the determinism switch
(``torch.are_deterministic_algorithms_enabled()``) are read when a kernel runs, not when a graph is traced, so a
compiled model follows later changes of either.
"""
from __future__ import annotations

import functools
from typing import Any, Optional, Sequence, cast

import numpy as np
import torch

import poolgrad as pg

__all__ = ["is_channels_last", "check_cpu", "output_strides", "internal_index_dtype", "run_max_pool2d",
           "run_adaptive_max_pool2d", "run_avg_pool2d"]

Tensor = torch.Tensor


# --------------------------------------------------------------------------------------------------------------
# Tensor <-> NumPy bridge
# --------------------------------------------------------------------------------------------------------------

def is_channels_last(t: Tensor) -> bool:
    """True when ``t`` is a 4-D tensor stored channels-last and not also plain contiguous.

    A tensor that is both (size-1 dimensions make that possible) counts as contiguous, so the choice never
    depends on strides of size-1 dimensions. The fake kernels and the real ones use this one rule, so the
    strides a compiled graph expects are the strides it gets.
    """
    return t.dim() == 4 and not t.is_contiguous() and t.is_contiguous(memory_format=torch.channels_last)


def check_cpu(t: Tensor, name: str) -> None:
    """Raise :class:`poolgrad.ParamInvalidError` naming ``name`` unless ``t`` lives on the CPU.

    poolgrad's kernels read host memory; copying a device tensor to the host behind the user's back would hide
    a transfer that usually costs more than the pooling itself, so the caller decides.
    """
    if t.device.type != "cpu":
        raise pg.ParamInvalidError(
            f"{name}: poolgrad.torch runs on CPU tensors only, got a tensor on device '{t.device}'; move it "
            f"with .cpu() or use torch.nn.functional's pooling for this device")


def output_strides(shape: Sequence[int], channels_last: bool) -> tuple[int, ...]:
    """The strides ``torch.empty(shape, memory_format=...)`` gives: dense, channels-last order for 4-D when asked.

    Sizes of 0 count as 1, as PyTorch computes them.
    """
    n = len(shape)
    order = (1, 3, 2, 0) if channels_last and n == 4 else tuple(range(n - 1, -1, -1))
    strides = [0] * n
    step = 1
    for d in order:
        strides[d] = step
        step *= max(int(shape[d]), 1)
    return tuple(strides)


def _numpy_view(t: Tensor, channels_last: bool) -> np.ndarray:
    """A NumPy view of ``t`` (NHWC order when ``channels_last``); bfloat16 travels as int16 bits, viewed back."""
    if t.requires_grad:                     # .numpy() refuses tensors that require grad
        t = t.detach()
    if channels_last:
        t = t.permute(0, 2, 3, 1)
    if t.dtype == torch.bfloat16:
        return t.view(torch.int16).numpy().view(pg.bfloat16)
    return t.numpy()


def _tensor_view(a: np.ndarray, channels_last: bool) -> Tensor:
    """The tensor sharing ``a``'s memory (NHWC ``a`` comes back as a channels-last NCHW tensor)."""
    if a.dtype == pg.bfloat16:
        t = torch.from_numpy(a.view(np.int16)).view(torch.bfloat16)
    else:
        t = torch.from_numpy(a)
    if channels_last:
        t = t.permute(0, 3, 1, 2)
    return t


@functools.lru_cache(maxsize=256)
def _dense_strides(shape: torch.Size, channels_last: bool) -> tuple[int, ...]:
    # A training step asks for the same few shapes every step: a dictionary look-up instead of the loop.
    return output_strides(shape, channels_last)


def _in_format(t: Tensor, channels_last: bool) -> Tensor:
    """``t`` with exactly the strides the fake kernel promised (a copy only when poolgrad chose other strides).

    poolgrad's outputs follow the input's memory order, so for contiguous and channels-last inputs this is the
    identity; inputs with other strides (slices, transposes) get a dense result here.
    """
    want = _dense_strides(t.shape, channels_last)
    if t.stride() == want:
        return t
    out = torch.empty_strided(t.shape, want, dtype=t.dtype)
    out.copy_(t)
    return out


def _layout(channels_last: bool) -> str:
    return "NHWC" if channels_last else "NCHW"


def _numpy_dtype(dtype: torch.dtype) -> np.dtype:
    """The NumPy dtype poolgrad sees for a tensor of ``dtype`` (for the zero-batch shape checks of fake kernels)."""
    # A table, not torch.empty(0, dtype=dtype).numpy(): inside a fake kernel every new tensor is a fake one.
    known = _NUMPY_DTYPES.get(dtype)
    if known is not None:
        return known
    raise pg.ParamInvalidError(f"x: expected dtype one of (float32, float64, float16, bfloat16), got {dtype}")


_NUMPY_DTYPES = {torch.float32: np.dtype(np.float32), torch.float64: np.dtype(np.float64),
                 torch.float16: np.dtype(np.float16), torch.bfloat16: np.dtype(pg.bfloat16)}


_INDEX_DTYPES: dict[torch.dtype, np.dtype[Any]] = {torch.int64: np.dtype(np.int64),
                                                   torch.int32: np.dtype(np.int32)}


def _index_numpy(index_dtype: torch.dtype) -> np.dtype[Any]:
    known = _INDEX_DTYPES.get(index_dtype)
    if known is not None:
        return known
    raise pg.ParamInvalidError(f"index_dtype: expected torch.int32 or torch.int64, got {index_dtype}")


def internal_index_dtype(x: Tensor) -> torch.dtype:
    """The index dtype to use when the caller never sees the indices (they only travel to the backward).

    int32 for channels-last inputs whose plane fits it: bench/experiments/torch_overhead.py (columns ``np`` and
    ``np_i32``) measured poolgrad's NHWC forward + backward faster with int32 indices on all 19 channels-last max
    layers of the five models (batch 32, 1 thread; int64 / int32 time 1.03-1.32x, median 1.16x; a second,
    noisier run: median 1.11x, 4 of 19 the other way), since half the index bytes are written and read.  In
    NCHW the int32 backward was slower on small planes (0.6-0.7x on 32x512x7x7 and 32x256x14x14 k3s1p1,
    backward alone, 25 interleaved repetitions), so NCHW keeps int64.  Symbolic sizes (dynamic shapes) keep
    int64 too, so the choice adds no guard to a traced graph.
    """
    if is_channels_last(x):
        h, w = x.shape[-2], x.shape[-1]
        if _concrete(h, w) and h * w <= np.iinfo(np.int32).max:
            return torch.int32
    return torch.int64


def _plain_eager(t: Tensor) -> bool:
    """True when nothing but eager autograd can observe a call on ``t``, so the dispatcher may be skipped.

    Checked in this order so that ``torch.compile`` (where ``is_compiling()`` is a constant True) never traces
    the private calls after it.
    """
    return (not torch.compiler.is_compiling()
            and type(t) is torch.Tensor                        # no subclass, fake or functional tensor
            and not torch._C._autograd._profiler_enabled()      # keep the operators' names in profiles
            and torch._C._len_torch_dispatch_stack() == 0       # no TorchDispatchMode (make_fx, FakeTensorMode)
            and not torch._C._is_torch_function_mode_enabled()
            and not torch._C._are_functorch_transforms_active()
            and torch._C._get_tracing_state() is None)          # not inside torch.jit.trace


def _concrete(*sizes: object) -> bool:
    return all(isinstance(s, int) for s in sizes)


def _probe(t: Tensor) -> np.ndarray:
    """An empty (batch 0) NumPy array with ``t``'s channels, plane and dtype, in NCHW order.

    poolgrad validates every parameter and computes the output size for a batch of 0 without any work, so fake
    kernels ask it, and a traced graph fails on exactly the inputs the eager call fails on, with the same
    messages.
    """
    c, h, w = (int(s) for s in t.shape[-3:])
    return np.empty((0, c, h, w), dtype=_numpy_dtype(t.dtype))


def _pool_size(n: object, k: int, s: int, p: int, d: int, ceil_mode: bool) -> object:
    """PyTorch's output size rule, written for symbolic sizes (dynamic shapes) where no probe can run."""
    span = n + 2 * p - d * (k - 1) - 1 + (s - 1 if ceil_mode else 0)
    out = span // s + 1
    if ceil_mode and (out - 1) * s >= n + p:
        out = out - 1
    return out


def _out_shape(x: Tensor, hw: Sequence[object]) -> list[object]:
    return [*x.shape[:-2], *hw]


# --------------------------------------------------------------------------------------------------------------
# max_pool2d_with_indices
# --------------------------------------------------------------------------------------------------------------

def _max_kernel(x: Tensor, kernel_size: Sequence[int], stride: Sequence[int], padding: Sequence[int],
                dilation: Sequence[int], ceil_mode: bool, index_dtype: torch.dtype) -> tuple[Tensor, Tensor]:
    cl = is_channels_last(x)
    y, idx = pg.max_pool2d_with_indices(_numpy_view(x, cl), kernel_size, stride, padding, dilation, ceil_mode,
                                        layout=_layout(cl), index_dtype=_index_numpy(index_dtype),
                                        num_threads=torch.get_num_threads())
    return _in_format(_tensor_view(y, cl), cl), _in_format(_tensor_view(idx, cl), cl)


def _max_backward_kernel(grad_output: Tensor, x: Tensor, indices: Tensor, kernel_size: Sequence[int],
                         stride: Sequence[int], padding: Sequence[int], dilation: Sequence[int],
                         ceil_mode: bool) -> Tensor:
    cl = is_channels_last(x)
    gx = pg.max_pool2d_with_indices_backward(
        _numpy_view(grad_output, cl), _numpy_view(x, cl), _numpy_view(indices, cl), kernel_size, stride, padding,
        dilation, ceil_mode, layout=_layout(cl), deterministic=torch.are_deterministic_algorithms_enabled(),
        num_threads=torch.get_num_threads())
    return _in_format(_tensor_view(gx, cl), cl)


@torch.library.custom_op("poolgrad::max_pool2d_with_indices", mutates_args=())
def max_pool2d_with_indices(x: Tensor, kernel_size: Sequence[int], stride: Sequence[int], padding: Sequence[int],
                            dilation: Sequence[int], ceil_mode: bool,
                            index_dtype: torch.dtype = torch.int64) -> tuple[Tensor, Tensor]:
    """Max pooling forward with PyTorch's semantics; returns (values, plane indices of ``index_dtype``, int64 by
    default as PyTorch's, or int32)."""
    check_cpu(x, "input")
    return _max_kernel(x, kernel_size, stride, padding, dilation, ceil_mode, index_dtype)


@max_pool2d_with_indices.register_fake
def _max_pool2d_with_indices_fake(x: Tensor, kernel_size: Sequence[int], stride: Sequence[int],
                                  padding: Sequence[int], dilation: Sequence[int], ceil_mode: bool,
                                  index_dtype: torch.dtype = torch.int64) -> tuple[Tensor, Tensor]:
    _index_numpy(index_dtype)
    if _concrete(*x.shape):
        y, _ = pg.max_pool2d_with_indices(_probe(x), kernel_size, stride, padding, dilation, ceil_mode)
        hw = y.shape[-2:]
    else:
        hw = [_pool_size(x.shape[-2 + i], kernel_size[i], stride[i], padding[i], dilation[i], ceil_mode)
              for i in range(2)]
    shape = _out_shape(x, hw)
    strides = output_strides(shape, is_channels_last(x))
    return x.new_empty_strided(shape, strides), x.new_empty_strided(shape, strides, dtype=index_dtype)


def _max_setup(ctx: Any, inputs: tuple, output: Any) -> None:
    x, kernel_size, stride, padding, dilation, ceil_mode = inputs[:6]
    _, idx = output
    ctx.save_for_backward(x, idx)
    ctx.params = (kernel_size, stride, padding, dilation, ceil_mode)
    ctx.mark_non_differentiable(idx)
    # Otherwise autograd fills a zero tensor of the indices' shape for their (never used) gradient every step.
    ctx.set_materialize_grads(False)


def _max_backward(ctx: Any, grad_y: Tensor | None, _grad_idx: Tensor | None) -> tuple:
    if grad_y is None:                      # only the indices were used
        return (None,) * 7
    x, idx = ctx.saved_tensors
    grad_x = max_pool2d_with_indices_backward(grad_y, x, idx, *ctx.params)
    return (grad_x,) + (None,) * 6


max_pool2d_with_indices.register_autograd(_max_backward, setup_context=_max_setup)


@torch.library.custom_op("poolgrad::max_pool2d_with_indices_backward", mutates_args=())
def max_pool2d_with_indices_backward(grad_output: Tensor, x: Tensor, indices: Tensor, kernel_size: Sequence[int],
                                     stride: Sequence[int], padding: Sequence[int], dilation: Sequence[int],
                                     ceil_mode: bool) -> Tensor:
    """Gradient of :func:`max_pool2d_with_indices` with respect to ``x`` (a scatter-add to ``indices``, int32 or
    int64)."""
    check_cpu(grad_output, "grad_output")
    check_cpu(x, "input")
    check_cpu(indices, "indices")
    return _max_backward_kernel(grad_output, x, indices, kernel_size, stride, padding, dilation, ceil_mode)


@max_pool2d_with_indices_backward.register_fake
def _max_pool2d_with_indices_backward_fake(grad_output: Tensor, x: Tensor, indices: Tensor,
                                           kernel_size: Sequence[int], stride: Sequence[int],
                                           padding: Sequence[int], dilation: Sequence[int],
                                           ceil_mode: bool) -> Tensor:
    return x.new_empty_strided(x.shape, output_strides(x.shape, is_channels_last(x)))


def _gather(grad: Tensor, idx: Tensor) -> Tensor:
    """``grad`` read at the plane indices ``idx`` (the transpose of a scatter-add to ``idx``)."""
    return grad.flatten(-2).gather(-1, idx.flatten(-2).long()).reshape(idx.shape)


def _scatter_setup(ctx: Any, inputs: tuple, output: Any) -> None:
    ctx.save_for_backward(inputs[2])


def _scatter_backward(ctx: Any, grad_grad_x: Tensor) -> tuple:
    (idx,) = ctx.saved_tensors
    return (_gather(grad_grad_x, idx),) + (None,) * 7


max_pool2d_with_indices_backward.register_autograd(_scatter_backward, setup_context=_scatter_setup)


class _MaxPoolEager(torch.autograd.Function):
    """The eager path of :func:`run_max_pool2d`: the operator's autograd formula, without the dispatcher."""

    @staticmethod
    def forward(ctx: Any, x: Tensor, kernel_size: Sequence[int], stride: Sequence[int], padding: Sequence[int],
                dilation: Sequence[int], ceil_mode: bool, index_dtype: torch.dtype) -> tuple[Tensor, Tensor]:
        out = _max_kernel(x, kernel_size, stride, padding, dilation, ceil_mode, index_dtype)
        _max_setup(ctx, (x, kernel_size, stride, padding, dilation, ceil_mode), out)
        return out

    @staticmethod
    def backward(ctx: Any, grad_y: Tensor | None, _grad_idx: Tensor | None) -> tuple[Tensor | None, ...]:
        if grad_y is None:
            return (None,) * 7
        x, idx = ctx.saved_tensors
        if torch.is_grad_enabled() or not _plain_eager(grad_y):    # recording a graph of the backward
            return _max_backward(ctx, grad_y, None)
        return (_max_backward_kernel(grad_y, x, idx, *ctx.params),) + (None,) * 6


def run_max_pool2d(x: Tensor, kernel_size: Sequence[int], stride: Sequence[int], padding: Sequence[int],
                   dilation: Sequence[int], ceil_mode: bool, index_dtype: torch.dtype) -> tuple[Tensor, Tensor]:
    """``poolgrad::max_pool2d_with_indices``, in plain eager mode without the dispatcher (module docstring)."""
    if _plain_eager(x):
        if x.requires_grad and torch.is_grad_enabled():
            return cast(tuple[Tensor, Tensor], _MaxPoolEager.apply(  # type: ignore[no-untyped-call]
                x, kernel_size, stride, padding, dilation, ceil_mode, index_dtype))
        return _max_kernel(x, kernel_size, stride, padding, dilation, ceil_mode, index_dtype)
    return cast(tuple[Tensor, Tensor], torch.ops.poolgrad.max_pool2d_with_indices(
        x, kernel_size, stride, padding, dilation, ceil_mode, index_dtype))


# --------------------------------------------------------------------------------------------------------------
# adaptive_max_pool2d
# --------------------------------------------------------------------------------------------------------------

def _adaptive_kernel(x: Tensor, output_size: Sequence[int], index_dtype: torch.dtype) -> tuple[Tensor, Tensor]:
    cl = is_channels_last(x)
    y, idx = pg.adaptive_max_pool2d(_numpy_view(x, cl), output_size, layout=_layout(cl),
                                    index_dtype=_index_numpy(index_dtype), num_threads=torch.get_num_threads())
    return _in_format(_tensor_view(y, cl), cl), _in_format(_tensor_view(idx, cl), cl)


def _adaptive_backward_kernel(grad_output: Tensor, x: Tensor, indices: Tensor) -> Tensor:
    cl = is_channels_last(x)
    gx = pg.adaptive_max_pool2d_backward(
        _numpy_view(grad_output, cl), _numpy_view(x, cl), _numpy_view(indices, cl), layout=_layout(cl),
        deterministic=torch.are_deterministic_algorithms_enabled(), num_threads=torch.get_num_threads())
    return _in_format(_tensor_view(gx, cl), cl)


@torch.library.custom_op("poolgrad::adaptive_max_pool2d", mutates_args=())
def adaptive_max_pool2d(x: Tensor, output_size: Sequence[int],
                        index_dtype: torch.dtype = torch.int64) -> tuple[Tensor, Tensor]:
    """Adaptive max pooling forward (PyTorch's windows); returns (values, plane indices of ``index_dtype``,
    int64 by default as PyTorch's, or int32)."""
    check_cpu(x, "input")
    return _adaptive_kernel(x, output_size, index_dtype)


@adaptive_max_pool2d.register_fake
def _adaptive_max_pool2d_fake(x: Tensor, output_size: Sequence[int],
                              index_dtype: torch.dtype = torch.int64) -> tuple[Tensor, Tensor]:
    _index_numpy(index_dtype)
    if _concrete(*x.shape):
        pg.adaptive_max_pool2d(_probe(x), output_size)
    shape = _out_shape(x, output_size)
    strides = output_strides(shape, is_channels_last(x))
    return x.new_empty_strided(shape, strides), x.new_empty_strided(shape, strides, dtype=index_dtype)


def _adaptive_setup(ctx: Any, inputs: tuple, output: Any) -> None:
    _, idx = output
    ctx.save_for_backward(inputs[0], idx)
    ctx.mark_non_differentiable(idx)
    ctx.set_materialize_grads(False)       # as in _max_setup


def _adaptive_backward(ctx: Any, grad_y: Tensor | None, _grad_idx: Tensor | None) -> tuple:
    if grad_y is None:
        return None, None, None
    x, idx = ctx.saved_tensors
    return adaptive_max_pool2d_backward(grad_y, x, idx), None, None


adaptive_max_pool2d.register_autograd(_adaptive_backward, setup_context=_adaptive_setup)


@torch.library.custom_op("poolgrad::adaptive_max_pool2d_backward", mutates_args=())
def adaptive_max_pool2d_backward(grad_output: Tensor, x: Tensor, indices: Tensor) -> Tensor:
    """Gradient of :func:`adaptive_max_pool2d` with respect to ``x`` (a scatter-add to ``indices``, int32 or
    int64)."""
    check_cpu(grad_output, "grad_output")
    check_cpu(x, "input")
    check_cpu(indices, "indices")
    return _adaptive_backward_kernel(grad_output, x, indices)


@adaptive_max_pool2d_backward.register_fake
def _adaptive_max_pool2d_backward_fake(grad_output: Tensor, x: Tensor, indices: Tensor) -> Tensor:
    return x.new_empty_strided(x.shape, output_strides(x.shape, is_channels_last(x)))


def _adaptive_scatter_setup(ctx: Any, inputs: tuple, output: Any) -> None:
    ctx.save_for_backward(inputs[2])


def _adaptive_scatter_backward(ctx: Any, grad_grad_x: Tensor) -> tuple:
    (idx,) = ctx.saved_tensors
    return _gather(grad_grad_x, idx), None, None


adaptive_max_pool2d_backward.register_autograd(_adaptive_scatter_backward, setup_context=_adaptive_scatter_setup)


class _AdaptiveMaxPoolEager(torch.autograd.Function):
    """The eager path of :func:`run_adaptive_max_pool2d` (as :class:`_MaxPoolEager`)."""

    @staticmethod
    def forward(ctx: Any, x: Tensor, output_size: Sequence[int],
                index_dtype: torch.dtype) -> tuple[Tensor, Tensor]:
        out = _adaptive_kernel(x, output_size, index_dtype)
        _adaptive_setup(ctx, (x, output_size), out)
        return out

    @staticmethod
    def backward(ctx: Any, grad_y: Tensor | None, _grad_idx: Tensor | None) -> tuple[Tensor | None, ...]:
        if grad_y is None:
            return None, None, None
        x, idx = ctx.saved_tensors
        if torch.is_grad_enabled() or not _plain_eager(grad_y):
            return _adaptive_backward(ctx, grad_y, None)
        return _adaptive_backward_kernel(grad_y, x, idx), None, None


def run_adaptive_max_pool2d(x: Tensor, output_size: Sequence[int],
                            index_dtype: torch.dtype) -> tuple[Tensor, Tensor]:
    """``poolgrad::adaptive_max_pool2d``, in plain eager mode without the dispatcher (module docstring)."""
    if _plain_eager(x):
        if x.requires_grad and torch.is_grad_enabled():
            return cast(tuple[Tensor, Tensor], _AdaptiveMaxPoolEager.apply(  # type: ignore[no-untyped-call]
                x, output_size, index_dtype))
        return _adaptive_kernel(x, output_size, index_dtype)
    return cast(tuple[Tensor, Tensor], torch.ops.poolgrad.adaptive_max_pool2d(x, output_size, index_dtype))


# --------------------------------------------------------------------------------------------------------------
# avg_pool2d
# --------------------------------------------------------------------------------------------------------------

def _avg_kernel(x: Tensor, kernel_size: Sequence[int], stride: Sequence[int], padding: Sequence[int],
                ceil_mode: bool, count_include_pad: bool, divisor_override: Optional[int]) -> Tensor:
    cl = is_channels_last(x)
    y = pg.avg_pool2d(_numpy_view(x, cl), kernel_size, stride, padding, ceil_mode, count_include_pad,
                      divisor_override, layout=_layout(cl), num_threads=torch.get_num_threads())
    return _in_format(_tensor_view(y, cl), cl)


def _avg_backward_kernel(grad_output: Tensor, x: Tensor, kernel_size: Sequence[int], stride: Sequence[int],
                         padding: Sequence[int], ceil_mode: bool, count_include_pad: bool,
                         divisor_override: Optional[int]) -> Tensor:
    cl = is_channels_last(x)
    gx = pg.avg_pool2d_backward(
        _numpy_view(grad_output, cl), _numpy_view(x, cl), kernel_size, stride, padding, ceil_mode,
        count_include_pad, divisor_override, layout=_layout(cl),
        deterministic=torch.are_deterministic_algorithms_enabled(), num_threads=torch.get_num_threads())
    return _in_format(_tensor_view(gx, cl), cl)


@torch.library.custom_op("poolgrad::avg_pool2d", mutates_args=())
def avg_pool2d(x: Tensor, kernel_size: Sequence[int], stride: Sequence[int], padding: Sequence[int],
               ceil_mode: bool, count_include_pad: bool, divisor_override: Optional[int]) -> Tensor:
    """Average pooling forward with PyTorch's divisor rule."""
    check_cpu(x, "input")
    return _avg_kernel(x, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override)


@avg_pool2d.register_fake
def _avg_pool2d_fake(x: Tensor, kernel_size: Sequence[int], stride: Sequence[int], padding: Sequence[int],
                     ceil_mode: bool, count_include_pad: bool, divisor_override: Optional[int]) -> Tensor:
    if _concrete(*x.shape):
        y = pg.avg_pool2d(_probe(x), kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override)
        hw = y.shape[-2:]
    else:
        hw = [_pool_size(x.shape[-2 + i], kernel_size[i], stride[i], padding[i], 1, ceil_mode) for i in range(2)]
    shape = _out_shape(x, hw)
    return x.new_empty_strided(shape, output_strides(shape, is_channels_last(x)))


def _avg_setup(ctx: Any, inputs: tuple, output: Any) -> None:
    ctx.save_for_backward(inputs[0])
    ctx.params = tuple(inputs[1:])


def _avg_backward(ctx: Any, grad_y: Tensor) -> tuple:
    (x,) = ctx.saved_tensors
    return (avg_pool2d_backward(grad_y, x, *ctx.params),) + (None,) * 6


avg_pool2d.register_autograd(_avg_backward, setup_context=_avg_setup)


@torch.library.custom_op("poolgrad::avg_pool2d_backward", mutates_args=())
def avg_pool2d_backward(grad_output: Tensor, x: Tensor, kernel_size: Sequence[int], stride: Sequence[int],
                        padding: Sequence[int], ceil_mode: bool, count_include_pad: bool,
                        divisor_override: Optional[int]) -> Tensor:
    """Gradient of :func:`avg_pool2d` with respect to ``x`` (a gather, deterministic in both modes)."""
    check_cpu(grad_output, "grad_output")
    check_cpu(x, "input")
    return _avg_backward_kernel(grad_output, x, kernel_size, stride, padding, ceil_mode, count_include_pad,
                                divisor_override)


@avg_pool2d_backward.register_fake
def _avg_pool2d_backward_fake(grad_output: Tensor, x: Tensor, kernel_size: Sequence[int], stride: Sequence[int],
                              padding: Sequence[int], ceil_mode: bool, count_include_pad: bool,
                              divisor_override: Optional[int]) -> Tensor:
    return x.new_empty_strided(x.shape, output_strides(x.shape, is_channels_last(x)))


def _avg_transpose_setup(ctx: Any, inputs: tuple, output: Any) -> None:
    ctx.params = tuple(inputs[2:])


def _avg_transpose_backward(ctx: Any, grad_grad_x: Tensor) -> tuple:
    # The backward is the transpose of the (linear) forward, so its own gradient is the forward again.
    return (avg_pool2d(grad_grad_x, *ctx.params),) + (None,) * 7


avg_pool2d_backward.register_autograd(_avg_transpose_backward, setup_context=_avg_transpose_setup)


class _AvgPoolEager(torch.autograd.Function):
    """The eager path of :func:`run_avg_pool2d` (as :class:`_MaxPoolEager`)."""

    @staticmethod
    def forward(ctx: Any, x: Tensor, kernel_size: Sequence[int], stride: Sequence[int], padding: Sequence[int],
                ceil_mode: bool, count_include_pad: bool, divisor_override: Optional[int]) -> Tensor:
        y = _avg_kernel(x, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override)
        _avg_setup(ctx, (x, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override), y)
        return y

    @staticmethod
    def backward(ctx: Any, grad_y: Tensor) -> tuple[Tensor | None, ...]:
        if torch.is_grad_enabled() or not _plain_eager(grad_y):
            return _avg_backward(ctx, grad_y)
        (x,) = ctx.saved_tensors
        return (_avg_backward_kernel(grad_y, x, *ctx.params),) + (None,) * 6


def run_avg_pool2d(x: Tensor, kernel_size: Sequence[int], stride: Sequence[int], padding: Sequence[int],
                   ceil_mode: bool, count_include_pad: bool, divisor_override: Optional[int]) -> Tensor:
    """``poolgrad::avg_pool2d``, in plain eager mode without the dispatcher (module docstring)."""
    if _plain_eager(x):
        if x.requires_grad and torch.is_grad_enabled():
            return cast(Tensor, _AvgPoolEager.apply(  # type: ignore[no-untyped-call]
                x, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override))
        return _avg_kernel(x, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override)
    return cast(Tensor, torch.ops.poolgrad.avg_pool2d(x, kernel_size, stride, padding, ceil_mode,
                                                      count_include_pad, divisor_override))
