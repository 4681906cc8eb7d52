/*
 * Unit tests of the job table (sched/job_*.c): checkpoints, a job saved
 * and restored, bad records and bad arguments refused.
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
#include "proto/dml_error.h"
#include "proto/frame.h"
#include "sched/handover.h"
#include "proto/job_spec.h"
#include "sched/jobs.h"
#include "store/table.h"
#include "proto/util.h"

/* The record through its wire encoding, as the scheduler's store keeps it. */
Dml__JobRecord *record_round_trip(const struct dml_job *job, uint64_t now)
{
	Dml__JobRecord *r = dml_job_record(job, now), *back;

	back = dml_msg_copy(&r->base);
	ck_assert_ptr_nonnull(back);
	dml_job_record_free(r);
	return back;
}

void restore_ok(struct dml_jobs *jobs, const Dml__JobRecord *r, uint64_t now)
{
	char err[ERRLEN] = "";

	ck_assert_msg(dml_jobs_restore(jobs, r, now, err, sizeof(err)) == 0, "%s", err);
}

/*
 * A running job (a worker lost, reports in) and a pending one, saved and
 * restored into a new table at another time: the same state, owners,
 * figures and events, and both tables go on alike: a report adds only
 * what is new, a loss moves the same partitions, a new job gets id 3.
 */
/* Job-wide checkpoints: listed once each, the newest keep, deleted,
 * saved with the job, and forgotten when another job starts. */
START_TEST(checkpoints_are_listed_kept_and_restored)
{
	struct dml_jobs *jobs, *back;
	struct dml_job *job, *b;
	struct spec_buf sb;
	Dml__JobRecord *r;
	Dml__JobStatus *st;

	spec_init(&sb);
	sb.s.checkpoint_keep = 2;
	jobs = jobs_with(&sb, 1000, &job);
	ck_assert_uint_eq(dml_job_checkpoint_keep(job), 2);
	dml_jobs_checkpoint_done(job, 100, 10, 3000);
	dml_jobs_checkpoint_done(job, 200, 20, 4000);
	dml_jobs_checkpoint_done(job, 200, 99, 4500);
	ck_assert_str_eq(last_event(job), "checkpoint at clock 200 (0.0 MB)");
	dml_jobs_checkpoint_done(job, 300, 30, 5000);
	ck_assert_uint_eq(job->nckpts, 2);
	ck_assert_uint_eq(job->ckpts[0].clock, 200);
	ck_assert_uint_eq(job->ckpts[0].bytes, 20);
	ck_assert_uint_eq(job->ckpts[1].clock, 300);
	st = dml_job_status(job, 6000);
	ck_assert_uint_eq(st->n_checkpoints, 2);
	ck_assert_uint_eq(st->checkpoints[1]->age_ms, 1000);
	dml_job_status_free(st);

	ck_assert_int_eq(dml_jobs_checkpoint_drop(job, 200), 0);
	ck_assert_str_eq(last_event(job), "checkpoint at clock 200 deleted");
	ck_assert_int_eq(dml_jobs_checkpoint_drop(job, 200), DML_ENOTFOUND);
	ck_assert_uint_eq(job->nckpts, 1);

	r = record_round_trip(job, 7000);
	ck_assert_int_eq(dml_jobs_new(&back), 0);
	restore_ok(back, r, 100000);
	b = dml_jobs_find(back, 1);
	ck_assert_uint_eq(b->nckpts, 1);
	ck_assert_uint_eq(b->ckpts[0].clock, 300);
	ck_assert_uint_eq(b->ckpts[0].bytes, 30);
	ck_assert_uint_eq(b->ckpts[0].done_ms, 100000 - 2000);
	dml_jobs_checkpoints_clear(b, 2);
	ck_assert_uint_eq(b->nckpts, 0);
	ck_assert_str_eq(last_event(b), "checkpoints deleted: job 2 started on its servers");
	dml__job_record__free_unpacked(r, NULL);
	dml_jobs_free(back);
	dml_jobs_free(jobs);
}
END_TEST

START_TEST(a_saved_job_comes_back_as_it_was)
{
	struct dml_jobs *jobs, *back;
	struct dml_job *job, *pending, *b;
	struct spec_buf sb;
	Dml__JobRecord *r[2];
	char err[ERRLEN];
	uint32_t id;

	spec_init(&sb);
	jobs = jobs_with(&sb, 1000, &job);
	ck_assert_int_eq(dml_jobs_submit(jobs, &sb.s, 1500, &id, err, sizeof(err)), 0);
	pending = dml_jobs_find(jobs, id);
	start_equal(job, 3, 50, 2000);
	report(job, 2, 40, 400, 90, 3000, 0);
	report(job, 3, 41, 420, 30, 3000, 0);
	ck_assert_int_eq(dml_jobs_worker_lost(job, 1, "no heartbeat for 900 ms", 4000), 1);
	r[0] = record_round_trip(job, 5000);
	r[1] = record_round_trip(pending, 5000);
	ck_assert_int_eq(dml_jobs_new(&back), 0);
	restore_ok(back, r[0], 100000);
	restore_ok(back, r[1], 100000);
	ck_assert_uint_eq(dml_jobs_count(back), 2);
	b = dml_jobs_find(back, 1);
	ck_assert_int_eq(b->state, DML__JOB_STATE__RUNNING);
	ck_assert_str_eq(b->reason, job->reason);
	ck_assert_str_eq(b->spec->name, "hand");
	ck_assert_uint_eq(b->assignment_version, job->assignment_version);
	ck_assert_uint_eq(b->num_partitions, job->num_partitions);
	ck_assert_uint_eq(b->nworkers, 3);
	ck_assert_mem_eq(b->owner, job->owner, job->num_partitions * sizeof(*job->owner));
	for (size_t i = 0; i < 3; i++) {
		ck_assert_uint_eq(b->workers[i].node_id, job->workers[i].node_id);
		ck_assert_int_eq(b->workers[i].live, job->workers[i].live);
		ck_assert_uint_eq(b->workers[i].npart, job->workers[i].npart);
		ck_assert_uint_eq(b->workers[i].examples, job->workers[i].examples);
		ck_assert_double_eq(b->workers[i].rate, job->workers[i].rate);
		ck_assert_str_eq(b->workers[i].reason, job->workers[i].reason);
	}
	assert_owners_consistent(b);
	ck_assert_uint_eq(b->nevents, job->nevents);
	ck_assert_str_eq(last_event(b), last_event(job));
	ck_assert_uint_eq(b->run_ms, 3000);
	ck_assert_uint_eq(b->submitted_ms, 100000 - 4000);
	ck_assert_int_eq(dml_jobs_find(back, 2)->state, DML__JOB_STATE__PENDING);
	ck_assert_ptr_null(dml_jobs_find(back, 2)->owner);

	/* Both go on alike. */
	report(job, 2, 80, 900, 90, 6000, 0);
	report(b, 2, 80, 900, 90, 101000, 0);
	ck_assert_uint_eq(b->workers[1].examples, 900);
	ck_assert_uint_eq(b->workers[1].examples, job->workers[1].examples);
	ck_assert_int_eq(dml_jobs_worker_lost(job, 3, "gone", 7000), 1);
	ck_assert_int_eq(dml_jobs_worker_lost(b, 3, "gone", 102000), 1);
	ck_assert_mem_eq(b->owner, job->owner, job->num_partitions * sizeof(*job->owner));
	ck_assert_int_eq(dml_jobs_submit(back, &sb.s, 103000, &id, err, sizeof(err)), 0);
	ck_assert_uint_eq(id, 3);
	dml__job_record__free_unpacked(r[0], NULL);
	dml__job_record__free_unpacked(r[1], NULL);
	dml_jobs_free(back);
	dml_jobs_free(jobs);
}
END_TEST

/* A record restore cannot trust is refused with what is wrong, and the
 * table stays as it was. */
START_TEST(bad_records_are_refused)
{
	struct dml_jobs *jobs, *back;
	struct dml_job *job;
	struct spec_buf sb;
	Dml__JobRecord *r;
	char err[ERRLEN];
	uint32_t keep;
	size_t keep_n;

	spec_init(&sb);
	jobs = jobs_with(&sb, 0, &job);
	start_equal(job, 3, 50, 0);
	ck_assert_int_eq(dml_jobs_worker_lost(job, 1, "gone", 10), 1);
	r = record_round_trip(job, 100);
	ck_assert_int_eq(dml_jobs_new(&back), 0);

	r->status->id = 2;
	ck_assert_int_eq(dml_jobs_restore(back, r, 0, err, sizeof(err)), DML_EINVAL);
	ck_assert_msg(strstr(err, "job 2 where job 1 was due"), "%s", err);
	r->status->id = 1;

	keep = r->owner[0];
	r->owner[0] = 1;       /* worker 1 is lost */
	ck_assert_int_eq(dml_jobs_restore(back, r, 0, err, sizeof(err)), DML_EINVAL);
	ck_assert_msg(strstr(err, "not a live member"), "%s", err);
	r->owner[0] = keep;

	keep_n = r->n_rate;
	r->n_rate = 2;
	ck_assert_int_eq(dml_jobs_restore(back, r, 0, err, sizeof(err)), DML_EINVAL);
	ck_assert_msg(strstr(err, "per-worker lists"), "%s", err);
	r->n_rate = keep_n;

	keep_n = r->n_owner;
	r->n_owner = 5;
	ck_assert_int_eq(dml_jobs_restore(back, r, 0, err, sizeof(err)), DML_EINVAL);
	ck_assert_msg(strstr(err, "partition owners"), "%s", err);
	r->n_owner = keep_n;

	r->status->state = 42;
	ck_assert_int_eq(dml_jobs_restore(back, r, 0, err, sizeof(err)), DML_EINVAL);
	r->status->state = DML__JOB_STATE__RUNNING;

	r->status->spec->batch_size = 0;
	ck_assert_int_ne(dml_jobs_restore(back, r, 0, err, sizeof(err)), 0);
	r->status->spec->batch_size = 8;

	r->status->workers[2]->worker = r->status->workers[1]->worker;
	ck_assert_int_eq(dml_jobs_restore(back, r, 0, err, sizeof(err)), DML_EINVAL);
	ck_assert_msg(strstr(err, "twice"), "%s", err);
	r->status->workers[2]->worker = 3;

	ck_assert_uint_eq(dml_jobs_count(back), 0);
	restore_ok(back, r, 0);
	ck_assert_uint_eq(dml_jobs_count(back), 1);
	dml__job_record__free_unpacked(r, NULL);
	dml_jobs_free(back);
	dml_jobs_free(jobs);
}
END_TEST

START_TEST(bad_arguments_are_refused)
{
	struct dml_job_candidate c = { 1, 1 };
	struct dml_jobs *jobs;
	struct dml_job *job;
	struct spec_buf b;
	uint32_t id;

	ck_assert_int_eq(dml_jobs_new(NULL), DML_EINVAL);
	spec_init(&b);
	jobs = jobs_with(&b, 0, &job);
	ck_assert_int_eq(dml_jobs_submit(jobs, NULL, 0, &id, NULL, 0), DML_EINVAL);
	ck_assert_int_eq(dml_jobs_submit(NULL, &b.s, 0, &id, NULL, 0), DML_EINVAL);
	ck_assert_int_eq(dml_jobs_start(NULL, &c, 1, 0), DML_EINVAL);
	ck_assert_int_eq(dml_jobs_start(job, NULL, 1, 0), DML_EINVAL);
	ck_assert_int_eq(dml_jobs_worker_lost(NULL, 1, "x", 0), 0);
	ck_assert_int_eq(dml_jobs_worker_available(job, NULL, 0), 0);
	ck_assert_ptr_null(dml_job_worker(NULL, 1));
	ck_assert_uint_eq(dml_job_clock(job), 0);
	ck_assert_uint_eq(dml_jobs_count(NULL), 0);
	dml_jobs_fail(NULL, "x", 0);
	dml_jobs_set_reason(NULL, "x", 0);
	dml_jobs_free(NULL);
	dml_jobs_free(jobs);
}
END_TEST

/* This file's tests, into tc. */
void check_jobs_add_records(TCase *tc)
{
	tcase_add_test(tc, bad_arguments_are_refused);
	tcase_add_test(tc, a_saved_job_comes_back_as_it_was);
	tcase_add_test(tc, checkpoints_are_listed_kept_and_restored);
	tcase_add_test(tc, bad_records_are_refused);
}
