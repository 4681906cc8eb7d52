/*
 * Frames received by the connection layer (conn.h) over a real TCP
 * connection, written in pieces by hand: a payload of 64 KiB or more is read
 * straight from the socket into its destination however much of it came with
 * its head; a smaller one goes through the input buffer. Frames that are in
 * the socket together are handled in one wake-up (up to about 512 KiB), and
 * a frame held for backpressure keeps the ones behind it waiting, in order.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <event2/event.h>

#include "proto/conn.h"
#include "proto/util.h"
#include "test/check_frame.h"

/* conn.h: payloads of this many bytes and more are read straight into place. */
#define DIRECT_MIN (64u * 1024)
/* Bytes of payload sent with the head, before the rest. */
#define FIRST_PIECE 1000u
#define WIDTH 2u

/* Most frames a test sends at once; each is tagged with its index. */
#define MAX_FRAMES 16

struct end {
	int ready;
	int frames;
	uint8_t *payload; /* the last frame's, copied */
	size_t len;
	int hold_at;      /* on_frame holds the frame of this index, once */
	int holds;        /* times it did */
	float tags[MAX_FRAMES]; /* each handed frame's first value, in order */
};

static void on_ready(struct dml_conn *c, void *arg)
{
	(void)c;
	((struct end *)arg)->ready = 1;
}

static int on_frame(struct dml_conn *c, const Dml__Meta *meta, const uint8_t *payload,
		    size_t len, void *arg)
{
	struct end *e = arg;

	(void)c;
	(void)meta;
	if (e->frames == e->hold_at && e->holds == 0) {
		e->holds++;
		return DML_CONN_HOLD;
	}
	if (e->frames < MAX_FRAMES && len >= 8 + sizeof(float))
		memcpy(&e->tags[e->frames], payload + meta->num_keys * 8ull, sizeof(float));
	free(e->payload);
	e->payload = dml_xmalloc(len);
	memcpy(e->payload, payload, len);
	e->len = len;
	e->frames++;
	return 0;
}

static const struct dml_conn_ops ops = {
	.on_ready = on_ready,
	.on_frame = on_frame,
};

struct pair {
	struct event_base *base;
	struct dml_conn *tx, *rx; /* rx connected to tx */
	int fd;                   /* tx's socket: frames are written to it by hand */
	struct end txe, rxe;
};

/* One turn of the loop, then a millisecond's rest; fails the test after 10 s
 * of turns. */
static void turn(struct pair *p, int *turns)
{
	ck_assert_msg(++*turns < 10000, "the connection did not get there in 10 s");
	event_base_loop(p->base, EVLOOP_NONBLOCK);
	usleep(1000);
}

static void pair_open(struct pair *p)
{
	static const uint8_t secret[32] = { 7 };
	struct sockaddr_in sa = { .sin_family = AF_INET };
	socklen_t salen = sizeof(sa);
	struct dml_conn_conf conf;
	int lfd;

	memset(p, 0, sizeof(*p));
	p->txe.hold_at = p->rxe.hold_at = -1;
	p->base = event_base_new();
	ck_assert_ptr_nonnull(p->base);
	lfd = socket(AF_INET, SOCK_STREAM, 0);
	ck_assert_int_ge(lfd, 0);
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	ck_assert_int_eq(bind(lfd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	ck_assert_int_eq(listen(lfd, 1), 0);
	ck_assert_int_eq(getsockname(lfd, (struct sockaddr *)&sa, &salen), 0);

	dml_conn_conf_default(&conf);
	conf.secret = secret;
	conf.secret_len = sizeof(secret);
	conf.cluster = "dml";
	conf.role = DML__ROLE__WORKER;
	ck_assert_int_eq(dml_conn_connect(p->base, "127.0.0.1", ntohs(sa.sin_port), &conf,
					  &ops, &p->rxe, &p->rx), 0);
	p->fd = accept(lfd, NULL, NULL);
	ck_assert_int_ge(p->fd, 0);
	close(lfd);
	conf.role = DML__ROLE__SERVER;
	ck_assert_int_eq(dml_conn_accept(p->base, p->fd, &conf, &ops, &p->txe, &p->tx), 0);
	for (int t = 0; !p->rxe.ready || !p->txe.ready;)
		turn(p, &t);
}

static void pair_close(struct pair *p)
{
	dml_conn_abort(p->rx, 0);
	dml_conn_abort(p->tx, 0);
	event_base_loop(p->base, EVLOOP_NONBLOCK);
	event_base_free(p->base);
	free(p->rxe.payload);
	free(p->txe.payload);
}

/* Write all of buf to the (non-blocking) socket, running the loop meanwhile. */
static void write_all(struct pair *p, const uint8_t *buf, size_t len)
{
	for (int i = 0; len > 0 && i < 100000; i++) {
		ssize_t n = write(p->fd, buf, len);

		if (n > 0) {
			buf += n;
			len -= (size_t)n;
			continue;
		}
		ck_assert_msg(n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR),
			      "write: %s", strerror(errno));
		event_base_loop(p->base, EVLOOP_NONBLOCK);
	}
	ck_assert_uint_eq(len, 0);
}

/*
 * A sparse push of nkeys keys: its head and FIRST_PIECE payload bytes, then
 * (once the receiver took them) the rest. Returns the payload bytes the
 * receiver read straight from the socket.
 */
static uint64_t send_in_pieces(struct pair *p, uint32_t nkeys)
{
	uint32_t plen = nkeys * (8 + 4 * WIDTH);
	uint8_t *payload = dml_xmalloc(plen);
	uint64_t direct0 = dml_conn_direct_bytes(p->rx), in0 = dml_conn_bytes_in(p->rx);
	int frames0 = p->rxe.frames;
	struct built b;
	Dml__Meta m;

	meta_data(&m, DML__MSG_TYPE__PUSH, WIDTH);
	m.num_keys = nkeys;
	fill_keys(payload, nkeys, 5);
	fill_values(payload + (size_t)nkeys * 8, (size_t)nkeys * WIDTH, 1.0f);
	b = build_frame(&m, payload, plen);
	write_all(p, b.buf, b.len - plen + FIRST_PIECE);
	/* The rest only once the receiver took the head and the first piece. */
	for (int t = 0; dml_conn_bytes_in(p->rx) < in0 + b.len - plen + FIRST_PIECE;)
		turn(p, &t);
	write_all(p, b.buf + b.len - plen + FIRST_PIECE, plen - FIRST_PIECE);
	for (int t = 0; p->rxe.frames == frames0;)
		turn(p, &t);
	ck_assert_int_eq(p->rxe.frames, frames0 + 1);
	ck_assert_uint_eq(p->rxe.len, plen);
	ck_assert_mem_eq(p->rxe.payload, payload, plen);
	ck_assert_uint_eq(dml_conn_bytes_in(p->rx), in0 + b.len);
	built_free(&b);
	free(payload);
	return dml_conn_direct_bytes(p->rx) - direct0;
}

/* A payload of exactly the threshold, most of it after its head: read direct. */
START_TEST(test_direct_at_threshold)
{
	struct pair p;
	uint64_t direct;

	pair_open(&p);
	direct = send_in_pieces(&p, DIRECT_MIN / (8 + 4 * WIDTH));
	ck_assert_uint_ge(direct, DIRECT_MIN - FIRST_PIECE);
	ck_assert_uint_le(direct, DIRECT_MIN);
	pair_close(&p);
}
END_TEST

/* Just below the threshold: all through the input buffer, none direct. */
START_TEST(test_buffered_below_threshold)
{
	struct pair p;

	pair_open(&p);
	ck_assert_uint_eq(send_in_pieces(&p, DIRECT_MIN / (8 + 4 * WIDTH) - 1), 0);
	pair_close(&p);
}
END_TEST

/* Several large frames in a row, some of each with its head, then a small one. */
START_TEST(test_direct_in_a_row)
{
	struct pair p;

	pair_open(&p);
	for (int i = 0; i < 3; i++)
		ck_assert_uint_ge(send_in_pieces(&p, 3 * DIRECT_MIN / (8 + 4 * WIDTH)),
				  3 * DIRECT_MIN - FIRST_PIECE);
	ck_assert_uint_eq(send_in_pieces(&p, 100), 0);
	pair_close(&p);
}
END_TEST

/*
 * Frames of exactly the threshold back to back, written at once: each direct
 * read also takes the start of the next frame, which must then be handled
 * from the input buffer.
 */
START_TEST(test_direct_back_to_back)
{
	enum { FRAMES = 8 };
	uint32_t nkeys = DIRECT_MIN / (8 + 4 * WIDTH);
	uint32_t plen = nkeys * (8 + 4 * WIDTH);
	uint8_t *payload = dml_xmalloc(plen), *all;
	struct built b;
	struct pair p;
	Dml__Meta m;

	pair_open(&p);
	meta_data(&m, DML__MSG_TYPE__PUSH, WIDTH);
	m.num_keys = nkeys;
	fill_keys(payload, nkeys, 9);
	fill_values(payload + (size_t)nkeys * 8, (size_t)nkeys * WIDTH, 2.0f);
	b = build_frame(&m, payload, plen);
	all = dml_xmalloc(FRAMES * b.len);
	for (int i = 0; i < FRAMES; i++)
		memcpy(all + i * b.len, b.buf, b.len);
	write_all(&p, all, FRAMES * b.len);
	for (int t = 0; p.rxe.frames < FRAMES;)
		turn(&p, &t);
	ck_assert_int_eq(p.rxe.frames, FRAMES);
	ck_assert_uint_eq(p.rxe.len, plen);
	ck_assert_mem_eq(p.rxe.payload, payload, plen);
	ck_assert_uint_gt(dml_conn_direct_bytes(p.rx), 0);
	free(all);
	built_free(&b);
	free(payload);
	pair_close(&p);
}
END_TEST

/* A payload just above the threshold: read direct. */
START_TEST(test_direct_above_threshold)
{
	uint32_t nkeys = DIRECT_MIN / (8 + 4 * WIDTH) + 1;
	struct pair p;

	pair_open(&p);
	ck_assert_uint_ge(send_in_pieces(&p, nkeys), nkeys * (8 + 4 * WIDTH) - FIRST_PIECE);
	pair_close(&p);
}
END_TEST

/* The receiving end's socket: the one whose name is the peer of p->fd. */
static int rx_fd(const struct pair *p)
{
	struct sockaddr_in peer, name;
	socklen_t len = sizeof(peer);

	ck_assert_int_eq(getpeername(p->fd, (struct sockaddr *)&peer, &len), 0);
	for (int fd = 0; fd < 1024; fd++) {
		len = sizeof(name);
		if (fd != p->fd && getsockname(fd, (struct sockaddr *)&name, &len) == 0 &&
		    len == sizeof(name) && name.sin_port == peer.sin_port &&
		    name.sin_addr.s_addr == peer.sin_addr.s_addr)
			return fd;
	}
	ck_abort_msg("no socket of the receiving end");
	return -1;
}

/*
 * n frames of nkeys keys, frame i's values starting at i, written whole
 * while the loop does not run; returns once all of them are queued in the
 * receiver's socket, none of them read yet. *len: one frame's bytes.
 */
static uint8_t *queue_frames(struct pair *p, int n, uint32_t nkeys, size_t *len)
{
	uint32_t plen = nkeys * (8 + 4 * WIDTH);
	uint8_t *payload = dml_xmalloc(plen), *all = NULL;
	int big = 4 << 20, rx = rx_fd(p), queued = 0;
	size_t off = 0;
	Dml__Meta m;

	ck_assert_int_eq(setsockopt(p->fd, SOL_SOCKET, SO_SNDBUF, &big, sizeof(big)), 0);
	ck_assert_int_eq(setsockopt(rx, SOL_SOCKET, SO_RCVBUF, &big, sizeof(big)), 0);
	meta_data(&m, DML__MSG_TYPE__PUSH, WIDTH);
	m.num_keys = nkeys;
	fill_keys(payload, nkeys, 5);
	for (int i = 0; i < n; i++) {
		struct built b;

		fill_values(payload + (size_t)nkeys * 8, (size_t)nkeys * WIDTH, (float)i);
		b = build_frame(&m, payload, plen);
		all = realloc(all, off + b.len);
		ck_assert_ptr_nonnull(all);
		memcpy(all + off, b.buf, b.len);
		off += b.len;
		*len = b.len;
		built_free(&b);
	}
	for (size_t done = 0; done < off;) {
		ssize_t w = write(p->fd, all + done, off - done);

		ck_assert_msg(w > 0, "write: %s", strerror(errno));
		done += (size_t)w;
	}
	/* Loopback moves the bytes at once; wait until they all arrived. */
	for (int t = 0; queued < (int)off; t++) {
		ck_assert_msg(t < 10000, "%d of %zu bytes arrived in 10 s", queued, off);
		ck_assert_int_eq(ioctl(rx, FIONREAD, &queued), 0);
		if (queued < (int)off)
			usleep(1000);
	}
	free(payload);
	return all;
}

/*
 * Ten frames of the threshold, all in the socket: one wake-up hands several
 * of them (a server commits them together) but stops past 512 KiB; their
 * payloads go straight into place but for what each read takes of the next
 * frame's head; all arrive, in order.
 */
START_TEST(test_frames_of_one_wakeup)
{
	enum { FRAMES = 10 };
	uint32_t nkeys = DIRECT_MIN / (8 + 4 * WIDTH);
	uint64_t direct0, in0;
	size_t len;
	uint8_t *all;
	struct pair p;

	pair_open(&p);
	direct0 = dml_conn_direct_bytes(p.rx);
	in0 = dml_conn_bytes_in(p.rx);
	all = queue_frames(&p, FRAMES, nkeys, &len);
	/* The first wake-up may only take the first head and wait for the
	 * kernel to gather its payload; the wake-up that hands a frame hands
	 * the ones behind it too. */
	for (int t = 0; p.rxe.frames == 0; t++) {
		ck_assert_int_lt(t, 1000);
		event_base_loop(p.base, EVLOOP_ONCE | EVLOOP_NONBLOCK);
	}
	ck_assert_msg(p.rxe.frames >= 4 && p.rxe.frames * len <= (512u << 10) + 2 * len,
		      "%d frames of %zu bytes in one wake-up", p.rxe.frames, len);
	ck_assert_int_lt(p.rxe.frames, FRAMES);
	for (int t = 0; p.rxe.frames < FRAMES;)
		turn(&p, &t);
	ck_assert_int_eq(p.rxe.frames, FRAMES);
	for (int i = 0; i < FRAMES; i++)
		ck_assert_float_eq(p.rxe.tags[i], (float)i);
	ck_assert_uint_eq(dml_conn_bytes_in(p.rx), in0 + FRAMES * len);
	ck_assert_uint_ge(dml_conn_direct_bytes(p.rx) - direct0,
			  FRAMES * ((uint64_t)DIRECT_MIN - 2 * 4096));
	ck_assert_uint_eq(p.rxe.len, nkeys * (8 + 4 * WIDTH));
	ck_assert_mem_eq(p.rxe.payload, all + FRAMES * len - p.rxe.len, p.rxe.len);
	free(all);
	pair_close(&p);
}
END_TEST

/*
 * The second of four frames in the socket is held: nothing behind it is
 * handed while it is, however the loop turns; once released it comes again,
 * then the others, in order.
 */
static void held_then_more(uint32_t nkeys)
{
	enum { FRAMES = 4 };
	uint64_t in0;
	size_t len;
	uint8_t *all;
	struct pair p;

	pair_open(&p);
	p.rxe.hold_at = 1;
	in0 = dml_conn_bytes_in(p.rx);
	all = queue_frames(&p, FRAMES, nkeys, &len);
	for (int t = 0; p.rxe.holds == 0;)
		turn(&p, &t);
	ck_assert_int_eq(p.rxe.frames, 1);
	ck_assert(dml_conn_held(p.rx));
	for (int t = 0; t < 20;)
		turn(&p, &t);
	ck_assert_int_eq(p.rxe.frames, 1);
	dml_conn_release(p.rx);
	for (int t = 0; p.rxe.frames < FRAMES;)
		turn(&p, &t);
	ck_assert_int_eq(p.rxe.frames, FRAMES);
	ck_assert_int_eq(p.rxe.holds, 1);
	for (int i = 0; i < FRAMES; i++)
		ck_assert_float_eq(p.rxe.tags[i], (float)i);
	ck_assert_uint_eq(dml_conn_bytes_in(p.rx), in0 + FRAMES * len);
	free(all);
	pair_close(&p);
}

START_TEST(test_held_large_then_more)
{
	held_then_more(DIRECT_MIN / (8 + 4 * WIDTH));
}
END_TEST

START_TEST(test_held_small_then_more)
{
	held_then_more(100);
}
END_TEST

void frame_tests_direct(TCase *tc)
{
	tcase_add_test(tc, test_direct_above_threshold);
	tcase_add_test(tc, test_frames_of_one_wakeup);
	tcase_add_test(tc, test_held_large_then_more);
	tcase_add_test(tc, test_held_small_then_more);
	tcase_add_test(tc, test_direct_at_threshold);
	tcase_add_test(tc, test_buffered_below_threshold);
	tcase_add_test(tc, test_direct_in_a_row);
	tcase_add_test(tc, test_direct_back_to_back);
}
