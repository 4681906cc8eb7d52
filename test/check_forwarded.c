/*
 * Forwarded pushes: a zone aggregator's summed PUSH naming the workers'
 * pushes it holds (Meta.contributors), against a real dml-server with a
 * sync store. Workers 1 and 2 are libdml clients (so they are in the
 * server's clock set); the aggregator is a raw connection of role
 * AGGREGATOR sending hand-made frames. The table is dense, sgd with
 * learning rate 1 from zeros, so the rows say how often each sum was
 * applied.
 *
 *   - a sum of new pushes is applied once; the same frame again is
 *     acknowledged and not applied; a mix of applied and new pushes, or a
 *     seq past the resend window, is refused (DML_EPARTIAL) and changes
 *     nothing, after which the new push alone is applied;
 *   - an unknown worker gets DML_EAGAIN, a wrong incarnation DML_ESTATE, a
 *     worker naming contributors DML_EROLE, an aggregator naming none (or
 *     one twice, or with a seq of its own) DML_EINVAL;
 *   - after a SIGKILL and a restart the log gives every contributor its
 *     sequence back: a sum whose second worker's mark came only from a
 *     sequence-only record is a duplicate;
 *   - under BSP (bsp_step = clock) a forwarded push waits for its clock's
 *     step, and an aggregator's pull waits for the staleness bound;
 *   - delta pulls (Meta.delta_codec topk:0.25 and topk16:0.25, two of eight
 *     values, the same floats in both: small integers are exact halves): held
 *     version 0 gets the values (F32) and a version; that version the
 *     change since, its largest two values, and a new one; what a reply
 *     left out comes with the next; a version not the latest (a lost
 *     reply), or another puller naming it, gets the values again.
 */
#define _GNU_SOURCE
#include <check.h>
#include <inttypes.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "proto/codec.h"
#include "proto/dml_error.h"
#include "proto/frame.h"
#include "test/check_run.h"
#include "test/harness.h"
#include "test/raw_frame.h"
#include "worker/dml.h"

#define KEYS 4
#define WIDTH 2
#define N (KEYS * WIDTH)
#define AGG_ID 100
#define INC1 0x1111
#define INC2 0x2222

static const char tables[] =
	"[table]\nid = 0\nkind = dense\nwidth = 2\nkeys = 4\noptimizer = sgd\nlr = 1\n";

struct rig {
	struct dml_test_env *env;
	struct dml_test_server *srv;
	char *metrics_file;
	dml_t *w[2];               /* workers 1 and 2 */
	int agg;                   /* the aggregator's connection */
	uint64_t next_id;
};

static dml_t *worker(struct rig *r, uint32_t id, uint64_t incarnation)
{
	char inc[32];
	dml_opts_t *o;
	dml_t *d;

	snprintf(inc, sizeof(inc), "%" PRIu64, incarnation);
	ck_assert_int_eq(dml_test_client_opts(r->env, &r->srv, 1, id, &o), 0);
	ck_assert_int_eq(dml_opts_set(o, "incarnation", inc), 0);
	ck_assert_int_eq(dml_opts_set(o, "reconnect_timeout_ms", "20000"), 0);
	ck_assert_int_eq(dml_connect(o, &d), 0);
	dml_opts_free(o);
	return d;
}

static void aggregator_connect(struct rig *r)
{
	ck_assert_int_eq(dml_test_raw_connect(dml_test_server_port(r->srv), &r->agg), 0);
	dml_meta_free(raw_frame_handshake(r->env, r->agg, DML__ROLE__AGGREGATOR, AGG_ID, 9, 0,
					  0));
}

static void rig_up(struct rig *r, int64_t staleness)
{
	struct dml_test_server_conf conf = { .tables = tables, .staleness = staleness };
	char *store, *extra;

	memset(r, 0, sizeof(*r));
	ck_assert_int_eq(dml_test_env_new(&r->env), 0);
	ck_assert_int_gt(asprintf(&store, "[store]\npath = %s/store\ndurability = sync\n",
				  dml_test_env_dir(r->env)), 0);
	ck_assert_int_gt(asprintf(&r->metrics_file, "%s/metrics.port",
				  dml_test_env_dir(r->env)), 0);
	ck_assert_int_gt(asprintf(&extra, "metrics_listen = 127.0.0.1:0\nmetrics_port_file = "
				  "%s\n", r->metrics_file), 0);
	conf.extra = store;
	conf.server_extra = extra;
	conf.workers = 2;
	ck_assert_int_eq(dml_test_server_start(r->env, &conf, &r->srv), 0);
	ck_assert_int_eq(dml_test_server_pin_port(r->srv), 0);
	r->w[0] = worker(r, 1, INC1);
	r->w[1] = worker(r, 2, INC2);
	aggregator_connect(r);
	free(store);
	free(extra);
}

static void rig_down(struct rig *r)
{
	close(r->agg);
	dml_close(r->w[0]);
	dml_close(r->w[1]);
	ck_assert_int_eq(dml_test_server_stop(r->srv, DML_TEST_STOP_TIMEOUT_MS), 0);
	free(r->metrics_file);
	dml_test_env_free(r->env);
}

static double metric(struct rig *r, const char *name)
{
	uint16_t port;
	double v = -1;

	ck_assert_int_eq(dml_test_port_file_read(r->metrics_file, &port), 0);
	ck_assert_int_eq(dml_test_metric(port, name, 10000, &v), 0);
	return v;
}

/* One contributor: worker, incarnation, seq. */
struct contrib {
	uint32_t worker;
	uint64_t incarnation, seq;
};

/* A dense PUSH of all KEYS with vals at clock, naming n contributors (its
 * weight n) and carrying seq, sent on fd; its request id. */
static uint64_t send_push(struct rig *r, int fd, const struct contrib *cs, size_t n,
			  uint64_t seq, uint64_t clock, const float *vals)
{
	Dml__Contributor c[4], *cp[4];
	Dml__Meta m = DML__META__INIT;

	ck_assert_uint_le(n, 4);
	for (size_t i = 0; i < n; i++) {
		dml__contributor__init(&c[i]);
		c[i].worker = cs[i].worker;
		c[i].incarnation = cs[i].incarnation;
		c[i].seq = cs[i].seq;
		cp[i] = &c[i];
	}
	m.type = DML__MSG_TYPE__PUSH;
	m.request_id = ++r->next_id;
	m.sender = AGG_ID;
	m.seq = seq;
	m.clock = clock;
	m.weight = (float)(n ? n : 1);
	m.value_width = WIDTH;
	m.dense = 1;
	m.key_begin = 0;
	m.key_end = KEYS;
	m.n_contributors = n;
	m.contributors = cp;
	raw_frame_send(fd, &m, vals, N * sizeof(float));
	return m.request_id;
}

/* The answer to request id on fd: ACK (code 0) or an ERROR with code whose
 * message holds want. */
static void expect(int fd, uint64_t id, int code, const char *want)
{
	uint8_t *payload;
	Dml__Meta *m = raw_frame_read(fd, &payload);

	ck_assert_uint_eq(m->request_id, id);
	if (code == 0) {
		ck_assert_msg(m->type == DML__MSG_TYPE__ACK, "request %" PRIu64 ": %s", id,
			      m->type == DML__MSG_TYPE__ERROR ? m->error->message : "not an ACK");
	} else {
		ck_assert_int_eq(m->type, DML__MSG_TYPE__ERROR);
		ck_assert_int_eq(m->error->code, code);
		ck_assert_msg(strstr(m->error->message, want), "'%s' lacks '%s'",
			      m->error->message, want);
	}
	free(payload);
	dml_meta_free(m);
}

/* The aggregator pushes a sum and reads its answer. */
static void agg_push(struct rig *r, const struct contrib *cs, size_t n, const float *vals,
		     int code, const char *want)
{
	expect(r->agg, send_push(r, r->agg, cs, n, 0, 0, vals), code, want);
}

/* Worker 1 reads the rows: they are -sum (sgd, lr 1, from zeros). */
static void rows_are(struct rig *r, const float *sum)
{
	float out[N];
	dml_handle_t h;

	ck_assert_int_eq(dml_pull_range(r->w[0], 0, 0, KEYS, out, &h), 0);
	ck_assert_int_eq(dml_wait(r->w[0], h), 0);
	for (int i = 0; i < N; i++)
		ck_assert_msg(out[i] == -sum[i], "value %d: %g, want %g", i, out[i], -sum[i]);
}

static void add(float *sum, const float *vals)
{
	for (int i = 0; i < N; i++)
		sum[i] += vals[i];
}

START_TEST(test_forwarded_pushes)
{
	struct rig r;
	float a[N], b[N], c[N], sum[N] = { 0 }, out[N];
	const struct contrib first[] = { { 1, INC1, 5 }, { 2, INC2, 7 } };
	const struct contrib mixed[] = { { 1, INC1, 5 }, { 2, INC2, 8 } };
	const struct contrib jump[] = { { 1, INC1, 6 }, { 2, INC2, 8 + (1ull << 21) } };
	const struct contrib second[] = { { 2, INC2, 8 } };
	const struct contrib third[] = { { 1, INC1, 6 }, { 2, INC2, 9 } };
	const struct contrib unknown[] = { { 1, INC1, 6 }, { 3, 33, 1 } };
	const struct contrib stale[] = { { 1, INC1, 6 }, { 2, INC2 + 1, 9 } };
	const struct contrib twice[] = { { 2, INC2, 9 }, { 2, INC2, 10 } };
	dml_handle_t h;
	int wfd;

	for (int i = 0; i < N; i++) {
		a[i] = (float)(i + 1);
		b[i] = (float)(10 * (i + 1));
		c[i] = (float)(100 * (i + 1));
	}
	rig_up(&r, -1);

	/* New everywhere: applied once, its weight the number of pushes. */
	agg_push(&r, first, 2, a, 0, NULL);
	add(sum, a);
	rows_are(&r, sum);
	ck_assert_double_eq(metric(&r, "dml_server_pushes_forwarded_total"), 1);
	ck_assert_double_eq(metric(&r, "dml_server_forwarded_contributors_total"), 2);
	/* The same frame again: a resend, acknowledged, not applied. */
	agg_push(&r, first, 2, a, 0, NULL);
	ck_assert_double_eq(metric(&r, "dml_server_push_duplicates_total"), 1);
	/* Worker 1's push applied, worker 2's new; then a jump: nothing changes. */
	agg_push(&r, mixed, 2, b, DML_EPARTIAL, "1 applied here already");
	agg_push(&r, jump, 2, b, DML_EPARTIAL, "1 past the resend window");
	ck_assert_double_eq(metric(&r, "dml_server_pushes_partial_total"), 2);
	rows_are(&r, sum);
	/* Split by the aggregator: worker 2's new push alone is applied. */
	agg_push(&r, second, 1, b, 0, NULL);
	add(sum, b);
	rows_are(&r, sum);

	/* Refusals that change nothing. */
	agg_push(&r, unknown, 2, c, DML_EAGAIN, "worker 3 has not joined this server");
	agg_push(&r, stale, 2, c, DML_ESTATE, "worker 2 is incarnation 2222 here");
	agg_push(&r, twice, 2, c, DML_EINVAL, "worker 2 is named twice");
	agg_push(&r, NULL, 0, c, DML_EINVAL, "an aggregator names the workers");
	expect(r.agg, send_push(&r, r.agg, third, 2, 4, 0, c), DML_EINVAL, "not seq 4");
	ck_assert_int_eq(dml_test_raw_connect(dml_test_server_port(r.srv), &wfd), 0);
	dml_meta_free(raw_frame_handshake(r.env, wfd, DML__ROLE__WORKER, 7, 77, 0, 0));
	expect(wfd, send_push(&r, wfd, third, 2, 1, 0, c), DML_EROLE, "only an aggregator");
	close(wfd);
	rows_are(&r, sum);
	ck_assert_double_eq(metric(&r, "dml_server_pushes_forwarded_total"), 2);

	/* Worker 2's mark for seq 9 is only in a sequence-only record. */
	agg_push(&r, third, 2, c, 0, NULL);
	add(sum, c);
	rows_are(&r, sum);
	dml_test_server_kill(r.srv);
	close(r.agg);
	ck_assert_int_eq(dml_test_server_restart(r.srv), 0);
	/* The workers come back (their HELLO rejoins them) and read the log's rows. */
	rows_are(&r, sum);
	ck_assert_int_eq(dml_pull_range(r.w[1], 0, 0, KEYS, out, &h), 0);
	ck_assert_int_eq(dml_wait(r.w[1], h), 0);
	aggregator_connect(&r);
	agg_push(&r, third, 2, c, 0, NULL);
	rows_are(&r, sum);
	ck_assert_double_eq(metric(&r, "dml_server_push_duplicates_total"), 1);
	ck_assert_double_eq(metric(&r, "dml_server_pushes_forwarded_total"), 0);
	rig_down(&r);
}
END_TEST

/* Whether fd has bytes to read now. */
static int readable(int fd)
{
	struct pollfd p = { .fd = fd, .events = POLLIN };

	return poll(&p, 1, 0) == 1;
}

/* A dense PULL of all KEYS at clock, asked for worker. */
static uint64_t send_pull(struct rig *r, uint64_t clock, uint32_t worker)
{
	Dml__Meta m = DML__META__INIT;

	m.type = DML__MSG_TYPE__PULL;
	m.request_id = ++r->next_id;
	m.sender = AGG_ID;
	m.clock = clock;
	m.worker = worker;
	m.value_width = WIDTH;
	m.dense = 1;
	m.key_begin = 0;
	m.key_end = KEYS;
	raw_frame_send(r->agg, &m, NULL, 0);
	return m.request_id;
}

/* The reply to pull id: the rows are -sum. */
static void pulled(struct rig *r, uint64_t id, const float *sum)
{
	uint8_t *payload;
	Dml__Meta *m = raw_frame_read(r->agg, &payload);

	ck_assert_int_eq(m->type, DML__MSG_TYPE__PULL_REPLY);
	ck_assert_uint_eq(m->request_id, id);
	ck_assert_uint_eq(m->payload_bytes, N * sizeof(float));
	for (int i = 0; i < N; i++) {
		float v;

		memcpy(&v, payload + i * sizeof(float), sizeof(v));
		ck_assert_msg(v == -sum[i], "value %d: %g, want %g", i, v, -sum[i]);
	}
	free(payload);
	dml_meta_free(m);
}

START_TEST(test_forwarded_bsp)
{
	struct rig r;
	float a[N], zero[N] = { 0 };
	const struct contrib both[] = { { 1, INC1, 1 }, { 2, INC2, 1 } };
	uint64_t held;

	for (int i = 0; i < N; i++)
		a[i] = (float)(i + 3);
	rig_up(&r, 0);

	/* Acknowledged once logged, applied at the step of clock 0. */
	agg_push(&r, both, 2, a, 0, NULL);
	ck_assert_double_eq(metric(&r, "dml_server_pushes_deferred_total"), 1);
	ck_assert_double_eq(metric(&r, "dml_server_pushes_forwarded_total"), 1);
	pulled(&r, send_pull(&r, 0, 1), zero);
	/* Clock 1 waits for both workers to end clock 0, as a worker's pull would. */
	held = send_pull(&r, 1, 2);
	for (int i = 0; i < 10000 && metric(&r, "dml_server_pulls_held_total") < 1; i++)
		usleep(1000);
	ck_assert_double_eq(metric(&r, "dml_server_pulls_held_total"), 1);
	ck_assert(!readable(r.agg));
	ck_assert_int_eq(dml_clock(r.w[0]), 0);
	ck_assert_int_eq(dml_clock(r.w[1]), 0);
	pulled(&r, held, a);
	ck_assert_double_eq(metric(&r, "dml_server_bsp_steps_total"), 1);
	rig_down(&r);
}
END_TEST

/* The delta codecs test_delta_pulls runs with, and their dtypes. */
static const struct {
	const char *name;
	Dml__DType dtype;
} delta_codecs[] = { { "topk:0.25", DML__DTYPE__TOPK }, { "topk16:0.25", DML__DTYPE__TOPK16 } };
static size_t delta_at;

/*
 * A delta pull of the whole table in delta_codecs[delta_at] on fd naming
 * held; the reply's values decoded into out, whether it is a delta into
 * *delta; the version it brings back.
 */
static uint64_t pull(struct rig *r, int fd, uint64_t held, float *out, int *delta)
{
	Dml__Meta m = DML__META__INIT, *rep;
	struct dml_codec c;
	uint8_t *pl;
	uint64_t version;

	m.type = DML__MSG_TYPE__PULL;
	m.request_id = ++r->next_id;
	m.value_width = WIDTH;
	m.dense = 1;
	m.key_end = KEYS;
	m.delta_codec = (char *)delta_codecs[delta_at].name;
	m.held_version = held;
	raw_frame_send(fd, &m, NULL, 0);
	rep = raw_frame_read(fd, &pl);
	ck_assert_msg(rep->type == DML__MSG_TYPE__PULL_REPLY, "%s",
		      rep->error ? rep->error->message : "not a reply");
	ck_assert_uint_eq(rep->request_id, m.request_id);
	ck_assert_int_eq(rep->dtype, rep->delta ? delta_codecs[delta_at].dtype : DML__DTYPE__F32);
	ck_assert_int_eq(dml_dtype_codec(rep->dtype, &c), 0);
	ck_assert_int_eq(dml_codec_decode(&c, pl, rep->payload_bytes, N, out), 0);
	*delta = rep->delta;
	version = rep->held_version;
	ck_assert_uint_ne(version, 0);
	dml_meta_free(rep);
	free(pl);
	return version;
}

static void expect_values(const float *got, const float *want)
{
	for (int k = 0; k < N; k++)
		ck_assert_msg(got[k] == want[k], "value %d is %g, not %g", k, got[k], want[k]);
}

/* Worker 1 pushes v negated: sgd at lr 1 from zeros makes the rows +v. */
static void push_rows(struct rig *r, const float *v)
{
	float neg[N];
	dml_handle_t h;

	for (int i = 0; i < N; i++)
		neg[i] = -v[i];
	ck_assert_int_eq(dml_push_range(r->w[0], 0, 0, KEYS, neg, &h), 0);
	ck_assert_int_eq(dml_wait(r->w[0], h), 0);
}

START_TEST(test_delta_pulls)
{
	const float first[N] = { 1, 2, 3, 4, 5, 6, 7, 8 };
	const float change[N] = { 10, 1, 1, 1, 1, 1, 1, -20 };
	const float big_two[N] = { 10, 0, 0, 0, 0, 0, 0, -20 };
	const float now[N] = { 11, 3, 4, 5, 6, 7, 8, -12 };
	float got[N], held[N];
	uint64_t v1, v2, v3, v4;
	int delta, ones = 0, b;
	struct rig r;

	delta_at = (size_t)_i;
	rig_up(&r, -1);
	ck_assert_int_eq(dml_test_raw_connect(dml_test_server_port(r.srv), &b), 0);
	dml_meta_free(raw_frame_handshake(r.env, b, DML__ROLE__AGGREGATOR, AGG_ID + 1, 9, 0, 0));
	push_rows(&r, first);
	v1 = pull(&r, r.agg, 0, got, &delta);
	ck_assert_int_eq(delta, 0);
	expect_values(got, first);
	memcpy(held, got, sizeof(held));

	/* The change since v1, its two largest values only. */
	push_rows(&r, change);
	v2 = pull(&r, r.agg, v1, got, &delta);
	ck_assert_int_eq(delta, 1);
	ck_assert_uint_ne(v2, v1);
	expect_values(got, big_two);
	for (int k = 0; k < N; k++)
		held[k] += got[k];

	/* What that reply left out (six ones) comes next, two at a time. */
	v3 = pull(&r, r.agg, v2, got, &delta);
	ck_assert_int_eq(delta, 1);
	for (int k = 0; k < N; k++) {
		ck_assert(got[k] == 0 || (got[k] == 1 && k > 0 && k < N - 1));
		ones += got[k] == 1;
		held[k] += got[k];
	}
	ck_assert_int_eq(ones, 2);
	/* Four ones are still to come: the server's copy is what was sent. */
	ones = 0;
	for (int k = 0; k < N; k++) {
		ck_assert(now[k] - held[k] == 0 || now[k] - held[k] == 1);
		ones += now[k] - held[k] == 1;
	}
	ck_assert_int_eq(ones, 4);

	/* v2 again (as if v3's reply was lost): the values, whole. */
	v4 = pull(&r, r.agg, v2, got, &delta);
	ck_assert_int_eq(delta, 0);
	ck_assert_uint_ne(v4, v3);
	expect_values(got, now);

	/* Another puller naming a's version has no copy of its own yet. */
	(void)pull(&r, b, v4, got, &delta);
	ck_assert_int_eq(delta, 0);
	expect_values(got, now);

	ck_assert_double_eq(metric(&r, "dml_server_pulls_delta_total{reply=\"delta\"}"), 2);
	ck_assert_double_eq(metric(&r, "dml_server_pulls_delta_total{reply=\"full\"}"), 3);
	close(b);
	rig_down(&r);
}
END_TEST

static Suite *forwarded_suite(void)
{
	Suite *s = suite_create("forwarded");
	TCase *tc = tcase_create("forwarded");

	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_forwarded_pushes);
	tcase_add_test(tc, test_forwarded_bsp);
	tcase_add_loop_test(tc, test_delta_pulls, 0,
			    (int)(sizeof(delta_codecs) / sizeof(delta_codecs[0])));
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return dml_check_run(forwarded_suite());
}
