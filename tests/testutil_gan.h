/* Test utilities for the GAN models under the DistributedDataParallelWrapper
 * (tests/mpi/test_srgan.c, test_esrgan_mpi.c, test_pix2pix_mpi.c,
 * test_cyclegan_mpi.c and the inpaintors' test_*_mpi.c): N ranks
 * against one process with the whole batch, bit-identical replicas, and the
 * whole-model DDP that must fail on every rank. They use tu_comm, tu_rank
 * and tu_size (tu_world_setup). */
#ifndef DUET_TESTUTIL_GAN_H
#define DUET_TESTUTIL_GAN_H

#include "testutil.h"

/* Per parameter element: set when its reference gradient was ever at
 * float32 noise level (nonzero, below 3e-4 of the tensor's largest), where
 * Adam's normalised first steps may go either way (see test_ref_srgan.c). */
typedef struct tu_noise_masks {
    size_t count;
    bool **mask;
} tu_noise_masks;
/* Adds the current gradients of root's parameters to the masks. */
void tu_noise_masks_update(tu_noise_masks *nm, duet_module *root);
void tu_noise_masks_free(tu_noise_masks *nm);

/* How a GAN test trains: the global batch of iteration `it` (the same on
 * every rank), the Adam lr, the iterations, the global batch size and the
 * parameter atol (rtol is 1e-4). */
typedef struct tu_gan_run {
    void (*batch)(duet_batch *b, int it);
    float lr;
    int iters;
    int64_t batch_size;
    double param_atol;
    /* The share of noise-level elements allowed (0: 1 in 50; the GL
     * generator's gradients spread over more decades, see
     * test_ref_gl_inpaintor.c). */
    double max_noisy;
} tu_gan_run;

/* Parameters of `got` against `want` to rtol 1e-4 / run->param_atol, the
 * noise-level elements within 2.1 * lr * iters (and fewer than run->max_noisy),
 * buffers to 1e-4 / 1e-6. */
void tu_gan_assert_model_close(duet_model *got, duet_model *want, const tu_noise_masks *nm,
                               const tu_gan_run *run);
/* Every parameter equal, bit for bit, to rank 0's (on every rank). */
void tu_gan_assert_params_identical(duet_model *m);
/* The wrapper's DDP for `part` has completed `want` synchronised backwards
 * (allreduce rounds of its gradients) on this rank. */
void tu_gan_assert_part_syncs(duet_wrapper *w, const char *part, int64_t want);
/* An optimizer set with one Adam at lr for the model's part "generator"
 * (the restorers' and the inpaintors' without a discriminator). */
duet_optimizer_set *tu_adam_generator(duet_model *m, double lr);
/* Each parameter's gradient (of the trainable ones where trainable_only)
 * against the one-process reference's: 1e-3 |want| + 1e-4 max|want| per
 * tensor (test_ref_basic_restorer.c's tolerance against PyTorch). */
void tu_assert_model_grads_close(duet_model *got, duet_model *want, bool trainable_only, int it);
/* Adam's moments of the part "generator" against the reference's, each
 * exp_avg to the gradients' tolerance and exp_avg_sq to twice it (it is
 * quadratic in them), read back through a saved optimizer state. Returns
 * how many moments were compared. */
int tu_assert_adam_moments_close(duet_optimizer_set *got, duet_optimizer_set *want, int it);
/* What a run of tu_gan_train_pair must end with: the wrapped model close to
 * ref (tu_gan_assert_model_close), its parameters bit-identical on every
 * rank, every DDP's replicas identical (duet_wrapper_check_replicas); frees
 * nm. */
void tu_gan_assert_ranks_agree(duet_wrapper *w, duet_model *ref, tu_noise_masks *nm,
                               const tu_gan_run *run);

/* The DeepFillv1-like discriminator of tests/ref/ref_gradient_penalty.py:
 * conv1 Conv2d(3, 4, 5, s2, p2) + ELU, conv2 Conv2d(4, 8, 5, s2, p2) + ELU,
 * flatten, fc Linear(32, 1), LeakyReLU(0.2); input (N, 3, 8, 8). */
void tu_tiny_deepfill_disc(duet_rng *rng, duet_module **out);
/* run->iters iterations of the reference (one process, whole batch) and of
 * the wrapped model (this rank's share), both with Adam (tu_adam_pair);
 * with compare_logs every log value equals the reference's to 1e-4. */
void tu_gan_train_pair(duet_model *ref, duet_wrapper *w, tu_noise_masks *nm, bool compare_logs,
                       const tu_gan_run *run);
/* One DDP around the whole model (takes m): trains until a step fails and
 * checks that it fails with DUET_EUNUSED at iteration want_iter (1-based)
 * on every rank, within 60 s, with a message holding `needle` (a parameter
 * name) and "got no gradient". */
void tu_gan_whole_model_fails_everywhere(duet_model *m, const tu_gan_run *run, int want_iter,
                                         const char *needle);

/* The GAN MPI tests' group setup: tu_world_setup, and every log line
 * prefixed with this rank. */
int tu_gan_world_setup(void **state);
/* Finalises MPI after a group; returns `failed` (main's value). */
int tu_gan_finalize(int failed);
/* main's body: runs the group `tests` with tu_gan_world_setup and
 * tu_world_teardown, then finalises MPI. */
#define TU_GAN_RUN_GROUP(tests) \
    tu_gan_finalize(cmocka_run_group_tests(tests, tu_gan_world_setup, tu_world_teardown))

#endif
