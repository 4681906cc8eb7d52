/*
 * What the source files of check_worker share: the lsq job the tests run,
 * and the daemon tests (check_worker_daemon.c) for the suite's cases.
 */
#ifndef DML_TEST_CHECK_WORKER_H
#define DML_TEST_CHECK_WORKER_H

#include <check.h>

/** A small lsq job file: 10 clocks of 8 of 100 examples, dim 5. */
extern const char *const lsq_job;

/** Add the daemon tests to daemon and the CPU limit test to unit. */
void check_worker_daemon_tests(TCase *unit, TCase *daemon);

#endif
