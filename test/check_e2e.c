/*
 * End to end: a whole cluster from config files, driven the way an operator
 * drives it. dml-sched, dml-servers that take their tables from it and
 * dml-workers run as real processes on 127.0.0.1; jobs go in with
 * `dmlctl submit` and are watched with `dmlctl --json status` and `nodes`.
 *
 *   - a job runs to its end on 3 workers while one of them is SIGKILLed in
 *     the middle: its partitions go to the others and the job still
 *     finishes; status and nodes say what happened;
 *   - a server that joins a running job makes the shard map change version,
 *     rows move to it, and the workers follow the new map without a request
 *     failing (a failed request would fail the job);
 *   - pause, resume and stop, and dmlctl's errors for a job that is not
 *     there.
 */
#include <check.h>
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "check_run.h"
#include "dml_error.h"
#include "harness.h"
#include "json.h"
#include "util.h"

#define TEST_TIMEOUT_S 180
#define WAIT_MS 60000
#define POLL_MS 100
#define MAX_WORKERS 4

struct cluster {
	struct dml_test_env *env;
	struct dml_test_server *sched;
	struct dml_test_server *servers[3];
	size_t nservers;
	pid_t workers[MAX_WORKERS + 1];    /* by node id */
	uint16_t port;                     /* the scheduler's */
};

static void sleep_ms(int ms)
{
	struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };

	while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
		;
}

static void add_server(struct cluster *c)
{
	struct dml_test_server_conf sc = { 0 };
	char *line = dml_test_scheduler_line(c->sched);

	sc.node_id = (uint32_t)c->nservers + 1;
	sc.server_extra = line;
	ck_assert_int_eq(dml_test_server_start(c->env, &sc, &c->servers[c->nservers]), 0);
	c->nservers++;
	free(line);
}

static void start_worker(struct cluster *c, uint32_t id)
{
	char name[32], *path, *bin, *text;
	size_t need;

	need = (size_t)snprintf(NULL, 0,
		"[worker]\nnode_id = %u\nscheduler = 127.0.0.1:%u\nsecret_file = %s\n"
		"log_level = info\nthreads = 1\n", id, c->port, dml_test_env_secret(c->env));
	text = dml_xmalloc(need + 1);
	snprintf(text, need + 1,
		 "[worker]\nnode_id = %u\nscheduler = 127.0.0.1:%u\nsecret_file = %s\n"
		 "log_level = info\nthreads = 1\n", id, c->port, dml_test_env_secret(c->env));
	snprintf(name, sizeof(name), "worker-%u.conf", id);
	ck_assert_int_eq(dml_test_env_write(c->env, name, text, 0644, &path), 0);
	dml_test_bin("worker/dml-worker", &bin);
	{
		char *argv[] = { bin, (char *)"-c", path, NULL };

		snprintf(name, sizeof(name), "worker-%u.log", id);
		ck_assert_int_eq(dml_test_proc_spawn(c->env, argv, name, &c->workers[id]), 0);
	}
	free(bin);
	free(path);
	free(text);
}

/* dmlctl --json ARGS..., which must succeed and print one JSON value. */
static int dmlctl_json(struct cluster *c, const char *const *args, struct jval *doc)
{
	const char *argv[8] = { "--json" };
	struct dml_test_output out;
	int rc;
	size_t n = 1;

	for (; *args && n < 7; args++)
		argv[n++] = *args;
	argv[n] = NULL;
	rc = dml_test_dmlctl(c->env, c->port, NULL, argv, &out);
	if (rc == 0 && out.status == 0)
		rc = json_parse(out.out, doc);
	else
		rc = -1;
	if (rc)
		fprintf(stderr, "dmlctl --json %s: status %d\nstdout: %s\nstderr: %s\n", argv[1],
			out.status, out.out, out.err);
	dml_test_output_free(&out);
	return rc;
}

/* The nodes list entry for (role, id), from `dmlctl --json nodes`. */
static const struct jval *node_entry(const struct jval *doc, const char *role, uint32_t id)
{
	const struct jval *nodes = json_get(doc, "nodes");

	for (size_t i = 0; nodes && i < nodes->n; i++)
		if (strcmp(jstr(&nodes->items[i], "role"), role) == 0 &&
		    jnum(&nodes->items[i], "id") == id)
			return &nodes->items[i];
	return NULL;
}

/* Wait until every worker 1..n is alive at the scheduler. */
static void wait_workers_alive(struct cluster *c, uint32_t n)
{
	static const char *const args[] = { "nodes", NULL };

	for (int waited = 0; waited < WAIT_MS; waited += POLL_MS) {
		struct jval doc;
		uint32_t alive = 0;

		if (dmlctl_json(c, args, &doc) == 0) {
			for (uint32_t id = 1; id <= n; id++) {
				const struct jval *e = node_entry(&doc, "worker", id);

				alive += e && strcmp(jstr(e, "state"), "alive") == 0;
			}
			json_free(&doc);
		}
		if (alive == n)
			return;
		sleep_ms(POLL_MS);
	}
	ck_abort_msg("workers did not all register");
}

/* `dmlctl --json status JOB` into doc; the job object is doc itself. */
static void job_status(struct cluster *c, const char *job, struct jval *doc)
{
	const char *args[] = { "status", job, NULL };

	ck_assert_int_eq(dmlctl_json(c, args, doc), 0);
}

/* Poll the job until its clock reaches at least clock (or it ended). */
static void wait_job_clock(struct cluster *c, const char *job, double clock)
{
	for (int waited = 0; waited < WAIT_MS; waited += POLL_MS) {
		const char *args[] = { "status", job, NULL };
		struct jval doc;
		double now;
		const char *state;

		/* A `submit --wait` started in the background may not have
		 * submitted yet: "no job" is retried like a low clock. */
		if (dmlctl_json(c, args, &doc) != 0) {
			sleep_ms(POLL_MS);
			continue;
		}
		now = jnum(&doc, "clock");
		state = jstr(&doc, "state");
		if (strcmp(state, "running") != 0 && strcmp(state, "pending") != 0 &&
		    strcmp(state, "paused") != 0) {
			fprintf(stderr, "job %s ended early: %s (%s)\n", job, state,
				jstr(&doc, "reason"));
			json_free(&doc);
			ck_abort_msg("job ended before reaching its clock");
		}
		json_free(&doc);
		if (now >= clock)
			return;
		sleep_ms(POLL_MS);
	}
	ck_abort_msg("job did not reach its clock in time");
}

static const struct jval *job_worker(const struct jval *job, uint32_t id)
{
	const struct jval *ws = json_get(job, "workers");

	for (size_t i = 0; ws && i < ws->n; i++)
		if (jnum(&ws->items[i], "worker") == id)
			return &ws->items[i];
	return NULL;
}

static int events_contain(const struct jval *job, const char *needle)
{
	const struct jval *ev = json_get(job, "events");

	for (size_t i = 0; ev && i < ev->n; i++)
		if (ev->items[i].type == J_STR && strstr(ev->items[i].str, needle))
			return 1;
	return 0;
}

static void cluster_up(struct cluster *c, size_t nservers, uint32_t nworkers)
{
	struct dml_test_sched_conf sc = { 0 };

	memset(c, 0, sizeof(*c));
	ck_assert_int_eq(dml_test_env_new(&c->env), 0);
	sc.heartbeat_interval_ms = 100;
	sc.suspect_after_ms = 400;
	sc.dead_after_ms = 1000;
	ck_assert_int_eq(dml_test_sched_start(c->env, &sc, &c->sched), 0);
	c->port = dml_test_server_port(c->sched);
	while (c->nservers < nservers)
		add_server(c);
	for (uint32_t id = 1; id <= nworkers; id++)
		start_worker(c, id);
	wait_workers_alive(c, nworkers);
}

/* SIGTERM every worker and wait for a clean exit, then the daemons. */
static void cluster_down(struct cluster *c)
{
	for (uint32_t id = 1; id <= MAX_WORKERS; id++) {
		int status;

		if (!c->workers[id])
			continue;
		kill(c->workers[id], SIGTERM);
		ck_assert_int_eq(dml_test_proc_wait(c->env, c->workers[id], 15000, &status), 0);
		ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0,
			      "worker %u exited with status %d", id, status);
	}
	for (size_t i = 0; i < c->nservers; i++)
		ck_assert_int_eq(dml_test_server_stop(c->servers[i], DML_TEST_STOP_TIMEOUT_MS), 0);
	ck_assert_int_eq(dml_test_server_stop(c->sched, DML_TEST_STOP_TIMEOUT_MS), 0);
	dml_test_env_free(c->env);
}

static char *write_job(struct cluster *c, const char *name, const char *job_section)
{
	char *path, *text;
	size_t need;
	static const char *const table =
		"[table]\nid = 0\nkind = dense\nwidth = 1\nkeys = 64\noptimizer = sgd\n"
		"lr = 0.05\n";

	need = strlen(job_section) + strlen(table) + 2;
	text = dml_xmalloc(need);
	snprintf(text, need, "%s\n%s", job_section, table);
	ck_assert_int_eq(dml_test_env_write(c->env, name, text, 0644, &path), 0);
	free(text);
	return path;
}

/* Run `dmlctl submit FILE --wait` in the background; its output to a log. */
static pid_t submit_wait(struct cluster *c, const char *path)
{
	char *bin, port[32];
	pid_t pid;

	dml_test_bin("tools/dmlctl", &bin);
	snprintf(port, sizeof(port), "127.0.0.1:%u", c->port);
	{
		char *argv[] = { bin, (char *)"-s", port, (char *)"--secret",
				 (char *)dml_test_env_secret(c->env), (char *)"submit",
				 (char *)path, (char *)"--wait", NULL };

		ck_assert_int_eq(dml_test_proc_spawn(c->env, argv, "submit.log", &pid), 0);
	}
	free(bin);
	return pid;
}

START_TEST(test_job_survives_killed_worker)
{
	struct cluster c;
	struct jval doc, nodes;
	static const char *const nodes_args[] = { "nodes", NULL };
	const struct jval *w3, *wk;
	char *job;
	pid_t submit;
	int status;
	double parts = 0;

	cluster_up(&c, 2, 3);
	job = write_job(&c, "lsq.conf",
			"[job]\nname = e2e-lsq\napp = lsq\ndata = synthetic\nstaleness = 1\n"
			"batch_size = 32\nmax_clocks = 2000\nexamples = 6000\ndim = 64\n"
			"dead_after_ms = 1000\nseed = 7\n");
	submit = submit_wait(&c, job);
	wait_job_clock(&c, "1", 100);
	kill(c.workers[3], SIGKILL);
	ck_assert_int_eq(dml_test_proc_wait(c.env, c.workers[3], 5000, &status), 0);
	c.workers[3] = 0;
	ck_assert_int_eq(dml_test_proc_wait(c.env, submit, WAIT_MS, &status), 0);
	ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0,
		      "dmlctl submit --wait exited with %d", status);

	job_status(&c, "1", &doc);
	ck_assert_str_eq(jstr(&doc, "state"), "done");
	ck_assert_str_eq(jstr(&doc, "name"), "e2e-lsq");
	ck_assert(jnum(&doc, "clock") >= 2000);
	w3 = job_worker(&doc, 3);
	ck_assert_ptr_nonnull(w3);
	ck_assert_str_eq(jstr(w3, "state"), "dead");
	ck_assert(jnum(w3, "partitions") == 0);
	for (uint32_t id = 1; id <= 2; id++) {
		wk = job_worker(&doc, id);
		ck_assert_ptr_nonnull(wk);
		ck_assert(jnum(wk, "clock") >= 2000);
		parts += jnum(wk, "partitions");
	}
	ck_assert(parts == 24);
	ck_assert_msg(events_contain(&doc, "worker 3 lost"), "no event for the lost worker");
	/* Least squares on noise-free synthetic data: the loss has come down
	 * from the starting ||w_true||^2 to near zero. */
	ck_assert_msg(jnum(&doc, "loss") >= 0 && jnum(&doc, "loss") < 0.1, "loss %g",
		      jnum(&doc, "loss"));
	json_free(&doc);

	ck_assert_int_eq(dmlctl_json(&c, nodes_args, &nodes), 0);
	ck_assert_str_eq(jstr(node_entry(&nodes, "worker", 3), "state"), "dead");
	ck_assert_str_eq(jstr(node_entry(&nodes, "worker", 1), "state"), "alive");
	json_free(&nodes);
	free(job);
	cluster_down(&c);
}
END_TEST

START_TEST(test_server_joins_running_job)
{
	struct cluster c;
	struct jval doc, map;
	static const char *const map_args[] = { "shardmap", "1", NULL };
	static const char *const stop_args[] = { "stop", "1", NULL };
	char *job;
	double loss_before;
	const struct jval *servers;

	cluster_up(&c, 2, 2);
	job = write_job(&c, "long.conf",
			"[job]\nname = e2e-join\napp = lsq\ndata = synthetic\nstaleness = 0\n"
			"batch_size = 32\nmax_clocks = 1000000\nexamples = 4000\ndim = 64\n"
			"seed = 3\n");
	{
		const char *args[] = { "submit", job, NULL };

		ck_assert_int_eq(dmlctl_json(&c, args, &doc), 0);
		ck_assert(jnum(&doc, "job") == 1);
		json_free(&doc);
	}
	wait_job_clock(&c, "1", 150);
	ck_assert_int_eq(dmlctl_json(&c, map_args, &map), 0);
	ck_assert(jnum(&map, "version") == 1);
	json_free(&map);
	job_status(&c, "1", &doc);
	loss_before = jnum(&doc, "loss");
	json_free(&doc);

	add_server(&c);
	for (int waited = 0;; waited += POLL_MS) {
		ck_assert_msg(waited < WAIT_MS, "the map never reached version 2");
		ck_assert_int_eq(dmlctl_json(&c, map_args, &map), 0);
		servers = json_get(&map, "servers");
		if (jnum(&map, "version") == 2) {
			ck_assert_ptr_nonnull(servers);
			ck_assert_uint_eq(servers->n, 3);
			json_free(&map);
			break;
		}
		json_free(&map);
		sleep_ms(POLL_MS);
	}
	/* Training goes on over the new map: clocks advance, the job does not
	 * fail (a request that failed would fail it), the model was moved, not
	 * lost (the loss does not jump back to its starting value). */
	job_status(&c, "1", &doc);
	{
		double clock = jnum(&doc, "clock");

		json_free(&doc);
		wait_job_clock(&c, "1", clock + 100);
	}
	job_status(&c, "1", &doc);
	ck_assert_str_eq(jstr(&doc, "state"), "running");
	ck_assert(jnum(&doc, "shard_map_version") == 2);
	ck_assert_msg(jnum(&doc, "loss") <= loss_before + 0.05, "loss %g after the move, %g before",
		      jnum(&doc, "loss"), loss_before);
	json_free(&doc);

	ck_assert_int_eq(dmlctl_json(&c, stop_args, &doc), 0);
	json_free(&doc);
	job_status(&c, "1", &doc);
	ck_assert_str_eq(jstr(&doc, "state"), "stopped");
	json_free(&doc);
	free(job);
	cluster_down(&c);
}
END_TEST

START_TEST(test_pause_resume_and_errors)
{
	struct cluster c;
	struct jval doc;
	struct dml_test_output out;
	static const char *const pause_args[] = { "pause", "1", NULL };
	static const char *const resume_args[] = { "resume", "1", NULL };
	static const char *const missing[] = { "stop", "7", NULL };
	double clock;
	char *job;

	cluster_up(&c, 1, 1);
	job = write_job(&c, "pause.conf",
			"[job]\nname = e2e-pause\napp = lsq\ndata = synthetic\nstaleness = 0\n"
			"batch_size = 16\nmax_clocks = 1000000\nexamples = 1000\ndim = 64\n");
	{
		const char *args[] = { "submit", job, NULL };

		ck_assert_int_eq(dmlctl_json(&c, args, &doc), 0);
		json_free(&doc);
	}
	wait_job_clock(&c, "1", 20);
	ck_assert_int_eq(dmlctl_json(&c, pause_args, &doc), 0);
	json_free(&doc);
	sleep_ms(500);  /* the worker stops at its next clock boundary */
	job_status(&c, "1", &doc);
	ck_assert_str_eq(jstr(&doc, "state"), "paused");
	clock = jnum(&doc, "clock");
	json_free(&doc);
	sleep_ms(600);
	job_status(&c, "1", &doc);
	ck_assert_msg(jnum(&doc, "clock") <= clock + 1, "clock moved from %g to %g while paused",
		      clock, jnum(&doc, "clock"));
	json_free(&doc);
	ck_assert_int_eq(dmlctl_json(&c, resume_args, &doc), 0);
	json_free(&doc);
	wait_job_clock(&c, "1", clock + 20);

	ck_assert_int_eq(dml_test_dmlctl(c.env, c.port, NULL, missing, &out), 0);
	ck_assert_int_eq(out.status, 1);
	ck_assert_msg(strstr(out.err, "no job 7"), "stderr: %s", out.err);
	dml_test_output_free(&out);
	{
		const char *args[] = { "stop", "1", NULL };

		ck_assert_int_eq(dmlctl_json(&c, args, &doc), 0);
		json_free(&doc);
	}
	free(job);
	cluster_down(&c);
}
END_TEST

static Suite *e2e_suite(void)
{
	Suite *s = suite_create("e2e");
	TCase *tc = tcase_create("cluster");

	tcase_set_timeout(tc, TEST_TIMEOUT_S);
	tcase_add_test(tc, test_job_survives_killed_worker);
	tcase_add_test(tc, test_server_joins_running_job);
	tcase_add_test(tc, test_pause_resume_and_errors);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return dml_check_run(e2e_suite());
}
