/*
 * dml-aggregator's connections to the owning servers, one each, as role
 * AGGREGATOR with its node_id: dialled at start, dialled again with a
 * back-off (100 ms doubling to 2 s) whenever one drops; on each new
 * connection the push in flight and every pull not answered go again, in
 * order, before anything newer. Answers are handed to the pull cache or
 * the push queue by request id.
 *
 * Must never: treat a frame from an owner as trusted (an unknown type
 * closes that owner's connection only), or block the loop on a dial.
 */
#include <stdlib.h>
#include <string.h>

#include "proto/dml_error.h"
#include "proto/frame.h"
#include "proto/log.h"
#include "proto/util.h"
#include "server/aggregator_internal.h"

#define RECONNECT_FIRST_MS 100
#define RECONNECT_MAX_MS 2000

static void owner_dial(struct agg_owner *o);

static void reconnect_cb(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	owner_dial(arg);
}

void agg_timer_arm(struct event *ev, uint32_t ms)
{
	struct timeval tv = { (time_t)(ms / 1000), (suseconds_t)(ms % 1000) * 1000 };

	evtimer_add(ev, &tv);
}

void agg_backoff_arm(struct event *ev, uint32_t *ms, uint32_t first_ms, uint32_t max_ms)
{
	*ms = *ms ? *ms * 2 : first_ms;
	if (*ms > max_ms)
		*ms = max_ms;
	agg_timer_arm(ev, *ms);
}

static void owner_dial_later(struct agg_owner *o)
{
	if (!o->agg->stopping)
		agg_backoff_arm(o->reconnect, &o->backoff_ms, RECONNECT_FIRST_MS,
				RECONNECT_MAX_MS);
}

static int on_welcome(struct dml_conn *c, const Dml__Handshake *welcome, void *arg)
{
	struct agg_owner *o = arg;

	if (welcome->role != DML__ROLE__SERVER) {
		dml_warn("owner %s: peer %s is not a server (role %u)", o->addr,
			 dml_conn_peer(c), welcome->role);
		return DML_EROLE;
	}
	o->codecs = dml_welcome_codecs(welcome);
	o->takes_clocks = welcome->relays_clocks;
	return 0;
}

static void on_ready(struct dml_conn *c, void *arg)
{
	struct agg_owner *o = arg;

	dml_info("owner %s: connected (server %u)", o->addr, dml_conn_peer_hello(c)->node_id);
	o->ready = 1;
	o->backoff_ms = 0;
	o->logged_err = 0;
	/* What the last connection left unanswered goes first, in order. */
	agg_pull_resend(o);
	agg_clocks_resend(o);
	agg_queue_pump(o);
}

static int on_frame(struct dml_conn *c, const Dml__Meta *m, const uint8_t *payload,
		    size_t len, void *arg)
{
	struct agg_owner *o = arg;

	(void)c;
	switch (m->type) {
	case DML__MSG_TYPE__PULL_REPLY:
	case DML__MSG_TYPE__ACK:
	case DML__MSG_TYPE__ERROR:
		if (!agg_pull_answer(o, m, payload, len) && m->type != DML__MSG_TYPE__PULL_REPLY)
			agg_queue_answer(o, m);
		return 0;
	case DML__MSG_TYPE__HEARTBEAT:
		return 0;
	default:
		return DML_ESTATE;
	}
}

static void on_close(struct dml_conn *c, int err, void *arg)
{
	struct agg_owner *o = arg;

	(void)c;
	o->agg->st.bytes_in_closed += dml_conn_bytes_in(c);
	o->agg->st.bytes_out_closed += dml_conn_bytes_out(c);
	if (o->ready || err != o->logged_err)
		dml_info("owner %s: %s (%s); dialling again", o->addr,
			 o->ready ? "connection lost" : "cannot connect",
			 err ? dml_strerror(err) : "closed");
	o->logged_err = err;
	o->conn = NULL;
	o->ready = 0;
	agg_queue_unsend(o);
	owner_dial_later(o);
}

static const struct dml_conn_ops up_ops = {
	.on_welcome = on_welcome,
	.on_ready = on_ready,
	.on_frame = on_frame,
	.on_close = on_close,
};

static void owner_dial(struct agg_owner *o)
{
	struct dml_agg *a = o->agg;

	if (a->stopping || o->conn)
		return;
	if (dml_conn_connect(a->base, o->host, o->port, &a->up_conf, &up_ops, o, &o->conn) != 0) {
		o->conn = NULL;
		owner_dial_later(o);
	}
}

int agg_owner_send(struct agg_owner *o, Dml__Meta *m, const void *payload, size_t len)
{
	if (!o->ready || !o->conn)
		return DML_ECLOSED;
	m->sender = o->agg->conf->node_id;
	return dml_conn_send(o->conn, m, payload, len, DML_SEND_COPY);
}

uint64_t agg_owner_rid(struct agg_owner *o)
{
	return ++o->next_rid;
}

int agg_owners_start(struct dml_agg *a)
{
	const char *s = a->conf->servers;
	size_t n = 1;

	for (const char *p = s; *p; p++)
		n += *p == ',';
	a->owners = dml_xcalloc(n, sizeof(*a->owners));
	while (*s) {
		size_t len = strcspn(s, ",");
		struct agg_owner *o = &a->owners[a->nowners];

		o->agg = a;
		o->addr = dml_xmalloc(len + 1);
		memcpy(o->addr, s, len);
		o->addr[len] = '\0';
		s += len + (s[len] == ',');
		if (agg_owner_find(a, o->addr)) {
			dml_err("servers: %s is listed twice", o->addr);
			free(o->addr);
			return DML_ECONF;
		}
		/* The option's check parsed it already. */
		if (dml_parse_hostport(o->addr, o->host, sizeof(o->host), &o->port, 0) != 0) {
			free(o->addr);
			return DML_ECONF;
		}
		o->reconnect = evtimer_new(a->base, reconnect_cb, o);
		a->nowners++;
	}
	for (size_t i = 0; i < a->nowners; i++)
		owner_dial(&a->owners[i]);
	return 0;
}

void agg_owners_free(struct dml_agg *a)
{
	int open = 0;

	for (size_t i = 0; i < a->nowners; i++)
		if (a->owners[i].conn) {
			dml_conn_abort(a->owners[i].conn, DML_ECLOSED);
			open = 1;
		}
	/* Teardown is deferred to the loop: turn it until every one is gone. */
	for (int k = 0; k < 100 && open; k++) {
		event_base_loop(a->base, EVLOOP_NONBLOCK);
		open = 0;
		for (size_t i = 0; i < a->nowners; i++)
			open |= a->owners[i].conn != NULL;
	}
	for (size_t i = 0; i < a->nowners; i++) {
		struct agg_owner *o = &a->owners[i];

		agg_queue_free(o);
		agg_pull_free(o);
		agg_residuals_free(o);
		agg_clocks_free(o);
		if (o->reconnect)
			event_free(o->reconnect);
		free(o->addr);
	}
	free(a->owners);
	a->owners = NULL;
	a->nowners = 0;
}
