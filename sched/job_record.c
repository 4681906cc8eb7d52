/*
 * Saving and restoring the job table (see jobs.h): a job as a
 * Dml__JobRecord for the scheduler's state, and a record checked and made
 * into a job again after a restart.
 *
 * Must never: trust a record (each is checked whole before it changes the
 * table), do I/O, log or read a clock.
 */
#include <float.h>
#include <inttypes.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "shard/assign.h"
#include "proto/dml_error.h"
#include "sched/handover.h"
#include "proto/job_spec.h"
#include "sched/jobs.h"
#include "sched/jobs_internal.h"
#include "proto/util.h"

/* ---- saving and restoring ------------------------------------------------ */

Dml__JobRecord *dml_job_record(const struct dml_job *job, uint64_t now)
{
	const struct job_impl *ji = impl_c(job);
	Dml__JobRecord *r = dml_xmalloc(sizeof(*r));
	size_t n = job->nworkers;

	dml__job_record__init(r);
	r->status = dml_job_status(job, now);
	r->num_partitions = job->num_partitions;
	r->started_ago_ms = job->state == DML__JOB_STATE__PENDING ? 0
				: since(now, job->started_ms) + 1;
	r->n_owner = job->owner ? job->num_partitions : 0;
	r->owner = dml_xcalloc(r->n_owner + 1, sizeof(*r->owner));
	r->n_positions = ji->ho.pos ? job->num_partitions : 0;
	r->positions = dml_xcalloc(r->n_positions + 1, sizeof(*r->positions));
	if (r->n_positions)
		memcpy(r->positions, ji->ho.pos, r->n_positions * sizeof(*r->positions));
	for (size_t p = 0; p < r->n_owner; p++)
		r->owner[p] = job->owner[p] == DML_ASSIGN_NONE ? 0
			      : job->workers[job->owner[p]].node_id;
	r->n_rate = r->n_rate_measured = r->n_finished = r->n_has_loss = n;
	r->n_examples_raw = n;
	r->rate = dml_xcalloc(n + 1, sizeof(*r->rate));
	r->rate_measured = dml_xcalloc(n + 1, sizeof(*r->rate_measured));
	r->finished = dml_xcalloc(n + 1, sizeof(*r->finished));
	r->has_loss = dml_xcalloc(n + 1, sizeof(*r->has_loss));
	r->examples_raw = dml_xcalloc(n + 1, sizeof(*r->examples_raw));
	r->n_speed = r->n_speed_measured = r->n_batch = n;
	r->speed = dml_xcalloc(n + 1, sizeof(*r->speed));
	r->speed_measured = dml_xcalloc(n + 1, sizeof(*r->speed_measured));
	r->batch = dml_xcalloc(n + 1, sizeof(*r->batch));
	for (size_t i = 0; i < n; i++) {
		r->rate[i] = job->workers[i].rate;
		r->rate_measured[i] = ji->priv[i].rate_measured;
		r->finished[i] = job->workers[i].finished;
		r->has_loss[i] = ji->priv[i].has_loss;
		r->examples_raw[i] = ji->priv[i].examples_raw;
		r->speed[i] = job->workers[i].speed;
		r->speed_measured[i] = ji->priv[i].speed_measured;
		r->batch[i] = job->workers[i].batch;
	}
	return r;
}

void dml_job_record_free(Dml__JobRecord *r)
{
	if (!r)
		return;
	dml_job_status_free(r->status);
	free(r->owner);
	free(r->positions);
	free(r->rate);
	free(r->rate_measured);
	free(r->finished);
	free(r->has_loss);
	free(r->examples_raw);
	free(r->speed);
	free(r->speed_measured);
	free(r->batch);
	free(r);
}

/* A per-worker list of a later release: absent from older records, or whole. */
static int list_fits(size_t len, size_t n)
{
	return len == 0 || len == n;
}

/* Everything a record says that restore relies on, checked. */
static int record_check(const struct dml_jobs *jobs, const Dml__JobRecord *r, char *err,
			size_t errlen)
{
	const Dml__JobStatus *st = r->status;
	size_t n;
	int rc;

	if (!st || !st->spec)
		return dml_fail(DML_EINVAL, err, errlen, "no status or spec");
	if (st->id != jobs->n + 1)
		return dml_fail(DML_EINVAL, err, errlen, "job %" PRIu32 " where job %zu "
				 "was due", st->id, jobs->n + 1);
	if (st->state < DML__JOB_STATE__PENDING || st->state > DML__JOB_STATE__STOPPED)
		return dml_fail(DML_EINVAL, err, errlen, "state %d", (int)st->state);
	if ((rc = dml_job_spec_check(st->spec, err, errlen)) != 0)
		return rc;
	n = st->n_workers;
	if (r->n_rate != n || r->n_rate_measured != n || r->n_finished != n ||
	    r->n_has_loss != n || r->n_examples_raw != n || n >= DML_ASSIGN_NONE - 1 ||
	    !list_fits(r->n_speed, n) || !list_fits(r->n_speed_measured, n) ||
	    !list_fits(r->n_batch, n))
		return dml_fail(DML_EINVAL, err, errlen, "%zu workers but per-worker lists "
				 "of other lengths", n);
	if (r->num_partitions > UINT32_MAX ||
	    (r->n_owner != 0 && r->n_owner != r->num_partitions) ||
	    (r->n_owner == 0 && st->state != DML__JOB_STATE__PENDING))
		return dml_fail(DML_EINVAL, err, errlen, "%zu partition owners for %" PRIu64
				 " partitions", r->n_owner, r->num_partitions);
	for (size_t i = 0; i < n; i++) {
		if (!st->workers[i]->worker)
			return dml_fail(DML_EINVAL, err, errlen, "worker id 0");
		for (size_t j = 0; j < i; j++)
			if (st->workers[j]->worker == st->workers[i]->worker)
				return dml_fail(DML_EINVAL, err, errlen, "worker %" PRIu32
						 " twice", st->workers[i]->worker);
	}
	return 0;
}

/* A record's worker index of a partition's owner: DML_ASSIGN_NONE for none. */
static int owner_index(const Dml__JobStatus *st, uint32_t node_id, uint32_t *out)
{
	*out = DML_ASSIGN_NONE;
	if (!node_id)
		return 0;
	for (size_t i = 0; i < st->n_workers; i++) {
		if (st->workers[i]->worker == node_id &&
		    st->workers[i]->state == DML__NODE_STATE__ALIVE) {
			*out = (uint32_t)i;
			return 0;
		}
	}
	return DML_EINVAL;
}

int dml_jobs_restore(struct dml_jobs *jobs, const Dml__JobRecord *r, uint64_t now,
		     char *err, size_t errlen)
{
	const Dml__JobStatus *st;
	struct job_impl *ji;
	struct dml_job *job;
	int rc;

	if (!jobs || !r)
		return DML_EINVAL;
	if ((rc = record_check(jobs, r, err, errlen)) != 0)
		return rc;
	st = r->status;
	ji = dml_xcalloc(1, sizeof(*ji));
	job = &ji->job;
	job->id = st->id;
	job->spec = dml_job_spec_copy(st->spec);
	job->num_partitions = r->num_partitions;
	for (size_t i = 0; i < st->n_workers; i++) {
		const Dml__WorkerStatus *ws = st->workers[i];
		struct dml_job_worker *w = worker_add(job, ws->worker, r->rate[i], ws->clock);
		struct worker_priv *wp = &ji->priv[i];

		w->live = ws->state == DML__NODE_STATE__ALIVE;
		w->examples = ws->examples;
		ji->examples += ws->examples;
		w->examples_per_s = clamp_num(ws->examples_per_s);
		w->loss = clamp_num(ws->loss);
		w->compute_s = clamp_num(ws->compute_s);
		w->wait_s = clamp_num(ws->wait_s);
		w->held_s = clamp_num(ws->held_s);
		w->cpu_s = clamp_num(ws->cpu_s);
		w->cores = clamp_num(ws->cores);
		worker_links_set(job, w, ws->links);
		w->finished = r->finished[i];
		w->last_report_ms = now;
		text_set(w->reason, "%s", ws->reason ? ws->reason : "");
		wp->rate_measured = r->rate_measured[i];
		wp->has_loss = r->has_loss[i];
		wp->examples_raw = r->examples_raw[i];
		if (r->n_speed) {
			w->speed = rate_ok(r->speed[i]);
			wp->speed_measured = r->speed_measured[i];
		}
		if (r->n_batch && r->batch[i] >= 1 && r->batch[i] <= dml_job_batch_max(job->spec))
			w->batch = r->batch[i];
	}
	if (r->n_owner) {
		job->owner = dml_xmalloc(r->n_owner * sizeof(*job->owner));
		for (size_t p = 0; p < r->n_owner && !rc; p++) {
			rc = owner_index(st, r->owner[p], &job->owner[p]);
			if (!rc && job->owner[p] != DML_ASSIGN_NONE)
				job->workers[job->owner[p]].npart++;
		}
	}
	if (rc) {
		job_free(ji);
		return dml_fail(DML_EINVAL, err, errlen, "a partition owned by a worker that "
				 "is not a live member");
	}
	if (job->owner) {
		/* its workers walk what they were last told, from where they are */
		dml_handover_init(&ji->ho, job->num_partitions);
		memcpy(ji->ho.holder, job->owner, job->num_partitions * sizeof(*job->owner));
		if (r->n_positions == job->num_partitions)
			memcpy(ji->ho.pos, r->positions, r->n_positions * sizeof(*r->positions));
	}
	job->state = st->state;
	text_set(job->reason, "%s", st->reason ? st->reason : "");
	job->submitted_ms = since(now, st->age_ms);
	job->started_ms = r->started_ago_ms ? since(now, r->started_ago_ms - 1) : 0;
	job->changed_ms = now;
	job->finished_ms = dml_job_finished(job) ? now : 0;
	job->run_ms = st->run_ms;
	job->assignment_version = st->assignment_version;
	job->data_examples = st->data_examples;
	job->metric = clamp_num(st->metric);
	job->has_metric = st->has_metric;
	for (size_t k = 0; k < st->n_events; k++)
		dml_job_event(job, "%s", st->events[k] ? st->events[k] : "");
	for (size_t k = 0; k < st->n_checkpoints; k++)
		checkpoint_add(job, st->checkpoints[k]->clock, st->checkpoints[k]->bytes,
			       since(now, st->checkpoints[k]->age_ms));
	if (jobs->n == jobs->cap) {
		jobs->cap = jobs->cap ? 2 * jobs->cap : 16;
		jobs->v = dml_xrealloc(jobs->v, jobs->cap * sizeof(*jobs->v));
	}
	jobs->v[jobs->n++] = ji;
	return 0;
}
