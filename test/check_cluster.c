/*
 * check_cluster.c - integration tests against real dml-server processes.
 *
 * Every test starts its own servers on loopback ports the kernel picks (see
 * harness.h) and talks to them through libdml, forked worker processes,
 * the dml-example-lsq program, raw sockets, or a proxy that breaks
 * connections. Covered: the staleness bound (SSP, BSP, asynchronous) as seen
 * by pulls, dead workers leaving the clock set, exact sums under pipelining
 * and broken connections (a resent push is applied once), end-to-end
 * training, malformed and unauthenticated input, authentication and config
 * refusals, clean shutdown on SIGTERM, and regressions, each named after what
 * broke (servers out of shard order, key lists on dense tables, closing after
 * a server exited, pushes by control clients, endless resends), and the
 * Prometheus metrics a server serves over HTTP.
 *
 * Tests must not depend on timing for correctness, only for non-vacuity
 * (a slow worker has to make the others wait), with wide margins.
 *
 * This file holds the helpers the tests share (check_cluster.h) and builds
 * the suite; the tests are in check_cluster_*.c, one file per area.
 */
#define _GNU_SOURCE
#include <check.h>
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "proto/auth.h"
#include "test/check_cluster.h"
#include "test/check_run.h"
#include "proto/frame.h"
#include "test/harness.h"
#include "proto/log.h"
#include "proto/util.h"

#define TEST_TIMEOUT_S 45

/* ---- shared helpers ---------------------------------------------------- */

void sleep_us(long us)
{
	struct timespec ts = { us / 1000000, (us % 1000000) * 1000 };

	while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
		;
}

uint64_t elapsed_ms(uint64_t since_ns)
{
	return (dml_now_ns() - since_ns) / 1000000u;
}

/* A new environment with n servers (shards 0/n .. n-1/n) of one config. */
struct dml_test_env *cluster_start(size_t n,
				   const struct dml_test_server_conf *base,
				   struct dml_test_server **servers)
{
	struct dml_test_server_conf conf = *base;
	struct dml_test_env *env;
	size_t i;

	ck_assert_int_eq(dml_test_env_new(&env), 0);
	for (i = 0; i < n; i++) {
		conf.shard_index = (uint32_t)i;
		conf.shard_count = (uint32_t)n;
		conf.node_id = (uint32_t)(i + 1);
		ck_assert_msg(dml_test_server_start(env, &conf, &servers[i]) == 0,
			      "server %zu did not start", i);
	}
	return env;
}

/* SIGTERM, and the server must exit 0 in time. */
void stop_ok(struct dml_test_server *s)
{
	ck_assert_int_eq(dml_test_server_stop(s, DML_TEST_STOP_TIMEOUT_MS), 0);
}

void wait_ok(dml_t *d, int rc, const char *what)
{
	ck_assert_msg(rc == 0, "%s: %s (%s)", what, dml_strerror(rc),
		      dml_error_detail(d));
}

/* Push vals to the dense range [0, n) and wait for the acknowledgement. */
int push_dense(dml_t *d, uint32_t table, uint64_t n, const float *vals)
{
	dml_handle_t h;
	int rc = dml_push_range(d, table, 0, n, vals, &h);

	return rc ? rc : dml_wait(d, h);
}

int pull_dense(dml_t *d, uint32_t table, uint64_t n, float *out)
{
	dml_handle_t h;
	int rc = dml_pull_range(d, table, 0, n, out, &h);

	return rc ? rc : dml_wait(d, h);
}

static Suite *cluster_suite(void)
{
	Suite *s = suite_create("cluster");
	TCase *tc;

	tc = tcase_create("consistency");
	tcase_set_timeout(tc, TEST_TIMEOUT_S);
	cluster_tests_consistency(tc);
	suite_add_tcase(s, tc);

	tc = tcase_create("training");
	tcase_set_timeout(tc, TEST_TIMEOUT_S);
	cluster_tests_training(tc);
	suite_add_tcase(s, tc);

	tc = tcase_create("delivery");
	tcase_set_timeout(tc, TEST_TIMEOUT_S);
	cluster_tests_delivery(tc);
	suite_add_tcase(s, tc);

	tc = tcase_create("abuse");
	tcase_set_timeout(tc, TEST_TIMEOUT_S);
	cluster_tests_abuse(tc);
	suite_add_tcase(s, tc);

	tc = tcase_create("shutdown");
	tcase_set_timeout(tc, TEST_TIMEOUT_S);
	cluster_tests_shutdown(tc);
	cluster_tests_holds(tc);
	suite_add_tcase(s, tc);

	tc = tcase_create("regressions");
	tcase_set_timeout(tc, TEST_TIMEOUT_S);
	cluster_tests_regressions(tc);
	suite_add_tcase(s, tc);

	tc = tcase_create("metrics");
	tcase_set_timeout(tc, TEST_TIMEOUT_S);
	cluster_tests_metrics(tc);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return dml_check_run(cluster_suite());
}
