/*
 * dml-sched's zone aggregator routes: which aggregator each worker of the
 * active job sends its pushes and pulls through (Assignment.aggregator).
 *
 * The rule: when the job's live workers span two zones or more (a worker
 * whose node names no zone counts for none), a live worker of a named zone
 * routes through a usable aggregator registered in its zone; with several,
 * the zone's workers are spread over them: its i-th worker in node id
 * order takes the (i mod n)-th aggregator in node id order. None in its
 * zone, no zone, or a job within one zone: "", straight to the servers.
 * An aggregator is usable while it is registered with an address and its
 * connection is open (ALIVE, or SUSPECT for a late heartbeat alone: that
 * does not move a zone's traffic back and forth, while a closed connection
 * or its death does at once).
 *
 * The routes are worked out again only when the node table said an
 * aggregator or a worker changed, or when the job's assignment version or
 * workers moved; not at every ASSIGN. When workers already sent the current
 * version would now route differently, the version is bumped
 * (dml_jobs_reroute), so each worker hears it as any other change of its
 * assignment.
 *
 * Must never: send anything (the job side sends ASSIGN), or keep a pointer
 * into the node table (addresses are copied).
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proto/log.h"
#include "proto/util.h"
#include "sched/jobs.h"
#include "sched/nodes.h"
#include "sched/sched_internal.h"

#define ROUTE_DIRECT UINT32_MAX

/* A worker or an aggregator of a zone, to sort by (zone, node id). */
struct zoned {
	const char *zone;          /* borrowed from the node table for one pass */
	uint32_t node_id;
	size_t index;              /* worker: index in the job; aggregator: in the table */
};

static int zoned_cmp(const void *a, const void *b)
{
	const struct zoned *x = a, *y = b;
	int c = strcmp(x->zone, y->zone);

	if (c)
		return c;
	return x->node_id < y->node_id ? -1 : x->node_id > y->node_id;
}

/* The job's live workers whose node names a zone, by (zone, node id). */
static struct zoned *zoned_workers(const struct dml_sched *s, const struct dml_job *job,
				   size_t *n)
{
	struct zoned *z = dml_xmalloc((job->nworkers + 1) * sizeof(*z));
	size_t k = 0;

	for (size_t i = 0; i < job->nworkers; i++) {
		const struct dml_node *node;

		if (!job->workers[i].live)
			continue;
		node = dml_nodes_find(s->nodes, DML__ROLE__WORKER, job->workers[i].node_id);
		if (node && node->zone[0])
			z[k++] = (struct zoned){ node->zone, node->node_id, i };
	}
	qsort(z, k, sizeof(*z), zoned_cmp);
	*n = k;
	return z;
}

static int aggregator_usable(const struct dml_node *n)
{
	return n->role == DML__ROLE__AGGREGATOR && n->state != DML__NODE_STATE__DEAD &&
	       n->connected && n->address[0] && n->zone[0];
}

/* The usable aggregators, by (zone, node id), copied into r->aggs. */
static void usable_aggregators(const struct dml_sched *s, struct sched_routes *r)
{
	size_t total = dml_nodes_count(s->nodes), k = 0;
	struct zoned *z = dml_xmalloc((total + 1) * sizeof(*z));

	for (size_t i = 0; i < total; i++) {
		const struct dml_node *n = dml_nodes_at(s->nodes, i);

		if (aggregator_usable(n))
			z[k++] = (struct zoned){ n->zone, n->node_id, i };
	}
	qsort(z, k, sizeof(*z), zoned_cmp);
	r->aggs = dml_xcalloc(k + 1, sizeof(*r->aggs));
	for (size_t i = 0; i < k; i++) {
		const struct dml_node *n = dml_nodes_at(s->nodes, z[i].index);

		r->aggs[i].node_id = n->node_id;
		snprintf(r->aggs[i].zone, sizeof(r->aggs[i].zone), "%s", n->zone);
		snprintf(r->aggs[i].address, sizeof(r->aggs[i].address), "%s", n->address);
	}
	r->naggs = k;
	free(z);
}

/* The end of the run of entries from `from` that share its zone. */
static size_t zone_end(const struct zoned *z, size_t n, size_t from)
{
	size_t end = from;

	while (end < n && strcmp(z[end].zone, z[from].zone) == 0)
		end++;
	return end;
}

/* Fill r->via for the job's workers as the rule says (file comment). */
static void routes_plan(const struct dml_sched *s, const struct dml_job *job,
			struct sched_routes *r)
{
	size_t nw, zones = 0, a = 0;
	struct zoned *w = zoned_workers(s, job, &nw);

	usable_aggregators(s, r);
	r->via = dml_xmalloc((job->nworkers + 1) * sizeof(*r->via));
	for (size_t i = 0; i < job->nworkers; i++)
		r->via[i] = ROUTE_DIRECT;
	for (size_t i = 0; i < nw; i = zone_end(w, nw, i))
		zones++;
	for (size_t i = 0, end; zones >= 2 && i < nw; i = end) {
		size_t na = 0;

		end = zone_end(w, nw, i);
		while (a < r->naggs && strcmp(r->aggs[a].zone, w[i].zone) < 0)
			a++;
		while (a + na < r->naggs && strcmp(r->aggs[a + na].zone, w[i].zone) == 0)
			na++;
		for (size_t k = i; na && k < end; k++)
			r->via[w[k].index] = (uint32_t)(a + (k - i) % na);
	}
	r->job = job->id;
	r->version = job->assignment_version;
	r->nworkers = job->nworkers;
	free(w);
}

static const char *route_of(const struct sched_routes *r, size_t i)
{
	return i < r->nworkers && r->via[i] != ROUTE_DIRECT ? r->aggs[r->via[i]].address : "";
}

static void routes_clear(struct sched_routes *r)
{
	free(r->via);
	free(r->aggs);
	memset(r, 0, sizeof(*r));
}

void dml_sched_routes_sync(struct dml_sched *s, struct dml_job *job)
{
	struct sched_routes next = { 0 }, *was = &s->routes;
	size_t changed = 0, through = 0;
	char why[DML_JOB_REASON_MAX + 1];

	if (!job || (!was->stale && was->job == job->id &&
		     was->version == job->assignment_version && was->nworkers == job->nworkers))
		return;
	routes_plan(s, job, &next);
	for (size_t i = 0; was->job == job->id && i < next.nworkers && i < was->nworkers; i++) {
		const char *now = route_of(&next, i);

		if (strcmp(now, route_of(was, i)) == 0)
			continue;
		changed++;
		through += now[0] != '\0';
		dml_debug("job %" PRIu32 ": worker %" PRIu32 " routes %s%s", job->id,
			  job->workers[i].node_id, now[0] ? "through aggregator " : "direct", now);
	}
	routes_clear(was);
	*was = next;
	/* Workers sent this version with the old routes must hear again. */
	if (!changed || s->act.job != job->id || !s->act.assigned ||
	    s->act.sent_version != job->assignment_version)
		return;
	snprintf(why, sizeof(why), "zone aggregator routes changed for %zu worker%s: %zu "
		 "through an aggregator, %zu direct", changed, changed == 1 ? "" : "s",
		 through, changed - through);
	dml_jobs_reroute(job, why);
	was->version = job->assignment_version;
}

const char *dml_sched_route(struct dml_sched *s, struct dml_job *job, uint32_t worker)
{
	const struct dml_job_worker *w = dml_job_worker(job, worker);

	if (!w || !w->live || dml_job_finished(job) || job->state == DML__JOB_STATE__PENDING)
		return "";
	dml_sched_routes_sync(s, job);
	return route_of(&s->routes, (size_t)(w - job->workers));
}

void dml_sched_routes_free(struct dml_sched *s)
{
	routes_clear(&s->routes);
}
