/*
 * Forgetting workers: a worker that left the clock set and stayed away for
 * forget_worker_after_ms loses its entry (clock, push sequence, metrics
 * series), so that a stream of short-lived worker ids cannot grow the
 * server's per-worker state, its /metrics page and every scan over the
 * workers without bound.
 *
 * What a forgotten worker loses is its push dedupe: a resend of a push
 * applied before would be applied again. Hence the rules: only workers out
 * of the clock set with no connection for forget_worker_after_ms (far past
 * the time libdml keeps resending, reconnect_timeout_ms, 30 s by default),
 * never one the job names in its worker_ids, and under batch durability
 * never one whose sequence the log does not hold yet. A forgotten worker
 * that comes back is a new one: its first push is its base (see
 * server_admit.c) and it joins at the slowest clock.
 *
 * Must never: forget a worker with a connection, or leave a session
 * pointing at a moved entry.
 */
#include "server/server_internal.h"
#include "proto/log.h"
#include "store/store.h"
#include "proto/util.h"

static int keep_worker(const struct dml_ssp_worker *w, void *arg)
{
	struct dml_server *s = arg;
	const Dml__JobSpec *spec = s->job.spec;

	if (s->store && s->conf->durability == DML_DURABILITY_BATCH &&
	    w->last_seq != w->logged_seq)
		return 1;
	for (size_t i = 0; spec && i < spec->n_worker_ids; i++)
		if (spec->worker_ids[i] == w->id)
			return 1;
	return 0;
}

/* The entry at from moved to to: the sessions of its worker follow it. */
static void worker_moved(size_t from, size_t to, void *arg)
{
	struct dml_server *s = arg;

	for (struct dml_peer *x = s->peers.head; x; x = x->next) {
		struct session *ss = (struct session *)x;

		if (ss->worker && ss->widx == from)
			ss->widx = to;
	}
}

void dml_server_workers_expire(struct dml_server *s)
{
	uint64_t after = (uint64_t)s->conf->forget_worker_after_ms * 1000000ull;
	size_t gone = dml_ssp_forget(&s->ssp, dml_now_ns(), after, keep_worker, worker_moved, s);

	if (gone)
		dml_info("forgot %zu worker(s) gone for over %u ms; %zu known", gone,
			 s->conf->forget_worker_after_ms, s->ssp.nworkers);
}
