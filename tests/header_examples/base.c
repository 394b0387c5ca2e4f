/* Runs the usage example of duet/base.h (extracted by the build, see
 * cmake/header-examples.awk). */
#include "testutil.h"

_Static_assert(DUET_HEADER_EXAMPLES == 1, "base.h's usage examples: run each one here");

static int example(float *u_out, uint64_t *saved_next, uint64_t *rng_next) {
#define DUET_EXAMPLE 1
#include "base_h_examples.inc"
#undef DUET_EXAMPLE
    *u_out = u;
    *saved_next = duet_rng_u64(&saved);
    *rng_next = duet_rng_u64(&rng);
    return rc;
}

static void test_example(void **state) {
    (void)state;
    float u = -1;
    uint64_t a = 0, b = 1;
    /* The example's create fails on purpose (an empty dimension). */
    assert_int_equal(example(&u, &a, &b), DUET_EINVAL);
    assert_true(u >= 0.0f && u < 1.0f);
    assert_true(a == b); /* a copied state continues the same stream */
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_example)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
