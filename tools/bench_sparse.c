/*
 * dml-bench sparse: logistic regression on click-like data at scale, the
 * issue's "sparse_lr at scale" figure. It writes a sparse_lr job (synthetic
 * clicks of worker/data_synth_clicks.h, feature ids hashed into 2^B keys of
 * one sparse table, AdaGrad, one epoch) into the directory of a local
 * cluster (tools/dml-local, through bench_cluster.h), runs it to its end or
 * a time limit, and prints the cluster's examples/s, the epochs done and
 * the job's own last test AUC next to the AUC of the data's hidden true
 * model on the same test records, which is the best a model can hope for.
 *
 * The true AUC is computed here with the generator the app uses, on the
 * records the app evaluates for test_data = synthetic (DML_CLICKS_TEST_BASE
 * + i, i below SPARSE_TEST_EXAMPLES); it costs a fraction of a second.
 *
 * Must never leave a cluster running or its directory behind: errors,
 * SIGINT and SIGTERM stop the job, take the cluster down and remove its
 * directory (unless --keep). Its exit status says whether it ran, not how
 * well the model did.
 */
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "worker/app_util.h"
#include "tools/bench.h"
#include "tools/bench_cluster.h"
#include "tools/bench_opt.h"
#include "tools/bench_sparse.h"
#include "tools/bench_util.h"
#include "worker/data_synth_clicks.h"
#include "proto/dml_error.h"
#include "proto/job_spec.h"
#include "proto/log.h"
#include "proto/util.h"

/* The job: what conf/jobs/sparse_lr.conf sets, at the bench's scale. */
#define SPARSE_SEED 1
#define SPARSE_BATCH 256
#define SPARSE_STALENESS 2
#define SPARSE_LR 0.1
/*
 * The records app_sparse_lr.c evaluates for test_data = synthetic: the
 * first SYNTH_TEST_EXAMPLES (10,000) of the generator's test range. Keep
 * the two equal, or the two AUCs are of different records.
 */
#define SPARSE_TEST_EXAMPLES 10000
/* Evaluations by the job in one epoch (each costs about 40 steps of one
 * worker), besides the one every worker makes at its last clock. */
#define SPARSE_EVALS 10
#define SPARSE_EVAL_EVERY_MIN 100
/* A progress line this often while the job runs. */
#define SPARSE_NOTE_S 10
/* Sleep in slices this long between polls, to notice a signal soon. */
#define SPARSE_SLICE_MS 50

struct sparse_opts {
	uint64_t examples;
	unsigned hash_bits, workers, servers;
	double max_seconds;
	const char *build;
	int keep, verbose;
};

#define S_FIELD(f) offsetof(struct sparse_opts, f)

static const struct bench_opt sparse_opt_rows[] = {
	{ .name = "examples", .arg = "N", .parse = bench_opt_u64, .offset = S_FIELD(examples),
	  .min = 1, .max = UINT64_C(1) << 40, .help = "training records (default 10000000)" },
	{ .name = "hash-bits", .arg = "B", .parse = bench_opt_unsigned,
	  .offset = S_FIELD(hash_bits), .min = 4, .max = 31,
	  .help = "hashed feature space 2^B keys, B 4..31 (default 24)" },
	{ .name = "workers", .arg = "N", .parse = bench_opt_unsigned, .offset = S_FIELD(workers),
	  .min = 1, .max = 256, .help = "cluster workers (default 2)" },
	{ .name = "servers", .arg = "N", .parse = bench_opt_unsigned, .offset = S_FIELD(servers),
	  .min = 1, .max = 64, .help = "cluster servers (default 2)" },
	{ .name = "max-seconds", .arg = "T", .parse = bench_opt_double,
	  .offset = S_FIELD(max_seconds), .min = 1, .max = 86400, .want = "1 to 86400",
	  .help = "stop after T s of training if the epoch is not done\n(default 120)" },
	{ .name = "build", .arg = "DIR", .parse = bench_opt_string, .offset = S_FIELD(build),
	  .help = "the build tree (default: the one this program is\n"
		  "in); the source tree is read from its Makefile" },
	{ .name = "keep", .parse = bench_opt_flag, .offset = S_FIELD(keep),
	  .help = "keep the cluster's directory (job file, configs, logs)" },
	BENCH_OPT_VERBOSE(S_FIELD(verbose), "log informational messages; twice: debug"),
	BENCH_OPT_HELP,
};

static const struct bench_opts_table sparse_table = {
	"sparse", sparse_opt_rows, DML_ARRAY_LEN(sparse_opt_rows), 20
};

void bench_sparse_usage(FILE *out)
{
	fprintf(out,
		"dml-bench sparse [options]: the sparse_lr app at scale on the local\n"
		"cluster of tools/dml-local: synthetic click-like records (Zipf feature\n"
		"ids over %" PRIu64 " ids, labels from a hidden logistic model), ids\n"
		"hashed into 2^B keys of one sparse table, AdaGrad lr %g, batch %d,\n"
		"staleness %d, one epoch. Prints the cluster's examples/s, the epochs\n"
		"done, the job's last test AUC and the hidden true model's AUC on the\n"
		"same %d test records, and their ratio.\n"
		"\n",
		DML_CLICKS_VOCAB, SPARSE_LR, SPARSE_BATCH, SPARSE_STALENESS,
		SPARSE_TEST_EXAMPLES);
	bench_opts_help(&sparse_table, out);
	fprintf(out,
		"\n"
		"The job evaluates about %d times an epoch and every worker once at its\n"
		"last clock; stopped by --max-seconds, the AUC shown is the last one the\n"
		"job made. Exit status: 0 when it ran, 1 on an error, 2 on bad usage,\n"
		"130 when interrupted.\n",
		SPARSE_EVALS);
}

/* Returns 0, or the exit status to end with (0 after --help). */
static int sparse_opts_parse(int argc, char **argv, struct sparse_opts *o, int *help)
{
	memset(o, 0, sizeof(*o));
	o->examples = 10000000;
	o->hash_bits = 24;
	o->workers = 2;
	o->servers = 2;
	o->max_seconds = 120;
	return bench_opts_parse(&sparse_table, argc, argv, o, help);
}

/* ---- the job ------------------------------------------------------------ */

/* Clocks per worker for one epoch: every worker takes a batch per clock. */
static uint64_t sparse_epoch_clocks(const struct sparse_opts *o)
{
	uint64_t per_clock = (uint64_t)o->workers * SPARSE_BATCH;

	return (o->examples + per_clock - 1) / per_clock;
}

/*
 * The job file, keys as conf/jobs/sparse_lr.conf has them. max_epochs = 1
 * ends the job, and max_clocks = one epoch's clocks as well, because a
 * worker evaluates at its last clock (worker.c): the job's last AUC is then
 * that of the trained model, not of the last periodic evaluation.
 */
static int sparse_job_write(const struct sparse_opts *o, const char *path)
{
	uint64_t dim = UINT64_C(1) << o->hash_bits, clocks = sparse_epoch_clocks(o);
	uint64_t every = clocks / SPARSE_EVALS, rows = dim < DML_CLICKS_VOCAB ? dim
								: DML_CLICKS_VOCAB;
	FILE *f = fopen(path, "w");
	int bad;

	if (!f) {
		dml_err("%s: %s", path, strerror(errno));
		return DML_EIO;
	}
	if (every < SPARSE_EVAL_EVERY_MIN)
		every = SPARSE_EVAL_EVERY_MIN;
	fprintf(f, "# Written by dml-bench sparse.\n[job]\nname = bench-sparse\n"
		"app = sparse_lr\ndata = synthetic\ntest_data = synthetic\n"
		"examples = %" PRIu64 "\ndim = %" PRIu64 "\nstaleness = %d\n"
		"batch_size = %d\nmetric = auc\nmax_epochs = 1\nmax_clocks = %" PRIu64
		"\neval_every = %" PRIu64 "\nseed = %d\n\n", o->examples, dim,
		SPARSE_STALENESS, SPARSE_BATCH, clocks, every, SPARSE_SEED);
	/* Rows: at most the ids the data has, or the keys, and the bias. */
	fprintf(f, "[table]\nid = 0\nkind = sparse\nwidth = 1\ncapacity = %" PRIu64
		"\ninit = zeros\noptimizer = adagrad\nlr = %g\n", rows + 1, SPARSE_LR);
	bad = ferror(f);
	if (fclose(f) != 0 || bad) {
		dml_err("%s: write failed", path);
		return DML_EIO;
	}
	return 0;
}

/* Read the job back as the scheduler will, to refuse it here if it must. */
static int sparse_job_load(const char *path, Dml__JobSpec **spec)
{
	char err[512] = "";
	int rc = dml_job_file_load(path, spec, err, sizeof(err));

	if (rc)
		dml_err("%s", err[0] ? err : dml_strerror(rc));
	return rc;
}

/*
 * The hidden true model's AUC on the app's test records, made by the same
 * generator (the job's seed, the app's vocabulary).
 */
static int sparse_true_auc(double *auc)
{
	float *scores = dml_xmalloc(SPARSE_TEST_EXAMPLES * sizeof(*scores));
	float *labels = dml_xmalloc(SPARSE_TEST_EXAMPLES * sizeof(*labels));
	uint64_t ids[DML_CLICKS_MAX_NNZ];
	float vals[DML_CLICKS_MAX_NNZ];
	struct dml_clicks g;
	int rc = dml_clicks_init(&g, SPARSE_SEED, 0);

	if (rc) {
		dml_err("click generator: %s", dml_strerror(rc));
	} else {
		for (uint64_t i = 0; i < SPARSE_TEST_EXAMPLES; i++) {
			size_t nnz;

			dml_clicks_record(&g, DML_CLICKS_TEST_BASE + i, ids, vals, &nnz,
					  &labels[i]);
			scores[i] = (float)dml_clicks_true_score(&g, ids, vals, nnz);
		}
		*auc = dml_auc(scores, labels, SPARSE_TEST_EXAMPLES);
		dml_clicks_free(&g);
	}
	free(scores);
	free(labels);
	return rc;
}

/* ---- the run ------------------------------------------------------------ */

/* What the watch of the running job knows so far. */
struct sparse_watch {
	uint64_t begin;     /* submitted (about) */
	uint64_t started;   /* the first status with examples; 0 until then */
	uint64_t stopped;   /* when the watch ended */
	uint64_t next_note; /* the next progress line */
	int cut;            /* ended by --max-seconds */
	char state[16];     /* the job's state in the last answer */
};

static double sparse_s(uint64_t ns)
{
	return (double)ns / 1e9;
}

static void sparse_sleep_ms(unsigned ms)
{
	struct timespec ts = { (time_t)(ms / 1000), (long)(ms % 1000) * 1000000L };

	nanosleep(&ts, NULL);
}

/* A line of progress: examples, epochs, the job's rate and last AUC. */
static void sparse_note(const struct sparse_watch *w, const struct bench_poll *p,
			uint64_t data)
{
	printf("  %6.1f s: %" PRIu64 " examples, %.3f epochs, %.0f examples/s, "
	       "AUC %.4f\n", sparse_s(p->ns - w->started), p->examples,
	       data ? (double)p->examples / (double)data : NAN, p->rate, p->metric);
	fflush(stdout);
}

/* Polls until the job's end, the time limit or a signal. */
static int sparse_watch(struct bench_cluster *k, const struct sparse_opts *o,
			struct sparse_watch *w)
{
	uint64_t max_ns = (uint64_t)(o->max_seconds * 1e9);
	uint64_t start_ns = (uint64_t)BENCH_CLUSTER_START_S * 1000000000u;
	uint64_t poll_ns = (uint64_t)BENCH_CLUSTER_POLL_MS * 1000000u;
	uint64_t next_poll, now;
	int rc = 0;

	memset(w, 0, sizeof(*w));
	w->begin = next_poll = dml_now_ns();
	snprintf(w->state, sizeof(w->state), "pending");
	while (rc == 0 && !k->ended) {
		struct bench_poll *p = NULL;

		if (bench_interrupted())
			return DML_ECLOSED;
		now = dml_now_ns();
		if (now < next_poll) {
			uint64_t ms = (next_poll - now + 999999) / 1000000u;

			sparse_sleep_ms(ms < SPARSE_SLICE_MS ? (unsigned)ms : SPARSE_SLICE_MS);
			continue;
		}
		next_poll = now + poll_ns;
		rc = bench_cluster_watch_poll(k, &p);
		if (p) {
			snprintf(w->state, sizeof(w->state), "%s", p->state);
			if (!w->started && p->examples > 0) {
				w->started = p->ns;
				w->next_note = p->ns + (uint64_t)SPARSE_NOTE_S * 1000000000u;
			}
			if (w->started && p->ns >= w->next_note && !k->ended) {
				sparse_note(w, p, p->data_examples ? p->data_examples
								   : o->examples);
				w->next_note += (uint64_t)SPARSE_NOTE_S * 1000000000u;
			}
		}
		now = dml_now_ns();
		if (rc == 0 && !k->ended && w->started && now - w->started >= max_ns) {
			w->cut = 1;
			break;
		}
		if (rc == 0 && !w->started && now - w->begin >= start_ns) {
			dml_err("job %s did not start training within %d s (state %s)",
				k->job_arg, BENCH_CLUSTER_START_S, w->state);
			rc = DML_ETIMEDOUT;
		}
	}
	w->stopped = dml_now_ns();
	return rc;
}

/* ---- report ------------------------------------------------------------- */

static void sparse_print_preface(const struct sparse_opts *o, const Dml__JobSpec *sp,
				 const char *src)
{
	const Dml__TableSpec *t = sp->tables[0];
	unsigned threads = bench_cluster_worker_threads(src);
	char load[64];

	bench_loadavg(load, sizeof(load));
	printf("dml-bench sparse: app %s, synthetic clicks (seed %" PRIu64 ", %" PRIu64
	       " feature ids, Zipf s %.2f, %d..%d features a record)\n", sp->app,
	       sp->seed, DML_CLICKS_VOCAB, DML_CLICKS_ZIPF_S, DML_CLICKS_MIN_NNZ,
	       DML_CLICKS_MAX_NNZ_DEFAULT);
	printf("job: %" PRIu64 " training examples, dim 2^%u = %" PRIu32 " hashed keys "
	       "+ 1 bias key, batch %" PRIu32 ", staleness %" PRId64 ",\n  max_epochs "
	       "%g (max_clocks %" PRIu64 " a worker), metric %s every %" PRIu32
	       " clocks on %d test records\n", sp->examples, o->hash_bits, sp->dim,
	       sp->batch_size, sp->staleness, sp->max_epochs, sp->max_clocks, sp->metric,
	       sp->eval_every, SPARSE_TEST_EXAMPLES);
	printf("table %" PRIu32 ": %s, width %" PRIu32 ", optimizer %s, lr %g, capacity "
	       "%" PRIu64 "\n", t->id, t->dense ? "dense" : "sparse", t->width, t->optimizer,
	       t->lr, t->capacity);
	printf("cluster: tools/dml-local, %u servers, %u workers x %u thread%s "
	       "(conf/local/worker.conf); at most %.0f s of training\n", o->servers,
	       o->workers, threads, threads == 1 ? "" : "s", o->max_seconds);
	printf("load average at the start: %s (%u cores)\n", load, bench_cores());
	if (o->workers * threads > bench_cores())
		printf("warning: %u workers x %u threads oversubscribe %u cores\n",
		       o->workers, threads, bench_cores());
	fflush(stdout);
}

/* The job's own examples/s in its last status while running; NaN if none. */
static double sparse_job_rate(const struct bench_cluster *k)
{
	for (size_t i = k->npolls; i > 0; i--)
		if (strcmp(k->polls[i - 1].state, "running") == 0)
			return k->polls[i - 1].rate;
	return NAN;
}

static void sparse_print_result(const struct bench_cluster *k,
				const struct sparse_opts *o, const struct sparse_watch *w,
				double true_auc)
{
	const struct bench_poll *lp = k->npolls ? &k->polls[k->npolls - 1] : NULL;
	uint64_t data = lp && lp->data_examples ? lp->data_examples : o->examples;
	double rate = bench_cluster_rate(k), trained = NAN, auc = NAN;
	char load[64];

	if (lp && w->started)
		trained = sparse_s(lp->ns - w->started);
	if (lp)
		auc = lp->metric;
	bench_loadavg(load, sizeof(load));
	printf("\nresult (job %s, state %s%s):\n", k->job_arg, lp ? lp->state : "unknown",
	       w->cut ? ", stopped by --max-seconds" : "");
	printf("  trained        %" PRIu64 " examples, %.3f epochs, in %.1f s (the job "
	       "ran %.1f s)\n", lp ? lp->examples : 0,
	       lp ? (double)lp->examples / (double)data : NAN, trained,
	       lp ? (double)lp->run_ms / 1e3 : NAN);
	printf("  examples/s     %.0f cluster-wide (status polls while running); the "
	       "job's own, last second: %.0f\n", rate, sparse_job_rate(k));
	printf("  job AUC        %.4f (its last evaluation, %d test records)\n", auc,
	       SPARSE_TEST_EXAMPLES);
	printf("  true AUC       %.4f (the hidden model on the same records)\n", true_auc);
	printf("  ratio          %.4f (job AUC / true AUC)\n",
	       true_auc > 0 ? auc / true_auc : NAN);
	printf("load average at the end: %s\n", load);
	fflush(stdout);
}

/* ---- main --------------------------------------------------------------- */

/* Up, write and submit the job, watch it, down; the figures when it ran. */
static int sparse_run(const struct sparse_opts *o, const char *src, const char *build,
		      double true_auc)
{
	struct bench_cluster k;
	struct sparse_watch w;
	Dml__JobSpec *spec = NULL;
	char job[PATH_MAX];
	int rc;

	memset(&w, 0, sizeof(w));
	bench_cluster_init(&k);
	rc = bench_cluster_up(&k, "dml-bench-sparse", src, build, o->servers, o->workers);
	if (rc == 0 && bench_path(job, sizeof(job), k.run, "sparse_lr.conf"))
		rc = DML_EINVAL;
	if (rc == 0)
		rc = sparse_job_write(o, job);
	if (rc == 0)
		rc = sparse_job_load(job, &spec);
	if (rc == 0) {
		sparse_print_preface(o, spec, src);
		rc = bench_cluster_submit(&k, job);
	}
	if (rc == 0)
		rc = sparse_watch(&k, o, &w);
	if (rc && !bench_interrupted())
		bench_cluster_log_tails(&k);
	bench_cluster_down(&k, o->keep);
	if (rc == 0)
		sparse_print_result(&k, o, &w, true_auc);
	else if (bench_interrupted())
		dml_warn("interrupted; stopped");
	dml_job_spec_free(spec);
	bench_cluster_free(&k);
	return rc;
}

int bench_sparse_main(int argc, char **argv)
{
	struct sparse_opts o;
	char build[PATH_MAX], src[PATH_MAX];
	double true_auc = NAN;
	int help, rc;

	rc = sparse_opts_parse(argc, argv, &o, &help);
	if (bench_cmd_begin(rc, help, bench_sparse_usage, o.verbose))
		return rc;
	rc = bench_build_find(o.build, build, sizeof(build));
	if (rc == 0 && bench_src_find(build, src, sizeof(src))) {
		dml_err("cannot find the source tree of build %s (for tools/dml-local): "
			"give --build", build);
		rc = DML_ENOTFOUND;
	}
	if (rc == 0)
		rc = sparse_true_auc(&true_auc);
	if (rc == 0)
		rc = sparse_run(&o, src, build, true_auc);
	return bench_exit_status(rc);
}
