/*
 * check_mlp_util.c - what the files of check_mlp share: numbers from a
 * fixed sequence, a cpu backend context, mlp specs, and a recording io
 * (pulls serve fixed parameters, pushes are kept) with steps and
 * evaluations that must succeed.
 */
#define _GNU_SOURCE
#include <check.h>
#include <inttypes.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "worker/app.h"
#include "test/app_test.h"
#include "worker/backend.h"
#include "test/check_mlp.h"
#include "test/check_run.h"
#include "worker/data_idx.h"
#include "proto/dml_error.h"
#include "proto/job_spec.h"
#include "test/tmpdir.h"

/* ---- helpers ------------------------------------------------------------- */

static uint64_t g_rng = 1;

/* Uniform in [lo, hi), from a fixed sequence (splitmix64). */
float rnd(float lo, float hi)
{
	uint64_t z = (g_rng += UINT64_C(0x9e3779b97f4a7c15));

	z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
	z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
	z ^= z >> 31;
	return lo + (hi - lo) * (float)((double)(z >> 40) / 16777216.0);
}

float *floats(size_t n)
{
	float *p = malloc((n ? n : 1) * sizeof(float));

	ck_assert_ptr_nonnull(p);
	return p;
}

/* A cpu backend context on one thread (results do not depend on timing). */
void *cpu_open(void)
{
	struct dml_backend_conf conf = { .threads = 1 };
	void *ctx = NULL;
	char err[128];

	ck_assert_int_eq(dml_backend_cpu.open(&conf, &ctx, err, sizeof(err)), 0);
	ck_assert_ptr_nonnull(ctx);
	ck_assert_str_eq(dml_backend_cpu.error(ctx), "");
	return ctx;
}

/*
 * An mlp job: sizes[0] = dim, then the hidden layers, then the classes (n
 * sizes); a table per layer as the app wants it; extra job lines after.
 */
Dml__JobSpec *spec_make(const uint32_t *sizes, size_t n, const char *data,
			const char *extra)
{
	char text[4096], hidden[128] = "";
	size_t len = 0, hl = 0;

	for (size_t l = 1; l + 1 < n; l++)
		hl += (size_t)snprintf(hidden + hl, sizeof(hidden) - hl, "%s%u", l > 1 ? "," : "",
				       sizes[l]);
	len += (size_t)snprintf(text, sizeof(text), "[job]\nname = t\napp = mlp\nmax_clocks = "
				"10\ndim = %u\ndata = %s\n%s%s%s%s", sizes[0], data,
				hl ? "hidden = " : "", hidden, hl ? "\n" : "", extra);
	for (size_t l = 0; l + 1 < n; l++)
		len += (size_t)snprintf(text + len, sizeof(text) - len, "[table]\nid = %zu\n"
					"kind = dense\nkeys = %u\nwidth = %u\n", l, sizes[l + 1],
					sizes[l] + 1);
	ck_assert_uint_lt(len, sizeof(text));
	return app_test_spec(text);
}

void tio_init(struct tio *t, const struct dml_app *app, const void *state)
{
	const struct dml_app_table *tab;

	memset(t, 0, sizeof(*t));
	t->ntables = app->tables(state, &tab);
	ck_assert_uint_le(t->ntables, TABLES);
	for (size_t i = 0; i < t->ntables; i++) {
		ck_assert_uint_eq(tab[i].id, i);
		ck_assert(tab[i].dense);
		t->len[i] = (size_t)tab[i].keys * tab[i].width;
		t->w[i] = calloc(t->len[i], sizeof(float));
		t->g[i] = calloc(t->len[i], sizeof(float));
		ck_assert(t->w[i] && t->g[i]);
	}
}

void tio_free(struct tio *t)
{
	for (size_t i = 0; i < t->ntables; i++) {
		free(t->w[i]);
		free(t->g[i]);
	}
}

/* ---- a recording io ------------------------------------------------------ */

/* The table's floats for keys [begin, end): the whole table, always here. */
static size_t tio_range(struct tio *t, uint32_t table, uint64_t begin, uint64_t end)
{
	ck_assert_uint_lt(table, t->ntables);
	ck_assert_uint_eq(begin, 0);
	ck_assert_uint_eq(t->len[table] % end, 0);
	return t->len[table];
}

static int tio_pull_range(void *arg, uint32_t table, uint64_t begin, uint64_t end,
			  float *out, dml_handle_t *h)
{
	struct tio *t = arg;
	size_t n = tio_range(t, table, begin, end);

	if (t->fail_pull == (int)table + 1)
		return DML_ECONN;
	memcpy(out, t->w[table], n * sizeof(float));
	t->pulls++;
	t->in_flight++;
	*h = 1 + table;
	return 0;
}

static int tio_push_range(void *arg, uint32_t table, uint64_t begin, uint64_t end,
			  const float *vals, dml_handle_t *h)
{
	struct tio *t = arg;
	size_t n = tio_range(t, table, begin, end);

	if (t->fail_push == (int)table + 1)
		return DML_ETIMEDOUT;
	memcpy(t->g[table], vals, n * sizeof(float));
	for (size_t i = 0; t->lr > 0 && i < n; i++)
		t->w[table][i] -= t->lr * vals[i];
	t->pushed_from[table] = vals;
	t->pushes++;
	t->in_flight++;
	*h = 101 + table;
	return 0;
}

static int tio_pull(void *arg, uint32_t table, const uint64_t *keys, size_t n, float *out,
		    dml_handle_t *h)
{
	ck_abort_msg("the mlp pulls ranges only");
	return DML_EINVAL;
}

static int tio_push(void *arg, uint32_t table, const uint64_t *keys, size_t n,
		    const float *vals, dml_handle_t *h)
{
	ck_abort_msg("the mlp pushes ranges only");
	return DML_EINVAL;
}

static int tio_wait(void *arg, dml_handle_t h)
{
	struct tio *t = arg;

	ck_assert(h >= 1 && h <= 100 + TABLES);
	t->in_flight--;
	ck_assert_int_ge(t->in_flight, 0);
	return t->fail_wait && (int)h == t->fail_wait ? DML_ECONN : 0;
}

const struct dml_app_io_ops tio_ops = {
	tio_pull_range, tio_push_range, tio_pull, tio_push, tio_wait
};

/*
 * One step that must succeed, leaving no pull in flight and at most its
 * pushes (one per table), then drained; its loss.
 */
double step_ok(const struct dml_app *app, void *state, struct tio *t, size_t rows)
{
	struct dml_app_io io = { &tio_ops, t, 0 };
	struct dml_app_step st;
	char err[256] = "";

	ck_assert_msg(app->step(state, &io, &st, err, sizeof(err)) == 0, "step: %s", err);
	ck_assert_int_le(t->in_flight, (int)t->ntables);
	ck_assert_msg(app->drain(state, &io, err, sizeof(err)) == 0, "drain: %s", err);
	ck_assert_int_eq(t->in_flight, 0);
	ck_assert_uint_eq(st.examples, rows);
	return st.loss;
}

double evaluate_ok(const struct dml_app *app, void *state, struct tio *t)
{
	struct dml_app_io io = { &tio_ops, t, 0 };
	char err[256] = "";
	double v = NAN;

	ck_assert_msg(app->evaluate(state, &io, &v, err, sizeof(err)) == 0, "evaluate: %s",
		      err);
	ck_assert_int_eq(t->in_flight, 0);
	return v;
}

void fill_params(struct tio *t, float scale)
{
	for (size_t i = 0; i < t->ntables; i++)
		for (size_t j = 0; j < t->len[i]; j++)
			t->w[i][j] = rnd(-scale, scale);
}

void expect_refused(const Dml__JobSpec *spec, const struct dml_app_env *env,
		    int code, const char *why)
{
	app_test_refused(&dml_app_mlp, spec, env, code, why);
}
