/*
 * dml-bench's option tables (see bench_opt.h): getopt_long's tables made
 * from a subcommand's rows, the parse that hands each option to its row's
 * parse function, the stock parse functions, and --help's option lines.
 *
 * Nothing here may exit or start anything: bad usage is logged and
 * returned as BENCH_EXIT_USAGE.
 */
#include <getopt.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tools/bench_opt.h"
#include "tools/bench_util.h"
#include "proto/dml_error.h"
#include "proto/log.h"
#include "proto/util.h"

int bench_opt_error(const char *cmd, const struct bench_opt *opt, const char *a,
		    const char *want)
{
	char name[64];

	snprintf(name, sizeof(name), "--%s", opt->name);
	return bench_usage_error(cmd, name, a, opt->want ? opt->want : want);
}

static void *bench_opt_field(const struct bench_opt *opt, void *o)
{
	return (char *)o + opt->offset;
}

int bench_opt_string(const char *cmd, const struct bench_opt *opt, const char *a, void *o)
{
	*(const char **)bench_opt_field(opt, o) = a;
	return 0;
}

int bench_opt_flag(const char *cmd, const struct bench_opt *opt, const char *a, void *o)
{
	*(int *)bench_opt_field(opt, o) = 1;
	return 0;
}

int bench_opt_count(const char *cmd, const struct bench_opt *opt, const char *a, void *o)
{
	++*(int *)bench_opt_field(opt, o);
	return 0;
}

/* A bound of a u64 row: the double UINT64_MAX rounds up to stands for it. */
static uint64_t bench_opt_bound(double v)
{
	return v >= 18446744073709551615.0 ? UINT64_MAX : (uint64_t)v;
}

/*
 * The integer of a u64 or unsigned row into *out. A bad value's message
 * wants opt->want, or "MIN to MAX".
 */
static int bench_opt_integer(const char *cmd, const struct bench_opt *opt, const char *a,
			     uint64_t *out)
{
	uint64_t min = bench_opt_bound(opt->min), max = bench_opt_bound(opt->max);
	char want[64];

	if (dml_parse_u64(a, min, max, out) == 0)
		return 0;
	snprintf(want, sizeof(want), "%" PRIu64 " to %" PRIu64, min, max);
	return bench_opt_error(cmd, opt, a, want);
}

int bench_opt_u64(const char *cmd, const struct bench_opt *opt, const char *a, void *o)
{
	return bench_opt_integer(cmd, opt, a, bench_opt_field(opt, o));
}

int bench_opt_unsigned(const char *cmd, const struct bench_opt *opt, const char *a, void *o)
{
	uint64_t v;
	int rc = bench_opt_integer(cmd, opt, a, &v);

	if (rc == 0)
		*(unsigned *)bench_opt_field(opt, o) = (unsigned)v;
	return rc;
}

int bench_opt_double(const char *cmd, const struct bench_opt *opt, const char *a, void *o)
{
	char want[64];

	if (dml_parse_double(a, opt->min, opt->max, bench_opt_field(opt, o)) == 0)
		return 0;
	snprintf(want, sizeof(want), "a number from %g to %g", opt->min, opt->max);
	return bench_opt_error(cmd, opt, a, want);
}

int bench_split(const char *s, int (*item)(const char *tok, void *arg), void *arg)
{
	char *copy = dml_xstrdup(s), *save = NULL, *tok;
	int rc = 0, n = 0;

	for (tok = strtok_r(copy, ",", &save); tok && rc == 0;
	     tok = strtok_r(NULL, ",", &save), n++)
		rc = item(tok, arg);
	/* strtok_r skips empty fields: count commas to catch "1,,2" and "1,". */
	if (rc == 0) {
		int commas = 0;

		for (const char *p = s; *p; p++)
			commas += *p == ',';
		if (n == 0 || commas != n - 1)
			rc = DML_EINVAL;
	}
	free(copy);
	return rc;
}

struct bench_list_parse {
	struct bench_list *list;
	const struct bench_opt *opt;
	int sizes; /* K/M/G suffixes allowed, and a multiple of 4 bytes */
};

static int bench_list_item(const char *tok, void *arg)
{
	struct bench_list_parse *p = arg;
	uint64_t v, min = (uint64_t)p->opt->min, max = (uint64_t)p->opt->max;
	int rc;

	if (p->list->n == BENCH_MAX_LIST)
		return DML_ERANGE;
	rc = p->sizes ? dml_parse_size(tok, min, max, &v) : dml_parse_u64(tok, min, max, &v);
	if (rc == 0 && p->sizes && v % sizeof(float) != 0)
		rc = DML_EINVAL;
	if (rc == 0)
		p->list->v[p->list->n++] = v;
	return rc;
}

/* A list of numbers (sizes: bytes) into the struct bench_list of opt. */
static int bench_list_parse(const char *cmd, const struct bench_opt *opt, const char *a,
			    void *o, int sizes)
{
	struct bench_list_parse p = { (struct bench_list *)((char *)o + opt->offset), opt,
				      sizes };

	p.list->n = 0;
	return bench_split(a, bench_list_item, &p) ? bench_opt_error(cmd, opt, a, NULL) : 0;
}

int bench_opt_sizes(const char *cmd, const struct bench_opt *opt, const char *a, void *o)
{
	return bench_list_parse(cmd, opt, a, o, 1);
}

int bench_opt_counts(const char *cmd, const struct bench_opt *opt, const char *a, void *o)
{
	return bench_list_parse(cmd, opt, a, o, 0);
}

int bench_opts_parse(const struct bench_opts_table *t, int argc, char **argv, void *o,
		     int *help)
{
	struct option *longopts = dml_xcalloc(t->nopts + 1, sizeof(*longopts));
	char *shortopts = dml_xcalloc(2 * t->nopts + 1, 1);
	size_t ns = 0;
	int c, rc = 0;

	for (size_t i = 0; i < t->nopts; i++) {
		const struct bench_opt *opt = &t->opts[i];

		/* getopt returns a row's short name, or 256 + its index. */
		longopts[i] = (struct option){ opt->name,
					       opt->arg ? required_argument : no_argument,
					       NULL, opt->short_name ? opt->short_name
								     : 256 + (int)i };
		if (opt->short_name) {
			shortopts[ns++] = opt->short_name;
			if (opt->arg)
				shortopts[ns++] = ':';
		}
	}
	shortopts[ns] = '\0';
	*help = 0;
	optind = 1;
	opterr = 1;
	while (rc == 0 && (c = getopt_long(argc, argv, shortopts, longopts, NULL)) != -1) {
		const struct bench_opt *opt = NULL;

		for (size_t i = 0; i < t->nopts && !opt; i++)
			if (c == (t->opts[i].short_name ? t->opts[i].short_name : 256 + (int)i))
				opt = &t->opts[i];
		if (!opt)
			rc = BENCH_EXIT_USAGE; /* getopt said why */
		else if (!opt->parse)
			*help = 1;
		else
			rc = opt->parse(t->cmd, opt, opt->arg ? optarg : NULL, o);
		if (*help)
			break;
	}
	if (rc == 0 && !*help && optind < argc) {
		dml_err("%s: unexpected argument '%s'", t->cmd, argv[optind]);
		rc = BENCH_EXIT_USAGE;
	}
	free(longopts);
	free(shortopts);
	return rc;
}

void bench_opts_help(const struct bench_opts_table *t, FILE *out)
{
	for (size_t i = 0; i < t->nopts; i++) {
		const struct bench_opt *opt = &t->opts[i];
		char head[96], text[512];
		const char *p;
		int n;

		if (opt->short_name)
			n = snprintf(head, sizeof(head), "  -%c, --%s", opt->short_name,
				     opt->name);
		else
			n = snprintf(head, sizeof(head), "  --%s", opt->name);
		if (opt->arg)
			n += snprintf(head + n, sizeof(head) - (size_t)n, " %s", opt->arg);
		if (opt->help_fmt)
			opt->help_fmt(text, sizeof(text));
		else
			snprintf(text, sizeof(text), "%s", opt->help);
		/* The text starts in column col, or two blanks after a long head. */
		fprintf(out, "%s%*s", head, n < t->col ? t->col - n : 2, "");
		for (p = text; *p;) {
			size_t len = strcspn(p, "\n");

			fprintf(out, "%.*s\n", (int)len, p);
			p += len;
			if (*p == '\n' && *++p)
				fprintf(out, "%*s", t->col, "");
		}
	}
}
