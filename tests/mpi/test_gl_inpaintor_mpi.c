/* GLInpaintor under the DistributedDataParallelWrapper, run under mpiexec
 * -n 1, 2 and 3 with a global batch of 6:
 * - N ranks with 6/N samples each match one process with the whole batch
 *   over 8 iterations of the schedule disc_step 2, iter_tc 1, iter_td 3
 *   (G, G, D, D, D, D+G, D, D+G): the generator's DDP sits out the
 *   discriminator-only stretch after a forward each time, the
 *   discriminators' DDP the first two iterations entirely, and neither
 *   hangs or complains. Every log value, every state entry (the BatchNorm
 *   statistics too: SyncBatchNorm, as the shipped config) to the GAN tests'
 *   tolerances, bit-identical parameters on every rank. Every hole is
 *   12x12 here: the L1 in the hole is normalised by each rank's own hole
 *   area (MMEditing's mask_reduce_loss under DDP does the same), so with
 *   holes of different sizes N ranks weigh the samples differently than one
 *   process; the MMEditing DDP oracle (tests/mmedit/test_mmedit_ddp.c) has
 *   holes of different sizes.
 * - one DDP around the whole model fails on every rank at the forward of
 *   the second step, after the first (generator-only) update left the
 *   discriminators without gradients, with the error naming them. */
#include "testutil_gan.h"

#include <math.h>
#include <string.h>

enum { B = 6, ITERS = 8 };
static const char *cpu[] = {"cpu"};

/* tu_tiny_gl_inpaintor_opts with 8-channel discriminators and the
 * schedule disc_step 2, iter_tc 1, iter_td 3. Its generator has no
 * BatchNorm: with it, the first conv's weight gradient cancels (BatchNorm's
 * backward leaves dy zero-mean per channel, and the 4-channel input has a
 * large mean), and the rounding of N partial sums against one moves
 * elements by 10% of lr in two Adam steps. The discriminators keep theirs
 * (SyncBatchNorm). */
static duet_model *tiny_gl(void) {
    duet_gl_inpaintor_opts o = tu_tiny_gl_inpaintor_opts();
    o.disc.global.max_channels = o.disc.local.max_channels = 8;
    o.disc.global.fc_in_channels = o.disc.local.fc_in_channels = 8 * 4 * 4;
    /* No DiscShiftLoss (GL's config has none): it squares each rank's GAN
     * loss, so N ranks average loss_r^2 where one process has loss^2, in
     * MMEditing under DDP as here. */
    o.disc_shift_weight = 0.0f;
    o.disc_step = 2;
    o.iter_tc = 1;
    o.iter_td = 3;
    duet_rng rng = duet_rng_make(2028, 0);
    duet_model *m = NULL;
    TU_OK(duet_gl_inpaintor_create(&o, &rng, &m));
    return m;
}

/* Iteration it's global batch: 32x32 images in [-0.8, 0.8] (away from the
 * generator's clip at +-1), a 12x12 hole per sample. */
static void batch_of(duet_batch *b, int it) {
    duet_rng r = duet_rng_make(300 + (uint64_t)it, 0);
    duet_tensor *gt = tu_rand(&r, 4, (int64_t[]){B, 3, 32, 32}, -0.8f, 0.8f);
    int boxes[B][4];
    for (int n = 0; n < B; n++) {
        boxes[n][0] = 4 + (int)(duet_rng_uniform(&r) * 15);
        boxes[n][1] = 4 + (int)(duet_rng_uniform(&r) * 15);
        boxes[n][2] = boxes[n][3] = 12;
    }
    tu_inpainting_batch(b, gt, boxes, true);
}

static void test_ranks_match_one_process(void **state) {
    (void)state;
    const tu_gan_run run = {batch_of, 4e-4f, ITERS, B, 1e-6, 1.0 / 12};
    duet_model *ref = tiny_gl();
    duet_wrapper_opts wo = duet_wrapper_opts_default();
    wo.sync_bn = true;
    duet_wrapper *w = NULL;
    TU_OK(duet_wrapper_create(tiny_gl(), tu_comm, cpu, 1, &wo, &w));
    assert_int_equal(duet_wrapper_num_ddps(w), 2);
    duet_model *m = duet_wrapper_model(w);
    tu_noise_masks nm = {0};
    tu_gan_train_pair(ref, w, &nm, true, &run);
    assert_int_equal(duet_gl_inpaintor_cur_iter(m), ITERS);
    assert_int_equal(duet_gl_inpaintor_disc_step_count(m), duet_gl_inpaintor_disc_step_count(ref));
    tu_gan_assert_ranks_agree(w, ref, &nm, &run);
    duet_wrapper_destroy(w);
    duet_model_destroy(ref);
}

static void test_whole_model_ddp_fails_everywhere(void **state) {
    (void)state;
    const tu_gan_run run = {batch_of, 4e-4f, 3, B, 1e-6, 0};
    tu_gan_whole_model_fails_everywhere(tiny_gl(), &run, 2, "disc.");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ranks_match_one_process),
        cmocka_unit_test(test_whole_model_ddp_fails_everywhere),
    };
    return TU_GAN_RUN_GROUP(tests);
}
