/* Runs the usage example of duet/tensor.h (extracted by the build, see
 * cmake/header-examples.awk). */
#include "testutil.h"

_Static_assert(DUET_HEADER_EXAMPLES == 1, "tensor.h's usage examples: run each one here");

/* What the example's tensor held when it released it. */
static int64_t seen_numel;
static float seen_first;
static void spy_release(duet_tensor *t) {
    seen_numel = t->numel;
    seen_first = t->data[0];
    duet_tensor_release(t);
}

static int example(void) {
#define duet_tensor_release spy_release
#define DUET_EXAMPLE 1
#include "tensor_h_examples.inc"
#undef DUET_EXAMPLE
#undef duet_tensor_release
    return DUET_OK;
}

static void test_example(void **state) {
    (void)state;
    TU_OK(example());
    assert_int_equal(seen_numel, 2 * 3 * 8 * 8);
    assert_true(seen_first == 1.0f);
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_example)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
