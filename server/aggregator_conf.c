/*
 * The option table of dml-aggregator and its cross-field checks. Adding an
 * option is adding one row here and one line in conf/aggregator.conf.
 */
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "proto/dml_error.h"
#include "proto/util.h"
#include "server/aggregator_conf.h"

#define A(field) offsetof(struct dml_agg_conf, field)

static const struct dml_conf_section sections[] = {
	{ "aggregator", 0, 0, 0, 0, "identity, address, owners and timing of this aggregator" },
	{ "limits", 0, 0, 0, 0, "bounds on what a peer may send and what is held" },
};

/* servers: one or more host:port, comma-separated, each one dialable. */
static int check_servers(const void *field, char *err, size_t errlen)
{
	const char *s = *(char *const *)field;
	char item[300], host[256];
	uint16_t port;

	if (!s[0])
		return dml_fail(DML_ECONF, err, errlen, "at least one host:port is needed");
	while (*s) {
		size_t n = strcspn(s, ",");

		if (n == 0 || n >= sizeof(item))
			return dml_fail(DML_ECONF, err, errlen, "an empty or overlong entry");
		memcpy(item, s, n);
		item[n] = '\0';
		if (dml_parse_hostport(item, host, sizeof(host), &port, 0) != 0)
			return dml_fail(DML_ECONF, err, errlen, "'%s' is not host:port", item);
		s += n + (s[n] == ',');
	}
	return 0;
}

static const struct dml_conf_option options[] = {
	DML_CONF_OPT_LISTEN("aggregator", A(listen), "127.0.0.1:7101", A(port_file)),
	{ "aggregator", "node_id", DML_CONF_U32, A(node_id), NULL, 1, 2147483647.0, NULL, NULL,
	  "this aggregator's id, unique among aggregators (owners name it in logs)" },
	{ "aggregator", "servers", DML_CONF_STRING, A(servers), NULL, 0, 0, NULL, check_servers,
	  "the owning servers pushes and pulls may be forwarded to, host:port,... exactly "
	  "as workers name them in Meta.owner; others are refused (DML_ERANGE)" },
	DML_CONF_OPT_CLUSTER("aggregator", A(cluster)),
	DML_CONF_OPT_SECRET_FILE("aggregator", A(secret_file)),
	{ "aggregator", "zone", DML_CONF_STRING, A(zone), "", 0, 0, NULL, dml_conf_check_zone,
	  "the zone whose workers this aggregator serves (named in its WELCOME)" },
	{ "aggregator", "scheduler", DML_CONF_STRING, A(scheduler), "", 0, 0, NULL,
	  dml_conf_check_dial_optional,
	  "host:port of dml-sched to register with, which then routes this zone's workers "
	  "through it; empty: standalone (workers name it themselves)" },
	{ "aggregator", "advertise", DML_CONF_STRING, A(advertise), "", 0, 0, NULL,
	  dml_conf_check_dial_optional,
	  "host:port the zone's workers use to reach it; empty: listen host, bound port" },
	{ "aggregator", "window_ms", DML_CONF_U32, A(window_ms), "5", 0, 600000, NULL, NULL,
	  "an entry of pushes of an asynchronous job (or one whose workers do not say) is "
	  "forwarded once every connected worker joined it, or this long after it opened" },
	{ "aggregator", "clock_window_ms", DML_CONF_U32, A(clock_window_ms), "2000", 0, 600000,
	  NULL, NULL, "as window_ms for a clocked job's entries (BSP, SSP): how long the "
	  "zone's pushes of a clock wait for a worker that has not pushed it yet" },
	{ "aggregator", "pull_ahead", DML_CONF_BOOL, A(pull_ahead), "yes", 0, 0, NULL, NULL,
	  "once a worker's pull of clock k is answered, fetch the range for clock k + 1 at "
	  "once, so it crosses the link while the zone computes; no: only on demand" },
	DML_CONF_OPT_LOG_LEVEL("aggregator", A(log_level)),
	DML_CONF_OPT_METRICS("aggregator", A(metrics_listen), A(metrics_port_file)),
	DML_CONF_OPT_LOCAL_SOCKET("aggregator", A(local_socket)),

	DML_CONF_OPT_FRAME_LIMITS(A(max_meta), A(max_payload), A(max_keys)),
	{ "limits", "max_pending", DML_CONF_SIZE, A(max_pending), "1G", 1048576.0, 1e15, NULL,
	  NULL, "most bytes of pushed values held for the owners, all together; past it "
	  "workers are not read until acknowledged pushes made room" },
	DML_CONF_OPT_PEER_LIMITS(A(max_connections), A(max_preauth)),
	DML_CONF_OPT_HANDSHAKE_TIMEOUT(A(handshake_timeout_ms)),
};

static int check(void *root, char *err, size_t errlen)
{
	struct dml_agg_conf *c = root;

	if (dml_conf_check_advertise(c->scheduler, c->advertise, c->listen, err, errlen) ||
	    dml_conf_check_metrics(c->metrics_listen, c->metrics_port_file, err, errlen))
		return DML_ECONF;
	return 0;
}

const struct dml_conf_schema dml_agg_conf_schema =
	DML_CONF_SCHEMA_INIT("dml-aggregator", sections, options, check);
