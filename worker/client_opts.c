/*
 * libdml options: the [client] option table and dml_opts_*. Values are
 * validated by the same config parser the daemons use, so a bad value gets
 * the same message whether it comes from a file or from dml_opts_set().
 */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client_internal.h"
#include "dml.h"
#include "log.h"
#include "util.h"

#define O(field) offsetof(struct dml_client_conf, field)

static const char *const roles[] = { "worker", "control", NULL };

static const struct dml_conf_section sections[] = {
	{ "client", 0, 0, 0, 0, "how libdml reaches the servers" },
};

static const struct dml_conf_option options[] = {
	{ "client", "servers", DML_CONF_STRING, O(servers), "", 0, 0, NULL, NULL,
	  "comma-separated host:port list, in shard order" },
	{ "client", "secret_file", DML_CONF_STRING, O(secret_file), "", 0, 0, NULL, NULL,
	  "cluster secret (mode 0600)" },
	{ "client", "cluster", DML_CONF_STRING, O(cluster), "dml", 0, 0, NULL, NULL,
	  "cluster name" },
	{ "client", "worker_id", DML_CONF_U32, O(worker_id), "0", 0, 2147483647.0, NULL, NULL,
	  "this worker's node id (required for role worker)" },
	{ "client", "role", DML_CONF_ENUM, O(role), "worker", 0, 0, roles, NULL,
	  "worker (takes part in clocks) or control (reads, no clocks)" },
	{ "client", "job", DML_CONF_U32, O(job), "0", 0, 4294967295.0, NULL, NULL, "job id" },
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
};

const struct dml_conf_schema dml_client_conf_schema = {
	.program = "libdml",
	.sections = sections,
	.nsections = DML_ARRAY_LEN(sections),
	.options = options,
	.noptions = DML_ARRAY_LEN(options),
};

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
