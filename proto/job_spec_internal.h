/*
 * The job spec module's own declarations (job_spec.c, job_file.c,
 * job_spec_check.c): the bounds the file's option table and the spec check
 * share, and the per-field rules both apply. Not for other modules: they
 * include job_spec.h.
 */
#ifndef DML_JOB_SPEC_INTERNAL_H
#define DML_JOB_SPEC_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#define JOB_WIDTH_MAX 65536u           /* floats per key: the servers' limit */
#define JOB_KEYS_MAX 1000000000000000.0 /* dense keys: dml-server's [table] bound */
#define JOB_CAPACITY_MAX 1000000000000.0
#define JOB_PARTITIONS_MAX 1048576u    /* the scheduler keeps an owner per partition */
#define JOB_CLOCK_BATCH_MAX 4294967295ull /* what Assignment.batch_size can carry */
#define JOB_WORKER_IDS_MAX 65536u
#define JOB_TEXT_MAX 4095u             /* data, test_data: paths */
#define JOB_HIDDEN_MAX 255u

/* Writes the reason into err; returns DML_EINVAL. */
#define fail(err, errlen, ...) dml_fail(DML_EINVAL, err, errlen, __VA_ARGS__)

/* The apps that dml-worker of this build runs. */
extern const char *const job_apps[];

/* ---- rules (job_spec.c) ---------------------------------------------- */

const char *str_or_empty(const char *s);
int name_why(const char *name, char *why, size_t whylen);
int text_why(const char *s, size_t max, char *why, size_t whylen);
int name_in(const char *s, const char *const *names);
void names_join(const char *const *names, char *buf, size_t len);
int metric_why(const char *m, char *why, size_t whylen);
int ids_why(const uint32_t *ids, size_t n, char *why, size_t whylen);
int ids_parse(const char *text, uint32_t **ids, size_t *n, char *why,
	      size_t whylen);
int below_one_why(double v, char *why, size_t whylen);

#endif
