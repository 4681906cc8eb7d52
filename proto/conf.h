/*
 * The one configuration parser, driven by a table of options (STYLE #10).
 *
 * Files are `key = value` lines grouped under `[section]` headers; `#` or `;`
 * starts a comment line; blank lines are ignored; values run to the end of
 * the line with surrounding blanks trimmed (no quoting). A section marked
 * repeated (e.g. [table]) may appear many times; each occurrence is a new
 * element. An unknown section or key, a duplicate key, a bad value or a
 * missing required key is an error reported as "file:line: message". After
 * parsing, the schema's cross-field check runs. The same table prints --help
 * and the effective configuration.
 */
#ifndef DML_CONF_H
#define DML_CONF_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

enum dml_conf_type {
	DML_CONF_STRING,  /* char *, strdup'ed; freed by dml_conf_free */
	DML_CONF_U64,     /* uint64_t, bounds min..max */
	DML_CONF_U32,     /* uint32_t, bounds min..max */
	DML_CONF_I64,     /* int64_t, bounds min..max */
	DML_CONF_DOUBLE,  /* double, bounds min..max */
	DML_CONF_SIZE,    /* uint64_t with optional K/M/G suffix */
	DML_CONF_BOOL,    /* int: yes/no, true/false, on/off, 1/0 */
	DML_CONF_ENUM,    /* int: index into choices */
	DML_CONF_HOSTPORT /* char *, must parse as host:port */
};

/** A [section]. Options name their section by this name. */
struct dml_conf_section {
	const char *name;
	int repeated;          /* may appear more than once */
	/* repeated only: element size, and where the root keeps the array */
	size_t elem_size;
	size_t array_offset;   /* offset of a `void *` (array of elements) in root */
	size_t count_offset;   /* offset of a `size_t` element count in root */
	const char *help;
};

struct dml_conf_option {
	const char *section;
	const char *key;
	enum dml_conf_type type;
	/* offset of the field: in root for plain sections, in the element for
	 * repeated ones */
	size_t offset;
	const char *def;       /* default as text; NULL means required */
	double min, max;       /* numeric bounds (inclusive) */
	const char *const *choices; /* ENUM: NULL-terminated */
	/* optional extra check of the parsed field; writes a reason to err */
	int (*validate)(const void *field, char *err, size_t errlen);
	const char *help;
};

struct dml_conf_schema {
	const char *program;   /* for --help */
	const struct dml_conf_section *sections;
	size_t nsections;
	const struct dml_conf_option *options;
	size_t noptions;
	/* cross-field check after parsing; writes a reason (no file:line) */
	int (*check)(void *root, char *err, size_t errlen);
};

/**
 * Parse the file at path into root (caller's zeroed struct). On error
 * returns DML_ECONF (bad content: err holds "path:line: message" or
 * "path: message" for cross-field and missing-key errors) or DML_EIO (file
 * cannot be read: err holds "path: strerror"). root must still be released
 * with dml_conf_free() in both cases.
 */
int dml_conf_load(const struct dml_conf_schema *schema, const char *path, void *root,
		  char *err, size_t errlen);

/** The same on text in memory; name is used in place of the path. */
int dml_conf_parse_string(const struct dml_conf_schema *schema, const char *name,
			  const char *text, void *root, char *err, size_t errlen);

/** Free strings and repeated arrays the parser allocated in root. */
void dml_conf_free(const struct dml_conf_schema *schema, void *root);

/** Print every section and option with type, default, bounds and help. */
void dml_conf_print_help(const struct dml_conf_schema *schema, FILE *out);

/** Print the effective configuration in the file format. */
void dml_conf_print(const struct dml_conf_schema *schema, const void *root, FILE *out);

/*
 * Checks that several daemons' option tables share (the validate member of
 * a row; each takes a char * field).
 */
/** log_level choices, in enum dml_log_level order. */
extern const char *const dml_conf_log_levels[];
/** host:port with a port 1..65535: an address this process dials. */
int dml_conf_check_dial(const void *field, char *err, size_t errlen);
/** Empty, or host:port with a port 1..65535 (e.g. an advertised address). */
int dml_conf_check_dial_optional(const void *field, char *err, size_t errlen);
/** Empty (off), or host:port to listen on; port 0 picks a free one. */
int dml_conf_check_listen_optional(const void *field, char *err, size_t errlen);
/** A placement zone: at most 63 letters, digits, '-', '_' or '.'. */
int dml_conf_check_zone(const void *field, char *err, size_t errlen);

#endif
