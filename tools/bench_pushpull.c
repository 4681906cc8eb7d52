/*
 * dml-bench pushpull: starts one real dml-server in a private temporary
 * directory, drives it through libdml with dense and sparse pushes and
 * pulls from 1..N connections (one dml_t each, all driven by one client
 * thread on one event loop unless --threads says otherwise) at several
 * windows of requests in flight, measures the same traffic over raw
 * loopback TCP (bench_raw.c) in the same run, prints one row per
 * configuration (bench_pushpull_print.c) and checks the targets of the
 * issue. Its options are in bench_pushpull_opts.c.
 *
 * It must never leave a server running: errors, SIGINT and SIGTERM stop the
 * server and remove its directory (unless --keep), and should dml-bench be
 * killed outright the kernel stops the server. Its exit status says whether
 * it ran, not whether a target was met.
 */
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "tools/bench.h"
#include "tools/bench_pushpull.h"
#include "tools/bench_pushpull_internal.h"
#include "tools/bench_server.h"
#include "tools/bench_util.h"
#include "worker/dml.h"
#include "proto/log.h"
#include "store/store.h"
#include "proto/util.h"

/* Pre-generated key sets per connection and sparse table, used round robin. */
#define BENCH_KEY_BATCHES 256
#define BENCH_ACK_BYTES 8
#define BENCH_DENSE_TABLE0 1 /* dense table of the i-th --sizes entry: 1 + i */

/* The sparse tables: width, key universe (log2) and table id. */
static const struct bench_sparse {
	uint32_t width;
	unsigned universe_log2;
	uint32_t table;
} bench_sparse[] = {
	{ 1, 20, 1001 },
	{ 64, 16, 1002 },
};
#define BENCH_NSPARSE DML_ARRAY_LEN(bench_sparse)

static uint64_t bench_sparse_max_width(void)
{
	uint64_t w = 0;

	for (size_t i = 0; i < BENCH_NSPARSE; i++)
		w = bench_sparse[i].width > w ? bench_sparse[i].width : w;
	return w;
}

/* ---- statistics ------------------------------------------------------ */


uint64_t bench_case_value_bytes(const struct bench_case *bc)
{
	return bc->nkeys * bc->width * sizeof(float);
}

/* The raw-TCP traffic with the same bytes on the wire as this request. */
static void bench_case_raw_shape(const struct bench_case *bc, struct bench_raw_shape *s)
{
	uint64_t keys = bc->kind == BENCH_SPARSE ? bc->nkeys * sizeof(uint64_t) : 0;
	uint64_t vals = bench_case_value_bytes(bc);

	s->unix_socket = bc->transport == BENCH_UNIX;
	s->req_bytes = (uint32_t)(bc->op == BENCH_PUSH ? keys + vals : keys);
	s->reply_bytes = (uint32_t)(bc->op == BENCH_PUSH ? BENCH_ACK_BYTES : vals);
}

static void bench_size_label(uint64_t bytes, char *buf, size_t len)
{
	if (bytes >= (1u << 20) && bytes % (1u << 20) == 0)
		snprintf(buf, len, "%" PRIu64 "M", bytes >> 20);
	else if (bytes >= 1024 && bytes % 1024 == 0)
		snprintf(buf, len, "%" PRIu64 "K", bytes >> 10);
	else
		snprintf(buf, len, "%" PRIu64, bytes);
}

void bench_case_label(const struct bench_case *bc, char *buf, size_t len)
{
	if (bc->kind == BENCH_DENSE)
		bench_size_label(bench_case_value_bytes(bc), buf, len);
	else
		snprintf(buf, len, "%" PRIu64 "x%" PRIu32, bc->nkeys, bc->width);
}

/* Append one request shape at every connection count, window and
 * transport; the transports of a configuration run back to back. */
static void bench_cases_add(const struct bench_opts *o, const struct bench_case *shape,
			    struct bench_case *cases, size_t *n)
{
	for (size_t c = 0; c < o->conns.n; c++) {
		for (size_t w = 0; w < o->windows.n; w++) {
			for (unsigned t = 0; t < BENCH_NTRANSPORT; t++) {
				struct bench_case *bc = &cases[*n];

				if (!(o->transports & (1u << t)))
					continue;
				(*n)++;
				*bc = *shape;
				bc->conns = (unsigned)o->conns.v[c];
				bc->window = (unsigned)o->windows.v[w];
				bc->transport = (enum bench_transport)t;
			}
		}
	}
}

static size_t bench_cases_build(const struct bench_opts *o, struct bench_case **out)
{
	size_t per_op = (o->dense ? o->sizes.n : 0) + (o->sparse ? BENCH_NSPARSE : 0);
	size_t max = 2 * per_op * o->conns.n * o->windows.n * BENCH_NTRANSPORT, n = 0;
	struct bench_case *cases = dml_xcalloc(max, sizeof(*cases));

	for (unsigned op = BENCH_PUSH; op <= BENCH_PULL; op++) {
		struct bench_case shape = { .op = (enum bench_op)op, .width = 1 };

		if (!(o->ops & (1u << op)))
			continue;
		shape.kind = BENCH_DENSE;
		for (size_t i = 0; o->dense && i < o->sizes.n; i++) {
			shape.table = BENCH_DENSE_TABLE0 + (uint32_t)i;
			shape.nkeys = o->sizes.v[i] / sizeof(float);
			bench_cases_add(o, &shape, cases, &n);
		}
		shape.kind = BENCH_SPARSE;
		shape.nkeys = BENCH_SPARSE_KEYS;
		for (unsigned i = 0; o->sparse && i < BENCH_NSPARSE; i++) {
			shape.table = bench_sparse[i].table;
			shape.width = bench_sparse[i].width;
			shape.pool = i;
			bench_cases_add(o, &shape, cases, &n);
		}
	}
	*out = cases;
	return n;
}

static uint64_t bench_list_max(const struct bench_list *l)
{
	uint64_t m = 0;

	for (size_t i = 0; i < l->n; i++)
		m = l->v[i] > m ? l->v[i] : m;
	return m;
}

/* The largest frame payload any request of this run carries, with slack. */
static uint64_t bench_max_payload(const struct bench_opts *o)
{
	uint64_t m = bench_list_max(&o->sizes);
	uint64_t sparse = BENCH_SPARSE_KEYS *
			  (sizeof(uint64_t) + bench_sparse_max_width() * sizeof(float));

	return (m > sparse ? m : sparse) + (64u << 10);
}

/* ---- the server process ---------------------------------------------- */

static void bench_conf_table(FILE *f, uint32_t id, const char *kind, uint32_t width,
			     const char *size_key, uint64_t size)
{
	fprintf(f, "\n[table]\nid = %" PRIu32 "\nkind = %s\nwidth = %" PRIu32 "\n"
		"%s = %" PRIu64 "\ninit = zeros\noptimizer = add\n",
		id, kind, width, size_key, size);
}

static int bench_server_write_conf(const struct bench_server *s,
				   const struct bench_opts *o)
{
	char secret[PATH_MAX], port[PATH_MAX];
	FILE *f = bench_server_conf_open(s, secret, port, sizeof(port));

	if (!f)
		return DML_EIO;
	fprintf(f, "[server]\nlisten = 127.0.0.1:0\nport_file = %s\nnode_id = 1\nlocal_socket = yes\n"
		"cluster = dml\nsecret_file = %s\nshard = 0/1\nlog_level = %s\n"
		"\n[limits]\nmax_payload = %" PRIu64 "\n"
		"\n[job]\nstaleness = -1\nworkers = 0\n",
		port, secret, o->verbose >= 2 ? "debug" : "info", bench_max_payload(o));
	if (s->durability >= 0)
		/* No checkpoints yet: the log keeps every push, so leave room
		 * (address space; the disk holds only what is written). */
		fprintf(f, "\n[store]\npath = %s/store\ndurability = %s\nmap_size = 64G\n",
			s->dir, dml_durability_names[s->durability]);
	if (s->durability == DML_DURABILITY_BATCH && o->batch_ms)
		fprintf(f, "batch_ms = %" PRIu64 "\n", o->batch_ms);
	for (size_t i = 0; o->dense && i < o->sizes.n; i++)
		bench_conf_table(f, BENCH_DENSE_TABLE0 + (uint32_t)i, "dense", 1, "keys",
				 o->sizes.v[i] / sizeof(float));
	for (size_t i = 0; o->sparse && i < BENCH_NSPARSE; i++)
		bench_conf_table(f, bench_sparse[i].table, "sparse",
				 bench_sparse[i].width, "capacity",
				 1ull << bench_sparse[i].universe_log2);
	return bench_server_conf_close(s, f);
}

static int bench_server_start(struct bench_server *s, const char *exe,
			      const struct bench_opts *o)
{
	int rc = bench_server_prepare(s);

	if (rc == 0)
		rc = bench_server_write_conf(s, o);
	return rc ? rc : bench_server_launch(s, exe);
}

/* ---- libdml connections ---------------------------------------------- */

/*
 * What every connection of a rig shares: the sparse key sets (read only)
 * and, per client thread, one value buffer that its connections push from
 * and pull into (one thread, so pulls into it never race).
 */
struct bench_shared {
	uint64_t *pool[BENCH_NSPARSE]; /* BENCH_KEY_BATCHES sets of keys each */
	size_t nvals;                  /* floats of each value buffer */
};

struct bench_conn {
	dml_opts_t *opts;
	dml_t *d;
	float *vals;       /* push source and pull destination, nvals floats */
	int own_vals;      /* the first connection of its thread owns vals */
	const struct bench_shared *shared;
	unsigned index;
	size_t batch;
	dml_handle_t *handles;        /* one per window slot */
	const struct bench_case *cur; /* what submit() sends now */
};

/* splitmix64: a fixed, fast sequence; the keys need not be unpredictable. */
static uint64_t bench_rand(uint64_t *state)
{
	uint64_t z = (*state += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

/*
 * BENCH_KEY_BATCHES sets of BENCH_SPARSE_KEYS distinct keys, each set drawn
 * uniformly from [0, universe) by a partial Fisher-Yates shuffle.
 */
static int bench_keys_generate(uint32_t universe, uint64_t seed, uint64_t **out)
{
	uint32_t *perm = malloc(universe * sizeof(*perm));
	uint64_t *keys = malloc(BENCH_KEY_BATCHES * BENCH_SPARSE_KEYS * sizeof(*keys));

	if (!perm || !keys || universe < BENCH_SPARSE_KEYS) {
		free(perm);
		free(keys);
		return DML_ENOMEM;
	}
	for (uint32_t i = 0; i < universe; i++)
		perm[i] = i;
	for (size_t b = 0; b < BENCH_KEY_BATCHES; b++) {
		for (uint32_t j = 0; j < BENCH_SPARSE_KEYS; j++) {
			unsigned __int128 r = bench_rand(&seed);
			uint32_t k = j + (uint32_t)((r * (universe - j)) >> 64);
			uint32_t t = perm[j];

			perm[j] = perm[k];
			perm[k] = t;
			keys[b * BENCH_SPARSE_KEYS + j] = perm[j];
		}
	}
	free(perm);
	*out = keys;
	return 0;
}

static int bench_shared_init(struct bench_shared *sh, const struct bench_opts *o)
{
	uint64_t dense_max = bench_list_max(&o->sizes) / sizeof(float);
	uint64_t sparse_max = BENCH_SPARSE_KEYS * bench_sparse_max_width();

	memset(sh, 0, sizeof(*sh));
	sh->nvals = dense_max > sparse_max ? dense_max : sparse_max;
	for (size_t i = 0; o->sparse && i < BENCH_NSPARSE; i++) {
		int rc = bench_keys_generate(1u << bench_sparse[i].universe_log2, i + 1,
					     &sh->pool[i]);

		if (rc)
			return rc;
	}
	return 0;
}

static void bench_shared_free(struct bench_shared *sh)
{
	for (size_t i = 0; i < BENCH_NSPARSE; i++)
		free(sh->pool[i]);
	memset(sh, 0, sizeof(*sh));
}

/*
 * Connection `index` of conns[]: on the event loop and value buffer of the
 * first connection of its client thread (bench_thread_of) among those of
 * its transport (per of each, see bench_rig_up), so one thread waits for
 * all of its connections' replies at once.
 */
static int bench_conn_open(struct bench_conn *conns, unsigned index,
			   const struct bench_server *s, const struct bench_opts *o,
			   const struct bench_shared *sh, size_t per)
{
	char servers[32], secret[PATH_MAX], id[16], payload[32];
	/* Reconnect briefly and fail a request stuck for a minute: a
	 * benchmark should report a broken server, not wait for it. */
	const char *const opts[][2] = {
		{ "servers", servers },
		{ "secret_file", secret },
		{ "worker_id", id },
		{ "role", "worker" },
		{ "max_payload", payload },
		{ "request_timeout_ms", "60000" },
		{ "reconnect_timeout_ms", "5000" },
		{ "local_socket", index / per == BENCH_UNIX ? "yes" : "no" },
	};
	size_t base = index / per * per;
	struct bench_conn *c = &conns[index];
	struct bench_conn *first = &conns[base + bench_thread_of((unsigned)(index - base),
								   o->threads)];
	int rc;

	memset(c, 0, sizeof(*c));
	c->index = index;
	c->shared = sh;
	snprintf(servers, sizeof(servers), "127.0.0.1:%u", (unsigned)s->port);
	snprintf(id, sizeof(id), "%u", index + 1);
	snprintf(payload, sizeof(payload), "%" PRIu64, bench_max_payload(o));
	if (bench_server_file(s, "secret", secret, sizeof(secret)))
		return DML_EINVAL;
	c->own_vals = first == c;
	c->vals = c->own_vals ? malloc(sh->nvals * sizeof(*c->vals)) : first->vals;
	if (!c->vals)
		return DML_ENOMEM;
	c->handles = dml_xcalloc(bench_list_max(&o->windows), sizeof(*c->handles));
	rc = bench_dml_opts_new(opts, DML_ARRAY_LEN(opts), &c->opts);
	if (rc == 0) {
		rc = dml_connect_shared(c->opts, first == c ? NULL : first->d, &c->d);
		if (rc)
			dml_err("connection %u to %s: %s", index + 1, servers,
				dml_strerror(rc));
	}
	return rc;
}

static void bench_conn_close(struct bench_conn *c)
{
	if (c->d)
		dml_close(c->d);
	dml_opts_free(c->opts);
	free(c->handles);
	if (c->own_vals)
		free(c->vals);
	memset(c, 0, sizeof(*c));
}

/* Does the server hold the tables this run needs, as configured? */
static int bench_conn_check_tables(struct bench_conn *c, const struct bench_opts *o)
{
	for (size_t i = 0; o->dense && i < o->sizes.n; i++) {
		uint32_t id = BENCH_DENSE_TABLE0 + (uint32_t)i, w = 0;
		uint64_t keys = 0;

		if (dml_table_width(c->d, id, &w) || dml_table_size(c->d, id, &keys) ||
		    w != 1 || keys != o->sizes.v[i] / sizeof(float)) {
			dml_err("server table %" PRIu32 ": width %" PRIu32 ", %" PRIu64
				" keys; expected width 1, %" PRIu64 " keys", id, w, keys,
				o->sizes.v[i] / sizeof(float));
			return DML_ECONF;
		}
	}
	for (size_t i = 0; o->sparse && i < BENCH_NSPARSE; i++) {
		uint32_t w = 0;

		if (dml_table_width(c->d, bench_sparse[i].table, &w) ||
		    w != bench_sparse[i].width) {
			dml_err("server table %" PRIu32 ": width %" PRIu32
				", expected %" PRIu32, bench_sparse[i].table, w,
				bench_sparse[i].width);
			return DML_ECONF;
		}
	}
	return 0;
}

static int bench_dml_fail(struct bench_conn *c, const char *what, int rc)
{
	const char *detail = dml_error_detail(c->d);

	dml_err("%s %s table %" PRIu32 ": %s%s%s", what, bench_op_names[c->cur->op],
		c->cur->table, dml_strerror(rc), *detail ? ": " : "", detail);
	return rc;
}

static int bench_dml_submit(void *ctx, unsigned slot)
{
	struct bench_conn *c = ctx;
	const struct bench_case *bc = c->cur;
	dml_handle_t *h = &c->handles[slot];
	int push = bc->op == BENCH_PUSH, rc;

	if (bc->kind == BENCH_DENSE) {
		rc = push ? dml_push_range(c->d, bc->table, 0, bc->nkeys, c->vals, h)
			  : dml_pull_range(c->d, bc->table, 0, bc->nkeys, c->vals, h);
	} else {
		const uint64_t *keys = c->shared->pool[bc->pool] + c->batch * BENCH_SPARSE_KEYS;

		c->batch = (c->batch + 1) % BENCH_KEY_BATCHES;
		rc = push ? dml_push(c->d, bc->table, keys, bc->nkeys, c->vals, h)
			  : dml_pull(c->d, bc->table, keys, bc->nkeys, c->vals, h);
	}
	return rc ? bench_dml_fail(c, "submit", rc) : 0;
}

static int bench_dml_complete(void *ctx, unsigned slot)
{
	struct bench_conn *c = ctx;
	int rc = dml_wait(c->d, c->handles[slot]);

	c->handles[slot] = 0;
	return rc ? bench_dml_fail(c, "wait for", rc) : 0;
}

/*
 * One measurement through libdml. All requests of a connection share one
 * value buffer, as the raw baseline's client does: pulls overwrite it, which
 * is harmless since nobody reads it, and it keeps 16 MiB x 32 in flight
 * from needing half a gigabyte per connection.
 */
static int bench_case_run_dml(struct bench_case *bc, struct bench_conn *conns,
			      size_t nconns, unsigned threads, const struct bench_plan *plan)
{
	struct bench_driver *drv = dml_xcalloc(bc->conns, sizeof(*drv));
	/* The connections of the case's transport (see bench_rig_up). */
	struct bench_conn *mine = conns + bc->transport * (nconns / BENCH_NTRANSPORT);
	int rc;

	for (unsigned i = 0; i < bc->conns; i++) {
		struct bench_conn *c = &mine[i];

		c->cur = bc;
		/* Connections draw the shared key sets from different places. */
		c->batch = c->index % BENCH_KEY_BATCHES;
		for (size_t j = 0; bc->op == BENCH_PUSH && c->own_vals && j < c->shared->nvals; j++)
			c->vals[j] = 1.0f / 1024;
		drv[i] = (struct bench_driver){ c, bench_dml_submit,
						bench_dml_complete };
	}
	rc = bench_run_drivers(drv, bc->conns, threads, bc->window, plan,
			       bench_case_value_bytes(bc), &bc->dml);
	bc->have_dml = rc == 0;
	free(drv);
	/* Let the idle connections answer whatever the server sent meanwhile
	 * (once per event loop). */
	for (size_t i = 0; i < nconns; i++)
		if (conns[i].own_vals)
			dml_progress(conns[i].d, 0);
	return rc;
}

static int bench_case_run_raw(struct bench_case *bc, unsigned threads,
			      const struct bench_plan *plan)
{
	struct bench_raw_shape shape;
	int rc;

	bench_case_raw_shape(bc, &shape);
	rc = bench_raw_run(&shape, bc->conns, threads, bc->window, plan,
			   bench_case_value_bytes(bc), &bc->tcp);
	bc->have_tcp = rc == 0;
	return rc;
}


/* ---- pushpull -------------------------------------------------------- */

static int bench_result_rps_cmp(const void *a, const void *b)
{
	const struct bench_result *x = a, *y = b;

	return (x->rps > y->rps) - (x->rps < y->rps);
}

/* The median of v[0..n) by requests per second (v is sorted). */
static struct bench_result bench_result_median(struct bench_result *v, size_t n)
{
	qsort(v, n, sizeof(*v), bench_result_rps_cmp);
	return v[n / 2];
}

/*
 * --rounds N without --durability: every case measured N times, the cases
 * taking turns (a machine whose speed drifts weighs on all of them alike),
 * raw TCP once; each case keeps its median. Then the rows and targets.
 */
static int bench_run_rounds(struct bench_case *cases, size_t n, struct bench_conn *conns,
			    size_t nconns, const struct bench_opts *o, int run_raw)
{
	struct bench_plan plan = { o->warmup, o->seconds };
	const size_t nr = (size_t)o->rounds;
	struct bench_result *got = dml_xcalloc(n * nr, sizeof(*got));
	int rc = 0;

	for (size_t r = 0; r < nr && rc == 0; r++) {
		printf("%sround %zu of %zu\n", o->csv ? "# " : "", r + 1, nr);
		fflush(stdout);
		for (size_t i = 0; i < n && rc == 0; i++) {
			if (r == 0 && run_raw && o->baseline != BENCH_BASELINE_NO)
				rc = bench_case_run_raw(&cases[i], o->threads, &plan);
			if (rc == 0)
				rc = bench_case_run_dml(&cases[i], conns, nconns, o->threads,
							&plan);
			got[i * nr + r] = cases[i].dml;
		}
	}
	for (size_t i = 0; i < n && rc == 0; i++)
		cases[i].dml = bench_result_median(&got[i * nr], nr);
	if (rc == 0) {
		printf("%s\n%sthe median of %zu rounds\n", o->csv ? "# " : "", o->csv ? "# " : "",
		       nr);
		bench_print_cases(cases, n, o);
	}
	free(got);
	return rc;
}

/* Measure every case (raw TCP too when run_raw), print the rows and targets. */
static int bench_run_cases(struct bench_case *cases, size_t n, struct bench_conn *conns,
			   size_t nconns, const struct bench_opts *o, int run_raw)
{
	struct bench_plan plan = { o->warmup, o->seconds };
	int rc = 0;

	if (o->rounds > 1 && o->baseline != BENCH_BASELINE_ONLY)
		return bench_run_rounds(cases, n, conns, nconns, o, run_raw);
	bench_print_header(o);
	for (size_t i = 0; i < n && rc == 0; i++) {
		if (run_raw && o->baseline != BENCH_BASELINE_NO)
			rc = bench_case_run_raw(&cases[i], o->threads, &plan);
		if (rc == 0 && o->baseline != BENCH_BASELINE_ONLY)
			rc = bench_case_run_dml(&cases[i], conns, nconns, o->threads, &plan);
		if (rc == 0)
			bench_print_row(&cases[i], o);
	}
	if (rc == 0 && o->baseline != BENCH_BASELINE_ONLY)
		bench_print_targets(cases, n, o);
	return rc;
}
/* One server (with [store] durability, or none when -1) and its connections. */
struct bench_rig {
	struct bench_server srv;
	struct bench_shared shared;
	struct bench_conn *conns;
	size_t nconns;
};

static int bench_rig_up(struct bench_rig *r, const struct bench_opts *o, int durability,
			const char *exe)
{
	int rc;

	memset(r, 0, sizeof(*r));
	r->srv.durability = durability;
	rc = bench_server_start(&r->srv, exe, o);
	if (rc == 0)
		rc = bench_shared_init(&r->shared, o);
	if (rc == 0) {
		/* The connections of transport t are [t * per, (t + 1) * per),
		 * opened for the transports measured only. */
		size_t per = bench_list_max(&o->conns), first = SIZE_MAX;

		r->nconns = per * BENCH_NTRANSPORT;
		r->conns = dml_xcalloc(r->nconns, sizeof(*r->conns));
		for (size_t i = 0; i < r->nconns && rc == 0; i++) {
			if (!(o->transports & (1u << (i / per))))
				continue;
			first = first < i ? first : i;
			rc = bench_conn_open(r->conns, (unsigned)i, &r->srv, o, &r->shared, per);
		}
		if (rc == 0)
			rc = bench_conn_check_tables(&r->conns[first], o);
	}
	return rc;
}

/* Close the connections, stop the server (its log tail after a failure). */
static void bench_rig_down(struct bench_rig *r, const struct bench_opts *o, int failed)
{
	/* The first connection of each thread last: the others use its buffer. */
	for (size_t i = r->nconns; i-- > 0;)
		bench_conn_close(&r->conns[i]);
	bench_shared_free(&r->shared);
	free(r->conns);
	r->conns = NULL;
	r->nconns = 0;
	if (failed && !bench_interrupted() && r->srv.pid > 0)
		bench_server_log_tail(&r->srv);
	bench_server_stop(&r->srv);
	if (o->keep && r->srv.have_dir)
		dml_warn("kept %s", r->srv.dir);
	else
		bench_server_remove_dir(&r->srv);
}

/* One server: measure every case (raw TCP too when run_raw), then stop it. */
static int bench_pushpull_serve(const struct bench_opts *o, const char *exe,
				struct bench_case *cases, size_t ncases)
{
	struct bench_rig rig;
	int rc = bench_rig_up(&rig, o, -1, exe);

	if (rc == 0) {
		bench_print_preface(o, &rig.srv, exe, ncases, (size_t)o->rounds);
		rc = bench_run_cases(cases, ncases, rig.conns, rig.nconns, o, 1);
		if (rc && bench_interrupted())
			dml_warn("interrupted; stopping");
	}
	bench_rig_down(&rig, o, rc != 0);
	return rc;
}

/*
 * --durability: a server of each mode, side by side. Every case is
 * measured o->rounds times on each, the modes taking turns (each going
 * first in turn), and each mode keeps its median: a machine whose speed
 * drifts during the run (a neighbour, the disk's writeback) then weighs
 * on every mode alike instead of on whichever ran at the time.
 */
static int bench_durability_run(const struct bench_opts *o, const char *exe,
				struct bench_case *const *runs, size_t ncases)
{
	struct bench_plan plan = { o->warmup, o->seconds };
	const size_t nm = o->ndurability, nr = (size_t)o->rounds;
	struct bench_rig rigs[3];
	struct bench_result *got = dml_xcalloc(nm * ncases * nr, sizeof(*got));
	size_t up = 0;
	int rc = 0;

	for (; up < nm && rc == 0; up++) {
		rc = bench_rig_up(&rigs[up], o, o->durability[up], exe);
		if (rc == 0)
			bench_print_preface(o, &rigs[up].srv, exe, ncases, nm * nr);
	}
	for (size_t r = 0; r < nr && rc == 0; r++) {
		for (size_t i = 0; i < ncases && rc == 0; i++) {
			if (r == 0 && o->baseline != BENCH_BASELINE_NO)
				rc = bench_case_run_raw(&runs[0][i], o->threads, &plan);
			for (size_t k = 0; k < nm && rc == 0; k++) {
				size_t m = (k + r + i) % nm;

				rc = bench_case_run_dml(&runs[m][i], rigs[m].conns, rigs[m].nconns,
							o->threads, &plan);
				got[(m * ncases + i) * nr + r] = runs[m][i].dml;
			}
		}
	}
	for (size_t m = 0; m < nm && rc == 0; m++) {
		printf("%s\n%s[store] durability = %s: the median of %zu\n", o->csv ? "# " : "",
		       o->csv ? "# " : "", dml_durability_names[o->durability[m]], nr);
		for (size_t i = 0; i < ncases; i++) {
			runs[m][i].dml = bench_result_median(&got[(m * ncases + i) * nr], nr);
			runs[m][i].tcp = runs[0][i].tcp;
			runs[m][i].have_tcp = runs[0][i].have_tcp;
		}
		bench_print_cases(runs[m], ncases, o);
	}
	if (rc && bench_interrupted())
		dml_warn("interrupted; stopping");
	while (up-- > 0)
		bench_rig_down(&rigs[up], o, rc != 0);
	free(got);
	return rc;
}

/*
 * Descriptors this process may hold at once: per connection a socket of
 * each rig (three with --durability), two of the raw baseline, an event
 * loop per thread; the soft limit (often 1024) is raised as far as the hard
 * one allows, so that 256 connections need no ulimit.
 */
static void bench_raise_nofile(const struct bench_opts *o)
{
	uint64_t conns = bench_list_max(&o->conns);
	uint64_t need = conns * (2 + (o->ndurability ? o->ndurability : 1) * 2) + 64;
	struct rlimit rl;

	if (getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur >= need)
		return;
	rl.rlim_cur = rl.rlim_max == RLIM_INFINITY || rl.rlim_max >= need ? need : rl.rlim_max;
	if (setrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur < need)
		dml_warn("pushpull: %" PRIu64 " connections may need %" PRIu64 " open files; "
			 "the limit is %llu", conns, need, (unsigned long long)rl.rlim_cur);
}

int bench_pushpull_main(int argc, char **argv)
{
	struct bench_opts o;
	struct bench_case *cases = NULL, *runs[3] = { NULL, NULL, NULL };
	char exe[PATH_MAX] = "";
	size_t ncases;
	int help, rc;

	rc = bench_pushpull_opts_parse(argc, argv, &o, &help);
	if (bench_cmd_begin(rc, help, bench_pushpull_usage, o.verbose))
		return rc;
	ncases = bench_cases_build(&o, &cases);
	bench_raise_nofile(&o);
	if (o.baseline == BENCH_BASELINE_ONLY) {
		bench_print_preface(&o, NULL, exe, ncases, 0);
		rc = bench_run_cases(cases, ncases, NULL, 0, &o, 1);
		goto out;
	}
	if (bench_server_find(o.server, exe, sizeof(exe))) {
		dml_err("cannot find dml-server: use --server or DML_SERVER");
		rc = DML_ENOTFOUND;
		goto out;
	}
	if (!o.ndurability) {
		rc = bench_pushpull_serve(&o, exe, cases, ncases);
		goto out;
	}
	for (size_t m = 0; m < o.ndurability; m++) {
		runs[m] = dml_xcalloc(ncases, sizeof(*cases));
		memcpy(runs[m], cases, ncases * sizeof(*cases));
	}
	rc = bench_durability_run(&o, exe, runs, ncases);
	if (rc == 0)
		bench_print_durability(runs, &o, ncases);
out:
	for (size_t m = 0; m < 3; m++)
		free(runs[m]);
	free(cases);
	return bench_exit_status(rc);
}

/* ---- subcommands ----------------------------------------------------- */

