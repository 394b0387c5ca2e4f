/* UnetGenerator, PatchDiscriminator and ResnetGenerator against PyTorch
 * (tests/ref/ref_networks_gan.py -> networks_gan.safetensors, the torch
 * modules written from MMEditing's code in tests/ref/mmedit_gan_torch.py).
 *
 * The PyTorch state dict is loaded strictly by name (every name and shape
 * must be MMEditing's), the parameter counts must agree, and in training
 * mode the output, the input gradient, every parameter gradient and the
 * BatchNorm buffers after the forward are compared with the float64
 * reference at 1e-4 relative to each tensor's scale: |got - want| <= 1e-4
 * * (|want| + max|want|) (see test_ref_networks.c for why elementwise
 * relative error cannot work near zero). Dropout layers draw from duet's
 * RNG, which the reference replays, so the dropout networks compare in
 * training mode too. */
#include "testutil.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#define RTOL 1e-4
#define DROPOUT_SEED 1234

static duet_st *ref;

static int setup(void **state) {
    (void)state;
    ref = tu_ref_load("networks_gan.safetensors");
    return 0;
}

static int teardown(void **state) {
    (void)state;
    duet_st_destroy(ref);
    return 0;
}

static double max_abs(const float *v, int64_t n) {
    double mx = 0.0;
    for (int64_t i = 0; i < n; i++) mx = fmax(mx, fabs(v[i]));
    return mx;
}

/* Compares with tolerance RTOL * (|want| + scale), scale = max|want|, or
 * `floor` where the reference is zero up to float64 rounding (below 1e-6 of
 * floor): the bias of a conv followed by InstanceNorm has a gradient of
 * exactly zero (the norm removes every per-channel constant), which float32
 * arithmetic reproduces only up to about 1e-7 of the layer's other
 * gradients. The caller passes the layer weight gradient's scale there. */
static void compare_floor(const char *key, const float *got, int64_t n, double floor) {
    duet_tensor *want = tu_ref_tensor(ref, key);
    if (want->numel != n)
        fail_msg("%s: %lld values, PyTorch has %lld", key, (long long)n, (long long)want->numel);
    double mx = max_abs(want->data, n);
    if (mx < 1e-6 * floor) mx = floor;
    if (getenv("DUET_TEST_VERBOSE") != NULL) {
        double abs_worst = 0.0;
        for (int64_t i = 0; i < n; i++) abs_worst = fmax(abs_worst, fabs(got[i] - want->data[i]));
        printf("%-70s scale %.3g  max error / scale %.3g\n", key, mx,
               mx > 0 ? abs_worst / mx : abs_worst);
    }
    tu_assert_close(got, want->data, n, RTOL, RTOL * mx, key);
    duet_tensor_release(want);
}

static void compare(const char *key, const float *got, int64_t n) {
    compare_floor(key, got, n, 0.0);
}

/* max|gradient| PyTorch gives the weight next to parameter `name` (its
 * module's "weight"), or 0 when name is not a bias or has no such weight. */
static double weight_grad_scale(const char *case_name, const char *name) {
    const size_t len = strlen(name);
    if (len < 5 || strcmp(name + len - 5, ".bias") != 0) return 0.0;
    char key[256];
    snprintf(key, sizeof key, "%s.grad.%.*sweight", case_name, (int)(len - 4), name);
    if (!duet_st_has(ref, key)) return 0.0;
    duet_tensor *w = tu_ref_tensor(ref, key);
    const double mx = max_abs(w->data, w->numel);
    duet_tensor_release(w);
    return mx;
}

/* Number of file entries starting with prefix. */
static size_t count_prefixed(const char *prefix) {
    size_t n = 0, plen = strlen(prefix);
    for (size_t i = 0; i < duet_st_count(ref); i++)
        n += strncmp(duet_st_name(ref, i), prefix, plen) == 0;
    return n;
}

/* Loads NAME.sd.*, runs the training-mode forward on NAME.x, backpropagates
 * NAME.r and compares everything the reference holds for NAME. */
static void run_case(const char *name, duet_module *net) {
    char key[256];
    snprintf(key, sizeof key, "%s.sd.", name);
    size_t nmiss = 1, nunexp = 1;
    TU_OK(duet_module_load_state(net, ref, key, true, &nmiss, &nunexp));
    assert_int_equal(nmiss, 0);
    assert_int_equal(nunexp, 0);
    snprintf(key, sizeof key, "%s.nparams", name);
    duet_tensor *np = tu_ref_tensor(ref, key);
    assert_int_equal(duet_module_num_parameters(net, false), (int64_t)np->data[0]);
    duet_tensor_release(np);

    duet_module_train(net, true);
    snprintf(key, sizeof key, "%s.x", name);
    duet_tensor *x = tu_ref_tensor(ref, key), *y = NULL;
    x->requires_grad = true;
    TU_OK(duet_module_forward(net, x, &y));
    snprintf(key, sizeof key, "%s.out", name);
    compare(key, y->data, y->numel);
    snprintf(key, sizeof key, "%s.r", name);
    duet_tensor *r = tu_ref_tensor(ref, key);
    assert_int_equal(r->numel, y->numel);
    tu_backprop_with(y, r->data);
    snprintf(key, sizeof key, "%s.grad.x", name);
    compare(key, x->grad, x->numel);

    duet_named_tensors ps;
    TU_OK(duet_module_named_parameters(net, false, &ps));
    snprintf(key, sizeof key, "%s.grad.", name);
    assert_int_equal(count_prefixed(key), ps.count + 1); /* + grad.x */
    for (size_t i = 0; i < ps.count; i++) {
        snprintf(key, sizeof key, "%s.grad.%s", name, ps.items[i].name);
        if (ps.items[i].tensor->grad == NULL) fail_msg("%s: no gradient", key);
        compare_floor(key, ps.items[i].tensor->grad, ps.items[i].tensor->numel,
                      weight_grad_scale(name, ps.items[i].name));
    }
    duet_named_tensors_clear(&ps);
    duet_named_tensors bs;
    TU_OK(duet_module_named_buffers(net, &bs));
    snprintf(key, sizeof key, "%s.after.", name);
    assert_int_equal(count_prefixed(key), bs.count);
    for (size_t i = 0; i < bs.count; i++) {
        snprintf(key, sizeof key, "%s.after.%s", name, bs.items[i].name);
        compare(key, bs.items[i].tensor->data, bs.items[i].tensor->numel);
    }
    duet_named_tensors_clear(&bs);
    duet_tensor_release(r);
    duet_tensor_release(y);
    duet_tensor_release(x);
}

/* Constructor arguments as CASES in ref_networks_gan.py; the init rng only
 * fills weights that the loaded state dict replaces. */

static void test_unet_generator(void **state) {
    (void)state;
    duet_rng init = duet_rng_make(1, 0), drop = duet_rng_make(DROPOUT_SEED, 0);
    duet_unet_generator_opts o = duet_unet_generator_opts_default();
    o.num_down = 6;
    o.base_channels = 4;
    o.use_dropout = true;
    duet_module *g = NULL;
    TU_OK(duet_unet_generator_create(&o, &init, &drop, &g));
    run_case("unet_bn_dropout", g);
    duet_module_destroy(g);

    o = duet_unet_generator_opts_default();
    o.in_channels = 2;
    o.num_down = 5;
    o.base_channels = 4;
    o.norm = DUET_GEN_NORM_IN;
    TU_OK(duet_unet_generator_create(&o, &init, NULL, &g));
    run_case("unet_in", g);
    duet_module_destroy(g);
}

static void test_patch_discriminator(void **state) {
    (void)state;
    duet_rng init = duet_rng_make(2, 0);
    duet_patch_discriminator_opts o = duet_patch_discriminator_opts_default();
    o.base_channels = 8;
    duet_module *d = NULL;
    TU_OK(duet_patch_discriminator_create(&o, &init, &d));
    run_case("patch_bn", d);
    duet_module_destroy(d);

    o = (duet_patch_discriminator_opts){.in_channels = 3, .base_channels = 4, .num_conv = 2,
                                        .norm = DUET_GEN_NORM_IN, .init_gain = 0.02f};
    TU_OK(duet_patch_discriminator_create(&o, &init, &d));
    run_case("patch_in", d);
    duet_module_destroy(d);
}

static void test_resnet_generator(void **state) {
    (void)state;
    duet_rng init = duet_rng_make(3, 0), drop = duet_rng_make(DROPOUT_SEED, 0);
    duet_resnet_generator_opts o = duet_resnet_generator_opts_default();
    o.base_channels = 4;
    o.num_blocks = 2;
    o.use_dropout = true;
    duet_module *g = NULL;
    TU_OK(duet_resnet_generator_create(&o, &init, &drop, &g));
    run_case("resnet_in_dropout", g);
    duet_module_destroy(g);

    o = duet_resnet_generator_opts_default();
    o.out_channels = 2;
    o.base_channels = 4;
    o.num_blocks = 1;
    o.norm = DUET_GEN_NORM_BN;
    TU_OK(duet_resnet_generator_create(&o, &init, NULL, &g));
    run_case("resnet_bn", g);
    duet_module_destroy(g);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_unet_generator),
        cmocka_unit_test(test_patch_discriminator),
        cmocka_unit_test(test_resnet_generator),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
