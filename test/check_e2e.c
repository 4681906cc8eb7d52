/*
 * End to end: a whole cluster from config files, driven the way an operator
 * drives it. dml-sched, dml-servers that take their tables from it and
 * dml-workers run as real processes on 127.0.0.1; jobs go in with
 * `dmlctl submit` and are watched with `dmlctl --json status` and `nodes`.
 *
 *   - a job runs to its end on 3 workers while one of them is SIGKILLed in
 *     the middle: its partitions go to the others and the job still
 *     finishes; status and nodes say what happened;
 *   - a server that joins a running job makes the shard map change version,
 *     rows move to it, and the workers follow the new map without a request
 *     failing (a failed request would fail the job);
 *   - pause, resume and stop, and dmlctl's errors for a job that is not
 *     there;
 *   - softmax regression and an MLP learn Fashion-MNIST past accuracy
 *     floors within a short budget, and so do sparse_lr (AUC) and mf (RMSE)
 *     on their synthetic data;
 *   - a server with a gradient log, SIGKILLed mid-job and restarted, replays
 *     its log (and loads its checkpoint) when its map comes again, and the
 *     job ends well: lsq near zero loss, softmax on Fashion-MNIST past its
 *     floor (there the scheduler is killed and restarted too);
 *   - dml-sched SIGKILLed mid-job resumes it from its store, and a worker
 *     that died meanwhile is lost after dead_after_ms.
 */
#include <check.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "test/cluster.h"
#include "proto/dml_error.h"
#include "test/harness.h"
#include "test/json.h"
#include "proto/util.h"

#define WAIT_MS CLUSTER_WAIT_MS
#define POLL_MS CLUSTER_POLL_MS

static int events_contain(const struct jval *job, const char *needle)
{
	const struct jval *ev = json_get(job, "events");

	for (size_t i = 0; ev && i < ev->n; i++)
		if (ev->items[i].type == J_STR && strstr(ev->items[i].str, needle))
			return 1;
	return 0;
}

/* SIGKILL worker id of c and reap it. */
static void kill_worker(struct cluster *c, uint32_t id)
{
	int status;

	kill(c->workers[id], SIGKILL);
	ck_assert_int_eq(dml_test_proc_wait(c->env, c->workers[id], 5000, &status), 0);
	c->workers[id] = 0;
}

/*
 * The ended lsq job in doc lost worker 3 of 3 and went on without it: every
 * one of its 24 partitions with workers 1 and 2, the event said, and its
 * loss came down from the starting ||w_true||^2 to near zero (noise-free
 * synthetic data).
 */
static void check_lost_worker_3(const struct jval *doc)
{
	const struct jval *w3 = cluster_job_worker(doc, 3);
	double parts = 0;

	ck_assert_ptr_nonnull(w3);
	ck_assert_str_eq(jstr(w3, "state"), "dead");
	ck_assert(jnum(w3, "partitions") == 0);
	for (uint32_t id = 1; id <= 2; id++) {
		const struct jval *wk = cluster_job_worker(doc, id);

		ck_assert_ptr_nonnull(wk);
		ck_assert(jnum(wk, "clock") >= 2000);
		parts += jnum(wk, "partitions");
	}
	ck_assert(parts == 24);
	ck_assert_msg(events_contain(doc, "worker 3 lost"), "no event for the lost worker");
	ck_assert_msg(jnum(doc, "loss") >= 0 && jnum(doc, "loss") < 0.1, "loss %g",
		      jnum(doc, "loss"));
}

#define FASHION "/usr/share/datasets/fashion-mnist/"

/*
 * Fashion-MNIST job text: softmax regression (hidden empty) or an MLP with
 * one hidden layer, for `epochs` passes on the local cluster's setting
 * (SSP staleness 2), with the job files' optimizer settings.
 */
static char *fashion_job(const char *name, unsigned hidden, double epochs)
{
	char text[2048], tables[768];

	/* Adam, as conf/jobs/mlp.conf and softmax.conf: momentum's last
	 * evaluation swings by several points under staleness. */
	if (hidden)
		snprintf(tables, sizeof(tables),
			 "[table]\nid = 0\nkeys = %u\nwidth = 785\ninit = uniform\n"
			 "init_scale = 0.0875\noptimizer = adam\nlr = 0.001\nlr_decay = 0.0002\n"
			 "[table]\nid = 1\nkeys = 10\nwidth = %u\ninit = uniform\n"
			 "init_scale = 0.0625\nseed = 2\noptimizer = adam\nlr = 0.001\n"
			 "lr_decay = 0.0002\n", hidden, hidden + 1);
	else
		snprintf(tables, sizeof(tables),
			 "[table]\nid = 0\nkeys = 10\nwidth = 785\noptimizer = adam\n"
			 "lr = 0.001\nlr_decay = 0.0002\n");
	snprintf(text, sizeof(text),
		 "[job]\nname = %s\napp = mlp\n"
		 "data = " FASHION "train-images-idx3-ubyte.gz, " FASHION
		 "train-labels-idx1-ubyte.gz\n"
		 "test_data = " FASHION "t10k-images-idx3-ubyte.gz, " FASHION
		 "t10k-labels-idx1-ubyte.gz\n"
		 "dim = 784\nhidden = %s\nstaleness = 2\nbatch_size = 64\nmax_epochs = %g\n"
		 "metric = accuracy\neval_every = 25\n%s",
		 name, hidden ? "256" : "", epochs, tables);
	return dml_xstrdup(text);
}

/*
 * Submit text as a job file, wait for its end, check that the job saw
 * examples records of data, return its final metric.
 */
static double run_to_end(struct cluster *c, const char *file, const char *text,
			 const char *id, double examples)
{
	struct jval doc;
	char *path;
	pid_t submit;
	int status;
	double metric;

	ck_assert_int_eq(dml_test_env_write(c->env, file, text, 0644, &path), 0);
	submit = cluster_submit_wait(c, path);
	ck_assert_int_eq(dml_test_proc_wait(c->env, submit, 3 * WAIT_MS, &status), 0);
	ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0,
		      "dmlctl submit --wait exited with %d", status);
	cluster_job_status(c, id, &doc);
	ck_assert_str_eq(jstr(&doc, "state"), "done");
	ck_assert_msg(jnum(&doc, "data_examples") == examples, "data_examples %g, not %g",
		      jnum(&doc, "data_examples"), examples);
	metric = jnum(&doc, "metric");
	json_free(&doc);
	free(path);
	return metric;
}

/*
 * Real training: softmax regression and the MLP on Fashion-MNIST, a short
 * budget each on 2 servers and 3 workers, must pass accuracy floors well
 * above chance (0.1) and below what a full run reaches (0.84, 0.88): the
 * floors hold whatever the machine's speed, the budget being in epochs.
 */
START_TEST(test_fashion_mnist_trains_to_its_floors)
{
	struct cluster c;
	char *job;
	double acc;

	if (access(FASHION "train-images-idx3-ubyte.gz", R_OK) != 0) {
		printf("SKIP: test_fashion_mnist_trains_to_its_floors: no Fashion-MNIST in "
		       FASHION " (tools/deps.sh installs dataset-fashion-mnist)\n");
		return;
	}
	cluster_up(&c, 2, 3);
	job = fashion_job("e2e-softmax", 0, 2);
	acc = run_to_end(&c, "softmax.conf", job, "1", 60000);
	free(job);
	printf("softmax regression, 2 epochs: test accuracy %.4f\n", acc);
	ck_assert_msg(acc >= 0.75, "softmax accuracy %.4f below the floor 0.75", acc);
	job = fashion_job("e2e-mlp", 256, 3);
	acc = run_to_end(&c, "mlp.conf", job, "2", 60000);
	free(job);
	printf("MLP 784-256-10, 3 epochs: test accuracy %.4f\n", acc);
	ck_assert_msg(acc >= 0.80, "MLP accuracy %.4f below the floor 0.80", acc);
	cluster_down(&c);
}
END_TEST

START_TEST(test_job_survives_killed_worker)
{
	struct cluster c;
	struct jval doc, nodes;
	static const char *const nodes_args[] = { "nodes", NULL };
	char *job;
	pid_t submit;
	int status;

	cluster_up(&c, 2, 3);
	job = cluster_write_lsq_job(&c, "lsq.conf",
			"[job]\nname = e2e-lsq\napp = lsq\ndata = synthetic\nstaleness = 1\n"
			"batch_size = 32\nmax_clocks = 2000\nexamples = 6000\ndim = 64\n"
			"dead_after_ms = 1000\nseed = 7\n");
	submit = cluster_submit_wait(&c, job);
	cluster_wait_job_clock(&c, "1", 100);
	kill_worker(&c, 3);
	ck_assert_int_eq(dml_test_proc_wait(c.env, submit, WAIT_MS, &status), 0);
	ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0,
		      "dmlctl submit --wait exited with %d", status);

	cluster_job_status(&c, "1", &doc);
	ck_assert_str_eq(jstr(&doc, "state"), "done");
	ck_assert_str_eq(jstr(&doc, "name"), "e2e-lsq");
	ck_assert(jnum(&doc, "clock") >= 2000);
	check_lost_worker_3(&doc);
	json_free(&doc);

	ck_assert_int_eq(cluster_dmlctl_json(&c, nodes_args, &nodes), 0);
	ck_assert_str_eq(jstr(cluster_node(&nodes, "worker", 3), "state"), "dead");
	ck_assert_str_eq(jstr(cluster_node(&nodes, "worker", 1), "state"), "alive");
	json_free(&nodes);
	free(job);
	cluster_down(&c);
}
END_TEST

START_TEST(test_server_joins_running_job)
{
	struct cluster c;
	struct jval doc, map;
	static const char *const map_args[] = { "shardmap", "1", NULL };
	static const char *const stop_args[] = { "stop", "1", NULL };
	char *job;
	double loss_before;
	const struct jval *servers;

	cluster_up(&c, 2, 2);
	job = cluster_write_lsq_job(&c, "long.conf",
			"[job]\nname = e2e-join\napp = lsq\ndata = synthetic\nstaleness = 0\n"
			"batch_size = 32\nmax_clocks = 1000000\nexamples = 4000\ndim = 64\n"
			"seed = 3\n");
	ck_assert_uint_eq(cluster_submit(&c, job), 1);
	cluster_wait_job_clock(&c, "1", 150);
	ck_assert_int_eq(cluster_dmlctl_json(&c, map_args, &map), 0);
	ck_assert(jnum(&map, "version") == 1);
	json_free(&map);
	cluster_job_status(&c, "1", &doc);
	loss_before = jnum(&doc, "loss");
	json_free(&doc);

	cluster_add_server(&c);
	for (int waited = 0;; waited += POLL_MS) {
		ck_assert_msg(waited < WAIT_MS, "the map never reached version 2");
		ck_assert_int_eq(cluster_dmlctl_json(&c, map_args, &map), 0);
		servers = json_get(&map, "servers");
		if (jnum(&map, "version") == 2) {
			ck_assert_ptr_nonnull(servers);
			ck_assert_uint_eq(servers->n, 3);
			json_free(&map);
			break;
		}
		json_free(&map);
		cluster_sleep_ms(POLL_MS);
	}
	/* Training goes on over the new map: clocks advance, the job does not
	 * fail (a request that failed would fail it), the model was moved, not
	 * lost (the loss does not jump back to its starting value). */
	cluster_job_status(&c, "1", &doc);
	{
		double clock = jnum(&doc, "clock");

		json_free(&doc);
		cluster_wait_job_clock(&c, "1", clock + 100);
	}
	cluster_job_status(&c, "1", &doc);
	ck_assert_str_eq(jstr(&doc, "state"), "running");
	ck_assert(jnum(&doc, "shard_map_version") == 2);
	ck_assert_msg(jnum(&doc, "loss") <= loss_before + 0.05, "loss %g after the move, %g before",
		      jnum(&doc, "loss"), loss_before);
	json_free(&doc);

	ck_assert_int_eq(cluster_dmlctl_json(&c, stop_args, &doc), 0);
	json_free(&doc);
	cluster_job_status(&c, "1", &doc);
	ck_assert_str_eq(jstr(&doc, "state"), "stopped");
	json_free(&doc);
	free(job);
	cluster_down(&c);
}
END_TEST

START_TEST(test_pause_resume_and_errors)
{
	struct cluster c;
	struct jval doc;
	struct dml_test_output out;
	static const char *const pause_args[] = { "pause", "1", NULL };
	static const char *const resume_args[] = { "resume", "1", NULL };
	static const char *const missing[] = { "stop", "7", NULL };
	double clock;
	char *job;

	cluster_up(&c, 1, 1);
	job = cluster_write_lsq_job(&c, "pause.conf",
			"[job]\nname = e2e-pause\napp = lsq\ndata = synthetic\nstaleness = 0\n"
			"batch_size = 16\nmax_clocks = 1000000\nexamples = 1000\ndim = 64\n");
	ck_assert_uint_eq(cluster_submit(&c, job), 1);
	cluster_wait_job_clock(&c, "1", 20);
	ck_assert_int_eq(cluster_dmlctl_json(&c, pause_args, &doc), 0);
	json_free(&doc);
	cluster_sleep_ms(500);  /* the worker stops at its next clock boundary */
	cluster_job_status(&c, "1", &doc);
	ck_assert_str_eq(jstr(&doc, "state"), "paused");
	clock = jnum(&doc, "clock");
	json_free(&doc);
	cluster_sleep_ms(600);
	cluster_job_status(&c, "1", &doc);
	ck_assert_msg(jnum(&doc, "clock") <= clock + 1, "clock moved from %g to %g while paused",
		      clock, jnum(&doc, "clock"));
	json_free(&doc);
	ck_assert_int_eq(cluster_dmlctl_json(&c, resume_args, &doc), 0);
	json_free(&doc);
	cluster_wait_job_clock(&c, "1", clock + 20);

	ck_assert_int_eq(dml_test_dmlctl(c.env, c.port, NULL, missing, &out), 0);
	ck_assert_int_eq(out.status, 1);
	ck_assert_msg(strstr(out.err, "no job 7"), "stderr: %s", out.err);
	dml_test_output_free(&out);
	{
		const char *args[] = { "stop", "1", NULL };

		ck_assert_int_eq(cluster_dmlctl_json(&c, args, &doc), 0);
		json_free(&doc);
	}
	free(job);
	cluster_down(&c);
}
END_TEST

/*
 * SIGKILL server idx of c, restart it on its (pinned) port and wait until
 * it recovered from its store: the pushes it says it replayed after a
 * checkpoint of *rows rows.
 */
static unsigned long long crash_and_recover(struct cluster *c, size_t idx,
					    unsigned long long *rows)
{
	static const char *const recovered[] = { ": replayed ", NULL };
	struct dml_test_server *srv = c->servers[idx];
	unsigned long long replayed = 0;
	char *log = NULL, *line;
	size_t from = dml_test_server_log_size(srv);

	dml_test_server_kill(srv);
	ck_assert_int_eq(dml_test_server_restart(srv), 0);
	ck_assert_int_ge(dml_test_server_log_wait(srv, from, recovered, WAIT_MS), 0);
	ck_assert_int_eq(dml_test_file_read(dml_test_server_log(srv), &log), 0);
	line = strstr(log + from, "recovered to clock ");
	ck_assert_ptr_nonnull(line);
	ck_assert_int_eq(sscanf(line, "recovered to clock %*u: replayed %llu pushes after a "
				"checkpoint of %llu rows", &replayed, rows), 2);
	free(log);
	return replayed;
}

/* SIGKILL the scheduler, start it again and wait until it resumed job 1. */
static void scheduler_crash(struct cluster *c)
{
	static const char *const resumed[] = { "resumed 1 job: job 1 running", NULL };
	size_t from = dml_test_server_log_size(c->sched);

	dml_test_server_kill(c->sched);
	ck_assert_int_eq(dml_test_server_restart(c->sched), 0);
	ck_assert_int_ge(dml_test_server_log_wait(c->sched, from, resumed, WAIT_MS), 0);
}

/* Wait for `dmlctl submit --wait` and job 1's end: done, its status in doc. */
static void job_done(struct cluster *c, pid_t submit, struct jval *doc)
{
	int status;

	ck_assert_int_eq(dml_test_proc_wait(c->env, submit, 3 * WAIT_MS, &status), 0);
	ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0,
		      "dmlctl submit --wait exited with %d", status);
	cluster_job_status(c, "1", doc);
	ck_assert_str_eq(jstr(doc, "state"), "done");
}

/* Run the job file at path, crash server idx at clock `at`, wait for the end. */
static unsigned long long crash_mid_job(struct cluster *c, size_t idx, const char *path,
					double at, struct jval *doc, unsigned long long *rows)
{
	unsigned long long replayed;
	pid_t submit;

	ck_assert_int_eq(dml_test_server_pin_port(c->servers[idx]), 0);
	submit = cluster_submit_wait(c, path);
	cluster_wait_job_clock(c, "1", at);
	replayed = crash_and_recover(c, idx, rows);
	job_done(c, submit, doc);
	return replayed;
}

/*
 * A server with a [store] that is SIGKILLed in the middle of a job comes
 * back on its port, replays its log when the scheduler installs the job's
 * map on it again, and the job runs to its end with its loss near zero.
 */
START_TEST(test_server_restarts_from_its_log)
{
	struct cluster c;
	struct jval doc;
	unsigned long long replayed, rows;
	char *job;

	cluster_up_conf(&c, 2, 2, "[store]\npath = @DIR@/store-@NODE@\n");
	job = cluster_write_lsq_job(&c, "durable.conf",
			"[job]\nname = e2e-durable\napp = lsq\ndata = synthetic\nstaleness = 1\n"
			"batch_size = 32\nmax_clocks = 2000\nexamples = 6000\ndim = 64\nseed = 7\n");
	replayed = crash_mid_job(&c, 0, job, 300, &doc, &rows);
	ck_assert_msg(jnum(&doc, "loss") >= 0 && jnum(&doc, "loss") < 0.1, "loss %g",
		      jnum(&doc, "loss"));
	json_free(&doc);
	/* What it replayed is the first 300 clocks' pushes and more. */
	ck_assert_msg(replayed >= 300, "replayed %llu pushes", replayed);
	printf("lsq, server 1 killed at clock 300 or later: replayed %llu pushes, job done\n",
	       replayed);
	free(job);
	cluster_down(&c);
}
END_TEST

/*
 * Rows move to a server that joins a running job (map v2), which logs them
 * as they arrive; killed and restarted, it replays them and the pushes
 * since from its log instead of waiting for rows nobody sends any more.
 */
START_TEST(test_server_restarts_after_rows_moved)
{
	static const char *const settled[] = { "map v2 complete in ", NULL };
	static const char *const held[] = { "the log held them", NULL };
	static const char *const map_args[] = { "shardmap", "1", NULL };
	struct cluster c;
	struct jval doc;
	unsigned long long replayed, rows = 0;
	pid_t submit;
	char *job;

	cluster_up_conf(&c, 2, 2, "[store]\npath = @DIR@/store-@NODE@\n");
	job = cluster_write_lsq_job(&c, "moved.conf",
			"[job]\nname = e2e-moved\napp = lsq\ndata = synthetic\nstaleness = 0\n"
			"batch_size = 32\nmax_clocks = 3000\nexamples = 4000\ndim = 64\nseed = 3\n");
	submit = cluster_submit_wait(&c, job);
	cluster_wait_job_clock(&c, "1", 150);
	cluster_add_server(&c);
	ck_assert_int_eq(dml_test_server_pin_port(c.servers[2]), 0);
	ck_assert_int_ge(dml_test_server_log_wait(c.servers[2], 0, settled, WAIT_MS), 0);
	ck_assert_int_eq(cluster_dmlctl_json(&c, map_args, &doc), 0);
	ck_assert(jnum(&doc, "version") == 2);
	json_free(&doc);
	replayed = crash_and_recover(&c, 2, &rows);
	ck_assert_int_ge(dml_test_server_log_wait(c.servers[2], 0, held, WAIT_MS), 0);
	job_done(&c, submit, &doc);
	ck_assert_msg(jnum(&doc, "loss") >= 0 && jnum(&doc, "loss") < 0.1, "loss %g",
		      jnum(&doc, "loss"));
	json_free(&doc);
	ck_assert_msg(replayed > 0, "server 3 replayed nothing");
	printf("lsq, server 3 killed after rows moved to it: %llu log records replayed "
	       "(after a checkpoint of %llu rows), job done\n", replayed, rows);
	free(job);
	cluster_down(&c);
}
END_TEST

/*
 * A worker and then dml-sched SIGKILLed in the middle of a job (the worker
 * dies before the scheduler can notice): restarted on its store, the scheduler resumes job 1 where it
 * was (the same map and run, so the servers keep their tables and replay
 * nothing; the job's events say so), the worker that never registers
 * again is lost after dead_after_ms and its partitions go to the others,
 * and the job ends done.
 */
START_TEST(test_scheduler_restarts_mid_job)
{
	struct cluster c;
	struct jval doc;
	char *job, *log;
	pid_t submit;

	cluster_up_conf(&c, 2, 3, "[store]\npath = @DIR@/store-@NODE@\n");
	job = cluster_write_lsq_job(&c, "resume.conf",
			"[job]\nname = e2e-resume\napp = lsq\ndata = synthetic\nstaleness = 1\n"
			"batch_size = 32\nmax_clocks = 2000\nexamples = 6000\ndim = 64\n"
			"dead_after_ms = 1000\nseed = 5\n");
	submit = cluster_submit_wait(&c, job);
	cluster_wait_job_clock(&c, "1", 200);
	kill_worker(&c, 3);
	scheduler_crash(&c);
	job_done(&c, submit, &doc);
	check_lost_worker_3(&doc);
	ck_assert_msg(events_contain(&doc, "the scheduler restarted: job taken back"),
		      "no event for the scheduler's restart");
	json_free(&doc);
	for (size_t i = 0; i < c.nservers; i++) {
		ck_assert_int_eq(dml_test_file_read(dml_test_server_log(c.servers[i]), &log), 0);
		ck_assert_msg(!strstr(log, "recovered to clock"), "server %zu installed the job "
			      "afresh:\n%s", i + 1, log);
		free(log);
	}
	printf("lsq, worker 3 and then the scheduler killed at clock 200 or later: job "
	       "resumed and done\n");
	free(job);
	cluster_down(&c);
}
END_TEST

/*
 * Softmax regression on Fashion-MNIST with checkpoints every 256 KiB of log
 * (every 8 pushes or so): server 2 is killed (the restarted server loads a
 * checkpoint and replays the rest), later the scheduler (it resumes the job
 * from its store), and the job still passes its accuracy floor.
 */
START_TEST(test_fashion_mnist_survives_server_and_scheduler_crashes)
{
	struct cluster c;
	struct jval doc;
	unsigned long long replayed, rows = 0;
	char *job, *path;
	pid_t submit;
	double acc;

	if (access(FASHION "train-images-idx3-ubyte.gz", R_OK) != 0) {
		printf("SKIP: test_fashion_mnist_survives_server_and_scheduler_crashes: no "
		       "Fashion-MNIST in " FASHION "\n");
		return;
	}
	cluster_up_conf(&c, 2, 3, "[store]\npath = @DIR@/store-@NODE@\ncheckpoint_log = 256K\n");
	job = fashion_job("e2e-crash", 0, 2);
	ck_assert_int_eq(dml_test_env_write(c.env, "crash.conf", job, 0644, &path), 0);
	ck_assert_int_eq(dml_test_server_pin_port(c.servers[1]), 0);
	submit = cluster_submit_wait(&c, path);
	cluster_wait_job_clock(&c, "1", 150);
	replayed = crash_and_recover(&c, 1, &rows);
	cluster_wait_job_clock(&c, "1", 350);
	scheduler_crash(&c);
	job_done(&c, submit, &doc);
	acc = jnum(&doc, "metric");
	json_free(&doc);
	printf("softmax, server 2 killed at clock 150 or later (a checkpoint of %llu rows and "
	       "%llu pushes replayed), the scheduler at 350 or later: test accuracy %.4f\n",
	       rows, replayed, acc);
	ck_assert_msg(rows > 0, "no checkpoint loaded");
	ck_assert_msg(acc >= 0.75, "softmax accuracy %.4f below the floor 0.75", acc);
	free(path);
	free(job);
	cluster_down(&c);
}
END_TEST

/*
 * The apps on sparse tables, each on 2 servers and 3 workers for a short
 * budget: sparse_lr on synthetic clicks must beat chance (AUC 0.5; the
 * hidden model's is about 0.79), mf on synthetic ratings must come well
 * below the mean's RMSE (about 1.03; the noise's is 0.25).
 */
START_TEST(test_sparse_apps_train)
{
	static const char clicks[] =
		"[job]\nname = e2e-clicks\napp = sparse_lr\ndata = synthetic\n"
		"examples = 200000\ntest_data = synthetic\ndim = 262144\nstaleness = 2\n"
		"batch_size = 256\nmetric = auc\nmax_epochs = 1\neval_every = 100\n"
		"[table]\nid = 0\nkind = sparse\nwidth = 1\noptimizer = adagrad\nlr = 0.05\n";
	static const char ratings[] =
		"[job]\nname = e2e-mf\napp = mf\ndata = synthetic\nexamples = 100000\n"
		"users = 300\nitems = 300\ntest_data = synthetic\nstaleness = 2\n"
		"batch_size = 256\nmetric = rmse\nmax_epochs = 2\neval_every = 100\n"
		"[table]\nid = 0\nkind = sparse\nwidth = 16\ninit = normal\ninit_scale = 0.1\n"
		"optimizer = adagrad\nlr = 0.1\n"
		"[table]\nid = 1\nkind = sparse\nwidth = 16\ninit = normal\ninit_scale = 0.1\n"
		"optimizer = adagrad\nlr = 0.1\n";
	struct cluster c;
	double v;

	cluster_up(&c, 2, 3);
	v = run_to_end(&c, "clicks.conf", clicks, "1", 200000);
	printf("sparse_lr, synthetic clicks, 1 epoch: test AUC %.4f\n", v);
	ck_assert_msg(v >= 0.6, "sparse_lr AUC %.4f below the floor 0.6", v);
	v = run_to_end(&c, "mf.conf", ratings, "2", 100000);
	printf("mf, synthetic ratings, 2 epochs: test RMSE %.4f\n", v);
	ck_assert_msg(v > 0 && v <= 0.5, "mf RMSE %.4f above the ceiling 0.5", v);
	cluster_down(&c);
}
END_TEST

int main(void)
{
	const TTest *const tests[] = {
		test_job_survives_killed_worker,
		test_server_joins_running_job,
		test_pause_resume_and_errors,
		test_fashion_mnist_trains_to_its_floors,
		test_sparse_apps_train,
		test_scheduler_restarts_mid_job,
		test_server_restarts_from_its_log,
		test_fashion_mnist_survives_server_and_scheduler_crashes,
		test_server_restarts_after_rows_moved,
	};

	return cluster_suite_run("e2e", tests, DML_ARRAY_LEN(tests));
}
