/*
 * The output budget: how much memory the replies queued for peers that do
 * not read them may hold, server-wide (output_budget). A whole-table pull
 * left unread pins its reply (a copy, or the table's values under a pin
 * that the next push turns into a copy), so a few such peers could make
 * the server hold many copies of its biggest table.
 *
 * Two rules. A large pull (a reply of DML_BUDGET_PULL_MIN bytes or more)
 * that would take the queued output past the budget waits, held by the
 * connection layer with nothing more read from that peer, until the others
 * drained enough; when nothing at all is queued it goes whatever its size.
 * And each connection stops being read once its own unsent output is over
 * its share of the budget (the budget over the connections open, between 1
 * and 64 MiB), so that many small replies cannot add up either.
 *
 * A peer that never reads would keep the others' large pulls waiting for
 * good: while a pull waits, a connection whose queued output has not
 * shrunk for output_stall_ms is closed (dml_server_output_stalled_total).
 *
 * Must never: refuse a pull (it waits), hold one while nothing is queued
 * (nothing would ever release it), or close a slow reader while nobody
 * waits for the memory it holds.
 */
#include "proto/dml_error.h"
#include "server/server_internal.h"
#include "proto/log.h"
#include "proto/util.h"

/* Pulls whose reply is smaller are never held: they cannot matter much. */
#define DML_BUDGET_PULL_MIN (1u << 20)
#define SHARE_MIN ((size_t)1 << 20)
#define SHARE_MAX ((size_t)64 << 20)

static uint64_t reply_bytes(const Dml__Meta *m)
{
	uint64_t n = m->dense ? m->key_end - m->key_begin : m->num_keys;

	return n * m->value_width * sizeof(float);
}

static uint64_t queued_total(const struct dml_server *s)
{
	uint64_t total = 0;

	for (const struct dml_peer *x = s->peers.head; x; x = x->next)
		total += dml_conn_output_pending(x->conn);
	return total;
}

int dml_server_budget_holds(struct session *ss, const Dml__Meta *m)
{
	struct dml_server *s = ss->srv;
	uint64_t want = reply_bytes(m), queued;

	if (want < DML_BUDGET_PULL_MIN)
		return 0;
	queued = queued_total(s);
	if (queued == 0 || queued + want <= s->conf->output_budget) {
		ss->budget_wait = 0;
		return 0;
	}
	if (!ss->budget_wait) {
		s->st.budget_held++;
		if ((s->st.budget_held & (s->st.budget_held - 1)) == 0)
			dml_warn("peer %s: a %llu-byte pull waits: %llu bytes already queued for "
				 "peers (output_budget %llu; %llu pulls held so far)",
				 dml_conn_peer(ss->peer.conn), (unsigned long long)want,
				 (unsigned long long)queued,
				 (unsigned long long)s->conf->output_budget,
				 (unsigned long long)s->st.budget_held);
	}
	ss->budget_wait = 1;
	s->budget_waiting = 1;
	return 1;
}

/* The per-connection share of the budget at the current number of peers. */
static size_t share_of(const struct dml_server *s)
{
	size_t share = s->conf->output_budget / (s->peers.count ? s->peers.count : 1);

	return share < SHARE_MIN ? SHARE_MIN : share > SHARE_MAX ? SHARE_MAX : share;
}

/*
 * Note when each connection's queue last shrank; with a pull waiting,
 * close those whose queue stood still for output_stall_ms.
 */
static void close_stalled(struct dml_server *s, int waiting)
{
	uint64_t now = dml_now_ns(), stall = (uint64_t)s->conf->output_stall_ms * 1000000ull;

	for (struct dml_peer *x = s->peers.head; x; x = x->next) {
		struct session *ss = (struct session *)x;
		size_t queued = dml_conn_output_pending(x->conn);

		if (queued == 0 || queued < ss->out_seen || ss->out_since_ns == 0)
			ss->out_since_ns = queued ? now : 0;
		ss->out_seen = queued;
		if (!waiting || !queued || now - ss->out_since_ns < stall ||
		    dml_conn_state(x->conn) == DML_CONN_CLOSING)
			continue;
		s->st.output_stalled++;
		dml_warn("peer %s: %zu bytes of replies unread for %u ms while pulls wait for "
			 "the output budget; closing", dml_conn_peer(x->conn), queued,
			 s->conf->output_stall_ms);
		dml_conn_abort(x->conn, DML_ETIMEDOUT);
	}
}

void dml_server_budget_tick(struct dml_server *s)
{
	size_t share = share_of(s);

	/* New connections get the share current when they are accepted. */
	s->conn_conf.output_high_wm = share;
	if (share != s->out_share) {
		s->out_share = share;
		for (struct dml_peer *x = s->peers.head; x; x = x->next)
			dml_conn_set_output_wm(x->conn, share);
	}
	close_stalled(s, s->budget_waiting);
	if (!s->budget_waiting)
		return;
	/* Each waiting pull checks again as it is handed back; those that
	 * still do not fit wait again. */
	s->budget_waiting = 0;
	for (struct dml_peer *x = s->peers.head; x; x = x->next) {
		struct session *ss = (struct session *)x;

		if (ss->budget_wait && dml_conn_held(x->conn))
			dml_conn_release(x->conn);
	}
}
