/*
 * dmlctl: the operator's command line for a dml cluster. It talks to
 * dml-sched as a CONTROL peer over the connection layer (proto/conn.h, with
 * the cluster secret's handshake) on an event loop of its own: one
 * connection per run carrying one request and its reply at a time. The
 * commands that watch (submit --wait, top) poll over that connection and
 * connect again when it breaks.
 *
 * Exit status: 0 success; 1 the operation failed: the scheduler could not be
 * reached or refused the secret (the message names the address), refused the
 * request (no such job, a job already done), or the job waited for ended
 * FAILED or STOPPED; 2 bad usage, an unknown command or a bad job file; 130
 * interrupted while waiting for a job.
 *
 * Must never: wait longer than its timeout for one answer, exit 0 without
 * having printed the whole answer, or copy bytes a peer sent to the terminal
 * or into JSON without escaping them.
 */
#include <getopt.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <time.h>
#include <unistd.h>

#include <event2/event.h>

#include "auth.h"
#include "conn.h"
#include "dml_error.h"
#include "job_conf.h"
#include "log.h"
#include "util.h"

#define DEFAULT_SCHEDULER "127.0.0.1:7000"
#define DEFAULT_SECRET_FILE "/etc/dml/secret"
#define DEFAULT_CLUSTER "dml"
#define TIMEOUT_MS 5000
/* Replies list the whole cluster: allow far more than a daemon accepts. */
#define REPLY_MAX_META (16u << 20)
#define WAIT_POLL_MS 500
/* submit --wait: how long the scheduler may stay unreachable before giving up. */
#define WAIT_PATIENCE_MS 15000
#define TOP_REFRESH_MS 1000
#define PROGRESS_BAR 20

enum { EXIT_OK = 0, EXIT_FAIL = 1, EXIT_USAGE = 2, EXIT_INTERRUPTED = 130 };

/* Command options beyond the global ones, and which command takes them. */
enum { TAKES_WAIT = 1, TAKES_ONCE = 2 };

struct ctl {
	const char *addr;           /* scheduler as given */
	const char *addr_source;    /* "-s", "$DML_SCHEDULER" or "default" */
	char host[256];
	uint16_t port;
	const char *secret_file;
	const char *cluster;
	int json;
	int wait;                   /* submit --wait */
	int once;                   /* top --once */
};

struct command {
	const char *name;
	const char *args;
	const char *help;
	int (*run)(struct ctl *ctl, int argc, char **argv);
	unsigned takes;             /* TAKES_... */
};

/* ---- the session: one connection, one request at a time ----------------------- */

struct session {
	const struct ctl *ctl;
	struct event_base *base;
	struct event *timer;        /* bounds the operation in progress */
	struct event *nap;          /* session_sleep */
	struct event *sigint;       /* NULL unless watching */
	uint8_t *secret;
	size_t secret_len;
	struct dml_conn_conf cc;
	struct dml_conn *conn;      /* NULL when not connected */
	uint64_t last_id;
	/* The latest connection. */
	int ready;                  /* its handshake succeeded */
	int not_scheduler;          /* the peer is some other daemon */
	int closed;                 /* on_close ran */
	int close_err;
	/* The operation in progress: connecting, one request, or a nap. */
	uint64_t want;              /* request id awaited; 0: none */
	int last_type;              /* message type of the latest request */
	Dml__Meta *reply;           /* deep copy of the answer */
	int refused;                /* the scheduler answered with ERROR */
	int timed_out;
	int napping;
	int interrupted;            /* SIGINT while watching; sticky */
	int err;
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
	struct session *s = arg;

	if (w->role != DML__ROLE__SCHEDULER) {
		s->not_scheduler = 1;
		return DML_EROLE;
	}
	return 0;
}

static void on_ready(struct dml_conn *c, void *arg)
{
	struct session *s = arg;

	s->ready = 1;
}

static int on_frame(struct dml_conn *c, const Dml__Meta *m, const uint8_t *payload,
		    size_t len, void *arg)
{
	struct session *s = arg;
	/* An ERROR with request id 0 refuses the connection as a whole. */
	int whole = m->type == DML__MSG_TYPE__ERROR && m->request_id == 0;

	if (!s->want || (m->request_id != s->want && !whole))
		return 0;
	if (m->type == DML__MSG_TYPE__ERROR) {
		int code = m->error ? m->error->code : 0;

		s->refused = 1;
		s->err = code < 0 && code > DML_ERR_MIN ? code : DML_EIO;
		snprintf(s->detail, sizeof(s->detail), "%s",
			 m->error && m->error->message && *m->error->message
				 ? m->error->message : dml_strerror(s->err));
	} else {
		s->reply = meta_copy(m);
		if (!s->reply)
			s->err = DML_ENOMEM;
	}
	s->want = 0;
	if (whole)
		dml_conn_close(c, DML_ECONN);
	return 0;
}

static void on_close(struct dml_conn *c, int err, void *arg)
{
	struct session *s = arg;

	s->conn = NULL;
	s->closed = 1;
	s->close_err = err ? err : DML_ECONN;
}

static const struct dml_conn_ops ctl_ops = {
	.on_welcome = on_welcome,
	.on_ready = on_ready,
	.on_frame = on_frame,
	.on_close = on_close,
};

static void timeout_cb(evutil_socket_t fd, short what, void *arg)
{
	struct session *s = arg;

	s->timed_out = 1;
	if (s->conn)
		dml_conn_abort(s->conn, DML_ETIMEDOUT);
}

static void nap_cb(evutil_socket_t fd, short what, void *arg)
{
	struct session *s = arg;

	s->napping = 0;
}

static void sigint_cb(evutil_socket_t fd, short what, void *arg)
{
	struct session *s = arg;

	s->interrupted = 1;
	event_base_loopbreak(s->base);
}

static void arm(struct event *ev, int ms)
{
	struct timeval tv = { ms / 1000, (ms % 1000) * 1000 };

	evtimer_add(ev, &tv);
}

/* Load the secret and make the loop; nothing is connected yet. */
static int session_open(const struct ctl *ctl, struct session *s)
{
	memset(s, 0, sizeof(*s));
	s->ctl = ctl;
	if (dml_secret_load(ctl->secret_file, &s->secret, &s->secret_len) != 0) {
		fprintf(stderr, "dmlctl: no usable cluster secret in %s (--secret or "
			"$DML_SECRET_FILE)\n", ctl->secret_file);
		return DML_ESECRET;
	}
	s->base = event_base_new();
	if (!s->base) {
		dml_secret_free(s->secret, s->secret_len);
		fprintf(stderr, "dmlctl: cannot create an event loop\n");
		return DML_ENOMEM;
	}
	s->timer = evtimer_new(s->base, timeout_cb, s);
	s->nap = evtimer_new(s->base, nap_cb, s);
	dml_conn_conf_default(&s->cc);
	s->cc.limits.max_meta = REPLY_MAX_META;
	s->cc.secret = s->secret;
	s->cc.secret_len = s->secret_len;
	s->cc.cluster = ctl->cluster;
	s->cc.role = DML__ROLE__CONTROL;
	s->cc.node_id = 0;
	s->cc.handshake_timeout_ms = TIMEOUT_MS;
	if (dml_random_bytes(&s->cc.incarnation, sizeof(s->cc.incarnation)) != 0)
		s->cc.incarnation = 1;
	return 0;
}

/* From now on SIGINT ends the loop and sets s->interrupted. */
static void session_watch_interrupts(struct session *s)
{
	if (s->sigint)
		return;
	s->sigint = evsignal_new(s->base, SIGINT, sigint_cb, s);
	if (s->sigint)
		event_add(s->sigint, NULL);
}

/* Close the connection now and wait for its teardown. */
static void session_drop(struct session *s, int err)
{
	if (s->conn)
		dml_conn_abort(s->conn, err);
	while (s->conn)
		event_base_loop(s->base, EVLOOP_ONCE);
}

static void session_close(struct session *s)
{
	if (s->conn)
		dml_conn_close(s->conn, 0);
	while (s->conn)
		event_base_loop(s->base, EVLOOP_ONCE);
	if (s->sigint)
		event_free(s->sigint);
	event_free(s->timer);
	event_free(s->nap);
	event_base_free(s->base);
	dml_secret_free(s->secret, s->secret_len);
	if (s->reply)
		dml__meta__free_unpacked(s->reply, NULL);
	memset(s, 0, sizeof(*s));
}

static void session_reset(struct session *s)
{
	s->refused = s->timed_out = 0;
	s->err = 0;
	s->detail[0] = '\0';
}

/* Connect and authenticate, at most TIMEOUT_MS. 0 or the reason. */
static int session_connect(struct session *s)
{
	const struct ctl *ctl = s->ctl;
	int rc;

	session_reset(s);
	s->ready = s->not_scheduler = s->closed = 0;
	s->close_err = 0;
	arm(s->timer, TIMEOUT_MS);
	rc = dml_conn_connect(s->base, ctl->host, ctl->port, &s->cc, &ctl_ops, s, &s->conn);
	if (rc) {
		s->conn = NULL;
		s->closed = 1;
		s->close_err = rc;
	}
	while (s->conn && !s->ready && !s->interrupted)
		event_base_loop(s->base, EVLOOP_ONCE);
	evtimer_del(s->timer);
	if (s->conn && s->ready)
		return 0;
	session_drop(s, DML_ECLOSED);
	s->err = s->timed_out ? DML_ETIMEDOUT : s->close_err ? s->close_err : DML_ECONN;
	return s->err;
}

/*
 * Send req (type set by the caller) and wait for the answer to it, at most
 * TIMEOUT_MS, connecting first when needed. A connection from an earlier
 * request that turns out to be broken is replaced once. On success *reply
 * is a copy to free with dml__meta__free_unpacked(). Nothing is printed:
 * session_report() says what went wrong.
 */
static int session_call(struct session *s, Dml__Meta *req, Dml__Meta **reply)
{
	for (int attempt = 0;; attempt++) {
		int fresh = s->conn == NULL, rc;

		*reply = NULL;
		s->last_type = (int)req->type;
		if (s->interrupted)
			return DML_ECLOSED;
		if (fresh && session_connect(s) != 0)
			return s->err;
		session_reset(s);
		req->request_id = ++s->last_id;
		s->want = req->request_id;
		rc = dml_conn_send(s->conn, req, NULL, 0, DML_SEND_COPY);
		if (rc) {
			s->want = 0;
			session_drop(s, rc);
			s->closed = 1;
			s->close_err = rc;
		} else {
			arm(s->timer, TIMEOUT_MS);
			while (s->want && s->conn && !s->interrupted)
				event_base_loop(s->base, EVLOOP_ONCE);
			evtimer_del(s->timer);
			s->want = 0;
		}
		if (s->reply) {
			*reply = s->reply;
			s->reply = NULL;
			return 0;
		}
		/* Refused, or the answer could not be copied. */
		if (s->err)
			return s->err;
		if (s->interrupted)
			return DML_ECLOSED;
		s->err = s->timed_out ? DML_ETIMEDOUT
			 : s->close_err ? s->close_err : DML_ECONN;
		if (fresh || s->timed_out || attempt > 0)
			return s->err;
	}
}

/* Let the loop run for ms (the connection stays served), or until SIGINT. */
static void session_sleep(struct session *s, int ms)
{
	s->napping = 1;
	arm(s->nap, ms);
	while (s->napping && !s->interrupted)
		event_base_loop(s->base, EVLOOP_ONCE);
	evtimer_del(s->nap);
	s->napping = 0;
}

/* The failure of the latest session_connect() or session_call(), as one line. */
static void session_report(const struct session *s, FILE *out)
{
	const struct ctl *ctl = s->ctl;
	const char *a = ctl->addr;

	if (s->refused && s->last_type == DML__MSG_TYPE__NODES) {
		fprintf(out, "dmlctl: the scheduler at %s refused the request: %s\n", a,
			s->detail);
	} else if (s->refused) {
		/* Job requests: the scheduler's words say it best ("no job 7"). */
		fprintf(out, "dmlctl: %s\n", s->detail);
	} else if (s->not_scheduler) {
		fprintf(out, "dmlctl: %s is not a scheduler (a dml-server's port?); "
			"check -s or $DML_SCHEDULER\n", a);
	} else if (s->err == DML_EAUTH) {
		fprintf(out, "dmlctl: authentication failed with the scheduler at %s: "
			"the secret in %s is not the cluster's\n", a, ctl->secret_file);
	} else if (s->err == DML_ECLUSTER) {
		fprintf(out, "dmlctl: the scheduler at %s serves another cluster than "
			"'%s' (--cluster)\n", a, ctl->cluster);
	} else if (s->err == DML_ETIMEDOUT) {
		fprintf(out, "dmlctl: %s the scheduler at %s: timed out after %d s\n",
			s->ready ? "no answer from" : "cannot connect to", a,
			TIMEOUT_MS / 1000);
	} else if (!s->ready) {
		fprintf(out, "dmlctl: cannot connect to the scheduler at %s (%s): is "
			"dml-sched running there? (address from %s)\n", a,
			dml_strerror(s->err), ctl->addr_source);
	} else {
		fprintf(out, "dmlctl: lost the connection to the scheduler at %s before "
			"its answer (%s)\n", a, dml_strerror(s->err));
	}
}

/*
 * session_call() expecting an answer of type want. On failure the reason is
 * printed to out and the exit status returned; 0 with *reply to free.
 */
static int session_ask(struct session *s, Dml__Meta *req, Dml__MsgType want,
		       Dml__Meta **reply, FILE *out)
{
	int rc = session_call(s, req, reply);

	if (s->interrupted) {
		if (*reply)
			dml__meta__free_unpacked(*reply, NULL);
		*reply = NULL;
		return EXIT_INTERRUPTED;
	}
	if (rc != 0) {
		session_report(s, out);
		return EXIT_FAIL;
	}
	if ((*reply)->type != want) {
		fprintf(out, "dmlctl: the scheduler at %s answered %s with a %s frame\n",
			s->ctl->addr, dml_msg_type_name((int)req->type),
			dml_msg_type_name((int)(*reply)->type));
		dml__meta__free_unpacked(*reply, NULL);
		*reply = NULL;
		return EXIT_FAIL;
	}
	return EXIT_OK;
}

/* ---- JSON ---------------------------------------------------------------------- */

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

/*
 * A compact JSON writer: each call writes one member (key given) or array
 * element (key NULL), with the comma the previous one needs.
 */
struct json {
	FILE *out;
	int more;                   /* the next value needs a comma first */
};

static void json_key(struct json *j, const char *key)
{
	if (j->more)
		fputc(',', j->out);
	if (key) {
		json_string(j->out, key);
		fputc(':', j->out);
	}
	j->more = 1;
}

static void json_open(struct json *j, const char *key, char bracket)
{
	json_key(j, key);
	fputc(bracket, j->out);
	j->more = 0;
}

static void json_close(struct json *j, char bracket)
{
	fputc(bracket, j->out);
	j->more = 1;
}

static void json_str(struct json *j, const char *key, const char *v)
{
	json_key(j, key);
	json_string(j->out, v);
}

static void json_u64(struct json *j, const char *key, uint64_t v)
{
	json_key(j, key);
	fprintf(j->out, "%llu", (unsigned long long)v);
}

static void json_i64(struct json *j, const char *key, int64_t v)
{
	json_key(j, key);
	fprintf(j->out, "%lld", (long long)v);
}

/* JSON has no inf or nan: they become null. */
static void json_num(struct json *j, const char *key, double v)
{
	json_key(j, key);
	if (isfinite(v))
		fprintf(j->out, "%.15g", v);
	else
		fputs("null", j->out);
}

static void json_bool(struct json *j, const char *key, int v)
{
	json_key(j, key);
	fputs(v ? "true" : "false", j->out);
}

static void json_null(struct json *j, const char *key)
{
	json_key(j, key);
	fputs("null", j->out);
}

/* ---- names and cells ------------------------------------------------------------- */

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

static const char *action_name(int action)
{
	switch (action) {
	case DML__JOB_ACTION__STOP: return "stop";
	case DML__JOB_ACTION__PAUSE: return "pause";
	case DML__JOB_ACTION__RESUME: return "resume";
	default: return "none";
	}
}

static int job_ended(int state)
{
	return state == DML__JOB_STATE__DONE || state == DML__JOB_STATE__FAILED ||
	       state == DML__JOB_STATE__STOPPED;
}

/* What a peer sent, made harmless for a terminal, into buf (truncated). */
static const char *clean(const char *s, char *buf, size_t len)
{
	size_t i = 0;

	for (; s && s[i] && i + 1 < len; i++)
		buf[i] = (unsigned char)s[i] < 0x20 || s[i] == 0x7f ? '?' : s[i];
	buf[i] = '\0';
	return buf;
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

static char *cellf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static char *cellf(const char *fmt, ...)
{
	char buf[256];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	return dml_xstrdup(buf);
}

/* A figure with printf format fmt, or "-" when there is none (NaN). */
static char *cell_num(const char *fmt, double v)
{
	return isfinite(v) ? cellf(fmt, v) : dml_xstrdup("-");
}

/* Append to the NUL-terminated text in buf, truncating at len. */
static void addf(char *buf, size_t len, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static void addf(char *buf, size_t len, const char *fmt, ...)
{
	size_t used = strlen(buf);
	va_list ap;

	if (used + 1 >= len)
		return;
	va_start(ap, fmt);
	vsnprintf(buf + used, len - used, fmt, ap);
	va_end(ap);
}

static void fmt_age(uint64_t ms, char *buf, size_t len)
{
	if (ms < 1000)
		snprintf(buf, len, "%llums", (unsigned long long)ms);
	else if (ms < 60000)
		snprintf(buf, len, "%.1fs", (double)ms / 1000.0);
	else if (ms < 3600000)
		snprintf(buf, len, "%llum%02llus", (unsigned long long)(ms / 60000),
			 (unsigned long long)(ms / 1000 % 60));
	else if (ms < 86400000)
		snprintf(buf, len, "%lluh%02llum", (unsigned long long)(ms / 3600000),
			 (unsigned long long)(ms / 60000 % 60));
	else
		snprintf(buf, len, "%llud%02lluh", (unsigned long long)(ms / 86400000),
			 (unsigned long long)(ms / 3600000 % 24));
}

static char *cell_age(uint64_t ms)
{
	char buf[48];

	fmt_age(ms, buf, sizeof(buf));
	return dml_xstrdup(buf);
}

/* ---- tables ------------------------------------------------------------------------ */

/* Rows of malloc'ed cells printed in aligned columns; a NULL cell prints "-". */
struct table {
	size_t ncols, nrows;
	char **cells;               /* nrows * ncols */
};

static char **table_row(struct table *t)
{
	t->cells = dml_xrealloc(t->cells, (t->nrows + 1) * t->ncols * sizeof(*t->cells));
	memset(t->cells + t->nrows * t->ncols, 0, t->ncols * sizeof(*t->cells));
	return t->cells + t->nrows++ * t->ncols;
}

static void table_init(struct table *t, const char *const *head, size_t ncols)
{
	char **row;

	t->ncols = ncols;
	t->nrows = 0;
	t->cells = NULL;
	row = table_row(t);
	for (size_t c = 0; c < ncols; c++)
		row[c] = dml_xstrdup(head[c]);
}

static void table_print(const struct table *t, FILE *out, const char *indent)
{
	size_t *width = dml_xcalloc(t->ncols, sizeof(*width));

	for (size_t i = 0; i < t->nrows * t->ncols; i++) {
		size_t c = i % t->ncols, n = t->cells[i] ? strlen(t->cells[i]) : 1;

		if (n > width[c])
			width[c] = n;
	}
	for (size_t r = 0; r < t->nrows; r++) {
		char **row = t->cells + r * t->ncols;

		fputs(indent, out);
		for (size_t c = 0; c < t->ncols; c++) {
			const char *v = row[c] ? row[c] : "-";

			if (c + 1 < t->ncols)
				fprintf(out, "%-*s  ", (int)width[c], v);
			else
				fprintf(out, "%s\n", v);
		}
	}
	free(width);
}

static void table_free(struct table *t)
{
	for (size_t i = 0; i < t->nrows * t->ncols; i++)
		free(t->cells[i]);
	free(t->cells);
	t->cells = NULL;
	t->nrows = 0;
}

/* ---- nodes ------------------------------------------------------------------------- */

static void json_profile(struct json *j, const char *key, const Dml__Profile *p)
{
	if (!p) {
		json_null(j, key);
		return;
	}
	json_open(j, key, '{');
	json_str(j, "device", p->device);
	json_u64(j, "cores", p->cores);
	json_u64(j, "memory_bytes", p->memory_bytes);
	json_num(j, "gflops", p->gflops);
	json_num(j, "examples_per_s", p->examples_per_s);
	json_num(j, "link_mbps", p->link_mbps);
	json_close(j, '}');
}

static void print_nodes_json(FILE *out, const Dml__Meta *r)
{
	struct json j = { out, 0 };

	json_open(&j, NULL, '{');
	json_open(&j, "nodes", '[');
	for (size_t i = 0; i < r->n_nodes; i++) {
		const Dml__NodeInfo *n = r->nodes[i];
		char shard[32];

		json_open(&j, NULL, '{');
		json_str(&j, "role", role_name(n->role));
		json_u64(&j, "id", n->node_id);
		json_str(&j, "zone", n->zone);
		json_str(&j, "address", n->address);
		json_str(&j, "state", state_name(n->state));
		json_u64(&j, "last_heartbeat_ms", n->last_heartbeat_ms);
		json_str(&j, "reason", n->reason);
		if (n->shard_count) {
			snprintf(shard, sizeof(shard), "%u/%u", n->shard_index,
				 n->shard_count);
			json_str(&j, "shard", shard);
		} else {
			json_null(&j, "shard");
		}
		json_profile(&j, "profile", n->profile);
		json_close(&j, '}');
	}
	json_close(&j, ']');
	json_close(&j, '}');
	fputc('\n', out);
}

static void print_nodes_table(FILE *out, const Dml__Meta *r)
{
	static const char *const head[] = {
		"ROLE", "ID", "ZONE", "ADDRESS", "STATE", "LAST-HEARTBEAT", "REASON"
	};
	struct table t;

	table_init(&t, head, DML_ARRAY_LEN(head));
	for (size_t i = 0; i < r->n_nodes; i++) {
		const Dml__NodeInfo *n = r->nodes[i];
		char **row = table_row(&t);

		row[0] = dml_xstrdup(role_name(n->role));
		row[1] = cellf("%u", n->node_id);
		row[2] = cell(n->zone);
		row[3] = cell(n->address);
		row[4] = dml_xstrdup(state_name(n->state));
		row[5] = cell_age(n->last_heartbeat_ms);
		row[6] = cell(n->reason);
	}
	table_print(&t, out, "");
	table_free(&t);
}

/* ---- jobs as JSON ------------------------------------------------------------------ */

static void json_table_spec(struct json *j, const Dml__TableSpec *t)
{
	json_open(j, NULL, '{');
	json_u64(j, "id", t->id);
	json_bool(j, "dense", t->dense);
	json_u64(j, "width", t->width);
	json_u64(j, "keys", t->keys);
	json_u64(j, "capacity", t->capacity);
	json_str(j, "init", t->init);
	json_num(j, "init_scale", t->init_scale);
	json_u64(j, "seed", t->seed);
	json_str(j, "optimizer", t->optimizer);
	json_num(j, "lr", t->lr);
	json_num(j, "weight_decay", t->weight_decay);
	json_num(j, "momentum", t->momentum);
	json_num(j, "beta1", t->beta1);
	json_num(j, "beta2", t->beta2);
	json_num(j, "epsilon", t->epsilon);
	json_close(j, '}');
}

static void json_job_spec(struct json *j, const char *key, const Dml__JobSpec *sp)
{
	if (!sp) {
		json_null(j, key);
		return;
	}
	json_open(j, key, '{');
	json_str(j, "name", sp->name);
	json_str(j, "app", sp->app);
	json_str(j, "data", sp->data);
	json_str(j, "test_data", sp->test_data);
	json_open(j, "tables", '[');
	for (size_t i = 0; i < sp->n_tables; i++)
		json_table_spec(j, sp->tables[i]);
	json_close(j, ']');
	json_i64(j, "staleness", sp->staleness);
	json_u64(j, "batch_size", sp->batch_size);
	json_u64(j, "max_clocks", sp->max_clocks);
	json_num(j, "max_epochs", sp->max_epochs);
	json_num(j, "target", sp->target);
	json_str(j, "metric", sp->metric);
	json_u64(j, "workers", sp->workers);
	json_open(j, "worker_ids", '[');
	for (size_t i = 0; i < sp->n_worker_ids; i++)
		json_u64(j, NULL, sp->worker_ids[i]);
	json_close(j, ']');
	json_u64(j, "partitions", sp->partitions);
	json_u64(j, "examples", sp->examples);
	json_u64(j, "dim", sp->dim);
	json_str(j, "hidden", sp->hidden);
	json_u64(j, "eval_every", sp->eval_every);
	json_u64(j, "dead_after_ms", sp->dead_after_ms);
	json_num(j, "min_rate", sp->min_rate);
	json_u64(j, "seed", sp->seed);
	json_close(j, '}');
}

static void json_worker_status(struct json *j, const Dml__WorkerStatus *w)
{
	json_open(j, NULL, '{');
	json_u64(j, "worker", w->worker);
	json_str(j, "state", state_name(w->state));
	json_u64(j, "clock", w->clock);
	json_u64(j, "examples", w->examples);
	json_num(j, "examples_per_s", w->examples_per_s);
	json_num(j, "loss", w->loss);
	json_u64(j, "partitions", w->partitions);
	json_str(j, "reason", w->reason);
	json_num(j, "compute_s", w->compute_s);
	json_num(j, "wait_s", w->wait_s);
	json_close(j, '}');
}

static void json_job_status(struct json *j, const char *key, const Dml__JobStatus *st)
{
	json_open(j, key, '{');
	json_u64(j, "id", st->id);
	json_str(j, "name", st->name);
	json_str(j, "state", dml_job_state_name(st->state));
	json_str(j, "reason", st->reason);
	json_job_spec(j, "spec", st->spec);
	json_u64(j, "clock", st->clock);
	json_u64(j, "examples", st->examples);
	json_num(j, "examples_per_s", st->examples_per_s);
	json_num(j, "loss", st->loss);
	json_num(j, "metric", st->has_metric ? st->metric : NAN);
	json_bool(j, "has_metric", st->has_metric);
	json_open(j, "workers", '[');
	for (size_t i = 0; i < st->n_workers; i++)
		json_worker_status(j, st->workers[i]);
	json_close(j, ']');
	json_u64(j, "age_ms", st->age_ms);
	json_u64(j, "run_ms", st->run_ms);
	json_u64(j, "shard_map_version", st->shard_map_version);
	json_u64(j, "assignment_version", st->assignment_version);
	json_open(j, "events", '[');
	for (size_t i = 0; i < st->n_events; i++)
		json_str(j, NULL, st->events[i]);
	json_close(j, ']');
	json_close(j, '}');
}

static void json_shard_map(struct json *j, const char *key, const Dml__ShardMap *map)
{
	json_open(j, key, '{');
	json_u64(j, "job", map->job);
	json_u64(j, "version", map->version);
	json_open(j, "servers", '[');
	for (size_t i = 0; i < map->n_servers; i++) {
		json_open(j, NULL, '{');
		json_u64(j, "node_id", map->servers[i]->node_id);
		json_str(j, "address", map->servers[i]->address);
		json_close(j, '}');
	}
	json_close(j, ']');
	json_open(j, "ranges", '[');
	for (size_t i = 0; i < map->n_ranges; i++) {
		const Dml__ShardRange *r = map->ranges[i];

		json_open(j, NULL, '{');
		json_u64(j, "table", r->table);
		json_u64(j, "begin", r->begin);
		json_u64(j, "end", r->end);
		json_u64(j, "server", r->server);
		json_close(j, '}');
	}
	json_close(j, ']');
	json_close(j, '}');
}

/* ---- jobs as text ------------------------------------------------------------------ */

/* A rate or a loss means something only once examples were trained on. */
static double trained(uint64_t examples, double v)
{
	return examples ? v : NAN;
}

/* "42/100" with a clock limit, else "42". */
static void fmt_clock(const Dml__JobStatus *st, char *buf, size_t len)
{
	if (st->spec && st->spec->max_clocks)
		snprintf(buf, len, "%llu/%llu", (unsigned long long)st->clock,
			 (unsigned long long)st->spec->max_clocks);
	else
		snprintf(buf, len, "%llu", (unsigned long long)st->clock);
}

/* Passes over the data so far, or NaN when the data size is unknown. */
static double job_epochs(const Dml__JobStatus *st)
{
	if (!st->spec || st->spec->examples == 0)
		return NAN;
	return (double)st->examples / (double)st->spec->examples;
}

/*
 * How far a job is towards its nearest stop condition, 0..1, or -1 when no
 * condition says (a metric target alone).
 */
static double job_fraction(const Dml__JobStatus *st)
{
	const Dml__JobSpec *sp = st->spec;
	double f = -1, e = job_epochs(st);

	if (st->state == DML__JOB_STATE__DONE)
		return 1;
	if (sp && sp->max_clocks)
		f = (double)st->clock / (double)sp->max_clocks;
	if (sp && sp->max_epochs > 0 && isfinite(e) && e / sp->max_epochs > f)
		f = e / sp->max_epochs;
	return f < 0 ? -1 : f > 1 ? 1 : f;
}

static void print_jobs_table(FILE *out, const Dml__Meta *r)
{
	static const char *const head[] = {
		"ID", "NAME", "STATE", "CLOCK", "EXAMPLES/S", "LOSS", "METRIC", "AGE"
	};
	struct table t;
	char clock[48];

	table_init(&t, head, DML_ARRAY_LEN(head));
	for (size_t i = 0; i < r->n_jobs; i++) {
		const Dml__JobStatus *st = r->jobs[i];
		char **row = table_row(&t);

		fmt_clock(st, clock, sizeof(clock));
		row[0] = cellf("%u", st->id);
		row[1] = cell(st->name);
		row[2] = dml_xstrdup(dml_job_state_name(st->state));
		row[3] = dml_xstrdup(clock);
		row[4] = cell_num("%.1f", trained(st->examples, st->examples_per_s));
		row[5] = cell_num("%.4g", trained(st->examples, st->loss));
		row[6] = cell_num("%.4g", st->has_metric ? st->metric : NAN);
		row[7] = cell_age(st->age_ms);
	}
	table_print(&t, out, "");
	table_free(&t);
}

static void print_workers_table(FILE *out, const Dml__JobStatus *st, const char *indent)
{
	static const char *const head[] = {
		"WORKER", "STATE", "CLOCK", "EXAMPLES", "EXAMPLES/S", "LOSS", "PARTITIONS",
		"REASON"
	};
	struct table t;

	table_init(&t, head, DML_ARRAY_LEN(head));
	for (size_t i = 0; i < st->n_workers; i++) {
		const Dml__WorkerStatus *w = st->workers[i];
		char **row = table_row(&t);

		row[0] = cellf("%u", w->worker);
		row[1] = dml_xstrdup(state_name(w->state));
		row[2] = cellf("%llu", (unsigned long long)w->clock);
		row[3] = cellf("%llu", (unsigned long long)w->examples);
		row[4] = cell_num("%.1f", trained(w->examples, w->examples_per_s));
		row[5] = cell_num("%.4g", trained(w->examples, w->loss));
		row[6] = cellf("%u", w->partitions);
		row[7] = cell(w->reason);
	}
	table_print(&t, out, indent);
	table_free(&t);
}

/* The spec in a few lines: what runs, when it stops, on whom, which tables. */
static void print_spec_summary(FILE *out, const Dml__JobSpec *sp)
{
	char a[128], b[128], line[512];

	if (!sp)
		return;
	fprintf(out, "  app %s on %s", clean(sp->app, a, sizeof(a)),
		*sp->data ? clean(sp->data, b, sizeof(b)) : "(no data)");
	if (sp->examples)
		fprintf(out, ", %llu examples", (unsigned long long)sp->examples);
	if (sp->dim)
		fprintf(out, ", dim %u", sp->dim);
	if (*sp->hidden)
		fprintf(out, ", hidden %s", clean(sp->hidden, a, sizeof(a)));
	fprintf(out, ", batch %u, ", sp->batch_size);
	if (sp->staleness == 0)
		fputs("BSP\n", out);
	else if (sp->staleness > 0)
		fprintf(out, "SSP staleness %lld\n", (long long)sp->staleness);
	else
		fputs("asynchronous\n", out);

	line[0] = '\0';
	if (sp->max_clocks)
		addf(line, sizeof(line), ", %llu clocks",
		     (unsigned long long)sp->max_clocks);
	if (sp->max_epochs > 0)
		addf(line, sizeof(line), ", %g epochs", sp->max_epochs);
	if (*sp->metric)
		addf(line, sizeof(line), ", %s %s %g", clean(sp->metric, a, sizeof(a)),
		     strcmp(sp->metric, "accuracy") == 0 ? ">=" : "<=", sp->target);
	fprintf(out, "  stops at: %s\n", line[0] ? line + 2 : "(no condition)");

	line[0] = '\0';
	if (sp->n_worker_ids) {
		addf(line, sizeof(line), "ids");
		for (size_t i = 0; i < sp->n_worker_ids; i++)
			addf(line, sizeof(line), "%s%u", i ? "," : " ", sp->worker_ids[i]);
	} else if (sp->workers) {
		addf(line, sizeof(line), "%u", sp->workers);
	} else {
		addf(line, sizeof(line), "all alive");
	}
	if (sp->partitions)
		addf(line, sizeof(line), "; %u partitions", sp->partitions);
	else
		addf(line, sizeof(line), "; 8 partitions per worker");
	fprintf(out, "  workers: %s\n", line);

	for (size_t i = 0; i < sp->n_tables; i++) {
		const Dml__TableSpec *t = sp->tables[i];

		fprintf(out, "  table %u: %s, ", t->id, t->dense ? "dense" : "sparse");
		if (t->dense)
			fprintf(out, "%llu keys", (unsigned long long)t->keys);
		else
			fprintf(out, "capacity %llu", (unsigned long long)t->capacity);
		fprintf(out, " x %u, %s lr %g\n", t->width,
			clean(t->optimizer, a, sizeof(a)), t->lr);
	}
}

static void print_job_detail(FILE *out, const Dml__JobStatus *st)
{
	char a[256], b[256], clock[48], age[48], ran[48];

	fprintf(out, "job %u (%s): %s", st->id, clean(st->name, a, sizeof(a)),
		dml_job_state_name(st->state));
	if (*st->reason)
		fprintf(out, ": %s", clean(st->reason, b, sizeof(b)));
	fputc('\n', out);
	print_spec_summary(out, st->spec);
	fmt_clock(st, clock, sizeof(clock));
	fprintf(out, "  progress: clock %s, %llu examples", clock,
		(unsigned long long)st->examples);
	if (isfinite(job_epochs(st)))
		fprintf(out, " (%.2f epochs)", job_epochs(st));
	if (isfinite(trained(st->examples, st->examples_per_s)))
		fprintf(out, ", %.1f examples/s", st->examples_per_s);
	if (isfinite(trained(st->examples, st->loss)))
		fprintf(out, ", loss %.4g", st->loss);
	if (st->has_metric && isfinite(st->metric))
		fprintf(out, ", eval %s %.4g", st->spec && *st->spec->metric
			? clean(st->spec->metric, a, sizeof(a)) : "metric", st->metric);
	fmt_age(st->age_ms, age, sizeof(age));
	fmt_age(st->run_ms, ran, sizeof(ran));
	fprintf(out, "\n  submitted %s ago, running for %s; shard map version %llu, "
		"assignment version %llu\n", age, ran,
		(unsigned long long)st->shard_map_version,
		(unsigned long long)st->assignment_version);
	if (st->n_workers) {
		fputc('\n', out);
		print_workers_table(out, st, "  ");
	}
	if (st->n_events) {
		fputs("\n  events (newest last):\n", out);
		for (size_t i = 0; i < st->n_events; i++)
			fprintf(out, "    %s\n", clean(st->events[i], a, sizeof(a)));
	}
}

/*
 * One line of a job's progress: state, position (with a bar of bar_width
 * characters, 0: none), rate, loss, metric; the reason while not running.
 */
static void fmt_progress(const Dml__JobStatus *st, int bar_width, char *buf, size_t len)
{
	double f = job_fraction(st), e = job_epochs(st);
	const Dml__JobSpec *sp = st->spec;
	char a[192];

	snprintf(buf, len, "job %u %s", st->id, dml_job_state_name(st->state));
	if (f >= 0 && bar_width > 0) {
		int done = (int)(f * bar_width);

		addf(buf, len, " [");
		for (int i = 0; i < bar_width; i++)
			addf(buf, len, "%c", i < done ? '#' : '-');
		addf(buf, len, "]");
	}
	if (f >= 0)
		addf(buf, len, " %3d%%", (int)(f * 100));
	if (sp && !sp->max_clocks && sp->max_epochs > 0 && isfinite(e))
		addf(buf, len, " %.2f/%g epochs", e, sp->max_epochs);
	else if (sp && sp->max_clocks)
		addf(buf, len, " clock %llu/%llu", (unsigned long long)st->clock,
		     (unsigned long long)sp->max_clocks);
	else
		addf(buf, len, " clock %llu", (unsigned long long)st->clock);
	if (isfinite(trained(st->examples, st->examples_per_s)))
		addf(buf, len, ", %.4g examples/s", st->examples_per_s);
	if (isfinite(trained(st->examples, st->loss)))
		addf(buf, len, ", loss %.4g", st->loss);
	if (st->has_metric && isfinite(st->metric))
		addf(buf, len, ", eval %s %.4g", sp && *sp->metric
			? clean(sp->metric, a, sizeof(a)) : "metric", st->metric);
	if (st->state != DML__JOB_STATE__RUNNING && *st->reason)
		addf(buf, len, " (%s)", clean(st->reason, a, sizeof(a)));
}

/* The job's end: state and reason, where it got, how long it ran. */
static void print_job_end(FILE *out, const Dml__JobStatus *st)
{
	char a[128], b[256], ran[48];

	fmt_age(st->run_ms, ran, sizeof(ran));
	fprintf(out, "job %u (%s): %s", st->id, clean(st->name, a, sizeof(a)),
		dml_job_state_name(st->state));
	if (*st->reason)
		fprintf(out, ": %s", clean(st->reason, b, sizeof(b)));
	fprintf(out, "; clock %llu, %llu examples", (unsigned long long)st->clock,
		(unsigned long long)st->examples);
	if (isfinite(trained(st->examples, st->loss)))
		fprintf(out, ", loss %.4g", st->loss);
	if (st->has_metric && isfinite(st->metric))
		fprintf(out, ", eval %s %.4g", st->spec && *st->spec->metric
			? clean(st->spec->metric, a, sizeof(a)) : "metric", st->metric);
	fprintf(out, ", ran %s\n", ran);
}

static void print_shard_map(FILE *out, const Dml__ShardMap *map, const Dml__JobSpec *sp)
{
	static const char *const head[] = {
		"TABLE", "KIND", "RANGE", "SERVER", "ADDRESS"
	};
	struct table t;
	char a[128];

	fprintf(out, "job %u", map->job);
	if (sp && *sp->name)
		fprintf(out, " (%s)", clean(sp->name, a, sizeof(a)));
	fprintf(out, ": shard map version %llu, %zu servers, %zu ranges\n",
		(unsigned long long)map->version, map->n_servers, map->n_ranges);
	table_init(&t, head, DML_ARRAY_LEN(head));
	for (size_t i = 0; i < map->n_ranges; i++) {
		const Dml__ShardRange *r = map->ranges[i];
		const Dml__TableSpec *ts = NULL;
		const char *addr = NULL;
		char **row = table_row(&t);

		for (size_t k = 0; sp && k < sp->n_tables; k++)
			if (sp->tables[k]->id == r->table)
				ts = sp->tables[k];
		for (size_t k = 0; k < map->n_servers; k++)
			if (map->servers[k]->node_id == r->server)
				addr = map->servers[k]->address;
		row[0] = cellf("%u", r->table);
		row[1] = dml_xstrdup(!ts ? "?" : ts->dense ? "dense" : "sparse");
		/* Sparse ranges are ranges of a 64-bit key hash: hex reads better. */
		if (ts && !ts->dense)
			row[2] = cellf("0x%016llx..0x%016llx", (unsigned long long)r->begin,
				       (unsigned long long)r->end);
		else
			row[2] = cellf("%llu..%llu", (unsigned long long)r->begin,
				       (unsigned long long)r->end);
		row[3] = cellf("%u", r->server);
		row[4] = cell(addr);
	}
	table_print(&t, out, "");
	table_free(&t);
}

/* ---- commands ------------------------------------------------------------------ */

static int parse_job_id(const char *cmd, const char *s, uint32_t *id)
{
	uint64_t v;

	if (dml_parse_u64(s, 1, UINT32_MAX, &v) != 0) {
		fprintf(stderr, "dmlctl: %s: '%s' is not a job id (a number that dmlctl "
			"status lists)\n", cmd, s);
		return EXIT_USAGE;
	}
	*id = (uint32_t)v;
	return EXIT_OK;
}

static int too_many(const char *cmd, const char *arg)
{
	fprintf(stderr, "dmlctl: %s: unexpected argument '%s' (dmlctl --help)\n", cmd, arg);
	return EXIT_USAGE;
}

static int cmd_nodes(struct ctl *ctl, int argc, char **argv)
{
	Dml__Meta req = DML__META__INIT, *reply;
	struct session s;
	int rc;

	if (argc > 0) {
		fprintf(stderr, "dmlctl: nodes takes no arguments (got '%s')\n", argv[0]);
		return EXIT_USAGE;
	}
	if (session_open(ctl, &s) != 0)
		return EXIT_FAIL;
	req.type = DML__MSG_TYPE__NODES;
	rc = session_ask(&s, &req, DML__MSG_TYPE__NODES_REPLY, &reply, stderr);
	if (rc == EXIT_OK) {
		if (ctl->json)
			print_nodes_json(stdout, reply);
		else
			print_nodes_table(stdout, reply);
		dml__meta__free_unpacked(reply, NULL);
	}
	session_close(&s);
	return rc;
}

/* JOBS for one job (id) or all (0); *reply holds at least the job asked for. */
static int ask_jobs(struct session *s, uint32_t id, Dml__Meta **reply, FILE *out)
{
	Dml__Meta req = DML__META__INIT;
	int rc;

	req.type = DML__MSG_TYPE__JOBS;
	req.job = id;
	rc = session_ask(s, &req, DML__MSG_TYPE__JOBS_REPLY, reply, out);
	if (rc != EXIT_OK || id == 0)
		return rc;
	for (size_t i = 0; i < (*reply)->n_jobs; i++)
		if ((*reply)->jobs[i]->id == id)
			return EXIT_OK;
	fprintf(out, "dmlctl: no job %u\n", id);
	dml__meta__free_unpacked(*reply, NULL);
	*reply = NULL;
	return EXIT_FAIL;
}

static const Dml__JobStatus *find_job(const Dml__Meta *r, uint32_t id)
{
	for (size_t i = 0; i < r->n_jobs; i++)
		if (r->jobs[i]->id == id)
			return r->jobs[i];
	return NULL;
}

static int terminal_width(void)
{
	struct winsize ws;

	if (ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col >= 20)
		return ws.ws_col;
	return 80;
}

/*
 * Poll the job every WAIT_POLL_MS until it ends. On a terminal one progress
 * line is redrawn in place; otherwise a line is printed whenever the state
 * or the tenth of the way changes. The exit status follows the end state.
 */
static int wait_job(struct session *s, uint32_t id)
{
	const struct ctl *ctl = s->ctl;
	int tty = !ctl->json && isatty(STDOUT_FILENO);
	int last_state = -1, last_step = -2, rc;
	uint64_t last_ok = dml_now_ns() / 1000000;
	char line[512];

	session_watch_interrupts(s);
	for (;;) {
		Dml__Meta req = DML__META__INIT, *reply = NULL;
		const Dml__JobStatus *st;
		uint64_t now;

		req.type = DML__MSG_TYPE__JOBS;
		req.job = id;
		rc = session_call(s, &req, &reply);
		now = dml_now_ns() / 1000000;
		if (s->interrupted) {
			if (reply)
				dml__meta__free_unpacked(reply, NULL);
			break;
		}
		if (rc != 0 && !s->refused) {
			/* The scheduler may be restarting: give it a while. */
			if (now - last_ok > WAIT_PATIENCE_MS) {
				if (tty)
					fputc('\n', stdout);
				fflush(stdout);
				session_report(s, stderr);
				return EXIT_FAIL;
			}
			session_sleep(s, WAIT_POLL_MS);
			if (s->interrupted)
				break;
			continue;
		}
		if (rc != 0 || reply->type != DML__MSG_TYPE__JOBS_REPLY ||
		    !(st = find_job(reply, id))) {
			if (tty)
				fputc('\n', stdout);
			fflush(stdout);
			if (rc != 0)
				session_report(s, stderr);
			else if (reply->type != DML__MSG_TYPE__JOBS_REPLY)
				fprintf(stderr, "dmlctl: the scheduler at %s answered "
					"jobs with a %s frame\n", ctl->addr,
					dml_msg_type_name((int)reply->type));
			else
				fprintf(stderr, "dmlctl: no job %u (the scheduler "
					"forgot it: restarted?)\n", id);
			if (reply)
				dml__meta__free_unpacked(reply, NULL);
			return EXIT_FAIL;
		}
		last_ok = now;
		if (job_ended(st->state)) {
			if (ctl->json) {
				struct json j = { stdout, 0 };

				json_open(&j, NULL, '{');
				json_u64(&j, "job", id);
				json_job_status(&j, "status", st);
				json_close(&j, '}');
				fputc('\n', stdout);
			} else {
				if (tty)
					fputs("\r\033[K", stdout);
				print_job_end(stdout, st);
			}
			rc = st->state == DML__JOB_STATE__DONE ? EXIT_OK : EXIT_FAIL;
			dml__meta__free_unpacked(reply, NULL);
			return rc;
		}
		if (tty) {
			int width = terminal_width();

			fmt_progress(st, PROGRESS_BAR, line, sizeof(line));
			if ((int)strlen(line) >= width)
				line[width - 1] = '\0';
			printf("\r%s\033[K", line);
			fflush(stdout);
		} else if (!ctl->json) {
			double f = job_fraction(st);
			int step = f < 0 ? -1 : (int)(f * 10);

			if ((int)st->state != last_state || step != last_step) {
				fmt_progress(st, 0, line, sizeof(line));
				printf("%s\n", line);
				fflush(stdout);
			}
			last_state = (int)st->state;
			last_step = step;
		}
		dml__meta__free_unpacked(reply, NULL);
		session_sleep(s, WAIT_POLL_MS);
		if (s->interrupted)
			break;
	}
	if (tty)
		fputc('\n', stdout);
	fflush(stdout);
	fprintf(stderr, "dmlctl: stopped waiting; job %u goes on (dmlctl stop %u "
		"stops it)\n", id, id);
	return EXIT_INTERRUPTED;
}

static int cmd_submit(struct ctl *ctl, int argc, char **argv)
{
	Dml__Meta req = DML__META__INIT, *reply;
	Dml__JobSpec *spec = NULL;
	struct session s;
	char err[512];
	uint32_t id;
	int rc;

	if (argc < 1) {
		fprintf(stderr, "dmlctl: submit needs a job file: dmlctl submit JOB.conf "
			"[--wait]\n");
		return EXIT_USAGE;
	}
	if (argc > 1)
		return too_many("submit", argv[1]);
	err[0] = '\0';
	rc = dml_job_file_load(argv[0], &spec, err, sizeof(err));
	if (rc != 0) {
		/* "file:line: message" as the parser wrote it; "file: reason" when
		 * the file cannot be read. */
		if (rc == DML_ECONF && err[0])
			fprintf(stderr, "%s\n", err);
		else
			fprintf(stderr, "dmlctl: submit: %s\n", err[0] ? err : dml_strerror(rc));
		dml_job_spec_free(spec);
		return EXIT_USAGE;
	}
	if (session_open(ctl, &s) != 0) {
		dml_job_spec_free(spec);
		return EXIT_FAIL;
	}
	req.type = DML__MSG_TYPE__SUBMIT;
	req.job_spec = spec;
	rc = session_ask(&s, &req, DML__MSG_TYPE__SUBMIT_REPLY, &reply, stderr);
	/* The scheduler's own check of the spec failed: a bad job file too. */
	if (rc == EXIT_FAIL && s.refused && s.err == DML_EINVAL)
		rc = EXIT_USAGE;
	if (rc == EXIT_OK) {
		id = reply->job;
		dml__meta__free_unpacked(reply, NULL);
		if (!ctl->json || !ctl->wait) {
			char a[128];

			if (ctl->json)
				printf("{\"job\":%u}\n", id);
			else
				printf("submitted job %u (%s)\n", id,
				       clean(spec->name, a, sizeof(a)));
			fflush(stdout);
		}
		if (ctl->wait)
			rc = wait_job(&s, id);
	}
	session_close(&s);
	dml_job_spec_free(spec);
	return rc;
}

static int cmd_status(struct ctl *ctl, int argc, char **argv)
{
	Dml__Meta *reply;
	struct session s;
	uint32_t id = 0;
	int rc;

	if (argc > 1)
		return too_many("status", argv[1]);
	if (argc == 1 && (rc = parse_job_id("status", argv[0], &id)) != EXIT_OK)
		return rc;
	if (session_open(ctl, &s) != 0)
		return EXIT_FAIL;
	rc = ask_jobs(&s, id, &reply, stderr);
	if (rc == EXIT_OK) {
		const Dml__JobStatus *st = id ? find_job(reply, id) : NULL;
		struct json j = { stdout, 0 };

		if (ctl->json && st) {
			json_job_status(&j, NULL, st);
			fputc('\n', stdout);
		} else if (ctl->json) {
			json_open(&j, NULL, '{');
			json_open(&j, "jobs", '[');
			for (size_t i = 0; i < reply->n_jobs; i++)
				json_job_status(&j, NULL, reply->jobs[i]);
			json_close(&j, ']');
			json_close(&j, '}');
			fputc('\n', stdout);
		} else if (st) {
			print_job_detail(stdout, st);
		} else if (reply->n_jobs == 0) {
			printf("no jobs (dmlctl submit JOB.conf adds one)\n");
		} else {
			print_jobs_table(stdout, reply);
		}
		dml__meta__free_unpacked(reply, NULL);
	}
	session_close(&s);
	return rc;
}

static int job_control(struct ctl *ctl, const char *cmd, int action, const char *done,
		       int argc, char **argv)
{
	Dml__Meta req = DML__META__INIT, *reply;
	struct session s;
	uint32_t id;
	int rc;

	if (argc < 1) {
		fprintf(stderr, "dmlctl: %s needs a job id: dmlctl %s JOB\n", cmd, cmd);
		return EXIT_USAGE;
	}
	if (argc > 1)
		return too_many(cmd, argv[1]);
	if ((rc = parse_job_id(cmd, argv[0], &id)) != EXIT_OK)
		return rc;
	if (session_open(ctl, &s) != 0)
		return EXIT_FAIL;
	req.type = DML__MSG_TYPE__JOB_CONTROL;
	req.job = id;
	req.action = action;
	rc = session_ask(&s, &req, DML__MSG_TYPE__ACK, &reply, stderr);
	if (rc == EXIT_OK) {
		if (ctl->json)
			printf("{\"job\":%u,\"action\":\"%s\"}\n", id, action_name(action));
		else
			printf("job %u: %s\n", id, done);
		dml__meta__free_unpacked(reply, NULL);
	}
	session_close(&s);
	return rc;
}

static int cmd_stop(struct ctl *ctl, int argc, char **argv)
{
	return job_control(ctl, "stop", DML__JOB_ACTION__STOP, "stopped", argc, argv);
}

static int cmd_pause(struct ctl *ctl, int argc, char **argv)
{
	return job_control(ctl, "pause", DML__JOB_ACTION__PAUSE, "paused", argc, argv);
}

static int cmd_resume(struct ctl *ctl, int argc, char **argv)
{
	return job_control(ctl, "resume", DML__JOB_ACTION__RESUME, "resumed", argc, argv);
}

static int cmd_shardmap(struct ctl *ctl, int argc, char **argv)
{
	Dml__Meta req = DML__META__INIT, *reply;
	struct session s;
	uint32_t id = 0;
	int rc;

	if (argc > 1)
		return too_many("shardmap", argv[1]);
	if (argc == 1 && (rc = parse_job_id("shardmap", argv[0], &id)) != EXIT_OK)
		return rc;
	if (session_open(ctl, &s) != 0)
		return EXIT_FAIL;
	req.type = DML__MSG_TYPE__SHARDMAP;
	req.job = id;
	rc = session_ask(&s, &req, DML__MSG_TYPE__SHARDMAP_REPLY, &reply, stderr);
	if (rc == EXIT_OK && !reply->shard_map) {
		fprintf(stderr, "dmlctl: the scheduler's answer holds no shard map\n");
		rc = EXIT_FAIL;
	} else if (rc == EXIT_OK && ctl->json) {
		struct json j = { stdout, 0 };

		json_shard_map(&j, NULL, reply->shard_map);
		fputc('\n', stdout);
	} else if (rc == EXIT_OK) {
		print_shard_map(stdout, reply->shard_map, reply->job_spec);
	}
	if (reply)
		dml__meta__free_unpacked(reply, NULL);
	session_close(&s);
	return rc;
}

/*
 * One screen of top into out: the nodes, then the active job and its
 * workers. Failures are written to err; the exit status is returned.
 */
static int top_frame(struct session *s, FILE *out, FILE *err)
{
	Dml__Meta req = DML__META__INIT, *nodes, *jobs;
	const Dml__JobStatus *active = NULL;
	size_t pending = 0, ended = 0;
	char now[64], line[512];
	time_t t = time(NULL);
	struct tm tm;
	int rc;

	strftime(now, sizeof(now), "%H:%M:%S", localtime_r(&t, &tm));
	fprintf(out, "dml top: scheduler %s at %s\n\n", s->ctl->addr, now);
	req.type = DML__MSG_TYPE__NODES;
	rc = session_ask(s, &req, DML__MSG_TYPE__NODES_REPLY, &nodes, err);
	if (rc != EXIT_OK)
		return rc;
	print_nodes_table(out, nodes);
	dml__meta__free_unpacked(nodes, NULL);
	fputc('\n', out);

	rc = ask_jobs(s, 0, &jobs, out);
	if (rc == EXIT_INTERRUPTED)
		return rc;
	if (rc != EXIT_OK)
		/* A scheduler without jobs still has nodes worth watching. */
		return EXIT_OK;
	for (size_t i = 0; i < jobs->n_jobs; i++) {
		int st = jobs->jobs[i]->state;

		if (st == DML__JOB_STATE__RUNNING || st == DML__JOB_STATE__PAUSED)
			active = jobs->jobs[i];
		else if (st == DML__JOB_STATE__PENDING)
			pending++;
		else if (job_ended(st))
			ended++;
	}
	if (active) {
		fmt_progress(active, PROGRESS_BAR, line, sizeof(line));
		fprintf(out, "%s\n", line);
		print_workers_table(out, active, "  ");
		if (pending)
			fprintf(out, "%zu more job%s pending\n", pending,
				pending == 1 ? "" : "s");
	} else {
		fprintf(out, "no active job (%zu pending, %zu finished)\n", pending, ended);
	}
	dml__meta__free_unpacked(jobs, NULL);
	return EXIT_OK;
}

static int cmd_top(struct ctl *ctl, int argc, char **argv)
{
	int live = !ctl->once && isatty(STDOUT_FILENO), rc;
	struct session s;

	if (argc > 0)
		return too_many("top", argv[0]);
	if (ctl->json) {
		fprintf(stderr, "dmlctl: top has no --json; use dmlctl --json nodes and "
			"dmlctl --json status\n");
		return EXIT_USAGE;
	}
	if (session_open(ctl, &s) != 0)
		return EXIT_FAIL;
	if (!live) {
		rc = top_frame(&s, stdout, stderr);
		session_close(&s);
		return rc;
	}
	session_watch_interrupts(&s);
	for (;;) {
		char *frame = NULL;
		size_t len = 0;
		FILE *f = open_memstream(&frame, &len);

		if (!f) {
			fprintf(stderr, "dmlctl: out of memory\n");
			rc = EXIT_FAIL;
			break;
		}
		/* A scheduler that went away is shown on the screen, and tried again. */
		rc = top_frame(&s, f, f);
		fclose(f);
		if (rc != EXIT_INTERRUPTED) {
			fputs("\033[H\033[2J", stdout);
			fwrite(frame, 1, len, stdout);
			fputs("\n(Ctrl-C quits)\n", stdout);
			fflush(stdout);
		}
		free(frame);
		if (rc == EXIT_INTERRUPTED)
			break;
		session_sleep(&s, TOP_REFRESH_MS);
		if (s.interrupted)
			break;
	}
	session_close(&s);
	return rc == EXIT_FAIL ? EXIT_FAIL : EXIT_OK;
}

static const struct command commands[] = {
	{ "nodes", "", "list the nodes: state, last heartbeat, why it last changed",
	  cmd_nodes, 0 },
	{ "submit", "JOB.conf [--wait]",
	  "submit a training job; --wait follows it to its end", cmd_submit, TAKES_WAIT },
	{ "status", "[JOB]", "list the jobs, or one job in detail", cmd_status, 0 },
	{ "stop", "JOB", "stop a job", cmd_stop, 0 },
	{ "pause", "JOB", "pause a job at the next clock boundary", cmd_pause, 0 },
	{ "resume", "JOB", "resume a paused job", cmd_resume, 0 },
	{ "top", "[--once]", "live view of the nodes and the running job's workers",
	  cmd_top, TAKES_ONCE },
	{ "shardmap", "[JOB]", "which server holds which keys (default: the active job)",
	  cmd_shardmap, 0 },
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
		fprintf(out, "  %-8s %-18s %s\n", commands[i].name, commands[i].args,
			commands[i].help);
	fprintf(out,
		"\nOptions:\n"
		"  -s, --scheduler HOST:PORT  scheduler address (default: $DML_SCHEDULER, "
		"else %s)\n"
		"  --secret FILE              cluster secret (default: $DML_SECRET_FILE, "
		"else %s)\n"
		"  --cluster NAME             cluster name (default: %s)\n"
		"  --json                     print one JSON object instead of a table\n"
		"  --wait                     submit: poll every %d ms until the job ends\n"
		"  --once                     top: print one screen and exit (also when\n"
		"                             the output is not a terminal)\n"
		"  -v, --verbose              log the connection's progress to stderr\n"
		"  -h, --help                 this text\n\n"
		"Exit status: 0 success; 1 the operation failed: the scheduler could not be\n"
		"reached (within %d s) or refused the secret or the request (e.g. no such\n"
		"job), or the job submit --wait followed ended failed or stopped; 2 bad\n"
		"usage, an unknown command or a bad job file (printed as file:line:\n"
		"message); 130 interrupted while waiting (the job goes on).\n",
		DEFAULT_SCHEDULER, DEFAULT_SECRET_FILE, DEFAULT_CLUSTER, WAIT_POLL_MS,
		TIMEOUT_MS / 1000);
}

static const char *env_or(const char *name, const char *def, int *from_env)
{
	const char *v = getenv(name);

	*from_env = v && *v;
	return *from_env ? v : def;
}

int main(int argc, char **argv)
{
	enum { OPT_SECRET = 256, OPT_CLUSTER, OPT_JSON, OPT_WAIT, OPT_ONCE };
	static const struct option longopts[] = {
		{ "scheduler", required_argument, NULL, 's' },
		{ "secret", required_argument, NULL, OPT_SECRET },
		{ "cluster", required_argument, NULL, OPT_CLUSTER },
		{ "json", no_argument, NULL, OPT_JSON },
		{ "wait", no_argument, NULL, OPT_WAIT },
		{ "once", no_argument, NULL, OPT_ONCE },
		{ "verbose", no_argument, NULL, 'v' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 }
	};
	struct ctl ctl = { 0 };
	const struct command *cmd;
	int opt, from_env, rc;

	dml_log_set_ident("dmlctl");
	/* The connection layer's warnings would repeat what session_report() says. */
	dml_log_set_level(DML_LOG_ERROR);
	ctl.addr = env_or("DML_SCHEDULER", DEFAULT_SCHEDULER, &from_env);
	ctl.addr_source = from_env ? "$DML_SCHEDULER" : "the default";
	ctl.secret_file = env_or("DML_SECRET_FILE", DEFAULT_SECRET_FILE, &from_env);
	ctl.cluster = DEFAULT_CLUSTER;
	/* Options may come after the command too: "dmlctl submit job.conf --wait". */
	while ((opt = getopt_long(argc, argv, "s:vh", longopts, NULL)) != -1) {
		switch (opt) {
		case 's':
			ctl.addr = optarg;
			ctl.addr_source = "-s";
			break;
		case OPT_SECRET: ctl.secret_file = optarg; break;
		case OPT_CLUSTER: ctl.cluster = optarg; break;
		case OPT_JSON: ctl.json = 1; break;
		case OPT_WAIT: ctl.wait = 1; break;
		case OPT_ONCE: ctl.once = 1; break;
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
	if ((ctl.wait && !(cmd->takes & TAKES_WAIT)) ||
	    (ctl.once && !(cmd->takes & TAKES_ONCE))) {
		fprintf(stderr, "dmlctl: %s does not take %s\n", cmd->name,
			ctl.wait ? "--wait (only submit does)" : "--once (only top does)");
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
