/*
 * dml-aggregator's pulls: a zone cache of dense ranges, and pulls sent
 * upstream on the zone's behalf.
 *
 * A cache slot is one (job, table, width, dense range, dtype) of one
 * owner, held as floats with the requester clock c0 it was fetched for: it
 * answers any pull of clock c <= c0 (the owner answered for c0, so the
 * values meet any lower bound too). A pull the cache cannot answer joins
 * an upstream pull in flight for its slot whose clock is at least its own,
 * else one more goes, in the dtype the workers ask (libdml asks, through
 * an aggregator, its owner's cross-zone pull codec: what crosses the slow
 * link). Sparse pulls, and dense ones past the slot limit, go upstream one
 * by one and their replies come back as they are.
 *
 * Must never: answer a pull with values fetched for a lower clock than its
 * own, or trust an owner's reply's shape (checked against the slot before
 * it is decoded).
 */
#include <stdlib.h>
#include <string.h>

#include "proto/dml_error.h"
#include "proto/frame.h"
#include "proto/log.h"
#include "proto/util.h"
#include "server/aggregator_internal.h"

#define CACHE_SLOTS_MAX 1024

static size_t cache_count(const struct agg_owner *o)
{
	size_t n = 0;

	for (const struct agg_cache *c = o->caches; c; c = c->next)
		n++;
	return n;
}

/* The slot of a dense pull, made if missing; NULL past CACHE_SLOTS_MAX. */
static struct agg_cache *cache_slot(struct agg_owner *o, const Dml__Meta *m)
{
	struct agg_cache *c;

	for (c = o->caches; c; c = c->next)
		if (c->job == m->job && c->table == m->table && c->width == m->value_width &&
		    c->key_begin == m->key_begin && c->key_end == m->key_end &&
		    c->dtype == m->dtype)
			return c;
	if (cache_count(o) >= CACHE_SLOTS_MAX)
		return NULL;
	c = dml_xcalloc(1, sizeof(*c));
	c->job = m->job;
	c->table = m->table;
	c->width = m->value_width;
	c->key_begin = m->key_begin;
	c->key_end = m->key_end;
	c->dtype = m->dtype;
	c->next = o->caches;
	o->caches = c;
	return c;
}

/* A PULL_REPLY of n floats to a waiter, encoded in the dtype it asked for. */
static void reply_values(struct agg_session *s, const struct agg_waiter *w,
			 const struct agg_cache *c, const float *v, size_t n, uint64_t min_clock,
			 uint64_t held_us)
{
	Dml__Meta r = DML__META__INIT;
	struct dml_codec codec;
	size_t cap, len = n * sizeof(float);
	void *buf = NULL;
	const void *out = v;

	if (!s)
		return;
	if (w->dtype != DML__DTYPE__F32) {
		if (dml_dtype_codec(w->dtype, &codec) != 0 ||
		    (cap = dml_codec_bound(&codec, n)) == 0 || !(buf = malloc(cap)) ||
		    dml_codec_encode(&codec, v, n, NULL, buf, cap, &len) != 0) {
			free(buf);
			agg_reply_error(s, w->request_id, DML_ENOMEM, "pull of table %u: could "
					"not encode the reply", c->table);
			return;
		}
		out = buf;
	}
	r.type = DML__MSG_TYPE__PULL_REPLY;
	r.request_id = w->request_id;
	r.sender = s->agg->conf->node_id;
	r.job = c->job;
	r.table = c->table;
	r.value_width = c->width;
	r.dense = 1;
	r.key_begin = c->key_begin;
	r.key_end = c->key_end;
	r.dtype = w->dtype;
	r.min_clock = min_clock;
	r.held_us = held_us;
	(void)dml_conn_send(s->peer.conn, &r, out, len, DML_SEND_COPY);
	free(buf);
}

static void waiter_add(struct agg_pull *p, struct agg_session *s, const Dml__Meta *m)
{
	if (p->nw == p->wcap) {
		p->wcap = p->wcap ? 2 * p->wcap : 4;
		p->w = dml_xrealloc(p->w, p->wcap * sizeof(*p->w));
	}
	p->w[p->nw++] = (struct agg_waiter){ s, m->request_id, m->clock, m->dtype };
}

/* A new upstream pull for m's sake: the request as m asks it, from us. */
static struct agg_pull *pull_new(struct agg_owner *o, struct agg_session *s,
				 const Dml__Meta *m, struct agg_cache *c, const uint8_t *payload,
				 size_t len)
{
	struct agg_pull *p = dml_xcalloc(1, sizeof(*p)), **pp;
	Dml__Meta *u = dml_xcalloc(1, sizeof(*u));

	dml__meta__init(u);
	u->type = DML__MSG_TYPE__PULL;
	u->request_id = agg_owner_rid(o);
	u->job = m->job;
	u->table = m->table;
	u->clock = m->clock;
	u->value_width = m->value_width;
	u->dense = m->dense;
	u->key_begin = m->key_begin;
	u->key_end = m->key_end;
	u->num_keys = m->num_keys;
	u->worker = s->worker;
	u->dtype = m->dtype;
	p->meta = u;
	p->cache = c;
	if (len) {
		p->payload = dml_xmalloc(len);
		memcpy(p->payload, payload, len);
		p->payload_len = len;
	}
	waiter_add(p, s, m);
	/* Kept in the order sent: a new connection sends them again so. */
	for (pp = &o->pulls; *pp; pp = &(*pp)->next)
		;
	*pp = p;
	s->agg->st.pulls_forwarded++;
	(void)agg_owner_send(o, p->meta, p->payload, p->payload_len);
	return p;
}

void agg_pull_request(struct agg_owner *o, struct agg_session *s, const Dml__Meta *m,
		      const uint8_t *payload, size_t len)
{
	struct agg_cache *c;

	if (m->scan) {
		agg_reply_error(s, m->request_id, DML_EINVAL, "pull of table %u: scans go to "
				"the servers", m->table);
		return;
	}
	c = m->dense ? cache_slot(o, m) : NULL;
	if (!c) {
		pull_new(o, s, m, NULL, payload, len);
		return;
	}
	if (c->valid && m->clock <= c->clock) {
		struct agg_waiter w = { s, m->request_id, m->clock, m->dtype };

		s->agg->st.cache_hits++;
		reply_values(s, &w, c, c->values, c->nvalues, c->min_clock, c->held_us);
		return;
	}
	for (struct agg_pull *p = o->pulls; p; p = p->next)
		if (p->cache == c && p->meta->clock >= m->clock) {
			waiter_add(p, s, m);
			return;
		}
	pull_new(o, s, m, c, NULL, 0);
}

static void pull_unlink_free(struct agg_owner *o, struct agg_pull *p)
{
	for (struct agg_pull **pp = &o->pulls; *pp; pp = &(*pp)->next)
		if (*pp == p) {
			*pp = p->next;
			break;
		}
	free(p->meta);          /* made here, nothing inside it owned */
	free(p->payload);
	free(p->w);
	free(p);
}

/* A pass-through reply: as the owner sent it, to the request it answers. */
static void reply_relay(struct agg_pull *p, const Dml__Meta *m, const uint8_t *payload,
			size_t len)
{
	struct agg_session *s = p->w[0].sess;
	Dml__Meta r = *m;

	if (!s)
		return;
	r.request_id = p->w[0].request_id;
	r.sender = s->agg->conf->node_id;
	(void)dml_conn_send(s->peer.conn, &r, payload, len, DML_SEND_COPY);
}

/*
 * The owner's values for slot c as floats, or NULL after telling every
 * waiter why not: a reply of another shape, or a bad encoding.
 */
static float *reply_decode(const struct agg_owner *o, struct agg_pull *p, const Dml__Meta *m, const uint8_t *payload,
			   size_t len, size_t *n)
{
	const struct agg_cache *c = p->cache;
	struct dml_codec codec;
	uint64_t count;
	float *v = NULL;

	if (m->dense && m->value_width == c->width && m->key_begin == c->key_begin &&
	    m->key_end == c->key_end && dml_meta_value_count(m, &count) == 0 &&
	    dml_dtype_codec(m->dtype, &codec) == 0 && (v = malloc(count * sizeof(float))) &&
	    dml_codec_decode(&codec, payload, len, (size_t)count, v) == 0) {
		*n = (size_t)count;
		return v;
	}
	free(v);
	dml_warn("owner %s: a pull reply of table %u is not the range asked for, or not a "
		 "valid encoding", o->addr, c->table);
	for (size_t i = 0; i < p->nw; i++)
		agg_reply_error(p->w[i].sess, p->w[i].request_id, DML_ESHAPE, "pull of table "
				"%u: the owner's reply was not the range asked for", c->table);
	return NULL;
}

static void reply_cached(const struct agg_owner *o, struct agg_pull *p, const Dml__Meta *m, const uint8_t *payload,
			 size_t len)
{
	struct agg_cache *c = p->cache;
	size_t n = 0;
	float *v = reply_decode(o, p, m, payload, len, &n);

	if (!v)
		return;
	for (size_t i = 0; i < p->nw; i++)
		reply_values(p->w[i].sess, &p->w[i], c, v, n, m->min_clock, m->held_us);
	if (c->valid && c->clock > p->meta->clock) {
		free(v);     /* a newer reply is there already */
		return;
	}
	free(c->values);
	c->values = v;
	c->nvalues = n;
	c->valid = 1;
	c->clock = p->meta->clock;
	c->min_clock = m->min_clock;
	c->held_us = m->held_us;
}

int agg_pull_answer(struct agg_owner *o, const Dml__Meta *m, const uint8_t *payload,
		    size_t len)
{
	struct agg_pull *p;

	for (p = o->pulls; p; p = p->next)
		if (p->meta->request_id == m->request_id)
			break;
	if (!p || m->type == DML__MSG_TYPE__ACK)
		return 0;
	if (m->type == DML__MSG_TYPE__ERROR) {
		for (size_t i = 0; i < p->nw; i++)
			agg_relay_error(p->w[i].sess, p->w[i].request_id, m);
		o->agg->st.relayed_errors++;
	} else if (!p->cache) {
		reply_relay(p, m, payload, len);
	} else {
		reply_cached(o, p, m, payload, len);
	}
	pull_unlink_free(o, p);
	return 1;
}

void agg_pull_resend(struct agg_owner *o)
{
	for (struct agg_pull *p = o->pulls; p; p = p->next)
		(void)agg_owner_send(o, p->meta, p->payload, p->payload_len);
}

void agg_pull_forget(struct agg_owner *o, const struct agg_session *s)
{
	for (struct agg_pull *p = o->pulls; p; p = p->next)
		for (size_t i = 0; i < p->nw; i++)
			if (p->w[i].sess == s)
				p->w[i].sess = NULL;
}

void agg_pull_free(struct agg_owner *o)
{
	struct agg_cache *c, *next;

	while (o->pulls)
		pull_unlink_free(o, o->pulls);
	for (c = o->caches; c; c = next) {
		next = c->next;
		free(c->values);
		free(c);
	}
	o->caches = NULL;
}
