/*
 * check_backend.c - compute backends (backend.h); the parity of each op is
 * in check_backend_ops.c.
 *
 * Always: the registry (cpu is found by name, an unknown name is not, the
 * name list matches the build), the cuda backend's open() either works
 * or fails cleanly with DML_ENOTFOUND and a reason, and OpenBLAS's kernels:
 * this program starts the way dml-worker does (dml_blas_kernels_choose), so
 * on a CPU with AVX2 it must not compute on OpenBLAS's generic fallback.
 *
 * Parity, where the cuda backend is built and a device opens: every op run
 * on cpu and on cuda with the same random inputs, odd sizes, padded row
 * strides, both transposes of gemm, relu on and off, softmax_xent with and
 * without dlogits (also in place) and with bad labels; the refusals of bad
 * arguments; a device fault reported by sync; and one full step of the mlp
 * app on each backend from the same parameters, comparing the pushed
 * gradients, the loss and the accuracy. Results must agree to a relative
 * error of TOL (max |a - b| / max(1, max |a|)); each comparison prints one
 * "parity:" line with what it compared and the error. Without a device (or
 * without CUDA in the build) these tests print "SKIP: test: reason" and
 * pass.
 */
#include "config.h"

#include <cblas.h>
#include <check.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "worker/app.h"
#include "test/app_test.h"
#include "worker/backend.h"
#include "worker/blas_kernels.h"
#include "test/check_backend.h"
#include "test/check_run.h"
#include "proto/dml_error.h"

/* CUDA and cuBLAS start-up alone can take seconds. */
#define TEST_TIMEOUT_S 120
#define MAX_TABLES 4

/* ---- the two backends ------------------------------------------------------ */

/* One line on stdout, flushed: the test runs in a child that may die. */
void say(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	putchar('\n');
	fflush(stdout);
}

/* The reason inside open()'s "cuda: no CUDA device (reason)", in place. */
static const char *skip_reason(char *err)
{
	static const char prefix[] = "cuda: no CUDA device (";
	size_t n = strlen(err);

	if (strncmp(err, prefix, sizeof(prefix) - 1) != 0 || n < sizeof(prefix) ||
	    err[n - 1] != ')')
		return err;
	err[n - 1] = 0;
	return err + sizeof(prefix) - 1;
}

/*
 * Open cpu and cuda for test, or say why not ("SKIP: ...") and return 0:
 * then the test passes without comparing anything.
 */
int pair_open(const char *test, struct pair *p)
{
	struct dml_backend_conf conf = { 1, 0 };
	char err[256] = "";
	int rc;

	memset(p, 0, sizeof(*p));
	p->cuda.be = dml_backend_find("cuda");
	if (!p->cuda.be) {
		say("SKIP: %s: built without CUDA", test);
		return 0;
	}
	rc = p->cuda.be->open(&conf, &p->cuda.ctx, err, sizeof(err));
	if (rc == DML_ENOTFOUND) {
		ck_assert_ptr_null(p->cuda.ctx);
		say("SKIP: %s: no CUDA device (%s)", test, skip_reason(err));
		return 0;
	}
	/* A device that is there but does not open is a failure, not a skip. */
	ck_assert_msg(rc == 0, "cuda open: %s: %s", dml_strerror(rc), err);
	p->cpu.be = &dml_backend_cpu;
	ck_assert_msg(p->cpu.be->open(&conf, &p->cpu.ctx, err, sizeof(err)) == 0, "%s", err);
	return 1;
}

void pair_close(struct pair *p)
{
	p->cuda.be->close(p->cuda.ctx);
	p->cpu.be->close(p->cpu.ctx);
}

/* Device memory of s holding host[0..n), put there through pinned staging. */
float *up(struct side *s, const float *host, size_t n)
{
	float *d, *stage;

	ck_side(s, s->be->alloc(s->ctx, n, &d));
	ck_side(s, s->be->host_alloc(s->ctx, n, &stage));
	if (n)
		memcpy(stage, host, n * sizeof(float));
	ck_side(s, s->be->upload(s->ctx, d, stage, n));
	ck_side(s, s->be->sync(s->ctx));
	s->be->host_free(s->ctx, stage);
	return d;
}

/* Copy n floats of d back to host, then free d. */
void down(struct side *s, float *host, float *d, size_t n)
{
	float *stage;

	ck_side(s, s->be->host_alloc(s->ctx, n, &stage));
	ck_side(s, s->be->download(s->ctx, stage, d, n));
	ck_side(s, s->be->sync(s->ctx));
	if (n)
		memcpy(host, stage, n * sizeof(float));
	s->be->host_free(s->ctx, stage);
	s->be->free(s->ctx, d);
}

/* ---- data and comparison --------------------------------------------------- */

static uint64_t g_rng = 0x9e3779b97f4a7c15ull;

float rnd(float lo, float hi)
{
	g_rng = g_rng * 6364136223846793005ull + 1442695040888963407ull;
	return lo + (hi - lo) * (float)((double)(g_rng >> 40) / 16777216.0);
}

/* A malloc'd array of n uniform values in [lo, hi). */
float *rnd_array(size_t n, float lo, float hi)
{
	float *x = malloc((n ? n : 1) * sizeof(float));

	ck_assert_ptr_nonnull(x);
	for (size_t i = 0; i < n; i++)
		x[i] = rnd(lo, hi);
	return x;
}

float *dup_array(const float *x, size_t n)
{
	float *y = malloc((n ? n : 1) * sizeof(float));

	ck_assert_ptr_nonnull(y);
	if (n)
		memcpy(y, x, n * sizeof(float));
	return y;
}

/* max |ref - got| / max(1, max |ref|); a NaN on one side only is infinite. */
static double rel_err(const float *ref, const float *got, size_t n)
{
	double diff = 0, scale = 1;

	for (size_t i = 0; i < n; i++) {
		double d = fabs((double)ref[i] - got[i]);

		if (isnan(ref[i]) || isnan(got[i]))
			d = isnan(ref[i]) && isnan(got[i]) ? 0 : INFINITY;
		diff = d > diff ? d : diff;
		scale = fabs(ref[i]) > scale ? fabs(ref[i]) : scale;
	}
	return diff / scale;
}

void expect_close(const char *what, const float *cpu, const float *cuda, size_t n)
{
	double e = rel_err(cpu, cuda, n);

	say("parity: %s: %zu values, max error %.3g", what, n, e);
	ck_assert_msg(e <= TOL, "%s: cuda differs from cpu by %g (relative)", what, e);
}

/* ---- always: the registry and opening cuda --------------------------------- */

/* A CPU OpenBLAS recognised keeps its kernels; on its fallback, a CPU with
 * AVX2 gets better ones, and this process (started through
 * dml_blas_kernels_choose) runs on them. */
START_TEST(test_blas_kernels)
{
	const char *core = openblas_get_corename(), *want = getenv("OPENBLAS_CORETYPE");
	const char *better = dml_blas_kernels_for_cpu("Prescott");

	say("blas_kernels: OpenBLAS computes on its %s kernels (OPENBLAS_CORETYPE %s)\n",
	    core, want ? want : "unset");
	ck_assert_ptr_null(dml_blas_kernels_for_cpu(NULL));
	ck_assert_ptr_null(dml_blas_kernels_for_cpu("Haswell"));
	ck_assert_ptr_null(dml_blas_kernels_for_cpu("SkylakeX"));
#if defined(__x86_64__) && defined(__GNUC__)
	__builtin_cpu_init();
	if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
		ck_assert_ptr_nonnull(better);
	else
		ck_assert_ptr_null(better);
#endif
	/* An operator's own choice stands, whatever it is. */
	if (better && (!want || strcmp(want, better) == 0))
		ck_assert_str_ne(core, "Prescott");
}
END_TEST

START_TEST(test_registry)
{
	int cpu = 0, cuda = 0;

	ck_assert_ptr_eq(dml_backend_find("cpu"), &dml_backend_cpu);
	ck_assert_str_eq(dml_backend_cpu.name, "cpu");
	ck_assert(dml_backend_cpu.unified);
	ck_assert_ptr_null(dml_backend_find("tpu"));
	ck_assert_ptr_null(dml_backend_find(""));
	ck_assert_ptr_null(dml_backend_find("CPU"));
	for (size_t i = 0; dml_backend_names[i]; i++) {
		ck_assert_ptr_nonnull(dml_backend_find(dml_backend_names[i]));
		cpu += strcmp(dml_backend_names[i], "cpu") == 0;
		cuda += strcmp(dml_backend_names[i], "cuda") == 0;
	}
	ck_assert_int_eq(cpu, 1);
#ifdef HAVE_CUDA
	ck_assert_int_eq(cuda, 1);
	ck_assert_ptr_eq(dml_backend_find("cuda"), &dml_backend_cuda);
	ck_assert_str_eq(dml_backend_cuda.name, "cuda");
	ck_assert(!dml_backend_cuda.unified);
#else
	ck_assert_int_eq(cuda, 0);
	ck_assert_ptr_null(dml_backend_find("cuda"));
#endif
}
END_TEST

/* open() works, or says why not without crashing, hanging or leaving a ctx. */
START_TEST(test_cuda_open)
{
	const struct dml_backend_ops *be = dml_backend_find("cuda");
	struct dml_backend_conf conf = { 0, 0 };
	char err[256] = "";
	void *ctx = (void *)1;
	int rc;

	if (!be) {
		say("SKIP: cuda_open: built without CUDA");
		return;
	}
	rc = be->open(&conf, &ctx, err, sizeof(err));
	if (rc == 0) {
		ck_assert_ptr_nonnull(ctx);
		ck_assert_str_eq(be->error(ctx), "");
		be->close(ctx);
		say("cuda_open: device 0 opened");
	} else {
		ck_assert_int_eq(rc, DML_ENOTFOUND);
		ck_assert_ptr_null(ctx);
		ck_assert_msg(strstr(err, "cuda: no CUDA device (cudaGetDeviceCount: ") == err,
			      "%s", err);
		say("SKIP: cuda_open: no CUDA device (%s)", skip_reason(err));
	}
	/* A device that is not there, with or without any device. */
	for (int dev = -1; dev <= 1000; dev += 1001) {
		ctx = (void *)1;
		err[0] = 0;
		conf.device = dev;
		ck_assert_int_eq(be->open(&conf, &ctx, err, sizeof(err)), DML_ENOTFOUND);
		ck_assert_ptr_null(ctx);
		ck_assert_msg(strncmp(err, "cuda: no CUDA device", 20) == 0, "%s", err);
	}
	be->close(NULL);
}
END_TEST

START_TEST(test_cuda_fault)
{
	struct pair p;
	struct side *s = &p.cuda;
	int rc;

	/* The fault spoils the process's CUDA context for every later test. */
	if (getenv("CK_FORK") && strcmp(getenv("CK_FORK"), "no") == 0) {
		say("SKIP: cuda_fault: needs Check's fork mode");
		return;
	}
	if (!pair_open("cuda_fault", &p))
		return;
	/* Address 16 is never mapped: the kernel's first store faults. */
	ck_side(s, s->be->relu_grad(s->ctx, (float *)16, (const float *)16, 64, 64, 64));
	rc = s->be->sync(s->ctx);
	ck_assert_int_eq(rc, DML_EIO);
	/* "call: message"; the call may be the first one to see the fault. */
	ck_assert_msg(strncmp(s->be->error(s->ctx), "cuda", 4) == 0 &&
		      strstr(s->be->error(s->ctx), ": ") != NULL, "%s", s->be->error(s->ctx));
	say("cuda_fault: sync: %s", s->be->error(s->ctx));
	pair_close(&p);
}
END_TEST

/* ---- one mlp step on each backend ------------------------------------------ */

/* dim 64, one hidden layer of 32, 4 classes, batches of 64, synthetic data. */
struct mlp_spec {
	Dml__JobSpec job;
	Dml__TableSpec t[2];
	Dml__TableSpec *tp[2];
};

static void mlp_spec_init(struct mlp_spec *s)
{
	static const uint32_t keys[] = { 32, 4 }, width[] = { 64 + 1, 32 + 1 };

	dml__job_spec__init(&s->job);
	s->job.name = "parity";
	s->job.app = "mlp";
	s->job.data = "synthetic";
	s->job.examples = 1000;
	s->job.dim = 64;
	s->job.hidden = "32";
	s->job.batch_size = 64;
	s->job.seed = 17;
	/* A stop condition: the job check the app makes wants one. */
	s->job.max_clocks = 1;
	for (uint32_t i = 0; i < 2; i++) {
		dml__table_spec__init(&s->t[i]);
		s->t[i].id = i;
		s->t[i].dense = 1;
		s->t[i].keys = keys[i];
		s->t[i].width = width[i];
		s->t[i].init = "uniform";
		s->t[i].init_scale = 0.1;
		s->t[i].optimizer = "sgd";
		s->t[i].lr = 0.1;
		s->tp[i] = &s->t[i];
	}
	s->job.n_tables = 2;
	s->job.tables = s->tp;
}

struct mlp_result {
	struct dml_app_step step;
	double accuracy;
	float *grads[MAX_TABLES];
	size_t sizes[MAX_TABLES];
};

/* Make the app on s, one step and one evaluation from params; what came out. */
static void mlp_run(struct side *s, const struct mlp_spec *spec, float *const *params,
		    struct mlp_result *r)
{
	const struct dml_app *app = &dml_app_mlp;
	struct dml_app_env env = { s->be->name, s->be, s->ctx };
	struct app_test_io f;
	struct dml_app_io io;
	const uint32_t part = 0;
	char err[256] = "";
	void *state = NULL;

	memset(r, 0, sizeof(*r));
	ck_assert_msg(app->create(&spec->job, &env, &state, err, sizeof(err)) == 0, "%s: %s",
		      s->be->name, err);
	app_test_io_init(&f, app, state, &io);
	ck_assert_uint_eq(f.nt, 2);
	for (size_t i = 0; i < f.nt; i++) {
		ck_assert(f.t[i].id == spec->t[i].id && f.t[i].dense);
		ck_assert_uint_eq(f.t[i].keys, spec->t[i].keys);
		ck_assert_uint_eq(f.t[i].width, spec->t[i].width);
		r->sizes[i] = (size_t)f.t[i].keys * f.t[i].width;
		f.params[i] = params[i];
		f.grads[i] = r->grads[i] = calloc(r->sizes[i], sizeof(float));
		ck_assert_ptr_nonnull(r->grads[i]);
	}
	ck_assert_msg(app->set_partitions(state, &part, 1, 1, err, sizeof(err)) == 0, "%s",
		      err);
	ck_assert_msg(app->step(state, &io, &r->step, err, sizeof(err)) == 0, "%s: %s",
		      s->be->name, err);
	for (size_t i = 0; i < f.nt; i++)
		ck_assert_int_eq(f.table_pushes[i], 1);
	ck_assert_msg(app->evaluate(state, &io, &r->accuracy, err, sizeof(err)) == 0,
		      "%s: %s", s->be->name, err);
	app->destroy(state);
}

START_TEST(test_mlp_step)
{
	struct mlp_spec spec;
	struct mlp_result a, b;
	float *params[2];
	struct pair p;
	float la, lb;

	if (!pair_open("mlp_step", &p))
		return;
	mlp_spec_init(&spec);
	for (size_t i = 0; i < 2; i++)
		params[i] = rnd_array((size_t)spec.t[i].keys * spec.t[i].width, -0.3f, 0.3f);
	mlp_run(&p.cpu, &spec, params, &a);
	mlp_run(&p.cuda, &spec, params, &b);
	ck_assert_uint_eq(a.step.examples, 64);
	ck_assert_uint_eq(b.step.examples, 64);
	la = (float)a.step.loss;
	lb = (float)b.step.loss;
	ck_assert(isfinite(la) && la > 0);
	say("mlp_step: loss %.6f (cpu) %.6f (cuda), accuracy %.4f (cpu) %.4f (cuda)",
	    a.step.loss, b.step.loss, a.accuracy, b.accuracy);
	expect_close("mlp step loss", &la, &lb, 1);
	expect_close("mlp step table 0 gradient (32 x 65)", a.grads[0], b.grads[0],
		     a.sizes[0]);
	expect_close("mlp step table 1 gradient (4 x 33)", a.grads[1], b.grads[1],
		     a.sizes[1]);
	/* Accuracy over the first 1000 records: two near-ties may go either way. */
	ck_assert_msg(fabs(a.accuracy - b.accuracy) <= 2.0 / 1000, "accuracy %g vs %g",
		      a.accuracy, b.accuracy);
	for (size_t i = 0; i < 2; i++) {
		/* A gradient of all zeros would compare equal and prove nothing. */
		double norm = 0;

		for (size_t j = 0; j < a.sizes[i]; j++)
			norm += fabs(a.grads[i][j]);
		ck_assert_msg(norm > 1e-3, "table %zu: gradient is zero", i);
		free(a.grads[i]);
		free(b.grads[i]);
		free(params[i]);
	}
	pair_close(&p);
}
END_TEST

int main(int argc, char **argv)
{
	Suite *s;
	TCase *tc;

	(void)argc;
	dml_blas_kernels_choose(argv);
	s = suite_create("backend");
	tc = tcase_create("backend");
	tcase_set_timeout(tc, TEST_TIMEOUT_S);
	tcase_add_test(tc, test_registry);
	tcase_add_test(tc, test_blas_kernels);
	tcase_add_test(tc, test_cuda_open);
	check_backend_ops_tests(tc);
	tcase_add_test(tc, test_mlp_step);
	tcase_add_test(tc, test_cuda_fault);
	suite_add_tcase(s, tc);
	return dml_check_run(s);
}
