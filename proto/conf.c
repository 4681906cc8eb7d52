/*
 * The configuration parser of conf.h: one table of options drives parsing,
 * --help and the printing of the effective configuration (STYLE #10).
 *
 * One pass over the text. A section header selects a section (a repeated one
 * appends a zeroed element to its array in root and applies that section's
 * defaults to it); a key line is looked up in the table, converted with the
 * strict parsers of util.c, checked by the option's validator and stored.
 * Then come the required keys and the schema's cross-field check. The first
 * problem stops the parse and is reported as "file:line: message".
 *
 * Everything in a config file is distrusted: lines are bounded, NUL and
 * control bytes are refused, numbers never wrap, and nothing a file contains
 * may crash the parser or reach an assert. This file must never log, exit or
 * print on its own: every problem goes back to the caller in err.
 *
 * Choices the header leaves open:
 *  - A non-repeated section may appear once; a second header is an error.
 *  - bool and enum values are matched case-insensitively (keys and section
 *    names are not); bool takes yes/no, true/false, on/off, 1/0.
 *  - A trailing CR is dropped so that files edited on Windows still load.
 *  - A bad default or an inconsistent table is a bug of the program, not of
 *    the file: it returns DML_EINVAL with the reason in err.
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
#include <strings.h>
#include <unistd.h>

#include "conf.h"
#include "dml_error.h"
#include "util.h"

#define CONF_LINE_MAX 4096         /* bytes per line, newline excluded */
#define CONF_FILE_MAX (16u << 20)  /* a config file is small; refuse a huge one */
#define CONF_HOST_MAX 256          /* DNS names are at most 253 bytes */
#define CONF_QUOTE_MAX 64          /* bytes of file text echoed in one message */
#define CONF_MSG_MAX 512

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

struct conf_parser {
	const struct dml_conf_schema *schema;
	const char *name;
	void *root;
	char *err;
	size_t errlen;
	size_t *opt_sec;        /* per option: index of its section */
	size_t *set_line;       /* per option: line that set it in this instance */
	size_t *section_line;   /* per section: line of its header, 0 if not seen */
	size_t *capacity;       /* per repeated section: elements allocated */
	const struct dml_conf_section *cur; /* section being filled, NULL before any */
	size_t cur_sec;         /* its index in schema->sections */
	size_t cur_elem;        /* repeated: index of the element being filled */
	size_t cur_line;        /* line of the current header */
	/* first repeated element found without one of its required keys */
	const struct dml_conf_option *miss_opt;
	const char *miss_sec;
	size_t miss_elem;
	size_t miss_line;
};

static const struct {
	const char *word;
	int value;
} conf_bool_words[] = {
	{ "yes", 1 }, { "no", 0 }, { "true", 1 }, { "false", 0 },
	{ "on", 1 }, { "off", 0 }, { "1", 1 }, { "0", 0 },
};

/* Writes "prefix: message" into err; the prefix is "name:line" or "name". */
static void conf_vreport(char *err, size_t errlen, const char *name, size_t line,
			 const char *fmt, va_list ap)
{
	char msg[CONF_MSG_MAX];

	if (!err || errlen == 0)
		return;
	vsnprintf(msg, sizeof(msg), fmt, ap);
	if (line)
		snprintf(err, errlen, "%s:%zu: %s", name, line, msg);
	else
		snprintf(err, errlen, "%s: %s", name, msg);
}

static void conf_report(char *err, size_t errlen, const char *name, size_t line,
			const char *fmt, ...) __attribute__((format(printf, 5, 6)));

static void conf_report(char *err, size_t errlen, const char *name, size_t line,
			const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	conf_vreport(err, errlen, name, line, fmt, ap);
	va_end(ap);
}

static int conf_fail(struct conf_parser *p, size_t line, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* Reports a problem of the file (line 0: of the whole file); DML_ECONF. */
static int conf_fail(struct conf_parser *p, size_t line, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	conf_vreport(p->err, p->errlen, p->name, line, fmt, ap);
	va_end(ap);
	return DML_ECONF;
}

/*
 * Copies file text for a message: at most CONF_QUOTE_MAX bytes, control
 * bytes shown as '?', "..." when cut. Returns buf for use in an argument list.
 */
static const char *conf_quote(const char *s, char *buf, size_t len)
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

static int conf_is_ident(const char *s)
{
	if (!s || !*s)
		return 0;
	for (; *s; s++) {
		if (!((*s >= 'a' && *s <= 'z') || (*s >= '0' && *s <= '9') || *s == '_'))
			return 0;
	}
	return 1;
}

static int conf_is_numeric(enum dml_conf_type t)
{
	return t == DML_CONF_U64 || t == DML_CONF_U32 || t == DML_CONF_I64 ||
	       t == DML_CONF_DOUBLE || t == DML_CONF_SIZE;
}

static int conf_is_string(enum dml_conf_type t)
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
static void conf_format_size(uint64_t v, char *buf, size_t len)
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
static void conf_format_double(double v, char *buf, size_t len)
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
		conf_format_size(ulo, a, sizeof(a));
		conf_format_size(uhi, b, sizeof(b));
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
static void conf_describe(const struct dml_conf_option *o, char *buf, size_t len)
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

	conf_quote(text, q, sizeof(q));
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
		conf_describe(o, desc, sizeof(desc));
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
			 conf_quote(text, q, sizeof(q)));
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
			 conf_quote(text, q, sizeof(q)), desc);
		return DML_ECONF;
	case DML_CONF_HOSTPORT:
		if (dml_parse_hostport(text, host, sizeof(host), &port, 1)) {
			snprintf(why, whylen, "'%s' is not host:port",
				 conf_quote(text, q, sizeof(q)));
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

static void *conf_field(void *base, const struct dml_conf_option *o)
{
	return (char *)base + o->offset;
}

/* Moves v into the field, freeing the string it replaces. */
static void conf_value_store(const struct dml_conf_option *o, void *base,
			     union conf_value *v)
{
	void *field = conf_field(base, o);
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
static int conf_value_set(const struct dml_conf_option *o, void *base, const char *text,
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
					 conf_quote(text, q, sizeof(q)));
			if (conf_is_string(o->type))
				free(v.s);
			return DML_ECONF;
		}
	}
	conf_value_store(o, base, &v);
	return 0;
}

/* Applies the defaults of section si to base (root or a new element). */
static int conf_defaults_apply(struct conf_parser *p, size_t si, void *base)
{
	const struct dml_conf_schema *s = p->schema;
	char why[CONF_MSG_MAX];

	for (size_t i = 0; i < s->noptions; i++) {
		const struct dml_conf_option *o = &s->options[i];

		if (p->opt_sec[i] != si || !o->def)
			continue;
		if (conf_value_set(o, base, o->def, why, sizeof(why))) {
			conf_fail(p, 0, "bad default of %s in [%s]: %s", o->key,
				  o->section, why);
			return DML_EINVAL;
		}
	}
	return 0;
}

static size_t conf_section_find(const struct dml_conf_schema *s, const char *name)
{
	for (size_t i = 0; i < s->nsections; i++) {
		if (strcmp(s->sections[i].name, name) == 0)
			return i;
	}
	return SIZE_MAX;
}

/* The table must make sense before any of it is trusted; DML_EINVAL if not. */
static int conf_schema_check(struct conf_parser *p)
{
	const struct dml_conf_schema *s = p->schema;

	if ((s->nsections && !s->sections) || (s->noptions && !s->options)) {
		conf_fail(p, 0, "schema without its tables");
		return DML_EINVAL;
	}
	for (size_t i = 0; i < s->nsections; i++) {
		const struct dml_conf_section *sec = &s->sections[i];

		if (!conf_is_ident(sec->name) ||
		    (sec->repeated && sec->elem_size == 0) ||
		    conf_section_find(s, sec->name) != i) {
			conf_fail(p, 0, "schema: bad section #%zu", i);
			return DML_EINVAL;
		}
	}
	for (size_t i = 0; i < s->noptions; i++) {
		const struct dml_conf_option *o = &s->options[i];

		p->opt_sec[i] = o->section ? conf_section_find(s, o->section) : SIZE_MAX;
		if (!conf_is_ident(o->key) || p->opt_sec[i] == SIZE_MAX ||
		    (unsigned)o->type > DML_CONF_HOSTPORT ||
		    (o->type == DML_CONF_ENUM && (!o->choices || !o->choices[0]))) {
			conf_fail(p, 0, "schema: bad option #%zu (%s)", i,
				  o->key ? o->key : "no key");
			return DML_EINVAL;
		}
	}
	return 0;
}

static void *conf_ptr_get(const void *root, size_t offset)
{
	void *v;

	memcpy(&v, (const char *)root + offset, sizeof(v));
	return v;
}

static size_t conf_count_get(const void *root, size_t offset)
{
	size_t n;

	memcpy(&n, (const char *)root + offset, sizeof(n));
	return n;
}

static void *conf_elem(const void *root, const struct dml_conf_section *sec, size_t i)
{
	return (char *)conf_ptr_get(root, sec->array_offset) + i * sec->elem_size;
}

/* Appends a zeroed element to repeated section si; the array grows by
 * doubling, so a file of many [table]s costs linear time. */
static int conf_elem_append(struct conf_parser *p, size_t si, size_t line)
{
	const struct dml_conf_section *sec = &p->schema->sections[si];
	char *root = p->root;
	void *arr = conf_ptr_get(root, sec->array_offset);
	size_t n = conf_count_get(root, sec->count_offset);

	if (n >= p->capacity[si]) {
		size_t cap = n ? 2 * n : 4;

		if (cap < n || cap > SIZE_MAX / sec->elem_size)
			return conf_fail(p, line, "too many [%s] sections", sec->name);
		arr = dml_xrealloc(arr, cap * sec->elem_size);
		p->capacity[si] = cap;
		memcpy(root + sec->array_offset, &arr, sizeof(arr));
	}
	memset((char *)arr + n * sec->elem_size, 0, sec->elem_size);
	p->cur_elem = n++;
	memcpy(root + sec->count_offset, &n, sizeof(n));
	return 0;
}

/* Ends the current section instance: a repeated element is checked for its
 * required keys (the first one lacking any is reported after parsing) and its
 * keys become settable again for the next element. */
static void conf_instance_close(struct conf_parser *p)
{
	const struct dml_conf_schema *s = p->schema;

	if (!p->cur || !p->cur->repeated)
		return;
	for (size_t i = 0; i < s->noptions; i++) {
		if (p->opt_sec[i] != p->cur_sec)
			continue;
		if (!s->options[i].def && !p->set_line[i] && !p->miss_opt) {
			p->miss_opt = &s->options[i];
			p->miss_sec = p->cur->name;
			p->miss_elem = p->cur_elem + 1;
			p->miss_line = p->cur_line;
		}
		p->set_line[i] = 0;
	}
}

static char *conf_trim(char *s)
{
	char *e;

	while (*s == ' ' || *s == '\t')
		s++;
	e = s + strlen(s);
	while (e > s && (e[-1] == ' ' || e[-1] == '\t'))
		e--;
	*e = '\0';
	return s;
}

/* A trimmed line that starts with '['. */
static int conf_line_header(struct conf_parser *p, char *line, size_t lineno)
{
	size_t len = strlen(line), si;
	char q[CONF_QUOTE_MAX + 8];
	char *name;
	int rc;

	if (len < 2 || line[len - 1] != ']')
		return conf_fail(p, lineno, "bad section header, expected [name]");
	line[len - 1] = '\0';
	name = conf_trim(line + 1);
	si = conf_section_find(p->schema, name);
	if (si == SIZE_MAX)
		return conf_fail(p, lineno, "unknown section [%s]",
				 conf_quote(name, q, sizeof(q)));
	conf_instance_close(p);
	p->cur = &p->schema->sections[si];
	p->cur_sec = si;
	p->cur_line = lineno;
	if (!p->cur->repeated) {
		if (p->section_line[si])
			return conf_fail(p, lineno, "section [%s] appears twice", name);
		p->section_line[si] = lineno;
		return 0;
	}
	rc = conf_elem_append(p, si, lineno);
	if (rc)
		return rc;
	return conf_defaults_apply(p, si, conf_elem(p->root, p->cur, p->cur_elem));
}

/* A trimmed line that is neither blank, a comment nor a header. */
static int conf_line_key(struct conf_parser *p, char *line, size_t lineno)
{
	const struct dml_conf_schema *s = p->schema;
	char q[CONF_QUOTE_MAX + 8], why[CONF_MSG_MAX];
	char *eq = strchr(line, '='), *key, *value;
	void *base;
	size_t oi;

	if (!eq)
		return conf_fail(p, lineno, "expected 'key = value' or '[section]'");
	*eq = '\0';
	key = conf_trim(line);
	value = conf_trim(eq + 1);
	if (!*key)
		return conf_fail(p, lineno, "missing key before '='");
	if (!p->cur)
		return conf_fail(p, lineno, "key outside any [section]");
	for (oi = 0; oi < s->noptions; oi++) {
		if (p->opt_sec[oi] == p->cur_sec && strcmp(s->options[oi].key, key) == 0)
			break;
	}
	if (oi == s->noptions)
		return conf_fail(p, lineno, "unknown key '%s' in [%s]",
				 conf_quote(key, q, sizeof(q)), p->cur->name);
	if (p->set_line[oi])
		return conf_fail(p, lineno, "duplicate key '%s' (first set on line %zu)",
				 key, p->set_line[oi]);
	base = p->cur->repeated ? conf_elem(p->root, p->cur, p->cur_elem) : p->root;
	if (conf_value_set(&s->options[oi], base, value, why, sizeof(why)))
		return conf_fail(p, lineno, "%s: %s", key, why);
	p->set_line[oi] = lineno;
	return 0;
}

/* One line without its newline; len bytes, NUL-terminated at len. */
static int conf_line(struct conf_parser *p, char *line, size_t len, size_t lineno)
{
	char *t;

	for (size_t i = 0; i < len; i++) {
		unsigned char c = (unsigned char)line[i];

		if (c == 0)
			return conf_fail(p, lineno, "NUL byte");
		if ((c < 0x20 && c != '\t') || c == 0x7f)
			return conf_fail(p, lineno, "control character 0x%02x", c);
	}
	t = conf_trim(line);
	if (!*t || *t == '#' || *t == ';')
		return 0;
	if (*t == '[')
		return conf_line_header(p, t, lineno);
	return conf_line_key(p, t, lineno);
}

static int conf_text_parse(struct conf_parser *p, const char *text, size_t len)
{
	char buf[CONF_LINE_MAX + 1];
	size_t pos = 0, lineno = 0;
	int rc;

	while (pos < len) {
		const char *start = text + pos;
		const char *nl = memchr(start, '\n', len - pos);
		size_t n = nl ? (size_t)(nl - start) : len - pos;

		lineno++;
		pos += n + (nl != NULL);
		if (n > 0 && start[n - 1] == '\r')
			n--;
		if (n > CONF_LINE_MAX)
			return conf_fail(p, lineno, "line longer than %d bytes",
					 CONF_LINE_MAX);
		memcpy(buf, start, n);
		buf[n] = '\0';
		rc = conf_line(p, buf, n, lineno);
		if (rc)
			return rc;
	}
	conf_instance_close(p);
	return 0;
}

/* After the last line: required keys, then the cross-field check. */
static int conf_finish(struct conf_parser *p)
{
	const struct dml_conf_schema *s = p->schema;
	char why[CONF_MSG_MAX];

	for (size_t i = 0; i < s->noptions; i++) {
		const struct dml_conf_option *o = &s->options[i];

		if (!s->sections[p->opt_sec[i]].repeated && !o->def && !p->set_line[i])
			return conf_fail(p, 0, "missing required key '%s' in [%s]",
					 o->key, o->section);
	}
	if (p->miss_opt)
		return conf_fail(p, 0, "[%s] #%zu (line %zu): missing required key '%s'",
				 p->miss_sec, p->miss_elem, p->miss_line,
				 p->miss_opt->key);
	if (s->check) {
		why[0] = '\0';
		if (s->check(p->root, why, sizeof(why)) != 0)
			return conf_fail(p, 0, "%s",
					 why[0] ? why : "invalid configuration");
	}
	return 0;
}

static int conf_run(const struct dml_conf_schema *schema, const char *name,
		    const char *text, size_t len, void *root, char *err, size_t errlen)
{
	struct conf_parser p = {
		.schema = schema, .name = name ? name : "(config)", .root = root,
		.err = err, .errlen = errlen,
	};
	int rc;

	if (err && errlen)
		err[0] = '\0';
	if (!schema || !root || !text) {
		conf_fail(&p, 0, "invalid argument");
		return DML_EINVAL;
	}
	p.opt_sec = dml_xcalloc(schema->noptions, sizeof(*p.opt_sec));
	p.set_line = dml_xcalloc(schema->noptions, sizeof(*p.set_line));
	p.section_line = dml_xcalloc(schema->nsections, sizeof(*p.section_line));
	p.capacity = dml_xcalloc(schema->nsections, sizeof(*p.capacity));
	rc = conf_schema_check(&p);
	for (size_t i = 0; !rc && i < schema->nsections; i++) {
		if (!schema->sections[i].repeated)
			rc = conf_defaults_apply(&p, i, root);
	}
	if (!rc)
		rc = conf_text_parse(&p, text, len);
	if (!rc)
		rc = conf_finish(&p);
	free(p.opt_sec);
	free(p.set_line);
	free(p.section_line);
	free(p.capacity);
	return rc;
}

/* Reads the whole file, with a NUL after it, into *buf. */
static int conf_file_read(const char *path, char **buf, size_t *len, char *err,
			  size_t errlen)
{
	size_t cap = 4096, n = 0;
	char *b;
	int fd, e;

	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		e = errno;
		conf_report(err, errlen, path, 0, "%s", strerror(e));
		return DML_EIO;
	}
	b = dml_xmalloc(cap + 1);
	for (;;) {
		ssize_t got;

		if (n == cap) {
			/* one byte past the limit tells "too big" from "just fits" */
			if (n > CONF_FILE_MAX) {
				conf_report(err, errlen, path, 0, "larger than %u bytes",
					    CONF_FILE_MAX);
				close(fd);
				free(b);
				return DML_ECONF;
			}
			cap = cap * 2 > CONF_FILE_MAX ? CONF_FILE_MAX + 1 : cap * 2;
			b = dml_xrealloc(b, cap + 1);
		}
		got = read(fd, b + n, cap - n);
		if (got < 0 && errno == EINTR)
			continue;
		if (got < 0) {
			e = errno;
			conf_report(err, errlen, path, 0, "%s", strerror(e));
			close(fd);
			free(b);
			return DML_EIO;
		}
		if (got == 0)
			break;
		n += (size_t)got;
	}
	close(fd);
	b[n] = '\0';
	*buf = b;
	*len = n;
	return 0;
}

int dml_conf_load(const struct dml_conf_schema *schema, const char *path, void *root,
		  char *err, size_t errlen)
{
	char *text;
	size_t len;
	int rc;

	if (err && errlen)
		err[0] = '\0';
	if (!schema || !path || !root) {
		conf_report(err, errlen, path ? path : "(config)", 0,
			    "invalid argument");
		return DML_EINVAL;
	}
	rc = conf_file_read(path, &text, &len, err, errlen);
	if (rc)
		return rc;
	rc = conf_run(schema, path, text, len, root, err, errlen);
	free(text);
	return rc;
}

int dml_conf_parse_string(const struct dml_conf_schema *schema, const char *name,
			  const char *text, void *root, char *err, size_t errlen)
{
	return conf_run(schema, name, text, text ? strlen(text) : 0, root, err, errlen);
}

static int conf_option_in(const struct dml_conf_option *o,
			  const struct dml_conf_section *sec)
{
	return o->section && sec->name && strcmp(o->section, sec->name) == 0;
}

static void conf_strings_free(const struct dml_conf_schema *schema,
			      const struct dml_conf_section *sec, void *base)
{
	for (size_t i = 0; i < schema->noptions; i++) {
		const struct dml_conf_option *o = &schema->options[i];
		char *s = NULL;

		if (!conf_option_in(o, sec) || !conf_is_string(o->type))
			continue;
		memcpy(&s, conf_field(base, o), sizeof(s));
		free(s);
		s = NULL;
		memcpy(conf_field(base, o), &s, sizeof(s));
	}
}

void dml_conf_free(const struct dml_conf_schema *schema, void *root)
{
	if (!schema || !root || (schema->nsections && !schema->sections) ||
	    (schema->noptions && !schema->options))
		return;
	for (size_t si = 0; si < schema->nsections; si++) {
		const struct dml_conf_section *sec = &schema->sections[si];
		size_t n, zero = 0;
		void *null = NULL;

		if (!sec->repeated) {
			conf_strings_free(schema, sec, root);
			continue;
		}
		n = conf_count_get(root, sec->count_offset);
		for (size_t i = 0; i < n; i++)
			conf_strings_free(schema, sec, conf_elem(root, sec, i));
		free(conf_ptr_get(root, sec->array_offset));
		memcpy((char *)root + sec->array_offset, &null, sizeof(null));
		memcpy((char *)root + sec->count_offset, &zero, sizeof(zero));
	}
}

/*
 * The value of a non-string field in file notation; a string field is
 * printed by the caller. 0, or -1 for a value the file cannot express
 * (an enum index outside its choices).
 */
static int conf_value_format(const struct dml_conf_option *o, const void *base,
			     char *buf, size_t len)
{
	const void *field = (const char *)base + o->offset;
	uint64_t u64;
	uint32_t u32;
	int64_t i64;
	double d;
	int i;

	switch (o->type) {
	case DML_CONF_U64:
		memcpy(&u64, field, sizeof(u64));
		snprintf(buf, len, "%" PRIu64, u64);
		return 0;
	case DML_CONF_SIZE:
		memcpy(&u64, field, sizeof(u64));
		conf_format_size(u64, buf, len);
		return 0;
	case DML_CONF_U32:
		memcpy(&u32, field, sizeof(u32));
		snprintf(buf, len, "%" PRIu32, u32);
		return 0;
	case DML_CONF_I64:
		memcpy(&i64, field, sizeof(i64));
		snprintf(buf, len, "%" PRId64, i64);
		return 0;
	case DML_CONF_DOUBLE:
		memcpy(&d, field, sizeof(d));
		conf_format_double(d, buf, len);
		return 0;
	case DML_CONF_BOOL:
		memcpy(&i, field, sizeof(i));
		snprintf(buf, len, "%s", i ? "yes" : "no");
		return 0;
	case DML_CONF_ENUM:
		memcpy(&i, field, sizeof(i));
		for (int k = 0; o->choices && o->choices[k]; k++) {
			if (k == i) {
				snprintf(buf, len, "%s", o->choices[k]);
				return 0;
			}
		}
		snprintf(buf, len, "%d", i);
		return -1;
	default:
		return -1;
	}
}

static void conf_instance_print(const struct dml_conf_schema *schema,
				const struct dml_conf_section *sec, const void *base,
				FILE *out)
{
	char buf[64];

	fprintf(out, "\n[%s]\n", sec->name);
	for (size_t i = 0; i < schema->noptions; i++) {
		const struct dml_conf_option *o = &schema->options[i];
		const char *s;

		if (!conf_option_in(o, sec))
			continue;
		if (conf_is_string(o->type)) {
			memcpy(&s, (const char *)base + o->offset, sizeof(s));
			if (s)
				fprintf(out, "%s = %s\n", o->key, s);
			else
				fprintf(out, "# %s is not set\n", o->key);
		} else if (conf_value_format(o, base, buf, sizeof(buf)) == 0) {
			fprintf(out, "%s = %s\n", o->key, buf);
		} else {
			fprintf(out, "# %s has the invalid value %s\n", o->key, buf);
		}
	}
}

void dml_conf_print(const struct dml_conf_schema *schema, const void *root, FILE *out)
{
	if (!schema || !root || !out || (schema->nsections && !schema->sections) ||
	    (schema->noptions && !schema->options))
		return;
	fprintf(out, "# effective configuration of %s\n",
		schema->program ? schema->program : "dml");
	for (size_t si = 0; si < schema->nsections; si++) {
		const struct dml_conf_section *sec = &schema->sections[si];
		size_t n;

		if (!sec->repeated) {
			conf_instance_print(schema, sec, root, out);
			continue;
		}
		n = conf_count_get(root, sec->count_offset);
		for (size_t i = 0; i < n; i++)
			conf_instance_print(schema, sec, conf_elem(root, sec, i), out);
	}
}

void dml_conf_print_help(const struct dml_conf_schema *schema, FILE *out)
{
	char desc[CONF_MSG_MAX];

	if (!schema || !out || (schema->nsections && !schema->sections) ||
	    (schema->noptions && !schema->options))
		return;
	fprintf(out, "# configuration of %s\n"
		"# `key = value` lines under [section] headers; a line starting\n"
		"# with '#' or ';' is a comment; REQUIRED keys have no default\n",
		schema->program ? schema->program : "dml");
	for (size_t si = 0; si < schema->nsections; si++) {
		const struct dml_conf_section *sec = &schema->sections[si];

		fprintf(out, "\n[%s]%s\n", sec->name, sec->repeated ?
			"   # may appear many times, one per element" : "");
		if (sec->help)
			fprintf(out, "# %s\n", sec->help);
		for (size_t i = 0; i < schema->noptions; i++) {
			const struct dml_conf_option *o = &schema->options[i];

			if (!conf_option_in(o, sec))
				continue;
			conf_describe(o, desc, sizeof(desc));
			fprintf(out, "%s = %s   # %s%s%s\n", o->key,
				o->def ? o->def : "REQUIRED", desc, o->help ? ": " : "",
				o->help ? o->help : "");
		}
	}
}

/* ---- checks shared by the daemons' option tables ------------------------- */

const char *const dml_conf_log_levels[] = { "error", "warn", "info", "debug", NULL };

static int check_hostport(const char *s, int allow_empty, int allow_port0, char *err,
			  size_t errlen)
{
	char host[256];
	uint16_t port;

	if ((allow_empty && *s == '\0') ||
	    dml_parse_hostport(s, host, sizeof(host), &port, allow_port0) == 0)
		return 0;
	snprintf(err, errlen, "'%s' is %shost:port%s", s,
		 allow_empty ? "neither empty nor " : "not ",
		 allow_port0 ? "" : " with a port 1..65535");
	return DML_ECONF;
}

int dml_conf_check_dial(const void *field, char *err, size_t errlen)
{
	return check_hostport(*(const char *const *)field, 0, 0, err, errlen);
}

int dml_conf_check_dial_optional(const void *field, char *err, size_t errlen)
{
	return check_hostport(*(const char *const *)field, 1, 0, err, errlen);
}

int dml_conf_check_listen_optional(const void *field, char *err, size_t errlen)
{
	return check_hostport(*(const char *const *)field, 1, 1, err, errlen);
}

/* Zones name racks and clouds in logs, metrics and dmlctl tables. */
int dml_conf_check_zone(const void *field, char *err, size_t errlen)
{
	const char *z = *(const char *const *)field;
	size_t n = strlen(z);

	if (n > 63) {
		snprintf(err, errlen, "zone is %zu characters long, at most 63 allowed", n);
		return DML_ECONF;
	}
	if (strspn(z, "abcdefghijklmnopqrstuvwxyz" "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
		   "0123456789-_.") != n) {
		snprintf(err, errlen, "zone '%s': only letters, digits, '-', '_' and '.' are "
			 "allowed", z);
		return DML_ECONF;
	}
	return 0;
}
