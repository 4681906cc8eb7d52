/*
 * Unit tests of job files and specs (proto/job_spec*.c, proto/job_file.c)
 * and of the scheduler's job table (sched/job_*.c) with a fake clock: this
 * file runs them all and holds the helpers of the job table's tests.
 * Job files: check_job_files.c; hand-built specs: check_job_specs.c; the
 * job table: check_job_members.c (start, losing and regaining workers),
 * check_job_progress.c (stop conditions, reports, rates, rebalancing,
 * stalls), check_job_ops.c (operators, assignments, status, events),
 * check_job_batches.c (batch splits), check_job_records.c (checkpoints,
 * saving and restoring, bad arguments).
 */
#include <check.h>
#include <float.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "shard/assign.h"
#include "test/check_jobs.h"
#include "test/check_run.h"
#include "proto/dml_error.h"
#include "sched/handover.h"
#include "proto/job_spec.h"
#include "sched/jobs.h"
#include "store/table.h"
#include "proto/util.h"

/* ---- the job table ----------------------------------------------------- */

/* A table holding one submitted job of spec b (ids and tables as set). */
struct dml_jobs *jobs_with(struct spec_buf *b, uint64_t now, struct dml_job **job)
{
	struct dml_jobs *jobs;
	char err[ERRLEN];
	uint32_t id = 0;

	ck_assert_int_eq(dml_jobs_new(&jobs), 0);
	ck_assert_msg(dml_jobs_submit(jobs, &b->s, now, &id, err, sizeof(err)) == 0, "%s",
		      err);
	*job = dml_jobs_find(jobs, id);
	ck_assert_ptr_nonnull(*job);
	return jobs;
}

/* Starts job on workers 1..n, all at the given rate. */
void start_equal(struct dml_job *job, size_t n, double rate, uint64_t now)
{
	struct dml_job_candidate c[16];

	ck_assert_uint_le(n, 16);
	for (size_t i = 0; i < n; i++) {
		c[i].node_id = (uint32_t)(i + 1);
		c[i].rate = rate;
	}
	ck_assert_int_eq(dml_jobs_start(job, c, n, now), 0);
}

uint64_t npart_of(struct dml_job *job, uint32_t id)
{
	struct dml_job_worker *w = dml_job_worker(job, id);

	ck_assert_ptr_nonnull(w);
	return w->npart;
}

const char *last_event(const struct dml_job *job)
{
	ck_assert_uint_gt(job->nevents, 0);
	return job->events[(job->nevents - 1) % DML_JOB_EVENTS];
}

/* Every partition has an owner among the live workers, and npart agrees. */
void assert_owners_consistent(const struct dml_job *job)
{
	uint64_t sum = 0;

	for (size_t i = 0; i < job->nworkers; i++) {
		uint64_t k = 0;

		for (uint64_t p = 0; p < job->num_partitions; p++)
			k += job->owner[p] == i;
		ck_assert_uint_eq(k, job->workers[i].npart);
		if (!job->workers[i].live)
			ck_assert_uint_eq(k, 0);
		sum += k;
	}
	ck_assert_uint_eq(sum, job->num_partitions);
}

/*
 * Worker id's report p, sent as a worker that took its latest assignment
 * sends it: it lets go of every partition it is not given (the scheduler
 * takes that only from the worker walking one). Returns what
 * dml_jobs_progress returns.
 */
int progress_sent(struct dml_job *job, uint32_t id, Dml__Progress *p, uint64_t now)
{
	uint32_t *rel = calloc(job->num_partitions + 1, sizeof(*rel));
	uint64_t *pos = calloc(job->num_partitions + 1, sizeof(*pos));
	int rc;

	ck_assert(rel && pos);
	for (uint32_t q = 0; job->owner && q < job->num_partitions; q++)
		if (job->owner[q] != id - 1)
			rel[p->n_released++] = q;
	p->released = rel;
	p->released_positions = pos;
	p->n_released_positions = p->n_released;
	rc = dml_jobs_progress(job, id, p, now);
	free(rel);
	free(pos);
	return rc;
}

void report(struct dml_job *job, uint32_t id, uint64_t clock, uint64_t examples,
	    double rate, uint64_t now, int expect)
{
	Dml__Progress p = DML__PROGRESS__INIT;

	p.job = job->id;
	p.clock = clock;
	p.examples = examples;
	p.examples_per_s = rate;
	p.loss = NAN;
	ck_assert_int_eq(progress_sent(job, id, &p, now), expect);
}

/*
 * Worker id applies its assignment as of now, and reports where the
 * partitions it walks stand (900 + p) and which of those it had before
 * (had[p] == id - 1, an owner array of npart) it let go of, at 1000 + p.
 * Returns what dml_jobs_progress returns.
 */
int let_go(struct dml_job *job, uint32_t id, const uint32_t *had, uint32_t npart,
	   uint64_t now)
{
	const struct dml_job_worker *w = dml_job_worker(job, id);
	Dml__Assignment a = DML__ASSIGNMENT__INIT;
	Dml__Progress p = DML__PROGRESS__INIT;
	uint32_t rel[64];
	uint64_t relpos[64], pos[64];
	size_t n = 0;
	int rc;

	ck_assert_ptr_nonnull(w);
	ck_assert_uint_le(npart, 64);
	dml_job_assignment(job, id, &a);
	for (uint32_t q = 0; q < npart; q++) {
		int kept = 0;

		for (size_t k = 0; k < a.n_partitions; k++)
			kept |= a.partitions[k] == q;
		if (had[q] == id - 1 && !kept) {
			rel[n] = q;
			relpos[n++] = 1000 + q;
		}
	}
	for (size_t k = 0; k < a.n_partitions; k++)
		pos[k] = 900 + a.partitions[k];
	p.job = job->id;
	p.clock = w->clock;
	p.examples = w->examples;
	p.loss = NAN;
	p.partitions = a.partitions;
	p.n_partitions = p.n_positions = a.n_partitions;
	p.positions = pos;
	p.released = rel;
	p.released_positions = relpos;
	p.n_released = p.n_released_positions = n;
	rc = dml_jobs_progress(job, id, &p, now);
	dml_job_assignment_clear(&a);
	return rc;
}

/* Is partition q listed for worker id, and at which position (else -1)? */
int64_t listed_at(struct dml_job *job, uint32_t id, uint32_t q)
{
	Dml__Assignment a = DML__ASSIGNMENT__INIT;
	int64_t at = -1;

	dml_job_assignment(job, id, &a);
	ck_assert_uint_eq(a.n_positions, a.n_partitions);
	for (size_t k = 0; k < a.n_partitions; k++)
		if (a.partitions[k] == q)
			at = (int64_t)a.positions[k];
	dml_job_assignment_clear(&a);
	return at;
}

static Suite *jobs_suite(void)
{
	Suite *s = suite_create("jobs");
	TCase *files = tcase_create("files");
	TCase *table = tcase_create("table");

	check_jobs_add_files(files);
	check_jobs_add_specs(files);
	suite_add_tcase(s, files);

	check_jobs_add_members(table);
	check_jobs_add_progress(table);
	check_jobs_add_batches(table);
	check_jobs_add_ops(table);
	check_jobs_add_records(table);
	suite_add_tcase(s, table);
	return s;
}

int main(void)
{
	return dml_check_run(jobs_suite());
}
