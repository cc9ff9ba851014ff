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


cdef extern from "pg_dtype.h" nogil:
    void pg_f16_to_f32_row(float* dst, const uint16_t* src, Py_ssize_t n)
    void pg_f32_to_f16_row(uint16_t* dst, const float* src, Py_ssize_t n)
    void pg_bf16_to_f32_row(float* dst, const uint16_t* src, Py_ssize_t n)
    void pg_f32_to_bf16_row(uint16_t* dst, const float* src, Py_ssize_t n)
    int pg_have_f16c()
    int pg_f16c_state
    int pg_avx2_state


def f16_to_f32_row(const uint16_t[::1] src, float[::1] dst):
    """The row converter the kernels use (F16C when the CPU has it)."""
    with nogil:
        pg_f16_to_f32_row(&dst[0], &src[0], src.shape[0])


def f32_to_f16_row(const float[::1] src, uint16_t[::1] dst):
    """The row converter the kernels use (F16C when the CPU has it)."""
    with nogil:
        pg_f32_to_f16_row(&dst[0], &src[0], src.shape[0])


def bf16_to_f32_row(const uint16_t[::1] src, float[::1] dst):
    """The row converter the kernels use (AVX2 when the CPU has it)."""
    with nogil:
        pg_bf16_to_f32_row(&dst[0], &src[0], src.shape[0])


def f32_to_bf16_row(const float[::1] src, uint16_t[::1] dst):
    """The row converter the kernels use (AVX2 when the CPU has it)."""
    with nogil:
        pg_f32_to_bf16_row(&dst[0], &src[0], src.shape[0])


def have_f16c() -> bool:
    """Whether the row converters use the F16C instructions on this CPU."""
    return bool(pg_have_f16c())


def force_portable_rows(bint flag):
    """Tests only: make this module's row converters use (True) or stop using (False) the portable loops."""
    global pg_f16c_state, pg_avx2_state
    pg_f16c_state = 0 if flag else -1
    pg_avx2_state = 0 if flag else -1
