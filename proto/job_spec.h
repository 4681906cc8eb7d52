/*
 * Job files and job specs.
 *
 * A job file (conf/jobs/NAME.conf) is one [job] section and one [table]
 * section per parameter table, read by the one config parser (conf.h), so
 * its errors read "file:line: message" like every daemon's. It becomes a
 * Dml__JobSpec, the form a job travels in: dmlctl parses the file and sends
 * the spec in SUBMIT, dml-sched checks it again (a spec from the wire is
 * trusted no more than a file), and workers and servers get it from the
 * scheduler.
 *
 * Must never: accept a spec that a server or worker would have to refuse
 * later (every name, bound and combination is checked here, once, for all).
 */
#ifndef DML_JOB_SPEC_H
#define DML_JOB_SPEC_H

#include <stddef.h>

#include "proto/conf.h"
#include "proto/dml.pb-c.h"

/* Longest job name, bytes without the NUL; names are [A-Za-z0-9_.-]. */
#define DML_JOB_NAME_MAX 63
/* Most tables a job may have. */
#define DML_JOB_TABLES_MAX 64

/** The job file's schema (for --help and tests). */
extern const struct dml_conf_schema dml_job_conf_schema;

/**
 * Read a job file into a new spec (free with dml_job_spec_free). The spec
 * is checked with dml_job_spec_check. Returns 0, DML_ECONF (err holds
 * "path:line: message", or "path: message" for a failed check) or DML_EIO
 * (err holds "path: reason").
 */
int dml_job_file_load(const char *path, Dml__JobSpec **out, char *err, size_t errlen);

/** The same for text in memory; name stands in for the path in errors. */
int dml_job_file_parse_string(const char *name, const char *text, Dml__JobSpec **out,
			      char *err, size_t errlen);

/**
 * Check a spec wherever it came from: DML_EINVAL with the reason in err
 * (no file name), else 0. See job_spec_check.c for the full list of rules.
 */
int dml_job_spec_check(const Dml__JobSpec *spec, char *err, size_t errlen);

/** Non-zero for a metric a job wants small (loss, rmse): its target is a ceiling. */
int dml_metric_lower_is_better(const char *metric);

/* mlp: the most hidden layers a job may have. */
#define DML_MLP_HIDDEN_MAX 8

/**
 * The layer sizes of an mlp spec: sizes[0] = dim, then the hidden layers,
 * then the classes (keys of the last table); *n = hidden layers + 2.
 * sizes needs DML_MLP_HIDDEN_MAX + 2 entries. DML_EINVAL with the reason
 * ("app mlp: ...") for a malformed hidden list or a missing output table.
 */
int dml_job_mlp_layers(const Dml__JobSpec *spec, uint32_t *sizes, size_t *n, char *err,
		       size_t errlen);

/**
 * Split data text "IMAGES,LABELS" (spaces around the comma ignored) into
 * images and labels, each of len bytes. DML_EINVAL with why unless there
 * are exactly two non-empty paths shorter than len.
 */
int dml_job_data_pair(const char *text, char *images, char *labels, size_t len, char *why,
		      size_t whylen);

/** 1 if the app name is one the workers of this build can run. */
int dml_job_app_known(const char *app);

/** Deep copy (through the wire encoding); never NULL. */
Dml__JobSpec *dml_job_spec_copy(const Dml__JobSpec *spec);

/** Free a spec from this module; NULL is fine. */
void dml_job_spec_free(Dml__JobSpec *spec);

/* JobSpec.rebalance: "auto" (when the load drifts) or "off". */
enum dml_rebalance { DML_REBALANCE_AUTO, DML_REBALANCE_OFF };
extern const char *const dml_rebalance_names[];

/* JobSpec.batch_split: how the global batch is shared out each clock. */
enum dml_batch_split { DML_BATCH_AUTO, DML_BATCH_EQUAL, DML_BATCH_RATE };
extern const char *const dml_batch_split_names[];

/* Under a split by rate or a clock_batch, a worker's batch is at most this
 * many times batch_size: its buffers are sized for it. */
#define DML_BATCH_CAP_FACTOR 4

/** 1 when the job's per-worker batches follow compute rates (LB-BSP). */
int dml_job_batch_by_rate(const Dml__JobSpec *s);

/** The largest batch a worker of the job may be given. */
uint64_t dml_job_batch_max(const Dml__JobSpec *s);

/**
 * The examples of one clock over nlive live workers: clock_batch, or
 * batch_size each when it is 0; never fewer than nlive.
 */
uint64_t dml_job_clock_batch(const Dml__JobSpec *s, uint64_t nlive);

/** Job state names: "pending", "running", ...; "unknown" otherwise. */
const char *dml_job_state_name(int state);

#endif
