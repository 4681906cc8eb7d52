/*
 * The option table of dml-server and its cross-field checks. Adding an
 * option is adding one row here and one line in conf/server.conf.
 */
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "proto/dml_error.h"
#include "server/server_conf.h"
#include "store/store.h"
#include "store/table.h"
#include "proto/util.h"

#define S(field) offsetof(struct dml_server_conf, field)
#define T(field) offsetof(struct dml_server_table_conf, field)
#define MAX_U32 4294967295.0

static const struct dml_conf_section sections[] = {
	{ "server", 0, 0, 0, 0, "identity, address and secret of this server" },
	{ "limits", 0, 0, 0, 0, "bounds on what a peer may send" },
	{ "job", 0, 0, 0, 0, "consistency of the job this server serves" },
	{ "store", 0, 0, 0, 0, "the gradient log that brings the tables back after a crash" },
	{ "table", 1, sizeof(struct dml_server_table_conf),
	  offsetof(struct dml_server_conf, tables),
	  offsetof(struct dml_server_conf, ntables), "one parameter table (repeat the section)" },
};

static const struct dml_conf_option options[] = {
	DML_CONF_OPT_LISTEN("server", S(listen), "127.0.0.1:7001", S(port_file)),
	{ "server", "node_id", DML_CONF_U32, S(node_id), NULL, 1, 2147483647.0, NULL, NULL,
	  "this server's id, unique among servers" },
	DML_CONF_OPT_CLUSTER("server", S(cluster)),
	DML_CONF_OPT_SECRET_FILE("server", S(secret_file)),
	{ "server", "shard", DML_CONF_STRING, S(shard), "0/1", 0, 0, NULL, NULL,
	  "this server's index / number of servers; each table is split evenly" },
	DML_CONF_OPT_LOG_LEVEL("server", S(log_level)),
	DML_CONF_OPT_METRICS("server", S(metrics_listen), S(metrics_port_file)),
	{ "server", "scheduler", DML_CONF_STRING, S(scheduler), "", 0, 0, NULL,
	  dml_conf_check_dial_optional,
	  "host:port of dml-sched to register with; empty: standalone" },
	{ "server", "advertise", DML_CONF_STRING, S(advertise), "", 0, 0, NULL,
	  dml_conf_check_dial_optional,
	  "host:port others use to reach this server; empty: listen host, bound port" },
	{ "server", "zone", DML_CONF_STRING, S(zone), "", 0, 0, NULL, dml_conf_check_zone,
	  "placement zone (rack, cloud region) reported to the scheduler" },
	DML_CONF_OPT_LOCAL_SOCKET("server", S(local_socket)),

	{ "limits", "max_meta", DML_CONF_SIZE, S(max_meta), "64K", 64, 16777216.0, NULL, NULL,
	  "largest frame metadata accepted" },
	{ "limits", "max_payload", DML_CONF_SIZE, S(max_payload), "256M", 1024, MAX_U32, NULL,
	  NULL, "largest frame payload accepted" },
	{ "limits", "max_keys", DML_CONF_U64, S(max_keys), "1048576", 1, MAX_U32, NULL, NULL,
	  "most keys in one sparse request" },
	DML_CONF_OPT_PEER_LIMITS(S(max_connections), S(max_preauth)),
	{ "limits", "forget_worker_after_ms", DML_CONF_U32, S(forget_worker_after_ms), "600000",
	  100, 86400000.0, NULL, NULL, "a worker out of the clock set and disconnected this "
	  "long is forgotten, push dedupe included (keep it above the clients' "
	  "reconnect_timeout_ms); workers the job names are kept" },
	{ "limits", "output_budget", DML_CONF_SIZE, S(output_budget), "256M", 1048576.0, 1e15,
	  NULL, NULL, "most memory replies queued for peers that do not read them may hold, "
	  "all together: a large pull past it waits until others drained, and a connection "
	  "is not read while its unsent output is over its share" },
	{ "limits", "output_stall_ms", DML_CONF_U32, S(output_stall_ms), "30000", 100,
	  86400000.0, NULL, NULL, "while pulls wait for output_budget, a connection whose "
	  "queued replies have not shrunk for this long is closed" },
	DML_CONF_OPT_HANDSHAKE_TIMEOUT(S(handshake_timeout_ms)),

	{ "job", "staleness", DML_CONF_I64, S(staleness), "-1", -1, 1000000, NULL, NULL,
	  "staleness bound s: 0 = BSP, s > 0 = SSP, -1 = asynchronous" },
	{ "job", "workers", DML_CONF_U32, S(workers), "0", 0, 1000000, NULL, NULL,
	  "workers expected; bounded pulls wait until this many joined" },
	{ "job", "dead_after_ms", DML_CONF_U32, S(dead_after_ms), "10000", 1, 86400000.0,
	  NULL, NULL, "a disconnected worker leaves the clock set after this long" },
	{ "job", "stale_scaling", DML_CONF_ENUM, S(stale_scaling), "off", 0, 0,
	  dml_stale_scaling_names, NULL,
	  "inverse: a push tau clocks behind the newest worker's is applied times "
	  "1 / (1 + tau) (DynSGD); off: as it is" },
	{ "job", "bsp_step", DML_CONF_ENUM, S(bsp_step), "clock", 0, 0, dml_bsp_step_names,
	  NULL, "under BSP (staleness 0): clock: a clock's pushes to a dense table are summed "
	  "and applied as one optimizer step once every worker ended the clock; push: each "
	  "push is applied as it arrives" },
	{ "job", "allow_nonfinite", DML_CONF_BOOL, S(allow_nonfinite), "false", 0, 0, NULL,
	  NULL, "apply pushes holding NaN or infinite values (false: refuse them with an "
	  "error naming the table, counted in dml_server_pushes_nonfinite_total)" },

	{ "store", "path", DML_CONF_STRING, S(store_path), "", 0, 0, NULL, NULL,
	  "directory of this server's LMDB store (made if missing); empty: no log, a "
	  "restart loses the tables" },
	{ "store", "map_size", DML_CONF_SIZE, S(store_map_size), "1G", 1048576.0, 1e15, NULL,
	  NULL, "the size of the store's map (address space; a full one grows by up to half of it before the server stops: raise it)" },
	{ "store", "durability", DML_CONF_ENUM, S(durability), "sync", 0, 0,
	  dml_durability_names, NULL,
	  "sync: acknowledge a push once it is on disk; batch: commit every batch_ms, "
	  "acknowledge at once (a crash loses at most that window); none: no log" },
	{ "store", "batch_ms", DML_CONF_U32, S(batch_ms), "100", 1, 60000, NULL, NULL,
	  "durability batch: commit this often (the most a crash may lose)" },
	{ "store", "checkpoint_log", DML_CONF_SIZE, S(checkpoint_log), "256M", 0, 1e15, NULL,
	  NULL, "write a checkpoint of every row and empty the log once it holds this "
	  "much (0: never)" },

	{ "table", "id", DML_CONF_U32, T(id), NULL, 0, MAX_U32, NULL, NULL, "table id" },
	{ "table", "kind", DML_CONF_ENUM, T(kind), "dense", 0, 0, dml_table_kind_names, NULL,
	  "dense (keys 0..keys-1) or sparse (any uint64 key)" },
	{ "table", "width", DML_CONF_U32, T(width), "1", 1, 65536, NULL, NULL,
	  "floats per key" },
	{ "table", "keys", DML_CONF_U64, T(keys), "0", 0, 1e15, NULL, NULL,
	  "dense: number of keys in the whole table (required for dense)" },
	{ "table", "capacity", DML_CONF_U64, T(capacity), "0", 0, 1e12, NULL, NULL,
	  "sparse: expected rows on this server (pre-sizes the hash)" },
	{ "table", "init", DML_CONF_ENUM, T(init), "zeros", 0, 0, dml_init_kind_names, NULL,
	  "initial values: zeros, uniform [-s, s] or normal(0, s)" },
	{ "table", "init_scale", DML_CONF_DOUBLE, T(init_scale), "0.01", 0, 1e6, NULL, NULL,
	  "s of the initializer" },
	{ "table", "seed", DML_CONF_U64, T(seed), "1", 0, 0, NULL, NULL,
	  "initializer seed; values depend only on (seed, key)" },
	{ "table", "optimizer", DML_CONF_ENUM, T(optimizer), "sgd", 0, 0, dml_optim_kind_names,
	  NULL, "server-side optimizer applied to pushed gradients" },
	{ "table", "lr", DML_CONF_DOUBLE, T(lr), "0.01", 0, 1e6, NULL, NULL, "learning rate" },
	{ "table", "weight_decay", DML_CONF_DOUBLE, T(weight_decay), "0", 0, 1e6, NULL, NULL,
	  "L2 penalty added to the gradient" },
	{ "table", "momentum", DML_CONF_DOUBLE, T(momentum), "0.9", 0, 0.999999, NULL, NULL,
	  "momentum coefficient (momentum optimizer)" },
	{ "table", "beta1", DML_CONF_DOUBLE, T(beta1), "0.9", 0, 0.999999, NULL, NULL,
	  "adam first-moment decay" },
	{ "table", "beta2", DML_CONF_DOUBLE, T(beta2), "0.999", 0, 0.999999, NULL, NULL,
	  "adam second-moment decay" },
	{ "table", "epsilon", DML_CONF_DOUBLE, T(epsilon), "1e-8", 1e-30, 1, NULL, NULL,
	  "adagrad/adam denominator guard" },
	{ "table", "lr_decay", DML_CONF_DOUBLE, T(lr_decay), "0", 0, 1e30, NULL, NULL,
	  "inverse-time decay: a row's t-th update uses lr / (1 + lr_decay (t - 1))" },
};

int dml_server_parse_shard(const char *s, uint32_t *index, uint32_t *count)
{
	const char *slash = strchr(s, '/');
	char buf[16];
	uint64_t i, n;
	size_t len;

	if (!slash)
		return DML_EINVAL;
	len = (size_t)(slash - s);
	if (len == 0 || len >= sizeof(buf))
		return DML_EINVAL;
	memcpy(buf, s, len);
	buf[len] = '\0';
	if (dml_parse_u64(buf, 0, 4095, &i) || dml_parse_u64(slash + 1, 1, 4096, &n) || i >= n)
		return DML_EINVAL;
	*index = (uint32_t)i;
	*count = (uint32_t)n;
	return 0;
}

/* host as dml_parse_hostport() returns it: every local address, which no
 * other machine can dial. */
static int check(void *root, char *err, size_t errlen)
{
	struct dml_server_conf *c = root;
	if (dml_server_parse_shard(c->shard, &c->shard_index, &c->shard_count)) {
		snprintf(err, errlen, "shard: '%s' is not INDEX/COUNT with INDEX < COUNT", c->shard);
		return DML_ECONF;
	}
	if (dml_conf_check_advertise(c->scheduler, c->advertise, c->listen, err, errlen) ||
	    dml_conf_check_metrics(c->metrics_listen, c->metrics_port_file, err, errlen))
		return DML_ECONF;
	if (c->ntables == 0 && !c->scheduler[0]) {
		snprintf(err, errlen, "no [table] section: a server needs at least one table, "
			 "or a scheduler to take jobs from");
		return DML_ECONF;
	}
	for (size_t i = 0; i < c->ntables; i++) {
		const struct dml_server_table_conf *t = &c->tables[i];

		for (size_t j = 0; j < i; j++) {
			if (c->tables[j].id == t->id) {
				snprintf(err, errlen, "table id %u is defined twice", t->id);
				return DML_ECONF;
			}
		}
		if (t->kind == DML_TABLE_DENSE && t->keys < c->shard_count) {
			snprintf(err, errlen, "table %u: dense tables need keys >= number of "
				 "servers (%u), got %llu", t->id, c->shard_count,
				 (unsigned long long)t->keys);
			return DML_ECONF;
		}
		if (t->kind == DML_TABLE_SPARSE && t->keys != 0) {
			snprintf(err, errlen, "table %u: keys applies to dense tables only", t->id);
			return DML_ECONF;
		}
		if (t->optimizer != DML_OPT_ADD && t->lr <= 0) {
			snprintf(err, errlen, "table %u: lr must be > 0", t->id);
			return DML_ECONF;
		}
	}
	return 0;
}

const struct dml_conf_schema dml_server_conf_schema =
	DML_CONF_SCHEMA_INIT("dml-server", sections, options, check);
