/*
 * dml-worker entry point: the daemon's description for dml_daemon_main,
 * and `dml-worker --eval MODEL DATA`, which evaluates a model file (from
 * `dmlctl export`) on a data set in this process: the model's
 * tables go into a local parameter store (local_store.h) and the job's app
 * evaluates through it, with no cluster at all.
 *
 * Must never: in --eval mode, touch the network or a config file, or exit
 * 0 without having printed the metric.
 */
#include <getopt.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "worker/app.h"
#include "worker/backend.h"
#include "worker/blas_kernels.h"
#include "proto/daemon.h"
#include "proto/dml_error.h"
#include "worker/local_store.h"
#include "proto/log.h"
#include "worker/model_file.h"
#include "worker/worker.h"
#include "worker/worker_conf.h"

#define NAME "dml-worker"
#define EVAL_USAGE "usage: " NAME " --eval MODEL DATA [--backend NAME]\n"

static int start(const void *conf, struct event_base *base, void **state)
{
	return dml_worker_new(conf, base, (struct dml_worker **)state);
}

static void shutdown_worker(void *state)
{
	dml_worker_shutdown(state);
}

static void free_worker(void *state)
{
	dml_worker_free(state);
}

/* ---- --eval --------------------------------------------------------------- */

/* What one evaluation holds, freed in one place. */
struct eval {
	struct dml_model model;
	struct dml_local_store *store;
	const struct dml_backend_ops *be;
	void *be_ctx;
	const struct dml_app *app;
	void *state;
};

static void eval_free(struct eval *e)
{
	if (e->app)
		e->app->destroy(e->state);
	if (e->be)
		e->be->close(e->be_ctx);
	dml_local_store_free(e->store);
	dml_model_free(&e->model);
}

/* The backend called name, opened; err lists the names of this build. */
static int eval_backend(struct eval *e, const char *name, char *err, size_t errlen)
{
	static const struct dml_backend_conf conf = { 0 };
	char names[128] = "";
	int rc;

	if (!(e->be = dml_backend_find(name))) {
		for (size_t i = 0; dml_backend_names[i]; i++)
			snprintf(names + strlen(names), sizeof(names) - strlen(names), "%s%s",
				 i ? ", " : "", dml_backend_names[i]);
		return dml_fail(DML_EINVAL, err, errlen, "backend '%s' is not in this build "
				"(%s)", name, names);
	}
	if ((rc = e->be->open(&conf, &e->be_ctx, err, errlen)) != 0)
		e->be = NULL;
	return rc;
}

/* What apps evaluate besides a loss. */
static const char *const metrics[] = { "accuracy", "auc", "rmse" };

/*
 * Evaluate model on data with the backend called backend: *value of the
 * metric *metric. The app gets the model's spec with data and test_data
 * both set to data, so it neither needs nor loads the training set of the
 * machine that trained the model.
 */
static int eval_run(const char *model, const char *data, const char *backend,
		    double *value, const char **metric, char *err, size_t errlen)
{
	struct eval e = { 0 };
	struct dml_app_env env;
	struct dml_app_io io;
	Dml__JobSpec spec;
	const char *name;
	int rc;

	if ((rc = dml_model_read(model, &e.model, err, errlen)) != 0)
		return rc;
	if (!(e.app = dml_app_find(e.model.spec->app))) {
		rc = dml_fail(DML_EINVAL, err, errlen, "%s: app '%s' is not an app of this "
			      "build", model, e.model.spec->app);
		goto out;
	}
	if ((rc = dml_local_store_new(e.model.spec, &e.store, err, errlen)) != 0 ||
	    (rc = dml_local_store_load_model(e.store, &e.model, err, errlen)) != 0 ||
	    (rc = eval_backend(&e, backend, err, errlen)) != 0)
		goto out;
	env = (struct dml_app_env){ .backend = e.be->name, .be = e.be, .be_ctx = e.be_ctx };
	spec = *e.model.spec;
	spec.data = (char *)data;
	spec.test_data = (char *)data;
	if ((rc = e.app->create(&spec, &env, &e.state, err, errlen)) != 0)
		goto out;
	dml_local_store_io(e.store, &io);
	if ((rc = e.app->evaluate(e.state, &io, value, err, errlen)) != 0)
		goto out;
	name = e.model.spec->metric && *e.model.spec->metric ? e.model.spec->metric :
	       e.app->metric;
	/* The model's spec goes with it: give the caller a name that stays. */
	*metric = "loss";
	for (size_t i = 0; i < DML_ARRAY_LEN(metrics); i++)
		if (strcmp(name, metrics[i]) == 0)
			*metric = metrics[i];
out:
	eval_free(&e);
	return rc;
}

static int eval_main(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "eval", required_argument, NULL, 'e' },
		{ "backend", required_argument, NULL, 'b' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 }
	};
	const char *model = NULL, *backend = "cpu", *metric = NULL;
	char err[512] = "";
	double value = 0;
	int opt;

	while ((opt = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
		switch (opt) {
		case 'e': model = optarg; break;
		case 'b': backend = optarg; break;
		case 'h':
			fputs(EVAL_USAGE, stdout);
			return 0;
		default:
			fputs(EVAL_USAGE, stderr);
			return 2;
		}
	}
	if (!model || optind != argc - 1) {
		fputs(EVAL_USAGE, stderr);
		return 2;
	}
	if (eval_run(model, argv[optind], backend, &value, &metric, err, sizeof(err)) != 0) {
		dml_err("%s", err);
		return 1;
	}
	/* Fractions (accuracy, AUC) to 4 places; a loss may be small: its digits. */
	printf(strcmp(metric, "accuracy") == 0 || strcmp(metric, "auc") == 0 ?
	       "%s %.4f (model %s, data %s)\n" :
	       "%s %.6g (model %s, data %s)\n", metric, value, model, argv[optind]);
	return fflush(stdout) == 0 ? 0 : 1;
}

/* Is this an --eval run? (Any argument naming the option makes it one.) */
static int eval_wanted(int argc, char **argv)
{
	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--") == 0)
			return 0;
		if (strcmp(argv[i], "--eval") == 0 || strncmp(argv[i], "--eval=", 7) == 0)
			return 1;
	}
	return 0;
}

int main(int argc, char **argv)
{
	static const struct dml_daemon d = {
		.name = NAME,
		.description = "Runs the training jobs that dml-sched assigns to it: pulls\n"
			       "parameters, computes gradients on its data partitions and\n"
			       "pushes them.\n\n"
			       NAME " --eval MODEL DATA [--backend NAME] instead\n"
			       "evaluates a model file (dmlctl export) on DATA,\n"
			       "given as the job's test_data (IMAGES,LABELS for mlp;\n"
			       "synthetic for lsq), on the compute backend NAME (default\n"
			       "cpu). It prints the job's metric, e.g.\n"
			       "`accuracy 0.8841 (model MODEL, data DATA)`, and exits 0,\n"
			       "or 1 when the model or data cannot be used, 2 on bad usage.",
		.example = "conf/worker.conf",
		.schema = &dml_worker_conf_schema,
		.conf_size = sizeof(struct dml_worker_conf),
		.log_level_offset = offsetof(struct dml_worker_conf, log_level),
		.start = start,
		.shutdown = shutdown_worker,
		.free = free_worker,
	};

	dml_log_set_ident(NAME);
	dml_blas_kernels_choose(argv);
	if (eval_wanted(argc, argv))
		return eval_main(argc, argv);
	return dml_daemon_main(argc, argv, &d);
}
