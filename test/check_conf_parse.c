/*
 * Tests of proto/conf.c on text (see check_conf.c): valid files land in the
 * right fields with their defaults, and every class of bad file is refused
 * with its exact "file:line: message".
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

/* ---- parsing valid files -------------------------------------------------- */

START_TEST(test_full_file)
{
	struct tconf c;

	ck_assert_int_eq(parse(full_text, &c), 0);
	ck_assert_str_eq(conf_err, "");
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
	char *text = dml_xmalloc(300 * 40 + strlen(min_text) + 1);
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
		ck_assert_msg(parse(text, &c) == 0, "%s: %s", cases[i].line, conf_err);
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
	ck_assert_int_eq(dml_conf_parse_string(NULL, "x", "", &c, conf_err, sizeof(conf_err)),
			 DML_EINVAL);
	ck_assert_int_eq(dml_conf_parse_string(&tschema, "x", NULL, &c, conf_err,
					       sizeof(conf_err)), DML_EINVAL);
	ck_assert_int_eq(dml_conf_parse_string(&tschema, "x", "", NULL, conf_err,
					       sizeof(conf_err)), DML_EINVAL);
	ck_assert_int_eq(dml_conf_load(&tschema, NULL, &c, conf_err, sizeof(conf_err)),
			 DML_EINVAL);
	/* no room for a message is allowed; the code still tells the story */
	ck_assert_int_eq(dml_conf_parse_string(&tschema, "x", "[x]", &c, NULL, 0),
			 DML_ECONF);
	dml_conf_free(&tschema, &c);
	ck_assert_int_eq(dml_conf_parse_string(&tschema, "x", "[x]", &c, conf_err, 8),
			 DML_ECONF);
	ck_assert_str_eq(conf_err, "x:1: un");
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
	ck_assert_int_eq(dml_conf_parse_string(&s, "s", "", &c, conf_err, sizeof(conf_err)),
			 DML_EINVAL);
	ck_assert_str_eq(conf_err, "s: bad default of threads in [server]: 0 is out of "
			      "range 1..8");
	s.options = bad_section;
	ck_assert_int_eq(dml_conf_parse_string(&s, "s", "", &c, conf_err, sizeof(conf_err)),
			 DML_EINVAL);
	ck_assert_str_eq(conf_err, "s: schema: bad option #0 (threads)");
	s.options = enum_without_choices;
	ck_assert_int_eq(dml_conf_parse_string(&s, "s", "", &c, conf_err, sizeof(conf_err)),
			 DML_EINVAL);
	dml_conf_free(&tschema, &c);
}
END_TEST

/* The tests of valid and invalid text, in the order the suite runs them. */
void conf_tests_parse(TCase *tc)
{
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
}
