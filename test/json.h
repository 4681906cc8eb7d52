/*
 * A small JSON reader for tests that check what dmlctl --json prints:
 * strict (RFC 8259: no trailing commas, no raw control characters in
 * strings, no leading zeros), depth-limited, decoding \u escapes to UTF-8.
 */
#ifndef DML_TEST_JSON_H
#define DML_TEST_JSON_H

#include <stddef.h>

enum jtype { J_NULL, J_BOOL, J_NUM, J_STR, J_ARR, J_OBJ };

struct jval {
	enum jtype type;
	double num;                /* J_NUM, J_BOOL */
	char *str;                 /* J_STR, decoded */
	struct jval *items;        /* J_ARR elements, J_OBJ values */
	char **keys;               /* J_OBJ */
	size_t n;
};

/** Parse text, which must be one JSON value; 0 or -1 (out then empty). */
int json_parse(const char *text, struct jval *out);
/** Free what json_parse filled in. */
void json_free(struct jval *v);
/** Member key of an object, or NULL. */
const struct jval *json_get(const struct jval *obj, const char *key);
/** The string member key of obj, or "" (a missing key fails comparisons). */
const char *jstr(const struct jval *obj, const char *key);
/** The number member key of obj, or -1. */
double jnum(const struct jval *obj, const char *key);

#endif
