/*
 * dml-bench train's two runs of the job: a single process running the app
 * against a local store, copying the model every tenth of an epoch with its
 * clock stopped, and the local cluster of tools/dml-local, watched through
 * status polls and copied by a libdml control client every TRAIN_SNAP_MS.
 *
 * Must never leave a cluster running or its directory behind:
 * train_cluster() takes it down whatever way the run ends (unless --keep).
 */
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "worker/app.h"
#include "worker/backend.h"
#include "tools/bench.h"
#include "tools/bench_cluster.h"
#include "tools/bench_train.h"
#include "tools/bench_util.h"
#include "worker/dml.h"
#include "proto/job_spec.h"
#include "worker/local_store.h"
#include "proto/log.h"
#include "proto/util.h"
#include "tools/bench_train_internal.h"

/* libdml: give up on the scheduler or a server after this long. */
#define TRAIN_CONNECT_MS "20000"
#define TRAIN_REQUEST_MS "10000"

/* ---- the single process ------------------------------------------------ */

double train_epoch_limit(const Dml__JobSpec *spec)
{
	return spec->max_epochs > 0 ? spec->max_epochs : TRAIN_DEFAULT_EPOCHS;
}

/* Train on every partition until the time or epoch limit, copying as we go. */
static int train_single_loop(struct train_ctx *c, const struct dml_app *app, void *state,
			     struct dml_local_store *store, struct train_series *s,
			     struct train_result *r)
{
	struct dml_app_io io;
	uint64_t data = app->data_examples(state), examples = 0, next, train_ns = 0;
	uint64_t max_ns = (uint64_t)(c->o->max_seconds * 1e9);
	double max_examples = train_epoch_limit(c->spec) * (double)data;
	char err[512] = "";
	int rc = 0, done = 0;

	if (data == 0) {
		dml_err("job %s: no training examples", c->spec->name);
		return DML_EINVAL;
	}
	dml_local_store_io(store, &io);
	train_series_init(s, c->layout.floats, data / TRAIN_SNAPS_PER_EPOCH);
	next = s->every;
	while (!done) {
		struct dml_app_step st = { 0, NAN };
		uint64_t t = dml_now_ns();
		float *vals;

		if (bench_interrupted())
			return DML_ECLOSED;
		rc = app->step(state, &io, &st, err, sizeof(err));
		train_ns += dml_now_ns() - t;
		if (rc || st.examples == 0) {
			dml_err("single process: step: %s",
				rc ? (err[0] ? err : dml_strerror(rc))
				   : "no examples trained on");
			return rc ? rc : DML_EINVAL;
		}
		examples += st.examples;
		done = train_ns >= max_ns || (double)examples >= max_examples;
		if (examples < next && !done)
			continue;
		/* The clock is stopped while the model is copied. */
		vals = train_series_add(s, train_ns, (double)examples);
		if (!vals)
			return DML_ENOMEM;
		rc = train_store_copy(store, &c->layout, vals);
		if (rc)
			return rc;
		while (next <= examples)
			next += s->every;
	}
	/* The store applies a push when it is made, so the copies above hold
	 * every step; what is left is waiting for the handles. */
	if ((rc = app->drain(state, &io, err, sizeof(err))) != 0) {
		dml_err("single process: %s", err);
		return rc;
	}
	r->rate = (double)examples / ((double)train_ns / 1e9);
	snprintf(r->every, sizeof(r->every), "every %.2g epoch",
		 (double)s->every / (double)data);
	return 0;
}

int train_single(struct train_ctx *c, struct train_series *s,
		 struct train_result *r)
{
	const Dml__JobSpec *spec = c->spec;
	const struct dml_app *app = c->eval.app;
	struct dml_local_store *store = NULL;
	uint32_t nparts = spec->partitions ? spec->partitions : 1, *parts;
	void *state = NULL;
	char err[512] = "";
	int rc;

	parts = dml_xcalloc(nparts, sizeof(*parts));
	for (uint32_t i = 0; i < nparts; i++)
		parts[i] = i;
	rc = dml_local_store_new(spec, &store, err, sizeof(err));
	if (rc == 0)
		rc = app->create(spec, &c->env, &state, err, sizeof(err));
	if (rc == 0)
		rc = app->set_partitions(state, parts, nparts, nparts, err, sizeof(err));
	if (rc)
		dml_err("single process: job %s: %s", spec->name,
			err[0] ? err : dml_strerror(rc));
	else
		rc = train_single_loop(c, app, state, store, s, r);
	if (state)
		app->destroy(state);
	dml_local_store_free(store);
	free(parts);
	return rc;
}

/* ---- the cluster ------------------------------------------------------- */

/* The cluster of bench_cluster.h and our control client of its job. */
struct train_cluster {
	struct bench_cluster b;
	dml_opts_t *opts;
	dml_t *d;
};

static int train_cluster_connect(struct train_cluster *k, const struct train_layout *l)
{
	const char *const opts[][2] = {
		{ "scheduler", k->b.sched },
		{ "secret_file", k->b.secret },
		{ "role", "control" },
		{ "job", k->b.job_arg },
		{ "connect_timeout_ms", TRAIN_CONNECT_MS },
		{ "request_timeout_ms", TRAIN_REQUEST_MS },
	};
	int rc = bench_dml_opts_new(opts, DML_ARRAY_LEN(opts), &k->opts);

	if (rc == 0 && (rc = dml_connect(k->opts, &k->d)) != 0)
		dml_err("libdml: connecting to job %s through %s: %s", k->b.job_arg,
			k->b.sched, dml_strerror(rc));
	for (size_t i = 0; rc == 0 && i < l->ntables; i++) {
		uint32_t w = 0;
		uint64_t keys = 0;

		if (dml_table_width(k->d, l->id[i], &w) ||
		    dml_table_size(k->d, l->id[i], &keys) || w != l->width[i] ||
		    keys != l->keys[i]) {
			dml_err("servers' table %" PRIu32 ": width %" PRIu32 ", %" PRIu64
				" keys; the job says %" PRIu32 " x %" PRIu64, l->id[i], w,
				keys, l->width[i], l->keys[i]);
			rc = DML_ECONF;
		}
	}
	return rc;
}

/* Pull every table into vals; *ns is when the last part arrived. */
static int train_cluster_pull(struct train_cluster *k, const struct train_layout *l,
			      float *vals)
{
	dml_handle_t h[DML_JOB_TABLES_MAX] = { 0 };
	int rc = 0, rc2;

	for (size_t i = 0; rc == 0 && i < l->ntables; i++)
		rc = dml_pull_range(k->d, l->id[i], 0, l->keys[i], vals + l->off[i],
				    &h[i]);
	for (size_t i = 0; i < l->ntables; i++) {
		rc2 = dml_wait(k->d, h[i]);
		rc = rc ? rc : rc2;
	}
	return rc;
}

/* Examples trained by time ns, from the polls (linear in between). */
static double train_polls_examples(const struct train_cluster *k, uint64_t t0,
				   uint64_t ns)
{
	uint64_t pt = t0;
	double pe = 0;

	for (size_t i = 0; i < k->b.npolls; i++) {
		const struct bench_poll *p = &k->b.polls[i];
		double step;

		if (p->ns < t0)
			continue;
		if (p->ns >= ns) {
			if (p->ns == pt)
				return (double)p->examples;
			step = (double)p->examples - pe;
			return pe + step * (double)(ns - pt) / (double)(p->ns - pt);
		}
		pt = p->ns;
		pe = (double)p->examples;
	}
	return pe;
}

/*
 * Time zero: the last snapshot still equal to the initial model (the first
 * update arrived after it, within one snapshot interval). When the first
 * snapshot already differs, the first status with examples minus its run
 * time, which counts the workers' start (loading the data) as training.
 */
static int train_cluster_t0(const struct train_cluster *k, const struct train_series *s,
			    const struct train_eval *e, const struct train_layout *l,
			    uint64_t *t0, struct train_result *r)
{
	size_t i = 0, bytes = l->floats * sizeof(float);

	while (i < s->n && memcmp(s->v[i].vals, e->initial, bytes) == 0)
		i++;
	if (i > 0 && i < s->n) {
		*t0 = s->v[i - 1].ns;
		snprintf(r->t0, sizeof(r->t0), "the last copy still equal to the initial "
			 "model (training began within %d ms after it)", TRAIN_SNAP_MS);
		return 0;
	}
	if (i == s->n && s->n > 0) {
		dml_err("the cluster's model never changed in %zu copies", s->n);
		return DML_EIO;
	}
	for (size_t j = 0; j < k->b.npolls; j++) {
		const struct bench_poll *p = &k->b.polls[j];

		if (p->examples > 0 && p->ns > p->run_ms * 1000000u) {
			*t0 = p->ns - p->run_ms * 1000000u;
			snprintf(r->t0, sizeof(r->t0), "the first status with examples "
				 "minus its run time (the first copy was already "
				 "trained; counts the workers' start)");
			return 0;
		}
	}
	dml_err("no copy of the cluster's model and no status with examples");
	return DML_EIO;
}

static uint64_t train_ms_ns(uint64_t ms)
{
	return ms * 1000000u;
}

/* CPU seconds of this process and of the children it waited for. */
static double train_cpu_s(void)
{
	struct rusage self, kids;
	double s = 0;

	if (getrusage(RUSAGE_SELF, &self) == 0 &&
	    getrusage(RUSAGE_CHILDREN, &kids) == 0) {
		const struct timeval *tv[] = { &self.ru_utime, &self.ru_stime,
					       &kids.ru_utime, &kids.ru_stime };

		for (size_t i = 0; i < DML_ARRAY_LEN(tv); i++)
			s += (double)tv[i]->tv_sec + (double)tv[i]->tv_usec / 1e6;
	}
	return s;
}

/* What the watch of a running job knows so far. */
struct train_watch {
	uint64_t begin;       /* submitted (about) */
	uint64_t started;     /* the first sign of training; 0 until then */
	uint64_t next_copy, next_poll;
	char state[16];       /* the job's state in the last answer */
};

/* Ask for the job's status; a lone failed poll is forgiven. */
static int train_watch_poll(struct train_cluster *k, struct train_watch *w)
{
	struct bench_poll *p;
	int rc = bench_cluster_watch_poll(&k->b, &p);

	if (p) {
		snprintf(w->state, sizeof(w->state), "%s", p->state);
		if (!w->started && p->examples > 0)
			w->started = p->ns;
	}
	return rc;
}

/* Copy the model; a failed pull is the end once the job has ended. */
static int train_watch_copy(struct train_cluster *k, struct train_ctx *c,
			    struct train_series *s, struct train_watch *w)
{
	size_t bytes = c->layout.floats * sizeof(float);
	float *vals = train_series_add(s, 0, 0);
	int rc, prc;

	if (!vals)
		return DML_ENOMEM;
	rc = train_cluster_pull(k, &c->layout, vals);
	if (rc) {
		/* A job that ended may take its tables with it. */
		train_series_drop_last(s);
		prc = k->b.ended ? 0 : train_watch_poll(k, w);
		if (prc || k->b.ended)
			return prc;
		dml_err("pulling the model of job %s: %s", k->b.job_arg, dml_strerror(rc));
		return rc;
	}
	s->v[s->n - 1].ns = dml_now_ns();
	if (!w->started && s->n > 1 && memcmp(vals, c->eval.initial, bytes) != 0)
		w->started = s->v[s->n - 1].ns;
	return 0;
}

/* The next deadline of a periodic task that was due at `due`. */
static uint64_t train_next(uint64_t due, uint64_t now, uint64_t every)
{
	due += every;
	return due < now ? now + every : due;
}

/* Copies and polls until the time limit or the job's end. */
static int train_cluster_watch(struct train_cluster *k, struct train_ctx *c,
			       struct train_series *s)
{
	uint64_t max_ns = (uint64_t)(c->o->max_seconds * 1e9), now, wake;
	uint64_t start_ns = (uint64_t)BENCH_CLUSTER_START_S * 1000000000u;
	uint64_t poll_ns = train_ms_ns(BENCH_CLUSTER_POLL_MS);
	struct train_watch w = { .begin = dml_now_ns(), .state = "pending" };
	int rc = 0, slowed = 0;

	w.next_copy = w.next_poll = w.begin;
	train_series_init(s, c->layout.floats, train_ms_ns(TRAIN_SNAP_MS));
	while (rc == 0 && !k->b.ended) {
		if (bench_interrupted())
			return DML_ECLOSED;
		now = dml_now_ns();
		if (now >= w.next_copy) {
			rc = train_watch_copy(k, c, s, &w);
			w.next_copy = train_next(w.next_copy, now, s->every);
		}
		if (rc == 0 && !k->b.ended && now >= w.next_poll) {
			rc = train_watch_poll(k, &w);
			w.next_poll = train_next(w.next_poll, now, poll_ns);
		}
		now = dml_now_ns();
		if (rc == 0 && c->o->slow_cpus && !slowed && w.started &&
		    now - w.started >= (uint64_t)(c->o->slow_after_s * 1e9)) {
			rc = bench_cluster_set_cpus(&k->b, c->o->slow_worker, c->o->slow_cpus);
			slowed = 1;
			dml_info("worker %u slowed to %s cores", c->o->slow_worker,
				 c->o->slow_cpus);
		}
		if (w.started && now - w.started >= max_ns)
			break;
		if (rc == 0 && !w.started && now - w.begin >= start_ns) {
			dml_err("job %s did not start training within %d s (state %s)",
				k->b.job_arg, BENCH_CLUSTER_START_S, w.state);
			rc = DML_ETIMEDOUT;
		}
		wake = w.next_copy < w.next_poll ? w.next_copy : w.next_poll;
		if (rc == 0 && !k->b.ended && wake > now)
			dml_progress(k->d, (int)((wake - now + 999999) / 1000000));
	}
	return rc;
}

/* Stop the job, take the cluster down, remove its directory: always. */
static void train_cluster_down(struct train_cluster *k, int keep)
{
	if (k->d)
		dml_close(k->d);
	k->d = NULL;
	dml_opts_free(k->opts);
	k->opts = NULL;
	bench_cluster_down(&k->b, keep);
}

static int train_cluster_figures(struct train_cluster *k, struct train_ctx *c,
				 struct train_series *s, struct train_result *r)
{
	uint64_t t0 = 0;
	const struct bench_poll *lp = k->b.npolls ? &k->b.polls[k->b.npolls - 1] : NULL;
	int rc = train_cluster_t0(k, s, &c->eval, &c->layout, &t0, r);

	if (rc)
		return rc;
	r->t0_ns = t0;
	for (size_t i = 0; i < s->n; i++)
		s->v[i].examples =
			s->v[i].ns < t0 ? 0 : train_polls_examples(k, t0, s->v[i].ns);
	r->rate = bench_cluster_rate(&k->b);
	snprintf(r->every, sizeof(r->every), "every %" PRIu64 " ms",
		 s->every / 1000000u);
	if (lp && !isnan(lp->metric))
		snprintf(r->note, sizeof(r->note), "the job's own last evaluation: "
			 "accuracy %.4f (state %s)", lp->metric, lp->state);
	return train_series_evaluate(&c->eval, &c->layout, s, t0, c->o->target,
				     c->o->smooth_epochs, r);
}

/* With zones: the zone links' bytes since `before`, and the examples trained. */
static int train_cluster_links(struct train_cluster *k, uint64_t before,
			       struct train_result *r)
{
	uint64_t after;
	int rc = bench_cluster_link_bytes(&k->b, &after);

	if (rc == 0) {
		r->link_bytes = (double)(after - before);
		r->link_examples = k->b.npolls ? k->b.polls[k->b.npolls - 1].examples : 0;
	}
	return rc;
}

int train_cluster(struct train_ctx *c, struct train_series *s,
		  struct train_result *r)
{
	struct train_cluster k;
	uint64_t links0 = 0;
	int rc;

	memset(&k, 0, sizeof(k));
	bench_cluster_init(&k.b);
	k.b.cpus = c->o->cpus;
	k.b.zones = c->o->zones;
	k.b.wan = c->o->wan;
	k.b.aggregators = c->o->aggregators;
	rc = bench_cluster_up(&k.b, "dml-bench-train", c->p->src, c->p->build,
			      c->o->servers, c->o->workers);
	if (rc == 0 && k.b.zones)
		rc = bench_cluster_link_bytes(&k.b, &links0);
	if (rc == 0) {
		rc = bench_cluster_submit(&k.b, c->p->job);
		snprintf(r->refused, sizeof(r->refused), "%s", k.b.refused);
	}
	if (rc == 0)
		rc = train_cluster_connect(&k, &c->layout);
	if (rc == 0) {
		uint64_t t = dml_now_ns();
		double cpu = train_cpu_s();

		rc = train_cluster_watch(&k, c, s);
		r->watch_cpu_s = train_cpu_s() - cpu;
		r->watch_s = (double)(dml_now_ns() - t) / 1e9;
	}
	if (rc == 0 && k.b.zones)
		rc = train_cluster_links(&k, links0, r);
	if (rc && !r->refused[0] && !bench_interrupted())
		bench_cluster_log_tails(&k.b);
	/* The figures need the polls and the copies, not the cluster. */
	train_cluster_down(&k, c->o->keep);
	if (rc == 0)
		rc = train_cluster_figures(&k, c, s, r);
	if (c->polls) {
		*c->polls = k.b.polls;
		*c->npolls = k.b.npolls;
		k.b.polls = NULL;
	}
	bench_cluster_free(&k.b);
	return rc;
}
