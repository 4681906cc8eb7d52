/*
 * The scheduler's job table and each job's state machine (see jobs.h).
 *
 * Jobs live in their own allocations, so a struct dml_job pointer stays
 * valid while the table grows; ids are 1, 2, ... in submission order and
 * jobs are never removed, so job id is at index id - 1. A job's workers are
 * only ever appended (a lost worker stays, marked not live), so the worker
 * indexes that the partition owner array holds stay valid for the job's
 * life. Every (re)assignment goes through job_reassign(): counts by rate
 * from dml_assign_partition_counts(), then owners from
 * dml_assign_partitions() with the previous owners, so partitions move only
 * as much as the new counts require.
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
 * Two choices the header leaves open. Losing a worker may end the job:
 * when every worker left is at max_clocks (or finished) the job is DONE at
 * once, since those workers report no more; dml_jobs_worker_lost() still
 * returns 1 and the assignment the caller sends carries the end state. A
 * worker's examples only grow: a report whose count went down comes from a
 * restarted worker counting from 0, and is added to what it did before.
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

#include "assign.h"
#include "dml_error.h"
#include "frame.h"
#include "handover.h"
#include "job_conf.h"
#include "jobs.h"
#include "util.h"

#define RATE_ALPHA 0.3             /* weight of a new report in the rate average */
#define SPEED_SAMPLE_S 0.05        /* seconds of work a measure of speed spans */
#define REBALANCE_THRESHOLD 0.25   /* rebalance = auto: the default drift, */
#define REBALANCE_HOLD_MS 5000u    /* and how long it must last */
#define STALL_RETRY_HOLDS 4        /* a stalled worker tries again after this many holds */
#define STRAGGLE_CLOCKS 10         /* BSP/SSP: a wait of this many of a worker's own
				    * clocks (and the hold) is a stall, not slowness */
#define CHECK_ALWAYS_WORKERS 64    /* jobs this small look at their load at every report, */
#define CHECK_EVERY_MS 50          /* larger ones at most this often */
#define LIST_MAX 72                /* bytes of a number list inside an event line */
#define ERROR_TEXT_MAX 120         /* bytes of a worker's error text kept */
#define NO_WORKER SIZE_MAX

/* What jobs.c keeps about a worker beyond the public struct. */
struct worker_priv {
	int rate_measured;         /* rate is the average of its reports */
	int speed_measured;        /* speed is the average of its reports */
	/* its examples, work seconds and CPU seconds when speed was last
	 * measured */
	uint64_t mark_examples;
	double mark_work_s, mark_cpu_s;
	int last_move;             /* its batch's last change: -1, 0 (none) or 1 */
	/* min_rate: since when it has been below it (0: it is not), and since
	 * when it has been set aside as stalled (0: it is not) */
	uint64_t slow_since_ms, stalled_since_ms;
	int has_loss;              /* it reported a loss at least once */
	/* its link: bytes and seconds of its own communication when last
	 * measured, and whether link_bps averages measures */
	uint64_t mark_bytes;
	double mark_comm_s;
	int link_measured;
	uint64_t examples_raw;     /* examples in its latest report */
};

struct job_impl {
	struct dml_job job;        /* first: a struct dml_job * is a struct job_impl * */
	struct worker_priv *priv;  /* parallel to job.workers */
	size_t wcap;
	/* rebalance = auto: since when the load has drifted (0: it has not),
	 * and the assignment version that was in force then */
	uint64_t drift_since_ms;
	uint64_t drift_version;
	/* the last split weighed a live worker by its profile or a stand-in,
	 * not by what it measured in this job */
	int guessed;
	struct dml_handover ho;    /* where each partition's walk stands, and who
				    * walks it (from the first plan on) */
	uint64_t examples;         /* the workers' examples together */
	/* the partitions listed for each worker (it owns and walks them),
	 * grouped by worker from listed_at[i] to listed_at[i + 1], as of
	 * assignment version listed_version for listed_n workers */
	uint32_t *listed;
	uint64_t *listed_at;
	uint64_t listed_version;
	size_t listed_n;
	/* reports taken; the job's clock as looked up after report number
	 * clock_reports - 1 at assignment version clock_version
	 * (clock_reports 0: never looked up) */
	uint64_t reports, clock, clock_reports, clock_version;
	uint64_t checked_ms;       /* the load was last looked at (job_check_due) */
	/* node id -> worker index + 1 (0: empty), open addressing, at most
	 * half full: a report finds its worker without looking at the others */
	uint32_t *slot;
	size_t nslots;
};

struct dml_jobs {
	struct job_impl **v;
	size_t n, cap;
};

/* A list of numbers for an event line: "1, 2, 3", or "1, 2, ... and 97 more"
 * when it does not fit. */
struct num_list {
	char s[LIST_MAX];
	size_t n, shown, len;
};

static struct job_impl *impl(struct dml_job *job)
{
	return (struct job_impl *)job;
}

static const struct job_impl *impl_c(const struct dml_job *job)
{
	return (const struct job_impl *)job;
}

static uint64_t since(uint64_t now, uint64_t then)
{
	return now > then ? now - then : 0;
}

static void num_list_add(struct num_list *l, uint64_t v)
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

static const char *num_list_str(struct num_list *l)
{
	if (l->shown < l->n)
		snprintf(l->s + l->len, sizeof(l->s) - l->len, " and %zu more",
			 l->n - l->shown);
	return l->s;
}

static void text_set(char *dst, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

/* Formats into a reason or event buffer (DML_JOB_REASON_MAX + 1 bytes). */
static void text_set(char *dst, const char *fmt, ...)
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

static int fail_with(char *err, size_t errlen, int code, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

/* Writes the reason into err; returns code. */
static int fail_with(char *err, size_t errlen, int code, const char *fmt, ...)
{
	va_list ap;

	if (err && errlen) {
		va_start(ap, fmt);
		vsnprintf(err, errlen, fmt, ap);
		va_end(ap);
	}
	return code;
}

/* A worker's error text, bounded and printable, for reasons and events. */
static void text_clean(char *dst, size_t len, const char *src)
{
	size_t i;

	for (i = 0; src[i] && i + 1 < len && i < ERROR_TEXT_MAX; i++) {
		unsigned char c = (unsigned char)src[i];

		dst[i] = (c < 0x20 || c > 0x7e) ? '?' : (char)c;
	}
	dst[i] = '\0';
}

/* A report's number: negative or NaN to 0, +inf to the largest double. */
static double clamp_num(double v)
{
	if (!(v > 0))
		return 0;
	return isfinite(v) ? v : DBL_MAX;
}

/* A rate as a weight for dml_assign_partition_counts: unknown counts as 1. */
static double rate_ok(double r)
{
	return isfinite(r) && r > 0 ? r : 1;
}

static int job_active(const struct dml_job *job)
{
	return job->state == DML__JOB_STATE__RUNNING || job->state == DML__JOB_STATE__PAUSED;
}

static size_t worker_hash(uint32_t node_id, size_t nslots)
{
	return (size_t)((node_id * UINT64_C(0x9e3779b97f4a7c15)) >> 32) & (nslots - 1);
}

static size_t worker_index(const struct dml_job *job, uint32_t node_id)
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

static size_t live_count(const struct dml_job *job)
{
	size_t n = 0;

	for (size_t i = 0; i < job->nworkers; i++)
		n += job->workers[i].live != 0;
	return n;
}

/* Moves the job to a new state, keeping run_ms and the timestamps. */
static void job_state_set(struct dml_job *job, Dml__JobState state, uint64_t now)
{
	if (job->state == DML__JOB_STATE__RUNNING)
		job->run_ms += since(now, job->changed_ms);
	job->state = state;
	job->changed_ms = now;
	if (dml_job_finished(job))
		job->finished_ms = now;
}

/* The reason of a RUNNING job after its membership changed. */
static void job_running_reason(struct dml_job *job)
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
static struct dml_job_worker *worker_add(struct dml_job *job, uint32_t node_id,
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
static void job_reassign(struct dml_job *job, const char *cause, uint32_t subject,
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
static double load_deviation(const struct dml_job *job)
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
static uint64_t job_hold_ms(const struct dml_job *job)
{
	return job->spec->rebalance_hold_ms ? job->spec->rebalance_hold_ms : REBALANCE_HOLD_MS;
}

/*
 * rebalance = auto: split the partitions anew once the load has drifted
 * past the threshold for the hold time with no reassignment in between.
 * 1 when it did.
 */
static int job_rebalance_auto(struct dml_job *job, uint64_t now)
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
static void job_event_handed(struct dml_job *job, uint32_t node_id, const char *what,
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
static void worker_set_aside(struct dml_job *job, size_t i, const char *reason,
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
static int job_stalls(struct dml_job *job, uint64_t now)
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

/* ---- the table ------------------------------------------------------- */

int dml_jobs_new(struct dml_jobs **out)
{
	if (!out)
		return DML_EINVAL;
	*out = dml_xcalloc(1, sizeof(**out));
	return 0;
}

static void job_free(struct job_impl *ji)
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
		return fail_with(err, errlen, DML_EINVAL, "no job ids left");
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

/* ---- stop conditions ------------------------------------------------- */

static uint64_t job_examples(const struct dml_job *job)
{
	return impl_c(job)->examples;
}

/* The training set's size: what the workers report, else the spec's. */
static uint64_t job_data_examples(const struct dml_job *job)
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
		return fail_with(err, errlen, DML_ENOTFOUND, "no job %" PRIu32, id);
	if (!job_active(job))
		return fail_with(err, errlen, DML_ESTATE, "job %" PRIu32 " is %s", id,
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
		return fail_with(err, errlen, DML_EINVAL, "unknown action %d", action);
	}
	job = dml_jobs_find(jobs, id);
	if (!job)
		return fail_with(err, errlen, DML_ENOTFOUND, "no job %" PRIu32, id);
	from = job->state;
	if ((to == DML__JOB_STATE__STOPPED && dml_job_finished(job)) ||
	    (to == DML__JOB_STATE__PAUSED && from != DML__JOB_STATE__RUNNING) ||
	    (to == DML__JOB_STATE__RUNNING && from != DML__JOB_STATE__PAUSED))
		return fail_with(err, errlen, DML_ESTATE, "job %" PRIu32 " is %s", id,
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

Dml__JobStatus *dml_job_status(const struct dml_job *job, uint64_t now)
{
	Dml__JobStatus st = DML__JOB_STATUS__INIT, *out;
	Dml__WorkerStatus *ws, **wp;
	Dml__Checkpoint *ck, **ckp;
	char *events[DML_JOB_EVENTS];
	size_t nev;

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

static void checkpoint_add(struct dml_job *job, uint64_t clock, uint64_t bytes,
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
		return fail_with(err, errlen, DML_EINVAL, "no status or spec");
	if (st->id != jobs->n + 1)
		return fail_with(err, errlen, DML_EINVAL, "job %" PRIu32 " where job %zu "
				 "was due", st->id, jobs->n + 1);
	if (st->state < DML__JOB_STATE__PENDING || st->state > DML__JOB_STATE__STOPPED)
		return fail_with(err, errlen, DML_EINVAL, "state %d", (int)st->state);
	if ((rc = dml_job_spec_check(st->spec, err, errlen)) != 0)
		return rc;
	n = st->n_workers;
	if (r->n_rate != n || r->n_rate_measured != n || r->n_finished != n ||
	    r->n_has_loss != n || r->n_examples_raw != n || n >= DML_ASSIGN_NONE - 1 ||
	    !list_fits(r->n_speed, n) || !list_fits(r->n_speed_measured, n) ||
	    !list_fits(r->n_batch, n))
		return fail_with(err, errlen, DML_EINVAL, "%zu workers but per-worker lists "
				 "of other lengths", n);
	if (r->num_partitions > UINT32_MAX ||
	    (r->n_owner != 0 && r->n_owner != r->num_partitions) ||
	    (r->n_owner == 0 && st->state != DML__JOB_STATE__PENDING))
		return fail_with(err, errlen, DML_EINVAL, "%zu partition owners for %" PRIu64
				 " partitions", r->n_owner, r->num_partitions);
	for (size_t i = 0; i < n; i++) {
		if (!st->workers[i]->worker)
			return fail_with(err, errlen, DML_EINVAL, "worker id 0");
		for (size_t j = 0; j < i; j++)
			if (st->workers[j]->worker == st->workers[i]->worker)
				return fail_with(err, errlen, DML_EINVAL, "worker %" PRIu32
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
		return fail_with(err, errlen, DML_EINVAL, "a partition owned by a worker that "
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
