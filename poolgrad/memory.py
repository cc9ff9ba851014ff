"""Memory: every array poolgrad allocates, and the views the kernels read and write.

This module imports no validator: it receives sizes and arrays that have already passed :mod:`.validation`.

* :class:`OutputLayout` / :func:`alloc_like_order`: outputs in the memory order of their input.
* :func:`thread_rows`: per-thread scratch rows on their own cache lines.
* :func:`kernel_input` / :func:`kernel_output`: the arrays a kernel may address directly (or scratch copies).
* The block cache below: recycling of large blocks.

Recycling of the large arrays poolgrad allocates (outputs, and the copies some inputs need).

Why: an output above glibc's mmap threshold (32 MiB) is a fresh ``mmap`` on every call, and every page of it
faults and is zeroed by the kernel on first touch.  On the 2-core machine this project is measured on, faulting a
103 MB gradient costs 5-8 ms (one run in ten stalls for 100-200 ms while the kernel compacts memory for huge
pages), against about 6 ms for the whole max-pooling backward kernel writing into memory that is already mapped.
A training loop frees last step's gradient before it asks for the next one, so keeping a few freed blocks and
handing them out again removes that cost from every call but the first.  Smaller arrays need none of this:
glibc's heap already reuses them.

How it stays safe: a block is handed out only while nothing but this cache refers to it.  Every array poolgrad
returns from a block (and every view a user makes of it) holds a reference to the block's owning array, so a
block whose reference count is back to its resting value has no live view; the check and the hand-out happen
under one lock.  A recycled block holds old data: callers get ``zeroed=False`` and write every element (the
kernels zero what they scatter into).

The cache holds at most :func:`buffer_cache_limit` bytes of blocks (in use or free, default 512 MiB, environment
variable ``POOLGRAD_BUFFER_CACHE_MB``, 0 turns it off); a block that would go over the limit is an ordinary
allocation.  :func:`release_buffers` returns the free blocks to the system.
"""
from __future__ import annotations

import functools
import operator
import os
import sys
import threading
from typing import Any, Sequence

import numpy as np

__all__ = ["MIN_BYTES", "take", "set_limit", "buffer_cache_limit", "buffer_cache_info", "release_buffers",
           "alloc_like_order", "thread_rows", "kernel_friendly", "kernel_input",
           "kernel_output", "read_only", "OutputLayout", "ScratchPool"]

# Below glibc's largest mmap threshold freed memory stays in the heap and comes back without page faults
# (measured: allocating and writing a 12 MB output costs the same as writing a preallocated one).
MIN_BYTES = 32 << 20
# Blocks are sized in huge-page steps so that slightly different requests share them and THP can back them.
_GRAIN = 2 << 20
_ALIGN = 64
_DEFAULT_LIMIT_MB = 512


class _Block:
    __slots__ = ("raw", "offset", "size", "rest", "tick")

    def __init__(self, raw: np.ndarray, size: int) -> None:
        self.raw = raw
        self.offset = (-raw.ctypes.data) % _ALIGN
        self.size = size
        self.tick = 0
        self.rest = 0      # set by take() once the creating frame holds no other reference

    def refs(self) -> int:
        """The block's reference count, measured the same way every time (so only differences matter)."""
        return sys.getrefcount(self.raw)

    def free(self) -> bool:
        return self.refs() == self.rest

    def view(self, nbytes: int) -> np.ndarray:
        return self.raw[self.offset:self.offset + nbytes]


def _env_limit() -> int:
    text = os.environ.get("POOLGRAD_BUFFER_CACHE_MB", "").strip()
    try:
        mb = int(text) if text else _DEFAULT_LIMIT_MB
    except ValueError:
        mb = _DEFAULT_LIMIT_MB
    return max(mb, 0) << 20


_lock = threading.Lock()
_blocks: list[_Block] = []
_limit = _env_limit()
_tick = 0
_stats = {"hits": 0, "misses": 0}


def take(nbytes: int) -> tuple[np.ndarray, bool]:
    """A 1-D uint8 array of ``nbytes`` bytes, 64-byte aligned, and whether it is known to be all zeros.

    Small requests (below :data:`MIN_BYTES`) and requests made while the cache is off are plain ``np.empty``
    (``zeroed`` False).  Large ones reuse a free cached block (``zeroed`` False: it holds old data) or map a new
    zero-filled one (``zeroed`` True: calloc hands out fresh zero pages at no cost).
    """
    global _tick
    if nbytes < MIN_BYTES or _limit == 0:
        return np.empty(nbytes, np.uint8), False
    with _lock:
        _tick += 1
        best = None
        for blk in _blocks:
            # at most about twice the request: a small output must not pin a huge block
            if nbytes <= blk.size <= 2 * nbytes + _GRAIN and (best is None or blk.size < best.size) and blk.free():
                best = blk
        if best is not None:
            best.tick = _tick
            _stats["hits"] += 1
            return best.view(nbytes), False
        _stats["misses"] += 1
        size = -(-nbytes // _GRAIN) * _GRAIN
        raw = np.zeros(size + _ALIGN, np.uint8)
        blk = _Block(raw, size)
        del raw
        blk.rest = blk.refs()
        blk.tick = _tick
        _make_room(size)
        if _tracked() + size <= _limit:
            _blocks.append(blk)
        return blk.view(nbytes), True


def _tracked() -> int:
    return sum(b.size for b in _blocks)


def _make_room(size: int) -> None:
    """Drop free blocks, least recently used first, until ``size`` more bytes fit under the limit."""
    if _tracked() + size <= _limit:
        return
    for blk in sorted((b for b in _blocks if b.free()), key=lambda b: b.tick):
        _blocks.remove(blk)
        if _tracked() + size <= _limit:
            return


def set_limit(nbytes: int) -> None:
    """Set the cache limit (bytes, already validated as an int >= 0; see ``poolgrad.set_buffer_cache_limit``)
    and release the free blocks above it at once."""
    global _limit
    with _lock:
        _limit = nbytes
        _make_room(0)


def buffer_cache_limit() -> int:
    """The current limit in bytes (see :func:`set_buffer_cache_limit`)."""
    return _limit


def buffer_cache_info() -> dict:
    """Counters of the block cache.

    Returns
    -------
    dict
        ``limit``, ``blocks``, ``bytes`` (tracked), ``free_bytes``, ``hits``, ``misses``.
    """
    with _lock:
        return {"limit": _limit, "blocks": len(_blocks), "bytes": _tracked(),
                "free_bytes": sum(b.size for b in _blocks if b.free()), **_stats}


def release_buffers() -> int:
    """Return every free cached block to the system; blocks still in use stay tracked.

    Returns
    -------
    int
        Bytes released.
    """
    with _lock:
        free = [b for b in _blocks if b.free()]
        for blk in free:
            _blocks.remove(blk)
        return sum(b.size for b in free)


# ---- allocation and kernel views ----

def read_only(*arrays: np.ndarray) -> tuple[np.ndarray, ...]:
    """Mark cached tables read-only (so no caller can corrupt a cache entry) and return them."""
    for arr in arrays:
        arr.setflags(write=False)
    return arrays


def alloc_like_order(ref: np.ndarray, shape: Sequence[int], dtype: Any) -> np.ndarray:
    """New array of ``shape`` whose axes are laid out in memory in the order of ``ref``'s strides.

    So an output follows its input: channels-last in, channels-last out (as PyTorch keeps memory format).
    Contents are unspecified; large arrays come from the block cache (see the block cache above).
    """
    return OutputLayout(ref, shape).empty(dtype)


class OutputLayout:
    """Where :func:`alloc_like_order` puts an array of ``shape`` that follows ``ref``'s memory order, worked out
    once (plans keep it, so each call only allocates)."""

    __slots__ = ("dims", "inverse", "count", "identity")

    def __init__(self, ref: np.ndarray, shape: Sequence[int]) -> None:
        order = sorted(range(ref.ndim), key=lambda a: (-abs(ref.strides[a]), a))
        self.dims = tuple(int(shape[a]) for a in order)
        self.inverse = tuple(int(a) for a in np.argsort(order))
        self.count = functools.reduce(operator.mul, self.dims, 1)
        self.identity = order == sorted(order)

    def empty_zeroed(self, dtype: Any) -> tuple[np.ndarray, bool]:
        """A new array (contents unspecified) and whether its memory is known to be all zeros."""
        if not isinstance(dtype, np.dtype):     # a scalar type such as np.int64 (arrays pass their dtype)
            dtype = np.dtype(dtype)
        nbytes = self.count * dtype.itemsize
        if nbytes < MIN_BYTES or _limit == 0:
            arr = np.empty(self.dims, dtype)        # the common small case, without the cache's bookkeeping
            zeroed = False
        else:
            raw, zeroed = take(nbytes)
            arr = raw.view(dtype).reshape(self.dims)
        return (arr if self.identity else arr.transpose(self.inverse)), zeroed

    def empty(self, dtype: Any) -> np.ndarray:
        """A new array, contents unspecified."""
        return self.empty_zeroed(dtype)[0]


class ScratchPool:
    """Scratch arrays a plan hands to its kernel runs: :meth:`take` gives a set no other run holds (popping a
    list is atomic under the GIL) or makes one with ``factory``; :meth:`give` returns it.  So a plan shared by
    several Python threads never lets two concurrent runs write one scratch array, and a plan called in a loop
    allocates its scratch once."""

    __slots__ = ("factory", "free")

    # Sets kept per plan: enough for a couple of concurrent callers; more are allocated and dropped.
    KEEP = 2

    def __init__(self, factory: Any) -> None:
        self.factory = factory
        self.free: list = []

    def take(self) -> Any:
        try:
            return self.free.pop()
        except IndexError:
            return self.factory()

    def give(self, item: Any) -> None:
        if len(self.free) < self.KEEP:
            self.free.append(item)


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
