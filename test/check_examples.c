/*
 * The example configurations in conf/ must parse with the options the code
 * really has, so the documentation cannot drift from the parser.
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>

#include "test/check_run.h"
#include "worker/dml.h"
#include "proto/dml_error.h"
#include "sched/sched_conf.h"
#include "server/server_conf.h"

static const char *srcdir(void)
{
	const char *d = getenv("DML_SRCDIR");

	return d ? d : ".";
}

START_TEST(server_example_parses)
{
	struct dml_server_conf conf = { 0 };
	char path[4096], err[512] = "";
	int rc;

	snprintf(path, sizeof(path), "%s/conf/server.conf", srcdir());
	rc = dml_conf_load(&dml_server_conf_schema, path, &conf, err, sizeof(err));
	ck_assert_msg(rc == 0, "%s", err);
	ck_assert_uint_eq(conf.ntables, 1);
	ck_assert_uint_eq(conf.shard_count, 1);
	ck_assert_int_eq(conf.staleness, -1);
	dml_conf_free(&dml_server_conf_schema, &conf);
}
END_TEST

START_TEST(sched_example_parses)
{
	struct dml_sched_conf conf = { 0 };
	char path[4096], err[512] = "";
	int rc;

	snprintf(path, sizeof(path), "%s/conf/sched.conf", srcdir());
	rc = dml_conf_load(&dml_sched_conf_schema, path, &conf, err, sizeof(err));
	ck_assert_msg(rc == 0, "%s", err);
	ck_assert_uint_gt(conf.dead_after_ms, conf.suspect_after_ms);
	dml_conf_free(&dml_sched_conf_schema, &conf);
}
END_TEST

START_TEST(client_example_parses)
{
	dml_opts_t *o;
	char path[4096], err[512] = "";
	int rc;

	snprintf(path, sizeof(path), "%s/conf/client.conf", srcdir());
	ck_assert_int_eq(dml_opts_new(&o), 0);
	rc = dml_opts_load(o, path, err, sizeof(err));
	ck_assert_msg(rc == 0, "%s", err);
	ck_assert_int_eq(dml_opts_set(o, "no_such_key", "1"), DML_EINVAL);
	ck_assert_int_eq(dml_opts_set(o, "worker_id", "x"), DML_ECONF);
	ck_assert_int_eq(dml_opts_set(o, "worker_id", "7"), 0);
	dml_opts_free(o);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("examples");
	TCase *tc = tcase_create("conf");

	tcase_add_test(tc, server_example_parses);
	tcase_add_test(tc, client_example_parses);
	tcase_add_test(tc, sched_example_parses);
	suite_add_tcase(s, tc);
	return dml_check_run(s);
}
