/*
 * The gradient log against real crashes: dml-server processes with a
 * [store], SIGKILLed and restarted on the same port while a libdml worker
 * pushes through them.
 *
 *   - exactness: integer-valued pushes to a dense and a sparse table with
 *     sgd and learning rate 1 (so float sums are exact in any order), the
 *     server killed at thirty random moments with pushes in flight and
 *     restarted each time: every push is acknowledged in the end, and every
 *     parameter equals minus the sum of what was pushed to it, nothing lost
 *     and nothing applied twice; the log says what it recovered; again
 *     with checkpoints every 4 KiB of log, copied while pushes go on (a
 *     server that let a push change a row before the snapshot copied it
 *     would replay that push twice);
 *   - a clean stop (SIGTERM) with durability batch keeps every
 *     acknowledged push;
 *   - pushes of unequal weights (dml_push_weight) to adam tables come back
 *     from the log bit for bit, weights and all;
 *   - a store of another server, and a damaged data file, are refused at
 *     start with a message naming the file and the problem.
 */
#define _GNU_SOURCE
#include <check.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check_run.h"
#include "dml.h"
#include "dml_error.h"
#include "harness.h"
#include "util.h"

#define WAIT_MS 20000
/* 1 MB: a checkpoint's copy takes several turns of the server's loop, with
 * pushes applied in between (a chunk is copied before one changes it).
 * Dense pushes hit a hot spot of 64 keys in each chunk of 4096 rows. */
#define DENSE_KEYS 65536
#define DENSE_SPOTS 16
#define DENSE_SPOT_KEYS 64
#define WIDTH 4
#define SPARSE_IDS 50
#define SPARSE_WIDTH 2
#define KILLS 30
#define ROUNDS 90
#define WINDOW 16

/* Tables 2 and 3 take the weighted pushes, and the same ones unweighted. */
#define ADAM_KEYS 8
static const char tables[] =
	"[table]\nid = 0\nkind = dense\nwidth = 4\nkeys = 65536\noptimizer = sgd\nlr = 1\n"
	"[table]\nid = 1\nkind = sparse\nwidth = 2\noptimizer = sgd\nlr = 1\n"
	"[table]\nid = 2\nkind = dense\nwidth = 4\nkeys = 8\noptimizer = adam\nlr = 0.01\n"
	"[table]\nid = 3\nkind = dense\nwidth = 4\nkeys = 8\noptimizer = adam\nlr = 0.01\n";

/* The [store] section for a store in the environment's folder. */
static char *store_conf(struct dml_test_env *env, const char *durability,
			const char *checkpoint_log)
{
	char *text;

	ck_assert_int_gt(asprintf(&text, "[store]\npath = %s/store\ndurability = %s\n"
				  "batch_ms = 10\ncheckpoint_log = %s\n", dml_test_env_dir(env), durability,
				  checkpoint_log), 0);
	return text;
}

static struct dml_test_server *start_server(struct dml_test_env *env, uint32_t node,
					    const char *store)
{
	struct dml_test_server_conf sc = { 0 };
	struct dml_test_server *s = NULL;

	sc.node_id = node;
	sc.staleness = -1;
	sc.tables = tables;
	sc.extra = store;
	ck_assert_int_eq(dml_test_server_start(env, &sc, &s), 0);
	ck_assert_int_eq(dml_test_server_pin_port(s), 0);
	return s;
}

static dml_t *worker(struct dml_test_env *env, struct dml_test_server *s)
{
	dml_opts_t *o;
	dml_t *d;

	ck_assert_int_eq(dml_test_client_opts(env, &s, 1, 1, &o), 0);
	/* Long enough to ride out a restart, short enough to fail a hang. */
	ck_assert_int_eq(dml_opts_set(o, "reconnect_timeout_ms", "15000"), 0);
	ck_assert_int_eq(dml_connect(o, &d), 0);
	dml_opts_free(o);
	return d;
}

/* What the pushes of one round add up to, kept by the test. */
struct sums {
	double dense[DENSE_KEYS * WIDTH];
	double sparse[SPARSE_IDS * SPARSE_WIDTH];
};

/* A push's buffers, valid until it is waited for. */
struct pending {
	dml_handle_t h;
	uint64_t keys[8];
	float vals[8 * WIDTH];     /* 8 dense keys, or 8 sparse ids */
};

/*
 * Push k of round r: a dense range or 8 distinct sparse ids, small integers
 * from a fixed sequence; its contribution goes into sums.
 */
static void push_one(dml_t *d, int r, int k, struct pending *p, struct sums *sums)
{
	uint64_t x = (uint64_t)(r * WINDOW + k + 1) * 0x9e3779b97f4a7c15ull;

	if (k % 2 == 0) {
		uint64_t begin = (x >> 20) % DENSE_SPOTS * (DENSE_KEYS / DENSE_SPOTS) +
				 (x >> 28) % (DENSE_SPOT_KEYS - 8);
		uint64_t end = begin + 1 + (x >> 40) % 8;

		for (uint64_t i = 0; i < (end - begin) * WIDTH; i++) {
			p->vals[i] = (float)((int)((x >> (i % 50)) % 7) - 3);
			sums->dense[begin * WIDTH + i] += p->vals[i];
		}
		ck_assert_int_eq(dml_push_range(d, 0, begin, end, p->vals, &p->h), 0);
		return;
	}
	for (int i = 0; i < 8; i++) {
		/* 7 i mod 50 differs for every i below 8: distinct ids. */
		p->keys[i] = ((x >> 24) + 7u * (uint64_t)i) % SPARSE_IDS;
		for (int j = 0; j < SPARSE_WIDTH; j++) {
			p->vals[i * SPARSE_WIDTH + j] = (float)((int)((x >> (i + j)) % 5) - 2);
			sums->sparse[p->keys[i] * SPARSE_WIDTH + j] += p->vals[i * SPARSE_WIDTH + j];
		}
	}
	ck_assert_int_eq(dml_push(d, 1, p->keys, 8, p->vals, &p->h), 0);
}

/* Every parameter is minus the sum of the pushes (sgd, lr 1, from zeros). */
static void check_sums(dml_t *d, const struct sums *sums)
{
	static float dense[DENSE_KEYS * WIDTH], sparse[SPARSE_IDS * SPARSE_WIDTH];
	uint64_t ids[SPARSE_IDS];
	dml_handle_t h;

	for (uint64_t i = 0; i < SPARSE_IDS; i++)
		ids[i] = i;
	ck_assert_int_eq(dml_pull_range(d, 0, 0, DENSE_KEYS, dense, &h), 0);
	ck_assert_int_eq(dml_wait(d, h), 0);
	ck_assert_int_eq(dml_pull(d, 1, ids, SPARSE_IDS, sparse, &h), 0);
	ck_assert_int_eq(dml_wait(d, h), 0);
	for (size_t i = 0; i < DENSE_KEYS * WIDTH; i++)
		ck_assert_msg(dense[i] == (float)-sums->dense[i],
			      "dense key %zu value %zu: %g, the pushes add up to %g", i / WIDTH,
			      i % WIDTH, dense[i], -sums->dense[i]);
	for (size_t i = 0; i < SPARSE_IDS * SPARSE_WIDTH; i++)
		ck_assert_msg(sparse[i] == (float)-sums->sparse[i],
			      "sparse id %zu value %zu: %g, the pushes add up to %g",
			      i / SPARSE_WIDTH, i % SPARSE_WIDTH, sparse[i], -sums->sparse[i]);
}

/* Push ROUNDS windows, killing and restarting s at kills of them. */
static void push_rounds(struct dml_test_server *s, dml_t *d, struct sums *sums, int kills)
{
	static struct pending p[WINDOW];
	uint64_t rng = 12345;
	int done = 0;

	for (int r = 0; r < ROUNDS; r++) {
		int kill_now = kills && r % (ROUNDS / kills) == 1 && done < kills;

		for (int k = 0; k < WINDOW; k++)
			push_one(d, r, k, &p[k], sums);
		if (kill_now) {
			/* Somewhere between nothing and everything of the window
			 * committed, acknowledged or not. */
			rng = rng * 6364136223846793005ull + 1442695040888963407ull;
			usleep((useconds_t)((rng >> 33) % 300));
			dml_test_server_kill(s);
			ck_assert_int_eq(dml_test_server_restart(s), 0);
			done++;
		}
		for (int k = 0; k < WINDOW; k++) {
			int rc = dml_wait(d, p[k].h);

			ck_assert_msg(rc == 0, "round %d push %d: %s (%s)", r, k,
				      dml_strerror(rc), dml_error_detail(d));
		}
	}
	ck_assert_int_eq(done, kills);
}

/* A server with a store of the given durability, and a worker pushing to it. */
struct rig {
	struct dml_test_env *env;
	struct dml_test_server *s;
	char *store;
	dml_t *d;
};

static void rig_up(struct rig *g, const char *durability, const char *checkpoint_log)
{
	ck_assert_int_eq(dml_test_env_new(&g->env), 0);
	g->store = store_conf(g->env, durability, checkpoint_log);
	g->s = start_server(g->env, 1, g->store);
	g->d = worker(g->env, g->s);
}

static void rig_down(struct rig *g)
{
	dml_close(g->d);
	ck_assert_int_eq(dml_test_server_stop(g->s, WAIT_MS), 0);
	free(g->store);
	dml_test_env_free(g->env);
}

/* SIGKILL the server with nothing in flight, restart it, check what it holds. */
static void crash_and_check(struct rig *g, const struct sums *sums)
{
	dml_close(g->d);
	dml_test_server_kill(g->s);
	ck_assert_int_eq(dml_test_server_restart(g->s), 0);
	g->d = worker(g->env, g->s);
	check_sums(g->d, sums);
}

START_TEST(test_kill_points_exact)
{
	static const char *const recovered[] = { ": replayed ", NULL };
	static struct sums sums;
	struct rig g;

	rig_up(&g, "sync", "0");
	memset(&sums, 0, sizeof(sums));
	push_rounds(g.s, g.d, &sums, KILLS);
	check_sums(g.d, &sums);
	ck_assert_int_ge(dml_test_server_log_wait(g.s, 0, recovered, WAIT_MS), 0);
	/* And once more from the log alone. */
	crash_and_check(&g, &sums);
	rig_down(&g);
}
END_TEST

/*
 * The same with a checkpoint whenever the log holds 4 KiB (every few
 * rounds): crashes land before, during and after checkpoints, and a
 * restart loads the newest one and replays the log written since.
 */
START_TEST(test_kill_points_with_checkpoints)
{
	static const char *const wrote[] = { ": checkpoint of", NULL };
	static const char *const loaded[] = { "pushes after a checkpoint of", NULL };
	static struct sums sums;
	struct rig g;
	char *log = NULL, *at, *last = NULL;
	unsigned long long pushes = 0, rows = 0;

	rig_up(&g, "sync", "4K");
	memset(&sums, 0, sizeof(sums));
	push_rounds(g.s, g.d, &sums, KILLS);
	check_sums(g.d, &sums);
	ck_assert_int_ge(dml_test_server_log_wait(g.s, 0, wrote, WAIT_MS), 0);
	ck_assert_int_ge(dml_test_server_log_wait(g.s, 0, loaded, WAIT_MS), 0);
	crash_and_check(&g, &sums);
	/* The last start loaded a checkpoint and replayed less than it pushed. */
	ck_assert_int_eq(dml_test_file_read(dml_test_server_log(g.s), &log), 0);
	for (at = log; (at = strstr(at, "recovered to clock ")) != NULL; at++)
		last = at;
	ck_assert_ptr_nonnull(last);
	ck_assert_int_eq(sscanf(last, "recovered to clock %*u: replayed %llu pushes after a "
				"checkpoint of %llu rows", &pushes, &rows), 2);
	ck_assert_msg(rows > 0 && pushes < (unsigned long long)ROUNDS * WINDOW,
		      "replayed %llu pushes after %llu rows", pushes, rows);
	printf("check_durability: last restart: a checkpoint of %llu rows, then %llu of %d "
	       "pushes replayed\n", rows, pushes, ROUNDS * WINDOW);
	free(log);
	rig_down(&g);
}
END_TEST

START_TEST(test_clean_stop_batch)
{
	static struct sums sums;
	struct rig g;

	rig_up(&g, "batch", "0");
	memset(&sums, 0, sizeof(sums));
	push_rounds(g.s, g.d, &sums, 0);
	ck_assert_int_eq(dml_test_server_stop(g.s, WAIT_MS), 0);
	ck_assert_int_eq(dml_test_server_restart(g.s), 0);
	check_sums(g.d, &sums);
	rig_down(&g);
}
END_TEST

/* The pushes the last start of g's server replayed (log records, rows ones included). */
static unsigned long long last_replayed(struct rig *g)
{
	char *log = NULL, *at, *last = NULL;
	unsigned long long n = 0;

	ck_assert_int_eq(dml_test_file_read(dml_test_server_log(g->s), &log), 0);
	for (at = log; (at = strstr(at, "recovered to clock ")) != NULL; at++)
		last = at;
	ck_assert_ptr_nonnull(last);
	ck_assert_int_eq(sscanf(last, "recovered to clock %*u: replayed %llu", &n), 1);
	free(log);
	return n;
}

/*
 * Batch mode logs the rows each commit window changed, once, instead of
 * every push: SIGKILLed once a window has passed since the last push, the
 * server comes back with every push, from far fewer log records than
 * pushes; again with checkpoints every 4 KiB of log in between.
 */
START_TEST(test_batch_logs_changed_rows)
{
	static const char *const logs[] = { "0", "4K" };
	static struct sums sums;
	struct rig g;

	for (size_t i = 0; i < DML_ARRAY_LEN(logs); i++) {
		unsigned long long replayed;

		rig_up(&g, "batch", logs[i]);
		memset(&sums, 0, sizeof(sums));
		push_rounds(g.s, g.d, &sums, 0);
		usleep(100 * 1000);     /* batch_ms is 10 here */
		crash_and_check(&g, &sums);
		replayed = last_replayed(&g);
		ck_assert_msg(replayed < (unsigned long long)ROUNDS * WINDOW / 2,
			      "replayed %llu records for %d pushes", replayed, ROUNDS * WINDOW);
		printf("check_durability: batch, checkpoint_log %s: SIGKILL after the pushes, "
		       "all %d back from %llu log records\n", logs[i], ROUNDS * WINDOW,
		       replayed);
		rig_down(&g);
	}
}
END_TEST

/* Tables 2 and 3 into rows (ADAM_KEYS * WIDTH floats each). */
static void pull_adam(dml_t *d, float (*rows)[ADAM_KEYS * WIDTH])
{
	dml_handle_t h;

	for (uint32_t t = 0; t < 2; t++) {
		ck_assert_int_eq(dml_pull_range(d, 2 + t, 0, ADAM_KEYS, rows[t], &h), 0);
		ck_assert_int_eq(dml_wait(d, h), 0);
	}
}

/*
 * Workers given unequal batches push with weights (dml_push_weight); the
 * log keeps each push's weight, so a replay gives the rows the pushes made,
 * not those the same gradients unweighted would have (table 3 has those).
 */
START_TEST(test_weighted_pushes_replayed)
{
	static const float weights[] = { 1.37f, 1.33f, 0.3f };
	float before[2][ADAM_KEYS * WIDTH], after[2][ADAM_KEYS * WIDTH], g[ADAM_KEYS * WIDTH];
	struct rig g_rig;
	dml_handle_t h;

	rig_up(&g_rig, "sync", "0");
	ck_assert_int_eq(dml_push_weight(g_rig.d, 0.0f), DML_EINVAL);
	ck_assert_int_eq(dml_push_weight(g_rig.d, -1.0f), DML_EINVAL);
	ck_assert_int_eq(dml_push_weight(g_rig.d, NAN), DML_EINVAL);
	ck_assert_int_eq(dml_push_weight(g_rig.d, INFINITY), DML_EINVAL);
	for (int r = 0; r < 60; r++) {
		for (size_t i = 0; i < DML_ARRAY_LEN(g); i++)
			g[i] = weights[r % 3] * (float)((int)((i * 7 + (size_t)r) % 9) - 4) * 0.1f;
		ck_assert_int_eq(dml_push_weight(g_rig.d, weights[r % 3]), 0);
		ck_assert_int_eq(dml_push_range(g_rig.d, 2, 0, ADAM_KEYS, g, &h), 0);
		ck_assert_int_eq(dml_wait(g_rig.d, h), 0);
		ck_assert_int_eq(dml_push_weight(g_rig.d, 1.0f), 0);
		ck_assert_int_eq(dml_push_range(g_rig.d, 3, 0, ADAM_KEYS, g, &h), 0);
		ck_assert_int_eq(dml_wait(g_rig.d, h), 0);
	}
	pull_adam(g_rig.d, before);
	ck_assert(memcmp(before[0], before[1], sizeof(before[0])) != 0);
	dml_close(g_rig.d);
	dml_test_server_kill(g_rig.s);
	ck_assert_int_eq(dml_test_server_restart(g_rig.s), 0);
	g_rig.d = worker(g_rig.env, g_rig.s);
	ck_assert_uint_eq(last_replayed(&g_rig), 120);
	pull_adam(g_rig.d, after);
	ck_assert(memcmp(before, after, sizeof(before)) == 0);
	rig_down(&g_rig);
}
END_TEST

/* A server that must refuse to start on store: exit status 2, saying want. */
static void expect_refusal(struct dml_test_env *env, uint32_t node, const char *store,
			   const char *want)
{
	struct dml_test_server_conf sc = { 0 };
	struct dml_test_output out;
	char *text, *path, *bin;

	sc.node_id = node;
	sc.tables = tables;
	sc.extra = store;
	dml_test_server_conf_text(env, &sc, &text, NULL);
	ck_assert_int_eq(dml_test_env_write(env, "refused.conf", text, 0644, &path), 0);
	dml_test_bin("server/dml-server", &bin);
	{
		char *argv[] = { bin, (char *)"-c", path, NULL };

		ck_assert_int_eq(dml_test_run(env, argv, WAIT_MS, &out), 0);
	}
	ck_assert_msg(out.status == 2 && strstr(out.err, want) != NULL,
		      "status %d (want 2), stderr lacks '%s':\n%s", out.status, want, out.err);
	dml_test_output_free(&out);
	free(bin);
	free(path);
	free(text);
}

START_TEST(test_refusals)
{
	struct dml_test_env *env;
	struct dml_test_server *s;
	char *store, *path;
	FILE *f;

	ck_assert_int_eq(dml_test_env_new(&env), 0);
	store = store_conf(env, "sync", "0");
	s = start_server(env, 1, store);
	ck_assert_int_eq(dml_test_server_stop(s, WAIT_MS), 0);
	/* Another server's data directory. */
	expect_refusal(env, 2, store, "the store of server 1, this is server 2");
	/* A damaged data file. */
	ck_assert_int_gt(asprintf(&path, "%s/store/data.mdb", dml_test_env_dir(env)), 0);
	f = fopen(path, "r+");
	ck_assert_ptr_nonnull(f);
	for (int i = 0; i < 16384; i++)
		fputc((i * 131) & 0xff, f);
	ck_assert_int_eq(fclose(f), 0);
	expect_refusal(env, 1, store, "data.mdb");
	free(path);
	free(store);
	dml_test_env_free(env);
}
END_TEST

static Suite *durability_suite(void)
{
	Suite *s = suite_create("durability");
	TCase *tc = tcase_create("crashes");

	tcase_set_timeout(tc, 240);
	tcase_add_test(tc, test_kill_points_exact);
	tcase_add_test(tc, test_kill_points_with_checkpoints);
	tcase_add_test(tc, test_clean_stop_batch);
	tcase_add_test(tc, test_batch_logs_changed_rows);
	tcase_add_test(tc, test_weighted_pushes_replayed);
	tcase_add_test(tc, test_refusals);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return dml_check_run(durability_suite());
}
