/*
 * What a worker measures about itself at start, for the scheduler to weigh
 * workers by (Profile in dml.proto): the device, cores and memory of the
 * machine, a short cblas_sgemm run for GFLOP/s, and the examples per second
 * of an app's step on a synthetic batch, all without any network.
 *
 * Must never: take long (each measurement runs about 50 ms), or fail the
 * worker's start because a measurement failed (it is then reported as 0).
 */
#ifndef DML_WORKER_PROFILE_H
#define DML_WORKER_PROFILE_H

#include <stddef.h>
#include <stdint.h>

#include "worker/app.h"

/* How long each timed measurement runs, in seconds. */
#define DML_PROFILE_SECONDS 0.05

struct dml_profile {
	char device[64];            /* "cpu" */
	uint32_t cores;             /* online processors, 0 if unknown */
	uint64_t memory_bytes;      /* physical memory, 0 if unknown */
	double gflops;              /* measured sgemm rate, 0 if not measured */
	double examples_per_s;      /* measured app step rate, 0 if not measured */
};

/** Device, cores and memory; the rates are set to 0. */
void dml_profile_machine(const struct dml_app_env *env, struct dml_profile *p);

/**
 * Run single-precision matrix products for about `seconds` and give their
 * rate in GFLOP/s. 0 or DML_ENOMEM.
 */
int dml_profile_sgemm(double seconds, double *gflops);

/**
 * Run app's step on its profile job (app->profile_job) with a local stand-in
 * for the servers for about `seconds`, and give the examples trained per
 * second. Returns 0, or the app's error (err says why).
 */
int dml_profile_app(const struct dml_app *app, const struct dml_app_env *env, double seconds,
		    double *examples_per_s, char *err, size_t errlen);

/**
 * Everything above: machine, then (when measure is set) both rates. A
 * measurement that fails is logged and left at 0.
 */
void dml_profile_measure(const struct dml_app *app, const struct dml_app_env *env,
			 int measure, struct dml_profile *p);

#endif
