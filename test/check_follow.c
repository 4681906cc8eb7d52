/*
 * check_follow.c - libdml following shard maps from a scheduler: the
 * requests (this file), the scheduler missing, refusing or wrong and the
 * options (check_follow_sched.c), the fixture (check_follow_fixture.c).
 *
 * Real dml-server processes (test/harness.h) hold fixed ranges from their
 * config files (shard 0/2 and 1/2, job 0), and a scripted scheduler in a
 * thread of the test (test/fake_sched.h) hands libdml maps that describe
 * them rightly or wrongly. A wrong map makes a server answer DML_ERANGE;
 * the client must fetch again, re-route, and complete the request with no
 * error and every push applied exactly once (tables use the `add`
 * optimizer, so a pull shows how often each push was applied). Covered: a
 * right map, a wrong one fixed at once or after a while, one never fixed
 * (request_timeout_ms), a server leaving the map (its link closes), dense
 * and sparse tables, the start clock, a scheduler that is not there, that
 * has no map, that refuses us, or sends maps that fail the checks, and the
 * options.
 *
 * Timing only bounds how long things may take, with wide margins.
 */
#define _GNU_SOURCE
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "test/check_follow.h"
#include "test/check_run.h"
#include "test/fake_sched.h"
#include "test/harness.h"
#include "proto/log.h"
#include "proto/util.h"

/* ---- following the map --------------------------------------------------- */

/* (a) A right map: requests go where they belong, no second fetch. */
START_TEST(test_right_map_routes_requests)
{
	struct follow f;
	uint32_t width;
	uint64_t keys;
	dml_t *d;

	follow_start(&f, -1, 0);
	serve_right(&f, 1);
	d = connect_ok(&f, opts_for(&f, dml_fake_sched_port(f.fake)));
	ck_assert_uint_eq(map_version(d), 1);
	/* Tables come from the job spec. */
	ck_assert_int_eq(dml_table_width(d, 0, &width), 0);
	ck_assert_uint_eq(width, DENSE_WIDTH);
	ck_assert_int_eq(dml_table_size(d, 0, &keys), 0);
	ck_assert_uint_eq(keys, DENSE_KEYS);
	ck_assert_int_eq(dml_table_width(d, 1, &width), 0);
	ck_assert_uint_eq(width, SPARSE_WIDTH);
	ck_assert_int_eq(dml_table_width(d, 7, &width), DML_ENOTFOUND);
	push_ones(d, 2);
	expect_all(d, 2.0f);
	ck_assert_int_eq(dml_wait_all(d), 0);
	/* Nothing bounced, so nothing was fetched again. */
	ck_assert_uint_eq(dml_fake_sched_map_requests(f.fake), 1);
	ck_assert_uint_eq(map_version(d), 1);
	dml_close(d);
	follow_stop(&f);
}
END_TEST

/*
 * (b) A wrong map (A holds everything) fixed before the first request: B's
 * keys bounce off A, the client fetches v2, and every push lands once.
 */
START_TEST(test_wrong_map_is_followed_to_the_right_one)
{
	struct follow f;
	dml_t *d;

	follow_start(&f, -1, 0);
	serve_all_on_a(&f, 1);
	d = connect_ok(&f, opts_for(&f, dml_fake_sched_port(f.fake)));
	ck_assert_uint_eq(map_version(d), 1);
	serve_right(&f, 2);
	push_ones(d, 5);
	ck_assert_uint_eq(map_version(d), 2);
	ck_assert_uint_ge(dml_fake_sched_map_requests(f.fake), 2);
	expect_all(d, 5.0f);
	ck_assert_int_eq(dml_wait_all(d), 0);
	/* The bounce left the server's reason behind. */
	ck_assert_msg(strstr(dml_error_detail(d), "not on this server") != NULL ||
		      strstr(dml_error_detail(d), "not all on this server") != NULL,
		      "detail: %s", dml_error_detail(d));
	dml_close(d);
	follow_stop(&f);
}
END_TEST

/* (c) The map stays wrong for 300 ms: the request waits, then succeeds. */
START_TEST(test_request_waits_for_a_late_fix)
{
	static float ones[DENSE_KEYS * DENSE_WIDTH];
	struct follow f;
	dml_handle_t h;
	uint64_t t0, fixed;
	unsigned asks;
	int done = 0;
	dml_t *d;

	for (size_t i = 0; i < DENSE_KEYS * DENSE_WIDTH; i++)
		ones[i] = 1.0f;
	follow_start(&f, -1, 0);
	serve_all_on_a(&f, 1);
	d = connect_ok(&f, opts_for(&f, dml_fake_sched_port(f.fake)));
	ck_assert_int_eq(dml_push_range(d, 0, 0, DENSE_KEYS, ones, &h), 0);
	t0 = dml_now_ns();
	while (elapsed_ms(t0) < 300) {
		ck_assert_int_eq(dml_progress(d, 10), 0);
		ck_assert_int_eq(dml_test(d, h, &done), 0);
		ck_assert_msg(!done, "the push completed under a wrong map");
	}
	/* It kept asking, with backoff: more than twice, far from every 10 ms. */
	asks = dml_fake_sched_map_requests(f.fake);
	ck_assert_msg(asks >= 3 && asks <= 20, "%u map requests in 300 ms", asks);
	serve_right(&f, 2);
	fixed = dml_now_ns();
	wait_ok(d, h, "push after the fix");
	ck_assert_msg(elapsed_ms(fixed) < 3000, "done %llu ms after the fix",
		      (unsigned long long)elapsed_ms(fixed));
	ck_assert_uint_eq(map_version(d), 2);
	/* Resent to A several times, refused each time: applied once, by B and A. */
	{
		float out[DENSE_KEYS * DENSE_WIDTH];

		ck_assert_int_eq(dml_pull_range(d, 0, 0, DENSE_KEYS, out, &h), 0);
		wait_ok(d, h, "pull");
		for (size_t i = 0; i < DENSE_KEYS * DENSE_WIDTH; i++)
			ck_assert_msg(out[i] == 1.0f, "value %zu is %g", i, out[i]);
	}
	dml_close(d);
	follow_stop(&f);
}
END_TEST

/* (d) A map never fixed: DML_ERANGE once request_timeout_ms has passed. */
START_TEST(test_never_fixed_map_fails_at_request_timeout)
{
	static float ones[DENSE_KEYS * DENSE_WIDTH];
	struct follow f;
	dml_opts_t *o;
	dml_handle_t h;
	uint64_t t0, ms;
	dml_t *d;
	int rc;

	for (size_t i = 0; i < DENSE_KEYS * DENSE_WIDTH; i++)
		ones[i] = 1.0f;
	follow_start(&f, -1, 0);
	serve_all_on_a(&f, 1);
	o = opts_for(&f, dml_fake_sched_port(f.fake));
	ck_assert_int_eq(dml_opts_set(o, "request_timeout_ms", "400"), 0);
	d = connect_ok(&f, o);
	t0 = dml_now_ns();
	ck_assert_int_eq(dml_push_range(d, 0, 0, DENSE_KEYS, ones, &h), 0);
	rc = dml_wait(d, h);
	ms = elapsed_ms(t0);
	ck_assert_msg(rc == DML_ERANGE, "got %s", dml_strerror(rc));
	ck_assert_msg(ms >= 350 && ms < 3000, "failed after %llu ms", (unsigned long long)ms);
	ck_assert_msg(strstr(dml_error_detail(d), "server 127.0.0.1:") != NULL,
		      "detail: %s", dml_error_detail(d));
	/* Refused means not applied: with the right map, every value is 0. */
	serve_right(&f, 2);
	expect_all(d, 0.0f);
	ck_assert_uint_eq(map_version(d), 2);
	dml_close(d);
	follow_stop(&f);
}
END_TEST

/* A key outside a dense table is the caller's error: at once, not after 30 s. */
START_TEST(test_key_outside_dense_table_fails_at_once)
{
	const uint64_t far[] = { 3, DENSE_KEYS }, near[] = { 3, 60 };
	float out[2 * DENSE_WIDTH];
	struct follow f;
	dml_handle_t h;
	uint64_t t0;
	dml_t *d;
	int rc;

	follow_start(&f, -1, 0);
	serve_all_on_a(&f, 1);     /* one range: the path that routes nothing */
	d = connect_ok(&f, opts_for(&f, dml_fake_sched_port(f.fake)));
	t0 = dml_now_ns();
	rc = dml_pull(d, 0, far, 2, out, &h);
	if (rc == 0)
		rc = dml_wait(d, h);
	ck_assert_msg(rc == DML_ERANGE, "got %s", dml_strerror(rc));
	ck_assert_int_eq(dml_pull_range(d, 0, 0, DENSE_KEYS + 1, out, &h), DML_ERANGE);
	ck_assert_uint_lt(elapsed_ms(t0), 3000);
	/* The same with the map fixed (two ranges), and keys inside still work. */
	serve_right(&f, 2);
	ck_assert_int_eq(dml_pull(d, 0, near, 2, out, &h), 0);
	wait_ok(d, h, "pull {3, 60}");
	ck_assert_uint_eq(map_version(d), 2);
	t0 = dml_now_ns();
	rc = dml_pull(d, 0, far, 2, out, &h);
	if (rc == 0)
		rc = dml_wait(d, h);
	ck_assert_msg(rc == DML_ERANGE, "got %s", dml_strerror(rc));
	ck_assert_uint_lt(elapsed_ms(t0), 3000);
	dml_close(d);
	follow_stop(&f);
}
END_TEST

/* (f) Sparse key lists alone: split by hash across the new owners. */
START_TEST(test_sparse_keys_follow_the_map)
{
	static float vals[NSPARSE * SPARSE_WIDTH];
	float out[NSPARSE * SPARSE_WIDTH];
	uint64_t keys[NSPARSE];
	struct follow f;
	dml_handle_t h;
	dml_t *d;

	follow_start(&f, -1, 0);
	serve_all_on_a(&f, 1);
	d = connect_ok(&f, opts_for(&f, dml_fake_sched_port(f.fake)));
	serve_right(&f, 2);
	sparse_keys(keys);
	for (size_t i = 0; i < NSPARSE * SPARSE_WIDTH; i++)
		vals[i] = (float)i;
	ck_assert_int_eq(dml_push(d, 1, keys, NSPARSE, vals, &h), 0);
	wait_ok(d, h, "sparse push");
	ck_assert_uint_eq(map_version(d), 2);
	/* Pull in reverse order: each row must land at its caller's position. */
	for (size_t i = 0; i < NSPARSE / 2; i++) {
		uint64_t k = keys[i];

		keys[i] = keys[NSPARSE - 1 - i];
		keys[NSPARSE - 1 - i] = k;
	}
	ck_assert_int_eq(dml_pull(d, 1, keys, NSPARSE, out, &h), 0);
	wait_ok(d, h, "sparse pull");
	for (size_t i = 0; i < NSPARSE; i++)
		for (size_t j = 0; j < SPARSE_WIDTH; j++)
			ck_assert_msg(out[i * SPARSE_WIDTH + j] ==
				      vals[(NSPARSE - 1 - i) * SPARSE_WIDTH + j],
				      "row %zu col %zu: %g", i, j, out[i * SPARSE_WIDTH + j]);
	dml_close(d);
	follow_stop(&f);
}
END_TEST

/*
 * Connections to the server on 127.0.0.1:port: client-side TCP sockets
 * from /proc/net/tcp, and the server's accepted ends of its Unix socket
 * (proto/local.h), which carry its name, from /proc/net/unix.
 */
static int established_to(uint16_t port)
{
	FILE *fp = fopen("/proc/net/tcp", "r");
	char line[512], name[64], path[256];
	int n = 0;

	ck_assert_ptr_nonnull(fp);
	while (fgets(line, sizeof(line), fp)) {
		unsigned lport, rport, st;

		if (sscanf(line, " %*d: %*x:%x %*x:%x %x", &lport, &rport, &st) == 3 &&
		    rport == port && st == 1)
			n++;
	}
	fclose(fp);
	fp = fopen("/proc/net/unix", "r");
	ck_assert_ptr_nonnull(fp);
	snprintf(name, sizeof(name), "@dml/127.0.0.1:%u", (unsigned)port);
	while (fgets(line, sizeof(line), fp)) {
		unsigned st;

		/* State 03: connected (the listener itself is 01). */
		if (sscanf(line, "%*x: %*x %*x %*x %*x %x %*u %255s", &st, path) == 2 &&
		    st == 3 && strcmp(path, name) == 0)
			n++;
	}
	fclose(fp);
	return n;
}

/*
 * A server that leaves the map: v1 puts the high halves on C (which holds
 * the low ones), v2 on B. The part refused by C goes to B, and the link to
 * C is closed once idle.
 */
START_TEST(test_server_leaving_the_map_is_disconnected)
{
	struct follow f;
	uint16_t c_port;
	uint64_t t0;
	dml_t *d;

	follow_start(&f, -1, 1);
	c_port = dml_test_server_port(f.srv[SRV_C]);
	serve_split(&f, 1, SRV_A, SRV_C);
	d = connect_ok(&f, opts_for(&f, dml_fake_sched_port(f.fake)));
	ck_assert_int_eq(established_to(c_port), 1);
	ck_assert_int_eq(established_to(dml_test_server_port(f.srv[SRV_B])), 0);
	serve_right(&f, 2);
	push_ones(d, 3);
	ck_assert_uint_eq(map_version(d), 2);
	expect_all(d, 3.0f);
	ck_assert_int_eq(established_to(dml_test_server_port(f.srv[SRV_B])), 1);
	t0 = dml_now_ns();
	while (established_to(c_port) > 0 && elapsed_ms(t0) < 5000)
		ck_assert_int_eq(dml_progress(d, 50), 0);
	ck_assert_msg(established_to(c_port) == 0, "still connected to C after 5 s");
	/* The clock goes to the servers of the map only, and that works. */
	ck_assert_int_eq(dml_clock(d), 0);
	expect_all(d, 3.0f);
	dml_close(d);
	follow_stop(&f);
}
END_TEST

/*
 * Exactly once across a map change: a dense push to A (behind a proxy that
 * holds A's replies) is in flight when v2 hands A's keys to C (which holds
 * the same range). The push must not go to C: after the connection to A is
 * cut, it is resent to A, which applies it once. Meanwhile a sparse push
 * refused under v1 goes by v2 and completes.
 */
START_TEST(test_unanswered_part_is_resent_to_its_server_not_rerouted)
{
	static float ones[NSPARSE * SPARSE_WIDTH];
	float dense[DENSE_KEYS * DENSE_WIDTH];
	struct dml_test_proxy *proxy;
	uint64_t keys[NSPARSE], t0;
	struct follow f;
	struct mapbuf b;
	dml_handle_t h1, h2;
	int done = 0, cut = 0;
	dml_t *d, *d2;

	for (size_t i = 0; i < NSPARSE * SPARSE_WIDTH; i++)
		ones[i] = 1.0f;
	sparse_keys(keys);
	follow_start(&f, -1, 1);
	ck_assert_int_eq(dml_test_proxy_start(f.env, dml_test_server_port(f.srv[SRV_A]),
					      &proxy), 0);
	/* v1: dense right (A through the proxy), sparse all on B (wrong). */
	map_init(&b, 1);
	map_server_at(&b, SRV_A, dml_test_proxy_port(proxy));
	map_server(&b, &f, SRV_B);
	map_range(&b, 0, 0, DENSE_KEYS / 2, SRV_A);
	map_range(&b, 0, DENSE_KEYS / 2, DENSE_KEYS, SRV_B);
	map_range(&b, 1, 0, 2 * HASH_HALF, SRV_B);
	dml_fake_sched_set_map(f.fake, &f.spec, &b.map);
	d = connect_ok(&f, opts_for(&f, dml_fake_sched_port(f.fake)));
	ck_assert_int_eq(dml_test_proxy_hold(proxy), 0);
	ck_assert_int_eq(dml_push_range(d, 0, 0, DENSE_KEYS, ones, &h1), 0);
	t0 = dml_now_ns();
	while (elapsed_ms(t0) < 200)
		ck_assert_int_eq(dml_progress(d, 20), 0);
	ck_assert_int_eq(dml_test(d, h1, &done), 0);
	ck_assert_msg(!done, "A's reply got through the holding proxy");
	/* v2: A's keys on C. */
	serve_split(&f, 2, SRV_C, SRV_B);
	ck_assert_int_eq(dml_push(d, 1, keys, NSPARSE, ones, &h2), 0);
	wait_ok(d, h2, "sparse push");
	ck_assert_uint_eq(map_version(d), 2);
	ck_assert_int_eq(dml_test(d, h1, &done), 0);
	ck_assert_msg(!done, "the push to A completed while A's replies are held");
	ck_assert_int_eq(dml_test_proxy_cut(proxy, &cut), 0);
	ck_assert_int_ge(cut, 1);
	wait_ok(d, h1, "dense push, resent to A");
	/* C never saw the dense push; B applied its half once. */
	ck_assert_int_eq(dml_pull_range(d, 0, 0, DENSE_KEYS, dense, &h1), 0);
	wait_ok(d, h1, "pull by v2");
	for (size_t i = 0; i < DENSE_KEYS * DENSE_WIDTH; i++)
		ck_assert_msg(dense[i] == (i < DENSE_KEYS * DENSE_WIDTH / 2 ? 0.0f : 1.0f),
			      "v2 value %zu is %g", i, dense[i]);
	/* A applied it exactly once: read A itself, by a map that says so. */
	serve_right(&f, 3);
	d2 = connect_ok(&f, opts_for(&f, dml_fake_sched_port(f.fake)));
	ck_assert_int_eq(dml_pull_range(d2, 0, 0, DENSE_KEYS, dense, &h1), 0);
	wait_ok(d2, h1, "pull by v3");
	for (size_t i = 0; i < DENSE_KEYS * DENSE_WIDTH; i++)
		ck_assert_msg(dense[i] == 1.0f, "v3 value %zu is %g", i, dense[i]);
	dml_close(d2);
	dml_close(d);
	follow_stop(&f);
}
END_TEST

/* The scheduler connection drops between fetches: the next fetch reconnects. */
START_TEST(test_fetch_reconnects_to_the_scheduler)
{
	struct dml_test_proxy *proxy;
	struct follow f;
	int cut = 0;
	dml_t *d;

	follow_start(&f, -1, 0);
	ck_assert_int_eq(dml_test_proxy_start(f.env, dml_fake_sched_port(f.fake), &proxy), 0);
	serve_all_on_a(&f, 1);
	d = connect_ok(&f, opts_for(&f, dml_test_proxy_port(proxy)));
	ck_assert_int_eq(dml_test_proxy_cut(proxy, &cut), 0);
	ck_assert_int_eq(cut, 1);
	ck_assert_int_eq(dml_progress(d, 100), 0);
	serve_right(&f, 2);
	push_ones(d, 2);
	ck_assert_uint_eq(map_version(d), 2);
	expect_all(d, 2.0f);
	dml_close(d);
	follow_stop(&f);
}
END_TEST

/*
 * A worker that (re)joins at clock 5 under BSP: servers count it at 5, so
 * its pull at clock 5 is answered; at clock 0 it would wait forever.
 */
START_TEST(test_start_clock_is_where_servers_count_the_worker)
{
	float out[DENSE_KEYS * DENSE_WIDTH];
	struct follow f;
	dml_opts_t *o;
	dml_handle_t h;
	dml_t *d;

	follow_start(&f, 0, 0);
	serve_right(&f, 1);
	o = opts_for(&f, dml_fake_sched_port(f.fake));
	ck_assert_int_eq(dml_opts_set(o, "clock", "5"), 0);
	ck_assert_int_eq(dml_opts_set(o, "request_timeout_ms", "5000"), 0);
	d = connect_ok(&f, o);
	ck_assert_uint_eq(dml_current_clock(d), 5);
	ck_assert_int_eq(dml_pull_range(d, 0, 0, DENSE_KEYS, out, &h), 0);
	wait_ok(d, h, "pull at clock 5");
	ck_assert_uint_ge(dml_last_pull_min_clock(d), 5);
	ck_assert_int_eq(dml_clock(d), 0);
	ck_assert_uint_eq(dml_current_clock(d), 6);
	ck_assert_int_eq(dml_pull_range(d, 0, 0, DENSE_KEYS, out, &h), 0);
	wait_ok(d, h, "pull at clock 6");
	ck_assert_uint_ge(dml_last_pull_min_clock(d), 6);
	dml_close(d);
	follow_stop(&f);
}
END_TEST

/* Standalone mode has no map version. */
START_TEST(test_standalone_map_version_is_zero)
{
	struct follow f;
	dml_t *d;

	follow_start(&f, -1, 0);
	ck_assert_int_eq(dml_test_client_new(f.env, f.srv, 2, 1, &d), 0);
	ck_assert_uint_eq(map_version(d), 0);
	ck_assert_int_eq(dml_map_version(NULL, NULL), DML_EINVAL);
	push_ones(d, 1);
	expect_all(d, 1.0f);
	dml_close(d);
	follow_stop(&f);
}
END_TEST

static Suite *follow_suite(void)
{
	Suite *s = suite_create("follow");
	TCase *tc = tcase_create("follow");

	tcase_set_timeout(tc, TEST_TIMEOUT_S);
	tcase_add_test(tc, test_right_map_routes_requests);
	tcase_add_test(tc, test_wrong_map_is_followed_to_the_right_one);
	tcase_add_test(tc, test_request_waits_for_a_late_fix);
	tcase_add_test(tc, test_never_fixed_map_fails_at_request_timeout);
	tcase_add_test(tc, test_sparse_keys_follow_the_map);
	tcase_add_test(tc, test_key_outside_dense_table_fails_at_once);
	tcase_add_test(tc, test_server_leaving_the_map_is_disconnected);
	tcase_add_test(tc, test_unanswered_part_is_resent_to_its_server_not_rerouted);
	tcase_add_test(tc, test_fetch_reconnects_to_the_scheduler);
	tcase_add_test(tc, test_start_clock_is_where_servers_count_the_worker);
	tcase_add_test(tc, test_standalone_map_version_is_zero);
	suite_add_tcase(s, tc);

	tc = tcase_create("scheduler");
	tcase_set_timeout(tc, TEST_TIMEOUT_S);
	check_follow_sched_tests(tc);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return dml_check_run(follow_suite());
}
