/*
 * Exactly-once across restarts of every process: worker processes (forked
 * children, each a libdml client of worker id 1 with an incarnation the
 * test picks, going up and down) push while the test SIGKILLs and restarts
 * a sync dml-server and SIGKILLs the workers, at random points with pushes
 * in flight.
 *
 * Every push has keys of its own (a dense range or a sparse id no other
 * push touches) and sgd with learning rate 1 from zeros, so each push's
 * rows say how often it was applied: exactly once when the worker saw it
 * acknowledged, once or not at all when it was sent and the worker died
 * before the acknowledgement, never twice.
 */
#define _GNU_SOURCE
#include <check.h>
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "test/acks.h"
#include "test/check_run.h"
#include "worker/dml.h"
#include "proto/dml_error.h"
#include "test/harness.h"

#define WAIT_MS 30000
#define WIDTH 4
#define DENSE_KEYS 65536
#define SPARSE_WIDTH 2
/* Two kill points each: the server while the worker pushes, then the worker. */
#define EPISODES 18
#define PER_EPISODE 608
#define WINDOW 16
/* A worker's last window stays within its episode's pushes. */
_Static_assert(PER_EPISODE % WINDOW == 0, "PER_EPISODE is whole windows");
#define PUSHES (EPISODES * PER_EPISODE)

static const char tables[] =
	"[table]\nid = 0\nkind = dense\nwidth = 4\nkeys = 65536\noptimizer = sgd\nlr = 1\n"
	"[table]\nid = 1\nkind = sparse\nwidth = 2\noptimizer = sgd\nlr = 1\n";

/* Push p: even ones two dense keys of their own, odd ones a sparse id. */
static uint64_t dense_begin(uint32_t p)
{
	return (uint64_t)p / 2 * 2;
}

static float value_of(uint32_t p, int i)
{
	return (float)(((p * 7u + (uint32_t)i) % 5u) + 1u);
}

static int floats_of(uint32_t p)
{
	return p % 2 == 0 ? 2 * WIDTH : SPARSE_WIDTH;
}

/* An incarnation per episode, now above every earlier one, now below. */
static uint64_t incarnation_of(int e)
{
	return e % 2 == 0 ? 1000000u + (uint64_t)e * 1000u : 1000u - (uint64_t)e;
}

static dml_t *client(struct dml_test_env *env, struct dml_test_server *s, const char *role,
		     uint64_t incarnation)
{
	char inc[32];
	dml_opts_t *o;
	dml_t *d;

	if (dml_test_client_opts(env, &s, 1, 1, &o) != 0)
		return NULL;
	snprintf(inc, sizeof(inc), "%" PRIu64, incarnation);
	if (dml_opts_set(o, "reconnect_timeout_ms", "20000") != 0 ||
	    dml_opts_set(o, "connect_timeout_ms", "20000") != 0 ||
	    dml_opts_set(o, "role", role) != 0 || dml_opts_set(o, "incarnation", inc) != 0 ||
	    dml_connect(o, &d) != 0)
		d = NULL;
	dml_opts_free(o);
	return d;
}

/* The worker process: pushes [first, first + PER_EPISODE), telling fd each
 * acknowledged one, until killed. */
static void worker_main(struct dml_test_env *env, struct dml_test_server *s, int fd,
			uint64_t incarnation, uint32_t first)
{
	/* A push's buffers are its own until it is waited for. */
	static float vals[WINDOW][2 * WIDTH];
	static uint64_t keys[WINDOW];
	dml_handle_t h[WINDOW];
	dml_t *d = client(env, s, "worker", incarnation);

	if (!d)
		_exit(3);
	for (uint32_t p0 = first; p0 < first + PER_EPISODE; p0 += WINDOW) {
		for (uint32_t k = 0; k < WINDOW; k++) {
			uint32_t p = p0 + k;
			int rc;

			keys[k] = p;
			for (int i = 0; i < floats_of(p); i++)
				vals[k][i] = value_of(p, i);
			rc = p % 2 == 0 ? dml_push_range(d, 0, dense_begin(p), dense_begin(p) + 2,
							 vals[k], &h[k])
					: dml_push(d, 1, &keys[k], 1, vals[k], &h[k]);
			if (rc)
				_exit(4);
		}
		for (uint32_t k = 0; k < WINDOW; k++) {
			uint32_t p = p0 + k;

			if (dml_wait(d, h[k]) != 0)
				_exit(5);
			if (write(fd, &p, sizeof(p)) != sizeof(p))
				_exit(6);
		}
	}
	dml_close(d);
	_exit(0);
}

/* Read acknowledged pushes from fd into acked until there are want. */
static void wait_acks(int fd, uint8_t *acked, unsigned *n, unsigned want)
{
	while (*n < want) {
		struct pollfd pfd = { .fd = fd, .events = POLLIN };
		uint32_t p;

		ck_assert_msg(poll(&pfd, 1, WAIT_MS) == 1, "no acknowledgement for %d ms "
			      "(%u of %u)", WAIT_MS, *n, want);
		ck_assert_int_eq(read(fd, &p, sizeof(p)), sizeof(p));
		ck_assert_uint_lt(p, PUSHES);
		acked[p] = 1;
		(*n)++;
	}
}

/* One worker process's life: the server dies under it, then it does. */
static void episode(struct dml_test_env *env, struct dml_test_server *s, int e,
		    uint8_t *acked, uint64_t *rng)
{
	unsigned n = 0, first = (unsigned)e * PER_EPISODE;
	int fds[2], status;
	pid_t pid;

	ck_assert_int_eq(pipe(fds), 0);
	ck_assert_int_eq(dml_test_fork(env, &pid), 0);
	if (pid == 0) {
		close(fds[0]);
		worker_main(env, s, fds[1], incarnation_of(e), first);
	}
	close(fds[1]);
	wait_acks(fds[0], acked, &n, 16 + (unsigned)(acks_rng_next(rng) % 100));
	usleep((useconds_t)(acks_rng_next(rng) % 400));
	dml_test_server_kill(s);
	ck_assert_int_eq(dml_test_server_restart(s), 0);
	wait_acks(fds[0], acked, &n, n + 16 + (unsigned)(acks_rng_next(rng) % 100));
	usleep((useconds_t)(acks_rng_next(rng) % 400));
	ck_assert_int_eq(kill(pid, SIGKILL), 0);
	ck_assert_int_eq(waitpid(pid, &status, 0), pid);
	ck_assert_msg(WIFSIGNALED(status), "worker %d ended by itself (status %d)", e,
		      WEXITSTATUS(status));
	acks_drain(fds[0], acked, PUSHES);
	close(fds[0]);
}

START_TEST(test_worker_and_server_restarts)
{
	static float dense[DENSE_KEYS * WIDTH], sparse[PUSHES / 2 * SPARSE_WIDTH];
	static uint64_t ids[PUSHES / 2];
	static uint8_t acked[PUSHES];
	struct dml_test_server_conf sc = { 0 };
	struct dml_test_server *s;
	struct dml_test_env *env;
	unsigned twice = 0, lost = 0, once = 0, unacked_applied = 0;
	uint64_t rng = 2026;
	dml_handle_t h;
	char *store;
	dml_t *d;

	ck_assert_int_eq(dml_test_env_new(&env), 0);
	ck_assert_int_gt(asprintf(&store, "[store]\npath = %s/store\ndurability = sync\n",
				  dml_test_env_dir(env)), 0);
	sc.node_id = 1;
	sc.staleness = -1;
	sc.tables = tables;
	sc.extra = store;
	ck_assert_int_eq(dml_test_server_start(env, &sc, &s), 0);
	ck_assert_int_eq(dml_test_server_pin_port(s), 0);
	for (int e = 0; e < EPISODES; e++)
		episode(env, s, e, acked, &rng);
	/* And once more from the log alone. */
	dml_test_server_kill(s);
	ck_assert_int_eq(dml_test_server_restart(s), 0);

	d = client(env, s, "control", 0);
	ck_assert_ptr_nonnull(d);
	for (uint32_t i = 0; i < PUSHES / 2; i++)
		ids[i] = 2 * i + 1;
	ck_assert_int_eq(dml_pull_range(d, 0, 0, DENSE_KEYS, dense, &h), 0);
	ck_assert_int_eq(dml_wait(d, h), 0);
	ck_assert_int_eq(dml_pull(d, 1, ids, PUSHES / 2, sparse, &h), 0);
	ck_assert_int_eq(dml_wait(d, h), 0);
	dml_close(d);
	for (uint32_t p = 0; p < PUSHES; p++) {
		const float *got = p % 2 == 0 ? dense + dense_begin(p) * WIDTH
					      : sparse + p / 2 * SPARSE_WIDTH;
		float times = -got[0] / value_of(p, 0);

		for (int i = 1; i < floats_of(p); i++)
			ck_assert_msg(-got[i] == times * value_of(p, i), "push %u: value %d is %g, "
				      "not %g times %g", p, i, got[i], times, -value_of(p, i));
		if (times == 2.0f)
			twice++;
		else if (acked[p] && times == 0.0f && ++lost <= 10)
			fprintf(stderr, "push %u (worker %u's) acknowledged, not applied\n", p,
				p / PER_EPISODE);
		else
			ck_assert_msg(times == 0.0f || times == 1.0f, "push %u applied %g times",
				      p, times);
		once += times == 1.0f;
		unacked_applied += !acked[p] && times == 1.0f;
	}
	printf("check_exactly_once: %d worker processes, %d kill points: %u pushes applied "
	       "once (%u of them unacknowledged), %u twice, %u acknowledged and lost\n",
	       EPISODES, 2 * EPISODES + 1, once, unacked_applied, twice, lost);
	ck_assert_msg(twice == 0 && lost == 0, "%u pushes applied twice, %u acknowledged "
		      "pushes lost", twice, lost);
	ck_assert_int_eq(dml_test_server_stop(s, WAIT_MS), 0);
	free(store);
	dml_test_env_free(env);
}
END_TEST

static Suite *exactly_once_suite(void)
{
	Suite *s = suite_create("exactly_once");
	TCase *tc = tcase_create("restarts");

	tcase_set_timeout(tc, 300);
	tcase_add_test(tc, test_worker_and_server_restarts);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return dml_check_run(exactly_once_suite());
}
