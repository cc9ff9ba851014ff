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
 * The copies move elements as unsigned integers of the element's width (bits unchanged).  Plain loops: the
 * tile is in L1/L2 and a copy costs about what the window scan of one plane does (see _max_pool_indices.pyx).
 * Needs Py_ssize_t (Python.h, which the Cython-generated C includes first). */
#ifndef PG_PLANE_TILES_H
#define PG_PLANE_TILES_H
#include <stdint.h>

/* tile[(ih * W + iw) * P + l] = planes[l][ih * hs + iw * ws] for P planes of H x W (element strides hs, ws).
 * Dense planes are read in runs of 8 cells of each plane in turn, so that every plane's read stream stays
 * sequential and the tile's writes fill whole P-lane rows of 8 cells. */
#define PG_TILE_IN(NAME, T)                                                                               \
static inline void pg_tile_in_##NAME(T *restrict tile, T *const *planes, Py_ssize_t P, Py_ssize_t H,     \
                                     Py_ssize_t W, Py_ssize_t hs, Py_ssize_t ws)                          \
{                                                                                                         \
    if (ws == 1 && hs == W) {                                                                             \
        Py_ssize_t n = H * W, i0 = 0;                                                                     \
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
