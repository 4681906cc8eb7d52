/*
 * dml-bench zones: what a fleet spread over zones pays on the slow link
 * between them, and what zone aggregators and cross-zone codecs save. One
 * job (by default the source tree's conf/jobs/mlp.conf: its model, batch
 * and optimizer, only max_epochs changed) runs on clusters of
 * tools/dml-local in these configurations, taking turns over the rounds:
 *
 *   (a) LAN reference: every worker and the servers in one zone;
 *   (b) flat across the zones (dml-local --zones, the servers in the first
 *       zone): every worker straight to the owners, full precision;
 *   (c) zone aggregators, full precision;
 *   (d) aggregators with fp16 pushes and pulls across zones;
 *   (e) aggregators with each lossy codec of --lossy on cross-zone pushes
 *       (error feedback), --lossy-pull on pulls (topk: delta pulls); the
 *       best one counts.
 *
 * (c), (d) and (e) run a dml-aggregator in every zone after the first
 * (dml-local --aggregators): the zone's workers push in floats to it, and it
 * sends the zone's sum across in the table's cross-zone codec, with error
 * feedback of its own. A configuration differs from the others only in
 * the strings of its row in zones_confs (the codec keys of every [table]).
 * A job file refused (by the job parser or the scheduler) shows as
 * "FAIL: refused: REASON" and the other configurations go on.
 *
 * Per configuration, the median over the rounds of: the bytes the zone
 * link carried both ways per training example (tc's counts through
 * `dml-local links`, from the submission to the job's end), the time to
 * the target accuracy smoothed as dml-bench hetero smooths it, and the
 * final accuracy after the job's epochs; then the targets.
 *
 * Must never leave a cluster or a job file behind: each run goes through
 * bench_train_cluster_run(), which takes its cluster down on every path;
 * the job files live in a directory of ours, removed at the end.
 */
#include <limits.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tools/bench.h"
#include "tools/bench_cluster.h"
#include "tools/bench_jobfile.h"
#include "tools/bench_opt.h"
#include "tools/bench_train.h"
#include "tools/bench_util.h"
#include "tools/bench_zones.h"
#include "proto/dml_error.h"
#include "proto/job_spec.h"
#include "proto/log.h"
#include "proto/util.h"

/* Rounds at most; each configuration shows its medians. */
#define ZONES_ROUNDS_MAX 9
/* Lossy codecs of --lossy at most: (e1) to (e6). */
#define ZONES_LOSSY_MAX 6
/* (a) to (d), then the lossy ones. */
#define ZONES_RUNS_MAX (4 + ZONES_LOSSY_MAX)
/* 5 epochs: the flat run takes 4.5 to 7.5 minutes at 100 Mbit/s on a
 * shared 2-core machine (each epoch moves about 0.8 GB across), the whole
 * default run 10 to 15 once every configuration runs; the copies' mean
 * passes 0.87 after about 3 epochs. */
#define ZONES_DEFAULT_EPOCHS 5
/* The targets. */
#define ZONES_GOAL_AGG_BYTES 0.55      /* (c) x (b) */
#define ZONES_GOAL_CODEC_BYTES 0.03    /* best of (d), (e) x (b) */
#define ZONES_GOAL_ACC_POINTS 0.5      /* below (a) */
#define ZONES_GOAL_TIME_VS_LAN 1.25
#define ZONES_GOAL_TIME_VS_FLAT 0.2

struct zones_opts {
	const char *job, *build, *zones, *wan, *lossy, *lossy_pull, *configs;
	unsigned servers, rounds;
	double epochs, target, smooth, max_seconds;
	int keep, verbose;
};

#define Z_FIELD(f) offsetof(struct zones_opts, f)

static const struct bench_opt zones_opt_rows[] = {
	{ .name = "job", .arg = "FILE", .parse = bench_opt_string, .offset = Z_FIELD(job),
	  .help = "job file (default conf/jobs/mlp.conf of the source tree)" },
	{ .name = "epochs", .arg = "E", .parse = bench_opt_double, .offset = Z_FIELD(epochs),
	  .min = 0.01, .max = 1000,
	  .help = "every job's max_epochs; the final accuracy is after\n"
		  "them (default " BENCH_STR(ZONES_DEFAULT_EPOCHS) ")" },
	{ .name = "zones", .arg = "LIST", .parse = bench_opt_string, .offset = Z_FIELD(zones),
	  .help = "the fleet, as dml-local --zones (default A:2,B:2);\n"
		  "(a) runs as many workers in one zone" },
	{ .name = "wan", .arg = "RATE", .parse = bench_opt_string, .offset = Z_FIELD(wan),
	  .help = "the rate between zones, each way (default 100mbit)" },
	{ .name = "servers", .arg = "N", .parse = bench_opt_unsigned, .offset = Z_FIELD(servers),
	  .min = 1, .max = 64, .help = "servers, all in the first zone (default 1)" },
	{ .name = "lossy", .arg = "LIST", .parse = bench_opt_string, .offset = Z_FIELD(lossy),
	  .help = "(e)'s cross-zone push codecs, one run each (default\n"
		  "int8,topk:0.01; at most " BENCH_STR(ZONES_LOSSY_MAX) ")" },
	{ .name = "lossy-pull", .arg = "NAME", .parse = bench_opt_string,
	  .offset = Z_FIELD(lossy_pull),
	  .help = "(e)'s cross-zone pull codec (default topk16:0.04:\n"
		  "delta pulls through the aggregators)" },
	{ .name = "configs", .arg = "LIST", .parse = bench_opt_string,
	  .offset = Z_FIELD(configs),
	  .help = "the configurations to run, letters of a to e (default\n"
		  "abcde); (a), the reference, always runs" },
	{ .name = "target", .arg = "ACC", .parse = bench_opt_double, .offset = Z_FIELD(target),
	  .min = 1e-6, .max = 1, .help = "test accuracy to reach (default 0.87)" },
	{ .name = "smooth", .arg = "E", .parse = bench_opt_double, .offset = Z_FIELD(smooth),
	  .max = 100,
	  .help = "the target counts as reached when the mean accuracy\n"
		  "of the copies within the last E epochs reaches it\n"
		  "(default 0.5, as dml-bench hetero; 0: one copy)" },
	{ .name = "rounds", .arg = "N", .parse = bench_opt_unsigned, .offset = Z_FIELD(rounds),
	  .min = 1, .max = ZONES_ROUNDS_MAX,
	  .help = "rounds of every configuration, in turn; each shows\n"
		  "its medians (default 1, at most " BENCH_STR(ZONES_ROUNDS_MAX) ")" },
	{ .name = "max-seconds", .arg = "S", .parse = bench_opt_double,
	  .offset = Z_FIELD(max_seconds), .min = 1, .max = 36000,
	  .help = "training time per run at most (default 900)" },
	{ .name = "build", .arg = "DIR", .parse = bench_opt_string, .offset = Z_FIELD(build),
	  .help = "the build tree (default: the one this program is in)" },
	{ .name = "keep", .parse = bench_opt_flag, .offset = Z_FIELD(keep),
	  .help = "keep each cluster's directory and the job files" },
	BENCH_OPT_VERBOSE(Z_FIELD(verbose), "log informational messages; twice: debug"),
	BENCH_OPT_HELP,
};

static const struct bench_opts_table zones_table = {
	"zones", zones_opt_rows, DML_ARRAY_LEN(zones_opt_rows), 20
};

void bench_zones_usage(FILE *out)
{
	fprintf(out,
		"dml-bench zones [options]: one job (the same model, batch and optimizer\n"
		"in every run) on a fleet spread over zones joined by a slow link\n"
		"(tools/dml-local --zones --wan), for (a) the fleet in one zone (LAN\n"
		"reference), (b) flat routing across the zones at full precision, (c)\n"
		"zone aggregators, (d) aggregators + fp16 and (e) aggregators + each\n"
		"lossy codec of --lossy; per configuration the cross-zone bytes per\n"
		"training example (tc's counts, both ways), the time to the target\n"
		"accuracy and the final accuracy, medians over the rounds, and the\n"
		"issue's targets.\n"
		"\n");
	bench_opts_help(&zones_table, out);
	fprintf(out,
		"\n"
		"(c) to (e) run a dml-aggregator in every zone after the first\n"
		"(dml-local --aggregators); it sends its zone's summed pushes across in\n"
		"the job file's codec_cross_zone of every table (error feedback at the\n"
		"aggregator), pulls in pull_codec_cross_zone.\n"
		"A configuration whose job file is refused shows \"FAIL: refused\" and\n"
		"the others go on. The link is a rate limit only (no added latency).\n"
		"Needs root and iproute2 (as dml-local --zones): without them it prints\n"
		"SKIP and exits 0. Exit status: 0 when it ran or skipped (even if a\n"
		"target failed), 1 on an error, 2 on bad usage, 130 when interrupted.\n");
}

/* ---- configurations ------------------------------------------------------ */

/* How a configuration routes pushes and pulls across the zones. */
enum zones_route {
	ZONES_ONE_ZONE,   /* no cross-zone link at all */
	ZONES_FLAT,       /* every worker straight to the owners */
	ZONES_AGGREGATORS /* each zone's workers through its aggregator */
};

/* One row of the benchmark: its strings are all that tells it apart. */
static const struct zones_conf {
	const char *label, *what;
	enum zones_route route;
	int compressed;   /* (d), (e): the codec rows the targets compare */
	/* codec_cross_zone and pull_codec_cross_zone of every table; NULL:
	 * the job's own; "" for codec: each of --lossy, "" for pull_codec:
	 * --lossy-pull */
	const char *codec, *pull_codec;
} zones_confs[] = {
	{ "(a)", "LAN: every node in one zone", ZONES_ONE_ZONE, 0, NULL, NULL },
	{ "(b)", "flat across the zones, full precision", ZONES_FLAT, 0, "none", "none" },
	{ "(c)", "zone aggregators, full precision", ZONES_AGGREGATORS, 0, "none", "none" },
	{ "(d)", "aggregators + fp16 pushes and pulls", ZONES_AGGREGATORS, 1, "fp16",
	  "fp16" },
	{ "(e)", "aggregators + lossy pushes", ZONES_AGGREGATORS, 1, "", "" },
};

/* One configuration's runs and their medians. */
struct zones_run {
	const struct zones_conf *conf;
	char label[8];           /* "(e1)" */
	char what[160];
	char codec[48], pull_codec[48];
	char job[PATH_MAX];
	char refused[320];       /* why its job was refused; "" if it was not */
	unsigned ran;            /* rounds measured */
	double bytes_ex[ZONES_ROUNDS_MAX], time[ZONES_ROUNDS_MAX];
	double acc[ZONES_ROUNDS_MAX], epochs[ZONES_ROUNDS_MAX];
	double m_bytes_ex, m_time, m_acc, m_epochs; /* medians; NaN: none */
};

static int zones_usage_error(const char *opt, const char *value, const char *want)
{
	return bench_usage_error("zones", opt, value, want);
}

/* The workers of a --zones list (dml-local checks the rest of it). */
static int zones_workers(const char *list, unsigned *workers)
{
	unsigned zones = 0;

	*workers = 0;
	for (const char *p = list; *p; zones++) {
		size_t len = strcspn(p, ",");
		const char *colon = memchr(p, ':', len);
		size_t nlen = colon ? len - (size_t)(colon + 1 - p) : 0;
		char num[8];
		uint64_t n;

		if (nlen == 0 || nlen >= sizeof(num))
			return zones_usage_error("--zones", list, "ZONE:WORKERS pairs, e.g. "
						 "A:2,B:2");
		memcpy(num, colon + 1, nlen);
		num[nlen] = '\0';
		if (dml_parse_u64(num, 0, 256, &n))
			return zones_usage_error("--zones", list, "0 to 256 workers a zone");
		*workers += (unsigned)n;
		p += len + (p[len] == ',');
	}
	if (zones < 2 || *workers == 0)
		return zones_usage_error("--zones", list, "two zones or more with workers, "
					 "e.g. A:2,B:2");
	return 0;
}

/* Whether c runs once per codec of --lossy. */
static int zones_conf_lossy(const struct zones_conf *c)
{
	return c->codec && !c->codec[0];
}

/* The configurations' rows; (e) once per codec of --lossy. */
static int zones_runs_make(const struct zones_opts *o, struct zones_run *runs, size_t *n)
{
	const char *p = o->lossy;

	if (o->configs[strspn(o->configs, "abcde")] != '\0')
		return zones_usage_error("--configs", o->configs, "letters of a to e");
	*n = 0;
	for (size_t i = 0; i < DML_ARRAY_LEN(zones_confs); i++) {
		const struct zones_conf *c = &zones_confs[i];
		int lossy = zones_conf_lossy(c);
		unsigned k = 0;

		/* "(a)": letter a; the reference is runs[0] whatever the list */
		if (i > 0 && !strchr(o->configs, c->label[1]))
			continue;

		do {
			struct zones_run *r = &runs[*n];
			const char *codec = lossy ? p : c->codec ? c->codec : "";
			size_t len = lossy ? strcspn(p, ",") : strlen(codec);

			if (lossy && (len == 0 || len >= sizeof(r->codec) || k == ZONES_LOSSY_MAX))
				return zones_usage_error("--lossy", o->lossy, "1 to "
							 BENCH_STR(ZONES_LOSSY_MAX) " codec names");
			memset(r, 0, sizeof(*r));
			r->conf = c;
			snprintf(r->codec, sizeof(r->codec), "%.*s", (int)len, codec);
			snprintf(r->pull_codec, sizeof(r->pull_codec), "%s",
				 lossy ? o->lossy_pull : c->pull_codec ? c->pull_codec : "");
			if (lossy)
				snprintf(r->label, sizeof(r->label), "(e%u)", ++k);
			else
				snprintf(r->label, sizeof(r->label), "%s", c->label);
			if (lossy)
				snprintf(r->what, sizeof(r->what), "aggregators + %s pushes, %s "
					 "pulls", r->codec, r->pull_codec);
			else
				snprintf(r->what, sizeof(r->what), "%s", c->what);
			(*n)++;
			if (lossy)
				p += len + (p[len] == ',');
		} while (lossy && *p);
	}
	return 0;
}

/*
 * Write run r's job file from src: the job's epochs, no evaluation on the
 * way (the copies are scored), and the run's codec keys in every table;
 * then load it as dmlctl would, r->refused saying why it was refused.
 */
static int zones_job_prepare(const struct zones_opts *o, const char *src, const char *dir,
			     struct zones_run *r)
{
	struct bench_job_key kv[8];
	Dml__JobSpec *spec = NULL;
	char name[32], err[512] = "";
	size_t n = 0, dlen = strlen(dir);
	int rc;

	/* "(e1)": zones-e1 */
	snprintf(name, sizeof(name), "zones-%.*s", (int)strlen(r->label) - 2, r->label + 1);
	bench_job_key_set(kv, &n, "job", "name", "%s", name);
	bench_job_key_set(kv, &n, "job", "max_epochs", "%g", o->epochs);
	bench_job_key_set(kv, &n, "job", "eval_every", "%u", 1000000u);
	if (r->codec[0])
		bench_job_key_set(kv, &n, "table", "codec_cross_zone", "%s", r->codec);
	if (r->pull_codec[0])
		bench_job_key_set(kv, &n, "table", "pull_codec_cross_zone", "%s",
				  r->pull_codec);
	rc = bench_job_write(src, dir, name, kv, n, r->job, sizeof(r->job));
	if (rc)
		return rc;
	if (dml_job_file_load(r->job, &spec, err, sizeof(err)) != 0)
		/* the reason names the file: our directory is of no interest */
		snprintf(r->refused, sizeof(r->refused), "%s",
			 strncmp(err, dir, dlen) == 0 && err[dlen] == '/' ? err + dlen + 1
									  : err);
	dml_job_spec_free(spec);
	return 0;
}

/* ---- runs ---------------------------------------------------------------- */

/* NaN sorts last. */
static int zones_cmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	x = isnan(x) ? INFINITY : x;
	y = isnan(y) ? INFINITY : y;
	return (x > y) - (x < y);
}

/* The median of v[0..n) (sorted in place, NaN as the largest); NaN if none. */
static double zones_median(double *v, unsigned n)
{
	double m;

	if (n == 0)
		return NAN;
	qsort(v, n, sizeof(*v), zones_cmp);
	m = v[(n - 1) / 2];
	return isinf(m) ? NAN : m;
}

/* One run of r (round `round`); rc of the run, a refusal not counted. */
static int zones_measure(const struct zones_opts *o, unsigned workers, struct zones_run *r,
			 unsigned round)
{
	struct bench_train_cfg cfg = {
		.build = o->build, .job = r->job, .servers = o->servers, .workers = workers,
		.target = o->target, .max_seconds = o->max_seconds, .keep = o->keep,
		.smooth_epochs = o->smooth,
	};
	struct bench_train_fig fig;
	int rc;

	if (r->conf->route != ZONES_ONE_ZONE) {
		cfg.zones = o->zones;
		cfg.wan = o->wan;
	}
	cfg.aggregators = r->conf->route == ZONES_AGGREGATORS;
	printf("%s %s, round %u/%u ...", r->label, r->what, round + 1, o->rounds);
	fflush(stdout);
	rc = bench_train_cluster_run(&cfg, &fig);
	if (rc && fig.refused[0]) {
		snprintf(r->refused, sizeof(r->refused), "%s", fig.refused);
		printf(" FAIL: refused: %s\n", r->refused);
		rc = 0;
	} else if (rc) {
		printf(" failed\n");
	} else {
		unsigned i = r->ran++;

		r->bytes_ex[i] = fig.link_examples ? fig.link_bytes / (double)fig.link_examples
						   : NAN;
		r->time[i] = bench_train_time(&fig, workers);
		r->acc[i] = fig.final_acc;
		r->epochs[i] = fig.epochs;
		printf(" ");
		if (r->conf->route != ZONES_ONE_ZONE)
			printf("cross-zone %.0f B/example, ", r->bytes_ex[i]);
		if (isnan(r->time[i]))
			printf("%.2f not reached", o->target);
		else
			printf("%.2f in %.1f s", o->target, r->time[i]);
		printf(", final accuracy %.4f after %.2f epochs\n", r->acc[i], r->epochs[i]);
	}
	free(fig.polls);
	return rc;
}

/* o->rounds rounds of every configuration that can run, in turn. */
static int zones_rounds(const struct zones_opts *o, unsigned workers, struct zones_run *runs,
			size_t n)
{
	int rc = 0;

	for (unsigned round = 0; round < o->rounds && !bench_interrupted(); round++) {
		for (size_t i = 0; i < n && !bench_interrupted(); i++) {
			int one;

			if (runs[i].refused[0])
				continue;
			one = zones_measure(o, workers, &runs[i], round);
			rc = rc ? rc : one;
		}
	}
	for (size_t i = 0; i < n; i++) {
		struct zones_run *r = &runs[i];

		r->m_bytes_ex = zones_median(r->bytes_ex, r->ran);
		r->m_time = zones_median(r->time, r->ran);
		r->m_acc = zones_median(r->acc, r->ran);
		r->m_epochs = zones_median(r->epochs, r->ran);
	}
	return bench_interrupted() ? DML_ECLOSED : rc;
}

/* ---- report -------------------------------------------------------------- */

/*
 * The best of (e): the fastest to the target, else (none reached it) the
 * most accurate at the end; NULL when none ran.
 */
static const struct zones_run *zones_best_lossy(const struct zones_run *runs, size_t n)
{
	const struct zones_run *best = NULL;

	for (size_t i = 0; i < n; i++) {
		const struct zones_run *r = &runs[i];

		if (!zones_conf_lossy(r->conf) || !r->ran)
			continue;
		if (!best || zones_cmp(&r->m_time, &best->m_time) < 0 ||
		    (isnan(r->m_time) && isnan(best->m_time) && r->m_acc > best->m_acc))
			best = r;
	}
	return best;
}

/* The run of configuration letter ('b' for "(b)"), or a run of no figures
 * when --configs left it out. */
static const struct zones_run *zones_find(const struct zones_run *runs, size_t n, char letter)
{
	static const struct zones_run none = {
		.m_bytes_ex = NAN, .m_time = NAN, .m_acc = NAN, .m_epochs = NAN,
	};

	for (size_t i = 0; i < n; i++)
		if (runs[i].conf->label[1] == letter)
			return &runs[i];
	return &none;
}

static void zones_print_row(const struct zones_run *r, const struct zones_run *a,
			    const struct zones_run *b, const struct zones_run *best)
{
	char bytes[32], vb[32], t[32], ta[32], tb[32], acc[32], ep[32];

	printf("%-5s%c %-58s", r->label, r == best ? '*' : ' ', r->what);
	if (r->refused[0] && !r->ran) {
		printf(" FAIL: refused: %s\n", r->refused);
		return;
	}
	if (!r->ran) {
		printf(" failed\n");
		return;
	}
	bench_cell(bytes, sizeof(bytes), "%.0f B", r->m_bytes_ex);
	if (r->conf->route == ZONES_ONE_ZONE)
		snprintf(bytes, sizeof(bytes), "0 (no link)");
	bench_cell(vb, sizeof(vb), "%.3f", r->m_bytes_ex / b->m_bytes_ex);
	bench_cell(t, sizeof(t), "%.1f s", r->m_time);
	bench_cell(ta, sizeof(ta), "%.2f", r->m_time / a->m_time);
	bench_cell(tb, sizeof(tb), "%.2f", r->m_time / b->m_time);
	bench_cell(acc, sizeof(acc), "%.4f", r->m_acc);
	bench_cell(ep, sizeof(ep), "%.1f", r->m_epochs);
	printf(" %12s %7s %10s %7s %7s %8s %6s\n", bytes, vb, t, ta, tb, acc, ep);
}

/*
 * Of (d) and (e): the least cross-zone bytes per example among those whose
 * final accuracy is within the target's points of (a), else among all.
 */
static const struct zones_run *zones_best_codec(const struct zones_run *runs, size_t n,
						const struct zones_run *a)
{
	const struct zones_run *best = NULL;

	for (int accurate = 1; accurate >= 0 && !best; accurate--) {
		for (size_t i = 0; i < n; i++) {
			const struct zones_run *r = &runs[i];

			if (!r->conf->compressed || !r->ran || isnan(r->m_bytes_ex))
				continue;
			if (accurate && !((a->m_acc - r->m_acc) * 100 <= ZONES_GOAL_ACC_POINTS))
				continue;
			if (!best || r->m_bytes_ex < best->m_bytes_ex)
				best = r;
		}
	}
	return best;
}

/* The least median time to the target of (c), (d) and (e); NaN if none. */
static double zones_best_time(const struct zones_run *runs, size_t n)
{
	double best = NAN;

	for (size_t i = 0; i < n; i++) {
		const struct zones_run *r = &runs[i];

		if (r->conf->route != ZONES_AGGREGATORS)
			continue;
		if (!isnan(r->m_time) && (isnan(best) || r->m_time < best))
			best = r->m_time;
	}
	return best;
}

static void zones_print_targets(const struct zones_run *runs, size_t n)
{
	const struct zones_run *a = &runs[0], *b = zones_find(runs, n, 'b');
	const struct zones_run *c = zones_find(runs, n, 'c');
	const struct zones_run *codec = zones_best_codec(runs, n, a);
	double best = zones_best_time(runs, n);
	char what[96];

	printf("\ntargets (the issue's):\n");
	bench_goal("(c) cross-zone bytes/example <= 0.55 x (b)", c->m_bytes_ex / b->m_bytes_ex,
		   ZONES_GOAL_AGG_BYTES, "%.3f x", 0);
	snprintf(what, sizeof(what), "best of (d), (e)%s%s: bytes/example <= 0.03 x (b)",
		 codec ? " = " : "", codec ? codec->label : "");
	bench_goal(what, codec ? codec->m_bytes_ex / b->m_bytes_ex : NAN,
		   ZONES_GOAL_CODEC_BYTES, "%.4f x", 0);
	bench_goal("  its final accuracy: points below (a)'s, <= 0.5",
		   codec ? (a->m_acc - codec->m_acc) * 100 : NAN, ZONES_GOAL_ACC_POINTS,
		   "%.2f pt", 0);
	bench_goal("best time to the target of (c)-(e) <= 1.25 x (a)", best / a->m_time,
		   ZONES_GOAL_TIME_VS_LAN, "%.3f x", 0);
	bench_goal("best time to the target of (c)-(e) <= 0.2 x (b)", best / b->m_time,
		   ZONES_GOAL_TIME_VS_FLAT, "%.3f x", 0);
}

static void zones_print(const struct zones_opts *o, const struct zones_run *runs, size_t n)
{
	const struct zones_run *best = zones_best_lossy(runs, n);
	char head[32];

	snprintf(head, sizeof(head), "to %.2f", o->target);
	printf("\n%-6s %-58s %12s %7s %10s %7s %7s %8s %6s\n", "", "configuration",
	       "cross-zone", "vs (b)", head, "vs (a)", "vs (b)", "final", "epochs");
	printf("%-6s %-58s %12s %7s %10s %7s %7s %8s %6s\n", "", "", "per example", "", "", "",
	       "", "accuracy", "");
	for (size_t i = 0; i < n; i++)
		zones_print_row(&runs[i], &runs[0], zones_find(runs, n, 'b'), best);
	printf("cross-zone: bytes the zone link carried both ways per training example\n"
	       "(tc's counts, submission to the job's end). Medians of %u round%s.\n",
	       o->rounds, o->rounds == 1 ? "" : "s");
	if (best)
		printf("* the best lossy codec of (e): %s (the fastest to the target, else the\n"
		       "  most accurate)\n", best->codec);
	zones_print_targets(runs, n);
}

/* ---- main ---------------------------------------------------------------- */

int bench_zones_main(int argc, char **argv)
{
	struct zones_opts o = {
		.zones = "A:2,B:2", .wan = "100mbit", .lossy = "int8,topk:0.01",
		.lossy_pull = "topk16:0.04", .configs = "abcde", .servers = 1, .rounds = 1,
		.epochs = ZONES_DEFAULT_EPOCHS, .target = 0.87, .smooth = 0.5,
		.max_seconds = 900,
	};
	struct zones_run runs[ZONES_RUNS_MAX];
	char build[PATH_MAX], src[PATH_MAX], job[PATH_MAX], dir[PATH_MAX], why[256], load[64];
	unsigned workers = 0;
	size_t n = 0;
	int help = 0, rc, have_dir = 0;

	rc = bench_opts_parse(&zones_table, argc, argv, &o, &help);
	if (rc == 0 && !help)
		rc = zones_workers(o.zones, &workers);
	if (rc == 0 && !help)
		rc = zones_runs_make(&o, runs, &n);
	if (bench_cmd_begin(rc, help, bench_zones_usage, o.verbose))
		return rc;
	rc = bench_build_find(o.build, build, sizeof(build));
	if (rc == 0 && bench_src_find(build, src, sizeof(src)) != 0) {
		dml_err("cannot find the source tree of build %s (for tools/dml-local)", build);
		rc = DML_ENOTFOUND;
	}
	if (rc == 0 && bench_cluster_links_check(src, why, sizeof(why)) != 0) {
		printf("dml-bench zones: SKIP: %s\n", why);
		return 0;
	}
	if (rc == 0 && !o.job && bench_path(job, sizeof(job), src, "conf/jobs/mlp.conf"))
		rc = DML_EINVAL;
	if (rc == 0 && o.job)
		snprintf(job, sizeof(job), "%s", o.job);
	if (rc == 0 && (rc = bench_tmpdir_make("dml-bench-zones", dir, sizeof(dir))) == 0)
		have_dir = 1;
	for (size_t i = 0; rc == 0 && i < n; i++)
		rc = zones_job_prepare(&o, job, dir, &runs[i]);
	if (rc == 0 && runs[0].refused[0]) {
		dml_err("the LAN reference's job: %s", runs[0].refused);
		rc = DML_ECONF;
	}
	if (rc == 0) {
		bench_loadavg(load, sizeof(load));
		printf("dml-bench zones: %s, %g epochs a run; zones %s joined at %s each way\n"
		       "(a tc rate limit, no added latency), %u server%s in the first zone; target\n"
		       "test accuracy %.2f (mean of the copies over %g epochs); %u round%s; "
		       "load %s\n",
		       job, o.epochs, o.zones, o.wan, o.servers, o.servers == 1 ? "" : "s",
		       o.target, o.smooth, o.rounds, o.rounds == 1 ? "" : "s", load);
		rc = zones_rounds(&o, workers, runs, n);
	}
	if (!bench_interrupted() && n && runs[0].ran)
		zones_print(&o, runs, n);
	if (bench_interrupted())
		dml_warn("interrupted; stopped");
	if (have_dir && !o.keep)
		bench_tmpdir_remove(dir);
	else if (have_dir)
		printf("job files kept in %s\n", dir);
	return bench_exit_status(rc);
}
