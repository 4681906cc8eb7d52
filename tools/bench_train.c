/*
 * dml-bench train: how fast one job (by default the source tree's
 * conf/jobs/mlp.conf, Fashion-MNIST MLP 784-256-10) reaches a target test
 * accuracy, measured in one run for (1) a single process running the same
 * app code against a local parameter store (worker/local_store.h), no
 * servers, and (2) the local cluster of tools/dml-local (dml-sched, N
 * dml-servers, W dml-workers), next to (3) single-process PyTorch training
 * the same model on the same data in the same run (bench_train_torch.c),
 * when python3-torch is installed. The single process and PyTorch each run
 * twice when the job's optimizer is not plain SGD: with the job's
 * optimizer and with SGD, so that every comparison is like for like.
 *
 * Accuracy is never computed while the clock runs: both runs only copy the
 * model (the single process every tenth of an epoch, its clock stopped
 * while it copies; the cluster run pulls every table through a libdml
 * client of role control, which takes no part in clocks, every 50 ms).
 * After each run the copies are scored in order, by one function, through
 * a second local store, to find the first one at or above the target.
 *
 * Must never leave a cluster running or its directory behind: errors,
 * SIGINT and SIGTERM stop the job, take the cluster down and remove its
 * directory (unless --keep). Its exit status says whether it ran, not
 * whether a target was met.
 *
 * This file holds the options, where things are and main(); the model's
 * copies and their scoring are in bench_train_eval.c, the dml runs in
 * bench_train_runs.c, PyTorch's in bench_train_torch.c and the report in
 * bench_train_report.c.
 */
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "worker/app.h"
#include "worker/backend.h"
#include "tools/bench.h"
#include "tools/bench_cluster.h"
#include "tools/bench_opt.h"
#include "tools/bench_train.h"
#include "tools/bench_util.h"
#include "worker/dml.h"
#include "proto/job_spec.h"
#include "worker/local_store.h"
#include "proto/log.h"
#include "proto/util.h"
#include "tools/bench_train_internal.h"
/* ---- options --------------------------------------------------------- */

static void train_threads_help(char *buf, size_t len)
{
	snprintf(buf, len, "single process: OpenBLAS threads (default: the\n"
		 "online cores, %u here)", bench_cores());
}

#define T_FIELD(f) offsetof(struct train_opts, f)

/* --torch yes|no into the int no_torch. */
static int train_opt_torch(const char *cmd, const struct bench_opt *opt, const char *a,
			   void *o)
{
	int *no = (int *)((char *)o + opt->offset);

	if (strcmp(a, "yes") != 0 && strcmp(a, "no") != 0)
		return bench_opt_error(cmd, opt, a, NULL);
	*no = strcmp(a, "no") == 0;
	return 0;
}

static const struct bench_opt train_opt_rows[] = {
	{ .name = "job", .arg = "FILE", .parse = bench_opt_string, .offset = T_FIELD(job),
	  .help = "job file (default conf/jobs/mlp.conf of the source\n"
	          "tree: Fashion-MNIST MLP 784-256-10)" },
	{ .name = "workers", .arg = "N", .parse = bench_opt_unsigned,
	  .offset = T_FIELD(workers), .min = 1, .max = 256,
	  .help = "cluster workers (default 2)" },
	{ .name = "servers", .arg = "N", .parse = bench_opt_unsigned,
	  .offset = T_FIELD(servers), .min = 1, .max = 64,
	  .help = "cluster servers (default 2)" },
	{ .name = "target", .arg = "ACC", .parse = bench_opt_double,
	  .offset = T_FIELD(target), .min = 1e-6, .max = 1, .want = "an accuracy in (0, 1]",
	  .help = "test accuracy to reach (default " BENCH_STR(TRAIN_DEFAULT_TARGET) ")" },
	{ .name = "max-seconds", .arg = "S", .parse = bench_opt_double,
	  .offset = T_FIELD(max_seconds), .min = 0.1, .max = 3600, .want = "0.1 to 3600",
	  .help = "training time per run at most (default 60); the\n"
	          "single process also stops after the job's\n"
	          "max_epochs (" BENCH_STR(TRAIN_DEFAULT_EPOCHS) " when it sets none)" },
	{ .name = "threads", .arg = "T", .parse = bench_opt_unsigned,
	  .offset = T_FIELD(threads), .min = 1, .max = 1024,
	  .help_fmt = train_threads_help },
	{ .name = "build", .arg = "DIR", .parse = bench_opt_string,
	  .offset = T_FIELD(build),
	  .help = "the build tree (default: the one this program is\n"
	          "in); the source tree is read from its Makefile" },
	{ .name = "torch", .arg = "yes|no", .parse = train_opt_torch,
	  .offset = T_FIELD(no_torch), .want = "yes or no",
	  .help = "also train the model in PyTorch, one process,\n"
	          "with T threads (default yes; SKIP when\n"
	          "python3-torch is not installed)" },
	{ .name = "sgd-lr", .arg = "LR", .parse = bench_opt_double,
	  .offset = T_FIELD(sgd_lr), .min = 1e-9, .max = 100, .want = "a rate in (0, 100]",
	  .help = "learning rate of the plain-SGD runs, made when\n"
	          "the job's optimizer is another (default "
	          BENCH_STR(TRAIN_DEFAULT_SGD_LR) ")" },
	{ .name = "skip-cluster", .parse = bench_opt_flag, .offset = T_FIELD(skip_cluster),
	  .help = "only the single process" },
	{ .name = "skip-single", .parse = bench_opt_flag, .offset = T_FIELD(skip_single),
	  .help = "only the cluster" },
	{ .name = "keep", .parse = bench_opt_flag, .offset = T_FIELD(keep),
	  .help = "keep the cluster's directory (configs, logs)" },
	BENCH_OPT_VERBOSE(T_FIELD(verbose), "log informational messages; twice: debug"),
	BENCH_OPT_HELP,
};

static const struct bench_opts_table train_table = {
	"train", train_opt_rows, DML_ARRAY_LEN(train_opt_rows), 20
};

void bench_train_usage(FILE *out)
{
	fprintf(out,
		"dml-bench train [options]: time to a target test accuracy of one job,\n"
		"in a single process (the same app code on a local store, no servers),\n"
		"on the local cluster of tools/dml-local, and in single-process PyTorch\n"
		"(tools/bench_torch.py), all in the same run. The single process and\n"
		"PyTorch train with the job's optimizer, and again with plain SGD when\n"
		"the job's is another; every verdict compares figures of this run.\n"
		"\n");
	bench_opts_help(&train_table, out);
	fprintf(out,
		"\n"
		"The accuracy is that of copies of the model, scored after each run:\n"
		"the single process copies it every tenth of an epoch with its clock\n"
		"stopped; the cluster run pulls it every %d ms as a control client.\n"
		"Time zero of the cluster is the last copy still equal to the initial\n"
		"model. The single process trains on batch_size examples per step; each\n"
		"cluster worker takes batch_size examples per clock.\n"
		"Exit status: 0 when it ran (even if a target failed), 1 on an error,\n"
		"2 on bad usage, 130 when interrupted.\n",
		TRAIN_SNAP_MS);
}

/* Returns 0, or the exit status to end with (0 after --help). */
static int train_opts_parse(int argc, char **argv, struct train_opts *o, int *help)
{
	int rc;

	memset(o, 0, sizeof(*o));
	o->workers = 2;
	o->servers = 2;
	o->target = TRAIN_DEFAULT_TARGET;
	o->sgd_lr = TRAIN_DEFAULT_SGD_LR;
	o->max_seconds = 60;
	o->threads = bench_cores();
	rc = bench_opts_parse(&train_table, argc, argv, o, help);
	if (rc || *help)
		return rc;
	if (o->skip_cluster && o->skip_single) {
		dml_err("train: --skip-cluster and --skip-single leave nothing to "
			"measure");
		return BENCH_EXIT_USAGE;
	}
	return 0;
}

/* ---- where things are ------------------------------------------------ */

static int train_paths_find(const struct train_opts *o, struct train_paths *p)
{
	memset(p, 0, sizeof(*p));
	if (bench_build_find(o->build, p->build, sizeof(p->build)))
		return DML_ENOTFOUND;
	bench_src_find(p->build, p->src, sizeof(p->src));
	if (o->job) {
		snprintf(p->job, sizeof(p->job), "%s", o->job);
	} else if (!p->src[0] ||
		   bench_path(p->job, sizeof(p->job), p->src, "conf/jobs/mlp.conf")) {
		dml_err("cannot find the source tree of build %s "
			"(for conf/jobs/mlp.conf): give --job or --build", p->build);
		return DML_ENOTFOUND;
	}
	if (!o->skip_cluster && !p->src[0]) {
		dml_err("cannot find the source tree of build %s (for tools/dml-local): "
			"give --build", p->build);
		return DML_ENOTFOUND;
	}
	return 0;
}

/* ---- main -------------------------------------------------------------- */

static int train_backend_open(struct train_ctx *c)
{
	const struct dml_backend_ops *be = dml_backend_find("cpu");
	struct dml_backend_conf conf = { .threads = c->o->threads };
	char err[256] = "";
	int rc;

	if (!be) {
		dml_err("this build has no cpu backend");
		return DML_ENOTFOUND;
	}
	rc = be->open(&conf, &c->env.be_ctx, err, sizeof(err));
	if (rc) {
		dml_err("cpu backend: %s", err[0] ? err : dml_strerror(rc));
		return rc;
	}
	c->env.backend = be->name;
	c->env.be = be;
	return 0;
}

/* The job file, checked for what this benchmark can measure. */
static int train_spec_load(const char *path, Dml__JobSpec **spec)
{
	const struct dml_app *app;
	const char *metric;
	char err[512] = "";
	int rc = dml_job_file_load(path, spec, err, sizeof(err));

	if (rc) {
		dml_err("%s", err[0] ? err : dml_strerror(rc));
		return rc;
	}
	app = dml_app_find((*spec)->app);
	if (!app) {
		dml_err("%s: app '%s' is not in this build", path, (*spec)->app);
		return DML_EINVAL;
	}
	metric = (*spec)->metric && (*spec)->metric[0] ? (*spec)->metric : app->metric;
	if (strcmp(metric, "accuracy") != 0) {
		dml_err("%s: metric %s; dml-bench train measures accuracy", path, metric);
		return DML_EINVAL;
	}
	return 0;
}

/* The single process on spec: train, then score the copies. */
static int train_single_scored(struct train_ctx *c, const Dml__JobSpec *spec,
			       struct train_result *r)
{
	const Dml__JobSpec *own = c->spec;
	struct train_series s;
	int rc;

	memset(&s, 0, sizeof(s));
	c->spec = spec;
	rc = train_single(c, &s, r);
	c->spec = own;
	if (rc == 0)
		rc = train_series_evaluate(&c->eval, &c->layout, &s, 0, c->o->target, 0, r);
	r->ran = rc == 0;
	train_series_destroy(&s);
	return rc;
}

/* The job with plain SGD at lr in every table, no decay: a copy to free. */
static Dml__JobSpec *train_spec_sgd(const Dml__JobSpec *spec, double lr)
{
	Dml__JobSpec *sgd = dml_job_spec_copy(spec);

	for (size_t i = 0; i < sgd->n_tables; i++) {
		Dml__TableSpec *t = sgd->tables[i];

		free(t->optimizer);
		t->optimizer = dml_xstrdup("sgd");
		t->lr = lr;
		t->lr_decay = 0;
	}
	return sgd;
}

/*
 * dml's single process and PyTorch's alternate, the job's optimizer first
 * and then SGD, so that a drift of the machine's speed falls on both; a
 * failed PyTorch run costs its rows, not the benchmark.
 */
static int train_measure(struct train_ctx *c, struct train_runs *r)
{
	const Dml__JobSpec *specs[2] = { c->spec, NULL };
	struct train_result *single[2] = { &r->single, &r->single_sgd };
	struct train_result *torch[2] = { &r->torch, &r->torch_sgd };
	Dml__JobSpec *sgd = NULL;
	int rc = 0;

	if (r->sgd_separate)
		specs[1] = sgd = train_spec_sgd(c->spec, c->o->sgd_lr);
	for (size_t i = 0; i < 2 && specs[i] && rc == 0; i++) {
		if (!c->o->skip_single)
			rc = train_single_scored(c, specs[i], single[i]);
		if (rc == 0 && !r->tinfo.skip[0] && !bench_interrupted())
			train_torch_run(c, specs[i], &r->tinfo, torch[i]);
	}
	dml_job_spec_free(sgd);
	if (rc == 0 && !c->o->skip_cluster && !bench_interrupted()) {
		struct train_series s;

		memset(&s, 0, sizeof(s));
		rc = train_cluster(c, &s, &r->cluster);
		r->cluster.ran = rc == 0;
		train_series_destroy(&s);
	}
	return rc;
}

/*
 * c for the options o: the paths (into p), the job spec, the model's layout,
 * the cpu backend and the evaluator. train_ctx_close() is due whatever it
 * returns.
 */
static int train_ctx_open(struct train_ctx *c, const struct train_opts *o,
			  struct train_paths *p)
{
	Dml__JobSpec *spec = NULL;
	int rc;

	memset(c, 0, sizeof(*c));
	c->o = o;
	c->p = p;
	rc = train_paths_find(o, p);
	if (rc == 0)
		rc = train_spec_load(p->job, &spec);
	c->spec = c->own_spec = spec;
	if (rc == 0)
		rc = train_layout_init(spec, &c->layout);
	if (rc == 0)
		rc = train_backend_open(c);
	if (rc == 0)
		rc = train_eval_open(&c->eval, spec, &c->env, &c->layout);
	return rc;
}

static void train_ctx_close(struct train_ctx *c)
{
	train_eval_close(&c->eval);
	if (c->env.be)
		c->env.be->close(c->env.be_ctx);
	dml_job_spec_free(c->own_spec);
	c->spec = c->own_spec = NULL;
}

int bench_train_main(int argc, char **argv)
{
	struct train_opts o;
	struct train_paths p;
	struct train_ctx c;
	struct train_runs r;
	int help, rc;

	rc = train_opts_parse(argc, argv, &o, &help);
	if (bench_cmd_begin(rc, help, bench_train_usage, o.verbose))
		return rc;
	memset(&r, 0, sizeof(r));
	train_result_init(&r.single);
	train_result_init(&r.single_sgd);
	train_result_init(&r.torch);
	train_result_init(&r.torch_sgd);
	train_result_init(&r.cluster);
	rc = train_ctx_open(&c, &o, &p);
	if (rc == 0) {
		r.sgd_separate = c.spec->n_tables > 0 &&
				 strcmp(c.spec->tables[0]->optimizer, "sgd") != 0;
		if (o.skip_single)
			snprintf(r.tinfo.skip, sizeof(r.tinfo.skip), "--skip-single");
		else
			train_torch_probe(&c, &r.tinfo);
		train_print_preface(&c, &r, o.skip_cluster ? 1 :
					    bench_cluster_worker_threads(p.src));
		rc = train_measure(&c, &r);
	}
	/* What was measured is shown even when a later part failed. */
	if (!bench_interrupted() && (r.single.ran || r.cluster.ran))
		train_print_table(&c, &r);
	else if (bench_interrupted())
		dml_warn("interrupted; stopped");
	train_ctx_close(&c);
	return bench_exit_status(rc);
}

/* ---- one cluster run, for other benchmarks ------------------------------- */

int bench_train_cluster_run(const struct bench_train_cfg *cfg, struct bench_train_fig *fig)
{
	struct train_opts o = {
		.job = cfg->job, .build = cfg->build, .workers = cfg->workers,
		.servers = cfg->servers, .threads = 1, .target = cfg->target,
		.max_seconds = cfg->max_seconds, .skip_single = 1, .keep = cfg->keep,
		.cpus = cfg->cpus, .zones = cfg->zones, .wan = cfg->wan,
		.aggregators = cfg->aggregators,
		.slow_after_s = cfg->slow_after_s,
		.slow_worker = cfg->slow_worker, .slow_cpus = cfg->slow_cpus,
		.smooth_epochs = cfg->smooth_epochs,
	};
	struct train_paths p;
	struct train_ctx c;
	struct train_series s;
	struct train_result r;
	int rc;

	memset(fig, 0, sizeof(*fig));
	memset(&s, 0, sizeof(s));
	train_result_init(&r);
	rc = train_ctx_open(&c, &o, &p);
	c.polls = &fig->polls;
	c.npolls = &fig->npolls;
	if (rc == 0)
		rc = train_cluster(&c, &s, &r);
	train_series_destroy(&s);
	fig->reached = r.reached;
	fig->t_target = r.t_target;
	fig->ep_target = r.ep_target;
	fig->final_acc = r.final_acc;
	fig->rate = r.rate;
	fig->trained_s = r.trained_s;
	fig->epochs = r.epochs;
	fig->t0_ns = r.t0_ns;
	fig->link_bytes = r.link_bytes;
	fig->link_examples = r.link_examples;
	snprintf(fig->refused, sizeof(fig->refused), "%s", r.refused);
	train_ctx_close(&c);
	return rc;
}
double bench_train_start_s(const struct bench_train_fig *fig, unsigned workers)
{
	for (size_t i = 0; i < fig->npolls; i++) {
		const struct bench_poll *p = &fig->polls[i];
		unsigned started = 0;

		for (unsigned k = 0; k < p->nw; k++)
			started += p->w[k].alive && p->w[k].clock >= 1;
		if (p->ns >= fig->t0_ns && started == workers)
			return (double)(p->ns - fig->t0_ns) / 1e9;
	}
	return NAN;
}

double bench_train_time(const struct bench_train_fig *fig, unsigned workers)
{
	double start = bench_train_start_s(fig, workers);

	if (!fig->reached)
		return NAN;
	return isnan(start) ? fig->t_target : fig->t_target - start;
}
