/*
 * Model files: a trained model as one file, written by `dmlctl export`,
 * read by `dml-worker --eval`. The job's spec travels with the
 * tables, so a model says how it was made and what app evaluates it.
 *
 * Layout, little-endian:
 *
 *   "DMLMODEL"     8 bytes of magic
 *   u32 version    1
 *   u32 spec_len   then spec_len bytes: the JobSpec, protobuf
 *   u32 ntables    then per table:
 *     u32 id, u32 width, u8 dense (0 or 1), u64 rows,
 *     sparse only: rows u64 keys; then rows * width f32 values
 *   u32 crc32      zlib's crc32 of every byte before it
 *
 * A model is consistent when its spec passes dml_job_spec_check and its
 * tables are exactly the spec's (each id once, the same kind and width,
 * a dense table with all its keys, a sparse one with distinct keys).
 *
 * Must never: trust a length in a file (each is checked against the bytes
 * left before anything is allocated), crash or allocate without bound on
 * any file content, or leave a half-written file under the target name.
 */
#ifndef DML_WORKER_MODEL_FILE_H
#define DML_WORKER_MODEL_FILE_H

#include <stddef.h>
#include <stdint.h>

#include "proto/dml.pb-c.h"

#define DML_MODEL_MAGIC "DMLMODEL"
#define DML_MODEL_VERSION 1

/** One table of a model. */
struct dml_model_table {
	uint32_t id, width;
	int dense;
	uint64_t rows;              /* dense: the table's keys 0..rows-1 */
	uint64_t *keys;             /* sparse only: rows keys; NULL for dense */
	float *values;              /* rows * width floats, row-major */
};

/** A model: owns its spec (dml_job_spec_free) and tables (free()). */
struct dml_model {
	Dml__JobSpec *spec;
	struct dml_model_table *tables;
	size_t ntables;
};

/**
 * Check that m is consistent (see above). 0 or DML_EINVAL with the reason
 * in err ("spec: ...", "table 3: width 2, the spec says 1", ...).
 */
int dml_model_check(const struct dml_model *m, char *err, size_t errlen);

/**
 * Write m to path: to "path.tmp" first, synced, then renamed over path.
 * Returns 0, DML_EINVAL (m is not consistent: err says why) or DML_EIO
 * (err: "path: reason"; no temporary file is left).
 */
int dml_model_write(const char *path, const struct dml_model *m, char *err, size_t errlen);

/**
 * Read a model file into *out (free with dml_model_free). Returns 0,
 * DML_EIO (cannot open or read it), DML_ECONF (the content is not a
 * consistent model: bad magic, version N not supported, truncated, crc
 * mismatch, trailing bytes, table 3 width 0, a spec that does not decode
 * or fails its check, ...) or DML_ENOMEM; err holds "path: reason" and
 * *out is empty on failure.
 */
int dml_model_read(const char *path, struct dml_model *out, char *err, size_t errlen);

/** Free what a model holds and empty it; NULL is fine. */
void dml_model_free(struct dml_model *m);

#endif
