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

#include "app.h"
#include "job_conf.h"

/** The job in text (a job file's contents), which must parse; free it. */
Dml__JobSpec *app_test_spec(const char *text);

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

#endif
