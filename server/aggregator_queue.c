/*
 * The per-owner FIFO of push entries (ordering rules 2 and 3 of the zone
 * aggregator design) and what the owner's answers do to it.
 *
 * An entry is one (job, table, dense range, width, clock) and the pushes
 * that joined it; a sparse push is an entry of its own. A worker's push
 * joins an open entry only if that entry lies after the one holding its
 * previous push to this owner, so every worker's pushes reach the owner in
 * the order the worker sent them. An entry closes once every connected
 * worker joined it or window_ms after it opened, and goes only when it is
 * the head of the queue and nothing else is in flight to that owner: one
 * forwarded push at a time, so that a retry or a split never lets a later
 * push of a worker overtake an earlier one.
 *
 * Must never: acknowledge a contribution before the owner acknowledged the
 * forwarded push holding it, reorder one worker's pushes to one owner, or
 * drop a contribution the owner may hold without an answer from the owner.
 */
#include <stdlib.h>
#include <string.h>

#include "proto/dml_error.h"
#include "proto/frame.h"
#include "proto/log.h"
#include "proto/util.h"
#include "server/aggregator_internal.h"

#define RETRY_FIRST_MS 20
#define RETRY_MAX_MS 1000

static size_t contrib_bytes(const struct agg_entry *e)
{
	return e->nvalues * sizeof(float);
}

static void entry_free(struct dml_agg *a, struct agg_entry *e)
{
	for (size_t i = 0; i < e->nc; i++) {
		free(e->c[i].values);
		a->pending_bytes -= contrib_bytes(e);
	}
	if (e->window)
		event_free(e->window);
	agg_entry_payload_free(e);
	free(e->c);
	free(e->keys);
	free(e);
}

static void entry_close(struct agg_entry *e)
{
	if (e->closed)
		return;
	e->closed = 1;
	if (e->window) {
		event_free(e->window);
		e->window = NULL;
	}
}

static void window_cb(evutil_socket_t fd, short what, void *arg)
{
	struct agg_entry *e = arg;

	(void)fd;
	(void)what;
	entry_close(e);
	agg_queue_pump(e->owner);
}

static int entry_holds(const struct agg_entry *e, const struct agg_session *s)
{
	for (size_t i = 0; i < e->nc; i++)
		if (e->c[i].sess == s)
			return 1;
	return 0;
}

static int entry_has_worker(const struct agg_entry *e, uint32_t worker)
{
	for (size_t i = 0; i < e->nc; i++)
		if (e->c[i].worker == worker)
			return 1;
	return 0;
}

/* The entry holding the worker's latest push here, or NULL. */
static struct agg_entry *worker_last(struct agg_owner *o, uint32_t worker)
{
	struct agg_entry *last = NULL;

	for (struct agg_entry *e = o->head; e; e = e->next)
		if (entry_has_worker(e, worker))
			last = e;
	return last;
}

/* x, lying before last, may move to just after it: none of x's workers has
 * a push in between. */
static int entry_movable(const struct agg_entry *x, const struct agg_entry *last)
{
	for (const struct agg_entry *y = x->next; y; y = y->next) {
		for (size_t i = 0; i < x->nc; i++)
			if (entry_has_worker(y, x->c[i].worker))
				return 0;
		if (y == last)
			return 1;
	}
	return 0;
}

/*
 * s has a push in an entry after e, and e cannot move after it: by rule 2
 * s can never join e.
 */
static int cannot_join(const struct agg_entry *e, const struct agg_session *s)
{
	const struct agg_entry *last = NULL;

	for (const struct agg_entry *x = e->next; x; x = x->next)
		if (entry_holds(x, s))
			last = x;
	return last && !entry_movable(e, last);
}

/*
 * Rule 3: every worker connected now contributed to e, or cannot any more:
 * it has a push queued after e that e cannot move behind (rule 2 keeps it
 * out of e), or, for a
 * clocked job's entry, it pushed a later clock (its pushes come in clock
 * order). Waiting for one that cannot come would hold the queue, and every
 * worker behind it, for the whole window, clock after clock.
 */
static int entry_complete(const struct dml_agg *a, const struct agg_entry *e)
{
	size_t ready = 0, done = 0;

	for (const struct dml_peer *x = a->peers.head; x; x = x->next) {
		const struct agg_session *s = (const struct agg_session *)x;

		if (!s->ready)
			continue;
		ready++;
		done += entry_holds(e, s) || cannot_join(e, s) ||
			(e->clocked && s->pushed && s->max_clock > e->clock);
	}
	return ready > 0 && done == ready;
}

/* Meta.forward_codec, which the frame check parsed; "" reads as floats. */
static struct dml_codec forward_codec(const Dml__Meta *m)
{
	struct dml_codec c = { .kind = DML_CODEC_NONE };

	if (m->forward_codec && m->forward_codec[0] &&
	    dml_codec_parse(m->forward_codec, &c, NULL, 0) != 0)
		c.kind = DML_CODEC_NONE;
	return c;
}

static struct agg_entry *entry_new(struct agg_owner *o, const Dml__Meta *m,
				   const uint64_t *keys, size_t nvalues)
{
	struct agg_entry *e = dml_xcalloc(1, sizeof(*e));

	e->owner = o;
	e->pos = o->next_pos++;
	e->job = m->job;
	e->table = m->table;
	e->width = m->value_width;
	e->dense = m->dense;
	e->key_begin = m->key_begin;
	e->key_end = m->key_end;
	e->num_keys = m->dense ? 0 : m->num_keys;
	e->clock = m->clock;
	e->nvalues = nvalues;
	e->codec = forward_codec(m);
	e->clocked = m->pace == DML_PACE_CLOCKED;
	if (keys) {
		e->keys = dml_xmalloc((size_t)m->num_keys * sizeof(uint64_t));
		memcpy(e->keys, keys, (size_t)m->num_keys * sizeof(uint64_t));
	}
	return e;
}

static void entry_append(struct agg_owner *o, struct agg_entry *e)
{
	if (o->tail)
		o->tail->next = e;
	else
		o->head = e;
	o->tail = e;
}

static void entry_add(struct dml_agg *a, struct agg_entry *e, const struct agg_contrib *c)
{
	if (e->nc == e->cap) {
		e->cap = e->cap ? 2 * e->cap : 4;
		e->c = dml_xrealloc(e->c, e->cap * sizeof(*e->c));
	}
	e->c[e->nc++] = *c;
	a->pending_bytes += contrib_bytes(e);
}

/* Position of the entry holding the worker's latest push here, or 0. */
/*
 * Move open entry x, which lies before `last`, to just after it, if no
 * worker in x has a push in between (x's workers keep their order, the
 * others are not in x): a worker a push behind its zone peer may then
 * join the peer's entry instead of splitting off an entry of its own,
 * which would leave the two out of step for good. 1 if moved.
 */
static int entry_move_after(struct agg_owner *o, struct agg_entry *x, struct agg_entry *last)
{
	struct agg_entry **pp, *y;
	uint64_t pos = o->head ? o->head->pos : 0;

	if (!entry_movable(x, last))
		return 0;
	for (pp = &o->head; *pp != x; pp = &(*pp)->next)
		;
	*pp = x->next;
	x->next = last->next;
	last->next = x;
	if (o->tail == last)
		o->tail = x;
	/* Positions rise along the queue again. */
	for (y = o->head; y; y = y->next)
		y->pos = pos++;
	o->next_pos = pos;
	return 1;
}

static int entry_matches(const struct agg_entry *e, const Dml__Meta *m,
			 const struct dml_codec *codec)
{
	return !e->closed && e->dense && e->upstream_rid == 0 && e->job == m->job &&
	       e->table == m->table && e->width == m->value_width &&
	       e->key_begin == m->key_begin && e->key_end == m->key_end &&
	       e->clock == m->clock && e->codec.kind == codec->kind &&
	       e->codec.topk_fraction == codec->topk_fraction;
}

int agg_queue_push(struct agg_owner *o, struct agg_session *s, const Dml__Meta *m,
		   const uint64_t *keys, float *values, size_t nvalues)
{
	struct dml_agg *a = o->agg;
	struct agg_contrib c = {
		.worker = s->worker, .incarnation = s->incarnation, .seq = m->seq,
		.weight = m->weight, .sess = s, .request_id = m->request_id, .values = values,
	};
	struct agg_entry *e = NULL;
	/* A clocked job's workers all push each clock: wait for them. */
	uint32_t window = m->pace == DML_PACE_CLOCKED ? a->conf->clock_window_ms
						      : a->conf->window_ms;

	if (m->weight != 0.0f && !dml_push_weight_ok(m->weight)) {
		free(values);
		return DML_EINVAL;
	}
	if (m->dense) {
		struct agg_entry *last = worker_last(o, s->worker);
		struct dml_codec codec = forward_codec(m);
		int behind = last != NULL;   /* x lies before (or is) last */

		for (struct agg_entry *x = o->head; x; x = x->next) {
			if (entry_matches(x, m, &codec) &&
			    (!behind || (x != last && entry_move_after(o, x, last)))) {
				e = x;
				break;
			}
			if (x == last)
				behind = 0;
		}
	}
	if (!e) {
		e = entry_new(o, m, keys, nvalues);
		entry_append(o, e);
		/* Sparse pushes are never combined: closed from the start. */
		if (m->dense && window > 0) {
			e->window = evtimer_new(a->base, window_cb, e);
			agg_timer_arm(e->window, window);
		} else {
			e->closed = 1;
		}
	}
	entry_add(a, e, &c);
	if (!s->pushed || m->clock > s->max_clock) {
		s->pushed = 1;
		s->max_clock = m->clock;
	}
	/* Entries before this one it did not join, and entries of earlier
	 * clocks, may be complete now. */
	agg_queue_sessions_changed(a);
	return 0;
}

int agg_queue_resend(struct agg_owner *o, struct agg_session *s, const Dml__Meta *m)
{
	for (struct agg_entry *e = o->head; e; e = e->next)
		for (size_t i = 0; i < e->nc; i++) {
			struct agg_contrib *c = &e->c[i];

			if (c->worker == s->worker && c->incarnation == s->incarnation &&
			    c->seq == m->seq) {
				c->sess = s;
				c->request_id = m->request_id;
				return 1;
			}
		}
	return 0;
}

/* The forwarded push of e: the contributions' sum (aggregator_codec.c),
 * their weights' sum, every one of them named. */
static int entry_send(struct agg_owner *o, struct agg_entry *e)
{
	struct dml_agg *a = o->agg;
	Dml__Contributor *cs = dml_xcalloc(e->nc, sizeof(*cs));
	Dml__Contributor **cp = dml_xcalloc(e->nc, sizeof(*cp));
	Dml__Meta m = DML__META__INIT;
	float weight = 0;
	int rc = agg_entry_encode(o, e);

	if (rc)
		goto out;
	for (size_t i = 0; i < e->nc; i++) {
		dml__contributor__init(&cs[i]);
		cs[i].worker = e->c[i].worker;
		cs[i].incarnation = e->c[i].incarnation;
		cs[i].seq = e->c[i].seq;
		cs[i].clock = e->c[i].clock;
		cp[i] = &cs[i];
		weight += e->c[i].weight != 0.0f ? e->c[i].weight : 1.0f;
	}
	m.type = DML__MSG_TYPE__PUSH;
	m.request_id = agg_owner_rid(o);
	m.job = e->job;
	m.table = e->table;
	m.clock = e->clock;
	m.dtype = e->dtype;
	m.value_width = e->width;
	m.dense = e->dense;
	m.key_begin = e->key_begin;
	m.key_end = e->key_end;
	m.num_keys = e->num_keys;
	m.weight = weight;
	m.n_contributors = e->nc;
	m.contributors = cp;
	rc = agg_owner_send(o, &m, e->payload, e->payload_len);
	if (rc == 0) {
		for (size_t i = 0; i < e->nc; i++)
			e->c[i].clock_unsent = 0;
		e->upstream_rid = m.request_id;
		a->st.pushes_forwarded++;
		dml_histogram_observe(a->fanin, (double)e->nc);
	}
out:
	free(cp);
	free(cs);
	return rc;
}

/*
 * An open head waits for the workers that have not joined it, but one of
 * them whose earlier push is queued behind it may not push again until
 * that push is answered (an app keeps one push per table in flight: the
 * mlp app does), so the two would wait for each other until the window
 * closed the head, clock after clock. The closed entries behind it that
 * it may move behind (no push of its workers in between: rule 2 holds)
 * go first instead.
 */
static void head_let_pass(struct agg_owner *o)
{
	struct agg_entry *h;

	while ((h = o->head) && !h->closed && !h->upstream_rid) {
		struct agg_entry *y = h->next;

		while (y && !y->closed)
			y = y->next;
		if (!y || !entry_move_after(o, h, y))
			return;
		o->agg->st.let_pass++;
	}
}

void agg_queue_pump(struct agg_owner *o)
{
	struct agg_entry *h;

	head_let_pass(o);
	h = o->head;
	if (!o->ready || o->retry_wait || !h || h->upstream_rid || !h->closed)
		return;
	if (entry_send(o, h) != 0)
		dml_warn("owner %s: could not forward a push of table %u; tried again on "
			 "the next answer or connection", o->addr, h->table);
}

/* Take the head off the queue. */
static struct agg_entry *queue_pop(struct agg_owner *o)
{
	struct agg_entry *h = o->head;

	o->head = h->next;
	if (!o->head)
		o->tail = NULL;
	h->next = NULL;
	return h;
}

/*
 * DML_EPARTIAL or DML_ESTATE on a combined push: the owner holds some of
 * its contributions, or some came from a process that is gone. Each goes
 * again on its own, in the same place and order, and meets its own answer.
 */
static void head_split(struct agg_owner *o)
{
	struct agg_entry *h = queue_pop(o), *first = NULL, *last = NULL;

	agg_entry_unencode(h);
	for (size_t i = 0; i < h->nc; i++) {
		struct agg_entry *e = dml_xcalloc(1, sizeof(*e));

		*e = *h;
		e->next = NULL;
		e->window = NULL;
		e->upstream_rid = 0;
		e->closed = 1;
		e->keys = NULL;
		e->nc = e->cap = 0;
		e->c = NULL;
		entry_add(o->agg, e, &h->c[i]);
		h->c[i].values = NULL;
		if (last)
			last->next = e;
		else
			first = e;
		last = e;
	}
	for (size_t i = 0; i < h->nc; i++)
		o->agg->pending_bytes -= contrib_bytes(h);
	h->nc = 0;
	last->next = o->head;
	if (!o->head)
		o->tail = last;
	o->head = first;
	o->agg->st.splits++;
	entry_free(o->agg, h);
}

static void retry_cb(evutil_socket_t fd, short what, void *arg)
{
	struct agg_owner *o = arg;

	(void)fd;
	(void)what;
	o->retry_wait = 0;
	agg_queue_pump(o);
}

static void head_retry(struct agg_owner *o)
{
	o->head->upstream_rid = 0;
	if (!o->retry)
		o->retry = evtimer_new(o->agg->base, retry_cb, o);
	o->retry_wait = 1;
	agg_backoff_arm(o->retry, &o->retry_ms, RETRY_FIRST_MS, RETRY_MAX_MS);
	o->agg->st.retries++;
}

static void head_done(struct agg_owner *o, const Dml__Meta *m)
{
	struct agg_entry *h = queue_pop(o);

	/* Refused: the workers' values go again elsewhere, not the residual's. */
	if (m->type != DML__MSG_TYPE__ACK)
		agg_entry_unencode(h);
	for (size_t i = 0; i < h->nc; i++) {
		if (m->type == DML__MSG_TYPE__ACK)
			agg_reply_ack(h->c[i].sess, h->c[i].request_id);
		else
			agg_relay_error(h->c[i].sess, h->c[i].request_id, m);
	}
	if (m->type != DML__MSG_TYPE__ACK)
		o->agg->st.relayed_errors++;
	agg_clocks_answered(o, h, m->type == DML__MSG_TYPE__ACK);
	entry_free(o->agg, h);
	agg_release_held(o->agg);
}

void agg_queue_answer(struct agg_owner *o, const Dml__Meta *m)
{
	struct agg_entry *h = o->head;
	int code;

	if (!h || h->upstream_rid != m->request_id)
		return;     /* an answer to a push sent on an earlier connection */
	code = m->type == DML__MSG_TYPE__ERROR ? m->error->code : 0;
	if (code == DML_EAGAIN) {
		head_retry(o);
		return;
	}
	o->retry_ms = 0;
	if ((code == DML_EPARTIAL || code == DML_ESTATE) && h->nc > 1)
		head_split(o);
	else
		head_done(o, m);
	agg_queue_pump(o);
}

void agg_queue_unsend(struct agg_owner *o)
{
	if (o->head)
		o->head->upstream_rid = 0;
}

void agg_queue_sessions_changed(struct dml_agg *a)
{
	for (size_t i = 0; i < a->nowners; i++) {
		struct agg_owner *o = &a->owners[i];

		for (struct agg_entry *e = o->head; e; e = e->next)
			if (!e->closed && entry_complete(a, e))
				entry_close(e);
		agg_queue_pump(o);
	}
}

void agg_queue_forget(struct agg_owner *o, const struct agg_session *s)
{
	for (struct agg_entry *e = o->head; e; e = e->next)
		for (size_t i = 0; i < e->nc; i++)
			if (e->c[i].sess == s)
				e->c[i].sess = NULL;
}

void agg_queue_free(struct agg_owner *o)
{
	while (o->head)
		entry_free(o->agg, queue_pop(o));
	if (o->retry)
		event_free(o->retry);
	o->retry = NULL;
}
