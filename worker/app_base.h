/*
 * The glue that the apps reading records from a data text (mf, sparse_lr)
 * share: the head of their state, and the app.h callbacks that need no
 * more than it (set_partitions, walk, set_batch, step, drain,
 * data_examples). Each app keeps what is its own (the file reader, the
 * batch, the model) behind struct dml_app_base_ops.
 *
 * Must never: step past the records the walk holds, or open a data text
 * other than "synthetic" as anything but a file of the app's reader.
 */
#ifndef DML_WORKER_APP_BASE_H
#define DML_WORKER_APP_BASE_H

#include <stddef.h>
#include <stdint.h>

#include "worker/app.h"
#include "proto/dml.pb-c.h"
#include "worker/walk.h"

/**
 * A data set's records: synthetic ones (record i is the generator's record
 * base + i) or a file (base 0) that the app's reader holds. An app's data
 * set struct begins with it.
 */
struct dml_app_data {
	uint64_t n;
	uint64_t base;
};

/** What an app on the glue does itself; state is the app's. */
struct dml_app_base_ops {
	/**
	 * Read the file path into data set d (the app's struct it begins):
	 * 0 with d->n set, or a DML_E... code with why saying what failed.
	 */
	int (*load)(void *state, struct dml_app_data *d, const char *path, char *why,
		    size_t whylen);
	/** Make the batch of rows records of d. */
	int (*build)(void *state, const struct dml_app_data *d, const uint64_t *recs,
		     size_t rows, char *err, size_t errlen);
	/** Pull what the batch needs (waited for). */
	int (*pull)(void *state, struct dml_app_io *io, char *err, size_t errlen);
	/** Score the batch: its summed loss, or 0 when backward_push sums it. */
	double (*forward)(void *state);
	/** Wait for the pushes of the last step still in flight. */
	int (*land)(void *state, struct dml_app_io *io, char *err, size_t errlen);
	/**
	 * The batch's gradients and their pushes, left in flight; may set
	 * *loss (what forward returned) to the batch's summed loss.
	 */
	int (*backward_push)(void *state, struct dml_app_io *io, double *loss, char *err,
			     size_t errlen);
};

/** The head of the state of an app on the glue. */
struct dml_app_base {
	const char *name;          /* the app's, in errors */
	const struct dml_app_base_ops *ops;
	uint32_t batch;            /* examples per step */
	uint32_t norm;             /* the spec's batch_size: gradients are sums / norm */
	struct dml_walk walk;      /* the training records it walks */
	struct dml_app_data *train, *test; /* the app's data sets (their heads) */
	const struct dml_app_data *eval;   /* train or test: what evaluate scores */
	uint64_t eval_n;           /* its first records evaluate scores */
};

/**
 * The start of create: check spec (the job check, app rules included),
 * allocate size bytes of zeroed state that begins with struct
 * dml_app_base, and set its name, ops, walk key (spec seed ^ shuffle),
 * batch and norm. 0, DML_EINVAL or DML_ENOMEM (err says why, "app NAME: ");
 * *out is NULL on failure.
 */
int dml_app_base_new(const char *name, const struct dml_app_base_ops *ops,
		     const Dml__JobSpec *spec, size_t size, uint64_t shuffle,
		     struct dml_app_base **out, char *err, size_t errlen);

/**
 * Open the data sets b->train and b->test point to: spec data (synthetic:
 * spec examples records from 0) and test_data (synthetic: 10000 records
 * from test_base; "": none, and evaluate scores the first 10000 training
 * records). 0, DML_EINVAL or DML_ENOMEM (err says why).
 */
int dml_app_base_data(struct dml_app_base *b, const Dml__JobSpec *spec, uint64_t test_base,
		      char *err, size_t errlen);

/* app.h callbacks, for state that begins with struct dml_app_base. */
int dml_app_base_set_partitions(void *state, const uint32_t *parts, size_t n,
				uint32_t num_partitions, char *err, size_t errlen);
struct dml_walk *dml_app_base_walk(void *state);
int dml_app_base_set_batch(void *state, uint32_t batch, char *err, size_t errlen);
int dml_app_base_step(void *state, struct dml_app_io *io, struct dml_app_step *out, char *err,
		      size_t errlen);
int dml_app_base_drain(void *state, struct dml_app_io *io, char *err, size_t errlen);
uint64_t dml_app_base_data_examples(const void *state);

#endif
