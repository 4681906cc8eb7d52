/*
 * The same-host bulk path: over a Unix connection (local.h) large payloads
 * travel through shared memory instead of the socket, and the frame on the
 * socket names where the payload lies.
 *
 * The connecting end creates one sealed memfd (its size can neither shrink
 * nor grow, so no access to it can fault) holding a page of counters and
 * two rings of equal size, one per direction, and passes it to the
 * accepting end right after the CHALLENGE that offered it (an SCM_RIGHTS
 * prelude byte, before its HELLO). A sender copies a payload into its ring
 * (the one copy the socket path also makes into the kernel) and sends a
 * frame flagged DML_FRAME_FLAG_RING whose metadata gives the payload's
 * offset and the ring position after it; the receiver hands its owner a
 * pointer into the ring, and once the owner is done with the frame stores
 * that position as consumed. Frames are handled in order, so one counter
 * per ring frees everything before it. A ring that is full, or a payload
 * larger than it, goes over the socket as before.
 *
 * Trust: the other end can write the mapping at any time. The receiver
 * checks every offset and length against the ring before touching it; a
 * sender believes the consumed counter only when it is plausible (never
 * past what it sent, never more than a ring behind) and stops using the
 * ring otherwise. A peer that rewrites a payload while the receiver reads
 * it can change the values the receiver sees, which an authenticated peer
 * can do anyway by sending other values: rings are used only once the
 * handshake proved the peer knows the cluster secret.
 */
#ifndef DML_SHM_RING_H
#define DML_SHM_RING_H

#include <stddef.h>
#include <stdint.h>

/** The prelude byte that carries the memfd (a frame starts with 'D'). */
#define DML_SHM_PRELUDE 'S'
/** Payloads at least this large go through the ring when it has room. */
#define DML_SHM_MIN_PAYLOAD (64u * 1024)
/** Size of each direction's ring. */
#define DML_SHM_RING_BYTES (16u << 20)
/** Largest ring an accepting end maps. */
#define DML_SHM_RING_MAX (256u << 20)

/** One mapping shared by both ends of a connection. */
struct dml_shm {
	uint8_t *map;
	size_t map_len;
	size_t ring;          /* bytes of each direction's ring */
};

/** This end's sending ring: where the next payload goes. */
struct dml_shm_tx {
	uint8_t *base;
	size_t size;
	uint64_t head;        /* ring position after the last payload sent */
	const uint64_t *consumed;
	int broken;           /* the peer's counter made no sense: ring unused */
};

/** This end's receiving ring. */
struct dml_shm_rx {
	const uint8_t *base;
	size_t size;
	uint64_t *consumed;
};

/**
 * A new sealed memfd for a connection with rings of ring bytes each,
 * mapped: *fd is the descriptor to pass (the caller closes it once sent).
 * 0, or DML_EIO with a warning logged.
 */
int dml_shm_create(size_t ring, struct dml_shm *out, int *fd);

/**
 * Map a memfd a connecting peer passed, after checking it is sealed
 * against shrinking and growing, its size is a page plus two equal rings
 * of at most DML_SHM_RING_MAX, and its counters page is one of ours. 0, or
 * DML_EINVAL naming the fault in why (len bytes). fd stays the caller's.
 */
int dml_shm_attach(int fd, struct dml_shm *out, char *why, size_t len);

/** Unmap (nothing for a zeroed one). */
void dml_shm_close(struct dml_shm *s);

/** The rings of one end: the connector sends on the first, the acceptor on the second. */
void dml_shm_ends(struct dml_shm *s, int acceptor, struct dml_shm_tx *tx,
		  struct dml_shm_rx *rx);

/**
 * Room for a payload of len bytes in tx: a pointer to write it to, its
 * *offset in the ring and the position *end after it; NULL when the ring
 * has no room for it now (or is broken).
 */
uint8_t *dml_shm_tx_reserve(struct dml_shm_tx *tx, size_t len, uint64_t *offset,
			    uint64_t *end);

/** The payload of len bytes at offset in rx; NULL when it lies outside the ring. */
const uint8_t *dml_shm_rx_payload(const struct dml_shm_rx *rx, uint64_t offset, size_t len);

/** The sender may reuse the ring up to end: a frame whose payload ended there is done. */
void dml_shm_rx_release(struct dml_shm_rx *rx, uint64_t end);

/**
 * Send the prelude: DML_SHM_PRELUDE with fd attached, on a socket with
 * nothing else sent yet. 0, or -1 (the ring is not used).
 */
int dml_shm_send_prelude(int sock, int fd);

/**
 * Take a prelude from sock if one is next: 1 with *fd set (-1 when the
 * byte came without exactly one descriptor), 0 when the next byte is
 * something else (left unread), -1 when nothing can be read now (EAGAIN),
 * -2 at end of stream or on an error (left to the caller's next read).
 */
int dml_shm_recv_prelude(int sock, int *fd);

#endif /* DML_SHM_RING_H */
