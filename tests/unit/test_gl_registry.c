/* The Global&Local networks through the registry (src/runner/registry_modules.c):
 * MMEditing's config keys build the same networks, under the same
 * state-dict names, as the C options (GLEncoderDecoder with SyncBN norms
 * and 'clip', GLDiscs with MMEditing's global/local cfgs,
 * MultiLayerDiscriminator with LeakyReLU and out_act_cfg None), and wrong
 * values are named. */
#include <string.h>

#include "duet/train.h"
#include "testutil.h"

static duet_module *build(const char *text, int want_rc, const char *needle) {
    duet_config *cfg = NULL;
    TU_OK(duet_config_load_string(text, "<cfg>", &cfg));
    duet_rng rng = duet_rng_make(5, 0);
    duet_module *m = NULL;
    int rc = duet_build_module(cfg, "net", &rng, &m);
    if (want_rc == DUET_OK) {
        TU_OK(rc);
        TU_OK(duet_config_check_unused(cfg));
    } else {
        tu_expect_error(rc, want_rc, needle, NULL);
    }
    duet_config_destroy(cfg);
    return m;
}

static void same_names(duet_module *a, duet_module *b) {
    duet_named_tensors pa, pb;
    TU_OK(duet_module_named_parameters(a, false, &pa));
    TU_OK(duet_module_named_parameters(b, false, &pb));
    assert_int_equal(pa.count, pb.count);
    for (size_t i = 0; i < pa.count; i++) {
        assert_string_equal(pa.items[i].name, pb.items[i].name);
        assert_int_equal(pa.items[i].tensor->numel, pb.items[i].tensor->numel);
    }
    duet_named_tensors_clear(&pa);
    duet_named_tensors_clear(&pb);
    duet_named_tensors ba, bb;
    TU_OK(duet_module_named_buffers(a, &ba));
    TU_OK(duet_module_named_buffers(b, &bb));
    assert_int_equal(ba.count, bb.count);
    duet_named_tensors_clear(&ba);
    duet_named_tensors_clear(&bb);
}

static void test_gl_encdec(void **state) {
    (void)state;
    duet_module *m = build("net = { type = \"GLEncoderDecoder\";\n"
                           "  encoder = { type = \"GLEncoder\"; norm_cfg = { type = \"SyncBN\"; }; };\n"
                           "  decoder = { type = \"GLDecoder\"; norm_cfg = { type = \"SyncBN\"; }; };\n"
                           "  dilation_neck = { type = \"GLDilationNeck\"; norm_cfg = { type = \"SyncBN\"; }; }; };",
                           DUET_OK, NULL);
    duet_gl_encdec_opts o = {.encoder_norm = true, .neck_norm = true, .decoder_norm = true};
    duet_rng rng = duet_rng_make(5, 0);
    duet_module *d = NULL;
    TU_OK(duet_gl_encdec_create(&o, &rng, &d));
    same_names(m, d);
    assert_non_null(duet_module_param(duet_module_child(duet_module_child(
                        duet_module_child(duet_module_child(m, "dilation_neck"), "dilation_convs"),
                        "3"), "conv"), "weight"));
    /* the forward keeps the size and gives 3 channels in [-1, 1] */
    duet_rng xr = duet_rng_make(9, 0);
    duet_tensor *x = tu_randn(&xr, 4, (int64_t[]){1, 4, 8, 12}, 1.0f), *y = NULL;
    TU_OK(duet_module_forward(m, x, &y));
    assert_int_equal(y->shape[1], 3);
    assert_int_equal(y->shape[2], 8);
    assert_int_equal(y->shape[3], 12);
    for (int64_t i = 0; i < y->numel; i++) assert_true(y->data[i] >= -1.0f && y->data[i] <= 1.0f);
    duet_tensor_release(x);
    duet_tensor_release(y);
    duet_module_destroy(m);
    duet_module_destroy(d);
    build("net = { type = \"GLEncoderDecoder\"; decoder = { out_act = \"tanh\"; }; };",
          DUET_ECONFIG, "decoder.out_act");
    build("net = { type = \"GLEncoderDecoder\"; encoder = { norm_cfg = { type = \"IN\"; }; }; };",
          DUET_ECONFIG, "SyncBN");
}

static void test_gl_discs(void **state) {
    (void)state;
    duet_module *m = build(
        "net = { type = \"GLDiscs\";\n"
        "  global_disc_cfg = { in_channels = 3; max_channels = 16; fc_in_channels = 256;\n"
        "    fc_out_channels = 1024; num_convs = 3; norm_cfg = { type = \"SyncBN\"; }; };\n"
        "  local_disc_cfg = { in_channels = 3; max_channels = 16; fc_in_channels = 256;\n"
        "    fc_out_channels = 1024; num_convs = 2; norm_cfg = { type = \"SyncBN\"; }; }; };",
        DUET_OK, NULL);
    duet_multi_layer_disc_opts g = duet_multi_layer_disc_opts_default();
    g.max_channels = 16, g.fc_in_channels = 256, g.num_convs = 3, g.with_norm = true;
    duet_multi_layer_disc_opts l = g;
    l.num_convs = 2;
    duet_rng rng = duet_rng_make(5, 0);
    duet_module *d = NULL;
    TU_OK(duet_gl_discs_create(&g, &l, &rng, &d));
    same_names(m, d);
    assert_non_null(duet_module_param(
        duet_module_child(duet_module_child(duet_module_child(m, "global_disc"), "fc"), "linear"),
        "weight"));
    /* a wrong fc_in_channels is named at forward time */
    duet_rng xr = duet_rng_make(3, 0);
    duet_tensor *x = tu_randn(&xr, 4, (int64_t[]){2, 3, 16, 16}, 1.0f);
    duet_tensor *p = tu_randn(&xr, 4, (int64_t[]){2, 3, 16, 16}, 1.0f), *y = NULL;
    tu_expect_error(duet_module_forward2(m, x, p, &y), DUET_ESHAPE, "fc_in_channels", NULL);
    duet_tensor_release(x);
    duet_tensor_release(p);
    duet_module_destroy(m);
    duet_module_destroy(d);
    build("net = { type = \"GLDiscs\"; global_disc_cfg = { in_channels = 3; max_channels = 8; }; };",
          DUET_ECONFIG, "local_disc_cfg");
}

static void test_multi_layer_disc(void **state) {
    (void)state;
    duet_module *m = build("net = { type = \"MultiLayerDiscriminator\"; in_channels = 3;\n"
                           "  max_channels = 8; num_convs = 2; kernel_size = 3; with_out_convs = true;\n"
                           "  act_cfg = { type = \"LeakyReLU\"; negative_slope = 0.2; };\n"
                           "  out_act_cfg = \"None\"; };",
                           DUET_OK, NULL);
    assert_non_null(duet_module_child(m, "conv4"));
    assert_null(duet_module_child(duet_module_child(m, "conv4"), "activate"));
    duet_module_destroy(m);
    build("net = { type = \"MultiLayerDiscriminator\"; in_channels = 3; max_channels = 8;\n"
          "  act_cfg = { type = \"LeakyReLU\"; }; };", DUET_ECONFIG, "negative_slope");
}

/* DeepFillv2's encdec as its MMEditing config writes it (gated_conv,
 * channel_factor 0.75, Tanh, reflect): the networks of the C options,
 * MMEditing's parameter count (4,414,908). */
static const char *const deepfillv2 =
    "net = { type = \"DeepFillEncoderDecoder\";\n"
    "  stage1 = { type = \"GLEncoderDecoder\";\n"
    "    encoder = { type = \"DeepFillEncoder\"; conv_type = \"gated_conv\"; channel_factor = 0.75;"
    " padding_mode = \"reflect\"; };\n"
    "    decoder = { type = \"DeepFillDecoder\"; conv_type = \"gated_conv\"; in_channels = 96;"
    " channel_factor = 0.75; out_act_cfg = { type = \"Tanh\"; }; padding_mode = \"reflect\"; };\n"
    "    dilation_neck = { type = \"GLDilationNeck\"; in_channels = 96; conv_type = \"gated_conv\";"
    " act_cfg = { type = \"ELU\"; }; padding_mode = \"reflect\"; }; };\n"
    "  stage2 = { type = \"DeepFillRefiner\";\n"
    "    encoder_attention = { type = \"DeepFillEncoder\"; encoder_type = \"stage2_attention\";"
    " conv_type = \"gated_conv\"; channel_factor = 0.75; padding_mode = \"reflect\"; };\n"
    "    encoder_conv = { type = \"DeepFillEncoder\"; encoder_type = \"stage2_conv\";"
    " conv_type = \"gated_conv\"; channel_factor = 0.75; padding_mode = \"reflect\"; };\n"
    "    dilation_neck = { type = \"GLDilationNeck\"; in_channels = 96; conv_type = \"gated_conv\";"
    " act_cfg = { type = \"ELU\"; }; padding_mode = \"reflect\"; };\n"
    "    contextual_attention = { type = \"ContextualAttentionNeck\"; in_channels = 96;"
    " conv_type = \"gated_conv\"; padding_mode = \"reflect\"; };\n"
    "    decoder = { type = \"DeepFillDecoder\"; in_channels = 192; conv_type = \"gated_conv\";"
    " out_act_cfg = { type = \"Tanh\"; }; padding_mode = \"reflect\"; }; }; };";

static void test_deepfill_encdec(void **state) {
    (void)state;
    duet_module *m = build(deepfillv2, DUET_OK, NULL);
    assert_int_equal(duet_module_num_parameters(m, false), 4414908);
    duet_deepfill_encdec_opts o = duet_deepfill_encdec_opts_default();
    duet_deepfill_encoder_opts *encs[3] = {&o.encoder, &o.stage2.encoder_attention,
                                           &o.stage2.encoder_conv};
    for (int i = 0; i < 3; i++) encs[i]->channel_factor = 0.75, encs[i]->gated = true;
    o.decoder.channel_factor = 0.75, o.decoder.in_channels = 96, o.decoder.gated = true;
    o.dilation_neck.in_channels = o.stage2.dilation_neck.in_channels = 96;
    o.dilation_neck.gated = o.stage2.dilation_neck.gated = true;
    o.stage2.contextual_attention.in_channels = 96, o.stage2.contextual_attention.gated = true;
    o.stage2.decoder.in_channels = 192, o.stage2.decoder.gated = true;
    duet_rng rng = duet_rng_make(5, 0);
    duet_module *d = NULL;
    TU_OK(duet_deepfill_encdec_create(&o, &rng, &d));
    same_names(m, d);
    /* reflect padding: a padding_layer in front of every conv */
    assert_non_null(duet_module_child(duet_module_child(duet_module_child(duet_module_child(
        duet_module_child(m, "stage2"), "decoder"), "dec1"), "conv"), "padding_layer"));
    assert_null(duet_module_child(duet_module_child(duet_module_child(duet_module_child(
        duet_module_child(d, "stage2"), "decoder"), "dec1"), "conv"), "padding_layer"));
    duet_module_destroy(m);
    duet_module_destroy(d);
    /* MMEditing's defaults without any group: DeepFillv1's networks */
    m = build("net = { type = \"DeepFillEncoderDecoder\"; };", DUET_OK, NULL);
    assert_int_equal(duet_module_num_parameters(m, false), 3601542);
    duet_module_destroy(m);
    build("net = { type = \"DeepFillEncoderDecoder\"; stage2 = { type = \"DeepFillRefiner\";"
          " encoder_conv = { type = \"DeepFillEncoder\"; conv_type = \"gated\"; }; }; };",
          DUET_ECONFIG, "gated_conv");
    build("net = { type = \"DeepFillEncoderDecoder\"; stage1 = { type = \"GLEncoderDecoder\";"
          " encoder = { type = \"DeepFillEncoder\"; }; }; };", DUET_ECONFIG,
          "'decoder' is required");
    build("net = { type = \"DeepFillEncoderDecoder\"; stage2 = { type = \"DeepFillRefiner\";"
          " decoder = { type = \"DeepFillDecoder\"; }; }; };", DUET_ECONFIG,
          "'in_channels' is required");
    /* a GLDilationNeck group starts from MMEditing's class defaults: 256
     * channels, so the refiner's channels no longer chain */
    build("net = { type = \"DeepFillEncoderDecoder\"; stage2 = { type = \"DeepFillRefiner\";"
          " dilation_neck = { type = \"GLDilationNeck\"; }; }; };", DUET_EINVAL,
          "dilation_neck.in_channels is 256");
    build("net = { type = \"DeepFillEncoderDecoder\"; stage2 = { type = \"DeepFillRefiner\";"
          " decoder = { type = \"DeepFillDecoder\"; in_channels = 256;"
          " out_act_cfg = { type = \"clip\"; min = 0.0; }; }; }; };", DUET_ECONFIG,
          "min = -1.0");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gl_encdec),
        cmocka_unit_test(test_deepfill_encdec),
        cmocka_unit_test(test_gl_discs),
        cmocka_unit_test(test_multi_layer_disc),
    };
    return tu_exit(cmocka_run_group_tests(tests, NULL, NULL));
}
