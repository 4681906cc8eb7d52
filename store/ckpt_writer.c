/*
 * ckpt_writer.c - the thread that writes checkpoints (ckpt_writer.h).
 *
 * A queue of jobs and one of results under one mutex; the thread waits on
 * a condition for jobs, and writes a byte to a pipe for each result, which
 * the loop's event watches. drain waits on a second condition for the job
 * queue to empty.
 */
#define _GNU_SOURCE /* pipe2 */
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "store/ckpt_writer.h"
#include "proto/dml_error.h"
#include "proto/util.h"

struct dml_ckpt_snapshot {
	struct dml_ckpt_rows *chunks;
	size_t n, cap;
	void **blocks;
	size_t nblocks, capblocks;
	uint64_t rows;
};

struct job {
	struct job *next;
	int drop;
	uint64_t tag, clock;
	struct dml_ckpt_snapshot *sn;
	struct dml_ckpt_info info;
};

struct done {
	struct done *next;
	struct dml_ckpt_result r;
};

struct dml_ckpt_writer {
	struct dml_store *store;
	pthread_t thread;
	pthread_mutex_t mu;
	pthread_cond_t work, idle;
	struct job *head, *tail;   /* waiting */
	int busy;                  /* the thread runs a job */
	size_t writes;             /* writes waiting or running */
	struct done *dhead, *dtail;
	int stopping;
	int pipe[2];
};

/* ---- snapshots ------------------------------------------------------------- */

struct dml_ckpt_snapshot *dml_ckpt_snapshot_new(void)
{
	return dml_xcalloc(1, sizeof(struct dml_ckpt_snapshot));
}

void dml_ckpt_snapshot_add(struct dml_ckpt_snapshot *sn, const struct dml_ckpt_rows *r)
{
	if (sn->n == sn->cap) {
		sn->cap = sn->cap ? 2 * sn->cap : 16;
		sn->chunks = dml_xrealloc(sn->chunks, sn->cap * sizeof(*sn->chunks));
	}
	sn->chunks[sn->n++] = *r;
	sn->rows += r->n;
}

void dml_ckpt_snapshot_keep(struct dml_ckpt_snapshot *sn, void *block)
{
	if (sn->nblocks == sn->capblocks) {
		sn->capblocks = sn->capblocks ? 2 * sn->capblocks : 8;
		sn->blocks = dml_xrealloc(sn->blocks, sn->capblocks * sizeof(*sn->blocks));
	}
	sn->blocks[sn->nblocks++] = block;
}

uint64_t dml_ckpt_snapshot_rows(const struct dml_ckpt_snapshot *sn)
{
	return sn->rows;
}

void dml_ckpt_snapshot_free(struct dml_ckpt_snapshot *sn)
{
	if (!sn)
		return;
	for (size_t i = 0; i < sn->nblocks; i++)
		free(sn->blocks[i]);
	free(sn->blocks);
	free(sn->chunks);
	free(sn);
}

/* ---- the thread ------------------------------------------------------------- */

static double now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static void run_write(struct dml_ckpt_writer *w, struct job *j, struct dml_ckpt_result *r)
{
	double t0 = now_ms();
	int rc = dml_store_checkpoint_begin(w->store, &j->info, r->err, sizeof(r->err));

	for (size_t i = 0; i < j->sn->n && !rc; i++)
		rc = dml_store_checkpoint_add(w->store, &j->sn->chunks[i], r->err,
					      sizeof(r->err));
	r->bytes = dml_store_checkpoint_bytes(w->store);
	if (!rc)
		rc = dml_store_checkpoint_end(w->store, 1, r->err, sizeof(r->err));
	else
		dml_store_checkpoint_end(w->store, 0, NULL, 0);
	r->rc = rc;
	r->rows = j->sn->rows;
	r->ms = now_ms() - t0;
}

static void *thread_main(void *arg)
{
	struct dml_ckpt_writer *w = arg;

	pthread_mutex_lock(&w->mu);
	for (;;) {
		struct job *j;
		struct done *d;
		char one = 1;
		ssize_t wr;

		while (!w->head && !w->stopping)
			pthread_cond_wait(&w->work, &w->mu);
		if (!w->head)
			break;
		j = w->head;
		w->head = j->next;
		if (!w->head)
			w->tail = NULL;
		w->busy = 1;
		pthread_mutex_unlock(&w->mu);

		d = dml_xcalloc(1, sizeof(*d));
		d->r.drop = j->drop;
		d->r.tag = j->tag;
		d->r.clock = j->clock;
		if (j->drop)
			d->r.rc = dml_store_snapshot_drop(w->store, j->clock, d->r.err,
							  sizeof(d->r.err));
		else
			run_write(w, j, &d->r);
		dml_ckpt_snapshot_free(j->sn);

		pthread_mutex_lock(&w->mu);
		if (!j->drop)
			w->writes--;
		free(j);
		w->busy = 0;
		if (w->dtail)
			w->dtail->next = d;
		else
			w->dhead = d;
		w->dtail = d;
		/* The loop takes every result at each wakeup, so a full pipe
		 * (EAGAIN) loses nothing. */
		wr = write(w->pipe[1], &one, 1);
		(void)wr;
		if (!w->head)
			pthread_cond_broadcast(&w->idle);
	}
	pthread_mutex_unlock(&w->mu);
	return NULL;
}

/* ---- the loop's side ----------------------------------------------------------- */

/* What start made, the thread gone. */
static void writer_free(struct dml_ckpt_writer *w)
{
	close(w->pipe[0]);
	close(w->pipe[1]);
	pthread_mutex_destroy(&w->mu);
	pthread_cond_destroy(&w->work);
	pthread_cond_destroy(&w->idle);
	free(w);
}

int dml_ckpt_writer_start(struct dml_store *s, struct dml_ckpt_writer **out)
{
	struct dml_ckpt_writer *w = dml_xcalloc(1, sizeof(*w));

	*out = NULL;
	w->store = s;
	if (pipe2(w->pipe, O_CLOEXEC | O_NONBLOCK) != 0) {
		free(w);
		return DML_EIO;
	}
	pthread_mutex_init(&w->mu, NULL);
	pthread_cond_init(&w->work, NULL);
	pthread_cond_init(&w->idle, NULL);
	if (pthread_create(&w->thread, NULL, thread_main, w) != 0) {
		writer_free(w);
		return DML_EIO;
	}
	*out = w;
	return 0;
}

int dml_ckpt_writer_fd(const struct dml_ckpt_writer *w)
{
	return w->pipe[0];
}

static void enqueue(struct dml_ckpt_writer *w, struct job *j)
{
	pthread_mutex_lock(&w->mu);
	if (w->tail)
		w->tail->next = j;
	else
		w->head = j;
	w->tail = j;
	if (!j->drop)
		w->writes++;
	pthread_cond_signal(&w->work);
	pthread_mutex_unlock(&w->mu);
}

void dml_ckpt_writer_write(struct dml_ckpt_writer *w, struct dml_ckpt_snapshot *sn,
			   const struct dml_ckpt_info *info, uint64_t tag)
{
	struct job *j = dml_xcalloc(1, sizeof(*j));

	j->sn = sn;
	j->info = *info;
	j->tag = tag;
	j->clock = info->clock;
	enqueue(w, j);
}

void dml_ckpt_writer_drop(struct dml_ckpt_writer *w, uint64_t clock, uint64_t tag)
{
	struct job *j = dml_xcalloc(1, sizeof(*j));

	j->drop = 1;
	j->clock = clock;
	j->tag = tag;
	enqueue(w, j);
}

size_t dml_ckpt_writer_writes(struct dml_ckpt_writer *w)
{
	size_t n;

	pthread_mutex_lock(&w->mu);
	n = w->writes;
	pthread_mutex_unlock(&w->mu);
	return n;
}

int dml_ckpt_writer_result(struct dml_ckpt_writer *w, struct dml_ckpt_result *out)
{
	struct done *d;
	char buf[64];

	while (read(w->pipe[0], buf, sizeof(buf)) > 0)
		;
	pthread_mutex_lock(&w->mu);
	d = w->dhead;
	if (d) {
		w->dhead = d->next;
		if (!w->dhead)
			w->dtail = NULL;
	}
	pthread_mutex_unlock(&w->mu);
	if (!d)
		return 0;
	*out = d->r;
	free(d);
	return 1;
}

void dml_ckpt_writer_drain(struct dml_ckpt_writer *w)
{
	pthread_mutex_lock(&w->mu);
	while (w->head || w->busy)
		pthread_cond_wait(&w->idle, &w->mu);
	pthread_mutex_unlock(&w->mu);
}

void dml_ckpt_writer_stop(struct dml_ckpt_writer *w)
{
	if (!w)
		return;
	pthread_mutex_lock(&w->mu);
	w->stopping = 1;
	pthread_cond_signal(&w->work);
	pthread_mutex_unlock(&w->mu);
	pthread_join(w->thread, NULL);
	while (w->dhead) {
		struct done *d = w->dhead;

		w->dhead = d->next;
		free(d);
	}
	writer_free(w);
}
