/*
 * The accepted connections of a daemon: the limit on how many, the list the
 * daemon walks, and a clean stop (close them all, flushing, and leave the
 * loop once the last is gone or a grace period ran out). dml-server and
 * dml-sched embed a struct dml_peer as the first member of their session.
 */
#ifndef DML_PEERS_H
#define DML_PEERS_H

#include <stddef.h>
#include <stdint.h>

#include <event2/event.h>

#include "proto/conn.h"

struct dml_peer {
	struct dml_peer *prev, *next;
	struct dml_conn *conn;
};

/* Unauthenticated connections held at once unless the daemon says otherwise. */
#define DML_PEERS_PREAUTH_DEFAULT 64

struct dml_peers {
	struct event_base *base;
	size_t max;                /* refuse connections beyond this */
	size_t max_preauth;        /* most connections still in their handshake */
	uint64_t preauth_dropped;  /* handshakes cut short to make room */
	uint64_t ring_bytes_closed; /* dml_conn_ring_bytes of the connections gone */
	size_t count;
	struct dml_peer *head;
	struct event *grace;
	int stopping;
};

/**
 * Start an empty set on base, holding at most max connections, of which at
 * most DML_PEERS_PREAUTH_DEFAULT (max_preauth, which the daemon may set
 * after init) not authenticated yet.
 */
void dml_peers_init(struct dml_peers *ps, struct event_base *base, size_t max);

/**
 * Accept fd as p's connection and add p to the set; the connection calls
 * ops with arg. Peers that have not authenticated cannot crowd out those
 * who have: when max_preauth connections are still in their handshake, or
 * the set is full and one of its connections is, the oldest such is closed
 * to make room (counted in preauth_dropped). When stopping, or full of
 * authenticated peers, the fd is closed (logged) and DML_ECLOSED or
 * DML_ECONN returned; on any error p is not added and the caller frees it.
 */
int dml_peers_accept(struct dml_peers *ps, int fd, struct dml_peer *p,
		     const struct dml_conn_conf *conf, const struct dml_conn_ops *ops,
		     void *arg);

/** Connections open in ps (a struct dml_peers *): a daemon's metric callback. */
double dml_peers_metric_count(void *ps);

/** Of those, the connections over a Unix socket (proto/local.h). */
double dml_peers_metric_local(void *ps);
/** Metric callback: payload bytes the peers' connections moved through rings (shm_ring.h). */
double dml_peers_metric_ring_bytes(void *ps);

/** Take p out of the set; call from the connection's on_close. */
void dml_peers_remove(struct dml_peers *ps, struct dml_peer *p);

/**
 * Begin a clean stop: refuse new peers, close every connection after its
 * output is flushed, and leave the loop when the last one is gone or after
 * grace_s seconds, whichever comes first.
 */
void dml_peers_shutdown(struct dml_peers *ps, int grace_s);

/**
 * After the loop returned: drop the connections the grace period left and
 * run their teardown (their on_close still runs), free the timer.
 */
void dml_peers_destroy(struct dml_peers *ps);

#endif
