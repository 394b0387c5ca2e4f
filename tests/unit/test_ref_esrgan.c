/* ESRGAN's pieces against PyTorch (tests/ref/ref_esrgan.py, written from
 * MMEditing 0.x's code): the new ops (nearest upsampling, align_corners
 * resize, Gram matrix, a - mean(b) per group of samples), GANLoss of every type in every
 * (target, is_disc) combination with its gradient, PerceptualLoss with the
 * style term for both criteria, and two full ESRGAN train_steps from the
 * same weights (the second from PyTorch's state after the first): log
 * values, every gradient and every state entry, at the tolerances of
 * test_ref_srgan.c. */
#include "testutil.h"

#include <math.h>
#include <stdio.h>
#include <string.h>


static duet_st *ops_ref;

/* ---- one op or loss against NAME.* --------------------------------------------- */


static void run_case(const char *name, int n, tu_ref_op op, void *ctx, double rtol) {
    tu_ref_run_case(ops_ref, name, n, op, ctx, rtol, 1e-6);
}

static int op_nearest(void *c, duet_tensor *const *in, duet_tensor **out) {
    return duet_upsample_nearest(in[0], *(const int *)c, out);
}
static int op_resize(void *c, duet_tensor *const *in, duet_tensor **out) {
    const int64_t *hw = c;
    return duet_resize_bilinear_ac(in[0], hw[0], hw[1], out);
}
static int op_gram(void *c, duet_tensor *const *in, duet_tensor **out) {
    (void)c;
    return duet_gram_matrix(in[0], out);
}
static int op_sub_group_mean(void *c, duet_tensor *const *in, duet_tensor **out) {
    return duet_sub_group_mean(in[0], in[1], *(const int *)c, out);
}

static void test_ops(void **state) {
    (void)state;
    int two = 2, three = 3;
    run_case("nearest2", 1, op_nearest, &two, 1e-6);
    run_case("nearest3", 1, op_nearest, &three, 1e-6);
    int64_t up[2] = {7, 9}, down[2] = {3, 2}, one[2] = {1, 4};
    run_case("resize_up", 1, op_resize, up, 1e-5);
    run_case("resize_down", 1, op_resize, down, 1e-5);
    run_case("resize_one", 1, op_resize, one, 1e-5);
    run_case("gram", 1, op_gram, NULL, 1e-5);
    int g1 = 1, g3 = 3;
    run_case("sub_group_mean1", 2, op_sub_group_mean, &g1, 1e-5);
    run_case("sub_group_mean3", 2, op_sub_group_mean, &g3, 1e-5);
}

/* ---- GANLoss ------------------------------------------------------------------ */

typedef struct gan_case {
    duet_module *loss;
    bool real, disc, masked;
} gan_case;

static int op_gan(void *c, duet_tensor *const *in, duet_tensor **out) {
    const gan_case *g = c;
    return duet_gan_loss_masked(g->loss, in[0], g->real, g->disc, g->masked ? in[1] : NULL, out);
}

static void test_gan_losses(void **state) {
    (void)state;
    const char *types[6] = {"vanilla", "lsgan", "wgan", "hinge", "smgan", "smgan_resize"};
    for (int t = 0; t < 6; t++) {
        duet_gan_loss_opts o = duet_gan_loss_opts_default();
        o.gan_type = t == 5 ? "smgan" : types[t];
        o.loss_weight = 0.5f;
        gan_case g = {.masked = t >= 4};
        TU_OK(duet_gan_loss_create(&o, &g.loss));
        for (int real = 1; real >= 0; real--)
            for (int disc = 1; disc >= 0; disc--) {
                char name[64];
                snprintf(name, sizeof name, "gan.%s.%s.%s", types[t], real ? "real" : "fake",
                         disc ? "d" : "g");
                g.real = real;
                g.disc = disc;
                run_case(name, g.masked ? 2 : 1, op_gan, &g, 1e-4);
            }
        duet_module_destroy(g.loss);
    }
    /* smgan needs its mask. */
    duet_gan_loss_opts o = duet_gan_loss_opts_default();
    o.gan_type = "smgan";
    duet_module *m = NULL;
    TU_OK(duet_gan_loss_create(&o, &m));
    duet_tensor *p = tu_ref_tensor(ops_ref, "gan.smgan.real.d.in0"), *l = NULL;
    tu_expect_error(duet_gan_loss(m, p, true, true, &l), DUET_EINVAL, "mask", NULL);
    duet_tensor_release(p);
    duet_module_destroy(m);
}

/* ---- PerceptualLoss with style ------------------------------------------------- */

typedef struct percep_case {
    duet_module *loss;
    bool style;
} percep_case;

static int op_percep(void *c, duet_tensor *const *in, duet_tensor **out) {
    const percep_case *p = c;
    duet_tensor *a = NULL, *b = NULL;
    DUET_TRY(duet_perceptual_loss(p->loss, in[0], in[1], &a, &b));
    *out = p->style ? b : a;
    duet_tensor_release(p->style ? a : b);
    return DUET_OK;
}

static void test_perceptual_style(void **state) {
    (void)state;
    const char *crits[2] = {"l1", "mse"};
    for (int c = 0; c < 2; c++) {
        duet_perceptual_loss_opts o = duet_perceptual_loss_opts_default();
        int cfg[5] = {8, 8, 0, 16, 16};
        o.ncfg = 5;
        memcpy(o.cfg, cfg, sizeof cfg);
        o.nlayer_weights = 2;
        o.layer_ids[0] = 2;
        o.layer_weights[0] = 0.5f;
        o.layer_ids[1] = 7;
        o.layer_weights[1] = 1.0f;
        o.perceptual_weight = 0.7f;
        o.style_weight = 2.0f;
        o.norm_img = true;
        o.criterion = crits[c];
        duet_rng rng = duet_rng_make(3, 0);
        percep_case p = {0};
        TU_OK(duet_perceptual_loss_create(&o, &rng, &p.loss));
        char prefix[64], name[64];
        snprintf(prefix, sizeof prefix, "percep.%s.init.", crits[c]);
        size_t missing = 0, unexpected = 0;
        TU_OK(duet_module_load_state(p.loss, ops_ref, prefix, true, &missing, &unexpected));
        snprintf(name, sizeof name, "percep.%s.percep", crits[c]);
        run_case(name, 2, op_percep, &p, 1e-4);
        p.style = true;
        snprintf(name, sizeof name, "percep.%s.style", crits[c]);
        run_case(name, 2, op_percep, &p, 1e-4);
        duet_module_destroy(p.loss);
    }
}

/* ---- ESRGAN train_step ----------------------------------------------------------- */

/* input_size: the reference batch's (see test_ref_srgan.c). */
static duet_model *ref_esrgan_model(int input_size) {
    duet_esrgan_opts o = duet_esrgan_opts_default();
    o.generator.mid_channels = 8;
    o.generator.num_blocks = 2;
    o.generator.growth_channels = 4;
    o.discriminator.mid_channels = 8;
    o.discriminator.input_size = input_size;
    int cfg[5] = {8, 8, 0, 16, 16};
    o.perceptual_loss.ncfg = 5;
    memcpy(o.perceptual_loss.cfg, cfg, sizeof cfg);
    o.perceptual_loss.layer_ids[0] = 7;
    o.perceptual_loss.layer_weights[0] = 1.0f;
    duet_rng rng = duet_rng_make(1, 0);
    duet_model *m = NULL;
    TU_OK(duet_esrgan_create(&o, &rng, &m));
    return m;
}

/* As test_ref_srgan.c: every state entry after step `step` to rtol 1e-4 /
 * atol 1e-6, except elements whose reference gradient was ever at float32
 * noise level (nonzero, below 3e-4 of the tensor's largest), where Adam's
 * normalised steps may go either way: within 2.1 lr of the reference (the
 * model starts each step from the reference's state, so only this step's
 * move can differ), a small minority. No tolerance here depends on PyTorch's
 * own float32 error: a skipped step (lr) or a wrong move of any element
 * outside the noise mask fails. */
static void compare_state(duet_module *root, const duet_st *st, int step, double lr) {
    duet_named_tensors l = {0};
    TU_OK(duet_module_state(root, &l));
    int64_t total = 0, noisy = 0;
    double worst = 0;
    for (size_t i = 0; i < l.count; i++) {
        char key[256];
        snprintf(key, sizeof key, "step%d.%s", step, l.items[i].name);
        duet_tensor *want = tu_ref_tensor(st, key), *t = l.items[i].tensor;
        const double a = tu_ref_allowance(st, key);
        assert_int_equal(t->numel, want->numel);
        bool *mask = calloc((size_t)t->numel, sizeof *mask);
        for (int s = 1; s <= step; s++) {
            snprintf(key, sizeof key, "grad%d.%s", s, l.items[i].name);
            if (!duet_st_has(st, key)) continue;
            duet_tensor *g = tu_ref_tensor(st, key);
            double gmax = 0;
            for (int64_t k = 0; k < g->numel; k++) gmax = fmax(gmax, fabs(g->data[k]));
            for (int64_t k = 0; k < g->numel; k++)
                mask[k] |= g->data[k] != 0.0f && fabs(g->data[k]) < 3e-4 * gmax;
            duet_tensor_release(g);
        }
        for (int64_t k = 0; k < t->numel; k++) {
            double d = fabs((double)t->data[k] - want->data[k]);
            total++;
            if (mask[k]) {
                noisy++;
                if (d > a * 2.1 * lr)
                    fail_msg("step%d.%s[%lld]: got %.8g, want %.8g: more than Adam can move",
                             step, l.items[i].name, (long long)k, t->data[k], want->data[k]);
                continue;
            }
            double tol = 1e-6 + 1e-4 * fabs((double)want->data[k]);
            worst = fmax(worst, d / tol);
            if (d > a * tol)
                fail_msg("step%d.%s[%lld]: got %.8g, want %.8g (rtol 1e-4, atol 1e-6)", step,
                         l.items[i].name, (long long)k, t->data[k], want->data[k]);
        }
        free(mask);
        duet_tensor_release(want);
    }
    printf("    step%d.*: %zu entries, %lld values, largest difference %.3g of the tolerance "
           "1e-6 + 1e-4 |want|; %lld noise-level\n", step, l.count, (long long)total, worst,
           (long long)noisy);
    assert_true(noisy * 50 < total);
    duet_named_tensors_clear(&l);
}

/* MMEditing's ESRGAN log keys, in its order, and nothing else. */
static void compare_log(const duet_st *st, const duet_log_vars *log, int step) {
    /* "loss", the generator's parse_losses total, after its terms. */
    assert_int_equal(log->count, 6);
    assert_string_equal(log->names[3], "loss");
    const double g = log->values[0] + log->values[1] + log->values[2];
    assert_true(fabs(log->values[3] - g) <= 1e-12 * fabs(g));
    const char *names[5] = {"loss_pix", "loss_perceptual", "loss_gan", "loss_d_real",
                            "loss_d_fake"};
    for (int i = 0; i < 5; i++) {
        assert_string_equal(log->names[i < 3 ? i : i + 1], names[i]);
        char key[64];
        snprintf(key, sizeof key, "log%d.%s", step, names[i]);
        float got = (float)log->values[i < 3 ? i : i + 1];
        const double a = tu_ref_allowance(st, key);
        tu_assert_ref(st, key, &got, 1, a * 1e-4, a * 1e-7);
    }
}

/* The gradients before Adam: the generator's from its step, the
 * discriminator's summed over its real and fake backward passes; as
 * test_ref_srgan.c, to rtol 1e-3 and 1e-4 of the tensor's largest, with a
 * floor of 6e-8 (two float32 ulps of 0.25): the last discriminator bias's
 * gradient is the real pass's mean(sigmoid(r - mean f) - 1) / 2 plus the
 * fake pass's mean(sigmoid(f - mean r)) / 2, terms of about 0.25 that
 * cancel to ~1e-6, so only their absolute precision is left. */
static void compare_grads(duet_module *root, const duet_st *st, const char *prefix) {
    duet_named_tensors l = {0};
    TU_OK(duet_module_named_parameters(root, false, &l));
    size_t ngrads = 0;
    double worst = 0;
    for (size_t i = 0; i < l.count; i++) {
        char key[256];
        snprintf(key, sizeof key, "%s%s", prefix, l.items[i].name);
        duet_tensor *t = l.items[i].tensor;
        if (!duet_st_has(st, key)) {
            assert_true(strncmp(l.items[i].name, "perceptual_loss.", 16) == 0);
            assert_null(t->grad);
            continue;
        }
        duet_tensor *want = tu_ref_tensor(st, key);
        double scale = 0;
        for (int64_t k = 0; k < want->numel; k++) scale = fmax(scale, fabs(want->data[k]));
        assert_non_null(t->grad);
        const double atol = fmax(1e-4 * scale, 6e-8);
        for (int64_t k = 0; k < t->numel; k++)
            worst = fmax(worst, fabs((double)t->grad[k] - want->data[k]) /
                                    (atol + 1e-3 * fabs((double)want->data[k])));
        const double a = tu_ref_allowance(st, key);
        tu_assert_ref(st, key, t->grad, t->numel, a * 1e-3, a * atol);
        ngrads++;
        duet_tensor_release(want);
    }
    printf("    %s*: %zu gradients, largest difference %.3g of the tolerance 1e-3 |want| + "
           "max(1e-4 max|want|, 6e-8)\n", prefix, ngrads, worst);
    /* RRDBNet: conv_first + 2 RRDB x 3 RDB x 5 convs + 5 convs, weight and
     * bias each; ModifiedVGG: 33 tensors. */
    assert_int_equal(ngrads, 2 * (1 + 2 * 3 * 5 + 5) + 33);
    duet_named_tensors_clear(&l);
}

static void test_esrgan_train_step_vs_pytorch(void **state) {
    static const char *const parts[2] = {"generator", "discriminator"};
    (void)state;
    duet_st *st = tu_ref_load("esrgan.safetensors");
    duet_tensor *lq = tu_ref_tensor(st, "lq"), *gt = tu_ref_tensor(st, "gt");
    duet_model *m = ref_esrgan_model((int)gt->shape[3]);
    duet_module *root = duet_model_module(m);
    tu_ref_load_state(root, st, "init.");
    duet_optimizer_set *opts = NULL;
    TU_OK(duet_optimizer_set_create(&opts));
    duet_adam_opts a = duet_adam_opts_default();
    a.lr = 1e-4f;
    TU_OK(duet_optimizer_set_add_adam(opts, m, "generator", &a));
    TU_OK(duet_optimizer_set_add_adam(opts, m, "discriminator", &a));
    duet_batch b = {0};
    TU_OK(duet_batch_add_tensor(&b, "lq", lq));
    TU_OK(duet_batch_add_tensor(&b, "gt", gt));
    duet_log_vars log;
    /* ref_esrgan.py writes 2 steps, MMEditing's (gen_mmedit_refs.py) 10:
     * every entry is compared in the first 2, the distance from float64 in
     * all (tu_compare_distance). */
    int step = 1;
    for (char key[32] = "log1.loss_pix"; duet_st_has(st, key);
         snprintf(key, sizeof key, "log%d.loss_pix", ++step)) {
        /* Step 2 starts from PyTorch's weights and statistics after step 1
         * (the optimizers' moments stay the model's own). From its own step
         * 1 it would differ by the noise-level elements' moves (up to 2 lr
         * either way), which the relativistic losses, differences of
         * near-equal terms, amplify to 2e-3 of the largest gradient in step
         * 2 (PyTorch's float32 run against its float64 run shows the same):
         * tolerances that allow that cannot see a wrong step. */
        if (step == 2) tu_ref_load_state(root, st, "step1.");
        TU_OK(duet_model_train_step(m, &b, opts, &log));
        tu_compare_distance(root, st, step, parts, 2);
        if (step > 2) continue;
        char prefix[16];
        snprintf(prefix, sizeof prefix, "grad%d.", step);
        compare_log(st, &log, step);
        compare_grads(root, st, prefix);
        compare_state(root, st, step, a.lr);
        tu_compare_adam_moments(opts, parts, 2, st, step);
    }
    assert_true(step - 1 >= 2);
    assert_int_equal(duet_srgan_step_counter(m), step - 1);
    duet_batch_clear(&b);
    duet_tensor_release(lq);
    duet_tensor_release(gt);
    duet_optimizer_set_destroy(opts);
    duet_model_destroy(m);
    duet_st_destroy(st);
}

/* The op cases load their file each, so that the train step alone can run
 * against a directory that has only esrgan.safetensors (the `mmedit`
 * tests: MMEditing's own ESRGAN, gen_mmedit_refs.py). */
static int load_ops(void **state) {
    (void)state;
    ops_ref = tu_ref_load("esrgan_ops.safetensors");
    return 0;
}

static int free_ops(void **state) {
    (void)state;
    duet_st_destroy(ops_ref);
    ops_ref = NULL;
    return 0;
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_ops, load_ops, free_ops),
        cmocka_unit_test_setup_teardown(test_gan_losses, load_ops, free_ops),
        cmocka_unit_test_setup_teardown(test_perceptual_style, load_ops, free_ops),
        cmocka_unit_test(test_esrgan_train_step_vs_pytorch),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
