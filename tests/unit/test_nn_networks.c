/* The networks' structure without PyTorch: MMEditing's parameter names and
 * order, parameter counts of the full-size networks (as PyTorch counts
 * them), initialisation, output shapes, the bilinear skip of MSRResNet,
 * seeding, and errors. Numerics against PyTorch: test_ref_networks.c. */
#include "testutil.h"

#include <math.h>
#include <string.h>

static duet_module *make_msr(int mid, int blocks, int scale, uint64_t seed) {
    duet_msrresnet_opts o = duet_msrresnet_opts_default();
    o.mid_channels = mid;
    o.num_blocks = blocks;
    o.upscale_factor = scale;
    duet_rng rng = duet_rng_make(seed, 0);
    duet_module *net = NULL;
    TU_OK(duet_msrresnet_create(&o, &rng, &net));
    return net;
}

static duet_module *make_vgg(int mid, int size, uint64_t seed) {
    duet_modified_vgg_opts o = duet_modified_vgg_opts_default();
    o.mid_channels = mid;
    o.input_size = size;
    duet_rng rng = duet_rng_make(seed, 0);
    duet_module *net = NULL;
    TU_OK(duet_modified_vgg_create(&o, &rng, &net));
    return net;
}

static void test_msrresnet_names(void **state) {
    (void)state;
    /* PyTorch: list(MSRResNet(3, 3, 16, 2, 4).state_dict()). */
    static const char *want[] = {
        "conv_first.weight", "conv_first.bias", "trunk_net.0.conv1.weight",
        "trunk_net.0.conv1.bias", "trunk_net.0.conv2.weight", "trunk_net.0.conv2.bias",
        "trunk_net.1.conv1.weight", "trunk_net.1.conv1.bias", "trunk_net.1.conv2.weight",
        "trunk_net.1.conv2.bias", "upsample1.upsample_conv.weight",
        "upsample1.upsample_conv.bias", "upsample2.upsample_conv.weight",
        "upsample2.upsample_conv.bias", "conv_hr.weight", "conv_hr.bias", "conv_last.weight",
        "conv_last.bias"};
    duet_module *net = make_msr(16, 2, 4, 1);
    assert_true(duet_module_is(net, "MSRResNet"));
    duet_named_tensors l;
    TU_OK(duet_module_state(net, &l));
    assert_int_equal(l.count, 18);
    for (size_t i = 0; i < l.count; i++) assert_string_equal(l.items[i].name, want[i]);
    /* upsample_conv: mid -> mid * 2 * 2, 3x3. */
    duet_tensor *w = l.items[10].tensor;
    assert_int_equal(w->shape[0], 64);
    assert_int_equal(w->shape[1], 16);
    assert_int_equal(w->shape[2], 3);
    duet_named_tensors_clear(&l);
    duet_module_destroy(net);

    /* x3: one PixelShufflePack of 3, no upsample2. */
    net = make_msr(16, 2, 3, 1);
    assert_null(duet_module_child(net, "upsample2"));
    duet_module *up = duet_module_child(net, "upsample1");
    assert_true(duet_module_is(up, "PixelShufflePack"));
    w = duet_module_param(duet_module_child(up, "upsample_conv"), "weight");
    assert_int_equal(w->shape[0], 16 * 9);
    TU_OK(duet_module_state(net, &l));
    assert_int_equal(l.count, 16);
    duet_named_tensors_clear(&l);
    duet_module_destroy(net);
}

static void test_full_size_counts(void **state) {
    (void)state;
    /* sum(p.numel() for p in net.parameters()) in PyTorch. */
    duet_module *net = make_msr(64, 16, 4, 2);
    assert_int_equal(duet_module_num_parameters(net, false), 1517571);
    duet_module_destroy(net);
    net = make_msr(64, 16, 3, 2);
    assert_int_equal(duet_module_num_parameters(net, false), 1554499);
    duet_module_destroy(net);
    net = make_vgg(64, 128, 2);
    assert_int_equal(duet_module_num_parameters(net, false), 14499401);
    duet_named_tensors l;
    TU_OK(duet_module_state(net, &l));
    assert_int_equal(l.count, 60);
    duet_named_tensors_clear(&l);
    duet_module_destroy(net);
}

/* kaiming_normal(fan_in) * 0.1, bias 0, except the upsample convs (scale
 * 1: PixelShufflePack's own init; MSRResNet.init_weights leaves them). */
static void test_msrresnet_init(void **state) {
    (void)state;
    duet_module *net = make_msr(64, 2, 4, 3);
    duet_named_tensors l;
    TU_OK(duet_module_named_parameters(net, false, &l));
    for (size_t i = 0; i < l.count; i++) {
        duet_tensor *t = l.items[i].tensor;
        if (strstr(l.items[i].name, ".bias") != NULL) {
            for (int64_t j = 0; j < t->numel; j++)
                if (t->data[j] != 0.0f) fail_msg("%s[%lld] = %g", l.items[i].name, (long long)j, t->data[j]);
            continue;
        }
        double fan_in = (double)(t->numel / t->shape[0]), sumsq = 0.0;
        for (int64_t j = 0; j < t->numel; j++) sumsq += (double)t->data[j] * t->data[j];
        double scale = strstr(l.items[i].name, "upsample") != NULL ? 1.0 : 0.1;
        double std = sqrt(sumsq / t->numel), want = scale * sqrt(2.0 / fan_in);
        /* conv_last has only 3 * 576 values: allow for sampling. */
        double tol = t->numel > 10000 ? 0.03 : 0.1;
        if (fabs(std / want - 1.0) > tol)
            fail_msg("%s: std %g, want %g", l.items[i].name, std, want);
    }
    duet_named_tensors_clear(&l);
    duet_module_destroy(net);
}

static void test_vgg_names_and_init(void **state) {
    (void)state;
    duet_module *net = make_vgg(8, 64, 4);
    assert_true(duet_module_is(net, "ModifiedVGG"));
    duet_named_tensors l;
    TU_OK(duet_module_state(net, &l));
    static const char *head[] = {"conv0_0.weight", "conv0_0.bias", "conv0_1.weight",
                                 "bn0_1.weight", "bn0_1.bias", "bn0_1.running_mean",
                                 "bn0_1.running_var", "bn0_1.num_batches_tracked",
                                 "conv1_0.weight", "bn1_0.weight"};
    for (size_t i = 0; i < 10; i++) assert_string_equal(l.items[i].name, head[i]);
    assert_string_equal(l.items[l.count - 4].name, "linear1.weight");
    assert_string_equal(l.items[l.count - 1].name, "linear2.bias");
    assert_true(l.items[7].is_integer);
    duet_named_tensors_clear(&l);

    /* Shapes: 4x4 stride-2 convs without bias; linear1 takes mid*8*(64/32)^2. */
    duet_tensor *w = duet_module_param(duet_module_child(net, "conv3_1"), "weight");
    assert_int_equal(w->shape[0], 64);
    assert_int_equal(w->shape[1], 64);
    assert_int_equal(w->shape[2], 4);
    assert_null(duet_module_param(duet_module_child(net, "conv3_1"), "bias"));
    w = duet_module_param(duet_module_child(net, "linear1"), "weight");
    assert_int_equal(w->shape[0], 100);
    assert_int_equal(w->shape[1], 256);
    assert_int_equal(duet_module_param(duet_module_child(net, "linear2"), "weight")->shape[1], 100);

    /* PyTorch default init: conv0_0 uniform in +-1/sqrt(27); BN 1 and 0. */
    w = duet_module_param(duet_module_child(net, "conv0_0"), "weight");
    for (int64_t j = 0; j < w->numel; j++) assert_true(fabs(w->data[j]) <= 1.0 / sqrt(27.0));
    duet_module *bn = duet_module_child(net, "bn2_1");
    assert_true(duet_module_param(bn, "weight")->data[5] == 1.0f);
    assert_true(duet_module_param(bn, "bias")->data[5] == 0.0f);
    assert_true(duet_module_buffer(bn, "running_var")->data[5] == 1.0f);
    duet_module_destroy(net);
}

/* With every convolution zeroed MSRResNet is its bilinear skip. */
static void test_msrresnet_forward_shapes_and_skip(void **state) {
    (void)state;
    duet_rng rng = duet_rng_make(5, 0);
    duet_tensor *x = tu_rand(&rng, 4, (int64_t[]){2, 3, 5, 6}, 0.0f, 1.0f);
    const int scales[3] = {2, 3, 4};
    for (int s = 0; s < 3; s++) {
        duet_module *net = make_msr(8, 1, scales[s], 6);
        duet_tensor *y = NULL, *up = NULL;
        TU_OK(duet_module_forward(net, x, &y));
        assert_int_equal(y->shape[0], 2);
        assert_int_equal(y->shape[1], 3);
        assert_int_equal(y->shape[2], 5 * scales[s]);
        assert_int_equal(y->shape[3], 6 * scales[s]);
        TU_OK(duet_upsample_bilinear(x, scales[s], &up));
        /* The body adds something (weights are not zero)... */
        double diff = 0;
        for (int64_t i = 0; i < y->numel; i++) diff += fabs(y->data[i] - up->data[i]);
        assert_true(diff > 0);
        duet_tensor_release(y);
        /* ...and nothing once they are. */
        duet_named_tensors l;
        TU_OK(duet_module_named_parameters(net, false, &l));
        for (size_t i = 0; i < l.count; i++) duet_tensor_fill(l.items[i].tensor, 0.0f);
        duet_named_tensors_clear(&l);
        TU_OK(duet_module_forward(net, x, &y));
        assert_memory_equal(y->data, up->data, (size_t)y->numel * sizeof(float));
        duet_tensor_release(y);
        duet_tensor_release(up);
        duet_module_destroy(net);
    }
    duet_tape_clear();
    duet_tensor_release(x);
}

static void test_vgg_forward_shape(void **state) {
    (void)state;
    duet_rng rng = duet_rng_make(7, 0);
    duet_module *net = make_vgg(4, 32, 8);
    duet_tensor *x = tu_randn(&rng, 4, (int64_t[]){2, 3, 32, 32}, 1.0f), *y = NULL;
    TU_OK(duet_module_forward(net, x, &y));
    assert_int_equal(y->ndim, 2);
    assert_int_equal(y->shape[0], 2);
    assert_int_equal(y->shape[1], 1);
    /* Training mode: every BN counted one batch. */
    assert_true(duet_module_buffer(duet_module_child(net, "bn4_1"), "num_batches_tracked")->data[0] == 1.0f);
    duet_tensor_release(y);
    duet_tape_clear();
    duet_tensor_release(x);
    duet_module_destroy(net);
}

static void test_seeding(void **state) {
    (void)state;
    duet_module *a = make_msr(8, 1, 4, 11), *b = make_msr(8, 1, 4, 11), *c = make_msr(8, 1, 4, 12);
    duet_named_tensors la, lb, lc;
    TU_OK(duet_module_state(a, &la));
    TU_OK(duet_module_state(b, &lb));
    TU_OK(duet_module_state(c, &lc));
    duet_tensor *wa = la.items[0].tensor, *wb = lb.items[0].tensor, *wc = lc.items[0].tensor;
    assert_memory_equal(wa->data, wb->data, (size_t)wa->numel * sizeof(float));
    assert_memory_not_equal(wa->data, wc->data, (size_t)wa->numel * sizeof(float));
    duet_named_tensors_clear(&la);
    duet_named_tensors_clear(&lb);
    duet_named_tensors_clear(&lc);
    duet_module_destroy(a);
    duet_module_destroy(b);
    duet_module_destroy(c);
}

static void test_errors(void **state) {
    (void)state;
    duet_rng rng = duet_rng_make(9, 0);
    duet_module *net = NULL;
    duet_msrresnet_opts mo = duet_msrresnet_opts_default();
    mo.upscale_factor = 5;
    assert_int_equal(duet_msrresnet_create(&mo, &rng, &net), DUET_EINVAL);
    assert_null(net);
    assert_non_null(strstr(duet_last_error(), "scale factor 5"));
    duet_modified_vgg_opts vo = duet_modified_vgg_opts_default();
    vo.input_size = 100;
    assert_int_equal(duet_modified_vgg_create(&vo, &rng, &net), DUET_EINVAL);
    assert_non_null(strstr(duet_last_error(), "32"));

    net = make_msr(4, 1, 2, 1);
    duet_tensor *x = tu_zeros(4, (int64_t[]){1, 1, 4, 4}), *y = NULL;
    assert_int_equal(duet_module_forward(net, x, &y), DUET_ESHAPE);
    assert_null(y);
    assert_non_null(strstr(duet_last_error(), "[1, 1, 4, 4]"));
    duet_tensor_release(x);
    duet_module_destroy(net);

    net = make_vgg(4, 32, 1);
    x = tu_zeros(4, (int64_t[]){1, 3, 64, 64});
    assert_int_equal(duet_module_forward(net, x, &y), DUET_ESHAPE);
    assert_non_null(strstr(duet_last_error(), "[1, 3, 64, 64]"));
    duet_tensor_release(x);
    duet_module_destroy(net);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_msrresnet_names),
        cmocka_unit_test(test_full_size_counts),
        cmocka_unit_test(test_msrresnet_init),
        cmocka_unit_test(test_vgg_names_and_init),
        cmocka_unit_test(test_msrresnet_forward_shapes_and_skip),
        cmocka_unit_test(test_vgg_forward_shape),
        cmocka_unit_test(test_seeding),
        cmocka_unit_test(test_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
