/*
 * The configuration parser of conf.h: one table of options drives parsing,
 * --help and the printing of the effective configuration (STYLE #10).
 * This file parses; conf_value.c converts and describes values, conf_print.c
 * prints the tables and conf_check.c holds the validators the daemons share.
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

#include "proto/conf.h"
#include "proto/conf_internal.h"
#include "proto/dml_error.h"
#include "proto/util.h"

#define CONF_LINE_MAX 4096         /* bytes per line, newline excluded */
#define CONF_FILE_MAX (16u << 20)  /* a config file is small; refuse a huge one */

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

/* Applies the defaults of section si to base (root or a new element). */
static int conf_defaults_apply(struct conf_parser *p, size_t si, void *base)
{
	const struct dml_conf_schema *s = p->schema;
	char why[CONF_MSG_MAX];

	for (size_t i = 0; i < s->noptions; i++) {
		const struct dml_conf_option *o = &s->options[i];

		if (p->opt_sec[i] != si || !o->def)
			continue;
		if (dml_conf_value_set(o, base, o->def, why, sizeof(why))) {
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

size_t dml_conf_count_get(const void *root, size_t offset)
{
	size_t n;

	memcpy(&n, (const char *)root + offset, sizeof(n));
	return n;
}

void *dml_conf_elem(const void *root, const struct dml_conf_section *sec, size_t i)
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
	size_t n = dml_conf_count_get(root, sec->count_offset);

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
				 dml_conf_quote(name, q, sizeof(q)));
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
	return conf_defaults_apply(p, si, dml_conf_elem(p->root, p->cur, p->cur_elem));
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
				 dml_conf_quote(key, q, sizeof(q)), p->cur->name);
	if (p->set_line[oi])
		return conf_fail(p, lineno, "duplicate key '%s' (first set on line %zu)",
				 key, p->set_line[oi]);
	base = p->cur->repeated ? dml_conf_elem(p->root, p->cur, p->cur_elem) : p->root;
	if (dml_conf_value_set(&s->options[oi], base, value, why, sizeof(why)))
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

int dml_conf_option_in(const struct dml_conf_option *o,
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

		if (!dml_conf_option_in(o, sec) || !dml_conf_is_string(o->type))
			continue;
		memcpy(&s, dml_conf_field(base, o), sizeof(s));
		free(s);
		s = NULL;
		memcpy(dml_conf_field(base, o), &s, sizeof(s));
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
		n = dml_conf_count_get(root, sec->count_offset);
		for (size_t i = 0; i < n; i++)
			conf_strings_free(schema, sec, dml_conf_elem(root, sec, i));
		free(conf_ptr_get(root, sec->array_offset));
		memcpy((char *)root + sec->array_offset, &null, sizeof(null));
		memcpy((char *)root + sec->count_offset, &zero, sizeof(zero));
	}
}
