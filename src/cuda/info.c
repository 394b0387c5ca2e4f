/* Library versions and the GPUs, for duet info (cuda/cuda.h,
 * duet_cuda_info_print in base.h). */
#include "cuda/cuda_internal.h"

void duet__cuda_versions_get(duet__cuda_versions *out) {
    *out = (duet__cuda_versions){0};
    if (cudaDriverGetVersion(&out->driver) != cudaSuccess) out->driver = 0;
    if (cudaRuntimeGetVersion(&out->runtime) != cudaSuccess) out->runtime = 0;
    (void)cudaGetLastError();
    out->cudnn = cudnnGetVersion();
    if (ncclGetVersion(&out->nccl) != ncclSuccess) out->nccl = 0;
    out->cublas = cublasLtGetVersion();
}

static void cuda_version(char *buf, size_t size, int v) {
    if (v == 0)
        snprintf(buf, size, "none");
    else
        snprintf(buf, size, "%d.%d", v / 1000, v % 1000 / 10);
}

int duet__cuda_info_print(FILE *f) {
    duet__cuda_versions v;
    duet__cuda_versions_get(&v);
    char drv[16], rt[16];
    cuda_version(drv, sizeof drv, v.driver);
    cuda_version(rt, sizeof rt, v.runtime);
    fprintf(f, "  CUDA:       runtime %s, driver %s%s\n", rt, drv,
            v.driver == 0 ? " (no NVIDIA driver loaded)" : "");
    fprintf(f, "  cuDNN:      %zu.%zu.%zu\n", v.cudnn / 10000, v.cudnn % 10000 / 100, v.cudnn % 100);
    fprintf(f, "  cuBLASLt:   %zu.%zu.%zu\n", v.cublas / 10000, v.cublas % 10000 / 100,
            v.cublas % 100);
    fprintf(f, "  NCCL:       %d.%d.%d\n", v.nccl / 10000, v.nccl % 10000 / 100, v.nccl % 100);
    int n = duet__cuda_device_count();
    if (n == 0) {
        fprintf(f, "  GPUs:       no GPU visible\n");
        return DUET_OK;
    }
    for (int i = 0; i < n; i++) {
        struct cudaDeviceProp p;
        if (cudaGetDeviceProperties(&p, i) != cudaSuccess) {
            fprintf(f, "  GPU %d:      (cudaGetDeviceProperties failed: %s)\n", i,
                    cudaGetErrorString(cudaGetLastError()));
            continue;
        }
        fprintf(f, "  GPU %d:      cuda:%d %s, sm_%d%d, %d SMs, %.1f GiB\n", i, i, p.name, p.major,
                p.minor, p.multiProcessorCount, (double)p.totalGlobalMem / (1 << 30));
    }
    return DUET_OK;
}
