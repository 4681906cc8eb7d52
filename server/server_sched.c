/*
 * dml-server's registration with dml-sched: describe this server (role SERVER,
 * node id, zone, the address others should dial, its shard and a profile of
 * the machine) and hand it to the scheduler link (proto/sched_link.h), which
 * registers, heartbeats and reconnects on the server's own loop. What the
 * scheduler sends back (SHARDMAP) is handled by job.c.
 *
 * Must never: hold up or fail serving because the scheduler is slow or gone
 * (the server serves standalone meanwhile and the link keeps retrying), or
 * advertise an address nobody else can dial.
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "proto/dml_error.h"
#include "proto/sched_link.h"
#include "proto/log.h"
#include "server/server_internal.h"
#include "proto/util.h"

/* What the scheduler will weigh servers by; sysconf failing is not fatal. */
static void machine_profile(Dml__Profile *p)
{
	long cores = sysconf(_SC_NPROCESSORS_ONLN);
	long pages = sysconf(_SC_PHYS_PAGES);
	long page_size = sysconf(_SC_PAGESIZE);

	p->device = (char *)"cpu";
	p->cores = cores > 0 ? (uint32_t)cores : 0;
	if (pages > 0 && page_size > 0)
		p->memory_bytes = (uint64_t)pages * (uint64_t)page_size;
}

int dml_server_sched_start(struct dml_server *s)
{
	const struct dml_server_conf *c = s->conf;
	Dml__NodeInfo self = DML__NODE_INFO__INIT;
	Dml__Profile profile = DML__PROFILE__INIT;
	char address[DML_ADDRESS_MAX];
	int rc;

	if (!c->scheduler[0])
		return 0;
	if (dml_sched_advertised(c->advertise, c->listen, s->port, address, sizeof(address)))
		return DML_ECONF;
	machine_profile(&profile);
	self.role = DML__ROLE__SERVER;
	self.node_id = c->node_id;
	self.zone = c->zone;
	self.address = address;
	self.shard_index = c->shard_index;
	self.shard_count = c->shard_count;
	self.profile = &profile;
	/* SHARDMAPs arrive through the link; job.c installs them. */
	rc = dml_sched_link_start(s->base, &s->conn_conf, c->scheduler, &self,
				  dml_server_job_on_sched, s, &s->sched);
	if (rc)
		return rc;
	dml_info("registering with scheduler %s as %s (zone '%s', %u cores, %llu MiB)",
		 c->scheduler, address, c->zone, profile.cores,
		 (unsigned long long)(profile.memory_bytes >> 20));
	return 0;
}

void dml_server_sched_verror(struct dml_server *s, uint64_t request_id, int code,
			     const char *what, const char *fmt, va_list ap)
{
	Dml__Meta m = DML__META__INIT;
	Dml__Error e = DML__ERROR__INIT;
	char msg[512];

	vsnprintf(msg, sizeof(msg), fmt, ap);
	dml_err("%s refused: %s", what, msg);
	m.type = DML__MSG_TYPE__ERROR;
	m.request_id = request_id;
	e.code = code;
	e.message = msg;
	m.error = &e;
	(void)dml_sched_link_send(s->sched, &m);
}

void dml_server_sched_error(struct dml_server *s, uint64_t request_id, int code,
			    const char *what, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	dml_server_sched_verror(s, request_id, code, what, fmt, ap);
	va_end(ap);
}

void dml_server_sched_stop(struct dml_server *s)
{
	dml_sched_link_stop(s->sched);
}

void dml_server_sched_free(struct dml_server *s)
{
	dml_sched_link_free(s->sched);
	s->sched = NULL;
}
