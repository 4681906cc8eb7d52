/*
 * check_local.c - the same-host transport (proto/local.h): with
 * local_socket = yes at both ends (the default), a client that dials a
 * server on 127.0.0.1 reaches it through the server's abstract Unix
 * socket; either end that says no keeps to TCP; the name goes with the
 * process and comes back with it; two servers' names never meet.
 */
#define _GNU_SOURCE
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "test/check_run.h"
#include "test/harness.h"
#include "proto/util.h"
#include "worker/dml.h"

#define KEYS 64
#define WAIT_MS 15000

static const char *const tables =
	"[table]\nid = 0\nkind = dense\nwidth = 1\nkeys = 64\noptimizer = add\n";

/* Is "@dml/127.0.0.1:port" among this network namespace's Unix sockets? */
static int name_listed(uint16_t port)
{
	char *text = NULL, want[64];
	int found;

	ck_assert_int_eq(dml_test_file_read("/proc/net/unix", &text), 0);
	snprintf(want, sizeof(want), " @dml/127.0.0.1:%u\n", (unsigned)port);
	found = strstr(text, want) != NULL;
	free(text);
	return found;
}

/* Wait for the server to log how worker id joined: over Unix from this
 * process (unix 1), or over TCP. */
static void wait_joined(const struct dml_test_server *s, size_t from, uint32_t id,
			int unix_socket)
{
	char want[96], other[96];
	const char *needles[] = { want, other, NULL };

	if (unix_socket) {
		snprintf(want, sizeof(want), "peer unix:pid=%ld: worker %u joined",
			 (long)getpid(), id);
		snprintf(other, sizeof(other), "peer 127.0.0.1:");
	} else {
		snprintf(want, sizeof(want), "peer 127.0.0.1:");
		snprintf(other, sizeof(other), "peer unix:");
	}
	ck_assert_int_eq(dml_test_server_log_wait(s, from, needles, WAIT_MS), 0);
}

static dml_t *client(struct dml_test_env *env, struct dml_test_server *const *srv, size_t n,
		     uint32_t id, const char *local)
{
	dml_opts_t *o;
	dml_t *d;

	ck_assert_int_eq(dml_test_client_opts(env, srv, n, id, &o), 0);
	if (local)
		ck_assert_int_eq(dml_opts_set(o, "local_socket", local), 0);
	ck_assert_int_eq(dml_connect(o, &d), 0);
	dml_opts_free(o);
	return d;
}

/* Push v to every key of table 0, then pull it back: expect. */
static void push_pull(dml_t *d, float v, float expect)
{
	float vals[KEYS], out[KEYS];
	dml_handle_t h;

	for (int i = 0; i < KEYS; i++)
		vals[i] = v;
	ck_assert_int_eq(dml_push_range(d, 0, 0, KEYS, vals, &h), 0);
	ck_assert_int_eq(dml_wait(d, h), 0);
	ck_assert_int_eq(dml_pull_range(d, 0, 0, KEYS, out, &h), 0);
	ck_assert_int_eq(dml_wait(d, h), 0);
	for (int i = 0; i < KEYS; i++)
		ck_assert_float_eq(out[i], expect);
}

/* A client dials srv (local_socket = local; NULL: its default), the server
 * logs it joined over the transport expected, and a push of v reads back as
 * expect. */
static void round_trip(struct dml_test_env *env, struct dml_test_server *srv, uint32_t id,
		       const char *local, int unix_expected, float v, float expect)
{
	size_t from = dml_test_server_log_size(srv);
	dml_t *d = client(env, &srv, 1, id, local);

	wait_joined(srv, from, id, unix_expected);
	push_pull(d, v, expect);
	dml_close(d);
}

/* The server's gauge of Unix connections, from its metrics endpoint. */
static double unix_connections(uint16_t metrics_port)
{
	double v = -1;

	ck_assert_int_eq(dml_test_metric(metrics_port, "dml_server_connections_unix", WAIT_MS,
					 &v), 0);
	return v;
}

START_TEST(test_localhost_takes_the_unix_socket)
{
	struct dml_test_server_conf conf = { .staleness = -1, .tables = tables };
	struct dml_test_server *srv;
	struct dml_test_env *env;
	uint16_t mport;
	dml_t *d;

	ck_assert_int_eq(dml_test_env_new(&env), 0);
	ck_assert_int_eq(dml_test_server_start_metered(env, &conf, "local_socket = yes\n", &srv,
						       &mport), 0);
	ck_assert(name_listed(dml_test_server_port(srv)));
	ck_assert(unix_connections(mport) == 0);

	d = client(env, &srv, 1, 1, "yes");
	wait_joined(srv, 0, 1, 1);
	push_pull(d, 1, 1);
	ck_assert(unix_connections(mport) == 1);
	dml_close(d);

	ck_assert_int_eq(dml_test_server_stop(srv, DML_TEST_STOP_TIMEOUT_MS), 0);
	ck_assert(!name_listed(dml_test_server_port(srv)));
	dml_test_env_free(env);
}
END_TEST

START_TEST(test_either_end_can_keep_to_tcp)
{
	struct dml_test_server_conf conf = { .staleness = -1, .tables = tables };
	struct dml_test_server *srv, *other;
	struct dml_test_env *env;

	ck_assert_int_eq(dml_test_env_new(&env), 0);
	/* The defaults: a name, and clients dial it. */
	ck_assert_int_eq(dml_test_server_start(env, &conf, &srv), 0);
	ck_assert(name_listed(dml_test_server_port(srv)));
	round_trip(env, srv, 1, NULL, 1, 2, 2);
	/* A client that says no dials TCP to a server that has a name. */
	round_trip(env, srv, 2, "no", 0, 3, 5);

	/* A server that says no: no name, and clients dial TCP. */
	conf.server_extra = "local_socket = no\n";
	ck_assert_int_eq(dml_test_server_start(env, &conf, &other), 0);
	ck_assert(!name_listed(dml_test_server_port(other)));
	round_trip(env, other, 3, "yes", 0, 4, 4);
	dml_test_env_free(env);
}
END_TEST

START_TEST(test_killed_server_comes_back_on_its_name)
{
	struct dml_test_server_conf conf = { .staleness = -1, .tables = tables,
					     .server_extra = "local_socket = yes\n" };
	struct dml_test_server *srv;
	struct dml_test_env *env;

	ck_assert_int_eq(dml_test_env_new(&env), 0);
	ck_assert_int_eq(dml_test_server_start(env, &conf, &srv), 0);
	ck_assert_int_eq(dml_test_server_pin_port(srv), 0);
	round_trip(env, srv, 1, "yes", 1, 1, 1);

	/* SIGKILL runs no cleanup: the kernel frees the name with the socket. */
	dml_test_server_kill(srv);
	ck_assert(!name_listed(dml_test_server_port(srv)));
	ck_assert_int_eq(dml_test_server_restart(srv), 0);
	ck_assert(name_listed(dml_test_server_port(srv)));
	/* No store: the restarted server starts from zeros. */
	round_trip(env, srv, 1, "yes", 1, 5, 5);
	dml_test_env_free(env);
}
END_TEST

START_TEST(test_two_servers_keep_their_own_names)
{
	struct dml_test_server_conf conf = { .staleness = -1, .tables = tables,
					     .shard_count = 2,
					     .server_extra = "local_socket = yes\n" };
	struct dml_test_server *srv[2];
	struct dml_test_env *env;
	dml_t *d;

	ck_assert_int_eq(dml_test_env_new(&env), 0);
	for (uint32_t i = 0; i < 2; i++) {
		conf.shard_index = i;
		ck_assert_int_eq(dml_test_server_start(env, &conf, &srv[i]), 0);
		ck_assert(name_listed(dml_test_server_port(srv[i])));
	}
	ck_assert_uint_ne(dml_test_server_port(srv[0]), dml_test_server_port(srv[1]));
	/* Each shard holds half the keys: the pull sees every push only if
	 * each part reached the server that holds it. */
	d = client(env, srv, 2, 1, "yes");
	wait_joined(srv[0], 0, 1, 1);
	wait_joined(srv[1], 0, 1, 1);
	push_pull(d, 1, 1);
	push_pull(d, 2, 3);
	dml_close(d);
	dml_test_env_free(env);
}
END_TEST

static Suite *local_suite(void)
{
	Suite *s = suite_create("local");
	TCase *tc = tcase_create("unix");

	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_localhost_takes_the_unix_socket);
	tcase_add_test(tc, test_either_end_can_keep_to_tcp);
	tcase_add_test(tc, test_killed_server_comes_back_on_its_name);
	tcase_add_test(tc, test_two_servers_keep_their_own_names);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return dml_check_run(local_suite());
}
