/* Spectral normalisation against PyTorch (tests/ref/ref_spectral_norm.py ->
 * spectral_norm.safetensors): a Conv2d(3, 4, 5, stride 2, padding 2) under
 * torch.nn.utils.spectral_norm, two training forwards (each one power
 * iteration: weight_u and weight_v must follow PyTorch's) and one eval
 * forward (no update), each with the output and the gradients of
 * sum(out * r) with respect to weight_orig, bias and x, to 1e-4 relative.
 * Also a finite-difference check of duet_spectral_norm's gradient, through
 * sigma, on its own. */
#include "testutil.h"

#include <stdio.h>
#include <string.h>

static duet_st *ref;

static int setup(void **state) {
    (void)state;
    ref = tu_ref_load("spectral_norm.safetensors");
    return 0;
}

static int teardown(void **state) {
    (void)state;
    duet_st_destroy(ref);
    return 0;
}

static void set_from_ref(duet_tensor *t, const char *key) {
    duet_tensor *r = tu_ref_tensor(ref, key);
    assert_int_equal(r->numel, t->numel);
    memcpy(t->data, r->data, (size_t)t->numel * sizeof(float));
    duet_tensor_release(r);
}

static void expect_ref(const float *got, int64_t n, const char *key) {
    tu_assert_ref(ref, key, got, n, 1e-4, 1e-6);
}

static void test_sn_conv_against_pytorch(void **state) {
    (void)state;
    duet_rng rng = duet_rng_make(1, 0);
    duet_module *conv = NULL;
    assert_int_equal(duet_sn_conv2d_module_create(3, 4, 5, 2, 2, true, 1e-12f, &rng, &conv),
                     DUET_OK);
    assert_string_equal(duet_module_type_name(conv), "Conv2d");
    duet_tensor *w = duet_module_param(conv, "weight_orig"), *b = duet_module_param(conv, "bias");
    duet_tensor *u = duet_module_buffer(conv, "weight_u"), *v = duet_module_buffer(conv, "weight_v");
    assert_non_null(w);
    assert_non_null(b);
    assert_non_null(u);
    assert_non_null(v);
    assert_null(duet_module_param(conv, "weight"));
    assert_int_equal(v->numel, 3 * 5 * 5);
    set_from_ref(w, "init.weight_orig");
    set_from_ref(b, "init.bias");
    set_from_ref(u, "init.weight_u");
    set_from_ref(v, "init.weight_v");
    for (int step = 1; step <= 3; step++) {
        duet_module_train(conv, step < 3);
        duet_tensor *x = tu_ref_tensor(ref, "x");
        x->requires_grad = true;
        duet_tensor *y = NULL;
        assert_int_equal(duet_module_forward(conv, x, &y), DUET_OK);
        char key[64];
        snprintf(key, sizeof key, "step%d.out", step);
        expect_ref(y->data, y->numel, key);
        snprintf(key, sizeof key, "step%d.weight_u", step);
        expect_ref(u->data, u->numel, key);
        snprintf(key, sizeof key, "step%d.weight_v", step);
        expect_ref(v->data, v->numel, key);
        snprintf(key, sizeof key, "r%d", step);
        duet_tensor *r = tu_ref_tensor(ref, key);
        duet_module_zero_grad(conv);
        tu_backprop_with(y, r->data);
        snprintf(key, sizeof key, "step%d.grad.weight_orig", step);
        expect_ref(w->grad, w->numel, key);
        snprintf(key, sizeof key, "step%d.grad.bias", step);
        expect_ref(b->grad, b->numel, key);
        snprintf(key, sizeof key, "step%d.grad.x", step);
        expect_ref(x->grad, x->numel, key);
        duet_tensor_release(r);
        duet_tensor_release(y);
        duet_tensor_release(x);
    }
    duet_module_destroy(conv);
}

/* The gradient through sigma, by finite differences (u and v fixed). */
typedef struct sn_args {
    duet_tensor *u, *v;
} sn_args;

static int op_sn(void *ctx, duet_tensor *const *in, duet_tensor **out) {
    const sn_args *a = ctx;
    return duet_spectral_norm(in[0], a->u, a->v, false, 1, 1e-12f, out);
}

static void test_sn_gradcheck(void **state) {
    (void)state;
    duet_rng rng = duet_rng_make(5, 0);
    duet_tensor *w = tu_randn(&rng, 2, (int64_t[]){3, 4}, 1.0f);
    sn_args a = {tu_randn(&rng, 1, (int64_t[]){3}, 1.0f), tu_randn(&rng, 1, (int64_t[]){4}, 1.0f)};
    w->requires_grad = true;
    tu_gradcheck(op_sn, &a, 1, &w, 1e-2, 1e-2, 1e-3, 12);
    duet_tensor_release(w);
    duet_tensor_release(a.u);
    duet_tensor_release(a.v);
}

static void test_sn_errors(void **state) {
    (void)state;
    duet_tensor *w = tu_zeros(2, (int64_t[]){3, 4}), *u = tu_zeros(1, (int64_t[]){3});
    duet_tensor *v = tu_zeros(1, (int64_t[]){5}), *y = NULL;
    tu_expect_error(duet_spectral_norm(w, u, v, true, 1, 1e-12f, &y), DUET_ESHAPE,
                    "spectral_norm", "v of 4 elements", NULL);
    duet_tensor_release(v);
    v = tu_zeros(1, (int64_t[]){4});
    tu_expect_error(duet_spectral_norm(w, u, v, false, 1, 1e-12f, &y), DUET_ENUMERIC,
                    "sigma", NULL);
    assert_null(y);
    duet_tensor_release(w);
    duet_tensor_release(u);
    duet_tensor_release(v);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sn_conv_against_pytorch),
        cmocka_unit_test(test_sn_gradcheck),
        cmocka_unit_test(test_sn_errors),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
