/*
 * Each job's state machine (see jobs.h): its stop conditions, its
 * membership (workers lost, straggling, available), the progress its
 * workers report, and what operators ask (pause, resume, stop, rebalance).
 *
 *
 * Two choices the header leaves open. Losing a worker may end the job:
 * when every worker left is at max_clocks (or finished) the job is DONE at
 * once, since those workers report no more; dml_jobs_worker_lost() still
 * returns 1 and the assignment the caller sends carries the end state. A
 * worker's examples only grow: a report whose count went down comes from a
 *
 * Must never: do I/O, log, read a clock, trust a number of a progress report
 * (each is clamped: negative or NaN to 0, infinite to the largest double),
 * or leave a partition of an active job unowned while a live worker exists.
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

/* ---- stop conditions ------------------------------------------------- */

uint64_t job_examples(const struct dml_job *job)
{
	return impl_c(job)->examples;
}

/* The training set's size: what the workers report, else the spec's. */
uint64_t job_data_examples(const struct dml_job *job)
{
	return job->data_examples ? job->data_examples : job->spec->examples;
}

/*
 * The stop condition met, described into why; 0 when none is. reporter:
 * the worker whose report this follows, or NO_WORKER. Every worker at its
 * stop can only have come about with the reporter there, so a live
 * reporter that is not spares the look at every worker (a report of each
 * of 10,000 workers would cost 10,000 looks).
 */
static int job_stop_met(const struct dml_job *job, size_t reporter, char *why, size_t len)
{
	const Dml__JobSpec *spec = job->spec;
	uint64_t data = job_data_examples(job);
	size_t live = 0, at_max = 0, finished = 0;
	const struct dml_job_worker *r = reporter == NO_WORKER ? NULL : &job->workers[reporter];

	if (*spec->metric && spec->target > 0 && job->has_metric) {
		int lower = dml_metric_lower_is_better(spec->metric);

		if (lower ? job->metric <= spec->target : job->metric >= spec->target) {
			snprintf(why, len, "%s %g reached target %g", spec->metric, job->metric,
				 spec->target);
			return 1;
		}
	}
	if (spec->max_epochs > 0 && data > 0 &&
	    (double)job_examples(job) >= spec->max_epochs * (double)data) {
		snprintf(why, len, "%g epochs (%" PRIu64 " examples of %" PRIu64 ")",
			 spec->max_epochs, job_examples(job), data);
		return 1;
	}
	if (r && r->live && !r->finished && !(spec->max_clocks && r->clock >= spec->max_clocks))
		return 0;
	for (size_t i = 0; i < job->nworkers; i++) {
		const struct dml_job_worker *w = &job->workers[i];

		if (!w->live)
			continue;
		live++;
		if (spec->max_clocks && w->clock >= spec->max_clocks)
			at_max++;
		else if (w->finished)
			finished++;
	}
	if (live == 0 || at_max + finished < live)
		return 0;
	if (finished == 0)
		snprintf(why, len, "every worker reached %" PRIu64 " clocks", spec->max_clocks);
	else
		snprintf(why, len, "every worker finished");
	return 1;
}

static void job_done(struct dml_job *job, const char *why, uint64_t now)
{
	job_state_set(job, DML__JOB_STATE__DONE, now);
	text_set(job->reason, "%s", why);
	dml_job_event(job, "done: %s", why);
}

/* ---- membership -------------------------------------------------------- */

int dml_jobs_worker_lost(struct dml_job *job, uint32_t node_id, const char *reason,
			 uint64_t now)
{
	struct num_list gainers = { 0 };
	struct dml_job_worker *w;
	char cause[48], why[DML_JOB_REASON_MAX + 1] = "", stop[DML_JOB_REASON_MAX + 1];
	char what[DML_JOB_REASON_MAX + 8];
	uint64_t held;
	size_t i;

	if (!job || !job_active(job))
		return 0;
	i = worker_index(job, node_id);
	if (i == NO_WORKER || !job->workers[i].live)
		return 0;
	w = &job->workers[i];
	w->live = 0;
	held = w->npart;
	if (reason && *reason)
		snprintf(why, sizeof(why), " (%s)", reason);
	snprintf(what, sizeof(what), "lost%s", why);
	text_set(w->reason, "%s", what);
	snprintf(cause, sizeof(cause), "worker %" PRIu32 " lost", node_id);
	job_reassign(job, cause, node_id, &gainers, now);
	if (live_count(job) == 0)
		dml_job_event(job, "worker %" PRIu32 " lost%s: no live worker, %" PRIu64
			  " partitions wait unowned", node_id, why, job->num_partitions);
	else
		job_event_handed(job, node_id, what, held, &gainers);
	job_running_reason(job);
	/* the workers left may all be at their stop already, and report no more */
	if (job_stop_met(job, NO_WORKER, stop, sizeof(stop)))
		job_done(job, stop, now);
	return 1;
}

int dml_jobs_worker_straggles(struct dml_job *job, uint32_t node_id, uint64_t clock,
			      uint64_t waited_ms, uint64_t now)
{
	const struct dml_job_worker *w;
	double own_ms, limit;
	char reason[96];
	size_t i;

	if (!job || job->state != DML__JOB_STATE__RUNNING || job->spec->staleness < 0)
		return 0;
	i = worker_index(job, node_id);
	if (i == NO_WORKER || !job->workers[i].live)
		return 0;
	/* Set aside already, and back in the clock set holding it again. */
	if (impl(job)->priv[i].stalled_since_ms)
		return 1;
	w = &job->workers[i];
	/* Not one clock reported yet: it may still be loading its data. */
	if (!w->clock)
		return 0;
	own_ms = 1000.0 * dml_work_s(w->compute_s, w->wait_s, w->held_s) / (double)w->clock;
	limit = fmax((double)job_hold_ms(job), STRAGGLE_CLOCKS * own_ms);
	if ((double)waited_ms < limit)
		return 0;
	snprintf(reason, sizeof(reason), "held the others at clock %" PRIu64 " for %" PRIu64
		 " ms", clock, waited_ms);
	worker_set_aside(job, i, reason, "stalled (held the others)", now);
	job_running_reason(job);
	return 1;
}

/* Whether the spec lets a worker that is not in the job join it. */
static int job_recruits(const struct dml_job *job, uint32_t node_id)
{
	const Dml__JobSpec *spec = job->spec;

	if (spec->n_worker_ids) {
		for (size_t i = 0; i < spec->n_worker_ids; i++) {
			if (spec->worker_ids[i] == node_id)
				return 1;
		}
		return 0;
	}
	return spec->workers == 0 || live_count(job) < spec->workers;
}

int dml_jobs_worker_available(struct dml_job *job, const struct dml_job_candidate *c,
			      uint64_t now)
{
	struct dml_job_worker *w;
	const char *how;
	char cause[48];
	uint64_t clock;
	size_t i;

	if (!job || !c || c->node_id == 0 || !job_active(job))
		return 0;
	clock = dml_job_clock(job);
	i = worker_index(job, c->node_id);
	if (i != NO_WORKER) {
		w = &job->workers[i];
		if (w->live)
			return 0;
		w->live = 1;
		w->finished = 0;
		w->clock = clock;
		if (!impl(job)->priv[i].rate_measured)
			w->rate = rate_ok(c->rate);
		if (!impl(job)->priv[i].speed_measured)
			w->speed = rate_ok(c->rate);
		how = "rejoined";
	} else {
		if (!job_recruits(job, c->node_id))
			return 0;
		if (!worker_add(job, c->node_id, c->rate, clock))
			return 0;
		i = job->nworkers - 1;
		how = "joined";
	}
	snprintf(cause, sizeof(cause), "worker %" PRIu32 " %s", c->node_id, how);
	job_reassign(job, cause, c->node_id, NULL, now);
	w = &job->workers[i];
	text_set(w->reason, "%s at clock %" PRIu64 " with %" PRIu64 " partitions", how,
		 clock, w->npart);
	dml_job_event(job, "worker %" PRIu32 " %s at clock %" PRIu64 ": %" PRIu64 " partitions",
		  c->node_id, how, clock, w->npart);
	job_running_reason(job);
	return 1;
}

/* ---- progress ---------------------------------------------------------- */

/*
 * A worker's examples per second of its own work, averaged in once it
 * worked SPEED_SAMPLE_S since the last measure (a fast worker computes a
 * few ms between two reports, too little to tell its speed from the
 * noise). Its work is the longer of two: work_s, its steps' time computing
 * and waiting for its own requests; and cpu_s over the cores it may use.
 * Under a CPU quota a step that fits in the period's budget runs at full
 * speed, so the first alone made a 0.15 core worker look as fast as an
 * unlimited one whenever its batch was small, and its batch swung.
 */
/* Average sample into *avg (the first one as it is). */
static void average_in(double *avg, int *measured, double sample)
{
	*avg = *measured ? RATE_ALPHA * sample + (1 - RATE_ALPHA) * *avg : sample;
	*measured = 1;
}

/*
 * A worker's link: bytes per second of its own communication (its waits
 * less what servers held its pulls for others), averaged in once it
 * communicated SPEED_SAMPLE_S since the last measure.
 */
static void worker_link(struct dml_job_worker *w, struct worker_priv *wp, uint64_t bytes,
			double comm_s)
{
	double sample;

	/* a count that went down is a restarted worker counting from 0 again */
	if (bytes < wp->mark_bytes || comm_s < wp->mark_comm_s) {
		wp->mark_bytes = bytes;
		wp->mark_comm_s = comm_s;
		return;
	}
	if (comm_s - wp->mark_comm_s < SPEED_SAMPLE_S)
		return;
	sample = (double)(bytes - wp->mark_bytes) / (comm_s - wp->mark_comm_s);
	wp->mark_bytes = bytes;
	wp->mark_comm_s = comm_s;
	if (sample > 0 && isfinite(sample))
		average_in(&w->link_bps, &wp->link_measured, sample);
}

static void worker_speed(struct dml_job_worker *w, struct worker_priv *wp,
			 uint64_t examples, double work_s, double cpu_s, double cores)
{
	double sample, busy;

	/* a count that went down is a restarted worker counting from 0 again */
	if (examples < wp->mark_examples || work_s < wp->mark_work_s ||
	    cpu_s < wp->mark_cpu_s) {
		wp->mark_examples = examples;
		wp->mark_work_s = work_s;
		wp->mark_cpu_s = cpu_s;
		return;
	}
	busy = dml_busy_s(work_s - wp->mark_work_s, cpu_s - wp->mark_cpu_s, cores);
	if (busy < SPEED_SAMPLE_S)
		return;
	sample = (double)(examples - wp->mark_examples) / busy;
	wp->mark_examples = examples;
	wp->mark_work_s = work_s;
	wp->mark_cpu_s = cpu_s;
	if (sample > 0 && isfinite(sample))
		average_in(&w->speed, &wp->speed_measured, sample);
}

static void worker_report(struct dml_job *job, size_t i, const Dml__Progress *p,
			  uint64_t now)
{
	struct dml_job_worker *w = &job->workers[i];
	struct worker_priv *wp = &impl(job)->priv[i];
	double rate = clamp_num(p->examples_per_s), compute_s = clamp_num(p->compute_s);
	double wait_s = clamp_num(p->wait_s), held_s = clamp_num(p->held_s);
	uint64_t added;

	impl(job)->reports++;
	w->clock = p->clock;
	worker_speed(w, wp, p->examples, dml_work_s(compute_s, wait_s, held_s),
		     clamp_num(p->cpu_s), clamp_num(p->cores));
	worker_link(w, wp, p->bytes, dml_work_s(0, wait_s, held_s));
	/* a count that went down is a restarted worker counting from 0 again */
	added = p->examples >= wp->examples_raw ? p->examples - wp->examples_raw : p->examples;
	w->examples += added;
	impl(job)->examples += added;
	wp->examples_raw = p->examples;
	w->examples_per_s = rate;
	if (rate > 0)
		average_in(&w->rate, &wp->rate_measured, rate);
	/* NaN is "no loss yet" (dml.proto), not a loss of 0 */
	if (!isnan(p->loss)) {
		w->loss = clamp_num(p->loss);
		wp->has_loss = 1;
	}
	w->compute_s = compute_s;
	w->wait_s = wait_s;
	w->held_s = held_s;
	w->cpu_s = clamp_num(p->cpu_s);
	w->cores = clamp_num(p->cores);
	worker_links_set(job, w, p->links);
	w->finished = p->finished != 0;
	w->last_report_ms = now;
	if (p->data_examples)
		job->data_examples = p->data_examples;
	if (p->has_metric && !isnan(p->metric)) {
		job->metric = clamp_num(p->metric);
		job->has_metric = 1;
	}
}

/*
 * A worker's report of where its partitions stand, and of those it let go
 * of. Returns 1 when a partition went on to another worker (its
 * assignment changed).
 */
static int job_handed(struct dml_job *job, size_t i, const Dml__Progress *p, uint64_t now)
{
	struct job_impl *ji = impl(job);
	uint64_t hold = job_hold_ms(job), late;
	int moved;

	if (!ji->ho.pos || !job->owner)
		return 0;
	moved = dml_handover_report(&ji->ho, job->owner, (uint32_t)i, p);
	late = dml_handover_expire(&ji->ho, job->owner, now, hold);
	if (late)
		dml_job_event(job, "%" PRIu64 " partitions handed on without their worker letting "
			  "go of them within %" PRIu64 " ms (it may walk them again)", late, hold);
	if (!moved && !late)
		return 0;
	job->assignment_version++;
	return 1;
}

/*
 * Whether this report looks at the whole job's load (drift, stalls): a look
 * costs O(workers log workers), and at every report of 10,000 workers it
 * cost 3 ms each, 30 s a round of reports. A large job looks at most every
 * CHECK_EVERY_MS, which the hold times it compares with dwarf.
 */
static int job_check_due(struct job_impl *ji, uint64_t now)
{
	if (ji->job.nworkers <= CHECK_ALWAYS_WORKERS)
		return 1;
	if (ji->checked_ms && since(now, ji->checked_ms) < CHECK_EVERY_MS)
		return 0;
	ji->checked_ms = now;
	return 1;
}

int dml_jobs_progress(struct dml_job *job, uint32_t node_id, const Dml__Progress *p,
		      uint64_t now)
{
	char why[DML_JOB_REASON_MAX + 1], text[ERROR_TEXT_MAX + 1];
	int moved;
	size_t i;

	if (!job || !p)
		return DML_EINVAL;
	i = worker_index(job, node_id);
	if (i == NO_WORKER)
		return DML_ENOTFOUND;
	worker_report(job, i, p, now);
	if (!job_active(job))
		return 0;
	moved = job_handed(job, i, p, now);
	if (p->error && *p->error) {
		text_clean(text, sizeof(text), p->error);
		snprintf(why, sizeof(why), "worker %" PRIu32 ": %s", node_id, text);
		dml_jobs_fail(job, why, now);
		return 1;
	}
	if (!job_stop_met(job, i, why, sizeof(why)))
		return moved | (job_check_due(impl(job), now) ?
				job_stalls(job, now) | job_rebalance_auto(job, now) : 0);
	job_done(job, why, now);
	return 1;
}

/* ---- operators --------------------------------------------------------- */

/* `dmlctl rebalance`: split the partitions by the measured rates now. */
static int job_rebalance_now(struct dml_jobs *jobs, uint32_t id, uint64_t now, char *err,
			     size_t errlen)
{
	struct dml_job *job = dml_jobs_find(jobs, id);
	double dev;

	if (!job)
		return dml_fail(DML_ENOTFOUND, err, errlen, "no job %" PRIu32, id);
	if (!job_active(job))
		return dml_fail(DML_ESTATE, err, errlen, "job %" PRIu32 " is %s", id,
				 dml_job_state_name(job->state));
	dev = load_deviation(job);
	job_reassign(job, "rebalanced by operator", 0, NULL, now);
	if (dev >= 0)
		dml_job_event(job, "rebalanced by operator (load deviation %.0f%%)",
			  isinf(dev) ? 999 : dev * 100);
	else
		dml_job_event(job, "rebalanced by operator (not every worker measured its rate "
			  "yet: those count as 1 example/s)");
	return 0;
}

int dml_jobs_control(struct dml_jobs *jobs, uint32_t id, int action, uint64_t now,
		     char *err, size_t errlen)
{
	struct dml_job *job;
	Dml__JobState from, to;
	const char *what;

	switch (action) {
	case DML__JOB_ACTION__STOP:
		what = "stopped";
		to = DML__JOB_STATE__STOPPED;
		break;
	case DML__JOB_ACTION__PAUSE:
		what = "paused";
		to = DML__JOB_STATE__PAUSED;
		break;
	case DML__JOB_ACTION__RESUME:
		what = "resumed";
		to = DML__JOB_STATE__RUNNING;
		break;
	case DML__JOB_ACTION__REBALANCE:
		return job_rebalance_now(jobs, id, now, err, errlen);
	default:
		return dml_fail(DML_EINVAL, err, errlen, "unknown action %d", action);
	}
	job = dml_jobs_find(jobs, id);
	if (!job)
		return dml_fail(DML_ENOTFOUND, err, errlen, "no job %" PRIu32, id);
	from = job->state;
	if ((to == DML__JOB_STATE__STOPPED && dml_job_finished(job)) ||
	    (to == DML__JOB_STATE__PAUSED && from != DML__JOB_STATE__RUNNING) ||
	    (to == DML__JOB_STATE__RUNNING && from != DML__JOB_STATE__PAUSED))
		return dml_fail(DML_ESTATE, err, errlen, "job %" PRIu32 " is %s", id,
				    dml_job_state_name(from));
	job_state_set(job, to, now);
	text_set(job->reason, "%s by operator", what);
	job_running_reason(job);
	dml_job_event(job, "%s by operator", what);
	return 0;
}

void dml_jobs_fail(struct dml_job *job, const char *reason, uint64_t now)
{
	if (!job || dml_job_finished(job))
		return;
	job_state_set(job, DML__JOB_STATE__FAILED, now);
	text_set(job->reason, "%s", reason && *reason ? reason : "failed");
	dml_job_event(job, "failed: %s", job->reason);
}

void dml_jobs_set_reason(struct dml_job *job, const char *reason, uint64_t now)
{
	if (job && reason && job->state == DML__JOB_STATE__PENDING)
		text_set(job->reason, "%s", reason);
}
