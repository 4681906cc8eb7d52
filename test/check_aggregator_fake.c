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
 *     another range is refused with DML_ESHAPE, a good one served;
 *   - a sum goes in the workers' Meta.forward_codec, keeping the residual
 *     of a lossy one for the next sum, put back when the sum is split;
 *   - a pull naming topk upstream makes delta pulls, one at a time; a pull
 *     of an earlier clock never waits for a later clock's upstream pull;
 *     pulling ahead, the next clock's delta pull goes once a reply is in;
 *   - a clocked job's entry (Meta.pace) waits for the zone's workers past
 *     window_ms, an asynchronous one's does not; no entry waits for a
 *     worker that pushed a later clock or has a push queued after it; an
 *     entry moves behind a worker's last push so that it may join it.
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

static void end_two_workers(struct fixture *f, int w1, int w2)
{
	close(w1);
	close(w2);
	fixture_end(f);
}

/* The owner acknowledges rid: both workers' requests get their ACKs. */
static void owner_acks_both(struct fixture *f, uint64_t rid, int w1, uint64_t r1, int w2,
			    uint64_t r2)
{
	owner_answer(f, rid, 0);
	expect_reply(w1, r1, 0);
	expect_reply(w2, r2, 0);
}

/* The tests that script every upstream pull turn pulling ahead off;
 * test_delta_pull_ahead turns it on. */
#define PULLS_ON_DEMAND "pull_ahead = no\n"

/* A fake owner with extra aggregator keys, and workers 1 and 2 connected. */
static void start_two_workers(struct fixture *f, const char *extra, int *w1, int *w2)
{
	fixture_start(f, OWNER_FAKE, extra);
	*w1 = worker_connect(f, 1);
	*w2 = worker_connect(f, 2);
}

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

	start_two_workers(&f, "window_ms = 60000\n", &w1, &w2);
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
	owner_acks_both(&f, rid, w1, 18, w2, 24);
	wait_agg_metric(&f, "dml_aggregator_retries_total", 1);

	rid = push_both(&f, w1, w2, s95, 5);
	owner_answer(&f, rid, DML_ESHAPE);
	expect_reply(w1, 19, DML_ESHAPE);
	expect_reply(w2, 25, DML_ESHAPE);
	end_two_workers(&f, w1, w2);
}
END_TEST

START_TEST(test_rule2_and_resend_on_reconnect)
{
	struct fixture f;
	float a[KEYS], b[KEYS], a10[KEYS];
	uint64_t rid, s11[] = { 1, 1 }, s2[] = { 2 };
	int w1, w2;

	start_two_workers(&f, "window_ms = 300\n", &w1, &w2);
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
	owner_acks_both(&f, rid, w1, 11, w2, 21);
	rid = expect_forward(&f, 1, only1, s2, 10);
	owner_answer(&f, rid, 0);
	expect_reply(w1, 12, 0);
	end_two_workers(&f, w1, w2);
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

	fixture_start(&f, OWNER_FAKE, PULLS_ON_DEMAND);
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

/* A worker's push at clock naming codec (NULL: none) and pace. */
static void send_push_at(int fd, uint64_t rid, uint64_t seq, uint64_t clock,
			 const char *owner, const float *v, const char *codec, uint32_t pace)
{
	Dml__Meta m;

	dense_meta(&m, DML__MSG_TYPE__PUSH, rid, clock, owner);
	m.seq = seq;
	m.forward_codec = (char *)codec;
	m.pace = pace;
	raw_frame_send(fd, &m, v, KEYS * sizeof(float));
}

/* The next forwarded push: n contributors, in dtype, decoding to want. */
static uint64_t expect_coded(struct fixture *f, size_t n, Dml__DType dtype,
			     const float *want)
{
	struct dml_codec c;
	float got[KEYS];
	uint8_t *pl;
	Dml__Meta *m = raw_frame_read(f->fake, &pl);
	uint64_t rid = m->request_id;

	ck_assert_int_eq(m->type, DML__MSG_TYPE__PUSH);
	ck_assert_uint_eq(m->n_contributors, n);
	ck_assert_int_eq(m->dtype, dtype);
	ck_assert_int_eq(dml_dtype_codec(m->dtype, &c), 0);
	ck_assert_int_eq(dml_codec_decode(&c, pl, m->payload_bytes, KEYS, got), 0);
	for (int k = 0; k < KEYS; k++)
		ck_assert_msg(got[k] == want[k], "value %d is %g, not %g", k, got[k], want[k]);
	dml_meta_free(m);
	free(pl);
	return rid;
}

/* Workers 1 and 2 push a and b in codec (seq s, requests 10 + s, 20 + s). */
static void push_coded_both(struct fixture *f, int w1, int w2, uint64_t s, const float *a,
			    const float *b, const char *codec, double n_in)
{
	send_push_at(w1, 10 + s, s, 1, f->owner_addr, a, codec, DML_PACE_UNKNOWN);
	wait_agg_metric(f, PUSHES_IN, n_in);
	send_push_at(w2, 20 + s, s, 1, f->owner_addr, b, codec, DML_PACE_UNKNOWN);
}

/*
 * Workers naming Meta.forward_codec topk:0.25 (2 of 8 values): the sum goes
 * in it, and what it left out goes with the next sum (error feedback), in
 * whatever codec that one takes. A split puts the residual back first:
 * each worker's push then starts from it as it was before the sum.
 */
START_TEST(test_forward_codec_keeps_the_residual)
{
	struct fixture f;
	float a[KEYS], b[KEYS], zero[KEYS] = { 0 };
	/* The sum 3 (k + 1): its top two; a alone; b plus a's leftover. */
	const float sum_top[KEYS] = { 0, 0, 0, 0, 0, 0, 21, 24 };
	const float a_top[KEYS] = { 0, 0, 0, 0, 0, 0, 7, 8 };
	const float b_top[KEYS] = { 0, 0, 0, 0, 0, 18, 0, 16 };
	/* Left then: 3, 6, 9, 12, 15, 0, 14, 0; the top two go next. */
	const float next_top[KEYS] = { 0, 0, 0, 0, 15, 0, 14, 0 };
	/* Then b in fp16 carries the rest: exact in half precision. */
	const float b_rest[KEYS] = { 5, 10, 15, 20, 10, 12, 14, 16 };
	uint64_t rid;
	int w1, w2;

	start_two_workers(&f, "window_ms = 60000\n", &w1, &w2);
	fill(a, 1);
	fill(b, 2);
	push_coded_both(&f, w1, w2, 1, a, b, "topk:0.25", 1);
	rid = expect_coded(&f, 2, DML__DTYPE__TOPK, sum_top);
	owner_answer(&f, rid, DML_EPARTIAL);
	rid = expect_coded(&f, 1, DML__DTYPE__TOPK, a_top);
	owner_answer(&f, rid, 0);
	expect_reply(w1, 11, 0);
	rid = expect_coded(&f, 1, DML__DTYPE__TOPK, b_top);
	owner_answer(&f, rid, 0);
	expect_reply(w2, 21, 0);

	push_coded_both(&f, w1, w2, 2, zero, zero, "topk:0.25", 3);
	rid = expect_coded(&f, 2, DML__DTYPE__TOPK, next_top);
	owner_acks_both(&f, rid, w1, 12, w2, 22);

	push_coded_both(&f, w1, w2, 3, zero, b, "fp16", 5);
	rid = expect_coded(&f, 2, DML__DTYPE__F16, b_rest);
	owner_acks_both(&f, rid, w1, 13, w2, 23);
	/* Five sums encoded (the split one too), 8 floats each. */
	wait_agg_metric(&f, "dml_aggregator_forward_value_bytes_total", 5 * KEYS * 4);
	end_two_workers(&f, w1, w2);
}
END_TEST

/* The delta codecs of the delta pull tests, and the one a test runs with
 * (both send the values of these tests exactly: small integers). */
static const struct {
	const char *name;
	enum dml_codec_kind kind;
	Dml__DType dtype;
} delta_codecs[] = { { "topk:0.25", DML_CODEC_TOPK, DML__DTYPE__TOPK },
		     { "topk16:0.25", DML_CODEC_TOPK16, DML__DTYPE__TOPK16 } };
static size_t delta_at;

/* A worker's dense pull at clock, asking F32, naming the delta codec
 * (topk:0.25 unless a test picked another) upstream. */
static void send_delta_pull(int fd, uint64_t rid, uint64_t clock, const char *owner)
{
	Dml__Meta m;

	dense_meta(&m, DML__MSG_TYPE__PULL, rid, clock, owner);
	m.forward_codec = (char *)delta_codecs[delta_at].name;
	raw_frame_send(fd, &m, NULL, 0);
}

/* The next upstream frame: a delta pull at clock naming held. */
static uint64_t expect_delta_pull(struct fixture *f, uint64_t clock, uint64_t held)
{
	Dml__Meta *u = owner_read(f, NULL);
	uint64_t rid = u->request_id;

	ck_assert_int_eq(u->type, DML__MSG_TYPE__PULL);
	ck_assert_str_eq(u->delta_codec, delta_codecs[delta_at].name);
	ck_assert_int_eq(u->dtype, DML__DTYPE__F32);
	ck_assert_uint_eq(u->clock, clock);
	ck_assert_uint_eq(u->held_version, held);
	dml_meta_free(u);
	return rid;
}

/* The owner answers rid: v as floats, or (delta) in the delta codec;
 * version. */
static void owner_pull_reply(struct fixture *f, uint64_t rid, const float *v, int delta,
			     uint64_t version)
{
	struct dml_codec topk = { .kind = delta_codecs[delta_at].kind, .topk_fraction = 0.25f };
	uint8_t buf[64];
	size_t len = KEYS * sizeof(float);
	Dml__Meta m;

	dense_meta(&m, DML__MSG_TYPE__PULL_REPLY, rid, 0, "");
	m.held_version = version;
	m.delta = delta;
	if (delta) {
		ck_assert_int_eq(dml_codec_encode(&topk, v, KEYS, NULL, buf, sizeof(buf), &len), 0);
		m.dtype = delta_codecs[delta_at].dtype;
	}
	raw_frame_send(f->fake, &m, delta ? (const void *)buf : (const void *)v, (uint32_t)len);
}

/* The worker's reply to rid: F32 values equal to want. */
static void expect_pulled(int fd, uint64_t rid, const float *want)
{
	uint8_t *pl;
	Dml__Meta *m = raw_frame_read(fd, &pl);
	float got[KEYS];

	ck_assert_int_eq(m->type, DML__MSG_TYPE__PULL_REPLY);
	ck_assert_uint_eq(m->request_id, rid);
	ck_assert_int_eq(m->dtype, DML__DTYPE__F32);
	ck_assert(!m->delta && m->held_version == 0);
	memcpy(got, pl, sizeof(got));
	for (int k = 0; k < KEYS; k++)
		ck_assert_msg(got[k] == want[k], "value %d is %g, not %g", k, got[k], want[k]);
	dml_meta_free(m);
	free(pl);
}

/* A delta to the values of fill(v, 1), and what the slot holds then. */
static const float change[KEYS] = { 10, 0, 0, 0, 0, 0, 0, -20 };
static const float after[KEYS] = { 11, 2, 3, 4, 5, 6, 7, -12 };

/*
 * A worker naming topk:0.25 (or topk16:0.25) upstream: the aggregator's
 * pulls of that slot are delta pulls, one at a time, each naming the
 * version the last reply brought; a delta is added to what the slot holds,
 * a full reply replaces it; the worker gets plain values in the dtype it
 * asked.
 */
START_TEST(test_delta_pulls_one_at_a_time)
{
	struct fixture f;
	float v[KEYS], v2[KEYS];
	uint64_t rid;
	int w1;

	delta_at = (size_t)_i;
	fixture_start(&f, OWNER_FAKE, PULLS_ON_DEMAND);
	w1 = worker_connect(&f, 1);
	fill(v, 1);
	fill(v2, 2);
	send_delta_pull(w1, 41, 1, f.owner_addr);
	rid = expect_delta_pull(&f, 1, 0);
	owner_pull_reply(&f, rid, v, 0, 70);
	expect_pulled(w1, 41, v);

	send_delta_pull(w1, 42, 2, f.owner_addr);
	rid = expect_delta_pull(&f, 2, 70);
	/* A later clock waits for the pull in flight: it must name what that
	 * one brings. */
	send_delta_pull(w1, 43, 3, f.owner_addr);
	expect_silence(f.fake);
	owner_pull_reply(&f, rid, change, 1, 71);
	expect_pulled(w1, 42, after);
	rid = expect_delta_pull(&f, 3, 71);
	owner_pull_reply(&f, rid, v2, 0, 72);
	expect_pulled(w1, 43, v2);
	close(w1);
	fixture_end(&f);
	delta_at = 0;
}
END_TEST

/*
 * pull_ahead = yes on a delta slot: once clock 1's reply is in, the
 * pull of clock 2 goes with no one waiting on it, naming the version that
 * reply brought; the worker's pull of clock 2 is answered with what it
 * brought (joined or cached), and clock 3's goes ahead in turn.
 */
START_TEST(test_delta_pull_ahead)
{
	struct fixture f;
	float v[KEYS];
	uint64_t rid;
	int w1;

	fixture_start(&f, OWNER_FAKE, "pull_ahead = yes\n");
	w1 = worker_connect(&f, 1);
	fill(v, 1);
	send_delta_pull(w1, 41, 1, f.owner_addr);
	rid = expect_delta_pull(&f, 1, 0);
	owner_pull_reply(&f, rid, v, 0, 70);
	expect_pulled(w1, 41, v);
	rid = expect_delta_pull(&f, 2, 70);
	owner_pull_reply(&f, rid, change, 1, 71);
	send_delta_pull(w1, 42, 2, f.owner_addr);
	expect_pulled(w1, 42, after);
	rid = expect_delta_pull(&f, 3, 71);
	wait_agg_metric(&f, "dml_aggregator_pulls_ahead_total", 2);
	wait_agg_metric(&f, "dml_aggregator_pulls_forwarded_total", 3);
	close(w1);
	fixture_end(&f);
}
END_TEST

/*
 * window_ms 10, clock_window_ms 60 s: a clocked job's entry waits for the
 * zone's other worker (one forward holding both), or until that worker
 * pushed a later clock; an asynchronous one's goes alone once its 10 ms
 * are up.
 */
START_TEST(test_clocked_entries_wait_for_the_zone)
{
	struct fixture f;
	Dml__Meta *u;
	float a[KEYS], b[KEYS];
	uint64_t rid, s11[] = { 1, 1 }, s2[] = { 2 };
	int w1, w2;

	start_two_workers(&f, "window_ms = 10\nclock_window_ms = 60000\n", &w1, &w2);
	fill(a, 1);
	fill(b, 2);
	send_push_at(w1, 11, 1, 1, f.owner_addr, a, NULL, DML_PACE_CLOCKED);
	wait_agg_metric(&f, PUSHES_IN, 1);
	expect_silence(f.fake);
	send_push_at(w2, 21, 1, 1, f.owner_addr, b, NULL, DML_PACE_CLOCKED);
	rid = expect_forward(&f, 2, both, s11, 3);
	owner_acks_both(&f, rid, w1, 11, w2, 21);
	send_push_at(w1, 12, 2, 1, f.owner_addr, a, NULL, DML_PACE_ASYNC);
	rid = expect_forward(&f, 1, only1, s2, 1);
	owner_answer(&f, rid, 0);
	expect_reply(w1, 12, 0);
	/* Worker 2 pushes clock 3 without clock 2: it will not push clock 2
	 * any more, so worker 1's clock-2 entry goes at once, alone. */
	send_push_at(w1, 13, 3, 2, f.owner_addr, a, NULL, DML_PACE_CLOCKED);
	wait_agg_metric(&f, PUSHES_IN, 4);
	expect_silence(f.fake);
	send_push_at(w2, 22, 2, 3, f.owner_addr, b, NULL, DML_PACE_CLOCKED);
	u = owner_read(&f, NULL);
	ck_assert_uint_eq(u->clock, 2);
	ck_assert_uint_eq(u->n_contributors, 1);
	ck_assert_uint_eq(u->contributors[0]->worker, 1);
	owner_answer(&f, u->request_id, 0);
	expect_reply(w1, 13, 0);
	dml_meta_free(u);
	end_two_workers(&f, w1, w2);
}
END_TEST

/*
 * A pull of an earlier clock never waits for a later clock's upstream pull
 * (the owner holds that one longer: with libdml holding the worker's CLOCK
 * for its zone's pushes, a cycle): plain slot or delta slot, it goes up
 * on its own, the delta slot's as a plain fp16 pull relayed as floats.
 */
START_TEST(test_earlier_clock_goes_alone)
{
	struct fixture f;
	float v[KEYS];
	uint16_t half[KEYS];
	Dml__Meta m, *u4;
	uint64_t rid5;
	int w1, w2;

	start_two_workers(&f, PULLS_ON_DEMAND, &w1, &w2);
	fill(v, 3);
	for (int k = 0; k < KEYS; k++)
		half[k] = dml_float_to_half(v[k]);
	dense_meta(&m, DML__MSG_TYPE__PULL, 51, 5, f.owner_addr);
	raw_frame_send(w1, &m, NULL, 0);
	u4 = owner_read(&f, NULL);
	rid5 = u4->request_id;
	dml_meta_free(u4);
	dense_meta(&m, DML__MSG_TYPE__PULL, 52, 4, f.owner_addr);
	raw_frame_send(w2, &m, NULL, 0);
	u4 = owner_read(&f, NULL);
	ck_assert_uint_eq(u4->clock, 4);
	owner_pull_reply(&f, u4->request_id, v, 0, 0);
	expect_pulled(w2, 52, v);
	owner_pull_reply(&f, rid5, v, 0, 0);
	expect_pulled(w1, 51, v);
	dml_meta_free(u4);

	send_delta_pull(w1, 53, 7, f.owner_addr);
	rid5 = expect_delta_pull(&f, 7, 0);
	send_delta_pull(w2, 54, 6, f.owner_addr);
	u4 = owner_read(&f, NULL);
	ck_assert_uint_eq(u4->clock, 6);
	ck_assert(!u4->delta_codec || !u4->delta_codec[0]);
	ck_assert_int_eq(u4->dtype, DML__DTYPE__F16);
	dense_meta(&m, DML__MSG_TYPE__PULL_REPLY, u4->request_id, 0, "");
	m.dtype = DML__DTYPE__F16;
	raw_frame_send(f.fake, &m, half, sizeof(half));
	expect_pulled(w2, 54, v);
	owner_pull_reply(&f, rid5, v, 0, 80);
	expect_pulled(w1, 53, v);
	dml_meta_free(u4);
	end_two_workers(&f, w1, w2);
}
END_TEST

/* Worker fd pushes keys [0, end) at clock 1, seq, request rid. */
static void push_range(int fd, uint64_t rid, uint64_t seq, uint64_t end, const char *owner)
{
	float v[KEYS];
	Dml__Meta m;

	fill(v, 1);
	dense_meta(&m, DML__MSG_TYPE__PUSH, rid, 1, owner);
	m.seq = seq;
	m.key_end = end;
	raw_frame_send(fd, &m, v, (uint32_t)(end * sizeof(float)));
}

/*
 * An entry a worker can no longer join (rule 2: it has a push queued after
 * it) does not wait for it: worker 1 pushes keys [0, 4) then [0, 8);
 * worker 2 pushes [0, 8) first, joining the second entry; the first goes at
 * once, alone, then the second with both.
 */
START_TEST(test_entry_nobody_can_join_goes)
{
	struct fixture f;
	Dml__Meta *u;
	int w1, w2;

	start_two_workers(&f, "window_ms = 60000\n", &w1, &w2);
	push_range(w1, 11, 1, KEYS / 2, f.owner_addr);
	push_range(w1, 12, 2, KEYS, f.owner_addr);
	wait_agg_metric(&f, PUSHES_IN, 2);
	expect_silence(f.fake);
	push_range(w2, 21, 1, KEYS, f.owner_addr);
	u = owner_read(&f, NULL);
	ck_assert_uint_eq(u->key_end, KEYS / 2);
	ck_assert_uint_eq(u->n_contributors, 1);
	ck_assert_uint_eq(u->contributors[0]->worker, 1);
	owner_answer(&f, u->request_id, 0);
	expect_reply(w1, 11, 0);
	dml_meta_free(u);
	u = owner_read(&f, NULL);
	ck_assert_uint_eq(u->key_end, KEYS);
	ck_assert_uint_eq(u->n_contributors, 2);
	owner_acks_both(&f, u->request_id, w1, 12, w2, 21);
	dml_meta_free(u);
	end_two_workers(&f, w1, w2);
}
END_TEST

/*
 * A worker a push behind its peer joins the peer's entry, moved after its
 * own last one: worker 1 pushes keys [0, 4); worker 2 pushes [0, 8), then
 * [0, 4), which joins worker 1's entry, now behind its own. [0, 8) goes
 * first, alone (worker 1 has a push after it), then [0, 4) with both.
 */
START_TEST(test_entry_moves_for_a_worker_behind)
{
	struct fixture f;
	Dml__Meta *u;
	int w1, w2;

	start_two_workers(&f, "window_ms = 60000\n", &w1, &w2);
	push_range(w1, 11, 1, KEYS / 2, f.owner_addr);
	wait_agg_metric(&f, PUSHES_IN, 1);
	push_range(w2, 21, 1, KEYS, f.owner_addr);
	wait_agg_metric(&f, PUSHES_IN, 2);
	push_range(w2, 22, 2, KEYS / 2, f.owner_addr);
	u = owner_read(&f, NULL);
	ck_assert_uint_eq(u->key_end, KEYS);
	ck_assert_uint_eq(u->n_contributors, 1);
	ck_assert_uint_eq(u->contributors[0]->worker, 2);
	owner_answer(&f, u->request_id, 0);
	expect_reply(w2, 21, 0);
	dml_meta_free(u);
	u = owner_read(&f, NULL);
	ck_assert_uint_eq(u->key_end, KEYS / 2);
	ck_assert_uint_eq(u->n_contributors, 2);
	owner_acks_both(&f, u->request_id, w1, 11, w2, 22);
	dml_meta_free(u);
	end_two_workers(&f, w1, w2);
}
END_TEST

/*
 * An open head does not hold back a closed entry it may move behind:
 * worker 2's push of clock 2 waits for worker 1's, and worker 1's push of
 * clock 1 (closed: worker 2 is past that clock) goes first, since worker 1
 * may wait for its ACK before it pushes clock 2 (the mlp app keeps one
 * push per table in flight). Worker 1's clock 2 then joins worker 2's.
 */
START_TEST(test_open_head_lets_a_closed_entry_pass)
{
	struct fixture f;
	float v[KEYS];
	Dml__Meta *u;
	int w1, w2;

	start_two_workers(&f, "clock_window_ms = 60000\n", &w1, &w2);
	fill(v, 1);
	send_push_at(w2, 21, 1, 2, f.owner_addr, v, NULL, DML_PACE_CLOCKED);
	wait_agg_metric(&f, PUSHES_IN, 1);
	send_push_at(w1, 11, 1, 1, f.owner_addr, v, NULL, DML_PACE_CLOCKED);
	u = owner_read(&f, NULL);
	ck_assert_uint_eq(u->clock, 1);
	ck_assert_uint_eq(u->n_contributors, 1);
	ck_assert_uint_eq(u->contributors[0]->worker, 1);
	owner_answer(&f, u->request_id, 0);
	expect_reply(w1, 11, 0);
	dml_meta_free(u);
	wait_agg_metric(&f, "dml_aggregator_entries_let_pass_total", 1);
	send_push_at(w1, 12, 2, 2, f.owner_addr, v, NULL, DML_PACE_CLOCKED);
	u = owner_read(&f, NULL);
	ck_assert_uint_eq(u->clock, 2);
	ck_assert_uint_eq(u->n_contributors, 2);
	owner_acks_both(&f, u->request_id, w1, 12, w2, 21);
	dml_meta_free(u);
	end_two_workers(&f, w1, w2);
}
END_TEST

void add_fake_owner_tests(TCase *tc)
{
	tcase_add_test(tc, test_forwarded_push_split_retry_relay);
	tcase_add_test(tc, test_rule2_and_resend_on_reconnect);
	tcase_add_test(tc, test_pull_upstream_codec_and_bad_reply);
	tcase_add_test(tc, test_forward_codec_keeps_the_residual);
	tcase_add_loop_test(tc, test_delta_pulls_one_at_a_time, 0,
			    (int)(sizeof(delta_codecs) / sizeof(delta_codecs[0])));
	tcase_add_test(tc, test_delta_pull_ahead);
	tcase_add_test(tc, test_clocked_entries_wait_for_the_zone);
	tcase_add_test(tc, test_earlier_clock_goes_alone);
	tcase_add_test(tc, test_entry_nobody_can_join_goes);
	tcase_add_test(tc, test_entry_moves_for_a_worker_behind);
	tcase_add_test(tc, test_open_head_lets_a_closed_entry_pass);
}
