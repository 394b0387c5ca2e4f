/* RealESRGAN and UNetDiscriminatorWithSpectralNorm without a reference
 * (tests/mmedit/test_ref_real_esrgan.c compares them with MMEditing): the
 * registry's refusals naming the key, the discriminator's shape check, the
 * missing sharpened GT named, and the step counter as a state entry that
 * advances once per train_step and travels with the weights (load_from). */
#include "testutil.h"

#include <stdio.h>
#include <string.h>

static const char stage_net[] =
    "m = { type = \"RealESRGAN\";\n"
    "  generator = { type = \"RRDBNet\"; mid_channels = 4; num_blocks = 1; growth_channels = 2; };\n"
    "  pixel_loss = { type = \"L1Loss\"; loss_weight = 1.0; };\n"
    "  is_use_sharpened_gt_in_pixel = %s;\n"
    "  %s\n"
    "};\n";

static int build(const char *sharp, const char *extra, duet_model **out) {
    char text[1024];
    snprintf(text, sizeof text, stage_net, sharp, extra);
    duet_config *cfg = NULL;
    TU_OK(duet_config_load_string(text, "<real_esrgan>", &cfg));
    duet_rng rng = duet_rng_make(1, 0);
    int rc = duet_build_model(cfg, "m", &rng, out);
    duet_config_destroy(cfg);
    return rc;
}

static void test_registry_refusals(void **state) {
    (void)state;
    duet_model *m = NULL;
    tu_expect_error(build("false", "discriminator = { type = \"UNetDiscriminatorWithSpectralNorm\"; "
                                   "mid_channels = 4; };", &m),
                    DUET_ECONFIG, "discriminator without gan_loss", NULL);
    assert_null(m);
    tu_expect_error(build("false", "is_use_sharpened_gt_in_gan = true;", &m), DUET_ECONFIG,
                    "is_use_sharpened_gt_in_gan", "no discriminator", NULL);
    tu_expect_error(build("false", "discriminator = { type = \"ModifiedVGG\"; }; gan_loss = { "
                                   "type = \"GANLoss\"; };", &m),
                    DUET_EUNSUPPORTED, "ModifiedVGG", "UNetDiscriminatorWithSpectralNorm", NULL);
}

static void test_unet_disc_shape(void **state) {
    (void)state;
    duet_unet_disc_sn_opts o = duet_unet_disc_sn_opts_default();
    o.mid_channels = 2;
    duet_rng rng = duet_rng_make(2, 0);
    duet_module *d = NULL;
    TU_OK(duet_unet_disc_sn_create(&o, &rng, &d));
    duet_tensor *x = NULL, *y = NULL;
    TU_OK(duet_tensor_create(4, (int64_t[]){2, 3, 16, 24}, &x));
    TU_OK(duet_module_forward(d, x, &y));
    assert_int_equal(y->ndim, 4);
    assert_int_equal(y->shape[0], 2);
    assert_int_equal(y->shape[1], 1);
    assert_int_equal(y->shape[2], 16);
    assert_int_equal(y->shape[3], 24);
    duet_tensor_release(y);
    duet_tensor_release(x);
    TU_OK(duet_tensor_create(4, (int64_t[]){1, 3, 12, 16}, &x));
    tu_expect_error(duet_module_forward(d, x, &y), DUET_ESHAPE, "UNetDiscriminatorWithSpectralNorm",
                    "multiples of 8", NULL);
    duet_tensor_release(x);
    assert_non_null(duet_module_buffer(duet_module_child(d, "conv_1"), "weight_u"));
    assert_null(duet_module_param(duet_module_child(d, "conv_1"), "bias"));
    assert_non_null(duet_module_param(duet_module_child(d, "conv_9"), "bias"));
    duet_tape_clear();
    duet_module_destroy(d);
}

static float counter_of(duet_model *m) {
    float v = -1;
    TU_OK(duet_tensor_copy_to_host(duet_module_buffer(duet_model_module(m), "step_counter"), &v));
    return v;
}

static void test_step_counter_and_sharpened_gt(void **state) {
    tu_tmpdir *fx = *state;
    duet_model *m = NULL;
    TU_OK(build("true", "", &m));
    assert_non_null(duet_model_part(m, "generator_ema"));
    assert_null(duet_model_part(m, "discriminator"));
    duet_optimizer_set *opts = NULL;
    TU_OK(duet_optimizer_set_create(&opts));
    duet_adam_opts a = duet_adam_opts_default();
    TU_OK(duet_optimizer_set_add_adam(opts, m, "generator", &a));
    duet_batch b = {0};
    tu_sr_batch(&b, 5, 2);
    duet_log_vars log;
    /* is_use_sharpened_gt_in_pixel without gt_unsharp in the batch. */
    tu_expect_error(duet_model_train_step(m, &b, opts, &log), DUET_ENOTFOUND, "gt_unsharp",
                    "is_use_sharpened_gt_in_pixel", NULL);
    assert_true(counter_of(m) == 0.0f);
    duet_tensor *gt = duet_batch_tensor_get(&b, "gt");
    TU_OK(duet_batch_add_tensor(&b, "gt_unsharp", gt));
    TU_OK(duet_model_train_step(m, &b, opts, &log));
    TU_OK(duet_model_train_step(m, &b, opts, &log));
    assert_true(counter_of(m) == 2.0f);
    /* The counter is a weight of the checkpoint: load_from brings it. */
    char path[512];
    tu_path(path, sizeof path, fx->dir, "net.safetensors");
    TU_OK(duet_checkpoint_save_model(path, m, NULL, 0, NULL, 0));
    duet_model *m2 = NULL;
    TU_OK(build("true", "", &m2));
    assert_true(counter_of(m2) == 0.0f);
    TU_OK(duet_checkpoint_load_weights(path, duet_model_module(m2), false, NULL, NULL, NULL));
    assert_true(counter_of(m2) == 2.0f);
    duet_model_destroy(m2);
    duet_batch_clear(&b);
    duet_optimizer_set_destroy(opts);
    duet_model_destroy(m);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_registry_refusals),
        cmocka_unit_test(test_unet_disc_shape),
        TU_TMPDIR_TEST(test_step_counter_and_sharpened_gt),
    };
    return tu_exit(cmocka_run_group_tests(tests, NULL, NULL));
}
