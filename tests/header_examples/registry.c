/* Runs the usage example of duet/registry.h (extracted by the build, see
 * cmake/header-examples.awk): a network built from a config by its type
 * name, every key read. */
#include "testutil.h"

_Static_assert(DUET_HEADER_EXAMPLES == 1, "registry.h's usage example: run it here");

static int example(int64_t *nparams_out) {
#define DUET_EXAMPLE 1
#include "registry_h_examples.inc"
#undef DUET_EXAMPLE
    *nparams_out = nparams;
    return DUET_OK;
}

static void test_registry(void **state) {
    (void)state;
    int64_t nparams = 0;
    TU_OK(example(&nparams));
    /* MSRResNet x4, 3 -> 8 -> 3 channels, one residual block (two 3x3
     * convs), two upsampling convs to 8*4, conv_hr and conv_last: weights
     * and biases. */
    int64_t conv = 0;
    conv += 3 * 8 * 9 + 8;           /* conv_first */
    conv += 2 * (8 * 8 * 9 + 8);     /* the block */
    conv += 2 * (8 * 32 * 9 + 32);   /* upconv1, upconv2 */
    conv += 8 * 8 * 9 + 8;           /* conv_hr */
    conv += 8 * 3 * 9 + 3;           /* conv_last */
    assert_int_equal(nparams, conv);
}

int main(void) {
    duet_log_set_level(DUET_LOG_ERROR);
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_registry)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
