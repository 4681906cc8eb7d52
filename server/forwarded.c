/*
 * Forwarded pushes: a zone aggregator sums the pushes of its zone's workers
 * and sends one PUSH naming them (Meta.contributors: worker, incarnation and
 * the seq each worker gave its push towards this server). Exactly-once rests
 * on every contributor's sequence here, as for a worker's own push, so the
 * summed push is admitted only when its contributors agree:
 *
 * - it comes from a session of role AGGREGATOR, with Meta.seq 0 and each
 *   worker named once (else DML_EROLE, DML_EINVAL);
 * - every worker is in the clock set and live (else DML_EAGAIN: the
 *   aggregator retries once the worker's HELLO reached this server), and of
 *   the incarnation the aggregator names (else DML_ESTATE: the process that
 *   pushed is gone, its sequence with it);
 * - every push is new (applied once, every contributor's last_seq moves), or
 *   every push is a resend (acknowledged, nothing applied); a mix, or a seq
 *   past the resend window, is refused whole with DML_EPARTIAL, nothing
 *   changed: the aggregator splits it and forwards the pushes one by one.
 *
 * The log holds the push under its first contributor and a sequence-only
 * record for each other one, in the same commit (dml_server_store_pushed),
 * so a restart restores every contributor's sequence.
 *
 * Clocks: a worker that routes its pushes through an aggregator sends its
 * CLOCK there too, and the aggregator delivers it with the summed push
 * holding that worker's last push before it (Contributor.clock), or in a
 * CLOCK of its own once those pushes are all acknowledged. Either way a
 * clock reaches this server after the pushes it follows, as a worker's own
 * CLOCK does on its connection, without waiting for their ACK to cross
 * back. A clock of a worker not live here, or of another incarnation, is
 * dropped: the worker's HELLO brings its clock when it joins.
 *
 * Must never: apply a summed push that holds any push applied before, or
 * change any worker's sequence for a push that was not applied.
 */
#include <inttypes.h>
#include <stdlib.h>

#include "proto/dml_error.h"
#include "server/server_internal.h"
#include "proto/util.h"

static int id_cmp(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;

	return (x > y) - (x < y);
}

/* A worker named twice: its id, else 0 (ids are never 0: the frame check). */
static uint32_t named_twice(const Dml__Meta *m)
{
	uint32_t *ids = dml_xmalloc(m->n_contributors * sizeof(*ids)), twice = 0;

	for (size_t i = 0; i < m->n_contributors; i++)
		ids[i] = m->contributors[i]->worker;
	qsort(ids, m->n_contributors, sizeof(*ids), id_cmp);
	for (size_t i = 1; i < m->n_contributors && !twice; i++)
		if (ids[i] == ids[i - 1])
			twice = ids[i];
	free(ids);
	return twice;
}

/* Who sent it and how it is framed: 1 when it may go on, else answered. */
static int forward_shape_ok(struct session *ss, const Dml__Meta *m)
{
	uint32_t twice;

	if (ss->role != DML__ROLE__AGGREGATOR) {
		dml_server_reply_error(ss, m->request_id, DML_EROLE, "push to table %u: only an "
				       "aggregator names the workers whose pushes it sums",
				       m->table);
		return 0;
	}
	if (m->n_contributors == 0) {
		dml_server_reply_error(ss, m->request_id, DML_EINVAL, "push to table %u: an "
				       "aggregator names the workers whose pushes it forwards",
				       m->table);
		return 0;
	}
	if (m->seq != 0) {
		dml_server_reply_error(ss, m->request_id, DML_EINVAL, "push to table %u: a "
				       "forwarded push carries its workers' seqs, not seq %" PRIu64,
				       m->table, m->seq);
		return 0;
	}
	if ((twice = named_twice(m)) != 0) {
		dml_server_reply_error(ss, m->request_id, DML_EINVAL, "push to table %u: worker "
				       "%" PRIu32 " is named twice", m->table, twice);
		return 0;
	}
	return 1;
}

int dml_server_forwarded_check(struct session *ss, const Dml__Meta *m)
{
	struct dml_server *s = ss->srv;
	size_t resends = 0, jumps = 0;

	if (!forward_shape_ok(ss, m))
		return DML_SEQ_REFUSED;
	for (size_t i = 0; i < m->n_contributors; i++) {
		const Dml__Contributor *c = m->contributors[i];
		const struct dml_ssp_worker *w = dml_ssp_find(&s->ssp, c->worker);

		if (!w || !w->live) {
			dml_server_reply_error(ss, m->request_id, DML_EAGAIN, "worker %" PRIu32
					       " has not joined this server", c->worker);
			return DML_SEQ_REFUSED;
		}
		if (w->incarnation != c->incarnation) {
			dml_server_reply_error(ss, m->request_id, DML_ESTATE, "worker %" PRIu32
					       " is incarnation %" PRIx64 " here, not %" PRIx64
					       ": its push is of a process that is gone", c->worker,
					       w->incarnation, c->incarnation);
			return DML_SEQ_REFUSED;
		}
		switch (dml_server_seq_check(w, c->seq)) {
		case DML_SEQ_RESEND:
			resends++;
			break;
		case DML_SEQ_JUMP:
			jumps++;
			break;
		}
	}
	if (resends == m->n_contributors)
		return DML_SEQ_RESEND;
	if (resends == 0 && jumps == 0)
		return DML_SEQ_NEW;
	s->st.pushes_partial++;
	dml_server_reply_error(ss, m->request_id, DML_EPARTIAL, "push to table %u of %zu "
			       "workers: %zu applied here already, %zu past the resend window: "
			       "nothing applied", m->table, m->n_contributors, resends, jumps);
	return DML_SEQ_REFUSED;
}

void dml_server_forwarded_applied(struct dml_server *s, const Dml__Meta *m)
{
	for (size_t i = 0; i < m->n_contributors; i++) {
		struct dml_ssp_worker *w = dml_ssp_find(&s->ssp, m->contributors[i]->worker);

		/* Checked by dml_server_forwarded_check in this same turn. */
		if (w)
			w->last_seq = m->contributors[i]->seq;
	}
	s->st.pushes_forwarded++;
	s->st.forwarded_contributors += m->n_contributors;
}

void dml_server_forwarded_clocks(struct dml_server *s, const Dml__Meta *m)
{
	int moved = 0;

	for (size_t i = 0; i < m->n_contributors; i++) {
		const Dml__Contributor *c = m->contributors[i];
		struct dml_ssp_worker *w;

		if (!c->clock)
			continue;
		w = dml_ssp_find(&s->ssp, c->worker);
		if (!w || !w->live || w->incarnation != c->incarnation || c->clock <= w->clock)
			continue;
		dml_ssp_set_clock(&s->ssp, w, c->clock);
		moved = 1;
	}
	if (moved)
		dml_server_release_held(s);
}
