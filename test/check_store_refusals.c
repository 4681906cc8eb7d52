/*
 * Damaged stores against the daemons themselves: a dml-server's store
 * (written by a worker's pushes, with checkpoints) and a dml-sched's (with
 * a server registered in it) are stopped, damaged, and the daemon started
 * again on them: each must exit with status 2 and say which file is wrong
 * and how, where before a short file ended in SIGBUS and a missing or
 * older one was taken silently.
 *
 *   - data.mdb cut in half, a checkpoint file short by one page;
 *   - data.mdb emptied or deleted, ckpt/ deleted;
 *   - the log's data.mdb, or the checkpoints', put back from a copy taken
 *     earlier (a scheduler's data.mdb too).
 *
 * Byte flips, zeroed pages and the other cuts are check_store_damage's, on
 * the same code in process.
 */
#define _GNU_SOURCE
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "test/check_run.h"
#include "worker/dml.h"
#include "proto/dml_error.h"
#include "test/harness.h"

#define WAIT_MS 20000

static const char tables[] =
	"[table]\nid = 0\nkind = dense\nwidth = 4\nkeys = 4096\noptimizer = sgd\nlr = 1\n";

/* ---- files ------------------------------------------------------------------ */

struct copy {
	uint8_t *data;
	size_t len;
};

static char *at(struct dml_test_env *env, const char *rel)
{
	char *p;

	ck_assert_int_gt(asprintf(&p, "%s/%s", dml_test_env_dir(env), rel), 0);
	return p;
}

static void copy_take(struct dml_test_env *env, const char *rel, struct copy *c)
{
	char *p = at(env, rel);
	FILE *f = fopen(p, "rb");
	struct stat st;

	ck_assert_msg(f != NULL, "%s", p);
	ck_assert_int_eq(fstat(fileno(f), &st), 0);
	c->len = (size_t)st.st_size;
	c->data = malloc(c->len + 1);
	ck_assert_ptr_nonnull(c->data);
	ck_assert_uint_eq(fread(c->data, 1, c->len, f), c->len);
	fclose(f);
	free(p);
}

/* Write c (its first len bytes) as rel, making its folder. */
static void copy_put(struct dml_test_env *env, const char *rel, const struct copy *c, size_t len)
{
	char *p = at(env, rel);
	FILE *f;

	*strrchr(p, '/') = '\0';
	mkdir(p, 0700);
	p[strlen(p)] = '/';
	f = fopen(p, "wb");
	ck_assert_msg(f != NULL, "%s", p);
	if (len)
		ck_assert_uint_eq(fwrite(c->data, 1, len, f), len);
	ck_assert_int_eq(fclose(f), 0);
	free(p);
}

static void remove_file(struct dml_test_env *env, const char *rel)
{
	char *p = at(env, rel);

	unlink(p);
	free(p);
}

/* ---- the daemons ---------------------------------------------------------------- */

/* Run bin on the config text to its end: status 2 and want (and want2) in stderr. */
static void expect_refusal(struct dml_test_env *env, const char *bin_rel, const char *text,
			   const char *what, const char *want, const char *want2)
{
	struct dml_test_output out;
	char *path, *bin;

	ck_assert_int_eq(dml_test_env_write(env, "refused.conf", text, 0644, &path), 0);
	dml_test_bin(bin_rel, &bin);
	{
		char *argv[] = { bin, (char *)"-c", path, NULL };

		ck_assert_int_eq(dml_test_run(env, argv, WAIT_MS, &out), 0);
	}
	ck_assert_msg(out.status == 2 && strstr(out.err, want) &&
		      (!want2 || strstr(out.err, want2)),
		      "%s: status %d (want 2), stderr lacks '%s' or '%s':\n%s", what, out.status,
		      want, want2 ? want2 : "", out.err);
	printf("check_store_refusals: %s: %s", what, strstr(out.err, want));
	dml_test_output_free(&out);
	free(bin);
	free(path);
}

/* The config text of a server with a [store] in the environment's store/. */
static char *server_text(struct dml_test_env *env, struct dml_test_server_conf *sc,
			 const char *checkpoint_log)
{
	char *store, *text;

	ck_assert_int_gt(asprintf(&store, "[store]\npath = %s/store\ndurability = sync\n"
				  "checkpoint_log = %s\n", dml_test_env_dir(env), checkpoint_log), 0);
	memset(sc, 0, sizeof(*sc));
	sc->node_id = 1;
	sc->staleness = -1;
	sc->tables = tables;
	sc->extra = store;
	dml_test_server_conf_text(env, sc, &text, NULL);
	return text;
}

/* Start a server on the store, push rounds of pushes, stop it. */
static void pushes(struct dml_test_env *env, const char *checkpoint_log, int rounds)
{
	struct dml_test_server_conf sc;
	struct dml_test_server *s;
	dml_opts_t *o;
	dml_t *d;
	char *text = server_text(env, &sc, checkpoint_log);
	static float v[4096 * 4];

	free(text);
	ck_assert_int_eq(dml_test_server_start(env, &sc, &s), 0);
	free((char *)sc.extra);
	ck_assert_int_eq(dml_test_client_opts(env, &s, 1, 1, &o), 0);
	ck_assert_int_eq(dml_connect(o, &d), 0);
	dml_opts_free(o);
	for (int r = 0; r < rounds; r++) {
		dml_handle_t h;

		for (size_t i = 0; i < 4096 * 4; i++)
			v[i] = (float)((r + (int)i) % 7);
		uint64_t begin = (uint64_t)(r * 64) % 4000;

		ck_assert_int_eq(dml_push_range(d, 0, begin, begin + 96, v, &h), 0);
		ck_assert_int_eq(dml_wait(d, h), 0);
	}
	dml_close(d);
	ck_assert_int_eq(dml_test_server_stop(s, WAIT_MS), 0);
}

START_TEST(test_server_store_refused)
{
	struct dml_test_env *env;
	struct dml_test_server_conf sc;
	struct copy log_old, ck_old, log_new, ck_new;
	char *text;

	ck_assert_int_eq(dml_test_env_new(&env), 0);
	/* A checkpoint every 16 KiB of log: several in each run of pushes. */
	pushes(env, "16K", 40);
	copy_take(env, "store/ckpt/data.mdb", &ck_old);
	pushes(env, "16K", 40);
	copy_take(env, "store/data.mdb", &log_new);
	copy_take(env, "store/ckpt/data.mdb", &ck_new);
	text = server_text(env, &sc, "16K");
	free((char *)sc.extra);

	copy_put(env, "store/data.mdb", &log_new, log_new.len / 2);
	expect_refusal(env, "server/dml-server", text, "data.mdb cut in half",
		       "store/data.mdb: truncated or damaged", NULL);
	copy_put(env, "store/data.mdb", &log_new, log_new.len);
	copy_put(env, "store/ckpt/data.mdb", &ck_new, ck_new.len - 4096);
	expect_refusal(env, "server/dml-server", text, "a checkpoint file short by a page",
		       "store/ckpt/data.mdb: truncated or damaged", NULL);
	copy_put(env, "store/ckpt/data.mdb", &ck_new, ck_new.len);
	copy_put(env, "store/data.mdb", &log_new, 0);
	expect_refusal(env, "server/dml-server", text, "data.mdb emptied",
		       "store/data.mdb: missing or empty", "store/manifest");
	remove_file(env, "store/data.mdb");
	expect_refusal(env, "server/dml-server", text, "data.mdb deleted",
		       "store/data.mdb: missing or empty", NULL);
	copy_put(env, "store/data.mdb", &log_new, log_new.len);
	remove_file(env, "store/ckpt/data.mdb");
	remove_file(env, "store/ckpt/lock.mdb");
	{
		char *p = at(env, "store/ckpt");

		ck_assert_int_eq(rmdir(p), 0);
		free(p);
	}
	expect_refusal(env, "server/dml-server", text, "ckpt/ deleted",
		       "store/ckpt/data.mdb: missing or empty", NULL);
	copy_put(env, "store/ckpt/data.mdb", &ck_old, ck_old.len);
	expect_refusal(env, "server/dml-server", text, "the checkpoints an older copy",
		       "store/ckpt/data.mdb: older than", NULL);
	free(text);
	free(log_new.data);
	free(ck_new.data);
	free(ck_old.data);

	/* The log an older copy: without checkpoints, so that it is the log alone. */
	remove_file(env, "store/ckpt/data.mdb");
	remove_file(env, "store/data.mdb");
	remove_file(env, "store/manifest");
	pushes(env, "0", 20);
	copy_take(env, "store/data.mdb", &log_old);
	pushes(env, "0", 20);
	text = server_text(env, &sc, "0");
	free((char *)sc.extra);
	copy_put(env, "store/data.mdb", &log_old, log_old.len);
	expect_refusal(env, "server/dml-server", text, "the log an older copy",
		       "store/data.mdb: older than", NULL);
	free(text);
	free(log_old.data);
	dml_test_env_free(env);
}
END_TEST

/* A scheduler with a store; a server registers with it (one commit at least). */
static char *sched_text(struct dml_test_env *env)
{
	char *text;

	ck_assert_int_gt(asprintf(&text, "[sched]\nlisten = 127.0.0.1:0\ncluster = dml\n"
				  "secret_file = %s\n[store]\npath = %s/sched-store\n",
				  dml_test_env_secret(env), dml_test_env_dir(env)), 0);
	return text;
}

static void sched_run(struct dml_test_env *env)
{
	static const char *const joined[] = { "registered", NULL };
	struct dml_test_sched_conf cc = { 0 };
	struct dml_test_server_conf sc = { 0 };
	struct dml_test_server *sched, *s;
	char *store;

	ck_assert_int_gt(asprintf(&store, "[store]\npath = %s/sched-store\n",
				  dml_test_env_dir(env)), 0);
	cc.extra = store;
	ck_assert_int_eq(dml_test_sched_start(env, &cc, &sched), 0);
	sc.node_id = 1;
	sc.server_extra = dml_test_scheduler_line(sched);
	ck_assert_int_eq(dml_test_server_start(env, &sc, &s), 0);
	ck_assert_int_ge(dml_test_server_log_wait(sched, 0, joined, WAIT_MS), 0);
	ck_assert_int_eq(dml_test_server_stop(s, WAIT_MS), 0);
	ck_assert_int_eq(dml_test_server_stop(sched, WAIT_MS), 0);
	free((char *)sc.server_extra);
	free(store);
}

START_TEST(test_sched_store_refused)
{
	struct dml_test_env *env;
	struct copy old, now;
	char *text;

	ck_assert_int_eq(dml_test_env_new(&env), 0);
	sched_run(env);
	copy_take(env, "sched-store/data.mdb", &old);
	sched_run(env);
	copy_take(env, "sched-store/data.mdb", &now);
	text = sched_text(env);

	copy_put(env, "sched-store/data.mdb", &now, now.len / 2);
	expect_refusal(env, "sched/dml-sched", text, "the scheduler's data.mdb cut in half",
		       "sched-store/data.mdb: truncated or damaged", NULL);
	copy_put(env, "sched-store/data.mdb", &now, 0);
	expect_refusal(env, "sched/dml-sched", text, "the scheduler's data.mdb emptied",
		       "sched-store/data.mdb: missing or empty", NULL);
	remove_file(env, "sched-store/data.mdb");
	expect_refusal(env, "sched/dml-sched", text, "the scheduler's data.mdb deleted",
		       "sched-store/data.mdb: missing or empty", NULL);
	copy_put(env, "sched-store/data.mdb", &old, old.len);
	expect_refusal(env, "sched/dml-sched", text, "the scheduler's data.mdb an older copy",
		       "sched-store/data.mdb: older than", NULL);
	free(text);
	free(old.data);
	free(now.data);
	dml_test_env_free(env);
}
END_TEST

static Suite *refusals_suite(void)
{
	Suite *s = suite_create("store_refusals");
	TCase *tc = tcase_create("daemons");

	tcase_set_timeout(tc, 240);
	tcase_add_test(tc, test_server_store_refused);
	tcase_add_test(tc, test_sched_store_refused);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return dml_check_run(refusals_suite());
}
