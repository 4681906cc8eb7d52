/*
 * Prometheus metrics for every dml daemon: a registry of counters, gauges
 * and histograms, their text exposition (format 0.0.4), and an HTTP endpoint
 * serving GET /metrics with libevent's evhttp on the daemon's own loop.
 *
 * The registry belongs to the daemon that made it (there is no global
 * state). Counters and gauges are read at scrape time from the daemon's own
 * integers (plain increments on the hot path), from a callback, or from a
 * collector that emits one sample per label value it finds (a worker, a
 * table). Histograms live in the registry and are fed with
 * dml_histogram_observe(), which neither allocates nor formats.
 *
 * Each metric (a family, identified by its name) has at most one label.
 * Registering a name again adds a series to the family; the description
 * must then be the same. Strings given at registration are copied.
 *
 * Must never: block the loop (a scrape formats in memory and hands the text
 * to evhttp), call into the daemon other than through its callbacks during a
 * scrape, or let an HTTP client do anything but read the text.
 */
#ifndef DML_METRICS_H
#define DML_METRICS_H

#include <stddef.h>
#include <stdint.h>

#include <event2/event.h>

enum dml_metric_type {
	DML_METRIC_COUNTER = 0,
	DML_METRIC_GAUGE = 1,
	DML_METRIC_HISTOGRAM = 2
};

/** What a metric is; the same for every series of a family. */
struct dml_metric_desc {
	const char *name;          /* [a-zA-Z_:][a-zA-Z0-9_:]* */
	const char *help;          /* one line of text (escaped on output) */
	enum dml_metric_type type;
	const char *label;         /* the label's name, or NULL for none */
	const double *bounds;      /* histograms: bucket upper bounds, finite, increasing */
	size_t nbounds;            /* histograms: 1..DML_METRICS_MAX_BUCKETS */
};

#define DML_METRICS_MAX_BUCKETS 64

struct dml_metrics;
struct dml_histogram;
/** Handed to a collector during a scrape; valid only inside the call. */
struct dml_metrics_scrape;

/** A gauge or counter evaluated at scrape time. */
typedef double (*dml_metrics_value_fn)(void *arg);
/** Emits the family's samples with dml_metrics_emit(), at scrape time. */
typedef void (*dml_metrics_collect_fn)(struct dml_metrics_scrape *sc, void *arg);

/** A new, empty registry (never NULL; allocation failure is fatal). */
struct dml_metrics *dml_metrics_new(void);

/** Stop the HTTP endpoint if running and free the registry. NULL is fine. */
void dml_metrics_free(struct dml_metrics *m);

/**
 * A counter or gauge series read from *value at every scrape; value must
 * stay valid until dml_metrics_free(). label_value is required when the
 * family has a label and ignored otherwise. Returns 0, or DML_EINVAL (bad
 * name or label, a histogram desc, a clash with the family registered
 * earlier, or a series with that label value already there).
 */
int dml_metrics_add_u64(struct dml_metrics *m, const struct dml_metric_desc *desc,
			const char *label_value, const uint64_t *value);

/** The same with a callback evaluated at every scrape (e.g. live workers). */
int dml_metrics_add_fn(struct dml_metrics *m, const struct dml_metric_desc *desc,
		       const char *label_value, dml_metrics_value_fn fn, void *arg);

/**
 * A counter or gauge whose series are found at scrape time: fn calls
 * dml_metrics_emit() once per sample (e.g. one per worker). Returns 0 or
 * DML_EINVAL as dml_metrics_add_u64().
 */
int dml_metrics_add_collector(struct dml_metrics *m, const struct dml_metric_desc *desc,
			      dml_metrics_collect_fn fn, void *arg);

/**
 * Inside a collector: one sample. label_value is escaped here; it is
 * ignored (and may be NULL) when the family has no label.
 */
void dml_metrics_emit(struct dml_metrics_scrape *sc, const char *label_value, double value);

/**
 * A histogram series with desc's buckets (plus +Inf). *out is owned by the
 * registry and lives until dml_metrics_free(). Returns 0 or DML_EINVAL
 * (as dml_metrics_add_u64(), or bounds that are missing, not finite, not
 * strictly increasing, or too many; the label may not be "le").
 */
int dml_metrics_add_histogram(struct dml_metrics *m, const struct dml_metric_desc *desc,
			      const char *label_value, struct dml_histogram **out);

/** Count one observation: a short loop over the bounds, nothing else. */
void dml_histogram_observe(struct dml_histogram *h, double value);

/** Observe the seconds elapsed since since_ns (a dml_now_ns() value). */
void dml_histogram_observe_since(struct dml_histogram *h, uint64_t since_ns);

/**
 * Bucket bounds in seconds for request latencies, 50 us to 10 s; static
 * storage, *n gets the count.
 */
const double *dml_metrics_latency_buckets(size_t *n);

/**
 * Render every family in registration order in the text format. *text is
 * malloc'ed and NUL-terminated (the caller frees it), *len (optional) gets
 * its length. Returns 0 or DML_ENOMEM.
 */
int dml_metrics_render(const struct dml_metrics *m, char **text, size_t *len);

/**
 * Serve GET /metrics on host:port (port 0: any free port) on base, which
 * must outlive the endpoint; other paths get 404, other methods on
 * /metrics 405. *bound_port (optional) gets the port bound. Returns 0,
 * DML_EINVAL (already serving), DML_ENOMEM or DML_EIO (cannot listen; the
 * log says why).
 */
int dml_metrics_http_start(struct dml_metrics *m, struct event_base *base, const char *host,
			   uint16_t port, uint16_t *bound_port);

/**
 * What every daemon's metrics_listen / metrics_port_file options mean: serve
 * on listen (host:port; "" or NULL: don't), then write the bound port to
 * port_file when it is set. 0, DML_ECONF (listen is not host:port), or
 * dml_metrics_http_start's and dml_write_port_file's errors.
 */
int dml_metrics_serve(struct dml_metrics *m, struct event_base *base, const char *listen,
		      const char *port_file);

/**
 * A daemon's metrics: *out is made (and set before add runs, so that the
 * daemon frees it on every path), add(*out, arg) registers every metric and
 * returns non-zero if one was refused (a bug in the daemon's table: logged,
 * DML_EINVAL), then the registry is served as dml_metrics_serve() says.
 * Called before the daemon writes its own port file, so that a ready daemon
 * serves its metrics.
 */
int dml_metrics_start(struct event_base *base, const char *listen, const char *port_file,
		      int (*add)(struct dml_metrics *m, void *arg), void *arg,
		      struct dml_metrics **out);

/** Stop serving: close the listener and every HTTP connection. Idempotent. */
void dml_metrics_http_stop(struct dml_metrics *m);

#endif
