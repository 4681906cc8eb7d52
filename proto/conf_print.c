/*
 * Printing conf.h's option tables: the effective configuration of a parsed
 * root (dml_conf_print) and the commented table behind --help
 * (dml_conf_print_help). Only these two write to a stream; nothing here
 * changes the root.
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "proto/conf.h"
#include "proto/conf_internal.h"

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
		dml_conf_format_size(u64, buf, len);
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
		dml_conf_format_double(d, buf, len);
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

		if (!dml_conf_option_in(o, sec))
			continue;
		if (dml_conf_is_string(o->type)) {
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
		n = dml_conf_count_get(root, sec->count_offset);
		for (size_t i = 0; i < n; i++)
			conf_instance_print(schema, sec, dml_conf_elem(root, sec, i), out);
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

			if (!dml_conf_option_in(o, sec))
				continue;
			dml_conf_describe(o, desc, sizeof(desc));
			fprintf(out, "%s = %s   # %s%s%s\n", o->key,
				o->def ? o->def : "REQUIRED", desc, o->help ? ": " : "",
				o->help ? o->help : "");
		}
	}
}
