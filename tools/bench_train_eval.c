/*
 * dml-bench train's copies of the model and their scoring: where each table
 * lies in one flat copy, the series of copies a run takes (thinned to stay
 * within a memory budget), and the evaluator that scores them in order
 * through a local store and the job's own app, to find the first copy at or
 * above the target.
 *
 * Scoring never runs while a run's clock does: it happens after each run.
 */
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "worker/app.h"
#include "tools/bench.h"
#include "tools/bench_train.h"
#include "tools/bench_util.h"
#include "worker/dml.h"
#include "proto/job_spec.h"
#include "worker/local_store.h"
#include "proto/log.h"
#include "proto/util.h"
#include "tools/bench_train_internal.h"

/* Snapshots kept in memory at most; beyond it every other one is dropped. */
#define TRAIN_SNAP_BUDGET (2ull << 30)
#define TRAIN_SNAP_MIN 8
/* The largest model copied: 512 MiB. */
#define TRAIN_MAX_FLOATS (128ull << 20)

/* ---- the model's layout ---------------------------------------------- */

int train_layout_init(const Dml__JobSpec *spec, struct train_layout *l)
{
	memset(l, 0, sizeof(*l));
	if (spec->n_tables == 0 || spec->n_tables > DML_JOB_TABLES_MAX) {
		dml_err("job %s: %zu tables (1 to %d supported)", spec->name,
			spec->n_tables, DML_JOB_TABLES_MAX);
		return DML_EINVAL;
	}
	for (size_t i = 0; i < spec->n_tables; i++) {
		const Dml__TableSpec *t = spec->tables[i];
		/* The job check refuses width 0; never divide by it anyway. */
		uint64_t room = (TRAIN_MAX_FLOATS - l->floats) / (t->width + !t->width);

		if (!t->dense) {
			dml_err("job %s: table %" PRIu32 " is sparse; dml-bench "
				"train copies dense tables only", spec->name, t->id);
			return DML_EINVAL;
		}
		if (t->keys > room) {
			dml_err("job %s: the model is too large to copy (more than "
				"%llu floats)", spec->name,
				(unsigned long long)TRAIN_MAX_FLOATS);
			return DML_EINVAL;
		}
		l->id[i] = t->id;
		l->keys[i] = t->keys;
		l->width[i] = t->width;
		l->off[i] = l->floats;
		l->floats += (size_t)t->keys * t->width;
	}
	l->ntables = spec->n_tables;
	return 0;
}

/* ---- snapshots --------------------------------------------------------- */

void train_series_init(struct train_series *s, size_t floats, uint64_t every)
{
	uint64_t cap = TRAIN_SNAP_BUDGET / (floats * sizeof(float) + 1);

	memset(s, 0, sizeof(*s));
	s->floats = floats;
	s->every = every ? every : 1;
	s->cap = cap < TRAIN_SNAP_MIN ? TRAIN_SNAP_MIN : (size_t)cap;
}

void train_series_destroy(struct train_series *s)
{
	for (size_t i = 0; i < s->n; i++)
		free(s->v[i].vals);
	free(s->v);
	memset(s, 0, sizeof(*s));
}

/* Out of room: keep snapshots 0, 2, 4, ... and take them half as often. */
static void train_series_thin(struct train_series *s)
{
	size_t j = 0;

	for (size_t i = 0; i < s->n; i++) {
		if (i % 2 == 0)
			s->v[j++] = s->v[i];
		else
			free(s->v[i].vals);
	}
	s->n = j;
	s->every *= 2;
}

/* Room for a new snapshot: its values to fill in, or NULL (no memory). */
float *train_series_add(struct train_series *s, uint64_t ns, double examples)
{
	float *vals;

	if (s->n == s->cap)
		train_series_thin(s);
	vals = malloc(s->floats * sizeof(*vals));
	if (!vals) {
		dml_err("no memory for a copy of the model (%zu floats)", s->floats);
		return NULL;
	}
	if (s->n == s->alloc) {
		s->alloc = s->alloc ? 2 * s->alloc : 64;
		s->v = dml_xrealloc(s->v, s->alloc * sizeof(*s->v));
	}
	s->v[s->n++] = (struct train_snap){ ns, examples, vals };
	return vals;
}

/* Forget the last snapshot (its copy failed). */
void train_series_drop_last(struct train_series *s)
{
	if (s->n > 0)
		free(s->v[--s->n].vals);
}

/* ---- one run's figures ------------------------------------------------- */

void train_result_init(struct train_result *r)
{
	memset(r, 0, sizeof(*r));
	r->rate = r->trained_s = r->epochs = NAN;
	r->t_target = r->ep_target = r->acc_target = r->final_acc = NAN;
	r->link_bytes = NAN;
}

/* ---- evaluation -------------------------------------------------------- */

void train_eval_close(struct train_eval *e)
{
	if (e->state)
		e->app->destroy(e->state);
	dml_local_store_free(e->store);
	free(e->initial);
	memset(e, 0, sizeof(*e));
}

/* Copy every table of a local store into vals (layout l). */
int train_store_copy(struct dml_local_store *s, const struct train_layout *l,
		     float *vals)
{
	for (size_t i = 0; i < l->ntables; i++) {
		int rc = dml_local_store_get(s, l->id[i], vals + l->off[i]);

		if (rc) {
			dml_err("copy of table %" PRIu32 ": %s", l->id[i],
				dml_strerror(rc));
			return rc;
		}
	}
	return 0;
}

int train_eval_open(struct train_eval *e, const Dml__JobSpec *spec,
		    const struct dml_app_env *env, const struct train_layout *l)
{
	char err[512] = "";
	int rc;

	memset(e, 0, sizeof(*e));
	e->app = dml_app_find(spec->app); /* found: train_spec_load() checked */
	rc = dml_local_store_new(spec, &e->store, err, sizeof(err));
	if (rc == 0)
		rc = e->app->create(spec, env, &e->state, err, sizeof(err));
	if (rc) {
		dml_err("job %s: %s", spec->name, err[0] ? err : dml_strerror(rc));
		train_eval_close(e);
		return rc;
	}
	dml_local_store_io(e->store, &e->io);
	e->data_examples = e->app->data_examples(e->state);
	e->initial = malloc(l->floats * sizeof(float));
	if (!e->initial) {
		train_eval_close(e);
		return DML_ENOMEM;
	}
	rc = train_store_copy(e->store, l, e->initial);
	if (rc)
		train_eval_close(e);
	return rc;
}

static int train_eval_snap(struct train_eval *e, const struct train_layout *l,
			   const float *vals, double *acc)
{
	char err[512] = "";
	int rc = 0;

	for (size_t i = 0; i < l->ntables && rc == 0; i++)
		rc = dml_local_store_set(e->store, l->id[i], vals + l->off[i]);
	if (rc == 0)
		rc = e->app->evaluate(e->state, &e->io, acc, err, sizeof(err));
	if (rc)
		dml_err("evaluating a copy of the model: %s",
			err[0] ? err : dml_strerror(rc));
	return rc;
}

/*
 * Score the snapshots taken at or after t0_ns in order until the first at or
 * above target, then the last one: time, epochs and final accuracy into r.
 * With window > 0 a snapshot stands for the mean accuracy of those within
 * the last window epochs up to it: near its plateau a curve crosses the
 * target many times, and one lucky copy would decide the time.
 */
int train_series_evaluate(struct train_eval *e, const struct train_layout *l,
			  const struct train_series *s, uint64_t t0_ns,
			  double target, double window, struct train_result *r)
{
	double data = (double)e->data_examples, acc = NAN, sum = 0;
	double *accs = dml_xcalloc(s->n + 1, sizeof(*accs));
	size_t i = 0, from, last;
	int rc = 0;

	while (i < s->n && s->v[i].ns < t0_ns)
		i++;
	if (i == s->n) {
		free(accs);
		return 0;
	}
	last = s->n - 1;
	r->snaps = s->n - i;
	for (from = i; i <= last && !r->reached; i++) {
		double ep = s->v[i].examples / data, mean;

		if (bench_interrupted() || (rc = train_eval_snap(e, l, s->v[i].vals, &acc))) {
			free(accs);
			return rc ? rc : DML_ECLOSED;
		}
		accs[i] = acc;
		sum += acc;
		while (from < i && s->v[from].examples / data < ep - window)
			sum -= accs[from++];
		mean = window > 0 ? sum / (double)(i - from + 1) : acc;
		dml_info("copy %zu at %.3f s, %.2f epochs: accuracy %.4f (mean %.4f)", i,
			 (double)(s->v[i].ns - t0_ns) / 1e9, ep, acc, mean);
		if (mean >= target) {
			r->reached = 1;
			r->t_target = (double)(s->v[i].ns - t0_ns) / 1e9;
			r->ep_target = ep;
			r->acc_target = mean;
		}
	}
	free(accs);
	/* i is past the snapshot scored last; the last one may still be due. */
	if (i <= last) {
		rc = train_eval_snap(e, l, s->v[last].vals, &acc);
		if (rc)
			return rc;
	}
	r->final_acc = acc;
	r->trained_s = (double)(s->v[last].ns - t0_ns) / 1e9;
	r->epochs = s->v[last].examples / data;
	return 0;
}
