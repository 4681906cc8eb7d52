/*
 * The connection layer shared by every daemon and the client library: one
 * TCP connection on a libevent bufferevent, carrying dml frames.
 *
 * Each connection is an explicit state machine
 *   CONNECTING -> HANDSHAKE -> READY -> CLOSING -> (freed)
 * moved only by conn_set_state(), which logs every transition at debug level.
 * The handshake (auth.h) is done here, so no frame other than the handshake
 * reaches the owner before the peer proved it knows the cluster secret.
 *
 * Input: frames are parsed with frame.h, every length checked before any
 * allocation. A wake-up handles the frames the socket holds, read in as few
 * reads as it takes (one per large frame), up to DML_CONN_FRAMES_PER_WAKE
 * frames and about 512 KiB, so one busy peer cannot starve the others and
 * what a wake-up hands its owner stays a batch of sensible size (a server
 * commits each wake-up's pushes together). Payloads of 64 KiB and more are
 * read straight from the socket into their destination (the owner's buffer,
 * or a reusable per-connection one), bypassing the bufferevent's input
 * buffer: all of the payload but what came in the read that carried its head.
 * Over a Unix connection whose ends set up shared-memory rings at the
 * handshake (conn_ring.c, shm_ring.h), such payloads skip the socket: the
 * sender copies them into its ring and the receiver hands them over in place.
 * Output: sends first try a direct write when nothing is queued; what the
 * socket does not take is queued (copied, or referenced when the caller
 * promises the memory outlives the send). A peer whose queued output exceeds
 * the high watermark stops being read until it drains (backpressure).
 *
 * Teardown is never done inside a callback of the connection itself:
 * dml_conn_close() marks it closing and the loop frees it later, after
 * flushing what is queued (bounded by a timeout), then calls on_close once.
 */
#ifndef DML_CONN_H
#define DML_CONN_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#include <event2/event.h>

#include "proto/dml.pb-c.h"
#include "proto/frame.h"

#define DML_CONN_FRAMES_PER_WAKE 64

enum dml_conn_state {
	DML_CONN_CONNECTING = 0,
	DML_CONN_HANDSHAKE = 1,
	DML_CONN_READY = 2,
	DML_CONN_CLOSING = 3
};

struct dml_conn;

/** Callbacks of a connection's owner. arg is the owner's pointer. */
struct dml_conn_ops {
	/*
	 * Acceptor side: the peer's HELLO passed the proof check. Fill welcome
	 * (already holding role, node id, cluster, nonce, proof) with anything
	 * extra, or return an error code to refuse the peer.
	 */
	int (*on_hello)(struct dml_conn *c, const Dml__Handshake *hello,
			Dml__Handshake *welcome, void *arg);
	/* Connecting side: the acceptor's WELCOME passed the proof check. */
	int (*on_welcome)(struct dml_conn *c, const Dml__Handshake *welcome, void *arg);
	/* The connection reached READY. */
	void (*on_ready)(struct dml_conn *c, void *arg);
	/*
	 * Optional: where the payload of a frame should be read to. Return a
	 * buffer of meta->payload_bytes bytes, or NULL for the connection's own.
	 */
	void *(*payload_dest)(struct dml_conn *c, const Dml__Meta *meta, void *arg);
	/*
	 * A complete, validated frame on a READY connection. payload is
	 * contiguous and valid until the call returns. Return 0, or an error to
	 * close the connection (it is logged with the peer's name), or
	 * DML_CONN_HOLD: the frame is kept and nothing more is read from the
	 * peer until dml_conn_release(), which hands the same frame again.
	 */
	int (*on_frame)(struct dml_conn *c, const Dml__Meta *meta, const uint8_t *payload,
			size_t len, void *arg);
	/* The connection is gone; err 0 for a clean close. Called once. */
	void (*on_close)(struct dml_conn *c, int err, void *arg);
};

/** Identity and limits of this end of a connection. */
struct dml_conn_conf {
	struct dml_frame_limits limits;
	const uint8_t *secret;      /* borrowed; must outlive the connection */
	size_t secret_len;
	const char *cluster;        /* borrowed */
	uint32_t role;              /* Dml__Role of this end */
	uint32_t node_id;
	uint64_t incarnation;
	uint32_t job;
	uint64_t clock;             /* HELLO: a worker's clock when it (re)connects */
	uint32_t handshake_timeout_ms;
	size_t output_high_wm;      /* stop reading the peer above this much queued */
	int tcp_only;               /* dial TCP even to this host's Unix socket (local.h) */
};

/* on_frame's answer for a frame it cannot take yet (see on_frame). */
#define DML_CONN_HOLD 1

/** Sensible defaults: frame limits, 5 s handshake, 64 MiB output watermark. */
void dml_conn_conf_default(struct dml_conn_conf *conf);

/**
 * A daemon's end of its connections: the cluster secret read from
 * secret_file into *secret and *secret_len (the daemon wipes it with
 * dml_secret_free() when it goes), then conf's defaults with the daemon's
 * role, id, cluster (borrowed) and handshake timeout. The frame limits stay
 * the defaults' for the daemon to set. 0, or dml_secret_load()'s errors.
 */
int dml_conn_conf_daemon(struct dml_conn_conf *conf, uint32_t role, uint32_t node_id,
			 const char *cluster, uint32_t handshake_timeout_ms,
			 const char *secret_file, uint8_t **secret, size_t *secret_len);

/**
 * Wrap an accepted socket; the connection sends CHALLENGE at once. The
 * conf is copied (its pointers stay borrowed). DML_EIO on failure (fd closed).
 */
int dml_conn_accept(struct event_base *base, int fd, const struct dml_conn_conf *conf,
		    const struct dml_conn_ops *ops, void *arg, struct dml_conn **out);

/**
 * Connect to host:port (numeric or name) and run the handshake: through the
 * daemon's Unix socket when host is this machine and one listens there
 * (unless conf->tcp_only), else over TCP.
 */
int dml_conn_connect(struct event_base *base, const char *host, uint16_t port,
		     const struct dml_conn_conf *conf, const struct dml_conn_ops *ops,
		     void *arg, struct dml_conn **out);

enum dml_send_flags {
	DML_SEND_COPY = 0,     /* payload may change once send returns */
	DML_SEND_REF = 1       /* payload stays valid until the peer answers */
};

/**
 * Send one frame; the payload is the concatenation of iov[0..iovcnt).
 * Returns DML_ECLOSED when closing, DML_EFRAME_PAYLOAD if over the limit,
 * DML_ENOMEM.
 */
int dml_conn_sendv(struct dml_conn *c, Dml__Meta *meta, const struct iovec *iov,
		   int iovcnt, int flags);
/** Called once when a pinned payload is no longer needed (see below). */
typedef void (*dml_conn_release_fn)(const void *data, size_t len, void *token);

/**
 * Send one frame whose payload the caller keeps unchanged until release is
 * called: at once if the socket takes it all, otherwise when the queued
 * remainder is written or dropped. No copy is made. release is called on
 * every path, errors included.
 */
int dml_conn_send_pinned(struct dml_conn *c, Dml__Meta *meta, const void *payload,
			 size_t len, dml_conn_release_fn release, void *token);

/** Send one frame with a single payload buffer (or none). */
int dml_conn_send(struct dml_conn *c, Dml__Meta *meta, const void *payload,
		  size_t len, int flags);
/**
 * Send a frame of type that carries nothing but the request it answers (an
 * ACK, a HEARTBEAT's echo), from this end's node id.
 */
int dml_conn_send_plain(struct dml_conn *c, Dml__MsgType type, uint64_t request_id);
/** Send an ERROR frame answering request_id (0 if none). */
int dml_conn_send_error(struct dml_conn *c, uint64_t request_id, int code,
			const char *message);

/**
 * The message of an ERROR answering request_id: fmt and ap written to msg
 * (len bytes, cut to fit), and the debug line a daemon logs for every
 * refusal, naming the peer and the request.
 */
void dml_conn_error_vformat(const struct dml_conn *c, uint64_t request_id, char *msg,
			    size_t len, const char *fmt, va_list ap);

/**
 * Close: stop reading, flush queued output (at most 2 s), then free and call
 * on_close(err). Safe to call from any callback, more than once.
 */
void dml_conn_close(struct dml_conn *c, int err);

/**
 * Hand the frame on_frame held to on_frame again (from the loop, soon) and
 * read on. Nothing for a connection that holds nothing or is closing.
 */
void dml_conn_release(struct dml_conn *c);

/**
 * Free the connection's own payload buffer (kept for reuse, as large as the
 * largest payload received) once the frame being handled is done: after a
 * refused request, so that a big payload refused costs no memory after.
 */
void dml_conn_trim(struct dml_conn *c);

/**
 * Change the output high watermark (conf's output_high_wm): reading stops
 * once more is queued, and resumes when it drained to half.
 */
void dml_conn_set_output_wm(struct dml_conn *c, size_t high_wm);

/** 1 while on_frame holds a frame of c. */
int dml_conn_held(const struct dml_conn *c);

/** Close immediately without flushing (shutdown paths); on_close still runs. */
void dml_conn_abort(struct dml_conn *c, int err);

enum dml_conn_state dml_conn_state(const struct dml_conn *c);
/** "host:port" of the peer, for logs; "unix:..." over a Unix socket. */
const char *dml_conn_peer(const struct dml_conn *c);
/** 1 when the connection runs over a Unix socket (known from the handshake on). */
int dml_conn_is_local(const struct dml_conn *c);
/** The peer's handshake (role, node_id, incarnation, job, zone) once READY. */
const Dml__Handshake *dml_conn_peer_hello(const struct dml_conn *c);
/** Bytes queued for the peer. */
size_t dml_conn_output_pending(const struct dml_conn *c);
/** Owner data, and counters. */
void dml_conn_set_arg(struct dml_conn *c, void *arg);
uint64_t dml_conn_bytes_in(const struct dml_conn *c);
uint64_t dml_conn_bytes_out(const struct dml_conn *c);
/** Payload bytes read straight from the socket into their destination. */
uint64_t dml_conn_direct_bytes(const struct dml_conn *c);
/** Payload bytes, sent and received, that went through shared-memory rings. */
uint64_t dml_conn_ring_bytes(const struct dml_conn *c);

#endif
