/*
 * Random and mutated input for proto/frame.c (see check_frame.c): the parser
 * never crashes and never answers outside its contract.
 */
#include <check.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "test/check_frame.h"
#include "proto/dml_error.h"
#include "proto/frame.h"
#include "proto/util.h"

static uint64_t rng_next(uint64_t *s)
{
	*s ^= *s >> 12;
	*s ^= *s << 25;
	*s ^= *s >> 27;
	return *s * 0x2545f4914f6cdd1dull;
}

static bool parse_code_defined(int rc)
{
	static const int codes[] = {
		0, DML_FRAME_INCOMPLETE, DML_EFRAME_MAGIC, DML_EFRAME_VERSION,
		DML_EFRAME_META, DML_EFRAME_PAYLOAD, DML_EFRAME_LENGTH, DML_EFRAME_DECODE,
		DML_EFRAME_TYPE, DML_EFRAME_COUNT, DML_EFRAME_KEYS, DML_EFRAME_FLAGS,
		DML_ESHAPE,
	};

	for (size_t i = 0; i < DML_ARRAY_LEN(codes); i++)
		if (rc == codes[i])
			return true;
	return false;
}

/* Parses buf[0..len) from an exact-size heap copy so ASan sees overreads. */
static void fuzz_one(const uint8_t *buf, size_t len, const struct dml_frame_limits *lim)
{
	uint8_t *copy = dml_xmalloc(len);
	struct dml_frame f;
	size_t flen = 0;
	int rc;

	memcpy(copy, buf, len);
	rc = dml_frame_parse(copy, len, lim, &f, &flen);
	ck_assert_msg(parse_code_defined(rc), "undefined parse result %d", rc);
	if (rc == 0) {
		ck_assert_uint_le(flen, len);
		ck_assert_ptr_nonnull(f.meta);
		dml_frame_release(&f);
	} else {
		ck_assert_ptr_null(f.meta);
	}
	free(copy);
}

START_TEST(test_fuzz_random)
{
	struct dml_frame_limits lim;
	uint64_t seed = 0x9e3779b97f4a7c15ull;
	uint8_t buf[200];

	dml_frame_limits_default(&lim);
	for (int it = 0; it < 20000; it++) {
		size_t len = rng_next(&seed) % (sizeof(buf) + 1);

		for (size_t i = 0; i < len; i++)
			buf[i] = (uint8_t)rng_next(&seed);
		/*
		 * Pure noise never gets past the magic; give most inputs a
		 * valid header whose lengths cover the noise so the metadata
		 * decoder and the count checks see it too.
		 */
		if (it % 4 != 0 && len >= DML_FRAME_HEADER_LEN + 1) {
			uint32_t rest = (uint32_t)(len - DML_FRAME_HEADER_LEN);
			uint32_t mlen = 1 + (uint32_t)(rng_next(&seed) % rest);

			dml_frame_header_encode(buf, mlen, rest - mlen);
		}
		fuzz_one(buf, len, &lim);
	}
}
END_TEST

START_TEST(test_fuzz_mutations)
{
	enum { N = 3, W = 2 };
	uint8_t payload[N * 8 + N * W * 4];
	Dml__Handshake hs = DML__HANDSHAKE__INIT;
	struct dml_frame_limits lim;
	uint64_t seed = 12345;
	struct built seeds[3];
	Dml__Meta m;

	dml_frame_limits_default(&lim);
	meta_data(&m, DML__MSG_TYPE__PUSH, W);
	m.num_keys = N;
	fill_keys(payload, N, 1);
	fill_values(payload + N * 8, N * W, 1.0f);
	seeds[0] = build_frame(&m, payload, sizeof(payload));
	meta_data(&m, DML__MSG_TYPE__PULL, W);
	m.dense = 1;
	m.key_end = 100;
	seeds[1] = build_frame(&m, NULL, 0);
	meta_data(&m, DML__MSG_TYPE__HELLO, 0);
	hs.cluster = (char *)"c";
	hs.nonce.data = (uint8_t *)nonce_a;
	hs.nonce.len = sizeof(nonce_a);
	m.handshake = &hs;
	seeds[2] = build_frame(&m, NULL, 0);

	for (int it = 0; it < 20000; it++) {
		const struct built *s = &seeds[it % 3];
		uint8_t buf[256];
		size_t len = s->len;
		int flips = 1 + (int)(rng_next(&seed) % 4);

		ck_assert_uint_le(len, sizeof(buf));
		memcpy(buf, s->buf, len);
		for (int k = 0; k < flips; k++) {
			/* Mostly after the magic, so the mutation is not just refused. */
			size_t at = 4 + rng_next(&seed) % (len - 4);

			if (rng_next(&seed) % 2)
				buf[at] ^= (uint8_t)(1u << (rng_next(&seed) % 8));
			else
				buf[at] = (uint8_t)rng_next(&seed);
		}
		if (rng_next(&seed) % 8 == 0)
			len = rng_next(&seed) % (len + 1);
		fuzz_one(buf, len, &lim);
	}
	for (size_t i = 0; i < DML_ARRAY_LEN(seeds); i++)
		built_free(&seeds[i]);
}
END_TEST

/* The fuzz tests, in the order the suite runs them. */
void frame_tests_fuzz(TCase *tc)
{
	tcase_add_test(tc, test_fuzz_random);
	tcase_add_test(tc, test_fuzz_mutations);
}
