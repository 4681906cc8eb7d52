/*
 * The scheduler's node table: who registered, where each node serves, what
 * it measured about itself, and whether it is alive, suspect or dead, with
 * the reason of its last change.
 *
 * A pure state machine: no I/O, no clock, no logging. Every call takes the
 * time in milliseconds of one monotonic clock chosen by the caller, and each
 * transition is reported through one callback, so tests drive the table with
 * a fake clock and the daemon logs from the callback. Nodes are keyed by
 * (role, node_id) and listed in that order.
 *
 *   (new) ------------ register ------------> ALIVE
 *   ALIVE ---- no heartbeat for suspect_after_ms,
 *              or its connection closed -----> SUSPECT
 *   SUSPECT ---------- heartbeat ------------> ALIVE   (still connected)
 *   ALIVE, SUSPECT --- no heartbeat for
 *              dead_after_ms, or it left ----> DEAD
 *   any -------------- register ------------> ALIVE   (reason says why)
 *
 * A registration counts as a heartbeat. A DEAD node stays listed, so an
 * operator sees it, and stays dead until it registers again: heartbeats do
 * not revive it, because by then the cluster may have given its work away.
 * Nodes are never removed; later increments keep their profiles for the
 * assigner (shard/assign.h).
 *
 * Must never: trust a registration (every string and number is checked
 * before it is stored, and nothing is kept pointing into the caller's
 * message), or let time that runs backwards underflow an elapsed time.
 */
#ifndef DML_SCHED_NODES_H
#define DML_SCHED_NODES_H

#include <stddef.h>
#include <stdint.h>

#include "proto/dml.pb-c.h"

/* Longest strings a node may report, in bytes without the final NUL. */
#define DML_NODE_ZONE_MAX 63
#define DML_NODE_ADDRESS_MAX 261  /* a 255-byte host name, ':' and a port */
#define DML_NODE_DEVICE_MAX 127
#define DML_NODE_REASON_MAX 127

/** What a node measured about itself at registration (see Profile). */
struct dml_node_profile {
	char device[DML_NODE_DEVICE_MAX + 1];
	uint32_t cores;
	uint64_t memory_bytes;
	double gflops;             /* 0: not measured */
	double examples_per_s;     /* 0: not measured */
	double link_mbps;          /* 0: not measured */
};

/** One node as the scheduler sees it. Read-only for everyone but nodes.c. */
struct dml_node {
	uint32_t role;             /* Dml__Role: WORKER, SERVER or AGGREGATOR */
	uint32_t node_id;          /* >= 1, unique within the role */
	char zone[DML_NODE_ZONE_MAX + 1];
	char address[DML_NODE_ADDRESS_MAX + 1]; /* "" when it serves nothing */
	uint32_t shard_index;      /* servers: position in shard_count */
	uint32_t shard_count;      /* 0 when not a shard */
	uint64_t incarnation;      /* changes each time the process starts */
	struct dml_node_profile profile;
	Dml__NodeState state;
	char reason[DML_NODE_REASON_MAX + 1]; /* why the state last changed */
	int connected;             /* registered and its connection open; never
				    * set on a DEAD node (its owner drops the
				    * connection of a node that dies) */
	uint64_t registered_ms;    /* time of the last registration */
	uint64_t last_heartbeat_ms; /* time of the last heartbeat or registration */
	uint64_t changed_ms;       /* time of the last transition */
	/* aggregators: the counters of the last heartbeat (no pointers in it) */
	Dml__AggregatorStats agg;
	int agg_reported;
};

struct dml_nodes;

/**
 * Called after every transition, re-registrations of a node that stays
 * ALIVE included. old is DML__NODE_STATE__NODE_UNKNOWN for a new node. The
 * callback must not call back into the table.
 */
typedef void (*dml_nodes_change_fn)(const struct dml_node *node, Dml__NodeState old,
				    void *arg);

/**
 * A new, empty table. A node is SUSPECT after suspect_after_ms without a
 * heartbeat and DEAD after dead_after_ms. on_change may be NULL.
 * @return 0, or DML_EINVAL unless 0 < suspect_after_ms < dead_after_ms.
 */
int dml_nodes_new(uint64_t suspect_after_ms, uint64_t dead_after_ms,
		  dml_nodes_change_fn on_change, void *arg, struct dml_nodes **out);

/** Free the table and every node. NULL is fine. */
void dml_nodes_free(struct dml_nodes *t);

/**
 * Check a registration without storing it. why (optional, whylen bytes)
 * gets a one-line reason on failure.
 * @return 0; DML_EROLE for a role other than WORKER, SERVER or AGGREGATOR;
 *         DML_EINVAL for node_id 0, a zone, address or device that is too
 *         long or holds control characters, an address that is not
 *         host:port, shard_index >= shard_count (or not 0 when the count
 *         is 0), or a profile rate that is negative, NaN or infinite.
 */
int dml_node_info_check(const Dml__NodeInfo *info, char *why, size_t whylen);

/**
 * Register a node, or register it again: its fields are replaced by info's
 * (state, reason and last_heartbeat_ms of info are ignored), it is marked
 * connected and ALIVE, with reason "registered", "re-registered (new
 * incarnation)" or "re-registered (reconnected)". *out (optional) points to
 * the node until the table is freed.
 * @return 0, or what dml_node_info_check() returns (nothing is changed).
 */
int dml_nodes_register(struct dml_nodes *t, const Dml__NodeInfo *info, uint64_t now_ms,
		       const struct dml_node **out);

/**
 * A node the scheduler knew before it restarted (dml-sched's state store),
 * back in the table without a connection: a DEAD one stays DEAD with its
 * reason; any other is SUSPECT ("not registered again since the scheduler
 * restarted") and DEAD at dead_after_ms from now_ms unless it registers.
 * The callback is not called.
 * @return 0, DML_EINVAL for a node already in the table, or what
 *         dml_node_info_check() returns.
 */
int dml_nodes_restore(struct dml_nodes *t, const Dml__NodeInfo *info, uint64_t now_ms);

/**
 * A heartbeat from a connected node: remembered, and a SUSPECT node is
 * ALIVE again.
 * @return 0; DML_ENOTFOUND for an unknown node; DML_ESTATE when the node is
 *         DEAD or disconnected (it must register again).
 */
int dml_nodes_heartbeat(struct dml_nodes *t, uint32_t role, uint32_t node_id,
			uint64_t now_ms);

/**
 * The node's connection closed: an ALIVE node becomes SUSPECT ("connection
 * closed") and becomes DEAD at dead_after_ms unless it registers again. A
 * DEAD node stays DEAD.
 * @return 0, or DML_ENOTFOUND.
 */
int dml_nodes_disconnect(struct dml_nodes *t, uint32_t role, uint32_t node_id,
			 uint64_t now_ms);

/**
 * The node said it is leaving: DEAD at once ("left") and disconnected.
 * @return 0, or DML_ENOTFOUND.
 */
int dml_nodes_leave(struct dml_nodes *t, uint32_t role, uint32_t node_id, uint64_t now_ms);

/**
 * Move the nodes whose heartbeats stopped: ALIVE to SUSPECT after
 * suspect_after_ms, ALIVE or SUSPECT to DEAD after dead_after_ms (directly
 * when a late tick finds both passed). Reasons read "no heartbeat for N ms",
 * prefixed by "connection closed, " for a disconnected node. Call it often
 * (the daemon does every few tens of ms); it costs one pass over the table.
 * *changed (optional) gets the number of transitions.
 */
void dml_nodes_tick(struct dml_nodes *t, uint64_t now_ms, size_t *changed);

/** Number of nodes in the table. */
size_t dml_nodes_count(const struct dml_nodes *t);

/** An aggregator's counters, as its heartbeat carried them. 0 or DML_ENOTFOUND. */
int dml_nodes_set_aggregator(struct dml_nodes *t, uint32_t node_id,
			     const Dml__AggregatorStats *st);

/** The aggregator node registered at address ("host:port"), or NULL. */
const struct dml_node *dml_nodes_aggregator_at(const struct dml_nodes *t,
					       const char *address);

/** The i-th node in (role, node_id) order, or NULL when i >= count. */
const struct dml_node *dml_nodes_at(const struct dml_nodes *t, size_t i);

/** The node (role, node_id), or NULL. */
const struct dml_node *dml_nodes_find(const struct dml_nodes *t, uint32_t role,
				      uint32_t node_id);

/** Nodes in a given state. */
size_t dml_nodes_count_state(const struct dml_nodes *t, Dml__NodeState state);

/** "alive", "suspect", "dead" or "unknown". */
const char *dml_node_state_name(int state);

/** "worker", "server", "aggregator", "scheduler", "control" or "none". */
const char *dml_node_role_name(uint32_t role);

#endif
