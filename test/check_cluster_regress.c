/*
 * check_cluster_regress.c - regressions against real dml-server processes
 * (see check_cluster.c), each test named after what broke: servers out of
 * shard order, key lists on dense tables, closing after a server exited,
 * pushes by control clients, endless resends.
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
#include "proto/frame.h"
#include "test/harness.h"
#include "proto/log.h"
#include "proto/util.h"

/* ---- regressions: each test is named after what broke ------------------ */

/* clang-format off */
#define REG_KEYS 10
#define REG_TABLES                                                        \
	"[table]\nid = 0\nkind = dense\nwidth = 1\nkeys = " STR(REG_KEYS) \
	"\noptimizer = add\n"                                             \
	"\n[table]\nid = 1\nkind = sparse\nwidth = 1\noptimizer = add\n"
/* clang-format on */
/* A request the client sends this often, losing the connection each time,
 * is failed (MAX_SENDS in the client). */
#define REG_MAX_SENDS 5
/* Longer than any of these tests may take: a regression fails, not hangs. */
#define REG_REQUEST_TIMEOUT "8000"

/* libdml's log lines while a capture is on (the client names the culprit
 * there; a dml_connect() that fails returns no handle to ask). */
static char captured[16384];
static size_t ncaptured;

static void capture_sink(int level, const char *line, void *arg)
{
	size_t n = strlen(line);

	if (n > sizeof(captured) - 1 - ncaptured)
		n = sizeof(captured) - 1 - ncaptured;
	memcpy(captured + ncaptured, line, n);
	ncaptured += n;
	captured[ncaptured] = '\0';
	fputs(line, stderr);
}

/* dml_connect() with the logger captured; returns its code. */
static int connect_captured(const dml_opts_t *o, dml_t **d)
{
	int rc;

	ncaptured = 0;
	captured[0] = '\0';
	dml_log_set_sink(capture_sink, NULL);
	rc = dml_connect(o, d);
	dml_log_set_sink(NULL, NULL);
	return rc;
}

/* A client for servers in shard order with a request timeout, so that a
 * request that would never finish fails the test instead of hanging it. */
static void client_bounded(struct dml_test_env *env, struct dml_test_server *const *srv,
			   size_t n, uint32_t worker_id, dml_t **d)
{
	dml_opts_t *o;

	ck_assert_int_eq(dml_test_client_opts(env, srv, n, worker_id, &o), 0);
	ck_assert_int_eq(dml_opts_set(o, "request_timeout_ms", REG_REQUEST_TIMEOUT), 0);
	ck_assert_int_eq(dml_connect(o, d), 0);
	dml_opts_free(o);
}

/* Submit a key-list push or pull and wait; the first error either gives. */
static int push_keys(dml_t *d, uint32_t table, const uint64_t *keys, size_t n,
		     const float *vals)
{
	dml_handle_t h;
	int rc = dml_push(d, table, keys, n, vals, &h);

	return rc ? rc : dml_wait(d, h);
}

static int pull_keys(dml_t *d, uint32_t table, const uint64_t *keys, size_t n,
		     float *out)
{
	dml_handle_t h;
	int rc = dml_pull(d, table, keys, n, out, &h);

	return rc ? rc : dml_wait(d, h);
}

/* The dense table 0 must hold exactly want[0..REG_KEYS). */
static void expect_dense(dml_t *d, const float *want, const char *when)
{
	float out[REG_KEYS];
	int i;

	wait_ok(d, pull_dense(d, 0, REG_KEYS, out), when);
	for (i = 0; i < REG_KEYS; i++)
		ck_assert_msg(out[i] == want[i], "%s: key %d is %g, want %g", when, i,
			      out[i], want[i]);
}

/* How often needle occurs in the server's log from byte `from` on. */
static int log_count(const struct dml_test_server *s, size_t from, const char *needle)
{
	char *text;
	const char *p;
	int n = 0;

	ck_assert_int_eq(dml_test_file_read(dml_test_server_log(s), &text), 0);
	p = strlen(text) >= from ? text + from : "";
	while ((p = strstr(p, needle)) != NULL) {
		n++;
		p += strlen(needle);
	}
	free(text);
	return n;
}

/*
 * Servers listed out of shard order made dml_connect() return +1, which no
 * caller takes for an error. It must be DML_ECONF, and the message must name
 * a server that is out of place, never the one that is where it belongs.
 */
START_TEST(test_misordered_servers_fail_with_econf)
{
	struct dml_test_server_conf conf = { .staleness = -1, .tables = REG_TABLES };
	struct dml_test_server *srv[3];
	struct dml_test_env *env = cluster_start(3, &conf, srv);
	struct dml_test_server *swapped[3] = { srv[0], srv[2], srv[1] };
	char misplaced[2][96], in_place[64];
	dml_opts_t *o;
	dml_t *d = NULL;
	int rc;

	/* Shard 2 listed second, shard 1 third: either may be reported first. */
	snprintf(misplaced[0], sizeof(misplaced[0]), "127.0.0.1:%u is shard 2/3",
		 dml_test_server_port(srv[2]));
	snprintf(misplaced[1], sizeof(misplaced[1]), "127.0.0.1:%u is shard 1/3",
		 dml_test_server_port(srv[1]));
	snprintf(in_place, sizeof(in_place), "127.0.0.1:%u is shard",
		 dml_test_server_port(srv[0]));
	ck_assert_int_eq(dml_test_client_opts(env, swapped, 3, 1, &o), 0);
	ck_assert_int_eq(dml_opts_set(o, "connect_timeout_ms", "5000"), 0);
	rc = connect_captured(o, &d);
	dml_opts_free(o);
	ck_assert_msg(rc == DML_ECONF, "swapped shards: got %d (%s), want DML_ECONF", rc,
		      dml_strerror(rc));
	ck_assert_ptr_null(d);
	ck_assert_msg(strstr(captured, misplaced[0]) || strstr(captured, misplaced[1]),
		      "no error names a misplaced server:\n%s", captured);
	ck_assert_msg(!strstr(captured, in_place),
		      "the server in its place is blamed:\n%s", captured);

	/* Too few servers listed: shard 1 of 3 sits at position 1 of 2. */
	ck_assert_int_eq(dml_test_client_opts(env, srv, 2, 1, &o), 0);
	rc = connect_captured(o, &d);
	dml_opts_free(o);
	ck_assert_msg(rc == DML_ECONF, "two of three shards: got %d (%s)", rc,
		      dml_strerror(rc));
	ck_assert_ptr_null(d);

	/* The same servers in shard order are fine. */
	ck_assert_int_eq(dml_test_client_new(env, srv, 3, 1, &d), 0);
	dml_close(d);
	stop_ok(srv[0]);
	stop_ok(srv[1]);
	stop_ok(srv[2]);
	dml_test_env_free(env);
}
END_TEST

/*
 * Key lists on a dense table were sent as ranges (and the server refused key
 * lists on dense tables), so dml_push/dml_pull never finished. On one server
 * the whole list goes to it unsplit; on two it is split by shard, or sent
 * whole when every key is on one shard.
 */
static void dense_key_lists_run(size_t nservers)
{
	struct dml_test_server_conf conf = { .staleness = -1, .tables = REG_TABLES };
	struct dml_test_server *srv[2];
	struct dml_test_env *env = cluster_start(nservers, &conf, srv);
	const uint64_t keys[] = { 3, 7, 3 }, high[] = { 9, 7 };
	const uint64_t outside[] = { 3, REG_KEYS }, far[] = { 1000 };
	const float vals[] = { 1, 10, 100 }, high_vals[] = { 5, 6 };
	float want[REG_KEYS] = { 0 }, out[3] = { -1, -1, -1 }, junk[2];
	uint64_t t0;
	dml_t *d;
	int rc;

	fprintf(stderr, "dense key lists on %zu server(s)\n", nservers);
	client_bounded(env, srv, nservers, 1, &d);
	wait_ok(d, push_keys(d, 0, keys, 3, vals), "push {3, 7, 3}");
	want[3] = 101;
	want[7] = 10;
	wait_ok(d, pull_keys(d, 0, keys, 3, out), "pull {3, 7, 3}");
	ck_assert_msg(out[0] == 101 && out[1] == 10 && out[2] == 101,
		      "pull {3, 7, 3} gave {%g, %g, %g}, want {101, 10, 101}", out[0],
		      out[1], out[2]);
	expect_dense(d, want, "after the key-list push");

	/* Every key on the last shard. */
	wait_ok(d, push_keys(d, 0, high, 2, high_vals), "push {9, 7}");
	want[9] = 5;
	want[7] = 16;
	wait_ok(d, pull_keys(d, 0, high, 2, out), "pull {9, 7}");
	ck_assert_msg(out[0] == 5 && out[1] == 16, "pull {9, 7} gave {%g, %g}", out[0],
		      out[1]);

	/* A key outside the table fails the whole request, at once. */
	t0 = dml_now_ns();
	rc = push_keys(d, 0, outside, 2, high_vals);
	ck_assert_msg(rc == DML_ERANGE, "push {3, %d}: %s, want DML_ERANGE", REG_KEYS,
		      dml_strerror(rc));
	rc = pull_keys(d, 0, far, 1, junk);
	ck_assert_msg(rc == DML_ERANGE, "pull {1000}: %s, want DML_ERANGE",
		      dml_strerror(rc));
	rc = pull_keys(d, 0, outside, 2, junk);
	ck_assert_msg(rc == DML_ERANGE, "pull {3, %d}: %s, want DML_ERANGE", REG_KEYS,
		      dml_strerror(rc));
	ck_assert_uint_lt(elapsed_ms(t0), 3000);
	expect_dense(d, want, "after the refused push");

	dml_close(d);
	while (nservers-- > 0)
		stop_ok(srv[nservers]);
	dml_test_env_free(env);
}

START_TEST(test_dense_key_lists_do_not_hang)
{
	dense_key_lists_run(2);
	dense_key_lists_run(1);
}
END_TEST

/*
 * dml_close() after a server had exited waited the full 10 s for the answer
 * to its BYE. A lost connection answers it: close must be prompt, whether
 * one of two servers or both are gone.
 */
START_TEST(test_close_after_server_exit_is_prompt)
{
	struct dml_test_server_conf conf = { .staleness = -1, .tables = REG_TABLES };
	struct dml_test_server *srv[2];
	struct dml_test_env *env = cluster_start(2, &conf, srv);
	const float ones[REG_KEYS] = { 1, 1, 1, 1, 1, 1, 1, 1, 1, 1 };
	uint64_t t0, ms;
	dml_t *a, *b;

	ck_assert_int_eq(dml_test_client_new(env, srv, 2, 1, &a), 0);
	ck_assert_int_eq(dml_test_client_new(env, srv, 2, 2, &b), 0);
	wait_ok(a, push_dense(a, 0, REG_KEYS, ones), "push a");
	wait_ok(b, push_dense(b, 0, REG_KEYS, ones), "push b");

	/* Neither client has looked at its sockets since the server exited. */
	stop_ok(srv[1]);
	t0 = dml_now_ns();
	dml_close(a);
	ms = elapsed_ms(t0);
	fprintf(stderr, "close with one of two servers gone: %llu ms\n",
		(unsigned long long)ms);
	ck_assert_msg(ms < 3000, "close took %llu ms with one server gone",
		      (unsigned long long)ms);

	stop_ok(srv[0]);
	t0 = dml_now_ns();
	dml_close(b);
	ms = elapsed_ms(t0);
	fprintf(stderr, "close with every server gone: %llu ms\n",
		(unsigned long long)ms);
	ck_assert_msg(ms < 3000, "close took %llu ms with every server gone",
		      (unsigned long long)ms);
	dml_test_env_free(env);
}
END_TEST

/*
 * A control client's pushes were applied, though it has no clock and no
 * push sequence to make a resend harmless. They must be refused with
 * DML_EROLE and change nothing; its pulls keep working.
 */
START_TEST(test_control_push_is_refused)
{
	struct dml_test_server_conf conf = { .staleness = -1, .tables = REG_TABLES };
	struct dml_test_server *srv[2];
	struct dml_test_env *env = cluster_start(2, &conf, srv);
	const float ones[REG_KEYS] = { 1, 1, 1, 1, 1, 1, 1, 1, 1, 1 };
	const float big[REG_KEYS] = { 1000, 1000, 1000, 1000, 1000,
				      1000, 1000, 1000, 1000, 1000 };
	const uint64_t dense_keys[] = { 1, 8 }, sparse_keys[] = { 42, 4242, 424242 };
	const float two[] = { 2, 2, 2 };
	float out[3];
	dml_t *w, *ctl;
	int rc, i;

	client_bounded(env, srv, 2, 1, &w);
	client_bounded(env, srv, 2, 0, &ctl);
	wait_ok(w, push_dense(w, 0, REG_KEYS, ones), "worker dense push");
	wait_ok(w, push_keys(w, 1, sparse_keys, 3, two), "worker sparse push");

	rc = push_dense(ctl, 0, REG_KEYS, big);
	ck_assert_msg(rc == DML_EROLE, "control range push: %s, want DML_EROLE",
		      dml_strerror(rc));
	ck_assert_msg(strstr(dml_error_detail(ctl), "control"),
		      "the refusal does not say why: '%s'", dml_error_detail(ctl));
	rc = push_keys(ctl, 0, dense_keys, 2, big);
	ck_assert_msg(rc == DML_EROLE, "control dense key push: %s, want DML_EROLE",
		      dml_strerror(rc));
	rc = push_keys(ctl, 1, sparse_keys, 3, big);
	ck_assert_msg(rc == DML_EROLE, "control sparse push: %s, want DML_EROLE",
		      dml_strerror(rc));

	/* Nothing changed, and the control client still reads both tables. */
	expect_dense(ctl, ones, "control pull after its refused pushes");
	wait_ok(ctl, pull_keys(ctl, 1, sparse_keys, 3, out), "control sparse pull");
	for (i = 0; i < 3; i++)
		ck_assert_msg(out[i] == 2, "sparse key %llu is %g, want 2",
			      (unsigned long long)sparse_keys[i], out[i]);
	expect_dense(w, ones, "worker pull");

	dml_close(ctl);
	dml_close(w);
	stop_ok(srv[0]);
	stop_ok(srv[1]);
	dml_test_env_free(env);
}
END_TEST

/*
 * A request that makes the server drop the connection every time (here: over
 * the server's max_payload) was resent after every reconnect, forever. It
 * must fail after a few sends; the server stays up, the client recovers, and
 * nothing of it was applied.
 */
#define BIG_KEYS 262144 /* 1 MiB of floats; the server takes 64K */

static void expect_small(dml_t *d, float want, const char *when)
{
	float out[16];
	dml_handle_t h;
	int i;

	wait_ok(d, dml_pull_range(d, 0, 0, 16, out, &h), when);
	wait_ok(d, dml_wait(d, h), when);
	for (i = 0; i < 16; i++)
		ck_assert_msg(out[i] == want, "%s: key %d is %g, want %g", when, i,
			      out[i], want);
}

/* Run one doomed request; it must fail in time, within REG_MAX_SENDS tries. */
static void doomed_request(struct dml_test_server *srv, dml_t *d, int pull, float *big)
{
	const char *refused = dml_strerror(DML_EFRAME_PAYLOAD);
	size_t from = dml_test_server_log_size(srv);
	uint64_t t0 = dml_now_ns(), ms;
	dml_handle_t h;
	int rc, tries;
	size_t i;

	rc = pull ? dml_pull_range(d, 0, 0, BIG_KEYS, big, &h)
		  : dml_push_range(d, 0, 0, BIG_KEYS, big, &h);
	if (rc == 0)
		rc = dml_wait(d, h);
	ms = elapsed_ms(t0);
	tries = log_count(srv, from, refused);
	fprintf(stderr, "1 MiB %s: %s after %llu ms, %d refusal(s) (%s)\n",
		pull ? "pull" : "push", dml_strerror(rc), (unsigned long long)ms, tries,
		dml_error_detail(d));
	ck_assert_msg(rc != 0, "a request over the server's limit succeeded");
	ck_assert_msg(rc != DML_ETIMEDOUT, "resent until the request timeout");
	ck_assert_uint_lt(ms, 5000);
	ck_assert_msg(tries >= 1 && tries <= REG_MAX_SENDS,
		      "the server refused it %d times", tries);
	ck_assert_msg(dml_test_server_alive(srv), "the server died");
	/* A failed pull leaves its output alone. */
	for (i = 0; pull && i < BIG_KEYS; i++)
		ck_assert_msg(big[i] == 1000, "failed pull wrote %g to key %zu", big[i], i);
}

START_TEST(test_connection_breaking_request_is_not_resent_forever)
{
	struct dml_test_server_conf conf = {
		.staleness = -1,
		.tables = "[table]\nid = 0\nkind = dense\nwidth = 1\nkeys = " STR(
			BIG_KEYS) "\noptimizer = add\n",
		.extra = "[limits]\nmax_payload = 64K\n",
	};
	struct dml_test_server *srv;
	struct dml_test_env *env = cluster_start(1, &conf, &srv);
	const float ones[16] = { 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1 };
	float *big = dml_xmalloc(BIG_KEYS * sizeof(float));
	dml_t *d, *fresh;
	size_t i;

	for (i = 0; i < BIG_KEYS; i++)
		big[i] = 1000;
	client_bounded(env, &srv, 1, 1, &d);
	doomed_request(srv, d, 0, big);
	/* The same client carries on once it has reconnected. */
	wait_ok(d, push_dense(d, 0, 16, ones), "small push after the failed one");
	expect_small(d, 1, "pull after the failed push");
	/* A pull whose answer could never be sent is refused the same way. */
	doomed_request(srv, d, 1, big);

	client_bounded(env, &srv, 1, 2, &fresh);
	wait_ok(fresh, push_dense(fresh, 0, 16, ones), "push on a fresh client");
	expect_small(fresh, 2, "pull on a fresh client");
	dml_close(fresh);
	dml_close(d);
	free(big);
	stop_ok(srv);
	dml_test_env_free(env);
}
END_TEST

/* The tests of the regressions test case, in the order the suite runs them. */
void cluster_tests_regressions(TCase *tc)
{
	tcase_add_test(tc, test_misordered_servers_fail_with_econf);
	tcase_add_test(tc, test_dense_key_lists_do_not_hang);
	tcase_add_test(tc, test_close_after_server_exit_is_prompt);
	tcase_add_test(tc, test_control_push_is_refused);
	tcase_add_test(tc, test_connection_breaking_request_is_not_resent_forever);
}
