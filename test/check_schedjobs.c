/*
 * check_schedjobs.c - integration tests of dml-sched's job side: a real
 * dml-sched, driven by in-process peers built on the connection layer (a
 * control client like dmlctl, and stand-ins for servers and workers that
 * register, receive SHARDMAP and ASSIGN, and answer them as the test says),
 * plus real dml-servers registering through their link. This file holds
 * the scheduler's start and stop, the first tests and the suite; the
 * peers are in schedjobs_peer.c, the other tests in
 * check_schedjobs_workers.c, check_schedjobs_ckpt.c and
 * check_schedjobs_routes.c.
 *
 * Covered: SUBMIT (accepted, or refused with the spec's reason), JOBS (all,
 * one, unknown, over max_meta), JOB_CONTROL (errors for an unknown job or a
 * state the action does not apply to; pause, resume, stop), SHARDMAP asked
 * by a control client and by an unregistered worker-role connection, a
 * pending job waiting for a worker; the flow of a job: shard map v1 to
 * every server, the job waiting for the one that does not ACK, ASSIGN to
 * the workers only once every server ACKed, pause/resume reaching the
 * workers, a server joining (map v2 to every server), a server and a
 * worker coming back (the map and the assignment sent again), a worker
 * leaving (its partitions to the other), PROGRESS ending the job (never
 * answered, and shown in the metrics);
 * a server refusing a map (the job fails, the next job's map leaves it
 * out), a worker refusing its assignment (lost to the job); a worker a
 * server names as holding the others (set aside and evicted); `dmlctl
 * checkpoint` answered by the round started after it (one asked during a
 * round waits for the next), a failed round's reason, a waiter hanging up;
 * the
 * scheduler's metrics and log lines; the zone aggregators each worker is
 * told to route through (check_schedjobs_routes.c).
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

#define TEST_TIMEOUT_S 60

/* ---- the scheduler ------------------------------------------------------- */

void sched_up(struct sched *t, const char *extra)
{
	struct dml_test_sched_conf sc = { 0 };
	char *text = NULL;

	memset(t, 0, sizeof(*t));
	ck_assert_int_eq(dml_test_env_new(&t->env), 0);
	if (asprintf(&t->metrics_port_file, "%s/sched-metrics.port",
		     dml_test_env_dir(t->env)) < 0 ||
	    asprintf(&text, "metrics_listen = 127.0.0.1:0\nmetrics_port_file = %s\n%s",
		     t->metrics_port_file, extra ? extra : "") < 0)
		ck_abort_msg("out of memory");
	/* Nodes of the tests do not heartbeat: they stay alive for a minute. */
	sc.heartbeat_interval_ms = 1000;
	sc.suspect_after_ms = 60000;
	sc.dead_after_ms = 120000;
	sc.extra = text;
	ck_assert_int_eq(dml_test_sched_start(t->env, &sc, &t->proc), 0);
	free(text);
	net_init(&t->net, t->env, dml_test_server_port(t->proc));
	t->ctl = peer_connect(&t->net, DML__ROLE__CONTROL, 0);
}

/* Free the peers first (they may still be told things), then stop cleanly. */
void sched_down(struct sched *t, struct peer **peers, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (peers[i])
			peer_free(peers[i]);
	peer_free(t->ctl);
	net_destroy(&t->net);
	ck_assert_int_eq(dml_test_server_stop(t->proc, DML_TEST_STOP_TIMEOUT_MS), 0);
	free(t->metrics_port_file);
	dml_test_env_free(t->env);
}

void sched_log_wait(struct sched *t, const char *needle)
{
	const char *const needles[] = { needle, NULL };

	ck_assert_int_eq(dml_test_server_log_wait(t->proc, 0, needles, WAIT_MS), 0);
}

/* The metrics text holds this sample line (soon: PROGRESS is not answered,
 * so nothing says when the scheduler took it in). */
static void metrics_has(struct sched *t, const char *line)
{
	uint64_t end = now_ms() + WAIT_MS;
	uint16_t port;
	int status;
	char *body = NULL;

	ck_assert_int_eq(dml_test_port_file_read(t->metrics_port_file, &port), 0);
	for (;;) {
		ck_assert_int_eq(dml_test_http_request(port, "GET", "/metrics", WAIT_MS,
						       &status, &body), 0);
		ck_assert_int_eq(status, 200);
		if (strstr(body, line) || now_ms() >= end)
			break;
		free(body);
		net_run(&t->net, 30);
	}
	ck_assert_msg(strstr(body, line) != NULL, "no '%s' in the metrics:\n%s", line, body);
	free(body);
}

/* ---- tests ----------------------------------------------------------------- */

/* Real servers register; with no worker the job waits; requests and their
 * errors; a stop; metrics; a job list over max_meta. */
START_TEST(test_pending_job_and_requests)
{
	struct sched t;
	struct dml_test_server *srv[2];
	struct dml_test_server_conf sc = { 0 };
	struct peer *lib;
	Dml__Meta m = DML__META__INIT, *r;
	Dml__JobSpec bad = DML__JOB_SPEC__INIT;
	char *line;
	uint32_t id;

	sched_up(&t, "\n[limits]\nmax_meta = 1K\n");
	line = dml_test_scheduler_line(t.proc);
	sc.server_extra = line;
	sc.tables = "[table]\nid = 0\nkind = dense\nkeys = 64\n";
	for (uint32_t i = 0; i < 2; i++) {
		sc.node_id = i + 1;
		ck_assert_int_eq(dml_test_server_start(t.env, &sc, &srv[i]), 0);
	}
	free(line);

	id = submit(t.ctl, "pending-one", "");
	ck_assert_uint_eq(id, 1);
	wait_reason(t.ctl, id, DML__JOB_STATE__PENDING, "waiting for a worker, none alive");
	sched_log_wait(&t, "job 1 (pending-one): submitted from");

	/* A spec the scheduler refuses, with the reason. */
	m.type = DML__MSG_TYPE__SUBMIT;
	m.job_spec = &bad;
	assert_error(peer_request(t.ctl, &m), DML_EINVAL, "job spec: name");

	/* Unknown jobs, maps that do not exist yet. */
	memset(&m, 0, sizeof(m));
	dml__meta__init(&m);
	m.type = DML__MSG_TYPE__JOBS;
	m.job = 7;
	assert_error(peer_request(t.ctl, &m), DML_ENOTFOUND, "no job 7");
	assert_error(shardmap_ask(t.ctl, id), DML_ENOTFOUND, "job 1 has no shard map yet");
	assert_error(shardmap_ask(t.ctl, 0), DML_ENOTFOUND, "no job is running");
	assert_error(control(t.ctl, 9, DML__JOB_ACTION__STOP), DML_ENOTFOUND, "no job 9");
	assert_error(control(t.ctl, id, DML__JOB_ACTION__PAUSE), DML_ESTATE,
		     "job 1 is pending");
	assert_error(control(t.ctl, id, 42), DML_EINVAL, "unknown action");

	/* libdml's connection asks for maps without registering. */
	lib = peer_connect(&t.net, DML__ROLE__WORKER, 3);
	assert_error(shardmap_ask(lib, id), DML_ENOTFOUND, "no shard map yet");
	/* An unregistered worker may not do anything else; PROGRESS gets no
	 * answer at all (the next answer is the JOBS reply's). */
	progress(lib, id, 1, 0);
	memset(&m, 0, sizeof(m));
	dml__meta__init(&m);
	m.type = DML__MSG_TYPE__JOBS;
	assert_error(peer_request(lib, &m), DML_ESTATE, "register before sending jobs");
	ck_assert_uint_eq(lib->n, 0);
	peer_free(lib);

	control_ok(t.ctl, id, DML__JOB_ACTION__STOP);
	r = job_status(t.ctl, id);
	ck_assert_int_eq(r->jobs[0]->state, DML__JOB_STATE__STOPPED);
	ck_assert_str_eq(r->jobs[0]->reason, "stopped by operator");
	ck_assert_str_eq(r->jobs[0]->name, "pending-one");
	ck_assert_uint_eq(r->jobs[0]->shard_map_version, 0);
	take_free(r);
	assert_error(control(t.ctl, id, DML__JOB_ACTION__STOP), DML_ESTATE,
		     "job 1 is stopped");
	sched_log_wait(&t, "job 1 (pending-one): pending -> stopped: stopped by operator");

	metrics_has(&t, "dml_sched_jobs{state=\"stopped\"} 1");
	metrics_has(&t, "dml_sched_servers{state=\"alive\"} 2");
	metrics_has(&t, "dml_sched_requests_total{type=\"submit\"} 2");
	metrics_has(&t, "dml_sched_active_job 0");

	/* Each JobStatus carries its spec: a few jobs outgrow 1K of metadata,
	 * while one of them still fits. */
	for (int i = 0; i < 6; i++)
		submit(t.ctl, "filler", "");
	memset(&m, 0, sizeof(m));
	dml__meta__init(&m);
	m.type = DML__MSG_TYPE__JOBS;
	assert_error(peer_request(t.ctl, &m), DML_EFRAME_META, "over max_meta (1024)");
	take_free(job_status(t.ctl, 3));

	for (int i = 0; i < 2; i++)
		ck_assert_int_eq(dml_test_server_stop(srv[i], DML_TEST_STOP_TIMEOUT_MS), 0);
	sched_down(&t, NULL, 0);
}
END_TEST

/* The whole flow with stand-in servers and workers. */
START_TEST(test_job_flow)
{
	struct sched t;
	struct peer *p[6] = { NULL };
	struct peer **srv = p, **wk = p + 3;     /* servers 1..3, workers 1..2 */
	Dml__Meta *m, *maps[3];
	uint32_t id;

	sched_up(&t, NULL);
	srv[0] = node_up(&t.net, DML__ROLE__SERVER, 1);
	srv[1] = node_up(&t.net, DML__ROLE__SERVER, 2);
	wk[0] = node_up(&t.net, DML__ROLE__WORKER, 1);
	wk[1] = node_up(&t.net, DML__ROLE__WORKER, 2);

	id = submit(t.ctl, "flow", "");
	for (int i = 0; i < 2; i++) {
		maps[i] = expect_map(srv[i], id, 1, 2);
		ck_assert_uint_eq(maps[i]->job_spec->workers, 2);
		ck_assert_str_eq(maps[i]->job_spec->name, "flow");
	}
	/* Equal memory: the 64 keys split 32/32, lower id first. */
	ck_assert_uint_eq(maps[0]->shard_map->n_ranges, 2);
	ck_assert_uint_eq(maps[0]->shard_map->ranges[0]->server, 1);
	ck_assert_uint_eq(maps[0]->shard_map->ranges[0]->end, 32);
	m = job_status(t.ctl, id);
	ck_assert_int_eq(m->jobs[0]->state, DML__JOB_STATE__RUNNING);
	/* "installing tables on 2 servers" for a second, then which it waits for. */
	ck_assert_msg(strncmp(m->jobs[0]->reason, "installing tables", 17) == 0, "reason '%s'",
		      m->jobs[0]->reason);
	ck_assert_uint_eq(m->jobs[0]->shard_map_version, 1);
	take_free(m);

	/* One server ACKs, the other does not: the job waits for it, and no
	 * worker hears anything. */
	peer_ack(srv[0], maps[0]);
	wait_reason(t.ctl, id, DML__JOB_STATE__RUNNING,
		    "installing tables: waiting for server 2");
	ck_assert_ptr_null(peer_take(wk[0], DML__MSG_TYPE__ASSIGN, 0, 0));
	ck_assert_ptr_null(peer_take(wk[1], DML__MSG_TYPE__ASSIGN, 0, 0));
	peer_ack(srv[1], maps[1]);
	take_free(maps[0]);
	take_free(maps[1]);
	for (int i = 0; i < 2; i++) {
		m = expect_assign(wk[i], DML__JOB_STATE__RUNNING, 8);
		ck_assert_uint_eq(m->assignment->num_partitions, 16);
		ck_assert_uint_eq(m->assignment->job, id);
		ck_assert_str_eq(m->job_spec->app, "lsq");
		peer_ack(wk[i], m);
		take_free(m);
	}
	wait_reason(t.ctl, id, DML__JOB_STATE__RUNNING, "running on 2 workers");
	sched_log_wait(&t, "job 1 (flow): shard map v1 installed on 2 servers");

	/* libdml's way to the map: an unregistered worker connection, job 0. */
	{
		struct peer *lib = peer_connect(&t.net, DML__ROLE__WORKER, 1);

		m = shardmap_ask(lib, 0);
		ck_assert_int_eq(m->type, DML__MSG_TYPE__SHARDMAP_REPLY);
		ck_assert_uint_eq(m->shard_map->version, 1);
		ck_assert_uint_eq(m->job, id);
		take_free(m);
		peer_free(lib);
	}

	/* Pause and resume reach the workers. */
	control_ok(t.ctl, id, DML__JOB_ACTION__PAUSE);
	for (int i = 0; i < 2; i++)
		take_free(expect_assign(wk[i], DML__JOB_STATE__PAUSED, 8));
	control_ok(t.ctl, id, DML__JOB_ACTION__RESUME);
	for (int i = 0; i < 2; i++)
		take_free(expect_assign(wk[i], DML__JOB_STATE__RUNNING, 8));

	/* A server joins: v2 over three servers, to each of them. */
	srv[2] = node_up(&t.net, DML__ROLE__SERVER, 3);
	for (int i = 0; i < 3; i++) {
		maps[i] = expect_map(srv[i], id, 2, 3);
		peer_ack(srv[i], maps[i]);
		take_free(maps[i]);
	}
	sched_log_wait(&t, "job 1 (flow): shard map v2 installed on 3 servers");
	m = shardmap_ask(t.ctl, id);
	ck_assert_uint_eq(m->shard_map->version, 2);
	take_free(m);

	/* A server of the map that comes back (a new process) gets the map
	 * again and the job waits for its ACK; a worker still in the job gets
	 * its assignment again, and nobody else hears anything. */
	peer_free(srv[0]);
	wait_node_state(t.ctl, DML__ROLE__SERVER, 1, DML__NODE_STATE__SUSPECT);
	srv[0] = node_up(&t.net, DML__ROLE__SERVER, 1);
	m = expect_map(srv[0], id, 2, 3);
	wait_reason(t.ctl, id, DML__JOB_STATE__RUNNING,
		    "installing shard map v2: waiting for server 1");
	peer_ack(srv[0], m);
	take_free(m);
	wait_reason(t.ctl, id, DML__JOB_STATE__RUNNING, "running on 2 workers");
	peer_free(wk[0]);
	wait_node_state(t.ctl, DML__ROLE__WORKER, 1, DML__NODE_STATE__SUSPECT);
	wk[0] = node_up(&t.net, DML__ROLE__WORKER, 1);
	m = expect_assign(wk[0], DML__JOB_STATE__RUNNING, 8);
	ck_assert_uint_eq(m->assignment->version, 1);
	take_free(m);
	ck_assert_ptr_null(peer_take(wk[1], DML__MSG_TYPE__ASSIGN, 0, 100));
	ck_assert_ptr_null(peer_take(srv[1], DML__MSG_TYPE__SHARDMAP, 0, 0));

	/* Worker 2 leaves: its partitions go to worker 1. */
	{
		Dml__Meta bye = DML__META__INIT, *r;

		bye.type = DML__MSG_TYPE__BYE;
		r = peer_request(wk[1], &bye);
		ck_assert_int_eq(r->type, DML__MSG_TYPE__ACK);
		take_free(r);
	}
	m = expect_assign(wk[0], DML__JOB_STATE__RUNNING, 16);
	ck_assert_uint_eq(m->assignment->version, 2);
	take_free(m);
	m = job_status(t.ctl, id);
	ck_assert_uint_eq(m->jobs[0]->n_workers, 2);
	ck_assert_int_eq(m->jobs[0]->workers[1]->state, DML__NODE_STATE__DEAD);
	ck_assert_uint_eq(m->jobs[0]->workers[1]->partitions, 0);
	ck_assert_uint_eq(m->jobs[0]->shard_map_version, 2);
	take_free(m);

	/* Reports show in the metrics. */
	progress(wk[0], id, 2, 0);
	metrics_has(&t, "dml_sched_job_clock 2");
	metrics_has(&t, "dml_sched_worker_examples_per_second{worker=\"1\"} 50");
	metrics_has(&t, "dml_sched_worker_partitions{worker=\"1\"} 16");
	metrics_has(&t, "dml_sched_worker_batch_size{worker=\"1\"} ");
	metrics_has(&t, "dml_sched_worker_speed{worker=\"1\"} ");
	metrics_has(&t, "dml_sched_worker_link_bytes_per_second{worker=\"1\"} ");
	metrics_has(&t, "dml_sched_job_loss 0.5");
	metrics_has(&t, "dml_sched_shard_map_version 2");
	metrics_has(&t, "dml_sched_workers{state=\"dead\"} 1");

	/* Progress for a job it is not in is ignored silently; reaching
	 * max_clocks ends the job, and worker 1 hears it. */
	progress(wk[0], 9, 1, 0);
	progress(wk[0], id, 5, 1);
	m = expect_assign(wk[0], DML__JOB_STATE__DONE, 0);
	take_free(m);
	ck_assert_ptr_null(peer_take(wk[0], DML__MSG_TYPE__ERROR, 0, 0));
	wait_reason(t.ctl, id, DML__JOB_STATE__DONE, "every worker reached 5 clocks");
	sched_log_wait(&t, "job 1 (flow): running -> done: every worker reached 5 clocks");
	metrics_has(&t, "dml_sched_jobs{state=\"done\"} 1");
	metrics_has(&t, "dml_sched_shardmap_sent_total 6");

	sched_down(&t, p, 6);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("schedjobs");
	TCase *tc = tcase_create("core");

	signal(SIGPIPE, SIG_IGN);
	tcase_set_timeout(tc, TEST_TIMEOUT_S);
	tcase_add_test(tc, test_pending_job_and_requests);
	tcase_add_test(tc, test_job_flow);
	check_schedjobs_add_workers(tc);
	check_schedjobs_add_ckpt(tc);
	check_schedjobs_add_routes(tc);
	suite_add_tcase(s, tc);
	return dml_check_run(s);
}
