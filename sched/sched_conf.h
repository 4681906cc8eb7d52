/*
 * dml-sched's configuration: the struct the option table fills, and the
 * schema itself (one row per option, see conf.h). Every key and default is
 * documented in conf/sched.conf and the README.
 */
#ifndef DML_SCHED_CONF_H
#define DML_SCHED_CONF_H

#include <stdint.h>

#include "proto/conf.h"

struct dml_sched_conf {
	/* [sched] */
	char *listen;
	char *port_file;
	uint32_t node_id;
	char *cluster;
	char *secret_file;
	int log_level;
	uint32_t heartbeat_interval_ms;
	uint32_t suspect_after_ms;
	uint32_t dead_after_ms;
	char *metrics_listen;      /* "" = no metrics endpoint */
	char *metrics_port_file;
	int local_socket;          /* serve and dial this host's Unix sockets */
	/* [store] */
	char *store_path;          /* "" = keep no state */
	uint64_t store_map_size;
	/* [limits] */
	uint64_t max_meta;
	uint32_t max_connections;
	uint32_t max_preauth;      /* connections in their handshake at once */
	uint32_t handshake_timeout_ms;
};

/* Parse with dml_conf_load(); the cross-field check enforces
 * dead_after_ms > suspect_after_ms > heartbeat_interval_ms, and
 * metrics_port_file only with metrics_listen. */
extern const struct dml_conf_schema dml_sched_conf_schema;

#endif
