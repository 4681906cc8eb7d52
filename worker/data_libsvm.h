/*
 * Reader of libsvm (svmlight) text files, the format of most sparse
 * data sets (click logs, text): one record per line,
 * `LABEL [IDX:VAL ...] [# comment]`, plain or gzipped (recognised by the
 * gzip magic 1f 8b, whatever the file is called). IDX is a decimal uint64
 * in any order; an IDX given twice in a record has its values summed, so
 * each record comes out with unique ids in increasing order. VAL is a
 * finite float. Empty lines and `#` comment lines are skipped (they still
 * count as lines). Labels are -1/+1 or 0/1 for binary data (kept as 0/1),
 * or non-negative integers for one-vs-rest classes; a file mixing -1 with
 * 0 or with a label above 1 is refused.
 *
 * Must never: trust the input (arrays grow geometrically as records
 * arrive, never past the caps below), crash or abort on any file content,
 * or report an error without the file's path and the line at fault.
 */
#ifndef DML_WORKER_DATA_LIBSVM_H
#define DML_WORKER_DATA_LIBSVM_H

#include <stddef.h>
#include <stdint.h>

/* The most IDX:VAL entries one file may hold, summed over its records. */
#define DML_LIBSVM_MAX_NNZ ((uint64_t)1 << 31)
/* The most records one file may hold. */
#define DML_LIBSVM_MAX_RECORDS ((uint64_t)1 << 31)
/* The longest line, bytes without its newline. */
#define DML_LIBSVM_LINE_MAX ((size_t)1 << 20)
/* The most classes (labels 0..DML_LIBSVM_MAX_CLASSES-1): a table's width. */
#define DML_LIBSVM_MAX_CLASSES 65536u

/**
 * A loaded file as compressed sparse rows; storage the caller owns,
 * emptied by dml_libsvm_free. Record r holds the entries
 * offsets[r] .. offsets[r+1]-1 of ids and vals, ids increasing.
 */
struct dml_libsvm {
	uint64_t count;        /* records */
	uint64_t *offsets;     /* count + 1 */
	uint64_t *ids;         /* offsets[count] feature ids */
	float *vals;
	float *labels;         /* count: 0/1 for binary, else 0..classes-1 */
	uint32_t classes;      /* 2 for binary, else max label + 1 */
	uint64_t max_nnz;      /* entries of the longest record */
};

/**
 * Load the libsvm file at path into out (zeroed first, left zeroed on
 * failure). On failure err (if errlen > 0) says "path: record N: reason"
 * (N the line number, from 1) or "path: reason" for what concerns the
 * whole file.
 *
 * @return 0; DML_EINVAL for a NULL path or out; DML_EIO if the file cannot
 * be opened or read; DML_ECONF for bad content (bad label, bad IDX:VAL
 * pair, value not finite, a line over DML_LIBSVM_LINE_MAX, more than
 * DML_LIBSVM_MAX_NNZ entries or DML_LIBSVM_MAX_RECORDS records, a corrupt
 * or cut gzip stream, no records at all); DML_ENOMEM.
 */
int dml_libsvm_load(const char *path, struct dml_libsvm *out, char *err, size_t errlen);

/** Free what dml_libsvm_load allocated and zero d; NULL and zeroed are fine. */
void dml_libsvm_free(struct dml_libsvm *d);

#endif
