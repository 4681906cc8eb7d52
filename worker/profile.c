/*
 * The worker's profile (profile.h): machine facts from sysconf, an sgemm
 * timing, and an app's step timed against the local parameter store
 * (local_store.h: the job's real tables, pushes applied by the job's
 * optimizer): what the step costs here, network aside.
 *
 * Must never: run long or touch the network.
 */
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "proto/dml_error.h"
#include "proto/job_spec.h"
#include "worker/local_store.h"
#include "proto/log.h"
#include "worker/profile.h"
#include "proto/util.h"

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

/* Steps of a made app through io, timed; *rate gets examples per second. */
static int time_steps(const struct dml_app *app, void *state, struct dml_app_io *io,
		      double seconds, double *rate, char *err, size_t errlen)
{
	struct dml_app_step st;
	uint64_t t0, runs = 0, examples = 0;
	double elapsed;
	int rc;

	if ((rc = app->step(state, io, &st, err, errlen)) != 0)
		return rc;
	t0 = dml_now_ns();
	do {
		if ((rc = app->step(state, io, &st, err, errlen)) != 0)
			return rc;
		examples += st.examples;
		runs++;
		elapsed = since(t0);
	} while (runs < MIN_RUNS || elapsed < seconds);
	*rate = (double)examples / elapsed;
	return app->drain(state, io, err, errlen);
}

int dml_profile_app(const struct dml_app *app, const struct dml_app_env *env, double seconds,
		    double *examples_per_s, char *err, size_t errlen)
{
	static const uint32_t all[] = { 0 };
	Dml__JobSpec *spec = NULL;
	struct dml_local_store *store = NULL;
	struct dml_app_io io;
	void *state = NULL;
	int rc;

	*examples_per_s = 0;
	rc = dml_job_file_parse_string(app->name, app->profile_job, &spec, err, errlen);
	if (rc == 0)
		rc = dml_local_store_new(spec, &store, err, errlen);
	if (rc == 0)
		rc = app->create(spec, env, &state, err, errlen);
	if (rc == 0)
		rc = app->set_partitions(state, all, 1, 1, err, errlen);
	if (rc == 0) {
		dml_local_store_io(store, &io);
		rc = time_steps(app, state, &io, seconds, examples_per_s, err, errlen);
	}
	app->destroy(state);
	dml_local_store_free(store);
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
