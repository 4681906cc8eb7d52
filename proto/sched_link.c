/*
 * The scheduler link (see sched_link.h): one connection to dml-sched, moved
 * through IDLE -> CONNECTING -> REGISTERING -> REGISTERED by link_set_state()
 * alone. Every way back to IDLE goes through link_retry_later(), which logs
 * why; refusals the scheduler explains are logged where they arrive.
 *
 * One timer drives everything the connection layer does not: the next
 * connection attempt while IDLE, the wait for REGISTER_REPLY while
 * REGISTERING, and the heartbeat (with the silence check) while REGISTERED.
 *
 * Must never: block the loop, free a connection inside its own callback
 * (dml_conn_close/abort defer that), give up reconnecting while the link
 * lives, or log the same failure again at every retry.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proto/dml_error.h"
#include "proto/sched_link.h"
#include "proto/log.h"
#include "proto/util.h"

#define BACKOFF_MIN_MS 20
#define BACKOFF_MAX_MS 2000
/* What a scheduler may ask for; 0 in its reply means the default. */
#define HEARTBEAT_DEFAULT_MS 1000
#define HEARTBEAT_MIN_MS 10
#define HEARTBEAT_MAX_MS 600000
/* A scheduler that sends nothing for this many intervals (and at least
 * SILENCE_MIN_MS) is taken for hung: the link reconnects. */
#define SILENCE_INTERVALS 10
#define SILENCE_MIN_MS 2000
/* How long REGISTER may wait for its reply when the connection conf has
 * no handshake timeout. */
#define REPLY_TIMEOUT_DEFAULT_MS 5000
/* A registration that lasted this long resets the backoff: one that keeps
 * being lost at once (two nodes with one id) is retried ever more slowly. */
#define STABLE_MS BACKOFF_MAX_MS
/* Request ids of frames the owner sends have this bit set, so an ERROR
 * answering one of them is told from one refusing the link's own. */
#define OWNER_ID_BIT (UINT64_C(1) << 63)
/* Loop turns dml_sched_link_free() allows the connection's teardown. */
#define FREE_TURNS 100

enum link_state {
	LINK_IDLE,          /* no connection; the timer starts the next attempt */
	LINK_CONNECTING,    /* connection and handshake in progress */
	LINK_REGISTERING,   /* REGISTER sent, waiting for REGISTER_REPLY */
	LINK_REGISTERED,    /* heartbeating */
	LINK_STOPPED        /* left for good */
};

static const char *const state_names[] = {
	"idle", "connecting", "registering", "registered", "stopped"
};

struct dml_sched_link {
	struct event_base *base;
	struct dml_conn_conf cc;
	char host[256];
	uint16_t port;
	char name[272];            /* "host:port", for logs */
	Dml__NodeInfo *self;       /* deep copy (protobuf-c unpacked) */

	enum link_state state;
	struct dml_conn *conn;
	struct event *timer;
	uint32_t backoff_ms;
	uint32_t heartbeat_ms;
	uint64_t next_request;     /* the link's own request ids */
	uint64_t next_owner_request; /* ids of the owner's frames (OWNER_ID_BIT) */
	uint64_t register_id;      /* request id of the pending REGISTER */
	uint64_t last_rx_ns;       /* last frame from the scheduler */
	uint64_t registered_ns;    /* when the live registration was accepted */
	int was_registered;        /* registered at least once since the last log */
	int logged_err;            /* failure last logged; not logged again */
	dml_sched_link_frame_fn handler;
	void *handler_arg;
	dml_sched_link_beat_fn beat;
	void *beat_arg;
};

static const char *role_name(uint32_t role)
{
	switch (role) {
	case DML__ROLE__SERVER: return "server";
	case DML__ROLE__WORKER: return "worker";
	case DML__ROLE__AGGREGATOR: return "aggregator";
	default: return "node";
	}
}

static void timer_arm(struct dml_sched_link *l, uint32_t ms)
{
	struct timeval tv = { ms / 1000, (ms % 1000) * 1000 };

	evtimer_add(l->timer, &tv);
}

/* The one place the state changes; a registration is logged here. */
static void link_set_state(struct dml_sched_link *l, enum link_state st)
{
	if (l->state == st)
		return;
	dml_debug("scheduler %s: %s -> %s", l->name, state_names[l->state], state_names[st]);
	l->state = st;
	if (st == LINK_REGISTERED) {
		dml_info("scheduler %s: registered as %s %u (heartbeat every %u ms)", l->name,
			 role_name(l->self->role), l->self->node_id, l->heartbeat_ms);
		l->was_registered = 1;
		l->logged_err = 0;
	}
}

/*
 * No connection now (err says why; 0 for a clean close by the scheduler):
 * report it, and try again after the next backoff step. The first loss
 * after a registration is logged, and a failure to register once until its
 * cause changes or the link registers again.
 */
static void link_retry_later(struct dml_sched_link *l, int err)
{
	if (l->was_registered) {
		dml_warn("scheduler %s: connection lost (%s); reconnecting", l->name,
			 err ? dml_strerror(err) : "closed by the scheduler");
		l->was_registered = 0;
		l->logged_err = err ? err : DML_ECONN;
	} else {
		if (!err)
			err = DML_ECONN;
		if (err != l->logged_err)
			dml_warn("scheduler %s: cannot register (%s); will keep retrying",
				 l->name, dml_strerror(err));
		else
			dml_debug("scheduler %s: still cannot register (%s)", l->name,
				  dml_strerror(err));
		l->logged_err = err;
	}
	l->backoff_ms = l->backoff_ms ? l->backoff_ms * 2 : BACKOFF_MIN_MS;
	if (l->backoff_ms > BACKOFF_MAX_MS)
		l->backoff_ms = BACKOFF_MAX_MS;
	link_set_state(l, LINK_IDLE);
	timer_arm(l, l->backoff_ms);
}

static int send_simple(struct dml_sched_link *l, Dml__MsgType type, uint64_t *id)
{
	Dml__Meta m = DML__META__INIT;
	Dml__NodeInfo beat = DML__NODE_INFO__INIT;

	m.type = type;
	m.request_id = ++l->next_request;
	m.sender = l->self->node_id;
	if (type == DML__MSG_TYPE__REGISTER)
		m.node = l->self;
	if (type == DML__MSG_TYPE__HEARTBEAT && l->beat) {
		beat.role = l->self->role;
		beat.node_id = l->self->node_id;
		l->beat(&beat, l->beat_arg);
		m.node = &beat;
	}
	if (id)
		*id = m.request_id;
	return dml_conn_send(l->conn, &m, NULL, 0, DML_SEND_COPY);
}

/* ---- connection callbacks ------------------------------------------------ */

static int on_welcome(struct dml_conn *c, const Dml__Handshake *w, void *arg)
{
	struct dml_sched_link *l = arg;

	if (!l)
		return DML_ECLOSED;
	if (w->role != DML__ROLE__SCHEDULER) {
		/* A server's or aggregator's port by mistake: say so plainly. */
		if (l->logged_err != DML_EROLE)
			dml_err("scheduler %s: the peer is not a scheduler (role %u); check "
				"the scheduler address", l->name, w->role);
		l->logged_err = DML_EROLE;
		return DML_EROLE;
	}
	return 0;
}

static void on_ready(struct dml_conn *c, void *arg)
{
	struct dml_sched_link *l = arg;
	uint32_t wait_ms;
	int rc;

	if (!l || l->conn != c)
		return;
	l->last_rx_ns = dml_now_ns();
	rc = send_simple(l, DML__MSG_TYPE__REGISTER, &l->register_id);
	if (rc) {
		dml_conn_close(c, rc);
		return;
	}
	link_set_state(l, LINK_REGISTERING);
	wait_ms = l->cc.handshake_timeout_ms ? l->cc.handshake_timeout_ms
					     : REPLY_TIMEOUT_DEFAULT_MS;
	timer_arm(l, wait_ms);
}

static void on_register_reply(struct dml_sched_link *l, const Dml__Meta *m)
{
	uint32_t ms = m->heartbeat_interval_ms ? m->heartbeat_interval_ms
					       : HEARTBEAT_DEFAULT_MS;

	if (ms < HEARTBEAT_MIN_MS)
		ms = HEARTBEAT_MIN_MS;
	if (ms > HEARTBEAT_MAX_MS)
		ms = HEARTBEAT_MAX_MS;
	l->heartbeat_ms = ms;
	l->registered_ns = dml_now_ns();
	link_set_state(l, LINK_REGISTERED);
	timer_arm(l, ms);
}

/* The scheduler refused the registration or a heartbeat. */
static void on_refused(struct dml_sched_link *l, struct dml_conn *c, const Dml__Meta *m)
{
	int code = m->error->code < 0 && m->error->code > DML_ERR_MIN ? m->error->code
								       : DML_EIO;
	int refused = m->request_id == l->register_id;
	const char *why = m->error->message && *m->error->message ? m->error->message
								  : dml_strerror(code);

	/*
	 * Either way the link starts over on a new connection, the reason
	 * logged here, once, rather than by the state change. A refused
	 * registration needs an operator; a node the scheduler gave up on
	 * (declared dead) just registers again.
	 */
	if (code != l->logged_err && refused)
		dml_err("scheduler %s: registration refused: %s", l->name, why);
	else if (code != l->logged_err)
		dml_warn("scheduler %s: %s; registering again", l->name, why);
	l->logged_err = code;
	l->was_registered = 0;
	if (refused)
		l->backoff_ms = BACKOFF_MAX_MS / 2;
	dml_conn_close(c, code);
}

static int on_frame(struct dml_conn *c, const Dml__Meta *m, const uint8_t *payload,
		    size_t len, void *arg)
{
	struct dml_sched_link *l = arg;

	if (!l || l->conn != c)
		return 0;
	l->last_rx_ns = dml_now_ns();
	switch (m->type) {
	case DML__MSG_TYPE__REGISTER_REPLY:
		if (l->state != LINK_REGISTERING || m->request_id != l->register_id)
			return DML_ESTATE;
		on_register_reply(l, m);
		return 0;
	case DML__MSG_TYPE__HEARTBEAT:
		return 0;
	case DML__MSG_TYPE__ERROR:
		if ((m->request_id & OWNER_ID_BIT) && l->handler &&
		    l->state == LINK_REGISTERED) {
			/* It answers something the owner sent, not the link. */
			l->handler(l, m, l->handler_arg);
			return 0;
		}
		on_refused(l, c, m);
		return 0;
	default:
		if (l->handler && l->state == LINK_REGISTERED) {
			l->handler(l, m, l->handler_arg);
			return 0;
		}
		/* Newer schedulers may tell nodes more; this one has no use for it. */
		dml_debug("scheduler %s: ignoring a %s frame", l->name,
			  dml_msg_type_name((int)m->type));
		return 0;
	}
}

static void on_close(struct dml_conn *c, int err, void *arg)
{
	struct dml_sched_link *l = arg;

	if (!l || l->conn != c)
		return;
	l->conn = NULL;
	if (l->state == LINK_STOPPED)
		return;
	event_del(l->timer);
	if (l->registered_ns && dml_now_ns() - l->registered_ns >= STABLE_MS * 1000000ull)
		l->backoff_ms = 0;
	l->registered_ns = 0;
	/* Refused at the handshake: a configuration error that no quick retry
	 * will fix, so go straight to the slowest pace. */
	if (err == DML_EAUTH || err == DML_ECLUSTER || err == DML_EROLE ||
	    err == DML_EFRAME_VERSION)
		l->backoff_ms = BACKOFF_MAX_MS / 2;
	link_retry_later(l, err);
}

static const struct dml_conn_ops link_ops = {
	.on_welcome = on_welcome,
	.on_ready = on_ready,
	.on_frame = on_frame,
	.on_close = on_close,
};

/* ---- the timer ------------------------------------------------------------ */

static void link_connect(struct dml_sched_link *l)
{
	int rc = dml_conn_connect(l->base, l->host, l->port, &l->cc, &link_ops, l, &l->conn);

	if (rc) {
		/* Nothing to close: the name did not resolve or no socket. */
		l->conn = NULL;
		link_retry_later(l, rc);
		return;
	}
	link_set_state(l, LINK_CONNECTING);
}

static void heartbeat(struct dml_sched_link *l)
{
	uint64_t silent_ms = (dml_now_ns() - l->last_rx_ns) / 1000000u;
	uint64_t limit_ms = (uint64_t)l->heartbeat_ms * SILENCE_INTERVALS;
	int rc;

	if (limit_ms < SILENCE_MIN_MS)
		limit_ms = SILENCE_MIN_MS;
	if (silent_ms > limit_ms) {
		/* Hung, not gone: nothing queued for it is worth flushing. */
		dml_conn_abort(l->conn, DML_ETIMEDOUT);
		return;
	}
	rc = send_simple(l, DML__MSG_TYPE__HEARTBEAT, NULL);
	if (rc) {
		dml_conn_close(l->conn, rc);
		return;
	}
	timer_arm(l, l->heartbeat_ms);
}

static void timer_cb(evutil_socket_t fd, short what, void *arg)
{
	struct dml_sched_link *l = arg;

	switch (l->state) {
	case LINK_IDLE:
		link_connect(l);
		break;
	case LINK_REGISTERING:
		dml_conn_abort(l->conn, DML_ETIMEDOUT);
		break;
	case LINK_REGISTERED:
		heartbeat(l);
		break;
	default:
		/* CONNECTING has the connection's own handshake timer. */
		break;
	}
}

/* ---- lifecycle ------------------------------------------------------------ */

int dml_sched_link_new(struct event_base *base, const struct dml_conn_conf *conn_conf,
		       const char *host, uint16_t port, const Dml__NodeInfo *self,
		       struct dml_sched_link **out)
{
	struct dml_sched_link *l;

	if (!out)
		return DML_EINVAL;
	*out = NULL;
	if (!base || !conn_conf || !host || !*host || strlen(host) >= sizeof(l->host) ||
	    port == 0 || !self)
		return DML_EINVAL;
	if (self->role != DML__ROLE__SERVER && self->role != DML__ROLE__WORKER &&
	    self->role != DML__ROLE__AGGREGATOR)
		return DML_EINVAL;
	l = dml_xcalloc(1, sizeof(*l));
	l->self = dml_msg_copy(&self->base);
	if (!l->self) {
		free(l);
		return DML_ENOMEM;
	}
	l->base = base;
	l->cc = *conn_conf;
	l->cc.role = self->role;
	l->cc.node_id = self->node_id;
	if (self->incarnation)
		l->cc.incarnation = self->incarnation;
	l->self->incarnation = l->cc.incarnation;
	snprintf(l->host, sizeof(l->host), "%s", host);
	l->port = port;
	snprintf(l->name, sizeof(l->name), strchr(host, ':') ? "[%s]:%u" : "%s:%u", host,
		 port);
	l->state = LINK_IDLE;
	l->timer = evtimer_new(base, timer_cb, l);
	if (!l->timer) {
		dml__node_info__free_unpacked(l->self, NULL);
		free(l);
		return DML_ENOMEM;
	}
	timer_arm(l, 0);
	*out = l;
	return 0;
}

void dml_sched_link_set_handler(struct dml_sched_link *l, dml_sched_link_frame_fn fn,
				void *arg)
{
	if (!l)
		return;
	l->handler = fn;
	l->handler_arg = arg;
}

void dml_sched_link_set_beat(struct dml_sched_link *l, dml_sched_link_beat_fn fn, void *arg)
{
	if (!l)
		return;
	l->beat = fn;
	l->beat_arg = arg;
}

int dml_sched_advertised(const char *advertise, const char *listen, uint16_t bound_port,
			 char *out, size_t outlen)
{
	char host[256];
	uint16_t port;

	if (advertise[0]) {
		snprintf(out, outlen, "%s", advertise);
		return 0;
	}
	if (dml_parse_hostport(listen, host, sizeof(host), &port, 1) != 0)
		return DML_ECONF;
	snprintf(out, outlen, strchr(host, ':') ? "[%s]:%u" : "%s:%u", host, bound_port);
	return 0;
}

int dml_sched_link_start(struct event_base *base, const struct dml_conn_conf *conn_conf,
			 const char *scheduler, Dml__NodeInfo *self,
			 dml_sched_link_frame_fn fn, void *arg, struct dml_sched_link **out)
{
	char host[256];
	uint16_t port;
	int rc;

	if (dml_parse_hostport(scheduler, host, sizeof(host), &port, 0) != 0)
		return DML_ECONF;
	/* Tells the scheduler a restarted process from a reconnecting one. */
	if (dml_random_bytes(&self->incarnation, sizeof(self->incarnation)) != 0)
		return DML_EIO;
	if (self->incarnation == 0)
		self->incarnation = 1;
	rc = dml_sched_link_new(base, conn_conf, host, port, self, out);
	if (rc) {
		dml_err("scheduler %s: %s", scheduler, dml_strerror(rc));
		return rc == DML_EINVAL ? DML_ECONF : rc;
	}
	dml_sched_link_set_handler(*out, fn, arg);
	return 0;
}

int dml_sched_link_send(struct dml_sched_link *l, Dml__Meta *m)
{
	if (!l || !m)
		return DML_EINVAL;
	if (l->state != LINK_REGISTERED || !l->conn)
		return DML_ECONN;
	m->sender = l->self->node_id;
	if (m->request_id == 0)
		m->request_id = OWNER_ID_BIT | ++l->next_owner_request;
	return dml_conn_send(l->conn, m, NULL, 0, DML_SEND_COPY);
}

int dml_sched_link_registered(const struct dml_sched_link *l)
{
	return l && l->state == LINK_REGISTERED;
}

uint32_t dml_sched_link_heartbeat_ms(const struct dml_sched_link *l)
{
	return l ? l->heartbeat_ms : 0;
}

void dml_sched_link_stop(struct dml_sched_link *l)
{
	if (!l || l->state == LINK_STOPPED)
		return;
	event_del(l->timer);
	/* Saying goodbye lets the scheduler tell a clean stop from a crash. */
	if (l->state == LINK_REGISTERED && send_simple(l, DML__MSG_TYPE__BYE, NULL) == 0)
		dml_info("scheduler %s: leaving", l->name);
	link_set_state(l, LINK_STOPPED);
	if (l->conn)
		dml_conn_close(l->conn, 0);
}

void dml_sched_link_free(struct dml_sched_link *l)
{
	if (!l)
		return;
	dml_sched_link_stop(l);
	if (l->conn) {
		dml_conn_abort(l->conn, DML_ECLOSED);
		/* The teardown is deferred to the loop; on_close clears l->conn. */
		for (int i = 0; i < FREE_TURNS && l->conn; i++)
			if (event_base_loop(l->base, EVLOOP_NONBLOCK) < 0)
				break;
		if (l->conn)
			dml_conn_set_arg(l->conn, NULL);
	}
	event_free(l->timer);
	dml__node_info__free_unpacked(l->self, NULL);
	free(l);
}
