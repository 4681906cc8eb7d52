/*
 * libsvm reader (see data_libsvm.h): lines come from the shared text
 * reader (data_text.h: plain or gzipped, bounded length), each line is
 * split into tokens and every token parsed strictly on a bounded copy of
 * its own, and a record's entries are sorted and merged before they join
 * the arrays.
 *
 * Must never: read a token past its line, let a line, a record or the
 * arrays grow past their caps, parse a number with a function that skips
 * what it does not understand, or report an error without path and line.
 */
#include <float.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "worker/data_libsvm.h"
#include "worker/data_text.h"
#include "proto/dml_error.h"

struct pair {
	uint64_t id;
	double val;
};

/* A file being read: its lines, and the record and labels in progress. */
struct reader {
	struct dml_text_reader t;
	struct pair *pairs;       /* the record in progress */
	size_t npairs, pcap;
	uint64_t rcap, ecap;      /* records and entries the arrays hold */
	int seen_minus, seen_zero;
	int64_t max_label;
};

/* The label as 0/1 or a class; the file's kind of labels is kept in r. */
static int parse_label(struct reader *r, const char *b, const char *e, float *label)
{
	int len = (int)(e - b < 32 ? e - b : 32);
	double v;
	int64_t k;

	if (dml_text_parse_double(b, e, &v) != 0 || !isfinite(v) || v != floor(v) || v < -1 ||
	    v >= DML_LIBSVM_MAX_CLASSES)
		return dml_text_fail(&r->t, DML_ECONF, 1,
				     "bad label '%.*s' (-1/+1, or a class 0..%u)", len, b,
				     DML_LIBSVM_MAX_CLASSES - 1);
	k = (int64_t)v;
	if (k == -1 && (r->seen_zero || r->max_label > 1))
		return dml_text_fail(&r->t, DML_ECONF, 1, "label -1 in a file of %s labels",
				     r->max_label > 1 ? "class" : "0/1");
	if ((k == 0 || k > 1) && r->seen_minus)
		return dml_text_fail(&r->t, DML_ECONF, 1,
				     "label %" PRId64 " in a file of -1/+1 labels", k);
	r->seen_minus |= k == -1;
	r->seen_zero |= k == 0;
	if (k > r->max_label)
		r->max_label = k;
	*label = k < 0 ? 0.0f : (float)k;
	return 0;
}

static int parse_pair(struct reader *r, const char *b, const char *e)
{
	const char *colon = memchr(b, ':', (size_t)(e - b));
	int len = (int)(e - b < 40 ? e - b : 40);
	uint64_t id, cap = r->pcap;
	double v;

	if (!colon)
		return dml_text_fail(&r->t, DML_ECONF, 1, "bad pair '%.*s' (not IDX:VAL)", len, b);
	if (dml_text_parse_u64(b, colon, &id) != 0)
		return dml_text_fail(&r->t, DML_ECONF, 1,
				     "bad pair '%.*s' (IDX is not a decimal uint64)", len, b);
	if (dml_text_parse_double(colon + 1, e, &v) != 0)
		return dml_text_fail(&r->t, DML_ECONF, 1, "bad pair '%.*s' (VAL is not a number)",
				     len, b);
	if (!isfinite(v) || fabs(v) > FLT_MAX)
		return dml_text_fail(&r->t, DML_ECONF, 1, "value of '%.*s' is not a finite float",
				     len, b);
	/* A line of at most 1 MiB holds at most half as many pairs. */
	if (dml_text_grow((void **)&r->pairs, &cap, r->npairs + 1, sizeof(*r->pairs),
			  DML_LIBSVM_LINE_MAX / 2 + 1) != 0)
		return dml_text_fail(&r->t, DML_ENOMEM, 1, "out of memory for the record");
	r->pcap = (size_t)cap;
	r->pairs[r->npairs++] = (struct pair){ .id = id, .val = v };
	return 0;
}

static int pair_cmp(const void *x, const void *y)
{
	uint64_t a = ((const struct pair *)x)->id, b = ((const struct pair *)y)->id;

	return a < b ? -1 : a > b;
}

/* Sort the record's pairs by id and sum those of one id. */
static int pairs_merge(struct reader *r)
{
	size_t n = 0;

	for (size_t i = 1; i < r->npairs; i++) {
		if (r->pairs[i].id <= r->pairs[i - 1].id) {
			qsort(r->pairs, r->npairs, sizeof(*r->pairs), pair_cmp);
			break;
		}
	}
	for (size_t i = 0; i < r->npairs; i++) {
		if (n && r->pairs[n - 1].id == r->pairs[i].id)
			r->pairs[n - 1].val += r->pairs[i].val;
		else
			r->pairs[n++] = r->pairs[i];
		if (fabs(r->pairs[n - 1].val) > FLT_MAX)
			return dml_text_fail(&r->t, DML_ECONF, 1, "the values of id %" PRIu64
					     " sum to more than a float holds", r->pairs[n - 1].id);
	}
	r->npairs = n;
	return 0;
}

/* The record of the line in progress joins d. */
static int record_add(struct reader *r, struct dml_libsvm *d, float label)
{
	uint64_t nnz = d->offsets ? d->offsets[d->count] : 0;
	uint64_t rcap = r->rcap;

	if (d->count >= DML_LIBSVM_MAX_RECORDS)
		return dml_text_fail(&r->t, DML_ECONF, 1, "more than %" PRIu64 " records",
				     DML_LIBSVM_MAX_RECORDS);
	if (nnz + r->npairs > DML_LIBSVM_MAX_NNZ)
		return dml_text_fail(&r->t, DML_ECONF, 1, "more than %" PRIu64 " entries in all",
				     DML_LIBSVM_MAX_NNZ);
	if (dml_text_grow((void **)&d->offsets, &rcap, d->count + 2, sizeof(*d->offsets),
			  DML_LIBSVM_MAX_RECORDS + 1) != 0)
		return dml_text_fail(&r->t, DML_ENOMEM, 1, "out of memory for the records");
	rcap = r->rcap;
	if (dml_text_grow((void **)&d->labels, &rcap, d->count + 2, sizeof(*d->labels),
			  DML_LIBSVM_MAX_RECORDS + 1) != 0)
		return dml_text_fail(&r->t, DML_ENOMEM, 1, "out of memory for the records");
	r->rcap = rcap;
	rcap = r->ecap;
	if (dml_text_grow((void **)&d->ids, &rcap, nnz + r->npairs, sizeof(*d->ids),
			  DML_LIBSVM_MAX_NNZ) != 0)
		return dml_text_fail(&r->t, DML_ENOMEM, 1, "out of memory for the entries");
	rcap = r->ecap;
	if (dml_text_grow((void **)&d->vals, &rcap, nnz + r->npairs, sizeof(*d->vals),
			  DML_LIBSVM_MAX_NNZ) != 0)
		return dml_text_fail(&r->t, DML_ENOMEM, 1, "out of memory for the entries");
	r->ecap = rcap;
	if (d->count == 0)
		d->offsets[0] = 0;
	for (size_t i = 0; i < r->npairs; i++) {
		d->ids[nnz + i] = r->pairs[i].id;
		d->vals[nnz + i] = (float)r->pairs[i].val;
	}
	d->labels[d->count++] = label;
	d->offsets[d->count] = nnz + r->npairs;
	if (r->npairs > d->max_nnz)
		d->max_nnz = r->npairs;
	return 0;
}

/* One line: nothing (empty, a comment) or a record. */
static int line_parse(struct reader *r, struct dml_libsvm *d)
{
	const char *hash = memchr(r->t.line, '#', r->t.llen);
	const char *p = r->t.line, *end = hash ? hash : r->t.line + r->t.llen, *b, *e;
	float label = 0;
	int rc;

	if (!dml_text_token(&p, end, &b, &e))
		return 0;
	if ((rc = parse_label(r, b, e, &label)) != 0)
		return rc;
	r->npairs = 0;
	while (dml_text_token(&p, end, &b, &e))
		if ((rc = parse_pair(r, b, e)) != 0)
			return rc;
	if ((rc = pairs_merge(r)) != 0)
		return rc;
	return record_add(r, d, label);
}

/* ---- the file ------------------------------------------------------------ */

int dml_libsvm_load(const char *path, struct dml_libsvm *out, char *err, size_t errlen)
{
	struct reader r = { .pairs = NULL };
	int rc, got;

	dml_text_init(&r.t, path, DML_LIBSVM_LINE_MAX, err, errlen);
	if (out)
		memset(out, 0, sizeof(*out));
	if (!path || !out)
		return dml_text_fail(&r.t, DML_EINVAL, 0, "no file or no result given");
	rc = dml_text_open(&r.t);
	while (!rc && !(rc = dml_text_line(&r.t, &got)) && got)
		rc = line_parse(&r, out);
	if (!rc && out->count == 0)
		rc = dml_text_fail(&r.t, DML_ECONF, 0, "no records");
	if (!rc)
		out->classes = r.max_label > 1 ? (uint32_t)r.max_label + 1 : 2;
	dml_text_close(&r.t);
	free(r.pairs);
	if (rc)
		dml_libsvm_free(out);
	return rc;
}

void dml_libsvm_free(struct dml_libsvm *d)
{
	if (!d)
		return;
	free(d->offsets);
	free(d->ids);
	free(d->vals);
	free(d->labels);
	memset(d, 0, sizeof(*d));
}
