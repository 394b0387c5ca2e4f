/* Runs the usage example of duet/autograd.h (extracted by the build, see
 * cmake/header-examples.awk) on a small linear regression and checks the
 * gradient it leaves by hand. */
#include "testutil.h"

_Static_assert(DUET_HEADER_EXAMPLES == 2, "autograd.h's usage examples: run each one here");

/* Whether each tensor the example released had history. */
static int nreleased;
static bool released_requires_grad[4];
static void spy_release(duet_tensor *t) {
    if (nreleased < 4) released_requires_grad[nreleased++] = t->requires_grad;
    duet_tensor_release(t);
}

static int example(duet_tensor *x, duet_tensor *w, duet_tensor *b, duet_tensor *target) {
#define duet_tensor_release spy_release
#define DUET_EXAMPLE 1
#include "autograd_h_examples.inc"
#undef DUET_EXAMPLE
#undef duet_tensor_release
    return DUET_OK;
}

/* Example 2: duet_autograd_grad with create_graph, then a backward. */
static int example2(duet_tensor *x, duet_tensor *w, duet_tensor *b) {
#define DUET_EXAMPLE 2
#include "autograd_h_examples.inc"
#undef DUET_EXAMPLE
    return DUET_OK;
}

static void test_example2(void **state) {
    (void)state;
    duet_rng rng = duet_rng_make(6, 0);
    duet_tensor *x = tu_randn(&rng, 2, (int64_t[]){4, 3}, 1.0f);
    duet_tensor *w = tu_randn(&rng, 2, (int64_t[]){2, 3}, 1.0f);
    duet_tensor *b = tu_zeros(1, (int64_t[]){2});
    x->requires_grad = true;
    w->requires_grad = true;
    TU_OK(example2(x, w, b));
    assert_non_null(w->grad);
    assert_non_null(x->grad); /* elu's second derivative reaches x */
    assert_int_equal(duet_tape_size(), 0);
    duet_tensor *all[] = {x, w, b};
    for (int i = 0; i < 3; i++) duet_tensor_release(all[i]);
}

static void test_example(void **state) {
    (void)state;
    duet_rng rng = duet_rng_make(5, 0);
    duet_tensor *x = tu_randn(&rng, 2, (int64_t[]){4, 3}, 1.0f);
    duet_tensor *w = tu_randn(&rng, 2, (int64_t[]){2, 3}, 1.0f);
    duet_tensor *b = tu_zeros(1, (int64_t[]){2});
    duet_tensor *target = tu_zeros(2, (int64_t[]){4, 2});
    w->requires_grad = true;
    TU_OK(example(x, w, b, target));
    assert_int_equal(nreleased, 3);
    assert_false(released_requires_grad[2]); /* y of the no-grad scope: no history */
    assert_true(duet_set_grad_enabled(true)); /* the scope restored grad mode */
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

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_example),
                                       cmocka_unit_test(test_example2)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
