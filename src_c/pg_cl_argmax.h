/* Channels-last window argmax (poolgrad/_max_pool_indices.pyx): vector lanes over C, the contiguous axis.
 *
 * In channels-last memory the C values of one pixel are contiguous, so the natural vector is a run of channels
 * of one pixel: for one output cell (oh, ow) and a block of PG_CL_LANES channels, every input pixel of the
 * window is one contiguous vector load, compared against the running maximum of each lane.  The maximum and its
 * flat index ih * W + iw live in two small lane arrays that the compiler keeps in vector registers for the whole
 * window, and are stored once when the window is done: one pass over the input, no scratch row, no separate
 * index pass (the row-vectorised design of pg_argmax.h writes and re-reads a best/cell row for every window
 * cell, which left the channels-last forward at half of PyTorch's speed).
 *
 * The windows come as per-axis tables (first cell, cell count, step), so PyTorch-style windows (kernel, stride,
 * padding, dilation, ceil_mode) and adaptive windows run the same loop.  The scan is the spec's: the window's
 * first cell in row-major order is taken, then a value replaces the maximum if it is greater or NaN, so ties
 * keep the first maximum and the last NaN wins - the same result, index for index, as the per-window scan.
 *
 * The values stored are the input elements themselves: float32/float64 maxima are selected, never computed;
 * 16-bit maxima are compared as float32 and narrowed back with an exact inverse of the widening (so even a
 * signalling NaN's payload survives).  Index lanes are int32 for the 32- and 16-bit types (callers guarantee
 * H * W < 2^31) and int64 for float64, so that the index select has the width of the value compare.
 *
 * Compiled for the baseline ISA and, on x86-64 with GCC, for AVX2 and AVX-512 (the one ISA level of pg_isa.h
 * picks one); every variant performs the same IEEE comparisons, so results are identical whichever runs.
 * Needs Py_ssize_t (Python.h, which the Cython-generated C includes first). */
#ifndef PG_CL_ARGMAX_H
#define PG_CL_ARGMAX_H
#include <stdint.h>
#include "pg_dtype.h"
#include "pg_isa.h"
#include "pg_stream.h"
#if PG_X86_VARIANTS
#include <immintrin.h>
#endif

/* Lanes per block: 32 for every type (two AVX-512 registers of float32 and int32 lanes, four of float64 and
 * int64).  GCC vectorises these fixed-length lane loops well only when they are at least two vectors long:
 * shorter ones it breaks up into single-lane extracts.  Measured on 8x112x112x64 k3s2p1 float32 at one thread
 * (minimum of 20 runs, loaded machine): 16 lanes 152 ms, 32 lanes 3.8 ms, 64 lanes 4.4 ms; float64 with 16
 * lanes (one int64 vector pair) ran 10x the time of the row kernel it replaces.  Both overridable at build
 * time (-DPG_CL_LANES=...) for such experiments. */
#ifndef PG_CL_LANES
#define PG_CL_LANES 32
#endif
#ifndef PG_CL_LANES_F64
#define PG_CL_LANES_F64 32
#endif

/* Exact narrowing of a float32 that holds a widened float16 (pg_f16_to_f32 is injective): the rounding
 * conversion is exact on such values except that it sets the quiet bit of a NaN, so NaNs are rebuilt from
 * their kept payload instead. */
PG_INLINE uint16_t pg_cl_narrow_f16(float f)
{
    uint32_t x = pg_f32_bits(f);
    uint32_t a = x & 0x7fffffffu;
    uint16_t nan = (uint16_t)(((x >> 16) & 0x8000u) | 0x7c00u | ((a >> 13) & 0x3ffu));
    return a > 0x7f800000u ? nan : pg_f32_to_f16(f);
}
/* bfloat16 widening is a shift, so its inverse is one too (NaN payloads included). */
PG_INLINE uint16_t pg_cl_narrow_bf16(float f) { return (uint16_t)(pg_f32_bits(f) >> 16); }
PG_INLINE float pg_cl_narrow_f32(float f) { return f; }
PG_INLINE double pg_cl_narrow_f64(double f) { return f; }

/* Streaming (non-temporal) stores of one 64-byte line from an aligned lane buffer s to a line-aligned d, in the
 * variant's widest stores (macros, so that they expand inside the variant's target region).  A streamed line is
 * not read first (no read for ownership) and does not stay in cache.  Without SSE2: a plain copy. */
#if PG_STREAM_AVAILABLE
#define PG_CL_NT64_base(d, s)                                                                             \
    do {                                                                                                  \
        for (int q_ = 0; q_ < 4; q_++)                                                                    \
            _mm_stream_si128((__m128i *)(d) + q_, _mm_load_si128((const __m128i *)(s) + q_));             \
    } while (0)
#else
#define PG_CL_NT64_base(d, s) memcpy((d), (s), 64)
#endif
#define PG_CL_NT64_avx2(d, s)                                                                             \
    do {                                                                                                  \
        _mm256_stream_si256((__m256i *)(d), _mm256_load_si256((const __m256i *)(s)));                     \
        _mm256_stream_si256((__m256i *)(d) + 1, _mm256_load_si256((const __m256i *)(s) + 1));             \
    } while (0)
#define PG_CL_NT64_avx512(d, s) _mm512_stream_si512((__m512i *)(d), _mm512_load_si512((const void *)(s)))

/* Store NL lanes of type ST, computed lane by lane as EXPR (of l), to dst: ordinary stores, or (stream != 0 and
 * dst 64-byte aligned) whole streamed lines through an aligned lane buffer (NL * sizeof(ST) is a multiple of 64
 * for every type here: 32 lanes of 2, 4 or 8 bytes).  Whole aligned lines only: streaming the same blocks at a
 * 16-byte offset (16-byte streaming stores, every line filled in address order) took 1.33x the time of ordinary
 * stores, where line-aligned blocks took 0.84x (8x224x224x64 k2s2 float32 / int64, one thread, median of 11).
 * The address is checked here, per block, because a replayed call (poolgrad._launch) may hand in outputs at
 * other addresses than the planned call's. */
#define PG_CL_STORE(SFX, ST, NL, dst, stream, EXPR)                                                       \
    do {                                                                                                  \
        if ((stream) && ((uintptr_t)(dst) & 63u) == 0) {                                                  \
            ST buf_[NL] __attribute__((aligned(64)));                                                     \
            for (Py_ssize_t l = 0; l < (NL); l++) buf_[l] = EXPR;                                         \
            for (size_t o_ = 0; o_ < (NL) * sizeof(ST); o_ += 64)                                         \
                PG_CL_NT64_##SFX((char *)(dst) + o_, (const char *)buf_ + o_);                            \
        } else {                                                                                          \
            for (Py_ssize_t l = 0; l < (NL); l++) (dst)[l] = EXPR;                                        \
        }                                                                                                 \
    } while (0)

/* One block of NL lanes (NL a literal, so that the lane loops become whole vector operations). */
#define PG_CL_BLOCK(SFX, DT, T, ACC, LT, IT, NL)                                                          \
    do {                                                                                                  \
        ACC best[NL];                                                                                     \
        LT bi[NL];                                                                                        \
        const T *p0 = xc + h0 * xs_h + w0 * xs_w;                                                         \
        LT i0 = (LT)(h0 * W + w0);                                                                        \
        for (Py_ssize_t l = 0; l < (NL); l++) {                                                           \
            best[l] = pg_load_##DT(p0[l]);                                                                \
            bi[l] = i0;                                                                                   \
        }                                                                                                 \
        for (int64_t a = 0; a < hc; a++) {                                                                \
            int64_t ih = h0 + a * dh;                                                                     \
            for (int64_t b = (a == 0); b < wcnt; b++) {                                                   \
                int64_t iw = w0 + b * dw;                                                                 \
                const T *p = xc + ih * xs_h + iw * xs_w;                                                  \
                LT ii = (LT)(ih * W + iw);                                                                \
                for (Py_ssize_t l = 0; l < (NL); l++) {                                                   \
                    ACC v = pg_load_##DT(p[l]);                                                           \
                    int t = (v > best[l]) | (v != v);                                                     \
                    best[l] = t ? v : best[l];                                                            \
                    bi[l] = t ? ii : bi[l];                                                               \
                }                                                                                         \
            }                                                                                             \
        }                                                                                                 \
        if (yc != NULL) PG_CL_STORE(SFX, T, NL, yc, st & 1, pg_cl_narrow_##DT(best[l]));                  \
        PG_CL_STORE(SFX, IT, NL, ic, st & 2, (IT)bi[l]);                                                  \
    } while (0)

/* Output cells [ow0, ow1) of output row (n, oh), channels [c0, c1), c1 - c0 >= B.  x points at image n, y
 * (NULL: indices only) and ind at output row (n, oh); channel strides are 1, the other strides are in elements.
 * Row window: h0, hc cells, step dh; column windows: ws[ow], wc[ow], step dw.
 * Channels go in whole B-lane blocks; a partial last block is redone from c1 - B (the overlapping lanes get
 * the same results again).  Blocks of a run-time or smaller length vectorise badly: with 8 lanes GCC's
 * AVX-512 variant extracts every lane, and a run-time length leaves a scalar tail whose stores the next window
 * cell's vector loads wait for.  Measured, 8x112x112xC k3s2p1 float32 at one thread (minimum of 25 runs on a
 * loaded machine), time against the row kernel this replaces: C = 32 0.53x, but with 8-lane blocks C = 8..16
 * 15x-30x and with a run-time length C = 12 4.3x, C = 6 13.6x.  So callers use this for C >= B only. */
#define PG_CL_ROW(SFX, DT, T, ACC, LT, IT, INAME, B)                                                      \
static void pg_cl_argmax_##DT##_##INAME##_##SFX(                                                          \
    const T *restrict x, Py_ssize_t xs_h, Py_ssize_t xs_w, T *restrict y, Py_ssize_t ys_w,                \
    IT *restrict ind, Py_ssize_t is_w, Py_ssize_t c0, Py_ssize_t c1, Py_ssize_t W,                        \
    int64_t h0, int64_t hc, int64_t dh, const int64_t *ws, const int64_t *wc, int64_t dw,                 \
    Py_ssize_t ow0, Py_ssize_t ow1, int st)                                                               \
{                                                                                                         \
    for (Py_ssize_t ow = ow0; ow < ow1; ow++) {                                                           \
        int64_t w0 = ws[ow], wcnt = wc[ow];                                                               \
        for (Py_ssize_t c = c0; c < c1; c += B) {                                                         \
            Py_ssize_t cb = c + B <= c1 ? c : c1 - B;                                                     \
            const T *xc = x + cb;                                                                         \
            T *yc = y != NULL ? y + ow * ys_w + cb : NULL;                                                \
            IT *ic = ind + ow * is_w + cb;                                                                \
            PG_CL_BLOCK(SFX, DT, T, ACC, LT, IT, B);                                                      \
        }                                                                                                 \
    }                                                                                                     \
}

/* The (dtype, index dtype) pairs every channels-last kernel (this forward, pg_cl_gather.h's backward) is compiled
 * for: M(DT, T, IT, INAME, ARG) for each, with the per-dtype choices in PG_CL_<what>_<DT> below. */
#define PG_CL_PAIRS(M, ARG)                                                                               \
    M(f32, float, int32_t, i32, ARG) M(f32, float, int64_t, i64, ARG)                                     \
    M(f64, double, int32_t, i32, ARG) M(f64, double, int64_t, i64, ARG)                                   \
    M(f16, uint16_t, int32_t, i32, ARG) M(f16, uint16_t, int64_t, i64, ARG)                               \
    M(bf16, uint16_t, int32_t, i32, ARG) M(bf16, uint16_t, int64_t, i64, ARG)
/* compare type, lane index type (the width of the compare) and lanes per block */
#define PG_CL_CMP_f32 float
#define PG_CL_CMP_f64 double
#define PG_CL_CMP_f16 float
#define PG_CL_CMP_bf16 float
#define PG_CL_LT_f32 int32_t
#define PG_CL_LT_f64 int64_t
#define PG_CL_LT_f16 int32_t
#define PG_CL_LT_bf16 int32_t
#define PG_CL_B_f32 PG_CL_LANES
#define PG_CL_B_f64 PG_CL_LANES_F64
#define PG_CL_B_f16 PG_CL_LANES
#define PG_CL_B_bf16 PG_CL_LANES

#define PG_CL_ROW_PAIR(DT, T, IT, INAME, SFX)                                                             \
    PG_CL_ROW(SFX, DT, T, PG_CL_CMP_##DT, PG_CL_LT_##DT, IT, INAME, PG_CL_B_##DT)
#define PG_CL_ISA(SFX) PG_CL_PAIRS(PG_CL_ROW_PAIR, SFX)
#define PG_ISA_GEN PG_CL_ISA
#include "pg_isa_variants.h"

/* Entry points: the variant of ISA level isa.  pg_cl_argmax_st_* also takes st, the outputs to write with
 * streaming stores (1: y, 2: ind, 3: both; see PG_CL_STORE); the caller fences (pg_stream_fence) before the
 * results are read. */
#define PG_CL_DISPATCH(DT, T, IT, INAME, UNUSED)                                                          \
static inline void pg_cl_argmax_st_##DT##_##INAME(                                                        \
    int isa, const T *x, Py_ssize_t xs_h, Py_ssize_t xs_w, T *y, Py_ssize_t ys_w, IT *ind,                \
    Py_ssize_t is_w, Py_ssize_t c0, Py_ssize_t c1, Py_ssize_t W, int64_t h0, int64_t hc, int64_t dh,      \
    const int64_t *ws, const int64_t *wc, int64_t dw, Py_ssize_t ow0, Py_ssize_t ow1, int st)             \
{                                                                                                         \
    PG_ISA_PICK(isa, pg_cl_argmax_##DT##_##INAME,                                                         \
                (x, xs_h, xs_w, y, ys_w, ind, is_w, c0, c1, W, h0, hc, dh, ws, wc, dw, ow0, ow1, st));    \
}                                                                                                         \
static inline void pg_cl_argmax_##DT##_##INAME(                                                           \
    int isa, const T *x, Py_ssize_t xs_h, Py_ssize_t xs_w, T *y, Py_ssize_t ys_w, IT *ind,                \
    Py_ssize_t is_w, Py_ssize_t c0, Py_ssize_t c1, Py_ssize_t W, int64_t h0, int64_t hc, int64_t dh,      \
    const int64_t *ws, const int64_t *wc, int64_t dw, Py_ssize_t ow0, Py_ssize_t ow1)                     \
{                                                                                                         \
    pg_cl_argmax_st_##DT##_##INAME(isa, x, xs_h, xs_w, y, ys_w, ind, is_w, c0, c1, W, h0, hc, dh, ws, wc, \
                                   dw, ow0, ow1, 0);                                                      \
}
PG_CL_PAIRS(PG_CL_DISPATCH, )

#endif
