/*
 * What the files of check_backend share: the two backends side by side,
 * data and comparison (check_backend.c), and the parity tests of each op
 * (check_backend_ops.c) for the suite.
 */
#ifndef DML_TEST_CHECK_BACKEND_H
#define DML_TEST_CHECK_BACKEND_H

#include <check.h>
#include <stddef.h>

#include "worker/backend.h"
#include "proto/dml_error.h"

#define TOL 1e-4

struct side {
	const struct dml_backend_ops *be;
	void *ctx;
};

struct pair {
	struct side cpu, cuda;
};

#define ck_side(s, call)                                                          \
	do {                                                                      \
		int rc_ = (call);                                                 \
		ck_assert_msg(rc_ == 0, "%s: %s: %s (%s)", (s)->be->name, #call,  \
			      dml_strerror(rc_), (s)->be->error((s)->ctx));       \
	} while (0)

/* One line on stdout, flushed: the test runs in a child that may die. */
void say(const char *fmt, ...)
	__attribute__((format(printf, 1, 2)));
/*
 * Open cpu and cuda for test, or say why not ("SKIP: ...") and return 0:
 * then the test passes without comparing anything.
 */
int pair_open(const char *test, struct pair *p);
void pair_close(struct pair *p);
/* Device memory of s holding host[0..n), put there through pinned staging. */
float *up(struct side *s, const float *host, size_t n);
/* Copy n floats of d back to host, then free d. */
void down(struct side *s, float *host, float *d, size_t n);
/* Uniform in [lo, hi), from a fixed sequence. */
float rnd(float lo, float hi);
/* A malloc'd array of n uniform values in [lo, hi); a copy of x. */
float *rnd_array(size_t n, float lo, float hi);
float *dup_array(const float *x, size_t n);
/* Say the relative error of cuda against cpu; it must be at most TOL. */
void expect_close(const char *what, const float *cpu, const float *cuda, size_t n);

/* The parity tests of each op (check_backend_ops.c). */
void check_backend_ops_tests(TCase *tc);

#endif
