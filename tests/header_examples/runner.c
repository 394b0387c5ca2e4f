/* Runs the usage example of duet/runner.h (extracted by the build, see
 * cmake/header-examples.awk) in a temporary folder: two iterations of a
 * small BasicRestorer on two generated images, which must leave the
 * checkpoint of iteration 2 in the work dir. */
#include "testutil.h"

#include <sys/stat.h>
#include <unistd.h>

_Static_assert(DUET_HEADER_EXAMPLES == 1, "runner.h's usage example: run it here");

static int example(void) {
#define DUET_EXAMPLE 1
#include "runner_h_examples.inc"
#undef DUET_EXAMPLE
    return DUET_OK;
}

static void test_runner(void **state) {
    (void)state;
    assert_int_equal(mkdir("configs", 0755), 0);
    assert_int_equal(mkdir("data", 0755), 0);
    assert_int_equal(mkdir("data/train", 0755), 0);
    duet_rng rng = duet_rng_make(3, 0);
    for (int i = 0; i < 2; i++) {
        duet_image *im = tu_random_image(&rng, 32, 32, 3);
        char path[64];
        snprintf(path, sizeof path, "data/train/%d.png", i);
        TU_OK(duet_image_save_png(im, path));
        duet_image_destroy(im);
    }
    tu_write_text("configs/msrresnet_x4_tiny.cfg",
                  "model = { type = \"BasicRestorer\";\n"
                  "  generator = { type = \"MSRResNet\"; mid_channels = 4; num_blocks = 1; "
                  "upscale_factor = 4; };\n"
                  "  pixel_loss = { type = \"L1Loss\"; loss_weight = 1.0; }; };\n"
                  "data = { samples_per_gpu = 2;\n"
                  "  train = { type = \"SRFolderGTDataset\"; gt_folder = \"data/train\"; "
                  "scale = 4; gt_patch_size = 16; }; };\n"
                  "optimizers = { generator = { type = \"Adam\"; lr = 1e-4; }; };\n"
                  "total_iters = 1000;\n"
                  "checkpoint_config = { interval = 1000; };\n");
    TU_OK(example());
    struct stat st;
    assert_int_equal(stat("work_dirs/msrresnet_x4_tiny/iter_2.safetensors", &st), 0);
}

int main(void) {
    duet_log_set_level(DUET_LOG_ERROR);
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_runner)};
    return cmocka_run_group_tests(tests, tu_cwd_tmpdir_setup, tu_cwd_tmpdir_teardown);
}
