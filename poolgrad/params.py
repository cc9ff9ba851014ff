"""Argument checking shared by every operator (the one place that validates and allocates).

Everything here runs before a kernel: arrays are checked for type, rank, dtype and layout, parameters are parsed
into plain ints, output sizes and window tables are computed in exact integer arithmetic, and the output array is
allocated or checked.  The kernels receive only what passed.
"""
from __future__ import annotations

import functools
import operator
from typing import Any, Iterable, Sequence

import numpy as np

from . import buffers
from .dtypes import SUPPORTED_DTYPES, dtype_code
from .errors import ParamInvalidError, ParamNullptrError

__all__ = [
    "as_array", "check_dtype", "check_same_dtype", "check_rank", "parse_layout", "parse_pair", "parse_stride",
    "parse_bool", "to_nchw", "pool_output_size", "pool_windows", "adaptive_windows", "prepare_out",
    "as_int", "alloc_like_order", "alloc_like_order_zeroed", "thread_rows", "kernel_friendly", "kernel_input", "kernel_output", "check_index_dtype", "split_evenly",
]

# Parameters (kernel sizes, strides, paddings, dilations, output sizes) above this are refused: every product the
# kernels form from them then stays far inside int64.
MAX_PARAM = 2 ** 31 - 1

_LAYOUTS = ("NCHW", "NHWC")


def as_array(obj: Any, name: str) -> np.ndarray:
    """Return ``obj`` as an ndarray without copying, or raise.

    Accepts NumPy arrays and objects NumPy can view without a copy (``__dlpack__``, ``__array_interface__``,
    ``__array__``, the buffer protocol).  None raises :class:`ParamNullptrError`; Python scalars, lists and
    other non-array objects raise :class:`ParamInvalidError` (no silent conversion of nested lists).
    """
    if obj is None:
        raise ParamNullptrError(f"{name}: expected an array, got None")
    if isinstance(obj, np.ndarray):
        return obj
    if isinstance(obj, (list, tuple, str, bytes, int, float, complex, bool, dict, set)):
        raise ParamInvalidError(f"{name}: expected an array (numpy.ndarray or an object exposing __dlpack__ "
                                f"or the buffer protocol), got {type(obj).__name__}")
    if hasattr(obj, "__dlpack__"):
        try:
            return np.from_dlpack(obj)
        except (TypeError, ValueError, BufferError, RuntimeError):
            pass
    if hasattr(obj, "__array_interface__") or hasattr(obj, "__array__"):
        try:
            return np.asarray(obj)
        except Exception as exc:  # noqa: BLE001 - any failure of a foreign object is the caller's input error
            raise ParamInvalidError(f"{name}: could not be viewed as an array ({exc})") from None
    try:
        memoryview(obj)
    except TypeError:
        raise ParamInvalidError(f"{name}: expected an array (numpy.ndarray or an object exposing __dlpack__ "
                                f"or the buffer protocol), got {type(obj).__name__}") from None
    return np.asarray(obj)


def check_dtype(arr: np.ndarray, name: str) -> str:
    """Raise unless ``arr`` has one of the four supported float dtypes; return its kernel code."""
    code = dtype_code(arr.dtype)
    if code is None:
        names = ", ".join(str(d) for d in SUPPORTED_DTYPES)
        raise ParamInvalidError(f"{name}: expected dtype one of ({names}), got {arr.dtype}")
    return code


def check_same_dtype(arr: np.ndarray, name: str, ref: np.ndarray, ref_name: str) -> None:
    """Raise unless ``arr`` has the dtype of ``ref`` (poolgrad never casts silently)."""
    if arr.dtype != ref.dtype:
        raise ParamInvalidError(f"{name}: expected dtype {ref.dtype} (the dtype of {ref_name}), got {arr.dtype}")


def check_index_dtype(arr: np.ndarray, name: str, plane_size: int) -> str:
    """Raise unless ``arr`` holds int32 or int64 indices able to address a plane of ``plane_size`` cells."""
    if arr.dtype == np.int64:
        return "i64"
    if arr.dtype == np.int32:
        if plane_size > np.iinfo(np.int32).max:
            raise ParamInvalidError(f"{name}: int32 indices cannot address a plane of H*W = {plane_size} cells "
                                    f"(more than 2**31 - 1); expected int64, got int32")
        return "i32"
    raise ParamInvalidError(f"{name}: expected dtype int32 or int64, got {arr.dtype}")


def check_rank(arr: np.ndarray, name: str, ranks: Iterable[int]) -> None:
    ranks = tuple(ranks)
    if arr.ndim not in ranks:
        want = " or ".join(f"{r}-D" for r in ranks)
        raise ParamInvalidError(f"{name}: expected a {want} array, got {arr.ndim}-D with shape {arr.shape}")


def parse_layout(layout: Any, name: str = "layout") -> str:
    """``"NCHW"`` or ``"NHWC"`` (str or bytes, case-sensitive)."""
    if isinstance(layout, bytes):
        try:
            layout = layout.decode("ascii")
        except UnicodeDecodeError:
            pass
    if not isinstance(layout, str) or layout not in _LAYOUTS:
        raise ParamInvalidError(f"{name}: expected 'NCHW' or 'NHWC', got {layout!r}")
    return layout


def parse_bool(value: Any, name: str) -> bool:
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if isinstance(value, (int, np.integer)) and int(value) in (0, 1):
        return bool(value)
    raise ParamInvalidError(f"{name}: expected a bool, got {value!r}")


def as_int(value: Any, name: str, expected: str, shown: Any = None) -> int:
    """``value`` as a Python int (a Python or NumPy integer; bools and everything else are refused with
    ``ParamInvalidError("{name}: expected {expected}, got ...")``, showing ``shown`` if given, else ``value``)."""
    if not isinstance(value, (bool, np.bool_)):
        try:
            return operator.index(value)
        except TypeError:
            pass
    shown = value if shown is None else shown
    raise ParamInvalidError(f"{name}: expected {expected}, got {shown!r}")


def _as_int(value: Any, name: str) -> int:
    return as_int(value, name, "an int or a sequence of 1 or 2 ints")


def _as_seq(value: Any, name: str) -> list[int] | None:
    """Sequence form of an int-or-sequence parameter (None when ``value`` is a single int)."""
    if isinstance(value, (bool, np.bool_)):
        raise ParamInvalidError(f"{name}: expected an int or a sequence of 1 or 2 ints, got {value!r}")
    if isinstance(value, (int, np.integer)):
        return None
    if isinstance(value, np.ndarray):
        if value.ndim != 1:
            raise ParamInvalidError(f"{name}: expected an int or a sequence of 1 or 2 ints, got an array of "
                                    f"shape {value.shape}")
        value = value.tolist()
    if isinstance(value, (list, tuple)):
        return [_as_int(v, name) for v in value]
    raise ParamInvalidError(f"{name}: expected an int or a sequence of 1 or 2 ints, got {value!r}")


def parse_pair(value: Any, name: str, minimum: int = 1) -> tuple[int, int]:
    """An int or a sequence of 1 or 2 ints -> (h, w), each ``>= minimum`` and at most 2**31 - 1."""
    seq = _as_seq(value, name)
    if seq is None:
        pair = (_as_int(value, name),) * 2
    elif len(seq) in (1, 2):
        pair = (seq[0], seq[-1])
    else:
        raise ParamInvalidError(f"{name}: expected an int or a sequence of 1 or 2 ints, got {len(seq)} values "
                                f"{tuple(seq)}")
    for v in pair:
        if v < minimum or v > MAX_PARAM:
            bound = "a positive int" if minimum == 1 else f"ints >= {minimum}"
            raise ParamInvalidError(f"{name}: expected {bound} (at most {MAX_PARAM}), got {value!r}")
    return pair


def parse_stride(value: Any, kernel: tuple[int, int], name: str = "stride") -> tuple[int, int]:
    """None or an empty sequence means the kernel size (PyTorch's and CANN's convention)."""
    if value is None:
        return kernel
    if isinstance(value, (list, tuple)) and len(value) == 0:
        return kernel
    if isinstance(value, np.ndarray) and value.size == 0 and value.ndim == 1:
        return kernel
    return parse_pair(value, name)


def pool_output_size(size: int, k: int, s: int, p: int, d: int, ceil_mode: bool) -> int:
    """PyTorch's pooling output length (exact integer arithmetic; may be < 1, which callers reject)."""
    span = size + 2 * p - d * (k - 1) - 1
    out = (span + (s - 1 if ceil_mode else 0)) // s + 1
    if ceil_mode and out > 0 and (out - 1) * s >= size + p:
        out -= 1  # the last window must start inside the input or the left padding
    return out


def read_only(*arrays: np.ndarray) -> tuple[np.ndarray, ...]:
    """Mark cached tables read-only (so no caller can corrupt a cache entry) and return them."""
    for arr in arrays:
        arr.setflags(write=False)
    return arrays


def _frozen(tables: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    read_only(*tables.values())
    return tables


# Window tables up to this length are cached (they are read-only): small calls in a loop then skip rebuilding
# them.  Longer ones are rebuilt, so an absurd output size cannot pin memory in the cache.
_CACHE_MAX_LEN = 1 << 16


def pool_windows(size: int, out: int, k: int, s: int, p: int, d: int) -> dict[str, np.ndarray]:
    """Per-output windows along one axis of a torch-style pooling (read-only arrays, cached when short).

    Returns ``start`` (first valid input cell), ``count`` (number of valid cells, step ``d``), and the input
    range ``lo``/``hi`` (``[lo, hi)`` spans the valid cells; empty if there are none).
    """
    if out <= _CACHE_MAX_LEN:
        return _pool_windows_cached(size, out, k, s, p, d)
    return _pool_windows(size, out, k, s, p, d)


@functools.lru_cache(maxsize=256)
def _pool_windows_cached(size: int, out: int, k: int, s: int, p: int, d: int) -> dict[str, np.ndarray]:
    return _pool_windows(size, out, k, s, p, d)


def _pool_windows(size: int, out: int, k: int, s: int, p: int, d: int) -> dict[str, np.ndarray]:
    o = np.arange(out, dtype=np.int64)
    first = o * s - p
    skip = np.where(first < 0, (-first + d - 1) // d, 0)          # lattice cells before the input
    start = first + skip * d
    last_excl = np.minimum(k, np.where(size - first > 0, (size - first + d - 1) // d, 0))  # cells < size
    count = np.maximum(last_excl - skip, 0)
    lo = np.clip(start, 0, size)
    hi = np.where(count > 0, start + (count - 1) * d + 1, lo)
    return _frozen({"start": start, "count": count, "lo": lo, "hi": hi})


def adaptive_windows(size: int, out: int) -> dict[str, np.ndarray]:
    """Adaptive pooling windows ``[floor(i*L/Lo), ceil((i+1)*L/Lo))`` in exact integer arithmetic (read-only
    arrays, cached when short)."""
    if out <= _CACHE_MAX_LEN:
        return _adaptive_windows_cached(size, out)
    return _adaptive_windows(size, out)


@functools.lru_cache(maxsize=256)
def _adaptive_windows_cached(size: int, out: int) -> dict[str, np.ndarray]:
    return _adaptive_windows(size, out)


def _adaptive_windows(size: int, out: int) -> dict[str, np.ndarray]:
    if (out + 1) * size < 2 ** 62:      # int64 products are exact
        i = np.arange(out + 1, dtype=np.int64)
        start = (i[:-1] * size) // out
        end = -((-i[1:] * size) // out)
    else:                               # Python ints (object arrays) for sizes beyond that
        i = np.arange(out + 1, dtype=object)
        start = ((i[:-1] * size) // out).astype(np.int64)
        end = (-((-i[1:] * size) // out)).astype(np.int64)
    return _frozen({"start": start, "count": end - start, "lo": start, "hi": end})


def split_evenly(length: int, count: int) -> np.ndarray:
    """``count + 1`` int64 bounds splitting ``range(length)`` into ``count`` near-equal parts (``count`` clipped
    to ``[1, length]``): the row bands and chunks the kernels' work items own."""
    count = max(1, min(count, length))
    return (np.arange(count + 1, dtype=np.int64) * length) // count


def to_nchw(arr: np.ndarray, layout: str) -> np.ndarray:
    """Logical (N, C, H, W) view of a 3-D or 4-D array in ``layout`` (no copy)."""
    if arr.ndim == 3:
        arr = arr[np.newaxis]
    if layout == "NHWC":
        arr = arr.transpose(0, 3, 1, 2)
    return arr


def alloc_like_order(ref: np.ndarray, shape: Sequence[int], dtype: Any) -> np.ndarray:
    """New array of ``shape`` whose axes are laid out in memory in the order of ``ref``'s strides.

    So an output follows its input: channels-last in, channels-last out (as PyTorch keeps memory format).
    Contents are unspecified; large arrays come from the block cache (:mod:`poolgrad.buffers`).
    """
    return alloc_like_order_zeroed(ref, shape, dtype)[0]


def alloc_like_order_zeroed(ref: np.ndarray, shape: Sequence[int], dtype: Any) -> tuple[np.ndarray, bool]:
    """:func:`alloc_like_order`, and whether the memory is known to be all zeros (a freshly mapped block)."""
    order = sorted(range(ref.ndim), key=lambda a: (-abs(ref.strides[a]), a))
    dtype = np.dtype(dtype)
    dims = [shape[a] for a in order]
    raw, zeroed = buffers.take(functools.reduce(operator.mul, dims, 1) * dtype.itemsize)
    return raw.view(dtype).reshape(dims).transpose(np.argsort(order)), zeroed


def thread_rows(nthreads: int, n: int, dtype: Any) -> np.ndarray:
    """Per-thread scratch: ``nthreads`` rows of at least ``n`` elements (the row length is ``shape[1]``), each
    starting on its own 64-byte cache line and followed by a spare line.  Rows that share a line make every
    write a cross-core transfer: with 56-element rows that false sharing left the 2-thread max-pooling forward
    no faster than one thread (22.5 against 20.5 ms on 32x64x112x112)."""
    item = np.dtype(dtype).itemsize
    per_line = max(1, 64 // item)
    stride = -(-max(n, 1) // per_line) * per_line + per_line
    raw = np.empty(nthreads * stride + per_line, dtype)
    offset = ((-raw.ctypes.data) % 64) // item
    return raw[offset:offset + nthreads * stride].reshape(nthreads, stride)


def kernel_friendly(arr: np.ndarray) -> bool:
    """Aligned data and strides that are whole elements: what every kernel's addressing assumes."""
    item = arr.dtype.itemsize
    return arr.flags.aligned and all(st % item == 0 for st in arr.strides)


def kernel_input(arr: np.ndarray) -> np.ndarray:
    """Inputs whose strides are not whole elements or whose data is misaligned are copied (same axis order)."""
    if kernel_friendly(arr):
        return arr
    copy = alloc_like_order(arr, arr.shape, arr.dtype)
    copy[...] = arr
    return copy


def kernel_output(out4: np.ndarray, dense_hw: bool = True) -> np.ndarray:
    """The array a kernel may write: ``out4`` itself, or a contiguous scratch array (NCHW, or NHWC when ``out4``
    stores channels innermost) when ``out4`` is misaligned, has partial-element strides or (``dense_hw``) an H
    stride other than W times its W stride.  The caller copies a scratch result back into ``out4``."""
    if kernel_friendly(out4) and (not dense_hw or out4.shape[2] <= 1 or
                                   out4.strides[2] == out4.shape[3] * out4.strides[3]):
        return out4
    s = [abs(v) for v in out4.strides]
    if out4.shape[1] > 1 and s[1] < s[3]:   # keep channels-last storage channels-last
        return np.empty((out4.shape[0], out4.shape[2], out4.shape[3], out4.shape[1]),
                        out4.dtype).transpose(0, 3, 1, 2)
    return np.empty(out4.shape, out4.dtype)


def prepare_out(out: Any, x: np.ndarray, inputs: Sequence[tuple[str, np.ndarray]], name: str = "out",
                allow_same: np.ndarray | None = None) -> np.ndarray:
    """Validate a user-supplied ``out`` (or allocate one in ``x``'s memory order).

    ``out`` must be a writeable ndarray with ``x``'s shape and dtype that shares no memory with any input;
    ``allow_same`` names the one input ``out`` may be exactly (same data pointer, shape and strides).
    """
    if out is None:
        return alloc_like_order(x, x.shape, x.dtype)
    if not isinstance(out, np.ndarray):
        raise ParamInvalidError(f"{name}: expected None or a numpy.ndarray, got {type(out).__name__}")
    if out.shape != x.shape:
        raise ParamInvalidError(f"{name}: expected shape {x.shape} (the shape of the input), got {out.shape}")
    if out.dtype != x.dtype:
        raise ParamInvalidError(f"{name}: expected dtype {x.dtype}, got {out.dtype}")
    if not out.flags.writeable:
        raise ParamInvalidError(f"{name}: expected a writeable array, got a read-only one")
    for in_name, arr in inputs:
        if arr is None or arr.size == 0 or out.size == 0:
            continue
        if allow_same is not None and arr is allow_same and _same_view(out, arr):
            continue
        if _overlaps(out, arr):
            raise ParamInvalidError(f"{name}: must not share memory with {in_name}")
    return out


def _same_view(a: np.ndarray, b: np.ndarray) -> bool:
    return (a.__array_interface__["data"][0] == b.__array_interface__["data"][0]
            and a.shape == b.shape and a.strides == b.strides)


def _overlaps(a: np.ndarray, b: np.ndarray) -> bool:
    if not np.may_share_memory(a, b):
        return False
    try:
        return bool(np.shares_memory(a, b, max_work=100_000))
    except np.exceptions.TooHardError:
        return True  # cannot prove the views disjoint: refuse rather than risk aliasing
