/*
 * check_limits.c - integration tests: no peer can exhaust a dml-server.
 *
 * Covered, each against a real dml-server process over real sockets:
 *  - a flood of idle unauthenticated connections past max_connections
 *    leaves room for a real client (the oldest handshakes are closed);
 *  - out of file descriptors, the listener pauses instead of spinning and
 *    logs about it at most once a second, and accepts again once
 *    descriptors are free;
 *  - pushes holding NaN or infinities are refused (error naming the table,
 *    counted in a metric, the row unchanged) unless the job allows them;
 *  - a push whose seq jumps past the resend window is refused and does not
 *    turn later pushes into duplicates; a worker new to the server starts
 *    at whatever seq it brings.
 * Memory a peer could pin is check_memory.c's.
 */
#define _GNU_SOURCE
#include <check.h>
#include <errno.h>
#include <math.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "proto/auth.h"
#include "test/check_run.h"
#include "proto/dml_error.h"
#include "proto/finite.h"
#include "proto/frame.h"
#include "test/harness.h"
#include "test/limits_raw.h"
#include "proto/util.h"

#define TEST_TIMEOUT_S 90

/* ---- (a) unauthenticated peers cannot crowd out clients -------------------- */

#define FLOOD 48

START_TEST(test_idle_handshakes_leave_room_for_clients)
{
	struct dml_test_server_conf conf = {
		.staleness = -1,
		.tables = TABLE,
		/* Long enough that the handshake timeout cannot be what lets the
		 * client in. */
		.extra = "[limits]\nmax_connections = 32\nmax_preauth = 4\n"
			 "handshake_timeout_ms = 120000\n",
	};
	struct dml_test_server *srv;
	struct dml_test_env *env;
	int fds[FLOOD], closed = 0;

	ck_assert_int_eq(dml_test_env_new(&env), 0);
	ck_assert_int_eq(dml_test_server_start(env, &conf, &srv), 0);
	/* Each idle peer gets its CHALLENGE: accepted, then left hanging. */
	for (int i = 0; i < FLOOD; i++) {
		ck_assert_int_eq(dml_test_raw_connect(dml_test_server_port(srv), &fds[i]), 0);
		ck_assert_int_eq(dml_test_raw_skip_frame(fds[i], WAIT_MS), 0);
	}
	client_round(env, srv, 1);
	client_round(env, srv, 2);
	/* The oldest idle handshakes were closed to make room, the newest
	 * max_preauth ones may still be open. */
	for (int i = 0; i < FLOOD - 4; i++)
		closed += dml_test_raw_wait_closed(fds[i], WAIT_MS) == 0;
	ck_assert_int_eq(closed, FLOOD - 4);
	ck_assert_int_ge(log_count(srv, 0, "closed unauthenticated to make room"), 1);
	for (int i = 0; i < FLOOD; i++)
		close(fds[i]);
	ck_assert_int_eq(dml_test_server_stop(srv, DML_TEST_STOP_TIMEOUT_MS), 0);
	dml_test_env_free(env);
}
END_TEST

/* ---- (b) out of file descriptors: back off, don't spin ------------------- */

#define NOFILE_LIMIT 24
#define HOGS 48

START_TEST(test_fd_exhaustion_pauses_accepting)
{
	static const char *const starved[] = { "accept: Too many open files", NULL };
	struct dml_test_server_conf conf = {
		.staleness = -1,
		.tables = TABLE,
		.extra = "[limits]\nhandshake_timeout_ms = 120000\n",
	};
	struct dml_test_server *srv;
	struct dml_test_env *env;
	struct rlimit old, low;
	char port_file[4096], extra[sizeof(port_file) + 64];
	int fds[HOGS], mfds[HOGS];
	uint16_t mport;
	size_t from;

	ck_assert_int_eq(dml_test_env_new(&env), 0);
	metrics_conf(env, port_file, sizeof(port_file), extra, sizeof(extra));
	conf.server_extra = extra;
	/* The server inherits the limit; this process gets its own back. */
	ck_assert_int_eq(getrlimit(RLIMIT_NOFILE, &old), 0);
	low = old;
	low.rlim_cur = NOFILE_LIMIT;
	ck_assert_int_eq(setrlimit(RLIMIT_NOFILE, &low), 0);
	ck_assert_int_eq(dml_test_server_start(env, &conf, &srv), 0);
	ck_assert_int_eq(setrlimit(RLIMIT_NOFILE, &old), 0);

	for (int i = 0; i < HOGS; i++)
		ck_assert_int_eq(dml_test_raw_connect(dml_test_server_port(srv), &fds[i]), 0);
	/* Starved: one line, then the next no sooner than a second later,
	 * with the failures between counted rather than logged. */
	from = dml_test_server_log_size(srv);
	ck_assert_int_eq(dml_test_server_log_wait(srv, from, starved, WAIT_MS), 0);
	from = dml_test_server_log_size(srv);
	ck_assert_int_eq(dml_test_server_log_wait(srv, from, starved, WAIT_MS), 0);
	ck_assert_int_le(log_count(srv, 0, "accept: "), 3);
	ck_assert_int_eq(log_count(srv, 0, "Error from accept"), 0);

	/* The metrics page's listener (evhttp's) backs off the same way. */
	ck_assert_int_eq(dml_test_port_file_read(port_file, &mport), 0);
	from = dml_test_server_log_size(srv);
	for (int i = 0; i < HOGS; i++)
		ck_assert_int_eq(dml_test_raw_connect(mport, &mfds[i]), 0);
	ck_assert_int_eq(dml_test_server_log_wait(srv, from, starved, WAIT_MS), 0);
	ck_assert_int_eq(log_count(srv, 0, "Error from accept"), 0);

	/* Descriptors free again: the listener takes connections again. */
	for (int i = 0; i < HOGS; i++) {
		close(fds[i]);
		close(mfds[i]);
	}
	client_round(env, srv, 1);
	ck_assert_int_eq(dml_test_server_stop(srv, DML_TEST_STOP_TIMEOUT_MS), 0);
	dml_test_env_free(env);
}
END_TEST

/* ---- (d) NaN and infinities ---------------------------------------------- */

START_TEST(test_nonfinite_push_is_refused)
{
	struct dml_test_server_conf conf = { .staleness = -1, .tables = TABLE };
	struct dml_test_server *srv, *lax;
	struct dml_test_env *env;
	char port_file[4096], extra[sizeof(port_file) + 64], *body;
	float ok[W] = { 1, 2 }, nan_g[W] = { 1, NAN }, inf_g[W] = { -INFINITY, 0 };
	struct answer a;
	struct raw r;

	ck_assert_int_eq(dml_test_env_new(&env), 0);
	metrics_conf(env, port_file, sizeof(port_file), extra, sizeof(extra));
	conf.server_extra = extra;
	ck_assert_int_eq(dml_test_server_start(env, &conf, &srv), 0);
	raw_open(env, dml_test_server_port(srv), 1, 1, &r);
	raw_push(&r, 3, 1, ok, &a);
	expect_ack(&a, "finite push");
	raw_push(&r, 3, 2, nan_g, &a);
	ck_assert_int_eq(a.type, DML__MSG_TYPE__ERROR);
	ck_assert_int_eq(a.code, DML_EINVAL);
	ck_assert_msg(strstr(a.message, "table 0") && strstr(a.message, "NaN"), "%s", a.message);
	raw_push(&r, 3, 3, inf_g, &a);
	ck_assert_int_eq(a.type, DML__MSG_TYPE__ERROR);
	expect_row(&r, 3, 1, 2, "after the refused pushes");
	/* A refused push does not spend its seq: the same seq goes in later. */
	raw_push(&r, 3, 3, ok, &a);
	expect_ack(&a, "finite push after");
	expect_row(&r, 3, 2, 4, "after a finite push");
	body = metrics_of(env, port_file);
	ck_assert_msg(strstr(body, "\ndml_server_pushes_nonfinite_total 2\n"), "%s", body);
	free(body);
	close(r.fd);

	/* The job may allow them. */
	conf.server_extra = NULL;
	conf.job_extra = "allow_nonfinite = true\n";
	ck_assert_int_eq(dml_test_server_start(env, &conf, &lax), 0);
	raw_open(env, dml_test_server_port(lax), 1, 1, &r);
	raw_push(&r, 3, 1, inf_g, &a);
	expect_ack(&a, "infinite push, allowed");
	close(r.fd);
	ck_assert_int_eq(dml_test_server_stop(srv, DML_TEST_STOP_TIMEOUT_MS), 0);
	ck_assert_int_eq(dml_test_server_stop(lax, DML_TEST_STOP_TIMEOUT_MS), 0);
	dml_test_env_free(env);
}
END_TEST

/* The scan's speed: far below the optimizer's cost per value. */
START_TEST(test_finite_scan_is_cheap)
{
	size_t n = 16u << 20;
	float *v = dml_xmalloc(n * sizeof(float));
	uint64_t t0;
	double ns_per;

	for (size_t i = 0; i < n; i++)
		v[i] = (float)i * 0.5f;
	t0 = dml_now_ns();
	ck_assert_int_eq(dml_values_finite(v, n), 1);
	ns_per = (double)(dml_now_ns() - t0) / (double)n;
	fprintf(stderr, "finite scan: %.3f ns a value\n", ns_per);
	v[n - 1] = NAN;
	ck_assert_int_eq(dml_values_finite(v, n), 0);
	v[n - 1] = 0;
	v[7] = -INFINITY;
	ck_assert_int_eq(dml_values_finite(v, n), 0);
	free(v);
}
END_TEST

/* Every position of short and odd lengths is looked at: the vectorised tail
 * steps, the overlapping last one and the scalar rest. */
START_TEST(test_finite_scan_sees_every_position)
{
	static const size_t lens[] = { 1, 3, 255, 256, 257, 511, 1000, 1024, 4095, 4096,
				       4097, 4096 + 300 };
	float *v = dml_xcalloc(4096 + 300, sizeof(float));

	for (size_t k = 0; k < sizeof(lens) / sizeof(lens[0]); k++) {
		size_t n = lens[k];

		ck_assert_int_eq(dml_values_finite(v, n), 1);
		for (size_t i = 0; i < n; i++) {
			v[i] = i % 2 ? NAN : INFINITY;
			ck_assert_msg(dml_values_finite(v, n) == 0, "n %zu: %zu missed", n, i);
			v[i] = 0;
		}
	}
	free(v);
}
END_TEST

/* ---- (e) sequence numbers past the resend window -------------------------- */

START_TEST(test_seq_jump_is_refused)
{
	struct dml_test_server_conf conf = { .staleness = -1, .tables = TABLE };
	struct dml_test_server *srv;
	struct dml_test_env *env;
	float g[W] = { 1, 1 };
	struct answer a;
	struct raw r, fresh;

	ck_assert_int_eq(dml_test_env_new(&env), 0);
	ck_assert_int_eq(dml_test_server_start(env, &conf, &srv), 0);
	raw_open(env, dml_test_server_port(srv), 1, 1, &r);
	raw_push(&r, 0, 1, g, &a);
	expect_ack(&a, "seq 1");
	raw_push(&r, 0, UINT64_MAX, g, &a);
	ck_assert_int_eq(a.type, DML__MSG_TYPE__ERROR);
	ck_assert_int_eq(a.code, DML_EINVAL);
	ck_assert_msg(strstr(a.message, "table 0"), "%s", a.message);
	raw_push(&r, 0, 2 + (1ull << 20), g, &a);
	ck_assert_int_eq(a.type, DML__MSG_TYPE__ERROR);
	expect_row(&r, 0, 1, 1, "after the refused jumps");
	/* Later pushes are applied, not taken for resends. */
	raw_push(&r, 0, 2, g, &a);
	expect_ack(&a, "seq 2");
	raw_push(&r, 0, 1 + (1ull << 20), g, &a);
	expect_ack(&a, "seq 2 + window - 1");
	expect_row(&r, 0, 3, 3, "after seq 2 and a jump inside the window");
	/* A resend is still acknowledged without being applied. */
	raw_push(&r, 0, 2, g, &a);
	expect_ack(&a, "resend of seq 2");
	expect_row(&r, 0, 3, 3, "after a resend");

	/* A worker this server never saw (as after a remap) starts where it is. */
	raw_open(env, dml_test_server_port(srv), 2, 1, &fresh);
	raw_push(&fresh, 1, 5000000000ull, g, &a);
	expect_ack(&a, "first push of a worker new to the server");
	raw_push(&fresh, 1, 5000000001ull, g, &a);
	expect_ack(&a, "its next push");
	expect_row(&fresh, 1, 2, 2, "the new worker's row");
	close(fresh.fd);
	close(r.fd);
	ck_assert_int_eq(dml_test_server_stop(srv, DML_TEST_STOP_TIMEOUT_MS), 0);
	dml_test_env_free(env);
}
END_TEST

static Suite *limits_suite(void)
{
	Suite *s = suite_create("limits");
	TCase *tc = tcase_create("limits");

	tcase_set_timeout(tc, TEST_TIMEOUT_S);
	tcase_add_test(tc, test_idle_handshakes_leave_room_for_clients);
	tcase_add_test(tc, test_fd_exhaustion_pauses_accepting);
	tcase_add_test(tc, test_nonfinite_push_is_refused);
	tcase_add_test(tc, test_finite_scan_is_cheap);
	tcase_add_test(tc, test_finite_scan_sees_every_position);
	tcase_add_test(tc, test_seq_jump_is_refused);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return dml_check_run(limits_suite());
}
