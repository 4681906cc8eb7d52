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
	{ "sched", "listen", DML_CONF_HOSTPORT, S(listen), "127.0.0.1:7000", 0, 0, NULL, NULL,
	  "address to listen on; port 0 picks a free port" },
	{ "sched", "port_file", DML_CONF_STRING, S(port_file), "", 0, 0, NULL, NULL,
	  "write the bound port here once listening (empty: don't)" },
	{ "sched", "node_id", DML_CONF_U32, S(node_id), "1", 1, 2147483647.0, NULL, NULL,
	  "the scheduler's id in handshakes" },
	{ "sched", "cluster", DML_CONF_STRING, S(cluster), "dml", 0, 0, NULL, NULL,
	  "cluster name; peers must use the same" },
	{ "sched", "secret_file", DML_CONF_STRING, S(secret_file), NULL, 0, 0, NULL, NULL,
	  "file holding the cluster secret (mode 0600)" },
	{ "sched", "log_level", DML_CONF_ENUM, S(log_level), "info", 0, 0,
	  dml_conf_log_levels, NULL, "lowest level logged to stderr" },
	{ "sched", "heartbeat_interval_ms", DML_CONF_U32, S(heartbeat_interval_ms), "1000", 10,
	  600000, NULL, NULL, "nodes heartbeat this often (told to them at registration)" },
	{ "sched", "suspect_after_ms", DML_CONF_U32, S(suspect_after_ms), "3000", 11, DAY_MS,
	  NULL, NULL, "a node without a heartbeat this long is suspect" },
	{ "sched", "dead_after_ms", DML_CONF_U32, S(dead_after_ms), "10000", 12, DAY_MS, NULL,
	  NULL, "a node without a heartbeat this long is dead until it registers again" },
	{ "sched", "metrics_listen", DML_CONF_STRING, S(metrics_listen), "", 0, 0, NULL,
	  dml_conf_check_listen_optional,
	  "serve Prometheus metrics (GET /metrics) on host:port; empty: off, port 0: any" },
	{ "sched", "metrics_port_file", DML_CONF_STRING, S(metrics_port_file), "", 0, 0, NULL,
	  NULL, "write the metrics port here once serving (empty: don't)" },

	{ "store", "path", DML_CONF_STRING, S(store_path), "", 0, 0, NULL, NULL,
	  "directory of the LMDB state (nodes, jobs, maps, assignments); empty: none" },
	{ "store", "map_size", DML_CONF_SIZE, S(store_map_size), "64M", 1048576.0, 1e12, NULL,
	  NULL, "the most the state may grow to" },

	{ "limits", "max_meta", DML_CONF_SIZE, S(max_meta), "64K", 1024, 16777216.0, NULL, NULL,
	  "largest frame metadata accepted or sent (node and job lists must fit)" },
	{ "limits", "max_connections", DML_CONF_U32, S(max_connections), "1024", 1, 1000000,
	  NULL, NULL, "connections beyond this are refused" },
	{ "limits", "max_preauth", DML_CONF_U32, S(max_preauth), "64", 1, 1000000, NULL, NULL,
	  "most connections still in their handshake; past it, or when max_connections is "
	  "reached, the oldest unauthenticated one is closed to make room" },
	{ "limits", "handshake_timeout_ms", DML_CONF_U32, S(handshake_timeout_ms), "5000", 1,
	  600000, NULL, NULL, "a peer must authenticate within this time" },
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
	if (c->metrics_port_file[0] && !c->metrics_listen[0]) {
		snprintf(err, errlen, "metrics_port_file needs metrics_listen");
		return DML_ECONF;
	}
	return 0;
}

const struct dml_conf_schema dml_sched_conf_schema = {
	.program = "dml-sched",
	.sections = sections,
	.nsections = DML_ARRAY_LEN(sections),
	.options = options,
	.noptions = DML_ARRAY_LEN(options),
	.check = check,
};
