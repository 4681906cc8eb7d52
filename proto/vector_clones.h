/*
 * DML_VECTOR_CLONES: build a function twice, for AVX2 and for the baseline
 * x86-64 the packages target, and let the loader pick one by the CPU (an
 * ifunc). For the loops every pushed value goes through (the finite check,
 * the optimizers): at 128 bits they ran 2.5 to 3.5 x slower on a 64 KiB
 * push. AVX2 alone, not FMA: no multiply and add is fused, so both builds
 * give the same result to the bit.
 */
#ifndef DML_VECTOR_CLONES_H
#define DML_VECTOR_CLONES_H

#include "config.h"

#if defined(HAVE_TARGET_CLONES) && defined(__x86_64__)
#define DML_VECTOR_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define DML_VECTOR_CLONES
#endif

#endif
