/*
 * Click-like synthetic data for sparse_lr: record i of a seed is a set of
 * binary features whose ids follow a Zipf law over a vocabulary (a few ids
 * are in most records, most ids are rare), and a 0/1 label drawn from a
 * hidden logistic model whose weights are a function of (seed, id), so the
 * best achievable AUC is known: the true model's own AUC on the records.
 * The sparse_lr app (data = synthetic) and dml-bench gen-clicks both make
 * their records here, so a file written by one and the records of the other
 * are the same for the same seed.
 *
 * Must never: depend on anything but (seed, vocab, record index) for a
 * record (no global state, no platform-dependent random numbers), allocate
 * per record, or write more than DML_CLICKS_MAX_NNZ features.
 */
#ifndef DML_WORKER_DATA_SYNTH_CLICKS_H
#define DML_WORKER_DATA_SYNTH_CLICKS_H

#include <stddef.h>
#include <stdint.h>

/* The vocabulary (distinct feature ids) of the app's synthetic data. */
#define DML_CLICKS_VOCAB ((uint64_t)1 << 22)
/*
 * Test records are records TEST_BASE + i of the same generator (the app's
 * test_data = synthetic, dml-bench gen-clicks --test): the same hidden
 * model, records no training run reaches.
 */
#define DML_CLICKS_TEST_BASE ((uint64_t)1 << 62)
/* The most features one record may have; size ids/vals arrays by this. */
#define DML_CLICKS_MAX_NNZ 64
/* Defaults dml_clicks_init sets. */
#define DML_CLICKS_ZIPF_S 1.1
#define DML_CLICKS_MIN_NNZ 10
#define DML_CLICKS_MAX_NNZ_DEFAULT 40
#define DML_CLICKS_BIAS (-1.5)
#define DML_CLICKS_W_SCALE 0.28

/**
 * A generator: parameters and the precomputed constants of the Zipf sampler
 * (a small table for the frequent ranks, rejection-inversion for the rest:
 * memory independent of vocab). Storage the caller owns, emptied by
 * dml_clicks_free; fields are read-only after dml_clicks_init, and one
 * generator may serve many threads at once.
 */
struct dml_clicks {
	uint64_t seed, vocab;
	double zipf_s;            /* Zipf exponent, > 0 */
	uint32_t min_nnz, max_nnz;/* features per record, uniform in between */
	double bias;              /* the true model's intercept */
	double w_scale;           /* true weights: mean 0, sd w_scale, near normal */
	/* precomputed: ranks 1..head_n from a cumulative table, the rest by
	 * rejection-inversion (Hormann-Derflinger) over head_n + 1..vocab */
	double *head_cum;         /* head_n entries: P(rank <= k + 1) */
	uint32_t *head_guide;     /* bucket j of [0, head_cum[head_n - 1]): its first k */
	double guide_scale;       /* buckets per unit of probability */
	uint32_t head_n;
	double p_head;            /* P(rank <= head_n) */
	double h_x1, h_n, zipf_t; /* the tail's H(k0 + 0.5) - h(k0), H(n + 0.5), s */
	uint32_t id_bits;         /* ids lie in [0, 2^id_bits), the scrambled ranks */
	uint64_t id_key, w_key, rec_key;
};

/**
 * Set g up for seed and vocab (0 means DML_CLICKS_VOCAB) with the default
 * parameters above. Ids of records are distinct within a record, lie in
 * [0, 2^ceil(log2 vocab)), and the i-th most frequent rank maps to a
 * scrambled id, so frequent ids are not small numbers.
 *
 * @return 0; DML_EINVAL for a NULL g or a vocab below 4 * the most features
 * per record or above 2^40; DML_ENOMEM. g is zeroed on failure.
 */
int dml_clicks_init(struct dml_clicks *g, uint64_t seed, uint64_t vocab);

/** Free what g holds and zero it; fine on a zeroed g. */
void dml_clicks_free(struct dml_clicks *g);

/**
 * Record i: its features (ids in increasing order, vals all 1.0f) into ids
 * and vals (DML_CLICKS_MAX_NNZ entries each), their number into *nnz
 * (min_nnz..max_nnz), and its label (0.0f or 1.0f) into *label. The same
 * (g's seed and vocab, i) always give the same record.
 */
void dml_clicks_record(const struct dml_clicks *g, uint64_t i, uint64_t *ids, float *vals,
		       size_t *nnz, float *label);

/**
 * The true model's logit, bias + sum vals[j] * w_true(ids[j]), of a record:
 * labels are Bernoulli(sigmoid(this)). Its AUC on records is the AUC a
 * learned model can at best hope for.
 */
double dml_clicks_true_score(const struct dml_clicks *g, const uint64_t *ids, const float *vals,
			     size_t nnz);

/** The true weight of feature id (the hidden model's coefficient). */
double dml_clicks_true_weight(const struct dml_clicks *g, uint64_t id);

#endif
