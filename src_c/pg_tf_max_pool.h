/* Vector row kernels of TensorFlow-compatible MaxPoolGrad / MaxPool (used by poolgrad/_tf_max_pool.pyx; the
 * design is described in that module's docstring).  Compiled into that extension only; it needs Python.h
 * (Py_ssize_t), which the Cython-generated C includes first. */
#ifndef PG_TF_MAX_POOL_H
#define PG_TF_MAX_POOL_H
#include <stdint.h>
#include <string.h>
#include "pg_dtype.h"
#include "pg_isa.h"
#include "pg_avg.h"
#include "pg_stream.h"
#include "pg_plane_tiles.h"

/* Two types per dtype: the compare type (the window maxima: float for float32 and the 16-bit types, which
   widen to it exactly, double for float64; the ACC macro argument below) and the ring type, in which grad is
   summed.  The 16-bit types sum in double and are rounded once on store (pg_avg.h's round-to-odd narrowing):
   float16 terms sum exactly in double (up to 2**13 of them), and a bfloat16 sum cannot overflow where the exact
   sum is finite.  A float32 ring would round every partial sum and could round twice. */
typedef float pgtf_ring_f32;
typedef double pgtf_ring_f64;
typedef double pgtf_ring_f16;
typedef double pgtf_ring_bf16;

/* Store n ring values as grad_x values; stream: with streaming stores (pg_stream.h) where the row starts and
   ends on a 16-byte boundary (elsewhere a line would get both kinds of store: tf_max_pool.py's measurements).
   float32 / float64 rings hold the storage type already; the 16-bit ones are rounded once (pg_avg.h's row
   converters) in chunks of up to 64 values on the stack, which are then streamed. */
#define PGTF_PUT(DT, T)                                                                                \
static inline void pgtf_put_##DT(T *dst, const T *src, Py_ssize_t n, int stream)                        \
{                                                                                                      \
    if (stream && pg_stream_whole(dst, (size_t)n * sizeof(T)))                                         \
        pg_stream_copy(dst, src, (size_t)n * sizeof(T));                                               \
    else                                                                                               \
        memcpy(dst, src, (size_t)n * sizeof(T));                                                       \
}
PGTF_PUT(f32, float)
PGTF_PUT(f64, double)
#define PGTF_PUT16(DT)                                                                                 \
static inline void pgtf_put_##DT(uint16_t *dst, const double *src, Py_ssize_t n, int stream)           \
{                                                                                                      \
    if (stream && pg_stream_whole(dst, (size_t)n * sizeof(uint16_t))) {                                \
        uint16_t tmp[64];                                                                              \
        for (Py_ssize_t i = 0; i < n; i += 64) {                                                       \
            Py_ssize_t k = n - i < 64 ? n - i : 64;                                                    \
            pg_f64_to_##DT##_row(tmp, src + i, k);                                                     \
            pg_stream_copy(dst + i, tmp, (size_t)k * sizeof(uint16_t));                                \
        }                                                                                              \
    } else {                                                                                           \
        pg_f64_to_##DT##_row(dst, src, n);                                                             \
    }                                                                                                  \
}
PGTF_PUT16(f16)
PGTF_PUT16(bf16)

/* Row kernels (see the module docstring).  Common arguments: x points at the image (channels-last) or plane;
   window row r (0-based) of the output row has ring offset ro[r] (of its column 0, channel 0), negative when the
   row is outside the band (such cells are compared but never receive grad); g/ring are NULL in the forward,
   y is NULL in the backward.  The one ISA level (pg_isa.h) picks the variant: 0 baseline (SSE2/NEON), 1 AVX2,
   2 AVX-512. */
/* ---- channels-last row kernels ------------------------------------------------------------------------ */
#if defined(__GNUC__) && !defined(__clang__)
/* the scalar tails after fixed-size chunks are provably short; GCC warns about the iterations that cannot run */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Waggressive-loop-optimizations"
#endif
/* GCC/Clang vector extensions (the scalar code serves other compilers; tests run every ISA level through
 * poolgrad.config.set_isa_level, not through build switches) */
#if defined(__clang__) || (defined(__GNUC__) && __GNUC__ >= 9)
#define PGTF_VEC 1
#else
#define PGTF_VEC 0
#endif

#define PGTF_SCALAR_REST(DT, T, ACC, ARGT)                                                             \
static inline void pgtf_rest_##DT(const T *xw, Py_ssize_t x_h, Py_ssize_t x_w, Py_ssize_t nh,          \
                                  Py_ssize_t nw, const int32_t *ro, Py_ssize_t C, Py_ssize_t n,        \
                                  const T *g, Py_ssize_t g_c, pgtf_ring_##DT *ring, T *y,              \
                                  Py_ssize_t y_c)                                                      \
{   /* the last n < block channels (or every channel without vector extensions): scalar */            \
    for (Py_ssize_t l = 0; l < n; l++) {                                                               \
        ACC b = pg_load_##DT(xw[l]);                                                                   \
        ARGT a = ro[0];                                                                                \
        for (Py_ssize_t r = 0; r < nh; r++)                                                            \
            for (Py_ssize_t q = (r == 0); q < nw; q++) {                                               \
                ACC v = pg_load_##DT(xw[r * x_h + q * x_w + l]);                                       \
                if ((v > b) | (v != v)) { b = v; a = (ARGT)((int64_t)ro[r] + q * C); }                 \
            }                                                                                          \
        if (y) y[l * y_c] = pg_store_##DT(b);                                                          \
        else if (a >= 0) ring[a + l] += pg_load_##DT(g[l * g_c]);                                      \
    }                                                                                                  \
}
PGTF_SCALAR_REST(f32, float, float, int32_t)
PGTF_SCALAR_REST(f64, double, double, int64_t)
PGTF_SCALAR_REST(f16, uint16_t, float, int32_t)
PGTF_SCALAR_REST(bf16, uint16_t, float, int32_t)

/* The argmax step, lane by lane, without branches: where the candidate V is greater than the running maximum B or
   NaN, B takes V and the running offset AV takes O (VM: the integer vector type of the lanes). */
#define PGTF_TAKE(VM, V, B, AV, O)                                                                     \
    do {                                                                                               \
        VM m_ = (VM)(((V) > (B)) | ((V) != (V)));                                                      \
        (B) = (__typeof__(B))(((VM)(V) & m_) | ((VM)(B) & ~m_));                                       \
        (AV) = ((O) & m_) | ((AV) & ~m_);                                                              \
    } while (0)

/* Blocks of K vectors of LANES channels at channels [c0, c0 + K * LANES): the running argmax of every window
   cell held in registers (branch-free selects; K independent dependency chains hide the compare latency),
   then the scatter of grad into the ring. */
#define PGTF_BLOCKS(DT, T, ACC, ARGT, VT, VM, VLOAD, LANES, K)                                          \
        for (; c0 + (K) * (LANES) <= C; c0 += (K) * (LANES)) {                                         \
            VT b[K];                                                                                   \
            VM av[K];                                                                                  \
            ARGT a[(K) * (LANES)];                                                                     \
            for (k = 0; k < (K); k++) {                                                                \
                b[k] = VLOAD(xw + c0 + k * (LANES));                                                   \
                av[k] = (VM){0} + (ARGT)ro[0];                                                         \
            }                                                                                          \
            for (r = 0; r < nh; r++) {                                                                 \
                const T *xr = xw + r * x_h + c0;                                                       \
                for (q = (r == 0); q < nw; q++) {                                                      \
                    const T *xp = xr + q * x_w;                                                        \
                    VM o = (VM){0} + (ARGT)((int64_t)ro[r] + q * C);                                   \
                    for (k = 0; k < (K); k++) {                                                        \
                        VT v = VLOAD(xp + k * (LANES));                                                \
                        PGTF_TAKE(VM, v, b[k], av[k], o);                                              \
                    }                                                                                  \
                }                                                                                      \
            }                                                                                          \
            if (yw) {   /* forward: the window maxima */                                               \
                ACC mx[(K) * (LANES)];                                                                 \
                memcpy(mx, b, sizeof mx);                                                              \
                for (l = 0; l < (K) * (LANES); l++) yw[(c0 + l) * y_c] = pg_store_##DT(mx[l]);        \
                continue;                                                                              \
            }                                                                                          \
            memcpy(a, av, sizeof a);                                                                   \
            for (l = 0; l < (K) * (LANES); l++)                                                        \
                if (a[l] >= 0) rg[a[l] + c0 + l] += pg_load_##DT(gw[(c0 + l) * g_c]);                  \
        }

/* One output row of one image: every window, all channels. */
#define PGTF_ROW(SFX, DT, T, ACC, ARGT, VT, VM, VLOAD, LANES)                                           \
static void pgtf_row_##DT##_##SFX(const T *x, Py_ssize_t x_h, Py_ssize_t x_w, Py_ssize_t h0,            \
                                  Py_ssize_t nh, const int32_t *ro, Py_ssize_t C, const int64_t *wlo,  \
                                  const int64_t *whi, Py_ssize_t Wo, const T *g, Py_ssize_t g_w,       \
                                  Py_ssize_t g_c, pgtf_ring_##DT *ring, Py_ssize_t p0, Py_ssize_t np_, \
                                  T *y,                                                                \
                                  Py_ssize_t y_w, Py_ssize_t y_c, Py_ssize_t ow_a, Py_ssize_t ow_b,    \
                                  Py_ssize_t sw, Py_ssize_t kw, Py_ssize_t pw)                         \
{                                                                                                      \
    const Py_ssize_t cend = (C / (LANES)) * (LANES);                                                   \
    for (Py_ssize_t ow = 0; ow < Wo; ow++) {                                                           \
        Py_ssize_t w0 = wlo[ow], nw = whi[ow] - w0, c0 = 0, r, q, l;                                   \
        int k;                                                                                         \
        const T *xw = x + h0 * x_h + w0 * x_w;                                                         \
        if (np_ > 0) {  /* prefetch the columns the next window needs of the next output row's new rows */ \
            const char *pa = (const char *)(x + p0 * x_h + (ow ? whi[ow - 1] : w0) * x_w);             \
            const char *pb = (const char *)(x + p0 * x_h + whi[ow] * x_w);                             \
            for (r = 0; r < np_; r++)                                                                  \
                for (const char *pp = pa + r * x_h * (Py_ssize_t)sizeof(T);                            \
                     pp < pb + r * x_h * (Py_ssize_t)sizeof(T); pp += 64)                              \
                    __builtin_prefetch(pp);                                                            \
        }                                                                                              \
        pgtf_ring_##DT *rg = ring ? ring + w0 * C : ring;                                              \
        const T *gw = g ? g + ow * g_w : g;                                                            \
        T *yw = y ? y + ow * y_w : y;                                                                  \
        PGTF_BLOCKS(DT, T, ACC, ARGT, VT, VM, VLOAD, LANES, 4)                                         \
        PGTF_BLOCKS(DT, T, ACC, ARGT, VT, VM, VLOAD, LANES, 1)                                         \
    }                                                                                                  \
    /* the last C % LANES channels (all of them when C < LANES): one channel at a time, the unclipped    \
       windows [ow_a, ow_b) side by side in vector lanes, the clipped ones scalar, in ow order */        \
    for (Py_ssize_t c = cend; c < C; c++) {                                                            \
        Py_ssize_t ow = 0;                                                                             \
        while (ow < Wo) {                                                                              \
            if (ow == ow_a && ow_b > ow_a) {                                                           \
                ow = pgtf_prow_##DT##_##SFX(x + c, x_h, x_w, h0, nh, ro, ow, ow_b, sw, kw, pw, C,      \
                                            g ? g + c * g_c : g, g_w, ring ? ring + c : ring,          \
                                            y ? y + c * y_c : y, y_w);                                 \
                if (ow >= Wo) break;                                                                   \
            }                                                                                          \
            pgtf_rest_##DT(x + h0 * x_h + wlo[ow] * x_w + c, x_h, x_w, nh, whi[ow] - wlo[ow], ro, C, 1, \
                           g ? g + ow * g_w + c * g_c : g, g_c, ring ? ring + wlo[ow] * C + c : ring,  \
                           y ? y + ow * y_w + c * y_c : y, y_c);                                       \
            ow++;                                                                                      \
        }                                                                                              \
    }                                                                                                  \
}

/* Plane-contiguous memory, one output row of one (n, c) plane: the windows [ow, ow1) are all unclipped (kw
   columns starting at ow * sw - pw), so 2 * LANES consecutive windows run side by side, one per lane (a gather
   of stride sw * x_w, a plain vector load when that is 1); grad is then added in ow order.  Returns the first
   window not done (the caller finishes the row with scalar code). */
#if defined(__GNUC__) && !defined(__clang__)
#define PGTF_HAVE_SHUFFLE 1
#define PGTF_SHUFFLE(a, b, m) __builtin_shuffle(a, b, m)
#else
#define PGTF_SHUFFLE(a, b, m) (a)
#define PGTF_HAVE_SHUFFLE 0
#endif
#define PGTF_PROW(SFX, DT, T, ACC, ARGT, VT, VM, RT, IT, RCVT, LANES)                                   \
static inline VT pgtf_gld_##DT##_##SFX(const T *p, Py_ssize_t step)                                    \
{   /* lanes p[0], p[step], ...; reads nothing past p[(LANES - 1) * step] */                            \
    RT v;                                                                                              \
    int l;                                                                                             \
    if (step == 1) {                                                                                   \
        memcpy(&v, p, sizeof v);                                                                       \
    } else if (PGTF_HAVE_SHUFFLE && step == 2) {                                                       \
        RT lo, hi;                                                                                     \
        IT m;                                                                                          \
        memcpy(&lo, p, sizeof lo);                                                                     \
        memcpy(&hi, p + (LANES) - 1, sizeof hi);                                                       \
        for (l = 0; l < (LANES); l++) m[l] = 2 * l + (l >= (LANES) / 2);                               \
        v = PGTF_SHUFFLE(lo, hi, m);                                                                   \
    } else {                                                                                           \
        for (l = 0; l < (LANES); l++) v[l] = p[l * step];                                              \
    }                                                                                                  \
    return RCVT(v);                                                                                    \
}                                                                                                      \
static Py_ssize_t pgtf_prow_##DT##_##SFX(const T *x, Py_ssize_t x_h, Py_ssize_t x_w, Py_ssize_t h0,     \
                                         Py_ssize_t nh, const int32_t *ro, Py_ssize_t ow,              \
                                         Py_ssize_t ow1, Py_ssize_t sw, Py_ssize_t kw, Py_ssize_t pw,  \
                                         Py_ssize_t cs, const T *g, Py_ssize_t g_w,                    \
                                         pgtf_ring_##DT *ring, T *y,                                   \
                                         Py_ssize_t y_w)                                               \
{   /* cs: ring elements per column (1 for a plane, C for channels-last) */                            \
    const Py_ssize_t step = sw * x_w;                                                                  \
    for (; ow + 2 * (LANES) <= ow1; ow += 2 * (LANES)) {                                               \
        VM col[2], colc[2], av[2];                                                                     \
        VT b[2];                                                                                       \
        ARGT a[2 * (LANES)];                                                                           \
        Py_ssize_t r, q, l;                                                                            \
        int k;                                                                                         \
        for (l = 0; l < 2 * (LANES); l++) a[l] = (ARGT)((ow + l) * sw - pw);   /* first column */     \
        memcpy(col, a, sizeof col);                                                                    \
        for (k = 0; k < 2; k++) {                                                                      \
            b[k] = pgtf_gld_##DT##_##SFX(x + h0 * x_h + ((ow + k * (LANES)) * sw - pw) * x_w, step);   \
            colc[k] = col[k] * (ARGT)cs;                                                               \
            av[k] = colc[k] + (ARGT)ro[0];                                                             \
        }                                                                                              \
        for (r = 0; r < nh; r++) {                                                                     \
            const T *xr = x + (h0 + r) * x_h + (ow * sw - pw) * x_w;                                   \
            for (q = (r == 0); q < kw; q++) {                                                          \
                for (k = 0; k < 2; k++) {                                                              \
                    VT v = pgtf_gld_##DT##_##SFX(xr + q * x_w + k * (LANES) * step, step);             \
                    VM o = colc[k] + (ARGT)((int64_t)ro[r] + q * cs);                                  \
                    PGTF_TAKE(VM, v, b[k], av[k], o);                                                  \
                }                                                                                      \
            }                                                                                          \
        }                                                                                              \
        if (y) {   /* forward: the window maxima */                                                    \
            ACC mx[2 * (LANES)];                                                                       \
            memcpy(mx, b, sizeof mx);                                                                  \
            for (l = 0; l < 2 * (LANES); l++) y[(ow + l) * y_w] = pg_store_##DT(mx[l]);                \
            continue;                                                                                  \
        }                                                                                              \
        memcpy(a, av, sizeof a);                                                                       \
        for (l = 0; l < 2 * (LANES); l++)                                                              \
            if (a[l] >= 0) ring[a[l]] += pg_load_##DT(g[(ow + l) * g_w]);                              \
    }                                                                                                  \
    while (ow < ow1) {  /* the last < 2 * LANES windows, one vector at a time; lanes past ow1 repeat  \
                           the last window (same cells, nothing read outside it) and are not added */  \
        Py_ssize_t n = ow1 - ow < (LANES) ? ow1 - ow : (LANES), r, q, l;                               \
        ARGT a[LANES];                                                                                 \
        VM col, av = (VM){0};                                                                          \
        VT b = (VT){0};                                                                                \
        for (l = 0; l < (LANES); l++) a[l] = (ARGT)((ow + (l < n ? l : n - 1)) * sw - pw);             \
        memcpy(&col, a, sizeof col);                                                                   \
        for (r = 0; r < nh; r++) {                                                                     \
            const T *xr = x + (h0 + r) * x_h;                                                          \
            for (q = 0; q < kw; q++) {                                                                 \
                VT v;                                                                                  \
                VM o = col * (ARGT)cs + (ARGT)((int64_t)ro[r] + q * cs);                               \
                if (n == (LANES)) {                                                                    \
                    v = pgtf_gld_##DT##_##SFX(xr + ((ow * sw - pw) + q) * x_w, step);                  \
                } else {                                                                               \
                    RT raw = (RT){0};                                                                  \
                    for (l = 0; l < (LANES); l++) raw[l] = xr[(col[l] + q) * x_w];                     \
                    v = RCVT(raw);                                                                     \
                }                                                                                      \
                if (r == 0 && q == 0) { b = v; av = o; continue; }                                     \
                PGTF_TAKE(VM, v, b, av, o);                                                            \
            }                                                                                          \
        }                                                                                              \
        if (y) {                                                                                       \
            ACC mx[LANES];                                                                             \
            memcpy(mx, &b, sizeof mx);                                                                 \
            for (l = 0; l < n; l++) y[(ow + l) * y_w] = pg_store_##DT(mx[l]);                          \
        } else {                                                                                       \
            memcpy(a, &av, sizeof a);                                                                  \
            for (l = 0; l < n; l++)                                                                    \
                if (a[l] >= 0) ring[a[l]] += pg_load_##DT(g[(ow + l) * g_w]);                          \
        }                                                                                              \
        ow += n;                                                                                       \
    }                                                                                                  \
    return ow;                                                                                         \
}

/* Vector types and loads for S float lanes (S * 4 bytes); 16-bit types widen exactly to float32. */
#define PGTF_ISA(SFX, S)                                                                               \
typedef float pgtf_vf_##SFX __attribute__((vector_size(4 * (S))));                                     \
typedef int32_t pgtf_vi_##SFX __attribute__((vector_size(4 * (S))));                                   \
typedef uint32_t pgtf_vu_##SFX __attribute__((vector_size(4 * (S))));                                  \
typedef uint16_t pgtf_vh_##SFX __attribute__((vector_size(2 * (S))));                                  \
typedef double pgtf_vd_##SFX __attribute__((vector_size(4 * (S))));                                    \
typedef int64_t pgtf_vl_##SFX __attribute__((vector_size(4 * (S))));                                   \
static inline pgtf_vf_##SFX pgtf_ld_f32_##SFX(const float *p)                                          \
{ pgtf_vf_##SFX v; memcpy(&v, p, sizeof v); return v; }                                                \
static inline pgtf_vd_##SFX pgtf_ld_f64_##SFX(const double *p)                                         \
{ pgtf_vd_##SFX v; memcpy(&v, p, sizeof v); return v; }                                                \
static inline pgtf_vf_##SFX pgtf_cv_f32_##SFX(pgtf_vf_##SFX v) { return v; }                         \
static inline pgtf_vd_##SFX pgtf_cv_f64_##SFX(pgtf_vd_##SFX v) { return v; }                         \
static inline pgtf_vf_##SFX pgtf_cv_bf16_##SFX(pgtf_vh_##SFX h)                                      \
{                                                                                                      \
    return (pgtf_vf_##SFX)(__builtin_convertvector(h, pgtf_vu_##SFX) << 16);                           \
}                                                                                                      \
static inline pgtf_vf_##SFX pgtf_cv_f16_##SFX(pgtf_vh_##SFX h)   /* lane-wise pg_f16_to_f32 */        \
{                                                                                                      \
    pgtf_vu_##SFX u = __builtin_convertvector(h, pgtf_vu_##SFX);                                       \
    pgtf_vu_##SFX sign = (u & 0x8000u) << 16, em = u & 0x7fffu;                                        \
    pgtf_vf_##SFX mag = (pgtf_vf_##SFX)(em << 13) * 5.192296858534828e+33f;                            \
    pgtf_vu_##SFX bits = (pgtf_vu_##SFX)mag | ((pgtf_vu_##SFX)(em >= 0x7c00u) & 0x7f800000u);          \
    return (pgtf_vf_##SFX)(bits | sign);                                                               \
}                                                                                                      \
static inline pgtf_vf_##SFX pgtf_ld_bf16_##SFX(const uint16_t *p)                                      \
{                                                                                                      \
    pgtf_vh_##SFX h; memcpy(&h, p, sizeof h);                                                          \
    return pgtf_cv_bf16_##SFX(h);                                                                      \
}                                                                                                      \
static inline pgtf_vf_##SFX pgtf_ld_f16_##SFX(const uint16_t *p)                                     \
{                                                                                                      \
    pgtf_vh_##SFX h; memcpy(&h, p, sizeof h);                                                          \
    return pgtf_cv_f16_##SFX(h);                                                                       \
}                                                                                                      \
PGTF_PROW(SFX, f32, float, float, int32_t, pgtf_vf_##SFX, pgtf_vi_##SFX,                              \
          pgtf_vf_##SFX, pgtf_vi_##SFX, pgtf_cv_f32_##SFX, S)                                         \
PGTF_PROW(SFX, f16, uint16_t, float, int32_t, pgtf_vf_##SFX, pgtf_vi_##SFX,                           \
          pgtf_vh_##SFX, pgtf_vh_##SFX, pgtf_cv_f16_##SFX, S)                                         \
PGTF_PROW(SFX, bf16, uint16_t, float, int32_t, pgtf_vf_##SFX, pgtf_vi_##SFX,                          \
          pgtf_vh_##SFX, pgtf_vh_##SFX, pgtf_cv_bf16_##SFX, S)                                        \
PGTF_PROW(SFX, f64, double, double, int64_t, pgtf_vd_##SFX, pgtf_vl_##SFX,                            \
          pgtf_vd_##SFX, pgtf_vl_##SFX, pgtf_cv_f64_##SFX, (S) / 2)                                   \
PGTF_ROW(SFX, f32, float, float, int32_t, pgtf_vf_##SFX, pgtf_vi_##SFX, pgtf_ld_f32_##SFX, S)        \
PGTF_ROW(SFX, f16, uint16_t, float, int32_t, pgtf_vf_##SFX, pgtf_vi_##SFX, pgtf_ld_f16_##SFX, S)     \
PGTF_ROW(SFX, bf16, uint16_t, float, int32_t, pgtf_vf_##SFX, pgtf_vi_##SFX, pgtf_ld_bf16_##SFX, S)   \
PGTF_ROW(SFX, f64, double, double, int64_t, pgtf_vd_##SFX, pgtf_vl_##SFX, pgtf_ld_f64_##SFX, (S) / 2)

/* S float lanes per variant: 16, 32 and 64 bytes */
#define PGTF_LANES_base 4
#define PGTF_LANES_avx2 8
#define PGTF_LANES_avx512 16
#define PGTF_VARIANT(SFX) PGTF_ISA(SFX, PGTF_LANES_##SFX)
#if PGTF_VEC
#define PG_ISA_GEN PGTF_VARIANT
#include "pg_isa_variants.h"
#define PGTF_IF_VEC(...) __VA_ARGS__
#else
#define PGTF_IF_VEC(...)
#endif

/* Entry points: the vector variant of ISA level isa (compilers without vector extensions: the scalar loop). */
#define PGTF_DISPATCH(DT, T, ACC)                                                                      \
static inline void pgtf_channel_row_##DT(int isa, const T *x, Py_ssize_t x_h, Py_ssize_t x_w,           \
                                         Py_ssize_t h0, Py_ssize_t nh, const int32_t *ro, Py_ssize_t C,\
                                         const int64_t *wlo, const int64_t *whi, Py_ssize_t Wo,        \
                                         const T *g, Py_ssize_t g_w, Py_ssize_t g_c,                   \
                                         pgtf_ring_##DT *ring,                                         \
                                         Py_ssize_t p0, Py_ssize_t np_, T *y, Py_ssize_t y_w,          \
                                         Py_ssize_t y_c, Py_ssize_t ow_a, Py_ssize_t ow_b,             \
                                         Py_ssize_t sw, Py_ssize_t kw, Py_ssize_t pw)                  \
{                                                                                                      \
    PGTF_IF_VEC(PG_ISA_PICK(isa, pgtf_row_##DT, (x, x_h, x_w, h0, nh, ro, C, wlo, whi, Wo, g, g_w, g_c,  \
                                                 ring, p0, np_, y, y_w, y_c, ow_a, ow_b, sw, kw, pw)); \
                return;)                                                                               \
    (void)isa;                                                                                         \
    for (Py_ssize_t ow = 0; ow < Wo; ow++)                                                             \
        pgtf_rest_##DT(x + h0 * x_h + wlo[ow] * x_w, x_h, x_w, nh, whi[ow] - wlo[ow], ro, C, C,        \
                       g ? g + ow * g_w : g, g_c, ring ? ring + wlo[ow] * C : ring,                    \
                       y ? y + ow * y_w : y, y_c);                                                     \
}
PGTF_DISPATCH(f32, float, float)
PGTF_DISPATCH(f64, double, double)
PGTF_DISPATCH(f16, uint16_t, float)
PGTF_DISPATCH(bf16, uint16_t, float)

#define PGTF_PDISPATCH(DT, T, ACC)                                                                     \
static inline Py_ssize_t pgtf_plane_row_##DT(int isa, const T *x, Py_ssize_t x_h, Py_ssize_t x_w,      \
                                             Py_ssize_t h0, Py_ssize_t nh, const int32_t *ro,          \
                                             Py_ssize_t ow, Py_ssize_t ow1, Py_ssize_t sw,             \
                                             Py_ssize_t kw, Py_ssize_t pw, const T *g, Py_ssize_t g_w, \
                                             pgtf_ring_##DT *ring, T *y, Py_ssize_t y_w)               \
{                                                                                                      \
    PGTF_IF_VEC(return PG_ISA_PICK(isa, pgtf_prow_##DT, (x, x_h, x_w, h0, nh, ro, ow, ow1, sw, kw, pw, 1, \
                                                         g, g_w, ring, y, y_w));)                      \
    (void)isa;                                                                                         \
    return ow;                                                                                         \
}
PGTF_PDISPATCH(f32, float, float)
PGTF_PDISPATCH(f64, double, double)
PGTF_PDISPATCH(f16, uint16_t, float)
PGTF_PDISPATCH(bf16, uint16_t, float)
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

#endif
