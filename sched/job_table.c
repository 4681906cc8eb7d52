/*
 * The scheduler's job table (see jobs.h): the table itself (submit, find,
 * the next pending job), a job's start on its first workers, and the small
 * pieces every part of the job code uses: the worker index, state changes,
 * event and reason text.
 *
 * Jobs live in their own allocations, so a struct dml_job pointer stays
 * valid while the table grows; ids are 1, 2, ... in submission order and
 * jobs are never removed, so job id is at index id - 1. A job's workers are
 * only ever appended (a lost worker stays, marked not live), so the worker
 * indexes that the partition owner array holds stay valid for the job's
 * life.
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
#include "sched/handover.h"
#include "proto/job_spec.h"
#include "sched/jobs.h"
#include "sched/jobs_internal.h"
#include "proto/util.h"

void num_list_add(struct num_list *l, uint64_t v)
{
	char item[32];
	int w = snprintf(item, sizeof(item), "%s%" PRIu64, l->n ? ", " : "", v);

	l->n++;
	/* keep room for " and N more" */
	if (w > 0 && l->shown + 1 == l->n && l->len + (size_t)w + 20 < sizeof(l->s)) {
		memcpy(l->s + l->len, item, (size_t)w + 1);
		l->len += (size_t)w;
		l->shown++;
	}
}

const char *num_list_str(struct num_list *l)
{
	if (l->shown < l->n)
		snprintf(l->s + l->len, sizeof(l->s) - l->len, " and %zu more",
			 l->n - l->shown);
	return l->s;
}

/* Formats into a reason or event buffer (DML_JOB_REASON_MAX + 1 bytes). */
void text_set(char *dst, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(dst, DML_JOB_REASON_MAX + 1, fmt, ap);
	va_end(ap);
}

/* Appends an event line; the ring keeps the newest DML_JOB_EVENTS. */
void dml_job_event(struct dml_job *job, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(job->events[job->nevents % DML_JOB_EVENTS], DML_JOB_REASON_MAX + 1, fmt,
		  ap);
	va_end(ap);
	job->nevents++;
}

/* A worker's error text, bounded and printable, for reasons and events. */
void text_clean(char *dst, size_t len, const char *src)
{
	size_t i;

	for (i = 0; src[i] && i + 1 < len && i < ERROR_TEXT_MAX; i++) {
		unsigned char c = (unsigned char)src[i];

		dst[i] = (c < 0x20 || c > 0x7e) ? '?' : (char)c;
	}
	dst[i] = '\0';
}

/* A report's number: negative or NaN to 0, +inf to the largest double. */
double clamp_num(double v)
{
	if (!(v > 0))
		return 0;
	return isfinite(v) ? v : DBL_MAX;
}

/* A rate as a weight for dml_assign_partition_counts: unknown counts as 1. */
double rate_ok(double r)
{
	return isfinite(r) && r > 0 ? r : 1;
}

int job_active(const struct dml_job *job)
{
	return job->state == DML__JOB_STATE__RUNNING || job->state == DML__JOB_STATE__PAUSED;
}

static size_t worker_hash(uint32_t node_id, size_t nslots)
{
	return (size_t)((node_id * UINT64_C(0x9e3779b97f4a7c15)) >> 32) & (nslots - 1);
}

size_t worker_index(const struct dml_job *job, uint32_t node_id)
{
	const struct job_impl *ji = impl_c(job);

	if (!ji->nslots)
		return NO_WORKER;
	for (size_t h = worker_hash(node_id, ji->nslots); ji->slot[h];
	     h = (h + 1) & (ji->nslots - 1)) {
		if (job->workers[ji->slot[h] - 1].node_id == node_id)
			return ji->slot[h] - 1;
	}
	return NO_WORKER;
}

static void worker_index_put(struct job_impl *ji, size_t i)
{
	size_t h = worker_hash(ji->job.workers[i].node_id, ji->nslots);

	while (ji->slot[h])
		h = (h + 1) & (ji->nslots - 1);
	ji->slot[h] = (uint32_t)i + 1;
}

/* Room in the index for one more worker, keeping it at most half full. */
static void worker_index_grow(struct job_impl *ji)
{
	if (2 * (ji->job.nworkers + 1) <= ji->nslots)
		return;
	ji->nslots = ji->nslots ? 2 * ji->nslots : 16;
	free(ji->slot);
	ji->slot = dml_xcalloc(ji->nslots, sizeof(*ji->slot));
	for (size_t i = 0; i < ji->job.nworkers; i++)
		worker_index_put(ji, i);
}

size_t live_count(const struct dml_job *job)
{
	size_t n = 0;

	for (size_t i = 0; i < job->nworkers; i++)
		n += job->workers[i].live != 0;
	return n;
}

/* Moves the job to a new state, keeping run_ms and the timestamps. */
void job_state_set(struct dml_job *job, Dml__JobState state, uint64_t now)
{
	if (job->state == DML__JOB_STATE__RUNNING)
		job->run_ms += since(now, job->changed_ms);
	job->state = state;
	job->changed_ms = now;
	if (dml_job_finished(job))
		job->finished_ms = now;
}

/* The reason of a RUNNING job after its membership changed. */
void job_running_reason(struct dml_job *job)
{
	size_t live = live_count(job);

	if (job->state != DML__JOB_STATE__RUNNING)
		return;
	if (live)
		text_set(job->reason, "running on %zu worker%s", live, live == 1 ? "" : "s");
	else
		text_set(job->reason, "no live worker: %" PRIu64 " partitions wait unowned",
			 job->num_partitions);
}

/* Appends a live worker; NULL when the job cannot take another. */
struct dml_job_worker *worker_add(struct dml_job *job, uint32_t node_id,
				  double rate, uint64_t clock)
{
	struct job_impl *ji = impl(job);
	struct dml_job_worker *w;

	/* owner entries are uint32 worker indexes, DML_ASSIGN_NONE excluded */
	if (job->nworkers >= DML_ASSIGN_NONE - 1)
		return NULL;
	if (job->nworkers == ji->wcap) {
		ji->wcap = ji->wcap ? 2 * ji->wcap : 8;
		job->workers = dml_xrealloc(job->workers, ji->wcap * sizeof(*job->workers));
		ji->priv = dml_xrealloc(ji->priv, ji->wcap * sizeof(*ji->priv));
	}
	worker_index_grow(ji);
	w = &job->workers[job->nworkers];
	memset(w, 0, sizeof(*w));
	memset(&ji->priv[job->nworkers], 0, sizeof(*ji->priv));
	w->node_id = node_id;
	worker_index_put(ji, job->nworkers);
	job->nworkers++;
	w->live = 1;
	w->rate = w->speed = rate_ok(rate);
	w->batch = job->spec->batch_size;
	w->clock = clock;
	return w;
}

/*
 * What a report or a record says of a worker's traffic (NULL: nothing):
 * its bytes, and its residual norms onto the spec's tables (ids the spec
 * lacks are ignored; the lists count as far as both go, and no further
 * than a spec can have tables).
 */
void worker_links_set(const struct dml_job *job, struct dml_job_worker *w,
		      const Dml__LinkTraffic *lt)
{
	size_t nt = job->spec->n_tables < DML_JOB_TABLES_MAX ? job->spec->n_tables
							      : DML_JOB_TABLES_MAX;
	size_t n;

	if (!lt)
		return;
	w->link_bytes[0][0] = lt->within_zone_float_bytes;
	w->link_bytes[0][1] = lt->within_zone_sent_bytes;
	w->link_bytes[1][0] = lt->cross_zone_float_bytes;
	w->link_bytes[1][1] = lt->cross_zone_sent_bytes;
	n = lt->n_residual_tables < lt->n_residual_norms ? lt->n_residual_tables
							 : lt->n_residual_norms;
	for (size_t k = 0; k < n && k < DML_JOB_TABLES_MAX; k++)
		for (size_t t = 0; t < nt; t++)
			if (job->spec->tables[t]->id == lt->residual_tables[k])
				w->residual[t] = clamp_num(lt->residual_norms[k]);
}

/* ---- the table ------------------------------------------------------- */

int dml_jobs_new(struct dml_jobs **out)
{
	if (!out)
		return DML_EINVAL;
	*out = dml_xcalloc(1, sizeof(**out));
	return 0;
}

void job_free(struct job_impl *ji)
{
	dml_job_spec_free(ji->job.spec);
	free(ji->job.ckpts);
	free(ji->job.owner);
	dml_handover_free(&ji->ho);
	free(ji->listed);
	free(ji->listed_at);
	free(ji->slot);
	free(ji->job.workers);
	free(ji->priv);
	free(ji);
}

void dml_jobs_free(struct dml_jobs *jobs)
{
	if (!jobs)
		return;
	for (size_t i = 0; i < jobs->n; i++)
		job_free(jobs->v[i]);
	free(jobs->v);
	free(jobs);
}

int dml_jobs_submit(struct dml_jobs *jobs, const Dml__JobSpec *spec, uint64_t now,
		    uint32_t *id, char *err, size_t errlen)
{
	struct job_impl *ji;
	struct dml_job *job;
	int rc;

	if (!jobs || !spec || !id)
		return DML_EINVAL;
	rc = dml_job_spec_check(spec, err, errlen);
	if (rc)
		return rc;
	if (jobs->n >= UINT32_MAX - 1)
		return dml_fail(DML_EINVAL, err, errlen, "no job ids left");
	if (jobs->n == jobs->cap) {
		jobs->cap = jobs->cap ? 2 * jobs->cap : 16;
		jobs->v = dml_xrealloc(jobs->v, jobs->cap * sizeof(*jobs->v));
	}
	ji = dml_xcalloc(1, sizeof(*ji));
	job = &ji->job;
	job->id = (uint32_t)(jobs->n + 1);
	job->spec = dml_job_spec_copy(spec);
	job->state = DML__JOB_STATE__PENDING;
	job->submitted_ms = job->changed_ms = now;
	text_set(job->reason, "waiting to start");
	dml_job_event(job, "submitted");
	jobs->v[jobs->n++] = ji;
	*id = job->id;
	return 0;
}

size_t dml_jobs_count(const struct dml_jobs *jobs)
{
	return jobs ? jobs->n : 0;
}

struct dml_job *dml_jobs_at(struct dml_jobs *jobs, size_t i)
{
	return jobs && i < jobs->n ? &jobs->v[i]->job : NULL;
}

struct dml_job *dml_jobs_find(struct dml_jobs *jobs, uint32_t id)
{
	return jobs && id >= 1 && id <= jobs->n ? &jobs->v[id - 1]->job : NULL;
}

struct dml_job *dml_jobs_active(struct dml_jobs *jobs)
{
	for (size_t i = 0; jobs && i < jobs->n; i++) {
		if (job_active(&jobs->v[i]->job))
			return &jobs->v[i]->job;
	}
	return NULL;
}

struct dml_job *dml_jobs_next(struct dml_jobs *jobs)
{
	if (!jobs || dml_jobs_active(jobs))
		return NULL;
	for (size_t i = 0; i < jobs->n; i++) {
		if (jobs->v[i]->job.state == DML__JOB_STATE__PENDING)
			return &jobs->v[i]->job;
	}
	return NULL;
}

/* ---- starting ---------------------------------------------------------- */

static int cand_cmp(const void *a, const void *b)
{
	const struct dml_job_candidate *x = a, *y = b;

	return (x->node_id > y->node_id) - (x->node_id < y->node_id);
}

static int u32_cmp(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;

	return (x > y) - (x < y);
}

/* The candidates sorted by node id, without id 0 and duplicates; *n in/out. */
static struct dml_job_candidate *cand_sorted(const struct dml_job_candidate *cand,
					     size_t *n)
{
	struct dml_job_candidate *s = dml_xmalloc((*n ? *n : 1) * sizeof(*s));
	size_t k = 0;

	for (size_t i = 0; i < *n; i++) {
		if (cand[i].node_id)
			s[k++] = cand[i];
	}
	qsort(s, k, sizeof(*s), cand_cmp);
	*n = 0;
	for (size_t i = 0; i < k; i++) {
		if (*n == 0 || s[*n - 1].node_id != s[i].node_id)
			s[(*n)++] = s[i];
	}
	return s;
}

static int cand_has(const struct dml_job_candidate *s, size_t n, uint32_t id)
{
	struct dml_job_candidate key = { .node_id = id };

	return n && bsearch(&key, s, n, sizeof(*s), cand_cmp) != NULL;
}

/*
 * Keeps in s (sorted, n entries) only the workers named by worker_ids.
 * Returns 0, or DML_ESTATE with the reason set when one of them is missing.
 */
static int cand_pick_ids(struct dml_job *job, struct dml_job_candidate *s, size_t *n)
{
	const Dml__JobSpec *spec = job->spec;
	uint32_t *ids = dml_xmalloc(spec->n_worker_ids * sizeof(*ids));
	struct num_list missing = { 0 };
	size_t k = 0;

	memcpy(ids, spec->worker_ids, spec->n_worker_ids * sizeof(*ids));
	qsort(ids, spec->n_worker_ids, sizeof(*ids), u32_cmp);
	for (size_t i = 0; i < spec->n_worker_ids; i++) {
		if (!cand_has(s, *n, ids[i]))
			num_list_add(&missing, ids[i]);
	}
	for (size_t i = 0; !missing.n && i < *n; i++) {
		if (bsearch(&s[i].node_id, ids, spec->n_worker_ids, sizeof(*ids), u32_cmp))
			s[k++] = s[i];
	}
	free(ids);
	if (missing.n) {
		text_set(job->reason, "waiting for worker%s %s (%zu of %zu alive)",
			 missing.n == 1 ? "" : "s", num_list_str(&missing),
			 spec->n_worker_ids - missing.n, spec->n_worker_ids);
		return DML_ESTATE;
	}
	*n = k;
	return 0;
}

int dml_jobs_start(struct dml_job *job, const struct dml_job_candidate *cand, size_t n,
		   uint64_t now)
{
	struct num_list ids = { 0 }, counts = { 0 };
	struct dml_job_candidate *s;
	uint32_t want;
	int rc = 0;

	if (!job || job->state != DML__JOB_STATE__PENDING || (n && !cand))
		return DML_EINVAL;
	s = cand_sorted(cand, &n);
	want = job->spec->workers;
	if (job->spec->n_worker_ids) {
		rc = cand_pick_ids(job, s, &n);
	} else if (want && n < want) {
		text_set(job->reason, "waiting for %" PRIu32 " worker%s, %zu alive", want,
			 want == 1 ? "" : "s", n);
		rc = DML_ESTATE;
	} else if (n == 0) {
		text_set(job->reason, "waiting for a worker, none alive");
		rc = DML_ESTATE;
	} else if (want) {
		n = want;          /* the lowest ids */
	}
	if (rc) {
		free(s);
		return rc;
	}
	for (size_t i = 0; i < n && worker_add(job, s[i].node_id, s[i].rate, 0); i++)
		;
	free(s);
	job->num_partitions = job->spec->partitions ? job->spec->partitions
				: (uint64_t)DML_JOB_PARTS_PER_WORKER * job->nworkers;
	if (job->num_partitions > UINT32_MAX)
		job->num_partitions = UINT32_MAX;
	job_reassign(job, NULL, 0, NULL, now);
	for (size_t i = 0; i < job->nworkers; i++) {
		struct dml_job_worker *w = &job->workers[i];

		text_set(w->reason, "started with %" PRIu64 " partitions", w->npart);
		num_list_add(&ids, w->node_id);
		num_list_add(&counts, w->npart);
	}
	job->started_ms = now;
	job_state_set(job, DML__JOB_STATE__RUNNING, now);
	job_running_reason(job);
	dml_job_event(job, "started on worker%s %s (%" PRIu64 " partitions: %s)",
		  job->nworkers == 1 ? "" : "s", num_list_str(&ids), job->num_partitions,
		  num_list_str(&counts));
	return 0;
}
