/*
 * dml-aggregator between hand-made worker frames and a real dml-server
 * (sgd, lr 1, from zeros, asynchronous), all on 127.0.0.1:
 *
 *   - two workers push the same dense range of clock 1: the owner gets one
 *     push (its STATS push counter rises by one, not two) holding the sum,
 *     and neither worker is acknowledged while the owner's ACK is held in a
 *     proxy; both are once it passes;
 *   - a push naming an owner not in servers gets DML_ERANGE, a push of a
 *     shape the owner does not serve gets the owner's error relayed, a
 *     coded push with a NaN scale gets DML_ESHAPE, a topk push naming more
 *     values than max_payload holds as floats gets DML_EFRAME_PAYLOAD, and
 *     the connection stays (a HEARTBEAT is echoed after each);
 *   - the owner stopped after the aggregator forwarded, killed with SIGKILL
 *     and restarted: the aggregator dials it again, resends, and both
 *     workers get their ACKs; the new owner holds the sum once;
 *   - window_ms: a push that the other connected worker never joins is
 *     forwarded alone once the window ran out; with a long window, the
 *     other worker disconnecting closes the entry;
 *   - pulls: two workers pulling one range at one clock cost the owner one
 *     pull; a pull at a lower clock is served from the cache; one at a
 *     higher clock goes upstream again; pulls asking fp16 share an fp16
 *     upstream pull of their own and get fp16; pulling ahead
 *     (pull_ahead = yes), clock k + 1 goes upstream once k is answered and the
 *     worker's pull of k + 1 goes no further;
 *   - conf/aggregator.conf is read by the binary; a bad servers entry stops
 *     it with exit status 2 naming the entry;
 *   - against a fake owner (check_aggregator_fake.c): what a forwarded push
 *     carries, rule 2, splits, retries, relayed errors, resends, pulls.
 */
#include <check.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "proto/codec.h"
#include "proto/dml_error.h"
#include "proto/frame.h"
#include "proto/util.h"
#include "test/check_aggregator.h"
#include "test/check_run.h"
#include "test/harness.h"
#include "test/raw_frame.h"

START_TEST(test_two_pushes_one_forward_acked_after_owner)
{
	struct fixture f;
	float a[KEYS], b[KEYS];
	uint64_t p0, p1, pulls;
	int w1, w2;

	/* A long window: only both workers joining closes the entry. */
	fixture_start(&f, OWNER_PROXIED, "window_ms = 60000\n");
	w1 = worker_connect(&f, 1);
	w2 = worker_connect(&f, 2);
	owner_stats(&f, &p0, &pulls);
	ck_assert_int_eq(dml_test_proxy_hold(f.proxy), 0);
	fill(a, 1);
	fill(b, 2);
	send_push(w1, 11, 1, f.owner_addr, a);
	expect_silence(w1);             /* waits for worker 2 */
	send_push(w2, 21, 1, f.owner_addr, b);
	wait_owner_pushes(&f, p0 + 1);  /* applied, its ACK held in the proxy */
	expect_silence(w1);
	expect_silence(w2);
	ck_assert_int_eq(dml_test_proxy_pass(f.proxy), 0);
	expect_reply(w1, 11, 0);
	expect_reply(w2, 21, 0);
	owner_stats(&f, &p1, &pulls);
	ck_assert_uint_eq(p1, p0 + 1);
	expect_owner_sum(&f, 3);
	wait_agg_metric(&f, "dml_aggregator_pushes_forwarded_total", 1);
	close(w1);
	close(w2);
	fixture_end(&f);
}
END_TEST

/*
 * A worker's CLOCK through the aggregator rides on its last push still
 * queued: the owner moves the worker's clock as it applies the summed
 * push, while the ACKs are still held on their way back. A CLOCK that
 * comes once that push is on its way goes on its own after the answer;
 * one with no push queued goes at once.
 */
START_TEST(test_clocks_ride_with_the_summed_push)
{
	struct fixture f;
	float a[KEYS], b[KEYS];
	uint64_t p0, pulls;
	int w1, w2;

	fixture_start(&f, OWNER_PROXIED, "window_ms = 60000\n");
	w1 = worker_connect(&f, 1);
	w2 = worker_connect(&f, 2);
	owner_stats(&f, &p0, &pulls);
	ck_assert_uint_eq(owner_clock(&f, 1), 0);
	fill(a, 1);
	fill(b, 2);
	send_push(w1, 11, 1, f.owner_addr, a);
	send_clock(w1, 1, f.owner_addr);
	wait_agg_metric(&f, "dml_aggregator_clocks_in_total", 1);
	/* Its push waits for worker 2's, and the clock with it. */
	ck_assert_uint_eq(owner_clock(&f, 1), 0);
	ck_assert_int_eq(dml_test_proxy_hold(f.proxy), 0);
	send_push(w2, 21, 1, f.owner_addr, b);
	wait_owner_pushes(&f, p0 + 1);
	ck_assert_uint_eq(owner_clock(&f, 1), 1);
	expect_silence(w1);
	/* Worker 2's clock comes after its push left: it follows the ACK. */
	send_clock(w2, 1, f.owner_addr);
	wait_agg_metric(&f, "dml_aggregator_clocks_in_total", 2);
	ck_assert_uint_eq(owner_clock(&f, 2), 0);
	ck_assert_int_eq(dml_test_proxy_pass(f.proxy), 0);
	expect_reply(w1, 11, 0);
	expect_reply(w2, 21, 0);
	wait_owner_clock(&f, 2, 1);
	wait_agg_metric(&f, "dml_aggregator_clocks_alone_total", 1);
	/* No push queued: at once; a clock for an owner it does not know is refused. */
	send_clock(w1, 2, f.owner_addr);
	wait_owner_clock(&f, 1, 2);
	wait_agg_metric(&f, "dml_aggregator_clocks_alone_total", 2);
	send_clock(w1, 3, "127.0.0.1:1");
	expect_reply(w1, 0, DML_ERANGE);
	expect_alive(w1, 5);
	ck_assert_uint_eq(owner_clock(&f, 1), 2);
	expect_owner_sum(&f, 3);
	close(w1);
	close(w2);
	fixture_end(&f);
}
END_TEST

START_TEST(test_bad_requests_keep_the_connection)
{
	struct fixture f;
	float a[KEYS], wide[3 * KEYS];
	uint8_t coded[4 + KEYS];
	uint64_t p0, p1, pulls;
	Dml__Meta m;
	int w1;

	fixture_start(&f, OWNER_DIRECT, "window_ms = 0\n");
	w1 = worker_connect(&f, 1);
	owner_stats(&f, &p0, &pulls);
	fill(a, 1);
	send_push(w1, 1, 1, "127.0.0.1:1", a);
	expect_reply(w1, 1, DML_ERANGE);
	expect_alive(w1, 2);
	/* Three floats a key where the owner's table has one: its refusal. */
	memset(wide, 0, sizeof(wide));
	dense_meta(&m, DML__MSG_TYPE__PUSH, 3, 1, f.owner_addr);
	m.seq = 1;
	m.value_width = 3;
	raw_frame_send(w1, &m, wide, sizeof(wide));
	expect_reply(w1, 3, DML_ESHAPE);
	expect_alive(w1, 4);
	/* int8 with a NaN scale: not an encoding of any values. */
	memset(coded, 0, sizeof(coded));
	dml_store_le32(coded, 0x7fc00000u);
	dense_meta(&m, DML__MSG_TYPE__PUSH, 5, 1, f.owner_addr);
	m.seq = 2;
	m.dtype = DML__DTYPE__INT8;
	raw_frame_send(w1, &m, coded, sizeof(coded));
	expect_reply(w1, 5, DML_ESHAPE);
	expect_alive(w1, 6);
	/* topk naming no values of 2^30: four bytes that would decode to 4 GiB. */
	memset(coded, 0, sizeof(coded));
	dense_meta(&m, DML__MSG_TYPE__PUSH, 7, 1, f.owner_addr);
	m.seq = 3;
	m.key_end = 1ull << 30;
	m.dtype = DML__DTYPE__TOPK;
	raw_frame_send(w1, &m, coded, 4);
	expect_reply(w1, 7, DML_EFRAME_PAYLOAD);
	expect_alive(w1, 8);
	owner_stats(&f, &p1, &pulls);
	ck_assert_uint_eq(p1, p0);
	close(w1);
	fixture_end(&f);
}
END_TEST

START_TEST(test_owner_killed_before_ack_gets_the_resend)
{
	struct fixture f;
	float a[KEYS], b[KEYS];
	uint64_t p, pulls;
	int w1, w2;

	fixture_start(&f, OWNER_DIRECT, "window_ms = 60000\n");
	ck_assert_int_eq(dml_test_server_pin_port(f.owner), 0);
	w1 = worker_connect(&f, 1);
	w2 = worker_connect(&f, 2);
	ck_assert_int_eq(dml_test_server_signal(f.owner, SIGSTOP), 0);
	fill(a, 1);
	fill(b, 2);
	send_push(w1, 11, 1, f.owner_addr, a);
	send_push(w2, 21, 1, f.owner_addr, b);
	wait_agg_metric(&f, "dml_aggregator_pushes_forwarded_total", 1);
	expect_silence(w1);
	expect_silence(w2);
	dml_test_server_kill(f.owner);
	ck_assert_int_eq(dml_test_server_restart(f.owner), 0);
	workers_rejoin(&f);
	expect_reply(w1, 11, 0);
	expect_reply(w2, 21, 0);
	owner_stats(&f, &p, &pulls);
	ck_assert_uint_eq(p, 1);
	expect_owner_sum(&f, 3);
	close(w1);
	close(w2);
	fixture_end(&f);
}
END_TEST

START_TEST(test_window_forwards_a_lone_push)
{
	struct fixture f;
	float a[KEYS];
	uint64_t p0, p1, pulls;
	int w1, w2;

	fixture_start(&f, OWNER_DIRECT, "window_ms = 50\n");
	w1 = worker_connect(&f, 1);
	w2 = worker_connect(&f, 2);     /* connected, never pushes */
	owner_stats(&f, &p0, &pulls);
	fill(a, 1);
	send_push(w1, 11, 1, f.owner_addr, a);
	expect_reply(w1, 11, 0);
	owner_stats(&f, &p1, &pulls);
	ck_assert_uint_eq(p1, p0 + 1);
	expect_owner_sum(&f, 1);
	close(w1);
	close(w2);
	fixture_end(&f);
}
END_TEST

/* Rule 3 counts the workers connected now: one leaving closes the entry. */
START_TEST(test_a_worker_leaving_closes_the_entry)
{
	struct fixture f;
	float a[KEYS];
	int w1, w2;

	fixture_start(&f, OWNER_DIRECT, "window_ms = 60000\n");
	w1 = worker_connect(&f, 1);
	w2 = worker_connect(&f, 2);
	fill(a, 1);
	send_push(w1, 11, 1, f.owner_addr, a);
	expect_silence(w1);
	close(w2);
	expect_reply(w1, 11, 0);
	expect_owner_sum(&f, 1);
	close(w1);
	fixture_end(&f);
}
END_TEST

START_TEST(test_pulls_share_one_upstream_pull)
{
	struct fixture f;
	float a[KEYS], got[KEYS];
	uint64_t pushes, u0, u;
	int w1, w2;

	/* Pulls on demand only: each upstream pull below is one a test pull
	 * asked for (test_pull_ahead_fetches_the_next_clock turns pulling
	 * ahead on). */
	fixture_start(&f, OWNER_DIRECT, "window_ms = 0\npull_ahead = no\n");
	w1 = worker_connect(&f, 1);
	w2 = worker_connect(&f, 2);
	fill(a, 1);
	send_push(w1, 1, 1, f.owner_addr, a);
	expect_reply(w1, 1, 0);
	owner_stats(&f, &pushes, &u0);
	pull_values(w1, 2, 3, f.owner_addr, DML__DTYPE__F32, got);
	expect_values(got, 1);
	pull_values(w2, 3, 3, f.owner_addr, DML__DTYPE__F32, got);
	expect_values(got, 1);
	owner_stats(&f, &pushes, &u);
	ck_assert_uint_eq(u, u0 + 1);
	/* Fetched for clock 3: it answers clock 2 too. */
	pull_values(w1, 4, 2, f.owner_addr, DML__DTYPE__F32, got);
	expect_values(got, 1);
	owner_stats(&f, &pushes, &u);
	ck_assert_uint_eq(u, u0 + 1);
	/* Clock 4 may need newer values: upstream again, after a new push. */
	send_push(w2, 5, 1, f.owner_addr, a);
	expect_reply(w2, 5, 0);
	pull_values(w1, 6, 4, f.owner_addr, DML__DTYPE__F32, got);
	expect_values(got, 2);
	owner_stats(&f, &pushes, &u);
	ck_assert_uint_eq(u, u0 + 2);
	/* fp16 is fetched as fp16 (what crosses the slow link), in a slot of
	 * its own: upstream once more, and cached for the next fp16 pull. */
	pull_values(w2, 7, 4, f.owner_addr, DML__DTYPE__F16, got);
	expect_values(got, 2);
	pull_values(w1, 8, 4, f.owner_addr, DML__DTYPE__F16, got);
	expect_values(got, 2);
	owner_stats(&f, &pushes, &u);
	ck_assert_uint_eq(u, u0 + 3);
	wait_agg_metric(&f, "dml_aggregator_pulls_ahead_total", 0);
	close(w1);
	close(w2);
	fixture_end(&f);
}
END_TEST

/*
 * pull_ahead = yes: once a worker's pull of clock k is answered,
 * the pull of k + 1 goes with no one waiting on it; the worker's pull of
 * k + 1 then joins it or finds it cached, and goes no further itself.
 */
START_TEST(test_pull_ahead_fetches_the_next_clock)
{
	struct fixture f;
	float a[KEYS], got[KEYS];
	int w1;

	fixture_start(&f, OWNER_DIRECT, "window_ms = 0\npull_ahead = yes\n");
	w1 = worker_connect(&f, 1);
	fill(a, 1);
	send_push(w1, 1, 1, f.owner_addr, a);
	expect_reply(w1, 1, 0);
	pull_values(w1, 2, 3, f.owner_addr, DML__DTYPE__F32, got);
	expect_values(got, 1);
	/* Clock 3 upstream, then clock 4 ahead. */
	wait_agg_metric(&f, "dml_aggregator_pulls_ahead_total", 1);
	wait_agg_metric(&f, "dml_aggregator_pulls_forwarded_total", 2);
	pull_values(w1, 3, 4, f.owner_addr, DML__DTYPE__F32, got);
	expect_values(got, 1);
	/* Clock 5 ahead, and nothing else: clock 4 was on its way already. */
	wait_agg_metric(&f, "dml_aggregator_pulls_ahead_total", 2);
	wait_agg_metric(&f, "dml_aggregator_pulls_forwarded_total", 3);
	/* A pull of a clock already held is answered and sends nothing. */
	pull_values(w1, 4, 2, f.owner_addr, DML__DTYPE__F32, got);
	expect_values(got, 1);
	wait_agg_metric(&f, "dml_aggregator_pulls_in_total", 3);
	wait_agg_metric(&f, "dml_aggregator_pulls_forwarded_total", 3);
	close(w1);
	fixture_end(&f);
}
END_TEST

/* conf/aggregator.conf is what the binary reads; a bad servers entry is exit 2. */
START_TEST(test_example_config_and_refusals)
{
	struct dml_test_env *env;
	struct dml_test_output out;
	const char *srcdir = getenv("DML_SRCDIR");
	char example[4096], *bin, *bad;
	char *argv[5];

	ck_assert_int_eq(dml_test_env_new(&env), 0);
	dml_test_bin("server/dml-aggregator", &bin);
	snprintf(example, sizeof(example), "%s/conf/aggregator.conf", srcdir ? srcdir : ".");
	argv[0] = bin;
	argv[1] = (char *)"-c";
	argv[2] = example;
	argv[3] = (char *)"--print-config";
	argv[4] = NULL;
	ck_assert_int_eq(dml_test_run(env, argv, WAIT_MS, &out), 0);
	ck_assert_msg(out.status == 0, "%s", out.err);
	ck_assert_ptr_nonnull(strstr(out.out, "window_ms = 5"));
	dml_test_output_free(&out);
	ck_assert_int_eq(dml_test_env_write(env, "bad.conf", "[aggregator]\nnode_id = 1\n"
					    "servers = 127.0.0.1:7001,nowhere\n"
					    "secret_file = /dev/null\n", 0600, &bad), 0);
	argv[2] = bad;
	ck_assert_int_eq(dml_test_run(env, argv, WAIT_MS, &out), 0);
	ck_assert_int_eq(out.status, 2);
	ck_assert_ptr_nonnull(strstr(out.err, "nowhere"));
	dml_test_output_free(&out);
	free(bad);
	free(bin);
	dml_test_env_free(env);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("aggregator");
	TCase *tc = tcase_create("aggregator");

	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_two_pushes_one_forward_acked_after_owner);
	tcase_add_test(tc, test_clocks_ride_with_the_summed_push);
	tcase_add_test(tc, test_bad_requests_keep_the_connection);
	tcase_add_test(tc, test_owner_killed_before_ack_gets_the_resend);
	tcase_add_test(tc, test_window_forwards_a_lone_push);
	tcase_add_test(tc, test_a_worker_leaving_closes_the_entry);
	tcase_add_test(tc, test_pulls_share_one_upstream_pull);
	tcase_add_test(tc, test_pull_ahead_fetches_the_next_clock);
	tcase_add_test(tc, test_example_config_and_refusals);
	add_fake_owner_tests(tc);
	suite_add_tcase(s, tc);
	return dml_check_run(s);
}
