/*
 * A server restarted more often than it logs checkpoint_log bytes: the log
 * it replays counts towards the next checkpoint, which it takes right
 * after recovery when due, so the log stays bounded; and whatever
 * checkpoint_log says, a log half the map's size is checkpointed away
 * before it fills the map (which used to stop the server at every start,
 * for ever). Each life of the server: a worker pushes a few whole-table
 * pushes of ones (sgd, lr 1, from zeros: every row counts the pushes
 * applied), then the server is SIGKILLed and started again. And a full
 * file system is named as such when it stops the server.
 */
#define _GNU_SOURCE
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "test/check_run.h"
#include "worker/dml.h"
#include "proto/dml_error.h"
#include "test/harness.h"

#define WAIT_MS 30000
#define KEYS 4096
#define WIDTH 4
#define PUSHES_A_LIFE 5
#define LIVES 20
/* A push: KEYS * WIDTH floats, 64 KiB; checkpoint_log is 16 of them. */
#define PUSH_BYTES (KEYS * WIDTH * 4)
#define CHECKPOINT_PUSHES 16

static const char tables[] =
	"[table]\nid = 0\nkind = dense\nwidth = 4\nkeys = 4096\noptimizer = sgd\nlr = 1\n";

/* A client of worker id (role "worker" or "control"). */
static dml_t *client_of(struct dml_test_env *env, struct dml_test_server *s, uint32_t id,
			const char *role)
{
	dml_opts_t *o;
	dml_t *d;

	ck_assert_int_eq(dml_test_client_opts(env, &s, 1, id, &o), 0);
	ck_assert_int_eq(dml_opts_set(o, "role", role), 0);
	ck_assert_int_eq(dml_opts_set(o, "connect_timeout_ms", "20000"), 0);
	ck_assert_int_eq(dml_connect(o, &d), 0);
	dml_opts_free(o);
	return d;
}

/* Pushes of ones: with sgd at lr 1 from zeros every row counts them. */
static void fill_ones(float *v, size_t n)
{
	for (size_t i = 0; i < n; i++)
		v[i] = 1.0f;
}

static dml_t *client(struct dml_test_env *env, struct dml_test_server *s, const char *role)
{
	return client_of(env, s, 1, role);
}

/* A server of table (staleness: the [job] bound, -1 async; workers
 * expected) with these [store] lines. */
static struct dml_test_server *start_server_of(struct dml_test_env *env, const char *store,
					       const char *table, int64_t staleness,
					       uint32_t workers)
{
	struct dml_test_server_conf sc = { 0 };
	struct dml_test_server *s = NULL;

	sc.node_id = 1;
	sc.staleness = staleness;
	sc.workers = workers;
	sc.tables = table;
	sc.extra = store;
	ck_assert_int_eq(dml_test_server_start(env, &sc, &s), 0);
	return s;
}

/* An asynchronous server of table 0 with these [store] lines. */
static struct dml_test_server *start_server(struct dml_test_env *env, const char *store)
{
	return start_server_of(env, store, tables, -1, 0);
}

/* The pushes a start of the server replayed, from its log since from. */
static unsigned long long replayed_since(struct dml_test_server *s, size_t from)
{
	static const char *const recovered[] = { ": replayed ", NULL };
	unsigned long long n = 0;
	char *log, *at;

	ck_assert_int_ge(dml_test_server_log_wait(s, from, recovered, WAIT_MS), 0);
	ck_assert_int_eq(dml_test_file_read(dml_test_server_log(s), &log), 0);
	at = strstr(log + from, ": replayed ");
	ck_assert_ptr_nonnull(at);
	ck_assert_int_eq(sscanf(at, ": replayed %llu", &n), 1);
	free(log);
	return n;
}

/* LIVES lives of a server with a sync store and these [store] lines; the
 * most pushes one start replayed. wait_due: checkpoint_log is
 * CHECKPOINT_PUSHES pushes, and a start that replayed that many waits for
 * its checkpoint to be written before it is killed. */
static unsigned long long lives(const char *store_lines, int wait_due)
{
	static const char *const written[] = { "checkpoint of ", NULL };
	static float ones[KEYS * WIDTH], got[KEYS * WIDTH];
	struct dml_test_server *s;
	struct dml_test_env *env;
	unsigned long long most = 0, replayed = 0;
	size_t from = 0;
	dml_handle_t h;
	char *store;
	dml_t *d;

	fill_ones(ones, KEYS * WIDTH);
	ck_assert_int_eq(dml_test_env_new(&env), 0);
	ck_assert_int_gt(asprintf(&store, "[store]\npath = %s/store\ndurability = sync\n%s",
				  dml_test_env_dir(env), store_lines), 0);
	s = start_server(env, store);
	ck_assert_int_eq(dml_test_server_pin_port(s), 0);
	for (int life = 0; life < LIVES; life++) {
		d = client(env, s, "worker");
		for (int k = 0; k < PUSHES_A_LIFE; k++) {
			ck_assert_int_eq(dml_push_range(d, 0, 0, KEYS, ones, &h), 0);
			ck_assert_msg(dml_wait(d, h) == 0, "life %d push %d: %s", life, k,
				      dml_error_detail(d));
		}
		dml_close(d);
		/* Due at this start: the checkpoint ends before the kill. */
		if (wait_due && replayed >= CHECKPOINT_PUSHES)
			ck_assert_int_ge(dml_test_server_log_wait(s, from, written, WAIT_MS), 0);
		from = dml_test_server_log_size(s);
		dml_test_server_kill(s);
		ck_assert_int_eq(dml_test_server_restart(s), 0);
		replayed = replayed_since(s, from);
		most = replayed > most ? replayed : most;
	}
	d = client(env, s, "control");
	ck_assert_int_eq(dml_pull_range(d, 0, 0, KEYS, got, &h), 0);
	ck_assert_int_eq(dml_wait(d, h), 0);
	dml_close(d);
	for (size_t i = 0; i < KEYS * WIDTH; i++)
		ck_assert_msg(got[i] == -(float)(LIVES * PUSHES_A_LIFE), "value %zu is %g, not %d",
			      i, got[i], -LIVES * PUSHES_A_LIFE);
	ck_assert_int_eq(dml_test_server_stop(s, WAIT_MS), 0);
	dml_test_env_free(env);
	free(store);
	return most;
}

START_TEST(test_replay_counts_to_checkpoint)
{
	unsigned long long most = lives("checkpoint_log = 1M\nmap_size = 16M\n", 1);

	printf("check_restart_loop: %d lives of %d pushes, checkpoint_log 16 pushes: at most "
	       "%llu pushes replayed at a start\n", LIVES, PUSHES_A_LIFE, most);
	ck_assert_msg(most <= CHECKPOINT_PUSHES + PUSHES_A_LIFE, "a start replayed %llu pushes",
		      most);
}
END_TEST

START_TEST(test_log_never_fills_the_map)
{
	unsigned long long most = lives("checkpoint_log = 0\nmap_size = 4M\n", 0);

	printf("check_restart_loop: %d lives of %d pushes (%d KiB each) in a 4 MiB map "
	       "without checkpoint_log: at most %llu pushes replayed at a start\n", LIVES,
	       PUSHES_A_LIFE, PUSH_BYTES / 1024, most);
	ck_assert_uint_lt(most * PUSH_BYTES, 4u << 20);
}
END_TEST

/* The tmpfs of test_full_disk_is_named, unmounted however the test ends. */
static char tiny[4096];

static void unmount_tiny(void)
{
	char cmd[sizeof(tiny) + 16];

	if (!tiny[0])
		return;
	snprintf(cmd, sizeof(cmd), "umount %s", tiny);
	if (system(cmd) == 0)
		tiny[0] = 0;
}

/*
 * A full file system (a 1 MiB tmpfs; root only, else skipped): the commit
 * that fails stops the server, and its log says why in words an operator
 * acts on, not as LMDB's bare I/O error.
 */
START_TEST(test_full_disk_is_named)
{
	static float ones[KEYS * WIDTH];
	struct dml_test_server *s;
	struct dml_test_env *env;
	char *dir, *cmd, *store, *log;
	int failed = 0;
	dml_handle_t h;
	dml_t *d;

	if (geteuid() != 0) {
		printf("SKIP: test_full_disk_is_named: not root (mounts a small tmpfs)\n");
		return;
	}
	fill_ones(ones, KEYS * WIDTH);
	ck_assert_int_eq(dml_test_env_new(&env), 0);
	ck_assert_int_gt(asprintf(&dir, "%s/tiny", dml_test_env_dir(env)), 0);
	ck_assert_int_eq(mkdir(dir, 0700), 0);
	ck_assert_int_gt(asprintf(&cmd, "mount -t tmpfs -o size=1m dml-test %s 2>/dev/null", dir),
			 0);
	if (system(cmd) != 0) {
		printf("SKIP: test_full_disk_is_named: cannot mount a tmpfs\n");
		free(cmd);
		free(dir);
		dml_test_env_free(env);
		return;
	}
	/* A failed assertion ends the test's process through exit(). */
	snprintf(tiny, sizeof(tiny), "%s", dir);
	atexit(unmount_tiny);
	ck_assert_int_gt(asprintf(&store, "[store]\npath = %s/store\ndurability = sync\n"
				  "checkpoint_log = 0\nmap_size = 64M\n", dir), 0);
	s = start_server(env, store);
	d = client(env, s, "worker");
	/* 1 MiB holds some fifteen pushes of 64 KiB. */
	for (int k = 0; k < 64 && !failed; k++)
		failed = dml_push_range(d, 0, 0, KEYS, ones, &h) != 0 || dml_wait(d, h) != 0;
	ck_assert_msg(failed, "64 pushes of 64 KiB fit a 1 MiB file system");
	dml_close(d);
	for (int i = 0; i < WAIT_MS / 10 && dml_test_server_alive(s); i++)
		usleep(10000);
	ck_assert_int_eq(dml_test_file_read(dml_test_server_log(s), &log), 0);
	ck_assert_msg(strstr(log, "no space left on the file system") != NULL,
		      "the server's log does not name the full disk:\n%s", log);
	printf("check_restart_loop: a full file system: %s\n",
	       strstr(log, "no space left on the file system"));
	free(log);
	dml_test_server_kill(s);
	unmount_tiny();
	ck_assert_msg(!tiny[0], "cannot unmount %s", dir);
	free(cmd);
	free(store);
	free(dir);
	dml_test_env_free(env);
}
END_TEST

/*
 * One life, no restart: windows of 56 pushes of 64 KiB in flight into a
 * 4 MiB map, 35 MiB in all, with no checkpoint_log: the checkpoints the
 * log's half of the map calls for keep trimming it between group commits,
 * and every push is in the table once.
 */
#define BURST_WINDOW 56
#define BURST_PUSHES 560

START_TEST(test_burst_never_fills_the_map)
{
	static float ones[KEYS * WIDTH], got[KEYS * WIDTH];
	struct dml_test_server *s;
	struct dml_test_env *env;
	dml_handle_t h[BURST_WINDOW];
	char *store;
	dml_t *d;

	fill_ones(ones, KEYS * WIDTH);
	ck_assert_int_eq(dml_test_env_new(&env), 0);
	ck_assert_int_gt(asprintf(&store, "[store]\npath = %s/store\ndurability = sync\n"
				  "checkpoint_log = 0\nmap_size = 4M\n", dml_test_env_dir(env)), 0);
	s = start_server(env, store);
	d = client(env, s, "worker");
	for (int r = 0; r < BURST_PUSHES / BURST_WINDOW; r++) {
		for (int k = 0; k < BURST_WINDOW; k++)
			ck_assert_int_eq(dml_push_range(d, 0, 0, KEYS, ones, &h[k]), 0);
		for (int k = 0; k < BURST_WINDOW; k++)
			ck_assert_msg(dml_wait(d, h[k]) == 0, "round %d push %d: %s", r, k,
				      dml_error_detail(d));
	}
	ck_assert_int_eq(dml_pull_range(d, 0, 0, KEYS, got, &h[0]), 0);
	ck_assert_int_eq(dml_wait(d, h[0]), 0);
	dml_close(d);
	for (size_t i = 0; i < KEYS * WIDTH; i++)
		ck_assert_msg(got[i] == -(float)BURST_PUSHES, "value %zu is %g", i, got[i]);
	ck_assert_int_eq(dml_test_server_stop(s, WAIT_MS), 0);
	free(store);
	dml_test_env_free(env);
}
END_TEST

/*
 * Whole-table pushes of 512 KiB into a 4 MiB map: some seven fit in the
 * log; a checkpoint's map holds the table's copies with room to spare.
 */
#define BIG_KEYS 32768
#define BIG_FLOATS (BIG_KEYS * WIDTH)

static const char big_table[] =
	"[table]\nid = 0\nkind = dense\nwidth = 4\nkeys = 32768\noptimizer = sgd\nlr = 1\n";

static float big_ones[BIG_FLOATS], big_got[BIG_FLOATS];

static void big_push(dml_t *d, int k)
{
	dml_handle_t h;

	ck_assert_int_eq(dml_push_range(d, 0, 0, BIG_KEYS, big_ones, &h), 0);
	ck_assert_msg(dml_wait(d, h) == 0, "push %d: %s", k, dml_error_detail(d));
}

/* Every value of the table is want, before and after a SIGKILL and restart. */
static void big_values_survive(struct dml_test_env *env, struct dml_test_server *s, float want)
{
	dml_handle_t h;
	dml_t *d;

	for (int life = 0; life < 2; life++) {
		if (life) {
			dml_test_server_kill(s);
			ck_assert_int_eq(dml_test_server_restart(s), 0);
		}
		d = client(env, s, "control");
		ck_assert_int_eq(dml_pull_range(d, 0, 0, BIG_KEYS, big_got, &h), 0);
		ck_assert_int_eq(dml_wait(d, h), 0);
		dml_close(d);
		for (size_t i = 0; i < BIG_FLOATS; i++)
			ck_assert_msg(big_got[i] == want, "life %d: value %zu is %g, not %g",
				      life, i, big_got[i], want);
	}
}

/* Whether the server's log says its map was full. */
static int said_full(struct dml_test_server *s, const char *what)
{
	char *log;
	int yes;

	ck_assert_int_eq(dml_test_file_read(dml_test_server_log(s), &log), 0);
	yes = strstr(log, what) != NULL;
	free(log);
	return yes;
}

/*
 * Pushes that do not fit in the map, as fast as their ACKs come: the log's
 * half of the map calls for a checkpoint, and a push that finds the map
 * full while it is being taken waits, ACK and all, for it to trim the log
 * (the server used to stop there), or finds the log trimmed already.
 */
#define FULL_PUSHES 24

START_TEST(test_full_map_waits_for_the_trim)
{
	struct dml_test_server *s;
	struct dml_test_env *env;
	char *store;
	int full;
	dml_t *d;

	fill_ones(big_ones, BIG_FLOATS);
	ck_assert_int_eq(dml_test_env_new(&env), 0);
	ck_assert_int_gt(asprintf(&store, "[store]\npath = %s/store\ndurability = sync\n"
				  "checkpoint_log = 0\nmap_size = 4M\n", dml_test_env_dir(env)), 0);
	s = start_server_of(env, store, big_table, -1, 0);
	d = client(env, s, "worker");
	for (int k = 0; k < FULL_PUSHES; k++)
		big_push(d, k);
	dml_close(d);
	full = said_full(s, "the map is full");
	big_values_survive(env, s, -(float)FULL_PUSHES);
	printf("check_restart_loop: %d pushes of %d KiB into a 4 MiB map (%s): each "
	       "acknowledged, each in the table once, also after a restart\n", FULL_PUSHES,
	       BIG_FLOATS * 4 / 1024, full ? "some waited for a trim" : "none found it full");
	ck_assert_int_eq(dml_test_server_stop(s, WAIT_MS), 0);
	free(store);
	dml_test_env_free(env);
}
END_TEST

/*
 * A push that does not fit while no checkpoint may be taken (under BSP,
 * pushes wait for their clock's step, and the rows lack them): the map
 * grows so that it commits, and the step's checkpoint trims the log.
 */
#define STEP_PUSHES 9

START_TEST(test_full_map_grows_until_a_checkpoint)
{
	struct dml_test_server *s;
	struct dml_test_env *env;
	char *store;
	dml_t *a, *b;

	fill_ones(big_ones, BIG_FLOATS);
	ck_assert_int_eq(dml_test_env_new(&env), 0);
	ck_assert_int_gt(asprintf(&store, "[store]\npath = %s/store\ndurability = sync\n"
				  "checkpoint_log = 0\nmap_size = 4M\n", dml_test_env_dir(env)), 0);
	s = start_server_of(env, store, big_table, 0, 2);
	a = client_of(env, s, 1, "worker");
	b = client_of(env, s, 2, "worker");
	for (int clock = 0; clock < 2; clock++) {
		for (int k = 0; k < STEP_PUSHES; k++)
			big_push(a, k);
		ck_assert_int_eq(dml_clock(a), 0);
		ck_assert_int_eq(dml_clock(b), 0);
	}
	dml_close(a);
	dml_close(b);
	ck_assert_msg(said_full(s, "the map is full: grown to"), "the map did not grow");
	big_values_survive(env, s, -(float)(2 * STEP_PUSHES));
	printf("check_restart_loop: BSP, %d pushes of %d KiB a clock into a 4 MiB map: the "
	       "map grew, every push in the table once, also after a restart\n", STEP_PUSHES,
	       BIG_FLOATS * 4 / 1024);
	ck_assert_int_eq(dml_test_server_stop(s, WAIT_MS), 0);
	free(store);
	dml_test_env_free(env);
}
END_TEST

static Suite *restart_loop_suite(void)
{
	Suite *s = suite_create("restart_loop");
	TCase *tc = tcase_create("lives");

	tcase_set_timeout(tc, 300);
	tcase_add_test(tc, test_replay_counts_to_checkpoint);
	tcase_add_test(tc, test_log_never_fills_the_map);
	tcase_add_test(tc, test_full_disk_is_named);
	tcase_add_test(tc, test_burst_never_fills_the_map);
	tcase_add_test(tc, test_full_map_waits_for_the_trim);
	tcase_add_test(tc, test_full_map_grows_until_a_checkpoint);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return dml_check_run(restart_loop_suite());
}
