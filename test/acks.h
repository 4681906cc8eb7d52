/*
 * What the exactly-once tests share: the acknowledged pushes a worker
 * process reports through a pipe (one uint32_t push number each), and the
 * pseudo-random kill points. Header-only: each test is one program.
 */
#ifndef DML_TEST_ACKS_H
#define DML_TEST_ACKS_H

#include <check.h>
#include <stdint.h>
#include <unistd.h>

/* Take what is left in fd (the worker is dead) into acked[0..pushes). */
static inline void acks_drain(int fd, uint8_t *acked, uint32_t pushes)
{
	uint32_t p;

	while (read(fd, &p, sizeof(p)) == sizeof(p)) {
		ck_assert_uint_lt(p, pushes);
		acked[p] = 1;
	}
}

/* A linear congruential generator: the same kill points in every run. */
static inline uint64_t acks_rng_next(uint64_t *rng)
{
	*rng = *rng * 6364136223846793005ull + 1442695040888963407ull;
	return *rng >> 33;
}

#endif
