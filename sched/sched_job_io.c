/*
 * dml-sched's job side: the job table (jobs.h) and the I/O it calls for.
 *
 * Control clients SUBMIT jobs, list them (JOBS) and PAUSE/RESUME/STOP them
 * (JOB_CONTROL); anyone authenticated may ask a job's shard map (SHARDMAP).
 * One job is active at a time. When none is, the oldest pending job starts
 * on the alive workers as soon as it can; its shard map v1 is planned over
 * the alive servers (shard/mapplan.h) and sent to each of them, and once
 * every server of the map has ACKed it, every live worker of the job gets
 * ASSIGN. From then on each change of the job's state or assignment is sent
 * to its live workers, and an end state to every worker that took part.
 * A server that registers while a job is active gets the job's map again
 * when it is in it, or makes a new version that includes it; a server that
 * refuses a map fails the job and is left out of later maps until it
 * restarts. Worker deaths and (re)registrations come from the node table's
 * callback through a queue that the loop drains (the kick event), so that a
 * registration is answered before its worker is assigned anything.
 *
 * Every change is logged once, at info level: a job's state changes, the
 * events jobs.c records, and the shard maps sent and installed.
 *
 * Must never: block the loop, answer PROGRESS at all, assign a worker before
 * the job's tables are installed, or send a frame larger than max_meta (a
 * job whose map or assignment would not fit fails with that reason).
 */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dml_error.h"
#include "frame.h"
#include "job_spec.h"
#include "jobs.h"
#include "log.h"
#include "mapplan.h"
#include "nodes.h"
#include "sched_internal.h"
#include "util.h"

/* Until this long after sending a map with no ACK yet, the reason says how
 * many servers are installing; then which ones it waits for. */
#define INSTALL_QUIET_MS 1000
#define ID_LIST_MAX 80
#define PEER_TEXT_MAX 120

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

static const char *plural(size_t n)
{
	return n == 1 ? "" : "s";
}

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

static struct dml_job *active_job(struct dml_sched *s)
{
	return s->act.job ? dml_jobs_find(s->jobs, s->act.job) : NULL;
}

/* The spec servers and workers get: the workers chosen, as a count (a spec
 * with both workers and worker_ids set would not pass dml_job_spec_check). */
static void wire_spec(const struct dml_job *job, const struct sched_job *xj,
		      Dml__JobSpec *out)
{
	*out = *job->spec;
	out->workers = xj->wire_workers;
	out->n_worker_ids = 0;
	out->worker_ids = NULL;
}

static double node_rate(const struct dml_node *n)
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
static const char *job_reason(const struct dml_sched *s, const struct dml_job *job)
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
static void job_note(struct dml_sched *s, const struct dml_job *job)
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

static void job_fail(struct dml_job *job, uint64_t now, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static void job_fail(struct dml_job *job, uint64_t now, const char *fmt, ...)
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
static int assign_send(struct dml_sched *s, struct dml_job *job, uint32_t worker,
		       uint64_t now)
{
	struct session *ss = dml_sched_owner(s, DML__ROLE__WORKER, worker);
	struct sched_job *xj = dml_sched_job(s, job->id);
	Dml__Meta m = DML__META__INIT;
	Dml__Assignment a = DML__ASSIGNMENT__INIT;
	Dml__JobSpec spec;
	size_t size, nparts;
	int rc;

	if (!ss || !xj)
		return 0;
	dml_job_assignment(job, worker, &a);
	if (dml_job_finished(job))
		dml_job_assignment_clear(&a);
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
		  "partitions, start clock %" PRIu64 ")", worker, job->id, a.version,
		  dml_job_state_name(a.state), nparts, a.start_clock);
	return 0;
}

/* Every live worker of the job (all_workers: every worker that took part). */
static void assign_all(struct dml_sched *s, struct dml_job *job, int all_workers,
		       uint64_t now)
{
	for (size_t i = 0; i < job->nworkers; i++) {
		if ((all_workers || job->workers[i].live) &&
		    assign_send(s, job, job->workers[i].node_id, now) != 0)
			return;
	}
}

/* ---- shard maps ------------------------------------------------------- */

static int refused(const struct dml_sched *s, const struct dml_node *n)
{
	for (size_t i = 0; i < s->nrefused; i++)
		if (s->refused[i].node_id == n->node_id)
			return s->refused[i].incarnation == n->incarnation;
	return 0;
}

static void refusal_add(struct dml_sched *s, uint32_t node_id, uint64_t incarnation)
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

static const Dml__ShardServer *map_server(const Dml__ShardMap *map, uint32_t node_id)
{
	for (size_t i = 0; map && i < map->n_servers; i++)
		if (map->servers[i]->node_id == node_id)
			return map->servers[i];
	return NULL;
}

static struct sched_map_server *act_server(struct dml_sched *s, uint32_t node_id)
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
static struct dml_mapplan_server *map_candidates(struct dml_sched *s,
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
static void map_set(struct dml_sched *s, struct sched_job *xj, Dml__ShardMap *map,
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
static int map_send(struct dml_sched *s, struct dml_job *job, struct sched_job *xj,
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

static void map_send_all(struct dml_sched *s, struct dml_job *job, struct sched_job *xj,
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
static void map_replan(struct dml_sched *s, struct dml_job *job, const char *why,
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
static void install_reason(struct dml_sched *s, const struct sched_job *xj, uint64_t now)
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
static void jobs_sync(struct dml_sched *s, const struct dml_job *touched, uint64_t now)
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

/* JobStatus as JOBS_REPLY shows it: the job table's, with the node table's
 * word on live workers and the scheduler's on maps. *reason gets what
 * st->reason held, for status_release. */
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

		/* A live member is as alive as its node; a lost one stays dead. */
		if (n && ws->state == DML__NODE_STATE__ALIVE)
			ws->state = n->state;
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
	dml_jobs_free(s->jobs);
}
