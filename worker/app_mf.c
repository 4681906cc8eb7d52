/*
 * The mf app (app.h): matrix factorisation of a ratings matrix, the model
 * of recommenders. User u has k factors in row u of sparse table 0, item i
 * k factors in row i of sparse table 1 (k = the tables' width), and the
 * model predicts
 *
 *     rating(u, i) = mean + P[u] . Q[i]
 *
 * with mean the training ratings' mean (every worker reads the whole file,
 * so all agree on it; for synthetic data, the generator's). The loss is
 * the mean of half the squared errors; L2 regularisation is the tables'
 * weight_decay, applied by the servers.
 *
 * Data is a triplet file (data_triplets.h) or synthetic ratings
 * (data_synth_ratings.h; test_data = synthetic: ratings TEST_BASE + i of
 * the same hidden model). A worker trains on its partitions (rating
 * ranges), visiting them in a new order each pass, as the other apps do.
 *
 * A step takes the next batch of ratings, pulls the rows of its distinct
 * users and items (both pulls in flight at once), computes the errors,
 * and pushes the gradients of both tables by the same keys, left in
 * flight (the next step waits for them before it writes the gradients
 * again, drain before the end). Evaluation scores the test ratings in
 * chunks: RMSE, or the loss.
 *
 * Must never: pull more rows than its batch has ids, touch the keys or
 * values of a push in flight, keep a pull in flight when it returns, or
 * abort on a spec or a file (every size is checked, every allocation may
 * fail).
 */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "worker/app.h"
#include "worker/app_base.h"
#include "worker/app_util.h"
#include "worker/data_synth_ratings.h"
#include "worker/data_triplets.h"
#include "proto/dml_error.h"
#include "proto/job_spec.h"
#include "worker/walk.h"

#define DEFAULT_EVAL_EVERY 100
/* Ratings scored at a time in evaluation. */
#define EVAL_CHUNK 1000

#define STREAM_SHUFFLE UINT64_C(0x1f83d9abfb41bd6b)

enum { USERS, ITEMS, SIDES };

/* Ratings: a file in memory, or synthetic ones made when read. */
struct dataset {
	struct dml_app_data d;     /* synthetic: rating i is generator rating d.base + i */
	struct dml_triplets file;  /* file.users != NULL */
};

/*
 * One table's part of a batch: each row's id, the sorted distinct ids and
 * the index of each row's among them, their pulled factors; and the push
 * of the last step (its own keys and gradient, in flight while pushing).
 */
struct side {
	uint64_t *ids;             /* rows */
	uint64_t *keys;            /* nkeys distinct ids */
	uint32_t *idx;             /* rows */
	float *w;                  /* nkeys x k */
	size_t nkeys, ids_cap, keys_cap, idx_cap, w_cap;
	uint64_t *pkeys;
	float *g;
	size_t pnkeys, pkeys_cap, g_cap;
	dml_handle_t pushing;
};

struct mf {
	struct dml_app_base base;  /* walks the ratings it trains on */
	uint64_t seed;
	uint32_t k;
	int metric_loss;           /* evaluate the loss, not the RMSE */
	double mean;
	struct dml_ratings gen;
	struct dataset train, test;
	struct dml_app_table tables[SIDES];
	struct side side[SIDES];
	size_t rows;
	float *y;                  /* rows ratings */
	double *e;                 /* rows errors: prediction - rating */
	size_t y_cap, e_cap;
};

/* err = "app mf: " and the reason; returns rc. */
#define fail(err, errlen, rc, ...) dml_app_fail(err, errlen, rc, "mf", __VA_ARGS__)

static void rating_get(const struct mf *a, const struct dataset *d, uint64_t i, uint64_t *u,
		       uint64_t *item, float *r)
{
	if (d->file.users) {
		*u = d->file.users[i];
		*item = d->file.items[i];
		*r = d->file.ratings[i];
		return;
	}
	dml_ratings_record(&a->gen, d->d.base + i, u, item, r);
}

/* ---- batches ------------------------------------------------------------- */

static void side_free(struct side *s)
{
	free(s->ids);
	free(s->keys);
	free(s->idx);
	free(s->w);
	free(s->pkeys);
	free(s->g);
	memset(s, 0, sizeof(*s));
}

/* Room for a batch of rows ratings. */
static int batch_reserve(struct mf *a, size_t rows)
{
	size_t n = rows ? rows : 1;

	if (n > SIZE_MAX / a->k ||
	    dml_app_reserve((void **)&a->y, &a->y_cap, n, sizeof(*a->y)) != 0 ||
	    dml_app_reserve((void **)&a->e, &a->e_cap, n, sizeof(*a->e)) != 0)
		return DML_ENOMEM;
	for (int t = 0; t < SIDES; t++) {
		struct side *s = &a->side[t];

		if (dml_app_reserve((void **)&s->ids, &s->ids_cap, n, sizeof(*s->ids)) != 0 ||
		    dml_app_reserve((void **)&s->keys, &s->keys_cap, n, sizeof(*s->keys)) != 0 ||
		    dml_app_reserve((void **)&s->idx, &s->idx_cap, n, sizeof(*s->idx)) != 0 ||
		    dml_app_reserve((void **)&s->w, &s->w_cap, n * a->k, sizeof(*s->w)) != 0)
			return DML_ENOMEM;
	}
	return 0;
}

/*
 * The batch of ratings recs[0..rows-1] of d: ids, ratings, and each side's
 * distinct ids. A batch without ratings still pulls user 0: it keeps this
 * worker within the staleness bound instead of racing through its clocks.
 */
static int batch_build(void *state, const struct dml_app_data *data, const uint64_t *recs,
		       size_t rows, char *err, size_t errlen)
{
	struct mf *a = state;
	const struct dataset *d = (const struct dataset *)data;

	if (batch_reserve(a, rows) != 0)
		return fail(err, errlen, DML_ENOMEM, "out of memory for a batch of %zu ratings",
			    rows);
	a->rows = rows;
	for (size_t r = 0; r < rows; r++)
		rating_get(a, d, recs[r], &a->side[USERS].ids[r], &a->side[ITEMS].ids[r],
			   &a->y[r]);
	for (int t = 0; t < SIDES; t++) {
		struct side *s = &a->side[t];

		memcpy(s->keys, s->ids, rows * sizeof(*s->keys));
		s->nkeys = dml_keys_unique(s->keys, rows);
		for (size_t r = 0; r < rows; r++)
			s->idx[r] = dml_keys_index(s->keys, s->nkeys, s->ids[r]);
	}
	if (!rows) {
		a->side[USERS].keys[0] = 0;
		a->side[USERS].nkeys = 1;
	}
	return 0;
}

/* Pull both sides' rows (both requests in flight together) and wait. */
static int batch_pull(void *state, struct dml_app_io *io, char *err, size_t errlen)
{
	struct mf *a = state;
	dml_handle_t h[SIDES] = { 0, 0 };
	int rc = 0, failed = -1;

	for (int t = 0; t < SIDES && !rc; t++) {
		struct side *s = &a->side[t];

		if (s->nkeys && (rc = io->ops->pull(io->arg, (uint32_t)t, s->keys, s->nkeys, s->w,
						    &h[t])) != 0)
			failed = t;
	}
	for (int t = 0; t < SIDES; t++) {
		int wrc;

		if (!h[t])
			continue;
		wrc = dml_app_wait(io, h[t]);
		if (wrc && !rc) {
			rc = wrc;
			failed = t;
		}
	}
	if (rc)
		snprintf(err, errlen, "pull of table %d (%zu keys): %s", failed,
			 a->side[failed].nkeys, dml_strerror(rc));
	return rc;
}

/* e[r] = prediction - rating for every row; the sum of the halved squares. */
static double batch_forward(void *state)
{
	struct mf *a = state;
	const struct side *u = &a->side[USERS], *v = &a->side[ITEMS];
	double loss = 0;

	for (size_t r = 0; r < a->rows; r++) {
		const float *p = u->w + (size_t)u->idx[r] * a->k;
		const float *q = v->w + (size_t)v->idx[r] * a->k;
		double pred = a->mean;

		for (uint32_t j = 0; j < a->k; j++)
			pred += (double)p[j] * q[j];
		a->e[r] = pred - a->y[r];
		loss += 0.5 * a->e[r] * a->e[r];
	}
	return loss;
}

/* ---- the spec ------------------------------------------------------------ */

static const struct dml_app_base_ops mf_ops;

static void mf_destroy(void *state)
{
	struct mf *a = state;

	if (!a)
		return;
	dml_triplets_free(&a->train.file);
	dml_triplets_free(&a->test.file);
	dml_walk_clear(&a->base.walk);
	for (int t = 0; t < SIDES; t++)
		side_free(&a->side[t]);
	free(a->y);
	free(a->e);
	free(a);
}

/* A triplet file into d. */
static int triplets_load(void *state, struct dml_app_data *d, const char *path, char *why,
			 size_t whylen)
{
	struct dataset *ds = (struct dataset *)d;
	int rc = dml_triplets_load(path, &ds->file, why, whylen);

	(void)state;
	if (rc == 0)
		d->n = ds->file.count;
	return rc;
}

static int mf_data(struct mf *a, const Dml__JobSpec *spec, char *err, size_t errlen)
{
	int rc;

	a->base.train = &a->train.d;
	a->base.test = &a->test.d;
	if ((rc = dml_app_base_data(&a->base, spec, DML_RATINGS_TEST_BASE, err, errlen)) != 0)
		return rc;
	a->mean = a->train.file.users ? a->train.file.mean : DML_RATINGS_MEAN;
	return 0;
}

static int mf_create(const Dml__JobSpec *spec, const struct dml_app_env *env, void **state,
		     char *err, size_t errlen)
{
	struct dml_app_base *b;
	struct mf *a;
	int rc;

	(void)env;
	*state = NULL;
	rc = dml_app_base_new("mf", &mf_ops, spec, sizeof(*a), STREAM_SHUFFLE, &b, err, errlen);
	if (rc)
		return rc;
	a = (struct mf *)b;
	a->seed = spec->seed;
	a->k = spec->tables[0]->width;
	a->metric_loss = spec->metric && strcmp(spec->metric, "loss") == 0;
	a->gen = (struct dml_ratings){ spec->seed, spec->users, spec->items };
	for (int t = 0; t < SIDES; t++)
		a->tables[t] = (struct dml_app_table){ .id = (uint32_t)t, .dense = 0,
						       .width = a->k, .keys = 0 };
	if ((rc = mf_data(a, spec, err, errlen)) != 0) {
		mf_destroy(a);
		return rc;
	}
	*state = a;
	return 0;
}

static size_t mf_tables(const void *state, const struct dml_app_table **out)
{
	*out = ((const struct mf *)state)->tables;
	return SIDES;
}

/* ---- steps --------------------------------------------------------------- */

/* Wait for the pushes of the last step still in flight; the first error. */
static int push_land(void *state, struct dml_app_io *io, char *err, size_t errlen)
{
	struct mf *a = state;
	int rc = 0;

	for (int t = 0; t < SIDES; t++) {
		dml_handle_t h = a->side[t].pushing;
		int wrc;

		if (!h)
			continue;
		a->side[t].pushing = 0;
		if ((wrc = dml_app_wait(io, h)) != 0 && !rc) {
			rc = wrc;
			snprintf(err, errlen, "push to table %d: %s", t, dml_strerror(rc));
		}
	}
	return rc;
}

/*
 * The gradient of the batch's summed loss / norm per pulled row of both
 * tables into the push buffers (the last pushes landed), and their pushes,
 * left in flight: d/dP[u] = e Q[i] / norm, d/dQ[i] = e P[u] / norm.
 */
static int backward_push(void *state, struct dml_app_io *io, double *loss, char *err,
			 size_t errlen)
{
	struct mf *a = state;
	double inv = 1.0 / (double)a->base.norm;
	size_t k = a->k;

	(void)loss;

	for (int t = 0; t < SIDES; t++) {
		struct side *s = &a->side[t];

		if (dml_app_reserve((void **)&s->pkeys, &s->pkeys_cap, s->nkeys,
				    sizeof(*s->pkeys)) != 0 ||
		    dml_app_reserve((void **)&s->g, &s->g_cap, s->nkeys * k, sizeof(*s->g)) != 0)
			return fail(err, errlen, DML_ENOMEM, "out of memory for a gradient of %zu "
				    "keys", s->nkeys);
		memcpy(s->pkeys, s->keys, s->nkeys * sizeof(*s->pkeys));
		memset(s->g, 0, s->nkeys * k * sizeof(*s->g));
		s->pnkeys = s->nkeys;
	}
	for (size_t r = 0; r < a->rows; r++) {
		const struct side *u = &a->side[USERS], *v = &a->side[ITEMS];
		size_t iu = (size_t)u->idx[r] * k, iv = (size_t)v->idx[r] * k;
		double e = a->e[r] * inv;

		for (size_t j = 0; j < k; j++) {
			u->g[iu + j] += (float)(e * v->w[iv + j]);
			v->g[iv + j] += (float)(e * u->w[iu + j]);
		}
	}
	for (int t = 0; t < SIDES; t++) {
		struct side *s = &a->side[t];
		int rc = io->ops->push(io->arg, (uint32_t)t, s->pkeys, s->pnkeys, s->g,
				       &s->pushing);

		if (rc) {
			s->pushing = 0;
			snprintf(err, errlen, "push to table %d: %s", t, dml_strerror(rc));
			return rc;
		}
	}
	return 0;
}

static int mf_evaluate(void *state, struct dml_app_io *io, double *value, char *err,
		       size_t errlen)
{
	struct mf *a = state;
	uint64_t eval_n = a->base.eval_n;
	uint64_t recs[EVAL_CHUNK];
	double sum = 0;
	int rc = 0;

	for (uint64_t pos = 0; pos < eval_n; pos += EVAL_CHUNK) {
		size_t rows = (size_t)(eval_n - pos < EVAL_CHUNK ? eval_n - pos : EVAL_CHUNK);

		for (size_t r = 0; r < rows; r++)
			recs[r] = pos + r;
		if ((rc = batch_build(a, a->base.eval, recs, rows, err, errlen)) != 0 ||
		    (rc = batch_pull(a, io, err, errlen)) != 0)
			return rc;
		sum += batch_forward(a);
	}
	if (!eval_n)
		*value = NAN;
	else if (a->metric_loss)
		*value = sum / (double)eval_n;
	else
		*value = sqrt(2.0 * sum / (double)eval_n);
	return 0;
}

static const struct dml_app_base_ops mf_ops = {
	.load = triplets_load,
	.build = batch_build,
	.pull = batch_pull,
	.forward = batch_forward,
	.land = push_land,
	.backward_push = backward_push,
};

const struct dml_app dml_app_mf = {
	.name = "mf",
	.metric = "rmse",
	.default_eval_every = DEFAULT_EVAL_EVERY,
	.profile_job = "[job]\nname = profile\napp = mf\ndata = synthetic\nexamples = 2000\n"
		       "max_clocks = 1\nbatch_size = 256\n"
		       "[table]\nid = 0\nkind = sparse\nwidth = 16\ninit = normal\ninit_scale = 0.1\n"
		       "optimizer = sgd\nlr = 0.1\n"
		       "[table]\nid = 1\nkind = sparse\nwidth = 16\ninit = normal\ninit_scale = 0.1\n"
		       "optimizer = sgd\nlr = 0.1\n",
	.create = mf_create,
	.tables = mf_tables,
	.set_partitions = dml_app_base_set_partitions,
	.walk = dml_app_base_walk,
	.set_batch = dml_app_base_set_batch,
	.step = dml_app_base_step,
	.evaluate = mf_evaluate,
	.drain = dml_app_base_drain,
	.data_examples = dml_app_base_data_examples,
	.destroy = mf_destroy,
};
