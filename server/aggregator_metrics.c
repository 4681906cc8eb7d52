/*
 * dml-aggregator's metrics (metrics.h). The request paths only bump the
 * integers of struct dml_agg_stats and feed the fan-in histogram; what is
 * here runs at scrape time, on the loop.
 */
#include <stddef.h>

#include "proto/log.h"
#include "proto/util.h"
#include "server/aggregator_internal.h"

#define COUNTER DML_METRIC_COUNTER
#define GAUGE DML_METRIC_GAUGE
#define ST(field) offsetof(struct dml_agg_stats, field)

/* The plain counters: a name, its help, and where it is kept. */
static const struct {
	struct dml_metric_desc desc;
	size_t offset;
} counters[] = {
	{ { "dml_aggregator_pushes_in_total", "Pushes received from workers (resends "
	    "of a pending push not counted)", COUNTER, NULL, NULL, 0 }, ST(pushes_in) },
	{ { "dml_aggregator_pushes_resent_total", "Resends of a push still pending: only "
	    "where its ACK goes changed", COUNTER, NULL, NULL, 0 }, ST(pushes_resent_in) },
	{ { "dml_aggregator_pushes_forwarded_total", "Pushes forwarded to owners, each "
	    "the sum of one or more workers' pushes", COUNTER, NULL, NULL, 0 },
	  ST(pushes_forwarded) },
	{ { "dml_aggregator_pulls_in_total", "Pulls received from workers", COUNTER, NULL,
	    NULL, 0 }, ST(pulls_in) },
	{ { "dml_aggregator_pulls_forwarded_total", "Pulls sent to owners", COUNTER, NULL,
	    NULL, 0 }, ST(pulls_forwarded) },
	{ { "dml_aggregator_pulls_ahead_total", "Pulls sent to owners for the clock after "
	    "one just answered (pull_ahead), counted in pulls_forwarded too", COUNTER, NULL,
	    NULL, 0 }, ST(pulls_ahead) },
	{ { "dml_aggregator_cache_hits_total", "Pulls answered from the zone cache", COUNTER,
	    NULL, NULL, 0 }, ST(cache_hits) },
	{ { "dml_aggregator_clocks_in_total", "Workers' CLOCKs received for an owner, "
	    "delivered with their last push or on their own", COUNTER, NULL, NULL, 0 },
	  ST(clocks_in) },
	{ { "dml_aggregator_clocks_alone_total", "Workers' clocks sent to owners in a "
	    "CLOCK of the aggregator's own (no push of theirs left to ride on)", COUNTER,
	    NULL, NULL, 0 }, ST(clocks_alone) },
	{ { "dml_aggregator_splits_total", "Forwarded pushes refused whole (DML_EPARTIAL, "
	    "DML_ESTATE) and split into one push per worker", COUNTER, NULL, NULL, 0 },
	  ST(splits) },
	{ { "dml_aggregator_entries_let_pass_total", "Open entries at the head of an "
	    "owner's queue moved behind a closed one, so that a worker's earlier push "
	    "does not wait for the window", COUNTER, NULL, NULL, 0 }, ST(let_pass) },
	{ { "dml_aggregator_retries_total", "Forwarded pushes sent again after DML_EAGAIN",
	    COUNTER, NULL, NULL, 0 }, ST(retries) },
	{ { "dml_aggregator_errors_relayed_total", "Owner errors relayed to workers' "
	    "requests", COUNTER, NULL, NULL, 0 }, ST(relayed_errors) },
	{ { "dml_aggregator_forward_value_bytes_total", "Bytes of the forwarded sums' "
	    "values as floats, before their codec", COUNTER, NULL, NULL, 0 },
	  ST(forward_value_bytes) },
	{ { "dml_aggregator_forward_sent_bytes_total", "Bytes of the forwarded sums' "
	    "values as sent, after their codec (keys not counted)", COUNTER, NULL, NULL, 0 },
	  ST(forward_sent_bytes) },
	{ { "dml_aggregator_requests_refused_total", "Requests naming an owner not in "
	    "servers", COUNTER, NULL, NULL, 0 }, ST(refused) },
};

void agg_traffic(const struct dml_agg *a, uint64_t *in, uint64_t *out)
{
	*in = a->st.bytes_in_closed;
	*out = a->st.bytes_out_closed;
	for (const struct dml_peer *x = a->peers.head; x; x = x->next) {
		*in += dml_conn_bytes_in(x->conn);
		*out += dml_conn_bytes_out(x->conn);
	}
	for (size_t i = 0; i < a->nowners; i++)
		if (a->owners[i].conn) {
			*in += dml_conn_bytes_in(a->owners[i].conn);
			*out += dml_conn_bytes_out(a->owners[i].conn);
		}
}

static void collect_traffic(struct dml_metrics_scrape *sc, void *arg)
{
	uint64_t in, out;

	agg_traffic(arg, &in, &out);
	dml_metrics_emit(sc, "in", (double)in);
	dml_metrics_emit(sc, "out", (double)out);
}

static double metric_pending(void *arg)
{
	return (double)((const struct dml_agg *)arg)->pending_bytes;
}

static double metric_owners_ready(void *arg)
{
	const struct dml_agg *a = arg;
	size_t n = 0;

	for (size_t i = 0; i < a->nowners; i++)
		n += a->owners[i].ready != 0;
	return (double)n;
}

static const double fanin_bounds[] = { 1, 2, 4, 8, 16, 32, 64, 128, 256, 1024, 4096 };

static const struct dml_metric_desc
	m_bytes = { "dml_aggregator_bytes_total", "Bytes of whole frames, workers and "
		    "owners together, by direction", COUNTER, "dir", NULL, 0 },
	m_pending = { "dml_aggregator_pending_bytes", "Bytes of pushed values held until "
		      "their owner acknowledges", GAUGE, NULL, NULL, 0 },
	m_owners = { "dml_aggregator_owners_connected", "Owners with a ready connection",
		     GAUGE, NULL, NULL, 0 },
	m_conns = { "dml_aggregator_connections", "Worker connections open", GAUGE, NULL,
		    NULL, 0 },
	m_residual = { "dml_aggregator_residual_norm", "L2 norm of what lossy forwarded "
		       "sums did not carry yet (error feedback), by job/table", GAUGE,
		       "table", NULL, 0 },
	m_fanin = { "dml_aggregator_fanin", "Workers' pushes summed in each forwarded push",
		    DML_METRIC_HISTOGRAM, NULL, fanin_bounds, DML_ARRAY_LEN(fanin_bounds) };

#undef COUNTER
#undef GAUGE

static int register_metrics(struct dml_metrics *m, void *arg)
{
	struct dml_agg *a = arg;
	int bad = 0;

	for (size_t i = 0; i < DML_ARRAY_LEN(counters); i++)
		bad |= dml_metrics_add_u64(m, &counters[i].desc, NULL,
					   (const uint64_t *)((const char *)&a->st +
							      counters[i].offset));
	bad |= dml_metrics_add_histogram(m, &m_fanin, NULL, &a->fanin);
	bad |= dml_metrics_add_collector(m, &m_bytes, collect_traffic, a);
	bad |= dml_metrics_add_collector(m, &m_residual, agg_residuals_collect, a);
	bad |= dml_metrics_add_fn(m, &m_pending, NULL, metric_pending, a);
	bad |= dml_metrics_add_fn(m, &m_owners, NULL, metric_owners_ready, a);
	bad |= dml_metrics_add_fn(m, &m_conns, NULL, dml_peers_metric_count, &a->peers);
	return bad;
}

int agg_metrics_start(struct dml_agg *a)
{
	return dml_metrics_start(a->base, a->conf->metrics_listen, a->conf->metrics_port_file,
				 register_metrics, a, &a->metrics);
}
