/*
 * The receive path of the connection layer (conn.h): frame heads checked
 * against the limits before anything is allocated, payloads read into their
 * destination (large ones straight from the socket), dispatch to the owner,
 * a cap on frames per wake-up and holding frames for backpressure.
 *
 * Must never allocate from a length the peer sent before frame.h checked it.
 */
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
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

/* Most a direct read asks the kernel to gather before waking us. */
#define DIRECT_LOWAT_MAX (512u * 1024)
/* Room behind a payload read straight into place for what follows it. */
#define TRAIL_BYTES 4096
/* Most one read of ours takes from the socket into the input buffer. */
#define READ_AHEAD_MAX (64u * 1024)
/*
 * Past this many bytes handled in a wake-up, no more are read from the
 * socket until the next (but for the rest of a payload under way). What one
 * wake-up hands the owner is what a server commits together: a window of
 * eight 64 KiB pushes in one commit, while a commit stays small beside its
 * store's map.
 */
#define WAKE_BYTES (512u * 1024)
/* Largest metadata an unauthenticated peer may send. */
#define PREAUTH_MAX_META 4096

static void process_frames(struct dml_conn *c);

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
		dml_conn_ring_done(c);
		dml_meta_free(meta);
	} else {
		rc = dml_conn_handle_handshake(c, meta, &kept);
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
	if (c->ring_frame)
		return dml_conn_ring_payload(c);
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
	dml_conn_ring_flagged(c, raw);
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

/* Whether this wake-up may read past what it handled so far, and n more. */
static int wake_has_room(const struct dml_conn *c, size_t n)
{
	return c->bytes_in - c->wake_in0 + n < WAKE_BYTES;
}

/*
 * Read the rest of the current payload straight from the socket into its
 * destination and, while the wake-up has room, in the same read up to
 * TRAIL_BYTES of what follows it into the input buffer: the next frame's
 * head costs no read of its own. 1 when the payload is all there, 0 when the
 * socket ran dry (the kernel asked to wake us once more of it is queued), -1
 * when the connection failed (aborted).
 */
static int direct_read(struct dml_conn *c)
{
	struct evbuffer *in = bufferevent_get_input(c->bev);
	size_t want = c->hdr.payload_len;

	while (c->got < want) {
		size_t left = want - c->got;
		struct evbuffer_iovec trail = { 0 };
		struct iovec v[2] = { { c->dest + c->got, left } };
		struct msghdr msg = { .msg_iov = v, .msg_iovlen = 1 };
		ssize_t n;
		int err;

		/* bufferevent keeps the end of its input frozen but for its reads. */
		evbuffer_unfreeze(in, 0);
		if (wake_has_room(c, left) && evbuffer_reserve_space(in, TRAIL_BYTES, &trail, 1) == 1) {
			v[1].iov_base = trail.iov_base;
			v[1].iov_len = trail.iov_len < TRAIL_BYTES ? trail.iov_len : TRAIL_BYTES;
			msg.msg_iovlen = 2;
		}
		n = recvmsg(c->fd, &msg, MSG_DONTWAIT);
		err = errno;
		c->sock_hint = n < (ssize_t)(left + v[1].iov_len) ? -1 : n > (ssize_t)left;
		if (n > (ssize_t)left) {
			trail.iov_len = (size_t)n - left;
			evbuffer_commit_space(in, &trail, 1);
			n = (ssize_t)left;
		} else if (msg.msg_iovlen == 2) {
			evbuffer_commit_space(in, &trail, 0);
		}
		evbuffer_freeze(in, 0);
		if (n > 0) {
			c->got += (size_t)n;
			c->bytes_in += (uint64_t)n;
			c->direct_bytes += (uint64_t)n;
			continue;
		}
		if (n < 0 && (err == EAGAIN || err == EWOULDBLOCK || err == EINTR)) {
			set_lowat(c, want - c->got);
			return 0;
		}
		dml_warn("peer %s: %s", c->peer,
			 n == 0 ? dml_strerror(DML_EFRAME_TRUNC) : strerror(err));
		dml_conn_abort(c, n == 0 ? DML_EFRAME_TRUNC : DML_ECONN);
		return -1;
	}
	set_lowat(c, 1);
	return 1;
}

/*
 * libevent 2.1 reads at most 4 KiB per wake-up (EVBUFFER_MAX_READ), so a
 * 16 KiB request took four turns of the loop, each an epoll_wait, an ioctl
 * and a readv. When the input buffer runs dry in the middle of the frames,
 * take what the socket holds (up to READ_AHEAD_MAX) in one read of ours,
 * unless the last read showed it empty, the wake-up has no room left, or the
 * peer is paused. 1 when bytes came; 0 when none did: the loop then waits
 * for them, and an end of stream or an error is left to the bufferevent,
 * which sees it on its next read. Frames a peer sent together are so
 * handled together, and a server's group commit covers them all.
 */
static int read_ahead(struct dml_conn *c, struct evbuffer *in, int frames)
{
	struct evbuffer_iovec v[2];
	struct iovec iov[2];
	size_t room = 0;
	ssize_t n;
	int nv, rc;

	if (c->sock_hint < 0 || c->read_paused || c->closing || c->fd < 0 ||
	    frames >= DML_CONN_FRAMES_PER_WAKE || !wake_has_room(c, 0))
		return 0;
	/* The bufferevent keeps its input's end frozen but while it reads. */
	evbuffer_unfreeze(in, 0);
	nv = evbuffer_reserve_space(in, READ_AHEAD_MAX, v, 2);
	if (nv <= 0) {
		evbuffer_freeze(in, 0);
		return 0;
	}
	for (int i = 0; i < nv; i++) {
		iov[i].iov_base = v[i].iov_base;
		iov[i].iov_len = v[i].iov_len;
		room += v[i].iov_len;
	}
	do
		n = readv(c->fd, iov, nv);
	while (n < 0 && errno == EINTR);
	c->sock_hint = n < (ssize_t)room ? -1 : 1;
	for (int i = 0; i < nv; i++) {
		size_t take = n <= 0 ? 0 : (size_t)n < v[i].iov_len ? (size_t)n : v[i].iov_len;

		v[i].iov_len = take;
		n -= (ssize_t)take;
	}
	rc = evbuffer_commit_space(in, v, nv);
	evbuffer_freeze(in, 0);
	return rc == 0 && v[0].iov_len > 0;
}

static void handle_input(struct dml_conn *c);

void dml_conn_direct_read_cb(evutil_socket_t fd, short what, void *arg)
{
	struct dml_conn *c = arg;

	c->wake_in0 = c->bytes_in;
	if (direct_read(c) <= 0)
		return;
	event_del(c->direct_ev);
	c->direct = 0;
	if (!c->read_paused && !c->held)
		bufferevent_enable(c->bev, EV_READ);
	handle_input(c);
}

/*
 * A large payload (DIRECT_READ_MIN or more, counted whole: what came with its
 * head does not make it small) is read on straight from the socket, at once
 * when the socket likely holds it, then whenever it is readable (SO_RCVLOWAT:
 * once the rest is queued), the bufferevent's reading off meanwhile. 1 when
 * the payload is complete, 0 when it is still coming, -1 when the connection
 * failed.
 */
static int start_direct(struct dml_conn *c)
{
	int rc;

	/* Unless the last read suggests the socket holds more, wait for the
	 * kernel to gather the payload instead of reading it piecemeal. */
	if (c->sock_hint > 0 && wake_has_room(c, 0)) {
		if ((rc = direct_read(c)) != 0)
			return rc;
	} else {
		set_lowat(c, c->hdr.payload_len - c->got);
	}
	c->direct = 1;
	bufferevent_disable(c->bev, EV_READ);
	event_add(c->direct_ev, NULL);
	return 0;
}

/* Write what a batch of frames queued, now rather than on the next loop turn. */
static void uncork(struct dml_conn *c)
{
	c->corked = 0;
	dml_conn_cork_flush(c, 1);
}

static void handle_input(struct dml_conn *c)
{
	c->corked = 1;
	process_frames(c);
	/* What the socket holds is known only within a wake-up. */
	c->sock_hint = 0;
	uncork(c);
}

void dml_conn_process_input(struct dml_conn *c)
{
	c->wake_in0 = c->bytes_in;
	handle_input(c);
}

/*
 * The payload of the current frame: what the input buffer holds, then a
 * large one straight from the socket. 1 when complete, 0 when more must come
 * (the caller returns), -1 when the connection failed.
 */
static int read_payload(struct dml_conn *c, struct evbuffer *in, int frames)
{
	size_t left = c->hdr.payload_len - c->got;
	size_t take = evbuffer_get_length(in);

	if (take > left)
		take = left;
	evbuffer_remove(in, c->dest + c->got, take);
	c->got += take;
	c->bytes_in += take;
	left -= take;
	if (left == 0)
		return 1;
	if (c->hdr.payload_len >= DIRECT_READ_MIN)
		return start_direct(c);
	if (read_ahead(c, in, frames))
		return read_payload(c, in, frames);
	bufferevent_setwatermark(c->bev, EV_READ, left, 0);
	return 0;
}

static void process_frames(struct dml_conn *c)
{
	struct evbuffer *in = bufferevent_get_input(c->bev);
	int frames = 0, rc;

	while (!c->closing && !c->direct && !c->held) {
		if (!c->have_meta) {
			rc = read_head(c, in);
			if (rc == 1 && read_ahead(c, in, frames))
				continue;
			if (rc == 1)
				return;
			if (rc) {
				dml_conn_fail(c, rc, c->meta ? c->meta->request_id : 0);
				return;
			}
		}
		if (c->got < c->hdr.payload_len && read_payload(c, in, frames) != 1)
			return;
		bufferevent_setwatermark(c->bev, EV_READ, 0, 0);
		rc = dispatch(c);
		if (rc == DML_CONN_HOLD)
			return;
		if (rc) {
			dml_conn_fail(c, rc, 0);
			return;
		}
		if (++frames >= DML_CONN_FRAMES_PER_WAKE && evbuffer_get_length(in) > 0) {
			event_active(c->resume_ev, EV_TIMEOUT, 0);
			return;
		}
	}
}
