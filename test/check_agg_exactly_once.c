/*
 * Exactly-once through a zone aggregator, across kills of every process:
 * two worker processes (libdml clients of worker ids 1 and 2, routed
 * through a dml-aggregator in front of a sync dml-server) push while the
 * test SIGKILLs the aggregator, the server and the workers at random points
 * with pushes in flight, and restarts the first two. In every other
 * episode the aggregator stays dead until the workers have gone on
 * straight to the server (their aggregator_timeout_ms) and had pushes
 * acknowledged there; then it comes back and they return to it.
 *
 * Both workers push the same rows in the same order (push p: two dense
 * keys of its own), so the aggregator sums them into one forwarded push
 * whenever both are there: worker 1 pushes v, worker 2 pushes 8 v, and
 * with sgd at learning rate 1 from zeros a row reads -(a1 + 8 a2) v, where
 * a1 and a2 are how often each worker's push was applied: exactly once when
 * the worker saw it acknowledged, at most once otherwise, never twice.
 */
#define _GNU_SOURCE
#include <check.h>
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

#define WAIT_MS 60000
#define WIDTH 4
/* Kill points: the aggregator, the server, the workers in each. */
#define EPISODES 8
#define PER_EPISODE 320
#define WINDOW 16
/* A worker's last window stays within its episode's pushes. */
_Static_assert(PER_EPISODE % WINDOW == 0, "PER_EPISODE is whole windows");
#define PUSHES (EPISODES * PER_EPISODE)
#define DENSE_KEYS (2 * PUSHES)
#define WORKERS 2
/* Worker 2's values are this many times worker 1's. */
#define SCALE 8

static const char tables[] =
	"[table]\nid = 0\nkind = dense\nwidth = 4\nkeys = 5120\noptimizer = sgd\nlr = 1\n";

static float value_of(uint32_t p, int i)
{
	return (float)(((p * 7u + (uint32_t)i) % 5u) + 1u);
}

static uint64_t incarnation_of(int e, uint32_t worker)
{
	return 1000u + (uint64_t)e * 10u + worker;
}

struct cluster {
	struct dml_test_env *env;
	struct dml_test_server *owner, *agg;
	char *agg_metrics;               /* its metrics port file */
	double forwarded, summed;        /* its pushes forwarded, workers' in them */
};

/* A worker through the aggregator, or (incarnation 0) a control client. */
static dml_t *client(struct cluster *k, uint32_t worker, uint64_t incarnation)
{
	char agg[32], inc[32];
	dml_opts_t *o;
	dml_t *d = NULL;

	if (dml_test_client_opts(k->env, &k->owner, 1, worker, &o) != 0)
		return NULL;
	snprintf(agg, sizeof(agg), "127.0.0.1:%u", dml_test_server_port(k->agg));
	snprintf(inc, sizeof(inc), "%" PRIu64, incarnation);
	if (dml_opts_set(o, "reconnect_timeout_ms", "30000") == 0 &&
	    dml_opts_set(o, "connect_timeout_ms", "30000") == 0 &&
	    (incarnation ? dml_opts_set(o, "aggregator", agg) == 0 &&
			   dml_opts_set(o, "aggregator_timeout_ms", "500") == 0 &&
			   dml_opts_set(o, "incarnation", inc) == 0
			 : dml_opts_set(o, "role", "control") == 0) &&
	    dml_connect(o, &d) != 0)
		d = NULL;
	dml_opts_free(o);
	return d;
}

/* A worker process: pushes [first, first + PER_EPISODE), telling fd each
 * acknowledged one, until killed. */
static void worker_main(struct cluster *k, uint32_t worker, int fd, uint64_t incarnation,
			uint32_t first)
{
	static float vals[WINDOW][2 * WIDTH];
	dml_handle_t h[WINDOW];
	dml_t *d = client(k, worker, incarnation);

	if (!d)
		_exit(3);
	for (uint32_t p0 = first; p0 < first + PER_EPISODE; p0 += WINDOW) {
		for (uint32_t i = 0; i < WINDOW; i++) {
			uint32_t p = p0 + i;

			for (int j = 0; j < 2 * WIDTH; j++)
				vals[i][j] = value_of(p, j) * (worker == 2 ? SCALE : 1);
			if (dml_push_range(d, 0, 2ull * p, 2ull * p + 2, vals[i], &h[i]) != 0)
				_exit(4);
		}
		for (uint32_t i = 0; i < WINDOW; i++) {
			uint32_t p = p0 + i;

			int rc = dml_wait(d, h[i]);

			if (rc != 0) {
				fprintf(stderr, "worker %u: push %u: %s (%s)\n", worker, p,
					dml_strerror(rc), dml_error_detail(d));
				_exit(5);
			}
			if (write(fd, &p, sizeof(p)) != sizeof(p))
				_exit(6);
		}
	}
	dml_close(d);
	_exit(0);
}

/* Read acknowledged pushes of either worker until want more arrived. */
static void wait_acks(const int *fds, uint8_t (*acked)[PUSHES], unsigned *n, unsigned want)
{
	while (*n < want) {
		struct pollfd pfd[WORKERS];
		uint32_t p;
		int got;

		for (int w = 0; w < WORKERS; w++)
			pfd[w] = (struct pollfd){ .fd = fds[w], .events = POLLIN };
		got = poll(pfd, WORKERS, WAIT_MS);
		ck_assert_msg(got > 0, "no acknowledgement for %d ms (%u of %u)", WAIT_MS, *n,
			      want);
		for (int w = 0; w < WORKERS; w++) {
			if (!(pfd[w].revents & POLLIN))
				continue;
			ck_assert_int_eq(read(fds[w], &p, sizeof(p)), sizeof(p));
			ck_assert_uint_lt(p, PUSHES);
			acked[w][p] = 1;
			(*n)++;
		}
	}
}

static void pause_random(uint64_t *rng)
{
	usleep((useconds_t)(acks_rng_next(rng) % 400));
}

static void restart(struct dml_test_server *s)
{
	ck_assert_int_eq(dml_test_server_restart(s), 0);
}

/* Add what this aggregator process forwarded (its counters die with it). */
static void count_forwarded(struct cluster *k)
{
	double fwd = 0, sum = 0;
	uint16_t port;

	ck_assert_int_eq(dml_test_port_file_read(k->agg_metrics, &port), 0);
	ck_assert_int_eq(dml_test_metric(port, "dml_aggregator_fanin_count", WAIT_MS, &fwd), 0);
	ck_assert_int_eq(dml_test_metric(port, "dml_aggregator_fanin_sum", WAIT_MS, &sum), 0);
	k->forwarded += fwd;
	k->summed += sum;
}

static void kill_aggregator(struct cluster *k)
{
	count_forwarded(k);
	dml_test_server_kill(k->agg);
}

/* Two worker processes' lives: the aggregator dies under them (in odd
 * episodes staying dead a while), then the server, then they do. */
static void episode(struct cluster *k, int e, uint8_t (*acked)[PUSHES], uint64_t *rng)
{
	unsigned n = 0, first = (unsigned)e * PER_EPISODE;
	int fds[WORKERS][2], rd[WORKERS], status;
	pid_t pid[WORKERS];

	for (int w = 0; w < WORKERS; w++) {
		ck_assert_int_eq(pipe(fds[w]), 0);
		ck_assert_int_eq(dml_test_fork(k->env, &pid[w]), 0);
		if (pid[w] == 0) {
			close(fds[w][0]);
			worker_main(k, (uint32_t)w + 1, fds[w][1], incarnation_of(e, (uint32_t)w + 1),
				    first);
		}
		close(fds[w][1]);
		rd[w] = fds[w][0];
	}
	wait_acks(rd, acked, &n, 16 + (unsigned)(acks_rng_next(rng) % 100));
	pause_random(rng);
	kill_aggregator(k);
	if (e % 2 == 0)
		restart(k->agg);
	else	/* nothing to route through: they must go straight on */
		wait_acks(rd, acked, &n, n + 32);
	wait_acks(rd, acked, &n, n + 16 + (unsigned)(acks_rng_next(rng) % 100));
	if (e % 2 == 1)
		restart(k->agg);
	pause_random(rng);
	dml_test_server_kill(k->owner);
	restart(k->owner);
	wait_acks(rd, acked, &n, n + 16 + (unsigned)(acks_rng_next(rng) % 100));
	pause_random(rng);
	for (int w = 0; w < WORKERS; w++) {
		/* One may have pushed all its share while the other was slow. */
		(void)kill(pid[w], SIGKILL);
		ck_assert_int_eq(waitpid(pid[w], &status, 0), pid[w]);
		ck_assert_msg(WIFSIGNALED(status) || WEXITSTATUS(status) == 0, "worker %d of "
			      "episode %d failed (status %d)", w + 1, e, WEXITSTATUS(status));
		acks_drain(rd[w], acked[w], PUSHES);
		close(rd[w]);
	}
}

START_TEST(test_kills_through_an_aggregator)
{
	static float rows[DENSE_KEYS * WIDTH];
	static uint8_t acked[WORKERS][PUSHES];
	struct dml_test_server_conf sc = { 0 };
	struct cluster k;
	unsigned lost = 0, twice = 0, both = 0, once[WORKERS] = { 0 };
	char *store, owner[32], extra[256];
	uint64_t rng = 2027;
	dml_handle_t h;
	dml_t *d;

	ck_assert_int_eq(dml_test_env_new(&k.env), 0);
	ck_assert_int_gt(asprintf(&store, "[store]\npath = %s/store\ndurability = sync\n",
				  dml_test_env_dir(k.env)), 0);
	sc.node_id = 1;
	sc.staleness = -1;
	sc.tables = tables;
	sc.extra = store;
	ck_assert_int_eq(dml_test_server_start(k.env, &sc, &k.owner), 0);
	ck_assert_int_eq(dml_test_server_pin_port(k.owner), 0);
	snprintf(owner, sizeof(owner), "127.0.0.1:%u", dml_test_server_port(k.owner));
	k.agg_metrics = NULL;
	k.forwarded = k.summed = 0;
	ck_assert_int_eq(dml_test_env_write(k.env, "agg-metrics.port", "", 0600,
					    &k.agg_metrics), 0);
	snprintf(extra, sizeof(extra), "window_ms = 2\nmetrics_listen = 127.0.0.1:0\n"
		 "metrics_port_file = %s\n", k.agg_metrics);
	ck_assert_int_eq(dml_test_aggregator_start(k.env, &(struct dml_test_agg_conf){
				.servers = owner, .agg_extra = extra }, &k.agg), 0);
	ck_assert_int_eq(dml_test_server_pin_port(k.agg), 0);
	for (int e = 0; e < EPISODES; e++)
		episode(&k, e, acked, &rng);
	count_forwarded(&k);
	/* And once more from the log alone. */
	dml_test_server_kill(k.owner);
	restart(k.owner);

	d = client(&k, 9, 0);
	ck_assert_ptr_nonnull(d);
	ck_assert_int_eq(dml_pull_range(d, 0, 0, DENSE_KEYS, rows, &h), 0);
	ck_assert_int_eq(dml_wait(d, h), 0);
	dml_close(d);
	for (uint32_t p = 0; p < PUSHES; p++) {
		const float *got = rows + 2ull * p * WIDTH;
		float times = -got[0] / value_of(p, 0);
		unsigned t = (unsigned)times, a[WORKERS] = { t % SCALE, t / SCALE };

		ck_assert_msg(times == (float)t && t < SCALE * SCALE, "push %u: %g", p, times);
		for (int i = 1; i < 2 * WIDTH; i++)
			ck_assert_msg(-got[i] == times * value_of(p, i), "push %u: value %d is %g, "
				      "not %g times %g", p, i, got[i], times, -value_of(p, i));
		for (int w = 0; w < WORKERS; w++) {
			if (a[w] > 1 && ++twice <= 10)
				fprintf(stderr, "push %u of worker %d applied %u times (worker 1's "
					"%u times; acknowledged: %d, %d)\n", p, w + 1, a[w], a[0],
					acked[0][p], acked[1][p]);
			if (acked[w][p] && a[w] == 0 && ++lost <= 10)
				fprintf(stderr, "push %u of worker %d acknowledged, not applied\n",
					p, w + 1);
			once[w] += a[w] == 1;
		}
		both += a[0] == 1 && a[1] == 1;
	}
	printf("check_agg_exactly_once: %d episodes, %d kill points: pushes applied once "
	       "%u (worker 1), %u (worker 2), %u of them both; the aggregators forwarded "
	       "%.0f pushes holding %.0f; %u twice, %u acknowledged and lost\n", EPISODES,
	       3 * EPISODES + 1, once[0], once[1], both, k.forwarded, k.summed, twice, lost);
	fflush(stdout);
	ck_assert_msg(twice == 0 && lost == 0, "%u pushes applied twice, %u acknowledged "
		      "pushes lost", twice, lost);
	ck_assert_msg(k.summed > k.forwarded, "the aggregators never summed two workers' "
		      "pushes (%.0f forwarded, %.0f pushes in them)", k.forwarded, k.summed);
	ck_assert_int_eq(dml_test_server_stop(k.agg, WAIT_MS), 0);
	ck_assert_int_eq(dml_test_server_stop(k.owner, WAIT_MS), 0);
	free(store);
	free(k.agg_metrics);
	dml_test_env_free(k.env);
}
END_TEST

static Suite *agg_exactly_once_suite(void)
{
	Suite *s = suite_create("agg_exactly_once");
	TCase *tc = tcase_create("kills");

	tcase_set_timeout(tc, 600);
	tcase_add_test(tc, test_kills_through_an_aggregator);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return dml_check_run(agg_exactly_once_suite());
}
