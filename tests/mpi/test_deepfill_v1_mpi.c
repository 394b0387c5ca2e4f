/* DeepFillv1Inpaintor under the DistributedDataParallelWrapper, run under
 * mpiexec -n 1, 2 and 3 with a global batch of 6:
 * - N ranks with 6/N samples each match one process with the whole batch
 *   over 6 iterations of disc_step 2 (D, D+G, D, D+G, D, D+G): the
 *   generator's DDP sits out every other iteration after a forward, the
 *   discriminators' DDP takes five forwards a step (global and local on
 *   fake and real, through duet_ddp_forward_child, then the two penalties,
 *   whose second-order backward it reduces like any other). Every log
 *   value, every state entry to the GAN tests' tolerances, bit-identical
 *   parameters on every rank. The choices GLInpaintor's test writes down
 *   apply here too: every hole is 16x16 (the L1 losses are normalised by
 *   each rank's own hole area, and so is the masked penalty, by each rank's
 *   mean of the mask), and no DiscShiftLoss (it squares each rank's GAN
 *   loss). The penalty's alphas need no choice: each rank draws the global
 *   batch's and takes its own slice (two_stage_inpaintor.c).
 * - one DDP around the whole model fails on every rank at the forward of
 *   the second step, after the first (discriminator-only) update left the
 *   generator without gradients, with the error naming it. */
#include "testutil_gan.h"

#include <math.h>
#include <string.h>

enum { B = 6, ITERS = 6, S = 72, HOLE = 16 };
static const char *cpu[] = {"cpu"};

static duet_model *tiny_dfv1(void) {
    duet_two_stage_inpaintor_opts o = tu_tiny_deepfill_v1_opts();
    o.disc_shift_weight = 0.0f;
    o.disc_step = 2;
    duet_rng rng = duet_rng_make(2029, 0);
    duet_model *m = NULL;
    TU_OK(duet_two_stage_inpaintor_create(&o, &rng, &m));
    return m;
}

/* Iteration it's global batch: 72x72 images in [-0.8, 0.8] (away from
 * stage 1's clip at +-1), a 16x16 hole per sample whose 32x32 patch stays
 * inside the image. */
static void batch_of(duet_batch *b, int it) {
    duet_rng r = duet_rng_make(400 + (uint64_t)it, 0);
    duet_tensor *gt = tu_rand(&r, 4, (int64_t[]){B, 3, S, S}, -0.8f, 0.8f);
    int boxes[B][4];
    for (int n = 0; n < B; n++) {
        boxes[n][0] = 8 + (int)(duet_rng_uniform(&r) * 40);
        boxes[n][1] = 8 + (int)(duet_rng_uniform(&r) * 40);
        boxes[n][2] = boxes[n][3] = HOLE;
    }
    tu_inpainting_batch(b, gt, boxes, true);
}

static void test_ranks_match_one_process(void **state) {
    (void)state;
    const tu_gan_run run = {batch_of, 1e-4f, ITERS, B, 1e-6, 1.0 / 12};
    duet_model *ref = tiny_dfv1();
    duet_wrapper *w = NULL;
    TU_OK(duet_wrapper_create(tiny_dfv1(), tu_comm, cpu, 1, NULL, &w));
    assert_int_equal(duet_wrapper_num_ddps(w), 2);
    duet_model *m = duet_wrapper_model(w);
    tu_noise_masks nm = {0};
    tu_gan_train_pair(ref, w, &nm, true, &run);
    assert_int_equal(duet_two_stage_inpaintor_disc_step_count(m),
                     duet_two_stage_inpaintor_disc_step_count(ref));
    /* every rank drew the global batch's alphas: 2 penalties x 6 a step */
    assert_true(duet_two_stage_inpaintor_gp_rng(m)->counter == 2 * B * ITERS);
    assert_true(duet_two_stage_inpaintor_gp_rng(ref)->counter == 2 * B * ITERS);
    tu_gan_assert_ranks_agree(w, ref, &nm, &run);
    duet_wrapper_destroy(w);
    duet_model_destroy(ref);
}

static void test_whole_model_ddp_fails_everywhere(void **state) {
    (void)state;
    const tu_gan_run run = {batch_of, 1e-4f, 3, B, 1e-6, 0};
    tu_gan_whole_model_fails_everywhere(tiny_dfv1(), &run, 2, "generator.");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ranks_match_one_process),
        cmocka_unit_test(test_whole_model_ddp_fails_everywhere),
    };
    return TU_GAN_RUN_GROUP(tests);
}
