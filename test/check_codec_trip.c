/*
 * Codec round trips and error feedback (proto/codec.h): every codec on
 * random tensors of several sizes, each decoded value within the codec's
 * stated error and written (the output is poisoned first), the encoding's
 * length as the header gives it; extreme finite values that must still
 * decode; and error feedback that, summed over many encodings, loses
 * nothing but what the residual still holds.
 */
#include <check.h>
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "test/check_codec.h"
#include "proto/codec.h"
#include "proto/dml_error.h"

static size_t int8_blocks(size_t n)
{
	return (n + DML_CODEC_INT8_BLOCK - 1) / DML_CODEC_INT8_BLOCK;
}

/* ceil(F n), at least one, of the nnz values that are not zero (a zero sent
 * reads as one not sent): F n in double or in float, which may differ by
 * one where F n is within rounding of an integer. */
static int topk_count_ok(const struct dml_codec *c, size_t n, size_t nnz, size_t count)
{
	double kd = fmax(1, ceil((double)c->topk_fraction * (double)n));
	double kf = fmax(1, ceilf(c->topk_fraction * (float)n));

	return count == (size_t)fmin(kd, (double)nnz) || count == (size_t)fmin(kf, (double)nnz);
}

static void check_none(const float *x, const float *d, size_t n, size_t len)
{
	ck_assert_uint_eq(len, 4 * n);
	ck_assert(n == 0 || memcmp(x, d, n * sizeof(float)) == 0);
}

static void check_half(const float *x, const float *d, size_t n, size_t len)
{
	ck_assert_uint_eq(len, 2 * n);
	for (size_t i = 0; i < n; i++) {
		double err = fabs((double)d[i] - x[i]);

		if (fabsf(x[i]) >= 0x1p-14f)
			ck_assert_msg(err <= 0x1p-11 * fabsf(x[i]), "fp16 %a -> %a", (double)x[i],
				      (double)d[i]);
		else
			ck_assert_msg(err <= 0x1p-25, "fp16 %a -> %a", (double)x[i], (double)d[i]);
	}
}

static void check_bf16(const float *x, const float *d, size_t n, size_t len)
{
	ck_assert_uint_eq(len, 2 * n);
	for (size_t i = 0; i < n; i++)
		ck_assert_msg(fabs((double)d[i] - x[i]) <= 0x1p-8 * fabsf(x[i]), "bf16 %a -> %a",
			      (double)x[i], (double)d[i]);
}

static void check_int8(const float *x, const float *d, size_t n, size_t len)
{
	ck_assert_uint_eq(len, n + 4 * int8_blocks(n));
	for (size_t b = 0; b < n; b += DML_CODEC_INT8_BLOCK) {
		size_t end = b + DML_CODEC_INT8_BLOCK < n ? b + DML_CODEC_INT8_BLOCK : n;
		float max = 0, scale;

		for (size_t i = b; i < end; i++)
			max = fmaxf(max, fabsf(x[i]));
		scale = max / 127;
		for (size_t i = b; i < end; i++) {
			double err = fabs((double)d[i] - x[i]);

			if (max == 0)
				ck_assert_msg(d[i] == 0, "a zero block decodes %a", (double)d[i]);
			ck_assert_msg(err <= scale * (0.5 + 1e-5) + 1e-6 * max,
				      "int8 block %zu: %a -> %a, scale %a", b / DML_CODEC_INT8_BLOCK,
				      (double)x[i], (double)d[i], (double)scale);
		}
	}
}

static void check_topk(const struct dml_codec *c, const float *x, const float *d, size_t n)
{
	float min_sent = INFINITY, max_unsent = 0, want;
	size_t sent = 0, nnz = 0;

	for (size_t i = 0; i < n; i++) {
		nnz += x[i] != 0;
		if (d[i] == 0) {
			max_unsent = fmaxf(max_unsent, fabsf(x[i]));
			continue;
		}
		/* topk16 sends the value in fp16, as the fp16 codec would */
		want = c->kind == DML_CODEC_TOPK16 ? dml_half_to_float(dml_float_to_half(x[i]))
						   : x[i];
		ck_assert_msg(d[i] == want, "%s sends %a as %a", c->kind == DML_CODEC_TOPK16 ?
			      "topk16" : "topk", (double)x[i], (double)d[i]);
		min_sent = fminf(min_sent, fabsf(x[i]));
		sent++;
	}
	ck_assert_msg(topk_count_ok(c, n, nnz, sent), "topk:%g of %zu sent %zu",
		      (double)c->topk_fraction, n, sent);
	ck_assert_msg(n == 0 || min_sent >= max_unsent, "sent %a while %a stayed",
		      (double)min_sent, (double)max_unsent);
}

/* The decoding d of x, checked by the rules of codec c. */
static void check_decoded(const struct dml_codec *c, const float *x, const float *d, size_t n,
			  size_t len)
{
	switch (c->kind) {
	case DML_CODEC_NONE: check_none(x, d, n, len); break;
	case DML_CODEC_FP16: check_half(x, d, n, len); break;
	case DML_CODEC_BF16: check_bf16(x, d, n, len); break;
	case DML_CODEC_INT8: check_int8(x, d, n, len); break;
	case DML_CODEC_TOPK:
	case DML_CODEC_TOPK16: check_topk(c, x, d, n); break;
	}
}

START_TEST(test_round_trip)
{
	uint64_t rng = 99 + (uint64_t)_i;
	struct dml_codec c = codec_of(codec_names[_i]);

	for (size_t s = 0; s < codec_nsizes; s++) {
		size_t n = codec_sizes[s], len;
		float *x = codec_poisoned(n), *d;
		uint8_t *enc;

		codec_fill_normal(x, n, 1.0, &rng);
		/* an all-zero int8 block, and a block of a larger scale */
		for (size_t i = 256; i < 512 && i < n; i++)
			x[i] = 0;
		for (size_t i = 512; i < 768 && i < n; i++)
			x[i] *= 1000;
		enc = codec_encode_exact(&c, x, n, NULL, &len);
		d = codec_decode_ok(&c, enc, len, n);
		check_decoded(&c, x, d, n, len);
		free(enc);
		free(d);
		free(x);
	}
}
END_TEST

/*
 * topk on tensors big enough for the sampled threshold (16,384 values and
 * more): random values; values whose sampled places hold the largest ones
 * while k is larger than the sample, so the guess is too high and every
 * value is ranked; ties at the threshold. And a NaN is refused.
 */
START_TEST(test_topk_large)
{
	static const struct { const char *codec; size_t n; int shape; } cases[] = {
		{ "topk:0.01", 100000, 0 }, { "topk:0.001", 1 << 20, 0 },
		{ "topk:0.5", 100000, 1 }, { "topk:0.1", 65536, 2 },
		{ "topk16:0.04", 201000, 0 }, { "topk16:0.5", 100000, 1 },
	};
	uint64_t rng = 4242;

	for (size_t t = 0; t < sizeof(cases) / sizeof(cases[0]); t++) {
		struct dml_codec c = codec_of(cases[t].codec);
		size_t n = cases[t].n, len;
		float *x = codec_poisoned(n), *d;
		uint8_t *enc;

		codec_fill_normal(x, n, 1.0, &rng);
		for (size_t i = 0; cases[t].shape == 1 && i < n; i++)
			x[i] = i % (n / 4096) == 0 ? 10.0f : 1.0f + (float)(i % 7);
		for (size_t i = 0; cases[t].shape == 2 && i < n; i++)
			x[i] = (float)(i % 10);   /* 10% at the top value, many ties below */
		enc = codec_encode_exact(&c, x, n, NULL, &len);
		d = codec_decode_ok(&c, enc, len, n);
		check_topk(&c, x, d, n);
		free(enc);
		free(d);
		free(x);
	}
	{
		struct dml_codec c = codec_of("topk:0.01");
		float *x = codec_poisoned(20000);
		size_t bound = dml_codec_bound(&c, 20000), len;
		uint8_t *buf = malloc(bound);

		codec_fill_normal(x, 20000, 1.0, &rng);
		x[12345] = NAN;
		ck_assert_int_eq(dml_codec_encode(&c, x, 20000, NULL, buf, bound, &len), DML_EINVAL);
		free(buf);
		free(x);
	}
}
END_TEST

/* The bytes on the wire are little-endian, as none's are. */
START_TEST(test_wire_little_endian)
{
	static const struct {
		const char *codec;
		uint8_t bytes[4];
		size_t len;
	} one[] = {
		{ "none", { 0x00, 0x00, 0x80, 0x3f }, 4 },
		{ "fp16", { 0x00, 0x3c }, 2 },
		{ "bf16", { 0x80, 0x3f }, 2 },
	};
	float x = 1.0f;

	for (size_t i = 0; i < sizeof(one) / sizeof(one[0]); i++) {
		struct dml_codec c = codec_of(one[i].codec);
		size_t len;
		uint8_t *enc = codec_encode_exact(&c, &x, 1, NULL, &len);

		ck_assert_uint_eq(len, one[i].len);
		ck_assert_msg(memcmp(enc, one[i].bytes, len) == 0, "%s: 1.0 as %02x %02x",
			      one[i].codec, enc[0], enc[1]);
		free(enc);
	}
}
END_TEST

START_TEST(test_bf16_rounding)
{
	float x[] = { 1.0f + 0x1p-8f, 1.0f + 3 * 0x1p-8f, 1.0f + 0x1p-8f + 0x1p-20f, -2.0f - 0x1p-7f };
	float want[] = { 1.0f, 1.0f + 0x1p-6f, 1.0f + 0x1p-7f, -2.0f };
	struct dml_codec c = codec_of("bf16");
	size_t len;
	uint8_t *enc = codec_encode_exact(&c, x, 4, NULL, &len);
	float *d = codec_decode_ok(&c, enc, len, 4);

	for (size_t i = 0; i < 4; i++)
		ck_assert_msg(d[i] == want[i], "bf16 %a -> %a, want %a", (double)x[i],
			      (double)d[i], (double)want[i]);
	free(enc);
	free(d);
}
END_TEST

/* The largest and smallest finite floats still make an encoding that
 * decodes: saturated or rounded, never infinite. */
START_TEST(test_extreme_values)
{
	enum { N = 600 };
	struct dml_codec c = codec_of(codec_names[_i]);
	float x[N], *d;
	uint8_t *enc;
	size_t len;

	for (size_t i = 0; i < N; i++)
		x[i] = (i % 7 == 0) ? FLT_MAX : (i % 7 == 1) ? -FLT_MAX : (i % 7 == 2) ? FLT_MIN
			: (i % 7 == 3) ? -0.0f : (float)i;
	/* the last block holds only the smallest subnormal floats */
	for (size_t i = 512; i < N; i++)
		x[i] = (i & 1) ? FLT_TRUE_MIN : -FLT_TRUE_MIN;
	enc = codec_encode_exact(&c, x, N, NULL, &len);
	d = codec_decode_ok(&c, enc, len, N);
	if (c.kind == DML_CODEC_FP16) {
		ck_assert_float_eq(d[0], 65504.0f);
		ck_assert_float_eq(d[1], -65504.0f);
	}
	if (c.kind == DML_CODEC_NONE)
		ck_assert(memcmp(x, d, sizeof(x)) == 0);
	free(enc);
	free(d);
}
END_TEST

START_TEST(test_cap_too_small)
{
	struct dml_codec c = codec_of(codec_names[_i]);
	static const size_t sizes[] = { 1, 257, 1000 };
	uint64_t rng = 5;

	for (size_t s = 0; s < 3; s++) {
		size_t n = sizes[s], len, got = 0;
		float *x = codec_poisoned(n);
		uint8_t *enc, *out;

		codec_fill_normal(x, n, 1.0, &rng);
		enc = codec_encode_exact(&c, x, n, NULL, &len);
		out = malloc(len);
		ck_assert_ptr_nonnull(out);
		ck_assert_int_eq(dml_codec_encode(&c, x, n, NULL, out, len - 1, &got), DML_EINVAL);
		ck_assert_int_eq(dml_codec_encode(&c, x, n, NULL, out, 0, &got), DML_EINVAL);
		free(out);
		free(enc);
		free(x);
	}
}
END_TEST

/*
 * dml_codec_decode_add: the decoding added to what out holds (dense codecs:
 * every value; topk and topk16: only those sent, a -0 not sent stays -0),
 * and bytes one short leave out as it was.
 */
START_TEST(test_decode_add)
{
	enum { N = 1000 };
	struct dml_codec c = codec_of(codec_names[_i]);
	float *x = codec_poisoned(N), *base = codec_poisoned(N), *out = codec_poisoned(N), *d;
	uint64_t rng = 17 + (uint64_t)_i;
	size_t len;
	uint8_t *enc;

	codec_fill_normal(x, N, 1.0, &rng);
	codec_fill_normal(base, N, 3.0, &rng);
	for (size_t i = 0; i < N; i += 10)
		base[i] = -0.0f;
	enc = codec_encode_exact(&c, x, N, NULL, &len);
	d = codec_decode_ok(&c, enc, len, N);
	memcpy(out, base, N * sizeof(float));
	ck_assert_int_eq(dml_codec_decode_add(&c, enc, len, N, out), 0);
	for (size_t i = 0; i < N; i++) {
		float want = dml_codec_sparse(c.kind) && d[i] == 0 ? base[i] : base[i] + d[i];

		ck_assert_msg(memcmp(&out[i], &want, sizeof(float)) == 0, "%s value %zu: %a, "
			      "want %a", codec_names[_i], i, (double)out[i], (double)want);
	}
	memcpy(out, base, N * sizeof(float));
	ck_assert_int_eq(dml_codec_decode_add(&c, enc, len - 1, N, out), DML_ESHAPE);
	ck_assert(memcmp(out, base, N * sizeof(float)) == 0);
	free(enc);
	free(d);
	free(out);
	free(base);
	free(x);
}
END_TEST

TCase *codec_trip_tcase(void)
{
	TCase *t = tcase_create("trip");

	tcase_add_loop_test(t, test_round_trip, 0, (int)codec_nnames);
	tcase_add_test(t, test_wire_little_endian);
	tcase_add_test(t, test_bf16_rounding);
	tcase_add_loop_test(t, test_extreme_values, 0, (int)codec_nnames);
	tcase_add_loop_test(t, test_cap_too_small, 0, (int)codec_nnames);
	tcase_add_test(t, test_topk_large);
	tcase_add_loop_test(t, test_decode_add, 0, (int)codec_nnames);
	tcase_set_timeout(t, 60); /* slow under the sanitizers */
	return t;
}

/* ------------------------------------------------------------------ */
/* Error feedback. */

static const char *const lossy_names[] = { "fp16", "bf16", "int8", "topk:0.01", "topk:0.25",
					   "topk16:0.01", "topk16:0.25" };

/* Over T encodings with a residual, the decoded sum plus the residual left
 * is the input's sum; after each, the residual is what was not carried. */
START_TEST(test_feedback_sums)
{
	enum { N = 1000, T = 50 };
	struct dml_codec c = codec_of(lossy_names[_i]);
	double *sum_x = calloc(N, sizeof(double)), *sum_d = calloc(N, sizeof(double));
	double *sum_abs = calloc(N, sizeof(double));
	float *x = codec_poisoned(N), *r = calloc(N, sizeof(float)), *before = codec_poisoned(N);
	uint64_t rng = 777;

	ck_assert(sum_x && sum_d && sum_abs && r);
	ck_assert_int_eq(dml_codec_lossy(&c), 1);
	for (int t = 0; t < T; t++) {
		size_t len;
		uint8_t *enc;
		float *d;

		codec_fill_normal(x, N, pow(10.0, (t % 5) - 2), &rng);
		memcpy(before, r, N * sizeof(float));
		enc = codec_encode_exact(&c, x, N, r, &len);
		d = codec_decode_ok(&c, enc, len, N);
		for (size_t i = 0; i < N; i++) {
			float v = x[i] + before[i];

			ck_assert_msg(fabs((double)r[i] - ((double)v - d[i])) <= 0x1p-20 * fabsf(v),
				      "step %d value %zu: x+r %a decoded %a left %a", t, i,
				      (double)v, (double)d[i], (double)r[i]);
			sum_x[i] += x[i];
			sum_d[i] += d[i];
			sum_abs[i] += fabsf(x[i]);
		}
		free(enc);
		free(d);
	}
	for (size_t i = 0; i < N; i++)
		ck_assert_msg(fabs(sum_d[i] + r[i] - sum_x[i]) <= 1e-4 * sum_abs[i] + 1e-30,
			      "%s value %zu: sent %.9g + left %.9g != %.9g", lossy_names[_i], i,
			      sum_d[i], (double)r[i], sum_x[i]);
	free(sum_x);
	free(sum_d);
	free(sum_abs);
	free(x);
	free(r);
	free(before);
}
END_TEST

/* topk sending one value of four each time: a value not sent grows in the
 * residual by its input each step until it is sent, and every value is
 * sent in its turn. */
START_TEST(test_feedback_topk_grows)
{
	enum { N = 4, T = 50 };
	const float x[N] = { 0.1f, 0.2f, 0.3f, 0.4f };
	struct dml_codec c = codec_of("topk:0.25");
	float r[N] = { 0 };
	int sends[N] = { 0 };

	for (int t = 0; t < T; t++) {
		float before[N];
		size_t len, sent = 0;
		uint8_t *enc;
		float *d;

		memcpy(before, r, sizeof(r));
		enc = codec_encode_exact(&c, x, N, r, &len);
		d = codec_decode_ok(&c, enc, len, N);
		for (size_t i = 0; i < N; i++) {
			float v = x[i] + before[i];

			if (d[i] != 0) {
				ck_assert_float_eq(d[i], v);
				ck_assert_float_eq(r[i], 0);
				sends[i]++;
				sent++;
			} else {
				ck_assert_float_eq(r[i], v);
				ck_assert_float_gt(r[i], before[i]);
			}
		}
		ck_assert_uint_eq(sent, 1);
		free(enc);
		free(d);
	}
	for (size_t i = 0; i < N; i++)
		ck_assert_msg(sends[i] > 0, "value %zu (%g a step) never sent in %d steps", i,
			      (double)x[i], T);
}
END_TEST

/* No residual: the same bytes as with a residual of zeros, x untouched. */
START_TEST(test_residual_null)
{
	enum { N = 1000 };
	struct dml_codec c = codec_of(codec_names[_i]);
	float *x = codec_poisoned(N), *copy, *zeros = calloc(N, sizeof(float)), *d;
	size_t len_null, len_zero;
	uint64_t rng = 31;
	uint8_t *with_null, *with_zero;

	ck_assert_ptr_nonnull(zeros);
	codec_fill_normal(x, N, 1.0, &rng);
	copy = (float *)codec_copy(x, N * sizeof(float));
	with_null = codec_encode_exact(&c, x, N, NULL, &len_null);
	ck_assert(memcmp(x, copy, N * sizeof(float)) == 0);
	d = codec_decode_ok(&c, with_null, len_null, N);
	check_decoded(&c, x, d, N, len_null);
	if (dml_codec_lossy(&c)) {
		with_zero = codec_encode_exact(&c, x, N, zeros, &len_zero);
		ck_assert_uint_eq(len_null, len_zero);
		ck_assert(memcmp(with_null, with_zero, len_null) == 0);
		free(with_zero);
	}
	free(with_null);
	free(d);
	free(copy);
	free(zeros);
	free(x);
}
END_TEST

TCase *codec_feedback_tcase(void)
{
	TCase *t = tcase_create("feedback");

	tcase_add_loop_test(t, test_feedback_sums, 0,
			    (int)(sizeof(lossy_names) / sizeof(lossy_names[0])));
	tcase_add_test(t, test_feedback_topk_grows);
	tcase_add_loop_test(t, test_residual_null, 0, (int)codec_nnames);
	tcase_set_timeout(t, 60); /* slow under the sanitizers */
	return t;
}
