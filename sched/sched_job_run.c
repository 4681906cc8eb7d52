/*
 * dml-sched's job side, what drives it: the job table (jobs.h) on the
 * scheduler's loop.
 *
 * One job is active at a time. When none is, the oldest pending job starts
 * on the alive workers as soon as it can; its shard map v1 is planned over
 * the alive servers and sent to each of them, and once every server of the
 * map has ACKed it, every live worker of the job gets ASSIGN. From then on
 * each change of the job's state or assignment is sent to its live
 * workers, and an end state to every worker that took part.
 * A server that registers while a job is active gets the job's map again
 * when it is in it, or makes a new version that includes it; a server that
 * refuses a map fails the job and is left out of later maps until it
 * restarts. Worker deaths and (re)registrations come from the node table's
 * callback through a queue that the loop drains (the kick event), so that a
 * registration is answered before its worker is assigned anything.
 *
 * Must never: block the loop, or assign a worker before the job's tables
 * are installed.
 */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proto/dml_error.h"
#include "proto/frame.h"
#include "proto/job_spec.h"
#include "sched/jobs.h"
#include "proto/log.h"
#include "shard/mapplan.h"
#include "sched/nodes.h"
#include "sched/sched_internal.h"
#include "sched/sched_job_internal.h"
#include "proto/util.h"

/* ---- the job's life ----------------------------------------------------- */

/* The alive workers as candidates, in node id order. */
static struct dml_job_candidate *worker_candidates(struct dml_sched *s, size_t *n)
{
	size_t total = dml_nodes_count(s->nodes), k = 0;
	struct dml_job_candidate *c = dml_xcalloc(total + 1, sizeof(*c));

	for (size_t i = 0; i < total; i++) {
		const struct dml_node *node = dml_nodes_at(s->nodes, i);

		if (node->role != DML__ROLE__WORKER || node->state != DML__NODE_STATE__ALIVE ||
		    !node->connected)
			continue;
		c[k].node_id = node->node_id;
		c[k].rate = node_rate(node);
		k++;
	}
	*n = k;
	return c;
}

static size_t live_workers(const struct dml_job *job)
{
	size_t n = 0;

	for (size_t i = 0; i < job->nworkers; i++)
		n += job->workers[i].live != 0;
	return n;
}

/* Start the oldest pending job if it can; 1 when it left PENDING. */
static int start_next(struct dml_sched *s, uint64_t now)
{
	struct dml_job *job = dml_jobs_next(s->jobs);
	struct dml_mapplan_server *srv;
	struct dml_job_candidate *cand;
	struct sched_job *xj;
	Dml__ShardMap *map;
	size_t nsrv, ncand;
	int rc;

	if (!job || !(xj = dml_sched_job(s, job->id)))
		return 0;
	srv = map_candidates(s, NULL, &nsrv);
	if (!srv) {
		dml_jobs_set_reason(job, "waiting for a server, none alive", now);
		job_note(s, job);
		return 0;
	}
	cand = worker_candidates(s, &ncand);
	rc = dml_jobs_start(job, cand, ncand, now);
	free(cand);
	if (rc) {
		/* Its reason says what it waits for. */
		free(srv);
		job_note(s, job);
		return 0;
	}
	xj->wire_workers = (uint32_t)live_workers(job);
	rc = dml_mapplan_build(job->spec, job->id, 1, srv, nsrv, &map);
	free(srv);
	if (rc) {
		job_fail(job, now, "cannot plan the shard map: %s", dml_strerror(rc));
		job_note(s, job);
		return 1;
	}
	memset(&s->act, 0, sizeof(s->act));
	s->act.job = job->id;
	s->act.first_request = s->next_request;
	/* A new run empties every server's store, checkpoints included. */
	for (size_t i = 0; i < dml_jobs_count(s->jobs); i++)
		dml_jobs_checkpoints_clear(dml_jobs_at(s->jobs, i), job->id);
	map_set(s, xj, map, now);
	install_reason(s, xj, now);
	job_note(s, job);
	map_send_all(s, job, xj, "", now);
	return 1;
}

/* The active job ended: every worker that took part hears it, and the next
 * job may start. */
static void job_end(struct dml_sched *s, struct dml_job *job, uint64_t now)
{
	dml_sched_ckpt_abandon(s, job, "the job ended", now);
	job_note(s, job);
	assign_all(s, job, 1, now);
	free(s->act.servers);
	memset(&s->act, 0, sizeof(s->act));
}

/* Install progress and assignments of the active (not finished) job. */
static void active_sync(struct dml_sched *s, struct dml_job *job, uint64_t now)
{
	struct sched_active *a = &s->act;
	struct sched_job *xj = dml_sched_job(s, job->id);

	if (!xj || !xj->map)
		return;
	install_reason(s, xj, now);
	if (!a->reason[0] && xj->map->version > a->installed_version) {
		a->installed_version = xj->map->version;
		dml_info("job %" PRIu32 " (%s): shard map v%" PRIu64 " installed on %zu "
			 "server%s", job->id, dml_job_name(job), xj->map->version, a->nservers,
			 plural(a->nservers));
		a->assigned = 1;
	}
	dml_sched_routes_sync(s, job);
	job_note(s, job);
	if (a->assigned &&
	    (job->state != a->sent_state || job->assignment_version != a->sent_version)) {
		a->sent_state = job->state;
		a->sent_version = job->assignment_version;
		assign_all(s, job, 0, now);
	}
	dml_sched_ckpt_tick(s, job, now);
}

/* End the active job when it finished, start the next one, send what the
 * workers and servers of the active job must hear. */
static void jobs_advance(struct dml_sched *s, uint64_t now)
{
	struct dml_job *job;

	for (;;) {
		job = active_job(s);
		if (job && dml_job_finished(job)) {
			job_end(s, job, now);
			continue;
		}
		if (job) {
			active_sync(s, job, now);
			/* An assignment too large for max_meta failed it just now. */
			if (!dml_job_finished(job))
				return;
			continue;
		}
		if (!start_next(s, now))
			return;
	}
}

/*
 * Bring everything in line with the tables: log what changed, advance the
 * jobs, and save what changed (committed before the frames queued here
 * leave). touched (may be NULL) is a job a request just changed, to log.
 */
void jobs_sync(struct dml_sched *s, const struct dml_job *touched, uint64_t now)
{
	if (s->peers.stopping)
		return;
	if (touched)
		job_note(s, touched);
	jobs_advance(s, now);
	dml_sched_state_jobs(s, now);
}

/* ---- node events ---------------------------------------------------------- */

static void worker_registered(struct dml_sched *s, const struct dml_node *n, uint64_t now)
{
	struct dml_job *job = active_job(s);
	struct dml_job_candidate c = { n->node_id, node_rate(n) };
	const struct dml_job_worker *w;

	if (!job || dml_job_finished(job))
		return;
	w = dml_job_worker(job, n->node_id);
	if (w && w->live) {
		/* Still in the job, but a new process or connection: it has
		 * forgotten its assignment. The others' did not change. */
		if (s->act.assigned)
			(void)assign_send(s, job, n->node_id, now);
		return;
	}
	/* When it changed the assignment, jobs_sync sends it to everyone. */
	(void)dml_jobs_worker_available(job, &c, now);
}

static void server_registered(struct dml_sched *s, const struct dml_node *n, uint64_t now)
{
	struct dml_job *job = active_job(s);
	struct sched_job *xj = job ? dml_sched_job(s, job->id) : NULL;
	const Dml__ShardServer *was;
	struct sched_map_server *ms;
	char why[DML_NODE_ADDRESS_MAX + 64];

	if (!xj || !xj->map || dml_job_finished(job) || refused(s, n))
		return;
	/* It may have missed an EVICT while it was away. */
	dml_sched_evict_again(s, job, n->node_id);
	was = map_server(xj->map, n->node_id);
	ms = act_server(s, n->node_id);
	/* Its answer to the round, if any, went down with the old link. */
	if (ms && ms->ckpt_request) {
		snprintf(why, sizeof(why), "server %" PRIu32 " registered again", n->node_id);
		dml_sched_ckpt_abandon(s, job, why, now);
	}
	if (was && ms && (!n->address[0] || strcmp(was->address, n->address) == 0)) {
		/* It must confirm again that it holds the map. */
		ms->acked_version = 0;
		if (map_send(s, job, xj, ms, now) == 0)
			dml_info("job %" PRIu32 " (%s): shard map v%" PRIu64 " sent again to "
				 "server %" PRIu32, job->id, dml_job_name(job), xj->map->version,
				 n->node_id);
		return;
	}
	if (!n->address[0])
		return;
	if (was)
		snprintf(why, sizeof(why), "server %" PRIu32 " moved to %s: ", n->node_id,
			 n->address);
	else
		snprintf(why, sizeof(why), "server %" PRIu32 " joined: ", n->node_id);
	map_replan(s, job, why, now);
}

static void kick_cb(evutil_socket_t fd, short what, void *arg)
{
	struct dml_sched *s = arg;
	uint64_t now = dml_sched_now_ms();
	struct dml_job *job;

	for (size_t i = 0; i < s->nevents && !s->peers.stopping; i++) {
		const struct sched_node_event *e = &s->events[i];
		const struct dml_node *n = dml_nodes_find(s->nodes, e->role, e->node_id);

		if (e->dead) {
			if ((job = active_job(s)) != NULL &&
			    dml_jobs_worker_lost(job, e->node_id, e->reason, now))
				dml_sched_evict(s, job, e->node_id, "lost");
			continue;
		}
		/* It may have died again since it registered. */
		if (!n || n->state != DML__NODE_STATE__ALIVE)
			continue;
		if (e->role == DML__ROLE__WORKER)
			worker_registered(s, n, now);
		else
			server_registered(s, n, now);
	}
	s->nevents = 0;
	jobs_sync(s, NULL, now);
}

void dml_sched_jobs_node_changed(struct dml_sched *s, const struct dml_node *n,
				 Dml__NodeState old)
{
	int dead = n->state == DML__NODE_STATE__DEAD;
	int registered = n->state == DML__NODE_STATE__ALIVE &&
			 n->changed_ms == n->registered_ms;
	struct sched_node_event *e;

	/* Any change of an aggregator, or a worker's zone, may move routes. */
	if (n->role == DML__ROLE__AGGREGATOR || (n->role == DML__ROLE__WORKER && registered))
		s->routes.stale = 1;
	if (n->role == DML__ROLE__AGGREGATOR && s->kick)
		event_active(s->kick, EV_TIMEOUT, 1);
	/* A server that dies stays in its job's map; only workers are lost. */
	if (!((n->role == DML__ROLE__WORKER && (registered || dead)) ||
	      (n->role == DML__ROLE__SERVER && registered)))
		return;
	if (s->nevents == s->capevents) {
		s->capevents = s->capevents ? 2 * s->capevents : 16;
		s->events = dml_xrealloc(s->events, s->capevents * sizeof(*s->events));
	}
	e = &s->events[s->nevents++];
	e->role = n->role;
	e->node_id = n->node_id;
	e->dead = dead;
	snprintf(e->reason, sizeof(e->reason), "%s", n->reason);
	event_active(s->kick, EV_TIMEOUT, 1);
}

void dml_sched_jobs_tick(struct dml_sched *s)
{
	jobs_sync(s, NULL, dml_sched_now_ms());
}

/* ---- lifecycle ------------------------------------------------------------ */

int dml_sched_jobs_init(struct dml_sched *s)
{
	int rc = dml_jobs_new(&s->jobs);

	if (rc)
		return rc;
	s->kick = event_new(s->base, -1, 0, kick_cb, s);
	return s->kick ? 0 : DML_ENOMEM;
}

void dml_sched_jobs_free(struct dml_sched *s)
{
	if (s->kick)
		event_free(s->kick);
	for (size_t i = 0; i < s->nxjobs; i++)
		dml_mapplan_free(s->xjobs[i].map);
	free(s->xjobs);
	free(s->act.servers);
	free(s->ckpt_waiters);
	free(s->events);
	free(s->refused);
	dml_sched_routes_free(s);
	dml_jobs_free(s->jobs);
}
