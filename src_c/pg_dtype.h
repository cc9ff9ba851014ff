/* Storage <-> accumulation conversions for poolgrad's four float types.
 *
 * float16 and bfloat16 travel through the kernels as raw uint16_t bits; they are widened to float32 for every
 * comparison and sum and narrowed once, round-to-nearest-even, when a result is stored.  The conversions are
 * branch-free integer/float arithmetic so that GCC can vectorise the loops that call them, and they are exact:
 * the tests compare all 65,536 bit patterns with NumPy and ml_dtypes.
 *
 * Each storage type gets the same names (pg_load_X widens to the accumulation type, pg_store_X narrows from it)
 * so that a Tempita template can write one kernel body and stamp it out per type; the accumulation type of each
 * storage type is setup.py's DTYPES table (16-bit sums that must be exact go through pg_avg.h's float64 stores).
 */
#ifndef PG_DTYPE_H
#define PG_DTYPE_H

#include <stdint.h>
#include <stddef.h>
#include <string.h>

#if defined(__GNUC__)
#define PG_INLINE static inline __attribute__((always_inline))
#else
#define PG_INLINE static inline
#endif

PG_INLINE uint32_t pg_f32_bits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
PG_INLINE float pg_bits_f32(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }

/* ---- IEEE binary16 ------------------------------------------------------------------------------------ */

/* Exact widening.  Shifting exponent+mantissa into float32 position and multiplying by 2^112 rebiases normal
 * numbers and normalises subnormals in one rounding-free step; Inf/NaN get the all-ones exponent back (the NaN
 * payload is kept). */
PG_INLINE float pg_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t em = h & 0x7fffu;
    float mag = pg_bits_f32(em << 13) * 5.192296858534828e+33f; /* 2^112 */
    uint32_t bits = pg_f32_bits(mag);
    if (em >= 0x7c00u) bits |= 0x7f800000u;
    return pg_bits_f32(bits | sign);
}

/* Round-to-nearest-even narrowing.  NaN stays NaN (quiet bit set, top payload bits and sign kept, as the F16C
 * instruction does); overflow goes to +-Inf; float32 values below the float16 subnormal range round correctly
 * through the "add a magic constant" trick, which lets the FPU do the subnormal rounding. */
PG_INLINE uint16_t pg_f32_to_f16(float f)
{
    /* All three candidate results are computed and one is selected, without branches, so that loops storing
     * float16 vectorise. */
    uint32_t x = pg_f32_bits(f);
    uint32_t sign = (x >> 16) & 0x8000u;
    uint32_t a = x & 0x7fffffffu;
    /* below 2^-14 (float16 subnormals and zero): adding 0.5 aligns the float16 subnormal ulp with bit 0 of the
     * float32 mantissa, so the FPU rounds to nearest even for us */
    uint32_t sub = pg_f32_bits(pg_bits_f32(a) + 0.5f) - 0x3f000000u;
    /* normal range: rebias the exponent (-112 << 23) and round half to even at bit 13 */
    uint32_t nrm = (a + 0xc8000fffu + ((a >> 13) & 1u)) >> 13;
    /* >= 65520 rounds to Inf (handled by nrm overflow up to 2^16); Inf and NaN (quiet, payload top bits kept) */
    /* masks instead of branches or nested selects, which GCC leaves as control flow */
    uint32_t m_sub = 0u - (uint32_t)(a < 0x38800000u);
    uint32_t m_big = 0u - (uint32_t)(a >= 0x47800000u);
    uint32_t m_nan = 0u - (uint32_t)(a > 0x7f800000u);
    uint32_t big = (0x7c00u & ~m_nan) | ((0x7e00u | ((a >> 13) & 0x3ffu)) & m_nan);
    uint32_t o = (sub & m_sub) | (nrm & ~(m_sub | m_big)) | (big & m_big);
    return (uint16_t)(o | sign);
}

/* ---- bfloat16 ---------------------------------------------------------------------------------------- */

PG_INLINE float pg_bf16_to_f32(uint16_t b) { return pg_bits_f32((uint32_t)b << 16); }

PG_INLINE uint16_t pg_f32_to_bf16(float f)
{
    uint32_t x = pg_f32_bits(f);
    uint32_t rounded = (x + 0x7fffu + ((x >> 16) & 1u)) >> 16;
    uint32_t quiet = (x >> 16) | 0x0040u;                       /* NaN: keep sign and payload top, set quiet */
    return (uint16_t)((x & 0x7fffffffu) > 0x7f800000u ? quiet : rounded);
}

/* ---- HF32 (1 sign, 8 exponent, 11 mantissa bits), for cube_math_type emulation ------------------------ */

PG_INLINE float pg_round_hf32(float f)
{
    uint32_t x = pg_f32_bits(f);
    if ((x & 0x7fffffffu) > 0x7f800000u) return f;                 /* NaN unchanged */
    x += 0x7ffu + ((x >> 12) & 1u);
    return pg_bits_f32(x & 0xfffff000u);
}

PG_INLINE float pg_round_f16(float f) { return pg_f16_to_f32(pg_f32_to_f16(f)); }

/* ---- uniform per-type names used by the Tempita kernel templates -------------------------------------- */

PG_INLINE float pg_load_f32(float v) { return v; }
PG_INLINE double pg_load_f64(double v) { return v; }
PG_INLINE float pg_load_f16(uint16_t v) { return pg_f16_to_f32(v); }
PG_INLINE float pg_load_bf16(uint16_t v) { return pg_bf16_to_f32(v); }

PG_INLINE float pg_store_f32(float v) { return v; }
PG_INLINE double pg_store_f64(double v) { return v; }
PG_INLINE uint16_t pg_store_f16(float v) { return pg_f32_to_f16(v); }
PG_INLINE uint16_t pg_store_bf16(float v) { return pg_f32_to_bf16(v); }

/* ---- rows --------------------------------------------------------------------------------------------------
 * The portable loops (suffix base) apply the routines above to every element; GCC vectorises them.  A portable
 * build targets baseline x86-64 (no F16C), where float16 rounding is ~20 integer instructions per value, so from
 * ISA level 1 (pg_isa.h: AVX2 with F16C) the float16 rows use the conversion instructions (8 values per
 * instruction, the same round-to-nearest-even results: both follow IEEE 754; a NaN comes out quiet either way)
 * and the bfloat16 rows (shifts and integer adds: identical results) copies of the portable loops compiled for
 * the level's vector width. */
#include "pg_isa.h"

#define PG_ROW_LOOP(NAME, DST_T, SRC_T, CONV)                                                               \
    static void NAME(DST_T *dst, const SRC_T *src, ptrdiff_t n)                                              \
    { for (ptrdiff_t i = 0; i < n; i++) dst[i] = CONV(src[i]); }
#define PG_BF16_ROW_LOOPS(SFX)                                                                               \
    PG_ROW_LOOP(pg_bf16_to_f32_row_##SFX, float, uint16_t, pg_bf16_to_f32)                                   \
    PG_ROW_LOOP(pg_f32_to_bf16_row_##SFX, uint16_t, float, pg_f32_to_bf16)
#define PG_ISA_GEN PG_BF16_ROW_LOOPS
#include "pg_isa_variants.h"
PG_ROW_LOOP(pg_f16_to_f32_row_base, float, uint16_t, pg_f16_to_f32)
PG_ROW_LOOP(pg_f32_to_f16_row_base, uint16_t, float, pg_f32_to_f16)

#if PG_X86_VARIANTS
#include <immintrin.h>
__attribute__((target("avx,f16c"))) static void pg_f16_to_f32_row_avx2(float *dst, const uint16_t *src,
                                                                       ptrdiff_t n)
{
    ptrdiff_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(src + i))));
    for (; i < n; i++) dst[i] = pg_f16_to_f32(src[i]);
}

__attribute__((target("avx,f16c"))) static void pg_f32_to_f16_row_avx2(uint16_t *dst, const float *src,
                                                                       ptrdiff_t n)
{
    ptrdiff_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i *)(dst + i),
                         _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    for (; i < n; i++) dst[i] = pg_f32_to_f16(src[i]);
}
/* AVX-512 has no wider float16 conversion that would pay on these rows */
#define pg_f16_to_f32_row_avx512 pg_f16_to_f32_row_avx2
#define pg_f32_to_f16_row_avx512 pg_f32_to_f16_row_avx2
#endif

/* The row converters the kernels use, at the one ISA level: dst[i] = float(src[i]) for a row of float16 /
 * bfloat16 bits, and dst[i] = the bits of src[i] rounded to nearest even. */
#define PG_ROW_ENTRY(NAME, DST_T, SRC_T)                                                                     \
    static inline void NAME(DST_T *dst, const SRC_T *src, ptrdiff_t n)                                       \
    { int level = pg_isa(); PG_ISA_PICK(level, NAME, (dst, src, n)); }
PG_ROW_ENTRY(pg_f16_to_f32_row, float, uint16_t)
PG_ROW_ENTRY(pg_f32_to_f16_row, uint16_t, float)
PG_ROW_ENTRY(pg_bf16_to_f32_row, float, uint16_t)
PG_ROW_ENTRY(pg_f32_to_bf16_row, uint16_t, float)

#endif
