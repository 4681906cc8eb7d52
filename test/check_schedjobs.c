/*
 * check_schedjobs.c - integration tests of dml-sched's job side: a real
 * dml-sched, driven by in-process peers built on the connection layer (a
 * control client like dmlctl, and stand-ins for servers and workers that
 * register, receive SHARDMAP and ASSIGN, and answer them as the test says),
 * plus real dml-servers registering through their link.
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
 * scheduler's metrics and log lines.
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

#include "assign.h"
#include "auth.h"
#include "check_run.h"
#include "conn.h"
#include "dml_error.h"
#include "harness.h"
#include "job_spec.h"
#include "mapplan.h"
#include "util.h"

#define TEST_TIMEOUT_S 60
#define WAIT_MS 10000
#define INBOX_MAX 64

/* A short job: lsq on 64 features, stops at clock 5. */
static const char *const job_text =
	"[job]\nname = %s\napp = lsq\ndata = synthetic\nstaleness = 0\nbatch_size = 8\n"
	"max_clocks = 5\nexamples = 1000\ndim = 64\n%s"
	"[table]\nid = 0\nkind = dense\nwidth = 1\nkeys = 64\noptimizer = sgd\nlr = 0.05\n";

/* ---- in-process peers ------------------------------------------------------ */

struct net {
	struct event_base *base;
	struct event *wake;        /* keeps loop turns short */
	uint8_t *secret;
	size_t secret_len;
	uint16_t port;
};

struct peer {
	struct net *net;
	struct dml_conn *conn;
	uint32_t role, node_id;
	int ready, closed;
	uint64_t next_id;
	Dml__Meta *inbox[INBOX_MAX];
	size_t n;
};

static void wake_cb(evutil_socket_t fd, short what, void *arg)
{
}

static void net_init(struct net *net, struct dml_test_env *env, uint16_t port)
{
	struct timeval tv = { 0, 10000 };

	memset(net, 0, sizeof(*net));
	net->base = event_base_new();
	ck_assert_ptr_nonnull(net->base);
	ck_assert_int_eq(dml_secret_load(dml_test_env_secret(env), &net->secret,
					 &net->secret_len), 0);
	net->port = port;
	net->wake = event_new(net->base, -1, EV_PERSIST, wake_cb, NULL);
	event_add(net->wake, &tv);
}

static void net_destroy(struct net *net)
{
	event_free(net->wake);
	event_base_free(net->base);
	dml_secret_free(net->secret, net->secret_len);
}

static Dml__Meta *meta_copy(const Dml__Meta *m)
{
	Dml__Meta *copy = dml_msg_copy(&m->base);

	ck_assert_ptr_nonnull(copy);
	return copy;
}

static void on_ready(struct dml_conn *c, void *arg)
{
	((struct peer *)arg)->ready = 1;
}

static int on_frame(struct dml_conn *c, const Dml__Meta *m, const uint8_t *payload,
		    size_t len, void *arg)
{
	struct peer *p = arg;

	ck_assert_uint_lt(p->n, INBOX_MAX);
	p->inbox[p->n++] = meta_copy(m);
	return 0;
}

static void on_close(struct dml_conn *c, int err, void *arg)
{
	struct peer *p = arg;

	p->conn = NULL;
	p->closed = 1;
}

static const struct dml_conn_ops peer_ops = {
	.on_ready = on_ready,
	.on_frame = on_frame,
	.on_close = on_close,
};

static uint64_t now_ms(void)
{
	return dml_now_ns() / 1000000u;
}

/* Turn the loop for ms milliseconds. */
static void net_run(struct net *net, int ms)
{
	uint64_t end = now_ms() + (uint64_t)ms;

	while (now_ms() < end)
		event_base_loop(net->base, EVLOOP_ONCE);
}

static struct peer *peer_connect(struct net *net, uint32_t role, uint32_t node_id)
{
	struct peer *p = dml_xcalloc(1, sizeof(*p));
	struct dml_conn_conf cc;
	uint64_t end = now_ms() + WAIT_MS;

	dml_conn_conf_default(&cc);
	cc.secret = net->secret;
	cc.secret_len = net->secret_len;
	cc.cluster = "dml";
	cc.role = role;
	cc.node_id = node_id;
	ck_assert_int_eq(dml_random_bytes(&cc.incarnation, sizeof(cc.incarnation)), 0);
	p->net = net;
	p->role = role;
	p->node_id = node_id;
	ck_assert_int_eq(dml_conn_connect(net->base, "127.0.0.1", net->port, &cc, &peer_ops, p,
					  &p->conn), 0);
	while (!p->ready && !p->closed && now_ms() < end)
		event_base_loop(net->base, EVLOOP_ONCE);
	ck_assert_msg(p->ready, "peer %u could not connect", node_id);
	return p;
}

/* Close, wait for the teardown, free what it received. */
static void peer_free(struct peer *p)
{
	uint64_t end = now_ms() + WAIT_MS;

	if (p->conn)
		dml_conn_close(p->conn, 0);
	while (!p->closed && now_ms() < end)
		event_base_loop(p->net->base, EVLOOP_ONCE);
	for (size_t i = 0; i < p->n; i++)
		dml__meta__free_unpacked(p->inbox[i], NULL);
	free(p);
}

/* The first frame received of this type (and request id, unless 0), within
 * ms; NULL if none came. The caller frees it with dml__meta__free_unpacked. */
static Dml__Meta *peer_take(struct peer *p, int type, uint64_t request_id, int ms)
{
	uint64_t end = now_ms() + (uint64_t)ms;

	for (;;) {
		for (size_t i = 0; i < p->n; i++) {
			Dml__Meta *m = p->inbox[i];

			if ((type && (int)m->type != type) ||
			    (request_id && m->request_id != request_id))
				continue;
			memmove(&p->inbox[i], &p->inbox[i + 1],
				(p->n - i - 1) * sizeof(*p->inbox));
			p->n--;
			return m;
		}
		if (now_ms() >= end || p->closed)
			return NULL;
		event_base_loop(p->net->base, EVLOOP_ONCE);
	}
}

static void peer_send(struct peer *p, Dml__Meta *m)
{
	if (!m->request_id)
		m->request_id = ++p->next_id;
	ck_assert_int_eq(dml_conn_send(p->conn, m, NULL, 0, DML_SEND_COPY), 0);
}

/* Send m and wait for what answers it (reply or ERROR). */
static Dml__Meta *peer_request(struct peer *p, Dml__Meta *m)
{
	Dml__Meta *r;

	m->request_id = 0;
	peer_send(p, m);
	r = peer_take(p, 0, m->request_id, WAIT_MS);
	ck_assert_msg(r != NULL, "no answer to %s", dml_msg_type_name(m->type));
	return r;
}

/* Assert r is an ERROR with this code whose message holds needle; frees r. */
static void assert_error(Dml__Meta *r, int code, const char *needle)
{
	ck_assert_int_eq(r->type, DML__MSG_TYPE__ERROR);
	ck_assert_int_eq(r->error->code, code);
	ck_assert_msg(strstr(r->error->message, needle) != NULL, "'%s' does not say '%s'",
		      r->error->message, needle);
	dml__meta__free_unpacked(r, NULL);
}

static void peer_register(struct peer *p, uint64_t memory, double rate)
{
	Dml__Meta m = DML__META__INIT, *r;
	Dml__NodeInfo info = DML__NODE_INFO__INIT;
	Dml__Profile prof = DML__PROFILE__INIT;
	char addr[32];

	snprintf(addr, sizeof(addr), "127.0.0.1:%u", 20000 + p->node_id);
	info.role = p->role;
	info.node_id = p->node_id;
	info.address = p->role == DML__ROLE__SERVER ? addr : (char *)"";
	prof.memory_bytes = memory;
	prof.examples_per_s = rate;
	info.profile = &prof;
	m.type = DML__MSG_TYPE__REGISTER;
	m.node = &info;
	r = peer_request(p, &m);
	ck_assert_int_eq(r->type, DML__MSG_TYPE__REGISTER_REPLY);
	dml__meta__free_unpacked(r, NULL);
}

static struct peer *node_up(struct net *net, uint32_t role, uint32_t id)
{
	struct peer *p = peer_connect(net, role, id);

	peer_register(p, role == DML__ROLE__SERVER ? (UINT64_C(1) << 30) : 0, 100);
	return p;
}

static void peer_ack(struct peer *p, const Dml__Meta *req)
{
	Dml__Meta m = DML__META__INIT;

	m.type = DML__MSG_TYPE__ACK;
	m.request_id = req->request_id;
	peer_send(p, &m);
}

static void take_free(Dml__Meta *m)
{
	dml__meta__free_unpacked(m, NULL);
}

/* ---- requests -------------------------------------------------------------- */

static uint32_t submit(struct peer *ctl, const char *name, const char *extra)
{
	Dml__Meta m = DML__META__INIT, *r;
	Dml__JobSpec *spec;
	char text[1024], err[256];
	uint32_t id;

	snprintf(text, sizeof(text), job_text, name, extra);
	ck_assert_msg(dml_job_file_parse_string("job", text, &spec, err, sizeof(err)) == 0,
		      "job text: %s", err);
	m.type = DML__MSG_TYPE__SUBMIT;
	m.job_spec = spec;
	r = peer_request(ctl, &m);
	dml_job_spec_free(spec);
	ck_assert_msg(r->type == DML__MSG_TYPE__SUBMIT_REPLY, "submit: %s",
		      r->error ? r->error->message : dml_msg_type_name(r->type));
	id = r->job;
	dml__meta__free_unpacked(r, NULL);
	return id;
}

/* JOBS for one job; the reply holds it as jobs[0]. */
static Dml__Meta *job_status(struct peer *ctl, uint32_t job)
{
	Dml__Meta m = DML__META__INIT, *r;

	m.type = DML__MSG_TYPE__JOBS;
	m.job = job;
	r = peer_request(ctl, &m);
	ck_assert_int_eq(r->type, DML__MSG_TYPE__JOBS_REPLY);
	ck_assert_uint_eq(r->n_jobs, 1);
	ck_assert_uint_eq(r->jobs[0]->id, job);
	return r;
}

/* Poll JOBS until the job's reason is `reason` (state too, unless 0). */
static void wait_reason(struct peer *ctl, uint32_t job, int state, const char *reason)
{
	uint64_t end = now_ms() + WAIT_MS;
	char last[256] = "";

	while (now_ms() < end) {
		Dml__Meta *r = job_status(ctl, job);
		int ok = strcmp(r->jobs[0]->reason, reason) == 0 &&
			 (!state || (int)r->jobs[0]->state == state);

		snprintf(last, sizeof(last), "%s: %s", dml_job_state_name(r->jobs[0]->state),
			 r->jobs[0]->reason);
		dml__meta__free_unpacked(r, NULL);
		if (ok)
			return;
		net_run(ctl->net, 30);
	}
	ck_abort_msg("job %u never said '%s' (last: '%s')", job, reason, last);
}

/* Poll NODES until (role, id) is in this state: a closed connection has
 * been seen, say, before the node registers again. */
static void wait_node_state(struct peer *ctl, uint32_t role, uint32_t id, int state)
{
	uint64_t end = now_ms() + WAIT_MS;
	int found = 0;

	while (!found && now_ms() < end) {
		Dml__Meta m = DML__META__INIT, *r;

		m.type = DML__MSG_TYPE__NODES;
		r = peer_request(ctl, &m);
		ck_assert_int_eq(r->type, DML__MSG_TYPE__NODES_REPLY);
		for (size_t i = 0; i < r->n_nodes; i++)
			found |= r->nodes[i]->role == role && r->nodes[i]->node_id == id &&
				 (int)r->nodes[i]->state == state;
		take_free(r);
		if (!found)
			net_run(ctl->net, 20);
	}
	ck_assert_msg(found, "node %u never got to state %d", id, state);
}

static Dml__Meta *control(struct peer *ctl, uint32_t job, Dml__JobAction action)
{
	Dml__Meta m = DML__META__INIT;

	m.type = DML__MSG_TYPE__JOB_CONTROL;
	m.job = job;
	m.action = action;
	return peer_request(ctl, &m);
}

static void control_ok(struct peer *ctl, uint32_t job, Dml__JobAction action)
{
	Dml__Meta *r = control(ctl, job, action);

	ck_assert_msg(r->type == DML__MSG_TYPE__ACK, "control: %s",
		      r->error ? r->error->message : dml_msg_type_name(r->type));
	dml__meta__free_unpacked(r, NULL);
}

static Dml__Meta *shardmap_ask(struct peer *p, uint32_t job)
{
	Dml__Meta m = DML__META__INIT;

	m.type = DML__MSG_TYPE__SHARDMAP;
	m.job = job;
	return peer_request(p, &m);
}

static void progress(struct peer *w, uint32_t job, uint64_t clock, int finished)
{
	Dml__Meta m = DML__META__INIT;
	Dml__Progress p = DML__PROGRESS__INIT;

	p.job = job;
	p.clock = clock;
	p.examples = clock * 8;
	p.examples_per_s = 50;
	p.loss = 0.5;
	p.finished = finished;
	m.type = DML__MSG_TYPE__PROGRESS;
	m.job = job;
	m.progress = &p;
	peer_send(w, &m);
}

/*
 * A worker's report of the partitions it walks (at 100 + p) and of those it
 * let go of (at 200 + p).
 */
static void progress_walked(struct peer *w, uint32_t job, const uint32_t *parts, size_t n,
			    const uint32_t *gone, size_t ngone)
{
	Dml__Meta m = DML__META__INIT;
	Dml__Progress p = DML__PROGRESS__INIT;
	uint64_t pos[32], gone_pos[32];

	ck_assert(n <= 32 && ngone <= 32);
	for (size_t k = 0; k < n; k++)
		pos[k] = 100 + parts[k];
	for (size_t k = 0; k < ngone; k++)
		gone_pos[k] = 200 + gone[k];
	p.job = job;
	p.clock = 1;
	p.examples = 8;
	p.examples_per_s = 50;
	p.loss = 0.5;
	p.partitions = (uint32_t *)parts;
	p.n_partitions = p.n_positions = n;
	p.positions = pos;
	p.released = (uint32_t *)gone;
	p.n_released = p.n_released_positions = ngone;
	p.released_positions = gone_pos;
	m.type = DML__MSG_TYPE__PROGRESS;
	m.job = job;
	m.progress = &p;
	peer_send(w, &m);
}

static int has_part(const uint32_t *parts, size_t n, uint32_t q)
{
	for (size_t k = 0; k < n; k++)
		if (parts[k] == q)
			return 1;
	return 0;
}

/* The SHARDMAP a server gets next: valid for its spec, at this version. */
static Dml__Meta *expect_map(struct peer *srv, uint32_t job, uint64_t version,
			     size_t nservers)
{
	Dml__Meta *m = peer_take(srv, DML__MSG_TYPE__SHARDMAP, 0, WAIT_MS);
	char err[160] = "";

	ck_assert_msg(m != NULL, "server %u got no shard map", srv->node_id);
	ck_assert_ptr_nonnull(m->shard_map);
	ck_assert_ptr_nonnull(m->job_spec);
	ck_assert_uint_eq(m->job, job);
	ck_assert_uint_eq(m->shard_map->job, job);
	ck_assert_uint_eq(m->shard_map->version, version);
	ck_assert_uint_eq(m->shard_map->n_servers, nservers);
	ck_assert_msg(dml_mapplan_check(m->shard_map, m->job_spec, err, sizeof(err)) == 0,
		      "map: %s", err);
	ck_assert_int_eq(dml_job_spec_check(m->job_spec, err, sizeof(err)), 0);
	return m;
}

static Dml__Meta *expect_assign(struct peer *w, Dml__JobState state, size_t parts)
{
	Dml__Meta *m = peer_take(w, DML__MSG_TYPE__ASSIGN, 0, WAIT_MS);

	ck_assert_msg(m != NULL, "worker %u got no assignment", w->node_id);
	ck_assert_int_eq(m->assignment->state, state);
	ck_assert_uint_eq(m->assignment->n_partitions, parts);
	return m;
}

/* ---- the scheduler ------------------------------------------------------- */

struct sched {
	struct dml_test_env *env;
	struct dml_test_server *proc;
	struct net net;
	struct peer *ctl;
	char *metrics_port_file;
};

static void sched_up(struct sched *t, const char *extra)
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
static void sched_down(struct sched *t, struct peer **peers, size_t n)
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

static void sched_log_wait(struct sched *t, const char *needle)
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
static void peer_refuse(struct peer *p, const Dml__Meta *req, int code, const char *why)
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

int main(void)
{
	Suite *s = suite_create("schedjobs");
	TCase *tc = tcase_create("core");

	signal(SIGPIPE, SIG_IGN);
	tcase_set_timeout(tc, TEST_TIMEOUT_S);
	tcase_add_test(tc, test_pending_job_and_requests);
	tcase_add_test(tc, test_job_flow);
	tcase_add_test(tc, test_partitions_handed_on);
	tcase_add_test(tc, test_refusals);
	tcase_add_test(tc, test_straggler_evicted);
	tcase_add_test(tc, test_checkpoint_asked_during_a_round);
	suite_add_tcase(s, tc);
	return dml_check_run(s);
}
