/* Small NCHW planes as channels-last tiles (poolgrad/_max_pool_indices.pyx, the "planes" forward).
 *
 * With planes of a few hundred cells (7x7 - 28x28, the late layers of CNNs), the row-vectorised forward
 * (pg_argmax.h) spends its time on per-row and per-cell overheads: AlexNet's pool5 has output rows of 6 lanes.
 * Lanes over planes have no such limit: P planes are interleaved into a tile [H][W][P] (the planes side by side,
 * as channels-last data holds channels), the channels-last window kernel (pg_cl_argmax.h) runs over the tile
 * with its windows in registers, P lanes per input cell, and the tile's outputs [Ho][Wo][P] go back to the P
 * planes.  The windows and the scan are the channels-last kernel's, so the results are too (ties: first maximum,
 * NaN: last NaN, values: the input elements' bits).
 *
 * The copies move elements as unsigned integers of the element's width (bits unchanged).  Dense planes of 32-
 * and 64-bit elements move as square blocks (4 planes x 4 cells, 2 x 2) through 16-byte vectors transposed in
 * registers: element by element, the copies of a 2x16x8x8 float32 k2s2 forward (tile in, value and int64 index
 * tiles out) took 3.9x the time of the window scan itself (perf of bench/experiments/tiny_loop.py, 1 thread).
 * Needs Py_ssize_t (Python.h, which the Cython-generated C includes first). */
#ifndef PG_PLANE_TILES_H
#define PG_PLANE_TILES_H
#include <stdint.h>
#include <string.h>

/* GCC's vector extensions (16-byte vectors: SSE2, every x86-64 level; other compilers take the scalar loops) */
#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 9
#define PG_TILE_VEC 1
typedef uint32_t pg_tile_v4u __attribute__((vector_size(16)));
typedef int32_t pg_tile_v4i __attribute__((vector_size(16)));
typedef uint64_t pg_tile_v2u __attribute__((vector_size(16)));
typedef int64_t pg_tile_v2i __attribute__((vector_size(16)));

/* r[k][j] -> r[j][k] for 4 x 4 32-bit elements */
static inline void pg_tile_t4(pg_tile_v4u *r)
{
    const pg_tile_v4i lo = {0, 4, 1, 5}, hi = {2, 6, 3, 7}, a = {0, 1, 4, 5}, b = {2, 3, 6, 7};
    pg_tile_v4u t0 = __builtin_shuffle(r[0], r[1], lo), t1 = __builtin_shuffle(r[0], r[1], hi);
    pg_tile_v4u t2 = __builtin_shuffle(r[2], r[3], lo), t3 = __builtin_shuffle(r[2], r[3], hi);
    r[0] = __builtin_shuffle(t0, t2, a);
    r[1] = __builtin_shuffle(t0, t2, b);
    r[2] = __builtin_shuffle(t1, t3, a);
    r[3] = __builtin_shuffle(t1, t3, b);
}

/* r[k][j] -> r[j][k] for 2 x 2 64-bit elements */
static inline void pg_tile_t2(pg_tile_v2u *r)
{
    const pg_tile_v2i lo = {0, 2}, hi = {1, 3};
    pg_tile_v2u t0 = __builtin_shuffle(r[0], r[1], lo), t1 = __builtin_shuffle(r[0], r[1], hi);
    r[0] = t0;
    r[1] = t1;
}

/* Dense planes (n cells each) as K x K blocks: tile[i * P + l] = planes[l][i] (in), planes[l][i] =
 * tile[i * L + l] for l < P (out).  Blocks of K cells of every plane in turn, as the scalar loops below go, so
 * that the tile is written (read) in whole rows of lanes; the cells past the last block and the planes past
 * the last group of K one at a time. */
#define PG_TILE_BLOCKS(NAME, T, V, K, TRANSPOSE)                                                          \
static inline void pg_tile_in_blocks_##NAME(T *restrict tile, T *const *planes, Py_ssize_t P,            \
                                            Py_ssize_t n)                                                 \
{                                                                                                         \
    Py_ssize_t nk = n - n % K, pk = P - P % K, i, l, k;                                                   \
    for (i = 0; i < nk; i += K) {                                                                         \
        for (l = 0; l < pk; l += K) {                                                                     \
            V r[K];                                                                                       \
            for (k = 0; k < K; k++) memcpy(&r[k], planes[l + k] + i, sizeof(V));                          \
            TRANSPOSE(r);                                                                                 \
            for (k = 0; k < K; k++) memcpy(tile + (i + k) * P + l, &r[k], sizeof(V));                     \
        }                                                                                                 \
        for (; l < P; l++)                                                                                \
            for (k = 0; k < K; k++) tile[(i + k) * P + l] = planes[l][i + k];                             \
    }                                                                                                     \
    for (l = 0; l < P; l++)                                                                               \
        for (i = nk; i < n; i++) tile[i * P + l] = planes[l][i];                                          \
}                                                                                                         \
static inline void pg_tile_out_blocks_##NAME(T *const *planes, const T *restrict tile, Py_ssize_t P,     \
                                             Py_ssize_t L, Py_ssize_t n)                                  \
{                                                                                                         \
    Py_ssize_t nk = n - n % K, pk = P - P % K, i, l, k;                                                   \
    for (i = 0; i < nk; i += K) {                                                                         \
        for (l = 0; l < pk; l += K) {                                                                     \
            V r[K];                                                                                       \
            for (k = 0; k < K; k++) memcpy(&r[k], tile + (i + k) * L + l, sizeof(V));                     \
            TRANSPOSE(r);                                                                                 \
            for (k = 0; k < K; k++) memcpy(planes[l + k] + i, &r[k], sizeof(V));                          \
        }                                                                                                 \
        for (; l < P; l++)                                                                                \
            for (k = 0; k < K; k++) planes[l][i + k] = tile[(i + k) * L + l];                             \
    }                                                                                                     \
    for (l = 0; l < P; l++)                                                                               \
        for (i = nk; i < n; i++) planes[l][i] = tile[i * L + l];                                          \
}
PG_TILE_BLOCKS(u32, uint32_t, pg_tile_v4u, 4, pg_tile_t4)
PG_TILE_BLOCKS(u64, uint64_t, pg_tile_v2u, 2, pg_tile_t2)
#define PG_TILE_IN_FAST_u32(tile, planes, P, n) (pg_tile_in_blocks_u32((tile), (planes), (P), (n)), 1)
#define PG_TILE_IN_FAST_u64(tile, planes, P, n) (pg_tile_in_blocks_u64((tile), (planes), (P), (n)), 1)
#define PG_TILE_OUT_FAST_u32(planes, tile, P, L, n) (pg_tile_out_blocks_u32((planes), (tile), (P), (L), (n)), 1)
#define PG_TILE_OUT_FAST_u64(planes, tile, P, L, n) (pg_tile_out_blocks_u64((planes), (tile), (P), (L), (n)), 1)
#else
#define PG_TILE_VEC 0
#define PG_TILE_IN_FAST_u32(tile, planes, P, n) 0
#define PG_TILE_IN_FAST_u64(tile, planes, P, n) 0
#define PG_TILE_OUT_FAST_u32(planes, tile, P, L, n) 0
#define PG_TILE_OUT_FAST_u64(planes, tile, P, L, n) 0
#endif
#define PG_TILE_IN_FAST_u16(tile, planes, P, n) 0
#define PG_TILE_OUT_FAST_u16(planes, tile, P, L, n) 0

/* tile[(ih * W + iw) * P + l] = planes[l][ih * hs + iw * ws] for P planes of H x W (element strides hs, ws).
 * Dense planes are read in runs of 8 cells of each plane in turn, so that every plane's read stream stays
 * sequential and the tile's writes fill whole P-lane rows of 8 cells. */
#define PG_TILE_IN(NAME, T)                                                                               \
static inline void pg_tile_in_##NAME(T *restrict tile, T *const *planes, Py_ssize_t P, Py_ssize_t H,     \
                                     Py_ssize_t W, Py_ssize_t hs, Py_ssize_t ws)                          \
{                                                                                                         \
    if (ws == 1 && hs == W) {                                                                             \
        Py_ssize_t n = H * W, i0 = 0;                                                                     \
        if (PG_TILE_IN_FAST_##NAME(tile, planes, P, n)) return;                                           \
        for (; i0 + 8 <= n; i0 += 8)                                                                      \
            for (Py_ssize_t l = 0; l < P; l++) {                                                          \
                const T *s = planes[l] + i0;                                                              \
                T *d = tile + i0 * P + l;                                                                 \
                for (Py_ssize_t u = 0; u < 8; u++) d[u * P] = s[u];                                       \
            }                                                                                             \
        for (Py_ssize_t l = 0; l < P; l++)                                                                \
            for (Py_ssize_t i = i0; i < n; i++) tile[i * P + l] = planes[l][i];                           \
        return;                                                                                           \
    }                                                                                                     \
    for (Py_ssize_t l = 0; l < P; l++) {                                                                  \
        const T *s = planes[l];                                                                           \
        for (Py_ssize_t ih = 0; ih < H; ih++)                                                             \
            for (Py_ssize_t iw = 0; iw < W; iw++) tile[(ih * W + iw) * P + l] = s[ih * hs + iw * ws];     \
    }                                                                                                     \
}

/* planes[l][oh * hs + ow * ws] = tile[(oh * Wo + ow) * L + l] for l < P: the tile's outputs (L lanes per
 * cell) back to its first P planes. */
#define PG_TILE_OUT(NAME, T)                                                                              \
static inline void pg_tile_out_##NAME(T *const *planes, const T *restrict tile, Py_ssize_t P,            \
                                      Py_ssize_t L, Py_ssize_t Ho, Py_ssize_t Wo, Py_ssize_t hs,          \
                                      Py_ssize_t ws)                                                      \
{                                                                                                         \
    if (ws == 1 && hs == Wo) {                                                                            \
        Py_ssize_t n = Ho * Wo, i0 = 0;                                                                   \
        if (PG_TILE_OUT_FAST_##NAME(planes, tile, P, L, n)) return;                                       \
        for (; i0 + 8 <= n; i0 += 8)                                                                      \
            for (Py_ssize_t l = 0; l < P; l++) {                                                          \
                T *d = planes[l] + i0;                                                                    \
                const T *s = tile + i0 * L + l;                                                           \
                for (Py_ssize_t u = 0; u < 8; u++) d[u] = s[u * L];                                       \
            }                                                                                             \
        for (Py_ssize_t l = 0; l < P; l++)                                                                \
            for (Py_ssize_t i = i0; i < n; i++) planes[l][i] = tile[i * L + l];                           \
        return;                                                                                           \
    }                                                                                                     \
    for (Py_ssize_t l = 0; l < P; l++) {                                                                  \
        T *d = planes[l];                                                                                 \
        for (Py_ssize_t oh = 0; oh < Ho; oh++)                                                            \
            for (Py_ssize_t ow = 0; ow < Wo; ow++) d[oh * hs + ow * ws] = tile[(oh * Wo + ow) * L + l];   \
    }                                                                                                     \
}

PG_TILE_IN(u16, uint16_t)
PG_TILE_IN(u32, uint32_t)
PG_TILE_IN(u64, uint64_t)
PG_TILE_OUT(u16, uint16_t)
PG_TILE_OUT(u32, uint32_t)
PG_TILE_OUT(u64, uint64_t)

#endif
