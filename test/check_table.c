/*
 * Unit tests for store/table.c and store/optim.c: every optimizer against
 * hand-computed values and a double-precision reference over several steps,
 * dense ranges and keys (with range errors that change nothing), sparse rows
 * created on first touch with the same deterministic values as a dense table,
 * whatever the order, growth through many resizes, the extreme keys, foreach,
 * exact integer sums with ADD, rejected configurations, and rows moving
 * between tables (export, import, removal, dense range changes) continuing
 * exactly where they stopped.
 *
 * Pure in-memory tests: no files, no sockets.
 */
#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "check_run.h"
#include "dml_error.h"
#include "optim.h"
#include "table.h"
#include "util.h"

#define TOL 1e-5

static struct dml_optim_conf optim_conf(enum dml_optim_kind kind)
{
	struct dml_optim_conf c = {
		.kind = kind, .lr = 0.1f, .weight_decay = 0.0f, .momentum = 0.9f,
		.beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-6f,
	};
	return c;
}

static struct dml_table_conf table_conf(enum dml_table_kind kind, uint32_t width,
					enum dml_optim_kind opt)
{
	struct dml_table_conf c = {
		.id = 1, .width = width, .kind = kind, .key_begin = 0, .key_end = 1000,
		.init = DML_INIT_ZEROS, .init_scale = 0.0f, .seed = 7,
		.optim = optim_conf(opt),
	};
	return c;
}

static struct dml_table *table_make(const struct dml_table_conf *c)
{
	struct dml_table *t = NULL;

	ck_assert_int_eq(dml_table_new(c, &t), 0);
	ck_assert_ptr_nonnull(t);
	return t;
}

/* A key sequence that covers the whole 64-bit space, including 0. */
static uint64_t key_of(uint64_t i)
{
	uint64_t z = i * 0x9e3779b97f4a7c15ull;

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

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
/* Table configuration. */

START_TEST(test_conf_rejected)
{
	struct dml_table_conf base = table_conf(DML_TABLE_DENSE, 4, DML_OPT_SGD), c;
	struct dml_table *t = NULL;

	c = base;
	c.width = 0;
	ck_assert_int_eq(dml_table_new(&c, &t), DML_EINVAL);
	c.width = 65537;
	ck_assert_int_eq(dml_table_new(&c, &t), DML_EINVAL);
	c = base;
	c.key_end = c.key_begin;
	ck_assert_int_eq(dml_table_new(&c, &t), DML_EINVAL);
	c.key_begin = 10;
	c.key_end = 5;
	ck_assert_int_eq(dml_table_new(&c, &t), DML_EINVAL);
	c = base;
	c.init_scale = -1.0f;
	ck_assert_int_eq(dml_table_new(&c, &t), DML_EINVAL);
	c.init_scale = INFINITY;
	ck_assert_int_eq(dml_table_new(&c, &t), DML_EINVAL);
	c.init_scale = NAN;
	ck_assert_int_eq(dml_table_new(&c, &t), DML_EINVAL);
	c = base;
	c.init = (enum dml_init_kind)3;
	ck_assert_int_eq(dml_table_new(&c, &t), DML_EINVAL);
	c = base;
	c.kind = (enum dml_table_kind)2;
	ck_assert_int_eq(dml_table_new(&c, &t), DML_EINVAL);
	c = base;
	c.optim.lr = -0.1f;
	ck_assert_int_eq(dml_table_new(&c, &t), DML_EINVAL);
	ck_assert_int_eq(dml_table_new(NULL, &t), DML_EINVAL);
	ck_assert_int_eq(dml_table_new(&base, NULL), DML_EINVAL);
	ck_assert_ptr_null(t);

	/* A sparse table has no range to check; a huge width is fine. */
	c = table_conf(DML_TABLE_SPARSE, 65536, DML_OPT_SGD);
	c.key_begin = c.key_end = 0;
	t = table_make(&c);
	dml_table_free(t);
	dml_table_free(NULL);
}
END_TEST

START_TEST(test_conf_too_big)
{
	struct dml_table_conf c = table_conf(DML_TABLE_DENSE, 65536, DML_OPT_ADAM);
	struct dml_table *t = NULL;

	/* Sizes that overflow are refused before anything is allocated. */
	c.key_end = UINT64_MAX;
	ck_assert_int_eq(dml_table_new(&c, &t), DML_ENOMEM);
	c = table_conf(DML_TABLE_SPARSE, 64, DML_OPT_SGD);
	c.capacity_hint = UINT64_MAX;
	ck_assert_int_eq(dml_table_new(&c, &t), DML_ENOMEM);
	ck_assert_ptr_null(t);
}
END_TEST

START_TEST(test_names)
{
	ck_assert_str_eq(dml_table_kind_names[DML_TABLE_DENSE], "dense");
	ck_assert_str_eq(dml_table_kind_names[DML_TABLE_SPARSE], "sparse");
	ck_assert_ptr_null(dml_table_kind_names[2]);
	ck_assert_str_eq(dml_init_kind_names[DML_INIT_ZEROS], "zeros");
	ck_assert_str_eq(dml_init_kind_names[DML_INIT_UNIFORM], "uniform");
	ck_assert_str_eq(dml_init_kind_names[DML_INIT_NORMAL], "normal");
	ck_assert_ptr_null(dml_init_kind_names[3]);
	ck_assert_str_eq(dml_optim_kind_names[DML_OPT_SGD], "sgd");
	ck_assert_str_eq(dml_optim_kind_names[DML_OPT_MOMENTUM], "momentum");
	ck_assert_str_eq(dml_optim_kind_names[DML_OPT_ADAGRAD], "adagrad");
	ck_assert_str_eq(dml_optim_kind_names[DML_OPT_ADAM], "adam");
	ck_assert_str_eq(dml_optim_kind_names[DML_OPT_ADD], "add");
	ck_assert_ptr_null(dml_optim_kind_names[5]);
}
END_TEST

START_TEST(test_bytes)
{
	struct dml_table_conf c = table_conf(DML_TABLE_DENSE, 4, DML_OPT_SGD);
	struct dml_table *t = table_make(&c), *m;
	uint64_t before;

	ck_assert_uint_eq(dml_table_rows(t), 1000);
	ck_assert_uint_ge(dml_table_bytes(t), 1000 * 4 * sizeof(float));
	c.optim = optim_conf(DML_OPT_ADAM);
	m = table_make(&c);
	ck_assert_uint_ge(dml_table_bytes(m), 1000 * 4 * 3 * sizeof(float));
	ck_assert_int_eq(dml_table_conf(m)->optim.kind, DML_OPT_ADAM);
	dml_table_free(t);
	dml_table_free(m);

	/* Sparse: grows with its rows; the hint sizes the row arrays exactly, so
	 * what is left is the hash, which must stay at most 70% full. */
	for (uint64_t hint = 0; hint <= 6000; hint += 6000) {
		c = table_conf(DML_TABLE_SPARSE, 8, DML_OPT_SGD);
		c.capacity_hint = hint;
		t = table_make(&c);
		ck_assert_uint_eq(dml_table_rows(t), 0);
		before = dml_table_bytes(t);
		for (uint64_t k = 0; k < 6000; k++) {
			float zero[8] = { 0 };

			ck_assert_int_eq(dml_table_push_keys(t, &k, 1, zero), 0);
		}
		ck_assert_uint_eq(dml_table_rows(t), 6000);
		if (hint == 0)
			ck_assert_uint_gt(dml_table_bytes(t), before);
		ck_assert_uint_ge(dml_table_bytes(t),
				  6000 * (8 * sizeof(float) + 8) + 6000 * 16 * 10 / 7);
		dml_table_free(t);
	}
}
END_TEST

/* ------------------------------------------------------------------ */
/* Dense tables. */

static struct dml_table *dense_add_table(void)
{
	struct dml_table_conf c = table_conf(DML_TABLE_DENSE, 3, DML_OPT_ADD);

	c.key_begin = 100;
	c.key_end = 200;
	return table_make(&c);
}

START_TEST(test_dense_range)
{
	struct dml_table *t = dense_add_table();
	float g[30], all[300], again[300];

	for (int i = 0; i < 30; i++)
		g[i] = (float)(i + 1);
	ck_assert_int_eq(dml_table_push_range(t, 110, 120, g), 0);
	ck_assert_int_eq(dml_table_pull_range(t, 100, 200, all), 0);
	for (int i = 0; i < 300; i++)
		ck_assert_float_eq(all[i], i >= 30 && i < 60 ? (float)(i - 29) : 0.0f);

	/* Out of range: an error and no change. */
	ck_assert_int_eq(dml_table_push_range(t, 190, 201, g), DML_ERANGE);
	ck_assert_int_eq(dml_table_push_range(t, 99, 101, g), DML_ERANGE);
	ck_assert_int_eq(dml_table_pull_range(t, 150, 201, again), DML_ERANGE);
	ck_assert_int_eq(dml_table_push_range(t, 120, 110, g), DML_EINVAL);
	ck_assert_int_eq(dml_table_push_range(t, 110, 120, NULL), DML_EINVAL);
	ck_assert_int_eq(dml_table_push_range(t, 150, 150, NULL), 0);
	ck_assert_int_eq(dml_table_pull_range(t, 100, 200, again), 0);
	ck_assert_mem_eq(all, again, sizeof(all));

	ck_assert_int_eq(dml_table_pull_range(t, 119, 121, again), 0);
	ck_assert_float_eq(again[0], 28.0f);
	ck_assert_float_eq(again[3], 0.0f);
	dml_table_free(t);
}
END_TEST

START_TEST(test_dense_keys)
{
	struct dml_table *t = dense_add_table();
	uint64_t keys[] = { 150, 101, 150, 199 };
	float g[12], out[12], all[300], again[300];

	for (int i = 0; i < 12; i++)
		g[i] = (float)(i + 1);
	ck_assert_int_eq(dml_table_push_keys(t, keys, 4, g), 0);
	ck_assert_int_eq(dml_table_pull_keys(t, keys, 4, out), 0);
	for (int j = 0; j < 3; j++) {
		ck_assert_float_eq(out[j], g[j] + g[6 + j]);    /* 150, twice */
		ck_assert_float_eq(out[3 + j], g[3 + j]);       /* 101 */
		ck_assert_float_eq(out[6 + j], out[j]);
		ck_assert_float_eq(out[9 + j], g[9 + j]);       /* 199 */
	}

	/* One bad key rejects the whole batch, even after good ones. */
	ck_assert_int_eq(dml_table_pull_range(t, 100, 200, all), 0);
	keys[2] = 200;
	ck_assert_int_eq(dml_table_push_keys(t, keys, 4, g), DML_ERANGE);
	keys[2] = 99;
	ck_assert_int_eq(dml_table_push_keys(t, keys, 4, g), DML_ERANGE);
	ck_assert_int_eq(dml_table_pull_keys(t, keys, 4, out), DML_ERANGE);
	ck_assert_int_eq(dml_table_pull_range(t, 100, 200, again), 0);
	ck_assert_mem_eq(all, again, sizeof(all));
	ck_assert_int_eq(dml_table_push_keys(t, keys, 0, NULL), 0);
	ck_assert_int_eq(dml_table_push_keys(t, keys, 2, NULL), DML_EINVAL);
	ck_assert_int_eq(dml_table_push_keys(t, NULL, 2, g), DML_EINVAL);
	dml_table_free(t);
}
END_TEST

/* Range and keys pushes are the same update, in any key order. */
START_TEST(test_dense_range_equals_keys)
{
	struct dml_table_conf c = table_conf(DML_TABLE_DENSE, 5, DML_OPT_MOMENTUM);
	struct dml_table *a, *b;
	enum { ROWS = 1000, W = 5 };
	static float g[ROWS * W], gr[ROWS * W], va[ROWS * W], vb[ROWS * W];
	static uint64_t keys[ROWS];

	c.init = DML_INIT_UNIFORM;
	c.init_scale = 0.5f;
	c.optim.weight_decay = 0.01f;
	a = table_make(&c);
	b = table_make(&c);
	for (int r = 0; r < ROWS; r++) {
		keys[r] = (uint64_t)(ROWS - 1 - r);
		for (int j = 0; j < W; j++) {
			g[r * W + j] = (float)((r * 7 + j) % 11) * 0.1f - 0.5f;
			gr[(ROWS - 1 - r) * W + j] = g[r * W + j];
		}
	}
	for (int s = 0; s < 3; s++) {
		ck_assert_int_eq(dml_table_push_range(a, 0, ROWS, g), 0);
		ck_assert_int_eq(dml_table_push_keys(b, keys, ROWS, gr), 0);
	}
	ck_assert_int_eq(dml_table_pull_range(a, 0, ROWS, va), 0);
	ck_assert_int_eq(dml_table_pull_range(b, 0, ROWS, vb), 0);
	for (int i = 0; i < ROWS * W; i++)
		ck_assert_float_eq_tol(va[i], vb[i], 1e-6f);
	dml_table_free(a);
	dml_table_free(b);
}
END_TEST

static void adam_ref_row(const struct dml_optim_conf *c, const float *w0,
			 const float *g, int steps, int width, double *w)
{
	double m[8] = { 0 }, v[8] = { 0 };

	for (int j = 0; j < width; j++)
		w[j] = w0[j];
	for (int t = 1; t <= steps; t++)
		for (int j = 0; j < width; j++) {
			m[j] = c->beta1 * m[j] + (1 - c->beta1) * g[j];
			v[j] = c->beta2 * v[j] + (1 - c->beta2) * g[j] * g[j];
			w[j] -= c->lr * (m[j] / (1 - pow(c->beta1, t))) /
				(sqrt(v[j] / (1 - pow(c->beta2, t))) + c->eps);
		}
}

/* ADAM on a dense table: each key counts its own steps, by keys or range. */
START_TEST(test_dense_adam_steps)
{
	struct dml_table_conf c = table_conf(DML_TABLE_DENSE, 4, DML_OPT_ADAM);
	struct dml_table *t;
	float g[8] = { 0.5f, -1.0f, 2.0f, 0.25f, 0.5f, -1.0f, 2.0f, 0.25f };
	float w0[8], out[8];
	uint64_t k5 = 5, k6 = 6;
	double ref[4];

	c.init = DML_INIT_NORMAL;
	c.init_scale = 1.0f;
	t = table_make(&c);
	ck_assert_int_eq(dml_table_pull_range(t, 5, 7, w0), 0);
	ck_assert_int_eq(dml_table_push_keys(t, &k5, 1, g), 0);
	ck_assert_int_eq(dml_table_push_keys(t, &k5, 1, g), 0);
	ck_assert_int_eq(dml_table_push_keys(t, &k6, 1, g), 0);
	ck_assert_int_eq(dml_table_push_range(t, 5, 7, g), 0);
	ck_assert_int_eq(dml_table_pull_range(t, 5, 7, out), 0);
	adam_ref_row(&c.optim, w0, g, 3, 4, ref);
	for (int j = 0; j < 4; j++)
		ck_assert_double_eq_tol(out[j], ref[j], TOL);
	adam_ref_row(&c.optim, w0 + 4, g, 2, 4, ref);
	for (int j = 0; j < 4; j++)
		ck_assert_double_eq_tol(out[4 + j], ref[j], TOL);

	/* Rows on the same step, two range pushes: all at step 2. */
	ck_assert_int_eq(dml_table_pull_range(t, 0, 2, w0), 0);
	ck_assert_int_eq(dml_table_push_range(t, 0, 2, g), 0);
	ck_assert_int_eq(dml_table_push_range(t, 0, 2, g), 0);
	ck_assert_int_eq(dml_table_pull_range(t, 0, 2, out), 0);
	for (int r = 0; r < 2; r++) {
		adam_ref_row(&c.optim, w0 + 4 * r, g, 2, 4, ref);
		for (int j = 0; j < 4; j++)
			ck_assert_double_eq_tol(out[4 * r + j], ref[j], TOL);
	}
	dml_table_free(t);
}
END_TEST

/* ------------------------------------------------------------------ */
/* Initial values and sparse first touch. */

static void init_same_as_dense(enum dml_init_kind init)
{
	struct dml_table_conf c = table_conf(DML_TABLE_DENSE, 5, DML_OPT_SGD);
	struct dml_table *d, *s, *other;
	uint64_t keys[] = { 999, 3, 500, 0 };
	float dv[20], sv[20], ov[20];

	c.init = init;
	c.init_scale = 0.5f;
	c.seed = 77;
	d = table_make(&c);
	c.kind = DML_TABLE_SPARSE;
	s = table_make(&c);
	c.seed = 78;
	other = table_make(&c);
	ck_assert_int_eq(dml_table_pull_keys(d, keys, 4, dv), 0);
	ck_assert_int_eq(dml_table_pull_keys(s, keys, 4, sv), 0);
	ck_assert_int_eq(dml_table_pull_keys(other, keys, 4, ov), 0);
	ck_assert_mem_eq(dv, sv, sizeof(dv));
	/* Pulls create no rows; the first push starts from what they said. */
	ck_assert_uint_eq(dml_table_rows(s), 0);
	{
		float zero[20] = { 0 }, after[20];

		ck_assert_int_eq(dml_table_push_keys(s, keys, 4, zero), 0);
		ck_assert_uint_eq(dml_table_rows(s), 4);
		ck_assert_int_eq(dml_table_pull_keys(s, keys, 4, after), 0);
		ck_assert_mem_eq(after, dv, sizeof(dv));
	}
	for (int i = 0; i < 20; i++) {
		ck_assert_float_ne(dv[i], ov[i]);  /* the seed matters */
		ck_assert(fabsf(dv[i]) <= (init == DML_INIT_UNIFORM ? 0.5f : 4.0f));
	}
	ck_assert_float_ne(dv[0], dv[1]);  /* so does the index in the row */
	ck_assert_float_ne(dv[0], dv[5]);  /* and the key */
	dml_table_free(d);
	dml_table_free(s);
	dml_table_free(other);
}

START_TEST(test_init_uniform_sparse_matches_dense)
{
	init_same_as_dense(DML_INIT_UNIFORM);
}
END_TEST

START_TEST(test_init_normal_sparse_matches_dense)
{
	init_same_as_dense(DML_INIT_NORMAL);
}
END_TEST

START_TEST(test_init_order_independent)
{
	struct dml_table_conf c = table_conf(DML_TABLE_SPARSE, 3, DML_OPT_SGD);
	struct dml_table *a, *b;
	enum { N = 300 };
	static uint64_t up[N], down[N];
	static float va[N * 3], vb[N * 3];

	c.init = DML_INIT_UNIFORM;
	c.init_scale = 1.0f;
	a = table_make(&c);
	b = table_make(&c);
	for (int i = 0; i < N; i++) {
		up[i] = key_of((uint64_t)i);
		down[i] = key_of((uint64_t)(N - 1 - i));
	}
	/* Create in opposite orders, one key at a time versus one batch (a
	 * zero SGD step leaves the initial values). */
	memset(va, 0, sizeof(va));
	for (int i = 0; i < N; i++)
		ck_assert_int_eq(dml_table_push_keys(a, &down[i], 1, va), 0);
	ck_assert_int_eq(dml_table_push_keys(b, up, N, va), 0);
	ck_assert_int_eq(dml_table_pull_keys(b, up, N, vb), 0);
	ck_assert_int_eq(dml_table_pull_keys(a, up, N, va), 0);
	ck_assert_mem_eq(va, vb, sizeof(va));
	ck_assert_uint_eq(dml_table_rows(a), N);
	ck_assert_uint_eq(dml_table_rows(b), N);
	dml_table_free(a);
	dml_table_free(b);
}
END_TEST

START_TEST(test_init_distribution)
{
	struct dml_table_conf c = table_conf(DML_TABLE_DENSE, 64, DML_OPT_SGD);
	struct dml_table *t;
	enum { ROWS = 1024, W = 64 };
	static float v[ROWS * W];
	double sum = 0, sq = 0, lo = 0, hi = 0;

	c.key_end = ROWS;
	c.init = DML_INIT_NORMAL;
	c.init_scale = 2.0f;
	t = table_make(&c);
	ck_assert_int_eq(dml_table_pull_range(t, 0, ROWS, v), 0);
	for (int i = 0; i < ROWS * W; i++) {
		sum += v[i];
		sq += (double)v[i] * v[i];
	}
	ck_assert_double_eq_tol(sum / (ROWS * W), 0.0, 0.05);
	ck_assert_double_eq_tol(sqrt(sq / (ROWS * W)), 2.0, 0.05);
	dml_table_free(t);

	c.init = DML_INIT_UNIFORM;
	t = table_make(&c);
	ck_assert_int_eq(dml_table_pull_range(t, 0, ROWS, v), 0);
	sum = 0;
	for (int i = 0; i < ROWS * W; i++) {
		ck_assert(v[i] >= -2.0f && v[i] <= 2.0f);
		sum += v[i];
		lo = v[i] < lo ? v[i] : lo;
		hi = v[i] > hi ? v[i] : hi;
	}
	ck_assert_double_eq_tol(sum / (ROWS * W), 0.0, 0.05);
	ck_assert(lo < -1.99 && hi > 1.99);
	dml_table_free(t);

	c.init = DML_INIT_ZEROS;
	t = table_make(&c);
	ck_assert_int_eq(dml_table_pull_range(t, 0, ROWS, v), 0);
	for (int i = 0; i < ROWS * W; i++)
		ck_assert_float_eq(v[i], 0.0f);
	dml_table_free(t);
}
END_TEST

/* ------------------------------------------------------------------ */
/* Sparse tables. */

START_TEST(test_sparse_repeated_keys)
{
	struct dml_table_conf c = table_conf(DML_TABLE_SPARSE, 2, DML_OPT_ADD);
	struct dml_table *t = table_make(&c);
	uint64_t keys[] = { 7, 8, 7, 7 };
	float g[] = { 1, 10, 100, 1000, 2, 20, 4, 40 }, out[2];
	float r[2];

	ck_assert_int_eq(dml_table_push_keys(t, keys, 4, g), 0);
	ck_assert_uint_eq(dml_table_rows(t), 2);
	ck_assert_int_eq(dml_table_pull_keys(t, keys, 1, out), 0);
	ck_assert_float_eq(out[0], 7.0f);
	ck_assert_float_eq(out[1], 70.0f);
	ck_assert_int_eq(dml_table_pull_keys(t, keys + 1, 1, r), 0);
	ck_assert_float_eq(r[0], 100.0f);
	ck_assert_float_eq(r[1], 1000.0f);
	ck_assert_int_eq(dml_table_push_range(t, 0, 1, g), DML_EINVAL);
	ck_assert_int_eq(dml_table_pull_range(t, 0, 1, out), DML_EINVAL);
	dml_table_free(t);
}
END_TEST

START_TEST(test_sparse_extreme_keys)
{
	struct dml_table_conf c = table_conf(DML_TABLE_SPARSE, 1, DML_OPT_ADD);
	struct dml_table *t = table_make(&c);
	uint64_t keys[] = { 0, UINT64_MAX, 0 }, back[] = { UINT64_MAX, 0 };
	float g[] = { 1, 2, 3, 4 }, out[4];

	ck_assert_int_eq(dml_table_push_keys(t, keys, 3, g), 0);
	ck_assert_uint_eq(dml_table_rows(t), 2);
	ck_assert_int_eq(dml_table_pull_keys(t, back, 2, out), 0);
	ck_assert_float_eq(out[0], 2.0f);
	ck_assert_float_eq(out[1], 4.0f);
	dml_table_free(t);

	/* A dense range ending at the top of the key space. */
	c = table_conf(DML_TABLE_DENSE, 1, DML_OPT_ADD);
	c.key_begin = UINT64_MAX - 4;
	c.key_end = UINT64_MAX;
	t = table_make(&c);
	keys[0] = UINT64_MAX - 1;
	ck_assert_int_eq(dml_table_push_keys(t, keys, 1, g), 0);
	ck_assert_int_eq(dml_table_pull_keys(t, keys, 1, out), 0);
	ck_assert_float_eq(out[0], 1.0f);
	keys[0] = UINT64_MAX;
	ck_assert_int_eq(dml_table_push_keys(t, keys, 1, g), DML_ERANGE);
	ck_assert_int_eq(dml_table_push_range(t, UINT64_MAX - 4, UINT64_MAX, g), 0);
	ck_assert_int_eq(dml_table_pull_range(t, UINT64_MAX - 4, UINT64_MAX, out), 0);
	ck_assert_float_eq(out[3], 5.0f); /* key UINT64_MAX - 1: 1 + 4 */
	dml_table_free(t);
}
END_TEST

/* A batch the table cannot grow for is refused whole, before any key is
 * read: the huge count below never touches the two-key arrays. */
START_TEST(test_sparse_enomem)
{
	struct dml_table_conf c = table_conf(DML_TABLE_SPARSE, 2, DML_OPT_ADD);
	struct dml_table *t = table_make(&c);
	uint64_t keys[] = { 5, 6 };
	float g[] = { 1, 2, 3, 4 }, out[4];

	ck_assert_int_eq(dml_table_push_keys(t, keys, 1, g), 0);
	ck_assert_int_eq(dml_table_push_keys(t, keys, SIZE_MAX / 2, g), DML_ENOMEM);
	ck_assert_int_eq(dml_table_pull_keys(t, keys, SIZE_MAX / 2, out), DML_ENOMEM);
	ck_assert_uint_eq(dml_table_rows(t), 1);
	ck_assert_int_eq(dml_table_pull_keys(t, keys, 1, out), 0);
	ck_assert_float_eq(out[0], 1.0f);
	ck_assert_float_eq(out[1], 2.0f);
	dml_table_free(t);
}
END_TEST

struct visit {
	uint8_t *seen;
	uint64_t count;
	uint64_t last;
	int stop_after;
};

/* Growth rows carry (i % 1000, i / 1000) so the key can be checked. */
static int visit_growth(uint64_t key, const float *v, void *arg)
{
	struct visit *vs = arg;
	uint64_t i = (uint64_t)v[0] + 1000 * (uint64_t)v[1];

	if (i >= 200000 || key_of(i) != key || vs->seen[i])
		return -1;
	vs->seen[i] = 1;
	vs->count++;
	return 0;
}

START_TEST(test_sparse_growth)
{
	struct dml_table_conf c = table_conf(DML_TABLE_SPARSE, 2, DML_OPT_ADD);
	struct dml_table *t = table_make(&c);
	enum { N = 200000, B = 1000 };
	static uint64_t keys[B];
	static float g[B * 2], out[B * 2];
	struct visit vs = { .seen = calloc(N, 1) };

	ck_assert_ptr_nonnull(vs.seen);
	for (uint64_t base = 0; base < N; base += B) {
		for (uint64_t i = 0; i < B; i++) {
			keys[i] = key_of(base + i);
			g[2 * i] = (float)((base + i) % 1000);
			g[2 * i + 1] = (float)((base + i) / 1000);
		}
		ck_assert_int_eq(dml_table_push_keys(t, keys, B, g), 0);
	}
	ck_assert_uint_eq(dml_table_rows(t), N);
	for (uint64_t base = 0; base < N; base += B) {
		for (uint64_t i = 0; i < B; i++)
			keys[i] = key_of(N - 1 - base - i);
		ck_assert_int_eq(dml_table_pull_keys(t, keys, B, out), 0);
		for (uint64_t i = 0; i < B; i++) {
			uint64_t k = N - 1 - base - i;

			ck_assert_float_eq(out[2 * i], (float)(k % 1000));
			ck_assert_float_eq(out[2 * i + 1], (float)(k / 1000));
		}
	}
	ck_assert_uint_eq(dml_table_rows(t), N); /* pulls created nothing */
	ck_assert_int_eq(dml_table_foreach(t, visit_growth, &vs), 0);
	ck_assert_uint_eq(vs.count, N);
	free(vs.seen);
	dml_table_free(t);
}
END_TEST

/* ------------------------------------------------------------------ */
/* foreach and exactness. */

static int visit_dense(uint64_t key, const float *v, void *arg)
{
	struct visit *vs = arg;

	if (vs->count > 0 && key != vs->last + 1)
		return -1;
	if (v[0] != (float)key)
		return -2;
	vs->last = key;
	vs->count++;
	return vs->stop_after && vs->count == (uint64_t)vs->stop_after ? 42 : 0;
}

START_TEST(test_foreach_dense)
{
	struct dml_table_conf c = table_conf(DML_TABLE_DENSE, 1, DML_OPT_ADD);
	struct dml_table *t;
	static float g[500];
	struct visit vs = { 0 };

	c.key_begin = 1000;
	c.key_end = 1500;
	t = table_make(&c);
	for (int i = 0; i < 500; i++)
		g[i] = (float)(1000 + i);
	ck_assert_int_eq(dml_table_push_range(t, 1000, 1500, g), 0);
	ck_assert_int_eq(dml_table_foreach(t, visit_dense, &vs), 0);
	ck_assert_uint_eq(vs.count, 500);
	ck_assert_uint_eq(vs.last, 1499);

	memset(&vs, 0, sizeof(vs));
	vs.stop_after = 3;
	ck_assert_int_eq(dml_table_foreach(t, visit_dense, &vs), 42);
	ck_assert_uint_eq(vs.count, 3);
	ck_assert_int_eq(dml_table_foreach(t, NULL, &vs), DML_EINVAL);
	dml_table_free(t);
}
END_TEST

static int visit_sparse(uint64_t key, const float *v, void *arg)
{
	struct visit *vs = arg;
	uint64_t slot = key == UINT64_MAX ? 0 : key;

	if (slot >= 64 || vs->seen[slot] || v[0] != (float)(slot + 1))
		return -1;
	vs->seen[slot] = 1;
	vs->count++;
	return 0;
}

START_TEST(test_foreach_sparse)
{
	struct dml_table_conf c = table_conf(DML_TABLE_SPARSE, 1, DML_OPT_ADD);
	struct dml_table *t = table_make(&c);
	uint8_t seen[64] = { 0 };
	struct visit vs = { .seen = seen };
	uint64_t keys[64];
	float g[64];

	keys[0] = UINT64_MAX;
	g[0] = 1.0f;
	for (int i = 1; i < 64; i++) {
		keys[i] = (uint64_t)(63 - i + 1);
		g[i] = (float)(keys[i] + 1);
	}
	ck_assert_int_eq(dml_table_push_keys(t, keys, 64, g), 0);
	ck_assert_int_eq(dml_table_foreach(t, visit_sparse, &vs), 0);
	ck_assert_uint_eq(vs.count, 64);
	dml_table_free(t);
}
END_TEST

START_TEST(test_add_exact)
{
	struct dml_table_conf c = table_conf(DML_TABLE_DENSE, 7, DML_OPT_ADD);
	struct dml_table *d, *s;
	enum { ROWS = 100, W = 7, STEPS = 1000 };
	static float g[ROWS * W], v[ROWS * W];
	static int64_t want[ROWS * W];
	static uint64_t keys[ROWS];

	c.key_end = ROWS;
	d = table_make(&c);
	c.kind = DML_TABLE_SPARSE;
	s = table_make(&c);
	for (int r = 0; r < ROWS; r++)
		keys[r] = (uint64_t)r;
	for (int step = 0; step < STEPS; step++) {
		for (int i = 0; i < ROWS * W; i++) {
			int64_t x = (int64_t)((i * 31 + step * 17) % 2001) - 1000;

			g[i] = (float)x;
			want[i] += x;
		}
		ck_assert_int_eq(dml_table_push_range(d, 0, ROWS, g), 0);
		ck_assert_int_eq(dml_table_push_keys(s, keys, ROWS, g), 0);
	}
	ck_assert_int_eq(dml_table_pull_range(d, 0, ROWS, v), 0);
	for (int i = 0; i < ROWS * W; i++)
		ck_assert_int_eq((int64_t)v[i], want[i]);
	ck_assert_int_eq(dml_table_pull_keys(s, keys, ROWS, v), 0);
	for (int i = 0; i < ROWS * W; i++)
		ck_assert_int_eq((int64_t)v[i], want[i]);
	dml_table_free(d);
	dml_table_free(s);
}
END_TEST

/* The sparse path applies each optimizer exactly like the kernel does. */
START_TEST(test_sparse_optimizers)
{
	for (int k = DML_OPT_SGD; k <= DML_OPT_ADD; k++) {
		struct dml_table_conf c = table_conf(DML_TABLE_SPARSE, 33,
						    (enum dml_optim_kind)k);
		struct dml_table *t;
		float w[33], st[66] = { 0 }, g[66], out[66];
		uint64_t keys[] = { 12345, 12345 };
		uint32_t step = 0;

		c.init = DML_INIT_UNIFORM;
		c.init_scale = 0.1f;
		t = table_make(&c);
		ck_assert_int_eq(dml_table_pull_keys(t, keys, 1, w), 0);
		for (int i = 0; i < 66; i++)
			g[i] = (float)(i % 9) * 0.1f - 0.4f;
		ck_assert_int_eq(dml_table_push_keys(t, keys, 2, g), 0);
		dml_optim_apply(&c.optim, w, st, &step, g, 33);
		dml_optim_apply(&c.optim, w, st, &step, g + 33, 33);
		ck_assert_int_eq(dml_table_pull_keys(t, keys, 1, out), 0);
		for (int i = 0; i < 33; i++)
			ck_assert_float_eq_tol(out[i], w[i], 1e-7f);
		dml_table_free(t);
	}
}
END_TEST

/* A reply pinned to the values stays a snapshot: a push moves the table. */
START_TEST(test_dense_pin_keeps_snapshot)
{
	struct dml_table_conf c = table_conf(DML_TABLE_DENSE, 2, DML_OPT_ADD);
	struct dml_table *t = table_make(&c);
	struct dml_table_pin *pin, *pin2;
	const float *snap, *first, *live;
	float g[2000], out[4];
	uint64_t key = 5;

	for (int i = 0; i < 2000; i++)
		g[i] = 1.0f;
	ck_assert_int_eq(dml_table_push_range(t, 0, 1000, g), 0);
	ck_assert_int_eq(dml_table_pin_range(t, 4, 6, &snap, &pin), 0);
	first = snap;
	ck_assert(snap[0] == 1.0f && snap[3] == 1.0f);
	/* Both push paths leave the pinned memory alone and change the table. */
	ck_assert_int_eq(dml_table_push_range(t, 0, 1000, g), 0);
	ck_assert_int_eq(dml_table_push_keys(t, &key, 1, g), 0);
	ck_assert(snap[0] == 1.0f && snap[3] == 1.0f);
	ck_assert_int_eq(dml_table_pull_range(t, 4, 6, out), 0);
	ck_assert(out[0] == 2.0f && out[1] == 2.0f && out[2] == 3.0f && out[3] == 3.0f);
	/* No pin, no copy: the values stay where they are. */
	ck_assert_int_eq(dml_table_pin_range(t, 0, 1, &live, &pin2), 0);
	dml_table_unpin(pin2);
	ck_assert_int_eq(dml_table_push_range(t, 0, 1000, g), 0);
	ck_assert_int_eq(dml_table_pin_range(t, 0, 1, &snap, &pin2), 0);
	ck_assert_ptr_eq(live, snap);
	dml_table_unpin(pin2);
	ck_assert_int_eq(dml_table_pin_range(t, 999, 1001, &snap, &pin2), DML_ERANGE);
	/* A pin may outlive its table (a connection still sending); ASan
	 * reports the read if the memory went with the table. */
	dml_table_free(t);
	ck_assert(first[0] == 1.0f && first[3] == 1.0f);
	dml_table_unpin(pin);
}
END_TEST

/* ------------------------------------------------------------------ */
/* Moving rows: export, import, removal and range changes. */

/* A deterministic gradient row for (key, step). */
static void grad_row(uint64_t key, int step, uint32_t width, float *g)
{
	for (uint32_t j = 0; j < width; j++)
		g[j] = (float)((key * 7 + j * 3 + (uint64_t)step * 11) % 17) / 8.0f - 1.0f;
}

static void push_dense_steps(struct dml_table *t, uint64_t begin, uint64_t end,
			     uint32_t width, int from, int to)
{
	float *g = malloc((end - begin) * width * sizeof(float));

	ck_assert_ptr_nonnull(g);
	for (int step = from; step < to; step++) {
		for (uint64_t k = begin; k < end; k++)
			grad_row(k, step, width, g + (k - begin) * width);
		ck_assert_int_eq(dml_table_push_range(t, begin, end, g), 0);
	}
	free(g);
}

/* Bitwise equality of two dense tables' values over [begin, end). */
static void assert_dense_same(struct dml_table *a, struct dml_table *b, uint64_t begin,
			      uint64_t end, uint32_t width)
{
	size_t n = (end - begin) * width;
	float *x = malloc(n * sizeof(float)), *y = malloc(n * sizeof(float));

	ck_assert_int_eq(dml_table_pull_range(a, begin, end, x), 0);
	ck_assert_int_eq(dml_table_pull_range(b, begin, end, y), 0);
	for (size_t i = 0; i < n; i++)
		ck_assert_msg(x[i] == y[i], "value %zu: %g != %g", i, x[i], y[i]);
	free(x);
	free(y);
}

/*
 * Rows moved to another table continue exactly: for every optimizer with
 * state (ADAM's step counter included), pushes after the move give the same
 * values, bit for bit, as on a table that never moved them.
 */
START_TEST(test_dense_export_import_continues)
{
	static const enum dml_optim_kind kinds[] = { DML_OPT_SGD, DML_OPT_MOMENTUM,
						     DML_OPT_ADAGRAD, DML_OPT_ADAM };
	static const size_t floats[] = { 3, 6, 6, 10 };

	for (size_t i = 0; i < sizeof(kinds) / sizeof(kinds[0]); i++) {
		struct dml_table_conf c = table_conf(DML_TABLE_DENSE, 3, kinds[i]);
		struct dml_table *ref, *from, *to;
		float *rows;

		c.init = DML_INIT_UNIFORM;
		c.init_scale = 0.5f;
		ref = table_make(&c);
		from = table_make(&c);
		c.key_begin = 100;
		c.key_end = 300;
		to = table_make(&c);
		ck_assert_uint_eq(dml_table_row_floats(from), floats[i]);
		push_dense_steps(ref, 0, 1000, 3, 0, 3);
		push_dense_steps(from, 0, 1000, 3, 0, 3);
		rows = malloc(200 * floats[i] * sizeof(float));
		ck_assert_int_eq(dml_table_export_range(from, 100, 300, rows), 0);
		ck_assert_int_eq(dml_table_import_range(to, 100, 300, rows), 0);
		push_dense_steps(ref, 100, 300, 3, 3, 6);
		push_dense_steps(to, 100, 300, 3, 3, 6);
		assert_dense_same(ref, to, 100, 300, 3);
		/* Without the state the result differs: the test can fail. */
		if (kinds[i] != DML_OPT_SGD) {
			struct dml_table *plain = table_make(&c);
			float x[3], y[3];

			ck_assert_int_eq(dml_table_export_range(from, 100, 300, rows), 0);
			for (uint64_t k = 100; k < 300; k++)
				for (size_t j = 3; j < floats[i]; j++)
					rows[(k - 100) * floats[i] + j] = 0.0f;
			ck_assert_int_eq(dml_table_import_range(plain, 100, 300, rows), 0);
			push_dense_steps(plain, 100, 300, 3, 3, 6);
			ck_assert_int_eq(dml_table_pull_range(plain, 150, 151, x), 0);
			ck_assert_int_eq(dml_table_pull_range(ref, 150, 151, y), 0);
			ck_assert(x[0] != y[0] || x[1] != y[1] || x[2] != y[2]);
			dml_table_free(plain);
		}
		free(rows);
		dml_table_free(ref);
		dml_table_free(from);
		dml_table_free(to);
	}
}
END_TEST

/* A test hash: the key's low 16 bits, so ranges are easy to reason about. */
static uint64_t low_hash(uint64_t key)
{
	return key & 0xffff;
}

/* Sparse rows whose hash is in a range: exported in hash order, removed,
 * imported elsewhere, and they continue exactly (momentum state included). */
START_TEST(test_sparse_export_remove_import)
{
	struct dml_table_conf c = table_conf(DML_TABLE_SPARSE, 2, DML_OPT_MOMENTUM);
	struct dml_table *ref, *from, *to;
	uint64_t keys[500], *xk;
	float g[1000], *xr, out[2], want[2];
	size_t n, removed;

	c.init = DML_INIT_NORMAL;
	c.init_scale = 1.0f;
	ref = table_make(&c);
	from = table_make(&c);
	to = table_make(&c);
	/* Hashes 0..499 in a scrambled order, keys differing above bit 16. */
	for (uint64_t i = 0; i < 500; i++)
		keys[i] = ((i * 7919) % 500) | ((i + 1) << 20);
	for (int step = 0; step < 3; step++) {
		for (size_t i = 0; i < 500; i++)
			grad_row(keys[i], step, 2, g + 2 * i);
		ck_assert_int_eq(dml_table_push_keys(ref, keys, 500, g), 0);
		ck_assert_int_eq(dml_table_push_keys(from, keys, 500, g), 0);
	}
	ck_assert_int_eq(dml_table_export_hashed(from, low_hash, 100, 250, &xk, &xr, &n), 0);
	ck_assert_uint_eq(n, 150);
	ck_assert_uint_eq(dml_table_rows(from), 500);
	for (size_t i = 0; i < n; i++)
		ck_assert_uint_eq(low_hash(xk[i]), 100 + i);
	ck_assert_int_eq(dml_table_remove_hashed(from, low_hash, 100, 250, &removed), 0);
	ck_assert_uint_eq(removed, 150);
	ck_assert_uint_eq(dml_table_rows(from), 350);
	ck_assert_int_eq(dml_table_import_keys(to, xk, n, xr), 0);
	ck_assert_uint_eq(dml_table_rows(to), 150);
	/* One more step everywhere: moved rows on `to`, kept ones on `from`. */
	for (size_t i = 0; i < 500; i++)
		grad_row(keys[i], 3, 2, g + 2 * i);
	ck_assert_int_eq(dml_table_push_keys(ref, keys, 500, g), 0);
	for (size_t i = 0; i < 500; i++) {
		uint64_t h = low_hash(keys[i]);
		struct dml_table *t = h >= 100 && h < 250 ? to : from;

		ck_assert_int_eq(dml_table_push_keys(t, &keys[i], 1, g + 2 * i), 0);
		ck_assert_int_eq(dml_table_pull_keys(t, &keys[i], 1, out), 0);
		ck_assert_int_eq(dml_table_pull_keys(ref, &keys[i], 1, want), 0);
		ck_assert(out[0] == want[0] && out[1] == want[1]);
	}
	ck_assert_uint_eq(dml_table_rows(from), 350);
	free(xk);
	free(xr);
	/* Every kept row is still found after the compaction. */
	ck_assert_int_eq(dml_table_export_hashed(from, low_hash, 0, 0x10000, &xk,
						 &xr, &n), 0);
	ck_assert_uint_eq(n, 350);
	free(xk);
	free(xr);
	/* A removed key pulled again on `from` creates nothing. */
	ck_assert_int_eq(dml_table_remove_hashed(from, low_hash, 0, 0x10000, &removed), 0);
	ck_assert_uint_eq(removed, 350);
	ck_assert_int_eq(dml_table_pull_keys(from, &keys[0], 1, out), 0);
	ck_assert_uint_eq(dml_table_rows(from), 0);
	/* An empty range exports nothing and removes nothing. */
	ck_assert_int_eq(dml_table_export_hashed(to, low_hash, 300, 300, &xk, &xr, &n), 0);
	ck_assert_uint_eq(n, 0);
	ck_assert_ptr_null(xk);
	ck_assert_int_eq(dml_table_remove_hashed(to, low_hash, 400, 500, &removed), 0);
	ck_assert_uint_eq(removed, 0);
	ck_assert_uint_eq(dml_table_rows(to), 150);
	dml_table_free(ref);
	dml_table_free(from);
	dml_table_free(to);
}
END_TEST

/* A dense table moved to a new range keeps the overlap (values and state)
 * and starts the rest fresh; a reply pinned to the old values keeps them. */
START_TEST(test_dense_set_range)
{
	struct dml_table_conf c = table_conf(DML_TABLE_DENSE, 2, DML_OPT_MOMENTUM);
	struct dml_table *t, *ref, *fresh;
	struct dml_table_pin *pin;
	const float *snap;
	float before;

	c.init = DML_INIT_UNIFORM;
	c.init_scale = 1.0f;
	c.key_end = 100;
	t = table_make(&c);
	ref = table_make(&c);
	c.key_begin = 100;
	c.key_end = 150;
	fresh = table_make(&c);
	push_dense_steps(t, 0, 100, 2, 0, 2);
	push_dense_steps(ref, 0, 100, 2, 0, 2);
	ck_assert_int_eq(dml_table_pin_range(t, 0, 60, &snap, &pin), 0);
	before = snap[0];
	ck_assert_int_eq(dml_table_set_range(t, 50, 150), 0);
	ck_assert_uint_eq(dml_table_rows(t), 100);
	ck_assert_uint_eq(dml_table_conf(t)->key_begin, 50);
	ck_assert_uint_eq(dml_table_conf(t)->key_end, 150);
	ck_assert(snap[0] == before);
	dml_table_unpin(pin);
	ck_assert_int_eq(dml_table_pull_range(t, 0, 1, (float[2]){ 0 }), DML_ERANGE);
	/* The kept rows continue with their momentum, the new ones start fresh. */
	push_dense_steps(ref, 50, 100, 2, 2, 4);
	push_dense_steps(fresh, 100, 150, 2, 2, 4);
	push_dense_steps(t, 50, 150, 2, 2, 4);
	assert_dense_same(t, ref, 50, 100, 2);
	assert_dense_same(t, fresh, 100, 150, 2);
	/* Down to nothing and back. */
	ck_assert_int_eq(dml_table_set_range(t, 120, 120), 0);
	ck_assert_uint_eq(dml_table_rows(t), 0);
	ck_assert_uint_eq(dml_table_value_bytes(t), 0);
	ck_assert_int_eq(dml_table_set_range(t, 100, 150), 0);
	ck_assert_int_eq(dml_table_set_range(t, 10, 5), DML_EINVAL);
	ck_assert_int_eq(dml_table_set_range(NULL, 0, 5), DML_EINVAL);
	dml_table_free(t);
	dml_table_free(ref);
	dml_table_free(fresh);
}
END_TEST

/* The calls refuse the wrong kind, ranges outside and bad arguments, and an
 * import that fails changes nothing. */
START_TEST(test_move_errors)
{
	struct dml_table_conf c = table_conf(DML_TABLE_DENSE, 1, DML_OPT_ADD);
	struct dml_table *d = table_make(&c), *sp;
	uint64_t keys[2] = { 5, 1000 }, *xk;
	float rows[2] = { 1.0f, 2.0f }, out, *xr;
	size_t n;

	c.kind = DML_TABLE_SPARSE;
	sp = table_make(&c);
	ck_assert_uint_eq(dml_table_row_floats(d), 1);
	ck_assert_uint_eq(dml_table_row_floats(NULL), 0);
	ck_assert_int_eq(dml_table_export_range(d, 990, 1001, rows), DML_ERANGE);
	ck_assert_int_eq(dml_table_export_range(sp, 0, 1, rows), DML_EINVAL);
	ck_assert_int_eq(dml_table_import_range(d, 5, 4, rows), DML_EINVAL);
	ck_assert_int_eq(dml_table_import_keys(d, keys, 2, rows), DML_ERANGE);
	ck_assert_int_eq(dml_table_pull_keys(d, keys, 1, &out), 0);
	ck_assert_float_eq(out, 0.0f);
	ck_assert_int_eq(dml_table_import_keys(d, keys, 1, rows), 0);
	ck_assert_int_eq(dml_table_pull_keys(d, keys, 1, &out), 0);
	ck_assert_float_eq(out, 1.0f);
	ck_assert_int_eq(dml_table_export_hashed(d, low_hash, 0, 1, &xk, &xr, &n), DML_EINVAL);
	ck_assert_int_eq(dml_table_export_hashed(sp, NULL, 0, 1, &xk, &xr, &n), DML_EINVAL);
	ck_assert_int_eq(dml_table_export_hashed(sp, low_hash, 2, 1, &xk, &xr, &n), DML_EINVAL);
	ck_assert_int_eq(dml_table_remove_hashed(d, low_hash, 0, 1, NULL), DML_EINVAL);
	ck_assert_int_eq(dml_table_set_range(sp, 0, 1), DML_EINVAL);
	ck_assert_int_eq(dml_table_import_keys(sp, keys, 2, rows), 0);
	ck_assert_int_eq(dml_table_pull_keys(sp, &keys[1], 1, &out), 0);
	ck_assert_float_eq(out, 2.0f);
	dml_table_free(d);
	dml_table_free(sp);
}
END_TEST

/* ---- changed rows ------------------------------------------------------------ */

/* What dml_table_changes handed out: keys in order, and each row's first float. */
struct changes {
	uint64_t keys[64];
	float first[64];
	size_t n, calls;
};

static int take_rows(void *arg, const uint64_t *keys, uint64_t begin, size_t n,
		     const float *rows)
{
	struct changes *c = arg;
	size_t rf = 3;

	c->calls++;
	for (size_t i = 0; i < n && c->n < 64; i++, c->n++) {
		c->keys[c->n] = keys ? keys[i] : begin + i;
		c->first[c->n] = rows[i * rf];
	}
	return 0;
}

static void changes_expect(struct dml_table *t, const uint64_t *keys, size_t n, size_t calls)
{
	struct changes c = { 0 };

	ck_assert_int_eq(dml_table_changes(t, take_rows, &c), 0);
	ck_assert_uint_eq(c.n, n);
	ck_assert_uint_eq(c.calls, calls);
	for (size_t i = 0; i < n; i++)
		ck_assert_uint_eq(c.keys[i], keys[i]);
}

/* Pushes and imports mark rows; each is handed out once, runs together. */
START_TEST(test_changes_dense)
{
	struct dml_table *t = dense_add_table();
	struct changes c = { 0 };
	static const uint64_t run[] = { 110, 111, 112, 150 }, moved[] = { 140, 141 };
	float g[9] = { 1, 1, 1, 2, 2, 2, 3, 3, 3 }, row[3] = { 7, 7, 7 };
	uint64_t k = 150;

	ck_assert_int_eq(dml_table_changes(t, take_rows, &c), DML_EINVAL);
	ck_assert_int_eq(dml_table_track_changes(t), 0);
	changes_expect(t, NULL, 0, 0);
	ck_assert_int_eq(dml_table_push_range(t, 110, 113, g), 0);
	ck_assert_int_eq(dml_table_push_keys(t, &k, 1, g), 0);
	ck_assert_int_eq(dml_table_push_range(t, 111, 112, g), 0);
	changes_expect(t, run, 4, 2);
	changes_expect(t, NULL, 0, 0);
	ck_assert_int_eq(dml_table_import_range(t, 140, 141, row), 0);
	ck_assert_int_eq(dml_table_import_keys(t, &moved[1], 1, row), 0);
	ck_assert_int_eq(dml_table_changes(t, take_rows, &c), 0);
	ck_assert(c.n == 2 && c.keys[0] == 140 && c.keys[1] == 141 && c.first[1] == 7);
	/* A new range: every row counts as changed. */
	ck_assert_int_eq(dml_table_set_range(t, 195, 205), 0);
	memset(&c, 0, sizeof(c));
	ck_assert_int_eq(dml_table_changes(t, take_rows, &c), 0);
	ck_assert(c.n == 10 && c.keys[0] == 195 && c.keys[9] == 204 && c.calls == 1);
	dml_table_free(t);
}
END_TEST

/* Sparse: keys handed out with their rows; removed rows take their marks along. */
START_TEST(test_changes_sparse)
{
	struct dml_table_conf conf = table_conf(DML_TABLE_SPARSE, 3, DML_OPT_ADD);
	struct dml_table *t = table_make(&conf);
	uint64_t keys[40], left[20];
	float g[40 * 3];
	struct changes c = { 0 };
	size_t removed, nleft = 0;

	for (size_t i = 0; i < 40; i++) {
		keys[i] = i * 10;
		g[i * 3] = (float)i;
		g[i * 3 + 1] = g[i * 3 + 2] = 0;
	}
	ck_assert_int_eq(dml_table_track_changes(t), 0);
	/* Ten rows, then forty: the table grows with its marks. */
	ck_assert_int_eq(dml_table_push_keys(t, keys, 10, g), 0);
	changes_expect(t, keys, 10, 1);
	ck_assert_int_eq(dml_table_push_keys(t, keys, 40, g), 0);
	changes_expect(t, keys, 40, 1);
	/* Keys 300..390 change again; those of 0..195 leave. */
	ck_assert_int_eq(dml_table_push_keys(t, keys + 30, 10, g + 90), 0);
	ck_assert_int_eq(dml_table_remove_hashed(t, low_hash, 0, 200, &removed), 0);
	ck_assert_uint_eq(removed, 20);
	for (size_t j = 30; j < 40; j++)
		left[nleft++] = keys[j];
	ck_assert_int_eq(dml_table_changes(t, take_rows, &c), 0);
	ck_assert_uint_eq(c.n, nleft);
	for (size_t i = 0; i < c.n; i++) {
		ck_assert_uint_eq(c.keys[i], left[i]);
		ck_assert_float_eq(c.first[i], 2.0f * (float)(30 + i));
	}
	dml_table_free(t);
}
END_TEST

/* What a write watcher saw: each call's rows, and row r0's first value then. */
struct watched {
	struct dml_table *t;
	uint64_t r0[16], r1[16], key[16];
	float before[16];
	size_t n;
};

static void watch(void *arg, uint64_t r0, uint64_t r1)
{
	struct watched *w = arg;
	float row[3];

	ck_assert_uint_lt(w->n, 16);
	ck_assert_uint_lt(r0, r1);
	ck_assert_int_eq(dml_table_export_rows(w->t, r0, r0 + 1, &w->key[w->n], row), 0);
	w->r0[w->n] = r0;
	w->r1[w->n] = r1;
	w->before[w->n++] = row[0];
}

/* A watcher hears of every write before it happens, the old values still there. */
START_TEST(test_watch_writes)
{
	struct dml_table *t = dense_add_table();
	struct dml_table_conf sc = table_conf(DML_TABLE_SPARSE, 3, DML_OPT_ADD);
	struct dml_table *sp = table_make(&sc);
	struct watched w = { .t = t };
	float g[6] = { 1, 0, 0, 2, 0, 0 }, row[3];
	uint64_t k = 150, keys[2] = { 7, 9 }, key;
	size_t removed;

	dml_table_watch_writes(t, watch, &w);
	ck_assert_int_eq(dml_table_push_range(t, 110, 112, g), 0);
	ck_assert_int_eq(dml_table_push_range(t, 110, 111, g + 3), 0);
	ck_assert_int_eq(dml_table_push_keys(t, &k, 1, g), 0);
	ck_assert_int_eq(dml_table_import_range(t, 120, 121, g), 0);
	ck_assert_int_eq(dml_table_import_keys(t, &k, 1, g + 3), 0);
	ck_assert_int_eq(dml_table_set_range(t, 100, 210), 0);
	ck_assert_uint_eq(w.n, 6);
	ck_assert(w.r0[0] == 10 && w.r1[0] == 12 && w.key[0] == 110 && w.before[0] == 0);
	ck_assert(w.r0[1] == 10 && w.r1[1] == 11 && w.before[1] == 1);
	ck_assert(w.r0[2] == 50 && w.r1[2] == 51 && w.before[2] == 0);
	ck_assert(w.r0[3] == 20 && w.before[3] == 0);
	ck_assert(w.r0[4] == 50 && w.before[4] == 1);
	ck_assert(w.r0[5] == 0 && w.r1[5] == 100);
	/* Stopped: no more calls. */
	dml_table_watch_writes(t, NULL, NULL);
	ck_assert_int_eq(dml_table_push_keys(t, &k, 1, g), 0);
	ck_assert_uint_eq(w.n, 6);
	ck_assert_int_eq(dml_table_export_rows(t, 50, 51, &key, row), 0);
	ck_assert(key == 150 && row[0] == 3);
	ck_assert_int_eq(dml_table_export_rows(t, 0, 111, &key, row), DML_EINVAL);

	/* Sparse: new rows are told of by index; a removal tells of all rows. */
	memset(&w, 0, sizeof(w));
	w.t = sp;
	ck_assert_int_eq(dml_table_push_keys(sp, keys, 2, g), 0);
	dml_table_watch_writes(sp, watch, &w);
	ck_assert_int_eq(dml_table_push_keys(sp, &keys[1], 1, g + 3), 0);
	ck_assert(w.n == 1 && w.r0[0] == 1 && w.key[0] == 9 && w.before[0] == 2);
	ck_assert_int_eq(dml_table_remove_hashed(sp, low_hash, 0, 8, &removed), 0);
	ck_assert(removed == 1 && w.n == 2 && w.r0[1] == 0 && w.r1[1] == 2);
	dml_table_free(t);
	dml_table_free(sp);
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
END_TEST

static Suite *table_suite(void)
{
	Suite *s = suite_create("table");
	TCase *optim = tcase_create("optim");
	TCase *conf = tcase_create("conf");
	TCase *dense = tcase_create("dense");
	TCase *init = tcase_create("init");
	TCase *sparse = tcase_create("sparse");
	TCase *move = tcase_create("move");

	tcase_add_test(optim, test_optim_sgd);
	tcase_add_test(optim, test_optim_sgd_weight_decay);
	tcase_add_test(optim, test_optim_momentum);
	tcase_add_test(optim, test_optim_adagrad);
	tcase_add_test(optim, test_optim_adam);
	tcase_add_test(optim, test_optim_add);
	tcase_add_test(optim, test_optim_state_floats);
	tcase_add_test(optim, test_optim_validate);
	tcase_add_test(optim, test_optim_lr_decay);
	tcase_add_test(optim, test_optim_weighted_formulas);
	tcase_add_test(optim, test_optim_weight_one_is_plain);
	tcase_add_test(optim, test_optim_weights_move_as_far_as_equal_batches);
	tcase_add_test(optim, test_table_push_weighted);
	suite_add_tcase(s, optim);

	tcase_add_test(conf, test_conf_rejected);
	tcase_add_test(conf, test_conf_too_big);
	tcase_add_test(conf, test_names);
	tcase_add_test(conf, test_bytes);
	suite_add_tcase(s, conf);

	tcase_add_test(dense, test_dense_range);
	tcase_add_test(dense, test_dense_keys);
	tcase_add_test(dense, test_dense_range_equals_keys);
	tcase_add_test(dense, test_dense_adam_steps);
	tcase_add_test(dense, test_foreach_dense);
	tcase_add_test(dense, test_add_exact);
	tcase_add_test(dense, test_dense_pin_keeps_snapshot);
	suite_add_tcase(s, dense);

	tcase_add_test(init, test_init_uniform_sparse_matches_dense);
	tcase_add_test(init, test_init_normal_sparse_matches_dense);
	tcase_add_test(init, test_init_order_independent);
	tcase_add_test(init, test_init_distribution);
	suite_add_tcase(s, init);

	tcase_set_timeout(sparse, 60);
	tcase_add_test(sparse, test_sparse_repeated_keys);
	tcase_add_test(sparse, test_sparse_extreme_keys);
	tcase_add_test(sparse, test_sparse_growth);
	tcase_add_test(sparse, test_sparse_enomem);
	tcase_add_test(sparse, test_foreach_sparse);
	tcase_add_test(sparse, test_sparse_optimizers);
	suite_add_tcase(s, sparse);

	tcase_add_test(move, test_dense_export_import_continues);
	tcase_add_test(move, test_sparse_export_remove_import);
	tcase_add_test(move, test_dense_set_range);
	tcase_add_test(move, test_move_errors);
	tcase_add_test(move, test_changes_dense);
	tcase_add_test(move, test_changes_sparse);
	tcase_add_test(move, test_watch_writes);
	suite_add_tcase(s, move);
	return s;
}

int main(void)
{
	return dml_check_run(table_suite());
}
