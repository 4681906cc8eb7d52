/*
 * libdml: shard maps from dml-sched. Holds the one connection a client
 * keeps to the scheduler, asks it for the job's map (SHARDMAP), paces
 * repeated asks, and turns a SHARDMAP_REPLY into the routing form that
 * client.c sends requests by, after checking every part of it.
 *
 * What the scheduler sends is distrusted like anything from the network: a
 * map that does not cover its tables exactly, names an unknown server or
 * table, or has a bad address is refused with a reason, never asserted on.
 * Must never block, keep more than one fetch in flight, or call back into
 * client.c from anywhere but a reply or a handshake refusal.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "worker/client_internal.h"
#include "proto/dml_error.h"
#include "proto/log.h"
#include "proto/util.h"

#define PACE_MIN_MS 20
#define PACE_MAX_MS 500
/* A fetch wanted this long after the last answer starts a new episode. */
#define PACE_QUIET_MS 1000
#define RECONNECT_MIN_MS 20
#define RECONNECT_MAX_MS 2000

/* ---- checking and building a map ----------------------------------------- */

struct node_index {
	uint32_t node_id;
	uint32_t index;
};

static int node_cmp(const void *a, const void *b)
{
	const struct node_index *x = a, *y = b;

	return x->node_id < y->node_id ? -1 : x->node_id > y->node_id;
}

static const Dml__TableSpec *spec_table(const Dml__JobSpec *spec, uint32_t id)
{
	for (size_t i = 0; i < spec->n_tables; i++)
		if (spec->tables[i]->id == id)
			return spec->tables[i];
	return NULL;
}

static int check_spec(const Dml__JobSpec *spec, char *err, size_t errlen)
{
	if (spec->n_tables == 0) {
		snprintf(err, errlen, "the job has no tables");
		return DML_ECONF;
	}
	for (size_t i = 0; i < spec->n_tables; i++) {
		const Dml__TableSpec *t = spec->tables[i];

		if (spec_table(spec, t->id) != t) {
			snprintf(err, errlen, "table %u is listed twice", t->id);
			return DML_ECONF;
		}
		if (t->width == 0 || (t->dense && t->keys == 0)) {
			snprintf(err, errlen, "table %u has %s", t->id,
				 t->width == 0 ? "width 0" : "no keys");
			return DML_ECONF;
		}
	}
	return 0;
}

/* Servers into out, sorted (node id, position) pairs into idx. */
static int take_servers(const Dml__ShardMap *w, struct dml_client_map *out,
			struct node_index *idx, char *err, size_t errlen)
{
	out->servers = dml_xcalloc(w->n_servers, sizeof(*out->servers));
	out->nservers = (uint32_t)w->n_servers;
	for (size_t i = 0; i < w->n_servers; i++) {
		const Dml__ShardServer *s = w->servers[i];
		struct dml_client_server *cs = &out->servers[i];

		if (s->node_id == 0 ||
		    dml_parse_hostport(s->address, cs->host, sizeof(cs->host), &cs->port, 0)) {
			snprintf(err, errlen, "server %u: %s", s->node_id,
				 s->node_id == 0 ? "node id 0" : "address is not host:port");
			return DML_ECONF;
		}
		cs->node_id = s->node_id;
		idx[i].node_id = s->node_id;
		idx[i].index = (uint32_t)i;
	}
	qsort(idx, w->n_servers, sizeof(*idx), node_cmp);
	for (size_t i = 1; i < w->n_servers; i++) {
		if (idx[i].node_id == idx[i - 1].node_id) {
			snprintf(err, errlen, "server %u is listed twice", idx[i].node_id);
			return DML_ECONF;
		}
	}
	return 0;
}

static int take_ranges(const Dml__ShardMap *w, const Dml__JobSpec *spec,
		       struct dml_client_map *out, const struct node_index *idx,
		       char *err, size_t errlen)
{
	for (size_t i = 0; i < w->n_ranges; i++) {
		const Dml__ShardRange *r = w->ranges[i];
		const Dml__TableSpec *t = spec_table(spec, r->table);
		struct node_index key = { r->server, 0 }, *hit;
		uint64_t space = t && t->dense ? t->keys : DML_SHARD_HASH_SPACE;
		int rc;

		hit = bsearch(&key, idx, w->n_servers, sizeof(*idx), node_cmp);
		if (!t || !hit || r->begin >= r->end || r->end > space) {
			snprintf(err, errlen, "range %llu..%llu of table %u on server %u: %s",
				 (unsigned long long)r->begin, (unsigned long long)r->end,
				 r->table, r->server, !t ? "no such table in the job"
				 : !hit ? "server not listed" : "empty or outside the table");
			return DML_ECONF;
		}
		rc = dml_shard_map_add(&out->shard, hit->index, t->id, t->dense, t->width,
				       t->dense ? t->keys : 0, r->begin, r->end, err, errlen);
		if (rc)
			return DML_ECONF;
	}
	for (size_t i = 0; i < spec->n_tables; i++) {
		if (!dml_shard_map_table(&out->shard, spec->tables[i]->id)) {
			snprintf(err, errlen, "table %u has no range", spec->tables[i]->id);
			return DML_ECONF;
		}
	}
	return dml_shard_map_finish(&out->shard, err, errlen) ? DML_ECONF : 0;
}

int dml_client_map_from_wire(const Dml__ShardMap *w, const Dml__JobSpec *spec,
			     struct dml_client_map *out, char *err, size_t errlen)
{
	struct node_index *idx;
	int rc;

	memset(out, 0, sizeof(*out));
	if (!w || !spec) {
		snprintf(err, errlen, "no map or no job spec");
		return DML_ECONF;
	}
	if (w->version == 0 || w->n_servers == 0 || w->n_servers > DML_CLIENT_MAX_SERVERS) {
		snprintf(err, errlen, "map v%llu of job %u: %s", (unsigned long long)w->version,
			 w->job, w->version == 0 ? "version 0" : w->n_servers == 0 ? "no server"
			 : "too many servers");
		return DML_ECONF;
	}
	if ((rc = check_spec(spec, err, errlen)) != 0)
		return rc;
	idx = dml_xcalloc(w->n_servers, sizeof(*idx));
	dml_shard_map_init(&out->shard, (uint32_t)w->n_servers);
	rc = take_servers(w, out, idx, err, errlen);
	if (rc == 0)
		rc = take_ranges(w, spec, out, idx, err, errlen);
	if (rc == 0)
		rc = dml_client_codecs_from_spec(spec, &out->codecs, err, errlen);
	free(idx);
	if (rc) {
		dml_client_map_destroy(out);
		return rc;
	}
	out->job = w->job;
	out->shard.version = w->version;
	return 0;
}

void dml_client_map_destroy(struct dml_client_map *m)
{
	dml_shard_map_destroy(&m->shard);
	free(m->servers);
	m->servers = NULL;
	m->nservers = 0;
	dml_client_codecs_free(&m->codecs);
}

/* ---- the scheduler connection --------------------------------------------- */

struct dml_client_sched {
	struct event_base *base;
	struct dml_conn_conf cc;
	char host[256];
	uint16_t port;
	char name[300];
	uint32_t job;
	dml_client_map_fn fn;
	void *arg;

	struct dml_conn *conn;
	int ready;
	int ever_ready;
	uint64_t retry_at_ns;          /* next connection attempt */
	uint32_t backoff_ms;
	char last_error[256];

	int wanted;                    /* a fetch waits to be sent */
	uint64_t due_ns;               /* not before this */
	uint64_t inflight;             /* request id of the fetch on the wire, 0 none */
	uint64_t next_id;
	uint32_t pace_ms;              /* wait before the fetch after the next */
	uint64_t last_answer_ns;
	struct event *timer;
	int closing;                   /* being freed: no connection, no callback */
};

static void sched_kick(struct dml_client_sched *s);

static void arm(struct dml_client_sched *s, uint64_t at_ns)
{
	uint64_t now = dml_now_ns(), us = at_ns > now ? (at_ns - now) / 1000 : 0;
	struct timeval tv = { (time_t)(us / 1000000), (suseconds_t)(us % 1000000) };

	event_add(s->timer, &tv);
}

static void send_fetch(struct dml_client_sched *s)
{
	Dml__Meta m = DML__META__INIT;

	m.type = DML__MSG_TYPE__SHARDMAP;
	m.request_id = ++s->next_id;
	m.sender = s->cc.node_id;
	m.job = s->job;
	if (dml_conn_send(s->conn, &m, NULL, 0, DML_SEND_COPY) != 0)
		return;                 /* closing: on_close wants it again */
	s->inflight = m.request_id;
	s->wanted = 0;
}

static void answer(struct dml_client_sched *s, const Dml__Meta *m)
{
	struct dml_client_map map;
	char why[512];
	int rc;

	s->inflight = 0;
	s->last_answer_ns = dml_now_ns();
	if (m->type == DML__MSG_TYPE__ERROR) {
		snprintf(why, sizeof(why), "%s: %s", s->name, m->error->message);
		s->fn(s->arg, m->error->code < 0 && m->error->code > DML_ERR_MIN
			      ? m->error->code : DML_EIO, NULL, why);
		return;
	}
	rc = dml_client_map_from_wire(m->shard_map, m->job_spec, &map, why, sizeof(why));
	if (rc == 0 && s->job && map.job != s->job) {
		snprintf(why, sizeof(why), "asked for job %u, got the map of job %u", s->job,
			 map.job);
		dml_client_map_destroy(&map);
		rc = DML_ECONF;
	}
	if (rc) {
		char msg[900];

		snprintf(msg, sizeof(msg), "%s: bad shard map: %s", s->name, why);
		s->fn(s->arg, rc, NULL, msg);
		return;
	}
	s->fn(s->arg, 0, &map, NULL);
}

static int on_frame(struct dml_conn *c, const Dml__Meta *m, const uint8_t *payload,
		    size_t len, void *arg)
{
	struct dml_client_sched *s = arg;

	if (s->closing)
		return 0;
	if ((m->type == DML__MSG_TYPE__SHARDMAP_REPLY || m->type == DML__MSG_TYPE__ERROR) &&
	    s->inflight && m->request_id == s->inflight) {
		answer(s, m);
		return 0;
	}
	/* Heartbeats, late answers and anything the scheduler may add later. */
	dml_debug("%s: %s ignored", s->name, dml_msg_type_name(m->type));
	return 0;
}

static void on_ready(struct dml_conn *c, void *arg)
{
	struct dml_client_sched *s = arg;

	s->ready = 1;
	s->ever_ready = 1;
	s->backoff_ms = 0;
	sched_kick(s);
}

static void on_close(struct dml_conn *c, int err, void *arg)
{
	struct dml_client_sched *s = arg;
	int refused = err == DML_EAUTH || err == DML_ECLUSTER || err == DML_EROLE ||
		      err == DML_EFRAME_VERSION;

	if (s->conn != c)
		return;
	s->conn = NULL;
	s->ready = 0;
	if (s->closing)
		return;
	if (s->inflight) {
		/* Lost with the connection: ask again on the next one. */
		s->inflight = 0;
		s->wanted = 1;
	}
	if (err)
		snprintf(s->last_error, sizeof(s->last_error), "%s", dml_strerror(err));
	s->backoff_ms = s->backoff_ms ? s->backoff_ms * 2 : RECONNECT_MIN_MS;
	if (s->backoff_ms > RECONNECT_MAX_MS)
		s->backoff_ms = RECONNECT_MAX_MS;
	s->retry_at_ns = dml_now_ns() + s->backoff_ms * 1000000ull;
	dml_debug("%s: connection closed (%s)", s->name, err ? dml_strerror(err) : "clean");
	if (refused && s->wanted) {
		char why[400];

		/* Retrying would be refused the same way: let the client decide. */
		s->wanted = 0;
		snprintf(why, sizeof(why), "%s refused this client: %s", s->name,
			 dml_strerror(err));
		s->fn(s->arg, err, NULL, why);
		return;
	}
	if (s->wanted)
		arm(s, s->retry_at_ns);
}

static const struct dml_conn_ops sched_ops = {
	.on_ready = on_ready,
	.on_frame = on_frame,
	.on_close = on_close,
};

/* Move a wanted fetch forward: connect, send, or wait for the timer. */
static void sched_kick(struct dml_client_sched *s)
{
	uint64_t now = dml_now_ns();

	if (!s->wanted || s->inflight || s->closing)
		return;
	if (now < s->due_ns) {
		arm(s, s->due_ns);
		return;
	}
	if (s->ready) {
		send_fetch(s);
		return;
	}
	if (s->conn)
		return;                 /* handshake under way: on_ready sends */
	if (now < s->retry_at_ns) {
		arm(s, s->retry_at_ns);
		return;
	}
	if (dml_conn_connect(s->base, s->host, s->port, &s->cc, &sched_ops, s, &s->conn)) {
		s->conn = NULL;
		snprintf(s->last_error, sizeof(s->last_error),
			 "cannot resolve the name or open a socket");
		s->retry_at_ns = now + RECONNECT_MAX_MS * 1000000ull;
		arm(s, s->retry_at_ns);
	}
}

static void timer_cb(evutil_socket_t fd, short what, void *arg)
{
	sched_kick(arg);
}

int dml_client_sched_new(struct event_base *base, const struct dml_conn_conf *cc,
			 const char *hostport, uint32_t job, dml_client_map_fn fn, void *arg,
			 struct dml_client_sched **out)
{
	struct dml_client_sched *s = dml_xcalloc(1, sizeof(*s));

	*out = NULL;
	if (dml_parse_hostport(hostport, s->host, sizeof(s->host), &s->port, 0) != 0) {
		free(s);
		return DML_EINVAL;
	}
	s->base = base;
	s->cc = *cc;
	s->job = job;
	s->fn = fn;
	s->arg = arg;
	snprintf(s->name, sizeof(s->name), "scheduler %s:%u", s->host, s->port);
	s->timer = event_new(base, -1, 0, timer_cb, s);
	if (!s->timer) {
		free(s);
		return DML_ENOMEM;
	}
	*out = s;
	return 0;
}

void dml_client_sched_set_job(struct dml_client_sched *s, uint32_t job)
{
	s->job = job;
}

void dml_client_sched_fetch(struct dml_client_sched *s)
{
	uint64_t now = dml_now_ns();

	if (s->wanted || s->inflight)
		return;
	if (s->last_answer_ns && now - s->last_answer_ns > PACE_QUIET_MS * 1000000ull)
		s->pace_ms = 0;
	s->wanted = 1;
	s->due_ns = now + s->pace_ms * 1000000ull;
	s->pace_ms = s->pace_ms ? s->pace_ms * 2 : PACE_MIN_MS;
	if (s->pace_ms > PACE_MAX_MS)
		s->pace_ms = PACE_MAX_MS;
	sched_kick(s);
}

void dml_client_sched_pace_reset(struct dml_client_sched *s)
{
	s->pace_ms = 0;
}

const char *dml_client_sched_name(const struct dml_client_sched *s)
{
	return s->name;
}

const char *dml_client_sched_last_error(const struct dml_client_sched *s)
{
	return s->last_error;
}

int dml_client_sched_ever_ready(const struct dml_client_sched *s)
{
	return s->ever_ready;
}

void dml_client_sched_free(struct dml_client_sched *s)
{
	if (!s)
		return;
	s->closing = 1;
	event_del(s->timer);
	if (s->conn)
		dml_conn_abort(s->conn, DML_ECLOSED);
	/* The teardown runs on the loop and ends in on_close. */
	for (int i = 0; i < 100 && s->conn; i++)
		event_base_loop(s->base, EVLOOP_NONBLOCK);
	event_free(s->timer);
	free(s);
}
