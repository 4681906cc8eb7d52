/*
 * The glue the apps reading records share (app_base.h).
 *
 * Must never: step past the records the walk holds.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "worker/app_base.h"
#include "worker/app_util.h"
#include "proto/dml_error.h"

/* test_data = "": evaluate on the first min(EVAL_TRAIN_MAX, N) records. */
#define EVAL_TRAIN_MAX 10000
/* test_data = synthetic: this many records of their own range. */
#define SYNTH_TEST_EXAMPLES 10000

int dml_app_base_new(const char *name, const struct dml_app_base_ops *ops,
		     const Dml__JobSpec *spec, size_t size, uint64_t shuffle,
		     struct dml_app_base **out, char *err, size_t errlen)
{
	struct dml_app_base *a;
	int rc;

	*out = NULL;
	if (!spec)
		return dml_app_fail(err, errlen, DML_EINVAL, name, "no job spec");
	/* The rules live in the job check (proto/job_spec_check.c, check_app_NAME). */
	if ((rc = dml_app_spec_check(name, spec, err, errlen)) != 0)
		return rc;
	a = calloc(1, size);
	if (!a)
		return dml_app_fail(err, errlen, DML_ENOMEM, name, "out of memory");
	a->name = name;
	a->ops = ops;
	a->walk.key = spec->seed ^ shuffle;
	a->batch = a->norm = spec->batch_size;
	*out = a;
	return 0;
}

/* The records of a data text: synthetic (n records from base) or a file. */
static int data_open(struct dml_app_base *a, struct dml_app_data *d, const char *text,
		     uint64_t base, uint64_t n, char *err, size_t errlen)
{
	char why[4400];
	int rc;

	if (strcmp(text, "synthetic") == 0) {
		d->n = n;
		d->base = base;
		return 0;
	}
	rc = a->ops->load(a, d, text, why, sizeof(why));
	if (rc)
		return dml_app_fail(err, errlen, rc == DML_ENOMEM ? DML_ENOMEM : DML_EINVAL,
				    a->name, "%s", why);
	return 0;
}

int dml_app_base_data(struct dml_app_base *a, const Dml__JobSpec *spec, uint64_t test_base,
		      char *err, size_t errlen)
{
	const char *test = spec->test_data ? spec->test_data : "";
	const char *data = spec->data ? spec->data : "";
	int rc;

	if ((rc = data_open(a, a->train, data, 0, spec->examples, err, errlen)) != 0)
		return rc;
	a->eval = a->train;
	a->eval_n = a->train->n < EVAL_TRAIN_MAX ? a->train->n : EVAL_TRAIN_MAX;
	if (test[0]) {
		rc = data_open(a, a->test, test, test_base, SYNTH_TEST_EXAMPLES, err, errlen);
		if (rc)
			return rc;
		a->eval = a->test;
		a->eval_n = a->test->n;
	}
	return 0;
}

int dml_app_base_set_partitions(void *state, const uint32_t *parts, size_t n,
				uint32_t num_partitions, char *err, size_t errlen)
{
	struct dml_app_base *a = state;

	return dml_walk_set(&a->walk, a->name, a->train->n, parts, n, num_partitions, err,
			    errlen);
}

struct dml_walk *dml_app_base_walk(void *state)
{
	return &((struct dml_app_base *)state)->walk;
}

/* The apps' batch buffers grow as a batch needs. */
int dml_app_base_set_batch(void *state, uint32_t batch, char *err, size_t errlen)
{
	struct dml_app_base *a = state;

	(void)err;
	(void)errlen;
	a->batch = batch;
	return 0;
}

int dml_app_base_step(void *state, struct dml_app_io *io, struct dml_app_step *out, char *err,
		      size_t errlen)
{
	struct dml_app_base *a = state;
	const struct dml_app_base_ops *ops = a->ops;
	size_t rows = a->walk.total ? a->batch : 0;
	const uint64_t *recs = dml_walk_batch(&a->walk, rows);
	double loss;
	int rc;

	out->examples = 0;
	out->loss = NAN;
	if (!recs)
		return dml_app_fail(err, errlen, DML_ENOMEM, a->name, "out of memory for a batch");
	rc = ops->build(a, a->train, recs, rows, err, errlen);
	/* Even without data, pull: it keeps this worker within the staleness
	 * bound instead of racing through its clocks. */
	if (rc || (rc = ops->pull(a, io, err, errlen)) != 0 || !rows)
		return rc;
	dml_walk_advance(&a->walk);
	loss = ops->forward(a);
	if ((rc = ops->land(a, io, err, errlen)) != 0 ||
	    (rc = ops->backward_push(a, io, &loss, err, errlen)) != 0)
		return rc;
	out->examples = rows;
	out->loss = loss / (double)rows;
	return 0;
}

int dml_app_base_drain(void *state, struct dml_app_io *io, char *err, size_t errlen)
{
	struct dml_app_base *a = state;

	return a->ops->land(a, io, err, errlen);
}

uint64_t dml_app_base_data_examples(const void *state)
{
	return ((const struct dml_app_base *)state)->train->n;
}
