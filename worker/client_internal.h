/*
 * libdml internals shared by its source files (not installed).
 */
#ifndef DML_CLIENT_INTERNAL_H
#define DML_CLIENT_INTERNAL_H

#include <stdint.h>

#include "conf.h"

struct dml_client_conf {
	char *servers;
	char *secret_file;
	char *cluster;
	uint32_t worker_id;
	int role;                 /* 0 worker, 1 control */
	uint32_t job;
	uint32_t connect_timeout_ms;
	uint32_t reconnect_timeout_ms;
	uint32_t request_timeout_ms;
	uint64_t max_payload;
	uint32_t spin_us;
};

struct dml_opts {
	struct dml_client_conf conf;
};

extern const struct dml_conf_schema dml_client_conf_schema;

#endif
