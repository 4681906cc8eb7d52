/*
 * check_mf.c - the mf app and its synthetic ratings.
 *
 * The pushed gradients of both tables against central finite differences
 * of the step's own loss, through a test io that serves the factors of ids
 * below a bound from arrays and keeps what is pushed (keys sorted and
 * distinct, both pushes left in flight until the next step or drain);
 * evaluation (RMSE and loss) of a ratings file against a reference
 * computed here; specs and files it refuses, each with its reason; io
 * failures that leave nothing in flight and a worker without ratings; the
 * synthetic ratings (the same every time, the hidden model's RMSE the
 * noise's); and training on synthetic ratings through the in-process store,
 * which must come near the noise floor and give the same RMSE twice.
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
#include "worker/data_synth_ratings.h"
#include "proto/dml_error.h"
#include "proto/job_spec.h"
#include "worker/local_store.h"
#include "test/tmpdir.h"

static const struct dml_app *const app = &dml_app_mf;

static uint64_t g_rng = 7;

/* Uniform in [lo, hi), from a fixed sequence (splitmix64). */
static double rnd(double lo, double hi)
{
	return lo + (hi - lo) * (double)(dml_rng_next(&g_rng) >> 11) / 9007199254740992.0;
}

static const char *write_text(const char *name, const char *text)
{
	return dml_test_tmpdir_write(name, text, strlen(text), 0);
}

/* An mf job on data with table width k, extra job lines and table lines. */
static Dml__JobSpec *spec_make(const char *data, uint32_t k, const char *extra,
			       const char *table)
{
	char text[8192];
	int n = snprintf(text, sizeof(text),
			 "[job]\nname = t\napp = mf\nmax_clocks = 10\ndata = %s\n%s"
			 "[table]\nid = 0\nkind = sparse\nwidth = %u\ninit = normal\n"
			 "init_scale = 0.1\n%s[table]\nid = 1\nkind = sparse\nwidth = %u\n"
			 "init = normal\ninit_scale = 0.1\n%s", data, extra, k, table, k, table);

	ck_assert(n > 0 && (size_t)n < sizeof(text));
	return app_test_spec(text);
}

/* The test io: tables 0 and 1 over ids below IDS. */
#define IDS 16

static double step_ok(void *state, struct app_test_sparse *t, uint64_t rows)
{
	return app_test_sparse_step(app, state, t, rows);
}

static double evaluate_ok(void *state, struct app_test_sparse *t)
{
	return app_test_sparse_evaluate(app, state, t);
}

/* ---- gradients ------------------------------------------------------------- */

static const char ratings_text[] = "# user item rating\n"
				   "0 1 4\n3 1 2.5\n0 2 1\n5 7 5\n3 2 3.5\n\n9 1 2\n5 1 4.5\n";
#define RATINGS 7
#define RATINGS_MEAN (22.5 / 7)

/*
 * With batch_size = the number of ratings and one partition, every step is
 * one pass: the same ratings in another order, so the same mean loss. The
 * pushes of a step are then d loss / d row for each id the batch uses.
 */
START_TEST(test_gradient)
{
	const uint32_t k = 3;
	Dml__JobSpec *spec = spec_make(write_text("grad.txt", ratings_text), k,
				       "batch_size = 7\n", "");
	void *state = app_test_make(app, spec, &app_test_cpu);
	struct app_test_sparse t;
	uint64_t keys[2][IDS];
	float grad[2][IDS * 3];
	char err[256];

	app_test_sparse_init(&t, 2, IDS, k);
	for (int s = 0; s < 2; s++)
		for (size_t i = 0; i < IDS * k; i++)
			t.p[s][i] = (float)rnd(-1, 1);
	step_ok(state, &t, RATINGS);
	/* Users 0, 3, 5, 9; items 1, 2, 7. */
	ck_assert(t.npushed[0] == 4 && t.npushed[1] == 3);
	ck_assert(t.pushed_keys[0][3] == 9 && t.pushed_keys[1][2] == 7);
	ck_assert(t.npulled[0] == 4 && t.npulled[1] == 3);
	/* Kept before the steps below push gradients of nudged factors. */
	for (int s = 0; s < 2; s++) {
		memcpy(keys[s], t.pushed_keys[s], sizeof(keys[s]));
		memcpy(grad[s], t.pushed[s], sizeof(grad[s]));
	}
	for (int s = 0; s < 2; s++) {
		const float *g = grad[s];
		size_t n = s ? 3 : 4;

		for (size_t i = 0; i < n; i++) {
			for (uint32_t c = 0; c < k; c++) {
				float *w = t.p[s] + keys[s][i] * k + c, saved = *w;
				const float eps = 1e-2f;
				double up, down, fd;

				*w = saved + eps;
				up = step_ok(state, &t, RATINGS);
				*w = saved - eps;
				down = step_ok(state, &t, RATINGS);
				*w = saved;
				fd = (up - down) / (double)((saved + eps) - (saved - eps));
				ck_assert_msg(fabs(fd - g[i * k + c]) < 2e-4 + 1e-3 * fabs(fd),
					      "table %d key %" PRIu64 " factor %u: pushed %g, "
					      "finite differences %g", s, keys[s][i], c, g[i * k + c],
					      fd);
			}
		}
	}
	/* A batch the scheduler gives (LB-BSP) pushes sums over batch_size:
	 * twice the ratings, each seen twice, twice the gradient. */
	ck_assert_int_eq(app->set_batch(state, 2 * RATINGS, err, sizeof(err)), 0);
	step_ok(state, &t, 2 * RATINGS);
	for (int s = 0; s < 2; s++) {
		ck_assert_uint_eq(t.npushed[s], s ? 3 : 4);
		ck_assert_mem_eq(t.pushed_keys[s], keys[s], t.npushed[s] * sizeof(uint64_t));
		for (size_t i = 0; i < t.npushed[s] * k; i++)
			ck_assert_msg(fabs(t.pushed[s][i] - 2 * grad[s][i]) <=
				      1e-5 * (1 + fabs(grad[s][i])), "table %d [%zu]: %g, not "
				      "2 x %g", s, i, t.pushed[s][i], grad[s][i]);
	}
	app_test_sparse_free(&t);
	app->destroy(state);
	dml_job_spec_free(spec);
}
END_TEST

/* ---- evaluation ------------------------------------------------------------ */

/* RMSE and loss of a file's ratings against the model computed here. */
START_TEST(test_evaluate)
{
	const uint32_t k = 2;
	const char *data = write_text("eval.txt", ratings_text);
	static const uint64_t pairs[RATINGS][2] = { { 0, 1 }, { 3, 1 }, { 0, 2 }, { 5, 7 },
						    { 3, 2 }, { 9, 1 }, { 5, 1 } };
	static const double r[RATINGS] = { 4, 2.5, 1, 5, 3.5, 2, 4.5 };
	struct app_test_sparse t;
	double se = 0;

	app_test_sparse_init(&t, 2, IDS, k);
	for (int s = 0; s < 2; s++)
		for (size_t i = 0; i < IDS * k; i++)
			t.p[s][i] = (float)rnd(-1, 1);
	for (int i = 0; i < RATINGS; i++) {
		const float *p = t.p[0] + pairs[i][0] * k, *q = t.p[1] + pairs[i][1] * k;
		double e = RATINGS_MEAN + (double)p[0] * q[0] + (double)p[1] * q[1] - r[i];

		se += e * e;
	}
	for (int loss = 0; loss < 2; loss++) {
		Dml__JobSpec *spec = spec_make(data, k, loss ? "metric = loss\n" :
						   "metric = rmse\ntest_data = synthetic\n", "");
		char *test_data = spec->test_data;
		void *state;
		double v;

		/* As test_data, the file itself; without, its first ratings. */
		if (!loss)
			spec->test_data = (char *)data;
		state = app_test_make(app, spec, &app_test_cpu);
		spec->test_data = test_data;
		v = evaluate_ok(state, &t);
		if (loss)
			ck_assert_msg(fabs(v - se / 2 / RATINGS) < 1e-6, "loss %g", v);
		else
			ck_assert_msg(fabs(v - sqrt(se / RATINGS)) < 1e-6, "rmse %g", v);
		app->destroy(state);
		dml_job_spec_free(spec);
	}
	app_test_sparse_free(&t);
}
END_TEST

/* ---- specs and files it refuses ---------------------------------------------- */

static void expect_refused(const Dml__JobSpec *spec, int code, const char *why)
{
	app_test_refused(app, spec, &app_test_cpu, code, why);
}

START_TEST(test_refuses)
{
	Dml__JobSpec *spec = spec_make("synthetic", 8, "examples = 100\n", "");
	char *data = spec->data, *metric = spec->metric, *init0 = spec->tables[0]->init;
	char *test_data = spec->test_data;
	char *init1 = spec->tables[1]->init;
	char path[DML_TEST_PATH_MAX + 64];

	spec->metric = (char *)"auc";
	expect_refused(spec, DML_EINVAL, "metric 'auc' is not one it computes (rmse, loss)");
	spec->metric = metric;
	spec->data = (char *)"";
	expect_refused(spec, DML_EINVAL, "data is empty (a ratings file or synthetic)");
	spec->data = data;
	spec->examples = 0;
	expect_refused(spec, DML_EINVAL, "synthetic data needs examples >= 1");
	spec->examples = 100;
	spec->tables[1]->width = 4;
	expect_refused(spec, DML_EINVAL, "tables 0 and 1 need one width (the factors per "
		       "id), not 8 and 4");
	spec->tables[1]->width = 8;
	spec->tables[1]->dense = 1;
	spec->tables[1]->keys = 10;
	expect_refused(spec, DML_EINVAL, "needs two sparse tables, id 0 (users) and id 1");
	spec->tables[1]->dense = 0;
	spec->tables[1]->keys = 0;
	spec->tables[1]->id = 2;
	expect_refused(spec, DML_EINVAL, "needs two sparse tables");
	spec->tables[1]->id = 1;
	spec->tables[0]->init = (char *)"zeros";
	spec->tables[1]->init = (char *)"zeros";
	expect_refused(spec, DML_EINVAL, "tables 0 and 1 both start at zeros");
	spec->tables[0]->init = init0;
	spec->tables[1]->init = init1;
	spec->batch_size = 1u << 27;
	expect_refused(spec, DML_EINVAL, "batch_size 134217728 x width 8 is more than");
	spec->batch_size = 64;
	snprintf(path, sizeof(path), "%s/no-such.txt", dml_test_tmpdir());
	spec->data = path;
	expect_refused(spec, DML_EINVAL, "no-such.txt: cannot open");
	spec->data = (char *)write_text("bad.txt", "1 2 3\n1 2\n");
	expect_refused(spec, DML_EINVAL, "bad.txt: record 2: ");
	spec->data = data;
	spec->test_data = (char *)write_text("badtest.txt", "1 2 inf\n");
	expect_refused(spec, DML_EINVAL, "badtest.txt: record 1: ");
	spec->test_data = (char *)"";
	{
		struct dml_app_env env = { "cpu", NULL, NULL };
		char err[256];
		void *state = NULL;

		ck_assert_int_eq(app->create(spec, &env, &state, err, sizeof(err)), 0);
		app->destroy(state);
		ck_assert_int_eq(app->create(NULL, &env, &state, err, sizeof(err)), DML_EINVAL);
		ck_assert_ptr_null(state);
	}
	spec->test_data = test_data;
	dml_job_spec_free(spec);
	app->destroy(NULL);
}
END_TEST

/* ---- io failures and a worker without ratings -------------------------------- */

START_TEST(test_io_failures)
{
	Dml__JobSpec *spec = spec_make(write_text("io.txt", ratings_text), 2,
				       "batch_size = 4\n", "");
	void *state = app_test_make(app, spec, &app_test_cpu);
	struct dml_app_io io;
	struct dml_app_step st;
	char err[256];
	struct app_test_sparse t;
	double v;

	app_test_sparse_init(&t, 2, IDS, 2);
	io = app_test_sparse_io(&t);
	/* The items' pull fails once the users' is in flight: it is waited for. */
	t.fail_pull = 2;
	ck_assert_int_eq(app->step(state, &io, &st, err, sizeof(err)), DML_ECONN);
	ck_assert_msg(strstr(err, "pull of table 1") != NULL, "%s", err);
	ck_assert(st.examples == 0 && t.in_flight == 0);
	ck_assert_int_eq(app->evaluate(state, &io, &v, err, sizeof(err)), DML_ECONN);
	ck_assert_int_eq(t.in_flight, 0);
	t.fail_pull = 0;
	/* The items' push fails once the users' is in flight: drain lands it. */
	t.fail_push = 2;
	ck_assert_int_eq(app->step(state, &io, &st, err, sizeof(err)), DML_ETIMEDOUT);
	ck_assert_msg(strstr(err, "push to table 1") != NULL, "%s", err);
	ck_assert_int_eq(t.in_flight, 1);
	t.fail_push = 0;
	ck_assert_int_eq(app->drain(state, &io, err, sizeof(err)), 0);
	ck_assert_int_eq(t.in_flight, 0);
	/* A push's failure shows where it is waited for: the next step ... */
	ck_assert_int_eq(app->step(state, &io, &st, err, sizeof(err)), 0);
	ck_assert_int_eq(t.in_flight, 2);
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
	step_ok(state, &t, 4);
	/* No partitions: a step pulls user 0 alone and trains on nothing. */
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

/* ---- synthetic ratings ----------------------------------------------------------- */

START_TEST(test_synthetic)
{
	struct dml_ratings g = { 11, 50, 70 }, h = { 12, 50, 70 };
	double sum = 0, sq = 0, se = 0, base = 0;
	int differ = 0;
	const int n = 20000;

	for (int i = 0; i < n; i++) {
		uint64_t u, it, u2, it2;
		float r, r2;

		dml_ratings_record(&g, (uint64_t)i, &u, &it, &r);
		dml_ratings_record(&g, (uint64_t)i, &u2, &it2, &r2);
		ck_assert(u == u2 && it == it2 && r == r2);
		ck_assert(u < 50 && it < 70 && isfinite(r));
		dml_ratings_record(&h, (uint64_t)i, &u2, &it2, &r2);
		differ += u != u2 || it != it2 || r != r2;
		sum += r;
		sq += (double)r * r;
		se += pow(r - dml_ratings_true(&g, u, it), 2);
		base += pow(r - DML_RATINGS_MEAN, 2);
	}
	ck_assert_int_gt(differ, n * 9 / 10);
	/* Mean 3.5; the hidden model leaves the noise's RMSE (0.25); the mean
	 * alone about sqrt(1 + 0.25^2). */
	ck_assert_msg(fabs(sum / n - DML_RATINGS_MEAN) < 0.1, "mean %g", sum / n);
	ck_assert_msg(fabs(sqrt(se / n) - DML_RATINGS_NOISE) < 0.01, "true rmse %g",
		      sqrt(se / n));
	ck_assert_msg(sqrt(base / n) > 0.8 && sqrt(base / n) < 1.3, "mean's rmse %g",
		      sqrt(base / n));
}
END_TEST

/* ---- learning ------------------------------------------------------------------ */

/* Train through the in-process store (adagrad); the test RMSE before and after. */
static double train(int steps, double *before)
{
	Dml__JobSpec *spec = spec_make("synthetic", 16,
				       "examples = 200000\nusers = 200\nitems = 300\n"
				       "test_data = synthetic\nbatch_size = 256\nseed = 3\n",
				       "optimizer = adagrad\nlr = 0.1\n");
	struct dml_local_store *store = NULL;
	struct dml_app_io io;
	struct dml_app_step st;
	double rmse = NAN;
	void *state;
	char err[256] = "";

	state = app_test_make(app, spec, &app_test_cpu);
	ck_assert_msg(dml_local_store_new(spec, &store, err, sizeof(err)) == 0, "%s", err);
	dml_local_store_io(store, &io);
	ck_assert_msg(app->evaluate(state, &io, before, err, sizeof(err)) == 0, "%s", err);
	for (int s = 0; s < steps; s++) {
		ck_assert_msg(app->step(state, &io, &st, err, sizeof(err)) == 0, "%s", err);
		ck_assert_uint_eq(st.examples, 256);
	}
	ck_assert_msg(app->drain(state, &io, err, sizeof(err)) == 0, "%s", err);
	ck_assert_msg(app->evaluate(state, &io, &rmse, err, sizeof(err)) == 0, "%s", err);
	app->destroy(state);
	dml_local_store_free(store);
	dml_job_spec_free(spec);
	return rmse;
}

START_TEST(test_learns)
{
	double before, after = train(2000, &before), again, b2;

	/* Small random factors predict about the mean: RMSE near 1.03. Half a
	 * million ratings of 200 users and 300 items come near the noise. */
	ck_assert_msg(before > 0.9 && before < 1.2, "before %g", before);
	ck_assert_msg(after < 0.45, "rmse %g -> %g", before, after);
	again = train(2000, &b2);
	ck_assert_msg(after == again, "rmse %.17g then %.17g", after, again);
	printf("check_mf: synthetic ratings: test RMSE %.4f -> %.4f after 2000 steps "
	       "(noise %.2f)\n", before, after, DML_RATINGS_NOISE);
}
END_TEST

START_TEST(test_profile_job)
{
	Dml__JobSpec *spec = app_test_spec(app->profile_job);
	void *state = app_test_make(app, spec, &app_test_cpu);
	const struct dml_app_table *tab;

	ck_assert_str_eq(app->name, "mf");
	ck_assert_str_eq(app->metric, "rmse");
	ck_assert_uint_eq(app->tables(state, &tab), 2);
	for (uint32_t i = 0; i < 2; i++)
		ck_assert(tab[i].id == i && !tab[i].dense && tab[i].width == 16 &&
			  tab[i].keys == 0);
	ck_assert_ptr_eq(dml_app_find("mf"), app);
	ck_assert_uint_eq(app->data_examples(state), 2000);
	app->destroy(state);
	dml_job_spec_free(spec);
}
END_TEST

static Suite *mf_suite(void)
{
	Suite *s = suite_create("mf");
	TCase *tc = tcase_create("app");

	dml_test_tmpdir_fixture(tc, "check_mf", 1);
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_gradient);
	tcase_add_test(tc, test_evaluate);
	tcase_add_test(tc, test_refuses);
	tcase_add_test(tc, test_io_failures);
	tcase_add_test(tc, test_synthetic);
	tcase_add_test(tc, test_learns);
	tcase_add_test(tc, test_profile_job);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return dml_check_run(mf_suite());
}
