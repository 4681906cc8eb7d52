/*
 * check_schedjobs: `dmlctl checkpoint` answered by the round started after
 * it (one asked during a round waits for the next), a failed round's
 * reason, a waiter hanging up.
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

/* ---- checkpoints asked by an operator --------------------------------------- */

/* JOB_CONTROL CHECKPOINT_NOW, not waited for: its request id. */
static uint64_t ckpt_ask(struct peer *ctl, uint32_t job)
{
	Dml__Meta m = DML__META__INIT;

	m.type = DML__MSG_TYPE__JOB_CONTROL;
	m.job = job;
	m.action = DML__JOB_ACTION__CHECKPOINT_NOW;
	peer_send(ctl, &m);
	return m.request_id;
}

/* The server's next CHECKPOINT (prepare: clock 0; cut: at clock), answered
 * with ACK{answer, bytes}. */
static void ckpt_answer(struct peer *srv, uint64_t clock, uint64_t answer, uint64_t bytes)
{
	Dml__Meta *m = peer_take(srv, DML__MSG_TYPE__CHECKPOINT, 0, WAIT_MS);
	Dml__Meta a = DML__META__INIT;

	ck_assert_msg(m != NULL, "server %u was asked for no checkpoint", srv->node_id);
	ck_assert_int_eq(m->drop, 0);
	ck_assert_uint_eq(m->clock, clock);
	a.type = DML__MSG_TYPE__ACK;
	a.request_id = m->request_id;
	a.clock = answer;
	a.bytes = bytes;
	peer_send(srv, &a);
	take_free(m);
}

/* The ACK answering request id: a checkpoint at clock of bytes. */
static void ckpt_taken(struct peer *ctl, uint64_t id, uint64_t clock, uint64_t bytes)
{
	Dml__Meta *r = peer_take(ctl, 0, id, WAIT_MS);

	ck_assert_msg(r != NULL, "no answer to checkpoint request %llu", (unsigned long long)id);
	ck_assert_msg(r->type == DML__MSG_TYPE__ACK, "checkpoint: %s",
		      r->error ? r->error->message : dml_msg_type_name(r->type));
	ck_assert_uint_eq(r->clock, clock);
	ck_assert_uint_eq(r->bytes, bytes);
	take_free(r);
}

/*
 * `dmlctl checkpoint` hears of the round started after it asked: one asked
 * while a round is under way (that round's cut may be older than the
 * request) waits for the next, which starts as that one ends; a failed
 * round answers with its reason; a waiter that hangs up is forgotten.
 */
START_TEST(test_checkpoint_asked_during_a_round)
{
	struct sched t;
	struct peer *p[3] = { NULL };
	struct peer *srv, *wk, *ctl2;
	uint64_t a, b, c;
	Dml__Meta *m;
	uint32_t id;

	sched_up(&t, NULL);
	srv = p[0] = node_up(&t.net, DML__ROLE__SERVER, 1);
	wk = p[1] = node_up(&t.net, DML__ROLE__WORKER, 1);
	id = submit(t.ctl, "ckpt", "");
	m = expect_map(srv, id, 1, 1);
	peer_ack(srv, m);
	take_free(m);
	m = expect_assign(wk, DML__JOB_STATE__RUNNING, 8);
	peer_ack(wk, m);
	take_free(m);

	a = ckpt_ask(t.ctl, id);
	m = peer_take(srv, DML__MSG_TYPE__CHECKPOINT, 0, WAIT_MS);
	ck_assert_ptr_nonnull(m);
	b = ckpt_ask(t.ctl, id);
	sched_log_wait(&t, "checkpoint (operator): starts when the one being taken ends");
	/* a's round fails, a hears why, and b's round starts at once */
	peer_refuse(srv, m, DML_ESTATE, "keeps no store ([store] path)");
	take_free(m);
	m = peer_take(t.ctl, 0, a, WAIT_MS);
	ck_assert_ptr_nonnull(m);
	assert_error(m, DML_ESTATE, "checkpoint of job 1 failed: server 1: keeps no store");
	ck_assert_ptr_null(peer_take(t.ctl, 0, b, 100));
	ckpt_answer(srv, 0, 5, 0);
	c = ckpt_ask(t.ctl, id);
	ckpt_answer(srv, 5, 5, 100);
	ckpt_taken(t.ctl, b, 5, 100);
	/* c came while b's round was cutting: its own round comes next */
	ck_assert_ptr_null(peer_take(t.ctl, 0, c, 100));
	ckpt_answer(srv, 0, 7, 0);
	ckpt_answer(srv, 7, 7, 200);
	ckpt_taken(t.ctl, c, 7, 200);

	/* A waiter that hangs up: its round ends all the same. */
	ctl2 = peer_connect(&t.net, DML__ROLE__CONTROL, 0);
	(void)ckpt_ask(ctl2, id);
	m = peer_take(srv, DML__MSG_TYPE__CHECKPOINT, 0, WAIT_MS);
	ck_assert_ptr_nonnull(m);
	peer_free(ctl2);
	{
		Dml__Meta ack = DML__META__INIT;

		ack.type = DML__MSG_TYPE__ACK;
		ack.request_id = m->request_id;
		ack.clock = 9;
		peer_send(srv, &ack);
		take_free(m);
	}
	ckpt_answer(srv, 9, 9, 300);
	for (uint64_t end = now_ms() + WAIT_MS;; net_run(&t.net, 20)) {
		m = job_status(t.ctl, id);
		if (m->jobs[0]->n_checkpoints == 3 || now_ms() >= end)
			break;
		take_free(m);
	}
	ck_assert_uint_eq(m->jobs[0]->n_checkpoints, 3);
	ck_assert_uint_eq(m->jobs[0]->checkpoints[0]->clock, 5);
	ck_assert_uint_eq(m->jobs[0]->checkpoints[1]->clock, 7);
	ck_assert_uint_eq(m->jobs[0]->checkpoints[2]->clock, 9);
	ck_assert_str_eq(m->jobs[0]->checkpoint_state, "");
	take_free(m);
	sched_down(&t, p, 3);
}
END_TEST

/* This file's tests, into tc. */
void check_schedjobs_add_ckpt(TCase *tc)
{
	tcase_add_test(tc, test_checkpoint_asked_during_a_round);
}
