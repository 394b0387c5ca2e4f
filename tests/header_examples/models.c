/* Runs the usage examples of duet/models.h (extracted by the build, see
 * cmake/header-examples.awk): MSRResNet's forward, one SRGAN training
 * step through the model contract, and DeepFill's generator's forward
 * (example 2, in the header before SRGAN's). */
#include "testutil.h"

#include <math.h>

_Static_assert(DUET_HEADER_EXAMPLES == 3, "models.h's usage examples: run each one here");

static int msrresnet_example(duet_tensor *lq, duet_module **g_out, duet_tensor **sr_out) {
#define DUET_EXAMPLE 1
#include "models_h_examples.inc"
#undef DUET_EXAMPLE
    *g_out = g;
    *sr_out = sr;
    return DUET_OK;
}

static void test_msrresnet(void **state) {
    (void)state;
    duet_rng rng = duet_rng_make(91, 0);
    duet_tensor *lq = tu_rand(&rng, 4, (int64_t[]){1, 3, 4, 6}, 0.0f, 1.0f), *sr = NULL;
    duet_module *g = NULL;
    TU_OK(msrresnet_example(lq, &g, &sr));
    assert_int_equal(sr->shape[1], 3);
    assert_int_equal(sr->shape[2], 16);
    assert_int_equal(sr->shape[3], 24);
    duet_tensor_release(sr);
    duet_tensor_release(lq);
    duet_module_destroy(g);
    duet_tape_clear();
}

/* MMEditing's full-size SRGAN (VGG19 perceptual loss) takes long on a test
 * machine: the example runs on the small one of testutil. */
static int srgan_example(duet_rng rng, duet_tensor *lq, duet_tensor *gt, double *loss_pix) {
    duet_adam_opts adam_g = duet_adam_opts_default(), adam_d = duet_adam_opts_default();
#define duet_srgan_opts_default tu_tiny_srgan_opts
#define DUET_EXAMPLE 3
#include "models_h_examples.inc"
#undef DUET_EXAMPLE
#undef duet_srgan_opts_default
    *loss_pix = l;
    return DUET_OK;
}

static void test_srgan_train_step(void **state) {
    (void)state;
    duet_batch b;
    tu_sr_batch(&b, 19, 2);
    double l = -1;
    TU_OK(srgan_example(duet_rng_make(20, 0), duet_batch_tensor_get(&b, "lq"),
                        duet_batch_tensor_get(&b, "gt"), &l));
    assert_true(l > 0 && isfinite(l));
    duet_batch_clear(&b);
}

static int deepfill_example(duet_rng rng, duet_tensor *x, duet_module **g_out,
                            duet_tensor **outs) {
#define DUET_EXAMPLE 2
#include "models_h_examples.inc"
#undef DUET_EXAMPLE
    *g_out = g;
    outs[0] = stage1, outs[1] = stage2, outs[2] = offset;
    return DUET_OK;
}

/* MMEditing's full-size DeepFillv1 generator on a small input. */
static void test_deepfill(void **state) {
    (void)state;
    duet_rng rng = duet_rng_make(92, 0);
    duet_tensor *x = tu_rand(&rng, 4, (int64_t[]){1, 5, 24, 32}, 0.0f, 1.0f), *outs[3] = {0};
    duet_module *g = NULL;
    TU_OK(deepfill_example(rng, x, &g, outs));
    assert_int_equal(outs[0]->shape[1], 3);
    assert_int_equal(outs[1]->shape[2], 24);
    assert_int_equal(outs[1]->shape[3], 32);
    assert_int_equal(outs[2]->shape[1], 3 * 4); /* L = (24/8) * (32/8) patches */
    for (int i = 0; i < 3; i++) duet_tensor_release(outs[i]);
    duet_tensor_release(x);
    duet_module_destroy(g);
    duet_tape_clear();
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_msrresnet),
        cmocka_unit_test(test_srgan_train_step),
        cmocka_unit_test(test_deepfill),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
