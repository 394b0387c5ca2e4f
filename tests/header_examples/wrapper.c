/* Runs the usage example of duet/wrapper.h (extracted by the build, see
 * cmake/header-examples.awk), alone and under mpiexec: a training step of a
 * small SRGAN through the wrapper, then a model, wrapper and optimizers
 * built from a config. */
#include "testutil.h"

_Static_assert(DUET_HEADER_EXAMPLES == 1, "wrapper.h's usage examples: run each one here");

static int example(duet_model *model, duet_batch batch, duet_optimizer_set *optimizers,
                   duet_config *cfg, duet_rng rng, double *loss_pix) {
#define DUET_EXAMPLE 1
#include "wrapper_h_examples.inc"
#undef DUET_EXAMPLE
    duet_log_vars_get(&log, "loss_pix", loss_pix); /* the first step's */
    DUET_TRY(duet_wrapper_train_step(w, &batch, opts, &log));
    duet_optimizer_set_destroy(opts);
    duet_wrapper_destroy(w);
    duet_comm_destroy(comm);
    return DUET_OK;
}

static void test_example(void **state) {
    (void)state;
    duet_model *model = tu_tiny_srgan(7);
    duet_optimizer_set *s = tu_adam_pair(model, 1e-3f);
    duet_batch b;
    tu_sr_batch(&b, 8, 2);
    duet_config *cfg = NULL;
    TU_OK(duet_config_load_string(
        "model = { type = \"BasicRestorer\";\n"
        "  generator = { type = \"MSRResNet\"; mid_channels = 4; num_blocks = 1; };\n"
        "  pixel_loss = { type = \"L1Loss\"; }; };\n"
        "wrapper = { type = \"DistributedDataParallelWrapper\"; };\n"
        "optimizers = { generator = { type = \"Adam\"; lr = 1e-4; }; };\n",
        "<usage>", &cfg));
    double l = -1;
    TU_OK(example(model, b, s, cfg, duet_rng_make(9, 0), &l));
    assert_true(l > 0);
    TU_OK(duet_config_check_unused(cfg));
    duet_config_destroy(cfg);
    duet_optimizer_set_destroy(s);
    duet_batch_clear(&b);
}

int main(void) {
    duet_log_set_level(DUET_LOG_ERROR); /* the tiny SRGAN's random VGG warns */
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_example)};
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    duet_comm_finalize();
    return rc;
}
