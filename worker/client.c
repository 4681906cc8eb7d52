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
 * This file has the public calls (dml.h) but dml_connect and the options:
 * requests, clocks, figures and the log sink. Parts and routing are in
 * client_parts.c, server links in client_link.c, the zone aggregator's
 * link and the CLOCKs held for it in client_aggregator.c, connect and close
 * in client_connect.c, options in client_opts.c, scheduler maps in
 * client_map.c.
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

#include "proto/auth.h"
#include "worker/client_internal.h"
#include "proto/conn.h"
#include "worker/dml.h"
#include "proto/log.h"
#include "shard/shardmap.h"
#include "proto/util.h"

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
	dml_client_request_unlink(d, r);
	r->id = 0;
	r->result = 0;
	if (r->parts_left == 0)
		free(r);
	return rc;
}

/* A new request made of the whole part p, routed by the current map. */
static int submit(struct dml *d, struct part *p, dml_handle_t *h)
{
	struct request *r = dml_client_request_new(d, p->kind == PART_PULL);

	p->req = r;
	r->parts_left = 1;
	return request_done_submitting(d, r, dml_client_part_route(d, p), h);
}

static int submit_range(struct dml *d, enum part_kind kind, uint32_t table, uint64_t begin,
			uint64_t end, const float *vals, float *out, dml_handle_t *h)
{
	const struct dml_shard_table *t = dml_client_lookup_table(d, table);
	struct part *p;

	if (h)
		*h = 0;
	if (!t)
		return DML_ENOTFOUND;
	if (!t->dense)
		return DML_EINVAL;
	if (begin >= end || end > t->keys)
		return DML_ERANGE;
	p = dml_client_part_new(d, kind, t);
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
	const struct dml_shard_table *t = dml_client_lookup_table(d, table);
	struct part *p;

	if (h)
		*h = 0;
	if (!t)
		return DML_ENOTFOUND;
	if (n == 0 || n > UINT32_MAX || !keys)
		return DML_EINVAL;
	p = dml_client_part_new(d, kind, t);
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
	r = dml_client_find_request(d, h);
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
	r = dml_client_find_request(d, h);
	if (!r)
		return DML_ENOTFOUND;
	dml_client_run_until(d, dml_client_request_done, r, 0);
	if (!dml_client_request_done(d, r))
		return DML_EINTR;
	rc = r->result;
	if (r->pull && rc == 0) {
		d->last_min_clock = r->min_clock;
		d->held_ns += r->held_ns;
	}
	dml_client_request_free(d, r);
	return rc;
}

int dml_wait_all(dml_t *d)
{
	int rc;

	if (!d)
		return DML_EINVAL;
	dml_client_run_until(d, dml_client_nothing_in_flight, NULL, 0);
	if (!dml_client_nothing_in_flight(d, NULL))
		return DML_EINTR;
	rc = d->sticky_error;
	d->sticky_error = 0;
	/* Requests with handles are done now; their results stay for dml_wait. */
	for (size_t i = 0; i < d->nbuckets && rc == 0; i++)
		for (struct request *r = d->reqs[i]; r && rc == 0; r = r->hnext)
			rc = r->result;
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
	return dml_client_clock_announce(d);
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
	return dml_client_clock_announce(d);
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

	for (uint32_t i = 0; d && i <= d->nlinks; i++) {
		const struct link *l = i < d->nlinks ? d->links[i] : d->agg;

		if (l && l->conn)
			n += dml_conn_bytes_in(l->conn) + dml_conn_bytes_out(l->conn);
	}
	return n;
}

int dml_aggregator_usable(const dml_t *d)
{
	return d && d->agg && d->agg->ready;
}

int dml_link_bytes(const dml_t *d, int link_class, uint64_t *floats, uint64_t *sent)
{
	if (!d || !floats || !sent ||
	    (link_class != DML_LINK_WITHIN_ZONE && link_class != DML_LINK_CROSS_ZONE))
		return DML_EINVAL;
	*floats = d->value_bytes[link_class][0];
	*sent = d->value_bytes[link_class][1];
	return 0;
}

int dml_residual_norm(const dml_t *d, uint32_t table, double *norm)
{
	if (!d || !norm)
		return DML_EINVAL;
	*norm = dml_client_residual_norm(d, table);
	return 0;
}

int dml_progress(dml_t *d, int timeout_ms)
{
	struct timeval tv;

	if (!d || timeout_ms < 0)
		return DML_EINVAL;
	dml_client_housekeeping(d);
	if (timeout_ms == 0)
		return event_base_loop(d->base, EVLOOP_NONBLOCK) < 0 ? DML_EIO : 0;
	tv.tv_sec = timeout_ms / 1000;
	tv.tv_usec = (timeout_ms % 1000) * 1000;
	event_base_loopexit(d->base, &tv);
	return event_base_loop(d->base, 0) < 0 ? DML_EIO : 0;
}

/* dml.h's levels are log.h's: a sink gets them as the logger passes them. */
_Static_assert(DML_LEVEL_ERROR == DML_LOG_ERROR && DML_LEVEL_WARN == DML_LOG_WARN &&
	       DML_LEVEL_INFO == DML_LOG_INFO && DML_LEVEL_DEBUG == DML_LOG_DEBUG,
	       "dml.h log levels differ from log.h's");

int dml_set_log(dml_log_fn sink, void *arg, int level)
{
	if (level < DML_LEVEL_ERROR || level > DML_LEVEL_DEBUG)
		return DML_EINVAL;
	dml_log_set_sink(sink, arg);
	dml_log_set_level(level);
	return 0;
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
	t = dml_client_lookup_table(d, table);
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
	t = dml_client_lookup_table(d, table);
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
	/* Pushes in flight first, then tell every server we leave (the
	 * aggregator's link just closes); after
	 * dml_interrupt only the latter, and briefly. */
	dml_client_run_until(d, dml_client_nothing_in_flight, NULL, deadline);
	if (atomic_exchange(&d->interrupted, 0))
		deadline = dml_now_ns() + (uint64_t)(ms < CLOSE_INTERRUPTED_MS ? ms :
						      CLOSE_INTERRUPTED_MS) * 1000000ull;
	if (d->conf.role == 0) {
		r = dml_client_request_new(d, 0);
		for (uint32_t i = 0; i < d->nlinks; i++) {
			struct link *l = d->links[i];

			if (l->ready && !l->failed) {
				struct part *p = dml_xcalloc(1, sizeof(*p));

				p->kind = PART_BYE;
				p->req = r;
				(void)dml_client_part_submit(d, p, l);
			}
		}
		dml_client_run_until(d, dml_client_request_done, r, deadline);
	}
	dml_client_free_all(d);
}
