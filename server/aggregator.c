/*
 * dml-aggregator: a zone's workers send it their PUSH and PULL frames as
 * they would send them to the owning servers, naming the owner in
 * Meta.owner. It sums the pushes of a clock per key range and forwards one
 * push per owner (aggregator_queue.c), and serves the pulls of a clock from
 * one upstream pull (aggregator_pull.c) over its own connections to the
 * owners (aggregator_upstream.c).
 *
 * This file: the daemon's life, the worker sessions, and the requests they
 * send. Must never: acknowledge a worker's push before its owner did, block
 * the loop, or let one worker's bad frame cost more than its own request
 * (or, where the frame layer refuses it, its own connection).
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proto/auth.h"
#include "proto/dml_error.h"
#include "proto/frame.h"
#include "proto/log.h"
#include "proto/util.h"
#include "server/aggregator_internal.h"

#define SHUTDOWN_GRACE_S 5

/* What WELCOME offers: every codec in pushes, every full one in replies. */
static Dml__DType agg_codecs[] = { DML__DTYPE__F32, DML__DTYPE__F16, DML__DTYPE__INT8,
				   DML__DTYPE__BF16, DML__DTYPE__TOPK,
				   DML__DTYPE__TOPK16 };

void agg_reply_error(struct agg_session *s, uint64_t rid, int code, const char *fmt, ...)
{
	char msg[256];
	va_list ap;

	if (!s)
		return;
	va_start(ap, fmt);
	dml_conn_error_vformat(s->peer.conn, rid, msg, sizeof(msg), fmt, ap);
	va_end(ap);
	(void)dml_conn_send_error(s->peer.conn, rid, code, msg);
}

void agg_relay_error(struct agg_session *s, uint64_t rid, const Dml__Meta *err)
{
	Dml__Meta m = DML__META__INIT;
	Dml__Error e = DML__ERROR__INIT;

	if (!s)
		return;
	m.type = DML__MSG_TYPE__ERROR;
	m.request_id = rid;
	m.sender = s->agg->conf->node_id;
	m.map_version = err->map_version;
	e.code = err->error->code;
	e.message = err->error->message;
	m.error = &e;
	(void)dml_conn_send(s->peer.conn, &m, NULL, 0, DML_SEND_COPY);
}

void agg_reply_ack(struct agg_session *s, uint64_t rid)
{
	if (s)
		(void)dml_conn_send_plain(s->peer.conn, DML__MSG_TYPE__ACK, rid);
}

struct agg_owner *agg_owner_find(struct dml_agg *a, const char *addr)
{
	for (size_t i = 0; i < a->nowners; i++)
		if (strcmp(a->owners[i].addr, addr) == 0)
			return &a->owners[i];
	return NULL;
}

int agg_owners_take_clocks(const struct dml_agg *a)
{
	for (size_t i = 0; i < a->nowners; i++)
		if (!a->owners[i].ready || !a->owners[i].takes_clocks)
			return 0;
	return a->nowners > 0;
}

void agg_release_held(struct dml_agg *a)
{
	if (a->pending_bytes >= a->conf->max_pending)
		return;
	for (struct dml_peer *x = a->peers.head; x; x = x->next) {
		struct agg_session *s = (struct agg_session *)x;

		if (s->held) {
			s->held = 0;
			dml_conn_release(x->conn);
		}
	}
}

static int on_hello(struct dml_conn *c, const Dml__Handshake *hello, Dml__Handshake *welcome,
		    void *arg)
{
	struct agg_session *s = arg;

	/* Only workers push through an aggregator; owners and tools talk to
	 * the servers themselves. */
	if (hello->role != DML__ROLE__WORKER)
		return DML_EROLE;
	s->worker = hello->node_id;
	s->incarnation = hello->incarnation;
	welcome->zone = s->agg->conf->zone;
	welcome->n_codecs = DML_ARRAY_LEN(agg_codecs);
	welcome->codecs = agg_codecs;
	/* A worker may send its clocks here only if every owner takes them:
	 * an older server would drop them, or refuse the CLOCK. */
	welcome->relays_clocks = agg_owners_take_clocks(s->agg);
	dml_info("peer %s: worker %u joined", dml_conn_peer(c), hello->node_id);
	return 0;
}

static void on_ready(struct dml_conn *c, void *arg)
{
	struct agg_session *s = arg;

	(void)c;
	s->ready = 1;
	s->agg->nsessions++;
}

/* The owner a request names, or NULL after refusing it (DML_ERANGE). */
static struct agg_owner *request_owner(struct agg_session *s, const Dml__Meta *m)
{
	struct agg_owner *o = agg_owner_find(s->agg, m->owner);

	if (!o) {
		s->agg->st.refused++;
		agg_reply_error(s, m->request_id, DML_ERANGE, "%s to table %u: owner '%s' is "
				"not a server of this aggregator", dml_msg_type_name(m->type),
				m->table, m->owner);
	}
	return o;
}

/*
 * A push's values as floats, in a buffer of its own (the queue keeps them
 * until the owner acknowledged): copied, or decoded from their codec.
 * NULL after refusing the push.
 */
static float *push_values(struct agg_session *s, const Dml__Meta *m, const uint8_t *payload,
			  size_t len, size_t *nvalues)
{
	size_t key_bytes = m->dense ? 0 : (size_t)m->num_keys * sizeof(uint64_t);
	struct dml_codec codec;
	uint64_t n;
	float *v;
	int rc;

	/* The frame layer checked the counts against the payload already; a
	 * codec's few bytes may still name more values than a frame of floats
	 * could carry, which the forwarded push would have to. */
	if (dml_meta_value_count(m, &n) != 0 || dml_dtype_codec(m->dtype, &codec) != 0) {
		agg_reply_error(s, m->request_id, DML_ESHAPE, "push to table %u: bad counts "
				"or dtype", m->table);
		return NULL;
	}
	if (n > (s->agg->conf->max_payload - key_bytes) / sizeof(float)) {
		agg_reply_error(s, m->request_id, DML_EFRAME_PAYLOAD, "push to table %u: %llu "
				"values are more than max_payload holds as floats", m->table,
				(unsigned long long)n);
		return NULL;
	}
	v = malloc(n ? n * sizeof(float) : 1);
	if (!v) {
		agg_reply_error(s, m->request_id, DML_ENOMEM, "push to table %u: no memory "
				"for %llu values", m->table, (unsigned long long)n);
		return NULL;
	}
	rc = dml_codec_decode(&codec, payload + key_bytes, len - key_bytes, (size_t)n, v);
	if (rc) {
		free(v);
		agg_reply_error(s, m->request_id, DML_ESHAPE, "push to table %u: the values "
				"are not a valid encoding of their dtype", m->table);
		return NULL;
	}
	*nvalues = (size_t)n;
	return v;
}

/* 0, or DML_CONN_HOLD while the queues hold max_pending bytes. */
static int handle_push(struct agg_session *s, const Dml__Meta *m, const uint8_t *payload,
		       size_t len)
{
	struct dml_agg *a = s->agg;
	struct agg_owner *o = request_owner(s, m);
	size_t n = 0;
	float *v;
	int rc;

	if (!o)
		return 0;
	if (m->contributors && m->n_contributors) {
		agg_reply_error(s, m->request_id, DML_EINVAL, "push to table %u: workers "
				"name no contributors", m->table);
		return 0;
	}
	if (m->seq == 0) {
		agg_reply_error(s, m->request_id, DML_EINVAL, "push to table %u: seq 0: a "
				"push through an aggregator needs its sequence number", m->table);
		return 0;
	}
	if (agg_queue_resend(o, s, m)) {
		a->st.pushes_resent_in++;
		return 0;
	}
	if (a->pending_bytes >= a->conf->max_pending) {
		s->held = 1;
		return DML_CONN_HOLD;
	}
	a->st.pushes_in++;
	v = push_values(s, m, payload, len, &n);
	if (!v)
		return 0;
	rc = agg_queue_push(o, s, m, m->dense ? NULL : (const uint64_t *)payload, v, n);
	if (rc)
		agg_reply_error(s, m->request_id, rc, "push to table %u: %s", m->table,
				dml_strerror(rc));
	return 0;
}

static int on_frame(struct dml_conn *c, const Dml__Meta *m, const uint8_t *payload,
		    size_t len, void *arg)
{
	struct agg_session *s = arg;

	switch (m->type) {
	case DML__MSG_TYPE__PUSH:
		return handle_push(s, m, payload, len);
	case DML__MSG_TYPE__PULL: {
		struct agg_owner *o = request_owner(s, m);

		if (o) {
			s->agg->st.pulls_in++;
			agg_pull_request(o, s, m, payload, len);
		}
		return 0;
	}
	case DML__MSG_TYPE__HEARTBEAT:
		(void)dml_conn_send_plain(c, DML__MSG_TYPE__HEARTBEAT, m->request_id);
		return 0;
	case DML__MSG_TYPE__CLOCK: {
		/* Without an owner: a worker that sends its clocks straight. */
		struct agg_owner *o = m->owner && m->owner[0] ? request_owner(s, m) : NULL;

		if (o && m->clock)
			agg_clock_request(o, s, m->clock);
		return 0;
	}
	case DML__MSG_TYPE__BYE:
		agg_reply_ack(s, m->request_id);
		dml_conn_close(c, 0);
		return 0;
	case DML__MSG_TYPE__STATS:
		agg_reply_error(s, m->request_id, DML_EINVAL, "an aggregator keeps no clocks: "
				"ask the servers");
		return 0;
	default:
		/* Replies and handshakes have no business arriving here. */
		return DML_ESTATE;
	}
}

static void on_close(struct dml_conn *c, int err, void *arg)
{
	struct agg_session *s = arg;
	struct dml_agg *a = s->agg;

	(void)err;
	a->st.bytes_in_closed += dml_conn_bytes_in(c);
	a->st.bytes_out_closed += dml_conn_bytes_out(c);
	for (size_t i = 0; i < a->nowners; i++) {
		agg_queue_forget(&a->owners[i], s);
		agg_pull_forget(&a->owners[i], s);
	}
	if (s->ready)
		a->nsessions--;
	dml_peers_remove(&a->peers, &s->peer);
	free(s);
	/* One worker fewer to wait for: entries the rest joined close now. */
	if (!a->stopping)
		agg_queue_sessions_changed(a);
}

static const struct dml_conn_ops agg_ops = {
	.on_hello = on_hello,
	.on_ready = on_ready,
	.on_frame = on_frame,
	.on_close = on_close,
};

static void accept_cb(struct evconnlistener *l, evutil_socket_t fd, struct sockaddr *addr,
		      int addrlen, void *arg)
{
	struct dml_agg *a = arg;
	struct agg_session *s = dml_xcalloc(1, sizeof(*s));

	(void)l;
	(void)addr;
	(void)addrlen;
	s->agg = a;
	if (dml_peers_accept(&a->peers, fd, &s->peer, &a->conn_conf, &agg_ops, s) != 0)
		free(s);
}

int dml_agg_new(const struct dml_agg_conf *conf, struct event_base *base,
		struct dml_agg **out)
{
	struct dml_agg *a = dml_xcalloc(1, sizeof(*a));
	int rc;

	a->conf = conf;
	a->base = base;
	dml_peers_init(&a->peers, base, conf->max_connections);
	a->peers.max_preauth = conf->max_preauth;
	*out = a;
	rc = dml_conn_conf_daemon(&a->conn_conf, DML__ROLE__AGGREGATOR, conf->node_id,
				  conf->cluster, conf->handshake_timeout_ms, conf->secret_file,
				  &a->secret, &a->secret_len);
	if (rc)
		return rc;
	a->conn_conf.limits.max_meta = (uint32_t)conf->max_meta;
	a->conn_conf.limits.max_payload = (uint32_t)conf->max_payload;
	a->conn_conf.limits.max_keys = (uint32_t)conf->max_keys;
	a->conn_conf.tcp_only = !conf->local_socket;
	a->up_conf = a->conn_conf;
	if ((rc = agg_owners_start(a)) != 0)
		return rc;
	if ((rc = agg_metrics_start(a)) != 0)
		return rc;
	rc = dml_listen_serve(base, conf->listen, conf->port_file, conf->local_socket,
			      accept_cb, a, &a->listener, &a->port,
			      " (aggregator %u of zone '%s', %zu owners, window %u ms)",
			      conf->node_id, conf->zone, a->nowners, conf->window_ms);
	return rc ? rc : agg_sched_start(a);
}

void dml_agg_shutdown(struct dml_agg *a)
{
	if (a->stopping)
		return;
	a->stopping = 1;
	if (a->listener) {
		dml_listener_free(a->listener);
		a->listener = NULL;
	}
	dml_metrics_http_stop(a->metrics);
	agg_sched_stop(a);
	/* Pushes not acknowledged yet stay unacknowledged: the workers resend
	 * them, directly or through another aggregator. */
	dml_peers_shutdown(&a->peers, SHUTDOWN_GRACE_S);
}

void dml_agg_free(struct dml_agg *a)
{
	if (!a)
		return;
	a->stopping = 1;
	dml_peers_destroy(&a->peers);
	if (a->listener)
		dml_listener_free(a->listener);
	agg_owners_free(a);
	agg_sched_free(a);
	dml_metrics_free(a->metrics);
	dml_secret_free(a->secret, a->secret_len);
	free(a);
}
