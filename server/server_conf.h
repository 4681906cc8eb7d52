/*
 * dml-server's configuration: the structs the option table fills, and the
 * schema itself (one row per option, see conf.h). Every key and default is
 * documented in conf/server.conf and the README.
 */
#ifndef DML_SERVER_CONF_H
#define DML_SERVER_CONF_H

#include <stddef.h>
#include <stdint.h>

#include "proto/conf.h"

struct dml_server_table_conf {
	uint32_t id;
	int kind;                 /* enum dml_table_kind */
	uint32_t width;
	uint64_t keys;            /* dense: whole key space across servers */
	uint64_t capacity;        /* sparse: expected rows here */
	int init;                 /* enum dml_init_kind */
	double init_scale;
	uint64_t seed;
	int optimizer;            /* enum dml_optim_kind */
	double lr, weight_decay, momentum, beta1, beta2, epsilon, lr_decay;
};

struct dml_server_conf {
	/* [server] */
	char *listen;
	char *port_file;
	uint32_t node_id;
	char *cluster;
	char *secret_file;
	char *shard;              /* "i/n", parsed into the two fields below */
	uint32_t shard_index, shard_count;
	int log_level;
	char *metrics_listen;     /* "" = no metrics endpoint */
	char *metrics_port_file;
	char *scheduler;          /* "" = standalone, else host:port of dml-sched */
	char *advertise;          /* "" = the listen host and the bound port */
	char *zone;               /* placement zone, "" when unset */
	int local_socket;         /* serve and dial this host's Unix sockets */
	/* [limits] */
	uint64_t max_meta, max_payload, max_keys;
	uint32_t max_connections;
	uint32_t max_preauth;     /* connections in their handshake at once */
	uint32_t forget_worker_after_ms; /* a worker gone this long is forgotten */
	uint64_t output_budget;   /* bytes of replies queued for peers, all together */
	uint32_t output_stall_ms; /* unread this long while pulls wait: closed */
	uint32_t handshake_timeout_ms;
	/* [job] */
	int64_t staleness;
	uint32_t workers;
	uint32_t dead_after_ms;
	int stale_scaling;         /* enum dml_stale_scaling */
	int bsp_step;              /* enum dml_bsp_step */
	int allow_nonfinite;       /* apply pushes holding NaN or infinities */
	/* [store] */
	char *store_path;         /* "" = no gradient log */
	uint64_t store_map_size;
	int durability;           /* enum dml_durability */
	uint32_t batch_ms;
	uint64_t checkpoint_log;  /* log bytes that trigger a checkpoint; 0: never */
	/* [table], repeated */
	struct dml_server_table_conf *tables;
	size_t ntables;
};

extern const struct dml_conf_schema dml_server_conf_schema;

/** Parse "i/n" with 0 <= i < n <= 4096. 0 or DML_EINVAL. */
int dml_server_parse_shard(const char *s, uint32_t *index, uint32_t *count);

#endif
