/* conv2d forward and backward on cuDNN (cuda_ops.h). float32 with TF32 off
 * (CUDNN_FMA_MATH), so results match the CPU's im2col + SGEMM to rounding.
 * The algorithms for a shape are chosen once, from cuDNN's heuristics (the
 * first deterministic one without tensor-op math whose workspace fits), and
 * cached; workspaces
 * come from the caching allocator, released stream-ordered after the call.
 * cuDNN 9 still has this (legacy) convolution API; the graph API is the
 * later move. */
#include "cuda/cuda.h"
#include "ops/cuda/cuda_ops.h"

#include <pthread.h>
#include <string.h>

#define MAX_DEVICES 64
#define CACHE_SIZE 512
#define WORKSPACE_LIMIT ((size_t)512 << 20)

static cudnnHandle_t handles[MAX_DEVICES];
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

/* The algorithms of one shape on one device. */
typedef struct algo_entry {
    int dev;
    duet__conv_dims d;
    cudnnConvolutionFwdAlgo_t fwd;
    cudnnConvolutionBwdDataAlgo_t bwd_data;
    cudnnConvolutionBwdFilterAlgo_t bwd_filter;
    size_t ws_fwd, ws_bwd_data, ws_bwd_filter;
} algo_entry;
static algo_entry cache[CACHE_SIZE];
static int cached, next_victim;
static _Atomic uint64_t searches;

uint64_t duet__cuda_conv_algo_searches(void) { return searches; }

/* The descriptors of one shape; destroyed by descs_release. */
typedef struct descs {
    cudnnTensorDescriptor_t x, y, b;
    cudnnFilterDescriptor_t w;
    cudnnConvolutionDescriptor_t conv;
} descs;

static void descs_release(descs *s) {
    if (s->conv != NULL) cudnnDestroyConvolutionDescriptor(s->conv);
    if (s->w != NULL) cudnnDestroyFilterDescriptor(s->w);
    if (s->b != NULL) cudnnDestroyTensorDescriptor(s->b);
    if (s->y != NULL) cudnnDestroyTensorDescriptor(s->y);
    if (s->x != NULL) cudnnDestroyTensorDescriptor(s->x);
}

static int descs_make(descs *s, const duet__conv_dims *d, const char *op) {
    memset(s, 0, sizeof *s);
    DUET_CUDNN_TRY(op, cudnnCreateTensorDescriptor(&s->x));
    DUET_CUDNN_TRY(op, cudnnCreateTensorDescriptor(&s->y));
    DUET_CUDNN_TRY(op, cudnnCreateTensorDescriptor(&s->b));
    DUET_CUDNN_TRY(op, cudnnCreateFilterDescriptor(&s->w));
    DUET_CUDNN_TRY(op, cudnnCreateConvolutionDescriptor(&s->conv));
    DUET_CUDNN_TRY(op, cudnnSetTensor4dDescriptor(s->x, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT,
                                                  (int)d->n, (int)d->c, (int)d->h, (int)d->w));
    DUET_CUDNN_TRY(op, cudnnSetTensor4dDescriptor(s->y, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT,
                                                  (int)d->n, (int)d->o, (int)d->oh, (int)d->ow));
    DUET_CUDNN_TRY(op, cudnnSetTensor4dDescriptor(s->b, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, 1,
                                                  (int)d->o, 1, 1));
    DUET_CUDNN_TRY(op, cudnnSetFilter4dDescriptor(s->w, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW,
                                                  (int)d->o, (int)d->c, (int)d->kh, (int)d->kw));
    DUET_CUDNN_TRY(op, cudnnSetConvolution2dDescriptor(s->conv, (int)d->pad, (int)d->pad,
                                                       (int)d->stride, (int)d->stride, 1, 1,
                                                       CUDNN_CROSS_CORRELATION,
                                                       CUDNN_DATA_FLOAT));
    /* FMA math: no TF32 (cuDNN's default math may use it on Ampere and later). */
    DUET_CUDNN_TRY(op, cudnnSetConvolutionMathType(s->conv, CUDNN_FMA_MATH));
    return DUET_OK;
}

static int handle_of(int dev, const char *op, cudnnHandle_t *out) {
    cudaStream_t s;
    DUET_TRY(duet__cuda_stream(dev, op, &s));
    pthread_mutex_lock(&lock);
    int rc = DUET_OK;
    if (handles[dev] == NULL)
        rc = duet__cudnn_status(cudnnCreate(&handles[dev]), op, "cudnnCreate", __FILE__, __LINE__);
    if (rc == DUET_OK)
        rc = duet__cudnn_status(cudnnSetStream(handles[dev], s), op, "cudnnSetStream", __FILE__,
                                __LINE__);
    *out = handles[dev];
    pthread_mutex_unlock(&lock);
    return rc;
}

#define PERF_MAX 16

/* A heuristic result usable here: it ran, it is deterministic, its
 * workspace fits, and it does not use tensor-op math (TF32 for float32). */
#define USABLE(r)                                                              \
    ((r).status == CUDNN_STATUS_SUCCESS && (r).determinism == CUDNN_DETERMINISTIC && \
     (r).memory <= WORKSPACE_LIMIT && (r).mathType != CUDNN_TENSOR_OP_MATH &&  \
     (r).mathType != CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION)

/* Chooses the three algorithms of a shape (called with `lock` not held). */
static int choose(cudnnHandle_t h, const descs *s, const char *op, algo_entry *e) {
    int got = 0, i;
    cudnnConvolutionFwdAlgoPerf_t fwd[PERF_MAX];
    DUET_CUDNN_TRY(op, cudnnGetConvolutionForwardAlgorithm_v7(h, s->x, s->w, s->conv, s->y,
                                                              PERF_MAX, &got, fwd));
    for (i = 0; i < got; i++)
        if (USABLE(fwd[i])) break;
    if (i == got)
        return duet__error(DUET_EUNSUPPORTED, "%s: cuDNN offers no deterministic forward "
                           "algorithm within %zu MiB of workspace", op, WORKSPACE_LIMIT >> 20);
    e->fwd = fwd[i].algo;
    e->ws_fwd = fwd[i].memory;
    cudnnConvolutionBwdDataAlgoPerf_t bd[PERF_MAX];
    DUET_CUDNN_TRY(op, cudnnGetConvolutionBackwardDataAlgorithm_v7(h, s->w, s->y, s->conv, s->x,
                                                                   PERF_MAX, &got, bd));
    for (i = 0; i < got; i++)
        if (USABLE(bd[i])) break;
    if (i == got)
        return duet__error(DUET_EUNSUPPORTED, "%s: cuDNN offers no deterministic backward-data "
                           "algorithm within %zu MiB of workspace", op, WORKSPACE_LIMIT >> 20);
    e->bwd_data = bd[i].algo;
    e->ws_bwd_data = bd[i].memory;
    cudnnConvolutionBwdFilterAlgoPerf_t bf[PERF_MAX];
    DUET_CUDNN_TRY(op, cudnnGetConvolutionBackwardFilterAlgorithm_v7(h, s->x, s->y, s->conv, s->w,
                                                                     PERF_MAX, &got, bf));
    for (i = 0; i < got; i++)
        if (USABLE(bf[i])) break;
    if (i == got)
        return duet__error(DUET_EUNSUPPORTED, "%s: cuDNN offers no deterministic "
                           "backward-filter algorithm within %zu MiB of workspace", op,
                           WORKSPACE_LIMIT >> 20);
    e->bwd_filter = bf[i].algo;
    e->ws_bwd_filter = bf[i].memory;
    return DUET_OK;
}

/* The cached algorithms of this shape, chosen on first sight. */
static int algos_of(int dev, cudnnHandle_t h, const descs *s, const duet__conv_dims *d,
                    const char *op, algo_entry *out) {
    pthread_mutex_lock(&lock);
    for (int i = 0; i < cached; i++)
        if (cache[i].dev == dev && memcmp(&cache[i].d, d, sizeof *d) == 0) {
            *out = cache[i];
            pthread_mutex_unlock(&lock);
            return DUET_OK;
        }
    pthread_mutex_unlock(&lock);
    algo_entry e = {.dev = dev, .d = *d};
    DUET_TRY(choose(h, s, op, &e));
    searches++;
    pthread_mutex_lock(&lock);
    if (cached < CACHE_SIZE) {
        cache[cached++] = e;
    } else { /* a network with more shapes than this: replace round-robin */
        cache[next_victim] = e;
        next_victim = (next_victim + 1) % CACHE_SIZE;
    }
    pthread_mutex_unlock(&lock);
    *out = e;
    return DUET_OK;
}

/* Workspace of `bytes` (NULL for none) from the allocator. */
static int workspace(int dev, size_t bytes, const char *op, void **out) {
    *out = NULL;
    return bytes > 0 ? duet__cuda_alloc(dev, bytes, false, op, out) : DUET_OK;
}

int duet__cuda_conv2d_forward(int dev, const duet__conv_dims *d, const float *x, const float *w,
                              const float *bias, float *y) {
    const char *op = "conv2d";
    cudnnHandle_t h;
    DUET_TRY(handle_of(dev, op, &h));
    descs s;
    int rc = descs_make(&s, d, op);
    algo_entry e;
    if (rc == DUET_OK) rc = algos_of(dev, h, &s, d, op, &e);
    void *ws = NULL;
    if (rc == DUET_OK) rc = workspace(dev, e.ws_fwd, op, &ws);
    const float one = 1.0f, zero = 0.0f;
    if (rc == DUET_OK)
        rc = duet__cudnn_status(cudnnConvolutionForward(h, &one, s.x, x, s.w, w, s.conv, e.fwd, ws,
                                                        e.ws_fwd, &zero, s.y, y),
                                op, "cudnnConvolutionForward", __FILE__, __LINE__);
    if (rc == DUET_OK && bias != NULL)
        rc = duet__cudnn_status(cudnnAddTensor(h, &one, s.b, bias, &one, s.y, y), op,
                                "cudnnAddTensor", __FILE__, __LINE__);
    duet__cuda_free(dev, ws);
    descs_release(&s);
    return rc;
}

int duet__cuda_conv2d_backward(int dev, const duet__conv_dims *d, const float *x, const float *w,
                               const float *dy, float *dx, float *dw, float *db) {
    const char *op = "conv2d backward";
    cudnnHandle_t h;
    DUET_TRY(handle_of(dev, op, &h));
    descs s;
    int rc = descs_make(&s, d, op);
    algo_entry e;
    if (rc == DUET_OK) rc = algos_of(dev, h, &s, d, op, &e);
    const float one = 1.0f;
    void *ws = NULL;
    /* beta 1: the gradients accumulate, as every backward kernel's. */
    if (rc == DUET_OK && dx != NULL) {
        rc = workspace(dev, e.ws_bwd_data, op, &ws);
        if (rc == DUET_OK)
            rc = duet__cudnn_status(cudnnConvolutionBackwardData(h, &one, s.w, w, s.y, dy, s.conv,
                                                                 e.bwd_data, ws, e.ws_bwd_data,
                                                                 &one, s.x, dx),
                                    op, "cudnnConvolutionBackwardData", __FILE__, __LINE__);
        duet__cuda_free(dev, ws);
        ws = NULL;
    }
    if (rc == DUET_OK && dw != NULL) {
        rc = workspace(dev, e.ws_bwd_filter, op, &ws);
        if (rc == DUET_OK)
            rc = duet__cudnn_status(cudnnConvolutionBackwardFilter(h, &one, s.x, x, s.y, dy,
                                                                   s.conv, e.bwd_filter, ws,
                                                                   e.ws_bwd_filter, &one, s.w, dw),
                                    op, "cudnnConvolutionBackwardFilter", __FILE__, __LINE__);
        duet__cuda_free(dev, ws);
    }
    if (rc == DUET_OK && db != NULL)
        rc = duet__cudnn_status(cudnnConvolutionBackwardBias(h, &one, s.y, dy, &one, s.b, db), op,
                                "cudnnConvolutionBackwardBias", __FILE__, __LINE__);
    descs_release(&s);
    return rc;
}
