/*
 * Model files (model_file.h): one writer, one reader, one consistency
 * check both use, so that nothing is written that the reader would refuse.
 *
 * The reader streams the file and checks every length against the bytes
 * left in it before allocating, so a hostile or damaged file costs at most
 * its own size in memory. Errors come in the order that explains a damaged
 * file best: the layout first (magic, version, lengths, truncation), then
 * the checksum, then the meaning (the spec, the tables against the spec).
 *
 * Must never: allocate from an unchecked length, read past the end of a
 * buffer, or leave path.tmp behind after a failed write.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "proto/dml_error.h"
#include "proto/job_spec.h"
#include "worker/model_file.h"
#include "proto/util.h"

/* Keys and values are stored in the host's layout; dml hosts are
 * little-endian (util.h reads payload keys in place too). */
_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "model files need a "
	       "little-endian host");

#define MAGIC_LEN 8
/* id, width, dense, rows: the least a table takes in a file. */
#define TABLE_HEADER_LEN (4 + 4 + 1 + 8)
/* zlib's crc32 takes an unsigned int length. */
#define CRC_CHUNK ((size_t)1 << 30)
/* Bytes per fread/fwrite call. */
#define IO_CHUNK ((size_t)1 << 20)

static uLong crc_update(uLong crc, const void *buf, size_t n)
{
	const Bytef *p = buf;

	while (n > 0) {
		size_t m = n < CRC_CHUNK ? n : CRC_CHUNK;

		crc = crc32(crc, p, (uInt)m);
		p += m;
		n -= m;
	}
	return crc;
}

static void store_le64(void *p, uint64_t v)
{
	dml_store_le32(p, (uint32_t)v);
	dml_store_le32((uint8_t *)p + 4, (uint32_t)(v >> 32));
}

/* "path: " and the reason into err; returns code. */
static int path_fail(int code, char *err, size_t errlen, const char *path, const char *fmt,
		     ...) __attribute__((format(printf, 5, 6)));

static int path_fail(int code, char *err, size_t errlen, const char *path, const char *fmt,
		     ...)
{
	va_list ap;
	int n;

	if (!err || !errlen)
		return code;
	n = snprintf(err, errlen, "%s: ", path);
	if (n >= 0 && (size_t)n < errlen) {
		va_start(ap, fmt);
		vsnprintf(err + n, errlen - (size_t)n, fmt, ap);
		va_end(ap);
	}
	return code;
}

void dml_model_free(struct dml_model *m)
{
	if (!m)
		return;
	for (size_t i = 0; m->tables && i < m->ntables; i++) {
		free(m->tables[i].keys);
		free(m->tables[i].values);
	}
	free(m->tables);
	dml_job_spec_free(m->spec);
	memset(m, 0, sizeof(*m));
}

/* ---- consistency --------------------------------------------------------- */

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

/* A sparse table's keys must be distinct: a repeated key would be set twice. */
static int keys_distinct(const struct dml_model_table *t, char *err, size_t errlen)
{
	uint64_t *sorted;
	int rc = 0;

	if (t->rows < 2)
		return 0;
	if (!(sorted = malloc((size_t)t->rows * sizeof(*sorted))))
		return dml_fail(DML_ENOMEM, err, errlen, "table %" PRIu32 ": out of memory "
				"for checking %" PRIu64 " keys", t->id, t->rows);
	memcpy(sorted, t->keys, (size_t)t->rows * sizeof(*sorted));
	qsort(sorted, (size_t)t->rows, sizeof(*sorted), cmp_u64);
	for (size_t i = 1; rc == 0 && i < t->rows; i++)
		if (sorted[i] == sorted[i - 1])
			rc = dml_fail(DML_EINVAL, err, errlen, "table %" PRIu32 ": key %"
				      PRIu64 " appears twice", t->id, sorted[i]);
	free(sorted);
	return rc;
}

static int table_check(const struct dml_model *m, size_t i, char *err, size_t errlen)
{
	const struct dml_model_table *t = &m->tables[i];
	const Dml__TableSpec *ts = NULL;

	for (size_t j = 0; j < m->spec->n_tables && !ts; j++)
		if (m->spec->tables[j]->id == t->id)
			ts = m->spec->tables[j];
	for (size_t j = 0; j < i; j++)
		if (m->tables[j].id == t->id)
			return dml_fail(DML_EINVAL, err, errlen, "table %" PRIu32
					" appears twice", t->id);
	if (!ts)
		return dml_fail(DML_EINVAL, err, errlen, "table %" PRIu32 ": not a table of "
				"the spec", t->id);
	if (!t->dense != !ts->dense)
		return dml_fail(DML_EINVAL, err, errlen, "table %" PRIu32 ": %s, the spec "
				"says %s", t->id, t->dense ? "dense" : "sparse",
				ts->dense ? "dense" : "sparse");
	if (t->width != ts->width)
		return dml_fail(DML_EINVAL, err, errlen, "table %" PRIu32 ": width %" PRIu32
				", the spec says %" PRIu32, t->id, t->width, ts->width);
	if (t->dense && t->rows != ts->keys)
		return dml_fail(DML_EINVAL, err, errlen, "table %" PRIu32 ": %" PRIu64
				" rows, the spec says %" PRIu64 " keys", t->id, t->rows,
				ts->keys);
	if (t->rows > SIZE_MAX / sizeof(float) / t->width)
		return dml_fail(DML_EINVAL, err, errlen, "table %" PRIu32 ": %" PRIu64
				" rows is too many", t->id, t->rows);
	if (t->rows && (!t->values || (!t->dense && !t->keys)))
		return dml_fail(DML_EINVAL, err, errlen, "table %" PRIu32 ": no %s", t->id,
				t->values ? "keys" : "values");
	return t->dense ? 0 : keys_distinct(t, err, errlen);
}

int dml_model_check(const struct dml_model *m, char *err, size_t errlen)
{
	char why[256];
	int rc;

	if (!m || !m->spec)
		return dml_fail(DML_EINVAL, err, errlen, "no spec");
	if (dml_job_spec_check(m->spec, why, sizeof(why)) != 0)
		return dml_fail(DML_EINVAL, err, errlen, "spec: %s", why);
	if (m->ntables != m->spec->n_tables)
		return dml_fail(DML_EINVAL, err, errlen, "%zu tables, the spec has %zu",
				m->ntables, m->spec->n_tables);
	if (m->ntables && !m->tables)
		return dml_fail(DML_EINVAL, err, errlen, "no tables");
	for (size_t i = 0; i < m->ntables; i++)
		if ((rc = table_check(m, i, err, errlen)) != 0)
			return rc;
	return 0;
}

/* ---- writing ------------------------------------------------------------- */

struct writer {
	FILE *f;
	uLong crc;
	int failed;                 /* sticky: a write failed, errno kept */
	int saved_errno;
};

static void put(struct writer *w, const void *buf, size_t n)
{
	const uint8_t *p = buf;

	w->crc = crc_update(w->crc, buf, n);
	while (!w->failed && n > 0) {
		size_t m = n < IO_CHUNK ? n : IO_CHUNK;

		if (fwrite(p, 1, m, w->f) != m) {
			w->failed = 1;
			w->saved_errno = errno ? errno : EIO;
		}
		p += m;
		n -= m;
	}
}

static void put_u32(struct writer *w, uint32_t v)
{
	uint8_t b[4];

	dml_store_le32(b, v);
	put(w, b, sizeof(b));
}

static void put_u64(struct writer *w, uint64_t v)
{
	uint8_t b[8];

	store_le64(b, v);
	put(w, b, sizeof(b));
}

static void put_table(struct writer *w, const struct dml_model_table *t)
{
	uint8_t dense = t->dense ? 1 : 0;

	put_u32(w, t->id);
	put_u32(w, t->width);
	put(w, &dense, 1);
	put_u64(w, t->rows);
	if (!t->dense)
		put(w, t->keys, (size_t)t->rows * sizeof(uint64_t));
	put(w, t->values, (size_t)t->rows * t->width * sizeof(float));
}

/* Everything but the open and the rename; 0 or an errno value. */
static int write_body(FILE *f, const struct dml_model *m)
{
	struct writer w = { f, crc32(0L, Z_NULL, 0), 0, 0 };
	size_t spec_len = dml__job_spec__get_packed_size(m->spec);
	uint8_t *spec = dml_xmalloc(spec_len ? spec_len : 1);
	uint8_t b[4];

	dml__job_spec__pack(m->spec, spec);
	put(&w, DML_MODEL_MAGIC, MAGIC_LEN);
	put_u32(&w, DML_MODEL_VERSION);
	put_u32(&w, (uint32_t)spec_len);
	put(&w, spec, spec_len);
	free(spec);
	put_u32(&w, (uint32_t)m->ntables);
	for (size_t i = 0; i < m->ntables; i++)
		put_table(&w, &m->tables[i]);
	dml_store_le32(b, (uint32_t)w.crc);
	put(&w, b, sizeof(b));
	if (!w.failed && (fflush(f) != 0 || fsync(fileno(f)) != 0)) {
		w.failed = 1;
		w.saved_errno = errno;
	}
	return w.failed ? w.saved_errno : 0;
}

int dml_model_write(const char *path, const struct dml_model *m, char *err, size_t errlen)
{
	char why[256];
	size_t len;
	char *tmp;
	FILE *f;
	int rc, e;

	if (!path)
		return dml_fail(DML_EINVAL, err, errlen, "no path");
	if ((rc = dml_model_check(m, why, sizeof(why))) != 0)
		return path_fail(rc, err, errlen, path, "%s", why);
	len = strlen(path);
	tmp = dml_xmalloc(len + sizeof(".tmp"));
	memcpy(tmp, path, len);
	memcpy(tmp + len, ".tmp", sizeof(".tmp"));
	if (!(f = fopen(tmp, "wb"))) {
		rc = path_fail(DML_EIO, err, errlen, path, "%s: %s", tmp, strerror(errno));
		free(tmp);
		return rc;
	}
	e = write_body(f, m);
	if (fclose(f) != 0 && !e)
		e = errno;
	if (!e && rename(tmp, path) != 0)
		e = errno;
	if (e) {
		unlink(tmp);
		rc = path_fail(DML_EIO, err, errlen, path, "%s", strerror(e));
	}
	free(tmp);
	return rc;
}

/* ---- reading ------------------------------------------------------------- */

struct reader {
	FILE *f;
	const char *path;
	uint64_t left;              /* bytes of the file not read yet */
	uLong crc;
	char *err;
	size_t errlen;
};

/*
 * n bytes into buf, counted in the checksum when sum is set. A length the
 * file cannot hold is DML_ECONF ("truncated: ..."), a failed read DML_EIO.
 */
static int need(struct reader *r, uint64_t n, const char *what)
{
	if (n > r->left)
		return path_fail(DML_ECONF, r->err, r->errlen, r->path, "truncated: %s "
				 "needs %" PRIu64 " bytes, %" PRIu64 " left", what, n,
				 r->left);
	return 0;
}

static int get(struct reader *r, void *buf, uint64_t n, int sum, const char *what)
{
	uint8_t *p = buf;
	uint64_t todo = n;
	int rc = need(r, n, what);

	if (rc)
		return rc;
	while (todo > 0) {
		size_t m = todo < IO_CHUNK ? (size_t)todo : IO_CHUNK;

		if (fread(p, 1, m, r->f) != m) {
			if (ferror(r->f))
				return path_fail(DML_EIO, r->err, r->errlen, r->path,
						 "read: %s", strerror(errno));
			return path_fail(DML_ECONF, r->err, r->errlen, r->path,
					 "truncated: the file shrank while being read");
		}
		p += m;
		todo -= m;
	}
	if (sum)
		r->crc = crc_update(r->crc, buf, (size_t)n);
	r->left -= n;
	return 0;
}

static int get_u32(struct reader *r, uint32_t *v, const char *what)
{
	uint8_t b[4];
	int rc = get(r, b, sizeof(b), 1, what);

	*v = rc ? 0 : dml_load_le32(b);
	return rc;
}

static int get_u64(struct reader *r, uint64_t *v, const char *what)
{
	uint8_t b[8];
	int rc = get(r, b, sizeof(b), 1, what);

	*v = rc ? 0 : dml_load_le64(b);
	return rc;
}

/* An array of count items of size bytes, after checking the file holds it. */
static int get_array(struct reader *r, uint64_t count, size_t size, void **out,
		     const char *what, uint32_t id)
{
	char label[64];

	*out = NULL;
	snprintf(label, sizeof(label), "table %" PRIu32 " %s", id, what);
	if (count > r->left / size)
		return path_fail(DML_ECONF, r->err, r->errlen, r->path, "truncated: %s: %"
				 PRIu64 " x %zu bytes, %" PRIu64 " left", label, count, size,
				 r->left);
	if (count == 0)
		return 0;
	if (!(*out = malloc((size_t)count * size)))
		return path_fail(DML_ENOMEM, r->err, r->errlen, r->path, "out of memory for "
				 "%s (%" PRIu64 " bytes)", label, count * size);
	return get(r, *out, count * size, 1, label);
}

static int get_table(struct reader *r, struct dml_model_table *t)
{
	uint8_t dense;
	int rc;

	if ((rc = get_u32(r, &t->id, "table id")) != 0 ||
	    (rc = get_u32(r, &t->width, "table width")) != 0 ||
	    (rc = get(r, &dense, 1, 1, "table kind")) != 0 ||
	    (rc = get_u64(r, &t->rows, "table rows")) != 0)
		return rc;
	if (t->width == 0)
		return path_fail(DML_ECONF, r->err, r->errlen, r->path, "table %" PRIu32
				 " width 0", t->id);
	if (dense > 1)
		return path_fail(DML_ECONF, r->err, r->errlen, r->path, "table %" PRIu32
				 " kind byte %u is not 0 (sparse) or 1 (dense)", t->id,
				 dense);
	t->dense = dense;
	if (!t->dense && (rc = get_array(r, t->rows, sizeof(uint64_t), (void **)&t->keys,
					 "keys", t->id)) != 0)
		return rc;
	/* Checked before multiplying, so rows * width cannot wrap. */
	if (t->rows > r->left / sizeof(float) / t->width)
		return path_fail(DML_ECONF, r->err, r->errlen, r->path, "truncated: table %"
				 PRIu32 " has %" PRIu64 " rows of width %" PRIu32 ", %" PRIu64
				 " bytes left", t->id, t->rows, t->width, r->left);
	return get_array(r, t->rows * t->width, sizeof(float), (void **)&t->values, "values",
			 t->id);
}

static int get_model(struct reader *r, struct dml_model *m)
{
	uint8_t magic[MAGIC_LEN], crc[4];
	uint32_t version, spec_len, ntables, want;
	uint8_t *spec = NULL;
	char why[256];
	int rc;

	if ((rc = get(r, magic, MAGIC_LEN, 1, "magic")) != 0)
		return rc;
	if (memcmp(magic, DML_MODEL_MAGIC, MAGIC_LEN) != 0)
		return path_fail(DML_ECONF, r->err, r->errlen, r->path, "bad magic: not a "
				 "dml model file");
	if ((rc = get_u32(r, &version, "version")) != 0)
		return rc;
	if (version != DML_MODEL_VERSION)
		return path_fail(DML_ECONF, r->err, r->errlen, r->path, "version %" PRIu32
				 " not supported (this build reads %d)", version,
				 DML_MODEL_VERSION);
	if ((rc = get_u32(r, &spec_len, "spec length")) != 0)
		return rc;
	if ((rc = need(r, spec_len, "the spec")) != 0)
		return rc;
	/* Sized by the file, not a control structure: no memory is an error. */
	if (!(spec = malloc(spec_len ? spec_len : 1)))
		return path_fail(DML_ENOMEM, r->err, r->errlen, r->path, "out of memory for "
				 "the spec (%" PRIu32 " bytes)", spec_len);
	if ((rc = get(r, spec, spec_len, 1, "the spec")) != 0 ||
	    (rc = get_u32(r, &ntables, "table count")) != 0)
		goto out;
	if (ntables > r->left / TABLE_HEADER_LEN) {
		rc = path_fail(DML_ECONF, r->err, r->errlen, r->path, "truncated: %" PRIu32
			       " tables, %" PRIu64 " bytes left", ntables, r->left);
		goto out;
	}
	/* All counted at once: dml_model_free frees what a failure left. */
	if (!(m->tables = calloc(ntables ? ntables : 1, sizeof(*m->tables)))) {
		rc = path_fail(DML_ENOMEM, r->err, r->errlen, r->path, "out of memory for %"
			       PRIu32 " tables", ntables);
		goto out;
	}
	m->ntables = ntables;
	for (uint32_t i = 0; i < ntables; i++)
		if ((rc = get_table(r, &m->tables[i])) != 0)
			goto out;
	want = (uint32_t)r->crc;
	if ((rc = get(r, crc, sizeof(crc), 0, "the checksum")) != 0)
		goto out;
	if (dml_load_le32(crc) != want) {
		rc = path_fail(DML_ECONF, r->err, r->errlen, r->path, "crc mismatch (file %08"
			       PRIx32 ", content %08" PRIx32 "): the file is damaged",
			       dml_load_le32(crc), want);
		goto out;
	}
	if (r->left) {
		rc = path_fail(DML_ECONF, r->err, r->errlen, r->path, "%" PRIu64 " trailing "
			       "bytes after the checksum", r->left);
		goto out;
	}
	if (!(m->spec = dml__job_spec__unpack(NULL, spec_len, spec))) {
		rc = path_fail(DML_ECONF, r->err, r->errlen, r->path, "the spec (%" PRIu32
			       " bytes) does not decode", spec_len);
		goto out;
	}
	if ((rc = dml_model_check(m, why, sizeof(why))) != 0)
		rc = path_fail(rc == DML_EINVAL ? DML_ECONF : rc, r->err, r->errlen, r->path,
			       "%s", why);
out:
	free(spec);
	return rc;
}

int dml_model_read(const char *path, struct dml_model *out, char *err, size_t errlen)
{
	struct reader r = { .path = path, .err = err, .errlen = errlen };
	struct stat st;
	int rc;

	memset(out, 0, sizeof(*out));
	if (!path)
		return dml_fail(DML_EINVAL, err, errlen, "no path");
	if (!(r.f = fopen(path, "rb")))
		return path_fail(DML_EIO, err, errlen, path, "%s", strerror(errno));
	if (fstat(fileno(r.f), &st) != 0) {
		rc = path_fail(DML_EIO, err, errlen, path, "%s", strerror(errno));
		fclose(r.f);
		return rc;
	}
	if (!S_ISREG(st.st_mode)) {
		fclose(r.f);
		return path_fail(DML_EIO, err, errlen, path, "not a regular file");
	}
	r.left = (uint64_t)st.st_size;
	r.crc = crc32(0L, Z_NULL, 0);
	rc = get_model(&r, out);
	fclose(r.f);
	if (rc)
		dml_model_free(out);
	return rc;
}
