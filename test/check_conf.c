/*
 * Unit tests for proto/conf.c and the strict number parsers of proto/util.c:
 * a full file and the defaults land in the right fields, every class of bad
 * file is refused with its exact "file:line: message", the printed effective
 * configuration parses back to the same values, and random or mutated input
 * never crashes the parser or makes it answer outside its contract.
 *
 * The schema below stands in for a daemon's table; the tests are in
 * check_conf_parse.c, check_conf_files.c and check_conf_util.c. These tests must never
 * depend on files outside their own temporary directory. Leak-freedom of the
 * error paths is checked by running this program in the sanitizer build.
 */
#include <check.h>
#include <errno.h>
#include <float.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "test/check_conf.h"
#include "test/check_run.h"
#include "proto/conf.h"
#include "proto/dml_error.h"
#include "proto/util.h"

/* ---- the test schema ---------------------------------------------------- */

static const char *const modes[] = { "sgd", "adam", "adagrad", NULL };

/* A table name becomes a file name in the store: no slashes. */
static int table_name_validate(const void *field, char *err, size_t errlen)
{
	const char *const *s = field;

	if (strchr(*s, '/')) {
		snprintf(err, errlen, "must not contain '/'");
		return -1;
	}
	return 0;
}

static int tconf_check(void *root, char *err, size_t errlen)
{
	const struct tconf *c = root;

	if (c->mode == MODE_ADAM && c->lr > 1) {
		snprintf(err, errlen, "lr must be at most 1 with mode = adam");
		return -1;
	}
	for (size_t i = 0; i < c->ntables; i++) {
		for (size_t j = 0; j < i; j++) {
			if (c->tables[i].id == c->tables[j].id) {
				snprintf(err, errlen, "table id %u used twice",
					 (unsigned)c->tables[i].id);
				return -1;
			}
		}
	}
	return 0;
}

static const struct dml_conf_section tsections[] = {
	{ .name = "server", .help = "the daemon itself" },
	{ .name = "store", .help = "durable state" },
	{ .name = "table", .repeated = 1, .elem_size = sizeof(struct tconf_table),
	  .array_offset = offsetof(struct tconf, tables),
	  .count_offset = offsetof(struct tconf, ntables), .help = "one table" },
};

#define S(k, t, f, d, lo, hi, h) \
	{ "server", k, t, offsetof(struct tconf, f), d, lo, hi, NULL, NULL, h }

static const struct dml_conf_option toptions[] = {
	S("name", DML_CONF_STRING, name, NULL, 0, 0, "cluster name"),
	S("listen", DML_CONF_HOSTPORT, listen, "0.0.0.0:7000", 0, 0, "listen address"),
	S("peer", DML_CONF_HOSTPORT, peer, NULL, 0, 0, "scheduler address"),
	S("threads", DML_CONF_U32, threads, "4", 1, 256, "worker threads"),
	S("backlog", DML_CONF_U32, backlog, "128", 0, 0, "listen backlog"),
	S("verbose", DML_CONF_BOOL, verbose, "no", 0, 0, "log more"),
	{ "server", "mode", DML_CONF_ENUM, offsetof(struct tconf, mode), "sgd", 0, 0,
	  modes, NULL, "optimizer" },
	S("cache", DML_CONF_SIZE, cache, "64M", 1024, 1 << 30, "cache size"),
	S("lr", DML_CONF_DOUBLE, lr, "0.01", 0, 10, "learning rate"),
	S("staleness", DML_CONF_I64, staleness, "0", -1, 1000, "SSP bound"),
	S("max_keys", DML_CONF_U64, max_keys, "1000000", 1, (double)UINT64_MAX,
	  "keys per request"),
	S("seed", DML_CONF_I64, seed, "-42", 0, 0, "random seed"),
	S("motd", DML_CONF_STRING, motd, "", 0, 0, "greeting"),
	{ "store", "path", DML_CONF_STRING, offsetof(struct tconf, path), "data", 0, 0,
	  NULL, NULL, "data folder" },
	{ "store", "sync", DML_CONF_BOOL, offsetof(struct tconf, sync), "yes", 0, 0,
	  NULL, NULL, "fsync the log" },
	{ "store", "max_log", DML_CONF_SIZE, offsetof(struct tconf, max_log), "1G", 0,
	  0, NULL, NULL, "log size" },
	{ "table", "name", DML_CONF_STRING, offsetof(struct tconf_table, name), NULL, 0,
	  0, NULL, table_name_validate, "table name" },
	{ "table", "id", DML_CONF_U32, offsetof(struct tconf_table, id), NULL, 1, 65535,
	  NULL, NULL, "table id" },
	{ "table", "rows", DML_CONF_U64, offsetof(struct tconf_table, rows), "0", 0, 0,
	  NULL, NULL, "rows" },
	{ "table", "dense", DML_CONF_BOOL, offsetof(struct tconf_table, dense), "yes",
	  0, 0, NULL, NULL, "dense storage" },
	{ "table", "scale", DML_CONF_DOUBLE, offsetof(struct tconf_table, scale), "1",
	  0, 0, NULL, NULL, "init scale" },
	{ "table", "optimizer", DML_CONF_ENUM,
	  offsetof(struct tconf_table, optimizer), "sgd", 0, 0, modes, NULL,
	  "optimizer" },
};

const struct dml_conf_schema tschema = {
	.program = "dml-test",
	.sections = tsections,
	.nsections = DML_ARRAY_LEN(tsections),
	.options = toptions,
	.noptions = DML_ARRAY_LEN(toptions),
	.check = tconf_check,
};

const char full_text[] =
	"# a complete file\n"
	"[server]\n"
	"name = prod-1\n"
	"  listen   =   [::1]:7100  \n"
	"peer = sched.example:7000\n"
	"threads = 16\n"
	"backlog = 4294967295\n"
	"verbose = On\n"
	"mode = ADAM\n"
	"cache = 256K\n"
	"lr = 0.125\n"
	"staleness = -1\n"
	"max_keys = 18446744073709551615\n"
	"seed = -9223372036854775808\n"
	"motd = hello, world = yes # not a comment\n"
	"\n"
	"; the store\n"
	"[store]\n"
	"path = /var/lib/dml\n"
	"sync = false\n"
	"max_log = 3G\n"
	"[table]\n"
	"name = weights\n"
	"id = 1\n"
	"rows = 1000000\n"
	"dense = no\n"
	"scale = 1e-3\n"
	"[ table ]\n"
	"id = 2\n"
	"name = bias\n"
	"optimizer = adagrad\n";

const char min_text[] = "[server]\nname = n\npeer = h:1\n";

/* ---- helpers ------------------------------------------------------------- */
char conf_err[1024];

int parse(const char *text, struct tconf *c)
{
	memset(c, 0, sizeof(*c));
	conf_err[0] = '\0';
	return dml_conf_parse_string(&tschema, "t.conf", text, c, conf_err, sizeof(conf_err));
}

/* Parses text that must fail and checks the exact message. */
void expect_error(const char *text, const char *message)
{
	struct tconf c;
	int rc = parse(text, &c);

	ck_assert_msg(rc == DML_ECONF, "rc %d for <<%s>>", rc, text);
	ck_assert_str_eq(conf_err, message);
	dml_conf_free(&tschema, &c);
}
static Suite *conf_suite(void)
{
	Suite *s = suite_create("conf");
	TCase *tc = tcase_create("parse");

	tcase_set_timeout(tc, 60);
	conf_tests_parse(tc);
	conf_tests_files(tc);
	suite_add_tcase(s, tc);

	tc = tcase_create("util");
	conf_tests_util(tc);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return dml_check_run(conf_suite());
}
