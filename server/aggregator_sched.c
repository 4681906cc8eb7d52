/*
 * dml-aggregator's registration with dml-sched: role AGGREGATOR, its node
 * id, zone and the address its zone's workers dial. The scheduler routes
 * the workers of a job that spans zones through the aggregator of their
 * zone (Assignment.aggregator) while it is registered, and straight to the
 * servers once it is gone. Its heartbeats carry its counters (dmlctl shows
 * them). Nothing else comes from the scheduler.
 *
 * Must never: hold up serving because the scheduler is slow or gone (the
 * link retries on its own; workers already routed here keep coming).
 */
#include <stdio.h>

#include "proto/dml_error.h"
#include "proto/log.h"
#include "proto/sched_link.h"
#include "server/aggregator_internal.h"

/* The counters each heartbeat carries. */
static void beat(Dml__NodeInfo *info, void *arg)
{
	struct dml_agg *a = arg;
	Dml__AggregatorStats *b = &a->beat_stats;

	dml__aggregator_stats__init(b);
	b->pushes_in = a->st.pushes_in;
	b->pushes_forwarded = a->st.pushes_forwarded;
	b->pulls_in = a->st.pulls_in;
	b->pulls_forwarded = a->st.pulls_forwarded;
	b->value_bytes = a->st.forward_value_bytes;
	b->sent_bytes = a->st.forward_sent_bytes;
	agg_traffic(a, &b->bytes_in, &b->bytes_out);
	info->aggregator = b;
}

int agg_sched_start(struct dml_agg *a)
{
	const struct dml_agg_conf *c = a->conf;
	Dml__NodeInfo self = DML__NODE_INFO__INIT;
	char address[DML_ADDRESS_MAX];
	int rc;

	if (!c->scheduler[0])
		return 0;
	if (dml_sched_advertised(c->advertise, c->listen, a->port, address, sizeof(address)))
		return DML_ECONF;
	self.role = DML__ROLE__AGGREGATOR;
	self.node_id = c->node_id;
	self.zone = c->zone;
	self.address = address;
	rc = dml_sched_link_start(a->base, &a->up_conf, c->scheduler, &self, NULL, NULL,
				  &a->sched);
	if (rc)
		return rc;
	dml_sched_link_set_beat(a->sched, beat, a);
	dml_info("registering with scheduler %s as %s (zone '%s')", c->scheduler, address,
		 c->zone);
	return 0;
}

void agg_sched_stop(struct dml_agg *a)
{
	dml_sched_link_stop(a->sched);
}

void agg_sched_free(struct dml_agg *a)
{
	dml_sched_link_free(a->sched);
	a->sched = NULL;
}
