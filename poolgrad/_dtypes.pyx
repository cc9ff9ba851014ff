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


cdef class RowConversion:
    """One C conversion over a row: ``conversion(src, dst)`` with 1-D contiguous arrays, ``dst`` at least as
    long as ``src`` (uint16 bits -> float32, or float32 -> uint16 bits)."""
    cdef widen_row widen
    cdef narrow_row narrow

    def __call__(self, src, dst) -> None:
        cdef const uint16_t[::1] bits
        cdef const float[::1] values
        cdef float[::1] wide
        cdef uint16_t[::1] narrowed
        if self.widen != NULL:
            bits, wide = src, dst
            if _length(bits.shape[0], wide.shape[0]):
                with nogil:
                    self.widen(&wide[0], &bits[0], bits.shape[0])
        else:
            values, narrowed = src, dst
            if _length(values.shape[0], narrowed.shape[0]):
                with nogil:
                    self.narrow(&narrowed[0], &values[0], values.shape[0])


cdef Py_ssize_t _length(Py_ssize_t n_src, Py_ssize_t n_dst) except -1:
    if n_dst < n_src:
        raise ValueError(f"dst holds {n_dst} values, src {n_src}")
    return n_src


cdef RowConversion _widening(widen_row fn):
    cdef RowConversion c = RowConversion()
    c.widen = fn
    return c


cdef RowConversion _narrowing(narrow_row fn):
    cdef RowConversion c = RowConversion()
    c.narrow = fn
    return c


# the scalar routines on every element (the portable loops): the reference
f16_to_f32 = _widening(pg_f16_to_f32_row_base)
f32_to_f16 = _narrowing(pg_f32_to_f16_row_base)
bf16_to_f32 = _widening(pg_bf16_to_f32_row_base)
f32_to_bf16 = _narrowing(pg_f32_to_bf16_row_base)
# the row converters the kernels use: the variant of the ISA level
f16_to_f32_row = _widening(pg_f16_to_f32_row)
f32_to_f16_row = _narrowing(pg_f32_to_f16_row)
bf16_to_f32_row = _widening(pg_bf16_to_f32_row)
f32_to_bf16_row = _narrowing(pg_f32_to_bf16_row)


def round_hf32(const float[::1] src, float[::1] dst):
    cdef Py_ssize_t i
    with nogil:
        for i in range(src.shape[0]):
            dst[i] = pg_round_hf32(src[i])


def isa_level() -> int:
    """The instruction-set level this module's row converters read now (0, 1 or 2; tests check that it follows
    ``poolgrad.config.set_isa_level``)."""
    return pg_isa()
