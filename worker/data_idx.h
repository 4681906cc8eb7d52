/*
 * Reader of IDX files, the format of MNIST and Fashion-MNIST: a big-endian
 * magic 0x000008NN (0x08 = unsigned bytes, NN = 1..4 dimensions), NN
 * big-endian uint32 sizes, then the bytes, plain or gzipped (recognised by
 * the gzip magic 1f 8b, whatever the file is called).
 *
 * Must never: trust the header's sizes (data is read incrementally and the
 * buffer grows only as bytes arrive, never past DML_IDX_MAX_BYTES), crash or
 * abort on any file content, or accept a file with bytes missing or left
 * over.
 */
#ifndef DML_WORKER_DATA_IDX_H
#define DML_WORKER_DATA_IDX_H

#include <stddef.h>
#include <stdint.h>

/* The most data bytes (product of all sizes) one file may hold: 1 GiB. */
#define DML_IDX_MAX_BYTES ((uint64_t)1 << 30)

/* The most dimensions the format allows. */
#define DML_IDX_MAX_DIMS 4

/** One loaded IDX file; storage the caller owns, emptied by dml_idx_free. */
struct dml_idx {
	uint32_t ndims;                  /* 1..4 */
	uint32_t dims[DML_IDX_MAX_DIMS]; /* sizes; unused ones are 0 */
	uint64_t count;                  /* records: dims[0] */
	uint64_t record_size;            /* bytes per record: product of dims[1..] */
	uint8_t *data;                   /* count * record_size bytes, malloc'd */
};

/**
 * Load the IDX file at path into out (zeroed first, left zeroed on failure).
 * On failure err (if errlen > 0) says "path: reason", e.g.
 * "path: truncated: record 7 of 10 is incomplete" (records count from 1).
 *
 * @return 0; DML_EINVAL for a NULL path or out; DML_EIO if the file cannot
 * be opened or read; DML_ECONF for bad content (bad magic, data type other
 * than unsigned bytes, 0 or over 4 dimensions, a size of 0, data over
 * DML_IDX_MAX_BYTES, truncation, trailing bytes, a corrupt gzip stream);
 * DML_ENOMEM if the data buffer cannot be allocated.
 */
int dml_idx_load(const char *path, struct dml_idx *out, char *err, size_t errlen);

/** Free what dml_idx_load allocated and zero idx; NULL and zeroed are fine. */
void dml_idx_free(struct dml_idx *idx);

/**
 * Load an images file and its labels file, and check that the labels are
 * 1-D and there is one per image. On failure both are left zeroed and err
 * names the file at fault.
 *
 * @return 0, or the codes of dml_idx_load; DML_ECONF when the two files do
 * not match.
 */
int dml_idx_load_pair(const char *images, const char *labels, struct dml_idx *img,
		      struct dml_idx *lab, char *err, size_t errlen);

#endif
