/*
 * Unit tests of proto/metrics.c: the text exposition of each kind of metric
 * (exact text), label and help escaping, histogram buckets with +Inf, gauges
 * evaluated at scrape time, refusal of bad or clashing registrations, and
 * the HTTP endpoint (200 with the text, 404, 405) on a real loopback socket.
 */
#define _GNU_SOURCE
#include <check.h>
#include <errno.h>
#include <math.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <event2/event.h>

#include "test/check_run.h"
#include "proto/dml_error.h"
#include "proto/metrics.h"
#include "proto/util.h"

static const struct dml_metric_desc requests = {
	"dml_test_requests_total", "Requests received, by type", DML_METRIC_COUNTER, "type",
	NULL, 0
};

static const double small_bounds[] = { 1, 2.5, 5 };

/* Render m and compare with want, freeing the text. */
static void expect_text(struct dml_metrics *m, const char *want)
{
	char *text;
	size_t len = 0;

	ck_assert_int_eq(dml_metrics_render(m, &text, &len), 0);
	ck_assert_str_eq(text, want);
	ck_assert_uint_eq(len, strlen(want));
	free(text);
}

START_TEST(counter_reads_the_daemons_integer)
{
	const struct dml_metric_desc d = { "dml_test_bad_frames_total", "Bad frames",
					   DML_METRIC_COUNTER, NULL, NULL, 0 };
	struct dml_metrics *m = dml_metrics_new();
	uint64_t v = 0;

	ck_assert_int_eq(dml_metrics_add_u64(m, &d, NULL, &v), 0);
	expect_text(m, "# HELP dml_test_bad_frames_total Bad frames\n"
		       "# TYPE dml_test_bad_frames_total counter\n"
		       "dml_test_bad_frames_total 0\n");
	v = 18446744073709551615ull; /* exact, not through a double */
	expect_text(m, "# HELP dml_test_bad_frames_total Bad frames\n"
		       "# TYPE dml_test_bad_frames_total counter\n"
		       "dml_test_bad_frames_total 18446744073709551615\n");
	dml_metrics_free(m);
}
END_TEST

START_TEST(labelled_series_share_one_header)
{
	struct dml_metrics *m = dml_metrics_new();
	uint64_t push = 3, pull = 4;

	ck_assert_int_eq(dml_metrics_add_u64(m, &requests, "push", &push), 0);
	ck_assert_int_eq(dml_metrics_add_u64(m, &requests, "pull", &pull), 0);
	expect_text(m, "# HELP dml_test_requests_total Requests received, by type\n"
		       "# TYPE dml_test_requests_total counter\n"
		       "dml_test_requests_total{type=\"push\"} 3\n"
		       "dml_test_requests_total{type=\"pull\"} 4\n");
	dml_metrics_free(m);
}
END_TEST

static double calls_gauge(void *arg)
{
	int *calls = arg;

	return ++*calls * 0.5;
}

START_TEST(gauge_callbacks_run_at_scrape_time)
{
	const struct dml_metric_desc d = { "dml_test_min_clock", "Slowest clock",
					   DML_METRIC_GAUGE, NULL, NULL, 0 };
	struct dml_metrics *m = dml_metrics_new();
	int calls = 0;

	ck_assert_int_eq(dml_metrics_add_fn(m, &d, NULL, calls_gauge, &calls), 0);
	ck_assert_int_eq(calls, 0);
	expect_text(m, "# HELP dml_test_min_clock Slowest clock\n"
		       "# TYPE dml_test_min_clock gauge\n"
		       "dml_test_min_clock 0.5\n");
	expect_text(m, "# HELP dml_test_min_clock Slowest clock\n"
		       "# TYPE dml_test_min_clock gauge\n"
		       "dml_test_min_clock 1\n");
	ck_assert_int_eq(calls, 2);
	dml_metrics_free(m);
}
END_TEST

/* Emits one sample per value in arg, labelled by position; each value is
 * one that must be spelled exactly. */
static const double special[] = { 0.1, -3, 1e-7, 9007199254740993.0, NAN, INFINITY,
				  -INFINITY };

static void collect_special(struct dml_metrics_scrape *sc, void *arg)
{
	char label[8];

	for (size_t i = 0; i < DML_ARRAY_LEN(special); i++) {
		snprintf(label, sizeof(label), "%zu", i);
		dml_metrics_emit(sc, label, special[i]);
	}
}

static void collect_nothing(struct dml_metrics_scrape *sc, void *arg)
{
	(*(int *)arg)++;
}

START_TEST(collectors_emit_numbers_prometheus_reads)
{
	const struct dml_metric_desc d = { "dml_test_worker_clock", "Clock per worker",
					   DML_METRIC_GAUGE, "worker", NULL, 0 };
	const struct dml_metric_desc none = { "dml_test_empty", "Nothing yet",
					      DML_METRIC_GAUGE, "table", NULL, 0 };
	struct dml_metrics *m = dml_metrics_new();
	int calls = 0;

	ck_assert_int_eq(dml_metrics_add_collector(m, &d, collect_special, NULL), 0);
	ck_assert_int_eq(dml_metrics_add_collector(m, &none, collect_nothing, &calls), 0);
	expect_text(m, "# HELP dml_test_worker_clock Clock per worker\n"
		       "# TYPE dml_test_worker_clock gauge\n"
		       "dml_test_worker_clock{worker=\"0\"} 0.1\n"
		       "dml_test_worker_clock{worker=\"1\"} -3\n"
		       "dml_test_worker_clock{worker=\"2\"} 1e-07\n"
		       "dml_test_worker_clock{worker=\"3\"} 9007199254740992\n"
		       "dml_test_worker_clock{worker=\"4\"} NaN\n"
		       "dml_test_worker_clock{worker=\"5\"} +Inf\n"
		       "dml_test_worker_clock{worker=\"6\"} -Inf\n"
		       "# HELP dml_test_empty Nothing yet\n"
		       "# TYPE dml_test_empty gauge\n");
	ck_assert_int_eq(calls, 1);
	dml_metrics_free(m);
}
END_TEST

static void collect_nasty(struct dml_metrics_scrape *sc, void *arg)
{
	dml_metrics_emit(sc, "x\"}\n{\\", 1);
}

START_TEST(label_values_and_help_are_escaped)
{
	const struct dml_metric_desc d = { "dml_test_escape", "a \"quoted\" \\path\\\nnext",
					   DML_METRIC_COUNTER, "name", NULL, 0 };
	const struct dml_metric_desc g = { "dml_test_escape_collected", "h",
					   DML_METRIC_GAUGE, "name", NULL, 0 };
	struct dml_metrics *m = dml_metrics_new();
	uint64_t v = 1;

	ck_assert_int_eq(dml_metrics_add_u64(m, &d, "say \"hi\"\\\n", &v), 0);
	ck_assert_int_eq(dml_metrics_add_collector(m, &g, collect_nasty, NULL), 0);
	/* Help escapes \ and newline only; label values also ". */
	expect_text(m, "# HELP dml_test_escape a \"quoted\" \\\\path\\\\\\nnext\n"
		       "# TYPE dml_test_escape counter\n"
		       "dml_test_escape{name=\"say \\\"hi\\\"\\\\\\n\"} 1\n"
		       "# HELP dml_test_escape_collected h\n"
		       "# TYPE dml_test_escape_collected gauge\n"
		       "dml_test_escape_collected{name=\"x\\\"}\\n{\\\\\"} 1\n");
	dml_metrics_free(m);
}
END_TEST

START_TEST(histogram_buckets_are_cumulative_with_inf)
{
	const struct dml_metric_desc d = { "dml_test_latency_seconds", "Latency",
					   DML_METRIC_HISTOGRAM, "type", small_bounds,
					   DML_ARRAY_LEN(small_bounds) };
	const struct dml_metric_desc plain = { "dml_test_wait_seconds", "Wait",
					       DML_METRIC_HISTOGRAM, NULL, small_bounds,
					       DML_ARRAY_LEN(small_bounds) };
	struct dml_metrics *m = dml_metrics_new();
	struct dml_histogram *push, *pull, *wait;

	ck_assert_int_eq(dml_metrics_add_histogram(m, &d, "push", &push), 0);
	ck_assert_int_eq(dml_metrics_add_histogram(m, &d, "pull", &pull), 0);
	ck_assert_int_eq(dml_metrics_add_histogram(m, &plain, NULL, &wait), 0);
	/* 1 sits on a bound: it counts in le="1". 7 and 100 only in +Inf. */
	dml_histogram_observe(push, 0.5);
	dml_histogram_observe(push, 1);
	dml_histogram_observe(push, 2);
	dml_histogram_observe(push, 7);
	dml_histogram_observe(push, 100);
	dml_histogram_observe(wait, 3);
	expect_text(m, "# HELP dml_test_latency_seconds Latency\n"
		       "# TYPE dml_test_latency_seconds histogram\n"
		       "dml_test_latency_seconds_bucket{type=\"push\",le=\"1\"} 2\n"
		       "dml_test_latency_seconds_bucket{type=\"push\",le=\"2.5\"} 3\n"
		       "dml_test_latency_seconds_bucket{type=\"push\",le=\"5\"} 3\n"
		       "dml_test_latency_seconds_bucket{type=\"push\",le=\"+Inf\"} 5\n"
		       "dml_test_latency_seconds_sum{type=\"push\"} 110.5\n"
		       "dml_test_latency_seconds_count{type=\"push\"} 5\n"
		       "dml_test_latency_seconds_bucket{type=\"pull\",le=\"1\"} 0\n"
		       "dml_test_latency_seconds_bucket{type=\"pull\",le=\"2.5\"} 0\n"
		       "dml_test_latency_seconds_bucket{type=\"pull\",le=\"5\"} 0\n"
		       "dml_test_latency_seconds_bucket{type=\"pull\",le=\"+Inf\"} 0\n"
		       "dml_test_latency_seconds_sum{type=\"pull\"} 0\n"
		       "dml_test_latency_seconds_count{type=\"pull\"} 0\n"
		       "# HELP dml_test_wait_seconds Wait\n"
		       "# TYPE dml_test_wait_seconds histogram\n"
		       "dml_test_wait_seconds_bucket{le=\"1\"} 0\n"
		       "dml_test_wait_seconds_bucket{le=\"2.5\"} 0\n"
		       "dml_test_wait_seconds_bucket{le=\"5\"} 1\n"
		       "dml_test_wait_seconds_bucket{le=\"+Inf\"} 1\n"
		       "dml_test_wait_seconds_sum 3\n"
		       "dml_test_wait_seconds_count 1\n");
	dml_metrics_free(m);
}
END_TEST

START_TEST(latency_buckets_fit_a_histogram)
{
	struct dml_metrics *m = dml_metrics_new();
	struct dml_metric_desc d = { "dml_test_seconds", "s", DML_METRIC_HISTOGRAM, NULL,
				     NULL, 0 };
	struct dml_histogram *h;
	char *text;

	d.bounds = dml_metrics_latency_buckets(&d.nbounds);
	ck_assert_uint_ge(d.nbounds, 10);
	ck_assert(d.bounds[0] <= 100e-6 && d.bounds[d.nbounds - 1] >= 10);
	ck_assert_int_eq(dml_metrics_add_histogram(m, &d, NULL, &h), 0);
	/* A start 0.2 ms ago lands between 100 us and 10 s. */
	dml_histogram_observe_since(h, dml_now_ns() - 200000);
	ck_assert_int_eq(dml_metrics_render(m, &text, NULL), 0);
	ck_assert_ptr_nonnull(strstr(text, "dml_test_seconds_bucket{le=\"0.0001\"} 0\n"));
	ck_assert_ptr_nonnull(strstr(text, "dml_test_seconds_bucket{le=\"10\"} 1\n"));
	ck_assert_ptr_nonnull(strstr(text, "dml_test_seconds_count 1\n"));
	free(text);
	dml_metrics_free(m);
}
END_TEST

START_TEST(bad_and_clashing_registrations_are_refused)
{
	const double unordered[] = { 1, 1 }, nan_bound[] = { 1, NAN };
	struct dml_metrics *m = dml_metrics_new();
	struct dml_metric_desc d = requests;
	struct dml_histogram *h;
	uint64_t v = 0;
	char *text;

	ck_assert_int_eq(dml_metrics_add_u64(m, &requests, "push", &v), 0);
	/* Same series again; no label value; different help or type. */
	ck_assert_int_eq(dml_metrics_add_u64(m, &requests, "push", &v), DML_EINVAL);
	ck_assert_int_eq(dml_metrics_add_u64(m, &requests, NULL, &v), DML_EINVAL);
	d.help = "other";
	ck_assert_int_eq(dml_metrics_add_u64(m, &d, "pull", &v), DML_EINVAL);
	d = requests;
	d.type = DML_METRIC_GAUGE;
	ck_assert_int_eq(dml_metrics_add_u64(m, &d, "pull", &v), DML_EINVAL);
	/* Bad names. */
	d = requests;
	d.name = "9lives";
	ck_assert_int_eq(dml_metrics_add_u64(m, &d, "x", &v), DML_EINVAL);
	d.name = "has space";
	ck_assert_int_eq(dml_metrics_add_u64(m, &d, "x", &v), DML_EINVAL);
	d.name = "ok_name";
	d.label = "__reserved";
	ck_assert_int_eq(dml_metrics_add_u64(m, &d, "x", &v), DML_EINVAL);
	d.label = "a:b";
	ck_assert_int_eq(dml_metrics_add_u64(m, &d, "x", &v), DML_EINVAL);
	/* Histograms: le is taken; bounds must be finite and increasing;
	 * a histogram is not a counter. */
	d = (struct dml_metric_desc){ "h_seconds", "h", DML_METRIC_HISTOGRAM, "le",
				      small_bounds, 3 };
	ck_assert_int_eq(dml_metrics_add_histogram(m, &d, "x", &h), DML_EINVAL);
	d.label = NULL;
	d.bounds = unordered;
	d.nbounds = 2;
	ck_assert_int_eq(dml_metrics_add_histogram(m, &d, NULL, &h), DML_EINVAL);
	d.bounds = nan_bound;
	ck_assert_int_eq(dml_metrics_add_histogram(m, &d, NULL, &h), DML_EINVAL);
	d.bounds = small_bounds;
	d.nbounds = 0;
	ck_assert_int_eq(dml_metrics_add_histogram(m, &d, NULL, &h), DML_EINVAL);
	d.nbounds = 3;
	ck_assert_int_eq(dml_metrics_add_u64(m, &d, NULL, &v), DML_EINVAL);
	ck_assert_int_eq(dml_metrics_add_collector(m, &d, collect_nothing, NULL),
			 DML_EINVAL);
	/* A label-less family has one series, whatever its kind. */
	d = (struct dml_metric_desc){ "single", "s", DML_METRIC_GAUGE, NULL, NULL, 0 };
	ck_assert_int_eq(dml_metrics_add_u64(m, &d, NULL, &v), 0);
	ck_assert_int_eq(dml_metrics_add_collector(m, &d, collect_nothing, NULL),
			 DML_EINVAL);
	/* Nothing refused left a trace. */
	ck_assert_int_eq(dml_metrics_render(m, &text, NULL), 0);
	ck_assert_str_eq(text, "# HELP dml_test_requests_total Requests received, by type\n"
			       "# TYPE dml_test_requests_total counter\n"
			       "dml_test_requests_total{type=\"push\"} 0\n"
			       "# HELP single s\n"
			       "# TYPE single gauge\n"
			       "single 0\n");
	free(text);
	dml_metrics_free(m);
}
END_TEST

/* ---- HTTP: a blocking client socket, the server's loop turned by hand -- */

/* Send request to 127.0.0.1:port and collect the reply until the server
 * closes, turning base meanwhile. *reply is malloc'ed. */
static void http_exchange(struct event_base *base, uint16_t port, const char *request,
			  char **reply)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(port),
				 .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	size_t cap = 4096, len = 0;
	char *buf = dml_xmalloc(cap);
	uint64_t deadline = dml_now_ns() + 5000000000ull;
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	struct pollfd pfd = { .fd = fd, .events = POLLIN };

	ck_assert_int_ge(fd, 0);
	/* The listener's backlog takes the connection before the loop runs. */
	ck_assert_int_eq(connect(fd, (struct sockaddr *)&a, sizeof(a)), 0);
	ck_assert_int_eq(write(fd, request, strlen(request)), (ssize_t)strlen(request));
	for (;;) {
		ssize_t n;

		ck_assert_msg(dml_now_ns() < deadline, "no complete reply in 5 s");
		event_base_loop(base, EVLOOP_NONBLOCK);
		if (poll(&pfd, 1, 5) <= 0)
			continue;
		if (len + 1 >= cap)
			buf = dml_xrealloc(buf, cap *= 2);
		n = read(fd, buf + len, cap - len - 1);
		if (n < 0 && errno == EINTR)
			continue;
		ck_assert_int_ge(n, 0);
		if (n == 0)
			break;
		len += (size_t)n;
	}
	buf[len] = '\0';
	close(fd);
	*reply = buf;
}

/* The status code of an HTTP/1.x reply, or -1. */
static int http_status(const char *reply)
{
	int minor, code;

	return sscanf(reply, "HTTP/1.%d %d ", &minor, &code) == 2 ? code : -1;
}

START_TEST(http_serves_metrics_and_refuses_the_rest)
{
	struct event_base *base = event_base_new();
	struct dml_metrics *m = dml_metrics_new();
	uint64_t push = 7;
	uint16_t port = 0;
	char *reply, *text;

	ck_assert_int_eq(dml_metrics_add_u64(m, &requests, "push", &push), 0);
	ck_assert_int_eq(dml_metrics_http_start(m, base, "127.0.0.1", 0, &port), 0);
	ck_assert_uint_ne(port, 0);
	ck_assert_int_eq(dml_metrics_http_start(m, base, "127.0.0.1", 0, NULL), DML_EINVAL);

	http_exchange(base, port, "GET /metrics HTTP/1.0\r\n\r\n", &reply);
	ck_assert_msg(http_status(reply) == 200, "reply: %s", reply);
	ck_assert_ptr_nonnull(strcasestr(reply, "Content-Type: text/plain; version=0.0.4"));
	ck_assert_int_eq(dml_metrics_render(m, &text, NULL), 0);
	ck_assert_ptr_nonnull(strstr(reply, "\r\n\r\n"));
	ck_assert_str_eq(strstr(reply, "\r\n\r\n") + 4, text);
	free(text);
	free(reply);

	http_exchange(base, port, "GET /other HTTP/1.0\r\n\r\n", &reply);
	ck_assert_msg(http_status(reply) == 404, "reply: %s", reply);
	free(reply);
	http_exchange(base, port, "POST /metrics HTTP/1.0\r\nContent-Length: 0\r\n\r\n",
		      &reply);
	ck_assert_msg(http_status(reply) == 405, "reply: %s", reply);
	ck_assert_ptr_nonnull(strcasestr(reply, "Allow: GET"));
	free(reply);
	http_exchange(base, port, "OPTIONS /metrics HTTP/1.0\r\n\r\n", &reply);
	ck_assert_msg(http_status(reply) == 405, "reply: %s", reply);
	free(reply);

	/* Stopped: the port is closed, and it may start again. */
	dml_metrics_http_stop(m);
	dml_metrics_http_stop(m);
	{
		struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(port),
					 .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
		int fd = socket(AF_INET, SOCK_STREAM, 0);

		ck_assert_int_ne(connect(fd, (struct sockaddr *)&a, sizeof(a)), 0);
		close(fd);
	}
	ck_assert_int_eq(dml_metrics_http_start(m, base, "127.0.0.1", 0, &port), 0);
	dml_metrics_free(m);
	event_base_free(base);
}
END_TEST

START_TEST(http_refuses_an_address_it_cannot_bind)
{
	struct event_base *base = event_base_new();
	struct dml_metrics *m = dml_metrics_new();
	uint16_t port = 0, again = 0;

	ck_assert_int_eq(dml_metrics_http_start(m, base, "127.0.0.1", 0, &port), 0);
	{
		struct dml_metrics *other = dml_metrics_new();

		ck_assert_int_eq(
			dml_metrics_http_start(other, base, "127.0.0.1", port, &again),
			DML_EIO);
		ck_assert_uint_eq(again, 0);
		dml_metrics_free(other);
	}
	dml_metrics_free(m);
	event_base_free(base);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("metrics");
	TCase *tc = tcase_create("format");

	tcase_add_test(tc, counter_reads_the_daemons_integer);
	tcase_add_test(tc, labelled_series_share_one_header);
	tcase_add_test(tc, gauge_callbacks_run_at_scrape_time);
	tcase_add_test(tc, collectors_emit_numbers_prometheus_reads);
	tcase_add_test(tc, label_values_and_help_are_escaped);
	tcase_add_test(tc, histogram_buckets_are_cumulative_with_inf);
	tcase_add_test(tc, latency_buckets_fit_a_histogram);
	tcase_add_test(tc, bad_and_clashing_registrations_are_refused);
	suite_add_tcase(s, tc);
	tc = tcase_create("http");
	tcase_add_test(tc, http_serves_metrics_and_refuses_the_rest);
	tcase_add_test(tc, http_refuses_an_address_it_cannot_bind);
	suite_add_tcase(s, tc);
	return dml_check_run(s);
}
