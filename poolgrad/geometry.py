"""Geometry: output sizes and per-axis window tables of every pooling, in exact integer arithmetic.

Pure functions of already-validated integers (no validation here; :mod:`.validation` builds a
:class:`PoolGeometry` only from parameters it has checked).  Tables are read-only NumPy arrays, cached when short,
so repeated calls with one shape share them.
"""
from __future__ import annotations

import functools

import numpy as np

from .memory import read_only

__all__ = ["PoolGeometry", "pool_output_size", "pool_windows", "adaptive_windows", "tf_output_size",
           "tf_windows", "to_nchw", "logical_shape"]

def pool_output_size(size: int, k: int, s: int, p: int, d: int, ceil_mode: bool) -> int:
    """PyTorch's pooling output length (exact integer arithmetic; may be < 1, which callers reject)."""
    span = size + 2 * p - d * (k - 1) - 1
    out = (span + (s - 1 if ceil_mode else 0)) // s + 1
    if ceil_mode and out > 0 and (out - 1) * s >= size + p:
        out -= 1  # the last window must start inside the input or the left padding
    return out


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


def adaptive_windows(size: int, out: int) -> dict[str, np.ndarray]:
    """Adaptive pooling windows ``[floor(i*L/Lo), ceil((i+1)*L/Lo))`` in exact integer arithmetic (read-only
    arrays, cached when short)."""
    if out <= _CACHE_MAX_LEN:
        return _adaptive_windows_cached(size, out)
    return _adaptive_windows(size, out)


@functools.lru_cache(maxsize=256)
def _adaptive_windows_cached(size: int, out: int) -> dict[str, np.ndarray]:
    return _adaptive_windows(size, out)


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


def tf_output_size(size: int, k: int, s: int, padding: str) -> tuple[int, int]:
    """TensorFlow's (output length, padding before) along one axis; the length may be < 1 (VALID, k > size)."""
    if padding == "VALID":
        return -(-(size - k + 1) // s), 0
    out = -(-size // s)
    total = max(0, (out - 1) * s + k - size)
    return out, total // 2


def tf_windows(size: int, out: int, k: int, s: int, before: int) -> tuple[np.ndarray, np.ndarray]:
    """Clipped windows ``[lo, hi)`` of every output along one axis (non-decreasing in both ends)."""
    start = np.arange(out, dtype=np.int64) * s - before
    return np.maximum(start, 0), np.minimum(start + k, size)


def to_nchw(arr: np.ndarray, layout: str) -> np.ndarray:
    """Logical (N, C, H, W) view of a 3-D or 4-D array in ``layout`` (no copy)."""
    if arr.ndim == 3:
        arr = arr[np.newaxis]
    if layout == "NHWC":
        arr = arr.transpose(0, 3, 1, 2)
    return arr


def logical_shape(x: np.ndarray, layout: str, c: int, h: int, w: int) -> tuple[int, ...]:
    """Shape of an array with ``x``'s rank and batch in ``layout`` order for (C, H, W) = (c, h, w)."""
    inner = (c, h, w) if layout == "NCHW" else (h, w, c)
    return inner if x.ndim == 3 else (x.shape[0],) + inner


class PoolGeometry:
    """The windows of a PyTorch-style pooling (kernel, stride, padding, dilation, ceil_mode) over an (H, W)
    plane: output (oh, ow) covers rows ``oh*sh - ph + a*dh`` and columns ``ow*sw - pw + b*dw`` clipped to the
    input.  Built by :func:`poolgrad.validation.parse_pool` from checked parameters; ``dilation`` None marks a
    pooling that has none (average pooling), which only changes how :meth:`describe` reads.
    """

    def __init__(self, hw: tuple[int, int], kernel: tuple[int, int], stride: tuple[int, int],
                 padding: tuple[int, int], dilation: tuple[int, int] | None, ceil_mode: bool) -> None:
        self.hw = hw
        self.kernel, self.stride, self.padding, self.ceil_mode = kernel, stride, padding, ceil_mode
        self.has_dilation = dilation is not None
        self.dilation = dilation if dilation is not None else (1, 1)
        self.out = tuple(pool_output_size(n, k, s, p, d, ceil_mode) for n, k, s, p, d in
                         zip(hw, kernel, stride, padding, self.dilation))

    # Window tables are built on first use, so a forward allocates its (possibly impossible) output first.
    @functools.cached_property
    def win_h(self) -> dict[str, np.ndarray]:
        return pool_windows(self.hw[0], self.out[0], self.kernel[0], self.stride[0], self.padding[0],
                            self.dilation[0])

    @functools.cached_property
    def win_w(self) -> dict[str, np.ndarray]:
        return pool_windows(self.hw[1], self.out[1], self.kernel[1], self.stride[1], self.padding[1],
                            self.dilation[1])

    def describe(self) -> str:
        text = f"kernel_size={self.kernel}, stride={self.stride}, padding={self.padding}, "
        if self.has_dilation:
            text += f"dilation={self.dilation}, "
        return text + f"ceil_mode={self.ceil_mode}"
