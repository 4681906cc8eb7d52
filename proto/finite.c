/*
 * NaN and infinity scan (see finite.h). Must stay a branch-free pass over
 * fixed-size blocks, which gcc vectorises at -O2: it runs over every pushed
 * value.
 */
#include <stdint.h>

#include "proto/vector_clones.h"
#include "proto/finite.h"

/* Values looked at between two early-exit checks. */
#define BLOCK 4096
/* Values of a block's tail looked at per vectorised step. */
#define STEP 256
/* Exponent bits all set: an infinity or a NaN. */
#define EXP_MASK 0x7f800000u

typedef uint32_t __attribute__((may_alias)) word_t;

DML_VECTOR_CLONES
int dml_values_finite(const float *v, size_t n)
{
	const word_t *p = (const word_t *)v;
	uint32_t bad = 0;
	size_t i = 0;

	for (; n - i >= BLOCK; i += BLOCK) {
		for (size_t j = 0; j < BLOCK; j++)
			bad += (p[i + j] & EXP_MASK) == EXP_MASK;
		if (bad)
			return 0;
	}
	/* The rest of a block (all of a 4 KiB push) in fixed steps too: gcc
	 * -O2 vectorises only loops of a known count, and a scalar pass cost
	 * a 4 KiB push about a microsecond. A last partial step is the last
	 * STEP values, some of them seen twice. */
	if (i < n && n >= STEP) {
		const size_t last = n - STEP;

		for (;; i += STEP) {
			size_t at = i < last ? i : last;

			for (size_t j = 0; j < STEP; j++)
				bad += (p[at + j] & EXP_MASK) == EXP_MASK;
			if (at == last)
				return bad == 0;
		}
	}
	for (; i < n; i++)
		bad += (p[i] & EXP_MASK) == EXP_MASK;
	return bad == 0;
}

DML_VECTOR_CLONES
void dml_values_add(float *restrict dst, const float *restrict src, size_t n)
{
	for (size_t i = 0; i < n; i++)
		dst[i] += src[i];
}
