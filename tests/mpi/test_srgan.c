/* SRGAN under the DistributedDataParallelWrapper, run under mpiexec -n 1, 2
 * and 3 with a global batch of 6: with SyncBatchNorm, N ranks with 6/N
 * samples each match one process with the whole batch after 3 iterations
 * (every state entry to 1e-4) and hold bit-identical parameters; without
 * it, training runs and the parameters stay identical across ranks, with
 * one allreduce of each part's gradients per step; a
 * first iteration without a generator step (disc_init_steps) is fine; one
 * DDP around the whole model fails on every rank with the unfinished-
 * reduction error, in bounded time. Each rank computes the single-process
 * reference itself. */
#include "testutil_gan.h"


enum { B = 6, ITERS = 3 };
static const float LR = 1e-4f;
static const char *cpu[] = {"cpu"};

static duet_model *tiny_srgan_init(int disc_init_steps) {
    duet_srgan_opts o = tu_tiny_srgan_opts();
    o.disc_init_steps = disc_init_steps;
    /* The same seed on every rank: the frozen perceptual network is not
     * wrapped, so nothing would make it identical otherwise. */
    duet_rng rng = duet_rng_make(2026, 0);
    duet_model *m = NULL;
    TU_OK(duet_srgan_create(&o, &rng, &m));
    return m;
}

static duet_model *tiny_srgan(void) { return tiny_srgan_init(0); }

static void srgan_batch(duet_batch *b, int it) { tu_sr_batch(b, 500 + (uint64_t)it, B); }

static const tu_gan_run run = {srgan_batch, LR, ITERS, B, 1e-6, 0};

static void test_syncbn_matches_one_process(void **state) {
    (void)state;
    duet_model *ref = tiny_srgan();
    duet_wrapper_opts o = duet_wrapper_opts_default();
    o.sync_bn = true;
    duet_wrapper *w = NULL;
    TU_OK(duet_wrapper_create(tiny_srgan(), tu_comm, cpu, 1, &o, &w));
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
    duet_model *ref = tiny_srgan();
    duet_wrapper *w = NULL;
    TU_OK(duet_wrapper_create(tiny_srgan(), tu_comm, cpu, 1, NULL, &w));
    tu_noise_masks nm = {0};
    /* Local batch statistics: the losses are not the whole batch's (except
     * on one process), but every rank applies the same averaged update. */
    tu_gan_train_pair(ref, w, &nm, tu_size == 1, &run);
    tu_gan_assert_params_identical(duet_wrapper_model(w));
    /* One allreduce round per step for each part: the discriminator's real
     * half accumulates under no_sync, its fake half reduces the sum. */
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
    duet_model *ref = tiny_srgan_init(1);
    duet_wrapper_opts o = duet_wrapper_opts_default();
    o.sync_bn = true;
    duet_wrapper *w = NULL;
    TU_OK(duet_wrapper_create(tiny_srgan_init(1), tu_comm, cpu, 1, &o, &w));
    tu_noise_masks nm = {0};
    tu_gan_train_pair(ref, w, &nm, true, &run);
    tu_gan_assert_ranks_agree(w, ref, &nm, &run);
    duet_wrapper_destroy(w);
    duet_model_destroy(ref);
}

/* The generator step of iteration 1 leaves the discriminator's parameters
 * without gradients: the whole-model DDP's reduction is unfinished at the
 * next forward. */
static void test_whole_model_ddp_fails_everywhere(void **state) {
    (void)state;
    tu_gan_whole_model_fails_everywhere(tiny_srgan(), &run, 2, "discriminator.conv0_0.weight");
}

int main(void) {
    /* N ranks against one process at rtol 1e-4 after Adam, which turns a
     * gradient's float noise into up to lr per step: OpenBLAS keeps the
     * order of each dot product the same for batch B and B/N, oneDNN's
     * sgemm splits it differently (measured: 5e-6 apart after 3 steps at
     * lr 1e-4); so do OpenBLAS's AVX-512 kernels, so CTest runs this test
     * with OPENBLAS_CORETYPE=Haswell (cmake/DuetTests.cmake). The GEMM
     * itself is tested in test_kernels. */
    duet_kernel_opts ko = duet_kernel_opts_default();
    ko.gemm = DUET_GEMM_OPENBLAS;
    ko.num_threads = 1;
    if (duet_kernels_configure(&ko) != DUET_OK) return 1;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_syncbn_matches_one_process),
        cmocka_unit_test(test_without_syncbn),
        cmocka_unit_test(test_disc_init_steps),
        cmocka_unit_test(test_whole_model_ddp_fails_everywhere),
    };
    return TU_GAN_RUN_GROUP(tests);
}
