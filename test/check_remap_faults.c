/*
 * check_remap's tests of faults: a hung worker evicted by the scheduler,
 * and servers that crash and restart during or after a move keeping or
 * resuming it.
 */
#define _GNU_SOURCE
#include <check.h>
#include <math.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "proto/auth.h"
#include "test/check_remap.h"
#include "proto/dml_error.h"
#include "test/fake_sched.h"
#include "proto/frame.h"
#include "test/harness.h"
#include "test/raw_frame.h"
#include "shard/shardmap.h"
#include "proto/util.h"

static void raw_clock(struct raw *r, uint64_t clock)
{
	Dml__Meta m = DML__META__INIT;

	m.type = DML__MSG_TYPE__CLOCK;
	m.clock = clock;
	raw_send(r, &m, NULL, 0);
}

/* The server closed r's connection (nothing more was sent on it). */
static void raw_expect_closed(struct raw *r)
{
	struct pollfd pfd = { .fd = r->fd, .events = POLLIN };
	char c;

	ck_assert_int_eq(poll(&pfd, 1, WAIT_MS), 1);
	ck_assert_int_le(read(r->fd, &c, 1), 0);
}

/* Worker id's clock in the server's STATS (asked over ctl); -1 if absent. */
static int64_t stats_clock(struct raw *ctl, uint32_t id)
{
	Dml__Meta m = DML__META__INIT;
	struct answer a;
	int64_t clock = -1;

	m.type = DML__MSG_TYPE__STATS;
	raw_call(ctl, &m, NULL, 0, &a);
	ck_assert_ptr_nonnull(a.stats);
	for (size_t i = 0; i < a.stats->n_workers; i++)
		if (a.stats->workers[i]->worker == id)
			clock = (int64_t)a.stats->workers[i]->clock;
	answer_free(&a);
	return clock;
}

/*
 * A hung worker keeps its connection open, so the server would wait for
 * its clock for ever. The server names it to the scheduler (STRAGGLER) once
 * a pull has waited for it a second; not a worker whose own pull waits.
 * The scheduler's EVICT drops it from the clock set and closes the
 * connection: a pull parked for its clock is answered. When it connects
 * again it joins at the slowest clock.
 */
START_TEST(test_evict_drops_a_hung_worker)
{
	const uint32_t one[] = { 1 };
	struct dml_test_env *env;
	struct dml_fake_sched *f;
	struct dml_test_server *s[1];
	struct job j;
	struct raw a, b, ctl;
	struct answer ans;
	uint64_t parked, at, held_us;
	uint32_t who;
	uint16_t port;

	ck_assert_int_eq(dml_test_env_new(&env), 0);
	ck_assert_int_eq(dml_fake_sched_start(dml_test_env_secret(env), &f), 0);
	job_init(&j, JOB);
	j.spec.staleness = 0;
	j.spec.workers = 2;
	s[0] = start_server(env, f, 1, NULL, j.addr[1], sizeof(j.addr[1]));
	port = dml_test_server_port(s[0]);
	job_map(&j, 1, one, 1, one_ranges, 2);
	install_all(f, &j, one, 1, 0);
	raw_open(env, port, DML__ROLE__WORKER, 9, 1, JOB, 0, &a);
	/* Its pull waits for the second worker to join: it waits itself, so
	 * the server names nobody to the scheduler. */
	parked = raw_pull_send(&a, JOB, 10, 0);
	poll(NULL, 0, 1500);
	ck_assert_uint_eq(dml_fake_sched_stragglers(f, 1), 0);
	raw_open(env, port, DML__ROLE__WORKER, 11, 1, JOB, 0, &b);
	raw_answer(&a, parked, &ans);
	ck_assert_int_eq(ans.type, DML__MSG_TYPE__PULL_REPLY);
	raw_open(env, port, DML__ROLE__CONTROL, 0, 1, 0, 0, &ctl);
	raw_clock(&a, 1);
	parked = raw_pull_send(&a, JOB, 10, 1);
	/* The CLOCK came on another connection than STATS asks on: wait for it. */
	for (int i = 0; i < WAIT_MS / 10 && stats_clock(&ctl, 9) != 1; i++)
		poll(NULL, 0, 10);
	ck_assert_int_eq(stats_clock(&ctl, 9), 1);

	/* Worker 11 makes no clock and has no pull waiting: the server tells
	 * the scheduler, once a pull has waited a second. */
	ck_assert_int_eq(dml_fake_sched_straggler_wait(f, 1, 0, WAIT_MS, &who, &at, &held_us), 0);
	ck_assert_uint_eq(who, 11);
	ck_assert_uint_eq(at, 0);
	ck_assert_uint_ge(held_us, 1000000);
	expect_log(s[0], "job 7: pulls have waited");
	ck_assert_int_eq(dml_fake_sched_evict(f, 1, JOB, 11), 0);
	raw_answer(&a, parked, &ans);
	ck_assert_int_eq(ans.type, DML__MSG_TYPE__PULL_REPLY);
	expect_log(s[0], "job 7: the scheduler lost worker 11 at clock 0: dropped from the "
		   "clock set, 1 connections closed; slowest clock is now 1");
	raw_expect_closed(&b);
	raw_close(&b);

	/* Back, it holds nobody back: it starts at the slowest clock. */
	raw_open(env, port, DML__ROLE__WORKER, 11, 1, JOB, 0, &b);
	ck_assert_int_eq(stats_clock(&ctl, 11), 1);
	parked = raw_pull_send(&a, JOB, 10, 2);
	raw_clock(&b, 2);
	raw_clock(&a, 2);
	raw_answer(&a, parked, &ans);
	ck_assert_int_eq(ans.type, DML__MSG_TYPE__PULL_REPLY);
	raw_close(&a);
	raw_close(&b);
	raw_close(&ctl);
	all_down(s, 1, f, env);
}
END_TEST

/* Server id with a [store] in the environment's folder, its port pinned. */
static struct dml_test_server *start_store_server(struct dml_test_env *env,
						  struct dml_fake_sched *f, uint32_t id,
						  char *addr, size_t addrlen)
{
	struct dml_test_server *s;
	char *store;

	ck_assert_int_gt(asprintf(&store, "[store]\npath = %s/store-%u\n",
				  dml_test_env_dir(env), id), 0);
	s = server_up(env, f, id, NULL, store, addr, addrlen);
	free(store);
	ck_assert_int_eq(dml_test_server_pin_port(s), 0);
	return s;
}

/* Servers 1 and 2 with a [store], job j (of run) installed at v1 on both. */
static void stores_at_v1(struct dml_test_env **env, struct dml_fake_sched **f,
			 struct job *j, struct dml_test_server **s, uint64_t run)
{
	const uint32_t ids2[] = { 1, 2 };

	ck_assert_int_eq(dml_test_env_new(env), 0);
	ck_assert_int_eq(dml_fake_sched_start(dml_test_env_secret(*env), f), 0);
	job_init(j, JOB);
	j->map.run = run;
	s[0] = start_store_server(*env, *f, 1, j->addr[1], sizeof(j->addr[1]));
	s[1] = start_store_server(*env, *f, 2, j->addr[2], sizeof(j->addr[2]));
	job_map(j, 1, ids2, 2, v1_ranges, 4);
	install_all(*f, j, ids2, 2, 0);
}

/* SIGKILL server id (s) and start it again; its log's size before. */
static size_t crash_restart(struct dml_fake_sched *f, struct dml_test_server *s, uint32_t id)
{
	size_t from = dml_test_server_log_size(s);

	dml_test_server_kill(s);
	ck_assert_int_eq(dml_test_server_restart(s), 0);
	ck_assert_int_eq(dml_fake_sched_wait_registered(f, DML__ROLE__SERVER, id, WAIT_MS, NULL,
							0), 0);
	return from;
}

/*
 * A server that joins a job with a [store] logs the rows that move in, and
 * acknowledges them once they are on disk (their senders free them then):
 * SIGKILLed after the move and a step, and given the map again, it serves
 * them from its log at once, bit for bit, momentum included, instead of
 * waiting for rows nobody holds any more.
 */
START_TEST(test_joiner_restart_keeps_moved_rows)
{
	static struct model md;
	static float before_d[DKEYS * DW], before_s[NSPARSE * SW];
	static float after_d[DKEYS * DW], after_s[NSPARSE * SW];
	const uint32_t ids3[] = { 1, 2, 3 }, id3[] = { 3 };
	struct dml_test_env *env;
	struct dml_fake_sched *f;
	struct dml_test_server *s[3];
	struct job j;
	dml_opts_t *o;
	dml_t *d;
	size_t from;

	stores_at_v1(&env, &f, &j, s, 0x5eed);
	first_steps(env, s, 2, &md, 12345, NULL, NULL);

	/* Server 3 joins: rows of both servers move to it; then a step. */
	s[2] = start_store_server(env, f, 3, j.addr[3], sizeof(j.addr[3]));
	job_map(&j, 2, ids3, 3, v2_ranges, 6);
	install_all(f, &j, ids3, 3, 0);
	expect_log(s[2], "job 7: map v2 complete in ");
	d = client(env, s, 3, 1, JOB, &o);
	step(d, &md, 2);
	pull_all(d, &md, before_d, before_s);
	dml_close(d);
	dml_opts_free(o);

	/* It dies; started again, the same map is ACKed from its log alone. */
	from = crash_restart(f, s[2], 3);
	install_all(f, &j, id3, 1, 0);
	{
		const char *const held[] = { "the log held them", NULL };

		ck_assert_int_ge(dml_test_server_log_wait(s[2], from, held, WAIT_MS), 0);
	}
	kept_then_step(env, s, 3, &md, before_d, before_s, after_d, after_s, 3,
		       "after the restart");
	all_down(s, 3, f, env);
}
END_TEST

/*
 * A server with a [store] that dies in the middle of a move it gives rows
 * in: servers 1 and 2 get v2 and trade rows, but server 3, which is to
 * receive from both, does not have v2 yet, so their rows for it wait.
 * Server 1 is SIGKILLed; started again and given v2, it rebuilds its rows
 * of v1 and what moved in from its log, ACKs v2 at once and sends server 3
 * its share (and server 2 again what it already has, which server 2
 * acknowledges unapplied). Every value arrives bit for bit.
 */
START_TEST(test_sender_restart_resumes_its_move)
{
	static struct model md;
	static float p1d[DKEYS * DW], p1s[NSPARSE * SW], p2d[DKEYS * DW], p2s[NSPARSE * SW];
	const uint32_t ids2[] = { 1, 2 }, ids3[] = { 1, 2, 3 };
	const char *const resumed[] = { "resuming the move from map v1 to v2", NULL };
	struct dml_test_env *env;
	struct dml_fake_sched *f;
	struct dml_test_server *s[3];
	struct job j;
	size_t from;

	stores_at_v1(&env, &f, &j, s, 0xbeef);
	first_steps(env, s, 2, &md, 4242, p1d, p1s);

	/* v2 on servers 1 and 2 only: server 3 is up but has no job yet. */
	s[2] = start_store_server(env, f, 3, j.addr[3], sizeof(j.addr[3]));
	job_map(&j, 2, ids3, 3, v2_ranges, 6);
	install_all(f, &j, ids2, 2, 0);
	expect_log(s[0], "job 7: map v2: giving");

	from = crash_restart(f, s[0], 1);
	install_all(f, &j, ids2, 1, 0);
	ck_assert_int_ge(dml_test_server_log_wait(s[0], from, resumed, WAIT_MS), 0);

	/* Server 3 gets v2 at last: both send it its rows. */
	install_all(f, &j, ids3 + 2, 1, 0);
	expect_log(s[2], "job 7: map v2 complete in ");
	kept_then_step(env, s, 3, &md, p1d, p1s, p2d, p2s, 2, "after the resumed move");
	all_down(s, 3, f, env);
}
END_TEST

void check_remap_faults_tests(TCase *tc)
{
	tcase_add_test(tc, test_evict_drops_a_hung_worker);
	tcase_add_test(tc, test_joiner_restart_keeps_moved_rows);
	tcase_add_test(tc, test_sender_restart_resumes_its_move);
}
