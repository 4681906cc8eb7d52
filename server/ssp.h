/*
 * Bounded-staleness clock tracking for one job on one server: each worker's
 * clock, who is in the clock set, and whether a pull at a given clock may be
 * answered now. Also the per-worker push sequence used for exactly-once.
 *
 * Pure bookkeeping (no I/O, no libevent) so the rules are unit-testable. The
 * rule: with bound s >= 0, a pull from a worker at clock c is answered only
 * when at least `expected` workers have joined and every live worker's clock
 * is >= c - s. s < 0 means asynchronous: never wait.
 */
#ifndef DML_SSP_H
#define DML_SSP_H

#include <stddef.h>
#include <stdint.h>

struct dml_ssp_worker {
	uint32_t id;
	uint64_t incarnation;      /* process start of the worker; new = restarted */
	uint64_t clock;
	uint64_t last_seq;         /* highest push seq applied, for dedupe */
	uint64_t logged_seq;       /* the last_seq a batch-mode log holds */
	int live;                  /* counts in the clock set */
	unsigned connections;      /* open connections from this worker */
	uint64_t gone_since_ns;    /* when the last connection closed */
};

struct dml_ssp {
	int64_t staleness;
	uint32_t expected;
	struct dml_ssp_worker *workers;
	size_t nworkers;
	size_t forgotten;          /* workers dropped by dml_ssp_forget */
};

void dml_ssp_init(struct dml_ssp *s, int64_t staleness, uint32_t expected);
void dml_ssp_destroy(struct dml_ssp *s);

/**
 * A worker connected. A new incarnation (the process restarted) resets its
 * push sequence; one that had been dropped from the clock set rejoins at the
 * current minimum clock so it does not hold the others back. The pointer is
 * valid until the next dml_ssp_join.
 */
struct dml_ssp_worker *dml_ssp_join(struct dml_ssp *s, uint32_t id, uint64_t incarnation);
/** Find a worker by id, or NULL. */
struct dml_ssp_worker *dml_ssp_find(struct dml_ssp *s, uint32_t id);
/** One of the worker's connections closed. */
void dml_ssp_disconnect(struct dml_ssp *s, struct dml_ssp_worker *w, uint64_t now_ns);
/** Drop from the clock set the workers gone longer than dead_after_ns. */
int dml_ssp_reap(struct dml_ssp *s, uint64_t now_ns, uint64_t dead_after_ns);
/**
 * The scheduler lost the worker: it leaves the clock set. One that never
 * joined this server while the set is short of its expected count is
 * entered as gone, so the set is complete without it; if it comes back it
 * rejoins at the slowest clock. Returns the worker's entry, or NULL when
 * the set neither knows nor waits for it.
 */
struct dml_ssp_worker *dml_ssp_evict(struct dml_ssp *s, uint32_t id);

/** The worker left cleanly (BYE). */
void dml_ssp_leave(struct dml_ssp *s, struct dml_ssp_worker *w);
/** The worker reports clock; clocks only move forward. */
void dml_ssp_set_clock(struct dml_ssp *s, struct dml_ssp_worker *w, uint64_t clock);
/** Slowest live worker's clock (0 when no worker is live). */
uint64_t dml_ssp_min_clock(const struct dml_ssp *s);
/** Fastest live worker's clock (0 when no worker is live). */
uint64_t dml_ssp_max_clock(const struct dml_ssp *s);
/**
 * Workers that ever joined, the forgotten ones included: what the expected
 * count is measured against (a forgotten worker does not make the set
 * short again).
 */
size_t dml_ssp_joined(const struct dml_ssp *s);

/**
 * Forget the workers out of the clock set (not live) with no connection
 * for at least after_ns, for which keep(w, arg) says 0: their entries go,
 * with their clocks and push sequences. The array is compacted by moving
 * the last entry into each hole: moved(from, to, arg) is called for every
 * move so that indices into the array can follow. Returns how many went.
 */
size_t dml_ssp_forget(struct dml_ssp *s, uint64_t now_ns, uint64_t after_ns,
		      int (*keep)(const struct dml_ssp_worker *w, void *arg),
		      void (*moved)(size_t from, size_t to, void *arg), void *arg);

/** May a pull at clock be answered now? */
int dml_ssp_ready(const struct dml_ssp *s, uint64_t clock);

#endif
