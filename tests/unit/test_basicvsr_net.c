/* BasicVSRNet and SPyNet (src/models/basicvsr_net.c) built from a config by
 * the registry (the BasicVSRNet row, src/registry/registry_basicvsr.c):
 * MMEditing's parameter and buffer names and count, the shapes of a
 * forward, and the errors that name what they refuse (a .pth for
 * spynet_pretrained, frames smaller than 64 or not divisible by 32, one
 * frame). The values against MMEditing's own modules are
 * tests/mmedit/test_ref_basicvsr_nets.c's. */
#include "testutil.h"

#include <string.h>

static duet_module *build(const char *text) {
    duet_config *cfg = NULL;
    TU_OK(duet_config_load_string(text, "<test>", &cfg));
    duet_rng rng = duet_rng_make(5, 0);
    duet_module *m = NULL;
    const int rc = duet_build_module(cfg, "net", &rng, &m);
    if (rc == DUET_OK) TU_OK(duet_config_check_unused(cfg));
    duet_config_destroy(cfg);
    return rc == DUET_OK ? m : NULL;
}

static bool has_name(const duet_named_tensors *t, const char *name) {
    for (size_t i = 0; i < t->count; i++)
        if (strcmp(t->items[i].name, name) == 0) return true;
    return false;
}

static void test_names_and_count(void **state) {
    (void)state;
    duet_module *m = build("net = { type = \"BasicVSRNet\"; mid_channels = 8; num_blocks = 1; };");
    assert_non_null(m);
    assert_true(duet_module_is(m, "BasicVSRNet"));
    /* MMEditing's BasicVSRNet(mid_channels=8, num_blocks=1): SPyNet's six
     * 240050-parameter levels, 2 x 1968 in the branches, fusion 136,
     * upsample1 2336, upsample2 18688, conv_hr 36928, conv_last 1731. */
    assert_int_equal(duet_module_num_parameters(m, false), 1504055);
    duet_named_tensors ps, bs;
    TU_OK(duet_module_named_parameters(m, false, &ps));
    static const char *const names[] = {
        "spynet.basic_module.0.basic_module.0.conv.weight",
        "spynet.basic_module.5.basic_module.4.conv.bias",
        "backward_resblocks.main.0.weight",
        "backward_resblocks.main.2.0.conv1.weight",
        "forward_resblocks.main.2.0.conv2.bias",
        "fusion.weight",
        "upsample1.upsample_conv.weight",
        "upsample2.upsample_conv.bias",
        "conv_hr.weight",
        "conv_last.bias",
    };
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (!has_name(&ps, names[i])) fail_msg("no parameter %s", names[i]);
    assert_int_equal(ps.count, 60 + 2 * 6 + 2 + 2 + 2 + 2 + 2);
    TU_OK(duet_module_named_buffers(m, &bs));
    assert_int_equal(bs.count, 2);
    assert_true(has_name(&bs, "spynet.mean") && has_name(&bs, "spynet.std"));
    duet_named_tensors_clear(&ps);
    duet_named_tensors_clear(&bs);
    duet_module_destroy(m);
}

static void test_forward_shapes(void **state) {
    (void)state;
    duet_module *m = build("net = { type = \"BasicVSRNet\"; mid_channels = 4; num_blocks = 0; };");
    assert_non_null(m);
    const bool prev = duet_set_grad_enabled(false);
    duet_rng rng = duet_rng_make(9, 0);
    /* 2 samples of 3 frames, 64 x 96 */
    duet_tensor *x = tu_rand(&rng, 4, (int64_t[]){2, 9, 64, 96}, 0, 1), *y = NULL;
    TU_OK(duet_module_forward(m, x, &y));
    assert_int_equal(y->ndim, 4);
    assert_int_equal(y->shape[0], 2);
    assert_int_equal(y->shape[1], 9);
    assert_int_equal(y->shape[2], 256);
    assert_int_equal(y->shape[3], 384);
    duet_tensor_release(y);
    duet_tensor_release(x);
    /* SPyNet alone: the flow (N, 2, H, W) */
    duet_module *spynet = duet_module_child(m, "spynet");
    duet_tensor *a = tu_rand(&rng, 4, (int64_t[]){1, 3, 32, 32}, 0, 1);
    duet_tensor *b = tu_rand(&rng, 4, (int64_t[]){1, 3, 32, 32}, 0, 1);
    TU_OK(duet_module_forward2(spynet, a, b, &y));
    assert_int_equal(y->shape[1], 2);
    assert_int_equal(y->shape[2], 32);
    duet_tensor_release(y);
    duet_tensor_release(a);
    duet_tensor_release(b);
    duet_set_grad_enabled(prev);
    assert_int_equal(duet_tape_size(), 0);
    duet_module_destroy(m);
}

static void test_errors(void **state) {
    (void)state;
    duet_config *cfg = NULL;
    TU_OK(duet_config_load_string("net = { type = \"BasicVSRNet\"; spynet_pretrained = "
                                  "\"spynet_20210409-c6c1bd09.pth\"; };",
                                  "<test>", &cfg));
    duet_rng rng = duet_rng_make(5, 0);
    duet_module *m = NULL;
    tu_expect_error(duet_build_module(cfg, "net", &rng, &m), DUET_EUNSUPPORTED,
                    "spynet_pretrained = 'spynet_20210409-c6c1bd09.pth'", "convert-pth.py", NULL);
    assert_null(m);
    duet_config_destroy(cfg);

    m = build("net = { type = \"BasicVSRNet\"; mid_channels = 2; num_blocks = 0; };");
    assert_non_null(m);
    duet_tensor *y = NULL;
    static const struct {
        int64_t shape[4];
        const char *says;
    } bad[] = {
        {{1, 6, 32, 64}, "at least 64"},
        {{1, 6, 64, 80}, "divisible by 32"},
        {{1, 3, 64, 64}, "T >= 2"},
        {{1, 7, 64, 64}, "(N, T*3, H, W)"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        duet_tensor *x = NULL;
        TU_OK(duet_tensor_create(4, bad[i].shape, &x));
        tu_expect_error(duet_module_forward(m, x, &y), DUET_ESHAPE, bad[i].says, NULL);
        assert_null(y);
        duet_tensor_release(x);
    }
    assert_int_equal(duet_tape_size(), 0);
    duet_module_destroy(m);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_names_and_count),
        cmocka_unit_test(test_forward_shapes),
        cmocka_unit_test(test_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
