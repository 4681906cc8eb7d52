/*
 * dml-worker's trainer thread (worker_internal.h): runs the assigned job
 * clock by clock and, at every clock boundary, looks at the latest ASSIGN
 * (pause, resume, other partitions, stop, another job) and reports.
 *
 * Must never: call libevent or the link, hold the mutex across a libdml
 * call or an app step, run a job that was not assigned RUNNING, or let a
 * job's failure take the daemon down.
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

void *trainer_main(void *arg)
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
