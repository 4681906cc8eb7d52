/*
 * What the files of dml-server share beyond server.h: the server's state and
 * the few helpers its metrics need. Not installed; nothing outside server/
 * includes it.
 */
#ifndef DML_SERVER_INTERNAL_H
#define DML_SERVER_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include <event2/event.h>
#include <event2/listener.h>

#include "conn.h"
#include "metrics.h"
#include "peers.h"
#include "server.h"
#include "ssp.h"
#include "table.h"

struct dml_sched_link;

struct table_entry {
	struct dml_table *table;
	Dml__TableInfo info;       /* what WELCOME reports */
	uint64_t own_begin, own_end; /* keys (dense) or key hashes (sparse) */
};

struct session {
	struct dml_peer peer;      /* first: the set's list walks sessions */
	struct dml_server *srv;
	uint32_t role;
	uint32_t node_id;
	int worker;                /* counts in the clock set */
	size_t widx;               /* index into srv->ssp.workers */
};

/* A pull that arrived before the staleness bound allowed it. */
struct held_pull {
	struct held_pull *next;
	struct session *sess;
	uint64_t received_ns;      /* for the latency and wait histograms */
	uint64_t request_id;
	uint64_t clock;
	struct table_entry *te;
	int dense;
	uint64_t begin, end;
	uint64_t *keys;
	uint32_t nkeys;
};

/* Requests counted by type (metrics name them in this order). */
enum req_kind {
	REQ_PUSH, REQ_PULL, REQ_CLOCK, REQ_STATS, REQ_HEARTBEAT, REQ_BYE, REQ_KINDS
};

struct stats {
	uint64_t pushes, pulls, duplicates, held, bad_frames, bytes_in, bytes_out;
	uint64_t requests[REQ_KINDS];
};

struct dml_server {
	const struct dml_server_conf *conf;
	struct event_base *base;
	struct evconnlistener *listener;
	uint16_t port;
	struct dml_conn_conf conn_conf;
	uint8_t *secret;
	size_t secret_len;
	const struct dml_conn_ops *ops;

	struct table_entry *tables;
	size_t ntables;
	Dml__TableInfo **infos;    /* pointers into tables[], for WELCOME */

	struct dml_ssp ssp;
	struct dml_peers peers;    /* struct session each */
	struct held_pull *held;
	struct stats st;
	struct dml_metrics *metrics;
	struct dml_histogram *push_latency, *pull_latency, *held_wait;

	float *scratch;            /* pull replies are assembled here */
	size_t scratch_cap;
	struct event *tick;
	struct dml_sched_link *sched; /* registration with dml-sched, or NULL */
};

/** Bytes in and out over the server's life, open connections included. */
void dml_server_traffic(const struct dml_server *s, uint64_t *in, uint64_t *out);

/**
 * Create the registry, register every metric and, when metrics_listen is
 * set, serve it over HTTP (writing metrics_port_file). DML_EINVAL if a
 * metric is refused, DML_ECONF or DML_EIO for the endpoint.
 */
int dml_server_metrics_init(struct dml_server *s);

/**
 * When the config names a scheduler: describe this server (role, id, zone,
 * advertised address, shard, machine profile) and start registering with it
 * (server_sched.c). Call once listening, so the bound port is known. 0 when
 * standalone or started, DML_ECONF (unusable address) or DML_EIO.
 */
int dml_server_sched_start(struct dml_server *s);

/** Leave the scheduler (on shutdown); safe from callbacks and when standalone. */
void dml_server_sched_stop(struct dml_server *s);

/** Free the registration; after the loop returned. */
void dml_server_sched_free(struct dml_server *s);

#endif
