/*
 * Error-feedback residuals (residual.h). The hash grows at half full; rows
 * live in one array that moves as it grows, so a row is named by its
 * offset, never a pointer.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "proto/residual.h"
#include "proto/util.h"

struct dml_residual {
	uint32_t width;
	uint64_t dense_keys;      /* > 0: flat, rows indexed by key */
	float *rows;
	uint64_t *slot_key;
	uint32_t *slot_row;       /* row + 1; 0: empty slot */
	size_t nslots, nrows, cap_rows;
};

struct dml_residual *dml_residual_new(uint32_t width, uint64_t dense_keys)
{
	struct dml_residual *r = dml_xcalloc(1, sizeof(*r));

	r->width = width;
	r->dense_keys = dense_keys;
	if (dense_keys) {
		r->rows = dml_xcalloc((size_t)dense_keys * width, sizeof(float));
		r->nrows = (size_t)dense_keys;
	}
	return r;
}

void dml_residual_free(struct dml_residual *r)
{
	if (!r)
		return;
	free(r->rows);
	free(r->slot_key);
	free(r->slot_row);
	free(r);
}

float *dml_residual_slice(struct dml_residual *r, uint64_t begin)
{
	return r->dense_keys ? r->rows + (size_t)begin * r->width : NULL;
}

static size_t slot_of(uint64_t key, size_t nslots)
{
	return (size_t)((key * 0x9e3779b97f4a7c15ull) >> 32) & (nslots - 1);
}

static void rehash(struct dml_residual *r, size_t nslots)
{
	uint64_t *keys = dml_xcalloc(nslots, sizeof(*keys));
	uint32_t *rows = dml_xcalloc(nslots, sizeof(*rows));

	for (size_t i = 0; i < r->nslots; i++) {
		size_t s;

		if (!r->slot_row[i])
			continue;
		for (s = slot_of(r->slot_key[i], nslots); rows[s]; s = (s + 1) & (nslots - 1))
			;
		keys[s] = r->slot_key[i];
		rows[s] = r->slot_row[i];
	}
	free(r->slot_key);
	free(r->slot_row);
	r->slot_key = keys;
	r->slot_row = rows;
	r->nslots = nslots;
}

/* Where key's row starts in rows (floats), made zero when new. */
static size_t row_of(struct dml_residual *r, uint64_t key)
{
	size_t w = r->width, s;

	if (r->dense_keys)
		return (size_t)key * w;
	if ((r->nrows + 1) * 2 > r->nslots)
		rehash(r, r->nslots ? r->nslots * 2 : 64);
	for (s = slot_of(key, r->nslots); r->slot_row[s]; s = (s + 1) & (r->nslots - 1))
		if (r->slot_key[s] == key)
			return (size_t)(r->slot_row[s] - 1) * w;
	if (r->nrows == r->cap_rows) {
		r->cap_rows = r->cap_rows ? r->cap_rows * 2 : 64;
		r->rows = dml_xrealloc(r->rows, r->cap_rows * w * sizeof(float));
	}
	memset(r->rows + r->nrows * w, 0, w * sizeof(float));
	r->slot_key[s] = key;
	r->slot_row[s] = (uint32_t)++r->nrows;
	return (r->nrows - 1) * w;
}

float *dml_residual_take(struct dml_residual *r, const uint64_t *keys, uint64_t begin,
			 size_t n, size_t *at)
{
	size_t w = r->width;
	float *out = dml_xmalloc((n ? n : 1) * w * sizeof(float));

	for (size_t i = 0; i < n; i++)
		at[i] = row_of(r, keys ? keys[i] : begin + i);
	/* Rows first, zeroing after: a key's second copy then reads zero. */
	for (size_t i = 0; i < n; i++) {
		memcpy(out + i * w, r->rows + at[i], w * sizeof(float));
		memset(r->rows + at[i], 0, w * sizeof(float));
	}
	return out;
}

void dml_residual_give(struct dml_residual *r, const size_t *at, size_t n,
		       const float *rows)
{
	size_t w = r->width;

	for (size_t i = 0; i < n; i++)
		for (size_t j = 0; j < w; j++)
			r->rows[at[i] + j] += rows[i * w + j];
}

double dml_residual_l2(const struct dml_residual *r)
{
	size_t n = r->nrows * r->width;
	double sum = 0;

	for (size_t k = 0; k < n; k++)
		sum += (double)r->rows[k] * r->rows[k];
	return sqrt(sum);
}

size_t dml_residual_floats(const struct dml_residual *r)
{
	return r->nrows * r->width;
}
