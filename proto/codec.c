/*
 * Gradient and value codecs (codec.h): their names, the sizes of their
 * encodings, the checks of an encoding before it is decoded, and topk. The
 * per-value loops of fp16, bf16 and int8 are codec_kernels.c's.
 *
 * A decoder is handed bytes from the network: it must check the length and
 * every count and index before it reads or writes by them.
 */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proto/codec.h"
#include "proto/codec_internal.h"
#include "proto/dml_error.h"
#include "proto/finite.h"
#include "proto/util.h"

/* topk's encoding: a count, then (index, value) pairs. */
#define TOPK_HEAD 4u
#define TOPK_PAIR 8u

static const char *const codec_names[] = {
	[DML_CODEC_NONE] = "none", [DML_CODEC_FP16] = "fp16", [DML_CODEC_BF16] = "bf16",
	[DML_CODEC_INT8] = "int8", [DML_CODEC_TOPK] = "topk",
};

static int parse_fail(char *err, size_t errlen, const char *fmt, const char *s)
{
	if (errlen)
		snprintf(err, errlen, fmt, s);
	return DML_EINVAL;
}

int dml_codec_parse(const char *s, struct dml_codec *c, char *err, size_t errlen)
{
	static const char topk[] = "topk:";
	double f;
	char *end;

	if (!s || !c)
		return parse_fail(err, errlen, "%s", "no codec given");
	for (size_t k = 0; k < DML_ARRAY_LEN(codec_names); k++)
		if (k != DML_CODEC_TOPK && strcmp(s, codec_names[k]) == 0) {
			*c = (struct dml_codec){ .kind = (enum dml_codec_kind)k };
			return 0;
		}
	if (strncmp(s, topk, sizeof(topk) - 1) != 0)
		return parse_fail(err, errlen,
				  "codec '%s' is none of none, fp16, bf16, int8, topk:FRACTION", s);
	s += sizeof(topk) - 1;
	errno = 0;
	f = *s ? strtod(s, &end) : 0.0;
	if (!*s || *end || errno || !(f > 0.0 && f <= 1.0))
		return parse_fail(err, errlen,
				  "topk:%s: the fraction sent must be a number in (0, 1]", s);
	*c = (struct dml_codec){ .kind = DML_CODEC_TOPK, .topk_fraction = (float)f };
	return 0;
}

const char *dml_codec_format(const struct dml_codec *c, char *buf, size_t len)
{
	if (c->kind == DML_CODEC_TOPK)
		snprintf(buf, len, "topk:%g", (double)c->topk_fraction);
	else if ((size_t)c->kind < DML_ARRAY_LEN(codec_names))
		snprintf(buf, len, "%s", codec_names[c->kind]);
	else
		snprintf(buf, len, "codec %d", (int)c->kind);
	return buf;
}

int dml_codec_lossy(const struct dml_codec *c)
{
	return c->kind != DML_CODEC_NONE;
}

/* Values topk sends of n: ceil(F n), at least one, at most n. */
static size_t topk_count(const struct dml_codec *c, size_t n)
{
	double k = ceil((double)c->topk_fraction * (double)n);

	if (n == 0)
		return 0;
	return k < 1.0 ? 1 : k >= (double)n ? n : (size_t)k;
}

/* Bytes of an int8 encoding of n values. */
static size_t int8_bytes(size_t n)
{
	return n + (n + DML_CODEC_INT8_BLOCK - 1) / DML_CODEC_INT8_BLOCK * CODEC_SCALE_BYTES;
}

size_t dml_codec_bound(const struct dml_codec *c, size_t n)
{
	/* Limits far above any frame's, so no size below can overflow. */
	if (!c || n > UINT32_MAX)
		return 0;
	switch (c->kind) {
	case DML_CODEC_NONE:
		return n * sizeof(float);
	case DML_CODEC_FP16:
	case DML_CODEC_BF16:
		return n * sizeof(uint16_t);
	case DML_CODEC_INT8:
		return int8_bytes(n);
	case DML_CODEC_TOPK:
		return TOPK_HEAD + topk_count(c, n) * TOPK_PAIR;
	}
	return 0;
}

int dml_codec_len_ok(enum dml_codec_kind kind, size_t n, size_t len)
{
	struct dml_codec c = { .kind = kind, .topk_fraction = 1.0f };

	switch (kind) {
	case DML_CODEC_TOPK:
		return n <= UINT32_MAX && len >= TOPK_HEAD && (len - TOPK_HEAD) % TOPK_PAIR == 0 &&
		       (len - TOPK_HEAD) / TOPK_PAIR <= n;
	case DML_CODEC_NONE:
	case DML_CODEC_FP16:
	case DML_CODEC_BF16:
	case DML_CODEC_INT8:
		return (n == 0 || len != 0) && len == dml_codec_bound(&c, n);
	}
	return 0;
}

/* ---- topk -------------------------------------------------------------- */

static inline void swap_floats(float *a, float *b)
{
	float t = *a;

	*a = *b;
	*b = t;
}

/*
 * The k-th largest (1-based) of the n magnitudes in m, which it reorders:
 * a quickselect with a median-of-three pivot and a three-way partition, so
 * runs of equal values (zeros, most often) cost no extra rounds.
 */
static float kth_largest(float *m, size_t n, size_t k)
{
	size_t lo = 0, hi = n, want = k - 1;  /* the answer's place, descending */

	for (;;) {
		size_t mid = lo + (hi - lo) / 2, lt = lo, i = lo, gt = hi;
		float a = m[lo], b = m[mid], z = m[hi - 1];
		float p = a > b ? (b > z ? b : a > z ? z : a) : (a > z ? a : b > z ? z : b);

		/* [lo, lt) > p, [lt, i) == p, [gt, hi) < p */
		while (i < gt) {
			if (m[i] > p)
				swap_floats(&m[i++], &m[lt++]);
			else if (m[i] < p)
				swap_floats(&m[i], &m[--gt]);
			else
				i++;
		}
		if (want < lt)
			hi = lt;
		else if (want >= gt)
			lo = gt;
		else
			return p;
	}
}

/* Values sampled to guess a threshold, on tensors of 4x as many or more. */
#define TOPK_SAMPLE 4096u

/* How many of v[0..n) are at least t in magnitude. */
static size_t count_at_least(const float *v, size_t n, float t)
{
	size_t c = 0;

	for (size_t i = 0; i < n; i++)
		c += fabsf(v[i]) >= t;
	return c;
}

/*
 * The k-th largest magnitude of v (finite values). On a big tensor a
 * strided sample guesses a threshold a little under it, so that only the
 * values above the guess, about 1.25 k, go through the quickselect; a guess
 * that proves too high (fewer than k above it) falls back to every value.
 */
static int topk_threshold(const float *v, size_t n, size_t k, float *t)
{
	float guess = 0.0f, *m;
	size_t c = n;

	if (n >= 4 * TOPK_SAMPLE) {
		float sample[TOPK_SAMPLE];
		size_t stride = n / TOPK_SAMPLE;
		size_t at = (size_t)((double)k * TOPK_SAMPLE / (double)n * 1.25) + 16;

		for (size_t j = 0; j < TOPK_SAMPLE; j++)
			sample[j] = fabsf(v[j * stride]);
		guess = kth_largest(sample, TOPK_SAMPLE, at < TOPK_SAMPLE ? at : TOPK_SAMPLE);
		c = count_at_least(v, n, guess);
		if (c < k) {
			guess = 0.0f;
			c = n;
		}
	}
	m = malloc(c * sizeof(float));
	if (!m)
		return DML_ENOMEM;
	for (size_t i = 0, j = 0; i < n; i++)
		if (fabsf(v[i]) >= guess)
			m[j++] = fabsf(v[i]);
	*t = kth_largest(m, c, k);
	free(m);
	return 0;
}

static int topk_encode(const struct dml_codec *c, const float *x, size_t n, float *r,
		       uint8_t *out)
{
	size_t k = topk_count(c, n), above = 0, ties, sent = 0;
	const float *v = r ? r : x;
	float t;
	int rc;

	dml_store_le32(out, (uint32_t)k);
	if (k == 0)
		return 0;
	for (size_t i = 0; r && i < n; i++)
		r[i] += x[i];
	/* A NaN has no magnitude to rank: such a tensor is refused. */
	if (!dml_values_finite(v, n))
		return DML_EINVAL;
	if ((rc = topk_threshold(v, n, k, &t)) != 0)
		return rc;
	/* Every value above the threshold, then the first ones equal to it. */
	for (size_t i = 0; i < n; i++)
		above += fabsf(v[i]) > t;
	ties = k - above;
	out += TOPK_HEAD;
	for (size_t i = 0; i < n && sent < k; i++) {
		float a = fabsf(v[i]);

		if (a > t || (a == t && ties > 0)) {
			ties -= a == t;
			dml_store_le32(out, (uint32_t)i);
			memcpy(out + 4, &v[i], sizeof(float));
			out += TOPK_PAIR;
			sent++;
			if (r)
				r[i] = 0.0f;   /* sent whole */
		}
	}
	return 0;
}

static int topk_decode(const uint8_t *in, size_t len, size_t n, float *out)
{
	size_t k;

	if (len < TOPK_HEAD)
		return DML_ESHAPE;
	k = dml_load_le32(in);
	if (k > n || len != TOPK_HEAD + k * TOPK_PAIR)
		return DML_ESHAPE;
	memset(out, 0, n * sizeof(float));
	in += TOPK_HEAD;
	for (size_t j = 0, next = 0; j < k; j++, in += TOPK_PAIR) {
		size_t i = dml_load_le32(in);
		float v;

		memcpy(&v, in + 4, sizeof(v));
		if (i < next || i >= n || !dml_values_finite(&v, 1))
			return DML_ESHAPE;   /* out of order, repeated, out of range */
		out[i] = v;
		next = i + 1;
	}
	return 0;
}

/* ---- dispatch ---------------------------------------------------------- */

int dml_codec_encode(const struct dml_codec *c, const float *x, size_t n,
		     float *residual, void *out, size_t cap, size_t *len)
{
	size_t need = c ? dml_codec_bound(c, n) : 0;
	int rc = 0;

	if (!c || !len || (n > 0 && (!x || !out || need == 0)) || cap < need ||
	    (need > 0 && !out) || (residual && residual == x))
		return DML_EINVAL;
	switch (c->kind) {
	case DML_CODEC_NONE:
		if (residual) {
			for (size_t i = 0; i < n; i++)
				residual[i] += x[i];
			memcpy(out, residual, n * sizeof(float));
			memset(residual, 0, n * sizeof(float));   /* all sent */
		} else if (n > 0) {
			memcpy(out, x, n * sizeof(float));
		}
		break;
	case DML_CODEC_FP16:
		codec_fp16_encode(x, n, residual, out);
		break;
	case DML_CODEC_BF16:
		codec_bf16_encode(x, n, residual, out);
		break;
	case DML_CODEC_INT8:
		codec_int8_encode(x, n, residual, out);
		break;
	case DML_CODEC_TOPK:
		rc = topk_encode(c, x, n, residual, out);
		break;
	default:
		return DML_EINVAL;
	}
	if (rc == 0)
		*len = need;
	return rc;
}

int dml_codec_decode(const struct dml_codec *c, const void *in, size_t len, size_t n,
		     float *out)
{
	size_t need;

	if (!c || (n > 0 && !out) || (len > 0 && !in) || n > UINT32_MAX)
		return DML_EINVAL;
	if (c->kind == DML_CODEC_TOPK)
		return topk_decode(in, len, n, out);
	need = dml_codec_bound(c, n);
	if (len != need)
		return DML_ESHAPE;
	switch (c->kind) {
	case DML_CODEC_NONE:
		memcpy(out, in, len);
		return dml_values_finite(out, n) ? 0 : DML_ESHAPE;
	case DML_CODEC_FP16:
		return codec_fp16_decode(in, n, out) ? DML_ESHAPE : 0;
	case DML_CODEC_BF16:
		return codec_bf16_decode(in, n, out) ? DML_ESHAPE : 0;
	case DML_CODEC_INT8:
		return codec_int8_decode(in, n, out) ? DML_ESHAPE : 0;
	default:
		return DML_EINVAL;
	}
}
