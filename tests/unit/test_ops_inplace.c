/* The in-place relu, leaky_relu and add of ops.h (used by
 * MSRResNet and ModifiedVGG): the same values and gradients, bit for bit,
 * as the copying ops, and a fallback to copying whenever the input may
 * still be read (a leaf, a shared tensor, an op that reads its output). */
#include <math.h>
#include <string.h>

#include "testutil.h"

enum which { RELU, LRELU, LRELU_NEG, ADD };

/* The output of conv2d(x, w, b) followed by the op, either in place or
 * copying, then loss = sum(out * r); the gradients land in x, w, b (and in
 * `other`, the add's second operand). */
static void run(enum which op, bool inplace, duet_tensor *x, duet_tensor *w, duet_tensor *b,
                duet_tensor *other, duet_tensor *r, float *out_values) {
    duet_tensor *h = NULL, *a = NULL, *m = NULL, *loss = NULL;
    TU_OK(duet_conv2d(x, w, b, 1, 1, &h));
    switch (op) {
    case RELU: TU_OK(inplace ? duet_relu_inplace(h, &a) : duet_relu(h, &a)); break;
    case LRELU:
        TU_OK(inplace ? duet_leaky_relu_inplace(h, 0.2f, &a) : duet_leaky_relu(h, 0.2f, &a));
        break;
    case LRELU_NEG:
        TU_OK(inplace ? duet_leaky_relu_inplace(h, -0.5f, &a) : duet_leaky_relu(h, -0.5f, &a));
        break;
    case ADD: TU_OK(inplace ? duet_add_inplace(h, other, &a) : duet_add(h, other, &a)); break;
    }
    duet_tensor_release(h);
    memcpy(out_values, a->data, (size_t)a->numel * sizeof(float));
    TU_OK(duet_mul(a, r, &m));
    TU_OK(duet_sum(m, &loss));
    TU_OK(duet_backward(loss));
    duet_tensor_release(loss);
    duet_tensor_release(m);
    duet_tensor_release(a);
}

static void assert_bits_equal(const float *a, const float *b, int64_t n, const char *what) {
    if (memcmp(a, b, (size_t)n * sizeof(float)) != 0) {
        for (int64_t i = 0; i < n; i++)
            if (memcmp(&a[i], &b[i], sizeof(float)) != 0)
                fail_msg("%s: element %lld differs: %.9g vs %.9g", what, (long long)i,
                         (double)a[i], (double)b[i]);
    }
}

static void check_same_as_copying(enum which op) {
    duet_rng rng = duet_rng_make(7, (uint64_t)op);
    duet_tensor *x = tu_randn(&rng, 4, (int64_t[]){2, 3, 5, 6}, 1.0f);
    duet_tensor *w = tu_randn(&rng, 4, (int64_t[]){4, 3, 3, 3}, 0.5f);
    duet_tensor *b = tu_randn(&rng, 1, (int64_t[]){4}, 0.5f);
    duet_tensor *other = tu_randn(&rng, 4, (int64_t[]){2, 4, 5, 6}, 1.0f);
    duet_tensor *r = tu_randn(&rng, 4, (int64_t[]){2, 4, 5, 6}, 1.0f);
    duet_tensor *leaves[4] = {x, w, b, other};
    for (int i = 0; i < 4; i++) leaves[i]->requires_grad = true;
    const int64_t n = r->numel;
    float *want = malloc((size_t)n * sizeof(float)), *got = malloc((size_t)n * sizeof(float));
    float *wgrad[4];
    assert_non_null(want);
    assert_non_null(got);
    run(op, false, x, w, b, other, r, want);
    for (int i = 0; i < 4; i++) {
        wgrad[i] = malloc((size_t)leaves[i]->numel * sizeof(float));
        assert_non_null(wgrad[i]);
        if (leaves[i]->grad != NULL)
            memcpy(wgrad[i], leaves[i]->grad, (size_t)leaves[i]->numel * sizeof(float));
        else
            memset(wgrad[i], 0, (size_t)leaves[i]->numel * sizeof(float));
        duet_tensor_zero_grad(leaves[i]);
    }
    run(op, true, x, w, b, other, r, got);
    assert_bits_equal(got, want, n, "values");
    const char *names[4] = {"dx", "dw", "db", "d other"};
    for (int i = 0; i < 4; i++) {
        if (leaves[i]->grad != NULL)
            assert_bits_equal(leaves[i]->grad, wgrad[i], leaves[i]->numel, names[i]);
        free(wgrad[i]);
    }
    /* Something happened: the loss reached every input it should. */
    bool nonzero = false;
    for (int64_t i = 0; i < w->numel; i++) nonzero |= w->grad[i] != 0.0f;
    assert_true(nonzero);
    free(want);
    free(got);
    for (int i = 0; i < 4; i++) duet_tensor_release(leaves[i]);
    duet_tensor_release(r);
}

static void test_relu_same_as_copying(void **state) {
    (void)state;
    check_same_as_copying(RELU);
}

static void test_leaky_relu_same_as_copying(void **state) {
    (void)state;
    check_same_as_copying(LRELU);
    check_same_as_copying(LRELU_NEG); /* negative slope: copies */
}

static void test_add_same_as_copying(void **state) {
    (void)state;
    check_same_as_copying(ADD);
}

/* In grad mode, a fresh conv output is overwritten (the result is a view
 * of it); anything that may still be read is left alone. */
static void test_overwrites_only_dead_outputs(void **state) {
    (void)state;
    duet_rng rng = duet_rng_make(3, 0);
    duet_tensor *x = tu_randn(&rng, 4, (int64_t[]){1, 2, 4, 4}, 1.0f);
    duet_tensor *w = tu_randn(&rng, 4, (int64_t[]){2, 2, 3, 3}, 1.0f);
    w->requires_grad = true;
    duet_tensor *h = NULL, *y = NULL, *s = NULL, *extra = NULL;

    /* Fresh conv output: overwritten in place. */
    TU_OK(duet_conv2d(x, w, NULL, 1, 1, &h));
    assert_true(duet_can_overwrite(h));
    TU_OK(duet_relu_inplace(h, &y));
    assert_ptr_equal(y->data, h->data);
    for (int64_t i = 0; i < h->numel; i++) assert_true(h->data[i] >= 0.0f);
    duet_tensor_release(y);
    duet_tensor_release(h);

    /* Held by someone else as well: copied. */
    TU_OK(duet_conv2d(x, w, NULL, 1, 1, &h));
    extra = duet_tensor_retain(h);
    assert_false(duet_can_overwrite(h));
    TU_OK(duet_leaky_relu_inplace(h, 0.1f, &y));
    assert_ptr_not_equal(y->data, h->data);
    duet_tensor_release(extra);
    duet_tensor_release(y);
    duet_tensor_release(h);

    /* Made by an op whose backward reads its output (sigmoid): copied. */
    TU_OK(duet_conv2d(x, w, NULL, 1, 1, &h));
    TU_OK(duet_sigmoid(h, &s));
    assert_false(duet_can_overwrite(s));
    TU_OK(duet_relu_inplace(s, &y));
    assert_ptr_not_equal(y->data, s->data);
    duet_tensor_release(y);
    duet_tensor_release(s);
    duet_tensor_release(h);

    /* A leaf that requires grad (a parameter): never overwritten. */
    float w0 = w->data[0];
    assert_false(duet_can_overwrite(w));
    TU_OK(duet_add_inplace(w, w, &y));
    assert_ptr_not_equal(y->data, w->data);
    assert_true(w->data[0] == w0);
    duet_tensor_release(y);
    duet_tape_clear();

    /* Without grad mode the result is the input itself. */
    bool prev = duet_set_grad_enabled(false);
    TU_OK(duet_conv2d(x, w, NULL, 1, 1, &h));
    TU_OK(duet_leaky_relu_inplace(h, 0.2f, &y));
    assert_ptr_equal(y, h);
    duet_tensor_release(y);
    duet_tensor_release(h);
    duet_set_grad_enabled(prev);

    duet_tensor_release(x);
    duet_tensor_release(w);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_relu_same_as_copying),
        cmocka_unit_test(test_leaky_relu_same_as_copying),
        cmocka_unit_test(test_add_same_as_copying),
        cmocka_unit_test(test_overwrites_only_dead_outputs),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
