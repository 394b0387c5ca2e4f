/* Runs the usage examples of duet/tensor.h (extracted by the build, see
 * cmake/header-examples.awk). */
#include "testutil.h"

_Static_assert(DUET_HEADER_EXAMPLES == 2, "tensor.h's usage examples: run each one here");

/* What the example's tensors held when it released them: the count, and
 * each one's last value and device, read through a copy (example 2's d
 * is on sim:0). */
static int released;
static int64_t seen_numel;
static float seen_first, seen_last[3];
static duet_device seen_device[3];
static void spy_release(duet_tensor *t) {
    if (t != NULL) {
        float v[DUET_MAX_DIMS * 256];
        assert_true(t->numel <= (int64_t)(sizeof v / sizeof v[0]));
        TU_OK(duet_tensor_copy_to_host(t, v));
        seen_numel = t->numel;
        seen_first = v[0];
        if (released < 3) {
            seen_last[released] = v[t->numel - 1];
            seen_device[released] = duet_tensor_device(t);
        }
        released++;
    }
    duet_tensor_release(t);
}

static int example1(void) {
#define duet_tensor_release spy_release
#define DUET_EXAMPLE 1
#include "tensor_h_examples.inc"
#undef DUET_EXAMPLE
#undef duet_tensor_release
    return DUET_OK;
}

static int example2(void) {
#define duet_tensor_release spy_release
#define DUET_EXAMPLE 2
#include "tensor_h_examples.inc"
#undef DUET_EXAMPLE
#undef duet_tensor_release
    return DUET_OK;
}

static void test_example1(void **state) {
    (void)state;
    released = 0;
    TU_OK(example1());
    assert_int_equal(released, 1);
    assert_int_equal(seen_numel, 2 * 3 * 8 * 8);
    assert_true(seen_first == 1.0f);
}

static void test_example2(void **state) {
    (void)state;
    released = 0;
    TU_OK(example2());
    /* sim:0 exists in every build: back (cpu), d (sim:0), h (cpu), each
     * holding 1, 2, 3 (d read through a copy). */
    assert_int_equal(released, 3);
    for (int i = 0; i < 3; i++) assert_true(seen_last[i] == 3.0f);
    assert_int_equal(seen_device[0].type, DUET_DEVICE_CPU);
    assert_int_equal(seen_device[1].type, DUET_DEVICE_SIM);
    assert_int_equal(seen_device[2].type, DUET_DEVICE_CPU);
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_example1),
                                       cmocka_unit_test(test_example2)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
