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
 * of one plane (m Wo <= 16 float32 / 8 float64 lanes): their input is the plane's next 2 m W elements, in one
 * piece, at most four registers, loaded once (masked past the end, so nothing outside the plane is read); the
 * four candidates of every lane - window cells (0,0), (0,1), (1,0), (1,1), the scan order - are picked out of
 * those registers with two-source permutes whose index vectors (a cell's offset from the block's first element)
 * are the same for every block.  The scan is the spec's: the first cell is taken, then a candidate replaces the
 * maximum if it is greater or NaN (ties keep the first maximum, the last NaN wins); permutes and blends move
 * bits, so the values stored are the input elements themselves.  Index = block offset + the winning cell's
 * offset, the flat ih * W + iw inside the plane.
 *
 * AVX-512 only (the permutes of 16 lanes from 32 are single instructions there); the entry points return 0,
 * having done nothing, below that level or where the copy is not compiled, and the caller runs the planes
 * forward instead (same bits).  Work item: planes [p0, p1) of N * C, plane p = (n, c) at x + n xs_n + c xs_c;
 * every plane dense (unit column stride, row stride W; outputs likewise with Wo); y NULL: indices only. */
#define PG_FLAT2_LANES_F32 16
#define PG_FLAT2_LANES_F64 8
#if PG_X86_VARIANTS
#include <immintrin.h>
#pragma GCC push_options
#pragma GCC target("avx512f,avx512vl,avx512bw,avx512dq")

/* Lane l = r Wo + ow (output row r of the block, column ow) of candidate q (cell (q >> 1, q & 1)): its offset from
 * the block's first input element; spare lanes 0. */
#define PG_FLAT2_OFFSETS(OFF, NL, M, WO, W, Q)                                                            \
    do {                                                                                                  \
        Py_ssize_t l_ = 0;                                                                                \
        for (Py_ssize_t r_ = 0; r_ < (M); r_++)                                                           \
            for (Py_ssize_t o_ = 0; o_ < (WO); o_++, l_++)                                                \
                (OFF)[l_] = r_ * 2 * (W) + ((Q) >> 1) * (W) + 2 * o_ + ((Q) & 1);                         \
        for (; l_ < (NL); l_++) (OFF)[l_] = 0;                                                            \
    } while (0)

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

static void pg_flat2_f32_avx512(const float *x, Py_ssize_t xs_n, Py_ssize_t xs_c, float *y, Py_ssize_t ys_n,
                                Py_ssize_t ys_c, void *ind, int ind64, Py_ssize_t is_n, Py_ssize_t is_c,
                                Py_ssize_t C, Py_ssize_t p0, Py_ssize_t p1, Py_ssize_t Ho, Py_ssize_t Wo)
{
    const Py_ssize_t W = 2 * Wo, m = 16 / Wo < Ho ? 16 / Wo : Ho;
    int32_t off[4][16] __attribute__((aligned(64)));
    __m512i k[4];
    __mmask16 hi[4];
    Py_ssize_t n = p0 / C, c = p0 % C;
    for (int q = 0; q < 4; q++) {
        PG_FLAT2_OFFSETS(off[q], 16, m, Wo, W, q);
        k[q] = _mm512_load_si512((const void *)off[q]);
        hi[q] = _mm512_test_epi32_mask(k[q], _mm512_set1_epi32(32));      /* from the third or fourth register */
    }
    for (Py_ssize_t p = p0; p < p1; p++) {
        const float *xp = x + n * xs_n + c * xs_c;
        float *yp = y != NULL ? y + n * ys_n + c * ys_c : NULL;
        for (Py_ssize_t oh = 0; oh < Ho; oh += m) {
            Py_ssize_t rows = Ho - oh < m ? Ho - oh : m, span = rows * 2 * W, lanes = rows * Wo;
            const float *s = xp + oh * 2 * W;
            __m512 z0 = pg_flat2_ld_ps(s, span), z1 = pg_flat2_ld_ps(s + 16, span - 16);
            __m512 z2 = pg_flat2_ld_ps(s + 32, span - 32), z3 = pg_flat2_ld_ps(s + 48, span - 48);
            __m512 best = _mm512_mask_blend_ps(hi[0], _mm512_permutex2var_ps(z0, k[0], z1),
                                               _mm512_permutex2var_ps(z2, k[0], z3));
            __m512i bi = k[0];
            for (int q = 1; q < 4; q++) {
                __m512 v = _mm512_mask_blend_ps(hi[q], _mm512_permutex2var_ps(z0, k[q], z1),
                                                _mm512_permutex2var_ps(z2, k[q], z3));
                __mmask16 t = _mm512_cmp_ps_mask(v, best, _CMP_GT_OQ) | _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
                best = _mm512_mask_blend_ps(t, best, v);
                bi = _mm512_mask_blend_epi32(t, bi, k[q]);
            }
            __mmask16 st = lanes >= 16 ? (__mmask16)0xffffu : (__mmask16)((1u << lanes) - 1u);
            __m512i idx = _mm512_add_epi32(bi, _mm512_set1_epi32((int32_t)(oh * 2 * W)));
            if (yp != NULL) _mm512_mask_storeu_ps(yp + oh * Wo, st, best);
            if (ind64) {
                int64_t *ip = (int64_t *)ind + n * is_n + c * is_c + oh * Wo;
                _mm512_mask_storeu_epi64(ip, (__mmask8)st, _mm512_cvtepi32_epi64(_mm512_castsi512_si256(idx)));
                _mm512_mask_storeu_epi64(ip + 8, (__mmask8)(st >> 8),
                                         _mm512_cvtepi32_epi64(_mm512_extracti64x4_epi64(idx, 1)));
            } else {
                _mm512_mask_storeu_epi32((int32_t *)ind + n * is_n + c * is_c + oh * Wo, st, idx);
            }
        }
        if (++c == C) {
            c = 0;
            n++;
        }
    }
}

static void pg_flat2_f64_avx512(const double *x, Py_ssize_t xs_n, Py_ssize_t xs_c, double *y, Py_ssize_t ys_n,
                                Py_ssize_t ys_c, void *ind, int ind64, Py_ssize_t is_n, Py_ssize_t is_c,
                                Py_ssize_t C, Py_ssize_t p0, Py_ssize_t p1, Py_ssize_t Ho, Py_ssize_t Wo)
{
    const Py_ssize_t W = 2 * Wo, m = 8 / Wo < Ho ? 8 / Wo : Ho;
    int64_t off[4][8] __attribute__((aligned(64)));
    __m512i k[4];
    __mmask8 hi[4];
    Py_ssize_t n = p0 / C, c = p0 % C;
    for (int q = 0; q < 4; q++) {
        PG_FLAT2_OFFSETS(off[q], 8, m, Wo, W, q);
        k[q] = _mm512_load_si512((const void *)off[q]);
        hi[q] = _mm512_test_epi64_mask(k[q], _mm512_set1_epi64(16));
    }
    for (Py_ssize_t p = p0; p < p1; p++) {
        const double *xp = x + n * xs_n + c * xs_c;
        double *yp = y != NULL ? y + n * ys_n + c * ys_c : NULL;
        for (Py_ssize_t oh = 0; oh < Ho; oh += m) {
            Py_ssize_t rows = Ho - oh < m ? Ho - oh : m, span = rows * 2 * W, lanes = rows * Wo;
            const double *s = xp + oh * 2 * W;
            __m512d z0 = pg_flat2_ld_pd(s, span), z1 = pg_flat2_ld_pd(s + 8, span - 8);
            __m512d z2 = pg_flat2_ld_pd(s + 16, span - 16), z3 = pg_flat2_ld_pd(s + 24, span - 24);
            __m512d best = _mm512_mask_blend_pd(hi[0], _mm512_permutex2var_pd(z0, k[0], z1),
                                                _mm512_permutex2var_pd(z2, k[0], z3));
            __m512i bi = k[0];
            for (int q = 1; q < 4; q++) {
                __m512d v = _mm512_mask_blend_pd(hi[q], _mm512_permutex2var_pd(z0, k[q], z1),
                                                 _mm512_permutex2var_pd(z2, k[q], z3));
                __mmask8 t = _mm512_cmp_pd_mask(v, best, _CMP_GT_OQ) | _mm512_cmp_pd_mask(v, v, _CMP_UNORD_Q);
                best = _mm512_mask_blend_pd(t, best, v);
                bi = _mm512_mask_blend_epi64(t, bi, k[q]);
            }
            __mmask8 st = lanes >= 8 ? (__mmask8)0xffu : (__mmask8)((1u << lanes) - 1u);
            __m512i idx = _mm512_add_epi64(bi, _mm512_set1_epi64((int64_t)(oh * 2 * W)));
            if (yp != NULL) _mm512_mask_storeu_pd(yp + oh * Wo, st, best);
            if (ind64)
                _mm512_mask_storeu_epi64((int64_t *)ind + n * is_n + c * is_c + oh * Wo, st, idx);
            else
                _mm512_mask_cvtepi64_storeu_epi32((int32_t *)ind + n * is_n + c * is_c + oh * Wo, st, idx);
        }
        if (++c == C) {
            c = 0;
            n++;
        }
    }
}

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
                                Py_ssize_t Ho, Py_ssize_t Wo)                                           \
{                                                                                                       \
    if (!PG_FLAT2_COMPILED || isa < PG_ISA_AVX512) return 0;                                            \
    PG_FLAT2_CALL(DT, (x, xs_n, xs_c, y, ys_n, ys_c, ind, ind64, is_n, is_c, C, p0, p1, Ho, Wo));       \
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
