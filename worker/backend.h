/*
 * Compute backends of dml-worker: where an app's arithmetic runs, behind
 * one table of function pointers (STYLE #13), so that app code (app_mlp.c
 * and the apps after it) never knows whether it runs on OpenBLAS or on a
 * GPU. `cpu` (backend_cpu.c) is always built; `cuda` (backend_cuda.cu, on
 * the CUDA runtime and cuBLAS) is built when configure finds the toolkit.
 *
 * Memory model. An app holds its tensors in device buffers (float arrays
 * from alloc). Parameters and gradients cross to and from libdml through
 * host staging buffers (host_alloc: pinned memory on a GPU, so that copies
 * run asynchronously). Every call is queued in order on the backend's one
 * stream: upload, math and download run in the order they were issued,
 * and the host may not read a download's destination, nor reuse an
 * upload's source, before sync() returned. A backend whose device is the
 * host (cpu) sets `unified`: device pointers are host pointers, copies are
 * plain memcpy, and an app may skip staging and let libdml write pulls
 * straight into device buffers.
 *
 * Matrices are row-major with explicit leading dimensions (ld >= columns of
 * the stored matrix), so an app can address a column block inside a wider
 * row (a layer's bias kept as the last column of its weight rows). Class
 * labels travel as floats holding small non-negative integers (exact up to
 * 2^24).
 *
 * Must never: abort or print on a failed device call (ops return a
 * DML_E... code and error() says what failed), run work on another thread
 * than the caller's except the device's own, or touch a buffer after free.
 */
#ifndef DML_WORKER_BACKEND_H
#define DML_WORKER_BACKEND_H

#include <stddef.h>
#include <stdint.h>

/** How to open a backend. */
struct dml_backend_conf {
	uint32_t threads;           /* cpu: OpenBLAS threads (0 = leave as is) */
	int device;                 /* cuda: device index (0 = the first) */
};

/** A backend's ops; every function takes the ctx that open made. */
struct dml_backend_ops {
	const char *name;           /* "cpu", "cuda": the worker's backend = */
	int unified;                /* device pointers are host pointers */

	/**
	 * Make a context. Returns 0, DML_ENOTFOUND (no usable device: err says
	 * so, e.g. "cuda: no CUDA device (cudaGetDeviceCount: ...)"), DML_EIO
	 * (the device failed) or DML_ENOMEM. *ctx is NULL on failure.
	 */
	int (*open)(const struct dml_backend_conf *conf, void **ctx, char *err,
		    size_t errlen);
	/** Free the context (after freeing its buffers); NULL is fine. */
	void (*close)(void *ctx);
	/** The last failure, e.g. "cublasSgemm: CUBLAS_STATUS_..."; "" if none. */
	const char *(*error)(void *ctx);

	/** n floats of device memory, uninitialised. 0 or DML_ENOMEM. */
	int (*alloc)(void *ctx, size_t n, float **out);
	/** Free a device buffer; NULL is fine. */
	void (*free)(void *ctx, float *buf);
	/** n floats of host staging memory (pinned on a GPU). 0 or DML_ENOMEM. */
	int (*host_alloc)(void *ctx, size_t n, float **out);
	void (*host_free)(void *ctx, float *buf);
	/** Queue a copy of n floats host -> device. */
	int (*upload)(void *ctx, float *dev, const float *host, size_t n);
	/** Queue a copy of n floats device -> host. */
	int (*download)(void *ctx, float *host, const float *dev, size_t n);
	/** Wait until everything queued has finished; its first error, if any. */
	int (*sync)(void *ctx);

	/**
	 * c = alpha * op(a) * op(b) + beta * c, row-major: op(a) is m x k,
	 * op(b) is k x n, c is m x n; op(x) = x^T when trans_x. lda, ldb, ldc are
	 * the row strides of a, b, c as stored. Sizes up to INT_MAX.
	 */
	int (*gemm)(void *ctx, int trans_a, int trans_b, size_t m, size_t n, size_t k,
		    float alpha, const float *a, size_t lda, const float *b, size_t ldb,
		    float beta, float *c, size_t ldc);
	/**
	 * Layer output in place: h[r*ldh + j] += bias[j*bias_stride] for r <
	 * rows, j < cols; then, when relu, h = max(h, 0).
	 */
	int (*bias_act)(void *ctx, float *h, size_t rows, size_t cols, size_t ldh,
			const float *bias, size_t bias_stride, int relu);
	/**
	 * Through a ReLU backwards: dh[r*ld + j] = 0 where h[r*ld + j] <= 0
	 * (h is the layer's output after the ReLU), for r < rows, j < cols.
	 */
	int (*relu_grad)(void *ctx, float *dh, const float *h, size_t rows, size_t cols,
			 size_t ld);
	/**
	 * Bias gradient: out[j*out_stride] = alpha * sum over r < rows of
	 * dh[r*ld + j], for j < cols (overwritten, not accumulated).
	 */
	int (*col_sum)(void *ctx, const float *dh, size_t rows, size_t cols, size_t ld,
		       float alpha, float *out, size_t out_stride);
	/**
	 * Softmax cross-entropy of rows x classes logits (row stride classes)
	 * against labels (rows floats, each an integer in [0, classes)). Adds to
	 * *loss the sum over rows of -log softmax(logits)[label] (computed
	 * stably, in double on the host side of the sum) and to *correct the
	 * rows whose largest logit (the first, on ties) is the label's. When
	 * dlogits is not NULL it gets scale * (softmax(logits) - onehot(label)),
	 * same layout; it may equal logits. loss and correct are host pointers,
	 * valid once this returns (the call syncs). A label out of range is
	 * DML_EINVAL and nothing is added.
	 */
	int (*softmax_xent)(void *ctx, const float *logits, const float *labels, size_t rows,
			    size_t classes, float scale, float *dlogits, double *loss,
			    uint64_t *correct);
};

/** The backends of this build: cpu always, cuda with HAVE_CUDA. */
extern const struct dml_backend_ops dml_backend_cpu;
#ifdef HAVE_CUDA
extern const struct dml_backend_ops dml_backend_cuda;
#endif

/** The backend called name, or NULL when this build has none by that name. */
const struct dml_backend_ops *dml_backend_find(const char *name);

/** The names of this build's backends, NULL-terminated ("cpu", "cuda"). */
extern const char *const dml_backend_names[];

#endif
