/* The JSON reader of json.h. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test/json.h"
#include "proto/util.h"

struct jparser {
	const char *p;
	int depth;
};

void json_free(struct jval *v)
{
	for (size_t i = 0; i < v->n; i++) {
		json_free(&v->items[i]);
		if (v->keys)
			free(v->keys[i]);
	}
	free(v->items);
	free(v->keys);
	free(v->str);
	memset(v, 0, sizeof(*v));
}

static void skip_ws(struct jparser *jp)
{
	while (*jp->p == ' ' || *jp->p == '\t' || *jp->p == '\n' || *jp->p == '\r')
		jp->p++;
}

static int hex4(const char *s, unsigned *out)
{
	*out = 0;
	for (int i = 0; i < 4; i++) {
		char c = s[i];
		unsigned d = c >= '0' && c <= '9' ? (unsigned)(c - '0')
			   : c >= 'a' && c <= 'f' ? (unsigned)(c - 'a' + 10)
			   : c >= 'A' && c <= 'F' ? (unsigned)(c - 'A' + 10) : 16;

		if (d == 16)
			return -1;
		*out = *out << 4 | d;
	}
	return 0;
}

static size_t put_utf8(char *o, unsigned cp)
{
	if (cp < 0x80) {
		o[0] = (char)cp;
		return 1;
	}
	if (cp < 0x800) {
		o[0] = (char)(0xc0 | cp >> 6);
		o[1] = (char)(0x80 | (cp & 0x3f));
		return 2;
	}
	if (cp < 0x10000) {
		o[0] = (char)(0xe0 | cp >> 12);
		o[1] = (char)(0x80 | (cp >> 6 & 0x3f));
		o[2] = (char)(0x80 | (cp & 0x3f));
		return 3;
	}
	o[0] = (char)(0xf0 | cp >> 18);
	o[1] = (char)(0x80 | (cp >> 12 & 0x3f));
	o[2] = (char)(0x80 | (cp >> 6 & 0x3f));
	o[3] = (char)(0x80 | (cp & 0x3f));
	return 4;
}

/* A string at jp->p (on its opening quote): decoded into a malloc'ed *out. */
static int parse_string(struct jparser *jp, char **out)
{
	const char *p = jp->p + 1;
	char *buf = dml_xmalloc(strlen(p) * 2 + 1), *o = buf;
	unsigned cp, lo;

	for (;;) {
		unsigned char c = (unsigned char)*p;

		if (c == '"')
			break;
		if (c < 0x20)
			goto bad; /* end of text, or a raw control character */
		if (c != '\\') {
			*o++ = (char)c;
			p++;
			continue;
		}
		p++;
		switch (*p) {
		case '"': *o++ = '"'; break;
		case '\\': *o++ = '\\'; break;
		case '/': *o++ = '/'; break;
		case 'b': *o++ = '\b'; break;
		case 'f': *o++ = '\f'; break;
		case 'n': *o++ = '\n'; break;
		case 'r': *o++ = '\r'; break;
		case 't': *o++ = '\t'; break;
		case 'u':
			if (hex4(p + 1, &cp) != 0)
				goto bad;
			p += 4;
			if (cp >= 0xd800 && cp <= 0xdbff) {
				if (p[1] != '\\' || p[2] != 'u' || hex4(p + 3, &lo) != 0 ||
				    lo < 0xdc00 || lo > 0xdfff)
					goto bad;
				cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
				p += 6;
			} else if (cp >= 0xdc00 && cp <= 0xdfff) {
				goto bad;
			}
			o += put_utf8(o, cp);
			break;
		default:
			goto bad;
		}
		p++;
	}
	*o = '\0';
	jp->p = p + 1;
	*out = buf;
	return 0;
bad:
	free(buf);
	return -1;
}

/* JSON's number grammar, strictly: -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)? */
static int parse_number(struct jparser *jp, double *out)
{
	const char *p = jp->p, *start = p;
	char *end;

	if (*p == '-')
		p++;
	if (*p == '0')
		p++;
	else if (*p >= '1' && *p <= '9')
		while (*p >= '0' && *p <= '9')
			p++;
	else
		return -1;
	if (*p == '.') {
		if (!(*++p >= '0' && *p <= '9'))
			return -1;
		while (*p >= '0' && *p <= '9')
			p++;
	}
	if (*p == 'e' || *p == 'E') {
		p++;
		if (*p == '+' || *p == '-')
			p++;
		if (!(*p >= '0' && *p <= '9'))
			return -1;
		while (*p >= '0' && *p <= '9')
			p++;
	}
	*out = strtod(start, &end);
	if (end != p)
		return -1;
	jp->p = p;
	return 0;
}

static int parse_value(struct jparser *jp, struct jval *v);

/* An array or object; jp->p is on '[' or '{'. */
static int parse_container(struct jparser *jp, struct jval *v, int object)
{
	char close = object ? '}' : ']';

	v->type = object ? J_OBJ : J_ARR;
	jp->p++;
	skip_ws(jp);
	if (*jp->p == close) {
		jp->p++;
		return 0;
	}
	for (;;) {
		v->items = dml_xrealloc(v->items, (v->n + 1) * sizeof(*v->items));
		memset(&v->items[v->n], 0, sizeof(*v->items));
		if (object) {
			v->keys = dml_xrealloc(v->keys, (v->n + 1) * sizeof(*v->keys));
			v->keys[v->n] = NULL;
		}
		v->n++;
		skip_ws(jp);
		if (object) {
			if (*jp->p != '"' || parse_string(jp, &v->keys[v->n - 1]) != 0)
				return -1;
			skip_ws(jp);
			if (*jp->p++ != ':')
				return -1;
		}
		if (parse_value(jp, &v->items[v->n - 1]) != 0)
			return -1;
		skip_ws(jp);
		if (*jp->p == ',') {
			jp->p++;
			continue;
		}
		if (*jp->p != close)
			return -1;
		jp->p++;
		return 0;
	}
}

static int parse_value(struct jparser *jp, struct jval *v)
{
	int rc;

	skip_ws(jp);
	if (++jp->depth > 32)
		return -1;
	switch (*jp->p) {
	case '{':
	case '[':
		rc = parse_container(jp, v, *jp->p == '{');
		break;
	case '"':
		v->type = J_STR;
		rc = parse_string(jp, &v->str);
		break;
	case 't':
	case 'f':
	case 'n': {
		static const char *const words[] = { "true", "false", "null" };
		int w = *jp->p == 't' ? 0 : *jp->p == 'f' ? 1 : 2;

		rc = strncmp(jp->p, words[w], strlen(words[w])) == 0 ? 0 : -1;
		jp->p += rc == 0 ? strlen(words[w]) : 0;
		v->type = w == 2 ? J_NULL : J_BOOL;
		v->num = w == 0;
		break;
	}
	default:
		v->type = J_NUM;
		rc = parse_number(jp, &v->num);
	}
	jp->depth--;
	return rc;
}

/* The whole text must be one JSON value (whitespace around it allowed). */
int json_parse(const char *text, struct jval *out)
{
	struct jparser jp = { text, 0 };

	memset(out, 0, sizeof(*out));
	if (parse_value(&jp, out) == 0) {
		skip_ws(&jp);
		if (*jp.p == '\0')
			return 0;
	}
	json_free(out);
	return -1;
}

const struct jval *json_get(const struct jval *obj, const char *key)
{
	if (!obj || obj->type != J_OBJ)
		return NULL;
	for (size_t i = 0; i < obj->n; i++)
		if (strcmp(obj->keys[i], key) == 0)
			return &obj->items[i];
	return NULL;
}

/* The string member key of obj, or "" (a missing key fails the comparisons). */
const char *jstr(const struct jval *obj, const char *key)
{
	const struct jval *v = json_get(obj, key);

	return v && v->type == J_STR ? v->str : "";
}

double jnum(const struct jval *obj, const char *key)
{
	const struct jval *v = json_get(obj, key);

	return v && v->type == J_NUM ? v->num : -1;
}

