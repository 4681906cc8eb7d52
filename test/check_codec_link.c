/*
 * Codecs on the wire: a dml-server in zone B and libdml clients in zone A
 * (cross-zone links) or in no zone, as real processes on 127.0.0.1.
 *
 *   - the WELCOME names the server's zone and every codec it takes;
 *   - cross-zone pushes of integers travel as fp16 (the server's codec
 *     byte counters say half the floats' bytes) and sum exactly, dense and
 *     sparse, and a cross-zone pull (fp16 too) reads them back exactly;
 *   - error feedback: values no lossy codec holds exactly, pushed 256
 *     times, sum to within the residual of 256 times the values, for every
 *     lossy codec (fp16, bf16, int8, topk:0.25), dense and sparse, a key
 *     given twice in one push counting twice; read by a client of no zone
 *     (floats);
 *   - coded pushes applied but not acknowledged when their connection is
 *     cut are resent and acknowledged as duplicates, never applied twice;
 *   - every value pushed and pulled counts in its client's link class, as
 *     floats and as sent (fp16 across zones: half), and a lossy push of
 *     values fp16 cannot hold leaves a residual norm above 0 where a
 *     codec-none table's stays 0;
 *   - a hostile coded push (a count past the values, an index out of
 *     range, a NaN in fp16, a topk pull, a coded MIGRATE) gets an error
 *     naming the cause or loses its connection, and applies nothing.
 */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "proto/codec.h"
#include "proto/dml_error.h"
#include "proto/frame.h"
#include "proto/util.h"
#include "test/check_run.h"
#include "test/harness.h"
#include "test/raw_frame.h"
#include "worker/dml.h"

#define KEYS 64
#define WIDTH 3
#define PUSHES 256

static const char tables[] =
	"[table]\nid = 0\nkind = dense\nwidth = 3\nkeys = 64\noptimizer = add\n"
	"[table]\nid = 1\nkind = sparse\nwidth = 3\noptimizer = add\n";

struct rig {
	struct dml_test_env *env;
	struct dml_test_server *srv;
	uint16_t metrics;
};

static void rig_up(struct rig *r)
{
	struct dml_test_server_conf conf = { .tables = tables, .staleness = -1 };

	ck_assert_int_eq(dml_test_env_new(&r->env), 0);
	ck_assert_int_eq(dml_test_server_start_metered(r->env, &conf, "zone = B\n", &r->srv,
						       &r->metrics), 0);
}

static void rig_down(struct rig *r)
{
	ck_assert_int_eq(dml_test_server_stop(r->srv, DML_TEST_STOP_TIMEOUT_MS), 0);
	dml_test_env_free(r->env);
}

/* A client in zone (NULL: none) with the given push codec across zones. */
static dml_t *client(struct rig *r, uint32_t worker, const char *zone, const char *codec)
{
	dml_opts_t *o;
	dml_t *d;

	ck_assert_int_eq(dml_test_client_opts(r->env, &r->srv, 1, worker, &o), 0);
	if (zone)
		ck_assert_int_eq(dml_opts_set(o, "zone", zone), 0);
	if (codec)
		ck_assert_int_eq(dml_opts_set(o, "codec_cross_zone", codec), 0);
	ck_assert_int_eq(dml_connect(o, &d), 0);
	dml_opts_free(o);
	return d;
}

/* A request made with handle *h (read after the call made it) succeeded. */
static void ok(dml_t *d, int rc, const dml_handle_t *h)
{
	ck_assert_msg(rc == 0, "request: %s", dml_strerror(rc));
	rc = dml_wait(d, *h);
	ck_assert_msg(rc == 0, "wait: %s (%s)", dml_strerror(rc), dml_error_detail(d));
}

static double metric(struct rig *r, const char *name)
{
	double v = -1;

	ck_assert_int_eq(dml_test_metric(r->metrics, name, 10000, &v), 0);
	return v;
}

START_TEST(test_welcome_offers)
{
	struct rig r;
	int fd;
	Dml__Meta *w;
	uint32_t seen = 0;

	rig_up(&r);
	ck_assert_int_eq(dml_test_raw_connect(dml_test_server_port(r.srv), &fd), 0);
	w = raw_frame_handshake(r.env, fd, DML__ROLE__WORKER, 1, 7, 0, 0);
	ck_assert_str_eq(w->handshake->zone, "B");
	for (size_t i = 0; i < w->handshake->n_codecs; i++)
		seen |= 1u << w->handshake->codecs[i];
	ck_assert_uint_eq(seen, (1u << DML__DTYPE__F32) | (1u << DML__DTYPE__F16) |
				(1u << DML__DTYPE__BF16) | (1u << DML__DTYPE__INT8) |
				(1u << DML__DTYPE__TOPK) | (1u << DML__DTYPE__TOPK16));
	dml_meta_free(w);
	close(fd);
	rig_down(&r);
}
END_TEST

START_TEST(test_fp16_integers_exact)
{
	struct rig r;
	float vals[KEYS * WIDTH], out[KEYS * WIDTH], sp[4 * WIDTH], spo[4 * WIDTH];
	uint64_t keys[4] = { 3, 1ull << 60, 77, 3 };
	dml_handle_t h;
	dml_t *d;

	rig_up(&r);
	d = client(&r, 1, "A", NULL);          /* the default: fp16 across zones */
	for (int i = 0; i < KEYS * WIDTH; i++)
		vals[i] = (float)(i % 97) - 40.0f;
	for (int i = 0; i < 4 * WIDTH; i++)
		sp[i] = (float)(i + 1);
	for (int p = 0; p < 5; p++) {
		ok(d, dml_push_range(d, 0, 0, KEYS, vals, &h), &h);
		ok(d, dml_push(d, 1, keys, 4, sp, &h), &h);
	}
	ok(d, dml_pull_range(d, 0, 0, KEYS, out, &h), &h);
	for (int i = 0; i < KEYS * WIDTH; i++)
		ck_assert_float_eq(out[i], 5 * vals[i]);
	ok(d, dml_pull(d, 1, keys, 4, spo, &h), &h);
	for (int j = 0; j < WIDTH; j++) {
		ck_assert_float_eq(spo[j], 5 * (sp[j] + sp[3 * WIDTH + j]));
		ck_assert_float_eq(spo[WIDTH + j], 5 * sp[WIDTH + j]);
		ck_assert_float_eq(spo[3 * WIDTH + j], spo[j]);
	}
	/* 5 dense and 5 sparse pushes, 2 bytes a value; the pulls as well */
	ck_assert(metric(&r, "dml_server_codec_wire_bytes_total{dir=\"in\"}") ==
		  5 * 2 * (KEYS + 4) * WIDTH);
	ck_assert(metric(&r, "dml_server_codec_float_bytes_total{dir=\"in\"}") ==
		  5 * 4 * (KEYS + 4) * WIDTH);
	ck_assert(metric(&r, "dml_server_codec_wire_bytes_total{dir=\"out\"}") ==
		  2 * (KEYS + 4) * WIDTH);
	dml_close(d);
	rig_down(&r);
}
END_TEST

/*
 * Column j of every row pushes (1 + j)(1 + 2^-12), which none of the lossy
 * codecs holds exactly: fp16 and bf16 round it to 1 + j, int8 to a step of
 * 3/127 of the block's largest value, topk:0.25 (and topk16:0.25, in fp16)
 * sends a quarter of the values each time. Without error feedback the sums would be short by at
 * least PUSHES/4096 (1/16) a unit of value; with it, by what is left in the
 * residual (below one step of the codec; topk: about 1/F pushes) plus
 * float rounding of the sums.
 */
static const char *const lossy[] = { "fp16", "bf16", "int8", "topk:0.25", "topk16:0.25" };
static const double tolerance[] = { 0.03, 0.03, 0.03, 15, 15 };

START_TEST(test_error_feedback_sums)
{
	const double x = 1.0 + 1.0 / 4096.0;
	float vals[KEYS * WIDTH], out[KEYS * WIDTH], sp[3 * WIDTH], spo[2 * WIDTH];
	uint64_t keys[3] = { 11, 12, 11 };
	struct rig r;
	dml_handle_t h;
	dml_t *d, *reader;

	rig_up(&r);
	d = client(&r, 1, "A", lossy[_i]);
	reader = client(&r, 0, NULL, NULL);   /* no zone: floats */
	for (int i = 0; i < KEYS * WIDTH; i++)
		vals[i] = (float)(x * (1 + i % WIDTH));
	for (int i = 0; i < 3 * WIDTH; i++)
		sp[i] = (float)(x * (1 + i % WIDTH));
	for (int p = 0; p < PUSHES; p++) {
		ok(d, dml_push_range(d, 0, 0, KEYS, vals, &h), &h);
		ok(d, dml_push(d, 1, keys, 3, sp, &h), &h);
	}
	ok(reader, dml_pull_range(reader, 0, 0, KEYS, out, &h), &h);
	ok(reader, dml_pull(reader, 1, keys, 2, spo, &h), &h);
	for (int i = 0; i < KEYS * WIDTH; i++)
		ck_assert_msg(fabs(out[i] - PUSHES * vals[i]) < tolerance[_i],
			      "%s: key %d: %.6f, want %.6f", lossy[_i], i / WIDTH, out[i],
			      PUSHES * vals[i]);
	/* key 11 comes twice in each push: both count */
	for (int j = 0; j < WIDTH; j++) {
		ck_assert_msg(fabs(spo[j] - 2 * PUSHES * sp[j]) < 2 * tolerance[_i],
			      "%s: sparse key 11: %.6f", lossy[_i], spo[j]);
		ck_assert_msg(fabs(spo[WIDTH + j] - PUSHES * sp[j]) < tolerance[_i],
			      "%s: sparse key 12: %.6f", lossy[_i], spo[WIDTH + j]);
	}
	ck_assert(metric(&r, "dml_server_codec_wire_bytes_total{dir=\"in\"}") > 0);
	dml_close(reader);
	dml_close(d);
	rig_down(&r);
}
END_TEST

/* Wait until the server counted want pushes (applied or not). */
static void wait_pushes(struct rig *r, double want)
{
	for (int t = 0; t < 3000; t++) {
		if (metric(r, "dml_server_requests_total{type=\"push\"}") >= want)
			return;
		usleep(10000);
	}
	ck_abort_msg("the server never counted %g pushes", want);
}

/*
 * Coded pushes stay exactly-once when their connection dies with their
 * acknowledgements: the server applies a window of int8 pushes whose ACKs
 * the proxy holds, the connection is cut, libdml resends them (the same
 * bytes: the residual is not charged twice) and the server acknowledges
 * them as duplicates. The sums are those of the pushes made, to the
 * residual.
 */
START_TEST(test_cut_resends_coded)
{
	const double x = 1.0 + 1.0 / 4096.0;
	enum { ROUNDS = 4, WINDOW = 16 };
	float vals[KEYS * WIDTH], out[KEYS * WIDTH];
	struct dml_test_proxy *proxy;
	struct rig r;
	dml_handle_t h;
	dml_opts_t *o;
	uint16_t port;
	dml_t *d, *reader;
	double dups;

	rig_up(&r);
	ck_assert_int_eq(dml_test_proxy_start(r.env, dml_test_server_port(r.srv), &proxy), 0);
	port = dml_test_proxy_port(proxy);
	ck_assert_int_eq(dml_test_client_opts_ports(r.env, &port, 1, 1, &o), 0);
	ck_assert_int_eq(dml_opts_set(o, "zone", "A"), 0);
	ck_assert_int_eq(dml_opts_set(o, "codec_cross_zone", "int8"), 0);
	ck_assert_int_eq(dml_connect(o, &d), 0);
	dml_opts_free(o);
	reader = client(&r, 0, NULL, NULL);
	for (int i = 0; i < KEYS * WIDTH; i++)
		vals[i] = (float)(x * (1 + i % WIDTH));
	for (int round = 0; round < ROUNDS; round++) {
		for (int p = 0; p < WINDOW; p++)
			ck_assert_int_eq(dml_push_range(d, 0, 0, KEYS, vals, &h), 0);
		ck_assert_int_eq(dml_wait_all(d), 0);
		ck_assert_int_eq(dml_test_proxy_hold(proxy), 0);
		for (int p = 0; p < WINDOW; p++)
			ck_assert_int_eq(dml_push_range(d, 0, 0, KEYS, vals, &h), 0);
		/* each round before this one counted its resends too */
		wait_pushes(&r, (3 * round + 2) * WINDOW);
		ck_assert_int_eq(dml_test_proxy_cut(proxy, NULL), 0);
		ck_assert_msg(dml_wait_all(d) == 0, "%s", dml_error_detail(d));
	}
	dups = metric(&r, "dml_server_push_duplicates_total");
	ck_assert_msg(dups >= ROUNDS * WINDOW, "%g duplicates", dups);
	ok(reader, dml_pull_range(reader, 0, 0, KEYS, out, &h), &h);
	for (int i = 0; i < KEYS * WIDTH; i++)
		ck_assert_msg(fabs(out[i] - 2 * ROUNDS * WINDOW * vals[i]) < 0.03,
			      "key %d: %.6f, want %.6f", i / WIDTH, out[i],
			      2 * ROUNDS * WINDOW * vals[i]);
	dml_close(reader);
	dml_close(d);
	rig_down(&r);
}
END_TEST

/* The client's counters of one link class: {as floats, as sent}. */
static void link_bytes(dml_t *d, int link_class, uint64_t want_floats, uint64_t want_sent)
{
	uint64_t floats = 7, sent = 7;

	ck_assert_int_eq(dml_link_bytes(d, link_class, &floats, &sent), 0);
	ck_assert_msg(floats == want_floats && sent == want_sent,
		      "class %d: %llu as floats, %llu sent; want %llu, %llu", link_class,
		      (unsigned long long)floats, (unsigned long long)sent,
		      (unsigned long long)want_floats, (unsigned long long)want_sent);
}

static double residual_norm(dml_t *d, uint32_t table)
{
	double norm = -1;

	ck_assert_int_eq(dml_residual_norm(d, table, &norm), 0);
	return norm;
}

/*
 * Every value pushed and pulled counts in its link class, as floats and as
 * sent: across zones (A to B, fp16 both ways by default) half the floats'
 * bytes, within zone B (no codec by default) as many; keys do not count.
 * One push of 1 + 2^-12 times 1, 2, 3, which fp16 cannot hold, leaves a
 * residual; a codec-none table, and one never pushed, have none.
 */
START_TEST(test_link_bytes_and_residuals)
{
	const double x = 1.0 + 1.0 / 4096.0;
	float vals[KEYS * WIDTH], out[KEYS * WIDTH];
	uint64_t keys[4] = { 5, 6, 7, 5 }, n = KEYS * WIDTH, sn = 4 * WIDTH, f, s;
	struct rig r;
	dml_handle_t h;
	dml_t *cross, *near, *nowhere;

	rig_up(&r);
	cross = client(&r, 1, "A", NULL);
	near = client(&r, 2, "B", NULL);
	nowhere = client(&r, 0, NULL, NULL);
	for (int i = 0; i < KEYS * WIDTH; i++)
		vals[i] = (float)(x * (1 + i % WIDTH));
	link_bytes(cross, DML_LINK_CROSS_ZONE, 0, 0);
	ck_assert(residual_norm(cross, 0) == 0);
	ok(cross, dml_push_range(cross, 0, 0, KEYS, vals, &h), &h);
	ok(cross, dml_push(cross, 1, keys, 4, vals, &h), &h);
	link_bytes(cross, DML_LINK_CROSS_ZONE, 4 * (n + sn), 2 * (n + sn));
	ok(cross, dml_pull_range(cross, 0, 0, KEYS, out, &h), &h);
	link_bytes(cross, DML_LINK_CROSS_ZONE, 4 * (2 * n + sn), 2 * (2 * n + sn));
	link_bytes(cross, DML_LINK_WITHIN_ZONE, 0, 0);
	/* fp16 rounds 1 + 2^-12 to 1: at most half a step (2^-11 at 1, 2^-9
	 * at 2 and 3) of every value stays behind, and some of it does */
	ck_assert_msg(residual_norm(cross, 0) > 0 && residual_norm(cross, 0) < sqrt(n) / 1024,
		      "dense residual %g", residual_norm(cross, 0));
	ck_assert_msg(residual_norm(cross, 1) > 0, "sparse residual %g", residual_norm(cross, 1));
	ck_assert(residual_norm(cross, 7) == 0);

	ok(near, dml_push_range(near, 0, 0, KEYS, vals, &h), &h);
	ok(near, dml_pull(near, 1, keys, 4, out, &h), &h);
	link_bytes(near, DML_LINK_WITHIN_ZONE, 4 * (n + sn), 4 * (n + sn));
	link_bytes(near, DML_LINK_CROSS_ZONE, 0, 0);
	ck_assert(residual_norm(near, 0) == 0);
	ck_assert(residual_norm(near, 1) == 0);
	/* a client of no zone is within every zone */
	ok(nowhere, dml_pull_range(nowhere, 0, 0, 2, out, &h), &h);
	link_bytes(nowhere, DML_LINK_WITHIN_ZONE, 4 * 2 * WIDTH, 4 * 2 * WIDTH);
	ck_assert_int_eq(dml_link_bytes(cross, 2, &f, &s), DML_EINVAL);
	ck_assert_int_eq(dml_link_bytes(cross, DML_LINK_CROSS_ZONE, NULL, &s), DML_EINVAL);
	ck_assert_int_eq(dml_residual_norm(cross, 0, NULL), DML_EINVAL);
	dml_close(nowhere);
	dml_close(near);
	dml_close(cross);
	rig_down(&r);
}
END_TEST

/* A coded dense PUSH of table 0 keys [0, 4) with these value bytes. */
static void send_coded(int fd, uint64_t id, Dml__DType dtype, const void *bytes,
		       uint32_t len)
{
	Dml__Meta m = DML__META__INIT;

	m.type = DML__MSG_TYPE__PUSH;
	m.request_id = id;
	m.sender = 1;
	m.seq = id;
	m.dtype = dtype;
	m.value_width = WIDTH;
	m.dense = 1;
	m.key_begin = 0;
	m.key_end = 4;
	raw_frame_send(fd, &m, bytes, len);
}

/* The answer to request id: an ERROR with code and a message holding want. */
static void expect_error(int fd, uint64_t id, int code, const char *want)
{
	uint8_t *payload;
	Dml__Meta *m = raw_frame_read(fd, &payload);

	ck_assert_int_eq(m->type, DML__MSG_TYPE__ERROR);
	ck_assert_uint_eq(m->request_id, id);
	ck_assert_int_eq(m->error->code, code);
	ck_assert_msg(strstr(m->error->message, want), "'%s' lacks '%s'", m->error->message,
		      want);
	free(payload);
	dml_meta_free(m);
}

START_TEST(test_hostile_coded_pushes)
{
	struct rig r;
	uint8_t buf[256];
	float out[KEYS * WIDTH];
	dml_handle_t h;
	dml_t *reader;
	int fd;

	rig_up(&r);
	ck_assert_int_eq(dml_test_raw_connect(dml_test_server_port(r.srv), &fd), 0);
	dml_meta_free(raw_frame_handshake(r.env, fd, DML__ROLE__WORKER, 1, 7, 0, 0));
	/* topk: a count of 2 pairs, the second's index 12 past 4 x 3 values */
	memset(buf, 0, sizeof(buf));
	dml_store_le32(buf, 2);
	dml_store_le32(buf + 4, 0);
	dml_store_le32(buf + 12, 12);
	send_coded(fd, 1, DML__DTYPE__TOPK, buf, 4 + 2 * 8);
	expect_error(fd, 1, DML_ESHAPE, "not a valid topk");
	/* fp16: a NaN among 12 values */
	memset(buf, 0, sizeof(buf));
	dml_store_le16(buf + 10, 0x7e00);
	send_coded(fd, 2, DML__DTYPE__F16, buf, 24);
	expect_error(fd, 2, DML_ESHAPE, "not a valid fp16");
	/* int8: a scale that is infinite */
	memset(buf, 0, sizeof(buf));
	dml_store_le32(buf, 0x7f800000u);
	send_coded(fd, 3, DML__DTYPE__INT8, buf, 4 + 12);
	expect_error(fd, 3, DML_ESHAPE, "not a valid int8");
	/* fp16 one byte short: not even a frame (the connection goes) */
	send_coded(fd, 4, DML__DTYPE__F16, buf, 23);
	ck_assert_int_eq(dml_test_raw_wait_closed(fd, 10000), 0);
	close(fd);
	ck_assert(metric(&r, "dml_server_pushes_bad_coding_total") == 3);
	/* Nothing of it was applied. */
	reader = client(&r, 0, NULL, NULL);
	ok(reader, dml_pull_range(reader, 0, 0, KEYS, out, &h), &h);
	for (int i = 0; i < KEYS * WIDTH; i++)
		ck_assert_float_eq(out[i], 0.0f);
	dml_close(reader);
	rig_down(&r);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("codec_link");
	TCase *tc = tcase_create("link");

	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_welcome_offers);
	tcase_add_test(tc, test_fp16_integers_exact);
	tcase_add_loop_test(tc, test_error_feedback_sums, 0, (int)DML_ARRAY_LEN(lossy));
	tcase_add_test(tc, test_cut_resends_coded);
	tcase_add_test(tc, test_hostile_coded_pushes);
	tcase_add_test(tc, test_link_bytes_and_residuals);
	suite_add_tcase(s, tc);
	return dml_check_run(s);
}
