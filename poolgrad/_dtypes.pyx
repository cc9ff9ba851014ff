# cython: language_level=3
"""The C conversion routines of ``src_c/pg_dtype.h``, exposed for the exhaustive bit-pattern tests and for
Python-side helpers (twin of ``dtypes.py``).  Arrays are 1-D, contiguous and already allocated by the caller."""
from libc.stdint cimport uint16_t

cdef extern from "pg_dtype.h" nogil:
    float pg_f16_to_f32(uint16_t h)
    uint16_t pg_f32_to_f16(float f)
    float pg_bf16_to_f32(uint16_t b)
    uint16_t pg_f32_to_bf16(float f)
    float pg_round_hf32(float f)


def f16_to_f32(const uint16_t[::1] src, float[::1] dst):
    cdef Py_ssize_t i
    with nogil:
        for i in range(src.shape[0]):
            dst[i] = pg_f16_to_f32(src[i])


def f32_to_f16(const float[::1] src, uint16_t[::1] dst):
    cdef Py_ssize_t i
    with nogil:
        for i in range(src.shape[0]):
            dst[i] = pg_f32_to_f16(src[i])


def bf16_to_f32(const uint16_t[::1] src, float[::1] dst):
    cdef Py_ssize_t i
    with nogil:
        for i in range(src.shape[0]):
            dst[i] = pg_bf16_to_f32(src[i])


def f32_to_bf16(const float[::1] src, uint16_t[::1] dst):
    cdef Py_ssize_t i
    with nogil:
        for i in range(src.shape[0]):
            dst[i] = pg_f32_to_bf16(src[i])


def round_hf32(const float[::1] src, float[::1] dst):
    cdef Py_ssize_t i
    with nogil:
        for i in range(src.shape[0]):
            dst[i] = pg_round_hf32(src[i])
