/*
 * dml-sched's side of EVICT (dml.proto): under BSP and SSP every server
 * waits for each worker's clock, and a worker that hangs (a stopped
 * process, a machine that froze, a partition that leaves its TCP
 * connections up) keeps its connections open, so the servers never count
 * it gone and the job stops with it. When the scheduler loses such a
 * worker (no heartbeat for dead_after_ms, or it refused its assignment),
 * it tells every server of the job's map to drop it from the clock set and
 * close its connections. Its partitions have gone to the others already
 * (job_state.c); if it comes back it reconnects, the servers take it in again
 * at the slowest clock, and its next assignment moves its clock on to the
 * job's (dml_clock_to). A worker that still heartbeats but makes no clock
 * (a trainer stuck in a driver call, a link to the servers that froze) is
 * named by the servers whose pulls wait for it (STRAGGLER): once job_place.c
 * sets it aside as stalled it is evicted the same way, and again if it
 * comes back and holds the others once more before it takes a share.
 *
 * EVICT has no reply: a server the scheduler cannot reach now is told
 * again when it registers (it may have missed the first one).
 *
 * Must never: evict a worker that takes a share of the job (live and not
 * set aside), or evict in an asynchronous job (nobody waits for its clock
 * there).
 */
#include <inttypes.h>
#include <stdio.h>

#include "proto/log.h"
#include "sched/sched_internal.h"

/* EVICT of worker to one server of the active job; 0 when sent. */
static int evict_send(struct dml_sched *s, const struct dml_job *job, uint32_t server,
		      uint32_t worker)
{
	struct session *ss = dml_sched_owner(s, DML__ROLE__SERVER, server);
	Dml__Meta m = DML__META__INIT;

	if (!ss)
		return -1;
	m.type = DML__MSG_TYPE__EVICT;
	m.job = job->id;
	m.worker = worker;
	return dml_sched_send(ss, &m, NULL);
}

/* Do the job's servers wait for every worker's clock? */
static int evicts(const struct dml_job *job)
{
	return job && job->spec && job->spec->staleness >= 0 && !dml_job_finished(job);
}

void dml_sched_evict(struct dml_sched *s, const struct dml_job *job, uint32_t worker,
		     const char *what)
{
	size_t sent = 0;

	if (!evicts(job))
		return;
	for (size_t i = 0; i < s->act.nservers; i++)
		sent += evict_send(s, job, s->act.servers[i].node_id, worker) == 0;
	dml_info("job %" PRIu32 " (%s): worker %" PRIu32 " %s: %zu of %zu servers told to "
		 "drop its clock", job->id, dml_job_name(job), worker, what, sent,
		 s->act.nservers);
}

void dml_sched_evict_again(struct dml_sched *s, const struct dml_job *job, uint32_t server)
{
	if (!evicts(job))
		return;
	for (size_t i = 0; i < job->nworkers; i++)
		if (!job->workers[i].live)
			(void)evict_send(s, job, server, job->workers[i].node_id);
}
