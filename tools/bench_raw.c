/*
 * The raw-TCP baseline of dml-bench: what plain blocking sockets on the
 * loopback achieve for the same bytes, window and timing as a libdml push or
 * pull, so that the dml figures can be read as a fraction of it.
 *
 * Protocol (private to this file, both ends in this process): a request is a
 * 16-byte header (magic, request bytes, reply bytes, zero) and the request
 * bytes; the serving thread reads them all into its buffer and answers with
 * the reply bytes (an 8-byte ack for a push, the values for a pull), reading
 * on while a reply waits for room in the socket.
 *
 * It must never do more work per request than a real transport has to (no
 * copies, no per-request allocation), or the baseline flatters dml; and it
 * must never depend on libdml.
 */
#include <errno.h>
#include <poll.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "tools/bench.h"
#include "proto/dml_error.h"
#include "proto/log.h"
#include "proto/util.h"

#define RAW_MAGIC 0x52424d44u /* bytes 'D' 'M' 'B' 'R' */
#define RAW_HDR_LEN 16

/*
 * The bytes every connection moves, shared by all of them: nobody looks at
 * their contents, so one buffer serves 256 connections of 16 MiB requests
 * as well as one.
 */
struct raw_bufs {
	uint8_t *req;   /* req_bytes of filler, sent after each header */
	uint8_t *reply; /* the clients read every reply into it */
	uint8_t *sink;  /* the serving ends read requests into it and reply from it */
	size_t sink_len;
};

/* The client end of one connection: a bench_driver context. */
struct raw_client {
	int fd;
	uint8_t hdr[RAW_HDR_LEN];
	const struct raw_bufs *bufs;
	uint32_t req_bytes, reply_bytes;
};

/* The serving end of one connection and its thread. */
struct raw_server {
	int fd;
	pthread_t tid;
	int started;
	int rc;
	const struct raw_bufs *bufs;
	uint8_t hdr[RAW_HDR_LEN];     /* the request header being read */
	size_t hdr_got;
	size_t body_left;             /* request bytes still to read after it */
	uint64_t owed;                /* reply bytes owed to the client */
};

/* 0, or DML_ECONN when the peer closed before len bytes, DML_EIO on error. */
static int raw_read_full(int fd, void *buf, size_t len)
{
	uint8_t *p = buf;

	while (len > 0) {
		ssize_t got = recv(fd, p, len, MSG_WAITALL);

		if (got < 0 && errno == EINTR)
			continue;
		if (got < 0)
			return errno == ECONNRESET ? DML_ECONN : DML_EIO;
		if (got == 0)
			return DML_ECONN;
		p += got;
		len -= (size_t)got;
	}
	return 0;
}

/* Send every byte of iov[0..n) (modified on the way); 0, DML_ECONN or DML_EIO. */
static int raw_write_full(int fd, struct iovec *iov, int n)
{
	struct msghdr msg = { .msg_iov = iov, .msg_iovlen = (size_t)n };

	while (msg.msg_iovlen > 0) {
		ssize_t put = sendmsg(fd, &msg, MSG_NOSIGNAL);
		size_t left;

		if (put < 0 && errno == EINTR)
			continue;
		if (put < 0 && (errno == EPIPE || errno == ECONNRESET))
			return DML_ECONN;
		if (put < 0)
			return DML_EIO;
		left = (size_t)put;
		while (msg.msg_iovlen > 0 && left >= msg.msg_iov->iov_len) {
			left -= msg.msg_iov->iov_len;
			msg.msg_iov++;
			msg.msg_iovlen--;
		}
		if (msg.msg_iovlen > 0) {
			msg.msg_iov->iov_base = (uint8_t *)msg.msg_iov->iov_base + left;
			msg.msg_iov->iov_len -= left;
		}
	}
	return 0;
}

/*
 * Read the request stream: with block set, to the end of the next request;
 * otherwise what the socket holds now. Each whole header adds its reply to
 * what is owed. 0, DML_ECLOSED at a clean end of stream, or an error.
 */
static int raw_take(struct raw_server *s, int block)
{
	for (;;) {
		int head = s->body_left == 0;
		uint8_t *dst = head ? s->hdr + s->hdr_got : s->bufs->sink;
		size_t want = head ? RAW_HDR_LEN - s->hdr_got
				   : s->body_left < s->bufs->sink_len ? s->body_left
								      : s->bufs->sink_len;
		ssize_t got = recv(s->fd, dst, want, block ? MSG_WAITALL : MSG_DONTWAIT);
		uint32_t req, reply;

		if (got < 0 && errno == EINTR)
			continue;
		if (got < 0 && !block && (errno == EAGAIN || errno == EWOULDBLOCK))
			return 0;
		if (got < 0)
			return errno == ECONNRESET ? DML_ECONN : DML_EIO;
		if (got == 0)
			return head && s->hdr_got == 0 ? DML_ECLOSED : DML_ECONN;
		if (!head) {
			s->body_left -= (size_t)got;
			if (s->body_left == 0 && block)
				return 0;
			continue;
		}
		s->hdr_got += (size_t)got;
		if (s->hdr_got < RAW_HDR_LEN)
			continue;
		s->hdr_got = 0;
		req = dml_load_le32(s->hdr + 4);
		reply = dml_load_le32(s->hdr + 8);
		if (dml_load_le32(s->hdr) != RAW_MAGIC || req > s->bufs->sink_len || reply == 0 ||
		    reply > s->bufs->sink_len)
			return DML_EINVAL;
		s->owed += reply;
		s->body_left = req;
		if (req == 0 && block)
			return 0;
	}
}

/*
 * Send the replies owed. When the socket takes no more, the client may be
 * blocked sending requests rather than reading: read those meanwhile, or a
 * window of requests and replies larger than the socket buffers (a sparse
 * pull over a Unix socket) leaves both ends waiting on each other for good.
 */
static int raw_pay(struct raw_server *s)
{
	while (s->owed > 0) {
		size_t len = s->owed < s->bufs->sink_len ? s->owed : s->bufs->sink_len;
		ssize_t put = send(s->fd, s->bufs->sink, len, MSG_NOSIGNAL | MSG_DONTWAIT);
		struct pollfd p = { .fd = s->fd, .events = POLLIN | POLLOUT };
		int rc;

		if (put > 0) {
			s->owed -= (size_t)put;
			continue;
		}
		if (put < 0 && errno == EINTR)
			continue;
		if (put < 0 && errno != EAGAIN && errno != EWOULDBLOCK)
			return errno == EPIPE || errno == ECONNRESET ? DML_ECONN : DML_EIO;
		if (poll(&p, 1, -1) < 0 && errno != EINTR)
			return DML_EIO;
		if ((p.revents & (POLLIN | POLLHUP | POLLERR)) && (rc = raw_take(s, 0)) != 0)
			return rc;
	}
	return 0;
}

/* One request's worth of service; DML_ECLOSED at a clean end of stream. */
static int raw_serve_one(struct raw_server *s)
{
	int rc;

	if (s->owed == 0 && (rc = raw_take(s, 1)) != 0)
		return rc;
	return raw_pay(s);
}

static void *raw_server_main(void *arg)
{
	struct raw_server *s = arg;
	int rc;

	while ((rc = raw_serve_one(s)) == 0)
		;
	s->rc = rc == DML_ECLOSED ? 0 : rc;
	/* Wake a client still blocked on this connection. */
	shutdown(s->fd, SHUT_RDWR);
	return NULL;
}

static int raw_submit(void *ctx, unsigned slot)
{
	struct raw_client *c = ctx;
	struct iovec iov[2] = {
		{ .iov_base = c->hdr, .iov_len = sizeof(c->hdr) },
		{ .iov_base = c->bufs->req, .iov_len = c->req_bytes },
	};

	return raw_write_full(c->fd, iov, c->req_bytes ? 2 : 1);
}

static int raw_complete(void *ctx, unsigned slot)
{
	struct raw_client *c = ctx;

	return raw_read_full(c->fd, c->bufs->reply, c->reply_bytes);
}

static int raw_nodelay(int fd)
{
	int one = 1;

	return setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)) ? DML_EIO : 0;
}

/* A listening socket on 127.0.0.1 with a kernel-chosen port. */
static int raw_listen(unsigned backlog, int *lfd, struct sockaddr_in *addr)
{
	socklen_t alen = sizeof(*addr);
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	if (fd < 0)
		return DML_EIO;
	memset(addr, 0, sizeof(*addr));
	addr->sin_family = AF_INET;
	addr->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (bind(fd, (struct sockaddr *)addr, sizeof(*addr)) ||
	    listen(fd, (int)backlog) ||
	    getsockname(fd, (struct sockaddr *)addr, &alen)) {
		close(fd);
		return DML_EIO;
	}
	*lfd = fd;
	return 0;
}

/* Connect a client to the listener and accept its serving end. */
static int raw_pair(int lfd, const struct sockaddr_in *addr, int *cfd, int *sfd)
{
	int c = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), s = -1;

	if (c < 0)
		return DML_EIO;
	/* Loopback connect completes from the backlog before accept(). */
	if (connect(c, (const struct sockaddr *)addr, sizeof(*addr)) == 0)
		s = accept(lfd, NULL, NULL);
	if (s < 0 || raw_nodelay(c) || raw_nodelay(s)) {
		dml_err("raw baseline: loopback connection: %s", strerror(errno));
		close(c);
		if (s >= 0)
			close(s);
		return DML_ECONN;
	}
	*cfd = c;
	*sfd = s;
	return 0;
}

/* The same over a Unix socket pair: what the same-host transport compares with. */
static int raw_pair_unix(int *cfd, int *sfd)
{
	int fds[2];

	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0) {
		dml_err("raw baseline: Unix socket pair: %s", strerror(errno));
		return DML_ECONN;
	}
	*cfd = fds[0];
	*sfd = fds[1];
	return 0;
}

/* The shared buffers of a run, every page touched so that page faults do
 * not land in the timing. */
static int raw_bufs_init(struct raw_bufs *b, const struct bench_raw_shape *shape)
{
	b->sink_len = shape->req_bytes > shape->reply_bytes ? shape->req_bytes
							      : shape->reply_bytes;
	b->req = malloc(shape->req_bytes ? shape->req_bytes : 1);
	b->reply = malloc(shape->reply_bytes);
	b->sink = malloc(b->sink_len);
	if (!b->req || !b->reply || !b->sink)
		return DML_ENOMEM;
	memset(b->req, 0x3c, shape->req_bytes);
	memset(b->reply, 0, shape->reply_bytes);
	memset(b->sink, 0, b->sink_len);
	return 0;
}

static void raw_bufs_free(struct raw_bufs *b)
{
	free(b->req);
	free(b->reply);
	free(b->sink);
}

static void raw_client_init(struct raw_client *c, const struct bench_raw_shape *shape,
			    const struct raw_bufs *bufs)
{
	c->bufs = bufs;
	c->req_bytes = shape->req_bytes;
	c->reply_bytes = shape->reply_bytes;
	dml_store_le32(c->hdr, RAW_MAGIC);
	dml_store_le32(c->hdr + 4, shape->req_bytes);
	dml_store_le32(c->hdr + 8, shape->reply_bytes);
}

/* Close clients first so serving threads see end of stream, then join them. */
static int raw_teardown(struct raw_client *cl, struct raw_server *sv, unsigned conns)
{
	int rc = 0;

	for (unsigned i = 0; i < conns; i++)
		if (cl[i].fd >= 0)
			close(cl[i].fd);
	for (unsigned i = 0; i < conns; i++) {
		if (sv[i].started)
			pthread_join(sv[i].tid, NULL);
		if (sv[i].fd >= 0)
			close(sv[i].fd);
		if (sv[i].started && sv[i].rc && !rc)
			rc = sv[i].rc;
	}
	return rc;
}

int bench_raw_run(const struct bench_raw_shape *shape, unsigned conns, unsigned threads,
		  unsigned window, const struct bench_plan *plan, uint64_t value_bytes,
		  struct bench_result *res)
{
	struct raw_client *cl;
	struct raw_server *sv;
	struct bench_driver *drv;
	struct raw_bufs bufs = { 0 };
	struct sockaddr_in addr;
	int lfd = -1, rc, trc;

	if (!shape || !plan || !res || conns == 0 || window == 0 ||
	    shape->reply_bytes == 0 || shape->req_bytes > BENCH_RAW_MAX_LEN ||
	    shape->reply_bytes > BENCH_RAW_MAX_LEN)
		return DML_EINVAL;
	cl = dml_xcalloc(conns, sizeof(*cl));
	sv = dml_xcalloc(conns, sizeof(*sv));
	drv = dml_xcalloc(conns, sizeof(*drv));
	for (unsigned i = 0; i < conns; i++) {
		cl[i].fd = -1;
		sv[i].fd = -1;
		sv[i].bufs = &bufs;
	}
	rc = raw_bufs_init(&bufs, shape);
	if (rc == 0 && !shape->unix_socket)
		rc = raw_listen(conns, &lfd, &addr);
	for (unsigned i = 0; i < conns && rc == 0; i++) {
		raw_client_init(&cl[i], shape, &bufs);
		rc = shape->unix_socket ? raw_pair_unix(&cl[i].fd, &sv[i].fd)
					: raw_pair(lfd, &addr, &cl[i].fd, &sv[i].fd);
		if (rc == 0 && pthread_create(&sv[i].tid, NULL, raw_server_main, &sv[i]))
			rc = DML_EIO;
		sv[i].started = rc == 0;
		drv[i] = (struct bench_driver){ &cl[i], raw_submit, raw_complete };
	}
	if (lfd >= 0)
		close(lfd);
	if (rc == 0)
		rc = bench_run_drivers(drv, conns, threads, window, plan, value_bytes, res);
	else
		dml_err("raw baseline: setup failed: %s", dml_strerror(rc));
	trc = raw_teardown(cl, sv, conns);
	/* A serving thread's error only matters if the clients saw none. */
	if (rc == 0 && trc) {
		dml_err("raw baseline: serving thread: %s", dml_strerror(trc));
		rc = trc;
	}
	raw_bufs_free(&bufs);
	free(drv);
	free(sv);
	free(cl);
	return rc;
}
