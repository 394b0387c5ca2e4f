/* ESRGAN in one process, beyond the PyTorch comparison of test_ref_esrgan.c:
 * finite-difference gradient checks of the new ops and GAN losses,
 * RRDBNet's names, shapes and MMEditing init, the ESRGAN step's structure
 * (which parameters get gradients, the discriminator frozen in the
 * generator step, disc_init_steps), and the registry: ESRGAN, RRDBNet and a
 * BasicRestorer around an RRDBNet from config text, PerceptualLoss's
 * style_weight default, and the shipped configs. */
#include "testutil.h"

#include <math.h>
#include <string.h>

#define EPS 1e-2
#define RTOL 1e-2
#define ATOL 2e-3

static duet_tensor *randn_grad(duet_rng *rng, int ndim, const int64_t *shape, float scale) {
    duet_tensor *t = tu_randn(rng, ndim, shape, scale);
    t->requires_grad = true;
    return t;
}

/* ---- gradient checks --------------------------------------------------------------- */

static int g_nearest(void *c, duet_tensor *const *in, duet_tensor **out) {
    return duet_upsample_nearest(in[0], *(int *)c, out);
}
static int g_resize(void *c, duet_tensor *const *in, duet_tensor **out) {
    const int64_t *hw = c;
    return duet_resize_bilinear_ac(in[0], hw[0], hw[1], out);
}
static int g_gram(void *c, duet_tensor *const *in, duet_tensor **out) {
    (void)c;
    return duet_gram_matrix(in[0], out);
}
static int g_sub_group_mean(void *c, duet_tensor *const *in, duet_tensor **out) {
    return duet_sub_group_mean(in[0], in[1], *(int *)c, out);
}

static void test_gradcheck_ops(void **state) {
    (void)state;
    duet_rng rng = duet_rng_make(31, 0);
    int f = 2;
    duet_tensor *x = randn_grad(&rng, 4, (int64_t[]){2, 3, 3, 4}, 1.0f);
    tu_gradcheck(g_nearest, &f, 1, &x, EPS, RTOL, ATOL, 72);
    duet_tensor_release(x);
    f = 3;
    x = randn_grad(&rng, 4, (int64_t[]){1, 2, 2, 3}, 1.0f);
    tu_gradcheck(g_nearest, &f, 1, &x, EPS, RTOL, ATOL, 12);
    duet_tensor_release(x);
    const int64_t sizes[3][2] = {{7, 9}, {2, 3}, {1, 5}};
    for (int i = 0; i < 3; i++) {
        x = randn_grad(&rng, 4, (int64_t[]){2, 2, 4, 5}, 1.0f);
        tu_gradcheck(g_resize, (void *)sizes[i], 1, &x, EPS, RTOL, ATOL, 80);
        duet_tensor_release(x);
    }
    x = randn_grad(&rng, 4, (int64_t[]){2, 3, 4, 5}, 1.0f);
    tu_gradcheck(g_gram, NULL, 1, &x, EPS, RTOL, ATOL, 120);
    duet_tensor_release(x);
    for (int groups = 1; groups <= 3; groups += 2) {
        duet_tensor *in[2] = {randn_grad(&rng, 2, (int64_t[]){6, 2}, 1.0f),
                              randn_grad(&rng, 2, (int64_t[]){6, 2}, 1.0f)};
        tu_gradcheck(g_sub_group_mean, &groups, 2, in, EPS, RTOL, ATOL, 12);
        duet_tensor_release(in[0]);
        duet_tensor_release(in[1]);
    }
    duet_tensor *a = tu_randn(&rng, 2, (int64_t[]){5, 2}, 1.0f), *y = NULL;
    tu_expect_error(duet_sub_group_mean(a, a, 2, &y), DUET_EINVAL, "equal groups", NULL);
    duet_tensor_release(a);
}

/* Nearest upsampling copies each value into its f x f block exactly. */
static void test_nearest_values(void **state) {
    (void)state;
    duet_rng rng = duet_rng_make(32, 0);
    duet_tensor *x = tu_randn(&rng, 4, (int64_t[]){1, 2, 3, 2}, 1.0f), *y = NULL;
    TU_OK(duet_upsample_nearest(x, 2, &y));
    assert_int_equal(y->shape[2], 6);
    assert_int_equal(y->shape[3], 4);
    for (int c = 0; c < 2; c++)
        for (int i = 0; i < 6; i++)
            for (int j = 0; j < 4; j++)
                assert_true(y->data[(c * 6 + i) * 4 + j] == x->data[(c * 3 + i / 2) * 2 + j / 2]);
    duet_tensor_release(y);
    tu_expect_error(duet_upsample_nearest(x, 0, &y), DUET_EINVAL, "upsample_nearest", NULL);
    duet_tensor_release(x);
}

typedef struct gan_ctx {
    duet_module *loss;
    bool real, disc;
    duet_tensor *mask;
} gan_ctx;

static int g_gan(void *c, duet_tensor *const *in, duet_tensor **out) {
    gan_ctx *g = c;
    return duet_gan_loss_masked(g->loss, in[0], g->real, g->disc, g->mask, out);
}

static void test_gradcheck_gan_losses(void **state) {
    (void)state;
    duet_rng rng = duet_rng_make(33, 0);
    const char *types[5] = {"vanilla", "lsgan", "wgan", "hinge", "smgan"};
    duet_tensor *mask = tu_rand(&rng, 4, (int64_t[]){2, 1, 6, 6}, 0.2f, 1.0f);
    for (int t = 0; t < 5; t++) {
        duet_gan_loss_opts o = duet_gan_loss_opts_default();
        o.gan_type = types[t];
        o.loss_weight = 0.3f;
        gan_ctx g = {.mask = t == 4 ? mask : NULL};
        TU_OK(duet_gan_loss_create(&o, &g.loss));
        for (int k = 0; k < 4; k++) {
            g.real = k & 1;
            g.disc = k & 2;
            /* smgan: a 4x4 map resized to the 6x6 mask. Hinge: values kept
             * off its kink at |x| = 1. */
            duet_tensor *x = randn_grad(&rng, 4, (int64_t[]){2, 1, 4, 4}, 2.0f);
            for (int64_t i = 0; i < x->numel; i++)
                if (fabsf(fabsf(x->data[i]) - 1.0f) < 0.05f) x->data[i] *= 1.2f;
            tu_gradcheck(g_gan, &g, 1, &x, EPS, RTOL, ATOL, 32);
            duet_tensor_release(x);
        }
        duet_module_destroy(g.loss);
    }
    duet_tensor_release(mask);
}

/* ---- RRDBNet ----------------------------------------------------------------------- */

static void test_rrdbnet_structure(void **state) {
    (void)state;
    duet_rng rng = duet_rng_make(34, 0);
    duet_rrdbnet_opts o = duet_rrdbnet_opts_default();
    assert_int_equal(o.num_blocks, 23);
    assert_int_equal(o.growth_channels, 32);
    o.mid_channels = 16;
    o.num_blocks = 2;
    o.growth_channels = 8;
    duet_module *g = NULL;
    TU_OK(duet_rrdbnet_create(&o, &rng, &g));
    duet_named_tensors st = {0};
    TU_OK(duet_module_state(g, &st));
    /* conv_first, 2 x 3 x 5 dense convs, conv_body, conv_up1/2, conv_hr,
     * conv_last: weight + bias each, in PyTorch's order. */
    assert_int_equal(st.count, 2 * (1 + 30 + 5));
    assert_string_equal(st.items[0].name, "conv_first.weight");
    assert_string_equal(st.items[2].name, "body.0.rdb1.conv1.weight");
    assert_string_equal(st.items[st.count - 2].name, "conv_last.weight");
    duet_tensor *c5 = duet_module_param(
        duet_module_child(duet_module_child(duet_module_child(duet_module_child(g, "body"), "1"),
                                            "rdb3"), "conv5"), "weight");
    /* conv5: mid + 4 growth -> mid channels */
    assert_int_equal(c5->shape[0], 16);
    assert_int_equal(c5->shape[1], 16 + 4 * 8);
    /* Every conv kaiming_normal (fan_in, gain sqrt 2) * 0.1, bias 0: the
     * empirical std of the dense blocks' and the outer convs' weights. */
    double ss = 0;
    int64_t n = 0;
    for (size_t i = 0; i < st.count; i++) {
        const duet_tensor *t = st.items[i].tensor;
        if (strstr(st.items[i].name, ".bias") != NULL) {
            for (int64_t k = 0; k < t->numel; k++) assert_true(t->data[k] == 0.0f);
            continue;
        }
        double fan_in = (double)(t->numel / t->shape[0]);
        for (int64_t k = 0; k < t->numel; k++) ss += t->data[k] * t->data[k] * fan_in / 2.0;
        n += t->numel;
    }
    double std = sqrt(ss / (double)n);
    assert_true(std > 0.095 && std < 0.105);
    duet_named_tensors_clear(&st);

    duet_tensor *x = tu_rand(&rng, 4, (int64_t[]){2, 3, 5, 6}, 0, 1), *y = NULL;
    TU_OK(duet_module_forward(g, x, &y));
    assert_int_equal(y->shape[2], 20);
    assert_int_equal(y->shape[3], 24);
    duet_tensor_release(y);
    duet_tensor_release(x);
    x = tu_rand(&rng, 4, (int64_t[]){1, 4, 5, 5}, 0, 1);
    tu_expect_error(duet_module_forward(g, x, &y), DUET_ESHAPE, "RRDBNet", NULL);
    duet_tensor_release(x);
    duet_module_destroy(g);
    o.upscale_factor = 2;
    tu_expect_error(duet_rrdbnet_create(&o, &rng, &g), DUET_EUNSUPPORTED, "x4", NULL);
}

/* ---- ESRGAN's step structure ---------------------------------------------------------- */

/* A copy of every state value of m, in state-dict order (the entries of
 * duet_module_state are the live tensors). */
static float *snapshot(duet_module *m, size_t *n) {
    duet_named_tensors st = {0};
    TU_OK(duet_module_state(m, &st));
    size_t total = 0;
    for (size_t i = 0; i < st.count; i++) total += (size_t)st.items[i].tensor->numel;
    float *buf = malloc(total * sizeof *buf), *p = buf;
    for (size_t i = 0; i < st.count; i++) {
        memcpy(p, st.items[i].tensor->data, (size_t)st.items[i].tensor->numel * sizeof *p);
        p += st.items[i].tensor->numel;
    }
    duet_named_tensors_clear(&st);
    *n = total;
    return buf;
}

static duet_esrgan_opts tiny_esrgan(void) {
    duet_esrgan_opts o = duet_esrgan_opts_default();
    o.generator.mid_channels = 8;
    o.generator.num_blocks = 1;
    o.generator.growth_channels = 4;
    o.discriminator.mid_channels = 4;
    o.discriminator.input_size = 32;
    int cfg[4] = {4, 4, 0, 8};
    o.perceptual_loss.ncfg = 4;
    memcpy(o.perceptual_loss.cfg, cfg, sizeof cfg);
    o.perceptual_loss.layer_ids[0] = 5;
    return o;
}

static void test_esrgan_step(void **state) {
    (void)state;
    duet_esrgan_opts o = tiny_esrgan();
    assert_true(o.perceptual_loss.style_weight == 0.0f); /* MMEditing's ESRGAN config */
    o.disc_init_steps = 1;
    o.perceptual_loss.style_weight = 1.0f;
    duet_rng rng = duet_rng_make(35, 0);
    duet_model *m = NULL;
    TU_OK(duet_esrgan_create(&o, &rng, &m));
    assert_string_equal(duet_model_type_name(m), "ESRGAN");
    assert_true(duet_module_is(duet_model_part(m, "generator"), "RRDBNet"));
    duet_optimizer_set *opts = tu_adam_pair(m, 1e-3f);
    duet_batch b;
    tu_sr_batch(&b, 36, 2);
    duet_module *gen = duet_model_part(m, "generator");
    size_t n0 = 0, n1 = 0, n2 = 0;
    float *before = snapshot(gen, &n0);
    duet_log_vars log;
    double v;
    /* Iteration 0 < disc_init_steps: the discriminator alone. */
    TU_OK(duet_model_train_step(m, &b, opts, &log));
    assert_int_equal(log.count, 2); /* no generator step: no "loss" */
    assert_true(duet_log_vars_get(&log, "loss_d_real", &v));
    assert_true(duet_log_vars_get(&log, "loss_d_fake", &v));
    float *after1 = snapshot(gen, &n1);
    assert_int_equal(n0, n1);
    assert_memory_equal(before, after1, n0 * sizeof(float));
    /* Then both, with the style term on. */
    TU_OK(duet_model_train_step(m, &b, opts, &log));
    const char *keys[7] = {"loss_pix", "loss_perceptual", "loss_style", "loss_gan", "loss",
                           "loss_d_real", "loss_d_fake"};
    assert_int_equal(log.count, 7);
    for (int i = 0; i < 7; i++) {
        assert_string_equal(log.names[i], keys[i]);
        assert_true(isfinite(log.values[i]));
    }
    assert_true(log.values[2] > 0.0);
    float *after2 = snapshot(gen, &n2);
    assert_true(memcmp(before, after2, n0 * sizeof(float)) != 0);
    free(before);
    free(after1);
    free(after2);
    assert_int_equal(duet_srgan_step_counter(m), 2);
    duet_srgan_set_step_counter(m, 7);
    assert_int_equal(duet_srgan_step_counter(m), 7);
    /* The frozen perceptual network never gets a gradient. */
    duet_named_tensors p = {0};
    TU_OK(duet_module_named_parameters(duet_model_part(m, "perceptual_loss"), false, &p));
    for (size_t i = 0; i < p.count; i++) assert_null(p.items[i].tensor->grad);
    duet_named_tensors_clear(&p);
    /* val_step: SRGAN's, on the generator's output. */
    duet_val_output out = {0};
    TU_OK(duet_model_val_step(m, &b, &out));
    assert_int_equal(out.output->shape[2], 32);
    assert_true(duet_log_vars_get(&out.metrics, "PSNR", &v));
    duet_val_output_clear(&out);
    duet_batch_clear(&b);
    duet_optimizer_set_destroy(opts);
    duet_model_destroy(m);
}

/* ---- registry and configs ------------------------------------------------------------ */

static const char esrgan_cfg[] =
    "model = {\n"
    "  type = \"ESRGAN\";\n"
    "  generator = { type = \"RRDBNet\"; in_channels = 3; out_channels = 3;\n"
    "                mid_channels = 8; num_blocks = 1; growth_channels = 4; };\n"
    "  discriminator = { type = \"ModifiedVGG\"; in_channels = 3; mid_channels = 4;\n"
    "                    input_size = 32; };\n"
    "  pixel_loss = { type = \"L1Loss\"; loss_weight = 1e-2; reduction = \"mean\"; };\n"
    "  perceptual_loss = { type = \"PerceptualLoss\"; cfg = [4, 0, 8]; layer_ids = [3];\n"
    "                      layer_weights = [1.0]; perceptual_weight = 1.0;\n"
    "                      norm_img = false; pretrained = \"random\"; };\n"
    "  gan_loss = { type = \"GANLoss\"; gan_type = \"hinge\"; loss_weight = 5e-3;\n"
    "               real_label_val = 1.0; fake_label_val = 0.0; };\n"
    "  train_cfg = { disc_steps = 2; };\n"
    "  test_cfg = { metrics = [\"PSNR\"]; crop_border = 4; };\n"
    "};\n"
    "psnr = {\n"
    "  type = \"BasicRestorer\";\n"
    "  generator = { type = \"RRDBNet\"; mid_channels = 8; num_blocks = 1;\n"
    "                growth_channels = 4; };\n"
    "  pixel_loss = { type = \"L1Loss\"; loss_weight = 1.0; reduction = \"mean\"; };\n"
    "};\n"
    "net = { type = \"RRDBNet\"; mid_channels = 4; num_blocks = 0; growth_channels = 2;\n"
    "        scale = 4; };\n";

static void test_registry(void **state) {
    (void)state;
    duet_config *cfg = NULL;
    TU_OK(duet_config_load_string(esrgan_cfg, "<test>", &cfg));
    duet_rng rng = duet_rng_make(37, 0);
    duet_model *m = NULL;
    TU_OK(duet_build_model(cfg, "model", &rng, &m));
    assert_string_equal(duet_model_type_name(m), "ESRGAN");
    assert_true(duet_module_is(duet_model_part(m, "generator"), "RRDBNet"));
    assert_true(duet_module_is(duet_model_part(m, "discriminator"), "ModifiedVGG"));
    /* style_weight left out: MMEditing's default 1.0, so a style term. */
    duet_optimizer_set *opts = tu_adam_pair(m, 1e-4f);
    duet_batch b;
    tu_sr_batch(&b, 38, 2);
    duet_log_vars log;
    double v;
    TU_OK(duet_model_train_step(m, &b, opts, &log));
    assert_true(duet_log_vars_get(&log, "loss_style", &v));
    /* disc_steps 2: no generator step at iteration 1. */
    TU_OK(duet_model_train_step(m, &b, opts, &log));
    assert_false(duet_log_vars_get(&log, "loss_gan", &v));
    duet_optimizer_set_destroy(opts);
    duet_model_destroy(m);

    TU_OK(duet_build_model(cfg, "psnr", &rng, &m));
    assert_string_equal(duet_model_type_name(m), "BasicRestorer");
    assert_true(duet_module_is(duet_model_part(m, "generator"), "RRDBNet"));
    duet_model_destroy(m);
    duet_module *net = NULL;
    TU_OK(duet_build_module(cfg, "net", &rng, &net));
    assert_true(duet_module_is(net, "RRDBNet"));
    duet_module_destroy(net);
    TU_OK(duet_config_check_unused(cfg));
    duet_batch_clear(&b);
    duet_config_destroy(cfg);

    /* An MSRResNet where ESRGAN wants an RRDBNet. */
    TU_OK(duet_config_load_string("model = { type = \"ESRGAN\";\n"
                                  "  generator = { type = \"MSRResNet\"; }; };\n",
                                  "<test>", &cfg));
    tu_expect_error(duet_build_model(cfg, "model", &rng, &m), DUET_EUNSUPPORTED, "RRDBNet",
                    NULL);
    duet_config_destroy(cfg);
}

/* The shipped configs build, and say what MMEditing's say. */
static void test_configs(void **state) {
    (void)state;
    const char *src = getenv("DUET_SOURCE_DIR");
    if (src == NULL) fail_msg("DUET_SOURCE_DIR is not set");
    const char *names[3] = {"esrgan_x4c64b23g32_div2k.cfg", "esrgan_x4_tiny.cfg",
                            "rrdbnet_x4_tiny_psnr.cfg"};
    for (int i = 0; i < 3; i++) {
        char path[512];
        snprintf(path, sizeof path, "%s/configs/%s", src, names[i]);
        duet_config *cfg = NULL;
        TU_OK(duet_config_load(path, &cfg));
        /* No pretrained VGG19 here: a random one (with a warning). */
        if (i == 0) TU_OK(duet_config_set(cfg, "model.perceptual_loss.pretrained=\"random\""));
        duet_rng rng = duet_rng_make(39, 0);
        duet_model *m = NULL;
        TU_OK(duet_build_model(cfg, "model", &rng, &m));
        duet_module *g = duet_model_part(m, "generator");
        assert_true(duet_module_is(g, "RRDBNet"));
        if (i == 0) {
            /* 64 channels, 23 blocks, growth 32: 16,697,987 parameters as
             * MMEditing's RRDBNet. */
            assert_int_equal(duet_module_num_parameters(g, false), 16697987);
            duet_optimizer_set *s = NULL;
            TU_OK(duet_build_optimizers(cfg, "optimizers", m, &s));
            assert_float_equal(duet_optimizer_lr(duet_optimizer_set_get(s, "generator")), 1e-4,
                               1e-12);
            duet_optimizer_set_destroy(s);
        }
        duet_model_destroy(m);
        duet_config_destroy(cfg);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gradcheck_ops),
        cmocka_unit_test(test_nearest_values),
        cmocka_unit_test(test_gradcheck_gan_losses),
        cmocka_unit_test(test_rrdbnet_structure),
        cmocka_unit_test(test_esrgan_step),
        cmocka_unit_test(test_registry),
        cmocka_unit_test(test_configs),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
