/*
 * check_sparse_lr.c - the sparse_lr app and dml_auc.
 *
 * The pushed gradients against central finite differences of the step's
 * own loss (binary and one-vs-rest), through a test io that serves sparse
 * keys from an array over keys 0..dim and keeps what is pushed (keys
 * sorted, unique, the bias key among them, the push left in flight until
 * the next step or drain); dml_auc against a brute-force count of pairs
 * with ties; evaluation of auc, loss and accuracy against a reference
 * computed here (dim = 1 hashes every feature to key 0, so the model is
 * known); specs and files it refuses, each with its reason; io failures
 * that leave nothing in flight; a worker without records; and training on
 * synthetic clicks through the in-process store with adagrad, which must
 * beat chance clearly and give the same AUC twice.
 */
#define _GNU_SOURCE
#include <check.h>
#include <inttypes.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "worker/app.h"
#include "test/app_test.h"
#include "worker/app_util.h"
#include "test/check_run.h"
#include "proto/dml_error.h"
#include "proto/job_spec.h"
#include "worker/local_store.h"
#include "test/tmpdir.h"

static const struct dml_app *const app = &dml_app_sparse_lr;

static uint64_t g_rng = 3;

/* Uniform in [lo, hi), from a fixed sequence (splitmix64). */
static double rnd(double lo, double hi)
{
	return lo + (hi - lo) * (double)(dml_rng_next(&g_rng) >> 11) / 9007199254740992.0;
}

/* Write text to name in the test folder; its path (valid for 4 more calls). */
static const char *write_text(const char *name, const char *text)
{
	static char paths[4][DML_TEST_PATH_MAX];
	static unsigned turn;
	char *p = paths[turn++ % 4];
	FILE *f;

	dml_test_tmpdir_path(p, DML_TEST_PATH_MAX, name);
	f = fopen(p, "w");
	ck_assert_ptr_nonnull(f);
	ck_assert_int_ge(fputs(text, f), 0);
	ck_assert_int_eq(fclose(f), 0);
	return p;
}

/* A sparse_lr job on data with dim, table width and extra job lines. */
static Dml__JobSpec *spec_make(const char *data, uint32_t dim, uint32_t width,
			       const char *extra)
{
	char text[8192];
	int n = snprintf(text, sizeof(text), "[job]\nname = t\napp = sparse_lr\nmax_clocks = "
			 "10\ndim = %u\ndata = %s\n%s[table]\nid = 0\nkind = sparse\nwidth = "
			 "%u\n", dim, data, extra, width);

	ck_assert(n > 0 && (size_t)n < sizeof(text));
	return app_test_spec(text);
}

/* The test io over keys 0..dim of table 0 (the bias, key dim, in every request). */
static void sio_init(struct app_test_sparse *t, uint64_t dim, uint32_t width)
{
	app_test_sparse_init(t, 1, dim + 1, width);
	t->bias_last = 1;
}

static double step_ok(void *state, struct app_test_sparse *t, uint64_t rows)
{
	return app_test_sparse_step(app, state, t, rows);
}

static double evaluate_ok(void *state, struct app_test_sparse *t)
{
	return app_test_sparse_evaluate(app, state, t);
}

/* ---- gradients ------------------------------------------------------------- */

/*
 * With batch_size = the number of records and one partition, every step is
 * one pass: the same records in another order, so the same mean loss. The
 * push of a step is then d loss / d row for each key the batch uses.
 */
static void check_gradient(const char *file_text, uint32_t dim, uint32_t width,
			   uint32_t records)
{
	char extra[64];
	Dml__JobSpec *spec;
	void *state;
	struct app_test_sparse t;
	uint64_t *keys;
	float *g;
	size_t n;

	snprintf(extra, sizeof(extra), "batch_size = %u\n", records);
	spec = spec_make(write_text("grad.svm", file_text), dim, width, extra);
	state = app_test_make(app, spec, &app_test_cpu);
	sio_init(&t, dim, width);
	for (size_t i = 0; i < (size_t)(dim + 1) * width; i++)
		t.p[0][i] = (float)rnd(-1, 1);
	step_ok(state, &t, records);
	n = t.npushed[0];
	ck_assert_uint_eq(n, t.npulled[0]);
	keys = malloc(n * sizeof(*keys));
	g = malloc(n * width * sizeof(*g));
	ck_assert(keys && g);
	memcpy(keys, t.pushed_keys[0], n * sizeof(*keys));
	memcpy(g, t.pushed[0], n * width * sizeof(*g));
	for (size_t i = 0; i < n; i++) {
		for (uint32_t c = 0; c < width; c++) {
			float *w = t.p[0] + keys[i] * width + c, saved = *w;
			const float eps = 1e-2f;
			double up, down, fd;

			*w = saved + eps;
			up = step_ok(state, &t, records);
			*w = saved - eps;
			down = step_ok(state, &t, records);
			*w = saved;
			fd = (up - down) / (double)((saved + eps) - (saved - eps));
			ck_assert_msg(fabs(fd - g[i * width + c]) < 2e-4 + 1e-3 * fabs(fd),
				      "key %" PRIu64 " unit %u: pushed %g, finite differences %g",
				      keys[i], c, g[i * width + c], fd);
		}
	}
	free(keys);
	free(g);
	app_test_sparse_free(&t);
	app->destroy(state);
	dml_job_spec_free(spec);
}

START_TEST(test_gradient_binary)
{
	check_gradient("1 1:0.5 7:1 3:-2\n-1 2:1 9:0.25\n+1 4:1.5\n-1\n-1 1:1 2:1 3:1 4:1\n",
		       5, 1, 5);
}
END_TEST

START_TEST(test_gradient_one_vs_rest)
{
	check_gradient("0 1:0.5 7:1\n2 2:1 9:0.25 11:-1\n1 4:1.5\n2 3:1\n0 1:1 2:1 3:1\n"
		       "1 5:2 6:-0.5\n", 4, 3, 6);
}
END_TEST

/* ---- AUC --------------------------------------------------------------------- */

static double auc_brute(const float *s, const float *y, size_t n)
{
	double pairs = 0, won = 0;

	for (size_t i = 0; i < n; i++)
		for (size_t j = 0; j < n; j++)
			if (y[i] > 0.5f && y[j] <= 0.5f) {
				pairs++;
				won += s[i] > s[j] ? 1 : s[i] == s[j] ? 0.5 : 0;
			}
	return pairs ? won / pairs : NAN;
}

START_TEST(test_auc)
{
	static const float up[] = { 0.1f, 0.2f, 0.3f, 0.4f }, y01[] = { 0, 0, 1, 1 };
	static const float same[] = { 1, 1, 1, 1 }, ones[] = { 1, 1, 1, 1 };
	float s[300], y[300];

	ck_assert(dml_auc(up, y01, 4) == 1.0);
	ck_assert(dml_auc(up, (const float[]){ 1, 1, 0, 0 }, 4) == 0.0);
	ck_assert(dml_auc(same, y01, 4) == 0.5);
	ck_assert(isnan(dml_auc(up, ones, 4)));
	ck_assert(isnan(dml_auc(up, (const float[]){ 0, 0, 0, 0 }, 4)));
	ck_assert(isnan(dml_auc(up, y01, 0)));
	/* NaN scores rank lowest. */
	ck_assert(dml_auc((const float[]){ NAN, 0.5f }, (const float[]){ 0, 1 }, 2) == 1.0);
	for (int round = 0; round < 40; round++) {
		size_t n = 2 + (size_t)rnd(0, 298);
		/* Few distinct scores: many ties. */
		int levels = 1 + (int)rnd(0, 12);

		for (size_t i = 0; i < n; i++) {
			y[i] = rnd(0, 1) < 0.3 ? 1.0f : 0.0f;
			s[i] = (float)(int)rnd(0, levels) + (y[i] > 0 ? 0.5f * (round % 2) : 0);
		}
		y[0] = 1;
		y[1] = 0;
		ck_assert_msg(fabs(dml_auc(s, y, n) - auc_brute(s, y, n)) < 1e-12,
			      "n %zu: %g vs %g", n, dml_auc(s, y, n), auc_brute(s, y, n));
	}
}
END_TEST

/* ---- evaluation -------------------------------------------------------------- */

static const char eval_text[] =
	"1 1:1 2:1\n0 1:0.5\n1 3:2\n0 1:-1 5:0.5\n1 2:0.25\n0 4:1 6:1 7:1\n1\n0 9:0.1\n";

/* The logit of record i of eval_text at dim = 1: w0 * sum of values + bias. */
static double ref_sum(size_t i)
{
	static const double sums[] = { 2, 0.5, 2, -0.5, 0.25, 3, 0, 0.1 };

	return sums[i];
}

START_TEST(test_evaluate_metrics)
{
	static const char *const metrics[] = { "auc", "loss", "accuracy", "" };
	const double w0 = 0.7, b = -0.3;
	const char *path = write_text("eval.svm", eval_text);
	float s[8], y[8];
	double want[3] = { 0, 0, 0 };

	for (size_t i = 0; i < 8; i++) {
		double z = w0 * ref_sum(i) + b;

		y[i] = (float)(i % 2 == 0);
		s[i] = (float)z;
		want[1] += (log1p(exp(-fabs(z))) + fmax(z, 0) - y[i] * z) / 8;
		want[2] += (double)((z >= 0) == (y[i] > 0)) / 8;
	}
	want[0] = auc_brute(s, y, 8);
	for (size_t m = 0; m < 4; m++) {
		char extra[64];
		Dml__JobSpec *spec;
		void *state;
		struct app_test_sparse t;
		double v;

		snprintf(extra, sizeof(extra), "metric = %s\nbatch_size = 3\n", metrics[m]);
		spec = spec_make(path, 1, 1, extra);
		state = app_test_make(app, spec, &app_test_cpu);
		sio_init(&t, 1, 1);
		t.p[0][0] = (float)w0;
		t.p[0][1] = (float)b;
		v = evaluate_ok(state, &t);
		ck_assert_msg(fabs(v - want[m % 3]) < 1e-6, "%s: %g, want %g", metrics[m], v,
			      want[m % 3]);
		ck_assert_uint_eq(app->data_examples(state), 8);
		app_test_sparse_free(&t);
		app->destroy(state);
		dml_job_spec_free(spec);
	}
	ck_assert_str_eq(app->metric, "auc");
}
END_TEST

START_TEST(test_evaluate_one_vs_rest)
{
	/* Classes by record: 0, 1, 2, 0, 1, 2, 0, 1. */
	const char *path = write_text("ovr.svm", "0 1:1 2:1\n1 1:0.5\n2 3:2\n0 1:-1 5:0.5\n"
				      "1 2:0.25\n2 4:1 6:1 7:1\n0\n1 9:0.1\n");
	static const float w[3] = { 0.7f, -0.4f, 0.2f }, bias[3] = { 0.1f, 0.3f, -0.5f };
	static const char *const metrics[] = { "auc", "accuracy" };
	double want[2] = { 0, 0 };

	for (size_t c = 0; c < 3; c++) {
		float s[8], y[8];

		for (size_t i = 0; i < 8; i++) {
			s[i] = (float)((double)w[c] * ref_sum(i) + bias[c]);
			y[i] = (float)(i % 3 == c);
		}
		want[0] += auc_brute(s, y, 8) / 3;
	}
	for (size_t i = 0; i < 8; i++) {
		size_t best = 0;

		for (size_t c = 1; c < 3; c++)
			if ((double)w[c] * ref_sum(i) + bias[c] >
			    (double)w[best] * ref_sum(i) + bias[best])
				best = c;
		want[1] += (double)(best == i % 3) / 8;
	}
	for (size_t m = 0; m < 2; m++) {
		char extra[64];
		Dml__JobSpec *spec;
		void *state;
		struct app_test_sparse t;
		double v;

		snprintf(extra, sizeof(extra), "metric = %s\n", metrics[m]);
		spec = spec_make(path, 1, 3, extra);
		state = app_test_make(app, spec, &app_test_cpu);
		sio_init(&t, 1, 3);
		memcpy(t.p[0], w, sizeof(w));
		memcpy(t.p[0] + 3, bias, sizeof(bias));
		v = evaluate_ok(state, &t);
		ck_assert_msg(fabs(v - want[m]) < 1e-6, "%s: %g, want %g", metrics[m], v,
			      want[m]);
		app_test_sparse_free(&t);
		app->destroy(state);
		dml_job_spec_free(spec);
	}
}
END_TEST

/* ---- specs and files it refuses ---------------------------------------------- */

static void expect_refused(const Dml__JobSpec *spec, int code, const char *why)
{
	app_test_refused(app, spec, &app_test_cpu, code, why);
}

START_TEST(test_refuses)
{
	const char *classes = write_text("classes.svm", "0 1:1\n3 2:1\n");
	Dml__JobSpec *spec = spec_make("synthetic", 1024, 1, "examples = 100\n");
	char *data = spec->data, *metric = spec->metric, *test_data = spec->test_data;
	char path[DML_TEST_PATH_MAX + 64];

	spec->metric = (char *)"f1";
	expect_refused(spec, DML_EINVAL, "metric 'f1' is not one of loss, accuracy, auc, "
		       "rmse");
	spec->metric = metric;
	spec->data = (char *)"";
	expect_refused(spec, DML_EINVAL, "data is empty (a libsvm file or synthetic)");
	spec->data = data;
	spec->examples = 0;
	expect_refused(spec, DML_EINVAL, "synthetic data needs examples >= 1");
	spec->examples = 100;
	spec->dim = 0;
	expect_refused(spec, DML_EINVAL, "dim must be at least 1");
	spec->dim = 1024;
	spec->tables[0]->width = 2;
	expect_refused(spec, DML_EINVAL, "synthetic data is binary: table 0 needs width 1");
	spec->tables[0]->width = 1;
	spec->tables[0]->dense = 1;
	spec->tables[0]->keys = 1025;
	expect_refused(spec, DML_EINVAL, "needs exactly one table, id 0, sparse");
	spec->tables[0]->dense = 0;
	spec->tables[0]->keys = 0;
	spec->tables[0]->id = 1;
	expect_refused(spec, DML_EINVAL, "needs exactly one table, id 0, sparse");
	spec->tables[0]->id = 0;
	spec->batch_size = 1u << 29;
	spec->batch_split = DML_BATCH_EQUAL;
	expect_refused(spec, DML_EINVAL, "batch_size 536870912 x width 1 is more than");
	/* Batches split by rate must hold 4 x batch_size. */
	spec->batch_size = 1u << 27;
	spec->batch_split = DML_BATCH_RATE;
	expect_refused(spec, DML_EINVAL, "batch_size 134217728 x width 1 is more than "
		       "268435456 floats a batch may hold (x 4: the largest batch");
	spec->batch_split = DML_BATCH_AUTO;
	spec->batch_size = 64;
	/* Files: missing, bad content, labels the width cannot hold. */
	snprintf(path, sizeof(path), "%s/no-such.svm", dml_test_tmpdir());
	spec->data = path;
	expect_refused(spec, DML_EINVAL, "no-such.svm: cannot open");
	spec->data = (char *)write_text("bad.svm", "1 1:1\n1 2:x\n");
	expect_refused(spec, DML_EINVAL, "bad.svm: record 2: bad pair '2:x'");
	spec->data = (char *)classes;
	expect_refused(spec, DML_EINVAL, "classes.svm: labels go up to 3, but table 0 has "
		       "width 1 (binary); give it width 4 for one-vs-rest");
	spec->tables[0]->width = 3;
	expect_refused(spec, DML_EINVAL, "classes.svm: label 3 is not below classes 3");
	spec->tables[0]->width = 4;
	spec->test_data = (char *)write_text("badtest.svm", "1 1:1e99\n");
	expect_refused(spec, DML_EINVAL, "badtest.svm: record 1: value of '1:1e99' is not "
		       "a finite float");
	spec->test_data = test_data;
	{
		struct dml_app_env env = { "cpu", NULL, NULL };
		char err[256];
		void *state = NULL;

		ck_assert_int_eq(app->create(spec, &env, &state, err, sizeof(err)), 0);
		app->destroy(state);
		ck_assert_int_eq(app->create(NULL, &env, &state, err, sizeof(err)), DML_EINVAL);
		ck_assert_ptr_null(state);
	}
	spec->data = data;
	dml_job_spec_free(spec);
	app->destroy(NULL);
}
END_TEST

/* ---- io failures and a worker without records -------------------------------- */

START_TEST(test_io_failures)
{
	Dml__JobSpec *spec = spec_make("synthetic", 4096, 1, "examples = 100\nbatch_size = "
				       "8\n");
	void *state = app_test_make(app, spec, &app_test_cpu);
	struct dml_app_io io;
	struct dml_app_step st;
	char err[256];
	struct app_test_sparse t;
	double v;

	sio_init(&t, 4096, 1);
	io = app_test_sparse_io(&t);
	t.fail_pull = 1;
	ck_assert_int_eq(app->step(state, &io, &st, err, sizeof(err)), DML_ECONN);
	ck_assert_msg(strstr(err, "pull of table 0") != NULL, "%s", err);
	ck_assert(st.examples == 0 && t.in_flight == 0);
	ck_assert_int_eq(app->evaluate(state, &io, &v, err, sizeof(err)), DML_ECONN);
	t.fail_pull = 0;
	t.fail_push = 1;
	ck_assert_int_eq(app->step(state, &io, &st, err, sizeof(err)), DML_ETIMEDOUT);
	ck_assert_msg(strstr(err, "push to table 0") != NULL, "%s", err);
	ck_assert_int_eq(t.in_flight, 0);
	t.fail_push = 0;
	/* A push's failure shows where it is waited for: the next step ... */
	ck_assert_int_eq(app->step(state, &io, &st, err, sizeof(err)), 0);
	ck_assert_int_eq(t.in_flight, 1);
	t.fail_push_wait = 1;
	ck_assert_int_eq(app->step(state, &io, &st, err, sizeof(err)), DML_ECONN);
	ck_assert_msg(strstr(err, "push to table 0") != NULL, "%s", err);
	ck_assert_int_eq(t.in_flight, 0);
	t.fail_push_wait = 0;
	/* ... or drain. */
	ck_assert_int_eq(app->step(state, &io, &st, err, sizeof(err)), 0);
	t.fail_push_wait = 1;
	ck_assert_int_eq(app->drain(state, &io, err, sizeof(err)), DML_ECONN);
	ck_assert_int_eq(t.in_flight, 0);
	t.fail_push_wait = 0;
	ck_assert_int_eq(app->drain(state, &io, err, sizeof(err)), 0);
	step_ok(state, &t, 8);
	/* No partitions: a step pulls the bias alone, trains on nothing. */
	ck_assert_int_eq(app->set_partitions(state, NULL, 0, 4, err, sizeof(err)), 0);
	t.pulls = 0;
	ck_assert(isnan(step_ok(state, &t, 0)));
	ck_assert(t.pulls == 1 && t.npulled[0] == 1);
	ck_assert_int_eq(app->set_partitions(state, (const uint32_t[]){ 4 }, 1, 4, err,
					     sizeof(err)), DML_EINVAL);
	app_test_sparse_free(&t);
	app->destroy(state);
	dml_job_spec_free(spec);
}
END_TEST

/* ---- learning ------------------------------------------------------------------ */

/* Train through the in-process store (adagrad); the AUC on the test set. */
static double train(int steps, double *first_loss, double *last_loss)
{
	Dml__JobSpec *spec = app_test_spec(
		"[job]\nname = t\napp = sparse_lr\nmax_clocks = 10\ndata = synthetic\n"
		"examples = 100000\ntest_data = synthetic\ndim = 65536\nbatch_size = 128\n"
		"seed = 5\n[table]\nid = 0\nkind = sparse\nwidth = 1\noptimizer = adagrad\n"
		"lr = 0.05\n");
	struct dml_local_store *store = NULL;
	struct dml_app_io io;
	struct dml_app_step st;
	double auc = NAN, sum = 0;
	void *state = app_test_make(app, spec, &app_test_cpu);
	char err[256] = "";

	ck_assert_msg(dml_local_store_new(spec, &store, err, sizeof(err)) == 0, "%s", err);
	dml_local_store_io(store, &io);
	/* Zero weights: every score ties, which is chance. */
	ck_assert_msg(app->evaluate(state, &io, &auc, err, sizeof(err)) == 0, "%s", err);
	ck_assert(auc == 0.5);
	for (int s = 0; s < steps; s++) {
		ck_assert_msg(app->step(state, &io, &st, err, sizeof(err)) == 0, "%s", err);
		ck_assert_uint_eq(st.examples, 128);
		if (s == 0)
			*first_loss = st.loss;
		if (s >= steps - 50)
			sum += st.loss;
	}
	*last_loss = sum / 50;
	ck_assert_msg(app->drain(state, &io, err, sizeof(err)) == 0, "%s", err);
	ck_assert_msg(app->evaluate(state, &io, &auc, err, sizeof(err)) == 0, "%s", err);
	app->destroy(state);
	dml_local_store_free(store);
	dml_job_spec_free(spec);
	return auc;
}

START_TEST(test_learns)
{
	double first, last, auc = train(600, &first, &last), again;

	/* Zero weights: every probability 1/2. About 18% of the records are
	 * clicks, so the loss falls well below log 2; the hidden model's own
	 * AUC on these records is about 0.79, 600 steps reach about 0.65. */
	ck_assert(fabs(first - log(2.0)) < 1e-6);
	ck_assert_msg(auc > 0.62 && last < 0.7 * first, "auc %g, loss %g -> %g", auc, first,
		      last);
	again = train(600, &first, &last);
	ck_assert_msg(auc == again, "auc %.17g then %.17g", auc, again);
	printf("check_sparse_lr: synthetic clicks: test AUC %.4f after 600 steps, loss %.4f "
	       "-> %.4f\n", auc, first, last);
}
END_TEST

START_TEST(test_profile_job)
{
	Dml__JobSpec *spec = app_test_spec(app->profile_job);
	void *state = app_test_make(app, spec, &app_test_cpu);
	const struct dml_app_table *tab;
	struct app_test_sparse t;

	ck_assert_str_eq(app->name, "sparse_lr");
	ck_assert_uint_eq(app->tables(state, &tab), 1);
	ck_assert(tab[0].id == 0 && !tab[0].dense && tab[0].width == 1 && tab[0].keys == 0);
	ck_assert_ptr_eq(dml_app_find("sparse_lr"), app);
	sio_init(&t, spec->dim, 1);
	ck_assert(fabs(step_ok(state, &t, spec->batch_size) - log(2.0)) < 1e-6);
	app_test_sparse_free(&t);
	app->destroy(state);
	dml_job_spec_free(spec);
}
END_TEST

static Suite *sparse_lr_suite(void)
{
	Suite *s = suite_create("sparse_lr");
	TCase *tc = tcase_create("app");

	dml_test_tmpdir_fixture(tc, "check_sparse_lr", 1);
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_gradient_binary);
	tcase_add_test(tc, test_gradient_one_vs_rest);
	tcase_add_test(tc, test_auc);
	tcase_add_test(tc, test_evaluate_metrics);
	tcase_add_test(tc, test_evaluate_one_vs_rest);
	tcase_add_test(tc, test_refuses);
	tcase_add_test(tc, test_io_failures);
	tcase_add_test(tc, test_learns);
	tcase_add_test(tc, test_profile_job);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return dml_check_run(sparse_lr_suite());
}
