/*
 * dml-worker (worker.h): the loop side (scheduler link, ASSIGN handler,
 * progress timer, metrics) and the trainer thread that runs jobs.
 *
 * The two sides meet in struct shared, under one mutex: the loop stores the
 * latest ASSIGN there and wakes the trainer; the trainer looks at it at
 * every clock boundary and leaves PROGRESS reports and its figures there,
 * which the loop's 100 ms timer sends and the metrics read. A "generation"
 * counts ASSIGNs that begin another job, so the trainer can tell the job it
 * already finished (it stays idle on it) from a new one.
 *
 * Must never: call libevent or the link from the trainer thread, hold the
 * mutex across a libdml call or an app step, run a job that was not
 * assigned RUNNING, or let a job's failure take the daemon down (it is
 * reported to the scheduler and the worker goes back to idle).
 */
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "app.h"
#include "assign.h"
#include "auth.h"
#include "conn.h"
#include "cpu_limit.h"
#include "dml.h"
#include "dml_error.h"
#include "frame.h"
#include "job_spec.h"
#include "sched_link.h"
#include "listen.h"
#include "log.h"
#include "metrics.h"
#include "profile.h"
#include "util.h"
#include "walk.h"
#include "worker.h"

#define TICK_MS 100
/* PROGRESS at most this often, and at every REPORT_EVERY_CLOCKS-th clock. */
#define REPORT_EVERY_MS 200
#define REPORT_EVERY_CLOCKS 10
/* Reports waiting for the timer (or for the scheduler to come back). */
#define REPORT_QUEUE 16
/* examples_per_s is measured over the last second, from this many clocks. */
#define RATE_SAMPLES 64
#define RATE_WINDOW_NS UINT64_C(1000000000)
/* While paused, the trainer lets libdml answer its servers this often. */
#define PAUSE_POLL_MS 500
#define REASON_MAX 320
/* How long the last frames to the scheduler get to leave when stopping. */
#define LEAVE_FLUSH_MS 100
/* How long a stop waits for the clock boundary before it interrupts the
 * trainer's waits: a pull may wait on workers that never come. */
#define STOP_GRACE_MS 3000

/* ---- state shared by the loop and the trainer ---------------------------- */

/* One assignment, as the worker keeps it. */
struct assign {
	uint32_t job;
	uint64_t version;
	int state;                /* Dml__JobState */
	uint32_t *parts;
	uint64_t *pos;            /* parallel to parts: records of each taken in this
				   * job before (NULL: not carried) */
	size_t nparts;
	uint32_t num_partitions;
	uint64_t start_clock;
	uint32_t batch;           /* examples per clock; 0: the spec's batch_size */
};

/* One PROGRESS to send; p.error points nowhere until it is sent. */
/*
 * Partitions of one job and a position of each: those the trainer walked at
 * its latest report, or those it let go of since the last report sent, with
 * where it stopped (the scheduler hands them on from there).
 */
struct part_list {
	uint32_t job;
	uint32_t *parts;
	uint64_t *pos;
	size_t n, cap;
};

struct report {
	Dml__Progress p;
	char error[REASON_MAX];
	int final;                /* finished or failed: never replaced */
};

/* What the metrics show: the trainer's figures. */
struct status {
	uint32_t job;
	uint64_t assignment;
	uint64_t clock;
	uint64_t examples_total;  /* since the process started */
	double examples_per_s;
	double loss;
	double compute_s, wait_s; /* since the process started */
};

struct shared {
	pthread_mutex_t mu;
	pthread_cond_t cv;        /* the trainer waits on it */
	Dml__JobSpec *spec;       /* of the latest ASSIGN */
	struct assign as;
	uint64_t generation;      /* ASSIGNs that began another job; 0: none yet */
	uint64_t seq;             /* ASSIGNs stored */
	int stopping;
	uint64_t stopping_ns;     /* when stopping was asked for */
	int trainer_done;
	dml_t *active;            /* the trainer's libdml handle, for dml_interrupt */
	uint32_t running;         /* job the trainer runs now, 0 when idle */
	struct report queue[REPORT_QUEUE];
	size_t nqueue;
	struct part_list held, released; /* go with the reports of their job */
	struct status st;
};

enum metric_field {
	MF_CLOCK, MF_EXAMPLES, MF_RATE, MF_LOSS, MF_COMPUTE, MF_WAIT, MF_JOB, MF_ASSIGNMENT,
	MF_COUNT
};

struct metric_arg {
	struct dml_worker *w;
	enum metric_field field;
};

struct dml_worker {
	const struct dml_worker_conf *conf;
	struct event_base *base;
	struct dml_app_env env;
	uint8_t *secret;
	size_t secret_len;
	struct dml_conn_conf conn_conf;
	struct dml_sched_link *link;
	struct event *tick;
	struct dml_metrics *metrics;
	struct metric_arg margs[MF_COUNT];
	pthread_t trainer;
	int trainer_started;
	int left;                 /* loop side: the link was stopped */
	struct shared sh;
};

static void assign_clear(struct assign *a)
{
	free(a->parts);
	free(a->pos);
	memset(a, 0, sizeof(*a));
}

/* dst (cleared first) gets a copy of src, partitions included. */
static void assign_copy(struct assign *dst, const struct assign *src)
{
	size_t n = src->nparts ? src->nparts : 1;
	uint32_t *parts = dml_xmalloc(n * sizeof(*parts));
	uint64_t *pos = src->pos ? dml_xmalloc(n * sizeof(*pos)) : NULL;

	if (src->nparts)
		memcpy(parts, src->parts, src->nparts * sizeof(*parts));
	if (src->nparts && pos)
		memcpy(pos, src->pos, src->nparts * sizeof(*pos));
	assign_clear(dst);
	*dst = *src;
	dst->parts = parts;
	dst->pos = pos;
}

/* dst (cleared first) gets what an ASSIGN says. */
static void assign_from_msg(struct assign *dst, const Dml__Assignment *a)
{
	struct assign view = {
		.job = a->job, .version = a->version, .state = a->state,
		.parts = a->partitions, .nparts = a->n_partitions,
		.pos = a->n_positions == a->n_partitions ? a->positions : NULL,
		.num_partitions = a->num_partitions, .start_clock = a->start_clock,
		.batch = a->batch_size,
	};

	assign_copy(dst, &view);
}

/*
 * Does a hold partition p? The worker holding partition 0 is the job's
 * evaluator: one evaluation per eval_every clocks for the whole job, not
 * one per worker (an evaluation can cost as much as many steps).
 */
static int assign_has_part(const struct assign *a, uint32_t p)
{
	for (size_t i = 0; i < a->nparts; i++)
		if (a->parts[i] == p)
			return 1;
	return 0;
}

static int assign_same_parts(const struct assign *a, const struct assign *b)
{
	return a->num_partitions == b->num_partitions && a->nparts == b->nparts &&
	       (a->nparts == 0 ||
		memcmp(a->parts, b->parts, a->nparts * sizeof(*a->parts)) == 0);
}

static int state_is_end(int state)
{
	return state == DML__JOB_STATE__DONE || state == DML__JOB_STATE__FAILED ||
	       state == DML__JOB_STATE__STOPPED;
}

static void part_list_clear(struct part_list *l)
{
	free(l->parts);
	free(l->pos);
	memset(l, 0, sizeof(*l));
}

/* Room for n more entries of job's (a list of another job starts over). */
static void part_list_room(struct part_list *l, uint32_t job, size_t n)
{
	if (l->job != job) {
		l->job = job;
		l->n = 0;
	}
	if (l->n + n <= l->cap)
		return;
	l->cap = l->n + n + 8;
	l->parts = dml_xrealloc(l->parts, l->cap * sizeof(*l->parts));
	l->pos = dml_xrealloc(l->pos, l->cap * sizeof(*l->pos));
}

/* Queue a report, replacing the newest one when it is of the same job and
 * not final: only the latest figures matter, an end must get through. */
static void queue_report_locked(struct shared *sh, const struct report *r)
{
	struct report *last = sh->nqueue ? &sh->queue[sh->nqueue - 1] : NULL;

	if (last && !last->final && last->p.job == r->p.job) {
		*last = *r;
		return;
	}
	if (sh->nqueue == REPORT_QUEUE) {
		memmove(&sh->queue[0], &sh->queue[1],
			(REPORT_QUEUE - 1) * sizeof(sh->queue[0]));
		sh->nqueue--;
	}
	sh->queue[sh->nqueue++] = *r;
}

/* ---- the trainer ---------------------------------------------------------- */

/* examples/s over the last second, from (time, examples) at each clock. */
struct rate {
	uint64_t t[RATE_SAMPLES];
	uint64_t ex[RATE_SAMPLES];
	size_t n;                 /* samples ever added */
};

static void rate_add(struct rate *r, uint64_t now, uint64_t examples)
{
	r->t[r->n % RATE_SAMPLES] = now;
	r->ex[r->n % RATE_SAMPLES] = examples;
	r->n++;
}

static double rate_get(const struct rate *r)
{
	size_t newest, oldest, kept;

	if (r->n < 2)
		return 0;
	newest = (r->n - 1) % RATE_SAMPLES;
	kept = r->n < RATE_SAMPLES ? r->n : RATE_SAMPLES;
	/* The oldest sample within the window, but at least the one before. */
	oldest = (r->n - 2) % RATE_SAMPLES;
	for (size_t k = 2; k < kept; k++) {
		size_t i = (r->n - 1 - k) % RATE_SAMPLES;

		if (r->t[newest] - r->t[i] > RATE_WINDOW_NS)
			break;
		oldest = i;
	}
	if (r->t[newest] <= r->t[oldest])
		return 0;
	return (double)(r->ex[newest] - r->ex[oldest]) * 1e9 /
	       (double)(r->t[newest] - r->t[oldest]);
}

/* How a job run ended. */
enum run_end {
	RUN_ON,                   /* not ended */
	RUN_FINISHED,             /* reached max_clocks */
	RUN_FAILED,
	RUN_ENDED,                /* the scheduler said DONE, STOPPED or FAILED */
	RUN_REPLACED,             /* another job was assigned */
	RUN_STOPPING              /* the daemon stops */
};

/* One job, as the trainer runs it; only the trainer thread touches it. */
struct run {
	struct dml_worker *w;
	Dml__JobSpec *spec;
	struct assign as;
	uint64_t generation, seq;
	const struct dml_app *app;
	void *state;
	dml_opts_t *opts;
	dml_t *d;
	struct dml_app_io io;
	uint32_t eval_every;
	uint64_t clock;
	uint64_t examples;        /* in this job */
	double loss;              /* latest step's, NaN before */
	double metric;
	int has_metric;
	uint64_t compute_ns, wait_ns;
	uint64_t held_ns;         /* of wait_ns: pulls held for other workers' clocks */
	uint64_t cpu_ns;          /* CPU time of its steps, every thread */
	uint64_t bytes;           /* its steps moved to and from the servers */
	double cores;             /* the CPU it may use (cpu_limit.h), when last read */
	uint64_t started_ns, last_report_ns;
	struct rate rate;
	int paused;
	uint64_t paused_ns;
	char err[REASON_MAX - 32];
};

/* libdml behind the app's io (app.h). */
static int io_pull_range(void *arg, uint32_t table, uint64_t begin, uint64_t end, float *out,
			 dml_handle_t *h)
{
	return dml_pull_range(arg, table, begin, end, out, h);
}

static int io_push_range(void *arg, uint32_t table, uint64_t begin, uint64_t end,
			 const float *vals, dml_handle_t *h)
{
	return dml_push_range(arg, table, begin, end, vals, h);
}

static int io_pull(void *arg, uint32_t table, const uint64_t *keys, size_t n, float *out,
		   dml_handle_t *h)
{
	return dml_pull(arg, table, keys, n, out, h);
}

static int io_push(void *arg, uint32_t table, const uint64_t *keys, size_t n,
		   const float *vals, dml_handle_t *h)
{
	return dml_push(arg, table, keys, n, vals, h);
}

static int io_wait(void *arg, dml_handle_t h)
{
	return dml_wait(arg, h);
}

static const struct dml_app_io_ops libdml_io = {
	.pull_range = io_pull_range,
	.push_range = io_push_range,
	.pull = io_pull,
	.push = io_push,
	.wait = io_wait,
};

static double seconds(uint64_t ns)
{
	return (double)ns / 1e9;
}

static void run_fail(struct run *r, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

/* Set r->err, adding what a server said last when libdml is open. */
static void run_fail(struct run *r, const char *fmt, ...)
{
	const char *detail = r->d ? dml_error_detail(r->d) : "";
	va_list ap;
	size_t n;

	va_start(ap, fmt);
	vsnprintf(r->err, sizeof(r->err), fmt, ap);
	va_end(ap);
	n = strlen(r->err);
	if (detail && detail[0] && n < sizeof(r->err))
		snprintf(r->err + n, sizeof(r->err) - n, " (%s)", detail);
}

/* Why a report is made: every clock, or an event that must be sent. */
enum report_kind {
	REPORT_CLOCK,             /* sent when due (time, or every 10th clock) */
	REPORT_NOW,               /* paused or ended by the scheduler */
	REPORT_FINISHED,          /* reached max_clocks */
	REPORT_FAILED             /* r->err says why */
};

/*
 * Publish the figures to the metrics and, when due, queue them as PROGRESS.
 * step_*: what the clock just done added to the process totals.
 */
/* The trainer's partitions and their positions now, for the reports. */
static void held_store_locked(struct shared *sh, const struct run *r)
{
	const struct dml_walk *w = r->app->walk(r->state);
	size_t n = dml_walk_held(w);

	sh->held.n = 0;
	part_list_room(&sh->held, r->as.job, n);
	dml_walk_positions(w, sh->held.parts, sh->held.pos);
	sh->held.n = n;
}

static void run_report(struct run *r, enum report_kind kind, uint64_t step_examples,
		       double step_compute, double step_wait)
{
	struct shared *sh = &r->w->sh;
	uint64_t now = dml_now_ns();
	int finished = kind == REPORT_FINISHED, failed = kind == REPORT_FAILED;
	int due = kind != REPORT_CLOCK || r->clock % REPORT_EVERY_CLOCKS == 0 ||
		  now - r->last_report_ns >= (uint64_t)REPORT_EVERY_MS * 1000000u;
	struct report rep;

	memset(&rep, 0, sizeof(rep));
	dml__progress__init(&rep.p);
	rep.p.job = r->as.job;
	rep.p.clock = r->clock;
	rep.p.examples = r->examples;
	rep.p.examples_per_s = rate_get(&r->rate);
	rep.p.loss = r->loss;
	rep.p.metric = r->metric;
	rep.p.has_metric = r->has_metric;
	rep.p.compute_s = seconds(r->compute_ns);
	rep.p.wait_s = seconds(r->wait_ns);
	rep.p.held_s = seconds(r->held_ns);
	rep.p.cpu_s = seconds(r->cpu_ns);
	rep.p.bytes = r->bytes;
	/* a quota may change while it runs: read it again for each report */
	if (due || !r->cores)
		r->cores = dml_cpu_limit_cores();
	rep.p.cores = r->cores;
	rep.p.assignment = r->as.version;
	rep.p.finished = finished != 0;
	rep.p.data_examples = r->state ? r->app->data_examples(r->state) : 0;
	rep.final = finished || failed;
	/* The scheduler names the worker when it reports the failure. */
	if (failed)
		snprintf(rep.error, sizeof(rep.error), "%s", r->err);
	pthread_mutex_lock(&sh->mu);
	if (due && r->state)
		held_store_locked(sh, r);
	sh->st.job = r->as.job;
	sh->st.assignment = r->as.version;
	sh->st.clock = r->clock;
	sh->st.examples_total += step_examples;
	sh->st.examples_per_s = rep.p.examples_per_s;
	sh->st.loss = r->loss;
	sh->st.compute_s += step_compute;
	sh->st.wait_s += step_wait;
	if (due)
		queue_report_locked(sh, &rep);
	pthread_mutex_unlock(&sh->mu);
	if (due)
		r->last_report_ns = now;
}

/* Copy the shared assignment for a new run; under the lock. */
static void run_take_locked(struct run *r, struct dml_worker *w)
{
	memset(r, 0, sizeof(*r));
	r->w = w;
	r->spec = dml_job_spec_copy(w->sh.spec);
	assign_copy(&r->as, &w->sh.as);
	r->generation = w->sh.generation;
	r->seq = w->sh.seq;
	r->loss = NAN;
	w->sh.running = r->as.job;
}

static int run_set_option(struct run *r, const char *key, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static int run_set_option(struct run *r, const char *key, const char *fmt, ...)
{
	char value[512];
	va_list ap;
	int rc;

	va_start(ap, fmt);
	vsnprintf(value, sizeof(value), fmt, ap);
	va_end(ap);
	rc = dml_opts_set(r->opts, key, value);
	if (rc)
		run_fail(r, "libdml option %s = %s: %s", key, value, dml_strerror(rc));
	return rc;
}

/* The servers must hold every table the app uses, as it uses them. */
static int run_check_tables(struct run *r)
{
	const struct dml_app_table *t;
	size_t n = r->app->tables(r->state, &t);

	for (size_t i = 0; i < n; i++) {
		uint32_t width = 0;
		uint64_t keys = 0;
		int rc = dml_table_width(r->d, t[i].id, &width);

		if (rc == 0 && t[i].dense)
			rc = dml_table_size(r->d, t[i].id, &keys);
		if (rc) {
			run_fail(r, "table %" PRIu32 ": %s", t[i].id, dml_strerror(rc));
			return rc;
		}
		if (width != t[i].width || (t[i].dense && keys != t[i].keys)) {
			run_fail(r, "table %" PRIu32 ": the servers hold width %" PRIu32
				 ", %" PRIu64 " keys; app %s needs width %" PRIu32 ", %"
				 PRIu64 " keys", t[i].id, width, keys, r->app->name,
				 t[i].width, t[i].keys);
			return DML_ECONF;
		}
	}
	return 0;
}

/* The examples per clock of assignment a. */
static uint32_t assign_batch(const struct run *r, const struct assign *a)
{
	return a->batch ? a->batch : r->spec->batch_size;
}

/* Apps push a batch's gradient summed over the spec's batch_size: a push
 * carries the batches of that size its examples make (dml_push_weight). */
static float assign_weight(const struct run *r, const struct assign *a)
{
	return (float)((double)assign_batch(r, a) / r->spec->batch_size);
}

static void run_push_weight(struct run *r, const struct assign *a)
{
	if (r->d)
		dml_push_weight(r->d, assign_weight(r, a));
}

/* The app takes assignment a's batch size; r->err says why not. */
static int run_set_batch(struct run *r, const struct assign *a)
{
	uint32_t batch = assign_batch(r, a);
	uint64_t most = dml_job_batch_max(r->spec);
	char why[sizeof(r->err)];
	int rc;

	if (batch > most) {
		run_fail(r, "the scheduler gave a batch of %" PRIu32 " examples, more than "
			 "the %" PRIu64 " this job allows", batch, most);
		return DML_EINVAL;
	}
	if ((rc = r->app->set_batch(r->state, batch, why, sizeof(why))) != 0)
		run_fail(r, "%s", why);
	else
		run_push_weight(r, a);
	return rc;
}

/* Make the app and connect libdml; r->err says why not. */
/*
 * Walk a's partitions, each from where a says it stands, or from further on
 * where this worker walked it itself since.
 */
static int run_walk_parts(struct run *r, const struct assign *a, char *why, size_t len)
{
	if (a->pos && a->nparts &&
	    dml_walk_note(r->app->walk(r->state), a->parts, a->pos, a->nparts) != 0)
		return dml_fail(DML_ENOMEM, why, len, "out of memory for the positions of %zu "
				"partitions", a->nparts);
	return r->app->set_partitions(r->state, a->parts, a->nparts, a->num_partitions, why,
				      len);
}

static int run_open(struct run *r)
{
	const struct dml_worker_conf *c = r->w->conf;
	char why[sizeof(r->err)];
	int rc;

	if ((rc = dml_job_spec_check(r->spec, why, sizeof(why))) != 0) {
		run_fail(r, "job spec: %s", why);
		return rc;
	}
	if (!(r->app = dml_app_find(r->spec->app))) {
		run_fail(r, "app '%s' is not an app of this worker", r->spec->app);
		return DML_EINVAL;
	}
	rc = r->app->create(r->spec, &r->w->env, &r->state, why, sizeof(why));
	if (rc == 0)
		rc = run_walk_parts(r, &r->as, why, sizeof(why));
	if (rc) {
		run_fail(r, "%s", why);
		return rc;
	}
	if (assign_batch(r, &r->as) != r->spec->batch_size &&
	    (rc = run_set_batch(r, &r->as)) != 0)
		return rc;
	if ((rc = dml_opts_new(&r->opts)) != 0) {
		run_fail(r, "libdml options: %s", dml_strerror(rc));
		return rc;
	}
	if ((rc = run_set_option(r, "scheduler", "%s", c->scheduler)) ||
	    (rc = run_set_option(r, "job", "%" PRIu32, r->as.job)) ||
	    (rc = run_set_option(r, "clock", "%" PRIu64, r->as.start_clock)) ||
	    (rc = run_set_option(r, "worker_id", "%" PRIu32, c->node_id)) ||
	    (rc = run_set_option(r, "secret_file", "%s", c->secret_file)) ||
	    (rc = run_set_option(r, "cluster", "%s", c->cluster)) ||
	    (rc = run_set_option(r, "spin_us", "%" PRIu32, c->spin_us)) ||
	    (rc = run_set_option(r, "max_meta", "%" PRIu64, c->max_meta)) ||
	    (rc = run_set_option(r, "max_payload", "%" PRIu64, c->max_payload)))
		return rc;
	if ((rc = dml_connect(r->opts, &r->d)) != 0) {
		r->d = NULL;
		run_fail(r, "cannot join job %" PRIu32 "'s servers: %s", r->as.job,
			 dml_strerror(rc));
		return rc;
	}
	if ((rc = run_check_tables(r)) != 0)
		return rc;
	run_push_weight(r, &r->as);
	pthread_mutex_lock(&r->w->sh.mu);
	r->w->sh.active = r->d;
	pthread_mutex_unlock(&r->w->sh.mu);
	r->io = (struct dml_app_io){ &libdml_io, r->d, 0 };
	r->eval_every = r->spec->eval_every ? r->spec->eval_every :
			r->app->default_eval_every;
	r->clock = dml_current_clock(r->d);
	r->started_ns = r->last_report_ns = dml_now_ns();
	rate_add(&r->rate, r->started_ns, 0);
	return 0;
}

static void run_close(struct run *r)
{
	char why[sizeof(r->err)];

	/* The last pushes are the app's to wait for; an error is too late to
	 * fail the job over, but worth a line. */
	if (r->d && r->state && r->app->drain(r->state, &r->io, why, sizeof(why)) != 0)
		dml_warn("job %" PRIu32 ": the last pushes: %s", r->as.job, why);
	pthread_mutex_lock(&r->w->sh.mu);
	r->w->sh.active = NULL;
	pthread_mutex_unlock(&r->w->sh.mu);
	if (r->d)
		dml_close(r->d);
	dml_opts_free(r->opts);
	if (r->app)
		r->app->destroy(r->state);
	dml_job_spec_free(r->spec);
	assign_clear(&r->as);
	memset(r, 0, sizeof(*r));
}

static uint64_t run_examples_held(const struct run *r)
{
	uint64_t n = r->app->data_examples(r->state), total = 0, b, e;

	for (size_t i = 0; i < r->as.nparts; i++) {
		if (r->as.parts[i] >= r->as.num_partitions)
			continue;
		dml_partition_range(n, r->as.num_partitions, r->as.parts[i], &b, &e);
		total += e - b;
	}
	return total;
}

/*
 * After a change of partitions: those next no longer has go to the
 * scheduler's list with where this worker stopped, for the next report;
 * those it has again leave that list (this worker walks them on).
 */
static void run_release(struct run *r, const struct assign *next)
{
	const struct dml_walk *w = r->app->walk(r->state);
	struct part_list *l = &r->w->sh.released;
	size_t kept = 0;

	pthread_mutex_lock(&r->w->sh.mu);
	part_list_room(l, r->as.job, r->as.nparts);
	for (size_t i = 0; i < l->n; i++) {
		if (assign_has_part(next, l->parts[i]))
			continue;
		l->parts[kept] = l->parts[i];
		l->pos[kept++] = l->pos[i];
	}
	l->n = kept;
	for (size_t i = 0; i < r->as.nparts; i++) {
		if (assign_has_part(next, r->as.parts[i]))
			continue;
		l->parts[l->n] = r->as.parts[i];
		l->pos[l->n++] = dml_walk_taken(w, r->as.parts[i]);
	}
	pthread_mutex_unlock(&r->w->sh.mu);
}

/*
 * The job went on without this worker (it hung, the scheduler lost it and
 * the servers dropped its clock): take up at the job's clock, where its
 * new assignment starts it, rather than walk every clock it missed while
 * the others wait for it. A live worker is never behind its assignment's
 * start, the slowest live clock.
 */
static int run_catch_up(struct run *r, uint64_t clock)
{
	uint64_t was = r->clock;
	int rc = dml_clock_to(r->d, clock);

	if (rc) {
		run_fail(r, "clock %" PRIu64 " -> %" PRIu64 ": %s", was, clock, dml_strerror(rc));
		return rc;
	}
	r->clock = dml_current_clock(r->d);
	dml_info("job %" PRIu32 ": the job went on without this worker: clock %" PRIu64
		 " -> %" PRIu64, r->as.job, was, r->clock);
	return 0;
}

/* A new assignment of the same job: take its partitions and batch size. */
static int run_follow(struct run *r, const struct assign *next)
{
	size_t before = r->as.nparts;
	uint32_t batch = assign_batch(r, &r->as);
	int new_parts = !assign_same_parts(&r->as, next);
	char why[sizeof(r->err)];
	int rc;

	if (next->start_clock > r->clock && (rc = run_catch_up(r, next->start_clock)) != 0)
		return rc;
	if (!new_parts && assign_batch(r, next) == batch)
		return 0;
	if (new_parts && (rc = run_walk_parts(r, next, why, sizeof(why))) != 0) {
		run_fail(r, "%s", why);
		return rc;
	}
	if (new_parts)
		run_release(r, next);
	if (assign_batch(r, next) != batch && (rc = run_set_batch(r, next)) != 0)
		return rc;
	assign_copy(&r->as, next);
	/* the scheduler waits for the ones let go of to hand them on */
	if (new_parts)
		run_report(r, REPORT_NOW, 0, 0, 0);
	dml_info("job %" PRIu32 ": partitions %zu -> %zu of %" PRIu32 ", batch %" PRIu32
		 " -> %" PRIu32 " (pushes of weight %.3g) at clock %" PRIu64 " (assignment v%"
		 PRIu64 ", %" PRIu64 " examples)", r->as.job, before, r->as.nparts,
		 r->as.num_partitions, batch, assign_batch(r, &r->as),
		 (double)assign_weight(r, &r->as), r->clock, r->as.version,
		 run_examples_held(r));
	return 0;
}

/* While paused: let libdml answer its servers now and then. */
static void run_pause_wait_locked(struct run *r)
{
	struct shared *sh = &r->w->sh;
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	ts.tv_sec += PAUSE_POLL_MS / 1000;
	ts.tv_nsec += (long)(PAUSE_POLL_MS % 1000) * 1000000L;
	if (ts.tv_nsec >= 1000000000L) {
		ts.tv_sec++;
		ts.tv_nsec -= 1000000000L;
	}
	if (pthread_cond_timedwait(&sh->cv, &sh->mu, &ts) != 0) {
		pthread_mutex_unlock(&sh->mu);
		dml_progress(r->d, 0);
		pthread_mutex_lock(&sh->mu);
	}
}

/*
 * At a clock boundary: follow the shared assignment. Waits while the job is
 * paused; applies new partitions; says whether (and why) to end.
 */
static enum run_end run_boundary(struct run *r)
{
	struct shared *sh = &r->w->sh;
	struct assign next = { 0 };
	enum run_end end = RUN_ON;
	int changed = 0;

	pthread_mutex_lock(&sh->mu);
	for (;;) {
		if (sh->stopping) {
			end = RUN_STOPPING;
			break;
		}
		if (sh->generation != r->generation) {
			end = RUN_REPLACED;
			break;
		}
		if (sh->seq != r->seq) {
			r->seq = sh->seq;
			assign_copy(&next, &sh->as);
			r->as.version = next.version;
			changed = 1;
		}
		if (changed && state_is_end(next.state)) {
			r->as.state = next.state;
			end = RUN_ENDED;
			break;
		}
		if (changed && next.state != DML__JOB_STATE__RUNNING) {
			if (!r->paused) {
				r->paused = 1;
				r->paused_ns = dml_now_ns();
				dml_info("job %" PRIu32 ": paused at clock %" PRIu64
					 " (%" PRIu64 " examples so far)", r->as.job,
					 r->clock, r->examples);
				/* Where it holds, for the scheduler's status. */
				pthread_mutex_unlock(&sh->mu);
				run_report(r, REPORT_NOW, 0, 0, 0);
				pthread_mutex_lock(&sh->mu);
				continue;
			}
			run_pause_wait_locked(r);
			continue;
		}
		break;
	}
	pthread_mutex_unlock(&sh->mu);
	if (end == RUN_ON && r->paused) {
		r->paused = 0;
		dml_info("job %" PRIu32 ": resumed at clock %" PRIu64 " after %.1f s",
			 r->as.job, r->clock, seconds(dml_now_ns() - r->paused_ns));
	}
	if (end == RUN_ON && changed) {
		if (run_follow(r, &next) != 0)
			end = RUN_FAILED;
		r->as.state = next.state;
	}
	assign_clear(&next);
	return end;
}

static int run_evaluate(struct run *r)
{
	char why[sizeof(r->err)];
	int rc = r->app->evaluate(r->state, &r->io, &r->metric, why, sizeof(why));

	if (rc) {
		run_fail(r, "evaluation at clock %" PRIu64 ": %s", r->clock, why);
		return rc;
	}
	r->has_metric = 1;
	return 0;
}

/* CPU time of this process so far, every thread. */
static uint64_t cpu_now_ns(void)
{
	struct timespec ts;

	if (clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts) != 0)
		return 0;
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Step, clock, maybe evaluate, report. */
static int run_clock(struct run *r, int last)
{
	uint64_t t0 = dml_now_ns(), w0 = r->io.wait_ns, h0 = dml_pulls_held_ns(r->d);
	uint64_t c0 = cpu_now_ns(), b0 = dml_bytes(r->d);
	uint64_t elapsed, waited, held;
	struct dml_app_step st;
	char why[sizeof(r->err)];
	int rc = r->app->step(r->state, &r->io, &st, why, sizeof(why));

	if (rc) {
		run_fail(r, "step at clock %" PRIu64 ": %s", r->clock, why);
		return rc;
	}
	if ((rc = dml_clock(r->d)) != 0) {
		run_fail(r, "clock %" PRIu64 ": %s", r->clock, dml_strerror(rc));
		return rc;
	}
	r->clock = dml_current_clock(r->d);
	r->examples += st.examples;
	if (!isnan(st.loss))
		r->loss = st.loss;
	/* An evaluation is not training: its time would make the evaluating
	 * worker look slower than it trains, and its batch smaller. */
	elapsed = dml_now_ns() - t0;
	waited = r->io.wait_ns - w0;
	held = dml_pulls_held_ns(r->d) - h0;
	r->held_ns += held < waited ? held : waited;
	r->cpu_ns += cpu_now_ns() - c0;
	r->bytes += dml_bytes(r->d) - b0;
	if ((last || (r->eval_every && r->clock % r->eval_every == 0 &&
		      assign_has_part(&r->as, 0))) &&
	    (rc = run_evaluate(r)) != 0)
		return rc;
	r->wait_ns += waited;
	r->compute_ns += elapsed > waited ? elapsed - waited : 0;
	rate_add(&r->rate, dml_now_ns(), r->examples);
	run_report(r, last ? REPORT_FINISHED : REPORT_CLOCK, st.examples,
		   seconds(elapsed > waited ? elapsed - waited : 0), seconds(waited));
	return 0;
}

static const char *run_end_name(enum run_end end, int state)
{
	switch (end) {
	case RUN_FINISHED: return "finished (max_clocks)";
	case RUN_FAILED: return "failed";
	case RUN_ENDED: return dml_job_state_name(state);
	case RUN_REPLACED: return "left for another job";
	case RUN_STOPPING: return "left (worker stopping)";
	default: return "ended";
	}
}

static void run_log_end(const struct run *r, enum run_end end)
{
	double secs = seconds(dml_now_ns() - r->started_ns);
	char metric[64] = "";

	if (r->has_metric)
		snprintf(metric, sizeof(metric), ", eval %s %.4g", r->app->metric, r->metric);
	dml_info("job %" PRIu32 ": %s at clock %" PRIu64 ": %" PRIu64 " examples in %.1f s "
		 "(%.0f/s), loss %.4g%s, compute %.1f s, wait %.1f s", r->as.job,
		 run_end_name(end, r->as.state), r->clock, r->examples, secs,
		 secs > 0 ? (double)r->examples / secs : 0.0, r->loss, metric,
		 seconds(r->compute_ns), seconds(r->wait_ns));
}

/* Is the worker stopping? A wait it interrupted is no failure of the job. */
static int run_stopping(struct run *r)
{
	int stopping;

	pthread_mutex_lock(&r->w->sh.mu);
	stopping = r->w->sh.stopping;
	pthread_mutex_unlock(&r->w->sh.mu);
	return stopping;
}

/* Run the job in r to its end; r stays to be closed. */
static enum run_end run_job(struct run *r)
{
	uint64_t max = r->spec->max_clocks;
	enum run_end end;

	if (run_open(r) != 0)
		return RUN_FAILED;
	dml_info("job %" PRIu32 " (%s, app %s): starting at clock %" PRIu64 " with %zu of %"
		 PRIu32 " partitions (%" PRIu64 " of %" PRIu64 " examples), batch %" PRIu32
		 ", staleness %" PRId64 ", assignment v%" PRIu64, r->as.job, r->spec->name,
		 r->app->name, r->clock, r->as.nparts, r->as.num_partitions,
		 run_examples_held(r), r->app->data_examples(r->state), r->spec->batch_size,
		 r->spec->staleness, r->as.version);
	for (;;) {
		if ((end = run_boundary(r)) != RUN_ON)
			break;
		if (max && r->clock >= max) {
			/* Joined at or past the end: nothing left to train. */
			end = RUN_FINISHED;
			run_report(r, REPORT_FINISHED, 0, 0, 0);
			break;
		}
		if (run_clock(r, max && r->clock + 1 >= max) != 0) {
			end = run_stopping(r) ? RUN_STOPPING : RUN_FAILED;
			break;
		}
		if (max && r->clock >= max) {
			end = RUN_FINISHED;
			break;
		}
	}
	if (end != RUN_FAILED)
		run_log_end(r, end);
	/* One last report with the final figures when the scheduler ended it. */
	if (end == RUN_ENDED)
		run_report(r, REPORT_NOW, 0, 0, 0);
	return end;
}

static void *trainer_main(void *arg)
{
	struct dml_worker *w = arg;
	struct shared *sh = &w->sh;
	uint64_t done_generation = 0;
	struct run r;

	pthread_mutex_lock(&sh->mu);
	for (;;) {
		while (!sh->stopping && !(sh->generation != done_generation &&
					  sh->as.state == DML__JOB_STATE__RUNNING))
			pthread_cond_wait(&sh->cv, &sh->mu);
		if (sh->stopping)
			break;
		run_take_locked(&r, w);
		pthread_mutex_unlock(&sh->mu);

		if (run_job(&r) == RUN_FAILED) {
			dml_err("job %" PRIu32 " failed: %s", r.as.job, r.err);
			run_report(&r, REPORT_FAILED, 0, 0, 0);
		}
		/* Whatever ended it, this generation is done: a RUNNING assignment
		 * of the same job does not start it again. */
		done_generation = r.generation;
		run_close(&r);
		pthread_mutex_lock(&sh->mu);
		sh->running = 0;
	}
	sh->trainer_done = 1;
	pthread_mutex_unlock(&sh->mu);
	return NULL;
}

/* ---- the loop side --------------------------------------------------------- */

/* The trainer is done and the daemon stops: leave the scheduler. */
static void leave(struct dml_worker *w)
{
	struct timeval flush = { 0, LEAVE_FLUSH_MS * 1000 };

	if (w->left)
		return;
	w->left = 1;
	if (w->tick)
		event_del(w->tick);
	dml_metrics_http_stop(w->metrics);
	dml_sched_link_stop(w->link);
	/* The link closes after flushing the BYE; the loop only has the
	 * daemon's signal events left, so end it once that had time to run
	 * (dml_sched_link_free() drops what is still queued then). */
	event_base_loopexit(w->base, &flush);
}

/*
 * Point report p at the partition lists of its job (sh NULL: at none, as
 * the queue keeps it), the released ones only with take_released (one
 * report takes them). Says whether it took the released ones.
 */
static int parts_attach(const struct shared *sh, Dml__Progress *p, int take_released)
{
	const struct part_list *held = sh ? &sh->held : NULL;
	const struct part_list *rel = sh && take_released ? &sh->released : NULL;

	if (held && held->job != p->job)
		held = NULL;
	if (rel && (rel->job != p->job || !rel->n))
		rel = NULL;
	p->n_partitions = p->n_positions = held ? held->n : 0;
	p->partitions = held ? held->parts : NULL;
	p->positions = held ? held->pos : NULL;
	p->n_released = p->n_released_positions = rel ? rel->n : 0;
	p->released = rel ? rel->parts : NULL;
	p->released_positions = rel ? rel->pos : NULL;
	return rel != NULL;
}

/* Send what the trainer queued; keep what the scheduler cannot take now. */
static void tick_cb(evutil_socket_t fd, short what, void *arg)
{
	struct dml_worker *w = arg;
	struct shared *sh = &w->sh;
	size_t sent = 0;
	int done, rc, released_sent = 0;

	pthread_mutex_lock(&sh->mu);
	while (sent < sh->nqueue) {
		struct report *rep = &sh->queue[sent];
		Dml__Meta m = DML__META__INIT;

		int released = parts_attach(sh, &rep->p, !released_sent);

		rep->p.error = rep->error;
		m.type = DML__MSG_TYPE__PROGRESS;
		m.job = rep->p.job;
		m.progress = &rep->p;
		rc = dml_sched_link_send(w->link, &m);
		parts_attach(NULL, &rep->p, 0);
		if (rc != 0)
			break;
		if (released) {
			sh->released.n = 0;
			released_sent = 1;
		}
		sent++;
	}
	memmove(&sh->queue[0], &sh->queue[sent], (sh->nqueue - sent) * sizeof(sh->queue[0]));
	sh->nqueue -= sent;
	if (sh->stopping && sh->active &&
	    dml_now_ns() - sh->stopping_ns > STOP_GRACE_MS * 1000000ull) {
		dml_info("stopping: job %" PRIu32 " did not reach a clock boundary in %d ms; "
			 "interrupting its waits", sh->running, STOP_GRACE_MS);
		dml_interrupt(sh->active);
		sh->active = NULL;   /* once */
	}
	done = sh->stopping && sh->trainer_done;
	pthread_mutex_unlock(&sh->mu);
	if (done)
		leave(w);
}

/* Store an ASSIGN for the trainer, then ACK it. */
static void on_assign(struct dml_worker *w, struct dml_sched_link *l, const Dml__Meta *m)
{
	const Dml__Assignment *a = m->assignment;
	struct shared *sh = &w->sh;
	Dml__Meta ack = DML__META__INIT;
	int rc;

	if (!a || !m->job_spec) {
		dml_warn("scheduler: ASSIGN without %s ignored",
			 a ? "job spec" : "assignment");
		return;
	}
	pthread_mutex_lock(&sh->mu);
	/* Another job, or the same id from a scheduler that started over. */
	if (sh->generation == 0 || a->job != sh->as.job || a->version < sh->as.version)
		sh->generation++;
	dml_job_spec_free(sh->spec);
	sh->spec = dml_job_spec_copy(m->job_spec);
	assign_from_msg(&sh->as, a);
	sh->seq++;
	pthread_cond_broadcast(&sh->cv);
	pthread_mutex_unlock(&sh->mu);
	dml_debug("scheduler: job %" PRIu32 " assignment v%" PRIu64 ": %s, %zu of %" PRIu32
		  " partitions, start clock %" PRIu64, a->job, a->version,
		  dml_job_state_name(a->state), a->n_partitions, a->num_partitions,
		  a->start_clock);
	ack.type = DML__MSG_TYPE__ACK;
	ack.request_id = m->request_id;
	ack.job = a->job;
	if ((rc = dml_sched_link_send(l, &ack)) != 0)
		dml_debug("scheduler: ACK of ASSIGN not sent: %s", dml_strerror(rc));
}

static void on_sched_frame(struct dml_sched_link *l, const Dml__Meta *m, void *arg)
{
	struct dml_worker *w = arg;

	switch (m->type) {
	case DML__MSG_TYPE__ASSIGN:
		on_assign(w, l, m);
		break;
	case DML__MSG_TYPE__ERROR:
		dml_warn("scheduler: error %d: %s", m->error ? m->error->code : 0,
			 m->error && m->error->message ? m->error->message : "");
		break;
	default:
		dml_debug("scheduler: %s ignored", dml_msg_type_name(m->type));
		break;
	}
}

/* ---- metrics ------------------------------------------------------------- */

static const struct dml_metric_desc metric_descs[MF_COUNT] = {
	[MF_CLOCK] = { "dml_worker_clock", "Clock of the job being trained",
		       DML_METRIC_GAUGE, NULL, NULL, 0 },
	[MF_EXAMPLES] = { "dml_worker_examples_total", "Examples trained on",
			  DML_METRIC_COUNTER, NULL, NULL, 0 },
	[MF_RATE] = { "dml_worker_examples_per_second",
		      "Examples trained per second over the last second",
		      DML_METRIC_GAUGE, NULL, NULL, 0 },
	[MF_LOSS] = { "dml_worker_loss", "Training loss of the latest batch",
		      DML_METRIC_GAUGE, NULL, NULL, 0 },
	[MF_COMPUTE] = { "dml_worker_compute_seconds_total",
			 "Seconds spent computing (steps without the waits for servers)",
			 DML_METRIC_COUNTER, NULL, NULL, 0 },
	[MF_WAIT] = { "dml_worker_wait_seconds_total",
		      "Seconds spent waiting for the servers' replies", DML_METRIC_COUNTER,
		      NULL, NULL, 0 },
	[MF_JOB] = { "dml_worker_job", "Id of the job trained last (0: none yet)",
		     DML_METRIC_GAUGE, NULL, NULL, 0 },
	[MF_ASSIGNMENT] = { "dml_worker_assignment_version",
			    "Version of the assignment being worked on", DML_METRIC_GAUGE,
			    NULL, NULL, 0 },
};

/* At scrape time, on the loop: the trainer's figures, under the lock. */
static double metric_read(void *arg)
{
	const struct metric_arg *ma = arg;
	struct shared *sh = &ma->w->sh;
	double v = 0;

	pthread_mutex_lock(&sh->mu);
	switch (ma->field) {
	case MF_CLOCK: v = (double)sh->st.clock; break;
	case MF_EXAMPLES: v = (double)sh->st.examples_total; break;
	case MF_RATE: v = sh->st.examples_per_s; break;
	case MF_LOSS: v = sh->st.loss; break;
	case MF_COMPUTE: v = sh->st.compute_s; break;
	case MF_WAIT: v = sh->st.wait_s; break;
	case MF_JOB: v = (double)sh->st.job; break;
	case MF_ASSIGNMENT: v = (double)sh->st.assignment; break;
	default: break;
	}
	pthread_mutex_unlock(&sh->mu);
	return v;
}

static int metrics_start(struct dml_worker *w)
{
	const struct dml_worker_conf *c = w->conf;
	if (!c->metrics_listen[0])
		return 0;
	w->metrics = dml_metrics_new();
	for (int i = 0; i < MF_COUNT; i++) {
		w->margs[i] = (struct metric_arg){ w, (enum metric_field)i };
		if (dml_metrics_add_fn(w->metrics, &metric_descs[i], NULL, metric_read,
				       &w->margs[i]) != 0) {
			dml_err("metrics: %s was refused", metric_descs[i].name);
			return DML_EINVAL;
		}
	}
	return dml_metrics_serve(w->metrics, w->base, c->metrics_listen,
				 c->metrics_port_file);
}

/* ---- life cycle ------------------------------------------------------------ */

static int link_start(struct dml_worker *w, const struct dml_profile *prof)
{
	const struct dml_worker_conf *c = w->conf;
	Dml__NodeInfo self = DML__NODE_INFO__INIT;
	Dml__Profile profile = DML__PROFILE__INIT;
	char host[256];
	uint16_t port;
	int rc;

	if (dml_parse_hostport(c->scheduler, host, sizeof(host), &port, 0) != 0)
		return DML_ECONF;
	profile.device = (char *)prof->device;
	profile.cores = prof->cores;
	profile.memory_bytes = prof->memory_bytes;
	profile.gflops = prof->gflops;
	profile.examples_per_s = prof->examples_per_s;
	self.role = DML__ROLE__WORKER;
	self.node_id = c->node_id;
	self.zone = c->zone;
	self.address = (char *)"";
	self.profile = &profile;
	/* Tells the scheduler a restarted process from a reconnecting one. */
	if (dml_random_bytes(&self.incarnation, sizeof(self.incarnation)) != 0)
		return DML_EIO;
	if (self.incarnation == 0)
		self.incarnation = 1;
	rc = dml_sched_link_new(w->base, &w->conn_conf, host, port, &self, &w->link);
	if (rc) {
		dml_err("scheduler %s: %s", c->scheduler, dml_strerror(rc));
		return rc == DML_EINVAL ? DML_ECONF : rc;
	}
	dml_sched_link_set_handler(w->link, on_sched_frame, w);
	dml_info("registering with scheduler %s as worker %" PRIu32 " (zone '%s')",
		 c->scheduler, c->node_id, c->zone);
	return 0;
}

/* The configured compute backend, open for the worker's life. */
static int backend_open(struct dml_worker *w)
{
	struct dml_backend_conf bc = { .threads = w->conf->threads,
				       .device = (int)w->conf->device };
	char err[256] = "";
	int rc;

	w->env.be = dml_backend_find(w->env.backend);
	if (!w->env.be) {
		dml_err("backend %s: not in this build", w->env.backend);
		return DML_ECONF;
	}
	if ((rc = w->env.be->open(&bc, &w->env.be_ctx, err, sizeof(err))) != 0) {
		dml_err("backend %s: %s", w->env.backend, err);
		return rc;
	}
	return 0;
}

int dml_worker_new(const struct dml_worker_conf *conf, struct event_base *base,
		   struct dml_worker **out)
{
	struct dml_worker *w = dml_xcalloc(1, sizeof(*w));
	struct timeval tick = { 0, TICK_MS * 1000 };
	struct dml_profile prof;
	pthread_condattr_t cattr;
	int rc;

	w->conf = conf;
	w->base = base;
	w->env.backend = dml_backend_names[conf->backend];
	pthread_mutex_init(&w->sh.mu, NULL);
	/* Timed waits while paused must not follow changes of the wall clock. */
	pthread_condattr_init(&cattr);
	pthread_condattr_setclock(&cattr, CLOCK_MONOTONIC);
	pthread_cond_init(&w->sh.cv, &cattr);
	pthread_condattr_destroy(&cattr);
	w->sh.st.loss = NAN;
	*out = w;
	if ((rc = dml_secret_load(conf->secret_file, &w->secret, &w->secret_len)) != 0)
		return rc;
	dml_conn_conf_default(&w->conn_conf);
	w->conn_conf.limits.max_meta = (uint32_t)conf->max_meta;
	w->conn_conf.limits.max_payload = (uint32_t)conf->max_payload;
	w->conn_conf.secret = w->secret;
	w->conn_conf.secret_len = w->secret_len;
	w->conn_conf.cluster = conf->cluster;
	w->conn_conf.role = DML__ROLE__WORKER;
	w->conn_conf.node_id = conf->node_id;
	w->conn_conf.handshake_timeout_ms = conf->handshake_timeout_ms;

	if ((rc = backend_open(w)) != 0)
		return rc;
	dml_profile_measure(dml_apps[0], &w->env, conf->profile, &prof);
	dml_info("profile: %s, %" PRIu32 " cores, %" PRIu64 " MiB, %.1f GFLOP/s, %.0f "
		 "examples/s (app %s, %" PRIu32 " OpenBLAS threads)%s", prof.device,
		 prof.cores, prof.memory_bytes >> 20, prof.gflops, prof.examples_per_s,
		 dml_apps[0]->name, conf->threads,
		 conf->profile ? "" : " (not measured: profile = no)");

	if ((rc = metrics_start(w)) != 0)
		return rc;
	w->tick = event_new(base, -1, EV_PERSIST, tick_cb, w);
	event_add(w->tick, &tick);
	if (pthread_create(&w->trainer, NULL, trainer_main, w) != 0) {
		dml_err("cannot start the trainer thread");
		return DML_EIO;
	}
	w->trainer_started = 1;
	return link_start(w, &prof);
}

void dml_worker_shutdown(struct dml_worker *w)
{
	struct shared *sh = &w->sh;
	uint32_t job;

	pthread_mutex_lock(&sh->mu);
	if (sh->stopping) {
		pthread_mutex_unlock(&sh->mu);
		return;
	}
	sh->stopping = 1;
	sh->stopping_ns = dml_now_ns();
	job = sh->running;
	pthread_cond_broadcast(&sh->cv);
	pthread_mutex_unlock(&sh->mu);
	if (!w->trainer_started) {
		leave(w);
		return;
	}
	/* The timer leaves once the trainer thread has ended. */
	if (job)
		dml_info("stopping: job %" PRIu32 " ends at the next clock boundary", job);
}

void dml_worker_free(struct dml_worker *w)
{
	if (!w)
		return;
	if (w->trainer_started) {
		pthread_mutex_lock(&w->sh.mu);
		w->sh.stopping = 1;
		pthread_cond_broadcast(&w->sh.cv);
		pthread_mutex_unlock(&w->sh.mu);
		pthread_join(w->trainer, NULL);
	}
	dml_sched_link_free(w->link);
	if (w->tick)
		event_free(w->tick);
	dml_metrics_free(w->metrics);
	dml_secret_free(w->secret, w->secret_len);
	dml_job_spec_free(w->sh.spec);
	assign_clear(&w->sh.as);
	part_list_clear(&w->sh.held);
	part_list_clear(&w->sh.released);
	if (w->env.be)
		w->env.be->close(w->env.be_ctx);
	pthread_cond_destroy(&w->sh.cv);
	pthread_mutex_destroy(&w->sh.mu);
	free(w);
}
