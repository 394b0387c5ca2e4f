/* MSRResNet and ModifiedVGG against PyTorch (tests/ref/ref_networks.py ->
 * networks.safetensors): the PyTorch weights are loaded strictly by name
 * into duet's networks (so every name and shape must match MMEditing's),
 * then the output, the loss and every parameter gradient are compared to
 * 1e-4 relative, the BN buffers after a training-mode forward, and the
 * MSRResNet parameters after five Adam steps (lr 1e-3) to 1e-5.
 *
 * The reference is computed by PyTorch in float64 from float32 weights and
 * inputs. Relative means relative to the tensor's scale: |got - want| <=
 * rtol * (|want| + max|want|). Elementwise relative error alone cannot work
 * for the elements of a gradient that sit near zero: there PyTorch's own
 * float32 result differs from float64 by up to 8e-4 of (|want| + 0.01 max)
 * for the batch-3 ModifiedVGG, whose last BatchNorm normalises 3 values.
 * Measured (DUET_TEST_VERBOSE=1 prints every tensor): gradients within
 * 2e-5 of max|want|, parameters after Adam within 1.1e-6. */
#include "testutil.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

static duet_st *ref;

static int setup(void **state) {
    (void)state;
    ref = tu_ref_load("networks.safetensors");
    return 0;
}

static int teardown(void **state) {
    (void)state;
    duet_st_destroy(ref);
    return 0;
}

static void compare(const char *key, const float *got, int64_t n, double rtol) {
    duet_tensor *want = tu_ref_tensor(ref, key);
    if (want->numel != n)
        fail_msg("%s: %lld values, PyTorch has %lld", key, (long long)n, (long long)want->numel);
    double mx = 0.0;
    for (int64_t i = 0; i < n; i++) mx = fmax(mx, fabs(want->data[i]));
    if (getenv("DUET_TEST_VERBOSE") != NULL) {
        double worst = 0.0, abs_worst = 0.0;
        for (int64_t i = 0; i < n; i++) {
            double e = fabs(got[i] - want->data[i]);
            worst = fmax(worst, e / (fabs(want->data[i]) + 1e-2 * mx));
            abs_worst = fmax(abs_worst, e);
        }
        printf("%-45s max|want| %.3g  max error / max|want| %.3g  worst error / (|want| + 0.01 "
               "max) %.3g\n", key, mx, mx > 0 ? abs_worst / mx : abs_worst, worst);
    }
    tu_assert_close(got, want->data, n, rtol, rtol * mx, key);
    duet_tensor_release(want);
}

static void load_weights(duet_module *net, const char *name) {
    char prefix[64];
    snprintf(prefix, sizeof prefix, "%s.w.", name);
    size_t nmiss = 1, nunexp = 1;
    TU_OK(duet_module_load_state(net, ref, prefix, true, &nmiss, &nunexp));
    assert_int_equal(nmiss, 0);
    assert_int_equal(nunexp, 0);
}

/* Every parameter's gradient; the file holds exactly these names. */
static void compare_grads(duet_module *net, const char *name, double rtol) {
    duet_named_tensors ps;
    TU_OK(duet_module_named_parameters(net, false, &ps));
    char key[160];
    size_t in_file = 0, plen;
    snprintf(key, sizeof key, "%s.grad.", name);
    plen = strlen(key);
    for (size_t i = 0; i < duet_st_count(ref); i++)
        in_file += strncmp(duet_st_name(ref, i), key, plen) == 0;
    assert_int_equal(in_file, ps.count);
    for (size_t i = 0; i < ps.count; i++) {
        snprintf(key, sizeof key, "%s.grad.%s", name, ps.items[i].name);
        if (ps.items[i].tensor->grad == NULL) fail_msg("%s: no gradient", ps.items[i].name);
        compare(key, ps.items[i].tensor->grad, ps.items[i].tensor->numel, rtol);
    }
    duet_named_tensors_clear(&ps);
}

static duet_module *make_msr(int scale) {
    duet_msrresnet_opts o = duet_msrresnet_opts_default();
    o.mid_channels = 16;
    o.num_blocks = 2;
    o.upscale_factor = scale;
    duet_rng rng = duet_rng_make(7, 0);
    duet_module *net = NULL;
    TU_OK(duet_msrresnet_create(&o, &rng, &net));
    return net;
}

static void msr_loss(duet_module *net, duet_tensor *x, duet_tensor *target, duet_tensor **y,
                     duet_tensor **loss) {
    TU_OK(duet_module_forward(net, x, y));
    TU_OK(duet_mse_loss(*y, target, 1.0f, loss));
}

static void msr_case(const char *name, int scale) {
    char key[160];
    duet_module *net = make_msr(scale);
    load_weights(net, name);
    snprintf(key, sizeof key, "%s.x", name);
    duet_tensor *x = tu_ref_tensor(ref, key);
    snprintf(key, sizeof key, "%s.target", name);
    duet_tensor *target = tu_ref_tensor(ref, key);

    duet_tensor *y = NULL, *loss = NULL;
    msr_loss(net, x, target, &y, &loss);
    assert_int_equal(y->shape[2], 8 * scale);
    snprintf(key, sizeof key, "%s.out", name);
    compare(key, y->data, y->numel, 1e-4);
    snprintf(key, sizeof key, "%s.loss", name);
    compare(key, loss->data, 1, 1e-4);
    TU_OK(duet_backward(loss));
    duet_tensor_release(y);
    duet_tensor_release(loss);
    compare_grads(net, name, 1e-4);

    /* Five Adam steps from the same weights. */
    snprintf(key, sizeof key, "%s.w.", name);
    TU_OK(duet_module_load_state(net, ref, key, true, NULL, NULL));
    duet_named_tensors ps;
    TU_OK(duet_module_named_parameters(net, true, &ps));
    duet_optimizer *opt = NULL;
    TU_OK(duet_adam_create(&ps, NULL, &opt));
    for (int s = 0; s < 5; s++) {
        duet_optimizer_zero_grad(opt);
        msr_loss(net, x, target, &y, &loss);
        TU_OK(duet_backward(loss));
        TU_OK(duet_optimizer_step(opt));
        duet_tensor_release(y);
        duet_tensor_release(loss);
    }
    for (size_t i = 0; i < ps.count; i++) {
        snprintf(key, sizeof key, "%s.adam5.%s", name, ps.items[i].name);
        compare(key, ps.items[i].tensor->data, ps.items[i].tensor->numel, 1e-5);
    }
    duet_optimizer_destroy(opt);
    duet_named_tensors_clear(&ps);
    duet_tensor_release(x);
    duet_tensor_release(target);
    duet_module_destroy(net);
}

static void test_msrresnet_x4(void **state) {
    (void)state;
    msr_case("msr_x4", 4);
}

static void test_msrresnet_x3(void **state) {
    (void)state;
    msr_case("msr_x3", 3);
}

static void vgg_case(const char *name, int size) {
    char key[160];
    duet_modified_vgg_opts o = duet_modified_vgg_opts_default();
    o.mid_channels = 8;
    o.input_size = size;
    duet_rng rng = duet_rng_make(8, 0);
    duet_module *net = NULL;
    TU_OK(duet_modified_vgg_create(&o, &rng, &net));
    load_weights(net, name);
    duet_module_train(net, true);
    snprintf(key, sizeof key, "%s.x", name);
    duet_tensor *x = tu_ref_tensor(ref, key);
    duet_tensor *y = NULL, *loss = NULL;
    TU_OK(duet_module_forward(net, x, &y));
    assert_int_equal(y->ndim, 2);
    assert_int_equal(y->shape[0], 3);
    assert_int_equal(y->shape[1], 1);
    snprintf(key, sizeof key, "%s.out", name);
    compare(key, y->data, y->numel, 1e-4);
    TU_OK(duet_bce_with_logits_const(y, 1.0f, 1.0f, &loss));
    snprintf(key, sizeof key, "%s.loss", name);
    compare(key, loss->data, 1, 1e-4);
    TU_OK(duet_backward(loss));
    compare_grads(net, name, 1e-4);

    duet_named_tensors bs;
    TU_OK(duet_module_named_buffers(net, &bs));
    assert_int_equal(bs.count, 27);
    for (size_t i = 0; i < bs.count; i++) {
        snprintf(key, sizeof key, "%s.after.%s", name, bs.items[i].name);
        compare(key, bs.items[i].tensor->data, bs.items[i].tensor->numel, 1e-4);
    }
    duet_named_tensors_clear(&bs);

    /* A wrong input size is an error that names both sizes. */
    duet_tensor *bad = tu_zeros(4, (int64_t[]){1, 3, size + 32, size + 32}), *z = NULL;
    assert_int_equal(duet_module_forward(net, bad, &z), DUET_ESHAPE);
    assert_null(z);
    assert_non_null(strstr(duet_last_error(), "ModifiedVGG"));
    duet_tensor_release(bad);
    duet_tensor_release(y);
    duet_tensor_release(loss);
    duet_tensor_release(x);
    duet_module_destroy(net);
}

static void test_modified_vgg_32(void **state) {
    (void)state;
    vgg_case("vgg_32", 32);
}

static void test_modified_vgg_64(void **state) {
    (void)state;
    vgg_case("vgg_64", 64);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_msrresnet_x4),
        cmocka_unit_test(test_msrresnet_x3),
        cmocka_unit_test(test_modified_vgg_32),
        cmocka_unit_test(test_modified_vgg_64),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
