/*
 * The worker's profile (profile.h): machine facts from sysconf, an sgemm
 * timing, and an app's step timed against a local stand-in for the servers
 * (pulls give zeros, pushes are dropped): what the step costs here, network
 * aside.
 *
 * Must never: run long or touch the network.
 */
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dml_error.h"
#include "job_conf.h"
#include "log.h"
#include "profile.h"
#include "util.h"

/* sgemm of two SGEMM_N x SGEMM_N matrices: 2 N^3 flops, 33.5 M at 256. */
#define SGEMM_N 256
/* At least this many timed runs, however long they take. */
#define MIN_RUNS 3

void dml_profile_machine(const struct dml_app_env *env, struct dml_profile *p)
{
	long cores = sysconf(_SC_NPROCESSORS_ONLN);
	long pages = sysconf(_SC_PHYS_PAGES);
	long page_size = sysconf(_SC_PAGESIZE);

	memset(p, 0, sizeof(*p));
	snprintf(p->device, sizeof(p->device), "%s",
		 env && env->backend ? env->backend : "cpu");
	p->cores = cores > 0 ? (uint32_t)cores : 0;
	if (pages > 0 && page_size > 0)
		p->memory_bytes = (uint64_t)pages * (uint64_t)page_size;
}

/* Seconds since t0 (a dml_now_ns() value). */
static double since(uint64_t t0)
{
	return (double)(dml_now_ns() - t0) / 1e9;
}

int dml_profile_sgemm(double seconds, double *gflops)
{
	const size_t n = SGEMM_N;
	float *a = malloc(n * n * sizeof(float));
	float *b = malloc(n * n * sizeof(float));
	float *c = malloc(n * n * sizeof(float));
	uint64_t t0, runs = 0;
	double elapsed;

	*gflops = 0;
	if (!a || !b || !c) {
		free(a);
		free(b);
		free(c);
		return DML_ENOMEM;
	}
	for (size_t i = 0; i < n * n; i++) {
		a[i] = (float)(i % 7) * 0.25f - 0.75f;
		b[i] = (float)(i % 5) * 0.5f - 1.0f;
	}
	/* The first run pays for OpenBLAS's thread start and cold caches. */
	cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)n, (int)n, (int)n, 1.0f,
		    a, (int)n, b, (int)n, 0.0f, c, (int)n);
	t0 = dml_now_ns();
	do {
		cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)n, (int)n, (int)n,
			    1.0f, a, (int)n, b, (int)n, 0.0f, c, (int)n);
		runs++;
		elapsed = since(t0);
	} while (runs < MIN_RUNS || elapsed < seconds);
	*gflops = 2.0 * (double)n * (double)n * (double)n * (double)runs / elapsed / 1e9;
	free(a);
	free(b);
	free(c);
	return 0;
}

/* ---- a local stand-in for the servers ------------------------------------ */

struct local {
	const struct dml_app_table *tables;
	size_t ntables;
};

/* Floats per key of a table, 0 if the app did not name it. */
static uint32_t local_width(const struct local *l, uint32_t table)
{
	for (size_t i = 0; i < l->ntables; i++)
		if (l->tables[i].id == table)
			return l->tables[i].width;
	return 0;
}

static int local_zeros(void *arg, uint32_t table, uint64_t rows, float *out,
		       dml_handle_t *h)
{
	uint32_t w = local_width(arg, table);

	if (!w)
		return DML_ENOTFOUND;
	memset(out, 0, (size_t)rows * w * sizeof(float));
	*h = 1;
	return 0;
}

static int local_drop(void *arg, uint32_t table, dml_handle_t *h)
{
	if (!local_width(arg, table))
		return DML_ENOTFOUND;
	*h = 1;
	return 0;
}

static int local_pull_range(void *arg, uint32_t table, uint64_t begin, uint64_t end,
			    float *out, dml_handle_t *h)
{
	return local_zeros(arg, table, end - begin, out, h);
}

static int local_push_range(void *arg, uint32_t table, uint64_t begin, uint64_t end,
			    const float *vals, dml_handle_t *h)
{
	return local_drop(arg, table, h);
}

static int local_pull(void *arg, uint32_t table, const uint64_t *keys, size_t n, float *out,
		      dml_handle_t *h)
{
	return local_zeros(arg, table, n, out, h);
}

static int local_push(void *arg, uint32_t table, const uint64_t *keys, size_t n,
		      const float *vals, dml_handle_t *h)
{
	return local_drop(arg, table, h);
}

static int local_wait(void *arg, dml_handle_t h)
{
	return 0;
}

static const struct dml_app_io_ops local_ops = {
	.pull_range = local_pull_range,
	.push_range = local_push_range,
	.pull = local_pull,
	.push = local_push,
	.wait = local_wait,
};

/* Steps of a made app, timed; *rate gets examples per second. */
static int time_steps(const struct dml_app *app, void *state, double seconds, double *rate,
		      char *err, size_t errlen)
{
	struct local l;
	struct dml_app_io io = { &local_ops, &l, 0 };
	struct dml_app_step st;
	uint64_t t0, runs = 0, examples = 0;
	double elapsed;
	int rc;

	l.ntables = app->tables(state, &l.tables);
	if ((rc = app->step(state, &io, &st, err, errlen)) != 0)
		return rc;
	t0 = dml_now_ns();
	do {
		if ((rc = app->step(state, &io, &st, err, errlen)) != 0)
			return rc;
		examples += st.examples;
		runs++;
		elapsed = since(t0);
	} while (runs < MIN_RUNS || elapsed < seconds);
	*rate = (double)examples / elapsed;
	return 0;
}

int dml_profile_app(const struct dml_app *app, const struct dml_app_env *env, double seconds,
		    double *examples_per_s, char *err, size_t errlen)
{
	static const uint32_t all[] = { 0 };
	Dml__JobSpec *spec = NULL;
	void *state = NULL;
	int rc;

	*examples_per_s = 0;
	rc = dml_job_file_parse_string(app->name, app->profile_job, &spec, err, errlen);
	if (rc == 0)
		rc = app->create(spec, env, &state, err, errlen);
	if (rc == 0)
		rc = app->set_partitions(state, all, 1, 1, err, errlen);
	if (rc == 0)
		rc = time_steps(app, state, seconds, examples_per_s, err, errlen);
	app->destroy(state);
	dml_job_spec_free(spec);
	return rc;
}

void dml_profile_measure(const struct dml_app *app, const struct dml_app_env *env,
			 int measure, struct dml_profile *p)
{
	char err[256];

	dml_profile_machine(env, p);
	if (!measure)
		return;
	if (dml_profile_sgemm(DML_PROFILE_SECONDS, &p->gflops) != 0)
		dml_warn("profile: sgemm not measured (out of memory)");
	if (dml_profile_app(app, env, DML_PROFILE_SECONDS, &p->examples_per_s, err,
			    sizeof(err)) != 0)
		dml_warn("profile: app %s not measured: %s", app->name, err);
}
