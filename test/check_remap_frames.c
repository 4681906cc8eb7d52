/*
 * check_remap's tests of big moves: many frames per move (small max_keys, a
 * 2M-key table), a newer map while rows of the previous one are still
 * undelivered, and pulls parked by the staleness bound when their keys move
 * or the job changes.
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
void check_remap_frames_tests(TCase *tc)
{
	tcase_add_test(tc, test_remap_many_frames);
	tcase_add_test(tc, test_remap_newer_map_midway);
	tcase_add_test(tc, test_remap_held_pulls);
}
