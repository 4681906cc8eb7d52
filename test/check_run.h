/*
 * The main of every Check suite: run in fork mode (a crashing test fails
 * alone), print Check's summary, exit 1 if anything failed. DML_TEST_DEBUG
 * set in the environment turns the shared logger (libdml's too) to debug.
 */
#ifndef DML_CHECK_RUN_H
#define DML_CHECK_RUN_H

#include <check.h>
#include <stdlib.h>

#include "proto/log.h"

static inline int dml_check_run(Suite *s)
{
	SRunner *sr = srunner_create(s);
	int failed;

	if (getenv("DML_TEST_DEBUG"))
		dml_log_set_level(DML_LOG_DEBUG);
	srunner_set_fork_status(sr, CK_FORK);
	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? 1 : 0;
}

#endif
