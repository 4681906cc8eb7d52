/*
 * Choosing OpenBLAS's kernels where its own detection fails (see
 * blas_kernels.c): for the programs that compute on the cpu backend
 * (dml-worker, dml-bench).
 */
#ifndef DML_WORKER_BLAS_KERNELS_H
#define DML_WORKER_BLAS_KERNELS_H

/**
 * The kernel set (an OPENBLAS_CORETYPE name) this CPU supports when OpenBLAS
 * detected it as `detected` (openblas_get_corename()); NULL when the
 * detection stands: OpenBLAS recognised the CPU, or the CPU has nothing
 * better than the fallback.
 */
const char *dml_blas_kernels_for_cpu(const char *detected);

/**
 * Call first in main(), before any other thread or file exists: when
 * OpenBLAS fell back to its generic kernels on a CPU that has better ones,
 * executes the program again (argv as main got it) with OPENBLAS_CORETYPE
 * set, and does not return; otherwise returns at once. Leaves an
 * OPENBLAS_CORETYPE the environment already has alone.
 */
void dml_blas_kernels_choose(char **argv);

#endif
