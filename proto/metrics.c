/*
 * Metrics registry, text exposition and HTTP endpoint (see metrics.h).
 *
 * A family is a metric name with its help, type and label name; it holds
 * series in registration order, each with its source of values. Text is
 * produced only at scrape time, into an evbuffer, so recording stays a
 * store to memory the daemon already owns.
 *
 * Must never: allocate or format on the recording path, block the loop,
 * answer an HTTP request with anything but the metrics text or an error
 * status, or outlive the registry with a callback into it (stopping frees
 * the evhttp, which drops its connections).
 */
#include <errno.h>
#include <math.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include <event2/buffer.h>
#include <event2/http.h>

#include "proto/dml_error.h"
#include "proto/listen.h"
#include "proto/log.h"
#include "proto/metrics.h"
#include "proto/util.h"

/* An HTTP client gets this long to send its request and take the reply. */
#define HTTP_TIMEOUT_S 10
#define HTTP_MAX_HEADERS 8192
#define HTTP_MAX_BODY 1024
#define CONTENT_TYPE "text/plain; version=0.0.4; charset=utf-8"

enum source_kind { SRC_U64, SRC_FN, SRC_COLLECTOR, SRC_HISTOGRAM };

struct dml_histogram {
	const double *bounds;      /* the family's copy */
	size_t nbounds;
	double sum;
	uint64_t counts[];         /* per bucket, not cumulative; [nbounds] is +Inf */
};

struct series {
	struct series *next;
	enum source_kind kind;
	char *label_value;         /* NULL for collectors and label-less families */
	const uint64_t *u64;
	dml_metrics_value_fn fn;
	dml_metrics_collect_fn collect;
	void *arg;
	struct dml_histogram *hist;
};

struct family {
	struct family *next;
	char *name, *help, *label;
	enum dml_metric_type type;
	double *bounds;
	size_t nbounds;
	struct series *series, **series_tail;
};

struct dml_metrics {
	struct family *families, **families_tail;
	struct evhttp *http;
	struct dml_listener *guard; /* evhttp's listener backs off when starved */
};

struct dml_metrics_scrape {
	struct evbuffer *out;
	const struct family *f;
	int failed;                /* an evbuffer append failed: no memory */
};

static const double latency_buckets[] = {
	50e-6, 100e-6, 250e-6, 500e-6, 1e-3, 2.5e-3, 5e-3, 10e-3, 25e-3, 50e-3,
	100e-3, 250e-3, 500e-3, 1, 2.5, 5, 10
};

static const char *const type_names[] = { "counter", "gauge", "histogram" };

/* ---- registration ------------------------------------------------------ */

/* Prometheus names: [a-zA-Z_:][a-zA-Z0-9_:]*; label names without ':'. */
static int name_ok(const char *s, int colons)
{
	if (!s || !*s)
		return 0;
	for (size_t i = 0; s[i]; i++) {
		char c = s[i];
		int ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' ||
			 (colons && c == ':') || (i > 0 && c >= '0' && c <= '9');

		if (!ok)
			return 0;
	}
	return 1;
}

static int bounds_ok(const double *b, size_t n)
{
	if (!b || n == 0 || n > DML_METRICS_MAX_BUCKETS)
		return 0;
	for (size_t i = 0; i < n; i++)
		if (!isfinite(b[i]) || (i > 0 && !(b[i] > b[i - 1])))
			return 0;
	return 1;
}

static int desc_ok(const struct dml_metric_desc *d)
{
	int hist = d->type == DML_METRIC_HISTOGRAM;

	if (!name_ok(d->name, 1) || !d->help || (unsigned)d->type > DML_METRIC_HISTOGRAM)
		return 0;
	/* "__" is reserved; "le" is the histogram's bucket label. */
	if (d->label && (!name_ok(d->label, 0) || strncmp(d->label, "__", 2) == 0 ||
			 (hist && strcmp(d->label, "le") == 0)))
		return 0;
	return !hist || bounds_ok(d->bounds, d->nbounds);
}

static int same_str(const char *a, const char *b)
{
	return a == b || (a && b && strcmp(a, b) == 0);
}

static int family_matches(const struct family *f, const struct dml_metric_desc *d)
{
	if (f->type != d->type || !same_str(f->help, d->help) ||
	    !same_str(f->label, d->label))
		return 0;
	if (f->type != DML_METRIC_HISTOGRAM)
		return 1;
	return f->nbounds == d->nbounds &&
	       memcmp(f->bounds, d->bounds, d->nbounds * sizeof(double)) == 0;
}

static struct family *family_find(const struct dml_metrics *m, const char *name)
{
	for (struct family *f = m->families; f; f = f->next)
		if (strcmp(f->name, name) == 0)
			return f;
	return NULL;
}

/*
 * Would a new series clash with the family's others? A family without a
 * label has one series; with a label, static series need distinct values
 * (what a collector emits is its own business).
 */
static int series_clash(const struct family *f, enum source_kind kind,
			const char *label_value)
{
	if (!f->label)
		return f->series != NULL;
	if (kind == SRC_COLLECTOR)
		return 0;
	for (const struct series *x = f->series; x; x = x->next)
		if (x->label_value && strcmp(x->label_value, label_value) == 0)
			return 1;
	return 0;
}

static struct family *family_new(struct dml_metrics *m, const struct dml_metric_desc *d)
{
	struct family *f = dml_xcalloc(1, sizeof(*f));

	f->name = dml_xstrdup(d->name);
	f->help = dml_xstrdup(d->help);
	f->label = d->label ? dml_xstrdup(d->label) : NULL;
	f->type = d->type;
	if (d->type == DML_METRIC_HISTOGRAM) {
		f->bounds = dml_xmalloc(d->nbounds * sizeof(double));
		memcpy(f->bounds, d->bounds, d->nbounds * sizeof(double));
		f->nbounds = d->nbounds;
	}
	f->series_tail = &f->series;
	*m->families_tail = f;
	m->families_tail = &f->next;
	return f;
}

/*
 * The one door for every kind of series: checks the description against
 * the kind and the family registered before, then appends a new series.
 */
static int series_add(struct dml_metrics *m, const struct dml_metric_desc *d,
		      enum source_kind kind, const char *label_value, struct series **out)
{
	int hist = d && d->type == DML_METRIC_HISTOGRAM;
	struct family *f;
	struct series *x;

	if (!m || !d || !desc_ok(d) || hist != (kind == SRC_HISTOGRAM))
		return DML_EINVAL;
	if (kind == SRC_COLLECTOR || !d->label)
		label_value = NULL;
	else if (!label_value)
		return DML_EINVAL;
	f = family_find(m, d->name);
	if (f && (!family_matches(f, d) || series_clash(f, kind, label_value)))
		return DML_EINVAL;
	if (!f)
		f = family_new(m, d);
	x = dml_xcalloc(1, sizeof(*x));
	x->kind = kind;
	x->label_value = label_value ? dml_xstrdup(label_value) : NULL;
	*f->series_tail = x;
	f->series_tail = &x->next;
	if (hist) {
		x->hist = dml_xcalloc(1, sizeof(*x->hist) +
					 (f->nbounds + 1) * sizeof(x->hist->counts[0]));
		x->hist->bounds = f->bounds;
		x->hist->nbounds = f->nbounds;
	}
	*out = x;
	return 0;
}

struct dml_metrics *dml_metrics_new(void)
{
	struct dml_metrics *m = dml_xcalloc(1, sizeof(*m));

	m->families_tail = &m->families;
	return m;
}

void dml_metrics_free(struct dml_metrics *m)
{
	if (!m)
		return;
	dml_metrics_http_stop(m);
	while (m->families) {
		struct family *f = m->families;

		m->families = f->next;
		while (f->series) {
			struct series *x = f->series;

			f->series = x->next;
			free(x->label_value);
			free(x->hist);
			free(x);
		}
		free(f->name);
		free(f->help);
		free(f->label);
		free(f->bounds);
		free(f);
	}
	free(m);
}

int dml_metrics_add_u64(struct dml_metrics *m, const struct dml_metric_desc *desc,
			const char *label_value, const uint64_t *value)
{
	struct series *x;
	int rc;

	if (!value)
		return DML_EINVAL;
	rc = series_add(m, desc, SRC_U64, label_value, &x);
	if (rc == 0)
		x->u64 = value;
	return rc;
}

int dml_metrics_add_fn(struct dml_metrics *m, const struct dml_metric_desc *desc,
		       const char *label_value, dml_metrics_value_fn fn, void *arg)
{
	struct series *x;
	int rc;

	if (!fn)
		return DML_EINVAL;
	rc = series_add(m, desc, SRC_FN, label_value, &x);
	if (rc == 0) {
		x->fn = fn;
		x->arg = arg;
	}
	return rc;
}

int dml_metrics_add_collector(struct dml_metrics *m, const struct dml_metric_desc *desc,
			      dml_metrics_collect_fn fn, void *arg)
{
	struct series *x;
	int rc;

	if (!fn)
		return DML_EINVAL;
	rc = series_add(m, desc, SRC_COLLECTOR, NULL, &x);
	if (rc == 0) {
		x->collect = fn;
		x->arg = arg;
	}
	return rc;
}

int dml_metrics_add_histogram(struct dml_metrics *m, const struct dml_metric_desc *desc,
			      const char *label_value, struct dml_histogram **out)
{
	struct series *x;
	int rc;

	if (!out)
		return DML_EINVAL;
	rc = series_add(m, desc, SRC_HISTOGRAM, label_value, &x);
	if (rc == 0)
		*out = x->hist;
	return rc;
}

void dml_histogram_observe(struct dml_histogram *h, double value)
{
	size_t i = 0;

	/* "le": a value on a bound belongs to that bucket; NaN goes to +Inf. */
	while (i < h->nbounds && !(value <= h->bounds[i]))
		i++;
	h->counts[i]++;
	h->sum += value;
}

void dml_histogram_observe_since(struct dml_histogram *h, uint64_t since_ns)
{
	dml_histogram_observe(h, (double)(dml_now_ns() - since_ns) * 1e-9);
}

const double *dml_metrics_latency_buckets(size_t *n)
{
	*n = DML_ARRAY_LEN(latency_buckets);
	return latency_buckets;
}

/* ---- text exposition ---------------------------------------------------- */

static void put(struct dml_metrics_scrape *sc, const char *s, size_t n)
{
	if (n && evbuffer_add(sc->out, s, n) != 0)
		sc->failed = 1;
}

static void put_str(struct dml_metrics_scrape *sc, const char *s)
{
	put(sc, s, strlen(s));
}

/* Help text escapes \ and newline; label values also the double quote. */
static void put_escaped(struct dml_metrics_scrape *sc, const char *s, int quote)
{
	const char *run = s;

	for (; *s; s++) {
		const char *esc = *s == '\\' ? "\\\\" : *s == '\n' ? "\\n"
				: quote && *s == '"' ? "\\\"" : NULL;

		if (!esc)
			continue;
		put(sc, run, (size_t)(s - run));
		put_str(sc, esc);
		run = s + 1;
	}
	put(sc, run, (size_t)(s - run));
}

/* Shortest %g form that reads back as the same double; Go's spelling of
 * the special values, which Prometheus expects. Needs the C locale. */
static void format_double(double v, char *buf, size_t len)
{
	if (isnan(v))
		snprintf(buf, len, "NaN");
	else if (isinf(v))
		snprintf(buf, len, "%s", v > 0 ? "+Inf" : "-Inf");
	else if (snprintf(buf, len, "%.15g", v) > 0 && strtod(buf, NULL) != v)
		snprintf(buf, len, "%.17g", v);
}

/* One line: name[suffix]{label="value",le="le"} value */
static void put_sample(struct dml_metrics_scrape *sc, const char *suffix,
		       const char *label_value, const char *le, const char *value)
{
	const struct family *f = sc->f;
	int labelled = f->label && label_value;

	put_str(sc, f->name);
	put_str(sc, suffix);
	if (labelled || le) {
		put_str(sc, "{");
		if (labelled) {
			put_str(sc, f->label);
			put_str(sc, "=\"");
			put_escaped(sc, label_value, 1);
			put_str(sc, "\"");
		}
		if (le) {
			put_str(sc, labelled ? ",le=\"" : "le=\"");
			put_str(sc, le);
			put_str(sc, "\"");
		}
		put_str(sc, "}");
	}
	put_str(sc, " ");
	put_str(sc, value);
	put_str(sc, "\n");
}

static void put_u64_sample(struct dml_metrics_scrape *sc, const char *suffix,
			   const char *label_value, const char *le, uint64_t v)
{
	char num[24];

	snprintf(num, sizeof(num), "%llu", (unsigned long long)v);
	put_sample(sc, suffix, label_value, le, num);
}

void dml_metrics_emit(struct dml_metrics_scrape *sc, const char *label_value, double value)
{
	char num[32];

	format_double(value, num, sizeof(num));
	put_sample(sc, "", label_value, NULL, num);
}

static void put_histogram(struct dml_metrics_scrape *sc, const struct series *x)
{
	const struct dml_histogram *h = x->hist;
	uint64_t cum = 0;
	char num[32];

	for (size_t i = 0; i < h->nbounds; i++) {
		cum += h->counts[i];
		format_double(h->bounds[i], num, sizeof(num));
		put_u64_sample(sc, "_bucket", x->label_value, num, cum);
	}
	cum += h->counts[h->nbounds];
	put_u64_sample(sc, "_bucket", x->label_value, "+Inf", cum);
	format_double(h->sum, num, sizeof(num));
	put_sample(sc, "_sum", x->label_value, NULL, num);
	put_u64_sample(sc, "_count", x->label_value, NULL, cum);
}

static void put_family(struct dml_metrics_scrape *sc, const struct family *f)
{
	sc->f = f;
	put_str(sc, "# HELP ");
	put_str(sc, f->name);
	put_str(sc, " ");
	put_escaped(sc, f->help, 0);
	put_str(sc, "\n# TYPE ");
	put_str(sc, f->name);
	put_str(sc, " ");
	put_str(sc, type_names[f->type]);
	put_str(sc, "\n");
	for (const struct series *x = f->series; x; x = x->next) {
		switch (x->kind) {
		case SRC_U64:
			put_u64_sample(sc, "", x->label_value, NULL, *x->u64);
			break;
		case SRC_FN:
			dml_metrics_emit(sc, x->label_value, x->fn(x->arg));
			break;
		case SRC_COLLECTOR:
			x->collect(sc, x->arg);
			break;
		case SRC_HISTOGRAM:
			put_histogram(sc, x);
			break;
		}
	}
}

/* Everything, appended to out. 0 or DML_ENOMEM. */
static int render_into(const struct dml_metrics *m, struct evbuffer *out)
{
	struct dml_metrics_scrape sc = { .out = out };

	for (const struct family *f = m->families; f; f = f->next)
		put_family(&sc, f);
	return sc.failed ? DML_ENOMEM : 0;
}

int dml_metrics_render(const struct dml_metrics *m, char **text, size_t *len)
{
	struct evbuffer *b = evbuffer_new();
	size_t n;
	int rc;

	*text = NULL;
	if (!b)
		return DML_ENOMEM;
	rc = render_into(m, b);
	n = evbuffer_get_length(b);
	if (rc == 0 && (*text = malloc(n + 1)) == NULL)
		rc = DML_ENOMEM;
	if (rc == 0) {
		evbuffer_remove(b, *text, n);
		(*text)[n] = '\0';
		if (len)
			*len = n;
	}
	evbuffer_free(b);
	return rc;
}

/* ---- HTTP --------------------------------------------------------------- */

/* A short plain-text error; evhttp_send_error would drop our headers. */
static void http_refuse(struct evhttp_request *req, int code, const char *reason)
{
	struct evkeyvalq *headers = evhttp_request_get_output_headers(req);

	if (code == 405)
		evhttp_add_header(headers, "Allow", "GET");
	evhttp_add_header(headers, "Content-Type", "text/plain; charset=utf-8");
	evbuffer_add_printf(evhttp_request_get_output_buffer(req), "%d %s\n", code, reason);
	evhttp_send_reply(req, code, reason, NULL);
}

static void http_cb(struct evhttp_request *req, void *arg)
{
	struct dml_metrics *m = arg;
	const struct evhttp_uri *uri = evhttp_request_get_evhttp_uri(req);
	const char *path = uri ? evhttp_uri_get_path(uri) : NULL;

	if (!path || strcmp(path, "/metrics") != 0) {
		http_refuse(req, HTTP_NOTFOUND, "Not Found");
		return;
	}
	if (evhttp_request_get_command(req) != EVHTTP_REQ_GET) {
		http_refuse(req, 405, "Method Not Allowed");
		return;
	}
	if (render_into(m, evhttp_request_get_output_buffer(req)) != 0) {
		evbuffer_drain(evhttp_request_get_output_buffer(req), (size_t)-1);
		http_refuse(req, HTTP_INTERNAL, "Internal Server Error");
		return;
	}
	evhttp_add_header(evhttp_request_get_output_headers(req), "Content-Type",
			  CONTENT_TYPE);
	evhttp_send_reply(req, HTTP_OK, "OK", NULL);
}

static uint16_t bound_port_of(struct evhttp_bound_socket *bs)
{
	struct sockaddr_storage ss;
	socklen_t sl = sizeof(ss);

	if (getsockname(evhttp_bound_socket_get_fd(bs), (struct sockaddr *)&ss, &sl) != 0)
		return 0;
	return ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
					      : ((struct sockaddr_in *)&ss)->sin_port);
}

int dml_metrics_http_start(struct dml_metrics *m, struct event_base *base, const char *host,
			   uint16_t port, uint16_t *bound_port)
{
	/* Every method reaches http_cb, which answers 405 itself (evhttp
	 * would answer 501 for the ones it was not told about). */
	const int methods = EVHTTP_REQ_GET | EVHTTP_REQ_POST | EVHTTP_REQ_HEAD |
			    EVHTTP_REQ_PUT | EVHTTP_REQ_DELETE | EVHTTP_REQ_OPTIONS |
			    EVHTTP_REQ_TRACE | EVHTTP_REQ_CONNECT | EVHTTP_REQ_PATCH;
	struct evhttp_bound_socket *bs;
	uint16_t p;

	if (!m || !base || !host || m->http)
		return DML_EINVAL;
	m->http = evhttp_new(base);
	if (!m->http)
		return DML_ENOMEM;
	evhttp_set_allowed_methods(m->http, (uint16_t)methods);
	evhttp_set_timeout(m->http, HTTP_TIMEOUT_S);
	evhttp_set_max_headers_size(m->http, HTTP_MAX_HEADERS);
	evhttp_set_max_body_size(m->http, HTTP_MAX_BODY);
	evhttp_set_gencb(m->http, http_cb, m);
	errno = 0;
	bs = evhttp_bind_socket_with_handle(m->http, host, port);
	if (!bs) {
		dml_err("metrics: cannot listen on %s port %u: %s", host, port,
			errno ? strerror(errno) : "cannot resolve the address");
		dml_metrics_http_stop(m);
		return DML_EIO;
	}
	m->guard = dml_listener_guard(base, evhttp_bound_socket_get_listener(bs));
	p = bound_port_of(bs);
	dml_info("metrics: serving GET /metrics on %s port %u", host, p);
	if (bound_port)
		*bound_port = p;
	return 0;
}

void dml_metrics_http_stop(struct dml_metrics *m)
{
	if (m && m->http) {
		dml_listener_free(m->guard);
		m->guard = NULL;
		evhttp_free(m->http);
		m->http = NULL;
	}
}

int dml_metrics_serve(struct dml_metrics *m, struct event_base *base, const char *listen,
		      const char *port_file)
{
	char host[256];
	uint16_t port, bound;
	int rc;

	if (!listen || !listen[0])
		return 0;
	if (dml_parse_hostport(listen, host, sizeof(host), &port, 1) != 0)
		return DML_ECONF;
	rc = dml_metrics_http_start(m, base, host, port, &bound);
	if (rc == 0 && port_file && port_file[0])
		rc = dml_write_port_file(port_file, bound);
	return rc;
}

int dml_metrics_start(struct event_base *base, const char *listen, const char *port_file,
		      int (*add)(struct dml_metrics *m, void *arg), void *arg,
		      struct dml_metrics **out)
{
	*out = dml_metrics_new();
	if (add(*out, arg) != 0) {
		dml_err("metrics: a metric was refused");
		return DML_EINVAL;
	}
	return dml_metrics_serve(*out, base, listen, port_file);
}
