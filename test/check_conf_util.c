/*
 * Tests of the strict number and host:port parsers of proto/util.c that the
 * configuration parser converts values with (see check_conf.c).
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

/* The tests of util.c's parsers, in the order the suite runs them. */
void conf_tests_util(TCase *tc)
{
	tcase_add_test(tc, test_parse_u64);
	tcase_add_test(tc, test_parse_i64);
	tcase_add_test(tc, test_parse_double);
	tcase_add_test(tc, test_parse_size);
	tcase_add_test(tc, test_parse_hostport);
}
