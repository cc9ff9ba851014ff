/* Channels-last max-pooling backward as a gather (poolgrad/_max_pool_indices.pyx): vector lanes over C.
 *
 * grad_x[n, ih, iw, c] is the sum, over the outputs (oh, ow) whose window span covers (ih, iw), in output
 * row-major order, of grad_output[n, oh, ow, c] where indices[n, oh, ow, c] == ih * W + iw.  For one input
 * pixel that is a short loop over the (few) covering outputs of contiguous loads, compares and masked adds,
 * all lanes at once; every grad_x cell is written by the gather alone, so there is no zeroing pass (the
 * scatter writes grad_x twice: zeros, then the hits).
 *
 * Bits: the scatter computes ((0 + g1) + g2) + ... over the hits in output row-major order; the gather adds the
 * same terms in the same order, plus +0.0 for every covering output that does not hit.  x + (+0.0) == x for
 * every x but -0.0, and a sum that starts at +0.0 never becomes -0.0 under round-to-nearest, so the results
 * are the scatter's bit for bit (16-bit types: float64 sums, one rounding on the store by pg_avg.h's
 * round-to-odd narrowing, as the scatter).
 * An index outside its own window's span would be missed.  So the kernel also counts the hits: an index inside
 * its span hits exactly one (cell, covering output) pair of the gather, any other index none, so the total is
 * N * Ho * Wo * C exactly when every index is inside its span (otherwise the caller reruns the exact
 * plane-by-plane pass).  Counting costs one vector add per compare; a separate per-output span check cost as
 * much as the gather itself (43% of the time on 8x56x56x256 k2s2, measured with perf).
 *
 * Two loop shapes: float32 / float64 rows run the channel loop innermost (PG_CL_GATHER_CROW), 16-bit rows run
 * fixed blocks of channels with the covering outputs innermost (PG_CL_GATHER_BLOCK16, whose float64 sums are
 * rounded once per block).
 *
 * Compiled for the baseline ISA and, on x86-64 with GCC, for AVX2 and AVX-512 (the one ISA level of pg_isa.h
 * picks one); every variant performs the same IEEE operations in the same order.  Needs Py_ssize_t (Python.h). */
#ifndef PG_CL_GATHER_H
#define PG_CL_GATHER_H
#include <stdint.h>
#include "pg_dtype.h"
#include "pg_isa.h"
#include "pg_cl_argmax.h"
#include "pg_avg.h"

/* The 16-bit result of a sum with exactly one term g, +0 + g rounded once (pg_avg_store_DT((double)g + 0.0)):
 * g itself, except that -0 becomes +0 (+0 + -0 = +0) and a NaN comes out quiet (the add quiets it, the float32
 * -> 16-bit narrowing keeps sign and payload top: the quiet bit set on g's own bits).  Inf and subnormals are
 * exact.  Integer selects only, so the loop vectorises on 16-bit lanes. */
PG_INLINE uint16_t pg_cl_one_f16(uint16_t g)
{
    uint16_t q = (uint16_t)(g | ((g & 0x7fffu) > 0x7c00u ? 0x0200u : 0u));
    return g == 0x8000u ? (uint16_t)0 : q;
}
PG_INLINE uint16_t pg_cl_one_bf16(uint16_t g)
{
    uint16_t q = (uint16_t)(g | ((g & 0x7fffu) > 0x7f80u ? 0x0040u : 0u));
    return g == 0x8000u ? (uint16_t)0 : q;
}

/* The 16-bit block: float64 sums of one block of channels, written so that GCC vectorises every loop (a generic
 * lane-array block, with its per-lane widening inside the compare-and-add and a per-lane rounding store, stayed
 * scalar: 16-bit rows ran 8-9x slower than float32 ones).  Each covering output's grad_output lanes are widened
 * to float64 first (exact: pg_dtype.h's branch-free conversion, then float -> double) in a loop of their own, so
 * that the compare-and-add is a plain select: GCC does not if-convert a conversion inside the select (under
 * -ftrapping-math it may trap) and left that loop scalar.  The block is rounded once at the end, in two separate
 * vector loops: float64 -> float32 with round-to-odd, then float32 -> 16-bit to nearest even (that is exactly
 * pg_avg.h's pg_avg_store_DT, split so that each step vectorises). */
#define PG_CL_GATHER_BLOCK16(DT, T, ACC, STORE, IT, NL, SKIP)                                             \
    do {                                                                                                  \
        double acc[NL], wide[NL];                                                                         \
        float narrow[NL];                                                                                 \
        int32_t hit[NL];                                                                                  \
        for (Py_ssize_t l = 0; l < (NL); l++) {                                                           \
            acc[l] = 0;                                                                                   \
            hit[l] = 0;                                                                                   \
        }                                                                                                 \
        if ((ob - oa) * (wb - wa) == 1) {                                                                 \
            /* one covering output (k <= s): the sum is +0 or one term, so the result is that term's own  \
             * bits as the float64 path would round them (pg_cl_one_DT), with no arithmetic at all */     \
            const IT *ip = ind + oa * ix_h + wa * ix_w + c;                                               \
            const uint16_t *gp = go + oa * go_h + wa * go_w + c;                                          \
            for (Py_ssize_t l = 0; l < (NL); l++) {                                                       \
                int m = ip[l] == cell;                                                                    \
                gxc[l] = m ? pg_cl_one_##DT(gp[l]) : (uint16_t)0;                                         \
                hit[l] = m;                                                                               \
            }                                                                                             \
            for (Py_ssize_t l = (SKIP); l < (NL); l++) hits += hit[l];                                    \
            break;                                                                                        \
        }                                                                                                 \
        for (int64_t oh = oa; oh < ob; oh++) {                                                            \
            for (int64_t ow = wa; ow < wb; ow++) {                                                        \
                const IT *ip = ind + oh * ix_h + ow * ix_w + c;                                           \
                const uint16_t *gp = go + oh * go_h + ow * go_w + c;                                      \
                for (Py_ssize_t l = 0; l < (NL); l++) wide[l] = (double)pg_load_##DT(gp[l]);              \
                for (Py_ssize_t l = 0; l < (NL); l++) {                                                   \
                    int m = ip[l] == cell;                                                                \
                    double t = m ? wide[l] : 0.0;                                                         \
                    /* a NaN term replaces the sum outright: with two NaN operands x86 returns the first, \
                     * and GCC may swap a vector add's operands; the scalar kernels return the later term */ \
                    acc[l] = t != t ? t : acc[l] + t;                                                     \
                    hit[l] += m;                                                                          \
                }                                                                                         \
            }                                                                                             \
        }                                                                                                 \
        for (Py_ssize_t l = 0; l < (NL); l++) narrow[l] = pg_f64_to_f32_odd(acc[l]);                      \
        for (Py_ssize_t l = 0; l < (NL); l++) gxc[l] = pg_store_##DT(narrow[l]);                          \
        for (Py_ssize_t l = (SKIP); l < (NL); l++) hits += hit[l];                                        \
    } while (0)
/* 16-bit grad_x row ih of one image: gx points at (n, ih, 0, 0) (cell stride gx_w, channel stride 1), go and
 * ind at image n (channel stride 1), C >= B (whole B-lane blocks, for the reasons given in pg_cl_argmax.h; a
 * partial last block is redone from C - B: the overlapping lanes get the same sums, and their hits are not
 * counted twice).  Output rows [oa, ob) cover ih; output columns [owa[iw], owb[iw]) cover iw.
 * Returns the number of hits (see above). */
#define PG_CL_GATHER_ROW(SFX, DT, T, ACC, STORE, IT, INAME, B)                                            \
static int64_t pg_cl_gather_##DT##_##INAME##_##SFX(                                                       \
    T *restrict gx, Py_ssize_t gx_w, const T *restrict go, Py_ssize_t go_h, Py_ssize_t go_w,              \
    const IT *restrict ind, Py_ssize_t ix_h, Py_ssize_t ix_w, Py_ssize_t C, Py_ssize_t W, int64_t ih,     \
    int64_t oa, int64_t ob, const int64_t *owa, const int64_t *owb)                                       \
{                                                                                                         \
    int64_t hits = 0;                                                                                     \
    for (Py_ssize_t iw = 0; iw < W; iw++) {                                                               \
        IT cell = (IT)(ih * W + iw);                                                                      \
        int64_t wa = owa[iw], wb = owb[iw];                                                               \
        for (Py_ssize_t c0 = 0; c0 < C; c0 += B) {                                                        \
            Py_ssize_t c = c0 + B <= C ? c0 : C - B;                                                      \
            T *gxc = gx + iw * gx_w + c;                                                                  \
            PG_CL_GATHER_BLOCK16(DT, T, ACC, STORE, IT, B, c0 - c);                                       \
        }                                                                                                 \
    }                                                                                                     \
    return hits;                                                                                          \
}

/* float32 / float64 grad_x row ih of one image (arguments as PG_CL_GATHER_ROW's, any C >= 1): the channel
 * loop innermost.  For one cell, each covering output in row-major order adds its terms to the whole grad_x
 * pixel (C channels) in one contiguous loop: the first writes +0 + term, the later ones add to what the pixel
 * holds (C values, in L1), so every channel gets the sum ((+0 + t1) + t2) + ... in the same order as the
 * scatter.  Plain loops of run-time length C that GCC vectorises at the ISA's full width; the hit count is the
 * loop's vector reduction in the index width (the compare's mask is added as it is, not narrowed), reduced
 * once per (cell, covering output).  This replaced 32-lane blocks with the covering outputs innermost (the
 * 16-bit block's shape), whose sums and hit counters GCC kept on the stack and whose hit counters were reduced
 * across the lanes after every block: on 1x14x14x512 k2s2 float32 with int64 indices the gather was 79% of the
 * backward's time and that reduction about a quarter of it (perf).  Row kernel alone, 1x14x14x512 k2s2,
 * float32, int64 indices, one thread, old / new time (best of 7, a standalone C harness over both): AVX-512
 * 46 / 22 us, AVX2 151 / 28 us, baseline 465 / 182 us; the whole backward call: bench/experiments/clbwd_layers.py.
 * The gather reads each covering output's indices and gradients once per cell it covers, so with overlapping
 * windows it re-reads them: there the band scatter wins (GATHER_MAX_COVER in _max_pool_indices.pyx).
 *
 * A term is selected by ANDing its bits with the compare's mask (+0.0 where the index misses).  Written as a
 * select, GCC turns `+0 + (m ? g : 0)` into `m ? g + 0 : 0` and leaves the loop scalar (a branch per channel).
 * A NaN sum stays as it is, whatever NaN is added to it, as in the scatter's scalar add (x86 returns the first
 * operand of two NaNs): GCC may order a vector add's operands either way.  The count of one (cell, covering
 * output) is in the index type and at most C: gather_backward_cl keeps C < 2^31 for int32 indices. */
PG_INLINE float pg_cl_keep_f32(float g, uint32_t m)
{
    uint32_t u;
    memcpy(&u, &g, 4);
    u &= 0u - m;
    memcpy(&g, &u, 4);
    return g;
}
PG_INLINE double pg_cl_keep_f64(double g, uint64_t m)
{
    uint64_t u;
    memcpy(&u, &g, 8);
    u &= (uint64_t)0 - m;
    memcpy(&g, &u, 8);
    return g;
}
#define PG_CL_GATHER_CROW(SFX, DT, T, IT, INAME)                                                          \
static int64_t pg_cl_gather_##DT##_##INAME##_##SFX(                                                       \
    T *restrict gx, Py_ssize_t gx_w, const T *restrict go, Py_ssize_t go_h, Py_ssize_t go_w,              \
    const IT *restrict ind, Py_ssize_t ix_h, Py_ssize_t ix_w, Py_ssize_t C, Py_ssize_t W, int64_t ih,     \
    int64_t oa, int64_t ob, const int64_t *owa, const int64_t *owb)                                       \
{                                                                                                         \
    int64_t hits = 0;                                                                                     \
    for (Py_ssize_t iw = 0; iw < W; iw++) {                                                               \
        const IT cell = (IT)(ih * W + iw);                                                                \
        const int64_t wa = owa[iw], wb = owb[iw];                                                         \
        T *restrict gxp = gx + iw * gx_w;                                                                 \
        if (ob <= oa || wb <= wa) {                                                                       \
            /* no window covers this cell (floor mode leaves the last rows and columns out) */            \
            for (Py_ssize_t c = 0; c < C; c++) gxp[c] = (T)0;                                             \
            continue;                                                                                     \
        }                                                                                                 \
        for (int64_t oh = oa; oh < ob; oh++) {                                                            \
            for (int64_t ow = wa; ow < wb; ow++) {                                                        \
                const IT *restrict ip = ind + oh * ix_h + ow * ix_w;                                      \
                const T *restrict gp = go + oh * go_h + ow * go_w;                                        \
                IT n = 0;                                                                                 \
                if (oh == oa && ow == wa) {                                                               \
                    for (Py_ssize_t c = 0; c < C; c++) {                                                  \
                        IT m = ip[c] == cell;                                                             \
                        gxp[c] = (T)0 + pg_cl_keep_##DT(gp[c], m);                                        \
                        n += m;                                                                           \
                    }                                                                                     \
                } else {                                                                                  \
                    for (Py_ssize_t c = 0; c < C; c++) {                                                  \
                        IT m = ip[c] == cell;                                                             \
                        T t = pg_cl_keep_##DT(gp[c], m);                                                  \
                        T a = gxp[c];                                                                     \
                        gxp[c] = a != a ? a : a + t;                                                      \
                        n += m;                                                                           \
                    }                                                                                     \
                }                                                                                         \
                hits += n;                                                                                \
            }                                                                                             \
        }                                                                                                 \
    }                                                                                                     \
    return hits;                                                                                          \
}

/* the pairs of pg_cl_argmax.h; sums of the 16-bit types in float64, rounded once on the store (pg_avg.h) */
#define PG_CL_SUM_f16 double
#define PG_CL_SUM_bf16 double
#define PG_CL_STORE_f16 pg_avg_store_f16
#define PG_CL_STORE_bf16 pg_avg_store_bf16
#define PG_CL_ROW_f32(DT, T, IT, INAME, SFX) PG_CL_GATHER_CROW(SFX, DT, T, IT, INAME)
#define PG_CL_ROW_f64(DT, T, IT, INAME, SFX) PG_CL_GATHER_CROW(SFX, DT, T, IT, INAME)
#define PG_CL_ROW_f16(DT, T, IT, INAME, SFX)                                                              \
    PG_CL_GATHER_ROW(SFX, DT, T, PG_CL_SUM_##DT, PG_CL_STORE_##DT, IT, INAME, PG_CL_B_##DT)
#define PG_CL_ROW_bf16 PG_CL_ROW_f16
#define PG_CL_GATHER_PAIR(DT, T, IT, INAME, SFX) PG_CL_ROW_##DT(DT, T, IT, INAME, SFX)
#define PG_CL_GATHER_ISA(SFX) PG_CL_PAIRS(PG_CL_GATHER_PAIR, SFX)
#define PG_ISA_GEN PG_CL_GATHER_ISA
#include "pg_isa_variants.h"

#define PG_CL_GATHER_DISPATCH(DT, T, IT, INAME, UNUSED)                                                   \
static inline int64_t pg_cl_gather_##DT##_##INAME(                                                        \
    int isa, T *gx, Py_ssize_t gx_w, const T *go, Py_ssize_t go_h, Py_ssize_t go_w, const IT *ind,        \
    Py_ssize_t ix_h, Py_ssize_t ix_w, Py_ssize_t C, Py_ssize_t W, int64_t ih, int64_t oa, int64_t ob,     \
    const int64_t *owa, const int64_t *owb)                                                               \
{                                                                                                         \
    return PG_ISA_PICK(isa, pg_cl_gather_##DT##_##INAME,                                                  \
                      (gx, gx_w, go, go_h, go_w, ind, ix_h, ix_w, C, W, ih, oa, ob, owa, owb));           \
}
PG_CL_PAIRS(PG_CL_GATHER_DISPATCH, )

#endif
