/*
 * What the aggregator tests share: a cluster of one owner (a real
 * dml-server, behind a proxy or not, or a fake owner the test speaks for)
 * and a dml-aggregator forwarding to it, and raw worker frames.
 */
#define _GNU_SOURCE
#include <check.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "proto/codec.h"
#include "proto/frame.h"
#include "proto/util.h"
#include "test/check_aggregator.h"
#include "test/raw_frame.h"

static const char tables[] = "[table]\nid = 1\nkind = dense\nwidth = 1\nkeys = 8\n"
			     "optimizer = sgd\nlr = 1\n";


/* Wait until the aggregator's metric name reads want (or time runs out). */
void wait_agg_metric(struct fixture *f, const char *name, double want)
{
	double v = -1;

	for (int i = 0; i < WAIT_MS / 20; i++) {
		ck_assert_int_eq(dml_test_metric(f->agg_metrics, name, WAIT_MS, &v), 0);
		if (v == want)
			break;
		usleep(20000);
	}
	ck_assert_msg(v == want, "%s is %g, not %g", name, v, want);
}

void fake_owner_accept(struct fixture *f)
{
	struct pollfd p = { f->fake_lfd, POLLIN, 0 };
	Dml__Meta *hello;

	ck_assert_int_eq(poll(&p, 1, WAIT_MS), 1);
	f->fake = accept4(f->fake_lfd, NULL, NULL, SOCK_CLOEXEC);
	ck_assert_int_ge(f->fake, 0);
	hello = raw_frame_accept(f->env, f->fake, DML__ROLE__SERVER, 7);
	ck_assert_int_eq(hello->handshake->role, DML__ROLE__AGGREGATOR);
	ck_assert_uint_eq(hello->handshake->node_id, 1);
	dml_meta_free(hello);
}

void fixture_start(struct fixture *f, enum owner_kind kind, const char *agg_extra)
{
	struct dml_test_server_conf sc = { .staleness = -1, .tables = tables };
	char extra[512], *metrics_port;
	uint16_t port;

	memset(f, 0, sizeof(*f));
	f->fake = f->fake_lfd = -1;
	for (size_t i = 0; i < DML_ARRAY_LEN(f->joined); i++)
		f->joined[i] = -1;
	ck_assert_int_eq(dml_test_env_new(&f->env), 0);
	if (kind == OWNER_FAKE) {
		f->fake_lfd = dml_test_raw_listen(&port);
		ck_assert_int_ge(f->fake_lfd, 0);
	} else {
		ck_assert_int_eq(dml_test_server_start(f->env, &sc, &f->owner), 0);
		port = dml_test_server_port(f->owner);
	}
	if (kind == OWNER_PROXIED) {
		ck_assert_int_eq(dml_test_proxy_start(f->env, port, &f->proxy), 0);
		port = dml_test_proxy_port(f->proxy);
	}
	snprintf(f->owner_addr, sizeof(f->owner_addr), "127.0.0.1:%u", port);
	metrics_port = NULL;
	ck_assert_int_eq(dml_test_env_write(f->env, "agg-metrics.port", "", 0600,
					    &metrics_port), 0);
	snprintf(extra, sizeof(extra), "metrics_listen = 127.0.0.1:0\n"
		 "metrics_port_file = %s\n%s", metrics_port, agg_extra ? agg_extra : "");
	ck_assert_int_eq(dml_test_aggregator_start(f->env, &(struct dml_test_agg_conf){
				.servers = f->owner_addr, .agg_extra = extra }, &f->agg), 0);
	ck_assert_int_eq(dml_test_port_file_read(metrics_port, &f->agg_metrics), 0);
	free(metrics_port);
	if (kind == OWNER_FAKE)
		fake_owner_accept(f);
	/* Its owner link is up: a proxy held now holds answers, not the handshake. */
	wait_agg_metric(f, "dml_aggregator_owners_connected", 1);
}

void fixture_end(struct fixture *f)
{
	for (size_t i = 0; i < DML_ARRAY_LEN(f->joined); i++)
		if (f->joined[i] >= 0)
			close(f->joined[i]);
	if (f->fake >= 0)
		close(f->fake);
	if (f->fake_lfd >= 0)
		close(f->fake_lfd);
	ck_assert_int_eq(dml_test_server_stop(f->agg, DML_TEST_STOP_TIMEOUT_MS), 0);
	dml_test_env_free(f->env);
}

/* A raw connection as role r to port; the WELCOME is checked and dropped. */
static int raw_peer(struct fixture *f, uint16_t port, uint32_t role, uint32_t id)
{
	Dml__Meta *w;
	int fd;

	ck_assert_int_eq(dml_test_raw_connect(port, &fd), 0);
	w = raw_frame_handshake(f->env, fd, role, id, 1000 + id, 0, 0);
	dml_meta_free(w);
	return fd;
}

int worker_connect(struct fixture *f, uint32_t id)
{
	ck_assert_uint_lt(id, DML_ARRAY_LEN(f->joined));
	if (f->owner) {
		ck_assert_int_lt(f->joined[id], 0);
		f->joined[id] = raw_peer(f, dml_test_server_port(f->owner), DML__ROLE__WORKER, id);
	}
	return raw_peer(f, dml_test_server_port(f->agg), DML__ROLE__WORKER, id);
}

void workers_rejoin(struct fixture *f)
{
	for (uint32_t id = 0; id < DML_ARRAY_LEN(f->joined); id++) {
		if (f->joined[id] < 0)
			continue;
		close(f->joined[id]);
		f->joined[id] = raw_peer(f, dml_test_server_port(f->owner), DML__ROLE__WORKER, id);
	}
}

void dense_meta(Dml__Meta *m, Dml__MsgType type, uint64_t rid, uint64_t clock,
		       const char *owner)
{
	dml__meta__init(m);
	m->type = type;
	m->request_id = rid;
	m->table = TABLE;
	m->clock = clock;
	m->dense = 1;
	m->key_begin = 0;
	m->key_end = KEYS;
	m->value_width = 1;
	m->owner = (char *)owner;
}

void send_push(int fd, uint64_t rid, uint64_t seq, const char *owner, const float *v)
{
	Dml__Meta m;

	dense_meta(&m, DML__MSG_TYPE__PUSH, rid, 1, owner);
	m.seq = seq;
	raw_frame_send(fd, &m, v, KEYS * sizeof(float));
}

void send_clock(int fd, uint64_t clock, const char *owner)
{
	Dml__Meta m = DML__META__INIT;

	m.type = DML__MSG_TYPE__CLOCK;
	m.clock = clock;
	m.owner = (char *)owner;
	raw_frame_send(fd, &m, NULL, 0);
}

/* The next frame on fd: an ACK of rid, or an ERROR of rid with code (!= 0). */
void expect_reply(int fd, uint64_t rid, int code)
{
	uint8_t *pl;
	Dml__Meta *r = raw_frame_read(fd, &pl);

	ck_assert_uint_eq(r->request_id, rid);
	if (code == 0) {
		ck_assert_int_eq(r->type, DML__MSG_TYPE__ACK);
	} else {
		ck_assert_int_eq(r->type, DML__MSG_TYPE__ERROR);
		ck_assert_int_eq(r->error->code, code);
	}
	dml_meta_free(r);
	free(pl);
}

/* Nothing arrives on fd for SILENCE_MS. */
void expect_silence(int fd)
{
	struct pollfd p = { fd, POLLIN, 0 };

	ck_assert_int_eq(poll(&p, 1, SILENCE_MS), 0);
}

/* The connection still serves: a HEARTBEAT comes back. */
void expect_alive(int fd, uint64_t rid)
{
	Dml__Meta m = DML__META__INIT, *r;
	uint8_t *pl;

	m.type = DML__MSG_TYPE__HEARTBEAT;
	m.request_id = rid;
	raw_frame_send(fd, &m, NULL, 0);
	r = raw_frame_read(fd, &pl);
	ck_assert_int_eq(r->type, DML__MSG_TYPE__HEARTBEAT);
	ck_assert_uint_eq(r->request_id, rid);
	dml_meta_free(r);
	free(pl);
}

/* The owner's push and pull counters, asked directly (not through a proxy). */
/* The real owner's STATS_REPLY (the caller frees it). */
static Dml__Meta *owner_stats_reply(struct fixture *f)
{
	int fd = raw_peer(f, dml_test_server_port(f->owner), DML__ROLE__CONTROL, 99);
	Dml__Meta m = DML__META__INIT, *r;
	uint8_t *pl;

	m.type = DML__MSG_TYPE__STATS;
	m.request_id = 1;
	raw_frame_send(fd, &m, NULL, 0);
	r = raw_frame_read(fd, &pl);
	ck_assert_int_eq(r->type, DML__MSG_TYPE__STATS_REPLY);
	free(pl);
	close(fd);
	return r;
}

void owner_stats(struct fixture *f, uint64_t *pushes, uint64_t *pulls)
{
	Dml__Meta *r = owner_stats_reply(f);

	*pushes = r->stats->pushes;
	*pulls = r->stats->pulls;
	dml_meta_free(r);
}

uint64_t owner_clock(struct fixture *f, uint32_t id)
{
	Dml__Meta *r = owner_stats_reply(f);
	uint64_t clock = UINT64_MAX;

	for (size_t i = 0; i < r->stats->n_workers; i++)
		if (r->stats->workers[i]->worker == id)
			clock = r->stats->workers[i]->clock;
	dml_meta_free(r);
	ck_assert_msg(clock != UINT64_MAX, "worker %u is not in the owner's clock set", id);
	return clock;
}

void wait_owner_clock(struct fixture *f, uint32_t id, uint64_t want)
{
	uint64_t clock = 0;

	for (int i = 0; i < WAIT_MS / 20; i++) {
		if ((clock = owner_clock(f, id)) >= want)
			break;
		usleep(20000);
	}
	ck_assert_uint_eq(clock, want);
}

void wait_owner_pushes(struct fixture *f, uint64_t want)
{
	uint64_t pushes = 0, pulls;

	for (int i = 0; i < WAIT_MS / 20; i++) {
		owner_stats(f, &pushes, &pulls);
		if (pushes >= want)
			break;
		usleep(20000);
	}
	ck_assert_uint_eq(pushes, want);
}

/* A pull of the whole range at clock on fd; the reply's values into out. */
void pull_values(int fd, uint64_t rid, uint64_t clock, const char *owner,
			Dml__DType dtype, float *out)
{
	Dml__Meta m, *r;
	struct dml_codec c;
	uint8_t *pl;

	dense_meta(&m, DML__MSG_TYPE__PULL, rid, clock, owner);
	m.dtype = dtype;
	raw_frame_send(fd, &m, NULL, 0);
	r = raw_frame_read(fd, &pl);
	ck_assert_int_eq(r->type, DML__MSG_TYPE__PULL_REPLY);
	ck_assert_uint_eq(r->request_id, rid);
	ck_assert_int_eq(r->dtype, dtype);
	ck_assert_int_eq(dml_dtype_codec(r->dtype, &c), 0);
	ck_assert_int_eq(dml_codec_decode(&c, pl, r->payload_bytes, KEYS, out), 0);
	dml_meta_free(r);
	free(pl);
}

/* The owner's values, read directly. */
void owner_values(struct fixture *f, float *out)
{
	int fd = raw_peer(f, dml_test_server_port(f->owner), DML__ROLE__CONTROL, 98);

	pull_values(fd, 1, 0, "", DML__DTYPE__F32, out);
	close(fd);
}

void fill(float *v, float scale)
{
	for (int k = 0; k < KEYS; k++)
		v[k] = scale * (float)(k + 1);
}

/* sgd, lr 1, from zeros: values read back are minus the sum pushed. */
void expect_values(const float *got, float scale)
{
	for (int k = 0; k < KEYS; k++)
		ck_assert_float_eq(got[k], -scale * (float)(k + 1));
}

void expect_owner_sum(struct fixture *f, float scale)
{
	float got[KEYS];

	owner_values(f, got);
	expect_values(got, scale);
}
