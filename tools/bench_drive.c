/*
 * dml-bench's timing core (see bench.h): request latencies and their
 * quantiles, and the windowed driver that keeps a number of requests in
 * flight on each of several connections, one thread each, for a warm-up
 * and then a counted time. pushpull's libdml path and its raw-TCP baseline
 * (bench_raw.c) are both timed by this one code.
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

struct bench_thread {
	const struct bench_driver *drv;
	unsigned window;
	struct bench_window *counted;
	uint64_t done;
	struct bench_lat lat;
	int rc;
	int started;
	pthread_t tid;
};

static int bench_thread_loop(struct bench_thread *t)
{
	const struct bench_driver *d = t->drv;
	struct bench_window *w = t->counted;
	uint64_t *sent = dml_xcalloc(t->window, sizeof(*sent));
	unsigned head = 0, inflight = 0;
	int rc = 0;

	for (;;) {
		uint64_t now = dml_now_ns();

		if (inflight < t->window && now < bench_window_end(w, now) &&
		    !bench_interrupted()) {
			unsigned slot = (head + inflight) % t->window;

			sent[slot] = now;
			rc = d->submit(d->ctx, slot);
			if (rc)
				break;
			inflight++;
			continue;
		}
		if (inflight == 0)
			break;
		rc = d->complete(d->ctx, head);
		if (rc)
			break;
		now = dml_now_ns();
		if (now >= w->begin_ns && now < atomic_load(&w->end_ns)) {
			t->done++;
			atomic_fetch_add(&w->done, 1);
			bench_lat_add(&t->lat, now - sent[head]);
		}
		head = (head + 1) % t->window;
		inflight--;
	}
	free(sent);
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

int bench_run_drivers(const struct bench_driver *drivers, unsigned conns,
		      unsigned window, const struct bench_plan *plan,
		      uint64_t value_bytes, struct bench_result *res)
{
	struct bench_window counted;
	struct bench_thread *th;
	struct bench_lat all;
	uint64_t end, stop, done = 0;
	int rc = 0;

	if (!drivers || !plan || !res || conns == 0 || window == 0)
		return DML_EINVAL;
	th = dml_xcalloc(conns, sizeof(*th));
	/* Every connection's window should turn over once while counted. */
	bench_window_init(&counted, plan, (uint64_t)window * conns);
	for (unsigned i = 0; i < conns; i++) {
		th[i].drv = &drivers[i];
		th[i].window = window;
		th[i].counted = &counted;
		bench_lat_init(&th[i].lat);
		th[i].started =
			pthread_create(&th[i].tid, NULL, bench_thread_main, &th[i]) == 0;
		if (!th[i].started)
			th[i].rc = DML_EIO;
	}
	bench_lat_init(&all);
	for (unsigned i = 0; i < conns; i++) {
		if (th[i].started)
			pthread_join(th[i].tid, NULL);
		if (th[i].rc && !rc)
			rc = th[i].rc;
		done += th[i].done;
		bench_lat_append(&all, &th[i].lat);
		bench_lat_destroy(&th[i].lat);
	}
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
	free(th);
	if (rc == 0 && bench_interrupted())
		rc = DML_ECLOSED;
	return rc;
}
