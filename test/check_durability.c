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
 *   - BSP steps (bsp_step = clock): two workers' pushes of a clock are
 *     applied as one step of their summed weight when both ended it (a
 *     pull of the clock sees none of them, one of the next sees all: the
 *     rows a dml_table computes in process, bit for bit; bsp_step = push
 *     gives the pushes one after the other instead), and a server
 *     SIGKILLed with a clock's pushes acknowledged but not applied comes
 *     back with the same rows and takes the same step, with checkpoints
 *     waiting for steps;
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

#include "test/check_run.h"
#include "worker/dml.h"
#include "proto/dml_error.h"
#include "test/harness.h"
#include "store/table.h"
#include "proto/util.h"

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

/* A server of tables with store; job_extra NULL: asynchronous, else BSP
 * expecting two workers, with these [job] lines besides. */
static struct dml_test_server *start_server(struct dml_test_env *env, uint32_t node,
					    const char *store, const char *job_extra)
{
	struct dml_test_server_conf sc = { 0 };
	struct dml_test_server *s = NULL;

	sc.node_id = node;
	sc.staleness = job_extra ? 0 : -1;
	sc.workers = job_extra ? 2 : 0;
	sc.job_extra = job_extra;
	sc.tables = tables;
	sc.extra = store;
	ck_assert_int_eq(dml_test_server_start(env, &sc, &s), 0);
	ck_assert_int_eq(dml_test_server_pin_port(s), 0);
	return s;
}

static dml_t *worker_id(struct dml_test_env *env, struct dml_test_server *s, uint32_t id)
{
	dml_opts_t *o;
	dml_t *d;

	ck_assert_int_eq(dml_test_client_opts(env, &s, 1, id, &o), 0);
	/* Long enough to ride out a restart, short enough to fail a hang. */
	ck_assert_int_eq(dml_opts_set(o, "reconnect_timeout_ms", "15000"), 0);
	ck_assert_int_eq(dml_connect(o, &d), 0);
	dml_opts_free(o);
	return d;
}

static dml_t *worker(struct dml_test_env *env, struct dml_test_server *s)
{
	return worker_id(env, s, 1);
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
	g->s = start_server(g->env, 1, g->store, NULL);
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
	static struct sums sums;
	struct rig g;
	char *log = NULL, *at, *last = NULL;
	unsigned long long pushes = 0, rows = 0;

	rig_up(&g, "sync", "4K");
	memset(&sums, 0, sizeof(sums));
	push_rounds(g.s, g.d, &sums, KILLS);
	check_sums(g.d, &sums);
	crash_and_check(&g, &sums);
	/* The last start loaded a checkpoint and replayed less than it pushed:
	 * checkpoints were written, whether or not a process lived to log it
	 * (each restart's log reaches 4 KiB about when the next kill comes). */
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

/* ---- BSP steps ------------------------------------------------------------- */

#define BSP_CLOCKS 24
#define BSP_FLOATS (ADAM_KEYS * WIDTH)

/* Worker w's push to table 2 at clock c, and its weight. */
static float bsp_push(int w, int c, float *g)
{
	for (int i = 0; i < BSP_FLOATS; i++)
		g[i] = (float)((i * 5 + c * 3 + w * 7) % 11 - 5) * 0.1f;
	return w == 0 ? 1.5f + 0.25f * (float)(c % 3) : 0.5f;
}

/*
 * Table 2's rows after clocks [0, n) of both workers' pushes, computed in
 * process by the server's own table code: each clock one push of the two
 * summed, of their summed weight (per_clock), or worker 1's then worker 2's.
 */
static void bsp_reference(int n, int per_clock, float *out)
{
	const struct dml_table_conf tc = {
		.id = 2, .width = WIDTH, .kind = DML_TABLE_DENSE, .key_end = ADAM_KEYS,
		.init = DML_INIT_ZEROS,
		.optim = { .kind = DML_OPT_ADAM, .lr = 0.01f, .momentum = 0.9f, .beta1 = 0.9f,
			   .beta2 = 0.999f, .eps = 1e-8f },
	};
	struct dml_table *t;
	float g[2][BSP_FLOATS], sum[BSP_FLOATS];

	ck_assert_int_eq(dml_table_new(&tc, &t), 0);
	for (int c = 0; c < n; c++) {
		float w0 = bsp_push(0, c, g[0]), w1 = bsp_push(1, c, g[1]);

		if (per_clock) {
			for (int i = 0; i < BSP_FLOATS; i++)
				sum[i] = g[0][i] + g[1][i];
			ck_assert_int_eq(dml_table_push_range_weighted(t, 0, ADAM_KEYS, sum,
								       w0 + w1), 0);
		} else {
			ck_assert_int_eq(dml_table_push_range_weighted(t, 0, ADAM_KEYS, g[0], w0), 0);
			ck_assert_int_eq(dml_table_push_range_weighted(t, 0, ADAM_KEYS, g[1], w1), 0);
		}
	}
	ck_assert_int_eq(dml_table_pull_range(t, 0, ADAM_KEYS, out), 0);
	dml_table_free(t);
}

/* Both workers push their gradient of clock c, worker 1's acknowledged first. */
static void bsp_push_both(dml_t *const *d, int c)
{
	static float g[2][BSP_FLOATS];
	dml_handle_t h;

	for (int w = 0; w < 2; w++) {
		ck_assert_int_eq(dml_push_weight(d[w], bsp_push(w, c, g[w])), 0);
		ck_assert_int_eq(dml_push_range(d[w], 2, 0, ADAM_KEYS, g[w], &h), 0);
		ck_assert_int_eq(dml_wait(d[w], h), 0);
	}
}

/*
 * Both pull table 2, at the next clock when tick (ending this one first),
 * which waits for the other's clock: each pull is driven on its own handle
 * until both are done, so neither waits for a frame the other has not sent
 * (nor, after a restart, for the other to connect again).
 */
static void bsp_pull(dml_t *const *d, int tick, float (*out)[BSP_FLOATS])
{
	dml_handle_t h[2];
	int done[2] = { 0, 0 };

	for (int w = 0; w < 2; w++) {
		ck_assert_int_eq(tick ? dml_clock(d[w]) : 0, 0);
		ck_assert_int_eq(dml_pull_range(d[w], 2, 0, ADAM_KEYS, out[w], &h[w]), 0);
	}
	while (!done[0] || !done[1]) {
		for (int w = 0; w < 2; w++) {
			ck_assert_int_eq(dml_progress(d[w], 10), 0);
			ck_assert_int_eq(dml_test(d[w], h[w], &done[w]), 0);
		}
	}
	for (int w = 0; w < 2; w++)
		ck_assert_int_eq(dml_wait(d[w], h[w]), 0);
	ck_assert(memcmp(out[0], out[1], sizeof(out[0])) == 0);
}

static void expect_rows(const float *got, const float *want, const char *what, int c)
{
	ck_assert_msg(memcmp(got, want, BSP_FLOATS * sizeof(float)) == 0,
		      "%s, clock %d: key 0 holds %.9g %.9g, want %.9g %.9g", what, c,
		      (double)got[0], (double)got[1], (double)want[0], (double)want[1]);
}

/*
 * Under BSP, bsp_step = clock: a pull at a clock sees none of that clock's
 * pushes, and one at the next sees them all as one step; bsp_step = push
 * applies them one by one. With a sync log (checkpoints every 4 KiB, which
 * wait for a step), a SIGKILL after a clock's pushes were acknowledged
 * but before the clock ended: the restarted server holds the rows of the
 * clocks before, and the same step follows once both end the clock.
 */
START_TEST(test_bsp_clock_steps)
{
	static const char *const modes[] = { "bsp_step = clock\n", "bsp_step = push\n" };
	float got[2][BSP_FLOATS], want[BSP_FLOATS];

	for (int m = 0; m < 2; m++) {
		struct dml_test_env *env;
		struct dml_test_server *s;
		char *store;
		dml_t *d[2];
		int crash = m == 0, c;

		ck_assert_int_eq(dml_test_env_new(&env), 0);
		store = store_conf(env, "sync", "4K");
		s = start_server(env, 1, store, modes[m]);
		d[0] = worker_id(env, s, 1);
		d[1] = worker_id(env, s, 2);
		for (c = 0; c < BSP_CLOCKS; c++) {
			bsp_push_both(d, c);
			if (crash && c == BSP_CLOCKS / 2) {
				dml_test_server_kill(s);
				ck_assert_int_eq(dml_test_server_restart(s), 0);
			}
			if (m == 0) {
				/* this clock's pushes are not in the rows yet */
				bsp_pull(d, 0, got);
				bsp_reference(c, 1, want);
				expect_rows(got[0], want, "within the clock", c);
			}
			bsp_pull(d, 1, got);
			bsp_reference(c + 1, m == 0, want);
			expect_rows(got[0], want, modes[m], c);
		}
		bsp_reference(BSP_CLOCKS, m != 0, want);
		ck_assert(memcmp(got[0], want, sizeof(want)) != 0);
		ck_assert_int_ge(dml_test_server_log_wait(s, 0, (const char *const[]){
					": checkpoint of", NULL }, WAIT_MS), 0);
		dml_close(d[0]);
		dml_close(d[1]);
		ck_assert_int_eq(dml_test_server_stop(s, WAIT_MS), 0);
		free(store);
		dml_test_env_free(env);
	}
	printf("check_durability: BSP steps: %d clocks of two weighted pushes, one step each, "
	       "bit for bit, also across a SIGKILL within a clock\n", BSP_CLOCKS);
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
	s = start_server(env, 1, store, NULL);
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
	tcase_add_test(tc, test_bsp_clock_steps);
	tcase_add_test(tc, test_refusals);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return dml_check_run(durability_suite());
}
