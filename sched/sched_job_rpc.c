/*
 * dml-sched's job side, the requests it answers: control clients SUBMIT
 * jobs, list them (JOBS) and PAUSE/RESUME/STOP them (JOB_CONTROL); anyone
 * authenticated may ask a job's shard map (SHARDMAP); workers report
 * PROGRESS, servers name STRAGGLERs, and servers and workers answer the
 * frames the scheduler sent (ACK, ERROR).
 *
 * Must never: answer PROGRESS at all, close the connection of a request it
 * refuses, or send a frame larger than max_meta.
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

#define PEER_TEXT_MAX 120

/* A peer's text, bounded and printable, for reasons and log lines. */
static void text_clean(char *dst, size_t len, const char *src)
{
	size_t i;

	for (i = 0; src && src[i] && i + 1 < len && i < PEER_TEXT_MAX; i++) {
		unsigned char c = (unsigned char)src[i];

		dst[i] = (c < 0x20 || c > 0x7e) ? '?' : (char)c;
	}
	dst[i] = '\0';
}

/* ---- requests ------------------------------------------------------------- */

static int control_only(struct session *ss, const Dml__Meta *m)
{
	if (ss->role == DML__ROLE__CONTROL)
		return 1;
	dml_sched_reply_error(ss, m->request_id, DML_EROLE, "only control clients may send %s",
			      dml_msg_type_name(m->type));
	return 0;
}

void dml_sched_handle_submit(struct session *ss, const Dml__Meta *m)
{
	struct dml_sched *s = ss->sched;
	Dml__Meta r = DML__META__INIT;
	uint64_t now = dml_sched_now_ms();
	char err[256];
	struct sched_job *xj;
	struct dml_job *job;
	uint32_t id;
	int rc;

	if (!control_only(ss, m))
		return;
	rc = dml_jobs_submit(s->jobs, m->job_spec, now, &id, err, sizeof(err));
	if (rc) {
		dml_sched_reply_error(ss, m->request_id, rc, "job spec: %s", err);
		return;
	}
	job = dml_jobs_find(s->jobs, id);
	xj = dml_sched_job_add(s, id);
	/* The line below says it all: "submitted" is not repeated. */
	xj->logged_state = job->state;
	xj->logged_events = job->nevents;
	snprintf(xj->logged_reason, sizeof(xj->logged_reason), "%s", job->reason);
	dml_info("job %" PRIu32 " (%s): submitted from %s: app %s, %zu table%s, staleness "
		 "%" PRId64 ", batch %" PRIu32, id, dml_job_name(job),
		 dml_conn_peer(ss->peer.conn), job->spec->app, job->spec->n_tables,
		 plural(job->spec->n_tables), job->spec->staleness, job->spec->batch_size);
	r.type = DML__MSG_TYPE__SUBMIT_REPLY;
	r.request_id = m->request_id;
	r.job = id;
	(void)dml_sched_send(ss, &r, NULL);
	jobs_sync(s, job, now);
}

/* The zone entry of st for zone, added when new. */
static Dml__ZoneRate *zone_rate(Dml__JobStatus *st, const char *zone)
{
	Dml__ZoneRate *z;

	for (size_t k = 0; k < st->n_zones; k++)
		if (strcmp(st->zones[k]->zone, zone) == 0)
			return st->zones[k];
	z = dml_xmalloc(sizeof(*z));
	dml__zone_rate__init(z);
	z->zone = dml_xstrdup(zone);
	st->zones = dml_xrealloc(st->zones, (st->n_zones + 1) * sizeof(*st->zones));
	st->zones[st->n_zones++] = z;
	return z;
}

/* The aggregator at address, with its counters, in st->aggregators once. */
static void status_add_aggregator(struct dml_sched *s, Dml__JobStatus *st,
				  const char *address, uint64_t now)
{
	const struct dml_node *n = dml_nodes_aggregator_at(s->nodes, address);
	Dml__NodeInfo info;
	Dml__Profile p;
	Dml__AggregatorStats a;
	Dml__NodeInfo *copy;

	if (!n)
		return;
	for (size_t k = 0; k < st->n_aggregators; k++)
		if (st->aggregators[k]->node_id == n->node_id)
			return;
	dml_sched_node_info(n, now, &info, &p, &a);
	info.profile = NULL;
	copy = dml_msg_copy(&info.base);
	if (!copy)
		return;
	st->aggregators = dml_xrealloc(st->aggregators,
				       (st->n_aggregators + 1) * sizeof(*st->aggregators));
	st->aggregators[st->n_aggregators++] = copy;
}

/* JobStatus as JOBS_REPLY shows it: the job table's, with the node table's
 * word on live workers and their zones (each zone's rate summed), and the
 * scheduler's on maps and on the aggregators workers route through.
 * *reason gets what st->reason held, for status_release. */
static Dml__JobStatus *status_build(struct dml_sched *s, struct dml_job *job, uint64_t now,
				    char **reason)
{
	Dml__JobStatus *st = dml_job_status(job, now);
	const struct sched_job *xj = dml_sched_job(s, job->id);
	char ckpt[DML_JOB_REASON_MAX + 64];

	st->shard_map_version = xj && xj->map ? xj->map->version : 0;
	if (s->act.job == job->id && dml_sched_ckpt_state(s, ckpt, sizeof(ckpt))[0])
		st->checkpoint_state = dml_xstrdup(ckpt);
	*reason = st->reason;
	st->reason = (char *)job_reason(s, job);
	for (size_t i = 0; i < st->n_workers; i++) {
		Dml__WorkerStatus *ws = st->workers[i];
		const struct dml_node *n = dml_nodes_find(s->nodes, DML__ROLE__WORKER,
							  ws->worker);
		const char *via;

		/* A live member is as alive as its node; a lost one stays dead. */
		if (n && ws->state == DML__NODE_STATE__ALIVE)
			ws->state = n->state;
		if (n && n->zone[0])
			ws->zone = dml_xstrdup(n->zone);
		via = dml_sched_route(s, job, ws->worker);
		if (via[0]) {
			ws->aggregator = dml_xstrdup(via);
			status_add_aggregator(s, st, via, now);
		}
		if (ws->state != DML__NODE_STATE__DEAD) {
			Dml__ZoneRate *z = zone_rate(st, n ? n->zone : "");

			z->workers++;
			z->examples_per_s += ws->examples_per_s;
		}
	}
	return st;
}

static void status_release(Dml__JobStatus *st, char *reason)
{
	st->reason = reason;
	dml_job_status_free(st);
}

void dml_sched_handle_jobs(struct session *ss, const Dml__Meta *m)
{
	struct dml_sched *s = ss->sched;
	Dml__Meta r = DML__META__INIT;
	uint64_t now = dml_sched_now_ms();
	size_t n, size;
	Dml__JobStatus **sts;
	char **reasons;
	struct dml_job *one = NULL;

	if (m->job && !(one = dml_jobs_find(s->jobs, m->job))) {
		dml_sched_reply_error(ss, m->request_id, DML_ENOTFOUND, "no job %" PRIu32,
				      m->job);
		return;
	}
	n = one ? 1 : dml_jobs_count(s->jobs);
	sts = dml_xcalloc(n + 1, sizeof(*sts));
	reasons = dml_xcalloc(n + 1, sizeof(*reasons));
	for (size_t i = 0; i < n; i++) {
		struct dml_job *job = one ? one : dml_jobs_at(s->jobs, i);

		sts[i] = status_build(s, job, now, &reasons[i]);
	}
	r.type = DML__MSG_TYPE__JOBS_REPLY;
	r.request_id = m->request_id;
	r.n_jobs = n;
	r.jobs = sts;
	if (dml_sched_send(ss, &r, &size) == DML_EFRAME_META)
		dml_sched_reply_error(ss, m->request_id, DML_EFRAME_META,
				      "%zu jobs need %zu bytes of metadata, over max_meta "
				      "(%" PRIu64 "); ask for one job", n, size,
				      s->conf->max_meta);
	for (size_t i = 0; i < n; i++)
		status_release(sts[i], reasons[i]);
	free(sts);
	free(reasons);
}

/* `dmlctl checkpoint JOB [delete CLOCK]`: taken (or deleted), or why not. */
static void checkpoint_control(struct session *ss, const Dml__Meta *m, uint64_t now)
{
	struct dml_sched *s = ss->sched;
	struct dml_job *job = dml_jobs_find(s->jobs, m->job);
	char err[DML_JOB_REASON_MAX + 1] = "";
	int rc;

	if (!job) {
		dml_sched_reply_error(ss, m->request_id, DML_ENOTFOUND, "no job %" PRIu32, m->job);
		return;
	}
	if (m->action == DML__JOB_ACTION__CHECKPOINT_NOW) {
		dml_sched_ckpt_ask(s, ss, job, m, now);
		jobs_sync(s, job, now);
		return;
	}
	rc = dml_sched_ckpt_drop(s, job, m->clock, now, err, sizeof(err));
	if (rc) {
		dml_sched_reply_error(ss, m->request_id, rc, "%s", err);
		return;
	}
	dml_sched_reply_plain(ss, DML__MSG_TYPE__ACK, m->request_id);
	jobs_sync(s, job, now);
}

void dml_sched_handle_job_control(struct session *ss, const Dml__Meta *m)
{
	struct dml_sched *s = ss->sched;
	uint64_t now = dml_sched_now_ms();
	char err[DML_JOB_REASON_MAX + 1];
	int rc;

	if (!control_only(ss, m))
		return;
	if (m->action == DML__JOB_ACTION__CHECKPOINT_NOW ||
	    m->action == DML__JOB_ACTION__CHECKPOINT_DROP) {
		checkpoint_control(ss, m, now);
		return;
	}
	rc = dml_jobs_control(s->jobs, m->job, m->action, now, err, sizeof(err));
	if (rc) {
		dml_sched_reply_error(ss, m->request_id, rc, "%s", err);
		return;
	}
	dml_sched_reply_plain(ss, DML__MSG_TYPE__ACK, m->request_id);
	jobs_sync(s, dml_jobs_find(s->jobs, m->job), now);
}

void dml_sched_handle_shardmap(struct session *ss, const Dml__Meta *m)
{
	struct dml_sched *s = ss->sched;
	Dml__Meta r = DML__META__INIT;
	uint32_t id = m->job ? m->job : s->act.job;
	struct dml_job *job = id ? dml_jobs_find(s->jobs, id) : NULL;
	struct sched_job *xj = job ? dml_sched_job(s, id) : NULL;
	Dml__JobSpec spec;
	size_t size;

	if (!id) {
		dml_sched_reply_error(ss, m->request_id, DML_ENOTFOUND, "no job is running");
		return;
	}
	if (!job) {
		dml_sched_reply_error(ss, m->request_id, DML_ENOTFOUND, "no job %" PRIu32, id);
		return;
	}
	if (!xj || !xj->map) {
		dml_sched_reply_error(ss, m->request_id, DML_ENOTFOUND,
				      "job %" PRIu32 " has no shard map yet", id);
		return;
	}
	wire_spec(job, xj, &spec);
	r.type = DML__MSG_TYPE__SHARDMAP_REPLY;
	r.request_id = m->request_id;
	r.job = id;
	r.shard_map = xj->map;
	r.job_spec = &spec;
	if (dml_sched_send(ss, &r, &size) == DML_EFRAME_META)
		dml_sched_reply_error(ss, m->request_id, DML_EFRAME_META,
				      "shard map v%" PRIu64 " needs %zu bytes of metadata, "
				      "over max_meta (%" PRIu64 ")", xj->map->version, size,
				      s->conf->max_meta);
}

void dml_sched_handle_progress(struct session *ss, const Dml__Meta *m)
{
	struct dml_sched *s = ss->sched;
	uint32_t id = m->job ? m->job : m->progress->job;
	struct dml_job *job = dml_jobs_find(s->jobs, id);
	uint64_t now = dml_sched_now_ms();
	int rc;

	/* Never answered: an ERROR would make the worker's link register again. */
	if (ss->role != DML__ROLE__WORKER || !job) {
		dml_debug("%s %" PRIu32 ": progress for unknown job %" PRIu32 " ignored",
			  dml_node_role_name(ss->role), ss->node_id, id);
		return;
	}
	rc = dml_jobs_progress(job, ss->node_id, m->progress, now);
	if (rc >= 0)
		dml_sched_state_figures(s, id);
	if (rc < 0)
		dml_debug("worker %" PRIu32 ": progress for job %" PRIu32 " it is not "
			  "part of: %s", ss->node_id, id, dml_strerror(rc));
	else if (rc == 1)
		jobs_sync(s, job, now);
}

/*
 * STRAGGLER from a server: pulls of the active job wait for one worker that
 * makes no clock. Once the wait is long enough for that worker (job_place.c
 * decides) it is set aside and every server drops its clock.
 */
void dml_sched_handle_straggler(struct session *ss, const Dml__Meta *m)
{
	struct dml_sched *s = ss->sched;
	struct dml_job *job = active_job(s);
	uint64_t now = dml_sched_now_ms();

	if (ss->role != DML__ROLE__SERVER || !job || job->id != m->job)
		return;
	dml_debug("server %" PRIu32 ": job %" PRIu32 "'s pulls waited %" PRIu64 " ms for "
		  "worker %" PRIu32 " at clock %" PRIu64, ss->node_id, m->job,
		  m->held_us / 1000, m->worker, m->clock);
	if (!dml_jobs_worker_straggles(job, m->worker, m->clock, m->held_us / 1000, now))
		return;
	dml_sched_evict(s, job, m->worker, "stalled");
	jobs_sync(s, job, now);
}

/* ERROR from a server for a SHARDMAP: the job cannot run on it. */
static void server_refused(struct dml_sched *s, struct sched_map_server *ms,
			   const Dml__Meta *m, uint64_t now)
{
	const struct dml_node *n = dml_nodes_find(s->nodes, DML__ROLE__SERVER, ms->node_id);
	struct dml_job *job = active_job(s);
	char text[PEER_TEXT_MAX + 1];

	text_clean(text, sizeof(text), m->error->message);
	dml_warn("server %" PRIu32 " refused shard map v%" PRIu64 " of job %" PRIu32 ": %s "
		 "(%s); it is left out of later maps until it restarts", ms->node_id,
		 ms->sent_version, s->act.job, text, dml_strerror(m->error->code));
	if (n)
		refusal_add(s, n->node_id, n->incarnation);
	ms->request_id = 0;
	if (job)
		job_fail(job, now, "server %" PRIu32 " refused shard map v%" PRIu64 ": %s",
			 ms->node_id, ms->sent_version, text);
}

/* ERROR from a worker for an ASSIGN of the active job: it cannot run it. */
static void worker_refused(struct dml_sched *s, struct session *ss, const Dml__Meta *m,
			   uint64_t now)
{
	struct dml_job *job = active_job(s);
	char text[PEER_TEXT_MAX + 1], why[PEER_TEXT_MAX + 32];

	text_clean(text, sizeof(text), m->error->message);
	dml_warn("worker %" PRIu32 " refused its assignment (request %" PRIu64 "): %s",
		 ss->node_id, m->request_id, text);
	snprintf(why, sizeof(why), "refused its assignment: %s", text);
	if (job && dml_jobs_worker_lost(job, ss->node_id, why, now))
		dml_sched_evict(s, job, ss->node_id, "lost");
}

void dml_sched_handle_reply(struct session *ss, const Dml__Meta *m)
{
	struct dml_sched *s = ss->sched;
	struct sched_map_server *ms = NULL;
	uint64_t now = dml_sched_now_ms();
	int ack = m->type == DML__MSG_TYPE__ACK;

	if (ss->role == DML__ROLE__SERVER)
		ms = act_server(s, ss->node_id);
	if (ms && dml_sched_ckpt_reply(s, ms, m, now)) {
		jobs_sync(s, NULL, now);
		return;
	}
	if (ms && ms->request_id && ms->request_id == m->request_id) {
		if (ack) {
			ms->acked_version = ms->sent_version;
			dml_debug("server %" PRIu32 ": shard map v%" PRIu64 " installed",
				  ss->node_id, ms->sent_version);
		} else {
			server_refused(s, ms, m, now);
		}
	} else if (ss->role == DML__ROLE__WORKER && s->act.job &&
		   m->request_id > s->act.first_request && m->request_id <= s->next_request) {
		if (!ack)
			worker_refused(s, ss, m, now);
	} else {
		/* A reply to something older (a map replaced since) or unknown. */
		dml_debug("%s %" PRIu32 ": %s for request %" PRIu64 " ignored",
			  dml_node_role_name(ss->role), ss->node_id,
			  dml_msg_type_name(m->type), m->request_id);
		return;
	}
	jobs_sync(s, NULL, now);
}
