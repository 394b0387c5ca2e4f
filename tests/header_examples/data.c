/* Runs the usage example of duet/data.h (extracted by the build, see
 * cmake/header-examples.awk) in a temporary folder holding the
 * data/sample/train photos it reads. */
#include "testutil.h"

#include <sys/stat.h>
#include <unistd.h>

_Static_assert(DUET_HEADER_EXAMPLES == 1, "data.h's usage examples: run each one here");

/* The batches the example trained on. */
static int nbatches;
static void spy_batch_destroy(duet_data_batch *b) {
    duet_tensor *lq = duet_batch_tensor_get(&b->batch, "lq");
    duet_tensor *gt = duet_batch_tensor_get(&b->batch, "gt");
    assert_non_null(lq);
    assert_non_null(gt);
    assert_int_equal(lq->shape[0], 16);
    assert_int_equal(lq->shape[2], 32);
    assert_int_equal(gt->shape[2], 128);
    assert_int_equal(gt->shape[3], 128);
    nbatches++;
    duet_data_batch_destroy(b);
}

static int example(int world, int rank, int iters, duet_sampler_state *resume_out) {
#define duet_data_batch_destroy spy_batch_destroy
#define DUET_EXAMPLE 1
#include "data_h_examples.inc"
#undef DUET_EXAMPLE
#undef duet_data_batch_destroy
    *resume_out = resume;
    return DUET_OK;
}

static void test_example(void **state) {
    (void)state;
    char root[256], old[1024];
    assert_non_null(getcwd(old, sizeof old));
    assert_non_null(tu_mkdtemp(root, sizeof root, "duet_example_data"));
    assert_int_equal(chdir(root), 0);
    assert_int_equal(mkdir("data", 0755), 0);
    assert_int_equal(mkdir("data/sample", 0755), 0);
    assert_int_equal(mkdir("data/sample/train", 0755), 0);
    duet_rng rng = duet_rng_make(3, 0);
    for (int i = 0; i < 3; i++) {
        char p[64];
        snprintf(p, sizeof p, "data/sample/train/%d.png", i);
        duet_image *img = tu_random_image(&rng, 140 + i, 150, 3);
        TU_OK(duet_image_save_png(img, p));
        duet_image_destroy(img);
    }
    duet_sampler_state resume = {0};
    TU_OK(example(1, 0, 2, &resume));
    assert_int_equal(nbatches, 2);
    assert_int_equal(resume.position, 2 * 16);
    assert_int_equal(chdir(old), 0);
    assert_int_equal(tu_rm_tree(root), 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_example)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
