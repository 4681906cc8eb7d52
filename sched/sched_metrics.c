/*
 * dml-sched's metrics (proto/metrics.h): what is registered and how each
 * value is read. Request handlers only bump integers of struct sched_stats;
 * everything here runs at scrape time, on the loop, and only reads the node
 * and job tables.
 */
#include <math.h>
#include <stdio.h>

#include "proto/dml_error.h"
#include "proto/job_spec.h"
#include "sched/jobs.h"
#include "proto/listen.h"
#include "proto/log.h"
#include "proto/metrics.h"
#include "sched/nodes.h"
#include "sched/sched_internal.h"
#include "proto/util.h"

static const char *const req_names[SREQ_KINDS] = {
	"register", "heartbeat", "nodes", "bye", "submit", "jobs", "job_control",
	"shardmap", "progress", "ack", "error", "other"
};

static const Dml__NodeState node_states[] = {
	DML__NODE_STATE__ALIVE, DML__NODE_STATE__SUSPECT, DML__NODE_STATE__DEAD
};

static const Dml__JobState job_states[] = {
	DML__JOB_STATE__PENDING, DML__JOB_STATE__RUNNING, DML__JOB_STATE__PAUSED,
	DML__JOB_STATE__DONE, DML__JOB_STATE__FAILED, DML__JOB_STATE__STOPPED
};

static const uint32_t node_roles[] = {
	DML__ROLE__SERVER, DML__ROLE__WORKER, DML__ROLE__AGGREGATOR
};

static struct dml_job *active(struct dml_sched *s)
{
	return s->act.job ? dml_jobs_find(s->jobs, s->act.job) : NULL;
}

static void collect_nodes(struct dml_metrics_scrape *sc, void *arg)
{
	const struct sched_role_arg *ra = arg;
	const struct dml_nodes *t = ra->sched->nodes;
	size_t count[DML_ARRAY_LEN(node_states)] = { 0 };

	for (size_t i = 0; i < dml_nodes_count(t); i++) {
		const struct dml_node *n = dml_nodes_at(t, i);

		if (n->role != ra->role)
			continue;
		for (size_t k = 0; k < DML_ARRAY_LEN(node_states); k++)
			count[k] += n->state == node_states[k];
	}
	for (size_t k = 0; k < DML_ARRAY_LEN(node_states); k++)
		dml_metrics_emit(sc, dml_node_state_name(node_states[k]), (double)count[k]);
}

static void collect_jobs(struct dml_metrics_scrape *sc, void *arg)
{
	struct dml_sched *s = arg;
	size_t count[DML_ARRAY_LEN(job_states)] = { 0 };

	for (size_t i = 0; i < dml_jobs_count(s->jobs); i++) {
		const struct dml_job *job = dml_jobs_at(s->jobs, i);

		for (size_t k = 0; k < DML_ARRAY_LEN(job_states); k++)
			count[k] += job->state == job_states[k];
	}
	for (size_t k = 0; k < DML_ARRAY_LEN(job_states); k++)
		dml_metrics_emit(sc, dml_job_state_name(job_states[k]), (double)count[k]);
}

static double metric_active_job(void *arg)
{
	const struct dml_sched *s = arg;

	return (double)s->act.job;
}

static double metric_job_clock(void *arg)
{
	const struct dml_job *job = active(arg);

	return job ? (double)dml_job_clock(job) : 0;
}

/* Job-wide figures as dml_job_status computes them (live workers only). */
static double job_figure(struct dml_sched *s, int loss)
{
	const struct dml_job *job = active(s);
	Dml__JobStatus *st;
	double v;

	if (!job)
		return loss ? NAN : 0;
	st = dml_job_status(job, dml_sched_now_ms());
	v = loss ? st->loss : st->examples_per_s;
	dml_job_status_free(st);
	return v;
}

static double metric_job_rate(void *arg)
{
	return job_figure(arg, 0);
}

static double metric_job_loss(void *arg)
{
	return job_figure(arg, 1);
}

/* One figure of every live worker of the active job, by worker id. */
static void collect_workers(struct dml_metrics_scrape *sc, void *arg)
{
	const struct sched_worker_arg *a = arg;
	const struct dml_job *job = active(a->sched);
	char id[16];

	for (size_t i = 0; job && i < job->nworkers; i++) {
		const struct dml_job_worker *w = &job->workers[i];
		double v = a->figure == SWF_RATE ? w->examples_per_s :
			   a->figure == SWF_SPEED ? w->speed :
			   a->figure == SWF_LINK ? w->link_bps :
			   a->figure == SWF_BATCH ? (double)w->batch : (double)w->npart;

		if (!w->live)
			continue;
		snprintf(id, sizeof(id), "%u", w->node_id);
		dml_metrics_emit(sc, id, v);
	}
}

static double metric_map_version(void *arg)
{
	struct dml_sched *s = arg;
	const struct sched_job *xj = s->act.job ? dml_sched_job(s, s->act.job) : NULL;

	return xj && xj->map ? (double)xj->map->version : 0;
}

#define COUNTER DML_METRIC_COUNTER
#define GAUGE DML_METRIC_GAUGE

/* name, help, type, label */
static const struct dml_metric_desc
	m_requests = { "dml_sched_requests_total", "Frames received, by type", COUNTER,
		       "type", NULL, 0 },
	m_assign = { "dml_sched_assign_sent_total", "ASSIGN frames sent to workers", COUNTER,
		     NULL, NULL, 0 },
	m_shardmap = { "dml_sched_shardmap_sent_total", "SHARDMAP frames sent to servers",
		       COUNTER, NULL, NULL, 0 },
	m_conns = { "dml_sched_connections", "Connections open", GAUGE, NULL, NULL, 0 },
	m_nodes[] = {
		{ "dml_sched_servers", "Servers known, by state", GAUGE, "state", NULL, 0 },
		{ "dml_sched_workers", "Workers known, by state", GAUGE, "state", NULL, 0 },
		{ "dml_sched_aggregators", "Aggregators known, by state", GAUGE, "state", NULL,
		  0 },
	},
	m_jobs = { "dml_sched_jobs", "Jobs submitted, by state", GAUGE, "state", NULL, 0 },
	m_active = { "dml_sched_active_job", "Id of the running or paused job, 0 for none",
		     GAUGE, NULL, NULL, 0 },
	m_clock = { "dml_sched_job_clock", "Slowest live worker's clock in the active job",
		    GAUGE, NULL, NULL, 0 },
	m_rate = { "dml_sched_job_examples_per_second",
		   "Examples per second of the active job's live workers together", GAUGE,
		   NULL, NULL, 0 },
	m_loss = { "dml_sched_job_loss",
		   "Mean of the latest training losses of the active job's live workers",
		   GAUGE, NULL, NULL, 0 },
	m_workers[SWF_COUNT] = {
		[SWF_RATE] = { "dml_sched_worker_examples_per_second",
			       "Examples per second each live worker of the active job reports",
			       GAUGE, "worker", NULL, 0 },
		[SWF_SPEED] = { "dml_sched_worker_speed",
				"Examples per second of its own work (computing and its own "
				"communication) of each live worker of the active job, smoothed",
				GAUGE, "worker", NULL, 0 },
		[SWF_BATCH] = { "dml_sched_worker_batch_size",
				"Examples per clock each live worker of the active job is given",
				GAUGE, "worker", NULL, 0 },
		[SWF_PARTITIONS] = { "dml_sched_worker_partitions",
				     "Data partitions each live worker of the active job holds",
				     GAUGE, "worker", NULL, 0 },
		[SWF_LINK] = { "dml_sched_worker_link_bytes_per_second",
			       "Bytes per second of its own communication with the servers "
			       "of each live worker of the active job, smoothed", GAUGE,
			       "worker", NULL, 0 },
	},
	m_map = { "dml_sched_shard_map_version", "Shard map version of the active job",
		  GAUGE, NULL, NULL, 0 };

#undef COUNTER
#undef GAUGE

/* Every metric of the scheduler; non-zero if one was refused. */
static int register_metrics(struct dml_metrics *m, void *arg)
{
	struct dml_sched *s = arg;
	int bad = 0;

	for (int i = 0; i < SREQ_KINDS; i++)
		bad |= dml_metrics_add_u64(m, &m_requests, req_names[i], &s->st.requests[i]);
	bad |= dml_metrics_add_u64(m, &m_assign, NULL, &s->st.assign_sent);
	bad |= dml_metrics_add_u64(m, &m_shardmap, NULL, &s->st.shardmap_sent);
	bad |= dml_metrics_add_fn(m, &m_conns, NULL, dml_peers_metric_count,
				  &s->peers);
	for (size_t i = 0; i < DML_ARRAY_LEN(node_roles); i++) {
		s->role_args[i].sched = s;
		s->role_args[i].role = node_roles[i];
		bad |= dml_metrics_add_collector(m, &m_nodes[i], collect_nodes,
						 &s->role_args[i]);
	}
	bad |= dml_metrics_add_collector(m, &m_jobs, collect_jobs, s);
	bad |= dml_metrics_add_fn(m, &m_active, NULL, metric_active_job, s);
	bad |= dml_metrics_add_fn(m, &m_clock, NULL, metric_job_clock, s);
	bad |= dml_metrics_add_fn(m, &m_rate, NULL, metric_job_rate, s);
	bad |= dml_metrics_add_fn(m, &m_loss, NULL, metric_job_loss, s);
	for (int i = 0; i < SWF_COUNT; i++) {
		s->worker_args[i] = (struct sched_worker_arg){ s, (enum sched_worker_figure)i };
		bad |= dml_metrics_add_collector(m, &m_workers[i], collect_workers,
						 &s->worker_args[i]);
	}
	bad |= dml_metrics_add_fn(m, &m_map, NULL, metric_map_version, s);
	return bad;
}

int dml_sched_metrics_init(struct dml_sched *s)
{
	return dml_metrics_start(s->base, s->conf->metrics_listen, s->conf->metrics_port_file,
				 register_metrics, s, &s->metrics);
}
