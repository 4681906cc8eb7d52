/*
 * check_follow_fixture.c - check_follow's fixture: real dml-server
 * processes and the scripted scheduler, the maps it hands out (right,
 * split or all on one server), and libdml calls that must succeed.
 */
#define _GNU_SOURCE
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "test/check_follow.h"
#include "test/check_run.h"
#include "test/fake_sched.h"
#include "test/harness.h"
#include "proto/log.h"
#include "proto/util.h"

/* ---- fixture ------------------------------------------------------------- */

uint64_t elapsed_ms(uint64_t since_ns)
{
	return (dml_now_ns() - since_ns) / 1000000u;
}

static void spec_init(struct follow *f)
{
	dml__job_spec__init(&f->spec);
	for (int i = 0; i < 2; i++) {
		dml__table_spec__init(&f->tables[i]);
		f->tables[i].id = (uint32_t)i;
		f->tables[i].optimizer = "add";
		f->tablep[i] = &f->tables[i];
	}
	f->tables[0].dense = 1;
	f->tables[0].width = DENSE_WIDTH;
	f->tables[0].keys = DENSE_KEYS;
	f->tables[1].width = SPARSE_WIDTH;
	f->spec.name = "follow";
	f->spec.app = "test";
	f->spec.n_tables = 2;
	f->spec.tables = f->tablep;
}

/* Servers A and B (and C, a second shard 0/2, when with_c) and the fake. */
void follow_start(struct follow *f, int64_t staleness, int with_c)
{
	struct dml_test_server_conf conf = { .staleness = staleness, .workers = 1,
					     .shard_count = 2, .tables = TABLES };

	memset(f, 0, sizeof(*f));
	spec_init(f);
	ck_assert_int_eq(dml_test_env_new(&f->env), 0);
	for (int i = 0; i < (with_c ? NSRV : SRV_C); i++) {
		conf.shard_index = i == SRV_B ? 1 : 0;
		conf.node_id = (uint32_t)(i + 1);
		ck_assert_msg(dml_test_server_start(f->env, &conf, &f->srv[i]) == 0,
			      "server %d did not start", i);
	}
	ck_assert_int_eq(dml_fake_sched_start(dml_test_env_secret(f->env), &f->fake), 0);
}

void follow_stop(struct follow *f)
{
	dml_fake_sched_stop(f->fake);
	for (int i = 0; i < NSRV; i++)
		if (f->srv[i])
			ck_assert_int_eq(dml_test_server_stop(f->srv[i],
							      DML_TEST_STOP_TIMEOUT_MS), 0);
	dml_test_env_free(f->env);
}

void map_init(struct mapbuf *b, uint64_t version)
{
	memset(b, 0, sizeof(*b));
	dml__shard_map__init(&b->map);
	b->map.job = 0;   /* config-file tables are job 0 */
	b->map.version = version;
	b->map.servers = b->srvp;
	b->map.ranges = b->rngp;
}

/* Server `which` (node id which + 1), reached at port. */
void map_server_at(struct mapbuf *b, int which, uint16_t port)
{
	size_t i = b->map.n_servers++;

	dml__shard_server__init(&b->srv[i]);
	snprintf(b->addr[i], sizeof(b->addr[i]), "127.0.0.1:%u", port);
	b->srv[i].node_id = (uint32_t)(which + 1);
	b->srv[i].address = b->addr[i];
	b->srvp[i] = &b->srv[i];
}

void map_server(struct mapbuf *b, const struct follow *f, int which)
{
	map_server_at(b, which, dml_test_server_port(f->srv[which]));
}

void map_range(struct mapbuf *b, uint32_t table, uint64_t begin, uint64_t end,
	       int which)
{
	size_t i = b->map.n_ranges++;

	dml__shard_range__init(&b->rng[i]);
	b->rng[i].table = table;
	b->rng[i].begin = begin;
	b->rng[i].end = end;
	b->rng[i].server = (uint32_t)(which + 1);
	b->rngp[i] = &b->rng[i];
}

/* first holds the low halves, second the high halves, as the fake says. */
void serve_split(struct follow *f, uint64_t version, int first, int second)
{
	struct mapbuf b;

	map_init(&b, version);
	map_server(&b, f, first);
	map_server(&b, f, second);
	map_range(&b, 0, 0, DENSE_KEYS / 2, first);
	map_range(&b, 0, DENSE_KEYS / 2, DENSE_KEYS, second);
	map_range(&b, 1, 0, HASH_HALF, first);
	map_range(&b, 1, HASH_HALF, 2 * HASH_HALF, second);
	dml_fake_sched_set_map(f->fake, &f->spec, &b.map);
}

/* The truth: A holds the low halves, B the high ones. */
void serve_right(struct follow *f, uint64_t version)
{
	serve_split(f, version, SRV_A, SRV_B);
}

/* A wrong map: A alone holds everything. */
void serve_all_on_a(struct follow *f, uint64_t version)
{
	struct mapbuf b;

	map_init(&b, version);
	map_server(&b, f, SRV_A);
	map_range(&b, 0, 0, DENSE_KEYS, SRV_A);
	map_range(&b, 1, 0, 2 * HASH_HALF, SRV_A);
	dml_fake_sched_set_map(f->fake, &f->spec, &b.map);
}

dml_opts_t *opts_for(struct follow *f, uint16_t sched_port)
{
	dml_opts_t *o;
	char v[64];

	ck_assert_int_eq(dml_opts_new(&o), 0);
	snprintf(v, sizeof(v), "127.0.0.1:%u", sched_port);
	ck_assert_int_eq(dml_opts_set(o, "scheduler", v), 0);
	ck_assert_int_eq(dml_opts_set(o, "secret_file", dml_test_env_secret(f->env)), 0);
	ck_assert_int_eq(dml_opts_set(o, "worker_id", "1"), 0);
	ck_assert_int_eq(dml_opts_set(o, "connect_timeout_ms", "10000"), 0);
	return o;
}

dml_t *connect_ok(struct follow *f, dml_opts_t *o)
{
	dml_t *d = NULL;
	int rc = dml_connect(o, &d);

	ck_assert_msg(rc == 0, "dml_connect: %s", dml_strerror(rc));
	dml_opts_free(o);
	return d;
}

uint64_t map_version(dml_t *d)
{
	uint64_t v = 99;

	ck_assert_int_eq(dml_map_version(d, &v), 0);
	return v;
}

void wait_ok(dml_t *d, dml_handle_t h, const char *what)
{
	int rc = dml_wait(d, h);

	ck_assert_msg(rc == 0, "%s: %s (%s)", what, dml_strerror(rc), dml_error_detail(d));
}

/* Distinct sparse keys, about half of them hashing to each server. */
void sparse_keys(uint64_t *keys)
{
	for (size_t i = 0; i < NSPARSE; i++)
		keys[i] = 1000003u * i + 7;
}

/* Every value of the dense table, then of the sparse keys, must be want. */
void expect_all(dml_t *d, float want)
{
	float dense[DENSE_KEYS * DENSE_WIDTH], sparse[NSPARSE * SPARSE_WIDTH];
	uint64_t keys[NSPARSE];
	dml_handle_t h1, h2;

	sparse_keys(keys);
	ck_assert_int_eq(dml_pull_range(d, 0, 0, DENSE_KEYS, dense, &h1), 0);
	ck_assert_int_eq(dml_pull(d, 1, keys, NSPARSE, sparse, &h2), 0);
	wait_ok(d, h1, "dense pull");
	wait_ok(d, h2, "sparse pull");
	for (size_t i = 0; i < DENSE_KEYS * DENSE_WIDTH; i++)
		ck_assert_msg(dense[i] == want, "dense value %zu is %g, not %g", i, dense[i],
			      want);
	for (size_t i = 0; i < NSPARSE * SPARSE_WIDTH; i++)
		ck_assert_msg(sparse[i] == want, "sparse value %zu (key %llu) is %g, not %g", i,
			      (unsigned long long)keys[i / SPARSE_WIDTH], sparse[i], want);
}

/*
 * n pushes of ones to the whole dense table and to every sparse key, all in
 * flight at once, then waited: each must succeed.
 */
void push_ones(dml_t *d, int n)
{
	static float ones[NSPARSE * SPARSE_WIDTH];
	uint64_t keys[NSPARSE];
	dml_handle_t h[2 * 16];

	ck_assert_int_le(n, 16);
	sparse_keys(keys);
	for (size_t i = 0; i < NSPARSE * SPARSE_WIDTH; i++)
		ones[i] = 1.0f;
	for (int i = 0; i < n; i++) {
		ck_assert_int_eq(dml_push_range(d, 0, 0, DENSE_KEYS, ones, &h[2 * i]), 0);
		ck_assert_int_eq(dml_push(d, 1, keys, NSPARSE, ones, &h[2 * i + 1]), 0);
	}
	for (int i = 0; i < 2 * n; i++)
		wait_ok(d, h[i], "push");
}
