/*
 * The connection layer's shared-memory rings (shm_ring.h) on Unix
 * connections: the acceptor offers them in its CHALLENGE, the connector
 * passes a memfd in a prelude byte before its HELLO, the acceptor's WELCOME
 * says it mapped it, and from then on large payloads go through the rings.
 *
 * Either end may decline at any step (an older peer, memfd unavailable, a
 * bad file): the connection then carries every payload on the socket.
 */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <event2/bufferevent.h>
#include <event2/event.h>

#include "proto/conn.h"
#include "proto/conn_internal.h"
#include "proto/dml_error.h"
#include "proto/log.h"
#include "proto/shm_ring.h"
#include "proto/util.h"

/* The acceptor's socket is readable: take the prelude, if one comes first,
 * before the bufferevent reads the HELLO behind it. */
static void prelude_cb(evutil_socket_t fd, short what, void *arg)
{
	struct dml_conn *c = arg;
	char why[128];
	int memfd, rc = dml_shm_recv_prelude(c->fd, &memfd);

	if (rc == -1) {
		event_add(c->prelude_ev, NULL);
		return;
	}
	if (rc == 1 && memfd < 0)
		dml_warn("peer %s: ring prelude without exactly one memory file; "
			 "payloads go over the socket", c->peer);
	else if (rc == 1 && dml_shm_attach(memfd, &c->shm, why, sizeof(why)) != 0)
		dml_warn("peer %s: its ring is refused (%s); payloads go over the socket",
			 c->peer, why);
	if (memfd >= 0)
		close(memfd);
	/* Whatever came instead (a HELLO, the end of the stream, an error)
	 * is the bufferevent's to read. */
	if (!c->closing && !c->read_paused)
		bufferevent_enable(c->bev, EV_READ);
}

int dml_conn_ring_offer(struct dml_conn *c)
{
	if (!c->local)
		return 0;
	c->prelude_ev = event_new(c->base, c->fd, EV_READ, prelude_cb, c);
	if (!c->prelude_ev)
		return 0;
	bufferevent_disable(c->bev, EV_READ);
	event_add(c->prelude_ev, NULL);
	return 1;
}

void dml_conn_ring_pass(struct dml_conn *c)
{
	int memfd;

	/* The prelude must be the first byte this end sends. */
	if (!c->local || c->shm.map || dml_conn_output_pending(c) != 0)
		return;
	if (dml_shm_create(DML_SHM_RING_BYTES, &c->shm, &memfd) != 0)
		return;
	if (dml_shm_send_prelude(c->fd, memfd) != 0) {
		dml_debug("conn %s: ring prelude not sent; payloads go over the socket", c->peer);
		dml_shm_close(&c->shm);
	}
	close(memfd);
}

void dml_conn_ring_start(struct dml_conn *c, int peer_ring)
{
	if (!c->shm.map)
		return;
	if (!peer_ring) {
		dml_shm_close(&c->shm);
		return;
	}
	dml_shm_ends(&c->shm, c->acceptor, &c->ring_tx, &c->ring_rx);
	c->ring_on = 1;
	dml_debug("conn %s: payloads of %u bytes and more through rings of %zu bytes",
		  c->peer, DML_SHM_MIN_PAYLOAD, c->shm.ring);
}

void dml_conn_ring_flagged(struct dml_conn *c, uint8_t *raw)
{
	c->ring_frame = 0;
	if (c->ring_on && dml_load_le16(raw + 6) == DML_FRAME_FLAG_RING) {
		dml_store_le16(raw + 6, 0);
		c->ring_frame = 1;
	}
}

int dml_conn_ring_payload(struct dml_conn *c)
{
	size_t len = c->hdr.payload_len;
	const uint8_t *p = len ? dml_shm_rx_payload(&c->ring_rx, c->meta->ring_offset, len) : NULL;
	void *dest = NULL;

	if (!p) {
		dml_warn("peer %s: a ring payload of %zu bytes at offset %llu lies outside "
			 "its ring of %zu bytes", c->peer, len,
			 (unsigned long long)c->meta->ring_offset, c->ring_rx.size);
		return DML_EFRAME_LENGTH;
	}
	if (c->ops->payload_dest)
		dest = c->ops->payload_dest(c, c->meta, c->arg);
	if (dest) {
		memcpy(dest, p, len);
		c->dest = dest;
	} else {
		/* Handed over in place: the owner reads the sender's copy. */
		c->dest = (uint8_t *)p;
	}
	c->got = len;
	c->ring_end = c->meta->ring_end;
	c->bytes_in += len;
	c->ring_bytes += len;
	return 0;
}

void dml_conn_ring_done(struct dml_conn *c)
{
	if (!c->ring_frame)
		return;
	dml_shm_rx_release(&c->ring_rx, c->ring_end);
	c->ring_frame = 0;
}

int dml_conn_ring_put(struct dml_conn *c, Dml__Meta *meta, const struct iovec *iov,
		      int iovcnt, size_t len)
{
	uint64_t offset, end;
	uint8_t *dst;

	if (!c->ring_on || len < DML_SHM_MIN_PAYLOAD)
		return 0;
	dst = dml_shm_tx_reserve(&c->ring_tx, len, &offset, &end);
	if (!dst)
		return 0;
	for (int i = 0; i < iovcnt; i++) {
		memcpy(dst, iov[i].iov_base, iov[i].iov_len);
		dst += iov[i].iov_len;
	}
	meta->ring_offset = offset;
	meta->ring_end = end;
	c->ring_bytes += len;
	return 1;
}

void dml_conn_ring_free(struct dml_conn *c)
{
	if (c->prelude_ev) {
		event_free(c->prelude_ev);
		c->prelude_ev = NULL;
	}
	dml_shm_close(&c->shm);
	c->ring_on = 0;
}
