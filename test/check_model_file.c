/*
 * check_model_file.c - check_model's tests of model files and of
 * `dml-worker --eval`: a round trip (spec included), the writer's
 * refusals, and the reader's code and "path: reason" for I/O errors,
 * every truncation, every byte flip and crafted lengths, without crashing
 * or allocating from them; the built dml-worker evaluating a model.
 */
#include <check.h>
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zlib.h>

#include "worker/app.h"
#include "test/check_model.h"
#include "test/check_run.h"
#include "proto/dml_error.h"
#include "proto/job_spec.h"
#include "worker/local_store.h"
#include "worker/model_file.h"
#include "store/table.h"
#include "proto/table_spec.h"
#include "test/tmpdir.h"
#include "proto/util.h"

/* ---- model files --------------------------------------------------------- */

/* The store job's model, after some training and sparse rows made. */
static void model_of_store_job(struct dml_model *m)
{
	Dml__JobSpec *spec = spec_parse(store_job);
	struct dml_local_store *s = store_make(spec);
	static const uint64_t keys[] = { 17, 3 };
	float g[8], v[6];
	struct dml_app_io io;

	for (int i = 0; i < 8; i++)
		g[i] = (float)i;
	dml_local_store_io(s, &io);
	ck_assert_int_eq(push_range(&io, 0, 0, 8, g), 0);
	ck_assert_int_eq(pull_keys(&io, 5, keys, 2, v), 0);
	ck_assert_int_eq(push_keys(&io, 5, keys, 2, g), 0);
	ck_assert_int_eq(dml_local_store_save_model(s, m), 0);
	dml_local_store_free(s);
	dml_job_spec_free(spec);
}

static size_t spec_bytes(const Dml__JobSpec *spec, uint8_t **out)
{
	size_t n = dml__job_spec__get_packed_size(spec);

	*out = dml_xmalloc(n ? n : 1);
	dml__job_spec__pack(spec, *out);
	return n;
}

static void expect_same_model(const struct dml_model *a, const struct dml_model *b)
{
	uint8_t *x, *y;
	size_t nx = spec_bytes(a->spec, &x), ny = spec_bytes(b->spec, &y);

	ck_assert_uint_eq(nx, ny);
	ck_assert_int_eq(memcmp(x, y, nx), 0);
	free(x);
	free(y);
	ck_assert_str_eq(b->spec->name, a->spec->name);
	ck_assert_uint_eq(b->ntables, a->ntables);
	for (size_t i = 0; i < a->ntables; i++) {
		const struct dml_model_table *s = &a->tables[i], *t = &b->tables[i];

		ck_assert_uint_eq(t->id, s->id);
		ck_assert_uint_eq(t->width, s->width);
		ck_assert_int_eq(t->dense, s->dense);
		ck_assert_uint_eq(t->rows, s->rows);
		ck_assert_int_eq(memcmp(t->values, s->values,
					(size_t)s->rows * s->width * sizeof(float)), 0);
		if (!s->dense)
			ck_assert_int_eq(memcmp(t->keys, s->keys, (size_t)s->rows * 8), 0);
		else
			ck_assert_ptr_null(t->keys);
	}
}

START_TEST(model_round_trip)
{
	char path[PATH_LEN], tmp[PATH_LEN];
	struct dml_model m, r;
	struct dml_local_store *s;
	float dense[8];
	float v[6];
	struct dml_app_io io;
	char err[512] = "";
	struct stat st;

	path_of(path, "round.model");
	path_of(tmp, "round.model.tmp");
	model_of_store_job(&m);
	ck_assert_uint_eq(m.ntables, 2);
	ck_assert_uint_eq(m.tables[0].rows, 8);
	ck_assert_uint_eq(m.tables[1].rows, 2);
	ck_assert_uint_eq(m.tables[1].keys[0], 17);
	ck_assert_msg(dml_model_write(path, &m, err, sizeof(err)) == 0, "%s", err);
	ck_assert_int_ne(stat(tmp, &st), 0);
	ck_assert_msg(dml_model_read(path, &r, err, sizeof(err)) == 0, "%s", err);
	expect_same_model(&m, &r);

	/* A fresh store set from the file holds the trained values. */
	s = store_make(r.spec);
	ck_assert_msg(dml_local_store_load_model(s, &r, err, sizeof(err)) == 0, "%s", err);
	ck_assert_int_eq(dml_local_store_get(s, 0, dense), 0);
	ck_assert_int_eq(memcmp(dense, m.tables[0].values, sizeof(dense)), 0);
	dml_local_store_io(s, &io);
	ck_assert_int_eq(pull_keys(&io, 5, m.tables[1].keys, 2, v), 0);
	ck_assert_int_eq(memcmp(v, m.tables[1].values, sizeof(v)), 0);
	dml_local_store_free(s);

	/* Writing again replaces the file. */
	m.tables[0].values[0] = 1234.5f;
	ck_assert_int_eq(dml_model_write(path, &m, err, sizeof(err)), 0);
	dml_model_free(&r);
	ck_assert_int_eq(dml_model_read(path, &r, err, sizeof(err)), 0);
	ck_assert_float_eq(r.tables[0].values[0], 1234.5f);

	dml_model_free(&r);
	dml_model_free(&m);
	ck_assert_ptr_null(m.spec);
	dml_model_free(NULL);
}
END_TEST

/* err must read "path: ..." and contain part. */
static void expect_err(const char *err, const char *path, const char *part)
{
	size_t n = strlen(path);

	ck_assert_msg(strncmp(err, path, n) == 0 && err[n] == ':' && err[n + 1] == ' ',
		      "'%s' does not start with the path", err);
	if (part)
		ck_assert_msg(strstr(err, part) != NULL, "'%s' does not say '%s'", err, part);
}

START_TEST(model_write_refuses)
{
	char path[PATH_LEN];
	char bad_path[PATH_LEN + 16];
	struct dml_model m;
	char err[512] = "";
	struct stat st;

	path_of(path, "refused.model");
	model_of_store_job(&m);
	m.tables[1].width = 2;
	ck_assert_int_eq(dml_model_write(path, &m, err, sizeof(err)), DML_EINVAL);
	expect_err(err, path, "table 5: width 2, the spec says 3");
	ck_assert_int_ne(stat(path, &st), 0);
	m.tables[1].width = 3;
	m.tables[1].keys[1] = m.tables[1].keys[0];
	ck_assert_int_eq(dml_model_write(path, &m, err, sizeof(err)), DML_EINVAL);
	expect_err(err, path, "key 17 appears twice");
	m.tables[1].keys[1] = 3;
	m.tables[0].rows = 7;
	ck_assert_int_eq(dml_model_check(&m, err, sizeof(err)), DML_EINVAL);
	ck_assert_str_eq(err, "table 0: 7 rows, the spec says 8 keys");
	m.tables[0].rows = 8;
	m.tables[1].id = 0;
	ck_assert_int_eq(dml_model_check(&m, err, sizeof(err)), DML_EINVAL);
	ck_assert_str_eq(err, "table 0 appears twice");
	m.tables[1].id = 5;
	m.ntables = 1;
	ck_assert_int_eq(dml_model_check(&m, err, sizeof(err)), DML_EINVAL);
	ck_assert_str_eq(err, "1 tables, the spec has 2");
	m.ntables = 2;
	ck_assert_int_eq(dml_model_check(&m, err, sizeof(err)), 0);

	/* A folder that does not exist: I/O, and nothing left behind. */
	snprintf(bad_path, sizeof(bad_path), "%s/nope/x.model", dml_test_tmpdir());
	ck_assert_int_eq(dml_model_write(bad_path, &m, err, sizeof(err)), DML_EIO);
	expect_err(err, bad_path, "No such file");
	dml_model_free(&m);
}
END_TEST

START_TEST(model_read_io_errors)
{
	char path[PATH_LEN];
	struct dml_model m;
	char err[512] = "";

	path_of(path, "missing.model");
	ck_assert_int_eq(dml_model_read(path, &m, err, sizeof(err)), DML_EIO);
	expect_err(err, path, "No such file");
	ck_assert_ptr_null(m.spec);
	ck_assert_int_eq(dml_model_read(dml_test_tmpdir(), &m, err, sizeof(err)),
			 DML_EIO);
	expect_err(err, dml_test_tmpdir(), "not a regular file");
}
END_TEST

/* A valid file's bytes, in memory. */
static size_t valid_file(uint8_t **buf)
{
	char path[PATH_LEN];
	struct dml_model m;
	char err[512];
	struct stat st;
	FILE *f;

	path_of(path, "valid.model");
	model_of_store_job(&m);
	ck_assert_int_eq(dml_model_write(path, &m, err, sizeof(err)), 0);
	dml_model_free(&m);
	ck_assert_int_eq(stat(path, &st), 0);
	*buf = dml_xmalloc((size_t)st.st_size);
	f = fopen(path, "rb");
	ck_assert_ptr_nonnull(f);
	ck_assert_uint_eq(fread(*buf, 1, (size_t)st.st_size, f), (size_t)st.st_size);
	fclose(f);
	return (size_t)st.st_size;
}

static void write_bytes(const char *path, const uint8_t *buf, size_t n)
{
	FILE *f = fopen(path, "wb");

	ck_assert_ptr_nonnull(f);
	ck_assert_uint_eq(fwrite(buf, 1, n, f), n);
	ck_assert_int_eq(fclose(f), 0);
}

/* Reading buf as a file must fail with code, err "path: ...part...". */
static void expect_refused(const uint8_t *buf, size_t n, int code, const char *part)
{
	char path[PATH_LEN];
	struct dml_model m;
	char err[512] = "";
	int rc;

	path_of(path, "bad.model");
	write_bytes(path, buf, n);
	memset(&m, 0x5a, sizeof(m));
	rc = dml_model_read(path, &m, err, sizeof(err));
	ck_assert_msg(rc == code, "got %d (%s), want %d", rc, err, code);
	expect_err(err, path, part);
	ck_assert_ptr_null(m.spec);
	ck_assert_ptr_null(m.tables);
	ck_assert_uint_eq(m.ntables, 0);
}

START_TEST(model_every_truncation)
{
	uint8_t *buf;
	size_t n = valid_file(&buf);

	for (size_t len = 0; len < n; len++)
		expect_refused(buf, len, DML_ECONF, "truncated");
	free(buf);
}
END_TEST

START_TEST(model_every_byte_flip)
{
	static const uint8_t flips[] = { 0x01, 0x80, 0xff };
	uint8_t *buf;
	size_t n = valid_file(&buf);

	for (size_t i = 0; i < n; i++) {
		for (size_t f = 0; f < sizeof(flips); f++) {
			buf[i] ^= flips[f];
			expect_refused(buf, n, DML_ECONF, NULL);
			buf[i] ^= flips[f];
		}
	}
	free(buf);
}
END_TEST

/* Recompute the checksum of a patched file, so a check past it is reached. */
static void fix_crc(uint8_t *buf, size_t n)
{
	dml_store_le32(buf + n - 4, (uint32_t)crc32(0L, buf, (uInt)(n - 4)));
}

static void put_le64(uint8_t *p, uint64_t v)
{
	dml_store_le32(p, (uint32_t)v);
	dml_store_le32(p + 4, (uint32_t)(v >> 32));
}

/* Read buf patched by stmt, checksum fixed, expecting code and part. */
#define EXPECT_PATCHED(stmt, code, part)                                      \
	do {                                                                  \
		memcpy(b, buf, n);                                            \
		stmt;                                                         \
		fix_crc(b, n);                                                \
		expect_refused(b, n, code, part);                             \
	} while (0)

START_TEST(model_crafted_files)
{
	uint8_t *buf, *b, *longer;
	size_t n = valid_file(&buf);
	uint32_t spec_len = dml_load_le32(buf + 12);
	/* Offsets of the two tables' headers (table 0 dense 8 x 1 first). */
	size_t t0 = 16 + spec_len + 4, t1 = t0 + 17 + 8 * 4;

	ck_assert_uint_eq(n, t1 + 17 + 2 * 8 + 2 * 3 * 4 + 4);
	ck_assert_uint_eq(dml_load_le32(buf + t0), 0);
	ck_assert_uint_eq(dml_load_le32(buf + t1), 5);
	b = dml_xmalloc(n);

	EXPECT_PATCHED(b[0] = 'X', DML_ECONF, "bad magic");
	EXPECT_PATCHED(dml_store_le32(b + 8, 2), DML_ECONF, "version 2 not supported");
	EXPECT_PATCHED(dml_store_le32(b + 8, 0), DML_ECONF, "version 0 not supported");
	EXPECT_PATCHED(dml_store_le32(b + 12, UINT32_MAX), DML_ECONF, "truncated");
	EXPECT_PATCHED(dml_store_le32(b + t0 - 4, UINT32_MAX), DML_ECONF, "truncated");
	EXPECT_PATCHED(put_le64(b + t0 + 9, UINT64_C(1) << 60), DML_ECONF, "truncated");
	EXPECT_PATCHED(put_le64(b + t0 + 9, UINT64_MAX), DML_ECONF, "truncated");
	EXPECT_PATCHED(dml_store_le32(b + t0 + 4, UINT32_MAX), DML_ECONF, "truncated");
	EXPECT_PATCHED(put_le64(b + t1 + 9, UINT64_C(1) << 60), DML_ECONF, "truncated");
	EXPECT_PATCHED(put_le64(b + t1 + 9, UINT64_C(1) << 62), DML_ECONF, "truncated");
	EXPECT_PATCHED(dml_store_le32(b + t0 + 4, 0), DML_ECONF, "table 0 width 0");
	EXPECT_PATCHED(b[t1 + 8] = 2, DML_ECONF, "table 5 kind byte 2");
	/* Layout fine, meaning wrong: checked after the checksum. */
	EXPECT_PATCHED(dml_store_le32(b + t1, 6), DML_ECONF,
		       "table 6: not a table of the spec");
	EXPECT_PATCHED(memcpy(b + t1 + 17 + 8, b + t1 + 17, 8), DML_ECONF,
		       "table 5: key 17 appears twice");
	EXPECT_PATCHED(memset(b + 16, 0xff, spec_len), DML_ECONF, "does not decode");
	/* Counts that misplace the rest: one table too many, one too few, a
	 * dense table read as sparse (its keys eat the values). */
	EXPECT_PATCHED(dml_store_le32(b + t0 - 4, 3), DML_ECONF, "truncated");
	EXPECT_PATCHED(dml_store_le32(b + t0 - 4, 1), DML_ECONF, "crc mismatch");
	EXPECT_PATCHED(b[t0 + 8] = 0, DML_ECONF, "truncated");
	/* The checksum itself. */
	memcpy(b, buf, n);
	b[n - 1] ^= 0x10;
	expect_refused(b, n, DML_ECONF, "crc mismatch");
	memcpy(b, buf, n);
	b[t0 + 20] ^= 0x10;
	expect_refused(b, n, DML_ECONF, "crc mismatch");
	/* Bytes after the checksum. */
	longer = dml_xmalloc(n + 3);
	memcpy(longer, buf, n);
	memset(longer + n, 0, 3);
	expect_refused(longer, n + 1, DML_ECONF, "1 trailing bytes after the checksum");
	expect_refused(longer, n + 3, DML_ECONF, "3 trailing bytes after the checksum");
	free(longer);
	free(b);
	free(buf);
}
END_TEST

/* ---- dml-worker --eval --------------------------------------------------- */

/* The lsq job's model with w = values (LSQ_DIM floats), written to name. */
static const char *lsq_model(char *path, const char *name, const float *values)
{
	struct dml_model_table t = { .id = 0, .width = 1, .dense = 1, .rows = LSQ_DIM };
	struct dml_model m = { .spec = spec_parse(lsq_job), .tables = &t, .ntables = 1 };
	char err[512] = "";

	path_of(path, name);
	t.values = (float *)values;
	ck_assert_msg(dml_model_write(path, &m, err, sizeof(err)) == 0, "%s", err);
	dml_job_spec_free(m.spec);
	return path;
}

/* What the last run_worker printed. */
static char g_out[1024], g_errtext[4096];

static void slurp(const char *path, char *buf, size_t len)
{
	FILE *f = fopen(path, "r");

	ck_assert_ptr_nonnull(f);
	buf[fread(buf, 1, len - 1, f)] = '\0';
	fclose(f);
}

/* Run dml-worker with args (NULL-terminated, at most 6); its exit status. */
static int run_worker(const char *const *args)
{
	const char *dir = getenv("DML_BUILDDIR");
	char bin[PATH_LEN], outp[PATH_LEN], errp[PATH_LEN];
	const char *argv[8];
	size_t n = 0;
	int status;
	pid_t pid;

	snprintf(bin, sizeof(bin), "%s/worker/dml-worker", dir && *dir ? dir : ".");
	ck_assert_msg(access(bin, X_OK) == 0, "%s: %s (set DML_BUILDDIR)", bin,
		      strerror(errno));
	path_of(outp, "worker.out");
	path_of(errp, "worker.err");
	argv[n++] = bin;
	for (size_t i = 0; args[i] && n < 7; i++)
		argv[n++] = args[i];
	argv[n] = NULL;
	fflush(NULL);
	pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		if (!freopen(outp, "w", stdout) || !freopen(errp, "w", stderr))
			_exit(126);
		execv(bin, (char *const *)argv);
		_exit(127);
	}
	ck_assert_int_eq(waitpid(pid, &status, 0), pid);
	ck_assert_msg(WIFEXITED(status), "dml-worker died with status 0x%x", status);
	slurp(outp, g_out, sizeof(g_out));
	slurp(errp, g_errtext, sizeof(g_errtext));
	return WEXITSTATUS(status);
}

#define RUN_WORKER(...) run_worker((const char *const[]){ __VA_ARGS__, NULL })

START_TEST(eval_lsq_true_weights)
{
	float w[LSQ_DIM];
	char path[PATH_LEN], want[PATH_LEN + 64];
	double loss = -1;

	dml_lsq_true_weights(LSQ_SEED, LSQ_DIM, w);
	lsq_model(path, "true.model", w);
	ck_assert_msg(RUN_WORKER("--eval", path, "synthetic") == 0, "stderr: %s", g_errtext);
	ck_assert_msg(sscanf(g_out, "loss %lf", &loss) == 1, "stdout: %s", g_out);
	ck_assert_msg(loss > 0.8 * NOISE_FLOOR && loss < 1.2 * NOISE_FLOOR, "loss %g", loss);
	snprintf(want, sizeof(want), " (model %s, data synthetic)\n", path);
	ck_assert_ptr_nonnull(strstr(g_out, want));

	/* The same job with w = 0 is far off: the tables came from the file. */
	memset(w, 0, sizeof(w));
	lsq_model(path, "zero.model", w);
	ck_assert_int_eq(RUN_WORKER("--backend", "cpu", "--eval", path, "synthetic"), 0);
	ck_assert_msg(sscanf(g_out, "loss %lf", &loss) == 1, "stdout: %s", g_out);
	ck_assert_double_gt(loss, 0.5);
}
END_TEST

START_TEST(eval_failures)
{
	static const uint8_t junk[16] = "DMLMODEL";
	float w[LSQ_DIM] = { 0 };
	char path[PATH_LEN], bad[PATH_LEN];

	lsq_model(path, "fail.model", w);
	ck_assert_int_eq(RUN_WORKER("--eval", path), 2);
	ck_assert_ptr_nonnull(strstr(g_errtext, "usage: dml-worker --eval MODEL DATA"));
	ck_assert_str_eq(g_out, "");
	ck_assert_int_eq(RUN_WORKER("--eval", path, "synthetic", "extra"), 2);

	write_bytes(path_of(bad, "junk.model"), junk, sizeof(junk));
	ck_assert_int_eq(RUN_WORKER("--eval", bad, "synthetic"), 1);
	ck_assert_msg(strstr(g_errtext, bad) && strstr(g_errtext, "version 0 not supported"),
		      "stderr: %s", g_errtext);
	ck_assert_str_eq(g_out, "");

	ck_assert_int_eq(RUN_WORKER("--eval", path, "synthetic", "--backend", "nope"), 1);
	ck_assert_msg(strstr(g_errtext, "backend 'nope' is not in this build"), "stderr: %s",
		      g_errtext);
	/* lsq makes its own data: anything else is the app's refusal. */
	ck_assert_int_eq(RUN_WORKER("--eval", path, "a.idx,b.idx"), 1);
	ck_assert_msg(strstr(g_errtext, "app lsq: data 'a.idx,b.idx'"), "stderr: %s",
		      g_errtext);
	ck_assert_int_eq(RUN_WORKER("--help"), 0);
	ck_assert_ptr_nonnull(strstr(g_out, "--eval MODEL DATA"));
}
END_TEST

void check_model_file_tests(TCase *file, TCase *eval)
{
	tcase_add_test(file, model_round_trip);
	tcase_add_test(file, model_write_refuses);
	tcase_add_test(file, model_read_io_errors);
	tcase_add_test(file, model_every_truncation);
	tcase_add_test(file, model_every_byte_flip);
	tcase_add_test(file, model_crafted_files);
	tcase_add_test(eval, eval_lsq_true_weights);
	tcase_add_test(eval, eval_failures);
}
