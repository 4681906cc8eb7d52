/*
 * An in-process stand-in for the parameter servers: a job's tables
 * (store/table.h, built from the JobSpec's TableSpecs with the job's
 * initializer and optimizer; dense tables over their whole key range,
 * sparse ones creating rows on first use) behind a struct dml_app_io whose
 * push applies the optimizer and whose pull copies, just as dml-server
 * does. dml-bench's single-process run, `dml-worker --eval`, the worker's
 * profile and tests train and evaluate through it without a network.
 *
 * Requests complete when they are made: a handle's wait returns the stored
 * result of its request. Errors are libdml's (dml.h): DML_ENOTFOUND for a
 * table the job lacks, DML_EINVAL for a range request on a sparse table or
 * a missing buffer, DML_ERANGE for keys outside a dense table (from the
 * request call for a range, from the wait for a key list, as a server's
 * answer would come).
 *
 * Single-threaded: one store, one caller at a time.
 *
 * Must never: apply a push or answer a pull differently from dml-server,
 * or accept a request that libdml would refuse.
 */
#ifndef DML_WORKER_LOCAL_STORE_H
#define DML_WORKER_LOCAL_STORE_H

#include <stddef.h>
#include <stdint.h>

#include "worker/app.h"
#include "proto/dml.pb-c.h"
#include "worker/model_file.h"

struct dml_local_store;

/**
 * Make the tables of spec (a copy of spec is kept). Returns 0, DML_EINVAL
 * (a table the storage refuses, or an id used twice: err names the table)
 * or DML_ENOMEM (err names the table). *out is NULL on failure.
 */
int dml_local_store_new(const Dml__JobSpec *spec, struct dml_local_store **out,
			char *err, size_t errlen);

/** Free the store and its tables; NULL is fine. */
void dml_local_store_free(struct dml_local_store *s);

/**
 * Point io at the store (wait_ns starts at 0). The io is valid while the
 * store lives; handles not waited for are freed with the store.
 */
void dml_local_store_io(struct dml_local_store *s, struct dml_app_io *io);

/**
 * Copy a dense table's values out: keys * width floats, row-major.
 * 0, DML_ENOTFOUND (no such table) or DML_EINVAL (sparse, or NULL).
 */
int dml_local_store_get(struct dml_local_store *s, uint32_t table, float *out);

/**
 * Overwrite a dense table's values (keys * width floats). The rows'
 * optimizer state starts again from zero, as a fresh row's. Errors as
 * dml_local_store_get, DML_ENOMEM (nothing changed).
 */
int dml_local_store_set(struct dml_local_store *s, uint32_t table, const float *vals);

/**
 * Set the rows of n keys (vals: n * width floats, row i for keys[i]) of a
 * table of either kind; a sparse table creates the missing rows. The
 * rows' optimizer state starts from zero. 0, DML_ENOTFOUND, DML_EINVAL
 * (NULL), DML_ERANGE (a key outside a dense table: nothing changed) or
 * DML_ENOMEM (a sparse table may then hold some of the rows).
 */
int dml_local_store_set_keys(struct dml_local_store *s, uint32_t table,
			     const uint64_t *keys, size_t n, const float *vals);

/**
 * Set every table of the store from model m (read with dml_model_read):
 * each of m's tables must be a table of the store, of the same kind and
 * width, and a dense one must hold all its keys. Returns 0, DML_EINVAL
 * (err: "model table 3: ...") or DML_ENOMEM.
 */
int dml_local_store_load_model(struct dml_local_store *s, const struct dml_model *m,
			       char *err, size_t errlen);

/**
 * The store as a model (for dml_model_write): a copy of its spec and of
 * every table's rows, sparse rows in the order they were created. Free
 * with dml_model_free. 0 or DML_ENOMEM (*m is then empty).
 */
int dml_local_store_save_model(const struct dml_local_store *s, struct dml_model *m);

#endif
