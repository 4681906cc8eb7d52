/*
 * What the files of dml-sched's job side share (sched_job_io.c,
 * sched_job_run.c, sched_job_rpc.c) and nobody else sees: the helpers more
 * than one of them calls. What the rest of dml-sched calls is in
 * sched_internal.h.
 */
#ifndef DML_SCHED_JOB_INTERNAL_H
#define DML_SCHED_JOB_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "proto/dml.pb-c.h"
#include "sched/jobs.h"
#include "shard/mapplan.h"
#include "sched/nodes.h"
#include "sched/sched_internal.h"

/* ---- sched_job_io.c --------------------------------------------------- */

const char *plural(size_t n);
struct dml_job *active_job(struct dml_sched *s);
void wire_spec(const struct dml_job *job, const struct sched_job *xj,
	       Dml__JobSpec *out);
double node_rate(const struct dml_node *n);
const char *job_reason(const struct dml_sched *s, const struct dml_job *job);
void job_note(struct dml_sched *s, const struct dml_job *job);
void job_fail(struct dml_job *job, uint64_t now, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
int assign_send(struct dml_sched *s, struct dml_job *job, uint32_t worker,
		uint64_t now);
void assign_all(struct dml_sched *s, struct dml_job *job, int all_workers,
		uint64_t now);
int refused(const struct dml_sched *s, const struct dml_node *n);
void refusal_add(struct dml_sched *s, uint32_t node_id, uint64_t incarnation);
const Dml__ShardServer *map_server(const Dml__ShardMap *map, uint32_t node_id);
struct sched_map_server *act_server(struct dml_sched *s, uint32_t node_id);
struct dml_mapplan_server *map_candidates(struct dml_sched *s,
					  const Dml__ShardMap *old, size_t *n);
void map_set(struct dml_sched *s, struct sched_job *xj, Dml__ShardMap *map,
	     uint64_t now);
int map_send(struct dml_sched *s, struct dml_job *job, struct sched_job *xj,
	     struct sched_map_server *ms, uint64_t now);
void map_send_all(struct dml_sched *s, struct dml_job *job, struct sched_job *xj,
		  const char *why, uint64_t now);
void map_replan(struct dml_sched *s, struct dml_job *job, const char *why,
		uint64_t now);
void install_reason(struct dml_sched *s, const struct sched_job *xj, uint64_t now);

/* ---- sched_job_run.c -------------------------------------------------- */

void jobs_sync(struct dml_sched *s, const struct dml_job *touched, uint64_t now);

#endif
