/*
 * libdml options: the [client] option table and dml_opts_*. Values are
 * validated by the same config parser the daemons use, so a bad value gets
 * the same message whether it comes from a file or from dml_opts_set().
 */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "worker/client_internal.h"
#include "worker/dml.h"
#include "proto/log.h"
#include "proto/util.h"

#define O(field) offsetof(struct dml_client_conf, field)

static const char *const roles[] = { "worker", "control", NULL };

/* Empty (none) or where a peer listens: scheduler, aggregator. */
static int check_peer(const void *field, char *err, size_t errlen)
{
	const char *s = *(const char *const *)field;
	char host[256];
	uint16_t port;

	if (*s == '\0' || dml_parse_hostport(s, host, sizeof(host), &port, 0) == 0)
		return 0;
	snprintf(err, errlen, "'%s' is not host:port with a port 1..65535", s);
	return DML_ECONF;
}

/* A file names servers or scheduler (dml_connect checks options set one by one). */
static int check(void *root, char *err, size_t errlen)
{
	const struct dml_client_conf *c = root;

	if (c->servers && *c->servers && c->scheduler && *c->scheduler) {
		snprintf(err, errlen, "servers and scheduler exclude each other: the scheduler "
			 "hands out the servers");
		return DML_ECONF;
	}
	return 0;
}

static const struct dml_conf_section sections[] = {
	{ "client", 0, 0, 0, 0, "how libdml reaches the servers" },
};

static const struct dml_conf_option options[] = {
	{ "client", "servers", DML_CONF_STRING, O(servers), "", 0, 0, NULL, NULL,
	  "comma-separated host:port list, in shard order (empty with scheduler)" },
	{ "client", "scheduler", DML_CONF_STRING, O(scheduler), "", 0, 0, NULL,
	  check_peer, "host:port of dml-sched, which hands out the shard map "
	  "(then servers stays empty)" },
	{ "client", "secret_file", DML_CONF_STRING, O(secret_file), "", 0, 0, NULL, NULL,
	  "cluster secret (mode 0600)" },
	{ "client", "cluster", DML_CONF_STRING, O(cluster), "dml", 0, 0, NULL, NULL,
	  "cluster name" },
	{ "client", "worker_id", DML_CONF_U32, O(worker_id), "0", 0, 2147483647.0, NULL, NULL,
	  "this worker's node id (required for role worker)" },
	{ "client", "role", DML_CONF_ENUM, O(role), "worker", 0, 0, roles, NULL,
	  "worker (takes part in clocks) or control (reads, no clocks)" },
	{ "client", "job", DML_CONF_U32, O(job), "0", 0, 4294967295.0, NULL, NULL,
	  "job id (with scheduler: 0 = the running job)" },
	{ "client", "incarnation", DML_CONF_U64, O(incarnation), "0", 0, 0, NULL, NULL,
	  "this process's incarnation, which keys its push sequence on the servers (0 = "
	  "a random one, as it must be outside tests: two processes with one number "
	  "lose pushes)" },
	{ "client", "clock", DML_CONF_U64, O(clock), "0", 0, 0, NULL, NULL,
	  "clock to start at (a worker that rejoins a job starts at the job's clock)" },
	{ "client", "connect_timeout_ms", DML_CONF_U32, O(connect_timeout_ms), "5000", 1,
	  3600000, NULL, NULL, "how long dml_connect tries" },
	{ "client", "reconnect_timeout_ms", DML_CONF_U32, O(reconnect_timeout_ms), "30000", 1,
	  86400000.0, NULL, NULL, "give up on a lost server after this long" },
	{ "client", "request_timeout_ms", DML_CONF_U32, O(request_timeout_ms), "0", 0,
	  86400000.0, NULL, NULL, "fail requests not answered in time (0 = never)" },
	{ "client", "spin_us", DML_CONF_U32, O(spin_us), "50", 0, 100000, NULL, NULL,
	  "poll this long for a reply before sleeping (0 = always sleep)" },
	{ "client", "max_payload", DML_CONF_SIZE, O(max_payload), "256M", 1024, 4294967295.0,
	  NULL, NULL, "largest frame payload accepted" },
	{ "client", "max_meta", DML_CONF_SIZE, O(max_meta), "64K", 1024, 16777216.0,
	  NULL, NULL, "largest frame metadata accepted (a big shard map needs more)" },
	DML_CONF_OPT_LOCAL_DIAL("client", O(local_socket)),
	{ "client", "zone", DML_CONF_STRING, O(zone), "", 0, 0, NULL, dml_conf_check_zone,
	  "where this client is (rack, cloud region): a server of another zone gets each "
	  "table's cross-zone codecs" },
	{ "client", "codec", DML_CONF_STRING, O(codec[0]), "none", 0, 0, NULL,
	  dml_conf_check_codec, "without a scheduler: how pushes travel to a server of this "
	  "zone (none, fp16, bf16, int8, topk:FRACTION, topk16:FRACTION); with one, the job "
	  "file's table keys decide" },
	{ "client", "codec_cross_zone", DML_CONF_STRING, O(codec[1]), "fp16", 0, 0, NULL,
	  dml_conf_check_codec, "without a scheduler: how pushes travel to a server of "
	  "another zone" },
	{ "client", "pull_codec", DML_CONF_STRING, O(pull_codec[0]), "none", 0, 0, NULL,
	  dml_conf_check_pull_codec, "without a scheduler: how pull replies travel from a "
	  "server of this zone (none, fp16, bf16, int8)" },
	{ "client", "pull_codec_cross_zone", DML_CONF_STRING, O(pull_codec[1]), "fp16", 0, 0,
	  NULL, dml_conf_check_codec, "without a scheduler: how pull replies travel "
	  "from a server of another zone (topk:FRACTION or topk16:FRACTION: delta pulls "
	  "through the aggregator, fp16 straight)" },
	{ "client", "aggregator", DML_CONF_STRING, O(aggregator), "", 0, 0, NULL, check_peer,
	  "host:port of this zone's dml-aggregator: pushes and pulls go through it while "
	  "it is up, control frames (HELLO, CLOCK, BYE) straight to the servers (empty: "
	  "none)" },
	{ "client", "aggregator_timeout_ms", DML_CONF_U32, O(aggregator_timeout_ms), "3000",
	  1, 3600000, NULL, NULL, "how long the aggregator may be unreachable with requests "
	  "in flight before they go straight to their servers" },
};

const struct dml_conf_schema dml_client_conf_schema =
	DML_CONF_SCHEMA_INIT("libdml", sections, options, check);

int dml_opts_new(dml_opts_t **out)
{
	dml_opts_t *o = dml_xcalloc(1, sizeof(*o));
	char err[256];
	int rc;

	if (!out)
		return DML_EINVAL;
	/* An empty [client] section gives every default. */
	rc = dml_conf_parse_string(&dml_client_conf_schema, "defaults", "[client]\n",
				   &o->conf, err, sizeof(err));
	if (rc) {
		dml_conf_free(&dml_client_conf_schema, &o->conf);
		free(o);
		return rc;
	}
	*out = o;
	return 0;
}

static size_t field_size(enum dml_conf_type type)
{
	switch (type) {
	case DML_CONF_U64:
	case DML_CONF_SIZE:
		return sizeof(uint64_t);
	case DML_CONF_I64:
		return sizeof(int64_t);
	case DML_CONF_U32:
		return sizeof(uint32_t);
	case DML_CONF_DOUBLE:
		return sizeof(double);
	case DML_CONF_BOOL:
	case DML_CONF_ENUM:
		return sizeof(int);
	default:
		return sizeof(char *);
	}
}

int dml_opts_set(dml_opts_t *o, const char *key, const char *value)
{
	const struct dml_conf_option *opt = NULL;
	struct dml_client_conf tmp;
	char text[4200], err[512];
	int rc;

	if (!o || !key || !value || strchr(value, '\n'))
		return DML_EINVAL;
	for (size_t i = 0; i < DML_ARRAY_LEN(options); i++)
		if (strcmp(options[i].key, key) == 0)
			opt = &options[i];
	if (!opt)
		return DML_EINVAL;
	if (snprintf(text, sizeof(text), "[client]\n%s = %s\n", key, value) >= (int)sizeof(text))
		return DML_ECONF;
	memset(&tmp, 0, sizeof(tmp));
	rc = dml_conf_parse_string(&dml_client_conf_schema, "option", text, &tmp, err,
				   sizeof(err));
	if (rc == 0) {
		char *dst = (char *)&o->conf + opt->offset, *src = (char *)&tmp + opt->offset;

		if (opt->type == DML_CONF_STRING || opt->type == DML_CONF_HOSTPORT) {
			free(*(char **)dst);
			*(char **)dst = *(char **)src;
			*(char **)src = NULL;
		} else {
			memcpy(dst, src, field_size(opt->type));
		}
	} else {
		dml_warn("%s", err);
	}
	dml_conf_free(&dml_client_conf_schema, &tmp);
	return rc ? DML_ECONF : 0;
}

int dml_opts_load(dml_opts_t *o, const char *path, char *err, size_t errlen)
{
	struct dml_client_conf tmp;
	int rc;

	if (!o || !path)
		return DML_EINVAL;
	memset(&tmp, 0, sizeof(tmp));
	rc = dml_conf_load(&dml_client_conf_schema, path, &tmp, err, errlen);
	if (rc) {
		dml_conf_free(&dml_client_conf_schema, &tmp);
		return rc;
	}
	dml_conf_free(&dml_client_conf_schema, &o->conf);
	o->conf = tmp;
	return 0;
}

void dml_opts_free(dml_opts_t *o)
{
	if (!o)
		return;
	dml_conf_free(&dml_client_conf_schema, &o->conf);
	free(o);
}
