/*
 * dml-server's metrics (metrics.h): what is registered and how each value
 * is read. The request paths only bump integers of struct stats and feed
 * three histograms; everything here runs at scrape time, on the loop.
 */
#include <stdio.h>

#include "proto/dml_error.h"
#include "proto/listen.h"
#include "proto/log.h"
#include "server/server_internal.h"
#include "proto/util.h"

static const char *const req_names[REQ_KINDS] = {
	"push", "pull", "clock", "stats", "heartbeat", "bye"
};

/* Read at scrape time only, on the loop: nothing here is on a request path. */

static double metric_output_queued(void *arg)
{
	const struct dml_server *s = arg;
	double total = 0;

	for (const struct dml_peer *x = s->peers.head; x; x = x->next)
		total += (double)dml_conn_output_pending(x->conn);
	return total;
}

static double metric_workers_live(void *arg)
{
	const struct dml_server *s = arg;
	size_t live = 0;

	for (size_t i = 0; i < s->ssp.nworkers; i++)
		live += s->ssp.workers[i].live != 0;
	return (double)live;
}

static double metric_min_clock(void *arg)
{
	const struct dml_server *s = arg;

	return (double)dml_ssp_min_clock(&s->ssp);
}

static void collect_worker_clocks(struct dml_metrics_scrape *sc, void *arg)
{
	const struct dml_server *s = arg;
	char id[16];

	for (size_t i = 0; i < s->ssp.nworkers; i++) {
		snprintf(id, sizeof(id), "%u", s->ssp.workers[i].id);
		dml_metrics_emit(sc, id, (double)s->ssp.workers[i].clock);
	}
}

static void collect_traffic(struct dml_metrics_scrape *sc, void *arg)
{
	uint64_t in, out;

	dml_server_traffic(arg, &in, &out);
	dml_metrics_emit(sc, "in", (double)in);
	dml_metrics_emit(sc, "out", (double)out);
}

static void emit_per_table(struct dml_metrics_scrape *sc, const struct dml_server *s,
			   uint64_t (*get)(const struct dml_table *))
{
	char id[16];

	for (size_t i = 0; i < s->ntables; i++) {
		snprintf(id, sizeof(id), "%u", s->tables[i].info.id);
		dml_metrics_emit(sc, id, (double)get(s->tables[i].table));
	}
}

static void collect_table_rows(struct dml_metrics_scrape *sc, void *arg)
{
	emit_per_table(sc, arg, dml_table_rows);
}

static void collect_table_bytes(struct dml_metrics_scrape *sc, void *arg)
{
	emit_per_table(sc, arg, dml_table_bytes);
}

#define COUNTER DML_METRIC_COUNTER
#define GAUGE DML_METRIC_GAUGE

/* name, help, type, label (bounds only for histograms, below) */
static const struct dml_metric_desc
	m_requests = { "dml_server_requests_total", "Requests received, by type", COUNTER,
		       "type", NULL, 0 },
	m_duplicates = { "dml_server_push_duplicates_total",
			 "Resent pushes acknowledged without applying them again", COUNTER,
			 NULL, NULL, 0 },
	m_stale = { "dml_server_pushes_stale_scaled_total",
		    "Pushes applied scaled by 1 / (1 + staleness) (stale_scaling = inverse)",
		    COUNTER, NULL, NULL, 0 },
	m_deferred = { "dml_server_pushes_deferred_total",
		       "Pushes held for their clock's BSP step (bsp_step = clock)", COUNTER,
		       NULL, NULL, 0 },
	m_steps = { "dml_server_bsp_steps_total",
		    "BSP steps: a clock's pushes applied as one optimizer step per table",
		    COUNTER, NULL, NULL, 0 },
	m_nonfinite = { "dml_server_pushes_nonfinite_total",
			"Pushes refused for NaN or infinite values (allow_nonfinite = false)",
			COUNTER, NULL, NULL, 0 },
	m_bad_coding = { "dml_server_pushes_bad_coding_total",
			 "Pushes refused for values that are not a valid encoding of their codec",
			 COUNTER, NULL, NULL, 0 },
	m_coded_wire = { "dml_server_codec_wire_bytes_total",
			 "Bytes of values that travelled in a codec (fp16, int8, topk...), as sent, "
			 "by direction (in: pushes, out: pull replies)", COUNTER, "dir", NULL, 0 },
	m_coded_floats = { "dml_server_codec_float_bytes_total",
			   "The same values' bytes as 32-bit floats, by direction", COUNTER,
			   "dir", NULL, 0 },
	m_seq_jumps = { "dml_server_pushes_seq_refused_total",
			"Pushes refused for a sequence number past the resend window", COUNTER,
			NULL, NULL, 0 },
	m_forwarded = { "dml_server_pushes_forwarded_total",
			"Summed pushes from zone aggregators applied", COUNTER, NULL, NULL, 0 },
	m_contributors = { "dml_server_forwarded_contributors_total",
			   "Workers' pushes the applied aggregator pushes held", COUNTER, NULL,
			   NULL, 0 },
	m_partial = { "dml_server_pushes_partial_total",
		      "Aggregator pushes refused (DML_EPARTIAL): some of the pushes they held "
		      "were applied already", COUNTER, NULL, NULL, 0 },
	m_delta = { "dml_server_pulls_delta_total", "Delta pulls answered, by how: "
		    "delta (the change since the puller's version) or full (the values)",
		    COUNTER, "reply", NULL, 0 },
	m_preauth = { "dml_server_preauth_dropped_total",
		      "Unauthenticated connections closed to make room (max_preauth)", COUNTER,
		      NULL, NULL, 0 },
	m_budget = { "dml_server_pulls_budget_held_total",
		     "Large pulls that waited for the output budget (output_budget)", COUNTER,
		     NULL, NULL, 0 },
	m_stalled = { "dml_server_output_stalled_total",
		      "Connections closed for replies left unread while pulls waited for "
		      "output_budget", COUNTER, NULL, NULL, 0 },
	m_held = { "dml_server_pulls_held_total",
		   "Pulls parked until the staleness bound allowed them", COUNTER, NULL,
		   NULL, 0 },
	m_bad = { "dml_server_connection_errors_total",
		  "Connections closed for a bad frame or another protocol error", COUNTER,
		  NULL, NULL, 0 },
	m_bytes = { "dml_server_network_bytes_total", "Bytes received (in) and sent (out)",
		    COUNTER, "direction", NULL, 0 },
	m_conns = { "dml_server_connections", "Connections open", GAUGE, NULL, NULL, 0 },
	m_conns_unix = { "dml_server_connections_unix",
			 "Of the connections open, those over the Unix socket (the rest: TCP)",
			 GAUGE, NULL, NULL, 0 },
	m_ring = { "dml_server_ring_bytes_total",
		   "Payload bytes, received and sent, that went through the shared-memory "
		   "rings of Unix connections instead of their sockets", COUNTER, NULL, NULL, 0 },
	m_queued = { "dml_server_output_queued_bytes",
		     "Reply bytes queued for peers, not yet taken by their sockets", GAUGE,
		     NULL, NULL, 0 },
	m_live = { "dml_server_workers_live",
		   "Workers in the clock set (connected, or gone less than dead_after_ms)",
		   GAUGE, NULL, NULL, 0 },
	m_min_clock = { "dml_server_min_clock", "Slowest clock of the live workers", GAUGE,
			NULL, NULL, 0 },
	m_clock = { "dml_server_worker_clock", "Clock of each worker that joined", GAUGE,
		    "worker", NULL, 0 },
	m_rows = { "dml_server_table_rows", "Rows (keys) held, per table", GAUGE, "table",
		   NULL, 0 },
	m_table_bytes = { "dml_server_table_bytes",
			  "Memory of values and optimizer state, per table", GAUGE, "table",
			  NULL, 0 };

#undef COUNTER
#undef GAUGE

/* Every metric of the server; non-zero if one was refused. */
static int register_metrics(struct dml_metrics *m, void *arg)
{
	struct dml_server *s = arg;
	struct dml_metric_desc latency = {
		"dml_server_request_duration_seconds",
		"Push and pull latency from receipt to reply sent, waits included",
		DML_METRIC_HISTOGRAM, "type", NULL, 0 };
	struct dml_metric_desc wait = {
		"dml_server_pull_held_seconds",
		"How long held pulls waited for the staleness bound", DML_METRIC_HISTOGRAM,
		NULL, NULL, 0 };
	int bad = 0;

	latency.bounds = dml_metrics_latency_buckets(&latency.nbounds);
	wait.bounds = latency.bounds;
	wait.nbounds = latency.nbounds;
	for (int i = 0; i < REQ_KINDS; i++)
		bad |= dml_metrics_add_u64(m, &m_requests, req_names[i], &s->st.requests[i]);
	bad |= dml_metrics_add_histogram(m, &latency, "push", &s->push_latency);
	bad |= dml_metrics_add_histogram(m, &latency, "pull", &s->pull_latency);
	bad |= dml_metrics_add_u64(m, &m_held, NULL, &s->st.held);
	bad |= dml_metrics_add_histogram(m, &wait, NULL, &s->held_wait);
	bad |= dml_metrics_add_u64(m, &m_duplicates, NULL, &s->st.duplicates);
	bad |= dml_metrics_add_u64(m, &m_stale, NULL, &s->st.stale_scaled);
	bad |= dml_metrics_add_u64(m, &m_deferred, NULL, &s->st.deferred);
	bad |= dml_metrics_add_u64(m, &m_steps, NULL, &s->st.steps);
	bad |= dml_metrics_add_u64(m, &m_nonfinite, NULL, &s->st.nonfinite);
	bad |= dml_metrics_add_u64(m, &m_bad_coding, NULL, &s->st.bad_codings);
	for (int i = 0; i < 2; i++) {
		bad |= dml_metrics_add_u64(m, &m_coded_wire, i ? "out" : "in",
					   &s->st.coded_wire[i]);
		bad |= dml_metrics_add_u64(m, &m_coded_floats, i ? "out" : "in",
					   &s->st.coded_floats[i]);
	}
	bad |= dml_metrics_add_u64(m, &m_seq_jumps, NULL, &s->st.seq_jumps);
	bad |= dml_metrics_add_u64(m, &m_forwarded, NULL, &s->st.pushes_forwarded);
	bad |= dml_metrics_add_u64(m, &m_contributors, NULL, &s->st.forwarded_contributors);
	bad |= dml_metrics_add_u64(m, &m_partial, NULL, &s->st.pushes_partial);
	bad |= dml_metrics_add_u64(m, &m_delta, "delta", &s->st.delta_pulls);
	bad |= dml_metrics_add_u64(m, &m_delta, "full", &s->st.delta_resyncs);
	bad |= dml_metrics_add_u64(m, &m_preauth, NULL, &s->peers.preauth_dropped);
	bad |= dml_metrics_add_u64(m, &m_budget, NULL, &s->st.budget_held);
	bad |= dml_metrics_add_u64(m, &m_stalled, NULL, &s->st.output_stalled);
	bad |= dml_metrics_add_u64(m, &m_bad, NULL, &s->st.bad_frames);
	bad |= dml_metrics_add_collector(m, &m_bytes, collect_traffic, s);
	bad |= dml_metrics_add_fn(m, &m_conns, NULL, dml_peers_metric_count,
				  &s->peers);
	bad |= dml_metrics_add_fn(m, &m_conns_unix, NULL, dml_peers_metric_local, &s->peers);
	bad |= dml_metrics_add_fn(m, &m_ring, NULL, dml_peers_metric_ring_bytes, &s->peers);
	bad |= dml_metrics_add_fn(m, &m_queued, NULL, metric_output_queued, s);
	bad |= dml_metrics_add_fn(m, &m_live, NULL, metric_workers_live, s);
	bad |= dml_metrics_add_fn(m, &m_min_clock, NULL, metric_min_clock, s);
	bad |= dml_metrics_add_collector(m, &m_clock, collect_worker_clocks, s);
	bad |= dml_metrics_add_collector(m, &m_rows, collect_table_rows, s);
	bad |= dml_metrics_add_collector(m, &m_table_bytes, collect_table_bytes, s);
	return bad;
}

int dml_server_metrics_init(struct dml_server *s)
{
	return dml_metrics_start(s->base, s->conf->metrics_listen, s->conf->metrics_port_file,
				 register_metrics, s, &s->metrics);
}
