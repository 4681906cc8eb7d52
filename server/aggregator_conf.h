/*
 * dml-aggregator's configuration: the struct its option table fills and
 * the schema (server/aggregator_conf.c). Every key is documented in
 * conf/aggregator.conf, dml-aggregator(8) and dml.conf(5).
 */
#ifndef DML_AGGREGATOR_CONF_H
#define DML_AGGREGATOR_CONF_H

#include <stdint.h>

#include "proto/conf.h"

/* [aggregator] and [limits] of conf/aggregator.conf. */
struct dml_agg_conf {
	char *listen;
	char *port_file;
	uint32_t node_id;
	char *servers;            /* "host:port,...": owners pushes may go to */
	char *cluster;
	char *secret_file;
	char *zone;
	char *scheduler;          /* dml-sched to register with; "" standalone */
	char *advertise;          /* where workers dial it; "" listen's host */
	uint32_t window_ms;
	uint32_t clock_window_ms; /* entries of clocked jobs (Meta.pace) */
	int pull_ahead;           /* fetch clock k + 1 once k is answered */
	int log_level;
	char *metrics_listen;
	char *metrics_port_file;
	int local_socket;
	uint64_t max_meta, max_payload, max_keys;
	uint64_t max_pending;     /* bytes of push values held, all owners */
	uint32_t max_connections, max_preauth, handshake_timeout_ms;
};

extern const struct dml_conf_schema dml_agg_conf_schema;

#endif
