/*
 * The values of conf.h's options: converting file text into a field of the
 * option's type (strict parsers of util.c, the option's bounds and choices,
 * then its validator), and describing an option and its bounds in the
 * notation a file uses, for messages and --help.
 *
 * Like the parser, this file never logs, exits or prints: every problem is
 * a reason written into the caller's buffer.
 */
#include <errno.h>
#include <float.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "proto/conf.h"
#include "proto/conf_internal.h"
#include "proto/dml_error.h"
#include "proto/util.h"

#define CONF_HOST_MAX 256          /* DNS names are at most 253 bytes */

/* A parsed value before it is stored; every member starts at its address, so
 * a pointer to it is a pointer to the field type for the validator. */
union conf_value {
	char *s;
	uint64_t u64;
	uint32_t u32;
	int64_t i64;
	double d;
	int i;
};

static const struct {
	const char *word;
	int value;
} conf_bool_words[] = {
	{ "yes", 1 }, { "no", 0 }, { "true", 1 }, { "false", 0 },
	{ "on", 1 }, { "off", 0 }, { "1", 1 }, { "0", 0 },
};

/*
 * Copies file text for a message: at most CONF_QUOTE_MAX bytes, control
 * bytes shown as '?', "..." when cut. Returns buf for use in an argument list.
 */
const char *dml_conf_quote(const char *s, char *buf, size_t len)
{
	size_t n = 0;

	while (*s && n < CONF_QUOTE_MAX && n + 4 < len) {
		unsigned char c = (unsigned char)*s++;

		buf[n++] = (c < 0x20 || c == 0x7f) ? '?' : (char)c;
	}
	if (*s && n + 3 < len) {
		memcpy(buf + n, "...", 3);
		n += 3;
	}
	buf[n] = '\0';
	return buf;
}

static int conf_is_numeric(enum dml_conf_type t)
{
	return t == DML_CONF_U64 || t == DML_CONF_U32 || t == DML_CONF_I64 ||
	       t == DML_CONF_DOUBLE || t == DML_CONF_SIZE;
}

int dml_conf_is_string(enum dml_conf_type t)
{
	return t == DML_CONF_STRING || t == DML_CONF_HOSTPORT;
}

/*
 * The bounds of an unsigned option within a type of the given width. The
 * table holds doubles: min == max == 0 means the whole type, and a bound at
 * or past 2^bits (UINT64_MAX as a double is 2^64) clamps to the type's
 * maximum instead of overflowing the conversion.
 */
static void conf_ubounds(const struct dml_conf_option *o, int bits, uint64_t *lo,
			 uint64_t *hi)
{
	double cap = ldexp(1.0, bits);
	uint64_t tmax = bits >= 64 ? UINT64_MAX : (UINT64_C(1) << bits) - 1;
	double c = ceil(o->min), f = floor(o->max);

	*lo = 0;
	*hi = tmax;
	if (o->min == 0 && o->max == 0)
		return;
	if (c > 0)
		*lo = c >= cap ? tmax : (uint64_t)c;
	if (f < cap)
		*hi = f < 0 ? 0 : (uint64_t)f;
}

static void conf_ibounds(const struct dml_conf_option *o, int64_t *lo, int64_t *hi)
{
	const double cap = 0x1p63;
	double c = ceil(o->min), f = floor(o->max);

	*lo = INT64_MIN;
	*hi = INT64_MAX;
	if (o->min == 0 && o->max == 0)
		return;
	if (c > -cap)
		*lo = c >= cap ? INT64_MAX : (int64_t)c;
	if (f < cap)
		*hi = f <= -cap ? INT64_MIN : (int64_t)f;
}

static void conf_dbounds(const struct dml_conf_option *o, double *lo, double *hi)
{
	*lo = o->min;
	*hi = o->max;
	if (o->min == 0 && o->max == 0) {
		*lo = -DBL_MAX;
		*hi = DBL_MAX;
	}
}

/* A size with the largest suffix that keeps it exact, so it parses back. */
void dml_conf_format_size(uint64_t v, char *buf, size_t len)
{
	static const char suffix[] = { 'G', 'M', 'K' };

	for (int i = 0; i < 3 && v; i++) {
		unsigned shift = 30u - 10u * (unsigned)i;

		if ((v & ((UINT64_C(1) << shift) - 1)) == 0) {
			snprintf(buf, len, "%" PRIu64 "%c", v >> shift, suffix[i]);
			return;
		}
	}
	snprintf(buf, len, "%" PRIu64, v);
}

/* The shortest %g form that reads back as the same double. */
void dml_conf_format_double(double v, char *buf, size_t len)
{
	for (int prec = 15; prec <= 17; prec++) {
		snprintf(buf, len, "%.*g", prec, v);
		if (strtod(buf, NULL) == v)
			return;
	}
}

/* "lo..hi" for a numeric option, in the type's own notation. */
static void conf_format_range(const struct dml_conf_option *o, char *buf, size_t len)
{
	char a[40], b[40];
	uint64_t ulo, uhi;
	int64_t ilo, ihi;
	double dlo, dhi;

	switch (o->type) {
	case DML_CONF_U32:
	case DML_CONF_U64:
		conf_ubounds(o, o->type == DML_CONF_U32 ? 32 : 64, &ulo, &uhi);
		snprintf(buf, len, "%" PRIu64 "..%" PRIu64, ulo, uhi);
		return;
	case DML_CONF_SIZE:
		conf_ubounds(o, 64, &ulo, &uhi);
		dml_conf_format_size(ulo, a, sizeof(a));
		dml_conf_format_size(uhi, b, sizeof(b));
		snprintf(buf, len, "%s..%s", a, b);
		return;
	case DML_CONF_I64:
		conf_ibounds(o, &ilo, &ihi);
		snprintf(buf, len, "%" PRId64 "..%" PRId64, ilo, ihi);
		return;
	case DML_CONF_DOUBLE:
		conf_dbounds(o, &dlo, &dhi);
		snprintf(buf, len, "%g..%g", dlo, dhi);
		return;
	default:
		snprintf(buf, len, "?");
		return;
	}
}

static void conf_format_choices(const struct dml_conf_option *o, char *buf, size_t len)
{
	size_t n = 0;

	buf[0] = '\0';
	for (size_t i = 0; o->choices && o->choices[i] && n < len; i++) {
		int w = snprintf(buf + n, len - n, "%s%s", i ? ", " : "", o->choices[i]);

		if (w < 0)
			break;
		n += (size_t)w;
	}
}

/* What a value of this option looks like: "u32, 1..256", "bool, yes/no"... */
void dml_conf_describe(const struct dml_conf_option *o, char *buf, size_t len)
{
	static const char *const names[] = {
		[DML_CONF_STRING] = "string", [DML_CONF_U64] = "u64",
		[DML_CONF_U32] = "u32", [DML_CONF_I64] = "i64",
		[DML_CONF_DOUBLE] = "double",
		[DML_CONF_SIZE] = "size (K, M or G suffix)",
		[DML_CONF_BOOL] = "bool, yes/no", [DML_CONF_ENUM] = "enum",
		[DML_CONF_HOSTPORT] = "host:port",
	};
	char extra[CONF_MSG_MAX / 2];
	const char *name = (unsigned)o->type < DML_ARRAY_LEN(names) ?
			   names[o->type] : "?";

	if (conf_is_numeric(o->type) && !(o->min == 0 && o->max == 0)) {
		conf_format_range(o, extra, sizeof(extra));
		snprintf(buf, len, "%s, %s", name, extra);
	} else if (o->type == DML_CONF_ENUM) {
		conf_format_choices(o, extra, sizeof(extra));
		snprintf(buf, len, "%s, one of %s", name, extra);
	} else {
		snprintf(buf, len, "%s", name);
	}
}

/* Why text is not a valid number for o, given the strict parser's code. */
static void conf_number_why(const struct dml_conf_option *o, const char *text, int rc,
			    char *why, size_t whylen)
{
	char q[CONF_QUOTE_MAX + 8], range[96];
	uint64_t u;
	double d;
	int is_unsigned = o->type == DML_CONF_U64 || o->type == DML_CONF_U32 ||
			  o->type == DML_CONF_SIZE;

	dml_conf_quote(text, q, sizeof(q));
	/* "-1" for an unsigned option is a number, just below the range */
	if (rc == DML_ERANGE ||
	    (is_unsigned && text[0] == '-' &&
	     (o->type == DML_CONF_SIZE ? dml_parse_size(text + 1, 0, UINT64_MAX, &u)
				       : dml_parse_u64(text + 1, 0, UINT64_MAX, &u)) !=
		     DML_EINVAL)) {
		conf_format_range(o, range, sizeof(range));
		snprintf(why, whylen, "%s is out of range %s", q, range);
	} else if (o->type != DML_CONF_DOUBLE && strpbrk(text, ".eE") &&
		   dml_parse_double(text, -DBL_MAX, DBL_MAX, &d) == 0) {
		snprintf(why, whylen, "'%s' is not an integer", q);
	} else if (o->type == DML_CONF_SIZE) {
		snprintf(why, whylen, "'%s' is not a size "
			 "(integer with optional K, M or G suffix)", q);
	} else {
		snprintf(why, whylen, "'%s' is not a number", q);
	}
}

/* Converts text for o into v; 0, or DML_ECONF with the reason in why. */
static int conf_value_parse(const struct dml_conf_option *o, const char *text,
			    union conf_value *v, char *why, size_t whylen)
{
	char q[CONF_QUOTE_MAX + 8], desc[CONF_MSG_MAX / 2], host[CONF_HOST_MAX];
	uint64_t ulo, uhi;
	int64_t ilo, ihi;
	double dlo, dhi;
	uint16_t port;
	int rc = 0;

	memset(v, 0, sizeof(*v));
	if (o->type == DML_CONF_STRING) {
		v->s = dml_xstrdup(text);
		return 0;
	}
	if (!*text) {
		dml_conf_describe(o, desc, sizeof(desc));
		snprintf(why, whylen, "empty value, expected %s", desc);
		return DML_ECONF;
	}
	switch (o->type) {
	case DML_CONF_U64:
	case DML_CONF_U32:
		conf_ubounds(o, o->type == DML_CONF_U32 ? 32 : 64, &ulo, &uhi);
		rc = dml_parse_u64(text, ulo, uhi, &v->u64);
		if (!rc && o->type == DML_CONF_U32)
			v->u32 = (uint32_t)v->u64;
		break;
	case DML_CONF_SIZE:
		conf_ubounds(o, 64, &ulo, &uhi);
		rc = dml_parse_size(text, ulo, uhi, &v->u64);
		break;
	case DML_CONF_I64:
		conf_ibounds(o, &ilo, &ihi);
		rc = dml_parse_i64(text, ilo, ihi, &v->i64);
		break;
	case DML_CONF_DOUBLE:
		conf_dbounds(o, &dlo, &dhi);
		rc = dml_parse_double(text, dlo, dhi, &v->d);
		break;
	case DML_CONF_BOOL:
		for (size_t i = 0; i < DML_ARRAY_LEN(conf_bool_words); i++) {
			if (strcasecmp(text, conf_bool_words[i].word) == 0) {
				v->i = conf_bool_words[i].value;
				return 0;
			}
		}
		snprintf(why, whylen, "'%s' is not one of yes, no",
			 dml_conf_quote(text, q, sizeof(q)));
		return DML_ECONF;
	case DML_CONF_ENUM:
		for (int i = 0; o->choices && o->choices[i]; i++) {
			if (strcasecmp(text, o->choices[i]) == 0) {
				v->i = i;
				return 0;
			}
		}
		conf_format_choices(o, desc, sizeof(desc));
		snprintf(why, whylen, "'%s' is not one of %s",
			 dml_conf_quote(text, q, sizeof(q)), desc);
		return DML_ECONF;
	case DML_CONF_HOSTPORT:
		if (dml_parse_hostport(text, host, sizeof(host), &port, 1)) {
			snprintf(why, whylen, "'%s' is not host:port",
				 dml_conf_quote(text, q, sizeof(q)));
			return DML_ECONF;
		}
		v->s = dml_xstrdup(text);
		return 0;
	default:
		snprintf(why, whylen, "option has an unknown type %d", (int)o->type);
		return DML_ECONF;
	}
	if (rc) {
		conf_number_why(o, text, rc, why, whylen);
		return DML_ECONF;
	}
	return 0;
}

void *dml_conf_field(void *base, const struct dml_conf_option *o)
{
	return (char *)base + o->offset;
}

/* Moves v into the field, freeing the string it replaces. */
static void conf_value_store(const struct dml_conf_option *o, void *base,
			     union conf_value *v)
{
	void *field = dml_conf_field(base, o);
	char *old;

	switch (o->type) {
	case DML_CONF_STRING:
	case DML_CONF_HOSTPORT:
		memcpy(&old, field, sizeof(old));
		free(old);
		memcpy(field, &v->s, sizeof(v->s));
		break;
	case DML_CONF_U64:
	case DML_CONF_SIZE:
		memcpy(field, &v->u64, sizeof(v->u64));
		break;
	case DML_CONF_U32:
		memcpy(field, &v->u32, sizeof(v->u32));
		break;
	case DML_CONF_I64:
		memcpy(field, &v->i64, sizeof(v->i64));
		break;
	case DML_CONF_DOUBLE:
		memcpy(field, &v->d, sizeof(v->d));
		break;
	case DML_CONF_BOOL:
	case DML_CONF_ENUM:
		memcpy(field, &v->i, sizeof(v->i));
		break;
	}
}

/* Parses, validates and stores text into o's field of base: 0 or a reason. */
int dml_conf_value_set(const struct dml_conf_option *o, void *base, const char *text,
		       char *why, size_t whylen)
{
	union conf_value v;
	char q[CONF_QUOTE_MAX + 8];

	if (conf_value_parse(o, text, &v, why, whylen))
		return DML_ECONF;
	if (o->validate) {
		why[0] = '\0';
		if (o->validate(&v, why, whylen) != 0) {
			if (!why[0])
				snprintf(why, whylen, "invalid value '%s'",
					 dml_conf_quote(text, q, sizeof(q)));
			if (dml_conf_is_string(o->type))
				free(v.s);
			return DML_ECONF;
		}
	}
	conf_value_store(o, base, &v);
	return 0;
}
