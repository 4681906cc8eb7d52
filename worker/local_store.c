/*
 * The local parameter store (local_store.h): a job's tables in this
 * process, and an io over them that answers like libdml talking to
 * dml-server, so an app cannot tell the difference except by speed.
 *
 * Must never: apply a gradient differently from a server (the same
 * dml_table code does it), or answer a request libdml would refuse.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proto/dml_error.h"
#include "proto/job_spec.h"
#include "worker/local_store.h"
#include "store/table.h"
#include "proto/table_spec.h"
#include "proto/util.h"

/* Rows per staging chunk when setting values (bounds the extra memory). */
#define SET_CHUNK_ROWS 4096u

struct store_table {
	uint32_t id;
	int dense;
	uint32_t width;
	uint64_t keys;              /* dense: key count */
	struct dml_table *t;
};

/* A handle not waited for yet, with its request's result. */
struct pending {
	dml_handle_t h;
	int rc;
};

struct dml_local_store {
	Dml__JobSpec *spec;
	struct store_table *tables;
	size_t ntables;
	struct pending *pending;
	size_t npending, cap;
	dml_handle_t last;          /* the last handle given out */
};

static struct store_table *table_find(const struct dml_local_store *s, uint32_t id)
{
	for (size_t i = 0; i < s->ntables; i++)
		if (s->tables[i].id == id)
			return &s->tables[i];
	return NULL;
}

void dml_local_store_free(struct dml_local_store *s)
{
	if (!s)
		return;
	for (size_t i = 0; i < s->ntables; i++)
		dml_table_free(s->tables[i].t);
	free(s->tables);
	free(s->pending);
	dml_job_spec_free(s->spec);
	free(s);
}

/* Table i of the store from its spec. */
static int table_make(struct dml_local_store *s, const Dml__TableSpec *ts, char *err,
		      size_t errlen)
{
	struct store_table *st = &s->tables[s->ntables];
	struct dml_table_conf tc;
	int rc;

	if (table_find(s, ts->id))
		return dml_fail(DML_EINVAL, err, errlen, "table %" PRIu32 " appears twice",
				ts->id);
	if ((rc = dml_table_conf_from_spec(ts, &tc, err, errlen)) != 0)
		return rc;
	if (ts->dense)
		tc.key_end = ts->keys;
	else
		tc.capacity_hint = ts->capacity;
	if ((rc = dml_table_new(&tc, &st->t)) != 0)
		return dml_fail(rc, err, errlen, "table %" PRIu32 ": %s (%" PRIu64 " keys x %"
				PRIu32 " floats)", ts->id, dml_strerror(rc), ts->keys,
				ts->width);
	st->id = ts->id;
	st->dense = ts->dense;
	st->width = ts->width;
	st->keys = ts->keys;
	s->ntables++;
	return 0;
}

int dml_local_store_new(const Dml__JobSpec *spec, struct dml_local_store **out,
			char *err, size_t errlen)
{
	struct dml_local_store *s;
	int rc = 0;

	*out = NULL;
	if (!spec || (spec->n_tables && !spec->tables))
		return dml_fail(DML_EINVAL, err, errlen, "no job spec");
	s = dml_xcalloc(1, sizeof(*s));
	s->spec = dml_job_spec_copy(spec);
	s->tables = dml_xcalloc(spec->n_tables ? spec->n_tables : 1, sizeof(*s->tables));
	for (size_t i = 0; rc == 0 && i < spec->n_tables; i++) {
		if (!spec->tables[i])
			rc = dml_fail(DML_EINVAL, err, errlen, "table #%zu is missing",
				      i + 1);
		else
			rc = table_make(s, spec->tables[i], err, errlen);
	}
	if (rc) {
		dml_local_store_free(s);
		return rc;
	}
	*out = s;
	return 0;
}

/* ---- the io -------------------------------------------------------------- */

/*
 * Hand out a handle for a request that already ran with result rc. A push
 * without a handle (h NULL, allowed by libdml) drops its result, as libdml
 * does.
 */
static int issue(struct dml_local_store *s, int rc, dml_handle_t *h)
{
	if (!h)
		return 0;
	if (s->npending == s->cap) {
		s->cap = s->cap ? 2 * s->cap : 16;
		s->pending = dml_xrealloc(s->pending, s->cap * sizeof(*s->pending));
	}
	*h = ++s->last;
	s->pending[s->npending++] = (struct pending){ *h, rc };
	return 0;
}

/* The checks libdml's range calls make before sending anything. */
static int range_table(struct dml_local_store *s, uint32_t table, uint64_t begin,
		       uint64_t end, struct store_table **out)
{
	struct store_table *st = table_find(s, table);

	if (!st)
		return DML_ENOTFOUND;
	if (!st->dense)
		return DML_EINVAL;
	if (begin >= end || end > st->keys)
		return DML_ERANGE;
	*out = st;
	return 0;
}

/* The same for key lists. */
static int keys_table(struct dml_local_store *s, uint32_t table, const uint64_t *keys,
		      size_t n, struct store_table **out)
{
	struct store_table *st = table_find(s, table);

	if (!st)
		return DML_ENOTFOUND;
	if (n == 0 || n > UINT32_MAX || !keys)
		return DML_EINVAL;
	*out = st;
	return 0;
}

static int io_pull_range(void *arg, uint32_t table, uint64_t begin, uint64_t end,
			 float *out, dml_handle_t *h)
{
	struct store_table *st;
	int rc;

	if (!out || !h)
		return DML_EINVAL;
	if ((rc = range_table(arg, table, begin, end, &st)) != 0)
		return rc;
	return issue(arg, dml_table_pull_range(st->t, begin, end, out), h);
}

static int io_push_range(void *arg, uint32_t table, uint64_t begin, uint64_t end,
			 const float *vals, dml_handle_t *h)
{
	struct store_table *st;
	int rc;

	if (!vals)
		return DML_EINVAL;
	if ((rc = range_table(arg, table, begin, end, &st)) != 0)
		return rc;
	return issue(arg, dml_table_push_range(st->t, begin, end, vals), h);
}

static int io_pull(void *arg, uint32_t table, const uint64_t *keys, size_t n, float *out,
		   dml_handle_t *h)
{
	struct store_table *st;
	int rc;

	if (!out || !h)
		return DML_EINVAL;
	if ((rc = keys_table(arg, table, keys, n, &st)) != 0)
		return rc;
	return issue(arg, dml_table_pull_keys(st->t, keys, n, out), h);
}

static int io_push(void *arg, uint32_t table, const uint64_t *keys, size_t n,
		   const float *vals, dml_handle_t *h)
{
	struct store_table *st;
	int rc;

	if (!vals)
		return DML_EINVAL;
	if ((rc = keys_table(arg, table, keys, n, &st)) != 0)
		return rc;
	return issue(arg, dml_table_push_keys(st->t, keys, n, vals), h);
}

static int io_wait(void *arg, dml_handle_t h)
{
	struct dml_local_store *s = arg;

	if (h == 0)
		return 0;
	for (size_t i = 0; i < s->npending; i++) {
		if (s->pending[i].h == h) {
			int rc = s->pending[i].rc;

			s->pending[i] = s->pending[--s->npending];
			return rc;
		}
	}
	return DML_ENOTFOUND;
}

static const struct dml_app_io_ops store_io_ops = {
	.pull_range = io_pull_range,
	.push_range = io_push_range,
	.pull = io_pull,
	.push = io_push,
	.wait = io_wait,
};

void dml_local_store_io(struct dml_local_store *s, struct dml_app_io *io)
{
	*io = (struct dml_app_io){ .ops = &store_io_ops, .arg = s, .wait_ns = 0 };
}

/* ---- values in and out --------------------------------------------------- */

static int dense_table(struct dml_local_store *s, uint32_t table, const void *buf,
		       struct store_table **out)
{
	struct store_table *st = s ? table_find(s, table) : NULL;

	if (!s || !buf)
		return DML_EINVAL;
	if (!st)
		return DML_ENOTFOUND;
	if (!st->dense)
		return DML_EINVAL;
	*out = st;
	return 0;
}

int dml_local_store_get(struct dml_local_store *s, uint32_t table, float *out)
{
	struct store_table *st;
	int rc = dense_table(s, table, out, &st);

	return rc ? rc : dml_table_pull_range(st->t, 0, st->keys, out);
}

/*
 * Set n rows of st from vals (width floats each): rows [first, first + n)
 * of a dense table when keys is NULL, else the rows of keys. Rows are
 * imported with zero optimizer state, staged in chunks. A dense table is
 * checked whole first, so nothing changes on DML_ERANGE; the staging
 * buffer is allocated before anything is written.
 */
static int rows_set(struct store_table *st, uint64_t first, const uint64_t *keys, size_t n,
		    const float *vals)
{
	size_t rf = dml_table_row_floats(st->t);
	size_t chunk = n < SET_CHUNK_ROWS ? n : SET_CHUNK_ROWS;
	float *rows;
	int rc = 0;

	if (keys && st->dense)
		for (size_t i = 0; i < n; i++)
			if (keys[i] >= st->keys)
				return DML_ERANGE;
	if (n == 0)
		return 0;
	if (!(rows = calloc(chunk * rf, sizeof(float))))
		return DML_ENOMEM;
	for (size_t done = 0; rc == 0 && done < n; done += chunk) {
		size_t m = n - done < chunk ? n - done : chunk;

		for (size_t i = 0; i < m; i++)
			memcpy(rows + i * rf, vals + (done + i) * st->width,
			       st->width * sizeof(float));
		if (keys)
			rc = dml_table_import_keys(st->t, keys + done, m, rows);
		else
			rc = dml_table_import_range(st->t, first + done, first + done + m,
						    rows);
	}
	free(rows);
	return rc;
}

int dml_local_store_set(struct dml_local_store *s, uint32_t table, const float *vals)
{
	struct store_table *st;
	int rc = dense_table(s, table, vals, &st);

	if (rc)
		return rc;
	if (st->keys > SIZE_MAX)
		return DML_ENOMEM;
	return rows_set(st, 0, NULL, (size_t)st->keys, vals);
}

int dml_local_store_set_keys(struct dml_local_store *s, uint32_t table,
			     const uint64_t *keys, size_t n, const float *vals)
{
	struct store_table *st;

	if (!s || (n && (!keys || !vals)))
		return DML_EINVAL;
	if (!(st = table_find(s, table)))
		return DML_ENOTFOUND;
	return rows_set(st, 0, keys, n, vals);
}

int dml_local_store_load_model(struct dml_local_store *s, const struct dml_model *m,
			       char *err, size_t errlen)
{
	for (size_t i = 0; i < m->ntables; i++) {
		const struct dml_model_table *mt = &m->tables[i];
		struct store_table *st = table_find(s, mt->id);
		int rc;

		if (!st)
			return dml_fail(DML_EINVAL, err, errlen, "model table %" PRIu32
					": not a table of the job", mt->id);
		if (!st->dense != !mt->dense || st->width != mt->width ||
		    (st->dense && st->keys != mt->rows))
			return dml_fail(DML_EINVAL, err, errlen, "model table %" PRIu32
					": %s, %" PRIu64 " rows of width %" PRIu32
					" do not fit the job's table (%s, width %" PRIu32 ")",
					mt->id, mt->dense ? "dense" : "sparse", mt->rows,
					mt->width, st->dense ? "dense" : "sparse", st->width);
		if (mt->rows > SIZE_MAX)
			return dml_fail(DML_ENOMEM, err, errlen, "model table %" PRIu32
					": too many rows", mt->id);
		rc = rows_set(st, 0, mt->dense ? NULL : mt->keys, (size_t)mt->rows,
			      mt->values);
		if (rc)
			return dml_fail(rc, err, errlen, "model table %" PRIu32 ": %s",
					mt->id, dml_strerror(rc));
	}
	return 0;
}

/* ---- the store as a model ------------------------------------------------ */

struct row_copy {
	struct dml_model_table *mt;
	uint64_t next;
};

static int row_copy(uint64_t key, const float *values, void *arg)
{
	struct row_copy *c = arg;

	if (c->mt->keys)
		c->mt->keys[c->next] = key;
	memcpy(c->mt->values + c->next * c->mt->width, values,
	       c->mt->width * sizeof(float));
	c->next++;
	return 0;
}

static int table_save(const struct store_table *st, struct dml_model_table *mt)
{
	uint64_t rows = dml_table_rows(st->t);
	struct row_copy c = { mt, 0 };

	*mt = (struct dml_model_table){ .id = st->id, .width = st->width, .dense = st->dense,
					.rows = rows };
	if (rows > SIZE_MAX / sizeof(float) / st->width)
		return DML_ENOMEM;
	mt->values = malloc(rows ? (size_t)rows * st->width * sizeof(float) : 1);
	if (!st->dense)
		mt->keys = malloc(rows ? (size_t)rows * sizeof(uint64_t) : 1);
	if (!mt->values || (!st->dense && !mt->keys))
		return DML_ENOMEM;
	return dml_table_foreach(st->t, row_copy, &c);
}

int dml_local_store_save_model(const struct dml_local_store *s, struct dml_model *m)
{
	int rc = 0;

	memset(m, 0, sizeof(*m));
	m->spec = dml_job_spec_copy(s->spec);
	m->tables = dml_xcalloc(s->ntables ? s->ntables : 1, sizeof(*m->tables));
	for (size_t i = 0; rc == 0 && i < s->ntables; i++, m->ntables++)
		rc = table_save(&s->tables[i], &m->tables[i]);
	if (rc)
		dml_model_free(m);
	return rc;
}
