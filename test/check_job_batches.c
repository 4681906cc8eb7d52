/*
 * Unit tests of the job table (sched/job_*.c): per-worker batches split
 * by speed (LB-BSP), clock_batch, a batch moving back.
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

/* A report of a worker's examples and compute seconds so far (BSP: the
 * same examples/s for everyone, the pace of the job); expect -1: 0 or 1. */
static void report_compute(struct dml_job *job, uint32_t id, uint64_t clock,
			   uint64_t examples, double compute_s, uint64_t now, int expect)
{
	Dml__Progress p = DML__PROGRESS__INIT;

	p.job = job->id;
	p.clock = clock;
	p.examples = examples;
	p.examples_per_s = 100;
	p.compute_s = compute_s;
	p.loss = NAN;
	if (expect >= 0)
		ck_assert_int_eq(progress_sent(job, id, &p, now), expect);
	else
		ck_assert_int_ge(progress_sent(job, id, &p, now), 0);
}

static uint32_t batch_of(struct dml_job *job, uint32_t id)
{
	struct dml_job_worker *w = dml_job_worker(job, id);
	Dml__Assignment a = DML__ASSIGNMENT__INIT;

	ck_assert_ptr_nonnull(w);
	dml_job_assignment(job, id, &a);
	dml_job_assignment_clear(&a);
	ck_assert_uint_eq(a.batch_size, w->batch);
	return w->batch;
}

/*
 * Three workers computing their batches at the given speeds, a clock a
 * second: each reports its examples and compute seconds so far.
 */
struct lb_sim {
	struct dml_job *job;
	uint64_t now, clock, examples[3];
	double compute[3];
	uint64_t last_move_ms;
};

/* Runs clocks until `moves` reassignments happened or `clocks` ran out;
 * returns the reassignments seen. */
/* The three workers' partition counts and batches. */
static void lb_shares(struct dml_job *job, uint64_t out[6])
{
	for (uint32_t id = 1; id <= 3; id++) {
		out[id - 1] = npart_of(job, id);
		out[id + 2] = batch_of(job, id);
	}
}

static unsigned lb_run(struct lb_sim *m, const double speed[3], unsigned clocks,
		       unsigned moves)
{
	unsigned seen = 0;

	for (unsigned c = 0; c < clocks && seen < moves; c++) {
		m->now += 1000;
		m->clock++;
		for (uint32_t id = 1; id <= 3; id++) {
			uint64_t before[6], after[6];
			uint32_t batch = batch_of(m->job, id);

			lb_shares(m->job, before);
			m->examples[id - 1] += batch;
			m->compute[id - 1] += batch / speed[id - 1];
			report_compute(m->job, id, m->clock, m->examples[id - 1],
				       m->compute[id - 1], m->now, -1);
			lb_shares(m->job, after);
			/* a partition handed on at its walker's letting go is no move */
			if (memcmp(before, after, sizeof(before)) == 0)
				continue;
			seen++;
			m->last_move_ms = m->now;
			assert_owners_consistent(m->job);
		}
	}
	return seen;
}

/*
 * A batch that would move back the way it last moved goes half way (a
 * worker under a CPU quota measures faster on a smaller batch): worker 3
 * went 64 -> 21; when its speed doubles, the move to 39 is halved to 30,
 * and the next move on up, the same way, goes whole.
 */
START_TEST(batch_moving_back_goes_half_way)
{
	static const double slow[3] = { 640, 640, 160 }, faster[3] = { 640, 640, 330 };
	struct dml_jobs *jobs;
	struct dml_job *job;
	struct spec_buf sb;
	struct lb_sim m = { 0 };
	uint32_t half;

	spec_init(&sb);
	sb.s.batch_split = DML_BATCH_RATE;
	sb.s.batch_size = 64;
	sb.s.rebalance_threshold = 0.1;
	sb.s.rebalance_hold_ms = 10000;
	jobs = jobs_with(&sb, 0, &job);
	start_equal(job, 3, 10, 0);
	m.job = job;
	ck_assert_uint_eq(lb_run(&m, slow, 5, 1), 1);
	ck_assert_uint_eq(batch_of(job, 3), 21);
	ck_assert_uint_eq(lb_run(&m, faster, 60, 1), 1);
	half = batch_of(job, 3);
	ck_assert_msg(half >= 28 && half <= 32, "worker 3's batch %u, not about 30", half);
	ck_assert_uint_eq(batch_of(job, 1) + batch_of(job, 2) + half, 192);
	ck_assert_uint_eq(lb_run(&m, faster, 60, 1), 1);
	ck_assert_msg(batch_of(job, 3) > half + 4 && batch_of(job, 3) <= 40,
		      "worker 3's batch %u after %u", batch_of(job, 3), half);
	dml_jobs_free(jobs);
}
END_TEST

/*
 * LB-BSP: under BSP (batch_split = auto) a worker 4 x slower at computing
 * than two others, all at the same examples/s (the pace of the job), gets a
 * smaller batch and fewer partitions as soon as every worker measured its
 * speed: 192 examples a clock split 86 / 85 / 21, and 27 partitions
 * following the batches 12 / 12 / 3. Then nothing moves while the speeds
 * hold. The split survives a scheduler restart.
 * Asynchronous jobs keep batch_size for everyone.
 */
START_TEST(batch_split_follows_speed)
{
	static const double speed[3] = { 640, 640, 160 };
	struct dml_jobs *jobs, *back;
	struct dml_job *job, *b;
	struct spec_buf sb;
	Dml__JobRecord *r;
	struct lb_sim m = { 0 };
	uint64_t now;

	spec_init(&sb);
	sb.s.batch_split = DML_BATCH_AUTO;
	sb.s.batch_size = 64;
	sb.s.partitions = 27;
	jobs = jobs_with(&sb, 0, &job);
	start_equal(job, 3, 10, 0);
	for (uint32_t id = 1; id <= 3; id++)
		ck_assert_uint_eq(batch_of(job, id), 64);
	m.job = job;
	ck_assert_uint_eq(lb_run(&m, speed, 60, 99), 1);
	/* at once when every worker measured its speed, at clock 1 */
	ck_assert_uint_eq(m.last_move_ms, 1000);
	now = m.now;
	ck_assert_double_eq_tol(dml_job_worker(job, 3)->speed, 160, 1e-6);
	ck_assert_uint_eq(batch_of(job, 1), 86);
	ck_assert_uint_eq(batch_of(job, 2), 85);
	ck_assert_uint_eq(batch_of(job, 3), 21);
	ck_assert_uint_eq(npart_of(job, 1), 12);
	ck_assert_uint_eq(npart_of(job, 3), 3);

	r = record_round_trip(job, now);
	ck_assert_int_eq(dml_jobs_new(&back), 0);
	restore_ok(back, r, now + 1000);
	b = dml_jobs_find(back, 1);
	for (uint32_t id = 1; id <= 3; id++) {
		ck_assert_uint_eq(batch_of(b, id), batch_of(job, id));
		ck_assert_double_eq(dml_job_worker(b, id)->speed,
				    dml_job_worker(job, id)->speed);
	}
	dml_job_record_free(r);
	dml_jobs_free(back);
	dml_jobs_free(jobs);

	/* Asynchronous: partitions follow examples/s, batches stay equal. */
	sb.s.staleness = -1;
	jobs = jobs_with(&sb, 0, &job);
	start_equal(job, 2, 10, 0);
	report(job, 1, 1, 64, 300, 1000, 0);
	report(job, 2, 1, 64, 100, 1000, 1);
	ck_assert_uint_eq(npart_of(job, 1), 20);
	ck_assert_uint_eq(batch_of(job, 1), 64);
	ck_assert_uint_eq(batch_of(job, 2), 64);
	dml_jobs_free(jobs);
}
END_TEST

/*
 * clock_batch: a clock is that many examples over the live workers whatever
 * their number. Split equally, 96 is 32 each over three workers and 48
 * each once one is lost; split by speed, the total stays 96 too.
 */
START_TEST(clock_batch_holds_whatever_the_workers)
{
	static const double speed[3] = { 640, 640, 160 };
	struct dml_jobs *jobs;
	struct dml_job *job;
	struct spec_buf sb;
	struct lb_sim m = { 0 };

	spec_init(&sb);
	sb.s.staleness = 0;
	sb.s.batch_size = 16;
	sb.s.clock_batch = 96;
	sb.s.partitions = 12;
	jobs = jobs_with(&sb, 0, &job);
	start_equal(job, 3, 10, 0);
	for (uint32_t id = 1; id <= 3; id++)
		ck_assert_uint_eq(batch_of(job, id), 32);
	ck_assert_int_eq(dml_jobs_worker_lost(job, 3, "gone", 100), 1);
	ck_assert_uint_eq(batch_of(job, 1), 48);
	ck_assert_uint_eq(batch_of(job, 2), 48);
	dml_jobs_free(jobs);

	sb.s.batch_split = DML_BATCH_RATE;
	jobs = jobs_with(&sb, 0, &job);
	start_equal(job, 3, 10, 0);
	m.job = job;
	ck_assert_uint_ge(lb_run(&m, speed, 60, 99), 1);
	ck_assert_uint_eq(batch_of(job, 1) + batch_of(job, 2) + batch_of(job, 3), 96);
	ck_assert_uint_gt(batch_of(job, 1), 3 * batch_of(job, 3));
	ck_assert_int_eq(dml_jobs_worker_lost(job, 3, "gone", m.now + 1), 1);
	ck_assert_uint_eq(batch_of(job, 1) + batch_of(job, 2), 96);
	dml_jobs_free(jobs);
}
END_TEST

/* This file's tests, into tc. */
void check_jobs_add_batches(TCase *tc)
{
	tcase_add_test(tc, batch_split_follows_speed);
	tcase_add_test(tc, clock_batch_holds_whatever_the_workers);
	tcase_add_test(tc, batch_moving_back_goes_half_way);
}
