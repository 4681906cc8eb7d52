/*
 * IDX reader (see data_idx.h): one source that reads a plain file through
 * read(2) or a gzipped one through zlib, a header check, and a data loop
 * that grows its buffer as bytes arrive.
 *
 * Must never: allocate what the header claims before the bytes are there,
 * multiply sizes without an overflow check, or report an error without
 * the file's path in err.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#include "worker/data_idx.h"
#include "proto/dml_error.h"

/* The first allocation; the buffer doubles from here up to the data size. */
#define IDX_FIRST_ALLOC ((size_t)1 << 20)
/* The most asked of one read call (gzread takes an unsigned int). */
#define IDX_READ_CHUNK ((size_t)1 << 20)

struct idx_src {
	const char *path;
	int fd;     /* plain file; -1 once handed to zlib */
	gzFile gz;  /* gzipped file, or NULL */
	int cut;    /* the gzip stream ended without its trailer */
};

static int idx_fail(int code, char *err, size_t errlen, const char *path,
		    const char *fmt, ...) __attribute__((format(printf, 5, 6)));

static int idx_fail(int code, char *err, size_t errlen, const char *path,
		    const char *fmt, ...)
{
	va_list ap;
	int n;

	if (!err || errlen == 0)
		return code;
	n = snprintf(err, errlen, "%s: ", path);
	if (n < 0 || (size_t)n >= errlen)
		return code;
	va_start(ap, fmt);
	vsnprintf(err + n, errlen - (size_t)n, fmt, ap);
	va_end(ap);
	return code;
}

static uint32_t idx_load_be32(const uint8_t *b)
{
	return (uint32_t)b[0] << 24 | (uint32_t)b[1] << 16 | (uint32_t)b[2] << 8 |
	       (uint32_t)b[3];
}

static int idx_src_open(struct idx_src *s, const char *path, char *err, size_t errlen)
{
	uint8_t magic[2];
	ssize_t n;

	memset(s, 0, sizeof(*s));
	s->path = path;
	s->fd = open(path, O_RDONLY | O_CLOEXEC);
	if (s->fd < 0)
		return idx_fail(DML_EIO, err, errlen, path, "cannot open: %s",
				strerror(errno));
	do
		n = pread(s->fd, magic, sizeof(magic), 0);
	while (n < 0 && errno == EINTR);
	if (n < 0) {
		int e = errno;

		close(s->fd);
		s->fd = -1;
		return idx_fail(DML_EIO, err, errlen, path, "read: %s", strerror(e));
	}
	if (n == 2 && magic[0] == 0x1f && magic[1] == 0x8b) {
		s->gz = gzdopen(s->fd, "rb");
		if (!s->gz) {
			close(s->fd);
			s->fd = -1;
			return idx_fail(DML_EIO, err, errlen, path, "cannot open gzip stream");
		}
		s->fd = -1;
		gzbuffer(s->gz, 1 << 16);
	}
	return 0;
}

static void idx_src_close(struct idx_src *s)
{
	if (s->gz)
		gzclose_r(s->gz);
	if (s->fd >= 0)
		close(s->fd);
	s->gz = NULL;
	s->fd = -1;
}

/* A short read of a gzip stream: the end, a cut-off stream, or corruption. */
static int idx_src_gz_check(struct idx_src *s, char *err, size_t errlen)
{
	int zerr;
	const char *msg = gzerror(s->gz, &zerr);

	if (zerr == Z_OK)
		return 0;
	if (zerr == Z_BUF_ERROR) {
		s->cut = 1;
		return 0;
	}
	if (zerr == Z_ERRNO)
		return idx_fail(DML_EIO, err, errlen, s->path, "read: %s", strerror(errno));
	if (zerr == Z_MEM_ERROR)
		return idx_fail(DML_ENOMEM, err, errlen, s->path, "gzip: out of memory");
	return idx_fail(DML_ECONF, err, errlen, s->path, "gzip: %s", msg ? msg : "error");
}

/*
 * Read up to want bytes, stopping early only at the end of the file: *got
 * smaller than want means the end was reached.
 */
static int idx_src_read(struct idx_src *s, void *buf, size_t want, size_t *got,
			char *err, size_t errlen)
{
	uint8_t *p = buf;

	*got = 0;
	while (*got < want) {
		size_t ask = want - *got;
		ssize_t n;

		if (ask > IDX_READ_CHUNK)
			ask = IDX_READ_CHUNK;
		if (s->gz) {
			n = gzread(s->gz, p + *got, (unsigned)ask);
			if (n < 0 || (size_t)n < ask) {
				int rc = idx_src_gz_check(s, err, errlen);

				if (rc)
					return rc;
			}
			if (n < 0)
				n = 0;
		} else {
			n = read(s->fd, p + *got, ask);
			if (n < 0 && errno == EINTR)
				continue;
			if (n < 0)
				return idx_fail(DML_EIO, err, errlen, s->path, "read: %s",
						strerror(errno));
		}
		if (n == 0)
			break;
		*got += (size_t)n;
	}
	return 0;
}

/* Read exactly want header bytes; a short file is truncated content. */
static int idx_read_header_part(struct idx_src *s, uint8_t *buf, size_t want,
				size_t before, char *err, size_t errlen)
{
	size_t got;
	int rc = idx_src_read(s, buf, want, &got, err, errlen);

	if (rc)
		return rc;
	if (got < want)
		return idx_fail(DML_ECONF, err, errlen, s->path,
				"truncated: the header ends after %zu bytes%s",
				before + got, s->cut ? " (gzip stream cut short)" : "");
	return 0;
}

static int idx_read_header(struct idx_src *s, struct dml_idx *out, char *err,
			   size_t errlen)
{
	uint8_t b[4 * DML_IDX_MAX_DIMS];
	uint32_t magic;
	uint64_t total = 1;
	int rc;

	rc = idx_read_header_part(s, b, 4, 0, err, errlen);
	if (rc)
		return rc;
	magic = idx_load_be32(b);
	if (b[0] != 0 || b[1] != 0)
		return idx_fail(DML_ECONF, err, errlen, s->path,
				"bad magic 0x%08" PRIx32 " (not an IDX file)", magic);
	if (b[2] != 0x08)
		return idx_fail(DML_ECONF, err, errlen, s->path,
				"data type 0x%02x not supported (only unsigned bytes, 0x08)",
				b[2]);
	if (b[3] < 1 || b[3] > DML_IDX_MAX_DIMS)
		return idx_fail(DML_ECONF, err, errlen, s->path,
				"%u dimensions (1..%d allowed)", b[3], DML_IDX_MAX_DIMS);
	out->ndims = b[3];
	rc = idx_read_header_part(s, b, 4 * (size_t)out->ndims, 4, err, errlen);
	if (rc)
		return rc;
	for (uint32_t i = 0; i < out->ndims; i++) {
		out->dims[i] = idx_load_be32(b + 4 * i);
		if (out->dims[i] == 0)
			return idx_fail(DML_ECONF, err, errlen, s->path,
					"size 0 in dimension %" PRIu32, i + 1);
	}
	/* Each factor is below 2^32, so the running product stays below
	 * 2^62 as long as it is checked against the 2^30 cap at each step. */
	for (uint32_t i = 0; i < out->ndims; i++) {
		total *= out->dims[i];
		if (total > DML_IDX_MAX_BYTES)
			break;
	}
	if (total > DML_IDX_MAX_BYTES) {
		uint64_t full;
		int over = 0;

		full = 1;
		for (uint32_t i = 0; i < out->ndims; i++)
			over |= __builtin_mul_overflow(full, (uint64_t)out->dims[i], &full);
		if (over)
			return idx_fail(DML_ECONF, err, errlen, s->path,
					"data size overflows 64 bits (over the limit)");
		return idx_fail(DML_ECONF, err, errlen, s->path,
				"0x%" PRIx64 " bytes of data is over the limit", full);
	}
	out->count = out->dims[0];
	out->record_size = total / out->count;
	return 0;
}

static int idx_read_data(struct idx_src *s, struct dml_idx *out, char *err,
			 size_t errlen)
{
	size_t total = (size_t)(out->count * out->record_size);
	size_t alloc = total < IDX_FIRST_ALLOC ? total : IDX_FIRST_ALLOC;
	size_t have = 0, got;
	uint8_t extra;
	int rc;

	out->data = malloc(alloc);
	if (!out->data)
		return idx_fail(DML_ENOMEM, err, errlen, s->path,
				"cannot allocate %zu bytes", alloc);
	while (have < total) {
		if (have == alloc) {
			size_t next = alloc > total / 2 ? total : alloc * 2;
			uint8_t *p = realloc(out->data, next);

			if (!p)
				return idx_fail(DML_ENOMEM, err, errlen, s->path,
						"cannot allocate %zu bytes", next);
			out->data = p;
			alloc = next;
		}
		rc = idx_src_read(s, out->data + have, alloc - have, &got, err, errlen);
		if (rc)
			return rc;
		have += got;
		if (have < alloc)
			return idx_fail(DML_ECONF, err, errlen, s->path,
					"truncated: record %" PRIu64 " of %" PRIu64
					" is incomplete%s",
					(uint64_t)have / out->record_size + 1, out->count,
					s->cut ? " (gzip stream cut short)" : "");
	}
	rc = idx_src_read(s, &extra, 1, &got, err, errlen);
	if (rc)
		return rc;
	if (got)
		return idx_fail(DML_ECONF, err, errlen, s->path,
				"trailing bytes after the last record (%" PRIu64 ")",
				out->count);
	if (s->cut)
		return idx_fail(DML_ECONF, err, errlen, s->path,
				"truncated: gzip stream cut short after the data");
	return 0;
}

int dml_idx_load(const char *path, struct dml_idx *out, char *err, size_t errlen)
{
	struct idx_src src;
	int rc;

	if (err && errlen)
		err[0] = '\0';
	if (out)
		memset(out, 0, sizeof(*out));
	if (!path || !out)
		return idx_fail(DML_EINVAL, err, errlen, path ? path : "(null)",
				"no file or no result given");
	rc = idx_src_open(&src, path, err, errlen);
	if (rc)
		return rc;
	rc = idx_read_header(&src, out, err, errlen);
	if (rc == 0)
		rc = idx_read_data(&src, out, err, errlen);
	idx_src_close(&src);
	if (rc)
		dml_idx_free(out);
	return rc;
}

void dml_idx_free(struct dml_idx *idx)
{
	if (!idx)
		return;
	free(idx->data);
	memset(idx, 0, sizeof(*idx));
}

int dml_idx_load_pair(const char *images, const char *labels, struct dml_idx *img,
		      struct dml_idx *lab, char *err, size_t errlen)
{
	int rc;

	if (!img || !lab)
		return idx_fail(DML_EINVAL, err, errlen, images ? images : "(null)",
				"no result given");
	memset(lab, 0, sizeof(*lab));
	rc = dml_idx_load(images, img, err, errlen);
	if (rc)
		return rc;
	rc = dml_idx_load(labels, lab, err, errlen);
	if (rc == 0 && lab->ndims != 1)
		rc = idx_fail(DML_ECONF, err, errlen, labels,
			      "%" PRIu32 " dimensions (labels must be 1-D)", lab->ndims);
	else if (rc == 0 && lab->count != img->count)
		rc = idx_fail(DML_ECONF, err, errlen, labels,
			      "%" PRIu64 " labels for %" PRIu64 " images in %s",
			      lab->count, img->count, images);
	if (rc) {
		dml_idx_free(img);
		dml_idx_free(lab);
	}
	return rc;
}
