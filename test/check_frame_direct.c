/*
 * Frames received by the connection layer (conn.h) over a real TCP
 * connection, written in pieces by hand: a payload of 64 KiB or more is read
 * straight from the socket into its destination however much of it came with
 * its head; a smaller one goes through the input buffer.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
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

struct end {
	int ready;
	int frames;
	uint8_t *payload; /* the last frame's, copied */
	size_t len;
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

void frame_tests_direct(TCase *tc)
{
	tcase_add_test(tc, test_direct_at_threshold);
	tcase_add_test(tc, test_buffered_below_threshold);
	tcase_add_test(tc, test_direct_in_a_row);
	tcase_add_test(tc, test_direct_back_to_back);
}
