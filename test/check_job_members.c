/*
 * Unit tests of the job table (sched/job_*.c): submitting, starting on
 * workers, losing and regaining them, moved partitions, recruiting.
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

START_TEST(submit_makes_a_pending_job)
{
	struct dml_jobs *jobs;
	struct dml_job *job;
	struct spec_buf b;
	char err[ERRLEN];
	uint32_t id = 0;

	spec_init(&b);
	jobs = jobs_with(&b, 500, &job);
	ck_assert_uint_eq(job->id, 1);
	ck_assert_int_eq(job->state, DML__JOB_STATE__PENDING);
	ck_assert_str_eq(job->reason, "waiting to start");
	ck_assert_str_eq(job->spec->name, "hand");
	ck_assert_ptr_ne(job->spec, &b.s);
	ck_assert_uint_eq(job->submitted_ms, 500);
	ck_assert_uint_eq(job->assignment_version, 0);
	ck_assert_uint_eq(dml_jobs_count(jobs), 1);
	ck_assert_ptr_eq(dml_jobs_at(jobs, 0), job);
	ck_assert_ptr_null(dml_jobs_at(jobs, 1));
	ck_assert_ptr_null(dml_jobs_find(jobs, 2));
	ck_assert_ptr_null(dml_jobs_find(jobs, 0));
	ck_assert_ptr_null(dml_jobs_active(jobs));
	ck_assert_ptr_eq(dml_jobs_next(jobs), job);
	ck_assert(!dml_job_finished(job));
	b.s.batch_size = 0;
	ck_assert_int_eq(dml_jobs_submit(jobs, &b.s, 600, &id, err, sizeof(err)), DML_EINVAL);
	ck_assert_msg(strstr(err, "batch_size") != NULL, "%s", err);
	ck_assert_uint_eq(dml_jobs_count(jobs), 1);
	b.s.batch_size = 8;
	ck_assert_int_eq(dml_jobs_submit(jobs, &b.s, 600, &id, err, sizeof(err)), 0);
	ck_assert_uint_eq(id, 2);
	dml_jobs_set_reason(job, "installing tables on 2 servers", 700);
	ck_assert_str_eq(job->reason, "installing tables on 2 servers");
	dml_jobs_free(jobs);
}
END_TEST

START_TEST(start_waits_for_its_workers)
{
	struct dml_job_candidate c[3] = { { 4, 10 }, { 2, 10 }, { 9, 10 } };
	struct dml_jobs *jobs;
	struct dml_job *job;
	struct spec_buf b;

	spec_init(&b);
	jobs = jobs_with(&b, 0, &job);
	ck_assert_int_eq(dml_jobs_start(job, c, 0, 10), DML_ESTATE);
	ck_assert_str_eq(job->reason, "waiting for a worker, none alive");
	ck_assert_int_eq(job->state, DML__JOB_STATE__PENDING);
	dml_jobs_free(jobs);

	b.s.workers = 3;
	jobs = jobs_with(&b, 0, &job);
	ck_assert_int_eq(dml_jobs_start(job, c, 1, 10), DML_ESTATE);
	ck_assert_str_eq(job->reason, "waiting for 3 workers, 1 alive");
	ck_assert_int_eq(job->state, DML__JOB_STATE__PENDING);
	ck_assert_uint_eq(job->nworkers, 0);
	ck_assert_int_eq(dml_jobs_start(job, c, 3, 20), 0);
	ck_assert_int_eq(job->state, DML__JOB_STATE__RUNNING);
	ck_assert_int_eq(dml_jobs_start(job, c, 3, 30), DML_EINVAL);
	dml_jobs_free(jobs);

	b.s.workers = 0;
	b.s.n_worker_ids = 3;
	b.ids[0] = 9;
	b.ids[1] = 7;
	b.ids[2] = 4;
	jobs = jobs_with(&b, 0, &job);
	ck_assert_int_eq(dml_jobs_start(job, c, 3, 10), DML_ESTATE);
	ck_assert_str_eq(job->reason, "waiting for worker 7 (2 of 3 alive)");
	dml_jobs_free(jobs);
}
END_TEST

START_TEST(workers_n_takes_the_lowest_ids_and_ids_take_exactly_those)
{
	struct dml_job_candidate c[4] = { { 9, 1 }, { 5, 1 }, { 3, 1 }, { 7, 1 } };
	struct dml_jobs *jobs;
	struct dml_job *job;
	struct spec_buf b;

	spec_init(&b);
	b.s.workers = 2;
	jobs = jobs_with(&b, 0, &job);
	ck_assert_int_eq(dml_jobs_start(job, c, 4, 10), 0);
	ck_assert_uint_eq(job->nworkers, 2);
	ck_assert_uint_eq(job->workers[0].node_id, 3);
	ck_assert_uint_eq(job->workers[1].node_id, 5);
	ck_assert_uint_eq(job->num_partitions, 16);
	dml_jobs_free(jobs);

	b.s.workers = 0;
	b.s.n_worker_ids = 2;
	b.ids[0] = 9;
	b.ids[1] = 5;
	jobs = jobs_with(&b, 0, &job);
	ck_assert_int_eq(dml_jobs_start(job, c, 4, 10), 0);
	ck_assert_uint_eq(job->nworkers, 2);
	ck_assert_uint_eq(job->workers[0].node_id, 5);
	ck_assert_uint_eq(job->workers[1].node_id, 9);
	ck_assert_ptr_null(dml_job_worker(job, 3));
	dml_jobs_free(jobs);
}
END_TEST

START_TEST(start_splits_partitions_by_rate)
{
	/* unsorted, one duplicate, one id 0: ignored */
	struct dml_job_candidate c[5] = { { 3, 100 }, { 1, 100 }, { 2, 200 }, { 0, 50 },
					  { 2, 200 } };
	struct dml_job_candidate d[3] = { { 1, 0 }, { 2, NAN }, { 3, 2 } };
	struct dml_jobs *jobs;
	struct dml_job *job;
	struct spec_buf b;

	spec_init(&b);
	jobs = jobs_with(&b, 0, &job);
	ck_assert_int_eq(dml_jobs_start(job, c, 5, 1000), 0);
	ck_assert_int_eq(job->state, DML__JOB_STATE__RUNNING);
	ck_assert_uint_eq(job->assignment_version, 1);
	ck_assert_uint_eq(job->started_ms, 1000);
	ck_assert_uint_eq(job->nworkers, 3);
	ck_assert_uint_eq(job->num_partitions, 24);
	ck_assert_uint_eq(npart_of(job, 1), 6);
	ck_assert_uint_eq(npart_of(job, 2), 12);
	ck_assert_uint_eq(npart_of(job, 3), 6);
	assert_owners_consistent(job);
	/* a fresh plan: one contiguous block each, in id order */
	for (uint64_t p = 0; p < 24; p++)
		ck_assert_uint_eq(job->owner[p], p < 6 ? 0 : p < 18 ? 1 : 2);
	ck_assert_str_eq(job->reason, "running on 3 workers");
	ck_assert_str_eq(last_event(job),
			 "started on workers 1, 2, 3 (24 partitions: 6, 12, 6)");
	ck_assert_str_eq(job->workers[1].reason, "started with 12 partitions");
	dml_jobs_free(jobs);

	/* unknown or bad rates count as 1; partitions from the spec */
	b.s.partitions = 100;
	jobs = jobs_with(&b, 0, &job);
	ck_assert_int_eq(dml_jobs_start(job, d, 3, 1000), 0);
	ck_assert_uint_eq(job->num_partitions, 100);
	ck_assert_uint_eq(npart_of(job, 1), 25);
	ck_assert_uint_eq(npart_of(job, 2), 25);
	ck_assert_uint_eq(npart_of(job, 3), 50);
	ck_assert_double_eq(dml_job_worker(job, 2)->rate, 1);
	dml_jobs_free(jobs);
}
END_TEST

START_TEST(a_lost_worker_gives_only_its_partitions)
{
	struct dml_jobs *jobs;
	struct dml_job *job;
	struct spec_buf b;
	uint32_t before[24];
	int rc;

	spec_init(&b);
	jobs = jobs_with(&b, 0, &job);
	start_equal(job, 3, 50, 0);
	memcpy(before, job->owner, sizeof(before));
	rc = dml_jobs_worker_lost(job, 1, "no heartbeat for 812 ms", 100);
	ck_assert_int_eq(rc, 1);
	ck_assert_uint_eq(job->assignment_version, 2);
	ck_assert(!dml_job_worker(job, 1)->live);
	ck_assert_uint_eq(npart_of(job, 1), 0);
	ck_assert_uint_eq(npart_of(job, 2), 12);
	ck_assert_uint_eq(npart_of(job, 3), 12);
	for (size_t p = 0; p < 24; p++) {
		if (before[p] != 0)
			ck_assert_uint_eq(job->owner[p], before[p]);
		else
			ck_assert(job->owner[p] == 1 || job->owner[p] == 2);
	}
	assert_owners_consistent(job);
	ck_assert_str_eq(last_event(job), "worker 1 lost (no heartbeat for 812 ms): its 8 "
			 "partitions to workers 2, 3");
	ck_assert_str_eq(dml_job_worker(job, 1)->reason, "lost (no heartbeat for 812 ms)");
	ck_assert_str_eq(dml_job_worker(job, 2)->reason, "gained 4 partitions (worker 1 lost)");
	ck_assert_str_eq(job->reason, "running on 2 workers");
	/* not a live worker of the job: nothing changes */
	ck_assert_int_eq(dml_jobs_worker_lost(job, 1, "again", 200), 0);
	ck_assert_int_eq(dml_jobs_worker_lost(job, 42, "stranger", 200), 0);
	ck_assert_uint_eq(job->assignment_version, 2);
	dml_jobs_free(jobs);
}
END_TEST

START_TEST(all_lost_leaves_partitions_unowned_until_one_rejoins)
{
	struct dml_job_candidate c = { 2, 10 };
	struct dml_jobs *jobs;
	struct dml_job *job;
	struct spec_buf b;

	spec_init(&b);
	jobs = jobs_with(&b, 0, &job);
	start_equal(job, 2, 10, 0);
	report(job, 1, 30, 240, 10, 50, 0);
	report(job, 2, 25, 200, 10, 50, 0);
	ck_assert_int_eq(dml_jobs_worker_lost(job, 1, "left", 100), 1);
	ck_assert_int_eq(dml_jobs_worker_lost(job, 2, NULL, 100), 1);
	for (uint64_t p = 0; p < job->num_partitions; p++)
		ck_assert_uint_eq(job->owner[p], DML_ASSIGN_NONE);
	ck_assert_int_eq(job->state, DML__JOB_STATE__RUNNING);
	ck_assert_str_eq(job->reason, "no live worker: 16 partitions wait unowned");
	ck_assert_str_eq(last_event(job), "worker 2 lost: no live worker, 16 partitions wait "
			 "unowned");
	/* the job stands where the furthest worker got */
	ck_assert_uint_eq(dml_job_clock(job), 30);
	ck_assert_int_eq(dml_jobs_worker_available(job, &c, 200), 1);
	ck_assert_uint_eq(npart_of(job, 2), 16);
	ck_assert_uint_eq(dml_job_worker(job, 2)->clock, 30);
	assert_owners_consistent(job);
	ck_assert_str_eq(job->reason, "running on 1 worker");
	dml_jobs_free(jobs);
}
END_TEST

/*
 * A partition that moves goes on from where the worker walking it stopped:
 * from a lost worker's last report at once, from a live one once it let
 * go of it (never while it still walks it), or after the hold from its
 * last report when it says nothing.
 */
START_TEST(a_moved_partition_goes_on_where_its_walker_stopped)
{
	struct dml_job_candidate c = { 3, 10 };
	uint32_t before[24], from1 = UINT32_MAX, from2 = UINT32_MAX;
	double lo = INFINITY, hi = 0;
	struct dml_jobs *jobs;
	struct dml_job *job;
	struct spec_buf b;
	Dml__JobStatus *st;
	uint64_t version;

	spec_init(&b);
	b.s.rebalance_hold_ms = 1000;
	jobs = jobs_with(&b, 0, &job);
	start_equal(job, 3, 10, 0);
	for (uint32_t q = 0; q < 24; q++)
		ck_assert_int_eq(listed_at(job, job->owner[q] + 1, q), 0);
	/* each walks its partitions to 900 + p and says so */
	memcpy(before, job->owner, sizeof(before));
	for (uint32_t id = 1; id <= 3; id++)
		ck_assert_int_eq(let_go(job, id, before, 24, 10), 0);
	st = dml_job_status(job, 10);
	for (uint32_t q = 0; q < 24; q++) {
		uint64_t begin, end;

		dml_partition_range(1000, 24, q, &begin, &end);
		lo = fmin(lo, (900.0 + q) / (double)(end - begin));
		hi = fmax(hi, (900.0 + q) / (double)(end - begin));
	}
	ck_assert_double_eq_tol(st->epochs_min, lo, 1e-9);
	ck_assert_double_eq_tol(st->epochs_max, hi, 1e-9);
	dml_job_status_free(st);
	/* a lost worker's partitions go on at once, from its last report */
	ck_assert_int_eq(dml_jobs_worker_lost(job, 3, "left", 20), 1);
	for (uint32_t q = 0; q < 24; q++)
		if (before[q] == 2)
			ck_assert_int_eq(listed_at(job, job->owner[q] + 1, q), 900 + q);
	/* it rejoins: what it takes back waits for the workers walking it */
	memcpy(before, job->owner, sizeof(before));
	ck_assert_int_eq(dml_jobs_worker_available(job, &c, 30), 1);
	for (uint32_t q = 0; q < 24; q++) {
		if (job->owner[q] != 2)
			continue;
		ck_assert_int_eq(listed_at(job, 3, q), -1);
		ck_assert_int_eq(listed_at(job, before[q] + 1, q), -1);
		*(before[q] == 0 ? &from1 : &from2) = q;
	}
	ck_assert_uint_ne(from1, UINT32_MAX);
	ck_assert_uint_ne(from2, UINT32_MAX);
	/* worker 1 lets go: its share goes on from where it stopped */
	version = job->assignment_version;
	ck_assert_int_eq(let_go(job, 1, before, 24, 40), 1);
	ck_assert_uint_eq(job->assignment_version, version + 1);
	ck_assert_int_eq(listed_at(job, 3, from1), 1000 + from1);
	ck_assert_int_eq(listed_at(job, 3, from2), -1);
	/* a report from behind does not move a partition back */
	ck_assert_int_eq(let_go(job, 3, before, 24, 45), 0);
	ck_assert_int_eq(listed_at(job, 3, from1), 1000 + from1);
	/* worker 2 says nothing: after the hold its share goes on regardless */
	ck_assert_int_eq(let_go(job, 1, before, 24, 1000), 0);
	ck_assert_int_eq(listed_at(job, 3, from2), -1);
	ck_assert_int_eq(let_go(job, 1, before, 24, 1030), 1);
	ck_assert_int_eq(listed_at(job, 3, from2), 900 + from2);
	ck_assert_ptr_nonnull(strstr(last_event(job), "partitions handed on without their "
				     "worker letting go of them within 1000 ms"));
	/* and its late letting go changes nothing */
	version = job->assignment_version;
	ck_assert_int_eq(let_go(job, 2, before, 24, 1040), 0);
	ck_assert_int_eq(listed_at(job, 3, from2), 900 + from2);
	ck_assert_uint_eq(job->assignment_version, version);
	dml_jobs_free(jobs);
}
END_TEST

/*
 * A worker's link: the bytes its steps moved over its own communication
 * (waits less what the servers held its pulls for others), averaged once
 * it communicated 0.05 s since the last measure; a restarted worker's
 * counts start over.
 */
START_TEST(the_link_is_bytes_over_own_communication)
{
	static const struct { uint64_t bytes; double wait, held, want; } r[] = {
		{ 0, 0, 0, 0 },                    /* the first marks */
		{ 1000000, 0.6, 0.1, 2e6 },        /* 1 MB in 0.5 s */
		{ 1001000, 0.61, 0.1, 2e6 },       /* 0.01 s: too little to tell */
		{ 3040000, 1.41, 0.4, 0.3 * 4e6 + 0.7 * 2e6 }, /* 2.04 MB in 0.51 s */
		{ 500, 0.2, 0, 0.3 * 4e6 + 0.7 * 2e6 }, /* restarted: marks again */
	};
	Dml__Progress p = DML__PROGRESS__INIT;
	struct dml_jobs *jobs;
	struct dml_job *job;
	struct spec_buf b;
	Dml__JobStatus *st;

	spec_init(&b);
	jobs = jobs_with(&b, 0, &job);
	start_equal(job, 2, 10, 0);
	p.job = job->id;
	p.loss = NAN;
	for (size_t k = 0; k < DML_ARRAY_LEN(r); k++) {
		p.bytes = r[k].bytes;
		p.wait_s = r[k].wait;
		p.held_s = r[k].held;
		p.clock = k;
		ck_assert_int_ge(dml_jobs_progress(job, 1, &p, 10 + k), 0);
		ck_assert_double_eq_tol(dml_job_worker(job, 1)->link_bps, r[k].want, 1e-3);
	}
	ck_assert_double_eq(dml_job_worker(job, 2)->link_bps, 0);
	st = dml_job_status(job, 20);
	ck_assert_double_eq_tol(st->workers[0]->link_bps, r[4].want, 1e-3);
	dml_job_status_free(st);
	dml_jobs_free(jobs);
}
END_TEST

/*
 * Values per link class and residual norms, as each worker last reported
 * them, reach its WorkerStatus; the job's are the sums and, per table, the
 * root of the norms' squares; a table the spec lacks is ignored and a NaN
 * norm counts as 0; a saved and restored job shows them again.
 */
START_TEST(link_bytes_and_residuals_reach_the_status)
{
	uint32_t t1[] = { 5, 0, 99 }, t2[] = { 0, 5 };
	double n1[] = { 4, 3, 1 }, n2[] = { 4, NAN };
	Dml__Progress p = DML__PROGRESS__INIT;
	Dml__LinkTraffic lt = DML__LINK_TRAFFIC__INIT;
	const Dml__LinkTraffic *w1, *all;
	struct dml_jobs *jobs, *back;
	struct dml_job *job;
	struct spec_buf b;
	Dml__JobStatus *st;
	Dml__JobRecord *r;

	spec_init(&b);
	b.s.n_tables = 2;
	b.t[1].id = 5;
	jobs = jobs_with(&b, 0, &job);
	start_equal(job, 2, 10, 0);
	p.job = job->id;
	p.loss = NAN;
	p.links = &lt;
	lt.within_zone_float_bytes = lt.within_zone_sent_bytes = 1000;
	lt.cross_zone_float_bytes = 4000;
	lt.cross_zone_sent_bytes = 2000;
	lt.residual_tables = t1;
	lt.n_residual_tables = 3;
	lt.residual_norms = n1;
	lt.n_residual_norms = 3;
	ck_assert_int_ge(dml_jobs_progress(job, 1, &p, 10), 0);
	lt.cross_zone_float_bytes = UINT64_MAX;   /* the sum saturates */
	lt.residual_tables = t2;
	lt.n_residual_tables = 2;
	lt.residual_norms = n2;
	ck_assert_int_ge(dml_jobs_progress(job, 2, &p, 11), 0);
	st = dml_job_status(job, 20);
	w1 = st->workers[0]->links;
	all = st->links;
	ck_assert_uint_eq(w1->cross_zone_float_bytes, 4000);
	ck_assert_uint_eq(w1->cross_zone_sent_bytes, 2000);
	ck_assert_uint_eq(w1->n_residual_norms, 2);
	ck_assert_uint_eq(w1->residual_tables[1], 5);
	ck_assert_double_eq(w1->residual_norms[0], 3);
	ck_assert_double_eq(w1->residual_norms[1], 4);
	ck_assert_double_eq(st->workers[1]->links->residual_norms[1], 0);
	ck_assert_uint_eq(all->within_zone_float_bytes, 2000);
	ck_assert_uint_eq(all->within_zone_sent_bytes, 2000);
	ck_assert_uint_eq(all->cross_zone_float_bytes, UINT64_MAX);
	ck_assert_uint_eq(all->cross_zone_sent_bytes, 4000);
	ck_assert_uint_eq(all->n_residual_tables, 2);
	ck_assert_double_eq_tol(all->residual_norms[0], 5, 1e-12);
	ck_assert_double_eq_tol(all->residual_norms[1], 4, 1e-12);
	dml_job_status_free(st);

	r = record_round_trip(job, 30);
	ck_assert_int_eq(dml_jobs_new(&back), 0);
	restore_ok(back, r, 1000);
	st = dml_job_status(dml_jobs_find(back, 1), 1000);
	ck_assert_uint_eq(st->workers[0]->links->cross_zone_sent_bytes, 2000);
	ck_assert_double_eq(st->workers[0]->links->residual_norms[1], 4);
	ck_assert_double_eq_tol(st->links->residual_norms[0], 5, 1e-12);
	dml_job_status_free(st);
	dml__job_record__free_unpacked(r, NULL);
	dml_jobs_free(back);
	dml_jobs_free(jobs);
}
END_TEST

/*
 * A job of more than 64 workers looks at its load (drift, first measures,
 * stalls) at most every 50 ms, not at each report: a look costs
 * O(workers log workers).
 */
START_TEST(a_large_job_looks_at_its_load_at_most_every_50_ms)
{
	struct dml_job_candidate c[100];
	struct dml_jobs *jobs;
	struct dml_job *job;
	struct spec_buf b;

	spec_init(&b);
	jobs = jobs_with(&b, 0, &job);
	for (uint32_t i = 0; i < 100; i++) {
		c[i].node_id = i + 1;
		c[i].rate = 10;
	}
	ck_assert_int_eq(dml_jobs_start(job, c, 100, 0), 0);
	ck_assert_uint_eq(job->assignment_version, 1);
	/* worker 1 looks at t = 1000; the others measure in the same ms: the
	 * split their first measures call for waits for the next look */
	for (uint32_t id = 1; id <= 100; id++)
		report(job, id, 1, 0, id <= 50 ? 300 : 100, 1000, 0);
	report(job, 1, 2, 0, 300, 1049, 0);
	ck_assert_uint_eq(job->assignment_version, 1);
	report(job, 1, 2, 0, 300, 1050, 1);
	ck_assert_uint_eq(job->assignment_version, 2);
	ck_assert_str_eq(last_event(job), "split by the workers' first measured rates (load "
			 "deviation 50%)");
	dml_jobs_free(jobs);
}
END_TEST

/*
 * Each partition waits for its walker from the plan that made it wait: a
 * later plan's waits are not cut short by an earlier one's hold.
 */
START_TEST(a_partition_waits_its_own_hold)
{
	const bool live[2] = { true, true };
	uint32_t owner[4] = { 0, 0, 1, 1 };
	struct dml_handover h;

	dml_handover_init(&h, 4);
	dml_handover_plan(&h, owner, live, 2, 0);
	ck_assert_uint_eq(h.waiting, 0);
	owner[0] = 1;
	dml_handover_plan(&h, owner, live, 2, 100);
	ck_assert_uint_eq(h.waiting, 1);
	owner[2] = 0;
	dml_handover_plan(&h, owner, live, 2, 900);
	ck_assert_uint_eq(h.waiting, 2);
	ck_assert_uint_eq(dml_handover_expire(&h, owner, 1099, 1000), 0);
	ck_assert_uint_eq(dml_handover_expire(&h, owner, 1100, 1000), 1);
	ck_assert_uint_eq(h.holder[0], 1);
	ck_assert_uint_eq(h.holder[2], 1);
	ck_assert_uint_eq(dml_handover_expire(&h, owner, 1899, 1000), 0);
	ck_assert_uint_eq(dml_handover_expire(&h, owner, 1900, 1000), 1);
	ck_assert_uint_eq(h.holder[2], 0);
	ck_assert_uint_eq(h.waiting, 0);
	dml_handover_free(&h);
}
END_TEST

START_TEST(a_rejoining_worker_starts_at_the_job_clock)
{
	struct dml_job_candidate c = { 3, 10 };
	Dml__Assignment a = DML__ASSIGNMENT__INIT;
	struct dml_jobs *jobs;
	struct dml_job *job;
	struct spec_buf b;
	uint32_t before[24];
	size_t moved = 0;

	spec_init(&b);
	jobs = jobs_with(&b, 0, &job);
	start_equal(job, 3, 10, 0);
	report(job, 1, 40, 100, 10, 50, 0);
	report(job, 2, 45, 100, 10, 50, 0);
	report(job, 3, 50, 100, 10, 50, 0);
	ck_assert_uint_eq(dml_job_clock(job), 40);
	ck_assert_int_eq(dml_jobs_worker_lost(job, 3, "connection closed", 60), 1);
	memcpy(before, job->owner, sizeof(before));
	ck_assert_int_eq(dml_jobs_worker_available(job, &c, 70), 1);
	/* it takes 8 back from the others, nothing else moves */
	for (size_t p = 0; p < 24; p++)
		moved += job->owner[p] != before[p];
	ck_assert_uint_eq(moved, 8);
	ck_assert_uint_eq(job->assignment_version, 3);
	ck_assert(dml_job_worker(job, 3)->live);
	ck_assert_uint_eq(npart_of(job, 3), 8);
	ck_assert_uint_eq(npart_of(job, 1), 8);
	ck_assert_str_eq(last_event(job), "worker 3 rejoined at clock 40: 8 partitions");
	ck_assert_str_eq(dml_job_worker(job, 3)->reason,
			 "rejoined at clock 40 with 8 partitions");
	assert_owners_consistent(job);
	/* its 8 are listed for it once the two walking them let go */
	dml_job_assignment(job, 3, &a);
	ck_assert_uint_eq(a.start_clock, 40);
	ck_assert_uint_eq(a.n_partitions, 0);
	dml_job_assignment_clear(&a);
	ck_assert_int_eq(let_go(job, 1, before, 24, 75), 1);
	ck_assert_int_eq(let_go(job, 2, before, 24, 75), 1);
	dml_job_assignment(job, 3, &a);
	ck_assert_uint_eq(a.n_partitions, 8);
	dml_job_assignment_clear(&a);
	/* already taking part: not wanted again */
	ck_assert_int_eq(dml_jobs_worker_available(job, &c, 80), 0);
	ck_assert_uint_eq(job->assignment_version, 5);
	dml_jobs_free(jobs);
}
END_TEST

START_TEST(new_workers_are_recruited_when_the_spec_allows)
{
	struct dml_job_candidate nine = { 9, 10 };
	struct dml_jobs *jobs;
	struct dml_job *job;
	struct spec_buf b;

	/* workers = 0: everyone alive takes part */
	spec_init(&b);
	jobs = jobs_with(&b, 0, &job);
	ck_assert_int_eq(dml_jobs_worker_available(job, &nine, 5), 0); /* pending */
	start_equal(job, 3, 10, 0);
	report(job, 1, 12, 0, 0, 10, 0);
	report(job, 2, 12, 0, 0, 10, 0);
	report(job, 3, 14, 0, 0, 10, 0);
	ck_assert_int_eq(dml_jobs_worker_available(job, &nine, 20), 1);
	ck_assert_uint_eq(job->nworkers, 4);
	ck_assert_uint_eq(npart_of(job, 9), 6);
	ck_assert_uint_eq(npart_of(job, 1), 6);
	ck_assert_uint_eq(dml_job_worker(job, 9)->clock, 12);
	ck_assert_str_eq(last_event(job), "worker 9 joined at clock 12: 6 partitions");
	ck_assert_str_eq(dml_job_worker(job, 1)->reason,
			 "gave up 2 partitions (worker 9 joined)");
	assert_owners_consistent(job);
	dml_jobs_free(jobs);

	/* worker_ids: only those */
	b.s.n_worker_ids = 2;
	b.ids[0] = 1;
	b.ids[1] = 2;
	jobs = jobs_with(&b, 0, &job);
	start_equal(job, 3, 10, 0);
	ck_assert_uint_eq(job->nworkers, 2);
	ck_assert_int_eq(dml_jobs_worker_available(job, &nine, 20), 0);
	ck_assert_uint_eq(job->nworkers, 2);
	ck_assert_uint_eq(job->assignment_version, 1);
	dml_jobs_free(jobs);

	/* workers = 2: only to make up for a lost one */
	b.s.n_worker_ids = 0;
	b.s.workers = 2;
	jobs = jobs_with(&b, 0, &job);
	start_equal(job, 3, 10, 0);
	ck_assert_int_eq(dml_jobs_worker_available(job, &nine, 20), 0);
	ck_assert_int_eq(dml_jobs_worker_lost(job, 1, "left", 30), 1);
	ck_assert_int_eq(dml_jobs_worker_available(job, &nine, 40), 1);
	ck_assert_uint_eq(npart_of(job, 9), 8);
	ck_assert_uint_eq(npart_of(job, 2), 8);
	assert_owners_consistent(job);
	dml_jobs_free(jobs);
}
END_TEST

/* This file's tests, into tc. */
void check_jobs_add_members(TCase *tc)
{
	tcase_add_test(tc, submit_makes_a_pending_job);
	tcase_add_test(tc, start_waits_for_its_workers);
	tcase_add_test(tc, workers_n_takes_the_lowest_ids_and_ids_take_exactly_those);
	tcase_add_test(tc, start_splits_partitions_by_rate);
	tcase_add_test(tc, a_lost_worker_gives_only_its_partitions);
	tcase_add_test(tc, all_lost_leaves_partitions_unowned_until_one_rejoins);
	tcase_add_test(tc, a_rejoining_worker_starts_at_the_job_clock);
	tcase_add_test(tc, a_moved_partition_goes_on_where_its_walker_stopped);
	tcase_add_test(tc, a_partition_waits_its_own_hold);
	tcase_add_test(tc, the_link_is_bytes_over_own_communication);
	tcase_add_test(tc, link_bytes_and_residuals_reach_the_status);
	tcase_add_test(tc, a_large_job_looks_at_its_load_at_most_every_50_ms);
	tcase_add_test(tc, new_workers_are_recruited_when_the_spec_allows);
}
