/* DeepFill's generator pieces (src/models/gated_conv.c, deepfill.c) and the
 * slice_channels op they split with: finite-difference gradient checks of
 * slice_channels and of SimpleGatedConvModule (zeros and reflect padding,
 * dilation, without the feature act), the gated conv's forward against its
 * formula ELU(conv(x)[:C]) * sigmoid(conv(x)[C:]), MMEditing's names and
 * parameter counts of the full-size v1 generator, the channel checks and
 * the input shape errors. MMEditing's own modules are the oracle of
 * tests/mmedit/test_ref_deepfill_nets.c. */
#include <math.h>
#include <string.h>

#include "testutil.h"

static int op_slice(void *ctx, duet_tensor *const *in, duet_tensor **out) {
    const int64_t *se = ctx;
    return duet_slice_channels(in[0], se[0], se[1], out);
}

static void test_slice_channels(void **state) {
    (void)state;
    duet_rng rng = duet_rng_make(11, 0);
    duet_tensor *x = tu_randn(&rng, 4, (int64_t[]){2, 5, 3, 4}, 1.0f), *y = NULL;
    TU_OK(duet_slice_channels(x, 1, 3, &y));
    assert_int_equal(y->shape[0], 2);
    assert_int_equal(y->shape[1], 3);
    for (int64_t n = 0; n < 2; n++)
        for (int64_t c = 0; c < 3; c++)
            for (int64_t k = 0; k < 12; k++)
                assert_true(y->data[(n * 3 + c) * 12 + k] == x->data[(n * 5 + c + 1) * 12 + k]);
    duet_tensor_release(y);
    x->requires_grad = true;
    const int64_t se[2] = {2, 3};
    tu_gradcheck(op_slice, (void *)se, 1, &x, 1e-2, 1e-3, 1e-4, 0);
    tu_expect_error(duet_slice_channels(x, 3, 3, &y), DUET_ESHAPE, "slice_channels", "[3, 6)",
                    NULL);
    duet_tensor_release(x);
}

static int op_module(void *ctx, duet_tensor *const *in, duet_tensor **out) {
    return duet_module_forward(ctx, in[0], out);
}

/* Gradient check of the module in x, the conv's weight and bias. */
static void gradcheck_gated(const duet_gated_conv_opts *o, uint64_t seed) {
    duet_rng rng = duet_rng_make(seed, 0);
    duet_module *m = NULL;
    TU_OK(duet_simple_gated_conv_module_create(o, &rng, &m));
    duet_tensor *x = tu_randn(&rng, 4, (int64_t[]){2, o->in_channels, 7, 6}, 1.0f);
    x->requires_grad = true;
    duet_tensor *w = duet_module_param(duet_module_child(duet_module_child(m, "conv"), "conv"),
                                       "weight");
    duet_tensor *b = duet_module_param(duet_module_child(duet_module_child(m, "conv"), "conv"),
                                       "bias");
    assert_non_null(w);
    assert_non_null(b);
    assert_int_equal(w->shape[0], 2 * o->out_channels);
    duet_tensor *in[3] = {x, w, b};
    tu_gradcheck(op_module, m, 3, in, 1e-2, 2e-2, 2e-3, 60);
    duet_tensor_release(x);
    duet_module_destroy(m);
}

static void test_gated_conv_gradcheck(void **state) {
    (void)state;
    duet_gated_conv_opts o = duet_gated_conv_opts_default();
    o.in_channels = 3, o.out_channels = 4;
    gradcheck_gated(&o, 21);
    o.reflect = true, o.stride = 2;
    gradcheck_gated(&o, 22);
    o.stride = 1, o.dilation = 2, o.padding = 2;
    gradcheck_gated(&o, 23);
    o.feat_act = false, o.reflect = false, o.kernel = 1, o.padding = 0, o.dilation = 1;
    gradcheck_gated(&o, 24);
}

static double elu(double v) { return v > 0 ? v : expm1(v); }

/* The forward is ELU(first half) * sigmoid(second half) of the conv. */
static void test_gated_conv_formula(void **state) {
    (void)state;
    duet_gated_conv_opts o = duet_gated_conv_opts_default();
    o.in_channels = 2, o.out_channels = 3, o.reflect = true;
    duet_rng rng = duet_rng_make(31, 0);
    duet_module *m = NULL;
    TU_OK(duet_simple_gated_conv_module_create(&o, &rng, &m));
    assert_true(duet_module_is(m, "SimpleGatedConvModule"));
    assert_true(duet_module_is(duet_module_child(m, "feat_act"), "ELU"));
    assert_true(duet_module_is(duet_module_child(m, "gate_act"), "Sigmoid"));
    assert_non_null(duet_module_child(duet_module_child(m, "conv"), "padding_layer"));
    duet_tensor *x = tu_randn(&rng, 4, (int64_t[]){1, 2, 5, 5}, 1.0f), *y = NULL, *h = NULL;
    TU_OK(duet_module_forward(m, x, &y));
    TU_OK(duet_module_forward(duet_module_child(m, "conv"), x, &h));
    assert_int_equal(h->shape[1], 6);
    assert_int_equal(y->shape[1], 3);
    const int64_t hw = 25;
    for (int64_t c = 0; c < 3; c++)
        for (int64_t k = 0; k < hw; k++) {
            const double f = h->data[c * hw + k], g = h->data[(c + 3) * hw + k];
            const double want = elu(f) / (1.0 + exp(-g));
            assert_true(fabs(y->data[c * hw + k] - want) <= 1e-6 + 1e-5 * fabs(want));
        }
    duet_tensor *ts[] = {x, y, h};
    for (size_t i = 0; i < 3; i++) duet_tensor_release(ts[i]);
    duet_module_destroy(m);
}

/* MMEditing's DeepFillEncoderDecoder() has 3,601,542 parameters in 84
 * tensors and one buffer (the attention's fuse_kernel) (its DeepFillv1
 * config the same; DeepFillv2's 4,414,908), counted from mmedit 0.16.1; a
 * few of its names. */
static void test_encdec_names(void **state) {
    (void)state;
    duet_rng rng = duet_rng_make(41, 0);
    duet_module *m = NULL;
    duet_deepfill_encdec_opts o = duet_deepfill_encdec_opts_default();
    TU_OK(duet_deepfill_encdec_create(&o, &rng, &m));
    assert_int_equal(duet_module_num_parameters(m, false), 3601542);
    duet_named_tensors ps;
    TU_OK(duet_module_named_parameters(m, false, &ps));
    assert_int_equal(ps.count, 84);
    duet_named_tensors bs;
    TU_OK(duet_module_named_buffers(m, &bs));
    assert_int_equal(bs.count, 1);
    assert_string_equal(bs.items[0].name,
                        "stage2.contextual_attention_neck.contextual_attention.fuse_kernel");
    duet_named_tensors_clear(&bs);
    static const char *const names[] = {
        "stage1.encoder.enc1.conv.weight", "stage1.dilation_neck.dilation_convs.3.conv.bias",
        "stage1.decoder.dec7.conv.weight", "stage2.encoder_attention.enc6.conv.weight",
        "stage2.contextual_attention_neck.conv2.conv.bias", "stage2.decoder.dec1.conv.weight"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        bool found = false;
        for (size_t j = 0; j < ps.count && !found; j++)
            found = strcmp(ps.items[j].name, names[i]) == 0;
        if (!found) fail_msg("no parameter %s", names[i]);
    }
    /* init_weights: N(0, 0.02) weights, zero biases */
    const duet_tensor *w = ps.items[0].tensor, *b = ps.items[1].tensor;
    double ss = 0;
    for (int64_t i = 0; i < w->numel; i++) ss += (double)w->data[i] * w->data[i];
    assert_true(fabs(sqrt(ss / (double)w->numel) - 0.02) < 0.002);
    for (int64_t i = 0; i < b->numel; i++) assert_true(b->data[i] == 0.0f);
    duet_named_tensors_clear(&ps);
    duet_module_destroy(m);

    /* DeepFillv2's config: gated everywhere, channel_factor 0.75 */
    duet_deepfill_encoder_opts *encs[3] = {&o.encoder, &o.stage2.encoder_attention,
                                           &o.stage2.encoder_conv};
    for (int i = 0; i < 3; i++) encs[i]->channel_factor = 0.75, encs[i]->gated = true;
    o.decoder.channel_factor = 0.75, o.decoder.in_channels = 96, o.decoder.gated = true;
    o.dilation_neck.in_channels = o.stage2.dilation_neck.in_channels = 96;
    o.dilation_neck.gated = o.stage2.dilation_neck.gated = true;
    o.stage2.contextual_attention.in_channels = 96, o.stage2.contextual_attention.gated = true;
    o.stage2.decoder.in_channels = 192, o.stage2.decoder.gated = true;
    TU_OK(duet_deepfill_encdec_create(&o, &rng, &m));
    assert_int_equal(duet_module_num_parameters(m, false), 4414908);
    assert_non_null(duet_module_param(
        duet_module_child(duet_module_child(duet_module_child(duet_module_child(
                              duet_module_child(m, "stage1"), "decoder"), "dec7"), "conv"),
                          "conv"),
        "weight"));
    assert_null(duet_module_child(duet_module_child(duet_module_child(duet_module_child(m,
                                  "stage1"), "decoder"), "dec7"), "feat_act"));
    duet_module_destroy(m);
}

/* Channel settings that do not chain, and inputs of the wrong shape, are
 * errors that name what is wrong. */
static void test_errors(void **state) {
    (void)state;
    duet_rng rng = duet_rng_make(51, 0);
    duet_module *m = NULL;
    duet_deepfill_encdec_opts o = duet_deepfill_encdec_opts_default();
    o.decoder.in_channels = 64;
    tu_expect_error(duet_deepfill_encdec_create(&o, &rng, &m), DUET_EINVAL, "stage1's encoder",
                    "decoder.in_channels 64", NULL);
    o = duet_deepfill_encdec_opts_default();
    o.stage2.decoder.in_channels = 128;
    tu_expect_error(duet_deepfill_encdec_create(&o, &rng, &m), DUET_EINVAL, "DeepFillRefiner",
                    "decoder.in_channels is 128", NULL);
    o = duet_deepfill_encdec_opts_default();
    o.encoder.channel_factor = 0.01;
    tu_expect_error(duet_deepfill_encdec_create(&o, &rng, &m), DUET_EINVAL, NULL);
    assert_null(m);
    /* a small generator; inputs not multiples of 8, or with too few channels */
    o = duet_deepfill_encdec_opts_default();
    duet_deepfill_encoder_opts *encs[3] = {&o.encoder, &o.stage2.encoder_attention,
                                           &o.stage2.encoder_conv};
    for (int i = 0; i < 3; i++) encs[i]->channel_factor = 0.125;
    o.decoder.channel_factor = o.stage2.decoder.channel_factor = 0.125;
    o.decoder.in_channels = o.dilation_neck.in_channels = 16;
    o.stage2.dilation_neck.in_channels = o.stage2.contextual_attention.in_channels = 16;
    o.stage2.decoder.in_channels = 32;
    TU_OK(duet_deepfill_encdec_create(&o, &rng, &m));
    duet_tensor *x = tu_randn(&rng, 4, (int64_t[]){1, 5, 20, 24}, 1.0f), *s1 = NULL, *s2 = NULL;
    tu_expect_error(duet_deepfill_encdec_forward(m, x, &s1, &s2, NULL), DUET_ESHAPE,
                    "multiples of 8", NULL);
    duet_tensor_release(x);
    x = tu_randn(&rng, 4, (int64_t[]){1, 3, 24, 24}, 1.0f);
    tu_expect_error(duet_deepfill_encdec_forward(m, x, &s1, &s2, NULL), DUET_ESHAPE,
                    "(N, C, H, W)", NULL);
    duet_tensor_release(x);
    x = tu_randn(&rng, 4, (int64_t[]){1, 4, 24, 24}, 1.0f); /* the generator takes 5 */
    tu_expect_error(duet_deepfill_encdec_forward(m, x, &s1, &s2, NULL), DUET_ESHAPE,
                    "(N, 5, H, W)", NULL);
    duet_tensor_release(x);
    /* zeros padding: a small input runs; the offsets are (N, L, H/8, W/8) */
    duet_tensor *off = NULL;
    x = tu_randn(&rng, 4, (int64_t[]){2, 5, 16, 24}, 1.0f);
    TU_OK(duet_deepfill_encdec_forward(m, x, &s1, &s2, &off));
    assert_int_equal(s1->shape[1], 3);
    assert_int_equal(s2->shape[2], 16);
    assert_int_equal(off->shape[1], 6);
    assert_int_equal(off->shape[2], 2);
    assert_int_equal(off->shape[3], 3);
    duet_tensor *ts[] = {x, s1, s2, off};
    for (size_t i = 0; i < 4; i++) duet_tensor_release(ts[i]);
    tu_expect_error(duet_ca_neck_forward(m, NULL, NULL, &x, NULL), DUET_EINVAL,
                    "DeepFillEncoderDecoder", NULL);
    duet_module_destroy(m);
    /* without the ones channel (input_with_ones false): 4 input channels */
    o.encoder.in_channels = o.stage2.encoder_conv.in_channels = 4;
    o.stage2.encoder_attention.in_channels = 4;
    TU_OK(duet_deepfill_encdec_create(&o, &rng, &m));
    x = tu_randn(&rng, 4, (int64_t[]){1, 4, 16, 16}, 1.0f);
    TU_OK(duet_deepfill_encdec_forward(m, x, &s1, &s2, NULL));
    assert_int_equal(s2->shape[1], 3);
    duet_tensor *ts4[] = {x, s1, s2};
    for (size_t i = 0; i < 3; i++) duet_tensor_release(ts4[i]);
    duet_module_destroy(m);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_slice_channels),
        cmocka_unit_test(test_gated_conv_gradcheck),
        cmocka_unit_test(test_gated_conv_formula),
        cmocka_unit_test(test_encdec_names),
        cmocka_unit_test(test_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
