/* Stamp out one kernel family's variants: PG_ISA_GEN(base) for the build's baseline and, where the AVX2 /
 * AVX-512 copies are compiled (PG_X86_VARIANTS, pg_isa.h), PG_ISA_GEN(avx2) and PG_ISA_GEN(avx512) under GCC's
 * target pragmas.  Use:
 *
 *     #define PG_ISA_GEN MY_FAMILY        (a macro taking the variant suffix)
 *     #include "pg_isa_variants.h"        (undefines PG_ISA_GEN again)
 *
 * and call the variant of a level with PG_ISA_PICK.  Neither target list enables FMA (GCC's -mavx512f does not
 * imply it either), so GCC cannot contract a * b + c into a fused multiply-add, which would round once where
 * the portable copy rounds twice.  No include guard: included once per family. */
#include "pg_isa.h"

PG_ISA_GEN(base)
#if PG_X86_VARIANTS
#pragma GCC push_options
#pragma GCC target("avx2")
PG_ISA_GEN(avx2)
#pragma GCC pop_options
#pragma GCC push_options
#pragma GCC target("avx512f,avx512vl,avx512bw,avx512dq")
PG_ISA_GEN(avx512)
#pragma GCC pop_options
#endif
#undef PG_ISA_GEN
