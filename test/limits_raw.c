/*
 * limits_raw.c - a blocking raw client and scraping helpers for the
 * limits tests (check_limits.c, check_memory.c): it authenticates itself,
 * sets HELLO fields and reads ERROR fields that libdml does not expose.
 */
#define _GNU_SOURCE
#include <check.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "proto/auth.h"
#include "proto/dml_error.h"
#include "proto/frame.h"
#include "test/harness.h"
#include "test/raw_frame.h"
#include "test/limits_raw.h"
#include "proto/util.h"

static Dml__Meta *raw_read(struct raw *r, uint8_t **payload)
{
	return raw_frame_read(r->fd, payload);
}

static void raw_send(struct raw *r, Dml__Meta *m, const void *payload, uint32_t len)
{
	raw_frame_send(r->fd, m, payload, len);
}

/* Authenticate as worker node_id on the connected socket fd. */
void raw_open_fd(struct dml_test_env *env, int fd, uint32_t node_id,
			uint64_t incarnation, struct raw *r)
{
	memset(r, 0, sizeof(*r));
	r->fd = fd;
	dml_meta_free(raw_frame_handshake(env, fd, DML__ROLE__WORKER, node_id, incarnation, 0,
					  0));
}

/* Send m with a fresh request id, returned; the answer is read later. */
uint64_t raw_request(struct raw *r, Dml__Meta *m, const void *payload, uint32_t len)
{
	m->request_id = ++r->next_id;
	m->dtype = DML__DTYPE__F32;
	raw_send(r, m, payload, len);
	return m->request_id;
}

/* Wait for the frame answering request id (skipping others). */
void raw_answer(struct raw *r, uint64_t id, struct answer *a)
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
void raw_open(struct dml_test_env *env, uint16_t port, uint32_t node_id,
		     uint64_t incarnation, struct raw *r)
{
	int fd;

	ck_assert_int_eq(dml_test_raw_connect(port, &fd), 0);
	raw_open_fd(env, fd, node_id, incarnation, r);
}

void raw_call(struct raw *r, Dml__Meta *m, const void *payload, uint32_t len,
		     struct answer *a)
{
	raw_answer(r, raw_request(r, m, payload, len), a);
}

/* Push g to key of table 0 with seq. */
void raw_push(struct raw *r, uint64_t key, uint64_t seq, const float *g,
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
void raw_pull(struct raw *r, uint64_t key, float *out)
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

void expect_ack(const struct answer *a, const char *what)
{
	ck_assert_msg(a->type == DML__MSG_TYPE__ACK, "%s: type %d, error %d %s", what, a->type,
		      a->code, a->message);
}

void expect_row(struct raw *r, uint64_t key, float a, float b, const char *when)
{
	float row[W];

	raw_pull(r, key, row);
	ck_assert_msg(row[0] == a && row[1] == b, "%s: row %llu is (%g, %g), not (%g, %g)",
		      when, (unsigned long long)key, (double)row[0], (double)row[1], (double)a,
		      (double)b);
}

/* ---- helpers -------------------------------------------------------------- */

/* Lines of the server's log from byte from on that contain needle. */
int log_count(const struct dml_test_server *s, size_t from, const char *needle)
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
void client_round(struct dml_test_env *env, struct dml_test_server *srv, uint32_t id)
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

void metrics_conf(struct dml_test_env *env, char *port_file, size_t port_len, char *extra,
		  size_t extra_len)
{
	snprintf(port_file, port_len, "%s/metrics.port", dml_test_env_dir(env));
	snprintf(extra, extra_len, "metrics_listen = 127.0.0.1:0\nmetrics_port_file = %s\n",
		 port_file);
}

char *metrics_of(struct dml_test_env *env, const char *port_file)
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

/* Resident kilobytes of a process. */
long rss_kb(pid_t pid)
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

/* A socket to the server with a small receive buffer: what it does not
 * read stays queued in the server. */
int slow_reader(uint16_t port)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons(port) };
	int fd = socket(AF_INET, SOCK_STREAM, 0), small = 4096;

	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &small, sizeof(small)), 0);
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	ck_assert_int_eq(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	return fd;
}

uint64_t whole_table_pull(struct raw *r)
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
double metric_value(struct dml_test_env *env, const char *port_file, const char *name)
{
	uint16_t port;
	double v = -1;
	int rc;

	ck_assert_int_eq(dml_test_port_file_read(port_file, &port), 0);
	rc = dml_test_metric(port, name, WAIT_MS, &v);
	ck_assert_msg(rc == 0 || rc == DML_ENOTFOUND, "metrics: %s", dml_strerror(rc));
	return rc == 0 ? v : -1;
}

void wait_metric_at_least(struct dml_test_env *env, const char *port_file,
				 const char *name, double want)
{
	uint64_t t0 = dml_now_ns();

	while (metric_value(env, port_file, name) < want) {
		ck_assert_msg(dml_now_ns() - t0 < 30000000000ull, "%s stays below %g", name, want);
		poll(NULL, 0, 20);
	}
}
