/*
 * check_worker_daemon.c - dml-worker the daemon, for check_worker.c's suite.
 *
 * Integration: dml-worker registers with a real dml-sched (`dmlctl --json
 * nodes` shows it alive with its profile), serves its metrics, and leaves on
 * SIGTERM (exit 0, listed as dead with reason "left"). A scripted scheduler
 * in this process then sends it ASSIGNs: each is ACKed with its request id,
 * a job it cannot run comes back as PROGRESS with the reason as its error,
 * paused and ended assignments start nothing, and SIGTERM says BYE.
 *
 * Unit: the CPU a worker may use, read from cgroup files.
 */
#define _GNU_SOURCE
#include <check.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <event2/listener.h>

#include "worker/app.h"
#include "test/app_test.h"
#include "shard/assign.h"
#include "proto/auth.h"
#include "test/check_run.h"
#include "test/check_worker.h"
#include "proto/conf.h"
#include "proto/conn.h"
#include "worker/cpu_limit.h"
#include "proto/dml_error.h"
#include "test/harness.h"
#include "proto/job_spec.h"
#include "test/json.h"
#include "proto/listen.h"
#include "worker/profile.h"
#include "proto/util.h"
#include "worker/walk.h"
#include "worker/worker_conf.h"

#define WAIT_MS 10000
#define POLL_MS 40
#define WORKER_ID 3

static void sleep_ms(int ms)
{
	struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };

	while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
		;
}

/* ---- dml-worker against a real dml-sched ----------------------------------- */

/* Write a worker config (extra appended to [worker]) and start dml-worker. */
static pid_t worker_spawn(struct dml_test_env *env, uint16_t sched_port, const char *extra)
{
	char *text, *path, *bin;
	pid_t pid;

	ck_assert(asprintf(&text, "[worker]\nnode_id = %d\nscheduler = 127.0.0.1:%u\n"
			   "secret_file = %s\nzone = rack-1\n%s", WORKER_ID,
			   (unsigned)sched_port, dml_test_env_secret(env), extra) > 0);
	ck_assert_int_eq(dml_test_env_write(env, "worker.conf", text, 0644, &path), 0);
	dml_test_bin("worker/dml-worker", &bin);
	{
		char *argv[] = { bin, (char *)"-c", path, NULL };

		ck_assert_int_eq(dml_test_proc_spawn(env, argv, "worker.log", &pid), 0);
	}
	free(bin);
	free(path);
	free(text);
	return pid;
}

static void worker_stop(struct dml_test_env *env, pid_t pid)
{
	int status;

	ck_assert_int_eq(kill(pid, SIGTERM), 0);
	ck_assert_int_eq(dml_test_proc_wait(env, pid, WAIT_MS, &status), 0);
	ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0,
		      "dml-worker ended with status 0x%x", status);
}

/* Poll `dmlctl --json nodes` until worker WORKER_ID is in state; *doc keeps
 * that listing (free it). */
static const struct jval *wait_worker(struct dml_test_env *env, uint16_t port,
				      const char *state, struct jval *doc)
{
	static const char *const args[] = { "--json", "nodes", NULL };
	uint64_t deadline = dml_now_ns() + (uint64_t)WAIT_MS * 1000000u;

	for (;;) {
		struct dml_test_output o;
		const struct jval *nodes;

		ck_assert_int_eq(dml_test_dmlctl(env, port, NULL, args, &o), 0);
		ck_assert_msg(o.status == 0 && json_parse(o.out, doc) == 0, "dmlctl: %d %s",
			      o.status, o.err);
		dml_test_output_free(&o);
		nodes = json_get(doc, "nodes");
		for (size_t i = 0; nodes && i < nodes->n; i++) {
			const struct jval *n = &nodes->items[i];

			if (strcmp(jstr(n, "role"), "worker") == 0 &&
			    jnum(n, "id") == WORKER_ID && strcmp(jstr(n, "state"), state) == 0)
				return n;
		}
		json_free(doc);
		ck_assert_msg(dml_now_ns() < deadline, "worker %d not %s in %d ms", WORKER_ID,
			      state, WAIT_MS);
		sleep_ms(POLL_MS);
	}
}

START_TEST(test_worker_registers_and_leaves)
{
	struct dml_test_sched_conf sc = { .heartbeat_interval_ms = 100,
					  .suspect_after_ms = 300, .dead_after_ms = 800 };
	struct dml_test_env *env;
	struct dml_test_server *sched;
	const struct jval *n, *prof;
	struct jval doc;
	char *extra, *mport_path, *body = NULL;
	uint16_t port, mport = 0;
	int status;
	pid_t pid;

	ck_assert_int_eq(dml_test_env_new(&env), 0);
	ck_assert_int_eq(dml_test_sched_start(env, &sc, &sched), 0);
	port = dml_test_server_port(sched);
	ck_assert(asprintf(&mport_path, "%s/worker-metrics.port", dml_test_env_dir(env)) > 0);
	ck_assert(asprintf(&extra, "metrics_listen = 127.0.0.1:0\nmetrics_port_file = %s\n",
			   mport_path) > 0);
	pid = worker_spawn(env, port, extra);

	n = wait_worker(env, port, "alive", &doc);
	ck_assert_str_eq(jstr(n, "zone"), "rack-1");
	ck_assert_str_eq(jstr(n, "address"), "");
	prof = json_get(n, "profile");
	ck_assert(prof != NULL);
	ck_assert_str_eq(jstr(prof, "device"), "cpu");
	ck_assert(jnum(prof, "cores") >= 1 && jnum(prof, "memory_bytes") > 0);
	ck_assert_msg(jnum(prof, "gflops") > 0, "gflops %g", jnum(prof, "gflops"));
	ck_assert_msg(jnum(prof, "examples_per_s") > 0, "examples/s %g",
		      jnum(prof, "examples_per_s"));
	json_free(&doc);

	/* Metrics while idle: no job yet. */
	ck_assert_int_eq(dml_test_port_file_read(mport_path, &mport), 0);
	ck_assert_int_eq(dml_test_http_request(mport, "GET", "/metrics", WAIT_MS, &status,
					       &body), 0);
	ck_assert_int_eq(status, 200);
	ck_assert_msg(strstr(body, "\ndml_worker_clock 0\n") &&
		      strstr(body, "\ndml_worker_examples_total 0\n") &&
		      strstr(body, "\ndml_worker_job 0\n") &&
		      strstr(body, "\ndml_worker_loss NaN\n") &&
		      strstr(body, "dml_worker_wait_seconds_total") &&
		      strstr(body, "dml_worker_assignment_version"), "%s", body);
	free(body);

	worker_stop(env, pid);
	n = wait_worker(env, port, "dead", &doc);
	ck_assert_str_eq(jstr(n, "reason"), "left");
	json_free(&doc);
	ck_assert_int_eq(dml_test_server_stop(sched, WAIT_MS), 0);
	free(extra);
	free(mport_path);
	dml_test_env_free(env);
}
END_TEST

START_TEST(test_worker_bad_config)
{
	struct dml_test_env *env;
	struct dml_test_output o;
	char *path, *bin;

	ck_assert_int_eq(dml_test_env_new(&env), 0);
	ck_assert_int_eq(dml_test_env_write(env, "bad.conf", "[worker]\nnode_id = 3\n"
					    "secret_file = s\n", 0644, &path), 0);
	dml_test_bin("worker/dml-worker", &bin);
	{
		char *argv[] = { bin, (char *)"-c", path, NULL };

		ck_assert_int_eq(dml_test_run(env, argv, WAIT_MS, &o), 0);
	}
	ck_assert_msg(o.status == 2 && strstr(o.err, "scheduler"), "%d: %s", o.status, o.err);
	dml_test_output_free(&o);
	free(path);
	free(bin);
	dml_test_env_free(env);
}
END_TEST

/* ---- dml-worker against a scripted scheduler ----------------------------- */

#define MINI_MAX 32

/*
 * Just enough of a scheduler, run on a loop in this thread between checks:
 * it accepts the worker's registration, echoes heartbeats, refuses
 * SHARDMAP requests, and records ACKs, PROGRESS reports and BYEs.
 */
struct mini {
	struct event_base *base;
	struct dml_listener *listener;
	uint16_t port;
	uint8_t *secret;
	size_t secret_len;
	struct dml_conn_conf cc;
	struct dml_conn *conns[MINI_MAX]; /* open connections */
	struct dml_conn *node;      /* the registered worker's */
	uint32_t node_id;
	int role, byes;
	uint64_t next_id;
	uint64_t acks[MINI_MAX];
	size_t nacks;
	Dml__Progress prog[MINI_MAX]; /* PROGRESS reports, error strdup'ed */
	size_t nprogress;
};

static void mini_reply(struct dml_conn *c, int type, uint64_t request_id)
{
	Dml__Meta r = DML__META__INIT;

	r.type = type;
	r.request_id = request_id;
	r.heartbeat_interval_ms = type == DML__MSG_TYPE__REGISTER_REPLY ? 100 : 0;
	(void)dml_conn_send(c, &r, NULL, 0, DML_SEND_COPY);
}

static int mini_on_frame(struct dml_conn *c, const Dml__Meta *m, const uint8_t *payload,
			 size_t len, void *arg)
{
	struct mini *mi = arg;

	switch (m->type) {
	case DML__MSG_TYPE__REGISTER:
		mi->node = c;
		mi->node_id = m->node ? m->node->node_id : 0;
		mi->role = m->node ? (int)m->node->role : 0;
		mini_reply(c, DML__MSG_TYPE__REGISTER_REPLY, m->request_id);
		break;
	case DML__MSG_TYPE__HEARTBEAT:
		mini_reply(c, DML__MSG_TYPE__HEARTBEAT, m->request_id);
		break;
	case DML__MSG_TYPE__SHARDMAP:
		(void)dml_conn_send_error(c, m->request_id, DML_ENOTFOUND,
					  "job has no shard map yet");
		break;
	case DML__MSG_TYPE__ACK:
		if (mi->nacks < MINI_MAX)
			mi->acks[mi->nacks++] = m->request_id;
		break;
	case DML__MSG_TYPE__PROGRESS:
		if (mi->nprogress < MINI_MAX) {
			Dml__Progress *p = &mi->prog[mi->nprogress++];

			*p = *m->progress;
			p->base.unknown_fields = NULL;
			p->base.n_unknown_fields = 0;
			p->error = dml_xstrdup(p->error ? p->error : "");
		}
		break;
	case DML__MSG_TYPE__BYE:
		mi->byes++;
		break;
	default:
		break;
	}
	return 0;
}

static void mini_on_close(struct dml_conn *c, int err, void *arg)
{
	struct mini *mi = arg;

	if (mi->node == c)
		mi->node = NULL;
	for (size_t i = 0; i < MINI_MAX; i++)
		if (mi->conns[i] == c)
			mi->conns[i] = NULL;
}

static const struct dml_conn_ops mini_ops = {
	.on_frame = mini_on_frame,
	.on_close = mini_on_close,
};

static void mini_accept(struct evconnlistener *l, evutil_socket_t fd, struct sockaddr *sa,
			int len, void *arg)
{
	struct mini *mi = arg;
	struct dml_conn *c;

	if (dml_conn_accept(mi->base, fd, &mi->cc, &mini_ops, mi, &c) != 0)
		return;
	for (size_t i = 0; i < MINI_MAX; i++)
		if (!mi->conns[i]) {
			mi->conns[i] = c;
			return;
		}
	dml_conn_abort(c, DML_ECLOSED);
}

static void mini_start(struct dml_test_env *env, struct mini *mi)
{
	memset(mi, 0, sizeof(*mi));
	mi->base = event_base_new();
	ck_assert(mi->base != NULL);
	ck_assert_int_eq(dml_secret_load(dml_test_env_secret(env), &mi->secret,
					 &mi->secret_len), 0);
	dml_conn_conf_default(&mi->cc);
	mi->cc.secret = mi->secret;
	mi->cc.secret_len = mi->secret_len;
	mi->cc.cluster = "dml";
	mi->cc.role = DML__ROLE__SCHEDULER;
	mi->cc.node_id = 1;
	ck_assert_int_eq(dml_listen_tcp(mi->base, "127.0.0.1:0", mini_accept, mi,
					&mi->listener, &mi->port), 0);
}

/* Turn the loop for about ms milliseconds. */
static void mini_turn(struct mini *mi, int ms)
{
	struct timeval tv = { ms / 1000, (ms % 1000) * 1000 };

	event_base_loopexit(mi->base, &tv);
	event_base_dispatch(mi->base);
}

/* Turn the loop until *counter reaches want, or fail after ms. */
static void mini_wait(struct mini *mi, const size_t *counter, size_t want, const char *what,
		      int ms)
{
	uint64_t deadline = dml_now_ns() + (uint64_t)ms * 1000000u;

	while (*counter < want) {
		ck_assert_msg(dml_now_ns() < deadline, "no %s from the worker in %d ms", what,
			      ms);
		mini_turn(mi, 20);
	}
}

static void mini_wait_registered(struct mini *mi)
{
	uint64_t deadline = dml_now_ns() + (uint64_t)WAIT_MS * 1000000u;

	while (!mi->node) {
		ck_assert_msg(dml_now_ns() < deadline, "the worker did not register");
		mini_turn(mi, 20);
	}
}

/* Send ASSIGN of partitions 0 and 2 of 4; returns its request id. */
static uint64_t mini_assign(struct mini *mi, const Dml__JobSpec *spec, uint32_t job,
			    uint64_t version, Dml__JobState state)
{
	Dml__Meta m = DML__META__INIT;
	Dml__Assignment a = DML__ASSIGNMENT__INIT;
	uint32_t parts[] = { 0, 2 };

	a.job = job;
	a.version = version;
	a.state = state;
	a.partitions = parts;
	a.n_partitions = DML_ARRAY_LEN(parts);
	a.num_partitions = 4;
	m.type = DML__MSG_TYPE__ASSIGN;
	m.request_id = ++mi->next_id;
	m.job = job;
	m.job_spec = (Dml__JobSpec *)spec;
	m.assignment = &a;
	ck_assert(mi->node != NULL);
	ck_assert_int_eq(dml_conn_send(mi->node, &m, NULL, 0, DML_SEND_COPY), 0);
	return m.request_id;
}

static void mini_free(struct mini *mi)
{
	for (size_t i = 0; i < MINI_MAX; i++)
		if (mi->conns[i])
			dml_conn_abort(mi->conns[i], DML_ECLOSED);
	for (int i = 0; i < 50; i++)
		event_base_loop(mi->base, EVLOOP_NONBLOCK);
	dml_listener_free(mi->listener);
	event_base_free(mi->base);
	dml_secret_free(mi->secret, mi->secret_len);
	for (size_t i = 0; i < mi->nprogress; i++)
		free(mi->prog[i].error);
}

START_TEST(test_worker_assignments)
{
	struct dml_test_env *env;
	struct mini mi;
	Dml__JobSpec *good = app_test_spec(lsq_job), *bad = app_test_spec(lsq_job);
	uint64_t id;
	size_t before;
	pid_t pid;

	ck_assert_int_eq(dml_test_env_new(&env), 0);
	mini_start(env, &mi);
	pid = worker_spawn(env, mi.port, "profile = no\n");
	mini_wait_registered(&mi);
	ck_assert_uint_eq(mi.node_id, WORKER_ID);
	ck_assert_int_eq(mi.role, DML__ROLE__WORKER);

	/* A spec no worker can run: ACKed, then failed with the worker's id. */
	bad->tables[0]->keys = 6;
	id = mini_assign(&mi, bad, 7, 1, DML__JOB_STATE__RUNNING);
	mini_wait(&mi, &mi.nacks, 1, "ACK", WAIT_MS);
	ck_assert_uint_eq(mi.acks[0], id);
	mini_wait(&mi, &mi.nprogress, 1, "PROGRESS", WAIT_MS);
	ck_assert_uint_eq(mi.prog[0].job, 7);
	ck_assert(!mi.prog[0].finished);
	ck_assert_msg(strncmp(mi.prog[0].error, "job spec: ", 10) == 0,
		      "error '%s'", mi.prog[0].error);

	/*
	 * A spec it can run gets as far as joining the job's servers, which
	 * this scheduler cannot name: the failure is libdml's, not the spec's.
	 */
	id = mini_assign(&mi, good, 8, 1, DML__JOB_STATE__RUNNING);
	mini_wait(&mi, &mi.nacks, 2, "ACK", WAIT_MS);
	ck_assert_uint_eq(mi.acks[1], id);
	/* libdml may retry for its connect_timeout_ms (5 s) before giving up. */
	mini_wait(&mi, &mi.nprogress, 2, "PROGRESS", 3 * WAIT_MS);
	ck_assert_uint_eq(mi.prog[1].job, 8);
	ck_assert_uint_eq(mi.prog[1].assignment, 1);
	ck_assert_msg((strstr(mi.prog[1].error, "libdml") ||
		       strstr(mi.prog[1].error, "cannot join")),
		      "error '%s'", mi.prog[1].error);

	/* Again RUNNING, same job: it already ended here, nothing starts. A
	 * paused job and an ended one start nothing either. */
	before = mi.nprogress;
	mini_assign(&mi, good, 8, 1, DML__JOB_STATE__RUNNING);
	mini_assign(&mi, good, 9, 1, DML__JOB_STATE__PAUSED);
	id = mini_assign(&mi, good, 9, 2, DML__JOB_STATE__STOPPED);
	mini_wait(&mi, &mi.nacks, 5, "ACK", WAIT_MS);
	ck_assert_uint_eq(mi.acks[4], id);
	mini_turn(&mi, 500);
	ck_assert_uint_eq(mi.nprogress, before);

	worker_stop(env, pid);
	mini_turn(&mi, 50);
	ck_assert_int_eq(mi.byes, 1);
	mini_free(&mi);
	dml_job_spec_free(good);
	dml_job_spec_free(bad);
	dml_test_env_free(env);
}
END_TEST

/* ---- the CPU a worker may use ---------------------------------------------- */

/* dir/name (made with its folders) holding text. */
static void put_file(const char *dir, const char *name, const char *text)
{
	char path[512], cmd[600];
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	snprintf(cmd, sizeof(cmd), "mkdir -p \"$(dirname '%s')\"", path);
	ck_assert_int_eq(system(cmd), 0);
	ck_assert_ptr_nonnull(f = fopen(path, "w"));
	fputs(text, f);
	fclose(f);
}

/*
 * A cgroup quota is read along the process's cgroup path, the tightest of
 * the path and its ancestors: v1 cpu.cfs_quota_us / cpu.cfs_period_us in a
 * hierarchy named by its controllers, v2 cpu.max; none, or a layout it does
 * not know, is the online CPUs.
 */
START_TEST(test_cpu_limit_from_cgroups)
{
	char root[] = "/tmp/dml-check-cpulimit.XXXXXX", pc[600];

	ck_assert_ptr_nonnull(mkdtemp(root));
	snprintf(pc, sizeof(pc), "%s/proc-cgroup", root);
	/* v1, cpu mounted with cpuacct: the job's group 0.5, the worker's 0.15 */
	put_file(root, "proc-cgroup", "3:memory:/x\n2:cpu,cpuacct:/fleet/w3\n0::/\n");
	put_file(root, "cpu,cpuacct/fleet/cpu.cfs_quota_us", "50000\n");
	put_file(root, "cpu,cpuacct/fleet/cpu.cfs_period_us", "100000\n");
	put_file(root, "cpu,cpuacct/fleet/w3/cpu.cfs_quota_us", "1500\n");
	put_file(root, "cpu,cpuacct/fleet/w3/cpu.cfs_period_us", "10000\n");
	ck_assert_double_eq_tol(dml_cpu_limit_cores_at(pc, root, 2), 0.15, 1e-12);
	/* no quota on the worker (-1): its group's */
	put_file(root, "cpu,cpuacct/fleet/w3/cpu.cfs_quota_us", "-1\n");
	ck_assert_double_eq_tol(dml_cpu_limit_cores_at(pc, root, 2), 0.5, 1e-12);
	/* a quota above the online CPUs is the online CPUs */
	put_file(root, "cpu,cpuacct/fleet/cpu.cfs_quota_us", "400000\n");
	ck_assert_double_eq_tol(dml_cpu_limit_cores_at(pc, root, 2), 2, 1e-12);
	/* v2 */
	put_file(root, "proc-cgroup", "0::/k8s/pod1\n");
	put_file(root, "k8s/pod1/cpu.max", "25000 100000\n");
	put_file(root, "k8s/cpu.max", "max 100000\n");
	ck_assert_double_eq_tol(dml_cpu_limit_cores_at(pc, root, 4), 0.25, 1e-12);
	put_file(root, "k8s/pod1/cpu.max", "max 100000\n");
	ck_assert_double_eq_tol(dml_cpu_limit_cores_at(pc, root, 4), 4, 1e-12);
	/* garbage and missing files */
	put_file(root, "proc-cgroup", "nonsense\n1:cpu:relative\n");
	ck_assert_double_eq_tol(dml_cpu_limit_cores_at(pc, root, 3), 3, 1e-12);
	ck_assert_double_eq_tol(dml_cpu_limit_cores_at("/nonexistent", root, 3), 3, 1e-12);
	/* this process: something positive, at most the online CPUs */
	ck_assert(dml_cpu_limit_cores() > 0);
	ck_assert(dml_cpu_limit_cores() <= (double)sysconf(_SC_NPROCESSORS_ONLN));
	snprintf(pc, sizeof(pc), "rm -rf '%s'", root);
	ck_assert_int_eq(system(pc), 0);
}
END_TEST

void check_worker_daemon_tests(TCase *unit, TCase *daemon)
{
	tcase_add_test(unit, test_cpu_limit_from_cgroups);
	tcase_add_test(daemon, test_worker_bad_config);
	tcase_add_test(daemon, test_worker_registers_and_leaves);
	tcase_add_test(daemon, test_worker_assignments);
}
