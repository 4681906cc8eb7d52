/*
 * dmlctl's view of a job's traffic and zones (dmlctl.h): what its workers'
 * values cost within a zone and across zones, as 32-bit floats and as the
 * codecs sent them; what error feedback holds back per table; what the zone
 * aggregators its workers route through summed and sent; and how fast each
 * zone trains. status JOB and top print it under the job's progress.
 *
 * Must never: copy a byte a peer sent to the output unescaped (zone names
 * are cleaned), or divide by a count that may be 0.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "tools/dmlctl.h"

/* "1.23 MB": bytes in decimal units, three digits. */
static void fmt_bytes(uint64_t n, char *buf, size_t len)
{
	static const char *const unit[] = { "B", "kB", "MB", "GB", "TB", "PB", "EB" };
	double v = (double)n;
	int u = 0;

	while (v >= 1000 && u < 6) {
		v /= 1000;
		u++;
	}
	if (u == 0)
		snprintf(buf, len, "%llu B", (unsigned long long)n);
	else
		snprintf(buf, len, "%.3g %s", v, unit[u]);
}

/* "1.23 MB as floats, 617 kB sent (2.00x)", or "none"; a line's end. */
static void print_sizes(FILE *out, uint64_t floats, uint64_t sent)
{
	char f[32], s[32];

	if (!floats && !sent) {
		fputs("none\n", out);
		return;
	}
	fmt_bytes(floats, f, sizeof(f));
	fmt_bytes(sent, s, sizeof(s));
	fprintf(out, "%s as floats, %s sent", f, s);
	if (sent)
		fprintf(out, " (%.2fx)", (double)floats / (double)sent);
	fputc('\n', out);
}

/* "within zone:  1.23 MB as floats, 617 kB sent (2.00x)". */
static void print_class(FILE *out, const char *indent, const char *name, uint64_t floats,
			uint64_t sent)
{
	fprintf(out, "%s%-14s", indent, name);
	print_sizes(out, floats, sent);
}

/*
 * "aggregator:   B #2 fan-in 2.00; sums 265 MB as floats, 35 MB sent
 * (7.56x); pulls 1300 in, 650 up" (its counters since it started).
 */
static void print_aggregator(FILE *out, const char *indent, const Dml__NodeInfo *n)
{
	const Dml__AggregatorStats *a = n->aggregator;
	char z[96];

	fprintf(out, "%s%-14s%s #%u", indent, "aggregator:",
		n->zone[0] ? ctl_clean(n->zone, z, sizeof(z)) : "(none)", n->node_id);
	if (!a || !a->pushes_forwarded) {
		fputs(a ? " no pushes yet\n" : " no counters yet\n", out);
		return;
	}
	fprintf(out, " fan-in %.2f; sums ", (double)a->pushes_in / (double)a->pushes_forwarded);
	print_sizes(out, a->value_bytes, a->sent_bytes);
	fprintf(out, "%s%-14s%llu pulls in, %llu up\n", indent, "",
		(unsigned long long)a->pulls_in, (unsigned long long)a->pulls_forwarded);
}

static int any_zone(const Dml__JobStatus *st)
{
	for (size_t i = 0; i < st->n_zones; i++)
		if (st->zones[i]->zone[0])
			return 1;
	return 0;
}

void ctl_print_job_links(FILE *out, const Dml__JobStatus *st, const char *indent)
{
	static const Dml__LinkTraffic none = DML__LINK_TRAFFIC__INIT;
	const Dml__LinkTraffic *lt = st->links ? st->links : &none;
	size_t n = lt->n_residual_tables < lt->n_residual_norms ? lt->n_residual_tables
								 : lt->n_residual_norms;
	char a[96], r[32];

	print_class(out, indent, "within zone:", lt->within_zone_float_bytes,
		    lt->within_zone_sent_bytes);
	print_class(out, indent, "across zones:", lt->cross_zone_float_bytes,
		    lt->cross_zone_sent_bytes);
	if (n) {
		fprintf(out, "%s%-14s", indent, "residual L2:");
		for (size_t i = 0; i < n; i++)
			fprintf(out, "%stable %u %.4g", i ? ", " : "", lt->residual_tables[i],
				lt->residual_norms[i]);
		fputc('\n', out);
	}
	for (size_t i = 0; i < st->n_aggregators; i++)
		print_aggregator(out, indent, st->aggregators[i]);
	if (!any_zone(st))
		return;
	fprintf(out, "%s%-14s", indent, "zones:");
	for (size_t i = 0; i < st->n_zones; i++) {
		const Dml__ZoneRate *z = st->zones[i];

		ctl_fmt_rate(z->examples_per_s, r, sizeof(r));
		fprintf(out, "%s%s %u worker%s %s ex/s", i ? "; " : "",
			z->zone[0] ? ctl_clean(z->zone, a, sizeof(a)) : "(none)", z->workers,
			z->workers == 1 ? "" : "s", r);
	}
	fputc('\n', out);
}
