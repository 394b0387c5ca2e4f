/* Runs the usage example of duet/checkpoint.h (extracted by the build, see
 * cmake/header-examples.awk) in a temporary folder: saving then resuming a
 * checkpoint. */
#include "testutil.h"

#include <sys/stat.h>
#include <unistd.h>

_Static_assert(DUET_HEADER_EXAMPLES == 1, "checkpoint.h's usage example: run it here");

static int checkpoint_example(duet_module *model, duet_optimizer *g_opt, duet_optimizer *d_opt,
                              const char *text, int64_t *iter_out) {
#define DUET_EXAMPLE 1
#include "checkpoint_h_examples.inc"
#undef DUET_EXAMPLE
    *iter_out = iter;
    return DUET_OK;
}

static void test_checkpoint(void **state) {
    (void)state;
    assert_int_equal(mkdir("work", 0755), 0);
    duet_model *m = tu_tiny_srgan(4);
    duet_module *model = duet_model_module(m);
    duet_optimizer *g = tu_adam_for(duet_model_part(m, "generator"), 1e-3f);
    duet_optimizer *d = tu_adam_for(duet_model_part(m, "discriminator"), 1e-3f);
    int64_t iter = 0;
    TU_OK(checkpoint_example(model, g, d, "total_iters = 1000;", &iter));
    assert_int_equal(iter, 1000);
    assert_int_equal(tu_count_entries("work"), 1); /* iter_1000.safetensors, atomically */
    duet_optimizer_destroy(g);
    duet_optimizer_destroy(d);
    duet_model_destroy(m);
}

int main(void) {
    duet_log_set_level(DUET_LOG_ERROR); /* the tiny SRGAN's random VGG warns */
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_checkpoint),
    };
    return cmocka_run_group_tests(tests, tu_cwd_tmpdir_setup, tu_cwd_tmpdir_teardown);
}
