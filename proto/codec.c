/*
 * Gradient and value codecs (codec.h): their names, the sizes of their
 * encodings, the checks of an encoding before it is decoded, and topk. The
 * per-value loops of fp16, bf16 and int8 are codec_kernels.c's.
 *
 * A decoder is handed bytes from the network: it must check the length and
 * every count and index before it reads or writes by them.
 */
#include <errno.h>
#include <float.h>
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
/* topk16's pairs: a varint gap (5 bytes at most: indices are 32-bit) and a
 * half. */
#define TOPK16_GAP_MAX 5u
#define TOPK16_PAIR_MAX (TOPK16_GAP_MAX + 2u)

static const char *const codec_names[] = {
	[DML_CODEC_NONE] = "none", [DML_CODEC_FP16] = "fp16", [DML_CODEC_BF16] = "bf16",
	[DML_CODEC_INT8] = "int8", [DML_CODEC_TOPK] = "topk", [DML_CODEC_TOPK16] = "topk16",
};

static int parse_fail(char *err, size_t errlen, const char *fmt, const char *s)
{
	if (errlen)
		snprintf(err, errlen, fmt, s);
	return DML_EINVAL;
}

int dml_codec_parse(const char *s, struct dml_codec *c, char *err, size_t errlen)
{
	enum dml_codec_kind kind = DML_CODEC_TOPK;
	const char *name = s, *colon;
	double f;
	char *end;

	if (!s || !c)
		return parse_fail(err, errlen, "%s", "no codec given");
	for (size_t k = 0; k < DML_ARRAY_LEN(codec_names); k++)
		if (!dml_codec_sparse((enum dml_codec_kind)k) && strcmp(s, codec_names[k]) == 0) {
			*c = (struct dml_codec){ .kind = (enum dml_codec_kind)k };
			return 0;
		}
	colon = strchr(s, ':');
	if (colon && (size_t)(colon - s) == strlen("topk16") && strncmp(s, "topk16", 6) == 0)
		kind = DML_CODEC_TOPK16;
	else if (!colon || (size_t)(colon - s) != strlen("topk") || strncmp(s, "topk", 4) != 0)
		return parse_fail(err, errlen, "codec '%s' is none of none, fp16, bf16, int8, "
				  "topk:FRACTION, topk16:FRACTION", s);
	s = colon + 1;
	errno = 0;
	f = *s ? strtod(s, &end) : 0.0;
	if (!*s || *end || errno || !(f > 0.0 && f <= 1.0))
		return parse_fail(err, errlen,
				  "%s: the fraction sent must be a number in (0, 1]", name);
	*c = (struct dml_codec){ .kind = kind, .topk_fraction = (float)f };
	return 0;
}

const char *dml_codec_format(const struct dml_codec *c, char *buf, size_t len)
{
	if (dml_codec_sparse(c->kind))
		snprintf(buf, len, "%s:%g", codec_names[c->kind], (double)c->topk_fraction);
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
	case DML_CODEC_TOPK16:
		return TOPK_HEAD + topk_count(c, n) * TOPK16_PAIR_MAX;
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
	case DML_CODEC_TOPK16:
		/* The count and the pairs' widths are read from the bytes. */
		return n <= UINT32_MAX && len >= TOPK_HEAD &&
		       (len - TOPK_HEAD) / TOPK16_PAIR_MAX <= n;
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

/*
 * A magnitude a little under the k-th largest of v, guessed from a strided
 * sample, so that about 1.25 k values are at least it; 0 (every value) on
 * a tensor too small to sample.
 */
static float topk_guess(const float *v, size_t n, size_t k)
{
	float sample[TOPK_SAMPLE];
	size_t stride = n / TOPK_SAMPLE;
	size_t at = (size_t)((double)k * TOPK_SAMPLE / (double)n * 1.25) + 16;

	if (n < 4 * TOPK_SAMPLE)
		return 0.0f;
	for (size_t j = 0; j < TOPK_SAMPLE; j++)
		sample[j] = fabsf(v[j * stride]);
	return kth_largest(sample, TOPK_SAMPLE, at < TOPK_SAMPLE ? at : TOPK_SAMPLE);
}

/*
 * The candidates of v for its k largest magnitudes: the indices, rising,
 * of every value at least guess in magnitude (at most cap of them), their
 * magnitudes alongside; the count, or SIZE_MAX when a value is not finite
 * (a NaN has no rank) or more than cap qualify. One pass over v: the
 * finite check rides along.
 */
static size_t topk_candidates(const float *v, size_t n, float guess, size_t cap,
			      uint32_t *idx, float *mag)
{
	size_t c = 0;
	int bad = 0;

	/* Written always, kept when it qualifies: no branch to mispredict on
	 * the values (idx and mag hold cap + 1, for the last write). */
	for (size_t i = 0; i < n; i++) {
		float a = fabsf(v[i]);

		bad |= !(a <= FLT_MAX);
		idx[c] = (uint32_t)i;
		mag[c] = a;
		c += a >= guess;
		if (c > cap)
			return SIZE_MAX;
	}
	return bad ? SIZE_MAX : c;
}

/* One pair of topk16 at out: index i's gap past next, then v in fp16; the
 * bytes written. With r, r[i] keeps what the half does not carry. */
static size_t topk16_pair(uint8_t *out, size_t i, size_t next, float v, float *r)
{
	uint32_t gap = (uint32_t)(i - next);
	uint16_t h = dml_float_to_half(v);
	size_t w = 0;

	while (gap >= 0x80u) {
		out[w++] = (uint8_t)(gap | 0x80u);
		gap >>= 7;
	}
	out[w++] = (uint8_t)gap;
	dml_store_le16(out + w, h);
	if (r)
		r[i] = v - dml_half_to_float(h);
	return w + 2;
}

/*
 * The pairs of topk (half = 0) or topk16 (half = 1) for the c candidates
 * idx of v whose magnitude is above t, then the first ones equal to it,
 * ties of them; the end of the bytes written.
 */
static uint8_t *topk_pairs(uint8_t *out, const float *v, float *r, const uint32_t *idx,
			   size_t c, float t, size_t ties, int half)
{
	size_t next = 0;

	for (size_t j = 0; j < c; j++) {
		size_t i = idx[j];
		float a = fabsf(v[i]);

		if (!(a > t || (a == t && ties > 0)))
			continue;
		ties -= a == t;
		if (half) {
			out += topk16_pair(out, i, next, v[i], r);
			next = i + 1;
			continue;
		}
		dml_store_le32(out, (uint32_t)i);
		memcpy(out + 4, &v[i], sizeof(float));
		out += TOPK_PAIR;
		if (r)
			r[i] = 0.0f;   /* sent whole */
	}
	return out;
}

/*
 * topk (half = 0) or topk16 (half = 1) of x (+ r) into out; the bytes
 * written go to *len. The sampled guess leaves about 1.25 k candidates; a
 * guess that proves too high (fewer than k at least it) or too low (more
 * than the room kept for them) falls back to every value.
 */
static int topk_encode(const struct dml_codec *c, const float *x, size_t n, float *r,
		       uint8_t *out, int half, size_t *len)
{
	size_t k = topk_count(c, n), cap = n, nc = 0, above = 0;
	const float *v = r ? r : x;
	uint32_t *idx = NULL;
	float guess, t, *mag = NULL;
	int rc = 0;

	dml_store_le32(out, (uint32_t)k);
	*len = TOPK_HEAD;
	if (k == 0)
		return 0;
	if (r)
		dml_values_add(r, x, n);
	guess = topk_guess(v, n, k);
	if (guess > 0.0f)
		cap = 4 * k + 1024 < n ? 4 * k + 1024 : n;
	idx = malloc((cap + 1) * sizeof(*idx));
	mag = malloc((cap + 1) * sizeof(*mag));
	if (!idx || !mag) {
		rc = DML_ENOMEM;
		goto done;
	}
	nc = topk_candidates(v, n, guess, cap, idx, mag);
	if (guess > 0.0f && (nc == SIZE_MAX || nc < k) && dml_values_finite(v, n)) {
		free(idx);
		free(mag);
		idx = malloc((n + 1) * sizeof(*idx));
		mag = malloc((n + 1) * sizeof(*mag));
		if (!idx || !mag) {
			rc = DML_ENOMEM;
			goto done;
		}
		nc = topk_candidates(v, n, 0.0f, n, idx, mag);
	}
	/* A NaN has no magnitude to rank: such a tensor is refused. */
	if (nc == SIZE_MAX) {
		rc = DML_EINVAL;
		goto done;
	}
	/* mag is reordered by the select; idx keeps the candidates in order. */
	t = kth_largest(mag, nc, k);
	for (size_t j = 0; j < nc; j++)
		above += fabsf(v[idx[j]]) > t;
	*len = (size_t)(topk_pairs(out + TOPK_HEAD, v, r, idx, nc, t, k - above, half) - out);
done:
	free(idx);
	free(mag);
	return rc;
}

/* A varint gap of topk16 at in[*at..len): 0, or -1 past len or 32 bits. */
static int topk16_gap(const uint8_t *in, size_t len, size_t *at, uint64_t *gap)
{
	uint64_t g = 0;

	for (unsigned shift = 0; shift < 7 * TOPK16_GAP_MAX; shift += 7) {
		uint8_t b;

		if (*at >= len)
			return -1;
		b = in[(*at)++];
		g |= (uint64_t)(b & 0x7fu) << shift;
		if (!(b & 0x80u)) {
			*gap = g;
			return g <= UINT32_MAX ? 0 : -1;
		}
	}
	return -1;
}

/*
 * Walk a topk (half = 0) or topk16 (half = 1) encoding of n values,
 * checking every count, index and value: with out NULL only that, else
 * each value sent goes to (add: is added to) out at its index as it is
 * read. 0, or DML_ESHAPE.
 */
static int topk_walk(const uint8_t *in, size_t len, size_t n, int half, float *out, int add)
{
	size_t k, at = TOPK_HEAD;
	uint64_t next = 0;

	if (len < TOPK_HEAD)
		return DML_ESHAPE;
	k = dml_load_le32(in);
	/* topk: 8 bytes a pair; topk16: 3 bytes at least */
	if (k > n || (!half && len != TOPK_HEAD + k * TOPK_PAIR) ||
	    (half && k > (len - TOPK_HEAD) / 3))
		return DML_ESHAPE;
	for (size_t j = 0; j < k; j++) {
		uint64_t i, gap;
		float v;

		if (half) {
			uint16_t h;

			if (topk16_gap(in, len, &at, &gap) != 0 || gap >= n - next || len - at < 2)
				return DML_ESHAPE;   /* out of range, or short */
			h = dml_load_le16(in + at);
			at += 2;
			if ((h & 0x7c00u) == 0x7c00u)
				return DML_ESHAPE;   /* an infinity or a NaN */
			i = next + gap;
			v = dml_half_to_float(h);
		} else {
			i = dml_load_le32(in + at);
			memcpy(&v, in + at + 4, sizeof(v));
			at += TOPK_PAIR;
			if (i < next || i >= n || !dml_values_finite(&v, 1))
				return DML_ESHAPE;   /* out of order, repeated, out of range */
		}
		next = i + 1;
		if (out && add)
			out[i] += v;
		else if (out)
			out[i] = v;
	}
	return at == len ? 0 : DML_ESHAPE;
}

/* ---- dispatch ---------------------------------------------------------- */

int dml_codec_encode(const struct dml_codec *c, const float *x, size_t n,
		     float *residual, void *out, size_t cap, size_t *len)
{
	size_t need = c ? dml_codec_bound(c, n) : 0;

	if (!c || !len || (n > 0 && (!x || !out || need == 0)) || cap < need ||
	    (need > 0 && !out) || (residual && residual == x))
		return DML_EINVAL;
	switch (c->kind) {
	case DML_CODEC_NONE:
		if (residual) {
			dml_values_add(residual, x, n);
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
	case DML_CODEC_TOPK16:
		return topk_encode(c, x, n, residual, out, c->kind == DML_CODEC_TOPK16, len);
	default:
		return DML_EINVAL;
	}
	*len = need;
	return 0;
}

int dml_codec_decode(const struct dml_codec *c, const void *in, size_t len, size_t n,
		     float *out)
{
	size_t need;

	if (!c || (n > 0 && !out) || (len > 0 && !in) || n > UINT32_MAX)
		return DML_EINVAL;
	if (dml_codec_sparse(c->kind)) {
		if (n > 0)
			memset(out, 0, n * sizeof(float));
		return topk_walk(in, len, n, c->kind == DML_CODEC_TOPK16, out, 0);
	}
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

int dml_codec_decode_add(const struct dml_codec *c, const void *in, size_t len, size_t n,
			 float *out)
{
	float *d;
	int rc;

	if (!c || (n > 0 && !out) || (len > 0 && !in) || n > UINT32_MAX)
		return DML_EINVAL;
	if (dml_codec_sparse(c->kind)) {
		int half = c->kind == DML_CODEC_TOPK16;

		/* checked whole before out changes */
		rc = topk_walk(in, len, n, half, NULL, 1);
		return rc ? rc : topk_walk(in, len, n, half, out, 1);
	}
	d = malloc(n ? n * sizeof(float) : 1);
	if (!d)
		return DML_ENOMEM;
	rc = dml_codec_decode(c, in, len, n, d);
	if (rc == 0)
		dml_values_add(out, d, n);
	free(d);
	return rc;
}
