/*
 * What the files of check_mlp share (check_mlp_util.c), and the tests
 * each file adds to the suite's cases (check_mlp.c has the suite).
 */
#ifndef DML_TEST_CHECK_MLP_H
#define DML_TEST_CHECK_MLP_H

#include <check.h>
#include <stddef.h>

#include "worker/app.h"

#define TABLES (DML_MLP_HIDDEN_MAX + 1)

/*
 * Pulls serve w[table]; pushes are kept in g[table] (and, with lr > 0,
 * applied as plain SGD). Handles are 1 + table for pulls, 101 + table for
 * pushes; the requests in flight are counted.
 */
struct tio {
	float *w[TABLES], *g[TABLES];
	size_t len[TABLES];
	size_t ntables;
	float lr;
	int pulls, pushes, in_flight;
	int fail_pull, fail_push, fail_wait;   /* a handle's table + 1, or 0 */
	const float *pushed_from[TABLES];
};

/* The recording io's calls; arg is a struct tio. */
extern const struct dml_app_io_ops tio_ops;

/* Uniform in [lo, hi), from a fixed sequence (splitmix64). */
float rnd(float lo, float hi);
/* n floats, never NULL. */
float *floats(size_t n);
/* A cpu backend context on one thread (results do not depend on timing). */
void *cpu_open(void);
/*
 * An mlp job: sizes[0] = dim, then the hidden layers, then the classes (n
 * sizes); a table per layer as the app wants it; extra job lines after.
 */
Dml__JobSpec *spec_make(const uint32_t *sizes, size_t n, const char *data,
			const char *extra);
/* The io's tables for the app's, zeroed; and their release. */
void tio_init(struct tio *t, const struct dml_app *app, const void *state);
void tio_free(struct tio *t);
/*
 * One step that must succeed, leaving no pull in flight and at most its
 * pushes (one per table), then drained; its loss.
 */
double step_ok(const struct dml_app *app, void *state, struct tio *t, size_t rows);
/* An evaluation that must succeed; its value. */
double evaluate_ok(const struct dml_app *app, void *state, struct tio *t);
/* Every parameter uniform in [-scale, scale). */
void fill_params(struct tio *t, float scale);
/* The mlp refuses spec on env with code and a reason containing why. */
void expect_refused(const Dml__JobSpec *spec, const struct dml_app_env *env,
		    int code, const char *why);

/* The backend tests (check_mlp_backend.c) and the data tests (check_mlp_data.c). */
void check_mlp_backend_tests(TCase *tc);
void check_mlp_data_tests(TCase *tc);

#endif
