/*
 * check_schedjobs: partitions handed on between workers through the
 * scheduler, a server or a worker refusing what it was sent, and a worker
 * that a server names as holding the others (set aside and evicted).
 */
#define _GNU_SOURCE
#include <check.h>
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <event2/event.h>

#include "shard/assign.h"
#include "proto/auth.h"
#include "test/check_run.h"
#include "test/check_schedjobs.h"
#include "proto/conn.h"
#include "proto/dml_error.h"
#include "test/harness.h"
#include "proto/job_spec.h"
#include "shard/mapplan.h"
#include "proto/util.h"

/*
 * Partitions handed on through the scheduler: a worker that leaves passes
 * its partitions on at the positions it last reported; one that joins gets
 * its share once the worker walking it let go of it, from where it let go.
 */
START_TEST(test_partitions_handed_on)
{
	struct sched t;
	struct peer *p[4] = { NULL };
	struct peer **srv = p, **wk = p + 1;     /* server 1, workers 1..3 */
	uint32_t had[2][8], all[16], kept[16], gone[16];
	size_t nkept = 0, ngone = 0;
	double lo = INFINITY, hi = 0;
	Dml__Meta *m, bye = DML__META__INIT;
	uint32_t id;

	sched_up(&t, NULL);
	srv[0] = node_up(&t.net, DML__ROLE__SERVER, 1);
	wk[0] = node_up(&t.net, DML__ROLE__WORKER, 1);
	wk[1] = node_up(&t.net, DML__ROLE__WORKER, 2);
	id = submit(t.ctl, "hand", "");
	m = expect_map(srv[0], id, 1, 1);
	peer_ack(srv[0], m);
	take_free(m);
	for (int i = 0; i < 2; i++) {
		m = expect_assign(wk[i], DML__JOB_STATE__RUNNING, 8);
		ck_assert_uint_eq(m->assignment->n_positions, 8);
		for (size_t k = 0; k < 8; k++)
			ck_assert_uint_eq(m->assignment->positions[k], 0);
		memcpy(had[i], m->assignment->partitions, sizeof(had[i]));
		peer_ack(wk[i], m);
		take_free(m);
	}
	/* worker 2 says where it stands, then leaves: worker 1 goes on there */
	progress_walked(wk[1], id, had[1], 8, NULL, 0);
	bye.type = DML__MSG_TYPE__BYE;
	take_free(peer_request(wk[1], &bye));
	m = expect_assign(wk[0], DML__JOB_STATE__RUNNING, 16);
	for (size_t k = 0; k < 16; k++) {
		uint32_t q = m->assignment->partitions[k];

		all[k] = q;
		ck_assert_uint_eq(m->assignment->positions[k],
				  has_part(had[1], 8, q) ? 100 + q : 0);
	}
	peer_ack(wk[0], m);
	take_free(m);
	/* worker 3 joins: its share waits until worker 1 lets go of it */
	wk[2] = node_up(&t.net, DML__ROLE__WORKER, 3);
	m = expect_assign(wk[2], DML__JOB_STATE__RUNNING, 0);
	peer_ack(wk[2], m);
	take_free(m);
	m = expect_assign(wk[0], DML__JOB_STATE__RUNNING, 8);
	for (size_t k = 0; k < 16; k++) {
		if (has_part(m->assignment->partitions, 8, all[k]))
			kept[nkept++] = all[k];
		else
			gone[ngone++] = all[k];
	}
	ck_assert_uint_eq(ngone, 8);
	peer_ack(wk[0], m);
	take_free(m);
	ck_assert_ptr_null(peer_take(wk[2], DML__MSG_TYPE__ASSIGN, 0, 200));
	progress_walked(wk[0], id, kept, nkept, gone, ngone);
	m = expect_assign(wk[2], DML__JOB_STATE__RUNNING, 8);
	for (size_t k = 0; k < 8; k++) {
		uint32_t q = m->assignment->partitions[k];

		ck_assert(has_part(gone, ngone, q));
		ck_assert_uint_eq(m->assignment->positions[k], 200 + q);
	}
	take_free(m);
	/* the status shows how far the partitions went */
	for (uint32_t q = 0; q < 16; q++) {
		uint64_t b, e;
		double passes;

		dml_partition_range(1000, 16, q, &b, &e);
		passes = (has_part(gone, ngone, q) ? 200.0 + q : 100.0 + q) / (double)(e - b);
		lo = fmin(lo, passes);
		hi = fmax(hi, passes);
	}
	m = job_status(t.ctl, id);
	ck_assert_double_eq_tol(m->jobs[0]->epochs_min, lo, 1e-9);
	ck_assert_double_eq_tol(m->jobs[0]->epochs_max, hi, 1e-9);
	take_free(m);
	sched_down(&t, p, 4);
}
END_TEST

/* An ERROR answering req, as a server or worker that cannot do it sends. */
void peer_refuse(struct peer *p, const Dml__Meta *req, int code, const char *why)
{
	Dml__Meta m = DML__META__INIT;
	Dml__Error e = DML__ERROR__INIT;

	e.code = code;
	e.message = (char *)why;
	m.type = DML__MSG_TYPE__ERROR;
	m.request_id = req->request_id;
	m.error = &e;
	peer_send(p, &m);
}

/* A server that refuses a map fails the job and is left out of the next;
 * a worker that refuses its assignment is lost to the job. */
START_TEST(test_refusals)
{
	struct sched t;
	struct peer *p[3] = { NULL };
	Dml__Meta *m, *m2, *old_assign;
	uint32_t id;

	sched_up(&t, NULL);
	p[0] = node_up(&t.net, DML__ROLE__SERVER, 1);
	p[1] = node_up(&t.net, DML__ROLE__SERVER, 2);
	p[2] = node_up(&t.net, DML__ROLE__WORKER, 1);
	id = submit(t.ctl, "refused", "");
	m = expect_map(p[0], id, 1, 2);
	peer_refuse(p[0], m, DML_ECONF, "this server serves the tables of its config file");
	take_free(m);
	take_free(expect_map(p[1], id, 1, 2));
	wait_reason(t.ctl, id, DML__JOB_STATE__FAILED, "server 1 refused shard map v1: this "
		    "server serves the tables of its config file");
	/* The worker never got to run it, but hears the end. */
	old_assign = expect_assign(p[2], DML__JOB_STATE__FAILED, 0);

	id = submit(t.ctl, "second", "");
	m = expect_map(p[1], id, 1, 1);
	ck_assert_uint_eq(m->shard_map->servers[0]->node_id, 2);
	peer_ack(p[1], m);
	take_free(m);
	m = expect_assign(p[2], DML__JOB_STATE__RUNNING, 8);
	ck_assert_ptr_null(peer_take(p[0], DML__MSG_TYPE__SHARDMAP, 0, 0));
	wait_reason(t.ctl, id, DML__JOB_STATE__RUNNING, "running on 1 worker");

	/* A late refusal of the first job's end is not about this job (the
	 * NODES round trip on the same connection makes sure it was read). */
	peer_refuse(p[2], old_assign, DML_EINVAL, "late");
	take_free(old_assign);
	{
		Dml__Meta nodes = DML__META__INIT;

		nodes.type = DML__MSG_TYPE__NODES;
		take_free(peer_request(p[2], &nodes));
	}
	m2 = job_status(t.ctl, id);
	ck_assert_str_eq(m2->jobs[0]->reason, "running on 1 worker");
	take_free(m2);
	peer_refuse(p[2], m, DML_EINVAL, "no such app");
	take_free(m);
	wait_reason(t.ctl, id, DML__JOB_STATE__RUNNING,
		    "no live worker: 8 partitions wait unowned");
	m = job_status(t.ctl, id);
	ck_assert_str_eq(m->jobs[0]->workers[0]->reason,
			 "lost (refused its assignment: no such app)");
	take_free(m);
	sched_down(&t, p, 3);
}
END_TEST

/* ---- a worker that holds the others ------------------------------------------ */

static void straggler(struct peer *srv, uint32_t job, uint32_t worker, uint64_t clock,
		      uint64_t waited_ms)
{
	Dml__Meta m = DML__META__INIT;

	m.type = DML__MSG_TYPE__STRAGGLER;
	m.job = job;
	m.worker = worker;
	m.clock = clock;
	m.held_us = waited_ms * 1000;
	peer_send(srv, &m);
}

/*
 * A server names the worker its pulls wait for (STRAGGLER): a wait shorter
 * than the hold changes nothing; a longer one sets the worker aside (an
 * assignment with no partitions) and every server is told to drop its
 * clock (EVICT).
 */
START_TEST(test_straggler_evicted)
{
	struct sched t;
	struct peer *p[3] = { NULL };
	struct peer *srv, **wk = p + 1;
	Dml__Meta *m;
	uint32_t id;

	sched_up(&t, NULL);
	srv = p[0] = node_up(&t.net, DML__ROLE__SERVER, 1);
	wk[0] = node_up(&t.net, DML__ROLE__WORKER, 1);
	wk[1] = node_up(&t.net, DML__ROLE__WORKER, 2);
	id = submit(t.ctl, "strag", "rebalance_hold_ms = 1000\n");
	m = expect_map(srv, id, 1, 1);
	peer_ack(srv, m);
	take_free(m);
	for (int i = 0; i < 2; i++) {
		m = expect_assign(wk[i], DML__JOB_STATE__RUNNING, 8);
		peer_ack(wk[i], m);
		take_free(m);
		progress(wk[i], id, 3, 0);
	}
	/* The reports are not answered: a JOBS round trip orders them. */
	take_free(job_status(t.ctl, id));
	straggler(srv, id, 2, 3, 900);
	ck_assert_ptr_null(peer_take(srv, DML__MSG_TYPE__EVICT, 0, 200));
	straggler(srv, id, 2, 3, 1100);
	m = peer_take(srv, DML__MSG_TYPE__EVICT, 0, WAIT_MS);
	ck_assert_msg(m != NULL, "server 1 was not told to drop worker 2");
	ck_assert_uint_eq(m->job, id);
	ck_assert_uint_eq(m->worker, 2);
	take_free(m);
	m = expect_assign(wk[1], DML__JOB_STATE__RUNNING, 0);
	take_free(m);
	sched_log_wait(&t, "worker 2 stalled: 1 of 1 servers told to drop its clock");
	m = job_status(t.ctl, id);
	ck_assert_uint_eq(m->jobs[0]->n_workers, 2);
	ck_assert_uint_eq(m->jobs[0]->workers[1]->worker, 2);
	ck_assert_str_eq(m->jobs[0]->workers[1]->reason, "stalled (held the others at clock "
			 "3 for 1100 ms)");
	take_free(m);
	sched_down(&t, p, 3);
}
END_TEST

/* This file's tests, into tc. */
void check_schedjobs_add_workers(TCase *tc)
{
	tcase_add_test(tc, test_partitions_handed_on);
	tcase_add_test(tc, test_refusals);
	tcase_add_test(tc, test_straggler_evicted);
}
