/*
 * check_cluster_abuse.c - bad input and shutdown against real dml-server
 * processes (see check_cluster.c): protocol abuse on raw sockets costs one
 * connection, wrong secrets and clusters are refused, bad configs and loose
 * secret files stop a server from starting, and SIGTERM ends a server
 * cleanly with clients connected and pulls held.
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

/* ---- protocol abuse on raw sockets --------------------------------------- */

#define ABUSE_KEYS 4
#define ABUSE_MAX_CASES 16
/* clang-format off */
#define ABUSE_TABLE                                                          \
	"[table]\nid = 0\nkind = dense\nwidth = 1\nkeys = " STR(ABUSE_KEYS) \
	"\noptimizer = add\n"
/* clang-format on */

struct abuse_case {
	const char *name;
	uint8_t bytes[256];
	size_t len;
	int hang_up;            /* read the challenge, send, then half-close */
	const char *needles[5]; /* one must show up in the server's log */
};

static size_t encode_frame(Dml__Meta *m, const void *payload, uint32_t payload_len,
			   uint8_t *out, size_t cap)
{
	size_t n = dml_frame_encode_head(m, payload_len, out, cap);

	ck_assert_uint_gt(n, 0);
	ck_assert_uint_le(n + payload_len, cap);
	if (payload_len)
		memcpy(out + n, payload, payload_len);
	return n + payload_len;
}

/* A valid dense PUSH of 1000 to every key: must never be applied. */
static size_t encode_push(uint8_t *out, size_t cap)
{
	Dml__Meta m = DML__META__INIT;
	float vals[ABUSE_KEYS] = { 1000, 1000, 1000, 1000 };

	m.type = DML__MSG_TYPE__PUSH;
	m.request_id = 1;
	m.sender = 1;
	m.seq = 1;
	m.dtype = DML__DTYPE__F32;
	m.value_width = 1;
	m.dense = 1;
	m.key_begin = 0;
	m.key_end = ABUSE_KEYS;
	return encode_frame(&m, vals, sizeof(vals), out, cap);
}

static size_t encode_bad_hello(uint8_t *out, size_t cap)
{
	Dml__Meta m = DML__META__INIT;
	Dml__Handshake hs = DML__HANDSHAKE__INIT;
	uint8_t nonce[DML_NONCE_LEN] = { 1 }, proof[DML_PROOF_LEN] = { 0 };

	hs.role = DML__ROLE__WORKER;
	hs.node_id = 9;
	hs.protocol_version = DML_PROTOCOL_VERSION;
	hs.cluster = (char *)"dml";
	hs.nonce.data = nonce;
	hs.nonce.len = sizeof(nonce);
	hs.proof.data = proof;
	hs.proof.len = sizeof(proof);
	m.type = DML__MSG_TYPE__HELLO;
	m.request_id = 1;
	m.sender = 9;
	m.handshake = &hs;
	return encode_frame(&m, NULL, 0, out, cap);
}

static size_t encode_bad_type(uint8_t *out, size_t cap)
{
	Dml__Meta m = DML__META__INIT;

	m.type = (Dml__MsgType)99;
	m.request_id = 7;
	return encode_frame(&m, NULL, 0, out, cap);
}

/* Metadata says 8 payload bytes, the header says none. */
static size_t encode_length_mismatch(uint8_t *out, size_t cap)
{
	Dml__Meta m = DML__META__INIT;
	size_t n;

	m.type = DML__MSG_TYPE__HEARTBEAT;
	m.request_id = 3;
	m.payload_bytes = 8;
	n = dml__meta__get_packed_size(&m);
	ck_assert_uint_le(DML_FRAME_HEADER_LEN + n, cap);
	dml_frame_header_encode(out, (uint32_t)n, 0);
	dml__meta__pack(&m, out + DML_FRAME_HEADER_LEN);
	return DML_FRAME_HEADER_LEN + n;
}

static void header(struct abuse_case *k, uint32_t meta_len, uint32_t payload_len)
{
	dml_frame_header_encode(k->bytes, meta_len, payload_len);
	k->len = DML_FRAME_HEADER_LEN;
}

static void needles(struct abuse_case *k, int code, const char *alt)
{
	k->needles[0] = dml_strerror(code);
	k->needles[1] = alt;
}

/* Fill k[0..ABUSE_MAX_CASES) with one malformed or unwelcome input each. */
static size_t abuse_cases(struct abuse_case *k)
{
	size_t n = 0;

	memset(k, 0, ABUSE_MAX_CASES * sizeof(*k));
	k[n].name = "bad magic";
	k[n].len = (size_t)snprintf((char *)k[n].bytes, sizeof(k[n].bytes),
				    "GET / HTTP/1.1\r\nHost: dml\r\n\r\n");
	needles(&k[n++], DML_EFRAME_MAGIC, NULL);

	k[n].name = "unknown version";
	header(&k[n], 8, 0);
	dml_store_le16(k[n].bytes + 4, 99);
	memset(k[n].bytes + k[n].len, 0x08, 8);
	k[n].len += 8;
	needles(&k[n++], DML_EFRAME_VERSION, NULL);

	k[n].name = "reserved flags";
	header(&k[n], 8, 0);
	dml_store_le16(k[n].bytes + 6, 1);
	needles(&k[n++], DML_EFRAME_FLAGS, NULL);

	k[n].name = "oversized metadata length";
	header(&k[n], 1u << 30, 0);
	needles(&k[n++], DML_EFRAME_META, NULL);

	k[n].name = "zero metadata length";
	header(&k[n], 0, 0);
	needles(&k[n++], DML_EFRAME_META, NULL);

	k[n].name = "oversized payload length";
	header(&k[n], 8, UINT32_MAX);
	needles(&k[n++], DML_EFRAME_PAYLOAD, NULL);

	k[n].name = "garbage metadata";
	header(&k[n], 24, 0);
	memset(k[n].bytes + k[n].len, 0xff, 24);
	k[n].len += 24;
	needles(&k[n++], DML_EFRAME_DECODE, NULL);

	k[n].name = "unknown message type";
	k[n].len = encode_bad_type(k[n].bytes, sizeof(k[n].bytes));
	needles(&k[n++], DML_EFRAME_TYPE, NULL);

	k[n].name = "lengths disagree";
	k[n].len = encode_length_mismatch(k[n].bytes, sizeof(k[n].bytes));
	needles(&k[n++], DML_EFRAME_LENGTH, NULL);

	k[n].name = "push before hello";
	k[n].len = encode_push(k[n].bytes, sizeof(k[n].bytes));
	k[n].needles[0] = dml_strerror(DML_ESTATE);
	k[n].needles[1] = dml_strerror(DML_EAUTH);
	k[n].needles[2] = dml_strerror(DML_EROLE);
	k[n++].needles[3] = "push";

	k[n].name = "hello with a wrong proof";
	k[n].len = encode_bad_hello(k[n].bytes, sizeof(k[n].bytes));
	needles(&k[n++], DML_EAUTH, NULL);

	k[n].name = "hang-up inside a frame";
	header(&k[n], 40, 0);
	memset(k[n].bytes + k[n].len, 0x08, 5);
	k[n].len += 5;
	k[n].hang_up = 1;
	needles(&k[n++], DML_EFRAME_TRUNC, NULL);

	k[n].name = "silent peer";
	k[n].len = 0;
	needles(&k[n++], DML_ETIMEDOUT, "handshake");
	ck_assert_uint_le(n, ABUSE_MAX_CASES);
	return n;
}

/* One more round for a client that stayed connected through the abuse. */
static void abuse_round(dml_t *d, float round)
{
	float ones[ABUSE_KEYS] = { 1, 1, 1, 1 }, out[ABUSE_KEYS];
	int i;

	wait_ok(d, push_dense(d, 0, ABUSE_KEYS, ones), "push after abuse");
	wait_ok(d, pull_dense(d, 0, ABUSE_KEYS, out), "pull after abuse");
	for (i = 0; i < ABUSE_KEYS; i++)
		ck_assert_msg(out[i] == round, "key %d: %g after round %g", i, out[i],
			      round);
}

START_TEST(test_protocol_abuse_costs_one_connection)
{
	struct dml_test_server_conf conf = {
		.staleness = -1,
		.tables = ABUSE_TABLE,
		.extra = "[limits]\nhandshake_timeout_ms = 1000\n",
	};
	struct dml_test_server *srv;
	struct dml_test_env *env = cluster_start(1, &conf, &srv);
	static struct abuse_case cases[ABUSE_MAX_CASES];
	size_t n = abuse_cases(cases), i, from;
	dml_t *d, *fresh;
	int fd;

	ck_assert_int_eq(dml_test_client_new(env, &srv, 1, 1, &d), 0);
	abuse_round(d, 1);
	for (i = 0; i < n; i++) {
		const struct abuse_case *k = &cases[i];

		fprintf(stderr, "abuse: %s\n", k->name);
		from = dml_test_server_log_size(srv);
		ck_assert_int_eq(dml_test_raw_connect(dml_test_server_port(srv), &fd), 0);
		/* Unread input would make close() send a reset, not an end of
		 * stream: take the challenge first. */
		if (k->hang_up)
			ck_assert_int_eq(dml_test_raw_skip_frame(fd, WAIT_MS), 0);
		ck_assert_int_eq(dml_test_raw_send(fd, k->bytes, k->len), 0);
		if (k->hang_up)
			shutdown(fd, SHUT_WR);
		ck_assert_msg(dml_test_raw_wait_closed(fd, WAIT_MS) == 0,
			      "%s: server kept the connection open", k->name);
		close(fd);
		ck_assert_msg(dml_test_server_log_wait(srv, from, k->needles, WAIT_MS) >=
				      0,
			      "%s: the log does not say why", k->name);
		ck_assert_msg(dml_test_server_alive(srv), "%s: server died", k->name);
		abuse_round(d, (float)(i + 2));
	}
	/* A newcomer is served as well. */
	ck_assert_int_eq(dml_test_client_new(env, &srv, 1, 2, &fresh), 0);
	dml_close(fresh);
	dml_close(d);
	stop_ok(srv);
	dml_test_env_free(env);
}
END_TEST

/* ---- authentication and refusals to start ------------------------------- */

static int connect_with(struct dml_test_env *env, struct dml_test_server *srv,
			const char *key, const char *value)
{
	dml_opts_t *o;
	dml_t *d = NULL;
	int rc;

	ck_assert_int_eq(dml_test_client_opts(env, &srv, 1, 5, &o), 0);
	ck_assert_int_eq(dml_opts_set(o, key, value), 0);
	ck_assert_int_eq(dml_opts_set(o, "connect_timeout_ms", "3000"), 0);
	rc = dml_connect(o, &d);
	dml_opts_free(o);
	if (rc == 0)
		dml_close(d);
	return rc;
}

START_TEST(test_auth_refuses_wrong_secret_and_cluster)
{
	struct dml_test_server_conf conf = { .staleness = -1, .tables = ABUSE_TABLE };
	struct dml_test_server *srv;
	struct dml_test_env *env = cluster_start(1, &conf, &srv);
	const char *const auth_needles[] = { dml_strerror(DML_EAUTH), NULL };
	char *wrong, *loose;
	size_t from;
	dml_t *d;
	int rc;

	ck_assert_int_eq(
		dml_test_env_write(env, "wrong-secret", "not the secret\n", 0600, &wrong),
		0);
	ck_assert_int_eq(
		dml_test_env_write(env, "loose-secret", "not the secret\n", 0644, &loose),
		0);
	from = dml_test_server_log_size(srv);
	rc = connect_with(env, srv, "secret_file", wrong);
	ck_assert_msg(rc == DML_EAUTH, "wrong secret: %s", dml_strerror(rc));
	ck_assert_int_ge(dml_test_server_log_wait(srv, from, auth_needles, WAIT_MS), 0);

	rc = connect_with(env, srv, "cluster", "another");
	ck_assert_msg(rc == DML_ECLUSTER || rc == DML_EAUTH, "other cluster: %s",
		      dml_strerror(rc));

	rc = connect_with(env, srv, "secret_file", loose);
	ck_assert_msg(rc == DML_ESECRET, "secret of mode 0644: %s", dml_strerror(rc));

	/* The refused ones cost nothing to the others. */
	ck_assert_int_eq(dml_test_client_new(env, &srv, 1, 1, &d), 0);
	dml_close(d);
	free(wrong);
	free(loose);
	stop_ok(srv);
	dml_test_env_free(env);
}
END_TEST

/* Run dml-server on config text; give its exit status and its output. */
static void server_run_to_exit(struct dml_test_env *env, const char *name,
			       const char *text, int *status, char **output, char **conf)
{
	char *bin, *log_name, *log_path;
	char *argv[4];
	pid_t pid;

	ck_assert_int_eq(dml_test_env_write(env, name, text, 0600, conf), 0);
	dml_test_bin("server/dml-server", &bin);
	argv[0] = bin;
	argv[1] = (char *)"-c";
	argv[2] = *conf;
	argv[3] = NULL;
	if (asprintf(&log_name, "%s.log", name) < 0)
		abort();
	ck_assert_int_eq(dml_test_proc_spawn(env, argv, log_name, &pid), 0);
	free(bin);
	ck_assert_msg(dml_test_proc_wait(env, pid, 10000, status) == 0,
		      "%s: the server kept running instead of refusing to start", name);
	if (asprintf(&log_path, "%s/%s", dml_test_env_dir(env), log_name) < 0)
		abort();
	ck_assert_int_eq(dml_test_file_read(log_path, output), 0);
	fprintf(stderr, "---- %s: status 0x%x ----\n%s", name, *status, *output);
	free(log_name);
	free(log_path);
}

START_TEST(test_server_refuses_loose_secret_file)
{
	struct dml_test_env *env;
	struct dml_test_server_conf conf = { .staleness = -1, .tables = ABUSE_TABLE };
	char *loose, *text, *out, *path;
	int st;

	ck_assert_int_eq(dml_test_env_new(&env), 0);
	ck_assert_int_eq(dml_test_env_write(env, "loose-secret", "0123456789abcdef\n",
					    0644, &loose),
			 0);
	conf.secret_file = loose;
	dml_test_server_conf_text(env, &conf, &text, NULL);
	server_run_to_exit(env, "loose.conf", text, &st, &out, &path);
	ck_assert_msg(!(WIFEXITED(st) && WEXITSTATUS(st) == 0), "started anyway");
	ck_assert_msg(WIFEXITED(st), "crashed instead of refusing");
	ck_assert_msg(strstr(out, loose) || strstr(out, dml_strerror(DML_ESECRET)),
		      "the log does not say the secret file is the problem");
	free(text);
	free(out);
	free(path);
	free(loose);
	dml_test_env_free(env);
}
END_TEST

START_TEST(test_server_refuses_unknown_key_with_file_line)
{
	struct dml_test_env *env;
	struct dml_test_server_conf conf = { .staleness = -1,
					     .tables = ABUSE_TABLE,
					     .extra = "[limits]\nno_such_key = 1\n" };
	char *text, *out, *path, where[512];
	const char *p;
	int st, line = 1;

	ck_assert_int_eq(dml_test_env_new(&env), 0);
	dml_test_server_conf_text(env, &conf, &text, NULL);
	for (p = text; p < strstr(text, "no_such_key"); p++)
		line += *p == '\n';
	server_run_to_exit(env, "unknown.conf", text, &st, &out, &path);
	snprintf(where, sizeof(where), "%s:%d:", path, line);
	ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 2, "status 0x%x, want exit 2",
		      st);
	ck_assert_msg(strstr(out, where), "output does not name %s", where);
	ck_assert_msg(strstr(out, "no_such_key"), "output does not name the key");
	free(text);
	free(out);
	free(path);
	dml_test_env_free(env);
}
END_TEST

/* ---- SIGTERM ------------------------------------------------------------- */

START_TEST(test_sigterm_with_client_connected)
{
	struct dml_test_server_conf conf = { .staleness = -1, .tables = ABUSE_TABLE };
	struct dml_test_server *srv;
	struct dml_test_env *env = cluster_start(1, &conf, &srv);
	dml_t *d;

	ck_assert_int_eq(dml_test_client_new(env, &srv, 1, 1, &d), 0);
	abuse_round(d, 1);
	stop_ok(srv);
	dml_close(d);
	dml_test_env_free(env);
}
END_TEST

START_TEST(test_sigterm_with_pull_held)
{
	/* BSP and a second worker that never comes: a pull at clock 1 waits. */
	struct dml_test_server_conf conf = { .staleness = 0,
					     .workers = 2,
					     .tables = ABUSE_TABLE };
	struct dml_test_server *srv;
	struct dml_test_env *env = cluster_start(1, &conf, &srv);
	float ones[ABUSE_KEYS] = { 1, 1, 1, 1 }, out[ABUSE_KEYS];
	dml_opts_t *o;
	dml_handle_t h;
	uint64_t t0;
	int done = 1, rc;
	dml_t *d;

	ck_assert_int_eq(dml_test_client_opts(env, &srv, 1, 1, &o), 0);
	ck_assert_int_eq(dml_opts_set(o, "reconnect_timeout_ms", "1000"), 0);
	ck_assert_int_eq(dml_connect(o, &d), 0);
	dml_opts_free(o);
	wait_ok(d, push_dense(d, 0, ABUSE_KEYS, ones), "push");
	wait_ok(d, dml_clock(d), "clock");
	wait_ok(d, dml_pull_range(d, 0, 0, ABUSE_KEYS, out, &h), "pull");
	dml_progress(d, 300);
	ck_assert_int_eq(dml_test(d, h, &done), 0);
	ck_assert_msg(!done, "a BSP pull was answered with a worker missing");

	stop_ok(srv);
	t0 = dml_now_ns();
	rc = dml_wait(d, h);
	ck_assert_msg(rc != 0, "held pull succeeded on a stopped server");
	fprintf(stderr, "held pull at shutdown: %s (%s)\n", dml_strerror(rc),
		dml_error_detail(d));
	ck_assert_uint_lt(elapsed_ms(t0), 15000);
	dml_close(d);
	dml_test_env_free(env);
}
END_TEST

/* The tests of the abuse test case, in the order the suite runs them. */
void cluster_tests_abuse(TCase *tc)
{
	tcase_add_test(tc, test_protocol_abuse_costs_one_connection);
	tcase_add_test(tc, test_auth_refuses_wrong_secret_and_cluster);
	tcase_add_test(tc, test_server_refuses_loose_secret_file);
	tcase_add_test(tc, test_server_refuses_unknown_key_with_file_line);
}

/* The SIGTERM tests, in the order the suite runs them. */
void cluster_tests_shutdown(TCase *tc)
{
	tcase_add_test(tc, test_sigterm_with_client_connected);
	tcase_add_test(tc, test_sigterm_with_pull_held);
}
