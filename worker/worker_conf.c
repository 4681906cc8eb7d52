/*
 * The option table of dml-worker and its cross-field check. Adding an
 * option is adding one row here and one line in conf/worker.conf.
 *
 * Must never: let through a value the worker would only trip over later
 * (an address it cannot dial, a zone the scheduler refuses).
 */
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "proto/dml_error.h"
#include "proto/util.h"
#include "worker/backend.h"
#include "worker/worker_conf.h"

#define W(field) offsetof(struct dml_worker_conf, field)
#define MAX_U32 4294967295.0

static const struct dml_conf_section sections[] = {
	{ "worker", 0, 0, 0, 0, "identity, scheduler, secret and compute of this worker" },
	{ "limits", 0, 0, 0, 0, "bounds on what a peer may send" },
};

static const struct dml_conf_option options[] = {
	{ "worker", "node_id", DML_CONF_U32, W(node_id), NULL, 1, 2147483647.0, NULL, NULL,
	  "this worker's id, unique among workers" },
	{ "worker", "scheduler", DML_CONF_HOSTPORT, W(scheduler), NULL, 0, 0, NULL,
	  dml_conf_check_dial,
	  "dml-sched to register with and take jobs from" },
	DML_CONF_OPT_CLUSTER("worker", W(cluster)),
	DML_CONF_OPT_SECRET_FILE("worker", W(secret_file)),
	{ "worker", "zone", DML_CONF_STRING, W(zone), "", 0, 0, NULL, dml_conf_check_zone,
	  "placement zone (rack, cloud region) reported to the scheduler" },
	{ "worker", "backend", DML_CONF_ENUM, W(backend), "cpu", 0, 0,
	  dml_backend_names, NULL, "where apps compute: cpu (OpenBLAS) or cuda" },
	{ "worker", "threads", DML_CONF_U32, W(threads), "1", 1, 1024, NULL, NULL,
	  "OpenBLAS threads" },
	{ "worker", "device", DML_CONF_U32, W(device), "0", 0, 1023, NULL, NULL,
	  "cuda: index of the GPU to use" },
	DML_CONF_OPT_LOG_LEVEL("worker", W(log_level)),
	DML_CONF_OPT_METRICS("worker", W(metrics_listen), W(metrics_port_file)),
	{ "worker", "spin_us", DML_CONF_U32, W(spin_us), "50", 0, 100000, NULL, NULL,
	  "libdml polls this long for a reply before sleeping (0: always sleep)" },
	{ "worker", "profile", DML_CONF_BOOL, W(profile), "yes", 0, 0, NULL, NULL,
	  "measure GFLOP/s and examples/s at start (no: report 0, for tests)" },
	DML_CONF_OPT_LOCAL_DIAL("worker", W(local_socket)),

	{ "limits", "max_meta", DML_CONF_SIZE, W(max_meta), "64K", 1024, 16777216.0, NULL,
	  NULL, "largest frame metadata accepted from the scheduler" },
	{ "limits", "max_payload", DML_CONF_SIZE, W(max_payload), "256M", 1024, MAX_U32, NULL,
	  NULL, "largest frame payload accepted from a server" },
	{ "limits", "handshake_timeout_ms", DML_CONF_U32, W(handshake_timeout_ms), "5000", 1,
	  600000, NULL, NULL, "the scheduler must authenticate within this time" },
};

static int check(void *root, char *err, size_t errlen)
{
	const struct dml_worker_conf *c = root;

	return dml_conf_check_metrics(c->metrics_listen, c->metrics_port_file, err, errlen);
}

const struct dml_conf_schema dml_worker_conf_schema =
	DML_CONF_SCHEMA_INIT("dml-worker", sections, options, check);
