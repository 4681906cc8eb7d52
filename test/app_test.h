/*
 * app_test.h - what the unit tests of apps share: a job spec from job-file
 * text, and an io that stands in for the servers, serving fixed dense
 * tables to pulls and keeping what is pushed.
 *
 * Everything here asserts (Check): a job text that does not parse, or a
 * request outside the app's tables, fails the test that made it. Nothing
 * here frees or owns the buffers a test points the io at.
 */
#ifndef DML_TEST_APP_TEST_H
#define DML_TEST_APP_TEST_H

#include <stddef.h>
#include <stdint.h>

#include "worker/app.h"
#include "proto/job_spec.h"

/** The job in text (a job file's contents), which must parse; free it. */
Dml__JobSpec *app_test_spec(const char *text);

/** The cpu backend without a context: what the apps' tests compute on. */
extern const struct dml_app_env app_test_cpu;

/**
 * app made from spec on env, training on all of its data (one partition);
 * create and set_partitions must succeed. Destroy it with app->destroy.
 */
void *app_test_make(const struct dml_app *app, const Dml__JobSpec *spec,
		    const struct dml_app_env *env);

/**
 * app->create must refuse spec on env (which may be NULL) with code,
 * return no state, and say "app NAME: ..." with why in it.
 */
void app_test_refused(const struct dml_app *app, const Dml__JobSpec *spec,
		      const struct dml_app_env *env, int code, const char *why);

/** The most tables an app_test_io stands in for. */
#define APP_TEST_MAX_TABLES 8

/*
 * Pulls of a dense table's key range copy from params[i], pushes copy into
 * grads[i] (i: the table's index in the app's list; both the caller's
 * buffers of keys x width floats); sparse pulls and pushes are refused with
 * DML_EINVAL. Handles count up from 1; waiting for one not given out is
 * DML_EINVAL.
 */
struct app_test_io {
	const struct dml_app_table *t; /* the app's tables */
	size_t nt;
	float *params[APP_TEST_MAX_TABLES];
	float *grads[APP_TEST_MAX_TABLES];
	int pulls, pushes;                     /* requests, every table */
	int table_pushes[APP_TEST_MAX_TABLES]; /* by table index */
	dml_handle_t next;                     /* the last handle given out */
};

/**
 * Stand in for the tables of app's state (made by app->create) and make io
 * go through f; the test then points params and grads at its buffers.
 */
void app_test_io_init(struct app_test_io *f, const struct dml_app *app, void *state,
		      struct dml_app_io *io);

/*
 * An io over sparse tables 0..ntables-1 whose keys lie below ids: pulls copy
 * rows of p[t] (ids x width[t] floats, the test's to fill), pushes are kept
 * (the last one of each table, keys and values) and stay in flight until
 * waited for. Keys must come sorted and distinct, and with bias_last the
 * largest key (sparse_lr's bias, ids - 1) must be among them. Bit t of
 * fail_pull or fail_push makes that request on table t fail when it is
 * made; fail_push_wait makes waiting for any push fail.
 */
#define APP_TEST_SPARSE_TABLES 2
#define APP_TEST_SPARSE_MAX_REQ 4096
struct app_test_sparse {
	size_t ntables;
	uint64_t ids;
	uint32_t width[APP_TEST_SPARSE_TABLES];
	float *p[APP_TEST_SPARSE_TABLES];
	uint64_t *pushed_keys[APP_TEST_SPARSE_TABLES];  /* ids each */
	float *pushed[APP_TEST_SPARSE_TABLES];          /* ids x width */
	size_t npushed[APP_TEST_SPARSE_TABLES], npulled[APP_TEST_SPARSE_TABLES];
	int pulls, pushes, in_flight;
	unsigned fail_pull, fail_push;
	int fail_push_wait, bias_last;
	char is_push[APP_TEST_SPARSE_MAX_REQ];
	dml_handle_t next;
};

/** ntables tables of ids keys, width floats a row, all zero. */
void app_test_sparse_init(struct app_test_sparse *t, size_t ntables, uint64_t ids,
			  uint32_t width);
void app_test_sparse_free(struct app_test_sparse *t);
/** An io through t. */
struct dml_app_io app_test_sparse_io(struct app_test_sparse *t);

/**
 * One step of app that must succeed on rows examples, leaving at most one
 * push a table in flight, then a drain that must land them: the step's loss.
 */
double app_test_sparse_step(const struct dml_app *app, void *state, struct app_test_sparse *t,
			    uint64_t rows);
/** An evaluation that must succeed and leave nothing in flight: its value. */
double app_test_sparse_evaluate(const struct dml_app *app, void *state,
				struct app_test_sparse *t);

#endif
