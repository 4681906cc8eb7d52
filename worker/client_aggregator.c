/*
 * libdml's zone aggregator (client_internal.h): the link to this zone's
 * dml-aggregator, which path each part takes, the fallback to the servers
 * when the aggregator is lost, and the CLOCKs held back for it.
 *
 * The aggregator's link is not a server of the map: it is never in
 * d->route or d->links, its WELCOME brings no tables, and it hears no
 * HELLO of its own, CLOCK or BYE (those go to the owners straight). A PUSH
 * or PULL for owner link L goes through it, naming L in Meta.owner, with
 * L's sequence number, when:
 *   - rule 1: L's unanswered parts went through it (then it must too,
 *     even while the aggregator reconnects), or none of L's parts is in
 *     flight on either path and both the aggregator and L are ready;
 *   - otherwise it goes to L.
 * Fallback: the aggregator's link down for aggregator_timeout_ms with
 * parts on it (or refused for good, or a part resent MAX_SENDS times)
 * moves each of its parts, in the order sent, to its owner's link, with
 * wire id and seq unchanged. The aggregator is dialled again with backoff
 * and used again once ready.
 *
 * Rule 4: a CLOCK reaches an owner only after every push issued through
 * the aggregator before it. An aggregator whose WELCOME set relays_clocks
 * carries it: while it is ready, the CLOCK for an owner with parts on its
 * link goes there behind them (it rides on the last of them, or follows
 * their answers), and straight to an owner with none. Otherwise the CLOCK
 * waits until those pushes are answered; pushes issued after it do not
 * hold it. d->holds counts such pushes per issue clock; the answer that
 * empties the oldest count sends the CLOCK. When the aggregator's link
 * comes back, or is given up, the clock goes again behind the parts
 * resent (clocks only move forward: an owner takes a repeat as nothing).
 *
 * Must never: let two of one owner's pushes travel by different paths at
 * once (the owner's high-water mark would take the later one first and
 * drop the earlier one as a resend), or tell an owner a clock before the
 * aggregator pushes of the clocks before it are answered.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "worker/client_internal.h"
#include "proto/conn.h"
#include "proto/log.h"
#include "proto/util.h"

int dml_client_agg_setup(struct dml *d)
{
	char host[256];
	uint16_t port;
	struct link *l;

	/* The aggregator serves workers only: a control client reads straight. */
	if (!d->conf.aggregator[0] || d->conf.role != 0)
		return 0;
	if (dml_parse_hostport(d->conf.aggregator, host, sizeof(host), &port, 0) != 0) {
		snprintf(d->detail, sizeof(d->detail), "aggregator: '%.200s' is not host:port",
			 d->conf.aggregator);
		return DML_EINVAL;
	}
	l = dml_xcalloc(1, sizeof(*l));
	l->d = d;
	l->aggregator = 1;
	snprintf(l->host, sizeof(l->host), "%s", host);
	l->port = port;
	d->agg = l;
	dml_client_link_connect(l);
	return 0;
}

void dml_client_agg_free(struct dml *d)
{
	if (d->agg)
		dml_client_link_free(d->agg);
	d->agg = NULL;
	free(d->holds);
	d->holds = NULL;
	d->nholds = d->holds_cap = 0;
}

struct link *dml_client_path(struct dml *d, struct link *l, enum part_kind kind)
{
	struct link *a = d->agg;

	if (!a || kind == PART_BYE)
		return l;
	if (l->via_aggregator)
		return a;
	if (l->direct)
		return l;
	return a->ready && l->ready ? a : l;
}

/* ---- rule 4: CLOCKs held for aggregator pushes ---------------------------- */

static void clock_hold(struct dml *d, struct part *p)
{
	struct clock_hold *h = d->nholds ? &d->holds[d->nholds - 1] : NULL;

	if (!h || h->clock != d->clock) {
		if (d->nholds == d->holds_cap) {
			d->holds_cap = d->holds_cap ? d->holds_cap * 2 : 4;
			d->holds = dml_xrealloc(d->holds, d->holds_cap * sizeof(*d->holds));
		}
		h = &d->holds[d->nholds++];
		h->clock = d->clock;
		h->pushes = 0;
	}
	h->pushes++;
	p->epoch = d->clock;
	p->clock_held = 1;
}

static void clock_release(struct dml *d, struct part *p)
{
	uint32_t i = 0;

	p->clock_held = 0;
	while (i < d->nholds && d->holds[i].clock != p->epoch)
		i++;
	if (i == d->nholds)
		return;
	d->holds[i].pushes--;
	for (i = 0; i < d->nholds && d->holds[i].pushes == 0; i++)
		;
	if (i == 0)
		return;
	d->nholds -= i;
	memmove(d->holds, d->holds + i, d->nholds * sizeof(*d->holds));
	/* Not while closing: the servers heard BYE already. */
	if (d->tick && event_pending(d->tick, EV_TIMEOUT, NULL))
		(void)dml_client_clock_announce(d);
}

uint64_t dml_client_clock_straight(const struct link *l)
{
	const struct dml *d = l->d;

	if (l->via_aggregator && d->nholds && d->holds[0].clock < d->clock_sent)
		return d->holds[0].clock;
	return d->clock_sent;
}

/* The aggregator can carry CLOCKs behind the pushes on its link now. */
static int agg_relays(const struct dml *d)
{
	return d->agg && d->agg->ready && d->agg->relays_clocks;
}

/* d->clock_sent to every server of the map: behind its parts through the
 * aggregator where it has some there and relay is set, else straight. */
static int clock_send_all(struct dml *d, int relay)
{
	int rc = 0;

	/* The servers of the current map; one that joins later hears it on ready. */
	for (uint32_t i = 0; i < d->nroute; i++) {
		struct link *l = d->route[i];

		if (l->failed)
			rc = DML_ECONN;
		else if (relay && l->via_aggregator)
			dml_client_send_clock_via(d, l);
		else if (l->ready)
			dml_client_send_clock(l);
	}
	return rc;
}

int dml_client_clock_announce(struct dml *d)
{
	int relay = agg_relays(d);
	/* Pushes issued at clock c hold back only the clocks after c. */
	uint64_t c = !relay && d->nholds && d->holds[0].clock < d->clock ? d->holds[0].clock
									   : d->clock;

	if (c <= d->clock_sent) {
		for (uint32_t i = 0; i < d->nroute; i++)
			if (d->route[i]->failed)
				return DML_ECONN;
		return 0;
	}
	d->clock_sent = c;
	return clock_send_all(d, relay);
}

void dml_client_agg_clock_resend(struct dml *d)
{
	if (!agg_relays(d))
		return;
	if (d->clock > d->clock_sent)
		d->clock_sent = d->clock;
	(void)clock_send_all(d, 1);
}

void dml_client_path_enter(struct dml *d, struct part *p)
{
	if (!p->owner) {
		p->link->direct++;
		return;
	}
	p->owner->via_aggregator++;
	if (p->kind == PART_PUSH)
		clock_hold(d, p);
}

void dml_client_path_leave(struct dml *d, struct part *p)
{
	if (p->owner)
		p->owner->via_aggregator--;
	else
		p->link->direct--;
	p->owner = NULL;
	if (p->clock_held)
		clock_release(d, p);
}

/* ---- the link ------------------------------------------------------------- */

int dml_client_agg_welcome(struct link *l, const Dml__Handshake *w)
{
	struct dml *d = l->d;

	/* A server there would apply our pushes as its own: never use it. */
	if (w->role != DML__ROLE__AGGREGATOR) {
		if (l->fatal != DML_EROLE)
			dml_warn("aggregator %s:%u: its handshake names role %d, not an "
				 "aggregator: requests go straight to the servers", l->host,
				 l->port, (int)w->role);
		l->fatal = DML_EROLE;
		return DML_EROLE;
	}
	l->relays_clocks = w->relays_clocks;
	if (w->zone && w->zone[0] && d->conf.zone[0] && strcmp(w->zone, d->conf.zone) != 0)
		dml_warn("aggregator %s:%u is in zone %s, this worker in %s", l->host, l->port,
			 w->zone, d->conf.zone);
	return 0;
}

/*
 * Give the aggregator up for the parts on its link: each goes to its owner's
 * link in the order sent, before anything newer (rule 1 kept every other
 * part of that owner off the direct path), with its wire id and seq. One
 * coded for the aggregator's link class goes back to floats and is coded
 * anew if its owner's link takes another codec.
 */
static void fall_back(struct dml *d, const char *why)
{
	struct link *a = d->agg;
	unsigned moved = 0;

	while (a->q.head) {
		struct part *p = a->q.head;
		struct link *l = p->owner;
		int rc = 0;

		l->via_aggregator--;
		l->direct++;
		p->owner = NULL;
		dml_client_part_relink(p, l);
		moved++;
		if (p->sends && !dml_client_part_codec_fits(d, p, l)) {
			rc = dml_client_part_uncode(p);
			p->sends = 0;
		}
		if (rc == 0 && l->failed)
			rc = DML_ECONN;
		if (rc == 0 && l->ready)
			rc = dml_client_part_send(d, p);
		if (rc)
			dml_client_part_finish(d, p, rc);
	}
	dml_warn("aggregator %s:%u: %s: %u requests in flight go straight to their servers",
		 a->host, a->port, why, moved);
	/* A clock it was to carry behind them follows them there. */
	(void)clock_send_all(d, 0);
}

void dml_client_agg_housekeeping(struct dml *d, uint64_t now)
{
	struct link *a = d->agg;

	if (a->ready)
		return;
	if (a->q.head) {
		if (a->fatal)
			fall_back(d, dml_strerror(a->fatal));
		else if (a->q.head->sends >= MAX_SENDS)
			fall_back(d, "a request lost its connection too often");
		else if (a->lost_since_ns &&
			 now - a->lost_since_ns >= d->conf.aggregator_timeout_ms * 1000000ull)
			fall_back(d, "unreachable");
	}
	if (!a->conn && now >= a->retry_at_ns)
		dml_client_link_connect(a);
}
