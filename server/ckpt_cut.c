/*
 * A server's part of a job-wide checkpoint (dml.proto's CHECKPOINT): rows
 * that hold every push of the clocks before C and none of C or later, on
 * every server of the job, for the same C.
 *
 * The scheduler asks in two steps. Prepare: the server answers the lowest
 * clock it can still cut at (one past the highest clock of a push it
 * applied) and from then on holds every push of that clock or later: its
 * connection stops being read (conn.h's DML_CONN_HOLD), so the worker's
 * later frames wait behind it. Cut at C, the highest clock any server
 * answered: pushes of clocks before C go on (their connections are
 * released and hold again at a push of C or later), and once every live
 * worker's clock reached C (it has sent every push of the clocks before),
 * the rows are the checkpoint: the server takes a copy-on-write snapshot of
 * them (row_snapshot.c: a row is copied before any later push changes it),
 * releases every held connection, and ACKs the scheduler once its writer
 * thread has the copy on disk (server_store.c). A prepare not
 * followed by a cut within PREPARE_TIMEOUT_MS (the scheduler died, a
 * server of the job is down), or a cut the clocks do not reach within
 * CUT_TIMEOUT_MS, is dropped and the pushes go on.
 *
 * Workers are slowed only where the staleness bound would have them wait
 * for the slowest anyway: a held push is one of clock C or later, while
 * the slowest worker is still before C.
 *
 * Must never: apply a push of clock C or later before the rows of a cut at
 * C are snapshotted, ACK a cut before they are on disk, or hold pushes with no
 * cut or prepare in force.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proto/conn.h"
#include "proto/dml_error.h"
#include "proto/sched_link.h"
#include "proto/log.h"
#include "server/server_internal.h"
#include "proto/util.h"

#define PREPARE_TIMEOUT_MS 10000
/* As long as the scheduler waits for a round (sched_ckpt.c). */
#define CUT_TIMEOUT_MS 60000

enum cut_phase {
	CUT_NONE,
	CUT_PREPARED,              /* answered a prepare: holding pushes >= clock */
	CUT_CUTTING,               /* cut at clock: waiting for the workers' clocks */
};

struct server_cut {
	enum cut_phase phase;
	uint64_t clock;            /* pushes of this clock and later are held */
	uint64_t request_id;       /* CUTTING: the CHECKPOINT to ACK */
	uint64_t deadline_ns;      /* PREPARED: dropped after this */
	struct session **held;     /* sessions whose connection holds a push */
	size_t nheld, cap;
	uint64_t next_clock;       /* one past the highest clock of a push applied */
	uint64_t t0_ns;            /* when the cut began */
	uint64_t holds;            /* pushes held since */
};

static struct server_cut *cut_of(struct dml_server *s)
{
	if (!s->cut)
		s->cut = dml_xcalloc(1, sizeof(*s->cut));
	return s->cut;
}

static void cut_end(struct server_cut *c);

/* Every held connection reads on; each holds again at a push still held. */
static void release_all(struct server_cut *c)
{
	size_t n = c->nheld;

	c->nheld = 0;
	for (size_t i = 0; i < n; i++)
		dml_conn_release(c->held[i]->peer.conn);
}

int dml_server_cut_holds(struct session *ss, const Dml__Meta *m)
{
	struct server_cut *c = ss->srv->cut;

	if (!c || c->phase == CUT_NONE || m->clock < c->clock)
		return 0;
	for (size_t i = 0; i < c->nheld; i++)
		if (c->held[i] == ss)
			return 1;
	if (c->nheld == c->cap) {
		c->cap = c->cap ? 2 * c->cap : 8;
		c->held = dml_xrealloc(c->held, c->cap * sizeof(*c->held));
	}
	c->held[c->nheld++] = ss;
	c->holds++;
	return 1;
}

void dml_server_cut_applied(struct dml_server *s, uint64_t clock)
{
	struct server_cut *c = cut_of(s);

	if (clock >= c->next_clock)
		c->next_clock = clock + 1;
}

uint64_t dml_server_cut_next_clock(const struct dml_server *s)
{
	return s->cut ? s->cut->next_clock : 0;
}

void dml_server_cut_reset(struct dml_server *s)
{
	if (!s->cut)
		return;
	cut_end(s->cut);
	s->cut->next_clock = 0;
}

void dml_server_cut_forget(struct dml_server *s, struct session *ss)
{
	struct server_cut *c = s->cut;

	for (size_t i = 0; c && i < c->nheld; i++) {
		if (c->held[i] == ss) {
			c->held[i] = c->held[--c->nheld];
			return;
		}
	}
}

/* The reply to the scheduler's CHECKPOINT: ACK with clock (and bytes). */
static void cut_ack(struct dml_server *s, uint64_t request_id, uint64_t clock,
		    uint64_t bytes)
{
	Dml__Meta m = DML__META__INIT;

	m.type = DML__MSG_TYPE__ACK;
	m.request_id = request_id;
	m.job = s->job.id;
	m.clock = clock;
	m.bytes = bytes;
	if (dml_sched_link_send(s->sched, &m) != 0)
		dml_warn("job %u: checkpoint at clock %" PRIu64 ": the scheduler is not "
			 "reachable; it fails the round and takes the next one anew", s->job.id,
			 clock);
}

static void cut_end(struct server_cut *c)
{
	c->phase = CUT_NONE;
	c->clock = 0;
	release_all(c);
}

void dml_server_cut_check(struct dml_server *s)
{
	struct server_cut *c = s->cut;
	char err[512] = "";
	int rc;

	if (!c || c->phase != CUT_CUTTING || dml_ssp_min_clock(&s->ssp) < c->clock)
		return;
	rc = dml_server_store_snapshot(s, c->clock, c->request_id, err, sizeof(err));
	if (rc) {
		dml_warn("job %u: checkpoint at clock %" PRIu64 " not taken: %s", s->job.id,
			 c->clock, err);
		dml_server_sched_error(s, c->request_id, rc, "checkpoint", "clock %" PRIu64
				       ": %s", c->clock, err);
	} else {
		dml_info("job %u: checkpoint at clock %" PRIu64 " taken %.1f ms after the "
			 "prepare; %" PRIu64 " pushes of later clocks held till then", s->job.id,
			 c->clock, (double)(dml_now_ns() - c->t0_ns) / 1e6, c->holds);
	}
	cut_end(c);
}

void dml_server_cut_written(struct dml_server *s, uint64_t request_id, uint64_t clock, int rc,
			    uint64_t bytes, const char *err)
{
	if (rc)
		dml_server_sched_error(s, request_id, rc, "checkpoint", "clock %" PRIu64 ": %s",
				       clock, err);
	else
		cut_ack(s, request_id, clock, bytes);
}

void dml_server_cut_tick(struct dml_server *s)
{
	struct server_cut *c = s->cut;
	uint64_t now = dml_now_ns();

	if (!c || c->phase == CUT_NONE)
		return;
	if (c->phase == CUT_PREPARED && now >= c->deadline_ns) {
		dml_warn("job %u: checkpoint prepared at clock %" PRIu64 " but not cut within %d "
			 "ms: dropped, pushes go on", s->job.id, c->clock, PREPARE_TIMEOUT_MS);
		cut_end(c);
	} else if (c->phase == CUT_CUTTING &&
		   now - c->t0_ns >= CUT_TIMEOUT_MS * 1000000ull) {
		/* A worker that stopped (the job's last clock) never reaches it. */
		dml_server_sched_error(s, c->request_id, DML_ETIMEDOUT, "checkpoint", "clock %"
				       PRIu64 ": the workers' clocks did not reach it within %d "
				       "ms (slowest at %" PRIu64 "); dropped, pushes go on",
				       c->clock, CUT_TIMEOUT_MS, dml_ssp_min_clock(&s->ssp));
		cut_end(c);
	}
}

static void on_drop(struct dml_server *s, const Dml__Meta *m)
{
	char err[512] = "";
	int rc = dml_server_store_snapshot_drop(s, m->clock, m->request_id, err, sizeof(err));

	if (rc)
		dml_server_sched_error(s, m->request_id, rc, "checkpoint", "delete of clock %"
				       PRIu64 ": %s", m->clock, err);
}

void dml_server_cut_dropped(struct dml_server *s, uint64_t request_id, uint64_t clock, int rc,
			    const char *err)
{
	if (rc) {
		dml_server_sched_error(s, request_id, rc, "checkpoint", "delete of clock %"
				       PRIu64 ": %s", clock, err);
		return;
	}
	dml_info("job %u: checkpoint at clock %" PRIu64 " deleted", s->job.id, clock);
	cut_ack(s, request_id, clock, 0);
}

void dml_server_cut_on_sched(struct dml_server *s, const Dml__Meta *m)
{
	struct server_cut *c = cut_of(s);

	if (!s->job.id || m->job != s->job.id) {
		dml_server_sched_error(s, m->request_id, DML_ENOTFOUND, "checkpoint", "job %u is "
				       "not the job of this server (%u)", m->job, s->job.id);
		return;
	}
	if (!dml_server_store_keeps(s)) {
		dml_server_sched_error(s, m->request_id, DML_ECONF, "checkpoint", "server %u "
				       "keeps no store ([store] path): nowhere to write a "
				       "checkpoint", s->conf->node_id);
		return;
	}
	if (m->drop && c->phase != CUT_NONE && m->clock >= c->clock) {
		/* The round failed elsewhere before this server wrote its part. */
		dml_info("job %u: checkpoint at clock %" PRIu64 " cancelled", s->job.id, c->clock);
		cut_end(c);
		cut_ack(s, m->request_id, m->clock, 0);
		return;
	}
	if (m->drop) {
		on_drop(s, m);
		return;
	}
	/* Rows still moving are in no server's part: the round tries later. */
	if (s->job.remapping) {
		dml_server_sched_error(s, m->request_id, DML_ESTATE, "checkpoint", "rows of "
				       "map v%" PRIu64 " are still moving", s->job.version);
		return;
	}
	if (m->clock == 0) {
		if (c->phase == CUT_CUTTING) {
			dml_server_sched_error(s, m->request_id, DML_ESTATE, "checkpoint",
					       "a checkpoint at clock %" PRIu64 " is being "
					       "taken", c->clock);
			return;
		}
		/* Again (a lost answer): the clock it holds from stays. */
		if (c->phase == CUT_NONE) {
			c->phase = CUT_PREPARED;
			c->clock = c->next_clock ? c->next_clock : 1;
			c->t0_ns = dml_now_ns();
			c->holds = 0;
		}
		c->deadline_ns = dml_now_ns() + PREPARE_TIMEOUT_MS * 1000000ull;
		cut_ack(s, m->request_id, c->clock, 0);
		return;
	}
	if (c->phase == CUT_NONE || m->clock < c->clock) {
		dml_server_sched_error(s, m->request_id, DML_ESTATE, "checkpoint", "cut at clock "
				       "%" PRIu64 " without a prepare at or below it (%s at %"
				       PRIu64 ")", m->clock, c->phase == CUT_NONE ? "none"
				       : "prepared", c->clock);
		return;
	}
	c->phase = CUT_CUTTING;
	c->clock = m->clock;
	c->request_id = m->request_id;
	release_all(c);
	dml_server_cut_check(s);
}

void dml_server_cut_free(struct dml_server *s)
{
	if (!s->cut)
		return;
	free(s->cut->held);
	free(s->cut);
	s->cut = NULL;
}
