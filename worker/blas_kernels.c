/*
 * OpenBLAS kernels for a CPU that OpenBLAS does not know (blas_kernels.h).
 *
 * OpenBLAS picks its kernels once, when the library loads, from a table of
 * CPU models. A model newer than the library's table (Debian 12's 0.3.21
 * on a 5th generation Xeon, model 207) falls back to the generic
 * "Prescott" kernels, SSE3 only: single-precision gemm four to six times
 * slower than the same machine's AVX-512 kernels, silently. The only
 * switch is the environment variable OPENBLAS_CORETYPE, read while the
 * library loads, so a process that finds itself on the fallback sets it to
 * what the CPU's own feature flags support and executes itself again,
 * keeping its pid, arguments and environment.
 *
 * Must never: override a kernel set the operator chose (OPENBLAS_CORETYPE
 * already set), loop (the second image has the variable set), or stop the
 * program when the exec fails (it goes on with the slow kernels and says
 * so).
 */
#include <cblas.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "worker/blas_kernels.h"
#include "proto/log.h"

#define CORETYPE_VAR "OPENBLAS_CORETYPE"
/* OpenBLAS's kernels for an x86-64 CPU it does not recognise. */
#define FALLBACK_CORE "Prescott"

const char *dml_blas_kernels_for_cpu(const char *detected)
{
#if defined(__x86_64__) && defined(__GNUC__)
	if (!detected || strcmp(detected, FALLBACK_CORE) != 0)
		return NULL;
	__builtin_cpu_init();
	if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512cd") &&
	    __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq") &&
	    __builtin_cpu_supports("avx512vl"))
		return "SkylakeX";
	if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
		return "Haswell";
#else
	(void)detected;
#endif
	return NULL;
}

/* Under valgrind an exec leaves the tool unless it traces children, and
 * speed does not matter there: stay. */
static int under_valgrind(void)
{
	const char *p = getenv("LD_PRELOAD");

	return p && strstr(p, "vgpreload") != NULL;
}

void dml_blas_kernels_choose(char **argv)
{
	const char *core;

	if (getenv(CORETYPE_VAR) || under_valgrind())
		return;
	if (!(core = dml_blas_kernels_for_cpu(openblas_get_corename())))
		return;
	if (setenv(CORETYPE_VAR, core, 1) != 0)
		return;
	dml_info("OpenBLAS does not know this CPU and took it for %s; starting again "
		 "with %s=%s, the kernels its features support", FALLBACK_CORE,
		 CORETYPE_VAR, core);
	execv("/proc/self/exe", argv);
	dml_warn("cannot start again with %s=%s (exec: %s): OpenBLAS keeps its %s "
		 "kernels, several times slower", CORETYPE_VAR, core, strerror(errno),
		 FALLBACK_CORE);
	unsetenv(CORETYPE_VAR);
}
