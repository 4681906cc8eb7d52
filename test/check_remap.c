/*
 * check_remap.c - integration tests of shard maps on real dml-server
 * processes: servers with no [table] section register with a scripted
 * scheduler (fake_sched.h), which pushes SHARDMAPs to them.
 *
 * Covered: a job's map installed on two servers (a dense and a sparse table,
 * momentum so that optimizer state matters), then remapped over three
 * servers with different shares: every value survives the move bit for bit,
 * a further push gives what a table that never moved would (so the momentum
 * moved too), a push to a moved key at its old owner is refused with
 * DML_ERANGE and map version 2 and changes nothing, while a resend of a push
 * applied there before the move is acknowledged (exactly once). And the
 * refusals: a server with config tables refuses SHARDMAP, a stale or repeated
 * version is ACKed without change, a map with a gap is refused, MIGRATE from a
 * worker connection or for another map version is refused, a request for
 * another job is refused, a new job replaces the tables, and a worker whose
 * HELLO names a clock joins the clock set there. Many frames per move
 * (small max_keys, a 2M-key table), a newer map while rows of the previous
 * one are still undelivered, and pulls parked by the staleness bound when
 * their keys move or the job changes.
 *
 * Clients are libdml in standalone mode (servers listed in map order) and a
 * blocking raw client written here, which sets HELLO fields and reads ERROR
 * fields that libdml does not expose.
 */
#define _GNU_SOURCE
#include <check.h>
#include <math.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "auth.h"
#include "check_run.h"
#include "dml_error.h"
#include "fake_sched.h"
#include "frame.h"
#include "harness.h"
#include "raw_frame.h"
#include "shardmap.h"
#include "util.h"

#define TEST_TIMEOUT_S 90
#define WAIT_MS 10000
#define JOB 7
#define DKEYS 500          /* dense table 0 */
#define DW 2
#define NSPARSE 400        /* keys used of sparse table 1 */
#define SW 3
#define LR 0.1f
#define MOMENTUM 0.9f
#define H DML_SHARD_HASH_SPACE
#define TOL 1e-4

/* ---- job spec and maps ---------------------------------------------------- */

struct range_def {
	uint32_t table;
	uint64_t begin, end;
	uint32_t server;
};

/* A job spec and one map, in storage the test owns. */
struct job {
	Dml__TableSpec t[2];
	Dml__TableSpec *tp[2];
	Dml__JobSpec spec;
	Dml__ShardServer sv[4];
	Dml__ShardServer *svp[4];
	Dml__ShardRange r[8];
	Dml__ShardRange *rp[8];
	Dml__ShardMap map;
	char addr[4][300];         /* of servers 1..3 (index = node id) */
};

static void job_init(struct job *j, uint32_t id)
{
	memset(j, 0, sizeof(*j));
	for (int i = 0; i < 2; i++) {
		Dml__TableSpec *t = &j->t[i];

		dml__table_spec__init(t);
		t->id = (uint32_t)i;
		t->dense = i == 0;
		t->width = i == 0 ? DW : SW;
		t->keys = i == 0 ? DKEYS : 0;
		t->capacity = i == 0 ? 0 : 1000;
		t->init = (char *)(i == 0 ? "uniform" : "normal");
		t->init_scale = 0.5;
		t->seed = 3 + (uint64_t)i;
		t->optimizer = (char *)"momentum";
		t->lr = LR;
		t->momentum = MOMENTUM;
		t->beta1 = 0.9;
		t->beta2 = 0.999;
		t->epsilon = 1e-8;
		j->tp[i] = t;
	}
	dml__job_spec__init(&j->spec);
	j->spec.name = (char *)"remap-test";
	j->spec.app = (char *)"lsq";
	j->spec.tables = j->tp;
	j->spec.n_tables = 2;
	j->spec.staleness = -1;
	j->spec.workers = 1;
	j->spec.max_clocks = 10;
	dml__shard_map__init(&j->map);
	j->map.job = id;
}

static void job_map(struct job *j, uint64_t version, const uint32_t *servers, size_t ns,
		    const struct range_def *ranges, size_t nr)
{
	j->map.version = version;
	for (size_t i = 0; i < ns; i++) {
		dml__shard_server__init(&j->sv[i]);
		j->sv[i].node_id = servers[i];
		j->sv[i].address = j->addr[servers[i]];
		j->svp[i] = &j->sv[i];
	}
	for (size_t i = 0; i < nr; i++) {
		dml__shard_range__init(&j->r[i]);
		j->r[i].table = ranges[i].table;
		j->r[i].begin = ranges[i].begin;
		j->r[i].end = ranges[i].end;
		j->r[i].server = ranges[i].server;
		j->rp[i] = &j->r[i];
	}
	j->map.servers = j->svp;
	j->map.n_servers = ns;
	j->map.ranges = j->rp;
	j->map.n_ranges = nr;
}

/* Send the map to every listed server at once, then collect the answers. */
static void install_all(struct dml_fake_sched *f, struct job *j, const uint32_t *ids,
			size_t n, int expect)
{
	char err[256];

	for (size_t i = 0; i < n; i++)
		ck_assert_int_eq(dml_fake_sched_install_begin(f, ids[i], &j->spec, &j->map), 0);
	for (size_t i = 0; i < n; i++) {
		int rc = dml_fake_sched_install_wait(f, ids[i], WAIT_MS, err, sizeof(err));

		ck_assert_msg(rc == expect, "server %u answered %d (%s), expected %d", ids[i],
			      rc, err, expect);
	}
}

/* ---- daemons --------------------------------------------------------------- */

/* store: a [store] section, or NULL. */
static struct dml_test_server *server_up(struct dml_test_env *env, struct dml_fake_sched *f,
					 uint32_t id, const char *tables, const char *store,
					 char *addr, size_t addrlen)
{
	struct dml_test_server_conf c = { 0 };
	struct dml_test_server *s = NULL;
	char extra[64];

	snprintf(extra, sizeof(extra), "scheduler = 127.0.0.1:%u\n", dml_fake_sched_port(f));
	c.node_id = id;
	c.staleness = -1;
	c.tables = tables;
	c.server_extra = extra;
	c.extra = store;
	ck_assert_int_eq(dml_test_server_start(env, &c, &s), 0);
	ck_assert_int_eq(dml_fake_sched_wait_registered(f, DML__ROLE__SERVER, id, WAIT_MS, addr,
							addrlen), 0);
	return s;
}

static struct dml_test_server *start_server(struct dml_test_env *env,
					    struct dml_fake_sched *f, uint32_t id,
					    const char *tables, char *addr, size_t addrlen)
{
	return server_up(env, f, id, tables, NULL, addr, addrlen);
}

static void expect_log(const struct dml_test_server *s, const char *needle)
{
	const char *const needles[] = { needle, NULL };

	ck_assert_msg(dml_test_server_log_wait(s, 0, needles, WAIT_MS) == 0,
		      "log of the server lacks: %s", needle);
}

/* libdml, standalone, on the servers in map order, for job `job`; the
 * options live as long as the connection (see dml.h). */
static dml_t *client(struct dml_test_env *env, struct dml_test_server *const *servers,
		     size_t n, uint32_t worker, uint32_t job, dml_opts_t **o)
{
	dml_t *d = NULL;
	char buf[16];

	ck_assert_int_eq(dml_test_client_opts(env, servers, n, worker, o), 0);
	snprintf(buf, sizeof(buf), "%u", job);
	ck_assert_int_eq(dml_opts_set(*o, "job", buf), 0);
	ck_assert_int_eq(dml_connect(*o, &d), 0);
	return d;
}

/* ---- a blocking raw client ---------------------------------------------------- */

struct raw {
	int fd;
	uint64_t next_id;
	uint64_t map_version;      /* from WELCOME */
	uint32_t shard_index, shard_count, ntables;
};

/* The reply to one request: what the tests look at. */
struct answer {
	int type;
	int code;                  /* ERROR */
	char message[256];
	uint64_t map_version;
	float values[16];          /* PULL_REPLY, first values */
	Dml__Stats *stats;         /* STATS_REPLY, owned */
};

static Dml__Meta *raw_read(struct raw *r, uint8_t **payload)
{
	return raw_frame_read(r->fd, payload);
}

static void raw_send(struct raw *r, Dml__Meta *m, const void *payload, uint32_t len)
{
	raw_frame_send(r->fd, m, payload, len);
}

/* Connect and authenticate as (role, node_id), naming job and clock. */
static void raw_open(struct dml_test_env *env, uint16_t port, uint32_t role,
		     uint32_t node_id, uint64_t incarnation, uint32_t job, uint64_t clock,
		     struct raw *r)
{
	Dml__Meta *w;

	memset(r, 0, sizeof(*r));
	ck_assert_int_eq(dml_test_raw_connect(port, &r->fd), 0);
	w = raw_frame_handshake(env, r->fd, role, node_id, incarnation, job, clock);
	r->map_version = w->handshake->map_version;
	r->shard_index = w->handshake->shard_index;
	r->shard_count = w->handshake->shard_count;
	r->ntables = (uint32_t)w->handshake->n_tables;
	dml_meta_free(w);
}

static void raw_close(struct raw *r)
{
	close(r->fd);
	r->fd = -1;
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
	a->map_version = rep->map_version;
	if (rep->error) {
		a->code = rep->error->code;
		snprintf(a->message, sizeof(a->message), "%s", rep->error->message);
	}
	if (rep->type == DML__MSG_TYPE__PULL_REPLY && pl)
		memcpy(a->values, pl, rep->payload_bytes < sizeof(a->values)
		       ? rep->payload_bytes : sizeof(a->values));
	if (rep->stats) {
		a->stats = dml_msg_copy(&rep->stats->base);
	}
	dml_meta_free(rep);
	free(pl);
}

/* Send m and wait for its answer. */
static void raw_call(struct raw *r, Dml__Meta *m, const void *payload, uint32_t len,
		     struct answer *a)
{
	raw_answer(r, raw_request(r, m, payload, len), a);
}

static void answer_free(struct answer *a)
{
	if (a->stats)
		dml__stats__free_unpacked(a->stats, NULL);
	a->stats = NULL;
}

/* A dense push of one key of table 0 (width DW), of weight (0: none sent). */
static void raw_push_key_weighted(struct raw *r, uint32_t job, uint64_t key, uint64_t seq,
				  const float *g, float weight, struct answer *a)
{
	Dml__Meta m = DML__META__INIT;

	m.type = DML__MSG_TYPE__PUSH;
	m.weight = weight;
	m.job = job;
	m.table = 0;
	m.seq = seq;
	m.value_width = DW;
	m.dense = 1;
	m.key_begin = key;
	m.key_end = key + 1;
	raw_call(r, &m, g, DW * sizeof(float), a);
}

static void raw_push_key(struct raw *r, uint32_t job, uint64_t key, uint64_t seq,
			 const float *g, struct answer *a)
{
	raw_push_key_weighted(r, job, key, seq, g, 0.0f, a);
}

/* A dense pull of one key of table 0 at clock; its request id. */
static uint64_t raw_pull_send(struct raw *r, uint32_t job, uint64_t key, uint64_t clock)
{
	Dml__Meta m = DML__META__INIT;

	m.type = DML__MSG_TYPE__PULL;
	m.job = job;
	m.table = 0;
	m.clock = clock;
	m.value_width = DW;
	m.dense = 1;
	m.key_begin = key;
	m.key_end = key + 1;
	return raw_request(r, &m, NULL, 0);
}

static void raw_pull_key(struct raw *r, uint32_t job, uint64_t key, struct answer *a)
{
	raw_answer(r, raw_pull_send(r, job, key, 0), a);
}

/* ---- the model the servers must agree with ------------------------------------ */

struct model {
	float dw[DKEYS * DW], dv[DKEYS * DW];
	float sw[NSPARSE * SW], sv[NSPARSE * SW];
	uint64_t keys[NSPARSE];
};

static float grad_of(uint64_t key, unsigned j, int step)
{
	return (float)((key % 1000 * 7 + j * 3 + (unsigned)step * 11) % 17) / 8.0f - 1.0f;
}

/* Momentum as the server applies it (table.h): v = m v + g; w -= lr v. */
static void ref_step(float *w, float *v, const float *g, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		v[i] = MOMENTUM * v[i] + g[i];
		w[i] -= LR * v[i];
	}
}

static void grads(const struct model *md, int step, float *dg, float *sg)
{
	for (uint64_t k = 0; k < DKEYS; k++)
		for (unsigned j = 0; j < DW; j++)
			dg[k * DW + j] = grad_of(k, j, step);
	for (size_t i = 0; i < NSPARSE; i++)
		for (unsigned j = 0; j < SW; j++)
			sg[i * SW + j] = grad_of(md->keys[i], j, step);
}

/* One step pushed through d and applied to the model. */
static void step(dml_t *d, struct model *md, int n)
{
	static float dg[DKEYS * DW], sg[NSPARSE * SW];
	dml_handle_t h1, h2;

	grads(md, n, dg, sg);
	ck_assert_int_eq(dml_push_range(d, 0, 0, DKEYS, dg, &h1), 0);
	ck_assert_int_eq(dml_push(d, 1, md->keys, NSPARSE, sg, &h2), 0);
	ck_assert_int_eq(dml_wait(d, h1), 0);
	ck_assert_int_eq(dml_wait(d, h2), 0);
	ref_step(md->dw, md->dv, dg, DKEYS * DW);
	ref_step(md->sw, md->sv, sg, NSPARSE * SW);
}

static void pull_all(dml_t *d, const struct model *md, float *dw, float *sw)
{
	dml_handle_t h1, h2;

	ck_assert_int_eq(dml_pull_range(d, 0, 0, DKEYS, dw, &h1), 0);
	ck_assert_int_eq(dml_pull(d, 1, md->keys, NSPARSE, sw, &h2), 0);
	ck_assert_int_eq(dml_wait(d, h1), 0);
	ck_assert_int_eq(dml_wait(d, h2), 0);
}

static void assert_close(const float *got, const float *want, size_t n, const char *what)
{
	for (size_t i = 0; i < n; i++)
		ck_assert_msg(fabsf(got[i] - want[i]) <= TOL * (1.0f + fabsf(want[i])),
			      "%s value %zu: %g, expected %g", what, i, got[i], want[i]);
}

/* ---- tests ----------------------------------------------------------------------- */

/* Servers 1 and 2, then 1, 2 and 3 with other shares (see the maps). */
/* Step n of the model, then every value must be the reference's. */
static void step_matches(dml_t *d, struct model *md, int n, float *pd, float *ps,
			 const char *when)
{
	char what[64];

	step(d, md, n);
	pull_all(d, md, pd, ps);
	snprintf(what, sizeof(what), "dense %s", when);
	assert_close(pd, md->dw, DKEYS * DW, what);
	snprintf(what, sizeof(what), "sparse %s", when);
	assert_close(ps, md->sw, NSPARSE * SW, what);
}

/*
 * Keys from salt, the model's first values, and its first two steps on the
 * servers listed; then pd and ps (if not NULL) get the values.
 */
static void first_steps(struct dml_test_env *env, struct dml_test_server *const *s, size_t n,
			struct model *md, uint64_t salt, float *pd, float *ps)
{
	dml_opts_t *o;
	dml_t *d;

	for (size_t i = 0; i < NSPARSE; i++)
		md->keys[i] = i * 0x9e3779b97f4a7c15ull + salt;
	d = client(env, s, n, 1, JOB, &o);
	pull_all(d, md, md->dw, md->sw);
	step(d, md, 0);
	step(d, md, 1);
	if (pd)
		pull_all(d, md, pd, ps);
	dml_close(d);
	dml_opts_free(o);
}

/*
 * A new client on the servers listed finds the values wd and ws bit for
 * bit (pd and ps: room for them), and step n then matches the reference.
 */
static void kept_then_step(struct dml_test_env *env, struct dml_test_server *const *s,
			   size_t ns, struct model *md, const float *wd, const float *ws,
			   float *pd, float *ps, int n, const char *when)
{
	dml_opts_t *o;
	dml_t *d = client(env, s, ns, 1, JOB, &o);

	pull_all(d, md, pd, ps);
	ck_assert(memcmp(wd, pd, DKEYS * DW * sizeof(float)) == 0);
	ck_assert(memcmp(ws, ps, NSPARSE * SW * sizeof(float)) == 0);
	step_matches(d, md, n, pd, ps, when);
	dml_close(d);
	dml_opts_free(o);
}

/* Stop the servers (cleanly), the scheduler and the environment. */
static void all_down(struct dml_test_server **s, int n, struct dml_fake_sched *f,
		     struct dml_test_env *env)
{
	for (int i = 0; i < n; i++)
		ck_assert_int_eq(dml_test_server_stop(s[i], WAIT_MS), 0);
	dml_fake_sched_stop(f);
	dml_test_env_free(env);
}

static const struct range_def v1_ranges[] = {
	{ 0, 0, 250, 1 }, { 0, 250, DKEYS, 2 },
	{ 1, 0, H / 2, 1 }, { 1, H / 2, H, 2 },
};
static const struct range_def v2_ranges[] = {
	{ 0, 0, 167, 1 }, { 0, 167, 334, 2 }, { 0, 334, DKEYS, 3 },
	{ 1, 0, H / 4, 3 }, { 1, H / 4, H / 8 * 5, 1 }, { 1, H / 8 * 5, H, 2 },
};

START_TEST(test_remap_moves_rows_and_state)
{
	static struct model md;
	static float p1d[DKEYS * DW], p1s[NSPARSE * SW], p2d[DKEYS * DW], p2s[NSPARSE * SW];
	static float nostate[DKEYS * DW], dg[DKEYS * DW], sg[NSPARSE * SW];
	const uint32_t ids2[] = { 1, 2 }, ids3[] = { 1, 2, 3 };
	struct dml_test_env *env;
	struct dml_fake_sched *f;
	struct dml_test_server *s[3];
	struct job j;
	struct raw w;
	struct answer a;
	float gx[DW] = { 0.5f, -0.25f };
	dml_opts_t *o;
	dml_t *d;
	int differs = 0;

	ck_assert_int_eq(dml_test_env_new(&env), 0);
	ck_assert_int_eq(dml_fake_sched_start(dml_test_env_secret(env), &f), 0);
	job_init(&j, JOB);
	s[0] = start_server(env, f, 1, NULL, j.addr[1], sizeof(j.addr[1]));
	s[1] = start_server(env, f, 2, NULL, j.addr[2], sizeof(j.addr[2]));
	job_map(&j, 1, ids2, 2, v1_ranges, 4);
	install_all(f, &j, ids2, 2, 0);
	expect_log(s[0], "job 7: installed map v1: table 0 keys 0..249, table 1 key hashes "
		   "0..2147483647");

	/* Two steps on v1, and one push of a raw worker to key 400 on server 2. */
	for (size_t i = 0; i < NSPARSE; i++)
		md.keys[i] = i * 0x9e3779b97f4a7c15ull + 12345;
	d = client(env, s, 2, 1, JOB, &o);
	pull_all(d, &md, md.dw, md.sw);
	step(d, &md, 0);
	step(d, &md, 1);
	raw_open(env, dml_test_server_port(s[1]), DML__ROLE__WORKER, 9, 77, JOB, 0, &w);
	ck_assert_uint_eq(w.map_version, 1);
	raw_push_key(&w, JOB, 400, 1, gx, &a);
	ck_assert_int_eq(a.type, DML__MSG_TYPE__ACK);
	ref_step(md.dw + 400 * DW, md.dv + 400 * DW, gx, DW);
	raw_close(&w);
	pull_all(d, &md, p1d, p1s);
	assert_close(p1d, md.dw, DKEYS * DW, "dense v1");
	assert_close(p1s, md.sw, NSPARSE * SW, "sparse v1");
	dml_close(d);
	dml_opts_free(o);

	/* v2 over three servers; each one's part differs from v1. */
	s[2] = start_server(env, f, 3, NULL, j.addr[3], sizeof(j.addr[3]));
	job_map(&j, 2, ids3, 3, v2_ranges, 6);
	install_all(f, &j, ids3, 3, 0);
	expect_log(s[1], "job 7: map v2: giving keys 334..499 of table 0 to server 3");
	expect_log(s[1], "receiving keys 167..249 of table 0 from server 1");
	expect_log(s[0], "key hashes 0..1073741823 of table 1 to server 3");
	expect_log(s[2], "job 7: joining at map v2: waiting for table 0 keys 334..499");
	expect_log(s[2], "job 7: map v2 complete in ");
	expect_log(s[1], "job 7: map v2 complete in ");

	/* At its old owner key 400 is refused, but a resend of the push that was
	 * applied there before the move is acknowledged (exactly once). */
	raw_open(env, dml_test_server_port(s[1]), DML__ROLE__WORKER, 9, 77, JOB, 0, &w);
	ck_assert_uint_eq(w.map_version, 2);
	ck_assert_uint_eq(w.shard_index, 1);
	ck_assert_uint_eq(w.shard_count, 3);
	raw_push_key(&w, JOB, 400, 1, gx, &a);
	ck_assert_int_eq(a.type, DML__MSG_TYPE__ACK);
	raw_push_key(&w, JOB, 400, 2, gx, &a);
	ck_assert_int_eq(a.type, DML__MSG_TYPE__ERROR);
	ck_assert_int_eq(a.code, DML_ERANGE);
	ck_assert_uint_eq(a.map_version, 2);
	raw_pull_key(&w, JOB, 400, &a);
	ck_assert_int_eq(a.code, DML_ERANGE);
	ck_assert_uint_eq(a.map_version, 2);
	/* What it kept and what it received are served. */
	raw_pull_key(&w, JOB, 200, &a);
	ck_assert_int_eq(a.type, DML__MSG_TYPE__PULL_REPLY);
	ck_assert(a.values[0] == p1d[200 * DW] && a.values[1] == p1d[200 * DW + 1]);
	raw_close(&w);

	/* Every value moved bit for bit, and nothing changed at the old owner. */
	d = client(env, s, 3, 1, JOB, &o);
	pull_all(d, &md, p2d, p2s);
	ck_assert(memcmp(p1d, p2d, sizeof(p1d)) == 0);
	ck_assert(memcmp(p1s, p2s, sizeof(p1s)) == 0);

	/* One more step: the momentum moved with the values. */
	memcpy(nostate, p2d, sizeof(nostate));
	step_matches(d, &md, 2, p2d, p2s, "v2");
	/* Without the state the test would see other values: it can fail. */
	grads(&md, 2, dg, sg);
	for (size_t i = 0; i < DKEYS * DW; i++)
		differs += fabsf(nostate[i] - LR * dg[i] - p2d[i]) > 1e-3f;
	ck_assert_int_gt(differs, DKEYS);
	dml_close(d);
	dml_opts_free(o);

	all_down(s, 3, f, env);
}
END_TEST

/* A map with all of both tables on server 1. */
static const struct range_def one_ranges[] = {
	{ 0, 0, DKEYS, 1 }, { 1, 0, H, 1 },
};
/* A gap in table 0. */
static const struct range_def gap_ranges[] = {
	{ 0, 0, 100, 1 }, { 0, 101, DKEYS, 1 }, { 1, 0, H, 1 },
};

static void raw_migrate(struct raw *r, uint64_t version, struct answer *a)
{
	Dml__Meta m = DML__META__INIT;
	float rows[2 * DW] = { 0 };

	m.type = DML__MSG_TYPE__MIGRATE;
	m.job = JOB;
	m.table = 0;
	m.map_version = version;
	m.dense = 1;
	m.key_begin = 10;
	m.key_end = 11;
	m.value_width = 2 * DW;  /* values and momentum */
	raw_call(r, &m, rows, sizeof(rows), a);
}

START_TEST(test_remap_refusals)
{
	const uint32_t one[] = { 1 };
	struct dml_test_env *env;
	struct dml_fake_sched *f;
	struct dml_test_server *s, *cs;
	struct job j, k;
	struct raw w, ctl;
	struct answer a;
	float g[DW] = { 1.0f, 2.0f }, before[DW];
	char err[256], caddr[300];
	Dml__Meta m = DML__META__INIT;
	int found = 0;

	ck_assert_int_eq(dml_test_env_new(&env), 0);
	ck_assert_int_eq(dml_fake_sched_start(dml_test_env_secret(env), &f), 0);
	job_init(&j, JOB);
	s = start_server(env, f, 1, NULL, j.addr[1], sizeof(j.addr[1]));

	/* A server with tables of its own keeps them. */
	cs = start_server(env, f, 5, "[table]\nid = 0\nkind = dense\nkeys = 10\n", caddr,
			  sizeof(caddr));
	job_map(&j, 1, one, 1, one_ranges, 2);
	ck_assert_int_eq(dml_fake_sched_install(f, 5, &j.spec, &j.map, WAIT_MS, err,
						sizeof(err)), DML_ECONF);
	ck_assert_ptr_nonnull(strstr(err, "remove its [table] sections"));

	/* v1 then v2 installed; v1 later is stale and v2 again a repeat: ACKed,
	 * no change. */
	install_all(f, &j, one, 1, 0);
	job_map(&j, 2, one, 1, one_ranges, 2);
	install_all(f, &j, one, 1, 0);
	expect_log(s, "job 7: map v2: giving nothing; receiving nothing");
	raw_open(env, dml_test_server_port(s), DML__ROLE__WORKER, 9, 1, JOB, 0, &w);
	ck_assert_uint_eq(w.map_version, 2);
	ck_assert_uint_eq(w.ntables, 2);
	/* A weight that is not a positive finite number is refused, and its
	 * sequence number stays free. */
	raw_push_key_weighted(&w, JOB, 10, 1, g, -1.0f, &a);
	ck_assert_int_eq(a.code, DML_EINVAL);
	ck_assert_str_eq(a.message, "push to table 0: weight -1 is not a positive finite number");
	raw_push_key(&w, JOB, 10, 1, g, &a);
	ck_assert_int_eq(a.type, DML__MSG_TYPE__ACK);
	raw_pull_key(&w, JOB, 10, &a);
	memcpy(before, a.values, sizeof(before));
	job_map(&j, 1, one, 1, one_ranges, 2);
	install_all(f, &j, one, 1, 0);
	job_map(&j, 2, one, 1, one_ranges, 2);
	install_all(f, &j, one, 1, 0);
	raw_pull_key(&w, JOB, 10, &a);
	ck_assert(memcmp(before, a.values, sizeof(before)) == 0);

	/* A map that leaves keys to nobody is refused, and changes nothing. */
	job_map(&j, 3, one, 1, gap_ranges, 3);
	ck_assert_int_eq(dml_fake_sched_install(f, 1, &j.spec, &j.map, WAIT_MS, err,
						sizeof(err)), DML_EINVAL);
	ck_assert_ptr_nonnull(strstr(err, "gap"));
	raw_pull_key(&w, JOB, 10, &a);
	ck_assert_int_eq(a.type, DML__MSG_TYPE__PULL_REPLY);

	/* MIGRATE only from servers, and only for the version being installed. */
	raw_migrate(&w, 2, &a);
	ck_assert_int_eq(a.code, DML_EROLE);
	raw_open(env, dml_test_server_port(s), DML__ROLE__SERVER, 99, 1, JOB, 0, &ctl);
	raw_migrate(&ctl, 1, &a);
	ck_assert_int_eq(a.code, DML_ESTATE);
	/* Rows for a range it serves already: a resend, ACKed and not applied. */
	raw_migrate(&ctl, 2, &a);
	ck_assert_int_eq(a.type, DML__MSG_TYPE__ACK);
	raw_close(&ctl);
	raw_pull_key(&w, JOB, 10, &a);
	ck_assert(memcmp(before, a.values, sizeof(before)) == 0);

	/* A request for a newer job than the server holds: not here yet (the
	 * client retries it as "not my range"); for an older one: over. */
	raw_push_key(&w, JOB + 1, 10, 2, g, &a);
	ck_assert_int_eq(a.code, DML_ERANGE);
	ck_assert_str_eq(a.message, "job 8 is not on this server yet");
	raw_push_key(&w, JOB - 1, 10, 2, g, &a);
	ck_assert_int_eq(a.code, DML_ESTATE);
	ck_assert_str_eq(a.message, "job 6 is not on this server");
	raw_close(&w);

	/* A worker whose HELLO names clock 5 joins the clock set there. */
	raw_open(env, dml_test_server_port(s), DML__ROLE__WORKER, 11, 1, JOB, 5, &w);
	raw_open(env, dml_test_server_port(s), DML__ROLE__CONTROL, 0, 1, 0, 0, &ctl);
	m.type = DML__MSG_TYPE__STATS;
	raw_call(&ctl, &m, NULL, 0, &a);
	ck_assert_ptr_nonnull(a.stats);
	for (size_t i = 0; i < a.stats->n_workers; i++)
		if (a.stats->workers[i]->worker == 11) {
			ck_assert_uint_eq(a.stats->workers[i]->clock, 5);
			found = 1;
		}
	ck_assert(found);
	answer_free(&a);
	raw_close(&w);

	raw_close(&ctl);

	/* A new job replaces the tables: fresh values, the old job refused. */
	job_init(&k, JOB + 1);
	memcpy(k.addr, j.addr, sizeof(k.addr));
	job_map(&k, 1, one, 1, one_ranges, 2);
	install_all(f, &k, one, 1, 0);
	expect_log(s, "job 7: replaced by job 8");
	raw_open(env, dml_test_server_port(s), DML__ROLE__WORKER, 9, 1, JOB + 1, 0, &w);
	ck_assert_uint_eq(w.map_version, 1);
	raw_pull_key(&w, JOB + 1, 10, &a);
	ck_assert_int_eq(a.type, DML__MSG_TYPE__PULL_REPLY);
	ck_assert(memcmp(before, a.values, sizeof(before)) != 0);
	raw_push_key(&w, JOB, 10, 3, g, &a);
	ck_assert_int_eq(a.code, DML_ESTATE);
	raw_close(&w);

	ck_assert_int_eq(dml_test_server_stop(s, WAIT_MS), 0);
	ck_assert_int_eq(dml_test_server_stop(cs, WAIT_MS), 0);
	dml_fake_sched_stop(f);
	dml_test_env_free(env);
}
END_TEST

/* ---- many frames, and a newer map midway ------------------------------------- */

#define BIG_KEYS 2000000   /* dense: 16 MB of rows, several frames per move */
#define BIG_SPARSE 12000   /* sparse rows, at most 1000 per frame (max_keys) */
#define BATCH 1000

static const struct range_def big_v1[] = {
	{ 0, 0, BIG_KEYS, 1 }, { 1, 0, H, 1 },
};
static const struct range_def big_v2[] = {
	{ 0, 0, BIG_KEYS / 4, 1 }, { 0, BIG_KEYS / 4, BIG_KEYS, 2 },
	{ 1, 0, H / 3, 2 }, { 1, H / 3, H, 1 },
};

/* Table 0 of width 1, table 1 of width 1, both with momentum. */
static void big_job(struct job *j)
{
	job_init(j, JOB);
	j->t[0].width = 1;
	j->t[0].keys = BIG_KEYS;
	j->t[1].width = 1;
}

/* Push gradients for the whole of both tables (sparse keys in batches). */
static void big_step(dml_t *d, const uint64_t *keys, float *dg, float *sg, int n)
{
	dml_handle_t h;

	for (uint64_t k = 0; k < BIG_KEYS; k++)
		dg[k] = grad_of(k, 0, n);
	for (size_t i = 0; i < BIG_SPARSE; i++)
		sg[i] = grad_of(keys[i], 0, n);
	ck_assert_int_eq(dml_push_range(d, 0, 0, BIG_KEYS, dg, &h), 0);
	ck_assert_int_eq(dml_wait(d, h), 0);
	for (size_t i = 0; i < BIG_SPARSE; i += BATCH) {
		ck_assert_int_eq(dml_push(d, 1, keys + i, BATCH, sg + i, &h), 0);
		ck_assert_int_eq(dml_wait(d, h), 0);
	}
}

static void big_pull(dml_t *d, const uint64_t *keys, float *dw, float *sw)
{
	dml_handle_t h;

	ck_assert_int_eq(dml_pull_range(d, 0, 0, BIG_KEYS, dw, &h), 0);
	ck_assert_int_eq(dml_wait(d, h), 0);
	for (size_t i = 0; i < BIG_SPARSE; i += BATCH) {
		ck_assert_int_eq(dml_pull(d, 1, keys + i, BATCH, sw + i, &h), 0);
		ck_assert_int_eq(dml_wait(d, h), 0);
	}
}

/*
 * A server joining a job receives a quarter of a 2M-key dense table and a
 * third of a sparse one, in many frames (4 MiB of rows each, and at most
 * max_keys = 1000 sparse rows each), while the frames in flight are bounded;
 * every value and momentum arrives.
 */
START_TEST(test_remap_many_frames)
{
	const uint32_t one[] = { 1 }, two[] = { 1, 2 };
	const char *limits = "[limits]\nmax_keys = 1000\n";
	struct dml_test_env *env;
	struct dml_fake_sched *f;
	struct dml_test_server *s[2];
	struct dml_test_server_conf c = { 0 };
	char extra[64];
	struct job j;
	uint64_t *keys = dml_xmalloc(BIG_SPARSE * sizeof(uint64_t));
	float *dg = dml_xmalloc(BIG_KEYS * sizeof(float)), *sg = dml_xmalloc(BIG_SPARSE * 4);
	float *d1 = dml_xmalloc(BIG_KEYS * sizeof(float)), *s1 = dml_xmalloc(BIG_SPARSE * 4);
	float *d2 = dml_xmalloc(BIG_KEYS * sizeof(float)), *s2 = dml_xmalloc(BIG_SPARSE * 4);
	dml_opts_t *o;
	dml_t *d;

	ck_assert_int_eq(dml_test_env_new(&env), 0);
	ck_assert_int_eq(dml_fake_sched_start(dml_test_env_secret(env), &f), 0);
	snprintf(extra, sizeof(extra), "scheduler = 127.0.0.1:%u\n", dml_fake_sched_port(f));
	c.staleness = -1;
	c.server_extra = extra;
	c.extra = limits;
	big_job(&j);
	for (int i = 0; i < 2; i++) {
		c.node_id = (uint32_t)i + 1;
		ck_assert_int_eq(dml_test_server_start(env, &c, &s[i]), 0);
		ck_assert_int_eq(dml_fake_sched_wait_registered(f, DML__ROLE__SERVER,
								c.node_id, WAIT_MS,
								j.addr[i + 1],
								sizeof(j.addr[1])), 0);
	}
	job_map(&j, 1, one, 1, big_v1, 2);
	install_all(f, &j, one, 1, 0);
	for (size_t i = 0; i < BIG_SPARSE; i++)
		keys[i] = i * 0x2545f4914f6cdd1dull + 99;
	d = client(env, s, 1, 1, JOB, &o);
	big_step(d, keys, dg, sg, 0);
	big_step(d, keys, dg, sg, 1);
	big_pull(d, keys, d1, s1);
	dml_close(d);
	dml_opts_free(o);

	job_map(&j, 2, two, 2, big_v2, 4);
	install_all(f, &j, two, 2, 0);
	expect_log(s[1], "job 7: map v2 complete in ");
	d = client(env, s, 2, 1, JOB, &o);
	big_pull(d, keys, d2, s2);
	ck_assert(memcmp(d1, d2, BIG_KEYS * sizeof(float)) == 0);
	ck_assert(memcmp(s1, s2, BIG_SPARSE * sizeof(float)) == 0);
	/* The momentum came along: one more step agrees with the formula. */
	big_step(d, keys, dg, sg, 2);
	big_pull(d, keys, d2, s2);
	for (uint64_t k = 0; k < BIG_KEYS; k += 997) {
		float v1 = grad_of(k, 0, 0), v2 = MOMENTUM * v1 + grad_of(k, 0, 1);
		float v3 = MOMENTUM * v2 + grad_of(k, 0, 2);

		ck_assert_msg(fabsf(d2[k] - (d1[k] - LR * v3)) <= TOL, "key %llu",
			      (unsigned long long)k);
	}
	dml_close(d);
	dml_opts_free(o);
	all_down(s, 2, f, env);
	free(keys);
	free(dg);
	free(sg);
	free(d1);
	free(s1);
	free(d2);
	free(s2);
}
END_TEST

static const struct range_def mid_v2[] = {
	{ 0, 0, 100, 1 }, { 0, 100, DKEYS, 2 },
	{ 1, 0, H / 4, 1 }, { 1, H / 4, H, 2 },
};
static const struct range_def mid_v3[] = {
	{ 0, 0, 300, 1 }, { 0, 300, DKEYS, 2 },
	{ 1, 0, H / 8 * 3, 1 }, { 1, H / 8 * 3, H, 2 },
};

/*
 * Server 1 gets v2 (give 100..249 to server 2) but server 2 does not, so it
 * refuses those rows; then v3 reaches both: server 1 takes back what it had
 * not delivered and receives 250..299 from server 2. Nothing is lost.
 */
START_TEST(test_remap_newer_map_midway)
{
	static struct model md;
	static float p1d[DKEYS * DW], p1s[NSPARSE * SW], p3d[DKEYS * DW], p3s[NSPARSE * SW];
	const uint32_t one[] = { 1 }, two[] = { 1, 2 };
	const char *const refused[] = { "did not take rows yet", NULL };
	struct dml_test_env *env;
	struct dml_fake_sched *f;
	struct dml_test_server *s[2];
	struct job j;

	ck_assert_int_eq(dml_test_env_new(&env), 0);
	ck_assert_int_eq(dml_fake_sched_start(dml_test_env_secret(env), &f), 0);
	job_init(&j, JOB);
	s[0] = start_server(env, f, 1, NULL, j.addr[1], sizeof(j.addr[1]));
	s[1] = start_server(env, f, 2, NULL, j.addr[2], sizeof(j.addr[2]));
	job_map(&j, 1, two, 2, v1_ranges, 4);
	install_all(f, &j, two, 2, 0);
	first_steps(env, s, 2, &md, 777, p1d, p1s);

	/* v2 to server 1 only: it only gives, so it ACKs; server 2 refuses. */
	job_map(&j, 2, two, 2, mid_v2, 4);
	install_all(f, &j, one, 1, 0);
	ck_assert_int_eq(dml_test_server_log_wait(s[0], 0, refused, WAIT_MS), 0);
	job_map(&j, 3, two, 2, mid_v3, 4);
	install_all(f, &j, two, 2, 0);
	expect_log(s[0], "job 7: map v3: giving key hashes 1610612736..2147483647 of table 1 "
		   "to server 2; receiving keys 250..299 of table 0 from server 2");
	expect_log(s[0], "job 7: map v3 complete in ");
	expect_log(s[1], "job 7: map v3 complete in ");
	/* v2 reaching server 2 late is stale: ACKed, nothing changes. */
	job_map(&j, 2, two, 2, mid_v2, 4);
	install_all(f, &j, two + 1, 1, 0);

	kept_then_step(env, s, 2, &md, p1d, p1s, p3d, p3s, 2, "v3");
	all_down(s, 2, f, env);
}
END_TEST

/* Both tables on server 1, then table 0 split with server 2. */
static const struct range_def held_v2[] = {
	{ 0, 0, 250, 1 }, { 0, 250, DKEYS, 2 }, { 1, 0, H, 1 },
};

/*
 * Pulls parked by the staleness bound follow the map: one whose key moves
 * away is answered DML_ERANGE with the new version, one whose key stays
 * keeps waiting, and a new job answers it DML_ESTATE.
 */
START_TEST(test_remap_held_pulls)
{
	const uint32_t one[] = { 1 }, two[] = { 1, 2 };
	struct dml_test_env *env;
	struct dml_fake_sched *f;
	struct dml_test_server *s[2];
	struct job j, k;
	struct raw w;
	struct answer a;
	uint64_t moved, kept;

	ck_assert_int_eq(dml_test_env_new(&env), 0);
	ck_assert_int_eq(dml_fake_sched_start(dml_test_env_secret(env), &f), 0);
	job_init(&j, JOB);
	j.spec.staleness = 0;
	j.spec.workers = 2;         /* one never comes: clock-1 pulls wait */
	s[0] = start_server(env, f, 1, NULL, j.addr[1], sizeof(j.addr[1]));
	s[1] = start_server(env, f, 2, NULL, j.addr[2], sizeof(j.addr[2]));
	job_map(&j, 1, one, 1, one_ranges, 2);
	install_all(f, &j, one, 1, 0);
	raw_open(env, dml_test_server_port(s[0]), DML__ROLE__WORKER, 9, 1, JOB, 0, &w);
	moved = raw_pull_send(&w, JOB, 400, 1);
	kept = raw_pull_send(&w, JOB, 10, 1);
	/* A pull at clock 0 is answered at once, after the two parked ones. */
	raw_pull_key(&w, JOB, 11, &a);
	ck_assert_int_eq(a.type, DML__MSG_TYPE__PULL_REPLY);

	job_map(&j, 2, two, 2, held_v2, 3);
	install_all(f, &j, two, 2, 0);
	raw_answer(&w, moved, &a);
	ck_assert_int_eq(a.code, DML_ERANGE);
	ck_assert_uint_eq(a.map_version, 2);
	raw_pull_key(&w, JOB, 12, &a);
	ck_assert_int_eq(a.type, DML__MSG_TYPE__PULL_REPLY);

	job_init(&k, JOB + 1);
	memcpy(k.addr, j.addr, sizeof(k.addr));
	job_map(&k, 1, one, 1, one_ranges, 2);
	install_all(f, &k, one, 1, 0);
	raw_answer(&w, kept, &a);
	ck_assert_int_eq(a.code, DML_ESTATE);
	ck_assert_str_eq(a.message, "job 7 was replaced on this server");
	raw_close(&w);

	all_down(s, 2, f, env);
}
END_TEST

/* CLOCK: r finished the clocks before clock. */
static void raw_clock(struct raw *r, uint64_t clock)
{
	Dml__Meta m = DML__META__INIT;

	m.type = DML__MSG_TYPE__CLOCK;
	m.clock = clock;
	raw_send(r, &m, NULL, 0);
}

/* The server closed r's connection (nothing more was sent on it). */
static void raw_expect_closed(struct raw *r)
{
	struct pollfd pfd = { .fd = r->fd, .events = POLLIN };
	char c;

	ck_assert_int_eq(poll(&pfd, 1, WAIT_MS), 1);
	ck_assert_int_le(read(r->fd, &c, 1), 0);
}

/* Worker id's clock in the server's STATS (asked over ctl); -1 if absent. */
static int64_t stats_clock(struct raw *ctl, uint32_t id)
{
	Dml__Meta m = DML__META__INIT;
	struct answer a;
	int64_t clock = -1;

	m.type = DML__MSG_TYPE__STATS;
	raw_call(ctl, &m, NULL, 0, &a);
	ck_assert_ptr_nonnull(a.stats);
	for (size_t i = 0; i < a.stats->n_workers; i++)
		if (a.stats->workers[i]->worker == id)
			clock = (int64_t)a.stats->workers[i]->clock;
	answer_free(&a);
	return clock;
}

/*
 * A hung worker keeps its connection open, so the server would wait for
 * its clock for ever. The server names it to the scheduler (STRAGGLER) once
 * a pull has waited for it a second; not a worker whose own pull waits.
 * The scheduler's EVICT drops it from the clock set and closes the
 * connection: a pull parked for its clock is answered. When it connects
 * again it joins at the slowest clock.
 */
START_TEST(test_evict_drops_a_hung_worker)
{
	const uint32_t one[] = { 1 };
	struct dml_test_env *env;
	struct dml_fake_sched *f;
	struct dml_test_server *s[1];
	struct job j;
	struct raw a, b, ctl;
	struct answer ans;
	uint64_t parked, at, held_us;
	uint32_t who;
	uint16_t port;

	ck_assert_int_eq(dml_test_env_new(&env), 0);
	ck_assert_int_eq(dml_fake_sched_start(dml_test_env_secret(env), &f), 0);
	job_init(&j, JOB);
	j.spec.staleness = 0;
	j.spec.workers = 2;
	s[0] = start_server(env, f, 1, NULL, j.addr[1], sizeof(j.addr[1]));
	port = dml_test_server_port(s[0]);
	job_map(&j, 1, one, 1, one_ranges, 2);
	install_all(f, &j, one, 1, 0);
	raw_open(env, port, DML__ROLE__WORKER, 9, 1, JOB, 0, &a);
	/* Its pull waits for the second worker to join: it waits itself, so
	 * the server names nobody to the scheduler. */
	parked = raw_pull_send(&a, JOB, 10, 0);
	poll(NULL, 0, 1500);
	ck_assert_uint_eq(dml_fake_sched_stragglers(f, 1), 0);
	raw_open(env, port, DML__ROLE__WORKER, 11, 1, JOB, 0, &b);
	raw_answer(&a, parked, &ans);
	ck_assert_int_eq(ans.type, DML__MSG_TYPE__PULL_REPLY);
	raw_open(env, port, DML__ROLE__CONTROL, 0, 1, 0, 0, &ctl);
	raw_clock(&a, 1);
	parked = raw_pull_send(&a, JOB, 10, 1);
	/* The CLOCK came on another connection than STATS asks on: wait for it. */
	for (int i = 0; i < WAIT_MS / 10 && stats_clock(&ctl, 9) != 1; i++)
		poll(NULL, 0, 10);
	ck_assert_int_eq(stats_clock(&ctl, 9), 1);

	/* Worker 11 makes no clock and has no pull waiting: the server tells
	 * the scheduler, once a pull has waited a second. */
	ck_assert_int_eq(dml_fake_sched_straggler_wait(f, 1, 0, WAIT_MS, &who, &at, &held_us), 0);
	ck_assert_uint_eq(who, 11);
	ck_assert_uint_eq(at, 0);
	ck_assert_uint_ge(held_us, 1000000);
	expect_log(s[0], "job 7: pulls have waited");
	ck_assert_int_eq(dml_fake_sched_evict(f, 1, JOB, 11), 0);
	raw_answer(&a, parked, &ans);
	ck_assert_int_eq(ans.type, DML__MSG_TYPE__PULL_REPLY);
	expect_log(s[0], "job 7: the scheduler lost worker 11 at clock 0: dropped from the "
		   "clock set, 1 connections closed; slowest clock is now 1");
	raw_expect_closed(&b);
	raw_close(&b);

	/* Back, it holds nobody back: it starts at the slowest clock. */
	raw_open(env, port, DML__ROLE__WORKER, 11, 1, JOB, 0, &b);
	ck_assert_int_eq(stats_clock(&ctl, 11), 1);
	parked = raw_pull_send(&a, JOB, 10, 2);
	raw_clock(&b, 2);
	raw_clock(&a, 2);
	raw_answer(&a, parked, &ans);
	ck_assert_int_eq(ans.type, DML__MSG_TYPE__PULL_REPLY);
	raw_close(&a);
	raw_close(&b);
	raw_close(&ctl);
	all_down(s, 1, f, env);
}
END_TEST

/* Server id with a [store] in the environment's folder, its port pinned. */
static struct dml_test_server *start_store_server(struct dml_test_env *env,
						  struct dml_fake_sched *f, uint32_t id,
						  char *addr, size_t addrlen)
{
	struct dml_test_server *s;
	char *store;

	ck_assert_int_gt(asprintf(&store, "[store]\npath = %s/store-%u\n",
				  dml_test_env_dir(env), id), 0);
	s = server_up(env, f, id, NULL, store, addr, addrlen);
	free(store);
	ck_assert_int_eq(dml_test_server_pin_port(s), 0);
	return s;
}

/* Servers 1 and 2 with a [store], job j (of run) installed at v1 on both. */
static void stores_at_v1(struct dml_test_env **env, struct dml_fake_sched **f,
			 struct job *j, struct dml_test_server **s, uint64_t run)
{
	const uint32_t ids2[] = { 1, 2 };

	ck_assert_int_eq(dml_test_env_new(env), 0);
	ck_assert_int_eq(dml_fake_sched_start(dml_test_env_secret(*env), f), 0);
	job_init(j, JOB);
	j->map.run = run;
	s[0] = start_store_server(*env, *f, 1, j->addr[1], sizeof(j->addr[1]));
	s[1] = start_store_server(*env, *f, 2, j->addr[2], sizeof(j->addr[2]));
	job_map(j, 1, ids2, 2, v1_ranges, 4);
	install_all(*f, j, ids2, 2, 0);
}

/* SIGKILL server id (s) and start it again; its log's size before. */
static size_t crash_restart(struct dml_fake_sched *f, struct dml_test_server *s, uint32_t id)
{
	size_t from = dml_test_server_log_size(s);

	dml_test_server_kill(s);
	ck_assert_int_eq(dml_test_server_restart(s), 0);
	ck_assert_int_eq(dml_fake_sched_wait_registered(f, DML__ROLE__SERVER, id, WAIT_MS, NULL,
							0), 0);
	return from;
}

/*
 * A server that joins a job with a [store] logs the rows that move in, and
 * acknowledges them once they are on disk (their senders free them then):
 * SIGKILLed after the move and a step, and given the map again, it serves
 * them from its log at once, bit for bit, momentum included, instead of
 * waiting for rows nobody holds any more.
 */
START_TEST(test_joiner_restart_keeps_moved_rows)
{
	static struct model md;
	static float before_d[DKEYS * DW], before_s[NSPARSE * SW];
	static float after_d[DKEYS * DW], after_s[NSPARSE * SW];
	const uint32_t ids3[] = { 1, 2, 3 }, id3[] = { 3 };
	struct dml_test_env *env;
	struct dml_fake_sched *f;
	struct dml_test_server *s[3];
	struct job j;
	dml_opts_t *o;
	dml_t *d;
	size_t from;

	stores_at_v1(&env, &f, &j, s, 0x5eed);
	first_steps(env, s, 2, &md, 12345, NULL, NULL);

	/* Server 3 joins: rows of both servers move to it; then a step. */
	s[2] = start_store_server(env, f, 3, j.addr[3], sizeof(j.addr[3]));
	job_map(&j, 2, ids3, 3, v2_ranges, 6);
	install_all(f, &j, ids3, 3, 0);
	expect_log(s[2], "job 7: map v2 complete in ");
	d = client(env, s, 3, 1, JOB, &o);
	step(d, &md, 2);
	pull_all(d, &md, before_d, before_s);
	dml_close(d);
	dml_opts_free(o);

	/* It dies; started again, the same map is ACKed from its log alone. */
	from = crash_restart(f, s[2], 3);
	install_all(f, &j, id3, 1, 0);
	{
		const char *const held[] = { "the log held them", NULL };

		ck_assert_int_ge(dml_test_server_log_wait(s[2], from, held, WAIT_MS), 0);
	}
	kept_then_step(env, s, 3, &md, before_d, before_s, after_d, after_s, 3,
		       "after the restart");
	all_down(s, 3, f, env);
}
END_TEST

/*
 * A server with a [store] that dies in the middle of a move it gives rows
 * in: servers 1 and 2 get v2 and trade rows, but server 3, which is to
 * receive from both, does not have v2 yet, so their rows for it wait.
 * Server 1 is SIGKILLed; started again and given v2, it rebuilds its rows
 * of v1 and what moved in from its log, ACKs v2 at once and sends server 3
 * its share (and server 2 again what it already has, which server 2
 * acknowledges unapplied). Every value arrives bit for bit.
 */
START_TEST(test_sender_restart_resumes_its_move)
{
	static struct model md;
	static float p1d[DKEYS * DW], p1s[NSPARSE * SW], p2d[DKEYS * DW], p2s[NSPARSE * SW];
	const uint32_t ids2[] = { 1, 2 }, ids3[] = { 1, 2, 3 };
	const char *const resumed[] = { "resuming the move from map v1 to v2", NULL };
	struct dml_test_env *env;
	struct dml_fake_sched *f;
	struct dml_test_server *s[3];
	struct job j;
	size_t from;

	stores_at_v1(&env, &f, &j, s, 0xbeef);
	first_steps(env, s, 2, &md, 4242, p1d, p1s);

	/* v2 on servers 1 and 2 only: server 3 is up but has no job yet. */
	s[2] = start_store_server(env, f, 3, j.addr[3], sizeof(j.addr[3]));
	job_map(&j, 2, ids3, 3, v2_ranges, 6);
	install_all(f, &j, ids2, 2, 0);
	expect_log(s[0], "job 7: map v2: giving");

	from = crash_restart(f, s[0], 1);
	install_all(f, &j, ids2, 1, 0);
	ck_assert_int_ge(dml_test_server_log_wait(s[0], from, resumed, WAIT_MS), 0);

	/* Server 3 gets v2 at last: both send it its rows. */
	install_all(f, &j, ids3 + 2, 1, 0);
	expect_log(s[2], "job 7: map v2 complete in ");
	kept_then_step(env, s, 3, &md, p1d, p1s, p2d, p2s, 2, "after the resumed move");
	all_down(s, 3, f, env);
}
END_TEST

static Suite *remap_suite(void)
{
	Suite *s = suite_create("remap");
	TCase *tc = tcase_create("remap");

	tcase_set_timeout(tc, TEST_TIMEOUT_S);
	tcase_add_test(tc, test_remap_moves_rows_and_state);
	tcase_add_test(tc, test_remap_refusals);
	tcase_add_test(tc, test_remap_many_frames);
	tcase_add_test(tc, test_remap_newer_map_midway);
	tcase_add_test(tc, test_remap_held_pulls);
	tcase_add_test(tc, test_evict_drops_a_hung_worker);
	tcase_add_test(tc, test_joiner_restart_keeps_moved_rows);
	tcase_add_test(tc, test_sender_restart_resumes_its_move);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return dml_check_run(remap_suite());
}
