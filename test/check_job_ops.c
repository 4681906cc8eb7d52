/*
 * Unit tests of the job table (sched/job_*.c): operators (pause, resume,
 * stop), one active job, assignments, status, events, a large job.
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
#include "sched/handover.h"
#include "proto/job_spec.h"
#include "sched/jobs.h"
#include "store/table.h"
#include "proto/util.h"

START_TEST(operators_pause_resume_and_stop)
{
	struct dml_jobs *jobs;
	struct dml_job *job;
	struct spec_buf b;
	char err[ERRLEN];

	spec_init(&b);
	jobs = jobs_with(&b, 0, &job);
	ck_assert_int_eq(dml_jobs_control(jobs, 1, DML__JOB_ACTION__PAUSE, 5, err, sizeof(err)),
			 DML_ESTATE);
	ck_assert_str_eq(err, "job 1 is pending");
	start_equal(job, 2, 10, 10);
	ck_assert_int_eq(dml_jobs_control(jobs, 1, DML__JOB_ACTION__PAUSE, 20, err, sizeof(err)),
			 0);
	ck_assert_int_eq(job->state, DML__JOB_STATE__PAUSED);
	ck_assert_str_eq(job->reason, "paused by operator");
	ck_assert_str_eq(last_event(job), "paused by operator");
	ck_assert_ptr_eq(dml_jobs_active(jobs), job);
	ck_assert_int_eq(dml_jobs_control(jobs, 1, DML__JOB_ACTION__PAUSE, 25, err, sizeof(err)),
			 DML_ESTATE);
	ck_assert_str_eq(err, "job 1 is paused");
	/* a paused job still loses and regains workers */
	ck_assert_int_eq(dml_jobs_worker_lost(job, 2, "left", 26), 1);
	ck_assert_int_eq(dml_jobs_control(jobs, 1, DML__JOB_ACTION__RESUME, 30, err,
					  sizeof(err)), 0);
	ck_assert_int_eq(job->state, DML__JOB_STATE__RUNNING);
	ck_assert_str_eq(job->reason, "running on 1 worker");
	ck_assert_str_eq(last_event(job), "resumed by operator");
	ck_assert_int_eq(dml_jobs_control(jobs, 1, DML__JOB_ACTION__RESUME, 35, err,
					  sizeof(err)), DML_ESTATE);
	ck_assert_str_eq(err, "job 1 is running");
	ck_assert_int_eq(dml_jobs_control(jobs, 1, DML__JOB_ACTION__STOP, 40, err, sizeof(err)),
			 0);
	ck_assert_int_eq(job->state, DML__JOB_STATE__STOPPED);
	ck_assert_str_eq(job->reason, "stopped by operator");
	ck_assert_uint_eq(job->finished_ms, 40);
	ck_assert_int_eq(dml_jobs_control(jobs, 1, DML__JOB_ACTION__STOP, 45, err, sizeof(err)),
			 DML_ESTATE);
	ck_assert_str_eq(err, "job 1 is stopped");
	ck_assert_int_eq(dml_jobs_control(jobs, 7, DML__JOB_ACTION__STOP, 50, err, sizeof(err)),
			 DML_ENOTFOUND);
	ck_assert_str_eq(err, "no job 7");
	ck_assert_int_eq(dml_jobs_control(jobs, 1, 9, 50, err, sizeof(err)), DML_EINVAL);
	ck_assert_int_eq(dml_jobs_control(jobs, 1, DML__JOB_ACTION__ACTION_NONE, 50, err,
					  sizeof(err)), DML_EINVAL);
	dml_jobs_free(jobs);

	/* a done job cannot be stopped; a pending one can */
	b.s.max_clocks = 1;
	jobs = jobs_with(&b, 0, &job);
	start_equal(job, 1, 10, 0);
	report(job, 1, 1, 0, 0, 5, 1);
	ck_assert_int_eq(dml_jobs_control(jobs, 1, DML__JOB_ACTION__STOP, 10, err, sizeof(err)),
			 DML_ESTATE);
	ck_assert_str_eq(err, "job 1 is done");
	ck_assert_int_eq(dml_jobs_submit(jobs, &b.s, 20, &(uint32_t){ 0 }, err, sizeof(err)),
			 0);
	ck_assert_int_eq(dml_jobs_control(jobs, 2, DML__JOB_ACTION__STOP, 30, err, sizeof(err)),
			 0);
	ck_assert_int_eq(dml_jobs_find(jobs, 2)->state, DML__JOB_STATE__STOPPED);
	dml_jobs_free(jobs);
}
END_TEST

/* A change of routes outside the table: a new version and an event, for an
 * active job only; partitions and batches stay. */
START_TEST(reroute_bumps_the_version_of_an_active_job)
{
	struct dml_jobs *jobs;
	struct dml_job *job;
	struct spec_buf b;
	uint64_t v, parts;
	size_t nevents;

	spec_init(&b);
	jobs = jobs_with(&b, 0, &job);
	nevents = job->nevents;
	dml_jobs_reroute(job, "pending");
	ck_assert_uint_eq(job->assignment_version, 0);
	ck_assert_uint_eq(job->nevents, nevents);
	start_equal(job, 2, 10, 10);
	v = job->assignment_version;
	parts = npart_of(job, 1);
	dml_jobs_reroute(job, "zone aggregator routes changed for 1 worker");
	ck_assert_uint_eq(job->assignment_version, v + 1);
	ck_assert_str_eq(last_event(job), "zone aggregator routes changed for 1 worker");
	ck_assert_uint_eq(npart_of(job, 1), parts);
	job->state = DML__JOB_STATE__DONE;
	dml_jobs_reroute(job, "done");
	ck_assert_uint_eq(job->assignment_version, v + 1);
	dml_jobs_free(jobs);
}
END_TEST

START_TEST(one_job_is_active_at_a_time)
{
	struct dml_jobs *jobs;
	struct dml_job *one, *two;
	struct spec_buf b;
	char err[ERRLEN];
	uint32_t id;

	spec_init(&b);
	jobs = jobs_with(&b, 0, &one);
	ck_assert_int_eq(dml_jobs_submit(jobs, &b.s, 10, &id, err, sizeof(err)), 0);
	two = dml_jobs_find(jobs, id);
	ck_assert_ptr_eq(dml_jobs_next(jobs), one);
	start_equal(one, 2, 10, 20);
	ck_assert_ptr_eq(dml_jobs_active(jobs), one);
	ck_assert_ptr_null(dml_jobs_next(jobs));
	ck_assert_int_eq(dml_jobs_control(jobs, 1, DML__JOB_ACTION__PAUSE, 30, err, sizeof(err)),
			 0);
	ck_assert_ptr_null(dml_jobs_next(jobs));
	ck_assert_int_eq(dml_jobs_control(jobs, 1, DML__JOB_ACTION__STOP, 40, err, sizeof(err)),
			 0);
	ck_assert_ptr_null(dml_jobs_active(jobs));
	ck_assert_ptr_eq(dml_jobs_next(jobs), two);
	dml_jobs_free(jobs);
}
END_TEST

START_TEST(assignments_list_each_workers_partitions)
{
	Dml__Assignment a = DML__ASSIGNMENT__INIT;
	struct dml_jobs *jobs;
	struct dml_job *job;
	struct spec_buf b;
	char err[ERRLEN];
	uint64_t seen = 0;

	spec_init(&b);
	jobs = jobs_with(&b, 0, &job);
	dml_job_assignment(job, 1, &a);
	ck_assert_ptr_null(a.partitions);
	ck_assert_int_eq(a.state, DML__JOB_STATE__PENDING);
	ck_assert_uint_eq(a.n_partitions, 0);
	start_equal(job, 3, 10, 0);
	ck_assert_int_eq(dml_jobs_worker_lost(job, 2, "left", 10), 1);
	for (uint32_t id = 1; id <= 3; id++) {
		dml__assignment__init(&a);
		dml_job_assignment(job, id, &a);
		ck_assert_uint_eq(a.job, 1);
		ck_assert_uint_eq(a.version, 2);
		ck_assert_int_eq(a.state, DML__JOB_STATE__RUNNING);
		ck_assert_uint_eq(a.num_partitions, 24);
		ck_assert_uint_eq(a.n_partitions, id == 2 ? 0 : 12);
		ck_assert_uint_eq(a.n_positions, a.n_partitions);
		for (size_t k = 0; k < a.n_partitions; k++) {
			ck_assert_uint_lt(a.partitions[k], 24);
			ck_assert_uint_eq(job->owner[a.partitions[k]], id - 1);
			if (k)
				ck_assert_uint_gt(a.partitions[k], a.partitions[k - 1]);
			seen++;
		}
		dml_job_assignment_clear(&a);
	}
	ck_assert_uint_eq(seen, 24);
	dml__assignment__init(&a);
	dml_job_assignment(job, 55, &a);
	ck_assert_ptr_null(a.partitions);
	ck_assert_uint_eq(a.n_partitions, 0);
	ck_assert_int_eq(a.state, DML__JOB_STATE__RUNNING);
	ck_assert_int_eq(dml_jobs_control(jobs, 1, DML__JOB_ACTION__STOP, 40, err, sizeof(err)),
			 0);
	dml_job_assignment(job, 1, &a);
	ck_assert_int_eq(a.state, DML__JOB_STATE__STOPPED);
	dml_job_assignment_clear(&a);
	dml_jobs_free(jobs);
}
END_TEST

START_TEST(status_reports_the_whole_job)
{
	Dml__Progress p = DML__PROGRESS__INIT;
	struct dml_jobs *jobs;
	struct dml_job *job;
	Dml__JobStatus *st;
	struct spec_buf b;
	char err[ERRLEN];

	spec_init(&b);
	b.s.max_clocks = 1000;
	jobs = jobs_with(&b, 500, &job);
	start_equal(job, 3, 10, 1000);
	p.clock = 7;
	p.examples = 70;
	p.examples_per_s = 20;
	p.loss = 1.0;
	p.compute_s = 1.5;
	p.wait_s = 0.5;
	p.cpu_s = 2.5;
	p.cores = 0.6;
	ck_assert_int_eq(dml_jobs_progress(job, 1, &p, 1500), 0);
	p.clock = 9;
	p.loss = 3.0;
	ck_assert_int_eq(dml_jobs_progress(job, 2, &p, 1500), 0);
	p.clock = 5;
	p.loss = NAN;   /* worker 3: no loss yet */
	ck_assert_int_eq(dml_jobs_progress(job, 3, &p, 1500), 0);
	ck_assert_int_eq(dml_jobs_control(jobs, 1, DML__JOB_ACTION__PAUSE, 3000, err,
					  sizeof(err)), 0);
	ck_assert_int_eq(dml_jobs_control(jobs, 1, DML__JOB_ACTION__RESUME, 4000, err,
					  sizeof(err)), 0);
	ck_assert_int_eq(dml_jobs_worker_lost(job, 3, "left", 4500), 1);
	st = dml_job_status(job, 6000);
	ck_assert_ptr_nonnull(st);
	ck_assert_uint_eq(st->id, 1);
	ck_assert_str_eq(st->name, "hand");
	ck_assert_int_eq(st->state, DML__JOB_STATE__RUNNING);
	ck_assert_str_eq(st->reason, "running on 2 workers");
	ck_assert_ptr_nonnull(st->spec);
	ck_assert_uint_eq(st->spec->max_clocks, 1000);
	ck_assert_uint_eq(st->clock, 7);
	ck_assert_uint_eq(st->examples, 210);
	ck_assert_double_eq(st->examples_per_s, 40);
	ck_assert_double_eq(st->loss, 2.0);
	ck_assert(!st->has_metric);
	ck_assert_uint_eq(st->age_ms, 5500);
	ck_assert_uint_eq(st->run_ms, 2000 + 2000);
	ck_assert_uint_eq(st->assignment_version, 2);
	ck_assert_uint_eq(st->shard_map_version, 0);
	ck_assert_uint_eq(st->n_workers, 3);
	ck_assert_uint_eq(st->workers[0]->worker, 1);
	ck_assert_int_eq(st->workers[0]->state, DML__NODE_STATE__ALIVE);
	ck_assert_uint_eq(st->workers[0]->clock, 7);
	ck_assert_uint_eq(st->workers[0]->examples, 70);
	ck_assert_double_eq(st->workers[0]->examples_per_s, 20);
	ck_assert_double_eq(st->workers[0]->loss, 1.0);
	ck_assert_double_eq(st->workers[0]->compute_s, 1.5);
	ck_assert_double_eq(st->workers[0]->wait_s, 0.5);
	ck_assert_double_eq(st->workers[0]->cpu_s, 2.5);
	ck_assert_double_eq(st->workers[0]->cores, 0.6);
	ck_assert_uint_eq(st->workers[0]->partitions, 12);
	ck_assert_str_eq(st->workers[0]->reason, "gained 4 partitions (worker 3 lost)");
	ck_assert_uint_eq(st->workers[2]->worker, 3);
	ck_assert_int_eq(st->workers[2]->state, DML__NODE_STATE__DEAD);
	ck_assert_uint_eq(st->workers[2]->partitions, 0);
	ck_assert_str_eq(st->workers[2]->reason, "lost (left)");
	ck_assert_uint_eq(st->n_events, 5);
	ck_assert_str_eq(st->events[0], "submitted");
	ck_assert_str_eq(st->events[1], "started on workers 1, 2, 3 (24 partitions: 8, 8, 8)");
	ck_assert_str_eq(st->events[2], "paused by operator");
	ck_assert_str_eq(st->events[3], "resumed by operator");
	ck_assert_str_eq(st->events[4], "worker 3 lost (left): its 8 partitions to workers "
			 "1, 2");
	dml_job_status_free(st);

	/* stopped: run_ms no longer grows */
	ck_assert_int_eq(dml_jobs_control(jobs, 1, DML__JOB_ACTION__STOP, 7000, err,
					  sizeof(err)), 0);
	st = dml_job_status(job, 9000);
	ck_assert_uint_eq(st->run_ms, 2000 + 3000);
	ck_assert_uint_eq(st->age_ms, 8500);
	dml_job_status_free(st);
	dml_job_status_free(NULL);
	ck_assert_ptr_null(dml_job_status(NULL, 0));
	dml_jobs_free(jobs);
}
END_TEST

START_TEST(events_keep_the_newest_in_order)
{
	struct dml_job_candidate c = { 2, 10 };
	struct dml_jobs *jobs;
	struct dml_job *job;
	Dml__JobStatus *st;
	struct spec_buf b;
	char want[64];

	spec_init(&b);
	jobs = jobs_with(&b, 0, &job);
	start_equal(job, 2, 10, 0);
	/* 2 events so far, then 20 more: lost / rejoined, 10 times */
	for (int i = 0; i < 10; i++) {
		ck_assert_int_eq(dml_jobs_worker_lost(job, 2, "left", 10), 1);
		ck_assert_int_eq(dml_jobs_worker_available(job, &c, 20), 1);
	}
	ck_assert_uint_eq(job->nevents, 22);
	st = dml_job_status(job, 30);
	ck_assert_uint_eq(st->n_events, DML_JOB_EVENTS);
	for (size_t k = 0; k < st->n_events; k++) {
		snprintf(want, sizeof(want), k % 2 ? "worker 2 rejoined" : "worker 2 lost");
		ck_assert_msg(strncmp(st->events[k], want, strlen(want)) == 0, "%zu: %s", k,
			      st->events[k]);
	}
	ck_assert_str_eq(st->events[DML_JOB_EVENTS - 1], last_event(job));
	ck_assert_uint_eq(job->assignment_version, 21);
	dml_job_status_free(st);
	dml_jobs_free(jobs);
}
END_TEST

START_TEST(a_thousand_workers_start_quickly)
{
	enum { N = 1000 };
	struct dml_job_candidate *c = calloc(N, sizeof(*c));
	struct dml_job_candidate back = { 500, 3 };
	Dml__JobStatus *st;
	struct dml_jobs *jobs;
	struct dml_job *job;
	struct spec_buf b;
	uint64_t sum = 0;
	clock_t t0;
	double secs;

	ck_assert_ptr_nonnull(c);
	for (size_t i = 0; i < N; i++) {
		c[i].node_id = (uint32_t)(N - i);   /* reverse order */
		c[i].rate = 1 + (double)(i % 4);
	}
	spec_init(&b);
	jobs = jobs_with(&b, 0, &job);
	t0 = clock();
	ck_assert_int_eq(dml_jobs_start(job, c, N, 0), 0);
	ck_assert_int_eq(dml_jobs_worker_lost(job, 500, "no heartbeat for 900 ms", 10), 1);
	ck_assert_int_eq(dml_jobs_worker_available(job, &back, 20), 1);
	st = dml_job_status(job, 30);
	secs = (double)(clock() - t0) / CLOCKS_PER_SEC;
	ck_assert_msg(secs < 2.0, "took %.3f s", secs);
	ck_assert_uint_eq(job->nworkers, N);
	ck_assert_uint_eq(job->num_partitions, 8 * N);
	for (size_t i = 0; i < N; i++)
		sum += job->workers[i].npart;
	ck_assert_uint_eq(sum, 8 * N);
	assert_owners_consistent(job);
	ck_assert_uint_eq(st->n_workers, N);
	ck_assert_uint_le(strlen(st->events[1]), DML_JOB_REASON_MAX);
	ck_assert_msg(strstr(st->events[1], "started on workers 1, 2, 3") == st->events[1] &&
		      strstr(st->events[1], "more"), "%s", st->events[1]);
	dml_job_status_free(st);
	dml_jobs_free(jobs);
	free(c);
}
END_TEST

/* This file's tests, into tc. */
void check_jobs_add_ops(TCase *tc)
{
	tcase_add_test(tc, operators_pause_resume_and_stop);
	tcase_add_test(tc, reroute_bumps_the_version_of_an_active_job);
	tcase_add_test(tc, one_job_is_active_at_a_time);
	tcase_add_test(tc, assignments_list_each_workers_partitions);
	tcase_add_test(tc, status_reports_the_whole_job);
	tcase_add_test(tc, events_keep_the_newest_in_order);
	tcase_add_test(tc, a_thousand_workers_start_quickly);
}
