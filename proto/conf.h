/*
 * The one configuration parser, driven by a table of options (STYLE #10).
 *
 * Files are `key = value` lines grouped under `[section]` headers; `#` or `;`
 * starts a comment line; blank lines are ignored; values run to the end of
 * the line with surrounding blanks trimmed (no quoting). A section marked
 * repeated (e.g. [table]) may appear many times; each occurrence is a new
 * element. An unknown section or key, a duplicate key, a bad value or a
 * missing required key is an error reported as "file:line: message". After
 * parsing, the schema's cross-field check runs. The same table prints --help
 * and the effective configuration.
 */
#ifndef DML_CONF_H
#define DML_CONF_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

enum dml_conf_type {
	DML_CONF_STRING,  /* char *, strdup'ed; freed by dml_conf_free */
	DML_CONF_U64,     /* uint64_t, bounds min..max */
	DML_CONF_U32,     /* uint32_t, bounds min..max */
	DML_CONF_I64,     /* int64_t, bounds min..max */
	DML_CONF_DOUBLE,  /* double, bounds min..max */
	DML_CONF_SIZE,    /* uint64_t with optional K/M/G suffix */
	DML_CONF_BOOL,    /* int: yes/no, true/false, on/off, 1/0 */
	DML_CONF_ENUM,    /* int: index into choices */
	DML_CONF_HOSTPORT /* char *, must parse as host:port */
};

/** A [section]. Options name their section by this name. */
struct dml_conf_section {
	const char *name;
	int repeated;          /* may appear more than once */
	/* repeated only: element size, and where the root keeps the array */
	size_t elem_size;
	size_t array_offset;   /* offset of a `void *` (array of elements) in root */
	size_t count_offset;   /* offset of a `size_t` element count in root */
	const char *help;
};

struct dml_conf_option {
	const char *section;
	const char *key;
	enum dml_conf_type type;
	/* offset of the field: in root for plain sections, in the element for
	 * repeated ones */
	size_t offset;
	const char *def;       /* default as text; NULL means required */
	double min, max;       /* numeric bounds (inclusive) */
	const char *const *choices; /* ENUM: NULL-terminated */
	/* optional extra check of the parsed field; writes a reason to err */
	int (*validate)(const void *field, char *err, size_t errlen);
	const char *help;
};

struct dml_conf_schema {
	const char *program;   /* for --help */
	const struct dml_conf_section *sections;
	size_t nsections;
	const struct dml_conf_option *options;
	size_t noptions;
	/* cross-field check after parsing; writes a reason (no file:line) */
	int (*check)(void *root, char *err, size_t errlen);
};

/**
 * Parse the file at path into root (caller's zeroed struct). On error
 * returns DML_ECONF (bad content: err holds "path:line: message" or
 * "path: message" for cross-field and missing-key errors) or DML_EIO (file
 * cannot be read: err holds "path: strerror"). root must still be released
 * with dml_conf_free() in both cases.
 */
int dml_conf_load(const struct dml_conf_schema *schema, const char *path, void *root,
		  char *err, size_t errlen);

/** The same on text in memory; name is used in place of the path. */
int dml_conf_parse_string(const struct dml_conf_schema *schema, const char *name,
			  const char *text, void *root, char *err, size_t errlen);

/** Free strings and repeated arrays the parser allocated in root. */
void dml_conf_free(const struct dml_conf_schema *schema, void *root);

/** Print every section and option with type, default, bounds and help. */
void dml_conf_print_help(const struct dml_conf_schema *schema, FILE *out);

/** Print the effective configuration in the file format. */
void dml_conf_print(const struct dml_conf_schema *schema, const void *root, FILE *out);

/*
 * Checks that several daemons' option tables share (the validate member of
 * a row; each takes a char * field).
 */
/** log_level choices, in enum dml_log_level order. */
extern const char *const dml_conf_log_levels[];
/** host:port with a port 1..65535: an address this process dials. */
int dml_conf_check_dial(const void *field, char *err, size_t errlen);
/** Empty, or host:port with a port 1..65535 (e.g. an advertised address). */
int dml_conf_check_dial_optional(const void *field, char *err, size_t errlen);
/** Empty (off), or host:port to listen on; port 0 picks a free one. */
int dml_conf_check_listen_optional(const void *field, char *err, size_t errlen);
/** A placement zone: at most 63 letters, digits, '-', '_' or '.'. */
int dml_conf_check_zone(const void *field, char *err, size_t errlen);
/** A codec: none, fp16, bf16, int8 or topk:FRACTION (codec.h). */
int dml_conf_check_codec(const void *field, char *err, size_t errlen);
/** A codec for pull replies: one that sends every value (not topk). */
int dml_conf_check_pull_codec(const void *field, char *err, size_t errlen);

/**
 * The cross-field check of a daemon's metrics_listen and metrics_port_file:
 * a port file needs an endpoint. 0, or DML_ECONF with the reason in err.
 */
int dml_conf_check_metrics(const char *listen, const char *port_file, char *err,
			   size_t errlen);

/**
 * The cross-field check of a daemon that registers with a scheduler: with
 * a scheduler and no advertise, listen may not be a wildcard address (it
 * would send every peer to itself). 0, or DML_ECONF with the reason in err.
 */
int dml_conf_check_advertise(const char *scheduler, const char *advertise,
			     const char *listen, char *err, size_t errlen);

/*
 * Rows that the daemons' option tables share word for word but for the
 * section (sec) and the field (an offsetof), so that a key means the same
 * in every file.
 */
/* listen (default def) and port_file. */
#define DML_CONF_OPT_LISTEN(sec, listen_off, def, port_file_off) \
	{ sec, "listen", DML_CONF_HOSTPORT, listen_off, def, 0, 0, NULL, NULL, \
	  "address to listen on; port 0 picks a free port" }, \
	{ sec, "port_file", DML_CONF_STRING, port_file_off, "", 0, 0, NULL, NULL, \
	  "write the bound port here once listening (empty: don't)" }
#define DML_CONF_OPT_CLUSTER(sec, off) \
	{ sec, "cluster", DML_CONF_STRING, off, "dml", 0, 0, NULL, NULL, \
	  "cluster name; peers must use the same" }
#define DML_CONF_OPT_SECRET_FILE(sec, off) \
	{ sec, "secret_file", DML_CONF_STRING, off, NULL, 0, 0, NULL, NULL, \
	  "file holding the cluster secret (mode 0600)" }
#define DML_CONF_OPT_LOG_LEVEL(sec, off) \
	{ sec, "log_level", DML_CONF_ENUM, off, "info", 0, 0, dml_conf_log_levels, NULL, \
	  "lowest level logged to stderr" }
/* metrics_listen and metrics_port_file (see dml_conf_check_metrics). */
#define DML_CONF_OPT_METRICS(sec, listen_off, port_file_off) \
	{ sec, "metrics_listen", DML_CONF_STRING, listen_off, "", 0, 0, NULL, \
	  dml_conf_check_listen_optional, \
	  "serve Prometheus metrics (GET /metrics) on host:port; empty: off, port 0: any" }, \
	{ sec, "metrics_port_file", DML_CONF_STRING, port_file_off, "", 0, 0, NULL, NULL, \
	  "write the metrics port here once serving (empty: don't)" }
/* [limits] max_meta, max_payload and max_keys of a daemon that takes data frames. */
#define DML_CONF_OPT_FRAME_LIMITS(meta_off, payload_off, keys_off) \
	{ "limits", "max_meta", DML_CONF_SIZE, meta_off, "64K", 64, 16777216.0, NULL, NULL, \
	  "largest frame metadata accepted" }, \
	{ "limits", "max_payload", DML_CONF_SIZE, payload_off, "256M", 1024, 4294967295.0, \
	  NULL, NULL, "largest frame payload accepted" }, \
	{ "limits", "max_keys", DML_CONF_U64, keys_off, "1048576", 1, 4294967295.0, NULL, \
	  NULL, "most keys in one sparse request" }
/* [limits] of a daemon that accepts connections: max_connections, max_preauth. */
#define DML_CONF_OPT_PEER_LIMITS(conn_off, preauth_off) \
	{ "limits", "max_connections", DML_CONF_U32, conn_off, "1024", 1, 1000000, NULL, \
	  NULL, "connections beyond this are refused" }, \
	{ "limits", "max_preauth", DML_CONF_U32, preauth_off, "64", 1, 1000000, NULL, NULL, \
	  "most connections still in their handshake; past it, or when max_connections " \
	  "is reached, the oldest unauthenticated one is closed to make room" }
/*
 * local_socket of a daemon that listens: serve and dial on this host over
 * abstract Unix sockets (proto/local.h), large payloads through shared
 * memory (proto/shm_ring.h). On by default: a peer on the same host is
 * the common case (a worker beside its server, dml-local) and the Unix path
 * is the faster one for every size measured; a peer elsewhere, or in
 * another network namespace, gets TCP as before.
 */
#define DML_CONF_OPT_LOCAL_SOCKET(sec, off) \
	{ sec, "local_socket", DML_CONF_BOOL, off, "yes", 0, 0, NULL, NULL, \
	  "also serve on an abstract Unix socket named after the address and port " \
	  "listened on, and reach daemons of this host through theirs, payloads of " \
	  "64 KiB and more through shared memory (the default); no: TCP only" }
/* local_socket of a process that only dials (libdml, dml-worker). */
#define DML_CONF_OPT_LOCAL_DIAL(sec, off) \
	{ sec, "local_socket", DML_CONF_BOOL, off, "yes", 0, 0, NULL, NULL, \
	  "reach servers and the scheduler on this host through their abstract Unix " \
	  "socket when they have one, payloads of 64 KiB and more through shared " \
	  "memory (the default); no: TCP only" }
/* [limits] handshake_timeout_ms of a daemon that accepts connections. */
#define DML_CONF_OPT_HANDSHAKE_TIMEOUT(off) \
	{ "limits", "handshake_timeout_ms", DML_CONF_U32, off, "5000", 1, 600000, NULL, NULL, \
	  "a peer must authenticate within this time" }

/** A schema's initializer from its arrays of sections and options. */
#define DML_CONF_SCHEMA_INIT(prog, secs, opts, chk) \
	{ .program = (prog), .sections = (secs), \
	  .nsections = sizeof(secs) / sizeof((secs)[0]), .options = (opts), \
	  .noptions = sizeof(opts) / sizeof((opts)[0]), .check = (chk) }

#endif
