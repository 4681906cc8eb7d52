/*
 * check_cluster.c - integration tests against real dml-server processes.
 *
 * Every test starts its own servers on loopback ports the kernel picks (see
 * harness.h) and talks to them through libdml, forked worker processes,
 * the dml-example-lsq program, raw sockets, or a proxy that breaks
 * connections. Covered: the staleness bound (SSP, BSP, asynchronous) as seen
 * by pulls, dead workers leaving the clock set, exact sums under pipelining
 * and broken connections (a resent push is applied once), end-to-end
 * training, malformed and unauthenticated input, authentication and config
 * refusals, clean shutdown on SIGTERM, and regressions, each named after what
 * broke (servers out of shard order, key lists on dense tables, closing after
 * a server exited, pushes by control clients, endless resends), and the
 * Prometheus metrics a server serves over HTTP.
 *
 * Tests must not depend on timing for correctness, only for non-vacuity
 * (a slow worker has to make the others wait), with wide margins.
 */
#define _GNU_SOURCE
#include <check.h>
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "auth.h"
#include "check_run.h"
#include "frame.h"
#include "harness.h"
#include "log.h"
#include "util.h"

#define TEST_TIMEOUT_S 45
#define WAIT_MS 5000
/* Numbers into config text and command lines. */
#define STR_(x) #x
#define STR(x) STR_(x)

/* ---- shared helpers ---------------------------------------------------- */

static void sleep_us(long us)
{
	struct timespec ts = { us / 1000000, (us % 1000000) * 1000 };

	while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
		;
}

static uint64_t elapsed_ms(uint64_t since_ns)
{
	return (dml_now_ns() - since_ns) / 1000000u;
}

/* A new environment with n servers (shards 0/n .. n-1/n) of one config. */
static struct dml_test_env *cluster_start(size_t n,
					  const struct dml_test_server_conf *base,
					  struct dml_test_server **servers)
{
	struct dml_test_server_conf conf = *base;
	struct dml_test_env *env;
	size_t i;

	ck_assert_int_eq(dml_test_env_new(&env), 0);
	for (i = 0; i < n; i++) {
		conf.shard_index = (uint32_t)i;
		conf.shard_count = (uint32_t)n;
		conf.node_id = (uint32_t)(i + 1);
		ck_assert_msg(dml_test_server_start(env, &conf, &servers[i]) == 0,
			      "server %zu did not start", i);
	}
	return env;
}

/* SIGTERM, and the server must exit 0 in time. */
static void stop_ok(struct dml_test_server *s)
{
	ck_assert_int_eq(dml_test_server_stop(s, DML_TEST_STOP_TIMEOUT_MS), 0);
}

static void wait_ok(dml_t *d, int rc, const char *what)
{
	ck_assert_msg(rc == 0, "%s: %s (%s)", what, dml_strerror(rc),
		      dml_error_detail(d));
}

/* Push vals to the dense range [0, n) and wait for the acknowledgement. */
static int push_dense(dml_t *d, uint32_t table, uint64_t n, const float *vals)
{
	dml_handle_t h;
	int rc = dml_push_range(d, table, 0, n, vals, &h);

	return rc ? rc : dml_wait(d, h);
}

static int pull_dense(dml_t *d, uint32_t table, uint64_t n, float *out)
{
	dml_handle_t h;
	int rc = dml_pull_range(d, table, 0, n, out, &h);

	return rc ? rc : dml_wait(d, h);
}

/* Worker children report through stderr (kept in the test output) and exit. */
static void __attribute__((noreturn)) child_fail(const char *what, int rc)
{
	fprintf(stderr, "worker %d: %s: %s\n", (int)getpid(), what, dml_strerror(rc));
	_exit(1);
}

/* ---- consistency: SSP, BSP and asynchronous pulls ---------------------- */

/*
 * Each worker w (1..3) pushes, per iteration, 1 to key w-1 and w to the last
 * key, with the `add` optimizer: a pull shows exactly how many pushes of
 * each worker were applied, and the last key must always equal
 * sum(w * count_w) (a push is applied whole).
 */
#define CLOCK_WORKERS 3
#define CLOCK_KEYS (CLOCK_WORKERS + 1)
#define CLOCK_ITERS 40
#define CLOCK_TABLE \
	"[table]\nid = 0\nkind = dense\nwidth = 1\nkeys = 4\noptimizer = add\n"

enum { REC_PULL = 0, REC_DONE = 1 };

struct clock_record {
	uint32_t kind;
	uint32_t worker;
	uint64_t clock;
	uint64_t min_clock;
	uint64_t elapsed_ms; /* REC_DONE: from connected to done */
	float vals[CLOCK_KEYS];
};

static void write_record(int fd, const struct clock_record *r)
{
	/* Under PIPE_BUF bytes: one write is atomic, records never interleave. */
	if (write(fd, r, sizeof(*r)) != (ssize_t)sizeof(*r))
		child_fail("write record", DML_EIO);
}

static void __attribute__((noreturn))
clock_worker(struct dml_test_env *env, struct dml_test_server *srv, uint32_t id,
	     long sleep_per_iter_us, int fd, const int *barrier)
{
	struct clock_record rec;
	float grad[CLOCK_KEYS] = { 0 };
	uint64_t t0;
	dml_t *d;
	char go;
	int i, rc;

	rc = dml_test_client_new(env, &srv, 1, id, &d);
	if (rc)
		child_fail("connect", rc);
	/* All connected before anyone starts: start-up (slow under sanitizers
	 * and load) is not part of the race. The test closes the pipe to go. */
	if (write(barrier[1], "r", 1) != 1 || read(barrier[0], &go, 1) != 0)
		child_fail("barrier", DML_EIO);
	t0 = dml_now_ns();
	grad[id - 1] = 1.0f;
	grad[CLOCK_KEYS - 1] = (float)id;
	for (i = 0; i < CLOCK_ITERS; i++) {
		if (sleep_per_iter_us)
			sleep_us(sleep_per_iter_us);
		memset(&rec, 0, sizeof(rec));
		rc = pull_dense(d, 0, CLOCK_KEYS, rec.vals);
		if (rc)
			child_fail("pull", rc);
		rec.kind = REC_PULL;
		rec.worker = id;
		rec.clock = dml_current_clock(d);
		rec.min_clock = dml_last_pull_min_clock(d);
		write_record(fd, &rec);
		rc = push_dense(d, 0, CLOCK_KEYS, grad);
		if (rc)
			child_fail("push", rc);
		rc = dml_clock(d);
		if (rc)
			child_fail("clock", rc);
	}
	memset(&rec, 0, sizeof(rec));
	rec.kind = REC_DONE;
	rec.worker = id;
	rec.clock = dml_current_clock(d);
	rec.elapsed_ms = elapsed_ms(t0);
	write_record(fd, &rec);
	dml_close(d);
	_exit(0);
}

struct clock_run {
	struct clock_record recs[CLOCK_WORKERS * (CLOCK_ITERS + 1)];
	size_t nrecs;
	uint64_t done_ms[CLOCK_WORKERS + 1]; /* by worker id */
	uint64_t max_lag[CLOCK_WORKERS + 1]; /* largest clock - min_clock */
	float final[CLOCK_KEYS];
};

/* Read n bytes from fd (the workers' "connected" marks), or fail. */
static void read_exactly(int fd, size_t n, int timeout_ms)
{
	struct pollfd pfd = { .fd = fd, .events = POLLIN };
	uint64_t start = dml_now_ns();
	char buf[64];
	ssize_t got;

	while (n > 0) {
		ck_assert_msg(elapsed_ms(start) < (uint64_t)timeout_ms,
			      "%zu workers did not connect in %d ms", n, timeout_ms);
		if (poll(&pfd, 1, 100) <= 0)
			continue;
		got = read(fd, buf, n < sizeof(buf) ? n : sizeof(buf));
		if (got < 0 && errno == EINTR)
			continue;
		ck_assert_msg(got > 0, "a worker failed before connecting");
		n -= (size_t)got;
	}
}

/* Read fixed-size records until every writer closed, or fail at deadline. */
static void read_records(int fd, struct clock_run *run, int timeout_ms)
{
	uint64_t start = dml_now_ns();
	uint8_t *dst = (uint8_t *)run->recs;
	size_t cap = sizeof(run->recs), got = 0;
	uint8_t extra;
	struct pollfd pfd = { .fd = fd, .events = POLLIN };
	ssize_t n;

	for (;;) {
		ck_assert_msg(elapsed_ms(start) < (uint64_t)timeout_ms,
			      "workers did not finish in %d ms (%zu records)", timeout_ms,
			      got / sizeof(run->recs[0]));
		if (poll(&pfd, 1, 100) <= 0)
			continue;
		/* Full: the one read left must be the end of the stream. */
		n = got < cap ? read(fd, dst + got, cap - got) : read(fd, &extra, 1);
		if (n < 0 && errno == EINTR)
			continue;
		ck_assert_msg(n >= 0, "read records: %s", strerror(errno));
		if (n == 0)
			break;
		ck_assert_msg(got < cap, "more records than expected");
		got += (size_t)n;
	}
	ck_assert_msg(got % sizeof(run->recs[0]) == 0, "torn record");
	run->nrecs = got / sizeof(run->recs[0]);
}

/*
 * Run CLOCK_WORKERS forked workers against one server with staleness s;
 * worker 3 sleeps slow_us per iteration. Then check what every bound
 * promises, and read the final table with a control client.
 */
static void clock_run(int64_t s, long slow_us, struct clock_run *run)
{
	struct dml_test_server_conf conf = { .staleness = s,
					     .workers = CLOCK_WORKERS,
					     .tables = CLOCK_TABLE };
	struct dml_test_server *srv;
	struct dml_test_env *env = cluster_start(1, &conf, &srv);
	pid_t pids[CLOCK_WORKERS];
	int fds[2], ready[2], go[2], barrier[2], st, i;
	dml_t *ctl;

	memset(run, 0, sizeof(*run));
	ck_assert_int_eq(pipe(fds), 0);
	ck_assert_int_eq(pipe(ready), 0);
	ck_assert_int_eq(pipe(go), 0);
	/* A child writes ready[1] when connected and waits for go[0]. */
	barrier[0] = go[0];
	barrier[1] = ready[1];
	for (i = 0; i < CLOCK_WORKERS; i++) {
		ck_assert_int_eq(dml_test_fork(env, &pids[i]), 0);
		if (pids[i] == 0) {
			close(fds[0]);
			close(ready[0]);
			close(go[1]);
			clock_worker(env, srv, (uint32_t)(i + 1),
				     i + 1 == CLOCK_WORKERS ? slow_us : 0, fds[1],
				     barrier);
		}
	}
	close(fds[1]);
	close(ready[1]);
	close(go[0]);
	read_exactly(ready[0], CLOCK_WORKERS, 20000);
	close(ready[0]);
	close(go[1]);
	read_records(fds[0], run, 30000);
	close(fds[0]);
	for (i = 0; i < CLOCK_WORKERS; i++) {
		ck_assert_int_eq(dml_test_proc_wait(env, pids[i], WAIT_MS, &st), 0);
		ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0,
			      "worker %d failed (status 0x%x)", i + 1, st);
	}
	ck_assert_uint_eq(run->nrecs, CLOCK_WORKERS * (CLOCK_ITERS + 1));

	/* Everything pushed is there, exactly once. */
	ck_assert_int_eq(dml_test_client_new(env, &srv, 1, 0, &ctl), 0);
	wait_ok(ctl, pull_dense(ctl, 0, CLOCK_KEYS, run->final), "final pull");
	dml_close(ctl);
	for (i = 0; i < CLOCK_WORKERS; i++)
		ck_assert_float_eq(run->final[i], (float)CLOCK_ITERS);
	ck_assert_float_eq(
		run->final[CLOCK_KEYS - 1],
		(float)(CLOCK_ITERS * CLOCK_WORKERS * (CLOCK_WORKERS + 1) / 2));

	stop_ok(srv);
	dml_test_env_free(env);
}

/* Check every pull against the bound s; fills done_ms and max_lag. */
static void clock_check(int64_t s, struct clock_run *run)
{
	size_t i;
	uint32_t v;

	for (i = 0; i < run->nrecs; i++) {
		const struct clock_record *r = &run->recs[i];
		uint64_t c = r->clock, m = r->min_clock;
		double weighted = 0;

		ck_assert(r->worker >= 1 && r->worker <= CLOCK_WORKERS);
		if (r->kind == REC_DONE) {
			ck_assert_uint_eq(c, CLOCK_ITERS);
			run->done_ms[r->worker] = r->elapsed_ms;
			continue;
		}
		if (c > m && c - m > run->max_lag[r->worker])
			run->max_lag[r->worker] = c - m;
		/* Read-my-writes: own pushes were acknowledged before each clock. */
		ck_assert_msg(r->vals[r->worker - 1] == (float)c,
			      "worker %u at clock %llu sees %g of its own pushes",
			      r->worker, (unsigned long long)c, r->vals[r->worker - 1]);
		for (v = 1; v <= CLOCK_WORKERS; v++)
			weighted += v * (double)r->vals[v - 1];
		ck_assert_msg(r->vals[CLOCK_KEYS - 1] == (float)weighted,
			      "a push was applied in part: sum key %g, counts say %g",
			      r->vals[CLOCK_KEYS - 1], weighted);
		/* All workers joined before anyone pulled (the barrier), and each
		 * clock follows its acknowledged push: every push before the
		 * slowest clock is visible, whatever the bound. */
		for (v = 1; v <= CLOCK_WORKERS; v++)
			ck_assert_msg(r->vals[v - 1] >= (float)m,
				      "worker %u at clock %llu (min %llu) sees only %g "
				      "pushes of worker %u",
				      r->worker, (unsigned long long)c,
				      (unsigned long long)m, r->vals[v - 1], v);
		if (s < 0)
			continue;
		ck_assert_msg(
			m + (uint64_t)s >= c,
			"worker %u answered at clock %llu with min_clock %llu (s=%lld)",
			r->worker, (unsigned long long)c, (unsigned long long)m,
			(long long)s);
		/* Nobody gets more than s clocks ahead of a live worker; add the
		 * push of its current iteration. */
		for (v = 1; v <= CLOCK_WORKERS; v++)
			ck_assert_msg(
				r->vals[v - 1] <= (float)(c + (uint64_t)s + 1),
				"worker %u at clock %llu sees %g pushes of worker %u "
				"(s=%lld)",
				r->worker, (unsigned long long)c, r->vals[v - 1], v,
				(long long)s);
	}
}

START_TEST(test_ssp_bound_holds_pulls)
{
	static struct clock_run run;
	const long slow_us = 5000;

	clock_run(1, slow_us, &run);
	clock_check(1, &run);
	/* Not vacuous: fast workers ran exactly s ahead, and had to wait. */
	ck_assert_uint_eq(
		run.max_lag[1] > run.max_lag[2] ? run.max_lag[1] : run.max_lag[2], 1);
	ck_assert_uint_ge(run.done_ms[1], CLOCK_ITERS * slow_us / 2000);
	ck_assert_uint_ge(run.done_ms[2], CLOCK_ITERS * slow_us / 2000);
}
END_TEST

START_TEST(test_bsp_pulls_see_every_earlier_push)
{
	static struct clock_run run;
	const long slow_us = 5000;
	size_t i, early = 0;
	uint32_t v;
	int saw;

	clock_run(0, slow_us, &run);
	clock_check(0, &run);
	/*
	 * BSP: at clock c every push of clocks < c is visible. A worker that
	 * was answered earlier may also have pushed for clock c already (the
	 * server does not buffer pushes by clock), so a count is c or c + 1.
	 */
	for (i = 0; i < run.nrecs; i++) {
		const struct clock_record *r = &run.recs[i];

		if (r->kind != REC_PULL || r->clock == 0)
			continue;
		ck_assert_uint_eq(r->min_clock, r->clock);
		saw = 0;
		for (v = 1; v <= CLOCK_WORKERS; v++) {
			ck_assert_msg(
				r->vals[v - 1] == (float)r->clock ||
					r->vals[v - 1] == (float)(r->clock + 1),
				"BSP pull at clock %llu sees %g pushes of worker %u",
				(unsigned long long)r->clock, r->vals[v - 1], v);
			saw |= r->vals[v - 1] != (float)r->clock;
		}
		early += saw;
	}
	fprintf(stderr, "bsp: %zu of %zu pulls also saw a push of their own clock\n",
		early, run.nrecs - CLOCK_WORKERS);
	ck_assert_uint_ge(run.done_ms[1], CLOCK_ITERS * slow_us / 2000);
	ck_assert_uint_ge(run.done_ms[2], CLOCK_ITERS * slow_us / 2000);
}
END_TEST

START_TEST(test_async_pulls_never_wait)
{
	static struct clock_run run;
	const long slow_us = 20000;
	uint64_t slow_ms;

	clock_run(-1, slow_us, &run);
	clock_check(-1, &run);
	slow_ms = run.done_ms[CLOCK_WORKERS];
	ck_assert_uint_ge(slow_ms, CLOCK_ITERS * slow_us / 1000);
	ck_assert_msg(run.done_ms[1] < slow_ms / 2 && run.done_ms[2] < slow_ms / 2,
		      "fast workers took %llu and %llu ms, the slow one %llu",
		      (unsigned long long)run.done_ms[1],
		      (unsigned long long)run.done_ms[2], (unsigned long long)slow_ms);
	ck_assert_uint_ge(run.max_lag[1], 2);
	ck_assert_uint_ge(run.max_lag[2], 2);
}
END_TEST

START_TEST(test_dead_worker_leaves_clock_set)
{
	/* BSP with two workers; the second dies without a word (SIGKILL). */
	struct dml_test_server_conf conf = {
		.staleness = 0, .workers = 2, .dead_after_ms = 400, .tables = CLOCK_TABLE
	};
	struct dml_test_server *srv;
	struct dml_test_env *env = cluster_start(1, &conf, &srv);
	float out[CLOCK_KEYS];
	dml_handle_t h;
	uint64_t t0;
	pid_t victim;
	int fds[2], done = 1, st;
	char ready;
	dml_opts_t *o;
	dml_t *d;

	ck_assert_int_eq(pipe(fds), 0);
	ck_assert_int_eq(dml_test_fork(env, &victim), 0);
	if (victim == 0) {
		int rc = dml_test_client_new(env, &srv, 1, 2, &d);

		if (rc)
			child_fail("connect", rc);
		if (write(fds[1], "j", 1) != 1)
			_exit(1);
		for (;;)
			pause();
	}
	close(fds[1]);
	ck_assert_int_eq(read(fds[0], &ready, 1), 1);
	close(fds[0]);

	/* A server that never drops the dead would fail the pull, not hang. */
	ck_assert_int_eq(dml_test_client_opts(env, &srv, 1, 1, &o), 0);
	ck_assert_int_eq(dml_opts_set(o, "request_timeout_ms", "10000"), 0);
	ck_assert_int_eq(dml_connect(o, &d), 0);
	dml_opts_free(o);
	wait_ok(d, dml_clock(d), "clock");
	wait_ok(d, dml_pull_range(d, 0, 0, CLOCK_KEYS, out, &h), "pull");
	dml_progress(d, 200);
	ck_assert_int_eq(dml_test(d, h, &done), 0);
	ck_assert_msg(!done, "BSP pull at clock 1 answered while worker 2 is at 0");

	kill(victim, SIGKILL);
	ck_assert_int_eq(dml_test_proc_wait(env, victim, WAIT_MS, &st), 0);
	t0 = dml_now_ns();
	wait_ok(d, dml_wait(d, h), "pull after the death");
	ck_assert_uint_ge(elapsed_ms(t0), 300);
	ck_assert_uint_lt(elapsed_ms(t0), 5000);
	ck_assert_uint_eq(dml_last_pull_min_clock(d), 1);
	dml_close(d);
	stop_ok(srv);
	dml_test_env_free(env);
}
END_TEST

/*
 * A pull the server holds for the staleness bound says how long in its
 * reply (held_us), and libdml adds it up (dml_pulls_held_ns): what other
 * workers cost this one, as against its own communication. Worker 1 pulls
 * at clock 1 under BSP while worker 2 stays at 0 for 300 ms; worker 2's
 * pull at clock 1 then is answered at once.
 */
START_TEST(test_held_pulls_report_their_hold)
{
	struct dml_test_server_conf conf = {
		.staleness = 0, .workers = 2, .tables = CLOCK_TABLE
	};
	struct dml_test_server *srv;
	struct dml_test_env *env = cluster_start(1, &conf, &srv);
	float out[CLOCK_KEYS];
	dml_handle_t h;
	uint64_t t0;
	dml_t *d1, *d2;

	ck_assert_int_eq(dml_test_client_new(env, &srv, 1, 1, &d1), 0);
	ck_assert_int_eq(dml_test_client_new(env, &srv, 1, 2, &d2), 0);
	ck_assert_uint_eq(dml_pulls_held_ns(d1), 0);
	wait_ok(d1, dml_clock(d1), "clock");
	wait_ok(d1, dml_pull_range(d1, 0, 0, CLOCK_KEYS, out, &h), "pull");
	t0 = dml_now_ns();
	while (elapsed_ms(t0) < 300) {
		dml_progress(d1, 20);
		dml_progress(d2, 20);
	}
	wait_ok(d2, dml_clock(d2), "clock");
	dml_progress(d2, 50);
	wait_ok(d1, dml_wait(d1, h), "held pull");
	ck_assert_msg(dml_pulls_held_ns(d1) >= 250000000ull &&
		      dml_pulls_held_ns(d1) < 5000000000ull, "held %llu ns",
		      (unsigned long long)dml_pulls_held_ns(d1));
	wait_ok(d2, dml_pull_range(d2, 0, 0, CLOCK_KEYS, out, &h), "pull");
	wait_ok(d2, dml_wait(d2, h), "pull not held");
	ck_assert_msg(dml_pulls_held_ns(d2) < 50000000ull, "held %llu ns",
		      (unsigned long long)dml_pulls_held_ns(d2));
	dml_close(d1);
	dml_close(d2);
	stop_ok(srv);
	dml_test_env_free(env);
}
END_TEST

/*
 * stale_scaling = inverse: worker 2 pushes at clock 0 while worker 1 is at
 * clock 3, so its gradient counts a quarter (DynSGD); a push at the newest
 * clock counts whole. With the default (off) the stale push counts whole.
 */
START_TEST(test_stale_pushes_scaled_by_staleness)
{
	static const char table[] =
		"[table]\nid = 0\nkind = dense\nwidth = 1\nkeys = 2\noptimizer = sgd\nlr = 1\n";
	static const char *const modes[] = { NULL, "stale_scaling = inverse\n" };
	const float want[2][2] = { { -8, -8 }, { -8, -2 } };

	for (int i = 0; i < 2; i++) {
		struct dml_test_server_conf conf = {
			.staleness = -1, .tables = table, .job_extra = modes[i]
		};
		struct dml_test_server *srv;
		struct dml_test_env *env = cluster_start(1, &conf, &srv);
		float g[2] = { 8, 0 }, out[2];
		dml_t *fast, *slow;

		ck_assert_int_eq(dml_test_client_new(env, &srv, 1, 1, &fast), 0);
		ck_assert_int_eq(dml_test_client_new(env, &srv, 1, 2, &slow), 0);
		for (int c = 0; c < 3; c++)
			wait_ok(fast, dml_clock(fast), "clock");
		/* The clocks travel on fast's connection: a round trip on it after. */
		wait_ok(fast, pull_dense(fast, 0, 2, out), "pull");
		wait_ok(fast, push_dense(fast, 0, 2, g), "push at clock 3");
		g[0] = 0;
		g[1] = 8;
		wait_ok(slow, push_dense(slow, 0, 2, g), "push at clock 0");
		wait_ok(slow, pull_dense(slow, 0, 2, out), "pull");
		ck_assert_msg(out[0] == want[i][0] && out[1] == want[i][1],
			      "stale_scaling %s: %g %g, want %g %g", i ? "inverse" : "off",
			      out[0], out[1], want[i][0], want[i][1]);
		dml_close(fast);
		dml_close(slow);
		stop_ok(srv);
		dml_test_env_free(env);
	}
}
END_TEST

/* ---- training: dml-example-lsq on two shards ---------------------------- */

#define LSQ_WORKERS 3
#define LSQ_DIM 50
/* The noise alone gives 0.5 * 0.1^2 = 0.005; starting from w = 0 the loss
 * is about 0.5 * D = 25. */
#define LSQ_LOSS_BOUND 0.05

/* The number after `key` on the first line of text that has it, or -1. */
static double number_after(const char *text, const char *key)
{
	const char *p = strstr(text, key);

	return p ? strtod(p + strlen(key), NULL) : -1.0;
}

START_TEST(test_lsq_trains_on_two_shards)
{
	struct dml_test_server_conf conf = {
		.staleness = 2,
		.workers = LSQ_WORKERS,
		.tables = "[table]\nid = 3\nkind = dense\nwidth = 1\n"
			  "keys = " STR(LSQ_DIM) "\noptimizer = sgd\nlr = 0.05\n",
	};
	struct dml_test_server *srv[2];
	struct dml_test_env *env = cluster_start(2, &conf, srv);
	char servers[64], id[16], log_name[256], *bin, *text;
	/* clang-format off */
	char *argv[] = { NULL, "--servers", servers, "--secret", NULL,
			 "--worker-id", id, "--workers", STR(LSQ_WORKERS), "--table", "3",
			 "--dim", STR(LSQ_DIM), "--iters", "300", "--batch", "32",
			 "--seed", "11", "--report", "100", "--staleness-report", NULL };
	/* clang-format on */
	pid_t pids[LSQ_WORKERS];
	double first, final;
	int i, st;

	snprintf(servers, sizeof(servers), "127.0.0.1:%u,127.0.0.1:%u",
		 dml_test_server_port(srv[0]), dml_test_server_port(srv[1]));
	dml_test_bin("worker/dml-example-lsq", &bin);
	argv[0] = bin;
	argv[4] = (char *)dml_test_env_secret(env);
	for (i = 0; i < LSQ_WORKERS; i++) {
		snprintf(id, sizeof(id), "%d", i + 1);
		snprintf(log_name, sizeof(log_name), "lsq-%d.log", i + 1);
		ck_assert_int_eq(dml_test_proc_spawn(env, argv, log_name, &pids[i]), 0);
	}
	free(bin);
	for (i = 0; i < LSQ_WORKERS; i++) {
		ck_assert_int_eq(dml_test_proc_wait(env, pids[i], 30000, &st), 0);
		snprintf(log_name, sizeof(log_name), "%s/lsq-%d.log",
			 dml_test_env_dir(env), i + 1);
		ck_assert_int_eq(dml_test_file_read(log_name, &text), 0);
		fprintf(stderr, "---- dml-example-lsq worker %d ----\n%s", i + 1, text);
		ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0,
			      "worker %d: status 0x%x", i + 1, st);
		first = number_after(text, " loss ");
		final = number_after(text, "\nfinal loss: ");
		free(text);
		ck_assert_msg(first > 1.0, "worker %d: initial loss %g", i + 1, first);
		ck_assert_msg(final >= 0 && final < LSQ_LOSS_BOUND && final < first / 100,
			      "worker %d: final loss %g (initial %g)", i + 1, final,
			      first);
	}
	for (i = 0; i < 2; i++)
		stop_ok(srv[i]);
	dml_test_env_free(env);
}
END_TEST

/* ---- exactly once: pipelined pushes, broken connections ----------------- */

#define EO_CLIENTS 3
#define EO_DENSE_KEYS 1000
#define EO_WIDTH 2
#define EO_SPARSE_KEYS 64
#define EO_PUSHES 16 /* per client, table and round, all in flight at once */
#define EO_ROUNDS 4
#define EO_SPARSE_SUM (EO_CLIENTS * (EO_CLIENTS + 1) / 2) /* client c pushes c */
/* clang-format off */
#define EO_TABLES                                                      \
	"[table]\nid = 0\nkind = dense\nwidth = " STR(EO_WIDTH) "\n"     \
	"keys = " STR(EO_DENSE_KEYS) "\noptimizer = add\n"                \
	"\n[table]\nid = 1\nkind = sparse\nwidth = 1\noptimizer = add\n"
/* clang-format on */

struct eo_client {
	dml_t *d;
	float dense[EO_DENSE_KEYS * EO_WIDTH];
	float sparse[EO_SPARSE_KEYS];
	dml_handle_t h[2 * EO_PUSHES];
};

/* Small integers: every sum stays exact in a float. */
static float eo_dense_val(int client, size_t i)
{
	return (float)(client + 1 + (int)(i % 7));
}

static void eo_keys(uint64_t *keys)
{
	uint64_t state = 42;
	size_t i;

	for (i = 0; i < EO_SPARSE_KEYS; i++) {
		state = state * 6364136223846793005ull + 1442695040888963407ull;
		keys[i] = state ^ (state >> 29);
	}
}

/* Issue every client's pushes for one round without waiting for any. */
static void eo_issue(struct eo_client *cl, const uint64_t *keys)
{
	int c, p;

	for (c = 0; c < EO_CLIENTS; c++) {
		for (p = 0; p < EO_PUSHES; p++) {
			wait_ok(cl[c].d,
				dml_push_range(cl[c].d, 0, 0, EO_DENSE_KEYS, cl[c].dense,
					       &cl[c].h[2 * p]),
				"dense push");
			wait_ok(cl[c].d,
				dml_push(cl[c].d, 1, keys, EO_SPARSE_KEYS, cl[c].sparse,
					 &cl[c].h[2 * p + 1]),
				"sparse push");
		}
		dml_progress(cl[c].d, 0);
	}
}

/*
 * Break the connections through one proxy in the middle of a round. Odd
 * rounds: the server applies everything but its ACKs are held back and lost,
 * so every push is resent and must not be applied again. Even rounds: cut
 * at once, whatever was in flight.
 */
static int eo_fault(struct dml_test_proxy *proxy, struct eo_client *cl,
		    const uint64_t *keys, int round)
{
	int cut, c;

	if (round % 2)
		ck_assert_int_eq(dml_test_proxy_hold(proxy), 0);
	eo_issue(cl, keys);
	if (round % 2) {
		for (c = 0; c < EO_CLIENTS; c++)
			dml_progress(cl[c].d, 1);
		sleep_us(100000);
	}
	ck_assert_int_eq(dml_test_proxy_cut(proxy, &cut), 0);
	return cut;
}

/*
 * EO_ROUNDS rounds of EO_PUSHES dense and sparse pushes per client, all in
 * flight together, on two shards; with faults the clients go through
 * proxies that break their connections in every round. A control client
 * then reads exact sums.
 */
static void exactly_once_run(int faults)
{
	struct dml_test_server_conf conf = { .staleness = -1, .tables = EO_TABLES };
	struct dml_test_server *srv[2];
	struct dml_test_env *env = cluster_start(2, &conf, srv);
	struct dml_test_proxy *proxy[2];
	static struct eo_client cl[EO_CLIENTS];
	static float dense_out[EO_DENSE_KEYS * EO_WIDTH];
	uint64_t keys[EO_SPARSE_KEYS];
	float sparse_out[EO_SPARSE_KEYS];
	uint16_t ports[2];
	int c, r, p, cut = 0;
	size_t i;
	dml_opts_t *o;
	dml_handle_t h;
	dml_t *ctl;

	for (i = 0; i < 2; i++) {
		ports[i] = dml_test_server_port(srv[i]);
		if (faults) {
			ck_assert_int_eq(dml_test_proxy_start(env, ports[i], &proxy[i]),
					 0);
			ports[i] = dml_test_proxy_port(proxy[i]);
		}
	}
	eo_keys(keys);
	for (c = 0; c < EO_CLIENTS; c++) {
		ck_assert_int_eq(
			dml_test_client_opts_ports(env, ports, 2, (uint32_t)c + 1, &o),
			0);
		ck_assert_int_eq(dml_connect(o, &cl[c].d), 0);
		dml_opts_free(o);
		for (i = 0; i < EO_DENSE_KEYS * EO_WIDTH; i++)
			cl[c].dense[i] = eo_dense_val(c, i);
		for (i = 0; i < EO_SPARSE_KEYS; i++)
			cl[c].sparse[i] = (float)(c + 1);
	}
	for (r = 0; r < EO_ROUNDS; r++) {
		if (faults)
			cut += eo_fault(proxy[r % 2], cl, keys, r);
		else
			eo_issue(cl, keys);
		for (c = 0; c < EO_CLIENTS; c++)
			for (p = 0; p < 2 * EO_PUSHES; p++)
				wait_ok(cl[c].d, dml_wait(cl[c].d, cl[c].h[p]), "push");
	}
	if (faults)
		ck_assert_int_ge(cut, EO_CLIENTS * EO_ROUNDS);

	ck_assert_int_eq(dml_test_client_new(env, srv, 2, 0, &ctl), 0);
	wait_ok(ctl, pull_dense(ctl, 0, EO_DENSE_KEYS, dense_out), "dense pull");
	for (i = 0; i < EO_DENSE_KEYS * EO_WIDTH; i++) {
		float want = 0;

		for (c = 0; c < EO_CLIENTS; c++)
			want += EO_ROUNDS * EO_PUSHES * eo_dense_val(c, i);
		ck_assert_msg(dense_out[i] == want, "dense value %zu: %g, want %g", i,
			      dense_out[i], want);
	}
	wait_ok(ctl, dml_pull(ctl, 1, keys, EO_SPARSE_KEYS, sparse_out, &h),
		"sparse pull");
	wait_ok(ctl, dml_wait(ctl, h), "sparse pull");
	for (i = 0; i < EO_SPARSE_KEYS; i++)
		ck_assert_msg(sparse_out[i] ==
				      (float)(EO_ROUNDS * EO_PUSHES * EO_SPARSE_SUM),
			      "sparse key %zu: %g, want %d", i, sparse_out[i],
			      EO_ROUNDS * EO_PUSHES * EO_SPARSE_SUM);
	dml_close(ctl);
	for (c = 0; c < EO_CLIENTS; c++)
		dml_close(cl[c].d);
	for (i = 0; i < 2; i++)
		stop_ok(srv[i]);
	dml_test_env_free(env);
}

START_TEST(test_pipelined_pushes_sum_exactly)
{
	exactly_once_run(0);
}
END_TEST

START_TEST(test_broken_connections_resend_once)
{
	exactly_once_run(1);
}
END_TEST

/* ---- protocol abuse on raw sockets --------------------------------------- */

#define ABUSE_KEYS 4
#define ABUSE_MAX_CASES 16
/* clang-format off */
#define ABUSE_TABLE                                                          \
	"[table]\nid = 0\nkind = dense\nwidth = 1\nkeys = " STR(ABUSE_KEYS) \
	"\noptimizer = add\n"
/* clang-format on */

struct abuse_case {
	const char *name;
	uint8_t bytes[256];
	size_t len;
	int hang_up;            /* read the challenge, send, then half-close */
	const char *needles[5]; /* one must show up in the server's log */
};

static size_t encode_frame(Dml__Meta *m, const void *payload, uint32_t payload_len,
			   uint8_t *out, size_t cap)
{
	size_t n = dml_frame_encode_head(m, payload_len, out, cap);

	ck_assert_uint_gt(n, 0);
	ck_assert_uint_le(n + payload_len, cap);
	if (payload_len)
		memcpy(out + n, payload, payload_len);
	return n + payload_len;
}

/* A valid dense PUSH of 1000 to every key: must never be applied. */
static size_t encode_push(uint8_t *out, size_t cap)
{
	Dml__Meta m = DML__META__INIT;
	float vals[ABUSE_KEYS] = { 1000, 1000, 1000, 1000 };

	m.type = DML__MSG_TYPE__PUSH;
	m.request_id = 1;
	m.sender = 1;
	m.seq = 1;
	m.dtype = DML__DTYPE__F32;
	m.value_width = 1;
	m.dense = 1;
	m.key_begin = 0;
	m.key_end = ABUSE_KEYS;
	return encode_frame(&m, vals, sizeof(vals), out, cap);
}

static size_t encode_bad_hello(uint8_t *out, size_t cap)
{
	Dml__Meta m = DML__META__INIT;
	Dml__Handshake hs = DML__HANDSHAKE__INIT;
	uint8_t nonce[DML_NONCE_LEN] = { 1 }, proof[DML_PROOF_LEN] = { 0 };

	hs.role = DML__ROLE__WORKER;
	hs.node_id = 9;
	hs.protocol_version = DML_PROTOCOL_VERSION;
	hs.cluster = (char *)"dml";
	hs.nonce.data = nonce;
	hs.nonce.len = sizeof(nonce);
	hs.proof.data = proof;
	hs.proof.len = sizeof(proof);
	m.type = DML__MSG_TYPE__HELLO;
	m.request_id = 1;
	m.sender = 9;
	m.handshake = &hs;
	return encode_frame(&m, NULL, 0, out, cap);
}

static size_t encode_bad_type(uint8_t *out, size_t cap)
{
	Dml__Meta m = DML__META__INIT;

	m.type = (Dml__MsgType)99;
	m.request_id = 7;
	return encode_frame(&m, NULL, 0, out, cap);
}

/* Metadata says 8 payload bytes, the header says none. */
static size_t encode_length_mismatch(uint8_t *out, size_t cap)
{
	Dml__Meta m = DML__META__INIT;
	size_t n;

	m.type = DML__MSG_TYPE__HEARTBEAT;
	m.request_id = 3;
	m.payload_bytes = 8;
	n = dml__meta__get_packed_size(&m);
	ck_assert_uint_le(DML_FRAME_HEADER_LEN + n, cap);
	dml_frame_header_encode(out, (uint32_t)n, 0);
	dml__meta__pack(&m, out + DML_FRAME_HEADER_LEN);
	return DML_FRAME_HEADER_LEN + n;
}

static void header(struct abuse_case *k, uint32_t meta_len, uint32_t payload_len)
{
	dml_frame_header_encode(k->bytes, meta_len, payload_len);
	k->len = DML_FRAME_HEADER_LEN;
}

static void needles(struct abuse_case *k, int code, const char *alt)
{
	k->needles[0] = dml_strerror(code);
	k->needles[1] = alt;
}

/* Fill k[0..ABUSE_MAX_CASES) with one malformed or unwelcome input each. */
static size_t abuse_cases(struct abuse_case *k)
{
	size_t n = 0;

	memset(k, 0, ABUSE_MAX_CASES * sizeof(*k));
	k[n].name = "bad magic";
	k[n].len = (size_t)snprintf((char *)k[n].bytes, sizeof(k[n].bytes),
				    "GET / HTTP/1.1\r\nHost: dml\r\n\r\n");
	needles(&k[n++], DML_EFRAME_MAGIC, NULL);

	k[n].name = "unknown version";
	header(&k[n], 8, 0);
	dml_store_le16(k[n].bytes + 4, 99);
	memset(k[n].bytes + k[n].len, 0x08, 8);
	k[n].len += 8;
	needles(&k[n++], DML_EFRAME_VERSION, NULL);

	k[n].name = "reserved flags";
	header(&k[n], 8, 0);
	dml_store_le16(k[n].bytes + 6, 1);
	needles(&k[n++], DML_EFRAME_FLAGS, NULL);

	k[n].name = "oversized metadata length";
	header(&k[n], 1u << 30, 0);
	needles(&k[n++], DML_EFRAME_META, NULL);

	k[n].name = "zero metadata length";
	header(&k[n], 0, 0);
	needles(&k[n++], DML_EFRAME_META, NULL);

	k[n].name = "oversized payload length";
	header(&k[n], 8, UINT32_MAX);
	needles(&k[n++], DML_EFRAME_PAYLOAD, NULL);

	k[n].name = "garbage metadata";
	header(&k[n], 24, 0);
	memset(k[n].bytes + k[n].len, 0xff, 24);
	k[n].len += 24;
	needles(&k[n++], DML_EFRAME_DECODE, NULL);

	k[n].name = "unknown message type";
	k[n].len = encode_bad_type(k[n].bytes, sizeof(k[n].bytes));
	needles(&k[n++], DML_EFRAME_TYPE, NULL);

	k[n].name = "lengths disagree";
	k[n].len = encode_length_mismatch(k[n].bytes, sizeof(k[n].bytes));
	needles(&k[n++], DML_EFRAME_LENGTH, NULL);

	k[n].name = "push before hello";
	k[n].len = encode_push(k[n].bytes, sizeof(k[n].bytes));
	k[n].needles[0] = dml_strerror(DML_ESTATE);
	k[n].needles[1] = dml_strerror(DML_EAUTH);
	k[n].needles[2] = dml_strerror(DML_EROLE);
	k[n++].needles[3] = "push";

	k[n].name = "hello with a wrong proof";
	k[n].len = encode_bad_hello(k[n].bytes, sizeof(k[n].bytes));
	needles(&k[n++], DML_EAUTH, NULL);

	k[n].name = "hang-up inside a frame";
	header(&k[n], 40, 0);
	memset(k[n].bytes + k[n].len, 0x08, 5);
	k[n].len += 5;
	k[n].hang_up = 1;
	needles(&k[n++], DML_EFRAME_TRUNC, NULL);

	k[n].name = "silent peer";
	k[n].len = 0;
	needles(&k[n++], DML_ETIMEDOUT, "handshake");
	ck_assert_uint_le(n, ABUSE_MAX_CASES);
	return n;
}

/* One more round for a client that stayed connected through the abuse. */
static void abuse_round(dml_t *d, float round)
{
	float ones[ABUSE_KEYS] = { 1, 1, 1, 1 }, out[ABUSE_KEYS];
	int i;

	wait_ok(d, push_dense(d, 0, ABUSE_KEYS, ones), "push after abuse");
	wait_ok(d, pull_dense(d, 0, ABUSE_KEYS, out), "pull after abuse");
	for (i = 0; i < ABUSE_KEYS; i++)
		ck_assert_msg(out[i] == round, "key %d: %g after round %g", i, out[i],
			      round);
}

START_TEST(test_protocol_abuse_costs_one_connection)
{
	struct dml_test_server_conf conf = {
		.staleness = -1,
		.tables = ABUSE_TABLE,
		.extra = "[limits]\nhandshake_timeout_ms = 1000\n",
	};
	struct dml_test_server *srv;
	struct dml_test_env *env = cluster_start(1, &conf, &srv);
	static struct abuse_case cases[ABUSE_MAX_CASES];
	size_t n = abuse_cases(cases), i, from;
	dml_t *d, *fresh;
	int fd;

	ck_assert_int_eq(dml_test_client_new(env, &srv, 1, 1, &d), 0);
	abuse_round(d, 1);
	for (i = 0; i < n; i++) {
		const struct abuse_case *k = &cases[i];

		fprintf(stderr, "abuse: %s\n", k->name);
		from = dml_test_server_log_size(srv);
		ck_assert_int_eq(dml_test_raw_connect(dml_test_server_port(srv), &fd), 0);
		/* Unread input would make close() send a reset, not an end of
		 * stream: take the challenge first. */
		if (k->hang_up)
			ck_assert_int_eq(dml_test_raw_skip_frame(fd, WAIT_MS), 0);
		ck_assert_int_eq(dml_test_raw_send(fd, k->bytes, k->len), 0);
		if (k->hang_up)
			shutdown(fd, SHUT_WR);
		ck_assert_msg(dml_test_raw_wait_closed(fd, WAIT_MS) == 0,
			      "%s: server kept the connection open", k->name);
		close(fd);
		ck_assert_msg(dml_test_server_log_wait(srv, from, k->needles, WAIT_MS) >=
				      0,
			      "%s: the log does not say why", k->name);
		ck_assert_msg(dml_test_server_alive(srv), "%s: server died", k->name);
		abuse_round(d, (float)(i + 2));
	}
	/* A newcomer is served as well. */
	ck_assert_int_eq(dml_test_client_new(env, &srv, 1, 2, &fresh), 0);
	dml_close(fresh);
	dml_close(d);
	stop_ok(srv);
	dml_test_env_free(env);
}
END_TEST

/* ---- authentication and refusals to start ------------------------------- */

static int connect_with(struct dml_test_env *env, struct dml_test_server *srv,
			const char *key, const char *value)
{
	dml_opts_t *o;
	dml_t *d = NULL;
	int rc;

	ck_assert_int_eq(dml_test_client_opts(env, &srv, 1, 5, &o), 0);
	ck_assert_int_eq(dml_opts_set(o, key, value), 0);
	ck_assert_int_eq(dml_opts_set(o, "connect_timeout_ms", "3000"), 0);
	rc = dml_connect(o, &d);
	dml_opts_free(o);
	if (rc == 0)
		dml_close(d);
	return rc;
}

START_TEST(test_auth_refuses_wrong_secret_and_cluster)
{
	struct dml_test_server_conf conf = { .staleness = -1, .tables = ABUSE_TABLE };
	struct dml_test_server *srv;
	struct dml_test_env *env = cluster_start(1, &conf, &srv);
	const char *const auth_needles[] = { dml_strerror(DML_EAUTH), NULL };
	char *wrong, *loose;
	size_t from;
	dml_t *d;
	int rc;

	ck_assert_int_eq(
		dml_test_env_write(env, "wrong-secret", "not the secret\n", 0600, &wrong),
		0);
	ck_assert_int_eq(
		dml_test_env_write(env, "loose-secret", "not the secret\n", 0644, &loose),
		0);
	from = dml_test_server_log_size(srv);
	rc = connect_with(env, srv, "secret_file", wrong);
	ck_assert_msg(rc == DML_EAUTH, "wrong secret: %s", dml_strerror(rc));
	ck_assert_int_ge(dml_test_server_log_wait(srv, from, auth_needles, WAIT_MS), 0);

	rc = connect_with(env, srv, "cluster", "another");
	ck_assert_msg(rc == DML_ECLUSTER || rc == DML_EAUTH, "other cluster: %s",
		      dml_strerror(rc));

	rc = connect_with(env, srv, "secret_file", loose);
	ck_assert_msg(rc == DML_ESECRET, "secret of mode 0644: %s", dml_strerror(rc));

	/* The refused ones cost nothing to the others. */
	ck_assert_int_eq(dml_test_client_new(env, &srv, 1, 1, &d), 0);
	dml_close(d);
	free(wrong);
	free(loose);
	stop_ok(srv);
	dml_test_env_free(env);
}
END_TEST

/* Run dml-server on config text; give its exit status and its output. */
static void server_run_to_exit(struct dml_test_env *env, const char *name,
			       const char *text, int *status, char **output, char **conf)
{
	char *bin, *log_name, *log_path;
	char *argv[4];
	pid_t pid;

	ck_assert_int_eq(dml_test_env_write(env, name, text, 0600, conf), 0);
	dml_test_bin("server/dml-server", &bin);
	argv[0] = bin;
	argv[1] = (char *)"-c";
	argv[2] = *conf;
	argv[3] = NULL;
	if (asprintf(&log_name, "%s.log", name) < 0)
		abort();
	ck_assert_int_eq(dml_test_proc_spawn(env, argv, log_name, &pid), 0);
	free(bin);
	ck_assert_msg(dml_test_proc_wait(env, pid, 10000, status) == 0,
		      "%s: the server kept running instead of refusing to start", name);
	if (asprintf(&log_path, "%s/%s", dml_test_env_dir(env), log_name) < 0)
		abort();
	ck_assert_int_eq(dml_test_file_read(log_path, output), 0);
	fprintf(stderr, "---- %s: status 0x%x ----\n%s", name, *status, *output);
	free(log_name);
	free(log_path);
}

START_TEST(test_server_refuses_loose_secret_file)
{
	struct dml_test_env *env;
	struct dml_test_server_conf conf = { .staleness = -1, .tables = ABUSE_TABLE };
	char *loose, *text, *out, *path;
	int st;

	ck_assert_int_eq(dml_test_env_new(&env), 0);
	ck_assert_int_eq(dml_test_env_write(env, "loose-secret", "0123456789abcdef\n",
					    0644, &loose),
			 0);
	conf.secret_file = loose;
	dml_test_server_conf_text(env, &conf, &text, NULL);
	server_run_to_exit(env, "loose.conf", text, &st, &out, &path);
	ck_assert_msg(!(WIFEXITED(st) && WEXITSTATUS(st) == 0), "started anyway");
	ck_assert_msg(WIFEXITED(st), "crashed instead of refusing");
	ck_assert_msg(strstr(out, loose) || strstr(out, dml_strerror(DML_ESECRET)),
		      "the log does not say the secret file is the problem");
	free(text);
	free(out);
	free(path);
	free(loose);
	dml_test_env_free(env);
}
END_TEST

START_TEST(test_server_refuses_unknown_key_with_file_line)
{
	struct dml_test_env *env;
	struct dml_test_server_conf conf = { .staleness = -1,
					     .tables = ABUSE_TABLE,
					     .extra = "[limits]\nno_such_key = 1\n" };
	char *text, *out, *path, where[512];
	const char *p;
	int st, line = 1;

	ck_assert_int_eq(dml_test_env_new(&env), 0);
	dml_test_server_conf_text(env, &conf, &text, NULL);
	for (p = text; p < strstr(text, "no_such_key"); p++)
		line += *p == '\n';
	server_run_to_exit(env, "unknown.conf", text, &st, &out, &path);
	snprintf(where, sizeof(where), "%s:%d:", path, line);
	ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 2, "status 0x%x, want exit 2",
		      st);
	ck_assert_msg(strstr(out, where), "output does not name %s", where);
	ck_assert_msg(strstr(out, "no_such_key"), "output does not name the key");
	free(text);
	free(out);
	free(path);
	dml_test_env_free(env);
}
END_TEST

/* ---- SIGTERM ------------------------------------------------------------- */

START_TEST(test_sigterm_with_client_connected)
{
	struct dml_test_server_conf conf = { .staleness = -1, .tables = ABUSE_TABLE };
	struct dml_test_server *srv;
	struct dml_test_env *env = cluster_start(1, &conf, &srv);
	dml_t *d;

	ck_assert_int_eq(dml_test_client_new(env, &srv, 1, 1, &d), 0);
	abuse_round(d, 1);
	stop_ok(srv);
	dml_close(d);
	dml_test_env_free(env);
}
END_TEST

START_TEST(test_sigterm_with_pull_held)
{
	/* BSP and a second worker that never comes: a pull at clock 1 waits. */
	struct dml_test_server_conf conf = { .staleness = 0,
					     .workers = 2,
					     .tables = ABUSE_TABLE };
	struct dml_test_server *srv;
	struct dml_test_env *env = cluster_start(1, &conf, &srv);
	float ones[ABUSE_KEYS] = { 1, 1, 1, 1 }, out[ABUSE_KEYS];
	dml_opts_t *o;
	dml_handle_t h;
	uint64_t t0;
	int done = 1, rc;
	dml_t *d;

	ck_assert_int_eq(dml_test_client_opts(env, &srv, 1, 1, &o), 0);
	ck_assert_int_eq(dml_opts_set(o, "reconnect_timeout_ms", "1000"), 0);
	ck_assert_int_eq(dml_connect(o, &d), 0);
	dml_opts_free(o);
	wait_ok(d, push_dense(d, 0, ABUSE_KEYS, ones), "push");
	wait_ok(d, dml_clock(d), "clock");
	wait_ok(d, dml_pull_range(d, 0, 0, ABUSE_KEYS, out, &h), "pull");
	dml_progress(d, 300);
	ck_assert_int_eq(dml_test(d, h, &done), 0);
	ck_assert_msg(!done, "a BSP pull was answered with a worker missing");

	stop_ok(srv);
	t0 = dml_now_ns();
	rc = dml_wait(d, h);
	ck_assert_msg(rc != 0, "held pull succeeded on a stopped server");
	fprintf(stderr, "held pull at shutdown: %s (%s)\n", dml_strerror(rc),
		dml_error_detail(d));
	ck_assert_uint_lt(elapsed_ms(t0), 15000);
	dml_close(d);
	dml_test_env_free(env);
}
END_TEST

/* ---- regressions: each test is named after what broke ------------------ */

/* clang-format off */
#define REG_KEYS 10
#define REG_TABLES                                                        \
	"[table]\nid = 0\nkind = dense\nwidth = 1\nkeys = " STR(REG_KEYS) \
	"\noptimizer = add\n"                                             \
	"\n[table]\nid = 1\nkind = sparse\nwidth = 1\noptimizer = add\n"
/* clang-format on */
/* A request the client sends this often, losing the connection each time,
 * is failed (MAX_SENDS in the client). */
#define REG_MAX_SENDS 5
/* Longer than any of these tests may take: a regression fails, not hangs. */
#define REG_REQUEST_TIMEOUT "8000"

/* libdml's log lines while a capture is on (the client names the culprit
 * there; a dml_connect() that fails returns no handle to ask). */
static char captured[16384];
static size_t ncaptured;

static void capture_sink(int level, const char *line, void *arg)
{
	size_t n = strlen(line);

	if (n > sizeof(captured) - 1 - ncaptured)
		n = sizeof(captured) - 1 - ncaptured;
	memcpy(captured + ncaptured, line, n);
	ncaptured += n;
	captured[ncaptured] = '\0';
	fputs(line, stderr);
}

/* dml_connect() with the logger captured; returns its code. */
static int connect_captured(const dml_opts_t *o, dml_t **d)
{
	int rc;

	ncaptured = 0;
	captured[0] = '\0';
	dml_log_set_sink(capture_sink, NULL);
	rc = dml_connect(o, d);
	dml_log_set_sink(NULL, NULL);
	return rc;
}

/* A client for servers in shard order with a request timeout, so that a
 * request that would never finish fails the test instead of hanging it. */
static void client_bounded(struct dml_test_env *env, struct dml_test_server *const *srv,
			   size_t n, uint32_t worker_id, dml_t **d)
{
	dml_opts_t *o;

	ck_assert_int_eq(dml_test_client_opts(env, srv, n, worker_id, &o), 0);
	ck_assert_int_eq(dml_opts_set(o, "request_timeout_ms", REG_REQUEST_TIMEOUT), 0);
	ck_assert_int_eq(dml_connect(o, d), 0);
	dml_opts_free(o);
}

/* Submit a key-list push or pull and wait; the first error either gives. */
static int push_keys(dml_t *d, uint32_t table, const uint64_t *keys, size_t n,
		     const float *vals)
{
	dml_handle_t h;
	int rc = dml_push(d, table, keys, n, vals, &h);

	return rc ? rc : dml_wait(d, h);
}

static int pull_keys(dml_t *d, uint32_t table, const uint64_t *keys, size_t n,
		     float *out)
{
	dml_handle_t h;
	int rc = dml_pull(d, table, keys, n, out, &h);

	return rc ? rc : dml_wait(d, h);
}

/* The dense table 0 must hold exactly want[0..REG_KEYS). */
static void expect_dense(dml_t *d, const float *want, const char *when)
{
	float out[REG_KEYS];
	int i;

	wait_ok(d, pull_dense(d, 0, REG_KEYS, out), when);
	for (i = 0; i < REG_KEYS; i++)
		ck_assert_msg(out[i] == want[i], "%s: key %d is %g, want %g", when, i,
			      out[i], want[i]);
}

/* How often needle occurs in the server's log from byte `from` on. */
static int log_count(const struct dml_test_server *s, size_t from, const char *needle)
{
	char *text;
	const char *p;
	int n = 0;

	ck_assert_int_eq(dml_test_file_read(dml_test_server_log(s), &text), 0);
	p = strlen(text) >= from ? text + from : "";
	while ((p = strstr(p, needle)) != NULL) {
		n++;
		p += strlen(needle);
	}
	free(text);
	return n;
}

/*
 * Servers listed out of shard order made dml_connect() return +1, which no
 * caller takes for an error. It must be DML_ECONF, and the message must name
 * a server that is out of place, never the one that is where it belongs.
 */
START_TEST(test_misordered_servers_fail_with_econf)
{
	struct dml_test_server_conf conf = { .staleness = -1, .tables = REG_TABLES };
	struct dml_test_server *srv[3];
	struct dml_test_env *env = cluster_start(3, &conf, srv);
	struct dml_test_server *swapped[3] = { srv[0], srv[2], srv[1] };
	char misplaced[2][96], in_place[64];
	dml_opts_t *o;
	dml_t *d = NULL;
	int rc;

	/* Shard 2 listed second, shard 1 third: either may be reported first. */
	snprintf(misplaced[0], sizeof(misplaced[0]), "127.0.0.1:%u is shard 2/3",
		 dml_test_server_port(srv[2]));
	snprintf(misplaced[1], sizeof(misplaced[1]), "127.0.0.1:%u is shard 1/3",
		 dml_test_server_port(srv[1]));
	snprintf(in_place, sizeof(in_place), "127.0.0.1:%u is shard",
		 dml_test_server_port(srv[0]));
	ck_assert_int_eq(dml_test_client_opts(env, swapped, 3, 1, &o), 0);
	ck_assert_int_eq(dml_opts_set(o, "connect_timeout_ms", "5000"), 0);
	rc = connect_captured(o, &d);
	dml_opts_free(o);
	ck_assert_msg(rc == DML_ECONF, "swapped shards: got %d (%s), want DML_ECONF", rc,
		      dml_strerror(rc));
	ck_assert_ptr_null(d);
	ck_assert_msg(strstr(captured, misplaced[0]) || strstr(captured, misplaced[1]),
		      "no error names a misplaced server:\n%s", captured);
	ck_assert_msg(!strstr(captured, in_place),
		      "the server in its place is blamed:\n%s", captured);

	/* Too few servers listed: shard 1 of 3 sits at position 1 of 2. */
	ck_assert_int_eq(dml_test_client_opts(env, srv, 2, 1, &o), 0);
	rc = connect_captured(o, &d);
	dml_opts_free(o);
	ck_assert_msg(rc == DML_ECONF, "two of three shards: got %d (%s)", rc,
		      dml_strerror(rc));
	ck_assert_ptr_null(d);

	/* The same servers in shard order are fine. */
	ck_assert_int_eq(dml_test_client_new(env, srv, 3, 1, &d), 0);
	dml_close(d);
	stop_ok(srv[0]);
	stop_ok(srv[1]);
	stop_ok(srv[2]);
	dml_test_env_free(env);
}
END_TEST

/*
 * Key lists on a dense table were sent as ranges (and the server refused key
 * lists on dense tables), so dml_push/dml_pull never finished. On one server
 * the whole list goes to it unsplit; on two it is split by shard, or sent
 * whole when every key is on one shard.
 */
static void dense_key_lists_run(size_t nservers)
{
	struct dml_test_server_conf conf = { .staleness = -1, .tables = REG_TABLES };
	struct dml_test_server *srv[2];
	struct dml_test_env *env = cluster_start(nservers, &conf, srv);
	const uint64_t keys[] = { 3, 7, 3 }, high[] = { 9, 7 };
	const uint64_t outside[] = { 3, REG_KEYS }, far[] = { 1000 };
	const float vals[] = { 1, 10, 100 }, high_vals[] = { 5, 6 };
	float want[REG_KEYS] = { 0 }, out[3] = { -1, -1, -1 }, junk[2];
	uint64_t t0;
	dml_t *d;
	int rc;

	fprintf(stderr, "dense key lists on %zu server(s)\n", nservers);
	client_bounded(env, srv, nservers, 1, &d);
	wait_ok(d, push_keys(d, 0, keys, 3, vals), "push {3, 7, 3}");
	want[3] = 101;
	want[7] = 10;
	wait_ok(d, pull_keys(d, 0, keys, 3, out), "pull {3, 7, 3}");
	ck_assert_msg(out[0] == 101 && out[1] == 10 && out[2] == 101,
		      "pull {3, 7, 3} gave {%g, %g, %g}, want {101, 10, 101}", out[0],
		      out[1], out[2]);
	expect_dense(d, want, "after the key-list push");

	/* Every key on the last shard. */
	wait_ok(d, push_keys(d, 0, high, 2, high_vals), "push {9, 7}");
	want[9] = 5;
	want[7] = 16;
	wait_ok(d, pull_keys(d, 0, high, 2, out), "pull {9, 7}");
	ck_assert_msg(out[0] == 5 && out[1] == 16, "pull {9, 7} gave {%g, %g}", out[0],
		      out[1]);

	/* A key outside the table fails the whole request, at once. */
	t0 = dml_now_ns();
	rc = push_keys(d, 0, outside, 2, high_vals);
	ck_assert_msg(rc == DML_ERANGE, "push {3, %d}: %s, want DML_ERANGE", REG_KEYS,
		      dml_strerror(rc));
	rc = pull_keys(d, 0, far, 1, junk);
	ck_assert_msg(rc == DML_ERANGE, "pull {1000}: %s, want DML_ERANGE",
		      dml_strerror(rc));
	rc = pull_keys(d, 0, outside, 2, junk);
	ck_assert_msg(rc == DML_ERANGE, "pull {3, %d}: %s, want DML_ERANGE", REG_KEYS,
		      dml_strerror(rc));
	ck_assert_uint_lt(elapsed_ms(t0), 3000);
	expect_dense(d, want, "after the refused push");

	dml_close(d);
	while (nservers-- > 0)
		stop_ok(srv[nservers]);
	dml_test_env_free(env);
}

START_TEST(test_dense_key_lists_do_not_hang)
{
	dense_key_lists_run(2);
	dense_key_lists_run(1);
}
END_TEST

/*
 * dml_close() after a server had exited waited the full 10 s for the answer
 * to its BYE. A lost connection answers it: close must be prompt, whether
 * one of two servers or both are gone.
 */
START_TEST(test_close_after_server_exit_is_prompt)
{
	struct dml_test_server_conf conf = { .staleness = -1, .tables = REG_TABLES };
	struct dml_test_server *srv[2];
	struct dml_test_env *env = cluster_start(2, &conf, srv);
	const float ones[REG_KEYS] = { 1, 1, 1, 1, 1, 1, 1, 1, 1, 1 };
	uint64_t t0, ms;
	dml_t *a, *b;

	ck_assert_int_eq(dml_test_client_new(env, srv, 2, 1, &a), 0);
	ck_assert_int_eq(dml_test_client_new(env, srv, 2, 2, &b), 0);
	wait_ok(a, push_dense(a, 0, REG_KEYS, ones), "push a");
	wait_ok(b, push_dense(b, 0, REG_KEYS, ones), "push b");

	/* Neither client has looked at its sockets since the server exited. */
	stop_ok(srv[1]);
	t0 = dml_now_ns();
	dml_close(a);
	ms = elapsed_ms(t0);
	fprintf(stderr, "close with one of two servers gone: %llu ms\n",
		(unsigned long long)ms);
	ck_assert_msg(ms < 3000, "close took %llu ms with one server gone",
		      (unsigned long long)ms);

	stop_ok(srv[0]);
	t0 = dml_now_ns();
	dml_close(b);
	ms = elapsed_ms(t0);
	fprintf(stderr, "close with every server gone: %llu ms\n",
		(unsigned long long)ms);
	ck_assert_msg(ms < 3000, "close took %llu ms with every server gone",
		      (unsigned long long)ms);
	dml_test_env_free(env);
}
END_TEST

/*
 * A control client's pushes were applied, though it has no clock and no
 * push sequence to make a resend harmless. They must be refused with
 * DML_EROLE and change nothing; its pulls keep working.
 */
START_TEST(test_control_push_is_refused)
{
	struct dml_test_server_conf conf = { .staleness = -1, .tables = REG_TABLES };
	struct dml_test_server *srv[2];
	struct dml_test_env *env = cluster_start(2, &conf, srv);
	const float ones[REG_KEYS] = { 1, 1, 1, 1, 1, 1, 1, 1, 1, 1 };
	const float big[REG_KEYS] = { 1000, 1000, 1000, 1000, 1000,
				      1000, 1000, 1000, 1000, 1000 };
	const uint64_t dense_keys[] = { 1, 8 }, sparse_keys[] = { 42, 4242, 424242 };
	const float two[] = { 2, 2, 2 };
	float out[3];
	dml_t *w, *ctl;
	int rc, i;

	client_bounded(env, srv, 2, 1, &w);
	client_bounded(env, srv, 2, 0, &ctl);
	wait_ok(w, push_dense(w, 0, REG_KEYS, ones), "worker dense push");
	wait_ok(w, push_keys(w, 1, sparse_keys, 3, two), "worker sparse push");

	rc = push_dense(ctl, 0, REG_KEYS, big);
	ck_assert_msg(rc == DML_EROLE, "control range push: %s, want DML_EROLE",
		      dml_strerror(rc));
	ck_assert_msg(strstr(dml_error_detail(ctl), "control"),
		      "the refusal does not say why: '%s'", dml_error_detail(ctl));
	rc = push_keys(ctl, 0, dense_keys, 2, big);
	ck_assert_msg(rc == DML_EROLE, "control dense key push: %s, want DML_EROLE",
		      dml_strerror(rc));
	rc = push_keys(ctl, 1, sparse_keys, 3, big);
	ck_assert_msg(rc == DML_EROLE, "control sparse push: %s, want DML_EROLE",
		      dml_strerror(rc));

	/* Nothing changed, and the control client still reads both tables. */
	expect_dense(ctl, ones, "control pull after its refused pushes");
	wait_ok(ctl, pull_keys(ctl, 1, sparse_keys, 3, out), "control sparse pull");
	for (i = 0; i < 3; i++)
		ck_assert_msg(out[i] == 2, "sparse key %llu is %g, want 2",
			      (unsigned long long)sparse_keys[i], out[i]);
	expect_dense(w, ones, "worker pull");

	dml_close(ctl);
	dml_close(w);
	stop_ok(srv[0]);
	stop_ok(srv[1]);
	dml_test_env_free(env);
}
END_TEST

/*
 * A request that makes the server drop the connection every time (here: over
 * the server's max_payload) was resent after every reconnect, forever. It
 * must fail after a few sends; the server stays up, the client recovers, and
 * nothing of it was applied.
 */
#define BIG_KEYS 262144 /* 1 MiB of floats; the server takes 64K */

static void expect_small(dml_t *d, float want, const char *when)
{
	float out[16];
	dml_handle_t h;
	int i;

	wait_ok(d, dml_pull_range(d, 0, 0, 16, out, &h), when);
	wait_ok(d, dml_wait(d, h), when);
	for (i = 0; i < 16; i++)
		ck_assert_msg(out[i] == want, "%s: key %d is %g, want %g", when, i,
			      out[i], want);
}

/* Run one doomed request; it must fail in time, within REG_MAX_SENDS tries. */
static void doomed_request(struct dml_test_server *srv, dml_t *d, int pull, float *big)
{
	const char *refused = dml_strerror(DML_EFRAME_PAYLOAD);
	size_t from = dml_test_server_log_size(srv);
	uint64_t t0 = dml_now_ns(), ms;
	dml_handle_t h;
	int rc, tries;
	size_t i;

	rc = pull ? dml_pull_range(d, 0, 0, BIG_KEYS, big, &h)
		  : dml_push_range(d, 0, 0, BIG_KEYS, big, &h);
	if (rc == 0)
		rc = dml_wait(d, h);
	ms = elapsed_ms(t0);
	tries = log_count(srv, from, refused);
	fprintf(stderr, "1 MiB %s: %s after %llu ms, %d refusal(s) (%s)\n",
		pull ? "pull" : "push", dml_strerror(rc), (unsigned long long)ms, tries,
		dml_error_detail(d));
	ck_assert_msg(rc != 0, "a request over the server's limit succeeded");
	ck_assert_msg(rc != DML_ETIMEDOUT, "resent until the request timeout");
	ck_assert_uint_lt(ms, 5000);
	ck_assert_msg(tries >= 1 && tries <= REG_MAX_SENDS,
		      "the server refused it %d times", tries);
	ck_assert_msg(dml_test_server_alive(srv), "the server died");
	/* A failed pull leaves its output alone. */
	for (i = 0; pull && i < BIG_KEYS; i++)
		ck_assert_msg(big[i] == 1000, "failed pull wrote %g to key %zu", big[i], i);
}

START_TEST(test_connection_breaking_request_is_not_resent_forever)
{
	struct dml_test_server_conf conf = {
		.staleness = -1,
		.tables = "[table]\nid = 0\nkind = dense\nwidth = 1\nkeys = " STR(
			BIG_KEYS) "\noptimizer = add\n",
		.extra = "[limits]\nmax_payload = 64K\n",
	};
	struct dml_test_server *srv;
	struct dml_test_env *env = cluster_start(1, &conf, &srv);
	const float ones[16] = { 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1 };
	float *big = dml_xmalloc(BIG_KEYS * sizeof(float));
	dml_t *d, *fresh;
	size_t i;

	for (i = 0; i < BIG_KEYS; i++)
		big[i] = 1000;
	client_bounded(env, &srv, 1, 1, &d);
	doomed_request(srv, d, 0, big);
	/* The same client carries on once it has reconnected. */
	wait_ok(d, push_dense(d, 0, 16, ones), "small push after the failed one");
	expect_small(d, 1, "pull after the failed push");
	/* A pull whose answer could never be sent is refused the same way. */
	doomed_request(srv, d, 1, big);

	client_bounded(env, &srv, 1, 2, &fresh);
	wait_ok(fresh, push_dense(fresh, 0, 16, ones), "push on a fresh client");
	expect_small(fresh, 2, "pull on a fresh client");
	dml_close(fresh);
	dml_close(d);
	free(big);
	stop_ok(srv);
	dml_test_env_free(env);
}
END_TEST

/* ---- metrics: Prometheus text over HTTP ---------------------------------- */

#define METRICS_MAX 256
#define METRICS_PUSHES 5
#define METRICS_PULLS 3
#define METRICS_KEYS 16

struct sample {
	char name[96];
	char labels[160]; /* what stood between the braces; "" for none */
	double value;
};

/* Length of a name made of [a-zA-Z0-9_:] at p. */
static size_t name_span(const char *p)
{
	return strspn(p, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_:");
}

/* Length of `k="v",...` up to the closing brace at p, checking each pair. */
static size_t labels_span(const char *p)
{
	const char *q = p;

	while (*q != '}') {
		size_t k = name_span(q);

		ck_assert_msg(k > 0 && q[k] == '=' && q[k + 1] == '"', "bad label at: %.40s", q);
		for (q += k + 2; *q != '"'; q++) {
			ck_assert_msg(*q && *q != '\n', "unterminated label value");
			if (*q == '\\')
				q++;
		}
		q++;
		if (*q == ',')
			q++;
	}
	return (size_t)(q - p);
}

/*
 * Parse the exposition text: every line ends in a newline; comments are
 * "# HELP" or "# TYPE"; every other line is `name{labels} value` (labels
 * optional) with a number (NaN and +-Inf included) as the value.
 */
static size_t metrics_parse(const char *text, struct sample *out, size_t cap)
{
	const char *line = text;
	size_t n = 0;

	while (*line) {
		const char *nl = strchr(line, '\n'), *p = line;
		struct sample *sm = &out[n];
		size_t k;
		char *end;

		ck_assert_msg(nl != NULL, "last line has no newline: %s", line);
		if (*line == '#') {
			ck_assert_msg(strncmp(line, "# HELP ", 7) == 0 ||
					      strncmp(line, "# TYPE ", 7) == 0,
				      "stray comment: %.*s", (int)(nl - line), line);
			line = nl + 1;
			continue;
		}
		ck_assert_uint_lt(n, cap);
		k = name_span(p);
		ck_assert_msg(k > 0 && k < sizeof(sm->name), "bad name: %.*s",
			      (int)(nl - line), line);
		memcpy(sm->name, p, k);
		sm->name[k] = '\0';
		p += k;
		sm->labels[0] = '\0';
		if (*p == '{') {
			k = labels_span(++p);
			ck_assert_uint_lt(k, sizeof(sm->labels));
			memcpy(sm->labels, p, k);
			sm->labels[k] = '\0';
			p += k + 1;
		}
		ck_assert_msg(*p == ' ', "no blank before the value: %.*s", (int)(nl - line),
			      line);
		p++;
		errno = 0;
		sm->value = strtod(p, &end);
		ck_assert_msg(end > p && end == nl && errno == 0, "not a number: %.*s",
			      (int)(nl - line), line);
		n++;
		line = nl + 1;
	}
	return n;
}

/* The value of name{labels}; the sample must be there. */
static double metric(const struct sample *sm, size_t n, const char *name,
		     const char *labels)
{
	for (size_t i = 0; i < n; i++)
		if (strcmp(sm[i].name, name) == 0 && strcmp(sm[i].labels, labels) == 0)
			return sm[i].value;
	ck_abort_msg("no sample %s{%s}", name, labels);
	return 0;
}

static size_t scrape(uint16_t port, struct sample *sm, size_t cap)
{
	char *body;
	size_t n;
	int status;

	ck_assert_int_eq(
		dml_test_http_request(port, "GET", "/metrics", WAIT_MS, &status, &body), 0);
	ck_assert_msg(status == 200, "GET /metrics: status %d", status);
	n = metrics_parse(body, sm, cap);
	free(body);
	return n;
}

/* Scrape until the connection gauge reads want, or fail after WAIT_MS. */
static void wait_connections(uint16_t port, struct sample *sm, double want)
{
	uint64_t t0 = dml_now_ns();
	double got;

	while ((got = metric(sm, scrape(port, sm, METRICS_MAX), "dml_server_connections",
			     "")) != want) {
		ck_assert_msg(elapsed_ms(t0) < WAIT_MS,
			      "dml_server_connections stays %g, not %g", got, want);
		sleep_us(10000);
	}
}

START_TEST(test_metrics_count_what_clients_did)
{
	static struct sample sm[METRICS_MAX];
	struct dml_test_server_conf conf = {
		.staleness = -1,
		.tables = "[table]\nid = 0\nkind = dense\nwidth = 1\nkeys = " STR(
			METRICS_KEYS) "\noptimizer = add\n",
	};
	float ones[METRICS_KEYS], out[METRICS_KEYS];
	char port_file[4096], extra[sizeof(port_file) + 64];
	struct dml_test_server *srv;
	struct dml_test_env *env;
	uint16_t port;
	size_t n;
	dml_t *d;
	int i, status;

	ck_assert_int_eq(dml_test_env_new(&env), 0);
	ck_assert_int_lt(snprintf(port_file, sizeof(port_file), "%s/metrics.port",
				  dml_test_env_dir(env)), (int)sizeof(port_file));
	snprintf(extra, sizeof(extra),
		 "metrics_listen = 127.0.0.1:0\nmetrics_port_file = %s\n", port_file);
	conf.server_extra = extra;
	ck_assert_int_eq(dml_test_server_start(env, &conf, &srv), 0);
	/* Written before the server's own port file: there once it started. */
	ck_assert_int_eq(dml_test_port_file_read(port_file, &port), 0);

	n = scrape(port, sm, METRICS_MAX);
	ck_assert(metric(sm, n, "dml_server_requests_total", "type=\"push\"") == 0);
	ck_assert(metric(sm, n, "dml_server_connections", "") == 0);

	for (i = 0; i < METRICS_KEYS; i++)
		ones[i] = 1;
	ck_assert_int_eq(dml_test_client_new(env, &srv, 1, 1, &d), 0);
	for (i = 0; i < METRICS_PUSHES; i++)
		wait_ok(d, push_dense(d, 0, METRICS_KEYS, ones), "push");
	/* Not answered; the pulls after it on the same connection are, so the
	 * server has counted it by the time they return. */
	wait_ok(d, dml_clock(d), "clock");
	for (i = 0; i < METRICS_PULLS; i++)
		wait_ok(d, pull_dense(d, 0, METRICS_KEYS, out), "pull");
	ck_assert_float_eq(out[0], (float)METRICS_PUSHES);

	n = scrape(port, sm, METRICS_MAX);
	ck_assert(metric(sm, n, "dml_server_requests_total", "type=\"push\"") ==
		  METRICS_PUSHES);
	ck_assert(metric(sm, n, "dml_server_requests_total", "type=\"pull\"") ==
		  METRICS_PULLS);
	ck_assert(metric(sm, n, "dml_server_requests_total", "type=\"clock\"") == 1);
	ck_assert(metric(sm, n, "dml_server_request_duration_seconds_count",
			 "type=\"push\"") == METRICS_PUSHES);
	ck_assert(metric(sm, n, "dml_server_request_duration_seconds_bucket",
			 "type=\"pull\",le=\"+Inf\"") == METRICS_PULLS);
	ck_assert(metric(sm, n, "dml_server_push_duplicates_total", "") == 0);
	ck_assert(metric(sm, n, "dml_server_connections", "") == 1);
	ck_assert(metric(sm, n, "dml_server_workers_live", "") == 1);
	ck_assert(metric(sm, n, "dml_server_worker_clock", "worker=\"1\"") == 1);
	ck_assert(metric(sm, n, "dml_server_min_clock", "") == 1);
	ck_assert(metric(sm, n, "dml_server_table_rows", "table=\"0\"") == METRICS_KEYS);
	ck_assert(metric(sm, n, "dml_server_network_bytes_total", "direction=\"in\"") >=
		  METRICS_PUSHES * METRICS_KEYS * sizeof(float));

	ck_assert_int_eq(dml_test_http_request(port, "GET", "/nope", WAIT_MS, &status, NULL),
			 0);
	ck_assert_int_eq(status, 404);
	ck_assert_int_eq(
		dml_test_http_request(port, "POST", "/metrics", WAIT_MS, &status, NULL), 0);
	ck_assert_int_eq(status, 405);

	/* The gauge follows the connection away. */
	dml_close(d);
	wait_connections(port, sm, 0);
	stop_ok(srv);
	dml_test_env_free(env);
}
END_TEST

/* ---- runner ------------------------------------------------------------- */

static Suite *cluster_suite(void)
{
	Suite *s = suite_create("cluster");
	TCase *tc;

	tc = tcase_create("consistency");
	tcase_set_timeout(tc, TEST_TIMEOUT_S);
	tcase_add_test(tc, test_ssp_bound_holds_pulls);
	tcase_add_test(tc, test_bsp_pulls_see_every_earlier_push);
	tcase_add_test(tc, test_async_pulls_never_wait);
	tcase_add_test(tc, test_dead_worker_leaves_clock_set);
	tcase_add_test(tc, test_stale_pushes_scaled_by_staleness);
	suite_add_tcase(s, tc);

	tc = tcase_create("training");
	tcase_set_timeout(tc, TEST_TIMEOUT_S);
	tcase_add_test(tc, test_lsq_trains_on_two_shards);
	suite_add_tcase(s, tc);

	tc = tcase_create("delivery");
	tcase_set_timeout(tc, TEST_TIMEOUT_S);
	tcase_add_test(tc, test_pipelined_pushes_sum_exactly);
	tcase_add_test(tc, test_broken_connections_resend_once);
	suite_add_tcase(s, tc);

	tc = tcase_create("abuse");
	tcase_set_timeout(tc, TEST_TIMEOUT_S);
	tcase_add_test(tc, test_protocol_abuse_costs_one_connection);
	tcase_add_test(tc, test_auth_refuses_wrong_secret_and_cluster);
	tcase_add_test(tc, test_server_refuses_loose_secret_file);
	tcase_add_test(tc, test_server_refuses_unknown_key_with_file_line);
	suite_add_tcase(s, tc);

	tc = tcase_create("shutdown");
	tcase_set_timeout(tc, TEST_TIMEOUT_S);
	tcase_add_test(tc, test_sigterm_with_client_connected);
	tcase_add_test(tc, test_sigterm_with_pull_held);
	tcase_add_test(tc, test_held_pulls_report_their_hold);
	suite_add_tcase(s, tc);

	tc = tcase_create("regressions");
	tcase_set_timeout(tc, TEST_TIMEOUT_S);
	tcase_add_test(tc, test_misordered_servers_fail_with_econf);
	tcase_add_test(tc, test_dense_key_lists_do_not_hang);
	tcase_add_test(tc, test_close_after_server_exit_is_prompt);
	tcase_add_test(tc, test_control_push_is_refused);
	tcase_add_test(tc, test_connection_breaking_request_is_not_resent_forever);
	suite_add_tcase(s, tc);

	tc = tcase_create("metrics");
	tcase_set_timeout(tc, TEST_TIMEOUT_S);
	tcase_add_test(tc, test_metrics_count_what_clients_did);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return dml_check_run(cluster_suite());
}
