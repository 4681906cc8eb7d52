/*
 * The scheduler link: how a node (dml-server now, dml-worker later) keeps
 * itself registered with dml-sched.
 *
 * A link is the connecting side of one proto/conn.h connection. Once the
 * handshake succeeds it sends REGISTER with the node's description, waits
 * for REGISTER_REPLY, then sends HEARTBEAT every heartbeat_interval_ms the
 * scheduler asked for. When the connection breaks, or the scheduler stays
 * silent for too long, it reconnects with backoff (20 ms doubling to 2 s)
 * and registers again, for as long as it lives. It runs entirely on the
 * caller's event loop and never blocks it (a host name, rather than a
 * numeric address, is resolved by the connection layer at each attempt).
 *
 * It logs state changes once: registered, lost, refused, leaving; a
 * scheduler that stays unreachable is not logged again at every retry.
 */
#ifndef DML_SCHED_LINK_H
#define DML_SCHED_LINK_H

#include <stdint.h>

#include <event2/event.h>

#include "proto/conn.h"
#include "proto/dml.pb-c.h"

struct dml_sched_link;

/**
 * Fills what a heartbeat carries beyond liveness: info (role and node_id
 * set) goes as Meta.node; what it points to must live until the call
 * returns to the link (the heartbeat is sent before the next one).
 */
typedef void (*dml_sched_link_beat_fn)(Dml__NodeInfo *info, void *arg);

/**
 * Start registering with the scheduler at host:port. The first connection
 * attempt is made from the loop, so this returns at once.
 *
 * conn_conf is copied; the memory it points to (secret, cluster) is borrowed
 * and must outlive the link. The connection's role, node id and incarnation
 * are taken from self (self->incarnation 0: conn_conf->incarnation), so the
 * handshake and the registration always agree.
 *
 * self is copied deeply: the caller may free it when this returns. Its role
 * must be SERVER, WORKER or AGGREGATOR; state, reason and last_heartbeat_ms
 * are the scheduler's to fill and are sent as given.
 *
 * Returns 0, or DML_EINVAL (NULL argument, empty host, port 0, a role that
 * does not register) with *out set to NULL.
 */
int dml_sched_link_new(struct event_base *base, const struct dml_conn_conf *conn_conf,
		       const char *host, uint16_t port, const Dml__NodeInfo *self,
		       struct dml_sched_link **out);

/**
 * What the scheduler sends a node beyond the registration's own replies
 * (ASSIGN to workers, SHARDMAP to servers, ACKs and replies to what the node
 * sent with dml_sched_link_send): handed to the owner on the loop, only
 * while registered. m is valid during the call. An ERROR reaches the
 * handler only when it answers a frame the owner sent (with a request id
 * dml_sched_link_send chose); one refusing the registration or a heartbeat
 * is the link's own business: it registers again.
 */
typedef void (*dml_sched_link_frame_fn)(struct dml_sched_link *l, const Dml__Meta *m,
					void *arg);

/** Set (or clear, with NULL) the frame handler. */
void dml_sched_link_set_handler(struct dml_sched_link *l, dml_sched_link_frame_fn fn,
				void *arg);

/** Have every heartbeat carry what fn fills (NULL: none). */
void dml_sched_link_set_beat(struct dml_sched_link *l, dml_sched_link_beat_fn fn, void *arg);

/* Room for a registered address: a host name and ":port", brackets too. */
#define DML_ADDRESS_MAX 300

/**
 * The address a node registers under: advertise when set, else listen's
 * host with the port it bound ("[host]:port" for IPv6). 0, or DML_ECONF
 * when listen is not host:port.
 */
int dml_sched_advertised(const char *advertise, const char *listen, uint16_t bound_port,
			 char *out, size_t outlen);

/**
 * What a node does to register: self gets a random incarnation, never 0 (it
 * tells the scheduler a restarted process from a reconnecting one), a link
 * to scheduler ("host:port") is made as dml_sched_link_new() says, and its
 * frames go to fn(arg). Returns 0, DML_ECONF (scheduler is not host:port,
 * or the link refused it: logged), DML_EIO (no random bytes) or
 * dml_sched_link_new()'s other errors (logged).
 */
int dml_sched_link_start(struct event_base *base, const struct dml_conn_conf *conn_conf,
			 const char *scheduler, Dml__NodeInfo *self,
			 dml_sched_link_frame_fn fn, void *arg, struct dml_sched_link **out);

/**
 * Send a frame (no payload) to the scheduler on the registered connection;
 * m->sender is set to the node id, and m->request_id, when 0, to a fresh id
 * of the owner's (the scheduler echoes it in its reply; replies to frames
 * the scheduler sent, such as an ACK of a SHARDMAP, carry its id instead). DML_ECONN when not registered now:
 * the scheduler resends what a node needs after it registers again, so the
 * caller just tries again later.
 */
int dml_sched_link_send(struct dml_sched_link *l, Dml__Meta *m);

/** 1 while the scheduler has accepted the registration on the live connection. */
int dml_sched_link_registered(const struct dml_sched_link *l);

/** Heartbeat interval the scheduler asked for at the last registration, 0 before. */
uint32_t dml_sched_link_heartbeat_ms(const struct dml_sched_link *l);

/**
 * Leave: say BYE when registered (the scheduler then marks the node dead,
 * "left", rather than lost), close the connection after flushing what is
 * queued, and stop heartbeats and reconnects for good. Safe from any
 * callback of the loop and more than once. The link must still be freed
 * with dml_sched_link_free().
 */
void dml_sched_link_stop(struct dml_sched_link *l);

/**
 * Drop the connection and free the link; NULL is fine. Meant to be called
 * after the loop returned: it turns the loop (without blocking) until the
 * connection's deferred teardown has run. Called from inside a callback of
 * the same loop, it still frees the link at once and the connection is
 * released on the loop's next turn.
 */
void dml_sched_link_free(struct dml_sched_link *l);

#endif
