/*
 * What the files of check_jobs share: the bounds and the minimal job file
 * of the tests, a hand-built spec, the job table's test helpers, and each
 * file's list of tests.
 */
#ifndef DML_TEST_CHECK_JOBS_H
#define DML_TEST_CHECK_JOBS_H

#include <check.h>
#include <stddef.h>
#include <stdint.h>

#include "proto/dml.pb-c.h"
#include "sched/jobs.h"

#define ERRLEN 512

/* The smallest valid lsq job; tests append lines to break it. */
#define MIN_JOB "[job]\nname = j\napp = lsq\nmax_clocks = 10\ndim = 4\n"
#define MIN_TABLE "[table]\nid = 0\nkeys = 4\n"

/* A valid lsq spec with room for tables and ids; strings are literals. */
struct spec_buf {
	Dml__JobSpec s;
	Dml__TableSpec t[3];
	Dml__TableSpec *tp[3];
	uint32_t ids[4];
};

/* ---- check_jobs.c ----------------------------------------------------- */

struct dml_jobs *jobs_with(struct spec_buf *b, uint64_t now, struct dml_job **job);
void start_equal(struct dml_job *job, size_t n, double rate, uint64_t now);
uint64_t npart_of(struct dml_job *job, uint32_t id);
const char *last_event(const struct dml_job *job);
void assert_owners_consistent(const struct dml_job *job);
int progress_sent(struct dml_job *job, uint32_t id, Dml__Progress *p, uint64_t now);
void report(struct dml_job *job, uint32_t id, uint64_t clock, uint64_t examples,
	    double rate, uint64_t now, int expect);
int let_go(struct dml_job *job, uint32_t id, const uint32_t *had, uint32_t npart,
	   uint64_t now);
int64_t listed_at(struct dml_job *job, uint32_t id, uint32_t q);

/* ---- check_job_files.c ------------------------------------------------ */

int parse(const char *text, Dml__JobSpec **spec, char *err);
void assert_bad(const char *text, const char *want);

/* ---- check_job_specs.c ------------------------------------------------ */

void spec_init(struct spec_buf *b);

/* ---- check_job_records.c ---------------------------------------------- */

Dml__JobRecord *record_round_trip(const struct dml_job *job, uint64_t now);
void restore_ok(struct dml_jobs *jobs, const Dml__JobRecord *r, uint64_t now);

/* ---- each file's tests -------------------------------------------------- */

void check_jobs_add_files(TCase *tc);
void check_jobs_add_specs(TCase *tc);
void check_jobs_add_members(TCase *tc);
void check_jobs_add_progress(TCase *tc);
void check_jobs_add_ops(TCase *tc);
void check_jobs_add_batches(TCase *tc);
void check_jobs_add_records(TCase *tc);

#endif
