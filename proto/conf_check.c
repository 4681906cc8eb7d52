/*
 * Checks shared by the daemons' option tables (conf.h): validators of
 * host:port and zone options and the names of the log levels. A validator
 * writes its reason into err and returns DML_ECONF; it never logs.
 */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "proto/codec.h"
#include "proto/conf.h"
#include "proto/dml_error.h"
#include "proto/util.h"

const char *const dml_conf_log_levels[] = { "error", "warn", "info", "debug", NULL };

static int check_hostport(const char *s, int allow_empty, int allow_port0, char *err,
			  size_t errlen)
{
	char host[256];
	uint16_t port;

	if ((allow_empty && *s == '\0') ||
	    dml_parse_hostport(s, host, sizeof(host), &port, allow_port0) == 0)
		return 0;
	snprintf(err, errlen, "'%s' is %shost:port%s", s,
		 allow_empty ? "neither empty nor " : "not ",
		 allow_port0 ? "" : " with a port 1..65535");
	return DML_ECONF;
}

int dml_conf_check_dial(const void *field, char *err, size_t errlen)
{
	return check_hostport(*(const char *const *)field, 0, 0, err, errlen);
}

int dml_conf_check_dial_optional(const void *field, char *err, size_t errlen)
{
	return check_hostport(*(const char *const *)field, 1, 0, err, errlen);
}

int dml_conf_check_listen_optional(const void *field, char *err, size_t errlen)
{
	return check_hostport(*(const char *const *)field, 1, 1, err, errlen);
}

int dml_conf_check_metrics(const char *listen, const char *port_file, char *err,
			   size_t errlen)
{
	if (port_file[0] && !listen[0]) {
		snprintf(err, errlen, "metrics_port_file needs metrics_listen");
		return DML_ECONF;
	}
	return 0;
}

int dml_conf_check_advertise(const char *scheduler, const char *advertise,
			     const char *listen, char *err, size_t errlen)
{
	char host[256];
	uint16_t port;

	if (scheduler[0] && !advertise[0] &&
	    dml_parse_hostport(listen, host, sizeof(host), &port, 1) == 0 &&
	    (strcmp(host, "0.0.0.0") == 0 || strcmp(host, "::") == 0)) {
		snprintf(err, errlen, "advertise: required with scheduler when listen (%s) "
			 "is a wildcard address", listen);
		return DML_ECONF;
	}
	return 0;
}

/* Zones name racks and clouds in logs, metrics and dmlctl tables. */
int dml_conf_check_zone(const void *field, char *err, size_t errlen)
{
	const char *z = *(const char *const *)field;
	size_t n = strlen(z);

	if (n > 63) {
		snprintf(err, errlen, "zone is %zu characters long, at most 63 allowed", n);
		return DML_ECONF;
	}
	if (strspn(z, "abcdefghijklmnopqrstuvwxyz" "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
		   "0123456789-_.") != n) {
		snprintf(err, errlen, "zone '%s': only letters, digits, '-', '_' and '.' are "
			 "allowed", z);
		return DML_ECONF;
	}
	return 0;
}

/* A codec name (codec.h): how a table's values travel over a link. */
int dml_conf_check_codec(const void *field, char *err, size_t errlen)
{
	struct dml_codec c;

	return dml_codec_parse(*(const char *const *)field, &c, err, errlen) ? DML_ECONF : 0;
}

/* A pull reply carries every value: not topk. */
int dml_conf_check_pull_codec(const void *field, char *err, size_t errlen)
{
	struct dml_codec c;

	if (dml_codec_parse(*(const char *const *)field, &c, err, errlen))
		return DML_ECONF;
	if (dml_codec_sparse(c.kind)) {
		snprintf(err, errlen, "%s drops values, a pull reply carries them all "
			 "(none, fp16, bf16 or int8)", c.kind == DML_CODEC_TOPK ? "topk" : "topk16");
		return DML_ECONF;
	}
	return 0;
}
