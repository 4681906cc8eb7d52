/*
 * What the files of check_cluster share: the helpers check_cluster.c
 * defines for starting servers and driving them through libdml. Each file
 * adds its tests to the suite's test cases (check_cluster.c builds the
 * suite).
 */
#ifndef DML_CHECK_CLUSTER_H
#define DML_CHECK_CLUSTER_H

#include <check.h>
#include <stddef.h>
#include <stdint.h>

#include "worker/dml.h"
#include "test/harness.h"

#define WAIT_MS 5000
/* Numbers into config text and command lines. */
#define STR_(x) #x
#define STR(x) STR_(x)

/* Sleeps us microseconds, resuming after signals. */
void sleep_us(long us);

/* Milliseconds since since_ns (dml_now_ns() clock). */
uint64_t elapsed_ms(uint64_t since_ns);

/* A new environment with n servers (shards 0/n .. n-1/n) of one config. */
struct dml_test_env *cluster_start(size_t n,
				   const struct dml_test_server_conf *base,
				   struct dml_test_server **servers);

/* SIGTERM, and the server must exit 0 in time. */
void stop_ok(struct dml_test_server *s);

/* Fails the test, with d's detail, unless rc is 0. */
void wait_ok(dml_t *d, int rc, const char *what);

/* Push vals to the dense range [0, n) and wait for the acknowledgement. */
int push_dense(dml_t *d, uint32_t table, uint64_t n, const float *vals);

/* Pull the dense range [0, n) into out and wait for it. */
int pull_dense(dml_t *d, uint32_t table, uint64_t n, float *out);

/* The tests of the consistency test case (check_cluster_clock.c). */
void cluster_tests_consistency(TCase *tc);

/* The tests of held pulls, run with the shutdown tests (check_cluster_clock.c). */
void cluster_tests_holds(TCase *tc);

/* The tests of the training test case (check_cluster_delivery.c). */
void cluster_tests_training(TCase *tc);

/* The tests of the delivery test case (check_cluster_delivery.c). */
void cluster_tests_delivery(TCase *tc);

/* The tests of the abuse test case (check_cluster_abuse.c). */
void cluster_tests_abuse(TCase *tc);

/* The SIGTERM tests of the shutdown test case (check_cluster_abuse.c). */
void cluster_tests_shutdown(TCase *tc);

/* The tests of the regressions test case (check_cluster_regress.c). */
void cluster_tests_regressions(TCase *tc);

/* The tests of the metrics test case (check_cluster_metrics.c). */
void cluster_tests_metrics(TCase *tc);

#endif /* DML_CHECK_CLUSTER_H */
