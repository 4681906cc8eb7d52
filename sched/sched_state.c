/*
 * dml-sched's state store (store/sched_store.h): what the scheduler saves
 * of its node and job tables, when, and how a restart takes them back.
 *
 * A node is saved when it registers and when it dies. A job is saved when
 * its state, assignment, shard map, installed map or events change, and its
 * figures (examples, clocks, metric) at most every FIGURES_SAVE_MS. The
 * changes of one turn of the loop share one synced commit, which runs
 * before the loop next polls: the ASSIGN and SHARDMAP frames a change
 * calls for are only queued in that turn, so none leaves before the change
 * is on disk.
 *
 * At start every node comes back SUSPECT (a dead one DEAD) and has
 * dead_after_ms to register again: a worker that does not is lost to its
 * job as if it had died. Every job comes back as it was; the active one
 * with its newest map, whose run id tells its servers that they hold its
 * tables and logs already, and its assignment, which each worker gets
 * again when it registers. Servers and workers keep training meanwhile.
 *
 * Must never: run on when a commit failed (a later restart would resume
 * older state than the servers and workers hold: the scheduler stops
 * instead, and they carry on without it until it is back), or start from
 * records it cannot read (it refuses, naming the file and the record).
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proto/dml_error.h"
#include "proto/job_spec.h"
#include "proto/log.h"
#include "shard/mapplan.h"
#include "sched/sched_internal.h"
#include "store/sched_store.h"
#include "store/store.h"
#include "proto/util.h"

#define FIGURES_SAVE_MS 1000

/* ---- saving --------------------------------------------------------------- */

static void commit_cb(evutil_socket_t fd, short what, void *arg)
{
	struct dml_sched *s = arg;
	char err[512];

	if (dml_sched_store_commit(s->state, err, sizeof(err)) == 0)
		return;
	dml_err("store: %s; stopping so that a restart resumes what the cluster did "
		"(servers and workers go on meanwhile)", err);
	s->state_failed = 1;
	event_base_loopbreak(s->base);
}

static void put(struct dml_sched *s, enum dml_sched_db db, uint64_t key,
		const ProtobufCMessage *msg)
{
	size_t len = protobuf_c_message_get_packed_size(msg);
	uint8_t *buf = dml_xmalloc(len + 1);
	char err[512];

	protobuf_c_message_pack(msg, buf);
	if (dml_sched_store_put(s->state, db, key, buf, len, err, sizeof(err)) != 0) {
		dml_err("store: %s; stopping", err);
		s->state_failed = 1;
		event_base_loopbreak(s->base);
	} else {
		event_active(s->state_ev, EV_TIMEOUT, 0);
	}
	free(buf);
}

static uint64_t node_key(uint32_t role, uint32_t node_id)
{
	return (uint64_t)role << 32 | node_id;
}

void dml_sched_state_node(struct dml_sched *s, const struct dml_node *n)
{
	Dml__NodeInfo info;
	Dml__Profile p;

	if (!s->state || s->state_failed)
		return;
	dml_sched_node_info(n, dml_sched_now_ms(), &info, &p, NULL);
	put(s, DML_SCHED_DB_NODES, node_key(n->role, n->node_id), &info.base);
}

/* What changes of a job are saved at once; its figures wait. */
static void job_mark(const struct dml_sched *s, const struct dml_job *job,
		     const struct sched_job *xj, struct sched_job_mark *m)
{
	/* Compared with memcmp: the padding must compare equal too. */
	memset(m, 0, sizeof(*m));
	m->state = job->state;
	m->assignment = job->assignment_version;
	m->map = xj->map ? xj->map->version : 0;
	m->events = job->nevents;
	m->installed = s->act.job == job->id ? s->act.installed_version : 0;
}

static void job_save(struct dml_sched *s, const struct dml_job *job, struct sched_job *xj,
		     uint64_t now)
{
	Dml__JobRecord *r = dml_job_record(job, now);

	r->map = xj->map;
	r->wire_workers = xj->wire_workers;
	r->installed_version = s->act.job == job->id ? s->act.installed_version
						      : xj->saved.installed;
	put(s, DML_SCHED_DB_JOBS, job->id, &r->base);
	r->map = NULL;
	dml_job_record_free(r);
	job_mark(s, job, xj, &xj->saved);
	xj->figures_dirty = 0;
	xj->saved_ms = now;
}

void dml_sched_state_figures(struct dml_sched *s, uint32_t job)
{
	struct sched_job *xj = dml_sched_job(s, job);

	if (xj)
		xj->figures_dirty = 1;
}

void dml_sched_state_jobs(struct dml_sched *s, uint64_t now)
{
	if (!s->state || s->state_failed)
		return;
	for (size_t i = 0; i < s->nxjobs; i++) {
		struct sched_job *xj = &s->xjobs[i];
		struct dml_job *job = dml_jobs_find(s->jobs, xj->id);
		struct sched_job_mark m;

		if (!job)
			continue;
		job_mark(s, job, xj, &m);
		if (memcmp(&m, &xj->saved, sizeof(m)) != 0 ||
		    (xj->figures_dirty && now - xj->saved_ms >= FIGURES_SAVE_MS))
			job_save(s, job, xj, now);
	}
}

/* ---- restoring ------------------------------------------------------------ */

struct restore {
	struct dml_sched *s;
	const char *path;
	uint64_t now;
	size_t n;
	char *err;
	size_t errlen;
};

static int restore_node(uint64_t key, const void *val, size_t len, void *arg)
{
	struct restore *rs = arg;
	Dml__NodeInfo *info = dml__node_info__unpack(NULL, len, val);
	int rc = info && node_key(info->role, info->node_id) == key ? 0 : DML_ECONF;

	if (!rc)
		rc = dml_nodes_restore(rs->s->nodes, info, rs->now);
	if (rc)
		snprintf(rs->err, rs->errlen, "%s: node record %" PRIu64 ":%" PRIu64 " does not "
			 "decode or is not a node", rs->path, key >> 32, key & UINT32_MAX);
	dml__node_info__free_unpacked(info, NULL);
	rs->n += rc == 0;
	return rc ? DML_ECONF : 0;
}

/* The active job's servers: each must confirm its map again. */
static void active_restore(struct dml_sched *s, const struct dml_job *job,
			   const struct sched_job *xj, uint64_t installed, uint64_t now)
{
	memset(&s->act, 0, sizeof(s->act));
	s->act.job = job->id;
	s->act.servers = dml_xcalloc(xj->map->n_servers + 1, sizeof(*s->act.servers));
	s->act.nservers = xj->map->n_servers;
	for (size_t i = 0; i < xj->map->n_servers; i++)
		s->act.servers[i].node_id = xj->map->servers[i]->node_id;
	s->act.sent_ms = now;
	s->act.installed_version = installed;
	/* Its workers were assigned: each gets it again when it registers. */
	s->act.assigned = installed > 0;
	s->act.sent_state = job->state;
	s->act.sent_version = job->assignment_version;
}

static int restore_job_record(struct restore *rs, const Dml__JobRecord *r, char *why,
			      size_t whylen)
{
	struct dml_sched *s = rs->s;
	struct sched_job *xj;
	struct dml_job *job;
	int rc = dml_jobs_restore(s->jobs, r, rs->now, why, whylen);

	if (!rc && r->map && r->map->job != r->status->id) {
		snprintf(why, whylen, "the map of job %" PRIu32, r->map->job);
		rc = DML_ECONF;
	}
	if (!rc && r->map && dml_mapplan_check(r->map, r->status->spec, why, whylen) != 0)
		rc = DML_ECONF;
	if (rc)
		return rc;
	job = dml_jobs_find(s->jobs, r->status->id);
	xj = dml_sched_job_add(s, job->id);
	xj->map = r->map ? dml_mapplan_copy(r->map) : NULL;
	xj->run = r->map ? r->map->run : 0;
	xj->wire_workers = r->wire_workers;
	xj->logged_state = job->state;
	xj->logged_events = job->nevents;
	snprintf(xj->logged_reason, sizeof(xj->logged_reason), "%s", job->reason);
	if (!dml_job_finished(job))
		dml_job_event(job, "the scheduler restarted: job taken back from its store at "
			      "map v%" PRIu64, xj->map ? xj->map->version : 0);
	if (job->state == DML__JOB_STATE__RUNNING || job->state == DML__JOB_STATE__PAUSED) {
		if (s->act.job || !xj->map) {
			snprintf(why, whylen, "%s", s->act.job ? "a second active job"
							      : "active without a map");
			return DML_ECONF;
		}
		active_restore(s, job, xj, r->installed_version, rs->now);
	}
	job_mark(s, job, xj, &xj->saved);
	xj->saved.installed = r->installed_version;
	xj->saved_ms = rs->now;
	return 0;
}

static int restore_job(uint64_t key, const void *val, size_t len, void *arg)
{
	struct restore *rs = arg;
	Dml__JobRecord *r = dml__job_record__unpack(NULL, len, val);
	char why[256] = "does not decode";
	int rc = DML_ECONF;

	if (r && r->status && r->status->id == key)
		rc = restore_job_record(rs, r, why, sizeof(why));
	else if (r)
		snprintf(why, sizeof(why), "holds another job");
	if (rc)
		snprintf(rs->err, rs->errlen, "%s: job record %" PRIu64 ": %s", rs->path, key,
			 why);
	dml__job_record__free_unpacked(r, NULL);
	rs->n += rc == 0;
	return rc ? DML_ECONF : 0;
}

/* A live worker of the active job that the node table lacks (it registered
 * in the turn the scheduler died) must still register or be lost. */
static void workers_expected(struct dml_sched *s, uint64_t now)
{
	struct dml_job *job = s->act.job ? dml_jobs_find(s->jobs, s->act.job) : NULL;

	for (size_t i = 0; job && i < job->nworkers; i++) {
		Dml__NodeInfo info = DML__NODE_INFO__INIT;

		info.role = DML__ROLE__WORKER;
		info.node_id = job->workers[i].node_id;
		if (job->workers[i].live &&
		    !dml_nodes_find(s->nodes, DML__ROLE__WORKER, info.node_id))
			(void)dml_nodes_restore(s->nodes, &info, now);
	}
}

/* "resumed 3 jobs (job 3 running at map v2, assignment v4)". */
static void say_resumed(struct dml_sched *s, const char *path, size_t nodes, uint64_t t0)
{
	struct dml_job *job = s->act.job ? dml_jobs_find(s->jobs, s->act.job) : NULL;
	char active[160] = "";

	if (job)
		snprintf(active, sizeof(active), ": job %" PRIu32 " %s at shard map v%" PRIu64
			 ", assignment v%" PRIu64, job->id, dml_job_state_name(job->state),
			 dml_sched_job(s, job->id)->map->version, job->assignment_version);
	dml_info("store %s: resumed %zu job%s%s, and %zu nodes, which have %u ms to "
		 "register again (%.1f ms)", path, s->nxjobs, s->nxjobs == 1 ? "" : "s", active,
		 nodes, s->conf->dead_after_ms, (double)(dml_now_ns() - t0) / 1e6);
}

int dml_sched_state_open(struct dml_sched *s)
{
	const char *path = s->conf->store_path;
	char err[512] = "";
	struct restore rs = { s, path, dml_sched_now_ms(), 0, err, sizeof(err) };
	uint64_t t0 = dml_now_ns();
	size_t nodes;
	int rc;

	if (!path[0]) {
		dml_warn("no [store] path: a restart of dml-sched forgets its jobs");
		return 0;
	}
	rc = dml_sched_store_open(path, s->conf->store_map_size, &s->state, err, sizeof(err));
	if (!rc)
		rc = dml_sched_store_each(s->state, DML_SCHED_DB_NODES, restore_node, &rs, err,
					  sizeof(err));
	nodes = rs.n;
	rs.n = 0;
	if (!rc)
		rc = dml_sched_store_each(s->state, DML_SCHED_DB_JOBS, restore_job, &rs, err,
					  sizeof(err));
	if (rc) {
		dml_err("%s", err[0] ? err : dml_strerror(rc));
		return rc;
	}
	workers_expected(s, rs.now);
	s->state_ev = event_new(s->base, -1, 0, commit_cb, s);
	if (!s->state_ev)
		return DML_ENOMEM;
	if (nodes || rs.n)
		say_resumed(s, path, nodes, t0);
	return 0;
}

int dml_sched_state_failed(const struct dml_sched *s)
{
	return s->state_failed;
}

void dml_sched_state_close(struct dml_sched *s)
{
	char err[512];

	/* A clean stop keeps what the last turn changed. */
	if (s->state && !s->state_failed &&
	    dml_sched_store_commit(s->state, err, sizeof(err)) != 0)
		dml_err("store: %s", err);
	if (s->state_ev)
		event_free(s->state_ev);
	dml_store_close(s->state);
	s->state = NULL;
	s->state_ev = NULL;
}
