/*
 * dml-server core (see server.h).
 *
 * Metrics are registered in server_metrics.c; the request paths here only
 * bump integers of struct stats and feed three histograms.
 *
 * Must never: block the event loop (a pull that is too early is parked and
 * answered when the clocks allow), apply a push twice (per-worker sequence
 * numbers), trust a count or key the peer sent without checking it against
 * the table, or let one bad peer cost more than its own connection.
 */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <event2/listener.h>
#include <event2/util.h>

#include "auth.h"
#include "conn.h"
#include "dml_error.h"
#include "listen.h"
#include "log.h"
#include "server_internal.h"
#include "shardmap.h"
#include "ssp.h"
#include "table.h"
#include "util.h"

#define TICK_MS 100
#define SHUTDOWN_GRACE_S 3

/* ---- tables ------------------------------------------------------------- */

static struct table_entry *find_table(struct dml_server *s, uint32_t id)
{
	for (size_t i = 0; i < s->ntables; i++)
		if (s->tables[i].info.id == id)
			return &s->tables[i];
	return NULL;
}

static int build_tables(struct dml_server *s)
{
	const struct dml_server_conf *c = s->conf;

	s->tables = dml_xcalloc(c->ntables, sizeof(*s->tables));
	s->infos = dml_xcalloc(c->ntables, sizeof(*s->infos));
	for (size_t i = 0; i < c->ntables; i++) {
		const struct dml_server_table_conf *tc = &c->tables[i];
		struct table_entry *te = &s->tables[i];
		struct dml_table_conf t = { 0 };
		int dense = tc->kind == DML_TABLE_DENSE, rc;

		dml_shard_even_range(dense ? tc->keys : DML_SHARD_HASH_SPACE, c->shard_index,
				     c->shard_count, &te->own_begin, &te->own_end);
		t.id = tc->id;
		t.width = tc->width;
		t.kind = (enum dml_table_kind)tc->kind;
		t.key_begin = dense ? te->own_begin : 0;
		t.key_end = dense ? te->own_end : 0;
		t.capacity_hint = tc->capacity;
		t.init = (enum dml_init_kind)tc->init;
		t.init_scale = (float)tc->init_scale;
		t.seed = tc->seed;
		t.optim.kind = (enum dml_optim_kind)tc->optimizer;
		t.optim.lr = (float)tc->lr;
		t.optim.weight_decay = (float)tc->weight_decay;
		t.optim.momentum = (float)tc->momentum;
		t.optim.beta1 = (float)tc->beta1;
		t.optim.beta2 = (float)tc->beta2;
		t.optim.eps = (float)tc->epsilon;
		rc = dml_table_new(&t, &te->table);
		if (rc) {
			dml_err("table %u: %s", tc->id, dml_strerror(rc));
			return rc;
		}
		dml__table_info__init(&te->info);
		te->info.id = tc->id;
		te->info.dense = dense;
		te->info.width = tc->width;
		te->info.keys = dense ? tc->keys : 0;
		te->info.key_begin = te->own_begin;
		te->info.key_end = te->own_end;
		s->infos[i] = &te->info;
		s->ntables++;
		dml_info("table %u: %s, width %u, %s %llu..%llu", tc->id,
			 dense ? "dense" : "sparse", tc->width, dense ? "keys" : "key hashes",
			 (unsigned long long)te->own_begin, (unsigned long long)te->own_end);
	}
	return 0;
}

static float *scratch(struct dml_server *s, uint64_t floats)
{
	if (floats > s->scratch_cap) {
		float *p = malloc(floats * sizeof(float));

		if (!p)
			return NULL;
		free(s->scratch);
		s->scratch = p;
		s->scratch_cap = floats;
	}
	return s->scratch;
}

/* Sparse keys must hash into this server's range (dense keys are checked
 * against the range by the table itself). */
static int check_owned(const struct table_entry *te, const uint64_t *keys, uint32_t n)
{
	if (te->info.dense || (te->own_begin == 0 && te->own_end == DML_SHARD_HASH_SPACE))
		return 0;
	for (uint32_t i = 0; i < n; i++) {
		uint64_t h = dml_shard_key_hash(keys[i]);

		if (h < te->own_begin || h >= te->own_end)
			return DML_ERANGE;
	}
	return 0;
}

/* ---- replies ------------------------------------------------------------ */

static void reply_error(struct session *ss, uint64_t request_id, int code, const char *fmt,
			...) __attribute__((format(printf, 4, 5)));

static void reply_error(struct session *ss, uint64_t request_id, int code, const char *fmt,
			...)
{
	char msg[256];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	dml_debug("peer %s: request %llu: %s", dml_conn_peer(ss->peer.conn),
		  (unsigned long long)request_id, msg);
	(void)dml_conn_send_error(ss->peer.conn, request_id, code, msg);
}

static void reply_ack(struct session *ss, uint64_t request_id)
{
	Dml__Meta m = DML__META__INIT;

	m.type = DML__MSG_TYPE__ACK;
	m.request_id = request_id;
	m.sender = ss->srv->conf->node_id;
	(void)dml_conn_send(ss->peer.conn, &m, NULL, 0, DML_SEND_COPY);
}

/*
 * Pin the table for a reply when the reply is at least a quarter of the
 * table: a push under the pin then copies at most four times what copying
 * the reply would have cost, and a pull-heavy load copies nothing.
 */
static int pin_worthy(const struct table_entry *te, uint64_t floats)
{
	return floats * sizeof(float) * 4 >= dml_table_value_bytes(te->table);
}

static void release_pin(const void *data, size_t len, void *token)
{
	dml_table_unpin(token);
}

static void answer_pull(struct session *ss, uint64_t request_id, struct table_entry *te,
			int dense, uint64_t begin, uint64_t end, const uint64_t *keys,
			uint32_t nkeys)
{
	struct dml_server *s = ss->srv;
	uint32_t w = te->info.width;
	uint64_t floats = (dense ? end - begin : nkeys) * w;
	Dml__Meta m = DML__META__INIT;
	struct dml_table_pin *pin = NULL;
	const float *values = NULL;
	float *out;
	int rc;

	if (dense && pin_worthy(te, floats)) {
		/* Sent from the table itself, pinned (see table.h): a reply
		 * stays a snapshot without a copy unless a push comes first. */
		rc = dml_table_pin_range(te->table, begin, end, &values, &pin);
	} else if (dense) {
		/* Small slice of a big table: copying it beats the table copy a
		 * push under a pin would make. dml_conn_send copies what the
		 * socket does not take at once. */
		rc = dml_table_pin_range(te->table, begin, end, &values, &pin);
		if (rc == 0) {
			dml_table_unpin(pin);
			pin = NULL;
		}
	} else if ((out = scratch(s, floats)) == NULL) {
		reply_error(ss, request_id, DML_ENOMEM, "no memory for a %llu-float reply",
			    (unsigned long long)floats);
		return;
	} else {
		rc = dml_table_pull_keys(te->table, keys, nkeys, out);
		values = out;
	}
	if (rc) {
		reply_error(ss, request_id, rc, "pull from table %u: %s", te->info.id,
			    dml_strerror(rc));
		return;
	}
	m.type = DML__MSG_TYPE__PULL_REPLY;
	m.request_id = request_id;
	m.sender = s->conf->node_id;
	m.table = te->info.id;
	m.value_width = w;
	m.dense = dense;
	m.key_begin = begin;
	m.key_end = end;
	m.num_keys = dense ? 0 : nkeys;
	m.min_clock = dml_ssp_min_clock(&s->ssp);
	s->st.pulls++;
	if (pin)
		rc = dml_conn_send_pinned(ss->peer.conn, &m, values, floats * sizeof(float),
					  release_pin, pin);
	else
		rc = dml_conn_send(ss->peer.conn, &m, values, floats * sizeof(float),
				   DML_SEND_COPY);
	if (rc)
		dml_warn("peer %s: reply not sent: %s", dml_conn_peer(ss->peer.conn), dml_strerror(rc));
}

/* Answer every parked pull the clocks now allow. */
static void release_held(struct dml_server *s)
{
	struct held_pull **pp = &s->held;

	while (*pp) {
		struct held_pull *h = *pp;

		if (!dml_ssp_ready(&s->ssp, h->clock)) {
			pp = &h->next;
			continue;
		}
		*pp = h->next;
		dml_histogram_observe_since(s->held_wait, h->received_ns);
		answer_pull(h->sess, h->request_id, h->te, h->dense, h->begin, h->end, h->keys,
			    h->nkeys);
		dml_histogram_observe_since(s->pull_latency, h->received_ns);
		free(h->keys);
		free(h);
	}
}

static void drop_held(struct dml_server *s, struct session *ss, int code)
{
	struct held_pull **pp = &s->held;

	while (*pp) {
		struct held_pull *h = *pp;

		if (ss && h->sess != ss) {
			pp = &h->next;
			continue;
		}
		*pp = h->next;
		if (code)
			reply_error(h->sess, h->request_id, code, "server is shutting down");
		free(h->keys);
		free(h);
	}
}

/* ---- request handlers --------------------------------------------------- */

static struct dml_ssp_worker *session_worker(struct session *ss)
{
	return ss->worker ? &ss->srv->ssp.workers[ss->widx] : NULL;
}

/* Common checks of push and pull: the table exists and the shape matches. */
static struct table_entry *request_table(struct session *ss, const Dml__Meta *m)
{
	struct table_entry *te = find_table(ss->srv, m->table);

	if (!te) {
		reply_error(ss, m->request_id, DML_ENOTFOUND, "no table %u on this server",
			    m->table);
		return NULL;
	}
	/* Key lists work on both kinds; ranges only on dense tables. */
	if (m->value_width != te->info.width || (m->dense && !te->info.dense)) {
		reply_error(ss, m->request_id, DML_ESHAPE,
			    "table %u is %s with width %u, request is %s with width %u",
			    m->table, te->info.dense ? "dense" : "sparse", te->info.width,
			    m->dense ? "a range" : "a key list", m->value_width);
		return NULL;
	}
	return te;
}

static void handle_push(struct session *ss, const Dml__Meta *m, const uint8_t *payload)
{
	struct dml_ssp_worker *w = session_worker(ss);
	struct table_entry *te = request_table(ss, m);
	int rc;

	if (!te)
		return;
	if (ss->role == DML__ROLE__CONTROL) {
		/* Control clients have no clock and no push sequence: a resend
		 * could not be told from a new push, so they may only read. */
		reply_error(ss, m->request_id, DML_EROLE, "control clients may not push");
		return;
	}
	if (w && m->seq != 0 && m->seq <= w->last_seq) {
		/* A resend after a reconnect: already applied once. */
		ss->srv->st.duplicates++;
		reply_ack(ss, m->request_id);
		return;
	}
	if (m->dense) {
		rc = dml_table_push_range(te->table, m->key_begin, m->key_end,
					  (const float *)payload);
	} else {
		const uint64_t *keys = (const uint64_t *)payload;

		rc = check_owned(te, keys, m->num_keys);
		if (rc == 0)
			rc = dml_table_push_keys(te->table, keys, m->num_keys,
						 (const float *)(payload + m->num_keys * 8ull));
	}
	if (rc) {
		reply_error(ss, m->request_id, rc, "push to table %u: %s", m->table,
			    dml_strerror(rc));
		return;
	}
	if (w && m->seq != 0)
		w->last_seq = m->seq;
	ss->srv->st.pushes++;
	reply_ack(ss, m->request_id);
}

/* Answers or parks the pull; returns 1 when parked (answered later). */
static int handle_pull(struct session *ss, const Dml__Meta *m, const uint8_t *payload,
		       uint64_t received_ns)
{
	struct dml_server *s = ss->srv;
	struct table_entry *te = request_table(ss, m);
	const uint64_t *keys = (const uint64_t *)payload;
	struct held_pull *h;

	if (!te)
		return 0;
	if (m->dense) {
		if (m->key_begin < te->own_begin || m->key_end > te->own_end) {
			reply_error(ss, m->request_id, DML_ERANGE,
				    "keys %llu..%llu are not all on this server",
				    (unsigned long long)m->key_begin,
				    (unsigned long long)m->key_end);
			return 0;
		}
	} else if (check_owned(te, keys, m->num_keys) != 0) {
		reply_error(ss, m->request_id, DML_ERANGE, "keys not on this server");
		return 0;
	}
	if (!ss->worker || dml_ssp_ready(&s->ssp, m->clock)) {
		answer_pull(ss, m->request_id, te, m->dense, m->key_begin, m->key_end, keys,
			    m->num_keys);
		return 0;
	}
	h = dml_xcalloc(1, sizeof(*h));
	h->sess = ss;
	h->received_ns = received_ns;
	h->request_id = m->request_id;
	h->clock = m->clock;
	h->te = te;
	h->dense = m->dense;
	h->begin = m->key_begin;
	h->end = m->key_end;
	if (!m->dense) {
		h->keys = malloc(m->num_keys * sizeof(uint64_t));
		if (!h->keys) {
			free(h);
			reply_error(ss, m->request_id, DML_ENOMEM, "no memory to park a pull");
			return 0;
		}
		memcpy(h->keys, keys, m->num_keys * sizeof(uint64_t));
		h->nkeys = m->num_keys;
	}
	h->next = s->held;
	s->held = h;
	s->st.held++;
	return 1;
}

/* Bytes moved so far: closed connections plus the open ones. */
void dml_server_traffic(const struct dml_server *s, uint64_t *in, uint64_t *out)
{
	*in = s->st.bytes_in;
	*out = s->st.bytes_out;
	for (const struct dml_peer *x = s->peers.head; x; x = x->next) {
		*in += dml_conn_bytes_in(x->conn);
		*out += dml_conn_bytes_out(x->conn);
	}
}

static void handle_stats(struct session *ss, const Dml__Meta *req)
{
	struct dml_server *s = ss->srv;
	Dml__Meta m = DML__META__INIT;
	Dml__Stats st = DML__STATS__INIT;
	Dml__WorkerClock *wc = dml_xcalloc(s->ssp.nworkers, sizeof(*wc));
	Dml__WorkerClock **wcp = dml_xcalloc(s->ssp.nworkers, sizeof(*wcp));

	for (size_t i = 0; i < s->ssp.nworkers; i++) {
		dml__worker_clock__init(&wc[i]);
		wc[i].worker = s->ssp.workers[i].id;
		wc[i].clock = s->ssp.workers[i].clock;
		wc[i].live = s->ssp.workers[i].live;
		wcp[i] = &wc[i];
	}
	st.pushes = s->st.pushes;
	st.pulls = s->st.pulls;
	st.duplicate_pushes = s->st.duplicates;
	st.held_pulls = s->st.held;
	st.bad_frames = s->st.bad_frames;
	st.min_clock = dml_ssp_min_clock(&s->ssp);
	st.staleness = s->ssp.staleness;
	st.n_workers = s->ssp.nworkers;
	st.workers = wcp;
	dml_server_traffic(s, &st.bytes_in, &st.bytes_out);
	m.type = DML__MSG_TYPE__STATS_REPLY;
	m.request_id = req->request_id;
	m.sender = s->conf->node_id;
	m.stats = &st;
	(void)dml_conn_send(ss->peer.conn, &m, NULL, 0, DML_SEND_COPY);
	free(wc);
	free(wcp);
}

static int on_frame(struct dml_conn *c, const Dml__Meta *m, const uint8_t *payload,
		    size_t len, void *arg)
{
	struct session *ss = arg;
	struct dml_server *s = ss->srv;
	struct dml_ssp_worker *w = session_worker(ss);
	uint64_t t0;

	switch (m->type) {
	case DML__MSG_TYPE__PUSH:
		s->st.requests[REQ_PUSH]++;
		t0 = dml_now_ns();
		handle_push(ss, m, payload);
		dml_histogram_observe_since(s->push_latency, t0);
		return 0;
	case DML__MSG_TYPE__PULL:
		s->st.requests[REQ_PULL]++;
		t0 = dml_now_ns();
		if (!handle_pull(ss, m, payload, t0))
			dml_histogram_observe_since(s->pull_latency, t0);
		return 0;
	case DML__MSG_TYPE__CLOCK:
		s->st.requests[REQ_CLOCK]++;
		if (!w)
			return DML_EROLE;
		dml_ssp_set_clock(&s->ssp, w, m->clock);
		release_held(s);
		return 0;
	case DML__MSG_TYPE__HEARTBEAT: {
		Dml__Meta r = DML__META__INIT;

		s->st.requests[REQ_HEARTBEAT]++;
		r.type = DML__MSG_TYPE__HEARTBEAT;
		r.request_id = m->request_id;
		r.sender = s->conf->node_id;
		(void)dml_conn_send(c, &r, NULL, 0, DML_SEND_COPY);
		return 0;
	}
	case DML__MSG_TYPE__BYE:
		s->st.requests[REQ_BYE]++;
		if (w) {
			dml_ssp_leave(&s->ssp, w);
			release_held(s);
		}
		reply_ack(ss, m->request_id);
		return 0;
	case DML__MSG_TYPE__STATS:
		s->st.requests[REQ_STATS]++;
		handle_stats(ss, m);
		return 0;
	default:
		/* Replies and handshakes have no business arriving here. */
		return DML_ESTATE;
	}
}

/* ---- sessions ----------------------------------------------------------- */

static int on_hello(struct dml_conn *c, const Dml__Handshake *hello, Dml__Handshake *welcome,
		    void *arg)
{
	struct session *ss = arg;
	struct dml_server *s = ss->srv;

	switch (hello->role) {
	case DML__ROLE__WORKER:
	case DML__ROLE__CONTROL:
	case DML__ROLE__AGGREGATOR:
		break;
	default:
		return DML_EROLE;
	}
	ss->role = hello->role;
	ss->node_id = hello->node_id;
	if (hello->role == DML__ROLE__WORKER) {
		struct dml_ssp_worker *w = dml_ssp_join(&s->ssp, hello->node_id,
							 hello->incarnation);

		ss->worker = 1;
		ss->widx = (size_t)(w - s->ssp.workers);
	}
	welcome->n_tables = s->ntables;
	welcome->tables = s->infos;
	welcome->shard_index = s->conf->shard_index;
	welcome->shard_count = s->conf->shard_count;
	dml_info("peer %s: %s %u joined", dml_conn_peer(c),
		 hello->role == DML__ROLE__WORKER ? "worker" :
		 hello->role == DML__ROLE__CONTROL ? "control" : "aggregator", hello->node_id);
	return 0;
}

static void on_close(struct dml_conn *c, int err, void *arg)
{
	struct session *ss = arg;
	struct dml_server *s = ss->srv;
	struct dml_ssp_worker *w = session_worker(ss);

	if (err && err != DML_ECONN && err != DML_ECLOSED)
		s->st.bad_frames++;
	s->st.bytes_in += dml_conn_bytes_in(c);
	s->st.bytes_out += dml_conn_bytes_out(c);
	drop_held(s, ss, 0);
	if (w)
		dml_ssp_disconnect(&s->ssp, w, dml_now_ns());
	dml_peers_remove(&s->peers, &ss->peer);
	free(ss);
}

static const struct dml_conn_ops server_ops = {
	.on_hello = on_hello,
	.on_frame = on_frame,
	.on_close = on_close,
};

static void accept_cb(struct evconnlistener *l, evutil_socket_t fd, struct sockaddr *addr,
		      int addrlen, void *arg)
{
	struct dml_server *s = arg;
	struct session *ss;

	ss = dml_xcalloc(1, sizeof(*ss));
	ss->srv = s;
	if (dml_peers_accept(&s->peers, fd, &ss->peer, &s->conn_conf, s->ops, ss) != 0)
		free(ss);
}

static void tick_cb(evutil_socket_t fd, short what, void *arg)
{
	struct dml_server *s = arg;

	if (dml_ssp_reap(&s->ssp, dml_now_ns(), (uint64_t)s->conf->dead_after_ms * 1000000ull)) {
		dml_info("a worker left the clock set; slowest clock is now %llu",
			 (unsigned long long)dml_ssp_min_clock(&s->ssp));
		release_held(s);
	}
}


/* ---- lifecycle ---------------------------------------------------------- */


static int start_listening(struct dml_server *s)
{
	int rc = dml_listen_tcp(s->base, s->conf->listen, accept_cb, s, &s->listener,
				&s->port);

	if (rc)
		return rc;
	dml_info("listening on %s, port %u (shard %u/%u, staleness %lld, %u workers expected)",
		 s->conf->listen, s->port, s->conf->shard_index, s->conf->shard_count,
		 (long long)s->conf->staleness, s->conf->workers);
	if (s->conf->port_file[0])
		return dml_write_port_file(s->conf->port_file, s->port);
	return 0;
}

int dml_server_new(const struct dml_server_conf *conf, struct event_base *base,
		   struct dml_server **out)
{
	struct dml_server *s = dml_xcalloc(1, sizeof(*s));
	struct timeval tick = { 0, TICK_MS * 1000 };
	int rc;

	s->conf = conf;
	s->base = base;
	s->ops = &server_ops;
	dml_ssp_init(&s->ssp, conf->staleness, conf->workers);
	dml_peers_init(&s->peers, base, conf->max_connections);
	*out = s;
	rc = dml_secret_load(conf->secret_file, &s->secret, &s->secret_len);
	if (rc)
		return rc;
	dml_conn_conf_default(&s->conn_conf);
	s->conn_conf.limits.max_meta = (uint32_t)conf->max_meta;
	s->conn_conf.limits.max_payload = (uint32_t)conf->max_payload;
	s->conn_conf.limits.max_keys = (uint32_t)conf->max_keys;
	s->conn_conf.secret = s->secret;
	s->conn_conf.secret_len = s->secret_len;
	s->conn_conf.cluster = conf->cluster;
	s->conn_conf.role = DML__ROLE__SERVER;
	s->conn_conf.node_id = conf->node_id;
	s->conn_conf.handshake_timeout_ms = conf->handshake_timeout_ms;
	if ((rc = build_tables(s)) != 0)
		return rc;
	if ((rc = dml_server_metrics_init(s)) != 0)
		return rc;
	s->tick = event_new(base, -1, EV_PERSIST, tick_cb, s);
	event_add(s->tick, &tick);
	if ((rc = start_listening(s)) != 0)
		return rc;
	return dml_server_sched_start(s);
}

void dml_server_shutdown(struct dml_server *s)
{
	if (s->peers.stopping)
		return;
	if (s->listener) {
		evconnlistener_free(s->listener);
		s->listener = NULL;
	}
	dml_metrics_http_stop(s->metrics);
	dml_server_sched_stop(s);
	drop_held(s, NULL, DML_ECLOSED);
	dml_peers_shutdown(&s->peers, SHUTDOWN_GRACE_S);
}

void dml_server_free(struct dml_server *s)
{
	if (!s)
		return;
	dml_server_sched_free(s);
	/* Connections the grace period could not close are dropped now. */
	dml_peers_destroy(&s->peers);
	drop_held(s, NULL, 0);
	if (s->listener)
		evconnlistener_free(s->listener);
	if (s->tick)
		event_free(s->tick);
	for (size_t i = 0; i < s->ntables; i++)
		dml_table_free(s->tables[i].table);
	free(s->tables);
	free(s->infos);
	free(s->scratch);
	dml_metrics_free(s->metrics);
	dml_ssp_destroy(&s->ssp);
	dml_secret_free(s->secret, s->secret_len);
	free(s);
}

uint16_t dml_server_port(const struct dml_server *s)
{
	return s->port;
}
