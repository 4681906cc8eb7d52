/*
 * What the files of check_follow share: the fixture (check_follow_fixture.c)
 * and the scheduler tests (check_follow_sched.c) for the suite.
 */
#ifndef DML_TEST_CHECK_FOLLOW_H
#define DML_TEST_CHECK_FOLLOW_H

#include <check.h>
#include <stdint.h>

#include "worker/dml.h"
#include "proto/dml.pb-c.h"
#include "test/fake_sched.h"
#include "test/harness.h"

#define TEST_TIMEOUT_S 60
#define DENSE_KEYS 100
#define DENSE_WIDTH 2
#define SPARSE_WIDTH 3
#define NSPARSE 200
#define HASH_HALF (UINT64_C(1) << 31)     /* half of the sparse hash space */
#define TABLES \
	"[table]\nid = 0\nkind = dense\nwidth = 2\nkeys = 100\noptimizer = add\n" \
	"[table]\nid = 1\nkind = sparse\nwidth = 3\noptimizer = add\n"

enum { SRV_A, SRV_B, SRV_C, NSRV };

struct follow {
	struct dml_test_env *env;
	struct dml_test_server *srv[NSRV];  /* A shard 0/2, B 1/2, C (optional) 0/2 */
	struct dml_fake_sched *fake;
	Dml__JobSpec spec;
	Dml__TableSpec tables[2];
	Dml__TableSpec *tablep[2];
};

/* A map under construction, pointing into itself. */
struct mapbuf {
	Dml__ShardMap map;
	Dml__ShardServer srv[NSRV];
	Dml__ShardServer *srvp[NSRV];
	Dml__ShardRange rng[8];
	Dml__ShardRange *rngp[8];
	char addr[NSRV][32];
};

/* Milliseconds since since_ns (dml_now_ns). */
uint64_t elapsed_ms(uint64_t since_ns);
/* Servers A and B (and C, a second shard 0/2, when with_c) and the fake. */
void follow_start(struct follow *f, int64_t staleness, int with_c);
/* Stop what follow_start started. */
void follow_stop(struct follow *f);
/* An empty map of version, for job 0 (the config-file tables). */
void map_init(struct mapbuf *b, uint64_t version);
/* Server `which` (node id which + 1), reached at port. */
void map_server_at(struct mapbuf *b, int which, uint16_t port);
/* Server `which` at the port its process listens on. */
void map_server(struct mapbuf *b, const struct follow *f, int which);
/* Keys (or hashes) [begin, end) of table on server `which`. */
void map_range(struct mapbuf *b, uint32_t table, uint64_t begin, uint64_t end,
	       int which);
/* first holds the low halves, second the high halves, as the fake says. */
void serve_split(struct follow *f, uint64_t version, int first, int second);
/* The truth: A holds the low halves, B the high ones. */
void serve_right(struct follow *f, uint64_t version);
/* A wrong map: A alone holds everything. */
void serve_all_on_a(struct follow *f, uint64_t version);
/* Options of a worker that asks the scheduler at sched_port for its map. */
dml_opts_t *opts_for(struct follow *f, uint16_t sched_port);
/* dml_connect with o (freed), which must succeed. */
dml_t *connect_ok(struct follow *f, dml_opts_t *o);
/* The map version d routes by. */
uint64_t map_version(dml_t *d);
/* dml_wait on h, which must succeed (what names it). */
void wait_ok(dml_t *d, dml_handle_t h, const char *what);
/* Distinct sparse keys, about half of them hashing to each server. */
void sparse_keys(uint64_t *keys);
/* Every value of the dense table, then of the sparse keys, must be want. */
void expect_all(dml_t *d, float want);
/*
 * n pushes of ones to the whole dense table and to every sparse key, all in
 * flight at once, then waited: each must succeed.
 */
void push_ones(dml_t *d, int n);

/* The tests of the scheduler missing, refusing or wrong, and of the options. */
void check_follow_sched_tests(TCase *tc);

#endif
