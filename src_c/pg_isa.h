/* Which vector variant of a kernel to run: the kernels that carry AVX2 / AVX-512 copies of their loops
 * (#pragma GCC target) pick one at import with pg_cpu_isa(), so a portable build still uses the wide units. */
#ifndef PG_ISA_H
#define PG_ISA_H

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 9
#define PG_X86_VARIANTS 1
#else
#define PG_X86_VARIANTS 0
#endif

/* 0: baseline, 1: AVX2, 2: AVX-512 (F, VL, BW, DQ); always 0 where no variants are compiled. */
static inline int pg_cpu_isa(void)
{
#if PG_X86_VARIANTS
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") &&
        __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq"))
        return 2;
    if (__builtin_cpu_supports("avx2"))
        return 1;
#endif
    return 0;
}

#endif
