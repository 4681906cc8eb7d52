/*
 * What the files of check_frame share (check_frame.c builds frames by hand
 * and parses them; check_frame_roundtrip.c, check_frame_malformed.c,
 * check_frame_fuzz.c and check_frame_direct.c hold the tests): each file adds
 * its tests to one of the suite's test cases.
 */
#ifndef DML_CHECK_FRAME_H
#define DML_CHECK_FRAME_H

#include <check.h>
#include <stddef.h>
#include <stdint.h>

#include "proto/dml.pb-c.h"
#include "proto/frame.h"

/* A frame built by a test: head (header + meta) then payload, one buffer. */
struct built {
	uint8_t *buf;
	size_t len;
};

/* Frees b's buffer and empties it. */
void built_free(struct built *b);

/* Encodes m as a real sender would, then appends the payload bytes. */
struct built build_frame(Dml__Meta *m, const void *payload, uint32_t plen);

/*
 * Packs m exactly as it is (payload_bytes untouched) under a header that
 * claims hdr_plen payload bytes, followed by that many zero bytes: the way to
 * make the two lengths disagree, or counts and payload disagree.
 */
struct built build_raw(const Dml__Meta *m, uint32_t hdr_plen);

/* Header plus arbitrary metadata bytes, no payload. */
struct built build_meta_bytes(const uint8_t *meta, size_t mlen);

/* dml_frame_parse of all of b under lim: its code; a parsed frame must span
 * b exactly and is released. */
int parse_with(const struct built *b, const struct dml_frame_limits *lim);

/* parse_with under the default limits. */
int parse_default(const struct built *b);

/* Parses a frame that must be valid and whole; caller releases *f. */
void parse_ok(const struct built *b, struct dml_frame *f);

/* A Meta of the given type and value width with fixed ids. */
void meta_data(Dml__Meta *m, Dml__MsgType type, uint32_t width);

/* n little-endian u64 keys starting at k0, spaced by 3. */
void fill_keys(uint8_t *out, uint32_t n, uint64_t k0);

/* count floats base, base + 0.5, ... */
void fill_values(uint8_t *out, size_t count, float base);

/* A fixed handshake nonce. */
extern const uint8_t nonce_a[32];

/* The tests of good frames (check_frame_roundtrip.c). */
void frame_tests_roundtrip(TCase *tc);

/* The tests of malformed frames (check_frame_malformed.c). */
void frame_tests_malformed(TCase *tc);

/* Frames received in pieces over TCP by the connection layer
 * (check_frame_direct.c). */
void frame_tests_direct(TCase *tc);

/* The fuzz tests (check_frame_fuzz.c). */
void frame_tests_fuzz(TCase *tc);

#endif /* DML_CHECK_FRAME_H */
