/*
 * The send path of the connection layer (conn.h): frames built from a
 * message and payload pieces, copied or referenced (pinned) into the
 * bufferevent's output (or, while a batch of input is handled, into the
 * cork that leaves in one write at its end), and error replies.
 *
 * Must never block, or write to a connection that is closing.
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
#include "proto/log.h"
#include "proto/util.h"

#define HEAD_STACK_BYTES 512

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

/* The peer does not read its replies: stop reading its requests. */
static void check_backpressure(struct dml_conn *c)
{
	if (!c->read_paused && dml_conn_output_pending(c) > c->conf.output_high_wm) {
		c->read_paused = 1;
		bufferevent_disable(c->bev, EV_READ);
		bufferevent_setwatermark(c->bev, EV_WRITE, c->conf.output_high_wm / 2, 0);
	}
}

void dml_conn_cork_flush(struct dml_conn *c, int write)
{
	struct evbuffer *out = bufferevent_get_output(c->bev);

	if (write && !c->closing) {
		if (evbuffer_get_length(out) > 0) {
			/* The bufferevent keeps its output's front frozen but
			 * while it writes; evbuffer_write fails on a frozen front. */
			evbuffer_unfreeze(out, 1);
			(void)evbuffer_write(out, c->fd);
			evbuffer_freeze(out, 1);
		}
		if (evbuffer_get_length(out) == 0 && evbuffer_get_length(c->cork) > 0)
			(void)evbuffer_write(c->cork, c->fd);
	}
	if (evbuffer_get_length(c->cork) > 0) {
		/* Moves the chains, pinned ones too; the bufferevent arms its
		 * write event for them. */
		(void)evbuffer_add_buffer(out, c->cork);
		check_backpressure(c);
	}
	/* Paused by what the cork held: with no write event armed for it,
	 * the write callback that resumes reading must be run from here. */
	if (c->read_paused && !c->closing)
		bufferevent_trigger(c->bev, EV_WRITE, 0);
}

static int send_frame(struct dml_conn *c, Dml__Meta *meta, const struct iovec *iov,
		      int iovcnt, int flags, const struct pin_release *pin)
{
	int pinned = 0;   /* a reference now owns the release */
	struct evbuffer *out = bufferevent_get_output(c->bev);
	/* While a batch is handled, frames gather in the cork unless output
	 * is already waiting (they must follow it). */
	struct evbuffer *q = c->corked && evbuffer_get_length(out) == 0 ? c->cork : out;
	uint8_t stack_head[HEAD_STACK_BYTES];
	uint8_t *head = stack_head;
	size_t head_cap, head_len, payload = 0, wire, done = 0;
	int rc = 0, ring, niov;

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
	/* A large payload goes through the shared-memory ring when there is
	 * one with room: copied there now, and the frame on the wire is its
	 * head alone. */
	ring = c->state == DML_CONN_READY && dml_conn_ring_put(c, meta, iov, iovcnt, payload);
	head_cap = dml_frame_head_size(meta);
	if (head_cap > sizeof(stack_head))
		head = dml_xmalloc(head_cap);
	head_len = dml_frame_encode_head(meta, (uint32_t)payload, head, head_cap);
	if (ring) {
		meta->ring_offset = 0;
		meta->ring_end = 0;
		dml_store_le16(head + 6, DML_FRAME_FLAG_RING);
	}
	wire = ring ? 0 : payload;
	niov = ring ? 0 : iovcnt;
	if (head_len == 0) {
		rc = DML_EINVAL;
		goto out;
	}

	/*
	 * Fast path: nothing queued, so write straight from the caller's memory.
	 * While a batch of input is handled, small frames are queued in the
	 * cork instead and leave in one write at the end of the batch
	 * (dml_conn_cork_flush).
	 */
	if (c->state != DML_CONN_CONNECTING && evbuffer_get_length(out) == 0 &&
	    evbuffer_get_length(c->cork) == 0 && (!c->corked || wire >= DIRECT_READ_MIN)) {
		struct iovec v[9];
		struct msghdr msg = { .msg_iov = v };
		ssize_t n;

		if (niov <= 8) {
			v[0].iov_base = head;
			v[0].iov_len = head_len;
			memcpy(&v[1], iov, sizeof(*iov) * (size_t)niov);
			msg.msg_iovlen = (size_t)niov + 1;
			n = sendmsg(c->fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
			if (n > 0)
				done = (size_t)n;
		}
	}

	/* Queue whatever the socket did not take. */
	if (done < head_len && evbuffer_add(q, head + done, head_len - done) != 0) {
		rc = DML_ENOMEM;
		goto out;
	}
	done = done > head_len ? done - head_len : 0;
	for (int i = 0; i < niov; i++) {
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
		if (pin && i == niov - 1) {
			r = evbuffer_add_reference(q, p, len, pin->fn, pin->token);
			pinned = r == 0;
		} else if (flags & DML_SEND_REF) {
			r = evbuffer_add_reference(q, p, len, NULL, NULL);
		} else {
			r = evbuffer_add(q, p, len);
		}
		if (r != 0) {
			rc = DML_ENOMEM;
			goto out;
		}
	}
	c->bytes_out += head_len + payload;
	check_backpressure(c);
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

int dml_conn_send_plain(struct dml_conn *c, Dml__MsgType type, uint64_t request_id)
{
	Dml__Meta m = DML__META__INIT;

	m.type = type;
	m.request_id = request_id;
	m.sender = c->conf.node_id;
	return dml_conn_send(c, &m, NULL, 0, DML_SEND_COPY);
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

void dml_conn_error_vformat(const struct dml_conn *c, uint64_t request_id, char *msg,
			    size_t len, const char *fmt, va_list ap)
{
	vsnprintf(msg, len, fmt, ap);
	dml_debug("peer %s: request %llu: %s", dml_conn_peer(c),
		  (unsigned long long)request_id, msg);
}
