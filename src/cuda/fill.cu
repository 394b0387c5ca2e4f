// Filling device memory with a float (duet__cuda_fill_f32).
#include "cuda/cuda_internal.h"

// out (n) = v. A grid-stride loop, so that any n fits in one launch.
static __global__ void fill_f32(float *out, float v, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        out[i] = v;
}

extern "C" int duet__cuda_fill_f32(int dev, float *p, size_t n, float v, const char *op) {
    if (n == 0) return DUET_OK;
    cudaStream_t s;
    DUET_TRY(duet__cuda_stream(dev, op, &s));
    const unsigned threads = 256;
    size_t blocks = (n + threads - 1) / threads;
    if (blocks > 65535u * 8u) blocks = 65535u * 8u;
    fill_f32<<<(unsigned)blocks, threads, 0, s>>>(p, v, n);
    DUET_CUDA_LAUNCH_CHECK(op, "fill_f32");
    return DUET_OK;
}
