/*
 * A damage campaign against the stores' files: a server's store (the log's
 * data.mdb, the checkpoints' ckpt/data.mdb, the manifest) and a
 * scheduler's (data.mdb, manifest) are written with known contents, then,
 * one case at a time, put back and damaged: cut to several sizes, a byte
 * flipped at random offsets (a fixed seed, 150 a file), a page zeroed,
 * deleted, or replaced by a copy taken earlier. Every open must end in
 * DML_ECONF (a daemon's exit 2) with a message naming the file, or read
 * back exactly what was written; never a signal, never other values.
 * Each open runs in a child process, so that a signal is seen and counted
 * as the failure it is. The daemons' own exit status on such refusals is
 * check_durability's test_damage_refused.
 */
#define _GNU_SOURCE
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "test/check_run.h"
#include "proto/dml_error.h"
#include "store/sched_store.h"
#include "store/store.h"
#include "store/store_internal.h"
#include "test/tmpdir.h"

#define MAP (8u << 20)
#define FLIPS 150
#define PAGE 4096

/* ---- files: kept in memory, put back, damaged ----------------------------- */

struct file {
	const char *rel;           /* under the store's directory */
	uint8_t *data;
	size_t len;
	int present;
};

static char store_dir[DML_TEST_PATH_MAX];

static void path_of(const char *rel, char *buf, size_t len)
{
	ck_assert_uint_lt((size_t)snprintf(buf, len, "%s/%s", store_dir, rel), len);
}

static void take(struct file *f, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		char p[DML_TEST_PATH_MAX + 64];
		FILE *fp;
		struct stat st;

		path_of(f[i].rel, p, sizeof(p));
		free(f[i].data);
		f[i].data = NULL;
		f[i].len = 0;
		f[i].present = stat(p, &st) == 0;
		if (!f[i].present)
			continue;
		f[i].data = malloc(st.st_size ? (size_t)st.st_size : 1);
		ck_assert_ptr_nonnull(f[i].data);
		fp = fopen(p, "rb");
		ck_assert_ptr_nonnull(fp);
		f[i].len = fread(f[i].data, 1, (size_t)st.st_size, fp);
		ck_assert_uint_eq(f[i].len, (size_t)st.st_size);
		fclose(fp);
	}
}

static void put_file(const char *rel, const uint8_t *data, size_t len)
{
	char p[DML_TEST_PATH_MAX + 64];
	FILE *fp;

	path_of(rel, p, sizeof(p));
	if (strchr(rel, '/')) {
		char d[DML_TEST_PATH_MAX + 64];

		snprintf(d, sizeof(d), "%s", p);
		*strrchr(d, '/') = '\0';
		mkdir(d, 0700);
	}
	fp = fopen(p, "wb");
	ck_assert_ptr_nonnull(fp);
	if (len)
		ck_assert_uint_eq(fwrite(data, 1, len, fp), len);
	ck_assert_int_eq(fclose(fp), 0);
}

static void put_back(const struct file *f, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		char p[DML_TEST_PATH_MAX + 64];

		if (f[i].present) {
			put_file(f[i].rel, f[i].data, f[i].len);
		} else {
			path_of(f[i].rel, p, sizeof(p));
			unlink(p);
		}
	}
}

static void drop(struct file *f, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		free(f[i].data);
		f[i].data = NULL;
	}
}

static uint64_t rng = 0x9e3779b97f4a7c15ull;

static uint64_t next_rand(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return rng;
}

/* ---- what a store reads back, in a child ------------------------------------ */

struct outcome {
	int signal;                /* the child ended on it; 0: it did not */
	int rc;
	uint32_t digest;
	char err[512];
};

static uint32_t mix(uint32_t d, const void *p, size_t n)
{
	return store_crc32c(d, p, n);
}

static int chunk_fn(const struct dml_ckpt_rows *r, void *arg)
{
	uint32_t *d = arg;

	*d = mix(*d, &r->table, sizeof(r->table));
	*d = mix(*d, &r->dense, sizeof(r->dense));
	*d = mix(*d, &r->begin, sizeof(r->begin));
	*d = mix(*d, &r->n, sizeof(r->n));
	*d = mix(*d, &r->row_floats, sizeof(r->row_floats));
	if (!r->dense)
		*d = mix(*d, r->keys, r->n * 8);
	*d = mix(*d, r->rows, r->n * r->row_floats * sizeof(float));
	return 0;
}

static int rec_fn(const struct dml_log_rec *r, void *arg)
{
	uint32_t *d = arg;
	uint64_t n = r->dense ? r->end - r->begin : r->nkeys;
	uint64_t head[] = { r->job, r->table, r->worker, r->incarnation, r->seq, r->clock,
			    (uint64_t)r->dense, r->begin, r->end, r->nkeys, r->width };

	*d = mix(*d, head, sizeof(head));
	if (!r->dense)
		*d = mix(*d, r->keys, (size_t)r->nkeys * 8);
	*d = mix(*d, r->values, (size_t)(n * r->width * sizeof(float)));
	return 0;
}

static int seq_fn(uint32_t worker, uint64_t incarnation, uint64_t seq, void *arg)
{
	uint32_t *d = arg;
	uint64_t v[] = { worker, incarnation, seq };

	*d = mix(*d, v, sizeof(v));
	return 0;
}

static int sched_fn(uint64_t key, const void *val, size_t len, void *arg)
{
	uint32_t *d = arg;

	*d = mix(*d, &key, sizeof(key));
	*d = mix(*d, &len, sizeof(len));
	*d = mix(*d, val, len);
	return 0;
}

static void read_back(int sched, struct outcome *o)
{
	struct dml_store *s = NULL;

	o->digest = 0;
	if (sched) {
		o->rc = dml_sched_store_open(store_dir, MAP, &s, o->err, sizeof(o->err));
		if (!o->rc)
			o->rc = dml_sched_store_each(s, DML_SCHED_DB_JOBS, sched_fn, &o->digest,
						     o->err, sizeof(o->err));
		if (!o->rc)
			o->rc = dml_sched_store_each(s, DML_SCHED_DB_NODES, sched_fn, &o->digest,
						     o->err, sizeof(o->err));
	} else {
		o->rc = dml_store_open(store_dir, MAP, 1, 1, &s, o->err, sizeof(o->err));
		if (!o->rc)
			o->rc = dml_store_checkpoint_each(s, chunk_fn, &o->digest, o->err,
							  sizeof(o->err));
		if (!o->rc)
			o->rc = dml_store_replay(s, rec_fn, &o->digest, o->err, sizeof(o->err));
		if (!o->rc)
			o->rc = dml_store_dedupe_each(s, seq_fn, &o->digest, o->err,
						      sizeof(o->err));
	}
	dml_store_close(s);
}

static void trial(int sched, struct outcome *o)
{
	int fds[2], status;
	pid_t pid;

	memset(o, 0, sizeof(*o));
	ck_assert_int_eq(pipe(fds), 0);
	pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		struct outcome c = { 0 };
		ssize_t w;

		signal(SIGSEGV, SIG_DFL);
		signal(SIGBUS, SIG_DFL);
		signal(SIGABRT, SIG_DFL);
		close(fds[0]);
		read_back(sched, &c);
		w = write(fds[1], &c, sizeof(c));
		_exit(w == (ssize_t)sizeof(c) ? 0 : 1);
	}
	close(fds[1]);
	if (read(fds[0], o, sizeof(*o)) != (ssize_t)sizeof(*o))
		o->rc = -12345;
	close(fds[0]);
	ck_assert_int_eq(waitpid(pid, &status, 0), pid);
	if (WIFSIGNALED(status))
		o->signal = WTERMSIG(status);
	else if (!WIFEXITED(status) || WEXITSTATUS(status))
		o->signal = -1;
}

struct tally {
	int refused, exact, cases;
};

/*
 * The outcome of case what (a file named blame damaged): refused naming
 * blame (or, blame NULL, one of the store's files), or exactly good (or
 * also, where old is not 0, exactly old: a whole store put back).
 */
static void judge(int sched, const char *what, const char *blame, uint32_t good, uint32_t old,
		  struct tally *t)
{
	struct outcome o;
	char want[DML_TEST_PATH_MAX + 64];

	trial(sched, &o);
	t->cases++;
	ck_assert_msg(o.signal == 0, "%s: the open ended on signal %d", what, o.signal);
	if (o.rc == 0) {
		ck_assert_msg(o.digest == good || (old && o.digest == old),
			      "%s: opened, but read back other values", what);
		t->exact++;
		return;
	}
	ck_assert_msg(o.rc == DML_ECONF, "%s: %d (want DML_ECONF): %s", what, o.rc, o.err);
	if (blame)
		path_of(blame, want, sizeof(want));
	else
		snprintf(want, sizeof(want), "%s/", store_dir);
	ck_assert_msg(strstr(o.err, want) != NULL, "%s: the refusal does not name %s: %s", what,
		      want, o.err);
	t->refused++;
}

/* ---- the cases ----------------------------------------------------------------- */

/* Put every file back, then damage file i of f by how (see below), at offset and n. */
enum how { CUT, FLIP, ZERO, DELETE };

static void damage(const struct file *f, size_t n, size_t i, enum how how, size_t at,
		   size_t len)
{
	uint8_t *copy;

	put_back(f, n);
	if (how == DELETE) {
		char p[DML_TEST_PATH_MAX + 64];

		path_of(f[i].rel, p, sizeof(p));
		ck_assert_int_eq(unlink(p), 0);
		return;
	}
	copy = malloc(f[i].len);
	ck_assert_ptr_nonnull(copy);
	memcpy(copy, f[i].data, f[i].len);
	if (how == FLIP)
		copy[at] ^= (uint8_t)(1 + next_rand() % 255);
	if (how == ZERO)
		memset(copy + at, 0, len);
	put_file(f[i].rel, copy, how == CUT ? at : f[i].len);
	free(copy);
}

/* Every damage to every data file of f; the manifest's own cases too. */
static void campaign(int sched, struct file *f, size_t n, uint32_t good, const char *label)
{
	for (size_t i = 0; i < n; i++) {
		struct tally t = { 0 };
		char what[256];
		size_t len = f[i].len;
		size_t cuts[] = { 0, 1, 100, PAGE, 2 * PAGE, len / 2, len - PAGE, len - 1 };

		ck_assert_msg(f[i].present && len > 4 * PAGE, "%s %s: %zu bytes", label, f[i].rel,
			      len);
		for (size_t c = 0; c < sizeof(cuts) / sizeof(cuts[0]); c++) {
			snprintf(what, sizeof(what), "%s %s cut to %zu bytes", label, f[i].rel,
				 cuts[c]);
			damage(f, n, i, CUT, cuts[c], 0);
			judge(sched, what, f[i].rel, good, 0, &t);
		}
		for (int k = 0; k < FLIPS; k++) {
			size_t at = (size_t)(next_rand() % len);

			snprintf(what, sizeof(what), "%s %s: byte %zu flipped", label, f[i].rel, at);
			damage(f, n, i, FLIP, at, 0);
			judge(sched, what, f[i].rel, good, 0, &t);
		}
		for (size_t at = 0; at + PAGE <= len && at < 48 * PAGE; at += PAGE) {
			snprintf(what, sizeof(what), "%s %s: page at %zu zeroed", label, f[i].rel,
				 at);
			damage(f, n, i, ZERO, at, PAGE);
			judge(sched, what, f[i].rel, good, 0, &t);
		}
		snprintf(what, sizeof(what), "%s %s deleted", label, f[i].rel);
		damage(f, n, i, DELETE, 0, 0);
		judge(sched, what, f[i].rel, good, 0, &t);
		printf("check_store_damage: %s %s: %d cases, %d refused naming it, %d read back "
		       "exactly\n", label, f[i].rel, t.cases, t.refused, t.exact);
	}
}

/* The manifest: deleted, cut, a byte flipped. */
static void manifest_cases(int sched, const struct file *f, size_t n, size_t mi, uint32_t good,
			   const char *label)
{
	struct tally t = { 0 };
	char what[256];

	damage(f, n, mi, DELETE, 0, 0);
	snprintf(what, sizeof(what), "%s manifest deleted", label);
	judge(sched, what, "manifest", good, 0, &t);
	damage(f, n, mi, CUT, 10, 0);
	snprintf(what, sizeof(what), "%s manifest cut", label);
	judge(sched, what, "manifest", good, 0, &t);
	for (size_t at = 0; at < f[mi].len; at += 7) {
		damage(f, n, mi, FLIP, at, 0);
		snprintf(what, sizeof(what), "%s manifest: byte %zu flipped", label, at);
		judge(sched, what, "manifest", good, 0, &t);
	}
	ck_assert_int_eq(t.exact, 0);
	printf("check_store_damage: %s manifest: %d cases, all refused naming it\n", label,
	       t.cases);
}

/* Files of old put back over those of f, one at a time, then all. */
static void older_cases(int sched, const struct file *f, const struct file *old, size_t n,
			uint32_t good, uint32_t was, const char *label)
{
	struct tally t = { 0 };
	char what[256];

	for (size_t i = 0; i < n; i++) {
		put_back(f, n);
		put_back(&old[i], 1);
		snprintf(what, sizeof(what), "%s %s: an older copy", label, old[i].rel);
		/* An older manifest alone: the files are ahead of it, as after a
		 * crash before it was written again, and all there. */
		judge(sched, what, strcmp(old[i].rel, "manifest") ? NULL : "manifest", good, 0, &t);
	}
	put_back(old, n);
	snprintf(what, sizeof(what), "%s: the whole store an older copy", label);
	judge(sched, what, NULL, good, was, &t);
	printf("check_store_damage: %s: %d older copies, %d refused, %d read back exactly\n",
	       label, t.cases, t.refused, t.exact);
}

/* ---- the stores ------------------------------------------------------------------ */

static void open_dir(const char *name)
{
	char p[DML_TEST_PATH_MAX];

	dml_test_tmpdir_path(p, sizeof(p), name);
	memcpy(store_dir, p, sizeof(store_dir));
}

static void push_batches(struct dml_store *s, int from, int to, uint64_t *seq)
{
	char err[512];

	for (int b = from; b < to; b++) {
		for (int i = 0; i < 24; i++) {
			float vals[64];
			uint64_t keys[8];
			struct dml_log_rec r = { 0 };

			for (int j = 0; j < 64; j++)
				vals[j] = (float)(next_rand() % 100000) / 1000.0f;
			r.job = 1;
			r.worker = 1 + (uint32_t)(i % 3);
			r.incarnation = 1;
			r.seq = ++seq[r.worker];
			r.clock = (uint64_t)b;
			r.values = vals;
			if (i % 2) {
				r.table = 1;
				r.dense = 1;
				r.begin = next_rand() % 500;
				r.end = r.begin + 16;
				r.width = 4;
			} else {
				for (int j = 0; j < 8; j++)
					keys[j] = next_rand();
				r.table = 2;
				r.nkeys = 8;
				r.keys = keys;
				r.width = 8;
			}
			ck_assert_int_eq(dml_store_append(s, &r), 0);
		}
		ck_assert_msg(dml_store_commit(s, err, sizeof(err)) == 0, "%s", err);
	}
}

static void checkpoint(struct dml_store *s)
{
	static float rows[1500 * 3];
	static uint64_t keys[600];
	struct dml_ckpt_info info = { .lsn = dml_store_log_last(s), .next_clock = 1 };
	struct dml_ckpt_rows dense = { .table = 1, .dense = 1, .n = 1500, .row_floats = 3,
				       .rows = rows };
	struct dml_ckpt_rows sparse = { .table = 2, .keys = keys, .n = 600, .row_floats = 2,
					.rows = rows };
	char err[512];

	for (size_t j = 0; j < sizeof(rows) / sizeof(rows[0]); j++)
		rows[j] = (float)(next_rand() % 100000) / 7.0f;
	for (size_t j = 0; j < 600; j++)
		keys[j] = next_rand();
	ck_assert_msg(dml_store_checkpoint_begin(s, &info, err, sizeof(err)) == 0, "%s", err);
	ck_assert(dml_store_checkpoint_add(s, &dense, err, sizeof(err)) == 0);
	ck_assert(dml_store_checkpoint_add(s, &sparse, err, sizeof(err)) == 0);
	dense.begin = 1500;
	ck_assert(dml_store_checkpoint_add(s, &dense, err, sizeof(err)) == 0);
	ck_assert_msg(dml_store_checkpoint_end(s, 1, err, sizeof(err)) == 0, "%s", err);
}

START_TEST(test_server_store_damage)
{
	struct file f[] = { { .rel = "data.mdb" }, { .rel = "ckpt/data.mdb" }, { .rel = "manifest" } };
	struct file old[] = { { .rel = "data.mdb" }, { .rel = "ckpt/data.mdb" }, { .rel = "manifest" } };
	uint64_t seq[4] = { 0 };
	struct outcome o;
	struct dml_store *s;
	char err[512];
	uint32_t good, was;

	open_dir("server");
	ck_assert_msg(dml_store_open(store_dir, MAP, 1, 1, &s, err, sizeof(err)) == 0, "%s", err);
	push_batches(s, 0, 4, seq);
	checkpoint(s);
	push_batches(s, 4, 6, seq);
	dml_store_close(s);
	take(old, 3);
	trial(0, &o);
	ck_assert_msg(o.rc == 0 && !o.signal, "%s", o.err);
	was = o.digest;
	ck_assert_msg(dml_store_open(store_dir, MAP, 1, 1, &s, err, sizeof(err)) == 0, "%s", err);
	push_batches(s, 6, 8, seq);
	checkpoint(s);
	push_batches(s, 8, 14, seq);
	dml_store_close(s);
	take(f, 3);
	trial(0, &o);
	ck_assert_msg(o.rc == 0 && !o.signal, "%s", o.err);
	good = o.digest;
	ck_assert_uint_ne(good, was);
	campaign(0, f, 2, good, "server store");
	manifest_cases(0, f, 3, 2, good, "server store");
	older_cases(0, f, old, 3, good, was, "server store");
	drop(f, 3);
	drop(old, 3);
}
END_TEST

static void sched_commits(struct dml_store *s, int from, int to)
{
	char err[512];

	for (int c = from; c < to; c++) {
		for (int i = 0; i < 12; i++) {
			uint8_t val[300];
			size_t len = 40 + next_rand() % 260;

			for (size_t j = 0; j < len; j++)
				val[j] = (uint8_t)next_rand();
			ck_assert(dml_sched_store_put(s, i % 3 ? DML_SCHED_DB_NODES : DML_SCHED_DB_JOBS,
						      (uint64_t)(next_rand() % 64), val, len, err,
						      sizeof(err)) == 0);
		}
		ck_assert_msg(dml_sched_store_commit(s, err, sizeof(err)) == 0, "%s", err);
	}
}

START_TEST(test_sched_store_damage)
{
	struct file f[] = { { .rel = "data.mdb" }, { .rel = "manifest" } };
	struct file old[] = { { .rel = "data.mdb" }, { .rel = "manifest" } };
	struct outcome o;
	struct dml_store *s;
	char err[512];
	uint32_t good, was;

	open_dir("sched");
	ck_assert_msg(dml_sched_store_open(store_dir, MAP, &s, err, sizeof(err)) == 0, "%s", err);
	sched_commits(s, 0, 4);
	dml_store_close(s);
	take(old, 2);
	trial(1, &o);
	ck_assert_msg(o.rc == 0 && !o.signal, "%s", o.err);
	was = o.digest;
	ck_assert_msg(dml_sched_store_open(store_dir, MAP, &s, err, sizeof(err)) == 0, "%s", err);
	sched_commits(s, 4, 12);
	dml_store_close(s);
	take(f, 2);
	trial(1, &o);
	ck_assert_msg(o.rc == 0 && !o.signal, "%s", o.err);
	good = o.digest;
	ck_assert_uint_ne(good, was);
	campaign(1, f, 1, good, "scheduler's store");
	manifest_cases(1, f, 2, 1, good, "scheduler's store");
	older_cases(1, f, old, 2, good, was, "scheduler's store");
	drop(f, 2);
	drop(old, 2);
}
END_TEST

/* The sum is CRC32C: its check value, and what a value's sum covers. */
START_TEST(test_sum_is_crc32c)
{
	uint8_t val[5 + STORE_SUM] = "value";
	MDB_val k = { 3, (void *)"key" }, v = { sizeof(val), val };

	ck_assert_uint_eq(store_crc32c(0, "123456789", 9), 0xe3069283u);
	ck_assert_uint_eq(store_crc32c(store_crc32c(0, "1234", 4), "56789", 5), 0xe3069283u);
	store_sum_seal(&k, val, 5);
	ck_assert_int_eq(store_sum_check(&k, &v), 0);
	ck_assert_uint_eq(v.mv_size, 5);
	v.mv_size = sizeof(val);
	k.mv_data = (void *)"kez";
	ck_assert_int_eq(store_sum_check(&k, &v), -1);
}
END_TEST

/* CRC32C a bit at a time, as its definition says. */
static uint32_t crc32c_bits(uint32_t crc, const uint8_t *p, size_t n)
{
	uint32_t c = ~crc;

	while (n--) {
		c ^= *p++;
		for (int j = 0; j < 8; j++)
			c = c & 1 ? c >> 1 ^ 0x82f63b78u : c >> 1;
	}
	return ~c;
}

/* Long inputs at every alignment and around each length that changes how
 * they are summed (folded, three streams joined, one stream) give the sum
 * of the definition, each way this CPU has, also when copied as they are
 * summed. */
START_TEST(test_sum_long_inputs)
{
	static const size_t lens[] = { 0, 7, 63, 64, 255, 256, 257, 320, 767, 768, 769,
				       4096 + 40, 24575, 24576, 24577, 3 * 24576 + 768 + 9,
				       256 << 10 };
	size_t max = (256 << 10) + 8;
	uint8_t *buf = malloc(max), *copy = malloc(max);
	uint64_t x = 0x9e3779b97f4a7c15u;

	ck_assert_ptr_nonnull(buf);
	ck_assert_ptr_nonnull(copy);
	for (size_t i = 0; i < max; i++) {
		x ^= x << 13, x ^= x >> 7, x ^= x << 17;
		buf[i] = (uint8_t)x;
	}
	for (size_t i = 0; i < sizeof(lens) / sizeof(lens[0]); i++)
		for (size_t off = 0; off < 8; off++) {
			uint32_t want = crc32c_bits(5, buf + off, lens[i]);

			for (int impl = STORE_SUM_FOLD; impl >= STORE_SUM_TABLE; impl--) {
				store_sum_impl(impl);
				ck_assert_uint_eq(store_crc32c(5, buf + off, lens[i]), want);
				memset(copy, 0, max);
				ck_assert_uint_eq(store_crc32c_copy(5, copy + 3, buf + off, lens[i]),
						  want);
				ck_assert_int_eq(memcmp(copy + 3, buf + off, lens[i]), 0);
				ck_assert_uint_eq(copy[3 + lens[i]], 0);
			}
		}
	store_sum_impl(STORE_SUM_FOLD);
	free(buf);
	free(copy);
}
END_TEST

static Suite *damage_suite(void)
{
	Suite *s = suite_create("store_damage");
	TCase *tc = tcase_create("damage");

	dml_test_tmpdir_fixture(tc, "check_store_damage", 1);
	tcase_set_timeout(tc, 240);
	tcase_add_test(tc, test_sum_is_crc32c);
	tcase_add_test(tc, test_sum_long_inputs);
	tcase_add_test(tc, test_server_store_damage);
	tcase_add_test(tc, test_sched_store_damage);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	/* Another seed, to look further: DML_TEST_SEED=n. */
	if (getenv("DML_TEST_SEED"))
		rng ^= strtoull(getenv("DML_TEST_SEED"), NULL, 0) * 0x2545f4914f6cdd1dull;
	return dml_check_run(damage_suite());
}
