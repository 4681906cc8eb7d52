/*
 * Rating-triplet reader (see data_triplets.h): lines come from the shared
 * text reader (data_text.h: plain or gzipped, at most DML_TEXT_LINE_MAX
 * bytes), each line is split into fields at blanks and commas, and every
 * field is parsed strictly before the rating joins the arrays.
 *
 * Must never: read a field past its line, let the arrays grow past
 * DML_TRIPLETS_MAX_RECORDS, take a line for the header once a rating has
 * been read, or report an error without path and line.
 */
#include <float.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "worker/data_text.h"
#include "worker/data_triplets.h"
#include "proto/dml_error.h"

/* USER ITEM RATING TIMESTAMP: the most fields a line may have. */
#define FIELDS 4
/* The most bytes of a field quoted in a message. */
#define QUOTE_MAX 40

/* A file being read: its lines, and what the arrays and statistics hold. */
struct reader {
	struct dml_text_reader t;
	uint64_t cap;             /* ratings each array holds */
	int past_header;          /* no later line can be the header */
	double sum;               /* of the ratings, for the mean */
};

static const char *const field_name[FIELDS] = { "user id", "item id", "rating", "timestamp" };

/*
 * Split [p, end) into fields: a separator is a run of blanks holding at
 * most one comma, so "1, 2 ,3" is three fields and "1,,3" three with an
 * empty one in the middle. The first FIELDS go to b/e; the count is of
 * all of them (0 for a blank line).
 */
static size_t split(const char *p, const char *end, const char **b, const char **e)
{
	size_t n = 0;

	while (p < end && dml_text_is_space(*p))
		p++;
	if (p == end)
		return 0;
	for (;;) {
		const char *f = p;

		while (p < end && *p != ',' && !dml_text_is_space(*p))
			p++;
		if (n < FIELDS) {
			b[n] = f;
			e[n] = p;
		}
		n++;
		while (p < end && dml_text_is_space(*p))
			p++;
		if (p == end)
			return n;
		/* A comma always opens a field, empty if another comma or the
		 * end of the line comes first. */
		if (*p == ',') {
			p++;
			while (p < end && dml_text_is_space(*p))
				p++;
		}
	}
}

static int quote_len(const char *b, const char *e)
{
	return (int)(e - b < QUOTE_MAX ? e - b : QUOTE_MAX);
}

/* A field of digits only: what parse_u64 refused was too big, not wrong. */
static int all_digits(const char *b, const char *e)
{
	if (b == e)
		return 0;
	for (; b < e; b++)
		if (*b < '0' || *b > '9')
			return 0;
	return 1;
}

static int parse_id(struct reader *r, int f, const char *b, const char *e, uint64_t *id)
{
	if (dml_text_parse_u64(b, e, id) == 0)
		return 0;
	if (all_digits(b, e))
		return dml_text_fail(&r->t, DML_ECONF, 1, "%s '%.*s' is over %" PRIu64,
				     field_name[f], quote_len(b, e), b, UINT64_MAX);
	return dml_text_fail(&r->t, DML_ECONF, 1, "%s '%.*s' is not a decimal integer",
			     field_name[f], quote_len(b, e), b);
}

static int parse_rating(struct reader *r, const char *b, const char *e, float *rating)
{
	double v;

	if (dml_text_parse_double(b, e, &v) != 0)
		return dml_text_fail(&r->t, DML_ECONF, 1, "rating '%.*s' is not a number",
				     quote_len(b, e), b);
	if (!isfinite(v))
		return dml_text_fail(&r->t, DML_ECONF, 1, "rating '%.*s' is not a finite number",
				     quote_len(b, e), b);
	if (fabs(v) > FLT_MAX)
		return dml_text_fail(&r->t, DML_ECONF, 1,
				     "rating '%.*s' is beyond what a float holds",
				     quote_len(b, e), b);
	*rating = (float)v;
	return 0;
}

/* A decimal int64, '-' allowed: checked although its value is not kept. */
static int check_timestamp(struct reader *r, const char *b, const char *e)
{
	const char *d = b < e && *b == '-' ? b + 1 : b;
	uint64_t v, max = d > b ? (uint64_t)INT64_MAX + 1 : (uint64_t)INT64_MAX;

	if (dml_text_parse_u64(d, e, &v) == 0 && v <= max)
		return 0;
	if (all_digits(d, e))
		return dml_text_fail(&r->t, DML_ECONF, 1,
				     "timestamp '%.*s' is beyond a 64-bit integer",
				     quote_len(b, e), b);
	return dml_text_fail(&r->t, DML_ECONF, 1, "timestamp '%.*s' is not a decimal integer",
			     quote_len(b, e), b);
}

/* The rating of the line in progress joins d. */
static int rating_add(struct reader *r, struct dml_triplets *d, uint64_t user, uint64_t item,
		      float rating)
{
	uint64_t cap = r->cap;

	if (d->count >= DML_TRIPLETS_MAX_RECORDS)
		return dml_text_fail(&r->t, DML_ECONF, 1, "more than %" PRIu64 " ratings",
				     DML_TRIPLETS_MAX_RECORDS);
	/* Each array has its own try at growing: one that fails leaves the
	 * others bigger than r->cap says, which is harmless. */
	if (dml_text_grow((void **)&d->users, &cap, d->count + 1, sizeof(*d->users),
			  DML_TRIPLETS_MAX_RECORDS) != 0)
		return dml_text_fail(&r->t, DML_ENOMEM, 1, "out of memory for the ratings");
	cap = r->cap;
	if (dml_text_grow((void **)&d->items, &cap, d->count + 1, sizeof(*d->items),
			  DML_TRIPLETS_MAX_RECORDS) != 0)
		return dml_text_fail(&r->t, DML_ENOMEM, 1, "out of memory for the ratings");
	cap = r->cap;
	if (dml_text_grow((void **)&d->ratings, &cap, d->count + 1, sizeof(*d->ratings),
			  DML_TRIPLETS_MAX_RECORDS) != 0)
		return dml_text_fail(&r->t, DML_ENOMEM, 1, "out of memory for the ratings");
	r->cap = cap;
	if (d->count == 0 || rating < d->min)
		d->min = rating;
	if (d->count == 0 || rating > d->max)
		d->max = rating;
	r->sum += rating;
	d->users[d->count] = user;
	d->items[d->count] = item;
	d->ratings[d->count++] = rating;
	return 0;
}

/* One line: nothing (blank, a comment, the header) or a rating. */
static int line_parse(struct reader *r, struct dml_triplets *d)
{
	const char *p = r->t.line, *end = r->t.line + r->t.llen;
	const char *b[FIELDS] = { NULL }, *e[FIELDS] = { NULL };
	uint64_t user = 0, item = 0;
	float rating = 0;
	size_t n;
	double v;
	int rc;

	while (p < end && dml_text_is_space(*p))
		p++;
	if (p == end || *p == '#')
		return 0;
	n = split(p, end, b, e);
	if (!r->past_header) {
		r->past_header = 1;
		/* userId,movieId,... - but not a line that opens with a
		 * comma, which is a rating missing its user. */
		if (e[0] > b[0] && dml_text_parse_double(b[0], e[0], &v) != 0)
			return 0;
	}
	if (n < 3 || n > FIELDS)
		return dml_text_fail(&r->t, DML_ECONF, 1,
				     "expected USER ITEM RATING [TIMESTAMP], got %zu field%s", n,
				     n == 1 ? "" : "s");
	for (size_t f = 0; f < n; f++)
		if (b[f] == e[f])
			return dml_text_fail(&r->t, DML_ECONF, 1, "%s is empty", field_name[f]);
	if ((rc = parse_id(r, 0, b[0], e[0], &user)) != 0 ||
	    (rc = parse_id(r, 1, b[1], e[1], &item)) != 0 ||
	    (rc = parse_rating(r, b[2], e[2], &rating)) != 0 ||
	    (n == FIELDS && (rc = check_timestamp(r, b[3], e[3])) != 0))
		return rc;
	return rating_add(r, d, user, item, rating);
}

int dml_triplets_load(const char *path, struct dml_triplets *out, char *err, size_t errlen)
{
	struct reader r = { .cap = 0 };
	int rc, got;

	dml_text_init(&r.t, path, DML_TEXT_LINE_MAX, err, errlen);
	if (out)
		memset(out, 0, sizeof(*out));
	if (!path || !out)
		return dml_text_fail(&r.t, DML_EINVAL, 0, "no file or no result given");
	rc = dml_text_open(&r.t);
	while (!rc && !(rc = dml_text_line(&r.t, &got)) && got)
		rc = line_parse(&r, out);
	if (!rc && out->count == 0)
		rc = dml_text_fail(&r.t, DML_ECONF, 0, "no ratings");
	if (!rc)
		out->mean = r.sum / (double)out->count;
	dml_text_close(&r.t);
	if (rc)
		dml_triplets_free(out);
	return rc;
}

void dml_triplets_free(struct dml_triplets *d)
{
	if (!d)
		return;
	free(d->users);
	free(d->items);
	free(d->ratings);
	memset(d, 0, sizeof(*d));
}
