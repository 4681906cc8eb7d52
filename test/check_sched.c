/*
 * check_sched.c - integration tests of membership: a real dml-sched, real
 * dml-servers registering with it through the scheduler link, and dmlctl
 * run as a process, its JSON parsed by a small reader below (which also
 * proves the output is valid JSON).
 *
 * Covered: registration with shard, address, zone and profile; a server
 * with the wrong secret that is refused (and says so once); a killed
 * server turning suspect, then dead, with reasons, and alive again after a
 * restart; servers that start before the scheduler, and a scheduler that
 * restarts (links reconnect and register again, logging the loss once), or
 * a server paused until it is dead, which registers again once resumed;
 * dmlctl's table, exit codes and messages (wrong secret, nothing
 * listening, usage errors); dml-server's new options and their checks; clean
 * SIGTERM of every daemon.
 *
 * Timings are short (heartbeat 100 ms, suspect 300 ms, dead 800 ms) so the
 * suite stays quick; every wait polls up to a wide deadline.
 */
#define _GNU_SOURCE
#include <check.h>
#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <arpa/inet.h>

#include "test/check_run.h"
#include "proto/dml_error.h"
#include "test/harness.h"
#include "test/json.h"
#include "proto/util.h"

#define TEST_TIMEOUT_S 60
#define WAIT_MS 10000
#define POLL_MS 40
#define HEARTBEAT_MS 100
#define SUSPECT_MS 300
#define DEAD_MS 800

static const char *const tables = "[table]\nid = 0\nkind = dense\nkeys = 100\n";

static void sleep_ms(int ms)
{
	struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };

	while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
		;
}

START_TEST(test_json_reader)
{
	struct jval v;

	ck_assert_int_eq(json_parse("{\"a\":[1,-2.5e1,\"x\\u00e9\\n\"],\"b\":null}", &v), 0);
	ck_assert_int_eq(json_get(&v, "a")->n, 3);
	ck_assert(json_get(&v, "a")->items[1].num == -25.0);
	ck_assert_str_eq(json_get(&v, "a")->items[2].str, "x\xc3\xa9\n");
	ck_assert_int_eq(json_get(&v, "b")->type, J_NULL);
	json_free(&v);
	ck_assert_int_ne(json_parse("{\"a\":1,}", &v), 0);
	ck_assert_int_ne(json_parse("{\"a\":\"raw\ttab\"}", &v), 0);
	ck_assert_int_ne(json_parse("[01]", &v), 0);
	ck_assert_int_ne(json_parse("{} x", &v), 0);
}
END_TEST

/* ---- helpers --------------------------------------------------------------- */

/* A loopback port nobody listens on (free now; tests bind it soon after). */
static uint16_t unused_port(void)
{
	struct sockaddr_in sa = { .sin_family = AF_INET };
	socklen_t len = sizeof(sa);
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	ck_assert_int_ge(fd, 0);
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	ck_assert_int_eq(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	ck_assert_int_eq(getsockname(fd, (struct sockaddr *)&sa, &len), 0);
	close(fd);
	return ntohs(sa.sin_port);
}

static struct dml_test_server *sched_start(struct dml_test_env *env, uint16_t port)
{
	struct dml_test_sched_conf conf = {
		.port = port,
		.heartbeat_interval_ms = HEARTBEAT_MS,
		.suspect_after_ms = SUSPECT_MS,
		.dead_after_ms = DEAD_MS,
	};
	struct dml_test_server *s;

	ck_assert_msg(dml_test_sched_start(env, &conf, &s) == 0, "dml-sched did not start");
	return s;
}

/* A one-table server of shard index/count registering at sched_port. */
static struct dml_test_server *server_start(struct dml_test_env *env, uint16_t sched_port,
					    uint32_t index, uint32_t count, const char *zone)
{
	struct dml_test_server_conf conf = { 0 };
	struct dml_test_server *s;
	char extra[160];

	snprintf(extra, sizeof(extra), "scheduler = 127.0.0.1:%u\nzone = %s\n",
		 (unsigned)sched_port, zone);
	conf.shard_index = index;
	conf.shard_count = count;
	conf.tables = tables;
	conf.server_extra = extra;
	ck_assert_msg(dml_test_server_start(env, &conf, &s) == 0, "server %u did not start",
		      index + 1);
	return s;
}

static void stop_ok(struct dml_test_server *s)
{
	ck_assert_msg(dml_test_server_stop(s, DML_TEST_STOP_TIMEOUT_MS) == 0,
		      "a daemon did not stop cleanly on SIGTERM");
}

static void print_output(const char *what, const struct dml_test_output *o)
{
	fprintf(stderr, "---- %s: status %d ----\nstdout:\n%s\nstderr:\n%s\n---- end ----\n",
		what, o->status, o->out, o->err);
}

/* dmlctl --json nodes, which must succeed and print one JSON object. */
static void nodes_json(struct dml_test_env *env, uint16_t sched_port, struct jval *doc)
{
	static const char *const args[] = { "--json", "nodes", NULL };
	struct dml_test_output o;
	int rc = dml_test_dmlctl(env, sched_port, NULL, args, &o);

	if (rc != 0 || o.status != 0 || json_parse(o.out, doc) != 0 ||
	    json_get(doc, "nodes") == NULL || json_get(doc, "nodes")->type != J_ARR) {
		print_output("dmlctl --json nodes", &o);
		dml_test_output_free(&o);
		ck_abort_msg("dmlctl --json nodes failed or printed no {\"nodes\":[...]}");
	}
	dml_test_output_free(&o);
}

static const struct jval *find_node(const struct jval *doc, const char *role, uint32_t id)
{
	const struct jval *nodes = json_get(doc, "nodes");

	for (size_t i = 0; i < nodes->n; i++)
		if (strcmp(jstr(&nodes->items[i], "role"), role) == 0 &&
		    jnum(&nodes->items[i], "id") == (double)id)
			return &nodes->items[i];
	return NULL;
}

/* The states a node went through while waiting, as a bit set. */
enum { SEEN_ALIVE = 1, SEEN_SUSPECT = 2, SEEN_DEAD = 4, SEEN_MISSING = 8 };

static unsigned seen_bit(const struct jval *node)
{
	const char *st = node ? jstr(node, "state") : NULL;

	if (!st)
		return SEEN_MISSING;
	if (strcmp(st, "alive") == 0)
		return SEEN_ALIVE;
	if (strcmp(st, "suspect") == 0)
		return SEEN_SUSPECT;
	if (strcmp(st, "dead") == 0)
		return SEEN_DEAD;
	return 0;
}

/*
 * Poll dmlctl until server id is in state; *doc keeps the last listing (free
 * it), *seen (optional) the states observed on the way.
 */
static void wait_server_state(struct dml_test_env *env, uint16_t sched_port, uint32_t id,
			      const char *state, struct jval *doc, unsigned *seen)
{
	uint64_t deadline = dml_now_ns() + (uint64_t)WAIT_MS * 1000000u;
	unsigned bits = 0;

	for (;;) {
		const struct jval *n;

		nodes_json(env, sched_port, doc);
		n = find_node(doc, "server", id);
		bits |= seen_bit(n);
		if (n && strcmp(jstr(n, "state"), state) == 0)
			break;
		if (dml_now_ns() > deadline) {
			fprintf(stderr, "server %u: state '%s', reason '%s'\n", id,
				n ? jstr(n, "state") : "(not listed)", n ? jstr(n, "reason") : "");
			json_free(doc);
			ck_abort_msg("server %u did not become %s in %d ms", id, state, WAIT_MS);
		}
		json_free(doc);
		sleep_ms(POLL_MS);
	}
	if (seen)
		*seen = bits;
}

/* A registered server as dmlctl shows it: role, shard, address, zone, profile. */
static void check_server_node(const struct jval *doc, uint32_t id, uint32_t index,
			      uint32_t count, uint16_t port, const char *zone)
{
	const struct jval *n = find_node(doc, "server", id), *profile;
	char want[32];

	ck_assert_msg(n != NULL, "server %u is not listed", id);
	ck_assert_str_eq(jstr(n, "state"), "alive");
	snprintf(want, sizeof(want), "%u/%u", index, count);
	ck_assert_str_eq(jstr(n, "shard"), want);
	snprintf(want, sizeof(want), "127.0.0.1:%u", (unsigned)port);
	ck_assert_str_eq(jstr(n, "address"), want);
	ck_assert_str_eq(jstr(n, "zone"), zone);
	ck_assert_msg(strstr(jstr(n, "reason"), "registered") != NULL, "reason '%s'",
		      jstr(n, "reason"));
	ck_assert(jnum(n, "last_heartbeat_ms") >= 0);
	profile = json_get(n, "profile");
	ck_assert_str_eq(jstr(profile, "device"), "cpu");
	ck_assert(jnum(profile, "cores") >= 1);
	ck_assert(jnum(profile, "memory_bytes") > 0);
}

static int count_substr(const char *text, const char *needle)
{
	int n = 0;

	for (const char *p = text; (p = strstr(p, needle)) != NULL; p += strlen(needle))
		n++;
	return n;
}

/* ---- tests ----------------------------------------------------------------- */

START_TEST(test_servers_register_die_and_return)
{
	static const char *const table_args[] = { "nodes", NULL };
	static const char *const json_args[] = { "--json", "nodes", NULL };
	static const char *const bad_args[] = { "frobnicate", NULL };
	static const char *const refused[] = { "cannot register (authentication failed)",
						NULL };
	struct dml_test_server *sched, *srv[2], *intruder;
	struct dml_test_server_conf ic = { 0 };
	struct dml_test_output o;
	struct jval doc;
	const struct jval *n;
	struct dml_test_env *env;
	char *wrong_secret, *log, addr[32], extra[64];
	unsigned seen;
	uint16_t sp;

	ck_assert_int_eq(dml_test_env_new(&env), 0);
	ck_assert_int_eq(dml_test_env_write(env, "wrong-secret", "not the secret\n", 0600,
					    &wrong_secret), 0);
	sched = sched_start(env, 0);
	sp = dml_test_server_port(sched);
	srv[0] = server_start(env, sp, 0, 2, "rack-a");
	srv[1] = server_start(env, sp, 1, 2, "");
	/* A server with the wrong secret serves, but never gets listed. */
	snprintf(extra, sizeof(extra), "scheduler = 127.0.0.1:%u\n", (unsigned)sp);
	ic.node_id = 9;
	ic.secret_file = wrong_secret;
	ic.tables = tables;
	ic.server_extra = extra;
	ck_assert_int_eq(dml_test_server_start(env, &ic, &intruder), 0);

	/* Both registered, as they described themselves. */
	wait_server_state(env, sp, 1, "alive", &doc, NULL);
	json_free(&doc);
	wait_server_state(env, sp, 2, "alive", &doc, NULL);
	check_server_node(&doc, 1, 0, 2, dml_test_server_port(srv[0]), "rack-a");
	check_server_node(&doc, 2, 1, 2, dml_test_server_port(srv[1]), "");
	ck_assert_int_eq(json_get(&doc, "nodes")->n, 2);
	json_free(&doc);

	/* The table: a header and one row per server. */
	ck_assert_int_eq(dml_test_dmlctl(env, sp, NULL, table_args, &o), 0);
	ck_assert_msg(o.status == 0, "dmlctl nodes: status %d: %s", o.status, o.err);
	ck_assert_msg(strncmp(o.out, "ROLE", 4) == 0 && strstr(o.out, "LAST-HEARTBEAT") &&
		      strstr(o.out, "REASON"), "no table header:\n%s", o.out);
	snprintf(addr, sizeof(addr), "127.0.0.1:%u", (unsigned)dml_test_server_port(srv[1]));
	ck_assert_msg(strstr(o.out, addr) && strstr(o.out, "rack-a") &&
		      count_substr(o.out, "alive") == 2, "table:\n%s", o.out);
	ck_assert_int_eq(count_substr(o.out, "\n"), 3);
	dml_test_output_free(&o);

	/* SIGKILL: connection closed makes it suspect, silence then dead. */
	dml_test_server_kill(srv[1]);
	wait_server_state(env, sp, 2, "dead", &doc, &seen);
	ck_assert_msg(seen & SEEN_SUSPECT, "server 2 went dead without being suspect "
		      "first (seen 0x%x)", seen);
	n = find_node(&doc, "server", 2);
	ck_assert_msg(strlen(jstr(n, "reason")) > 0, "a dead node needs a reason");
	ck_assert_str_eq(jstr(find_node(&doc, "server", 1), "state"), "alive");
	json_free(&doc);

	/* Restarted: alive again, at its new port. */
	ck_assert_int_eq(dml_test_server_restart(srv[1]), 0);
	wait_server_state(env, sp, 2, "alive", &doc, NULL);
	check_server_node(&doc, 2, 1, 2, dml_test_server_port(srv[1]), "");

	/* The intruder: refused all along, and that logged by its link once. */
	ck_assert_int_eq(json_get(&doc, "nodes")->n, 2);
	ck_assert(find_node(&doc, "server", 9) == NULL);
	json_free(&doc);
	ck_assert_int_eq(dml_test_server_log_wait(intruder, 0, refused, WAIT_MS), 0);
	ck_assert_int_eq(dml_test_file_read(dml_test_server_log(intruder), &log), 0);
	ck_assert_msg(count_substr(log, refused[0]) == 1,
		      "intruder log:\n%s", log);
	free(log);
	stop_ok(intruder);

	/* A secret that is not the cluster's: exit 1, and saying so. */
	ck_assert_int_eq(dml_test_dmlctl(env, sp, wrong_secret, json_args, &o), 0);
	ck_assert_msg(o.status == 1 && strstr(o.err, "authentication failed") &&
		      o.out[0] == '\0', "wrong secret: status %d, stderr: %s", o.status, o.err);
	dml_test_output_free(&o);
	free(wrong_secret);

	/* An unknown command is a usage error, scheduler or not. */
	ck_assert_int_eq(dml_test_dmlctl(env, sp, NULL, bad_args, &o), 0);
	ck_assert_msg(o.status == 2 && strstr(o.err, "frobnicate"), "status %d: %s",
		      o.status, o.err);
	dml_test_output_free(&o);

	/* A clean stop says goodbye: dead at once, and why. */
	stop_ok(srv[0]);
	wait_server_state(env, sp, 1, "dead", &doc, NULL);
	ck_assert_str_eq(jstr(find_node(&doc, "server", 1), "reason"), "left");
	ck_assert_str_eq(jstr(find_node(&doc, "server", 2), "state"), "alive");
	json_free(&doc);
	stop_ok(srv[1]);
	stop_ok(sched);
	dml_test_env_free(env);
}
END_TEST

/*
 * A server that starts before its scheduler registers once it appears; when
 * the scheduler is killed and comes back on the same port, the server
 * registers again by itself, having logged the loss once, not per retry.
 */
START_TEST(test_link_outlives_the_scheduler)
{
	struct dml_test_server *sched, *srv;
	struct dml_test_env *env;
	struct jval doc;
	char *log, needle[96];
	uint16_t sp = unused_port();
	size_t from;

	ck_assert_int_eq(dml_test_env_new(&env), 0);
	srv = server_start(env, sp, 0, 1, "");
	sleep_ms(300);
	ck_assert(dml_test_server_alive(srv));
	sched = sched_start(env, sp);
	wait_server_state(env, sp, 1, "alive", &doc, NULL);
	check_server_node(&doc, 1, 0, 1, dml_test_server_port(srv), "");
	json_free(&doc);

	from = dml_test_server_log_size(srv);
	dml_test_server_kill(sched);
	sleep_ms(700); /* several reconnect attempts: 20, 40, 80, 160, 320 ms */
	ck_assert_int_eq(dml_test_server_restart(sched), 0);
	ck_assert_int_eq(dml_test_server_port(sched), sp);
	wait_server_state(env, sp, 1, "alive", &doc, NULL);
	check_server_node(&doc, 1, 0, 1, dml_test_server_port(srv), "");
	json_free(&doc);

	/* Registered twice in all; the outage logged once. */
	snprintf(needle, sizeof(needle), "scheduler 127.0.0.1:%u: registered", (unsigned)sp);
	{
		static const char *const reg[] = { "registered as server 1", NULL };

		ck_assert_int_eq(dml_test_server_log_wait(srv, from, reg, WAIT_MS), 0);
	}
	ck_assert_int_eq(dml_test_file_read(dml_test_server_log(srv), &log), 0);
	ck_assert_int_eq(count_substr(log, needle), 2);
	ck_assert_int_eq(count_substr(log + from, "connection lost"), 1);
	ck_assert_msg(count_substr(log + from, "cannot register") <= 1,
		      "a retry was logged again:\n%s", log + from);
	free(log);

	stop_ok(srv);
	stop_ok(sched);
	dml_test_env_free(env);
}
END_TEST

/*
 * A server paused past dead_after_ms: the scheduler declares it dead and
 * closes its connection; resumed, the server notices, reconnects and
 * registers again by itself.
 */
START_TEST(test_paused_server_registers_again)
{
	struct dml_test_server *sched, *srv;
	struct dml_test_env *env;
	struct jval doc;
	unsigned seen;
	uint16_t sp;

	ck_assert_int_eq(dml_test_env_new(&env), 0);
	sched = sched_start(env, 0);
	sp = dml_test_server_port(sched);
	srv = server_start(env, sp, 0, 1, "");
	wait_server_state(env, sp, 1, "alive", &doc, NULL);
	json_free(&doc);

	ck_assert_int_eq(dml_test_server_signal(srv, SIGSTOP), 0);
	wait_server_state(env, sp, 1, "dead", &doc, &seen);
	ck_assert_msg(seen & SEEN_SUSPECT, "dead without being suspect first");
	ck_assert_msg(strstr(jstr(find_node(&doc, "server", 1), "reason"), "no heartbeat"),
		      "reason '%s'", jstr(find_node(&doc, "server", 1), "reason"));
	json_free(&doc);

	ck_assert_int_eq(dml_test_server_signal(srv, SIGCONT), 0);
	wait_server_state(env, sp, 1, "alive", &doc, NULL);
	check_server_node(&doc, 1, 0, 1, dml_test_server_port(srv), "");
	json_free(&doc);

	stop_ok(srv);
	stop_ok(sched);
	dml_test_env_free(env);
}
END_TEST

/*
 * Regression: two live servers configured with the same node id used to
 * evict each other every couple of seconds, forever. The first keeps the id;
 * the second is refused and says so in its log.
 */
START_TEST(test_duplicate_node_id_is_refused)
{
	static const char *const refused[] = { "registration refused", NULL };
	struct dml_test_server *sched, *first, *second;
	struct dml_test_env *env;
	struct jval doc;
	uint16_t sp;

	ck_assert_int_eq(dml_test_env_new(&env), 0);
	sched = sched_start(env, 0);
	sp = dml_test_server_port(sched);
	first = server_start(env, sp, 0, 1, "");
	wait_server_state(env, sp, 1, "alive", &doc, NULL);
	json_free(&doc);
	second = server_start(env, sp, 0, 1, "");
	ck_assert_int_eq(dml_test_server_log_wait(second, 0, refused, WAIT_MS), 0);
	/* Long enough for several retries of the second one. */
	sleep_ms(3 * DEAD_MS);
	nodes_json(env, sp, &doc);
	check_server_node(&doc, 1, 0, 1, dml_test_server_port(first), "");
	ck_assert_str_eq(jstr(find_node(&doc, "server", 1), "state"), "alive");
	json_free(&doc);
	stop_ok(second);
	stop_ok(first);
	stop_ok(sched);
	dml_test_env_free(env);
}
END_TEST

START_TEST(test_dmlctl_usage_and_unreachable)
{
	static const char *const help[] = { "--help", NULL };
	static const char *const none[] = { NULL };
	static const char *const missing_job[] = { "submit", "no-such-job.conf", NULL };
	static const char *const extra[] = { "nodes", "now", NULL };
	static const char *const nodes[] = { "nodes", NULL };
	struct dml_test_env *env;
	struct dml_test_output o;
	char *bin, port_text[32];
	uint16_t port = unused_port();

	ck_assert_int_eq(dml_test_env_new(&env), 0);
	ck_assert_int_eq(dml_test_dmlctl(env, port, NULL, help, &o), 0);
	ck_assert_msg(o.status == 0 && strstr(o.out, "nodes") && strstr(o.out, "submit") &&
		      strstr(o.out, "DML_SCHEDULER") && strstr(o.out, "Exit status"),
		      "--help: %d\n%s", o.status, o.out);
	dml_test_output_free(&o);

	ck_assert_int_eq(dml_test_dmlctl(env, port, NULL, none, &o), 0);
	ck_assert_int_eq(o.status, 2);
	dml_test_output_free(&o);
	/* A job file that cannot be read is a usage error, named, before any
	 * connection is tried. */
	ck_assert_int_eq(dml_test_dmlctl(env, port, NULL, missing_job, &o), 0);
	ck_assert_msg(o.status == 2 && strstr(o.err, "no-such-job.conf"), "%d: %s", o.status,
		      o.err);
	dml_test_output_free(&o);
	ck_assert_int_eq(dml_test_dmlctl(env, port, NULL, extra, &o), 0);
	ck_assert_int_eq(o.status, 2);
	dml_test_output_free(&o);

	/* Nothing listening: exit 1, naming the address. */
	snprintf(port_text, sizeof(port_text), "127.0.0.1:%u", (unsigned)port);
	ck_assert_int_eq(dml_test_dmlctl(env, port, NULL, nodes, &o), 0);
	ck_assert_msg(o.status == 1 && strstr(o.err, port_text), "%d: %s", o.status, o.err);
	dml_test_output_free(&o);

	/* The address from the environment, when -s is not given. */
	dml_test_bin("tools/dmlctl", &bin);
	{
		char *argv[] = { bin, (char *)"--secret", (char *)dml_test_env_secret(env),
				 (char *)"nodes", NULL };

		ck_assert_int_eq(setenv("DML_SCHEDULER", port_text, 1), 0);
		ck_assert_int_eq(dml_test_run(env, argv, DML_TEST_DMLCTL_TIMEOUT_MS, &o), 0);
		ck_assert_msg(o.status == 1 && strstr(o.err, port_text) &&
			      strstr(o.err, "DML_SCHEDULER"), "%d: %s", o.status, o.err);
		dml_test_output_free(&o);
		ck_assert_int_eq(setenv("DML_SCHEDULER", "no-port", 1), 0);
		ck_assert_int_eq(dml_test_run(env, argv, DML_TEST_DMLCTL_TIMEOUT_MS, &o), 0);
		ck_assert_msg(o.status == 2, "%d: %s", o.status, o.err);
		dml_test_output_free(&o);
		unsetenv("DML_SCHEDULER");
	}
	free(bin);
	dml_test_env_free(env);
}
END_TEST

/* Run dml-server --print-config on [server] lines plus a table. */
static void server_print_config(struct dml_test_env *env, const char *server_lines,
				struct dml_test_output *o)
{
	char *text, *path, *bin;

	text = NULL;
	ck_assert_int_ne(asprintf(&text, "[server]\nnode_id = 1\nsecret_file = %s\n%s\n%s",
				  dml_test_env_secret(env), server_lines, tables), -1);
	ck_assert_int_eq(dml_test_env_write(env, "print.conf", text, 0600, &path), 0);
	dml_test_bin("server/dml-server", &bin);
	{
		char *argv[] = { bin, (char *)"-c", path, (char *)"--print-config", NULL };

		ck_assert_int_eq(dml_test_run(env, argv, DML_TEST_DMLCTL_TIMEOUT_MS, o), 0);
	}
	free(bin);
	free(path);
	free(text);
}

START_TEST(test_server_scheduler_options)
{
	struct dml_test_env *env;
	struct dml_test_output o;

	ck_assert_int_eq(dml_test_env_new(&env), 0);
	/* A wildcard listen address cannot be advertised. */
	server_print_config(env, "listen = 0.0.0.0:7001\nscheduler = 127.0.0.1:7000\n", &o);
	ck_assert_msg(o.status == 2 && strstr(o.err, "advertise"), "%d: %s", o.status, o.err);
	dml_test_output_free(&o);

	server_print_config(env, "listen = 0.0.0.0:7001\nscheduler = 10.0.0.1:7000\n"
			    "advertise = 10.0.0.5:7001\nzone = eu-west.rack-3\n", &o);
	ck_assert_msg(o.status == 0 && strstr(o.out, "advertise = 10.0.0.5:7001") &&
		      strstr(o.out, "zone = eu-west.rack-3") &&
		      strstr(o.out, "scheduler = 10.0.0.1:7000"), "%d: %s%s", o.status, o.out,
		      o.err);
	dml_test_output_free(&o);

	server_print_config(env, "scheduler = 127.0.0.1\n", &o);
	ck_assert_msg(o.status == 2 && strstr(o.err, "scheduler"), "%d: %s", o.status, o.err);
	dml_test_output_free(&o);
	server_print_config(env, "zone = rack 1/2\n", &o);
	ck_assert_msg(o.status == 2 && strstr(o.err, "zone"), "%d: %s", o.status, o.err);
	dml_test_output_free(&o);
	dml_test_env_free(env);
}
END_TEST

static Suite *sched_suite(void)
{
	Suite *s = suite_create("sched");
	TCase *tc = tcase_create("membership");

	tcase_set_timeout(tc, TEST_TIMEOUT_S);
	tcase_add_test(tc, test_json_reader);
	tcase_add_test(tc, test_dmlctl_usage_and_unreachable);
	tcase_add_test(tc, test_server_scheduler_options);
	tcase_add_test(tc, test_servers_register_die_and_return);
	tcase_add_test(tc, test_link_outlives_the_scheduler);
	tcase_add_test(tc, test_paused_server_registers_again);
	tcase_add_test(tc, test_duplicate_node_id_is_refused);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return dml_check_run(sched_suite());
}
