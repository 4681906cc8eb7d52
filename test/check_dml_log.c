/*
 * Unit test for libdml's log sink (dml_set_log in dml.h): a sink gets
 * libdml's messages at or above its level and none below it, a NULL sink
 * goes back to stderr, and a level out of range changes nothing. The
 * message used is the warning dml_opts_set logs for a bad value.
 *
 * Must never: need a server, or leave the sink set for the next test
 * (each runs in its own process: fork mode).
 */
#include <check.h>
#include <stdio.h>
#include <string.h>

#include "test/check_run.h"
#include "worker/dml.h"

struct seen {
	int count;
	int level;
	char msg[1024];
};

static void sink(int level, const char *msg, void *arg)
{
	struct seen *s = arg;

	s->count++;
	s->level = level;
	snprintf(s->msg, sizeof(s->msg), "%s", msg);
}

/* A bad value for a known option: dml_opts_set logs a warning. */
static void log_a_warning(void)
{
	dml_opts_t *o;

	ck_assert_int_eq(dml_opts_new(&o), 0);
	ck_assert_int_eq(dml_opts_set(o, "connect_timeout_ms", "soon"), DML_ECONF);
	dml_opts_free(o);
}

/* Send the log to s at level, log the warning: how many messages s has now. */
static int heard_at(struct seen *s, int level)
{
	ck_assert_int_eq(dml_set_log(sink, s, level), 0);
	log_a_warning();
	return s->count;
}

START_TEST(test_sink_at_level)
{
	struct seen s = { 0 };

	ck_assert_int_eq(heard_at(&s, DML_LEVEL_WARN), 1);
	ck_assert_int_eq(s.level, DML_LEVEL_WARN);
	ck_assert_ptr_nonnull(strstr(s.msg, "connect_timeout_ms"));
	ck_assert_ptr_nonnull(strstr(s.msg, "warn"));
	/* More verbose than the message: it still arrives. */
	ck_assert_int_eq(heard_at(&s, DML_LEVEL_DEBUG), 2);
}
END_TEST

START_TEST(test_sink_below_level)
{
	struct seen s = { 0 };

	ck_assert_int_eq(heard_at(&s, DML_LEVEL_ERROR), 0);
}
END_TEST

START_TEST(test_null_sink_and_bad_level)
{
	struct seen s = { 0 };

	ck_assert_int_eq(dml_set_log(sink, &s, DML_LEVEL_INFO), 0);
	ck_assert_int_eq(dml_set_log(sink, &s, DML_LEVEL_DEBUG + 1), DML_EINVAL);
	ck_assert_int_eq(dml_set_log(NULL, NULL, DML_LEVEL_ERROR - 1), DML_EINVAL);
	/* Nothing changed: the sink at info still hears the warning. */
	log_a_warning();
	ck_assert_int_eq(s.count, 1);
	/* Back to stderr: the sink hears nothing more. */
	ck_assert_int_eq(dml_set_log(NULL, NULL, DML_LEVEL_INFO), 0);
	log_a_warning();
	ck_assert_int_eq(s.count, 1);
}
END_TEST

static Suite *dml_log_suite(void)
{
	Suite *s = suite_create("dml_log");
	TCase *tc = tcase_create("sink");

	tcase_add_test(tc, test_sink_at_level);
	tcase_add_test(tc, test_sink_below_level);
	tcase_add_test(tc, test_null_sink_and_bad_level);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return dml_check_run(dml_log_suite());
}
