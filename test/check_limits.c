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
 *    at whatever seq it brings;
 *  - memory: a big refused push leaves no buffer behind, pulls of absent
 *    sparse keys create no rows (and return what a first push starts
 *    from), workers gone long enough are forgotten, metrics included,
 *    and a whole-table pull nobody reads makes the next one wait for the
 *    output budget rather than pin another copy.
 *
 * The raw client below authenticates itself and reads ERROR fields that
 * libdml does not expose.
 */
#define _GNU_SOURCE
#include <check.h>
#include <errno.h>
#include <math.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "auth.h"
#include "check_run.h"
#include "dml_error.h"
#include "finite.h"
#include "frame.h"
#include "harness.h"
#include "util.h"

#define TEST_TIMEOUT_S 90
#define WAIT_MS 10000
#define W 2                       /* width of the dense test table */
#define TABLE "[table]\nid = 0\nkind = dense\nwidth = 2\nkeys = 16\noptimizer = add\n"

/* ---- a blocking raw client ---------------------------------------------- */

struct raw {
	int fd;
	uint64_t next_id;
};

struct answer {
	int type;
	int code;                  /* ERROR */
	char message[256];
	float values[W];           /* PULL_REPLY */
};

static int read_full(int fd, void *buf, size_t n)
{
	uint8_t *p = buf;

	while (n > 0) {
		struct pollfd pfd = { fd, POLLIN, 0 };
		ssize_t k;

		if (poll(&pfd, 1, WAIT_MS) <= 0)
			return DML_ETIMEDOUT;
		k = read(fd, p, n);
		if (k <= 0)
			return DML_ECONN;
		p += k;
		n -= (size_t)k;
	}
	return 0;
}

static Dml__Meta *raw_read(struct raw *r, uint8_t **payload)
{
	struct dml_frame_limits lim;
	struct dml_frame_header hdr;
	uint8_t head[DML_FRAME_HEADER_LEN], *meta;
	Dml__Meta *m = NULL;

	dml_frame_limits_default(&lim);
	ck_assert_int_eq(read_full(r->fd, head, sizeof(head)), 0);
	ck_assert_int_eq(dml_frame_header_decode(head, &lim, &hdr), 0);
	meta = dml_xmalloc(hdr.meta_len);
	ck_assert_int_eq(read_full(r->fd, meta, hdr.meta_len), 0);
	ck_assert_int_eq(dml_frame_meta_decode(meta, hdr.meta_len, &hdr, &lim, &m), 0);
	free(meta);
	*payload = NULL;
	if (hdr.payload_len) {
		*payload = dml_xmalloc(hdr.payload_len);
		ck_assert_int_eq(read_full(r->fd, *payload, hdr.payload_len), 0);
	}
	return m;
}

static void raw_send(struct raw *r, Dml__Meta *m, const void *payload, uint32_t len)
{
	size_t cap = dml_frame_head_size(m) + len, n;
	uint8_t *buf = dml_xmalloc(cap);

	n = dml_frame_encode_head(m, len, buf, cap);
	ck_assert_uint_gt(n, 0);
	if (len)
		memcpy(buf + n, payload, len);
	ck_assert_int_eq(dml_test_raw_send(r->fd, buf, n + len), 0);
	free(buf);
}

/* Authenticate as worker node_id on the connected socket fd. */
static void raw_open_fd(struct dml_test_env *env, int fd, uint32_t node_id,
			uint64_t incarnation, struct raw *r)
{
	Dml__Meta m = DML__META__INIT, *ch, *w;
	Dml__Handshake hs = DML__HANDSHAKE__INIT;
	uint8_t nonce[DML_NONCE_LEN], proof[DML_PROOF_LEN], *secret, *pl;
	size_t secret_len;

	memset(r, 0, sizeof(*r));
	r->fd = fd;
	ck_assert_int_eq(dml_secret_load(dml_test_env_secret(env), &secret, &secret_len), 0);
	ch = raw_read(r, &pl);
	ck_assert_int_eq(ch->type, DML__MSG_TYPE__CHALLENGE);
	ck_assert_int_eq(dml_random_bytes(nonce, sizeof(nonce)), 0);
	dml_auth_proof(secret, secret_len, DML_AUTH_CLIENT, ch->handshake->nonce.data, nonce,
		       DML__ROLE__WORKER, node_id, "dml", proof);
	hs.role = DML__ROLE__WORKER;
	hs.node_id = node_id;
	hs.protocol_version = DML_PROTOCOL_VERSION;
	hs.cluster = (char *)"dml";
	hs.nonce.data = nonce;
	hs.nonce.len = sizeof(nonce);
	hs.proof.data = proof;
	hs.proof.len = sizeof(proof);
	hs.incarnation = incarnation;
	m.type = DML__MSG_TYPE__HELLO;
	m.sender = node_id;
	m.handshake = &hs;
	raw_send(r, &m, NULL, 0);
	w = raw_read(r, &pl);
	ck_assert_int_eq(w->type, DML__MSG_TYPE__WELCOME);
	dml_meta_free(ch);
	dml_meta_free(w);
	dml_secret_free(secret, secret_len);
}

/* Send m with a fresh request id, returned; the answer is read later. */
static uint64_t raw_request(struct raw *r, Dml__Meta *m, const void *payload, uint32_t len)
{
	m->request_id = ++r->next_id;
	m->dtype = DML__DTYPE__F32;
	raw_send(r, m, payload, len);
	return m->request_id;
}

/* Wait for the frame answering request id (skipping others). */
static void raw_answer(struct raw *r, uint64_t id, struct answer *a)
{
	uint8_t *pl;
	Dml__Meta *rep;

	memset(a, 0, sizeof(*a));
	for (;;) {
		rep = raw_read(r, &pl);
		if (rep->request_id == id)
			break;
		dml_meta_free(rep);
		free(pl);
	}
	a->type = rep->type;
	if (rep->error) {
		a->code = rep->error->code;
		snprintf(a->message, sizeof(a->message), "%s", rep->error->message);
	}
	if (rep->type == DML__MSG_TYPE__PULL_REPLY && pl)
		memcpy(a->values, pl, sizeof(a->values));
	dml_meta_free(rep);
	free(pl);
}

/* Connect and authenticate as worker node_id. */
static void raw_open(struct dml_test_env *env, uint16_t port, uint32_t node_id,
		     uint64_t incarnation, struct raw *r)
{
	int fd;

	ck_assert_int_eq(dml_test_raw_connect(port, &fd), 0);
	raw_open_fd(env, fd, node_id, incarnation, r);
}

static void raw_call(struct raw *r, Dml__Meta *m, const void *payload, uint32_t len,
		     struct answer *a)
{
	raw_answer(r, raw_request(r, m, payload, len), a);
}

/* Push g to key of table 0 with seq. */
static void raw_push(struct raw *r, uint64_t key, uint64_t seq, const float *g,
		     struct answer *a)
{
	Dml__Meta m = DML__META__INIT;

	m.type = DML__MSG_TYPE__PUSH;
	m.seq = seq;
	m.value_width = W;
	m.dense = 1;
	m.key_begin = key;
	m.key_end = key + 1;
	raw_call(r, &m, g, W * sizeof(float), a);
}

/* The row of key of table 0. */
static void raw_pull(struct raw *r, uint64_t key, float *out)
{
	Dml__Meta m = DML__META__INIT;
	struct answer a;

	m.type = DML__MSG_TYPE__PULL;
	m.value_width = W;
	m.dense = 1;
	m.key_begin = key;
	m.key_end = key + 1;
	raw_call(r, &m, NULL, 0, &a);
	ck_assert_int_eq(a.type, DML__MSG_TYPE__PULL_REPLY);
	memcpy(out, a.values, sizeof(a.values));
}

static void expect_ack(const struct answer *a, const char *what)
{
	ck_assert_msg(a->type == DML__MSG_TYPE__ACK, "%s: type %d, error %d %s", what, a->type,
		      a->code, a->message);
}

static void expect_row(struct raw *r, uint64_t key, float a, float b, const char *when)
{
	float row[W];

	raw_pull(r, key, row);
	ck_assert_msg(row[0] == a && row[1] == b, "%s: row %llu is (%g, %g), not (%g, %g)",
		      when, (unsigned long long)key, (double)row[0], (double)row[1], (double)a,
		      (double)b);
}

/* ---- helpers -------------------------------------------------------------- */

/* Lines of the server's log from byte from on that contain needle. */
static int log_count(const struct dml_test_server *s, size_t from, const char *needle)
{
	char *text, *p;
	int n = 0;

	ck_assert_int_eq(dml_test_file_read(dml_test_server_log(s), &text), 0);
	p = strlen(text) > from ? text + from : text + strlen(text);
	while ((p = strstr(p, needle)) != NULL) {
		n++;
		p += strlen(needle);
	}
	free(text);
	return n;
}

/* A libdml worker pushes to and pulls from the server: the server serves. */
static void client_round(struct dml_test_env *env, struct dml_test_server *srv, uint32_t id)
{
	float g[W] = { 1, 1 }, out[W];
	dml_handle_t h;
	dml_t *d;
	int rc;

	rc = dml_test_client_new(env, &srv, 1, id, &d);
	ck_assert_msg(rc == 0, "a real client could not connect: %s", dml_strerror(rc));
	rc = dml_push_range(d, 0, 0, 1, g, &h);
	ck_assert_int_eq(rc ? rc : dml_wait(d, h), 0);
	rc = dml_pull_range(d, 0, 0, 1, out, &h);
	ck_assert_int_eq(rc ? rc : dml_wait(d, h), 0);
	dml_close(d);
}

static char *metrics_of(struct dml_test_env *env, const char *port_file)
{
	uint16_t port;
	char *body = NULL;
	int status;

	ck_assert_int_eq(dml_test_port_file_read(port_file, &port), 0);
	ck_assert_int_eq(dml_test_http_request(port, "GET", "/metrics", WAIT_MS, &status,
					       &body), 0);
	ck_assert_int_eq(status, 200);
	return body;
}

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
	int fds[HOGS];
	size_t from;

	ck_assert_int_eq(dml_test_env_new(&env), 0);
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

	/* Descriptors free again: the listener takes connections again. */
	for (int i = 0; i < HOGS; i++)
		close(fds[i]);
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
	snprintf(port_file, sizeof(port_file), "%s/metrics.port", dml_test_env_dir(env));
	snprintf(extra, sizeof(extra), "metrics_listen = 127.0.0.1:0\nmetrics_port_file = %s\n",
		 port_file);
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

/* ---- (c) memory a peer cannot pin -------------------------------------- */

/* Resident kilobytes of a process. */
static long rss_kb(pid_t pid)
{
	char path[64], *text, *p;
	long kb;

	snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
	ck_assert_int_eq(dml_test_file_read(path, &text), 0);
	p = strstr(text, "VmRSS:");
	ck_assert_ptr_nonnull(p);
	kb = strtol(p + 6, NULL, 10);
	free(text);
	return kb;
}

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
	ck_assert_msg(after < before + 16 * 1024, "RSS %ld kB before, %ld kB after", before,
		      after);
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
	snprintf(port_file, sizeof(port_file), "%s/metrics.port", dml_test_env_dir(env));
	snprintf(extra, sizeof(extra), "metrics_listen = 127.0.0.1:0\nmetrics_port_file = %s\n",
		 port_file);
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
	snprintf(port_file, sizeof(port_file), "%s/metrics.port", dml_test_env_dir(env));
	snprintf(extra, sizeof(extra), "metrics_listen = 127.0.0.1:0\nmetrics_port_file = %s\n",
		 port_file);
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

/* A socket to the server with a small receive buffer: what it does not
 * read stays queued in the server. */
static int slow_reader(uint16_t port)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons(port) };
	int fd = socket(AF_INET, SOCK_STREAM, 0), small = 4096;

	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &small, sizeof(small)), 0);
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	ck_assert_int_eq(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	return fd;
}

static uint64_t whole_table_pull(struct raw *r)
{
	Dml__Meta m = DML__META__INIT;

	m.type = DML__MSG_TYPE__PULL;
	m.value_width = 1;
	m.dense = 1;
	m.key_begin = 0;
	m.key_end = BUDGET_KEYS;
	return raw_request(r, &m, NULL, 0);
}

/* The value of an unlabelled metric, -1 when absent. */
static double metric_value(struct dml_test_env *env, const char *port_file, const char *name)
{
	char *body = metrics_of(env, port_file), *p, needle[128];
	double v = -1;

	snprintf(needle, sizeof(needle), "\n%s ", name);
	if ((p = strstr(body, needle)) != NULL)
		v = strtod(p + strlen(needle), NULL);
	free(body);
	return v;
}

static void wait_metric_at_least(struct dml_test_env *env, const char *port_file,
				 const char *name, double want)
{
	uint64_t t0 = dml_now_ns();

	while (metric_value(env, port_file, name) < want) {
		ck_assert_msg(dml_now_ns() - t0 < 30000000000ull, "%s stays below %g", name, want);
		poll(NULL, 0, 20);
	}
}

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
	snprintf(port_file, sizeof(port_file), "%s/metrics.port", dml_test_env_dir(env));
	snprintf(extra, sizeof(extra), "metrics_listen = 127.0.0.1:0\nmetrics_port_file = %s\n",
		 port_file);
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
	snprintf(port_file, sizeof(port_file), "%s/metrics.port", dml_test_env_dir(env));
	snprintf(extra, sizeof(extra), "metrics_listen = 127.0.0.1:0\nmetrics_port_file = %s\n",
		 port_file);
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

static Suite *limits_suite(void)
{
	Suite *s = suite_create("limits");
	TCase *tc = tcase_create("limits");

	tcase_set_timeout(tc, TEST_TIMEOUT_S);
	tcase_add_test(tc, test_idle_handshakes_leave_room_for_clients);
	tcase_add_test(tc, test_fd_exhaustion_pauses_accepting);
	tcase_add_test(tc, test_nonfinite_push_is_refused);
	tcase_add_test(tc, test_finite_scan_is_cheap);
	tcase_add_test(tc, test_seq_jump_is_refused);
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
	return dml_check_run(limits_suite());
}
