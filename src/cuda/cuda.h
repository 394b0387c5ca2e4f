/* The CUDA layer's header: what the layers above may use (src/ops/cuda/,
 * the device calls of src/base/device.c, comm's NCCL backend, the gpu
 * tests): status mapping, devices and streams, the caching allocator's
 * calls, versions. The allocator's own logic is cuda_internal.h's, private
 * to src/cuda/. Compiled only with the CUDA toolkit (DUET_HAVE_CUDA). Not
 * installed. See docs/architecture.md, "Devices". */
#ifndef DUET_CUDA_H
#define DUET_CUDA_H

#include "duet/base.h"

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <cudnn.h>
#include <nccl.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- statuses (status.c) --------------------------------------------------
 * Each library's status becomes a duet status with a message naming the op
 * (the duet op or module that made the call), the library call, the
 * library's name and text for the status, and where: "relu: cudaLaunchKernel
 * failed: cudaErrorInvalidConfiguration (invalid configuration argument) at
 * src/ops/cuda/pointwise.cu:40". Out of memory -> DUET_ENOMEM, not supported
 * -> DUET_EUNSUPPORTED, NCCL's invalid argument or usage -> DUET_EINVAL, the
 * rest DUET_EDEVICE. DUET_OK for success (no message). */
int duet__cuda_status(cudaError_t e, const char *op, const char *call, const char *file, int line);
int duet__cublas_status(cublasStatus_t s, const char *op, const char *call, const char *file,
                        int line);
int duet__cudnn_status(cudnnStatus_t s, const char *op, const char *call, const char *file,
                       int line);
int duet__nccl_status(ncclResult_t r, const char *op, const char *call, const char *file, int line);
/* The duet status each maps to, without a message (for tests). */
int duet__cuda_status_code(cudaError_t e);
int duet__cublas_status_code(cublasStatus_t s);
int duet__cudnn_status_code(cudnnStatus_t s);
int duet__nccl_status_code(ncclResult_t r);

/* `DUET_CUDA_TRY("relu", cudaMemsetAsync(p, 0, n, s));` returns the mapped
 * status from the enclosing function when the call fails. */
#define DUET__LIB_TRY(fn, op, call)                                            \
    do {                                                                       \
        int duet__lib_rc = fn((call), (op), #call, __FILE__, __LINE__);        \
        if (duet__lib_rc != DUET_OK) return duet__lib_rc;                      \
    } while (0)
#define DUET_CUDA_TRY(op, call) DUET__LIB_TRY(duet__cuda_status, op, call)
#define DUET_CUBLAS_TRY(op, call) DUET__LIB_TRY(duet__cublas_status, op, call)
#define DUET_CUDNN_TRY(op, call) DUET__LIB_TRY(duet__cudnn_status, op, call)
#define DUET_NCCL_TRY(op, call) DUET__LIB_TRY(duet__nccl_status, op, call)
/* After a kernel launch: the launch's own error (bad configuration, no
 * kernel image for this GPU), named as the kernel's launch. */
#define DUET_CUDA_LAUNCH_CHECK(op, kernel)                                     \
    do {                                                                       \
        int duet__lib_rc = duet__cuda_status(cudaGetLastError(), (op),          \
                                             "launch of " kernel, __FILE__, __LINE__); \
        if (duet__lib_rc != DUET_OK) return duet__lib_rc;                      \
    } while (0)

/* ---- devices and streams (runtime.c) --------------------------------------- */

/* CUDA devices visible (0 without a driver or device; never an error). */
int duet__cuda_device_count(void);
/* Makes device `dev` current on this thread (cudaSetDevice when it is not). */
int duet__cuda_use(int dev, const char *op);
/* The compute stream of device `dev` for this process: a non-blocking
 * stream made on first use (the device made current), on which every duet
 * launch, library call and copy for that device is ordered. */
int duet__cuda_stream(int dev, const char *op, cudaStream_t *out);
/* Waits until the device's compute stream has run everything queued. */
int duet__cuda_sync(int dev, const char *op);

/* ---- memory (alloc.c, runtime.c) ----------------------------------------- */

/* The caching allocator of device `dev`, on its compute stream: bytes
 * (rounded up to 512) that stay valid until duet__cuda_free; zeroed (on
 * the stream) when zero. DUET_ENOMEM names the request, what is live and
 * what is cached. */
int duet__cuda_alloc(int dev, size_t bytes, bool zero, const char *op, void **out);
void duet__cuda_free(int dev, void *p);
/* p, from duet__cuda_alloc on device dev, is also used on `stream`: its
 * block is not reused after duet__cuda_free until that stream has run what
 * was queued on it by then (an event). */
int duet__cuda_record_stream(int dev, void *p, cudaStream_t stream);
void duet__cuda_alloc_stats(int dev, size_t *live, size_t *peak, size_t *reserved);
void duet__cuda_alloc_reset_peak(int dev);
/* cudaMalloc and cudaFree calls made so far on device dev (a training step
 * after the first makes none). */
void duet__cuda_alloc_counts(int dev, uint64_t *mallocs, uint64_t *frees);
/* Returns the cached free segments of device dev to the driver. */
int duet__cuda_empty_cache(int dev);

/* Copies between host and device memory (either side may be either), on
 * the compute stream of the device side; returns when the host side may be
 * used. Device to device on the destination's stream. */
int duet__cuda_copy(duet_device dst_dev, void *dst, duet_device src_dev, const void *src,
                    size_t bytes, const char *op);
/* n floats at p (device dev) = v, on its compute stream (fill.cu). */
int duet__cuda_fill_f32(int dev, float *p, size_t n, float v, const char *op);

/* ---- versions (info.c) ---------------------------------------------------- */
typedef struct duet__cuda_versions {
    int driver, runtime; /* 13000 = 13.0 */
    size_t cudnn;        /* 91400 = 9.14.0 */
    int nccl;            /* 22809 = 2.28.9 */
    size_t cublas;
} duet__cuda_versions;
void duet__cuda_versions_get(duet__cuda_versions *out);
/* duet_cuda_info_print's lines for a CUDA build. */
int duet__cuda_info_print(FILE *f);

#ifdef __cplusplus
}
#endif
#endif
