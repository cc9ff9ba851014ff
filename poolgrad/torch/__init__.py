"""poolgrad for PyTorch: drop-in pooling functions and modules whose forward and backward run poolgrad.

Importing this module imports PyTorch; ``import poolgrad`` alone never does.

* :func:`max_pool2d`, :func:`avg_pool2d`, :func:`adaptive_max_pool2d`: the signatures and defaults of
  ``torch.nn.functional``'s functions of the same names;
* :class:`MaxPool2d`, :class:`AvgPool2d`, :class:`AdaptiveMaxPool2d`: subclasses of the ``torch.nn`` modules
  (same constructor, ``repr`` and ``state_dict``);
* :func:`convert`: swaps every ``nn.MaxPool2d`` / ``nn.AvgPool2d`` / ``nn.AdaptiveMaxPool2d`` of a model for
  these, at any depth.

The work is done by custom operators in the ``torch.ops.poolgrad`` namespace (see :mod:`poolgrad.torch._ops`),
with fake kernels and autograd formulas, so converted models run under ``torch.compile(fullgraph=True)`` and
``torch.export``, and ``gradcheck`` / ``gradgradcheck`` pass. Thread count: ``torch.get_num_threads()``;
deterministic mode: ``torch.are_deterministic_algorithms_enabled()``; both read at every call.

Integer tensors (which poolgrad's float kernels do not take and which have no gradient) are passed to
``torch.nn.functional`` unchanged. Tensors on other devices than the CPU raise
:class:`poolgrad.ParamInvalidError`; nothing is copied between devices.
"""
from __future__ import annotations

import copy
import numbers
from typing import Any, Sequence

import torch
import torch.nn.functional as _F
from torch import nn

import poolgrad as pg

from . import _ops

__all__ = ["max_pool2d", "avg_pool2d", "adaptive_max_pool2d", "MaxPool2d", "AvgPool2d", "AdaptiveMaxPool2d",
           "convert"]

Tensor = torch.Tensor
IntOrPair = int | Sequence[int]


def _is_int(v: Any) -> bool:
    # torch.SymInt appears while tracing with dynamic shapes; bools are ints to Python but not to PyTorch.
    return isinstance(v, (numbers.Integral, torch.SymInt)) and not isinstance(v, bool)


def _pair(name: str, value: Any) -> list[int]:
    """``value`` (an int or a sequence of 1 or 2 ints) as two ints; anything else raises poolgrad's error.

    Only the form is checked here: the ranges are checked by poolgrad itself inside the operator (and by the
    fake kernel while tracing), so the messages are poolgrad's.
    """
    if _is_int(value):
        return [value, value]
    if isinstance(value, (tuple, list, torch.Size)) and len(value) in (1, 2) and all(_is_int(v) for v in value):
        return [value[0], value[0]] if len(value) == 1 else [value[0], value[1]]
    raise pg.ParamInvalidError(f"{name}: expected an int or a sequence of 1 or 2 ints, got {value!r}")


def _stride(value: Any, kernel: list[int]) -> list[int]:
    # None and an empty sequence both mean "the kernel size" in torch.nn.functional.
    if value is None or (isinstance(value, (tuple, list)) and len(value) == 0):
        return list(kernel)
    return _pair("stride", value)


def _flag(name: str, value: Any) -> bool:
    if isinstance(value, bool):
        return value
    raise pg.ParamInvalidError(f"{name}: expected a bool, got {value!r}")


def _check_tensor(input: Any) -> None:
    if not isinstance(input, torch.Tensor):
        raise pg.ParamInvalidError(f"input: expected a torch.Tensor, got {type(input).__name__}")
    _ops.check_cpu(input, "input")


def _check_max_padding(kernel: list[int], padding: list[int]) -> None:
    """PyTorch refuses padding above half the kernel (whatever the dilation); poolgrad allows up to half the
    dilated window, so this stricter rule is applied here to refuse what PyTorch refuses."""
    for k, p in zip(kernel, padding):
        if _is_int(k) and _is_int(p) and k > 0 and p > k // 2:
            raise pg.ParamInvalidError(
                f"padding: expected at most half of kernel_size (as torch.nn.functional.max_pool2d), got "
                f"padding={tuple(padding)} with kernel_size={tuple(kernel)}")


# The end of the docstrings of both max poolings (they return and refuse alike), written once.
_INDEXED_MAX_DOC = """return_indices : bool
        Also return the int64 index of each maximum within its (H, W) plane.

    Returns
    -------
    torch.Tensor or (torch.Tensor, torch.Tensor)
        The pooled tensor in the input's memory format (and the indices).

    Raises
    ------
    poolgrad.ParamInvalidError
        For every input ``torch.nn.functional.%s`` refuses and for non-CPU tensors;
        the message names the argument."""


def _indexed_max_doc(fn: Any) -> Any:
    """Complete ``fn``'s docstring with :data:`_INDEXED_MAX_DOC` (named after ``fn``)."""
    if fn.__doc__:                          # None under python -OO
        fn.__doc__ = fn.__doc__ % {"indexed_max": _INDEXED_MAX_DOC % fn.__name__}
    return fn


@_indexed_max_doc
def max_pool2d(input: Tensor, kernel_size: IntOrPair, stride: IntOrPair | None = None, padding: IntOrPair = 0,
               dilation: IntOrPair = 1, ceil_mode: bool = False,
               return_indices: bool = False) -> Tensor | tuple[Tensor, Tensor]:
    """2-D max pooling, as ``torch.nn.functional.max_pool2d``, computed by poolgrad (forward and backward).

    Parameters
    ----------
    input : torch.Tensor
        (N, C, H, W) or (C, H, W) CPU tensor, float32, float64, float16 or bfloat16, contiguous or
        channels-last (other strides work too; the output is then contiguous).
    kernel_size, stride, padding, dilation : int or sequence of 1 or 2 ints
        Window parameters; ``stride=None`` (or ``[]``) means ``kernel_size``.
    ceil_mode : bool
        Round the output size up.
    %(indexed_max)s
    """
    _check_tensor(input)
    if not (input.is_floating_point() or input.is_complex()):
        return _F.max_pool2d(input, kernel_size, stride, padding, dilation, ceil_mode, return_indices)
    k = _pair("kernel_size", kernel_size)
    s = _stride(stride, k)
    p = _pair("padding", padding)
    d = _pair("dilation", dilation)
    _check_max_padding(k, p)
    ret = _flag("return_indices", return_indices)
    y, idx = _ops.run_max_pool2d(input, k, s, p, d, _flag("ceil_mode", ceil_mode),
                                 torch.int64 if ret else _ops.internal_index_dtype(input))
    return (y, idx) if ret else y


def avg_pool2d(input: Tensor, kernel_size: IntOrPair, stride: IntOrPair | None = None, padding: IntOrPair = 0,
               ceil_mode: bool = False, count_include_pad: bool = True,
               divisor_override: int | None = None) -> Tensor:
    """2-D average pooling, as ``torch.nn.functional.avg_pool2d``, computed by poolgrad (forward and backward).

    Parameters
    ----------
    input : torch.Tensor
        (N, C, H, W) or (C, H, W) CPU tensor, float32, float64, float16 or bfloat16.
    kernel_size, stride, padding : int or sequence of 1 or 2 ints
        Window parameters; ``stride=None`` (or ``[]``) means ``kernel_size``.
    ceil_mode : bool
        Round the output size up.
    count_include_pad : bool
        Count padded cells in the divisor.
    divisor_override : int, optional
        A fixed non-zero divisor (PyTorch refuses 0).

    Returns
    -------
    torch.Tensor
        The pooled tensor in the input's memory format.

    Raises
    ------
    poolgrad.ParamInvalidError
        For every input ``torch.nn.functional.avg_pool2d`` refuses and for non-CPU tensors.
    """
    _check_tensor(input)
    if not (input.is_floating_point() or input.is_complex()):
        return _F.avg_pool2d(input, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override)
    k = _pair("kernel_size", kernel_size)
    s = _stride(stride, k)
    p = _pair("padding", padding)
    if divisor_override is not None:
        if not _is_int(divisor_override):
            raise pg.ParamInvalidError(f"divisor_override: expected None or an int, got {divisor_override!r}")
        if divisor_override == 0:
            # poolgrad reads 0 as "unused" (CANN's convention); PyTorch refuses it.
            raise pg.ParamInvalidError("divisor_override: expected None or a non-zero int, got 0")
    return _ops.run_avg_pool2d(input, k, s, p, _flag("ceil_mode", ceil_mode),
                               _flag("count_include_pad", count_include_pad), divisor_override)


@_indexed_max_doc
def adaptive_max_pool2d(input: Tensor, output_size: int | Sequence[int | None],
                        return_indices: bool = False) -> Tensor | tuple[Tensor, Tensor]:
    """2-D adaptive max pooling, as ``torch.nn.functional.adaptive_max_pool2d``, computed by poolgrad.

    Parameters
    ----------
    input : torch.Tensor
        (N, C, H, W) or (C, H, W) CPU tensor, float32, float64, float16 or bfloat16.
    output_size : int or sequence of 1 or 2 (int or None)
        Output (H, W); None keeps the input's size on that axis.
    %(indexed_max)s
    """
    _check_tensor(input)
    if not (input.is_floating_point() or input.is_complex()):
        return _F.adaptive_max_pool2d(input, output_size, return_indices)
    if input.dim() not in (3, 4):
        # Checked before None sizes are looked up on the plane axes (poolgrad's wording).
        raise pg.ParamInvalidError(f"x: expected a 3-D or 4-D array, got {input.dim()}-D with shape "
                                   f"{tuple(input.shape)}")
    if isinstance(output_size, (tuple, list, torch.Size)) and len(output_size) in (1, 2):
        sizes = list(output_size) * (3 - len(output_size))
        sizes = [input.shape[-2 + i] if v is None else v for i, v in enumerate(sizes)]
    else:
        sizes = output_size
    o = _pair("output_size", sizes)
    if 0 in o:
        # PyTorch returns an empty result for a zero output size, poolgrad refuses one: nothing to compute.
        return _F.adaptive_max_pool2d(input, output_size, return_indices)
    ret = _flag("return_indices", return_indices)
    y, idx = _ops.run_adaptive_max_pool2d(input, o, torch.int64 if ret else _ops.internal_index_dtype(input))
    return (y, idx) if ret else y


class MaxPool2d(nn.MaxPool2d):
    """``torch.nn.MaxPool2d`` whose forward and backward run poolgrad (same constructor and state)."""

    def forward(self, input: Tensor) -> Tensor | tuple[Tensor, Tensor]:
        return max_pool2d(input, self.kernel_size, self.stride, self.padding, self.dilation,
                          ceil_mode=self.ceil_mode, return_indices=self.return_indices)


class AvgPool2d(nn.AvgPool2d):
    """``torch.nn.AvgPool2d`` whose forward and backward run poolgrad (same constructor and state)."""

    def forward(self, input: Tensor) -> Tensor:
        return avg_pool2d(input, self.kernel_size, self.stride, self.padding, self.ceil_mode,
                          self.count_include_pad, self.divisor_override)


class AdaptiveMaxPool2d(nn.AdaptiveMaxPool2d):
    """``torch.nn.AdaptiveMaxPool2d`` whose forward and backward run poolgrad (same constructor and state)."""

    def forward(self, input: Tensor) -> Tensor | tuple[Tensor, Tensor]:
        return adaptive_max_pool2d(input, self.output_size, self.return_indices)


# Exact types only: a user's subclass of nn.MaxPool2d may have its own forward, which a swap would drop.
_REPLACEMENTS: dict[type, type] = {nn.MaxPool2d: MaxPool2d, nn.AvgPool2d: AvgPool2d,
                                   nn.AdaptiveMaxPool2d: AdaptiveMaxPool2d}


def convert(model: nn.Module, inplace: bool = False) -> nn.Module:
    """Make every ``nn.MaxPool2d``, ``nn.AvgPool2d`` and ``nn.AdaptiveMaxPool2d`` of ``model`` run poolgrad.

    Parameters
    ----------
    model : torch.nn.Module
        Any module; the pooling modules are found at any depth (``nn.Sequential``, ``nn.ModuleList``,
        ``nn.ModuleDict`` and plain attributes alike), and ``model`` itself may be one.
    inplace : bool
        Change ``model``'s own modules; by default a deep copy is converted and ``model`` stays as it was.

    Returns
    -------
    torch.nn.Module
        The converted model (``model`` itself when ``inplace``).

    Notes
    -----
    Each pooling module keeps its identity, attributes, hooks and training flag: only its class changes to the
    poolgrad subclass (which adds no state), so a module shared by two parents stays shared. Subclasses of the
    ``torch.nn`` pooling modules are left alone, since their own ``forward`` may differ.
    """
    if not isinstance(model, nn.Module):
        raise pg.ParamInvalidError(f"model: expected a torch.nn.Module, got {type(model).__name__}")
    if not inplace:
        model = copy.deepcopy(model)
    for module in model.modules():
        replacement = _REPLACEMENTS.get(type(module))
        if replacement is not None:
            module.__class__ = replacement
    return model
