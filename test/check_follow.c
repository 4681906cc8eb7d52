/*
 * check_follow.c - libdml following shard maps from a scheduler.
 *
 * Real dml-server processes (test/harness.h) hold fixed ranges from their
 * config files (shard 0/2 and 1/2, job 0), and a scripted scheduler in a
 * thread of the test (test/fake_sched.h) hands libdml maps that describe
 * them rightly or wrongly. A wrong map makes a server answer DML_ERANGE;
 * the client must fetch again, re-route, and complete the request with no
 * error and every push applied exactly once (tables use the `add`
 * optimizer, so a pull shows how often each push was applied). Covered: a
 * right map, a wrong one fixed at once or after a while, one never fixed
 * (request_timeout_ms), a server leaving the map (its link closes), dense
 * and sparse tables, the start clock, a scheduler that is not there, that
 * has no map, that refuses us, or sends maps that fail the checks, and the
 * options.
 *
 * Timing only bounds how long things may take, with wide margins.
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

#include "check_run.h"
#include "fake_sched.h"
#include "harness.h"
#include "log.h"
#include "util.h"

#define TEST_TIMEOUT_S 60
#define DENSE_KEYS 100
#define DENSE_WIDTH 2
#define SPARSE_WIDTH 3
#define NSPARSE 200
#define HASH_HALF (UINT64_C(1) << 31)     /* half of the sparse hash space */
#define TABLES \
	"[table]\nid = 0\nkind = dense\nwidth = 2\nkeys = 100\noptimizer = add\n" \
	"[table]\nid = 1\nkind = sparse\nwidth = 3\noptimizer = add\n"

/* ---- fixture ------------------------------------------------------------- */

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

static uint64_t elapsed_ms(uint64_t since_ns)
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
static void follow_start(struct follow *f, int64_t staleness, int with_c)
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

static void follow_stop(struct follow *f)
{
	dml_fake_sched_stop(f->fake);
	for (int i = 0; i < NSRV; i++)
		if (f->srv[i])
			ck_assert_int_eq(dml_test_server_stop(f->srv[i],
							      DML_TEST_STOP_TIMEOUT_MS), 0);
	dml_test_env_free(f->env);
}

static void map_init(struct mapbuf *b, uint64_t version)
{
	memset(b, 0, sizeof(*b));
	dml__shard_map__init(&b->map);
	b->map.job = 0;   /* config-file tables are job 0 */
	b->map.version = version;
	b->map.servers = b->srvp;
	b->map.ranges = b->rngp;
}

/* Server `which` (node id which + 1), reached at port. */
static void map_server_at(struct mapbuf *b, int which, uint16_t port)
{
	size_t i = b->map.n_servers++;

	dml__shard_server__init(&b->srv[i]);
	snprintf(b->addr[i], sizeof(b->addr[i]), "127.0.0.1:%u", port);
	b->srv[i].node_id = (uint32_t)(which + 1);
	b->srv[i].address = b->addr[i];
	b->srvp[i] = &b->srv[i];
}

static void map_server(struct mapbuf *b, const struct follow *f, int which)
{
	map_server_at(b, which, dml_test_server_port(f->srv[which]));
}

static void map_range(struct mapbuf *b, uint32_t table, uint64_t begin, uint64_t end,
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
static void serve_split(struct follow *f, uint64_t version, int first, int second)
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
static void serve_right(struct follow *f, uint64_t version)
{
	serve_split(f, version, SRV_A, SRV_B);
}

/* A wrong map: A alone holds everything. */
static void serve_all_on_a(struct follow *f, uint64_t version)
{
	struct mapbuf b;

	map_init(&b, version);
	map_server(&b, f, SRV_A);
	map_range(&b, 0, 0, DENSE_KEYS, SRV_A);
	map_range(&b, 1, 0, 2 * HASH_HALF, SRV_A);
	dml_fake_sched_set_map(f->fake, &f->spec, &b.map);
}

static dml_opts_t *opts_for(struct follow *f, uint16_t sched_port)
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

static dml_t *connect_ok(struct follow *f, dml_opts_t *o)
{
	dml_t *d = NULL;
	int rc = dml_connect(o, &d);

	ck_assert_msg(rc == 0, "dml_connect: %s", dml_strerror(rc));
	dml_opts_free(o);
	return d;
}

static uint64_t map_version(dml_t *d)
{
	uint64_t v = 99;

	ck_assert_int_eq(dml_map_version(d, &v), 0);
	return v;
}

static void wait_ok(dml_t *d, dml_handle_t h, const char *what)
{
	int rc = dml_wait(d, h);

	ck_assert_msg(rc == 0, "%s: %s (%s)", what, dml_strerror(rc), dml_error_detail(d));
}

/* Distinct sparse keys, about half of them hashing to each server. */
static void sparse_keys(uint64_t *keys)
{
	for (size_t i = 0; i < NSPARSE; i++)
		keys[i] = 1000003u * i + 7;
}

/* Every value of the dense table, then of the sparse keys, must be want. */
static void expect_all(dml_t *d, float want)
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
static void push_ones(dml_t *d, int n)
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

/* ---- following the map --------------------------------------------------- */

/* (a) A right map: requests go where they belong, no second fetch. */
START_TEST(test_right_map_routes_requests)
{
	struct follow f;
	uint32_t width;
	uint64_t keys;
	dml_t *d;

	follow_start(&f, -1, 0);
	serve_right(&f, 1);
	d = connect_ok(&f, opts_for(&f, dml_fake_sched_port(f.fake)));
	ck_assert_uint_eq(map_version(d), 1);
	/* Tables come from the job spec. */
	ck_assert_int_eq(dml_table_width(d, 0, &width), 0);
	ck_assert_uint_eq(width, DENSE_WIDTH);
	ck_assert_int_eq(dml_table_size(d, 0, &keys), 0);
	ck_assert_uint_eq(keys, DENSE_KEYS);
	ck_assert_int_eq(dml_table_width(d, 1, &width), 0);
	ck_assert_uint_eq(width, SPARSE_WIDTH);
	ck_assert_int_eq(dml_table_width(d, 7, &width), DML_ENOTFOUND);
	push_ones(d, 2);
	expect_all(d, 2.0f);
	ck_assert_int_eq(dml_wait_all(d), 0);
	/* Nothing bounced, so nothing was fetched again. */
	ck_assert_uint_eq(dml_fake_sched_map_requests(f.fake), 1);
	ck_assert_uint_eq(map_version(d), 1);
	dml_close(d);
	follow_stop(&f);
}
END_TEST

/*
 * (b) A wrong map (A holds everything) fixed before the first request: B's
 * keys bounce off A, the client fetches v2, and every push lands once.
 */
START_TEST(test_wrong_map_is_followed_to_the_right_one)
{
	struct follow f;
	dml_t *d;

	follow_start(&f, -1, 0);
	serve_all_on_a(&f, 1);
	d = connect_ok(&f, opts_for(&f, dml_fake_sched_port(f.fake)));
	ck_assert_uint_eq(map_version(d), 1);
	serve_right(&f, 2);
	push_ones(d, 5);
	ck_assert_uint_eq(map_version(d), 2);
	ck_assert_uint_ge(dml_fake_sched_map_requests(f.fake), 2);
	expect_all(d, 5.0f);
	ck_assert_int_eq(dml_wait_all(d), 0);
	/* The bounce left the server's reason behind. */
	ck_assert_msg(strstr(dml_error_detail(d), "not on this server") != NULL ||
		      strstr(dml_error_detail(d), "not all on this server") != NULL,
		      "detail: %s", dml_error_detail(d));
	dml_close(d);
	follow_stop(&f);
}
END_TEST

/* (c) The map stays wrong for 300 ms: the request waits, then succeeds. */
START_TEST(test_request_waits_for_a_late_fix)
{
	static float ones[DENSE_KEYS * DENSE_WIDTH];
	struct follow f;
	dml_handle_t h;
	uint64_t t0, fixed;
	unsigned asks;
	int done = 0;
	dml_t *d;

	for (size_t i = 0; i < DENSE_KEYS * DENSE_WIDTH; i++)
		ones[i] = 1.0f;
	follow_start(&f, -1, 0);
	serve_all_on_a(&f, 1);
	d = connect_ok(&f, opts_for(&f, dml_fake_sched_port(f.fake)));
	ck_assert_int_eq(dml_push_range(d, 0, 0, DENSE_KEYS, ones, &h), 0);
	t0 = dml_now_ns();
	while (elapsed_ms(t0) < 300) {
		ck_assert_int_eq(dml_progress(d, 10), 0);
		ck_assert_int_eq(dml_test(d, h, &done), 0);
		ck_assert_msg(!done, "the push completed under a wrong map");
	}
	/* It kept asking, with backoff: more than twice, far from every 10 ms. */
	asks = dml_fake_sched_map_requests(f.fake);
	ck_assert_msg(asks >= 3 && asks <= 20, "%u map requests in 300 ms", asks);
	serve_right(&f, 2);
	fixed = dml_now_ns();
	wait_ok(d, h, "push after the fix");
	ck_assert_msg(elapsed_ms(fixed) < 3000, "done %llu ms after the fix",
		      (unsigned long long)elapsed_ms(fixed));
	ck_assert_uint_eq(map_version(d), 2);
	/* Resent to A several times, refused each time: applied once, by B and A. */
	{
		float out[DENSE_KEYS * DENSE_WIDTH];

		ck_assert_int_eq(dml_pull_range(d, 0, 0, DENSE_KEYS, out, &h), 0);
		wait_ok(d, h, "pull");
		for (size_t i = 0; i < DENSE_KEYS * DENSE_WIDTH; i++)
			ck_assert_msg(out[i] == 1.0f, "value %zu is %g", i, out[i]);
	}
	dml_close(d);
	follow_stop(&f);
}
END_TEST

/* (d) A map never fixed: DML_ERANGE once request_timeout_ms has passed. */
START_TEST(test_never_fixed_map_fails_at_request_timeout)
{
	static float ones[DENSE_KEYS * DENSE_WIDTH];
	struct follow f;
	dml_opts_t *o;
	dml_handle_t h;
	uint64_t t0, ms;
	dml_t *d;
	int rc;

	for (size_t i = 0; i < DENSE_KEYS * DENSE_WIDTH; i++)
		ones[i] = 1.0f;
	follow_start(&f, -1, 0);
	serve_all_on_a(&f, 1);
	o = opts_for(&f, dml_fake_sched_port(f.fake));
	ck_assert_int_eq(dml_opts_set(o, "request_timeout_ms", "400"), 0);
	d = connect_ok(&f, o);
	t0 = dml_now_ns();
	ck_assert_int_eq(dml_push_range(d, 0, 0, DENSE_KEYS, ones, &h), 0);
	rc = dml_wait(d, h);
	ms = elapsed_ms(t0);
	ck_assert_msg(rc == DML_ERANGE, "got %s", dml_strerror(rc));
	ck_assert_msg(ms >= 350 && ms < 3000, "failed after %llu ms", (unsigned long long)ms);
	ck_assert_msg(strstr(dml_error_detail(d), "server 127.0.0.1:") != NULL,
		      "detail: %s", dml_error_detail(d));
	/* Refused means not applied: with the right map, every value is 0. */
	serve_right(&f, 2);
	expect_all(d, 0.0f);
	ck_assert_uint_eq(map_version(d), 2);
	dml_close(d);
	follow_stop(&f);
}
END_TEST

/* A key outside a dense table is the caller's error: at once, not after 30 s. */
START_TEST(test_key_outside_dense_table_fails_at_once)
{
	const uint64_t far[] = { 3, DENSE_KEYS }, near[] = { 3, 60 };
	float out[2 * DENSE_WIDTH];
	struct follow f;
	dml_handle_t h;
	uint64_t t0;
	dml_t *d;
	int rc;

	follow_start(&f, -1, 0);
	serve_all_on_a(&f, 1);     /* one range: the path that routes nothing */
	d = connect_ok(&f, opts_for(&f, dml_fake_sched_port(f.fake)));
	t0 = dml_now_ns();
	rc = dml_pull(d, 0, far, 2, out, &h);
	if (rc == 0)
		rc = dml_wait(d, h);
	ck_assert_msg(rc == DML_ERANGE, "got %s", dml_strerror(rc));
	ck_assert_int_eq(dml_pull_range(d, 0, 0, DENSE_KEYS + 1, out, &h), DML_ERANGE);
	ck_assert_uint_lt(elapsed_ms(t0), 3000);
	/* The same with the map fixed (two ranges), and keys inside still work. */
	serve_right(&f, 2);
	ck_assert_int_eq(dml_pull(d, 0, near, 2, out, &h), 0);
	wait_ok(d, h, "pull {3, 60}");
	ck_assert_uint_eq(map_version(d), 2);
	t0 = dml_now_ns();
	rc = dml_pull(d, 0, far, 2, out, &h);
	if (rc == 0)
		rc = dml_wait(d, h);
	ck_assert_msg(rc == DML_ERANGE, "got %s", dml_strerror(rc));
	ck_assert_uint_lt(elapsed_ms(t0), 3000);
	dml_close(d);
	follow_stop(&f);
}
END_TEST

/* (f) Sparse key lists alone: split by hash across the new owners. */
START_TEST(test_sparse_keys_follow_the_map)
{
	static float vals[NSPARSE * SPARSE_WIDTH];
	float out[NSPARSE * SPARSE_WIDTH];
	uint64_t keys[NSPARSE];
	struct follow f;
	dml_handle_t h;
	dml_t *d;

	follow_start(&f, -1, 0);
	serve_all_on_a(&f, 1);
	d = connect_ok(&f, opts_for(&f, dml_fake_sched_port(f.fake)));
	serve_right(&f, 2);
	sparse_keys(keys);
	for (size_t i = 0; i < NSPARSE * SPARSE_WIDTH; i++)
		vals[i] = (float)i;
	ck_assert_int_eq(dml_push(d, 1, keys, NSPARSE, vals, &h), 0);
	wait_ok(d, h, "sparse push");
	ck_assert_uint_eq(map_version(d), 2);
	/* Pull in reverse order: each row must land at its caller's position. */
	for (size_t i = 0; i < NSPARSE / 2; i++) {
		uint64_t k = keys[i];

		keys[i] = keys[NSPARSE - 1 - i];
		keys[NSPARSE - 1 - i] = k;
	}
	ck_assert_int_eq(dml_pull(d, 1, keys, NSPARSE, out, &h), 0);
	wait_ok(d, h, "sparse pull");
	for (size_t i = 0; i < NSPARSE; i++)
		for (size_t j = 0; j < SPARSE_WIDTH; j++)
			ck_assert_msg(out[i * SPARSE_WIDTH + j] ==
				      vals[(NSPARSE - 1 - i) * SPARSE_WIDTH + j],
				      "row %zu col %zu: %g", i, j, out[i * SPARSE_WIDTH + j]);
	dml_close(d);
	follow_stop(&f);
}
END_TEST

/* Client-side sockets connected to 127.0.0.1:port, from /proc/net/tcp. */
static int established_to(uint16_t port)
{
	FILE *fp = fopen("/proc/net/tcp", "r");
	char line[512];
	int n = 0;

	ck_assert_ptr_nonnull(fp);
	while (fgets(line, sizeof(line), fp)) {
		unsigned lport, rport, st;

		if (sscanf(line, " %*d: %*x:%x %*x:%x %x", &lport, &rport, &st) == 3 &&
		    rport == port && st == 1)
			n++;
	}
	fclose(fp);
	return n;
}

/*
 * A server that leaves the map: v1 puts the high halves on C (which holds
 * the low ones), v2 on B. The part refused by C goes to B, and the link to
 * C is closed once idle.
 */
START_TEST(test_server_leaving_the_map_is_disconnected)
{
	struct follow f;
	uint16_t c_port;
	uint64_t t0;
	dml_t *d;

	follow_start(&f, -1, 1);
	c_port = dml_test_server_port(f.srv[SRV_C]);
	serve_split(&f, 1, SRV_A, SRV_C);
	d = connect_ok(&f, opts_for(&f, dml_fake_sched_port(f.fake)));
	ck_assert_int_eq(established_to(c_port), 1);
	ck_assert_int_eq(established_to(dml_test_server_port(f.srv[SRV_B])), 0);
	serve_right(&f, 2);
	push_ones(d, 3);
	ck_assert_uint_eq(map_version(d), 2);
	expect_all(d, 3.0f);
	ck_assert_int_eq(established_to(dml_test_server_port(f.srv[SRV_B])), 1);
	t0 = dml_now_ns();
	while (established_to(c_port) > 0 && elapsed_ms(t0) < 5000)
		ck_assert_int_eq(dml_progress(d, 50), 0);
	ck_assert_msg(established_to(c_port) == 0, "still connected to C after 5 s");
	/* The clock goes to the servers of the map only, and that works. */
	ck_assert_int_eq(dml_clock(d), 0);
	expect_all(d, 3.0f);
	dml_close(d);
	follow_stop(&f);
}
END_TEST

/*
 * Exactly once across a map change: a dense push to A (behind a proxy that
 * holds A's replies) is in flight when v2 hands A's keys to C (which holds
 * the same range). The push must not go to C: after the connection to A is
 * cut, it is resent to A, which applies it once. Meanwhile a sparse push
 * refused under v1 goes by v2 and completes.
 */
START_TEST(test_unanswered_part_is_resent_to_its_server_not_rerouted)
{
	static float ones[NSPARSE * SPARSE_WIDTH];
	float dense[DENSE_KEYS * DENSE_WIDTH];
	struct dml_test_proxy *proxy;
	uint64_t keys[NSPARSE], t0;
	struct follow f;
	struct mapbuf b;
	dml_handle_t h1, h2;
	int done = 0, cut = 0;
	dml_t *d, *d2;

	for (size_t i = 0; i < NSPARSE * SPARSE_WIDTH; i++)
		ones[i] = 1.0f;
	sparse_keys(keys);
	follow_start(&f, -1, 1);
	ck_assert_int_eq(dml_test_proxy_start(f.env, dml_test_server_port(f.srv[SRV_A]),
					      &proxy), 0);
	/* v1: dense right (A through the proxy), sparse all on B (wrong). */
	map_init(&b, 1);
	map_server_at(&b, SRV_A, dml_test_proxy_port(proxy));
	map_server(&b, &f, SRV_B);
	map_range(&b, 0, 0, DENSE_KEYS / 2, SRV_A);
	map_range(&b, 0, DENSE_KEYS / 2, DENSE_KEYS, SRV_B);
	map_range(&b, 1, 0, 2 * HASH_HALF, SRV_B);
	dml_fake_sched_set_map(f.fake, &f.spec, &b.map);
	d = connect_ok(&f, opts_for(&f, dml_fake_sched_port(f.fake)));
	ck_assert_int_eq(dml_test_proxy_hold(proxy), 0);
	ck_assert_int_eq(dml_push_range(d, 0, 0, DENSE_KEYS, ones, &h1), 0);
	t0 = dml_now_ns();
	while (elapsed_ms(t0) < 200)
		ck_assert_int_eq(dml_progress(d, 20), 0);
	ck_assert_int_eq(dml_test(d, h1, &done), 0);
	ck_assert_msg(!done, "A's reply got through the holding proxy");
	/* v2: A's keys on C. */
	serve_split(&f, 2, SRV_C, SRV_B);
	ck_assert_int_eq(dml_push(d, 1, keys, NSPARSE, ones, &h2), 0);
	wait_ok(d, h2, "sparse push");
	ck_assert_uint_eq(map_version(d), 2);
	ck_assert_int_eq(dml_test(d, h1, &done), 0);
	ck_assert_msg(!done, "the push to A completed while A's replies are held");
	ck_assert_int_eq(dml_test_proxy_cut(proxy, &cut), 0);
	ck_assert_int_ge(cut, 1);
	wait_ok(d, h1, "dense push, resent to A");
	/* C never saw the dense push; B applied its half once. */
	ck_assert_int_eq(dml_pull_range(d, 0, 0, DENSE_KEYS, dense, &h1), 0);
	wait_ok(d, h1, "pull by v2");
	for (size_t i = 0; i < DENSE_KEYS * DENSE_WIDTH; i++)
		ck_assert_msg(dense[i] == (i < DENSE_KEYS * DENSE_WIDTH / 2 ? 0.0f : 1.0f),
			      "v2 value %zu is %g", i, dense[i]);
	/* A applied it exactly once: read A itself, by a map that says so. */
	serve_right(&f, 3);
	d2 = connect_ok(&f, opts_for(&f, dml_fake_sched_port(f.fake)));
	ck_assert_int_eq(dml_pull_range(d2, 0, 0, DENSE_KEYS, dense, &h1), 0);
	wait_ok(d2, h1, "pull by v3");
	for (size_t i = 0; i < DENSE_KEYS * DENSE_WIDTH; i++)
		ck_assert_msg(dense[i] == 1.0f, "v3 value %zu is %g", i, dense[i]);
	dml_close(d2);
	dml_close(d);
	follow_stop(&f);
}
END_TEST

/* The scheduler connection drops between fetches: the next fetch reconnects. */
START_TEST(test_fetch_reconnects_to_the_scheduler)
{
	struct dml_test_proxy *proxy;
	struct follow f;
	int cut = 0;
	dml_t *d;

	follow_start(&f, -1, 0);
	ck_assert_int_eq(dml_test_proxy_start(f.env, dml_fake_sched_port(f.fake), &proxy), 0);
	serve_all_on_a(&f, 1);
	d = connect_ok(&f, opts_for(&f, dml_test_proxy_port(proxy)));
	ck_assert_int_eq(dml_test_proxy_cut(proxy, &cut), 0);
	ck_assert_int_eq(cut, 1);
	ck_assert_int_eq(dml_progress(d, 100), 0);
	serve_right(&f, 2);
	push_ones(d, 2);
	ck_assert_uint_eq(map_version(d), 2);
	expect_all(d, 2.0f);
	dml_close(d);
	follow_stop(&f);
}
END_TEST

/*
 * A worker that (re)joins at clock 5 under BSP: servers count it at 5, so
 * its pull at clock 5 is answered; at clock 0 it would wait forever.
 */
START_TEST(test_start_clock_is_where_servers_count_the_worker)
{
	float out[DENSE_KEYS * DENSE_WIDTH];
	struct follow f;
	dml_opts_t *o;
	dml_handle_t h;
	dml_t *d;

	follow_start(&f, 0, 0);
	serve_right(&f, 1);
	o = opts_for(&f, dml_fake_sched_port(f.fake));
	ck_assert_int_eq(dml_opts_set(o, "clock", "5"), 0);
	ck_assert_int_eq(dml_opts_set(o, "request_timeout_ms", "5000"), 0);
	d = connect_ok(&f, o);
	ck_assert_uint_eq(dml_current_clock(d), 5);
	ck_assert_int_eq(dml_pull_range(d, 0, 0, DENSE_KEYS, out, &h), 0);
	wait_ok(d, h, "pull at clock 5");
	ck_assert_uint_ge(dml_last_pull_min_clock(d), 5);
	ck_assert_int_eq(dml_clock(d), 0);
	ck_assert_uint_eq(dml_current_clock(d), 6);
	ck_assert_int_eq(dml_pull_range(d, 0, 0, DENSE_KEYS, out, &h), 0);
	wait_ok(d, h, "pull at clock 6");
	ck_assert_uint_ge(dml_last_pull_min_clock(d), 6);
	dml_close(d);
	follow_stop(&f);
}
END_TEST

/* Standalone mode has no map version. */
START_TEST(test_standalone_map_version_is_zero)
{
	struct follow f;
	dml_t *d;

	follow_start(&f, -1, 0);
	ck_assert_int_eq(dml_test_client_new(f.env, f.srv, 2, 1, &d), 0);
	ck_assert_uint_eq(map_version(d), 0);
	ck_assert_int_eq(dml_map_version(NULL, NULL), DML_EINVAL);
	push_ones(d, 1);
	expect_all(d, 1.0f);
	dml_close(d);
	follow_stop(&f);
}
END_TEST

/* ---- the scheduler missing, refusing, or wrong ------------------------------ */

/* dml_connect with stderr (the log) captured; returns the code, *log malloc'ed. */
static int connect_logged(struct follow *f, dml_opts_t *o, char **log, uint64_t *ms)
{
	char *path;
	int saved = dup(2), fd, rc;
	uint64_t t0 = dml_now_ns();
	dml_t *d = NULL;

	ck_assert_int_eq(dml_test_env_write(f->env, "connect.log", "", 0600, &path), 0);
	fd = open(path, O_WRONLY | O_TRUNC);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_ge(saved, 0);
	fflush(stderr);
	dup2(fd, 2);
	rc = dml_connect(o, &d);
	fflush(stderr);
	dup2(saved, 2);
	close(saved);
	close(fd);
	*ms = elapsed_ms(t0);
	dml_opts_free(o);
	ck_assert_ptr_null(d);
	ck_assert_int_eq(dml_test_file_read(path, log), 0);
	free(path);
	return rc;
}

/* A port nothing listens on (bound, read, closed). */
static uint16_t dead_port(void)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(0x7f000001) };
	socklen_t len = sizeof(a);
	int fd = socket(AF_INET, SOCK_STREAM, 0);

	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
	ck_assert_int_eq(getsockname(fd, (struct sockaddr *)&a, &len), 0);
	close(fd);
	return ntohs(a.sin_port);
}

/* (e) No scheduler: DML_ECONN (or DML_ETIMEDOUT) in time, and a clear reason. */
START_TEST(test_no_scheduler_fails_connect_clearly)
{
	struct follow f;
	uint16_t port = dead_port();
	char want[64], *log;
	uint64_t ms;
	dml_opts_t *o;
	int rc;

	memset(&f, 0, sizeof(f));
	ck_assert_int_eq(dml_test_env_new(&f.env), 0);
	o = opts_for(&f, port);
	ck_assert_int_eq(dml_opts_set(o, "connect_timeout_ms", "500"), 0);
	rc = connect_logged(&f, o, &log, &ms);
	ck_assert_msg(rc == DML_ECONN || rc == DML_ETIMEDOUT, "got %s", dml_strerror(rc));
	ck_assert_msg(ms >= 450 && ms < 5000, "gave up after %llu ms", (unsigned long long)ms);
	snprintf(want, sizeof(want), "scheduler 127.0.0.1:%u", port);
	ck_assert_msg(strstr(log, want) && strstr(log, "could not connect"), "log: %s", log);
	free(log);
	dml_test_env_free(f.env);
}
END_TEST

/* A scheduler without a map: asked again until connect_timeout_ms, then its reason. */
START_TEST(test_scheduler_without_map_fails_connect)
{
	struct follow f;
	char *log;
	uint64_t ms;
	dml_opts_t *o;
	int rc;

	follow_start(&f, -1, 0);
	o = opts_for(&f, dml_fake_sched_port(f.fake));
	ck_assert_int_eq(dml_opts_set(o, "connect_timeout_ms", "600"), 0);
	rc = connect_logged(&f, o, &log, &ms);
	ck_assert_msg(rc == DML_ENOTFOUND, "got %s", dml_strerror(rc));
	ck_assert_msg(strstr(log, "no shard map yet"), "log: %s", log);
	ck_assert_msg(ms >= 550 && ms < 5000, "gave up after %llu ms", (unsigned long long)ms);
	ck_assert_uint_ge(dml_fake_sched_map_requests(f.fake), 3);
	free(log);
	/* A map that turns up while dml_connect waits is taken. */
	o = opts_for(&f, dml_fake_sched_port(f.fake));
	serve_right(&f, 4);
	{
		dml_t *d = connect_ok(&f, o);

		ck_assert_uint_eq(map_version(d), 4);
		dml_close(d);
	}
	follow_stop(&f);
}
END_TEST

/* A scheduler with another secret: DML_EAUTH at once, not after the timeout. */
START_TEST(test_scheduler_refusing_us_fails_connect_at_once)
{
	struct dml_fake_sched *other;
	struct follow f;
	char *path, *log;
	uint64_t ms;
	int rc;

	follow_start(&f, -1, 0);
	ck_assert_int_eq(dml_test_env_write(f.env, "other.secret",
					    "another secret of enough length\n", 0600, &path),
			 0);
	ck_assert_int_eq(dml_fake_sched_start(path, &other), 0);
	rc = connect_logged(&f, opts_for(&f, dml_fake_sched_port(other)), &log, &ms);
	ck_assert_msg(rc == DML_EAUTH, "got %s", dml_strerror(rc));
	ck_assert_msg(ms < 5000, "took %llu ms", (unsigned long long)ms);
	ck_assert_msg(strstr(log, "refused"), "log: %s", log);
	free(log);
	free(path);
	dml_fake_sched_stop(other);
	follow_stop(&f);
}
END_TEST

/* Maps that fail the checks: DML_ECONF with the reason, at once. */
START_TEST(test_bad_maps_are_refused)
{
	struct bad {
		const char *why;
		int kind;
	} cases[] = {
		{ "gap", 0 }, { "overlap", 1 }, { "not listed", 2 }, { "no range", 3 },
		{ "no such table", 4 }, { "version 0", 5 }, { "listed twice", 6 },
		{ "not host:port", 7 },
	};
	struct follow f;

	follow_start(&f, -1, 0);
	for (size_t i = 0; i < DML_ARRAY_LEN(cases); i++) {
		struct mapbuf b;
		char *log;
		uint64_t ms;
		int rc;

		map_init(&b, cases[i].kind == 5 ? 0 : 1);
		map_server(&b, &f, SRV_A);
		map_server(&b, &f, SRV_B);
		map_range(&b, 0, 0, DENSE_KEYS / 2, SRV_A);
		map_range(&b, 1, 0, 2 * HASH_HALF, SRV_B);
		switch (cases[i].kind) {
		case 0:
			map_range(&b, 0, DENSE_KEYS / 2 + 1, DENSE_KEYS, SRV_B);
			break;
		case 1:
			map_range(&b, 0, DENSE_KEYS / 2 - 1, DENSE_KEYS, SRV_B);
			break;
		case 2:
			map_range(&b, 0, DENSE_KEYS / 2, DENSE_KEYS, SRV_C);
			break;
		case 3:
			b.map.n_ranges = 1;      /* table 1 left out */
			map_range(&b, 0, DENSE_KEYS / 2, DENSE_KEYS, SRV_B);
			break;
		case 4:
			map_range(&b, 0, DENSE_KEYS / 2, DENSE_KEYS, SRV_B);
			map_range(&b, 9, 0, 10, SRV_B);
			break;
		case 6:
			map_range(&b, 0, DENSE_KEYS / 2, DENSE_KEYS, SRV_B);
			b.srv[1].node_id = b.srv[0].node_id;
			break;
		case 7:
			map_range(&b, 0, DENSE_KEYS / 2, DENSE_KEYS, SRV_B);
			b.srv[1].address = "nowhere";
			break;
		default:
			map_range(&b, 0, DENSE_KEYS / 2, DENSE_KEYS, SRV_B);
			break;
		}
		dml_fake_sched_set_map(f.fake, &f.spec, &b.map);
		rc = connect_logged(&f, opts_for(&f, dml_fake_sched_port(f.fake)), &log, &ms);
		ck_assert_msg(rc == DML_ECONF, "%s: got %s", cases[i].why, dml_strerror(rc));
		ck_assert_msg(strstr(log, cases[i].why) && strstr(log, "bad shard map"),
			      "%s: log: %s", cases[i].why, log);
		ck_assert_msg(ms < 3000, "%s: took %llu ms", cases[i].why,
			      (unsigned long long)ms);
		free(log);
	}
	follow_stop(&f);
}
END_TEST

/* ---- options ---------------------------------------------------------------- */

START_TEST(test_options)
{
	struct follow f;
	char err[256], *path;
	dml_opts_t *o;
	dml_t *d = NULL;

	memset(&f, 0, sizeof(f));
	ck_assert_int_eq(dml_test_env_new(&f.env), 0);
	ck_assert_int_eq(dml_opts_new(&o), 0);
	ck_assert_int_eq(dml_opts_set(o, "scheduler", "nohost"), DML_ECONF);
	ck_assert_int_eq(dml_opts_set(o, "scheduler", "127.0.0.1:0"), DML_ECONF);
	ck_assert_int_eq(dml_opts_set(o, "clock", "-1"), DML_ECONF);
	ck_assert_int_eq(dml_opts_set(o, "clock", "18446744073709551615"), 0);
	ck_assert_int_eq(dml_opts_set(o, "clock", "x"), DML_ECONF);
	/* Both set one by one: dml_connect refuses. */
	ck_assert_int_eq(dml_opts_set(o, "scheduler", "127.0.0.1:1"), 0);
	ck_assert_int_eq(dml_opts_set(o, "servers", "127.0.0.1:2"), 0);
	ck_assert_int_eq(dml_opts_set(o, "secret_file", dml_test_env_secret(f.env)), 0);
	ck_assert_int_eq(dml_opts_set(o, "worker_id", "1"), 0);
	ck_assert_int_eq(dml_connect(o, &d), DML_EINVAL);
	ck_assert_ptr_null(d);
	/* Both in a file: the file is refused with a reason. */
	ck_assert_int_eq(dml_test_env_write(f.env, "client.conf",
					    "[client]\nservers = 127.0.0.1:2\n"
					    "scheduler = 127.0.0.1:1\n", 0600, &path), 0);
	ck_assert_int_eq(dml_opts_load(o, path, err, sizeof(err)), DML_ECONF);
	ck_assert_msg(strstr(err, "exclude"), "err: %s", err);
	free(path);
	ck_assert_int_eq(dml_test_env_write(f.env, "client2.conf",
					    "[client]\nscheduler = 127.0.0.1:1\nclock = 12\n",
					    0600, &path), 0);
	ck_assert_int_eq(dml_opts_load(o, path, err, sizeof(err)), 0);
	free(path);
	dml_opts_free(o);
	dml_test_env_free(f.env);
}
END_TEST

static Suite *follow_suite(void)
{
	Suite *s = suite_create("follow");
	TCase *tc = tcase_create("follow");

	tcase_set_timeout(tc, TEST_TIMEOUT_S);
	tcase_add_test(tc, test_right_map_routes_requests);
	tcase_add_test(tc, test_wrong_map_is_followed_to_the_right_one);
	tcase_add_test(tc, test_request_waits_for_a_late_fix);
	tcase_add_test(tc, test_never_fixed_map_fails_at_request_timeout);
	tcase_add_test(tc, test_sparse_keys_follow_the_map);
	tcase_add_test(tc, test_key_outside_dense_table_fails_at_once);
	tcase_add_test(tc, test_server_leaving_the_map_is_disconnected);
	tcase_add_test(tc, test_unanswered_part_is_resent_to_its_server_not_rerouted);
	tcase_add_test(tc, test_fetch_reconnects_to_the_scheduler);
	tcase_add_test(tc, test_start_clock_is_where_servers_count_the_worker);
	tcase_add_test(tc, test_standalone_map_version_is_zero);
	suite_add_tcase(s, tc);

	tc = tcase_create("scheduler");
	tcase_set_timeout(tc, TEST_TIMEOUT_S);
	tcase_add_test(tc, test_no_scheduler_fails_connect_clearly);
	tcase_add_test(tc, test_scheduler_without_map_fails_connect);
	tcase_add_test(tc, test_scheduler_refusing_us_fails_connect_at_once);
	tcase_add_test(tc, test_bad_maps_are_refused);
	tcase_add_test(tc, test_options);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return dml_check_run(follow_suite());
}
