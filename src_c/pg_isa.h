/* The one instruction-set level of poolgrad's kernels: probe, cached level, variants and dispatch.
 *
 * Kernels that carry AVX2 / AVX-512 copies of their loops (compiled with #pragma GCC target, so a portable build
 * still uses the wide units on the CPUs that have them) pick a copy by ONE process-wide level:
 *
 *   0 portable  the build's baseline (SSE2 on x86-64, NEON on aarch64, or what -march=native allows)
 *   1 avx2      AVX2 with FMA and F16C (every CPU with AVX2 has both)
 *   2 avx512    level 1 plus AVX-512 F, VL, BW and DQ
 *
 * Every variant performs the same IEEE operations in the same order, so the level changes the speed, never the
 * bits; the tests run every kernel family at every level this CPU has and compare bits.
 *
 * Who owns the level: poolgrad._config probes the CPU once at import (pg_cpu_isa), and poolgrad.config applies
 * POOLGRAD_ISA and set_isa_level() to _config's pg_isa_cell, which it exports as a capsule.  Every other
 * extension module binds its reads to that one cell at import (pg_isa_bind), so one store changes what every
 * kernel family runs; a module that has not bound reads its own cell, which stays 0 (portable: slower, same
 * bits).  Kernels read the level with pg_isa() when they start a row or a call; a change from another thread
 * in between is harmless for the same reason.
 *
 * Needs Python.h (the capsule), which the Cython-generated C includes first. */
#ifndef PG_ISA_H
#define PG_ISA_H
#include <Python.h>

#define PG_ISA_PORTABLE 0
#define PG_ISA_AVX2 1
#define PG_ISA_AVX512 2

/* Whether the kernels' AVX2 / AVX-512 copies are compiled (GCC's target pragmas inside macros, below). */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 9
#define PG_X86_VARIANTS 1
#else
#define PG_X86_VARIANTS 0
#endif

/* The highest level this CPU (and its operating system, which must save the wide registers) runs. */
static int pg_cpu_isa(void)
{
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    __builtin_cpu_init();
    if (!(__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c")))
        return PG_ISA_PORTABLE;
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") &&
        __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq"))
        return PG_ISA_AVX512;
    return PG_ISA_AVX2;
#else
    return PG_ISA_PORTABLE;
#endif
}

/* One extension beyond the levels: AVX512-BF16's float32 -> bfloat16 conversion (the average kernels' bfloat16
 * rounding stores use it at level 2 where the CPU has it; same bits as their integer rounding). */
static int pg_cpu_has_avx512bf16(void)
{
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512bf16") ? 1 : 0;
#else
    return 0;
#endif
}

/* The level: this module's own cell until pg_isa_bind points the reads at poolgrad._config's. */
static int pg_isa_cell = PG_ISA_PORTABLE;
static int *pg_isa_ref = &pg_isa_cell;

static inline int pg_isa(void)
{
#if defined(__GNUC__) || defined(__clang__)
    return __atomic_load_n(pg_isa_ref, __ATOMIC_RELAXED);
#else
    return *(volatile int *)pg_isa_ref;
#endif
}

/* poolgrad._config only: store the level every module reads. */
static inline void pg_isa_store(int level)
{
#if defined(__GNUC__) || defined(__clang__)
    __atomic_store_n(&pg_isa_cell, level, __ATOMIC_RELAXED);
#else
    *(volatile int *)&pg_isa_cell = level;
#endif
}

#define PG_ISA_CAPSULE "poolgrad._config.isa_cell"

/* Point this module's reads at poolgrad._config's cell; 0, or -1 with a Python exception set. */
static int pg_isa_bind(void)
{
    PyObject *mod = PyImport_ImportModule("poolgrad._config");
    PyObject *cap;
    int *cell;
    if (mod == NULL) return -1;
    cap = PyObject_GetAttrString(mod, "isa_cell");
    Py_DECREF(mod);
    if (cap == NULL) return -1;
    cell = (int *)PyCapsule_GetPointer(cap, PG_ISA_CAPSULE);
    Py_DECREF(cap);            /* the module keeps the capsule, and the cell lives as long as the process */
    if (cell == NULL) return -1;
    pg_isa_ref = cell;
    return 0;
}

/* The variants themselves are stamped out by including pg_isa_variants.h with PG_ISA_GEN defined (a pragma
 * cannot be issued from inside a macro: GCC's target pragma would swallow the rest of the expansion). */

/* The call NAME_<variant> ARGS for level ISA (an expression; ARGS in parentheses).  Levels without a compiled
 * copy run the widest one below them. */
#if PG_X86_VARIANTS
#define PG_ISA_PICK(ISA, NAME, ARGS)                                                                         \
    ((ISA) >= PG_ISA_AVX512 ? NAME##_avx512 ARGS : (ISA) == PG_ISA_AVX2 ? NAME##_avx2 ARGS : NAME##_base ARGS)
#else
#define PG_ISA_PICK(ISA, NAME, ARGS) ((void)(ISA), NAME##_base ARGS)
#endif

#endif
