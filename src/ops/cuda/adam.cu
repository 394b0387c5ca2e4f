// duet_adam_update on the GPU: one kernel over every tensor of the list,
// each cut into chunks of kChunk elements, one block per chunk, running
// ops_math.h's duet__adam_element (the CPU loop's own).
#include "cuda/cuda.h"
#include "ops/cuda/cuda_ops.h"

#include <stdlib.h>

namespace {

constexpr int64_t kChunk = 16384;
constexpr unsigned kThreads = 256;

struct chunk {
    float *x, *m, *v;
    const float *g;
    int64_t len;
    duet__adam_consts k;
};

__global__ void adam_chunks(const chunk *chunks) {
    const chunk c = chunks[blockIdx.x];
    for (int64_t j = threadIdx.x; j < c.len; j += kThreads)
        duet__adam_element(&c.x[j], &c.m[j], &c.v[j], c.g[j], &c.k);
}

} // namespace

extern "C" int duet__cuda_adam(int dev, size_t n, duet_tensor *const *params,
                               duet_tensor *const *exp_avg, duet_tensor *const *exp_avg_sq,
                               const int64_t *steps, const duet_adam_hparams *hp) {
    const char *op = "adam_update";
    size_t count = 0;
    for (size_t i = 0; i < n; i++) count += (size_t)((params[i]->numel + kChunk - 1) / kChunk);
    if (count == 0) return DUET_OK;
    if (count > 0x7fffffffu)
        return duet__error(DUET_EUNSUPPORTED, "%s: %zu chunks exceed one launch", op, count);
    chunk *host = (chunk *)malloc(count * sizeof *host);
    if (host == nullptr) return duet__error(DUET_ENOMEM, "%s: out of memory for %zu chunks", op, count);
    size_t c = 0;
    for (size_t i = 0; i < n; i++) {
        duet__adam_consts k;
        duet__adam_consts_make(hp, steps[i], &k);
        for (int64_t s = 0; s < params[i]->numel; s += kChunk) {
            const int64_t len = params[i]->numel - s < kChunk ? params[i]->numel - s : kChunk;
            host[c++] = chunk{params[i]->data + s, exp_avg[i]->data + s, exp_avg_sq[i]->data + s,
                              params[i]->grad + s, len, k};
        }
    }
    cudaStream_t s;
    void *table = nullptr;
    int rc = duet__cuda_stream(dev, op, &s);
    if (rc == DUET_OK) rc = duet__cuda_alloc(dev, count * sizeof *host, false, op, &table);
    // From pageable memory the copy has taken the bytes when it returns, so
    // host can be freed below while the kernel is still queued.
    if (rc == DUET_OK)
        rc = duet__cuda_status(cudaMemcpyAsync(table, host, count * sizeof *host,
                                               cudaMemcpyHostToDevice, s),
                               op, "cudaMemcpyAsync", __FILE__, __LINE__);
    if (rc == DUET_OK) {
        adam_chunks<<<(unsigned)count, kThreads, 0, s>>>((const chunk *)table);
        rc = duet__cuda_status(cudaGetLastError(), op, "launch of adam_chunks", __FILE__, __LINE__);
    }
    duet__cuda_free(dev, table);
    free(host);
    return rc;
}
