/*
 * check_cut.c - job-wide checkpoints on real dml-server processes with a
 * [store]: a scripted scheduler (fake_sched.h) installs a job on two
 * servers and asks them for checkpoints the way dml-sched does (prepare
 * on every server, then cut at the highest clock they answered), while
 * two libdml workers in threads push integer-valued gradients of 1 to
 * every key at every clock (sgd, learning rate 1, from zeros), so a row
 * holds exactly minus the number of pushes applied to it.
 *
 * Covered: every row of the checkpoint each server wrote at clock C is
 * -2C (both workers' pushes of every clock before C, none of a later
 * one), though the workers ran past C while it was taken; the server
 * keeps them (past checkpoint_keep too: dml-sched deletes what the job
 * forgets); a delete removes one and a second delete, or a cut without a
 * prepare, is refused with the reason. And a server
 * SIGKILLed in the middle of a cut: restarted, it keeps the checkpoint
 * before, says which clock it recovered to, answers the next prepare
 * above every clock its rows hold, so the next checkpoint is exact too,
 * and every push is in the tables once in the end. Workers that reach a
 * restarted server before its map does are told to try again.
 */
#define _GNU_SOURCE
#include <check.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "test/check_run.h"
#include "worker/dml.h"
#include "proto/dml_error.h"
#include "test/fake_sched.h"
#include "test/harness.h"
#include "store/store.h"
#include "proto/util.h"

#define TEST_TIMEOUT_S 90
#define WAIT_MS 20000
#define JOB 5
#define JOB_TEXT "5"
#define KEYS 64
#define CLOCKS 2000        /* some 2 s of pushes: checkpoints come well before */
#define KEEP 1             /* the server keeps more: ROUNDS of them */
#define ROUNDS 3

struct worker {
	struct dml_test_env *env;
	struct dml_test_server **servers;
	uint32_t id;
	int rc;                    /* the first failure, 0: none */
};

/* CLOCKS clocks of a push of 1 to every key, a little apart. */
static void *worker_main(void *arg)
{
	struct worker *w = arg;
	float g[KEYS];
	dml_opts_t *o = NULL;
	dml_t *d = NULL;

	for (size_t i = 0; i < KEYS; i++)
		g[i] = 1.0f;
	w->rc = dml_test_client_opts(w->env, w->servers, 2, w->id, &o);
	if (!w->rc)
		w->rc = dml_opts_set(o, "job", JOB_TEXT);
	if (!w->rc)
		w->rc = dml_connect(o, &d);
	for (int c = 0; c < CLOCKS && !w->rc; c++) {
		dml_handle_t h;

		w->rc = dml_push_range(d, 0, 0, KEYS, g, &h);
		if (!w->rc)
			w->rc = dml_wait(d, h);
		if (!w->rc)
			w->rc = dml_clock(d);
		usleep(1000);
	}
	dml_close(d);
	dml_opts_free(o);
	return NULL;
}

static void job_spec(Dml__JobSpec *spec, Dml__TableSpec *t, Dml__TableSpec **tp)
{
	dml__table_spec__init(t);
	t->id = 0;
	t->dense = 1;
	t->width = 1;
	t->keys = KEYS;
	t->init = (char *)"zeros";
	t->optimizer = (char *)"sgd";
	t->lr = 1;
	*tp = t;
	dml__job_spec__init(spec);
	spec->name = (char *)"cut-test";
	spec->app = (char *)"lsq";
	spec->tables = tp;
	spec->n_tables = 1;
	spec->staleness = 2;
	spec->workers = 2;
	spec->checkpoint_keep = KEEP;
}

/* Keys [0, KEYS/2) on server 1, the rest on server 2. */
static void job_map(Dml__ShardMap *map, Dml__ShardServer *sv, Dml__ShardServer **svp,
		    Dml__ShardRange *r, Dml__ShardRange **rp, char addr[2][300])
{
	dml__shard_map__init(map);
	map->job = JOB;
	map->version = 1;
	map->run = 99;
	for (uint32_t i = 0; i < 2; i++) {
		dml__shard_server__init(&sv[i]);
		sv[i].node_id = i + 1;
		sv[i].address = addr[i];
		svp[i] = &sv[i];
		dml__shard_range__init(&r[i]);
		r[i].table = 0;
		r[i].begin = i * KEYS / 2;
		r[i].end = (i + 1) * KEYS / 2;
		r[i].server = i + 1;
		rp[i] = &r[i];
	}
	map->servers = svp;
	map->n_servers = 2;
	map->ranges = rp;
	map->n_ranges = 2;
}

static struct dml_test_server *start_server(struct dml_test_env *env,
					    struct dml_fake_sched *f, uint32_t id, char *addr,
					    size_t addrlen)
{
	struct dml_test_server_conf c = { 0 };
	struct dml_test_server *s = NULL;
	char extra[64], *store;

	snprintf(extra, sizeof(extra), "scheduler = 127.0.0.1:%u\n", dml_fake_sched_port(f));
	ck_assert_int_gt(asprintf(&store, "[store]\npath = %s/store-%u\n",
				  dml_test_env_dir(env), id), 0);
	c.node_id = id;
	c.staleness = 2;
	c.server_extra = extra;
	c.extra = store;
	ck_assert_int_eq(dml_test_server_start(env, &c, &s), 0);
	free(store);
	ck_assert_int_eq(dml_fake_sched_wait_registered(f, DML__ROLE__SERVER, id, WAIT_MS, addr,
							addrlen), 0);
	return s;
}

/* CHECKPOINT {clock, drop} to servers 1 and 2 at once; both must answer code. */
static uint64_t ask_both(struct dml_fake_sched *f, uint64_t clock, int drop, int code,
			 uint64_t *bytes, char *err, size_t errlen)
{
	uint64_t answer = 0, c, b;

	*bytes = 0;
	for (uint32_t id = 1; id <= 2; id++)
		ck_assert_int_eq(dml_fake_sched_checkpoint_begin(f, id, JOB, clock, drop), 0);
	for (uint32_t id = 1; id <= 2; id++) {
		int rc = dml_fake_sched_checkpoint_wait(f, id, WAIT_MS, &c, &b, err, errlen);

		ck_assert_msg(rc == code, "server %u answered %d (%s), expected %d", id, rc, err,
			      code);
		answer = c > answer ? c : answer;
		*bytes += b;
	}
	return answer;
}

/* One checkpoint as dml-sched takes it: its clock. */
static uint64_t checkpoint(struct dml_fake_sched *f)
{
	uint64_t at, cut, bytes;
	char err[256];

	at = ask_both(f, 0, 0, 0, &bytes, err, sizeof(err));
	ck_assert_uint_gt(at, 0);
	cut = ask_both(f, at, 0, 0, &bytes, err, sizeof(err));
	ck_assert_uint_eq(cut, at);
	/* two chunks: each a 32-byte header and its half of the rows */
	ck_assert_uint_eq(bytes, 2 * (32 + KEYS / 2 * sizeof(float)));
	return cut;
}

struct expect {
	float value;
	uint64_t rows;
	int wrong;
};

static int rows_are(const struct dml_ckpt_rows *r, void *arg)
{
	struct expect *e = arg;

	for (uint64_t i = 0; i < r->n * r->row_floats; i++)
		e->wrong += r->rows[i] != e->value;
	e->rows += r->n;
	return 0;
}

/* Open server id's store (its daemon stopped) and list its checkpoints
 * into *sn (the caller frees it and closes *st); returns their count. */
static size_t store_list(struct dml_test_env *env, uint32_t id, struct dml_store **st,
			 struct dml_store_snap **sn)
{
	size_t got;
	char path[512], err[512];

	snprintf(path, sizeof(path), "%s/store-%u", dml_test_env_dir(env), id);
	ck_assert_msg(dml_store_open(path, 0, 1, id, st, err, sizeof(err)) == 0, "%s", err);
	ck_assert_msg(dml_store_snapshots(*st, sn, &got, err, sizeof(err)) == 0, "%s", err);
	return got;
}

/* Server id's store lists clocks[0..n-1]; every row at clock C is -2C. */
static void store_holds(struct dml_test_env *env, uint32_t id, const uint64_t *clocks,
			size_t n)
{
	struct dml_store *st;
	struct dml_store_snap *sn;
	char err[512];

	ck_assert_uint_eq(store_list(env, id, &st, &sn), n);
	for (size_t i = 0; i < n; i++) {
		struct expect e = { -2.0f * (float)clocks[i], 0, 0 };

		ck_assert_uint_eq(sn[i].clock, clocks[i]);
		ck_assert_msg(dml_store_snapshot_each(st, clocks[i], rows_are, &e, err,
						      sizeof(err)) == 0, "%s", err);
		ck_assert_uint_eq(e.rows, KEYS / 2);
		ck_assert_msg(e.wrong == 0, "server %u, checkpoint at clock %llu: %d values are "
			      "not %g", id, (unsigned long long)clocks[i], e.wrong, e.value);
	}
	free(sn);
	dml_store_close(st);
}

/* Two servers with a store under a scripted scheduler, the job installed. */
struct rig {
	struct dml_test_env *env;
	struct dml_fake_sched *f;
	struct dml_test_server *s[2];
	struct worker w[2];
	pthread_t th[2];
	Dml__JobSpec spec;
	Dml__TableSpec t, *tp;
	Dml__ShardMap map;
	Dml__ShardServer sv[2], *svp[2];
	Dml__ShardRange r[2], *rp[2];
	char addr[2][300];
};

static void install(struct rig *g, uint32_t id)
{
	char err[256];

	ck_assert_msg(dml_fake_sched_install(g->f, id, &g->spec, &g->map, WAIT_MS, err,
					     sizeof(err)) == 0, "server %u: %s", id, err);
}

static void rig_up(struct rig *g)
{
	memset(g, 0, sizeof(*g));
	ck_assert_int_eq(dml_test_env_new(&g->env), 0);
	ck_assert_int_eq(dml_fake_sched_start(dml_test_env_secret(g->env), &g->f), 0);
	for (uint32_t i = 0; i < 2; i++) {
		g->s[i] = start_server(g->env, g->f, i + 1, g->addr[i], sizeof(g->addr[i]));
		ck_assert_int_eq(dml_test_server_pin_port(g->s[i]), 0);
	}
	job_spec(&g->spec, &g->t, &g->tp);
	job_map(&g->map, g->sv, g->svp, g->r, g->rp, g->addr);
	install(g, 1);
	install(g, 2);
}

static void workers_start(struct rig *g)
{
	for (int i = 0; i < 2; i++) {
		g->w[i] = (struct worker){ g->env, g->s, (uint32_t)i + 1, 0 };
		ck_assert_int_eq(pthread_create(&g->th[i], NULL, worker_main, &g->w[i]), 0);
	}
}

static void workers_join(struct rig *g)
{
	for (int i = 0; i < 2; i++) {
		pthread_join(g->th[i], NULL);
		ck_assert_msg(g->w[i].rc == 0, "worker %d: %s", i + 1, dml_strerror(g->w[i].rc));
	}
}

/* Stop both servers; each store lists clocks[0..n-1], every row exact. */
static void rig_stop(struct rig *g)
{
	for (int i = 0; i < 2; i++)
		ck_assert_int_eq(dml_test_server_stop(g->s[i], WAIT_MS), 0);
}

static void rig_free(struct rig *g)
{
	dml_fake_sched_stop(g->f);
	dml_test_env_free(g->env);
}

/* Stop the rig; both servers' stores must list clocks[0..n-1]. */
static void rig_down(struct rig *g, const uint64_t *clocks, size_t n)
{
	rig_stop(g);
	for (uint32_t id = 1; id <= 2; id++)
		store_holds(g->env, id, clocks, n);
	rig_free(g);
}

/* How many checkpoints server id's store lists (its daemon stopped). */
static size_t store_count(struct dml_test_env *env, uint32_t id)
{
	struct dml_store *st;
	struct dml_store_snap *sn;
	size_t got = store_list(env, id, &st, &sn);

	free(sn);
	dml_store_close(st);
	return got;
}

START_TEST(test_cut_is_exact_and_kept)
{
	struct rig g;
	char err[256];
	uint64_t clocks[ROUNDS], bytes;

	rig_up(&g);
	/* Refused: a cut with no prepare. */
	ask_both(g.f, 10, 0, DML_ESTATE, &bytes, err, sizeof(err));
	ck_assert_msg(strstr(err, "without a prepare"), "%s", err);

	workers_start(&g);
	for (int i = 0; i < ROUNDS; i++) {
		usleep(150000);
		clocks[i] = checkpoint(g.f);
		ck_assert(i == 0 || clocks[i] > clocks[i - 1]);
	}
	workers_join(&g);
	ck_assert_msg(clocks[ROUNDS - 1] < CLOCKS, "the workers ended before the last "
		      "checkpoint (at clock %llu)", (unsigned long long)clocks[ROUNDS - 1]);

	/* Deleted, then not there to delete. */
	for (int i = 0; i < ROUNDS - 1; i++)
		ask_both(g.f, clocks[i], 1, 0, &bytes, err, sizeof(err));
	ask_both(g.f, clocks[0], 1, DML_ENOTFOUND, &bytes, err, sizeof(err));
	ck_assert_msg(strstr(err, "no checkpoint at clock"), "%s", err);
	printf("checkpoints at clocks %llu, %llu and %llu while two workers pushed: exact\n",
	       (unsigned long long)clocks[0], (unsigned long long)clocks[1],
	       (unsigned long long)clocks[2]);
	rig_down(&g, &clocks[ROUNDS - 1], 1);
}
END_TEST

START_TEST(test_cut_survives_server_crash)
{
	static const char *const recovered[] = { "recovered to clock ", NULL };
	struct rig g;
	char err[256], *log, *line;
	uint64_t clocks[2], at, c, b;
	unsigned long long to;
	size_t from;
	float got[KEYS];
	dml_opts_t *o;
	dml_t *d;

	rig_up(&g);
	workers_start(&g);
	usleep(150000);
	clocks[0] = checkpoint(g.f);

	/* Server 1 dies as it is told to cut. */
	at = ask_both(g.f, 0, 0, 0, &b, err, sizeof(err));
	for (uint32_t id = 1; id <= 2; id++)
		ck_assert_int_eq(dml_fake_sched_checkpoint_begin(g.f, id, JOB, at, 0), 0);
	usleep(2000);
	from = dml_test_server_log_size(g.s[0]);
	dml_test_server_kill(g.s[0]);
	ck_assert_int_eq(dml_test_server_restart(g.s[0]), 0);
	ck_assert_int_eq(dml_fake_sched_wait_registered(g.f, DML__ROLE__SERVER, 1, WAIT_MS,
							NULL, 0), 0);
	install(&g, 1);
	ck_assert_int_ge(dml_test_server_log_wait(g.s[0], from, recovered, WAIT_MS), 0);
	ck_assert_int_eq(dml_test_file_read(dml_test_server_log(g.s[0]), &log), 0);
	line = strstr(log + from, "recovered to clock ");
	ck_assert_int_eq(sscanf(line, "recovered to clock %llu", &to), 1);
	free(log);
	ck_assert_msg(to >= clocks[0], "recovered to clock %llu, below the checkpoint at %llu",
		      to, (unsigned long long)clocks[0]);
	/* Server 2 wrote its part, which the failed round deletes; server 1's
	 * went down with it. */
	ck_assert_int_eq(dml_fake_sched_checkpoint_wait(g.f, 2, WAIT_MS, &c, &b, err,
							sizeof(err)), 0);
	ck_assert_int_eq(dml_fake_sched_checkpoint_begin(g.f, 2, JOB, at, 1), 0);
	ck_assert_int_eq(dml_fake_sched_checkpoint_wait(g.f, 2, WAIT_MS, &c, &b, err,
							sizeof(err)), 0);

	usleep(150000);
	clocks[1] = checkpoint(g.f);
	ck_assert_uint_gt(clocks[1], to);
	workers_join(&g);

	/* Every push of both workers is in the tables once. */
	ck_assert_int_eq(dml_test_client_opts(g.env, g.s, 2, 9, &o), 0);
	ck_assert_int_eq(dml_opts_set(o, "job", JOB_TEXT), 0);
	ck_assert_int_eq(dml_opts_set(o, "role", "control"), 0);
	ck_assert_int_eq(dml_connect(o, &d), 0);
	{
		dml_handle_t h;

		ck_assert_int_eq(dml_pull_range(d, 0, 0, KEYS, got, &h), 0);
		ck_assert_int_eq(dml_wait(d, h), 0);
	}
	dml_close(d);
	dml_opts_free(o);
	for (size_t i = 0; i < KEYS; i++)
		ck_assert_msg(got[i] == -2.0f * CLOCKS, "key %zu holds %g, not %d", i, got[i],
			      -2 * CLOCKS);
	printf("server 1 killed during the cut at clock %llu: recovered to clock %llu, "
	       "next checkpoint at clock %llu exact, every push applied once\n",
	       (unsigned long long)at, to, (unsigned long long)clocks[1]);
	/* Killed 2 ms into the cut, server 1 may or may not have written its
	 * part first (the round's delete found it down): if it did, that part
	 * must be exact too. */
	rig_stop(&g);
	if (store_count(g.env, 1) == 3) {
		const uint64_t with_cut[] = { clocks[0], at, clocks[1] };

		store_holds(g.env, 1, with_cut, 3);
	} else {
		store_holds(g.env, 1, clocks, 2);
	}
	store_holds(g.env, 2, clocks, 2);
	rig_free(&g);
}
END_TEST

/*
 * A restarted server that has not got its job's map back refuses workers
 * (not ready: they try again) rather than greet them as a server of no
 * shards, which libdml took for a bad configuration and gave up on.
 */
START_TEST(test_workers_wait_for_install)
{
	static const char *const refused[] = { "the job is not on this server yet", NULL };
	struct rig g;
	size_t from;

	rig_up(&g);
	from = dml_test_server_log_size(g.s[0]);
	dml_test_server_kill(g.s[0]);
	ck_assert_int_eq(dml_test_server_restart(g.s[0]), 0);
	ck_assert_int_eq(dml_fake_sched_wait_registered(g.f, DML__ROLE__SERVER, 1, WAIT_MS,
							NULL, 0), 0);
	workers_start(&g);
	ck_assert_int_ge(dml_test_server_log_wait(g.s[0], from, refused, WAIT_MS), 0);
	install(&g, 1);
	workers_join(&g);
	printf("workers refused by a server without its map came in once it had it\n");
	rig_down(&g, NULL, 0);
}
END_TEST

static Suite *cut_suite(void)
{
	Suite *s = suite_create("cut");
	TCase *tc = tcase_create("cut");

	tcase_set_timeout(tc, TEST_TIMEOUT_S);
	tcase_add_test(tc, test_cut_is_exact_and_kept);
	tcase_add_test(tc, test_cut_survives_server_crash);
	tcase_add_test(tc, test_workers_wait_for_install);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return dml_check_run(cut_suite());
}
