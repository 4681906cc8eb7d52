/*
 * The in-process peers of check_schedjobs: a control client like dmlctl,
 * and stand-ins for servers and workers built on the connection layer that
 * register, take what the scheduler sends and answer it as a test says;
 * and the requests the tests make through them (SUBMIT, JOBS, JOB_CONTROL,
 * SHARDMAP, PROGRESS) with what they expect back.
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

/* A short job: lsq on 64 features, stops at clock 5. */
static const char *const job_text =
	"[job]\nname = %s\napp = lsq\ndata = synthetic\nstaleness = 0\nbatch_size = 8\n"
	"max_clocks = 5\nexamples = 1000\ndim = 64\n%s"
	"[table]\nid = 0\nkind = dense\nwidth = 1\nkeys = 64\noptimizer = sgd\nlr = 0.05\n";

/* ---- in-process peers ------------------------------------------------------ */

static void wake_cb(evutil_socket_t fd, short what, void *arg)
{
}

void net_init(struct net *net, struct dml_test_env *env, uint16_t port)
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

void net_destroy(struct net *net)
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

uint64_t now_ms(void)
{
	return dml_now_ns() / 1000000u;
}

/* Turn the loop for ms milliseconds. */
void net_run(struct net *net, int ms)
{
	uint64_t end = now_ms() + (uint64_t)ms;

	while (now_ms() < end)
		event_base_loop(net->base, EVLOOP_ONCE);
}

struct peer *peer_connect(struct net *net, uint32_t role, uint32_t node_id)
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
void peer_free(struct peer *p)
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
Dml__Meta *peer_take(struct peer *p, int type, uint64_t request_id, int ms)
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

void peer_send(struct peer *p, Dml__Meta *m)
{
	if (!m->request_id)
		m->request_id = ++p->next_id;
	ck_assert_int_eq(dml_conn_send(p->conn, m, NULL, 0, DML_SEND_COPY), 0);
}

/* Send m and wait for what answers it (reply or ERROR). */
Dml__Meta *peer_request(struct peer *p, Dml__Meta *m)
{
	Dml__Meta *r;

	m->request_id = 0;
	peer_send(p, m);
	r = peer_take(p, 0, m->request_id, WAIT_MS);
	ck_assert_msg(r != NULL, "no answer to %s", dml_msg_type_name(m->type));
	return r;
}

/* Assert r is an ERROR with this code whose message holds needle; frees r. */
void assert_error(Dml__Meta *r, int code, const char *needle)
{
	ck_assert_int_eq(r->type, DML__MSG_TYPE__ERROR);
	ck_assert_int_eq(r->error->code, code);
	ck_assert_msg(strstr(r->error->message, needle) != NULL, "'%s' does not say '%s'",
		      r->error->message, needle);
	dml__meta__free_unpacked(r, NULL);
}

/* Servers serve at 127.0.0.1:20000+id, aggregators at 127.0.0.1:30000+id. */
static void peer_register(struct peer *p, uint64_t memory, double rate, const char *zone)
{
	Dml__Meta m = DML__META__INIT, *r;
	Dml__NodeInfo info = DML__NODE_INFO__INIT;
	Dml__Profile prof = DML__PROFILE__INIT;
	char addr[32];

	snprintf(addr, sizeof(addr), "127.0.0.1:%u",
		 (p->role == DML__ROLE__AGGREGATOR ? 30000 : 20000) + p->node_id);
	info.role = p->role;
	info.node_id = p->node_id;
	info.zone = (char *)zone;
	info.address = p->role == DML__ROLE__SERVER || p->role == DML__ROLE__AGGREGATOR
		       ? addr : (char *)"";
	prof.memory_bytes = memory;
	prof.examples_per_s = rate;
	info.profile = &prof;
	m.type = DML__MSG_TYPE__REGISTER;
	m.node = &info;
	r = peer_request(p, &m);
	ck_assert_int_eq(r->type, DML__MSG_TYPE__REGISTER_REPLY);
	dml__meta__free_unpacked(r, NULL);
}

struct peer *node_up_zone(struct net *net, uint32_t role, uint32_t id, const char *zone)
{
	struct peer *p = peer_connect(net, role, id);

	peer_register(p, role == DML__ROLE__SERVER ? (UINT64_C(1) << 30) : 0, 100, zone);
	return p;
}

struct peer *node_up(struct net *net, uint32_t role, uint32_t id)
{
	return node_up_zone(net, role, id, "");
}

void peer_ack(struct peer *p, const Dml__Meta *req)
{
	Dml__Meta m = DML__META__INIT;

	m.type = DML__MSG_TYPE__ACK;
	m.request_id = req->request_id;
	peer_send(p, &m);
}

void take_free(Dml__Meta *m)
{
	dml__meta__free_unpacked(m, NULL);
}

/* ---- requests -------------------------------------------------------------- */

uint32_t submit(struct peer *ctl, const char *name, const char *extra)
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
Dml__Meta *job_status(struct peer *ctl, uint32_t job)
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
void wait_reason(struct peer *ctl, uint32_t job, int state, const char *reason)
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
void wait_node_state(struct peer *ctl, uint32_t role, uint32_t id, int state)
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

Dml__Meta *control(struct peer *ctl, uint32_t job, Dml__JobAction action)
{
	Dml__Meta m = DML__META__INIT;

	m.type = DML__MSG_TYPE__JOB_CONTROL;
	m.job = job;
	m.action = action;
	return peer_request(ctl, &m);
}

void control_ok(struct peer *ctl, uint32_t job, Dml__JobAction action)
{
	Dml__Meta *r = control(ctl, job, action);

	ck_assert_msg(r->type == DML__MSG_TYPE__ACK, "control: %s",
		      r->error ? r->error->message : dml_msg_type_name(r->type));
	dml__meta__free_unpacked(r, NULL);
}

Dml__Meta *shardmap_ask(struct peer *p, uint32_t job)
{
	Dml__Meta m = DML__META__INIT;

	m.type = DML__MSG_TYPE__SHARDMAP;
	m.job = job;
	return peer_request(p, &m);
}

void progress(struct peer *w, uint32_t job, uint64_t clock, int finished)
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
void progress_walked(struct peer *w, uint32_t job, const uint32_t *parts, size_t n,
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

int has_part(const uint32_t *parts, size_t n, uint32_t q)
{
	for (size_t k = 0; k < n; k++)
		if (parts[k] == q)
			return 1;
	return 0;
}

/* The SHARDMAP a server gets next: valid for its spec, at this version. */
Dml__Meta *expect_map(struct peer *srv, uint32_t job, uint64_t version,
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

Dml__Meta *expect_assign(struct peer *w, Dml__JobState state, size_t parts)
{
	Dml__Meta *m = peer_take(w, DML__MSG_TYPE__ASSIGN, 0, WAIT_MS);

	ck_assert_msg(m != NULL, "worker %u got no assignment", w->node_id);
	ck_assert_int_eq(m->assignment->state, state);
	ck_assert_uint_eq(m->assignment->n_partitions, parts);
	return m;
}
