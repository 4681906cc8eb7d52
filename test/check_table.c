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
 * This file holds the shared helpers, the configuration and initializer
 * tests and the suite; check_table_optim.c, check_table_rows.c and
 * check_table_move.c the rest.
 *
 * Pure in-memory tests: no files, no sockets.
 */
#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "test/check_run.h"
#include "test/check_table.h"
#include "proto/dml_error.h"
#include "store/optim.h"
#include "store/table.h"
#include "proto/util.h"

struct dml_optim_conf optim_conf(enum dml_optim_kind kind)
{
	struct dml_optim_conf c = {
		.kind = kind, .lr = 0.1f, .weight_decay = 0.0f, .momentum = 0.9f,
		.beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-6f,
	};
	return c;
}

struct dml_table_conf table_conf(enum dml_table_kind kind, uint32_t width,
					enum dml_optim_kind opt)
{
	struct dml_table_conf c = {
		.id = 1, .width = width, .kind = kind, .key_begin = 0, .key_end = 1000,
		.init = DML_INIT_ZEROS, .init_scale = 0.0f, .seed = 7,
		.optim = optim_conf(opt),
	};
	return c;
}

struct dml_table *table_make(const struct dml_table_conf *c)
{
	struct dml_table *t = NULL;

	ck_assert_int_eq(dml_table_new(c, &t), 0);
	ck_assert_ptr_nonnull(t);
	return t;
}

/* A key sequence that covers the whole 64-bit space, including 0. */
uint64_t key_of(uint64_t i)
{
	uint64_t z = i * 0x9e3779b97f4a7c15ull;

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

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

END_TEST

/* A zero-init sparse pull zeroes its whole output first, then copies the
 * rows that exist: pushed keys mixed with never-pushed ones, over several
 * pipeline groups, in an output filled with junk, at width 1 (no memcpy)
 * and wider. */
START_TEST(test_sparse_pull_mixed_zero_init)
{
	static const uint32_t widths[] = { 1, 3 };
	enum { N = 61 };

	for (size_t wi = 0; wi < DML_ARRAY_LEN(widths); wi++) {
		const uint32_t w = widths[wi];
		struct dml_table_conf c = table_conf(DML_TABLE_SPARSE, w, DML_OPT_ADD);
		struct dml_table *t = table_make(&c);
		uint64_t keys[N], pushed[N];
		float g[N * 3], out[N * 3];
		size_t np = 0;

		for (size_t i = 0; i < N; i++) {
			keys[i] = key_of(i);
			if (i % 3 == 1)
				pushed[np++] = keys[i];
		}
		for (size_t i = 0; i < np * w; i++)
			g[i] = (float)(i + 1);
		ck_assert_int_eq(dml_table_push_keys(t, pushed, np, g), 0);
		memset(out, 0xff, sizeof(out));   /* NaNs: a skipped key shows */
		ck_assert_int_eq(dml_table_pull_keys(t, keys, N, out), 0);
		for (size_t i = 0; i < N; i++)
			for (size_t j = 0; j < w; j++) {
				float want = i % 3 == 1 ? (float)(i / 3 * w + j + 1) : 0.0f;

				ck_assert_msg(out[i * w + j] == want, "width %u key %zu [%zu]: %g, want %g",
					      w, i, j, out[i * w + j], want);
			}
		ck_assert_uint_eq(dml_table_rows(t), np);
		dml_table_free(t);
	}
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

	check_table_optim_tests(optim);
	suite_add_tcase(s, optim);

	tcase_add_test(conf, test_conf_rejected);
	tcase_add_test(conf, test_conf_too_big);
	tcase_add_test(conf, test_names);
	tcase_add_test(conf, test_bytes);
	suite_add_tcase(s, conf);

	check_table_rows_tests(dense, sparse);
	suite_add_tcase(s, dense);

	tcase_add_test(init, test_init_uniform_sparse_matches_dense);
	tcase_add_test(init, test_init_normal_sparse_matches_dense);
	tcase_add_test(init, test_init_order_independent);
	tcase_add_test(init, test_init_distribution);
	tcase_add_test(init, test_sparse_pull_mixed_zero_init);
	suite_add_tcase(s, init);

	tcase_set_timeout(sparse, 60);
	suite_add_tcase(s, sparse);

	check_table_move_tests(move);
	suite_add_tcase(s, move);
	return s;
}

int main(void)
{
	return dml_check_run(table_suite());
}
