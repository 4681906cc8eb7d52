/*
 * dml-bench train: how fast one job (by default the source tree's
 * conf/jobs/mlp.conf, Fashion-MNIST MLP 784-256-10) reaches a target test
 * accuracy, measured in one run for (1) a single process running the same
 * app code against a local parameter store (worker/local_store.h), no
 * servers, and (2) the local cluster of tools/dml-local (dml-sched, N
 * dml-servers, W dml-workers), next to the PyTorch figures of the issue.
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
 * copies and their scoring are in bench_train_eval.c, the two runs in
 * bench_train_runs.c and the report in bench_train_report.c.
 */
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "app.h"
#include "backend.h"
#include "bench.h"
#include "bench_cluster.h"
#include "bench_train.h"
#include "bench_util.h"
#include "dml.h"
#include "job_conf.h"
#include "local_store.h"
#include "log.h"
#include "util.h"
#include "bench_train_internal.h"
/* ---- options --------------------------------------------------------- */

void bench_train_usage(FILE *out)
{
	fprintf(out,
		"dml-bench train [options]: time to a target test accuracy of one job,\n"
		"in a single process (the same app code on a local store, no servers)\n"
		"and on the local cluster of tools/dml-local, in the same run, next to\n"
		"the issue's PyTorch figures.\n"
		"\n"
		"  --job FILE        job file (default conf/jobs/mlp.conf of the source\n"
		"                    tree: Fashion-MNIST MLP 784-256-10)\n"
		"  --workers N       cluster workers (default 2)\n"
		"  --servers N       cluster servers (default 2)\n"
		"  --target ACC      test accuracy to reach (default %.2f)\n"
		"  --max-seconds S   training time per run at most (default 60); the\n"
		"                    single process also stops after the job's\n"
		"                    max_epochs (%d when it sets none)\n"
		"  --threads T       single process: OpenBLAS threads (default: the\n"
		"                    online cores, %u here)\n"
		"  --build DIR       the build tree (default: the one this program is\n"
		"                    in); the source tree is read from its Makefile\n"
		"  --skip-cluster    only the single process\n"
		"  --skip-single     only the cluster\n"
		"  --keep            keep the cluster's directory (configs, logs)\n"
		"  -v, --verbose     log informational messages; twice: debug\n"
		"  -h, --help        this text\n"
		"\n"
		"The accuracy is that of copies of the model, scored after each run:\n"
		"the single process copies it every tenth of an epoch with its clock\n"
		"stopped; the cluster run pulls it every %d ms as a control client.\n"
		"Time zero of the cluster is the last copy still equal to the initial\n"
		"model. The single process trains on batch_size examples per step; each\n"
		"cluster worker takes batch_size examples per clock.\n"
		"Exit status: 0 when it ran (even if a target failed), 1 on an error,\n"
		"2 on bad usage, 130 when interrupted.\n",
		TRAIN_REF_TARGET, TRAIN_DEFAULT_EPOCHS, bench_cores(), TRAIN_SNAP_MS);
}

static int train_usage_error(const char *opt, const char *value, const char *want)
{
	return bench_usage_error("train", opt, value, want);
}

static int train_parse_count(const char *opt, const char *a, unsigned min, unsigned max,
			     unsigned *out)
{
	return bench_parse_unsigned("train", opt, a, min, max, out);
}

/* Returns 0, or the exit status to end with (0 after --help). */
static int train_opts_parse(int argc, char **argv, struct train_opts *o, int *help)
{
	enum { O_JOB = 256, O_WORKERS, O_SERVERS, O_TARGET, O_MAX_SECONDS, O_THREADS,
	       O_BUILD, O_SKIP_CLUSTER, O_SKIP_SINGLE, O_KEEP };
	static const struct option longopts[] = {
		{ "job", required_argument, NULL, O_JOB },
		{ "workers", required_argument, NULL, O_WORKERS },
		{ "servers", required_argument, NULL, O_SERVERS },
		{ "target", required_argument, NULL, O_TARGET },
		{ "max-seconds", required_argument, NULL, O_MAX_SECONDS },
		{ "threads", required_argument, NULL, O_THREADS },
		{ "build", required_argument, NULL, O_BUILD },
		{ "skip-cluster", no_argument, NULL, O_SKIP_CLUSTER },
		{ "skip-single", no_argument, NULL, O_SKIP_SINGLE },
		{ "keep", no_argument, NULL, O_KEEP },
		{ "verbose", no_argument, NULL, 'v' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	int c, rc = 0;

	memset(o, 0, sizeof(*o));
	o->workers = 2;
	o->servers = 2;
	o->target = TRAIN_REF_TARGET;
	o->max_seconds = 60;
	o->threads = bench_cores();
	bench_getopt_reset(help);
	while (rc == 0 &&
	       (c = bench_getopt(argc, argv, longopts, &o->verbose, help)) != -1) {
		const char *a = optarg;

		switch (c) {
		case O_JOB:
			o->job = a;
			break;
		case O_BUILD:
			o->build = a;
			break;
		case O_WORKERS:
			rc = train_parse_count("--workers", a, 1, 256, &o->workers);
			break;
		case O_SERVERS:
			rc = train_parse_count("--servers", a, 1, 64, &o->servers);
			break;
		case O_THREADS:
			rc = train_parse_count("--threads", a, 1, 1024, &o->threads);
			break;
		case O_TARGET:
			if (dml_parse_double(a, 1e-6, 1, &o->target))
				rc = train_usage_error("--target", a,
						       "an accuracy in (0, 1]");
			break;
		case O_MAX_SECONDS:
			if (dml_parse_double(a, 0.1, 3600, &o->max_seconds))
				rc = train_usage_error("--max-seconds", a, "0.1 to 3600");
			break;
		case O_SKIP_CLUSTER:
			o->skip_cluster = 1;
			break;
		case O_SKIP_SINGLE:
			o->skip_single = 1;
			break;
		case O_KEEP:
			o->keep = 1;
			break;
		default:
			return BENCH_EXIT_USAGE;
		}
	}
	if (rc == 0)
		rc = bench_getopt_end("train", argc, argv, *help);
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

static int train_measure(struct train_ctx *c, struct train_result *rs,
			 struct train_result *rk)
{
	struct train_series s;
	int rc = 0;

	memset(&s, 0, sizeof(s));
	if (!c->o->skip_single) {
		rc = train_single(c, &s, rs);
		if (rc == 0)
			rc = train_series_evaluate(&c->eval, &c->layout, &s, 0,
						   c->o->target, 0, rs);
		rs->ran = rc == 0;
		train_series_destroy(&s);
	}
	if (rc == 0 && !c->o->skip_cluster) {
		rc = train_cluster(c, &s, rk);
		rk->ran = rc == 0;
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
	struct train_result rs, rk;
	int help, rc;

	rc = train_opts_parse(argc, argv, &o, &help);
	if (bench_cmd_begin(rc, help, bench_train_usage, o.verbose))
		return rc;
	train_result_init(&rs);
	train_result_init(&rk);
	rc = train_ctx_open(&c, &o, &p);
	if (rc == 0) {
		train_print_preface(&c, o.skip_cluster ? 1 : bench_cluster_worker_threads(p.src));
		rc = train_measure(&c, &rs, &rk);
	}
	/* What was measured is shown even when a later part failed. */
	if (!bench_interrupted() && (rs.ran || rk.ran))
		train_print_table(&c, &rs, &rk);
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
		.cpus = cfg->cpus, .slow_after_s = cfg->slow_after_s,
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
	train_ctx_close(&c);
	return rc;
}