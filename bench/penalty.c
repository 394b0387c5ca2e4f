/* The cost of WGAN-GP's gradient penalty (second-order autograd) on a
 * DeepFillv1-shaped discriminator: 4 convs 5x5 stride 2 padding 2 with
 * 64, 128, 256, 256 channels and ELU, a linear to 1, LeakyReLU(0.2)
 * (MMEditing's MultiLayerDiscriminator as configs/inpainting/deepfillv1
 * sets it up; its local discriminator sees 128x128, its global 256x256).
 *
 *   ./bench_penalty [--size S] [--batch N] [--reps R]
 *
 * Times (median of R) of a discriminator step without the penalty (WGAN
 * terms on real and fake, one fused backward) and with it (plus
 * GradientPenaltyLoss: a forward on interp, the gradient with create_graph,
 * the penalty, one backward through everything). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "duet/duet.h"

static const int chans[] = {64, 128, 256, 256};

static int disc_forward(duet_module *self, int nin, duet_tensor *const *in, duet_tensor **out) {
    (void)nin;
    duet_tensor *h = duet_tensor_retain(in[0]);
    int rc = DUET_OK;
    for (int i = 0; i < 4 && rc == DUET_OK; i++) {
        char name[8];
        snprintf(name, sizeof name, "conv%d", i);
        duet_tensor *c = NULL, *e = NULL;
        rc = duet_module_forward(duet_module_child(self, name), h, &c);
        if (rc == DUET_OK) rc = duet_elu(c, 1.0f, &e);
        duet_tensor_release(h);
        duet_tensor_release(c);
        h = e;
    }
    duet_tensor *f = NULL, *l = NULL;
    if (rc == DUET_OK) rc = duet_flatten(h, &f);
    if (rc == DUET_OK) rc = duet_module_forward(duet_module_child(self, "fc"), f, &l);
    if (rc == DUET_OK) rc = duet_leaky_relu(l, 0.2f, out);
    duet_tensor_release(h);
    duet_tensor_release(f);
    duet_tensor_release(l);
    return rc;
}

static const duet_module_type disc_type = {"BenchDisc", disc_forward, NULL};

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static int step(duet_module *disc, duet_tensor *real, duet_tensor *fake, bool penalty,
                duet_rng *rng) {
    duet_tensor *pr = NULL, *pf = NULL, *mr = NULL, *mf = NULL, *w = NULL, *gp = NULL,
                *total = NULL;
    int rc = duet_module_forward(disc, real, &pr);
    if (rc == DUET_OK) rc = duet_module_forward(disc, fake, &pf);
    if (rc == DUET_OK) rc = duet_mean(pr, &mr);
    if (rc == DUET_OK) rc = duet_mean(pf, &mf);
    if (rc == DUET_OK) rc = duet_sub(mf, mr, &w);
    if (rc == DUET_OK && penalty)
        rc = duet_gradient_penalty_loss(disc, real, fake, NULL, 10.0f, rng, &gp);
    if (rc == DUET_OK && penalty) rc = duet_add(w, gp, &total);
    if (rc == DUET_OK) rc = duet_backward(penalty ? total : w);
    duet_tensor *ts[] = {pr, pf, mr, mf, w, gp, total};
    for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++) duet_tensor_release(ts[i]);
    return rc;
}

int main(int argc, char **argv) {
    int size = 128, batch = 2, reps = 3;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--size") == 0) size = atoi(argv[i + 1]);
        else if (strcmp(argv[i], "--batch") == 0) batch = atoi(argv[i + 1]);
        else if (strcmp(argv[i], "--reps") == 0) reps = atoi(argv[i + 1]);
        else {
            fprintf(stderr, "usage: %s [--size S] [--batch N] [--reps R]\n", argv[0]);
            return 2;
        }
    }
    if (size < 16 || size % 16 != 0 || batch < 1 || reps < 1 || reps > 100) {
        fprintf(stderr, "bench_penalty: --size must be a multiple of 16, --batch >= 1, --reps "
                        "in [1, 100]\n");
        return 2;
    }
    duet_rng rng = duet_rng_make(1, 0);
    duet_module *disc = NULL;
    int rc = duet_module_create(&disc_type, NULL, &disc);
    int in = 3;
    for (int i = 0; i < 4 && rc == DUET_OK; i++) {
        duet_module *c = NULL;
        char name[8];
        snprintf(name, sizeof name, "conv%d", i);
        rc = duet_conv2d_module_create(in, chans[i], 5, 2, 2, true, &rng, &c);
        if (rc == DUET_OK) rc = duet_module_add_child(disc, name, c);
        in = chans[i];
    }
    const int side = size / 16;
    duet_module *fc = NULL;
    if (rc == DUET_OK) rc = duet_linear_module_create(256 * side * side, 1, true, &rng, &fc);
    if (rc == DUET_OK) rc = duet_module_add_child(disc, "fc", fc);
    duet_tensor *real = NULL, *fake = NULL;
    const int64_t shape[4] = {batch, 3, size, size};
    if (rc == DUET_OK) rc = duet_tensor_create(4, shape, &real);
    if (rc == DUET_OK) rc = duet_tensor_create(4, shape, &fake);
    if (rc != DUET_OK) {
        fprintf(stderr, "bench_penalty: %s\n", duet_last_error());
        return 1;
    }
    for (int64_t i = 0; i < real->numel; i++) {
        real->data[i] = duet_rng_normal(&rng);
        fake->data[i] = duet_rng_normal(&rng);
    }
    double t[2][100];
    for (int r = 0; r < reps && rc == DUET_OK; r++)
        for (int p = 0; p < 2 && rc == DUET_OK; p++) {
            const double t0 = duet_time_now();
            rc = step(disc, real, fake, p == 1, &rng);
            t[p][r] = duet_time_now() - t0;
        }
    if (rc != DUET_OK) {
        fprintf(stderr, "bench_penalty: %s\n", duet_last_error());
        return 1;
    }
    qsort(t[0], (size_t)reps, sizeof(double), cmp);
    qsort(t[1], (size_t)reps, sizeof(double), cmp);
    printf("disc %dx%d batch %d: step without penalty %.3f s, with penalty %.3f s (x%.2f), "
           "median of %d\n", size, size, batch, t[0][reps / 2], t[1][reps / 2],
           t[1][reps / 2] / t[0][reps / 2], reps);
    duet_tensor_release(real);
    duet_tensor_release(fake);
    duet_module_destroy(disc);
    return 0;
}
