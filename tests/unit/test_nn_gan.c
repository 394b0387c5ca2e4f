/* The image-to-image GAN layers and networks without PyTorch: parameter
 * names, shapes and default init of ConvTranspose2d and InstanceNorm2d,
 * Dropout's train/eval behaviour on its borrowed rng, the statistics of
 * generation_init_weights, the full-size parameter counts that the
 * pix2pix / CycleGAN papers' code prints, replaying a UnetGenerator's
 * dropout from a saved rng, the construction and input errors, and the
 * settings exporters read (duet_layer_settings_of, duet_conv_module_act_first).
 * Numerical agreement with PyTorch is in test_ref_networks_gan.c. */
#include "testutil.h"

#include <math.h>
#include <string.h>

static void test_conv_transpose2d_module(void **state) {
    (void)state;
    duet_rng rng = duet_rng_make(1, 0);
    duet_module *m = NULL;
    TU_OK(duet_conv_transpose2d_module_create(6, 4, 3, 2, 1, 1, true, &rng, &m));
    assert_true(duet_module_is(m, "ConvTranspose2d"));
    duet_tensor *w = duet_module_param(m, "weight"), *b = duet_module_param(m, "bias");
    assert_non_null(w);
    assert_non_null(b);
    /* (IN, OUT, K, K), and the bound 1/sqrt(OUT*K*K) = 1/6. */
    assert_int_equal(w->shape[0], 6);
    assert_int_equal(w->shape[1], 4);
    assert_int_equal(b->numel, 4);
    double mx = 0.0;
    for (int64_t i = 0; i < w->numel; i++) mx = fmax(mx, fabs(w->data[i]));
    assert_true(mx <= 1.0 / 6.0 && mx > 0.9 / 6.0);
    duet_rng xr = duet_rng_make(2, 0);
    duet_tensor *x = tu_randn(&xr, 4, (int64_t[]){1, 6, 3, 5}, 1.0f), *y = NULL, *z = NULL;
    TU_OK(duet_module_forward(m, x, &y));
    TU_OK(duet_conv_transpose2d(x, w, b, 2, 1, 1, &z));
    assert_int_equal(y->shape[2], 6);
    assert_int_equal(y->shape[3], 10);
    assert_memory_equal(y->data, z->data, (size_t)y->numel * sizeof(float));
    duet_tensor_release(x);
    duet_tensor_release(y);
    duet_tensor_release(z);
    duet_module_destroy(m);
    tu_expect_error(duet_conv_transpose2d_module_create(6, 4, 3, 2, 1, 2, true, &rng, &m),
                    DUET_EINVAL, "ConvTranspose2d", "output_padding 2", NULL);
    assert_null(m);
}

static void test_instancenorm_pad_modules(void **state) {
    (void)state;
    duet_module *in = NULL, *ina = NULL, *pad = NULL;
    TU_OK(duet_instance_norm2d_module_create(3, 1e-5f, false, &in));
    TU_OK(duet_instance_norm2d_module_create(3, 1e-5f, true, &ina));
    TU_OK(duet_reflection_pad2d_module_create(2, &pad));
    /* nn.InstanceNorm2d's defaults keep no running statistics. */
    assert_int_equal(duet_module_param_count(in) + duet_module_buffer_count(in), 0);
    assert_int_equal(duet_module_param_count(ina), 2);
    assert_int_equal(duet_module_buffer_count(ina), 0);
    assert_true(duet_module_param(ina, "weight")->data[2] == 1.0f);
    assert_true(duet_module_param(ina, "bias")->data[2] == 0.0f);
    assert_int_equal(duet_module_param_count(pad) + duet_module_buffer_count(pad), 0);
    duet_rng r = duet_rng_make(3, 0);
    duet_tensor *x = tu_randn(&r, 4, (int64_t[]){2, 3, 4, 4}, 1.0f), *a = NULL, *b = NULL;
    TU_OK(duet_module_forward(ina, x, &a));
    TU_OK(duet_module_forward(in, x, &b));
    assert_memory_equal(a->data, b->data, (size_t)a->numel * sizeof(float));
    duet_tensor_release(a);
    TU_OK(duet_module_forward(pad, x, &a));
    assert_int_equal(a->shape[2], 8);
    duet_tensor_release(a);
    duet_tensor_release(b);
    duet_tensor_release(x);
    duet_module_destroy(in);
    duet_module_destroy(ina);
    duet_module_destroy(pad);
}

static void test_dropout_module(void **state) {
    (void)state;
    duet_rng rng = duet_rng_make(4, 0);
    duet_module *d = NULL;
    TU_OK(duet_dropout_module_create(0.5f, &rng, &d));
    duet_rng xr = duet_rng_make(5, 0);
    duet_tensor *x = tu_rand(&xr, 2, (int64_t[]){4, 50}, 1.0f, 2.0f), *y = NULL;
    TU_OK(duet_module_forward(d, x, &y)); /* training by default */
    assert_int_equal(rng.counter, 200);
    int zeros = 0;
    for (int64_t i = 0; i < y->numel; i++) zeros += y->data[i] == 0.0f;
    assert_true(zeros > 50 && zeros < 150);
    duet_tensor_release(y);
    duet_module_train(d, false);
    TU_OK(duet_module_forward(d, x, &y));
    assert_ptr_equal(y, x);
    assert_int_equal(rng.counter, 200);
    duet_tensor_release(y);
    duet_tensor_release(x);
    duet_module_destroy(d);
    tu_expect_error(duet_dropout_module_create(-0.1f, &rng, &d), DUET_EINVAL, "Dropout", NULL);
}

/* Every conv weight N(0, 0.02) with bias 0; BN weight N(1, 0.02), bias 0. */
static void test_generation_init_weights(void **state) {
    (void)state;
    duet_rng rng = duet_rng_make(6, 0);
    duet_unet_generator_opts o = duet_unet_generator_opts_default();
    o.num_down = 5;
    o.base_channels = 16;
    o.norm = DUET_GEN_NORM_BN;
    duet_module *g = NULL;
    TU_OK(duet_unet_generator_create(&o, &rng, NULL, &g));
    duet_named_tensors ps;
    TU_OK(duet_module_named_parameters(g, false, &ps));
    double cs = 0, css = 0, bs = 0, bss = 0;
    int64_t cn = 0, bn = 0;
    for (size_t i = 0; i < ps.count; i++) {
        const char *n = ps.items[i].name;
        const duet_tensor *t = ps.items[i].tensor;
        const bool is_bn = strstr(n, ".bn.") != NULL, is_weight = strstr(n, ".weight") != NULL;
        for (int64_t k = 0; k < t->numel; k++) {
            const double v = t->data[k];
            if (!is_weight) {
                if (v != 0.0) fail_msg("%s[%lld] = %g; biases start at 0", n, (long long)k, v);
            } else if (is_bn) {
                bs += v;
                bss += (v - 1.0) * (v - 1.0);
                bn++;
            } else {
                cs += v;
                css += v * v;
                cn++;
            }
        }
    }
    duet_named_tensors_clear(&ps);
    assert_true(cn > 100000 && bn > 400);
    assert_true(fabs(cs / (double)cn) < 2e-4);
    assert_true(fabs(sqrt(css / (double)cn) - 0.02) < 5e-4);
    assert_true(fabs(bs / (double)bn - 1.0) < 5e-3);
    assert_true(fabs(sqrt(bss / (double)bn) - 0.02) < 3e-3);
    duet_module_destroy(g);
}

/* The counts the pix2pix / CycleGAN reference code prints for its
 * resnet_9blocks generator (11.378 M) and basic PatchGAN on a 6-channel
 * pair (2.769 M): MMEditing builds the same layers. */
static void test_full_size_parameter_counts(void **state) {
    (void)state;
    duet_rng rng = duet_rng_make(7, 0);
    duet_module *m = NULL;
    duet_resnet_generator_opts r = duet_resnet_generator_opts_default();
    TU_OK(duet_resnet_generator_create(&r, &rng, NULL, &m));
    assert_int_equal(duet_module_num_parameters(m, false), 11378179);
    duet_module_destroy(m);
    duet_patch_discriminator_opts p = duet_patch_discriminator_opts_default();
    TU_OK(duet_patch_discriminator_create(&p, &rng, &m));
    assert_int_equal(duet_module_num_parameters(m, false), 2768705);
    duet_module_destroy(m);
}

/* A training-mode UnetGenerator with dropout replays bitwise from a saved
 * dropout rng (what a resumed run relies on) and differs without it. */
static void test_unet_dropout_replay(void **state) {
    (void)state;
    duet_rng init = duet_rng_make(8, 0), drop = duet_rng_make(9, 0);
    duet_unet_generator_opts o = duet_unet_generator_opts_default();
    o.num_down = 6;
    o.base_channels = 2;
    o.use_dropout = true;
    duet_module *g = NULL;
    TU_OK(duet_unet_generator_create(&o, &init, &drop, &g));
    duet_rng xr = duet_rng_make(10, 0);
    duet_tensor *x = tu_randn(&xr, 4, (int64_t[]){2, 3, 64, 64}, 1.0f), *a = NULL, *b = NULL,
                *c = NULL;
    const duet_rng saved = drop;
    TU_OK(duet_module_forward(g, x, &a));
    assert_true(drop.counter > saved.counter);
    TU_OK(duet_module_forward(g, x, &c));
    drop = saved;
    TU_OK(duet_module_forward(g, x, &b));
    assert_memory_equal(a->data, b->data, (size_t)a->numel * sizeof(float));
    assert_memory_not_equal(a->data, c->data, (size_t)a->numel * sizeof(float));
    duet_tensor_release(a);
    duet_tensor_release(b);
    duet_tensor_release(c);
    duet_tensor_release(x);
    duet_module_destroy(g);
}

static void test_network_errors(void **state) {
    (void)state;
    duet_rng init = duet_rng_make(11, 0);
    duet_module *g = NULL;
    duet_unet_generator_opts o = duet_unet_generator_opts_default();
    o.num_down = 6;
    o.base_channels = 2;
    o.use_dropout = true;
    tu_expect_error(duet_unet_generator_create(&o, &init, NULL, &g), DUET_EINVAL,
                    "UnetGenerator", "dropout rng", NULL);
    o.use_dropout = false;
    o.num_down = 4;
    tu_expect_error(duet_unet_generator_create(&o, &init, NULL, &g), DUET_EINVAL,
                    "UnetGenerator", "num_down 4", NULL);
    o.num_down = 5;
    TU_OK(duet_unet_generator_create(&o, &init, NULL, &g));
    duet_tensor *x = tu_zeros(4, (int64_t[]){1, 3, 48, 48}), *y = NULL;
    tu_expect_error(duet_module_forward(g, x, &y), DUET_ESHAPE, "UnetGenerator",
                    "[1, 3, 48, 48]", "multiples of 32", NULL);
    assert_null(y);
    duet_tensor_release(x);
    duet_module_destroy(g);
    duet_resnet_generator_opts r = duet_resnet_generator_opts_default();
    r.use_dropout = true;
    tu_expect_error(duet_resnet_generator_create(&r, &init, NULL, &g), DUET_EINVAL,
                    "ResnetGenerator", "dropout rng", NULL);
    duet_patch_discriminator_opts p = duet_patch_discriminator_opts_default();
    p.num_conv = 0;
    tu_expect_error(duet_patch_discriminator_create(&p, &init, &g), DUET_EINVAL,
                    "PatchDiscriminator", "num_conv 0", NULL);
    assert_null(g);
}

/* What an exporter reads of the layers (duet_layer_settings_of) and of a
 * ConvModule's order (duet_conv_module_act_first): the values they were
 * built with, and an error naming the type for any other module. */
static void test_export_settings(void **state) {
    (void)state;
    duet_rng rng = duet_rng_make(12, 0);
    duet_module *m[7] = {NULL};
    TU_OK(duet_conv_transpose2d_module_create(4, 2, 3, 2, 1, 1, false, &rng, &m[0]));
    TU_OK(duet_reflection_pad2d_module_create(3, &m[1]));
    TU_OK(duet_batch_norm2d_module_create(2, 1e-3f, 0.1f, &m[2]));
    TU_OK(duet_instance_norm2d_module_create(2, 2e-5f, true, &m[3]));
    TU_OK(duet_activation_module_create(DUET_ACT_LEAKY_RELU, 0.3f, &m[4]));
    TU_OK(duet_dropout_module_create(0.25f, &rng, &m[5]));
    TU_OK(duet_conv2d_module_create(2, 2, 3, 1, 1, true, &rng, &m[6]));
    duet_layer_settings s;
    TU_OK(duet_layer_settings_of(m[0], &s));
    assert_int_equal(s.stride, 2);
    assert_int_equal(s.padding, 1);
    assert_int_equal(s.output_padding, 1);
    TU_OK(duet_layer_settings_of(m[1], &s));
    assert_int_equal(s.padding, 3);
    assert_int_equal(s.stride, 0);
    TU_OK(duet_layer_settings_of(m[2], &s));
    assert_true(s.eps == 1e-3f);
    TU_OK(duet_layer_settings_of(m[3], &s));
    assert_true(s.eps == 2e-5f && s.affine);
    TU_OK(duet_layer_settings_of(m[4], &s));
    assert_true(s.negative_slope == 0.3f);
    TU_OK(duet_layer_settings_of(m[5], &s));
    assert_true(s.p == 0.25f);
    TU_OK(duet_layer_settings_of(m[6], &s));
    assert_int_equal(s.stride, 1);
    assert_int_equal(s.padding, 1);
    duet_module *seq = NULL;
    TU_OK(duet_sequential_create(&seq));
    tu_expect_error(duet_layer_settings_of(seq, &s), DUET_EINVAL,
                    "a Sequential has no layer settings", NULL);
    duet_module_destroy(seq);
    bool first = true;
    tu_expect_error(duet_conv_module_act_first(m[6], &first), DUET_EINVAL,
                    "a Conv2d is not a ConvModule", NULL);
    for (int i = 0; i < 7; i++) duet_module_destroy(m[i]);
    /* The Unet's blocks run act first, the ResnetGenerator's ConvModules last. */
    duet_unet_generator_opts uo = duet_unet_generator_opts_default();
    uo.num_down = 5;
    uo.base_channels = 2;
    duet_resnet_generator_opts ro = duet_resnet_generator_opts_default();
    ro.base_channels = 2;
    ro.num_blocks = 1;
    duet_module *unet = NULL, *res = NULL;
    TU_OK(duet_unet_generator_create(&uo, &rng, NULL, &unet));
    TU_OK(duet_resnet_generator_create(&ro, &rng, NULL, &res));
    duet_module *up = duet_module_child(duet_module_child(duet_module_child(unet, "model"),
                                                          "model"), "2");
    duet_module *head = duet_module_child(duet_module_child(res, "model"), "0");
    assert_non_null(up);
    assert_non_null(head);
    TU_OK(duet_conv_module_act_first(up, &first));
    assert_true(first);
    TU_OK(duet_conv_module_act_first(head, &first));
    assert_false(first);
    duet_module_destroy(unet);
    duet_module_destroy(res);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_conv_transpose2d_module),
        cmocka_unit_test(test_instancenorm_pad_modules),
        cmocka_unit_test(test_dropout_module),
        cmocka_unit_test(test_generation_init_weights),
        cmocka_unit_test(test_full_size_parameter_counts),
        cmocka_unit_test(test_unet_dropout_replay),
        cmocka_unit_test(test_network_errors),
        cmocka_unit_test(test_export_settings),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
