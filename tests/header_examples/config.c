/* Runs the usage example of duet/config.h (extracted by the build, see
 * cmake/header-examples.awk) in a temporary folder: reading a config with an
 * override, a view and the check for unused keys. */
#include "testutil.h"

#include <sys/stat.h>
#include <unistd.h>

_Static_assert(DUET_HEADER_EXAMPLES == 1, "config.h's usage example: run it here");

static int config_example(int64_t *iters_out, int64_t *mid_out) {
#define DUET_EXAMPLE 1
#include "config_h_examples.inc"
#undef DUET_EXAMPLE
    *iters_out = iters;
    *mid_out = mid;
    return DUET_OK;
}

static void test_config(void **state) {
    (void)state;
    /* The config the example reads holds exactly the keys it reads, so that
     * its check for unused keys passes. */
    assert_int_equal(mkdir("configs", 0755), 0);
    tu_write_text("configs/srgan_x4_tiny.cfg",
                  "total_iters = 10;\nmodel = { generator = { mid_channels = 8; }; };\n");
    int64_t iters = 0, mid = 0;
    TU_OK(config_example(&iters, &mid));
    assert_int_equal(iters, 2000); /* the --set override won */
    assert_int_equal(mid, 8);
}

int main(void) {
    duet_log_set_level(DUET_LOG_ERROR); /* the tiny SRGAN's random VGG warns */
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_config),
    };
    return cmocka_run_group_tests(tests, tu_cwd_tmpdir_setup, tu_cwd_tmpdir_teardown);
}
