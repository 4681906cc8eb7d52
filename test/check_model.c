/*
 * Unit tests of the local parameter store and of model files: the store's
 * io applies a job's optimizer exactly as a server's table does (dense and
 * sparse), answers libdml's errors, and trains and evaluates the lsq app;
 * model files survive a round trip (spec included), and the reader gives
 * the right code and "path: reason" for every truncation, every byte flip
 * and crafted lengths, without crashing or allocating from them.
 * `dml-worker --eval` runs as a built program ($DML_BUILDDIR/worker/).
 */
#include <check.h>
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zlib.h>

#include "app.h"
#include "check_run.h"
#include "dml_error.h"
#include "job_spec.h"
#include "local_store.h"
#include "model_file.h"
#include "table.h"
#include "table_spec.h"
#include "tmpdir.h"
#include "util.h"

/* Table 0: dense, 8 keys of width 1, sgd; table 5: sparse, width 3, adam. */
static const char store_job[] =
	"[job]\nname = store\napp = lsq\ndata = synthetic\nexamples = 100\ndim = 8\n"
	"batch_size = 4\nmax_clocks = 1\nseed = 3\n"
	"[table]\nid = 0\nkind = dense\nwidth = 1\nkeys = 8\ninit = uniform\n"
	"init_scale = 0.5\nseed = 9\noptimizer = sgd\nlr = 0.25\n"
	"[table]\nid = 5\nkind = sparse\nwidth = 3\ninit = normal\ninit_scale = 0.1\n"
	"seed = 4\noptimizer = adam\nlr = 0.01\n";

/* An lsq job of 16 features; w starts at zero. */
static const char lsq_job[] =
	"[job]\nname = lsq\napp = lsq\ndata = synthetic\nexamples = 2000\ndim = 16\n"
	"batch_size = 64\nmax_clocks = 1\nseed = 7\n"
	"[table]\nid = 0\nkind = dense\nwidth = 1\nkeys = 16\noptimizer = sgd\nlr = 0.1\n";

#define LSQ_DIM 16
#define LSQ_SEED 7
/* The lsq data's noise has stddev 0.1: the best model's loss is about 0.01. */
#define NOISE_FLOOR 0.01

#define PATH_LEN DML_TEST_PATH_MAX

/* The path of name in the test folder, written into path (PATH_LEN bytes). */
static const char *path_of(char *path, const char *name)
{
	return dml_test_tmpdir_path(path, PATH_LEN, name);
}

static Dml__JobSpec *spec_parse(const char *text)
{
	Dml__JobSpec *spec = NULL;
	char err[256] = "";
	int rc = dml_job_file_parse_string("test", text, &spec, err, sizeof(err));

	ck_assert_msg(rc == 0, "job text refused: %s", err);
	return spec;
}

static struct dml_local_store *store_make(const Dml__JobSpec *spec)
{
	struct dml_local_store *s = NULL;
	char err[256] = "";

	ck_assert_msg(dml_local_store_new(spec, &s, err, sizeof(err)) == 0, "%s", err);
	ck_assert_ptr_nonnull(s);
	return s;
}

/* A server-side table made from the spec's table id, as dml-server makes it. */
static struct dml_table *reference_table(const Dml__JobSpec *spec, uint32_t id)
{
	struct dml_table_conf tc;
	struct dml_table *t = NULL;
	char err[256];

	for (size_t i = 0; i < spec->n_tables; i++) {
		if (spec->tables[i]->id != id)
			continue;
		ck_assert_int_eq(dml_table_conf_from_spec(spec->tables[i], &tc, err,
							  sizeof(err)), 0);
		tc.key_end = spec->tables[i]->keys;
		ck_assert_int_eq(dml_table_new(&tc, &t), 0);
		return t;
	}
	ck_abort_msg("no table %u", id);
	return NULL;
}

/* Wait for h and give its result. */
static int io_wait(struct dml_app_io *io, dml_handle_t h)
{
	return dml_app_wait(io, h);
}

static int pull_range(struct dml_app_io *io, uint32_t t, uint64_t b, uint64_t e, float *out)
{
	dml_handle_t h = 0;
	int rc = io->ops->pull_range(io->arg, t, b, e, out, &h);

	return rc ? rc : io_wait(io, h);
}

static int push_range(struct dml_app_io *io, uint32_t t, uint64_t b, uint64_t e,
		      const float *g)
{
	dml_handle_t h = 0;
	int rc = io->ops->push_range(io->arg, t, b, e, g, &h);

	return rc ? rc : io_wait(io, h);
}

static int pull_keys(struct dml_app_io *io, uint32_t t, const uint64_t *k, size_t n,
		     float *out)
{
	dml_handle_t h = 0;
	int rc = io->ops->pull(io->arg, t, k, n, out, &h);

	return rc ? rc : io_wait(io, h);
}

static int push_keys(struct dml_app_io *io, uint32_t t, const uint64_t *k, size_t n,
		     const float *g)
{
	dml_handle_t h = 0;
	int rc = io->ops->push(io->arg, t, k, n, g, &h);

	return rc ? rc : io_wait(io, h);
}

/* ---- the store ----------------------------------------------------------- */

START_TEST(store_dense_applies_sgd_like_a_table)
{
	Dml__JobSpec *spec = spec_parse(store_job);
	struct dml_local_store *s = store_make(spec);
	struct dml_table *ref = reference_table(spec, 0);
	static const uint64_t keys[] = { 2, 2, 7 };
	static const float kg[] = { 0.5f, -1.0f, 3.0f };
	float w0[8], w1[8], want[8], g[8], got[8];
	struct dml_app_io io;
	int nonzero = 0;

	dml_local_store_io(s, &io);
	ck_assert_int_eq(pull_range(&io, 0, 0, 8, w0), 0);
	ck_assert_int_eq(dml_table_pull_range(ref, 0, 8, want), 0);
	/* The job's initializer: the same values a server starts with. */
	ck_assert_int_eq(memcmp(w0, want, sizeof(w0)), 0);
	for (int i = 0; i < 8; i++)
		nonzero += w0[i] != 0.0f;
	ck_assert_int_gt(nonzero, 0);

	for (int i = 0; i < 8; i++)
		g[i] = (float)(i - 3) * 0.125f;
	ck_assert_int_eq(push_range(&io, 0, 0, 8, g), 0);
	ck_assert_int_eq(pull_range(&io, 0, 0, 8, w1), 0);
	for (int i = 0; i < 8; i++)
		ck_assert_float_eq_tol(w1[i], w0[i] - 0.25f * g[i], 1e-6f);
	ck_assert_int_eq(dml_table_push_range(ref, 0, 8, g), 0);
	ck_assert_int_eq(dml_table_pull_range(ref, 0, 8, want), 0);
	ck_assert_int_eq(memcmp(w1, want, sizeof(w1)), 0);

	/* A key list on a dense table; a repeated key is applied twice. */
	ck_assert_int_eq(push_keys(&io, 0, keys, 3, kg), 0);
	ck_assert_int_eq(dml_table_push_keys(ref, keys, 3, kg), 0);
	ck_assert_int_eq(dml_table_pull_range(ref, 0, 8, want), 0);
	ck_assert_float_eq_tol(want[2], w1[2] - 0.25f * (0.5f - 1.0f), 1e-6f);
	ck_assert_int_eq(pull_keys(&io, 0, keys, 3, got), 0);
	ck_assert_float_eq(got[0], want[2]);
	ck_assert_float_eq(got[1], want[2]);
	ck_assert_float_eq(got[2], want[7]);
	ck_assert_int_eq(dml_local_store_get(s, 0, got), 0);
	ck_assert_int_eq(memcmp(got, want, sizeof(got)), 0);

	dml_table_free(ref);
	dml_local_store_free(s);
	dml_job_spec_free(spec);
}
END_TEST

START_TEST(store_sparse_rows_on_first_use)
{
	Dml__JobSpec *spec = spec_parse(store_job);
	struct dml_local_store *s = store_make(spec);
	struct dml_table *ref = reference_table(spec, 5);
	static const uint64_t keys[] = { 42, UINT64_C(1) << 40, 42, UINT64_MAX };
	static const uint64_t fresh[] = { 99 };
	static const float set[] = { 1.5f, -2.5f, 4.0f };
	float v[12], want[12], g[12];
	struct dml_app_io io;

	dml_local_store_io(s, &io);
	ck_assert_int_eq(pull_keys(&io, 5, keys, 4, v), 0);
	ck_assert_int_eq(dml_table_pull_keys(ref, keys, 4, want), 0);
	ck_assert_int_eq(memcmp(v, want, sizeof(v)), 0);
	ck_assert_int_eq(memcmp(v, v + 6, 3 * sizeof(float)), 0);
	ck_assert_int_ne(memcmp(v, v + 3, 3 * sizeof(float)), 0);

	for (int i = 0; i < 12; i++)
		g[i] = (float)(i % 5) - 2.0f;
	for (int round = 0; round < 3; round++) {
		ck_assert_int_eq(push_keys(&io, 5, keys, 4, g), 0);
		ck_assert_int_eq(dml_table_push_keys(ref, keys, 4, g), 0);
	}
	ck_assert_int_eq(pull_keys(&io, 5, keys, 4, v), 0);
	ck_assert_int_eq(dml_table_pull_keys(ref, keys, 4, want), 0);
	ck_assert_int_eq(memcmp(v, want, sizeof(v)), 0);

	/* Setting rows of a sparse table makes them. */
	ck_assert_int_eq(dml_local_store_set_keys(s, 5, fresh, 1, set), 0);
	ck_assert_int_eq(pull_keys(&io, 5, fresh, 1, v), 0);
	ck_assert_int_eq(memcmp(v, set, sizeof(set)), 0);
	/* Whole-table copies are for dense tables only. */
	ck_assert_int_eq(dml_local_store_get(s, 5, v), DML_EINVAL);
	ck_assert_int_eq(dml_local_store_set(s, 5, v), DML_EINVAL);

	dml_table_free(ref);
	dml_local_store_free(s);
	dml_job_spec_free(spec);
}
END_TEST

START_TEST(store_errors_match_libdml)
{
	Dml__JobSpec *spec = spec_parse(store_job);
	struct dml_local_store *s = store_make(spec);
	static const uint64_t k9[] = { 9 }, k8[] = { 8 }, k1[] = { 1 };
	float v[32] = { 0 }, before[8], after[8];
	struct dml_app_io io;
	dml_handle_t h = 0, h2 = 0;

	dml_local_store_io(s, &io);
	/* No such table. */
	ck_assert_int_eq(io.ops->pull_range(io.arg, 9, 0, 1, v, &h), DML_ENOTFOUND);
	ck_assert_int_eq(io.ops->push_range(io.arg, 9, 0, 1, v, &h), DML_ENOTFOUND);
	ck_assert_int_eq(io.ops->pull(io.arg, 9, k1, 1, v, &h), DML_ENOTFOUND);
	ck_assert_int_eq(io.ops->push(io.arg, 9, k1, 1, v, &h), DML_ENOTFOUND);
	ck_assert_int_eq(dml_local_store_get(s, 9, v), DML_ENOTFOUND);
	ck_assert_int_eq(dml_local_store_set(s, 9, v), DML_ENOTFOUND);
	ck_assert_int_eq(dml_local_store_set_keys(s, 9, k1, 1, v), DML_ENOTFOUND);
	/* Ranges outside the dense table, or empty, are refused at once. */
	ck_assert_int_eq(io.ops->pull_range(io.arg, 0, 0, 9, v, &h), DML_ERANGE);
	ck_assert_int_eq(io.ops->push_range(io.arg, 0, 5, 9, v, &h), DML_ERANGE);
	ck_assert_int_eq(io.ops->pull_range(io.arg, 0, 3, 3, v, &h), DML_ERANGE);
	/* A range on a sparse table, an empty key list, missing buffers. */
	ck_assert_int_eq(io.ops->pull_range(io.arg, 5, 0, 1, v, &h), DML_EINVAL);
	ck_assert_int_eq(io.ops->pull(io.arg, 0, k1, 0, v, &h), DML_EINVAL);
	ck_assert_int_eq(io.ops->pull(io.arg, 0, NULL, 1, v, &h), DML_EINVAL);
	ck_assert_int_eq(io.ops->pull(io.arg, 0, k1, 1, NULL, &h), DML_EINVAL);
	ck_assert_int_eq(io.ops->push_range(io.arg, 0, 0, 1, NULL, &h), DML_EINVAL);
	/* A dense key outside the table: the answer comes with the wait, and
	 * nothing was applied. */
	ck_assert_int_eq(dml_local_store_get(s, 0, before), 0);
	ck_assert_int_eq(io.ops->push(io.arg, 0, k8, 1, v, &h), 0);
	ck_assert_uint_ne(h, 0);
	ck_assert_int_eq(io.ops->pull(io.arg, 0, k9, 1, v, &h2), 0);
	ck_assert_uint_ne(h2, h);
	ck_assert_int_eq(io_wait(&io, h2), DML_ERANGE);
	ck_assert_int_eq(io_wait(&io, h), DML_ERANGE);
	ck_assert_int_eq(dml_local_store_set_keys(s, 0, k8, 1, v), DML_ERANGE);
	ck_assert_int_eq(dml_local_store_get(s, 0, after), 0);
	ck_assert_int_eq(memcmp(before, after, sizeof(before)), 0);
	/* Handles are waited once; 0 waits for nothing. */
	ck_assert_int_eq(io_wait(&io, h), DML_ENOTFOUND);
	ck_assert_int_eq(io_wait(&io, 12345), DML_ENOTFOUND);
	ck_assert_int_eq(io_wait(&io, 0), 0);
	/* A push without a handle is applied (libdml's fire and forget). */
	v[0] = 1.0f;
	ck_assert_int_eq(io.ops->push_range(io.arg, 0, 0, 1, v, NULL), 0);
	ck_assert_int_eq(dml_local_store_get(s, 0, after), 0);
	ck_assert_float_eq_tol(after[0], before[0] - 0.25f, 1e-6f);

	dml_local_store_free(s);
	dml_job_spec_free(spec);
}
END_TEST

START_TEST(store_refuses_bad_specs)
{
	Dml__JobSpec *spec = spec_parse(store_job);
	struct dml_local_store *s = (struct dml_local_store *)&s;
	char err[256] = "", *optimizer;

	spec->tables[1]->id = 0;
	ck_assert_int_eq(dml_local_store_new(spec, &s, err, sizeof(err)), DML_EINVAL);
	ck_assert_ptr_null(s);
	ck_assert_str_eq(err, "table 0 appears twice");
	spec->tables[1]->id = 5;
	spec->tables[1]->width = 0;
	ck_assert_int_eq(dml_local_store_new(spec, &s, err, sizeof(err)), DML_EINVAL);
	ck_assert_str_eq(err, "table 5: width 0");
	spec->tables[1]->width = 3;
	/* The parser's strings are borrowed for the calls and put back. */
	optimizer = spec->tables[0]->optimizer;
	spec->tables[0]->optimizer = (char *)"nesterov";
	ck_assert_int_eq(dml_local_store_new(spec, &s, err, sizeof(err)), DML_EINVAL);
	ck_assert_str_eq(err, "table 0: unknown optimizer 'nesterov'");
	ck_assert_int_eq(dml_local_store_new(NULL, &s, err, sizeof(err)), DML_EINVAL);
	/* No optimizer name is the default (sgd): fine. */
	spec->tables[0]->optimizer = NULL;
	ck_assert_int_eq(dml_local_store_new(spec, &s, err, sizeof(err)), 0);
	ck_assert_ptr_nonnull(s);
	dml_local_store_free(s);
	spec->tables[0]->optimizer = optimizer;
	dml_job_spec_free(spec);
}
END_TEST

START_TEST(store_set_then_train)
{
	Dml__JobSpec *spec = spec_parse(store_job);
	struct dml_local_store *s = store_make(spec);
	float w[8], g[8], got[8];
	struct dml_app_io io;

	for (int i = 0; i < 8; i++) {
		w[i] = (float)i * 1.5f - 4.0f;
		g[i] = 1.0f;
	}
	ck_assert_int_eq(dml_local_store_set(s, 0, w), 0);
	ck_assert_int_eq(dml_local_store_get(s, 0, got), 0);
	ck_assert_int_eq(memcmp(got, w, sizeof(w)), 0);
	dml_local_store_io(s, &io);
	ck_assert_int_eq(push_range(&io, 0, 2, 6, g), 0);
	ck_assert_int_eq(pull_range(&io, 0, 0, 8, got), 0);
	for (int i = 0; i < 8; i++)
		ck_assert_float_eq_tol(got[i], w[i] - (i >= 2 && i < 6 ? 0.25f : 0.0f),
				       1e-6f);
	dml_local_store_free(s);
	dml_job_spec_free(spec);
}
END_TEST

static const struct dml_app_env cpu_env = { .backend = "cpu" };

/* The lsq app's evaluation (mean squared error) through a store. */
static double lsq_eval(const Dml__JobSpec *spec, struct dml_local_store *s, void *state)
{
	struct dml_app_io io;
	double value = -1;
	char err[256] = "";

	dml_local_store_io(s, &io);
	ck_assert_msg(dml_app_lsq.evaluate(state, &io, &value, err, sizeof(err)) == 0, "%s",
		      err);
	return value;
}

START_TEST(store_trains_lsq)
{
	static const uint32_t all[] = { 0 };
	Dml__JobSpec *spec = spec_parse(lsq_job);
	struct dml_local_store *s = store_make(spec);
	float w_true[LSQ_DIM];
	struct dml_app_step st;
	struct dml_app_io io;
	char err[256] = "";
	void *state = NULL;
	double before, after;

	ck_assert_msg(dml_app_lsq.create(spec, &cpu_env, &state, err, sizeof(err)) == 0, "%s",
		      err);
	ck_assert_int_eq(dml_app_lsq.set_partitions(state, all, 1, 1, err, sizeof(err)), 0);
	before = lsq_eval(spec, s, state);
	ck_assert_double_gt(before, 0.5);
	dml_local_store_io(s, &io);
	for (int i = 0; i < 300; i++)
		ck_assert_msg(dml_app_lsq.step(state, &io, &st, err, sizeof(err)) == 0, "%s",
			      err);
	after = lsq_eval(spec, s, state);
	ck_assert_msg(after < 2 * NOISE_FLOOR, "loss %g after 300 steps", after);

	/* The true weights give the noise floor. */
	dml_lsq_true_weights(LSQ_SEED, LSQ_DIM, w_true);
	ck_assert_int_eq(dml_local_store_set(s, 0, w_true), 0);
	after = lsq_eval(spec, s, state);
	ck_assert_double_gt(after, 0.8 * NOISE_FLOOR);
	ck_assert_double_lt(after, 1.2 * NOISE_FLOOR);

	dml_app_lsq.destroy(state);
	dml_local_store_free(s);
	dml_job_spec_free(spec);
}
END_TEST

/* ---- model files --------------------------------------------------------- */

/* The store job's model, after some training and sparse rows made. */
static void model_of_store_job(struct dml_model *m)
{
	Dml__JobSpec *spec = spec_parse(store_job);
	struct dml_local_store *s = store_make(spec);
	static const uint64_t keys[] = { 17, 3 };
	float g[8], v[6];
	struct dml_app_io io;

	for (int i = 0; i < 8; i++)
		g[i] = (float)i;
	dml_local_store_io(s, &io);
	ck_assert_int_eq(push_range(&io, 0, 0, 8, g), 0);
	ck_assert_int_eq(pull_keys(&io, 5, keys, 2, v), 0);
	ck_assert_int_eq(push_keys(&io, 5, keys, 2, g), 0);
	ck_assert_int_eq(dml_local_store_save_model(s, m), 0);
	dml_local_store_free(s);
	dml_job_spec_free(spec);
}

static size_t spec_bytes(const Dml__JobSpec *spec, uint8_t **out)
{
	size_t n = dml__job_spec__get_packed_size(spec);

	*out = dml_xmalloc(n ? n : 1);
	dml__job_spec__pack(spec, *out);
	return n;
}

static void expect_same_model(const struct dml_model *a, const struct dml_model *b)
{
	uint8_t *x, *y;
	size_t nx = spec_bytes(a->spec, &x), ny = spec_bytes(b->spec, &y);

	ck_assert_uint_eq(nx, ny);
	ck_assert_int_eq(memcmp(x, y, nx), 0);
	free(x);
	free(y);
	ck_assert_str_eq(b->spec->name, a->spec->name);
	ck_assert_uint_eq(b->ntables, a->ntables);
	for (size_t i = 0; i < a->ntables; i++) {
		const struct dml_model_table *s = &a->tables[i], *t = &b->tables[i];

		ck_assert_uint_eq(t->id, s->id);
		ck_assert_uint_eq(t->width, s->width);
		ck_assert_int_eq(t->dense, s->dense);
		ck_assert_uint_eq(t->rows, s->rows);
		ck_assert_int_eq(memcmp(t->values, s->values,
					(size_t)s->rows * s->width * sizeof(float)), 0);
		if (!s->dense)
			ck_assert_int_eq(memcmp(t->keys, s->keys, (size_t)s->rows * 8), 0);
		else
			ck_assert_ptr_null(t->keys);
	}
}

START_TEST(model_round_trip)
{
	char path[PATH_LEN], tmp[PATH_LEN];
	struct dml_model m, r;
	struct dml_local_store *s;
	float dense[8];
	float v[6];
	struct dml_app_io io;
	char err[512] = "";
	struct stat st;

	path_of(path, "round.model");
	path_of(tmp, "round.model.tmp");
	model_of_store_job(&m);
	ck_assert_uint_eq(m.ntables, 2);
	ck_assert_uint_eq(m.tables[0].rows, 8);
	ck_assert_uint_eq(m.tables[1].rows, 2);
	ck_assert_uint_eq(m.tables[1].keys[0], 17);
	ck_assert_msg(dml_model_write(path, &m, err, sizeof(err)) == 0, "%s", err);
	ck_assert_int_ne(stat(tmp, &st), 0);
	ck_assert_msg(dml_model_read(path, &r, err, sizeof(err)) == 0, "%s", err);
	expect_same_model(&m, &r);

	/* A fresh store set from the file holds the trained values. */
	s = store_make(r.spec);
	ck_assert_msg(dml_local_store_load_model(s, &r, err, sizeof(err)) == 0, "%s", err);
	ck_assert_int_eq(dml_local_store_get(s, 0, dense), 0);
	ck_assert_int_eq(memcmp(dense, m.tables[0].values, sizeof(dense)), 0);
	dml_local_store_io(s, &io);
	ck_assert_int_eq(pull_keys(&io, 5, m.tables[1].keys, 2, v), 0);
	ck_assert_int_eq(memcmp(v, m.tables[1].values, sizeof(v)), 0);
	dml_local_store_free(s);

	/* Writing again replaces the file. */
	m.tables[0].values[0] = 1234.5f;
	ck_assert_int_eq(dml_model_write(path, &m, err, sizeof(err)), 0);
	dml_model_free(&r);
	ck_assert_int_eq(dml_model_read(path, &r, err, sizeof(err)), 0);
	ck_assert_float_eq(r.tables[0].values[0], 1234.5f);

	dml_model_free(&r);
	dml_model_free(&m);
	ck_assert_ptr_null(m.spec);
	dml_model_free(NULL);
}
END_TEST

/* err must read "path: ..." and contain part. */
static void expect_err(const char *err, const char *path, const char *part)
{
	size_t n = strlen(path);

	ck_assert_msg(strncmp(err, path, n) == 0 && err[n] == ':' && err[n + 1] == ' ',
		      "'%s' does not start with the path", err);
	if (part)
		ck_assert_msg(strstr(err, part) != NULL, "'%s' does not say '%s'", err, part);
}

START_TEST(model_write_refuses)
{
	char path[PATH_LEN];
	char bad_path[PATH_LEN + 16];
	struct dml_model m;
	char err[512] = "";
	struct stat st;

	path_of(path, "refused.model");
	model_of_store_job(&m);
	m.tables[1].width = 2;
	ck_assert_int_eq(dml_model_write(path, &m, err, sizeof(err)), DML_EINVAL);
	expect_err(err, path, "table 5: width 2, the spec says 3");
	ck_assert_int_ne(stat(path, &st), 0);
	m.tables[1].width = 3;
	m.tables[1].keys[1] = m.tables[1].keys[0];
	ck_assert_int_eq(dml_model_write(path, &m, err, sizeof(err)), DML_EINVAL);
	expect_err(err, path, "key 17 appears twice");
	m.tables[1].keys[1] = 3;
	m.tables[0].rows = 7;
	ck_assert_int_eq(dml_model_check(&m, err, sizeof(err)), DML_EINVAL);
	ck_assert_str_eq(err, "table 0: 7 rows, the spec says 8 keys");
	m.tables[0].rows = 8;
	m.tables[1].id = 0;
	ck_assert_int_eq(dml_model_check(&m, err, sizeof(err)), DML_EINVAL);
	ck_assert_str_eq(err, "table 0 appears twice");
	m.tables[1].id = 5;
	m.ntables = 1;
	ck_assert_int_eq(dml_model_check(&m, err, sizeof(err)), DML_EINVAL);
	ck_assert_str_eq(err, "1 tables, the spec has 2");
	m.ntables = 2;
	ck_assert_int_eq(dml_model_check(&m, err, sizeof(err)), 0);

	/* A folder that does not exist: I/O, and nothing left behind. */
	snprintf(bad_path, sizeof(bad_path), "%s/nope/x.model", dml_test_tmpdir());
	ck_assert_int_eq(dml_model_write(bad_path, &m, err, sizeof(err)), DML_EIO);
	expect_err(err, bad_path, "No such file");
	dml_model_free(&m);
}
END_TEST

START_TEST(model_read_io_errors)
{
	char path[PATH_LEN];
	struct dml_model m;
	char err[512] = "";

	path_of(path, "missing.model");
	ck_assert_int_eq(dml_model_read(path, &m, err, sizeof(err)), DML_EIO);
	expect_err(err, path, "No such file");
	ck_assert_ptr_null(m.spec);
	ck_assert_int_eq(dml_model_read(dml_test_tmpdir(), &m, err, sizeof(err)),
			 DML_EIO);
	expect_err(err, dml_test_tmpdir(), "not a regular file");
}
END_TEST

/* A valid file's bytes, in memory. */
static size_t valid_file(uint8_t **buf)
{
	char path[PATH_LEN];
	struct dml_model m;
	char err[512];
	struct stat st;
	FILE *f;

	path_of(path, "valid.model");
	model_of_store_job(&m);
	ck_assert_int_eq(dml_model_write(path, &m, err, sizeof(err)), 0);
	dml_model_free(&m);
	ck_assert_int_eq(stat(path, &st), 0);
	*buf = dml_xmalloc((size_t)st.st_size);
	f = fopen(path, "rb");
	ck_assert_ptr_nonnull(f);
	ck_assert_uint_eq(fread(*buf, 1, (size_t)st.st_size, f), (size_t)st.st_size);
	fclose(f);
	return (size_t)st.st_size;
}

static void write_bytes(const char *path, const uint8_t *buf, size_t n)
{
	FILE *f = fopen(path, "wb");

	ck_assert_ptr_nonnull(f);
	ck_assert_uint_eq(fwrite(buf, 1, n, f), n);
	ck_assert_int_eq(fclose(f), 0);
}

/* Reading buf as a file must fail with code, err "path: ...part...". */
static void expect_refused(const uint8_t *buf, size_t n, int code, const char *part)
{
	char path[PATH_LEN];
	struct dml_model m;
	char err[512] = "";
	int rc;

	path_of(path, "bad.model");
	write_bytes(path, buf, n);
	memset(&m, 0x5a, sizeof(m));
	rc = dml_model_read(path, &m, err, sizeof(err));
	ck_assert_msg(rc == code, "got %d (%s), want %d", rc, err, code);
	expect_err(err, path, part);
	ck_assert_ptr_null(m.spec);
	ck_assert_ptr_null(m.tables);
	ck_assert_uint_eq(m.ntables, 0);
}

START_TEST(model_every_truncation)
{
	uint8_t *buf;
	size_t n = valid_file(&buf);

	for (size_t len = 0; len < n; len++)
		expect_refused(buf, len, DML_ECONF, "truncated");
	free(buf);
}
END_TEST

START_TEST(model_every_byte_flip)
{
	static const uint8_t flips[] = { 0x01, 0x80, 0xff };
	uint8_t *buf;
	size_t n = valid_file(&buf);

	for (size_t i = 0; i < n; i++) {
		for (size_t f = 0; f < sizeof(flips); f++) {
			buf[i] ^= flips[f];
			expect_refused(buf, n, DML_ECONF, NULL);
			buf[i] ^= flips[f];
		}
	}
	free(buf);
}
END_TEST

/* Recompute the checksum of a patched file, so a check past it is reached. */
static void fix_crc(uint8_t *buf, size_t n)
{
	dml_store_le32(buf + n - 4, (uint32_t)crc32(0L, buf, (uInt)(n - 4)));
}

static void put_le64(uint8_t *p, uint64_t v)
{
	dml_store_le32(p, (uint32_t)v);
	dml_store_le32(p + 4, (uint32_t)(v >> 32));
}

/* Read buf patched by stmt, checksum fixed, expecting code and part. */
#define EXPECT_PATCHED(stmt, code, part)                                      \
	do {                                                                  \
		memcpy(b, buf, n);                                            \
		stmt;                                                         \
		fix_crc(b, n);                                                \
		expect_refused(b, n, code, part);                             \
	} while (0)

START_TEST(model_crafted_files)
{
	uint8_t *buf, *b, *longer;
	size_t n = valid_file(&buf);
	uint32_t spec_len = dml_load_le32(buf + 12);
	/* Offsets of the two tables' headers (table 0 dense 8 x 1 first). */
	size_t t0 = 16 + spec_len + 4, t1 = t0 + 17 + 8 * 4;

	ck_assert_uint_eq(n, t1 + 17 + 2 * 8 + 2 * 3 * 4 + 4);
	ck_assert_uint_eq(dml_load_le32(buf + t0), 0);
	ck_assert_uint_eq(dml_load_le32(buf + t1), 5);
	b = dml_xmalloc(n);

	EXPECT_PATCHED(b[0] = 'X', DML_ECONF, "bad magic");
	EXPECT_PATCHED(dml_store_le32(b + 8, 2), DML_ECONF, "version 2 not supported");
	EXPECT_PATCHED(dml_store_le32(b + 8, 0), DML_ECONF, "version 0 not supported");
	EXPECT_PATCHED(dml_store_le32(b + 12, UINT32_MAX), DML_ECONF, "truncated");
	EXPECT_PATCHED(dml_store_le32(b + t0 - 4, UINT32_MAX), DML_ECONF, "truncated");
	EXPECT_PATCHED(put_le64(b + t0 + 9, UINT64_C(1) << 60), DML_ECONF, "truncated");
	EXPECT_PATCHED(put_le64(b + t0 + 9, UINT64_MAX), DML_ECONF, "truncated");
	EXPECT_PATCHED(dml_store_le32(b + t0 + 4, UINT32_MAX), DML_ECONF, "truncated");
	EXPECT_PATCHED(put_le64(b + t1 + 9, UINT64_C(1) << 60), DML_ECONF, "truncated");
	EXPECT_PATCHED(put_le64(b + t1 + 9, UINT64_C(1) << 62), DML_ECONF, "truncated");
	EXPECT_PATCHED(dml_store_le32(b + t0 + 4, 0), DML_ECONF, "table 0 width 0");
	EXPECT_PATCHED(b[t1 + 8] = 2, DML_ECONF, "table 5 kind byte 2");
	/* Layout fine, meaning wrong: checked after the checksum. */
	EXPECT_PATCHED(dml_store_le32(b + t1, 6), DML_ECONF,
		       "table 6: not a table of the spec");
	EXPECT_PATCHED(memcpy(b + t1 + 17 + 8, b + t1 + 17, 8), DML_ECONF,
		       "table 5: key 17 appears twice");
	EXPECT_PATCHED(memset(b + 16, 0xff, spec_len), DML_ECONF, "does not decode");
	/* Counts that misplace the rest: one table too many, one too few, a
	 * dense table read as sparse (its keys eat the values). */
	EXPECT_PATCHED(dml_store_le32(b + t0 - 4, 3), DML_ECONF, "truncated");
	EXPECT_PATCHED(dml_store_le32(b + t0 - 4, 1), DML_ECONF, "crc mismatch");
	EXPECT_PATCHED(b[t0 + 8] = 0, DML_ECONF, "truncated");
	/* The checksum itself. */
	memcpy(b, buf, n);
	b[n - 1] ^= 0x10;
	expect_refused(b, n, DML_ECONF, "crc mismatch");
	memcpy(b, buf, n);
	b[t0 + 20] ^= 0x10;
	expect_refused(b, n, DML_ECONF, "crc mismatch");
	/* Bytes after the checksum. */
	longer = dml_xmalloc(n + 3);
	memcpy(longer, buf, n);
	memset(longer + n, 0, 3);
	expect_refused(longer, n + 1, DML_ECONF, "1 trailing bytes after the checksum");
	expect_refused(longer, n + 3, DML_ECONF, "3 trailing bytes after the checksum");
	free(longer);
	free(b);
	free(buf);
}
END_TEST

/* ---- dml-worker --eval --------------------------------------------------- */

/* The lsq job's model with w = values (LSQ_DIM floats), written to name. */
static const char *lsq_model(char *path, const char *name, const float *values)
{
	struct dml_model_table t = { .id = 0, .width = 1, .dense = 1, .rows = LSQ_DIM };
	struct dml_model m = { .spec = spec_parse(lsq_job), .tables = &t, .ntables = 1 };
	char err[512] = "";

	path_of(path, name);
	t.values = (float *)values;
	ck_assert_msg(dml_model_write(path, &m, err, sizeof(err)) == 0, "%s", err);
	dml_job_spec_free(m.spec);
	return path;
}

/* What the last run_worker printed. */
static char g_out[1024], g_errtext[4096];

static void slurp(const char *path, char *buf, size_t len)
{
	FILE *f = fopen(path, "r");

	ck_assert_ptr_nonnull(f);
	buf[fread(buf, 1, len - 1, f)] = '\0';
	fclose(f);
}

/* Run dml-worker with args (NULL-terminated, at most 6); its exit status. */
static int run_worker(const char *const *args)
{
	const char *dir = getenv("DML_BUILDDIR");
	char bin[PATH_LEN], outp[PATH_LEN], errp[PATH_LEN];
	const char *argv[8];
	size_t n = 0;
	int status;
	pid_t pid;

	snprintf(bin, sizeof(bin), "%s/worker/dml-worker", dir && *dir ? dir : ".");
	ck_assert_msg(access(bin, X_OK) == 0, "%s: %s (set DML_BUILDDIR)", bin,
		      strerror(errno));
	path_of(outp, "worker.out");
	path_of(errp, "worker.err");
	argv[n++] = bin;
	for (size_t i = 0; args[i] && n < 7; i++)
		argv[n++] = args[i];
	argv[n] = NULL;
	fflush(NULL);
	pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		if (!freopen(outp, "w", stdout) || !freopen(errp, "w", stderr))
			_exit(126);
		execv(bin, (char *const *)argv);
		_exit(127);
	}
	ck_assert_int_eq(waitpid(pid, &status, 0), pid);
	ck_assert_msg(WIFEXITED(status), "dml-worker died with status 0x%x", status);
	slurp(outp, g_out, sizeof(g_out));
	slurp(errp, g_errtext, sizeof(g_errtext));
	return WEXITSTATUS(status);
}

#define RUN_WORKER(...) run_worker((const char *const[]){ __VA_ARGS__, NULL })

START_TEST(eval_lsq_true_weights)
{
	float w[LSQ_DIM];
	char path[PATH_LEN], want[PATH_LEN + 64];
	double loss = -1;

	dml_lsq_true_weights(LSQ_SEED, LSQ_DIM, w);
	lsq_model(path, "true.model", w);
	ck_assert_msg(RUN_WORKER("--eval", path, "synthetic") == 0, "stderr: %s", g_errtext);
	ck_assert_msg(sscanf(g_out, "loss %lf", &loss) == 1, "stdout: %s", g_out);
	ck_assert_msg(loss > 0.8 * NOISE_FLOOR && loss < 1.2 * NOISE_FLOOR, "loss %g", loss);
	snprintf(want, sizeof(want), " (model %s, data synthetic)\n", path);
	ck_assert_ptr_nonnull(strstr(g_out, want));

	/* The same job with w = 0 is far off: the tables came from the file. */
	memset(w, 0, sizeof(w));
	lsq_model(path, "zero.model", w);
	ck_assert_int_eq(RUN_WORKER("--backend", "cpu", "--eval", path, "synthetic"), 0);
	ck_assert_msg(sscanf(g_out, "loss %lf", &loss) == 1, "stdout: %s", g_out);
	ck_assert_double_gt(loss, 0.5);
}
END_TEST

START_TEST(eval_failures)
{
	static const uint8_t junk[16] = "DMLMODEL";
	float w[LSQ_DIM] = { 0 };
	char path[PATH_LEN], bad[PATH_LEN];

	lsq_model(path, "fail.model", w);
	ck_assert_int_eq(RUN_WORKER("--eval", path), 2);
	ck_assert_ptr_nonnull(strstr(g_errtext, "usage: dml-worker --eval MODEL DATA"));
	ck_assert_str_eq(g_out, "");
	ck_assert_int_eq(RUN_WORKER("--eval", path, "synthetic", "extra"), 2);

	write_bytes(path_of(bad, "junk.model"), junk, sizeof(junk));
	ck_assert_int_eq(RUN_WORKER("--eval", bad, "synthetic"), 1);
	ck_assert_msg(strstr(g_errtext, bad) && strstr(g_errtext, "version 0 not supported"),
		      "stderr: %s", g_errtext);
	ck_assert_str_eq(g_out, "");

	ck_assert_int_eq(RUN_WORKER("--eval", path, "synthetic", "--backend", "nope"), 1);
	ck_assert_msg(strstr(g_errtext, "backend 'nope' is not in this build"), "stderr: %s",
		      g_errtext);
	/* lsq makes its own data: anything else is the app's refusal. */
	ck_assert_int_eq(RUN_WORKER("--eval", path, "a.idx,b.idx"), 1);
	ck_assert_msg(strstr(g_errtext, "app lsq: data 'a.idx,b.idx'"), "stderr: %s",
		      g_errtext);
	ck_assert_int_eq(RUN_WORKER("--help"), 0);
	ck_assert_ptr_nonnull(strstr(g_out, "--eval MODEL DATA"));
}
END_TEST

int main(void)
{
	Suite *s = suite_create("model");
	TCase *store = tcase_create("store");
	TCase *file = tcase_create("file");
	TCase *eval = tcase_create("eval");

	tcase_add_test(store, store_dense_applies_sgd_like_a_table);
	tcase_add_test(store, store_sparse_rows_on_first_use);
	tcase_add_test(store, store_errors_match_libdml);
	tcase_add_test(store, store_refuses_bad_specs);
	tcase_add_test(store, store_set_then_train);
	tcase_add_test(store, store_trains_lsq);
	suite_add_tcase(s, store);

	dml_test_tmpdir_fixture(file, "check_model", 0);
	tcase_set_timeout(file, 120);
	tcase_add_test(file, model_round_trip);
	tcase_add_test(file, model_write_refuses);
	tcase_add_test(file, model_read_io_errors);
	tcase_add_test(file, model_every_truncation);
	tcase_add_test(file, model_every_byte_flip);
	tcase_add_test(file, model_crafted_files);
	suite_add_tcase(s, file);

	dml_test_tmpdir_fixture(eval, "check_model", 0);
	tcase_set_timeout(eval, 120);
	tcase_add_test(eval, eval_lsq_true_weights);
	tcase_add_test(eval, eval_failures);
	suite_add_tcase(s, eval);
	return dml_check_run(s);
}
