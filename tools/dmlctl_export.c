/*
 * dmlctl export JOB FILE: a job's trained tables, read from the servers
 * that hold them, written to FILE as a model file (worker/model_file.h) with
 * the job's spec.
 *
 * The scheduler says what the job is (JOBS: its state and spec). libdml,
 * connected as a control client of that job (the scheduler hands it the
 * job's shard map; a control client only reads and takes no part in
 * clocks), then pulls every dense table whole, in ranges of at most
 * EXPORT_CHUNK_FLOATS floats with a few in flight. A sparse table's keys
 * are known only to the servers: dmlctl asks each server for the rows of
 * the hash ranges the job's shard map gives it (a PULL with scan,
 * dml.proto), halving a range whose rows do not fit in one reply. The
 * scheduler keeps an ended job's map, and the servers keep its tables until
 * the next job's map replaces them: an ended job can be exported until
 * another job starts.
 *
 * Must never: push anything, leave a partial model under FILE (the model
 * writer goes through FILE.tmp), or exit 0 without the whole model written.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "worker/dml.h"
#include "proto/dml_error.h"
#include "tools/dmlctl.h"
#include "proto/job_spec.h"
#include "worker/model_file.h"
#include "proto/util.h"

/* 16M floats (64 MiB) per pull: well under a frame's default max_payload. */
#define EXPORT_CHUNK_FLOATS (16u << 20)
/* Pulls in flight per table: the next range travels while one is copied. */
#define EXPORT_WINDOW 4
/* A pull that no server answers in this long fails the export. */
#define EXPORT_REQUEST_TIMEOUT_MS 30000
/* The job's shard map comes from the scheduler: allow a large one. */
#define EXPORT_MAX_META "16M"

/* The job's status in the reply, writable: its spec goes into the model. */
static Dml__JobStatus *reply_job(Dml__Meta *r, uint32_t id)
{
	for (size_t i = 0; i < r->n_jobs; i++)
		if (r->jobs[i]->id == id)
			return r->jobs[i];
	return NULL;
}

/* Whether the job has tables that can be read now; prints why not. */
static int export_check(const Dml__JobStatus *st)
{
	const Dml__JobSpec *sp = st->spec;
	char why[256];

	if (!sp) {
		fprintf(stderr, "dmlctl: export: the scheduler sent no spec for job %u\n",
			st->id);
		return EXIT_FAIL;
	}
	if (st->state == DML__JOB_STATE__PENDING) {
		fprintf(stderr, "dmlctl: export: job %u has not started: its tables do not "
			"exist yet (dmlctl status %u)\n", st->id, st->id);
		return EXIT_FAIL;
	}
	if (ctl_job_ended(st->state) && st->shard_map_version == 0) {
		fprintf(stderr, "dmlctl: export: job %u ended (%s) before its tables were "
			"made: there is nothing to export\n", st->id,
			*st->reason ? ctl_clean(st->reason, why, sizeof(why))
				    : dml_job_state_name(st->state));
		return EXIT_FAIL;
	}
	if (st->state == DML__JOB_STATE__RUNNING)
		fprintf(stderr, "dmlctl: export: job %u is running: its tables change while "
			"they are read (dmlctl pause %u first for a consistent model)\n",
			st->id, st->id);
	return EXIT_OK;
}

/* The model is written last: a directory it cannot go into is better said
 * before any table is pulled. */
static int check_target(const char *file)
{
	char *dir = dml_xstrdup(file), *slash = strrchr(dir, '/');
	const char *d = slash == dir ? "/" : slash ? dir : ".";
	int rc = EXIT_OK;

	if (slash && slash != dir)
		*slash = '\0';
	if (access(d, W_OK | X_OK) != 0) {
		fprintf(stderr, "dmlctl: export: cannot write %s: %s: %s\n", file, d,
			strerror(errno));
		rc = EXIT_FAIL;
	}
	free(dir);
	return rc;
}

/* A control client of job id, through the scheduler dmlctl talks to. */
static int client_open(const struct ctl *ctl, uint32_t id, dml_t **d)
{
	char job[16], timeout[16], req_timeout[16];
	dml_opts_t *o;
	int rc;

	snprintf(job, sizeof(job), "%" PRIu32, id);
	snprintf(timeout, sizeof(timeout), "%d", CTL_TIMEOUT_MS);
	snprintf(req_timeout, sizeof(req_timeout), "%d", EXPORT_REQUEST_TIMEOUT_MS);
	rc = dml_opts_new(&o);
	if (rc)
		return rc;
	if ((rc = dml_opts_set(o, "scheduler", ctl->addr)) == 0 &&
	    (rc = dml_opts_set(o, "secret_file", ctl->secret_file)) == 0 &&
	    (rc = dml_opts_set(o, "cluster", ctl->cluster)) == 0 &&
	    (rc = dml_opts_set(o, "role", "control")) == 0 &&
	    (rc = dml_opts_set(o, "job", job)) == 0 &&
	    (rc = dml_opts_set(o, "connect_timeout_ms", timeout)) == 0 &&
	    (rc = dml_opts_set(o, "request_timeout_ms", req_timeout)) == 0 &&
	    (rc = dml_opts_set(o, "max_meta", EXPORT_MAX_META)) == 0)
		rc = dml_connect(o, d);
	dml_opts_free(o);
	return rc;
}

/*
 * Pull keys 0..keys-1 of a dense table into out, EXPORT_WINDOW ranges in
 * flight. On failure *bad is the first key of the range that failed.
 */
static int pull_table(dml_t *d, uint32_t table, uint64_t keys, uint32_t width, float *out,
		      uint64_t *bad)
{
	uint64_t chunk = EXPORT_CHUNK_FLOATS / width, next = 0, from[EXPORT_WINDOW];
	dml_handle_t ring[EXPORT_WINDOW];
	size_t head = 0, inflight = 0;
	int rc = 0;

	if (chunk == 0)
		chunk = 1;
	while ((next < keys && rc == 0) || inflight) {
		if (next < keys && rc == 0 && inflight < EXPORT_WINDOW) {
			size_t slot = (head + inflight) % EXPORT_WINDOW;
			uint64_t end = keys - next > chunk ? next + chunk : keys;

			rc = dml_pull_range(d, table, next, end, out + next * width,
					    &ring[slot]);
			if (rc) {
				*bad = next;
			} else {
				from[slot] = next;
				inflight++;
				next = end;
			}
			continue;
		}
		{
			int wrc = dml_wait(d, ring[head]);

			if (wrc && !rc) {
				rc = wrc;
				*bad = from[head];
			}
		}
		head = (head + 1) % EXPORT_WINDOW;
		inflight--;
	}
	return rc;
}

/* Why a pull failed, in words an operator can act on. */
static void report_pull(const Dml__JobStatus *st, dml_t *d, uint32_t table, uint64_t key,
			int rc)
{
	char detail[256];

	ctl_clean(dml_error_detail(d), detail, sizeof(detail));
	if (ctl_job_ended(st->state) && (rc == DML_ESTATE || rc == DML_ERANGE))
		fprintf(stderr, "dmlctl: export: job %u ended and its servers no longer hold "
			"its tables (%s): another job started since, or a server restarted; "
			"a job can be exported until the next one starts\n", st->id,
			*detail ? detail : dml_strerror(rc));
	else
		fprintf(stderr, "dmlctl: export: reading table %u from key %" PRIu64
			": %s%s%s\n", table, key, dml_strerror(rc), *detail ? ": " : "", detail);
}

/* Size, allocate and pull one table into t. Prints what went wrong. */
static int export_table(dml_t *d, const Dml__JobStatus *st, const Dml__TableSpec *ts,
			struct dml_model_table *t)
{
	uint64_t keys, bad = 0;
	uint32_t width;
	int rc;

	if ((rc = dml_table_width(d, ts->id, &width)) != 0 ||
	    (rc = dml_table_size(d, ts->id, &keys)) != 0) {
		fprintf(stderr, "dmlctl: export: the shard map of job %u has no table %u: %s\n",
			st->id, ts->id, dml_strerror(rc));
		return EXIT_FAIL;
	}
	if (width != ts->width || keys != ts->keys) {
		fprintf(stderr, "dmlctl: export: table %u: the servers hold %" PRIu64 " keys x "
			"%" PRIu32 ", the job's spec says %" PRIu64 " x %" PRIu32 "\n", ts->id,
			keys, width, ts->keys, ts->width);
		return EXIT_FAIL;
	}
	t->id = ts->id;
	t->width = width;
	t->dense = 1;
	t->rows = keys;
	if (width == 0 || keys > SIZE_MAX / sizeof(float) / width ||
	    !(t->values = malloc(keys * width * sizeof(float)))) {
		fprintf(stderr, "dmlctl: export: table %u: no memory for %" PRIu64 " x %" PRIu32
			" floats\n", ts->id, keys, width);
		return EXIT_FAIL;
	}
	rc = pull_table(d, ts->id, keys, width, t->values, &bad);
	if (rc) {
		report_pull(st, d, ts->id, bad, rc);
		return EXIT_FAIL;
	}
	return EXIT_OK;
}

/* ---- sparse tables: scans of each server's hash ranges -------------------- */

/* A sparse table's rows as they arrive from the servers. */
struct rowset {
	uint32_t width;
	uint64_t *keys;
	float *values;
	size_t n, cap;
};

/* Append a scan reply's n rows (keys, then values). 0 or DML_ENOMEM. */
static int rowset_add(struct rowset *r, const uint8_t *payload, size_t n)
{
	if (r->n + n > r->cap) {
		size_t cap = (r->n + n) * 2;
		uint64_t *k;
		float *v;

		if (cap > SIZE_MAX / sizeof(float) / r->width)
			return DML_ENOMEM;
		if (!(k = realloc(r->keys, cap * sizeof(*k))))
			return DML_ENOMEM;
		r->keys = k;
		if (!(v = realloc(r->values, cap * r->width * sizeof(*v))))
			return DML_ENOMEM;
		r->values = v;
		r->cap = cap;
	}
	memcpy(r->keys + r->n, payload, n * sizeof(uint64_t));
	memcpy(r->values + r->n * r->width, payload + n * sizeof(uint64_t),
	       n * r->width * sizeof(float));
	r->n += n;
	return 0;
}

/*
 * The rows of table ts whose hash lies in [lo, hi), from the server at
 * addr (its session s), into rows: one scan, or two of the halves when the
 * server says the rows would not fit in a reply. Prints what went wrong.
 */
static int scan_range(struct ctl_session *s, const char *addr, uint32_t job,
		      const Dml__TableSpec *ts, uint64_t lo, uint64_t hi, struct rowset *rows)
{
	Dml__Meta req = DML__META__INIT, *reply = NULL;
	uint8_t *payload;
	size_t len;
	int rc;

	req.type = DML__MSG_TYPE__PULL;
	req.job = job;
	req.table = ts->id;
	req.dtype = DML__DTYPE__F32;
	req.value_width = ts->width;
	req.scan = 1;
	req.key_begin = lo;
	req.key_end = hi;
	rc = ctl_session_call(s, &req, &reply);
	if (rc == DML_EFRAME_PAYLOAD && s->refused && hi - lo > 1) {
		uint64_t mid = lo + (hi - lo) / 2;

		rc = scan_range(s, addr, job, ts, lo, mid, rows);
		return rc == EXIT_OK ? scan_range(s, addr, job, ts, mid, hi, rows) : rc;
	}
	if (rc) {
		char detail[256];

		ctl_clean(s->refused ? s->detail : dml_strerror(rc), detail, sizeof(detail));
		fprintf(stderr, "dmlctl: export: reading table %u from the server at %s: %s\n",
			ts->id, addr, detail);
		return EXIT_FAIL;
	}
	payload = ctl_session_take_payload(s, &len);
	if (reply->type != DML__MSG_TYPE__PULL_REPLY || !reply->scan ||
	    len != (size_t)reply->num_keys * (sizeof(uint64_t) + ts->width * sizeof(float))) {
		fprintf(stderr, "dmlctl: export: the server at %s answered a scan of table %u "
			"with a %s frame of %zu bytes that is not one\n", addr, ts->id,
			dml_msg_type_name((int)reply->type), len);
		rc = EXIT_FAIL;
	} else if (rowset_add(rows, payload, reply->num_keys) != 0) {
		fprintf(stderr, "dmlctl: export: table %u: no memory for %zu rows\n", ts->id,
			rows->n + reply->num_keys);
		rc = EXIT_FAIL;
	}
	free(payload);
	dml__meta__free_unpacked(reply, NULL);
	return rc;
}

static const char *server_address(const Dml__ShardMap *map, uint32_t node)
{
	for (size_t i = 0; i < map->n_servers; i++)
		if (map->servers[i]->node_id == node)
			return map->servers[i]->address;
	return NULL;
}

/* Every row of sparse table ts, server by server, into t. Prints what went wrong. */
static int export_sparse(const struct ctl *ctl, const Dml__JobStatus *st,
			 const Dml__ShardMap *map, const Dml__TableSpec *ts,
			 struct dml_model_table *t)
{
	struct rowset rows = { .width = ts->width };
	int rc = EXIT_OK;

	for (size_t i = 0; i < map->n_ranges && rc == EXIT_OK; i++) {
		const Dml__ShardRange *r = map->ranges[i];
		const char *addr;
		struct ctl_session s;

		if (r->table != ts->id || r->begin == r->end)
			continue;
		if (!(addr = server_address(map, r->server)) || !*addr) {
			fprintf(stderr, "dmlctl: export: the shard map of job %u names no address "
				"for server %u\n", st->id, r->server);
			rc = EXIT_FAIL;
		} else if (ctl_session_open_at(ctl, addr, DML__ROLE__SERVER, &s) != 0) {
			rc = EXIT_FAIL;
		} else {
			rc = scan_range(&s, addr, st->id, ts, r->begin, r->end, &rows);
			ctl_session_close(&s);
		}
	}
	t->id = ts->id;
	t->width = ts->width;
	t->dense = 0;
	t->rows = rows.n;
	t->keys = rows.keys;
	t->values = rows.values;
	return rc;
}

static void print_done(const struct ctl *ctl, const Dml__JobStatus *st, const char *file,
		       size_t ntables, uint64_t floats)
{
	char app[64];

	if (ctl->json) {
		struct ctl_json j = { stdout, 0 };

		ctl_json_open(&j, NULL, '{');
		ctl_json_u64(&j, "job", st->id);
		ctl_json_str(&j, "file", file);
		ctl_json_str(&j, "app", st->spec->app);
		ctl_json_u64(&j, "tables", ntables);
		ctl_json_u64(&j, "floats", floats);
		ctl_json_close(&j, '}');
		fputc('\n', stdout);
	} else {
		printf("exported job %u (%s, %zu table%s, %" PRIu64 " floats) to %s\n", st->id,
		       ctl_clean(st->spec->app, app, sizeof(app)), ntables,
		       ntables == 1 ? "" : "s", floats, file);
	}
}

/*
 * Read every table of the job (map: its shard map, for the sparse ones)
 * and write the model; returns an exit status.
 */
static int export_job(const struct ctl *ctl, Dml__JobStatus *st, const Dml__ShardMap *map,
		      const char *file)
{
	struct dml_model m = { 0 };
	uint64_t floats = 0;
	char err[512];
	dml_t *d;
	int rc;

	rc = client_open(ctl, st->id, &d);
	if (rc) {
		/* libdml logged the details as "dmlctl: error: dml_connect: ...". */
		fprintf(stderr, "dmlctl: export: cannot reach the servers of job %u through "
			"the scheduler at %s: %s\n", st->id, ctl->addr, dml_strerror(rc));
		return EXIT_FAIL;
	}
	m.spec = st->spec;
	m.tables = dml_xcalloc(st->spec->n_tables + 1, sizeof(*m.tables));
	for (; m.ntables < st->spec->n_tables; m.ntables++) {
		const Dml__TableSpec *ts = st->spec->tables[m.ntables];

		if (ts->dense)
			rc = export_table(d, st, ts, &m.tables[m.ntables]);
		else
			rc = export_sparse(ctl, st, map, ts, &m.tables[m.ntables]);
		if (rc != EXIT_OK)
			break;
		floats += m.tables[m.ntables].rows * m.tables[m.ntables].width;
	}
	dml_close(d);
	if (rc == EXIT_OK) {
		err[0] = '\0';
		if (dml_model_write(file, &m, err, sizeof(err)) != 0) {
			fprintf(stderr, "dmlctl: export: %s\n", err[0] ? err : "cannot write");
			rc = EXIT_FAIL;
		} else {
			print_done(ctl, st, file, m.ntables, floats);
		}
	}
	/* The spec is the reply's: only the tables are ours. */
	for (size_t i = 0; i <= m.ntables && i < st->spec->n_tables; i++) {
		free(m.tables[i].keys);
		free(m.tables[i].values);
	}
	free(m.tables);
	return rc;
}

/* The job's shard map, when it has sparse tables to scan (*reply NULL else). */
static int ask_map(struct ctl_session *s, const Dml__JobStatus *st, Dml__Meta **reply)
{
	Dml__Meta req = DML__META__INIT;
	int sparse = 0, rc;

	*reply = NULL;
	for (size_t i = 0; i < st->spec->n_tables; i++)
		sparse |= !st->spec->tables[i]->dense;
	if (!sparse)
		return EXIT_OK;
	req.type = DML__MSG_TYPE__SHARDMAP;
	req.job = st->id;
	rc = ctl_session_ask(s, &req, DML__MSG_TYPE__SHARDMAP_REPLY, reply, stderr);
	if (rc == EXIT_OK && !(*reply)->shard_map) {
		fprintf(stderr, "dmlctl: export: the scheduler sent no shard map for job %u\n",
			st->id);
		dml__meta__free_unpacked(*reply, NULL);
		*reply = NULL;
		rc = EXIT_FAIL;
	}
	return rc;
}

int ctl_cmd_export(struct ctl *ctl, int argc, char **argv)
{
	Dml__Meta *reply, *map_reply = NULL;
	Dml__JobStatus *st;
	struct ctl_session s;
	uint32_t id;
	int rc;

	if (argc < 2) {
		fprintf(stderr, "dmlctl: export needs a job id and a file: dmlctl export JOB "
			"FILE\n");
		return EXIT_USAGE;
	}
	if (argc > 2)
		return ctl_too_many("export", argv[2]);
	if ((rc = ctl_parse_job_id("export", argv[0], &id)) != EXIT_OK)
		return rc;
	if (!*argv[1]) {
		fprintf(stderr, "dmlctl: export: the model file name is empty\n");
		return EXIT_USAGE;
	}
	if (check_target(argv[1]) != EXIT_OK)
		return EXIT_FAIL;
	if (ctl_session_open(ctl, &s) != 0)
		return EXIT_FAIL;
	rc = ctl_ask_jobs(&s, id, &reply, stderr);
	if (rc == EXIT_OK) {
		st = reply_job(reply, id);
		rc = export_check(st);
		if (rc == EXIT_OK)
			rc = ask_map(&s, st, &map_reply);
		if (rc != EXIT_OK)
			dml__meta__free_unpacked(reply, NULL);
	}
	/* libdml and the scans make connections of their own: this one has done
	 * its part. */
	ctl_session_close(&s);
	if (rc != EXIT_OK)
		return rc;
	rc = export_job(ctl, st, map_reply ? map_reply->shard_map : NULL, argv[1]);
	if (map_reply)
		dml__meta__free_unpacked(map_reply, NULL);
	dml__meta__free_unpacked(reply, NULL);
	return rc;
}
