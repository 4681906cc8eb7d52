/*
 * Synthetic ratings (see data_synth_ratings.h): every number comes from
 * splitmix64 streams keyed by (seed, what, id), so any worker makes any
 * rating alone, in any order.
 */
#include <math.h>

#include "worker/app_util.h"
#include "worker/data_synth_ratings.h"

#define STREAM_USER UINT64_C(0x3c6ef372fe94f82b)
#define STREAM_ITEM UINT64_C(0xa54ff53a5f1d36f1)
#define STREAM_PAIR UINT64_C(0x510e527fade682d1)
#define STREAM_NOISE UINT64_C(0x9b05688c2b3e6c1f)

/* The factors of id in the stream of what (P or Q). */
static void factors(const struct dml_ratings *g, uint64_t what, uint64_t id, double *f)
{
	uint64_t state = dml_rng_mix64(g->seed ^ what ^ dml_rng_mix64(id));
	double sd = pow(DML_RATINGS_RANK, -0.25);

	for (int j = 0; j < DML_RATINGS_RANK; j++)
		f[j] = dml_rng_normal(&state) * sd;
}

double dml_ratings_true(const struct dml_ratings *g, uint64_t user, uint64_t item)
{
	double p[DML_RATINGS_RANK], q[DML_RATINGS_RANK], dot = 0;

	factors(g, STREAM_USER, user, p);
	factors(g, STREAM_ITEM, item, q);
	for (int j = 0; j < DML_RATINGS_RANK; j++)
		dot += p[j] * q[j];
	return DML_RATINGS_MEAN + dot;
}

void dml_ratings_record(const struct dml_ratings *g, uint64_t i, uint64_t *user,
			uint64_t *item, float *rating)
{
	uint64_t state = dml_rng_mix64(g->seed ^ STREAM_PAIR ^ dml_rng_mix64(i));
	uint64_t noise = dml_rng_mix64(g->seed ^ STREAM_NOISE ^ dml_rng_mix64(i));

	*user = dml_rng_next(&state) % (g->users ? g->users : 1);
	*item = dml_rng_next(&state) % (g->items ? g->items : 1);
	*rating = (float)(dml_ratings_true(g, *user, *item) +
			  DML_RATINGS_NOISE * dml_rng_normal(&noise));
}
