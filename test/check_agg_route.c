/*
 * libdml's zone aggregator path, before any dml-aggregator: a real
 * dml-server as the owner and, as the aggregator, nothing or a stand-in
 * run on an event loop of this test (it authenticates workers as an
 * aggregator would, records what they send and never answers).
 *
 *   - the aggregator and aggregator_timeout_ms options: good values taken,
 *     bad ones refused with a message naming the option, from dml_opts_set
 *     and from a file;
 *   - no aggregator listening, or one that never finishes the handshake:
 *     pushes and pulls go straight to the server and sum exactly;
 *   - a peer there whose handshake names another role (a server) is never
 *     used: it gets no request, the owner sums exactly;
 *   - through the stand-in: pushes and pulls carry Meta.owner (the
 *     server's host:port) and the owner's sequence numbers 1, 2, 3, pushes
 *     Meta.forward_codec (the worker's codec for the owner's link); the
 *     stand-in gets no CLOCK; when it dies, after aggregator_timeout_ms
 *     every request on it goes to the owner with its seq and is applied
 *     once; and the worker's CLOCK reaches the owner only after those
 *     pushes (a BSP pull of another worker, answered once that CLOCK
 *     arrives, already sees them); later pushes go straight on;
 *   - through a real dml-aggregator: two BSP workers' pushes and pulls all
 *     go through it (its counters) and sum exactly; killed with pushes in
 *     flight, they reach the owner straight and count once.
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <event2/event.h>
#include <event2/listener.h>

#include "proto/auth.h"
#include "proto/conn.h"
#include "proto/dml_error.h"
#include "proto/listen.h"
#include "proto/util.h"
#include "test/check_run.h"
#include "test/harness.h"
#include "worker/dml.h"

#define KEYS 8
#define WAIT_MS 20000

static const char tables[] =
	"[table]\nid = 0\nkind = dense\nwidth = 1\nkeys = 8\noptimizer = add\n";

/* ---- what libdml logs ------------------------------------------------------ */

static char logged[16384];

static void sink(int level, const char *msg, void *arg)
{
	size_t n = strlen(logged);

	(void)level;
	(void)arg;
	if (n + strlen(msg) + 2 < sizeof(logged))
		snprintf(logged + n, sizeof(logged) - n, "%s\n", msg);
}

static void log_capture(void)
{
	logged[0] = '\0';
	ck_assert_int_eq(dml_set_log(sink, NULL, DML_LEVEL_INFO), 0);
}

/* ---- the stand-in aggregator ------------------------------------------------ */

#define FAKE_CONNS 16
#define FAKE_FRAMES 64

struct fake_frame {
	int type;
	char owner[64];
	char forward_codec[16];
	uint64_t seq;
};

struct fake {
	struct event_base *base;
	struct dml_listener *listener;
	uint16_t port;
	struct dml_conn_conf cc;
	uint8_t *secret;
	size_t secret_len;
	struct dml_conn *conns[FAKE_CONNS];
	size_t ready;
	struct fake_frame frames[FAKE_FRAMES];
	size_t nframes;
};

static void fake_on_ready(struct dml_conn *c, void *arg)
{
	((struct fake *)arg)->ready++;
}

/* Every request is recorded and held: nothing is ever answered. */
static int fake_on_frame(struct dml_conn *c, const Dml__Meta *m, const uint8_t *payload,
			 size_t len, void *arg)
{
	struct fake *f = arg;
	struct fake_frame *fr;

	if (m->type == DML__MSG_TYPE__HEARTBEAT || f->nframes == FAKE_FRAMES)
		return 0;
	fr = &f->frames[f->nframes++];
	fr->type = m->type;
	fr->seq = m->seq;
	snprintf(fr->owner, sizeof(fr->owner), "%s", m->owner ? m->owner : "");
	snprintf(fr->forward_codec, sizeof(fr->forward_codec), "%s",
		 m->forward_codec ? m->forward_codec : "");
	return 0;
}

static void fake_on_close(struct dml_conn *c, int err, void *arg)
{
	struct fake *f = arg;

	for (size_t i = 0; i < FAKE_CONNS; i++)
		if (f->conns[i] == c)
			f->conns[i] = NULL;
}

static const struct dml_conn_ops fake_ops = {
	.on_ready = fake_on_ready,
	.on_frame = fake_on_frame,
	.on_close = fake_on_close,
};

static void fake_accept(struct evconnlistener *l, evutil_socket_t fd, struct sockaddr *sa,
			int len, void *arg)
{
	struct fake *f = arg;
	struct dml_conn *c;

	if (dml_conn_accept(f->base, fd, &f->cc, &fake_ops, f, &c) != 0)
		return;
	for (size_t i = 0; i < FAKE_CONNS; i++)
		if (!f->conns[i]) {
			f->conns[i] = c;
			return;
		}
	dml_conn_abort(c, DML_ECLOSED);
}

/* Listening; its loop turns only in fake_turn (never: a silent listener). */
static void fake_start(struct dml_test_env *env, struct fake *f, uint32_t role)
{
	memset(f, 0, sizeof(*f));
	f->base = event_base_new();
	ck_assert(f->base != NULL);
	ck_assert_int_eq(dml_secret_load(dml_test_env_secret(env), &f->secret,
					 &f->secret_len), 0);
	dml_conn_conf_default(&f->cc);
	f->cc.secret = f->secret;
	f->cc.secret_len = f->secret_len;
	f->cc.cluster = "dml";
	f->cc.role = role;
	f->cc.node_id = 900;
	f->cc.incarnation = 1;
	ck_assert_int_eq(dml_listen_tcp(f->base, "127.0.0.1:0", fake_accept, f, &f->listener,
					&f->port), 0);
}

static void fake_turn(struct fake *f)
{
	event_base_loop(f->base, EVLOOP_NONBLOCK);
}

/* Gone, as a killed process: listener closed, connections cut. */
static void fake_kill(struct fake *f)
{
	if (f->listener)
		dml_listener_free(f->listener);
	f->listener = NULL;
	for (size_t i = 0; i < FAKE_CONNS; i++)
		if (f->conns[i])
			dml_conn_abort(f->conns[i], DML_ECLOSED);
	for (int i = 0; i < 100; i++)
		fake_turn(f);
}

static void fake_free(struct fake *f)
{
	fake_kill(f);
	event_base_free(f->base);
	dml_secret_free(f->secret, f->secret_len);
}

/* Turn the stand-in's loop and d's by turns until done(f, d), or fail. */
static void turn_until(struct fake *f, dml_t *d, int (*done)(struct fake *, dml_t *),
		       const char *what)
{
	uint64_t deadline = dml_now_ns() + WAIT_MS * 1000000ull;

	while (!done(f, d)) {
		ck_assert_msg(dml_now_ns() < deadline, "waited %d ms for %s", WAIT_MS, what);
		fake_turn(f);
		ck_assert_int_eq(dml_progress(d, 1), 0);
	}
}

static int usable(struct fake *f, dml_t *d)
{
	return dml_aggregator_usable(d);
}

static int refused(struct fake *f, dml_t *d)
{
	return strstr(logged, "not an aggregator") != NULL;
}

static int four_frames(struct fake *f, dml_t *d)
{
	return f->nframes >= 4;
}

/* ---- the cluster ------------------------------------------------------------- */

struct rig {
	struct dml_test_env *env;
	struct dml_test_server *srv;
};

static void rig_up(struct rig *r, int64_t staleness, uint32_t workers)
{
	struct dml_test_server_conf conf = { .tables = tables, .staleness = staleness,
					     .workers = workers };

	ck_assert_int_eq(dml_test_env_new(&r->env), 0);
	ck_assert_int_eq(dml_test_server_start(r->env, &conf, &r->srv), 0);
}

static void rig_down(struct rig *r)
{
	ck_assert_int_eq(dml_test_server_stop(r->srv, DML_TEST_STOP_TIMEOUT_MS), 0);
	dml_test_env_free(r->env);
}

/* A worker of the rig's server whose aggregator is 127.0.0.1:agg_port,
 * pushing in codec (NULL: floats). */
static dml_t *worker(struct rig *r, uint32_t id, uint16_t agg_port, dml_t *share,
		     const char *codec)
{
	char addr[32];
	dml_opts_t *o;
	dml_t *d;

	ck_assert_int_eq(dml_test_client_opts(r->env, &r->srv, 1, id, &o), 0);
	if (agg_port) {
		snprintf(addr, sizeof(addr), "127.0.0.1:%u", agg_port);
		ck_assert_int_eq(dml_opts_set(o, "aggregator", addr), 0);
		ck_assert_int_eq(dml_opts_set(o, "aggregator_timeout_ms", "1000"), 0);
	}
	if (codec)
		ck_assert_int_eq(dml_opts_set(o, "codec", codec), 0);
	ck_assert_int_eq(dml_connect_shared(o, share, &d), 0);
	dml_opts_free(o);
	return d;
}

static void wait_ok(dml_t *d, dml_handle_t h)
{
	int rc = dml_wait(d, h);

	ck_assert_msg(rc == 0, "wait: %s (%s)", dml_strerror(rc), dml_error_detail(d));
}

static void push_ones(dml_t *d, dml_handle_t *h)
{
	static const float ones[KEYS] = { 1, 1, 1, 1, 1, 1, 1, 1 };

	ck_assert_int_eq(dml_push_range(d, 0, 0, KEYS, ones, h), 0);
}

/* Every key holds want, as a control client reads it from the server. */
static void expect_sum(struct rig *r, float want)
{
	float out[KEYS];
	dml_handle_t h;
	dml_t *reader;

	ck_assert_int_eq(dml_test_client_new(r->env, &r->srv, 1, 0, &reader), 0);
	ck_assert_int_eq(dml_pull_range(reader, 0, 0, KEYS, out, &h), 0);
	wait_ok(reader, h);
	for (int k = 0; k < KEYS; k++)
		ck_assert_msg(out[k] == want, "key %d holds %g, not %g", k, out[k], want);
	dml_close(reader);
}

/*
 * n pushes (each followed by a clock) all reach the server straight, none
 * the aggregator f, which is unusable; then d, f and the rig go.
 */
static void pushes_go_direct(struct rig *r, struct fake *f, dml_t *d, int n)
{
	dml_handle_t h[8];

	for (int i = 0; i < n; i++) {
		push_ones(d, &h[i]);
		ck_assert_int_eq(dml_clock(d), 0);
	}
	for (int i = 0; i < n; i++)
		wait_ok(d, h[i]);
	ck_assert_int_eq(dml_aggregator_usable(d), 0);
	ck_assert_uint_eq(f->nframes, 0);
	dml_close(d);
	expect_sum(r, (float)n);
	fake_free(f);
	rig_down(r);
}

/* ---- tests ----------------------------------------------------------------- */

START_TEST(test_options)
{
	char dir[] = "/tmp/dml-agg-optsXXXXXX", path[64], err[512] = "";
	dml_opts_t *o;
	FILE *fp;

	log_capture();
	ck_assert_int_eq(dml_opts_new(&o), 0);
	ck_assert_int_eq(dml_opts_set(o, "aggregator", "127.0.0.1:7100"), 0);
	ck_assert_int_eq(dml_opts_set(o, "aggregator", "agg.zone-a:7100"), 0);
	ck_assert_int_eq(dml_opts_set(o, "aggregator", ""), 0);
	ck_assert_int_eq(dml_opts_set(o, "aggregator_timeout_ms", "250"), 0);
	ck_assert_int_eq(dml_opts_set(o, "aggregator", "127.0.0.1"), DML_ECONF);
	ck_assert_ptr_nonnull(strstr(logged, "aggregator"));
	logged[0] = '\0';
	ck_assert_int_eq(dml_opts_set(o, "aggregator", "127.0.0.1:0"), DML_ECONF);
	ck_assert_ptr_nonnull(strstr(logged, "aggregator"));
	logged[0] = '\0';
	ck_assert_int_eq(dml_opts_set(o, "aggregator_timeout_ms", "0"), DML_ECONF);
	ck_assert_ptr_nonnull(strstr(logged, "aggregator_timeout_ms"));
	ck_assert_int_eq(dml_opts_set(o, "aggregator_timeout_ms", "soon"), DML_ECONF);

	ck_assert_ptr_nonnull(mkdtemp(dir));
	snprintf(path, sizeof(path), "%s/client.conf", dir);
	fp = fopen(path, "w");
	ck_assert_ptr_nonnull(fp);
	fputs("[client]\nservers = 127.0.0.1:7001\naggregator = nowhere\n", fp);
	fclose(fp);
	ck_assert_int_eq(dml_opts_load(o, path, err, sizeof(err)), DML_ECONF);
	ck_assert_msg(strstr(err, "aggregator") != NULL, "error: %s", err);
	fp = fopen(path, "w");
	ck_assert_ptr_nonnull(fp);
	fputs("[client]\nservers = 127.0.0.1:7001\naggregator = 127.0.0.1:7100\n"
	      "aggregator_timeout_ms = 500\n", fp);
	fclose(fp);
	ck_assert_msg(dml_opts_load(o, path, err, sizeof(err)) == 0, "error: %s", err);
	unlink(path);
	rmdir(dir);
	dml_opts_free(o);
}
END_TEST

/*
 * _i 0: nothing listens where the aggregator should be; 1: a listener
 * that never answers the handshake. Everything goes straight, exactly.
 */
START_TEST(test_no_aggregator_goes_direct)
{
	struct rig r;
	struct fake f;
	uint16_t port;
	dml_t *d;

	rig_up(&r, -1, 0);
	fake_start(r.env, &f, DML__ROLE__AGGREGATOR);
	port = f.port;
	if (_i == 0)
		fake_kill(&f);      /* the port is closed again */
	d = worker(&r, 1, port, NULL, NULL);
	pushes_go_direct(&r, &f, d, 5);
}
END_TEST

START_TEST(test_not_an_aggregator_unused)
{
	struct rig r;
	struct fake f;
	dml_t *d;

	log_capture();
	rig_up(&r, -1, 0);
	fake_start(r.env, &f, DML__ROLE__SERVER);
	d = worker(&r, 1, f.port, NULL, NULL);
	turn_until(&f, d, refused, "the role refusal");
	pushes_go_direct(&r, &f, d, 3);
}
END_TEST

START_TEST(test_through_then_fallback)
{
	struct rig r;
	struct fake f;
	dml_handle_t h[3], hp, h2, h4;
	float out1[KEYS], out2[KEYS];
	char owner[64];
	dml_t *w1, *w2;

	log_capture();
	rig_up(&r, 0, 2);     /* BSP, two workers */
	fake_start(r.env, &f, DML__ROLE__AGGREGATOR);
	w1 = worker(&r, 1, f.port, NULL, "fp16");
	w2 = worker(&r, 2, 0, w1, NULL);    /* one loop: w1's waits turn w2's links too */
	turn_until(&f, w1, usable, "the aggregator link");

	/* Three pushes and a pull, all held by the stand-in. */
	for (int i = 0; i < 3; i++)
		push_ones(w1, &h[i]);
	ck_assert_int_eq(dml_clock(w1), 0);
	ck_assert_int_eq(dml_pull_range(w1, 0, 0, KEYS, out1, &hp), 0);
	turn_until(&f, w1, four_frames, "four requests at the aggregator");
	snprintf(owner, sizeof(owner), "127.0.0.1:%u", dml_test_server_port(r.srv));
	for (int i = 0; i < 4; i++) {
		ck_assert_int_eq(f.frames[i].type, i < 3 ? DML__MSG_TYPE__PUSH
					       : DML__MSG_TYPE__PULL);
		ck_assert_str_eq(f.frames[i].owner, owner);
		/* The owner's link takes fp16: the aggregator is to sum into it. */
		ck_assert_str_eq(f.frames[i].forward_codec, i < 3 ? "fp16" : "");
		if (i < 3)
			ck_assert_uint_eq(f.frames[i].seq, i + 1);
	}
	ck_assert_uint_eq(f.nframes, 4);    /* and no CLOCK */

	/* Worker 2 at clock 1: its BSP pull waits for worker 1's CLOCK. */
	ck_assert_int_eq(dml_clock(w2), 0);
	ck_assert_int_eq(dml_pull_range(w2, 0, 0, KEYS, out2, &h2), 0);

	fake_kill(&f);
	for (int i = 0; i < 3; i++)
		wait_ok(w1, h[i]);
	wait_ok(w1, hp);
	wait_ok(w2, h2);
	ck_assert_ptr_nonnull(strstr(logged, "go straight to their servers"));
	for (int k = 0; k < KEYS; k++) {
		ck_assert_msg(out1[k] == 3, "worker 1 pulled %g at key %d", out1[k], k);
		ck_assert_msg(out2[k] == 3, "worker 2 pulled %g at key %d (CLOCK before pushes?)",
			      out2[k], k);
	}

	/* Later pushes go straight on, numbered after the ones that fell back
	 * (a BSP step takes them: worker 2's pull at clock 2 sees them). */
	push_ones(w1, &h4);
	wait_ok(w1, h4);
	ck_assert_int_eq(dml_aggregator_usable(w1), 0);
	ck_assert_int_eq(dml_clock(w1), 0);
	ck_assert_int_eq(dml_clock(w2), 0);
	ck_assert_int_eq(dml_pull_range(w2, 0, 0, KEYS, out2, &h2), 0);
	wait_ok(w2, h2);
	for (int k = 0; k < KEYS; k++)
		ck_assert_msg(out2[k] == 4, "worker 2 pulled %g at key %d", out2[k], k);
	dml_close(w2);
	dml_close(w1);
	fake_free(&f);
	rig_down(&r);
}
END_TEST

/* An aggregator metric, read until it is at least want. */
static double agg_metric_wait(uint16_t port, const char *name, double want)
{
	uint64_t deadline = dml_now_ns() + WAIT_MS * 1000000ull;
	double v = -1;

	for (;;) {
		ck_assert_int_eq(dml_test_metric(port, name, WAIT_MS, &v), 0);
		if (v >= want || dml_now_ns() > deadline)
			return v;
		usleep(10000);
	}
}

/* Both workers push ones and clock; worker 1 pulls at the new clock. */
static void bsp_round(dml_t *w[2], float want)
{
	dml_handle_t h[2], hp;
	float out[KEYS];

	for (int i = 0; i < 2; i++)
		push_ones(w[i], &h[i]);
	for (int i = 0; i < 2; i++)
		ck_assert_int_eq(dml_clock(w[i]), 0);
	ck_assert_int_eq(dml_pull_range(w[0], 0, 0, KEYS, out, &hp), 0);
	for (int i = 0; i < 2; i++)
		wait_ok(w[i], h[i]);
	wait_ok(w[0], hp);
	for (int k = 0; k < KEYS; k++)
		ck_assert_msg(out[k] == want, "key %d: pulled %g, not %g", k, out[k], want);
}

START_TEST(test_real_aggregator)
{
	struct dml_test_server *agg;
	char servers[32], extra[4200], *port_file = NULL;
	uint16_t metrics;
	struct rig r;
	dml_t *w[2];
	uint64_t deadline;
	int rounds = 4;

	rig_up(&r, 0, 2);
	snprintf(servers, sizeof(servers), "127.0.0.1:%u", dml_test_server_port(r.srv));
	ck_assert_int_eq(dml_test_env_write(r.env, "agg-metrics.port", "", 0600, &port_file), 0);
	snprintf(extra, sizeof(extra), "metrics_listen = 127.0.0.1:0\nmetrics_port_file = %s\n",
		 port_file);
	ck_assert_int_eq(dml_test_aggregator_start(r.env, &(struct dml_test_agg_conf){
				.servers = servers, .agg_extra = extra }, &agg), 0);
	ck_assert_int_eq(dml_test_port_file_read(port_file, &metrics), 0);
	free(port_file);
	ck_assert(agg_metric_wait(metrics, "dml_aggregator_owners_connected", 1) == 1);
	w[0] = worker(&r, 1, dml_test_server_port(agg), NULL, NULL);
	w[1] = worker(&r, 2, dml_test_server_port(agg), w[0], NULL);
	deadline = dml_now_ns() + WAIT_MS * 1000000ull;
	while (!dml_aggregator_usable(w[0]) || !dml_aggregator_usable(w[1])) {
		ck_assert_msg(dml_now_ns() < deadline, "the aggregator links never came up");
		ck_assert_int_eq(dml_progress(w[0], 10), 0);
	}
	for (int c = 1; c <= rounds; c++)
		bsp_round(w, 2.0f * c);
	ck_assert(agg_metric_wait(metrics, "dml_aggregator_pushes_in_total", 2 * rounds) ==
		  2 * rounds);
	ck_assert(agg_metric_wait(metrics, "dml_aggregator_pulls_in_total", rounds) == rounds);

	/* Worker 1's push waits in the aggregator for worker 2's: its CLOCK
	 * goes through the aggregator behind it (the owner's WELCOME said it
	 * takes such clocks), not once the push is answered. */
	{
		dml_handle_t h[2];

		push_ones(w[0], &h[0]);
		ck_assert_int_eq(dml_clock(w[0]), 0);
		ck_assert(agg_metric_wait(metrics, "dml_aggregator_clocks_in_total", 1) >= 1);
		push_ones(w[1], &h[1]);
		ck_assert_int_eq(dml_clock(w[1]), 0);
		for (int i = 0; i < 2; i++)
			wait_ok(w[i], h[i]);
	}
	rounds++;

	/* Killed with both pushes of a round in flight on it, or about to be. */
	{
		dml_handle_t h[2];

		for (int i = 0; i < 2; i++)
			push_ones(w[i], &h[i]);
		dml_test_server_kill(agg);
		for (int i = 0; i < 2; i++)
			wait_ok(w[i], h[i]);
		for (int i = 0; i < 2; i++)
			ck_assert_int_eq(dml_clock(w[i]), 0);
	}
	rounds++;
	bsp_round(w, 2.0f * (rounds + 1));
	dml_close(w[1]);
	dml_close(w[0]);
	rig_down(&r);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("agg_route");
	TCase *tc = tcase_create("route");

	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_options);
	tcase_add_loop_test(tc, test_no_aggregator_goes_direct, 0, 2);
	tcase_add_test(tc, test_not_an_aggregator_unused);
	tcase_add_test(tc, test_through_then_fallback);
	tcase_add_test(tc, test_real_aggregator);
	suite_add_tcase(s, tc);
	return dml_check_run(s);
}
