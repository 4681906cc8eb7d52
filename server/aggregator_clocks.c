/*
 * Workers' clocks through the aggregator (Handshake.relays_clocks). A
 * worker that routes its pushes here sends its CLOCK here too, naming the
 * owner, right behind them: waiting for their ACKs to cross the slow link
 * back before the CLOCK crossed it again cost one round trip per clock,
 * and the owner's staleness bound held the other zones' pulls for it.
 *
 * A clock rides on the worker's last push to that owner still queued
 * (Contributor.clock), so the owner applies the push, then moves the clock,
 * in one turn. If that push is already on its way, the clock goes in a
 * CLOCK of the aggregator's own once the push is answered; if the worker
 * has no push queued for the owner, at once. A clock sent on its own is
 * remembered (the latest per worker) and sent again on every new connection
 * to the owner: clocks only move forward, and each one covers pushes that
 * were answered before it went.
 *
 * Must never: let a clock reach an owner before a push the worker sent
 * before it (an owner's pulls would be answered without it), or forget one
 * (the owner's staleness bound would hold everyone for the worker).
 */
#include <stdlib.h>

#include "proto/log.h"
#include "proto/util.h"
#include "server/aggregator_internal.h"

/* The latest clock sent (or to send) on its own for a worker. */
struct agg_clock {
	uint32_t worker;
	uint64_t incarnation;
	uint64_t clock;
	int pending;              /* not sent on the current connection yet */
};

/* Send every pending clock in one CLOCK, if the owner is connected. */
static void clocks_flush(struct agg_owner *o)
{
	Dml__Contributor *cs, **cp;
	Dml__Meta m = DML__META__INIT;
	size_t n = 0;

	if (!o->ready)
		return;
	for (size_t i = 0; i < o->nclocks; i++)
		n += o->clocks[i].pending;
	if (n == 0)
		return;
	cs = dml_xcalloc(n, sizeof(*cs));
	cp = dml_xcalloc(n, sizeof(*cp));
	n = 0;
	for (size_t i = 0; i < o->nclocks; i++) {
		struct agg_clock *k = &o->clocks[i];

		if (!k->pending)
			continue;
		dml__contributor__init(&cs[n]);
		cs[n].worker = k->worker;
		cs[n].incarnation = k->incarnation;
		cs[n].clock = k->clock;
		cp[n] = &cs[n];
		n++;
	}
	m.type = DML__MSG_TYPE__CLOCK;
	m.sender = o->agg->conf->node_id;
	m.n_contributors = n;
	m.contributors = cp;
	if (agg_owner_send(o, &m, NULL, 0) == 0) {
		for (size_t i = 0; i < o->nclocks; i++)
			o->clocks[i].pending = 0;
		o->agg->st.clocks_alone += n;
	}
	free(cp);
	free(cs);
}

/* Remember clock for (worker, incarnation), to go on its own. */
static void clock_note(struct agg_owner *o, uint32_t worker, uint64_t incarnation,
		       uint64_t clock)
{
	struct agg_clock *k = NULL;

	for (size_t i = 0; i < o->nclocks && !k; i++)
		if (o->clocks[i].worker == worker)
			k = &o->clocks[i];
	if (!k) {
		o->clocks = dml_xrealloc(o->clocks, (o->nclocks + 1) * sizeof(*o->clocks));
		k = &o->clocks[o->nclocks++];
		*k = (struct agg_clock){ .worker = worker };
	}
	if (k->incarnation != incarnation) {
		k->incarnation = incarnation;
		k->clock = 0;
	}
	if (clock > k->clock) {
		k->clock = clock;
		k->pending = 1;
	}
}

void agg_clock_request(struct agg_owner *o, struct agg_session *s, uint64_t clock)
{
	struct agg_entry *in = NULL;
	struct agg_contrib *last = NULL;

	s->agg->st.clocks_in++;
	/* The worker's last push to o still here (rule 2: the queue's order). */
	for (struct agg_entry *e = o->head; e; e = e->next)
		for (size_t i = 0; i < e->nc; i++)
			if (e->c[i].worker == s->worker && e->c[i].incarnation == s->incarnation) {
				in = e;
				last = &e->c[i];
			}
	if (!last) {
		clock_note(o, s->worker, s->incarnation, clock);
		clocks_flush(o);
		return;
	}
	if (clock > last->clock)
		last->clock = clock;
	/* On its way without it: it goes on its own once that is answered. */
	if (in->upstream_rid)
		last->clock_unsent = 1;
}

void agg_clocks_answered(struct agg_owner *o, const struct agg_entry *e, int applied)
{
	for (size_t i = 0; i < e->nc; i++) {
		const struct agg_contrib *c = &e->c[i];

		if (c->clock && (!applied || c->clock_unsent))
			clock_note(o, c->worker, c->incarnation, c->clock);
	}
	clocks_flush(o);
}

void agg_clocks_resend(struct agg_owner *o)
{
	for (size_t i = 0; i < o->nclocks; i++)
		o->clocks[i].pending = 1;
	clocks_flush(o);
}

void agg_clocks_free(struct agg_owner *o)
{
	free(o->clocks);
	o->clocks = NULL;
	o->nclocks = 0;
}
