/*
 * What every app of dml-worker needs alike: the records a worker holds (its
 * data partitions as ranges of record indices) and the deterministic random
 * numbers that synthetic data, initial values and shuffling are made from,
 * so that every worker on every machine makes the same ones.
 *
 * Must never: allocate without bound on a request from a peer (the ranges
 * are at most one per partition, and partitions are bounded by the job
 * check), or give different numbers on different machines.
 */
#ifndef DML_WORKER_APP_UTIL_H
#define DML_WORKER_APP_UTIL_H

#include <stddef.h>
#include <stdint.h>

#include "proto/dml.pb-c.h"

/**
 * The job check (proto/job_spec_check.c: the scheduler's, app rules included) made by
 * an app on a spec it is given: 0, or DML_EINVAL with err starting "app
 * NAME: " as app.h wants.
 */
int dml_app_spec_check(const char *app, const Dml__JobSpec *spec, char *err, size_t errlen);

/**
 * Write "app APP: " and the printf-formatted reason into err (errlen bytes,
 * cut to fit) and return rc: how an app reports a refusal (app.h).
 */
int dml_app_fail(char *err, size_t errlen, int rc, const char *app, const char *fmt, ...)
	__attribute__((format(printf, 5, 6)));

/**
 * Make *p (an array of *cap elements of size bytes) hold at least n,
 * growing to n and half again. 0, or DML_ENOMEM with *p and *cap unchanged.
 */
int dml_app_reserve(void **p, size_t *cap, size_t n, size_t size);

/**
 * Sort keys[0..n-1] and drop repeats in place: the keys a batch pulls.
 * Returns how many are left.
 */
size_t dml_keys_unique(uint64_t *keys, size_t n);

/** The index of key in keys[0..n-1] (sorted, unique, key among them). */
uint32_t dml_keys_index(const uint64_t *keys, size_t n, uint64_t key);

/** A worker's records: ranges of record indices, in increasing order. */
struct dml_records {
	uint64_t *begin;          /* nranges each */
	uint64_t *prefix;         /* prefix[r]: records before range r */
	size_t nranges;
	uint64_t total;
};

/**
 * Make r the records of partitions parts (any order, duplicates ignored) of
 * n records split into num_partitions (dml_partition_range). Returns
 * 0; DML_EINVAL when a partition >= num_partitions ("partition 9 of 8 does
 * not exist" into err); DML_ENOMEM. r is unchanged on failure.
 */
int dml_records_set(struct dml_records *r, uint64_t n, const uint32_t *parts, size_t nparts,
		    uint32_t num_partitions, char *err, size_t errlen);

/** The record index at position pos < r->total. */
uint64_t dml_records_at(const struct dml_records *r, uint64_t pos);

/** Free and zero r; a zeroed r is fine. */
void dml_records_clear(struct dml_records *r);

/**
 * The area under the ROC curve of scores against labels (n each; a label
 * above 0.5 is a positive): the chance that a random positive scores above
 * a random negative, ties counted half. NaN when there are no positives or
 * no negatives, or no memory for the sort (O(n) scratch). NaN scores rank
 * below every number.
 */
double dml_auc(const float *scores, const float *labels, size_t n);

/** splitmix64's finaliser: a good 64-bit mix. */
uint64_t dml_rng_mix64(uint64_t z);
/** splitmix64: the next number of the stream in *state. */
uint64_t dml_rng_next(uint64_t *state);
/** Uniform in (0, 1), never 0 (so log() of it is finite). */
double dml_rng_uniform(uint64_t *state);
/** Standard normal (Box-Muller). */
double dml_rng_normal(uint64_t *state);

#endif
