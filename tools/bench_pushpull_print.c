/*
 * dml-bench pushpull's report: the preface naming the server and the run,
 * one row per measured case (aligned or CSV), the issue's targets as PASS,
 * FAIL or SKIP lines, and the --durability comparison.
 *
 * It only prints what was measured: nothing here runs a request.
 */
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>

#include "tools/bench_pushpull_internal.h"
#include "store/store.h"
#include "proto/util.h"

void bench_print_header(const struct bench_opts *o)
{
	if (o->csv) {
		printf("op,kind,via,size,value_bytes,conns,window,gbps,rps,p50_us,p99_us,"
		       "ratio,raw_gbps,raw_rps,raw_p50_us,raw_p99_us\n");
	} else if (o->baseline == BENCH_BASELINE_ONLY) {
		printf("%-4s %-6s %-4s %-8s %5s %6s %9s %11s %10s %10s\n", "op", "kind",
		       "via", "size", "conns", "window", "raw_GB/s", "raw_req/s",
		       "raw_p50_us", "raw_p99_us");
	} else {
		printf("%-4s %-6s %-4s %-8s %5s %6s %8s %11s %9s %9s %6s %9s %10s\n", "op",
		       "kind", "via", "size", "conns", "window", "GB/s", "req/s", "p50_us",
		       "p99_us", "ratio", "raw_GB/s", "raw_p50_us");
	}
	fflush(stdout);
}

static void bench_csv_result(const struct bench_result *r, int have)
{
	if (have)
		printf("%.4f,%.1f,%.1f,%.1f", r->gbps, r->rps, r->p50_us, r->p99_us);
	else
		printf(",,,");
}

void bench_print_row(const struct bench_case *bc, const struct bench_opts *o)
{
	const struct bench_result *d = &bc->dml, *t = &bc->tcp;
	double ratio = bc->have_dml && bc->have_tcp && t->rps > 0 ? d->rps / t->rps : 0;
	const char *op = bench_op_names[bc->op], *kind = bench_kind_names[bc->kind];
	const char *via = bench_transport_names[bc->transport];
	char label[32];

	bench_case_label(bc, label, sizeof(label));
	if (o->csv) {
		printf("%s,%s,%s,%s,%" PRIu64 ",%u,%u,", op, kind, via, label,
		       bench_case_value_bytes(bc), bc->conns, bc->window);
		bench_csv_result(d, bc->have_dml);
		if (ratio > 0)
			printf(",%.3f,", ratio);
		else
			printf(",,");
		bench_csv_result(t, bc->have_tcp);
		printf("\n");
	} else {
		printf("%-4s %-6s %-4s %-8s %5u %6u ", op, kind, via, label, bc->conns,
		       bc->window);
		if (o->baseline == BENCH_BASELINE_ONLY)
			printf("%9.3f %11.0f %10.1f %10.1f\n", t->gbps, t->rps, t->p50_us,
			       t->p99_us);
		else if (bc->have_tcp)
			printf("%8.3f %11.0f %9.1f %9.1f %6.2f %9.3f %10.1f\n", d->gbps,
			       d->rps, d->p50_us, d->p99_us, ratio, t->gbps, t->p50_us);
		else
			printf("%8.3f %11.0f %9.1f %9.1f %6s %9s %10s\n", d->gbps, d->rps,
			       d->p50_us, d->p99_us, "-", "-", "-");
	}
	fflush(stdout);
}

/*
 * What a target compares, always within this run: dml's requests/s to raw
 * TCP's (RATIO), dml's median latency to raw TCP's (P50_RATIO), or dml's
 * p99 latency to its own p50 (TAIL).
 */
enum bench_metric { BENCH_RATIO, BENCH_P50_RATIO, BENCH_TAIL };

/* The issue's targets; each applies to every measured case it matches. */
static const struct bench_target {
	const char *name;
	enum bench_kind kind;
	int op;                 /* an enum bench_op, or -1 for both */
	uint64_t min_bytes, max_bytes; /* value bytes per request */
	uint32_t width;
	unsigned window;        /* always one connection */
	enum bench_metric metric;
	double limit;
	int at_least;
} bench_targets[] = {
	{ "dense 64-256 KiB vs raw TCP", BENCH_DENSE, -1, 64u << 10, 256u << 10, 1, 8,
	  BENCH_RATIO, 0.9, 1 },
	{ "dense >= 1 MiB vs raw TCP", BENCH_DENSE, -1, 1u << 20, UINT64_MAX, 1, 8,
	  BENCH_RATIO, 0.9, 1 },
	{ "dense 4 KiB latency vs raw TCP", BENCH_DENSE, -1, 4096, 4096, 1, 1,
	  BENCH_P50_RATIO, 2.0, 0 },
	{ "sparse 1000x1 vs raw TCP", BENCH_SPARSE, -1, 0, UINT64_MAX, 1, 8,
	  BENCH_RATIO, 0.6, 1 },
	{ "sparse 1000x1 tail latency", BENCH_SPARSE, -1, 0, UINT64_MAX, 1, 8,
	  BENCH_TAIL, 5.0, 0 },
};

static int bench_target_matches(const struct bench_target *t,
				const struct bench_case *bc)
{
	uint64_t vb = bench_case_value_bytes(bc);

	return bc->transport == BENCH_TCP && bc->kind == t->kind &&
	       (t->op < 0 || (int)bc->op == t->op) &&
	       vb >= t->min_bytes && vb <= t->max_bytes && bc->width == t->width &&
	       bc->window == t->window && bc->conns == 1;
}

/* "0.93 x raw TCP (target >= 0.90 x)" and the like. */
static void bench_target_describe(const struct bench_target *tg, double v, char *buf,
				  size_t len)
{
	const char *cmp = tg->at_least ? ">=" : "<=";

	switch (tg->metric) {
	case BENCH_RATIO:
		snprintf(buf, len, "%.2f x raw TCP (target %s %.2f x)", v, cmp,
			 tg->limit);
		break;
	case BENCH_P50_RATIO:
		snprintf(buf, len, "p50 %.2f x raw TCP's (target %s %.2f x)", v, cmp,
			 tg->limit);
		break;
	case BENCH_TAIL:
		snprintf(buf, len, "p99 %.1f x p50 (target %s %.1f x)", v, cmp, tg->limit);
		break;
	}
}

static double bench_target_value(const struct bench_target *tg,
				 const struct bench_case *bc)
{
	switch (tg->metric) {
	case BENCH_RATIO:
		return bc->tcp.rps > 0 ? bc->dml.rps / bc->tcp.rps : 0;
	case BENCH_P50_RATIO:
		return bc->tcp.p50_us > 0 ? bc->dml.p50_us / bc->tcp.p50_us : 0;
	case BENCH_TAIL:
		break;
	}
	return bc->dml.p50_us > 0 ? bc->dml.p99_us / bc->dml.p50_us : 0;
}

/* Does the target need the raw-TCP baseline of its case? */
static int bench_target_needs_tcp(const struct bench_target *tg)
{
	return tg->metric != BENCH_TAIL;
}

/*
 * Targets that compare two dml cases of the same run: aggregate push rate
 * over many connections against one connection's, the same size and
 * window, so that what a server does per wake-up (and not the machine)
 * decides the verdict.
 */
static const struct bench_conn_target {
	const char *name;
	uint64_t value_bytes;
	unsigned window;
	unsigned min_conns; /* judged at every measured count from here up */
	double limit;       /* at least this times the one-connection rate */
} bench_conn_targets[] = {
	{ "dense 4 KiB push, many connections", 4096, 8, 4, 0.9 },
	{ "dense 1 MiB push, many connections", 1u << 20, 8, 4, 0.9 },
};

static int bench_conn_target_matches(const struct bench_conn_target *t,
				     const struct bench_case *bc)
{
	return bc->op == BENCH_PUSH && bc->kind == BENCH_DENSE && bc->have_dml &&
	       bc->transport == BENCH_TCP && bench_case_value_bytes(bc) == t->value_bytes &&
	       bc->window == t->window;
}

/* The one-connection case of the target, or NULL when not measured. */
static const struct bench_case *bench_conn_target_base(const struct bench_conn_target *t,
						       const struct bench_case *cases,
						       size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (bench_conn_target_matches(t, &cases[i]) && cases[i].conns == 1 &&
		    cases[i].dml.rps > 0)
			return &cases[i];
	return NULL;
}

/* ---- the same-host target: libdml over Unix against libdml over TCP ---- */

#define BENCH_UNIX_VS_TCP 1.5
#define BENCH_UNIX_BYTES (1u << 20)
#define BENCH_UNIX_WINDOW 8

static int bench_unix_target_matches(const struct bench_case *bc)
{
	return bc->kind == BENCH_DENSE && bench_case_value_bytes(bc) == BENCH_UNIX_BYTES &&
	       bc->window == BENCH_UNIX_WINDOW && bc->conns == 1 && bc->have_dml;
}

/* The TCP case measured with the same shape as the Unix case u, or NULL. */
static const struct bench_case *bench_unix_twin(const struct bench_case *cases, size_t n,
						const struct bench_case *u)
{
	for (size_t i = 0; i < n; i++)
		if (cases[i].transport == BENCH_TCP && cases[i].op == u->op &&
		    bench_unix_target_matches(&cases[i]))
			return &cases[i];
	return NULL;
}

static void bench_print_conn_targets(const struct bench_case *cases, size_t n,
				     const struct bench_opts *o)
{
	const char *pre = o->csv ? "# " : "";

	for (size_t t = 0; t < DML_ARRAY_LEN(bench_conn_targets); t++) {
		const struct bench_conn_target *tg = &bench_conn_targets[t];
		const struct bench_case *base = bench_conn_target_base(tg, cases, n);
		int seen = 0;

		for (size_t i = 0; base && i < n; i++) {
			const struct bench_case *bc = &cases[i];
			double r;
			char label[32];

			if (!bench_conn_target_matches(tg, bc) || bc->conns < tg->min_conns)
				continue;
			seen = 1;
			r = bc->dml.rps / base->dml.rps;
			bench_case_label(bc, label, sizeof(label));
			printf("%s%s push dense %s conns=%u window=%u: %.2f x conns=1 "
			       "(target >= %.2f x)", pre, r >= tg->limit ? "PASS" : "FAIL",
			       label, bc->conns, bc->window, r, tg->limit);
			/* What the machine allows: raw sockets' own scaling. */
			if (bc->have_tcp && base->have_tcp && base->tcp.rps > 0)
				printf("; raw TCP %.2f x its conns=1", bc->tcp.rps / base->tcp.rps);
			printf("\n");
		}
		if (!seen)
			printf("%sSKIP %s: needs conns 1 and >= %u at window %u\n", pre,
			       tg->name, tg->min_conns, tg->window);
	}
}

/* "dense 1 MiB, window 8: unix >= 1.5 x loopback TCP", push and pull. */
static void bench_print_unix_target(const struct bench_case *cases, size_t n,
				    const struct bench_opts *o)
{
	const char *pre = o->csv ? "# " : "";
	int seen = 0;

	for (size_t i = 0; i < n; i++) {
		const struct bench_case *u = &cases[i], *t;
		double r;

		if (u->transport != BENCH_UNIX || !bench_unix_target_matches(u) ||
		    !(t = bench_unix_twin(cases, n, u)) || t->dml.rps <= 0)
			continue;
		seen = 1;
		r = u->dml.rps / t->dml.rps;
		printf("%s%s %s dense 1M conns=1 window=%u: unix %.2f x loopback TCP "
		       "(target >= %.1f x)\n", pre, r >= BENCH_UNIX_VS_TCP ? "PASS" : "FAIL",
		       bench_op_names[u->op], u->window, r, BENCH_UNIX_VS_TCP);
	}
	if (!seen)
		printf("%sSKIP dense 1 MiB, window 8: unix >= %.1f x loopback TCP: needs "
		       "--transport tcp,unix with 1M, window 8, 1 connection\n", pre,
		       BENCH_UNIX_VS_TCP);
}

void bench_print_targets(const struct bench_case *cases, size_t n,
			 const struct bench_opts *o)
{
	const char *pre = o->csv ? "# " : "";

	printf("%s\n", o->csv ? "#" : "");
	for (size_t t = 0; t < DML_ARRAY_LEN(bench_targets); t++) {
		const struct bench_target *tg = &bench_targets[t];
		int seen = 0;

		for (size_t i = 0; i < n; i++) {
			const struct bench_case *bc = &cases[i];
			char label[32], what[128];
			double v;
			int pass;

			if (!bench_target_matches(tg, bc) || !bc->have_dml ||
			    (bench_target_needs_tcp(tg) && !bc->have_tcp))
				continue;
			seen = 1;
			v = bench_target_value(tg, bc);
			pass = tg->at_least ? v >= tg->limit : v <= tg->limit;
			bench_case_label(bc, label, sizeof(label));
			bench_target_describe(tg, v, what, sizeof(what));
			printf("%s%s %s %s %s conns=1 window=%u: %s\n", pre,
			       pass ? "PASS" : "FAIL", bench_op_names[bc->op],
			       bench_kind_names[bc->kind], label, bc->window, what);
		}
		if (!seen)
			printf("%sSKIP %s: not measured in this run\n", pre, tg->name);
	}
	bench_print_conn_targets(cases, n, o);
	bench_print_unix_target(cases, n, o);
	fflush(stdout);
}


/* The rows and targets of cases measured already. */
void bench_print_cases(const struct bench_case *cases, size_t n,
		       const struct bench_opts *o)
{
	bench_print_header(o);
	for (size_t i = 0; i < n; i++)
		bench_print_row(&cases[i], o);
	bench_print_targets(cases, n, o);
}

/* runs: the times each case is measured against a server (all servers). */
void bench_print_preface(const struct bench_opts *o, const struct bench_server *s,
			 const char *exe, size_t ncases, size_t runs)
{
	const char *pre = o->csv ? "# " : "";
	double total = (double)ncases * (double)(runs + (o->baseline == BENCH_BASELINE_YES)) *
		       (o->seconds + o->warmup);

	if (o->baseline == BENCH_BASELINE_ONLY)
		printf("%sdml-bench pushpull: raw-socket baseline only\n", pre);
	else
		printf("%sdml-bench pushpull: %s (pid %d, port %u), %s\n", pre, exe,
		       (int)s->pid, (unsigned)s->port,
		       s->durability < 0 ? "no [store]" :
		       s->durability == DML_DURABILITY_SYNC ? "[store] durability = sync" :
		       s->durability == DML_DURABILITY_BATCH ? (o->batch_ms ?
		       "[store] durability = batch, batch_ms as given" :
		       "[store] durability = batch") :
		       "[store] durability = none");
	printf("%s%zu configurations, %.2f s each after %.2f s warm-up, about %.0f s\n",
	       pre, ncases, o->seconds, o->warmup, total);
	printf("%sGB/s: value bytes only (1 GB = 1e9 B); latency: submit to completion; "
	       "ratio: dml / raw sockets' req/s over the same transport (via)\n", pre);
	fflush(stdout);
}

#define BENCH_BATCH_VS_NONE 0.7

/* Push rates of the --durability runs next to each other, and the target. */
void bench_print_durability(struct bench_case *const *runs, const struct bench_opts *o,
			    size_t ncases)
{
	const char *pre = o->csv ? "# " : "";
	int none = -1, batch = -1;

	for (size_t m = 0; m < o->ndurability; m++) {
		none = o->durability[m] == DML_DURABILITY_NONE ? (int)m : none;
		batch = o->durability[m] == DML_DURABILITY_BATCH ? (int)m : batch;
	}
	printf("%s\n%spush req/s by durability (ratio to none):\n", pre, pre);
	for (size_t i = 0; i < ncases; i++) {
		const struct bench_case *bc = &runs[0][i];
		char label[32];

		if (bc->op != BENCH_PUSH)
			continue;
		bench_case_label(bc, label, sizeof(label));
		printf("%s%-6s %-8s conns=%u window=%-4u", pre, bench_kind_names[bc->kind],
		       label, bc->conns, bc->window);
		for (size_t m = 0; m < o->ndurability; m++) {
			double v = runs[m][i].dml.rps;

			printf("  %s %9.0f", dml_durability_names[o->durability[m]], v);
			if (none >= 0 && (int)m != none && runs[none][i].dml.rps > 0)
				printf(" (%.2f x)", v / runs[none][i].dml.rps);
		}
		printf("\n");
	}
	if (none < 0 || batch < 0) {
		printf("%sSKIP batch >= %.1f x none: needs --durability with both\n", pre,
		       BENCH_BATCH_VS_NONE);
		return;
	}
	for (size_t i = 0; i < ncases; i++) {
		const struct bench_case *bc = &runs[0][i];
		double r = runs[none][i].dml.rps > 0 ?
			   runs[batch][i].dml.rps / runs[none][i].dml.rps : 0;
		char label[32];

		if (bc->op != BENCH_PUSH)
			continue;
		bench_case_label(bc, label, sizeof(label));
		printf("%s%s push %s %s conns=%u window=%u: batch %.2f x none (needs >= %.1f)\n",
		       pre, r >= BENCH_BATCH_VS_NONE ? "PASS" : "FAIL",
		       bench_kind_names[bc->kind], label, bc->conns, bc->window, r,
		       BENCH_BATCH_VS_NONE);
	}
	fflush(stdout);
}
