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

/* ---- the gather gradient: disjoint, unclipped windows (k == s, no padding: tf_max_pool.py's _gather_items) ----
 * Every grad_x cell lies in at most one window, so grad_x is a gather: a cell gets its window's grad if it is the
 * window's argmax (the spec's scan and rule), else 0 - no ring, no scatter, no zeroing pass, no tiles.  The value
 * stored is the one the ring paths store for a cell that receives one term: the ring's zero plus grad in the ring
 * type, rounded as they round (pgtf_gq_*), so grad's -0 comes out +0 and a signalling NaN quiet, as there; the
 * cells of no window's argmax (and the rows and columns past the last window) get +0 bits.
 * Work: output rows m of all planes (m = plane * Ho + oh) in order; output row m writes its kh grad_x rows, the
 * plane's last one also the rows below the last window, so items of whole output rows own disjoint grad_x.
 * Vector code (kw == 2, unit W strides): a chunk of L windows loads 2L values per window row, splits them into
 * the windows' left and right cells (shuffles), keeps the running maxima and the winning cell in lanes (the
 * spec's rule, PGTF_TAKE), and writes each window row back as the selected grad values interleaved with zeros.
 * Rows of fewer than L windows: the widest chunk that fits, the last one overlapping the one before (a gather
 * writes the same values twice); rows of exactly L/2 windows: one chunk takes two output rows (x0 / x1 below). */
typedef struct {
    const char *x, *g;
    char *gx;
    Py_ssize_t C, H, W, Ho, Wo, kh, kw;
    Py_ssize_t x_n, x_c, x_h, x_w, g_n, g_c, g_h, g_w, gx_n, gx_c, gx_h, gx_w;     /* element strides */
} pgtf_gather_t;

/* Windows of one output row whose grad values are prepared at once (a stack buffer). */
#define PGTF_GSEG 64

/* q[i]: what a ring cell holding the one term g[i * g_w] stores - the ring's zero plus grad in the ring type
   (float32 / float64), or that sum rounded once as the 16-bit ring rows are (pgtf_put_*: pg_avg.h's rows). */
#define PGTF_GQ(DT, T)                                                                                 \
static inline void pgtf_gq_##DT(const T *g, Py_ssize_t g_w, Py_ssize_t n, T *q)                       \
{                                                                                                      \
    for (Py_ssize_t i = 0; i < n; i++) {                                                               \
        pgtf_ring_##DT t = 0;                                                                          \
        t += pg_load_##DT(g[i * g_w]);                                                                 \
        q[i] = t;                                                                                      \
    }                                                                                                  \
}
PGTF_GQ(f32, float)
PGTF_GQ(f64, double)
#define PGTF_GQ16(DT)                                                                                  \
static inline void pgtf_gq_##DT(const uint16_t *g, Py_ssize_t g_w, Py_ssize_t n, uint16_t *q)        \
{                                                                                                      \
    double t[PGTF_GSEG];                                                                               \
    for (Py_ssize_t i = 0; i < n; i++) {                                                               \
        t[i] = 0;                                                                                      \
        t[i] += pg_load_##DT(g[i * g_w]);                                                              \
    }                                                                                                  \
    pg_f64_to_##DT##_row(q, t, n);                                                                     \
}
PGTF_GQ16(f16)
PGTF_GQ16(bf16)

/* One window (any size and strides), scalar: the spec's scan, then its kh x kw cells written (qv at the
   argmax, 0 elsewhere); and rows x cols zeros (a single column by element: a memset call costs more). */
#define PGTF_GWIN(DT, T, ACC)                                                                          \
static inline void pgtf_gwin_##DT(const T *xw, Py_ssize_t x_h, Py_ssize_t x_w, Py_ssize_t kh,          \
                                  Py_ssize_t kw, T qv, T *yw, Py_ssize_t y_h, Py_ssize_t y_w)          \
{                                                                                                      \
    ACC b = pg_load_##DT(xw[0]);                                                                       \
    Py_ssize_t a = 0, r, c;                                                                            \
    for (r = 0; r < kh; r++)                                                                           \
        for (c = (r == 0); c < kw; c++) {                                                              \
            ACC v = pg_load_##DT(xw[r * x_h + c * x_w]);                                               \
            if ((v > b) | (v != v)) { b = v; a = r * kw + c; }                                         \
        }                                                                                              \
    for (r = 0; r < kh; r++)                                                                           \
        for (c = 0; c < kw; c++) yw[r * y_h + c * y_w] = r * kw + c == a ? qv : (T)0;                  \
}                                                                                                      \
static inline void pgtf_gzero_##DT(T *y, Py_ssize_t rows, Py_ssize_t cols, Py_ssize_t y_h,             \
                                   Py_ssize_t y_w)                                                     \
{                                                                                                      \
    for (Py_ssize_t r = 0; r < rows; r++) {                                                            \
        if (cols == 1)                                                                                 \
            y[r * y_h] = 0;                                                                            \
        else if (y_w == 1)                                                                             \
            memset(y + r * y_h, 0, (size_t)cols * sizeof(T));                                          \
        else                                                                                           \
            for (Py_ssize_t c = 0; c < cols; c++) y[r * y_h + c * y_w] = 0;                            \
    }                                                                                                  \
}
PGTF_GWIN(f32, float, float)
PGTF_GWIN(f64, double, double)
PGTF_GWIN(f16, uint16_t, float)
PGTF_GWIN(bf16, uint16_t, float)

/* Output rows [m0, m1) of the gather gradient (see above), one instruction-set variant SFX.  GV: the variant's
   vector windows (PGTF_GV_ON: pgtf_gvec_*, below) or none (PGTF_GV_OFF, MAXW 0); W3 the narrowest chunk; RAWQ:
   the chunks read grad itself and add the ring's zero (float32 / float64; the 16-bit types' grad values are
   rounded into q first).  The output row pointers advance by a row, multiplications only at a plane change. */
#define PGTF_GV_ON(DT, SFX, ...) pgtf_gvec_##DT##_##SFX(__VA_ARGS__)
#define PGTF_GV_OFF(DT, SFX, ...) ((Py_ssize_t)0)
#define PGTF_GROWS(SFX, DT, T, W3, MAXW, RAWQ, GV)                                                     \
static void pgtf_grows_##DT##_##SFX(const pgtf_gather_t *s, Py_ssize_t m0, Py_ssize_t m1)              \
{                                                                                                      \
    const Py_ssize_t C = s->C, Ho = s->Ho, Wo = s->Wo, kh = s->kh, kw = s->kw;                         \
    const Py_ssize_t x_h = s->x_h, x_w = s->x_w, g_h = s->g_h, g_w = s->g_w, y_h = s->gx_h,           \
                     y_w = s->gx_w;                                                                    \
    const Py_ssize_t tail_w = s->W - Wo * kw, tail_h = s->H - Ho * kh, xs = kh * x_h, ys = kh * y_h;   \
    const int vec = (MAXW) > 0 && x_w == 1 && g_w == 1 && y_w == 1 && kw == 2;                         \
    const int two = vec && 2 * Wo >= (W3) && 2 * Wo <= (MAXW) && ((2 * Wo) & (2 * Wo - 1)) == 0;      \
    T q[2 * PGTF_GSEG];                                                                                \
    Py_ssize_t u = m0 / Ho, oh = m0 - u * Ho, n = u / C, c = u - n * C, m = m0;                        \
    const T *xp = (const T *)s->x + n * s->x_n + c * s->x_c;                                           \
    const T *gp = (const T *)s->g + n * s->g_n + c * s->g_c;                                           \
    T *yp = (T *)s->gx + n * s->gx_n + c * s->gx_c;                                                    \
    const T *xa = xp + oh * xs, *ga = gp + oh * g_h;                                                   \
    T *ya = yp + oh * ys;                                                                              \
    while (m < m1) {                                                                                   \
        int rows = 1;                                                                                  \
        if (two && m + 1 < m1) {                                                                       \
            /* this output row and the next (of this plane, or the first of the next one) */          \
            const T *xb, *gb, *qa = q;                                                                 \
            T *yb;                                                                                     \
            if (oh + 1 < Ho) {                                                                         \
                xb = xa + xs;                                                                          \
                gb = ga + g_h;                                                                         \
                yb = ya + ys;                                                                          \
            } else {                                                                                   \
                Py_ssize_t c1 = c + 1, n1 = n;                                                         \
                if (c1 == C) { c1 = 0; n1++; }                                                         \
                xb = (const T *)s->x + n1 * s->x_n + c1 * s->x_c;                                      \
                gb = (const T *)s->g + n1 * s->g_n + c1 * s->g_c;                                      \
                yb = (T *)s->gx + n1 * s->gx_n + c1 * s->gx_c;                                         \
            }                                                                                          \
            if (RAWQ && gb == ga + Wo) {                                                               \
                qa = ga;                                                                               \
            } else {                                                                                   \
                pgtf_gq_##DT(ga, 1, Wo, q);                                                            \
                pgtf_gq_##DT(gb, 1, Wo, q + Wo);                                                       \
            }                                                                                          \
            GV(DT, SFX, xa, xb, ya, yb, qa, Wo, x_h, kh, y_h);                                         \
            if (tail_w) pgtf_gzero_##DT(yb + Wo * kw, kh, tail_w, y_h, 1);                             \
            rows = 2;                                                                                  \
        } else {                                                                                       \
            for (Py_ssize_t o0 = 0; o0 < Wo; o0 += PGTF_GSEG) {                                        \
                Py_ssize_t k = Wo - o0 < PGTF_GSEG ? Wo - o0 : PGTF_GSEG, ow = 0;                      \
                const T *qa = q;                                                                       \
                if (RAWQ && vec)                                                                       \
                    qa = ga + o0;                                                                      \
                else                                                                                   \
                    pgtf_gq_##DT(ga + o0 * g_w, g_w, k, q);                                            \
                if (vec) ow = GV(DT, SFX, xa + 2 * o0, NULL, ya + 2 * o0, NULL, qa, k, x_h, kh, y_h);  \
                for (; ow < k; ow++) {                                                                 \
                    T qv = qa[ow];                                                                     \
                    if (RAWQ && vec) pgtf_gq_##DT(qa + ow, 1, 1, &qv);                                 \
                    pgtf_gwin_##DT(xa + (o0 + ow) * kw * x_w, x_h, x_w, kh, kw, qv,                    \
                                   ya + (o0 + ow) * kw * y_w, y_h, y_w);                               \
                }                                                                                      \
            }                                                                                          \
        }                                                                                              \
        if (tail_w) pgtf_gzero_##DT(ya + Wo * kw * y_w, kh, tail_w, y_h, y_w);                         \
        for (int r2 = 0; r2 < rows; r2++) {   /* the next output row (and plane) */                     \
            if (++oh < Ho) {                                                                           \
                xa += xs;                                                                              \
                ga += g_h;                                                                             \
                ya += ys;                                                                              \
                continue;                                                                              \
            }                                                                                          \
            if (tail_h) pgtf_gzero_##DT(yp + Ho * ys, tail_h, s->W, y_h, y_w);                         \
            oh = 0;                                                                                    \
            if (++c == C) { c = 0; n++; }                                                              \
            xa = xp = (const T *)s->x + n * s->x_n + c * s->x_c;                                       \
            ga = gp = (const T *)s->g + n * s->g_n + c * s->g_c;                                       \
            ya = yp = (T *)s->gx + n * s->gx_n + c * s->gx_c;                                          \
        }                                                                                              \
        m += rows;                                                                                     \
    }                                                                                                  \
}

#if PGTF_VEC
/* Vector types by lane count: float / int32 / uint32 / uint16 / int16 lanes (float-compared dtypes) and
   double / int64 / uint64 lanes (float64). */
#define PGTF_GT32(L)                                                                                   \
typedef float pgtf_gf##L __attribute__((vector_size(4 * (L))));                                       \
typedef int32_t pgtf_gi##L __attribute__((vector_size(4 * (L))));                                     \
typedef uint32_t pgtf_gu##L __attribute__((vector_size(4 * (L))));                                    \
typedef uint16_t pgtf_gh##L __attribute__((vector_size(2 * (L))));                                    \
typedef int16_t pgtf_gs##L __attribute__((vector_size(2 * (L))));
PGTF_GT32(4)
PGTF_GT32(8)
PGTF_GT32(16)
#define PGTF_GT64(L)                                                                                   \
typedef double pgtf_gd##L __attribute__((vector_size(8 * (L))));                                      \
typedef int64_t pgtf_gl##L __attribute__((vector_size(8 * (L))));                                     \
typedef uint64_t pgtf_gq##L __attribute__((vector_size(8 * (L))));
PGTF_GT64(2)
PGTF_GT64(4)
PGTF_GT64(8)

/* D = lanes EXPR(l) of the 2N lanes of A then B (constant selectors: one permute) */
#if PGTF_HAVE_SHUFFLE
#define PGTF_GSHUF(D, A, B, MT, N, EXPR)                                                               \
    do {                                                                                               \
        MT m_;                                                                                         \
        for (int l = 0; l < (N); l++) m_[l] = (EXPR);                                                  \
        (D) = __builtin_shuffle((A), (B), m_);                                                         \
    } while (0)
#else
#define PGTF_GSHUF(D, A, B, MT, N, EXPR)                                                               \
    do {                                                                                               \
        __typeof__(D) d_;                                                                              \
        for (int l = 0; l < (N); l++) {                                                                \
            int i_ = (EXPR);                                                                           \
            d_[l] = i_ < (N) ? (A)[i_] : (B)[i_ - (N)];                                                \
        }                                                                                              \
        (D) = d_;                                                                                      \
    } while (0)
#endif

/* storage lanes -> compare lanes (exact: pg_dtype.h's widenings, lane-wise) */
#define PGTF_GCV_F32(H, L) (H)
#define PGTF_GCV_F64(H, L) (H)
#define PGTF_GCV_BF16(H, L) ((pgtf_gf##L)(__builtin_convertvector((H), pgtf_gu##L) << 16))
#define PGTF_GCV_F16(H, L)                                                                             \
    __extension__({                                                                                    \
        pgtf_gu##L u_ = __builtin_convertvector((H), pgtf_gu##L), em_ = u_ & 0x7fffu;                  \
        pgtf_gu##L b_ = (pgtf_gu##L)((pgtf_gf##L)(em_ << 13) * 5.192296858534828e+33f)                 \
                        | ((pgtf_gu##L)(em_ >= 0x7c00u) & 0x7f800000u);                                \
        (pgtf_gf##L)(b_ | ((u_ & 0x8000u) << 16));                                                     \
    })
/* a compare-lane mask -> a storage-lane mask */
#define PGTF_GMK_32(M, L) ((pgtf_gu##L)(M))
#define PGTF_GMK_64(M, L) ((pgtf_gq##L)(M))
#define PGTF_GMK_16(M, L) ((pgtf_gh##L)__builtin_convertvector((M), pgtf_gs##L))
/* the stored grad values of L windows (QV, storage bits) from Q: grad plus the ring's zero (float32 / float64,
   whose Q is grad itself or values that already hold it: adding zero again changes no bits) or Q's bits as
   they are (16-bit: rounded by pgtf_gq_*) */
#define PGTF_GQV_ADD(VT, QV, Q)                                                                        \
    do {                                                                                               \
        VT t_;                                                                                         \
        memcpy(&t_, (Q), sizeof t_);                                                                   \
        t_ = (VT){0} + t_;                                                                             \
        memcpy(&(QV), &t_, sizeof t_);                                                                 \
    } while (0)
#define PGTF_GQV_BITS(VT, QV, Q) memcpy(&(QV), (Q), sizeof(QV))

/* L windows: l < L/2 from the 2 * (L/2) values at x0 (each window row r at x0 + r * x_h), l >= L/2 from those
   at x1; grad values from q[0..L) (QVF); written to y0 / y1 (row r at + r * y_h) in the same layout.  Type
   families (the lane count L pasted on): VT compare values, VM their masks and winning cells, RT / IT storage
   lanes and their shuffle selectors, UT / UI storage bits and theirs. */
#define PGTF_GCHUNK(SFX, DT, T, VT, VM, ARGT, RT, IT, UT, UI, RCVT, MCVT, QVF, L)                      \
static inline void pgtf_gch_##DT##_##SFX##_##L(const T *x0, const T *x1, Py_ssize_t x_h, Py_ssize_t kh, \
                                               const T *q, T *y0, T *y1, Py_ssize_t y_h)               \
{                                                                                                      \
    VT##L b = (VT##L){0}, v;                                                                           \
    VM##L a = (VM##L){0};                                                                              \
    RT##L lo, hi, e, o;                                                                                \
    UT##L qv, ev, ov, w0, w1;                                                                          \
    Py_ssize_t r;                                                                                      \
    for (r = 0; r < kh; r++) {                                                                         \
        VM##L at0 = (VM##L){0} + (ARGT)(2 * r), at1 = (VM##L){0} + (ARGT)(2 * r + 1);                  \
        memcpy(&lo, x0 + r * x_h, sizeof lo);                                                          \
        memcpy(&hi, x1 + r * x_h, sizeof hi);                                                          \
        PGTF_GSHUF(e, lo, hi, IT##L, L, 2 * l);                                                        \
        PGTF_GSHUF(o, lo, hi, IT##L, L, 2 * l + 1);                                                    \
        v = RCVT(e, L);                                                                                \
        if (r == 0)                                                                                    \
            b = v;                                                                                     \
        else                                                                                           \
            PGTF_TAKE(VM##L, v, b, a, at0);                                                            \
        v = RCVT(o, L);                                                                                \
        PGTF_TAKE(VM##L, v, b, a, at1);                                                                \
    }                                                                                                  \
    QVF(RT##L, qv, q);                                                                                 \
    for (r = 0; r < kh; r++) {                                                                         \
        ev = qv & MCVT(a == (VM##L){0} + (ARGT)(2 * r), L);                                            \
        ov = qv & MCVT(a == (VM##L){0} + (ARGT)(2 * r + 1), L);                                        \
        PGTF_GSHUF(w0, ev, ov, UI##L, L, (l & 1) ? (L) + l / 2 : l / 2);                               \
        PGTF_GSHUF(w1, ev, ov, UI##L, L, (l & 1) ? (L) + (L) / 2 + l / 2 : (L) / 2 + l / 2);           \
        memcpy(y0 + r * y_h, &w0, sizeof w0);                                                          \
        memcpy(y1 + r * y_h, &w1, sizeof w1);                                                          \
    }                                                                                                  \
}
#define PGTF_GCHUNKS(SFX, DT, T, VT, VM, ARGT, RT, IT, UT, UI, RCVT, MCVT, QVF, W1, W2, W3)            \
PGTF_GCHUNK(SFX, DT, T, VT, VM, ARGT, RT, IT, UT, UI, RCVT, MCVT, QVF, W1)                             \
PGTF_GCHUNK(SFX, DT, T, VT, VM, ARGT, RT, IT, UT, UI, RCVT, MCVT, QVF, W2)                             \
PGTF_GCHUNK(SFX, DT, T, VT, VM, ARGT, RT, IT, UT, UI, RCVT, MCVT, QVF, W3)

/* The windows of one output row (xb NULL: n windows at xa, ya; returns how many it did, all unless n < W3) or
   of two (xb, yb: the second row; 2n must be a chunk width; returns n, or 0 where none is).  Chunk widths
   W1 > W2 > W3, those above MAXW (this level's vector) unused. */
#define PGTF_GCH(DT, SFX, L, O)                                                                        \
    pgtf_gch_##DT##_##SFX##_##L(xa + 2 * (O), xa + 2 * (O) + (L), x_h, kh, q + (O), ya + 2 * (O),      \
                                ya + 2 * (O) + (L), y_h)
#define PGTF_GVEC(SFX, DT, T, W1, W2, W3, MAXW)                                                        \
static inline Py_ssize_t pgtf_gvec_##DT##_##SFX(const T *xa, const T *xb, T *ya, T *yb, const T *q,    \
                                                Py_ssize_t n, Py_ssize_t x_h, Py_ssize_t kh,           \
                                                Py_ssize_t y_h)                                        \
{                                                                                                      \
    Py_ssize_t ow = 0;                                                                                 \
    if (xb) {                                                                                          \
        if ((W1) <= (MAXW) && 2 * n == (W1))                                                           \
            pgtf_gch_##DT##_##SFX##_##W1(xa, xb, x_h, kh, q, ya, yb, y_h);                             \
        else if ((W2) <= (MAXW) && 2 * n == (W2))                                                      \
            pgtf_gch_##DT##_##SFX##_##W2(xa, xb, x_h, kh, q, ya, yb, y_h);                             \
        else if (2 * n == (W3))                                                                        \
            pgtf_gch_##DT##_##SFX##_##W3(xa, xb, x_h, kh, q, ya, yb, y_h);                             \
        else                                                                                           \
            return 0;                                                                                  \
        return n;                                                                                      \
    }                                                                                                  \
    if ((W1) <= (MAXW))                                                                                \
        for (; ow + (W1) <= n; ow += (W1)) PGTF_GCH(DT, SFX, W1, ow);                                  \
    if ((W2) <= (MAXW))                                                                                \
        for (; ow + (W2) <= n; ow += (W2)) PGTF_GCH(DT, SFX, W2, ow);                                  \
    for (; ow + (W3) <= n; ow += (W3)) PGTF_GCH(DT, SFX, W3, ow);                                      \
    if (ow < n && n >= (W3)) {     /* the last few windows: a chunk overlapping the previous one */    \
        PGTF_GCH(DT, SFX, W3, n - (W3));                                                               \
        ow = n;                                                                                        \
    }                                                                                                  \
    return ow;                                                                                         \
}

#define PGTF_GVARIANT(SFX, S)                                                                          \
PGTF_GCHUNKS(SFX, f32, float, pgtf_gf, pgtf_gi, int32_t, pgtf_gf, pgtf_gi, pgtf_gu, pgtf_gi,           \
             PGTF_GCV_F32, PGTF_GMK_32, PGTF_GQV_ADD, 16, 8, 4)                                         \
PGTF_GCHUNKS(SFX, f16, uint16_t, pgtf_gf, pgtf_gi, int32_t, pgtf_gh, pgtf_gs, pgtf_gh, pgtf_gs,        \
             PGTF_GCV_F16, PGTF_GMK_16, PGTF_GQV_BITS, 16, 8, 4)                                       \
PGTF_GCHUNKS(SFX, bf16, uint16_t, pgtf_gf, pgtf_gi, int32_t, pgtf_gh, pgtf_gs, pgtf_gh, pgtf_gs,       \
             PGTF_GCV_BF16, PGTF_GMK_16, PGTF_GQV_BITS, 16, 8, 4)                                      \
PGTF_GCHUNKS(SFX, f64, double, pgtf_gd, pgtf_gl, int64_t, pgtf_gd, pgtf_gl, pgtf_gq, pgtf_gl,          \
             PGTF_GCV_F64, PGTF_GMK_64, PGTF_GQV_ADD, 8, 4, 2)                                          \
PGTF_GVEC(SFX, f32, float, 16, 8, 4, S)                                                                \
PGTF_GVEC(SFX, f16, uint16_t, 16, 8, 4, S)                                                             \
PGTF_GVEC(SFX, bf16, uint16_t, 16, 8, 4, S)                                                            \
PGTF_GVEC(SFX, f64, double, 8, 4, 2, (S) / 2)                                                          \
PGTF_GROWS(SFX, f32, float, 4, S, 1, PGTF_GV_ON)                                                       \
PGTF_GROWS(SFX, f16, uint16_t, 4, S, 0, PGTF_GV_ON)                                                    \
PGTF_GROWS(SFX, bf16, uint16_t, 4, S, 0, PGTF_GV_ON)                                                   \
PGTF_GROWS(SFX, f64, double, 2, (S) / 2, 1, PGTF_GV_ON)
#define PGTF_GVARIANT_LEVEL(SFX) PGTF_GVARIANT(SFX, PGTF_LANES_##SFX)
#define PG_ISA_GEN PGTF_GVARIANT_LEVEL
#include "pg_isa_variants.h"
#define PGTF_GATHER(DT)                                                                                \
static inline void pgtf_gather_##DT(int isa, const pgtf_gather_t *s, Py_ssize_t m0, Py_ssize_t m1)     \
{ PG_ISA_PICK(isa, pgtf_grows_##DT, (s, m0, m1)); }
#else
#define PGTF_GATHER(DT)                                                                                \
PGTF_GROWS(scalar, DT, PGTF_GT_##DT, 1, 0, 0, PGTF_GV_OFF)                                             \
static inline void pgtf_gather_##DT(int isa, const pgtf_gather_t *s, Py_ssize_t m0, Py_ssize_t m1)     \
{ (void)isa; pgtf_grows_##DT##_scalar(s, m0, m1); }
#define PGTF_GT_f32 float
#define PGTF_GT_f64 double
#define PGTF_GT_f16 uint16_t
#define PGTF_GT_bf16 uint16_t
#endif
/* Output rows [m0, m1) of the gather gradient at ISA level isa (any strides). */
PGTF_GATHER(f32)
PGTF_GATHER(f64)
PGTF_GATHER(f16)
PGTF_GATHER(bf16)

/* ---- the tiled forward: disjoint, unclipped windows (k == s, no padding: tf_max_pool.py's _tile_items) ----
 * The forward of the gather gradient's case, with the same work split: output rows m of all planes (m = plane *
 * Ho + oh) in order, each reading its own kh input rows - no tiles, no copies, no per-plane call.  Vector code
 * (kw == 2, unit W strides): a chunk of L windows loads 2L values per window row, splits them into the windows'
 * left and right cells (the gather's shuffles) and keeps the running maxima in lanes, scanning the cells in the
 * spec's row-major order with its rule (a cell replaces the maximum if greater or NaN, PGTF_FMAX), then stores
 * each window's maximum as every other path does (pg_store_*: a 16-bit signalling NaN comes out quiet).  Rows of
 * fewer than L windows: the widest chunk that fits, the last one overlapping the one before (it writes the same
 * values again); rows of exactly L/2 windows: one chunk takes two output rows (x0 / x1). */
#define PGTF_FWIN(DT, T, ACC)                                                                          \
static inline T pgtf_fwin_##DT(const T *xw, Py_ssize_t x_h, Py_ssize_t x_w, Py_ssize_t kh,             \
                               Py_ssize_t kw)                                                          \
{   /* one window (any size and strides), scalar */                                                   \
    ACC b = pg_load_##DT(xw[0]);                                                                       \
    for (Py_ssize_t r = 0; r < kh; r++)                                                                \
        for (Py_ssize_t c = (r == 0); c < kw; c++) {                                                   \
            ACC v = pg_load_##DT(xw[r * x_h + c * x_w]);                                               \
            if ((v > b) | (v != v)) b = v;                                                             \
        }                                                                                              \
    return pg_store_##DT(b);                                                                           \
}
PGTF_FWIN(f32, float, float)
PGTF_FWIN(f64, double, double)
PGTF_FWIN(f16, uint16_t, float)
PGTF_FWIN(bf16, uint16_t, float)

/* Output rows [m0, m1) of the tiled forward (see above), one instruction-set variant SFX; FV: the variant's
   vector windows (PGTF_FV_ON: pgtf_fvec_*, below) or none (PGTF_FV_OFF, MAXW 0); W3 the narrowest chunk.
   s->g and the grad strides are unused; s->gx is the output. */
#define PGTF_FV_ON(DT, SFX, ...) pgtf_fvec_##DT##_##SFX(__VA_ARGS__)
#define PGTF_FV_OFF(DT, SFX, ...) ((Py_ssize_t)0)
#define PGTF_FROWS(SFX, DT, T, W3, MAXW, FV)                                                           \
static void pgtf_frows_##DT##_##SFX(const pgtf_gather_t *s, Py_ssize_t m0, Py_ssize_t m1)              \
{                                                                                                      \
    const Py_ssize_t C = s->C, Ho = s->Ho, Wo = s->Wo, kh = s->kh, kw = s->kw;                         \
    const Py_ssize_t x_h = s->x_h, x_w = s->x_w, y_h = s->gx_h, y_w = s->gx_w, xs = kh * x_h;         \
    const int vec = (MAXW) > 0 && x_w == 1 && y_w == 1 && kw == 2;                                     \
    const int two = vec && 2 * Wo >= (W3) && 2 * Wo <= (MAXW) && ((2 * Wo) & (2 * Wo - 1)) == 0;      \
    Py_ssize_t u = m0 / Ho, oh = m0 - u * Ho, n = u / C, c = u - n * C, m = m0;                        \
    const T *xa = (const T *)s->x + n * s->x_n + c * s->x_c + oh * xs;                                 \
    T *ya = (T *)s->gx + n * s->gx_n + c * s->gx_c + oh * y_h;                                         \
    while (m < m1) {                                                                                   \
        int rows = 1;                                                                                  \
        if (two && m + 1 < m1) {                                                                       \
            /* this output row and the next (of this plane, or the first of the next one) */          \
            const T *xb;                                                                               \
            T *yb;                                                                                     \
            if (oh + 1 < Ho) {                                                                         \
                xb = xa + xs;                                                                          \
                yb = ya + y_h;                                                                         \
            } else {                                                                                   \
                Py_ssize_t c1 = c + 1, n1 = n;                                                         \
                if (c1 == C) { c1 = 0; n1++; }                                                         \
                xb = (const T *)s->x + n1 * s->x_n + c1 * s->x_c;                                      \
                yb = (T *)s->gx + n1 * s->gx_n + c1 * s->gx_c;                                         \
            }                                                                                          \
            if (kh == 2)   /* the common k2s2: a constant window height (unrolled rows) */            \
                FV(DT, SFX, xa, xb, ya, yb, Wo, x_h, 2);                                               \
            else                                                                                       \
                FV(DT, SFX, xa, xb, ya, yb, Wo, x_h, kh);                                              \
            rows = 2;                                                                                  \
        } else {                                                                                       \
            Py_ssize_t ow = 0;                                                                         \
            if (vec && kh == 2)                                                                        \
                ow = FV(DT, SFX, xa, NULL, ya, NULL, Wo, x_h, 2);                                      \
            else if (vec)                                                                              \
                ow = FV(DT, SFX, xa, NULL, ya, NULL, Wo, x_h, kh);                                     \
            for (; ow < Wo; ow++) ya[ow * y_w] = pgtf_fwin_##DT(xa + ow * kw * x_w, x_h, x_w, kh, kw); \
        }                                                                                              \
        for (int r2 = 0; r2 < rows; r2++) {   /* the next output row (and plane) */                     \
            if (++oh < Ho) {                                                                           \
                xa += xs;                                                                              \
                ya += y_h;                                                                             \
                continue;                                                                              \
            }                                                                                          \
            oh = 0;                                                                                    \
            if (++c == C) { c = 0; n++; }                                                              \
            xa = (const T *)s->x + n * s->x_n + c * s->x_c;                                            \
            ya = (T *)s->gx + n * s->gx_n + c * s->gx_c;                                               \
        }                                                                                              \
        m += rows;                                                                                     \
    }                                                                                                  \
}

#if PGTF_VEC
/* B takes V where V is greater or NaN (lane-wise, branch-free; VM: the integer lanes of B's width); M: the
   lanes that took it */
#define PGTF_FMAXM(VM, V, B, M)                                                                        \
    do {                                                                                               \
        (M) = (VM)(((V) > (B)) | ((V) != (V)));                                                        \
        (B) = (__typeof__(B))(((VM)(V) & (M)) | ((VM)(B) & ~(M)));                                     \
    } while (0)
/* L windows: l < L/2 from the 2 * (L/2) values at x0 (window row r at x0 + r * x_h), l >= L/2 from those at
   x1; maxima l < L/2 to y0[l], the others to y1[l - L/2].  VT compare lanes, VM their integer lanes, RT / IT
   storage lanes and their integer lanes (also the shuffle selectors), RCVT storage -> compare lanes (exact),
   MCVT a VM mask -> an IT mask, ACC the compare type.  The 16-bit types (sizeof(T) < sizeof(ACC)) select the
   winners' storage bits alongside (bs) and store those with the quiet bit set on NaNs (NANX: the exponent
   mask, QBIT: the quiet bit): what pg_store_* gives for a widened 16-bit value, without a narrowing per lane. */
#define PGTF_FCHUNK(SFX, DT, T, ACC, VT, VM, RT, IT, RCVT, MCVT, NANX, QBIT, L)                        \
PG_INLINE void pgtf_fch_##DT##_##SFX##_##L(const T *x0, const T *x1, Py_ssize_t x_h, Py_ssize_t kh,    \
                                           T *y0, T *y1)                                               \
{                                                                                                      \
    VT##L b = (VT##L){0}, v;                                                                           \
    IT##L bs = (IT##L){0}, u;                                                                          \
    RT##L lo, hi, e, o;                                                                                \
    VM##L m;                                                                                           \
    Py_ssize_t r;                                                                                      \
    for (r = 0; r < kh; r++) {                                                                         \
        memcpy(&lo, x0 + r * x_h, sizeof lo);                                                          \
        memcpy(&hi, x1 + r * x_h, sizeof hi);                                                          \
        PGTF_GSHUF(e, lo, hi, IT##L, L, 2 * l);                                                        \
        PGTF_GSHUF(o, lo, hi, IT##L, L, 2 * l + 1);                                                    \
        v = RCVT(e, L);                                                                                \
        if (r == 0) {                                                                                  \
            b = v;                                                                                     \
            bs = (IT##L)e;                                                                             \
        } else {                                                                                       \
            PGTF_FMAXM(VM##L, v, b, m);                                                                \
            u = MCVT(m, L);                                                                            \
            bs = ((IT##L)e & u) | (bs & ~u);                                                           \
        }                                                                                              \
        v = RCVT(o, L);                                                                                \
        PGTF_FMAXM(VM##L, v, b, m);                                                                    \
        u = MCVT(m, L);                                                                                \
        bs = ((IT##L)o & u) | (bs & ~u);                                                               \
    }                                                                                                  \
    if (sizeof(T) == sizeof(ACC)) {   /* float32 / float64: pg_store_* is the identity */              \
        memcpy(y0, &b, (L) / 2 * sizeof(T));                                                           \
        memcpy(y1, (const char *)&b + (L) / 2 * sizeof(T), (L) / 2 * sizeof(T));                      \
        return;                                                                                        \
    }                                                                                                  \
    bs |= ((bs & 0x7fff) > (NANX)) & (QBIT);                                                           \
    memcpy(y0, &bs, (L) / 2 * sizeof(T));                                                              \
    memcpy(y1, (const char *)&bs + (L) / 2 * sizeof(T), (L) / 2 * sizeof(T));                         \
}
#define PGTF_FCHUNKS(SFX, DT, T, ACC, VT, VM, RT, IT, RCVT, MCVT, NANX, QBIT, W1, W2, W3)              \
PGTF_FCHUNK(SFX, DT, T, ACC, VT, VM, RT, IT, RCVT, MCVT, NANX, QBIT, W1)                               \
PGTF_FCHUNK(SFX, DT, T, ACC, VT, VM, RT, IT, RCVT, MCVT, NANX, QBIT, W2)                               \
PGTF_FCHUNK(SFX, DT, T, ACC, VT, VM, RT, IT, RCVT, MCVT, NANX, QBIT, W3)
#define PGTF_FMK_SAME(M, L) (M)
#define PGTF_FMK_16(M, L) __builtin_convertvector((M), pgtf_gs##L)

/* The windows of one output row (xb NULL: n windows at xa, ya; returns how many it did, all unless n < W3) or
   of two (xb, yb: the second row; 2n must be a chunk width; returns n, or 0 where none is).  Chunk widths
   W1 > W2 > W3, those above MAXW (this level's vector) unused.  Forced inline (as the chunks): each call site
   then has its own constants (xb NULL or not, kh == 2), and a call per output row pair cost more than the
   chunk itself on 8x8 planes (perf: the call and its vzeroupper were a third of the row loop's time). */
#define PGTF_FCH(DT, SFX, L, O)                                                                        \
    pgtf_fch_##DT##_##SFX##_##L(xa + 2 * (O), xa + 2 * (O) + (L), x_h, kh, ya + (O), ya + (O) + (L) / 2)
#define PGTF_FVEC(SFX, DT, T, W1, W2, W3, MAXW)                                                        \
PG_INLINE Py_ssize_t pgtf_fvec_##DT##_##SFX(const T *xa, const T *xb, T *ya, T *yb, Py_ssize_t n,     \
                                            Py_ssize_t x_h, Py_ssize_t kh)                             \
{                                                                                                      \
    Py_ssize_t ow = 0;                                                                                 \
    if (xb) {                                                                                          \
        if ((W1) <= (MAXW) && 2 * n == (W1))                                                           \
            pgtf_fch_##DT##_##SFX##_##W1(xa, xb, x_h, kh, ya, yb);                                     \
        else if ((W2) <= (MAXW) && 2 * n == (W2))                                                      \
            pgtf_fch_##DT##_##SFX##_##W2(xa, xb, x_h, kh, ya, yb);                                     \
        else if (2 * n == (W3))                                                                        \
            pgtf_fch_##DT##_##SFX##_##W3(xa, xb, x_h, kh, ya, yb);                                     \
        else                                                                                           \
            return 0;                                                                                  \
        return n;                                                                                      \
    }                                                                                                  \
    if ((W1) <= (MAXW))                                                                                \
        for (; ow + (W1) <= n; ow += (W1)) PGTF_FCH(DT, SFX, W1, ow);                                  \
    if ((W2) <= (MAXW))                                                                                \
        for (; ow + (W2) <= n; ow += (W2)) PGTF_FCH(DT, SFX, W2, ow);                                  \
    for (; ow + (W3) <= n; ow += (W3)) PGTF_FCH(DT, SFX, W3, ow);                                      \
    if (ow < n && n >= (W3)) {     /* the last few windows: a chunk overlapping the previous one */    \
        PGTF_FCH(DT, SFX, W3, n - (W3));                                                               \
        ow = n;                                                                                        \
    }                                                                                                  \
    return ow;                                                                                         \
}
#define PGTF_FVARIANT(SFX, S)                                                                          \
PGTF_FCHUNKS(SFX, f32, float, float, pgtf_gf, pgtf_gi, pgtf_gf, pgtf_gi, PGTF_GCV_F32, PGTF_FMK_SAME,  \
             0, 0, 16, 8, 4)                                                                           \
PGTF_FCHUNKS(SFX, f16, uint16_t, float, pgtf_gf, pgtf_gi, pgtf_gh, pgtf_gs, PGTF_GCV_F16, PGTF_FMK_16,  \
             0x7c00, 0x0200, 16, 8, 4)                                                                 \
PGTF_FCHUNKS(SFX, bf16, uint16_t, float, pgtf_gf, pgtf_gi, pgtf_gh, pgtf_gs, PGTF_GCV_BF16, PGTF_FMK_16,\
             0x7f80, 0x0040, 16, 8, 4)                                                                 \
PGTF_FCHUNKS(SFX, f64, double, double, pgtf_gd, pgtf_gl, pgtf_gd, pgtf_gl, PGTF_GCV_F64, PGTF_FMK_SAME, \
             0, 0, 8, 4, 2)                                                                            \
PGTF_FVEC(SFX, f32, float, 16, 8, 4, S)                                                                \
PGTF_FVEC(SFX, f16, uint16_t, 16, 8, 4, S)                                                             \
PGTF_FVEC(SFX, bf16, uint16_t, 16, 8, 4, S)                                                            \
PGTF_FVEC(SFX, f64, double, 8, 4, 2, (S) / 2)                                                          \
PGTF_FROWS(SFX, f32, float, 4, S, PGTF_FV_ON)                                                          \
PGTF_FROWS(SFX, f16, uint16_t, 4, S, PGTF_FV_ON)                                                       \
PGTF_FROWS(SFX, bf16, uint16_t, 4, S, PGTF_FV_ON)                                                      \
PGTF_FROWS(SFX, f64, double, 2, (S) / 2, PGTF_FV_ON)
#define PGTF_FVARIANT_LEVEL(SFX) PGTF_FVARIANT(SFX, PGTF_LANES_##SFX)
#undef PG_ISA_GEN
#define PG_ISA_GEN PGTF_FVARIANT_LEVEL
#include "pg_isa_variants.h"
#define PGTF_FTILE(DT)                                                                                 \
static inline void pgtf_ftile_##DT(int isa, const pgtf_gather_t *s, Py_ssize_t m0, Py_ssize_t m1)      \
{ PG_ISA_PICK(isa, pgtf_frows_##DT, (s, m0, m1)); }
#else
#define PGTF_FTILE(DT)                                                                                 \
PGTF_FROWS(scalar, DT, PGTF_GT_##DT, 1, 0, PGTF_FV_OFF)                                                \
static inline void pgtf_ftile_##DT(int isa, const pgtf_gather_t *s, Py_ssize_t m0, Py_ssize_t m1)      \
{ (void)isa; pgtf_frows_##DT##_scalar(s, m0, m1); }
#endif
/* Output rows [m0, m1) of the tiled forward at ISA level isa (any strides). */
PGTF_FTILE(f32)
PGTF_FTILE(f64)
PGTF_FTILE(f16)
PGTF_FTILE(bf16)
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

#endif
