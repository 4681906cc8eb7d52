/*
 * dml-bench train internals shared by its source files: the options and
 * paths (bench_train.c), the model's layout, its copies and their scoring
 * (bench_train_eval.c), the single-process and cluster runs
 * (bench_train_runs.c) and the report (bench_train_report.c).
 *
 * Nothing declared here may leave a cluster running: train_cluster()
 * takes down what it started, whatever it returns.
 */
#ifndef DML_BENCH_TRAIN_INTERNAL_H
#define DML_BENCH_TRAIN_INTERNAL_H

#include <limits.h>
#include <stddef.h>
#include <stdint.h>

#include "worker/app.h"
#include "tools/bench_cluster.h"
#include "worker/dml.h"
#include "proto/job_spec.h"
#include "worker/local_store.h"

/* The cluster run: a copy of the model this often (BENCH_CLUSTER_POLL_MS
 * between status polls). */
#define TRAIN_SNAP_MS 50
/* Single process: a snapshot every 1/TRAIN_SNAPS_PER_EPOCH of an epoch. */
#define TRAIN_SNAPS_PER_EPOCH 10
/* Epochs the single process trains for when the job sets no max_epochs. */
#define TRAIN_DEFAULT_EPOCHS 15
/* The default target accuracy: the MLP of conf/jobs/mlp.conf reaches it in
 * about 3 epochs with Adam, 5 with SGD at lr 0.1. */
#define TRAIN_DEFAULT_TARGET 0.87
/* The SGD runs' default learning rate. */
#define TRAIN_DEFAULT_SGD_LR 0.1

struct train_opts {
	const char *job, *build;
	unsigned workers, servers, threads;
	double target, max_seconds;
	int skip_cluster, skip_single, keep, verbose;
	int no_torch;             /* --torch no */
	double sgd_lr;            /* the SGD runs' learning rate */
	/* bench_train_cluster_run(): the fleet and its slowdown */
	const char *cpus;
	const char *zones, *wan;  /* bench_train_cfg's */
	int aggregators;          /* bench_train_cfg's */
	double slow_after_s;
	unsigned slow_worker;
	const char *slow_cpus;
	double smooth_epochs;     /* bench_train_cfg's */
};

struct train_paths {
	char build[PATH_MAX];  /* the build tree */
	char src[PATH_MAX];    /* the source tree; "" when not found */
	char job[PATH_MAX];
};

/* Where each dense table of a job lies in one flat snapshot of the model. */
struct train_layout {
	size_t ntables;
	uint32_t id[DML_JOB_TABLES_MAX];
	uint64_t keys[DML_JOB_TABLES_MAX];
	uint32_t width[DML_JOB_TABLES_MAX];
	size_t off[DML_JOB_TABLES_MAX]; /* floats before table i */
	size_t floats;                  /* in one snapshot */
};

/* One copy of the model, taken at ns (a run's own clock) after examples. */
struct train_snap {
	uint64_t ns;
	double examples;
	float *vals;
};

struct train_series {
	struct train_snap *v;
	size_t n, alloc;
	size_t cap;     /* how many fit in TRAIN_SNAP_BUDGET */
	size_t floats;  /* per snapshot */
	uint64_t every; /* between snapshots: examples or ns, as the run counts */
};

struct train_result {
	int ran;
	double rate;         /* examples/s; NaN when unknown */
	double trained_s;    /* training time the snapshots cover */
	double epochs;       /* epochs trained by the last snapshot */
	int reached;
	double t_target;     /* seconds of training to the first snapshot >= target */
	double ep_target;    /* epochs by then */
	double acc_target;   /* its accuracy */
	double final_acc;    /* the last snapshot's */
	size_t snaps;        /* copies taken since time zero */
	char every[48];      /* how often snapshots were taken */
	char t0[160];        /* cluster: how time zero was found */
	uint64_t t0_ns;      /* cluster: time zero (dml_now_ns) */
	double watch_cpu_s;  /* cluster: CPU the copies and polls cost, dmlctl's too */
	double watch_s;      /* over this long */
	char note[160];      /* cluster: the job's own last evaluation */
	double link_bytes;   /* cluster with zones: bench_train_fig's */
	uint64_t link_examples;
	char refused[256];   /* cluster: why the job was refused */
};

/*
 * The app and a local store that score snapshots: a snapshot is written
 * into the store, and the app evaluates through the store's io, exactly as
 * it would against servers.
 */
struct train_eval {
	const struct dml_app *app;
	void *state;
	struct dml_local_store *store;
	struct dml_app_io io;
	uint64_t data_examples; /* the training set's size */
	float *initial;         /* the model before training */
};

struct train_ctx {
	const struct train_opts *o;
	const struct train_paths *p;
	const Dml__JobSpec *spec;
	struct dml_app_env env;
	struct train_layout layout;
	struct train_eval eval;
	Dml__JobSpec *own_spec;  /* spec, to free */
	/* the cluster's polls, handed over when not NULL */
	struct bench_poll **polls;
	size_t *npolls;
};
/* ---- the model's copies and their scoring (bench_train_eval.c) ---------- */

/** Where the dense tables lie in one copy; DML_EINVAL (logged): not copyable. */
int train_layout_init(const Dml__JobSpec *spec, struct train_layout *l);
/** An empty series of copies of `floats` each, one every `every` (examples or ns). */
void train_series_init(struct train_series *s, size_t floats, uint64_t every);
/** Free every copy. */
void train_series_destroy(struct train_series *s);
/** Room for a new copy at ns after examples: its values to fill in, or NULL (no memory). */
float *train_series_add(struct train_series *s, uint64_t ns, double examples);
/** Forget the last copy (its copy failed). */
void train_series_drop_last(struct train_series *s);
/** r with every figure unknown (NaN). */
void train_result_init(struct train_result *r);
/** Close what train_eval_open() opened; safe on a zeroed e. */
void train_eval_close(struct train_eval *e);
/** The app and local store that score copies; train_eval_close() is due either way. */
int train_eval_open(struct train_eval *e, const Dml__JobSpec *spec,
		    const struct dml_app_env *env, const struct train_layout *l);
/** Copy every table of a local store into vals (layout l). */
int train_store_copy(struct dml_local_store *s, const struct train_layout *l, float *vals);
/**
 * Score the copies taken at or after t0_ns in order until the first at or
 * above target, then the last one, into r (see the definition for window).
 */
int train_series_evaluate(struct train_eval *e, const struct train_layout *l,
			  const struct train_series *s, uint64_t t0_ns, double target,
			  double window, struct train_result *r);

/* ---- the runs (bench_train_runs.c) -------------------------------------- */

/** The epochs the single process trains at most: the job's max_epochs, or a default. */
double train_epoch_limit(const Dml__JobSpec *spec);
/** The single process: train and copy into s, its figures into r. */
int train_single(struct train_ctx *c, struct train_series *s, struct train_result *r);
/**
 * The cluster: start it, run the job, copy the model into s, score the
 * copies into r, and take the cluster down whatever happened.
 */
int train_cluster(struct train_ctx *c, struct train_series *s, struct train_result *r);

/* ---- PyTorch in the same run (bench_train_torch.c) ---------------------- */

/* Whether and how PyTorch runs, and what it said of itself. */
struct train_torch {
	char skip[160];          /* why it is not measured; "" when it is */
	char script[PATH_MAX];   /* bench_torch.py */
	size_t python;           /* which interpreter has torch */
	char version[32];        /* torch.__version__, once it ran */
	unsigned threads;        /* torch.get_num_threads(), once it ran */
};

/** Can PyTorch run this job here? t->skip says why not. */
void train_torch_probe(const struct train_ctx *c, struct train_torch *t);
/** Train spec's model in PyTorch (train_torch_probe() found it): figures into r. */
int train_torch_run(const struct train_ctx *c, const Dml__JobSpec *spec,
		    struct train_torch *t, struct train_result *r);

/* ---- the report (bench_train_report.c) ---------------------------------- */

/* Every run of one dml-bench train: dml and PyTorch with the job's optimizer,
 * both with plain SGD (when the job's is another), and the cluster. */
struct train_runs {
	struct train_result single, single_sgd, torch, torch_sgd, cluster;
	struct train_torch tinfo;
	int sgd_separate;        /* the job's optimizer is not sgd: SGD ran apart */
};

/** What runs where, before the runs; wthreads: OpenBLAS threads a worker uses. */
void train_print_preface(const struct train_ctx *c, const struct train_runs *r,
			 unsigned wthreads);
/** Every run's figures, their ratios and the verdicts, all from this run. */
void train_print_table(const struct train_ctx *c, const struct train_runs *r);

#endif
