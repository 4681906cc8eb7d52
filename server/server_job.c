/*
 * The job a dml-server serves when its tables come from the scheduler: shard
 * maps (SHARDMAP from dml-sched) and rows moving between servers (MIGRATE).
 *
 * A new job replaces every table by the job's, holding the ranges the map
 * gives this server; initial values depend only on (seed, key), so nothing
 * has to move and map v1 is ACKed at once. A first map of version 2 or more
 * means this server joins a running job: its ranges are pending (below)
 * until the servers that held them have sent them. A newer map of the same job
 * is a remap: every range this server served that the map gives to another
 * server stops being served at once and its rows (values and optimizer
 * state) leave the table as parcels, one MIGRATE frame each, queued to the
 * new owner's connection; a parcel is freed when the owner ACKs it, and
 * resent on a new connection (with backoff) until then. Every range the map
 * gives this server that it does not hold is pending: not served (requests
 * touching it get DML_ERANGE) until MIGRATE frames have covered all of it.
 * The SHARDMAP is ACKed when nothing is pending any more.
 *
 * A map arriving while the previous remap is still under way is planned
 * from what this server holds at that moment: rows still in undelivered
 * parcels count as its own (they are routed again, or imported back), and
 * pending ranges the newer map gives elsewhere are forgotten (whoever holds
 * their rows sends them to the new owner). Every MIGRATE names the map
 * version it was planned for, and a receiver takes only frames of the
 * version it installs, so rows planned for an older map are never installed
 * under a newer one; the sender retries until both sides agree.
 *
 * Each server is given one contiguous range of each dense table, so a dense
 * table is reallocated to the new range (dml_table_set_range) and the
 * arriving rows are written into it; sparse tables export and remove the
 * rows whose key hash left, and import the ones that arrive.
 *
 * Must never: apply a frame of a map version other than the one being
 * installed, serve a key before its rows arrived or after they were given
 * away, ACK a SHARDMAP before every gained range arrived, trust a map, a
 * range or a row count a peer sent without checking it, or block the loop
 * (connections to peers are made and retried from it).
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "conn.h"
#include "dml_error.h"
#include "link.h"
#include "log.h"
#include "mapplan.h"
#include "optim.h"
#include "server_internal.h"
#include "shardmap.h"
#include "table.h"
#include "table_spec.h"
#include "util.h"

/* Rows per MIGRATE frame: about this many bytes of them. */
#define PARCEL_BYTES ((size_t)4 << 20)
/* Frames in flight per peer connection, so queued output stays bounded. */
#define PARCEL_WINDOW 4
#define BACKOFF_MIN_MS 20
#define BACKOFF_MAX_MS 2000
/* Ranges named in one log line before "and N more". */
#define LOG_ITEMS 16
/* Pending ranges that see no rows for this long are reported (again). */
#define STALL_WARN_S 10

/* ---- range sets ---------------------------------------------------------- */

static void ranges_insert(struct key_ranges *r, size_t at, uint64_t begin, uint64_t end)
{
	if (r->n == r->cap) {
		r->cap = r->cap ? r->cap * 2 : 4;
		r->r = dml_xrealloc(r->r, r->cap * sizeof(*r->r));
	}
	if (at < r->n)
		memmove(&r->r[at + 1], &r->r[at], (r->n - at) * sizeof(*r->r));
	r->r[at].begin = begin;
	r->r[at].end = end;
	r->n++;
}

void dml_server_ranges_add(struct key_ranges *r, uint64_t begin, uint64_t end)
{
	size_t i = 0, j;

	if (begin >= end)
		return;
	while (i < r->n && r->r[i].end < begin)
		i++;
	/* r[i..j) overlap or touch [begin, end): they merge into one. */
	for (j = i; j < r->n && r->r[j].begin <= end; j++) {
		if (r->r[j].begin < begin)
			begin = r->r[j].begin;
		if (r->r[j].end > end)
			end = r->r[j].end;
	}
	if (j > i && j < r->n)
		memmove(&r->r[i], &r->r[j], (r->n - j) * sizeof(*r->r));
	r->n -= j - i;
	ranges_insert(r, i, begin, end);
}

/* Take [begin, end) out of the set. */
static void ranges_sub(struct key_ranges *r, uint64_t begin, uint64_t end)
{
	for (size_t i = 0; i < r->n && begin < end; i++) {
		struct key_range x = r->r[i];

		if (x.end <= begin || x.begin >= end)
			continue;
		if (x.begin < begin && x.end > end) {
			r->r[i].end = begin;
			ranges_insert(r, i + 1, end, x.end);
			return;
		}
		if (x.begin < begin) {
			r->r[i].end = begin;
		} else if (x.end > end) {
			r->r[i].begin = end;
		} else {
			memmove(&r->r[i], &r->r[i + 1], (r->n - i - 1) * sizeof(*r->r));
			r->n--;
			i--;
		}
	}
}

/* Keep only what also lies in keep. */
static void ranges_intersect(struct key_ranges *r, const struct key_ranges *keep)
{
	struct key_ranges out = { 0 };

	for (size_t i = 0; i < r->n; i++)
		for (size_t j = 0; j < keep->n; j++) {
			uint64_t b = r->r[i].begin > keep->r[j].begin ? r->r[i].begin
								       : keep->r[j].begin;
			uint64_t e = r->r[i].end < keep->r[j].end ? r->r[i].end : keep->r[j].end;

			dml_server_ranges_add(&out, b, e);
		}
	free(r->r);
	*r = out;
}

int dml_server_ranges_cover(const struct key_ranges *r, uint64_t begin, uint64_t end)
{
	size_t lo = 0, hi = r->n;

	if (begin >= end)
		return 1;
	/* Ranges never touch, so a covered range lies inside one of them. */
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (r->r[mid].end <= begin)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo < r->n && r->r[lo].begin <= begin && end <= r->r[lo].end;
}

void dml_server_ranges_clear(struct key_ranges *r)
{
	free(r->r);
	memset(r, 0, sizeof(*r));
}

static uint64_t table_space(const Dml__TableInfo *info)
{
	return info->dense ? info->keys : DML_SHARD_HASH_SPACE;
}

int dml_server_serves(const struct table_entry *te, int dense, uint64_t begin, uint64_t end,
		      const uint64_t *keys, size_t n)
{
	const struct key_ranges *r = &te->served;

	if (dense)
		return begin > end || dml_server_ranges_cover(r, begin, end) ? 0 : DML_ERANGE;
	/* Everything served: no key needs hashing. */
	if (r->n == 1 && r->r[0].begin == 0 && r->r[0].end >= table_space(&te->info))
		return 0;
	for (size_t i = 0; i < n; i++) {
		uint64_t k = te->info.dense ? keys[i] : dml_shard_key_hash(keys[i]);

		if (!dml_server_ranges_cover(r, k, k + 1))
			return DML_ERANGE;
	}
	return 0;
}

/* ---- log lines ------------------------------------------------------------ */

/* A line built piece by piece, naming at most LOG_ITEMS ranges. */
struct line {
	char buf[2048];
	size_t len;
	unsigned items, dropped;
};

static void line_add(struct line *l, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

static void line_add(struct line *l, const char *fmt, ...)
{
	va_list ap;
	int n;

	if (l->len >= sizeof(l->buf) - 1)
		return;
	va_start(ap, fmt);
	n = vsnprintf(l->buf + l->len, sizeof(l->buf) - l->len, fmt, ap);
	va_end(ap);
	if (n > 0)
		l->len += (size_t)n < sizeof(l->buf) - l->len ? (size_t)n
							       : sizeof(l->buf) - l->len - 1;
}

/* "keys 0..499" (dense) or "key hashes 0..2147483647": first and last, as
 * operators count them. */
static void line_range(struct line *l, const char *sep, const Dml__TableInfo *info,
		       uint64_t begin, uint64_t end)
{
	line_add(l, "%s%s %llu..%llu", sep, info->dense ? "keys" : "key hashes",
		 (unsigned long long)begin, (unsigned long long)end - 1);
}

/* Start one item of a list; 0 when the line already names enough. */
static int line_item(struct line *l)
{
	if (l->items++ < LOG_ITEMS)
		return 1;
	l->dropped++;
	return 0;
}

static const char *line_text(struct line *l)
{
	if (l->dropped)
		line_add(l, " and %u more", l->dropped);
	return l->buf;
}

/* ---- specs and maps --------------------------------------------------------- */

static const Dml__ShardServer *map_server(const Dml__ShardMap *map, uint32_t node_id)
{
	for (size_t i = 0; map && i < map->n_servers; i++)
		if (map->servers[i]->node_id == node_id)
			return map->servers[i];
	return NULL;
}

/* The ranges of a table that a map gives one server. */
static void map_ranges(const Dml__ShardMap *map, uint32_t table, uint32_t server,
		       struct key_ranges *out)
{
	for (size_t i = 0; i < map->n_ranges; i++) {
		const Dml__ShardRange *r = map->ranges[i];

		if (r->table == table && r->server == server)
			dml_server_ranges_add(out, r->begin, r->end);
	}
}

/* A dense table is in one piece on each server: the table is reallocated
 * to that range when it moves. */
static int map_check_dense(const Dml__TableSpec *ts, const Dml__ShardMap *map, char *err,
			   size_t errlen)
{
	int rc = 0;

	for (size_t i = 0; rc == 0 && i < map->n_servers; i++) {
		struct key_ranges kr = { 0 };

		map_ranges(map, ts->id, map->servers[i]->node_id, &kr);
		if (kr.n > 1) {
			snprintf(err, errlen, "dense table %u is in %zu pieces on server %u",
				 ts->id, kr.n, map->servers[i]->node_id);
			rc = DML_EINVAL;
		}
		dml_server_ranges_clear(&kr);
	}
	return rc;
}

/*
 * Everything a SHARDMAP says, checked before anything changes: the map
 * covers the spec's tables exactly (shard/mapplan.h), and what this server
 * needs beyond that holds too.
 */
static int map_check(const Dml__JobSpec *spec, const Dml__ShardMap *map, char *err,
		     size_t errlen)
{
	struct dml_table_conf tc;
	int rc;

	if (map->job == 0 || map->version == 0) {
		snprintf(err, errlen, "job %u, version %llu: neither may be 0", map->job,
			 (unsigned long long)map->version);
		return DML_EINVAL;
	}
	if (dml_mapplan_check(map, spec, err, errlen) != 0)
		return DML_EINVAL;
	for (size_t i = 0; i < spec->n_tables; i++) {
		if ((rc = dml_table_conf_from_spec(spec->tables[i], &tc, err, errlen)) != 0)
			return rc;
		if (spec->tables[i]->dense &&
		    (rc = map_check_dense(spec->tables[i], map, err, errlen)) != 0)
			return rc;
	}
	return 0;
}

/* A later map of the same job must describe the same tables. */
static int spec_same_tables(const Dml__JobSpec *a, const Dml__JobSpec *b)
{
	if (a->n_tables != b->n_tables)
		return 0;
	for (size_t i = 0; i < a->n_tables; i++) {
		const Dml__TableSpec *x = a->tables[i], *y = b->tables[i];

		if (x->id != y->id || x->dense != y->dense || x->width != y->width ||
		    x->keys != y->keys || strcmp(x->optimizer, y->optimizer) != 0)
			return 0;
	}
	return 1;
}

static Dml__JobSpec *spec_copy(const Dml__JobSpec *spec)
{
	Dml__JobSpec *c = dml_msg_copy(&spec->base);

	if (!c)
		abort();   /* only memory can fail, fatal as in util.h */
	return c;
}

static Dml__ShardMap *map_copy(const Dml__ShardMap *map)
{
	Dml__ShardMap *c = dml_msg_copy(&map->base);

	if (!c)
		abort();   /* only memory can fail, fatal as in util.h */
	return c;
}

/* ---- answers to the scheduler ---------------------------------------------- */

static void sched_ack(struct dml_server *s, uint64_t request_id)
{
	Dml__Meta m = DML__META__INIT;

	m.type = DML__MSG_TYPE__ACK;
	m.request_id = request_id;
	m.job = s->job.id;
	/* Not registered now: the scheduler sends the map again once we are,
	 * and it is ACKed then. */
	if (dml_sched_link_send(s->sched, &m) != 0)
		dml_debug("job %u: ACK of map v%llu not sent; the scheduler will ask again",
			  s->job.id, (unsigned long long)s->job.version);
}

static void sched_error(struct dml_server *s, uint64_t request_id, int code,
			const char *fmt, ...) __attribute__((format(printf, 4, 5)));

static void sched_error(struct dml_server *s, uint64_t request_id, int code,
			const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	dml_server_sched_verror(s, request_id, code, "shard map", fmt, ap);
	va_end(ap);
}

/* ---- parcels: rows on their way to another server ---------------------------- */

struct parcel {
	struct parcel *next;
	uint32_t table;
	int dense;
	uint64_t begin, end;       /* keys or key hashes this frame completes */
	uint64_t *keys;            /* sparse: nrows keys, in increasing hash order */
	float *rows;               /* nrows rows of row_floats floats */
	size_t nrows, row_floats;
	uint64_t request_id;       /* its frame on the live connection; 0: not sent */
};

/* One server that rows go to, and the connection that carries them. */
struct mig_peer {
	struct mig_peer *next;
	struct dml_server *srv;
	uint32_t node_id;
	char address[300];
	char host[256];
	uint16_t port;
	struct dml_conn *conn;
	struct parcel *head;       /* in the order they are sent */
	unsigned in_flight;
	uint64_t next_id;
	struct event *timer;       /* next connection attempt */
	uint32_t backoff_ms;
	int logged_err;            /* the failure last logged, not logged again */
};

static void parcel_free(struct parcel *p)
{
	if (!p)
		return;
	free(p->keys);
	free(p->rows);
	free(p);
}

/* A parcel holding copies of n rows (and, sparse, their keys). */
static struct parcel *parcel_new(uint32_t table, int dense, uint64_t begin, uint64_t end,
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
static size_t parcel_rows(const struct dml_server *s, size_t rf, int dense)
{
	size_t row_bytes = rf * sizeof(float) + (dense ? 0 : sizeof(uint64_t));
	size_t n = PARCEL_BYTES / row_bytes;

	if (!dense && n > s->conf->max_keys)
		n = (size_t)s->conf->max_keys;
	return n ? n : 1;
}

static void peer_connect(struct mig_peer *p);

static void peer_timer_cb(evutil_socket_t fd, short what, void *arg)
{
	peer_connect(arg);
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
		parcel_free(q);
	}
	event_free(p->timer);
	free(p);
}

static void job_progress(struct dml_server *s);

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
		parcel_free(q);
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
	job_progress(s);
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

static void peer_connect(struct mig_peer *p)
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
static struct mig_peer *peer_get(struct dml_server *s, uint32_t node_id)
{
	const Dml__ShardServer *sv = map_server(s->job.map, node_id);
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

static void peer_enqueue(struct mig_peer *p, struct parcel *q)
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
static void peers_take_back(struct dml_server *s, struct parcel **back)
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

/* ---- a remap, table by table ----------------------------------------------- */

/* What a remap does, for the log line and the parcels it makes. */
struct remap {
	struct dml_server *s;
	const Dml__ShardMap *old, *map;
	uint32_t me;
	struct line give, take;
	int failed;                /* a table operation failed (logged) */
};

static void remap_fail(struct remap *rm, const struct table_entry *te, const char *what,
		       int rc)
{
	dml_err("job %u: map v%llu: table %u: %s: %s", rm->s->job.id,
		(unsigned long long)rm->map->version, te->info.id, what, dml_strerror(rc));
	rm->failed = rc;
}

static void log_give(struct remap *rm, const Dml__TableInfo *info, uint64_t begin,
		     uint64_t end, uint32_t owner)
{
	if (!line_item(&rm->give))
		return;
	line_range(&rm->give, rm->give.items > 1 ? ", " : "giving ", info, begin, end);
	line_add(&rm->give, " of table %u to server %u", info->id, owner);
}

/* Queue dense rows [begin, end) of te for owner, in parcels. */
static void give_dense(struct remap *rm, struct table_entry *te, uint64_t begin,
		       uint64_t end, uint32_t owner)
{
	size_t rf = dml_table_row_floats(te->table);
	size_t per = parcel_rows(rm->s, rf, 1);
	struct mig_peer *p = peer_get(rm->s, owner);

	for (uint64_t b = begin; b < end; b += per) {
		uint64_t e = end - b > per ? b + per : end;
		struct parcel *q = parcel_new(te->info.id, 1, b, e, NULL, NULL, 0, rf);
		int rc;

		q->nrows = (size_t)(e - b);
		q->rows = dml_xmalloc(q->nrows * rf * sizeof(float));
		rc = dml_table_export_range(te->table, b, e, q->rows);
		if (rc) {
			remap_fail(rm, te, "export", rc);
			parcel_free(q);
			return;
		}
		peer_enqueue(p, q);
	}
}

/* Queue sorted sparse rows (hashes in [begin, end)) for owner, in parcels
 * that each complete a hash range; rows of one hash stay together. */
static void give_sorted(struct remap *rm, uint32_t table, uint64_t begin, uint64_t end,
			const uint64_t *keys, const float *rows, size_t n, size_t rf,
			uint32_t owner)
{
	struct mig_peer *p = peer_get(rm->s, owner);
	size_t per = parcel_rows(rm->s, rf, 0), i = 0;
	uint64_t b = begin;

	do {
		size_t j = n - i > per ? i + per : n;
		uint64_t e;

		while (j < n && j > i &&
		       dml_shard_key_hash(keys[j]) == dml_shard_key_hash(keys[j - 1]))
			j++;
		e = j < n ? dml_shard_key_hash(keys[j]) : end;
		peer_enqueue(p, parcel_new(table, 0, b, e, keys + i, rows + i * rf, j - i, rf));
		b = e;
		i = j;
	} while (i < n);
}

static void give_sparse(struct remap *rm, struct table_entry *te, uint64_t begin,
			uint64_t end, uint32_t owner)
{
	size_t rf = dml_table_row_floats(te->table), n = 0;
	uint64_t *keys;
	float *rows;
	int rc;

	rc = dml_table_export_hashed(te->table, dml_shard_key_hash, begin, end, &keys, &rows,
				     &n);
	if (rc == 0)
		rc = dml_table_remove_hashed(te->table, dml_shard_key_hash, begin, end, NULL);
	if (rc)
		remap_fail(rm, te, "export", rc);
	else
		give_sorted(rm, te->info.id, begin, end, keys, rows, n, rf, owner);
	free(keys);
	free(rows);
}

/* Give away every piece of what te serves that the new map gives another
 * server. */
static void remap_give(struct remap *rm, struct table_entry *te)
{
	const Dml__ShardMap *map = rm->map;

	for (size_t i = 0; i < map->n_ranges; i++) {
		const Dml__ShardRange *r = map->ranges[i];
		struct key_ranges piece = { 0 }, window = { 0 };

		if (r->table != te->info.id || r->server == rm->me)
			continue;
		dml_server_ranges_add(&window, r->begin, r->end);
		for (size_t j = 0; j < te->served.n; j++)
			dml_server_ranges_add(&piece, te->served.r[j].begin, te->served.r[j].end);
		ranges_intersect(&piece, &window);
		for (size_t j = 0; j < piece.n; j++) {
			uint64_t b = piece.r[j].begin, e = piece.r[j].end;

			if (te->info.dense)
				give_dense(rm, te, b, e, r->server);
			else
				give_sparse(rm, te, b, e, r->server);
			ranges_sub(&te->served, b, e);
			log_give(rm, &te->info, b, e, r->server);
		}
		dml_server_ranges_clear(&piece);
		dml_server_ranges_clear(&window);
	}
}

/* Index of the first sorted sparse row of q whose hash is >= h. */
static size_t parcel_find(const struct parcel *q, uint64_t h)
{
	size_t lo = 0, hi = q->nrows;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (dml_shard_key_hash(q->keys[mid]) < h)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

/* A parcel that was not delivered when a newer map came: each piece goes
 * to its owner under the new map, ours back into the table. */
static void remap_route_back(struct remap *rm, struct table_entry *te, struct parcel *q)
{
	const Dml__ShardMap *map = rm->map;

	for (size_t i = 0; i < map->n_ranges; i++) {
		const Dml__ShardRange *r = map->ranges[i];
		uint64_t b = r->begin > q->begin ? r->begin : q->begin;
		uint64_t e = r->end < q->end ? r->end : q->end;
		size_t first, n;
		int rc;

		if (r->table != q->table || b >= e)
			continue;
		if (q->dense) {
			first = (size_t)(b - q->begin);
			n = (size_t)(e - b);
		} else {
			first = parcel_find(q, b);
			n = parcel_find(q, e) - first;
		}
		if (r->server != rm->me) {
			peer_enqueue(peer_get(rm->s, r->server),
				     parcel_new(q->table, q->dense, b, e,
						q->dense ? NULL : q->keys + first,
						q->rows + first * q->row_floats, n,
						q->row_floats));
			log_give(rm, &te->info, b, e, r->server);
			continue;
		}
		rc = q->dense ? dml_table_import_range(te->table, b, e,
						       q->rows + first * q->row_floats)
			      : dml_table_import_keys(te->table, q->keys + first, n,
						      q->rows + first * q->row_floats);
		if (rc) {
			remap_fail(rm, te, "taking rows back", rc);
			continue;
		}
		dml_server_ranges_add(&te->served, b, e);
	}
}

/* Who held [begin, end) under the old map: the owner of its first key. */
static uint32_t old_owner(const struct remap *rm, uint32_t table, uint64_t begin)
{
	for (size_t i = 0; rm->old && i < rm->old->n_ranges; i++) {
		const Dml__ShardRange *r = rm->old->ranges[i];

		if (r->table == table && r->begin <= begin && begin < r->end)
			return r->server;
	}
	return 0;
}

/*
 * What the new map gives this server and it neither serves nor awaits:
 * pending, split where the old owner changes, unless nobody held it (a
 * range no old server had starts fresh so nothing waits forever).
 */
static void remap_gain(struct remap *rm, struct table_entry *te,
		       const struct key_ranges *mine)
{
	struct key_ranges gain = { 0 };

	for (size_t i = 0; i < mine->n; i++)
		dml_server_ranges_add(&gain, mine->r[i].begin, mine->r[i].end);
	for (size_t i = 0; i < te->served.n; i++)
		ranges_sub(&gain, te->served.r[i].begin, te->served.r[i].end);
	for (size_t i = 0; i < te->pending.n; i++)
		ranges_sub(&gain, te->pending.r[i].begin, te->pending.r[i].end);
	for (size_t i = 0; i < gain.n; i++) {
		uint64_t b = gain.r[i].begin;

		while (b < gain.r[i].end) {
			uint32_t from = old_owner(rm, te->info.id, b);
			uint64_t e = gain.r[i].end;

			/* The piece ends where the old owner's range does. */
			for (size_t j = 0; rm->old && j < rm->old->n_ranges; j++) {
				const Dml__ShardRange *r = rm->old->ranges[j];

				if (r->table == te->info.id && r->begin > b && r->begin < e)
					e = r->begin;
			}
			if (from && from != rm->me && map_server(rm->old, from)) {
				dml_server_ranges_add(&te->pending, b, e);
				if (line_item(&rm->take)) {
					line_range(&rm->take, rm->take.items > 1 ? ", "
						   : "receiving ", &te->info, b, e);
					line_add(&rm->take, " of table %u from server %u",
						 te->info.id, from);
				}
			} else {
				dml_server_ranges_add(&te->served, b, e);
				if (line_item(&rm->take)) {
					line_range(&rm->take, rm->take.items > 1 ? ", "
						   : "receiving ", &te->info, b, e);
					line_add(&rm->take, " of table %u fresh (no server held "
						 "them)", te->info.id);
				}
			}
			b = e;
		}
	}
	dml_server_ranges_clear(&gain);
}

static void remap_table(struct remap *rm, struct table_entry *te, struct parcel **back)
{
	struct key_ranges mine = { 0 };
	struct parcel **pp = back;
	int rc;

	map_ranges(rm->map, te->info.id, rm->me, &mine);
	remap_give(rm, te);
	ranges_intersect(&te->served, &mine);
	ranges_intersect(&te->pending, &mine);
	if (te->info.dense) {
		/* One contiguous range per server (the map was checked). */
		uint64_t b = mine.n ? mine.r[0].begin : 0, e = mine.n ? mine.r[0].end : 0;

		if ((rc = dml_table_set_range(te->table, b, e)) != 0)
			remap_fail(rm, te, "resize", rc);
	}
	while (*pp) {
		struct parcel *q = *pp;

		if (q->table != te->info.id) {
			pp = &q->next;
			continue;
		}
		*pp = q->next;
		remap_route_back(rm, te, q);
		parcel_free(q);
	}
	remap_gain(rm, te, &mine);
	dml_server_ranges_clear(&mine);
}

static int gains_pending(const struct dml_server *s)
{
	for (size_t i = 0; i < s->ntables; i++)
		if (s->tables[i].pending.n)
			return 1;
	return 0;
}

/* After every change: ACK the map once nothing is pending, and log the end
 * of the remap once every row given away has been delivered too. */
static void job_progress(struct dml_server *s)
{
	if (!s->job.remapping || gains_pending(s))
		return;
	if (s->job.ack_due) {
		s->job.ack_due = 0;
		sched_ack(s, s->job.ack_id);
	}
	if (s->job.peers)
		return;
	s->job.remapping = 0;
	dml_info("job %u: map v%llu complete in %llu ms (moved %llu rows)", s->job.id,
		 (unsigned long long)s->job.version,
		 (unsigned long long)((dml_now_ns() - s->job.started_ns) / 1000000u),
		 (unsigned long long)(s->job.rows_in + s->job.rows_out));
	dml_server_store_remapped(s);
}

/* Hold copies of spec and map (the caller disposed of the old map). */
static void job_set_map(struct dml_server *s, const Dml__JobSpec *spec,
			const Dml__ShardMap *map)
{
	if (s->job.spec)
		dml__job_spec__free_unpacked(s->job.spec, NULL);
	s->job.spec = spec_copy(spec);
	s->job.map = map_copy(map);
	s->job.id = map->job;
	s->job.version = map->version;
	s->shard_index = 0;
	s->shard_count = (uint32_t)map->n_servers;
	for (size_t i = 0; i < map->n_servers; i++)
		if (map->servers[i]->node_id == s->conf->node_id)
			s->shard_index = (uint32_t)i;
	dml_server_welcome_rebuild(s);
}

static void remap(struct dml_server *s, const Dml__Meta *m)
{
	struct remap rm = { 0 };
	Dml__ShardMap *old = s->job.map;
	struct parcel *back = NULL;

	rm.s = s;
	rm.me = s->conf->node_id;
	rm.old = old;
	/* Rows about to leave carry every push acknowledged for them. */
	dml_server_step_reset(s);
	/* Undelivered rows of an older remap are ours again until re-planned. */
	peers_take_back(s, &back);
	s->job.map = NULL;
	job_set_map(s, m->job_spec, m->shard_map);
	rm.map = s->job.map;
	s->job.started_ns = dml_now_ns();
	s->job.rows_in = s->job.rows_out = 0;
	for (size_t i = 0; i < s->ntables; i++)
		remap_table(&rm, &s->tables[i], &back);
	/* Parcels of tables the job does not have cannot exist (same tables). */
	while (back) {
		struct parcel *q = back;

		back = q->next;
		parcel_free(q);
	}
	if (old)
		dml__shard_map__free_unpacked(old, NULL);
	dml_server_held_recheck(s);
	dml_info("job %u: map v%llu: %s%s%s", s->job.id, (unsigned long long)s->job.version,
		 rm.give.items ? line_text(&rm.give) : "giving nothing",
		 "; ", rm.take.items ? line_text(&rm.take) : "receiving nothing");
	s->job.remapping = 1;
	s->job.last_rows_ns = s->job.started_ns;
	s->job.ack_id = m->request_id;
	s->job.ack_due = 1;
	if (rm.failed) {
		/* Logged where it failed; the scheduler hears of it too. */
		s->job.ack_due = 0;
		sched_error(s, m->request_id, rm.failed, "job %u: map v%llu: %s", s->job.id,
			    (unsigned long long)s->job.version, dml_strerror(rm.failed));
	}
	for (struct mig_peer *p = s->job.peers; p; p = p->next)
		peer_connect(p);
	job_progress(s);
}

/* ---- a new job ----------------------------------------------------------------- */

/* Free tables built by tables_build (not installed). */
static void tables_discard(struct table_entry *tables, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		dml_table_free(tables[i].table);
		dml_server_ranges_clear(&tables[i].served);
	}
	free(tables);
}

/* The job's tables, holding what the map gives this server. */
static int tables_build(struct dml_server *s, const Dml__JobSpec *spec,
			const Dml__ShardMap *map, struct table_entry **out, struct line *l)
{
	struct table_entry *tables = dml_xcalloc(spec->n_tables, sizeof(*tables));
	int rc = 0;

	for (size_t i = 0; i < spec->n_tables && rc == 0; i++) {
		const Dml__TableSpec *ts = spec->tables[i];
		struct table_entry *te = &tables[i];
		struct dml_table_conf tc;
		char err[256];
		uint64_t share = 0;

		(void)dml_table_conf_from_spec(ts, &tc, err, sizeof(err)); /* checked with the map */
		map_ranges(map, ts->id, s->conf->node_id, &te->served);
		for (size_t j = 0; j < te->served.n; j++)
			share += te->served.r[j].end - te->served.r[j].begin;
		if (ts->dense) {
			/* A table needs a range to be made; one with nothing here
			 * shrinks to no rows at once. */
			tc.key_begin = te->served.n ? te->served.r[0].begin : 0;
			tc.key_end = te->served.n ? te->served.r[0].end : 1;
		} else {
			tc.capacity_hint = (uint64_t)((double)ts->capacity * (double)share /
						      (double)DML_SHARD_HASH_SPACE);
		}
		rc = dml_table_new(&tc, &te->table);
		if (rc == 0 && ts->dense && !te->served.n)
			rc = dml_table_set_range(te->table, 0, 0);
		if (rc) {
			dml_err("job %u: table %u: %s", map->job, ts->id, dml_strerror(rc));
			break;
		}
		dml__table_info__init(&te->info);
		te->info.id = ts->id;
		te->info.dense = ts->dense;
		te->info.width = ts->width;
		te->info.keys = ts->keys;
		if (!te->served.n && line_item(l))
			line_add(l, "%stable %u nothing", l->items > 1 ? ", " : "", ts->id);
		for (size_t j = 0; j < te->served.n; j++) {
			if (!line_item(l))
				continue;
			line_add(l, "%stable %u", l->items > 1 ? ", " : "", ts->id);
			line_range(l, " ", &te->info, te->served.r[j].begin, te->served.r[j].end);
		}
	}
	if (rc) {
		tables_discard(tables, spec->n_tables);
		return rc;
	}
	*out = tables;
	return 0;
}

/*
 * Resuming a move: the tables take the ranges of the older map base too, so
 * that the log replays into them (a dense table spans both of its ranges).
 */
static int tables_widen(struct dml_server *s, const Dml__JobSpec *spec,
			const Dml__ShardMap *base, struct table_entry *tables)
{
	int rc = 0;

	for (size_t i = 0; i < spec->n_tables && rc == 0; i++) {
		struct table_entry *te = &tables[i];

		map_ranges(base, te->info.id, s->conf->node_id, &te->served);
		if (te->info.dense && te->served.n)
			rc = dml_table_set_range(te->table, te->served.r[0].begin,
						 te->served.r[te->served.n - 1].end);
	}
	return rc;
}

/*
 * The log replayed into widened tables: each holds the ranges of base, and
 * those of the newer map whose rows had moved in. Then the move goes on as
 * a remap from base: what base gave this server and the newer map does not
 * leaves again (an owner that has it already acknowledges it unapplied),
 * and what has not arrived is pending.
 */
static void resume_move(struct dml_server *s, const Dml__Meta *m, const Dml__ShardMap *base)
{
	for (size_t i = 0; i < s->ntables; i++) {
		struct table_entry *te = &s->tables[i];
		struct key_ranges mine = { 0 };

		dml_server_ranges_clear(&te->served);
		map_ranges(base, te->info.id, s->conf->node_id, &te->served);
		map_ranges(m->shard_map, te->info.id, s->conf->node_id, &mine);
		for (size_t j = 0; j < te->moved_in.n; j++)
			if (dml_server_ranges_cover(&mine, te->moved_in.r[j].begin,
						    te->moved_in.r[j].end))
				dml_server_ranges_add(&te->served, te->moved_in.r[j].begin,
						      te->moved_in.r[j].end);
		dml_server_ranges_clear(&te->moved_in);
		dml_server_ranges_clear(&mine);
	}
	dml_info("job %u: resuming the move from map v%llu to v%llu: the store holds this "
		 "server's rows of v%llu and those that had moved in", base->job,
		 (unsigned long long)base->version, (unsigned long long)m->shard_map->version,
		 (unsigned long long)base->version);
	dml__shard_map__free_unpacked(s->job.map, NULL);
	s->job.map = NULL;
	job_set_map(s, m->job_spec, base);
	remap(s, m);
}

/* A new job's map; base: the older map to resume a move from, or NULL. */
static void install_from(struct dml_server *s, const Dml__Meta *m, const Dml__ShardMap *base)
{
	const Dml__JobSpec *spec = m->job_spec;
	const Dml__ShardMap *map = m->shard_map;
	struct table_entry *tables;
	struct line l = { 0 };
	enum store_recovered recovered = STORE_RECOVERED_NONE;
	char why[64];
	int rc;

	rc = tables_build(s, spec, map, &tables, &l);
	if (rc == 0 && base && (rc = tables_widen(s, spec, base, tables)) != 0)
		tables_discard(tables, spec->n_tables);
	if (rc) {
		sched_error(s, m->request_id, rc, "job %u: cannot make its tables: %s", map->job,
			    dml_strerror(rc));
		return;
	}
	if (s->job.id)
		dml_info("job %u: replaced by job %u", s->job.id, map->job);
	snprintf(why, sizeof(why), "job %u was replaced on this server", s->job.id);
	dml_server_held_fail_all(s, DML_ESTATE, why);
	peers_take_back(s, NULL);
	dml_server_tables_free(s);
	s->tables = tables;
	s->ntables = spec->n_tables;
	if (s->job.map)
		dml__shard_map__free_unpacked(s->job.map, NULL);
	s->job.map = NULL;
	job_set_map(s, spec, map);
	s->job.remapping = 0;
	s->job.ack_due = 0;
	s->dead_after_ms = spec->dead_after_ms ? spec->dead_after_ms : s->conf->dead_after_ms;
	s->stale_scaling = spec->stale_scaling == DML_STALE_INVERSE ? DML_STALE_INVERSE :
			   DML_STALE_OFF;
	s->bsp_step = spec->bsp_step == DML_BSP_STEP_PUSH ? DML_BSP_STEP_PUSH :
		      DML_BSP_STEP_CLOCK;
	s->allow_nonfinite = spec->allow_nonfinite;
	dml_server_cut_reset(s);
	/* The log first: the workers that join the clock set below get their
	 * push sequences from it. */
	rc = dml_server_store_job(s, map, base != NULL, &recovered);
	if (rc) {
		sched_error(s, m->request_id, rc, "job %u: its gradient log: %s", map->job,
			    dml_strerror(rc));
		return;
	}
	dml_server_clock_reset(s, spec->staleness, spec->workers);
	if (recovered == STORE_RECOVERED_RESUME) {
		resume_move(s, m, base);
		return;
	}
	for (size_t i = 0; recovered != STORE_RECOVERED_MOVED_IN && i < s->ntables; i++)
		dml_server_ranges_clear(&s->tables[i].moved_in);
	if (map->version > 1 && recovered != STORE_RECOVERED_ALL) {
		/* Joining a running job: other servers hold these rows and send
		 * them (they planned the move from the previous map), but for
		 * those that had moved in before a restart: the log held them. */
		for (size_t i = 0; i < s->ntables; i++) {
			struct table_entry *te = &s->tables[i];

			te->pending = te->served;
			memset(&te->served, 0, sizeof(te->served));
			for (size_t j = 0; j < te->moved_in.n; j++) {
				const struct key_range *k = &te->moved_in.r[j];

				if (!dml_server_ranges_cover(&te->pending, k->begin, k->end))
					continue;
				ranges_sub(&te->pending, k->begin, k->end);
				dml_server_ranges_add(&te->served, k->begin, k->end);
			}
			dml_server_ranges_clear(&te->moved_in);
		}
		dml_info("job %u: joining at map v%llu: waiting for %s%s (staleness %lld, %u "
			 "workers expected)", map->job, (unsigned long long)map->version,
			 line_text(&l), recovered == STORE_RECOVERED_MOVED_IN ?
			 ", but for the rows that had moved in before the restart (the log "
			 "held them)" : "", (long long)spec->staleness, spec->workers);
		s->job.remapping = 1;
		s->job.started_ns = s->job.last_rows_ns = dml_now_ns();
		s->job.rows_in = s->job.rows_out = 0;
		s->job.ack_id = m->request_id;
		s->job.ack_due = 1;
		job_progress(s);
		return;
	}
	dml_info("job %u: installed map v%llu: %s (staleness %lld, %u workers expected)",
		 map->job, (unsigned long long)map->version, line_text(&l),
		 (long long)spec->staleness, spec->workers);
	sched_ack(s, m->request_id);
}

static void install_new(struct dml_server *s, const Dml__Meta *m)
{
	Dml__ShardMap *base = dml_server_store_resume_map(s, m->shard_map);

	install_from(s, m, base);
	if (base)
		dml__shard_map__free_unpacked(base, NULL);
}

/* ---- frames from the scheduler and from peers --------------------------------- */

void dml_server_job_on_sched(struct dml_sched_link *l, const Dml__Meta *m, void *arg)
{
	struct dml_server *s = arg;
	const Dml__ShardMap *map = m->shard_map;
	char err[256] = "";
	int rc;

	if (m->type == DML__MSG_TYPE__CHECKPOINT) {
		dml_server_cut_on_sched(s, m);
		return;
	}
	if (m->type == DML__MSG_TYPE__EVICT) {
		if (m->job == s->job.id && m->job != 0)
			dml_server_evict(s, m->worker);
		else
			dml_debug("scheduler: evicting worker %u of job %u, not held here (job "
				  "%u)", m->worker, m->job, s->job.id);
		return;
	}
	if (m->type != DML__MSG_TYPE__SHARDMAP) {
		dml_debug("scheduler: ignoring a %s frame", dml_msg_type_name((int)m->type));
		return;
	}
	if (!s->job_mode) {
		sched_error(s, m->request_id, DML_ECONF, "this server serves the tables of its "
			    "config file; remove its [table] sections to take jobs from the "
			    "scheduler");
		return;
	}
	if (!map || !m->job_spec) {
		sched_error(s, m->request_id, DML_EINVAL, "SHARDMAP without shard_map and "
			    "job_spec");
		return;
	}
	if ((m->job && m->job != map->job) ||
	    (rc = map_check(m->job_spec, map, err, sizeof(err))) != 0) {
		sched_error(s, m->request_id, DML_EINVAL, "job %u: shard map v%llu: %s", map->job,
			    (unsigned long long)map->version,
			    err[0] ? err : "the frame's job and the map's differ");
		return;
	}
	if (map->job != s->job.id) {
		install_new(s, m);
	} else if (!spec_same_tables(s->job.spec, m->job_spec)) {
		sched_error(s, m->request_id, DML_EINVAL, "job %u: map v%llu describes other "
			    "tables than v%llu", map->job, (unsigned long long)map->version,
			    (unsigned long long)s->job.version);
	} else if (map->version > s->job.version) {
		remap(s, m);
	} else if (map->version == s->job.version && s->job.remapping && gains_pending(s)) {
		/* Sent again (the scheduler reconnected): ACK when complete. */
		s->job.ack_id = m->request_id;
		s->job.ack_due = 1;
	} else {
		dml_debug("job %u: map v%llu already installed (v%llu here)", map->job,
			  (unsigned long long)map->version, (unsigned long long)s->job.version);
		sched_ack(s, m->request_id);
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
	if (b >= e || e > table_space(&te->info)) {
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
	ranges_sub(&te->pending, b, e);
	dml_server_ranges_add(&te->served, b, e);
	s->job.rows_in += m->dense ? e - b : n;
	s->job.last_rows_ns = dml_now_ns();
	dml_server_store_moved(ss, m, payload);
	job_progress(s);
}

/* ---- life cycle ------------------------------------------------------------------ */

void dml_server_job_tick(struct dml_server *s)
{
	struct line l = { 0 };
	uint64_t now = dml_now_ns();

	if (!s->job.remapping || !gains_pending(s) ||
	    now - s->job.last_rows_ns < (uint64_t)STALL_WARN_S * 1000000000u)
		return;
	s->job.last_rows_ns = now;
	for (size_t i = 0; i < s->ntables; i++) {
		const struct table_entry *te = &s->tables[i];

		for (size_t j = 0; j < te->pending.n; j++) {
			if (!line_item(&l))
				continue;
			line_range(&l, l.items > 1 ? ", " : "", &te->info, te->pending.r[j].begin,
				   te->pending.r[j].end);
			line_add(&l, " of table %u", te->info.id);
		}
	}
	dml_warn("job %u: map v%llu: no rows arrived for %d s; still waiting for %s (rows "
		 "live only on the server that held them: if it restarted, they are lost)",
		 s->job.id, (unsigned long long)s->job.version, STALL_WARN_S, line_text(&l));
}

void dml_server_job_stop(struct dml_server *s)
{
	for (struct mig_peer *p = s->job.peers; p; p = p->next) {
		size_t rows = 0;

		for (struct parcel *q = p->head; q; q = q->next)
			rows += q->nrows;
		if (p->head)
			dml_warn("job %u: stopping with %zu rows for server %u not delivered",
				 s->job.id, rows, p->node_id);
		evtimer_del(p->timer);
		if (p->conn) {
			dml_conn_set_arg(p->conn, NULL);
			dml_conn_abort(p->conn, DML_ECLOSED);
			p->conn = NULL;
		}
	}
}

void dml_server_job_free(struct dml_server *s)
{
	peers_take_back(s, NULL);
	if (s->job.spec)
		dml__job_spec__free_unpacked(s->job.spec, NULL);
	if (s->job.map)
		dml__shard_map__free_unpacked(s->job.map, NULL);
	s->job.spec = NULL;
	s->job.map = NULL;
}
