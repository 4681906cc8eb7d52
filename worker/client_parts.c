/*
 * libdml's requests and their parts (client_internal.h): bookkeeping (the
 * handle and wire-id hashes), sending a part on its server link, and routing
 * a request by the shard map into parts, one per server (split when its
 * keys live on several).
 *
 * Must never: re-route a part that was sent and not answered (only an
 * ERANGE answer means "not applied"), or reuse a push sequence number.
 */
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>

#include "proto/auth.h"
#include "worker/client_internal.h"
#include "proto/conn.h"
#include "worker/dml.h"
#include "proto/log.h"
#include "shard/shardmap.h"
#include "proto/util.h"

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

struct request *dml_client_find_request(struct dml *d, dml_handle_t id)
{
	struct request *r = d->reqs[id & (d->nbuckets - 1)];

	while (r && r->id != id)
		r = r->hnext;
	return r;
}

struct request *dml_client_request_new(struct dml *d, int pull)
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

void dml_client_request_unlink(struct dml *d, struct request *r)
{
	struct request **pp = &d->reqs[r->id & (d->nbuckets - 1)];

	while (*pp != r)
		pp = &(*pp)->hnext;
	*pp = r->hnext;
	d->nreqs--;
}

void dml_client_request_free(struct dml *d, struct request *r)
{
	dml_client_request_unlink(d, r);
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

struct part *dml_client_find_part(struct dml *d, uint64_t wire_id)
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
		dml_client_path_leave(d, p);
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
	free(p->coded);
	free(p->pos);
	free(p);
}

/* A part is done (rc 0) or failed; the request completes with its last part. */
void dml_client_part_finish(struct dml *d, struct part *p, int rc)
{
	struct request *r = p->req;

	part_unlink(d, p);
	r->parts_left--;
	part_discard(p);
	request_settle(d, r, rc);
}

/* ---- sending ------------------------------------------------------------ */

/* Meta.owner: where this worker dials the owner, as the aggregator knows it. */
static void owner_address(const struct link *l, char *buf, size_t len)
{
	if (strchr(l->host, ':'))
		snprintf(buf, len, "[%s]:%u", l->host, l->port);
	else
		snprintf(buf, len, "%s:%u", l->host, l->port);
}

int dml_client_part_send(struct dml *d, struct part *p)
{
	Dml__Meta m = DML__META__INIT;
	struct iovec iov[2];
	char owner[300], forward[32];
	const char *fc;
	int n = 0, rc;

	if (p->sends == 0 && (rc = dml_client_part_encode(d, p)) != 0)
		return rc;
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
	/* A push through the aggregator keeps the clock it was issued at: the
	 * aggregator sums the zone's pushes by it, whenever this one is sent. */
	m.clock = p->clock_held ? p->epoch : d->clock;
	if (p->owner) {
		owner_address(p->owner, owner, sizeof(owner));
		m.owner = owner;
		if ((fc = dml_client_forward_codec(d, p, forward, sizeof(forward))) != NULL)
			m.forward_codec = (char *)fc;
	}
	switch (p->kind) {
	case PART_PUSH:
		m.type = DML__MSG_TYPE__PUSH;
		m.seq = p->seq;
		m.weight = p->weight;
		if (p->owner)
			m.pace = d->codecs.pace;  /* how long its aggregator waits */
		if (!p->dense) {
			iov[n].iov_base = (void *)p->keys;
			iov[n++].iov_len = p->nkeys * sizeof(uint64_t);
		}
		m.dtype = p->coded ? p->dtype : DML__DTYPE__F32;
		iov[n].iov_base = p->coded ? (void *)p->coded : (void *)p->vals;
		iov[n++].iov_len = p->coded ? p->coded_len
					    : dml_client_part_values(p) * sizeof(float);
		break;
	case PART_PULL:
		m.type = DML__MSG_TYPE__PULL;
		m.dtype = p->dtype;
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

void dml_client_send_clock(struct link *l)
{
	Dml__Meta m = DML__META__INIT;

	/* An aggregator hears no CLOCK: the owners take it straight. */
	if (l->d->conf.role != 0 || l->d->clock_sent == 0 || l->aggregator)
		return;
	m.type = DML__MSG_TYPE__CLOCK;
	m.sender = l->d->conf.worker_id;
	m.job = l->d->conf.job;
	m.clock = dml_client_clock_straight(l);
	(void)dml_conn_send(l->conn, &m, NULL, 0, DML_SEND_COPY);
}

void dml_client_send_clock_via(struct dml *d, struct link *l)
{
	Dml__Meta m = DML__META__INIT;
	char owner[300];

	if (d->conf.role != 0 || d->clock_sent == 0 || !d->agg || !d->agg->ready)
		return;
	owner_address(l, owner, sizeof(owner));
	m.type = DML__MSG_TYPE__CLOCK;
	m.sender = d->conf.worker_id;
	m.job = d->conf.job;
	m.clock = d->clock_sent;
	m.owner = owner;
	(void)dml_conn_send(d->agg->conn, &m, NULL, 0, DML_SEND_COPY);
}

/*
 * Queue a part (its req set) for owner link l with a new wire id and, for a
 * push, l's next sequence number; it counts in its request from now on. It
 * goes on l or through the aggregator (dml_client_path). Sent now if that
 * link is up, else on reconnect. On failure the part is freed.
 */
int dml_client_part_submit(struct dml *d, struct part *p, struct link *l)
{
	struct link *via;
	size_t b;
	int rc;

	if (l->failed) {
		part_discard(p);
		return DML_ECONN;
	}
	via = dml_client_path(d, l, p->kind);
	p->link = via;
	p->owner = via != l ? l : NULL;
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
	list_append(&via->q, p);
	dml_client_path_enter(d, p);
	p->req->parts_left++;
	if (via->ready && (rc = dml_client_part_send(d, p)) != 0) {
		p->req->parts_left--;
		part_unlink(d, p);
		part_discard(p);
		return rc;
	}
	return 0;
}

void dml_client_part_relink(struct part *p, struct link *to)
{
	list_remove(&p->link->q, p);
	list_append(&to->q, p);
	p->link = to;
}

void dml_client_pull_scatter(const struct part *p, const void *rows)
{
	size_t row_bytes = p->width * sizeof(float);

	for (uint32_t i = 0; i < p->nkeys; i++)
		memcpy(p->out + (size_t)p->pos[i] * p->width, (const uint8_t *)rows + i * row_bytes,
		       row_bytes);
}

/* ---- routing -------------------------------------------------------------- */

const struct dml_shard_table *dml_client_lookup_table(struct dml *d, uint32_t table)
{
	return dml_shard_map_table(&d->map, table);
}

struct part *dml_client_part_new(struct dml *d, enum part_kind kind,
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
			return dml_client_part_submit(d, p, l);    /* one server holds it all */
		q = part_piece(p);
		q->begin = b;
		q->end = e;
		if (p->vals_own) {      /* a bounced push's own values: p goes */
			q->vals_own = dml_xmalloc((e - b) * p->width * sizeof(float));
			memcpy(q->vals_own, p->vals + (b - p->begin) * p->width,
			       (e - b) * p->width * sizeof(float));
			q->vals = q->vals_own;
		} else if (p->vals) {
			q->vals = p->vals + (b - p->begin) * p->width;
		}
		if (p->out)
			q->out = p->out + (b - p->begin) * p->width;
		rc = dml_client_part_submit(d, q, l);
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
		return dml_client_part_submit(d, p, d->route[t->ranges[0].server]);
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
		return dml_client_part_submit(d, p, d->route[only]);  /* no copies either */
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
			rc = dml_client_part_submit(d, pieces[s], d->route[s]);
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
int dml_client_part_route(struct dml *d, struct part *p)
{
	const struct dml_shard_table *t = dml_client_lookup_table(d, p->table);
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
	int rc = dml_client_part_route(d, p);

	if (rc)
		request_settle(d, r, rc);
}

/*
 * A server applied nothing of p: its keys are not (or not yet) there. With
 * a newer map already known, route again now; else wait for a fetch.
 */
void dml_client_part_bounce(struct dml *d, struct part *p)
{
	int bounced_before = p->bounced_ns != 0;

	part_unlink(d, p);
	/* Another server may take another codec: what was to be sent goes. */
	if (dml_client_part_uncode(p) != 0) {
		struct request *r = p->req;

		r->parts_left--;
		part_discard(p);
		request_settle(d, r, DML_EIO);
		return;
	}
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
void dml_client_parked_release(struct dml *d)
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
