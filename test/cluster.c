/*
 * cluster.c - a whole cluster for end-to-end tests (see cluster.h): the
 * daemons and workers started through harness.h, dmlctl --json answers
 * parsed with json.h, and the suite that runs such tests.
 *
 * Must never decide a test's outcome by itself beyond asserting that the
 * cluster it was asked for came up and went down cleanly.
 */
#define _GNU_SOURCE /* asprintf */
#include <check.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>

#include "test/check_run.h"
#include "test/cluster.h"
#include "proto/util.h"

void cluster_sleep_ms(int ms)
{
	struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };

	while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
		;
}

/* text with @DIR@ and @NODE@ filled in (malloc'ed; NULL for NULL). */
static char *conf_fill(const char *text, const char *dir, uint32_t node)
{
	char *out = NULL;
	size_t len = 0;
	FILE *f;

	if (!text)
		return NULL;
	f = open_memstream(&out, &len);
	ck_assert_ptr_nonnull(f);
	for (const char *p = text; *p; ) {
		if (strncmp(p, "@DIR@", 5) == 0) {
			fputs(dir, f);
			p += 5;
		} else if (strncmp(p, "@NODE@", 6) == 0) {
			fprintf(f, "%u", node);
			p += 6;
		} else {
			fputc(*p++, f);
		}
	}
	ck_assert_int_eq(fclose(f), 0);
	return out;
}

void cluster_add_server(struct cluster *c)
{
	struct dml_test_server_conf sc = { 0 };
	char *line, *extra;

	ck_assert_uint_lt(c->nservers, CLUSTER_MAX_SERVERS);
	line = dml_test_scheduler_line(c->sched);
	if (c->zones.servers) {
		char *both;

		ck_assert_int_gt(asprintf(&both, "%szone = %s\n", line, c->zones.servers), 0);
		free(line);
		line = both;
	}
	sc.node_id = (uint32_t)c->nservers + 1;
	sc.server_extra = line;
	extra = conf_fill(c->server_conf, dml_test_env_dir(c->env), sc.node_id);
	sc.extra = extra;
	ck_assert_int_eq(dml_test_server_start(c->env, &sc, &c->servers[c->nservers]), 0);
	c->nservers++;
	free(extra);
	free(line);
}

void cluster_start_worker(struct cluster *c, uint32_t id)
{
	char name[32], *path, *bin, *text;

	ck_assert(id >= 1 && id <= CLUSTER_MAX_WORKERS);
	ck_assert_int_gt(asprintf(&text,
				  "[worker]\nnode_id = %u\nscheduler = 127.0.0.1:%u\n"
				  "secret_file = %s\nlog_level = info\nthreads = 1\n%s%s%s",
				  id, c->port, dml_test_env_secret(c->env),
				  c->zones.workers[id] ? "zone = " : "",
				  c->zones.workers[id] ? c->zones.workers[id] : "",
				  c->zones.workers[id] ? "\n" : ""), 0);
	snprintf(name, sizeof(name), "worker-%u.conf", id);
	ck_assert_int_eq(dml_test_env_write(c->env, name, text, 0644, &path), 0);
	dml_test_bin("worker/dml-worker", &bin);
	{
		char *argv[] = { bin, (char *)"-c", path, NULL };

		snprintf(name, sizeof(name), "worker-%u.log", id);
		ck_assert_int_eq(dml_test_proc_spawn(c->env, argv, name, &c->workers[id]),
				 0);
	}
	free(bin);
	free(path);
	free(text);
}

int cluster_dmlctl_json(struct cluster *c, const char *const *args, struct jval *doc)
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
		fprintf(stderr, "dmlctl --json %s: status %d\nstdout: %s\nstderr: %s\n",
			argv[1], out.status, out.out, out.err);
	dml_test_output_free(&out);
	return rc;
}

const struct jval *cluster_node(const struct jval *doc, const char *role, uint32_t id)
{
	const struct jval *nodes = json_get(doc, "nodes");

	for (size_t i = 0; nodes && i < nodes->n; i++)
		if (strcmp(jstr(&nodes->items[i], "role"), role) == 0 &&
		    jnum(&nodes->items[i], "id") == id)
			return &nodes->items[i];
	return NULL;
}

const struct jval *cluster_job_worker(const struct jval *job, uint32_t id)
{
	const struct jval *ws = json_get(job, "workers");

	for (size_t i = 0; ws && i < ws->n; i++)
		if (jnum(&ws->items[i], "worker") == id)
			return &ws->items[i];
	return NULL;
}

void cluster_wait_workers(struct cluster *c, uint32_t n)
{
	static const char *const args[] = { "nodes", NULL };

	for (int waited = 0; waited < CLUSTER_WAIT_MS; waited += CLUSTER_POLL_MS) {
		struct jval doc;
		uint32_t alive = 0;

		if (cluster_dmlctl_json(c, args, &doc) == 0) {
			for (uint32_t id = 1; id <= n; id++) {
				const struct jval *e = cluster_node(&doc, "worker", id);

				alive += e && strcmp(jstr(e, "state"), "alive") == 0;
			}
			json_free(&doc);
		}
		if (alive == n)
			return;
		cluster_sleep_ms(CLUSTER_POLL_MS);
	}
	ck_abort_msg("workers did not all register");
}

static void cluster_up_with(struct cluster *c, size_t nservers, uint32_t nworkers,
			    const char *server_conf, const struct cluster_zones *zones)
{
	struct dml_test_sched_conf sc = { 0 };
	char *store;

	memset(c, 0, sizeof(*c));
	c->server_conf = server_conf;
	if (zones)
		c->zones = *zones;
	ck_assert_int_eq(dml_test_env_new(&c->env), 0);
	sc.heartbeat_interval_ms = 100;
	sc.suspect_after_ms = 400;
	sc.dead_after_ms = 1000;
	store = conf_fill("[store]\npath = @DIR@/sched-store\n", dml_test_env_dir(c->env), 0);
	sc.extra = store;
	ck_assert_int_eq(dml_test_sched_start(c->env, &sc, &c->sched), 0);
	free(store);
	/* A restarted scheduler is found where the nodes look for it. */
	ck_assert_int_eq(dml_test_server_pin_port(c->sched), 0);
	c->port = dml_test_server_port(c->sched);
	while (c->nservers < nservers)
		cluster_add_server(c);
	for (uint32_t id = 1; id <= nworkers; id++)
		cluster_start_worker(c, id);
	cluster_wait_workers(c, nworkers);
}

void cluster_up(struct cluster *c, size_t nservers, uint32_t nworkers)
{
	cluster_up_conf(c, nservers, nworkers, NULL);
}

void cluster_up_conf(struct cluster *c, size_t nservers, uint32_t nworkers,
		     const char *server_conf)
{
	cluster_up_with(c, nservers, nworkers, server_conf, NULL);
}

void cluster_up_zones(struct cluster *c, size_t nservers, uint32_t nworkers,
		      const struct cluster_zones *zones)
{
	cluster_up_with(c, nservers, nworkers, NULL, zones);
}

void cluster_stop(struct cluster *c)
{
	for (uint32_t id = 1; id <= CLUSTER_MAX_WORKERS; id++) {
		pid_t pid = c->workers[id];
		int status;

		if (!pid)
			continue;
		kill(pid, SIGTERM);
		ck_assert_int_eq(dml_test_proc_wait(c->env, pid, 15000, &status), 0);
		ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0,
			      "worker %u exited with status %d", id, status);
	}
	for (size_t i = 0; i < c->nservers; i++)
		ck_assert_int_eq(dml_test_server_stop(c->servers[i],
						      DML_TEST_STOP_TIMEOUT_MS), 0);
	ck_assert_int_eq(dml_test_server_stop(c->sched, DML_TEST_STOP_TIMEOUT_MS), 0);
}

void cluster_free(struct cluster *c)
{
	dml_test_env_free(c->env);
}

void cluster_down(struct cluster *c)
{
	cluster_stop(c);
	cluster_free(c);
}

pid_t cluster_submit_wait(struct cluster *c, const char *path)
{
	char *bin, port[32];
	pid_t pid;

	dml_test_bin("tools/dmlctl", &bin);
	snprintf(port, sizeof(port), "127.0.0.1:%u", c->port);
	{
		char *argv[] = { bin, (char *)"-s", port, (char *)"--secret",
				 (char *)dml_test_env_secret(c->env), (char *)"submit",
				 (char *)path, (char *)"--wait", NULL };

		ck_assert_int_eq(dml_test_proc_spawn(c->env, argv, "submit.log", &pid),
				 0);
	}
	free(bin);
	return pid;
}

int cluster_suite_run(const char *name, const TTest *const *tests, size_t n)
{
	Suite *s = suite_create(name);
	TCase *tc = tcase_create("cluster");

	const char *only = getenv("DML_TEST_ONLY");

	tcase_set_timeout(tc, CLUSTER_TEST_TIMEOUT_S);
	for (size_t i = 0; i < n; i++)
		if (!only || strcmp(only, tests[i]->name) == 0)
			tcase_add_test(tc, tests[i]);
	suite_add_tcase(s, tc);
	return dml_check_run(s);
}

/* `dmlctl --json status JOB` into doc; the job object is doc itself. */
void cluster_job_status(struct cluster *c, const char *job, struct jval *doc)
{
	const char *args[] = { "status", job, NULL };

	ck_assert_int_eq(cluster_dmlctl_json(c, args, doc), 0);
}

/* Poll the job until its clock reaches at least clock (or it ended). */
void cluster_wait_job_clock(struct cluster *c, const char *job, double clock)
{
	for (int waited = 0; waited < CLUSTER_WAIT_MS; waited += CLUSTER_POLL_MS) {
		const char *args[] = { "status", job, NULL };
		struct jval doc;
		double now;
		const char *state;

		/* A `submit --wait` started in the background may not have
		 * submitted yet: "no job" is retried like a low clock. */
		if (cluster_dmlctl_json(c, args, &doc) != 0) {
			cluster_sleep_ms(CLUSTER_POLL_MS);
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
		cluster_sleep_ms(CLUSTER_POLL_MS);
	}
	ck_abort_msg("job did not reach its clock in time");
}

char *cluster_write_lsq_job(struct cluster *c, const char *name, const char *job_section)
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

uint32_t cluster_submit(struct cluster *c, const char *path)
{
	const char *args[] = { "submit", path, NULL };
	struct jval doc;
	double id;

	ck_assert_int_eq(cluster_dmlctl_json(c, args, &doc), 0);
	id = jnum(&doc, "job");
	json_free(&doc);
	ck_assert(id >= 1);
	return (uint32_t)id;
}
