/*
 * dml-bench's timing core, shared by pushpull's two paths: latency
 * statistics, the windowed request driver (bench_drive.c) that both the
 * libdml path (bench_pushpull.c) and the raw-TCP baseline (bench_raw.c)
 * run on, so that both are timed by exactly the same code, and the
 * baseline's entry point.
 *
 * Nothing declared here may talk to a dml server or depend on libdml: the
 * baseline must measure plain sockets and nothing else.
 */
#ifndef DML_BENCH_H
#define DML_BENCH_H

#include <stddef.h>
#include <stdint.h>

/** Per-request latencies of one measurement, in nanoseconds. */
struct bench_lat {
	uint64_t *ns;
	size_t n, cap;
};

/** Start empty; nothing is allocated until the first sample. */
void bench_lat_init(struct bench_lat *l);
/** Free the samples; l may be reused after bench_lat_init(). */
void bench_lat_destroy(struct bench_lat *l);
/** Record one latency. */
void bench_lat_add(struct bench_lat *l, uint64_t ns);
/** Append every sample of src to dst. */
void bench_lat_append(struct bench_lat *dst, const struct bench_lat *src);
/**
 * Nearest-rank quantile (q in [0, 1]) in microseconds; 0 when empty.
 * Sorts the samples in place.
 */
double bench_lat_quantile_us(struct bench_lat *l, double q);

/** How long one measurement runs. */
struct bench_plan {
	double warmup_s; /* requests run but are not counted */
	double seconds;  /* the counted part */
};

/** What one measurement found, all connections together. */
struct bench_result {
	uint64_t requests; /* completed inside the counted window */
	double seconds;
	double rps;
	double gbps; /* value bytes only; 1 GB = 1e9 bytes */
	double p50_us, p99_us;
};

/**
 * One connection's source of requests. submit() starts a request in `slot`
 * (0..window-1, reused round robin); complete() blocks until the request in
 * `slot` is done. Requests complete in the order they were submitted. Both
 * return 0 or a DML_E... code, and are only ever called from one thread.
 * A thread that drives several connections blocks in complete() on one
 * while the others' replies wait: their sockets or event loop must let
 * them queue meanwhile.
 */
struct bench_driver {
	void *ctx;
	int (*submit)(void *ctx, unsigned slot);
	int (*complete)(void *ctx, unsigned slot);
};

/** A slow measurement may run this many times its counted time to count enough. */
#define BENCH_MAX_STRETCH 10

/**
 * Run drivers[0..conns-1] from `threads` threads (0: one per connection;
 * connection i is driven by thread bench_thread_of(i, threads)), each
 * thread keeping `window` requests in flight on each of its connections
 * (round robin: top a window up, then complete its oldest request and move
 * on), for plan's warm-up plus counted time, then drain. The counted time
 * is stretched (at most tenfold) until window * conns requests completed in
 * it. Latency is submit to completion of each request completed in the
 * counted time. value_bytes is what one request moves, for GB/s. Returns 0,
 * the first driver error, DML_EIO when a thread cannot start, or
 * DML_ECLOSED when interrupted (*res is then filled from what was
 * measured).
 */
int bench_run_drivers(const struct bench_driver *drivers, unsigned conns,
		      unsigned threads, unsigned window, const struct bench_plan *plan,
		      uint64_t value_bytes, struct bench_result *res);

/** The thread (of `threads`, 0: one per connection) that drives connection conn. */
unsigned bench_thread_of(unsigned conn, unsigned threads);

/** Non-zero once SIGINT or SIGTERM arrived: drivers stop submitting. */
int bench_interrupted(void);

/** Bytes one raw-TCP request sends after its header, and its reply's size. */
struct bench_raw_shape {
	uint32_t req_bytes;
	uint32_t reply_bytes; /* at least 1; a push is answered by an 8-byte ack */
	int unix_socket;      /* over a Unix socket pair instead of loopback TCP */
};

/** Largest req_bytes or reply_bytes bench_raw_run() accepts. */
#define BENCH_RAW_MAX_LEN (1u << 30)

/**
 * The raw-TCP baseline: `conns` blocking loopback connections with
 * TCP_NODELAY (or Unix socket pairs: shape->unix_socket), each answered by
 * its own thread of this process, moving shape's bytes request/response
 * style with the same client threads, window and timing as the libdml
 * path. Returns 0, DML_EINVAL (bad shape or counts), DML_EIO,
 * DML_ECONN, DML_ENOMEM or DML_ECLOSED (interrupted).
 */
int bench_raw_run(const struct bench_raw_shape *shape, unsigned conns, unsigned threads,
		  unsigned window, const struct bench_plan *plan, uint64_t value_bytes,
		  struct bench_result *res);

#endif
