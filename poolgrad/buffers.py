"""Recycling of the large arrays poolgrad allocates (outputs, and the copies some inputs need).

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

import os
import sys
import threading

import numpy as np

__all__ = ["MIN_BYTES", "take", "set_buffer_cache_limit", "buffer_cache_limit", "buffer_cache_info",
           "release_buffers"]

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


def set_buffer_cache_limit(nbytes: int) -> None:
    """Set the most bytes of large blocks poolgrad keeps for reuse (0 turns recycling off).

    Free blocks above the new limit are released at once.

    Parameters
    ----------
    nbytes : int
        Limit in bytes, >= 0.
    """
    from .params import as_int
    global _limit
    value = as_int(nbytes, "nbytes", "an int >= 0")
    if value < 0:
        as_int(None, "nbytes", "an int >= 0", shown=value)
    with _lock:
        _limit = value
        _make_room(0)


def buffer_cache_limit() -> int:
    """The current limit in bytes (see :func:`set_buffer_cache_limit`)."""
    return _limit


def buffer_cache_info() -> dict:
    """Counters of the block cache: ``limit``, ``blocks``, ``bytes`` (tracked), ``free_bytes``, ``hits``,
    ``misses``."""
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
