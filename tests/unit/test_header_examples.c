/* The usage examples at the top of base.h, tensor.h, autograd.h and ops.h,
 * compiled and run, so that they cannot go stale. Keep each function a copy
 * of its header's example (plus the checks). */
#include "testutil.h"

#include <string.h>

static int base_example(void) {
    /* duet/base.h */
    duet_tensor *t = NULL;
    int rc = duet_tensor_create(&t, 1, (int64_t[]){0});
    if (rc != DUET_OK)
        fprintf(stderr, "expected: %s: %s\n", duet_err_name(rc), duet_last_error());

    duet_rng rng = duet_rng_make(42, 0);   // seed 42, stream 0
    float u = duet_rng_uniform(&rng);      // [0, 1)
    duet_rng saved = rng;                  // the state is a plain value
    assert_true(u >= 0.0f && u < 1.0f);
    assert_true(duet_rng_u64(&saved) == duet_rng_u64(&rng));
    return rc;
}

static void test_base_example(void **state) {
    (void)state;
    assert_int_equal(base_example(), DUET_EINVAL);
}

static void test_tensor_example(void **state) {
    (void)state;
    /* duet/tensor.h */
    duet_tensor *x = NULL;
    if (duet_tensor_create(&x, 4, (int64_t[]){2, 3, 8, 8}) != DUET_OK) fail();
    x->data[0] = 1.0f;               // contiguous row-major floats
    assert_int_equal(x->numel, 384);
    duet_tensor_release(x);          // frees when the last reference goes
}

static int autograd_example(duet_tensor *x, duet_tensor *w, duet_tensor *b,
                            duet_tensor *target) {
    /* duet/autograd.h */
    duet_tensor *y = NULL, *loss = NULL;
    DUET_TRY(duet_linear(x, w, b, &y));        // w->requires_grad = true
    DUET_TRY(duet_mse_loss(y, target, 1.0f, &loss));
    DUET_TRY(duet_backward(loss));             // w->grad now holds dloss/dw
    duet_tensor_release(y); duet_tensor_release(loss);

    bool prev = duet_set_grad_enabled(false);  // a no-grad scope
    DUET_TRY(duet_linear(x, w, b, &y));
    assert_false(y->requires_grad);
    duet_tensor_release(y);
    duet_set_grad_enabled(prev);
    return DUET_OK;
}

static void test_autograd_example(void **state) {
    (void)state;
    duet_rng rng = duet_rng_make(5, 0);
    duet_tensor *x = tu_randn(&rng, 2, (int64_t[]){4, 3}, 1.0f);
    duet_tensor *w = tu_randn(&rng, 2, (int64_t[]){2, 3}, 1.0f);
    duet_tensor *b = tu_zeros(1, (int64_t[]){2});
    duet_tensor *target = tu_zeros(2, (int64_t[]){4, 2});
    w->requires_grad = true;
    TU_OK(autograd_example(x, w, b, target));
    assert_non_null(w->grad);
    assert_null(b->grad);
    /* d/dw mean((xw^T)^2) = 2/8 * (xw^T)^T x */
    float want[6] = {0};
    for (int n = 0; n < 4; n++)
        for (int o = 0; o < 2; o++) {
            float y = 0;
            for (int i = 0; i < 3; i++) y += x->data[n * 3 + i] * w->data[o * 3 + i];
            for (int i = 0; i < 3; i++) want[o * 3 + i] += 0.25f * y * x->data[n * 3 + i];
        }
    tu_assert_close(w->grad, want, 6, 1e-5, 1e-6, "dloss/dw");
    duet_tensor *all[] = {x, w, b, target};
    for (int i = 0; i < 4; i++) duet_tensor_release(all[i]);
}

static int ops_example(duet_tensor *x, duet_tensor *w, duet_tensor *b, duet_tensor **out) {
    /* duet/ops.h */
    duet_tensor *h = NULL, *a = NULL;
    DUET_TRY(duet_conv2d(x, w, b, 1, 1, &h));     // x (N,C,H,W), w (O,C,3,3)
    DUET_TRY(duet_leaky_relu(h, 0.1f, &a));
    duet_tensor_release(h);
    *out = a;
    return DUET_OK;
}

static void test_ops_example(void **state) {
    (void)state;
    duet_rng rng = duet_rng_make(6, 0);
    duet_tensor *x = tu_randn(&rng, 4, (int64_t[]){2, 3, 5, 5}, 1.0f);
    duet_tensor *w = tu_randn(&rng, 4, (int64_t[]){4, 3, 3, 3}, 1.0f);
    duet_tensor *b = tu_randn(&rng, 1, (int64_t[]){4}, 1.0f);
    duet_tensor *a = NULL;
    TU_OK(ops_example(x, w, b, &a));
    assert_int_equal(a->shape[1], 4);
    assert_int_equal(a->shape[2], 5);
    /* One output element by hand: centre pixel of sample 1, channel 2. */
    double acc = b->data[2];
    for (int c = 0; c < 3; c++)
        for (int i = 0; i < 3; i++)
            for (int j = 0; j < 3; j++)
                acc += (double)w->data[((2 * 3 + c) * 3 + i) * 3 + j] *
                       x->data[((1 * 3 + c) * 5 + 1 + i) * 5 + 1 + j];
    float want = (float)(acc > 0 ? acc : 0.1 * acc);
    float got = a->data[((1 * 4 + 2) * 5 + 2) * 5 + 2];
    tu_assert_close(&got, &want, 1, 1e-5, 1e-5, "conv + leaky_relu");
    duet_tensor *all[] = {x, w, b, a};
    for (int i = 0; i < 4; i++) duet_tensor_release(all[i]);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_base_example),
        cmocka_unit_test(test_tensor_example),
        cmocka_unit_test(test_autograd_example),
        cmocka_unit_test(test_ops_example),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
