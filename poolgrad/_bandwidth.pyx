# cython: language_level=3
"""The roofline of poolgrad's benchmarks: copy ``n`` bytes with ``t`` OpenMP threads.

A pooling pass that moves B bytes cannot beat the time a plain copy of B/2 bytes read + B/2 bytes written takes
with the same threads, so every benchmark row is reported as a fraction of the copy rate measured here with the
row's own thread count.  (A one-thread ``np.copyto`` made 2-thread rows read up to 175% "of copy".)

The source is cut into ``nthreads`` contiguous chunks of whole 64-byte lines, one per thread under a static
schedule, each copied with ``memcpy``: the C library's copy is what large array copies use (``np.copyto`` too), and
each thread streams its own part of both arrays, as the pooling kernels do with their bands.
"""
from cython.parallel cimport prange, threadid
from libc.string cimport memcpy

import numpy as np


cdef inline Py_ssize_t _chunk_start(Py_ssize_t i, Py_ssize_t nchunks, Py_ssize_t nlines,
                                    Py_ssize_t nbytes) noexcept nogil:
    """First byte of chunk ``i``: chunks are whole 64-byte lines (the last one takes the tail)."""
    if i >= nchunks:
        return nbytes
    return (nlines * i // nchunks) * 64


def copy(const unsigned char[::1] src, unsigned char[::1] dst, int nthreads) -> int:
    """Copy ``src`` into ``dst`` (same length) with ``nthreads`` threads; returns how many threads took part.

    Without OpenMP (a serial build) the loop runs on the calling thread and the result is 1, so a caller can
    say which rate it measured.
    """
    cdef Py_ssize_t n = src.shape[0], nlines, nchunks, i, a, b
    if dst.shape[0] != n:
        raise ValueError(f"copy: src has {n} bytes, dst {dst.shape[0]}")
    if nthreads < 1:
        raise ValueError(f"copy: nthreads must be >= 1, got {nthreads}")
    if n == 0:
        return 1
    nlines = n // 64
    nchunks = min(<Py_ssize_t>nthreads, max(<Py_ssize_t>1, nlines))
    cdef const unsigned char* s = &src[0]
    cdef unsigned char* d = &dst[0]
    # which thread copied each chunk (threadid() is 0 in a serial build)
    owners = np.zeros(nchunks, np.int32)
    cdef int[::1] owner = owners
    with nogil:
        for i in prange(nchunks, num_threads=nthreads, schedule="static"):
            a = _chunk_start(i, nchunks, nlines, n)
            b = _chunk_start(i + 1, nchunks, nlines, n)
            memcpy(d + a, s + a, b - a)
            owner[i] = threadid()
    return int(np.unique(owners).size)
