/*
 * dml-bench's job files: a copy of a job file (conf/jobs/mlp.conf and the
 * like) with some keys set, so that every configuration of a benchmark
 * trains the same job and differs only in the keys it names. Shared by
 * hetero (bench_hetero.c) and zones (bench_zones.c).
 *
 * Nothing here parses a job: the copy is checked by whoever loads it
 * (dml_job_file_load(), the scheduler).
 */
#ifndef DML_BENCH_JOBFILE_H
#define DML_BENCH_JOBFILE_H

#include <stddef.h>

/** One key to set in every section of a kind. */
struct bench_job_key {
	const char *section;   /* "job" or "table": every [table] gets it */
	const char *key;
	char val[48];
};

/**
 * kv[*n] = SECTION's KEY set to the printf-formatted value, and *n one more.
 * A value cut at sizeof(val) is a bug of the caller's: it is logged.
 */
void bench_job_key_set(struct bench_job_key *kv, size_t *n, const char *section,
		       const char *key, const char *fmt, ...)
	__attribute__((format(printf, 5, 6)));

/**
 * The job file src with the keys of kv[0..n) set: written to dir/NAME.conf
 * (path in out). A key of kv replaces the line that sets it in its section
 * and goes right after the section's header; every other line is kept as it
 * is. Returns 0, DML_EINVAL (out too short) or DML_EIO (logged).
 */
int bench_job_write(const char *src, const char *dir, const char *name,
		    const struct bench_job_key *kv, size_t n, char *out, size_t outlen);

#endif
