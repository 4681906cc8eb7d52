/*
 * check_memory.c - integration tests: memory no peer can make a dml-server
 * hold. Against a real dml-server over real sockets:
 *  - a big refused push leaves no buffer behind (the server's RSS);
 *  - pulls of absent sparse keys create no rows, and return what a first
 *    push starts from;
 *  - workers gone long enough are forgotten, metrics series included,
 *    while a connected one keeps its push dedupe;
 *  - a whole-table pull nobody reads makes the next one wait for the
 *    output budget rather than pin another copy, and a reader that never
 *    reads is closed once others wait on it.
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
#include "proto/frame.h"
#include "test/harness.h"
#include "test/limits_raw.h"
#include "proto/util.h"

#define TEST_TIMEOUT_S 90

/* ---- (c) memory a peer cannot pin -------------------------------------- */

#define BIG_FLOATS (16u << 20)     /* a 64 MiB payload */

START_TEST(test_refused_push_leaves_no_buffer)
{
	struct dml_test_server_conf conf = { .staleness = -1, .tables = TABLE };
	struct dml_test_server *srv;
	struct dml_test_env *env;
	Dml__Meta m = DML__META__INIT;
	float *big = calloc(BIG_FLOATS, sizeof(float));
	struct answer a;
	struct raw r;
	long before, after;

	ck_assert_ptr_nonnull(big);
	ck_assert_int_eq(dml_test_env_new(&env), 0);
	ck_assert_int_eq(dml_test_server_start(env, &conf, &srv), 0);
	raw_open(env, dml_test_server_port(srv), 1, 1, &r);
	raw_push(&r, 0, 1, big, &a);
	expect_ack(&a, "small push");
	before = rss_kb(dml_test_server_pid(srv));
	/* No table 9 here: refused once its 64 MiB arrived. */
	m.type = DML__MSG_TYPE__PUSH;
	m.table = 9;
	m.seq = 2;
	m.value_width = 1;
	m.dense = 1;
	m.key_begin = 0;
	m.key_end = BIG_FLOATS;
	raw_call(&r, &m, big, BIG_FLOATS * sizeof(float), &a);
	ck_assert_int_eq(a.type, DML__MSG_TYPE__ERROR);
	ck_assert_int_eq(a.code, DML_ENOTFOUND);
	/* The connection is open and serving; its buffer went with the error. */
	expect_row(&r, 0, 0, 0, "after the refused push");
	after = rss_kb(dml_test_server_pid(srv));
#ifdef __SANITIZE_ADDRESS__
	/* AddressSanitizer's allocator keeps freed blocks (its quarantine). */
	fprintf(stderr, "refused push: server RSS %ld kB before, %ld kB after (not checked "
		"under AddressSanitizer)\n", before, after);
#else
	ck_assert_msg(after < before + 16 * 1024, "RSS %ld kB before, %ld kB after", before,
		      after);
#endif
	close(r.fd);
	free(big);
	ck_assert_int_eq(dml_test_server_stop(srv, DML_TEST_STOP_TIMEOUT_MS), 0);
	dml_test_env_free(env);
}
END_TEST

#define SPARSE_TABLE "[table]\nid = 1\nkind = sparse\nwidth = 2\ninit = uniform\n" \
	"init_scale = 0.5\nseed = 3\noptimizer = add\n"
#define ABSENT 4096

/* Sparse pull of keys of table 1; the first key's row in a->values. */
static void raw_pull_sparse(struct raw *r, const uint64_t *keys, uint32_t n,
			    struct answer *a)
{
	Dml__Meta m = DML__META__INIT;

	m.type = DML__MSG_TYPE__PULL;
	m.table = 1;
	m.value_width = W;
	m.num_keys = n;
	raw_call(r, &m, keys, n * sizeof(uint64_t), a);
	ck_assert_int_eq(a->type, DML__MSG_TYPE__PULL_REPLY);
}

START_TEST(test_sparse_pulls_create_no_rows)
{
	struct dml_test_server_conf conf = { .staleness = -1, .tables = SPARSE_TABLE };
	struct dml_test_server *srv;
	struct dml_test_env *env;
	char port_file[4096], extra[sizeof(port_file) + 64], *body;
	static uint64_t keys[ABSENT];
	uint8_t push[8 + W * sizeof(float)];
	float g[W] = { 1, 1 }, first[W];
	Dml__Meta m = DML__META__INIT;
	struct answer a;
	struct raw r;

	ck_assert_int_eq(dml_test_env_new(&env), 0);
	metrics_conf(env, port_file, sizeof(port_file), extra, sizeof(extra));
	conf.server_extra = extra;
	ck_assert_int_eq(dml_test_server_start(env, &conf, &srv), 0);
	raw_open(env, dml_test_server_port(srv), 1, 1, &r);
	for (uint32_t i = 0; i < ABSENT; i++)
		keys[i] = 1000003ull * (i + 1);
	for (int round = 0; round < 3; round++)
		raw_pull_sparse(&r, keys, ABSENT, &a);
	memcpy(first, a.values, sizeof(first));
	ck_assert_msg(first[0] != 0 && fabsf(first[0]) <= 0.5f, "init value %g",
		      (double)first[0]);
	body = metrics_of(env, port_file);
	ck_assert_msg(strstr(body, "dml_server_table_rows{table=\"1\"} 0\n"), "%s", body);
	free(body);
	/* A push starts from the values the pulls returned. */
	memcpy(push, &keys[0], 8);
	memcpy(push + 8, g, sizeof(g));
	m.type = DML__MSG_TYPE__PUSH;
	m.table = 1;
	m.seq = 1;
	m.value_width = W;
	m.num_keys = 1;
	raw_call(&r, &m, push, sizeof(push), &a);
	expect_ack(&a, "sparse push");
	raw_pull_sparse(&r, keys, 1, &a);
	ck_assert(a.values[0] == first[0] + 1 && a.values[1] == first[1] + 1);
	body = metrics_of(env, port_file);
	ck_assert_msg(strstr(body, "dml_server_table_rows{table=\"1\"} 1\n"), "%s", body);
	free(body);
	close(r.fd);
	ck_assert_int_eq(dml_test_server_stop(srv, DML_TEST_STOP_TIMEOUT_MS), 0);
	dml_test_env_free(env);
}
END_TEST

#define TRANSIENT 200

/* Series of dml_server_worker_clock on the metrics page. */
static int worker_series(struct dml_test_env *env, const char *port_file)
{
	char *body = metrics_of(env, port_file), *p = body;
	int n = 0;

	while ((p = strstr(p, "\ndml_server_worker_clock{")) != NULL) {
		n++;
		p++;
	}
	free(body);
	return n;
}

START_TEST(test_gone_workers_are_forgotten)
{
	struct dml_test_server_conf conf = {
		.staleness = -1,
		.tables = TABLE,
		.dead_after_ms = 100,
		.extra = "[limits]\nforget_worker_after_ms = 300\n",
	};
	struct dml_test_server *srv;
	struct dml_test_env *env;
	char port_file[4096], extra[sizeof(port_file) + 64];
	float g[W] = { 1, 1 };
	uint64_t t0;
	struct answer a;
	struct raw r, stay;

	ck_assert_int_eq(dml_test_env_new(&env), 0);
	metrics_conf(env, port_file, sizeof(port_file), extra, sizeof(extra));
	conf.server_extra = extra;
	ck_assert_int_eq(dml_test_server_start(env, &conf, &srv), 0);
	/* One worker stays connected throughout; it is never forgotten. */
	raw_open(env, dml_test_server_port(srv), 1, 1, &stay);
	raw_push(&stay, 0, 1, g, &a);
	expect_ack(&a, "staying worker");
	for (uint32_t id = 100; id < 100 + TRANSIENT; id++) {
		raw_open(env, dml_test_server_port(srv), id, 1, &r);
		raw_push(&r, 1, 1, g, &a);
		expect_ack(&a, "transient worker");
		close(r.fd);
	}
	t0 = dml_now_ns();
	while (worker_series(env, port_file) != 1) {
		ck_assert_msg(dml_now_ns() - t0 < 30000000000ull,
			      "gone workers still have metrics series after 30 s");
		poll(NULL, 0, 50);
	}
	/* The one that stayed kept its dedupe: a resend is not applied. */
	raw_push(&stay, 0, 1, g, &a);
	expect_ack(&a, "resend");
	expect_row(&stay, 0, 1, 1, "after a resend of the staying worker");
	/* A forgotten worker that comes back is served as a new one. */
	raw_open(env, dml_test_server_port(srv), 100, 1, &r);
	raw_push(&r, 1, 2, g, &a);
	expect_ack(&a, "a forgotten worker back");
	expect_row(&r, 1, TRANSIENT + 1, TRANSIENT + 1, "after it pushed");
	close(r.fd);
	close(stay.fd);
	ck_assert_int_eq(dml_test_server_stop(srv, DML_TEST_STOP_TIMEOUT_MS), 0);
	dml_test_env_free(env);
}
END_TEST

#define BUDGET_KEYS (4u << 20)   /* a 16 MiB dense table of width 1 */

START_TEST(test_unread_pulls_stay_within_output_budget)
{
	struct dml_test_server_conf conf = {
		.staleness = -1,
		.tables = "[table]\nid = 0\nkind = dense\nwidth = 1\nkeys = 4194304\n"
			  "optimizer = add\n",
		.extra = "[limits]\noutput_budget = 16M\noutput_stall_ms = 600000\n",
	};
	struct dml_test_server *srv;
	struct dml_test_env *env;
	char port_file[4096], extra[sizeof(port_file) + 64];
	uint64_t ida, idb;
	struct answer a;
	struct raw ra, rb;
	long rss;

	ck_assert_int_eq(dml_test_env_new(&env), 0);
	metrics_conf(env, port_file, sizeof(port_file), extra, sizeof(extra));
	conf.server_extra = extra;
	ck_assert_int_eq(dml_test_server_start(env, &conf, &srv), 0);
	raw_open_fd(env, slow_reader(dml_test_server_port(srv)), 1, 1, &ra);
	raw_open_fd(env, slow_reader(dml_test_server_port(srv)), 2, 1, &rb);
	/* A's reply does not fit the socket: most of it stays queued. */
	ida = whole_table_pull(&ra);
	wait_metric_at_least(env, port_file, "dml_server_output_queued_bytes", 4u << 20);
	/* B's would take the queue past the budget: it waits. */
	idb = whole_table_pull(&rb);
	wait_metric_at_least(env, port_file, "dml_server_pulls_budget_held_total", 1);
	rss = rss_kb(dml_test_server_pid(srv));
	fprintf(stderr, "output budget: server RSS %ld kB with one 16 MiB reply queued and "
		"one held\n", rss);
	/* Small requests of others go on. */
	client_round(env, srv, 3);
	/* A reads its reply: B's goes out. */
	raw_answer(&ra, ida, &a);
	ck_assert_int_eq(a.type, DML__MSG_TYPE__PULL_REPLY);
	raw_answer(&rb, idb, &a);
	ck_assert_int_eq(a.type, DML__MSG_TYPE__PULL_REPLY);
	ck_assert_float_eq(a.values[0], 1.0f);
	close(ra.fd);
	close(rb.fd);
	ck_assert_int_eq(dml_test_server_stop(srv, DML_TEST_STOP_TIMEOUT_MS), 0);
	dml_test_env_free(env);
}
END_TEST

START_TEST(test_reader_that_never_reads_is_closed_when_others_wait)
{
	struct dml_test_server_conf conf = {
		.staleness = -1,
		.tables = "[table]\nid = 0\nkind = dense\nwidth = 1\nkeys = 4194304\n"
			  "optimizer = add\n",
		.extra = "[limits]\noutput_budget = 16M\noutput_stall_ms = 300\n",
	};
	struct dml_test_server *srv;
	struct dml_test_env *env;
	char port_file[4096], extra[sizeof(port_file) + 64];
	uint64_t idb;
	struct answer a;
	struct raw ra, rb;

	ck_assert_int_eq(dml_test_env_new(&env), 0);
	metrics_conf(env, port_file, sizeof(port_file), extra, sizeof(extra));
	conf.server_extra = extra;
	ck_assert_int_eq(dml_test_server_start(env, &conf, &srv), 0);
	raw_open_fd(env, slow_reader(dml_test_server_port(srv)), 1, 1, &ra);
	raw_open(env, dml_test_server_port(srv), 2, 1, &rb);
	(void)whole_table_pull(&ra);
	wait_metric_at_least(env, port_file, "dml_server_output_queued_bytes", 4u << 20);
	idb = whole_table_pull(&rb);
	/* A never reads: it is closed, and B's pull is answered. */
	raw_answer(&rb, idb, &a);
	ck_assert_int_eq(a.type, DML__MSG_TYPE__PULL_REPLY);
	ck_assert_int_eq(metric_value(env, port_file, "dml_server_output_stalled_total"), 1);
	ck_assert_int_eq(dml_test_raw_wait_closed(ra.fd, WAIT_MS), 0);
	close(ra.fd);
	close(rb.fd);
	ck_assert_int_eq(dml_test_server_stop(srv, DML_TEST_STOP_TIMEOUT_MS), 0);
	dml_test_env_free(env);
}
END_TEST

static Suite *memory_suite(void)
{
	Suite *s = suite_create("memory");
	TCase *tc = tcase_create("memory");

	tcase_set_timeout(tc, TEST_TIMEOUT_S);
	tcase_add_test(tc, test_refused_push_leaves_no_buffer);
	tcase_add_test(tc, test_sparse_pulls_create_no_rows);
	tcase_add_test(tc, test_gone_workers_are_forgotten);
	tcase_add_test(tc, test_unread_pulls_stay_within_output_budget);
	tcase_add_test(tc, test_reader_that_never_reads_is_closed_when_others_wait);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return dml_check_run(memory_suite());
}
