/*
 * conf_man.h: an option table as man(7) text.
 *
 * The kind of value an option takes and its bounds ("u32, 1..256") are
 * worded by conf.c for --help; this file takes that wording from
 * dml_conf_print_help() run on a table of the one option, so that the
 * manual says exactly what --help says. Everything else comes from the
 * table's fields. Nothing here parses a configuration or changes a table.
 */
#include <stdlib.h>
#include <string.h>

#include "proto/conf_man.h"
#include "proto/dml_error.h"

/* Text as roff reads it: backslashes escaped, no line taken for a request. */
static void man_text(FILE *out, const char *s)
{
	if (*s == '.' || *s == '\'')
		fputs("\\&", out);
	for (; *s; s++) {
		if (*s == '\\')
			fputs("\\e", out);
		else if (*s == '\n')
			fputs(s[1] == '.' || s[1] == '\'' ? "\n\\&" : "\n", out);
		else
			fputc(*s, out);
	}
}

/*
 * What --help says of o's values, into *desc (malloc'ed). --help writes
 * the option's line as "key = default   # description: help"; the key,
 * default and help are known, so what lies between them is the description.
 */
static int man_describe(const struct dml_conf_section *sec, const struct dml_conf_option *o,
			char **desc)
{
	const struct dml_conf_schema one = {
		.sections = sec, .nsections = 1, .options = o, .noptions = 1,
	};
	const char *def = o->def ? o->def : "REQUIRED";
	char *text = NULL, *prefix, *at;
	size_t textlen = 0, plen, rest, hlen = o->help ? strlen(o->help) + 2 : 0;
	FILE *f = open_memstream(&text, &textlen);
	int rc = DML_EINVAL;

	if (!f)
		return DML_ENOMEM;
	dml_conf_print_help(&one, f);
	if (fclose(f) != 0 || !text) {
		free(text);
		return DML_ENOMEM;
	}
	plen = strlen(o->key) + strlen(def) + 16;
	prefix = malloc(plen);
	if (!prefix) {
		free(text);
		return DML_ENOMEM;
	}
	snprintf(prefix, plen, "\n%s = %s   # ", o->key, def);
	at = strstr(text, prefix);
	if (at) {
		at += strlen(prefix);
		rest = strlen(at);
		if (rest > 0 && at[rest - 1] == '\n')
			rest--;
		if (rest >= hlen && (!o->help || strncmp(at + rest - hlen + 2, o->help,
							  hlen - 2) == 0)) {
			*desc = strndup(at, rest - hlen);
			rc = *desc ? 0 : DML_ENOMEM;
		}
	}
	free(prefix);
	free(text);
	return rc;
}

static int man_option(FILE *out, const struct dml_conf_section *sec,
		      const struct dml_conf_option *o)
{
	char *desc = NULL;
	int rc = man_describe(sec, o, &desc);

	if (rc)
		return rc;
	fputs(".TP\n\\fB", out);
	man_text(out, o->key);
	if (!o->def) {
		fputs("\\fP (required)\n", out);
	} else if (!*o->def) {
		fputs("\\fP (default: empty)\n", out);
	} else {
		fputs("\\fP = \\fI", out);
		man_text(out, o->def);
		fputs("\\fP\n", out);
	}
	if (o->help && *o->help) {
		man_text(out, o->help);
		fputs("\n.br\n", out);
	}
	fputs("Value: ", out);
	man_text(out, desc);
	fputs(".\n", out);
	free(desc);
	return 0;
}

int dml_conf_print_man(const struct dml_conf_schema *schema, FILE *out)
{
	if (!schema || !out || (schema->nsections && !schema->sections) ||
	    (schema->noptions && !schema->options))
		return DML_EINVAL;
	for (size_t si = 0; si < schema->nsections; si++) {
		const struct dml_conf_section *sec = &schema->sections[si];

		fputs(".SS [", out);
		man_text(out, sec->name);
		fputs("]\n", out);
		if (sec->help && *sec->help) {
			man_text(out, sec->help);
			fputs(sec->repeated ? ".\nMay appear many times, one per element.\n"
					    : ".\n", out);
		} else if (sec->repeated) {
			fputs("May appear many times, one per element.\n", out);
		}
		for (size_t i = 0; i < schema->noptions; i++) {
			const struct dml_conf_option *o = &schema->options[i];
			int rc;

			if (!o->section || !o->key || strcmp(o->section, sec->name) != 0)
				continue;
			rc = man_option(out, sec, o);
			if (rc)
				return rc;
		}
	}
	return ferror(out) ? DML_EIO : 0;
}
