/*
 * check_table's optimizer tests: every optimizer against hand-computed
 * values and a double-precision reference over several steps, and weighted
 * pushes (dml_optim_apply_weighted).
 */
#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#if defined(__SSE__)
#include <xmmintrin.h>
#endif

#include "test/check_table.h"
#include "proto/dml_error.h"
#include "store/optim.h"
#include "store/table.h"
#include "proto/util.h"

/* ------------------------------------------------------------------ */
/* Optimizers: a reference in double, written from the formulas. */

#define NV 37 /* a vectorised prefix of 32 and a scalar tail of 5 */

struct ref {
	double w[NV], s1[NV], s2[NV];
	uint32_t t;
};

/* A push of weight wt (dml_optim_apply_weighted): adagrad and adam take
 * it as wt steps of the mean gradient g / wt. */
static void ref_step_weighted(const struct dml_optim_conf *c, struct ref *r, const float *g,
			      double wt)
{
	int normalised = c->kind == DML_OPT_ADAGRAD || c->kind == DML_OPT_ADAM;
	double b1 = pow(c->beta1, wt), b2 = pow(c->beta2, wt), lr;

	r->t++;
	lr = c->lr / (1.0 + (double)c->lr_decay * (double)(r->t - 1));
	if (normalised)
		lr *= wt;
	for (int i = 0; i < NV; i++) {
		double gi = g[i] / (normalised ? wt : 1.0) + (double)c->weight_decay * r->w[i];

		switch (c->kind) {
		case DML_OPT_SGD:
			r->w[i] -= lr * gi;
			break;
		case DML_OPT_MOMENTUM:
			r->s1[i] = c->momentum * r->s1[i] + gi;
			r->w[i] -= lr * r->s1[i];
			break;
		case DML_OPT_ADAGRAD:
			r->s1[i] += wt * gi * gi;
			r->w[i] -= lr * gi / (sqrt(r->s1[i]) + c->eps);
			break;
		case DML_OPT_ADAM: {
			double mhat, vhat;

			r->s1[i] = b1 * r->s1[i] + (1 - b1) * gi;
			r->s2[i] = b2 * r->s2[i] + (1 - b2) * gi * gi;
			mhat = r->s1[i] / (1 - pow(c->beta1, r->t));
			vhat = r->s2[i] / (1 - pow(c->beta2, r->t));
			r->w[i] -= lr * mhat / (sqrt(vhat) + c->eps);
			break;
		}
		case DML_OPT_ADD:
			r->w[i] += g[i];
			break;
		}
	}
}

static void ref_step(const struct dml_optim_conf *c, struct ref *r, const float *g)
{
	ref_step_weighted(c, r, g, 1.0);
}

/* Run steps of kernel and reference side by side, comparing every step;
 * weights: 0, or one per step (pushes of those weights). */
static void optim_against_ref_weighted(const struct dml_optim_conf *c, int steps,
				       const float *weights)
{
	float w[NV], state[2 * NV], g[NV];
	uint32_t step = 0;
	struct ref r;

	ck_assert_int_eq(dml_optim_validate(c), 0);
	memset(&r, 0, sizeof(r));
	memset(state, 0, sizeof(state));
	for (int i = 0; i < NV; i++)
		r.w[i] = w[i] = 0.5f - 0.03f * (float)i;
	for (int s = 1; s <= steps; s++) {
		for (int i = 0; i < NV; i++)
			g[i] = (float)((i % 5) - 2) * 0.25f + 0.125f * (float)s;
		if (weights) {
			dml_optim_apply_weighted(c, w, state, &step, g, NV, weights[s - 1]);
			ref_step_weighted(c, &r, g, weights[s - 1]);
		} else {
			dml_optim_apply(c, w, state, &step, g, NV);
			ref_step(c, &r, g);
		}
		for (int i = 0; i < NV; i++)
			ck_assert_double_eq_tol(w[i], r.w[i], TOL);
	}
	if (c->kind == DML_OPT_ADAM)
		ck_assert_uint_eq(step, (unsigned)steps);
}

static void optim_against_ref(const struct dml_optim_conf *c, int steps)
{
	optim_against_ref_weighted(c, steps, NULL);
}

START_TEST(test_optim_sgd)
{
	struct dml_optim_conf c = optim_conf(DML_OPT_SGD);
	float w = 1.0f, g = 2.0f;

	c.lr = 0.5f;
	dml_optim_apply(&c, &w, NULL, NULL, &g, 1);
	ck_assert_float_eq(w, 0.0f); /* 1 - 0.5 * 2 */
	c.lr = 0.1f;
	optim_against_ref(&c, 6);
}
END_TEST

START_TEST(test_optim_sgd_weight_decay)
{
	struct dml_optim_conf c = optim_conf(DML_OPT_SGD);
	float w = 1.0f, g = 2.0f;

	c.lr = 0.5f;
	c.weight_decay = 0.5f;
	dml_optim_apply(&c, &w, NULL, NULL, &g, 1);
	ck_assert_float_eq(w, -0.25f); /* 1 - 0.5 * (2 + 0.5 * 1) */
	c.lr = 0.1f;
	c.weight_decay = 0.01f;
	optim_against_ref(&c, 6);
}
END_TEST

START_TEST(test_optim_momentum)
{
	struct dml_optim_conf c = optim_conf(DML_OPT_MOMENTUM);
	float w = 1.0f, v = 0.0f, g = 1.0f;

	c.momentum = 0.5f;
	dml_optim_apply(&c, &w, &v, NULL, &g, 1);   /* v = 1, w = 0.9 */
	ck_assert_float_eq_tol(v, 1.0f, 1e-7f);
	ck_assert_float_eq_tol(w, 0.9f, 1e-7f);
	dml_optim_apply(&c, &w, &v, NULL, &g, 1);   /* v = 1.5, w = 0.75 */
	ck_assert_float_eq_tol(v, 1.5f, 1e-7f);
	ck_assert_float_eq_tol(w, 0.75f, 1e-7f);
	c.momentum = 0.9f;
	c.weight_decay = 0.001f;
	optim_against_ref(&c, 8);
}
END_TEST

START_TEST(test_optim_adagrad)
{
	struct dml_optim_conf c = optim_conf(DML_OPT_ADAGRAD);
	float w = 1.0f, h = 0.0f, g = 3.0f;

	c.lr = 0.5f;
	dml_optim_apply(&c, &w, &h, NULL, &g, 1);   /* h = 9, w = 1 - 0.5 * 3 / 3 */
	ck_assert_float_eq(h, 9.0f);
	ck_assert_float_eq_tol(w, 0.5f, 1e-6f);
	g = 4.0f;
	dml_optim_apply(&c, &w, &h, NULL, &g, 1);   /* h = 25, w -= 0.5 * 4 / 5 */
	ck_assert_float_eq(h, 25.0f);
	ck_assert_float_eq_tol(w, 0.1f, 1e-6f);
	c.lr = 0.1f;
	optim_against_ref(&c, 8);
}
END_TEST

START_TEST(test_optim_adam)
{
	struct dml_optim_conf c = optim_conf(DML_OPT_ADAM);
	float w[2] = { 1.0f, 1.0f }, st[4] = { 0 }, g[2] = { 0.003f, -40.0f };
	uint32_t step = 0;

	c.eps = 1e-8f;
	/* Bias correction makes the first step lr * sign(g), whatever |g|. */
	dml_optim_apply(&c, w, st, &step, g, 2);
	ck_assert_uint_eq(step, 1);
	ck_assert_float_eq_tol(w[0], 0.9f, 1e-5f);
	ck_assert_float_eq_tol(w[1], 1.1f, 1e-5f);
	ck_assert_float_eq_tol(st[0], 0.1f * 0.003f, 1e-9f);      /* m */
	ck_assert_float_eq_tol(st[2], 0.001f * 0.003f * 0.003f, 1e-12f); /* v */
	/* The step counter saturates instead of wrapping to 0 (a division by 0). */
	step = UINT32_MAX - 1;
	dml_optim_apply(&c, w, st, &step, g, 2);
	dml_optim_apply(&c, w, st, &step, g, 2);
	ck_assert_uint_eq(step, UINT32_MAX);
	ck_assert(isfinite(w[0]) && isfinite(w[1]));
	c.eps = 1e-6f;
	optim_against_ref(&c, 10);
	c.weight_decay = 0.01f;
	optim_against_ref(&c, 10);
}
END_TEST

START_TEST(test_optim_add)
{
	struct dml_optim_conf c = optim_conf(DML_OPT_ADD);

	c.lr = 0.0f; /* ignored */
	c.weight_decay = 0.5f; /* ignored by ADD */
	optim_against_ref(&c, 5);
}
END_TEST

/*
 * Denormals: momentum's decaying state is flushed to zero while a push is
 * applied (the CPU's setting restored after), add keeps tiny sums exact.
 */
START_TEST(test_optim_denormals)
{
	struct dml_optim_conf c = optim_conf(DML_OPT_MOMENTUM);
	float w[NV] = { 0 }, st[NV], g[NV] = { 0 }, tiny = 0x1p-140f;
#if defined(__SSE__)
	unsigned csr = _mm_getcsr();
#endif

	c.lr = 1.0f;
	c.momentum = 0.5f;
	for (int i = 0; i < NV; i++)
		st[i] = 0x1p-120f; /* normal; halved, it stays out of the denormals */
	dml_optim_apply(&c, w, st, NULL, g, NV);
	ck_assert(st[0] == 0x1p-121f);
	for (int i = 0; i < NV; i++) {
		st[i] = tiny; /* a denormal, read as 0 */
		w[i] = 0.0f;
	}
	dml_optim_apply(&c, w, st, NULL, g, NV);
	for (int i = 0; i < NV; i++)
		ck_assert_msg(st[i] == 0.0f && w[i] == 0.0f, "%d: state %g, weight %g", i,
			      (double)st[i], (double)w[i]);
#if defined(__SSE__)
	ck_assert_uint_eq(_mm_getcsr(), csr);
#endif
	c = optim_conf(DML_OPT_ADD);
	for (int i = 0; i < NV; i++) {
		w[i] = tiny;
		g[i] = tiny;
	}
	dml_optim_apply(&c, w, NULL, NULL, g, NV);
	for (int i = 0; i < NV; i++)
		ck_assert_msg(w[i] == 2 * tiny, "%d: %g", i, (double)w[i]);
}
END_TEST

START_TEST(test_optim_state_floats)
{
	struct dml_optim_conf c = optim_conf(DML_OPT_SGD);

	ck_assert_uint_eq(dml_optim_state_floats(&c), 0);
	c.kind = DML_OPT_ADD;
	ck_assert_uint_eq(dml_optim_state_floats(&c), 0);
	c.kind = DML_OPT_MOMENTUM;
	ck_assert_uint_eq(dml_optim_state_floats(&c), 1);
	c.kind = DML_OPT_ADAGRAD;
	ck_assert_uint_eq(dml_optim_state_floats(&c), 1);
	ck_assert_int_eq(dml_optim_uses_step(&c), 0);
	c.kind = DML_OPT_ADAM;
	ck_assert_uint_eq(dml_optim_state_floats(&c), 2);
	ck_assert_int_ne(dml_optim_uses_step(&c), 0);
}
END_TEST

/*
 * lr_decay: a row's t-th update uses lr / (1 + decay (t - 1)), for every
 * kind but add, counted per row; the kernels agree with the reference and
 * a dense table keeps the counters.
 */
START_TEST(test_optim_lr_decay)
{
	static const enum dml_optim_kind kinds[] = { DML_OPT_SGD, DML_OPT_MOMENTUM,
						     DML_OPT_ADAGRAD, DML_OPT_ADAM };
	struct dml_table_conf tc;
	struct dml_table *t;
	float g[2] = { 1.0f, 1.0f }, w[2];

	for (size_t i = 0; i < sizeof(kinds) / sizeof(kinds[0]); i++) {
		struct dml_optim_conf c = optim_conf(kinds[i]);

		c.lr = 0.1f;
		c.lr_decay = 0.5f;
		ck_assert(dml_optim_uses_step(&c));
		optim_against_ref(&c, 6);
	}
	{
		struct dml_optim_conf c = optim_conf(DML_OPT_ADD);

		c.lr_decay = 0.5f;
		ck_assert(!dml_optim_uses_step(&c));
		c = optim_conf(DML_OPT_SGD);
		ck_assert(!dml_optim_uses_step(&c));
		c.lr_decay = -1.0f;
		ck_assert_int_eq(dml_optim_validate(&c), DML_EINVAL);
		c.lr_decay = NAN;
		ck_assert_int_eq(dml_optim_validate(&c), DML_EINVAL);
	}
	/* sgd, lr 1, decay 1: steps of 1, 1/2, 1/3 */
	memset(&tc, 0, sizeof(tc));
	tc.width = 1;
	tc.kind = DML_TABLE_DENSE;
	tc.key_end = 2;
	tc.optim = optim_conf(DML_OPT_SGD);
	tc.optim.lr = 1.0f;
	tc.optim.lr_decay = 1.0f;
	ck_assert_int_eq(dml_table_new(&tc, &t), 0);
	for (int k = 0; k < 3; k++)
		ck_assert_int_eq(dml_table_push_range(t, 0, 2, g), 0);
	ck_assert_int_eq(dml_table_push_range(t, 1, 2, g), 0);
	ck_assert_int_eq(dml_table_pull_range(t, 0, 2, w), 0);
	ck_assert_double_eq_tol(w[0], -(1.0 + 0.5 + 1.0 / 3), 1e-6);
	ck_assert_double_eq_tol(w[1], -(1.0 + 0.5 + 1.0 / 3 + 0.25), 1e-6);
	dml_table_free(t);
}
END_TEST

START_TEST(test_optim_validate)
{
	struct dml_optim_conf c;
	const float bad_lr[] = { 0.0f, -1.0f, NAN, INFINITY };

	for (size_t i = 0; i < sizeof(bad_lr) / sizeof(bad_lr[0]); i++) {
		c = optim_conf(DML_OPT_SGD);
		c.lr = bad_lr[i];
		ck_assert_int_eq(dml_optim_validate(&c), DML_EINVAL);
		c.kind = DML_OPT_ADD; /* ADD ignores lr */
		ck_assert_int_eq(dml_optim_validate(&c), 0);
	}
	c = optim_conf(DML_OPT_SGD);
	c.weight_decay = -0.1f;
	ck_assert_int_eq(dml_optim_validate(&c), DML_EINVAL);
	c.weight_decay = NAN;
	ck_assert_int_eq(dml_optim_validate(&c), DML_EINVAL);

	c = optim_conf(DML_OPT_MOMENTUM);
	c.momentum = 1.0f;
	ck_assert_int_eq(dml_optim_validate(&c), DML_EINVAL);
	c.momentum = -0.1f;
	ck_assert_int_eq(dml_optim_validate(&c), DML_EINVAL);
	c.momentum = 0.0f;
	ck_assert_int_eq(dml_optim_validate(&c), 0);

	c = optim_conf(DML_OPT_ADAM);
	c.beta1 = 1.0f;
	ck_assert_int_eq(dml_optim_validate(&c), DML_EINVAL);
	c.beta1 = 0.9f;
	c.beta2 = -0.5f;
	ck_assert_int_eq(dml_optim_validate(&c), DML_EINVAL);
	c.beta2 = NAN;
	ck_assert_int_eq(dml_optim_validate(&c), DML_EINVAL);
	c.beta2 = 0.999f;
	c.eps = 0.0f;
	ck_assert_int_eq(dml_optim_validate(&c), DML_EINVAL);

	c = optim_conf(DML_OPT_ADAGRAD);
	c.eps = -1e-8f;
	ck_assert_int_eq(dml_optim_validate(&c), DML_EINVAL);

	c = optim_conf(DML_OPT_SGD);
	c.kind = (enum dml_optim_kind)9;
	ck_assert_int_eq(dml_optim_validate(&c), DML_EINVAL);
	ck_assert_int_eq(dml_optim_validate(NULL), DML_EINVAL);
}
END_TEST

/* ------------------------------------------------------------------ */
/* Weighted pushes (dml_optim_apply_weighted) */

/* Batch shares of a fleet at 0.6, 0.6 and 0.15 cores, over batch_size. */
static const float fleet_weights[] = { 1.37f, 1.33f, 0.30f };

START_TEST(test_optim_weighted_formulas)
{
	static const enum dml_optim_kind kinds[] = {
		DML_OPT_SGD, DML_OPT_MOMENTUM, DML_OPT_ADAGRAD, DML_OPT_ADAM, DML_OPT_ADD,
	};
	float weights[12];

	for (size_t i = 0; i < DML_ARRAY_LEN(weights); i++)
		weights[i] = fleet_weights[i % 3] * (i < 6 ? 1.0f : 2.5f);
	for (size_t k = 0; k < DML_ARRAY_LEN(kinds); k++) {
		struct dml_optim_conf c = optim_conf(kinds[k]);

		optim_against_ref_weighted(&c, 12, weights);
		c.weight_decay = kinds[k] == DML_OPT_ADD ? 0.0f : 0.01f;
		c.lr_decay = 0.05f;
		optim_against_ref_weighted(&c, 12, weights);
	}
}
END_TEST

/* Weight 1 is the unweighted step bit for bit, whatever the kind. */
START_TEST(test_optim_weight_one_is_plain)
{
	for (int kind = DML_OPT_ADD; kind <= DML_OPT_ADAM; kind++) {
		struct dml_optim_conf c = optim_conf((enum dml_optim_kind)kind);
		float a[NV], b[NV], sa[2 * NV] = { 0 }, sb[2 * NV] = { 0 }, g[NV];
		uint32_t ta = 0, tb = 0;

		c.weight_decay = kind == DML_OPT_ADD ? 0.0f : 0.003f;
		for (int i = 0; i < NV; i++)
			a[i] = b[i] = 0.25f - 0.01f * (float)i;
		for (int s = 0; s < 5; s++) {
			for (int i = 0; i < NV; i++)
				g[i] = (float)((i * 7 + s) % 11) * 0.1f - 0.5f;
			dml_optim_apply(&c, a, sa, &ta, g, NV);
			dml_optim_apply_weighted(&c, b, sb, &tb, g, NV, 1.0f);
		}
		ck_assert(memcmp(a, b, sizeof(a)) == 0);
		ck_assert(memcmp(sa, sb, sizeof(sa)) == 0);
		ck_assert_uint_eq(ta, tb);
	}
}
END_TEST

/*
 * Why weights exist: three workers push each clock's gradient, summed over
 * their unequal batches and divided by batch_size. Adam taking each push
 * as one step moves the model less per example than three equal batches
 * would (its steps do not grow with the gradient, and the uneven sizes
 * raise v); taken as pushes of their weights, it moves as far.
 */
START_TEST(test_optim_weights_move_as_far_as_equal_batches)
{
	struct dml_optim_conf c = optim_conf(DML_OPT_ADAM);
	float equal = 0.0f, plain = 0.0f, weighted = 0.0f;
	float se[2] = { 0 }, sp[2] = { 0 }, sw[2] = { 0 };
	uint32_t te = 0, tp = 0, tw = 0;

	c.lr = 1e-4f;
	for (int clock = 0; clock < 3000; clock++)
		for (int i = 0; i < 3; i++) {
			/* Per example, the gradient is 1 with a little noise. */
			float mean = 1.0f + 0.1f * (float)((clock * 3 + i) % 5 - 2);
			float g = fleet_weights[i] * mean;

			dml_optim_apply(&c, &equal, se, &te, &mean, 1);
			dml_optim_apply(&c, &plain, sp, &tp, &g, 1);
			dml_optim_apply_weighted(&c, &weighted, sw, &tw, &g, 1,
						 fleet_weights[i]);
		}
	ck_assert_msg(fabsf(weighted / equal - 1.0f) < 0.02f,
		      "weighted pushes moved %g, equal batches %g", (double)weighted,
		      (double)equal);
	ck_assert_msg(plain / equal > 0.8f && plain / equal < 0.95f,
		      "unweighted pushes moved %g, equal batches %g", (double)plain,
		      (double)equal);
}
END_TEST

/* Tables pass the weight on, and refuse one that is not positive and finite. */
START_TEST(test_table_push_weighted)
{
	struct dml_table_conf tc = table_conf(DML_TABLE_DENSE, 3, DML_OPT_ADAM);
	struct dml_table_conf sc = table_conf(DML_TABLE_SPARSE, 3, DML_OPT_ADAGRAD);
	const float bad[] = { 0.0f, -1.0f, NAN, INFINITY };
	const uint64_t keys[] = { 4, 5 };
	float g[6], want[6] = { 0 }, st[12] = { 0 }, got[6];
	uint32_t step = 0;
	struct dml_table *t = table_make(&tc), *sp = table_make(&sc);

	for (int i = 0; i < 6; i++)
		g[i] = 0.2f * (float)i - 0.5f;
	for (size_t i = 0; i < DML_ARRAY_LEN(bad); i++) {
		ck_assert_int_eq(dml_table_push_range_weighted(t, 4, 6, g, bad[i]), DML_EINVAL);
		ck_assert_int_eq(dml_table_push_keys_weighted(t, keys, 2, g, bad[i]), DML_EINVAL);
		ck_assert_int_eq(dml_table_push_keys_weighted(sp, keys, 2, g, bad[i]),
				 DML_EINVAL);
	}
	ck_assert_int_eq(dml_table_pull_range(t, 4, 6, got), 0);
	ck_assert(memcmp(got, want, sizeof(got)) == 0);
	/* Row by row (adam keeps a step per row) as the kernel on its own. */
	ck_assert_int_eq(dml_table_push_range_weighted(t, 4, 6, g, 2.5f), 0);
	ck_assert_int_eq(dml_table_push_keys_weighted(t, keys, 2, g, 0.5f), 0);
	for (int r = 0; r < 2; r++) {
		float s2[6] = { 0 };

		step = 0;
		memcpy(s2, st, sizeof(s2));
		dml_optim_apply_weighted(&tc.optim, want + 3 * r, s2, &step, g + 3 * r, 3, 2.5f);
		dml_optim_apply_weighted(&tc.optim, want + 3 * r, s2, &step, g + 3 * r, 3, 0.5f);
	}
	ck_assert_int_eq(dml_table_pull_range(t, 4, 6, got), 0);
	ck_assert(memcmp(got, want, sizeof(got)) == 0);
	/* A run of rows at once (adagrad, no step counter), sparse rows. */
	memset(want, 0, sizeof(want));
	memset(st, 0, sizeof(st));
	ck_assert_int_eq(dml_table_push_keys_weighted(sp, keys, 2, g, 3.0f), 0);
	dml_optim_apply_weighted(&sc.optim, want, st, NULL, g, 6, 3.0f);
	ck_assert_int_eq(dml_table_pull_keys(sp, keys, 2, got), 0);
	ck_assert(memcmp(got, want, sizeof(got)) == 0);
	dml_table_free(t);
	dml_table_free(sp);
}
void check_table_optim_tests(TCase *optim)
{
	tcase_add_test(optim, test_optim_sgd);
	tcase_add_test(optim, test_optim_sgd_weight_decay);
	tcase_add_test(optim, test_optim_momentum);
	tcase_add_test(optim, test_optim_adagrad);
	tcase_add_test(optim, test_optim_adam);
	tcase_add_test(optim, test_optim_add);
	tcase_add_test(optim, test_optim_denormals);
	tcase_add_test(optim, test_optim_state_floats);
	tcase_add_test(optim, test_optim_validate);
	tcase_add_test(optim, test_optim_lr_decay);
	tcase_add_test(optim, test_optim_weighted_formulas);
	tcase_add_test(optim, test_optim_weight_one_is_plain);
	tcase_add_test(optim, test_optim_weights_move_as_far_as_equal_batches);
	tcase_add_test(optim, test_table_push_weighted);
}
