/*
 * dml-sched's job side, what it sends (see sched_job_internal.h): the log
 * lines of a job's changes, ASSIGN to the workers, and the shard maps
 * planned over the alive servers (shard/mapplan.h) and sent to each of
 * them, with the servers that refused one.
 *
 * Every change is logged once, at info level: a job's state changes, the
 * events the job table records, and the shard maps sent and installed.
 *
 * Must never: block the loop, assign a worker before the job's tables are
 * installed, or send a frame larger than max_meta (a job whose map or
 * assignment would not fit fails with that reason).
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

/* Until this long after sending a map with no ACK yet, the reason says how
 * many servers are installing; then which ones it waits for. */
#define INSTALL_QUIET_MS 1000
#define ID_LIST_MAX 80

/* ---- small helpers ------------------------------------------------------- */

/* "1, 2, 3" or "1, 2 and 7 more", for reasons and log lines. */
struct id_list {
	char s[ID_LIST_MAX];
	size_t n, shown, len;
};

static void id_list_add(struct id_list *l, uint32_t id)
{
	int w = snprintf(l->s + l->len, sizeof(l->s) - l->len, "%s%" PRIu32,
			 l->n ? ", " : "", id);

	l->n++;
	/* Room is kept for " and N more". */
	if (w > 0 && l->shown + 1 == l->n && l->len + (size_t)w + 20 < sizeof(l->s)) {
		l->len += (size_t)w;
		l->shown++;
	} else {
		l->s[l->len] = '\0';
	}
}

static const char *id_list_str(struct id_list *l)
{
	if (l->shown < l->n)
		snprintf(l->s + l->len, sizeof(l->s) - l->len, " and %zu more",
			 l->n - l->shown);
	return l->s;
}

const char *plural(size_t n)
{
	return n == 1 ? "" : "s";
}

struct sched_job *dml_sched_job(struct dml_sched *s, uint32_t id)
{
	size_t lo = 0, hi = s->nxjobs;

	/* Appended in submission order, so sorted by id. */
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (s->xjobs[mid].id == id)
			return &s->xjobs[mid];
		if (s->xjobs[mid].id < id)
			lo = mid + 1;
		else
			hi = mid;
	}
	return NULL;
}

struct sched_job *dml_sched_job_add(struct dml_sched *s, uint32_t id)
{
	struct sched_job *xj;

	if (s->nxjobs == s->capxjobs) {
		s->capxjobs = s->capxjobs ? 2 * s->capxjobs : 16;
		s->xjobs = dml_xrealloc(s->xjobs, s->capxjobs * sizeof(*s->xjobs));
	}
	xj = &s->xjobs[s->nxjobs++];
	memset(xj, 0, sizeof(*xj));
	xj->id = id;
	return xj;
}

struct dml_job *active_job(struct dml_sched *s)
{
	return s->act.job ? dml_jobs_find(s->jobs, s->act.job) : NULL;
}

/* The spec servers and workers get: the workers chosen, as a count (a spec
 * with both workers and worker_ids set would not pass dml_job_spec_check). */
void wire_spec(const struct dml_job *job, const struct sched_job *xj,
	       Dml__JobSpec *out)
{
	*out = *job->spec;
	out->workers = xj->wire_workers;
	out->n_worker_ids = 0;
	out->worker_ids = NULL;
}

double node_rate(const struct dml_node *n)
{
	if (n->profile.examples_per_s > 0)
		return n->profile.examples_per_s;
	return n->profile.gflops > 0 ? n->profile.gflops : 1;
}

/* ---- logging ------------------------------------------------------------ */

/*
 * A server of the running job's map that is not alive: its rows answer no
 * one, so the job waits on it whatever its workers do. NULL when none.
 */
static const char *job_server_down(const struct dml_sched *s, const struct dml_job *job)
{
	struct sched_job *xj = dml_sched_job((struct dml_sched *)s, job->id);

	if (!xj || !xj->map || job->state != DML__JOB_STATE__RUNNING)
		return NULL;
	for (size_t i = 0; i < xj->map->n_servers; i++) {
		const struct dml_node *n = dml_nodes_find(s->nodes, DML__ROLE__SERVER,
							  xj->map->servers[i]->node_id);

		if (n && n->state == DML__NODE_STATE__ALIVE)
			continue;
		snprintf(xj->wait_reason, sizeof(xj->wait_reason), "waiting on server %" PRIu32
			 " (%s%s%.120s)", xj->map->servers[i]->node_id,
			 n ? dml_node_state_name(n->state) : "not registered", n ? ": " : "",
			 n ? n->reason : "");
		return xj->wait_reason;
	}
	return NULL;
}

/* The reason to show: a server of its map that is down; while the tables
 * of a running job are being installed or moved, that; rather than the
 * job table's "running on 2 workers". */
const char *job_reason(const struct dml_sched *s, const struct dml_job *job)
{
	const char *down = job_server_down(s, job);

	if (down)
		return down;
	if (s->act.job == job->id && s->act.reason[0] &&
	    job->state == DML__JOB_STATE__RUNNING)
		return s->act.reason;
	return job->reason;
}

/* An event that only repeats the state line just logged ("paused by
 * operator", "done: <reason>"). */
static int event_repeats(const char *ev, const struct dml_job *job, const char *reason)
{
	const char *state = dml_job_state_name(job->state);
	size_t n = strlen(state);

	if (strcmp(ev, reason) == 0)
		return 1;
	return strncmp(ev, state, n) == 0 && ev[n] == ':' && ev[n + 1] == ' ' &&
	       strcmp(ev + n + 2, reason) == 0;
}

/* One line per state change and per new event; a new reason alone (a
 * pending job's wait, the tables' installation) gets one when nothing else
 * was said. */
void job_note(struct dml_sched *s, const struct dml_job *job)
{
	struct sched_job *xj = dml_sched_job(s, job->id);
	const char *reason = job_reason(s, job);
	int said = 0, changed;
	size_t first;

	if (!xj)
		return;
	changed = job->state != xj->logged_state;
	if (changed) {
		dml_info("job %" PRIu32 " (%s): %s -> %s: %s", job->id, dml_job_name(job),
			 dml_job_state_name(xj->logged_state), dml_job_state_name(job->state),
			 reason);
		said = 1;
	}
	first = xj->logged_events;
	if (job->nevents - first > DML_JOB_EVENTS)
		first = job->nevents - DML_JOB_EVENTS;
	for (size_t k = first; k < job->nevents; k++) {
		const char *ev = job->events[k % DML_JOB_EVENTS];

		if (changed && event_repeats(ev, job, reason))
			continue;
		dml_info("job %" PRIu32 " (%s): %s", job->id, dml_job_name(job), ev);
		said = 1;
	}
	if (!said && strcmp(reason, xj->logged_reason) != 0)
		dml_info("job %" PRIu32 " (%s): %s", job->id, dml_job_name(job), reason);
	xj->logged_state = job->state;
	xj->logged_events = job->nevents;
	snprintf(xj->logged_reason, sizeof(xj->logged_reason), "%s", reason);
}

void job_fail(struct dml_job *job, uint64_t now, const char *fmt, ...)
{
	char why[DML_JOB_REASON_MAX + 1];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(why, sizeof(why), fmt, ap);
	va_end(ap);
	dml_jobs_fail(job, why, now);
}

/* ---- ASSIGN ------------------------------------------------------------- */

/*
 * Tell one worker what to do in the job now. An end state goes without
 * partitions. A worker without a registered connection is skipped: it gets
 * its assignment when it registers again. DML_EFRAME_META fails the job.
 */
int assign_send(struct dml_sched *s, struct dml_job *job, uint32_t worker,
		uint64_t now)
{
	struct session *ss = dml_sched_owner(s, DML__ROLE__WORKER, worker);
	struct sched_job *xj = dml_sched_job(s, job->id);
	Dml__Meta m = DML__META__INIT;
	Dml__Assignment a = DML__ASSIGNMENT__INIT;
	Dml__JobSpec spec;
	const char *via;
	size_t size, nparts;
	int rc;

	if (!ss || !xj)
		return 0;
	/* first: working the routes out again may bump the version */
	via = dml_sched_route(s, job, worker);
	dml_job_assignment(job, worker, &a);
	if (dml_job_finished(job))
		dml_job_assignment_clear(&a);
	a.aggregator = (char *)via;
	wire_spec(job, xj, &spec);
	m.type = DML__MSG_TYPE__ASSIGN;
	m.request_id = ++s->next_request;
	m.job = job->id;
	m.job_spec = &spec;
	m.assignment = &a;
	rc = dml_sched_send(ss, &m, &size);
	nparts = a.n_partitions;
	dml_job_assignment_clear(&a);
	if (rc == DML_EFRAME_META) {
		job_fail(job, now, "the assignment of worker %" PRIu32 " needs %zu bytes of "
			 "metadata, over max_meta (%" PRIu64 ")", worker, size,
			 s->conf->max_meta);
		return rc;
	}
	if (rc) {
		dml_debug("worker %" PRIu32 ": assignment not sent: %s", worker,
			  dml_strerror(rc));
		return 0;
	}
	s->st.assign_sent++;
	dml_debug("worker %" PRIu32 ": assigned job %" PRIu32 " v%" PRIu64 " (%s, %zu "
		  "partitions, start clock %" PRIu64 ", aggregator %s)", worker, job->id,
		  a.version, dml_job_state_name(a.state), nparts, a.start_clock,
		  via[0] ? via : "none");
	return 0;
}

/* Every live worker of the job (all_workers: every worker that took part). */
void assign_all(struct dml_sched *s, struct dml_job *job, int all_workers,
		uint64_t now)
{
	for (size_t i = 0; i < job->nworkers; i++) {
		if ((all_workers || job->workers[i].live) &&
		    assign_send(s, job, job->workers[i].node_id, now) != 0)
			return;
	}
}

/* ---- shard maps ------------------------------------------------------- */

int refused(const struct dml_sched *s, const struct dml_node *n)
{
	for (size_t i = 0; i < s->nrefused; i++)
		if (s->refused[i].node_id == n->node_id)
			return s->refused[i].incarnation == n->incarnation;
	return 0;
}

void refusal_add(struct dml_sched *s, uint32_t node_id, uint64_t incarnation)
{
	size_t i;

	for (i = 0; i < s->nrefused && s->refused[i].node_id != node_id; i++)
		;
	if (i == s->nrefused)
		s->refused = dml_xrealloc(s->refused, ++s->nrefused * sizeof(*s->refused));
	s->refused[i].node_id = node_id;
	s->refused[i].incarnation = incarnation;
}

/* A server a new map may place ranges on. */
static int server_usable(const struct dml_sched *s, const struct dml_node *n)
{
	return n->role == DML__ROLE__SERVER && n->state == DML__NODE_STATE__ALIVE &&
	       n->connected && n->address[0] && !refused(s, n);
}

const Dml__ShardServer *map_server(const Dml__ShardMap *map, uint32_t node_id)
{
	for (size_t i = 0; map && i < map->n_servers; i++)
		if (map->servers[i]->node_id == node_id)
			return map->servers[i];
	return NULL;
}

struct sched_map_server *act_server(struct dml_sched *s, uint32_t node_id)
{
	for (size_t i = 0; i < s->act.nservers; i++)
		if (s->act.servers[i].node_id == node_id)
			return &s->act.servers[i];
	return NULL;
}

/*
 * The servers a new map goes over: those of the old map (its rows live
 * there, dead or not) and every usable one, weighted by memory when each
 * reports it. *n gets the count; NULL when there is none.
 */
struct dml_mapplan_server *map_candidates(struct dml_sched *s,
					  const Dml__ShardMap *old, size_t *n)
{
	size_t total = dml_nodes_count(s->nodes), k = 0;
	struct dml_mapplan_server *srv = dml_xcalloc(total + 1, sizeof(*srv));
	int by_memory = 1;

	for (size_t i = 0; i < total; i++) {
		const struct dml_node *node = dml_nodes_at(s->nodes, i);
		const Dml__ShardServer *was = map_server(old, node->node_id);

		if (node->role != DML__ROLE__SERVER || (!was && !server_usable(s, node)))
			continue;
		srv[k].node_id = node->node_id;
		srv[k].address = node->address[0] || !was ? node->address : was->address;
		srv[k].weight = (double)node->profile.memory_bytes;
		by_memory &= node->profile.memory_bytes > 0;
		k++;
	}
	for (size_t i = 0; i < k && !by_memory; i++)
		srv[i].weight = 1;
	*n = k;
	if (k == 0) {
		free(srv);
		return NULL;
	}
	return srv;
}

/* Make map the job's newest; its servers must each ACK it. */
void map_set(struct dml_sched *s, struct sched_job *xj, Dml__ShardMap *map,
	     uint64_t now)
{
	struct sched_map_server *v = dml_xcalloc(map->n_servers + 1, sizeof(*v));

	for (size_t i = 0; i < map->n_servers; i++) {
		const struct sched_map_server *was = act_server(s, map->servers[i]->node_id);

		v[i].node_id = map->servers[i]->node_id;
		v[i].acked_version = was ? was->acked_version : 0;
	}
	free(s->act.servers);
	s->act.servers = v;
	s->act.nservers = map->n_servers;
	s->act.sent_ms = now;
	/* Random, so that no later run (after a scheduler restart, with the
	 * same job id) takes a server's log for its own. */
	if (!xj->run && (dml_random_bytes(&xj->run, sizeof(xj->run)) != 0 || !xj->run))
		xj->run = now | 1;
	map->run = xj->run;
	dml_mapplan_free(xj->map);
	xj->map = map;
}

/* SHARDMAP to one server of the active job's map, on its registered link. */
int map_send(struct dml_sched *s, struct dml_job *job, struct sched_job *xj,
	     struct sched_map_server *ms, uint64_t now)
{
	struct session *ss = dml_sched_owner(s, DML__ROLE__SERVER, ms->node_id);
	Dml__Meta m = DML__META__INIT;
	Dml__JobSpec spec;
	size_t size;
	int rc;

	/* A server that is not connected gets it when it registers again. */
	ms->request_id = 0;
	if (!ss)
		return 0;
	wire_spec(job, xj, &spec);
	m.type = DML__MSG_TYPE__SHARDMAP;
	m.request_id = ++s->next_request;
	m.job = job->id;
	m.shard_map = xj->map;
	m.job_spec = &spec;
	rc = dml_sched_send(ss, &m, &size);
	if (rc == DML_EFRAME_META) {
		job_fail(job, now, "shard map v%" PRIu64 " needs %zu bytes of metadata, over "
			 "max_meta (%" PRIu64 ")", xj->map->version, size, s->conf->max_meta);
		return rc;
	}
	if (rc) {
		dml_debug("server %" PRIu32 ": shard map not sent: %s", ms->node_id,
			  dml_strerror(rc));
		return 0;
	}
	ms->request_id = m.request_id;
	ms->sent_version = xj->map->version;
	s->st.shardmap_sent++;
	return 0;
}

void map_send_all(struct dml_sched *s, struct dml_job *job, struct sched_job *xj,
		  const char *why, uint64_t now)
{
	struct id_list ids = { 0 };

	for (size_t i = 0; i < s->act.nservers; i++) {
		id_list_add(&ids, s->act.servers[i].node_id);
		if (map_send(s, job, xj, &s->act.servers[i], now) != 0)
			return;
	}
	dml_info("job %" PRIu32 " (%s): %sshard map v%" PRIu64 " sent to server%s %s",
		 job->id, dml_job_name(job), why, xj->map->version, plural(ids.n),
		 id_list_str(&ids));
}

/* A new version of the active job's map over its servers and the usable
 * ones (a server that joined or moved). */
void map_replan(struct dml_sched *s, struct dml_job *job, const char *why,
		uint64_t now)
{
	struct sched_job *xj = dml_sched_job(s, job->id);
	struct dml_mapplan_server *srv;
	Dml__ShardMap *map;
	size_t n;
	int rc;

	if (!xj || !xj->map)
		return;
	srv = map_candidates(s, xj->map, &n);
	rc = dml_mapplan_build(job->spec, job->id, xj->map->version + 1, srv, n, &map);
	free(srv);
	if (rc) {
		job_fail(job, now, "cannot plan shard map v%" PRIu64 ": %s",
			 xj->map->version + 1, dml_strerror(rc));
		return;
	}
	dml_sched_ckpt_abandon(s, job, "the shard map changed", now);
	map_set(s, xj, map, now);
	map_send_all(s, job, xj, why, now);
}

/*
 * The reason a running job shows while a map is not installed everywhere:
 * "installing tables on 2 servers" (later versions: "installing shard map
 * v3 on 3 servers") for INSTALL_QUIET_MS, then the servers it still waits for
 * ("installing tables: waiting for server 2"); "" once every server of the
 * map has ACKed it. The quiet time keeps the log to one line per map while
 * the ACKs come in.
 */
void install_reason(struct dml_sched *s, const struct sched_job *xj, uint64_t now)
{
	struct sched_active *a = &s->act;
	struct id_list waiting = { 0 };

	for (size_t i = 0; i < a->nservers; i++)
		if (a->servers[i].acked_version != xj->map->version)
			id_list_add(&waiting, a->servers[i].node_id);
	if (waiting.n == 0)
		a->reason[0] = '\0';
	else if (!a->assigned && now - a->sent_ms < INSTALL_QUIET_MS)
		snprintf(a->reason, sizeof(a->reason), "installing tables on %zu server%s",
			 a->nservers, plural(a->nservers));
	else if (!a->assigned)
		snprintf(a->reason, sizeof(a->reason), "installing tables: waiting for "
			 "server%s %s", plural(waiting.n), id_list_str(&waiting));
	else if (now - a->sent_ms < INSTALL_QUIET_MS)
		snprintf(a->reason, sizeof(a->reason), "installing shard map v%" PRIu64
			 " on %zu server%s", xj->map->version, a->nservers,
			 plural(a->nservers));
	else
		snprintf(a->reason, sizeof(a->reason), "installing shard map v%" PRIu64
			 ": waiting for server%s %s", xj->map->version, plural(waiting.n),
			 id_list_str(&waiting));
}
