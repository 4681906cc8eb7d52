/*
 * Connection layer implementation (see conn.h for the model): the state,
 * teardown, the bufferevent callbacks and construction. Sending is in
 * conn_send.c, the handshake in conn_handshake.c, framing of input in
 * conn_recv.c; conn_internal.h is what they share.
 *
 * Must never: free a connection inside one of its own callbacks, hand a frame
 * to the owner before the handshake succeeded, allocate from a length the
 * peer sent before frame.h checked it, or let one peer's error touch another.
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

/* How long a closing connection may take to flush its output. */
#define CLOSE_FLUSH_MS 2000

static const char *const state_names[] = { "connecting", "handshake", "ready", "closing" };

void dml_conn_set_state(struct dml_conn *c, enum dml_conn_state st)
{
	if (c->state == st)
		return;
	dml_debug("conn %s: %s -> %s", c->peer, state_names[c->state], state_names[st]);
	c->state = st;
}

void dml_conn_conf_default(struct dml_conn_conf *conf)
{
	memset(conf, 0, sizeof(*conf));
	dml_frame_limits_default(&conf->limits);
	conf->cluster = "dml";
	conf->handshake_timeout_ms = 5000;
	conf->output_high_wm = 64u << 20;
}

int dml_conn_conf_daemon(struct dml_conn_conf *conf, uint32_t role, uint32_t node_id,
			 const char *cluster, uint32_t handshake_timeout_ms,
			 const char *secret_file, uint8_t **secret, size_t *secret_len)
{
	int rc = dml_secret_load(secret_file, secret, secret_len);

	if (rc)
		return rc;
	dml_conn_conf_default(conf);
	conf->secret = *secret;
	conf->secret_len = *secret_len;
	conf->cluster = cluster;
	conf->role = role;
	conf->node_id = node_id;
	conf->handshake_timeout_ms = handshake_timeout_ms;
	return 0;
}

/* ---- teardown ---------------------------------------------------------- */

static void conn_free(struct dml_conn *c)
{
	if (c->ops->on_close)
		c->ops->on_close(c, c->close_err, c->arg);
	bufferevent_free(c->bev);
	evbuffer_free(c->cork);
	event_free(c->resume_ev);
	event_free(c->direct_ev);
	event_free(c->free_ev);
	event_free(c->flush_timer);
	if (c->handshake_timer)
		event_free(c->handshake_timer);
	dml_meta_free(c->meta);
	dml_meta_free(c->peer_meta);
	/* After on_close and the owner's last look at a payload in place. */
	dml_conn_ring_free(c);
	free(c->rxbuf);
	free(c);
}

static void free_cb(evutil_socket_t fd, short what, void *arg)
{
	conn_free(arg);
}

static void schedule_free(struct dml_conn *c)
{
	event_active(c->free_ev, EV_TIMEOUT, 0);
}

static void begin_close(struct dml_conn *c, int err)
{
	if (c->closing)
		return;
	c->closing = 1;
	c->close_err = err;
	dml_conn_set_state(c, DML_CONN_CLOSING);
	bufferevent_disable(c->bev, EV_READ);
	event_del(c->direct_ev);
	event_del(c->resume_ev);
	if (c->prelude_ev)
		event_del(c->prelude_ev);
	if (c->handshake_timer)
		event_del(c->handshake_timer);
}

void dml_conn_close(struct dml_conn *c, int err)
{
	struct timeval tv = { CLOSE_FLUSH_MS / 1000, (CLOSE_FLUSH_MS % 1000) * 1000 };

	if (c->closing)
		return;
	begin_close(c, err);
	dml_conn_cork_flush(c, 0);
	if (evbuffer_get_length(bufferevent_get_output(c->bev)) == 0) {
		schedule_free(c);
		return;
	}
	/* Let the write callback free it once drained; the timer bounds that. */
	bufferevent_setwatermark(c->bev, EV_WRITE, 0, 0);
	bufferevent_enable(c->bev, EV_WRITE);
	event_add(c->flush_timer, &tv);
}

void dml_conn_abort(struct dml_conn *c, int err)
{
	if (!c->closing)
		begin_close(c, err);
	event_del(c->flush_timer);
	bufferevent_disable(c->bev, EV_READ | EV_WRITE);
	schedule_free(c);
}

static void flush_timeout_cb(evutil_socket_t fd, short what, void *arg)
{
	struct dml_conn *c = arg;

	dml_debug("conn %s: output not flushed in time, dropping it", c->peer);
	dml_conn_abort(c, c->close_err);
}

/* A protocol failure: log one line, tell the peer if possible, close. */
void dml_conn_fail(struct dml_conn *c, int err, uint64_t request_id)
{
	if (c->closing)
		return;
	/* Not ready yet is no failure: the peer tries again. */
	if (err == DML_EAGAIN)
		dml_info("peer %s: %s; closing connection", c->peer, dml_strerror(err));
	else
		dml_warn("peer %s: %s; closing connection", c->peer, dml_strerror(err));
	if (c->state != DML_CONN_CONNECTING)
		(void)dml_conn_send_error(c, request_id, err, NULL);
	dml_conn_close(c, err);
}

/* ---- events ------------------------------------------------------------ */

void dml_conn_release(struct dml_conn *c)
{
	if (!c->held || c->closing)
		return;
	c->held = 0;
	if (!c->read_paused)
		bufferevent_enable(c->bev, EV_READ);
	/* The held frame is dispatched again from the loop, not from here:
	 * the caller may be in the middle of another frame's handler. */
	event_active(c->resume_ev, EV_TIMEOUT, 0);
}

int dml_conn_held(const struct dml_conn *c)
{
	return c->held;
}

static void resume_cb(evutil_socket_t fd, short what, void *arg)
{
	dml_conn_process_input(arg);
}

static void read_cb(struct bufferevent *bev, void *arg)
{
	dml_conn_process_input(arg);
}

static void write_cb(struct bufferevent *bev, void *arg)
{
	struct dml_conn *c = arg;
	size_t pending = evbuffer_get_length(bufferevent_get_output(bev));

	if (c->closing) {
		if (pending == 0) {
			event_del(c->flush_timer);
			schedule_free(c);
		}
		return;
	}
	if (c->read_paused && pending <= c->conf.output_high_wm / 2) {
		c->read_paused = 0;
		bufferevent_setwatermark(bev, EV_WRITE, 0, 0);
		if (!c->direct && !c->held)
			bufferevent_enable(bev, EV_READ);
	}
}

static void event_cb(struct bufferevent *bev, short what, void *arg)
{
	struct dml_conn *c = arg;
	int err;

	if (what & BEV_EVENT_CONNECTED) {
		c->fd = bufferevent_getfd(bev);
		dml_conn_start_handshake(c);
		return;
	}
	if (c->closing) {
		dml_conn_abort(c, c->close_err);
		return;
	}
	if (what & BEV_EVENT_EOF) {
		size_t pending = evbuffer_get_length(bufferevent_get_input(bev));

		err = dml_frame_eof(pending + (size_t)c->have_meta);
		if (err)
			dml_warn("peer %s: %s", c->peer, dml_strerror(err));
		else if (c->state != DML_CONN_READY)
			err = DML_ECONN;
	} else {
		size_t pending = evbuffer_get_length(bufferevent_get_input(bev));

		err = DML_ECONN;
		/* Losing a peer between frames is routine; inside one, worth a line. */
		if (pending || c->have_meta)
			dml_warn("peer %s: %s inside a frame", c->peer,
				 evutil_socket_error_to_string(evutil_socket_geterror(c->fd)));
		else
			dml_debug("peer %s: %s", c->peer, evutil_socket_error_to_string(
					  evutil_socket_geterror(c->fd)));
	}
	dml_conn_abort(c, err);
}

/* ---- construction ------------------------------------------------------- */

static int conn_new(struct event_base *base, int fd, const struct dml_conn_conf *conf,
		    const struct dml_conn_ops *ops, void *arg, struct dml_conn **out)
{
	struct dml_conn *c = dml_xcalloc(1, sizeof(*c));

	c->base = base;
	c->fd = fd;
	c->lowat = 1;
	c->conf = *conf;
	c->ops = ops;
	c->arg = arg;
	snprintf(c->peer, sizeof(c->peer), "(connecting)");
	if (dml_random_bytes(c->my_nonce, sizeof(c->my_nonce)) != 0) {
		free(c);
		return DML_EIO;
	}
	c->bev = bufferevent_socket_new(base, fd, BEV_OPT_CLOSE_ON_FREE);
	c->cork = evbuffer_new();
	if (!c->bev || !c->cork) {
		if (c->bev)
			bufferevent_free(c->bev);
		if (c->cork)
			evbuffer_free(c->cork);
		free(c);
		return DML_ENOMEM;
	}
	bufferevent_set_max_single_read(c->bev, 256 * 1024);
	bufferevent_set_max_single_write(c->bev, 16u << 20);
	bufferevent_setcb(c->bev, read_cb, write_cb, event_cb, c);
	c->resume_ev = event_new(base, -1, 0, resume_cb, c);
	c->free_ev = event_new(base, -1, 0, free_cb, c);
	c->flush_timer = evtimer_new(base, flush_timeout_cb, c);
	c->direct_ev = NULL;
	if (conf->handshake_timeout_ms) {
		struct timeval tv = { conf->handshake_timeout_ms / 1000,
				      (conf->handshake_timeout_ms % 1000) * 1000 };

		c->handshake_timer = evtimer_new(base, dml_conn_handshake_timeout_cb, c);
		evtimer_add(c->handshake_timer, &tv);
	}
	*out = c;
	return 0;
}

/* The direct-read event needs the final fd, known only once connected. */
static void arm_direct(struct dml_conn *c)
{
	c->direct_ev = event_new(c->base, c->fd, EV_READ | EV_PERSIST, dml_conn_direct_read_cb, c);
}

/* A connection on a socket connected already: accepted, or dialed locally. */
static int conn_connected(struct event_base *base, int fd, int acceptor,
			  const struct dml_conn_conf *conf, const struct dml_conn_ops *ops,
			  void *arg, struct dml_conn **out)
{
	struct dml_conn *c;
	int rc;

	evutil_make_socket_nonblocking(fd);
	rc = conn_new(base, fd, conf, ops, arg, &c);
	if (rc) {
		close(fd);
		return rc;
	}
	c->acceptor = acceptor;
	arm_direct(c);
	bufferevent_enable(c->bev, EV_READ | EV_WRITE);
	dml_conn_start_handshake(c);
	*out = c;
	return 0;
}

int dml_conn_accept(struct event_base *base, int fd, const struct dml_conn_conf *conf,
		    const struct dml_conn_ops *ops, void *arg, struct dml_conn **out)
{
	return conn_connected(base, fd, 1, conf, ops, arg, out);
}

int dml_conn_connect(struct event_base *base, const char *host, uint16_t port,
		     const struct dml_conn_conf *conf, const struct dml_conn_ops *ops,
		     void *arg, struct dml_conn **out)
{
	struct evutil_addrinfo hints = { 0 }, *res = NULL;
	struct dml_conn *c;
	char portstr[8];
	int fd, rc;

	hints.ai_family = AF_UNSPEC;
	hints.ai_socktype = SOCK_STREAM;
	snprintf(portstr, sizeof(portstr), "%u", port);
	if (evutil_getaddrinfo(host, portstr, &hints, &res) != 0 || !res)
		return DML_ECONN;
	if (!conf->tcp_only && (fd = dml_local_connect(res->ai_addr)) >= 0) {
		evutil_freeaddrinfo(res);
		return conn_connected(base, fd, 0, conf, ops, arg, out);
	}
	fd = socket(res->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0) {
		evutil_freeaddrinfo(res);
		return DML_EIO;
	}
	rc = conn_new(base, fd, conf, ops, arg, &c);
	if (rc) {
		close(fd);
		evutil_freeaddrinfo(res);
		return rc;
	}
	arm_direct(c);
	snprintf(c->peer, sizeof(c->peer), "%s:%u", host, port);
	bufferevent_enable(c->bev, EV_READ | EV_WRITE);
	if (bufferevent_socket_connect(c->bev, res->ai_addr, (int)res->ai_addrlen) != 0) {
		evutil_freeaddrinfo(res);
		/* Report through on_close like any other failure, from the loop. */
		begin_close(c, DML_ECONN);
		schedule_free(c);
		*out = c;
		return 0;
	}
	evutil_freeaddrinfo(res);
	*out = c;
	return 0;
}

/* ---- accessors ---------------------------------------------------------- */

enum dml_conn_state dml_conn_state(const struct dml_conn *c)
{
	return c->state;
}

const char *dml_conn_peer(const struct dml_conn *c)
{
	return c->peer;
}

int dml_conn_is_local(const struct dml_conn *c)
{
	return c->local;
}

const Dml__Handshake *dml_conn_peer_hello(const struct dml_conn *c)
{
	return c->peer_meta ? c->peer_meta->handshake : NULL;
}

size_t dml_conn_output_pending(const struct dml_conn *c)
{
	return evbuffer_get_length(bufferevent_get_output(c->bev)) + evbuffer_get_length(c->cork);
}

void dml_conn_set_arg(struct dml_conn *c, void *arg)
{
	c->arg = arg;
}

uint64_t dml_conn_bytes_in(const struct dml_conn *c)
{
	return c->bytes_in;
}

uint64_t dml_conn_bytes_out(const struct dml_conn *c)
{
	return c->bytes_out;
}

uint64_t dml_conn_direct_bytes(const struct dml_conn *c)
{
	return c->direct_bytes;
}

uint64_t dml_conn_ring_bytes(const struct dml_conn *c)
{
	return c->ring_bytes;
}
