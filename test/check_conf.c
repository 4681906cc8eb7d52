/*
 * Unit tests for proto/conf.c and the strict number parsers of proto/util.c:
 * a full file and the defaults land in the right fields, every class of bad
 * file is refused with its exact "file:line: message", the printed effective
 * configuration parses back to the same values, and random or mutated input
 * never crashes the parser or makes it answer outside its contract.
 *
 * The schema below stands in for a daemon's table. These tests must never
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

#include "check_run.h"
#include "conf.h"
#include "dml_error.h"
#include "util.h"

/* ---- the test schema ---------------------------------------------------- */

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

static const struct dml_conf_schema tschema = {
	.program = "dml-test",
	.sections = tsections,
	.nsections = DML_ARRAY_LEN(tsections),
	.options = toptions,
	.noptions = DML_ARRAY_LEN(toptions),
	.check = tconf_check,
};

static const char full_text[] =
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

static const char min_text[] = "[server]\nname = n\npeer = h:1\n";

/* ---- helpers ------------------------------------------------------------- */

static char err[1024];

static int parse(const char *text, struct tconf *c)
{
	memset(c, 0, sizeof(*c));
	err[0] = '\0';
	return dml_conf_parse_string(&tschema, "t.conf", text, c, err, sizeof(err));
}

/* Parses text that must fail and checks the exact message. */
static void expect_error(const char *text, const char *message)
{
	struct tconf c;
	int rc = parse(text, &c);

	ck_assert_msg(rc == DML_ECONF, "rc %d for <<%s>>", rc, text);
	ck_assert_str_eq(err, message);
	dml_conf_free(&tschema, &c);
}

/* The effective configuration as text; the caller frees it. */
static char *print_to_string(const struct tconf *c)
{
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);

	ck_assert_ptr_nonnull(f);
	dml_conf_print(&tschema, c, f);
	ck_assert_int_eq(fclose(f), 0);
	return buf;
}

static char *help_to_string(void)
{
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);

	ck_assert_ptr_nonnull(f);
	dml_conf_print_help(&tschema, f);
	ck_assert_int_eq(fclose(f), 0);
	return buf;
}

static void assert_str_field(const char *a, const char *b)
{
	ck_assert(!a == !b);
	if (a)
		ck_assert_str_eq(a, b);
}

/* Field by field, so that a value printed wrongly cannot hide. */
static void assert_tconf_equal(const struct tconf *a, const struct tconf *b)
{
	assert_str_field(a->name, b->name);
	assert_str_field(a->listen, b->listen);
	assert_str_field(a->peer, b->peer);
	ck_assert_uint_eq(a->threads, b->threads);
	ck_assert_uint_eq(a->backlog, b->backlog);
	ck_assert_int_eq(a->verbose, b->verbose);
	ck_assert_int_eq(a->mode, b->mode);
	ck_assert_uint_eq(a->cache, b->cache);
	ck_assert(memcmp(&a->lr, &b->lr, sizeof(a->lr)) == 0);
	ck_assert_int_eq(a->staleness, b->staleness);
	ck_assert_uint_eq(a->max_keys, b->max_keys);
	ck_assert_int_eq(a->seed, b->seed);
	assert_str_field(a->motd, b->motd);
	assert_str_field(a->path, b->path);
	ck_assert_int_eq(a->sync, b->sync);
	ck_assert_uint_eq(a->max_log, b->max_log);
	ck_assert_uint_eq(a->ntables, b->ntables);
	for (size_t i = 0; i < a->ntables; i++) {
		const struct tconf_table *x = &a->tables[i], *y = &b->tables[i];

		assert_str_field(x->name, y->name);
		ck_assert_uint_eq(x->id, y->id);
		ck_assert_uint_eq(x->rows, y->rows);
		ck_assert_int_eq(x->dense, y->dense);
		ck_assert(memcmp(&x->scale, &y->scale, sizeof(x->scale)) == 0);
		ck_assert_int_eq(x->optimizer, y->optimizer);
	}
}

/*
 * Prints c, parses the print, checks the values are the same and that
 * printing again gives the same text (the print is a fixed point).
 */
static void assert_round_trip(const struct tconf *c)
{
	struct tconf back;
	char *text = print_to_string(c), *again;
	int rc = parse(text, &back);

	ck_assert_msg(rc == 0, "printed config does not parse: %s\n%s", err, text);
	assert_tconf_equal(c, &back);
	again = print_to_string(&back);
	ck_assert_str_eq(text, again);
	free(again);
	free(text);
	dml_conf_free(&tschema, &back);
}

static uint64_t rng_state;

static uint64_t rng_next(void)
{
	/* xorshift64*: reproducible from the seed, good enough for fuzzing */
	rng_state ^= rng_state >> 12;
	rng_state ^= rng_state << 25;
	rng_state ^= rng_state >> 27;
	return rng_state * UINT64_C(2685821657736338717);
}

static size_t rng_below(size_t n)
{
	return (size_t)(rng_next() % n);
}

/* A fresh private directory for the file tests; removed by tmp_cleanup. */
static char tmp_dir[256];

static void tmp_setup(void)
{
	const char *base = getenv("TMPDIR");

	snprintf(tmp_dir, sizeof(tmp_dir), "%s/check_conf.XXXXXX",
		 base && *base ? base : P_tmpdir);
	ck_assert_ptr_nonnull(mkdtemp(tmp_dir));
}

static void tmp_path(char *buf, size_t len, const char *file)
{
	snprintf(buf, len, "%s/%s", tmp_dir, file);
}

static void tmp_write(const char *file, const void *data, size_t len)
{
	char path[512];
	FILE *f;

	tmp_path(path, sizeof(path), file);
	f = fopen(path, "wb");
	ck_assert_ptr_nonnull(f);
	ck_assert_uint_eq(fwrite(data, 1, len, f), len);
	ck_assert_int_eq(fclose(f), 0);
}

static void tmp_cleanup(void)
{
	static const char *const files[] = { "t.conf", "fuzz.conf", "big.conf" };
	char path[512];

	for (size_t i = 0; i < DML_ARRAY_LEN(files); i++) {
		tmp_path(path, sizeof(path), files[i]);
		unlink(path);
	}
	rmdir(tmp_dir);
}

/* ---- parsing valid files -------------------------------------------------- */

START_TEST(test_full_file)
{
	struct tconf c;

	ck_assert_int_eq(parse(full_text, &c), 0);
	ck_assert_str_eq(err, "");
	ck_assert_str_eq(c.name, "prod-1");
	ck_assert_str_eq(c.listen, "[::1]:7100");
	ck_assert_str_eq(c.peer, "sched.example:7000");
	ck_assert_uint_eq(c.threads, 16);
	ck_assert_uint_eq(c.backlog, UINT32_MAX);
	ck_assert_int_eq(c.verbose, 1);
	ck_assert_int_eq(c.mode, MODE_ADAM);
	ck_assert_uint_eq(c.cache, 256 * 1024);
	ck_assert(c.lr == 0.125);
	ck_assert_int_eq(c.staleness, -1);
	ck_assert_uint_eq(c.max_keys, UINT64_MAX);
	ck_assert_int_eq(c.seed, INT64_MIN);
	ck_assert_str_eq(c.motd, "hello, world = yes # not a comment");
	ck_assert_str_eq(c.path, "/var/lib/dml");
	ck_assert_int_eq(c.sync, 0);
	ck_assert_uint_eq(c.max_log, UINT64_C(3) << 30);
	ck_assert_uint_eq(c.ntables, 2);
	ck_assert_str_eq(c.tables[0].name, "weights");
	ck_assert_uint_eq(c.tables[0].id, 1);
	ck_assert_uint_eq(c.tables[0].rows, 1000000);
	ck_assert_int_eq(c.tables[0].dense, 0);
	ck_assert(c.tables[0].scale == 1e-3);
	ck_assert_int_eq(c.tables[0].optimizer, MODE_SGD);
	ck_assert_str_eq(c.tables[1].name, "bias");
	ck_assert_uint_eq(c.tables[1].id, 2);
	ck_assert_uint_eq(c.tables[1].rows, 0);
	ck_assert_int_eq(c.tables[1].dense, 1);
	ck_assert(c.tables[1].scale == 1.0);
	ck_assert_int_eq(c.tables[1].optimizer, MODE_ADAGRAD);
	dml_conf_free(&tschema, &c);
}
END_TEST

START_TEST(test_defaults)
{
	struct tconf c;

	ck_assert_int_eq(parse(min_text, &c), 0);
	ck_assert_str_eq(c.name, "n");
	ck_assert_str_eq(c.listen, "0.0.0.0:7000");
	ck_assert_uint_eq(c.threads, 4);
	ck_assert_uint_eq(c.backlog, 128);
	ck_assert_int_eq(c.verbose, 0);
	ck_assert_int_eq(c.mode, MODE_SGD);
	ck_assert_uint_eq(c.cache, 64u << 20);
	ck_assert(c.lr == 0.01);
	ck_assert_int_eq(c.staleness, 0);
	ck_assert_uint_eq(c.max_keys, 1000000);
	ck_assert_int_eq(c.seed, -42);
	ck_assert_str_eq(c.motd, "");
	/* [store] never appears: its defaults are there all the same */
	ck_assert_str_eq(c.path, "data");
	ck_assert_int_eq(c.sync, 1);
	ck_assert_uint_eq(c.max_log, 1u << 30);
	ck_assert_uint_eq(c.ntables, 0);
	ck_assert_ptr_null(c.tables);
	dml_conf_free(&tschema, &c);
}
END_TEST

START_TEST(test_repeated_defaults_per_element)
{
	struct tconf c;

	ck_assert_int_eq(parse("[table]\nname = a\nid = 1\nrows = 5\nscale = 2\n"
			       "[server]\nname = n\npeer = h:1\n"
			       "[table]\nname = b\nid = 2\n", &c), 0);
	ck_assert_uint_eq(c.ntables, 2);
	ck_assert_uint_eq(c.tables[0].rows, 5);
	ck_assert(c.tables[0].scale == 2.0);
	/* the second element starts from the defaults, not from the first */
	ck_assert_uint_eq(c.tables[1].rows, 0);
	ck_assert(c.tables[1].scale == 1.0);
	ck_assert_int_eq(c.tables[1].dense, 1);
	dml_conf_free(&tschema, &c);
}
END_TEST

START_TEST(test_many_tables)
{
	char *text = dml_xmalloc(300 * 40 + sizeof(min_text));
	size_t n = 0;
	struct tconf c;

	n += (size_t)sprintf(text, "%s", min_text);
	for (unsigned i = 1; i <= 300; i++)
		n += (size_t)sprintf(text + n, "[table]\nname = t%u\nid = %u\n", i, i);
	ck_assert_int_eq(parse(text, &c), 0);
	ck_assert_uint_eq(c.ntables, 300);
	for (unsigned i = 0; i < 300; i++)
		ck_assert_uint_eq(c.tables[i].id, i + 1);
	ck_assert_str_eq(c.tables[299].name, "t300");
	dml_conf_free(&tschema, &c);
	free(text);
}
END_TEST

START_TEST(test_comments_blanks_crlf)
{
	struct tconf c;

	ck_assert_int_eq(parse("\r\n  # comment\n\t; other = comment\n\n[server]\r\n"
			       "name = n\r\npeer = h:1\r\n   \nthreads=\t8", &c), 0);
	ck_assert_str_eq(c.name, "n");
	ck_assert_str_eq(c.peer, "h:1");
	ck_assert_uint_eq(c.threads, 8);
	dml_conf_free(&tschema, &c);
}
END_TEST

START_TEST(test_accepted_spellings)
{
	static const struct {
		const char *line;
		size_t offset;
		int value;
	} cases[] = {
		{ "verbose = yes", offsetof(struct tconf, verbose), 1 },
		{ "verbose = TRUE", offsetof(struct tconf, verbose), 1 },
		{ "verbose = on", offsetof(struct tconf, verbose), 1 },
		{ "verbose = 1", offsetof(struct tconf, verbose), 1 },
		{ "verbose = No", offsetof(struct tconf, verbose), 0 },
		{ "verbose = false", offsetof(struct tconf, verbose), 0 },
		{ "verbose = off", offsetof(struct tconf, verbose), 0 },
		{ "verbose = 0", offsetof(struct tconf, verbose), 0 },
		{ "mode = adagrad", offsetof(struct tconf, mode), MODE_ADAGRAD },
		{ "mode = Adam", offsetof(struct tconf, mode), MODE_ADAM },
	};
	char text[256];
	struct tconf c;

	for (size_t i = 0; i < DML_ARRAY_LEN(cases); i++) {
		int v;

		snprintf(text, sizeof(text), "%s%s\n", min_text, cases[i].line);
		ck_assert_msg(parse(text, &c) == 0, "%s: %s", cases[i].line, err);
		memcpy(&v, (char *)&c + cases[i].offset, sizeof(v));
		ck_assert_int_eq(v, cases[i].value);
		dml_conf_free(&tschema, &c);
	}
	ck_assert_int_eq(parse("[server]\nname = n\npeer = [::1]:0\ncache = 1k\n"
			       "lr = 10\nstaleness = 1000\nthreads = 256\n", &c), 0);
	ck_assert_str_eq(c.peer, "[::1]:0");
	ck_assert_uint_eq(c.cache, 1024);
	ck_assert(c.lr == 10.0);
	ck_assert_int_eq(c.staleness, 1000);
	ck_assert_uint_eq(c.threads, 256);
	dml_conf_free(&tschema, &c);
}
END_TEST

/* ---- every class of error, with its exact message ------------------------ */

START_TEST(test_structure_errors)
{
	expect_error("name = x\n[server]\n", "t.conf:1: key outside any [section]");
	expect_error("# c\n\n; c\nname = x\n", "t.conf:4: key outside any [section]");
	expect_error("[server]\nname = a\n[bogus]\n",
		     "t.conf:3: unknown section [bogus]");
	expect_error("[Server]\n", "t.conf:1: unknown section [Server]");
	expect_error("[]\n", "t.conf:1: unknown section []");
	expect_error("[server]\nname = a\nnmae = b\n",
		     "t.conf:3: unknown key 'nmae' in [server]");
	expect_error("[server]\nName = a\n", "t.conf:2: unknown key 'Name' in [server]");
	expect_error("[table]\nthreads = 4\n",
		     "t.conf:2: unknown key 'threads' in [table]");
	expect_error("[server]\nname = a\npeer = h:1\n\nname = b\n",
		     "t.conf:5: duplicate key 'name' (first set on line 2)");
	expect_error("[table]\nname = t\nid = 1\n# c\nid = 2\n",
		     "t.conf:5: duplicate key 'id' (first set on line 3)");
	expect_error("[server]\nname = a\n[table]\nname = t\nid = 1\n[server]\n",
		     "t.conf:6: section [server] appears twice");
	expect_error("[server]\nname\n",
		     "t.conf:2: expected 'key = value' or '[section]'");
	expect_error("[server]\n= 5\n", "t.conf:2: missing key before '='");
	expect_error("[server\n", "t.conf:1: bad section header, expected [name]");
	expect_error("[server] # c\n", "t.conf:1: bad section header, expected [name]");
	expect_error("[\n", "t.conf:1: bad section header, expected [name]");
	expect_error("[server]\nname = a\x01\n", "t.conf:2: control character 0x01");
	expect_error("[server]\nname = a\x7f\n", "t.conf:2: control character 0x7f");
}
END_TEST

START_TEST(test_same_key_in_two_elements_is_fine)
{
	struct tconf c;

	ck_assert_int_eq(parse("[server]\nname = n\npeer = h:1\n[table]\nname = a\n"
			       "id = 1\n[table]\nname = a\nid = 2\n", &c), 0);
	ck_assert_uint_eq(c.ntables, 2);
	dml_conf_free(&tschema, &c);
}
END_TEST

static const struct {
	const char *line;
	const char *message;
} bad_values[] = {
	{ "threads = abc", "threads: 'abc' is not a number" },
	{ "threads = 4x", "threads: '4x' is not a number" },
	{ "threads = 0x10", "threads: '0x10' is not a number" },
	{ "threads = 70000", "threads: 70000 is out of range 1..256" },
	{ "threads = 0", "threads: 0 is out of range 1..256" },
	{ "threads = -1", "threads: -1 is out of range 1..256" },
	{ "threads = +4", "threads: '+4' is not a number" },
	{ "threads = 1.5", "threads: '1.5' is not an integer" },
	{ "threads = 4 4", "threads: '4 4' is not a number" },
	{ "threads =", "threads: empty value, expected u32, 1..256" },
	{ "backlog = 4294967296", "backlog: 4294967296 is out of range 0..4294967295" },
	{ "max_keys = 0", "max_keys: 0 is out of range 1..18446744073709551615" },
	{ "max_keys = 18446744073709551616",
	  "max_keys: 18446744073709551616 is out of range 1..18446744073709551615" },
	{ "staleness = -2", "staleness: -2 is out of range -1..1000" },
	{ "staleness = 1001", "staleness: 1001 is out of range -1..1000" },
	{ "staleness = +3", "staleness: '+3' is not a number" },
	{ "staleness = --1", "staleness: '--1' is not a number" },
	{ "seed = -9223372036854775809",
	  "seed: -9223372036854775809 is out of range "
	  "-9223372036854775808..9223372036854775807" },
	{ "seed = 9223372036854775808",
	  "seed: 9223372036854775808 is out of range "
	  "-9223372036854775808..9223372036854775807" },
	{ "lr = abc", "lr: 'abc' is not a number" },
	{ "lr = 11", "lr: 11 is out of range 0..10" },
	{ "lr = -0.5", "lr: -0.5 is out of range 0..10" },
	{ "lr = 1e400", "lr: 1e400 is out of range 0..10" },
	{ "lr = nan", "lr: 'nan' is not a number" },
	{ "lr = inf", "lr: 'inf' is not a number" },
	{ "lr = 0.1.2", "lr: '0.1.2' is not a number" },
	{ "lr = ", "lr: empty value, expected double, 0..10" },
	{ "verbose = maybe", "verbose: 'maybe' is not one of yes, no" },
	{ "verbose = yess", "verbose: 'yess' is not one of yes, no" },
	{ "verbose =", "verbose: empty value, expected bool, yes/no" },
	{ "mode = rmsprop", "mode: 'rmsprop' is not one of sgd, adam, adagrad" },
	{ "mode = ", "mode: empty value, expected enum, one of sgd, adam, adagrad" },
	{ "listen = x", "listen: 'x' is not host:port" },
	{ "listen = host:70000", "listen: 'host:70000' is not host:port" },
	{ "listen = host:", "listen: 'host:' is not host:port" },
	{ "listen = :80", "listen: ':80' is not host:port" },
	{ "listen = ::1:80", "listen: '::1:80' is not host:port" },
	{ "listen = [::1]", "listen: '[::1]' is not host:port" },
	{ "listen = a b:80", "listen: 'a b:80' is not host:port" },
	{ "listen =", "listen: empty value, expected host:port" },
	{ "cache = 12X", "cache: '12X' is not a size (integer with optional K, M or G "
			 "suffix)" },
	{ "cache = 1.5M", "cache: '1.5M' is not a size (integer with optional K, M or G "
			  "suffix)" },
	{ "cache = 2G", "cache: 2G is out of range 1K..1G" },
	{ "cache = 512", "cache: 512 is out of range 1K..1G" },
	{ "cache = -1K", "cache: -1K is out of range 1K..1G" },
	{ "cache = 99999999999999G", "cache: 99999999999999G is out of range 1K..1G" },
};

START_TEST(test_bad_value)
{
	char text[256], want[512];

	snprintf(text, sizeof(text), "[server]\nname = n\npeer = h:1\n%s\n",
		 bad_values[_i].line);
	snprintf(want, sizeof(want), "t.conf:4: %s", bad_values[_i].message);
	expect_error(text, want);
}
END_TEST

START_TEST(test_bad_value_in_table)
{
	expect_error("[server]\nname = n\npeer = h:1\n[table]\nname = t\nid = 0\n",
		     "t.conf:6: id: 0 is out of range 1..65535");
	expect_error("[table]\nname = t\nrows = -5\n",
		     "t.conf:3: rows: -5 is out of range 0..18446744073709551615");
	expect_error("[table]\nname = a/b\n", "t.conf:2: name: must not contain '/'");
	expect_error("[table]\noptimizer = x\n",
		     "t.conf:2: optimizer: 'x' is not one of sgd, adam, adagrad");
}
END_TEST

/* A message echoes at most 64 bytes of the value. */
START_TEST(test_long_value_is_cut_in_message)
{
	char text[256], want[256];

	snprintf(text, sizeof(text), "[server]\nthreads = x%0100d\n", 7);
	snprintf(want, sizeof(want), "t.conf:2: threads: 'x%063d...' is not a number",
		 0);
	expect_error(text, want);
}
END_TEST

START_TEST(test_missing_required)
{
	expect_error("", "t.conf: missing required key 'name' in [server]");
	expect_error("[server]\nname = n\n",
		     "t.conf: missing required key 'peer' in [server]");
	/* a required string set to empty is set */
	expect_error("[server]\nname =\n",
		     "t.conf: missing required key 'peer' in [server]");
	expect_error("[server]\nname = n\npeer = h:1\n"
		     "[table]\nname = a\nid = 1\n"
		     "\n# the second one lacks its id\n\n\n\n\n\n"
		     "[table]\nname = b\n"
		     "[table]\nid = 3\n",
		     "t.conf: [table] #2 (line 14): missing required key 'id'");
	expect_error("[server]\nname = n\npeer = h:1\n[table]\n",
		     "t.conf: [table] #1 (line 4): missing required key 'name'");
}
END_TEST

START_TEST(test_cross_field_check)
{
	struct tconf c;

	expect_error("[server]\nname = n\npeer = h:1\nmode = adam\nlr = 2\n",
		     "t.conf: lr must be at most 1 with mode = adam");
	expect_error("[server]\nname = n\npeer = h:1\n[table]\nname = a\nid = 3\n"
		     "[table]\nname = b\nid = 3\n", "t.conf: table id 3 used twice");
	ck_assert_int_eq(parse("[server]\nname = n\npeer = h:1\nmode = adam\nlr = 1\n",
			       &c), 0);
	dml_conf_free(&tschema, &c);
}
END_TEST

START_TEST(test_long_lines)
{
	size_t klen = strlen("name = ");
	size_t len = strlen("[server]\npeer = h:1\nname = ") + 5000 + 2;
	char *text = dml_xmalloc(len);
	struct tconf c;
	int n;

	/* exactly 4096 bytes (plus CR, which is not counted) is fine */
	n = sprintf(text, "[server]\npeer = h:1\nname = ");
	memset(text + n, 'a', 4096 - klen);
	strcpy(text + n + 4096 - klen, "\r\n");
	ck_assert_int_eq(parse(text, &c), 0);
	ck_assert_uint_eq(strlen(c.name), 4096 - klen);
	dml_conf_free(&tschema, &c);

	/* one more byte is not, nor is a much longer line, nor a long comment */
	memset(text + n, 'a', 4097 - klen);
	strcpy(text + n + 4097 - klen, "\n");
	expect_error(text, "t.conf:3: line longer than 4096 bytes");
	memset(text + n, 'b', 5000);
	text[n + 5000] = '\0';
	expect_error(text, "t.conf:3: line longer than 4096 bytes");
	text[n - (int)klen] = '#';
	expect_error(text, "t.conf:3: line longer than 4096 bytes");
	free(text);
}
END_TEST

START_TEST(test_bad_arguments)
{
	struct tconf c;

	memset(&c, 0, sizeof(c));
	ck_assert_int_eq(dml_conf_parse_string(NULL, "x", "", &c, err, sizeof(err)),
			 DML_EINVAL);
	ck_assert_int_eq(dml_conf_parse_string(&tschema, "x", NULL, &c, err,
					       sizeof(err)), DML_EINVAL);
	ck_assert_int_eq(dml_conf_parse_string(&tschema, "x", "", NULL, err,
					       sizeof(err)), DML_EINVAL);
	ck_assert_int_eq(dml_conf_load(&tschema, NULL, &c, err, sizeof(err)),
			 DML_EINVAL);
	/* no room for a message is allowed; the code still tells the story */
	ck_assert_int_eq(dml_conf_parse_string(&tschema, "x", "[x]", &c, NULL, 0),
			 DML_ECONF);
	dml_conf_free(&tschema, &c);
	ck_assert_int_eq(dml_conf_parse_string(&tschema, "x", "[x]", &c, err, 8),
			 DML_ECONF);
	ck_assert_str_eq(err, "x:1: un");
	dml_conf_free(&tschema, &c);
	dml_conf_free(NULL, &c);
	dml_conf_free(&tschema, NULL);
}
END_TEST

/* A bug in a program's table is reported, not crashed on. */
START_TEST(test_bad_schema)
{
	static const struct dml_conf_option bad_default[] = {
		{ "server", "threads", DML_CONF_U32, offsetof(struct tconf, threads),
		  "0", 1, 8, NULL, NULL, NULL },
	};
	static const struct dml_conf_option bad_section[] = {
		{ "nowhere", "threads", DML_CONF_U32, offsetof(struct tconf, threads),
		  "1", 1, 8, NULL, NULL, NULL },
	};
	static const struct dml_conf_option enum_without_choices[] = {
		{ "server", "mode", DML_CONF_ENUM, offsetof(struct tconf, mode), "a",
		  0, 0, NULL, NULL, NULL },
	};
	struct dml_conf_schema s = tschema;
	struct tconf c;

	s.check = NULL;
	s.options = bad_default;
	s.noptions = 1;
	memset(&c, 0, sizeof(c));
	ck_assert_int_eq(dml_conf_parse_string(&s, "s", "", &c, err, sizeof(err)),
			 DML_EINVAL);
	ck_assert_str_eq(err, "s: bad default of threads in [server]: 0 is out of "
			      "range 1..8");
	s.options = bad_section;
	ck_assert_int_eq(dml_conf_parse_string(&s, "s", "", &c, err, sizeof(err)),
			 DML_EINVAL);
	ck_assert_str_eq(err, "s: schema: bad option #0 (threads)");
	s.options = enum_without_choices;
	ck_assert_int_eq(dml_conf_parse_string(&s, "s", "", &c, err, sizeof(err)),
			 DML_EINVAL);
	dml_conf_free(&tschema, &c);
}
END_TEST

/* ---- files ---------------------------------------------------------------- */

START_TEST(test_load_file)
{
	char path[512];
	struct tconf c, d;

	tmp_setup();
	tmp_write("t.conf", full_text, strlen(full_text));
	tmp_path(path, sizeof(path), "t.conf");
	memset(&c, 0, sizeof(c));
	ck_assert_int_eq(dml_conf_load(&tschema, path, &c, err, sizeof(err)), 0);
	ck_assert_int_eq(parse(full_text, &d), 0);
	assert_tconf_equal(&c, &d);
	dml_conf_free(&tschema, &c);
	dml_conf_free(&tschema, &d);

	/* errors name the path given */
	tmp_write("t.conf", "[server]\nname = a\nbad\n", 22);
	ck_assert_int_eq(dml_conf_load(&tschema, path, &c, err, sizeof(err)), DML_ECONF);
	ck_assert(strncmp(err, path, strlen(path)) == 0);
	ck_assert_str_eq(err + strlen(path),
			 ":3: expected 'key = value' or '[section]'");
	dml_conf_free(&tschema, &c);
	tmp_cleanup();
}
END_TEST

START_TEST(test_load_missing_file)
{
	char path[512], want[600];
	struct tconf c;

	tmp_setup();
	tmp_path(path, sizeof(path), "nope.conf");
	memset(&c, 0, sizeof(c));
	ck_assert_int_eq(dml_conf_load(&tschema, path, &c, err, sizeof(err)), DML_EIO);
	snprintf(want, sizeof(want), "%s: %s", path, strerror(ENOENT));
	ck_assert_str_eq(err, want);
	dml_conf_free(&tschema, &c);

	/* a directory opens but cannot be read */
	ck_assert_int_eq(dml_conf_load(&tschema, tmp_dir, &c, err, sizeof(err)),
			 DML_EIO);
	snprintf(want, sizeof(want), "%s: %s", tmp_dir, strerror(EISDIR));
	ck_assert_str_eq(err, want);
	dml_conf_free(&tschema, &c);
	tmp_cleanup();
}
END_TEST

START_TEST(test_load_nul_byte)
{
	static const char text[] = "[server]\nname = n\npeer = h:1\nmotd = a\0b\n";
	char path[512], want[600];
	struct tconf c;

	tmp_setup();
	tmp_write("t.conf", text, sizeof(text) - 1);
	tmp_path(path, sizeof(path), "t.conf");
	memset(&c, 0, sizeof(c));
	ck_assert_int_eq(dml_conf_load(&tschema, path, &c, err, sizeof(err)), DML_ECONF);
	snprintf(want, sizeof(want), "%s:4: NUL byte", path);
	ck_assert_str_eq(err, want);
	dml_conf_free(&tschema, &c);
	tmp_cleanup();
}
END_TEST

START_TEST(test_load_huge_file)
{
	size_t len = (16u << 20) + 1;
	char *big = dml_xmalloc(len);
	char path[512], want[600];
	struct tconf c;

	tmp_setup();
	memset(big, '\n', len);
	tmp_write("big.conf", big, len);
	tmp_path(path, sizeof(path), "big.conf");
	memset(&c, 0, sizeof(c));
	ck_assert_int_eq(dml_conf_load(&tschema, path, &c, err, sizeof(err)), DML_ECONF);
	snprintf(want, sizeof(want), "%s: larger than %u bytes", path, 16u << 20);
	ck_assert_str_eq(err, want);
	dml_conf_free(&tschema, &c);
	/* exactly at the limit is read (and then fails for a missing key) */
	tmp_write("big.conf", big, len - 1);
	ck_assert_int_eq(dml_conf_load(&tschema, path, &c, err, sizeof(err)), DML_ECONF);
	snprintf(want, sizeof(want), "%s: missing required key 'name' in [server]",
		 path);
	ck_assert_str_eq(err, want);
	dml_conf_free(&tschema, &c);
	free(big);
	tmp_cleanup();
}
END_TEST

/* ---- print, help, free ------------------------------------------------------ */

START_TEST(test_print_round_trip)
{
	struct tconf c;
	char *text;

	ck_assert_int_eq(parse(full_text, &c), 0);
	assert_round_trip(&c);
	text = print_to_string(&c);
	ck_assert_ptr_nonnull(strstr(text, "\n[server]\nname = prod-1\n"));
	ck_assert_ptr_nonnull(strstr(text, "\ncache = 256K\n"));
	ck_assert_ptr_nonnull(strstr(text, "\nmax_log = 3G\n"));
	ck_assert_ptr_nonnull(strstr(text, "\nmode = adam\n"));
	ck_assert_ptr_nonnull(strstr(text, "\nverbose = yes\n"));
	ck_assert_ptr_nonnull(strstr(text, "\nscale = 0.001\n"));
	ck_assert_ptr_nonnull(strstr(text, "\n[table]\nname = bias\nid = 2\n"));
	free(text);
	dml_conf_free(&tschema, &c);

	ck_assert_int_eq(parse(min_text, &c), 0);
	assert_round_trip(&c);
	dml_conf_free(&tschema, &c);

	/* doubles that need all 17 digits survive too */
	ck_assert_int_eq(parse("[server]\nname = n\npeer = h:1\nlr = 0.1\n"
			       "[table]\nname = t\nid = 1\n"
			       "scale = -1.7976931348623157e308\n"
			       "[table]\nname = u\nid = 2\n"
			       "scale = 2.2250738585072014e-308\n"
			       "[table]\nname = v\nid = 3\n"
			       "scale = 0.30000000000000004\n", &c), 0);
	ck_assert(c.tables[0].scale == -DBL_MAX);
	assert_round_trip(&c);
	dml_conf_free(&tschema, &c);
}
END_TEST

START_TEST(test_print_unset_string)
{
	struct tconf c;
	char *text;

	memset(&c, 0, sizeof(c));
	c.mode = 7;
	text = print_to_string(&c);
	ck_assert_ptr_nonnull(strstr(text, "\n# name is not set\n"));
	ck_assert_ptr_nonnull(strstr(text, "\n# mode has the invalid value 7\n"));
	free(text);
}
END_TEST

/* The help text holds this exact line (or line start). */
static void assert_has(const char *text, const char *piece)
{
	ck_assert_msg(strstr(text, piece) != NULL, "missing <<%s>> in\n%s", piece, text);
}

START_TEST(test_print_help)
{
	char *text = help_to_string();

	assert_has(text, "# configuration of dml-test\n");
	assert_has(text, "\n[store]\n# durable state\npath = data   # string: ");
	assert_has(text, "\n[server]\n# the daemon itself\n");
	assert_has(text, "\nname = REQUIRED   # string: cluster name\n");
	assert_has(text, "\nthreads = 4   # u32, 1..256: worker threads\n");
	assert_has(text, "\nbacklog = 128   # u32: listen backlog\n");
	assert_has(text, "\nlisten = 0.0.0.0:7000   # host:port: ");
	assert_has(text, "\nverbose = no   # bool, yes/no: log more\n");
	assert_has(text, "\nmode = sgd   # enum, one of sgd, adam, adagrad: "
		   "optimizer\n");
	assert_has(text, "\ncache = 64M   # size (K, M or G suffix), 1K..1G: "
		   "cache size\n");
	assert_has(text, "\nlr = 0.01   # double, 0..10: ");
	assert_has(text, "\nstaleness = 0   # i64, -1..1000: ");
	assert_has(text, "\nmax_keys = 1000000   # u64, 1..18446744073709551615: ");
	assert_has(text, "\n[table]   # may appear many times");
	assert_has(text, "\nid = REQUIRED   # u32, 1..65535: table id\n");
	free(text);
}
END_TEST

START_TEST(test_free_idempotent)
{
	struct tconf c;

	ck_assert_int_eq(parse(full_text, &c), 0);
	dml_conf_free(&tschema, &c);
	ck_assert_ptr_null(c.name);
	ck_assert_ptr_null(c.listen);
	ck_assert_ptr_null(c.peer);
	ck_assert_ptr_null(c.motd);
	ck_assert_ptr_null(c.path);
	ck_assert_ptr_null(c.tables);
	ck_assert_uint_eq(c.ntables, 0);
	dml_conf_free(&tschema, &c);
	ck_assert_ptr_null(c.tables);

	/* after a failure halfway through a table, too */
	ck_assert_int_eq(parse("[table]\nname = a\nid = 1\n[table]\nname = b\nid = x\n",
			       &c), DML_ECONF);
	ck_assert_uint_eq(c.ntables, 2);
	ck_assert_str_eq(c.tables[1].name, "b");
	dml_conf_free(&tschema, &c);
	dml_conf_free(&tschema, &c);
	ck_assert_ptr_null(c.tables);
}
END_TEST

/* ---- garbage in ------------------------------------------------------------- */

/* The answer to any input: success or DML_ECONF with a "name:" message; a
 * success must print and parse back to itself. */
static void check_outcome(int rc, struct tconf *c, const char *name)
{
	ck_assert_msg(rc == 0 || rc == DML_ECONF, "rc %d", rc);
	if (rc == 0)
		assert_round_trip(c);
	else
		ck_assert(strncmp(err, name, strlen(name)) == 0 &&
			  err[strlen(name)] == ':');
	dml_conf_free(&tschema, c);
}

START_TEST(test_fuzz_random_bytes)
{
	static const char alphabet[] = "[]=#; \t\r\n\0aenmrst_:0123456789-.\x01\xff";
	char buf[1025];
	struct tconf c;

	rng_state = UINT64_C(0x9e3779b97f4a7c15);
	for (int iter = 0; iter < 20000; iter++) {
		size_t len = rng_below(sizeof(buf));
		int biased = iter & 1;

		for (size_t i = 0; i < len; i++)
			buf[i] = biased ? alphabet[rng_below(sizeof(alphabet) - 1)]
					: (char)rng_next();
		buf[len] = '\0';
		memset(&c, 0, sizeof(c));
		err[0] = '\0';
		/* [server] needs name and peer: random bytes never supply both */
		ck_assert_int_eq(dml_conf_parse_string(&tschema, "fuzz", buf, &c, err,
						       sizeof(err)), DML_ECONF);
		ck_assert(strncmp(err, "fuzz:", 5) == 0);
		dml_conf_free(&tschema, &c);
	}
}
END_TEST

START_TEST(test_fuzz_random_files)
{
	char buf[2048], path[512];
	struct tconf c;

	tmp_setup();
	tmp_path(path, sizeof(path), "fuzz.conf");
	rng_state = UINT64_C(0x243f6a8885a308d3);
	for (int iter = 0; iter < 500; iter++) {
		size_t len = rng_below(sizeof(buf));

		for (size_t i = 0; i < len; i++)
			buf[i] = (char)(rng_below(4) == 0 ? 0 : rng_next());
		tmp_write("fuzz.conf", buf, len);
		memset(&c, 0, sizeof(c));
		err[0] = '\0';
		ck_assert_int_eq(dml_conf_load(&tschema, path, &c, err, sizeof(err)),
				 DML_ECONF);
		ck_assert(strncmp(err, path, strlen(path)) == 0);
		dml_conf_free(&tschema, &c);
	}
	tmp_cleanup();
}
END_TEST

/* Valid text cut, spliced and salted with tokens: reaches deep paths. */
START_TEST(test_fuzz_mutations)
{
	static const char *const tokens[] = {
		"[server]\n", "[table]\n", "[store]\n", "\n", "=", " ", "#", "[", "]",
		"name = x\n", "id = 7\n", "peer = h:1\n", "-", "9999999999999999999999",
		"K", "G", "1e308", "[::1]:", "yes", "adam", "\r\n", "\t", "0", "/",
	};
	char buf[4096];
	size_t base = strlen(full_text);
	struct tconf c;
	int ok = 0, rc;

	rng_state = UINT64_C(0x13198a2e03707344);
	for (int iter = 0; iter < 20000; iter++) {
		size_t len = base;
		int edits = 1 + (int)rng_below(6);

		memcpy(buf, full_text, base);
		for (int e = 0; e < edits; e++) {
			size_t at = rng_below(len + 1), n;
			const char *t;

			switch (rng_below(4)) {
			case 0: /* flip a byte */
				if (len)
					buf[rng_below(len)] = (char)rng_next();
				break;
			case 1: /* delete a run */
				n = rng_below(40);
				if (at + n > len)
					n = len - at;
				memmove(buf + at, buf + at + n, len - at - n);
				len -= n;
				break;
			case 2: /* insert a token */
				t = tokens[rng_below(DML_ARRAY_LEN(tokens))];
				n = strlen(t);
				if (len + n >= sizeof(buf))
					break;
				memmove(buf + at + n, buf + at, len - at);
				memcpy(buf + at, t, n);
				len += n;
				break;
			default: /* duplicate a run elsewhere */
				n = rng_below(60);
				if (at + n > len || len + n >= sizeof(buf))
					break;
				memmove(buf + at + n, buf + at, len - at);
				len += n;
				break;
			}
		}
		buf[len] = '\0';
		memset(&c, 0, sizeof(c));
		err[0] = '\0';
		rc = dml_conf_parse_string(&tschema, "mut", buf, &c, err, sizeof(err));
		ok += rc == 0;
		check_outcome(rc, &c, "mut");
	}
	/* the mutations are mild enough that some files stay valid */
	ck_assert_int_gt(ok, 100);
}
END_TEST

/* ---- util.c strict parsers ---------------------------------------------------- */

/* The whole range of each type, for tests about syntax rather than bounds. */
#define U64_ALL 0, UINT64_MAX
#define I64_ALL INT64_MIN, INT64_MAX
#define DBL_ALL -DBL_MAX, DBL_MAX

START_TEST(test_parse_u64)
{
	uint64_t v = 0;

	ck_assert_int_eq(dml_parse_u64("0", 0, 10, &v), 0);
	ck_assert_uint_eq(v, 0);
	ck_assert_int_eq(dml_parse_u64("10", 0, 10, &v), 0);
	ck_assert_uint_eq(v, 10);
	ck_assert_int_eq(dml_parse_u64("007", 0, 10, &v), 0);
	ck_assert_uint_eq(v, 7);
	ck_assert_int_eq(dml_parse_u64("11", 0, 10, &v), DML_ERANGE);
	ck_assert_int_eq(dml_parse_u64("4", 5, 10, &v), DML_ERANGE);
	ck_assert_int_eq(dml_parse_u64("18446744073709551615", U64_ALL, &v), 0);
	ck_assert_uint_eq(v, UINT64_MAX);
	ck_assert_int_eq(dml_parse_u64("18446744073709551616", U64_ALL, &v),
			 DML_ERANGE);
	ck_assert_int_eq(dml_parse_u64("99999999999999999999999", U64_ALL, &v),
			 DML_ERANGE);
	v = 42;
	ck_assert_int_eq(dml_parse_u64("-1", U64_ALL, &v), DML_EINVAL);
	ck_assert_int_eq(dml_parse_u64("+1", U64_ALL, &v), DML_EINVAL);
	ck_assert_int_eq(dml_parse_u64("", U64_ALL, &v), DML_EINVAL);
	ck_assert_int_eq(dml_parse_u64(NULL, U64_ALL, &v), DML_EINVAL);
	ck_assert_int_eq(dml_parse_u64(" 1", U64_ALL, &v), DML_EINVAL);
	ck_assert_int_eq(dml_parse_u64("1 ", U64_ALL, &v), DML_EINVAL);
	ck_assert_int_eq(dml_parse_u64("1x", U64_ALL, &v), DML_EINVAL);
	ck_assert_int_eq(dml_parse_u64("0x10", U64_ALL, &v), DML_EINVAL);
	ck_assert_int_eq(dml_parse_u64("1.0", U64_ALL, &v), DML_EINVAL);
	/* regression: strtoull skips newlines and other white space too */
	ck_assert_int_eq(dml_parse_u64("\n5", U64_ALL, &v), DML_EINVAL);
	ck_assert_int_eq(dml_parse_u64("\v5", U64_ALL, &v), DML_EINVAL);
	ck_assert_int_eq(dml_parse_u64("\r5", U64_ALL, &v), DML_EINVAL);
	/* a failure leaves the output alone */
	ck_assert_uint_eq(v, 42);
}
END_TEST

START_TEST(test_parse_i64)
{
	int64_t v = 0;

	ck_assert_int_eq(dml_parse_i64("-5", -10, 10, &v), 0);
	ck_assert_int_eq(v, -5);
	ck_assert_int_eq(dml_parse_i64("-11", -10, 10, &v), DML_ERANGE);
	ck_assert_int_eq(dml_parse_i64("11", -10, 10, &v), DML_ERANGE);
	ck_assert_int_eq(dml_parse_i64("-9223372036854775808", I64_ALL, &v), 0);
	ck_assert_int_eq(v, INT64_MIN);
	ck_assert_int_eq(dml_parse_i64("9223372036854775807", I64_ALL, &v), 0);
	ck_assert_int_eq(v, INT64_MAX);
	ck_assert_int_eq(dml_parse_i64("-9223372036854775809", I64_ALL, &v),
			 DML_ERANGE);
	ck_assert_int_eq(dml_parse_i64("9223372036854775808", I64_ALL, &v),
			 DML_ERANGE);
	v = 42;
	ck_assert_int_eq(dml_parse_i64("+1", I64_ALL, &v), DML_EINVAL);
	ck_assert_int_eq(dml_parse_i64("--1", I64_ALL, &v), DML_EINVAL);
	ck_assert_int_eq(dml_parse_i64("-", I64_ALL, &v), DML_EINVAL);
	ck_assert_int_eq(dml_parse_i64("- 1", I64_ALL, &v), DML_EINVAL);
	ck_assert_int_eq(dml_parse_i64("1-", I64_ALL, &v), DML_EINVAL);
	ck_assert_int_eq(dml_parse_i64("", I64_ALL, &v), DML_EINVAL);
	ck_assert_int_eq(dml_parse_i64("\n1", I64_ALL, &v), DML_EINVAL);
	ck_assert_int_eq(dml_parse_i64("\f-1", I64_ALL, &v), DML_EINVAL);
	ck_assert_int_eq(dml_parse_i64("1e3", I64_ALL, &v), DML_EINVAL);
	ck_assert_int_eq(v, 42);
}
END_TEST

START_TEST(test_parse_double)
{
	double v = 0;

	ck_assert_int_eq(dml_parse_double("0.5", 0, 1, &v), 0);
	ck_assert(v == 0.5);
	ck_assert_int_eq(dml_parse_double("-2.5e-1", -1, 1, &v), 0);
	ck_assert(v == -0.25);
	ck_assert_int_eq(dml_parse_double("1", 0, 1, &v), 0);
	ck_assert_int_eq(dml_parse_double("1.0000001", 0, 1, &v), DML_ERANGE);
	ck_assert_int_eq(dml_parse_double("-0.1", 0, 1, &v), DML_ERANGE);
	/* regression: overflow is out of range, not junk */
	ck_assert_int_eq(dml_parse_double("1e400", DBL_ALL, &v), DML_ERANGE);
	ck_assert_int_eq(dml_parse_double("-1e400", DBL_ALL, &v), DML_ERANGE);
	v = 42;
	ck_assert_int_eq(dml_parse_double("nan", DBL_ALL, &v), DML_EINVAL);
	ck_assert_int_eq(dml_parse_double("inf", DBL_ALL, &v), DML_EINVAL);
	ck_assert_int_eq(dml_parse_double("-infinity", DBL_ALL, &v), DML_EINVAL);
	ck_assert_int_eq(dml_parse_double("", DBL_ALL, &v), DML_EINVAL);
	ck_assert_int_eq(dml_parse_double(" 1", DBL_ALL, &v), DML_EINVAL);
	ck_assert_int_eq(dml_parse_double("\n1", DBL_ALL, &v), DML_EINVAL);
	ck_assert_int_eq(dml_parse_double("1 ", DBL_ALL, &v), DML_EINVAL);
	ck_assert_int_eq(dml_parse_double("1.2.3", DBL_ALL, &v), DML_EINVAL);
	ck_assert_int_eq(dml_parse_double("abc", DBL_ALL, &v), DML_EINVAL);
	ck_assert(v == 42);
}
END_TEST

START_TEST(test_parse_size)
{
	uint64_t v = 0;

	ck_assert_int_eq(dml_parse_size("123", U64_ALL, &v), 0);
	ck_assert_uint_eq(v, 123);
	ck_assert_int_eq(dml_parse_size("1K", U64_ALL, &v), 0);
	ck_assert_uint_eq(v, 1024);
	ck_assert_int_eq(dml_parse_size("2k", U64_ALL, &v), 0);
	ck_assert_uint_eq(v, 2048);
	ck_assert_int_eq(dml_parse_size("3M", U64_ALL, &v), 0);
	ck_assert_uint_eq(v, UINT64_C(3) << 20);
	ck_assert_int_eq(dml_parse_size("5g", U64_ALL, &v), 0);
	ck_assert_uint_eq(v, UINT64_C(5) << 30);
	ck_assert_int_eq(dml_parse_size("17179869183G", U64_ALL, &v), 0);
	ck_assert_uint_eq(v, UINT64_C(17179869183) << 30);
	/* a product past 64 bits is caught before it wraps */
	ck_assert_int_eq(dml_parse_size("17179869184G", U64_ALL, &v), DML_ERANGE);
	ck_assert_int_eq(dml_parse_size("18014398509481984K", U64_ALL, &v),
			 DML_ERANGE);
	ck_assert_int_eq(dml_parse_size("2K", 0, 2047, &v), DML_ERANGE);
	ck_assert_int_eq(dml_parse_size("1K", 1025, UINT64_MAX, &v), DML_ERANGE);
	v = 42;
	ck_assert_int_eq(dml_parse_size("K", U64_ALL, &v), DML_EINVAL);
	ck_assert_int_eq(dml_parse_size("1T", U64_ALL, &v), DML_EINVAL);
	ck_assert_int_eq(dml_parse_size("1KB", U64_ALL, &v), DML_EINVAL);
	ck_assert_int_eq(dml_parse_size("1 K", U64_ALL, &v), DML_EINVAL);
	ck_assert_int_eq(dml_parse_size("-1K", U64_ALL, &v), DML_EINVAL);
	ck_assert_int_eq(dml_parse_size("1.5M", U64_ALL, &v), DML_EINVAL);
	ck_assert_int_eq(dml_parse_size("", U64_ALL, &v), DML_EINVAL);
	ck_assert_int_eq(dml_parse_size(NULL, U64_ALL, &v), DML_EINVAL);
	ck_assert_int_eq(dml_parse_size("\n1K", U64_ALL, &v), DML_EINVAL);
	ck_assert_uint_eq(v, 42);
}
END_TEST

static char hp_host[64];
static uint16_t hp_port;

static int hostport(const char *s, int allow_zero)
{
	return dml_parse_hostport(s, hp_host, sizeof(hp_host), &hp_port, allow_zero);
}

START_TEST(test_parse_hostport)
{
	static const char *const bad[] = {
		"h:65536", "h:-1", "h:+1", "h:8a", "h: 80", "h:80 ", "h:", ":80", "h",
		"", "[::1]", "[]:80", "h:0x50",
		/* regressions: unbracketed IPv6, unbalanced brackets, blanks */
		"::1:80", "[::1:80", "[:80", "a]:80", "a[b:80", "a b:80", " a:80",
		"a\tb:80",
	};

	ck_assert_int_eq(hostport("localhost:7000", 0), 0);
	ck_assert_str_eq(hp_host, "localhost");
	ck_assert_uint_eq(hp_port, 7000);
	ck_assert_int_eq(hostport("10.0.0.1:65535", 0), 0);
	ck_assert_str_eq(hp_host, "10.0.0.1");
	ck_assert_uint_eq(hp_port, 65535);
	ck_assert_int_eq(hostport("[::1]:7000", 0), 0);
	ck_assert_str_eq(hp_host, "::1");
	ck_assert_uint_eq(hp_port, 7000);
	ck_assert_int_eq(hostport("[fe80::1%eth0]:1", 0), 0);
	ck_assert_str_eq(hp_host, "fe80::1%eth0");
	ck_assert_uint_eq(hp_port, 1);
	ck_assert_int_eq(hostport("h:0", 1), 0);
	ck_assert_uint_eq(hp_port, 0);
	ck_assert_int_eq(hostport("h:0", 0), DML_EINVAL);
	ck_assert_int_eq(hostport(NULL, 1), DML_EINVAL);
	hp_port = 99;
	for (size_t i = 0; i < DML_ARRAY_LEN(bad); i++)
		ck_assert_msg(hostport(bad[i], 1) == DML_EINVAL, "took '%s'",
			      bad[i]);
	ck_assert_uint_eq(hp_port, 99);
	/* the host must fit with its NUL */
	ck_assert_int_eq(dml_parse_hostport("abcd:1", hp_host, 4, &hp_port, 1),
			 DML_EINVAL);
	ck_assert_int_eq(dml_parse_hostport("abc:1", hp_host, 4, &hp_port, 1), 0);
	ck_assert_str_eq(hp_host, "abc");
	ck_assert_uint_eq(hp_port, 1);
}
END_TEST

static Suite *conf_suite(void)
{
	Suite *s = suite_create("conf");
	TCase *tc = tcase_create("parse");

	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_full_file);
	tcase_add_test(tc, test_defaults);
	tcase_add_test(tc, test_repeated_defaults_per_element);
	tcase_add_test(tc, test_many_tables);
	tcase_add_test(tc, test_comments_blanks_crlf);
	tcase_add_test(tc, test_accepted_spellings);
	tcase_add_test(tc, test_structure_errors);
	tcase_add_test(tc, test_same_key_in_two_elements_is_fine);
	tcase_add_loop_test(tc, test_bad_value, 0, (int)DML_ARRAY_LEN(bad_values));
	tcase_add_test(tc, test_bad_value_in_table);
	tcase_add_test(tc, test_long_value_is_cut_in_message);
	tcase_add_test(tc, test_missing_required);
	tcase_add_test(tc, test_cross_field_check);
	tcase_add_test(tc, test_long_lines);
	tcase_add_test(tc, test_bad_arguments);
	tcase_add_test(tc, test_bad_schema);
	tcase_add_test(tc, test_load_file);
	tcase_add_test(tc, test_load_missing_file);
	tcase_add_test(tc, test_load_nul_byte);
	tcase_add_test(tc, test_load_huge_file);
	tcase_add_test(tc, test_print_round_trip);
	tcase_add_test(tc, test_print_unset_string);
	tcase_add_test(tc, test_print_help);
	tcase_add_test(tc, test_free_idempotent);
	tcase_add_test(tc, test_fuzz_random_bytes);
	tcase_add_test(tc, test_fuzz_random_files);
	tcase_add_test(tc, test_fuzz_mutations);
	suite_add_tcase(s, tc);

	tc = tcase_create("util");
	tcase_add_test(tc, test_parse_u64);
	tcase_add_test(tc, test_parse_i64);
	tcase_add_test(tc, test_parse_double);
	tcase_add_test(tc, test_parse_size);
	tcase_add_test(tc, test_parse_hostport);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return dml_check_run(conf_suite());
}
