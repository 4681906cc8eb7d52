/*
 * check_cluster_clock.c - the staleness bound against real dml-server
 * processes (see check_cluster.c): SSP, BSP and asynchronous pulls seen by
 * forked workers, a dead worker leaving the clock set, holds reported to
 * the client, and stale pushes scaled by their staleness.
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

#include "proto/auth.h"
#include "test/check_cluster.h"
#include "proto/frame.h"
#include "test/harness.h"
#include "proto/log.h"
#include "proto/util.h"

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

/* The tests of the consistency test case, in the order the suite runs them. */
void cluster_tests_consistency(TCase *tc)
{
	tcase_add_test(tc, test_ssp_bound_holds_pulls);
	tcase_add_test(tc, test_bsp_pulls_see_every_earlier_push);
	tcase_add_test(tc, test_async_pulls_never_wait);
	tcase_add_test(tc, test_dead_worker_leaves_clock_set);
	tcase_add_test(tc, test_stale_pushes_scaled_by_staleness);
}

/* The tests of held pulls, run with the shutdown tests, in the order the suite runs them. */
void cluster_tests_holds(TCase *tc)
{
	tcase_add_test(tc, test_held_pulls_report_their_hold);
}
