/*
 * dml-aggregator against a fake owner: the test accepts the aggregator's
 * connection as a server and answers its forwarded frames by hand.
 *
 *   - a forwarded push carries Meta.seq 0, F32, the summed weight, the
 *     clock, the sum, and each worker as a contributor (node id and
 *     incarnation from its HELLO, the seq its push carried);
 *   - rule 2: a worker's second push of a range and clock does not join
 *     the entry holding its first; it goes after, alone, once the window
 *     ran out;
 *   - DML_EPARTIAL splits the push into one per worker, in order, each
 *     acknowledged on its own; DML_EAGAIN sends the same push again;
 *     another error reaches every worker;
 *   - the owner's connection dropped before its answer: the aggregator
 *     dials again and sends the same push first;
 *   - an upstream pull asks the dtype the worker asked (fp16); a reply of
 *     another range is refused with DML_ESHAPE, a good one served.
 */
#include <check.h>
#include <stdlib.h>
#include <unistd.h>

#include "proto/codec.h"
#include "proto/dml_error.h"
#include "proto/frame.h"
#include "test/check_aggregator.h"
#include "test/raw_frame.h"

/* One forwarded frame at the fake owner; its values (if any) into v. */
static Dml__Meta *owner_read(struct fixture *f, float *v)
{
	uint8_t *pl;
	Dml__Meta *m = raw_frame_read(f->fake, &pl);

	if (v && m->type == DML__MSG_TYPE__PUSH) {
		ck_assert_uint_eq(m->payload_bytes, KEYS * sizeof(float));
		memcpy(v, pl, KEYS * sizeof(float));
	}
	free(pl);
	return m;
}

static void owner_answer(struct fixture *f, uint64_t rid, int code)
{
	Dml__Meta m = DML__META__INIT;
	Dml__Error e = DML__ERROR__INIT;

	m.request_id = rid;
	m.type = code ? DML__MSG_TYPE__ERROR : DML__MSG_TYPE__ACK;
	if (code) {
		e.code = code;
		e.message = (char *)"from the fake owner";
		m.error = &e;
	}
	raw_frame_send(f->fake, &m, NULL, 0);
}

/*
 * The next forwarded push holds workers ws[0..n) with seqs ss[] (worker w's
 * incarnation 1000 + w) and the values scale (k + 1). Returns its request id.
 */
static uint64_t expect_forward(struct fixture *f, size_t n, const uint32_t *ws,
			       const uint64_t *ss, float scale)
{
	float v[KEYS];
	Dml__Meta *m = owner_read(f, v);
	uint64_t rid = m->request_id;

	ck_assert_int_eq(m->type, DML__MSG_TYPE__PUSH);
	ck_assert_uint_eq(m->seq, 0);
	ck_assert_uint_eq(m->clock, 1);
	ck_assert_int_eq(m->dtype, DML__DTYPE__F32);
	ck_assert_float_eq(m->weight, (float)n);
	ck_assert_uint_eq(m->n_contributors, n);
	for (size_t i = 0; i < n; i++) {
		ck_assert_uint_eq(m->contributors[i]->worker, ws[i]);
		ck_assert_uint_eq(m->contributors[i]->incarnation, 1000 + ws[i]);
		ck_assert_uint_eq(m->contributors[i]->seq, ss[i]);
	}
	expect_values(v, -scale);
	dml_meta_free(m);
	return rid;
}

#define PUSHES_IN "dml_aggregator_pushes_in_total"

static const uint32_t both[] = { 1, 2 }, only1[] = { 1 }, only2[] = { 2 };

/*
 * Worker 1 pushes a (seq s[0], request 10 + s[0]), then, once it is in so
 * that worker 1 is the first contributor, worker 2 pushes 2a (seq s[1],
 * request 20 + s[1]); the forwarded sum's request id comes back. n_in: the
 * aggregator's pushes in, worker 1's counted.
 */
static uint64_t push_both(struct fixture *f, int w1, int w2, const uint64_t *s, double n_in)
{
	float a[KEYS], b[KEYS];

	fill(a, 1);
	fill(b, 2);
	send_push(w1, 10 + s[0], s[0], f->owner_addr, a);
	wait_agg_metric(f, PUSHES_IN, n_in);
	send_push(w2, 20 + s[1], s[1], f->owner_addr, b);
	return expect_forward(f, 2, both, s, 3);
}

START_TEST(test_forwarded_push_split_retry_relay)
{
	struct fixture f;
	uint64_t rid, s73[] = { 7, 3 }, s84[] = { 8, 4 }, s95[] = { 9, 5 };
	int w1, w2;

	fixture_start(&f, OWNER_FAKE, "window_ms = 60000\n");
	w1 = worker_connect(&f, 1);
	w2 = worker_connect(&f, 2);
	rid = push_both(&f, w1, w2, s73, 1);
	owner_answer(&f, rid, DML_EPARTIAL);
	/* One by one, in the entry's order, each meeting its own answer. */
	rid = expect_forward(&f, 1, only1, &s73[0], 1);
	expect_silence(w1);
	owner_answer(&f, rid, 0);
	expect_reply(w1, 17, 0);
	rid = expect_forward(&f, 1, only2, &s73[1], 2);
	owner_answer(&f, rid, 0);
	expect_reply(w2, 23, 0);
	wait_agg_metric(&f, "dml_aggregator_splits_total", 1);

	rid = push_both(&f, w1, w2, s84, 3);
	owner_answer(&f, rid, DML_EAGAIN);
	rid = expect_forward(&f, 2, both, s84, 3);
	owner_answer(&f, rid, 0);
	expect_reply(w1, 18, 0);
	expect_reply(w2, 24, 0);
	wait_agg_metric(&f, "dml_aggregator_retries_total", 1);

	rid = push_both(&f, w1, w2, s95, 5);
	owner_answer(&f, rid, DML_ESHAPE);
	expect_reply(w1, 19, DML_ESHAPE);
	expect_reply(w2, 25, DML_ESHAPE);
	close(w1);
	close(w2);
	fixture_end(&f);
}
END_TEST

START_TEST(test_rule2_and_resend_on_reconnect)
{
	struct fixture f;
	float a[KEYS], b[KEYS], a10[KEYS];
	uint64_t rid, s11[] = { 1, 1 }, s2[] = { 2 };
	int w1, w2;

	fixture_start(&f, OWNER_FAKE, "window_ms = 300\n");
	w1 = worker_connect(&f, 1);
	w2 = worker_connect(&f, 2);
	fill(a, 1);
	fill(a10, 10);
	fill(b, 2);
	send_push(w1, 11, 1, f.owner_addr, a);
	send_push(w1, 12, 2, f.owner_addr, a10);
	wait_agg_metric(&f, PUSHES_IN, 2);
	send_push(w2, 21, 1, f.owner_addr, b);
	/* Worker 2 joins the first entry; worker 1's second push is behind it. */
	rid = expect_forward(&f, 2, both, s11, 3);
	/* Gone before answering: the same push comes first on the next link. */
	close(f.fake);
	fake_owner_accept(&f);
	rid = expect_forward(&f, 2, both, s11, 3);
	owner_answer(&f, rid, 0);
	expect_reply(w1, 11, 0);
	expect_reply(w2, 21, 0);
	rid = expect_forward(&f, 1, only1, s2, 10);
	owner_answer(&f, rid, 0);
	expect_reply(w1, 12, 0);
	close(w1);
	close(w2);
	fixture_end(&f);
}
END_TEST

START_TEST(test_pull_upstream_codec_and_bad_reply)
{
	struct fixture f;
	Dml__Meta m, *u;
	uint16_t half[KEYS];
	float got[KEYS], v[KEYS];
	uint8_t *pl;
	int w1;

	fixture_start(&f, OWNER_FAKE, NULL);
	w1 = worker_connect(&f, 1);
	dense_meta(&m, DML__MSG_TYPE__PULL, 31, 5, f.owner_addr);
	m.dtype = DML__DTYPE__F16;
	raw_frame_send(w1, &m, NULL, 0);
	u = owner_read(&f, NULL);
	ck_assert_int_eq(u->type, DML__MSG_TYPE__PULL);
	ck_assert_int_eq(u->dtype, DML__DTYPE__F16);
	ck_assert_uint_eq(u->worker, 1);
	ck_assert_uint_eq(u->clock, 5);
	/* A reply of one key less than asked for. */
	dense_meta(&m, DML__MSG_TYPE__PULL_REPLY, u->request_id, 0, "");
	m.key_end = KEYS - 1;
	raw_frame_send(f.fake, &m, v, (KEYS - 1) * sizeof(float));
	dml_meta_free(u);
	expect_reply(w1, 31, DML_ESHAPE);
	/* Nothing was cached: the next pull goes up, and is served. */
	dense_meta(&m, DML__MSG_TYPE__PULL, 32, 5, f.owner_addr);
	m.dtype = DML__DTYPE__F16;
	raw_frame_send(w1, &m, NULL, 0);
	u = owner_read(&f, NULL);
	fill(v, -4);
	for (int k = 0; k < KEYS; k++)
		half[k] = dml_float_to_half(v[k]);
	dense_meta(&m, DML__MSG_TYPE__PULL_REPLY, u->request_id, 0, "");
	m.dtype = DML__DTYPE__F16;
	m.min_clock = 4;
	raw_frame_send(f.fake, &m, half, sizeof(half));
	dml_meta_free(u);
	u = raw_frame_read(w1, &pl);
	ck_assert_int_eq(u->type, DML__MSG_TYPE__PULL_REPLY);
	ck_assert_uint_eq(u->request_id, 32);
	ck_assert_uint_eq(u->min_clock, 4);
	ck_assert_int_eq(u->dtype, DML__DTYPE__F16);
	memcpy(half, pl, sizeof(half));
	for (int k = 0; k < KEYS; k++)
		got[k] = dml_half_to_float(half[k]);
	expect_values(got, 4);
	dml_meta_free(u);
	free(pl);
	close(w1);
	fixture_end(&f);
}
END_TEST

void add_fake_owner_tests(TCase *tc)
{
	tcase_add_test(tc, test_forwarded_push_split_retry_relay);
	tcase_add_test(tc, test_rule2_and_resend_on_reconnect);
	tcase_add_test(tc, test_pull_upstream_codec_and_bad_reply);
}
