/*
 * dml.h - the dml client library (libdml).
 *
 * A program that trains against dml parameter servers connects once
 * (dml_connect), then in each iteration pulls parameters, computes, pushes
 * gradients and ticks its clock. Push and pull are asynchronous: they return
 * a handle at once and dml_wait() blocks until the request is done. Requests
 * are split by shard and sent to all servers in parallel; many may be in
 * flight on each connection.
 *
 *   dml_opts_t *o; dml_t *d; dml_handle_t h;
 *   dml_opts_new(&o);
 *   dml_opts_set(o, "servers", "127.0.0.1:7001,127.0.0.1:7002");
 *   dml_opts_set(o, "secret_file", "/etc/dml/secret");
 *   dml_opts_set(o, "worker_id", "1");
 *   if (dml_connect(o, &d) != 0) ...
 *   dml_pull_range(d, 0, 0, n, w, &h);  dml_wait(d, h);
 *   ... compute gradient g ...
 *   dml_push_range(d, 0, 0, n, g, &h);  dml_wait(d, h);
 *   dml_clock(d);
 *   dml_close(d); dml_opts_free(o);
 *
 * Conventions: every function returns 0 or a negative DML_E... code
 * (dml_strerror() explains it; dml_error_detail() has the last message a
 * server sent). A dml_t is not thread-safe: use one per thread. All network
 * progress happens inside library calls (dml_wait, dml_progress and the
 * request calls themselves); there is no hidden thread.
 *
 * Buffers: the keys and values given to a push or pull must stay valid and
 * unmodified until dml_wait() returns for its handle; a pull writes its
 * output buffer only before its dml_wait() returns 0. A push or pull that
 * returns an error gives no handle; when it spans several servers, the parts
 * already sent to the others may still be applied.
 *
 * Consistency: each pull carries the caller's clock c. A server answers it
 * only when every live worker of the job has reached clock c - s, where s is
 * the job's staleness bound (0 = BSP, negative = asynchronous).
 *
 * Delivery: pushes carry (worker, sequence number). If a connection breaks,
 * the library reconnects with backoff and resends every request not yet
 * answered; a server applies a resent push once.
 */
#ifndef DML_H
#define DML_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#include "dml_error.h"

typedef struct dml dml_t;
typedef struct dml_opts dml_opts_t;
/** A request in flight; 0 is never a valid handle. */
typedef uint64_t dml_handle_t;

/**
 * Client options. Keys (all optional unless said):
 *   servers             comma-separated host:port list (required)
 *   secret_file         cluster secret, mode 0600 (required)
 *   cluster             cluster name, must match the servers' ("dml")
 *   worker_id           this worker's node id, 1..2^31 (required for workers)
 *   role                "worker" (takes part in clocks) or "control"
 *   job                 job id (0)
 *   connect_timeout_ms  per connection attempt (5000)
 *   reconnect_timeout_ms  give up on a lost server after this long (30000)
 *   request_timeout_ms  fail a request not answered in time; 0 = never (0)
 *   max_payload         largest frame payload accepted (256M)
 * dml_opts_set: DML_EINVAL for an unknown key, DML_ECONF for a bad value.
 */
int dml_opts_new(dml_opts_t **out);
int dml_opts_set(dml_opts_t *opts, const char *key, const char *value);
/** Load options from a config file's [client] section; err gets file:line. */
int dml_opts_load(dml_opts_t *opts, const char *path, char *err, size_t errlen);
void dml_opts_free(dml_opts_t *opts);

/**
 * Connect and authenticate to every server, learn their tables and key
 * ranges. Returns DML_ECONN, DML_ETIMEDOUT, DML_EAUTH, DML_ECLUSTER,
 * DML_ESECRET, DML_ECONF (shard ranges inconsistent) or DML_EINVAL.
 */
int dml_connect(const dml_opts_t *opts, dml_t **out);

/**
 * Leave cleanly: wait (bounded by request_timeout_ms, or 10 s) for pushes in
 * flight to be acknowledged, tell servers this worker leaves, free all.
 */
void dml_close(dml_t *d);

/** Floats per key of a table; DML_ENOTFOUND if no server holds it. */
int dml_table_width(dml_t *d, uint32_t table, uint32_t *width);
/** Dense tables: number of keys (0..n-1); sparse tables: 0. */
int dml_table_size(dml_t *d, uint32_t table, uint64_t *keys);

/** Push gradients for n keys (vals: n * width floats). */
int dml_push(dml_t *d, uint32_t table, const uint64_t *keys, size_t n,
	     const float *vals, dml_handle_t *h);
/** Pull the values of n keys into out (n * width floats). */
int dml_pull(dml_t *d, uint32_t table, const uint64_t *keys, size_t n, float *out,
	     dml_handle_t *h);
/** Push gradients for the dense key range [begin, end). */
int dml_push_range(dml_t *d, uint32_t table, uint64_t begin, uint64_t end,
		   const float *vals, dml_handle_t *h);
/** Pull the dense key range [begin, end) into out. */
int dml_pull_range(dml_t *d, uint32_t table, uint64_t begin, uint64_t end, float *out,
		   dml_handle_t *h);

/**
 * Block until the request is done and return its result (0 or an error).
 * Each handle is waited once; h == 0 waits for nothing and returns 0.
 */
int dml_wait(dml_t *d, dml_handle_t h);
/** Is the request done? Sets *done; does not block or consume the handle. */
int dml_test(dml_t *d, dml_handle_t h, int *done);
/** Wait for every request in flight; returns the first error seen. */
int dml_wait_all(dml_t *d);

/**
 * End the current iteration: the clock advances by one and every server is
 * told. Does not block. Returns an error if a server is gone for good.
 */
int dml_clock(dml_t *d);
/** The caller's current clock (0 before the first dml_clock). */
uint64_t dml_current_clock(const dml_t *d);
/**
 * After a pull completed: the smallest "slowest live worker clock" that the
 * servers reported when they answered it (to verify the staleness bound).
 */
uint64_t dml_last_pull_min_clock(const dml_t *d);

/** Drive the network for at most timeout_ms (0 = just what is ready). */
int dml_progress(dml_t *d, int timeout_ms);

/** The last error message received from a server, or "". */
const char *dml_error_detail(const dml_t *d);



#ifdef __cplusplus
}
#endif

#endif
