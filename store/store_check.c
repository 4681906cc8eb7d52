/*
 * store_check.c - what a store's files must pass before the store is
 * used: data.mdb's size against what LMDB's own meta pages say it holds
 * (a short file would fault when its map is read), then a walk of every
 * page a read finds, every value's checksum (the log's records and the
 * checkpoints' chunks are checked where they are read instead) and the
 * order of the log's and checkpoints' keys, in a child process, so that a
 * file damaged in a way LMDB does not notice ends in a refusal naming it,
 * not in a signal or an assertion in the daemon.
 *
 * Must never: map a file before its size was checked, open the
 * environment for writing, or let the child's end (whatever it is) go
 * unreported.
 */
#define _GNU_SOURCE /* strsignal */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <lmdb.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "proto/dml_error.h"
#include "store/store_internal.h"
#include "proto/util.h"

/* LMDB 0.9's file layout (mdb.c): a page header of 16 bytes, then MDB_meta. */
enum {
	PG_HDR = 16,
	MM_MAGIC = PG_HDR + 0, MM_VERSION = PG_HDR + 4, MM_DBS = PG_HDR + 24,
	MD_SIZE = 48, MD_DEPTH = 6, MD_ROOT = 40,
	MM_LAST_PG = MM_DBS + 2 * MD_SIZE, MM_TXNID = MM_LAST_PG + 8, MM_END = MM_TXNID + 8,
};
#define LMDB_MAGIC 0xBEEFC0DEu
#define LMDB_DATA_VERSION 1u
#define LMDB_P_INVALID UINT64_MAX

int store_bad_sum(const struct dml_store *s, const char *what, const MDB_val *k, char *err,
		  size_t errlen)
{
	uint64_t key = k->mv_size >= 8 ? store_get_be64(k->mv_data) : 0;

	return dml_fail(DML_ECONF, err, errlen, "%s/data.mdb: %s: the value of key %s%" PRIu64
			" does not match its checksum", s->path, what,
			k->mv_size >= 8 ? "" : "(short) ", key);
}

/* One meta page (at p, of the file's first bytes) as LMDB reads it; -1: not valid. */
static int meta_read(const uint8_t *p, uint64_t *last_pg, uint64_t *txnid, uint64_t roots[2])
{
	if (dml_load_le32(p + MM_MAGIC) != LMDB_MAGIC ||
	    dml_load_le32(p + MM_VERSION) != LMDB_DATA_VERSION)
		return -1;
	*last_pg = dml_load_le64(p + MM_LAST_PG);
	*txnid = dml_load_le64(p + MM_TXNID);
	for (int i = 0; i < 2; i++)
		roots[i] = dml_load_le64(p + MM_DBS + i * MD_SIZE + MD_ROOT);
	return 0;
}

int store_file_check(const char *dir, uint64_t *size, uint64_t *last_pg, char *err,
		     size_t errlen)
{
	char path[4096];
	uint8_t head[MM_END], head1[MM_END];
	uint64_t lp[2], txn[2], roots[2][2];
	struct stat st;
	uint32_t psize;
	int fd, ok[2];

	*size = 0;
	*last_pg = 0;
	if ((size_t)snprintf(path, sizeof(path), "%s/data.mdb", dir) >= sizeof(path))
		return dml_fail(DML_EINVAL, err, errlen, "%s: path too long", dir);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return errno == ENOENT ? 0 : dml_fail(DML_EIO, err, errlen, "%s: %s", path,
						      strerror(errno));
	if (fstat(fd, &st) != 0) {
		close(fd);
		return dml_fail(DML_EIO, err, errlen, "%s: %s", path, strerror(errno));
	}
	*size = (uint64_t)st.st_size;
	if (st.st_size == 0) {
		close(fd);
		return 0;
	}
	if (pread(fd, head, sizeof(head), 0) != (ssize_t)sizeof(head)) {
		close(fd);
		return dml_fail(DML_ECONF, err, errlen, "%s: damaged: %" PRIu64 " bytes, shorter "
				"than LMDB's first page", path, *size);
	}
	psize = dml_load_le32(head + MM_DBS);
	ok[0] = meta_read(head, &lp[0], &txn[0], roots[0]) == 0;
	if (!ok[0] || psize < 512 || psize > 65536 || (psize & (psize - 1))) {
		close(fd);
		return dml_fail(DML_ECONF, err, errlen, "%s: damaged: its first meta page is not "
				"LMDB's", path);
	}
	ok[1] = pread(fd, head1, sizeof(head1), psize) == (ssize_t)sizeof(head1) &&
		meta_read(head1, &lp[1], &txn[1], roots[1]) == 0;
	close(fd);
	for (int i = 0; i < 2; i++) {
		if (!ok[i])
			continue;
		if (lp[i] >= UINT64_MAX / psize || (lp[i] + 1) * psize > *size)
			return dml_fail(DML_ECONF, err, errlen, "%s: truncated or damaged: %" PRIu64
					" bytes, its meta page %d says it holds %" PRIu64 " pages of "
					"%" PRIu32, path, *size, i, lp[i] + 1, psize);
		for (int d = 0; d < 2; d++)
			if (roots[i][d] != LMDB_P_INVALID && roots[i][d] > lp[i])
				return dml_fail(DML_ECONF, err, errlen, "%s: damaged: meta page %d "
						"names a root page past its last", path, i);
	}
	/* LMDB reads the meta of the newest transaction. */
	*last_pg = ok[1] && txn[1] > txn[0] ? lp[1] : lp[0];
	return 0;
}

/* ---- the walk (in the child) ---------------------------------------------- */

struct walk {
	const char *path;         /* data.mdb's */
	char *msg;
	size_t len;
	uint64_t last_pg;
};

static int say(struct walk *w, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static int say(struct walk *w, const char *fmt, ...)
{
	va_list ap;
	int n = snprintf(w->msg, w->len, "%s: damaged: ", w->path);

	va_start(ap, fmt);
	if (n >= 0 && (size_t)n < w->len)
		vsnprintf(w->msg + n, w->len - (size_t)n, fmt, ap);
	va_end(ap);
	return -1;
}

static int lmdb_said(struct walk *w, const char *what, int rc)
{
	return say(w, "%s: %s", what, mdb_strerror(rc));
}

/* The free list's page numbers must lie within the file. */
static int walk_free(struct walk *w, MDB_txn *txn)
{
	MDB_cursor *c;
	MDB_val k, v;
	int rc = mdb_cursor_open(txn, 0, &c);

	if (rc)
		return lmdb_said(w, "free list", rc);
	while ((rc = mdb_cursor_get(c, &k, &v, MDB_NEXT)) == 0) {
		const uint8_t *p = v.mv_data;
		uint64_t n;

		if (v.mv_size < 8 || v.mv_size % 8)
			break;
		n = dml_load_le64(p);
		if (n != v.mv_size / 8 - 1)
			break;
		for (uint64_t i = 1; i <= n; i++)
			if (dml_load_le64(p + 8 * i) > w->last_pg || dml_load_le64(p + 8 * i) < 2)
				goto bad;
	}
	mdb_cursor_close(c);
	return rc == MDB_NOTFOUND ? 0 : rc ? lmdb_said(w, "free list", rc) :
	       say(w, "free list: an entry of %zu bytes", v.mv_size);
bad:
	mdb_cursor_close(c);
	return say(w, "free list: a page past the end of the file");
}

/* Read v's first and last bytes, where the compiler cannot leave it out. */
static void touch(const MDB_val *v)
{
	const volatile uint8_t *p = v->mv_data;

	(void)p[0];
	(void)p[v->mv_size - 1];
}

/* Every entry of the database name: in key order, its sum (but for the
 * log and the checkpoints), and its count. */
static int walk_db(struct walk *w, MDB_txn *txn, const char *name)
{
	uint8_t prev[512];
	size_t prev_len = 0;
	uint64_t n = 0, id = 0, chunk = 0, lsn = 0;
	MDB_dbi dbi;
	MDB_cursor *c;
	MDB_stat st;
	MDB_val k, v;
	int log = !strcmp(name, "log"), ck = !strcmp(name, "ckpt");
	int rc = mdb_dbi_open(txn, name, 0, &dbi);

	if (!rc)
		rc = mdb_stat(txn, dbi, &st);
	if (!rc)
		rc = mdb_cursor_open(txn, dbi, &c);
	if (rc)
		return lmdb_said(w, name, rc);
	while ((rc = mdb_cursor_get(c, &k, &v, MDB_NEXT)) == 0) {
		size_t m = k.mv_size < prev_len ? k.mv_size : prev_len;
		int cmp = memcmp(k.mv_data, prev, m);

		if (n && (cmp < 0 || (cmp == 0 && k.mv_size <= prev_len)))
			break;
		if (k.mv_size > sizeof(prev))
			break;
		memcpy(prev, k.mv_data, k.mv_size);
		prev_len = k.mv_size;
		n++;
		/* The log's records and the checkpoints' chunks, the bulk of a
		 * store, have their sums checked where they are read (replay,
		 * a checkpoint's load); here only their first and last bytes
		 * are: a value lies in consecutive pages, so one whose page
		 * number was damaged faults here, in the child, not there. */
		if ((log || ck) && v.mv_size)
			touch(&v);
		else if (store_sum_check(&k, &v)) {
			mdb_cursor_close(c);
			return say(w, "%s: the value of entry %" PRIu64 " does not match its "
				   "checksum", name, n);
		}
		if (log) {
			/* Checkpoints delete from the front: the rest is contiguous. */
			if (k.mv_size != 8 || (lsn && store_get_be64(k.mv_data) != lsn + 1))
				break;
			lsn = store_get_be64(k.mv_data);
		} else if (ck) {
			uint64_t kid, kno;

			if (k.mv_size != 16)
				break;
			kid = store_get_be64(k.mv_data);
			kno = store_get_be64((uint8_t *)k.mv_data + 8);
			if (kid != id)
				chunk = 0;
			id = kid;
			if (kno != ++chunk)
				break;
		}
	}
	mdb_cursor_close(c);
	if (rc == MDB_NOTFOUND && n == st.ms_entries)
		return 0;
	if (rc && rc != MDB_NOTFOUND)
		return lmdb_said(w, name, rc);
	if (rc == MDB_NOTFOUND)
		return say(w, "%s: %" PRIu64 " entries found, %zu counted", name, n,
			   st.ms_entries);
	return say(w, "%s: entry %" PRIu64 " is out of order", name, n + 1);
}

/* The named databases (the main one's keys), each walked. */
static int walk_all(struct walk *w, MDB_txn *txn)
{
	static const char *const known[] = { "meta", "log", "dedupe", "ckpt", "snaps", "jobs",
					     "nodes" };
	MDB_cursor *c;
	MDB_val k, v;
	MDB_dbi main;
	int rc = mdb_dbi_open(txn, NULL, 0, &main);
	int found[7] = { 0 };

	if (!rc)
		rc = mdb_cursor_open(txn, main, &c);
	if (rc)
		return lmdb_said(w, "databases", rc);
	while ((rc = mdb_cursor_get(c, &k, &v, MDB_NEXT)) == 0) {
		size_t i;

		for (i = 0; i < 7; i++)
			if (k.mv_size == strlen(known[i]) && !memcmp(k.mv_data, known[i], k.mv_size))
				break;
		if (i == 7) {
			mdb_cursor_close(c);
			return say(w, "a database of an unknown name");
		}
		found[i] = 1;
	}
	mdb_cursor_close(c);
	if (rc != MDB_NOTFOUND)
		return lmdb_said(w, "databases", rc);
	for (size_t i = 0; i < 7; i++)
		if (found[i] && walk_db(w, txn, known[i]))
			return -1;
	return walk_free(w, txn);
}

/* The child's pipe: an assertion of LMDB's ends the child with its message. */
static int child_fd = -1;
static const char *child_path;

static void child_assert(MDB_env *env, const char *msg)
{
	char buf[512];
	int n = snprintf(buf, sizeof(buf), "%s: damaged: LMDB found a page it cannot read: %s",
			 child_path, msg);

	(void)env;
	if (n > 0 && write(child_fd, buf, (size_t)n < sizeof(buf) ? (size_t)n : sizeof(buf) - 1))
		_exit(1);
	_exit(1);
}

static int walk_env(struct walk *w, const char *dir)
{
	MDB_env *env;
	MDB_txn *txn;
	int rc = mdb_env_create(&env);

	if (rc)
		return lmdb_said(w, "open", rc);
	child_path = w->path;
	/* LMDB built with its assertions on: theirs say more than a signal. */
	mdb_env_set_assert(env, child_assert);
	rc = mdb_env_set_maxdbs(env, 8);
	if (!rc)
		rc = mdb_env_open(env, dir, MDB_RDONLY | MDB_NOLOCK | MDB_NOTLS, 0600);
	if (!rc)
		rc = mdb_txn_begin(env, NULL, MDB_RDONLY, &txn);
	if (rc) {
		mdb_env_close(env);
		return lmdb_said(w, "open", rc);
	}
	rc = walk_all(w, txn);
	mdb_txn_abort(txn);
	mdb_env_close(env);
	return rc;
}

int store_verify(const char *dir, uint64_t last_pg, char *err, size_t errlen)
{
	char path[4096], msg[512] = "";
	struct walk w = { path, msg, sizeof(msg), last_pg };
	int fds[2], status;
	ssize_t got = 0, r;
	pid_t pid;

	snprintf(path, sizeof(path), "%s/data.mdb", dir);
	if (pipe2(fds, O_CLOEXEC) != 0)
		return dml_fail(DML_EIO, err, errlen, "%s: pipe: %s", path, strerror(errno));
	pid = fork();
	if (pid < 0) {
		close(fds[0]);
		close(fds[1]);
		return dml_fail(DML_EIO, err, errlen, "%s: fork: %s", path, strerror(errno));
	}
	if (pid == 0) {
		/* Signals end the child as they would the daemon, for the parent to see. */
		signal(SIGBUS, SIG_DFL);
		signal(SIGSEGV, SIG_DFL);
		signal(SIGABRT, SIG_DFL);
		close(fds[0]);
		child_fd = fds[1];
		if (walk_env(&w, dir) == 0)
			_exit(0);
		if (write(fds[1], msg, strlen(msg)) < 0)
			_exit(3);
		_exit(1);
	}
	close(fds[1]);
	while (got < (ssize_t)sizeof(msg) - 1 &&
	       ((r = read(fds[0], msg + got, sizeof(msg) - 1 - (size_t)got)) > 0 ||
		(r < 0 && errno == EINTR)))
		got += r > 0 ? r : 0;
	msg[got] = '\0';
	close(fds[0]);
	while (waitpid(pid, &status, 0) < 0)
		if (errno != EINTR)
			return dml_fail(DML_EIO, err, errlen, "%s: wait: %s", path, strerror(errno));
	if (WIFEXITED(status) && WEXITSTATUS(status) == 0)
		return 0;
	if (msg[0])
		return dml_fail(DML_ECONF, err, errlen, "%s", msg);
	if (WIFSIGNALED(status))
		return dml_fail(DML_ECONF, err, errlen, "%s: damaged: reading it ended on signal "
				"%d (%s)", path, WTERMSIG(status), strsignal(WTERMSIG(status)));
	return dml_fail(DML_ECONF, err, errlen, "%s: damaged: reading it ended with status %d",
			path, WIFEXITED(status) ? WEXITSTATUS(status) : -1);
}

int store_files_check(struct dml_store *s, char *err, size_t errlen)
{
	uint64_t size, last_pg;
	int rc = store_manifest_load(s, err, errlen);

	if (!rc)
		rc = store_file_check(s->path, &size, &last_pg, err, errlen);
	return rc || !size ? rc : store_verify(s->path, last_pg, err, errlen);
}
