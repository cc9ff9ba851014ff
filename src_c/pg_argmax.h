/* Vectorisable window-argmax step for the PyTorch-style max-pooling forward (poolgrad/_max_pool_indices.pyx).
 *
 * The forward walks one output row at a time and, for each kernel cell k in row-major order, updates all the
 * row's windows at once: lane j holds the running maximum best[j] of one output (and channel) and the cell
 * number kidx[j] where it was found.  Cell k's candidates for consecutive lanes are x[j * step] (step 1: stride-1
 * windows of a plane, or every channel of channels-last windows; step 2: stride-2 windows), so the update is a
 * straight loop of loads, compares and selects that the compiler vectorises.  The rule is the spec's scan: the
 * first valid cell of a window is taken (kidx < 0), then a value replaces the maximum if it is greater or NaN, so
 * ties keep the first maximum and the last NaN wins - the same result as the per-window scalar scan.
 *
 * Compiled for the baseline ISA and, on x86-64 with GCC, for AVX2 and AVX-512 (the one ISA level of pg_isa.h
 * picks one); the variants perform the same IEEE comparisons, so results are identical whichever runs.
 * Needs Py_ssize_t (Python.h, which the Cython-generated C includes first). */
#ifndef PG_ARGMAX_H
#define PG_ARGMAX_H
#include <stdint.h>
#include "pg_dtype.h"
#include "pg_isa.h"

#define PG_ARGMAX_LOOP(DT, IDX)                                                                         \
    for (Py_ssize_t j = 0; j < n; j++) {                                                                \
        __typeof__(best[0]) v = pg_load_##DT(x[IDX]);                                                   \
        int t = (kidx[j] < 0) | (v > best[j]) | (v != v);                                               \
        best[j] = t ? v : best[j];                                                                      \
        kidx[j] = t ? k : kidx[j];                                                                      \
    }

#define PG_ARGMAX_CELL(SFX, DT, T, ACC)                                                                 \
static void pg_argmax_cell_##DT##_##SFX(ACC *restrict best, int32_t *restrict kidx,                    \
                                        const T *restrict x, Py_ssize_t n, Py_ssize_t step, int32_t k)  \
{                                                                                                       \
    if (step == 1) {                                                                                    \
        PG_ARGMAX_LOOP(DT, j)                                                                           \
    } else if (step == 2) {                                                                             \
        PG_ARGMAX_LOOP(DT, 2 * j)                                                                       \
    } else {                                                                                            \
        PG_ARGMAX_LOOP(DT, j * step)                                                                    \
    }                                                                                                   \
}

/* Split a unit-stride input row into its even and odd columns (the two phases of stride-2 windows), so that
   every cell's candidates are contiguous: compilers leave the stride-2 candidate loads of the loop above scalar
   (or slow), while this split vectorises into shuffles. */
#define PG_ARGMAX_SPLIT2(SFX, T, NAME)                                                                  \
static void pg_argmax_split2_##NAME##_##SFX(T *restrict even, T *restrict odd, const T *restrict x,    \
                                            Py_ssize_t w)                                               \
{                                                                                                       \
    Py_ssize_t h = w / 2;                                                                               \
    for (Py_ssize_t j = 0; j < h; j++) {                                                                \
        even[j] = x[2 * j];                                                                             \
        odd[j] = x[2 * j + 1];                                                                          \
    }                                                                                                   \
    if (w & 1) even[h] = x[w - 1];                                                                      \
}

/* Flat indices of a dense output row: out[j] = base + lane_off[j] + kflat[kidx[j]] (lane_off: the lane's column
   offset ow * sw, kflat: the winning kernel cell's offset a * dh * W + b * dw). */
#define PG_ARGMAX_INDEX(SFX, IT, NAME)                                                                  \
static void pg_argmax_index_##NAME##_##SFX(IT *restrict out, const int32_t *restrict kidx,              \
                                           const int64_t *restrict lane_off,                            \
                                           const int64_t *restrict kflat, int64_t base, Py_ssize_t n)   \
{                                                                                                       \
    for (Py_ssize_t j = 0; j < n; j++) out[j] = (IT)(base + lane_off[j] + kflat[kidx[j]]);             \
}

#define PG_ARGMAX_ISA(SFX)                                                                              \
PG_ARGMAX_INDEX(SFX, int32_t, i32)                                                                      \
PG_ARGMAX_INDEX(SFX, int64_t, i64)                                                                      \
PG_ARGMAX_CELL(SFX, f32, float, float)                                                                  \
PG_ARGMAX_CELL(SFX, f64, double, double)                                                                \
PG_ARGMAX_CELL(SFX, f16, uint16_t, float)                                                               \
PG_ARGMAX_CELL(SFX, bf16, uint16_t, float)                                                              \
PG_ARGMAX_SPLIT2(SFX, uint16_t, u16)                                                                    \
PG_ARGMAX_SPLIT2(SFX, uint32_t, u32)                                                                    \
PG_ARGMAX_SPLIT2(SFX, uint64_t, u64)

#define PG_ISA_GEN PG_ARGMAX_ISA
#include "pg_isa_variants.h"

/* Entry points: the variant of ISA level isa. */
#define PG_ARGMAX_DISPATCH(DT, T, ACC)                                                                  \
static inline void pg_argmax_cell_##DT(int isa, ACC *best, int32_t *kidx, const T *x, Py_ssize_t n,     \
                                       Py_ssize_t step, int32_t k)                                      \
{ PG_ISA_PICK(isa, pg_argmax_cell_##DT, (best, kidx, x, n, step, k)); }
#define PG_ARGMAX_SPLIT_DISPATCH(T, NAME)                                                               \
static inline void pg_argmax_split2_##NAME(int isa, T *even, T *odd, const T *x, Py_ssize_t w)          \
{ PG_ISA_PICK(isa, pg_argmax_split2_##NAME, (even, odd, x, w)); }
#define PG_ARGMAX_INDEX_DISPATCH(IT, NAME)                                                              \
static inline void pg_argmax_index_##NAME(int isa, IT *out, const int32_t *kidx, const int64_t *lane_off, \
                                          const int64_t *kflat, int64_t base, Py_ssize_t n)             \
{ PG_ISA_PICK(isa, pg_argmax_index_##NAME, (out, kidx, lane_off, kflat, base, n)); }
PG_ARGMAX_INDEX_DISPATCH(int32_t, i32)
PG_ARGMAX_INDEX_DISPATCH(int64_t, i64)
PG_ARGMAX_SPLIT_DISPATCH(uint16_t, u16)
PG_ARGMAX_SPLIT_DISPATCH(uint32_t, u32)
PG_ARGMAX_SPLIT_DISPATCH(uint64_t, u64)
PG_ARGMAX_DISPATCH(f32, float, float)
PG_ARGMAX_DISPATCH(f64, double, double)
PG_ARGMAX_DISPATCH(f16, uint16_t, float)
PG_ARGMAX_DISPATCH(bf16, uint16_t, float)


/* ---------------------------------------------------------------------------------------------------------
 * 2x2 windows that tile small NCHW planes exactly ("flat" forward: kernel 2, stride 2, no padding, dilation 1,
 * H = 2 Ho, W = 2 Wo; adaptive pooling to half the size has the same windows), run on the planes as they lie.
 *
 * Output rows of such planes are short (Wo = 4 for 8x8 planes), so the row kernel above gets a few lanes per
 * call, and the planes forward (pg_plane_tiles.h) buys full lanes with two transposing copies (planes into a
 * channels-last tile, the value and index tiles back).  Here a vector of outputs is instead m whole output rows
 * of one plane (m Wo <= 16 float32 / 8 float64 lanes), or m whole planes where planes of at most half a vector
 * of outputs lie one after another: their input is the next 4 m Wo (or 4 m Ho Wo) elements, in one piece, at
 * most four registers, loaded once (masked past the end, so nothing past the block is read); the four
 * candidates of every lane - window cells (0,0), (0,1), (1,0), (1,1), the scan order - are picked out of those
 * registers with two-source permutes whose index vectors (a cell's offset from the block's first element) are
 * the same for every block.  The scan is the spec's: the first cell is taken, then a candidate replaces the
 * maximum if it is greater or NaN (ties keep the first maximum, the last NaN wins); permutes and blends move
 * bits, so the values stored are the input elements themselves.  The index stored is the winning cell's flat
 * ih * W + iw inside its plane (a per-lane table, plus the block's first row for blocks of rows).
 *
 * AVX-512 only (the permutes of 16 lanes from 32 are single instructions there); the entry points return 0,
 * having done nothing, below that level or where the copy is not compiled, and the caller runs the planes
 * forward instead (same bits).  Work item: planes [p0, p1) of N * C, plane p = (n, c) at x + n xs_n + c xs_c;
 * every plane dense (unit column stride, row stride W; outputs likewise with Wo); y NULL: indices only. */
#define PG_FLAT2_LANES_F32 16
#define PG_FLAT2_LANES_F64 8

/* Output rows (packed: planes) per vector of nl lanes. */
static inline Py_ssize_t pg_flat2_per_vector(Py_ssize_t nl, Py_ssize_t Ho, Py_ssize_t Wo, int packed)
{
    return packed ? nl / (Ho * Wo) : (nl / Wo < Ho ? nl / Wo : Ho);
}

/* The four candidates' tables of one vector of nl lanes, int32 (wide64: int64) entries: off[q * nl + l], lane
 * l's cell q (window cell (q >> 1, q & 1)) as an offset from the block's first input element, then ix[q * nl +
 * l] (at 4 nl) that cell's flat index inside its plane.  A block is m whole output rows of one plane (lane l =
 * r Wo + ow; index = block offset + ix), or, packed, m whole planes side by side (lane l = j Ho Wo + oh Wo + ow,
 * plane j of the block; ix = off - j H W).  Spare lanes read the block's first element and are never stored.
 * Built once per call: built in every work item, they took most of the kernel's samples (perf) on 8x64x2x2
 * (16 items of 2 vectors each), 4.1 against 0.46 ns per element once per call. */
static inline void pg_flat2_tables(void *tab, int wide64, Py_ssize_t nl, Py_ssize_t Ho, Py_ssize_t Wo, int packed)
{
    const Py_ssize_t W = 2 * Wo, HW = 4 * Ho * Wo, m = pg_flat2_per_vector(nl, Ho, Wo, packed);
    for (int q = 0; q < 4; q++) {
        Py_ssize_t l = 0;
        for (Py_ssize_t j = 0; j < (packed ? m : 1); j++)
            for (Py_ssize_t r = 0; r < (packed ? Ho : m); r++)
                for (Py_ssize_t o = 0; o < Wo; o++, l++) {
                    int64_t off = j * HW + r * 2 * W + (q >> 1) * W + 2 * o + (q & 1), ix = off - j * HW;
                    if (wide64) {
                        ((int64_t *)tab)[q * nl + l] = off;
                        ((int64_t *)tab)[(4 + q) * nl + l] = ix;
                    } else {
                        ((int32_t *)tab)[q * nl + l] = (int32_t)off;
                        ((int32_t *)tab)[(4 + q) * nl + l] = (int32_t)ix;
                    }
                }
        for (; l < nl; l++) {
            if (wide64) ((int64_t *)tab)[q * nl + l] = ((int64_t *)tab)[(4 + q) * nl + l] = 0;
            else ((int32_t *)tab)[q * nl + l] = ((int32_t *)tab)[(4 + q) * nl + l] = 0;
        }
    }
}
#if PG_X86_VARIANTS
#include <immintrin.h>
#pragma GCC push_options
#pragma GCC target("avx512f,avx512vl,avx512bw,avx512dq")

static inline __m512 pg_flat2_ld_ps(const float *s, Py_ssize_t n)
{
    if (n >= 16) return _mm512_loadu_ps(s);
    if (n <= 0) return _mm512_setzero_ps();
    return _mm512_maskz_loadu_ps((__mmask16)((1u << n) - 1u), s);
}

static inline __m512d pg_flat2_ld_pd(const double *s, Py_ssize_t n)
{
    if (n >= 8) return _mm512_loadu_pd(s);
    if (n <= 0) return _mm512_setzero_pd();
    return _mm512_maskz_loadu_pd((__mmask8)((1u << n) - 1u), s);
}

/* One block: the span input elements at s (at most 64 / 32), lanes outputs to yo (NULL: none) and io. */
static inline void pg_flat2_block_f32(const float *s, Py_ssize_t span, Py_ssize_t lanes, float *yo, void *io,
                                      int ind64, int32_t base, const __m512i *k, const __m512i *e,
                                      const __mmask16 *hi)
{
    __m512 z0 = pg_flat2_ld_ps(s, span), z1 = pg_flat2_ld_ps(s + 16, span - 16);
    __m512 z2 = pg_flat2_ld_ps(s + 32, span - 32), z3 = pg_flat2_ld_ps(s + 48, span - 48);
    __m512 best = _mm512_mask_blend_ps(hi[0], _mm512_permutex2var_ps(z0, k[0], z1),
                                       _mm512_permutex2var_ps(z2, k[0], z3));
    __m512i bi = e[0];
    for (int q = 1; q < 4; q++) {
        __m512 v = _mm512_mask_blend_ps(hi[q], _mm512_permutex2var_ps(z0, k[q], z1),
                                        _mm512_permutex2var_ps(z2, k[q], z3));
        __mmask16 t = _mm512_cmp_ps_mask(v, best, _CMP_GT_OQ) | _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
        best = _mm512_mask_blend_ps(t, best, v);
        bi = _mm512_mask_blend_epi32(t, bi, e[q]);
    }
    __mmask16 st = lanes >= 16 ? (__mmask16)0xffffu : (__mmask16)((1u << lanes) - 1u);
    __m512i idx = _mm512_add_epi32(bi, _mm512_set1_epi32(base));
    if (yo != NULL) _mm512_mask_storeu_ps(yo, st, best);
    if (ind64) {
        _mm512_mask_storeu_epi64(io, (__mmask8)st, _mm512_cvtepi32_epi64(_mm512_castsi512_si256(idx)));
        _mm512_mask_storeu_epi64((int64_t *)io + 8, (__mmask8)(st >> 8),
                                 _mm512_cvtepi32_epi64(_mm512_extracti64x4_epi64(idx, 1)));
    } else {
        _mm512_mask_storeu_epi32(io, st, idx);
    }
}

static inline void pg_flat2_block_f64(const double *s, Py_ssize_t span, Py_ssize_t lanes, double *yo, void *io,
                                      int ind64, int64_t base, const __m512i *k, const __m512i *e,
                                      const __mmask8 *hi)
{
    __m512d z0 = pg_flat2_ld_pd(s, span), z1 = pg_flat2_ld_pd(s + 8, span - 8);
    __m512d z2 = pg_flat2_ld_pd(s + 16, span - 16), z3 = pg_flat2_ld_pd(s + 24, span - 24);
    __m512d best = _mm512_mask_blend_pd(hi[0], _mm512_permutex2var_pd(z0, k[0], z1),
                                        _mm512_permutex2var_pd(z2, k[0], z3));
    __m512i bi = e[0];
    for (int q = 1; q < 4; q++) {
        __m512d v = _mm512_mask_blend_pd(hi[q], _mm512_permutex2var_pd(z0, k[q], z1),
                                         _mm512_permutex2var_pd(z2, k[q], z3));
        __mmask8 t = _mm512_cmp_pd_mask(v, best, _CMP_GT_OQ) | _mm512_cmp_pd_mask(v, v, _CMP_UNORD_Q);
        best = _mm512_mask_blend_pd(t, best, v);
        bi = _mm512_mask_blend_epi64(t, bi, e[q]);
    }
    __mmask8 st = lanes >= 8 ? (__mmask8)0xffu : (__mmask8)((1u << lanes) - 1u);
    __m512i idx = _mm512_add_epi64(bi, _mm512_set1_epi64(base));
    if (yo != NULL) _mm512_mask_storeu_pd(yo, st, best);
    if (ind64)
        _mm512_mask_storeu_epi64(io, st, idx);
    else
        _mm512_mask_cvtepi64_storeu_epi32(io, st, idx);
}

/* The work item: planes [p0, p1), as blocks of rows of one plane, or (packed: the planes lie one after another
 * in x, y and ind, H W and Ho Wo apart, and hold at most half a vector of outputs each) of whole planes; tab
 * from pg_flat2_tables. */
#define PG_FLAT2_ITEM(DT, T, IDX_T, NL, MASK_T, TEST)                                                    \
static void pg_flat2_##DT##_avx512(const T *x, Py_ssize_t xs_n, Py_ssize_t xs_c, T *y, Py_ssize_t ys_n,     \
                                   Py_ssize_t ys_c, void *ind, int ind64, Py_ssize_t is_n, Py_ssize_t is_c, \
                                   Py_ssize_t C, Py_ssize_t p0, Py_ssize_t p1, Py_ssize_t Ho, Py_ssize_t Wo, \
                                   int packed, const void *tab)                                          \
{                                                                                                        \
    const Py_ssize_t W = 2 * Wo, HoWo = Ho * Wo, HW = 4 * HoWo;                                          \
    const Py_ssize_t m = pg_flat2_per_vector((NL), Ho, Wo, packed);                                      \
    const size_t isz = ind64 ? sizeof(int64_t) : sizeof(int32_t);                                        \
    __m512i k[4], e[4];                                                                                  \
    MASK_T hi[4];                                                                                        \
    Py_ssize_t n = p0 / C, c = p0 % C;                                                                   \
    for (int q = 0; q < 4; q++) {                                                                        \
        k[q] = _mm512_loadu_si512((const IDX_T *)tab + q * (NL));                                        \
        e[q] = _mm512_loadu_si512((const IDX_T *)tab + (4 + q) * (NL));                                  \
        hi[q] = TEST;                  /* from the third or fourth register */                           \
    }                                                                                                    \
    if (packed) {                                                                                        \
        for (Py_ssize_t p = p0; p < p1; p += m) {                                                        \
            Py_ssize_t np = p1 - p < m ? p1 - p : m;                                                     \
            pg_flat2_block_##DT(x + n * xs_n + c * xs_c, np * HW, np * HoWo,                             \
                                y != NULL ? y + n * ys_n + c * ys_c : NULL,                              \
                                (char *)ind + (n * is_n + c * is_c) * isz, ind64, 0, k, e, hi);          \
            for (c += m; c >= C; c -= C) n++;                                                            \
        }                                                                                                \
        return;                                                                                          \
    }                                                                                                    \
    for (Py_ssize_t p = p0; p < p1; p++) {                                                               \
        const T *xp = x + n * xs_n + c * xs_c;                                                           \
        T *yp = y != NULL ? y + n * ys_n + c * ys_c : NULL;                                              \
        char *ip = (char *)ind + (n * is_n + c * is_c) * isz;                                            \
        for (Py_ssize_t oh = 0; oh < Ho; oh += m) {                                                      \
            Py_ssize_t rows = Ho - oh < m ? Ho - oh : m;                                                 \
            pg_flat2_block_##DT(xp + oh * 2 * W, rows * 2 * W, rows * Wo, yp != NULL ? yp + oh * Wo : NULL, \
                                ip + oh * Wo * isz, ind64, (IDX_T)(oh * 2 * W), k, e, hi);               \
        }                                                                                                \
        if (++c == C) {                                                                                  \
            c = 0;                                                                                       \
            n++;                                                                                         \
        }                                                                                                \
    }                                                                                                    \
}
PG_FLAT2_ITEM(f32, float, int32_t, 16, __mmask16, _mm512_test_epi32_mask(k[q], _mm512_set1_epi32(32)))
PG_FLAT2_ITEM(f64, double, int64_t, 8, __mmask8, _mm512_test_epi64_mask(k[q], _mm512_set1_epi64(16)))

#pragma GCC pop_options
#define PG_FLAT2_COMPILED 1
#else
#define PG_FLAT2_COMPILED 0
#endif

/* Entry points: 1 when the flat forward ran (ISA level isa has it), else 0 and nothing was written. */
#define PG_FLAT2_ENTRY(DT, T)                                                                           \
static inline int pg_flat2_##DT(int isa, const T *x, Py_ssize_t xs_n, Py_ssize_t xs_c, T *y,            \
                                Py_ssize_t ys_n, Py_ssize_t ys_c, void *ind, int ind64, Py_ssize_t is_n, \
                                Py_ssize_t is_c, Py_ssize_t C, Py_ssize_t p0, Py_ssize_t p1,            \
                                Py_ssize_t Ho, Py_ssize_t Wo, int packed, const void *tab)              \
{                                                                                                       \
    if (!PG_FLAT2_COMPILED || isa < PG_ISA_AVX512) return 0;                                            \
    PG_FLAT2_CALL(DT, (x, xs_n, xs_c, y, ys_n, ys_c, ind, ind64, is_n, is_c, C, p0, p1, Ho, Wo, packed, \
                       tab));                                                                           \
    return 1;                                                                                           \
}
#if PG_X86_VARIANTS
#define PG_FLAT2_CALL(DT, ARGS) pg_flat2_##DT##_avx512 ARGS
#else
#define PG_FLAT2_CALL(DT, ARGS) ((void)0)
#endif
PG_FLAT2_ENTRY(f32, float)
PG_FLAT2_ENTRY(f64, double)

#endif
