/*
 * Unit tests of the local parameter store (this file) and of model files
 * (check_model_file.c): the store's io applies a job's optimizer exactly
 * as a server's table does (dense and sparse), answers libdml's errors,
 * and trains and evaluates the lsq app; model files survive a round trip
 * (spec included), and the reader gives the right code and "path: reason"
 * for every truncation, every byte flip and crafted lengths, without
 * crashing or allocating from them. `dml-worker --eval` runs as a built
 * program ($DML_BUILDDIR/worker/).
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

#include "worker/app.h"
#include "test/check_model.h"
#include "test/check_run.h"
#include "proto/dml_error.h"
#include "proto/job_spec.h"
#include "worker/local_store.h"
#include "worker/model_file.h"
#include "store/table.h"
#include "proto/table_spec.h"
#include "test/tmpdir.h"
#include "proto/util.h"

/* Table 0: dense, 8 keys of width 1, sgd; table 5: sparse, width 3, adam. */
const char store_job[] =
	"[job]\nname = store\napp = lsq\ndata = synthetic\nexamples = 100\ndim = 8\n"
	"batch_size = 4\nmax_clocks = 1\nseed = 3\n"
	"[table]\nid = 0\nkind = dense\nwidth = 1\nkeys = 8\ninit = uniform\n"
	"init_scale = 0.5\nseed = 9\noptimizer = sgd\nlr = 0.25\n"
	"[table]\nid = 5\nkind = sparse\nwidth = 3\ninit = normal\ninit_scale = 0.1\n"
	"seed = 4\noptimizer = adam\nlr = 0.01\n";

/* An lsq job of 16 features; w starts at zero. */
const char lsq_job[] =
	"[job]\nname = lsq\napp = lsq\ndata = synthetic\nexamples = 2000\ndim = 16\n"
	"batch_size = 64\nmax_clocks = 1\nseed = 7\n"
	"[table]\nid = 0\nkind = dense\nwidth = 1\nkeys = 16\noptimizer = sgd\nlr = 0.1\n";

/* The path of name in the test folder, written into path (PATH_LEN bytes). */
const char *path_of(char *path, const char *name)
{
	return dml_test_tmpdir_path(path, PATH_LEN, name);
}

Dml__JobSpec *spec_parse(const char *text)
{
	Dml__JobSpec *spec = NULL;
	char err[256] = "";
	int rc = dml_job_file_parse_string("test", text, &spec, err, sizeof(err));

	ck_assert_msg(rc == 0, "job text refused: %s", err);
	return spec;
}

struct dml_local_store *store_make(const Dml__JobSpec *spec)
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

int push_range(struct dml_app_io *io, uint32_t t, uint64_t b, uint64_t e,
	       const float *g)
{
	dml_handle_t h = 0;
	int rc = io->ops->push_range(io->arg, t, b, e, g, &h);

	return rc ? rc : io_wait(io, h);
}

int pull_keys(struct dml_app_io *io, uint32_t t, const uint64_t *k, size_t n,
	      float *out)
{
	dml_handle_t h = 0;
	int rc = io->ops->pull(io->arg, t, k, n, out, &h);

	return rc ? rc : io_wait(io, h);
}

int push_keys(struct dml_app_io *io, uint32_t t, const uint64_t *k, size_t n,
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
	dml_test_tmpdir_fixture(eval, "check_model", 0);
	tcase_set_timeout(eval, 120);
	check_model_file_tests(file, eval);
	suite_add_tcase(s, file);
	suite_add_tcase(s, eval);
	return dml_check_run(s);
}
