/*
 * Synthetic ratings for the mf app: rating i of a seed is (user, item,
 * rating) with the user and the item drawn uniformly, and the rating the
 * value of a hidden low-rank model plus noise:
 *
 *     rating = DML_RATINGS_MEAN + P(user) . Q(item) + DML_RATINGS_NOISE * n
 *
 * P and Q hold DML_RATINGS_RANK factors per id, each normal with variance
 * 1/sqrt(rank) (so the product has variance 1), a function of (seed, id);
 * n is standard normal. The best RMSE a model can reach on such ratings is
 * the noise's, DML_RATINGS_NOISE; predicting the mean scores about
 * sqrt(1 + noise^2).
 *
 * Must never: depend on anything but (seed, users, items, index) for a
 * rating, or allocate.
 */
#ifndef DML_WORKER_DATA_SYNTH_RATINGS_H
#define DML_WORKER_DATA_SYNTH_RATINGS_H

#include <stdint.h>

#define DML_RATINGS_RANK 8
#define DML_RATINGS_MEAN 3.5
#define DML_RATINGS_NOISE 0.25
/* Test ratings are ratings TEST_BASE + i: the same users, items and
 * hidden model, pairs drawn afresh. */
#define DML_RATINGS_TEST_BASE ((uint64_t)1 << 62)

struct dml_ratings {
	uint64_t seed, users, items;
};

/** Rating i into *user, *item and *rating. */
void dml_ratings_record(const struct dml_ratings *g, uint64_t i, uint64_t *user,
			uint64_t *item, float *rating);

/** The hidden model's rating of (user, item), noise left out. */
double dml_ratings_true(const struct dml_ratings *g, uint64_t user, uint64_t item);

#endif
