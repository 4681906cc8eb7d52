/*
 * The lsq app (app.h): least squares y = x . w_true + noise on synthetic
 * data, the smallest real job. Example i (features and label) comes from a
 * generator seeded by (spec.seed, i) and w_true from spec.seed alone, so any
 * worker makes any example and all agree on the data set without reading
 * it from anywhere. Table 0 (dense, dim keys, width 1) holds w.
 *
 * Each step takes the next batch_size examples of the worker's partitions
 * (record ranges, cycling), pulls w, computes the gradient of the batch's
 * mean squared error with cblas and pushes it; the loss is that error
 * before the update. Evaluation is the mean squared error over the first
 * min(2000, N) examples. Examples are kept in memory when the worker's
 * share fits a budget, and made again each time they are needed otherwise.
 *
 * Must never: abort or allocate without bound on a spec (every size is
 * checked against the limits below first), or hand cblas a dimension that
 * does not fit its int.
 */
#include <cblas.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "worker/app.h"
#include "worker/app_util.h"
#include "proto/dml_error.h"
#include "worker/walk.h"

#define NOISE_STDDEV 0.1
#define STREAM_SHUFFLE UINT64_C(0x5be0cd19137e2179) /* the walk's key, from the seed */
#define EVAL_EXAMPLES 2000
#define DEFAULT_EVAL_EVERY 10
/* A share of the data up to this size is made once and kept. */
#define CACHE_BYTES (UINT64_C(256) << 20)
/* sqrt(3): uniform features on [-sqrt 3, sqrt 3] have unit variance. */
#define SQRT3 1.7320508075688772

/* Records to draw examples from, and all of them when they fit CACHE_BYTES. */
struct source {
	struct dml_records rec;
	float *cx, *cy;
};

struct lsq {
	uint64_t seed;
	uint64_t n;               /* examples */
	uint32_t dim;
	uint32_t batch;           /* examples per step */
	uint32_t norm;            /* the spec's batch_size: gradients are sums / norm */
	uint32_t cap;             /* rows x, y and r hold */
	struct dml_app_table table;
	float *w_true;
	float *w, *grad;          /* dim */
	float *x;                 /* batch x dim */
	float *y, *r;             /* batch */
	struct source train, eval;
	struct dml_walk walk;     /* over train's records */
};

/* ---- synthetic data ------------------------------------------------------ */

/* 32 random bits to a uniform float on [-sqrt 3, sqrt 3). */
static float unit_feature(uint32_t bits)
{
	return (float)(((double)bits / 2147483648.0 - 1.0) * SQRT3);
}

void dml_lsq_true_weights(uint64_t seed, uint32_t dim, float *w_true)
{
	uint64_t state = seed ^ UINT64_C(0x6a09e667f3bcc909);
	double scale = 1.0 / sqrt((double)dim);

	/* Scaled so that labels have unit variance whatever dim is. */
	for (uint32_t j = 0; j < dim; j++)
		w_true[j] = (float)(dml_rng_normal(&state) * scale);
}

void dml_lsq_example(uint64_t seed, uint64_t i, const float *w_true, uint32_t dim, float *x,
		     float *y)
{
	uint64_t state = seed ^ (UINT64_C(0xd1b54a32d192ed03) * (i + 1));
	double dot = 0;
	uint32_t j;

	/* Two features per draw: making data must not cost more than using it. */
	for (j = 0; j + 1 < dim; j += 2) {
		uint64_t b = dml_rng_next(&state);

		x[j] = unit_feature((uint32_t)b);
		x[j + 1] = unit_feature((uint32_t)(b >> 32));
	}
	if (j < dim)
		x[j] = unit_feature((uint32_t)dml_rng_next(&state));
	for (j = 0; j < dim; j++)
		dot += (double)x[j] * w_true[j];
	*y = (float)(dot + NOISE_STDDEV * dml_rng_normal(&state));
}

double dml_lsq_loss_grad(const float *x, const float *y, size_t rows, uint32_t dim,
			 const float *w, float *grad, float *r)
{
	double sum = 0;

	if (rows == 0)
		return NAN;
	/* r = X w - y */
	cblas_sgemv(CblasRowMajor, CblasNoTrans, (int)rows, (int)dim, 1.0f, x, (int)dim, w, 1,
		    0.0f, r, 1);
	for (size_t i = 0; i < rows; i++) {
		r[i] -= y[i];
		sum += (double)r[i] * r[i];
	}
	/* d/dw mean(r^2) = 2/rows X^T r */
	if (grad)
		cblas_sgemv(CblasRowMajor, CblasTrans, (int)rows, (int)dim,
			    (float)(2.0 / (double)rows), x, (int)dim, r, 1, 0.0f, grad, 1);
	return sum / (double)rows;
}

/* ---- sources of records -------------------------------------------------- */

static void source_clear(struct source *s)
{
	dml_records_clear(&s->rec);
	free(s->cx);
	free(s->cy);
	memset(s, 0, sizeof(*s));
}

/* rows records into x and y: those at places slots of s, or when slots is
 * NULL those from place pos on. */
static void source_fill(const struct lsq *a, const struct source *s, const uint64_t *slots,
			uint64_t pos, size_t rows, float *x, float *y)
{
	for (size_t k = 0; k < rows; k++) {
		float *xr = x + k * a->dim;
		uint64_t at = slots ? slots[k] : pos + k;

		if (s->cx) {
			memcpy(xr, s->cx + at * a->dim, (size_t)a->dim * sizeof(float));
			y[k] = s->cy[at];
		} else {
			dml_lsq_example(a->seed, dml_records_at(&s->rec, at), a->w_true, a->dim, xr,
					&y[k]);
		}
	}
}

/*
 * Make s the records of partitions parts of n examples (app_util.h), and
 * keep every record in memory when they fit. s is unchanged on failure.
 */
static int source_build(const struct lsq *a, struct source *s, uint64_t n,
			const uint32_t *parts, size_t nparts, uint32_t num_partitions,
			char *err, size_t errlen)
{
	struct source t = { 0 };
	uint64_t total;
	int rc;

	rc = dml_records_set(&t.rec, n, parts, nparts, num_partitions, err, errlen);
	if (rc)
		return rc;
	total = t.rec.total;
	if (total > 0 && total <= CACHE_BYTES / sizeof(float) / ((uint64_t)a->dim + 1)) {
		t.cx = malloc((size_t)total * a->dim * sizeof(float));
		t.cy = malloc((size_t)total * sizeof(float));
		/* No room after all: make examples as they are needed. */
		if (!t.cx || !t.cy) {
			free(t.cx);
			free(t.cy);
			t.cx = t.cy = NULL;
		} else {
			for (uint64_t p = 0; p < total; p++)
				dml_lsq_example(a->seed, dml_records_at(&t.rec, p), a->w_true,
						a->dim, t.cx + p * a->dim, &t.cy[p]);
		}
	}
	source_clear(s);
	*s = t;
	return 0;
}

/* ---- the app ------------------------------------------------------------- */

/* err = "app lsq: " and the reason; returns rc. */
#define fail(err, errlen, rc, ...) dml_app_fail(err, errlen, rc, "lsq", __VA_ARGS__)

/*
 * What this app needs of a spec: the scheduler's check (proto/job_spec_check.c holds
 * the lsq rules: synthetic data, the loss metric, batches it can hold, w in
 * dense table 0), made again here for specs that did not come through it,
 * and a backend it runs on.
 */
static int lsq_check(const Dml__JobSpec *spec, const struct dml_app_env *env, char *err,
		     size_t errlen)
{
	if (!env || !env->backend || strcmp(env->backend, "cpu") != 0)
		return fail(err, errlen, DML_EINVAL, "backend '%s' is not supported "
			    "(only cpu)", env && env->backend ? env->backend : "");
	return dml_app_spec_check("lsq", spec, err, errlen);
}

static void lsq_destroy(void *state)
{
	struct lsq *a = state;

	if (!a)
		return;
	source_clear(&a->train);
	source_clear(&a->eval);
	dml_walk_clear(&a->walk);
	free(a->w_true);
	free(a->w);
	free(a->grad);
	free(a->x);
	free(a->y);
	free(a->r);
	free(a);
}

static int lsq_create(const Dml__JobSpec *spec, const struct dml_app_env *env, void **state,
		      char *err, size_t errlen)
{
	struct lsq *a;
	uint64_t eval_end;
	int rc;

	*state = NULL;
	if (!spec)
		return fail(err, errlen, DML_EINVAL, "no job spec");
	if ((rc = lsq_check(spec, env, err, errlen)) != 0)
		return rc;
	a = dml_xcalloc(1, sizeof(*a));
	a->seed = spec->seed;
	a->walk.key = spec->seed ^ STREAM_SHUFFLE;
	a->n = spec->examples;
	a->dim = spec->dim;
	a->batch = a->norm = a->cap = spec->batch_size;
	a->table = (struct dml_app_table){ .id = 0, .dense = 1, .width = 1, .keys = a->dim };
	a->w_true = malloc((size_t)a->dim * sizeof(float));
	a->w = malloc((size_t)a->dim * sizeof(float));
	a->grad = malloc((size_t)a->dim * sizeof(float));
	a->x = malloc((size_t)a->batch * a->dim * sizeof(float));
	a->y = malloc((size_t)a->batch * sizeof(float));
	a->r = malloc((size_t)a->batch * sizeof(float));
	if (!a->w_true || !a->w || !a->grad || !a->x || !a->y || !a->r) {
		lsq_destroy(a);
		return fail(err, errlen, DML_ENOMEM, "out of memory for dim %" PRIu32
			    " and batch_size %" PRIu32, spec->dim, spec->batch_size);
	}
	dml_lsq_true_weights(a->seed, a->dim, a->w_true);
	eval_end = a->n < EVAL_EXAMPLES ? a->n : EVAL_EXAMPLES;
	{
		static const uint32_t all = 0;
		char why[160];

		/* The first eval_end examples: the one partition of eval_end. */
		rc = source_build(a, &a->eval, eval_end, &all, 1, 1, why, sizeof(why));
	}
	if (rc) {
		lsq_destroy(a);
		return fail(err, errlen, rc, "out of memory for the evaluation set");
	}
	*state = a;
	return 0;
}

static size_t lsq_tables(const void *state, const struct dml_app_table **out)
{
	const struct lsq *a = state;

	*out = &a->table;
	return 1;
}

static int lsq_set_partitions(void *state, const uint32_t *parts, size_t n,
			      uint32_t num_partitions, char *err, size_t errlen)
{
	struct lsq *a = state;
	struct source t = { 0 };
	char why[160];
	int rc = source_build(a, &t, a->n, parts, n, num_partitions, why, sizeof(why));

	if (rc)
		return fail(err, errlen, rc, "%s", why);
	/* the walk's places among the held records are the source's */
	if ((rc = dml_walk_set(&a->walk, "lsq", a->n, parts, n, num_partitions, err, errlen))) {
		source_clear(&t);
		return rc;
	}
	source_clear(&a->train);
	a->train = t;
	return 0;
}

static struct dml_walk *lsq_walk(void *state)
{
	return &((struct lsq *)state)->walk;
}

/* Pull w into a->w; the batch's rows records are made while it travels. */
static int pull_w(struct lsq *a, struct dml_app_io *io, size_t rows, char *err,
		  size_t errlen)
{
	dml_handle_t h;
	int rc = io->ops->pull_range(io->arg, 0, 0, a->dim, a->w, &h), rc2;

	if (rc) {
		snprintf(err, errlen, "pull of table 0: %s", dml_strerror(rc));
		return rc;
	}
	if (rows && !dml_walk_batch(&a->walk, rows))
		rc = fail(err, errlen, DML_ENOMEM, "out of memory for a batch");
	else if (rows)
		source_fill(a, &a->train, a->walk.slots, 0, rows, a->x, a->y);
	/* the pull is waited for even after a failure: its buffer is a->w */
	if ((rc2 = dml_app_wait(io, h)) != 0 && !rc) {
		snprintf(err, errlen, "pull of table 0: %s", dml_strerror(rc2));
		rc = rc2;
	}
	return rc;
}

static int lsq_step(void *state, struct dml_app_io *io, struct dml_app_step *out, char *err,
		    size_t errlen)
{
	struct lsq *a = state;
	size_t rows = a->walk.total ? a->batch : 0;
	dml_handle_t h;
	int rc;

	out->examples = 0;
	out->loss = NAN;
	/* Even without data, pull: it keeps this worker within the staleness
	 * bound instead of racing through its clocks. */
	if ((rc = pull_w(a, io, rows, err, errlen)) != 0 || rows == 0)
		return rc;
	dml_walk_advance(&a->walk);
	out->loss = dml_lsq_loss_grad(a->x, a->y, rows, a->dim, a->w, a->grad, a->r);
	out->examples = rows;
	if (rows != a->norm)
		for (uint32_t j = 0; j < a->dim; j++)
			a->grad[j] *= (float)rows / (float)a->norm;
	rc = io->ops->push_range(io->arg, 0, 0, a->dim, a->grad, &h);
	if (rc == 0)
		rc = dml_app_wait(io, h);
	if (rc)
		snprintf(err, errlen, "push to table 0: %s", dml_strerror(rc));
	return rc;
}

/* Rows beyond what x, y and r hold make them grow; they never shrink. */
static int lsq_set_batch(void *state, uint32_t batch, char *err, size_t errlen)
{
	struct lsq *a = state;

	if (batch > a->cap) {
		float *x = realloc(a->x, (size_t)batch * a->dim * sizeof(float));
		float *y = x ? realloc(a->y, (size_t)batch * sizeof(float)) : NULL;
		float *r = y ? realloc(a->r, (size_t)batch * sizeof(float)) : NULL;

		/* each buffer that moved is the state's now, grown or not */
		a->x = x ? x : a->x;
		a->y = y ? y : a->y;
		a->r = r ? r : a->r;
		if (!r)
			return fail(err, errlen, DML_ENOMEM, "out of memory for a batch of %"
				    PRIu32 " examples of dim %" PRIu32, batch, a->dim);
		a->cap = batch;
	}
	a->batch = batch;
	return 0;
}

static int lsq_evaluate(void *state, struct dml_app_io *io, double *value, char *err,
			size_t errlen)
{
	struct lsq *a = state;
	double sum = 0;
	int rc;

	if ((rc = pull_w(a, io, 0, err, errlen)) != 0)
		return rc;
	for (uint64_t pos = 0; pos < a->eval.rec.total; pos += a->batch) {
		size_t rows = (size_t)(a->eval.rec.total - pos < a->batch ? a->eval.rec.total - pos :
				       a->batch);

		source_fill(a, &a->eval, NULL, pos, rows, a->x, a->y);
		sum += dml_lsq_loss_grad(a->x, a->y, rows, a->dim, a->w, NULL, a->r) *
		       (double)rows;
	}
	*value = sum / (double)a->eval.rec.total;
	return 0;
}

/* Its step waits for its push: nothing is ever left in flight. */
static int lsq_drain(void *state, struct dml_app_io *io, char *err, size_t errlen)
{
	return 0;
}

static uint64_t lsq_data_examples(const void *state)
{
	return ((const struct lsq *)state)->n;
}

const struct dml_app dml_app_lsq = {
	.name = "lsq",
	.metric = "loss",
	.default_eval_every = DEFAULT_EVAL_EVERY,
	.profile_job = "[job]\nname = profile\napp = lsq\ndata = synthetic\nmax_clocks = 1\n"
		       "[table]\nid = 0\nkind = dense\nwidth = 1\nkeys = 64\n",
	.create = lsq_create,
	.tables = lsq_tables,
	.set_partitions = lsq_set_partitions,
	.walk = lsq_walk,
	.set_batch = lsq_set_batch,
	.step = lsq_step,
	.evaluate = lsq_evaluate,
	.drain = lsq_drain,
	.data_examples = lsq_data_examples,
	.destroy = lsq_destroy,
};
