/*
 * dml-server's request handlers: PUSH, PULL, SCAN, CLOCK, HEARTBEAT, BYE and
 * STATS frames of a session. Which tables exist and which of their keys are
 * served is decided by the config file (tables.c) or by the scheduler's
 * shard maps (job.c); the handlers here only check every request against
 * that before applying it.
 *
 * Metrics are registered in server_metrics.c; the request paths here only
 * bump integers of struct stats and feed three histograms.
 *
 * A zone aggregator's summed push names the workers' pushes it holds;
 * forwarded.c decides from their sequences whether it is applied.
 *
 * Must never: apply a push twice (per-worker sequence numbers, checked
 * before the key ranges so a resend of a push applied before its keys moved
 * is still acknowledged), apply any of a request whose keys are not all
 * served here, trust a count or key the peer sent without checking it
 * against the table, or let one bad peer cost more than its own connection.
 */
#include <stdlib.h>
#include <string.h>

#include "proto/conn.h"
#include "proto/dml_error.h"
#include "proto/log.h"
#include "server/row_snapshot.h"
#include "server/server_internal.h"
#include "shard/shardmap.h"
#include "server/ssp.h"
#include "store/table.h"
#include "proto/util.h"

/* ---- request handlers --------------------------------------------------- */

struct dml_ssp_worker *dml_server_session_worker(struct session *ss)
{
	return ss->worker ? &ss->srv->ssp.workers[ss->widx] : NULL;
}

/*
 * Common checks of push and pull: the request is for the job this server
 * holds, the table exists and the shape matches.
 */
static struct table_entry *request_table(struct session *ss, const Dml__Meta *m)
{
	struct dml_server *s = ss->srv;
	struct table_entry *te;

	/* Job 0 is the config file's tables; a server waiting for the
	 * scheduler's first map holds no job at all. */
	if (m->job != s->job.id || s->ntables == 0) {
		/* A client may have the scheduler's newest map before this server
		 * got it (a server joining a running job): "not my range yet",
		 * which the client retries, rather than a failure. */
		int early = s->conf->scheduler[0] && s->conf->ntables == 0 && m->job > s->job.id;

		dml_server_reply_error(ss, m->request_id, early ? DML_ERANGE : DML_ESTATE,
				       early ? "job %u is not on this server yet"
					     : "job %u is not on this server", m->job);
		return NULL;
	}
	te = dml_server_find_table(s, m->table);
	if (!te) {
		dml_server_reply_error(ss, m->request_id, DML_ENOTFOUND,
				       "no table %u on this server", m->table);
		return NULL;
	}
	/* Key lists work on both kinds; ranges only on dense tables. */
	if (m->value_width != te->info.width || (m->dense && !te->info.dense)) {
		dml_server_reply_error(ss, m->request_id, DML_ESHAPE,
				       "table %u is %s with width %u, request is %s with width %u",
				       m->table, te->info.dense ? "dense" : "sparse",
				       te->info.width, m->dense ? "a range" : "a key list",
				       m->value_width);
		return NULL;
	}
	return te;
}

/* Every key of the request is served here now; else answered DML_ERANGE. */
static int request_served(struct session *ss, const Dml__Meta *m, struct table_entry *te,
			  const uint64_t *keys)
{
	if (dml_server_serves(te, m->dense, m->key_begin, m->key_end, keys, m->num_keys) == 0)
		return 1;
	if (m->dense)
		dml_server_reply_error(ss, m->request_id, DML_ERANGE,
				       "keys %llu..%llu of table %u are not all on this server "
				       "(map v%llu)", (unsigned long long)m->key_begin,
				       (unsigned long long)m->key_end, m->table,
				       (unsigned long long)ss->srv->job.version);
	else
		dml_server_reply_error(ss, m->request_id, DML_ERANGE,
				       "keys of table %u not on this server (map v%llu)",
				       m->table, (unsigned long long)ss->srv->job.version);
	return 0;
}

/*
 * stale_scaling = inverse: a push of clock c while the newest worker is at
 * clock c + tau (tau > 0) goes on as a copy whose values are divided by
 * 1 + tau, DynSGD's step for a gradient computed tau clocks ago. The copy
 * is what is applied and logged, so a replay gives the same rows. Only
 * pushes with a clock (clocked: a worker's, or a sum an aggregator
 * forwards) are scaled. NULL:
 * no memory for the copy.
 */
static const uint8_t *stale_scaled(struct dml_server *s, int clocked, const Dml__Meta *m,
				   const uint8_t *payload)
{
	uint64_t newest, keybytes, n;
	float *copy, *vals;
	float k;

	/* The newest clock is a walk over every worker: only when it matters. */
	if (s->stale_scaling != DML_STALE_INVERSE || !clocked)
		return payload;
	newest = dml_ssp_max_clock(&s->ssp);
	if (newest <= m->clock)
		return payload;
	dml_server_push_sizes(m, &keybytes, &n);
	copy = dml_server_scratch(s, keybytes / sizeof(float) + n);
	if (!copy)
		return NULL;
	if (payload != (const uint8_t *)copy)   /* a decoded push is there already */
		memcpy(copy, payload, keybytes + n * sizeof(float));
	vals = copy + keybytes / sizeof(float);
	k = 1.0f / (float)(1 + (newest - m->clock));
	for (uint64_t i = 0; i < n; i++)
		vals[i] *= k;
	s->st.stale_scaled++;
	return (const uint8_t *)copy;
}

/* 0, or DML_CONN_HOLD for a push that waits for a checkpoint. */
static int handle_push(struct session *ss, const Dml__Meta *m, const uint8_t *payload)
{
	struct dml_ssp_worker *w = dml_server_session_worker(ss);
	struct table_entry *te = request_table(ss, m);
	const uint64_t *keys = (const uint64_t *)payload;
	int rc, deferred, forwarded;

	if (!te)
		return 0;
	if (ss->role == DML__ROLE__CONTROL || ss->role == DML__ROLE__SERVER) {
		/* Control clients have no clock and no push sequence: a resend
		 * could not be told from a new push, so they may only read. */
		dml_server_reply_error(ss, m->request_id, DML_EROLE,
				       "control clients and servers may not push");
		return 0;
	}
	/* An aggregator's summed push: its contributors' sequences decide. */
	forwarded = m->n_contributors || ss->role == DML__ROLE__AGGREGATOR;
	switch (forwarded ? dml_server_forwarded_check(ss, m) : dml_server_seq_check(w, m->seq)) {
	case DML_SEQ_REFUSED:
		return 0;
	case DML_SEQ_RESEND:
		/* A resend after a reconnect: already applied once. */
		ss->srv->st.duplicates++;
		dml_server_store_duplicate(ss, m->request_id);
		if (forwarded)
			dml_server_forwarded_clocks(ss->srv, m);
		return 0;
	case DML_SEQ_JUMP:
		ss->srv->st.seq_jumps++;
		dml_server_reply_error(ss, m->request_id, DML_EINVAL, "push to table %u: seq %llu "
				       "is more than %llu past the last applied (%llu)", m->table,
				       (unsigned long long)m->seq,
				       (unsigned long long)DML_SEQ_WINDOW,
				       (unsigned long long)w->last_seq);
		return 0;
	}
	if (m->weight != 0.0f && !dml_push_weight_ok(m->weight)) {
		dml_server_reply_error(ss, m->request_id, DML_EINVAL, "push to table %u: "
				       "weight %g is not a positive finite number", m->table,
				       (double)m->weight);
		return 0;
	}
	if (dml_server_cut_holds(ss, m))
		return DML_CONN_HOLD;
	if (!request_served(ss, m, te, keys) ||
	    (payload = dml_server_push_decode(ss, m, payload)) == NULL ||
	    !dml_server_push_admit(ss, m, payload))
		return 0;
	if ((payload = stale_scaled(ss->srv, w || forwarded, m, payload)) == NULL) {
		dml_server_reply_error(ss, m->request_id, DML_ENOMEM, "push to table %u: no "
				       "memory to scale it by its staleness", m->table);
		return 0;
	}
	keys = (const uint64_t *)payload;
	deferred = dml_server_step_defers(ss->srv, te);
	if (deferred)
		rc = dml_server_step_add(te, m->key_begin, m->key_end, (const float *)payload,
					 dml_push_weight_of(m));
	else if (m->dense)
		rc = dml_table_push_range_weighted(te->table, m->key_begin, m->key_end,
						   (const float *)payload, dml_push_weight_of(m));
	else
		rc = dml_table_push_keys_weighted(te->table, keys, m->num_keys,
						  (const float *)(payload + m->num_keys * 8ull),
						  dml_push_weight_of(m));
	if (rc) {
		dml_server_reply_error(ss, m->request_id, rc, "push to table %u: %s", m->table,
				       dml_strerror(rc));
		return 0;
	}
	if (forwarded)
		dml_server_forwarded_applied(ss->srv, m);
	else if (w && m->seq != 0)
		w->last_seq = m->seq;
	ss->srv->st.pushes++;
	ss->srv->st.deferred += deferred;
	dml_server_cut_applied(ss->srv, m->clock);
	dml_server_store_pushed(ss, m, payload, w ? w->id : ss->node_id, w ? w->incarnation : 0,
				deferred);
	if (forwarded)
		dml_server_forwarded_clocks(ss->srv, m);
	return 0;
}

/*
 * A scan (dml.proto): every row of a sparse table whose key hash lies in
 * [key_begin, key_end), a range this server must hold whole, sent as keys
 * then values. How `dmlctl export` reads sparse tables; it asks again for
 * halves of a range whose rows would not fit in one frame.
 */
static void handle_scan(struct session *ss, const Dml__Meta *m, struct table_entry *te)
{
	struct dml_server *s = ss->srv;
	uint32_t w = te->info.width;
	size_t n = 0, row_floats = dml_table_row_floats(te->table);
	uint64_t *keys = NULL, bytes;
	float *rows = NULL;
	uint8_t *buf;
	Dml__Meta r = DML__META__INIT;
	int rc;

	if (ss->role != DML__ROLE__CONTROL) {
		dml_server_reply_error(ss, m->request_id, DML_EROLE,
				       "only control clients may scan a table");
		return;
	}
	if (te->info.dense) {
		dml_server_reply_error(ss, m->request_id, DML_ESHAPE,
				       "table %u is dense: scan its key range instead", m->table);
		return;
	}
	if (!dml_server_ranges_cover(&te->served, m->key_begin, m->key_end)) {
		dml_server_reply_error(ss, m->request_id, DML_ERANGE,
				       "hashes %llu..%llu of table %u are not all on this server "
				       "(map v%llu)", (unsigned long long)m->key_begin,
				       (unsigned long long)m->key_end, m->table,
				       (unsigned long long)s->job.version);
		return;
	}
	rc = dml_table_export_hashed(te->table, dml_shard_key_hash, m->key_begin, m->key_end,
				     &keys, &rows, &n);
	if (rc) {
		dml_server_reply_error(ss, m->request_id, rc, "scan of table %u: %s", m->table,
				       dml_strerror(rc));
		return;
	}
	bytes = (uint64_t)n * (sizeof(uint64_t) + w * sizeof(float));
	if (n > s->conf->max_keys || bytes > s->conf->max_payload) {
		dml_server_reply_error(ss, m->request_id, DML_EFRAME_PAYLOAD,
				       "scan of table %u: %zu rows (%llu bytes) are more than one "
				       "reply holds (max_keys %llu, max_payload %llu): ask for part "
				       "of the range", m->table, n, (unsigned long long)bytes,
				       (unsigned long long)s->conf->max_keys,
				       (unsigned long long)s->conf->max_payload);
		goto out;
	}
	/* Keys, then each row's values without its optimizer state, in place. */
	buf = (uint8_t *)rows;
	if (n && !(buf = malloc(bytes))) {
		dml_server_reply_error(ss, m->request_id, DML_ENOMEM,
				       "no memory for a scan of %zu rows", n);
		goto out;
	}
	if (n) {
		float *vals = (float *)(buf + n * sizeof(uint64_t));

		memcpy(buf, keys, n * sizeof(uint64_t));
		for (size_t i = 0; i < n; i++)
			memcpy(vals + i * w, rows + i * row_floats, w * sizeof(float));
	}
	r.type = DML__MSG_TYPE__PULL_REPLY;
	r.request_id = m->request_id;
	r.sender = s->conf->node_id;
	r.table = te->info.id;
	r.value_width = w;
	r.scan = 1;
	r.key_begin = m->key_begin;
	r.key_end = m->key_end;
	r.num_keys = (uint32_t)n;
	s->st.pulls++;
	rc = dml_conn_send(ss->peer.conn, &r, n ? buf : NULL, bytes, DML_SEND_COPY);
	if (rc)
		dml_warn("peer %s: scan reply not sent: %s", dml_conn_peer(ss->peer.conn),
			 dml_strerror(rc));
	if (n)
		free(buf);
out:
	free(keys);
	free(rows);
}

/* Answers or parks the pull; returns 1 when parked (answered later). */
static int handle_pull(struct session *ss, const Dml__Meta *m, const uint8_t *payload,
		       uint64_t received_ns)
{
	struct dml_server *s = ss->srv;
	struct table_entry *te = request_table(ss, m);
	const uint64_t *keys = (const uint64_t *)payload;
	int aggregator = ss->role == DML__ROLE__AGGREGATOR;
	struct held_pull ask, *h;

	if (te && m->scan) {
		handle_scan(ss, m, te);
		return 0;
	}
	if (!te || !request_served(ss, m, te, keys))
		return 0;
	ask = (struct held_pull){
		.sess = ss, .received_ns = received_ns, .request_id = m->request_id,
		.clock = m->clock, .worker = aggregator ? m->worker : ss->node_id,
		.te = te, .dense = m->dense, .begin = m->key_begin,
		.end = m->key_end, .keys = (uint64_t *)keys,
		.nkeys = m->dense ? 0 : m->num_keys, .dtype = m->dtype,
		.base = m->held_version,
	};
	/* The frame check took only a lossy codec, on a dense pull. */
	if (m->delta_codec && m->delta_codec[0] &&
	    dml_codec_parse(m->delta_codec, &ask.delta, NULL, 0) != 0)
		ask.delta.kind = DML_CODEC_NONE;
	/* An aggregator's pull is its zone's workers': it waits as theirs do. */
	if ((!ss->worker && !aggregator) || dml_ssp_ready(&s->ssp, m->clock)) {
		dml_server_answer_pull(&ask, 0);
		return 0;
	}
	h = dml_xmalloc(sizeof(*h));
	*h = ask;
	h->keys = NULL;            /* the payload's: a copy of its own below */
	if (!m->dense) {
		h->keys = malloc(m->num_keys * sizeof(uint64_t));
		if (!h->keys) {
			free(h);
			dml_server_reply_error(ss, m->request_id, DML_ENOMEM,
					       "no memory to park a pull");
			return 0;
		}
		memcpy(h->keys, keys, m->num_keys * sizeof(uint64_t));
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

int dml_server_on_frame(struct dml_conn *c, const Dml__Meta *m, const uint8_t *payload,
			size_t len, void *arg)
{
	struct session *ss = arg;
	struct dml_server *s = ss->srv;
	struct dml_ssp_worker *w = dml_server_session_worker(ss);
	uint64_t t0;

	switch (m->type) {
	case DML__MSG_TYPE__PUSH:
		t0 = dml_now_ns();
		if (handle_push(ss, m, payload) == DML_CONN_HOLD)
			return DML_CONN_HOLD;
		s->st.requests[REQ_PUSH]++;
		dml_histogram_observe_since(s->push_latency, t0);
		return 0;
	case DML__MSG_TYPE__PULL:
		if (dml_server_budget_holds(ss, m))
			return DML_CONN_HOLD;
		s->st.requests[REQ_PULL]++;
		t0 = dml_now_ns();
		if (!handle_pull(ss, m, payload, t0))
			dml_histogram_observe_since(s->pull_latency, t0);
		return 0;
	case DML__MSG_TYPE__CLOCK:
		s->st.requests[REQ_CLOCK]++;
		if (ss->role == DML__ROLE__AGGREGATOR) {
			dml_server_forwarded_clocks(s, m);
			return 0;
		}
		if (!w || m->n_contributors)
			return DML_EROLE;
		dml_ssp_set_clock(&s->ssp, w, m->clock);
		dml_server_release_held(s);
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
			dml_server_release_held(s);
		}
		dml_server_reply_ack(ss, m->request_id);
		return 0;
	case DML__MSG_TYPE__STATS:
		s->st.requests[REQ_STATS]++;
		handle_stats(ss, m);
		return 0;
	case DML__MSG_TYPE__MIGRATE:
		dml_server_job_migrate(ss, m, payload);
		return 0;
	default:
		/* Replies and handshakes have no business arriving here. */
		return DML_ESTATE;
	}
}
