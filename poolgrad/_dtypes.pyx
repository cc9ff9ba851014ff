# cython: language_level=3
"""The C conversion routines of ``src_c/pg_dtype.h``, exposed for the exhaustive bit-pattern tests and for
Python-side helpers (twin of ``dtypes.py``).  Arrays are 1-D, contiguous and already allocated by the caller.

Two sets: the scalar routines applied to every element (``f16_to_f32`` ...: pg_dtype.h's portable row loops,
the reference), and the row converters the kernels use (``f16_to_f32_row`` ...), which run the variant of the
one instruction-set level (``poolgrad.config.set_isa_level``: F16C / AVX2 code from level ``"avx2"`` on)."""
from libc.stdint cimport uint16_t
from poolgrad._common cimport pg_isa, pg_isa_bind

ctypedef void (*widen_row)(float* dst, const uint16_t* src, Py_ssize_t n) noexcept nogil
ctypedef void (*narrow_row)(uint16_t* dst, const float* src, Py_ssize_t n) noexcept nogil

cdef extern from "pg_dtype.h" nogil:
    float pg_round_hf32(float f)
    void pg_f16_to_f32_row_base(float* dst, const uint16_t* src, Py_ssize_t n)
    void pg_f32_to_f16_row_base(uint16_t* dst, const float* src, Py_ssize_t n)
    void pg_bf16_to_f32_row_base(float* dst, const uint16_t* src, Py_ssize_t n)
    void pg_f32_to_bf16_row_base(uint16_t* dst, const float* src, Py_ssize_t n)
    void pg_f16_to_f32_row(float* dst, const uint16_t* src, Py_ssize_t n)
    void pg_f32_to_f16_row(uint16_t* dst, const float* src, Py_ssize_t n)
    void pg_bf16_to_f32_row(float* dst, const uint16_t* src, Py_ssize_t n)
    void pg_f32_to_bf16_row(uint16_t* dst, const float* src, Py_ssize_t n)

pg_isa_bind()


cdef int _widen(widen_row fn, const uint16_t[::1] src, float[::1] dst) except -1:
    if dst.shape[0] < src.shape[0]:
        raise ValueError(f"dst holds {dst.shape[0]} values, src {src.shape[0]}")
    if src.shape[0]:
        with nogil:
            fn(&dst[0], &src[0], src.shape[0])
    return 0


cdef int _narrow(narrow_row fn, const float[::1] src, uint16_t[::1] dst) except -1:
    if dst.shape[0] < src.shape[0]:
        raise ValueError(f"dst holds {dst.shape[0]} values, src {src.shape[0]}")
    if src.shape[0]:
        with nogil:
            fn(&dst[0], &src[0], src.shape[0])
    return 0


def f16_to_f32(const uint16_t[::1] src, float[::1] dst):
    _widen(pg_f16_to_f32_row_base, src, dst)


def f32_to_f16(const float[::1] src, uint16_t[::1] dst):
    _narrow(pg_f32_to_f16_row_base, src, dst)


def bf16_to_f32(const uint16_t[::1] src, float[::1] dst):
    _widen(pg_bf16_to_f32_row_base, src, dst)


def f32_to_bf16(const float[::1] src, uint16_t[::1] dst):
    _narrow(pg_f32_to_bf16_row_base, src, dst)


def round_hf32(const float[::1] src, float[::1] dst):
    cdef Py_ssize_t i
    with nogil:
        for i in range(src.shape[0]):
            dst[i] = pg_round_hf32(src[i])


def f16_to_f32_row(const uint16_t[::1] src, float[::1] dst):
    _widen(pg_f16_to_f32_row, src, dst)


def f32_to_f16_row(const float[::1] src, uint16_t[::1] dst):
    _narrow(pg_f32_to_f16_row, src, dst)


def bf16_to_f32_row(const uint16_t[::1] src, float[::1] dst):
    _widen(pg_bf16_to_f32_row, src, dst)


def f32_to_bf16_row(const float[::1] src, uint16_t[::1] dst):
    _narrow(pg_f32_to_bf16_row, src, dst)


def isa_level() -> int:
    """The instruction-set level this module's row converters read now (0, 1 or 2; tests check that it follows
    ``poolgrad.config.set_isa_level``)."""
    return pg_isa()
