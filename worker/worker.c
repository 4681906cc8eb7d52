/*
 * dml-worker (worker.h): the loop side (scheduler link, ASSIGN handler,
 * progress timer, metrics), the assignments it shares with the trainer
 * thread that runs jobs (worker_trainer.c, worker_run.c), and the daemon's
 * life cycle.
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

/* ---- assignments, partition lists, reports ------------------------------- */

void assign_clear(struct assign *a)
{
	free(a->parts);
	free(a->pos);
	memset(a, 0, sizeof(*a));
}

/* dst (cleared first) gets a copy of src, partitions included. */
void assign_copy(struct assign *dst, const struct assign *src)
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
void assign_from_msg(struct assign *dst, const Dml__Assignment *a)
{
	struct assign view = {
		.job = a->job, .version = a->version, .state = a->state,
		.parts = a->partitions, .nparts = a->n_partitions,
		.pos = a->n_positions == a->n_partitions ? a->positions : NULL,
		.num_partitions = a->num_partitions, .start_clock = a->start_clock,
		.batch = a->batch_size,
	};

	if (a->aggregator && strlen(a->aggregator) < sizeof(view.aggregator))
		memcpy(view.aggregator, a->aggregator, strlen(a->aggregator) + 1);
	assign_copy(dst, &view);
}

/*
 * Does a hold partition p? The worker holding partition 0 is the job's
 * evaluator: one evaluation per eval_every clocks for the whole job, not
 * one per worker (an evaluation can cost as much as many steps).
 */
int assign_has_part(const struct assign *a, uint32_t p)
{
	for (size_t i = 0; i < a->nparts; i++)
		if (a->parts[i] == p)
			return 1;
	return 0;
}

int assign_same_parts(const struct assign *a, const struct assign *b)
{
	return a->num_partitions == b->num_partitions && a->nparts == b->nparts &&
	       (a->nparts == 0 ||
		memcmp(a->parts, b->parts, a->nparts * sizeof(*a->parts)) == 0);
}

int state_is_end(int state)
{
	return state == DML__JOB_STATE__DONE || state == DML__JOB_STATE__FAILED ||
	       state == DML__JOB_STATE__STOPPED;
}

void part_list_clear(struct part_list *l)
{
	free(l->parts);
	free(l->pos);
	memset(l, 0, sizeof(*l));
}

/* Room for n more entries of job's (a list of another job starts over). */
void part_list_room(struct part_list *l, uint32_t job, size_t n)
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
void queue_report_locked(struct shared *sh, const struct report *r)
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
		rep->links.residual_tables = rep->res_tables;
		rep->links.residual_norms = rep->res_norms;
		rep->p.links = &rep->links;
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
	int rc;

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
	rc = dml_sched_link_start(w->base, &w->conn_conf, c->scheduler, &self, on_sched_frame,
				  w, &w->link);
	if (rc)
		return rc;
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
	if ((rc = dml_conn_conf_daemon(&w->conn_conf, DML__ROLE__WORKER, conf->node_id,
				       conf->cluster, conf->handshake_timeout_ms,
				       conf->secret_file, &w->secret, &w->secret_len)) != 0)
		return rc;
	w->conn_conf.limits.max_meta = (uint32_t)conf->max_meta;
	w->conn_conf.limits.max_payload = (uint32_t)conf->max_payload;
	w->conn_conf.tcp_only = !conf->local_socket;

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
