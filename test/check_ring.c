/*
 * check_ring.c - the same-host bulk path (proto/shm_ring.h):
 *
 *   - rings: a payload never wraps, a full ring says so until the receiver
 *     frees space, what one mapping writes the other reads at the offset
 *     given, a receiver refuses offsets outside its ring, and a sender
 *     stops using a ring whose consumed counter makes no sense;
 *   - a memory file is mapped only when sealed against resizing, sized as
 *     a page and two rings within bounds, and marked as ours; the prelude
 *     passes exactly one descriptor and leaves anything else unread;
 *   - a dml-server with local_socket = yes and a libdml client: 1 MiB
 *     pushes and pulls go through the rings (the server's ring counter)
 *     and sum exactly, many times round the ring;
 *   - a hostile same-host client speaking the protocol by hand: a prelude
 *     with a pipe, an unsealed file or two descriptors costs it the ring
 *     and nothing else; a ring frame outside the ring, or on a connection
 *     with no ring, costs it the connection with an error naming the
 *     cause; an honest ring push by hand is applied once and its space
 *     marked consumed.
 */
#define _GNU_SOURCE
#include <check.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include "proto/dml_error.h"
#include "proto/frame.h"
#include "proto/local.h"
#include "proto/shm_ring.h"
#include "proto/util.h"
#include "test/check_run.h"
#include "test/harness.h"
#include "test/raw_frame.h"
#include "worker/dml.h"

#define KIB 1024u
#define RING (256u * KIB)
#define PAGE 4096u
#define KEYS (256u * KIB)         /* a dense table of 1 MiB of floats */
#define WAIT_MS 15000

/* ---- rings ------------------------------------------------------------- */

/* The connector's rings, and the same file mapped again as the acceptor does. */
static void ring_pair(struct dml_shm *mine, struct dml_shm *theirs)
{
	char why[128];
	int fd;

	ck_assert_int_eq(dml_shm_create(RING, mine, &fd), 0);
	ck_assert_msg(dml_shm_attach(fd, theirs, why, sizeof(why)) == 0, "attach: %s", why);
	close(fd);
}

START_TEST(test_ring_reserve_release)
{
	struct dml_shm a, b;
	struct dml_shm_tx tx, btx;
	struct dml_shm_rx arx, rx;
	uint64_t off, end, end1;
	uint8_t *p;

	ring_pair(&a, &b);
	dml_shm_ends(&a, 0, &tx, &arx);
	dml_shm_ends(&b, 1, &btx, &rx);
	ck_assert_uint_eq(tx.size, RING);
	/* 100 KiB twice fits, a third would wrap: it goes to the start, which
	 * is not free until the first is consumed. */
	p = dml_shm_tx_reserve(&tx, 100 * KIB, &off, &end1);
	ck_assert_ptr_nonnull(p);
	ck_assert_uint_eq(off, 0);
	memset(p, 0x11, 100 * KIB);
	p = dml_shm_tx_reserve(&tx, 100 * KIB, &off, &end);
	ck_assert_ptr_nonnull(p);
	ck_assert_uint_eq(off, 100 * KIB);
	memset(p, 0x22, 100 * KIB);
	ck_assert_ptr_null(dml_shm_tx_reserve(&tx, 100 * KIB, &off, &end));
	ck_assert_ptr_null(dml_shm_tx_reserve(&tx, RING + 1, &off, &end));
	/* The other mapping reads what was written, where it was written. */
	p = (uint8_t *)dml_shm_rx_payload(&rx, 100 * KIB, 100 * KIB);
	ck_assert_ptr_nonnull(p);
	ck_assert_uint_eq(p[0], 0x22);
	ck_assert_uint_eq(p[100 * KIB - 1], 0x22);
	dml_shm_rx_release(&rx, end1);
	p = dml_shm_tx_reserve(&tx, 100 * KIB, &off, &end);
	ck_assert_ptr_nonnull(p);
	ck_assert_uint_eq(off, 0);
	ck_assert_uint_eq(end, RING + 100 * KIB);
	/* The acceptor's direction is a ring of its own. */
	p = dml_shm_tx_reserve(&btx, 200 * KIB, &off, &end);
	ck_assert_ptr_nonnull(p);
	ck_assert_uint_eq(off, 0);
	/* Offsets and lengths outside the ring are refused. */
	ck_assert_ptr_null(dml_shm_rx_payload(&rx, RING, 1));
	ck_assert_ptr_null(dml_shm_rx_payload(&rx, 200 * KIB, 100 * KIB));
	ck_assert_ptr_null(dml_shm_rx_payload(&rx, 0, RING + 1));
	ck_assert_ptr_null(dml_shm_rx_payload(&rx, UINT64_MAX, 2));
	ck_assert_ptr_nonnull(dml_shm_rx_payload(&rx, 0, RING));
	dml_shm_close(&a);
	dml_shm_close(&b);
}
END_TEST

START_TEST(test_ring_nonsense_counter)
{
	struct dml_shm a, b;
	struct dml_shm_tx tx, btx;
	struct dml_shm_rx arx, rx;
	uint64_t off, end;

	ring_pair(&a, &b);
	dml_shm_ends(&a, 0, &tx, &arx);
	dml_shm_ends(&b, 1, &btx, &rx);
	ck_assert_ptr_nonnull(dml_shm_tx_reserve(&tx, 64 * KIB, &off, &end));
	/* Consumed past what was sent: the sender gives the ring up for good. */
	dml_shm_rx_release(&rx, end + 1);
	ck_assert_ptr_null(dml_shm_tx_reserve(&tx, 64 * KIB, &off, &end));
	ck_assert_int_eq(tx.broken, 1);
	dml_shm_rx_release(&rx, end);
	ck_assert_ptr_null(dml_shm_tx_reserve(&tx, 64 * KIB, &off, &end));
	dml_shm_close(&a);
	dml_shm_close(&b);
}
END_TEST

/* A memory file of len bytes, sealed with seals (0: none), its counters
 * page marked as a ring of ring bytes when mark is set. */
static int memfile(size_t len, unsigned int seals, int mark, uint64_t ring)
{
	int fd = memfd_create("check-ring", MFD_CLOEXEC | MFD_ALLOW_SEALING);

	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(ftruncate(fd, (off_t)len), 0);
	if (mark) {
		ck_assert_int_eq(pwrite(fd, "dmlring1", 8, 0), 8);
		ck_assert_int_eq(pwrite(fd, &ring, 8, 8), 8);
	}
	if (seals)
		ck_assert_int_eq(fcntl(fd, F_ADD_SEALS, seals), 0);
	return fd;
}

/* attach refuses fd, saying want. */
static void refused(int fd, const char *want)
{
	struct dml_shm s;
	char why[128] = "";

	ck_assert_int_eq(dml_shm_attach(fd, &s, why, sizeof(why)), DML_EINVAL);
	ck_assert_msg(strstr(why, want), "'%s' lacks '%s'", why, want);
	ck_assert_ptr_null(s.map);
	close(fd);
}

START_TEST(test_attach_refusals)
{
	const unsigned int sealed = F_SEAL_SHRINK | F_SEAL_GROW;
	struct dml_shm s;
	char why[128];
	int fds[2], fd;
	FILE *f;

	refused(memfile(PAGE + 2 * RING, 0, 1, RING), "not sealed");
	refused(memfile(PAGE + 2 * RING, F_SEAL_SHRINK, 1, RING), "not sealed");
	refused(memfile(PAGE + 2 * RING + PAGE, sealed, 1, RING), "no page and two rings");
	refused(memfile(PAGE + 2 * 4 * KIB, sealed, 1, 4 * KIB), "no page and two rings");
	refused(memfile(PAGE + 2 * (size_t)DML_SHM_RING_MAX * 2, sealed, 1,
			2ull * DML_SHM_RING_MAX), "no page and two rings");
	refused(memfile(PAGE + 2 * RING, sealed, 0, RING), "not a dml ring");
	refused(memfile(PAGE + 2 * RING, sealed, 1, RING / 2), "not a dml ring");
	ck_assert_int_eq(pipe(fds), 0);
	close(fds[1]);
	refused(fds[0], "not a memory file");
	f = tmpfile();
	ck_assert_ptr_nonnull(f);
	ck_assert_int_eq(ftruncate(fileno(f), PAGE + 2 * RING), 0);
	refused(dup(fileno(f)), "not sealed");
	fclose(f);
	fd = memfile(PAGE + 2 * RING, sealed, 1, RING);
	ck_assert_int_eq(dml_shm_attach(fd, &s, why, sizeof(why)), 0);
	ck_assert_uint_eq(s.ring, RING);
	dml_shm_close(&s);
	close(fd);
}
END_TEST

/* Send byte on sock with the n descriptors fds attached. */
static void send_with_fds(int sock, char byte, const int *fds, size_t n)
{
	struct iovec v = { .iov_base = &byte, .iov_len = 1 };
	union {
		char buf[CMSG_SPACE(4 * sizeof(int))];
		struct cmsghdr align;
	} ctl;
	struct msghdr msg = { .msg_iov = &v, .msg_iovlen = 1 };

	if (n) {
		struct cmsghdr *cm;

		memset(&ctl, 0, sizeof(ctl));
		msg.msg_control = ctl.buf;
		msg.msg_controllen = CMSG_SPACE(n * sizeof(int));
		cm = CMSG_FIRSTHDR(&msg);
		cm->cmsg_level = SOL_SOCKET;
		cm->cmsg_type = SCM_RIGHTS;
		cm->cmsg_len = CMSG_LEN(n * sizeof(int));
		memcpy(CMSG_DATA(cm), fds, n * sizeof(int));
	}
	ck_assert_int_eq(sendmsg(sock, &msg, 0), 1);
}

START_TEST(test_prelude)
{
	struct dml_shm s;
	int sp[2], fd, got, two[2];
	char byte;

	ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sp), 0);
	ck_assert_int_eq(dml_shm_recv_prelude(sp[1], &got), -1);
	ck_assert_int_eq(dml_shm_create(RING, &s, &fd), 0);
	ck_assert_int_eq(dml_shm_send_prelude(sp[0], fd), 0);
	ck_assert_int_eq(dml_shm_recv_prelude(sp[1], &got), 1);
	ck_assert_int_ge(got, 0);
	ck_assert_int_eq(fcntl(got, F_GET_SEALS) & (F_SEAL_SHRINK | F_SEAL_GROW),
			 F_SEAL_SHRINK | F_SEAL_GROW);
	close(got);
	/* The prelude byte alone, or with two files: taken, no descriptor. */
	send_with_fds(sp[0], DML_SHM_PRELUDE, NULL, 0);
	ck_assert_int_eq(dml_shm_recv_prelude(sp[1], &got), 1);
	ck_assert_int_eq(got, -1);
	two[0] = fd;
	two[1] = fd;
	send_with_fds(sp[0], DML_SHM_PRELUDE, two, 2);
	ck_assert_int_eq(dml_shm_recv_prelude(sp[1], &got), 1);
	ck_assert_int_eq(got, -1);
	/* Anything else is left for the frame reader. */
	send_with_fds(sp[0], 'D', NULL, 0);
	ck_assert_int_eq(dml_shm_recv_prelude(sp[1], &got), 0);
	ck_assert_int_eq(read(sp[1], &byte, 1), 1);
	ck_assert_int_eq(byte, 'D');
	close(sp[0]);
	ck_assert_int_eq(dml_shm_recv_prelude(sp[1], &got), -2);
	close(sp[1]);
	close(fd);
	dml_shm_close(&s);
}
END_TEST

/* ---- through a dml-server ------------------------------------------------ */

static const char tables[] =
	"[table]\nid = 0\nkind = dense\nwidth = 1\nkeys = 262144\noptimizer = add\n";

struct rig {
	struct dml_test_env *env;
	struct dml_test_server *srv;
	uint16_t metrics;
};

static void rig_up(struct rig *r)
{
	struct dml_test_server_conf conf = { .tables = tables, .staleness = -1 };

	ck_assert_int_eq(dml_test_env_new(&r->env), 0);
	ck_assert_int_eq(dml_test_server_start_metered(r->env, &conf, "local_socket = yes\n",
						       &r->srv, &r->metrics), 0);
}

static void rig_down(struct rig *r)
{
	ck_assert_int_eq(dml_test_server_stop(r->srv, DML_TEST_STOP_TIMEOUT_MS), 0);
	dml_test_env_free(r->env);
}

static double ring_bytes(struct rig *r)
{
	double v = -1;

	ck_assert_int_eq(dml_test_metric(r->metrics, "dml_server_ring_bytes_total", WAIT_MS,
					 &v), 0);
	return v;
}

static void ok(dml_t *d, int rc, const dml_handle_t *h)
{
	ck_assert_msg(rc == 0, "request: %s", dml_strerror(rc));
	rc = dml_wait(d, *h);
	ck_assert_msg(rc == 0, "wait: %s (%s)", dml_strerror(rc), dml_error_detail(d));
}

START_TEST(test_libdml_through_rings)
{
	enum { PUSHES = 40, WINDOW = 4 };
	float *vals = dml_xmalloc(KEYS * sizeof(float)), *out = dml_xmalloc(KEYS * sizeof(float));
	dml_handle_t h[WINDOW];
	struct rig r;
	dml_opts_t *o;
	dml_t *d;

	rig_up(&r);
	ck_assert(ring_bytes(&r) == 0);
	ck_assert_int_eq(dml_test_client_opts(r.env, &r.srv, 1, 1, &o), 0);
	ck_assert_int_eq(dml_opts_set(o, "local_socket", "yes"), 0);
	ck_assert_int_eq(dml_connect(o, &d), 0);
	dml_opts_free(o);
	/* 40 MiB through a 16 MiB ring, a few pushes in flight at a time:
	 * push i adds (k % 7) + i to key k. */
	for (int i = 0; i < PUSHES; i += WINDOW) {
		for (int j = 0; j < WINDOW; j++) {
			for (uint32_t k = 0; k < KEYS; k++)
				vals[k] = (float)(k % 7) + (float)(i + j);
			ck_assert_int_eq(dml_push_range(d, 0, 0, KEYS, vals, &h[j]), 0);
		}
		for (int j = 0; j < WINDOW; j++)
			ok(d, 0, &h[j]);
	}
	for (int i = 0; i < 20; i++) {
		ok(d, dml_pull_range(d, 0, 0, KEYS, out, &h[0]), &h[0]);
		for (uint32_t k = 0; k < KEYS; k++)
			if (out[k] != (float)(PUSHES * (k % 7)) + (float)(PUSHES * (PUSHES - 1) / 2))
				ck_abort_msg("pull %d key %u: %g", i, k, (double)out[k]);
	}
	/* Both ways: 40 pushes and 20 pulls of 1 MiB, none over the socket. */
	ck_assert_msg(ring_bytes(&r) >= 60.0 * KEYS * sizeof(float), "ring bytes %g",
		      ring_bytes(&r));
	dml_close(d);
	rig_down(&r);
	free(vals);
	free(out);
}
END_TEST

/* A blocking socket to the server's Unix name, as a same-host client has. */
static int unix_dial(struct rig *r)
{
	struct sockaddr_in sa = { .sin_family = AF_INET };
	int fd;

	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	sa.sin_port = htons(dml_test_server_port(r->srv));
	fd = dml_local_connect((struct sockaddr *)&sa);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK), 0);
	return fd;
}

/* The CHALLENGE offered a ring: pass the descriptors of the test's choice. */
struct prelude {
	int fds[2];
	size_t n;
};

static void send_prelude(int fd, const Dml__Handshake *challenge, void *arg)
{
	const struct prelude *p = arg;

	ck_assert(challenge->ring);
	send_with_fds(fd, DML_SHM_PRELUDE, p->fds, p->n);
}

/* A dense push of all keys flagged as having its payload in the sender's
 * ring at offset, freeing the ring up to end once handled. */
static void ring_push(int fd, uint64_t id, uint64_t offset, uint64_t end)
{
	Dml__Meta m = DML__META__INIT;
	size_t cap, n;
	uint8_t *buf;

	m.type = DML__MSG_TYPE__PUSH;
	m.request_id = id;
	m.sender = 1;
	m.seq = id;
	m.value_width = 1;
	m.dense = 1;
	m.key_begin = 0;
	m.key_end = KEYS;
	m.ring_offset = offset;
	m.ring_end = end;
	cap = dml_frame_head_size(&m);
	buf = dml_xmalloc(cap);
	n = dml_frame_encode_head(&m, KEYS * sizeof(float), buf, cap);
	ck_assert_uint_gt(n, 0);
	dml_store_le16(buf + 6, DML_FRAME_FLAG_RING);
	ck_assert_int_eq(dml_test_raw_send(fd, buf, n), 0);
	free(buf);
}

/* The next frame answers request id: an ERROR with code, or an ACK (code 0). */
static void answer(int fd, uint64_t id, int code)
{
	uint8_t *payload;
	Dml__Meta *m = raw_frame_read(fd, &payload);

	ck_assert_uint_eq(m->request_id, id);
	if (code) {
		ck_assert_int_eq(m->type, DML__MSG_TYPE__ERROR);
		ck_assert_int_eq(m->error->code, code);
	} else {
		ck_assert_int_eq(m->type, DML__MSG_TYPE__ACK);
	}
	free(payload);
	dml_meta_free(m);
}

/* Connect by hand with prelude p; the WELCOME says whether the ring was taken. */
static int hostile(struct rig *r, struct prelude *p, int want_ring)
{
	int fd = unix_dial(r);
	Dml__Meta *w = raw_frame_handshake_prelude(r->env, fd, DML__ROLE__WORKER, 1, 7, 0, 0,
						   send_prelude, p);

	ck_assert_int_eq(w->handshake->ring, want_ring);
	dml_meta_free(w);
	return fd;
}

START_TEST(test_hostile_rings)
{
	struct dml_shm s;
	struct prelude p;
	struct rig r;
	uint64_t consumed;
	float *vals = dml_xmalloc(KEYS * sizeof(float));
	int fd, memfd, pipefd[2];
	dml_handle_t h;
	dml_t *d;

	rig_up(&r);
	ck_assert_int_eq(pipe(pipefd), 0);
	/* A pipe, an unsealed memory file, two files: no ring, and a push
	 * flagged as in the ring loses the connection. */
	p = (struct prelude){ { pipefd[0] }, 1 };
	fd = hostile(&r, &p, 0);
	ring_push(fd, 1, 0, KEYS * sizeof(float));
	answer(fd, 0, DML_EFRAME_FLAGS);     /* refused at its header: no request yet */
	ck_assert_int_eq(dml_test_raw_wait_closed(fd, WAIT_MS), 0);
	close(fd);
	p = (struct prelude){ { memfile(PAGE + 2 * RING, 0, 1, RING) }, 1 };
	close(hostile(&r, &p, 0));
	close(p.fds[0]);
	ck_assert_int_eq(dml_shm_create(DML_SHM_RING_BYTES, &s, &memfd), 0);
	p = (struct prelude){ { memfd, memfd }, 2 };
	close(hostile(&r, &p, 0));
	/* The ring taken; a payload past its end loses the connection. */
	p = (struct prelude){ { memfd }, 1 };
	fd = hostile(&r, &p, 1);
	ring_push(fd, 2, s.ring - 4, 0);
	answer(fd, 2, DML_EFRAME_LENGTH);
	ck_assert_int_eq(dml_test_raw_wait_closed(fd, WAIT_MS), 0);
	close(fd);
	/* An honest push by hand: applied once, its space marked consumed. */
	dml_shm_close(&s);
	ck_assert_int_eq(dml_shm_create(DML_SHM_RING_BYTES, &s, &memfd), 0);
	p = (struct prelude){ { memfd }, 1 };
	fd = hostile(&r, &p, 1);
	for (uint32_t k = 0; k < KEYS; k++)
		((float *)(s.map + PAGE + 100))[k] = (float)k;
	ring_push(fd, 3, 100, 100 + KEYS * sizeof(float));
	answer(fd, 3, 0);
	memcpy(&consumed, s.map + 64, sizeof(consumed));   /* dml-server(8): byte 64 */
	ck_assert_uint_eq(consumed, 100 + KEYS * sizeof(float));
	close(fd);
	close(memfd);
	dml_shm_close(&s);
	close(pipefd[0]);
	close(pipefd[1]);

	/* The server lost nothing: a client reads the one push applied. */
	ck_assert_int_eq(dml_test_client_new(r.env, &r.srv, 1, 2, &d), 0);
	ok(d, dml_pull_range(d, 0, 0, KEYS, vals, &h), &h);
	for (uint32_t k = 0; k < KEYS; k++)
		if (vals[k] != (float)k)
			ck_abort_msg("key %u: %g", k, (double)vals[k]);
	dml_close(d);
	free(vals);
	rig_down(&r);
}
END_TEST

static Suite *ring_suite(void)
{
	Suite *s = suite_create("ring");
	TCase *rings = tcase_create("rings"), *wire = tcase_create("wire");

	tcase_add_test(rings, test_ring_reserve_release);
	tcase_add_test(rings, test_ring_nonsense_counter);
	tcase_add_test(rings, test_attach_refusals);
	tcase_add_test(rings, test_prelude);
	suite_add_tcase(s, rings);
	tcase_set_timeout(wire, 120);
	tcase_add_test(wire, test_libdml_through_rings);
	tcase_add_test(wire, test_hostile_rings);
	suite_add_tcase(s, wire);
	return s;
}

int main(void)
{
	return dml_check_run(ring_suite());
}
