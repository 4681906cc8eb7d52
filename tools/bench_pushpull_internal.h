/*
 * dml-bench pushpull internals shared by its source files: the options
 * (bench_pushpull_opts.c), the cases measured and the server and
 * connections they run against (bench_pushpull.c), and the report
 * (bench_pushpull_print.c).
 *
 * Nothing declared here may start a process or open a connection but the
 * functions of bench_pushpull.c, which stop what they started.
 */
#ifndef DML_BENCH_PUSHPULL_INTERNAL_H
#define DML_BENCH_PUSHPULL_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "tools/bench.h"
#include "tools/bench_opt.h"
#include "tools/bench_server.h"

#define BENCH_MAX_CONNS 1024
#define BENCH_MAX_WINDOW 4096
#define BENCH_MAX_SIZE (256ull << 20)
#define BENCH_SPARSE_KEYS 1000

enum bench_op { BENCH_PUSH = 0, BENCH_PULL = 1 };
enum bench_kind { BENCH_DENSE = 0, BENCH_SPARSE = 1 };

/* How the client reaches the server: --transport, in the order of
 * bench_transport_names ("tcp", "unix"; proto/local.h). */
enum bench_transport { BENCH_TCP = 0, BENCH_UNIX = 1, BENCH_NTRANSPORT };

/** "push", "pull" and "dense", "sparse", by the enums above. */
extern const char *const bench_op_names[];
extern const char *const bench_kind_names[];
extern const char *const bench_transport_names[];

/* --baseline, in the order of bench_baseline_names. */
enum bench_baseline { BENCH_BASELINE_YES, BENCH_BASELINE_NO, BENCH_BASELINE_ONLY,
		      BENCH_NBASELINE };

struct bench_opts {
	const char *server;
	double seconds, warmup;
	struct bench_list sizes, conns, windows;
	unsigned threads;  /* client threads; 0: one per connection */
	unsigned ops; /* bit (1 << enum bench_op) */
	unsigned transports; /* bit (1 << enum bench_transport) */
	int dense, sparse;
	int csv, quick, keep;
	int baseline; /* enum bench_baseline */
	int verbose;  /* each -v logs one level more */
	/* --durability: the [store] modes to run, in order; none given: a
	 * server without a [store] section. */
	int durability[3]; /* enum dml_durability */
	size_t ndurability;
	uint64_t rounds;   /* --durability: measurements per case and mode */
	uint64_t batch_ms; /* [store] batch_ms; 0: the server's default */
};

struct bench_case {
	enum bench_op op;
	enum bench_kind kind;
	uint32_t table, width;
	uint64_t nkeys;    /* dense: the whole table; sparse: keys per request */
	unsigned pool;     /* sparse: index into bench_sparse and the key pools */
	unsigned conns, window;
	enum bench_transport transport; /* libdml's and the raw baseline's */
	struct bench_result dml, tcp;   /* tcp: the raw baseline, over transport */
	int have_dml, have_tcp;
};

/* ---- options (bench_pushpull_opts.c) ----------------------------------- */

/**
 * Parse pushpull's command line into o, defaults filled in. Returns 0, or
 * the exit status to end with (0 after --help: *help is then 1).
 */
int bench_pushpull_opts_parse(int argc, char **argv, struct bench_opts *o, int *help);

/* ---- cases (bench_pushpull.c) ------------------------------------------ */

/** The value bytes one request of the case moves. */
uint64_t bench_case_value_bytes(const struct bench_case *bc);

/** The case's size as its rows show it: "4K", "1M", "1000x64". */
void bench_case_label(const struct bench_case *bc, char *buf, size_t len);

/* ---- the report (bench_pushpull_print.c) ------------------------------- */

/** The column heads of the rows (CSV or aligned). */
void bench_print_header(const struct bench_opts *o);

/** One measured case's row. */
void bench_print_row(const struct bench_case *bc, const struct bench_opts *o);

/** PASS, FAIL or SKIP for each of the targets. */
void bench_print_targets(const struct bench_case *cases, size_t n,
			 const struct bench_opts *o);

/** The header, rows and targets of cases measured already. */
void bench_print_cases(const struct bench_case *cases, size_t n,
		       const struct bench_opts *o);

/**
 * What is measured against which server s (NULL with --baseline only);
 * runs: the times each case is measured against a server (all servers).
 */
void bench_print_preface(const struct bench_opts *o, const struct bench_server *s,
			 const char *exe, size_t ncases, size_t runs);

/** The --durability runs' push rates next to each other, and the target. */
void bench_print_durability(struct bench_case *const *runs, const struct bench_opts *o,
			    size_t ncases);

#endif
