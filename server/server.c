/*
 * dml-server core (see server.h): sessions and the request handlers. Which
 * tables exist and which of their keys are served is decided by the config
 * file (build_tables) or by the scheduler's shard maps (server_job.c); the
 * handlers here only check every request against that before applying it.
 *
 * Metrics are registered in server_metrics.c; the request paths here only
 * bump integers of struct stats and feed three histograms.
 *
 * Must never: block the event loop (a pull that is too early is parked and
 * answered when the clocks allow), apply a push twice (per-worker sequence
 * numbers, checked before the key ranges so a resend of a push applied
 * before its keys moved is still acknowledged), apply any of a request
 * whose keys are not all served here, trust a count or key the peer sent
 * without checking it against the table, or let one bad peer cost more than
 * its own connection.
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
#include "server_snap.h"
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

/* A [table] section as the table storage wants it. */
static void table_conf_from(const struct dml_server_table_conf *tc, uint64_t begin,
			    uint64_t end, struct dml_table_conf *t)
{
	int dense = tc->kind == DML_TABLE_DENSE;

	memset(t, 0, sizeof(*t));
	t->id = tc->id;
	t->width = tc->width;
	t->kind = (enum dml_table_kind)tc->kind;
	t->key_begin = dense ? begin : 0;
	t->key_end = dense ? end : 0;
	t->capacity_hint = tc->capacity;
	t->init = (enum dml_init_kind)tc->init;
	t->init_scale = (float)tc->init_scale;
	t->seed = tc->seed;
	t->optim.kind = (enum dml_optim_kind)tc->optimizer;
	t->optim.lr = (float)tc->lr;
	t->optim.weight_decay = (float)tc->weight_decay;
	t->optim.momentum = (float)tc->momentum;
	t->optim.beta1 = (float)tc->beta1;
	t->optim.beta2 = (float)tc->beta2;
	t->optim.eps = (float)tc->epsilon;
	t->optim.lr_decay = (float)tc->lr_decay;
}

/* The config file's tables: each split evenly by "shard = i/n". */
static int build_tables(struct dml_server *s)
{
	const struct dml_server_conf *c = s->conf;

	s->tables = dml_xcalloc(c->ntables, sizeof(*s->tables));
	for (size_t i = 0; i < c->ntables; i++) {
		const struct dml_server_table_conf *tc = &c->tables[i];
		struct table_entry *te = &s->tables[i];
		struct dml_table_conf t;
		int dense = tc->kind == DML_TABLE_DENSE, rc;
		uint64_t begin, end;

		dml_shard_even_range(dense ? tc->keys : DML_SHARD_HASH_SPACE, c->shard_index,
				     c->shard_count, &begin, &end);
		table_conf_from(tc, begin, end, &t);
		rc = dml_table_new(&t, &te->table);
		if (rc) {
			dml_err("table %u: %s", tc->id, dml_strerror(rc));
			return rc;
		}
		s->ntables++;
		dml__table_info__init(&te->info);
		te->info.id = tc->id;
		te->info.dense = dense;
		te->info.width = tc->width;
		te->info.keys = dense ? tc->keys : 0;
		dml_server_ranges_add(&te->served, begin, end);
		dml_info("table %u: %s, width %u, %s %llu..%llu", tc->id,
			 dense ? "dense" : "sparse", tc->width, dense ? "keys" : "key hashes",
			 (unsigned long long)begin, (unsigned long long)end);
	}
	s->shard_index = c->shard_index;
	s->shard_count = c->shard_count;
	dml_server_welcome_rebuild(s);
	return 0;
}

void dml_server_tables_free(struct dml_server *s)
{
	/* A snapshot watches them. */
	dml_server_snap_finish(s);
	for (size_t i = 0; i < s->ntables; i++) {
		dml_table_free(s->tables[i].table);
		dml_server_ranges_clear(&s->tables[i].served);
		dml_server_ranges_clear(&s->tables[i].pending);
		dml_server_ranges_clear(&s->tables[i].moved_in);
		dml_server_step_free(&s->tables[i]);
	}
	free(s->tables);
	s->tables = NULL;
	s->ntables = 0;
	s->step_min_clock = 0;
}

/* Append one TableInfo for [begin, end) of te. */
static void welcome_add(struct dml_server *s, const struct table_entry *te, uint64_t begin,
			uint64_t end, size_t *cap)
{
	Dml__TableInfo *t;

	if (s->nwinfos == *cap) {
		*cap = *cap ? *cap * 2 : 8;
		s->winfo = dml_xrealloc(s->winfo, *cap * sizeof(*s->winfo));
	}
	t = &s->winfo[s->nwinfos++];
	*t = te->info;
	t->key_begin = begin;
	t->key_end = end;
}

void dml_server_welcome_rebuild(struct dml_server *s)
{
	const Dml__ShardMap *map = s->job.map;
	size_t cap = 0;

	free(s->winfo);
	free(s->winfos);
	s->winfo = NULL;
	s->winfos = NULL;
	s->nwinfos = 0;
	for (size_t i = 0; i < s->ntables; i++) {
		const struct table_entry *te = &s->tables[i];

		if (!s->job_mode) {
			for (size_t j = 0; j < te->served.n; j++)
				welcome_add(s, te, te->served.r[j].begin, te->served.r[j].end,
					    &cap);
			continue;
		}
		for (size_t j = 0; map && j < map->n_ranges; j++) {
			const Dml__ShardRange *r = map->ranges[j];

			if (r->table == te->info.id && r->server == s->conf->node_id)
				welcome_add(s, te, r->begin, r->end, &cap);
		}
	}
	/* Pointers last: the array above may have moved while it grew. */
	s->winfos = dml_xcalloc(s->nwinfos ? s->nwinfos : 1, sizeof(*s->winfos));
	for (size_t i = 0; i < s->nwinfos; i++)
		s->winfos[i] = &s->winfo[i];
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

/* ---- replies ------------------------------------------------------------ */

void dml_server_reply_error(struct session *ss, uint64_t request_id, int code,
			    const char *fmt, ...)
{
	Dml__Meta m = DML__META__INIT;
	Dml__Error e = DML__ERROR__INIT;
	char msg[256];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	dml_debug("peer %s: request %llu: %s", dml_conn_peer(ss->peer.conn),
		  (unsigned long long)request_id, msg);
	m.type = DML__MSG_TYPE__ERROR;
	m.request_id = request_id;
	m.sender = ss->srv->conf->node_id;
	/* The client compares it with its map to know whether to fetch a newer one. */
	if (code == DML_ERANGE)
		m.map_version = ss->srv->job.version;
	e.code = code;
	e.message = msg;
	m.error = &e;
	(void)dml_conn_send(ss->peer.conn, &m, NULL, 0, DML_SEND_COPY);
	/* A refused push's payload buffer goes too, whatever its size. */
	dml_conn_trim(ss->peer.conn);
}

void dml_server_reply_ack(struct session *ss, uint64_t request_id)
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

/* held_ns: how long the pull waited for the staleness bound (the reply says). */
static void answer_pull(struct session *ss, uint64_t request_id, struct table_entry *te,
			int dense, uint64_t begin, uint64_t end, const uint64_t *keys,
			uint32_t nkeys, uint64_t held_ns)
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
		dml_server_reply_error(ss, request_id, DML_ENOMEM,
				       "no memory for a %llu-float reply",
				       (unsigned long long)floats);
		return;
	} else {
		rc = dml_table_pull_keys(te->table, keys, nkeys, out);
		values = out;
	}
	if (rc) {
		dml_server_reply_error(ss, request_id, rc, "pull from table %u: %s",
				       te->info.id, dml_strerror(rc));
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
	m.held_us = held_ns / 1000;
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

/* Take the step of a clock every worker ended, then answer every parked
 * pull the clocks now allow; a checkpoint may be due. */
static void release_held(struct dml_server *s)
{
	struct held_pull **pp = &s->held;

	dml_server_step_clock(s);
	while (*pp) {
		struct held_pull *h = *pp;

		if (!dml_ssp_ready(&s->ssp, h->clock)) {
			pp = &h->next;
			continue;
		}
		*pp = h->next;
		dml_histogram_observe_since(s->held_wait, h->received_ns);
		answer_pull(h->sess, h->request_id, h->te, h->dense, h->begin, h->end, h->keys,
			    h->nkeys, dml_now_ns() - h->received_ns);
		dml_histogram_observe_since(s->pull_latency, h->received_ns);
		free(h->keys);
		free(h);
	}
	dml_server_cut_check(s);
}

/* Drop the parked pulls of ss (NULL: all), answering them with code unless 0. */
static void drop_held(struct dml_server *s, struct session *ss, int code, const char *why)
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
			dml_server_reply_error(h->sess, h->request_id, code, "%s", why);
		free(h->keys);
		free(h);
	}
}

void dml_server_held_fail_all(struct dml_server *s, int code, const char *why)
{
	drop_held(s, NULL, code, why);
}

void dml_server_held_recheck(struct dml_server *s)
{
	struct held_pull **pp = &s->held;

	while (*pp) {
		struct held_pull *h = *pp;

		if (dml_server_serves(h->te, h->dense, h->begin, h->end, h->keys,
				      h->nkeys) == 0) {
			pp = &h->next;
			continue;
		}
		*pp = h->next;
		dml_server_reply_error(h->sess, h->request_id, DML_ERANGE,
				       "keys of table %u moved to another server (map v%llu)",
				       h->te->info.id, (unsigned long long)s->job.version);
		free(h->keys);
		free(h);
	}
}

/* ---- request handlers --------------------------------------------------- */

static struct dml_ssp_worker *session_worker(struct session *ss)
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
	te = find_table(s, m->table);
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
 * is what is applied and logged, so a replay gives the same rows. NULL:
 * no memory for the copy.
 */
static const uint8_t *stale_scaled(struct dml_server *s, const struct dml_ssp_worker *w,
				   const Dml__Meta *m, const uint8_t *payload)
{
	uint64_t newest = dml_ssp_max_clock(&s->ssp), keybytes, n;
	float *copy, *vals;
	float k;

	if (s->stale_scaling != DML_STALE_INVERSE || !w || newest <= m->clock)
		return payload;
	keybytes = m->dense ? 0 : m->num_keys * 8ull;
	n = (m->dense ? m->key_end - m->key_begin : m->num_keys) * (uint64_t)m->value_width;
	copy = scratch(s, keybytes / sizeof(float) + n);
	if (!copy)
		return NULL;
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
	struct dml_ssp_worker *w = session_worker(ss);
	struct table_entry *te = request_table(ss, m);
	const uint64_t *keys = (const uint64_t *)payload;
	int rc, deferred;

	if (!te)
		return 0;
	if (ss->role == DML__ROLE__CONTROL || ss->role == DML__ROLE__SERVER) {
		/* Control clients have no clock and no push sequence: a resend
		 * could not be told from a new push, so they may only read. */
		dml_server_reply_error(ss, m->request_id, DML_EROLE,
				       "control clients and servers may not push");
		return 0;
	}
	switch (dml_server_seq_check(w, m->seq)) {
	case DML_SEQ_RESEND:
		/* A resend after a reconnect: already applied once. */
		ss->srv->st.duplicates++;
		dml_server_store_duplicate(ss, m->request_id);
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
	if (!request_served(ss, m, te, keys) || !dml_server_push_admit(ss, m, payload))
		return 0;
	if ((payload = stale_scaled(ss->srv, w, m, payload)) == NULL) {
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
	if (w && m->seq != 0)
		w->last_seq = m->seq;
	ss->srv->st.pushes++;
	ss->srv->st.deferred += deferred;
	dml_server_cut_applied(ss->srv, m->clock);
	dml_server_store_pushed(ss, m, payload, w ? w->id : ss->node_id, w ? w->incarnation : 0,
				deferred);
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
	struct held_pull *h;

	if (te && m->scan) {
		handle_scan(ss, m, te);
		return 0;
	}
	if (!te || !request_served(ss, m, te, keys))
		return 0;
	if (!ss->worker || dml_ssp_ready(&s->ssp, m->clock)) {
		answer_pull(ss, m->request_id, te, m->dense, m->key_begin, m->key_end, keys,
			    m->num_keys, 0);
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
			dml_server_reply_error(ss, m->request_id, DML_ENOMEM,
					       "no memory to park a pull");
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

/* ---- sessions ----------------------------------------------------------- */

static const char *role_name(uint32_t role)
{
	switch (role) {
	case DML__ROLE__WORKER: return "worker";
	case DML__ROLE__CONTROL: return "control";
	case DML__ROLE__AGGREGATOR: return "aggregator";
	case DML__ROLE__SERVER: return "server";
	default: return "peer";
	}
}

/*
 * A worker takes its place in the clock set. One the set does not know yet
 * starts at the clock its HELLO names, so a server that joins a running job
 * (or a new job's set) does not hold everybody's pulls back to clock 0.
 */
static void worker_join(struct session *ss, const Dml__Handshake *hello)
{
	struct dml_ssp *ssp = &ss->srv->ssp;
	struct dml_ssp_worker *w = dml_ssp_find(ssp, hello->node_id);
	int known = w != NULL;

	if (w && w->incarnation != hello->incarnation)
		dml_server_store_keep_seq(ss->srv, w);
	w = dml_ssp_join(ssp, hello->node_id, hello->incarnation);

	if (!known && hello->clock > 0)
		w->clock = hello->clock;
	ss->worker = 1;
	ss->widx = (size_t)(w - ssp->workers);
	dml_server_store_join(ss->srv, w);
	/* Workers back after a restart, past the clock whose step the log
	 * lacks: the step before any of them reads. */
	dml_server_step_clock(ss->srv);
}

void dml_server_clock_reset(struct dml_server *s, int64_t staleness, uint32_t workers)
{
	dml_ssp_destroy(&s->ssp);
	dml_ssp_init(&s->ssp, staleness, workers);
	for (struct dml_peer *x = s->peers.head; x; x = x->next) {
		struct session *ss = (struct session *)x;
		const Dml__Handshake *h = dml_conn_peer_hello(x->conn);

		if (!ss->worker)
			continue;
		ss->worker = 0;
		if (h && h->job == s->job.id)
			worker_join(ss, h);
	}
}

static int on_hello(struct dml_conn *c, const Dml__Handshake *hello, Dml__Handshake *welcome,
		    void *arg)
{
	struct session *ss = arg;
	struct dml_server *s = ss->srv;

	switch (hello->role) {
	case DML__ROLE__WORKER:
	case DML__ROLE__CONTROL:
	case DML__ROLE__AGGREGATOR:
	case DML__ROLE__SERVER:    /* a peer sending rows (MIGRATE) */
		break;
	default:
		return DML_EROLE;
	}
	if (s->job_mode && hello->job > s->job.id && hello->role != DML__ROLE__SERVER) {
		/* Restarted, or new to a running job: the job's map is not
		 * installed and its log not replayed yet. The client tries
		 * again; nothing it sends may reach an empty clock set. */
		dml_info("peer %s: %s %u of job %u refused: the job is not on this server "
			 "yet", dml_conn_peer(c), role_name(hello->role), hello->node_id,
			 hello->job);
		return DML_EAGAIN;
	}
	ss->role = hello->role;
	ss->node_id = hello->node_id;
	if (hello->role == DML__ROLE__WORKER)
		worker_join(ss, hello);
	welcome->n_tables = s->nwinfos;
	welcome->tables = s->winfos;
	welcome->shard_index = s->shard_index;
	welcome->shard_count = s->shard_count;
	welcome->map_version = s->job.version;
	dml_info("peer %s: %s %u joined", dml_conn_peer(c), role_name(hello->role),
		 hello->node_id);
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
	drop_held(s, ss, 0, NULL);
	dml_server_store_forget(s, ss);
	dml_server_cut_forget(s, ss);
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

	dml_server_job_tick(s);
	dml_server_cut_tick(s);
	dml_server_straggler_tick(s);
	if (dml_ssp_reap(&s->ssp, dml_now_ns(), (uint64_t)s->dead_after_ms * 1000000ull)) {
		dml_info("a worker left the clock set; slowest clock is now %llu",
			 (unsigned long long)dml_ssp_min_clock(&s->ssp));
		release_held(s);
	}
	dml_server_workers_expire(s);
	dml_server_budget_tick(s);
}


void dml_server_evict(struct dml_server *s, uint32_t worker)
{
	struct dml_ssp_worker *w = dml_ssp_find(&s->ssp, worker);
	unsigned closed = 0;

	/* A hung worker keeps its connections open, so the reaper never
	 * counts it gone: close them, and it rejoins by reconnecting. */
	for (struct dml_peer *x = s->peers.head; x; x = x->next) {
		struct session *ss = (struct session *)x;

		if (!ss->worker || ss->node_id != worker)
			continue;
		drop_held(s, ss, 0, NULL);
		dml_conn_abort(x->conn, DML_ECLOSED);
		closed++;
	}
	if (!w) {
		if (dml_ssp_evict(&s->ssp, worker))
			dml_info("job %u: the scheduler lost worker %u before it joined here: "
				 "the clock set goes on without it", s->job.id, worker);
		else
			dml_info("job %u: the scheduler lost worker %u, not in the clock set "
				 "here (%u connections closed)", s->job.id, worker, closed);
		release_held(s);
		return;
	}
	if (!w->live) {
		dml_info("job %u: the scheduler lost worker %u, not in the clock set here "
			 "(%u connections closed)", s->job.id, worker, closed);
		return;
	}
	dml_ssp_evict(&s->ssp, worker);
	dml_info("job %u: the scheduler lost worker %u at clock %llu: dropped from the clock "
		 "set, %u connections closed; slowest clock is now %llu", s->job.id, worker,
		 (unsigned long long)w->clock, closed,
		 (unsigned long long)dml_ssp_min_clock(&s->ssp));
	release_held(s);
}

/* ---- lifecycle ---------------------------------------------------------- */


static int start_listening(struct dml_server *s)
{
	int rc = dml_listen_tcp(s->base, s->conf->listen, accept_cb, s, &s->listener,
				&s->port);

	if (rc)
		return rc;
	if (s->job_mode)
		dml_info("listening on %s, port %u; tables will come from the scheduler",
			 s->conf->listen, s->port);
	else
		dml_info("listening on %s, port %u (shard %u/%u, staleness %lld, %u workers "
			 "expected)", s->conf->listen, s->port, s->conf->shard_index,
			 s->conf->shard_count, (long long)s->conf->staleness, s->conf->workers);
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
	s->job_mode = conf->scheduler[0] && conf->ntables == 0;
	s->dead_after_ms = conf->dead_after_ms;
	s->stale_scaling = conf->stale_scaling;
	s->bsp_step = conf->bsp_step;
	s->allow_nonfinite = conf->allow_nonfinite;
	dml_ssp_init(&s->ssp, conf->staleness, conf->workers);
	dml_peers_init(&s->peers, base, conf->max_connections);
	s->peers.max_preauth = conf->max_preauth;
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
	dml_server_budget_tick(s);
	if (conf->ntables == 0 && !s->job_mode) {
		dml_err("no [table] section and no scheduler: nothing to serve");
		return DML_ECONF;
	}
	if (s->job_mode)
		dml_server_welcome_rebuild(s);
	else if ((rc = build_tables(s)) != 0)
		return rc;
	if ((rc = dml_server_store_open(s)) != 0)
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
	/* What was applied is logged and acknowledged before anyone is told
	 * to go. */
	dml_server_store_flush(s);
	if (s->listener) {
		dml_listener_free(s->listener);
		s->listener = NULL;
	}
	dml_metrics_http_stop(s->metrics);
	dml_server_sched_stop(s);
	dml_server_job_stop(s);
	drop_held(s, NULL, DML_ECLOSED, "server is shutting down");
	dml_peers_shutdown(&s->peers, SHUTDOWN_GRACE_S);
}

void dml_server_free(struct dml_server *s)
{
	if (!s)
		return;
	dml_server_sched_free(s);
	dml_server_job_free(s);
	/* Connections the grace period could not close are dropped now. */
	dml_peers_destroy(&s->peers);
	drop_held(s, NULL, 0, NULL);
	if (s->listener)
		dml_listener_free(s->listener);
	if (s->tick)
		event_free(s->tick);
	dml_server_store_free(s);
	dml_server_cut_free(s);
	dml_server_tables_free(s);
	free(s->winfo);
	free(s->winfos);
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

int dml_server_failed(const struct dml_server *s)
{
	return s && s->store_failed;
}
