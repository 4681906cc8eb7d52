/*
 * dmlctl: the operator's command line for a dml cluster. It talks to
 * dml-sched as a CONTROL peer over the connection layer (proto/conn.h, with
 * the cluster secret's handshake) on an event loop of its own: one request,
 * one reply, print, exit.
 *
 * Exit status: 0 success; 1 the scheduler could not be reached or answered
 * with an error (the message names the address, and says so when the secret
 * was refused); 2 bad usage or an unknown command.
 *
 * Must never: wait longer than its timeout, exit 0 without having printed
 * the whole answer, or copy bytes a peer sent to the terminal or into JSON
 * without escaping them.
 */
#include <getopt.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>

#include "auth.h"
#include "conn.h"
#include "dml_error.h"
#include "log.h"
#include "util.h"

#define DEFAULT_SCHEDULER "127.0.0.1:7000"
#define DEFAULT_SECRET_FILE "/etc/dml/secret"
#define DEFAULT_CLUSTER "dml"
#define TIMEOUT_MS 5000
/* Replies list the whole cluster: allow far more than a daemon accepts. */
#define REPLY_MAX_META (16u << 20)

enum { EXIT_OK = 0, EXIT_FAIL = 1, EXIT_USAGE = 2 };

struct ctl {
	const char *addr;           /* scheduler as given */
	const char *addr_source;    /* "-s", "$DML_SCHEDULER" or "default" */
	char host[256];
	uint16_t port;
	const char *secret_file;
	const char *cluster;
	int json;
};

struct command {
	const char *name;
	const char *args;
	const char *help;
	int (*run)(struct ctl *ctl, int argc, char **argv); /* NULL: not built yet */
};

/* ---- one request, one reply ------------------------------------------------ */

struct exchange {
	const struct ctl *ctl;
	struct dml_conn *conn;
	Dml__Meta *request;
	Dml__Meta *reply;           /* deep copy of the answer */
	int ready;                  /* the handshake succeeded */
	int refused;                /* the scheduler answered with ERROR */
	int not_scheduler;          /* the peer is some other daemon */
	int err;
	int done;                   /* on_close ran */
	char detail[256];           /* the scheduler's error message */
};

static Dml__Meta *meta_copy(const Dml__Meta *m)
{
	size_t len = dml__meta__get_packed_size(m);
	uint8_t *buf = dml_xmalloc(len ? len : 1);
	Dml__Meta *copy;

	dml__meta__pack(m, buf);
	copy = dml__meta__unpack(NULL, len, buf);
	free(buf);
	return copy;
}

static int on_welcome(struct dml_conn *c, const Dml__Handshake *w, void *arg)
{
	struct exchange *ex = arg;

	if (w->role != DML__ROLE__SCHEDULER) {
		ex->not_scheduler = 1;
		return DML_EROLE;
	}
	return 0;
}

static void on_ready(struct dml_conn *c, void *arg)
{
	struct exchange *ex = arg;
	int rc;

	ex->ready = 1;
	rc = dml_conn_send(c, ex->request, NULL, 0, DML_SEND_COPY);
	if (rc) {
		ex->err = rc;
		dml_conn_abort(c, rc);
	}
}

static int on_frame(struct dml_conn *c, const Dml__Meta *m, const uint8_t *payload,
		    size_t len, void *arg)
{
	struct exchange *ex = arg;

	/* An ERROR with request id 0 refuses the connection as a whole. */
	if ((m->request_id != ex->request->request_id &&
	     !(m->type == DML__MSG_TYPE__ERROR && m->request_id == 0)) || ex->reply || ex->err)
		return 0;
	if (m->type == DML__MSG_TYPE__ERROR) {
		ex->refused = 1;
		ex->err = m->error->code < 0 && m->error->code > DML_ERR_MIN ? m->error->code
									    : DML_EIO;
		snprintf(ex->detail, sizeof(ex->detail), "%s",
			 m->error->message && *m->error->message ? m->error->message
								 : dml_strerror(ex->err));
	} else {
		ex->reply = meta_copy(m);
		if (!ex->reply)
			ex->err = DML_ENOMEM;
	}
	dml_conn_close(c, 0);
	return 0;
}

static void on_close(struct dml_conn *c, int err, void *arg)
{
	struct exchange *ex = arg;

	ex->conn = NULL;
	ex->done = 1;
	if (!ex->err && !ex->reply)
		ex->err = err ? err : DML_ECONN;
}

static const struct dml_conn_ops ctl_ops = {
	.on_welcome = on_welcome,
	.on_ready = on_ready,
	.on_frame = on_frame,
	.on_close = on_close,
};

static void timeout_cb(evutil_socket_t fd, short what, void *arg)
{
	struct exchange *ex = arg;

	if (!ex->err)
		ex->err = DML_ETIMEDOUT;
	if (ex->conn)
		dml_conn_abort(ex->conn, DML_ETIMEDOUT);
}

/* Every failure as one line an operator can act on. */
static void report(const struct ctl *ctl, const struct exchange *ex)
{
	const char *a = ctl->addr;

	if (ex->refused) {
		fprintf(stderr, "dmlctl: the scheduler at %s refused the request: %s\n", a,
			ex->detail);
	} else if (ex->not_scheduler) {
		fprintf(stderr, "dmlctl: %s is not a scheduler (a dml-server's port?); "
			"check -s or $DML_SCHEDULER\n", a);
	} else if (ex->err == DML_EAUTH) {
		fprintf(stderr, "dmlctl: authentication failed with the scheduler at %s: "
			"the secret in %s is not the cluster's\n", a, ctl->secret_file);
	} else if (ex->err == DML_ECLUSTER) {
		fprintf(stderr, "dmlctl: the scheduler at %s serves another cluster than "
			"'%s' (--cluster)\n", a, ctl->cluster);
	} else if (ex->err == DML_ETIMEDOUT) {
		fprintf(stderr, "dmlctl: %s the scheduler at %s: timed out after %d s\n",
			ex->ready ? "no answer from" : "cannot connect to", a, TIMEOUT_MS / 1000);
	} else if (!ex->ready) {
		fprintf(stderr, "dmlctl: cannot connect to the scheduler at %s (%s): is "
			"dml-sched running there? (address from %s)\n", a,
			dml_strerror(ex->err), ctl->addr_source);
	} else {
		fprintf(stderr, "dmlctl: lost the connection to the scheduler at %s before "
			"its answer (%s)\n", a, dml_strerror(ex->err));
	}
}

/*
 * Send req (type set by the caller) and wait for the answer to it, at most
 * TIMEOUT_MS in all. On success *reply is a copy to free with
 * dml__meta__free_unpacked(); on failure the reason is printed.
 */
static int ctl_request(const struct ctl *ctl, Dml__Meta *req, Dml__Meta **reply)
{
	struct timeval tv = { TIMEOUT_MS / 1000, (TIMEOUT_MS % 1000) * 1000 };
	struct exchange ex = { .ctl = ctl, .request = req };
	struct dml_conn_conf cc;
	struct event_base *base;
	struct event *timer;
	uint8_t *secret;
	size_t secret_len;
	int rc;

	*reply = NULL;
	if (dml_secret_load(ctl->secret_file, &secret, &secret_len) != 0) {
		fprintf(stderr, "dmlctl: no usable cluster secret (--secret or "
			"$DML_SECRET_FILE)\n");
		return DML_ESECRET;
	}
	base = event_base_new();
	if (!base) {
		dml_secret_free(secret, secret_len);
		fprintf(stderr, "dmlctl: cannot create an event loop\n");
		return DML_ENOMEM;
	}
	dml_conn_conf_default(&cc);
	cc.limits.max_meta = REPLY_MAX_META;
	cc.secret = secret;
	cc.secret_len = secret_len;
	cc.cluster = ctl->cluster;
	cc.role = DML__ROLE__CONTROL;
	cc.node_id = 0;
	cc.handshake_timeout_ms = TIMEOUT_MS;
	if (dml_random_bytes(&cc.incarnation, sizeof(cc.incarnation)) != 0)
		cc.incarnation = 1;
	req->request_id = 1;
	timer = evtimer_new(base, timeout_cb, &ex);
	evtimer_add(timer, &tv);
	rc = dml_conn_connect(base, ctl->host, ctl->port, &cc, &ctl_ops, &ex, &ex.conn);
	if (rc) {
		ex.err = rc;
		ex.done = 1;
		ex.conn = NULL;
	}
	while (!ex.done)
		event_base_loop(base, EVLOOP_ONCE);
	event_free(timer);
	event_base_free(base);
	dml_secret_free(secret, secret_len);
	if (ex.reply && !ex.err) {
		*reply = ex.reply;
		return 0;
	}
	if (ex.reply)
		dml__meta__free_unpacked(ex.reply, NULL);
	report(ctl, &ex);
	return ex.err ? ex.err : DML_EIO;
}

/* ---- printing ---------------------------------------------------------------- */

static const char *role_name(uint32_t role)
{
	switch (role) {
	case DML__ROLE__WORKER: return "worker";
	case DML__ROLE__SERVER: return "server";
	case DML__ROLE__SCHEDULER: return "scheduler";
	case DML__ROLE__AGGREGATOR: return "aggregator";
	case DML__ROLE__CONTROL: return "control";
	default: return "unknown";
	}
}

static const char *state_name(uint32_t state)
{
	switch (state) {
	case DML__NODE_STATE__ALIVE: return "alive";
	case DML__NODE_STATE__SUSPECT: return "suspect";
	case DML__NODE_STATE__DEAD: return "dead";
	default: return "unknown";
	}
}

/* Length of the valid UTF-8 sequence at s (NUL-terminated), or 0. */
static size_t utf8_len(const unsigned char *s)
{
	uint32_t cp;
	size_t n;

	if (s[0] < 0x80)
		return 1;
	if (s[0] >= 0xc2 && s[0] <= 0xdf) {
		n = 2;
		cp = s[0] & 0x1f;
	} else if (s[0] >= 0xe0 && s[0] <= 0xef) {
		n = 3;
		cp = s[0] & 0x0f;
	} else if (s[0] >= 0xf0 && s[0] <= 0xf4) {
		n = 4;
		cp = s[0] & 0x07;
	} else {
		return 0;
	}
	/* A NUL fails the continuation test, so this never reads past the end. */
	for (size_t i = 1; i < n; i++) {
		if ((s[i] & 0xc0) != 0x80)
			return 0;
		cp = cp << 6 | (s[i] & 0x3f);
	}
	if ((n == 3 && cp < 0x800) || (n == 4 && (cp < 0x10000 || cp > 0x10ffff)) ||
	    (cp >= 0xd800 && cp <= 0xdfff))
		return 0;
	return n;
}

/* A JSON string: quotes, backslashes and controls escaped, bad UTF-8 as U+FFFD. */
static void json_string(FILE *out, const char *s)
{
	const unsigned char *p = (const unsigned char *)(s ? s : "");

	fputc('"', out);
	while (*p) {
		size_t n = utf8_len(p);

		if (n == 0) {
			fputs("\\ufffd", out);
			p++;
			continue;
		}
		if (n > 1) {
			fwrite(p, 1, n, out);
			p += n;
			continue;
		}
		switch (*p) {
		case '"': fputs("\\\"", out); break;
		case '\\': fputs("\\\\", out); break;
		case '\n': fputs("\\n", out); break;
		case '\r': fputs("\\r", out); break;
		case '\t': fputs("\\t", out); break;
		case '\b': fputs("\\b", out); break;
		case '\f': fputs("\\f", out); break;
		default:
			if (*p < 0x20 || *p == 0x7f)
				fprintf(out, "\\u%04x", *p);
			else
				fputc(*p, out);
		}
		p++;
	}
	fputc('"', out);
}

/* JSON has no inf or nan. */
static void json_double(FILE *out, double v)
{
	if (isfinite(v))
		fprintf(out, "%.15g", v);
	else
		fputs("null", out);
}

static void json_profile(FILE *out, const Dml__Profile *p)
{
	if (!p) {
		fputs("null", out);
		return;
	}
	fputs("{\"device\":", out);
	json_string(out, p->device);
	fprintf(out, ",\"cores\":%u,\"memory_bytes\":%llu,\"gflops\":", p->cores,
		(unsigned long long)p->memory_bytes);
	json_double(out, p->gflops);
	fputs(",\"examples_per_s\":", out);
	json_double(out, p->examples_per_s);
	fputs(",\"link_mbps\":", out);
	json_double(out, p->link_mbps);
	fputc('}', out);
}

static void print_nodes_json(FILE *out, const Dml__Meta *r)
{
	fputs("{\"nodes\":[", out);
	for (size_t i = 0; i < r->n_nodes; i++) {
		const Dml__NodeInfo *n = r->nodes[i];

		fprintf(out, "%s{\"role\":\"%s\",\"id\":%u,\"zone\":", i ? "," : "",
			role_name(n->role), n->node_id);
		json_string(out, n->zone);
		fputs(",\"address\":", out);
		json_string(out, n->address);
		fprintf(out, ",\"state\":\"%s\",\"last_heartbeat_ms\":%llu,\"reason\":",
			state_name(n->state), (unsigned long long)n->last_heartbeat_ms);
		json_string(out, n->reason);
		if (n->shard_count)
			fprintf(out, ",\"shard\":\"%u/%u\"", n->shard_index, n->shard_count);
		else
			fputs(",\"shard\":null", out);
		fputs(",\"profile\":", out);
		json_profile(out, n->profile);
		fputc('}', out);
	}
	fputs("]}\n", out);
}

/* Table cells: what a peer sent, with control characters made harmless. */
static char *cell(const char *s)
{
	char *c = dml_xstrdup(s && *s ? s : "-");

	for (char *p = c; *p; p++)
		if ((unsigned char)*p < 0x20 || *p == 0x7f)
			*p = '?';
	return c;
}

static char *cell_age(uint64_t ms)
{
	char buf[48];

	if (ms < 1000)
		snprintf(buf, sizeof(buf), "%llums", (unsigned long long)ms);
	else if (ms < 60000)
		snprintf(buf, sizeof(buf), "%.1fs", (double)ms / 1000.0);
	else if (ms < 3600000)
		snprintf(buf, sizeof(buf), "%llum%02llus", (unsigned long long)(ms / 60000),
			 (unsigned long long)(ms / 1000 % 60));
	else if (ms < 86400000)
		snprintf(buf, sizeof(buf), "%lluh%02llum", (unsigned long long)(ms / 3600000),
			 (unsigned long long)(ms / 60000 % 60));
	else
		snprintf(buf, sizeof(buf), "%llud%02lluh", (unsigned long long)(ms / 86400000),
			 (unsigned long long)(ms / 3600000 % 24));
	return dml_xstrdup(buf);
}

enum { COL_ROLE, COL_ID, COL_ZONE, COL_ADDRESS, COL_STATE, COL_AGE, COL_REASON, NCOLS };

static void print_nodes_table(FILE *out, const Dml__Meta *r)
{
	static const char *const head[NCOLS] = {
		"ROLE", "ID", "ZONE", "ADDRESS", "STATE", "LAST-HEARTBEAT", "REASON"
	};
	size_t rows = r->n_nodes + 1, width[NCOLS];
	char **cells = dml_xcalloc(rows * NCOLS, sizeof(*cells));
	char id[16];

	for (int c = 0; c < NCOLS; c++)
		cells[c] = dml_xstrdup(head[c]);
	for (size_t i = 0; i < r->n_nodes; i++) {
		const Dml__NodeInfo *n = r->nodes[i];
		char **row = cells + (i + 1) * NCOLS;

		snprintf(id, sizeof(id), "%u", n->node_id);
		row[COL_ROLE] = dml_xstrdup(role_name(n->role));
		row[COL_ID] = dml_xstrdup(id);
		row[COL_ZONE] = cell(n->zone);
		row[COL_ADDRESS] = cell(n->address);
		row[COL_STATE] = dml_xstrdup(state_name(n->state));
		row[COL_AGE] = cell_age(n->last_heartbeat_ms);
		row[COL_REASON] = cell(n->reason);
	}
	for (int c = 0; c < NCOLS; c++) {
		width[c] = 0;
		for (size_t i = 0; i < rows; i++)
			if (strlen(cells[i * NCOLS + c]) > width[c])
				width[c] = strlen(cells[i * NCOLS + c]);
	}
	for (size_t i = 0; i < rows; i++) {
		for (int c = 0; c < NCOLS - 1; c++)
			fprintf(out, "%-*s  ", (int)width[c], cells[i * NCOLS + c]);
		fprintf(out, "%s\n", cells[i * NCOLS + NCOLS - 1]);
	}
	for (size_t i = 0; i < rows * NCOLS; i++)
		free(cells[i]);
	free(cells);
}

/* ---- commands ------------------------------------------------------------------ */

static int cmd_nodes(struct ctl *ctl, int argc, char **argv)
{
	Dml__Meta req = DML__META__INIT, *reply;

	if (argc > 0) {
		fprintf(stderr, "dmlctl: nodes takes no arguments (got '%s')\n", argv[0]);
		return EXIT_USAGE;
	}
	req.type = DML__MSG_TYPE__NODES;
	if (ctl_request(ctl, &req, &reply) != 0)
		return EXIT_FAIL;
	if (reply->type != DML__MSG_TYPE__NODES_REPLY) {
		fprintf(stderr, "dmlctl: the scheduler at %s answered with a %s frame\n",
			ctl->addr, dml_msg_type_name((int)reply->type));
		dml__meta__free_unpacked(reply, NULL);
		return EXIT_FAIL;
	}
	if (ctl->json)
		print_nodes_json(stdout, reply);
	else
		print_nodes_table(stdout, reply);
	dml__meta__free_unpacked(reply, NULL);
	return EXIT_OK;
}

/* Commands with no run function are planned; --help lists the others. */
static const struct command commands[] = {
	{ "nodes", "", "list the nodes: state, last heartbeat, why it last changed",
	  cmd_nodes },
	{ "submit", "JOB.conf", "submit a training job", NULL },
	{ "status", "[JOB]", "show jobs and their progress", NULL },
	{ "stop", "JOB", "stop a job", NULL },
	{ "pause", "JOB", "pause a job at the next clock boundary", NULL },
	{ "resume", "JOB", "resume a paused job", NULL },
	{ "top", "", "live view of the cluster's throughput", NULL },
	{ "shardmap", "[JOB]", "show the current shard map", NULL },
};

static const struct command *find_command(const char *name)
{
	for (size_t i = 0; i < DML_ARRAY_LEN(commands); i++)
		if (strcmp(commands[i].name, name) == 0)
			return &commands[i];
	return NULL;
}

static void usage(FILE *out)
{
	fprintf(out,
		"usage: dmlctl [-s HOST:PORT] [--secret FILE] [--cluster NAME] [--json] "
		"COMMAND [ARGS]\n"
		"       dmlctl --help\n\n"
		"Talks to dml-sched, the cluster's scheduler.\n\n"
		"Commands:\n");
	for (size_t i = 0; i < DML_ARRAY_LEN(commands); i++)
		if (commands[i].run)
			fprintf(out, "  %-8s %-8s %s\n", commands[i].name, commands[i].args,
				commands[i].help);
	fprintf(out,
		"\nOptions:\n"
		"  -s, --scheduler HOST:PORT  scheduler address (default: $DML_SCHEDULER, "
		"else %s)\n"
		"  --secret FILE              cluster secret (default: $DML_SECRET_FILE, "
		"else %s)\n"
		"  --cluster NAME             cluster name (default: %s)\n"
		"  --json                     print one JSON object instead of a table\n"
		"  -v, --verbose              log the connection's progress to stderr\n"
		"  -h, --help                 this text\n\n"
		"Exit status: 0 success; 1 the scheduler could not be reached (within %d s),\n"
		"refused the secret or the request; 2 bad usage or unknown command.\n",
		DEFAULT_SCHEDULER, DEFAULT_SECRET_FILE, DEFAULT_CLUSTER, TIMEOUT_MS / 1000);
}

static const char *env_or(const char *name, const char *def, int *from_env)
{
	const char *v = getenv(name);

	*from_env = v && *v;
	return *from_env ? v : def;
}

int main(int argc, char **argv)
{
	enum { OPT_SECRET = 256, OPT_CLUSTER, OPT_JSON };
	static const struct option longopts[] = {
		{ "scheduler", required_argument, NULL, 's' },
		{ "secret", required_argument, NULL, OPT_SECRET },
		{ "cluster", required_argument, NULL, OPT_CLUSTER },
		{ "json", no_argument, NULL, OPT_JSON },
		{ "verbose", no_argument, NULL, 'v' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 }
	};
	struct ctl ctl = { 0 };
	const struct command *cmd;
	int opt, from_env, rc;

	dml_log_set_ident("dmlctl");
	/* The connection layer's warnings would repeat what report() says. */
	dml_log_set_level(DML_LOG_ERROR);
	ctl.addr = env_or("DML_SCHEDULER", DEFAULT_SCHEDULER, &from_env);
	ctl.addr_source = from_env ? "$DML_SCHEDULER" : "the default";
	ctl.secret_file = env_or("DML_SECRET_FILE", DEFAULT_SECRET_FILE, &from_env);
	ctl.cluster = DEFAULT_CLUSTER;
	while ((opt = getopt_long(argc, argv, "s:vh", longopts, NULL)) != -1) {
		switch (opt) {
		case 's':
			ctl.addr = optarg;
			ctl.addr_source = "-s";
			break;
		case OPT_SECRET: ctl.secret_file = optarg; break;
		case OPT_CLUSTER: ctl.cluster = optarg; break;
		case OPT_JSON: ctl.json = 1; break;
		case 'v': dml_log_set_level(DML_LOG_DEBUG); break;
		case 'h':
			usage(stdout);
			return EXIT_OK;
		default:
			fprintf(stderr, "dmlctl: try 'dmlctl --help'\n");
			return EXIT_USAGE;
		}
	}
	if (optind >= argc) {
		usage(stderr);
		return EXIT_USAGE;
	}
	cmd = find_command(argv[optind]);
	if (!cmd) {
		fprintf(stderr, "dmlctl: unknown command '%s' (dmlctl --help lists them)\n",
			argv[optind]);
		return EXIT_USAGE;
	}
	if (!cmd->run) {
		fprintf(stderr, "dmlctl: '%s' is not available yet in this version\n",
			cmd->name);
		return EXIT_USAGE;
	}
	if (dml_parse_hostport(ctl.addr, ctl.host, sizeof(ctl.host), &ctl.port, 0) != 0) {
		fprintf(stderr, "dmlctl: scheduler address '%s' (from %s) is not HOST:PORT\n",
			ctl.addr, ctl.addr_source);
		return EXIT_USAGE;
	}
	if (!*ctl.cluster) {
		fprintf(stderr, "dmlctl: --cluster needs a name\n");
		return EXIT_USAGE;
	}
	/* A reader that goes away must turn into a write error, not a signal. */
	signal(SIGPIPE, SIG_IGN);
	rc = cmd->run(&ctl, argc - optind - 1, argv + optind + 1);
	if (fflush(stdout) != 0 || ferror(stdout)) {
		fprintf(stderr, "dmlctl: cannot write the output\n");
		rc = EXIT_FAIL;
	}
	libevent_global_shutdown();
	return rc;
}
