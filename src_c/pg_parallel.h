/* OpenMP shims: the package must build and run (serially) with a compiler that has no OpenMP, so every OpenMP
 * call the Cython code makes goes through here.  Atomic adds are only used by the nondeterministic scatter
 * kernels, on the rows where two threads' windows can meet. */
#ifndef PG_PARALLEL_H
#define PG_PARALLEL_H

#ifdef _OPENMP
#include <omp.h>
#define PG_HAVE_OPENMP 1
static inline int pg_omp_max_threads(void) { return omp_get_max_threads(); }
#else
#define PG_HAVE_OPENMP 0
static inline int pg_omp_max_threads(void) { return 1; }
#endif

static inline void pg_atomic_add_f32(float *p, float v)
{
#ifdef _OPENMP
#pragma omp atomic
#endif
    *p += v;
}

static inline void pg_atomic_add_f64(double *p, double v)
{
#ifdef _OPENMP
#pragma omp atomic
#endif
    *p += v;
}

#endif
