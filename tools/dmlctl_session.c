/*
 * dmlctl's session with the scheduler: one connection over the connection
 * layer (proto/conn.h, with the cluster secret's handshake) as a CONTROL
 * peer, on an event loop of its own, carrying one request and its reply at
 * a time. A connection that broke is made again at the next request.
 *
 * Must never: wait longer than CTL_TIMEOUT_MS for one answer, take an
 * answer to an earlier request for the one awaited, or keep a peer's words
 * with their control characters (the scheduler's error text is cleaned as
 * it arrives, before anything prints it).
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>

#include "proto/auth.h"
#include "proto/conn.h"
#include "proto/dml_error.h"
#include "tools/dmlctl.h"
#include "proto/util.h"

/* Replies list the whole cluster: allow far more than a daemon accepts. */
#define REPLY_MAX_META (16u << 20)

static int on_welcome(struct dml_conn *c, const Dml__Handshake *w, void *arg)
{
	struct ctl_session *s = arg;

	if (w->role != s->peer_role) {
		s->wrong_role = 1;
		return DML_EROLE;
	}
	return 0;
}

static void on_ready(struct dml_conn *c, void *arg)
{
	struct ctl_session *s = arg;

	s->ready = 1;
}

static int on_frame(struct dml_conn *c, const Dml__Meta *m, const uint8_t *payload,
		    size_t len, void *arg)
{
	struct ctl_session *s = arg;
	/* An ERROR with request id 0 refuses the connection as a whole. */
	int whole = m->type == DML__MSG_TYPE__ERROR && m->request_id == 0;

	if (!s->want || (m->request_id != s->want && !whole))
		return 0;
	if (m->type == DML__MSG_TYPE__ERROR) {
		int code = m->error ? m->error->code : 0;

		s->refused = 1;
		s->err = code < 0 && code > DML_ERR_MIN ? code : DML_EIO;
		/* Printed later as it is: control characters made harmless now. */
		ctl_clean(m->error && m->error->message && *m->error->message
			  ? m->error->message : dml_strerror(s->err), s->detail,
			  sizeof(s->detail));
	} else {
		s->reply = dml_msg_copy(&m->base);
		if (len && s->reply && (s->payload = malloc(len)) != NULL) {
			memcpy(s->payload, payload, len);
			s->payload_len = len;
		} else if (len && s->reply) {
			dml__meta__free_unpacked(s->reply, NULL);
			s->reply = NULL;
		}
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
	struct ctl_session *s = arg;

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
	struct ctl_session *s = arg;

	s->timed_out = 1;
	if (s->conn)
		dml_conn_abort(s->conn, DML_ETIMEDOUT);
}

static void nap_cb(evutil_socket_t fd, short what, void *arg)
{
	struct ctl_session *s = arg;

	s->napping = 0;
}

static void sigint_cb(evutil_socket_t fd, short what, void *arg)
{
	struct ctl_session *s = arg;

	s->interrupted = 1;
	event_base_loopbreak(s->base);
}

static void arm(struct event *ev, int ms)
{
	struct timeval tv = { ms / 1000, (ms % 1000) * 1000 };

	evtimer_add(ev, &tv);
}

int ctl_session_open(const struct ctl *ctl, struct ctl_session *s)
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
	snprintf(s->host, sizeof(s->host), "%s", ctl->host);
	s->port = ctl->port;
	s->peer_role = DML__ROLE__SCHEDULER;
	s->timer = evtimer_new(s->base, timeout_cb, s);
	s->nap = evtimer_new(s->base, nap_cb, s);
	dml_conn_conf_default(&s->cc);
	s->cc.limits.max_meta = REPLY_MAX_META;
	s->cc.secret = s->secret;
	s->cc.secret_len = s->secret_len;
	s->cc.cluster = ctl->cluster;
	s->cc.role = DML__ROLE__CONTROL;
	s->cc.node_id = 0;
	s->cc.handshake_timeout_ms = CTL_TIMEOUT_MS;
	if (dml_random_bytes(&s->cc.incarnation, sizeof(s->cc.incarnation)) != 0)
		s->cc.incarnation = 1;
	return 0;
}

void ctl_session_watch_interrupts(struct ctl_session *s)
{
	if (s->sigint)
		return;
	s->sigint = evsignal_new(s->base, SIGINT, sigint_cb, s);
	if (s->sigint)
		event_add(s->sigint, NULL);
}

/* Close the connection now and wait for its teardown. */
static void session_drop(struct ctl_session *s, int err)
{
	if (s->conn)
		dml_conn_abort(s->conn, err);
	while (s->conn)
		event_base_loop(s->base, EVLOOP_ONCE);
}

void ctl_session_close(struct ctl_session *s)
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
	free(s->payload);
	memset(s, 0, sizeof(*s));
}

int ctl_session_open_at(const struct ctl *ctl, const char *address, uint32_t role,
			struct ctl_session *s)
{
	char host[sizeof(s->host)];
	uint16_t port;
	int rc;

	if (dml_parse_hostport(address, host, sizeof(host), &port, 0) != 0) {
		fprintf(stderr, "dmlctl: '%s' is not a host:port address\n", address);
		return DML_EINVAL;
	}
	if ((rc = ctl_session_open(ctl, s)) != 0)
		return rc;
	snprintf(s->host, sizeof(s->host), "%s", host);
	s->port = port;
	s->peer_role = role;
	s->cc.limits.max_payload = UINT32_MAX;
	s->cc.limits.max_keys = UINT32_MAX;
	return 0;
}

uint8_t *ctl_session_take_payload(struct ctl_session *s, size_t *len)
{
	uint8_t *p = s->payload;

	*len = s->payload_len;
	s->payload = NULL;
	s->payload_len = 0;
	return p;
}

static void session_reset(struct ctl_session *s)
{
	s->refused = s->timed_out = 0;
	s->err = 0;
	s->detail[0] = '\0';
}

/* Connect and authenticate, at most CTL_TIMEOUT_MS. 0 or the reason. */
static int session_connect(struct ctl_session *s)
{
	int rc;

	session_reset(s);
	s->ready = s->wrong_role = s->closed = 0;
	s->close_err = 0;
	arm(s->timer, CTL_TIMEOUT_MS);
	rc = dml_conn_connect(s->base, s->host, s->port, &s->cc, &ctl_ops, s, &s->conn);
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

static int answer_ms(const struct ctl_session *s)
{
	return s->answer_ms ? s->answer_ms : CTL_TIMEOUT_MS;
}

int ctl_session_call(struct ctl_session *s, Dml__Meta *req, Dml__Meta **reply)
{
	for (int attempt = 0;; attempt++) {
		int fresh = s->conn == NULL, rc;

		*reply = NULL;
		free(s->payload);
		s->payload = NULL;
		s->payload_len = 0;
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
			arm(s->timer, answer_ms(s));
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

void ctl_session_sleep(struct ctl_session *s, int ms)
{
	s->napping = 1;
	arm(s->nap, ms);
	while (s->napping && !s->interrupted)
		event_base_loop(s->base, EVLOOP_ONCE);
	evtimer_del(s->nap);
	s->napping = 0;
}

void ctl_session_report(const struct ctl_session *s, FILE *out)
{
	const struct ctl *ctl = s->ctl;
	const char *a = ctl->addr;

	if (s->refused && s->last_type == DML__MSG_TYPE__NODES) {
		fprintf(out, "dmlctl: the scheduler at %s refused the request: %s\n", a,
			s->detail);
	} else if (s->refused) {
		/* Job requests: the scheduler's words say it best ("no job 7"). */
		fprintf(out, "dmlctl: %s\n", s->detail);
	} else if (s->wrong_role) {
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
			(s->ready ? answer_ms(s) : CTL_TIMEOUT_MS) / 1000);
	} else if (!s->ready) {
		fprintf(out, "dmlctl: cannot connect to the scheduler at %s (%s): is "
			"dml-sched running there? (address from %s)\n", a,
			dml_strerror(s->err), ctl->addr_source);
	} else {
		fprintf(out, "dmlctl: lost the connection to the scheduler at %s before "
			"its answer (%s)\n", a, dml_strerror(s->err));
	}
}

int ctl_session_ask(struct ctl_session *s, Dml__Meta *req, Dml__MsgType want,
		    Dml__Meta **reply, FILE *out)
{
	int rc = ctl_session_call(s, req, reply);

	if (s->interrupted) {
		if (*reply)
			dml__meta__free_unpacked(*reply, NULL);
		*reply = NULL;
		return EXIT_INTERRUPTED;
	}
	if (rc != 0) {
		ctl_session_report(s, out);
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

int ctl_ask_jobs(struct ctl_session *s, uint32_t id, Dml__Meta **reply, FILE *out)
{
	Dml__Meta req = DML__META__INIT;
	int rc;

	req.type = DML__MSG_TYPE__JOBS;
	req.job = id;
	rc = ctl_session_ask(s, &req, DML__MSG_TYPE__JOBS_REPLY, reply, out);
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

int ctl_ask_job_control(struct ctl_session *s, uint32_t id, int action, uint64_t clock)
{
	Dml__Meta req = DML__META__INIT, *reply;
	int rc;

	req.type = DML__MSG_TYPE__JOB_CONTROL;
	req.job = id;
	req.action = action;
	req.clock = clock;
	rc = ctl_session_ask(s, &req, DML__MSG_TYPE__ACK, &reply, stderr);
	if (rc == EXIT_OK)
		dml__meta__free_unpacked(reply, NULL);
	return rc;
}

const Dml__JobStatus *ctl_find_job(const Dml__Meta *r, uint32_t id)
{
	for (size_t i = 0; i < r->n_jobs; i++)
		if (r->jobs[i]->id == id)
			return r->jobs[i];
	return NULL;
}

