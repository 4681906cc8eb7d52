/*
 * Push admission: what a worker's push must pass before handle_push lets
 * it reach a table. Two rules live here.
 *
 * The sequence window. Pushes carry (worker, seq) so that a resend after a
 * reconnect is applied once: a seq at or below the worker's last_seq is a
 * resend, acknowledged and not applied. That makes one huge seq poisonous:
 * after seq 2^64-1 every later push would be "acknowledged, not applied".
 * So a push may move last_seq forward by at most DML_SEQ_WINDOW; a jump
 * further is refused (an error reply, nothing applied, last_seq unchanged).
 * The window bounds how many pushes a client can have numbered and not yet
 * applied here; libdml numbers a push when it queues it for a server and
 * keeps no fixed cap on them, so the bound is a generous fixed one, far
 * above any real pipeline.
 * The base: a worker whose last_seq is 0 has no applied push here to
 * measure from. That is a fresh worker (it starts at seq 1), a restarted
 * worker (a new incarnation resets last_seq), or a worker new to this
 * server although not to its own numbering (a new server, a server after a
 * remap, a server restarted without a store). Its first push, whatever its
 * seq, is the base. A restarted server does not reopen that door for
 * workers it knew: their last_seq comes back from the store.
 *
 * Finite values. A NaN or an infinity in a gradient spreads through the
 * optimizer into the row for good, so pushes carrying one are refused
 * unless the job sets allow_nonfinite. The scan is one branch-free pass the
 * compiler vectorises, far cheaper than the optimizer that follows.
 *
 * Must never: apply, log or acknowledge a push, or change a worker's state.
 */
#include <inttypes.h>

#include "proto/dml_error.h"
#include "proto/finite.h"
#include "proto/log.h"
#include "server/server_internal.h"

int dml_server_seq_check(const struct dml_ssp_worker *w, uint64_t seq)
{
	if (!w || seq == 0)
		return DML_SEQ_NEW;
	if (seq <= w->last_seq)
		return DML_SEQ_RESEND;
	if (w->last_seq != 0 && seq - w->last_seq > DML_SEQ_WINDOW)
		return DML_SEQ_JUMP;
	return DML_SEQ_NEW;
}

int dml_server_push_admit(struct session *ss, const Dml__Meta *m, const uint8_t *payload)
{
	struct dml_server *s = ss->srv;
	uint64_t n, keybytes;

	if (s->allow_nonfinite)
		return 1;
	keybytes = m->dense ? 0 : m->num_keys * 8ull;
	n = (m->dense ? m->key_end - m->key_begin : m->num_keys) * (uint64_t)m->value_width;
	if (dml_values_finite((const float *)(payload + keybytes), (size_t)n))
		return 1;
	/* Logged at 1, 2, 4, 8... refusals: a broken worker may push many. */
	s->st.nonfinite++;
	if ((s->st.nonfinite & (s->st.nonfinite - 1)) == 0)
		dml_warn("peer %s: push to table %u refused: NaN or infinite values (%" PRIu64
			 " such pushes refused)", dml_conn_peer(ss->peer.conn), m->table,
			 s->st.nonfinite);
	dml_server_reply_error(ss, m->request_id, DML_EINVAL, "push to table %u: NaN or "
			       "infinite values refused (job key allow_nonfinite = true allows "
			       "them)", m->table);
	return 0;
}
