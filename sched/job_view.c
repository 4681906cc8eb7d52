/*
 * What the job table shows (see jobs.h): a worker of a job, the job's
 * clock, the assignment a worker gets, the status dmlctl lists, and the
 * job's checkpoints.
 *
 * Must never: do I/O, log, read a clock, trust a number of a progress report
 * (each is clamped: negative or NaN to 0, infinite to the largest double),
 * or leave a partition of an active job unowned while a live worker exists.
 */
#include <float.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "shard/assign.h"
#include "proto/dml_error.h"
#include "proto/frame.h"
#include "sched/handover.h"
#include "proto/job_spec.h"
#include "sched/jobs.h"
#include "sched/jobs_internal.h"
#include "proto/util.h"

/* ---- views ------------------------------------------------------------- */

struct dml_job_worker *dml_job_worker(struct dml_job *job, uint32_t node_id)
{
	size_t i = job ? worker_index(job, node_id) : NO_WORKER;

	return i == NO_WORKER ? NULL : &job->workers[i];
}

/* With no live worker: the furthest clock any reached, where a worker that
 * comes back resumes the job. */
uint64_t dml_job_clock(const struct dml_job *job)
{
	uint64_t min = UINT64_MAX, max = 0;

	for (size_t i = 0; job && i < job->nworkers; i++) {
		const struct dml_job_worker *w = &job->workers[i];

		if (w->live && w->clock < min)
			min = w->clock;
		if (w->clock > max)
			max = w->clock;
	}
	return min != UINT64_MAX ? min : max;
}

int dml_job_finished(const struct dml_job *job)
{
	return job && (job->state == DML__JOB_STATE__DONE ||
		       job->state == DML__JOB_STATE__FAILED ||
		       job->state == DML__JOB_STATE__STOPPED);
}

/*
 * Group the partitions listed for each worker (it owns and walks them), in
 * increasing order, once per assignment version: each worker's assignment
 * then costs its own partitions, not a look at every partition.
 */
static void job_listing(struct job_impl *ji)
{
	const struct dml_job *job = &ji->job;
	const uint32_t *holder = ji->ho.holder;
	uint64_t *at;

	if (ji->listed && ji->listed_version == job->assignment_version &&
	    ji->listed_n == job->nworkers)
		return;
	free(ji->listed);
	free(ji->listed_at);
	ji->listed = dml_xmalloc((job->num_partitions ? job->num_partitions : 1) *
				 sizeof(*ji->listed));
	/* counted into at[i + 2], so that at[i + 1] is worker i's start after
	 * the sums and its end once its partitions are placed */
	at = ji->listed_at = dml_xcalloc(job->nworkers + 2, sizeof(*at));
	for (uint64_t p = 0; p < job->num_partitions; p++)
		if (job->owner[p] != DML_ASSIGN_NONE && holder[p] == job->owner[p])
			at[job->owner[p] + 2]++;
	for (size_t i = 0; i < job->nworkers; i++)
		at[i + 2] += at[i + 1];
	for (uint64_t p = 0; p < job->num_partitions; p++)
		if (job->owner[p] != DML_ASSIGN_NONE && holder[p] == job->owner[p])
			ji->listed[at[job->owner[p] + 1]++] = (uint32_t)p;
	ji->listed_version = job->assignment_version;
	ji->listed_n = job->nworkers;
}

/*
 * dml_job_clock, looked up again only after a report or a new assignment
 * version (what moves a worker's clock or changes who is live): sending
 * every worker its assignment would otherwise look at every worker each.
 */
static uint64_t job_clock_now(struct job_impl *ji)
{
	if (ji->clock_reports != ji->reports + 1 ||
	    ji->clock_version != ji->job.assignment_version) {
		ji->clock = dml_job_clock(&ji->job);
		ji->clock_reports = ji->reports + 1;
		ji->clock_version = ji->job.assignment_version;
	}
	return ji->clock;
}

void dml_job_assignment(struct dml_job *job, uint32_t node_id, Dml__Assignment *a)
{
	struct job_impl *ji;
	size_t i, k = 0;
	uint32_t *v;
	uint64_t *pos, n;

	if (!job || !a)
		return;
	ji = impl(job);
	a->job = job->id;
	a->version = job->assignment_version;
	a->state = job->state;
	a->num_partitions = (uint32_t)job->num_partitions;
	a->start_clock = job_clock_now(ji);
	a->n_partitions = 0;
	a->partitions = NULL;
	i = worker_index(job, node_id);
	if (i != NO_WORKER)
		a->batch_size = job->workers[i].batch;
	if (i == NO_WORKER || !job->workers[i].live || !job->workers[i].npart || !job->owner ||
	    !ji->ho.holder)
		return;
	/* one that another worker still walks is listed once it let go */
	job_listing(ji);
	n = ji->listed_at[i + 1] - ji->listed_at[i];
	v = dml_xmalloc((n ? n : 1) * sizeof(*v));
	pos = dml_xmalloc((n ? n : 1) * sizeof(*pos));
	for (uint64_t j = ji->listed_at[i]; j < ji->listed_at[i + 1]; j++) {
		pos[k] = ji->ho.pos[ji->listed[j]];
		v[k++] = ji->listed[j];
	}
	a->n_partitions = a->n_positions = k;
	a->partitions = v;
	a->positions = pos;
}

void dml_job_assignment_clear(Dml__Assignment *a)
{
	free(a->partitions);
	free(a->positions);
	a->partitions = NULL;
	a->positions = NULL;
	a->n_partitions = a->n_positions = 0;
}

/* Mean of the live workers' latest losses; 0 when none reported one. */
static double job_loss(const struct dml_job *job)
{
	const struct job_impl *ji = impl_c(job);
	double mean = 0;
	size_t k = 0;

	for (size_t i = 0; i < job->nworkers; i++) {
		if (!job->workers[i].live || !ji->priv[i].has_loss)
			continue;
		k++;
		/* running mean: no overflow even for losses near DBL_MAX */
		mean += (job->workers[i].loss - mean) / (double)k;
	}
	return mean;
}

/*
 * A worker's traffic into mine, its norms borrowed from w and the table ids
 * from ids; and added to the job's (bytes saturate: reports are not
 * trusted to stay small).
 */
static void worker_links(const struct dml_job_worker *w, uint32_t *ids, size_t nt,
			 Dml__LinkTraffic *mine, Dml__LinkTraffic *job)
{
	uint64_t *sum[4] = { &job->within_zone_float_bytes, &job->within_zone_sent_bytes,
			     &job->cross_zone_float_bytes, &job->cross_zone_sent_bytes };
	uint64_t *own[4] = { &mine->within_zone_float_bytes, &mine->within_zone_sent_bytes,
			     &mine->cross_zone_float_bytes, &mine->cross_zone_sent_bytes };

	dml__link_traffic__init(mine);
	for (int k = 0; k < 4; k++) {
		*own[k] = w->link_bytes[k / 2][k % 2];
		*sum[k] = *sum[k] > UINT64_MAX - *own[k] ? UINT64_MAX : *sum[k] + *own[k];
	}
	mine->n_residual_tables = mine->n_residual_norms = nt;
	mine->residual_tables = ids;
	mine->residual_norms = (double *)w->residual;
	for (size_t t = 0; t < nt; t++)
		job->residual_norms[t] = hypot(job->residual_norms[t], w->residual[t]);
}

Dml__JobStatus *dml_job_status(const struct dml_job *job, uint64_t now)
{
	Dml__JobStatus st = DML__JOB_STATUS__INIT, *out;
	Dml__WorkerStatus *ws, **wp;
	Dml__Checkpoint *ck, **ckp;
	char *events[DML_JOB_EVENTS];
	size_t nev;
	Dml__LinkTraffic links = DML__LINK_TRAFFIC__INIT, *lt;
	uint32_t ids[DML_JOB_TABLES_MAX];
	double norms[DML_JOB_TABLES_MAX] = { 0 };
	size_t nt;

	if (!job)
		return NULL;
	ws = dml_xcalloc(job->nworkers, sizeof(*ws));
	wp = dml_xcalloc(job->nworkers, sizeof(*wp));
	st.id = job->id;
	st.name = job->spec->name;
	st.state = job->state;
	st.reason = (char *)job->reason;
	st.spec = job->spec;
	st.clock = dml_job_clock(job);
	st.examples = job_examples(job);
	st.data_examples = job_data_examples(job);
	dml_handover_epochs(&impl_c(job)->ho, st.data_examples, &st.epochs_min, &st.epochs_max);
	st.loss = job_loss(job);
	st.metric = job->metric;
	st.has_metric = job->has_metric;
	st.age_ms = since(now, job->submitted_ms);
	st.run_ms = job->run_ms;
	if (job->state == DML__JOB_STATE__RUNNING)
		st.run_ms += since(now, job->changed_ms);
	st.assignment_version = job->assignment_version;
	nt = job->spec->n_tables < DML_JOB_TABLES_MAX ? job->spec->n_tables : DML_JOB_TABLES_MAX;
	for (size_t t = 0; t < nt; t++)
		ids[t] = job->spec->tables[t]->id;
	links.n_residual_tables = links.n_residual_norms = nt;
	links.residual_tables = ids;
	links.residual_norms = norms;
	st.links = &links;
	lt = dml_xcalloc(job->nworkers + 1, sizeof(*lt));
	for (size_t i = 0; i < job->nworkers; i++) {
		const struct dml_job_worker *w = &job->workers[i];

		dml__worker_status__init(&ws[i]);
		ws[i].worker = w->node_id;
		ws[i].state = w->live ? DML__NODE_STATE__ALIVE : DML__NODE_STATE__DEAD;
		ws[i].clock = w->clock;
		ws[i].examples = w->examples;
		ws[i].examples_per_s = w->examples_per_s;
		ws[i].loss = w->loss;
		ws[i].partitions = (uint32_t)w->npart;
		ws[i].reason = (char *)w->reason;
		ws[i].compute_s = w->compute_s;
		ws[i].wait_s = w->wait_s;
		ws[i].rate = w->rate;
		ws[i].batch_size = w->batch;
		ws[i].held_s = w->held_s;
		ws[i].speed = w->speed;
		ws[i].cpu_s = w->cpu_s;
		ws[i].cores = w->cores;
		ws[i].link_bps = w->link_bps;
		worker_links(w, ids, nt, &lt[i], &links);
		ws[i].links = &lt[i];
		wp[i] = &ws[i];
		if (w->live)
			st.examples_per_s += w->examples_per_s;
	}
	st.n_workers = job->nworkers;
	st.workers = wp;
	nev = job->nevents < DML_JOB_EVENTS ? job->nevents : DML_JOB_EVENTS;
	for (size_t k = 0; k < nev; k++)
		events[k] = (char *)job->events[(job->nevents - nev + k) % DML_JOB_EVENTS];
	st.n_events = nev;
	st.events = events;
	ck = dml_xcalloc(job->nckpts + 1, sizeof(*ck));
	ckp = dml_xcalloc(job->nckpts + 1, sizeof(*ckp));
	for (size_t i = 0; i < job->nckpts; i++) {
		dml__checkpoint__init(&ck[i]);
		ck[i].clock = job->ckpts[i].clock;
		ck[i].age_ms = since(now, job->ckpts[i].done_ms);
		ck[i].bytes = job->ckpts[i].bytes;
		ckp[i] = &ck[i];
	}
	st.n_checkpoints = job->nckpts;
	st.checkpoints = ckp;
	/* one tree the caller frees with one call: encode the borrowed view,
	 * decode it into fresh memory */
	out = dml_msg_copy(&st.base);
	free(ws);
	free(wp);
	free(lt);
	free(ck);
	free(ckp);
	if (!out)
		abort();   /* our own encoding: only memory can fail, fatal as in util.h */
	return out;
}

void dml_job_status_free(Dml__JobStatus *st)
{
	if (st)
		dml__job_status__free_unpacked(st, NULL);
}

const char *dml_job_name(const struct dml_job *job)
{
	return job->spec->name ? job->spec->name : "";
}

/* ---- checkpoints --------------------------------------------------------- */

uint32_t dml_job_checkpoint_keep(const struct dml_job *job)
{
	return job->spec->checkpoint_keep ? job->spec->checkpoint_keep
					  : DML_JOB_CHECKPOINT_KEEP;
}

void checkpoint_add(struct dml_job *job, uint64_t clock, uint64_t bytes,
		    uint64_t done_ms)
{
	job->ckpts = dml_xrealloc(job->ckpts, (job->nckpts + 1) * sizeof(*job->ckpts));
	job->ckpts[job->nckpts++] = (struct dml_job_checkpoint){ clock, done_ms, bytes };
}

void dml_jobs_checkpoint_done(struct dml_job *job, uint64_t clock, uint64_t bytes,
			      uint64_t now)
{
	size_t keep = dml_job_checkpoint_keep(job), drop;

	for (size_t i = 0; i < job->nckpts; i++)
		if (job->ckpts[i].clock == clock)
			return;
	checkpoint_add(job, clock, bytes, now);
	dml_job_event(job, "checkpoint at clock %" PRIu64 " (%.1f MB)", clock, (double)bytes / 1e6);
	if (job->nckpts <= keep)
		return;
	drop = job->nckpts - keep;
	memmove(job->ckpts, job->ckpts + drop, keep * sizeof(*job->ckpts));
	job->nckpts = keep;
}

int dml_jobs_checkpoint_drop(struct dml_job *job, uint64_t clock)
{
	for (size_t i = 0; i < job->nckpts; i++) {
		if (job->ckpts[i].clock != clock)
			continue;
		memmove(job->ckpts + i, job->ckpts + i + 1,
			(job->nckpts - i - 1) * sizeof(*job->ckpts));
		job->nckpts--;
		dml_job_event(job, "checkpoint at clock %" PRIu64 " deleted", clock);
		return 0;
	}
	return DML_ENOTFOUND;
}

void dml_jobs_checkpoints_clear(struct dml_job *job, uint32_t next)
{
	if (!job->nckpts)
		return;
	job->nckpts = 0;
	dml_job_event(job, "checkpoints deleted: job %" PRIu32 " started on its servers", next);
}
