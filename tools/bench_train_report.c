/*
 * dml-bench train's report: the preface naming the job, the machine and the
 * runs, the table of every run (dml and PyTorch, with the job's optimizer
 * and with SGD, and the cluster), their ratios, and the targets as PASS,
 * FAIL or SKIP lines that compare figures of this run only.
 *
 * It only prints what was measured: nothing here trains or evaluates.
 */
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "worker/app.h"
#include "tools/bench.h"
#include "tools/bench_cluster.h"
#include "tools/bench_train.h"
#include "tools/bench_util.h"
#include "worker/dml.h"
#include "proto/job_spec.h"
#include "proto/log.h"
#include "proto/util.h"
#include "tools/bench_train_internal.h"

/* The cluster's goal: its time to the target within this factor of
 * single-process PyTorch's with the same optimizer, measured in this run. */
#define TRAIN_GOAL_VS_TORCH 1.5

/* ---- report ------------------------------------------------------------ */

void train_print_preface(const struct train_ctx *c, const struct train_runs *r,
			 unsigned wthreads)
{
	const Dml__JobSpec *sp = c->spec;
	const struct train_opts *o = c->o;
	char load[64];

	bench_loadavg(load, sizeof(load));
	printf("dml-bench train: %s\n", c->p->job);
	printf("job %s: app %s%s%s, %" PRIu64 " training examples, batch %" PRIu32
	       "; target test accuracy >= %.3f\n", sp->name, sp->app,
	       sp->hidden && sp->hidden[0] ? ", hidden " : "",
	       sp->hidden && sp->hidden[0] ? sp->hidden : "", c->eval.data_examples,
	       sp->batch_size, o->target);
	if (sp->n_tables > 0) {
		const Dml__TableSpec *t = sp->tables[0];

		printf("table %" PRIu32 ": optimizer %s, lr %g", t->id, t->optimizer,
		       t->lr);
		if (t->lr_decay > 0)
			printf(", lr_decay %g", t->lr_decay);
		if (strcmp(t->optimizer, "momentum") == 0)
			printf(", momentum %g", t->momentum);
		if (r->sgd_separate)
			printf("; again with plain SGD, lr %g", o->sgd_lr);
		printf("\n");
	}
	printf("load average at the start: %s (%u cores)\n", load, bench_cores());
	if (!o->skip_single)
		printf("single process: cpu backend, %u OpenBLAS threads, batch %" PRIu32
		       " per step,\n  at most %.0f s or %.4g epochs; a copy every 1/%d "
		       "epoch, the clock stopped while copying\n", o->threads,
		       sp->batch_size, o->max_seconds, train_epoch_limit(sp),
		       TRAIN_SNAPS_PER_EPOCH);
	if (r->tinfo.skip[0])
		printf("PyTorch: not measured: %s\n", r->tinfo.skip);
	else
		printf("PyTorch: %s, one process, %u threads (torch.set_num_threads,\n"
		       "  OPENBLAS_NUM_THREADS; OMP_WAIT_POLICY=PASSIVE), the same model, data,\n"
		       "  batch, initial scales and optimizer settings; copies and limits as\n"
		       "  the single process's\n", r->tinfo.script, o->threads);
	if (!o->skip_cluster)
		printf("cluster: tools/dml-local, %u servers, %u workers x %u thread%s "
		       "(conf/local/worker.conf),\n  staleness %" PRId64 ", each worker "
		       "takes batch %" PRIu32 " per clock; at most %.0f s or the job's "
		       "end;\n  a copy every %d ms by a control client\n", o->servers,
		       o->workers, wthreads, wthreads == 1 ? "" : "s", sp->staleness,
		       sp->batch_size, o->max_seconds, TRAIN_SNAP_MS);
	if (!o->skip_cluster && o->workers * wthreads > bench_cores())
		printf("warning: %u workers x %u threads oversubscribe %u cores\n",
		       o->workers, wthreads, bench_cores());
	fflush(stdout);
}

static void train_fmt(char *buf, size_t len, const char *fmt, double v)
{
	if (isnan(v))
		snprintf(buf, len, "-");
	else
		snprintf(buf, len, fmt, v);
}

static void train_print_row(const char *name, const struct train_result *r)
{
	char rate[24], t[24], ep[24], acc[24], trained[40];

	train_fmt(rate, sizeof(rate), "%.0f", r->rate);
	if (r->reached)
		train_fmt(t, sizeof(t), "%.2f s", r->t_target);
	else
		snprintf(t, sizeof(t), "%s", r->ran ? "not reached" : "-");
	train_fmt(ep, sizeof(ep), "%.2f", r->ep_target);
	train_fmt(acc, sizeof(acc), "%.4f", r->final_acc);
	if (isnan(r->trained_s))
		snprintf(trained, sizeof(trained), "-");
	else
		snprintf(trained, sizeof(trained), "%.1f s, %.2f ep", r->trained_s,
			 r->epochs);
	printf("%-30s %9s %12s %8s %9s %18s  %zu %s\n", name, rate, t, ep, acc, trained,
	       r->snaps, r->every);
}

/* "1.23 x" or "-" for a/b. */
static void train_ratio(char *buf, size_t len, double a, double b)
{
	train_fmt(buf, len, "%.2f x", b > 0 && !isnan(a) && !isnan(b) ? a / b : NAN);
}

/* "adam" or "sgd lr 0.1": what a pair of runs trained with. */
static void train_opt_name(const struct train_ctx *c, int sgd, char *buf, size_t len)
{
	if (sgd)
		snprintf(buf, len, "sgd lr %g", c->o->sgd_lr);
	else
		snprintf(buf, len, "%s", c->spec->n_tables ? c->spec->tables[0]->optimizer : "-");
}

static void train_print_ratios(const struct train_ctx *c, const struct train_runs *r)
{
	const struct train_result *k = &r->cluster;
	char a[16], b[16], opt[32];

	printf("\nratios, all of this run (examples/s: x > 1 is faster; time to %.3f:\n"
	       "x > 1 is slower):\n",
	       c->o->target);
	for (int sgd = 0; sgd < 2; sgd++) {
		const struct train_result *s = sgd ? &r->single_sgd : &r->single;
		const struct train_result *t = sgd ? &r->torch_sgd : &r->torch;

		if (!s->ran || !t->ran)
			continue;
		train_opt_name(c, sgd, opt, sizeof(opt));
		train_ratio(a, sizeof(a), s->rate, t->rate);
		train_ratio(b, sizeof(b), s->reached ? s->t_target : NAN,
			    t->reached ? t->t_target : NAN);
		printf("  single process / PyTorch (%s): examples/s %s, time %s\n", opt, a,
		       b);
	}
	if (k->ran && r->single.ran) {
		train_ratio(a, sizeof(a), k->rate, r->single.rate);
		train_ratio(b, sizeof(b), k->reached ? k->t_target : NAN,
			    r->single.reached ? r->single.t_target : NAN);
		printf("  cluster / single process: examples/s %s, time %s\n", a, b);
	}
	if (k->ran && r->torch.ran) {
		train_ratio(a, sizeof(a), k->rate, r->torch.rate);
		train_ratio(b, sizeof(b), k->reached ? k->t_target : NAN,
			    r->torch.reached ? r->torch.t_target : NAN);
		printf("  cluster / PyTorch 1 process: examples/s %s, time %s\n", a, b);
	}
}

/* Why a verdict on a and b cannot be given in this run; NULL when it can. */
static const char *train_goal_skip(const struct train_runs *r, const struct train_result *a,
				   const struct train_result *b, const char *a_why)
{
	if (!a->ran)
		return a_why;
	if (!b->ran)
		return r->tinfo.skip[0] ? r->tinfo.skip : "PyTorch failed (see above)";
	return NULL;
}

/* dml's examples/s (a) against PyTorch's (b): PASS when at least as many. */
static void train_goal_rate(const char *what, const struct train_runs *r,
			    const struct train_result *a, const struct train_result *b)
{
	const char *skip = train_goal_skip(r, a, b, "not measured in this run");

	if (skip)
		printf("SKIP %s: %s\n", what, skip);
	else
		printf("%s %s: %.0f vs %.0f examples/s (%.2f x)\n",
		       a->rate >= b->rate ? "PASS" : "FAIL", what, a->rate, b->rate,
		       a->rate / b->rate);
}

/* dml's time to the target (a) within factor x PyTorch's (b). */
static void train_goal_time(const char *what, const struct train_runs *r, double target,
			    const struct train_result *a, const struct train_result *b,
			    double factor)
{
	const char *skip = train_goal_skip(r, a, b, "not measured in this run");

	if (skip)
		printf("SKIP %s: %s\n", what, skip);
	else if (!a->reached && !b->reached)
		printf("SKIP %s: neither reached %.3f in this run (raise --max-seconds)\n",
		       what, target);
	else if (!a->reached)
		printf("FAIL %s: %.3f not reached in %.1f s\n", what, target, a->trained_s);
	else if (!b->reached)
		printf("PASS %s: %.2f s; PyTorch did not reach %.3f in %.1f s\n", what,
		       a->t_target, target, b->trained_s);
	else
		printf("%s %s: %.2f s vs %.2f s (needs <= %.2f s)\n",
		       a->t_target <= factor * b->t_target ? "PASS" : "FAIL", what,
		       a->t_target, b->t_target, factor * b->t_target);
}

static void train_print_goals(const struct train_ctx *c, const struct train_runs *r)
{
	const struct train_result *s_sgd = r->sgd_separate ? &r->single_sgd : &r->single;
	const struct train_result *t_sgd = r->sgd_separate ? &r->torch_sgd : &r->torch;
	double target = c->o->target;
	char what[160], opt[32];

	printf("\n");
	train_opt_name(c, 0, opt, sizeof(opt));
	if (r->sgd_separate) {
		snprintf(what, sizeof(what), "dml single process step per example >= "
			 "PyTorch's (same optimizer: %s)", opt);
		train_goal_rate(what, r, &r->single, &r->torch);
	}
	train_opt_name(c, r->sgd_separate, opt, sizeof(opt));
	snprintf(what, sizeof(what), "dml single process step per example >= PyTorch's "
		 "(same optimizer: %s)", opt);
	train_goal_rate(what, r, s_sgd, t_sgd);
	train_opt_name(c, 0, opt, sizeof(opt));
	snprintf(what, sizeof(what), "dml single process reaches %.3f no later than "
		 "PyTorch (%s)", target, opt);
	train_goal_time(what, r, target, &r->single, &r->torch, 1.0);
	snprintf(what, sizeof(what), "cluster (%u workers) reaches %.3f within %.1f x of "
		 "single-process PyTorch's time (%s)", c->o->workers, target,
		 TRAIN_GOAL_VS_TORCH, opt);
	train_goal_time(what, r, target, &r->cluster, &r->torch, TRAIN_GOAL_VS_TORCH);
}

void train_print_table(const struct train_ctx *c, const struct train_runs *r)
{
	const struct train_opts *o = c->o;
	const struct train_result *k = &r->cluster;
	char head[32], name[64], opt[32], load[64];

	snprintf(head, sizeof(head), "to %.3f", o->target);
	printf("\n%-30s %9s %12s %8s %9s %18s  %s\n", "run", "ex/s", head, "epochs",
	       "final acc", "trained", "copies");
	for (int sgd = 0; sgd < 2; sgd++) {
		const struct train_result *s = sgd ? &r->single_sgd : &r->single;
		const struct train_result *t = sgd ? &r->torch_sgd : &r->torch;

		train_opt_name(c, sgd, opt, sizeof(opt));
		snprintf(name, sizeof(name), "dml single process, %s", opt);
		if (s->ran)
			train_print_row(name, s);
		snprintf(name, sizeof(name), "PyTorch 1 process, %s", opt);
		if (t->ran)
			train_print_row(name, t);
	}
	train_opt_name(c, 0, opt, sizeof(opt));
	snprintf(name, sizeof(name), "dml cluster %uw/%us, %s", o->workers, o->servers, opt);
	if (k->ran)
		train_print_row(name, k);
	if (r->torch.ran)
		printf("PyTorch: %s, %u threads\n", r->tinfo.version, r->tinfo.threads);
	if (k->ran)
		printf("cluster time zero: %s\n", k->t0);
	if (k->note[0])
		printf("cluster: %s\n", k->note);
	if (k->ran && k->watch_s > 0)
		printf("cluster: copying and polling cost this program %.2f s CPU in "
		       "%.1f s (%.0f%% of one core, dmlctl included)\n", k->watch_cpu_s,
		       k->watch_s, 100 * k->watch_cpu_s / k->watch_s);
	bench_loadavg(load, sizeof(load));
	printf("load average at the end: %s\n", load);
	train_print_ratios(c, r);
	train_print_goals(c, r);
	fflush(stdout);
}
