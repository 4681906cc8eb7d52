/*
 * check_table's tests of rows moving between tables (export, import,
 * removal, dense range changes) continuing exactly where they stopped, and
 * of changed rows and write watchers.
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

void check_table_move_tests(TCase *move)
{
	tcase_add_test(move, test_dense_export_import_continues);
	tcase_add_test(move, test_sparse_export_remove_import);
	tcase_add_test(move, test_dense_set_range);
	tcase_add_test(move, test_move_errors);
	tcase_add_test(move, test_changes_dense);
	tcase_add_test(move, test_changes_sparse);
	tcase_add_test(move, test_watch_writes);
}
