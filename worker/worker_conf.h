/*
 * dml-worker's configuration: the struct the option table fills, and the
 * schema itself (one row per option, see conf.h). Every key and default is
 * documented in conf/worker.conf.
 */
#ifndef DML_WORKER_CONF_H
#define DML_WORKER_CONF_H

#include <stdint.h>

#include "proto/conf.h"

struct dml_worker_conf {
	/* [worker] */
	uint32_t node_id;
	char *scheduler;          /* host:port of dml-sched */
	char *cluster;
	char *secret_file;
	char *zone;               /* placement zone, "" when unset */
	int backend;              /* index into dml_backend_names (backend.h) */
	uint32_t threads;         /* OpenBLAS threads */
	uint32_t device;          /* cuda: GPU index */
	int log_level;
	char *metrics_listen;     /* "" = no metrics endpoint */
	char *metrics_port_file;
	uint32_t spin_us;         /* libdml: poll this long before sleeping */
	int profile;              /* measure the profile at start */
	int local_socket;         /* dial this host's daemons over Unix sockets */
	/* [limits] */
	uint64_t max_meta, max_payload;
	uint32_t handshake_timeout_ms;
};

/* Parse with dml_conf_load(); the cross-field check wants metrics_listen
 * for metrics_port_file. */
extern const struct dml_conf_schema dml_worker_conf_schema;

#endif
