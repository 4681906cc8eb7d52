/*
 * check_remap's scaffolding (see check_remap.h): job specs and maps, the
 * servers and clients of a test, a blocking raw client that sets HELLO
 * fields and reads ERROR fields libdml does not expose, and the model the
 * servers must agree with.
 */
#define _GNU_SOURCE
#include <check.h>
#include <math.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "proto/auth.h"
#include "test/check_remap.h"
#include "proto/dml_error.h"
#include "test/fake_sched.h"
#include "proto/frame.h"
#include "test/harness.h"
#include "test/raw_frame.h"
#include "shard/shardmap.h"
#include "proto/util.h"

/* ---- job spec and maps ---------------------------------------------------- */

void job_init(struct job *j, uint32_t id)
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

void job_map(struct job *j, uint64_t version, const uint32_t *servers, size_t ns,
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
void install_all(struct dml_fake_sched *f, struct job *j, const uint32_t *ids,
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
struct dml_test_server *server_up(struct dml_test_env *env, struct dml_fake_sched *f,
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

struct dml_test_server *start_server(struct dml_test_env *env,
				     struct dml_fake_sched *f, uint32_t id,
				     const char *tables, char *addr, size_t addrlen)
{
	return server_up(env, f, id, tables, NULL, addr, addrlen);
}

void expect_log(const struct dml_test_server *s, const char *needle)
{
	const char *const needles[] = { needle, NULL };

	ck_assert_msg(dml_test_server_log_wait(s, 0, needles, WAIT_MS) == 0,
		      "log of the server lacks: %s", needle);
}

/* libdml, standalone, on the servers in map order, for job `job`; the
 * options live as long as the connection (see dml.h). */
dml_t *client(struct dml_test_env *env, struct dml_test_server *const *servers,
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

static Dml__Meta *raw_read(struct raw *r, uint8_t **payload)
{
	return raw_frame_read(r->fd, payload);
}

void raw_send(struct raw *r, Dml__Meta *m, const void *payload, uint32_t len)
{
	raw_frame_send(r->fd, m, payload, len);
}

/* Connect and authenticate as (role, node_id), naming job and clock. */
void raw_open(struct dml_test_env *env, uint16_t port, uint32_t role,
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

void raw_close(struct raw *r)
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
	a->map_version = rep->map_version;
	if (rep->error) {
		a->code = rep->error->code;
		snprintf(a->message, sizeof(a->message), "%s", rep->error->message);
	}
	if (rep->type == DML__MSG_TYPE__PULL_REPLY && pl)
		memcpy(a->values, pl, rep->payload_bytes < sizeof(a->values)
		       ? rep->payload_bytes : sizeof(a->values));
	if (rep->stats)
		a->stats = dml_msg_copy(&rep->stats->base);
	dml_meta_free(rep);
	free(pl);
}

/* Send m and wait for its answer. */
void raw_call(struct raw *r, Dml__Meta *m, const void *payload, uint32_t len,
	      struct answer *a)
{
	raw_answer(r, raw_request(r, m, payload, len), a);
}

void answer_free(struct answer *a)
{
	if (a->stats)
		dml__stats__free_unpacked(a->stats, NULL);
	a->stats = NULL;
}

/* A dense push of one key of table 0 (width DW), of weight (0: none sent). */
void raw_push_key_weighted(struct raw *r, uint32_t job, uint64_t key, uint64_t seq,
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

void raw_push_key(struct raw *r, uint32_t job, uint64_t key, uint64_t seq,
		  const float *g, struct answer *a)
{
	raw_push_key_weighted(r, job, key, seq, g, 0.0f, a);
}

/* A dense pull of one key of table 0 at clock; its request id. */
uint64_t raw_pull_send(struct raw *r, uint32_t job, uint64_t key, uint64_t clock)
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

void raw_pull_key(struct raw *r, uint32_t job, uint64_t key, struct answer *a)
{
	raw_answer(r, raw_pull_send(r, job, key, 0), a);
}

/* ---- the model the servers must agree with ------------------------------------ */

float grad_of(uint64_t key, unsigned j, int step)
{
	return (float)((key % 1000 * 7 + j * 3 + (unsigned)step * 11) % 17) / 8.0f - 1.0f;
}

/* Momentum as the server applies it (table.h): v = m v + g; w -= lr v. */
void ref_step(float *w, float *v, const float *g, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		v[i] = MOMENTUM * v[i] + g[i];
		w[i] -= LR * v[i];
	}
}

void grads(const struct model *md, int step, float *dg, float *sg)
{
	for (uint64_t k = 0; k < DKEYS; k++)
		for (unsigned j = 0; j < DW; j++)
			dg[k * DW + j] = grad_of(k, j, step);
	for (size_t i = 0; i < NSPARSE; i++)
		for (unsigned j = 0; j < SW; j++)
			sg[i * SW + j] = grad_of(md->keys[i], j, step);
}

/* One step pushed through d and applied to the model. */
void step(dml_t *d, struct model *md, int n)
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

void pull_all(dml_t *d, const struct model *md, float *dw, float *sw)
{
	dml_handle_t h1, h2;

	ck_assert_int_eq(dml_pull_range(d, 0, 0, DKEYS, dw, &h1), 0);
	ck_assert_int_eq(dml_pull(d, 1, md->keys, NSPARSE, sw, &h2), 0);
	ck_assert_int_eq(dml_wait(d, h1), 0);
	ck_assert_int_eq(dml_wait(d, h2), 0);
}

void assert_close(const float *got, const float *want, size_t n, const char *what)
{
	for (size_t i = 0; i < n; i++)
		ck_assert_msg(fabsf(got[i] - want[i]) <= TOL * (1.0f + fabsf(want[i])),
			      "%s value %zu: %g, expected %g", what, i, got[i], want[i]);
}

/* Servers 1 and 2, then 1, 2 and 3 with other shares (see the maps). */
/* Step n of the model, then every value must be the reference's. */
void step_matches(dml_t *d, struct model *md, int n, float *pd, float *ps,
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
void first_steps(struct dml_test_env *env, struct dml_test_server *const *s, size_t n,
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
void kept_then_step(struct dml_test_env *env, struct dml_test_server *const *s,
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
void all_down(struct dml_test_server **s, int n, struct dml_fake_sched *f,
	      struct dml_test_env *env)
{
	for (int i = 0; i < n; i++)
		ck_assert_int_eq(dml_test_server_stop(s[i], WAIT_MS), 0);
	dml_fake_sched_stop(f);
	dml_test_env_free(env);
}

const struct range_def v1_ranges[] = {
	{ 0, 0, 250, 1 }, { 0, 250, DKEYS, 2 },
	{ 1, 0, H / 2, 1 }, { 1, H / 2, H, 2 },
};
const struct range_def v2_ranges[] = {
	{ 0, 0, 167, 1 }, { 0, 167, 334, 2 }, { 0, 334, DKEYS, 3 },
	{ 1, 0, H / 4, 3 }, { 1, H / 4, H / 8 * 5, 1 }, { 1, H / 8 * 5, H, 2 },
};

/* A map with all of both tables on server 1. */
const struct range_def one_ranges[] = {
	{ 0, 0, DKEYS, 1 }, { 1, 0, H, 1 },
};
/* A gap in table 0. */
