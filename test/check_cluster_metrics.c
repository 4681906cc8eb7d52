/*
 * check_cluster_metrics.c - the Prometheus metrics a dml-server serves over
 * HTTP (see check_cluster.c) count what its clients did.
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

/* ---- metrics: Prometheus text over HTTP ---------------------------------- */

#define METRICS_MAX 256
#define METRICS_PUSHES 5
#define METRICS_PULLS 3
#define METRICS_KEYS 16

struct sample {
	char name[96];
	char labels[160]; /* what stood between the braces; "" for none */
	double value;
};

/* Length of a name made of [a-zA-Z0-9_:] at p. */
static size_t name_span(const char *p)
{
	return strspn(p, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_:");
}

/* Length of `k="v",...` up to the closing brace at p, checking each pair. */
static size_t labels_span(const char *p)
{
	const char *q = p;

	while (*q != '}') {
		size_t k = name_span(q);

		ck_assert_msg(k > 0 && q[k] == '=' && q[k + 1] == '"', "bad label at: %.40s", q);
		for (q += k + 2; *q != '"'; q++) {
			ck_assert_msg(*q && *q != '\n', "unterminated label value");
			if (*q == '\\')
				q++;
		}
		q++;
		if (*q == ',')
			q++;
	}
	return (size_t)(q - p);
}

/*
 * Parse the exposition text: every line ends in a newline; comments are
 * "# HELP" or "# TYPE"; every other line is `name{labels} value` (labels
 * optional) with a number (NaN and +-Inf included) as the value.
 */
static size_t metrics_parse(const char *text, struct sample *out, size_t cap)
{
	const char *line = text;
	size_t n = 0;

	while (*line) {
		const char *nl = strchr(line, '\n'), *p = line;
		struct sample *sm = &out[n];
		size_t k;
		char *end;

		ck_assert_msg(nl != NULL, "last line has no newline: %s", line);
		if (*line == '#') {
			ck_assert_msg(strncmp(line, "# HELP ", 7) == 0 ||
					      strncmp(line, "# TYPE ", 7) == 0,
				      "stray comment: %.*s", (int)(nl - line), line);
			line = nl + 1;
			continue;
		}
		ck_assert_uint_lt(n, cap);
		k = name_span(p);
		ck_assert_msg(k > 0 && k < sizeof(sm->name), "bad name: %.*s",
			      (int)(nl - line), line);
		memcpy(sm->name, p, k);
		sm->name[k] = '\0';
		p += k;
		sm->labels[0] = '\0';
		if (*p == '{') {
			k = labels_span(++p);
			ck_assert_uint_lt(k, sizeof(sm->labels));
			memcpy(sm->labels, p, k);
			sm->labels[k] = '\0';
			p += k + 1;
		}
		ck_assert_msg(*p == ' ', "no blank before the value: %.*s", (int)(nl - line),
			      line);
		p++;
		errno = 0;
		sm->value = strtod(p, &end);
		ck_assert_msg(end > p && end == nl && errno == 0, "not a number: %.*s",
			      (int)(nl - line), line);
		n++;
		line = nl + 1;
	}
	return n;
}

/* The value of name{labels}; the sample must be there. */
static double metric(const struct sample *sm, size_t n, const char *name,
		     const char *labels)
{
	for (size_t i = 0; i < n; i++)
		if (strcmp(sm[i].name, name) == 0 && strcmp(sm[i].labels, labels) == 0)
			return sm[i].value;
	ck_abort_msg("no sample %s{%s}", name, labels);
	return 0;
}

static size_t scrape(uint16_t port, struct sample *sm, size_t cap)
{
	char *body;
	size_t n;
	int status;

	ck_assert_int_eq(
		dml_test_http_request(port, "GET", "/metrics", WAIT_MS, &status, &body), 0);
	ck_assert_msg(status == 200, "GET /metrics: status %d", status);
	n = metrics_parse(body, sm, cap);
	free(body);
	return n;
}

/* Scrape until the connection gauge reads want, or fail after WAIT_MS. */
static void wait_connections(uint16_t port, struct sample *sm, double want)
{
	uint64_t t0 = dml_now_ns();
	double got;

	while ((got = metric(sm, scrape(port, sm, METRICS_MAX), "dml_server_connections",
			     "")) != want) {
		ck_assert_msg(elapsed_ms(t0) < WAIT_MS,
			      "dml_server_connections stays %g, not %g", got, want);
		sleep_us(10000);
	}
}

START_TEST(test_metrics_count_what_clients_did)
{
	static struct sample sm[METRICS_MAX];
	struct dml_test_server_conf conf = {
		.staleness = -1,
		.tables = "[table]\nid = 0\nkind = dense\nwidth = 1\nkeys = " STR(
			METRICS_KEYS) "\noptimizer = add\n",
	};
	float ones[METRICS_KEYS], out[METRICS_KEYS];
	char port_file[4096], extra[sizeof(port_file) + 64];
	struct dml_test_server *srv;
	struct dml_test_env *env;
	uint16_t port;
	size_t n;
	dml_t *d;
	int i, status;

	ck_assert_int_eq(dml_test_env_new(&env), 0);
	ck_assert_int_lt(snprintf(port_file, sizeof(port_file), "%s/metrics.port",
				  dml_test_env_dir(env)), (int)sizeof(port_file));
	snprintf(extra, sizeof(extra),
		 "metrics_listen = 127.0.0.1:0\nmetrics_port_file = %s\n", port_file);
	conf.server_extra = extra;
	ck_assert_int_eq(dml_test_server_start(env, &conf, &srv), 0);
	/* Written before the server's own port file: there once it started. */
	ck_assert_int_eq(dml_test_port_file_read(port_file, &port), 0);

	n = scrape(port, sm, METRICS_MAX);
	ck_assert(metric(sm, n, "dml_server_requests_total", "type=\"push\"") == 0);
	ck_assert(metric(sm, n, "dml_server_connections", "") == 0);

	for (i = 0; i < METRICS_KEYS; i++)
		ones[i] = 1;
	ck_assert_int_eq(dml_test_client_new(env, &srv, 1, 1, &d), 0);
	for (i = 0; i < METRICS_PUSHES; i++)
		wait_ok(d, push_dense(d, 0, METRICS_KEYS, ones), "push");
	/* Not answered; the pulls after it on the same connection are, so the
	 * server has counted it by the time they return. */
	wait_ok(d, dml_clock(d), "clock");
	for (i = 0; i < METRICS_PULLS; i++)
		wait_ok(d, pull_dense(d, 0, METRICS_KEYS, out), "pull");
	ck_assert_float_eq(out[0], (float)METRICS_PUSHES);

	n = scrape(port, sm, METRICS_MAX);
	ck_assert(metric(sm, n, "dml_server_requests_total", "type=\"push\"") ==
		  METRICS_PUSHES);
	ck_assert(metric(sm, n, "dml_server_requests_total", "type=\"pull\"") ==
		  METRICS_PULLS);
	ck_assert(metric(sm, n, "dml_server_requests_total", "type=\"clock\"") == 1);
	ck_assert(metric(sm, n, "dml_server_request_duration_seconds_count",
			 "type=\"push\"") == METRICS_PUSHES);
	ck_assert(metric(sm, n, "dml_server_request_duration_seconds_bucket",
			 "type=\"pull\",le=\"+Inf\"") == METRICS_PULLS);
	ck_assert(metric(sm, n, "dml_server_push_duplicates_total", "") == 0);
	ck_assert(metric(sm, n, "dml_server_connections", "") == 1);
	ck_assert(metric(sm, n, "dml_server_workers_live", "") == 1);
	ck_assert(metric(sm, n, "dml_server_worker_clock", "worker=\"1\"") == 1);
	ck_assert(metric(sm, n, "dml_server_min_clock", "") == 1);
	ck_assert(metric(sm, n, "dml_server_table_rows", "table=\"0\"") == METRICS_KEYS);
	ck_assert(metric(sm, n, "dml_server_network_bytes_total", "direction=\"in\"") >=
		  METRICS_PUSHES * METRICS_KEYS * sizeof(float));

	ck_assert_int_eq(dml_test_http_request(port, "GET", "/nope", WAIT_MS, &status, NULL),
			 0);
	ck_assert_int_eq(status, 404);
	ck_assert_int_eq(
		dml_test_http_request(port, "POST", "/metrics", WAIT_MS, &status, NULL), 0);
	ck_assert_int_eq(status, 405);

	/* The gauge follows the connection away. */
	dml_close(d);
	wait_connections(port, sm, 0);
	stop_ok(srv);
	dml_test_env_free(env);
}
END_TEST

/* The tests of the metrics test case, in the order the suite runs them. */
void cluster_tests_metrics(TCase *tc)
{
	tcase_add_test(tc, test_metrics_count_what_clients_did);
}
