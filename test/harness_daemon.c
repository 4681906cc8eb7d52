/*
 * harness_daemon.c - the daemons of the loopback cluster harness (see
 * harness.h): dml-server configs, starting, stopping and restarting
 * dml-server and dml-sched, waiting on their logs, and running dmlctl and
 * other programs with their output captured. Never asserts: it reports
 * through return codes and prints logs on failure.
 */
#define _GNU_SOURCE
#include "test/harness.h"
#include "test/harness_internal.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "proto/frame.h"
#include "proto/util.h"

static uint32_t conf_node_id(const struct dml_test_server_conf *conf)
{
	return conf->node_id ? conf->node_id : 1 + conf->shard_index;
}

void dml_test_server_conf_text(struct dml_test_env *env,
			       const struct dml_test_server_conf *conf, char **text,
			       char **port_file)
{
	unsigned k = env->seq++;
	char *port_path = harness_str_printf("%s/server-%u.port", env->dir, k);
	uint32_t count = conf->shard_count ? conf->shard_count : 1;
	char dead_after[48] = "";

	if (conf->dead_after_ms)
		snprintf(dead_after, sizeof(dead_after), "dead_after_ms = %u\n",
			 conf->dead_after_ms);

	*text = harness_str_printf(
		"# written by the test harness\n"
		"[server]\n"
		"listen = 127.0.0.1:0\n"
		"port_file = %s\n"
		"node_id = %u\n"
		"cluster = %s\n"
		"secret_file = %s\n"
		"shard = %u/%u\n"
		"log_level = %s\n"
		"%s"
		"\n[job]\n"
		"staleness = %lld\n"
		"workers = %u\n"
		"%s%s"
		"\n%s\n%s",
		port_path, conf_node_id(conf), conf->cluster ? conf->cluster : "dml",
		conf->secret_file ? conf->secret_file : env->secret, conf->shard_index,
		count, conf->log_level ? conf->log_level : "info",
		conf->server_extra ? conf->server_extra : "", (long long)conf->staleness,
		conf->workers, dead_after, conf->job_extra ? conf->job_extra : "",
		conf->tables ? conf->tables : "", conf->extra ? conf->extra : "");
	if (port_file)
		*port_file = port_path;
	else
		free(port_path);
}

/* The port, once the server wrote its port file completely. */
int harness_read_port(const char *path, uint16_t *port)
{
	char *text, *nl;
	uint64_t v;
	int rc;

	if (dml_test_file_read(path, &text) != 0)
		return DML_EIO;
	nl = strchr(text, '\n');
	rc = DML_EINVAL;
	if (nl) {
		*nl = '\0';
		rc = dml_parse_u64(text, 1, 65535, &v);
		if (rc == 0)
			*port = (uint16_t)v;
	}
	free(text);
	return rc;
}

static int server_wait_ready(struct dml_test_server *s, int timeout_ms)
{
	uint64_t deadline = harness_deadline_after(timeout_ms);
	char why[64];
	int st;

	for (;;) {
		if (harness_read_port(s->port_path, &s->port) == 0)
			return 0;
		if (harness_reap_within(s->pid, 0, &st)) {
			s->running = 0;
			harness_procs_forget(s->env, s->pid);
			harness_describe_status(st, why, sizeof(why));
			fprintf(stderr,
				"harness: %s node %u ended before listening (%s)\n",
				s->kind, s->node_id, why);
			dml_test_server_print_log(s);
			return DML_EIO;
		}
		if (harness_ms_left(deadline) == 0) {
			fprintf(stderr,
				"harness: %s node %u wrote no port file in %d ms\n",
				s->kind, s->node_id, timeout_ms);
			dml_test_server_print_log(s);
			dml_test_server_kill(s);
			return DML_ETIMEDOUT;
		}
		harness_sleep_ms(POLL_STEP_MS);
	}
}

/* Run the daemon on its config (its log appended to) and wait for its port. */
static int daemon_launch(struct dml_test_server *s)
{
	char *argv[4], *bin;
	int rc;

	dml_test_bin(s->bin, &bin);
	argv[0] = bin;
	argv[1] = (char *)"-c";
	argv[2] = s->conf_path;
	argv[3] = NULL;
	rc = harness_spawn_to(s->env, argv, s->log_path, s->log_path, &s->pid);
	free(bin);
	if (rc)
		return rc;
	s->running = 1;
	return server_wait_ready(s, DML_TEST_START_TIMEOUT_MS);
}

/*
 * Start a daemon of the given kind on config text whose port file is
 * port_path (taken over). Files are named "<prefix>-<k>.conf" and ".log".
 */
static int daemon_start(struct dml_test_env *env, const char *kind, const char *bin,
			const char *prefix, unsigned k, uint32_t node_id, char *text,
			char *port_path, struct dml_test_server **out)
{
	struct dml_test_server *s = dml_xcalloc(1, sizeof(*s));
	int rc;

	*out = NULL;
	s->env = env;
	s->kind = kind;
	s->bin = bin;
	s->node_id = node_id;
	s->port_path = port_path;
	s->conf_path = harness_str_printf("%s/%s-%u.conf", env->dir, prefix, k);
	s->log_path = harness_str_printf("%s/%s-%u.log", env->dir, prefix, k);
	/* Owned by the environment from here on, whatever happens next. */
	s->next = env->servers;
	env->servers = s;

	rc = harness_write_file(s->conf_path, text, 0600);
	if (rc == 0)
		rc = daemon_launch(s);
	if (rc)
		return rc;
	*out = s;
	return 0;
}

int dml_test_server_start(struct dml_test_env *env,
			  const struct dml_test_server_conf *conf,
			  struct dml_test_server **out)
{
	unsigned k = env->seq; /* conf_text numbers the port file with it */
	char *text, *port_path;
	int rc;

	dml_test_server_conf_text(env, conf, &text, &port_path);
	rc = daemon_start(env, "server", "server/dml-server", "server", k,
			  conf_node_id(conf), text, port_path, out);
	free(text);
	return rc;
}

int dml_test_server_start_metered(struct dml_test_env *env,
				  const struct dml_test_server_conf *conf, const char *extra,
				  struct dml_test_server **out, uint16_t *metrics_port)
{
	struct dml_test_server_conf c = *conf;
	char *port_file = harness_str_printf("%s/metrics-%u.port", env->dir, env->seq);
	char *text = harness_str_printf("%smetrics_listen = 127.0.0.1:0\nmetrics_port_file = %s\n",
					extra ? extra : "", port_file);
	int rc;

	c.server_extra = text;
	rc = dml_test_server_start(env, &c, out);
	if (rc == 0)
		rc = dml_test_port_file_read(port_file, metrics_port);
	free(text);
	free(port_file);
	return rc;
}

uint16_t dml_test_server_port(const struct dml_test_server *s)
{
	return s->port;
}

const char *dml_test_server_log(const struct dml_test_server *s)
{
	return s->log_path;
}

pid_t dml_test_server_pid(const struct dml_test_server *s)
{
	return s->running ? s->pid : 0;
}

int dml_test_server_alive(struct dml_test_server *s)
{
	int st;

	if (s->running && harness_reap_within(s->pid, 0, &st)) {
		s->running = 0;
		harness_procs_forget(s->env, s->pid);
	}
	return s->running;
}

void dml_test_server_print_log(const struct dml_test_server *s)
{
	char title[64];

	snprintf(title, sizeof(title), "log of %s node %u", s->kind, s->node_id);
	harness_print_file_tail(title, s->log_path);
}

int dml_test_server_stop(struct dml_test_server *s, int timeout_ms)
{
	char why[64];
	int st = 0;

	if (!s->running) {
		fprintf(stderr, "harness: %s node %u was not running\n", s->kind, s->node_id);
		return DML_EIO;
	}
	kill(s->pid, SIGTERM);
	if (!harness_reap_within(s->pid, timeout_ms, &st)) {
		fprintf(stderr, "harness: %s node %u ignored SIGTERM for %d ms\n",
			s->kind, s->node_id, timeout_ms);
		dml_test_server_print_log(s);
		dml_test_server_kill(s);
		return DML_ETIMEDOUT;
	}
	s->running = 0;
	harness_procs_forget(s->env, s->pid);
	if (WIFEXITED(st) && WEXITSTATUS(st) == 0)
		return 0;
	harness_describe_status(st, why, sizeof(why));
	fprintf(stderr, "harness: %s node %u stopped with %s\n", s->kind, s->node_id, why);
	dml_test_server_print_log(s);
	return DML_EIO;
}

void dml_test_server_kill(struct dml_test_server *s)
{
	if (!s->running)
		return;
	harness_kill_and_reap(s->pid);
	s->running = 0;
	harness_procs_forget(s->env, s->pid);
}

size_t dml_test_server_log_size(const struct dml_test_server *s)
{
	struct stat st;

	return stat(s->log_path, &st) == 0 ? (size_t)st.st_size : 0;
}

int dml_test_server_log_wait(const struct dml_test_server *s, size_t from,
			     const char *const *needles, int timeout_ms)
{
	uint64_t deadline = harness_deadline_after(timeout_ms);
	char *text;
	size_t i;

	for (;;) {
		if (dml_test_file_read(s->log_path, &text) == 0) {
			const char *part = strlen(text) >= from ? text + from : "";

			for (i = 0; needles[i]; i++) {
				if (strstr(part, needles[i])) {
					free(text);
					return (int)i;
				}
			}
			free(text);
		}
		if (harness_ms_left(deadline) == 0)
			break;
		harness_sleep_ms(20);
	}
	fprintf(stderr, "harness: %s node %u logged none of:", s->kind, s->node_id);
	for (i = 0; needles[i]; i++)
		fprintf(stderr, " \"%s\"", needles[i]);
	fprintf(stderr, "\n");
	dml_test_server_print_log(s);
	return -1;
}

/* ---- dml-sched, restarts and dmlctl --------------------------------------- */

int dml_test_sched_start(struct dml_test_env *env, const struct dml_test_sched_conf *conf,
			 struct dml_test_server **out)
{
	unsigned k = env->seq++;
	char *port_path = harness_str_printf("%s/sched-%u.port", env->dir, k);
	char timing[160] = "";
	size_t n = 0;
	char *text;
	int rc;

	/* Zero keeps the scheduler's own default. */
	if (conf->heartbeat_interval_ms)
		n += (size_t)snprintf(timing + n, sizeof(timing) - n,
				      "heartbeat_interval_ms = %u\n", conf->heartbeat_interval_ms);
	if (conf->suspect_after_ms)
		n += (size_t)snprintf(timing + n, sizeof(timing) - n,
				      "suspect_after_ms = %u\n", conf->suspect_after_ms);
	if (conf->dead_after_ms)
		snprintf(timing + n, sizeof(timing) - n, "dead_after_ms = %u\n",
			 conf->dead_after_ms);
	text = harness_str_printf("# written by the test harness\n"
			  "[sched]\n"
			  "listen = 127.0.0.1:%u\n"
			  "port_file = %s\n"
			  "cluster = dml\n"
			  "secret_file = %s\n"
			  "log_level = %s\n"
			  "%s"
			  "\n%s",
			  (unsigned)conf->port, port_path,
			  conf->secret_file ? conf->secret_file : env->secret,
			  conf->log_level ? conf->log_level : "info", timing,
			  conf->extra ? conf->extra : "");
	rc = daemon_start(env, "scheduler", "sched/dml-sched", "sched", k, 1, text, port_path,
			  out);
	free(text);
	return rc;
}

int dml_test_aggregator_start(struct dml_test_env *env, const struct dml_test_agg_conf *conf,
			      struct dml_test_server **out)
{
	unsigned k = env->seq++;
	char *port_path = harness_str_printf("%s/aggregator-%u.port", env->dir, k);
	uint32_t id = conf->node_id ? conf->node_id : 1;
	char *text;
	int rc;

	text = harness_str_printf("# written by the test harness\n"
				  "[aggregator]\n"
				  "listen = 127.0.0.1:0\n"
				  "port_file = %s\n"
				  "node_id = %u\n"
				  "servers = %s\n"
				  "cluster = dml\n"
				  "secret_file = %s\n"
				  "log_level = %s\n"
				  "%s"
				  "\n%s",
				  port_path, id, conf->servers, env->secret,
				  conf->log_level ? conf->log_level : "info",
				  conf->agg_extra ? conf->agg_extra : "",
				  conf->extra ? conf->extra : "");
	rc = daemon_start(env, "aggregator", "server/dml-aggregator", "aggregator", k, id,
			  text, port_path, out);
	free(text);
	return rc;
}

int dml_test_server_restart(struct dml_test_server *s)
{
	if (dml_test_server_alive(s)) {
		fprintf(stderr, "harness: %s node %u is still running\n", s->kind, s->node_id);
		return DML_EIO;
	}
	/* The old port file would make the new process look ready at once. */
	if (unlink(s->port_path) != 0 && errno != ENOENT) {
		fprintf(stderr, "harness: unlink %s: %s\n", s->port_path, strerror(errno));
		return DML_EIO;
	}
	return daemon_launch(s);
}

int dml_test_server_pin_port(struct dml_test_server *s)
{
	static const char from[] = "listen = 127.0.0.1:0\n";
	char *text, *at, *out;
	FILE *f;
	int rc = DML_EIO;

	if (dml_test_file_read(s->conf_path, &text) != 0)
		return DML_EIO;
	if ((at = strstr(text, from)) != NULL) {
		*at = '\0';
		out = harness_str_printf("%slisten = 127.0.0.1:%u\n%s", text, (unsigned)s->port,
				 at + strlen(from));
		if ((f = fopen(s->conf_path, "w")) != NULL) {
			if (fputs(out, f) >= 0)
				rc = 0;
			if (fclose(f) != 0)
				rc = DML_EIO;
		}
		free(out);
	}
	if (rc)
		fprintf(stderr, "harness: cannot pin the port of %s node %u in %s\n", s->kind,
			s->node_id, s->conf_path);
	free(text);
	return rc;
}

int dml_test_server_signal(struct dml_test_server *s, int sig)
{
	if (!s->running || kill(s->pid, sig) != 0) {
		fprintf(stderr, "harness: %s node %u: cannot send signal %d\n", s->kind,
			s->node_id, sig);
		return DML_EIO;
	}
	return 0;
}

char *dml_test_scheduler_line(const struct dml_test_server *sched)
{
	return harness_str_printf("scheduler = 127.0.0.1:%u\n", (unsigned)sched->port);
}

int dml_test_run(struct dml_test_env *env, char *const argv[], int timeout_ms,
		 struct dml_test_output *res)
{
	unsigned k = env->seq++;
	char *out_path = harness_str_printf("%s/run-%u.stdout", env->dir, k);
	char *err_path = harness_str_printf("%s/run-%u.stderr", env->dir, k);
	pid_t pid;
	int st = 0, rc;

	memset(res, 0, sizeof(*res));
	res->status = -1;
	rc = harness_spawn_to(env, argv, out_path, err_path, &pid);
	if (rc == 0)
		rc = dml_test_proc_wait(env, pid, timeout_ms, &st);
	if (rc == 0 && WIFEXITED(st))
		res->status = WEXITSTATUS(st);
	/* A program that printed nothing never created its files. */
	if (dml_test_file_read(out_path, &res->out) != 0)
		res->out = dml_xstrdup("");
	if (dml_test_file_read(err_path, &res->err) != 0)
		res->err = dml_xstrdup("");
	unlink(out_path);
	unlink(err_path);
	free(out_path);
	free(err_path);
	return rc;
}

void dml_test_output_free(struct dml_test_output *res)
{
	free(res->out);
	free(res->err);
	res->out = res->err = NULL;
}

int dml_test_dmlctl(struct dml_test_env *env, uint16_t sched_port, const char *secret_file,
		    const char *const *args, struct dml_test_output *res)
{
	size_t nargs = 0, i = 0;
	char **argv, *bin, *addr = harness_str_printf("127.0.0.1:%u", (unsigned)sched_port);
	int rc;

	while (args && args[nargs])
		nargs++;
	argv = dml_xcalloc(nargs + 6, sizeof(*argv));
	dml_test_bin("tools/dmlctl", &bin);
	argv[i++] = bin;
	argv[i++] = (char *)"-s";
	argv[i++] = addr;
	argv[i++] = (char *)"--secret";
	argv[i++] = (char *)(secret_file ? secret_file : env->secret);
	for (size_t j = 0; j < nargs; j++)
		argv[i++] = (char *)args[j];
	rc = dml_test_run(env, argv, DML_TEST_DMLCTL_TIMEOUT_MS, res);
	free(argv);
	free(bin);
	free(addr);
	return rc;
}
