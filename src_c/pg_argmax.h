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

#endif
