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

#include "conn.h"
#include "dml.pb-c.h"

struct dml_sched_link;

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
