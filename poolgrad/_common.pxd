# cython: language_level=3
"""Declarations shared by every kernel module: the C helpers in src_c/ and raw-pointer access to ndarrays.

The kernels are ``cdef ... noexcept nogil`` functions that receive plain pointers, element strides and sizes;
all validation has happened in Python before they are called, so they cannot fail."""
from libc.stdint cimport int8_t, int32_t, int64_t, uint16_t
cimport numpy as cnp

cdef extern from "pg_dtype.h" nogil:
    float pg_load_f32(float v)
    double pg_load_f64(double v)
    float pg_load_f16(uint16_t v)
    float pg_load_bf16(uint16_t v)
    float pg_store_f32(float v)
    double pg_store_f64(double v)
    uint16_t pg_store_f16(float v)
    uint16_t pg_store_bf16(float v)
    float pg_f16_to_f32(uint16_t h)
    uint16_t pg_f32_to_f16(float f)
    float pg_bf16_to_f32(uint16_t b)
    uint16_t pg_f32_to_bf16(float f)
    float pg_round_hf32(float f)
    float pg_round_f16(float f)

cdef extern from "pg_isa.h":
    # the one instruction-set level (0 portable, 1 AVX2, 2 AVX-512): a kernel module calls pg_isa_bind() once at
    # import, so that its pg_isa() reads the level poolgrad.config sets (see pg_isa.h)
    int pg_isa_bind() except -1
    int pg_isa() nogil

cdef extern from "pg_parallel.h" nogil:
    int pg_omp_max_threads()
    void pg_atomic_add_f32(float* p, float v)
    void pg_atomic_add_f64(double* p, double v)


cdef inline char* data_of(cnp.ndarray a) noexcept:
    return <char*>cnp.PyArray_DATA(a)


cdef inline Py_ssize_t estride(cnp.ndarray a, int axis) noexcept:
    """Stride of ``axis`` in elements (the Python side guarantees it is a whole number of elements)."""
    return cnp.PyArray_STRIDES(a)[axis] // cnp.PyArray_ITEMSIZE(a)
