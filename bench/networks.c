/* bench_networks: duet's side of the network benchmark against PyTorch
 * (bench/networks_torch.py; bench/compare_networks.sh runs both and prints
 * the ratios). MMEditing's MSRResNet generator and ModifiedVGG
 * discriminator, timed pass by pass on one thread.
 *
 *   bench_networks [--config tiny|full] [--batch N] [--reps R] [--warmup W]
 *                  [--only CASE]
 *
 * Configs (configs/srgan_x4_tiny.cfg and configs/srgan_x4c64b16_div2k.cfg):
 *   tiny: generator mid 32, 4 blocks, x4, LQ 16x16; discriminator mid 16,
 *         input 64; batch 8
 *   full: generator mid 64, 16 blocks, x4, LQ 32x32; discriminator mid 64,
 *         input 128; batch 16
 *
 * Cases:
 *   g_fwd       generator forward with grad mode off (validation, inference)
 *   g_fwdbwd    generator forward + backward of mean(out) to its parameters
 *   d_fwdbwd    discriminator (train mode) forward + backward of the BCE loss
 *               against "real" to its parameters, input without gradient
 *               (the discriminator step)
 *   d_fwdbwd_x  the same with the discriminator frozen and the gradient going
 *               to the input only (how the generator step goes through it)
 *
 * Prints one JSON line per case: {"framework": "duet", "config", "case",
 * "batch", "cpu_ms", "wall_ms"}: medians over the repetitions of this
 * thread's CPU time (BLAS runs on this thread; other processes on the cores
 * disturb it less than the wall clock) and of the wall time. Zeroing the
 * gradients is outside the timed region, as in the torch script. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/harness.h"
#include "duet/duet.h"
#include "ops/ops_internal.h"

typedef struct bench_config {
    const char *name;
    int mid, blocks, dmid, lq, batch, reps;
} bench_config;

static const bench_config configs[] = {
    {"tiny", 32, 4, 16, 16, 8, 20},
    {"full", 64, 16, 64, 32, 16, 5},
};

static const char *const cases[] = {"g_fwd", "g_fwdbwd", "d_fwdbwd", "d_fwdbwd_x"};
#define NCASES (sizeof cases / sizeof cases[0])

static double cpu_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void check(int rc, const char *what) {
    if (rc != DUET_OK) {
        fprintf(stderr, "bench_networks: %s failed: %s: %s\n", what, duet_err_name(rc),
                duet_last_error());
        exit(1);
    }
}

static void fill_uniform(duet_tensor *t, duet_rng *rng) {
    for (int64_t i = 0; i < t->numel; i++) t->data[i] = duet_rng_uniform(rng);
}

typedef struct bench_state {
    duet_module *g, *d;
    duet_tensor *lq, *img;
} bench_state;

/* One timed pass of `which` (an index into cases). */
static void run_case(bench_state *s, size_t which) {
    duet_tensor *y = NULL, *loss = NULL;
    switch (which) {
    case 0: {
        bool prev = duet_set_grad_enabled(false);
        check(duet_module_forward(s->g, s->lq, &y), "generator forward");
        duet_set_grad_enabled(prev);
        break;
    }
    case 1:
        check(duet_module_forward(s->g, s->lq, &y), "generator forward");
        check(duet_mean(y, &loss), "mean");
        check(duet_backward(loss), "generator backward");
        break;
    case 2:
    case 3:
        check(duet_module_forward(s->d, s->img, &y), "discriminator forward");
        check(duet_bce_with_logits_const(y, 1.0f, 1.0f, &loss), "bce");
        check(duet_backward(loss), "discriminator backward");
        break;
    }
    duet_tensor_release(loss);
    duet_tensor_release(y);
}

/* Untimed: what the torch script does between repetitions. */
static void before_case(bench_state *s, size_t which) {
    switch (which) {
    case 1: duet_module_zero_grad(s->g); break;
    case 2:
        duet_module_set_requires_grad(s->d, true);
        duet_module_zero_grad(s->d);
        s->img->requires_grad = false;
        break;
    case 3:
        duet_module_set_requires_grad(s->d, false);
        s->img->requires_grad = true;
        duet_tensor_zero_grad(s->img);
        break;
    default: break;
    }
}

int main(int argc, char **argv) {
    const char *cfg_name = "tiny", *only = NULL;
    int batch = 0, reps = 0, warmup = 2;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--config") == 0 && i + 1 < argc) cfg_name = argv[++i];
        else if (strcmp(argv[i], "--batch") == 0 && i + 1 < argc) batch = atoi(argv[++i]);
        else if (strcmp(argv[i], "--reps") == 0 && i + 1 < argc) reps = atoi(argv[++i]);
        else if (strcmp(argv[i], "--warmup") == 0 && i + 1 < argc) warmup = atoi(argv[++i]);
        else if (strcmp(argv[i], "--only") == 0 && i + 1 < argc) only = argv[++i];
        else {
            fprintf(stderr, "usage: %s [--config tiny|full] [--batch N] [--reps R] "
                    "[--warmup W] [--only CASE]\n", argv[0]);
            return 2;
        }
    }
    const bench_config *cfg = NULL;
    for (size_t i = 0; i < sizeof configs / sizeof configs[0]; i++)
        if (strcmp(configs[i].name, cfg_name) == 0) cfg = &configs[i];
    if (cfg == NULL || batch < 0 || reps < 0 || warmup < 0) {
        fprintf(stderr, "bench_networks: unknown config %s or negative count\n", cfg_name);
        return 2;
    }
    if (batch == 0) batch = cfg->batch;
    if (reps == 0) reps = cfg->reps;
    duet__blas_init();

    duet_rng rng = duet_rng_make(0, 0);
    bench_state s = {0};
    duet_msrresnet_opts go = duet_msrresnet_opts_default();
    go.mid_channels = cfg->mid;
    go.num_blocks = cfg->blocks;
    go.upscale_factor = 4;
    duet_modified_vgg_opts dopt = duet_modified_vgg_opts_default();
    dopt.mid_channels = cfg->dmid;
    dopt.input_size = 4 * cfg->lq;
    check(duet_msrresnet_create(&go, &rng, &s.g), "MSRResNet");
    check(duet_modified_vgg_create(&dopt, &rng, &s.d), "ModifiedVGG");
    duet_module_train(s.g, true);
    duet_module_train(s.d, true);
    check(duet_tensor_create4(batch, 3, cfg->lq, cfg->lq, &s.lq), "lq");
    check(duet_tensor_create4(batch, 3, 4 * cfg->lq, 4 * cfg->lq, &s.img), "img");
    fill_uniform(s.lq, &rng);
    fill_uniform(s.img, &rng);

    double *tc = malloc((size_t)reps * sizeof *tc), *tw = malloc((size_t)reps * sizeof *tw);
    if (tc == NULL || tw == NULL) {
        fprintf(stderr, "bench_networks: out of memory\n");
        return 1;
    }
    for (size_t c = 0; c < NCASES; c++) {
        if (only != NULL && strcmp(only, cases[c]) != 0) continue;
        for (int r = -warmup; r < reps; r++) {
            before_case(&s, c);
            double c0 = cpu_now(), w0 = duet_time_now();
            run_case(&s, c);
            double c1 = cpu_now(), w1 = duet_time_now();
            if (r >= 0) {
                tc[r] = c1 - c0;
                tw[r] = w1 - w0;
            }
        }
        printf("{\"framework\": \"duet\", \"config\": \"%s\", \"case\": \"%s\", \"batch\": %d, "
               "\"cpu_ms\": %.3f, \"wall_ms\": %.3f}\n", cfg->name, cases[c], batch,
               1e3 * bench_median(tc, reps), 1e3 * bench_median(tw, reps));
        fflush(stdout);
    }
    free(tc);
    free(tw);
    duet_tensor_release(s.lq);
    duet_tensor_release(s.img);
    duet_module_destroy(s.g);
    duet_module_destroy(s.d);
    return 0;
}
