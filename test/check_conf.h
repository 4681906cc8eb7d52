/*
 * What the files of check_conf share: the test schema (check_conf.c) that
 * stands in for a daemon's option table, its sample files, and parsing
 * helpers; each file adds its tests to the suite's test cases.
 */
#ifndef DML_CHECK_CONF_H
#define DML_CHECK_CONF_H

#include <check.h>
#include <stddef.h>
#include <stdint.h>

#include "proto/conf.h"

struct tconf_table {
	char *name;
	uint32_t id;
	uint64_t rows;
	int dense;
	double scale;
	int optimizer;
};

struct tconf {
	/* [server] */
	char *name;
	char *listen;
	char *peer;
	uint32_t threads;
	uint32_t backlog;
	int verbose;
	int mode;
	uint64_t cache;
	double lr;
	int64_t staleness;
	uint64_t max_keys;
	int64_t seed;
	char *motd;
	/* [store] */
	char *path;
	int sync;
	uint64_t max_log;
	/* [table] */
	struct tconf_table *tables;
	size_t ntables;
};

enum { MODE_SGD, MODE_ADAM, MODE_ADAGRAD };

extern const struct dml_conf_schema tschema;
extern const char full_text[];
extern const char min_text[];

/* The message of the last parse. */
extern char conf_err[1024];

/* Parses text into c (zeroed first), the message in conf_err. */
int parse(const char *text, struct tconf *c);

/* Parses text that must fail and checks the exact message. */
void expect_error(const char *text, const char *message);

/* The tests of valid and invalid text (check_conf_parse.c). */
void conf_tests_parse(TCase *tc);

/* The tests of files, printing and garbage (check_conf_files.c). */
void conf_tests_files(TCase *tc);

/* The tests of util.c's parsers (check_conf_util.c). */
void conf_tests_util(TCase *tc);

#endif /* DML_CHECK_CONF_H */
