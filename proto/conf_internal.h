/*
 * What the files of the configuration parser share (conf.c parses,
 * conf_value.c converts and describes values, conf_print.c prints the
 * tables): helpers over conf.h's option tables. Not for anything outside
 * proto/; like the parser, nothing here logs, exits or prints.
 */
#ifndef DML_CONF_INTERNAL_H
#define DML_CONF_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "proto/conf.h"

#define CONF_QUOTE_MAX 64          /* bytes of file text echoed in one message */
#define CONF_MSG_MAX 512

/*
 * Copies file text for a message: at most CONF_QUOTE_MAX bytes, control
 * bytes shown as '?', "..." when cut. Returns buf for use in an argument list.
 */
const char *dml_conf_quote(const char *s, char *buf, size_t len);

/* Whether options of type t hold a char * the root owns. */
int dml_conf_is_string(enum dml_conf_type t);

/* A size with the largest suffix that keeps it exact, so it parses back. */
void dml_conf_format_size(uint64_t v, char *buf, size_t len);

/* The shortest %g form that reads back as the same double. */
void dml_conf_format_double(double v, char *buf, size_t len);

/* What a value of this option looks like: "u32, 1..256", "bool, yes/no"... */
void dml_conf_describe(const struct dml_conf_option *o, char *buf, size_t len);

/* The field of option o in base (the root or an element of its section). */
void *dml_conf_field(void *base, const struct dml_conf_option *o);

/* Parses, validates and stores text into o's field of base: 0 or a reason. */
int dml_conf_value_set(const struct dml_conf_option *o, void *base, const char *text,
		       char *why, size_t whylen);

/* The element count of a repeated section, stored at offset in root. */
size_t dml_conf_count_get(const void *root, size_t offset);

/* Element i of repeated section sec in root. */
void *dml_conf_elem(const void *root, const struct dml_conf_section *sec, size_t i);

/* Whether option o belongs to section sec. */
int dml_conf_option_in(const struct dml_conf_option *o,
		       const struct dml_conf_section *sec);

#endif /* DML_CONF_INTERNAL_H */
