/*
 * Records and random numbers shared by the apps (app_util.h).
 *
 * Must never: keep a partition twice, or read past the ranges it built.
 */
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "worker/app.h"
#include "worker/app_util.h"
#include "shard/assign.h"
#include "proto/dml_error.h"
#include "proto/job_spec.h"

int dml_app_spec_check(const char *app, const Dml__JobSpec *spec, char *err, size_t errlen)
{
	char why[512], prefix[80];
	size_t n;
	int rc = dml_job_spec_check(spec, why, sizeof(why));

	if (rc == 0)
		return 0;
	n = (size_t)snprintf(prefix, sizeof(prefix), "app %s: ", app);
	/* The app rules of the check name the app already. */
	return dml_fail(rc, err, errlen, "%s%s", prefix,
			strncmp(why, prefix, n) == 0 ? why + n : why);
}

static int cmp_u32(const void *x, const void *y)
{
	uint32_t a = *(const uint32_t *)x, b = *(const uint32_t *)y;

	return a < b ? -1 : a > b;
}

int dml_app_fail(char *err, size_t errlen, int rc, const char *app, const char *fmt, ...)
{
	va_list ap;
	int n = snprintf(err, errlen, "app %s: ", app);

	va_start(ap, fmt);
	if (n > 0 && (size_t)n < errlen)
		vsnprintf(err + n, errlen - (size_t)n, fmt, ap);
	va_end(ap);
	return rc;
}

int dml_app_reserve(void **p, size_t *cap, size_t n, size_t size)
{
	size_t next;
	void *q;

	if (n <= *cap)
		return 0;
	if (n > SIZE_MAX / 2 / size)
		return DML_ENOMEM;
	next = n + n / 2;
	if (!(q = realloc(*p, next * size)))
		return DML_ENOMEM;
	*p = q;
	*cap = next;
	return 0;
}

static int u64_cmp(const void *x, const void *y)
{
	uint64_t p = *(const uint64_t *)x, q = *(const uint64_t *)y;

	return p < q ? -1 : p > q;
}

size_t dml_keys_unique(uint64_t *keys, size_t n)
{
	size_t m = 0;

	qsort(keys, n, sizeof(*keys), u64_cmp);
	for (size_t i = 0; i < n; i++)
		if (m == 0 || keys[m - 1] != keys[i])
			keys[m++] = keys[i];
	return m;
}

uint32_t dml_keys_index(const uint64_t *keys, size_t n, uint64_t key)
{
	size_t lo = 0, hi = n;

	while (hi - lo > 1) {
		size_t mid = lo + (hi - lo) / 2;

		if (keys[mid] <= key)
			lo = mid;
		else
			hi = mid;
	}
	return (uint32_t)lo;
}

int dml_records_set(struct dml_records *r, uint64_t n, const uint32_t *parts, size_t nparts,
		    uint32_t num_partitions, char *err, size_t errlen)
{
	struct dml_records t = { 0 };
	size_t cap = nparts ? nparts : 1;
	uint32_t *sorted;

	for (size_t i = 0; i < nparts; i++)
		if (parts[i] >= num_partitions)
			return dml_fail(DML_EINVAL, err, errlen, "partition %" PRIu32 " of %"
					PRIu32 " does not exist", parts[i], num_partitions);
	sorted = malloc(cap * sizeof(*sorted));
	t.begin = malloc(cap * sizeof(*t.begin));
	t.prefix = malloc(cap * sizeof(*t.prefix));
	if (!sorted || !t.begin || !t.prefix) {
		free(sorted);
		dml_records_clear(&t);
		return dml_fail(DML_ENOMEM, err, errlen, "out of memory for %zu partitions",
				nparts);
	}
	if (nparts)
		memcpy(sorted, parts, nparts * sizeof(*sorted));
	qsort(sorted, nparts, sizeof(*sorted), cmp_u32);
	for (size_t i = 0; i < nparts; i++) {
		uint64_t b, e;

		if (i && sorted[i] == sorted[i - 1])
			continue;
		dml_partition_range(n, num_partitions, sorted[i], &b, &e);
		if (e <= b)
			continue;
		t.begin[t.nranges] = b;
		t.prefix[t.nranges++] = t.total;
		t.total += e - b;
	}
	free(sorted);
	dml_records_clear(r);
	*r = t;
	return 0;
}

uint64_t dml_records_at(const struct dml_records *r, uint64_t pos)
{
	size_t lo = 0, hi = r->nranges;

	/* The last range whose prefix is <= pos. */
	while (hi - lo > 1) {
		size_t mid = lo + (hi - lo) / 2;

		if (r->prefix[mid] <= pos)
			lo = mid;
		else
			hi = mid;
	}
	return r->begin[lo] + (pos - r->prefix[lo]);
}

void dml_records_clear(struct dml_records *r)
{
	free(r->begin);
	free(r->prefix);
	memset(r, 0, sizeof(*r));
}

struct scored {
	float s;
	int pos;
};

/* By score, NaN first, so that equal scores end up side by side. */
static int scored_cmp(const void *x, const void *y)
{
	float a = ((const struct scored *)x)->s, b = ((const struct scored *)y)->s;

	if (isnan(a) || isnan(b))
		return isnan(b) - isnan(a);
	return a < b ? -1 : a > b;
}

double dml_auc(const float *scores, const float *labels, size_t n)
{
	struct scored *v = malloc((n ? n : 1) * sizeof(*v));
	double pos = 0, rank_sum = 0;
	size_t i = 0;

	if (!v)
		return NAN;
	for (size_t k = 0; k < n; k++) {
		v[k] = (struct scored){ scores[k], labels[k] > 0.5f };
		pos += v[k].pos;
	}
	qsort(v, n, sizeof(*v), scored_cmp);
	/* Mann-Whitney: the positives' ranks (from 1), a tie group sharing
	 * its mean rank. */
	while (i < n) {
		size_t j = i, group_pos = 0;

		while (j < n && scored_cmp(&v[i], &v[j]) == 0)
			group_pos += (size_t)v[j++].pos;
		rank_sum += (double)group_pos * ((double)(i + 1) + (double)j) / 2.0;
		i = j;
	}
	free(v);
	if (pos == 0 || pos == (double)n)
		return NAN;
	return (rank_sum - pos * (pos + 1) / 2.0) / (pos * ((double)n - pos));
}

uint64_t dml_rng_mix64(uint64_t z)
{
	z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
	z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
	return z ^ (z >> 31);
}

uint64_t dml_rng_next(uint64_t *state)
{
	return dml_rng_mix64(*state += UINT64_C(0x9e3779b97f4a7c15));
}

double dml_rng_uniform(uint64_t *state)
{
	return ((double)(dml_rng_next(state) >> 11) + 0.5) / 9007199254740992.0;
}

double dml_rng_normal(uint64_t *state)
{
	double u = dml_rng_uniform(state), v = dml_rng_uniform(state);

	return sqrt(-2.0 * log(u)) * cos(6.283185307179586 * v);
}
