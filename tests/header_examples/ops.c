/* Runs the usage example of duet/ops.h (extracted by the build, see
 * cmake/header-examples.awk) and checks one output element by hand. */
#include "testutil.h"

_Static_assert(DUET_HEADER_EXAMPLES == 1, "ops.h's usage examples: run each one here");

static int example(duet_tensor *x, duet_tensor *w, duet_tensor *b, duet_tensor **out) {
#define DUET_EXAMPLE 1
#include "ops_h_examples.inc"
#undef DUET_EXAMPLE
    *out = a;
    return DUET_OK;
}

static void test_example(void **state) {
    (void)state;
    duet_rng rng = duet_rng_make(6, 0);
    duet_tensor *x = tu_randn(&rng, 4, (int64_t[]){2, 3, 5, 5}, 1.0f);
    duet_tensor *w = tu_randn(&rng, 4, (int64_t[]){4, 3, 3, 3}, 1.0f);
    duet_tensor *b = tu_randn(&rng, 1, (int64_t[]){4}, 1.0f);
    duet_tensor *a = NULL;
    TU_OK(example(x, w, b, &a));
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
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_example)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
