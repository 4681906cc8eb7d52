/*
 * What the files of check_model share: the jobs, the test folder's paths,
 * the store and io helpers (check_model.c), and the model file tests
 * (check_model_file.c) for the suite's cases.
 */
#ifndef DML_TEST_CHECK_MODEL_H
#define DML_TEST_CHECK_MODEL_H

#include <check.h>
#include <stddef.h>
#include <stdint.h>

#include "worker/app.h"
#include "worker/local_store.h"
#include "test/tmpdir.h"

#define LSQ_DIM 16
#define LSQ_SEED 7
/* The lsq data's noise has stddev 0.1: the best model's loss is about 0.01. */
#define NOISE_FLOOR 0.01

#define PATH_LEN DML_TEST_PATH_MAX

/* Table 0: dense, 8 keys of width 1, sgd; table 5: sparse, width 3, adam. */
extern const char store_job[];
/* An lsq job of 16 features; w starts at zero. */
extern const char lsq_job[];

/* The path of name in the test folder, written into path (PATH_LEN bytes). */
const char *path_of(char *path, const char *name);
/* The spec of a job text that must parse. */
Dml__JobSpec *spec_parse(const char *text);
/* The local store of spec, which must be made. */
struct dml_local_store *store_make(const Dml__JobSpec *spec);
/* A push or pull through io, waited for: 0 or its error. */
int push_range(struct dml_app_io *io, uint32_t t, uint64_t b, uint64_t e,
	       const float *g);
int pull_keys(struct dml_app_io *io, uint32_t t, const uint64_t *k, size_t n,
	      float *out);
int push_keys(struct dml_app_io *io, uint32_t t, const uint64_t *k, size_t n,
	      const float *g);

/* Add the model file tests to file and the dml-worker --eval tests to eval. */
void check_model_file_tests(TCase *file, TCase *eval);

#endif
