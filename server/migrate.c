/*
 * Rows moving between servers during a remap (see job.c): parcels of rows
 * given away, one MIGRATE frame each, queued to the new owner's connection
 * (at most PARCEL_WINDOW in flight), freed when the owner ACKs them and
 * resent on a new connection (with backoff) until then; and the MIGRATE
 * frames arriving from peers, installed when they are of the map version
 * being installed.
 *
 * Must never: install rows of a map version other than the one being
 * installed, trust a range or a row count a peer sent without checking it,
 * or block the loop (connections to peers are made and retried from it).
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proto/conn.h"
#include "proto/dml_error.h"
#include "server/job_internal.h"
#include "proto/sched_link.h"
#include "proto/log.h"
#include "shard/mapplan.h"
#include "store/optim.h"
#include "shard/shardmap.h"
#include "store/table.h"
#include "proto/table_spec.h"
#include "proto/util.h"

/* Rows per MIGRATE frame: about this many bytes of them. */
#define PARCEL_BYTES ((size_t)4 << 20)
/* Frames in flight per peer connection, so queued output stays bounded. */
#define PARCEL_WINDOW 4
#define BACKOFF_MIN_MS 20
#define BACKOFF_MAX_MS 2000

/* ---- parcels: rows on their way to another server ---------------------------- */

void dml_server_parcel_free(struct parcel *p)
{
	if (!p)
		return;
	free(p->keys);
	free(p->rows);
	free(p);
}

/* A parcel holding copies of n rows (and, sparse, their keys). */
struct parcel *dml_server_parcel_new(uint32_t table, int dense, uint64_t begin, uint64_t end,
				     const uint64_t *keys, const float *rows, size_t n, size_t rf)
{
	struct parcel *p = dml_xcalloc(1, sizeof(*p));

	p->table = table;
	p->dense = dense;
	p->begin = begin;
	p->end = end;
	p->nrows = n;
	p->row_floats = rf;
	if (n) {
		p->rows = dml_xmalloc(n * rf * sizeof(float));
		memcpy(p->rows, rows, n * rf * sizeof(float));
		if (keys) {
			p->keys = dml_xmalloc(n * sizeof(uint64_t));
			memcpy(p->keys, keys, n * sizeof(uint64_t));
		}
	}
	return p;
}

/* Rows per parcel: PARCEL_BYTES of them, and no more keys than a frame may
 * carry. */
size_t dml_server_parcel_rows(const struct dml_server *s, size_t rf, int dense)
{
	size_t row_bytes = rf * sizeof(float) + (dense ? 0 : sizeof(uint64_t));
	size_t n = PARCEL_BYTES / row_bytes;

	if (!dense && n > s->conf->max_keys)
		n = (size_t)s->conf->max_keys;
	return n ? n : 1;
}

static void peer_timer_cb(evutil_socket_t fd, short what, void *arg)
{
	dml_server_peer_connect(arg);
}

static void peer_retry_later(struct mig_peer *p, int err)
{
	struct timeval tv;

	if (err != p->logged_err)
		dml_warn("job %u: cannot deliver rows to server %u at %s (%s); retrying",
			 p->srv->job.id, p->node_id, p->address, dml_strerror(err));
	p->logged_err = err;
	p->backoff_ms = p->backoff_ms ? p->backoff_ms * 2 : BACKOFF_MIN_MS;
	if (p->backoff_ms > BACKOFF_MAX_MS)
		p->backoff_ms = BACKOFF_MAX_MS;
	tv.tv_sec = p->backoff_ms / 1000;
	tv.tv_usec = (p->backoff_ms % 1000) * 1000;
	evtimer_add(p->timer, &tv);
}

/* Send what the window allows. */
static void peer_pump(struct mig_peer *p)
{
	struct dml_server *s = p->srv;

	for (struct parcel *q = p->head; q && p->in_flight < PARCEL_WINDOW; q = q->next) {
		Dml__Meta m = DML__META__INIT;
		struct iovec iov[2];
		int n = 0, rc;

		if (q->request_id)
			continue;
		m.type = DML__MSG_TYPE__MIGRATE;
		m.request_id = ++p->next_id;
		m.sender = s->conf->node_id;
		m.job = s->job.id;
		m.table = q->table;
		m.map_version = s->job.version;
		m.dense = q->dense;
		m.key_begin = q->begin;
		m.key_end = q->end;
		m.value_width = (uint32_t)q->row_floats;
		m.num_keys = q->dense ? 0 : (uint32_t)q->nrows;
		m.dtype = DML__DTYPE__F32;
		if (!q->dense && q->nrows) {
			iov[n].iov_base = q->keys;
			iov[n++].iov_len = q->nrows * sizeof(uint64_t);
		}
		if (q->nrows) {
			iov[n].iov_base = q->rows;
			iov[n++].iov_len = q->nrows * q->row_floats * sizeof(float);
		}
		/* A copy: a newer map may take the parcel back while a frame
		 * of it still waits in the connection's output. */
		rc = dml_conn_sendv(p->conn, &m, iov, n, DML_SEND_COPY);
		if (rc) {
			dml_conn_close(p->conn, rc);
			return;
		}
		q->request_id = m.request_id;
		p->in_flight++;
	}
}

/*
 * Unlink a peer and free it with its parcels. Its connection is left to
 * close by itself: flushed when everything was delivered, else dropped at
 * once so that frames planned for an older map stop as early as possible.
 */
static void peer_free(struct dml_server *s, struct mig_peer *p, int drop)
{
	struct mig_peer **pp = &s->job.peers;

	while (*pp && *pp != p)
		pp = &(*pp)->next;
	if (*pp)
		*pp = p->next;
	if (p->conn) {
		dml_conn_set_arg(p->conn, NULL);
		if (drop)
			dml_conn_abort(p->conn, DML_ECLOSED);
		else
			dml_conn_close(p->conn, 0);
	}
	while (p->head) {
		struct parcel *q = p->head;

		p->head = q->next;
		dml_server_parcel_free(q);
	}
	event_free(p->timer);
	free(p);
}

static int peer_on_welcome(struct dml_conn *c, const Dml__Handshake *w, void *arg)
{
	struct mig_peer *p = arg;

	if (!p)
		return DML_ECLOSED;
	if (w->role != DML__ROLE__SERVER || w->node_id != p->node_id) {
		if (p->logged_err != DML_EROLE)
			dml_err("job %u: %s is node %u of role %u, not server %u; check the "
				"servers' advertised addresses", p->srv->job.id, p->address,
				w->node_id, w->role, p->node_id);
		p->logged_err = DML_EROLE;
		return DML_EROLE;
	}
	return 0;
}

static void peer_on_ready(struct dml_conn *c, void *arg)
{
	struct mig_peer *p = arg;

	if (p)
		peer_pump(p);
}

static void peer_acked(struct mig_peer *p, uint64_t request_id)
{
	struct dml_server *s = p->srv;
	struct parcel **pp = &p->head;

	while (*pp && (*pp)->request_id != request_id)
		pp = &(*pp)->next;
	if (!*pp)
		return;
	{
		struct parcel *q = *pp;

		*pp = q->next;
		s->job.rows_out += q->nrows;
		dml_server_parcel_free(q);
	}
	p->in_flight--;
	p->backoff_ms = 0;
	p->logged_err = 0;
	if (p->head) {
		peer_pump(p);
		return;
	}
	dml_debug("job %u: every row for server %u delivered", s->job.id, p->node_id);
	peer_free(s, p, 0);
	dml_server_job_progress(s);
}

static int peer_on_frame(struct dml_conn *c, const Dml__Meta *m, const uint8_t *payload,
			 size_t len, void *arg)
{
	struct mig_peer *p = arg;

	if (!p)
		return 0;
	if (m->type == DML__MSG_TYPE__ACK) {
		peer_acked(p, m->request_id);
		return 0;
	}
	if (m->type == DML__MSG_TYPE__ERROR) {
		int code = m->error->code < 0 && m->error->code > DML_ERR_MIN ? m->error->code
									       : DML_EIO;

		/* Most often the peer has not got the new map yet: start over on
		 * a new connection after the backoff, resending everything. */
		if (code != p->logged_err)
			dml_info("job %u: server %u did not take rows yet: %s; retrying",
				 p->srv->job.id, p->node_id, m->error->message);
		p->logged_err = code;
		dml_conn_close(c, code);
		return 0;
	}
	return 0;
}

static void peer_on_close(struct dml_conn *c, int err, void *arg)
{
	struct mig_peer *p = arg;

	if (!p)
		return;
	p->conn = NULL;
	p->in_flight = 0;
	for (struct parcel *q = p->head; q; q = q->next)
		q->request_id = 0;
	if (p->head)
		peer_retry_later(p, err ? err : DML_ECLOSED);
}

static const struct dml_conn_ops peer_ops = {
	.on_welcome = peer_on_welcome,
	.on_ready = peer_on_ready,
	.on_frame = peer_on_frame,
	.on_close = peer_on_close,
};

void dml_server_peer_connect(struct mig_peer *p)
{
	struct dml_server *s = p->srv;
	int rc;

	if (p->conn || s->peers.stopping)
		return;
	rc = dml_conn_connect(s->base, p->host, p->port, &s->conn_conf, &peer_ops, p, &p->conn);
	if (rc) {
		p->conn = NULL;
		peer_retry_later(p, rc);
	}
}

/* The peer for node_id (its address from the current map), made if needed. */
struct mig_peer *dml_server_peer_get(struct dml_server *s, uint32_t node_id)
{
	const Dml__ShardServer *sv = dml_server_map_server(s->job.map, node_id);
	struct mig_peer *p;

	for (p = s->job.peers; p; p = p->next)
		if (p->node_id == node_id)
			return p;
	p = dml_xcalloc(1, sizeof(*p));
	p->srv = s;
	p->node_id = node_id;
	/* The map was checked: the address parses. */
	snprintf(p->address, sizeof(p->address), "%s", sv ? sv->address : "");
	(void)dml_parse_hostport(p->address, p->host, sizeof(p->host), &p->port, 0);
	p->timer = evtimer_new(s->base, peer_timer_cb, p);
	p->next = s->job.peers;
	s->job.peers = p;
	return p;
}

void dml_server_peer_enqueue(struct mig_peer *p, struct parcel *q)
{
	struct parcel **pp = &p->head;

	while (*pp)
		pp = &(*pp)->next;
	q->next = NULL;
	q->request_id = 0;
	*pp = q;
}

/* Drop every peer, handing their undelivered parcels to *back (or freeing
 * them when back is NULL). */
void dml_server_peers_take_back(struct dml_server *s, struct parcel **back)
{
	while (s->job.peers) {
		struct mig_peer *p = s->job.peers;

		while (back && p->head) {
			struct parcel *q = p->head;

			p->head = q->next;
			q->next = *back;
			q->request_id = 0;
			*back = q;
		}
		peer_free(s, p, 1);
	}
}

void dml_server_job_migrate(struct session *ss, const Dml__Meta *m, const uint8_t *payload)
{
	struct dml_server *s = ss->srv;
	struct table_entry *te = NULL;
	uint64_t b = m->key_begin, e = m->key_end;
	const uint64_t *keys = (const uint64_t *)payload;
	size_t rf, n = m->dense ? 0 : m->num_keys;
	int rc;

	if (ss->role != DML__ROLE__SERVER) {
		dml_server_reply_error(ss, m->request_id, DML_EROLE,
				       "only servers may send rows (MIGRATE)");
		return;
	}
	if (!s->job_mode || s->job.id == 0 || m->job != s->job.id) {
		dml_server_reply_error(ss, m->request_id, DML_ESTATE,
				       "job %u is not on this server", m->job);
		return;
	}
	if (m->map_version != s->job.version) {
		dml_server_reply_error(ss, m->request_id, DML_ESTATE,
				       "rows planned for map v%llu; this server has v%llu",
				       (unsigned long long)m->map_version,
				       (unsigned long long)s->job.version);
		return;
	}
	for (size_t i = 0; i < s->ntables && !te; i++)
		if (s->tables[i].info.id == m->table)
			te = &s->tables[i];
	if (!te) {
		dml_server_reply_error(ss, m->request_id, DML_ENOTFOUND,
				       "no table %u in job %u", m->table, s->job.id);
		return;
	}
	rf = dml_table_row_floats(te->table);
	if (!m->dense != !te->info.dense || m->value_width != rf) {
		dml_server_reply_error(ss, m->request_id, DML_ESHAPE,
				       "table %u is %s with rows of %zu floats; the frame says "
				       "%s, %u", m->table, te->info.dense ? "dense" : "sparse", rf,
				       m->dense ? "dense" : "sparse", m->value_width);
		return;
	}
	if (b >= e || e > dml_server_table_space(&te->info)) {
		dml_server_reply_error(ss, m->request_id, DML_EINVAL,
				       "range [%llu, %llu) is empty or outside table %u",
				       (unsigned long long)b, (unsigned long long)e, m->table);
		return;
	}
	if (dml_server_ranges_cover(&te->served, b, e)) {
		/* A resend whose ACK was lost (or that its first's commit still
		 * holds back): installed once already. */
		dml_server_store_duplicate(ss, m->request_id);
		return;
	}
	if (!dml_server_ranges_cover(&te->pending, b, e)) {
		dml_server_reply_error(ss, m->request_id, DML_ERANGE,
				       "keys %llu..%llu of table %u are not expected here",
				       (unsigned long long)b, (unsigned long long)e, m->table);
		return;
	}
	for (size_t i = 0; i < n; i++) {
		uint64_t h = dml_shard_key_hash(keys[i]);

		if (h < b || h >= e) {
			dml_server_reply_error(ss, m->request_id, DML_EINVAL,
					       "key %llu hashes outside %llu..%llu",
					       (unsigned long long)keys[i],
					       (unsigned long long)b, (unsigned long long)e);
			return;
		}
	}
	if (m->dense)
		rc = dml_table_import_range(te->table, b, e, (const float *)payload);
	else
		rc = dml_table_import_keys(te->table, keys, n,
					   (const float *)(payload + n * sizeof(uint64_t)));
	if (rc) {
		dml_server_reply_error(ss, m->request_id, rc, "rows of table %u: %s", m->table,
				       dml_strerror(rc));
		return;
	}
	dml_server_ranges_sub(&te->pending, b, e);
	dml_server_ranges_add(&te->served, b, e);
	s->job.rows_in += m->dense ? e - b : n;
	s->job.last_rows_ns = dml_now_ns();
	dml_server_store_moved(ss, m, payload);
	dml_server_job_progress(s);
}
