/*
 * Unit tests for proto/codec.c, the gradient codecs, against proto/codec.h
 * alone: names parsed and refused, the half-precision helpers bit for bit
 * (every half, ties to even, saturation, subnormals, against a reference
 * over many random floats), round trips of every codec within its stated
 * error (check_codec_trip.c), error feedback that loses nothing over many
 * encodings, and decoding of hostile bytes that must be refused without a
 * read past the buffer (check_codec_hostile.c).
 *
 * This file holds the shared helpers, the name and half tests and the
 * suite. Pure in-memory tests: no files, no sockets.
 */
#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "test/check_codec.h"
#include "test/check_run.h"
#include "proto/codec.h"
#include "proto/dml_error.h"

const char *const codec_names[] = { "none", "fp16", "bf16", "int8", "topk:0.01",
				    "topk:0.25", "topk:1", "topk16:0.01", "topk16:0.25",
				    "topk16:1" };
const size_t codec_nnames = sizeof(codec_names) / sizeof(codec_names[0]);

const size_t codec_sizes[] = { 0, 1, 255, 256, 257, 1000, 4099 };
const size_t codec_nsizes = sizeof(codec_sizes) / sizeof(codec_sizes[0]);

struct dml_codec codec_of(const char *s)
{
	struct dml_codec c;
	char err[128] = "";

	ck_assert_msg(dml_codec_parse(s, &c, err, sizeof(err)) == 0, "%s: %s", s, err);
	return c;
}

double codec_uniform(uint64_t *rng)
{
	*rng = *rng * 6364136223846793005ull + 1442695040888963407ull;
	return (double)(*rng >> 11) / 9007199254740992.0;
}

void codec_fill_normal(float *x, size_t n, double scale, uint64_t *rng)
{
	for (size_t i = 0; i < n; i++) {
		double u = codec_uniform(rng), v = codec_uniform(rng);

		x[i] = (float)(scale * sqrt(-2.0 * log(1.0 - u)) * cos(6.283185307179586 * v));
	}
}

uint8_t *codec_copy(const void *p, size_t len)
{
	uint8_t *b = malloc(len ? len : 1);

	ck_assert_ptr_nonnull(b);
	if (len)
		memcpy(b, p, len);
	return b;
}

uint8_t *codec_encode_exact(const struct dml_codec *c, const float *x, size_t n,
			    float *residual, size_t *len)
{
	size_t bound = dml_codec_bound(c, n);
	uint8_t *buf = malloc(bound ? bound : 1), *exact;

	ck_assert_ptr_nonnull(buf);
	ck_assert(bound > 0 || n == 0);
	*len = bound + 1;
	ck_assert_int_eq(dml_codec_encode(c, x, n, residual, buf, bound, len), 0);
	ck_assert_uint_le(*len, bound);
	exact = codec_copy(buf, *len);
	free(buf);
	return exact;
}

float *codec_poisoned(size_t n)
{
	float *out = malloc((n ? n : 1) * sizeof(float));

	ck_assert_ptr_nonnull(out);
	memset(out, 0xff, (n ? n : 1) * sizeof(float));
	return out;
}

float *codec_decode_ok(const struct dml_codec *c, const uint8_t *in, size_t len, size_t n)
{
	float *out = codec_poisoned(n);

	ck_assert_int_eq(dml_codec_decode(c, in, len, n, out), 0);
	for (size_t i = 0; i < n; i++)
		ck_assert_msg(isfinite(out[i]), "value %zu of %zu decoded as %a: not written, "
			      "or not finite", i, n, (double)out[i]);
	return out;
}

uint64_t codec_get_le(const uint8_t *p, size_t w)
{
	uint64_t v = 0;

	for (size_t i = w; i-- > 0;)
		v = v << 8 | p[i];
	return v;
}

void codec_put_le(uint8_t *p, size_t w, uint64_t v)
{
	for (size_t i = 0; i < w; i++, v >>= 8)
		p[i] = (uint8_t)v;
}

/* ------------------------------------------------------------------ */
/* Names. */

START_TEST(test_parse_valid)
{
	static const struct {
		const char *s;
		enum dml_codec_kind kind;
		float fraction;
	} ok[] = {
		{ "none", DML_CODEC_NONE, 0 }, { "fp16", DML_CODEC_FP16, 0 },
		{ "bf16", DML_CODEC_BF16, 0 }, { "int8", DML_CODEC_INT8, 0 },
		{ "topk:0.01", DML_CODEC_TOPK, 0.01f }, { "topk:1", DML_CODEC_TOPK, 1.0f },
		{ "topk:0.5", DML_CODEC_TOPK, 0.5f }, { "topk:1e-6", DML_CODEC_TOPK, 1e-6f },
		{ "topk16:0.04", DML_CODEC_TOPK16, 0.04f }, { "topk16:1", DML_CODEC_TOPK16, 1.0f },
	};

	for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
		struct dml_codec c = codec_of(ok[i].s), back;
		char name[32], err[128] = "";

		ck_assert_int_eq(c.kind, ok[i].kind);
		ck_assert_int_eq(dml_codec_sparse(c.kind), ok[i].fraction > 0);
		if (dml_codec_sparse(c.kind))
			ck_assert_float_eq(c.topk_fraction, ok[i].fraction);
		ck_assert_int_eq(dml_codec_lossy(&c), c.kind != DML_CODEC_NONE);
		/* the name reads back as the same codec */
		ck_assert_ptr_eq(dml_codec_format(&c, name, sizeof(name)), name);
		ck_assert_msg(dml_codec_parse(name, &back, err, sizeof(err)) == 0,
			      "%s formats as '%s', which does not parse: %s", ok[i].s, name, err);
		ck_assert_int_eq(back.kind, c.kind);
		if (dml_codec_sparse(c.kind))
			ck_assert_float_eq(back.topk_fraction, c.topk_fraction);
		else
			ck_assert_str_eq(name, ok[i].s);
	}
}
END_TEST

START_TEST(test_parse_refused)
{
	static const char *const bad[] = {
		"", "fp32", "topk", "topk:", "topk:0", "topk:1.5", "topk:-0.1", "topk:nan",
		"topk:0.1x", "topk:inf", "none:0.1", "int8x", "topk:1.0000001",
		"topk16", "topk16:", "topk16:0", "topk16:2", "topk17:0.1", "topk1:0.1",
		"fp16:0.5", ":0.5",
	};

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		struct dml_codec c;
		char err[128] = "", tiny[4] = "xyz";

		ck_assert_msg(dml_codec_parse(bad[i], &c, err, sizeof(err)) == DML_EINVAL,
			      "'%s' accepted", bad[i]);
		ck_assert_msg(err[0] != '\0', "'%s' refused without a reason", bad[i]);
		/* the reason is cut to the buffer given, and none is written into none */
		ck_assert_int_eq(dml_codec_parse(bad[i], &c, tiny, sizeof(tiny)), DML_EINVAL);
		ck_assert_uint_lt(strlen(tiny), sizeof(tiny));
		ck_assert_int_eq(dml_codec_parse(bad[i], &c, tiny, 0), DML_EINVAL);
	}
}
END_TEST

START_TEST(test_bound_too_large)
{
	for (size_t i = 0; i < codec_nnames; i++) {
		struct dml_codec c = codec_of(codec_names[i]);

		ck_assert_uint_eq(dml_codec_bound(&c, SIZE_MAX), 0);
		ck_assert_uint_eq(dml_codec_bound(&c, SIZE_MAX / 2), 0);
		ck_assert_uint_gt(dml_codec_bound(&c, 1), 0);
	}
}
END_TEST

/* ------------------------------------------------------------------ */
/* Half precision. */

static uint32_t bits_of(float f)
{
	uint32_t u;

	memcpy(&u, &f, sizeof(u));
	return u;
}

static float float_of(uint32_t u)
{
	float f;

	memcpy(&f, &u, sizeof(f));
	return f;
}

/* IEEE half bits of a finite f, to nearest even (the FPU's default rounding
 * of rint), saturated: worked out in double, where every step is exact. */
static uint16_t half_reference(float f)
{
	uint16_t sign = signbit(f) ? 0x8000 : 0;
	double a = fabs((double)f), m;
	int e;

	if (a < ldexp(1.0, -14))
		return sign | (uint16_t)rint(ldexp(a, 24)); /* 0x400 when it rounds up */
	frexp(a, &e);                                         /* a = [0.5, 1) * 2^e */
	m = rint(ldexp(a, 11 - e));                           /* [1024, 2048] */
	if (m == 2048) {
		m = 1024;
		e++;
	}
	if (e - 1 > 15)
		return sign | 0x7bff;
	return sign | (uint16_t)((e - 1 + 15) << 10) | (uint16_t)(m - 1024);
}

START_TEST(test_half_every_finite_bits)
{
	for (uint32_t h = 0; h < 0x10000; h++) {
		float f = dml_half_to_float((uint16_t)h);

		if ((h & 0x7c00) == 0x7c00) {
			ck_assert(!!isinf(f) == ((h & 0x3ff) == 0));
			ck_assert(!!isnan(f) == ((h & 0x3ff) != 0));
			continue;
		}
		ck_assert_msg(dml_float_to_half(f) == h, "half 0x%04x -> %a -> 0x%04x", h,
			      (double)f, dml_float_to_half(f));
		ck_assert_uint_eq(half_reference(f), h);
	}
}
END_TEST

START_TEST(test_half_values)
{
	ck_assert_float_eq(dml_half_to_float(0x3c00), 1.0f);
	ck_assert_float_eq(dml_half_to_float(0xc000), -2.0f);
	ck_assert_float_eq(dml_half_to_float(0x7bff), 65504.0f);
	ck_assert_float_eq(dml_half_to_float(0x0400), ldexpf(1, -14));
	ck_assert_float_eq(dml_half_to_float(0x0001), ldexpf(1, -24));
	ck_assert_float_eq(dml_half_to_float(0x03ff), ldexpf(1023, -24));
	ck_assert(dml_half_to_float(0x8000) == 0 && signbit(dml_half_to_float(0x8000)));
	ck_assert(dml_half_to_float(0x0000) == 0 && !signbit(dml_half_to_float(0x0000)));
}
END_TEST

START_TEST(test_half_rounding)
{
	static const struct {
		float f;
		uint16_t h;
	} cases[] = {
		/* ulp at 1 is 2^-10: a tie goes to the even mantissa */
		{ 1.0f + 0x1p-11f, 0x3c00 },
		{ 1.0f + 3 * 0x1p-11f, 0x3c02 },
		{ 1.0f + 0x1p-11f + 0x1p-20f, 0x3c01 },
		{ 1.0f + 0x1p-11f - 0x1p-20f, 0x3c00 },
		{ -(1.0f + 0x1p-11f), 0xbc00 },
		{ -(1.0f + 3 * 0x1p-11f), 0xbc02 },
		/* a mantissa that rounds up into the next exponent */
		{ 0x1p-14f * (2.0f - 0x1p-11f), 0x0800 },
		{ 2047.5f, 0x6800 }, /* 2047.5 is a tie between 2047 and 2048: 2048 */
		/* saturated, never infinite */
		{ 1e6f, 0x7bff }, { -1e6f, 0xfbff }, { 65504.0f, 0x7bff },
		{ 65519.0f, 0x7bff }, { 65520.0f, 0x7bff }, { 3.4e38f, 0x7bff },
		{ INFINITY, 0x7bff }, { -INFINITY, 0xfbff },
		/* subnormal halves */
		{ 0x1p-24f, 0x0001 }, { -0x1p-24f, 0x8001 }, { 0x1p-15f, 0x0200 },
		{ 0x1p-24f * 3, 0x0003 },
		{ 0x1p-25f * 3, 0x0002 },            /* 1.5 subnormal ulps: tie to even */
		{ 0x1p-24f * 1023.5f, 0x0400 },       /* tie into the smallest normal */
		{ 0x1p-25f + 0x1p-40f, 0x0001 },      /* just over half of the smallest */
		/* half the smallest subnormal and below: zero, with the sign */
		{ 0x1p-25f, 0x0000 }, { -0x1p-25f, 0x8000 }, { 0x1p-26f, 0x0000 },
		{ -0x1p-26f, 0x8000 }, { 1e-30f, 0x0000 }, { -1e-45f, 0x8000 },
		{ 0.0f, 0x0000 }, { -0.0f, 0x8000 },
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
		ck_assert_msg(dml_float_to_half(cases[i].f) == cases[i].h,
			      "%a -> 0x%04x, want 0x%04x", (double)cases[i].f,
			      dml_float_to_half(cases[i].f), cases[i].h);
}
END_TEST

/* Random float bit patterns over every exponent, against the reference. */
START_TEST(test_half_random_against_reference)
{
	uint64_t rng = 12345;

	for (int i = 0; i < 400000; i++) {
		uint32_t u;
		float f;

		rng = rng * 6364136223846793005ull + 1442695040888963407ull;
		u = (uint32_t)(rng >> 32);
		/* half of them in and near the half range, where it matters */
		if (i & 1)
			u = (u & 0x807fffffu) | ((uint32_t)(96 + (rng >> 20) % 64) << 23);
		f = float_of(u);
		if (!isfinite(f))
			continue;
		ck_assert_msg(dml_float_to_half(f) == half_reference(f), "%a (0x%08x) -> 0x%04x, want 0x%04x",
			      (double)f, bits_of(f), dml_float_to_half(f), half_reference(f));
	}
}
END_TEST

/*
 * A tensor's fp16 encoding (eight at a time with the CPU's conversion where
 * it has one) gives each value's dml_float_to_half bits, saturation, ties
 * and subnormals included, and with a residual leaves v - decoded exactly.
 */
START_TEST(test_half_tensor_matches_scalar)
{
	enum { N = 4099 };
	static float x[N], r[N], r0[N];
	struct dml_codec c = codec_of("fp16");
	uint64_t rng = 777;
	uint8_t *enc;
	size_t len;

	for (size_t i = 0; i < N; i++) {
		uint32_t u;

		rng = rng * 6364136223846793005ull + 1442695040888963407ull;
		u = (uint32_t)(rng >> 32);
		u = (u & 0x807fffffu) | ((uint32_t)(98 + (rng >> 20) % 48) << 23);
		if (i % 5 == 0)
			u = (u & 0xffffe000u) | 0x1000u;   /* a tie at half's precision */
		x[i] = float_of(u);
		r0[i] = (i % 3 == 0) ? x[i] * 0x1p-12f : 0.0f;
	}
	x[7] = 65520.0f;
	x[8] = -1e30f;
	enc = codec_encode_exact(&c, x, N, NULL, &len);
	for (size_t i = 0; i < N; i++)
		ck_assert_msg(codec_get_le(enc + 2 * i, 2) == dml_float_to_half(x[i]),
			      "value %zu %a: 0x%04x, want 0x%04x", i, (double)x[i],
			      (unsigned)codec_get_le(enc + 2 * i, 2), dml_float_to_half(x[i]));
	free(enc);
	memcpy(r, r0, sizeof(r));
	enc = codec_encode_exact(&c, x, N, r, &len);
	for (size_t i = 0; i < N; i++) {
		float v = x[i] + r0[i];
		uint16_t h = dml_float_to_half(v);

		ck_assert_uint_eq(codec_get_le(enc + 2 * i, 2), h);
		ck_assert_msg(r[i] == v - dml_half_to_float(h), "residual %zu", i);
	}
	free(enc);
}
END_TEST

static Suite *codec_suite(void)
{
	Suite *s = suite_create("codec");
	TCase *names = tcase_create("names");
	TCase *half = tcase_create("half");

	tcase_add_test(names, test_parse_valid);
	tcase_add_test(names, test_parse_refused);
	tcase_add_test(names, test_bound_too_large);
	suite_add_tcase(s, names);
	tcase_add_test(half, test_half_every_finite_bits);
	tcase_add_test(half, test_half_values);
	tcase_add_test(half, test_half_rounding);
	tcase_add_test(half, test_half_random_against_reference);
	tcase_add_test(half, test_half_tensor_matches_scalar);
	tcase_set_timeout(half, 60);
	suite_add_tcase(s, half);
	suite_add_tcase(s, codec_trip_tcase());
	suite_add_tcase(s, codec_feedback_tcase());
	suite_add_tcase(s, codec_hostile_tcase());
	return s;
}

int main(void)
{
	return dml_check_run(codec_suite());
}
