/* Pix2Pix built by the registry from MMEditing's config keys: the parts and
 * their options arrive (parameter count as the same options built
 * directly, dropout layers present, direction b2a reaching train_step), every
 * key is consumed, and wrong types or values fail naming the key. */
#include "testutil.h"

#include <string.h>

static const char *const pix2pix_cfg =
    "model = {\n"
    "  type = \"Pix2Pix\";\n"
    "  generator = { type = \"UnetGenerator\"; in_channels = 3; out_channels = 3;\n"
    "                num_down = 6; base_channels = 4; norm_cfg = { type = \"BN\"; };\n"
    "                use_dropout = true; init_cfg = { type = \"normal\"; gain = 0.02; }; };\n"
    "  discriminator = { type = \"PatchDiscriminator\"; in_channels = 6; base_channels = 4;\n"
    "                    num_conv = 3; norm_cfg = { type = \"IN\"; };\n"
    "                    init_cfg = { type = \"normal\"; gain = 0.02; }; };\n"
    "  gan_loss = { type = \"GANLoss\"; gan_type = \"vanilla\"; real_label_val = 1.0;\n"
    "               fake_label_val = 0.0; loss_weight = 1.0; };\n"
    "  pixel_loss = { type = \"L1Loss\"; loss_weight = 100.0; reduction = \"mean\"; };\n"
    "  train_cfg = { direction = \"b2a\"; disc_steps = 1; disc_init_steps = 0; };\n"
    "  test_cfg = { direction = \"b2a\"; show_input = true; };\n"
    "};\n";

static void test_registry_pix2pix(void **state) {
    (void)state;
    duet_config *cfg = NULL;
    TU_OK(duet_config_load_string(pix2pix_cfg, "<test>", &cfg));
    duet_rng rng = duet_rng_make(1, 0);
    duet_model *m = NULL;
    TU_OK(duet_build_model(cfg, "model", &rng, &m));
    TU_OK(duet_config_check_unused(cfg));
    assert_string_equal(duet_model_type_name(m), "Pix2Pix");
    duet_pix2pix_opts o = duet_pix2pix_opts_default();
    o.generator.num_down = 6;
    o.generator.base_channels = 4;
    o.discriminator.base_channels = 4;
    o.discriminator.norm = DUET_GEN_NORM_IN;
    duet_model *direct = NULL;
    TU_OK(duet_pix2pix_create(&o, &rng, &direct));
    assert_int_equal(duet_module_num_parameters(duet_model_module(m), false),
                     duet_module_num_parameters(duet_model_module(direct), false));
    assert_non_null(duet_model_part(m, "pixel_loss"));
    /* b2a: val_step's output is the generator's on img_b. */
    duet_batch b = {0};
    duet_rng dr = duet_rng_make(2, 0);
    duet_tensor *a = tu_rand(&dr, 4, (int64_t[]){2, 3, 64, 64}, -1, 1);
    duet_tensor *bb = tu_rand(&dr, 4, (int64_t[]){2, 3, 64, 64}, -1, 1);
    TU_OK(duet_batch_add_tensor(&b, "img_a", a));
    TU_OK(duet_batch_add_tensor(&b, "img_b", bb));
    duet_optimizer_set *opts = tu_adam_pair(m, 2e-4f);
    const uint64_t c0 = duet_pix2pix_dropout_rng(m)->counter;
    duet_log_vars log;
    TU_OK(duet_model_train_step(m, &b, opts, &log));
    assert_int_equal(log.count, 5); /* and MMEditing's total "loss" */
    double total = 0, gan = 0, pix = 0;
    assert_true(duet_log_vars_get(&log, "loss", &total));
    assert_true(duet_log_vars_get(&log, "loss_gan_g", &gan));
    assert_true(duet_log_vars_get(&log, "loss_pixel", &pix));
    assert_true(total == gan + pix); /* the generator's parse_losses, the last one */
    assert_true(duet_pix2pix_dropout_rng(m)->counter > c0); /* dropout layers ran */
    duet_val_output v = {0};
    TU_OK(duet_model_val_step(m, &b, &v));
    duet_tensor *want = NULL;
    duet_module_train(duet_model_module(m), true);
    duet_rng saved = *duet_pix2pix_dropout_rng(m);
    TU_OK(duet_model_forward(m, bb, &want)); /* the generator on img_b */
    *duet_pix2pix_dropout_rng(m) = saved;
    assert_memory_equal(v.output->data, want->data, (size_t)want->numel * sizeof(float));
    duet_tensor_release(want);
    duet_val_output_clear(&v);
    duet_optimizer_set_destroy(opts);
    duet_batch_clear(&b);
    duet_tensor_release(a);
    duet_tensor_release(bb);
    duet_model_destroy(direct);
    duet_model_destroy(m);
    duet_config_destroy(cfg);
}

static void test_registry_pix2pix_errors(void **state) {
    (void)state;
    duet_rng rng = duet_rng_make(3, 0);
    duet_config *cfg = NULL;
    duet_model *m = NULL;
    TU_OK(duet_config_load_string(
        "a = { type = \"Pix2Pix\"; generator = { type = \"ResnetGenerator\"; }; };\n"
        "b = { type = \"Pix2Pix\"; generator = { type = \"UnetGenerator\";\n"
        "                                        norm_cfg = { type = \"GN\"; }; }; };\n"
        "c = { type = \"Pix2Pix\"; generator = { type = \"UnetGenerator\"; };\n"
        "      discriminator = { type = \"PatchDiscriminator\"; };\n"
        "      gan_loss = { type = \"GANLoss\"; }; train_cfg = { direction = \"up\"; }; };\n"
        "d = { type = \"Pix2Pix\"; generator = { type = \"UnetGenerator\"; num_dwon = 7;\n"
        "                                        base_channels = 2; };\n"
        "      discriminator = { type = \"PatchDiscriminator\"; base_channels = 2; };\n"
        "      gan_loss = { type = \"GANLoss\"; }; };\n",
        "<test>", &cfg));
    tu_expect_error(duet_build_model(cfg, "a", &rng, &m), DUET_EUNSUPPORTED, "a.generator.type",
                    "ResnetGenerator", "UnetGenerator", NULL);
    tu_expect_error(duet_build_model(cfg, "b", &rng, &m), DUET_EUNSUPPORTED, "norm_cfg.type",
                    "'GN'", NULL);
    tu_expect_error(duet_build_model(cfg, "c", &rng, &m), DUET_ECONFIG, "train_cfg.direction",
                    "'up'", NULL);
    assert_null(m);
    TU_OK(duet_build_model(cfg, "d", &rng, &m));
    tu_expect_error(duet_config_check_unused(cfg), DUET_ECONFIG, "num_dwon", NULL);
    duet_model_destroy(m);
    duet_config_destroy(cfg);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_registry_pix2pix),
        cmocka_unit_test(test_registry_pix2pix_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
