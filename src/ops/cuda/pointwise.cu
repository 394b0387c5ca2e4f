// Activations and losses on the GPU: ops_math.h's per-element functions
// (the CPU ops' own) in grid-stride kernels.
#include "cuda/cuda.h"
#include "ops/cuda/cuda_ops.h"
#include "ops/ops_math.h"

namespace {

constexpr unsigned kThreads = 256;
// Blocks for n elements, capped: a grid-stride loop covers the rest.
unsigned blocks_for(int64_t n) {
    int64_t b = (n + kThreads - 1) / kThreads;
    return (unsigned)(b < 65536 ? b : 65536);
}

__device__ int64_t first_index() { return blockIdx.x * (int64_t)blockDim.x + threadIdx.x; }
__device__ int64_t grid_stride() { return (int64_t)gridDim.x * blockDim.x; }

// out (n) = act(x)
__global__ void act_forward(float *out, const float *x, duet__cuda_act act, float slope,
                            int64_t n) {
    for (int64_t i = first_index(); i < n; i += grid_stride()) {
        const float v = x[i];
        float y;
        switch (act) {
        case DUET__ACT_RELU: y = duet__relu(v); break;
        case DUET__ACT_LEAKY_RELU: y = duet__leaky_relu(v, slope); break;
        case DUET__ACT_SIGMOID: y = duet__sigmoid(v); break;
        case DUET__ACT_ELU: y = duet__elu(v, slope); break;
        default: y = duet__tanh(v); break;
        }
        out[i] = y;
    }
}

// gx (n) += d act(gout); saved: the input (relu, leaky_relu) or output
__global__ void act_backward(float *gx, const float *gout, const float *saved,
                             duet__cuda_act act, float slope, int64_t n) {
    for (int64_t i = first_index(); i < n; i += grid_stride()) {
        const float g = gout[i], s = saved[i];
        float d;
        switch (act) {
        case DUET__ACT_RELU: d = duet__leaky_relu_grad(g, s > 0.0f, 0.0f); break;
        case DUET__ACT_LEAKY_RELU: d = duet__leaky_relu_grad(g, s > 0.0f, slope); break;
        case DUET__ACT_SIGMOID: d = duet__sigmoid_grad(g, s); break;
        case DUET__ACT_ELU: d = duet__elu_grad(g, s, slope); break;
        default: d = duet__tanh_grad(g, s); break;
        }
        gx[i] += d;
    }
}

// The partial sums' plain-sum kind (duet__cuda_sum), beside the losses'.
constexpr int kPlainSum = 3;

__device__ float loss_term(int loss, float p, float t) {
    switch (loss) {
    case kPlainSum: return p;
    case DUET__LOSS_L1: return duet__l1_term(p, t);
    case DUET__LOSS_MSE: return duet__mse_term(p, t);
    default: return duet__bce_logits_term(p, t);
    }
}

// partial[blockIdx.x] = this block's share of the sum of the terms, in
// double: each thread sums its grid-stride elements in order, then the
// block's tree in shared memory, always in the same order.
__global__ void loss_partial(double *partial, const float *p, const float *t, int64_t tstride,
                             int loss, int64_t n) {
    __shared__ double s[kThreads];
    double acc = 0.0;
    for (int64_t i = first_index(); i < n; i += grid_stride())
        acc += loss_term(loss, p[i], t != nullptr ? t[i * tstride] : 0.0f);
    s[threadIdx.x] = acc;
    __syncthreads();
    for (unsigned w = kThreads / 2; w > 0; w /= 2) {
        if (threadIdx.x < w) s[threadIdx.x] += s[threadIdx.x + w];
        __syncthreads();
    }
    if (threadIdx.x == 0) partial[blockIdx.x] = s[0];
}

// *sum = partial[0, count) in a fixed order (one block).
__global__ void sum_partials(double *sum, const double *partial, unsigned count) {
    __shared__ double s[kThreads];
    double acc = 0.0;
    for (unsigned i = threadIdx.x; i < count; i += kThreads) acc += partial[i];
    s[threadIdx.x] = acc;
    __syncthreads();
    for (unsigned w = kThreads / 2; w > 0; w /= 2) {
        if (threadIdx.x < w) s[threadIdx.x] += s[threadIdx.x + w];
        __syncthreads();
    }
    if (threadIdx.x == 0) *sum = s[0];
}

// g (n) += the loss's gradient, c carrying weight, direction and 1/n
__global__ void loss_backward(float *g, const float *p, const float *t, int64_t tstride,
                              duet__cuda_loss loss, float c, int64_t n) {
    for (int64_t i = first_index(); i < n; i += grid_stride()) {
        const float pi = p[i], ti = t[i * tstride];
        float d;
        switch (loss) {
        case DUET__LOSS_L1: d = duet__l1_grad(pi, ti, c); break;
        case DUET__LOSS_MSE: d = duet__mse_grad(pi, ti, c); break;
        default: d = duet__bce_logits_grad(pi, ti, c); break;
        }
        g[i] += d;
    }
}

// out (n) = a op b
__global__ void binary_forward(float *out, const float *a, const float *b, duet__cuda_binary op,
                               int64_t n) {
    for (int64_t i = first_index(); i < n; i += grid_stride()) {
        const float x = a[i], y = b[i];
        out[i] = op == DUET__BIN_ADD ? x + y : op == DUET__BIN_SUB ? x - y : x * y;
    }
}

// g (n) += s * gout, or g += gout * other when other is not null
__global__ void grad_accumulate(float *g, const float *gout, const float *other, float s,
                                int64_t n) {
    for (int64_t i = first_index(); i < n; i += grid_stride())
        g[i] += other != nullptr ? gout[i] * other[i] : s * gout[i];
}

// g (n) += s
__global__ void add_scalar(float *g, float s, int64_t n) {
    for (int64_t i = first_index(); i < n; i += grid_stride()) g[i] += s;
}

// y (rows, cols) = b (cols) on every row
__global__ void broadcast_rows(float *y, const float *b, int64_t rows, int64_t cols) {
    for (int64_t i = first_index(); i < rows * cols; i += grid_stride()) y[i] = b[i % cols];
}

// db (cols) += the sum of dy (rows, cols) over its rows, each column in
// row order
__global__ void col_sum_acc(float *db, const float *dy, int64_t rows, int64_t cols) {
    for (int64_t c = first_index(); c < cols; c += grid_stride()) {
        float s = 0.0f;
        for (int64_t r = 0; r < rows; r++) s += dy[r * cols + c];
        db[c] += s;
    }
}

// out (n) = s * x
__global__ void scale_forward(float *out, const float *x, float s, int64_t n) {
    for (int64_t i = first_index(); i < n; i += grid_stride()) out[i] = s * x[i];
}

const char *act_name(duet__cuda_act act) {
    switch (act) {
    case DUET__ACT_RELU: return "relu";
    case DUET__ACT_LEAKY_RELU: return "leaky_relu";
    case DUET__ACT_SIGMOID: return "sigmoid";
    case DUET__ACT_ELU: return "elu";
    default: return "tanh";
    }
}

const char *loss_name(duet__cuda_loss loss) {
    switch (loss) {
    case DUET__LOSS_L1: return "l1_loss";
    case DUET__LOSS_MSE: return "mse_loss";
    default: return "bce_with_logits";
    }
}

} // namespace

extern "C" int duet__cuda_act_forward(int dev, duet__cuda_act act, float *out, const float *x,
                                      float slope, int64_t n) {
    const char *op = act_name(act);
    if (n <= 0) return DUET_OK;
    cudaStream_t s;
    DUET_TRY(duet__cuda_stream(dev, op, &s));
    act_forward<<<blocks_for(n), kThreads, 0, s>>>(out, x, act, slope, n);
    DUET_CUDA_LAUNCH_CHECK(op, "act_forward");
    return DUET_OK;
}

extern "C" int duet__cuda_act_backward(int dev, duet__cuda_act act, float *gx, const float *gout,
                                       const float *saved, float slope, int64_t n) {
    const char *op = act_name(act);
    if (n <= 0) return DUET_OK;
    cudaStream_t s;
    DUET_TRY(duet__cuda_stream(dev, op, &s));
    act_backward<<<blocks_for(n), kThreads, 0, s>>>(gx, gout, saved, act, slope, n);
    DUET_CUDA_LAUNCH_CHECK(op, "act_backward");
    return DUET_OK;
}

// *sum = the sum of the terms of `kind` over n, in a fixed order.
static int partial_sums(int dev, const char *op, int kind, double *sum, const float *p,
                        const float *t, int64_t tstride, int64_t n) {
    cudaStream_t s;
    DUET_TRY(duet__cuda_stream(dev, op, &s));
    const unsigned blocks = n > 0 ? (blocks_for(n) < 1024 ? blocks_for(n) : 1024) : 1;
    void *partial = nullptr;
    DUET_TRY(duet__cuda_alloc(dev, blocks * sizeof(double), false, op, &partial));
    loss_partial<<<blocks, kThreads, 0, s>>>((double *)partial, p, t, tstride, kind, n);
    int rc = duet__cuda_status(cudaGetLastError(), op, "launch of loss_partial", __FILE__, __LINE__);
    if (rc == DUET_OK) {
        sum_partials<<<1, kThreads, 0, s>>>(sum, (const double *)partial, blocks);
        rc = duet__cuda_status(cudaGetLastError(), op, "launch of sum_partials", __FILE__,
                               __LINE__);
    }
    // Stream-ordered: the next request on this stream runs after both kernels.
    duet__cuda_free(dev, partial);
    return rc;
}

extern "C" int duet__cuda_loss_sum(int dev, duet__cuda_loss loss, double *sum, const float *p,
                                   const float *t, int64_t tstride, int64_t n) {
    return partial_sums(dev, loss_name(loss), (int)loss, sum, p, t, tstride, n);
}

extern "C" int duet__cuda_sum(int dev, const char *op, double *sum, const float *x, int64_t n) {
    return partial_sums(dev, op, kPlainSum, sum, x, nullptr, 0, n);
}

extern "C" int duet__cuda_add_scalar(int dev, const char *op, float *g, float s, int64_t n) {
    if (n <= 0) return DUET_OK;
    cudaStream_t st;
    DUET_TRY(duet__cuda_stream(dev, op, &st));
    add_scalar<<<blocks_for(n), kThreads, 0, st>>>(g, s, n);
    DUET_CUDA_LAUNCH_CHECK(op, "add_scalar");
    return DUET_OK;
}

extern "C" int duet__cuda_broadcast_rows(int dev, const char *op, float *y, const float *b,
                                         int64_t rows, int64_t cols) {
    if (rows * cols <= 0) return DUET_OK;
    cudaStream_t st;
    DUET_TRY(duet__cuda_stream(dev, op, &st));
    broadcast_rows<<<blocks_for(rows * cols), kThreads, 0, st>>>(y, b, rows, cols);
    DUET_CUDA_LAUNCH_CHECK(op, "broadcast_rows");
    return DUET_OK;
}

extern "C" int duet__cuda_col_sum_acc(int dev, const char *op, float *db, const float *dy,
                                      int64_t rows, int64_t cols) {
    if (cols <= 0) return DUET_OK;
    cudaStream_t st;
    DUET_TRY(duet__cuda_stream(dev, op, &st));
    col_sum_acc<<<blocks_for(cols), kThreads, 0, st>>>(db, dy, rows, cols);
    DUET_CUDA_LAUNCH_CHECK(op, "col_sum_acc");
    return DUET_OK;
}

extern "C" int duet__cuda_loss_backward(int dev, duet__cuda_loss loss, float *g, const float *p,
                                        const float *t, int64_t tstride, float c, int64_t n) {
    const char *op = loss_name(loss);
    if (n <= 0) return DUET_OK;
    cudaStream_t s;
    DUET_TRY(duet__cuda_stream(dev, op, &s));
    loss_backward<<<blocks_for(n), kThreads, 0, s>>>(g, p, t, tstride, loss, c, n);
    DUET_CUDA_LAUNCH_CHECK(op, "loss_backward");
    return DUET_OK;
}

extern "C" int duet__cuda_binary_forward(int dev, duet__cuda_binary op, float *out, const float *a,
                                         const float *b, int64_t n) {
    const char *name = op == DUET__BIN_ADD ? "add" : op == DUET__BIN_SUB ? "sub" : "mul";
    if (n <= 0) return DUET_OK;
    cudaStream_t s;
    DUET_TRY(duet__cuda_stream(dev, name, &s));
    binary_forward<<<blocks_for(n), kThreads, 0, s>>>(out, a, b, op, n);
    DUET_CUDA_LAUNCH_CHECK(name, "binary_forward");
    return DUET_OK;
}

extern "C" int duet__cuda_grad_accumulate(int dev, const char *op, float *g, const float *gout,
                                          const float *other, float scale, int64_t n) {
    if (n <= 0) return DUET_OK;
    cudaStream_t s;
    DUET_TRY(duet__cuda_stream(dev, op, &s));
    grad_accumulate<<<blocks_for(n), kThreads, 0, s>>>(g, gout, other, scale, n);
    DUET_CUDA_LAUNCH_CHECK(op, "grad_accumulate");
    return DUET_OK;
}

extern "C" int duet__cuda_scale_forward(int dev, float *out, const float *x, float scale,
                                        int64_t n) {
    if (n <= 0) return DUET_OK;
    cudaStream_t s;
    DUET_TRY(duet__cuda_stream(dev, "scale", &s));
    scale_forward<<<blocks_for(n), kThreads, 0, s>>>(out, x, scale, n);
    DUET_CUDA_LAUNCH_CHECK("scale", "scale_forward");
    return DUET_OK;
}
