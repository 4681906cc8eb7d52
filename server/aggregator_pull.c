/*
 * dml-aggregator's pulls: a zone cache of dense ranges, and pulls sent
 * upstream on the zone's behalf.
 *
 * A cache slot is one (job, table, width, dense range, upstream codec) of
 * one owner, held as floats with the requester clock c0 it was fetched for:
 * it answers any pull of clock c <= c0 (the owner answered for c0, so the
 * values meet any lower bound too). A pull the cache cannot answer joins
 * an upstream pull in flight for its slot of the same clock, else one more
 * goes, in the codec the workers name in Meta.forward_codec
 * (libdml names its owner's cross-zone pull codec: what crosses the slow
 * link; without one, the dtype the worker asks). Workers get the values in
 * the dtype they ask. Sparse pulls, and dense ones past the slot limit, go
 * upstream one by one.
 *
 * topk:F (or topk16:F) upstream makes the slot's pulls delta pulls (dml.proto): the slot
 * holds exactly the owner's copy of what this aggregator holds, at the
 * version the owner named, and each reply is the change since then (or the
 * values again, when the versions part). One delta pull per slot is in
 * flight at a time, so that each names the version the last one brought;
 * a pull for a later clock waits in one deferred pull that goes next, any
 * other goes as a plain pull whose reply is relayed (fp16).
 *
 * Pulling ahead (pull_ahead = yes, the default): once a worker's pull of clock
 * k is answered from a slot, the slot's pull for k + 1 goes at once, with
 * no one waiting on it, so that it crosses the slow link while the zone's
 * workers compute step k; their pulls of k + 1 then join it or find it
 * cached instead of paying the link's time on top of their step. The owner
 * still answers it only within the staleness bound of clock k + 1. Only a
 * worker's pull starts one (the reply of a pull ahead does not), so a zone
 * whose workers stopped pulling costs nothing more.
 *
 * Must never: answer a pull with values fetched for a lower clock than its
 * own, trust an owner's reply's shape (checked against the slot before it
 * is decoded), or add a delta to any version but the one it was asked for.
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

/*
 * The codec a worker's pull goes upstream in: its Meta.forward_codec, else
 * the dtype it asks; floats where the owner does not take it.
 */
static struct dml_codec upstream_codec(const struct agg_owner *o, const Dml__Meta *m)
{
	struct dml_codec c = { .kind = DML_CODEC_NONE };

	if (m->forward_codec && m->forward_codec[0]) {
		if (dml_codec_parse(m->forward_codec, &c, NULL, 0) != 0)
			c.kind = DML_CODEC_NONE;
	} else if (dml_dtype_codec(m->dtype, &c) != 0) {
		c.kind = DML_CODEC_NONE;
	}
	if (!(o->codecs & (1u << dml_codec_dtype(c.kind))))
		c.kind = DML_CODEC_NONE;
	return c;
}

/* The slot of a dense pull, made if missing; NULL past CACHE_SLOTS_MAX. */
static struct agg_cache *cache_slot(struct agg_owner *o, const Dml__Meta *m,
				    const struct dml_codec *up)
{
	struct agg_cache *c;

	for (c = o->caches; c; c = c->next)
		if (c->job == m->job && c->table == m->table && c->width == m->value_width &&
		    c->key_begin == m->key_begin && c->key_end == m->key_end &&
		    c->up.kind == up->kind && c->up.topk_fraction == up->topk_fraction)
			return c;
	if (cache_count(o) >= CACHE_SLOTS_MAX)
		return NULL;
	c = dml_xcalloc(1, sizeof(*c));
	c->job = m->job;
	c->table = m->table;
	c->width = m->value_width;
	c->key_begin = m->key_begin;
	c->key_end = m->key_end;
	c->up = *up;
	c->delta = dml_codec_sparse(up->kind);
	c->next = o->caches;
	o->caches = c;
	return c;
}

/*
 * Send r (a PULL_REPLY but for its dtype) with the n floats v in dtype, to
 * a waiter still there.
 */
static void reply_send(const struct agg_waiter *w, Dml__Meta *r, const float *v, size_t n)
{
	struct agg_session *s = w->sess;
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
					"not encode the reply", r->table);
			return;
		}
		out = buf;
	}
	r->request_id = w->request_id;
	r->sender = s->agg->conf->node_id;
	r->dtype = w->dtype;
	(void)dml_conn_send(s->peer.conn, r, out, len, DML_SEND_COPY);
	free(buf);
}

/* A PULL_REPLY of slot c's range, n floats, to a waiter. */
static void reply_values(const struct agg_waiter *w, const struct agg_cache *c,
			 const float *v, size_t n, uint64_t min_clock, uint64_t held_us)
{
	Dml__Meta r = DML__META__INIT;

	r.type = DML__MSG_TYPE__PULL_REPLY;
	r.job = c->job;
	r.table = c->table;
	r.value_width = c->width;
	r.dense = 1;
	r.key_begin = c->key_begin;
	r.key_end = c->key_end;
	r.min_clock = min_clock;
	r.held_us = held_us;
	reply_send(w, &r, v, n);
}

static void waiter_add(struct agg_pull *p, struct agg_session *s, const Dml__Meta *m)
{
	if (p->nw == p->wcap) {
		p->wcap = p->wcap ? 2 * p->wcap : 4;
		p->w = dml_xrealloc(p->w, p->wcap * sizeof(*p->w));
	}
	p->w[p->nw++] = (struct agg_waiter){ s, m->request_id, m->clock, m->dtype };
}

/* Send p to its owner (if connected); a delta pull names the version held. */
static void pull_send(struct agg_owner *o, struct agg_pull *p)
{
	const struct agg_cache *c = p->cache;

	if (p->deferred)
		return;
	if (c && c->delta)
		p->meta->held_version = c->valid ? c->version : 0;
	(void)agg_owner_send(o, p->meta, p->payload, p->payload_len);
}

/*
 * A new upstream pull for m's sake, in up (topk: a delta pull of slot c);
 * sent now unless deferred behind the slot's pull in flight.
 */
static struct agg_pull *pull_new(struct agg_owner *o, struct agg_session *s,
				 const Dml__Meta *m, struct agg_cache *c,
				 const struct dml_codec *up, int deferred,
				 const uint8_t *payload, size_t len)
{
	struct agg_pull *p = dml_xcalloc(1, sizeof(*p)), **pp;
	Dml__Meta *u = dml_xcalloc(1, sizeof(*u));
	struct dml_codec values = *up;

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
	if (c && c->delta) {
		dml_codec_format(up, p->delta_codec, sizeof(p->delta_codec));
		u->delta_codec = p->delta_codec;
		values.kind = DML_CODEC_NONE;          /* a full reply: floats */
	} else if (dml_codec_sparse(values.kind)) {
		values.kind = DML_CODEC_FP16;          /* a plain reply holds every value */
	}
	u->dtype = dml_codec_dtype(values.kind);
	p->meta = u;
	p->cache = c;
	p->deferred = deferred;
	if (len) {
		p->payload = dml_xmalloc(len);
		memcpy(p->payload, payload, len);
		p->payload_len = len;
	}
	/* Kept in the order sent: a new connection sends them again so. */
	for (pp = &o->pulls; *pp; pp = &(*pp)->next)
		;
	*pp = p;
	s->agg->st.pulls_forwarded++;
	pull_send(o, p);
	return p;
}

/* A delta slot's pull in flight and its deferred one (NULL: none). */
static void slot_pulls(struct agg_owner *o, const struct agg_cache *c,
		       struct agg_pull **flight, struct agg_pull **deferred)
{
	*flight = *deferred = NULL;
	for (struct agg_pull *p = o->pulls; p; p = p->next)
		if (p->cache == c)
			*(p->deferred ? deferred : flight) = p;
}

/*
 * Worker s's pull m of slot c was answered: pull clock m->clock + 1 ahead
 * (see the top of this file) unless the slot holds it or a pull of it, or
 * of a later clock, is on its way. A delta slot's goes after the one in
 * flight, as a deferred pull does.
 */
static void pull_ahead(struct agg_owner *o, struct agg_session *s, const Dml__Meta *m,
		       struct agg_cache *c)
{
	Dml__Meta next = *m;
	struct agg_pull *flight, *deferred;

	if (!s->agg->conf->pull_ahead || (c->valid && c->clock > m->clock))
		return;
	for (struct agg_pull *p = o->pulls; p; p = p->next)
		if (p->cache == c && p->meta->clock > m->clock)
			return;
	next.clock = m->clock + 1;
	slot_pulls(o, c, &flight, &deferred);
	if (c->delta && deferred)
		return;
	pull_new(o, s, &next, c, &c->up, c->delta && flight, NULL, 0);
	s->agg->st.pulls_ahead++;
}

void agg_pull_request(struct agg_owner *o, struct agg_session *s, const Dml__Meta *m,
		      const uint8_t *payload, size_t len)
{
	struct dml_codec up = upstream_codec(o, m);
	struct agg_pull *flight, *deferred, *p;
	struct agg_cache *c;

	if (m->scan) {
		agg_reply_error(s, m->request_id, DML_EINVAL, "pull of table %u: scans go to "
				"the servers", m->table);
		return;
	}
	c = m->dense ? cache_slot(o, m, &up) : NULL;
	if (!c) {
		waiter_add(pull_new(o, s, m, NULL, &up, 0, payload, len), s, m);
		return;
	}
	if (c->valid && m->clock <= c->clock) {
		struct agg_waiter w = { s, m->request_id, m->clock, m->dtype };

		s->agg->st.cache_hits++;
		reply_values(&w, c, c->values, c->nvalues, c->min_clock, c->held_us);
		pull_ahead(o, s, m, c);
		return;
	}
	/*
	 * Only a pull of the same clock is joined: the owner holds one of a
	 * later clock longer (the staleness bound counts from its clock), and
	 * a worker waiting on it may be waiting on its own zone's pushes
	 * (libdml holds a CLOCK until they are acknowledged): a cycle.
	 */
	for (p = o->pulls; p; p = p->next)
		if (p->cache == c && p->meta->clock == m->clock) {
			waiter_add(p, s, m);
			return;
		}
	if (!c->delta) {
		waiter_add(pull_new(o, s, m, c, &up, 0, NULL, 0), s, m);
		return;
	}
	/* Delta pulls one at a time; a later clock may wait for an earlier
	 * one, an earlier clock (or one more) goes as a plain pull. */
	slot_pulls(o, c, &flight, &deferred);
	if (!flight)
		p = pull_new(o, s, m, c, &up, 0, NULL, 0);
	else if (!deferred && flight->meta->clock < m->clock)
		p = pull_new(o, s, m, c, &up, 1, NULL, 0);
	else
		p = pull_new(o, s, m, NULL, &up, 0, NULL, 0);
	waiter_add(p, s, m);
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

/*
 * A pass-through reply to the request it answers: as the owner sent it, or
 * decoded and sent in the dtype the worker asked when the two differ.
 */
static void reply_relay(struct agg_pull *p, const Dml__Meta *m, const uint8_t *payload,
			size_t len)
{
	const struct agg_waiter *w = &p->w[0];
	Dml__Meta r = *m;
	struct dml_codec codec;
	uint64_t count;
	float *v = NULL;

	if (!w->sess)
		return;
	r.delta = 0;
	r.held_version = 0;
	if (m->dtype == w->dtype) {
		r.request_id = w->request_id;
		r.sender = w->sess->agg->conf->node_id;
		(void)dml_conn_send(w->sess->peer.conn, &r, payload, len, DML_SEND_COPY);
		return;
	}
	if (m->delta || dml_meta_value_count(m, &count) != 0 ||
	    dml_dtype_codec(m->dtype, &codec) != 0 ||
	    !(v = malloc(count ? count * sizeof(float) : 1)) ||
	    dml_codec_decode(&codec, payload, len, (size_t)count, v) != 0)
		agg_reply_error(w->sess, w->request_id, DML_ESHAPE, "pull of table %u: the "
				"owner's reply is not a valid encoding", m->table);
	else
		reply_send(w, &r, v, (size_t)count);
	free(v);
}

/*
 * The owner's values for slot c as floats, or NULL after telling every
 * waiter why not: a reply of another shape, or a bad encoding.
 */
/* A delta reply adds to the version this pull named, which the slot holds. */
static int delta_fits(const struct agg_pull *p, const Dml__Meta *m, size_t n)
{
	const struct agg_cache *c = p->cache;

	return !m->delta || (c->delta && c->valid && p->meta->held_version &&
			     c->version == p->meta->held_version && c->nvalues == n);
}

/*
 * The owner's values for slot c as floats, or NULL after telling every
 * waiter why not: a reply of another shape, a bad encoding, or a delta to a
 * version not held. A delta is added to the slot's values in place, as the
 * owner added it to its copy (the same floats result), and those are
 * returned; else new floats, the caller's.
 */
static float *reply_decode(const struct agg_owner *o, struct agg_pull *p, const Dml__Meta *m,
			   const uint8_t *payload, size_t len, size_t *n)
{
	const struct agg_cache *c = p->cache;
	struct dml_codec codec;
	uint64_t count;
	float *v = NULL;

	if (m->dense && m->value_width == c->width && m->key_begin == c->key_begin &&
	    m->key_end == c->key_end && dml_meta_value_count(m, &count) == 0 &&
	    dml_dtype_codec(m->dtype, &codec) == 0 && delta_fits(p, m, (size_t)count)) {
		*n = (size_t)count;
		if (m->delta && dml_codec_decode_add(&codec, payload, len, *n, c->values) == 0)
			return c->values;
		if (!m->delta && (v = malloc(count ? count * sizeof(float) : 1)) &&
		    dml_codec_decode(&codec, payload, len, *n, v) == 0)
			return v;
	}
	free(v);
	dml_warn("owner %s: a pull reply of table %u is not the range asked for, not a "
		 "valid encoding, or a delta to values not held", o->addr, c->table);
	for (size_t i = 0; i < p->nw; i++)
		agg_reply_error(p->w[i].sess, p->w[i].request_id, DML_ESHAPE, "pull of table "
				"%u: the owner's reply was not the range asked for", c->table);
	return NULL;
}

static void reply_cached(struct agg_owner *o, struct agg_pull *p, const Dml__Meta *m,
			 const uint8_t *payload, size_t len)
{
	struct agg_cache *c = p->cache;
	size_t n = 0;
	float *v = reply_decode(o, p, m, payload, len, &n);

	if (!v) {
		if (c->delta)
			c->valid = 0;   /* the next delta pull starts from the values */
		return;
	}
	for (size_t i = 0; i < p->nw; i++)
		reply_values(&p->w[i], c, v, n, m->min_clock, m->held_us);
	/* A delta slot holds what the owner thinks it holds, whatever the clock. */
	if (!c->delta && c->valid && c->clock > p->meta->clock) {
		free(v);     /* a newer reply is there already */
	} else {
		if (v != c->values) {
			free(c->values);
			c->values = v;
		}
		c->nvalues = n;
		c->valid = 1;
		c->clock = p->meta->clock;
		c->min_clock = m->min_clock;
		c->held_us = m->held_us;
		c->version = m->held_version;
	}
	/* Answered for a worker still there (a pull ahead has no waiter). */
	for (size_t i = 0; i < p->nw; i++)
		if (p->w[i].sess) {
			pull_ahead(o, p->w[i].sess, p->meta, c);
			break;
		}
}

int agg_pull_answer(struct agg_owner *o, const Dml__Meta *m, const uint8_t *payload,
		    size_t len)
{
	struct agg_pull *p, *flight, *deferred;
	struct agg_cache *c;

	for (p = o->pulls; p; p = p->next)
		if (p->meta->request_id == m->request_id)
			break;
	if (!p || m->type == DML__MSG_TYPE__ACK)
		return 0;
	c = p->cache;
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
	/* The slot's next delta pull names the version this one brought. */
	if (c && c->delta) {
		slot_pulls(o, c, &flight, &deferred);
		if (deferred) {
			deferred->deferred = 0;
			pull_send(o, deferred);
		}
	}
	return 1;
}

void agg_pull_resend(struct agg_owner *o)
{
	for (struct agg_pull *p = o->pulls; p; p = p->next)
		pull_send(o, p);
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
