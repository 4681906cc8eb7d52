/*
 * Tests of proto/conf.c beyond parsing text (see check_conf.c): loading
 * files, printing the effective configuration and --help, freeing, and
 * random or mutated input. Files live in a private temporary directory.
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
#include "proto/conf.h"
#include "proto/dml_error.h"
#include "proto/util.h"

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

	ck_assert_msg(rc == 0, "printed config does not parse: %s\n%s", conf_err, text);
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

/* ---- files ---------------------------------------------------------------- */

START_TEST(test_load_file)
{
	char path[512];
	struct tconf c, d;

	tmp_setup();
	tmp_write("t.conf", full_text, strlen(full_text));
	tmp_path(path, sizeof(path), "t.conf");
	memset(&c, 0, sizeof(c));
	ck_assert_int_eq(dml_conf_load(&tschema, path, &c, conf_err, sizeof(conf_err)), 0);
	ck_assert_int_eq(parse(full_text, &d), 0);
	assert_tconf_equal(&c, &d);
	dml_conf_free(&tschema, &c);
	dml_conf_free(&tschema, &d);

	/* errors name the path given */
	tmp_write("t.conf", "[server]\nname = a\nbad\n", 22);
	ck_assert_int_eq(dml_conf_load(&tschema, path, &c, conf_err, sizeof(conf_err)), DML_ECONF);
	ck_assert(strncmp(conf_err, path, strlen(path)) == 0);
	ck_assert_str_eq(conf_err + strlen(path),
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
	ck_assert_int_eq(dml_conf_load(&tschema, path, &c, conf_err, sizeof(conf_err)), DML_EIO);
	snprintf(want, sizeof(want), "%s: %s", path, strerror(ENOENT));
	ck_assert_str_eq(conf_err, want);
	dml_conf_free(&tschema, &c);

	/* a directory opens but cannot be read */
	ck_assert_int_eq(dml_conf_load(&tschema, tmp_dir, &c, conf_err, sizeof(conf_err)),
			 DML_EIO);
	snprintf(want, sizeof(want), "%s: %s", tmp_dir, strerror(EISDIR));
	ck_assert_str_eq(conf_err, want);
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
	ck_assert_int_eq(dml_conf_load(&tschema, path, &c, conf_err, sizeof(conf_err)), DML_ECONF);
	snprintf(want, sizeof(want), "%s:4: NUL byte", path);
	ck_assert_str_eq(conf_err, want);
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
	ck_assert_int_eq(dml_conf_load(&tschema, path, &c, conf_err, sizeof(conf_err)), DML_ECONF);
	snprintf(want, sizeof(want), "%s: larger than %u bytes", path, 16u << 20);
	ck_assert_str_eq(conf_err, want);
	dml_conf_free(&tschema, &c);
	/* exactly at the limit is read (and then fails for a missing key) */
	tmp_write("big.conf", big, len - 1);
	ck_assert_int_eq(dml_conf_load(&tschema, path, &c, conf_err, sizeof(conf_err)), DML_ECONF);
	snprintf(want, sizeof(want), "%s: missing required key 'name' in [server]",
		 path);
	ck_assert_str_eq(conf_err, want);
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
		ck_assert(strncmp(conf_err, name, strlen(name)) == 0 &&
			  conf_err[strlen(name)] == ':');
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
		conf_err[0] = '\0';
		/* [server] needs name and peer: random bytes never supply both */
		ck_assert_int_eq(dml_conf_parse_string(&tschema, "fuzz", buf, &c, conf_err,
						       sizeof(conf_err)), DML_ECONF);
		ck_assert(strncmp(conf_err, "fuzz:", 5) == 0);
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
		conf_err[0] = '\0';
		ck_assert_int_eq(dml_conf_load(&tschema, path, &c, conf_err, sizeof(conf_err)),
				 DML_ECONF);
		ck_assert(strncmp(conf_err, path, strlen(path)) == 0);
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
		conf_err[0] = '\0';
		rc = dml_conf_parse_string(&tschema, "mut", buf, &c, conf_err, sizeof(conf_err));
		ok += rc == 0;
		check_outcome(rc, &c, "mut");
	}
	/* the mutations are mild enough that some files stay valid */
	ck_assert_int_gt(ok, 100);
}
END_TEST

/* The tests of files, printing and garbage, in the order the suite runs them. */
void conf_tests_files(TCase *tc)
{
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
}
