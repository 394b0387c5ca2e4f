/* Runs the usage example of duet/nn.h (extracted by the build, see
 * cmake/header-examples.awk): a small conv regression fitted with Adam. */
#include "testutil.h"

_Static_assert(DUET_HEADER_EXAMPLES == 1, "nn.h's usage examples: run each one here");

static int nlosses;
static float first_loss, last_loss;
static int spy_mse_loss(duet_tensor *a, duet_tensor *b, float w, duet_tensor **out) {
    int rc = duet_mse_loss(a, b, w, out);
    if (rc == DUET_OK) {
        if (nlosses++ == 0) first_loss = (*out)->data[0];
        last_loss = (*out)->data[0];
    }
    return rc;
}

/* The parameters the example optimised, by name. */
static void spy_named_tensors_free(duet_named_tensors *ps) {
    assert_int_equal(ps->count, 2);
    assert_string_equal(ps->items[0].name, "0.weight");
    assert_string_equal(ps->items[1].name, "0.bias");
    duet_named_tensors_clear(ps);
}

static int example(duet_tensor *x, duet_tensor *target, int64_t iters) {
#define duet_mse_loss spy_mse_loss
#define duet_named_tensors_clear spy_named_tensors_free
#define DUET_EXAMPLE 1
#include "nn_h_examples.inc"
#undef DUET_EXAMPLE
#undef duet_named_tensors_clear
#undef duet_mse_loss
    return DUET_OK;
}

static void test_example(void **state) {
    (void)state;
    duet_rng rng = duet_rng_make(90, 0);
    duet_tensor *x = tu_randn(&rng, 4, (int64_t[]){2, 3, 5, 5}, 1.0f);
    duet_tensor *target = tu_randn(&rng, 4, (int64_t[]){2, 64, 5, 5}, 0.1f);
    TU_OK(example(x, target, 20));
    assert_int_equal(nlosses, 20);
    assert_true(last_loss < 0.9f * first_loss);
    duet_tensor_release(x);
    duet_tensor_release(target);
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_example)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
