/*
 * app_test.c - what the unit tests of apps share (see app_test.h): job specs
 * parsed from text, an io over fixed dense tables that records pushes, and
 * one over sparse tables that keeps pushes in flight until waited for.
 *
 * Must never touch a buffer outside the table a request names: every range
 * is checked against the app's own table list first.
 */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test/app_test.h"
#include "proto/dml_error.h"

Dml__JobSpec *app_test_spec(const char *text)
{
	Dml__JobSpec *spec = NULL;
	char err[512];

	ck_assert_msg(dml_job_file_parse_string("job", text, &spec, err, sizeof(err)) == 0,
		      "job text: %s", err);
	return spec;
}

const struct dml_app_env app_test_cpu = { "cpu", NULL, NULL };

void *app_test_make(const struct dml_app *app, const Dml__JobSpec *spec,
		    const struct dml_app_env *env)
{
	static const uint32_t all = 0;
	char err[1024] = "";
	void *state = NULL;

	ck_assert_msg(app->create(spec, env, &state, err, sizeof(err)) == 0, "%s", err);
	ck_assert_int_eq(app->set_partitions(state, &all, 1, 1, err, sizeof(err)), 0);
	return state;
}

void app_test_refused(const struct dml_app *app, const Dml__JobSpec *spec,
		      const struct dml_app_env *env, int code, const char *why)
{
	char err[1024] = "", prefix[64];
	void *state = (void *)1;

	snprintf(prefix, sizeof(prefix), "app %s: ", app->name);
	ck_assert_int_eq(app->create(spec, env, &state, err, sizeof(err)), code);
	ck_assert_ptr_null(state);
	ck_assert_msg(strncmp(err, prefix, strlen(prefix)) == 0 && strstr(err, why) != NULL,
		      "expected '%s%s', got '%s'", prefix, why, err);
}

/* The index of table id, whose keys [begin, end) a request names. */
static size_t app_test_table(struct app_test_io *f, uint32_t id, uint64_t begin,
			     uint64_t end)
{
	for (size_t i = 0; i < f->nt; i++)
		if (f->t[i].id == id) {
			ck_assert(f->t[i].dense && begin <= end && end <= f->t[i].keys);
			return i;
		}
	ck_abort_msg("table %u is not one of the app's", id);
	return 0;
}

static int app_test_pull_range(void *arg, uint32_t table, uint64_t begin, uint64_t end,
			       float *out, dml_handle_t *h)
{
	struct app_test_io *f = arg;
	size_t i = app_test_table(f, table, begin, end), w = f->t[i].width;

	memcpy(out, f->params[i] + begin * w, (size_t)(end - begin) * w * sizeof(float));
	f->pulls++;
	*h = ++f->next;
	return 0;
}

static int app_test_push_range(void *arg, uint32_t table, uint64_t begin, uint64_t end,
			       const float *vals, dml_handle_t *h)
{
	struct app_test_io *f = arg;
	size_t i = app_test_table(f, table, begin, end), w = f->t[i].width;

	memcpy(f->grads[i] + begin * w, vals, (size_t)(end - begin) * w * sizeof(float));
	f->pushes++;
	f->table_pushes[i]++;
	*h = ++f->next;
	return 0;
}

static int app_test_pull(void *arg, uint32_t table, const uint64_t *keys, size_t n,
			 float *out, dml_handle_t *h)
{
	return DML_EINVAL;
}

static int app_test_push(void *arg, uint32_t table, const uint64_t *keys, size_t n,
			 const float *vals, dml_handle_t *h)
{
	return DML_EINVAL;
}

static int app_test_wait(void *arg, dml_handle_t h)
{
	struct app_test_io *f = arg;

	return h >= 1 && h <= f->next ? 0 : DML_EINVAL;
}

static const struct dml_app_io_ops app_test_ops = {
	app_test_pull_range, app_test_push_range, app_test_pull, app_test_push,
	app_test_wait
};

void app_test_io_init(struct app_test_io *f, const struct dml_app *app, void *state,
		      struct dml_app_io *io)
{
	memset(f, 0, sizeof(*f));
	f->nt = app->tables(state, &f->t);
	ck_assert_uint_le(f->nt, APP_TEST_MAX_TABLES);
	*io = (struct dml_app_io){ &app_test_ops, f, 0 };
}

/* ---- sparse tables ---------------------------------------------------------- */

void app_test_sparse_init(struct app_test_sparse *t, size_t ntables, uint64_t ids,
			  uint32_t width)
{
	ck_assert(ntables >= 1 && ntables <= APP_TEST_SPARSE_TABLES && ids >= 1);
	memset(t, 0, sizeof(*t));
	t->ntables = ntables;
	t->ids = ids;
	for (size_t i = 0; i < ntables; i++) {
		t->width[i] = width;
		t->p[i] = calloc((size_t)ids * width, sizeof(float));
		t->pushed_keys[i] = calloc((size_t)ids, sizeof(uint64_t));
		t->pushed[i] = calloc((size_t)ids * width, sizeof(float));
		ck_assert(t->p[i] && t->pushed_keys[i] && t->pushed[i]);
	}
}

void app_test_sparse_free(struct app_test_sparse *t)
{
	for (size_t i = 0; i < t->ntables; i++) {
		free(t->p[i]);
		free(t->pushed_keys[i]);
		free(t->pushed[i]);
	}
	memset(t, 0, sizeof(*t));
}

/* Keys as an app must send them: sorted, distinct, below ids (the bias in). */
static void sparse_keys_check(const struct app_test_sparse *t, uint32_t table,
			      const uint64_t *keys, size_t n)
{
	ck_assert_uint_lt(table, t->ntables);
	ck_assert(n >= 1 && n <= t->ids);
	for (size_t i = 0; i < n; i++) {
		ck_assert_uint_lt(keys[i], t->ids);
		if (i)
			ck_assert_uint_gt(keys[i], keys[i - 1]);
	}
	if (t->bias_last)
		ck_assert_uint_eq(keys[n - 1], t->ids - 1);
}

static dml_handle_t sparse_handle(struct app_test_sparse *t, int push)
{
	ck_assert_uint_lt(t->next + 1, APP_TEST_SPARSE_MAX_REQ);
	t->next++;
	t->is_push[t->next] = (char)push;
	t->in_flight++;
	return t->next;
}

static int sparse_pull(void *arg, uint32_t table, const uint64_t *keys, size_t n, float *out,
		       dml_handle_t *h)
{
	struct app_test_sparse *t = arg;
	size_t w;

	sparse_keys_check(t, table, keys, n);
	if (t->fail_pull & (1u << table))
		return DML_ECONN;
	w = t->width[table];
	for (size_t i = 0; i < n; i++)
		memcpy(out + i * w, t->p[table] + keys[i] * w, w * sizeof(float));
	t->npulled[table] = n;
	t->pulls++;
	*h = sparse_handle(t, 0);
	return 0;
}

static int sparse_push(void *arg, uint32_t table, const uint64_t *keys, size_t n,
		       const float *vals, dml_handle_t *h)
{
	struct app_test_sparse *t = arg;

	sparse_keys_check(t, table, keys, n);
	if (t->fail_push & (1u << table))
		return DML_ETIMEDOUT;
	memcpy(t->pushed_keys[table], keys, n * sizeof(uint64_t));
	memcpy(t->pushed[table], vals, n * t->width[table] * sizeof(float));
	t->npushed[table] = n;
	t->pushes++;
	*h = sparse_handle(t, 1);
	return 0;
}

static int sparse_pull_range(void *arg, uint32_t table, uint64_t begin, uint64_t end,
			     float *out, dml_handle_t *h)
{
	ck_abort_msg("an app on sparse tables asks for keys, never ranges");
	return DML_EINVAL;
}

static int sparse_push_range(void *arg, uint32_t table, uint64_t begin, uint64_t end,
			     const float *vals, dml_handle_t *h)
{
	ck_abort_msg("an app on sparse tables pushes keys, never ranges");
	return DML_EINVAL;
}

static int sparse_wait(void *arg, dml_handle_t h)
{
	struct app_test_sparse *t = arg;

	ck_assert(h >= 1 && h <= t->next);
	t->in_flight--;
	ck_assert_int_ge(t->in_flight, 0);
	return t->is_push[h] && t->fail_push_wait ? DML_ECONN : 0;
}

static const struct dml_app_io_ops sparse_ops = {
	sparse_pull_range, sparse_push_range, sparse_pull, sparse_push, sparse_wait
};

struct dml_app_io app_test_sparse_io(struct app_test_sparse *t)
{
	return (struct dml_app_io){ &sparse_ops, t, 0 };
}

double app_test_sparse_step(const struct dml_app *app, void *state, struct app_test_sparse *t,
			    uint64_t rows)
{
	struct dml_app_io io = app_test_sparse_io(t);
	struct dml_app_step st;
	char err[256] = "";

	ck_assert_msg(app->step(state, &io, &st, err, sizeof(err)) == 0, "step: %s", err);
	ck_assert_int_le(t->in_flight, (int)t->ntables);
	ck_assert_msg(app->drain(state, &io, err, sizeof(err)) == 0, "drain: %s", err);
	ck_assert_int_eq(t->in_flight, 0);
	ck_assert_uint_eq(st.examples, rows);
	return st.loss;
}

double app_test_sparse_evaluate(const struct dml_app *app, void *state,
				struct app_test_sparse *t)
{
	struct dml_app_io io = app_test_sparse_io(t);
	char err[256] = "";
	double v = NAN;

	ck_assert_msg(app->evaluate(state, &io, &v, err, sizeof(err)) == 0, "evaluate: %s",
		      err);
	ck_assert_int_eq(t->in_flight, 0);
	return v;
}
