/*
 * check_many_conns.c - integration tests: a dml-server answers many
 * connections that each keep requests in flight, the replies of a batch of
 * frames leaving together.
 *
 * Covered, against a real dml-server process over real sockets:
 *  - 64 workers each send their pushes back to back before anyone reads:
 *    every push is acknowledged exactly once, on its own connection, in
 *    the order sent, and applied exactly once (the row is the sum);
 *  - a connection whose pushes are followed by a frame that is not dml
 *    gets the acknowledgements of the pushes before it, then an ERROR and
 *    the close, while the other connections' batches are answered whole.
 */
#define _GNU_SOURCE
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "test/check_run.h"
#include "proto/dml_error.h"
#include "proto/frame.h"
#include "test/harness.h"
#include "test/limits_raw.h"
#include "test/raw_frame.h"
#include "proto/util.h"

#define TEST_TIMEOUT_S 120
#define CONNS 64
#define PUSHES 24 /* per connection, all in flight at once */

/*
 * PUSHES pushes of g to key 0 (seq and request ids 1..PUSHES), then `tail`
 * bytes, all in one write: the server finds the whole burst in one read.
 */
static void push_burst(struct raw *r, const float *g, const void *tail, size_t tail_len)
{
	uint8_t buf[PUSHES * 128 + 64], *p = buf;

	for (uint64_t s = 1; s <= PUSHES; s++) {
		Dml__Meta m = DML__META__INIT;
		size_t n;

		m.type = DML__MSG_TYPE__PUSH;
		m.request_id = ++r->next_id;
		m.dtype = DML__DTYPE__F32;
		m.seq = s;
		m.value_width = W;
		m.dense = 1;
		m.key_begin = 0;
		m.key_end = 1;
		n = dml_frame_encode_head(&m, W * sizeof(float), p,
					  (size_t)(buf + sizeof(buf) - p));
		ck_assert_uint_gt(n, 0);
		memcpy(p + n, g, W * sizeof(float));
		p += n + W * sizeof(float);
	}
	ck_assert_uint_le(tail_len, (size_t)(buf + sizeof(buf) - p));
	if (tail_len > 0) {
		memcpy(p, tail, tail_len);
		p += tail_len;
	}
	ck_assert_int_eq(dml_test_raw_send(r->fd, buf, (size_t)(p - buf)), 0);
}

/* The next PUSHES frames on r are the ACKs of requests 1..PUSHES, in order. */
static void expect_acks(struct raw *r, int conn)
{
	for (uint64_t id = 1; id <= PUSHES; id++) {
		uint8_t *pl = NULL;
		Dml__Meta *m = raw_frame_read(r->fd, &pl);

		ck_assert_msg(m->type == DML__MSG_TYPE__ACK && m->request_id == id,
			      "connection %d: frame %llu is type %d for request %llu", conn,
			      (unsigned long long)id, (int)m->type,
			      (unsigned long long)m->request_id);
		dml_meta_free(m);
		free(pl);
	}
}

/* The next frame on r answers a fresh pull of key 0: no ACK came twice. */
static void expect_pull_next(struct raw *r, int conn, float want)
{
	Dml__Meta q = DML__META__INIT, *m;
	uint64_t id;
	uint8_t *pl = NULL;
	float got[W];

	q.type = DML__MSG_TYPE__PULL;
	q.value_width = W;
	q.dense = 1;
	q.key_begin = 0;
	q.key_end = 1;
	id = raw_request(r, &q, NULL, 0);
	m = raw_frame_read(r->fd, &pl);
	ck_assert_msg(m->type == DML__MSG_TYPE__PULL_REPLY && m->request_id == id,
		      "connection %d: after its ACKs a frame of type %d for request %llu",
		      conn, (int)m->type, (unsigned long long)m->request_id);
	ck_assert_ptr_nonnull(pl);
	memcpy(got, pl, sizeof(got));
	ck_assert_msg(got[0] == want && got[1] == 2 * want,
		      "connection %d: row %g %g, want %g %g", conn, (double)got[0],
		      (double)got[1], (double)want, (double)(2 * want));
	dml_meta_free(m);
	free(pl);
}

static void open_all(struct dml_test_env *env, struct dml_test_server *srv, struct raw *r)
{
	for (int i = 0; i < CONNS; i++)
		raw_open(env, dml_test_server_port(srv), (uint32_t)i + 1, 1, &r[i]);
}

/*
 * Connections from..CONNS-1 get all their ACKs, then the row holds every
 * push of every connection once; then all is closed and stopped.
 */
static void expect_all_then_stop(struct dml_test_env *env, struct dml_test_server *srv,
				 struct raw *r, int from)
{
	for (int i = from; i < CONNS; i++)
		expect_acks(&r[i], i);
	for (int i = from; i < CONNS; i++) {
		expect_pull_next(&r[i], i, (float)(CONNS * PUSHES));
		close(r[i].fd);
	}
	ck_assert_int_eq(dml_test_server_stop(srv, DML_TEST_STOP_TIMEOUT_MS), 0);
	dml_test_env_free(env);
}

START_TEST(test_every_ack_once_over_many_connections)
{
	struct dml_test_server_conf conf = { .staleness = -1, .tables = TABLE };
	struct dml_test_server *srv;
	struct dml_test_env *env;
	struct raw r[CONNS];
	const float g[W] = { 1, 2 };

	ck_assert_int_eq(dml_test_env_new(&env), 0);
	ck_assert_int_eq(dml_test_server_start(env, &conf, &srv), 0);
	open_all(env, srv, r);
	/* Everything in flight on every connection before any reply is read. */
	for (int i = 0; i < CONNS; i++)
		push_burst(&r[i], g, NULL, 0);
	expect_all_then_stop(env, srv, r, 0);
}
END_TEST

START_TEST(test_hostile_frame_after_pushes_is_refused_alone)
{
	struct dml_test_server_conf conf = { .staleness = -1, .tables = TABLE };
	/* Sixteen bytes with no dml magic, as a confused HTTP client sends. */
	static const char junk[DML_FRAME_HEADER_LEN] = "GET / HTTP/1.1\r\n";
	struct dml_test_server *srv;
	struct dml_test_env *env;
	struct raw r[CONNS];
	const float g[W] = { 1, 2 };
	uint8_t *pl = NULL;
	Dml__Meta *m;

	ck_assert_int_eq(dml_test_env_new(&env), 0);
	ck_assert_int_eq(dml_test_server_start(env, &conf, &srv), 0);
	open_all(env, srv, r);
	/* The junk comes in the same write as the pushes of connection 0. */
	for (int i = 0; i < CONNS; i++)
		push_burst(&r[i], g, i == 0 ? junk : NULL, i == 0 ? sizeof(junk) : 0);
	/* The pushes before the junk were applied and are acknowledged... */
	expect_acks(&r[0], 0);
	/* ...then the junk is refused and the connection closed. */
	m = raw_frame_read(r[0].fd, &pl);
	ck_assert_int_eq(m->type, DML__MSG_TYPE__ERROR);
	ck_assert_ptr_nonnull(m->error);
	ck_assert_int_eq(m->error->code, DML_EFRAME_MAGIC);
	dml_meta_free(m);
	free(pl);
	ck_assert_int_eq(dml_test_raw_wait_closed(r[0].fd, WAIT_MS), 0);
	close(r[0].fd);
	expect_all_then_stop(env, srv, r, 1);
}
END_TEST

static Suite *many_conns_suite(void)
{
	Suite *s = suite_create("many_conns");
	TCase *tc = tcase_create("many_conns");

	tcase_set_timeout(tc, TEST_TIMEOUT_S);
	tcase_add_test(tc, test_every_ack_once_over_many_connections);
	tcase_add_test(tc, test_hostile_frame_after_pushes_is_refused_alone);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return dml_check_run(many_conns_suite());
}
