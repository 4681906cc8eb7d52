/*
 * dml-worker's job runs (worker_internal.h): what the trainer thread holds
 * for one job and how it opens it (libdml handle and options, the app and
 * its state, the data partitions), reports its progress, and follows the
 * assignment when it changes (partitions released or taken on, a clock to
 * catch up with).
 *
 * Must never: hold the mutex across a libdml call or an app step.
 */
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "worker/app.h"
#include "shard/assign.h"
#include "proto/auth.h"
#include "proto/conn.h"
#include "worker/cpu_limit.h"
#include "worker/dml.h"
#include "proto/dml_error.h"
#include "proto/frame.h"
#include "proto/job_spec.h"
#include "proto/sched_link.h"
#include "proto/listen.h"
#include "proto/log.h"
#include "proto/metrics.h"
#include "worker/profile.h"
#include "proto/util.h"
#include "worker/walk.h"
#include "worker/worker.h"
#include "worker/worker_internal.h"

void rate_add(struct rate *r, uint64_t now, uint64_t examples)
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

double seconds(uint64_t ns)
{
	return (double)ns / 1e9;
}

/* Set r->err, adding what a server said last when libdml is open. */
void run_fail(struct run *r, const char *fmt, ...)
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

/* What its values cost per link class, and its residuals: the handle's. */
static void links_report(const struct run *r, struct report *rep)
{
	Dml__LinkTraffic *lt = &rep->links;

	if (!r->d)
		return;
	(void)dml_link_bytes(r->d, DML_LINK_WITHIN_ZONE, &lt->within_zone_float_bytes,
			     &lt->within_zone_sent_bytes);
	(void)dml_link_bytes(r->d, DML_LINK_CROSS_ZONE, &lt->cross_zone_float_bytes,
			     &lt->cross_zone_sent_bytes);
	for (size_t t = 0; t < r->spec->n_tables && t < DML_JOB_TABLES_MAX; t++) {
		rep->res_tables[t] = r->spec->tables[t]->id;
		(void)dml_residual_norm(r->d, rep->res_tables[t], &rep->res_norms[t]);
		lt->n_residual_tables = lt->n_residual_norms = t + 1;
	}
}

void run_report(struct run *r, enum report_kind kind, uint64_t step_examples,
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
	dml__link_traffic__init(&rep.links);
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
	/* a residual norm reads the table's rows: only for a report sent */
	if (due)
		links_report(r, &rep);
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
void run_take_locked(struct run *r, struct dml_worker *w)
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

/* The zone aggregator the scheduler routes this worker through, "" for
 * straight to the servers. */
static const char *run_aggregator(const struct run *r)
{
	return r->as.aggregator;
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

int run_open(struct run *r)
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
	    (rc = run_set_option(r, "max_payload", "%" PRIu64, c->max_payload)) ||
	    (rc = run_set_option(r, "local_socket", "%s", c->local_socket ? "yes" : "no")) ||
	    (rc = run_set_option(r, "zone", "%s", c->zone)))
		return rc;
	if (*run_aggregator(r) &&
	    (rc = run_set_option(r, "aggregator", "%s", run_aggregator(r))) != 0)
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

void run_close(struct run *r)
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

uint64_t run_examples_held(const struct run *r)
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

/*
 * The scheduler moved this worker to another zone aggregator, or to none:
 * said once. libdml takes its route when it connects, so the job's
 * connection keeps the one it opened with.
 */
static void run_note_route(struct run *r, const struct assign *next)
{
	if (strcmp(next->aggregator, run_aggregator(r)) == 0)
		return;
	dml_info("job %" PRIu32 ": the scheduler routes this worker %s%s (assignment v%"
		 PRIu64 "); its connection keeps the route it opened with", r->as.job,
		 next->aggregator[0] ? "through aggregator " : "straight to the servers",
		 next->aggregator, next->version);
	memcpy(r->as.aggregator, next->aggregator, sizeof(r->as.aggregator));
}

/* A new assignment of the same job: take its partitions and batch size. */
int run_follow(struct run *r, const struct assign *next)
{
	size_t before = r->as.nparts;
	uint32_t batch = assign_batch(r, &r->as);
	int new_parts = !assign_same_parts(&r->as, next);
	char why[sizeof(r->err)];
	int rc;

	run_note_route(r, next);
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
