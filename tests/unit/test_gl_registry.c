/* The Global&Local networks through the registry (src/registry/registry_modules.c):
 * MMEditing's config keys build the same networks, under the same
 * state-dict names, as the C options (GLEncoderDecoder with SyncBN norms
 * and 'clip', GLDiscs with MMEditing's global/local cfgs,
 * MultiLayerDiscriminator with LeakyReLU and out_act_cfg None,
 * DeepFillv1Discriminators, the SN-PatchGAN), and wrong values are named. */
#include <math.h>
#include <stdio.h>
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

/* mean and standard deviation of a tensor's values */
static void moments(const duet_tensor *t, double *mean, double *sd) {
    double s = 0, q = 0;
    for (int64_t i = 0; i < t->numel; i++) s += t->data[i], q += (double)t->data[i] * t->data[i];
    *mean = s / (double)t->numel;
    *sd = sqrt(q / (double)t->numel - *mean * *mean);
}

/* DeepFillv1Discriminators as deepfillv1_256x256_8x2_places.py writes it
 * (channels shrunk): the C options' names, ELU convs, its init (every conv
 * and Linear weight N(0, 0.02), biases 0), the two predictions; and the
 * SN-PatchGAN of deepfillv2's config: every conv under spectral norm. */
static void test_deepfill_discs(void **state) {
    (void)state;
    duet_module *m = build(
        "net = { type = \"DeepFillv1Discriminators\";\n"
        "  global_disc_cfg = { type = \"MultiLayerDiscriminator\"; in_channels = 3;\n"
        "    max_channels = 32; fc_in_channels = 512; fc_out_channels = 1; num_convs = 4;\n"
        "    norm_cfg = \"None\"; act_cfg = { type = \"ELU\"; };\n"
        "    out_act_cfg = { type = \"LeakyReLU\"; negative_slope = 0.2; }; };\n"
        "  local_disc_cfg = { type = \"MultiLayerDiscriminator\"; in_channels = 3;\n"
        "    max_channels = 64; fc_in_channels = 256; fc_out_channels = 1; num_convs = 4;\n"
        "    norm_cfg = \"None\"; act_cfg = { type = \"ELU\"; };\n"
        "    out_act_cfg = { type = \"LeakyReLU\"; negative_slope = 0.2; }; }; };",
        DUET_OK, NULL);
    duet_multi_layer_disc_opts g = duet_multi_layer_disc_opts_default();
    g.max_channels = 32, g.fc_in_channels = 512, g.fc_out_channels = 1, g.num_convs = 4;
    g.act = DUET_MLD_ACT_ELU, g.out_act = DUET_MLD_ACT_LRELU;
    duet_multi_layer_disc_opts l = g;
    l.max_channels = 64, l.fc_in_channels = 256;
    duet_rng rng = duet_rng_make(5, 0);
    duet_module *d = NULL;
    TU_OK(duet_deepfill_v1_discs_create(&g, &l, &rng, &d));
    same_names(m, d);
    duet_module *conv1 = duet_module_child(duet_module_child(m, "global_disc"), "conv1");
    assert_true(duet_module_is(duet_module_child(conv1, "activate"), "ELU"));
    duet_named_tensors ps;
    TU_OK(duet_module_named_parameters(m, false, &ps));
    for (size_t i = 0; i < ps.count; i++) {
        double mean, sd;
        moments(ps.items[i].tensor, &mean, &sd);
        if (strstr(ps.items[i].name, "bias") != NULL) {
            assert_true(mean == 0.0 && sd == 0.0);
        } else if (ps.items[i].tensor->numel >= 1000) {
            if (fabs(mean) > 0.002 || fabs(sd - 0.02) > 0.002)
                fail_msg("%s: mean %g, sd %g; want N(0, 0.02)", ps.items[i].name, mean, sd);
        }
    }
    duet_named_tensors_clear(&ps);
    duet_rng xr = duet_rng_make(3, 0);
    duet_tensor *x = tu_randn(&xr, 4, (int64_t[]){2, 3, 64, 64}, 1.0f);
    duet_tensor *p = tu_randn(&xr, 4, (int64_t[]){2, 3, 32, 32}, 1.0f), *gp = NULL, *lp = NULL;
    TU_OK(duet_deepfill_v1_discs_forward(m, x, p, &gp, &lp));
    assert_int_equal(gp->shape[0], 2);
    assert_int_equal(gp->shape[1], 1);
    assert_int_equal(lp->shape[1], 1);
    duet_tensor_release(gp);
    duet_tensor_release(lp);
    /* the global image where the patch belongs: named */
    tu_expect_error(duet_deepfill_v1_discs_forward(m, p, p, &gp, &lp), DUET_ESHAPE,
                    "fc_in_channels", NULL);
    assert_null(gp);
    duet_tensor_release(x);
    duet_tensor_release(p);
    duet_module_destroy(m);
    duet_module_destroy(d);
    build("net = { type = \"DeepFillv1Discriminators\"; global_disc_cfg = {\n"
          "  type = \"GLDiscs\"; }; local_disc_cfg = { }; };",
          DUET_ECONFIG, "global_disc_cfg.type");
    build("net = { type = \"DeepFillv1Discriminators\"; global_disc_cfg = { }; };",
          DUET_ECONFIG, "local_disc_cfg");
    build("net = { type = \"MultiLayerDiscriminator\"; act_cfg = { type = \"ELU\"; alpha = 0.5; }; };",
          DUET_ECONFIG, "alpha");
    build("net = { type = \"MultiLayerDiscriminator\"; fc_in_channels = \"none\"; };",
          DUET_ECONFIG, "fc_in_channels");

    m = build("net = { type = \"MultiLayerDiscriminator\"; in_channels = 4; max_channels = 16;\n"
              "  fc_in_channels = \"None\"; num_convs = 6; norm_cfg = \"None\";\n"
              "  act_cfg = { type = \"LeakyReLU\"; negative_slope = 0.2; };\n"
              "  out_act_cfg = { type = \"LeakyReLU\"; negative_slope = 0.2; };\n"
              "  with_spectral_norm = true; };",
              DUET_OK, NULL);
    assert_null(duet_module_child(m, "fc"));
    for (int i = 1; i <= 6; i++) {
        char name[8];
        snprintf(name, sizeof name, "conv%d", i);
        duet_module *conv = duet_module_child(duet_module_child(m, name), "conv");
        assert_non_null(duet_module_param(conv, "weight_orig"));
        assert_null(duet_module_param(conv, "weight"));
        assert_non_null(duet_module_buffer(conv, "weight_u"));
        assert_non_null(duet_module_buffer(conv, "weight_v"));
    }
    duet_module_destroy(m);
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

/* The root mean square of every convolution's weight (4-D parameters) and
 * the largest |bias| of m. */
static void conv_init_stats(duet_module *m, double *rms, double *max_bias) {
    duet_named_tensors ps;
    TU_OK(duet_module_named_parameters(m, false, &ps));
    double ss = 0;
    int64_t n = 0;
    *max_bias = 0;
    for (size_t i = 0; i < ps.count; i++) {
        const duet_tensor *t = ps.items[i].tensor;
        const char *name = ps.items[i].name;
        size_t len = strlen(name);
        for (int64_t k = 0; k < t->numel; k++) {
            if (t->ndim == 4) {
                ss += (double)t->data[k] * t->data[k];
                n++;
            } else if (len > 5 && strcmp(name + len - 5, ".bias") == 0) {
                *max_bias = fmax(*max_bias, fabs(t->data[k]));
            }
        }
    }
    duet_named_tensors_clear(&ps);
    *rms = sqrt(ss / (double)n);
}

/* init_cfg.gain: the standard deviation of DeepFillEncoderDecoder's normal
 * init (MMEditing's 0.02 when absent), biases zero either way; anything but
 * type 'normal' and a positive gain is named. */
static void test_deepfill_encdec_init_gain(void **state) {
    (void)state;
    static const char *const gains[2] = {"", " init_cfg = { type = \"normal\"; gain = 0.08; };"};
    static const double want[2] = {0.02, 0.08};
    for (int i = 0; i < 2; i++) {
        char text[256];
        snprintf(text, sizeof text, "net = { type = \"DeepFillEncoderDecoder\";%s };", gains[i]);
        duet_module *m = build(text, DUET_OK, NULL);
        double rms = 0, max_bias = 1;
        conv_init_stats(m, &rms, &max_bias);
        assert_true(fabs(rms / want[i] - 1.0) < 0.01);
        assert_true(max_bias == 0.0);
        duet_module_destroy(m);
    }
    build("net = { type = \"DeepFillEncoderDecoder\"; init_cfg = { type = \"kaiming\"; }; };",
          DUET_ECONFIG, "init is 'normal'");
    build("net = { type = \"DeepFillEncoderDecoder\"; init_cfg = { gain = 0.0; }; };",
          DUET_ECONFIG, "must be positive");
    duet_deepfill_encdec_opts o = duet_deepfill_encdec_opts_default();
    o.init_gain = -1.0f;
    duet_rng rng = duet_rng_make(5, 0);
    duet_module *d = NULL;
    tu_expect_error(duet_deepfill_encdec_create(&o, &rng, &d), DUET_EINVAL, "init_cfg.gain", NULL);
    assert_null(d);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gl_encdec),
        cmocka_unit_test(test_deepfill_encdec),
        cmocka_unit_test(test_deepfill_encdec_init_gain),
        cmocka_unit_test(test_gl_discs),
        cmocka_unit_test(test_multi_layer_disc),
        cmocka_unit_test(test_deepfill_discs),
    };
    return tu_exit(cmocka_run_group_tests(tests, NULL, NULL));
}
