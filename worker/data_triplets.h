/*
 * Reader of rating triplets, the data of matrix factorisation: one rating
 * per line, `USER ITEM RATING [TIMESTAMP]`, fields separated by spaces,
 * tabs or commas (MovieLens' u.data and ratings.csv alike), plain or
 * gzipped (recognised by the gzip magic 1f 8b, whatever the file is
 * called). USER and ITEM are decimal uint64 ids, RATING a finite float;
 * a fourth field, if there, must be a decimal integer and is ignored. Empty
 * lines and `#` comment lines are skipped (they still count as lines); a
 * first line whose first field is not a number is taken for a header
 * (e.g. `userId,movieId,rating,timestamp`) and skipped.
 *
 * Must never: trust the input (arrays grow geometrically as records
 * arrive, never past the caps below), crash or abort on any file content,
 * or report an error without the file's path and the line at fault.
 */
#ifndef DML_WORKER_DATA_TRIPLETS_H
#define DML_WORKER_DATA_TRIPLETS_H

#include <stddef.h>
#include <stdint.h>

/* The most ratings one file may hold. */
#define DML_TRIPLETS_MAX_RECORDS ((uint64_t)1 << 31)

/**
 * A loaded file: rating r is (users[r], items[r], ratings[r]), in file
 * order; storage the caller owns, emptied by dml_triplets_free.
 */
struct dml_triplets {
	uint64_t count;        /* ratings */
	uint64_t *users;       /* count each */
	uint64_t *items;
	float *ratings;
	double mean;           /* of the ratings */
	float min, max;        /* the smallest and largest rating */
};

/**
 * Load the triplet file at path into out (zeroed first, left zeroed on
 * failure). On failure err (if errlen > 0) says "path: record N: reason"
 * (N the line number, from 1) or "path: reason" for what concerns the
 * whole file.
 *
 * @return 0; DML_EINVAL for a NULL path or out; DML_EIO if the file cannot
 * be opened or read; DML_ECONF for bad content (too few or too many
 * fields, a bad id, a rating that is not a finite number, a bad
 * timestamp, a line over the line limit, more than
 * DML_TRIPLETS_MAX_RECORDS ratings, a corrupt or cut gzip stream, no
 * ratings at all); DML_ENOMEM.
 */
int dml_triplets_load(const char *path, struct dml_triplets *out, char *err, size_t errlen);

/** Free what dml_triplets_load allocated and zero d; NULL and zeroed are fine. */
void dml_triplets_free(struct dml_triplets *d);

#endif
