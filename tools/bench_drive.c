/*
 * dml-bench's timing core (see bench.h): request latencies and their
 * quantiles, and the windowed driver that keeps a number of requests in
 * flight on each of several connections for a warm-up and then a counted
 * time, from one or more threads that each drive their share of the
 * connections round robin. pushpull's libdml path and its raw-TCP
 * baseline (bench_raw.c) are both timed by this one code.
 *
 * It must never outlive its threads: every thread it starts is joined
 * before bench_run_drivers() returns, on success, error or interruption.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "tools/bench.h"
#include "worker/dml.h"
#include "proto/util.h"

/* ---- statistics ------------------------------------------------------ */

void bench_lat_init(struct bench_lat *l)
{
	memset(l, 0, sizeof(*l));
}

void bench_lat_destroy(struct bench_lat *l)
{
	free(l->ns);
	bench_lat_init(l);
}

void bench_lat_add(struct bench_lat *l, uint64_t ns)
{
	if (l->n == l->cap) {
		l->cap = l->cap ? l->cap * 2 : 4096;
		l->ns = dml_xrealloc(l->ns, l->cap * sizeof(*l->ns));
	}
	l->ns[l->n++] = ns;
}

void bench_lat_append(struct bench_lat *dst, const struct bench_lat *src)
{
	for (size_t i = 0; i < src->n; i++)
		bench_lat_add(dst, src->ns[i]);
}

static int bench_u64_cmp(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return (x > y) - (x < y);
}

double bench_lat_quantile_us(struct bench_lat *l, double q)
{
	size_t rank;

	if (l->n == 0)
		return 0;
	qsort(l->ns, l->n, sizeof(*l->ns), bench_u64_cmp);
	if (q < 0)
		q = 0;
	if (q > 1)
		q = 1;
	/* Nearest rank: the smallest sample with at least q of them at or below. */
	rank = (size_t)(q * (double)l->n + 0.999999);
	if (rank == 0)
		rank = 1;
	if (rank > l->n)
		rank = l->n;
	return (double)l->ns[rank - 1] / 1e3;
}

/* ---- the windowed driver --------------------------------------------- */

/*
 * The counted window all threads of one measurement share. It closes at
 * end_ns unless fewer than min_done requests were counted by then: a slow
 * configuration (16 MiB x 32 in flight) may complete nothing in --seconds,
 * so its window is pushed back, step by step, up to cap_ns.
 */
struct bench_window {
	uint64_t begin_ns;
	_Atomic uint64_t end_ns;
	uint64_t step_ns, cap_ns;
	_Atomic uint64_t done;
	uint64_t min_done;
};

/* When the counted window closes, as seen at `now`. */
static uint64_t bench_window_end(struct bench_window *w, uint64_t now)
{
	uint64_t end = atomic_load(&w->end_ns), later;

	if (now < end || end >= w->cap_ns || atomic_load(&w->done) >= w->min_done)
		return end;
	later = now + w->step_ns < w->cap_ns ? now + w->step_ns : w->cap_ns;
	/* On a race the other thread's extension stands and lands in end. */
	if (atomic_compare_exchange_strong(&w->end_ns, &end, later))
		end = later;
	return end;
}

/* One connection's window as its thread keeps it. */
struct bench_slots {
	const struct bench_driver *drv;
	uint64_t *sent; /* submit time of each slot */
	unsigned head, inflight;
};

/* A client thread and the connections it drives, one event loop's worth. */
struct bench_thread {
	struct bench_slots *conns;
	unsigned nconns;
	unsigned window;
	struct bench_window *counted;
	uint64_t done;
	struct bench_lat lat;
	int rc;
	int started;
	pthread_t tid;
};

/* Fill c's window while the counted time lasts; 1 when it submitted any. */
static int bench_slots_fill(struct bench_thread *t, struct bench_slots *c, int *rc)
{
	int any = 0;

	while (c->inflight < t->window && *rc == 0) {
		uint64_t now = dml_now_ns();
		unsigned slot = (c->head + c->inflight) % t->window;

		if (now >= bench_window_end(t->counted, now) || bench_interrupted())
			break;
		c->sent[slot] = now;
		*rc = c->drv->submit(c->drv->ctx, slot);
		c->inflight += *rc == 0;
		any = 1;
	}
	return any;
}

/* Complete c's oldest request and count it if it ended in the counted time. */
static int bench_slots_complete(struct bench_thread *t, struct bench_slots *c)
{
	struct bench_window *w = t->counted;
	int rc = c->drv->complete(c->drv->ctx, c->head);
	uint64_t now = dml_now_ns();

	if (rc)
		return rc;
	if (now >= w->begin_ns && now < atomic_load(&w->end_ns)) {
		t->done++;
		atomic_fetch_add(&w->done, 1);
		bench_lat_add(&t->lat, now - c->sent[c->head]);
	}
	c->head = (c->head + 1) % t->window;
	c->inflight--;
	return 0;
}

/*
 * Round robin over the thread's connections: top each window up, then wait
 * for its oldest request, so every connection keeps `window` in flight while
 * the thread blocks on one of them (the others' replies queue meanwhile).
 */
static int bench_thread_loop(struct bench_thread *t)
{
	int rc = 0, busy = 1;

	while (busy && rc == 0) {
		busy = 0;
		for (unsigned i = 0; i < t->nconns && rc == 0; i++) {
			struct bench_slots *c = &t->conns[i];

			busy |= bench_slots_fill(t, c, &rc);
			if (rc == 0 && c->inflight > 0) {
				rc = bench_slots_complete(t, c);
				busy = 1;
			}
		}
	}
	return rc;
}

static void *bench_thread_main(void *arg)
{
	struct bench_thread *t = arg;

	t->rc = bench_thread_loop(t);
	return NULL;
}

static uint64_t bench_seconds_ns(double s)
{
	return (uint64_t)(s * 1e9);
}

static void bench_window_init(struct bench_window *w, const struct bench_plan *plan,
			      uint64_t min_done)
{
	uint64_t len = bench_seconds_ns(plan->seconds);

	/* Starting the threads is part of the warm-up. */
	w->begin_ns = dml_now_ns() + bench_seconds_ns(plan->warmup_s);
	atomic_init(&w->end_ns, w->begin_ns + len);
	w->step_ns = len / 10 + 1;
	w->cap_ns = w->begin_ns + BENCH_MAX_STRETCH * len;
	atomic_init(&w->done, 0);
	w->min_done = min_done;
}

/* Deal connection i to thread i % nth, as bench_thread_of() says. */
static struct bench_thread *bench_threads_new(const struct bench_driver *drivers,
					      unsigned conns, unsigned nth, unsigned window,
					      struct bench_window *counted)
{
	struct bench_thread *th = dml_xcalloc(nth, sizeof(*th));

	for (unsigned i = 0; i < nth; i++) {
		th[i].conns = dml_xcalloc(conns / nth + 1, sizeof(*th[i].conns));
		th[i].window = window;
		th[i].counted = counted;
		bench_lat_init(&th[i].lat);
	}
	for (unsigned i = 0; i < conns; i++) {
		struct bench_thread *t = &th[bench_thread_of(i, nth)];
		struct bench_slots *c = &t->conns[t->nconns++];

		c->drv = &drivers[i];
		c->sent = dml_xcalloc(window, sizeof(*c->sent));
	}
	return th;
}

/* Join the threads, gather their counts and latencies, free them. */
static int bench_threads_join(struct bench_thread *th, unsigned nth, uint64_t *done,
			      struct bench_lat *all)
{
	int rc = 0;

	for (unsigned i = 0; i < nth; i++) {
		if (th[i].started)
			pthread_join(th[i].tid, NULL);
		if (th[i].rc && !rc)
			rc = th[i].rc;
		*done += th[i].done;
		bench_lat_append(all, &th[i].lat);
		bench_lat_destroy(&th[i].lat);
		for (unsigned j = 0; j < th[i].nconns; j++)
			free(th[i].conns[j].sent);
		free(th[i].conns);
	}
	free(th);
	return rc;
}

unsigned bench_thread_of(unsigned conn, unsigned threads)
{
	return threads ? conn % threads : conn;
}

int bench_run_drivers(const struct bench_driver *drivers, unsigned conns,
		      unsigned threads, unsigned window, const struct bench_plan *plan,
		      uint64_t value_bytes, struct bench_result *res)
{
	unsigned nth = threads == 0 || threads > conns ? conns : threads;
	struct bench_window counted;
	struct bench_thread *th;
	struct bench_lat all;
	uint64_t end, stop, done = 0;
	int rc;

	if (!drivers || !plan || !res || conns == 0 || window == 0)
		return DML_EINVAL;
	/* Every connection's window should turn over once while counted. */
	bench_window_init(&counted, plan, (uint64_t)window * conns);
	th = bench_threads_new(drivers, conns, nth, window, &counted);
	for (unsigned i = 0; i < nth; i++) {
		th[i].started =
			pthread_create(&th[i].tid, NULL, bench_thread_main, &th[i]) == 0;
		if (!th[i].started)
			th[i].rc = DML_EIO;
	}
	bench_lat_init(&all);
	rc = bench_threads_join(th, nth, &done, &all);
	stop = dml_now_ns();
	end = atomic_load(&counted.end_ns);
	if (stop > end)
		stop = end;
	memset(res, 0, sizeof(*res));
	res->requests = done;
	if (stop > counted.begin_ns)
		res->seconds = (double)(stop - counted.begin_ns) / 1e9;
	if (res->seconds > 0) {
		res->rps = (double)done / res->seconds;
		res->gbps = res->rps * (double)value_bytes / 1e9;
	}
	res->p50_us = bench_lat_quantile_us(&all, 0.50);
	res->p99_us = bench_lat_quantile_us(&all, 0.99);
	bench_lat_destroy(&all);
	if (rc == 0 && bench_interrupted())
		rc = DML_ECLOSED;
	return rc;
}
