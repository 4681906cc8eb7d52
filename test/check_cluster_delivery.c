/*
 * check_cluster_delivery.c - training and exactly-once delivery against
 * real dml-server processes (see check_cluster.c): dml-example-lsq on two
 * shards, exact sums under pipelined pushes, and pushes resent over broken
 * connections applied once.
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

/* ---- training: dml-example-lsq on two shards ---------------------------- */

#define LSQ_WORKERS 3
#define LSQ_DIM 50
/* The noise alone gives 0.5 * 0.1^2 = 0.005; starting from w = 0 the loss
 * is about 0.5 * D = 25. */
#define LSQ_LOSS_BOUND 0.05

/* The number after `key` on the first line of text that has it, or -1. */
static double number_after(const char *text, const char *key)
{
	const char *p = strstr(text, key);

	return p ? strtod(p + strlen(key), NULL) : -1.0;
}

START_TEST(test_lsq_trains_on_two_shards)
{
	struct dml_test_server_conf conf = {
		.staleness = 2,
		.workers = LSQ_WORKERS,
		.tables = "[table]\nid = 3\nkind = dense\nwidth = 1\n"
			  "keys = " STR(LSQ_DIM) "\noptimizer = sgd\nlr = 0.05\n",
	};
	struct dml_test_server *srv[2];
	struct dml_test_env *env = cluster_start(2, &conf, srv);
	char servers[64], id[16], log_name[256], *bin, *text;
	/* clang-format off */
	char *argv[] = { NULL, "--servers", servers, "--secret", NULL,
			 "--worker-id", id, "--workers", STR(LSQ_WORKERS), "--table", "3",
			 "--dim", STR(LSQ_DIM), "--iters", "300", "--batch", "32",
			 "--seed", "11", "--report", "100", "--staleness-report", NULL };
	/* clang-format on */
	pid_t pids[LSQ_WORKERS];
	double first, final;
	int i, st;

	snprintf(servers, sizeof(servers), "127.0.0.1:%u,127.0.0.1:%u",
		 dml_test_server_port(srv[0]), dml_test_server_port(srv[1]));
	dml_test_bin("worker/dml-example-lsq", &bin);
	argv[0] = bin;
	argv[4] = (char *)dml_test_env_secret(env);
	for (i = 0; i < LSQ_WORKERS; i++) {
		snprintf(id, sizeof(id), "%d", i + 1);
		snprintf(log_name, sizeof(log_name), "lsq-%d.log", i + 1);
		ck_assert_int_eq(dml_test_proc_spawn(env, argv, log_name, &pids[i]), 0);
	}
	free(bin);
	for (i = 0; i < LSQ_WORKERS; i++) {
		ck_assert_int_eq(dml_test_proc_wait(env, pids[i], 30000, &st), 0);
		snprintf(log_name, sizeof(log_name), "%s/lsq-%d.log",
			 dml_test_env_dir(env), i + 1);
		ck_assert_int_eq(dml_test_file_read(log_name, &text), 0);
		fprintf(stderr, "---- dml-example-lsq worker %d ----\n%s", i + 1, text);
		ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0,
			      "worker %d: status 0x%x", i + 1, st);
		first = number_after(text, " loss ");
		final = number_after(text, "\nfinal loss: ");
		free(text);
		ck_assert_msg(first > 1.0, "worker %d: initial loss %g", i + 1, first);
		ck_assert_msg(final >= 0 && final < LSQ_LOSS_BOUND && final < first / 100,
			      "worker %d: final loss %g (initial %g)", i + 1, final,
			      first);
	}
	for (i = 0; i < 2; i++)
		stop_ok(srv[i]);
	dml_test_env_free(env);
}
END_TEST

/* ---- exactly once: pipelined pushes, broken connections ----------------- */

#define EO_CLIENTS 3
#define EO_DENSE_KEYS 1000
#define EO_WIDTH 2
#define EO_SPARSE_KEYS 64
#define EO_PUSHES 16 /* per client, table and round, all in flight at once */
#define EO_ROUNDS 4
#define EO_SPARSE_SUM (EO_CLIENTS * (EO_CLIENTS + 1) / 2) /* client c pushes c */
/* clang-format off */
#define EO_TABLES                                                      \
	"[table]\nid = 0\nkind = dense\nwidth = " STR(EO_WIDTH) "\n"     \
	"keys = " STR(EO_DENSE_KEYS) "\noptimizer = add\n"                \
	"\n[table]\nid = 1\nkind = sparse\nwidth = 1\noptimizer = add\n"
/* clang-format on */

struct eo_client {
	dml_t *d;
	float dense[EO_DENSE_KEYS * EO_WIDTH];
	float sparse[EO_SPARSE_KEYS];
	dml_handle_t h[2 * EO_PUSHES];
};

/* Small integers: every sum stays exact in a float. */
static float eo_dense_val(int client, size_t i)
{
	return (float)(client + 1 + (int)(i % 7));
}

static void eo_keys(uint64_t *keys)
{
	uint64_t state = 42;
	size_t i;

	for (i = 0; i < EO_SPARSE_KEYS; i++) {
		state = state * 6364136223846793005ull + 1442695040888963407ull;
		keys[i] = state ^ (state >> 29);
	}
}

/* Issue every client's pushes for one round without waiting for any. */
static void eo_issue(struct eo_client *cl, const uint64_t *keys)
{
	int c, p;

	for (c = 0; c < EO_CLIENTS; c++) {
		for (p = 0; p < EO_PUSHES; p++) {
			wait_ok(cl[c].d,
				dml_push_range(cl[c].d, 0, 0, EO_DENSE_KEYS, cl[c].dense,
					       &cl[c].h[2 * p]),
				"dense push");
			wait_ok(cl[c].d,
				dml_push(cl[c].d, 1, keys, EO_SPARSE_KEYS, cl[c].sparse,
					 &cl[c].h[2 * p + 1]),
				"sparse push");
		}
		dml_progress(cl[c].d, 0);
	}
}

/*
 * Break the connections through one proxy in the middle of a round. Odd
 * rounds: the server applies everything but its ACKs are held back and lost,
 * so every push is resent and must not be applied again. Even rounds: cut
 * at once, whatever was in flight.
 */
static int eo_fault(struct dml_test_proxy *proxy, struct eo_client *cl,
		    const uint64_t *keys, int round)
{
	int cut, c;

	if (round % 2)
		ck_assert_int_eq(dml_test_proxy_hold(proxy), 0);
	eo_issue(cl, keys);
	if (round % 2) {
		for (c = 0; c < EO_CLIENTS; c++)
			dml_progress(cl[c].d, 1);
		sleep_us(100000);
	}
	ck_assert_int_eq(dml_test_proxy_cut(proxy, &cut), 0);
	return cut;
}

/*
 * EO_ROUNDS rounds of EO_PUSHES dense and sparse pushes per client, all in
 * flight together, on two shards; with faults the clients go through
 * proxies that break their connections in every round. A control client
 * then reads exact sums.
 */
static void exactly_once_run(int faults)
{
	struct dml_test_server_conf conf = { .staleness = -1, .tables = EO_TABLES };
	struct dml_test_server *srv[2];
	struct dml_test_env *env = cluster_start(2, &conf, srv);
	struct dml_test_proxy *proxy[2];
	static struct eo_client cl[EO_CLIENTS];
	static float dense_out[EO_DENSE_KEYS * EO_WIDTH];
	uint64_t keys[EO_SPARSE_KEYS];
	float sparse_out[EO_SPARSE_KEYS];
	uint16_t ports[2];
	int c, r, p, cut = 0;
	size_t i;
	dml_opts_t *o;
	dml_handle_t h;
	dml_t *ctl;

	for (i = 0; i < 2; i++) {
		ports[i] = dml_test_server_port(srv[i]);
		if (faults) {
			ck_assert_int_eq(dml_test_proxy_start(env, ports[i], &proxy[i]),
					 0);
			ports[i] = dml_test_proxy_port(proxy[i]);
		}
	}
	eo_keys(keys);
	for (c = 0; c < EO_CLIENTS; c++) {
		ck_assert_int_eq(
			dml_test_client_opts_ports(env, ports, 2, (uint32_t)c + 1, &o),
			0);
		ck_assert_int_eq(dml_connect(o, &cl[c].d), 0);
		dml_opts_free(o);
		for (i = 0; i < EO_DENSE_KEYS * EO_WIDTH; i++)
			cl[c].dense[i] = eo_dense_val(c, i);
		for (i = 0; i < EO_SPARSE_KEYS; i++)
			cl[c].sparse[i] = (float)(c + 1);
	}
	for (r = 0; r < EO_ROUNDS; r++) {
		if (faults)
			cut += eo_fault(proxy[r % 2], cl, keys, r);
		else
			eo_issue(cl, keys);
		for (c = 0; c < EO_CLIENTS; c++)
			for (p = 0; p < 2 * EO_PUSHES; p++)
				wait_ok(cl[c].d, dml_wait(cl[c].d, cl[c].h[p]), "push");
	}
	if (faults)
		ck_assert_int_ge(cut, EO_CLIENTS * EO_ROUNDS);

	ck_assert_int_eq(dml_test_client_new(env, srv, 2, 0, &ctl), 0);
	wait_ok(ctl, pull_dense(ctl, 0, EO_DENSE_KEYS, dense_out), "dense pull");
	for (i = 0; i < EO_DENSE_KEYS * EO_WIDTH; i++) {
		float want = 0;

		for (c = 0; c < EO_CLIENTS; c++)
			want += EO_ROUNDS * EO_PUSHES * eo_dense_val(c, i);
		ck_assert_msg(dense_out[i] == want, "dense value %zu: %g, want %g", i,
			      dense_out[i], want);
	}
	wait_ok(ctl, dml_pull(ctl, 1, keys, EO_SPARSE_KEYS, sparse_out, &h),
		"sparse pull");
	wait_ok(ctl, dml_wait(ctl, h), "sparse pull");
	for (i = 0; i < EO_SPARSE_KEYS; i++)
		ck_assert_msg(sparse_out[i] ==
				      (float)(EO_ROUNDS * EO_PUSHES * EO_SPARSE_SUM),
			      "sparse key %zu: %g, want %d", i, sparse_out[i],
			      EO_ROUNDS * EO_PUSHES * EO_SPARSE_SUM);
	dml_close(ctl);
	for (c = 0; c < EO_CLIENTS; c++)
		dml_close(cl[c].d);
	for (i = 0; i < 2; i++)
		stop_ok(srv[i]);
	dml_test_env_free(env);
}

START_TEST(test_pipelined_pushes_sum_exactly)
{
	exactly_once_run(0);
}
END_TEST

START_TEST(test_broken_connections_resend_once)
{
	exactly_once_run(1);
}
END_TEST

/* The tests of the training test case, in the order the suite runs them. */
void cluster_tests_training(TCase *tc)
{
	tcase_add_test(tc, test_lsq_trains_on_two_shards);
}

/* The tests of the delivery test case, in the order the suite runs them. */
void cluster_tests_delivery(TCase *tc)
{
	tcase_add_test(tc, test_pipelined_pushes_sum_exactly);
	tcase_add_test(tc, test_broken_connections_resend_once);
}
