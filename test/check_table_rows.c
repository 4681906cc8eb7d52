/*
 * check_table's tests of dense and sparse tables: ranges and keys (with
 * range errors that change nothing), sparse rows created on first touch,
 * growth through many resizes, the extreme keys, foreach, exact integer sums
 * with ADD, and pinned dense values.
 */
#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "test/check_table.h"
#include "proto/dml_error.h"
#include "store/optim.h"
#include "store/table.h"
#include "proto/util.h"

/* ------------------------------------------------------------------ */
/* Dense tables. */

struct dml_table *dense_add_table(void)
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

void check_table_rows_tests(TCase *dense, TCase *sparse)
{
	tcase_add_test(dense, test_dense_range);
	tcase_add_test(dense, test_dense_keys);
	tcase_add_test(dense, test_dense_range_equals_keys);
	tcase_add_test(dense, test_dense_adam_steps);
	tcase_add_test(dense, test_foreach_dense);
	tcase_add_test(dense, test_add_exact);
	tcase_add_test(dense, test_dense_pin_keeps_snapshot);

	tcase_add_test(sparse, test_sparse_repeated_keys);
	tcase_add_test(sparse, test_sparse_extreme_keys);
	tcase_add_test(sparse, test_sparse_growth);
	tcase_add_test(sparse, test_sparse_enomem);
	tcase_add_test(sparse, test_foreach_sparse);
	tcase_add_test(sparse, test_sparse_optimizers);
}
