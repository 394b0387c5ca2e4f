/* Private helpers shared by the GEMM-based ops (conv, linear, batch norm,
 * pooling) and bench/ops.c. Not installed. */
#ifndef DUET_OPS_INTERNAL_H
#define DUET_OPS_INTERNAL_H

#include "duet/ops.h"
#include "tensor/tensor_internal.h"

/* Configures the kernel path with its defaults unless the process already
 * did (duet_kernels_configure) and returns the GEMM thread count in effect.
 * duet_sgemm calls it; code that calls a GEMM library directly (the
 * benchmark) calls it first. */
int duet__blas_init(void);

/* The OpenMP threads for a loop over `work` floats of memory-bound work
 * (im2col, batch norm, pooling, elementwise): 1 below about 32K floats,
 * where waking the team costs more than it saves, else up to duet's
 * configured thread count (DUET_NUM_THREADS / num_threads, the GEMM's) at
 * about 16K floats per thread. Use it as `num_threads(duet__par_threads(n))`
 * on loops whose iterations write disjoint outputs, so that results do not
 * depend on the count. */
#define DUET__PAR_MIN_WORK ((int64_t)1 << 15)
int duet__par_threads(int64_t work);

/* gemm_bf16.c: duet_sgemm's mixed-precision path (alpha 1, beta 0 or 1);
 * DUET_EUNSUPPORTED when oneDNN cannot make the matmul, DUET_ENOMEM. Uses
 * scratch slot 3. duet__bf16_check runs a small product and names the
 * implementation oneDNN chose. */
int duet__sgemm_bf16(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
                     const float *a, int64_t lda, const float *b, int64_t ldb, float beta,
                     float *c, int64_t ldc);
int duet__bf16_check(char *impl, size_t size);

/* Per-thread scratch buffers, reused across calls so that an op does not
 * allocate its im2col columns on every call (slots 0-2: conv; 3: the bf16
 * GEMM's rounded inputs). Slot i in
 * [0, DUET__SCRATCH_SLOTS) holds at least nfloats floats (64-byte aligned,
 * uninitialised) until the next call for the same slot on this thread, which
 * may move it. NULL when out of memory (message set). Freed at thread exit. */
#define DUET__SCRATCH_SLOTS 4
float *duet__scratch(int slot, size_t nfloats);

/* In-place variants for networks that know an intermediate is dead: x (a)
 * is overwritten with the result, which comes back as a view of it. They
 * fall back to the copying op unless duet__overwritable(x): x owns its data
 * and is referenced only by the caller and by the node that produced it, and
 * that op's backward never reads its output's values (conv2d, linear,
 * batch_norm2d, add), or x has no history at all. The caller must not read
 * x's old values afterwards. Same results and gradients as duet_relu,
 * duet_leaky_relu (slope >= 0, else the copying op) and duet_add(a, b). */
bool duet__overwritable(const duet_tensor *x);
int duet__relu_inplace(duet_tensor *x, duet_tensor **out);
int duet__leaky_relu_inplace(duet_tensor *x, float negative_slope, duet_tensor **out);
int duet__add_inplace(duet_tensor *a, duet_tensor *b, duet_tensor **out);

/* Sum of n floats in eight independent double lanes: the loop vectorises
 * (one accumulator is a long dependency chain the compiler may not
 * reorder), and double keeps the total close to exact for activations of
 * millions of values. The one summation the ops use. */
static inline double duet__sum_f32(const float *x, int64_t n) {
    double acc[8] = {0};
    int64_t q = 0;
    for (; q + 8 <= n; q += 8)
        for (int l = 0; l < 8; l++) acc[l] += x[q + l];
    double s = 0.0;
    for (; q < n; q++) s += x[q];
    for (int l = 0; l < 8; l++) s += acc[l];
    return s;
}

#endif
