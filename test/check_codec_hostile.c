/*
 * Hostile bytes for the codecs' decoders (proto/codec.h): every encoding one
 * byte short and one byte long, counts whose sizes wrap, non-finite values
 * and scales, and top-k encodings with counts and indices out of range or
 * out of order. Each must be refused with DML_ESHAPE; every buffer is
 * allocated at its exact size, so that a read past it shows under the
 * sanitizers.
 *
 * The byte layout is taken from the header (little-endian values, a float
 * scale per int8 block, top-k's count then (index, value) pairs), with the
 * widths of top-k's count and index and the place of int8's scales found
 * from the encoder's own output.
 */
#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "test/check_codec.h"
#include "proto/codec.h"
#include "proto/dml_error.h"

static const size_t hostile_sizes[] = { 1, 255, 256, 257, 1000 };
#define HOSTILE_NSIZES (sizeof(hostile_sizes) / sizeof(hostile_sizes[0]))

/* Decode len bytes of p, copied into a buffer of exactly that size. */
static int decode_exact(const struct dml_codec *c, const uint8_t *p, size_t len, size_t n)
{
	uint8_t *in = codec_copy(p, len);
	float *out = codec_poisoned(n);
	int rc = dml_codec_decode(c, in, len, n, out);

	free(in);
	free(out);
	return rc;
}

/* A random tensor of n values, encoded; the bytes are the caller's to free. */
static uint8_t *encode_random(const struct dml_codec *c, size_t n, uint64_t seed, size_t *len)
{
	float *x = codec_poisoned(n);
	uint8_t *enc;

	codec_fill_normal(x, n, 1.0, &seed);
	enc = codec_encode_exact(c, x, n, NULL, len);
	free(x);
	return enc;
}

START_TEST(test_hostile_length)
{
	struct dml_codec c = codec_of(codec_names[_i]);
	uint8_t zero = 0;

	ck_assert_int_eq(decode_exact(&c, &zero, 1, 0), DML_ESHAPE);
	for (size_t s = 0; s < HOSTILE_NSIZES; s++) {
		size_t n = hostile_sizes[s], len;
		uint8_t *enc = encode_random(&c, n, 40 + s, &len), *longer;

		ck_assert_int_eq(decode_exact(&c, enc, len, n), 0);
		ck_assert_msg(decode_exact(&c, enc, len - 1, n) == DML_ESHAPE,
			      "%s n %zu: one byte short accepted", codec_names[_i], n);
		ck_assert_int_eq(decode_exact(&c, enc, 0, n), DML_ESHAPE);
		longer = calloc(1, len + 1);
		ck_assert_ptr_nonnull(longer);
		memcpy(longer, enc, len);
		ck_assert_msg(decode_exact(&c, longer, len + 1, n) == DML_ESHAPE,
			      "%s n %zu: one byte long accepted", codec_names[_i], n);
		/* the whole values read as one value more or less */
		if (!dml_codec_sparse(c.kind)) {
			ck_assert_int_eq(decode_exact(&c, enc, len, n + 1), DML_ESHAPE);
			ck_assert_int_eq(decode_exact(&c, enc, len, n - 1), DML_ESHAPE);
		}
		free(longer);
		free(enc);
	}
}
END_TEST

/* A count of values whose size in bytes wraps around to the buffer's. */
START_TEST(test_hostile_wrapping_count)
{
	static const struct {
		const char *codec;
		size_t width;
	} dense[] = { { "none", 4 }, { "fp16", 2 }, { "bf16", 2 } };
	uint8_t bytes[4] = { 0 };
	float out[1];

	for (size_t i = 0; i < 3; i++) {
		struct dml_codec c = codec_of(dense[i].codec);
		size_t n = SIZE_MAX / dense[i].width + 2; /* n * width == width */

		ck_assert_int_ne(dml_codec_decode(&c, bytes, dense[i].width, n, out), 0);
	}
}
END_TEST

/* A NaN or infinity where a value of none, fp16 or bf16 lies. */
START_TEST(test_hostile_nonfinite_values)
{
	static const struct {
		const char *codec;
		size_t width;
		uint32_t bad[4];
	} dense[] = {
		{ "none", 4, { 0x7fc00000, 0x7f800000, 0xff800000, 0x7f800001 } },
		{ "fp16", 2, { 0x7e00, 0x7c00, 0xfc00, 0x7c01 } },
		{ "bf16", 2, { 0x7fc0, 0x7f80, 0xff80, 0xff81 } },
	};

	for (size_t k = 0; k < 3; k++) {
		struct dml_codec c = codec_of(dense[k].codec);

		for (size_t s = 0; s < HOSTILE_NSIZES; s++) {
			size_t n = hostile_sizes[s], len, at[3] = { 0, n / 2, n - 1 };
			uint8_t *enc = encode_random(&c, n, 70 + s, &len);

			for (size_t a = 0; a < 3; a++)
				for (size_t b = 0; b < 4; b++) {
					uint8_t *bad = codec_copy(enc, len);

					codec_put_le(bad + at[a] * dense[k].width, dense[k].width,
						     dense[k].bad[b]);
					ck_assert_msg(decode_exact(&c, bad, len, n) == DML_ESHAPE,
						      "%s n %zu: 0x%x at %zu accepted", dense[k].codec,
						      n, dense[k].bad[b], at[a]);
					free(bad);
				}
			free(enc);
		}
	}
}
END_TEST

/* int8: three blocks of scale 1, 2 and 1 (one value of 127 or 254 each,
 * zeros else), so block 1's scale is the only 2.0f in the bytes. */
START_TEST(test_hostile_int8_scale)
{
	enum { N = 600 };
	static const uint8_t two[4] = { 0x00, 0x00, 0x00, 0x40 };
	static const uint32_t bad[] = { 0x7fc00000, 0x7f800000, 0xff800000, 0xffc00001 };
	struct dml_codec c = codec_of("int8");
	float x[N] = { 0 }, *d;
	size_t len, at = SIZE_MAX;
	uint8_t *enc, *neg;
	int rc;

	x[3] = 127;
	x[256 + 9] = -254;
	x[512 + 1] = 127;
	enc = codec_encode_exact(&c, x, N, NULL, &len);
	for (size_t i = 0; i + 4 <= len; i++)
		if (memcmp(enc + i, two, 4) == 0) {
			ck_assert_msg(at == SIZE_MAX, "the scale 2.0 found twice");
			at = i;
		}
	ck_assert_msg(at != SIZE_MAX, "the scale 2.0 of block 1 is not in the encoding");
	d = codec_decode_ok(&c, enc, len, N);
	ck_assert_float_eq(d[256 + 9], -254);
	free(d);
	for (size_t b = 0; b < sizeof(bad) / sizeof(bad[0]); b++) {
		uint8_t *p = codec_copy(enc, len);

		codec_put_le(p + at, 4, bad[b]);
		ck_assert_msg(decode_exact(&c, p, len, N) == DML_ESHAPE, "scale 0x%08x accepted",
			      bad[b]);
		free(p);
	}
	/* A negative scale: the header does not call it an error, so only
	 * what it decodes to is checked, if it is taken. */
	neg = codec_copy(enc, len);
	codec_put_le(neg + at, 4, 0xc0000000); /* -2.0f */
	d = codec_poisoned(N);
	rc = dml_codec_decode(&c, neg, len, N, d);
	ck_assert(rc == DML_ESHAPE || (rc == 0 && d[256 + 9] == 254));
	free(d);
	free(neg);
	free(enc);
}
END_TEST

/* ------------------------------------------------------------------ */
/* topk. */

/* The layout of a topk encoding, found from the encoder. */
struct topk_layout {
	size_t count_w; /* bytes of the count */
	size_t pair;    /* bytes of an (index, value) pair */
	size_t index_w; /* bytes of an index (the value, a float, follows it) */
};

/* x of n values: 100 + j at 7 j + 3 for j < k, small values else. */
static uint8_t *topk_known(const struct dml_codec *c, size_t n, size_t k, size_t *len)
{
	float *x = codec_poisoned(n);
	uint64_t rng = 3;
	uint8_t *enc;

	codec_fill_normal(x, n, 1.0, &rng);
	for (size_t j = 0; j < k; j++)
		x[7 * j + 3] = 100.0f + (float)j;
	enc = codec_encode_exact(c, x, n, NULL, len);
	free(x);
	return enc;
}

/* topk:0.01 sends 10 of 1000 values and 20 of 2000: the count's and an
 * index's widths follow from the two lengths; the bytes must then read as
 * the header says. Returns the encoding of the 1000 values. */
static uint8_t *topk_layout_of(const struct dml_codec *c, struct topk_layout *l, size_t *len)
{
	size_t len2;
	uint8_t *enc = topk_known(c, 1000, 10, len), *enc2 = topk_known(c, 2000, 20, &len2);

	ck_assert_uint_gt(len2, *len);
	l->pair = (len2 - *len) / 10;
	ck_assert_uint_ge(*len, 10 * l->pair);
	l->count_w = *len - 10 * l->pair;
	l->index_w = l->pair - sizeof(float);
	ck_assert_msg((l->count_w == 4 || l->count_w == 8) && (l->index_w == 4 || l->index_w == 8),
		      "topk layout: count of %zu bytes, pairs of %zu", l->count_w, l->pair);
	ck_assert_uint_eq(codec_get_le(enc, l->count_w), 10);
	for (size_t j = 0; j < 10; j++) {
		const uint8_t *p = enc + l->count_w + j * l->pair;
		uint32_t v = (uint32_t)codec_get_le(p + l->index_w, 4);
		float f;

		memcpy(&f, &v, sizeof(f));
		ck_assert_uint_eq(codec_get_le(p, l->index_w), 7 * j + 3);
		ck_assert_float_eq(f, 100.0f + (float)j);
	}
	free(enc2);
	return enc;
}

/* The encoding with index (or, when value, the value) of pair j set to v;
 * decoding it must be refused. */
static void topk_refused(const struct dml_codec *c, const struct topk_layout *l,
			 const uint8_t *enc, size_t len, size_t j, int value, uint64_t v,
			 const char *what)
{
	uint8_t *p = codec_copy(enc, len), *pair = p + l->count_w + j * l->pair;

	if (value)
		codec_put_le(pair + l->index_w, 4, v);
	else
		codec_put_le(pair, l->index_w, v);
	ck_assert_msg(decode_exact(c, p, len, 1000) == DML_ESHAPE, "topk: %s accepted", what);
	free(p);
}

START_TEST(test_hostile_topk)
{
	struct dml_codec c = codec_of("topk:0.01");
	struct topk_layout l;
	size_t len, idx3;
	uint8_t *enc = topk_layout_of(&c, &l, &len), *p;
	/* counts that do not match the pairs, and counts whose size wraps; the
	 * last one's pairs wrap to exactly the 10 pairs there are */
	uint64_t counts[] = { 9, 11, 1001, UINT64_MAX, UINT64_MAX / 12 + 1,
			      10 + UINT64_MAX / (l.pair & -l.pair) + 1 };
	size_t ncounts = sizeof(counts) / sizeof(counts[0]) - (l.count_w < 8);

	ck_assert_int_eq(decode_exact(&c, enc, len, 1000), 0);
	idx3 = 7 * 3 + 3;
	topk_refused(&c, &l, enc, len, 2, 0, 7 * 4 + 3, "indices not rising");
	topk_refused(&c, &l, enc, len, 4, 0, idx3, "a duplicate index");
	topk_refused(&c, &l, enc, len, 9, 0, 1000, "index n");
	topk_refused(&c, &l, enc, len, 9, 0, UINT64_MAX, "index 2^64-1");
	topk_refused(&c, &l, enc, len, 0, 0, 1000, "a first index of n");
	topk_refused(&c, &l, enc, len, 5, 1, 0x7fc00000, "a NaN value");
	topk_refused(&c, &l, enc, len, 5, 1, 0xff800000, "an infinite value");
	for (size_t i = 0; i < ncounts; i++) {
		p = codec_copy(enc, len);
		codec_put_le(p, l.count_w, counts[i]);
		ck_assert_msg(decode_exact(&c, p, len, 1000) == DML_ESHAPE,
			      "topk: count %llu accepted", (unsigned long long)counts[i]);
		free(p);
	}
	free(enc);
}
END_TEST

/* More values than n, in a buffer that holds them all: n 3, count 4,
 * indices 0 to 3. */
START_TEST(test_hostile_topk_count_over_n)
{
	struct dml_codec c = codec_of("topk:1");
	struct dml_codec c01 = codec_of("topk:0.01");
	struct topk_layout l;
	size_t len, blen;
	uint8_t *enc = topk_layout_of(&c01, &l, &len), *b;

	blen = l.count_w + 4 * l.pair;
	b = calloc(1, blen);
	ck_assert_ptr_nonnull(b);
	codec_put_le(b, l.count_w, 4);
	for (size_t j = 0; j < 4; j++) {
		codec_put_le(b + l.count_w + j * l.pair, l.index_w, j);
		codec_put_le(b + l.count_w + j * l.pair + l.index_w, 4, 0x3f800000);
	}
	ck_assert_int_eq(decode_exact(&c, b, blen, 3), DML_ESHAPE);
	ck_assert_int_eq(decode_exact(&c, b, blen, 4), 0); /* the control: fine for 4 */
	free(b);
	free(enc);
}
END_TEST

/* A count of 0 for n > 0: the encoder never writes one (it sends at least
 * one value), and the header leaves its decoding open; when taken, it must
 * read as all zeros. */
START_TEST(test_topk_count_zero)
{
	struct dml_codec c = codec_of("topk:0.01");
	struct topk_layout l;
	size_t len;
	uint8_t *enc = topk_layout_of(&c, &l, &len), *z = calloc(1, l.count_w);
	float *out = codec_poisoned(1000);
	int rc;

	ck_assert_ptr_nonnull(z);
	rc = dml_codec_decode(&c, z, l.count_w, 1000, out);
	ck_assert_msg(rc == DML_ESHAPE || rc == 0, "rc %d", rc);
	for (size_t i = 0; rc == 0 && i < 1000; i++)
		ck_assert_float_eq(out[i], 0);
	free(out);
	free(z);
	free(enc);
}
END_TEST

/*
 * Mutated encodings: valid ones of every codec with bits flipped, bytes
 * replaced, cut short or grown, decoded into an output of exactly n floats
 * (under ASan any read or write past a buffer fails the test). Each must
 * decode to finite values or be refused as DML_ESHAPE, nothing else.
 */
START_TEST(test_hostile_mutations)
{
	static const size_t sizes[] = { 1, 300, 1000 };
	struct dml_codec c = codec_of(codec_names[_i]);
	uint64_t rng = 2026 + (uint64_t)_i;
	int decoded = 0, refused = 0;

	for (size_t s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++) {
		size_t n = sizes[s], len;
		float *x = codec_poisoned(n), *out = malloc(n * sizeof(float));
		uint8_t *enc;

		ck_assert_ptr_nonnull(out);
		codec_fill_normal(x, n, 1.0, &rng);
		enc = codec_encode_exact(&c, x, n, NULL, &len);
		for (int t = 0; t < 1500; t++) {
			size_t mlen = len, at;
			uint8_t *m;
			int rc;

			rng = rng * 6364136223846793005ull + 1442695040888963407ull;
			switch ((rng >> 33) % 4) {
			case 0: mlen = len ? (size_t)(rng >> 40) % len : 0; break;  /* cut */
			case 1: mlen = len + 1 + (size_t)(rng >> 40) % 16; break;   /* grown */
			default: break;                                           /* same length */
			}
			m = malloc(mlen ? mlen : 1);
			ck_assert_ptr_nonnull(m);
			memcpy(m, enc, mlen < len ? mlen : len);
			for (size_t i = len; i < mlen; i++)
				m[i] = (uint8_t)(rng >> (i % 56));
			for (int f = 0; mlen && f < 1 + (int)((rng >> 20) % 4); f++) {
				at = (size_t)(rng >> (8 + f)) % mlen;
				if ((rng >> 30) & 1)
					m[at] ^= (uint8_t)(1u << ((rng >> (24 + f)) % 8));
				else
					m[at] = (uint8_t)(rng >> (44 + f));
			}
			rc = dml_codec_decode(&c, m, mlen, n, out);
			if (rc == 0) {
				for (size_t i = 0; i < n; i++)
					ck_assert_msg(isfinite(out[i]), "%s n %zu try %d: value %zu "
						      "decoded as %g", codec_names[_i], n, t, i,
						      (double)out[i]);
				decoded++;
			} else {
				ck_assert_msg(rc == DML_ESHAPE, "%s n %zu try %d: %d",
					      codec_names[_i], n, t, rc);
				refused++;
			}
			free(m);
		}
		free(enc);
		free(out);
		free(x);
	}
	ck_assert(decoded > 0 && refused > 0);
}
END_TEST

/*
 * topk16, built byte by byte (codec.h: a 4-byte count, then per pair a
 * LEB128 gap and an fp16 value) for 1000 values: a valid encoding decodes
 * to what it says; gaps that reach n, varints too long or past 32 bits,
 * non-finite halves, counts the bytes cannot hold, and bytes left over are
 * refused.
 */
static int topk16_bytes(const uint8_t *b, size_t len, float *first)
{
	struct dml_codec c = codec_of("topk16:0.01");
	float *out = codec_poisoned(1000);
	uint8_t *in = codec_copy(b, len);
	int rc = dml_codec_decode(&c, in, len, 1000, out);

	if (rc == 0 && first)
		for (size_t i = 0; i < 1000; i++)
			if (out[i] != 0) {
				*first = out[i];
				ck_assert_uint_eq(i, 998);
				ck_assert_float_eq(out[999], -2.0f);
				break;
			}
	free(in);
	free(out);
	return rc;
}

START_TEST(test_hostile_topk16)
{
	/* count 2; gap 998 (0xe6 0x07), 1.0; gap 0 (index 999), -2.0 */
	static const uint8_t ok[] = { 2, 0, 0, 0, 0xe6, 0x07, 0x00, 0x3c, 0x00, 0x00, 0xc0 };
	static const struct { uint8_t b[16]; size_t len; const char *what; } bad[] = {
		{ { 2, 0, 0, 0, 0xe6, 0x07, 0x00, 0x3c, 0x01, 0x00, 0xc0 }, 11, "an index of n" },
		{ { 1, 0, 0, 0, 0xe8, 0x07, 0x00, 0x3c }, 8, "a first index of n" },
		{ { 1, 0, 0, 0, 0x80, 0x80, 0x80, 0x80, 0x80, 0x00, 0x00, 0x3c }, 12,
		  "a gap of six bytes" },
		{ { 1, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0x1f, 0x00, 0x3c }, 11,
		  "a gap past 32 bits" },
		{ { 1, 0, 0, 0, 0x05, 0x00, 0x7c }, 7, "an infinite value" },
		{ { 1, 0, 0, 0, 0x05, 0x00, 0x7e }, 7, "a NaN value" },
		{ { 1, 0, 0, 0, 0x05, 0x01, 0xfc }, 7, "a negative infinity" },
		{ { 3, 0, 0, 0, 0xe6, 0x07, 0x00, 0x3c, 0x00, 0x00, 0xc0 }, 11, "a count of 3" },
		{ { 0xe9, 0x03, 0, 0, 0x05, 0x00, 0x3c }, 7, "a count of n + 1" },
		{ { 0xff, 0xff, 0xff, 0xff, 0x05, 0x00, 0x3c }, 7, "a count of 2^32 - 1" },
		{ { 1, 0, 0, 0, 0x05, 0x00, 0x3c, 0x00 }, 8, "a byte left over" },
		{ { 1, 0, 0, 0, 0x85 }, 5, "a gap cut short" },
		{ { 1, 0, 0, 0, 0x05, 0x00 }, 6, "a value cut short" },
		{ { 1, 0, 0 }, 3, "a count cut short" },
	};
	float first = 0;

	ck_assert_int_eq(topk16_bytes(ok, sizeof(ok), &first), 0);
	ck_assert_float_eq(first, 1.0f);
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		ck_assert_msg(topk16_bytes(bad[i].b, bad[i].len, NULL) == DML_ESHAPE,
			      "topk16: %s accepted", bad[i].what);
	/* none sent: the count alone */
	ck_assert_int_eq(topk16_bytes((const uint8_t[]){ 0, 0, 0, 0 }, 4, NULL), 0);
}
END_TEST

TCase *codec_hostile_tcase(void)
{
	TCase *t = tcase_create("hostile");

	/* Thousands of mutated encodings per codec: seconds each under the
	 * sanitizers on a busy machine, far past Check's default of 4. */
	tcase_set_timeout(t, 120);
	tcase_add_loop_test(t, test_hostile_length, 0, (int)codec_nnames);
	tcase_add_test(t, test_hostile_wrapping_count);
	tcase_add_test(t, test_hostile_nonfinite_values);
	tcase_add_test(t, test_hostile_int8_scale);
	tcase_add_test(t, test_hostile_topk);
	tcase_add_test(t, test_hostile_topk_count_over_n);
	tcase_add_test(t, test_topk_count_zero);
	tcase_add_test(t, test_hostile_topk16);
	tcase_add_loop_test(t, test_hostile_mutations, 0, (int)codec_nnames);
	return t;
}
