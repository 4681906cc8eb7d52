/*
 * The option table of dml-sched and its cross-field check. Adding an option
 * is adding one row here and one line in conf/sched.conf.
 */
#include <stddef.h>
#include <stdio.h>

#include "proto/dml_error.h"
#include "sched/sched_conf.h"
#include "proto/util.h"

#define S(field) offsetof(struct dml_sched_conf, field)
#define DAY_MS 86400000.0

static const struct dml_conf_section sections[] = {
	{ "sched", 0, 0, 0, 0, "identity, address, secret and failure detection" },
	{ "store", 0, 0, 0, 0, "the state that lets a restarted scheduler resume its jobs" },
	{ "limits", 0, 0, 0, 0, "bounds on what a peer may send" },
};

static const struct dml_conf_option options[] = {
	DML_CONF_OPT_LISTEN("sched", S(listen), "127.0.0.1:7000", S(port_file)),
	{ "sched", "node_id", DML_CONF_U32, S(node_id), "1", 1, 2147483647.0, NULL, NULL,
	  "the scheduler's id in handshakes" },
	DML_CONF_OPT_CLUSTER("sched", S(cluster)),
	DML_CONF_OPT_SECRET_FILE("sched", S(secret_file)),
	DML_CONF_OPT_LOG_LEVEL("sched", S(log_level)),
	{ "sched", "heartbeat_interval_ms", DML_CONF_U32, S(heartbeat_interval_ms), "1000", 10,
	  600000, NULL, NULL, "nodes heartbeat this often (told to them at registration)" },
	{ "sched", "suspect_after_ms", DML_CONF_U32, S(suspect_after_ms), "3000", 11, DAY_MS,
	  NULL, NULL, "a node without a heartbeat this long is suspect" },
	{ "sched", "dead_after_ms", DML_CONF_U32, S(dead_after_ms), "10000", 12, DAY_MS, NULL,
	  NULL, "a node without a heartbeat this long is dead until it registers again" },
	DML_CONF_OPT_METRICS("sched", S(metrics_listen), S(metrics_port_file)),
	DML_CONF_OPT_LOCAL_SOCKET("sched", S(local_socket)),

	{ "store", "path", DML_CONF_STRING, S(store_path), "", 0, 0, NULL, NULL,
	  "directory of the LMDB state (nodes, jobs, maps, assignments); empty: none" },
	{ "store", "map_size", DML_CONF_SIZE, S(store_map_size), "64M", 1048576.0, 1e12, NULL,
	  NULL, "the most the state may grow to" },

	{ "limits", "max_meta", DML_CONF_SIZE, S(max_meta), "64K", 1024, 16777216.0, NULL, NULL,
	  "largest frame metadata accepted or sent (node and job lists must fit)" },
	DML_CONF_OPT_PEER_LIMITS(S(max_connections), S(max_preauth)),
	DML_CONF_OPT_HANDSHAKE_TIMEOUT(S(handshake_timeout_ms)),
};

static int check(void *root, char *err, size_t errlen)
{
	const struct dml_sched_conf *c = root;

	if (c->suspect_after_ms <= c->heartbeat_interval_ms) {
		snprintf(err, errlen, "suspect_after_ms (%u) must be greater than "
			 "heartbeat_interval_ms (%u)", c->suspect_after_ms,
			 c->heartbeat_interval_ms);
		return DML_ECONF;
	}
	if (c->dead_after_ms <= c->suspect_after_ms) {
		snprintf(err, errlen, "dead_after_ms (%u) must be greater than "
			 "suspect_after_ms (%u)", c->dead_after_ms, c->suspect_after_ms);
		return DML_ECONF;
	}
	return dml_conf_check_metrics(c->metrics_listen, c->metrics_port_file, err, errlen);
}

const struct dml_conf_schema dml_sched_conf_schema =
	DML_CONF_SCHEMA_INIT("dml-sched", sections, options, check);
