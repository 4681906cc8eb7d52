/*
 * app_test.c - what the unit tests of apps share (see app_test.h): job specs
 * parsed from text, and an io over fixed dense tables that records pushes.
 *
 * Must never touch a buffer outside the table a request names: every range
 * is checked against the app's own table list first.
 */
#include <check.h>
#include <string.h>

#include "app_test.h"
#include "dml_error.h"

Dml__JobSpec *app_test_spec(const char *text)
{
	Dml__JobSpec *spec = NULL;
	char err[512];

	ck_assert_msg(dml_job_file_parse_string("job", text, &spec, err, sizeof(err)) == 0,
		      "job text: %s", err);
	return spec;
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
