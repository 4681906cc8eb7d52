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
 * blocking raw client (check_remap_util.c), which sets HELLO fields and
 * reads ERROR fields that libdml does not expose. This file holds the move
 * and refusal tests and the suite; check_remap_frames.c and
 * check_remap_faults.c the rest.
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
#include "test/check_run.h"
#include "proto/dml_error.h"
#include "test/fake_sched.h"
#include "proto/frame.h"
#include "test/harness.h"
#include "test/raw_frame.h"
#include "shard/shardmap.h"
#include "proto/util.h"

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

static Suite *remap_suite(void)
{
	Suite *s = suite_create("remap");
	TCase *tc = tcase_create("remap");

	tcase_set_timeout(tc, TEST_TIMEOUT_S);
	tcase_add_test(tc, test_remap_moves_rows_and_state);
	tcase_add_test(tc, test_remap_refusals);
	check_remap_frames_tests(tc);
	check_remap_faults_tests(tc);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return dml_check_run(remap_suite());
}
