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
 * server sent); each function's comment lists the codes it can return. A
 * dml_t is not thread-safe: use one per thread. All network progress
 * happens inside library calls (dml_wait, dml_progress and the request
 * calls themselves); there is no hidden thread. Log messages go to stderr
 * unless dml_set_log says otherwise.
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
 *
 * Shard maps: with `servers`, the map is fixed: each server reports its
 * tables and key ranges at connect. With `scheduler`, dml-sched hands out
 * the job's map, versioned, and the library follows it: a server that
 * answers DML_ERANGE (it applied nothing: the keys moved, or have not
 * arrived yet) makes the library fetch the map again and send the refused
 * part to the keys' new owners, split if they are now on several servers
 * (new servers are connected on the way). While the map has not changed
 * (the new owner is still receiving its rows), the part is retried with a
 * backoff from 20 ms to 500 ms. The caller sees none of this: the request
 * completes when every piece has. It fails with DML_ERANGE only if no
 * server takes the keys by request_timeout_ms (when set) or within 30 s.
 * A part sent to a server and not answered is never re-routed: after a
 * reconnect it goes to the same server again, which applies a push once.
 */
#ifndef DML_H
#define DML_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* In the source tree dml_error.h is proto/'s (includes there name their
 * folder); installed, it lies beside this header. */
#if defined(__has_include) && __has_include("proto/dml_error.h")
#include "proto/dml_error.h"
#else
#include "dml_error.h"
#endif

typedef struct dml dml_t;
typedef struct dml_opts dml_opts_t;
/** A request in flight; 0 is never a valid handle. */
typedef uint64_t dml_handle_t;

/**
 * Client options. Keys (all optional unless said):
 *   servers             comma-separated host:port list, in shard order
 *   scheduler           host:port of dml-sched; the shard map comes from it
 *                       (exactly one of servers and scheduler is required)
 *   secret_file         cluster secret, mode 0600 (required)
 *   cluster             cluster name, must match the servers' ("dml")
 *   worker_id           this worker's node id, 1..2^31 (required for workers)
 *   role                "worker" (takes part in clocks) or "control"
 *   job                 job id (0; with scheduler, 0 = the running job,
 *                       whose id is then kept)
 *   clock               clock to start at (0): a worker that rejoins a job
 *                       starts at the job's clock; servers count it there
 *   connect_timeout_ms  how long dml_connect tries, scheduler included (5000)
 *   reconnect_timeout_ms  give up on a lost server after this long (30000)
 *   request_timeout_ms  fail a request not answered in time; 0 = never (0)
 *   max_payload         largest frame payload accepted (256M)
 *   max_meta            largest frame metadata accepted (64K); a shard map
 *                       from the scheduler must fit
 *   spin_us             poll this long for a reply before sleeping (50)
 *   aggregator          host:port of this zone's dml-aggregator (none):
 *                       pushes and pulls of a worker go through it while it
 *                       is up, HELLO, CLOCK and BYE straight to the servers
 *   aggregator_timeout_ms  how long the aggregator may be unreachable with
 *                       requests in flight before they go straight to their
 *                       servers, sequence numbers unchanged (3000)
 *
 * dml_opts_new: every option at its default. 0 or DML_EINVAL (out NULL).
 */
int dml_opts_new(dml_opts_t **out);
/**
 * Set one option from its text. 0, DML_EINVAL (opts, key or value NULL,
 * an unknown key, or a value with a newline) or DML_ECONF (a bad value,
 * logged as a warning).
 */
int dml_opts_set(dml_opts_t *opts, const char *key, const char *value);
/**
 * Load options from a config file's [client] section, replacing every
 * option (those the file leaves out go back to their defaults). 0,
 * DML_EINVAL (opts or path NULL), DML_EIO (the file cannot be read) or
 * DML_ECONF (bad content); err gets "file:line: message". opts is
 * unchanged on failure.
 */
int dml_opts_load(dml_opts_t *opts, const char *path, char *err, size_t errlen);
/** Free options; NULL is fine. A dml_t does not keep its opts: free them any time. */
void dml_opts_free(dml_opts_t *opts);

/**
 * Connect and authenticate to every server, learn their tables and key
 * ranges. With scheduler, first ask dml-sched for the job's shard map (over
 * a connection kept open for later fetches; it uses this client's role and
 * node id and does not register), then connect to every server it lists.
 * All of it within connect_timeout_ms; a scheduler that has no map yet is
 * asked again until then. Returns DML_ECONN (a server or the scheduler
 * unreachable), DML_ETIMEDOUT, DML_EAUTH, DML_ECLUSTER, DML_ESECRET,
 * DML_ECONF (shard ranges inconsistent, or the scheduler's map is not
 * valid), DML_ENOTFOUND (the scheduler has no such job or no map for it),
 * DML_EINVAL (opts or out NULL, worker_id missing for role worker, both or
 * neither of servers and scheduler, an address not host:port), DML_ENOMEM
 * or DML_EIO (no event loop, no random incarnation). On failure *out is
 * NULL and no handle is left: the reason is logged.
 */
int dml_connect(const dml_opts_t *opts, dml_t **out);

/**
 * dml_connect, but on the event loop of share (another handle; NULL: a new
 * loop, as dml_connect): one thread can then keep requests in flight on many
 * handles, and while it waits on any of them the replies of all are taken
 * in. Every handle of one loop must be used from the same thread. The loop
 * lives until the last of its handles is closed, in any order. The codes of
 * dml_connect.
 */
int dml_connect_shared(const dml_opts_t *opts, dml_t *share, dml_t **out);

/**
 * Leave cleanly: wait (bounded by request_timeout_ms, or 10 s) for pushes in
 * flight to be acknowledged, tell servers this worker leaves, free all.
 * NULL is fine. Requests not waited for end with it (their handles die).
 */
void dml_close(dml_t *d);

/**
 * Floats per key of a table. 0, DML_EINVAL (d or width NULL) or
 * DML_ENOTFOUND (no server holds the table).
 */
int dml_table_width(dml_t *d, uint32_t table, uint32_t *width);
/**
 * Dense tables: number of keys (0..n-1); sparse tables: 0. 0, DML_EINVAL
 * (d or keys NULL) or DML_ENOTFOUND (no server holds the table).
 */
int dml_table_size(dml_t *d, uint32_t table, uint64_t *keys);

/*
 * Push and pull return at once; what they return is only whether the
 * request went out:
 *   DML_EINVAL     d, keys or the buffer NULL; a pull without h; n 0 or
 *                  over 2^32 - 1 keys; a range of a sparse table
 *   DML_ENOTFOUND  no server holds the table
 *   DML_ERANGE     a range that is empty or ends past the table's keys, a
 *                  key outside a dense table, or a key no server of the map
 *                  takes
 *   DML_ECONN      a server it goes to was given up on (see dml_wait)
 *   DML_ECLOSED, DML_EFRAME_PAYLOAD  sending failed: the connection is
 *                  closing, or a part is over max_payload
 *   DML_ENOMEM
 * A push with h NULL is sent without a handle: its error, if any, shows in
 * dml_wait_all. What the request came to is dml_wait's.
 */
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
 * Block until the request is done and return its result (0 or an error;
 * DML_EINTR after dml_interrupt, the handle then still unwaited).
 * Each handle is waited once; h == 0 waits for nothing and returns 0.
 * Besides DML_EINVAL (d NULL) and DML_ENOTFOUND (no such handle, or it was
 * waited already), a request can end with:
 *   the code of a server's ERROR answer (DML_ESHAPE, DML_EROLE,
 *     DML_ENOTFOUND, ...; DML_EIO for a code this library does not know)
 *   DML_ECONN      its server was lost for longer than reconnect_timeout_ms,
 *                  or it lost its connection 5 times without an answer (then
 *                  the cause the connection closed with, when known)
 *   DML_EAUTH, DML_ECLUSTER, DML_ECONF, ...  a reconnect was refused at
 *                  the handshake (with that code)
 *   DML_ETIMEDOUT  not answered within request_timeout_ms
 *   DML_ERANGE     no server took its keys in time (scheduler mode), or a
 *                  server refused them (fixed servers list)
 *   DML_ESHAPE, DML_ENOTFOUND  a new shard map changed or dropped its table
 *   a code of push and pull above: re-routing a piece failed
 */
int dml_wait(dml_t *d, dml_handle_t h);
/**
 * Is the request done? Sets *done; does not block or consume the handle.
 * 0, DML_EINVAL (d or done NULL) or DML_ENOTFOUND (no such handle).
 */
int dml_test(dml_t *d, dml_handle_t h, int *done);
/**
 * Wait for every request in flight; returns the first error seen (of
 * requests without a handle first, then of those not yet waited for: the
 * codes of dml_wait), DML_EINTR after dml_interrupt or DML_EINVAL (d
 * NULL). Handles stay valid for dml_wait.
 */
int dml_wait_all(dml_t *d);

/**
 * Make every wait on d, the one under way and all later ones, return
 * DML_EINTR instead of blocking: for a program that is stopping while a
 * pull waits on workers that may never come. The only call that may be
 * made from another thread or a signal handler while d is in use; the
 * waiting thread notices within 50 ms. dml_close then leaves without
 * waiting for pushes in flight (they are applied once or not at all).
 */
void dml_interrupt(dml_t *d);

/**
 * End the current iteration: the clock advances by one and every server of
 * the current map is told (one that joins later learns it when connected).
 * Does not block. With an aggregator, the servers are told once the pushes
 * sent through it before this call are answered (from within a later
 * library call), so that they never see the clock before those pushes. 0, DML_EINVAL (d NULL), DML_EROLE (role control) or
 * DML_ECONN (a server of the map is gone for good; the others were told).
 */
int dml_clock(dml_t *d);
/**
 * Move the clock on to clock (nothing if it is not ahead), telling every
 * server as dml_clock does: a worker that the job went on without (its
 * servers dropped it while it hung) takes up again at the job's clock
 * rather than holding the others back while it walks its missed clocks.
 * The codes of dml_clock.
 */
int dml_clock_to(dml_t *d, uint64_t clock);
/**
 * The weight of the pushes made from now on: how many batches of the job's
 * batch_size each pushed gradient sums over, the sum divided by batch_size
 * (a worker given twice batch_size examples a step pushes weight 2). A
 * server whose optimizer scales its step by the size of recent gradients
 * (adam, adagrad) takes such a push as that many steps of its mean
 * gradient, so unequal batches move the model as far per example as equal
 * ones; other optimizers apply the sum as it is. Default 1. DML_EINVAL
 * unless 0 < weight < inf.
 */
int dml_push_weight(dml_t *d, float weight);
/*
 * The figures below return 0 for d NULL; they cannot fail.
 */
/** The caller's current clock (the clock option before the first dml_clock). */
uint64_t dml_current_clock(const dml_t *d);
/**
 * After a pull completed: the smallest "slowest live worker clock" that the
 * servers reported when they answered it (to verify the staleness bound).
 */
uint64_t dml_last_pull_min_clock(const dml_t *d);
/**
 * Nanoseconds the pulls waited for so far were held by their servers for
 * the staleness bound, waiting for other workers' clocks (for a pull that
 * spans servers, the longest of them): of the time a caller waits, what
 * other workers cost it rather than its own communication.
 */
uint64_t dml_pulls_held_ns(const dml_t *d);
/**
 * Bytes sent to and received from the servers (and the aggregator) so far,
 * whole frames, over every connection this handle had: with the time its
 * requests took that was not held for others, what its link to the servers
 * carries.
 */
uint64_t dml_bytes(const dml_t *d);
/**
 * 1 while new pushes and pulls may go through the aggregator option's
 * dml-aggregator (its connection is up), 0 while they go straight to the
 * servers, or without an aggregator.
 */
int dml_aggregator_usable(const dml_t *d);

/* Link classes (dml_link_bytes): a link is across zones when this client's
 * zone option and the server's zone are both set and differ. */
#define DML_LINK_WITHIN_ZONE 0
#define DML_LINK_CROSS_ZONE 1

/**
 * The values pushed and pulled so far over links of one class
 * (DML_LINK_...): *floats gets their bytes as 32-bit floats, *sent the
 * bytes they took on the wire (a codec's encoding; the same as *floats
 * where they went as floats). A push counts at each server it is routed
 * to (once, however often it is resent there), a pull at its reply; keys
 * and frame headers do not count. 0 or DML_EINVAL (d, floats or sent
 * NULL, or no such class).
 */
int dml_link_bytes(const dml_t *d, int link_class, uint64_t *floats, uint64_t *sent);
/**
 * The L2 norm of a table's error-feedback residual: what its lossy pushes
 * did not send yet, to go with the next ones. *norm is 0 for a table with
 * none (its codecs are lossless, no lossy push yet, or no such table).
 * Reads the whole residual: one pass over the table's rows at most.
 * 0 or DML_EINVAL (d or norm NULL).
 */
int dml_residual_norm(const dml_t *d, uint32_t table, double *norm);

/**
 * Drive the network for at most timeout_ms (0 = just what is ready).
 * 0, DML_EINVAL (d NULL, timeout_ms < 0) or DML_EIO (the event loop failed).
 */
int dml_progress(dml_t *d, int timeout_ms);

/**
 * The last error message received from a server, or "". A request that
 * completed after being re-routed may leave the refusing server's message.
 * "" for d NULL; the string lives as long as d, and a later call on d may
 * change it.
 */
const char *dml_error_detail(const dml_t *d);

/**
 * The version of the shard map requests are routed by: 0 with a fixed
 * servers list, >= 1 with a scheduler. Returns 0 or DML_EINVAL.
 */
int dml_map_version(const dml_t *d, uint64_t *version);

/** Levels of libdml's log messages, most severe first (dml_set_log). */
#define DML_LEVEL_ERROR 0
#define DML_LEVEL_WARN 1
#define DML_LEVEL_INFO 2
#define DML_LEVEL_DEBUG 3

/**
 * Where a log message goes: level is a DML_LEVEL_..., msg one line as
 * libdml would print it ("dml: warn: ...", newline included), arg the
 * pointer given to dml_set_log. msg lives until the sink returns.
 */
typedef void (*dml_log_fn)(int level, const char *msg, void *arg);

/**
 * Send libdml's log messages at level or more severe (DML_LEVEL_ERROR ..
 * DML_LEVEL_DEBUG; DML_LEVEL_INFO by default) to sink, NULL for stderr
 * (the default). The setting is the process's: it holds for every dml_t
 * and for any other dml code in the process that logs. Not thread-safe:
 * set it before connecting. 0 or DML_EINVAL (level out of range; nothing
 * changes).
 */
int dml_set_log(dml_log_fn sink, void *arg, int level);

#ifdef __cplusplus
}
#endif

#endif
