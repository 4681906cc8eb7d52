/*
 * check_mlp.c - the cpu compute backend (check_mlp_backend.c) and the mlp
 * app: its gradients here, its data in check_mlp_data.c.
 *
 * mlp: the pushed gradients against central finite differences of the
 * step's own loss (softmax regression and a net of two hidden layers), with
 * a recording io that serves fixed parameters and keeps what is pushed
 * (check_mlp_util.c); the same step through a backend that is not unified
 * (staging buffers, uploads, downloads); specs it refuses, each with its
 * reason.
 */
#define _GNU_SOURCE
#include <check.h>
#include <inttypes.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "worker/app.h"
#include "test/app_test.h"
#include "worker/backend.h"
#include "test/check_mlp.h"
#include "test/check_run.h"
#include "worker/data_idx.h"
#include "proto/dml_error.h"
#include "proto/job_spec.h"
#include "test/tmpdir.h"

/* ---- the mlp: gradients -------------------------------------------------- */

/*
 * A net of sizes on 16 synthetic examples with batch_size 16 (every step
 * sees them all), parameters drawn uniformly, and one step taken: its loss
 * and pushed gradients kept.
 */
struct one_step {
	Dml__JobSpec *spec;
	struct dml_app_env env;
	void *state;
	struct tio t;
	float *grad[TABLES];
	double loss;
};

static void one_step_open(struct one_step *o, const uint32_t *sizes, size_t n)
{
	o->spec = spec_make(sizes, n, "synthetic",
			    "batch_size = 16\nexamples = 16\nseed = 3\n");
	o->env = (struct dml_app_env){ "cpu", &dml_backend_cpu, cpu_open() };
	o->state = app_test_make(&dml_app_mlp, o->spec, &o->env);
	tio_init(&o->t, &dml_app_mlp, o->state);
	fill_params(&o->t, 1.0f);
	o->loss = step_ok(&dml_app_mlp, o->state, &o->t, 16);
	for (size_t i = 0; i < o->t.ntables; i++) {
		o->grad[i] = floats(o->t.len[i]);
		memcpy(o->grad[i], o->t.g[i], o->t.len[i] * sizeof(float));
	}
}

static void one_step_close(struct one_step *o)
{
	for (size_t i = 0; i < o->t.ntables; i++)
		free(o->grad[i]);
	tio_free(&o->t);
	dml_app_mlp.destroy(o->state);
	dml_backend_cpu.close(o->env.be_ctx);
	dml_job_spec_free(o->spec);
}

/*
 * Every pushed gradient of a net against central differences of the step's
 * loss. With examples = batch_size every step sees the whole data set, so
 * its loss is one function of the parameters.
 */
static void check_gradient(const uint32_t *sizes, size_t n)
{
	const struct dml_app *app = &dml_app_mlp;
	struct one_step o;
	struct tio *t = &o.t;
	double worst = 0;
	size_t checked = 0;

	one_step_open(&o, sizes, n);
	ck_assert(isfinite(o.loss) && o.loss > 0);
	ck_assert_int_eq(t->pulls, (int)t->ntables);
	ck_assert_int_eq(t->pushes, (int)t->ntables);
	/* The same parameters, the same loss, whatever the order of the rows. */
	ck_assert(fabs(step_ok(app, o.state, t, 16) - o.loss) < 1e-6);
	for (size_t i = 0; i < t->ntables; i++) {
		for (size_t j = 0; j < t->len[i]; j++) {
			/* 2^-9: small next to the curvature, large next to float noise
			 * in a loss of about 1 (1e-7 / 2e-3 = 5e-5). */
			const float eps = 1.0f / 512, w = t->w[i][j];
			float up = w + eps, down = w - eps;
			double lu, ld, fd, g = o.grad[i][j], rel;

			t->w[i][j] = up;
			lu = step_ok(app, o.state, t, 16);
			t->w[i][j] = down;
			ld = step_ok(app, o.state, t, 16);
			t->w[i][j] = w;
			fd = (lu - ld) / ((double)up - (double)down);
			rel = fabs(g - fd) / fmax(fabs(g) + fabs(fd), 2e-2);
			worst = fmax(worst, rel);
			ck_assert_msg(rel <= 1e-2, "table %zu [%zu]: gradient %g, differences %g",
				      i, j, g, fd);
			checked++;
		}
	}
	printf("check_mlp: %zu gradients of %s net, worst relative error %.2g\n", checked,
	       n > 2 ? "a hidden-layer" : "a softmax", worst);
	one_step_close(&o);
}

START_TEST(test_mlp_gradient_softmax)
{
	static const uint32_t sizes[] = { 5, 3 };

	check_gradient(sizes, 2);
}
END_TEST

START_TEST(test_mlp_gradient_hidden)
{
	static const uint32_t sizes[] = { 5, 4, 3, 3 };

	check_gradient(sizes, 4);
}
END_TEST

/*
 * A batch the scheduler gives (LB-BSP) pushes the summed gradient over
 * batch_size: with all 16 examples in every step, a batch of 48 sees each
 * three times and must push three times the gradient of a batch of 16, at
 * the same mean loss. Beyond 4 x batch_size a batch is refused.
 */
START_TEST(test_mlp_batch_split)
{
	static const uint32_t sizes[] = { 5, 4, 3 };
	const struct dml_app *app = &dml_app_mlp;
	struct one_step o;
	struct tio *t = &o.t;
	char err[256];

	one_step_open(&o, sizes, 3);
	ck_assert_int_eq(app->set_batch(o.state, 48, err, sizeof(err)), 0);
	ck_assert(fabs(step_ok(app, o.state, t, 48) - o.loss) < 1e-5);
	for (size_t i = 0; i < t->ntables; i++)
		for (size_t j = 0; j < t->len[i]; j++)
			ck_assert_msg(fabs(t->g[i][j] - 3 * o.grad[i][j]) <=
				      1e-5 * (1 + fabs(o.grad[i][j])), "table %zu [%zu]: %g, "
				      "not 3 x %g", i, j, t->g[i][j], o.grad[i][j]);
	ck_assert_int_eq(app->set_batch(o.state, 65, err, sizeof(err)), DML_EINVAL);
	ck_assert_msg(strstr(err, "outside 1..64") != NULL, "%s", err);
	one_step_close(&o);
}
END_TEST

/* ---- the mlp on a backend that is not unified ---------------------------- */

/*
 * The cpu backend dressed as a device with its own memory: device buffers
 * start as NaN (a missed upload shows), staging buffers are remembered (so
 * a test can tell that pushes come from them).
 */
static float *g_staging[64];
static size_t g_nstaging;

static int nan_alloc(void *ctx, size_t n, float **out)
{
	int rc = dml_backend_cpu.alloc(ctx, n, out);

	for (size_t i = 0; rc == 0 && i < n; i++)
		(*out)[i] = NAN;
	return rc;
}

static int staging_alloc(void *ctx, size_t n, float **out)
{
	int rc = dml_backend_cpu.alloc(ctx, n, out);

	if (rc == 0 && g_nstaging < DML_ARRAY_LEN(g_staging))
		g_staging[g_nstaging++] = *out;
	return rc;
}

static int is_staging(const float *p)
{
	for (size_t i = 0; i < g_nstaging; i++)
		if (g_staging[i] == p)
			return 1;
	return 0;
}

START_TEST(test_mlp_staged_backend)
{
	static const uint32_t sizes[] = { 6, 5, 4, 3 };
	const struct dml_app *app = &dml_app_mlp;
	Dml__JobSpec *spec = spec_make(sizes, 4, "synthetic",
				       "batch_size = 8\nexamples = 50\nseed = 9\n");
	struct dml_backend_ops staged = dml_backend_cpu;
	struct dml_app_env cpu = { "cpu", &dml_backend_cpu, cpu_open() };
	struct dml_app_env dev = { "staged", &staged, cpu_open() };
	void *a, *b;
	struct tio ta, tb;

	staged.unified = 0;
	staged.alloc = nan_alloc;
	staged.host_alloc = staging_alloc;
	a = app_test_make(&dml_app_mlp, spec, &cpu);
	b = app_test_make(&dml_app_mlp, spec, &dev);
	tio_init(&ta, app, a);
	tio_init(&tb, app, b);
	fill_params(&ta, 0.5f);
	for (size_t i = 0; i < ta.ntables; i++)
		memcpy(tb.w[i], ta.w[i], ta.len[i] * sizeof(float));
	/* Steps through a pass and a half: the same batches, losses, gradients. */
	ta.lr = tb.lr = 0.1f;
	for (int s = 0; s < 10; s++) {
		double la = step_ok(app, a, &ta, 8), lb = step_ok(app, b, &tb, 8);

		ck_assert_msg(fabs(la - lb) < 1e-6, "step %d: %g vs %g", s, la, lb);
		for (size_t i = 0; i < ta.ntables; i++) {
			ck_assert(is_staging(tb.pushed_from[i]));
			ck_assert(!is_staging(ta.pushed_from[i]));
			for (size_t j = 0; j < ta.len[i]; j++)
				ck_assert(fabs(ta.g[i][j] - tb.g[i][j]) < 1e-6);
		}
	}
	ck_assert(fabs(evaluate_ok(app, a, &ta) - evaluate_ok(app, b, &tb)) < 1e-12);
	tio_free(&ta);
	tio_free(&tb);
	app->destroy(a);
	app->destroy(b);
	dml_backend_cpu.close(cpu.be_ctx);
	dml_backend_cpu.close(dev.be_ctx);
	dml_job_spec_free(spec);
}
END_TEST

/* ---- the mlp: specs it refuses ------------------------------------------- */

START_TEST(test_mlp_refuses_bad_specs)
{
	static const uint32_t sizes[] = { 5, 4, 3, 3 };
	Dml__JobSpec *spec = spec_make(sizes, 4, "synthetic", "batch_size = 16\n");
	struct dml_app_env env = { "cpu", &dml_backend_cpu, cpu_open() };
	struct dml_app_env none = { "cpu", NULL, NULL };
	char *data = spec->data, *hidden = spec->hidden, *metric = spec->metric;
	char *test_data = spec->test_data;
	Dml__TableSpec *t2 = spec->tables[2];

	expect_refused(spec, NULL, DML_EINVAL, "no compute backend");
	expect_refused(spec, &none, DML_EINVAL, "no compute backend");
	/* The strings are borrowed for a call and the parser's put back. */
	spec->metric = (char *)"f1";
	expect_refused(spec, &env, DML_EINVAL, "metric 'f1' is not one of loss, accuracy");
	spec->metric = metric;
	spec->data = (char *)"mnist";
	expect_refused(spec, &env, DML_EINVAL, "data 'mnist' is not IMAGES,LABELS");
	spec->data = (char *)"a,b,c";
	expect_refused(spec, &env, DML_EINVAL, "data 'a,b,c' is not IMAGES,LABELS");
	spec->data = (char *)"images, ";
	expect_refused(spec, &env, DML_EINVAL, "the labels file is missing");
	spec->data = (char *)"no-such-images.idx,no-such-labels.idx";
	expect_refused(spec, &env, DML_EINVAL, "no-such-images.idx: ");
	spec->data = data;
	spec->examples = 0;
	expect_refused(spec, &env, DML_EINVAL, "synthetic data needs examples >= 1");
	spec->examples = 100;
	spec->test_data = (char *)"x";
	expect_refused(spec, &env, DML_EINVAL, "test_data 'x' is not IMAGES,LABELS");
	spec->test_data = test_data;
	spec->hidden = (char *)"4,x";
	expect_refused(spec, &env, DML_EINVAL, "hidden '4,x' is not a comma list");
	spec->hidden = (char *)"4,";
	expect_refused(spec, &env, DML_EINVAL, "hidden '4,' ends with a comma");
	spec->hidden = (char *)"0,3";
	expect_refused(spec, &env, DML_EINVAL, "a layer of 0 units");
	spec->hidden = (char *)"4,70000";
	expect_refused(spec, &env, DML_EINVAL, "a layer of 70000 units");
	spec->hidden = (char *)"1,1,1,1,1,1,1,1,1";
	expect_refused(spec, &env, DML_EINVAL, "more than 8 layers");
	/* One hidden layer: three tables are one too many. */
	spec->hidden = (char *)"4";
	expect_refused(spec, &env, DML_EINVAL, "2 layers need 2 tables (ids 0..1), the job has "
		       "3");
	spec->hidden = hidden;
	spec->tables[0]->width = 5;
	expect_refused(spec, &env, DML_EINVAL, "table 0 (layer 1) must be dense with keys = 4 "
		       "(its units) and width = 6 (its 5 inputs + 1 for the bias)");
	spec->tables[0]->width = 6;
	spec->tables[1]->dense = 0;
	expect_refused(spec, &env, DML_EINVAL, "table 1: a sparse table has no key count");
	spec->tables[1]->dense = 1;
	spec->tables[1]->keys = 4;
	expect_refused(spec, &env, DML_EINVAL, "table 1 (layer 2) must be dense with keys = 3");
	spec->tables[1]->keys = 3;
	spec->tables[2]->keys = 1;
	expect_refused(spec, &env, DML_EINVAL, "table 2 (the output layer) must be dense with "
		       "keys = classes, 2..65535");
	spec->tables[2]->keys = 3;
	spec->n_tables = 2;
	expect_refused(spec, &env, DML_EINVAL, "table 2 (the output layer)");
	spec->n_tables = 3;
	spec->tables[2] = NULL;
	expect_refused(spec, &env, DML_EINVAL, "table #3 is missing");
	spec->tables[2] = t2;
	spec->dim = 6;
	expect_refused(spec, &env, DML_EINVAL, "table 0 (layer 1) must be dense with keys = 4 "
		       "(its units) and width = 7");
	spec->dim = 70000;
	expect_refused(spec, &env, DML_EINVAL, "dim 70000 out of range");
	spec->dim = 5;
	spec->batch_size = (1u << 28) / 5 + 1;
	expect_refused(spec, &env, DML_EINVAL, "batch_size 53687092 x the widest layer 5");
	spec->batch_size = 0;
	expect_refused(spec, &env, DML_EINVAL, "batch_size must be at least 1");
	spec->batch_size = 16;
	{
		void *state = app_test_make(&dml_app_mlp, spec, &env);

		ck_assert_str_eq(dml_app_mlp.metric, "accuracy");
		ck_assert_uint_eq(dml_app_mlp.data_examples(state), 100);
		dml_app_mlp.destroy(state);
	}
	dml_app_mlp.destroy(NULL);
	dml_backend_cpu.close(env.be_ctx);
	dml_job_spec_free(spec);
}
END_TEST

static Suite *mlp_suite(void)
{
	Suite *s = suite_create("mlp");
	TCase *be = tcase_create("backend"), *app = tcase_create("app");

	check_mlp_backend_tests(be);
	suite_add_tcase(s, be);
	dml_test_tmpdir_fixture(app, "check_mlp", 1);
	tcase_set_timeout(app, 60);
	tcase_add_test(app, test_mlp_gradient_softmax);
	tcase_add_test(app, test_mlp_gradient_hidden);
	tcase_add_test(app, test_mlp_batch_split);
	tcase_add_test(app, test_mlp_staged_backend);
	tcase_add_test(app, test_mlp_refuses_bad_specs);
	check_mlp_data_tests(app);
	suite_add_tcase(s, app);
	return s;
}

int main(void)
{
	return dml_check_run(mlp_suite());
}
