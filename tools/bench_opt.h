/*
 * dml-bench's option tables: one table per subcommand, one row per option
 * (name, argument, where the value goes and how it is parsed, --help text),
 * and one driver that parses a command line by the table and prints the
 * table's part of --help, as proto/conf.h's tables do for the daemons' keys.
 * The subcommand keeps its own defaults (it sets its options struct before
 * parsing) and its cross-option checks (after).
 *
 * Nothing here starts anything: a bad option logs one line and the parse
 * returns BENCH_EXIT_USAGE.
 */
#ifndef DML_BENCH_OPT_H
#define DML_BENCH_OPT_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

struct bench_opt;

/**
 * Parse the value a of option opt (NULL for an option without an argument)
 * into the options struct o of subcommand cmd. Returns 0, or an exit status
 * with the error logged (bench_usage_error()).
 */
typedef int bench_opt_parse_fn(const char *cmd, const struct bench_opt *opt, const char *a,
			       void *o);

/** One option of a subcommand. */
struct bench_opt {
	const char *name;          /* the long option, without "--" */
	char short_name;           /* -x as well, or 0 */
	const char *arg;           /* its argument in --help ("N"); NULL: none */
	bench_opt_parse_fn *parse; /* NULL: --help, which ends the parse */
	size_t offset;             /* of the field parse fills in */
	double min, max;           /* bounds of the number parsers below */
	const char *want;          /* what a bad value should be; NULL: from min, max */
	/* --help text; a line after the first is indented under the first */
	const char *help;
	/* when set, writes the --help text in place of help (values known
	 * only when the program runs) */
	void (*help_fmt)(char *buf, size_t len);
};

/** A subcommand's table. */
struct bench_opts_table {
	const char *cmd;           /* "pushpull": for messages */
	const struct bench_opt *opts;
	size_t nopts;
	int col;                   /* the column --help's texts start in */
};

/**
 * Parse argv by table t into o; every argument must be an option. *help = 1
 * after --help (the parse stops there). Returns 0, or BENCH_EXIT_USAGE with
 * the error logged.
 */
int bench_opts_parse(const struct bench_opts_table *t, int argc, char **argv, void *o,
		     int *help);

/** The options' lines of --help, in the table's order. */
void bench_opts_help(const struct bench_opts_table *t, FILE *out);

/*
 * Stock parse functions. The field is at o + opt->offset; a bad value logs
 * "CMD: bad --NAME 'VALUE': WANT", WANT being opt->want or else made from
 * opt->min and opt->max.
 */
/** const char *: the argument itself (it lives as long as argv). */
bench_opt_parse_fn bench_opt_string;
/** int: set to 1. */
bench_opt_parse_fn bench_opt_flag;
/** int: one more each time (-v). */
bench_opt_parse_fn bench_opt_count;
/** uint64_t: an integer in [min, max]. */
bench_opt_parse_fn bench_opt_u64;
/** unsigned: an integer in [min, max]. */
bench_opt_parse_fn bench_opt_unsigned;
/** double: a number in [min, max]. */
bench_opt_parse_fn bench_opt_double;

/** A list option's values (--sizes 4K,1M). */
#define BENCH_MAX_LIST 16
struct bench_list {
	uint64_t v[BENCH_MAX_LIST];
	size_t n;
};

/** struct bench_list: comma-separated integers, each in [min, max]. */
bench_opt_parse_fn bench_opt_counts;
/** struct bench_list: comma-separated sizes in bytes, each in [min, max],
 * with K/M/G suffixes, each a whole number of floats. */
bench_opt_parse_fn bench_opt_sizes;

/**
 * Call item() on each comma-separated element of s. Returns 0, item()'s
 * first error, or DML_EINVAL for an empty list or element ("1,,2", "1,").
 */
int bench_split(const char *s, int (*item)(const char *tok, void *arg), void *arg);

/**
 * Log "CMD: bad --NAME 'A': WANT" (bench_usage_error()), WANT being
 * opt->want, or want when that is NULL. Returns BENCH_EXIT_USAGE.
 */
int bench_opt_error(const char *cmd, const struct bench_opt *opt, const char *a,
		    const char *want);

/** The row of -h, --help, last in every table. */
#define BENCH_OPT_HELP { .name = "help", .short_name = 'h', .help = "this text" }

/** The row of -v, --verbose: one more each time into the int at offset. */
#define BENCH_OPT_VERBOSE(offset_, help_)                                        \
	{ .name = "verbose", .short_name = 'v', .parse = bench_opt_count,          \
	  .offset = (offset_), .help = (help_) }

/** Expands to its argument's value as a string literal (a plain number). */
#define BENCH_STR(x) BENCH_STR_(x)
#define BENCH_STR_(x) #x

#endif
