/*
 * store_syncer.c - the flushes of a log that commits without waiting for
 * the disk (durability batch, MDB_NOSYNC): a thread of the store's own
 * calls mdb_env_sync after each commit, so that an OS crash or a power
 * loss takes at most the window being committed and the one being
 * flushed, not everything since the last checkpoint, while the server's
 * loop never waits on the disk.
 *
 * A failed flush is kept and returned by the next commit, which the
 * server treats as a failed commit: it stops acknowledging.
 *
 * Must never: block the committing thread on the disk.
 */
#include <lmdb.h>
#include <pthread.h>
#include <stdlib.h>

#include "store/store_internal.h"
#include "proto/util.h"

struct store_syncer {
	pthread_t thread;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	MDB_env *env;
	int want;                  /* a commit since the last flush began */
	int stop;
	int rc;                    /* the first failed flush (an errno), 0: none */
};

static void *syncer_main(void *arg)
{
	struct store_syncer *y = arg;
	int rc;

	pthread_mutex_lock(&y->mu);
	for (;;) {
		while (!y->want && !y->stop)
			pthread_cond_wait(&y->cv, &y->mu);
		if (!y->want && y->stop)
			break;
		y->want = 0;
		pthread_mutex_unlock(&y->mu);
		rc = mdb_env_sync(y->env, 1);
		pthread_mutex_lock(&y->mu);
		if (rc && !y->rc)
			y->rc = rc;
	}
	pthread_mutex_unlock(&y->mu);
	return NULL;
}

int store_syncer_start(struct dml_store *s)
{
	struct store_syncer *y = dml_xcalloc(1, sizeof(*y));
	int rc;

	y->env = s->env;
	pthread_mutex_init(&y->mu, NULL);
	pthread_cond_init(&y->cv, NULL);
	rc = pthread_create(&y->thread, NULL, syncer_main, y);
	if (rc) {
		pthread_cond_destroy(&y->cv);
		pthread_mutex_destroy(&y->mu);
		free(y);
		return rc;
	}
	s->syncer = y;
	return 0;
}

void store_syncer_kick(struct dml_store *s)
{
	struct store_syncer *y = s->syncer;

	if (!y)
		return;
	pthread_mutex_lock(&y->mu);
	y->want = 1;
	pthread_cond_signal(&y->cv);
	pthread_mutex_unlock(&y->mu);
}

int store_syncer_error(struct dml_store *s)
{
	struct store_syncer *y = s->syncer;
	int rc;

	if (!y)
		return 0;
	pthread_mutex_lock(&y->mu);
	rc = y->rc;
	pthread_mutex_unlock(&y->mu);
	return rc;
}

void store_syncer_stop(struct dml_store *s)
{
	struct store_syncer *y = s->syncer;

	if (!y)
		return;
	pthread_mutex_lock(&y->mu);
	y->stop = 1;
	pthread_cond_signal(&y->cv);
	pthread_mutex_unlock(&y->mu);
	pthread_join(y->thread, NULL);
	pthread_cond_destroy(&y->cv);
	pthread_mutex_destroy(&y->mu);
	free(y);
	s->syncer = NULL;
}
