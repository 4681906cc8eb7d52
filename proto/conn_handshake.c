/*
 * The handshake of the connection layer (conn.h): CHALLENGE, HELLO and
 * WELCOME with the cluster's shared secret (auth.h), and its deadline.
 *
 * Must never hand a frame to the owner before the handshake succeeded.
 */
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/util.h>

#include "proto/auth.h"
#include "proto/conn.h"
#include "proto/conn_internal.h"
#include "proto/dml_error.h"
#include "proto/local.h"
#include "proto/log.h"
#include "proto/util.h"

static void set_nodelay(int fd)
{
	int one = 1;

	(void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

/* Name the peer from its socket; 1 when that is a Unix one (local.h). */
static int describe_peer(struct dml_conn *c)
{
	struct sockaddr_storage ss;
	socklen_t len = sizeof(ss);
	char host[48] = "?";
	int port = 0;

	if (dml_local_describe(c->fd, c->peer, sizeof(c->peer)))
		return 1;
	if (getpeername(c->fd, (struct sockaddr *)&ss, &len) != 0)
		return 0;
	if (ss.ss_family == AF_INET) {
		struct sockaddr_in *sin = (struct sockaddr_in *)&ss;
		evutil_inet_ntop(AF_INET, &sin->sin_addr, host, sizeof(host));
		port = ntohs(sin->sin_port);
	} else if (ss.ss_family == AF_INET6) {
		struct sockaddr_in6 *sin6 = (struct sockaddr_in6 *)&ss;
		evutil_inet_ntop(AF_INET6, &sin6->sin6_addr, host, sizeof(host));
		port = ntohs(sin6->sin6_port);
	}
	snprintf(c->peer, sizeof(c->peer), "%s:%d", host, port);
	return 0;
}

/* ---- handshake ---------------------------------------------------------- */

static int send_handshake(struct dml_conn *c, Dml__MsgType type, Dml__Handshake *hs)
{
	Dml__Meta m = DML__META__INIT;

	m.type = type;
	m.sender = c->conf.node_id;
	hs->role = c->conf.role;
	hs->node_id = c->conf.node_id;
	hs->protocol_version = DML_PROTOCOL_VERSION;
	hs->cluster = (char *)c->conf.cluster;
	hs->incarnation = c->conf.incarnation;
	hs->job = c->conf.job;
	hs->clock = c->conf.clock;
	m.handshake = hs;
	return dml_conn_send(c, &m, NULL, 0, DML_SEND_COPY);
}

static void become_ready(struct dml_conn *c, Dml__Meta *peer_meta)
{
	c->peer_meta = peer_meta;
	if (c->handshake_timer)
		event_del(c->handshake_timer);
	dml_conn_set_state(c, DML_CONN_READY);
	if (c->ops->on_ready)
		c->ops->on_ready(c, c->arg);
}

static int check_peer_handshake(struct dml_conn *c, const Dml__Handshake *hs)
{
	if (hs->protocol_version != DML_PROTOCOL_VERSION)
		return DML_EFRAME_VERSION;
	if (strcmp(hs->cluster, c->conf.cluster) != 0)
		return DML_ECLUSTER;
	if (hs->nonce.len != DML_NONCE_LEN)
		return DML_EAUTH;
	return 0;
}

/* Returns 0 or an error; takes ownership of meta on success (kept). */
int dml_conn_handle_handshake(struct dml_conn *c, Dml__Meta *meta, int *kept)
{
	const Dml__Handshake *hs = meta->handshake;
	uint8_t proof[DML_PROOF_LEN];
	int rc;

	*kept = 0;
	if (meta->type == DML__MSG_TYPE__ERROR)
		return meta->error && meta->error->code < 0 && meta->error->code > DML_ERR_MIN
			? meta->error->code : DML_EAUTH;

	if (c->acceptor) {
		Dml__Handshake welcome = DML__HANDSHAKE__INIT;

		if (meta->type != DML__MSG_TYPE__HELLO)
			return DML_ESTATE;
		if ((rc = check_peer_handshake(c, hs)) != 0)
			return rc;
		rc = dml_auth_verify(c->conf.secret, c->conf.secret_len, DML_AUTH_CLIENT,
				     c->my_nonce, hs->nonce.data, hs->role, hs->node_id,
				     hs->cluster, hs->proof.data, hs->proof.len);
		if (rc)
			return rc;
		dml_auth_proof(c->conf.secret, c->conf.secret_len, DML_AUTH_SERVER,
			       hs->nonce.data, c->my_nonce, hs->role, hs->node_id,
			       hs->cluster, proof);
		welcome.nonce.data = c->my_nonce;
		welcome.nonce.len = DML_NONCE_LEN;
		welcome.proof.data = proof;
		welcome.proof.len = DML_PROOF_LEN;
		if (c->ops->on_hello && (rc = c->ops->on_hello(c, hs, &welcome, c->arg)) != 0)
			return rc;
		welcome.ring = c->shm.map != NULL;
		if ((rc = send_handshake(c, DML__MSG_TYPE__WELCOME, &welcome)) != 0)
			return rc;
		*kept = 1;
		dml_conn_ring_start(c, 1);
		become_ready(c, meta);
		return 0;
	}

	if (!c->got_challenge) {
		Dml__Handshake hello = DML__HANDSHAKE__INIT;

		if (meta->type != DML__MSG_TYPE__CHALLENGE)
			return DML_ESTATE;
		if ((rc = check_peer_handshake(c, hs)) != 0)
			return rc;
		memcpy(c->peer_nonce, hs->nonce.data, DML_NONCE_LEN);
		dml_auth_proof(c->conf.secret, c->conf.secret_len, DML_AUTH_CLIENT,
			       c->peer_nonce, c->my_nonce, c->conf.role, c->conf.node_id,
			       c->conf.cluster, proof);
		hello.nonce.data = c->my_nonce;
		hello.nonce.len = DML_NONCE_LEN;
		hello.proof.data = proof;
		hello.proof.len = DML_PROOF_LEN;
		c->got_challenge = 1;
		if (hs->ring)
			dml_conn_ring_pass(c);
		return send_handshake(c, DML__MSG_TYPE__HELLO, &hello);
	}
	if (meta->type != DML__MSG_TYPE__WELCOME)
		return DML_ESTATE;
	if ((rc = check_peer_handshake(c, hs)) != 0)
		return rc;
	rc = dml_auth_verify(c->conf.secret, c->conf.secret_len, DML_AUTH_SERVER,
			     c->my_nonce, c->peer_nonce, c->conf.role, c->conf.node_id,
			     c->conf.cluster, hs->proof.data, hs->proof.len);
	if (rc)
		return rc;
	if (c->ops->on_welcome && (rc = c->ops->on_welcome(c, hs, c->arg)) != 0)
		return rc;
	*kept = 1;
	dml_conn_ring_start(c, hs->ring);
	become_ready(c, meta);
	return 0;
}

void dml_conn_handshake_timeout_cb(evutil_socket_t fd, short what, void *arg)
{
	struct dml_conn *c = arg;

	if (c->state != DML_CONN_READY)
		dml_conn_fail(c, DML_ETIMEDOUT, 0);
}

void dml_conn_start_handshake(struct dml_conn *c)
{
	dml_conn_set_state(c, DML_CONN_HANDSHAKE);
	c->local = describe_peer(c);
	if (!c->local)
		set_nodelay(c->fd);
	if (c->acceptor) {
		Dml__Handshake ch = DML__HANDSHAKE__INIT;

		ch.nonce.data = c->my_nonce;
		ch.nonce.len = DML_NONCE_LEN;
		ch.ring = dml_conn_ring_offer(c);
		if (send_handshake(c, DML__MSG_TYPE__CHALLENGE, &ch) != 0)
			dml_conn_fail(c, DML_ENOMEM, 0);
	}
}
