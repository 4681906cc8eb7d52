/*
 * Click-like synthetic records (data_synth_clicks.h): Zipf feature ranks by
 * Hormann and Derflinger's rejection-inversion ("Rejection-inversion to
 * generate variates from monotone discrete distributions", 1996), which
 * needs no table (the 1024 most frequent ranks come from a small cumulative
 * one, which is faster), scrambled into ids by a bijection on id_bits bits,
 * and a label from the hidden logistic model.
 *
 * Must never: loop without bound (the duplicate redraws are capped), or let
 * the numbers depend on anything but the generator and the record index.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "worker/app_util.h"
#include "worker/data_synth_clicks.h"
#include "proto/dml_error.h"

/* Redraws of a rank already in the record before giving up on that slot. */
#define REDRAWS 256
/* Ranks drawn from tables (12 KiB): two thirds of the draws at s = 1.1. */
#define HEAD 1024u

/* log1p(x) / x, exact near 0. */
static double helper1(double x)
{
	if (fabs(x) > 1e-8)
		return log1p(x) / x;
	return 1.0 - x * (0.5 - x * (1.0 / 3.0 - 0.25 * x));
}

/* expm1(x) / x, exact near 0. */
static double helper2(double x)
{
	if (fabs(x) > 1e-8)
		return expm1(x) / x;
	return 1.0 + x * 0.5 * (1.0 + x / 3.0 * (1.0 + 0.25 * x));
}

/* H(x) = integral of x^-s: (x^(1-s) - 1) / (1 - s), or log x when s = 1. */
static double zipf_hint(double s, double x)
{
	double lx = log(x);

	return helper2((1.0 - s) * lx) * lx;
}

static double zipf_h(double s, double x)
{
	return exp(-s * log(x));
}

static double zipf_hint_inv(double s, double x)
{
	double t = x * (1.0 - s);

	if (t < -1.0)
		t = -1.0; /* rounding at the far end of the range */
	return exp(helper1(t) * x);
}

/* A rank in head_n + 1..vocab, P(k) proportional to k^-s. */
static uint64_t zipf_tail(const struct dml_clicks *g, uint64_t *state)
{
	double s = g->zipf_s, k0 = (double)g->head_n + 1.0;

	for (;;) {
		double u = g->h_n + dml_rng_uniform(state) * (g->h_x1 - g->h_n);
		double x = zipf_hint_inv(s, u);
		double kd = floor(x + 0.5);

		if (kd < k0)
			kd = k0;
		else if (kd > (double)g->vocab)
			kd = (double)g->vocab;
		if (kd - x <= g->zipf_t || u >= zipf_hint(s, kd + 0.5) - zipf_h(s, kd))
			return (uint64_t)kd;
	}
}

/* A rank in 1..vocab, P(k) proportional to k^-s. */
static uint64_t zipf_draw(const struct dml_clicks *g, uint64_t *state)
{
	double u = dml_rng_uniform(state);
	uint32_t k;

	if (u >= g->p_head)
		return zipf_tail(g, state);
	/*
	 * The first k with head_cum[k] > u, from the guide table's bucket of u
	 * (a binary search costs a mispredicted branch per level); the step
	 * back guards against rounding at a bucket's edge.
	 */
	k = g->head_guide[(uint32_t)(u * g->guide_scale)];
	while (k > 0 && g->head_cum[k - 1] > u)
		k--;
	while (g->head_cum[k] <= u)
		k++;
	return (uint64_t)k + 1;
}

/*
 * The sampler's constants. The head's probabilities need the normalising
 * sum over all ranks: exact over the head, the tail's by the midpoint rule
 * (H(n + 0.5) - H(k0 - 0.5)), whose error is below 1e-9 of it past rank 1024.
 */
static int zipf_setup(struct dml_clicks *g)
{
	double s = g->zipf_s, k0, head = 0.0, total;

	g->head_n = g->vocab < HEAD ? (uint32_t)g->vocab : HEAD;
	g->head_cum = malloc(g->head_n * sizeof(*g->head_cum));
	g->head_guide = malloc(HEAD * sizeof(*g->head_guide));
	if (!g->head_cum || !g->head_guide)
		return DML_ENOMEM;
	for (uint32_t k = 0; k < g->head_n; k++)
		g->head_cum[k] = head += zipf_h(s, (double)k + 1.0);
	k0 = (double)g->head_n + 1.0;
	total = head;
	if (g->vocab > g->head_n)
		total += zipf_hint(s, (double)g->vocab + 0.5) - zipf_hint(s, k0 - 0.5);
	for (uint32_t k = 0; k < g->head_n; k++)
		g->head_cum[k] /= total;
	g->p_head = g->vocab > g->head_n ? g->head_cum[g->head_n - 1] : 2.0;
	/* The last entry is above every u that reaches the table (u < p_head). */
	g->guide_scale = HEAD / g->head_cum[g->head_n - 1];
	for (uint32_t j = 0, k = 0; j < HEAD; j++) {
		while (k + 1 < g->head_n && g->head_cum[k] <= j / g->guide_scale)
			k++;
		g->head_guide[j] = k;
	}
	g->h_x1 = zipf_hint(s, k0 + 0.5) - zipf_h(s, k0);
	g->h_n = zipf_hint(s, (double)g->vocab + 0.5);
	g->zipf_t = k0 + 1.0 - zipf_hint_inv(s, zipf_hint(s, k0 + 1.5) - zipf_h(s, k0 + 1.0));
	return 0;
}

/* A bijection on [0, 2^bits): xor-shifts and odd multiplies, both invertible. */
static uint64_t scramble(const struct dml_clicks *g, uint64_t x)
{
	uint32_t b = g->id_bits, r = b / 2 + 1;
	uint64_t mask = b == 64 ? UINT64_MAX : ((uint64_t)1 << b) - 1;

	x = (x ^ g->id_key) & mask;
	x ^= x >> r;
	x = (x * UINT64_C(0xbf58476d1ce4e5b9)) & mask;
	x ^= x >> r;
	x = (x * UINT64_C(0x94d049bb133111eb)) & mask;
	x ^= x >> r;
	return x;
}

int dml_clicks_init(struct dml_clicks *g, uint64_t seed, uint64_t vocab)
{
	uint64_t st;

	if (!g)
		return DML_EINVAL;
	if (vocab == 0)
		vocab = DML_CLICKS_VOCAB;
	if (vocab < 4 * (uint64_t)DML_CLICKS_MAX_NNZ_DEFAULT || vocab > ((uint64_t)1 << 40))
		return DML_EINVAL;
	memset(g, 0, sizeof(*g));
	g->seed = seed;
	g->vocab = vocab;
	g->zipf_s = DML_CLICKS_ZIPF_S;
	g->min_nnz = DML_CLICKS_MIN_NNZ;
	g->max_nnz = DML_CLICKS_MAX_NNZ_DEFAULT;
	g->bias = DML_CLICKS_BIAS;
	g->w_scale = DML_CLICKS_W_SCALE;
	if (zipf_setup(g) < 0) {
		dml_clicks_free(g);
		return DML_ENOMEM;
	}
	while (g->id_bits < 64 && ((uint64_t)1 << g->id_bits) < vocab)
		g->id_bits++;
	/* Independent keys per use, so ids, weights and records do not correlate. */
	st = seed ^ UINT64_C(0x636c69636b73); /* "clicks" */
	g->id_key = dml_rng_next(&st);
	g->w_key = dml_rng_next(&st);
	g->rec_key = dml_rng_next(&st);
	return 0;
}

void dml_clicks_free(struct dml_clicks *g)
{
	if (!g)
		return;
	free(g->head_cum);
	free(g->head_guide);
	memset(g, 0, sizeof(*g));
}

/*
 * Near normal and cheap (it is evaluated for every feature of every label):
 * the sum of four 16-bit uniforms of one mixed word (Irwin-Hall), centred
 * and scaled to sd w_scale; bounded by 2 * sqrt(3) * w_scale.
 */
double dml_clicks_true_weight(const struct dml_clicks *g, uint64_t id)
{
	uint64_t r = dml_rng_mix64(g->w_key ^ id);
	double sum = (double)(r & 0xffff) + (double)((r >> 16) & 0xffff)
		+ (double)((r >> 32) & 0xffff) + (double)(r >> 48);

	/* Each part is uniform on 0..65535: mean 32767.5, variance (65536^2 - 1) / 12. */
	return g->w_scale * (sum - 4 * 32767.5) / (65536.0 / sqrt(3.0));
}

double dml_clicks_true_score(const struct dml_clicks *g, const uint64_t *ids, const float *vals,
			     size_t nnz)
{
	double z = g->bias;

	for (size_t j = 0; j < nnz; j++)
		z += (double)vals[j] * dml_clicks_true_weight(g, ids[j]);
	return z;
}

void dml_clicks_record(const struct dml_clicks *g, uint64_t i, uint64_t *ids, float *vals,
		       size_t *nnz, float *label)
{
	uint64_t st = g->rec_key ^ dml_rng_mix64(i + UINT64_C(0x9e3779b97f4a7c15));
	uint32_t span = g->max_nnz - g->min_nnz + 1;
	size_t want = g->min_nnz + (size_t)(dml_rng_next(&st) % span), n = 0;
	double p;

	for (size_t slot = 0; slot < want; slot++) {
		for (int tries = 0; tries < REDRAWS; tries++) {
			uint64_t id = scramble(g, zipf_draw(g, &st) - 1);
			size_t pos = n;

			/* Insertion into the sorted ids; a duplicate is drawn again. */
			while (pos > 0 && ids[pos - 1] > id)
				pos--;
			if (pos > 0 && ids[pos - 1] == id)
				continue;
			memmove(ids + pos + 1, ids + pos, (n - pos) * sizeof(*ids));
			ids[pos] = id;
			n++;
			break;
		}
	}
	for (size_t j = 0; j < n; j++)
		vals[j] = 1.0f;
	*nnz = n;
	p = 1.0 / (1.0 + exp(-dml_clicks_true_score(g, ids, vals, n)));
	*label = dml_rng_uniform(&st) < p ? 1.0f : 0.0f;
}
