/*
 * dml-bench hetero: what placement by measured speed buys on an unequal
 * fleet. One job (by default the source tree's conf/jobs/mlp.conf, with a
 * batch of 1024 a worker so that computing, not the network, sets the pace,
 * and a clock spans several periods of the CPU quotas' scheduler) runs on
 * the local cluster of tools/dml-local, each worker under a CPU quota of its
 * own (dml-local --cpus; by default 0.6, 0.6 and 0.15 of a core: the third
 * machine 4 x slower, the fleet under this machine's two cores so that the
 * comparison measures placement, not contention), in four configurations
 * measured in one run:
 *
 *   (a) BSP, the static equal split: batch_size each, partitions fixed;
 *   (b) BSP, dml's assignment: batches and partitions follow the workers'
 *       compute speeds (batch_split = rate, rebalance = auto: LB-BSP);
 *   (c) the same under SSP, staleness 2;
 *   (d) the fleet without its slowest worker, BSP, the same examples a
 *       clock split equally over its workers.
 *
 * Every configuration trains the same job: clock_batch is batch_size times
 * the whole fleet's workers, so a clock is as many examples whichever
 * workers compute it, and under BSP (bsp_step = clock, the default) the
 * servers apply a clock's pushes as one optimizer step of their summed
 * weight. (a), (b) and (d) therefore do the same arithmetic per clock and
 * differ in how fast their fleet gets through a clock; (c) applies each
 * push as it arrives, as SSP must.
 *
 * For each: the time to the target test accuracy (copies of the model
 * scored after the run, as dml-bench train does), the load spread (each
 * worker's time per clock at its own work, computing and communicating but
 * not waiting for other workers, and at least its CPU time over the cores
 * its quota gives it, from the last reassignment to the end, as +-% around
 * the mean) and the ratios. Then a second scenario: every
 * worker at the fast quota, the slowest one's quota applied part way
 * through a job of (b); each worker's speed and batch over time are drawn
 * as an SVG picture, and the job must still reach the accuracy floor.
 *
 * Must never leave a cluster or a job file behind: each run goes through
 * bench_train_cluster_run(), which takes its cluster down on every path;
 * the job files live in a directory of ours, removed at the end.
 */
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "shard/assign.h"
#include "tools/bench.h"
#include "tools/bench_cluster.h"
#include "tools/bench_hetero.h"
#include "tools/bench_jobfile.h"
#include "tools/bench_opt.h"
#include "tools/bench_train.h"
#include "tools/bench_util.h"
#include "tools/curve_svg.h"
#include "proto/codec.h"
#include "proto/dml_error.h"
#include "proto/log.h"
#include "proto/util.h"

#define HETERO_MAX_WORKERS BENCH_POLL_WORKERS
/* The targets. */
#define HETERO_GOAL_VS_EQUAL 0.45
#define HETERO_GOAL_VS_FEWER 1.05
#define HETERO_GOAL_SPREAD 5.0
#define HETERO_GOAL_CODEC_VS_FEWER 1.0
/* A reassignment's figures settle for this long before they count. */
#define HETERO_SETTLE_NS 1000000000ull
/* A worker's spread needs this many clocks in its window. */
#define HETERO_MIN_CLOCKS 5
/* Rounds of (a) to (d) at most; each configuration shows its median. */
#define HETERO_ROUNDS_MAX 9
#define HETERO_CONFIGS 4

struct hetero_opts {
	const char *job, *build, *cpus, *picture, *codec;
	unsigned servers, batch, hold_ms, rounds;
	double threshold, target, floor, max_seconds, max_epochs, slow_at, smooth;
	int keep, verbose, skip_slowdown;
};

#define H_FIELD(f) offsetof(struct hetero_opts, f)

static const struct bench_opt hetero_opt_rows[] = {
	{ .name = "job", .arg = "FILE", .parse = bench_opt_string, .offset = H_FIELD(job),
	  .help = "job file (default conf/jobs/mlp.conf of the source tree)" },
	{ .name = "cpus", .arg = "LIST", .parse = bench_opt_string, .offset = H_FIELD(cpus),
	  .help = "each worker's quota in cores (default 0.6,0.6,0.15)" },
	{ .name = "batch", .arg = "N", .parse = bench_opt_unsigned, .offset = H_FIELD(batch),
	  .min = 1, .max = 1u << 20, .help = "batch_size of every worker (default 1024)" },
	{ .name = "servers", .arg = "N", .parse = bench_opt_unsigned, .offset = H_FIELD(servers),
	  .min = 1, .max = 64, .help = "servers (default 1)" },
	{ .name = "target", .arg = "ACC", .parse = bench_opt_double, .offset = H_FIELD(target),
	  .min = 1e-6, .max = 1, .help = "test accuracy to reach (default 0.87)" },
	{ .name = "floor", .arg = "ACC", .parse = bench_opt_double, .offset = H_FIELD(floor),
	  .max = 1, .help = "least final accuracy of the slowdown job (default 0.85)" },
	{ .name = "max-epochs", .arg = "E", .parse = bench_opt_double,
	  .offset = H_FIELD(max_epochs), .min = 0.01, .max = 1e6,
	  .help = "each job's max_epochs (default 30)" },
	{ .name = "max-seconds", .arg = "S", .parse = bench_opt_double,
	  .offset = H_FIELD(max_seconds), .min = 1, .max = 3600,
	  .help = "training time per run at most (default 120)" },
	{ .name = "hold-ms", .arg = "MS", .parse = bench_opt_unsigned,
	  .offset = H_FIELD(hold_ms), .min = 1, .max = 600000,
	  .help = "rebalance_hold_ms of (b), (c) (default 1000)" },
	{ .name = "threshold", .arg = "T", .parse = bench_opt_double,
	  .offset = H_FIELD(threshold), .min = 0.01, .max = 100,
	  .help = "rebalance_threshold of (b), (c) (default 0.1, which\n"
		  "follows the fleet closely; a job's default is 0.25)" },
	{ .name = "slow-at", .arg = "S", .parse = bench_opt_double, .offset = H_FIELD(slow_at),
	  .max = 3600, .help = "seconds of training before the slowdown (default 2.5)" },
	{ .name = "rounds", .arg = "N", .parse = bench_opt_unsigned, .offset = H_FIELD(rounds),
	  .min = 1, .max = HETERO_ROUNDS_MAX,
	  .help = "rounds of (a) to (d), in turn; each shows the run\n"
		  "with its median time (default 5, at most " BENCH_STR(HETERO_ROUNDS_MAX) ")" },
	{ .name = "smooth", .arg = "E", .parse = bench_opt_double, .offset = H_FIELD(smooth),
	  .max = 100,
	  .help = "the target counts as reached when the mean accuracy\n"
		  "of the copies within the last E epochs reaches it\n"
		  "(default 0.5; 0: when one copy does)" },
	{ .name = "codec", .arg = "NAME", .parse = bench_opt_string, .offset = H_FIELD(codec),
	  .help = "how every table's values travel on every link: none\n"
		  "(default), fp16, bf16, int8, topk:F or topk16:F (pull replies\n"
		  "then in fp16); the job keys codec and pull_codec" },
	{ .name = "picture", .arg = "FILE", .parse = bench_opt_string, .offset = H_FIELD(picture),
	  .help = "the slowdown's picture (default hetero-slowdown.svg)" },
	{ .name = "skip-slowdown", .parse = bench_opt_flag, .offset = H_FIELD(skip_slowdown),
	  .help = "only (a) to (d)" },
	{ .name = "build", .arg = "DIR", .parse = bench_opt_string, .offset = H_FIELD(build),
	  .help = "the build tree (default: the one this program is in)" },
	{ .name = "keep", .parse = bench_opt_flag, .offset = H_FIELD(keep),
	  .help = "keep each cluster's directory (configs, logs)" },
	BENCH_OPT_VERBOSE(H_FIELD(verbose), "log informational messages; twice: debug"),
	BENCH_OPT_HELP,
};

static const struct bench_opts_table hetero_table = {
	"hetero", hetero_opt_rows, DML_ARRAY_LEN(hetero_opt_rows), 20
};

void bench_hetero_usage(FILE *out)
{
	fprintf(out,
		"dml-bench hetero [options]: time to a target accuracy on a fleet of\n"
		"unequal workers (CPU quotas through tools/dml-local --cpus), for (a) BSP\n"
		"with the static equal split, (b) BSP with batches and partitions that\n"
		"follow measured speeds (LB-BSP), (c) the same with SSP staleness 2, (d)\n"
		"the fleet without its slowest worker (every one with clock_batch =\n"
		"batch x the fleet's workers: the same examples a clock); then a job\n"
		"whose worker slows down part way, drawn as an SVG picture.\n"
		"\n");
	bench_opts_help(&hetero_table, out);
	fprintf(out,
		"\n"
		"Needs writable cgroups (root). Start: from the first update until every\n"
		"worker trained (the slowest one loading its data); the time to the\n"
		"target counts from there. Load spread: each worker's time per clock at\n"
		"its own work (computing and communicating, not waiting for other\n"
		"workers, and at least its CPU time over its quota) from the last\n"
		"reassignment (plus 1 s) to the end, as +-%% of the mean ((max - min) / 2\n"
		"/ mean). Exit status: 0 when it ran (even if a target failed), 1 on an\n"
		"error, 2 on bad usage, 130 when interrupted.\n");
}

static int hetero_usage_error(const char *opt, const char *value, const char *want)
{
	return bench_usage_error("hetero", opt, value, want);
}

/* Returns 0, or the exit status to end with (0 after --help). */
static int hetero_opts_parse(int argc, char **argv, struct hetero_opts *o, int *help)
{
	struct dml_codec c;
	int rc;

	memset(o, 0, sizeof(*o));
	o->cpus = "0.6,0.6,0.15";
	o->picture = "hetero-slowdown.svg";
	o->servers = 1;
	o->batch = 1024;
	o->hold_ms = 1000;
	o->threshold = 0.1;
	o->target = 0.87;
	o->floor = 0.85;
	o->max_epochs = 30;
	o->max_seconds = 120;
	o->slow_at = 2.5;
	o->rounds = 5;
	o->smooth = 0.5;
	o->codec = "none";
	rc = bench_opts_parse(&hetero_table, argc, argv, o, help);
	if (rc == 0 && !*help && dml_codec_parse(o->codec, &c, NULL, 0) != 0)
		rc = hetero_usage_error("--codec", o->codec, "none, fp16, bf16, int8, topk:F or topk16:F");
	return rc;
}

/* ---- the fleet ----------------------------------------------------------- */

/* The --cpus list: its quotas as given (text) and as numbers. */
struct hetero_fleet {
	unsigned n;
	char text[HETERO_MAX_WORKERS][16];
	double cores[HETERO_MAX_WORKERS];
	unsigned slowest, fastest; /* their indexes */
};

static int hetero_fleet_parse(const char *list, struct hetero_fleet *f)
{
	const char *p = list;

	memset(f, 0, sizeof(*f));
	while (*p) {
		size_t len = strcspn(p, ",");

		if (f->n == HETERO_MAX_WORKERS || len == 0 || len >= sizeof(f->text[0]))
			return hetero_usage_error("--cpus", list, "2 to 8 quotas, e.g. "
						  "0.6,0.6,0.15");
		memcpy(f->text[f->n], p, len);
		if (dml_parse_double(f->text[f->n], 0.01, 64, &f->cores[f->n]))
			return hetero_usage_error("--cpus", list, "quotas of 0.01 to 64 cores");
		if (f->cores[f->n] < f->cores[f->slowest])
			f->slowest = f->n;
		if (f->cores[f->n] > f->cores[f->fastest])
			f->fastest = f->n;
		f->n++;
		p += len + (p[len] == ',');
	}
	if (f->n < 2)
		return hetero_usage_error("--cpus", list, "2 to 8 quotas, e.g. 0.6,0.6,0.15");
	return 0;
}

/* The list without the slowest worker, or with every quota the fastest. */
static void hetero_fleet_list(const struct hetero_fleet *f, int drop_slowest, char *out,
			      size_t len)
{
	size_t used = 0;

	out[0] = '\0';
	for (unsigned i = 0; i < f->n && used < len; i++) {
		if (drop_slowest && i == f->slowest)
			continue;
		used += (size_t)snprintf(out + used, len - used, "%s%s", used ? "," : "",
					 drop_slowest ? f->text[i] : f->text[f->fastest]);
	}
}

/* ---- figures ------------------------------------------------------------- */

/*
 * Seconds worker y (a later poll of x) was busy at its own work since x, as
 * the scheduler weighs it (dml_busy_s); NaN when a count went down.
 */
static double hetero_busy_s(const struct bench_poll_worker *x, const struct bench_poll_worker *y)
{
	double work = dml_work_s(y->compute_s, y->wait_s, y->held_s) -
		      dml_work_s(x->compute_s, x->wait_s, x->held_s);
	double cpu = y->cpu_s - x->cpu_s;

	return work >= 0 && cpu >= 0 ? dml_busy_s(work, cpu, y->cores) : NAN;
}

/*
 * The load spread between polls a and b: each live worker's seconds of its
 * own work per clock between the two, as +-% of the mean; NaN when fewer
 * than two workers made HETERO_MIN_CLOCKS clocks in between.
 */
static double hetero_spread_between(const struct bench_poll *a, const struct bench_poll *b)
{
	double times[HETERO_MAX_WORKERS], spread = NAN;
	uint32_t m = 0;

	for (unsigned k = 0; k < a->nw && k < b->nw; k++) {
		const struct bench_poll_worker *x = &a->w[k], *y = &b->w[k];
		double busy;

		if (x->id != y->id || !y->alive || y->clock < x->clock + HETERO_MIN_CLOCKS ||
		    !((busy = hetero_busy_s(x, y)) >= 0))
			continue;
		times[m++] = busy / (double)(y->clock - x->clock);
	}
	if (m >= 2 && dml_assign_load_spread(times, m, &spread) != 0)
		spread = NAN;
	return m >= 2 ? spread : NAN;
}

/* The last poll of a running job with workers, at or before ns. */
static size_t hetero_last_running(const struct bench_poll *p, size_t n, uint64_t ns)
{
	size_t last = SIZE_MAX;

	for (size_t i = 0; i < n && p[i].ns <= ns; i++)
		if (strcmp(p[i].state, "running") == 0 && p[i].nw > 0)
			last = i;
	return last;
}

/*
 * The load spread of a run between from_ns and to_ns: from its first
 * reassignment in that window (plus HETERO_SETTLE_NS), later corrections
 * included, to the last running poll; NaN when the window is too short.
 */
static double hetero_spread(const struct bench_poll *p, size_t n, uint64_t from_ns,
			    uint64_t to_ns)
{
	size_t last = hetero_last_running(p, n, to_ns), first = SIZE_MAX;
	uint64_t since = from_ns;

	if (last == SIZE_MAX)
		return NAN;
	for (size_t i = 1; i <= last; i++) {
		if (p[i].assignment != p[i - 1].assignment && p[i].ns > from_ns) {
			since = p[i].ns;
			break;
		}
	}
	since += HETERO_SETTLE_NS;
	for (size_t i = 0; i < last && first == SIZE_MAX; i++)
		if (p[i].ns >= since && p[i].nw > 0)
			first = i;
	return first == SIZE_MAX ? NAN : hetero_spread_between(&p[first], &p[last]);
}

/* One configuration's run and what it measured. */
struct hetero_run {
	const char *label;       /* "(a)" */
	const char *what;        /* "BSP, equal split" */
	char job[PATH_MAX];
	char cpus[128];
	unsigned workers;
	int ran;
	struct bench_train_fig fig;
	double spread;           /* from the first reassignment on, +-% */
};

static double hetero_time(const struct hetero_run *r);

static int hetero_measure(const struct hetero_opts *o, struct hetero_run *r,
			  const struct bench_train_cfg *extra)
{
	struct bench_train_cfg cfg = {
		.build = o->build, .job = r->job, .cpus = r->cpus, .servers = o->servers,
		.workers = r->workers, .target = o->target, .max_seconds = o->max_seconds,
		.keep = o->keep, .smooth_epochs = o->smooth,
	};
	int rc;

	if (extra) {
		cfg.slow_after_s = extra->slow_after_s;
		cfg.slow_worker = extra->slow_worker;
		cfg.slow_cpus = extra->slow_cpus;
	}
	printf("%s %s: %u workers at %s cores ...", r->label, r->what, r->workers, r->cpus);
	fflush(stdout);
	rc = bench_train_cluster_run(&cfg, &r->fig);
	r->ran = rc == 0;
	if (rc == 0)
		r->spread = hetero_spread(r->fig.polls, r->fig.npolls, r->fig.t0_ns, UINT64_MAX);
	if (rc == 0 && r->fig.reached)
		printf(" %.2f reached in %.1f s of training (%.1f s from the first update)\n",
		       o->target, hetero_time(r), r->fig.t_target);
	else
		printf(" %s\n", rc ? "failed" : "target not reached");
	return rc;
}

/* Unreached last. */
static int hetero_time_cmp(const void *a, const void *b)
{
	double x = hetero_time(a), y = hetero_time(b);

	x = isnan(x) ? INFINITY : x;
	y = isnan(y) ? INFINITY : y;
	return (x > y) - (x < y);
}

/*
 * o->rounds rounds of (a) to (d), in turn, so that a drift of the machine's
 * load touches every configuration alike; runs[i] ends as configuration
 * i's run with the median time to the target.
 */
static int hetero_rounds(const struct hetero_opts *o, struct hetero_run *runs)
{
	struct hetero_run *all = dml_xcalloc((size_t)HETERO_CONFIGS * o->rounds, sizeof(*all));
	int rc = 0;

	for (unsigned r = 0; r < o->rounds && rc == 0; r++) {
		for (size_t i = 0; i < HETERO_CONFIGS && rc == 0; i++) {
			struct hetero_run *x = &all[i * o->rounds + r];

			*x = runs[i];
			rc = hetero_measure(o, x, NULL);
		}
	}
	for (size_t i = 0; i < HETERO_CONFIGS; i++) {
		struct hetero_run *mine = &all[i * o->rounds];
		unsigned done = 0;

		while (done < o->rounds && mine[done].ran)
			done++;
		if (!done)
			continue;
		qsort(mine, done, sizeof(*mine), hetero_time_cmp);
		runs[i] = mine[(done - 1) / 2];
		mine[(done - 1) / 2].fig.polls = NULL;
	}
	for (size_t k = 0; k < (size_t)HETERO_CONFIGS * o->rounds; k++)
		free(all[k].fig.polls);
	free(all);
	return rc;
}

/* ---- report -------------------------------------------------------------- */

static double hetero_start_s(const struct hetero_run *r)
{
	return r->ran ? bench_train_start_s(&r->fig, r->workers) : NAN;
}

static double hetero_time(const struct hetero_run *r)
{
	return r->ran ? bench_train_time(&r->fig, r->workers) : NAN;
}

static void hetero_print_row(const struct hetero_run *r, const struct hetero_run *a,
			     const struct hetero_run *d)
{
	char st[32], t[32], ep[32], rate[32], sp[32], va[32], vd[32];
	double tt = hetero_time(r);

	bench_cell(st, sizeof(st), "%.2f s", hetero_start_s(r));
	bench_cell(t, sizeof(t), "%.1f s", tt);
	bench_cell(ep, sizeof(ep), "%.1f", r->ran ? r->fig.ep_target : NAN);
	bench_cell(rate, sizeof(rate), "%.0f", r->ran ? r->fig.rate : NAN);
	bench_cell(sp, sizeof(sp), "+-%.1f%%", r->ran ? r->spread : NAN);
	bench_cell(va, sizeof(va), "%.2f", tt / hetero_time(a));
	bench_cell(vd, sizeof(vd), "%.2f", tt / hetero_time(d));
	printf("%-4s %-38s %7s %10s %7s %11s %10s %8s %8s\n", r->label, r->what, st, t, ep,
	       rate, sp, va, vd);
}

static void hetero_print(const struct hetero_opts *o, struct hetero_run *runs, size_t n)
{
	const struct hetero_run *a = &runs[0], *b = &runs[1], *c = &runs[2], *d = &runs[3];
	double best = fmin(hetero_time(b), hetero_time(c));
	char head[64];

	if (isnan(hetero_time(b)) || isnan(hetero_time(c)))
		best = isnan(hetero_time(b)) ? hetero_time(c) : hetero_time(b);
	snprintf(head, sizeof(head), "time to %.2f", o->target);
	printf("\n%-4s %-38s %7s %10s %7s %11s %10s %8s %8s\n", "", "configuration", "start",
	       head, "epochs", "examples/s", "load", "vs (a)", "vs (d)");
	for (size_t i = 0; i < n; i++)
		hetero_print_row(&runs[i], a, d);
	printf("start: from the first update until every worker trained (the slowest\n"
	       "one loading its data); time to %.2f counts from there.\n", o->target);
	printf("\ntargets (the issue's):\n");
	bench_goal("best of (b), (c) <= 0.45 x (a)", best / hetero_time(a),
		    HETERO_GOAL_VS_EQUAL, "%.3f x", 0);
	bench_goal("best of (b), (c) <= 1.05 x (d)", best / hetero_time(d),
		    HETERO_GOAL_VS_FEWER, "%.3f x", 0);
	bench_goal("(b) load spread after rebalancing <= +-5%", b->ran ? b->spread : NAN,
		    HETERO_GOAL_SPREAD, "+-%.1f%%", 0);
	/* With a lossy codec the slow worker moves less of the model a clock:
	 * placement by speed should then catch up with dropping it. */
	if (strcmp(o->codec, "none") != 0)
		bench_goal("with the codec: (b) <= 1.0 x (d)", hetero_time(b) / hetero_time(d),
			   HETERO_GOAL_CODEC_VS_FEWER, "%.3f x", 0);
	/* Time to a target also counts the epochs each run needed, which
	 * vary by a few from run to run; throughput is placement alone. */
	printf("  time per example, the best of (b), (c): %.3f x (a), %.3f x (d)\n",
	       a->fig.rate / fmax(b->fig.rate, c->fig.rate),
	       d->fig.rate / fmax(b->fig.rate, c->fig.rate));
}

/* ---- the slowdown -------------------------------------------------------- */

static int hetero_picture(const struct hetero_opts *o, const struct hetero_run *r,
			  const struct hetero_fleet *f)
{
	struct dml_curve_series s[2 * HETERO_MAX_WORKERS];
	char names[2 * HETERO_MAX_WORKERS][48], title[320], err[PATH_MAX + 64];
	const struct bench_poll *p = r->fig.polls;
	unsigned nw = p && r->fig.npolls ? p[r->fig.npolls - 1].nw : 0;
	struct dml_curve c = {
		.title = title,
		.x = { .label = "seconds of training" },
		.y = { { .label = "speed: examples per second of its own work (thousands)" },
		       { .label = "batch (examples per clock)" } },
		.series = s,
		.nseries = 2 * (size_t)nw,
	};
	int rc;

	snprintf(title, sizeof(title), "worker %u throttled from %s to %s cores at %.1f s: "
		 "speed and batch of each worker", f->slowest + 1, f->text[f->fastest],
		 f->text[f->slowest], o->slow_at);
	memset(s, 0, sizeof(s));
	for (unsigned k = 0; k < nw; k++) {
		snprintf(names[2 * k], sizeof(names[0]), "worker %u speed", k + 1);
		snprintf(names[2 * k + 1], sizeof(names[0]), "worker %u batch", k + 1);
		s[2 * k] = (struct dml_curve_series){ .name = names[2 * k],
						      .axis = DML_CURVE_LEFT };
		s[2 * k + 1] = (struct dml_curve_series){ .name = names[2 * k + 1],
							  .axis = DML_CURVE_RIGHT };
	}
	for (size_t i = 0; i < r->fig.npolls; i++) {
		double x = ((double)p[i].ns - (double)r->fig.t0_ns) / 1e9;

		for (unsigned k = 0; k < nw && k < p[i].nw; k++) {
			if (x < 0 || strcmp(p[i].state, "running") != 0)
				continue;
			dml_curve_series_add(&s[2 * k], x, p[i].w[k].speed / 1000);
			dml_curve_series_add(&s[2 * k + 1], x, p[i].w[k].batch);
		}
	}
	rc = dml_curve_svg_write(o->picture, &c, err, sizeof(err));
	if (rc)
		dml_err("%s", err);
	for (unsigned k = 0; k < 2 * nw; k++)
		dml_curve_series_destroy(&s[k]);
	return rc;
}

static int hetero_slowdown(const struct hetero_opts *o, const struct hetero_fleet *f,
			   struct hetero_run *r)
{
	struct bench_train_cfg slow = {
		.slow_after_s = o->slow_at, .slow_worker = f->slowest + 1,
		.slow_cpus = f->text[f->slowest],
	};
	uint64_t at = 0;
	double before, after;
	int rc = hetero_measure(o, r, &slow);

	if (rc)
		return rc;
	at = r->fig.t0_ns + (uint64_t)(o->slow_at * 1e9);
	before = hetero_spread(r->fig.polls, r->fig.npolls, r->fig.t0_ns, at);
	after = hetero_spread(r->fig.polls, r->fig.npolls, at, UINT64_MAX);
	printf("\nmid-job slowdown: all at %s cores, worker %u at %s from %.1f s of "
	       "training\n", f->text[f->fastest], f->slowest + 1, f->text[f->slowest],
	       o->slow_at);
	printf("  time to %.2f: %.1f s; final accuracy %.4f; load spread +-%.1f%% before, "
	       "+-%.1f%% after rebalancing\n", o->target, hetero_time(r), r->fig.final_acc,
	       before, after);
	bench_goal("final accuracy >= the floor", r->fig.final_acc, o->floor, "%.4f", 1);
	if ((rc = hetero_picture(o, r, f)) == 0)
		printf("  picture of each worker's speed and batch: %s\n", o->picture);
	return rc;
}

/* ---- main ---------------------------------------------------------------- */

/* The [job] keys of one configuration. */
static size_t hetero_keys(const struct hetero_opts *o, const char *name, long staleness,
			  int by_rate, unsigned batch, unsigned fleet, struct bench_job_key *kv)
{
	size_t n = 0;

	bench_job_key_set(kv, &n, "job", "name", "hetero-%s", name);
	bench_job_key_set(kv, &n, "job", "staleness", "%ld", staleness);
	bench_job_key_set(kv, &n, "job", "batch_size", "%u", batch);
	bench_job_key_set(kv, &n, "job", "clock_batch", "%u", batch * fleet);
	bench_job_key_set(kv, &n, "job", "batch_split", "%s", by_rate ? "rate" : "equal");
	bench_job_key_set(kv, &n, "job", "rebalance", "%s", by_rate ? "auto" : "off");
	bench_job_key_set(kv, &n, "job", "rebalance_hold_ms", "%u", o->hold_ms);
	bench_job_key_set(kv, &n, "job", "rebalance_threshold", "%g", o->threshold);
	bench_job_key_set(kv, &n, "job", "max_epochs", "%g", o->max_epochs);
	/* accuracy comes from copies of the model: no evaluation on the way */
	bench_job_key_set(kv, &n, "job", "eval_every", "%u", 1000000u);
	bench_job_key_set(kv, &n, "job", "partitions", "%u", 24u);
	/* A pull reply carries every value: topk's pulls go in fp16. */
	bench_job_key_set(kv, &n, "table", "codec", "%s", o->codec);
	bench_job_key_set(kv, &n, "table", "pull_codec", "%s",
			  strncmp(o->codec, "topk", 4) == 0 ? "fp16" : o->codec);
	return n;
}

static int hetero_prepare(const struct hetero_opts *o, const struct hetero_fleet *f,
			  const char *job, const char *dir, struct hetero_run *runs)
{
	static const struct {
		const char *label, *what, *name;
		long staleness;
		int by_rate, fewer;
	} confs[] = {
		{ "(a)", "BSP, static equal split", "a", 0, 0, 0 },
		{ "(b)", "BSP, batches by measured speed", "b", 0, 1, 0 },
		{ "(c)", "SSP s=2, batches by measured speed", "c", 2, 1, 0 },
		{ "(d)", "BSP, the slowest worker removed", "d", 0, 0, 1 },
		{ "slow", "BSP by speed, a worker slows down", "slowdown", 0, 1, 0 },
	};
	struct bench_job_key kv[16];
	int rc = 0;

	for (size_t i = 0; i < DML_ARRAY_LEN(confs) && rc == 0; i++) {
		struct hetero_run *r = &runs[i];
		size_t n = hetero_keys(o, confs[i].name, confs[i].staleness, confs[i].by_rate,
				       o->batch, f->n, kv);

		r->label = confs[i].label;
		r->what = confs[i].what;
		r->workers = confs[i].fewer ? f->n - 1 : f->n;
		r->spread = NAN;
		if (confs[i].fewer || strcmp(confs[i].name, "slowdown") == 0)
			hetero_fleet_list(f, confs[i].fewer, r->cpus, sizeof(r->cpus));
		else
			snprintf(r->cpus, sizeof(r->cpus), "%s", o->cpus);
		rc = bench_job_write(job, dir, confs[i].name, kv, n, r->job, sizeof(r->job));
	}
	return rc;
}

int bench_hetero_main(int argc, char **argv)
{
	struct hetero_opts o;
	struct hetero_fleet f;
	struct hetero_run runs[5];
	char build[PATH_MAX], src[PATH_MAX], job[PATH_MAX], dir[PATH_MAX], load[64];
	int help, rc, have_dir = 0;

	rc = hetero_opts_parse(argc, argv, &o, &help);
	if (rc == 0 && !help)
		rc = hetero_fleet_parse(o.cpus, &f);
	if (bench_cmd_begin(rc, help, bench_hetero_usage, o.verbose))
		return rc;
	memset(runs, 0, sizeof(runs));
	rc = bench_build_find(o.build, build, sizeof(build));
	if (rc == 0 && bench_src_find(build, src, sizeof(src)) != 0) {
		dml_err("cannot find the source tree of build %s (for tools/dml-local)", build);
		rc = DML_ENOTFOUND;
	}
	if (rc == 0 && !o.job && bench_path(job, sizeof(job), src, "conf/jobs/mlp.conf"))
		rc = DML_EINVAL;
	if (rc == 0 && o.job)
		snprintf(job, sizeof(job), "%s", o.job);
	if (rc == 0 && (rc = bench_tmpdir_make("dml-bench-hetero", dir, sizeof(dir))) == 0)
		have_dir = 1;
	if (rc == 0)
		rc = hetero_prepare(&o, &f, job, dir, runs);
	if (rc == 0) {
		bench_loadavg(load, sizeof(load));
		printf("dml-bench hetero: %s, batch %u a worker, fleet %s cores, %u server%s; "
		       "codec %s; target test accuracy %.2f (mean of the copies over %g epochs); "
		       "%u rounds; %s\n", job, o.batch, o.cpus, o.servers,
		       o.servers == 1 ? "" : "s", o.codec, o.target, o.smooth, o.rounds, load);
	}
	if (rc == 0)
		rc = hetero_rounds(&o, runs);
	if (!bench_interrupted() && runs[0].ran)
		hetero_print(&o, runs, HETERO_CONFIGS);
	if (rc == 0 && !o.skip_slowdown)
		rc = hetero_slowdown(&o, &f, &runs[4]);
	if (bench_interrupted())
		dml_warn("interrupted; stopped");
	for (size_t i = 0; i < DML_ARRAY_LEN(runs); i++)
		free(runs[i].fig.polls);
	if (have_dir && !o.keep)
		bench_tmpdir_remove(dir);
	else if (have_dir)
		printf("job files kept in %s\n", dir);
	return bench_exit_status(rc);
}
