/* Row loops of average pooling (used by poolgrad/_avg_pool.pyx.in).
 *
 * Each loop exists twice on x86-64: for the baseline (SSE2, part of x86-64: no build flag needed) and for
 * AVX2 (+ F16C for the float16 rows), chosen at run time by the one ISA level (pg_isa.h; settable for tests
 * through poolgrad.config.set_isa_level).  Both give the same bits: the same IEEE operations on each element in the same order (no FMA, no
 * reassociation); only the vector width differs.  Elsewhere: baseline only.
 *
 * Accumulation types: float32 accumulates in float32, float64 in float64, and float16 / bfloat16 in float64
 * (then rounded once: see "16-bit results" below).
 *
 * float32 / float64 rows (suffix f32 / f64):
 * div:        t[i] = g[i] / d[i] + 0                        (the + 0 turns -0 into +0)
 * sum:        o[i] = a[i]  |  a[i] + b[i]  |  (a[i] + b[i]) + c[i]     (b == NULL: one term; c == NULL: two)
 * acc:        o[i] += a[i]
 * divs:       t[i] = g[i] / d                               (one divisor)
 * phase2:     C[2q] = sum_{i<n0} T[q+o0+i], C[2q+1] = sum_{i<n1} T[q+o1+i] (left to right) for the n cells of
 *             a row, n0 and n1 in {1, 2}: the column expansion for stride 2, interleaving the two phases
 * sum_stream: sum, with streaming (non-temporal) stores: for grad_x rows too big to stay in cache; such a
 *             store skips the read for ownership, so writing grad_x moves its bytes once.
 *
 * 16-bit rows (suffix f16 / bf16; values travel as uint16_t bits, the accumulator is double):
 * div16:      t[i] = (double)g[i] / d[i] + 0
 * wide16:     t[i] = (double)g[i] + 0
 * acc16:      o[i] += (double)x[i]
 * sumst:      o[i] = round16(s[i]), s[i] = a[i]  |  a[i] + b[i]  |  (a[i] + b[i]) + c[i]; with a divisor
 *             (q != 0): round16(s[i] / q + 0).  The AVX2 variant divides with Markstein's correction, three
 *             FMA-unit operations instead of a division: y = RN(1/q), z = RN(s * y), r = s - z * q (exact, one
 *             FMA), RN(z + r * y) is the correctly rounded quotient (for s and q free of overflow and
 *             underflow, as here: |s| < 2^137, 1 <= |q| < 2^63), the same bits as s / q.  Checked against
 *             division on 9.5 million quotients (integer q up to 70,000, random s) with no difference.
 * divst:      o[i] = round16(a[i] / q)                       (the forward's channel vectors; no + 0)
 *
 * 16-bit results.  A float64 value is rounded to float16 / bfloat16 once, to nearest even, by narrowing it first
 * to float32 with round-to-odd (the float32 nearest to v towards zero, with its last mantissa bit forced to 1
 * when v was not exact) and then rounding that float32 to nearest even.  float32 carries at least 2 more bits
 * than either 16-bit type at every exponent (24 against 11 + 2 and 8 + 2; subnormals: 2^-149 against 2^-24
 * and 2^-133), and with round-to-odd in between the second rounding sees the same side of every tie as the
 * exact value would: the pair rounds exactly like one rounding of v.  (Rounding to nearest in both steps would
 * not: 1 + 2^-11 + 2^-40 rounds to 1 + 2^-11 in float32 and then, a tie, down to 1 in float16.)  Overflow and
 * NaN are kept: v beyond FLT_MAX narrows to FLT_MAX with the odd bit set and rounds to Inf; NaN stays NaN.
 */
#ifndef PG_AVG_H
#define PG_AVG_H

#include <stdint.h>
#include <string.h>
#include "pg_dtype.h"

#include "pg_isa.h"
#include "pg_stream.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__)) && !defined(__AVX2__)
#include <immintrin.h>
#define PG_AVG_DISPATCH 1
#define PG_AVG_AVX2 __attribute__((target("avx2,f16c,fma")))
#define PG_AVG_AVX512 __attribute__((target("avx512f,avx512vl,avx512bw,avx512dq,avx2,f16c,fma")))
#define PG_AVG_AVX512BF __attribute__((target("avx512f,avx512vl,avx512bw,avx512dq,avx512bf16,avx2,f16c,fma")))
#else
#define PG_AVG_DISPATCH 0
#endif

/* 1: at level 2, round bfloat16 stores with AVX512-BF16's VCVTNEPS2BF16 (same bits; set at import where the CPU
 * has it, settable for tests so that the integer rounding is tested on such CPUs too) */
static int pg_avg_bf16cvt = 0;

static int pg_avg_bf16cvt_available(void) {
#if PG_AVG_DISPATCH
    return pg_cpu_has_avx512bf16();     /* pg_isa.h: the one place that probes the CPU */
#else
    return 0;
#endif
}

/* ---- one value: float64 -> 16-bit, rounded once --------------------------------------------------------- */

/* v narrowed to float32 with round-to-odd (NaN stays NaN; see the header comment). */
PG_INLINE float pg_f64_to_f32_odd(double v)
{
    float f = (float)v;
    uint32_t u = pg_f32_bits(f);
    uint32_t inexact = (uint32_t)((double)f != v && v == v);
    uint32_t away = inexact & (uint32_t)(__builtin_fabs((double)f) > __builtin_fabs(v));
    u -= away;                 /* rounded away from zero: step back towards zero (Inf -> FLT_MAX) */
    u |= inexact;              /* and mark the lost bits in the last place */
    return pg_bits_f32(u);
}

PG_INLINE float pg_avg_store_f32(float v) { return v; }
PG_INLINE double pg_avg_store_f64(double v) { return v; }
PG_INLINE uint16_t pg_avg_store_f16(double v) { return pg_f32_to_f16(pg_f64_to_f32_odd(v)); }
PG_INLINE uint16_t pg_avg_store_bf16(double v) { return pg_f32_to_bf16(pg_f64_to_f32_odd(v)); }

/* float64 -> nearest-even float16 value (cube_math_type 2 on float64 input), as a double. */
PG_INLINE double pg_avg_round_f16_d(double v) { return (double)pg_f16_to_f32(pg_avg_store_f16(v)); }

/* ---- float32 / float64 rows ------------------------------------------------------------------------------ */

#define PG_AVG_LOOPS(T, S, ATTR)                                                                              \
ATTR static void pg_avg_div_##S(T *restrict t, const T *restrict g, const T *restrict d, Py_ssize_t n) {      \
    for (Py_ssize_t i = 0; i < n; i++) t[i] = g[i] / d[i] + (T)0;                                            \
}                                                                                                            \
ATTR static void pg_avg_sum_##S(T *restrict o, const T *restrict a, const T *restrict b,                     \
                                const T *restrict c, Py_ssize_t n) {                                         \
    if (b == NULL) for (Py_ssize_t i = 0; i < n; i++) o[i] = a[i];                                           \
    else if (c == NULL) for (Py_ssize_t i = 0; i < n; i++) o[i] = a[i] + b[i];                               \
    else for (Py_ssize_t i = 0; i < n; i++) o[i] = (a[i] + b[i]) + c[i];                                     \
}                                                                                                            \
ATTR static void pg_avg_acc_##S(T *restrict o, const T *restrict a, Py_ssize_t n) {                          \
    for (Py_ssize_t i = 0; i < n; i++) o[i] += a[i];                                                         \
}                                                                                                            \
ATTR static void pg_avg_divs_##S(T *restrict t, const T *restrict g, T d, Py_ssize_t n) {                    \
    for (Py_ssize_t i = 0; i < n; i++) t[i] = g[i] / d;                                                      \
}                                                                                                            \
ATTR static void pg_avg_sum0_##S(T *restrict o, const T *restrict a, const T *restrict b,                    \
                                 const T *restrict c, Py_ssize_t n) {                                        \
    if (b == NULL) for (Py_ssize_t i = 0; i < n; i++) o[i] = a[i] + (T)0;                                    \
    else if (c == NULL) for (Py_ssize_t i = 0; i < n; i++) o[i] = (a[i] + (T)0) + b[i];                      \
    else for (Py_ssize_t i = 0; i < n; i++) o[i] = ((a[i] + (T)0) + b[i]) + c[i];                            \
}                                                                                                            \
ATTR static void pg_avg_sumdiv_##S(T *restrict o, const T *restrict a, const T *restrict b,                  \
                                   const T *restrict c, T d, Py_ssize_t n) {                                 \
    if (b == NULL) for (Py_ssize_t i = 0; i < n; i++) o[i] = a[i] / d;                                       \
    else if (c == NULL) for (Py_ssize_t i = 0; i < n; i++) o[i] = (a[i] + b[i]) / d;                         \
    else for (Py_ssize_t i = 0; i < n; i++) o[i] = ((a[i] + b[i]) + c[i]) / d;                               \
}                                                                                                            \
ATTR static void pg_avg_phase2_##S(T *restrict C, const T *restrict T0, Py_ssize_t o0, int n0,               \
                                   Py_ssize_t o1, int n1, Py_ssize_t n) {                                    \
    const T *a = T0 + o0, *b = T0 + o1;                                                                      \
    Py_ssize_t q, nq = n / 2;                                                                                \
    if (n0 == 1 && n1 == 1) for (q = 0; q < nq; q++) { C[2 * q] = a[q]; C[2 * q + 1] = b[q]; }               \
    else if (n0 == 1) for (q = 0; q < nq; q++) { C[2 * q] = a[q]; C[2 * q + 1] = b[q] + b[q + 1]; }          \
    else if (n1 == 1) for (q = 0; q < nq; q++) { C[2 * q] = a[q] + a[q + 1]; C[2 * q + 1] = b[q]; }          \
    else for (q = 0; q < nq; q++) { C[2 * q] = a[q] + a[q + 1]; C[2 * q + 1] = b[q] + b[q + 1]; }            \
    if (n & 1) C[2 * nq] = n0 == 1 ? a[nq] : a[nq] + a[nq + 1];                                              \
}

/* win: y[i] = (sum over window columns j < cols of (sum over window rows r < rows of x[r * rs + j * cs + i],
 * the first + 0)) / d for i < n, both sums ascending - the forward's order (window rows into S, then S's
 * columns, then the division) for one channel vector, without S: for channels-last windows that do not overlap
 * along the row (kernel <= stride, DenseNet's k2s2), where every S value is used once, writing and reading S
 * cost more than the sums.  Blocks of PG_AVG_WB channels, so the inner loops vectorise.
 * 2x2 windows (DenseNet's transitions) are one straight loop over the channels with the same operations in
 * the same order: the blocked loops keep acc and col in memory (GCC does not keep run-time-length lane arrays
 * in registers), which showed as stores and reloads of every partial sum in profiles of 8x512x14x14 k2s2.
 * Every value that is not NaN has the blocked loops' bits.  Where both terms of a sum are NaN, x86 keeps one
 * operand's, and which one a compiled loop keeps depends on how the compiler ordered the operands (the blocked
 * loops kept the left term's in some positions and not in others): PG_AVG_ADDL keeps the left term's NaN,
 * payload and sign, explicitly, at every instruction-set level and position (the + 0 steps have one possible
 * NaN only). */
#define PG_AVG_ADDL(a, b) ((a) != (a) ? (a) : (a) + (b))
#define PG_AVG_WB 64
#define PG_AVG_WIN(T, S, ATTR)                                                                                \
ATTR static void pg_avg_win_##S(T *restrict y, const T *restrict x, Py_ssize_t rs, Py_ssize_t cs,             \
                                Py_ssize_t rows, Py_ssize_t cols, T d, Py_ssize_t n) {                       \
    T acc[PG_AVG_WB], col[PG_AVG_WB];                                                                        \
    if (rows == 2 && cols == 2) {                                                                            \
        const T *x0 = x, *x1 = x + rs, *x2 = x + cs, *x3 = x + rs + cs;                                      \
        for (Py_ssize_t i = 0; i < n; i++) {                                                                 \
            T c0 = x0[i] + (T)0, c1 = x2[i] + (T)0;                                                          \
            c0 = PG_AVG_ADDL(c0, x1[i]);                                                                     \
            c1 = PG_AVG_ADDL(c1, x3[i]);                                                                     \
            y[i] = PG_AVG_ADDL(c0, c1) / d;                                                                  \
        }                                                                                                    \
        return;                                                                                              \
    }                                                                                                        \
    for (Py_ssize_t i0 = 0; i0 < n; i0 += PG_AVG_WB) {                                                       \
        Py_ssize_t m = n - i0 < PG_AVG_WB ? n - i0 : PG_AVG_WB, i, j, r;                                     \
        for (j = 0; j < cols; j++) {                                                                         \
            const T *p = x + j * cs + i0;                                                                    \
            for (i = 0; i < m; i++) col[i] = p[i] + (T)0;                                                    \
            for (r = 1; r < rows; r++)                                                                       \
                for (i = 0; i < m; i++) col[i] += p[r * rs + i];                                             \
            if (j == 0) for (i = 0; i < m; i++) acc[i] = col[i];                                             \
            else for (i = 0; i < m; i++) acc[i] += col[i];                                                   \
        }                                                                                                    \
        for (i = 0; i < m; i++) y[i0 + i] = acc[i] / d;                                                      \
    }                                                                                                        \
}

PG_AVG_LOOPS(float, f32_base, )
PG_AVG_LOOPS(double, f64_base, )
PG_AVG_WIN(float, f32_base, )
PG_AVG_WIN(double, f64_base, )
#if PG_AVG_DISPATCH
PG_AVG_LOOPS(float, f32_avx2, PG_AVG_AVX2)
PG_AVG_LOOPS(double, f64_avx2, PG_AVG_AVX2)
PG_AVG_WIN(float, f32_avx2, PG_AVG_AVX2)
PG_AVG_WIN(double, f64_avx2, PG_AVG_AVX2)
PG_AVG_WIN(float, f32_avx512, PG_AVG_AVX512)
PG_AVG_WIN(double, f64_avx512, PG_AVG_AVX512)
#define PG_AVG_PICK(NAME, S, ARGS)                                                                            \
    do { if (pg_isa() >= PG_ISA_AVX2) NAME##S##_avx2 ARGS; else NAME##S##_base ARGS; } while (0)

/* AVX-512 sum / acc rows: whole rows as masked vectors.  The plane loops' rows are short (7 - 35 values on the
 * real layers of bench/cnn_layers.py), where the AVX2 loops spend much of their time in scalar tails and loop
 * set-up; a masked last vector has neither.  Same additions in the same order: the same bits. */
#define PG_AVG_M8(n, i) ((n) - (i) >= 8 ? (__mmask8)0xff : (__mmask8)((1u << ((n) - (i))) - 1u))
#define PG_AVG_M16(n, i) ((n) - (i) >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << ((n) - (i))) - 1u))
#define PG_AVG_SUMACC512(T, S, V, W, M, LOAD, STORE, ADD)                                                      \
PG_AVG_AVX512 static void pg_avg_sum_##S##_avx512(T *restrict o, const T *restrict a, const T *restrict b,     \
                                                const T *restrict c, Py_ssize_t n) {                         \
    Py_ssize_t i;                                                                                            \
    if (b == NULL)                                                                                           \
        for (i = 0; i < n; i += W) { M m = PG_AVG_M##W(n, i); STORE(o + i, m, LOAD(m, a + i)); }             \
    else if (c == NULL)                                                                                      \
        for (i = 0; i < n; i += W) {                                                                         \
            M m = PG_AVG_M##W(n, i);                                                                         \
            STORE(o + i, m, ADD(LOAD(m, a + i), LOAD(m, b + i)));                                            \
        }                                                                                                    \
    else                                                                                                     \
        for (i = 0; i < n; i += W) {                                                                         \
            M m = PG_AVG_M##W(n, i);                                                                         \
            STORE(o + i, m, ADD(ADD(LOAD(m, a + i), LOAD(m, b + i)), LOAD(m, c + i)));                       \
        }                                                                                                    \
}                                                                                                            \
PG_AVG_AVX512 static void pg_avg_acc_##S##_avx512(T *restrict o, const T *restrict a, Py_ssize_t n) {          \
    for (Py_ssize_t i = 0; i < n; i += W) {                                                                  \
        M m = PG_AVG_M##W(n, i);                                                                             \
        STORE(o + i, m, ADD(LOAD(m, o + i), LOAD(m, a + i)));                                                \
    }                                                                                                        \
}
PG_AVG_SUMACC512(double, f64, __m512d, 8, __mmask8, _mm512_maskz_loadu_pd, _mm512_mask_storeu_pd, _mm512_add_pd)
PG_AVG_SUMACC512(float, f32, __m512, 16, __mmask16, _mm512_maskz_loadu_ps, _mm512_mask_storeu_ps, _mm512_add_ps)
/* sum0 (the forward's first window rows: ((a + 0) + b) + c) and sumdiv (the channels-last forward's window
 * columns and division in one pass, without the row accumulator's write and read), whole rows as masked
 * vectors */
#define PG_AVG_SUM0DIV512(T, S, V, W, M, SET1, LOAD, STORE, ADD, DIV)                                         \
PG_AVG_AVX512 static void pg_avg_sum0_##S##_avx512(T *restrict o, const T *restrict a, const T *restrict b,    \
                                                 const T *restrict c, Py_ssize_t n) {                        \
    const V z = SET1(0);                                                                                     \
    for (Py_ssize_t i = 0; i < n; i += W) {                                                                  \
        M m = PG_AVG_M##W(n, i);                                                                             \
        V v = ADD(LOAD(m, a + i), z);                                                                        \
        if (b != NULL) {                                                                                     \
            v = ADD(v, LOAD(m, b + i));                                                                      \
            if (c != NULL) v = ADD(v, LOAD(m, c + i));                                                       \
        }                                                                                                    \
        STORE(o + i, m, v);                                                                                  \
    }                                                                                                        \
}                                                                                                            \
PG_AVG_AVX512 static void pg_avg_sumdiv_##S##_avx512(T *restrict o, const T *restrict a, const T *restrict b,  \
                                                   const T *restrict c, T d, Py_ssize_t n) {                 \
    const V vd = SET1(d);                                                                                    \
    Py_ssize_t i;                                                                                            \
    if (b == NULL)                                                                                           \
        for (i = 0; i < n; i += W) { M m = PG_AVG_M##W(n, i); STORE(o + i, m, DIV(LOAD(m, a + i), vd)); }    \
    else if (c == NULL)                                                                                      \
        for (i = 0; i < n; i += W) {                                                                         \
            M m = PG_AVG_M##W(n, i);                                                                         \
            STORE(o + i, m, DIV(ADD(LOAD(m, a + i), LOAD(m, b + i)), vd));                                   \
        }                                                                                                    \
    else                                                                                                     \
        for (i = 0; i < n; i += W) {                                                                         \
            M m = PG_AVG_M##W(n, i);                                                                         \
            STORE(o + i, m, DIV(ADD(ADD(LOAD(m, a + i), LOAD(m, b + i)), LOAD(m, c + i)), vd));              \
        }                                                                                                    \
}
PG_AVG_SUM0DIV512(float, f32, __m512, 16, __mmask16, _mm512_set1_ps, _mm512_maskz_loadu_ps, _mm512_mask_storeu_ps,
                  _mm512_add_ps, _mm512_div_ps)
PG_AVG_SUM0DIV512(double, f64, __m512d, 8, __mmask8, _mm512_set1_pd, _mm512_maskz_loadu_pd, _mm512_mask_storeu_pd,
                  _mm512_add_pd, _mm512_div_pd)

/* phase2 for doubles: 8 cells of each phase per step, interleaved with two permutes (the AVX2 loop, as GCC
 * vectorises it, cost 2.5x the float32 one on 14-wide rows). */
PG_AVG_AVX512 static void pg_avg_phase2_f64_avx512(double *restrict C, const double *restrict T0, Py_ssize_t o0,
                                                   int n0, Py_ssize_t o1, int n1, Py_ssize_t n) {
    const double *a = T0 + o0, *b = T0 + o1;
    const __m512i lo = _mm512_setr_epi64(0, 8, 1, 9, 2, 10, 3, 11), hi = _mm512_setr_epi64(4, 12, 5, 13, 6, 14, 7, 15);
    Py_ssize_t q, nq = n / 2;
    for (q = 0; q < nq; q += 8) {
        __mmask8 m = PG_AVG_M8(nq, q);
        __m512d va = _mm512_maskz_loadu_pd(m, a + q), vb = _mm512_maskz_loadu_pd(m, b + q);
        if (n0 == 2) va = _mm512_add_pd(va, _mm512_maskz_loadu_pd(m, a + q + 1));
        if (n1 == 2) vb = _mm512_add_pd(vb, _mm512_maskz_loadu_pd(m, b + q + 1));
        Py_ssize_t left = 2 * (nq - q);          /* output cells of this step: 16 or fewer */
        __mmask8 m0 = left >= 8 ? (__mmask8)0xff : (__mmask8)((1u << left) - 1u);
        __mmask8 m1 = left >= 16 ? (__mmask8)0xff : left > 8 ? (__mmask8)((1u << (left - 8)) - 1u) : (__mmask8)0;
        _mm512_mask_storeu_pd(C + 2 * q, m0, _mm512_permutex2var_pd(va, lo, vb));
        _mm512_mask_storeu_pd(C + 2 * q + 8, m1, _mm512_permutex2var_pd(va, hi, vb));
    }
    if (n & 1) C[2 * nq] = n0 == 1 ? a[nq] : a[nq] + a[nq + 1];
}
#define PG_AVG_PICKW(NAME, S, ARGS)                                                                           \
    do { int pg_level_ = pg_isa(); if (pg_level_ >= PG_ISA_AVX512) NAME##S##_avx512 ARGS;                   \
         else if (pg_level_ >= PG_ISA_AVX2) NAME##S##_avx2 ARGS; else NAME##S##_base ARGS; } while (0)
#else
#define PG_AVG_PICK(NAME, S, ARGS) NAME##S##_base ARGS
#define PG_AVG_PICKW(NAME, S, ARGS) NAME##S##_base ARGS
#endif

static inline void pg_avg_div_f32(float *t, const float *g, const float *d, Py_ssize_t n)
{ PG_AVG_PICK(pg_avg_div_, f32, (t, g, d, n)); }
static inline void pg_avg_div_f64(double *t, const double *g, const double *d, Py_ssize_t n)
{ PG_AVG_PICK(pg_avg_div_, f64, (t, g, d, n)); }
static inline void pg_avg_sum_f32(float *o, const float *a, const float *b, const float *c, Py_ssize_t n)
{ PG_AVG_PICKW(pg_avg_sum_, f32, (o, a, b, c, n)); }
static inline void pg_avg_sum_f64(double *o, const double *a, const double *b, const double *c, Py_ssize_t n)
{ PG_AVG_PICKW(pg_avg_sum_, f64, (o, a, b, c, n)); }
static inline void pg_avg_divs_f32(float *t, const float *g, float d, Py_ssize_t n)
{ PG_AVG_PICK(pg_avg_divs_, f32, (t, g, d, n)); }
static inline void pg_avg_divs_f64(double *t, const double *g, double d, Py_ssize_t n)
{ PG_AVG_PICK(pg_avg_divs_, f64, (t, g, d, n)); }
static inline void pg_avg_sum0_f32(float *o, const float *a, const float *b, const float *c, Py_ssize_t n)
{ PG_AVG_PICKW(pg_avg_sum0_, f32, (o, a, b, c, n)); }
static inline void pg_avg_sum0_f64(double *o, const double *a, const double *b, const double *c, Py_ssize_t n)
{ PG_AVG_PICKW(pg_avg_sum0_, f64, (o, a, b, c, n)); }
static inline void pg_avg_sumdiv_f32(float *o, const float *a, const float *b, const float *c, float d,
                                     Py_ssize_t n)
{ PG_AVG_PICKW(pg_avg_sumdiv_, f32, (o, a, b, c, d, n)); }
static inline void pg_avg_sumdiv_f64(double *o, const double *a, const double *b, const double *c, double d,
                                     Py_ssize_t n)
{ PG_AVG_PICKW(pg_avg_sumdiv_, f64, (o, a, b, c, d, n)); }
static inline void pg_avg_win_f32(float *y, const float *x, Py_ssize_t rs, Py_ssize_t cs, Py_ssize_t rows,
                                  Py_ssize_t cols, float d, Py_ssize_t n)
{ PG_AVG_PICKW(pg_avg_win_, f32, (y, x, rs, cs, rows, cols, d, n)); }
static inline void pg_avg_win_f64(double *y, const double *x, Py_ssize_t rs, Py_ssize_t cs, Py_ssize_t rows,
                                  Py_ssize_t cols, double d, Py_ssize_t n)
{ PG_AVG_PICKW(pg_avg_win_, f64, (y, x, rs, cs, rows, cols, d, n)); }
static inline void pg_avg_acc_f32(float *o, const float *a, Py_ssize_t n)
{ PG_AVG_PICKW(pg_avg_acc_, f32, (o, a, n)); }
static inline void pg_avg_acc_f64(double *o, const double *a, Py_ssize_t n)
{ PG_AVG_PICKW(pg_avg_acc_, f64, (o, a, n)); }
static inline void pg_avg_phase2_f32(float *C, const float *T, Py_ssize_t o0, int n0, Py_ssize_t o1, int n1,
                                     Py_ssize_t n)
{ PG_AVG_PICK(pg_avg_phase2_, f32, (C, T, o0, n0, o1, n1, n)); }
static inline void pg_avg_phase2_f64(double *C, const double *T, Py_ssize_t o0, int n0, Py_ssize_t o1, int n1,
                                     Py_ssize_t n)
{ PG_AVG_PICKW(pg_avg_phase2_, f64, (C, T, o0, n0, o1, n1, n)); }

/* ---- float32 / float64 NCHW planes (the forward's plane items) --------------------------------------------
 * y[oh * yh + ow * yw] = (sum over iw in [lo_w[ow], hi_w[ow]) of S[iw]) / dv[hidx[oh] * Wo + ow], where S is the
 * row sum of x rows [lo_h[oh], hi_h[oh]) (x rows at stride xh, unit column stride, W columns): the same
 * operations in the same order as the per-row forward (_fwd in _avg_pool.pyx.in: S = ((x_lo + 0) + x_lo+1) + ...,
 * then S's window columns ascending from S[lo_w] into V, then V / dv as one vector loop), one plane per call.
 * flat: y's plane is contiguous (yw == 1, yh == Wo), hidx[oh] == oh and V holds Ho * Wo values: the whole
 * plane's sums go to V and are divided by one loop over the plane (a 4-wide row left AVX-512's division loop
 * in its scalar tail: a third of the plane's time at 2x16x8x8 k2s2).  Its own loop
 * with every table and stride in registers: the per-row path's function calls, struct reloads and work-item
 * set-up were most of a 2x16x8x8 k2s2 forward (8.9 ns of 15 per output, 1 thread; bench/experiments/tiny_loop.py).
 * An output row without input rows (cannot happen for validated windows) gets S = 0. */
#define PG_AVG_PLANE(T, S, ATTR)                                                                              \
ATTR static void pg_avg_plane_##S(T *restrict y, Py_ssize_t yh, Py_ssize_t yw, const T *restrict x,          \
                                  Py_ssize_t xh, Py_ssize_t W, Py_ssize_t Ho, Py_ssize_t Wo,                 \
                                  const int64_t *restrict lo_h, const int64_t *restrict hi_h,                \
                                  const int64_t *restrict lo_w, const int64_t *restrict hi_w,                \
                                  const T *restrict dv, const int64_t *restrict hidx, T *restrict Sr,        \
                                  T *restrict V, int flat) {                                                 \
    for (Py_ssize_t oh = 0; oh < Ho; oh++) {                                                                 \
        Py_ssize_t lo = lo_h[oh], hi = hi_h[oh], i;                                                          \
        if (lo < hi) {                                                                                       \
            const T *xr = x + lo * xh;                                                                       \
            for (i = 0; i < W; i++) Sr[i] = xr[i] + (T)0;                                                    \
            for (Py_ssize_t ih = lo + 1; ih < hi; ih++) {                                                    \
                xr = x + ih * xh;                                                                            \
                for (i = 0; i < W; i++) Sr[i] += xr[i];                                                      \
            }                                                                                                \
        } else {                                                                                             \
            for (i = 0; i < W; i++) Sr[i] = 0;                                                               \
        }                                                                                                    \
        T *Vr = flat ? V + oh * Wo : V;                                                                      \
        for (Py_ssize_t ow = 0; ow < Wo; ow++) {                                                             \
            const T *p = Sr + lo_w[ow];                                                                      \
            Py_ssize_t k = hi_w[ow] - lo_w[ow];                                                              \
            T v;                                                                                             \
            if (k == 2) v = p[0] + p[1];                                                                     \
            else if (k == 3) v = (p[0] + p[1]) + p[2];                                                       \
            else if (k <= 0) v = 0;                                                                          \
            else {                                                                                           \
                v = p[0];                                                                                    \
                for (Py_ssize_t j = 1; j < k; j++) v += p[j];                                                \
            }                                                                                                \
            Vr[ow] = v;                                                                                      \
        }                                                                                                    \
        if (flat) continue;                                                                                  \
        const T *d = dv + hidx[oh] * Wo;                                                                     \
        T *yr = y + oh * yh;                                                                                 \
        if (yw == 1) for (Py_ssize_t ow = 0; ow < Wo; ow++) yr[ow] = V[ow] / d[ow];                          \
        else for (Py_ssize_t ow = 0; ow < Wo; ow++) yr[ow * yw] = V[ow] / d[ow];                             \
    }                                                                                                        \
    if (flat) for (Py_ssize_t i = 0; i < Ho * Wo; i++) y[i] = V[i] / dv[i];                                  \
}
PG_AVG_PLANE(float, f32_base, )
PG_AVG_PLANE(double, f64_base, )
#if PG_AVG_DISPATCH
PG_AVG_PLANE(float, f32_avx2, PG_AVG_AVX2)
PG_AVG_PLANE(double, f64_avx2, PG_AVG_AVX2)
PG_AVG_PLANE(float, f32_avx512, PG_AVG_AVX512)
PG_AVG_PLANE(double, f64_avx512, PG_AVG_AVX512)
#endif
#define PG_AVG_PLANE_ENTRY(T, S)                                                                              \
static inline void pg_avg_plane_##S(T *y, Py_ssize_t yh, Py_ssize_t yw, const T *x, Py_ssize_t xh,           \
                                    Py_ssize_t W, Py_ssize_t Ho, Py_ssize_t Wo, const int64_t *lo_h,         \
                                    const int64_t *hi_h, const int64_t *lo_w, const int64_t *hi_w,           \
                                    const T *dv, const int64_t *hidx, T *Sr, T *V, int flat)                 \
{ PG_AVG_PICKW(pg_avg_plane_, S, (y, yh, yw, x, xh, W, Ho, Wo, lo_h, hi_h, lo_w, hi_w, dv, hidx, Sr, V, flat)); }
PG_AVG_PLANE_ENTRY(float, f32)
PG_AVG_PLANE_ENTRY(double, f64)

/* ---- float32 / float64 NCHW backward planes, one output row per input row ---------------------------------
 * The backward's whole-plane mode with plane_k == 0 (every input row covered by at most one output row, the
 * kernel <= stride down the rows: k2s2) for grad / divisor (cube_math_type 0) and unit-stride grad_output
 * rows, one plane per call: t = g / d + 0 per output row (pg_avg_div's), C[iw] = the t of the output columns
 * covering iw summed ascending (0 where none; the phase and gather loops of _expand give these bits: their
 * extra terms are the zero margins, and adding +0 to a t sum changes no bit as t is never -0), then grad_x row
 * ih = C row clo_h[ih] (0 where none).  One C loop with the tables in registers: the generic plane code's
 * per-row calls (division, phase sums, a memcpy per grad_x row) were most of a 2x16x8x8 k2s2 backward.
 * t: Wo values of scratch, Cp: Ho * W. */
#define PG_AVG_BPLANE0(T, S, ATTR)                                                                            \
ATTR static void pg_avg_bplane0_##S(T *restrict gx, Py_ssize_t H, Py_ssize_t W, const T *restrict g,         \
                                    Py_ssize_t gh, Py_ssize_t Ho, Py_ssize_t Wo, const T *restrict dv,      \
                                    const int64_t *restrict hidx, const int64_t *restrict clo_h,             \
                                    const int64_t *restrict chi_h, const int64_t *restrict clo_w,            \
                                    const int64_t *restrict chi_w, T *restrict t, T *restrict Cp) {          \
    for (Py_ssize_t oh = 0; oh < Ho; oh++) {                                                                 \
        const T *d = dv + hidx[oh] * Wo, *gr = g + oh * gh;                                                  \
        T *c = Cp + oh * W;                                                                                  \
        for (Py_ssize_t ow = 0; ow < Wo; ow++) t[ow] = gr[ow] / d[ow] + (T)0;                                \
        for (Py_ssize_t iw = 0; iw < W; iw++) {                                                              \
            /* one or two terms spelled out: the general loop is vectorised by GCC, costly for short sums */ \
            const T *p = t + clo_w[iw];                                                                      \
            Py_ssize_t k = chi_w[iw] - clo_w[iw];                                                            \
            T v;                                                                                             \
            if (k == 1) v = p[0];                                                                            \
            else if (k == 2) v = p[0] + p[1];                                                                \
            else if (k <= 0) v = 0;                                                                          \
            else {                                                                                           \
                v = p[0];                                                                                    \
                for (Py_ssize_t j = 1; j < k; j++) v += p[j];                                                \
            }                                                                                                \
            c[iw] = v;                                                                                       \
        }                                                                                                    \
    }                                                                                                        \
    for (Py_ssize_t ih = 0; ih < H; ih++) {                                                                  \
        T *row = gx + ih * W;                                                                                \
        if (clo_h[ih] < chi_h[ih]) {                                                                         \
            /* + 0 changes no bit (C is never -0) and keeps GCC from making the loop a memcpy call, which */ \
            /* cost more than the copy itself for short rows */                                              \
            const T *c = Cp + clo_h[ih] * W;                                                                 \
            for (Py_ssize_t iw = 0; iw < W; iw++) row[iw] = c[iw] + (T)0;                                    \
        } else {                                                                                             \
            for (Py_ssize_t iw = 0; iw < W; iw++) row[iw] = 0;                                               \
        }                                                                                                    \
    }                                                                                                        \
}
PG_AVG_BPLANE0(float, f32_base, )
PG_AVG_BPLANE0(double, f64_base, )
#if PG_AVG_DISPATCH
PG_AVG_BPLANE0(float, f32_avx2, PG_AVG_AVX2)
PG_AVG_BPLANE0(double, f64_avx2, PG_AVG_AVX2)
PG_AVG_BPLANE0(float, f32_avx512, PG_AVG_AVX512)
PG_AVG_BPLANE0(double, f64_avx512, PG_AVG_AVX512)
#endif
#define PG_AVG_BPLANE0_ENTRY(T, S)                                                                            \
static inline void pg_avg_bplane0_##S(T *gx, Py_ssize_t H, Py_ssize_t W, const T *g, Py_ssize_t gh,           \
                                      Py_ssize_t Ho, Py_ssize_t Wo, const T *dv, const int64_t *hidx,        \
                                      const int64_t *clo_h, const int64_t *chi_h, const int64_t *clo_w,      \
                                      const int64_t *chi_w, T *t, T *Cp)                                     \
{ PG_AVG_PICKW(pg_avg_bplane0_, S, (gx, H, W, g, gh, Ho, Wo, dv, hidx, clo_h, chi_h, clo_w, chi_w, t, Cp)); }
PG_AVG_BPLANE0_ENTRY(float, f32)
PG_AVG_BPLANE0_ENTRY(double, f64)

/* ---- float32 / float64 NCHW "tall image": many small planes as one image (issue 10) ----------------------
 * Where the windows tile the planes exactly (kernel == stride on both axes, no padding, H == Ho * kh,
 * W == Wo * kw) and the planes follow one another at one row stride (plane stride == H * row stride), the
 * N * C planes are one image of N * C * H rows whose row blocks (kh rows: one output row each) never straddle
 * two planes.  Then the work is two flat loops per chunk of row blocks, vectorised across rows and planes,
 * where the plane loops ran 4-wide rows one plane at a time (2x16x8x8 k2s2: 512 outputs in 32 16-wide steps
 * instead of 128 4-wide rows in 32 calls):
 *
 * forward (pg_avg_tall): S[r * W + c] = ((x[r * kh, c] + 0) + x[r * kh + 1, c]) + ... (the kh rows of block r,
 *   ascending; one short loop per block), then for every output j of the chunk y[j] = (S[kw * j] + ... +
 *   S[kw * j + kw - 1]) / d, linear in j because W == kw * Wo.  These are pg_avg_plane's operations in its
 *   order (its S = (x_lo + 0) + x_lo+1 ..., then the window columns ascending from S[lo_w] - two and three
 *   spelled out, more as v = p[0], v += p[j] - then one division by the divisor) with its one divisor d:
 *   every window is whole, so every divisor is kh * kw or divisor_override.
 * backward (pg_avg_btall): T[kw * j + b] = g[j] / d + 0 for b < kw (the C rows of the block, concatenated),
 *   then each of the block's kh grad_x rows is a copy of its C row: pg_avg_bplane0's t = g / d + 0, C = t
 *   (one covering output column), row = C + 0 - the same bits (t is never -0).
 *
 * Division: where d is a power of two (k2s2's 4), 1 / d is exact and v * (1 / d) is the correctly rounded v / d,
 * the same bits for every v (subnormal results, NaN, infinities included; pg_avg_pow2 below says the same for
 * the 16-bit stores): a multiplication instead of a division, which was half of a 2x16x8x8 k2s2 kernel.
 *
 * x / grad_x rows at stride xh (unit column stride), y / grad_output contiguous (rows * Wo values); S / T:
 * scratch of cap * W values, a chunk of cap row blocks (small enough to stay in L1).  The AVX-512 variants
 * run both loops as masked 16 (float32) / 8 (float64) lane vectors, kw == 2 (DenseNet's k2s2) and kw == 1 as
 * permutes; the other widths and the baseline / AVX2 variants are plain loops with the same operations.
 * Same IEEE operations in the same order at every level: the same bits (NaN signs aside where two NaNs meet
 * in one addition, as everywhere in these kernels: see tests/test_fuzz.py). */

/* d (a float32 or float64 divisor, widened) is a power of two: a normal number with an all-zero fraction; then
 * 1 / d is exact in its own type too (float32: d in [2^-126, 2^127], 1 / d down to 2^-127, a subnormal power of
 * two, still exact) */
static inline int pg_avg_tall_exact(double d) {
    uint64_t u;
    memcpy(&u, &d, 8);
    return (u & 0x000fffffffffffffull) == 0 && ((u >> 52) & 0x7ffu) != 0 && ((u >> 52) & 0x7ffu) != 0x7ffu;
}
/* v / d as the pass computes it: v * rd (rd = 1 / d, exact) when mul, else the division */
#define PG_AVG_TALL_Q(v) (mul ? (v) * rd : (v) / d)

#define PG_AVG_TALL(T, S, ATTR)                                                                               \
ATTR static void pg_avg_tall_vsum_##S(T *restrict Sv, const T *restrict x, Py_ssize_t xh, Py_ssize_t m,       \
                                      Py_ssize_t W, Py_ssize_t kh) {                                         \
    for (Py_ssize_t r = 0; r < m; r++) {                                                                     \
        const T *x0 = x + r * kh * xh, *x1 = x0 + xh;                                                        \
        T *s = Sv + r * W;                                                                                   \
        Py_ssize_t c;                                                                                        \
        if (kh == 1) { for (c = 0; c < W; c++) s[c] = x0[c] + (T)0; continue; }                              \
        for (c = 0; c < W; c++) s[c] = (x0[c] + (T)0) + x1[c];                                               \
        for (Py_ssize_t a = 2; a < kh; a++) {                                                                \
            const T *xa = x0 + a * xh;                                                                       \
            for (c = 0; c < W; c++) s[c] += xa[c];                                                           \
        }                                                                                                    \
    }                                                                                                        \
}                                                                                                            \
ATTR static void pg_avg_tall_hsum_##S(T *restrict y, const T *restrict Sv, Py_ssize_t n, Py_ssize_t kw,      \
                                      T d) {                                                                 \
    const T rd = (T)1 / d;                                                                                   \
    const int mul = pg_avg_tall_exact((double)d);                                                            \
    Py_ssize_t j;                                                                                            \
    if (kw == 1) for (j = 0; j < n; j++) y[j] = PG_AVG_TALL_Q(Sv[j]);                                        \
    else if (kw == 2) for (j = 0; j < n; j++) y[j] = PG_AVG_TALL_Q(Sv[2 * j] + Sv[2 * j + 1]);               \
    else if (kw == 3) for (j = 0; j < n; j++) y[j] = PG_AVG_TALL_Q((Sv[3 * j] + Sv[3 * j + 1]) + Sv[3 * j + 2]); \
    else for (j = 0; j < n; j++) {                                                                           \
        const T *p = Sv + j * kw;                                                                            \
        T v = p[0];                                                                                          \
        for (Py_ssize_t b = 1; b < kw; b++) v += p[b];                                                       \
        y[j] = PG_AVG_TALL_Q(v);                                                                             \
    }                                                                                                        \
}                                                                                                            \
ATTR static void pg_avg_btall_t_##S(T *restrict Tv, const T *restrict g, Py_ssize_t n, Py_ssize_t kw, T d) { \
    const T rd = (T)1 / d;                                                                                   \
    const int mul = pg_avg_tall_exact((double)d);                                                            \
    Py_ssize_t j;                                                                                            \
    if (kw == 1) for (j = 0; j < n; j++) Tv[j] = PG_AVG_TALL_Q(g[j]) + (T)0;                                 \
    else if (kw == 2) for (j = 0; j < n; j++) {                                                              \
        T t = PG_AVG_TALL_Q(g[j]) + (T)0;                                                                    \
        Tv[2 * j] = t;                                                                                       \
        Tv[2 * j + 1] = t;                                                                                   \
    }                                                                                                        \
    else for (j = 0; j < n; j++) {                                                                           \
        T t = PG_AVG_TALL_Q(g[j]) + (T)0;                                                                    \
        for (Py_ssize_t b = 0; b < kw; b++) Tv[j * kw + b] = t;                                              \
    }                                                                                                        \
}                                                                                                            \
ATTR static void pg_avg_btall_rows_##S(T *restrict gx, Py_ssize_t gxh, const T *restrict Tv, Py_ssize_t m,   \
                                       Py_ssize_t W, Py_ssize_t kh) {                                        \
    /* + 0 changes no bit (T is never -0) and keeps GCC from making the copies memcpy calls (as bplane0) */  \
    for (Py_ssize_t r = 0; r < m; r++) {                                                                     \
        const T *src = Tv + r * W;                                                                           \
        T *dst = gx + r * kh * gxh;                                                                          \
        for (Py_ssize_t a = 0; a < kh; a++, dst += gxh)                                                      \
            for (Py_ssize_t c = 0; c < W; c++) dst[c] = src[c] + (T)0;                                       \
    }                                                                                                        \
}

/* The chunk loops around the two passes, one per variant (VS, HS, BT, BR: its pass functions). */
#define PG_AVG_TALL_ENTRY(T, S, ATTR, VS, HS, BT, BR)                                                         \
ATTR static void pg_avg_tall_##S(T *restrict y, const T *restrict x, Py_ssize_t xh, Py_ssize_t rows,          \
                                 Py_ssize_t W, Py_ssize_t kh, Py_ssize_t kw, T d, T *restrict Sv,            \
                                 Py_ssize_t cap) {                                                           \
    Py_ssize_t Wo = W / kw;                                                                                  \
    for (Py_ssize_t r0 = 0; r0 < rows; r0 += cap) {                                                          \
        Py_ssize_t m = rows - r0 < cap ? rows - r0 : cap;                                                    \
        VS(Sv, x + r0 * kh * xh, xh, m, W, kh);                                                              \
        HS(y + r0 * Wo, Sv, m * Wo, kw, d);                                                                  \
    }                                                                                                        \
}                                                                                                            \
ATTR static void pg_avg_btall_##S(T *restrict gx, Py_ssize_t gxh, const T *restrict g, Py_ssize_t rows,       \
                                  Py_ssize_t W, Py_ssize_t kh, Py_ssize_t kw, T d, T *restrict Tv,           \
                                  Py_ssize_t cap) {                                                          \
    Py_ssize_t Wo = W / kw;                                                                                  \
    for (Py_ssize_t r0 = 0; r0 < rows; r0 += cap) {                                                          \
        Py_ssize_t m = rows - r0 < cap ? rows - r0 : cap;                                                    \
        BT(Tv, g + r0 * Wo, m * Wo, kw, d);                                                                  \
        BR(gx + r0 * kh * gxh, gxh, Tv, m, W, kh);                                                           \
    }                                                                                                        \
}

PG_AVG_TALL(float, f32_base, )
PG_AVG_TALL(double, f64_base, )
PG_AVG_TALL_ENTRY(float, f32_base, , pg_avg_tall_vsum_f32_base, pg_avg_tall_hsum_f32_base,
                  pg_avg_btall_t_f32_base, pg_avg_btall_rows_f32_base)
PG_AVG_TALL_ENTRY(double, f64_base, , pg_avg_tall_vsum_f64_base, pg_avg_tall_hsum_f64_base,
                  pg_avg_btall_t_f64_base, pg_avg_btall_rows_f64_base)
#if PG_AVG_DISPATCH
PG_AVG_TALL(float, f32_avx2, PG_AVG_AVX2)
PG_AVG_TALL(double, f64_avx2, PG_AVG_AVX2)
PG_AVG_TALL_ENTRY(float, f32_avx2, PG_AVG_AVX2, pg_avg_tall_vsum_f32_avx2, pg_avg_tall_hsum_f32_avx2,
                  pg_avg_btall_t_f32_avx2, pg_avg_btall_rows_f32_avx2)
PG_AVG_TALL_ENTRY(double, f64_avx2, PG_AVG_AVX2, pg_avg_tall_vsum_f64_avx2, pg_avg_tall_hsum_f64_avx2,
                  pg_avg_btall_t_f64_avx2, pg_avg_btall_rows_f64_avx2)
/* AVX-512: the generic loops (for kw > 2) compiled for the level, and the masked-vector passes.  M(k): the
 * first k lanes (k clipped to [0, lanes]); I0 / I1 pick the even / odd lanes of two vectors (the first and
 * second column of each pair of S), D0 / D1 repeat each lane of the low / high half twice.  The quotient
 * loops exist twice (mul: a multiplication by the exact 1 / d, else the division), chosen once per call. */
PG_AVG_TALL(float, f32_avx512g, PG_AVG_AVX512)
PG_AVG_TALL(double, f64_avx512g, PG_AVG_AVX512)
#define PG_AVG_TALL512(T, S, V, L, M, SET1, LOAD, STORE, ADD0, MUL, DIV, PERM2, PERM, IDX, I0, I1, D0, D1,   \
                       CMP, MOV)                                                                             \
PG_AVG_AVX512 static inline M pg_avg_tall_m_##S(Py_ssize_t k) {                                              \
    return k >= L ? (M)~(M)0 : k <= 0 ? (M)0 : (M)(((M)1 << k) - 1);                                        \
}                                                                                                            \
/* a + b keeping a's NaN where both are NaN, as the plane loops' compiled scalar adds do (GCC may swap the  \
 * operands of a vector add, and x86 keeps the first source's NaN: measured, the sign of an inf - inf NaN    \
 * then differed from the plane path's in the column sums) */                                               \
PG_AVG_AVX512 static inline __attribute__((always_inline)) V pg_avg_tall_addl_##S(V a, V b)                  \
{ return MOV(ADD0(a, b), CMP(a, a, _CMP_UNORD_Q), a); }                                                      \
PG_AVG_AVX512 static inline __attribute__((always_inline)) V pg_avg_tall_q_##S(V v, V vd, V vr, const int mul) \
{ return mul ? MUL(v, vr) : DIV(v, vd); }                                                                    \
PG_AVG_AVX512 static void pg_avg_tall_vsum_##S(T *restrict Sv, const T *restrict x, Py_ssize_t xh,          \
                                               Py_ssize_t m, Py_ssize_t W, Py_ssize_t kh) {                  \
    const V z = SET1(0);                                                                                     \
    for (Py_ssize_t r = 0; r < m; r++) {                                                                     \
        const T *x0 = x + r * kh * xh;                                                                       \
        T *s = Sv + r * W;                                                                                   \
        for (Py_ssize_t c = 0; c < W; c += L) {                                                              \
            M k = pg_avg_tall_m_##S(W - c);                                                                  \
            V v = ADD0(LOAD(k, x0 + c), z);                                                                  \
            for (Py_ssize_t a = 1; a < kh; a++)                                                              \
                v = pg_avg_tall_addl_##S(v, LOAD(k, x0 + a * xh + c));                                       \
            STORE(s + c, k, v);                                                                              \
        }                                                                                                    \
    }                                                                                                        \
}                                                                                                            \
PG_AVG_AVX512 static inline __attribute__((always_inline)) void pg_avg_tall_h_##S(T *restrict y,            \
        const T *restrict Sv, Py_ssize_t n, V vd, V vr, const int kw, const int mul) {                       \
    const IDX p0 = I0, p1 = I1;                                                                              \
    for (Py_ssize_t j = 0; j < n; j += L) {                                                                  \
        V v;                                                                                                 \
        if (kw == 1) {                                                                                       \
            v = LOAD(pg_avg_tall_m_##S(n - j), Sv + j);                                                      \
        } else {                                                                                             \
            Py_ssize_t left = 2 * (n - j);                                                                   \
            V a = LOAD(pg_avg_tall_m_##S(left), Sv + 2 * j);                                                 \
            V b = LOAD(pg_avg_tall_m_##S(left - L), Sv + 2 * j + L);                                         \
            v = pg_avg_tall_addl_##S(PERM2(a, p0, b), PERM2(a, p1, b));                                      \
        }                                                                                                    \
        STORE(y + j, pg_avg_tall_m_##S(n - j), pg_avg_tall_q_##S(v, vd, vr, mul));                           \
    }                                                                                                        \
}                                                                                                            \
PG_AVG_AVX512 static void pg_avg_tall_hsum_##S(T *restrict y, const T *restrict Sv, Py_ssize_t n,           \
                                               Py_ssize_t kw, T d) {                                         \
    const V vd = SET1(d), vr = SET1((T)1 / d);                                                               \
    const int mul = pg_avg_tall_exact((double)d);                                                            \
    if (kw == 1 && mul) pg_avg_tall_h_##S(y, Sv, n, vd, vr, 1, 1);                                           \
    else if (kw == 1) pg_avg_tall_h_##S(y, Sv, n, vd, vr, 1, 0);                                             \
    else if (kw == 2 && mul) pg_avg_tall_h_##S(y, Sv, n, vd, vr, 2, 1);                                      \
    else if (kw == 2) pg_avg_tall_h_##S(y, Sv, n, vd, vr, 2, 0);                                             \
    else pg_avg_tall_hsum_##S##g(y, Sv, n, kw, d);                                                           \
}                                                                                                            \
PG_AVG_AVX512 static inline __attribute__((always_inline)) void pg_avg_btall_tk_##S(T *restrict Tv,         \
        const T *restrict g, Py_ssize_t n, V vd, V vr, const int kw, const int mul) {                        \
    const V z = SET1(0);                                                                                     \
    const IDX q0 = D0, q1 = D1;                                                                              \
    for (Py_ssize_t j = 0; j < n; j += L) {                                                                  \
        V t = ADD0(pg_avg_tall_q_##S(LOAD(pg_avg_tall_m_##S(n - j), g + j), vd, vr, mul), z);                \
        if (kw == 1) {                                                                                       \
            STORE(Tv + j, pg_avg_tall_m_##S(n - j), t);                                                      \
        } else {                                                                                             \
            Py_ssize_t left = 2 * (n - j);                                                                   \
            STORE(Tv + 2 * j, pg_avg_tall_m_##S(left), PERM(q0, t));                                         \
            STORE(Tv + 2 * j + L, pg_avg_tall_m_##S(left - L), PERM(q1, t));                                 \
        }                                                                                                    \
    }                                                                                                        \
}                                                                                                            \
PG_AVG_AVX512 static void pg_avg_btall_t_##S(T *restrict Tv, const T *restrict g, Py_ssize_t n,             \
                                             Py_ssize_t kw, T d) {                                           \
    const V vd = SET1(d), vr = SET1((T)1 / d);                                                               \
    const int mul = pg_avg_tall_exact((double)d);                                                            \
    if (kw == 1 && mul) pg_avg_btall_tk_##S(Tv, g, n, vd, vr, 1, 1);                                         \
    else if (kw == 1) pg_avg_btall_tk_##S(Tv, g, n, vd, vr, 1, 0);                                           \
    else if (kw == 2 && mul) pg_avg_btall_tk_##S(Tv, g, n, vd, vr, 2, 1);                                    \
    else if (kw == 2) pg_avg_btall_tk_##S(Tv, g, n, vd, vr, 2, 0);                                           \
    else pg_avg_btall_t_##S##g(Tv, g, n, kw, d);                                                             \
}                                                                                                            \
PG_AVG_AVX512 static void pg_avg_btall_rows_##S(T *restrict gx, Py_ssize_t gxh, const T *restrict Tv,       \
                                                Py_ssize_t m, Py_ssize_t W, Py_ssize_t kh) {                 \
    for (Py_ssize_t r = 0; r < m; r++) {                                                                     \
        const T *src = Tv + r * W;                                                                           \
        T *dst = gx + r * kh * gxh;                                                                          \
        /* row after row: each grad_x row written front to back (column groups of alternating rows made the \
         * write-bound big planes 1.2x slower than the ring path's row copies) */                            \
        for (Py_ssize_t a = 0; a < kh; a++)                                                                  \
            for (Py_ssize_t c = 0; c < W; c += L) {                                                          \
                M k = pg_avg_tall_m_##S(W - c);                                                              \
                STORE(dst + a * gxh + c, k, LOAD(k, src + c));                                              \
            }                                                                                                \
    }                                                                                                        \
}
PG_AVG_TALL512(float, f32_avx512, __m512, 16, __mmask16, _mm512_set1_ps, _mm512_maskz_loadu_ps,
               _mm512_mask_storeu_ps, _mm512_add_ps, _mm512_mul_ps, _mm512_div_ps, _mm512_permutex2var_ps,
               _mm512_permutexvar_ps, __m512i,
               _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30),
               _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31),
               _mm512_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7),
               _mm512_setr_epi32(8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13, 13, 14, 14, 15, 15),
               _mm512_cmp_ps_mask, _mm512_mask_mov_ps)
PG_AVG_TALL512(double, f64_avx512, __m512d, 8, __mmask8, _mm512_set1_pd, _mm512_maskz_loadu_pd,
               _mm512_mask_storeu_pd, _mm512_add_pd, _mm512_mul_pd, _mm512_div_pd, _mm512_permutex2var_pd,
               _mm512_permutexvar_pd, __m512i,
               _mm512_setr_epi64(0, 2, 4, 6, 8, 10, 12, 14), _mm512_setr_epi64(1, 3, 5, 7, 9, 11, 13, 15),
               _mm512_setr_epi64(0, 0, 1, 1, 2, 2, 3, 3), _mm512_setr_epi64(4, 4, 5, 5, 6, 6, 7, 7),
               _mm512_cmp_pd_mask, _mm512_mask_mov_pd)
PG_AVG_TALL_ENTRY(float, f32_avx512, PG_AVG_AVX512, pg_avg_tall_vsum_f32_avx512, pg_avg_tall_hsum_f32_avx512,
                  pg_avg_btall_t_f32_avx512, pg_avg_btall_rows_f32_avx512)
PG_AVG_TALL_ENTRY(double, f64_avx512, PG_AVG_AVX512, pg_avg_tall_vsum_f64_avx512, pg_avg_tall_hsum_f64_avx512,
                  pg_avg_btall_t_f64_avx512, pg_avg_btall_rows_f64_avx512)
#endif
#define PG_AVG_TALL_CALLS(T, S)                                                                               \
static inline void pg_avg_tall_##S(T *y, const T *x, Py_ssize_t xh, Py_ssize_t rows, Py_ssize_t W,           \
                                   Py_ssize_t kh, Py_ssize_t kw, T d, T *Sv, Py_ssize_t cap)                 \
{ PG_AVG_PICKW(pg_avg_tall_, S, (y, x, xh, rows, W, kh, kw, d, Sv, cap)); }                                   \
static inline void pg_avg_btall_##S(T *gx, Py_ssize_t gxh, const T *g, Py_ssize_t rows, Py_ssize_t W,        \
                                    Py_ssize_t kh, Py_ssize_t kw, T d, T *Tv, Py_ssize_t cap)                \
{ PG_AVG_PICKW(pg_avg_btall_, S, (gx, gxh, g, rows, W, kh, kw, d, Tv, cap)); }
PG_AVG_TALL_CALLS(float, f32)
PG_AVG_TALL_CALLS(double, f64)

/* ---- streaming stores: pg_stream.h's, under the names the average kernels use ---------------------------- */

#define PG_AVG_STREAMING PG_STREAM_AVAILABLE
#define PG_AVG_S3 PG_STREAM_S3
#define pg_avg_sum_stream_f32 pg_stream_sum_f32
#define pg_avg_sum_stream_f64 pg_stream_sum_f64
#define pg_avg_stream_u16(d, s, n) pg_stream_copy((d), (s), (size_t)(n) * sizeof(uint16_t))
#define pg_avg_sfence pg_stream_fence

/* ---- 16-bit rows (double accumulator) -------------------------------------------------------------------- */

#define PG_AVG_LOOPS16(S, LOAD, ATTR, SFX)                                                                    \
ATTR static void pg_avg_div16_##S##_##SFX(double *restrict t, const uint16_t *restrict g,                    \
                                          const double *restrict d, Py_ssize_t n) {                          \
    for (Py_ssize_t i = 0; i < n; i++) t[i] = (double)LOAD(g[i]) / d[i] + 0.0;                              \
}                                                                                                            \
ATTR static void pg_avg_wide16_##S##_##SFX(double *restrict t, const uint16_t *restrict g, Py_ssize_t n) {   \
    for (Py_ssize_t i = 0; i < n; i++) t[i] = (double)LOAD(g[i]) + 0.0;                                     \
}                                                                                                            \
ATTR static void pg_avg_acc16_##S##_##SFX(double *restrict o, const uint16_t *restrict x, Py_ssize_t n) {    \
    for (Py_ssize_t i = 0; i < n; i++) o[i] += (double)LOAD(x[i]);                                          \
}                                                                                                            \
ATTR static void pg_avg_sumst_##S##_##SFX(uint16_t *restrict o, const double *restrict a,                   \
                                          const double *restrict b, const double *restrict c,                \
                                          double q, Py_ssize_t n) {                                          \
    if (q != 0) for (Py_ssize_t i = 0; i < n; i++) o[i] = pg_avg_store_##S(PG_AVG_S3(i) / q + 0.0);         \
    else if (b == NULL) for (Py_ssize_t i = 0; i < n; i++) o[i] = pg_avg_store_##S(a[i]);                    \
    else if (c == NULL) for (Py_ssize_t i = 0; i < n; i++) o[i] = pg_avg_store_##S(a[i] + b[i]);             \
    else for (Py_ssize_t i = 0; i < n; i++) o[i] = pg_avg_store_##S((a[i] + b[i]) + c[i]);                   \
}                                                                                                            \
ATTR static void pg_avg_divst_##S##_##SFX(uint16_t *restrict o, const double *restrict a, double q,          \
                                          Py_ssize_t n) {                                                    \
    for (Py_ssize_t i = 0; i < n; i++) o[i] = pg_avg_store_##S(a[i] / q);                                    \
}

PG_AVG_LOOPS16(f16, pg_f16_to_f32, , base)
PG_AVG_LOOPS16(bf16, pg_bf16_to_f32, , base)

#if PG_AVG_DISPATCH
/* 4 doubles -> 4 floats with round-to-odd (pg_f64_to_f32_odd, lane by lane) */
PG_AVG_AVX2 static inline __m128i pg_avg_odd4(__m256d v) {
    const __m256d absm = _mm256_castsi256_pd(_mm256_set1_epi64x(0x7fffffffffffffffLL));
    __m128 f = _mm256_cvtpd_ps(v);
    __m256d back = _mm256_cvtps_pd(f);
    __m256d inexact = _mm256_cmp_pd(back, v, _CMP_NEQ_OQ);   /* false for NaN */
    __m256d away = _mm256_and_pd(inexact, _mm256_cmp_pd(_mm256_and_pd(back, absm), _mm256_and_pd(v, absm),
                                                        _CMP_GT_OQ));
    /* the low halves of the 64-bit lane masks, as four 32-bit masks */
    const __m256i lo = _mm256_setr_epi32(0, 2, 4, 6, 0, 2, 4, 6);
    __m128i m_in = _mm256_castsi256_si128(_mm256_permutevar8x32_epi32(_mm256_castpd_si256(inexact), lo));
    __m128i m_aw = _mm256_castsi256_si128(_mm256_permutevar8x32_epi32(_mm256_castpd_si256(away), lo));
    __m128i u = _mm_castps_si128(f);
    u = _mm_add_epi32(u, m_aw);                                      /* -1 where rounded away from zero */
    u = _mm_or_si128(u, _mm_and_si128(m_in, _mm_set1_epi32(1)));
    return u;
}
/* 8 float bits (two halves) -> 8 bfloat16, nearest even, NaN quiet (pg_f32_to_bf16 lane by lane) */
PG_AVG_AVX2 static inline __m128i pg_avg_bf16_8(__m128i x0, __m128i x1) {
    __m256i x = _mm256_set_m128i(x1, x0);
    __m256i r = _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(x, _mm256_set1_epi32(0x7fff)),
                                                   _mm256_and_si256(_mm256_srli_epi32(x, 16), _mm256_set1_epi32(1))),
                                  16);
    __m256i q = _mm256_or_si256(_mm256_srli_epi32(x, 16), _mm256_set1_epi32(0x40));
    __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(x, _mm256_set1_epi32(0x7fffffff)),
                                     _mm256_set1_epi32(0x7f800000));
    r = _mm256_blendv_epi8(r, q, nan);
    r = _mm256_and_si256(r, _mm256_set1_epi32(0xffff));
    return _mm_packus_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1));
}
PG_AVG_AVX2 static inline __m128i pg_avg_pack_f16(__m128i x0, __m128i x1) {
    __m256 f = _mm256_castsi256_ps(_mm256_set_m128i(x1, x0));
    return _mm256_cvtps_ph(f, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
}
PG_AVG_AVX2 static inline __m128i pg_avg_pack_bf16(__m128i x0, __m128i x1) { return pg_avg_bf16_8(x0, x1); }
/* s / q correctly rounded from y = RN(1/q) (Markstein; see the header comment).  For s = +-Inf or NaN the
 * correction would give NaN (Inf - Inf): there s * y, which is s / q, is kept. */
PG_AVG_AVX2 static inline __m256d pg_avg_qdiv(__m256d s, __m256d q, __m256d y) {
    __m256d z = _mm256_mul_pd(s, y);
    __m256d r = _mm256_fnmadd_pd(z, q, s);
    __m256d finite = _mm256_cmp_pd(_mm256_sub_pd(s, s), _mm256_setzero_pd(), _CMP_EQ_OQ);
    return _mm256_blendv_pd(z, _mm256_fmadd_pd(r, y, z), finite);
}
PG_AVG_AVX2 static inline __m256 pg_avg_widen_f16(const uint16_t *p) {
    return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p));
}
PG_AVG_AVX2 static inline __m256 pg_avg_widen_bf16(const uint16_t *p) {
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p)), 16));
}

#define PG_AVG_LOOPS16_AVX2(S, LOAD)                                                                          \
PG_AVG_AVX2 static void pg_avg_div16_##S##_avx2(double *restrict t, const uint16_t *restrict g,              \
                                                const double *restrict d, Py_ssize_t n) {                    \
    Py_ssize_t i = 0;                                                                                        \
    const __m256d z = _mm256_setzero_pd();                                                                   \
    for (; i + 8 <= n; i += 8) {                                                                             \
        __m256 w = pg_avg_widen_##S(g + i);                                                                  \
        __m256d w0 = _mm256_cvtps_pd(_mm256_castps256_ps128(w)), w1 = _mm256_cvtps_pd(_mm256_extractf128_ps(w, 1)); \
        _mm256_storeu_pd(t + i, _mm256_add_pd(_mm256_div_pd(w0, _mm256_loadu_pd(d + i)), z));               \
        _mm256_storeu_pd(t + i + 4, _mm256_add_pd(_mm256_div_pd(w1, _mm256_loadu_pd(d + i + 4)), z));       \
    }                                                                                                        \
    for (; i < n; i++) t[i] = (double)LOAD(g[i]) / d[i] + 0.0;                                              \
}                                                                                                            \
PG_AVG_AVX2 static void pg_avg_wide16_##S##_avx2(double *restrict t, const uint16_t *restrict g, Py_ssize_t n) { \
    Py_ssize_t i = 0;                                                                                        \
    const __m256d z = _mm256_setzero_pd();                                                                   \
    for (; i + 8 <= n; i += 8) {                                                                             \
        __m256 w = pg_avg_widen_##S(g + i);                                                                  \
        _mm256_storeu_pd(t + i, _mm256_add_pd(_mm256_cvtps_pd(_mm256_castps256_ps128(w)), z));               \
        _mm256_storeu_pd(t + i + 4, _mm256_add_pd(_mm256_cvtps_pd(_mm256_extractf128_ps(w, 1)), z));         \
    }                                                                                                        \
    for (; i < n; i++) t[i] = (double)LOAD(g[i]) + 0.0;                                                     \
}                                                                                                            \
PG_AVG_AVX2 static void pg_avg_acc16_##S##_avx2(double *restrict o, const uint16_t *restrict x, Py_ssize_t n) { \
    Py_ssize_t i = 0;                                                                                        \
    for (; i + 8 <= n; i += 8) {                                                                             \
        __m256 w = pg_avg_widen_##S(x + i);                                                                  \
        _mm256_storeu_pd(o + i, _mm256_add_pd(_mm256_loadu_pd(o + i), _mm256_cvtps_pd(_mm256_castps256_ps128(w)))); \
        _mm256_storeu_pd(o + i + 4, _mm256_add_pd(_mm256_loadu_pd(o + i + 4),                               \
                                                  _mm256_cvtps_pd(_mm256_extractf128_ps(w, 1))));            \
    }                                                                                                        \
    for (; i < n; i++) o[i] += (double)LOAD(x[i]);                                                          \
}                                                                                                            \
PG_AVG_AVX2 static void pg_avg_sumst_##S##_avx2(uint16_t *restrict o, const double *restrict a,             \
                                                const double *restrict b, const double *restrict c,          \
                                                double q, Py_ssize_t n) {                                    \
    Py_ssize_t i = 0;                                                                                        \
    const __m256d vq = _mm256_set1_pd(q), vy = _mm256_set1_pd(q != 0 ? 1.0 / q : 0.0);                      \
    const __m256d z = _mm256_setzero_pd();                                                                   \
    for (; i + 8 <= n; i += 8) {                                                                             \
        __m256d v0 = _mm256_loadu_pd(a + i), v1 = _mm256_loadu_pd(a + i + 4);                               \
        if (b != NULL) {                                                                                     \
            v0 = _mm256_add_pd(v0, _mm256_loadu_pd(b + i));                                                  \
            v1 = _mm256_add_pd(v1, _mm256_loadu_pd(b + i + 4));                                              \
            if (c != NULL) {                                                                                 \
                v0 = _mm256_add_pd(v0, _mm256_loadu_pd(c + i));                                              \
                v1 = _mm256_add_pd(v1, _mm256_loadu_pd(c + i + 4));                                          \
            }                                                                                                \
        }                                                                                                    \
        if (q != 0) {                                                                                        \
            v0 = _mm256_add_pd(pg_avg_qdiv(v0, vq, vy), z);                                                  \
            v1 = _mm256_add_pd(pg_avg_qdiv(v1, vq, vy), z);                                                  \
        }                                                                                                    \
        _mm_storeu_si128((__m128i *)(o + i), pg_avg_pack_##S(pg_avg_odd4(v0), pg_avg_odd4(v1)));             \
    }                                                                                                        \
    if (q != 0) for (; i < n; i++) o[i] = pg_avg_store_##S(PG_AVG_S3(i) / q + 0.0);                         \
    else for (; i < n; i++) o[i] = pg_avg_store_##S(PG_AVG_S3(i));                                          \
}                                                                                                            \
PG_AVG_AVX2 static void pg_avg_divst_##S##_avx2(uint16_t *restrict o, const double *restrict a, double q,    \
                                                Py_ssize_t n) {                                              \
    Py_ssize_t i = 0;                                                                                        \
    const __m256d vq = _mm256_set1_pd(q), vy = _mm256_set1_pd(1.0 / q);                                     \
    for (; i + 8 <= n; i += 8) {                                                                             \
        __m256d v0 = pg_avg_qdiv(_mm256_loadu_pd(a + i), vq, vy);                                           \
        __m256d v1 = pg_avg_qdiv(_mm256_loadu_pd(a + i + 4), vq, vy);                                       \
        _mm_storeu_si128((__m128i *)(o + i), pg_avg_pack_##S(pg_avg_odd4(v0), pg_avg_odd4(v1)));             \
    }                                                                                                        \
    for (; i < n; i++) o[i] = pg_avg_store_##S(a[i] / q);                                                    \
}

PG_AVG_LOOPS16_AVX2(f16, pg_f16_to_f32)
PG_AVG_LOOPS16_AVX2(bf16, pg_bf16_to_f32)

/* AVX-512: the rounding stores, 8 doubles per vector, the row tail under a mask.  Round-to-odd is one
 * conversion toward zero plus the inexact bit: RZ(v) | inexact equals pg_f64_to_f32_odd (which steps a
 * round-to-nearest result back towards zero when it went away). */
PG_AVG_AVX512 static inline __m256i pg_avg_odd8(__m512d v) {
    __m256 f = _mm512_cvt_roundpd_ps(v, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
    __mmask8 inexact = _mm512_cmp_pd_mask(_mm512_cvtps_pd(f), v, _CMP_NEQ_OQ);   /* false for NaN */
    __m256i u = _mm256_castps_si256(f);
    return _mm256_mask_or_epi32(u, inexact, u, _mm256_set1_epi32(1));
}
/* q is a power of two (a normal double with an all-zero fraction), so 1/q is exact and s * (1/q) == s / q */
static inline int pg_avg_pow2(double q) {
    uint64_t u;
    memcpy(&u, &q, 8);
    return (u & 0x000fffffffffffffull) == 0 && ((u >> 52) & 0x7ffu) != 0 && ((u >> 52) & 0x7ffu) != 0x7ffu;
}
PG_AVG_AVX512 static inline __m512d pg_avg_qdiv8(__m512d s, __m512d q, __m512d y) {   /* as pg_avg_qdiv */
    __m512d z = _mm512_mul_pd(s, y);
    __m512d r = _mm512_fnmadd_pd(z, q, s);
    __mmask8 finite = (__mmask8)~_mm512_fpclass_pd_mask(s, 0x99);     /* not NaN (0x81) or +-Inf (0x18) */
    return _mm512_mask3_fmadd_pd(r, y, z, finite);                     /* non-finite lanes keep z */
}
PG_AVG_AVX512 static inline __m128i pg_avg_pack8_f16(__m256i u) {
    return _mm256_cvtps_ph(_mm256_castsi256_ps(u), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
}
PG_AVG_AVX512 static inline __m128i pg_avg_pack8_bf16(__m256i x) {
    __m256i r = _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(x, _mm256_set1_epi32(0x7fff)),
                                                   _mm256_and_si256(_mm256_srli_epi32(x, 16), _mm256_set1_epi32(1))),
                                  16);
    __m256i q = _mm256_or_si256(_mm256_srli_epi32(x, 16), _mm256_set1_epi32(0x40));
    __mmask8 nan = _mm256_cmpgt_epi32_mask(_mm256_and_si256(x, _mm256_set1_epi32(0x7fffffff)),
                                           _mm256_set1_epi32(0x7f800000));
    return _mm256_cvtepi32_epi16(_mm256_mask_blend_epi32(nan, r, q));   /* keeps the low 16 bits of each lane */
}
PG_AVG_AVX512 static inline __m512d pg_avg_widen8_f16(const uint16_t *p, __mmask8 m) {
    return _mm512_cvtps_pd(_mm256_cvtph_ps(_mm_maskz_loadu_epi16(m, p)));
}
PG_AVG_AVX512 static inline __m512d pg_avg_widen8_bf16(const uint16_t *p, __mmask8 m) {
    return _mm512_cvtps_pd(_mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_maskz_loadu_epi16(m, p)),
                                                                 16)));
}
/* Round-to-odd for the float16 store, cheaper: the inexact bit is "any of the 29 fraction bits float32 drops
 * is set" - exact wherever RZ(v) is a normal float32 or overflows (then both 16-bit types round to Inf either
 * way).  Below 2^-126 float32 keeps fewer bits, but every such value rounds to +-0 in float16 whatever the odd
 * bit, so for float16 the result is always that of pg_avg_odd8 (one test instead of a conversion back and a
 * compare).  NaN stays NaN (a set bit 0 is dropped by the 16-bit conversions). */
PG_AVG_AVX512 static inline __m256i pg_avg_odd8t(__m512d v) {
    __m256 f = _mm512_cvt_roundpd_ps(v, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
    __mmask8 inexact = _mm512_test_epi64_mask(_mm512_castpd_si512(v), _mm512_set1_epi64(0x1fffffff));
    __m256i u = _mm256_castps_si256(f);
    return _mm256_mask_or_epi32(u, inexact, u, _mm256_set1_epi32(1));
}
PG_AVG_AVX512 static inline __m128i pg_avg_round8_f16(__m512d v) { return pg_avg_pack8_f16(pg_avg_odd8t(v)); }
PG_AVG_AVX512 static inline __m128i pg_avg_round8_bf16(__m512d v) { return pg_avg_pack8_bf16(pg_avg_odd8(v)); }
/* bfloat16 with AVX512-BF16: VCVTNEPS2BF16 rounds float32 to nearest even and quiets NaN as pg_f32_to_bf16 does,
 * in one instruction instead of nine, but reads float32 subnormals as zero.  They arise only from |v| < 2^-126
 * (then the exact pg_avg_odd8 and the integer rounding are used for the whole vector; rare in gradients);
 * elsewhere pg_avg_odd8t is exact (see above). */
PG_AVG_AVX512BF static inline __m128i pg_avg_round8_bf16cvt(__m512d v) {
    __mmask8 tiny = _mm512_cmp_pd_mask(_mm512_abs_pd(v), _mm512_set1_pd(0x1p-126), _CMP_LT_OQ);
    tiny = _mm512_mask_cmp_pd_mask(tiny, v, _mm512_setzero_pd(), _CMP_NEQ_OQ);
    if (__builtin_expect(tiny != 0, 0)) return pg_avg_pack8_bf16(pg_avg_odd8(v));
    return (__m128i)_mm256_cvtneps_pbh(_mm256_castsi256_ps(pg_avg_odd8t(v)));
}
/* s / q (how 1: q a power of two, s * (1/q) exact; 2: Markstein's correctly rounded quotient; 3: as 2, + 0) */
PG_AVG_AVX512 static inline __attribute__((always_inline)) __m512d pg_avg_quot8(__m512d v, __m512d vq, __m512d vy,
                                                                               const int how) {
    if (how == 1) return _mm512_mul_pd(v, vy);
    if (how == 2) return pg_avg_qdiv8(v, vq, vy);
    if (how == 3) return _mm512_add_pd(pg_avg_qdiv8(v, vq, vy), _mm512_setzero_pd());
    return v;
}
/* sumst / divst, one loop per (number of terms, kind of division) so that neither is tested per vector: whole
 * vectors, then the tail under a mask. */
#define PG_AVG_STORES512(NAME, ROUND, ATTR)                                                                   \
ATTR static inline __attribute__((always_inline)) void NAME##_sumst_k(uint16_t *restrict o,                  \
        const double *restrict a, const double *restrict b, const double *restrict c, __m512d vq, __m512d vy,  \
        Py_ssize_t n, const int terms, const int how) {                                                      \
    Py_ssize_t i = 0;                                                                                        \
    for (; i + 8 <= n; i += 8) {                                                                             \
        __m512d v = _mm512_loadu_pd(a + i);                                                                  \
        if (terms > 1) v = _mm512_add_pd(v, _mm512_loadu_pd(b + i));                                         \
        if (terms > 2) v = _mm512_add_pd(v, _mm512_loadu_pd(c + i));                                         \
        _mm_storeu_si128((__m128i *)(o + i), ROUND(pg_avg_quot8(v, vq, vy, how)));                           \
    }                                                                                                        \
    if (i < n) {                                                                                             \
        __mmask8 m = (__mmask8)((1u << (n - i)) - 1u);                                                       \
        __m512d v = _mm512_maskz_loadu_pd(m, a + i);                                                         \
        if (terms > 1) v = _mm512_add_pd(v, _mm512_maskz_loadu_pd(m, b + i));                                \
        if (terms > 2) v = _mm512_add_pd(v, _mm512_maskz_loadu_pd(m, c + i));                                \
        _mm_mask_storeu_epi16(o + i, m, ROUND(pg_avg_quot8(v, vq, vy, how)));                                \
    }                                                                                                        \
}                                                                                                            \
ATTR static void NAME##_sumst(uint16_t *restrict o, const double *restrict a, const double *restrict b,       \
                              const double *restrict c, double q, Py_ssize_t n) {                            \
    const __m512d vq = _mm512_set1_pd(q), vy = _mm512_set1_pd(q != 0 ? 1.0 / q : 0.0);                      \
    /* 0: no divisor; 1: a power of two (s * y is exact: no correction); 2: positive; 3: negative (+ 0 turns  \
     * the -0 of 0 / q into +0; the sums themselves are never -0) */                                         \
    const int how = q == 0 ? 0 : (pg_avg_pow2(q) && q > 0) ? 1 : q > 0 ? 2 : 3;                               \
    const int terms = b == NULL ? 1 : c == NULL ? 2 : 3;                                                     \
    switch (4 * terms + how) {                                                                               \
    case 4: NAME##_sumst_k(o, a, b, c, vq, vy, n, 1, 0); break;                                              \
    case 5: NAME##_sumst_k(o, a, b, c, vq, vy, n, 1, 1); break;                                              \
    case 6: NAME##_sumst_k(o, a, b, c, vq, vy, n, 1, 2); break;                                              \
    case 7: NAME##_sumst_k(o, a, b, c, vq, vy, n, 1, 3); break;                                              \
    case 8: NAME##_sumst_k(o, a, b, c, vq, vy, n, 2, 0); break;                                              \
    case 9: NAME##_sumst_k(o, a, b, c, vq, vy, n, 2, 1); break;                                              \
    case 10: NAME##_sumst_k(o, a, b, c, vq, vy, n, 2, 2); break;                                             \
    case 11: NAME##_sumst_k(o, a, b, c, vq, vy, n, 2, 3); break;                                             \
    case 12: NAME##_sumst_k(o, a, b, c, vq, vy, n, 3, 0); break;                                             \
    case 13: NAME##_sumst_k(o, a, b, c, vq, vy, n, 3, 1); break;                                             \
    case 14: NAME##_sumst_k(o, a, b, c, vq, vy, n, 3, 2); break;                                             \
    default: NAME##_sumst_k(o, a, b, c, vq, vy, n, 3, 3); break;                                             \
    }                                                                                                        \
}                                                                                                            \
ATTR static void NAME##_divst(uint16_t *restrict o, const double *restrict a, double q, Py_ssize_t n) {      \
    /* the forward's channel vectors: a / q, correctly rounded (no + 0) */                                   \
    NAME##_sumst_k(o, a, NULL, NULL, _mm512_set1_pd(q), _mm512_set1_pd(1.0 / q), n, 1, 2);                   \
}
#define PG_AVG_LOOPS16_AVX512(S)                                                                              \
PG_AVG_AVX512 static void pg_avg_wide16_##S##_avx512(double *restrict t, const uint16_t *restrict g,        \
                                                   Py_ssize_t n) {                                           \
    const __m512d z = _mm512_setzero_pd();                                                                   \
    for (Py_ssize_t i = 0; i < n; i += 8) {                                                                  \
        __mmask8 m = n - i >= 8 ? (__mmask8)0xff : (__mmask8)((1u << (n - i)) - 1u);                          \
        _mm512_mask_storeu_pd(t + i, m, _mm512_add_pd(pg_avg_widen8_##S(g + i, m), z));                      \
    }                                                                                                        \
}                                                                                                            \

PG_AVG_LOOPS16_AVX512(f16)
PG_AVG_LOOPS16_AVX512(bf16)
PG_AVG_STORES512(pg_avg_f16_avx512, pg_avg_round8_f16, PG_AVG_AVX512)
PG_AVG_STORES512(pg_avg_bf16_avx512, pg_avg_round8_bf16, PG_AVG_AVX512)
PG_AVG_STORES512(pg_avg_bf16_avx512bf, pg_avg_round8_bf16cvt, PG_AVG_AVX512BF)
#define PG_AVG_PICK16 PG_AVG_PICK
#define PG_AVG_PICK16W(NAME, S, ARGS)                                                                         \
    do { int pg_level_ = pg_isa(); if (pg_level_ >= PG_ISA_AVX512) NAME##S##_avx512 ARGS;                   \
         else if (pg_level_ >= PG_ISA_AVX2) NAME##S##_avx2 ARGS; else NAME##S##_base ARGS; } while (0)
#else
#define PG_AVG_PICK16(NAME, S, ARGS) NAME##S##_base ARGS
#define PG_AVG_PICK16W(NAME, S, ARGS) NAME##S##_base ARGS
#endif

#define PG_AVG_ENTRY16(S)                                                                                     \
static inline void pg_avg_div16_##S(double *t, const uint16_t *g, const double *d, Py_ssize_t n)            \
{ PG_AVG_PICK16(pg_avg_div16_, S, (t, g, d, n)); }                                                           \
static inline void pg_avg_wide16_##S(double *t, const uint16_t *g, Py_ssize_t n)                             \
{ PG_AVG_PICK16W(pg_avg_wide16_, S, (t, g, n)); }                                                             \
static inline void pg_avg_acc16_##S(double *o, const uint16_t *x, Py_ssize_t n)                             \
{ PG_AVG_PICK16(pg_avg_acc16_, S, (o, x, n)); }                                                              \
static inline void pg_avg_sumst_##S(uint16_t *o, const double *a, const double *b, const double *c,          \
                                    double q, Py_ssize_t n)                                                  \
{ PG_AVG_PICK16S(_sumst, S, (o, a, b, c, q, n)); }                                                            \
static inline void pg_avg_divst_##S(uint16_t *o, const double *a, double q, Py_ssize_t n)                    \
{ PG_AVG_PICK16S(_divst, S, (o, a, q, n)); }

/* the rounding stores: AVX-512 (for bfloat16 with AVX512-BF16 where pg_avg_bf16cvt says so), AVX2, baseline */
#if PG_AVG_DISPATCH
#define PG_AVG_PICK16S(OP, S, ARGS)                                                                           \
    do { int pg_level_ = pg_isa();                                                                           \
         if (pg_level_ >= PG_ISA_AVX512) { if (PG_AVG_BF16CVT_##S) pg_avg_##S##_avx512bf##OP ARGS;             \
                                 else pg_avg_##S##_avx512##OP ARGS; }                                         \
         else if (pg_level_ >= PG_ISA_AVX2) pg_avg##OP##_##S##_avx2 ARGS; else pg_avg##OP##_##S##_base ARGS;  \
    } while (0)
#define PG_AVG_BF16CVT_f16 0
#define PG_AVG_BF16CVT_bf16 pg_avg_bf16cvt
#define pg_avg_f16_avx512bf_sumst pg_avg_f16_avx512_sumst
#define pg_avg_f16_avx512bf_divst pg_avg_f16_avx512_divst
#else
#define PG_AVG_PICK16S(OP, S, ARGS) pg_avg##OP##_##S##_base ARGS
#endif

PG_AVG_ENTRY16(f16)
PG_AVG_ENTRY16(bf16)

/* Rows of float64 sums rounded once to float16 / bfloat16 (the max-pooling scatter's float64 bands); the
 * variant follows the one ISA level, like every loop here. */
static inline void pg_f64_to_f16_row(uint16_t *dst, const double *src, Py_ssize_t n)
{ pg_avg_sumst_f16(dst, src, NULL, NULL, 0.0, n); }
static inline void pg_f64_to_bf16_row(uint16_t *dst, const double *src, Py_ssize_t n)
{ pg_avg_sumst_bf16(dst, src, NULL, NULL, 0.0, n); }

#endif
