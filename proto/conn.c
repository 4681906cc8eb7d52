/*
 * Connection layer implementation (see conn.h for the model).
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
#include <event2/util.h>

#include "auth.h"
#include "conn.h"
#include "dml_error.h"
#include "log.h"
#include "util.h"

/* Payloads at least this large are read straight into their destination. */
#define DIRECT_READ_MIN (64u * 1024)
/* Most a direct read asks the kernel to gather before waking us. */
#define DIRECT_LOWAT_MAX (512u * 1024)
/* How long a closing connection may take to flush its output. */
#define CLOSE_FLUSH_MS 2000
#define HEAD_STACK_BYTES 512
/* Largest metadata an unauthenticated peer may send. */
#define PREAUTH_MAX_META 4096

struct dml_conn {
	struct event_base *base;
	struct bufferevent *bev;
	int fd;
	enum dml_conn_state state;
	int acceptor;                 /* we accepted: we send CHALLENGE */
	int got_challenge;            /* connector: CHALLENGE seen, HELLO sent */
	struct dml_conn_conf conf;
	const struct dml_conn_ops *ops;
	void *arg;
	char peer[64];
	uint8_t my_nonce[DML_NONCE_LEN];
	uint8_t peer_nonce[DML_NONCE_LEN];
	Dml__Meta *peer_meta;         /* HELLO or WELCOME of the peer */

	/* the frame being received */
	int have_meta;
	struct dml_frame_header hdr;
	Dml__Meta *meta;
	uint8_t *dest;
	size_t got;
	int direct;                   /* payload being read by direct_ev */
	int lowat;                    /* SO_RCVLOWAT currently set */

	uint8_t *rxbuf;               /* own payload buffer, reused */
	size_t rxcap;
	int trim;                     /* free rxbuf once the frame is handled */

	struct event *handshake_timer;
	struct event *resume_ev;      /* continue after the per-wake frame cap */
	struct event *direct_ev;
	struct event *free_ev;        /* deferred teardown */
	struct event *flush_timer;
	int closing;
	int close_err;
	int read_paused;              /* backpressure */
	int held;                     /* on_frame held the current frame */
	int corked;                   /* replies to a batch of frames go out together */
	uint64_t bytes_in, bytes_out;
};

static void process_input(struct dml_conn *c);
static void process_frames(struct dml_conn *c);
static void fail(struct dml_conn *c, int err, uint64_t request_id);

static const char *const state_names[] = { "connecting", "handshake", "ready", "closing" };

static void conn_set_state(struct dml_conn *c, enum dml_conn_state st)
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

static void set_nodelay(int fd)
{
	int one = 1;

	(void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

static void describe_peer(struct dml_conn *c)
{
	struct sockaddr_storage ss;
	socklen_t len = sizeof(ss);
	char host[48] = "?";
	int port = 0;

	if (getpeername(c->fd, (struct sockaddr *)&ss, &len) != 0)
		return;
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
}

/* ---- sending ---------------------------------------------------------- */

struct pin_release {
	dml_conn_release_fn fn;
	void *token;
};

/*
 * The one send path. flags as in dml_send_flags; with pin set, the payload
 * (all of iov) is referenced rather than copied and pin->fn is called when
 * the last referenced byte is written or dropped.
 */
static int send_frame(struct dml_conn *c, Dml__Meta *meta, const struct iovec *iov,
		      int iovcnt, int flags, const struct pin_release *pin);

int dml_conn_sendv(struct dml_conn *c, Dml__Meta *meta, const struct iovec *iov,
		   int iovcnt, int flags)
{
	return send_frame(c, meta, iov, iovcnt, flags, NULL);
}

int dml_conn_send_pinned(struct dml_conn *c, Dml__Meta *meta, const void *payload,
			 size_t len, dml_conn_release_fn release, void *token)
{
	struct iovec v = { .iov_base = (void *)payload, .iov_len = len };
	struct pin_release pin = { release, token };

	return send_frame(c, meta, &v, len ? 1 : 0, DML_SEND_REF, &pin);
}

static int send_frame(struct dml_conn *c, Dml__Meta *meta, const struct iovec *iov,
		      int iovcnt, int flags, const struct pin_release *pin)
{
	int pinned = 0;   /* a reference now owns the release */
	struct evbuffer *out = bufferevent_get_output(c->bev);
	uint8_t stack_head[HEAD_STACK_BYTES];
	uint8_t *head = stack_head;
	size_t head_cap = dml_frame_head_size(meta), head_len, payload = 0, done = 0;
	int rc = 0;

	for (int i = 0; i < iovcnt; i++)
		payload += iov[i].iov_len;
	if (c->closing) {
		rc = DML_ECLOSED;
		goto out;
	}
	if (payload > c->conf.limits.max_payload) {
		rc = DML_EFRAME_PAYLOAD;
		goto out;
	}
	if (head_cap > sizeof(stack_head))
		head = dml_xmalloc(head_cap);
	head_len = dml_frame_encode_head(meta, (uint32_t)payload, head, head_cap);
	if (head_len == 0) {
		rc = DML_EINVAL;
		goto out;
	}

	/*
	 * Fast path: nothing queued, so write straight from the caller's memory.
	 * While a batch of input is handled, small frames are queued instead and
	 * leave in one write at the end of the batch.
	 */
	if (c->state != DML_CONN_CONNECTING && evbuffer_get_length(out) == 0 &&
	    (!c->corked || payload >= DIRECT_READ_MIN)) {
		struct iovec v[9];
		struct msghdr msg = { .msg_iov = v };
		ssize_t n;

		if (iovcnt <= 8) {
			v[0].iov_base = head;
			v[0].iov_len = head_len;
			memcpy(&v[1], iov, sizeof(*iov) * (size_t)iovcnt);
			msg.msg_iovlen = (size_t)iovcnt + 1;
			n = sendmsg(c->fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
			if (n > 0)
				done = (size_t)n;
		}
	}

	/* Queue whatever the socket did not take. */
	if (done < head_len && evbuffer_add(out, head + done, head_len - done) != 0) {
		rc = DML_ENOMEM;
		goto out;
	}
	done = done > head_len ? done - head_len : 0;
	for (int i = 0; i < iovcnt; i++) {
		const uint8_t *p = iov[i].iov_base;
		size_t len = iov[i].iov_len;
		int r;

		if (done >= len) {
			done -= len;
			continue;
		}
		p += done;
		len -= done;
		done = 0;
		if (pin && i == iovcnt - 1) {
			r = evbuffer_add_reference(out, p, len, pin->fn, pin->token);
			pinned = r == 0;
		} else if (flags & DML_SEND_REF) {
			r = evbuffer_add_reference(out, p, len, NULL, NULL);
		} else {
			r = evbuffer_add(out, p, len);
		}
		if (r != 0) {
			rc = DML_ENOMEM;
			goto out;
		}
	}
	c->bytes_out += head_len + payload;
	if (!c->read_paused && evbuffer_get_length(out) > c->conf.output_high_wm) {
		/* The peer does not read its replies: stop reading its requests. */
		c->read_paused = 1;
		bufferevent_disable(c->bev, EV_READ);
		bufferevent_setwatermark(c->bev, EV_WRITE, c->conf.output_high_wm / 2, 0);
	}
out:
	if (head != stack_head)
		free(head);
	if (pin && !pinned)
		pin->fn(iovcnt ? iov[iovcnt - 1].iov_base : NULL,
			iovcnt ? iov[iovcnt - 1].iov_len : 0, pin->token);
	return rc;
}

int dml_conn_send(struct dml_conn *c, Dml__Meta *meta, const void *payload, size_t len,
		  int flags)
{
	struct iovec v = { .iov_base = (void *)payload, .iov_len = len };

	return dml_conn_sendv(c, meta, &v, len ? 1 : 0, flags);
}

int dml_conn_send_error(struct dml_conn *c, uint64_t request_id, int code,
			const char *message)
{
	Dml__Meta m = DML__META__INIT;
	Dml__Error e = DML__ERROR__INIT;

	m.type = DML__MSG_TYPE__ERROR;
	m.request_id = request_id;
	m.sender = c->conf.node_id;
	e.code = code;
	e.message = (char *)(message ? message : dml_strerror(code));
	m.error = &e;
	return dml_conn_send(c, &m, NULL, 0, DML_SEND_COPY);
}

/* ---- teardown ---------------------------------------------------------- */

static void conn_free(struct dml_conn *c)
{
	if (c->ops->on_close)
		c->ops->on_close(c, c->close_err, c->arg);
	bufferevent_free(c->bev);
	event_free(c->resume_ev);
	event_free(c->direct_ev);
	event_free(c->free_ev);
	event_free(c->flush_timer);
	if (c->handshake_timer)
		event_free(c->handshake_timer);
	dml_meta_free(c->meta);
	dml_meta_free(c->peer_meta);
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
	conn_set_state(c, DML_CONN_CLOSING);
	bufferevent_disable(c->bev, EV_READ);
	event_del(c->direct_ev);
	event_del(c->resume_ev);
	if (c->handshake_timer)
		event_del(c->handshake_timer);
}

void dml_conn_close(struct dml_conn *c, int err)
{
	struct timeval tv = { CLOSE_FLUSH_MS / 1000, (CLOSE_FLUSH_MS % 1000) * 1000 };

	if (c->closing)
		return;
	begin_close(c, err);
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
static void fail(struct dml_conn *c, int err, uint64_t request_id)
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
	conn_set_state(c, DML_CONN_READY);
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
static int handle_handshake(struct dml_conn *c, Dml__Meta *meta, int *kept)
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
		if ((rc = send_handshake(c, DML__MSG_TYPE__WELCOME, &welcome)) != 0)
			return rc;
		*kept = 1;
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
	become_ready(c, meta);
	return 0;
}

static void handshake_timeout_cb(evutil_socket_t fd, short what, void *arg)
{
	struct dml_conn *c = arg;

	if (c->state != DML_CONN_READY)
		fail(c, DML_ETIMEDOUT, 0);
}

/* ---- receiving ---------------------------------------------------------- */

/* Hand a complete frame to its consumer; returns 0 or an error (closes). */
static int dispatch(struct dml_conn *c)
{
	Dml__Meta *meta = c->meta;
	int rc, kept = 0;

	c->meta = NULL;
	c->have_meta = 0;
	if (c->state == DML_CONN_READY) {
		rc = c->ops->on_frame(c, meta, c->dest, c->hdr.payload_len, c->arg);
		if (rc == DML_CONN_HOLD) {
			/* Kept whole, payload included, for dml_conn_release. */
			c->meta = meta;
			c->have_meta = 1;
			c->held = 1;
			bufferevent_disable(c->bev, EV_READ);
			return rc;
		}
		dml_meta_free(meta);
	} else {
		rc = handle_handshake(c, meta, &kept);
		if (!kept)
			dml_meta_free(meta);
	}
	c->dest = NULL;
	c->got = 0;
	if (c->trim) {
		free(c->rxbuf);
		c->rxbuf = NULL;
		c->rxcap = 0;
		c->trim = 0;
	}
	return rc;
}

void dml_conn_set_output_wm(struct dml_conn *c, size_t high_wm)
{
	c->conf.output_high_wm = high_wm;
}

void dml_conn_trim(struct dml_conn *c)
{
	c->trim = c->rxbuf != NULL;
}

static int choose_dest(struct dml_conn *c)
{
	size_t len = c->hdr.payload_len;

	c->dest = NULL;
	c->got = 0;
	if (len == 0)
		return 0;
	if (c->state == DML_CONN_READY && c->ops->payload_dest)
		c->dest = c->ops->payload_dest(c, c->meta, c->arg);
	if (c->dest)
		return 0;
	if (c->rxcap < len) {
		/* Payload buffers may be big: failure is an error, not fatal. */
		uint8_t *p = malloc(len);

		if (!p)
			return DML_ENOMEM;
		free(c->rxbuf);
		c->rxbuf = p;
		c->rxcap = len;
	}
	c->dest = c->rxbuf;
	return 0;
}

/* Read the current frame's header and metadata; 1 when more bytes are needed. */
static int read_head(struct dml_conn *c, struct evbuffer *in)
{
	uint8_t raw[DML_FRAME_HEADER_LEN];
	size_t len = evbuffer_get_length(in), need;
	int rc;

	if (len < DML_FRAME_HEADER_LEN) {
		bufferevent_setwatermark(c->bev, EV_READ, DML_FRAME_HEADER_LEN, 0);
		return 1;
	}
	evbuffer_copyout(in, raw, sizeof(raw));
	rc = dml_frame_header_decode(raw, &c->conf.limits, &c->hdr);
	if (rc)
		return rc;
	/* Until the peer is authenticated it may send small handshakes only. */
	if (c->state != DML_CONN_READY &&
	    (c->hdr.payload_len > 0 || c->hdr.meta_len > PREAUTH_MAX_META))
		return DML_ESTATE;
	need = DML_FRAME_HEADER_LEN + c->hdr.meta_len;
	if (len < need) {
		bufferevent_setwatermark(c->bev, EV_READ, need, 0);
		return 1;
	}
	rc = dml_frame_meta_decode(evbuffer_pullup(in, (ev_ssize_t)need) + DML_FRAME_HEADER_LEN,
				   c->hdr.meta_len, &c->hdr, &c->conf.limits, &c->meta);
	if (rc)
		return rc;
	evbuffer_drain(in, need);
	c->bytes_in += need;
	c->have_meta = 1;
	return choose_dest(c);
}

/*
 * While a big payload streams in, ask the kernel not to wake us for every
 * segment: with SO_RCVLOWAT the socket becomes readable only once this much
 * is queued (capped, so the receive buffer need not grow past reason).
 */
static void set_lowat(struct dml_conn *c, size_t remaining)
{
	int want = remaining > DIRECT_LOWAT_MAX ? (int)DIRECT_LOWAT_MAX : (int)remaining;

	if (want < 1)
		want = 1;
	if (want != c->lowat &&
	    setsockopt(c->fd, SOL_SOCKET, SO_RCVLOWAT, &want, sizeof(want)) == 0)
		c->lowat = want;
}

static void direct_read_cb(evutil_socket_t fd, short what, void *arg)
{
	struct dml_conn *c = arg;
	size_t want = c->hdr.payload_len;

	while (c->got < want) {
		ssize_t n = recv(c->fd, c->dest + c->got, want - c->got, MSG_DONTWAIT);

		if (n > 0) {
			c->got += (size_t)n;
			c->bytes_in += (uint64_t)n;
			continue;
		}
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
			set_lowat(c, want - c->got);
			return;
		}
		dml_warn("peer %s: %s", c->peer,
			 n == 0 ? dml_strerror(DML_EFRAME_TRUNC) : strerror(errno));
		dml_conn_abort(c, n == 0 ? DML_EFRAME_TRUNC : DML_ECONN);
		return;
	}
	event_del(c->direct_ev);
	c->direct = 0;
	set_lowat(c, 1);
	if (!c->read_paused && !c->held)
		bufferevent_enable(c->bev, EV_READ);
	process_input(c);
}

/* Write what a batch of frames queued, now rather than on the next loop turn. */
static void uncork(struct dml_conn *c)
{
	struct evbuffer *out = bufferevent_get_output(c->bev);

	c->corked = 0;
	if (!c->closing && evbuffer_get_length(out) > 0)
		(void)evbuffer_write(out, c->fd);
}

static void process_input(struct dml_conn *c)
{
	c->corked = 1;
	process_frames(c);
	uncork(c);
}

static void process_frames(struct dml_conn *c)
{
	struct evbuffer *in = bufferevent_get_input(c->bev);
	int frames = 0, rc;

	while (!c->closing && !c->direct && !c->held) {
		if (!c->have_meta) {
			rc = read_head(c, in);
			if (rc == 1)
				return;
			if (rc) {
				fail(c, rc, c->meta ? c->meta->request_id : 0);
				return;
			}
		}
		if (c->got < c->hdr.payload_len) {
			size_t left = c->hdr.payload_len - c->got;
			size_t take = evbuffer_get_length(in);

			if (take > left)
				take = left;
			evbuffer_remove(in, c->dest + c->got, take);
			c->got += take;
			c->bytes_in += take;
			left -= take;
			if (left >= DIRECT_READ_MIN) {
				c->direct = 1;
				set_lowat(c, left);
				bufferevent_disable(c->bev, EV_READ);
				event_add(c->direct_ev, NULL);
				return;
			}
			if (left > 0) {
				bufferevent_setwatermark(c->bev, EV_READ, left, 0);
				return;
			}
		}
		bufferevent_setwatermark(c->bev, EV_READ, 0, 0);
		rc = dispatch(c);
		if (rc == DML_CONN_HOLD)
			return;
		if (rc) {
			fail(c, rc, 0);
			return;
		}
		if (++frames >= DML_CONN_FRAMES_PER_WAKE && evbuffer_get_length(in) > 0) {
			event_active(c->resume_ev, EV_TIMEOUT, 0);
			return;
		}
	}
}

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
	process_input(arg);
}

static void read_cb(struct bufferevent *bev, void *arg)
{
	process_input(arg);
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

static void start_handshake(struct dml_conn *c)
{
	conn_set_state(c, DML_CONN_HANDSHAKE);
	describe_peer(c);
	set_nodelay(c->fd);
	if (c->acceptor) {
		Dml__Handshake ch = DML__HANDSHAKE__INIT;

		ch.nonce.data = c->my_nonce;
		ch.nonce.len = DML_NONCE_LEN;
		if (send_handshake(c, DML__MSG_TYPE__CHALLENGE, &ch) != 0)
			fail(c, DML_ENOMEM, 0);
	}
}

static void event_cb(struct bufferevent *bev, short what, void *arg)
{
	struct dml_conn *c = arg;
	int err;

	if (what & BEV_EVENT_CONNECTED) {
		c->fd = bufferevent_getfd(bev);
		start_handshake(c);
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
	if (!c->bev) {
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

		c->handshake_timer = evtimer_new(base, handshake_timeout_cb, c);
		evtimer_add(c->handshake_timer, &tv);
	}
	*out = c;
	return 0;
}

/* The direct-read event needs the final fd, known only once connected. */
static void arm_direct(struct dml_conn *c)
{
	c->direct_ev = event_new(c->base, c->fd, EV_READ | EV_PERSIST, direct_read_cb, c);
}

int dml_conn_accept(struct event_base *base, int fd, const struct dml_conn_conf *conf,
		    const struct dml_conn_ops *ops, void *arg, struct dml_conn **out)
{
	struct dml_conn *c;
	int rc;

	evutil_make_socket_nonblocking(fd);
	rc = conn_new(base, fd, conf, ops, arg, &c);
	if (rc) {
		close(fd);
		return rc;
	}
	c->acceptor = 1;
	arm_direct(c);
	bufferevent_enable(c->bev, EV_READ | EV_WRITE);
	start_handshake(c);
	*out = c;
	return 0;
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

const Dml__Handshake *dml_conn_peer_hello(const struct dml_conn *c)
{
	return c->peer_meta ? c->peer_meta->handshake : NULL;
}

size_t dml_conn_output_pending(const struct dml_conn *c)
{
	return evbuffer_get_length(bufferevent_get_output(c->bev));
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
