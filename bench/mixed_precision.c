/* bench_mixed_precision: the SRGAN training step in float32 and in bf16
 * mixed precision (duet_kernel_opts.bf16, the config's mixed_precision =
 * "bf16") from the same seed on the same batches, one process. Prints a
 * Markdown table of both runs' losses every E iterations and the speed of
 * each (images/s and the ratio bf16 / float32), for docs/performance.md.
 *
 *   bench_mixed_precision [--model tiny|full] [--iters N] [--every E]
 *                         [--threads T]
 *   bench_mixed_precision --gemm [--threads T]
 *
 * --gemm measures duet_sgemm alone in float32 and in bf16 (the rounding of
 * both inputs included, as the step pays it) on the GEMM shapes that the
 * full SRGAN step's convolutions issue, best of 5 runs of 10 calls each.
 *
 * Defaults: tiny, 200 iterations, every 20. The models are bench_train's
 * (tiny: MSRResNet 32x4, ModifiedVGG 16, a small VGG for the perceptual
 * loss; full: MMEditing's x4c64b16 with VGG19 to conv5_4), with the
 * tiny config's loss weights (pixel 1.0, perceptual 1.0, GAN 5e-3). Each
 * iteration gets a new batch of smooth synthetic images (random sinusoids
 * plus noise, the same sequence for both runs); lq is gt's 4x4 box average.
 * The speed is the mean over the iterations after the first 5 (1 when
 * fewer than 20); peak resident memory is read after each run. Exit status 2
 * where the CPU has no bf16 (the error says so). */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "common/srgan_models.h"
#include "duet/duet.h"


#define NLOSS 5
static const char *loss_names[NLOSS] = {"loss_pix", "loss_perceptual", "loss_gan", "loss_d_real",
                                        "loss_d_fake"};

#define CHECK(expr)                                                                   \
    do {                                                                              \
        int rc_ = (expr);                                                             \
        if (rc_ != DUET_OK) {                                                         \
            fprintf(stderr, "bench_mixed_precision: %s: %s\n", #expr, duet_last_error()); \
            exit(rc_ == DUET_EUNSUPPORTED ? 2 : 1);                                   \
        }                                                                             \
    } while (0)

/* gt (B, 3, C, C): per image and channel three random sinusoids and a little
 * noise in [0, 1]; lq (B, 3, C/4, C/4) its 4x4 box average. */
static void make_batch(duet_rng *rng, duet_tensor *gt, duet_tensor *lq) {
    const int64_t b = gt->shape[0], c = gt->shape[2], l = lq->shape[2];
    for (int64_t p = 0; p < b * 3; p++) {
        float fx[3], fy[3], ph[3];
        for (int k = 0; k < 3; k++) {
            fx[k] = 0.4f * duet_rng_uniform(rng);
            fy[k] = 0.4f * duet_rng_uniform(rng);
            ph[k] = 6.2831853f * duet_rng_uniform(rng);
        }
        float *g = gt->data + p * c * c;
        for (int64_t y = 0; y < c; y++)
            for (int64_t x = 0; x < c; x++) {
                float v = 0.5f + 0.05f * duet_rng_normal(rng);
                for (int k = 0; k < 3; k++) v += 0.15f * sinf(fx[k] * x + fy[k] * y + ph[k]);
                g[y * c + x] = v < 0.0f ? 0.0f : v > 1.0f ? 1.0f : v;
            }
        for (int64_t y = 0; y < l; y++)
            for (int64_t x = 0; x < l; x++) {
                float s = 0;
                for (int dy = 0; dy < 4; dy++)
                    for (int dx = 0; dx < 4; dx++) s += g[(y * 4 + dy) * c + x * 4 + dx];
                lq->data[(p * l + y) * l + x] = s / 16;
            }
    }
}

typedef struct run_result {
    double *loss; /* (iters, NLOSS) */
    double images_per_s;
    double peak_mb; /* the process's peak resident memory when the run ended */
    char kernels[384];
} run_result;

static run_result run(const bench_model *bm, bool bf16, int threads, int iters) {
    duet_kernel_opts ko = duet_kernel_opts_default();
    ko.bf16 = bf16;
    ko.num_threads = threads;
    CHECK(duet_kernels_configure(&ko));
    duet_srgan_opts so = bench_srgan_opts(bm);
    so.pixel_loss_weight = 1.0f;
    duet_rng rng = duet_rng_make(0, 0);
    duet_model *model = NULL;
    CHECK(duet_srgan_create(&so, &rng, &model));
    duet_optimizer_set *opts = NULL;
    CHECK(duet_optimizer_set_create(&opts));
    duet_adam_opts adam = duet_adam_opts_default();
    adam.lr = 1e-4f;
    CHECK(duet_optimizer_set_add_adam(opts, model, "generator", &adam));
    CHECK(duet_optimizer_set_add_adam(opts, model, "discriminator", &adam));

    const int64_t b = bm->batch, c = bm->crop;
    duet_tensor *gt = NULL, *lq = NULL;
    CHECK(duet_tensor_create4(b, 3, c, c, &gt));
    CHECK(duet_tensor_create4(b, 3, c / 4, c / 4, &lq));
    duet_rng drng = duet_rng_make(1, 0);
    run_result r = {0};
    r.loss = calloc((size_t)iters * NLOSS, sizeof *r.loss);
    if (r.loss == NULL) exit(1);
    /* The first iterations JIT-compile oneDNN's kernels for each shape. */
    const int warm = iters >= 20 ? 5 : 1;
    double t0 = 0;
    for (int it = 0; it < iters; it++) {
        if (it == warm) t0 = duet_time_now();
        make_batch(&drng, gt, lq);
        duet_batch batch = {0};
        CHECK(duet_batch_add_tensor(&batch, "lq", lq));
        CHECK(duet_batch_add_tensor(&batch, "gt", gt));
        duet_log_vars lv;
        CHECK(duet_model_train_step(model, &batch, opts, &lv));
        duet_batch_clear(&batch);
        for (int k = 0; k < NLOSS; k++) {
            double v = NAN;
            duet_log_vars_get(&lv, loss_names[k], &v);
            r.loss[it * NLOSS + k] = v;
        }
    }
    double dt = (duet_time_now() - t0) / (iters - warm);
    r.images_per_s = (double)b / dt;
    duet_kernels_info ki;
    CHECK(duet_kernels_info_get(&ki));
    snprintf(r.kernels, sizeof r.kernels, "%s", ki.summary);
    duet_tensor_release(gt);
    duet_tensor_release(lq);
    duet_optimizer_set_destroy(opts);
    duet_model_destroy(model);
    struct rusage ru;
    r.peak_mb = getrusage(RUSAGE_SELF, &ru) == 0 ? (double)ru.ru_maxrss / 1024.0 : NAN;
    return r;
}

/* The conv GEMMs of the full step: per column tile of one sample (at most
 * 2M floats of columns), forward W col, dX W^T dY, dW dY col^T. */
typedef struct gemm_shape {
    const char *name;
    bool ta, tb;
    int64_t m, n, k;
} gemm_shape;

static const gemm_shape gemm_shapes[] = {
    {"64->64 3x3 @128, forward", false, false, 64, 1792, 576},
    {"64->64 3x3 @128, dX", true, false, 576, 1792, 64},
    {"64->64 3x3 @128, dW", false, true, 64, 576, 1792},
    {"128->128 3x3 @64, forward", false, false, 128, 1792, 1152},
    {"256->256 3x3 @32, forward", false, false, 256, 1024, 2304},
    {"256->256 3x3 @32, dX", true, false, 2304, 1024, 256},
    {"512->512 3x3 @16, forward", false, false, 512, 256, 4608},
    {"512->512 3x3 @16, dW", false, true, 512, 4608, 256},
};

/* GF/s of duet_sgemm on shape g, best of 5 runs of 10 calls. */
static double gemm_gflops(const gemm_shape *g, const float *a, const float *b, float *c) {
    const int64_t lda = g->ta ? g->m : g->k, ldb = g->tb ? g->k : g->n;
    double best = 0.0;
    duet_sgemm(g->ta, g->tb, g->m, g->n, g->k, 1.0f, a, lda, b, ldb, 0.0f, c, g->n);
    for (int run = 0; run < 5; run++) {
        double t0 = duet_time_now();
        for (int r = 0; r < 10; r++)
            duet_sgemm(g->ta, g->tb, g->m, g->n, g->k, 1.0f, a, lda, b, ldb, 0.0f, c, g->n);
        double gf = 20.0 * (double)g->m * (double)g->n * (double)g->k /
                    (duet_time_now() - t0) / 1e9;
        if (gf > best) best = gf;
    }
    return best;
}

static int gemm_table(int threads) {
    const size_t most = (size_t)4608 * 1792; /* the largest operand, in floats */
    float *a = malloc(most * sizeof(float)), *b = malloc(most * sizeof(float));
    float *c = malloc(most * sizeof(float));
    if (a == NULL || b == NULL || c == NULL) {
        fprintf(stderr, "bench_mixed_precision: out of memory\n");
        return 1;
    }
    duet_rng rng = duet_rng_make(3, 0);
    for (size_t i = 0; i < most; i++) {
        a[i] = duet_rng_normal(&rng);
        b[i] = duet_rng_normal(&rng);
    }
    const size_t ns = sizeof gemm_shapes / sizeof gemm_shapes[0];
    double gf[2][sizeof gemm_shapes / sizeof gemm_shapes[0]];
    char kernels[2][384];
    for (int bf = 0; bf < 2; bf++) {
        duet_kernel_opts ko = duet_kernel_opts_default();
        ko.num_threads = threads;
        ko.bf16 = bf != 0;
        CHECK(duet_kernels_configure(&ko));
        duet_kernels_info ki;
        CHECK(duet_kernels_info_get(&ki));
        snprintf(kernels[bf], sizeof kernels[bf], "%s", ki.summary);
        for (size_t i = 0; i < ns; i++) gf[bf][i] = gemm_gflops(&gemm_shapes[i], a, b, c);
    }
    printf("float32: %s\nbf16: %s\n\n", kernels[0], kernels[1]);
    printf("| GEMM | m x n x k | float32 GF/s | bf16 GF/s | bf16 / float32 |\n");
    printf("|---|---|---:|---:|---:|\n");
    for (size_t i = 0; i < ns; i++) {
        const gemm_shape *g = &gemm_shapes[i];
        printf("| %s | %" PRId64 " x %" PRId64 " x %" PRId64 " | %.1f | %.1f | %.2f |\n",
               g->name, g->m, g->n, g->k, gf[0][i], gf[1][i], gf[1][i] / gf[0][i]);
    }
    free(a);
    free(b);
    free(c);
    return 0;
}

int main(int argc, char **argv) {
    const char *name = "tiny";
    int iters = 200, every = 20, threads = 0;
    bool gemm = false;
    for (int i = 1; i < argc; i++) {
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(argv[i], "--model") == 0 && v) name = argv[++i];
        else if (strcmp(argv[i], "--iters") == 0 && v) iters = atoi(argv[++i]);
        else if (strcmp(argv[i], "--every") == 0 && v) every = atoi(argv[++i]);
        else if (strcmp(argv[i], "--threads") == 0 && v) threads = atoi(argv[++i]);
        else if (strcmp(argv[i], "--gemm") == 0) gemm = true;
        else {
            fprintf(stderr, "usage: bench_mixed_precision [--model tiny|full] [--iters N] "
                            "[--every E] [--threads T] | --gemm [--threads T]\n");
            return 2;
        }
    }
    if (gemm) return threads < 0 ? 2 : gemm_table(threads);
    const bench_model *bm = bench_find_model(name);
    if (bm == NULL || iters < 2 || every < 1 || threads < 0) {
        fprintf(stderr, "bench_mixed_precision: model tiny or full, iters >= 2, every >= 1\n");
        return 2;
    }
    duet_log_set_level(DUET_LOG_ERROR); /* no random-VGG warning */
    run_result f = run(bm, false, threads, iters);
    run_result h = run(bm, true, threads, iters);

    printf("SRGAN %s, batch %d, %d iterations, same seed and batches; float32: %s; bf16: %s\n\n",
           bm->name, bm->batch, iters, f.kernels, h.kernels);
    printf("| iter |");
    for (int k = 0; k < NLOSS; k++) printf(" %s f32 | bf16 |", loss_names[k]);
    printf("\n|---:|");
    for (int k = 0; k < NLOSS; k++) printf("---:|---:|");
    printf("\n");
    double maxrel[NLOSS] = {0};
    for (int it = 0; it < iters; it++) {
        for (int k = 0; k < NLOSS; k++) {
            double a = f.loss[it * NLOSS + k], b = h.loss[it * NLOSS + k];
            double rel = fabs(a - b) / (fabs(a) > 1e-12 ? fabs(a) : 1e-12);
            if (rel > maxrel[k]) maxrel[k] = rel;
        }
        if (it != 0 && (it + 1) % every != 0) continue;
        printf("| %d |", it + 1);
        for (int k = 0; k < NLOSS; k++)
            printf(" %.5f | %.5f |", f.loss[it * NLOSS + k], h.loss[it * NLOSS + k]);
        printf("\n");
    }
    printf("\nlargest relative difference over all %d iterations:", iters);
    for (int k = 0; k < NLOSS; k++) printf(" %s %.2f%%%s", loss_names[k], 100.0 * maxrel[k],
                                           k + 1 < NLOSS ? "," : "\n");
    printf("speed (iterations %d..%d): float32 %.2f img/s, bf16 %.2f img/s, bf16 / float32 = "
           "%.2fx\n", iters >= 20 ? 6 : 2, iters, f.images_per_s, h.images_per_s, h.images_per_s / f.images_per_s);
    /* The float32 run goes first: the peak after it is float32's, and the
     * bf16 run raises it only where it needs more. */
    printf("peak resident memory: %.0f MB after the float32 run, %.0f MB after the bf16 run\n",
           f.peak_mb, h.peak_mb);
    free(f.loss);
    free(h.loss);
    return 0;
}
