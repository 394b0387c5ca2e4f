/* bench_ops: GFLOP/s of duet_conv2d forward and backward (dX + dW) for the
 * SRGAN shapes, next to plain single-thread cblas_sgemm on the same GEMM
 * shapes measured in the same run, and the ratio. Medians over repetitions.
 *
 *   bench_ops [--batch N] [--reps R] [--only NAME] [--wall] [--im2col]
 *             [--bf16 | --bf16-im2col] [--accuracy]
 *
 * The sgemm baseline runs the GEMMs the conv issues, with the same sizes and
 * the same count, on fixed buffers: forward (O x P x K) once per sample;
 * backward dW (O x K x P, B transposed) and dX columns (K x P x O, A
 * transposed) once per sample. The ratio is the share of GEMM speed the conv
 * keeps after im2col, col2im and the bias.
 *
 * Times are this thread's CPU time (BLAS runs single-threaded here), so that
 * other processes sharing the cores disturb the numbers less; --wall uses
 * the wall clock instead. --bf16 runs the convs in bf16 mixed precision
 * (the sgemm baseline stays float32): on oneDNN's bf16 convolutions where
 * it has JIT kernels for the shape, or with --bf16-im2col always on
 * im2col's bf16 columns and the bf16 matmul. In float32 the convs run as
 * DUET_CONV says: im2col + SGEMM by default, with DUET_CONV=onednn the
 * forward and dX on oneDNN's float32 convolutions where conv_onednn.c takes
 * the shape (dW stays on the GEMM), with DUET_CONV=winograd the 3x3 stride-1
 * ones on its Winograd kernels (dW too); --im2col keeps every conv on
 * im2col. --accuracy times nothing: it prints each conv's relative rms
 * distance from float64 (y, dX, dW) on the path as configured, e.g.
 * `DUET_CONV=winograd bench_ops --accuracy --batch 2`. */
#include <cblas.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/harness.h"
#include "duet/duet.h"
#include "ops/ops_internal.h"

typedef struct shape {
    const char *name;
    int64_t c, o, h, k;
    int stride, pad;
} shape;

static const shape shapes[] = {
    {"g.body 64->64 3x3 @32", 64, 64, 32, 3, 1, 1},
    {"g.first 3->64 3x3 @32", 3, 64, 32, 3, 1, 1},
    {"g.up 64->256 3x3 @32", 64, 256, 32, 3, 1, 1},
    {"g.up 64->256 3x3 @64", 64, 256, 64, 3, 1, 1},
    {"g.last 64->3 3x3 @128", 64, 3, 128, 3, 1, 1},
    {"d.first 3->64 3x3 @128", 3, 64, 128, 3, 1, 1},
    {"d 64->64 4x4 s2 @128", 64, 64, 128, 4, 2, 1},
    {"d 128->128 4x4 s2 @64", 128, 128, 64, 4, 2, 1},
    {"d 256->256 4x4 s2 @32", 256, 256, 32, 4, 2, 1},
    {"d 512->512 4x4 s2 @16", 512, 512, 16, 4, 2, 1},
    {"vgg 3->64 3x3 @128", 3, 64, 128, 3, 1, 1},
    {"vgg 64->64 3x3 @128", 64, 64, 128, 3, 1, 1},
    {"vgg 128->128 3x3 @64", 128, 128, 64, 3, 1, 1},
    {"vgg 256->256 3x3 @32", 256, 256, 32, 3, 1, 1},
    {"vgg 512->512 3x3 @16", 512, 512, 16, 3, 1, 1},
};

/* Untimed runs first: the allocator settles into reusing the same blocks
 * after a few rounds (fresh pages are slow on some VMs), as it does over
 * many training steps. */
#define WARMUP 1

static bool use_wall;

static double now(void) {
    if (use_wall) return duet_time_now();
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void fill(float *p, int64_t n, duet_rng *rng) {
    for (int64_t i = 0; i < n; i++) p[i] = duet_rng_uniform(rng) - 0.5f;
}

static int check(int rc, const char *what) {
    if (rc != DUET_OK) {
        fprintf(stderr, "bench_ops: %s failed: %s: %s\n", what, duet_err_name(rc),
                duet_last_error());
        exit(1);
    }
    return rc;
}

static void *alloc_or_die(size_t bytes) {
    void *p = calloc(1, bytes);
    if (p == NULL) {
        fprintf(stderr, "bench_ops: out of memory\n");
        exit(1);
    }
    return p;
}

/* |got - want| / |want| over n values (root mean squares). */
static double rel_rms(const float *got, const double *want, int64_t n) {
    double e = 0.0, r = 0.0;
    for (int64_t i = 0; i < n; i++) {
        e += (got[i] - want[i]) * (got[i] - want[i]);
        r += want[i] * want[i];
    }
    return r > 0.0 ? sqrt(e / r) : sqrt(e);
}

/* --accuracy: one conv of shape sh on the kernels as configured (the conv
 * path of DUET_CONV) against the direct convolution in float64 on the same
 * float32 inputs: relative rms of y, dX and dW. */
static void accuracy(const shape *sh, int64_t batch, duet_rng *rng) {
    const int64_t c = sh->c, o = sh->o, h = sh->h, k = sh->k, st = sh->stride, pad = sh->pad;
    const int64_t oh = (h + 2 * pad - k) / st + 1, nx = batch * c * h * h, ny = batch * o * oh * oh;
    duet_tensor *x = NULL, *w = NULL;
    check(duet_tensor_create4(batch, c, h, h, &x), "create x");
    check(duet_tensor_create4(o, c, k, k, &w), "create w");
    fill(x->data, x->numel, rng);
    fill(w->data, w->numel, rng);
    x->requires_grad = w->requires_grad = true;
    float *dy = alloc_or_die((size_t)ny * sizeof(float));
    fill(dy, ny, rng);
    duet_tensor *y = NULL;
    check(duet_conv2d(x, w, NULL, (int)st, (int)pad, &y), "conv2d");
    duet_tensor_set_grad_storage(y, dy);
    check(y->grad_fn->backward(y->grad_fn), "conv2d backward");
    double *ry = alloc_or_die((size_t)ny * sizeof(double));
    double *rdx = alloc_or_die((size_t)nx * sizeof(double));
    double *rdw = alloc_or_die((size_t)w->numel * sizeof(double));
    /* Task t < o: y and dW of output channel t; else dX of input channel
     * t - o. No two tasks add into the same value. */
#pragma omp parallel for schedule(dynamic)
    for (int64_t t = 0; t < o + c; t++) {
        const bool out = t < o;
        for (int64_t n = 0; n < batch; n++)
            for (int64_t other = 0; other < (out ? c : o); other++)
                for (int64_t a = 0; a < k; a++)
                    for (int64_t b = 0; b < k; b++) {
                        const int64_t oc = out ? t : other, ic = out ? other : t - o;
                        const int64_t wi = ((oc * c + ic) * k + a) * k + b;
                        const double wv = w->data[wi];
                        double dwv = 0.0;
                        for (int64_t i = 0; i < oh; i++) {
                            const int64_t ih = i * st - pad + a;
                            if (ih < 0 || ih >= h) continue;
                            for (int64_t j = 0; j < oh; j++) {
                                const int64_t iw = j * st - pad + b;
                                if (iw < 0 || iw >= h) continue;
                                const int64_t yi = ((n * o + oc) * oh + i) * oh + j;
                                const int64_t xi = ((n * c + ic) * h + ih) * h + iw;
                                if (out) {
                                    ry[yi] += wv * x->data[xi];
                                    dwv += (double)dy[yi] * x->data[xi];
                                } else {
                                    rdx[xi] += wv * dy[yi];
                                }
                            }
                        }
                        if (out) rdw[wi] += dwv;
                    }
    }
    printf("%-24s %10.2e %10.2e %10.2e\n", sh->name, rel_rms(y->data, ry, ny),
           rel_rms(x->grad, rdx, nx), rel_rms(w->grad, rdw, w->numel));
    fflush(stdout);
    duet_tape_clear();
    duet_tensor_release(y);
    duet_tensor_release(x);
    duet_tensor_release(w);
    free(dy);
    free(ry);
    free(rdx);
    free(rdw);
}

int main(int argc, char **argv) {
    int64_t batch = 16;
    int reps = 3;
    const char *only = NULL;
    bool bf16 = false, im2col = false, acc = false;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--batch") == 0 && i + 1 < argc) batch = atoll(argv[++i]);
        else if (strcmp(argv[i], "--reps") == 0 && i + 1 < argc) reps = atoi(argv[++i]);
        else if (strcmp(argv[i], "--only") == 0 && i + 1 < argc) only = argv[++i];
        else if (strcmp(argv[i], "--wall") == 0) use_wall = true;
        else if (strcmp(argv[i], "--bf16") == 0) bf16 = true;
        else if (strcmp(argv[i], "--bf16-im2col") == 0) bf16 = im2col = true;
        else if (strcmp(argv[i], "--im2col") == 0) im2col = true;
        else if (strcmp(argv[i], "--accuracy") == 0) acc = true;
        else {
            fprintf(stderr,
                    "usage: %s [--batch N] [--reps R] [--only NAME-SUBSTRING] [--wall] "
                    "[--im2col] [--bf16 | --bf16-im2col] [--accuracy]\n",
                    argv[0]);
            return 2;
        }
    }
    if (batch < 1 || reps < 1) {
        fprintf(stderr, "bench_ops: --batch and --reps must be >= 1\n");
        return 2;
    }
    if (bf16) {
        duet_kernel_opts o = duet_kernel_opts_default();
        o.bf16 = true;
        check(duet_kernels_configure(&o), "bf16 kernels");
    }
    duet_kernels_info ki;
    check(duet_kernels_info_get(&ki), "kernels");
    printf("bench_ops: batch %lld, median of %d reps, %s time, %s\n", (long long)batch, reps,
           use_wall ? "wall" : "thread CPU", ki.summary);
    if (im2col) {
        duet__conv_onednn_enable(false);
        printf("(%s: every conv on im2col's columns and the %s)\n",
               bf16 ? "--bf16-im2col" : "--im2col", bf16 ? "bf16 matmul" : "SGEMM");
    }
    if (acc) {
        printf("relative rms against float64 (the same float32 inputs, batch %lld)\n",
               (long long)batch);
        printf("%-24s %10s %10s %10s\n", "conv", "y", "dX", "dW");
        duet_rng arng = duet_rng_make(1, 0);
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
            if (only == NULL || strstr(shapes[s].name, only) != NULL)
                accuracy(&shapes[s], batch, &arng);
        return 0;
    }
    printf("(fwd includes creating the output tensor)\n");
    printf("%-24s %8s %7s %7s %6s | %8s %7s %7s %6s\n", "conv", "fwd ms", "GF/s", "sgemm",
           "ratio", "bwd ms", "GF/s", "sgemm", "ratio");
    duet_rng rng = duet_rng_make(1, 0);
    double *t = malloc((size_t)reps * sizeof *t);
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        const shape *sh = &shapes[s];
        if (only != NULL && strstr(sh->name, only) == NULL) continue;
        const int64_t oh = (sh->h + 2 * sh->pad - sh->k) / sh->stride + 1;
        const int64_t kk = sh->c * sh->k * sh->k, p = oh * oh;
        const double flops = 2.0 * (double)batch * (double)sh->o * (double)kk * (double)p;
        duet_tensor *x = NULL, *w = NULL, *b = NULL;
        check(duet_tensor_create4(batch, sh->c, sh->h, sh->h, &x), "create x");
        check(duet_tensor_create4(sh->o, sh->c, sh->k, sh->k, &w), "create w");
        check(duet_tensor_create(1, (int64_t[]){sh->o}, &b), "create b");
        fill(x->data, x->numel, &rng);
        fill(w->data, w->numel, &rng);
        fill(b->data, b->numel, &rng);

        /* Forward, nothing recorded. */
        for (int r = -WARMUP; r < reps; r++) {
            duet_tensor *y = NULL;
            double t0 = now();
            check(duet_conv2d(x, w, b, sh->stride, sh->pad, &y), "conv2d");
            if (r >= 0) t[r] = now() - t0;
            duet_tensor_release(y);
        }
        double fwd = bench_median(t, reps);

        /* Backward: dX + dW (+ the bias's O(N O P) sum). The conv's node
         * runs on its own, with the upstream gradient in a buffer kept across
         * repetitions, so that only the conv's backward is timed. */
        x->requires_grad = w->requires_grad = b->requires_grad = true;
        float *dy = malloc((size_t)(batch * sh->o * p) * sizeof(float));
        if (dy == NULL) {
            fprintf(stderr, "bench_ops: out of memory\n");
            return 1;
        }
        fill(dy, batch * sh->o * p, &rng);
        for (int r = -WARMUP; r < reps; r++) {
            duet_tensor *y = NULL;
            check(duet_conv2d(x, w, b, sh->stride, sh->pad, &y), "conv2d");
            duet_tensor_set_grad_storage(y, dy);
            double t0 = now();
            check(y->grad_fn->backward(y->grad_fn), "conv2d backward");
            if (r >= 0) t[r] = now() - t0;
            duet_tape_clear();
            duet_tensor_release(y);
        }
        double bwd = bench_median(t, reps);
        x->requires_grad = w->requires_grad = b->requires_grad = false;
        free(dy);

        /* The same GEMMs through cblas_sgemm directly. */
        float *ga = malloc((size_t)(sh->o * kk) * sizeof(float));
        float *gb = malloc((size_t)(kk * p) * sizeof(float));
        float *gc = malloc((size_t)(sh->o * p) * sizeof(float));
        float *gd = malloc((size_t)(kk * p) * sizeof(float));
        if (!ga || !gb || !gc || !gd) {
            fprintf(stderr, "bench_ops: out of memory\n");
            return 1;
        }
        fill(ga, sh->o * kk, &rng);
        fill(gb, kk * p, &rng);
        fill(gc, sh->o * p, &rng);
        const int O = (int)sh->o, K = (int)kk, P = (int)p;
        for (int r = -WARMUP; r < reps; r++) {
            double t0 = now();
            for (int64_t n = 0; n < batch; n++)
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, O, P, K, 1.0f, ga, K, gb,
                            P, 0.0f, gc, P);
            if (r >= 0) t[r] = now() - t0;
        }
        double gfwd = bench_median(t, reps);
        for (int r = -WARMUP; r < reps; r++) {
            double t0 = now();
            for (int64_t n = 0; n < batch; n++) {
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, O, K, P, 1.0f, gc, P, gb, P,
                            1.0f, ga, K);
                cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, K, P, O, 1.0f, ga, K, gc, P,
                            0.0f, gd, P);
            }
            if (r >= 0) t[r] = now() - t0;
        }
        double gbwd = bench_median(t, reps);
        free(ga);
        free(gb);
        free(gc);
        free(gd);

        printf("%-24s %8.2f %7.1f %7.1f %5.0f%% | %8.2f %7.1f %7.1f %5.0f%%\n", sh->name,
               fwd * 1e3, flops / fwd * 1e-9, flops / gfwd * 1e-9, 100.0 * gfwd / fwd, bwd * 1e3,
               2 * flops / bwd * 1e-9, 2 * flops / gbwd * 1e-9, 100.0 * gbwd / bwd);
        fflush(stdout);
        duet_tensor_release(x);
        duet_tensor_release(w);
        duet_tensor_release(b);
    }
    free(t);
    return 0;
}
