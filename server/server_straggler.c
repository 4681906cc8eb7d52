/*
 * STRAGGLER (dml.proto): under BSP and SSP a pull waits until every live
 * worker's clock is close enough. A worker that still heartbeats but makes
 * no clock (its trainer stuck in a driver call, its link to the servers
 * frozen) holds every other worker, and only the servers can see which one
 * it is: the live worker at the slowest clock with no pull of its own
 * waiting. Once pulls have waited STRAGGLER_AFTER_MS for it, the server
 * tells the scheduler every STRAGGLER_EVERY_MS while that lasts; the
 * scheduler weighs the wait against the worker's own clock time, and may
 * set it aside and EVICT it (sched_evict.c).
 *
 * Must never: name a worker that waits itself (a pull of its own parked),
 * or send anything for a job the scheduler did not give this server.
 */
#include <inttypes.h>

#include "proto/sched_link.h"
#include "proto/log.h"
#include "server/server_internal.h"
#include "proto/util.h"

#define STRAGGLER_AFTER_MS 1000
#define STRAGGLER_EVERY_MS 1000

/* Has worker id a pull parked? */
static int waits_itself(const struct dml_server *s, uint32_t id)
{
	for (const struct held_pull *h = s->held; h; h = h->next)
		if (h->sess && h->worker == id)
			return 1;
	return 0;
}

/* How long the oldest parked pull has waited, in ns. */
static uint64_t oldest_wait_ns(const struct dml_server *s, uint64_t now)
{
	uint64_t oldest = now;

	for (const struct held_pull *h = s->held; h; h = h->next)
		if (h->received_ns < oldest)
			oldest = h->received_ns;
	return now - oldest;
}

static void tell(struct dml_server *s, const struct dml_ssp_worker *w, uint64_t waited_ns)
{
	Dml__Meta m = DML__META__INIT;

	m.type = DML__MSG_TYPE__STRAGGLER;
	m.job = s->job.id;
	m.worker = w->id;
	m.clock = w->clock;
	m.held_us = waited_ns / 1000u;
	if (!s->strag.told_ns)
		dml_info("job %" PRIu32 ": pulls have waited %" PRIu64 " ms for worker %" PRIu32
			 " at clock %" PRIu64 ", which has no pull waiting: telling the "
			 "scheduler", s->job.id, waited_ns / 1000000u, w->id, w->clock);
	(void)dml_sched_link_send(s->sched, &m);
}

void dml_server_straggler_tick(struct dml_server *s)
{
	uint64_t now = dml_now_ns(), min, waited;
	size_t told = 0;

	if (!s->held || !s->job_mode || !s->job.id || s->ssp.staleness < 0 || !s->sched ||
	    !dml_sched_link_registered(s->sched)) {
		s->strag.since_ns = s->strag.told_ns = 0;
		return;
	}
	min = dml_ssp_min_clock(&s->ssp);
	if (!s->strag.since_ns || min != s->strag.clock) {
		s->strag.clock = min;
		s->strag.since_ns = now;
		s->strag.told_ns = 0;
		return;
	}
	/* The slowest clock stood still, and pulls waited, all that while. */
	waited = now - s->strag.since_ns;
	if (oldest_wait_ns(s, now) < waited)
		waited = oldest_wait_ns(s, now);
	if (waited < (uint64_t)STRAGGLER_AFTER_MS * 1000000u ||
	    (s->strag.told_ns && now - s->strag.told_ns < (uint64_t)STRAGGLER_EVERY_MS * 1000000u))
		return;
	for (size_t i = 0; i < s->ssp.nworkers; i++) {
		const struct dml_ssp_worker *w = &s->ssp.workers[i];

		if (w->live && w->clock == min && !waits_itself(s, w->id)) {
			tell(s, w, waited);
			told++;
		}
	}
	if (told)
		s->strag.told_ns = now;
}
