/*
 * Implementation of util.h. Allocation failure of a control structure is
 * fatal by design: the daemon cannot make progress and says so once.
 */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "proto/dml_error.h"
#include "proto/log.h"
#include "proto/util.h"

static void out_of_memory(size_t n)
{
	dml_err("out of memory allocating %zu bytes", n);
	abort();
}

void *dml_xmalloc(size_t n)
{
	void *p = malloc(n ? n : 1);

	if (!p)
		out_of_memory(n);
	return p;
}

void *dml_xcalloc(size_t count, size_t size)
{
	void *p = calloc(count ? count : 1, size ? size : 1);

	if (!p)
		out_of_memory(count * size);
	return p;
}

void *dml_xrealloc(void *p, size_t n)
{
	void *q = realloc(p, n ? n : 1);

	if (!q)
		out_of_memory(n);
	return q;
}

char *dml_xstrdup(const char *s)
{
	size_t n = strlen(s) + 1;
	char *p = dml_xmalloc(n);

	memcpy(p, s, n);
	return p;
}

uint64_t dml_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

int dml_random_bytes(void *buf, size_t n)
{
	uint8_t *p = buf;

	while (n > 0) {
		ssize_t got = getrandom(p, n, 0);

		if (got < 0) {
			if (errno == EINTR)
				continue;
			return DML_EIO;
		}
		p += got;
		n -= (size_t)got;
	}
	return 0;
}

int dml_parse_u64(const char *s, uint64_t min, uint64_t max, uint64_t *out)
{
	char *end;
	unsigned long long v;

	/* strtoull would skip any white space (newlines too) and wrap "-1" */
	if (!s || !isdigit((unsigned char)*s))
		return DML_EINVAL;
	errno = 0;
	v = strtoull(s, &end, 10);
	if (*end != '\0')
		return DML_EINVAL;
	if (errno == ERANGE || v < min || v > max)
		return DML_ERANGE;
	*out = v;
	return 0;
}

int dml_parse_i64(const char *s, int64_t min, int64_t max, int64_t *out)
{
	char *end;
	long long v;

	if (!s || !isdigit((unsigned char)(*s == '-' ? s[1] : *s)))
		return DML_EINVAL;
	errno = 0;
	v = strtoll(s, &end, 10);
	if (*end != '\0')
		return DML_EINVAL;
	if (errno == ERANGE || v < min || v > max)
		return DML_ERANGE;
	*out = v;
	return 0;
}

int dml_parse_double(const char *s, double min, double max, double *out)
{
	char *end;
	double v;

	if (!s || !*s || isspace((unsigned char)*s))
		return DML_EINVAL;
	errno = 0;
	v = strtod(s, &end);
	if (*end != '\0')
		return DML_EINVAL;
	/* "1e999" is a number too big, not junk; "inf" and "nan" are junk */
	if (errno == ERANGE)
		return DML_ERANGE;
	if (!isfinite(v))
		return DML_EINVAL;
	if (v < min || v > max)
		return DML_ERANGE;
	*out = v;
	return 0;
}

int dml_parse_size(const char *s, uint64_t min, uint64_t max, uint64_t *out)
{
	char buf[32];
	size_t len;
	uint64_t mult = 1, v;
	int rc;

	if (!s)
		return DML_EINVAL;
	len = strlen(s);
	if (len == 0 || len >= sizeof(buf))
		return DML_EINVAL;
	memcpy(buf, s, len + 1);
	switch (buf[len - 1]) {
	case 'k': case 'K': mult = 1ull << 10; break;
	case 'm': case 'M': mult = 1ull << 20; break;
	case 'g': case 'G': mult = 1ull << 30; break;
	default: break;
	}
	if (mult != 1)
		buf[len - 1] = '\0';
	rc = dml_parse_u64(buf, 0, UINT64_MAX / mult, &v);
	if (rc)
		return rc;
	v *= mult;
	if (v < min || v > max)
		return DML_ERANGE;
	*out = v;
	return 0;
}

int dml_parse_hostport(const char *s, char *host, size_t hostlen, uint16_t *port,
		       int allow_zero)
{
	const char *colon;
	uint64_t p;
	size_t hl;
	int bracketed;

	if (!s)
		return DML_EINVAL;
	colon = strrchr(s, ':');
	if (!colon || colon == s)
		return DML_EINVAL;
	hl = (size_t)(colon - s);
	bracketed = s[0] == '[';
	if (bracketed) { /* [::1]:port; the brackets must close right there */
		if (colon[-1] != ']')
			return DML_EINVAL;
		s++;
		hl -= 2;
	}
	if (hl == 0 || hl >= hostlen)
		return DML_EINVAL;
	/* "::1:80" is ambiguous: IPv6 needs brackets; no blanks or stray brackets */
	for (size_t i = 0; i < hl; i++) {
		unsigned char c = (unsigned char)s[i];

		if (c <= ' ' || c == 0x7f || c == '[' || c == ']' ||
		    (c == ':' && !bracketed))
			return DML_EINVAL;
	}
	if (dml_parse_u64(colon + 1, allow_zero ? 0 : 1, 65535, &p))
		return DML_EINVAL;
	memcpy(host, s, hl);
	host[hl] = '\0';
	*port = (uint16_t)p;
	return 0;
}

int dml_fail(int code, char *err, size_t errlen, const char *fmt, ...)
{
	va_list ap;

	if (err && errlen) {
		va_start(ap, fmt);
		vsnprintf(err, errlen, fmt, ap);
		va_end(ap);
	}
	return code;
}
