/*
 * libsvm reader (see data_libsvm.h): the file is read through zlib, which
 * passes a plain file through as it is and inflates one that starts with
 * the gzip magic; lines are cut out of 64 KiB chunks, each line is split
 * into tokens and every token parsed strictly on a bounded copy of its
 * own, and a record's entries are sorted and merged before they join the
 * arrays.
 *
 * Must never: read a token past its line, let a line, a record or the
 * arrays grow past their caps, parse a number with a function that skips
 * what it does not understand, or report an error without path and line.
 */
#include <errno.h>
#include <fcntl.h>
#include <float.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#include "data_libsvm.h"
#include "dml_error.h"

#define CHUNK ((size_t)1 << 16)
/* Longest token parsed as a label or a value (a float needs far fewer). */
#define TOKEN_MAX 128
/* The first allocation of each array, in elements. */
#define FIRST_ALLOC 1024

struct pair {
	uint64_t id;
	double val;
};

struct reader {
	const char *path;
	gzFile gz;
	int cut;                  /* the gzip stream ended without its trailer */
	int eof;
	char *chunk;
	size_t clen, cpos;
	char *line;               /* the line in progress, without its newline */
	size_t llen, lcap;
	uint64_t lineno;          /* of the line in progress */
	struct pair *pairs;       /* the record in progress */
	size_t npairs, pcap;
	uint64_t rcap, ecap;      /* records and entries the arrays hold */
	int seen_minus, seen_zero;
	int64_t max_label;
	char *err;
	size_t errlen;
};

static int rfail(struct reader *r, int code, int with_line, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

/* "path: record N: reason" (with_line) or "path: reason" into err. */
static int rfail(struct reader *r, int code, int with_line, const char *fmt, ...)
{
	va_list ap;
	int n;

	if (!r->err || r->errlen == 0)
		return code;
	if (with_line)
		n = snprintf(r->err, r->errlen, "%s: record %" PRIu64 ": ", r->path, r->lineno);
	else
		n = snprintf(r->err, r->errlen, "%s: ", r->path);
	if (n < 0 || (size_t)n >= r->errlen)
		return code;
	va_start(ap, fmt);
	vsnprintf(r->err + n, r->errlen - (size_t)n, fmt, ap);
	va_end(ap);
	return code;
}

/*
 * Make *p hold need elements of elem bytes (need <= max): doubling from
 * FIRST_ALLOC, never past max. 0 or DML_ENOMEM (*p unchanged).
 */
static int grow(void **p, uint64_t *cap, uint64_t need, size_t elem, uint64_t max)
{
	uint64_t next = *cap ? *cap : FIRST_ALLOC;
	void *q;

	if (need <= *cap)
		return 0;
	while (next < need)
		next *= 2;
	if (next > max)
		next = max;
	if (next > SIZE_MAX / elem || !(q = realloc(*p, (size_t)next * elem)))
		return DML_ENOMEM;
	*p = q;
	*cap = next;
	return 0;
}

/* ---- reading lines ------------------------------------------------------- */

static int reader_open(struct reader *r, const char *path)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);

	if (fd < 0)
		return rfail(r, DML_EIO, 0, "cannot open: %s", strerror(errno));
	r->gz = gzdopen(fd, "rb");
	if (!r->gz) {
		close(fd);
		return rfail(r, DML_EIO, 0, "cannot open: out of memory for zlib");
	}
	gzbuffer(r->gz, 1 << 16);
	r->chunk = malloc(CHUNK);
	if (!r->chunk)
		return rfail(r, DML_ENOMEM, 0, "out of memory");
	return 0;
}

/* A short read: the end, a cut-off gzip stream, or corruption. */
static int reader_gz_check(struct reader *r)
{
	int zerr;
	const char *msg = gzerror(r->gz, &zerr);

	if (zerr == Z_OK)
		return 0;
	if (zerr == Z_BUF_ERROR) {
		r->cut = 1;
		return 0;
	}
	if (zerr == Z_ERRNO)
		return rfail(r, DML_EIO, 1, "read: %s", strerror(errno));
	if (zerr == Z_MEM_ERROR)
		return rfail(r, DML_ENOMEM, 1, "gzip: out of memory");
	return rfail(r, DML_ECONF, 1, "gzip: %s", msg ? msg : "error");
}

static int reader_fill(struct reader *r)
{
	int n = gzread(r->gz, r->chunk, (unsigned)CHUNK);
	int rc;

	if (n < 0 || (size_t)n < CHUNK) {
		if ((rc = reader_gz_check(r)) != 0)
			return rc;
	}
	r->clen = n > 0 ? (size_t)n : 0;
	r->cpos = 0;
	if (r->clen == 0) {
		r->eof = 1;
		if (r->cut)
			return rfail(r, DML_ECONF, 1, "gzip stream cut short");
	}
	return 0;
}

/*
 * The next line into r->line (*got = 0 at the end of the file). A last
 * line without a newline counts. Lines over DML_LIBSVM_LINE_MAX are
 * refused before they are stored whole.
 */
static int reader_line(struct reader *r, int *got)
{
	int rc;

	*got = 0;
	r->llen = 0;
	r->lineno++;
	for (;;) {
		char *nl;
		size_t take;
		uint64_t cap = r->lcap;

		if (r->cpos == r->clen) {
			if (!r->eof && (rc = reader_fill(r)) != 0)
				return rc;
			if (r->eof) {
				*got = r->llen > 0;
				return 0;
			}
		}
		nl = memchr(r->chunk + r->cpos, '\n', r->clen - r->cpos);
		take = nl ? (size_t)(nl - (r->chunk + r->cpos)) : r->clen - r->cpos;
		if (r->llen + take > DML_LIBSVM_LINE_MAX)
			return rfail(r, DML_ECONF, 1, "line over %zu bytes", DML_LIBSVM_LINE_MAX);
		if (grow((void **)&r->line, &cap, r->llen + take + 1, 1,
			 DML_LIBSVM_LINE_MAX + 1) != 0)
			return rfail(r, DML_ENOMEM, 1, "out of memory for the line");
		r->lcap = (size_t)cap;
		memcpy(r->line + r->llen, r->chunk + r->cpos, take);
		r->llen += take;
		r->cpos += take + (nl != NULL);
		if (nl) {
			*got = 1;
			return 0;
		}
	}
}

/* ---- parsing a line ------------------------------------------------------ */

static int is_space(char c)
{
	return c == ' ' || c == '\t' || c == '\r' || c == '\v' || c == '\f';
}

/* The next token of [*p, end) as [*b, *e); 0 when there is none. */
static int token_next(const char **p, const char *end, const char **b, const char **e)
{
	const char *q = *p;

	while (q < end && is_space(*q))
		q++;
	if (q == end)
		return 0;
	*b = q;
	while (q < end && !is_space(*q))
		q++;
	*e = q;
	*p = q;
	return 1;
}

/* A float token in full: strtod on a terminated copy, all of it consumed. */
static int parse_double(const char *b, const char *e, double *out)
{
	char buf[TOKEN_MAX + 1];
	char *end;
	size_t n = (size_t)(e - b);

	if (n == 0 || n > TOKEN_MAX)
		return -1;
	memcpy(buf, b, n);
	buf[n] = '\0';
	/* strtod would skip leading spaces; a token has none, but a NUL byte
	 * inside it ends the copy early, which the length check catches. */
	errno = 0;
	*out = strtod(buf, &end);
	return end == buf + n ? 0 : -1;
}

/* A decimal uint64, digits only. */
static int parse_u64(const char *b, const char *e, uint64_t *out)
{
	uint64_t v = 0;

	if (b == e)
		return -1;
	for (; b < e; b++) {
		if (*b < '0' || *b > '9' || v > (UINT64_MAX - (uint64_t)(*b - '0')) / 10)
			return -1;
		v = v * 10 + (uint64_t)(*b - '0');
	}
	*out = v;
	return 0;
}

/* The label as 0/1 or a class; the file's kind of labels is kept in r. */
static int parse_label(struct reader *r, const char *b, const char *e, float *label)
{
	int len = (int)(e - b < 32 ? e - b : 32);
	double v;
	int64_t k;

	if (parse_double(b, e, &v) != 0 || !isfinite(v) || v != floor(v) || v < -1 ||
	    v >= DML_LIBSVM_MAX_CLASSES)
		return rfail(r, DML_ECONF, 1, "bad label '%.*s' (-1/+1, or a class 0..%u)",
			     len, b, DML_LIBSVM_MAX_CLASSES - 1);
	k = (int64_t)v;
	if (k == -1 && (r->seen_zero || r->max_label > 1))
		return rfail(r, DML_ECONF, 1, "label -1 in a file of %s labels",
			     r->max_label > 1 ? "class" : "0/1");
	if ((k == 0 || k > 1) && r->seen_minus)
		return rfail(r, DML_ECONF, 1, "label %" PRId64 " in a file of -1/+1 labels", k);
	r->seen_minus |= k == -1;
	r->seen_zero |= k == 0;
	if (k > r->max_label)
		r->max_label = k;
	*label = k < 0 ? 0.0f : (float)k;
	return 0;
}

static int parse_pair(struct reader *r, const char *b, const char *e)
{
	const char *colon = memchr(b, ':', (size_t)(e - b));
	int len = (int)(e - b < 40 ? e - b : 40);
	uint64_t id, cap = r->pcap;
	double v;

	if (!colon)
		return rfail(r, DML_ECONF, 1, "bad pair '%.*s' (not IDX:VAL)", len, b);
	if (parse_u64(b, colon, &id) != 0)
		return rfail(r, DML_ECONF, 1, "bad pair '%.*s' (IDX is not a decimal uint64)",
			     len, b);
	if (parse_double(colon + 1, e, &v) != 0)
		return rfail(r, DML_ECONF, 1, "bad pair '%.*s' (VAL is not a number)", len, b);
	if (!isfinite(v) || fabs(v) > FLT_MAX)
		return rfail(r, DML_ECONF, 1, "value of '%.*s' is not a finite float", len, b);
	/* A line of at most 1 MiB holds at most half as many pairs. */
	if (grow((void **)&r->pairs, &cap, r->npairs + 1, sizeof(*r->pairs),
		 DML_LIBSVM_LINE_MAX / 2 + 1) != 0)
		return rfail(r, DML_ENOMEM, 1, "out of memory for the record");
	r->pcap = (size_t)cap;
	r->pairs[r->npairs++] = (struct pair){ .id = id, .val = v };
	return 0;
}

static int pair_cmp(const void *x, const void *y)
{
	uint64_t a = ((const struct pair *)x)->id, b = ((const struct pair *)y)->id;

	return a < b ? -1 : a > b;
}

/* Sort the record's pairs by id and sum those of one id. */
static int pairs_merge(struct reader *r)
{
	size_t n = 0;

	for (size_t i = 1; i < r->npairs; i++) {
		if (r->pairs[i].id <= r->pairs[i - 1].id) {
			qsort(r->pairs, r->npairs, sizeof(*r->pairs), pair_cmp);
			break;
		}
	}
	for (size_t i = 0; i < r->npairs; i++) {
		if (n && r->pairs[n - 1].id == r->pairs[i].id)
			r->pairs[n - 1].val += r->pairs[i].val;
		else
			r->pairs[n++] = r->pairs[i];
		if (fabs(r->pairs[n - 1].val) > FLT_MAX)
			return rfail(r, DML_ECONF, 1, "the values of id %" PRIu64 " sum to more "
				     "than a float holds", r->pairs[n - 1].id);
	}
	r->npairs = n;
	return 0;
}

/* The record of the line in progress joins d. */
static int record_add(struct reader *r, struct dml_libsvm *d, float label)
{
	uint64_t nnz = d->offsets ? d->offsets[d->count] : 0;
	uint64_t rcap = r->rcap;

	if (d->count >= DML_LIBSVM_MAX_RECORDS)
		return rfail(r, DML_ECONF, 1, "more than %" PRIu64 " records",
			     DML_LIBSVM_MAX_RECORDS);
	if (nnz + r->npairs > DML_LIBSVM_MAX_NNZ)
		return rfail(r, DML_ECONF, 1, "more than %" PRIu64 " entries in all",
			     DML_LIBSVM_MAX_NNZ);
	if (grow((void **)&d->offsets, &rcap, d->count + 2, sizeof(*d->offsets),
		 DML_LIBSVM_MAX_RECORDS + 1) != 0)
		return rfail(r, DML_ENOMEM, 1, "out of memory for the records");
	rcap = r->rcap;
	if (grow((void **)&d->labels, &rcap, d->count + 2, sizeof(*d->labels),
		 DML_LIBSVM_MAX_RECORDS + 1) != 0)
		return rfail(r, DML_ENOMEM, 1, "out of memory for the records");
	r->rcap = rcap;
	rcap = r->ecap;
	if (grow((void **)&d->ids, &rcap, nnz + r->npairs, sizeof(*d->ids),
		 DML_LIBSVM_MAX_NNZ) != 0)
		return rfail(r, DML_ENOMEM, 1, "out of memory for the entries");
	rcap = r->ecap;
	if (grow((void **)&d->vals, &rcap, nnz + r->npairs, sizeof(*d->vals),
		 DML_LIBSVM_MAX_NNZ) != 0)
		return rfail(r, DML_ENOMEM, 1, "out of memory for the entries");
	r->ecap = rcap;
	if (d->count == 0)
		d->offsets[0] = 0;
	for (size_t i = 0; i < r->npairs; i++) {
		d->ids[nnz + i] = r->pairs[i].id;
		d->vals[nnz + i] = (float)r->pairs[i].val;
	}
	d->labels[d->count++] = label;
	d->offsets[d->count] = nnz + r->npairs;
	if (r->npairs > d->max_nnz)
		d->max_nnz = r->npairs;
	return 0;
}

/* One line: nothing (empty, a comment) or a record. */
static int line_parse(struct reader *r, struct dml_libsvm *d)
{
	const char *hash = memchr(r->line, '#', r->llen);
	const char *p = r->line, *end = hash ? hash : r->line + r->llen, *b, *e;
	float label = 0;
	int rc;

	if (!token_next(&p, end, &b, &e))
		return 0;
	if ((rc = parse_label(r, b, e, &label)) != 0)
		return rc;
	r->npairs = 0;
	while (token_next(&p, end, &b, &e))
		if ((rc = parse_pair(r, b, e)) != 0)
			return rc;
	if ((rc = pairs_merge(r)) != 0)
		return rc;
	return record_add(r, d, label);
}

/* ---- the file ------------------------------------------------------------ */

int dml_libsvm_load(const char *path, struct dml_libsvm *out, char *err, size_t errlen)
{
	struct reader r = { .path = path ? path : "(null)", .err = err, .errlen = errlen };
	int rc, got;

	if (err && errlen)
		err[0] = '\0';
	if (out)
		memset(out, 0, sizeof(*out));
	if (!path || !out)
		return rfail(&r, DML_EINVAL, 0, "no file or no result given");
	rc = reader_open(&r, path);
	while (!rc && !(rc = reader_line(&r, &got)) && got)
		rc = line_parse(&r, out);
	if (!rc && out->count == 0)
		rc = rfail(&r, DML_ECONF, 0, "no records");
	if (!rc)
		out->classes = r.max_label > 1 ? (uint32_t)r.max_label + 1 : 2;
	if (r.gz)
		gzclose_r(r.gz);
	free(r.chunk);
	free(r.line);
	free(r.pairs);
	if (rc)
		dml_libsvm_free(out);
	return rc;
}

void dml_libsvm_free(struct dml_libsvm *d)
{
	if (!d)
		return;
	free(d->offsets);
	free(d->ids);
	free(d->vals);
	free(d->labels);
	memset(d, 0, sizeof(*d));
}
