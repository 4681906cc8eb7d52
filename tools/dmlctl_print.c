/*
 * dmlctl's printers: the scheduler's answers as aligned tables and one-line
 * progress reports, and the figures derived from a job's status (epochs,
 * how far it is) that several commands show. The JSON forms are in
 * dmlctl_json.c.
 *
 * Must never: copy a byte a peer sent to the output unescaped (text cells
 * get control characters replaced).
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proto/dml_error.h"
#include "tools/dmlctl.h"
#include "proto/job_spec.h"
#include "store/table.h"
#include "proto/table_spec.h"
#include "proto/util.h"

/* ---- names and cells ------------------------------------------------------------- */

const char *ctl_role_name(uint32_t role)
{
	switch (role) {
	case DML__ROLE__WORKER: return "worker";
	case DML__ROLE__SERVER: return "server";
	case DML__ROLE__SCHEDULER: return "scheduler";
	case DML__ROLE__AGGREGATOR: return "aggregator";
	case DML__ROLE__CONTROL: return "control";
	default: return "unknown";
	}
}

const char *ctl_node_state_name(uint32_t state)
{
	switch (state) {
	case DML__NODE_STATE__ALIVE: return "alive";
	case DML__NODE_STATE__SUSPECT: return "suspect";
	case DML__NODE_STATE__DEAD: return "dead";
	default: return "unknown";
	}
}

const char *ctl_action_name(int action)
{
	switch (action) {
	case DML__JOB_ACTION__STOP: return "stop";
	case DML__JOB_ACTION__PAUSE: return "pause";
	case DML__JOB_ACTION__RESUME: return "resume";
	case DML__JOB_ACTION__CHECKPOINT_NOW: return "checkpoint";
	case DML__JOB_ACTION__CHECKPOINT_DROP: return "checkpoint delete";
	case DML__JOB_ACTION__REBALANCE: return "rebalance";
	default: return "none";
	}
}

int ctl_job_ended(int state)
{
	return state == DML__JOB_STATE__DONE || state == DML__JOB_STATE__FAILED ||
	       state == DML__JOB_STATE__STOPPED;
}

const char *ctl_clean(const char *s, char *buf, size_t len)
{
	size_t i = 0;

	for (; s && s[i] && i + 1 < len; i++)
		buf[i] = (unsigned char)s[i] < 0x20 || s[i] == 0x7f ? '?' : s[i];
	buf[i] = '\0';
	return buf;
}

/* Table cells: what a peer sent, with control characters made harmless. */
static char *cell(const char *s)
{
	char *c = dml_xstrdup(s && *s ? s : "-");

	for (char *p = c; *p; p++)
		if ((unsigned char)*p < 0x20 || *p == 0x7f)
			*p = '?';
	return c;
}

static char *cellf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static char *cellf(const char *fmt, ...)
{
	char buf[256];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	return dml_xstrdup(buf);
}

/* A figure with printf format fmt, or "-" when there is none (NaN). */
static char *cell_num(const char *fmt, double v)
{
	return isfinite(v) ? cellf(fmt, v) : dml_xstrdup("-");
}

/* Append to the NUL-terminated text in buf, truncating at len. */
static void addf(char *buf, size_t len, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static void addf(char *buf, size_t len, const char *fmt, ...)
{
	size_t used = strlen(buf);
	va_list ap;

	if (used + 1 >= len)
		return;
	va_start(ap, fmt);
	vsnprintf(buf + used, len - used, fmt, ap);
	va_end(ap);
}

static void fmt_age(uint64_t ms, char *buf, size_t len)
{
	if (ms < 1000)
		snprintf(buf, len, "%llums", (unsigned long long)ms);
	else if (ms < 60000)
		snprintf(buf, len, "%.1fs", (double)ms / 1000.0);
	else if (ms < 3600000)
		snprintf(buf, len, "%llum%02llus", (unsigned long long)(ms / 60000),
			 (unsigned long long)(ms / 1000 % 60));
	else if (ms < 86400000)
		snprintf(buf, len, "%lluh%02llum", (unsigned long long)(ms / 3600000),
			 (unsigned long long)(ms / 60000 % 60));
	else
		snprintf(buf, len, "%llud%02lluh", (unsigned long long)(ms / 86400000),
			 (unsigned long long)(ms / 3600000 % 24));
}

static char *cell_age(uint64_t ms)
{
	char buf[48];

	fmt_age(ms, buf, sizeof(buf));
	return dml_xstrdup(buf);
}

/* ---- tables ------------------------------------------------------------------------ */

/* Rows of malloc'ed cells printed in aligned columns; a NULL cell prints "-". */
struct table {
	size_t ncols, nrows;
	char **cells;               /* nrows * ncols */
};

static char **table_row(struct table *t)
{
	t->cells = dml_xrealloc(t->cells, (t->nrows + 1) * t->ncols * sizeof(*t->cells));
	memset(t->cells + t->nrows * t->ncols, 0, t->ncols * sizeof(*t->cells));
	return t->cells + t->nrows++ * t->ncols;
}

static void table_init(struct table *t, const char *const *head, size_t ncols)
{
	char **row;

	t->ncols = ncols;
	t->nrows = 0;
	t->cells = NULL;
	row = table_row(t);
	for (size_t c = 0; c < ncols; c++)
		row[c] = dml_xstrdup(head[c]);
}

static void table_print(const struct table *t, FILE *out, const char *indent)
{
	size_t *width = dml_xcalloc(t->ncols, sizeof(*width));

	for (size_t i = 0; i < t->nrows * t->ncols; i++) {
		size_t c = i % t->ncols, n = t->cells[i] ? strlen(t->cells[i]) : 1;

		if (n > width[c])
			width[c] = n;
	}
	for (size_t r = 0; r < t->nrows; r++) {
		char **row = t->cells + r * t->ncols;

		fputs(indent, out);
		for (size_t c = 0; c < t->ncols; c++) {
			const char *v = row[c] ? row[c] : "-";

			if (c + 1 < t->ncols)
				fprintf(out, "%-*s  ", (int)width[c], v);
			else
				fprintf(out, "%s\n", v);
		}
	}
	free(width);
}

static void table_free(struct table *t)
{
	for (size_t i = 0; i < t->nrows * t->ncols; i++)
		free(t->cells[i]);
	free(t->cells);
	t->cells = NULL;
	t->nrows = 0;
}

/* ---- nodes ------------------------------------------------------------------------- */

void ctl_print_nodes_table(FILE *out, const Dml__Meta *r)
{
	static const char *const head[] = {
		"ROLE", "ID", "ZONE", "ADDRESS", "STATE", "LAST-HEARTBEAT", "REASON"
	};
	struct table t;

	table_init(&t, head, DML_ARRAY_LEN(head));
	for (size_t i = 0; i < r->n_nodes; i++) {
		const Dml__NodeInfo *n = r->nodes[i];
		char **row = table_row(&t);

		row[0] = dml_xstrdup(ctl_role_name(n->role));
		row[1] = cellf("%u", n->node_id);
		row[2] = cell(n->zone);
		row[3] = cell(n->address);
		row[4] = dml_xstrdup(ctl_node_state_name(n->state));
		row[5] = cell_age(n->last_heartbeat_ms);
		row[6] = cell(n->reason);
	}
	table_print(&t, out, "");
	table_free(&t);
}

/* ---- jobs as text ------------------------------------------------------------------ */

double ctl_trained(uint64_t examples, double v)
{
	return examples ? v : NAN;
}

/* "42/100" with a clock limit, else "42". */
static void fmt_clock(const Dml__JobStatus *st, char *buf, size_t len)
{
	if (st->spec && st->spec->max_clocks)
		snprintf(buf, len, "%llu/%llu", (unsigned long long)st->clock,
			 (unsigned long long)st->spec->max_clocks);
	else
		snprintf(buf, len, "%llu", (unsigned long long)st->clock);
}

double ctl_job_epochs(const Dml__JobStatus *st)
{
	if (st->data_examples == 0)
		return NAN;
	return (double)st->examples / (double)st->data_examples;
}

double ctl_job_fraction(const Dml__JobStatus *st)
{
	const Dml__JobSpec *sp = st->spec;
	double f = -1, e = ctl_job_epochs(st);

	if (st->state == DML__JOB_STATE__DONE)
		return 1;
	if (sp && sp->max_clocks)
		f = (double)st->clock / (double)sp->max_clocks;
	if (sp && sp->max_epochs > 0 && isfinite(e) && e / sp->max_epochs > f)
		f = e / sp->max_epochs;
	return f < 0 ? -1 : f > 1 ? 1 : f;
}

void ctl_print_jobs_table(FILE *out, const Dml__Meta *r)
{
	static const char *const head[] = {
		"ID", "NAME", "STATE", "CLOCK", "EXAMPLES/S", "LOSS", "METRIC", "AGE"
	};
	struct table t;
	char clock[48];

	table_init(&t, head, DML_ARRAY_LEN(head));
	for (size_t i = 0; i < r->n_jobs; i++) {
		const Dml__JobStatus *st = r->jobs[i];
		char **row = table_row(&t);

		fmt_clock(st, clock, sizeof(clock));
		row[0] = cellf("%u", st->id);
		row[1] = cell(st->name);
		row[2] = dml_xstrdup(dml_job_state_name(st->state));
		row[3] = dml_xstrdup(clock);
		row[4] = cell_num("%.1f", ctl_trained(st->examples, st->examples_per_s));
		row[5] = cell_num("%.4g", ctl_trained(st->examples, st->loss));
		row[6] = cell_num("%.4g", st->has_metric ? st->metric : NAN);
		row[7] = cell_age(st->age_ms);
	}
	table_print(&t, out, "");
	table_free(&t);
}

void ctl_print_workers_table(FILE *out, const Dml__JobStatus *st, const char *indent)
{
	static const char *const head[] = {
		"WORKER", "STATE", "CLOCK", "EXAMPLES", "EXAMPLES/S", "LOSS", "PARTITIONS",
		"BATCH", "RATE", "SPEED", "LINK MB/S", "COMPUTING", "AGGREGATOR", "REASON"
	};
	struct table t;

	table_init(&t, head, DML_ARRAY_LEN(head));
	for (size_t i = 0; i < st->n_workers; i++) {
		const Dml__WorkerStatus *w = st->workers[i];
		char **row = table_row(&t);

		row[0] = cellf("%u", w->worker);
		row[1] = dml_xstrdup(ctl_node_state_name(w->state));
		row[2] = cellf("%llu", (unsigned long long)w->clock);
		row[3] = cellf("%llu", (unsigned long long)w->examples);
		row[4] = cell_num("%.1f", ctl_trained(w->examples, w->examples_per_s));
		row[5] = cell_num("%.4g", ctl_trained(w->examples, w->loss));
		row[6] = cellf("%u", w->partitions);
		/* what placement follows (examples/s; examples per second of
		 * its own work), and the share of its time not waiting */
		row[7] = cellf("%u", w->batch_size);
		row[8] = cell_num("%.1f", w->rate);
		row[9] = cell_num("%.1f", w->speed);
		/* its link as its training uses it */
		row[10] = cell_num("%.1f", w->link_bps > 0 ? w->link_bps / 1e6 : NAN);
		row[11] = cell_num("%.0f%%", w->compute_s + w->wait_s > 0 ?
				   100 * w->compute_s / (w->compute_s + w->wait_s) : NAN);
		/* the zone aggregator its pushes and pulls go through, "-": direct */
		row[12] = cell(w->aggregator);
		row[13] = cell(w->reason);
	}
	table_print(&t, out, indent);
	table_free(&t);
}

/* ", push none/fp16, pull none/fp16": within a zone / across zones. */
static void print_table_codecs(FILE *out, const Dml__TableSpec *t)
{
	struct dml_link_codecs lc[2];
	char a[4][32];

	if (dml_table_spec_codecs(t, 0, &lc[0], NULL, 0) ||
	    dml_table_spec_codecs(t, 1, &lc[1], NULL, 0))
		return;
	fprintf(out, ", push %s/%s, pull %s/%s", dml_codec_format(&lc[0].push, a[0], 32),
		dml_codec_format(&lc[1].push, a[1], 32), dml_codec_format(&lc[0].pull, a[2], 32),
		dml_codec_format(&lc[1].pull, a[3], 32));
}

/* The spec in a few lines: what runs, when it stops, on whom, which tables. */
static void print_spec_summary(FILE *out, const Dml__JobSpec *sp, uint64_t data_examples)
{
	char a[128], b[128], line[512];

	if (!sp)
		return;
	fprintf(out, "  app %s on %s", ctl_clean(sp->app, a, sizeof(a)),
		*sp->data ? ctl_clean(sp->data, b, sizeof(b)) : "(no data)");
	if (data_examples)
		fprintf(out, ", %llu examples", (unsigned long long)data_examples);
	if (sp->dim)
		fprintf(out, ", dim %u", sp->dim);
	if (*sp->hidden)
		fprintf(out, ", hidden %s", ctl_clean(sp->hidden, a, sizeof(a)));
	fprintf(out, ", batch %u, ", sp->batch_size);
	if (sp->clock_batch)
		fprintf(out, "%llu a clock, ", (unsigned long long)sp->clock_batch);
	if (sp->staleness == 0)
		fputs(sp->bsp_step == DML_BSP_STEP_PUSH ? "BSP, a step a push\n" :
		      "BSP, a step a clock\n", out);
	else if (sp->staleness > 0)
		fprintf(out, "SSP staleness %lld\n", (long long)sp->staleness);
	else
		fputs("asynchronous\n", out);

	line[0] = '\0';
	if (sp->max_clocks)
		addf(line, sizeof(line), ", %llu clocks",
		     (unsigned long long)sp->max_clocks);
	if (sp->max_epochs > 0)
		addf(line, sizeof(line), ", %g epochs", sp->max_epochs);
	if (*sp->metric && sp->target > 0)
		addf(line, sizeof(line), ", %s %s %g", ctl_clean(sp->metric, a, sizeof(a)),
		     dml_metric_lower_is_better(sp->metric) ? "<=" : ">=", sp->target);
	fprintf(out, "  stops at: %s\n", line[0] ? line + 2 : "(no condition)");

	line[0] = '\0';
	if (sp->n_worker_ids) {
		addf(line, sizeof(line), "ids");
		for (size_t i = 0; i < sp->n_worker_ids; i++)
			addf(line, sizeof(line), "%s%u", i ? "," : " ", sp->worker_ids[i]);
	} else if (sp->workers) {
		addf(line, sizeof(line), "%u", sp->workers);
	} else {
		addf(line, sizeof(line), "all alive");
	}
	if (sp->partitions)
		addf(line, sizeof(line), "; %u partitions", sp->partitions);
	else
		addf(line, sizeof(line), "; 8 partitions per worker");
	fprintf(out, "  workers: %s\n", line);

	for (size_t i = 0; i < sp->n_tables; i++) {
		const Dml__TableSpec *t = sp->tables[i];

		fprintf(out, "  table %u: %s, ", t->id, t->dense ? "dense" : "sparse");
		if (t->dense)
			fprintf(out, "%llu keys", (unsigned long long)t->keys);
		else
			fprintf(out, "capacity %llu", (unsigned long long)t->capacity);
		fprintf(out, " x %u, %s lr %g", t->width,
			ctl_clean(t->optimizer, a, sizeof(a)), t->lr);
		if (t->lr_decay > 0)
			fprintf(out, ", lr_decay %g", t->lr_decay);
		print_table_codecs(out, t);
		fputc('\n', out);
	}
}

void ctl_print_job_detail(FILE *out, const Dml__JobStatus *st)
{
	char a[256], b[256], clock[48], age[48], ran[48];

	fprintf(out, "job %u (%s): %s", st->id, ctl_clean(st->name, a, sizeof(a)),
		dml_job_state_name(st->state));
	if (*st->reason)
		fprintf(out, ": %s", ctl_clean(st->reason, b, sizeof(b)));
	fputc('\n', out);
	print_spec_summary(out, st->spec, st->data_examples);
	fmt_clock(st, clock, sizeof(clock));
	fprintf(out, "  progress: clock %s, %llu examples", clock,
		(unsigned long long)st->examples);
	if (isfinite(ctl_job_epochs(st)))
		fprintf(out, " (%.2f epochs)", ctl_job_epochs(st));
	/* how far apart the partitions' walks are: each worker walks its own at
	 * the pace its batch and partition count give */
	if (st->epochs_max > 0)
		fprintf(out, ", partitions %.2f to %.2f passes", st->epochs_min,
			st->epochs_max);
	if (isfinite(ctl_trained(st->examples, st->examples_per_s)))
		fprintf(out, ", %.1f examples/s", st->examples_per_s);
	if (isfinite(ctl_trained(st->examples, st->loss)))
		fprintf(out, ", loss %.4g", st->loss);
	if (st->has_metric && isfinite(st->metric))
		fprintf(out, ", eval %s %.4g", st->spec && *st->spec->metric
			? ctl_clean(st->spec->metric, a, sizeof(a)) : "metric", st->metric);
	fmt_age(st->age_ms, age, sizeof(age));
	fmt_age(st->run_ms, ran, sizeof(ran));
	fprintf(out, "\n  submitted %s ago, running for %s; shard map version %llu, "
		"assignment version %llu\n", age, ran,
		(unsigned long long)st->shard_map_version,
		(unsigned long long)st->assignment_version);
	ctl_print_job_links(out, st, "  ");
	if (st->n_workers) {
		fputc('\n', out);
		ctl_print_workers_table(out, st, "  ");
	}
	for (size_t i = 0; i < st->n_checkpoints; i++)
		fprintf(out, "%s clock %llu (%.1f MB)%s", i ? "," : "\n  checkpoints at",
			(unsigned long long)st->checkpoints[i]->clock,
			(double)st->checkpoints[i]->bytes / 1e6,
			i + 1 == st->n_checkpoints ? "\n" : "");
	if (st->checkpoint_state[0])
		fprintf(out, "\n  checkpoint %s\n",
			ctl_clean(st->checkpoint_state, a, sizeof(a)));
	if (st->n_events) {
		fputs("\n  events (newest last):\n", out);
		for (size_t i = 0; i < st->n_events; i++)
			fprintf(out, "    %s\n", ctl_clean(st->events[i], a, sizeof(a)));
	}
}

void ctl_fmt_rate(double v, char *buf, size_t len)
{
	char digits[32];
	size_t n, o = 0;

	if (!(v >= 1000 && v < 1e15)) {
		snprintf(buf, len, "%.3g", v);
		return;
	}
	n = (size_t)snprintf(digits, sizeof(digits), "%.0f", v);
	for (size_t i = 0; i < n && o + 2 < len; i++) {
		if (i && (n - i) % 3 == 0)
			buf[o++] = ',';
		buf[o++] = digits[i];
	}
	buf[o] = '\0';
}

const char *ctl_metric_name(const Dml__JobSpec *sp, char *buf, size_t len)
{
	/* An empty metric leaves the choice to the app: it is then just what
	 * its evaluation computes. */
	return ctl_clean(sp && *sp->metric ? sp->metric : "eval", buf, len);
}

/*
 * Where the job is ("clock 42/100", or "1.50/3 epochs" when epochs are its
 * only limit), then the epoch when the data size is known and not shown yet,
 * the rate, the training loss and the latest evaluation.
 */
void ctl_fmt_progress(const Dml__JobStatus *st, int bar_width, char *buf, size_t len)
{
	double f = ctl_job_fraction(st), e = ctl_job_epochs(st);
	const Dml__JobSpec *sp = st->spec;
	int epochs_shown = 0;
	char a[192];

	snprintf(buf, len, "job %u %s", st->id, dml_job_state_name(st->state));
	if (f >= 0 && bar_width > 0) {
		int done = (int)(f * bar_width);

		addf(buf, len, " [");
		for (int i = 0; i < bar_width; i++)
			addf(buf, len, "%c", i < done ? '#' : '-');
		addf(buf, len, "]");
	}
	if (f >= 0)
		addf(buf, len, " %3d%%", (int)(f * 100));
	if (sp && !sp->max_clocks && sp->max_epochs > 0 && isfinite(e)) {
		addf(buf, len, " %.2f/%g epochs", e, sp->max_epochs);
		epochs_shown = 1;
	} else if (sp && sp->max_clocks) {
		addf(buf, len, " clock %llu/%llu", (unsigned long long)st->clock,
		     (unsigned long long)sp->max_clocks);
	} else {
		addf(buf, len, " clock %llu", (unsigned long long)st->clock);
	}
	if (isfinite(ctl_trained(st->examples, e)) && !epochs_shown)
		addf(buf, len, e < 100 ? ", epoch %.3g" : ", epoch %.0f", e);
	if (isfinite(ctl_trained(st->examples, st->examples_per_s))) {
		ctl_fmt_rate(st->examples_per_s, a, sizeof(a));
		addf(buf, len, ", %s ex/s", a);
	}
	if (isfinite(ctl_trained(st->examples, st->loss)))
		addf(buf, len, ", loss %.4g", st->loss);
	if (st->has_metric && isfinite(st->metric))
		addf(buf, len, ", %s %.4g", ctl_metric_name(sp, a, sizeof(a)), st->metric);
	if (st->state != DML__JOB_STATE__RUNNING && *st->reason)
		addf(buf, len, " (%s)", ctl_clean(st->reason, a, sizeof(a)));
}

void ctl_print_job_end(FILE *out, const Dml__JobStatus *st)
{
	char a[128], b[256], ran[48];

	fmt_age(st->run_ms, ran, sizeof(ran));
	fprintf(out, "job %u (%s): %s", st->id, ctl_clean(st->name, a, sizeof(a)),
		dml_job_state_name(st->state));
	if (*st->reason)
		fprintf(out, ": %s", ctl_clean(st->reason, b, sizeof(b)));
	fprintf(out, "; clock %llu, %llu examples", (unsigned long long)st->clock,
		(unsigned long long)st->examples);
	if (isfinite(ctl_trained(st->examples, st->loss)))
		fprintf(out, ", loss %.4g", st->loss);
	if (st->has_metric && isfinite(st->metric))
		fprintf(out, ", eval %s %.4g", st->spec && *st->spec->metric
			? ctl_clean(st->spec->metric, a, sizeof(a)) : "metric", st->metric);
	fprintf(out, ", ran %s\n", ran);
}

void ctl_print_shard_map(FILE *out, const Dml__ShardMap *map, const Dml__JobSpec *sp)
{
	static const char *const head[] = {
		"TABLE", "KIND", "RANGE", "SERVER", "ADDRESS"
	};
	struct table t;
	char a[128];

	fprintf(out, "job %u", map->job);
	if (sp && *sp->name)
		fprintf(out, " (%s)", ctl_clean(sp->name, a, sizeof(a)));
	fprintf(out, ": shard map version %llu, %zu servers, %zu ranges\n",
		(unsigned long long)map->version, map->n_servers, map->n_ranges);
	table_init(&t, head, DML_ARRAY_LEN(head));
	for (size_t i = 0; i < map->n_ranges; i++) {
		const Dml__ShardRange *r = map->ranges[i];
		const Dml__TableSpec *ts = NULL;
		const char *addr = NULL;
		char **row = table_row(&t);

		for (size_t k = 0; sp && k < sp->n_tables; k++)
			if (sp->tables[k]->id == r->table)
				ts = sp->tables[k];
		for (size_t k = 0; k < map->n_servers; k++)
			if (map->servers[k]->node_id == r->server)
				addr = map->servers[k]->address;
		row[0] = cellf("%u", r->table);
		row[1] = dml_xstrdup(!ts ? "?" : ts->dense ? "dense" : "sparse");
		/* Sparse ranges are ranges of a 64-bit key hash: hex reads better. */
		if (ts && !ts->dense)
			row[2] = cellf("0x%016llx..0x%016llx", (unsigned long long)r->begin,
				       (unsigned long long)r->end);
		else
			row[2] = cellf("%llu..%llu", (unsigned long long)r->begin,
				       (unsigned long long)r->end);
		row[3] = cellf("%u", r->server);
		row[4] = cell(addr);
	}
	table_print(&t, out, "");
	table_free(&t);
}

