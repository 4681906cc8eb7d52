/*
 * libdml: the worker-side client (see dml.h for the contract).
 *
 * A user request is routed by the shard map into parts, one per server. Each
 * part has its own wire request id and, for pushes, a per-server sequence
 * number. A part stays on its server link's in-flight list, in send order,
 * until its reply arrives; when a connection breaks, the link reconnects with
 * backoff and resends the whole list in order (the server acknowledges, but
 * does not re-apply, pushes it has already seen). The user's handle completes
 * when all of its parts have.
 *
 * The map comes either from the servers themselves (a fixed `servers` list,
 * each reporting its ranges at handshake) or from dml-sched (client_map.c),
 * versioned. With a scheduler, a server that answers a part with DML_ERANGE
 * applied none of it: the part is parked, the map fetched again, and the
 * part routed anew (split if its keys now live on several servers) once a
 * newer map is known, or resent after a backoff while the new owner is still
 * receiving its range. Links to servers that left the map close when idle.
 *
 * Must never: modify a caller's push buffer, write a pull's output after the
 * request failed or was waited, spin while waiting (the event loop sleeps in
 * epoll until a reply, a timer or a reconnect is due), keep a part that no
 * handle can reach, re-route a part that was sent and not answered (only an
 * ERANGE answer means "not applied"), or reuse a push sequence number.
 */
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>

#include "auth.h"
#include "client_internal.h"
#include "conn.h"
#include "dml.h"
#include "log.h"
#include "shardmap.h"
#include "util.h"

#define TICK_MS 50
#define BACKOFF_MIN_MS 20
#define BACKOFF_MAX_MS 2000
#define CLOSE_WAIT_MS 10000
/* Without request_timeout_ms, a part the servers keep refusing (DML_ERANGE)
 * while the map does not change fails after this long. */
#define BOUNCE_LIMIT_MS 30000
/* A request sent this often without an answer, each time losing its
 * connection, is what breaks the connection: fail it instead of looping. */
#define MAX_SENDS 5
/* How long dml_close waits for its BYEs after dml_interrupt. */
#define CLOSE_INTERRUPTED_MS 1000

enum part_kind { PART_PUSH, PART_PULL, PART_BYE };

struct request;
struct part;

struct part_list {
	struct part *head, *tail;
};

struct part {
	struct part *prev, *next;      /* its list: a link's in-flight list, or parked */
	struct part *hnext;            /* wire-id hash chain (only while on a link) */
	struct request *req;
	struct link *link;             /* NULL while parked */
	enum part_kind kind;
	uint64_t wire_id;
	uint64_t seq;
	float weight;                  /* push: Meta.weight, 0 for 1 */
	unsigned sends;                /* times written to a connection */
	uint32_t table, width;
	int dense;
	uint64_t begin, end;
	uint32_t nkeys;
	const uint64_t *keys;          /* borrowed from the caller, or keys_own */
	const float *vals;             /* push: borrowed, or vals_own */
	float *out;                    /* pull: destination of row 0 */
	uint32_t *pos;                 /* pull: caller row of each reply row */
	uint64_t *keys_own;
	float *vals_own;
	uint64_t map_version;          /* of the map it was routed by */
	uint64_t bounced_ns;           /* first DML_ERANGE answer; 0 if none */
	int waited;                    /* parked through one fetch already */
};

struct request {
	struct request *hnext;
	dml_handle_t id;
	unsigned parts_left;
	int result;
	int pull;
	uint64_t min_clock;
	uint64_t held_ns;              /* the longest a server held a part */
	uint64_t deadline_ns;
};

struct link {
	struct dml *d;
	uint32_t index;                /* standalone: position in the servers list */
	uint32_t node_id;              /* with a scheduler: the server's node id */
	char host[256];
	uint16_t port;
	struct dml_conn *conn;
	int ready;
	int failed;                    /* gave up: requests to it fail */
	int fatal;                     /* handshake refused: do not retry */
	int retired;                   /* not in the current map: close once idle */
	int closing;                   /* retired and idle: close under way */
	uint64_t next_seq;
	uint64_t lost_since_ns;
	uint64_t retry_at_ns;
	uint32_t backoff_ms;
	struct part_list q;
	Dml__TableInfo **tables;       /* standalone: copied from WELCOME */
	size_t ntables;
};

struct dml {
	struct dml_client_conf conf;
	struct event_base *base;
	struct event *tick;
	struct dml_conn_conf cc;
	uint8_t *secret;
	size_t secret_len;
	struct link **links;           /* every open link, retired ones too */
	uint32_t nlinks;
	struct dml_shard_map map;      /* version 0 in standalone mode */
	struct link **route;           /* map server index -> link */
	uint32_t nroute;

	struct dml_client_sched *sched; /* NULL in standalone mode */
	struct part_list parked;       /* refused with DML_ERANGE, waiting for a map */
	int connecting;                /* inside dml_connect */
	int map_rc;                    /* the last fetch's error, for dml_connect */
	char map_why[512];

	uint64_t clock;
	float push_weight;             /* of pushes from now on; 0 for 1 */
	uint64_t last_min_clock;
	uint64_t held_ns;              /* pulls waited for, held by their servers */
	uint64_t bytes_closed;         /* moved over connections closed since */
	uint64_t next_handle, next_wire;
	struct request **reqs;         /* handle hash */
	struct part **parts;           /* wire-id hash */
	size_t nbuckets;               /* power of two, shared by both */
	size_t nreqs;
	int sticky_error;              /* first error of a handle-less request */
	atomic_int interrupted;        /* dml_interrupt: waits return DML_EINTR */
	char detail[512];
};

/* ---- bookkeeping ------------------------------------------------------- */

static void grow_buckets(struct dml *d)
{
	size_t n = d->nbuckets * 2;
	struct request **reqs = dml_xcalloc(n, sizeof(*reqs));
	struct part **parts = dml_xcalloc(n, sizeof(*parts));

	for (size_t i = 0; i < d->nbuckets; i++) {
		while (d->reqs[i]) {
			struct request *r = d->reqs[i];

			d->reqs[i] = r->hnext;
			r->hnext = reqs[r->id & (n - 1)];
			reqs[r->id & (n - 1)] = r;
		}
		while (d->parts[i]) {
			struct part *p = d->parts[i];

			d->parts[i] = p->hnext;
			p->hnext = parts[p->wire_id & (n - 1)];
			parts[p->wire_id & (n - 1)] = p;
		}
	}
	free(d->reqs);
	free(d->parts);
	d->reqs = reqs;
	d->parts = parts;
	d->nbuckets = n;
}

static struct request *find_request(struct dml *d, dml_handle_t id)
{
	struct request *r = d->reqs[id & (d->nbuckets - 1)];

	while (r && r->id != id)
		r = r->hnext;
	return r;
}

static struct request *request_new(struct dml *d, int pull)
{
	struct request *r = dml_xcalloc(1, sizeof(*r));
	size_t b;

	if (d->nreqs >= d->nbuckets)
		grow_buckets(d);
	r->id = ++d->next_handle;
	r->pull = pull;
	r->min_clock = UINT64_MAX;
	if (d->conf.request_timeout_ms)
		r->deadline_ns = dml_now_ns() + d->conf.request_timeout_ms * 1000000ull;
	b = r->id & (d->nbuckets - 1);
	r->hnext = d->reqs[b];
	d->reqs[b] = r;
	d->nreqs++;
	return r;
}

static void request_unlink(struct dml *d, struct request *r)
{
	struct request **pp = &d->reqs[r->id & (d->nbuckets - 1)];

	while (*pp != r)
		pp = &(*pp)->hnext;
	*pp = r->hnext;
	d->nreqs--;
}

static void request_free(struct dml *d, struct request *r)
{
	request_unlink(d, r);
	free(r);
}

/* A request nobody holds a handle to is freed with its last part. */
static void request_settle(struct dml *d, struct request *r, int rc)
{
	if (rc && r->result == 0)
		r->result = rc;
	if (r->parts_left == 0 && r->id == 0) {
		/* Keep the first error for dml_wait_all. */
		if (r->result && !d->sticky_error)
			d->sticky_error = r->result;
		free(r);
	}
}

static struct part *find_part(struct dml *d, uint64_t wire_id)
{
	struct part *p = d->parts[wire_id & (d->nbuckets - 1)];

	while (p && p->wire_id != wire_id)
		p = p->hnext;
	return p;
}

static void list_append(struct part_list *l, struct part *p)
{
	p->next = NULL;
	p->prev = l->tail;
	if (l->tail)
		l->tail->next = p;
	else
		l->head = p;
	l->tail = p;
}

static void list_remove(struct part_list *l, struct part *p)
{
	if (p->prev)
		p->prev->next = p->next;
	else
		l->head = p->next;
	if (p->next)
		p->next->prev = p->prev;
	else
		l->tail = p->prev;
	p->prev = p->next = NULL;
}

static void hash_remove(struct dml *d, struct part *p)
{
	struct part **pp = &d->parts[p->wire_id & (d->nbuckets - 1)];

	while (*pp != p)
		pp = &(*pp)->hnext;
	*pp = p->hnext;
}

/* Off its link (and the wire-id hash), or off the parked list. */
static void part_unlink(struct dml *d, struct part *p)
{
	if (p->link) {
		hash_remove(d, p);
		list_remove(&p->link->q, p);
		p->link = NULL;
	} else {
		list_remove(&d->parked, p);
	}
}

static void part_discard(struct part *p)
{
	free(p->keys_own);
	free(p->vals_own);
	free(p->pos);
	free(p);
}

/* A part is done (rc 0) or failed; the request completes with its last part. */
static void part_finish(struct dml *d, struct part *p, int rc)
{
	struct request *r = p->req;

	part_unlink(d, p);
	r->parts_left--;
	part_discard(p);
	request_settle(d, r, rc);
}

/* ---- sending ------------------------------------------------------------ */

static int part_send(struct dml *d, struct part *p)
{
	Dml__Meta m = DML__META__INIT;
	struct iovec iov[2];
	int n = 0;

	p->sends++;
	m.request_id = p->wire_id;
	m.sender = d->conf.worker_id;
	m.job = d->conf.job;
	m.table = p->table;
	m.value_width = p->width;
	m.dense = p->dense;
	m.key_begin = p->begin;
	m.key_end = p->end;
	m.num_keys = p->dense ? 0 : p->nkeys;
	m.clock = d->clock;
	switch (p->kind) {
	case PART_PUSH:
		m.type = DML__MSG_TYPE__PUSH;
		m.seq = p->seq;
		m.weight = p->weight;
		if (!p->dense) {
			iov[n].iov_base = (void *)p->keys;
			iov[n++].iov_len = p->nkeys * sizeof(uint64_t);
		}
		iov[n].iov_base = (void *)p->vals;
		iov[n++].iov_len = (p->dense ? p->end - p->begin : p->nkeys) * p->width *
				   sizeof(float);
		break;
	case PART_PULL:
		m.type = DML__MSG_TYPE__PULL;
		if (!p->dense) {
			iov[n].iov_base = (void *)p->keys;
			iov[n++].iov_len = p->nkeys * sizeof(uint64_t);
		}
		break;
	case PART_BYE:
		m.type = DML__MSG_TYPE__BYE;
		break;
	}
	return dml_conn_sendv(p->link->conn, &m, iov, n, DML_SEND_REF);
}

static void send_clock(struct link *l)
{
	Dml__Meta m = DML__META__INIT;

	if (l->d->conf.role != 0 || l->d->clock == 0)
		return;
	m.type = DML__MSG_TYPE__CLOCK;
	m.sender = l->d->conf.worker_id;
	m.job = l->d->conf.job;
	m.clock = l->d->clock;
	(void)dml_conn_send(l->conn, &m, NULL, 0, DML_SEND_COPY);
}

/*
 * Queue a part (its req set) on link l with a new wire id and, for a push,
 * l's next sequence number; it counts in its request from now on. Sent now
 * if the link is up, else on reconnect. On failure the part is freed.
 */
static int part_submit(struct dml *d, struct part *p, struct link *l)
{
	size_t b;
	int rc;

	if (l->failed) {
		part_discard(p);
		return DML_ECONN;
	}
	p->link = l;
	p->sends = 0;
	p->map_version = d->map.version;
	p->wire_id = ++d->next_wire;
	if (p->kind == PART_PUSH)
		p->seq = ++l->next_seq;
	if (d->nreqs >= d->nbuckets)
		grow_buckets(d);
	b = p->wire_id & (d->nbuckets - 1);
	p->hnext = d->parts[b];
	d->parts[b] = p;
	list_append(&l->q, p);
	p->req->parts_left++;
	if (l->ready && (rc = part_send(d, p)) != 0) {
		p->req->parts_left--;
		part_unlink(d, p);
		part_discard(p);
		return rc;
	}
	return 0;
}

/* ---- routing -------------------------------------------------------------- */

static const struct dml_shard_table *lookup_table(struct dml *d, uint32_t table)
{
	return dml_shard_map_table(&d->map, table);
}

static struct part *part_new(struct dml *d, enum part_kind kind,
			     const struct dml_shard_table *t)
{
	struct part *p = dml_xcalloc(1, sizeof(*p));

	p->kind = kind;
	p->weight = kind == PART_PUSH ? d->push_weight : 0.0f;
	p->table = t->id;
	p->width = t->width;
	p->dense = 1;   /* key-list requests clear it */
	return p;
}

/* A piece of p, for the same request, holding none of p's keys yet. */
static struct part *part_piece(const struct part *p)
{
	struct part *q = dml_xcalloc(1, sizeof(*q));

	q->req = p->req;
	q->kind = p->kind;
	q->table = p->table;
	q->width = p->width;
	q->dense = p->dense;
	q->weight = p->weight;
	q->bounced_ns = p->bounced_ns;
	return q;
}

/* A dense range part: one piece per run of ranges on one server. Consumes p. */
static int route_range(struct dml *d, const struct dml_shard_table *t, struct part *p)
{
	const struct dml_shard_range *sr = dml_shard_route(t, p->begin);
	uint64_t b = p->begin;
	size_t i;
	int rc = 0;

	if (!sr || p->end > t->keys) {
		part_discard(p);
		return DML_ERANGE;
	}
	i = (size_t)(sr - t->ranges);
	while (b < p->end && rc == 0) {
		struct link *l = d->route[t->ranges[i].server];
		uint64_t e = t->ranges[i].end;
		struct part *q;

		while (e < p->end && i + 1 < t->nranges &&
		       d->route[t->ranges[i + 1].server] == l)
			e = t->ranges[++i].end;
		i++;
		if (e > p->end)
			e = p->end;
		if (b == p->begin && e == p->end)
			return part_submit(d, p, l);    /* one server holds it all */
		q = part_piece(p);
		q->begin = b;
		q->end = e;
		if (p->vals)
			q->vals = p->vals + (b - p->begin) * p->width;
		if (p->out)
			q->out = p->out + (b - p->begin) * p->width;
		rc = part_submit(d, q, l);
		b = e;
	}
	part_discard(p);
	return rc;
}

/* A key-list part: as is when one server holds every key, else split. Consumes p. */
static int route_keys(struct dml *d, const struct dml_shard_table *t, struct part *p)
{
	uint32_t *server, *count, used = 0, only = 0;
	struct part **pieces;
	int rc = 0;

	/* One server holds the whole table: nothing to look up or copy. But a
	 * key outside a dense table is refused here: with a scheduler, the
	 * server's DML_ERANGE would be taken for keys on the move. */
	if (t->nranges == 1) {
		for (uint32_t i = 0; i < p->nkeys && t->dense; i++) {
			if (p->keys[i] >= t->keys) {
				part_discard(p);
				return DML_ERANGE;
			}
		}
		return part_submit(d, p, d->route[t->ranges[0].server]);
	}
	server = malloc(p->nkeys * sizeof(*server));
	if (!server) {
		part_discard(p);
		return DML_ENOMEM;
	}
	count = dml_xcalloc(d->nroute, sizeof(*count));
	for (uint32_t i = 0; i < p->nkeys && rc == 0; i++) {
		const struct dml_shard_range *sr = dml_shard_route(t, p->keys[i]);

		if (!sr) {
			rc = DML_ERANGE;
			break;
		}
		server[i] = sr->server;
		if (count[sr->server]++ == 0) {
			used++;
			only = sr->server;
		}
	}
	if (rc || used == 1) {
		free(server);
		free(count);
		if (rc) {
			part_discard(p);
			return rc;
		}
		return part_submit(d, p, d->route[only]);  /* no copies either */
	}
	pieces = dml_xcalloc(d->nroute, sizeof(*pieces));
	for (uint32_t s = 0; s < d->nroute; s++) {
		struct part *q;

		if (!count[s])
			continue;
		q = pieces[s] = part_piece(p);
		q->keys_own = dml_xmalloc(count[s] * sizeof(uint64_t));
		q->keys = q->keys_own;
		if (p->vals) {
			q->vals_own = dml_xmalloc((size_t)count[s] * p->width * sizeof(float));
			q->vals = q->vals_own;
		}
		if (p->out) {
			q->pos = dml_xmalloc(count[s] * sizeof(uint32_t));
			q->out = p->out;
		}
	}
	for (uint32_t i = 0; i < p->nkeys; i++) {
		struct part *q = pieces[server[i]];
		uint32_t k = q->nkeys++;

		q->keys_own[k] = p->keys[i];
		if (p->vals)
			memcpy(q->vals_own + (size_t)k * p->width,
			       p->vals + (size_t)i * p->width, p->width * sizeof(float));
		if (p->out)
			q->pos[k] = p->pos ? p->pos[i] : i;
	}
	for (uint32_t s = 0; s < d->nroute; s++) {
		if (!pieces[s])
			continue;
		if (rc == 0)
			rc = part_submit(d, pieces[s], d->route[s]);
		else
			part_discard(pieces[s]);
	}
	free(pieces);
	free(server);
	free(count);
	part_discard(p);
	return rc;
}

/*
 * Send a part by the current map. p (its req set) is on no list and counts
 * once in its request's parts_left; afterwards it is queued as is or
 * replaced by the pieces queued, each counting once. Returns 0 or the first
 * error; what was not queued is freed.
 */
static int part_route(struct dml *d, struct part *p)
{
	const struct dml_shard_table *t = lookup_table(d, p->table);
	struct request *r = p->req;
	int rc;

	if (!t || t->width != p->width || (p->dense && !t->dense)) {
		/* Only a new map can change a table under a part. */
		snprintf(d->detail, sizeof(d->detail), "table %u: %s in shard map v%llu",
			 p->table, t ? "shape changed" : "gone",
			 (unsigned long long)d->map.version);
		part_discard(p);
		rc = t ? DML_ESHAPE : DML_ENOTFOUND;
	} else {
		rc = p->dense ? route_range(d, t, p) : route_keys(d, t, p);
	}
	r->parts_left--;
	return rc;
}

/* Route a part that came back; its request fails if that cannot be done. */
static void part_reroute(struct dml *d, struct part *p)
{
	struct request *r = p->req;
	int rc = part_route(d, p);

	if (rc)
		request_settle(d, r, rc);
}

/*
 * A server applied nothing of p: its keys are not (or not yet) there. With
 * a newer map already known, route again now; else wait for a fetch.
 */
static void part_bounce(struct dml *d, struct part *p)
{
	int bounced_before = p->bounced_ns != 0;

	part_unlink(d, p);
	if (!bounced_before)
		p->bounced_ns = dml_now_ns();
	if (p->map_version < d->map.version) {
		part_reroute(d, p);
		return;
	}
	/* A part bounced before has waited through fetches already: it goes
	 * again after the next one, newer map or not (its owner may be ready). */
	p->waited = bounced_before;
	list_append(&d->parked, p);
	dml_client_sched_fetch(d->sched);
}

/* A fetch answered: route what it unblocks, fetch again for the rest. */
static void parked_release(struct dml *d)
{
	struct part_list todo = d->parked;

	d->parked.head = d->parked.tail = NULL;
	for (struct part *p = todo.head, *next; p; p = next) {
		next = p->next;
		p->prev = p->next = NULL;
		if (p->map_version < d->map.version || p->waited) {
			part_reroute(d, p);
		} else {
			p->waited = 1;
			list_append(&d->parked, p);
		}
	}
	if (d->parked.head)
		dml_client_sched_fetch(d->sched);
}

/* ---- connection events --------------------------------------------------- */

static void link_connect(struct link *l);

static void link_fail_all(struct link *l, int rc)
{
	while (l->q.head)
		part_finish(l->d, l->q.head, rc);
}

static int on_welcome(struct dml_conn *c, const Dml__Handshake *w, void *arg)
{
	struct link *l = arg;
	struct dml *d = l->d;

	if (d->conf.scheduler[0]) {
		/* Its ranges come from the map, not from what it reports. */
		if (w->node_id != l->node_id)
			dml_warn("server %s:%u is node %u, the shard map says %u", l->host,
				 l->port, w->node_id, l->node_id);
		if (w->map_version > d->map.version && d->sched)
			dml_client_sched_fetch(d->sched);
		return 0;
	}
	if (w->shard_count != d->nlinks || w->shard_index != l->index) {
		snprintf(d->detail, sizeof(d->detail),
			 "server %.64s:%u is shard %u/%u but is listed at position %u of %u",
			 l->host, l->port, w->shard_index, w->shard_count, l->index, d->nlinks);
		if (!d->connecting)
			dml_err("%s", d->detail);   /* dml_connect logs its own */
		l->fatal = DML_ECONF;
		return DML_ECONF;
	}
	for (size_t i = 0; i < l->ntables; i++)
		free(l->tables[i]);
	free(l->tables);
	l->ntables = w->n_tables;
	l->tables = dml_xcalloc(w->n_tables ? w->n_tables : 1, sizeof(*l->tables));
	for (size_t i = 0; i < w->n_tables; i++) {
		l->tables[i] = dml_xmalloc(sizeof(Dml__TableInfo));
		*l->tables[i] = *w->tables[i];
		l->tables[i]->base.unknown_fields = NULL;
		l->tables[i]->base.n_unknown_fields = 0;
	}
	return 0;
}

static void on_ready(struct dml_conn *c, void *arg)
{
	struct link *l = arg;

	l->ready = 1;
	l->backoff_ms = 0;
	l->lost_since_ns = 0;
	/*
	 * Where our clock is, before anything else: HELLO said where it was at
	 * connect time, and a clock may have passed during the handshake.
	 */
	send_clock(l);
	/* Resend everything unanswered, in order. */
	for (struct part *p = l->q.head; p; ) {
		struct part *next = p->next;
		int rc = part_send(l->d, p);

		if (rc)
			part_finish(l->d, p, rc);
		p = next;
	}
}

static void *payload_dest(struct dml_conn *c, const Dml__Meta *m, void *arg)
{
	struct link *l = arg;
	struct part *p;

	if (m->type != DML__MSG_TYPE__PULL_REPLY)
		return NULL;
	p = find_part(l->d, m->request_id);
	if (!p || p->link != l || p->kind != PART_PULL || p->pos)
		return NULL;
	if (m->payload_bytes != (uint64_t)(p->dense ? p->end - p->begin : p->nkeys) *
				p->width * sizeof(float))
		return NULL;
	return p->out;
}

static int on_frame(struct dml_conn *c, const Dml__Meta *m, const uint8_t *payload,
		    size_t len, void *arg)
{
	struct link *l = arg;
	struct dml *d = l->d;
	struct part *p = find_part(d, m->request_id);

	if (m->type == DML__MSG_TYPE__HEARTBEAT)
		return 0;
	if (!p || p->link != l) {
		if (m->type == DML__MSG_TYPE__ERROR && m->request_id == 0) {
			snprintf(d->detail, sizeof(d->detail), "%s", m->error->message);
			return 0;
		}
		dml_debug("server %s:%u: reply to unknown request %llu", l->host, l->port,
			  (unsigned long long)m->request_id);
		return 0;
	}
	switch (m->type) {
	case DML__MSG_TYPE__ACK:
		if (p->kind == PART_PULL)
			return DML_ESTATE;
		part_finish(d, p, 0);
		return 0;
	case DML__MSG_TYPE__ERROR: {
		int code = m->error->code < 0 && m->error->code > DML_ERR_MIN ? m->error->code
									       : DML_EIO;

		snprintf(d->detail, sizeof(d->detail), "server %.64s:%u: %s", l->host, l->port,
			 m->error->message);
		if (code == DML_ERANGE && d->sched && p->kind != PART_BYE) {
			dml_debug("%s (we route by map v%llu, it holds v%llu)", d->detail,
				  (unsigned long long)p->map_version,
				  (unsigned long long)m->map_version);
			part_bounce(d, p);
			return 0;
		}
		part_finish(d, p, code);
		return 0;
	}
	case DML__MSG_TYPE__PULL_REPLY: {
		uint64_t rows = p->dense ? p->end - p->begin : p->nkeys;
		size_t row_bytes = p->width * sizeof(float);

		if (p->kind != PART_PULL || len != rows * row_bytes)
			return DML_EFRAME_COUNT;
		if (p->pos) {
			for (uint64_t i = 0; i < rows; i++)
				memcpy(p->out + (size_t)p->pos[i] * p->width,
				       payload + i * row_bytes, row_bytes);
		} else if (payload != (const uint8_t *)p->out) {
			memcpy(p->out, payload, len);
		}
		if (m->min_clock < p->req->min_clock)
			p->req->min_clock = m->min_clock;
		/* parts travel in parallel: the request waited for the longest */
		if (m->held_us > UINT64_MAX / 1000)
			p->req->held_ns = UINT64_MAX;
		else if (m->held_us * 1000 > p->req->held_ns)
			p->req->held_ns = m->held_us * 1000;
		part_finish(d, p, 0);
		return 0;
	}
	default:
		return DML_ESTATE;
	}
}

static void on_close(struct dml_conn *c, int err, void *arg)
{
	struct link *l = arg;

	if (l->conn != c)
		return;
	l->d->bytes_closed += dml_conn_bytes_in(c) + dml_conn_bytes_out(c);
	l->conn = NULL;
	l->ready = 0;
	l->closing = 0;
	/* Leaving needs no answer from a server that is gone; and a request that
	 * keeps losing its connection is failed rather than sent forever. */
	for (struct part *p = l->q.head; p; ) {
		struct part *next = p->next;

		if (p->kind == PART_BYE)
			part_finish(l->d, p, 0);
		else if (p->sends >= MAX_SENDS)
			part_finish(l->d, p, err ? err : DML_ECONN);
		p = next;
	}
	if (err == DML_EAUTH || err == DML_ECLUSTER || err == DML_EROLE || err == DML_ECONF ||
	    err == DML_EFRAME_VERSION)
		l->fatal = err;
	if (!l->lost_since_ns)
		l->lost_since_ns = dml_now_ns();
	l->backoff_ms = l->backoff_ms ? l->backoff_ms * 2 : BACKOFF_MIN_MS;
	if (l->backoff_ms > BACKOFF_MAX_MS)
		l->backoff_ms = BACKOFF_MAX_MS;
	l->retry_at_ns = dml_now_ns() + l->backoff_ms * 1000000ull;
	dml_debug("server %s:%u: connection closed (%s)", l->host, l->port,
		  err ? dml_strerror(err) : "clean");
}

static const struct dml_conn_ops client_ops = {
	.on_welcome = on_welcome,
	.on_ready = on_ready,
	.payload_dest = payload_dest,
	.on_frame = on_frame,
	.on_close = on_close,
};

static void link_connect(struct link *l)
{
	struct dml *d = l->d;

	/* HELLO carries where we are: a server new to us counts us from there. */
	d->cc.clock = d->clock;
	if (dml_conn_connect(d->base, l->host, l->port, &d->cc, &client_ops, l, &l->conn)) {
		l->conn = NULL;
		l->retry_at_ns = dml_now_ns() + BACKOFF_MAX_MS * 1000000ull;
	}
}

static struct link *link_add(struct dml *d, const char *host, uint16_t port)
{
	struct link *l = dml_xcalloc(1, sizeof(*l));

	d->links = dml_xrealloc(d->links, (d->nlinks + 1) * sizeof(*d->links));
	d->links[d->nlinks] = l;
	l->d = d;
	l->index = d->nlinks++;
	snprintf(l->host, sizeof(l->host), "%s", host);
	l->port = port;
	return l;
}

static void link_free(struct link *l)
{
	for (size_t i = 0; i < l->ntables; i++)
		free(l->tables[i]);
	free(l->tables);
	free(l);
}

/* Retired links without parts: close, and free once the close has run. */
static void links_reap(struct dml *d)
{
	for (uint32_t i = 0; i < d->nlinks; ) {
		struct link *l = d->links[i];

		if (!l->retired || l->q.head) {
			i++;
			continue;
		}
		if (l->conn) {
			if (!l->closing) {
				/* Parts queued from now on wait for a new connection. */
				l->closing = 1;
				l->ready = 0;
				dml_conn_close(l->conn, 0);
			}
			i++;
			continue;
		}
		dml_info("server %s:%u (node %u) left the shard map: link closed", l->host,
			 l->port, l->node_id);
		link_free(l);
		d->links[i] = d->links[--d->nlinks];
	}
}

/* Fail what waited too long: request_timeout_ms, or a part refused for too long. */
static void expire_parts(struct dml *d, uint64_t now)
{
	for (uint32_t i = 0; i < d->nlinks && d->conf.request_timeout_ms; i++) {
		for (struct part *p = d->links[i]->q.head; p; ) {
			struct part *next = p->next;

			if (p->req->deadline_ns && now > p->req->deadline_ns)
				part_finish(d, p, p->bounced_ns ? DML_ERANGE : DML_ETIMEDOUT);
			p = next;
		}
	}
	for (struct part *p = d->parked.head; p; ) {
		struct part *next = p->next;

		if (p->req->deadline_ns ? now > p->req->deadline_ns
		    : now - p->bounced_ns > BOUNCE_LIMIT_MS * 1000000ull) {
			dml_warn("table %u: no server takes these keys (shard map v%llu): %s",
				 p->table, (unsigned long long)d->map.version, d->detail);
			part_finish(d, p, DML_ERANGE);
		}
		p = next;
	}
}

/* Reconnects that are due, links given up on, requests past their deadline. */
static void housekeeping(struct dml *d)
{
	uint64_t now = dml_now_ns();

	links_reap(d);
	for (uint32_t i = 0; i < d->nlinks; i++) {
		struct link *l = d->links[i];

		if (l->conn || l->failed || (l->retired && !l->q.head))
			continue;
		if (l->fatal || (l->lost_since_ns &&
				 now - l->lost_since_ns > d->conf.reconnect_timeout_ms * 1000000ull)) {
			l->failed = 1;
			dml_err("server %s:%u: giving up: %s", l->host, l->port,
				l->fatal ? dml_strerror(l->fatal) : "unreachable");
			link_fail_all(l, l->fatal ? l->fatal : DML_ECONN);
			continue;
		}
		if (now >= l->retry_at_ns)
			link_connect(l);
	}
	expire_parts(d, now);
}

static int parts_in_flight(const struct dml *d)
{
	if (d->parked.head)
		return 1;
	for (uint32_t i = 0; i < d->nlinks; i++)
		if (d->links[i]->q.head)
			return 1;
	return 0;
}

/*
 * Run the loop until done() holds or deadline_ns (0 = none) passes. Before
 * sleeping it polls for up to spin_us: a reply usually comes within
 * microseconds, and waking a process that sleeps in epoll costs both ends
 * (in a VM, the waker pays for an inter-processor interrupt) far more than a
 * short poll on a core the caller is not using for anything else.
 */
static void run_until(struct dml *d, int (*done)(struct dml *, void *), void *arg,
		      uint64_t deadline_ns)
{
	uint64_t spin_until = d->conf.spin_us ? dml_now_ns() + d->conf.spin_us * 1000ull : 0;

	for (;;) {
		housekeeping(d);
		if (done(d, arg) || (deadline_ns && dml_now_ns() >= deadline_ns) ||
		    atomic_load(&d->interrupted))
			return;
		if (spin_until && dml_now_ns() < spin_until)
			event_base_loop(d->base, EVLOOP_NONBLOCK);
		else
			event_base_loop(d->base, EVLOOP_ONCE);
	}
}

static int request_done(struct dml *d, void *arg)
{
	return ((struct request *)arg)->parts_left == 0;
}

static int nothing_in_flight(struct dml *d, void *arg)
{
	return !parts_in_flight(d);
}

static void tick_cb(evutil_socket_t fd, short what, void *arg)
{
	housekeeping(arg);
}

/* ---- shard maps ------------------------------------------------------------ */

static struct link *link_find(struct dml *d, uint32_t node_id)
{
	for (uint32_t i = 0; i < d->nlinks; i++)
		if (d->links[i]->node_id == node_id)
			return d->links[i];
	return NULL;
}

/* The link to a server of a new map: the one we have, or a new one. */
static struct link *map_link(struct dml *d, const struct dml_client_server *s)
{
	struct link *l = link_find(d, s->node_id);

	if (!l) {
		l = link_add(d, s->host, s->port);
		l->node_id = s->node_id;
		/* Given up on after reconnect_timeout_ms if it never answers. */
		l->lost_since_ns = dml_now_ns();
		link_connect(l);
		return l;
	}
	if (strcmp(l->host, s->host) != 0 || l->port != s->port) {
		/* Moved: the next connection goes to the new address. */
		dml_info("server %u moved from %s:%u to %s:%u", s->node_id, l->host, l->port,
			 s->host, s->port);
		snprintf(l->host, sizeof(l->host), "%s", s->host);
		l->port = s->port;
	}
	if (l->failed) {
		/* Back in a newer map: worth another try. */
		l->failed = 0;
		l->fatal = 0;
		l->lost_since_ns = dml_now_ns();
		l->retry_at_ns = 0;
	}
	return l;
}

/* Route by a newer map from now on. Takes m's shard map; m keeps its servers. */
static void map_install(struct dml *d, struct dml_client_map *m)
{
	struct link **route = dml_xcalloc(m->nservers, sizeof(*route));

	if (d->conf.job == 0) {
		/* "The running job": pin the one the scheduler named. */
		d->conf.job = m->job;
		d->cc.job = m->job;
		dml_client_sched_set_job(d->sched, m->job);
	}
	for (uint32_t i = 0; i < d->nlinks; i++)
		d->links[i]->retired = 1;
	for (uint32_t i = 0; i < m->nservers; i++) {
		route[i] = map_link(d, &m->servers[i]);
		route[i]->retired = 0;
	}
	free(d->route);
	d->route = route;
	d->nroute = m->nservers;
	dml_shard_map_destroy(&d->map);
	d->map = m->shard;
	memset(&m->shard, 0, sizeof(m->shard));
	dml_client_sched_pace_reset(d->sched);
	dml_info("job %u: shard map v%llu, %u servers", d->conf.job,
		 (unsigned long long)d->map.version, d->nroute);
}

/* A fetch ended (client_map.c calls this). */
static void on_map(void *arg, int rc, struct dml_client_map *m, const char *why)
{
	struct dml *d = arg;

	if (rc) {
		/* Said once per reason, not at every paced retry. */
		if (!d->connecting && strncmp(d->map_why, why, sizeof(d->map_why) - 1) != 0)
			dml_warn("shard map: %s", why);
		d->map_rc = rc;
		snprintf(d->map_why, sizeof(d->map_why), "%s", why);
		if (d->parked.head)
			dml_client_sched_fetch(d->sched);
		return;
	}
	d->map_rc = 0;
	if (m->shard.version > d->map.version)
		map_install(d, m);
	dml_client_map_destroy(m);
	parked_release(d);
}

/* ---- connect / close ------------------------------------------------------ */

static int parse_servers(struct dml *d)
{
	char *list = dml_xstrdup(d->conf.servers), *save = NULL, *tok;
	int rc = 0;

	for (tok = strtok_r(list, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
		char host[256];
		uint16_t port;

		while (*tok == ' ')
			tok++;
		if (d->nlinks >= DML_CLIENT_MAX_SERVERS) {
			rc = DML_EINVAL;
			break;
		}
		if (dml_parse_hostport(tok, host, sizeof(host), &port, 0) != 0) {
			snprintf(d->detail, sizeof(d->detail),
				 "servers: '%.200s' is not host:port", tok);
			rc = DML_EINVAL;
			break;
		}
		(void)link_add(d, host, port);
	}
	free(list);
	if (rc == 0 && d->nlinks == 0) {
		snprintf(d->detail, sizeof(d->detail), "servers: no server given");
		rc = DML_EINVAL;
	}
	/* Shard i is the i-th server listed. */
	d->nroute = d->nlinks;
	d->route = dml_xcalloc(d->nlinks ? d->nlinks : 1, sizeof(*d->route));
	memcpy(d->route, d->links, d->nlinks * sizeof(*d->route));
	return rc;
}

/* Standalone mode: the map is what the servers reported at handshake. */
static int build_map(struct dml *d)
{
	char err[256] = "";
	int rc = 0;

	dml_shard_map_init(&d->map, d->nlinks);
	for (uint32_t i = 0; i < d->nlinks && rc == 0; i++) {
		for (size_t j = 0; j < d->links[i]->ntables && rc == 0; j++) {
			const Dml__TableInfo *t = d->links[i]->tables[j];

			rc = dml_shard_map_add(&d->map, i, t->id, t->dense, t->width, t->keys,
					       t->key_begin, t->key_end, err, sizeof(err));
		}
	}
	if (rc == 0)
		rc = dml_shard_map_finish(&d->map, err, sizeof(err));
	if (rc) {
		snprintf(d->detail, sizeof(d->detail), "shard map: %s", err[0] ? err
			 : dml_strerror(rc));
		return DML_ECONF;
	}
	return 0;
}

/* dml_connect's deadline passed without a map: why, and the code to return. */
static int sched_timeout(struct dml *d, int not_found)
{
	const char *last = dml_client_sched_last_error(d->sched);
	int reached = dml_client_sched_ever_ready(d->sched);

	if (not_found) {
		snprintf(d->detail, sizeof(d->detail), "%.440s (no shard map within %u ms)",
			 d->map_why, d->conf.connect_timeout_ms);
		return DML_ENOTFOUND;
	}
	snprintf(d->detail, sizeof(d->detail), "%s: %s within %u ms%s%s",
		 dml_client_sched_name(d->sched),
		 reached ? "no shard map" : "could not connect", d->conf.connect_timeout_ms,
		 last[0] ? ": " : "", last);
	return reached ? DML_ETIMEDOUT : DML_ECONN;
}

/* Scheduler mode: ask for the map until it comes or the deadline passes. */
static int connect_sched(struct dml *d, uint64_t deadline)
{
	int rc = dml_client_sched_new(d->base, &d->cc, d->conf.scheduler, d->conf.job, on_map,
				      d, &d->sched), not_found = 0;

	if (rc) {
		snprintf(d->detail, sizeof(d->detail), "scheduler: '%.200s' is not host:port",
			 d->conf.scheduler);
		return rc;
	}
	dml_client_sched_fetch(d->sched);
	while (d->map.version == 0) {
		/* "No map yet" may change while we wait: ask again, paced. */
		if (d->map_rc == DML_ENOTFOUND) {
			d->map_rc = 0;
			not_found = 1;
			dml_client_sched_fetch(d->sched);
		} else if (d->map_rc) {
			snprintf(d->detail, sizeof(d->detail), "%s", d->map_why);
			return d->map_rc;
		}
		if (dml_now_ns() > deadline)
			return sched_timeout(d, not_found);
		event_base_loop(d->base, EVLOOP_ONCE);
	}
	return 0;
}

/* Every server of the map connected and authenticated, or an error. */
static int connect_links(struct dml *d, uint64_t deadline)
{
	int rc = 0;

	for (;;) {
		uint32_t ready = 0;

		for (uint32_t i = 0; i < d->nroute; i++) {
			ready += d->route[i]->ready;
			if (d->route[i]->fatal && !rc)
				rc = d->route[i]->fatal;
		}
		if (rc || ready == d->nroute)
			break;
		if (dml_now_ns() > deadline) {
			rc = DML_ETIMEDOUT;
			break;
		}
		event_base_loop(d->base, EVLOOP_ONCE);
		/* Keep retrying refused connections until the deadline. */
		for (uint32_t i = 0; i < d->nroute; i++) {
			struct link *l = d->route[i];

			if (!l->conn && !l->fatal && dml_now_ns() >= l->retry_at_ns)
				link_connect(l);
		}
	}
	for (uint32_t i = 0; i < d->nroute && rc; i++) {
		const struct link *l = d->route[i];

		if (!l->ready)
			dml_err("server %s:%u: %s", l->host, l->port,
				dml_strerror(l->fatal ? l->fatal : rc));
	}
	return rc;
}

static void dml_free_all(struct dml *d)
{
	struct dml_client_sched *s = d->sched;

	/* No housekeeping from here on: it would reconnect what is being closed. */
	if (d->tick)
		event_del(d->tick);
	/* No part left for a late reply or a map to find. */
	for (uint32_t i = 0; i < d->nlinks; i++)
		link_fail_all(d->links[i], DML_ECLOSED);
	while (d->parked.head)
		part_finish(d, d->parked.head, DML_ECLOSED);
	dml_client_sched_free(s);
	d->sched = NULL;
	for (uint32_t i = 0; i < d->nlinks; i++)
		if (d->links[i]->conn)
			dml_conn_abort(d->links[i]->conn, DML_ECLOSED);
	/* Let the loop run the deferred teardown of every connection. */
	for (int i = 0; i < 100; i++) {
		int open = 0;

		for (uint32_t j = 0; j < d->nlinks; j++)
			open += d->links[j]->conn != NULL;
		if (!open)
			break;
		event_base_loop(d->base, EVLOOP_NONBLOCK);
	}
	for (uint32_t i = 0; i < d->nlinks; i++)
		link_free(d->links[i]);
	for (size_t i = 0; i < d->nbuckets; i++) {
		while (d->reqs[i]) {
			struct request *r = d->reqs[i];

			d->reqs[i] = r->hnext;
			free(r);
		}
	}
	free(d->reqs);
	free(d->parts);
	free(d->links);
	free(d->route);
	dml_shard_map_destroy(&d->map);
	if (d->tick)
		event_free(d->tick);
	if (d->base)
		event_base_free(d->base);
	dml_secret_free(d->secret, d->secret_len);
	dml_conf_free(&dml_client_conf_schema, &d->conf);
	free(d);
}

/*
 * A broken connection must not kill the program: libevent's writes can raise
 * SIGPIPE. Only a default disposition is changed; a handler the application
 * installed is left alone.
 */
static void ignore_sigpipe(void)
{
	struct sigaction sa;

	if (sigaction(SIGPIPE, NULL, &sa) == 0 && sa.sa_handler == SIG_DFL)
		signal(SIGPIPE, SIG_IGN);
}

static void copy_conf(struct dml_client_conf *dst, const struct dml_client_conf *src)
{
	*dst = *src;
	dst->servers = dml_xstrdup(src->servers ? src->servers : "");
	dst->scheduler = dml_xstrdup(src->scheduler ? src->scheduler : "");
	dst->secret_file = dml_xstrdup(src->secret_file ? src->secret_file : "");
	dst->cluster = dml_xstrdup(src->cluster ? src->cluster : "dml");
}

/* Options, secret, event loop and connection identity; no network yet. */
static int client_setup(struct dml *d)
{
	struct timeval tick = { 0, TICK_MS * 1000 };
	int rc;

	if (d->conf.role == 0 && d->conf.worker_id == 0) {
		snprintf(d->detail, sizeof(d->detail), "worker_id is required for role worker");
		return DML_EINVAL;
	}
	if (d->conf.scheduler[0] && d->conf.servers[0]) {
		snprintf(d->detail, sizeof(d->detail),
			 "servers and scheduler exclude each other");
		return DML_EINVAL;
	}
	if (!d->conf.scheduler[0] && (rc = parse_servers(d)) != 0)
		return rc;
	if ((rc = dml_secret_load(d->conf.secret_file, &d->secret, &d->secret_len)) != 0) {
		snprintf(d->detail, sizeof(d->detail), "secret_file: %s", dml_strerror(rc));
		return rc;
	}
	ignore_sigpipe();
	d->base = event_base_new();
	if (!d->base)
		return DML_ENOMEM;
	dml_conn_conf_default(&d->cc);
	d->cc.limits.max_payload = (uint32_t)d->conf.max_payload;
	d->cc.limits.max_meta = (uint32_t)d->conf.max_meta;
	d->cc.secret = d->secret;
	d->cc.secret_len = d->secret_len;
	d->cc.cluster = d->conf.cluster;
	d->cc.role = d->conf.role == 0 ? DML__ROLE__WORKER : DML__ROLE__CONTROL;
	d->cc.node_id = d->conf.worker_id;
	d->cc.job = d->conf.job;
	d->cc.handshake_timeout_ms = d->conf.connect_timeout_ms;
	d->cc.incarnation = d->conf.incarnation;
	while (d->cc.incarnation == 0)
		if (dml_random_bytes(&d->cc.incarnation, sizeof(d->cc.incarnation)) != 0)
			return DML_EIO;
	d->tick = event_new(d->base, -1, EV_PERSIST, tick_cb, d);
	event_add(d->tick, &tick);
	d->clock = d->conf.clock;
	return 0;
}

int dml_connect(const dml_opts_t *opts, dml_t **out)
{
	struct dml *d;
	uint64_t deadline;
	int rc;

	if (!opts || !out)
		return DML_EINVAL;
	*out = NULL;
	d = dml_xcalloc(1, sizeof(*d));
	copy_conf(&d->conf, &opts->conf);
	d->nbuckets = 64;
	d->reqs = dml_xcalloc(d->nbuckets, sizeof(*d->reqs));
	d->parts = dml_xcalloc(d->nbuckets, sizeof(*d->parts));
	d->connecting = 1;
	rc = client_setup(d);
	deadline = dml_now_ns() + d->conf.connect_timeout_ms * 1000000ull;
	if (rc == 0 && d->conf.scheduler[0])
		rc = connect_sched(d, deadline);
	else if (rc == 0)
		for (uint32_t i = 0; i < d->nlinks; i++)
			link_connect(d->links[i]);
	if (rc == 0)
		rc = connect_links(d, deadline);
	if (rc == 0 && !d->sched)
		rc = build_map(d);
	if (rc) {
		/* The handle goes with the failure: the log keeps the reason. */
		if (d->detail[0])
			dml_err("dml_connect: %s", d->detail);
		dml_free_all(d);
		return rc;
	}
	d->connecting = 0;
	*out = d;
	return 0;
}

/* ---- requests ------------------------------------------------------------- */

/* Either hand the handle to the caller or make the request fire-and-forget. */
static int request_done_submitting(struct dml *d, struct request *r, int rc,
				   dml_handle_t *h)
{
	if (rc == 0 && h) {
		*h = r->id;
		return 0;
	}
	/*
	 * No handle for the caller (none wanted, or the submit failed): parts
	 * already sent finish later and free the request then. After a failed
	 * submit their own errors still surface in dml_wait_all, not this one.
	 */
	if (h)
		*h = 0;
	request_unlink(d, r);
	r->id = 0;
	r->result = 0;
	if (r->parts_left == 0)
		free(r);
	return rc;
}

/* A new request made of the whole part p, routed by the current map. */
static int submit(struct dml *d, struct part *p, dml_handle_t *h)
{
	struct request *r = request_new(d, p->kind == PART_PULL);

	p->req = r;
	r->parts_left = 1;
	return request_done_submitting(d, r, part_route(d, p), h);
}

static int submit_range(struct dml *d, enum part_kind kind, uint32_t table, uint64_t begin,
			uint64_t end, const float *vals, float *out, dml_handle_t *h)
{
	const struct dml_shard_table *t = lookup_table(d, table);
	struct part *p;

	if (h)
		*h = 0;
	if (!t)
		return DML_ENOTFOUND;
	if (!t->dense)
		return DML_EINVAL;
	if (begin >= end || end > t->keys)
		return DML_ERANGE;
	p = part_new(d, kind, t);
	p->begin = begin;
	p->end = end;
	p->vals = vals;
	p->out = out;
	return submit(d, p, h);
}

static int submit_keys(struct dml *d, enum part_kind kind, uint32_t table,
		       const uint64_t *keys, size_t n, const float *vals, float *out,
		       dml_handle_t *h)
{
	const struct dml_shard_table *t = lookup_table(d, table);
	struct part *p;

	if (h)
		*h = 0;
	if (!t)
		return DML_ENOTFOUND;
	if (n == 0 || n > UINT32_MAX || !keys)
		return DML_EINVAL;
	p = part_new(d, kind, t);
	p->dense = 0;
	p->keys = keys;
	p->nkeys = (uint32_t)n;
	p->vals = vals;
	p->out = out;
	return submit(d, p, h);
}

int dml_push(dml_t *d, uint32_t table, const uint64_t *keys, size_t n, const float *vals,
	     dml_handle_t *h)
{
	if (!d || !vals)
		return DML_EINVAL;
	return submit_keys(d, PART_PUSH, table, keys, n, vals, NULL, h);
}

int dml_pull(dml_t *d, uint32_t table, const uint64_t *keys, size_t n, float *out,
	     dml_handle_t *h)
{
	if (!d || !out || !h)
		return DML_EINVAL;
	return submit_keys(d, PART_PULL, table, keys, n, NULL, out, h);
}

int dml_push_range(dml_t *d, uint32_t table, uint64_t begin, uint64_t end,
		   const float *vals, dml_handle_t *h)
{
	if (!d || !vals)
		return DML_EINVAL;
	return submit_range(d, PART_PUSH, table, begin, end, vals, NULL, h);
}

int dml_pull_range(dml_t *d, uint32_t table, uint64_t begin, uint64_t end, float *out,
		   dml_handle_t *h)
{
	if (!d || !out || !h)
		return DML_EINVAL;
	return submit_range(d, PART_PULL, table, begin, end, NULL, out, h);
}

int dml_test(dml_t *d, dml_handle_t h, int *done)
{
	struct request *r;

	if (!d || !done)
		return DML_EINVAL;
	r = find_request(d, h);
	if (!r)
		return DML_ENOTFOUND;
	*done = r->parts_left == 0;
	return 0;
}

int dml_wait(dml_t *d, dml_handle_t h)
{
	struct request *r;
	int rc;

	if (!d)
		return DML_EINVAL;
	if (h == 0)
		return 0;
	r = find_request(d, h);
	if (!r)
		return DML_ENOTFOUND;
	run_until(d, request_done, r, 0);
	if (!request_done(d, r))
		return DML_EINTR;
	rc = r->result;
	if (r->pull && rc == 0) {
		d->last_min_clock = r->min_clock;
		d->held_ns += r->held_ns;
	}
	request_free(d, r);
	return rc;
}

int dml_wait_all(dml_t *d)
{
	int rc;

	if (!d)
		return DML_EINVAL;
	run_until(d, nothing_in_flight, NULL, 0);
	if (!nothing_in_flight(d, NULL))
		return DML_EINTR;
	rc = d->sticky_error;
	d->sticky_error = 0;
	/* Requests with handles are done now; their results stay for dml_wait. */
	for (size_t i = 0; i < d->nbuckets && rc == 0; i++)
		for (struct request *r = d->reqs[i]; r && rc == 0; r = r->hnext)
			rc = r->result;
	return rc;
}

/* The clock is now d->clock: tell the servers of the current map. */
static int clock_announce(struct dml *d)
{
	int rc = 0;

	/* The servers of the current map; one that joins later hears it on ready. */
	for (uint32_t i = 0; i < d->nroute; i++) {
		struct link *l = d->route[i];

		if (l->failed)
			rc = DML_ECONN;
		else if (l->ready)
			send_clock(l);
	}
	return rc;
}

void dml_interrupt(dml_t *d)
{
	if (d)
		atomic_store(&d->interrupted, 1);
}

int dml_clock(dml_t *d)
{
	if (!d)
		return DML_EINVAL;
	if (d->conf.role != 0)
		return DML_EROLE;
	d->clock++;
	return clock_announce(d);
}

int dml_clock_to(dml_t *d, uint64_t clock)
{
	if (!d)
		return DML_EINVAL;
	if (d->conf.role != 0)
		return DML_EROLE;
	if (clock <= d->clock)
		return 0;
	d->clock = clock;
	return clock_announce(d);
}

int dml_push_weight(dml_t *d, float weight)
{
	if (!d || !dml_push_weight_ok(weight))
		return DML_EINVAL;
	/* 1 travels as the field's default: nothing on the wire. */
	d->push_weight = weight == 1.0f ? 0.0f : weight;
	return 0;
}

uint64_t dml_current_clock(const dml_t *d)
{
	return d ? d->clock : 0;
}

uint64_t dml_last_pull_min_clock(const dml_t *d)
{
	return d ? d->last_min_clock : 0;
}

uint64_t dml_pulls_held_ns(const dml_t *d)
{
	return d ? d->held_ns : 0;
}

uint64_t dml_bytes(const dml_t *d)
{
	uint64_t n = d ? d->bytes_closed : 0;

	for (uint32_t i = 0; d && i < d->nlinks; i++)
		if (d->links[i]->conn)
			n += dml_conn_bytes_in(d->links[i]->conn) +
			     dml_conn_bytes_out(d->links[i]->conn);
	return n;
}

int dml_progress(dml_t *d, int timeout_ms)
{
	struct timeval tv;

	if (!d || timeout_ms < 0)
		return DML_EINVAL;
	housekeeping(d);
	if (timeout_ms == 0)
		return event_base_loop(d->base, EVLOOP_NONBLOCK) < 0 ? DML_EIO : 0;
	tv.tv_sec = timeout_ms / 1000;
	tv.tv_usec = (timeout_ms % 1000) * 1000;
	event_base_loopexit(d->base, &tv);
	return event_base_loop(d->base, 0) < 0 ? DML_EIO : 0;
}

const char *dml_error_detail(const dml_t *d)
{
	return d ? d->detail : "";
}

int dml_map_version(const dml_t *d, uint64_t *version)
{
	if (!d || !version)
		return DML_EINVAL;
	*version = d->map.version;
	return 0;
}

int dml_table_width(dml_t *d, uint32_t table, uint32_t *width)
{
	const struct dml_shard_table *t;

	if (!d || !width)
		return DML_EINVAL;
	t = lookup_table(d, table);
	if (!t)
		return DML_ENOTFOUND;
	*width = t->width;
	return 0;
}

int dml_table_size(dml_t *d, uint32_t table, uint64_t *keys)
{
	const struct dml_shard_table *t;

	if (!d || !keys)
		return DML_EINVAL;
	t = lookup_table(d, table);
	if (!t)
		return DML_ENOTFOUND;
	*keys = t->dense ? t->keys : 0;
	return 0;
}

void dml_close(dml_t *d)
{
	uint64_t deadline;
	struct request *r;
	uint32_t ms;

	if (!d)
		return;
	ms = d->conf.request_timeout_ms ? d->conf.request_timeout_ms : CLOSE_WAIT_MS;
	deadline = dml_now_ns() + ms * 1000000ull;
	/* Pushes in flight first, then tell every server we leave; after
	 * dml_interrupt only the latter, and briefly. */
	run_until(d, nothing_in_flight, NULL, deadline);
	if (atomic_exchange(&d->interrupted, 0))
		deadline = dml_now_ns() + (uint64_t)(ms < CLOSE_INTERRUPTED_MS ? ms :
						      CLOSE_INTERRUPTED_MS) * 1000000ull;
	if (d->conf.role == 0) {
		r = request_new(d, 0);
		for (uint32_t i = 0; i < d->nlinks; i++) {
			struct link *l = d->links[i];

			if (l->ready && !l->failed) {
				struct part *p = dml_xcalloc(1, sizeof(*p));

				p->kind = PART_BYE;
				p->req = r;
				(void)part_submit(d, p, l);
			}
		}
		run_until(d, request_done, r, deadline);
	}
	dml_free_all(d);
}
