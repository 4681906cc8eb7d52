/*
 * fuzz.c - mutation fuzzing of a file reader (see fuzz.h), with a linear
 * congruential generator so that every run makes the same files.
 */
#include <check.h>
#include <string.h>

#include "test/fuzz.h"
#include "test/tmpdir.h"

#define FUZZ_MAX 65536
#define TOKEN_MAX 64

void dml_test_fuzz_file(const char *src, size_t len, const char *const *tokens,
			size_t ntokens, int tries, uint64_t seed, int (*load)(const char *path),
			int *ok, int *bad)
{
	static char buf[FUZZ_MAX + TOKEN_MAX], gzbuf[FUZZ_MAX];
	uint64_t rng = seed;
	size_t glen;

	ck_assert(len >= 1 && len <= FUZZ_MAX && ntokens >= 1);
	glen = dml_test_read_file(dml_test_tmpdir_write("seed.gz", src, len, 1), gzbuf,
				  sizeof(gzbuf));
	ck_assert_uint_lt(glen, sizeof(gzbuf));
	ck_assert_int_eq(load(dml_test_tmpdir_write("seed", src, len, 0)), 0);
	ck_assert_int_eq(load(dml_test_tmpdir_write("seed.gz", src, len, 1)), 0);
	for (int it = 0; it < tries; it++) {
		int gz = it % 3 == 2;
		const char *from = gz ? gzbuf : src;
		size_t flen = gz ? glen : len, n = flen, at;

		rng = rng * 6364136223846793005ULL + 1442695040888963407ULL;
		at = (size_t)(rng >> 33) % flen;
		memcpy(buf, from, flen);
		switch (it % 4) {
		case 0:     /* truncate */
			n = at;
			break;
		case 1:     /* flip a few bytes */
			for (int k = 0; k < 1 + (int)(rng & 3); k++)
				buf[((rng >> (8 * k)) ^ at) % flen] ^= (char)(1u << (k + it) % 8);
			break;
		case 2:     /* a byte of anything */
			buf[at] = (char)(rng >> 24);
			break;
		default: {  /* a troublesome token where a byte was */
			const char *t = tokens[(rng >> 20) % ntokens];
			size_t tl = t[0] ? strlen(t) : 1;

			ck_assert_uint_le(tl, TOKEN_MAX);
			memcpy(buf + at, t, tl);
			memcpy(buf + at + tl, from + at, flen - at);
			n = flen + tl;
		}
		}
		if (load(dml_test_tmpdir_write(gz ? "f.gz" : "f", buf, n, 0)) == 0)
			(*ok)++;
		else
			(*bad)++;
	}
}
