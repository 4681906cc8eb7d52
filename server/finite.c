/*
 * NaN and infinity scan (see finite.h). Must stay a branch-free pass over
 * fixed-size blocks, which gcc vectorises at -O2: it runs over every pushed
 * value.
 */
#include <stdint.h>

#include "server/finite.h"

/* Values looked at between two early-exit checks. */
#define BLOCK 4096
/* Exponent bits all set: an infinity or a NaN. */
#define EXP_MASK 0x7f800000u

typedef uint32_t __attribute__((may_alias)) word_t;

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
	for (; i < n; i++)
		bad += (p[i] & EXP_MASK) == EXP_MASK;
	return bad == 0;
}
