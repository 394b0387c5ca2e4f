/* CUDA, cuBLAS, cuDNN and NCCL statuses as duet statuses with a message
 * naming the op, the call and the place (cuda/cuda.h). */
#include "cuda/cuda_internal.h"

#include <string.h>

/* The part of a path from "src/" (or "tests/") on, so that messages read
 * the same from any build folder. */
static const char *short_path(const char *file) {
    const char *p = strstr(file, "/src/");
    if (p == NULL) p = strstr(file, "/tests/");
    return p != NULL ? p + 1 : file;
}

static int fail(int status, const char *op, const char *call, const char *name,
                const char *text, const char *file, int line) {
    return duet__error(status, "%s: %s failed: %s (%s) at %s:%d", op != NULL ? op : "cuda", call,
                       name, text, short_path(file), line);
}

int duet__cuda_status_code(cudaError_t e) {
    switch (e) {
    case cudaSuccess: return DUET_OK;
    case cudaErrorMemoryAllocation: return DUET_ENOMEM;
    case cudaErrorNotSupported: return DUET_EUNSUPPORTED;
    default: return DUET_EDEVICE;
    }
}

int duet__cuda_status(cudaError_t e, const char *op, const char *call, const char *file, int line) {
    if (e == cudaSuccess) return DUET_OK;
    return fail(duet__cuda_status_code(e), op, call, cudaGetErrorName(e), cudaGetErrorString(e),
                file, line);
}

int duet__cublas_status_code(cublasStatus_t s) {
    switch (s) {
    case CUBLAS_STATUS_SUCCESS: return DUET_OK;
    case CUBLAS_STATUS_ALLOC_FAILED: return DUET_ENOMEM;
    case CUBLAS_STATUS_NOT_SUPPORTED: return DUET_EUNSUPPORTED;
    default: return DUET_EDEVICE;
    }
}

int duet__cublas_status(cublasStatus_t s, const char *op, const char *call, const char *file,
                        int line) {
    if (s == CUBLAS_STATUS_SUCCESS) return DUET_OK;
    return fail(duet__cublas_status_code(s), op, call, cublasGetStatusName(s),
                cublasGetStatusString(s), file, line);
}

int duet__cudnn_status_code(cudnnStatus_t s) {
    if (s == CUDNN_STATUS_SUCCESS) return DUET_OK;
    if (s == CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED ||
        s == CUDNN_STATUS_INTERNAL_ERROR_DEVICE_ALLOCATION_FAILED)
        return DUET_ENOMEM;
    /* The 3000s are "not supported" of every kind (shape, layout, data type). */
    if (s >= CUDNN_STATUS_NOT_SUPPORTED && s < CUDNN_STATUS_INTERNAL_ERROR)
        return DUET_EUNSUPPORTED;
    return DUET_EDEVICE;
}

int duet__cudnn_status(cudnnStatus_t s, const char *op, const char *call, const char *file,
                       int line) {
    if (s == CUDNN_STATUS_SUCCESS) return DUET_OK;
    char name[32];
    snprintf(name, sizeof name, "cuDNN status %d", (int)s);
    return fail(duet__cudnn_status_code(s), op, call, name, cudnnGetErrorString(s), file, line);
}

int duet__nccl_status_code(ncclResult_t r) {
    switch (r) {
    case ncclSuccess: return DUET_OK;
    case ncclInvalidArgument:
    case ncclInvalidUsage: return DUET_EINVAL;
    default: return DUET_EDEVICE;
    }
}

int duet__nccl_status(ncclResult_t r, const char *op, const char *call, const char *file, int line) {
    if (r == ncclSuccess) return DUET_OK;
    char name[32];
    snprintf(name, sizeof name, "NCCL result %d", (int)r);
    return fail(duet__nccl_status_code(r), op, call, name, ncclGetErrorString(r), file, line);
}
