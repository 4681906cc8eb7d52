/*
 * raw_frame.c - whole dml frames over a blocking socket (see raw_frame.h).
 */
#include <check.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dml_error.h"
#include "frame.h"
#include "harness.h"
#include "raw_frame.h"
#include "util.h"

#define FRAME_WAIT_MS 10000

static int read_full(int fd, void *buf, size_t n)
{
	uint8_t *p = buf;

	while (n > 0) {
		struct pollfd pfd = { fd, POLLIN, 0 };
		ssize_t k;

		if (poll(&pfd, 1, FRAME_WAIT_MS) <= 0)
			return DML_ETIMEDOUT;
		k = read(fd, p, n);
		if (k <= 0)
			return DML_ECONN;
		p += k;
		n -= (size_t)k;
	}
	return 0;
}

Dml__Meta *raw_frame_read(int fd, uint8_t **payload)
{
	struct dml_frame_limits lim;
	struct dml_frame_header hdr;
	uint8_t head[DML_FRAME_HEADER_LEN], *meta;
	Dml__Meta *m = NULL;

	dml_frame_limits_default(&lim);
	ck_assert_int_eq(read_full(fd, head, sizeof(head)), 0);
	ck_assert_int_eq(dml_frame_header_decode(head, &lim, &hdr), 0);
	meta = dml_xmalloc(hdr.meta_len);
	ck_assert_int_eq(read_full(fd, meta, hdr.meta_len), 0);
	ck_assert_int_eq(dml_frame_meta_decode(meta, hdr.meta_len, &hdr, &lim, &m), 0);
	free(meta);
	*payload = NULL;
	if (hdr.payload_len) {
		*payload = dml_xmalloc(hdr.payload_len);
		ck_assert_int_eq(read_full(fd, *payload, hdr.payload_len), 0);
	}
	return m;
}

void raw_frame_send(int fd, Dml__Meta *m, const void *payload, uint32_t len)
{
	size_t cap = dml_frame_head_size(m) + len, n;
	uint8_t *buf = dml_xmalloc(cap);

	n = dml_frame_encode_head(m, len, buf, cap);
	ck_assert_uint_gt(n, 0);
	if (len)
		memcpy(buf + n, payload, len);
	ck_assert_int_eq(dml_test_raw_send(fd, buf, n + len), 0);
	free(buf);
}
