/*
 * What the files of the connection layer share (conn.c: state, teardown and
 * construction; conn_send.c; conn_recv.c; conn_handshake.c): the connection
 * itself and the steps one file calls in another. Not for anything outside
 * proto/; everything here runs on the connection's event loop.
 */
#ifndef DML_CONN_INTERNAL_H
#define DML_CONN_INTERNAL_H

#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/util.h>

#include "proto/auth.h"
#include "proto/conn.h"
#include "proto/dml.pb-c.h"
#include "proto/frame.h"
#include "proto/shm_ring.h"

/* Payloads at least this large (the whole payload, however it arrives) are
 * read straight into their destination. */
#define DIRECT_READ_MIN (64u * 1024)

struct dml_conn {
	struct event_base *base;
	struct bufferevent *bev;
	int fd;
	enum dml_conn_state state;
	int acceptor;                 /* we accepted: we send CHALLENGE */
	int local;                    /* over a Unix socket (local.h), not TCP */
	int got_challenge;            /* connector: CHALLENGE seen, HELLO sent */
	struct dml_conn_conf conf;
	const struct dml_conn_ops *ops;
	void *arg;
	char peer[64];
	uint8_t my_nonce[DML_NONCE_LEN];
	uint8_t peer_nonce[DML_NONCE_LEN];
	Dml__Meta *peer_meta;         /* HELLO or WELCOME of the peer */

	/* the frame being received */
	int have_meta;
	struct dml_frame_header hdr;
	Dml__Meta *meta;
	uint8_t *dest;
	size_t got;
	int direct;                   /* payload being read by direct_ev */
	int lowat;                    /* SO_RCVLOWAT currently set */
	int sock_hint;                /* this wake-up's last read of ours: filled
				       * its room (1), emptied the socket (-1) */

	uint8_t *rxbuf;               /* own payload buffer, reused */
	size_t rxcap;
	int trim;                     /* free rxbuf once the frame is handled */

	struct event *handshake_timer;
	struct event *resume_ev;      /* continue after the per-wake frame cap */
	struct event *direct_ev;
	struct event *free_ev;        /* deferred teardown */
	struct event *flush_timer;
	int closing;
	int close_err;
	int read_paused;              /* backpressure */
	int held;                     /* on_frame held the current frame */
	int corked;                   /* replies to a batch of frames go out together */
	struct evbuffer *cork;        /* what a batch queued, out of the bufferevent's
				       * sight: no write event to arm and disarm */
	uint64_t bytes_in, bytes_out;
	uint64_t wake_in0;            /* bytes_in when this wake-up began */
	uint64_t direct_bytes;        /* payload bytes read straight into place */

	/* Unix connections: shared-memory rings for large payloads (shm_ring.h) */
	struct dml_shm shm;           /* mapped: passed (connector) or taken (acceptor) */
	struct dml_shm_tx ring_tx;
	struct dml_shm_rx ring_rx;
	int ring_on;                  /* both ends agreed: rings in use */
	int ring_frame;               /* the current frame's payload is in ring_rx */
	uint64_t ring_end;            /* ... and frees it up to here once handled */
	struct event *prelude_ev;     /* acceptor: waiting for the connector's prelude */
	uint64_t ring_bytes;          /* payload bytes through the rings, both ways */
};

/* Moves c to state st and logs the change. */
void dml_conn_set_state(struct dml_conn *c, enum dml_conn_state st);

/*
 * The frames a batch queued in c->cork: written now when write is set (one
 * writev), and what the socket did not take handed to the bufferevent.
 */
void dml_conn_cork_flush(struct dml_conn *c, int write);

/* A protocol failure: log one line, tell the peer if possible, close. */
void dml_conn_fail(struct dml_conn *c, int err, uint64_t request_id);

/* Connected: names the peer and, as the acceptor, sends CHALLENGE. */
void dml_conn_start_handshake(struct dml_conn *c);

/* Returns 0 or an error; takes ownership of meta on success (kept). */
int dml_conn_handle_handshake(struct dml_conn *c, Dml__Meta *meta, int *kept);

/* The handshake's deadline passed (event callback; arg is the connection). */
void dml_conn_handshake_timeout_cb(evutil_socket_t fd, short what, void *arg);

/* The socket is readable for a payload read straight into its destination. */
void dml_conn_direct_read_cb(evutil_socket_t fd, short what, void *arg);

/* ---- shared-memory rings (conn_ring.c) ---- */

/* Acceptor sending CHALLENGE: 1 when it offers a ring (Unix connection);
 * reading then waits for the connector's prelude. */
int dml_conn_ring_offer(struct dml_conn *c);
/* Connector given a CHALLENGE that offers a ring: create and pass one. */
void dml_conn_ring_pass(struct dml_conn *c);
/* Handshake done: start using the rings if both ends have them (the
 * acceptor's WELCOME said so, peer_ring). */
void dml_conn_ring_start(struct dml_conn *c, int peer_ring);
/* A frame head of the peer's (raw, 16 bytes): when it carries the ring flag
 * on a connection whose rings are on, clear it in raw and note it. */
void dml_conn_ring_flagged(struct dml_conn *c, uint8_t *raw);
/* The current ring frame's payload: into the owner's buffer or in place. */
int dml_conn_ring_payload(struct dml_conn *c);
/* The current frame was handled: its ring space is the sender's again. */
void dml_conn_ring_done(struct dml_conn *c);
/* Put a payload of len bytes (iov) in this end's ring: 1 with the meta's
 * ring fields set, 0 when it goes on the wire. */
int dml_conn_ring_put(struct dml_conn *c, Dml__Meta *meta, const struct iovec *iov,
		      int iovcnt, size_t len);
/* Unmap and drop the prelude event. */
void dml_conn_ring_free(struct dml_conn *c);

/* Handles the frames that arrived, up to the per-wake-up cap; replies to them
 * go out together. */
void dml_conn_process_input(struct dml_conn *c);

#endif /* DML_CONN_INTERNAL_H */
