/* Ops on a GPU through their public entries, recorded on the tape and
 * differentiated there: a small network (conv2d, leaky_relu, conv2d,
 * sigmoid, tanh, relu, mul, sub, linear, mean) with the three losses
 * summed (add, scale),
 * against the same on the CPU;
 * Adam steps on the device; and no cudaMalloc in a training step after the
 * first. Needs a GPU; exits 77 (skipped) without. */
#include "testutil.h"

#include "cuda/cuda.h"
#include "gpu/gpu_skip.h"

#include <math.h>
#include <string.h>

static const duet_device GPU = {DUET_DEVICE_CUDA, 0};

enum { NPARAM = 6 };

typedef struct net {
    duet_tensor *w1, *b1, *w2, *b2, *wl, *bl;
} net;

static duet_tensor **params(net *n) { return &n->w1; }

/* h = conv(leaky_relu(conv(x))); the losses mse(sigmoid(h), target),
 * 0.5 l1(tanh(h) - sigmoid(h) * relu(h), target), 0.25 bce(relu(h) as
 * logits, 1) and 0.3 bce(h, target); total = 0.5 (sum of the four). The
 * four losses' values into vals. */
static int forward(net *n, duet_tensor *x, duet_tensor *target, float *vals, duet_tensor **total) {
    duet_tensor *h1 = NULL, *a1 = NULL, *h2 = NULL, *s = NULL, *t = NULL, *r = NULL, *sr = NULL;
    duet_tensor *d = NULL, *l[4] = {NULL}, *s01 = NULL, *s23 = NULL, *all = NULL;
    duet_tensor *lin = NULL, *lm = NULL, *all2 = NULL;
    DUET_TRY(duet_conv2d(x, n->w1, n->b1, 1, 1, &h1));
    DUET_TRY(duet_leaky_relu(h1, 0.2f, &a1));
    DUET_TRY(duet_conv2d(a1, n->w2, n->b2, 2, 1, &h2));
    DUET_TRY(duet_sigmoid(h2, &s));
    DUET_TRY(duet_tanh(h2, &t));
    DUET_TRY(duet_relu(h2, &r));
    DUET_TRY(duet_mul(s, r, &sr));
    DUET_TRY(duet_sub(t, sr, &d));
    DUET_TRY(duet_mse_loss(s, target, 1.0f, &l[0]));
    DUET_TRY(duet_l1_loss(d, target, 0.5f, &l[1]));
    DUET_TRY(duet_bce_with_logits_const(r, 1.0f, 0.25f, &l[2]));
    DUET_TRY(duet_bce_with_logits(h2, target, 0.3f, &l[3]));
    DUET_TRY(duet_add(l[0], l[1], &s01));
    DUET_TRY(duet_add(l[2], l[3], &s23));
    DUET_TRY(duet_add(s01, s23, &all));
    /* A linear layer over h's last dimension, its mean added. */
    DUET_TRY(duet_linear(h2, n->wl, n->bl, &lin));
    DUET_TRY(duet_mean(lin, &lm));
    DUET_TRY(duet_add(all, lm, &all2));
    DUET_TRY(duet_scale(all2, 0.5f, total));
    for (int i = 0; i < 4; i++) TU_OK(duet_tensor_copy_to_host(l[i], &vals[i]));
    duet_tensor *tmp[] = {h1, a1, h2, s, t, r, sr, d, l[0], l[1], l[2], l[3], s01, s23, all,
                          lin, lm, all2};
    for (size_t i = 0; i < sizeof tmp / sizeof tmp[0]; i++) duet_tensor_release(tmp[i]);
    return DUET_OK;
}

static void read_values(const duet_tensor *t, float *out) { TU_OK(duet_tensor_copy_to_host(t, out)); }

static void read_grad(const duet_tensor *t, float *out) {
    duet_tensor v = *t;
    v.data = t->grad;
    TU_OK(duet_tensor_copy_to_host(&v, out));
}

/* One step: forward, the four losses' values and the total into vals,
 * backward from the total. */
static void step(net *n, duet_tensor *x, duet_tensor *target, float *vals) {
    duet_tensor *total = NULL;
    TU_OK(forward(n, x, target, vals, &total));
    read_values(total, &vals[4]);
    TU_OK(duet_backward(total));
    duet_tensor_release(total);
}

static void test_network_matches_cpu(void **state) {
    (void)state;
    duet_rng rng = duet_rng_make(11, 0);
    net cpu = {tu_randn(&rng, 4, (int64_t[]){8, 3, 3, 3}, 0.3f),
               tu_randn(&rng, 1, (int64_t[]){8}, 0.1f),
               tu_randn(&rng, 4, (int64_t[]){4, 8, 3, 3}, 0.2f),
               tu_randn(&rng, 1, (int64_t[]){4}, 0.1f),
               tu_randn(&rng, 2, (int64_t[]){5, 8}, 0.3f),
               tu_randn(&rng, 1, (int64_t[]){5}, 0.1f)};
    net gpu;
    for (int i = 0; i < NPARAM; i++) {
        TU_OK(duet_tensor_to(params(&cpu)[i], GPU, &params(&gpu)[i]));
        params(&cpu)[i]->requires_grad = params(&gpu)[i]->requires_grad = true;
    }
    duet_tensor *x = tu_randn(&rng, 4, (int64_t[]){2, 3, 16, 16}, 1.0f);
    duet_tensor *target = tu_rand(&rng, 4, (int64_t[]){2, 4, 8, 8}, 0.0f, 1.0f);
    duet_tensor *gx = NULL, *gt = NULL;
    TU_OK(duet_tensor_to(x, GPU, &gx));
    TU_OK(duet_tensor_to(target, GPU, &gt));
    /* The input's gradient too. */
    x->requires_grad = gx->requires_grad = true;
    float cv[5], gv[5];
    uint64_t mallocs = 0, frees = 0;
    const duet_adam_hparams hp = {.lr = 1e-2f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f,
                                  .weight_decay = 0.0f};
    duet_tensor *cm[NPARAM], *cvv[NPARAM], *gm[NPARAM], *gvv[NPARAM];
    for (int i = 0; i < NPARAM; i++) {
        TU_OK(duet_tensor_create_like(params(&cpu)[i], &cm[i]));
        TU_OK(duet_tensor_create_like(params(&cpu)[i], &cvv[i]));
        TU_OK(duet_tensor_create_like(params(&gpu)[i], &gm[i]));
        TU_OK(duet_tensor_create_like(params(&gpu)[i], &gvv[i]));
        assert_int_equal(duet_tensor_device(gm[i]).type, DUET_DEVICE_CUDA);
    }
    for (int it = 0; it < 3; it++) {
        for (int i = 0; i < NPARAM; i++) {
            TU_OK(duet_tensor_zero_grad(params(&cpu)[i]));
            TU_OK(duet_tensor_zero_grad(params(&gpu)[i]));
        }
        TU_OK(duet_tensor_zero_grad(x));
        TU_OK(duet_tensor_zero_grad(gx));
        step(&cpu, x, target, cv);
        step(&gpu, gx, gt, gv);
        for (int i = 0; i < 5; i++)
            if (!(fabsf(gv[i] - cv[i]) <= 1e-5f * (1.0f + fabsf(cv[i]))))
                fail_msg("iteration %d loss %d: gpu %.9g, cpu %.9g", it, i, (double)gv[i],
                         (double)cv[i]);
        const char *names[NPARAM] = {"w1", "b1", "w2", "b2", "linear weight", "linear bias"};
        for (int i = 0; i < NPARAM; i++) {
            duet_tensor *c = params(&cpu)[i];
            float *g = malloc((size_t)c->numel * sizeof *g);
            read_grad(params(&gpu)[i], g);
            char what[64];
            snprintf(what, sizeof what, "iteration %d: gradient of %s", it, names[i]);
            tu_assert_close(g, c->grad, c->numel, 1e-4, 1e-5, what);
            free(g);
        }
        float *g = malloc((size_t)x->numel * sizeof *g);
        read_grad(gx, g);
        tu_assert_close(g, x->grad, x->numel, 1e-4, 1e-5, "gradient of the input");
        free(g);
        int64_t steps[NPARAM];
        for (int i = 0; i < NPARAM; i++) steps[i] = it + 1;
        TU_OK(duet_adam_update(NPARAM, params(&cpu), cm, cvv, steps, &hp));
        TU_OK(duet_adam_update(NPARAM, params(&gpu), gm, gvv, steps, &hp));
        for (int i = 0; i < NPARAM; i++) {
            duet_tensor *c = params(&cpu)[i];
            float *v = malloc((size_t)c->numel * sizeof *v);
            read_values(params(&gpu)[i], v);
            tu_assert_close(v, c->data, c->numel, 1e-4, 1e-5, "parameter after Adam");
            free(v);
        }
        /* A step after the first makes no cudaMalloc. */
        uint64_t m, f;
        duet__cuda_alloc_counts(0, &m, &f);
        if (it > 0) {
            assert_int_equal(m, mallocs);
            assert_int_equal(f, frees);
        }
        mallocs = m;
        frees = f;
    }
    for (int i = 0; i < NPARAM; i++) {
        duet_tensor *all[] = {params(&cpu)[i], params(&gpu)[i], cm[i], cvv[i], gm[i], gvv[i]};
        for (size_t k = 0; k < 6; k++) duet_tensor_release(all[k]);
    }
    duet_tensor *rest[] = {x, target, gx, gt};
    for (size_t k = 0; k < 4; k++) duet_tensor_release(rest[k]);
}

/* Without grad: no node recorded; with a frozen weight, no weight gradient. */
static void test_inference_and_frozen(void **state) {
    (void)state;
    duet_rng rng = duet_rng_make(12, 0);
    duet_tensor *x = tu_randn(&rng, 4, (int64_t[]){1, 2, 5, 5}, 1.0f), *gx = NULL, *y = NULL;
    TU_OK(duet_tensor_to(x, GPU, &gx));
    const size_t before = duet_tape_size();
    TU_OK(duet_sigmoid(gx, &y));
    assert_int_equal(duet_tape_size(), before);
    assert_int_equal(duet_tensor_device(y).type, DUET_DEVICE_CUDA);
    float v[50];
    read_values(y, v);
    for (int i = 0; i < 50; i++) assert_true(fabsf(v[i] - 1.0f / (1.0f + expf(-x->data[i]))) < 1e-6f);
    duet_tensor_release(y);
    duet_tensor *w = tu_randn(&rng, 4, (int64_t[]){3, 2, 3, 3}, 0.3f), *gw = NULL, *loss = NULL;
    TU_OK(duet_tensor_to(w, GPU, &gw));
    gx->requires_grad = true; /* the weight stays frozen */
    TU_OK(duet_conv2d(gx, gw, NULL, 1, 0, &y));
    TU_OK(duet_bce_with_logits_const(y, 0.0f, 1.0f, &loss));
    TU_OK(duet_backward(loss));
    assert_null(gw->grad);
    assert_non_null(gx->grad);
    duet_tensor *all[] = {loss, y, gw, w, gx, x};
    for (size_t k = 0; k < 6; k++) duet_tensor_release(all[k]);
}

int main(void) {
    gpu_or_skip("test_gpu_autograd");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_network_matches_cpu),
        cmocka_unit_test(test_inference_and_frozen),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
