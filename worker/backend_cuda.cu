/*
 * The cuda compute backend (backend.h) on the CUDA runtime and cuBLAS: one
 * device, one non-blocking stream that every op is queued on in order, and
 * one cuBLAS handle bound to that stream. gemm is cuBLAS's; the small
 * element-wise and reduction ops are kernels of this file. Host staging
 * memory is pinned (cudaMallocHost) so that uploads and downloads run
 * asynchronously on the stream.
 *
 * softmax_xent writes each row's loss and verdict (right, wrong, bad label)
 * into a device scratch buffer, copies it back, and sums the losses in
 * double on the host, so that the total does not depend on the order the
 * device happened to add in.
 *
 * Must never: print, abort or leave a CUDA/cuBLAS error unreported (each
 * one becomes DML_EIO, or DML_ENOMEM for an allocation, with "call:
 * message" in error()), hand cuBLAS or a kernel a size that does not fit
 * an int, or use TF32 or other reduced-precision math (results must match
 * the cpu backend).
 */
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <climits>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>

#include "config.h"
extern "C" {
#include "worker/backend.h"
#include "proto/dml_error.h"
}

#define CTX_ERR_MAX 256
/* Threads of a block for the element-wise kernels and softmax_xent. */
#define BLOCK 256
/* Grid cap: kernels loop over what a capped grid does not cover. */
#define GRID_MAX 65535u
#define WARP 32
/* col_sum: a block is WARP columns by COL_ROWS row slices. */
#define COL_ROWS 8
/* softmax_xent verdicts per row (stored as floats next to the loss). */
#define VERDICT_WRONG 0.0f
#define VERDICT_RIGHT 1.0f
#define VERDICT_BAD_LABEL -1.0f

struct cuda_ctx {
	int device;
	cudaStream_t stream;
	cublasHandle_t blas;
	/* softmax_xent scratch: 2 floats a row (loss, verdict), xent_rows rows. */
	float *xent_dev, *xent_host;
	size_t xent_rows;
	char err[CTX_ERR_MAX];
};

/* ---- errors ------------------------------------------------------------ */

static int ctx_fail(struct cuda_ctx *c, int code, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static int ctx_fail(struct cuda_ctx *c, int code, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(c->err, sizeof(c->err), fmt, ap);
	va_end(ap);
	return code;
}

/* 0, or code with "call: message" in the context. */
static int cuda_check(struct cuda_ctx *c, cudaError_t e, const char *call, int code)
{
	if (e == cudaSuccess)
		return 0;
	return ctx_fail(c, code, "%s: %s", call, cudaGetErrorString(e));
}

/* An allocation: out of memory is DML_ENOMEM, anything else DML_EIO. */
static int cuda_check_alloc(struct cuda_ctx *c, cudaError_t e, const char *call)
{
	return cuda_check(c, e, call, e == cudaErrorMemoryAllocation ? DML_ENOMEM : DML_EIO);
}

static int blas_check(struct cuda_ctx *c, cublasStatus_t s, const char *call)
{
	if (s == CUBLAS_STATUS_SUCCESS)
		return 0;
	return ctx_fail(c, s == CUBLAS_STATUS_ALLOC_FAILED ? DML_ENOMEM : DML_EIO,
			"%s: %s (%s)", call, cublasGetStatusName(s),
			cublasGetStatusString(s));
}

/* After a kernel launch: a bad configuration shows up here, not later. */
static int launch_check(struct cuda_ctx *c, const char *kernel)
{
	return cuda_check(c, cudaGetLastError(), kernel, DML_EIO);
}

/* Every size handed to a kernel or to cuBLAS must fit an int (backend.h). */
static int fits_int(struct cuda_ctx *c, const char *op, const char *what, size_t v)
{
	if (v <= (size_t)INT_MAX)
		return 0;
	return ctx_fail(c, DML_EINVAL, "%s: %s %zu does not fit an int", op, what, v);
}

/* A gemm operand's row stride: holds the row, at least 1 (cuBLAS wants that). */
static int ld_check(struct cuda_ctx *c, const char *what, size_t ld, size_t cols)
{
	int rc = fits_int(c, "gemm", what, ld);

	if (rc)
		return rc;
	if (ld < cols || ld < 1)
		return ctx_fail(c, DML_EINVAL, "gemm: %s %zu for %zu columns", what, ld,
				cols);
	return 0;
}

/* rows x cols with row stride ld; as in the cpu backend, one row needs no stride. */
static int sizes_check(struct cuda_ctx *c, const char *op, size_t rows, size_t cols,
		       size_t ld, const char *ld_name)
{
	int rc;

	if ((rc = fits_int(c, op, "rows", rows)) || (rc = fits_int(c, op, "cols", cols)) ||
	    (rc = fits_int(c, op, ld_name, ld)))
		return rc;
	if (rows > 1 && ld < cols)
		return ctx_fail(c, DML_EINVAL, "%s: %s %zu for %zu columns", op, ld_name, ld,
				cols);
	return 0;
}

/* Make the context's device current for this host thread. */
static int enter(struct cuda_ctx *c)
{
	return cuda_check(c, cudaSetDevice(c->device), "cudaSetDevice", DML_EIO);
}

static unsigned grid_for(size_t items, size_t per_block)
{
	size_t g = (items + per_block - 1) / per_block;

	return g > GRID_MAX ? GRID_MAX : (unsigned)(g ? g : 1);
}

/* ---- kernels ----------------------------------------------------------- */

static __global__ void k_scale(float *c, long long rows, int cols, long long ldc,
			       float beta)
{
	long long total = rows * cols;

	for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < total;
	     i += (long long)gridDim.x * blockDim.x) {
		long long r = i / cols;
		long long j = i % cols;
		float *p = c + r * ldc + j;

		/* BLAS: beta = 0 overwrites (even NaN), it does not multiply. */
		*p = beta == 0.0f ? 0.0f : beta * *p;
	}
}

static __global__ void k_bias_act(float *h, long long rows, int cols, long long ldh,
				  const float *bias, long long bias_stride, int relu)
{
	long long total = rows * cols;

	for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < total;
	     i += (long long)gridDim.x * blockDim.x) {
		long long r = i / cols;
		long long j = i % cols;
		float v = h[r * ldh + j] + bias[j * bias_stride];

		if (relu && !(v > 0.0f))
			v = 0.0f;
		h[r * ldh + j] = v;
	}
}

static __global__ void k_relu_grad(float *dh, const float *h, long long rows,
				   int cols, long long ld)
{
	long long total = rows * cols;

	for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < total;
	     i += (long long)gridDim.x * blockDim.x) {
		long long off = (i / cols) * ld + i % cols;

		/* Not "h <= 0": a NaN output passes no gradient, as on the cpu. */
		if (!(h[off] > 0.0f))
			dh[off] = 0.0f;
	}
}

/*
 * Column sums: block (WARP, COL_ROWS) owns WARP adjacent columns (reads of
 * a row are coalesced); its COL_ROWS row slices each sum every COL_ROWS-th
 * row, then the slices are added in shared memory in a fixed order.
 */
static __global__ void k_col_sum(const float *dh, int rows, int cols, long long ld,
				 float alpha, float *out, long long out_stride)
{
	__shared__ float part[COL_ROWS][WARP + 1];
	long long j = (long long)blockIdx.x * WARP + threadIdx.x;
	float s = 0.0f;

	if (j < cols)
		for (long long r = threadIdx.y; r < rows; r += COL_ROWS)
			s += dh[r * ld + j];
	part[threadIdx.y][threadIdx.x] = s;
	__syncthreads();
	if (threadIdx.y == 0 && j < cols) {
		for (int y = 1; y < COL_ROWS; y++)
			s += part[y][threadIdx.x];
		out[j * out_stride] = alpha * s;
	}
}

/* The larger of two (value, index) pairs; the lower index on ties. */
__device__ static void argmax_merge(float *m, int *am, float om, int oam)
{
	if (om > *m || (om == *m && oam < *am)) {
		*m = om;
		*am = oam;
	}
}

/*
 * One warp per row: max and first argmax, the sum of exp(x - max), the
 * row's loss log(sum) - (x[label] - max) and verdict into out[2r], out[2r+1],
 * and, when dlogits is set, scale * (softmax - onehot). dlogits may alias
 * logits: every lane reads what it needs before the __syncwarp that comes
 * before the first write, and then rewrites only the elements it reads.
 */
static __global__ void k_softmax_xent(const float *logits, const float *labels,
				      long long rows, int classes, float scale,
				      float *dlogits, float *out)
{
	const int lane = threadIdx.x % WARP;
	const long long nwarps = (long long)gridDim.x * blockDim.x / WARP;

	for (long long r = (blockIdx.x * (long long)blockDim.x + threadIdx.x) / WARP;
	     r < rows; r += nwarps) {
		const float *x = logits + r * classes;
		const float lab = labels[r];
		const bool ok = lab >= 0.0f && (double)lab < (double)classes &&
				lab == floorf(lab);
		const int y = ok ? (int)lab : 0;
		const float xl = ok ? x[y] : 0.0f;
		float m = -INFINITY, s = 0.0f;
		int am = INT_MAX;

		for (int j = lane; j < classes; j += WARP)
			argmax_merge(&m, &am, x[j], j);
		for (int o = WARP / 2; o > 0; o /= 2)
			argmax_merge(&m, &am, __shfl_xor_sync(0xffffffffu, m, o),
				     __shfl_xor_sync(0xffffffffu, am, o));
		for (int j = lane; j < classes; j += WARP)
			s += expf(x[j] - m);
		for (int o = WARP / 2; o > 0; o /= 2)
			s += __shfl_xor_sync(0xffffffffu, s, o);
		if (lane == 0) {
			/* A bad label comes back instead of the loss, for the message. */
			out[2 * r] = ok ? logf(s) - (xl - m) : lab;
			out[2 * r + 1] = !ok ? VERDICT_BAD_LABEL :
				am == y ? VERDICT_RIGHT : VERDICT_WRONG;
		}
		if (dlogits) {
			float *d = dlogits + r * classes;

			__syncwarp();
			for (int j = lane; j < classes; j += WARP) {
				float p = expf(x[j] - m) / s;

				d[j] = scale * (ok && j == y ? p - 1.0f : p);
			}
		}
	}
}

/* ---- life cycle -------------------------------------------------------- */

static void ctx_free(struct cuda_ctx *c)
{
	if (!c)
		return;
	/* Best effort: the device may be gone, and close() cannot fail. */
	cudaSetDevice(c->device);
	if (c->blas)
		cublasDestroy(c->blas);
	cudaFree(c->xent_dev);
	cudaFreeHost(c->xent_host);
	if (c->stream)
		cudaStreamDestroy(c->stream);
	cudaGetLastError();
	free(c);
}

static int cuda_open(const struct dml_backend_conf *conf, void **ctx, char *err,
		     size_t errlen)
{
	struct cuda_ctx *c;
	int count = 0, dev = conf ? conf->device : 0, rc;
	cudaError_t e;

	*ctx = NULL;
	e = cudaGetDeviceCount(&count);
	if (e != cudaSuccess || count < 1) {
		if (err && errlen)
			snprintf(err, errlen, "cuda: no CUDA device (cudaGetDeviceCount: %s)",
				 e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
		/* Not sticky, but leave nothing for a later cudaGetLastError. */
		cudaGetLastError();
		return DML_ENOTFOUND;
	}
	if (dev < 0 || dev >= count) {
		if (err && errlen)
			snprintf(err, errlen, "cuda: no CUDA device %d (%d device%s)", dev,
				 count, count == 1 ? "" : "s");
		return DML_ENOTFOUND;
	}
	c = static_cast<struct cuda_ctx *>(calloc(1, sizeof(*c)));
	if (!c) {
		if (err && errlen)
			snprintf(err, errlen, "cuda: out of memory");
		return DML_ENOMEM;
	}
	c->device = dev;
	if ((rc = enter(c)) ||
	    (rc = cuda_check(c, cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking),
			     "cudaStreamCreateWithFlags", DML_EIO)) ||
	    (rc = blas_check(c, cublasCreate(&c->blas), "cublasCreate")) ||
	    (rc = blas_check(c, cublasSetStream(c->blas, c->stream), "cublasSetStream")) ||
	    /* The default, said outright: FP32, never TF32 (parity with cpu). */
	    (rc = blas_check(c, cublasSetMathMode(c->blas, CUBLAS_DEFAULT_MATH),
			     "cublasSetMathMode"))) {
		if (err && errlen)
			snprintf(err, errlen, "cuda: device %d: %s", c->device, c->err);
		ctx_free(c);
		return rc;
	}
	*ctx = c;
	return 0;
}

static void cuda_close(void *ctx)
{
	struct cuda_ctx *c = static_cast<struct cuda_ctx *>(ctx);

	if (c) {
		cudaSetDevice(c->device);
		cudaStreamSynchronize(c->stream);
	}
	ctx_free(c);
}

static const char *cuda_error(void *ctx)
{
	struct cuda_ctx *c = static_cast<struct cuda_ctx *>(ctx);

	return c ? c->err : "";
}

/* ---- memory ------------------------------------------------------------ */

static int bytes_of(struct cuda_ctx *c, const char *op, size_t n, size_t *bytes)
{
	if (n > SIZE_MAX / sizeof(float))
		return ctx_fail(c, DML_ENOMEM, "%s: %zu floats do not fit the address space",
				op, n);
	/* One float at least, so that a buffer is never NULL. */
	*bytes = (n ? n : 1) * sizeof(float);
	return 0;
}

static int cuda_alloc(void *ctx, size_t n, float **out)
{
	struct cuda_ctx *c = static_cast<struct cuda_ctx *>(ctx);
	size_t bytes = 0;
	void *p = NULL;
	int rc;

	*out = NULL;
	if ((rc = bytes_of(c, "alloc", n, &bytes)) || (rc = enter(c)) ||
	    (rc = cuda_check_alloc(c, cudaMalloc(&p, bytes), "cudaMalloc")))
		return rc;
	*out = static_cast<float *>(p);
	return 0;
}

static void cuda_free(void *ctx, float *buf)
{
	struct cuda_ctx *c = static_cast<struct cuda_ctx *>(ctx);

	if (!buf)
		return;
	if (!enter(c))
		cuda_check(c, cudaFree(buf), "cudaFree", DML_EIO);
}

static int cuda_host_alloc(void *ctx, size_t n, float **out)
{
	struct cuda_ctx *c = static_cast<struct cuda_ctx *>(ctx);
	size_t bytes = 0;
	void *p = NULL;
	int rc;

	*out = NULL;
	if ((rc = bytes_of(c, "host_alloc", n, &bytes)) || (rc = enter(c)) ||
	    (rc = cuda_check_alloc(c, cudaMallocHost(&p, bytes), "cudaMallocHost")))
		return rc;
	*out = static_cast<float *>(p);
	return 0;
}

static void cuda_host_free(void *ctx, float *buf)
{
	struct cuda_ctx *c = static_cast<struct cuda_ctx *>(ctx);

	if (!buf)
		return;
	if (!enter(c))
		cuda_check(c, cudaFreeHost(buf), "cudaFreeHost", DML_EIO);
}

static int copy(struct cuda_ctx *c, void *dst, const void *src, size_t n,
		cudaMemcpyKind kind, const char *op)
{
	size_t bytes = 0;
	int rc;

	if (!n)
		return 0;
	if ((rc = bytes_of(c, op, n, &bytes)) || (rc = enter(c)))
		return rc;
	return cuda_check(c, cudaMemcpyAsync(dst, src, bytes, kind, c->stream),
			  "cudaMemcpyAsync", DML_EIO);
}

static int cuda_upload(void *ctx, float *dev, const float *host, size_t n)
{
	return copy(static_cast<struct cuda_ctx *>(ctx), dev, host, n,
		    cudaMemcpyHostToDevice, "upload");
}

static int cuda_download(void *ctx, float *host, const float *dev, size_t n)
{
	return copy(static_cast<struct cuda_ctx *>(ctx), host, dev, n,
		    cudaMemcpyDeviceToHost, "download");
}

static int cuda_sync(void *ctx)
{
	struct cuda_ctx *c = static_cast<struct cuda_ctx *>(ctx);
	int rc = enter(c);

	if (rc)
		return rc;
	return cuda_check(c, cudaStreamSynchronize(c->stream), "cudaStreamSynchronize",
			  DML_EIO);
}

/* ---- math -------------------------------------------------------------- */

/*
 * Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T, and a
 * row-major matrix read column-major is its transpose: so cuBLAS gets the
 * operands swapped, m and n swapped, and each operand's own trans flag.
 */
static int cuda_gemm(void *ctx, int trans_a, int trans_b, size_t m, size_t n, size_t k,
		     float alpha, const float *a, size_t lda, const float *b, size_t ldb,
		     float beta, float *cm, size_t ldc)
{
	struct cuda_ctx *c = static_cast<struct cuda_ctx *>(ctx);
	int rc;

	if ((rc = fits_int(c, "gemm", "m", m)) || (rc = fits_int(c, "gemm", "n", n)) ||
	    (rc = fits_int(c, "gemm", "k", k)) ||
	    (rc = ld_check(c, "lda", lda, trans_a ? m : k)) ||
	    (rc = ld_check(c, "ldb", ldb, trans_b ? k : n)) ||
	    (rc = ld_check(c, "ldc", ldc, n)))
		return rc;
	if (!m || !n)
		return 0;
	if ((rc = enter(c)))
		return rc;
	if (!k) {
		/* op(A) op(B) is zero: c = beta * c, without asking cuBLAS about k = 0. */
		if (beta == 1.0f)
			return 0;
		k_scale<<<grid_for(m * n, BLOCK), BLOCK, 0, c->stream>>>(
			cm, (long long)m, (int)n, (long long)ldc, beta);
		return launch_check(c, "gemm scale kernel");
	}
	return blas_check(c, cublasSgemm(c->blas, trans_b ? CUBLAS_OP_T : CUBLAS_OP_N,
					 trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, (int)n, (int)m,
					 (int)k, &alpha, b, (int)ldb, a, (int)lda, &beta, cm,
					 (int)ldc),
			  "cublasSgemm");
}

static int cuda_bias_act(void *ctx, float *h, size_t rows, size_t cols, size_t ldh,
			 const float *bias, size_t bias_stride, int relu)
{
	struct cuda_ctx *c = static_cast<struct cuda_ctx *>(ctx);
	int rc;

	if ((rc = sizes_check(c, "bias_act", rows, cols, ldh, "ldh")) ||
	    (rc = fits_int(c, "bias_act", "bias_stride", bias_stride)))
		return rc;
	if (!rows || !cols)
		return 0;
	if ((rc = enter(c)))
		return rc;
	k_bias_act<<<grid_for(rows * cols, BLOCK), BLOCK, 0, c->stream>>>(
		h, (long long)rows, (int)cols, (long long)ldh, bias, (long long)bias_stride,
		relu ? 1 : 0);
	return launch_check(c, "bias_act kernel");
}

static int cuda_relu_grad(void *ctx, float *dh, const float *h, size_t rows, size_t cols,
			  size_t ld)
{
	struct cuda_ctx *c = static_cast<struct cuda_ctx *>(ctx);
	int rc;

	if ((rc = sizes_check(c, "relu_grad", rows, cols, ld, "ld")))
		return rc;
	if (!rows || !cols)
		return 0;
	if ((rc = enter(c)))
		return rc;
	k_relu_grad<<<grid_for(rows * cols, BLOCK), BLOCK, 0, c->stream>>>(
		dh, h, (long long)rows, (int)cols, (long long)ld);
	return launch_check(c, "relu_grad kernel");
}

static int cuda_col_sum(void *ctx, const float *dh, size_t rows, size_t cols, size_t ld,
			float alpha, float *out, size_t out_stride)
{
	struct cuda_ctx *c = static_cast<struct cuda_ctx *>(ctx);
	int rc;

	if ((rc = sizes_check(c, "col_sum", rows, cols, ld, "ld")) ||
	    (rc = fits_int(c, "col_sum", "out_stride", out_stride)))
		return rc;
	if (!cols)
		return 0;
	if (out_stride < 1 && cols > 1)
		return ctx_fail(c, DML_EINVAL, "col_sum: out_stride 0 for %zu columns", cols);
	if ((rc = enter(c)))
		return rc;
	/* rows = 0 is fine: every sum is zero and still written. */
	k_col_sum<<<(unsigned)((cols + WARP - 1) / WARP), dim3(WARP, COL_ROWS), 0,
		    c->stream>>>(dh, (int)rows, (int)cols, (long long)ld, alpha, out,
				 (long long)out_stride);
	return launch_check(c, "col_sum kernel");
}

/* Room for rows rows of softmax_xent results, on the device and pinned. */
static int xent_reserve(struct cuda_ctx *c, size_t rows)
{
	size_t want = (rows + 1023) / 1024 * 1024;
	void *d = NULL, *h = NULL;
	int rc;

	if (rows <= c->xent_rows)
		return 0;
	if ((rc = cuda_check_alloc(c, cudaMalloc(&d, want * 2 * sizeof(float)),
				   "cudaMalloc")) ||
	    (rc = cuda_check_alloc(c, cudaMallocHost(&h, want * 2 * sizeof(float)),
				   "cudaMallocHost"))) {
		cudaFree(d);
		return rc;
	}
	/* Every earlier softmax_xent synced, so nothing still uses the old ones. */
	cudaFree(c->xent_dev);
	cudaFreeHost(c->xent_host);
	c->xent_dev = static_cast<float *>(d);
	c->xent_host = static_cast<float *>(h);
	c->xent_rows = want;
	return 0;
}

static int cuda_softmax_xent(void *ctx, const float *logits, const float *labels,
			     size_t rows, size_t classes, float scale, float *dlogits,
			     double *loss, uint64_t *correct)
{
	struct cuda_ctx *c = static_cast<struct cuda_ctx *>(ctx);
	double sum = 0.0;
	uint64_t right = 0;
	int rc;

	if ((rc = fits_int(c, "softmax_xent", "rows", rows)) ||
	    (rc = fits_int(c, "softmax_xent", "classes", classes)))
		return rc;
	if (!rows)
		return 0;
	if (!classes)
		return ctx_fail(c, DML_EINVAL, "softmax_xent: 0 classes");
	if ((rc = enter(c)) || (rc = xent_reserve(c, rows)))
		return rc;
	k_softmax_xent<<<grid_for(rows, BLOCK / WARP), BLOCK, 0, c->stream>>>(
		logits, labels, (long long)rows, (int)classes, scale, dlogits, c->xent_dev);
	if ((rc = launch_check(c, "softmax_xent kernel")) ||
	    (rc = cuda_check(c, cudaMemcpyAsync(c->xent_host, c->xent_dev,
						rows * 2 * sizeof(float),
						cudaMemcpyDeviceToHost, c->stream),
			     "cudaMemcpyAsync", DML_EIO)) ||
	    (rc = cuda_check(c, cudaStreamSynchronize(c->stream), "cudaStreamSynchronize",
			     DML_EIO)))
		return rc;
	for (size_t r = 0; r < rows; r++) {
		float verdict = c->xent_host[2 * r + 1];

		if (verdict == VERDICT_BAD_LABEL)
			return ctx_fail(c, DML_EINVAL, "softmax_xent: row %zu: label %g is not "
					"a class of 0..%zu", r, (double)c->xent_host[2 * r],
					classes - 1);
		sum += c->xent_host[2 * r];
		right += verdict == VERDICT_RIGHT;
	}
	*loss += sum;
	*correct += right;
	return 0;
}

/* In the order of struct dml_backend_ops's fields. */
extern "C" const struct dml_backend_ops dml_backend_cuda = {
	"cuda",
	0,
	cuda_open,
	cuda_close,
	cuda_error,
	cuda_alloc,
	cuda_free,
	cuda_host_alloc,
	cuda_host_free,
	cuda_upload,
	cuda_download,
	cuda_sync,
	cuda_gemm,
	cuda_bias_act,
	cuda_relu_grad,
	cuda_col_sum,
	cuda_softmax_xent,
};
