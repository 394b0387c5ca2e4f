/* ESRGAN under the DistributedDataParallelWrapper, run under mpiexec -n 1,
 * 2 and 3 with a global batch of 6 (test_srgan.c's checks for the
 * relativistic GAN step, whose discriminator runs three times per
 * discriminator step and twice per generator step): with SyncBatchNorm, N
 * ranks with 6/N samples each match one process with the whole batch after
 * 3 iterations and hold bit-identical parameters; without it, training runs
 * and the parameters stay identical across ranks, one allreduce of each
 * part's gradients per step; a first iteration without
 * a generator step (disc_init_steps) is fine; one DDP around the whole
 * model fails on every rank with the unfinished-reduction error, in bounded
 * time. Each rank computes the single-process reference itself.
 *
 * MMEditing's relativistic means (torch.mean(real_d_pred) and friends) are
 * taken over each GPU's share of the batch under DDP, not over the whole
 * batch: N ranks are therefore one process with the whole batch whose
 * means are taken per share of B/N samples (duet__esrgan_set_mean_groups),
 * which is the reference here. */
#include "testutil_gan.h"
#include "models/models_internal.h"

#include <string.h>

enum { B = 6, ITERS = 3 };
static const float LR = 1e-4f;
/* Parameters to rtol 1e-4 and this atol, 1e-6 + 1% of Adam's reach in
 * ITERS steps: the discriminator's relativistic gradients are known to
 * ~1e-3 of their largest only after a step (its real and fake terms nearly
 * cancel, amplifying the noise-level Adam moves; PyTorch's float32 run
 * differs from its float64 run the same), so
 * an element with a gradient of a few percent of the largest has its Adam
 * step known to ~1% of lr. (test_srgan.c: 1e-6.) */
static const double PARAM_ATOL = 1e-6 + 0.01 * 1e-4 * ITERS;
static const char *cpu[] = {"cpu"};

static duet_model *tiny_esrgan_init(int disc_init_steps) {
    duet_esrgan_opts o = duet_esrgan_opts_default();
    o.disc_init_steps = disc_init_steps;
    o.generator.mid_channels = 8;
    o.generator.num_blocks = 1;
    o.generator.growth_channels = 4;
    o.discriminator.mid_channels = 4;
    o.discriminator.input_size = 32;
    int cfg[4] = {4, 4, 0, 8};
    o.perceptual_loss.ncfg = 4;
    memcpy(o.perceptual_loss.cfg, cfg, sizeof cfg);
    o.perceptual_loss.layer_ids[0] = 5;
    /* The same seed on every rank: the frozen perceptual network is not
     * wrapped, so nothing would make it identical otherwise. */
    duet_rng rng = duet_rng_make(2027, 0);
    duet_model *m = NULL;
    TU_OK(duet_esrgan_create(&o, &rng, &m));
    /* As from a PSNR-oriented start (MMEditing's ESRGAN loads one): the
     * fresh RRDBNet's 0.1-scaled init makes nearly the same flat image for
     * every sample, which the discriminator's BatchNorm layers then
     * normalise by eps rather than by a batch variance, a problem so ill-
     * conditioned that a 1e-6 change of the weights moves the gradients by
     * 20%. Weights at kaiming scale make outputs that differ by sample. */
    duet_named_tensors g = {0};
    TU_OK(duet_module_named_parameters(duet_model_part(m, "generator"), false, &g));
    for (size_t i = 0; i < g.count; i++)
        for (int64_t k = 0; k < g.items[i].tensor->numel; k++) g.items[i].tensor->data[k] *= 10.0f;
    duet_named_tensors_clear(&g);
    return m;
}

static duet_model *tiny_esrgan(void) { return tiny_esrgan_init(0); }

/* The single-process reference: the whole batch, the relativistic means
 * per rank's share. */
static duet_model *reference_esrgan(int disc_init_steps) {
    duet_model *m = tiny_esrgan_init(disc_init_steps);
    duet__esrgan_set_mean_groups(m, tu_size);
    return m;
}

/* The global batch of iteration `it`, the same on every rank. */
static void global_batch(duet_batch *b, int it) {
    duet_rng rng = duet_rng_make(600 + (uint64_t)it, 0);
    duet_tensor *lq = tu_rand(&rng, 4, (int64_t[]){B, 3, 8, 8}, 0, 1);
    duet_tensor *gt = tu_rand(&rng, 4, (int64_t[]){B, 3, 32, 32}, 0, 1);
    memset(b, 0, sizeof *b);
    TU_OK(duet_batch_add_tensor(b, "lq", lq));
    TU_OK(duet_batch_add_tensor(b, "gt", gt));
    duet_tensor_release(lq);
    duet_tensor_release(gt);
}

static const tu_gan_run run = {global_batch, LR, ITERS, B, PARAM_ATOL, 0};

static void test_syncbn_matches_one_process(void **state) {
    (void)state;
    duet_model *ref = reference_esrgan(0);
    duet_wrapper_opts o = duet_wrapper_opts_default();
    o.sync_bn = true;
    duet_wrapper *w = NULL;
    TU_OK(duet_wrapper_create(tiny_esrgan(), tu_comm, cpu, 1, &o, &w));
    assert_int_equal(duet_wrapper_num_ddps(w), 2);
    tu_noise_masks nm = {0};
    tu_gan_train_pair(ref, w, &nm, true, &run);
    /* SyncBatchNorm keeps the running statistics identical too. */
    tu_gan_assert_ranks_agree(w, ref, &nm, &run);
    assert_int_equal(duet_srgan_step_counter(duet_wrapper_model(w)), ITERS);
    duet_wrapper_destroy(w);
    duet_model_destroy(ref);
}

static void test_without_syncbn(void **state) {
    (void)state;
    duet_model *ref = tiny_esrgan();
    duet_wrapper *w = NULL;
    TU_OK(duet_wrapper_create(tiny_esrgan(), tu_comm, cpu, 1, NULL, &w));
    tu_noise_masks nm = {0};
    /* Local batch statistics: the losses are not the whole batch's (except
     * on one process), but every rank applies the same averaged update. */
    tu_gan_train_pair(ref, w, &nm, tu_size == 1, &run);
    tu_gan_assert_params_identical(duet_wrapper_model(w));
    /* One allreduce round per step for each part (the discriminator's first
     * backward accumulates under no_sync). */
    tu_gan_assert_part_syncs(w, "generator", ITERS);
    tu_gan_assert_part_syncs(w, "discriminator", ITERS);
    if (tu_size == 1) tu_gan_assert_model_close(duet_wrapper_model(w), ref, &nm, &run);
    tu_noise_masks_free(&nm);
    duet_wrapper_destroy(w);
    duet_model_destroy(ref);
}

/* disc_init_steps: the first iteration runs the generator forward (arming
 * its DDP) without a generator backward; that must not leave the
 * generator's DDP waiting. */
static void test_disc_init_steps(void **state) {
    (void)state;
    duet_model *ref = reference_esrgan(1);
    duet_wrapper_opts o = duet_wrapper_opts_default();
    o.sync_bn = true;
    duet_wrapper *w = NULL;
    TU_OK(duet_wrapper_create(tiny_esrgan_init(1), tu_comm, cpu, 1, &o, &w));
    tu_noise_masks nm = {0};
    tu_gan_train_pair(ref, w, &nm, true, &run);
    tu_gan_assert_ranks_agree(w, ref, &nm, &run);
    duet_wrapper_destroy(w);
    duet_model_destroy(ref);
}

static void test_whole_model_ddp_fails_everywhere(void **state) {
    (void)state;
    tu_gan_whole_model_fails_everywhere(tiny_esrgan(), &run, 2, "discriminator.conv0_0.weight");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_syncbn_matches_one_process),
        cmocka_unit_test(test_without_syncbn),
        cmocka_unit_test(test_disc_init_steps),
        cmocka_unit_test(test_whole_model_ddp_fails_everywhere),
    };
    return TU_GAN_RUN_GROUP(tests);
}
