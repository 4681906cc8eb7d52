/*
 * dml-aggregator's internals: the daemon's state, its worker sessions, the
 * per-owner FIFO of push entries, the owner connections and the zone pull
 * cache. Shared by server/aggregator*.c only; the aggregator links proto/
 * alone and holds no tables and no store.
 *
 * Ownership: the daemon owns its owners; an owner owns its queue of entries
 * and its upstream pulls; an entry owns its contributions' values. A
 * contribution or a pull waiter points at the session that asked, or NULL
 * once that session is gone (its answer is then dropped).
 */
#ifndef DML_AGGREGATOR_INTERNAL_H
#define DML_AGGREGATOR_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include <event2/event.h>

#include "proto/codec.h"
#include "proto/conf.h"
#include "proto/conn.h"
#include "proto/listen.h"
#include "proto/metrics.h"
#include "proto/peers.h"

#include "server/aggregator_conf.h"

/* Counters the request paths bump; read at scrape time. */
struct dml_agg_stats {
	uint64_t pushes_in, pushes_forwarded, pushes_resent_in;
	uint64_t pulls_in, pulls_forwarded, pulls_ahead, cache_hits;
	uint64_t clocks_in, clocks_alone;   /* workers' CLOCKs; sent on their own */
	uint64_t splits, retries, relayed_errors, refused;
	uint64_t let_pass;        /* open heads moved behind closed entries */
	uint64_t bytes_in_closed, bytes_out_closed;
	uint64_t forward_value_bytes, forward_sent_bytes; /* sums' values: floats, sent */
};

struct dml_agg;
struct agg_owner;

/* A worker connected to the aggregator. */
struct agg_session {
	struct dml_peer peer;     /* first: the peers list walks sessions */
	struct dml_agg *agg;
	uint32_t worker;          /* node id from its HELLO */
	uint64_t incarnation;
	int ready;
	int held;                 /* a push waits for room (max_pending) */
	int pushed;               /* max_clock is set: */
	uint64_t max_clock;       /* the latest clock its pushes named */
};

/* One worker's push inside an entry. */
struct agg_contrib {
	uint32_t worker;
	uint64_t incarnation;
	uint64_t seq;
	float weight;             /* 0 means 1 */
	struct agg_session *sess; /* who to ACK; NULL once gone */
	uint64_t request_id;
	float *values;            /* its own values (dense or sparse), owned */
	uint64_t clock;           /* the worker's CLOCK after it (0: none) */
	int clock_unsent;         /* it came once the push was on its way */
};

/*
 * A queue entry: pushes of one (job, table, range or keys, width, clock),
 * all decoded to floats. Sparse entries hold one contribution and keys.
 */
struct agg_entry {
	struct agg_entry *next;
	struct agg_owner *owner;
	uint64_t pos;             /* rises along the queue (rule 2) */
	uint32_t job, table, width;
	int dense;
	uint64_t key_begin, key_end;
	uint32_t num_keys;
	uint64_t *keys;           /* sparse only, owned */
	uint64_t clock;
	size_t nvalues;           /* floats per contribution */
	struct agg_contrib *c;
	size_t nc, cap;
	int closed;               /* no more contributions (rule 3) */
	uint64_t upstream_rid;    /* request id of the forwarded PUSH, 0: not sent */
	struct event *window;     /* closes it window_ms after it opened */
	struct dml_codec codec;   /* Meta.forward_codec of its pushes */
	int clocked;              /* Meta.pace said its job is clocked */
	/* Once first sent, until answered (aggregator_codec.c): */
	uint8_t *payload;         /* keys, then the sum as it goes */
	size_t payload_len;
	Dml__DType dtype;
	struct dml_residual *residual; /* lossy: the residual it changed */
	float *undo;              /* that residual's rows before */
	size_t *at;               /* where they live */
};

/* A PULL sent to an owner, and whoever waits for its answer. */
struct agg_waiter {
	struct agg_session *sess;
	uint64_t request_id;
	uint64_t clock;
	Dml__DType dtype;
};

struct agg_cache;
struct agg_clock;
struct agg_residual;
struct dml_residual;

struct agg_pull {
	struct agg_pull *next;
	struct agg_cache *cache;  /* dense: the cache slot it fills; sparse: NULL */
	Dml__Meta *meta;          /* the upstream request as sent (owned) */
	uint8_t *payload;         /* sparse keys (owned) */
	size_t payload_len;
	struct agg_waiter *w;
	size_t nw, wcap;
	int deferred;             /* a delta pull waiting for its slot's pull in flight */
	char delta_codec[32];     /* Meta.delta_codec points here */
};

/* Zone cache slot: one dense range of one owner's table. */
struct agg_cache {
	struct agg_cache *next;
	uint32_t job, table, width;
	uint64_t key_begin, key_end;
	struct dml_codec up;      /* how the owner sends it: the workers' forward codec */
	int delta;                /* up is topk: delta pulls, one at a time */
	uint64_t version;         /* delta: the owner's version of values */
	int valid;
	uint64_t clock;           /* requester clock the values were fetched for */
	uint64_t min_clock, held_us;
	float *values;
	size_t nvalues;
};

/* One owning server: its connection, push queue, pulls and cache. */
struct agg_owner {
	struct dml_agg *agg;
	char *addr;               /* as listed in servers */
	char host[256];
	uint16_t port;
	struct dml_conn *conn;
	int ready;
	uint32_t backoff_ms;      /* reconnect */
	int logged_err;           /* the last dial failure logged, not every retry */
	struct event *reconnect;
	uint32_t retry_ms;        /* DML_EAGAIN on the head: 20 ms doubling to 1 s */
	struct event *retry;
	int retry_wait;
	struct agg_entry *head, *tail;
	uint64_t next_pos;
	struct agg_pull *pulls;   /* sent or waiting for the connection */
	struct agg_cache *caches;
	struct agg_residual *residuals; /* error feedback of lossy sums */
	struct agg_clock *clocks; /* clocks sent on their own (aggregator_clocks.c) */
	size_t nclocks;
	uint32_t codecs;          /* dtypes its WELCOME offers, bit per dtype */
	int takes_clocks;         /* its WELCOME set relays_clocks */
	uint64_t next_rid;
};

struct dml_agg {
	const struct dml_agg_conf *conf;
	struct event_base *base;
	struct dml_conn_conf conn_conf;     /* accepted workers */
	struct dml_conn_conf up_conf;       /* owner connections */
	uint8_t *secret;
	size_t secret_len;
	struct dml_peers peers;
	struct dml_listener *listener;
	uint16_t port;
	struct agg_owner *owners;
	size_t nowners;
	size_t nsessions;                   /* ready worker sessions */
	uint64_t pending_bytes;             /* push values held, all owners */
	struct dml_agg_stats st;
	struct dml_metrics *metrics;
	struct dml_histogram *fanin;
	struct dml_sched_link *sched;       /* NULL without a scheduler */
	Dml__AggregatorStats beat_stats;    /* what the last heartbeat carried */
	int stopping;
};

/* aggregator.c */
int dml_agg_new(const struct dml_agg_conf *conf, struct event_base *base,
		struct dml_agg **out);
void dml_agg_shutdown(struct dml_agg *a);
void dml_agg_free(struct dml_agg *a);
/** ERROR to a session still there (NULL: dropped). */
void agg_reply_error(struct agg_session *s, uint64_t rid, int code, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
/** An owner's ERROR (code, message, map_version) relayed to a session still there. */
void agg_relay_error(struct agg_session *s, uint64_t rid, const Dml__Meta *err);
/** ACK to a session still there. */
void agg_reply_ack(struct agg_session *s, uint64_t rid);
/** Sessions held for room in the queues read on once there is room. */
void agg_release_held(struct dml_agg *a);
/** Every owner is connected and takes workers' clocks (relays_clocks). */
int agg_owners_take_clocks(const struct dml_agg *a);
/** The owner named by Meta.owner, or NULL. */
struct agg_owner *agg_owner_find(struct dml_agg *a, const char *addr);

/* aggregator_queue.c */
/** Queue a worker's push (values decoded to floats, owned from here). */
int agg_queue_push(struct agg_owner *o, struct agg_session *s, const Dml__Meta *m,
		   const uint64_t *keys, float *values, size_t nvalues);
/** A resend of a pending (worker, seq): point its ACK at rid. 1 if so. */
int agg_queue_resend(struct agg_owner *o, struct agg_session *s, const Dml__Meta *m);
/** Forward what the head of line allows. */
void agg_queue_pump(struct agg_owner *o);
/** The owner answered the forwarded head (ACK or ERROR). */
void agg_queue_answer(struct agg_owner *o, const Dml__Meta *m);
/** The connection dropped: the head goes again on the next. */
void agg_queue_unsend(struct agg_owner *o);
/** Sessions changed: open entries every session joined close now. */
void agg_queue_sessions_changed(struct dml_agg *a);
/** A session is gone: its contributions stay, unanswered. */
void agg_queue_forget(struct agg_owner *o, const struct agg_session *s);
void agg_queue_free(struct agg_owner *o);

/* aggregator_codec.c */
/** Build e's payload (keys, the sum in its codec) unless it has one; 0 or ENOMEM. */
int agg_entry_encode(struct agg_owner *o, struct agg_entry *e);
/** The owner did not apply e: its residual back as before, the payload gone. */
void agg_entry_unencode(struct agg_entry *e);
/** The payload and what undoes it freed (the owner applied it, or e is gone). */
void agg_entry_payload_free(struct agg_entry *e);
/** Metrics collector: the L2 norm of each (job, table)'s residuals, all owners. */
void agg_residuals_collect(struct dml_metrics_scrape *sc, void *arg);
void agg_residuals_free(struct agg_owner *o);

/* aggregator_clocks.c */
/** Worker s's CLOCK for owner o: with its last push queued there, or alone. */
void agg_clock_request(struct agg_owner *o, struct agg_session *s, uint64_t clock);
/** e was answered (applied or not): its clocks not delivered with it go alone. */
void agg_clocks_answered(struct agg_owner *o, const struct agg_entry *e, int applied);
/** A new connection to o: the clocks sent alone go again. */
void agg_clocks_resend(struct agg_owner *o);
void agg_clocks_free(struct agg_owner *o);

/* aggregator_upstream.c */
int agg_owners_start(struct dml_agg *a);
void agg_owners_free(struct dml_agg *a);
/** Send a frame to the owner if its connection is ready; 0 or an error. */
int agg_owner_send(struct agg_owner *o, Dml__Meta *m, const void *payload, size_t len);
uint64_t agg_owner_rid(struct agg_owner *o);
/** Arm ev to fire in ms milliseconds. */
void agg_timer_arm(struct event *ev, uint32_t ms);
/** Arm ev after *ms, which grows: first_ms, doubling up to max_ms. */
void agg_backoff_arm(struct event *ev, uint32_t *ms, uint32_t first_ms, uint32_t max_ms);

/* aggregator_pull.c */
void agg_pull_request(struct agg_owner *o, struct agg_session *s, const Dml__Meta *m,
		      const uint8_t *payload, size_t len);
/** A PULL_REPLY or ERROR for rid; 1 if it was a pull's. */
int agg_pull_answer(struct agg_owner *o, const Dml__Meta *m, const uint8_t *payload,
		    size_t len);
/** Send every pull not answered yet again (new connection). */
void agg_pull_resend(struct agg_owner *o);
void agg_pull_forget(struct agg_owner *o, const struct agg_session *s);
void agg_pull_free(struct agg_owner *o);

/* aggregator_metrics.c */
int agg_metrics_start(struct dml_agg *a);
/** Bytes of whole frames in and out, workers and owners, since it started. */
void agg_traffic(const struct dml_agg *a, uint64_t *in, uint64_t *out);

/* aggregator_sched.c: registration with dml-sched (a no-op without one). */
int agg_sched_start(struct dml_agg *a);
void agg_sched_stop(struct dml_agg *a);
void agg_sched_free(struct dml_agg *a);

#endif
