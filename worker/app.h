/*
 * Training apps of dml-worker: what a worker runs for a job, behind one
 * table of function pointers (STYLE #13), so that the trainer loop, the
 * profile and the tests treat every app (lsq, mlp, sparse_lr, mf) alike.
 * Apps compute through a backend (backend.h: cpu, cuda).
 *
 * An app is made from a JobSpec (the job file's [job] and [table]
 * sections), learns which data partitions are its own, and then runs one
 * step per clock: pull the parameters it needs, compute on its next batch,
 * push the gradients, each through a struct dml_app_io (libdml in the
 * worker, a local stand-in without network in the profile). The trainer
 * ticks the clock; the app never does.
 *
 * Must never: abort on a spec or an assignment it cannot run (create and
 * set_partitions return DML_EINVAL or DML_ENOMEM with a reason a person can
 * act on), talk to the network other than through its io, keep a pull in
 * flight when step or evaluate returns, or touch a buffer of a push still
 * in flight. Pushes may stay in flight past the end of a step (so a
 * worker's next step overlaps their round trip); the app waits for them
 * before it reuses their buffers, and in drain.
 */
#ifndef DML_WORKER_APP_H
#define DML_WORKER_APP_H

#include <stddef.h>
#include <stdint.h>

#include "worker/backend.h"
#include "worker/dml.h"
#include "proto/dml.pb-c.h"
#include "proto/util.h"

/**
 * Where an app computes: a backend the caller opened (backend.h) and keeps
 * open while the app lives. Apps never open or close it.
 */
struct dml_walk;

struct dml_app_env {
	const char *backend;                 /* "cpu", "cuda" */
	const struct dml_backend_ops *be;
	void *be_ctx;                        /* be->open()'s context */
};

/**
 * The parameter transport of a step: the libdml calls of dml.h, with the
 * first argument an opaque arg. The same rules as libdml apply: buffers
 * stay valid until the handle was waited for.
 */
struct dml_app_io_ops {
	int (*pull_range)(void *arg, uint32_t table, uint64_t begin, uint64_t end,
			  float *out, dml_handle_t *h);
	int (*push_range)(void *arg, uint32_t table, uint64_t begin, uint64_t end,
			  const float *vals, dml_handle_t *h);
	int (*pull)(void *arg, uint32_t table, const uint64_t *keys, size_t n, float *out,
		    dml_handle_t *h);
	int (*push)(void *arg, uint32_t table, const uint64_t *keys, size_t n,
		    const float *vals, dml_handle_t *h);
	int (*wait)(void *arg, dml_handle_t h);
};

struct dml_app_io {
	const struct dml_app_io_ops *ops;
	void *arg;
	uint64_t wait_ns;           /* time spent in dml_app_wait, accumulated */
};

/**
 * Wait for a request of io, counting the time as waiting for the servers
 * (what the worker reports as wait_s; the rest of a step is compute).
 * Apps wait only through this.
 */
static inline int dml_app_wait(struct dml_app_io *io, dml_handle_t h)
{
	uint64_t t0 = dml_now_ns();
	int rc = io->ops->wait(io->arg, h);

	io->wait_ns += dml_now_ns() - t0;
	return rc;
}

/** A table an app reads and writes, as the servers must hold it. */
struct dml_app_table {
	uint32_t id;
	int dense;
	uint32_t width;
	uint64_t keys;              /* dense: key count; sparse: 0 */
};

/** What one step did. */
struct dml_app_step {
	uint64_t examples;          /* examples trained on (0: no data held) */
	double loss;                /* mean training loss of them; NaN when none */
};

struct dml_app {
	const char *name;           /* the job file's app = ... */
	const char *metric;         /* what evaluate computes: "loss", "accuracy" */
	uint32_t default_eval_every; /* clocks between evaluations when the spec says 0 */
	/* A small job file of this app whose step the worker's profile times. */
	const char *profile_job;

	/**
	 * Make the app's state for spec. Returns 0, DML_EINVAL (a spec this
	 * app cannot run: err says why, starting with "app NAME: ") or
	 * DML_ENOMEM. *state is NULL on failure.
	 */
	int (*create)(const Dml__JobSpec *spec, const struct dml_app_env *env, void **state,
		      char *err, size_t errlen);
	/** The tables it uses; *out points into the state. Returns the count. */
	size_t (*tables)(const void *state, const struct dml_app_table **out);
	/**
	 * Train on these of num_partitions partitions from now on (any order,
	 * duplicates ignored). 0, DML_EINVAL (a partition >= num_partitions)
	 * or DML_ENOMEM; the old partitions stay on failure.
	 */
	int (*set_partitions)(void *state, const uint32_t *parts, size_t n,
			      uint32_t num_partitions, char *err, size_t errlen);
	/**
	 * The walk over its training records (walk.h) that set_partitions
	 * sets: each partition starts where the walk knows it stopped, so the
	 * worker notes there the positions its assignment carries, and reads
	 * the positions it reports from there.
	 */
	struct dml_walk *(*walk)(void *state);
	/**
	 * Take batch examples per step from now on instead of the spec's
	 * batch_size (the scheduler splits a clock's examples by the workers'
	 * speeds: LB-BSP). Steps always push the gradient summed over their
	 * examples divided by the spec's batch_size, so each example weighs
	 * the same whichever worker computed it, and an equal split pushes the
	 * batch's mean as before. 0, DML_EINVAL (batch outside 1 ..
	 * dml_job_batch_max(spec): the caller keeps it within) or DML_ENOMEM;
	 * the old size stays on failure.
	 */
	int (*set_batch)(void *state, uint32_t batch, char *err, size_t errlen);
	/**
	 * One step: pull, compute on the next batch, push. The pulls are
	 * waited for; the pushes may not be (drain). Returns 0 or the io's
	 * error (err names what failed: an error of a push of an earlier step
	 * may show here).
	 */
	int (*step)(void *state, struct dml_app_io *io, struct dml_app_step *out, char *err,
		    size_t errlen);
	/** Evaluate the current model (its own pull): *value of `metric`. */
	int (*evaluate)(void *state, struct dml_app_io *io, double *value, char *err,
			size_t errlen);
	/**
	 * Wait for every push still in flight. Whoever ran steps calls it
	 * before closing the io or destroying the app, and before reading the
	 * model back from the servers. 0 or the first push error (err).
	 */
	int (*drain)(void *state, struct dml_app_io *io, char *err, size_t errlen);
	/** Examples in the whole training set. */
	uint64_t (*data_examples)(const void *state);
	/** Free the state; NULL is fine. */
	void (*destroy)(void *state);
};

/** The apps of this build. */
extern const struct dml_app dml_app_lsq;
extern const struct dml_app dml_app_mlp;
extern const struct dml_app dml_app_sparse_lr;
extern const struct dml_app dml_app_mf;

/** Every app of this build, NULL-terminated (apps.c). */
extern const struct dml_app *const dml_apps[];

/** The app called name, or NULL. */
const struct dml_app *dml_app_find(const char *name);

/*
 * The lsq app's pieces, for its tests: example i of the synthetic data set
 * of a seed (x: dim floats, *y its label) given w_true from
 * dml_lsq_true_weights(); and the mean squared error of rows examples with
 * its gradient (grad: dim floats, or NULL; r: rows floats of scratch).
 */
void dml_lsq_true_weights(uint64_t seed, uint32_t dim, float *w_true);
void dml_lsq_example(uint64_t seed, uint64_t i, const float *w_true, uint32_t dim, float *x,
		     float *y);
double dml_lsq_loss_grad(const float *x, const float *y, size_t rows, uint32_t dim,
			 const float *w, float *grad, float *r);

#endif
