/* The CUDA backend's pieces timed on the GPU (CUDA builds; run by
 * scripts/gpu-check.sh beside scripts/gpu-bench-torch.py, which times the
 * same in PyTorch on the same GPU):
 *
 *   ./bench_gpu_ops [--reps N]
 *
 * conv2d forward and backward (input, weight, bias) of an SRGAN body layer
 * (16 x 64 x 128 x 128, 3x3, 64 -> 64), a 4096^3 float32 GEMM (TF32 off and
 * on), Adam's fused step over MSRResNet's 1.52M parameters in 40 tensors,
 * and the caching allocator's cached allocation. Medians over the
 * repetitions after 3 warm-ups, timed with CUDA events on duet's compute
 * stream; float32, TF32 off unless said. */
#include "cuda/cuda.h"
#include "ops/cuda/cuda_ops.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int cmp_float(const void *a, const void *b) {
    const float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

#define CHECK(call)                                                                  \
    do {                                                                             \
        int rc_ = (call);                                                            \
        if (rc_ != DUET_OK) {                                                        \
            fprintf(stderr, "bench_gpu_ops: %s: %s\n", #call, duet_last_error());     \
            exit(1);                                                                 \
        }                                                                            \
    } while (0)

typedef int (*bench_fn)(void *ctx);

/* Median milliseconds of fn over reps runs after 3 warm-ups. */
static float time_ms(bench_fn fn, void *ctx, int reps) {
    cudaStream_t s;
    CHECK(duet__cuda_stream(0, "bench", &s));
    for (int i = 0; i < 3; i++) CHECK(fn(ctx));
    float *ms = malloc((size_t)reps * sizeof *ms);
    cudaEvent_t a, b;
    cudaEventCreate(&a);
    cudaEventCreate(&b);
    for (int i = 0; i < reps; i++) {
        cudaEventRecord(a, s);
        CHECK(fn(ctx));
        cudaEventRecord(b, s);
        cudaEventSynchronize(b);
        cudaEventElapsedTime(&ms[i], a, b);
    }
    qsort(ms, (size_t)reps, sizeof *ms, cmp_float);
    const float med = ms[reps / 2];
    free(ms);
    cudaEventDestroy(a);
    cudaEventDestroy(b);
    return med;
}

static float *dev_random(size_t n, unsigned seed) {
    float *h = malloc(n * sizeof *h), *d = NULL;
    duet_rng rng = duet_rng_make(seed, 0);
    for (size_t i = 0; i < n; i++) h[i] = duet_rng_normal(&rng) * 0.1f;
    CHECK(duet__cuda_alloc(0, n * sizeof *h, false, "bench", (void **)&d));
    CHECK(duet__cuda_copy(duet_device_cuda(0), d, duet_device_cpu(), h, n * sizeof *h, "bench"));
    free(h);
    return d;
}

typedef struct conv_case {
    duet__conv_dims d;
    float *x, *w, *b, *y, *dy, *dx, *dw, *db;
} conv_case;

static int conv_fwd(void *p) {
    conv_case *c = p;
    return duet__cuda_conv2d_forward(0, &c->d, c->x, c->w, c->b, c->y);
}

static int conv_bwd(void *p) {
    conv_case *c = p;
    return duet__cuda_conv2d_backward(0, &c->d, c->x, c->w, c->dy, c->dx, c->dw, c->db);
}

typedef struct gemm_case {
    int64_t n;
    float *a, *b, *c;
} gemm_case;

static int gemm(void *p) {
    gemm_case *g = p;
    return duet__cuda_sgemm(0, "bench", false, false, g->n, g->n, g->n, 1.0f, g->a, g->n, g->b,
                            g->n, 0.0f, g->c, g->n);
}

typedef struct adam_case {
    size_t n;
    duet_tensor **p, **m, **v;
    int64_t *steps;
} adam_case;

static int adam(void *p) {
    adam_case *a = p;
    const duet_adam_hparams hp = {.lr = 1e-4f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f};
    return duet_adam_update(a->n, a->p, a->m, a->v, a->steps, &hp);
}

static int alloc_cycle(void *p) {
    (void)p;
    void *blocks[100];
    for (int i = 0; i < 100; i++)
        DUET_TRY(duet__cuda_alloc(0, (size_t)(16 + i % 7) << 20, false, "bench", &blocks[i]));
    for (int i = 99; i >= 0; i--) duet__cuda_free(0, blocks[i]);
    return DUET_OK;
}

int main(int argc, char **argv) {
    int reps = 20;
    for (int i = 1; i < argc; i++)
        if (strcmp(argv[i], "--reps") == 0 && i + 1 < argc) reps = atoi(argv[++i]);
    if (duet_device_check(duet_device_cuda(0)) != DUET_OK) {
        printf("bench_gpu_ops: skipped: %s\n", duet_last_error());
        return 0;
    }
    conv_case c = {.d = {.n = 16, .c = 64, .h = 128, .w = 128, .o = 64, .kh = 3, .kw = 3,
                         .oh = 128, .ow = 128, .stride = 1, .pad = 1}};
    const size_t xn = 16u * 64 * 128 * 128, wn = 64u * 64 * 9;
    c.x = dev_random(xn, 1);
    c.w = dev_random(wn, 2);
    c.b = dev_random(64, 3);
    c.y = dev_random(xn, 4);
    c.dy = dev_random(xn, 5);
    c.dx = dev_random(xn, 6);
    c.dw = dev_random(wn, 7);
    c.db = dev_random(64, 8);
    const double conv_flop = 2.0 * (double)xn * 64 * 9;
    float f = time_ms(conv_fwd, &c, reps);
    printf("bench duet conv2d forward  16x64x128x128 3x3 64->64: %8.3f ms %7.1f TFLOP/s\n", f,
           conv_flop / f / 1e9);
    float bw = time_ms(conv_bwd, &c, reps);
    printf("bench duet conv2d backward 16x64x128x128 3x3 64->64: %8.3f ms %7.1f TFLOP/s "
           "(data + weight + bias)\n", bw, 2 * conv_flop / bw / 1e9);
    gemm_case g = {.n = 4096};
    g.a = dev_random(4096u * 4096, 9);
    g.b = dev_random(4096u * 4096, 10);
    g.c = dev_random(4096u * 4096, 11);
    const double gflop = 2.0 * 4096.0 * 4096.0 * 4096.0;
    float gm = time_ms(gemm, &g, reps);
    printf("bench duet sgemm 4096^3 (TF32 off):                  %8.3f ms %7.1f TFLOP/s\n", gm,
           gflop / gm / 1e9);
    duet__cuda_gemm_allow_tf32(true);
    float gt = time_ms(gemm, &g, reps);
    duet__cuda_gemm_allow_tf32(false);
    printf("bench duet sgemm 4096^3 (TF32 on):                   %8.3f ms %7.1f TFLOP/s\n", gt,
           gflop / gt / 1e9);
    /* MSRResNet x4 c64 b16: 1,517,571 parameters, here in 40 tensors. */
    enum { T = 40 };
    adam_case a = {.n = T};
    a.p = calloc(T, sizeof *a.p);
    a.m = calloc(T, sizeof *a.m);
    a.v = calloc(T, sizeof *a.v);
    a.steps = calloc(T, sizeof *a.steps);
    size_t total = 0;
    for (int i = 0; i < T; i++) {
        const int64_t n = i % 2 == 0 ? 36864 : 1024 + i;
        total += (size_t)n;
        CHECK(duet_tensor_create_on(duet_device_cuda(0), 1, &n, &a.p[i]));
        CHECK(duet_tensor_create_on(duet_device_cuda(0), 1, &n, &a.m[i]));
        CHECK(duet_tensor_create_on(duet_device_cuda(0), 1, &n, &a.v[i]));
        CHECK(duet_tensor_ensure_grad(a.p[i]));
        a.steps[i] = 1;
    }
    float am = time_ms(adam, &a, reps);
    printf("bench duet Adam fused, %zu parameters in %d tensors: %8.3f ms\n", total, T, am);
    float al = time_ms(alloc_cycle, NULL, reps);
    printf("bench duet allocator, 100 cached blocks of 16-22 MiB: %8.3f ms per 100 alloc+free\n",
           al);
    size_t live, peak, reserved;
    duet_device_alloc_stats(duet_device_cuda(0), &live, &peak, &reserved);
    printf("bench duet device memory: live %.1f MiB, peak %.1f MiB, reserved %.1f MiB\n",
           live / 1048576.0, peak / 1048576.0, reserved / 1048576.0);
    return 0;
}
