/*
 * dml-bench train's PyTorch reference, measured in the same run: the
 * script tools/bench_torch.py (installed beside dml-bench's data as
 * PKGDATADIR/bench_torch.py) trains the job's MLP in one Python process on
 * the job's data, with the job's optimizer settings or plain SGD, and
 * prints one line of KEY=VALUE figures that land in a train_result.
 *
 * The script runs with the thread count of dml's single process
 * (torch.set_num_threads and OPENBLAS_NUM_THREADS) and inherits this
 * program's environment, OPENBLAS_CORETYPE included (blas_kernels.c), so
 * both sides compute on the same OpenBLAS kernels.
 *
 * Must never: stop the benchmark when PyTorch is missing or fails (the
 * torch rows and verdicts say SKIP and why), or compare a job the script
 * cannot reproduce (train_torch_probe says what differs).
 */
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tools/bench_cluster.h"
#include "tools/bench_util.h"
#include "proto/dml_error.h"
#include "proto/job_spec.h"
#include "proto/log.h"
#include "proto/util.h"
#include "tools/bench_train_internal.h"

#ifndef DML_PKGDATADIR
#define DML_PKGDATADIR "/usr/local/share/dml"
#endif
#define TORCH_SCRIPT "bench_torch.py"
/* Room for the script's output: its figures, or its error and traceback. */
#define TORCH_OUT_MAX (16u << 10)

/* Interpreters tried in turn: the PATH's python3, then Debian's, which
 * python3-torch installs into (a PATH python3 may be another one). */
static const char *const torch_pythons[][2] = {
	{ "/usr/bin/env", "python3" },
	{ "/usr/bin/python3", NULL },
};

/* The script: the source tree's, else the installed one. */
static int torch_script_find(const struct train_paths *p, char *out, size_t len)
{
	if (p->src[0] && bench_path(out, len, p->src, "tools/" TORCH_SCRIPT) == 0 &&
	    access(out, R_OK) == 0)
		return 0;
	if (bench_path(out, len, DML_PKGDATADIR, TORCH_SCRIPT) == 0 && access(out, R_OK) == 0)
		return 0;
	return DML_ENOTFOUND;
}

/* Why the script cannot reproduce this job ("" when it can). */
static void torch_job_check(const Dml__JobSpec *sp, char *why, size_t len)
{
	const Dml__TableSpec *t0 = sp->n_tables ? sp->tables[0] : NULL;

	why[0] = '\0';
	if (strcmp(sp->app, "mlp") != 0 || !t0) {
		snprintf(why, len, "app %s: the PyTorch script trains the mlp app's model",
			 sp->app);
		return;
	}
	if (!sp->data || strchr(sp->data, ',') == NULL || !sp->test_data ||
	    strchr(sp->test_data, ',') == NULL) {
		snprintf(why, len, "the PyTorch script reads IDX data and test_data files");
		return;
	}
	if (strcmp(t0->optimizer, "sgd") != 0 && strcmp(t0->optimizer, "momentum") != 0 &&
	    strcmp(t0->optimizer, "adam") != 0) {
		snprintf(why, len, "optimizer %s: the PyTorch script has sgd, momentum, adam",
			 t0->optimizer);
		return;
	}
	for (size_t i = 0; i < sp->n_tables; i++) {
		const Dml__TableSpec *t = sp->tables[i];

		if (strcmp(t->init, "uniform") != 0) {
			snprintf(why, len, "table %" PRIu32 ": init %s; the PyTorch script "
				 "draws uniform", t->id, t->init);
			return;
		}
		if (strcmp(t->optimizer, t0->optimizer) != 0 || t->lr != t0->lr ||
		    t->lr_decay != t0->lr_decay || t->beta1 != t0->beta1 ||
		    t->beta2 != t0->beta2 || t->epsilon != t0->epsilon ||
		    t->momentum != t0->momentum || t->weight_decay != t0->weight_decay) {
			snprintf(why, len, "tables differ in optimizer settings; the PyTorch "
				 "script uses table 0's for all");
			return;
		}
	}
}

void train_torch_probe(const struct train_ctx *c, struct train_torch *t)
{
	char out[4096], why[256];

	memset(t, 0, sizeof(*t));
	if (c->o->no_torch) {
		snprintf(t->skip, sizeof(t->skip), "--torch no");
		return;
	}
	torch_job_check(c->spec, t->skip, sizeof(t->skip));
	if (t->skip[0])
		return;
	if (torch_script_find(c->p, t->script, sizeof(t->script))) {
		snprintf(t->skip, sizeof(t->skip), "%s not found in the source tree or %s",
			 TORCH_SCRIPT, DML_PKGDATADIR);
		return;
	}
	for (size_t i = 0; i < DML_ARRAY_LEN(torch_pythons); i++) {
		const char *argv[] = { torch_pythons[i][0], torch_pythons[i][1], NULL, NULL,
				       NULL };
		size_t n = torch_pythons[i][1] ? 2 : 1;

		argv[n] = "-c";
		argv[n + 1] = "import torch";
		if (bench_exec(argv, out, sizeof(out), why, sizeof(why)) == 0) {
			t->python = i;
			return;
		}
	}
	snprintf(t->skip, sizeof(t->skip), "python3-torch not installed (apt-get install "
		 "python3-torch)");
}

/* One "KEY=VALUE" of the figures line as a number (NaN when absent). */
static double torch_fig(const char *line, const char *key)
{
	size_t n = strlen(key);

	for (const char *p = line; (p = strstr(p, key)) != NULL; p += n)
		if ((p == line || p[-1] == ' ') && p[n] == '=')
			return strtod(p + n + 1, NULL);
	return NAN;
}

/* A count of the figures line: 0 when absent or not one. */
static double torch_count(const char *line, const char *key)
{
	double v = torch_fig(line, key);

	return v >= 0 && v < 1e9 ? v : 0;
}

/* The script's figures that land in a train_result's doubles. */
static const struct {
	const char *key;
	size_t offset;
} torch_figs[] = {
	{ "rate", offsetof(struct train_result, rate) },
	{ "trained_s", offsetof(struct train_result, trained_s) },
	{ "epochs", offsetof(struct train_result, epochs) },
	{ "t_target", offsetof(struct train_result, t_target) },
	{ "ep_target", offsetof(struct train_result, ep_target) },
	{ "final_acc", offsetof(struct train_result, final_acc) },
};

/* The figures line of the script's output into r; DML_EIO when there is none. */
static int torch_parse(char *out, struct train_torch *t, struct train_result *r)
{
	char *line = strstr(out, "torch version=");
	const char *v;

	if (!line || (line != out && line[-1] != '\n'))
		return DML_EIO;
	line[strcspn(line, "\n")] = '\0';
	v = line + strlen("torch version=");
	snprintf(t->version, sizeof(t->version), "%.*s", (int)strcspn(v, " "), v);
	t->threads = (unsigned)torch_count(line, "threads");
	for (size_t i = 0; i < DML_ARRAY_LEN(torch_figs); i++)
		*(double *)((char *)r + torch_figs[i].offset) = torch_fig(line, torch_figs[i].key);
	r->snaps = (size_t)torch_count(line, "copies");
	r->reached = !isnan(r->t_target);
	snprintf(r->every, sizeof(r->every), "every 0.1 epoch");
	return isnan(r->rate) ? DML_EIO : 0;
}

/* "%g" of v into a buffer of its own (argv keeps pointers to them). */
#define TORCH_NUM(buf, v) (snprintf(buf, sizeof(buf), "%.9g", (double)(v)), buf)

int train_torch_run(const struct train_ctx *c, const Dml__JobSpec *sp,
		    struct train_torch *t, struct train_result *r)
{
	const Dml__TableSpec *t0 = sp->tables[0];
	char images[PATH_MAX], labels[PATH_MAX], timages[PATH_MAX], tlabels[PATH_MAX];
	char why[PATH_MAX + 64], scales[32 * DML_JOB_TABLES_MAX] = "";
	char lr[32], decay[32], mom[32], wd[32], b1[32], b2[32], eps[32], threads[16];
	char batch[16], target[32], secs[32], epochs[32], seed[32];
	char *out = dml_xcalloc(1, TORCH_OUT_MAX);
	const char *argv[64];
	size_t n = 0, len = 0;
	int rc;

	train_result_init(r);
	if (dml_job_data_pair(sp->data, images, labels, sizeof(images), why, sizeof(why)) ||
	    dml_job_data_pair(sp->test_data, timages, tlabels, sizeof(timages), why,
			      sizeof(why))) {
		dml_err("PyTorch: the job's data: %s", why);
		free(out);
		return DML_EINVAL;
	}
	for (size_t i = 0; i < sp->n_tables; i++)
		len += (size_t)snprintf(scales + len, sizeof(scales) - len, "%s%.9g",
					i ? "," : "", sp->tables[i]->init_scale);
	argv[n++] = torch_pythons[t->python][0];
	if (torch_pythons[t->python][1])
		argv[n++] = torch_pythons[t->python][1];
	const char *args[] = {
		t->script, "--images", images, "--labels", labels,
		"--test-images", timages, "--test-labels", tlabels,
		"--hidden", sp->hidden ? sp->hidden : "", "--init-scales", scales,
		"--batch", TORCH_NUM(batch, sp->batch_size),
		"--optimizer", t0->optimizer, "--lr", TORCH_NUM(lr, t0->lr),
		"--lr-decay", TORCH_NUM(decay, t0->lr_decay),
		"--momentum", TORCH_NUM(mom, t0->momentum),
		"--weight-decay", TORCH_NUM(wd, t0->weight_decay),
		"--beta1", TORCH_NUM(b1, t0->beta1), "--beta2", TORCH_NUM(b2, t0->beta2),
		"--eps", TORCH_NUM(eps, t0->epsilon),
		"--threads", TORCH_NUM(threads, c->o->threads),
		"--target", TORCH_NUM(target, c->o->target),
		"--max-seconds", TORCH_NUM(secs, c->o->max_seconds),
		"--max-epochs", TORCH_NUM(epochs, train_epoch_limit(sp)),
		"--seed", TORCH_NUM(seed, sp->seed),
	};
	for (size_t i = 0; i < DML_ARRAY_LEN(args); i++)
		argv[n++] = args[i];
	argv[n] = NULL;
	rc = bench_exec(argv, out, TORCH_OUT_MAX, why, sizeof(why));
	if (rc == 0)
		rc = torch_parse(out, t, r);
	if (rc) {
		dml_err("PyTorch (%s %s): %s", argv[0], t->script,
			why[0] && strcmp(why, "not run") ? why : "no figures");
		bench_log_lines(out);
	}
	r->ran = rc == 0;
	free(out);
	return rc;
}
