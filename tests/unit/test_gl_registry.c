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

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gl_encdec),
        cmocka_unit_test(test_gl_discs),
        cmocka_unit_test(test_multi_layer_disc),
    };
    return tu_exit(cmocka_run_group_tests(tests, NULL, NULL));
}
