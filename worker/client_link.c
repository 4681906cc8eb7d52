/*
 * libdml's server links, the aggregator's too (client_internal.h; what is
 * the aggregator's own is in client_aggregator.c): the connection callbacks
 * (handshake, replies, close), reconnecting with backoff and resending what
 * was in flight, closing links that left the shard map when idle, and the
 * housekeeping timer that expires requests and drives all of it.
 *
 * Must never: spin while waiting (the event loop sleeps in epoll until a
 * reply, a timer or a reconnect is due), or write a pull's output after the
 * request failed or was waited.
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
#include "proto/frame.h"
#include "worker/dml.h"
#include "proto/log.h"
#include "shard/shardmap.h"
#include "proto/util.h"

/* ---- connection events --------------------------------------------------- */


void dml_client_link_fail_all(struct link *l, int rc)
{
	while (l->q.head)
		dml_client_part_finish(l->d, l->q.head, rc);
}

static int on_welcome(struct dml_conn *c, const Dml__Handshake *w, void *arg)
{
	struct link *l = arg;
	struct dml *d = l->d;

	/* Both zones named and different: the cross-zone codecs apply. */
	l->cross_zone = d->conf.zone[0] && w->zone && w->zone[0] &&
			strcmp(d->conf.zone, w->zone) != 0;
	l->codecs = dml_welcome_codecs(w);
	if (l->aggregator)
		return dml_client_agg_welcome(l, w);
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
	l->fatal = 0;      /* only the aggregator's link retries after a refusal */
	l->backoff_ms = 0;
	l->lost_since_ns = 0;
	/*
	 * Where our clock is, before anything else: HELLO said where it was at
	 * connect time, and a clock may have passed during the handshake.
	 */
	dml_client_send_clock(l);
	/* Resend everything unanswered, in order. */
	for (struct part *p = l->q.head; p; ) {
		struct part *next = p->next;
		int rc = dml_client_part_send(l->d, p);

		if (rc)
			dml_client_part_finish(l->d, p, rc);
		p = next;
	}
	/* Through the aggregator: the clock goes behind those pushes again. */
	if (l->aggregator)
		dml_client_agg_clock_resend(l->d);
}

static void *payload_dest(struct dml_conn *c, const Dml__Meta *m, void *arg)
{
	struct link *l = arg;
	struct part *p;

	if (m->type != DML__MSG_TYPE__PULL_REPLY)
		return NULL;
	p = dml_client_find_part(l->d, m->request_id);
	if (!p || p->link != l || p->kind != PART_PULL || p->pos ||
	    p->dtype != DML__DTYPE__F32)
		return NULL;
	if (m->payload_bytes != dml_client_part_values(p) * sizeof(float))
		return NULL;
	return p->out;
}

static int on_frame(struct dml_conn *c, const Dml__Meta *m, const uint8_t *payload,
		    size_t len, void *arg)
{
	struct link *l = arg;
	struct dml *d = l->d;
	struct part *p = dml_client_find_part(d, m->request_id);

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
		dml_client_part_finish(d, p, 0);
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
			dml_client_part_bounce(d, p);
			return 0;
		}
		dml_client_part_finish(d, p, code);
		return 0;
	}
	case DML__MSG_TYPE__PULL_REPLY: {
		size_t n = dml_client_part_values(p);

		if (p->kind != PART_PULL)
			return DML_EFRAME_COUNT;
		if (p->dtype != DML__DTYPE__F32 || m->dtype != DML__DTYPE__F32) {
			int rc = dml_client_reply_decode(p, m, payload, len);

			if (rc)
				return rc;
		} else if (len != n * sizeof(float)) {
			return DML_EFRAME_COUNT;
		} else if (p->pos) {
			dml_client_pull_scatter(p, payload);
		} else if (payload != (const uint8_t *)p->out) {
			memcpy(p->out, payload, len);
		}
		dml_client_count_values(d, l, n, len);
		if (m->min_clock < p->req->min_clock)
			p->req->min_clock = m->min_clock;
		/* parts travel in parallel: the request waited for the longest */
		if (m->held_us > UINT64_MAX / 1000)
			p->req->held_ns = UINT64_MAX;
		else if (m->held_us * 1000 > p->req->held_ns)
			p->req->held_ns = m->held_us * 1000;
		dml_client_part_finish(d, p, 0);
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
	 * keeps losing its connection is failed rather than sent forever (on the
	 * aggregator's link it goes to its server: dml_client_agg_housekeeping). */
	for (struct part *p = l->aggregator ? NULL : l->q.head; p; ) {
		struct part *next = p->next;

		if (p->kind == PART_BYE)
			dml_client_part_finish(l->d, p, 0);
		else if (p->sends >= MAX_SENDS)
			dml_client_part_finish(l->d, p, err ? err : DML_ECONN);
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

void dml_client_link_connect(struct link *l)
{
	struct dml *d = l->d;

	/* HELLO carries where we are: a server new to us counts us from there. */
	d->cc.clock = dml_client_clock_straight(l);
	if (dml_conn_connect(d->base, l->host, l->port, &d->cc, &client_ops, l, &l->conn)) {
		l->conn = NULL;
		l->retry_at_ns = dml_now_ns() + BACKOFF_MAX_MS * 1000000ull;
	}
}

struct link *dml_client_link_add(struct dml *d, const char *host, uint16_t port)
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

void dml_client_link_free(struct link *l)
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

		if (!l->retired || l->q.head || l->via_aggregator) {
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
		dml_client_link_free(l);
		d->links[i] = d->links[--d->nlinks];
	}
}

static void expire_link(struct dml *d, struct link *l, uint64_t now)
{
	for (struct part *p = l->q.head; p; ) {
		struct part *next = p->next;

		if (p->req->deadline_ns && now > p->req->deadline_ns)
			dml_client_part_finish(d, p, p->bounced_ns ? DML_ERANGE : DML_ETIMEDOUT);
		p = next;
	}
}

/* Fail what waited too long: request_timeout_ms, or a part refused for too long. */
static void expire_parts(struct dml *d, uint64_t now)
{
	for (uint32_t i = 0; i < d->nlinks && d->conf.request_timeout_ms; i++)
		expire_link(d, d->links[i], now);
	if (d->agg && d->conf.request_timeout_ms)
		expire_link(d, d->agg, now);
	for (struct part *p = d->parked.head; p; ) {
		struct part *next = p->next;

		if (p->req->deadline_ns ? now > p->req->deadline_ns
		    : now - p->bounced_ns > BOUNCE_LIMIT_MS * 1000000ull) {
			dml_warn("table %u: no server takes these keys (shard map v%llu): %s",
				 p->table, (unsigned long long)d->map.version, d->detail);
			dml_client_part_finish(d, p, DML_ERANGE);
		}
		p = next;
	}
}

/* Reconnects that are due, links given up on, requests past their deadline. */
void dml_client_housekeeping(struct dml *d)
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
			dml_client_link_fail_all(l, l->fatal ? l->fatal : DML_ECONN);
			continue;
		}
		if (now >= l->retry_at_ns)
			dml_client_link_connect(l);
	}
	if (d->agg)
		dml_client_agg_housekeeping(d, now);
	if (now >= d->expire_at_ns) {
		d->expire_at_ns = now + EXPIRE_EVERY_NS;
		expire_parts(d, now);
	}
}

static int parts_in_flight(const struct dml *d)
{
	if (d->parked.head || (d->agg && d->agg->q.head))
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
void dml_client_run_until(struct dml *d, int (*done)(struct dml *, void *), void *arg,
			  uint64_t deadline_ns)
{
	uint64_t spin_until = d->conf.spin_us ? dml_now_ns() + d->conf.spin_us * 1000ull : 0;

	for (;;) {
		dml_client_housekeeping(d);
		if (done(d, arg) || (deadline_ns && dml_now_ns() >= deadline_ns) ||
		    atomic_load(&d->interrupted))
			return;
		if (spin_until && dml_now_ns() < spin_until)
			event_base_loop(d->base, EVLOOP_NONBLOCK);
		else
			event_base_loop(d->base, EVLOOP_ONCE);
	}
}

int dml_client_request_done(struct dml *d, void *arg)
{
	return ((struct request *)arg)->parts_left == 0;
}

int dml_client_nothing_in_flight(struct dml *d, void *arg)
{
	return !parts_in_flight(d);
}

void dml_client_tick_cb(evutil_socket_t fd, short what, void *arg)
{
	dml_client_housekeeping(arg);
}
