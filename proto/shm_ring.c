/*
 * The same-host bulk path (shm_ring.h): the sealed memfd, its two rings and
 * the prelude that passes it.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "proto/dml_error.h"
#include "proto/log.h"
#include "proto/shm_ring.h"

/* The counters page: a magic, the ring size, then each ring's consumed
 * position on a cache line of its own (each is written by one end only). */
#define PAGE_BYTES 4096u
#define MAGIC "dmlring1"
#define RING_FIELD 8
#define CONSUMED_FIELD(i) (64u * (1u + (i)))

static const unsigned int SEALS_NEEDED = F_SEAL_SHRINK | F_SEAL_GROW;

int dml_shm_create(size_t ring, struct dml_shm *out, int *fd)
{
	size_t len = PAGE_BYTES + 2 * ring;
	uint64_t ring64 = ring;
	void *map;
	int f;

	memset(out, 0, sizeof(*out));
	*fd = -1;
	f = memfd_create("dml-ring", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (f < 0) {
		dml_warn("shared-memory ring: memfd_create: %s", strerror(errno));
		return DML_EIO;
	}
	if (ftruncate(f, (off_t)len) != 0 ||
	    fcntl(f, F_ADD_SEALS, SEALS_NEEDED | F_SEAL_SEAL) != 0) {
		dml_warn("shared-memory ring: sizing and sealing %zu bytes: %s", len,
			 strerror(errno));
		close(f);
		return DML_EIO;
	}
	map = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, f, 0);
	if (map == MAP_FAILED) {
		dml_warn("shared-memory ring: mmap of %zu bytes: %s", len, strerror(errno));
		close(f);
		return DML_EIO;
	}
	memcpy(map, MAGIC, 8);
	memcpy((uint8_t *)map + RING_FIELD, &ring64, sizeof(ring64));
	out->map = map;
	out->map_len = len;
	out->ring = ring;
	*fd = f;
	return 0;
}

int dml_shm_attach(int fd, struct dml_shm *out, char *why, size_t len)
{
	struct stat st;
	uint64_t ring, said;
	int seals;
	void *map;

	memset(out, 0, sizeof(*out));
	if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
		snprintf(why, len, "not a memory file");
		return DML_EINVAL;
	}
	seals = fcntl(fd, F_GET_SEALS);
	if (seals < 0 || ((unsigned int)seals & SEALS_NEEDED) != SEALS_NEEDED) {
		snprintf(why, len, "not sealed against resizing");
		return DML_EINVAL;
	}
	ring = st.st_size > PAGE_BYTES ? ((uint64_t)st.st_size - PAGE_BYTES) / 2 : 0;
	if (ring < DML_SHM_MIN_PAYLOAD || ring > DML_SHM_RING_MAX || ring % PAGE_BYTES ||
	    (uint64_t)st.st_size != PAGE_BYTES + 2 * ring) {
		snprintf(why, len, "%lld bytes is no page and two rings of 64 KiB to 256 MiB",
			 (long long)st.st_size);
		return DML_EINVAL;
	}
	map = mmap(NULL, (size_t)st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (map == MAP_FAILED) {
		snprintf(why, len, "mmap: %s", strerror(errno));
		return DML_EINVAL;
	}
	memcpy(&said, (uint8_t *)map + RING_FIELD, sizeof(said));
	if (memcmp(map, MAGIC, 8) != 0 || said != ring) {
		munmap(map, (size_t)st.st_size);
		snprintf(why, len, "not a dml ring");
		return DML_EINVAL;
	}
	out->map = map;
	out->map_len = (size_t)st.st_size;
	out->ring = (size_t)ring;
	return 0;
}

void dml_shm_close(struct dml_shm *s)
{
	if (s->map)
		munmap(s->map, s->map_len);
	memset(s, 0, sizeof(*s));
}

void dml_shm_ends(struct dml_shm *s, int acceptor, struct dml_shm_tx *tx,
		  struct dml_shm_rx *rx)
{
	int mine = acceptor ? 1 : 0, theirs = 1 - mine;

	memset(tx, 0, sizeof(*tx));
	memset(rx, 0, sizeof(*rx));
	tx->base = s->map + PAGE_BYTES + (size_t)mine * s->ring;
	tx->size = s->ring;
	tx->consumed = (const uint64_t *)(void *)(s->map + CONSUMED_FIELD(mine));
	tx->head = __atomic_load_n(tx->consumed, __ATOMIC_ACQUIRE);
	rx->base = s->map + PAGE_BYTES + (size_t)theirs * s->ring;
	rx->size = s->ring;
	rx->consumed = (uint64_t *)(void *)(s->map + CONSUMED_FIELD(theirs));
}

uint8_t *dml_shm_tx_reserve(struct dml_shm_tx *tx, size_t len, uint64_t *offset,
			    uint64_t *end)
{
	uint64_t consumed, start, pos;

	if (tx->broken || !tx->base || len == 0 || len > tx->size)
		return NULL;
	consumed = __atomic_load_n(tx->consumed, __ATOMIC_ACQUIRE);
	if (consumed > tx->head || tx->head - consumed > tx->size) {
		dml_warn("shared-memory ring: the peer marked %llu consumed of %llu sent; "
			 "sending over the socket from now on", (unsigned long long)consumed,
			 (unsigned long long)tx->head);
		tx->broken = 1;
		return NULL;
	}
	/* A payload never wraps: one that would goes to the ring's start. */
	start = tx->head;
	pos = start % tx->size;
	if (pos + len > tx->size)
		start += tx->size - pos;
	if (start + len - consumed > tx->size)
		return NULL;
	*offset = start % tx->size;
	*end = start + len;
	tx->head = *end;
	return tx->base + *offset;
}

const uint8_t *dml_shm_rx_payload(const struct dml_shm_rx *rx, uint64_t offset, size_t len)
{
	if (!rx->base || offset >= rx->size || len > rx->size - offset)
		return NULL;
	return rx->base + offset;
}

void dml_shm_rx_release(struct dml_shm_rx *rx, uint64_t end)
{
	__atomic_store_n(rx->consumed, end, __ATOMIC_RELEASE);
}

/* The prelude's message: one byte and room for one descriptor. */
struct prelude_msg {
	char byte;
	struct iovec v;
	union {
		char buf[CMSG_SPACE(sizeof(int))];
		struct cmsghdr align;
	} ctl;
	struct msghdr msg;
};

static void prelude_msg_init(struct prelude_msg *p)
{
	memset(p, 0, sizeof(*p));
	p->byte = DML_SHM_PRELUDE;
	p->v.iov_base = &p->byte;
	p->v.iov_len = 1;
	p->msg.msg_iov = &p->v;
	p->msg.msg_iovlen = 1;
	p->msg.msg_control = p->ctl.buf;
	p->msg.msg_controllen = sizeof(p->ctl.buf);
}

int dml_shm_send_prelude(int sock, int fd)
{
	struct prelude_msg p;
	struct cmsghdr *cm;
	ssize_t n;

	prelude_msg_init(&p);
	cm = CMSG_FIRSTHDR(&p.msg);
	cm->cmsg_level = SOL_SOCKET;
	cm->cmsg_type = SCM_RIGHTS;
	cm->cmsg_len = CMSG_LEN(sizeof(int));
	memcpy(CMSG_DATA(cm), &fd, sizeof(int));
	do
		n = sendmsg(sock, &p.msg, MSG_NOSIGNAL | MSG_DONTWAIT);
	while (n < 0 && errno == EINTR);
	return n == 1 ? 0 : -1;
}

int dml_shm_recv_prelude(int sock, int *fd)
{
	struct prelude_msg p;
	struct msghdr *msg = &p.msg;
	char byte;
	ssize_t n;
	int got = 0;

	*fd = -1;
	prelude_msg_init(&p);
	do
		n = recv(sock, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
	while (n < 0 && errno == EINTR);
	if (n < 0)
		return errno == EAGAIN || errno == EWOULDBLOCK ? -1 : -2;
	if (n == 0)
		return -2;
	if (byte != DML_SHM_PRELUDE)
		return 0;
	do
		n = recvmsg(sock, msg, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
	while (n < 0 && errno == EINTR);
	if (n != 1)
		return -2;
	/* Descriptors beyond the one there is room for were closed by the
	 * kernel (MSG_CTRUNC); any that came are ours to close if unwanted. */
	for (struct cmsghdr *cm = CMSG_FIRSTHDR(msg); cm; cm = CMSG_NXTHDR(msg, cm)) {
		size_t k;

		if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS)
			continue;
		for (k = 0; CMSG_LEN((k + 1) * sizeof(int)) <= cm->cmsg_len; k++) {
			int f;

			memcpy(&f, CMSG_DATA(cm) + k * sizeof(int), sizeof(int));
			if (got++ == 0)
				*fd = f;
			else
				close(f);
		}
	}
	if (got != 1 || (msg->msg_flags & MSG_CTRUNC)) {
		if (*fd >= 0)
			close(*fd);
		*fd = -1;
	}
	return 1;
}
