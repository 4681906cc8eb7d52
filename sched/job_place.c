/*
 * A job's placement (see jobs.h): how its partitions and batches are shared
 * out over its workers, and when that changes. Every (re)assignment goes
 * through job_reassign(): counts by rate from dml_assign_partition_counts(),
 * then owners from dml_assign_partitions() with the previous owners, so
 * partitions move only as much as the new counts require.
 *
 * Worker rates: the candidate's rate when it joins; once it reports a
 * positive examples/s, an exponential moving average of its reports; and
 * its speed, examples per second of its own work (computing, and waiting
 * for its own requests: wait_s less held_s, the time its pulls were held
 * for other workers' clocks), from the growth of those between reports,
 * averaged the same way, its work being at least its CPU time over the
 * cores it may use (worker_speed). Under BSP a worker's examples/s is the job's
 * pace, not its speed: a job whose batches follow the rates (LB-BSP,
 * dml_job_batch_by_rate) weighs its workers by speed, for batches and
 * partitions alike; any other by examples/s, with batch_size for everyone.
 * A step's own communication costs a slow worker more, and does not shrink
 * with its batch: a speed that counts it makes the batches converge to
 * equal step times (b_i / speed_i), where computing alone left the slow
 * worker the last to every clock. The
 * rate matters at the next reassignment: a loss, a join, `dmlctl
 * rebalance`, or (rebalance = auto) a drift: once every live worker measured
 * its rate, the load deviation of the partitions held from those the rates
 * call for (dml_assign_load_deviation) above rebalance_threshold, without a
 * break and with no other reassignment, for rebalance_hold_ms. A noisy rate
 * cannot make partitions flap: the deviation must last, and adopting the
 * ideal counts brings it to 0.
 *
 * Stragglers and stalls: a worker below min_rate, or one that the servers
 * name as holding the others back, is set aside and retried later.
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

/* What worker i's share follows, and whether it was measured yet. */
static double worker_weight(const struct dml_job *job, size_t i, int *measured)
{
	const struct dml_job_worker *w = &job->workers[i];
	const struct worker_priv *wp = &impl_c(job)->priv[i];

	if (dml_job_batch_by_rate(job->spec)) {
		*measured = wp->speed_measured;
		return rate_ok(w->speed);
	}
	*measured = wp->rate_measured;
	return rate_ok(w->rate);
}

/*
 * Whether worker i takes a share of the work: live and not set aside as
 * stalled, or live when every live worker is stalled (partitions never
 * wait unowned while a live worker exists).
 */
static int takes_share(const struct dml_job *job, size_t i)
{
	const struct worker_priv *priv = impl_c(job)->priv;

	if (!job->workers[i].live)
		return 0;
	if (!priv[i].stalled_since_ms)
		return 1;
	for (size_t k = 0; k < job->nworkers; k++)
		if (job->workers[k].live && !priv[k].stalled_since_ms)
			return 0;
	return 1;
}

/*
 * Whether a live worker's weight is not a measure of this job: its profile
 * (another job's examples/s on that machine) or a stand-in.
 */
static int split_guessed(const struct dml_job *job)
{
	for (size_t i = 0; i < job->nworkers; i++) {
		int measured;

		worker_weight(job, i, &measured);
		if (takes_share(job, i) && !measured)
			return 1;
	}
	return 0;
}

/* -1, 0 or 1: the sign of b - a. */
static int direction(uint64_t a, uint64_t b)
{
	return (b > a) - (b < a);
}

/*
 * The batches of a split by speed (LB-BSP) from the speeds in rates (the
 * dead at 0), into batches. With step (a reassignment, not a measure), a
 * worker whose batch would move back the way it came goes only half way: a
 * worker under a CPU quota is fast while its step fits in its quota and
 * slow beyond, so its speed depends on its batch, and full steps swung a
 * slow worker's batch 512 -> 122 -> 268 -> 142; halving after a reversal
 * settles at the balance, while a move that keeps its direction stays
 * whole (it was 4 holds from 512 to 156 when every move was halved).
 */
static void split_batches(const struct dml_job *job, double *rates, const bool *live,
			  size_t nlive, int step, uint64_t *batches)
{
	const struct worker_priv *priv = impl_c(job)->priv;
	uint64_t total = dml_job_clock_batch(job->spec, nlive);
	uint64_t cap = dml_job_batch_max(job->spec);
	uint32_t n = (uint32_t)job->nworkers;
	int halved = 0;

	/* every argument is ours and valid: the calls cannot refuse them */
	dml_assign_batch_sizes(total, rates, live, n, cap, batches);
	for (uint32_t i = 0; step && i < n; i++) {
		uint64_t now = job->workers[i].batch;

		rates[i] = live[i] ? (double)batches[i] : 0;
		if (live[i] && priv[i].last_move &&
		    direction(now, batches[i]) == -priv[i].last_move) {
			rates[i] = ((double)now + (double)batches[i]) / 2;
			halved = 1;
		}
	}
	if (halved)
		dml_assign_batch_sizes(total, rates, live, n, cap, batches);
	for (uint32_t i = 0; i < n; i++)
		rates[i] = (double)batches[i];
}

/* A clock_batch split evenly over the live workers (batch_split = equal). */
static void split_equal(const struct dml_job *job, const bool *live, size_t nlive,
			uint64_t *batches)
{
	size_t n = job->nworkers;
	double *ones = dml_xcalloc(n, sizeof(*ones));

	for (size_t i = 0; i < n; i++)
		ones[i] = live[i] ? 1 : 0;
	/* every argument is ours and valid: the call cannot refuse them */
	dml_assign_batch_sizes(dml_job_clock_batch(job->spec, nlive), ones, live,
			       (uint32_t)n, dml_job_batch_max(job->spec), batches);
	free(ones);
}

/*
 * The partition counts and batch sizes the live workers' weights call for
 * (counts, batches: nworkers entries each); the number of live workers (0:
 * all are 0). *measured: 0 when a live worker's weight is a stand-in (no
 * report yet). When batches follow rates (LB-BSP), partitions follow the
 * batches, so each worker walks its share of an epoch at its pace. step:
 * for a reassignment (split_batches), not to measure.
 */
static size_t ideal_shares(const struct dml_job *job, uint64_t *counts, uint64_t *batches,
			   int *measured, int step)
{
	size_t n = job->nworkers, nlive = 0;
	double *rates = dml_xcalloc(n ? n : 1, sizeof(*rates));
	bool *live = dml_xcalloc(n ? n : 1, sizeof(*live));

	*measured = 1;
	for (size_t i = 0; i < n; i++) {
		int m = 1;

		live[i] = takes_share(job, i);
		rates[i] = live[i] ? worker_weight(job, i, &m) : 0;
		if (live[i] && !m)
			*measured = 0;
		nlive += live[i];
		counts[i] = 0;
		batches[i] = live[i] ? job->spec->batch_size : 0;
	}
	/* Partitions after batches: at least one for every worker with a batch,
	 * or it would train on nothing (when there are enough of them). */
	if (nlive && dml_job_batch_by_rate(job->spec))
		split_batches(job, rates, live, nlive, step, batches);
	else if (nlive && job->spec->clock_batch)
		split_equal(job, live, nlive, batches);
	if (nlive && (!dml_job_batch_by_rate(job->spec) ||
		      dml_assign_batch_sizes(job->num_partitions, rates, live, (uint32_t)n,
					     job->num_partitions, counts) != 0))
		dml_assign_partition_counts(job->num_partitions, rates, live, (uint32_t)n,
					    counts);
	free(rates);
	free(live);
	return nlive;
}

/* A new plan: partitions whose walker is gone go to their owners now. */
static void job_handover(struct dml_job *job, uint64_t now)
{
	struct job_impl *ji = impl(job);
	bool *live = dml_xcalloc(job->nworkers ? job->nworkers : 1, sizeof(*live));

	if (!ji->ho.pos)
		dml_handover_init(&ji->ho, job->num_partitions);
	for (size_t i = 0; i < job->nworkers; i++)
		live[i] = job->workers[i].live;
	dml_handover_plan(&ji->ho, job->owner, live, job->nworkers, now);
	free(live);
}

/*
 * Splits the partitions over the live workers by rate, moving as few as
 * possible, and bumps the assignment version. With a cause ("worker 3
 * lost"), every other worker whose share changed gets it as its reason,
 * and the ones that gained are listed in gainers (may be NULL).
 */
void job_reassign(struct dml_job *job, const char *cause, uint32_t subject,
		  struct num_list *gainers, uint64_t now)
{
	size_t n = job->nworkers;
	uint64_t npart = job->num_partitions;
	uint64_t *counts = dml_xcalloc(n ? n : 1, sizeof(*counts));
	uint64_t *batches = dml_xcalloc(n ? n : 1, sizeof(*batches));
	uint32_t *owner = dml_xmalloc(npart * sizeof(*owner));
	int measured;

	if (ideal_shares(job, counts, batches, &measured, 1) == 0) {
		for (uint64_t p = 0; p < npart; p++)
			owner[p] = DML_ASSIGN_NONE;
	} else {
		/* a plan without the previous owners needs no scratch memory */
		if (dml_assign_partitions(npart, counts, (uint32_t)n, job->owner, owner))
			dml_assign_partitions(npart, counts, (uint32_t)n, NULL, owner);
	}
	for (size_t i = 0; i < n; i++) {
		struct dml_job_worker *w = &job->workers[i];

		if (cause && w->node_id != subject && counts[i] != w->npart) {
			if (counts[i] > w->npart) {
				text_set(w->reason, "gained %" PRIu64 " partitions (%s)",
					 counts[i] - w->npart, cause);
				if (gainers)
					num_list_add(gainers, w->node_id);
			} else {
				text_set(w->reason, "gave up %" PRIu64 " partitions (%s)",
					 w->npart - counts[i], cause);
			}
		}
		w->npart = counts[i];
		if (w->live) {
			impl(job)->priv[i].last_move = direction(w->batch, batches[i]);
			w->batch = (uint32_t)batches[i];
		}
	}
	free(job->owner);
	job->owner = owner;
	job_handover(job, now);
	impl(job)->guessed = split_guessed(job);
	job->assignment_version++;
	free(counts);
	free(batches);
}

/*
 * The load deviation of the partitions held from those the weights call
 * for, and of the batches given from those they call for when batches
 * follow rates: the larger (dml_assign_load_deviation). -1 while a live
 * worker has not measured its weight yet (it is a stand-in) or nothing is
 * to be split.
 */
double load_deviation(const struct dml_job *job)
{
	size_t n = job->nworkers;
	uint64_t *ideal = dml_xcalloc(2 * (n ? n : 1), sizeof(*ideal));
	uint64_t *held = dml_xcalloc(2 * (n ? n : 1), sizeof(*held));
	uint64_t *ideal_batch = ideal + n, *held_batch = held + n;
	double dev = -1, dev_batch = 0;
	int measured;

	for (size_t i = 0; i < n; i++) {
		held[i] = job->workers[i].npart;
		held_batch[i] = takes_share(job, i) ? job->workers[i].batch : 0;
	}
	if (!ideal_shares(job, ideal, ideal_batch, &measured, 0) || !measured ||
	    dml_assign_load_deviation(held, ideal, (uint32_t)n, &dev) != 0)
		dev = -1;
	else if (dml_job_batch_by_rate(job->spec) &&
		 dml_assign_load_deviation(held_batch, ideal_batch, (uint32_t)n,
					   &dev_batch) == 0 && dev_batch > dev)
		dev = dev_batch;
	free(ideal);
	free(held);
	return dev;
}

/* The hold of rebalance = auto, which min_rate uses too. */
uint64_t job_hold_ms(const struct dml_job *job)
{
	return job->spec->rebalance_hold_ms ? job->spec->rebalance_hold_ms : REBALANCE_HOLD_MS;
}

/*
 * rebalance = auto: split the partitions anew once the load has drifted
 * past the threshold for the hold time with no reassignment in between.
 * 1 when it did.
 */
int job_rebalance_auto(struct dml_job *job, uint64_t now)
{
	struct job_impl *ji = impl(job);
	const Dml__JobSpec *sp = job->spec;
	double threshold = sp->rebalance_threshold > 0 ? sp->rebalance_threshold :
			   REBALANCE_THRESHOLD;
	uint64_t hold = job_hold_ms(job);
	double dev;
	char cause[48];

	if (sp->rebalance != DML_REBALANCE_AUTO || job->state != DML__JOB_STATE__RUNNING)
		return 0;
	dev = load_deviation(job);
	/* A split from profiles was a guess: the first measures of this job
	 * replace it at once (dev >= 0: every worker measured) where they
	 * call for it; later drifts must last. */
	if (ji->guessed && dev >= 0 && !(dev > threshold))
		ji->guessed = 0;
	if (ji->guessed && dev > threshold) {
		job_reassign(job, "first measures", 0, NULL, now);
		dml_job_event(job, "split by the workers' first measured rates (load deviation "
			  "%.0f%%)", isinf(dev) ? 999 : dev * 100);
		ji->drift_since_ms = 0;
		return 1;
	}
	if (!(dev > threshold) || ji->drift_version != job->assignment_version) {
		/* no drift, or a new plan since it began: start over */
		ji->drift_since_ms = dev > threshold ? now : 0;
		ji->drift_version = job->assignment_version;
		return 0;
	}
	if (!ji->drift_since_ms)
		ji->drift_since_ms = now;
	if (since(now, ji->drift_since_ms) < hold)
		return 0;
	snprintf(cause, sizeof(cause), "load deviation %.0f%%", isinf(dev) ? 999 : dev * 100);
	job_reassign(job, cause, 0, NULL, now);
	dml_job_event(job, "rebalanced by the workers' rates (%s for %" PRIu64 " ms)", cause,
		  since(now, ji->drift_since_ms));
	ji->drift_since_ms = 0;
	return 1;
}

/*
 * The event of a worker whose partitions went to others: "worker N WHAT:
 * its K partitions to workers ..." (what: "lost (why)", "stalled (...)").
 */
void job_event_handed(struct dml_job *job, uint32_t node_id, const char *what,
		      uint64_t held, struct num_list *gainers)
{
	if (held == 0)
		dml_job_event(job, "worker %" PRIu32 " %s: it held no partitions", node_id, what);
	else
		dml_job_event(job, "worker %" PRIu32 " %s: its %" PRIu64 " partitions to worker%s "
			  "%s", node_id, what, held, gainers->n == 1 ? "" : "s",
			  num_list_str(gainers));
}

/* A worker set aside as stalled takes a share again (job_stalls). */
static void worker_retry(struct dml_job *job, size_t i, uint64_t now)
{
	struct dml_job_worker *w = &job->workers[i];
	struct worker_priv *wp = &impl(job)->priv[i];
	char cause[48];

	wp->stalled_since_ms = wp->slow_since_ms = 0;
	wp->rate_measured = wp->speed_measured = 0;
	w->last_report_ms = now;
	snprintf(cause, sizeof(cause), "worker %" PRIu32 " tries again", w->node_id);
	job_reassign(job, cause, w->node_id, NULL, now);
	text_set(w->reason, "takes %" PRIu64 " partitions again after a stall", w->npart);
	dml_job_event(job, "worker %" PRIu32 " takes a share again after a stall: %" PRIu64
		  " partitions", w->node_id, w->npart);
}

/*
 * A worker that stopped making progress is set aside (job_stalls,
 * dml_jobs_worker_straggles): what it shows as its reason, and event is
 * the event's "stalled (...)".
 */
void worker_set_aside(struct dml_job *job, size_t i, const char *reason,
		      const char *event, uint64_t now)
{
	struct dml_job_worker *w = &job->workers[i];
	struct worker_priv *wp = &impl(job)->priv[i];
	struct num_list gainers = { 0 };
	uint64_t held = w->npart;
	char cause[48];

	wp->stalled_since_ms = now;
	snprintf(cause, sizeof(cause), "worker %" PRIu32 " stalled", w->node_id);
	job_reassign(job, cause, w->node_id, &gainers, now);
	text_set(w->reason, "stalled (%s)", reason);
	job_event_handed(job, w->node_id, event, held, &gainers);
}

/*
 * BSP and SSP: a worker set aside for holding the others takes a share
 * again STALL_RETRY_HOLDS holds later, if it reported since (it makes
 * clocks again: a hung one would be handed partitions it never walks).
 */
static int job_straggler_retries(struct dml_job *job, uint64_t now)
{
	uint64_t hold = job_hold_ms(job);
	int changed = 0;

	for (size_t i = 0; i < job->nworkers; i++) {
		const struct dml_job_worker *w = &job->workers[i];
		const struct worker_priv *wp = &impl(job)->priv[i];

		if (w->live && wp->stalled_since_ms && w->last_report_ms > wp->stalled_since_ms &&
		    since(now, wp->stalled_since_ms) >= STALL_RETRY_HOLDS * hold) {
			worker_retry(job, i, now);
			changed = 1;
		}
	}
	return changed;
}

/*
 * min_rate, in asynchronous jobs: a live worker below it is slow first
 * (the rates already give it less); below it for the hold time, or silent
 * that long, it is set aside as stalled: its partitions (and its batch) go
 * to the others, as a lost worker's would, but it stays a member.
 * STALL_RETRY_HOLDS holds later it takes the share its last rate calls for
 * again, measured afresh, and is set aside again if it is still below. 1
 * when the assignment changed. Under BSP and SSP a stalled worker holds
 * the others at the servers' clock bound, so their rates fall and their
 * reports stop with its own: nothing here can tell which one stalled. The
 * servers can, and say so (dml_jobs_worker_straggles); here such a worker
 * only tries again, once it has reported since it was set aside.
 */
int job_stalls(struct dml_job *job, uint64_t now)
{
	double min_rate = job->spec->min_rate;
	uint64_t hold = job_hold_ms(job);
	int changed = 0;

	if (job->state != DML__JOB_STATE__RUNNING)
		return 0;
	if (job->spec->staleness >= 0)
		return job_straggler_retries(job, now);
	if (!(min_rate > 0))
		return 0;
	for (size_t i = 0; i < job->nworkers; i++) {
		struct dml_job_worker *w = &job->workers[i];
		struct worker_priv *wp = &impl(job)->priv[i];
		/* silent: it reported before, and not for the hold time since the
		 * job last started running */
		int silent = w->last_report_ms && since(now, w->last_report_ms) >= hold &&
			     since(now, job->changed_ms) >= hold;

		if (!w->live)
			continue;
		if (wp->stalled_since_ms) {
			if (since(now, wp->stalled_since_ms) >= STALL_RETRY_HOLDS * hold) {
				worker_retry(job, i, now);
				changed = 1;
			}
			continue;
		}
		if (!silent && (!wp->rate_measured || w->rate >= min_rate)) {
			wp->slow_since_ms = 0;
			continue;
		}
		if (!wp->slow_since_ms)
			wp->slow_since_ms = silent ? w->last_report_ms : now;
		if (since(now, wp->slow_since_ms) >= hold) {
			char reason[64];

			snprintf(reason, sizeof(reason), "%s for %" PRIu64 " ms",
				 silent ? "silent" : "below min_rate",
				 since(now, wp->slow_since_ms));
			worker_set_aside(job, i, reason, silent ? "stalled (no report)" :
					 "stalled (below min_rate)", now);
			changed = 1;
		}
	}
	return changed;
}

void dml_jobs_reroute(struct dml_job *job, const char *why)
{
	if (!job || !job_active(job))
		return;
	job->assignment_version++;
	dml_job_event(job, "%s", why);
}
