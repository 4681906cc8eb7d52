/*
 * Key ranges of a job's tables: the sets of [begin, end) ranges a server
 * serves, waits for or received, whether a request's keys are served, and
 * the log lines that name ranges (at most LOG_ITEMS of them, then "and N
 * more").
 *
 * Must never: leave a set unsorted or with overlapping ranges, or write past
 * a log line's buffer.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proto/dml_error.h"
#include "server/job_internal.h"
#include "shard/shardmap.h"
#include "proto/util.h"

/* Ranges named in one log line before "and N more". */
#define LOG_ITEMS 16

/* ---- range sets ---------------------------------------------------------- */

static void ranges_insert(struct key_ranges *r, size_t at, uint64_t begin, uint64_t end)
{
	if (r->n == r->cap) {
		r->cap = r->cap ? r->cap * 2 : 4;
		r->r = dml_xrealloc(r->r, r->cap * sizeof(*r->r));
	}
	if (at < r->n)
		memmove(&r->r[at + 1], &r->r[at], (r->n - at) * sizeof(*r->r));
	r->r[at].begin = begin;
	r->r[at].end = end;
	r->n++;
}

void dml_server_ranges_add(struct key_ranges *r, uint64_t begin, uint64_t end)
{
	size_t i = 0, j;

	if (begin >= end)
		return;
	while (i < r->n && r->r[i].end < begin)
		i++;
	/* r[i..j) overlap or touch [begin, end): they merge into one. */
	for (j = i; j < r->n && r->r[j].begin <= end; j++) {
		if (r->r[j].begin < begin)
			begin = r->r[j].begin;
		if (r->r[j].end > end)
			end = r->r[j].end;
	}
	if (j > i && j < r->n)
		memmove(&r->r[i], &r->r[j], (r->n - j) * sizeof(*r->r));
	r->n -= j - i;
	ranges_insert(r, i, begin, end);
}

/* Take [begin, end) out of the set. */
void dml_server_ranges_sub(struct key_ranges *r, uint64_t begin, uint64_t end)
{
	for (size_t i = 0; i < r->n && begin < end; i++) {
		struct key_range x = r->r[i];

		if (x.end <= begin || x.begin >= end)
			continue;
		if (x.begin < begin && x.end > end) {
			r->r[i].end = begin;
			ranges_insert(r, i + 1, end, x.end);
			return;
		}
		if (x.begin < begin) {
			r->r[i].end = begin;
		} else if (x.end > end) {
			r->r[i].begin = end;
		} else {
			memmove(&r->r[i], &r->r[i + 1], (r->n - i - 1) * sizeof(*r->r));
			r->n--;
			i--;
		}
	}
}

/* Keep only what also lies in keep. */
void dml_server_ranges_intersect(struct key_ranges *r, const struct key_ranges *keep)
{
	struct key_ranges out = { 0 };

	for (size_t i = 0; i < r->n; i++)
		for (size_t j = 0; j < keep->n; j++) {
			uint64_t b = r->r[i].begin > keep->r[j].begin ? r->r[i].begin
								       : keep->r[j].begin;
			uint64_t e = r->r[i].end < keep->r[j].end ? r->r[i].end : keep->r[j].end;

			dml_server_ranges_add(&out, b, e);
		}
	free(r->r);
	*r = out;
}

int dml_server_ranges_cover(const struct key_ranges *r, uint64_t begin, uint64_t end)
{
	size_t lo = 0, hi = r->n;

	if (begin >= end)
		return 1;
	/* Ranges never touch, so a covered range lies inside one of them. */
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (r->r[mid].end <= begin)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo < r->n && r->r[lo].begin <= begin && end <= r->r[lo].end;
}

void dml_server_ranges_clear(struct key_ranges *r)
{
	free(r->r);
	memset(r, 0, sizeof(*r));
}

uint64_t dml_server_table_space(const Dml__TableInfo *info)
{
	return info->dense ? info->keys : DML_SHARD_HASH_SPACE;
}

int dml_server_serves(const struct table_entry *te, int dense, uint64_t begin, uint64_t end,
		      const uint64_t *keys, size_t n)
{
	const struct key_ranges *r = &te->served;

	if (dense)
		return begin > end || dml_server_ranges_cover(r, begin, end) ? 0 : DML_ERANGE;
	/* Everything served: no key needs hashing. */
	if (r->n == 1 && r->r[0].begin == 0 && r->r[0].end >= dml_server_table_space(&te->info))
		return 0;
	for (size_t i = 0; i < n; i++) {
		uint64_t k = te->info.dense ? keys[i] : dml_shard_key_hash(keys[i]);

		if (!dml_server_ranges_cover(r, k, k + 1))
			return DML_ERANGE;
	}
	return 0;
}

/* ---- log lines ------------------------------------------------------------ */

void dml_server_line_add(struct line *l, const char *fmt, ...)
{
	va_list ap;
	int n;

	if (l->len >= sizeof(l->buf) - 1)
		return;
	va_start(ap, fmt);
	n = vsnprintf(l->buf + l->len, sizeof(l->buf) - l->len, fmt, ap);
	va_end(ap);
	if (n > 0)
		l->len += (size_t)n < sizeof(l->buf) - l->len ? (size_t)n
							       : sizeof(l->buf) - l->len - 1;
}

/* "keys 0..499" (dense) or "key hashes 0..2147483647": first and last, as
 * operators count them. */
void dml_server_line_range(struct line *l, const char *sep, const Dml__TableInfo *info,
			   uint64_t begin, uint64_t end)
{
	dml_server_line_add(l, "%s%s %llu..%llu", sep, info->dense ? "keys" : "key hashes",
			    (unsigned long long)begin, (unsigned long long)end - 1);
}

/* Start one item of a list; 0 when the line already names enough. */
int dml_server_line_item(struct line *l)
{
	if (l->items++ < LOG_ITEMS)
		return 1;
	l->dropped++;
	return 0;
}

const char *dml_server_line_text(struct line *l)
{
	if (l->dropped)
		dml_server_line_add(l, " and %u more", l->dropped);
	return l->buf;
}
