/* Runs the usage example of duet/batch.h (extracted by the build, see
 * cmake/header-examples.awk): a batch of one tensor and one metadata
 * column, a required tensor borrowed from it. */
#include "testutil.h"

_Static_assert(DUET_HEADER_EXAMPLES == 1, "batch.h's usage example: run it here");

static duet_tensor *borrowed;
static int64_t samples;

static int example(duet_tensor *lq, int64_t n, const char *const *names) {
#define duet_batch_clear(b) (borrowed = x, samples = (b)->nsamples, duet_batch_clear(b))
#define DUET_EXAMPLE 1
#include "batch_h_examples.inc"
#undef DUET_EXAMPLE
#undef duet_batch_clear
    return DUET_OK;
}

static void test_batch(void **state) {
    (void)state;
    duet_tensor *lq = NULL;
    TU_OK(duet_tensor_create4(2, 3, 4, 4, &lq));
    const char *names[] = {"a.png", "b.png"};
    TU_OK(example(lq, 2, names));
    assert_ptr_equal(borrowed, lq); /* the tensor the batch was given */
    assert_int_equal(samples, 2);
    assert_int_equal(duet_tensor_refcount(lq), 1); /* the batch dropped its reference */
    duet_tensor_release(lq);
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_batch)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
