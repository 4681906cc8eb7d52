/*
 * check_follow_sched.c - check_follow's tests of a scheduler that is not
 * there, has no map, refuses us, or sends maps that fail the checks, and
 * of the options.
 */
#define _GNU_SOURCE
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "test/check_follow.h"
#include "test/check_run.h"
#include "test/fake_sched.h"
#include "test/harness.h"
#include "proto/log.h"
#include "proto/util.h"

/* ---- the scheduler missing, refusing, or wrong ------------------------------ */

/* dml_connect with stderr (the log) captured; returns the code, *log malloc'ed. */
static int connect_logged(struct follow *f, dml_opts_t *o, char **log, uint64_t *ms)
{
	char *path;
	int saved = dup(2), fd, rc;
	uint64_t t0 = dml_now_ns();
	dml_t *d = NULL;

	ck_assert_int_eq(dml_test_env_write(f->env, "connect.log", "", 0600, &path), 0);
	fd = open(path, O_WRONLY | O_TRUNC);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_ge(saved, 0);
	fflush(stderr);
	dup2(fd, 2);
	rc = dml_connect(o, &d);
	fflush(stderr);
	dup2(saved, 2);
	close(saved);
	close(fd);
	*ms = elapsed_ms(t0);
	dml_opts_free(o);
	ck_assert_ptr_null(d);
	ck_assert_int_eq(dml_test_file_read(path, log), 0);
	free(path);
	return rc;
}

/* A port nothing listens on (bound, read, closed). */
static uint16_t dead_port(void)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(0x7f000001) };
	socklen_t len = sizeof(a);
	int fd = socket(AF_INET, SOCK_STREAM, 0);

	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
	ck_assert_int_eq(getsockname(fd, (struct sockaddr *)&a, &len), 0);
	close(fd);
	return ntohs(a.sin_port);
}

/* (e) No scheduler: DML_ECONN (or DML_ETIMEDOUT) in time, and a clear reason. */
START_TEST(test_no_scheduler_fails_connect_clearly)
{
	struct follow f;
	uint16_t port = dead_port();
	char want[64], *log;
	uint64_t ms;
	dml_opts_t *o;
	int rc;

	memset(&f, 0, sizeof(f));
	ck_assert_int_eq(dml_test_env_new(&f.env), 0);
	o = opts_for(&f, port);
	ck_assert_int_eq(dml_opts_set(o, "connect_timeout_ms", "500"), 0);
	rc = connect_logged(&f, o, &log, &ms);
	ck_assert_msg(rc == DML_ECONN || rc == DML_ETIMEDOUT, "got %s", dml_strerror(rc));
	ck_assert_msg(ms >= 450 && ms < 5000, "gave up after %llu ms", (unsigned long long)ms);
	snprintf(want, sizeof(want), "scheduler 127.0.0.1:%u", port);
	ck_assert_msg(strstr(log, want) && strstr(log, "could not connect"), "log: %s", log);
	free(log);
	dml_test_env_free(f.env);
}
END_TEST

/* A scheduler without a map: asked again until connect_timeout_ms, then its reason. */
START_TEST(test_scheduler_without_map_fails_connect)
{
	struct follow f;
	char *log;
	uint64_t ms;
	dml_opts_t *o;
	int rc;

	follow_start(&f, -1, 0);
	o = opts_for(&f, dml_fake_sched_port(f.fake));
	ck_assert_int_eq(dml_opts_set(o, "connect_timeout_ms", "600"), 0);
	rc = connect_logged(&f, o, &log, &ms);
	ck_assert_msg(rc == DML_ENOTFOUND, "got %s", dml_strerror(rc));
	ck_assert_msg(strstr(log, "no shard map yet"), "log: %s", log);
	ck_assert_msg(ms >= 550 && ms < 5000, "gave up after %llu ms", (unsigned long long)ms);
	ck_assert_uint_ge(dml_fake_sched_map_requests(f.fake), 3);
	free(log);
	/* A map that turns up while dml_connect waits is taken. */
	o = opts_for(&f, dml_fake_sched_port(f.fake));
	serve_right(&f, 4);
	{
		dml_t *d = connect_ok(&f, o);

		ck_assert_uint_eq(map_version(d), 4);
		dml_close(d);
	}
	follow_stop(&f);
}
END_TEST

/* A scheduler with another secret: DML_EAUTH at once, not after the timeout. */
START_TEST(test_scheduler_refusing_us_fails_connect_at_once)
{
	struct dml_fake_sched *other;
	struct follow f;
	char *path, *log;
	uint64_t ms;
	int rc;

	follow_start(&f, -1, 0);
	ck_assert_int_eq(dml_test_env_write(f.env, "other.secret",
					    "another secret of enough length\n", 0600, &path),
			 0);
	ck_assert_int_eq(dml_fake_sched_start(path, &other), 0);
	rc = connect_logged(&f, opts_for(&f, dml_fake_sched_port(other)), &log, &ms);
	ck_assert_msg(rc == DML_EAUTH, "got %s", dml_strerror(rc));
	ck_assert_msg(ms < 5000, "took %llu ms", (unsigned long long)ms);
	ck_assert_msg(strstr(log, "refused"), "log: %s", log);
	free(log);
	free(path);
	dml_fake_sched_stop(other);
	follow_stop(&f);
}
END_TEST

/* Maps that fail the checks: DML_ECONF with the reason, at once. */
START_TEST(test_bad_maps_are_refused)
{
	struct bad {
		const char *why;
		int kind;
	} cases[] = {
		{ "gap", 0 }, { "overlap", 1 }, { "not listed", 2 }, { "no range", 3 },
		{ "no such table", 4 }, { "version 0", 5 }, { "listed twice", 6 },
		{ "not host:port", 7 },
	};
	struct follow f;

	follow_start(&f, -1, 0);
	for (size_t i = 0; i < DML_ARRAY_LEN(cases); i++) {
		struct mapbuf b;
		char *log;
		uint64_t ms;
		int rc;

		map_init(&b, cases[i].kind == 5 ? 0 : 1);
		map_server(&b, &f, SRV_A);
		map_server(&b, &f, SRV_B);
		map_range(&b, 0, 0, DENSE_KEYS / 2, SRV_A);
		map_range(&b, 1, 0, 2 * HASH_HALF, SRV_B);
		switch (cases[i].kind) {
		case 0:
			map_range(&b, 0, DENSE_KEYS / 2 + 1, DENSE_KEYS, SRV_B);
			break;
		case 1:
			map_range(&b, 0, DENSE_KEYS / 2 - 1, DENSE_KEYS, SRV_B);
			break;
		case 2:
			map_range(&b, 0, DENSE_KEYS / 2, DENSE_KEYS, SRV_C);
			break;
		case 3:
			b.map.n_ranges = 1;      /* table 1 left out */
			map_range(&b, 0, DENSE_KEYS / 2, DENSE_KEYS, SRV_B);
			break;
		case 4:
			map_range(&b, 0, DENSE_KEYS / 2, DENSE_KEYS, SRV_B);
			map_range(&b, 9, 0, 10, SRV_B);
			break;
		case 6:
			map_range(&b, 0, DENSE_KEYS / 2, DENSE_KEYS, SRV_B);
			b.srv[1].node_id = b.srv[0].node_id;
			break;
		case 7:
			map_range(&b, 0, DENSE_KEYS / 2, DENSE_KEYS, SRV_B);
			b.srv[1].address = "nowhere";
			break;
		default:
			map_range(&b, 0, DENSE_KEYS / 2, DENSE_KEYS, SRV_B);
			break;
		}
		dml_fake_sched_set_map(f.fake, &f.spec, &b.map);
		rc = connect_logged(&f, opts_for(&f, dml_fake_sched_port(f.fake)), &log, &ms);
		ck_assert_msg(rc == DML_ECONF, "%s: got %s", cases[i].why, dml_strerror(rc));
		ck_assert_msg(strstr(log, cases[i].why) && strstr(log, "bad shard map"),
			      "%s: log: %s", cases[i].why, log);
		ck_assert_msg(ms < 3000, "%s: took %llu ms", cases[i].why,
			      (unsigned long long)ms);
		free(log);
	}
	follow_stop(&f);
}
END_TEST

/* ---- options ---------------------------------------------------------------- */

START_TEST(test_options)
{
	struct follow f;
	char err[256], *path;
	dml_opts_t *o;
	dml_t *d = NULL;

	memset(&f, 0, sizeof(f));
	ck_assert_int_eq(dml_test_env_new(&f.env), 0);
	ck_assert_int_eq(dml_opts_new(&o), 0);
	ck_assert_int_eq(dml_opts_set(o, "scheduler", "nohost"), DML_ECONF);
	ck_assert_int_eq(dml_opts_set(o, "scheduler", "127.0.0.1:0"), DML_ECONF);
	ck_assert_int_eq(dml_opts_set(o, "clock", "-1"), DML_ECONF);
	ck_assert_int_eq(dml_opts_set(o, "clock", "18446744073709551615"), 0);
	ck_assert_int_eq(dml_opts_set(o, "clock", "x"), DML_ECONF);
	/* Both set one by one: dml_connect refuses. */
	ck_assert_int_eq(dml_opts_set(o, "scheduler", "127.0.0.1:1"), 0);
	ck_assert_int_eq(dml_opts_set(o, "servers", "127.0.0.1:2"), 0);
	ck_assert_int_eq(dml_opts_set(o, "secret_file", dml_test_env_secret(f.env)), 0);
	ck_assert_int_eq(dml_opts_set(o, "worker_id", "1"), 0);
	ck_assert_int_eq(dml_connect(o, &d), DML_EINVAL);
	ck_assert_ptr_null(d);
	/* Both in a file: the file is refused with a reason. */
	ck_assert_int_eq(dml_test_env_write(f.env, "client.conf",
					    "[client]\nservers = 127.0.0.1:2\n"
					    "scheduler = 127.0.0.1:1\n", 0600, &path), 0);
	ck_assert_int_eq(dml_opts_load(o, path, err, sizeof(err)), DML_ECONF);
	ck_assert_msg(strstr(err, "exclude"), "err: %s", err);
	free(path);
	ck_assert_int_eq(dml_test_env_write(f.env, "client2.conf",
					    "[client]\nscheduler = 127.0.0.1:1\nclock = 12\n",
					    0600, &path), 0);
	ck_assert_int_eq(dml_opts_load(o, path, err, sizeof(err)), 0);
	free(path);
	dml_opts_free(o);
	dml_test_env_free(f.env);
}
END_TEST

void check_follow_sched_tests(TCase *tc)
{
	tcase_add_test(tc, test_no_scheduler_fails_connect_clearly);
	tcase_add_test(tc, test_scheduler_without_map_fails_connect);
	tcase_add_test(tc, test_scheduler_refusing_us_fails_connect_at_once);
	tcase_add_test(tc, test_bad_maps_are_refused);
	tcase_add_test(tc, test_options);
}
