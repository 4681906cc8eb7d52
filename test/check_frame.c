/*
 * Unit tests for proto/frame.c: every message type survives encode and parse,
 * every class of malformed frame is refused with its own code, a frame is
 * found exactly at its last byte, and random or mutated input never crashes
 * the parser or makes it answer outside its contract.
 *
 * These tests build frames by hand and must never depend on a network or on
 * another module. Leak-freedom of every error path is checked by running this
 * program in the sanitizer build (LeakSanitizer fails the forked test).
 *
 * This file builds and parses frames for the tests, which are in
 * check_frame_roundtrip.c, check_frame_malformed.c and check_frame_fuzz.c.
 */
#include <check.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "test/check_frame.h"
#include "test/check_run.h"
#include "proto/dml_error.h"
#include "proto/frame.h"
#include "proto/util.h"

void built_free(struct built *b)
{
	free(b->buf);
	b->buf = NULL;
	b->len = 0;
}

/* Encodes m as a real sender would, then appends the payload bytes. */
struct built build_frame(Dml__Meta *m, const void *payload, uint32_t plen)
{
	size_t cap = dml_frame_head_size(m) + plen;
	struct built b = { dml_xmalloc(cap), 0 };
	size_t head = dml_frame_encode_head(m, plen, b.buf, cap);

	ck_assert_uint_gt(head, DML_FRAME_HEADER_LEN);
	ck_assert_uint_le(head + plen, cap);
	if (plen)
		memcpy(b.buf + head, payload, plen);
	b.len = head + plen;
	return b;
}

/*
 * Packs m exactly as it is (payload_bytes untouched) under a header that
 * claims hdr_plen payload bytes, followed by that many zero bytes: the way to
 * make the two lengths disagree, or counts and payload disagree.
 */
struct built build_raw(const Dml__Meta *m, uint32_t hdr_plen)
{
	size_t mlen = dml__meta__get_packed_size(m);
	struct built b;

	b.len = DML_FRAME_HEADER_LEN + mlen + hdr_plen;
	b.buf = dml_xcalloc(1, b.len);
	dml_frame_header_encode(b.buf, (uint32_t)mlen, hdr_plen);
	dml__meta__pack(m, b.buf + DML_FRAME_HEADER_LEN);
	return b;
}

/* Header plus arbitrary metadata bytes, no payload. */
struct built build_meta_bytes(const uint8_t *meta, size_t mlen)
{
	struct built b;

	b.len = DML_FRAME_HEADER_LEN + mlen;
	b.buf = dml_xmalloc(b.len);
	dml_frame_header_encode(b.buf, (uint32_t)mlen, 0);
	memcpy(b.buf + DML_FRAME_HEADER_LEN, meta, mlen);
	return b;
}

int parse_with(const struct built *b, const struct dml_frame_limits *lim)
{
	struct dml_frame f;
	size_t flen = 0;
	int rc = dml_frame_parse(b->buf, b->len, lim, &f, &flen);

	if (rc == 0) {
		ck_assert_uint_eq(flen, b->len);
		dml_frame_release(&f);
	} else {
		ck_assert_ptr_null(f.meta);
	}
	return rc;
}

int parse_default(const struct built *b)
{
	struct dml_frame_limits lim;

	dml_frame_limits_default(&lim);
	return parse_with(b, &lim);
}

/* Parses a frame that must be valid and whole; caller releases *f. */
void parse_ok(const struct built *b, struct dml_frame *f)
{
	struct dml_frame_limits lim;
	size_t flen = 0;

	dml_frame_limits_default(&lim);
	ck_assert_int_eq(dml_frame_parse(b->buf, b->len, &lim, f, &flen), 0);
	ck_assert_uint_eq(flen, b->len);
	ck_assert_ptr_nonnull(f->meta);
	ck_assert_uint_eq(f->hdr.payload_len, f->meta->payload_bytes);
	ck_assert_ptr_eq(f->payload, b->buf + b->len - f->hdr.payload_len);
}

void meta_data(Dml__Meta *m, Dml__MsgType type, uint32_t width)
{
	dml__meta__init(m);
	m->type = type;
	m->request_id = 0x1122334455667788ull;
	m->sender = 7;
	m->job = 3;
	m->table = 2;
	m->value_width = width;
}

/* n little-endian u64 keys starting at k0, spaced by 3. */
void fill_keys(uint8_t *out, uint32_t n, uint64_t k0)
{
	for (uint32_t i = 0; i < n; i++) {
		uint64_t k = k0 + 3ull * i;

		memcpy(out + 8ull * i, &k, sizeof(k));
	}
}

void fill_values(uint8_t *out, size_t count, float base)
{
	for (size_t i = 0; i < count; i++) {
		float v = base + 0.5f * (float)i;

		memcpy(out + 4 * i, &v, sizeof(v));
	}
}

const uint8_t nonce_a[32] = {
	1,  2,  3,  4,  5,  6,  7,  8,  9,  10, 11, 12, 13, 14, 15, 16,
	17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31, 32,
};

static Suite *frame_suite(void)
{
	Suite *s = suite_create("frame");
	TCase *rt = tcase_create("roundtrip");
	TCase *bad = tcase_create("malformed");
	TCase *fz = tcase_create("fuzz");
	TCase *direct = tcase_create("direct");

	frame_tests_roundtrip(rt);
	suite_add_tcase(s, rt);

	frame_tests_malformed(bad);
	suite_add_tcase(s, bad);

	frame_tests_direct(direct);
	suite_add_tcase(s, direct);

	/* Sanitizer builds are slow; the fuzz loops need more than 4 s there. */
	tcase_set_timeout(fz, 120);
	frame_tests_fuzz(fz);
	suite_add_tcase(s, fz);
	return s;
}

int main(void)
{
	return dml_check_run(frame_suite());
}
