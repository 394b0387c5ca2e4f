/* duet against PyTorch/numpy references: SRGAN's train_step
 * (tests/ref/ref_srgan.py: MMEditing's networks, losses and step order in
 * PyTorch, same weights, same batch), and MMEditing's PSNR, SSIM and
 * tensor2img (tests/ref/ref_metrics.py). */
#include "testutil.h"

#include <math.h>
#include <string.h>

/* A stored (N, H, W, C) float tensor of uint8 values back to bytes. */
static uint8_t *to_bytes(const duet_tensor *t) {
    uint8_t *b = malloc((size_t)t->numel);
    assert_non_null(b);
    for (int64_t i = 0; i < t->numel; i++) b[i] = (uint8_t)t->data[i];
    return b;
}

static void test_tensor2img(void **state) {
    (void)state;
    duet_st *st = tu_ref_load("metrics.safetensors");
    duet_tensor *in = tu_ref_tensor(st, "t2i.in");
    duet_tensor *want = tu_ref_tensor(st, "t2i.out");
    int64_t c = in->shape[1], h = in->shape[2], w = in->shape[3];
    uint8_t *img = malloc((size_t)in->numel);
    float *got = malloc((size_t)in->numel * sizeof *got);
    for (int64_t n = 0; n < in->shape[0]; n++)
        duet_tensor2img(img + n * c * h * w, in->data + n * c * h * w, c, h, w);
    for (int64_t i = 0; i < in->numel; i++) got[i] = img[i];
    tu_assert_close(got, want->data, want->numel, 0, 0, "tensor2img");
    free(img);
    free(got);
    duet_tensor_release(in);
    duet_tensor_release(want);
    duet_st_destroy(st);
}

static void test_psnr_ssim(void **state) {
    (void)state;
    duet_st *st = tu_ref_load("metrics.safetensors");
    duet_tensor *ta = tu_ref_tensor(st, "img.a"), *tb = tu_ref_tensor(st, "img.b");
    uint8_t *a = to_bytes(ta), *b = to_bytes(tb);
    int64_t n = ta->shape[0], h = ta->shape[1], w = ta->shape[2], c = ta->shape[3];
    const char *modes[] = {"rgb", "y"};
    const int crops[] = {0, 4};
    for (int m = 0; m < 2; m++) {
        for (int k = 0; k < 2; k++) {
            float psnr[2], ssim[2];
            for (int64_t i = 0; i < n; i++) {
                double p, s;
                const char *conv = m == 1 ? "y" : NULL;
                TU_OK(duet_psnr(a + i * h * w * c, b + i * h * w * c, h, w, c, crops[k], conv, &p));
                TU_OK(duet_ssim(a + i * h * w * c, b + i * h * w * c, h, w, c, crops[k], conv, &s));
                psnr[i] = (float)p;
                ssim[i] = (float)s;
            }
            char key[64];
            snprintf(key, sizeof key, "psnr.%s.%d", modes[m], crops[k]);
            tu_assert_ref(st, key, psnr, n, 1e-6, 0);
            snprintf(key, sizeof key, "ssim.%s.%d", modes[m], crops[k]);
            tu_assert_ref(st, key, ssim, n, 1e-6, 0);
        }
    }
    free(a);
    free(b);
    duet_tensor_release(ta);
    duet_tensor_release(tb);
    duet_st_destroy(st);
}

static void test_evaluate(void **state) {
    (void)state;
    duet_st *st = tu_ref_load("metrics.safetensors");
    duet_tensor *out = tu_ref_tensor(st, "eval.out"), *gt = tu_ref_tensor(st, "eval.gt");
    duet_test_cfg cfg = duet_test_cfg_default();
    cfg.crop_border = 4;
    cfg.convert_to = "y";
    duet_log_vars lv;
    TU_OK(duet_evaluate(&cfg, out, gt, &lv));
    double p = 0, s = 0;
    assert_true(duet_log_vars_get(&lv, "PSNR", &p));
    assert_true(duet_log_vars_get(&lv, "SSIM", &s));
    float got[2] = {(float)p, (float)s};
    tu_assert_ref(st, "eval.psnr", got, 1, 1e-6, 0);
    tu_assert_ref(st, "eval.ssim", got + 1, 1, 1e-6, 0);
    duet_tensor_release(out);
    duet_tensor_release(gt);
    duet_st_destroy(st);
}

/* ---- SRGAN train_step ----------------------------------------------------------- */

/* The discriminator's input size is the reference batch's: 32 for
 * ref_srgan.py's, 128 for MMEditing's own ModifiedVGG (gen_mmedit_refs.py),
 * which takes nothing else. */
static duet_model *ref_srgan_model(int input_size) {
    duet_srgan_opts o = duet_srgan_opts_default();
    o.generator.mid_channels = 16;
    o.generator.num_blocks = 2;
    o.discriminator.mid_channels = 8;
    o.discriminator.input_size = input_size;
    int cfg[5] = {8, 8, 0, 16, 16};
    o.perceptual_loss.ncfg = 5;
    memcpy(o.perceptual_loss.cfg, cfg, sizeof cfg);
    o.perceptual_loss.layer_ids[0] = 7;
    o.perceptual_loss.layer_weights[0] = 1.0f;
    o.perceptual_loss.norm_img = false;
    duet_rng rng = duet_rng_make(1, 0);
    duet_model *m = NULL;
    TU_OK(duet_srgan_create(&o, &rng, &m));
    return m;
}

/* Every state-dict entry after `step` steps against "step<step>.<name>",
 * to rtol 1e-4 (atol 1e-6). Adam's first steps move a parameter by about
 * lr * g / (|g| + eps): for an element whose gradient is at float32 noise
 * level (PyTorch's own float32 gradients differ from float64 by up to 7e-5
 * of the tensor's largest), the direction is noise. Elements whose
 * reference gradient, in any step so far, is below 3e-4 of the tensor's
 * largest (but not exactly 0: taps that only ever meet zero padding) may
 * differ by up to 2.1 * lr per step; they are counted and must stay a small
 * minority. */
static void compare_state(duet_module *root, const duet_st *st, int step, double lr) {
    duet_named_tensors l = {0};
    TU_OK(duet_module_state(root, &l));
    double worst = 0;
    int64_t total = 0, noisy = 0;
    for (size_t i = 0; i < l.count; i++) {
        char key[256];
        snprintf(key, sizeof key, "step%d.%s", step, l.items[i].name);
        duet_tensor *want = tu_ref_tensor(st, key);
        const double a = tu_ref_allowance(st, key);
        duet_tensor *t = l.items[i].tensor;
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
                if (d > a * 2.1 * lr * step)
                    fail_msg("%s[%lld]: got %.8g, want %.8g: moved %.3g, more than Adam can "
                             "in %d steps", key, (long long)k, t->data[k], want->data[k], d, step);
                continue;
            }
            double e = d / (1e-6 + 1e-4 * fabs((double)want->data[k]));
            if (e > worst) worst = e;
            if (d > a * (1e-6 + 1e-4 * fabs((double)want->data[k])))
                fail_msg("step%d.%s[%lld]: got %.8g, want %.8g (rtol 1e-4, atol 1e-6)", step,
                         l.items[i].name, (long long)k, t->data[k], want->data[k]);
        }
        free(mask);
        duet_tensor_release(want);
    }
    printf("    step%d.*: %zu entries, %lld values: largest difference %.3g of the "
           "tolerance 1e-6 + 1e-4 |want|; %lld values with noise-level gradients (within 2.1 lr "
           "per step)\n",
           step, l.count, (long long)total, worst, (long long)noisy);
    assert_true(noisy * 50 < total);
    duet_named_tensors_clear(&l);
}

static void compare_log(const duet_st *st, const duet_log_vars *log, int step) {
    static const char *const names[7] = {"loss_pix", "loss_perceptual", "loss_gan", "loss_d_real",
                                         "loss_d_fake", "real_logit_mean", "fake_logit_mean"};
    tu_ref_compare_log(st, log, step, names, 7);
}

/* The gradients themselves (before Adam's normalisation): the generator's
 * from its step, the discriminator's summed over real and fake; the frozen
 * perceptual network has none. */
static void compare_grads(duet_module *root, const duet_st *st, const char *prefix) {
    duet_named_tensors l = {0};
    TU_OK(duet_module_named_parameters(root, false, &l));
    double worst = 0;
    size_t ngrads = 0;
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
        for (int64_t k = 0; k < want->numel; k++)
            if (fabs(want->data[k]) > scale) scale = fabs(want->data[k]);
        assert_non_null(t->grad);
        double w = 0;
        for (int64_t k = 0; k < t->numel; k++)
            w = fmax(w, fabs((double)t->grad[k] - want->data[k]) /
                            (1e-4 * scale + 1e-3 * fabs((double)want->data[k])));
        if (w > worst) worst = w;
        const double a = tu_ref_allowance(st, key);
        tu_assert_ref(st, key, t->grad, t->numel, a * 1e-3, a * 1e-4 * scale);
        ngrads++;
        duet_tensor_release(want);
    }
    printf("    %s*: %zu gradients, largest difference %.3g of the tolerance 1e-3 |want| + "
           "1e-4 max|want|\n", prefix, ngrads, worst);
    assert_int_equal(ngrads, 18 + 33);
    duet_named_tensors_clear(&l);
}

static void test_srgan_train_step_vs_pytorch(void **state) {
    static const char *const parts[2] = {"generator", "discriminator"};
    (void)state;
    duet_st *st = tu_ref_load("srgan.safetensors");
    duet_tensor *lq = tu_ref_tensor(st, "lq"), *gt = tu_ref_tensor(st, "gt");
    duet_model *m = ref_srgan_model((int)gt->shape[3]);
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
    /* ref_srgan.py writes 2 steps, MMEditing's (gen_mmedit_refs.py) 10:
     * every entry is compared in the first 2, the distance from float64 in
     * all (tu_compare_distance). */
    int step = 1;
    for (char key[32] = "log1.loss_pix"; duet_st_has(st, key);
         snprintf(key, sizeof key, "log%d.loss_pix", ++step)) {
        TU_OK(duet_model_train_step(m, &b, opts, &log));
        tu_compare_distance(root, st, step, parts, 2);
        if (step > 2) continue;
        char prefix[24];
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

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tensor2img),
        cmocka_unit_test(test_psnr_ssim),
        cmocka_unit_test(test_evaluate),
        cmocka_unit_test(test_srgan_train_step_vs_pytorch),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
