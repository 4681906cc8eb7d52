/*
 * Line reader and token helpers of the text data readers (see data_text.h):
 * the file is read through zlib, which passes a plain file through as it
 * is and inflates one that starts with the gzip magic; lines are cut out
 * of 64 KiB chunks into a buffer that grows with the longest line so far.
 *
 * Must never: let a line grow past the reader's limit before refusing it,
 * take a short read for the end of the file without asking zlib why, or
 * parse a token anywhere but on a bounded, terminated copy of its own.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#include "worker/data_text.h"
#include "proto/dml_error.h"

#define CHUNK ((size_t)1 << 16)
/* The first allocation of each array, in elements. */
#define FIRST_ALLOC 1024

int dml_text_fail(struct dml_text_reader *r, int code, int with_line, const char *fmt, ...)
{
	const char *path = r->path ? r->path : "(null)";
	va_list ap;
	int n;

	if (!r->err || r->errlen == 0)
		return code;
	if (with_line)
		n = snprintf(r->err, r->errlen, "%s: record %" PRIu64 ": ", path, r->lineno);
	else
		n = snprintf(r->err, r->errlen, "%s: ", path);
	if (n < 0 || (size_t)n >= r->errlen)
		return code;
	va_start(ap, fmt);
	vsnprintf(r->err + n, r->errlen - (size_t)n, fmt, ap);
	va_end(ap);
	return code;
}

int dml_text_grow(void **p, uint64_t *cap, uint64_t need, size_t elem, uint64_t max)
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

void dml_text_init(struct dml_text_reader *r, const char *path, size_t line_max, char *err,
		   size_t errlen)
{
	memset(r, 0, sizeof(*r));
	r->path = path;
	r->line_max = line_max;
	r->err = err;
	r->errlen = errlen;
	if (err && errlen)
		err[0] = '\0';
}

int dml_text_open(struct dml_text_reader *r)
{
	int fd;

	if (r->gz || r->chunk)
		return dml_text_fail(r, DML_EINVAL, 0, "opened twice");
	if (!r->path)
		return dml_text_fail(r, DML_EINVAL, 0, "no file given");
	fd = open(r->path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return dml_text_fail(r, DML_EIO, 0, "cannot open: %s", strerror(errno));
	r->gz = gzdopen(fd, "rb");
	if (!r->gz) {
		close(fd);
		return dml_text_fail(r, DML_EIO, 0, "cannot open: out of memory for zlib");
	}
	gzbuffer(r->gz, 1 << 16);
	r->chunk = malloc(CHUNK);
	if (!r->chunk)
		return dml_text_fail(r, DML_ENOMEM, 0, "out of memory");
	return 0;
}

void dml_text_close(struct dml_text_reader *r)
{
	if (r->gz)
		gzclose_r(r->gz);
	free(r->chunk);
	free(r->line);
	r->gz = NULL;
	r->chunk = NULL;
	r->line = NULL;
	r->clen = r->cpos = r->llen = r->lcap = 0;
}

/* A short read: the end, a cut-off gzip stream, or corruption. */
static int gz_check(struct dml_text_reader *r)
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
		return dml_text_fail(r, DML_EIO, 1, "read: %s", strerror(errno));
	if (zerr == Z_MEM_ERROR)
		return dml_text_fail(r, DML_ENOMEM, 1, "gzip: out of memory");
	return dml_text_fail(r, DML_ECONF, 1, "gzip: %s", msg ? msg : "error");
}

static int fill(struct dml_text_reader *r)
{
	int n = gzread(r->gz, r->chunk, (unsigned)CHUNK);
	int rc;

	if (n < 0 || (size_t)n < CHUNK) {
		if ((rc = gz_check(r)) != 0)
			return rc;
	}
	r->clen = n > 0 ? (size_t)n : 0;
	r->cpos = 0;
	if (r->clen == 0) {
		r->eof = 1;
		if (r->cut)
			return dml_text_fail(r, DML_ECONF, 1, "gzip stream cut short");
	}
	return 0;
}

/* Lines over line_max are refused before they are stored whole. */
int dml_text_line(struct dml_text_reader *r, int *got)
{
	int rc;

	*got = 0;
	r->llen = 0;
	r->lineno++;
	if (!r->chunk)
		return dml_text_fail(r, DML_EINVAL, 0, "not open");
	for (;;) {
		char *nl;
		size_t take;
		uint64_t cap = r->lcap;

		if (r->cpos == r->clen) {
			if (!r->eof && (rc = fill(r)) != 0)
				return rc;
			if (r->eof) {
				*got = r->llen > 0;
				return 0;
			}
		}
		nl = memchr(r->chunk + r->cpos, '\n', r->clen - r->cpos);
		take = nl ? (size_t)(nl - (r->chunk + r->cpos)) : r->clen - r->cpos;
		if (r->llen + take > r->line_max)
			return dml_text_fail(r, DML_ECONF, 1, "line over %zu bytes", r->line_max);
		if (dml_text_grow((void **)&r->line, &cap, r->llen + take + 1, 1,
				  (uint64_t)r->line_max + 1) != 0)
			return dml_text_fail(r, DML_ENOMEM, 1, "out of memory for the line");
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

/* ---- tokens -------------------------------------------------------------- */

int dml_text_is_space(char c)
{
	return c == ' ' || c == '\t' || c == '\r' || c == '\v' || c == '\f';
}

int dml_text_token(const char **p, const char *end, const char **b, const char **e)
{
	const char *q = *p;

	while (q < end && dml_text_is_space(*q))
		q++;
	if (q == end)
		return 0;
	*b = q;
	while (q < end && !dml_text_is_space(*q))
		q++;
	*e = q;
	*p = q;
	return 1;
}

/* strtod on a terminated copy, all of it consumed. */
int dml_text_parse_double(const char *b, const char *e, double *out)
{
	char buf[DML_TEXT_TOKEN_MAX + 1];
	char *end;
	size_t n = (size_t)(e - b);

	if (n == 0 || n > DML_TEXT_TOKEN_MAX)
		return DML_EINVAL;
	memcpy(buf, b, n);
	buf[n] = '\0';
	/* strtod would skip leading spaces; a token has none, but a NUL byte
	 * inside it ends the copy early, which the length check catches. */
	errno = 0;
	*out = strtod(buf, &end);
	return end == buf + n ? 0 : DML_EINVAL;
}

int dml_text_parse_u64(const char *b, const char *e, uint64_t *out)
{
	uint64_t v = 0;

	if (b == e)
		return DML_EINVAL;
	for (; b < e; b++) {
		if (*b < '0' || *b > '9' || v > (UINT64_MAX - (uint64_t)(*b - '0')) / 10)
			return DML_EINVAL;
		v = v * 10 + (uint64_t)(*b - '0');
	}
	*out = v;
	return 0;
}
