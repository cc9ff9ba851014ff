/* Streaming (non-temporal) stores: the one copy every kernel family uses.
 *
 * A streaming store writes a whole cache line without first reading it (no read for ownership) and without
 * keeping it in cache, so a big output that would not stay in cache anyway moves its bytes once.  It only pays
 * on rows of whole, aligned cache lines: a partial line is written as a partial-line transaction, several times
 * slower than a cached store (the planners' rules, avg_pool.py's and tf_max_pool.py's, cite the measurements).
 * These helpers store an unaligned head and the tail with ordinary stores and stream the aligned middle; a kernel
 * that streamed calls pg_stream_fence() once before its results are read.
 *
 * pg_stream_sum_f32 / _f64:  d[i] = a[i]  |  a[i] + b[i]  |  (a[i] + b[i]) + c[i]   (b == NULL: one term,
 *                            c == NULL: two); the sums are the same IEEE additions in the same order at every
 *                            ISA level (32-byte stores from level 1 on, 16-byte SSE2 stores below).
 * pg_stream_copy:            nbytes bytes (16-byte stores; any type, already rounded).
 * pg_stream_zero:            nbytes zero bytes.
 * Without SSE2 (not x86-64) they are plain loops, memcpy and memset. */
#ifndef PG_STREAM_H
#define PG_STREAM_H

#include <stdint.h>
#include <string.h>
#include "pg_isa.h"

#if defined(__SSE2__)
#include <emmintrin.h>
#define PG_STREAM_AVAILABLE 1
#else
#define PG_STREAM_AVAILABLE 0
#endif
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__)) && !defined(__AVX2__)
#include <immintrin.h>
#define PG_STREAM_AVX2 1
#else
#define PG_STREAM_AVX2 0
#endif

#define PG_STREAM_S3(i) (b == NULL ? a[i] : (c == NULL ? a[i] + b[i] : (a[i] + b[i]) + c[i]))

/* One streamed row of sums: scalar head up to ALIGN bytes, vectors of VL values (VLOAD / VADD / VSTREAM), tail. */
#define PG_STREAM_SUM_BODY(ALIGN, VL, VLOAD, VADD, VSTREAM)                                                  \
    Py_ssize_t i = 0;                                                                                        \
    for (; i < n && ((uintptr_t)(d + i) & ((ALIGN) - 1u)); i++) d[i] = PG_STREAM_S3(i);                      \
    if (b == NULL)                                                                                           \
        for (; i + (VL) <= n; i += (VL)) VSTREAM(d + i, VLOAD(a + i));                                       \
    else if (c == NULL)                                                                                      \
        for (; i + (VL) <= n; i += (VL)) VSTREAM(d + i, VADD(VLOAD(a + i), VLOAD(b + i)));                   \
    else                                                                                                     \
        for (; i + (VL) <= n; i += (VL)) VSTREAM(d + i, VADD(VADD(VLOAD(a + i), VLOAD(b + i)), VLOAD(c + i))); \
    for (; i < n; i++) d[i] = PG_STREAM_S3(i);

#if PG_STREAM_AVX2
__attribute__((target("avx2"))) static void pg_stream_sum_f32_avx2(float *d, const float *a, const float *b,
                                                                   const float *c, Py_ssize_t n)
{ PG_STREAM_SUM_BODY(32u, 8, _mm256_loadu_ps, _mm256_add_ps, _mm256_stream_ps) }
__attribute__((target("avx2"))) static void pg_stream_sum_f64_avx2(double *d, const double *a, const double *b,
                                                                   const double *c, Py_ssize_t n)
{ PG_STREAM_SUM_BODY(32u, 4, _mm256_loadu_pd, _mm256_add_pd, _mm256_stream_pd) }
#endif
#if PG_STREAM_AVAILABLE
static void pg_stream_sum_f32_base(float *d, const float *a, const float *b, const float *c, Py_ssize_t n)
{ PG_STREAM_SUM_BODY(16u, 4, _mm_loadu_ps, _mm_add_ps, _mm_stream_ps) }
static void pg_stream_sum_f64_base(double *d, const double *a, const double *b, const double *c, Py_ssize_t n)
{ PG_STREAM_SUM_BODY(16u, 2, _mm_loadu_pd, _mm_add_pd, _mm_stream_pd) }
#else
static void pg_stream_sum_f32_base(float *d, const float *a, const float *b, const float *c, Py_ssize_t n)
{ for (Py_ssize_t i = 0; i < n; i++) d[i] = PG_STREAM_S3(i); }
static void pg_stream_sum_f64_base(double *d, const double *a, const double *b, const double *c, Py_ssize_t n)
{ for (Py_ssize_t i = 0; i < n; i++) d[i] = PG_STREAM_S3(i); }
#endif

static inline void pg_stream_sum_f32(float *d, const float *a, const float *b, const float *c, Py_ssize_t n)
{
#if PG_STREAM_AVX2
    if (pg_isa() >= PG_ISA_AVX2) { pg_stream_sum_f32_avx2(d, a, b, c, n); return; }
#endif
    pg_stream_sum_f32_base(d, a, b, c, n);
}

static inline void pg_stream_sum_f64(double *d, const double *a, const double *b, const double *c, Py_ssize_t n)
{
#if PG_STREAM_AVX2
    if (pg_isa() >= PG_ISA_AVX2) { pg_stream_sum_f64_avx2(d, a, b, c, n); return; }
#endif
    pg_stream_sum_f64_base(d, a, b, c, n);
}

/* nbytes bytes: 16-byte streaming stores from the first 16-byte boundary of dst on, ordinary stores for the
 * head before it and the tail after the last whole 16 bytes.  Rows written in address order that each start and
 * end on a 16-byte boundary fill every cache line with streaming stores only, whatever the line alignment: the
 * write-combining buffer joins the end of one row and the start of the next.  A line that gets ordinary and
 * streaming stores is written twice (that costs 4x on 56-byte rows: see tf_max_pool.py). */
static inline void pg_stream_copy(void *dst, const void *src, size_t nbytes)
{
    char *d = (char *)dst;
    const char *s = (const char *)src;
    size_t i = 0;
#if PG_STREAM_AVAILABLE
    i = (16u - ((uintptr_t)d & 15u)) & 15u;
    if (i > nbytes) i = nbytes;
    if (i) memcpy(d, s, i);          /* (a call even for 0 bytes: this runs once per row) */
    for (; i + 16 <= nbytes; i += 16) _mm_stream_si128((__m128i *)(d + i), _mm_loadu_si128((const __m128i *)(s + i)));
#endif
    if (i < nbytes) memcpy(d + i, s + i, nbytes - i);
}

/* Whether a row of nbytes at dst starts and ends on 16-byte boundaries (see pg_stream_copy). */
static inline int pg_stream_whole(const void *dst, size_t nbytes)
{
    return PG_STREAM_AVAILABLE && (((uintptr_t)dst | nbytes) & 15u) == 0;
}

static inline void pg_stream_zero(void *dst, size_t nbytes)
{
    char *d = (char *)dst;
    size_t i = 0;
#if PG_STREAM_AVAILABLE
    if (nbytes >= 64) {
        __m128i z = _mm_setzero_si128();
        size_t head = (16u - ((uintptr_t)d & 15u)) & 15u;
        memset(d, 0, head);
        for (i = head; i + 16 <= nbytes; i += 16) _mm_stream_si128((__m128i *)(d + i), z);
    }
#endif
    if (i < nbytes) memset(d + i, 0, nbytes - i);
}

/* Order the streamed stores before the ordinary ones that follow (they bypass the cache's ordering). */
static inline void pg_stream_fence(void)
{
#if PG_STREAM_AVAILABLE
    _mm_sfence();
#endif
}

#endif
