/* Pix2Pix under the DistributedDataParallelWrapper, run under mpiexec -n 1,
 * 2 and 3 with a global batch of 6. With batch norm (the shipped config's)
 * and SyncBatchNorm, see test_batchnorm_syncbn_matches_one_process. With
 * instance norm (no batch coupling)
 * and no dropout, N ranks with 6/N samples each match one process with the
 * whole batch after 3 iterations (every state entry to 1e-4, but the
 * biases before an InstanceNorm, see is_bias_before_in) and hold
 * bit-identical parameters. This is the pattern SRGAN never exercised: the
 * generator's DDP is armed by the generator forward, then the
 * discriminator's backward (which reaches none of the generator's
 * parameters) runs before the generator's backward. A DDP that finalized in
 * that first backward would leave the generator's gradients unreduced and
 * the replicas apart. Each rank computes the single-process reference
 * itself. */
#include "testutil_gan.h"

#include <math.h>
#include <string.h>

enum { B = 6, ITERS = 3 };
/* The failure shows at the forward of iteration 2, naming the generator
 * parameters the previous pass left without gradients. */
#define WHOLE_ITER 2
#define WHOLE_NEEDLE "generator.model.model.0.conv.weight"
static const char *cpu[] = {"cpu"};

static duet_model *tiny_pix2pix_norm(duet_gen_norm norm) {
    duet_pix2pix_opts o = duet_pix2pix_opts_default();
    o.generator.num_down = 5;
    o.generator.base_channels = 4;
    o.generator.norm = norm;
    o.generator.use_dropout = false;
    o.discriminator.base_channels = 4;
    o.discriminator.num_conv = 2;
    o.discriminator.norm = norm;
    duet_rng rng = duet_rng_make(2026, 0);
    duet_model *m = NULL;
    TU_OK(duet_pix2pix_create(&o, &rng, &m));
    return m;
}

static duet_model *tiny_pix2pix(void) { return tiny_pix2pix_norm(DUET_GEN_NORM_IN); }

/* A global batch of B random image pairs drawn from stream `seed`. */
static void random_batch(duet_batch *b, uint64_t seed) {
    duet_rng r = duet_rng_make(seed, 0);
    duet_tensor *a = tu_rand(&r, 4, (int64_t[]){B, 3, 32, 32}, -1, 1);
    duet_tensor *c = tu_rand(&r, 4, (int64_t[]){B, 3, 32, 32}, -1, 1);
    TU_OK(duet_batch_add_tensor(b, "img_a", a));
    TU_OK(duet_batch_add_tensor(b, "img_b", c));
    duet_tensor_release(a);
    duet_tensor_release(c);
}

static void global_batch(duet_batch *b) { random_batch(b, 77); }

/* True when t is the bias of a conv that an InstanceNorm follows: its
 * gradient is zero in exact arithmetic (the norm removes any per-channel
 * constant), so Adam moves it by up to lr per step in a direction set by
 * float32 noise, which differs between a split and a whole batch. */
static bool is_bias_before_in(duet_module *m, const duet_tensor *t) {
    duet_module *conv = duet_module_child(m, "conv");
    if (conv != NULL && duet_module_child(m, "in") != NULL && duet_module_param(conv, "bias") == t)
        return true;
    for (size_t i = 0; i < duet_module_child_count(m); i++)
        if (is_bias_before_in(duet_module_child_at(m, i), t)) return true;
    return false;
}

static void test_ranks_match_one_process(void **state) {
    (void)state;
    duet_batch b = {0}, local = {0};
    global_batch(&b);
    const int64_t n = B / tu_size;
    TU_OK(duet_batch_slice(&local, &b, tu_rank * n, n));
    duet_log_vars log;

    duet_model *ref = tiny_pix2pix();
    duet_optimizer_set *ro = tu_adam_pair(ref, 2e-4f);
    for (int i = 0; i < ITERS; i++) TU_OK(duet_model_train_step(ref, &b, ro, &log));

    duet_model *m = tiny_pix2pix();
    duet_wrapper *w = NULL;
    TU_OK(duet_wrapper_create(m, tu_comm, cpu, 1, NULL, &w));
    duet_optimizer_set *o = tu_adam_pair(m, 2e-4f);
    for (int i = 0; i < ITERS; i++) TU_OK(duet_wrapper_train_step(w, &local, o, &log));
    TU_OK(duet_wrapper_check_replicas(w));

    duet_named_tensors got = {0}, want = {0};
    TU_OK(duet_module_state(duet_model_module(m), &got));
    TU_OK(duet_module_state(duet_model_module(ref), &want));
    assert_int_equal(got.count, want.count);
    for (size_t i = 0; i < got.count; i++) {
        assert_string_equal(got.items[i].name, want.items[i].name);
        const bool noise = is_bias_before_in(duet_model_module(m), got.items[i].tensor);
        tu_assert_close(got.items[i].tensor->data, want.items[i].tensor->data,
                        got.items[i].tensor->numel, noise ? 0.0 : 1e-4,
                        noise ? 2.1 * 2e-4 * ITERS : 1e-6, got.items[i].name);
    }
    duet_named_tensors_clear(&got);
    duet_named_tensors_clear(&want);
    duet_optimizer_set_destroy(o);
    duet_optimizer_set_destroy(ro);
    duet_wrapper_destroy(w);
    duet_model_destroy(ref);
    duet_batch_clear(&local);
    duet_batch_clear(&b);
}

static void batch_of(duet_batch *b, int it) {
    (void)it;
    global_batch(b);
}

/* A new global batch per iteration (the same on every rank). */
static void batch_per_iter(duet_batch *b, int it) { random_batch(b, 500 + (uint64_t)it); }

/* Every parameter's gradient (the last backward that reached it: the
 * discriminator step's for the discriminator, the generator step's for the
 * generator) against the reference's, to GRAD_RTOL of the tensor's largest
 * reference gradient (test_ref_srgan's 1e-4 at the first iteration, whose
 * weights are the same; later ones start from weights that noise-level Adam
 * steps, see tu_noise_masks, have moved by up to lr). Returns the largest
 * relative deviation. */
static double assert_grads_close(duet_model *got, duet_model *want, int it, double rtol) {
    duet_named_tensors pg = {0}, pw = {0};
    TU_OK(duet_module_named_parameters(duet_model_module(got), false, &pg));
    TU_OK(duet_module_named_parameters(duet_model_module(want), false, &pw));
    assert_int_equal(pg.count, pw.count);
    double worst = 0;
    for (size_t i = 0; i < pg.count; i++) {
        const duet_tensor *a = pg.items[i].tensor, *b = pw.items[i].tensor;
        assert_string_equal(pg.items[i].name, pw.items[i].name);
        if (b->grad == NULL) {
            assert_null(a->grad);
            continue;
        }
        assert_non_null(a->grad);
        double gmax = 0, dmax = 0;
        for (int64_t k = 0; k < b->numel; k++) gmax = fmax(gmax, fabs(b->grad[k]));
        for (int64_t k = 0; k < b->numel; k++)
            dmax = fmax(dmax, fabs((double)a->grad[k] - b->grad[k]));
        const double rel = gmax > 0 ? dmax / gmax : dmax;
        worst = fmax(worst, rel);
        if (rel > rtol)
            fail_msg("rank %d of %d, iteration %d: grad of %s differs from one process's by "
                     "%.3g of its largest %.3g (allowed %.2g)", tu_rank, tu_size, it,
                     pg.items[i].name, dmax, gmax, rtol);
    }
    duet_named_tensors_clear(&pg);
    duet_named_tensors_clear(&pw);
    return worst;
}

/* Evaluation, as the runner shares out validation images: image i on rank
 * i % size, so rank 0 may evaluate more images than the others. val_step
 * runs the generator in training mode (test-time batch statistics): each
 * rank's output for its image must be what one process gives for that image
 * alone (SyncBatchNorm does not mix the ranks' images there), and a rank
 * with one image more must not wait for the others. The model's parameters
 * match the reference's to float tolerance only, hence 1e-4. */
static void assert_val_steps_local(duet_model *m, duet_model *ref) {
    enum { NVAL = 4 };
    duet_batch all = {0};
    batch_per_iter(&all, 99);
    for (int64_t i = tu_rank; i < NVAL + (tu_rank == 0); i += tu_size) {
        duet_batch one = {0};
        TU_OK(duet_batch_slice(&one, &all, i % B, 1));
        duet_val_output got = {0}, want = {0};
        TU_OK(duet_model_val_step(m, &one, &got));
        TU_OK(duet_model_val_step(ref, &one, &want));
        assert_int_equal(got.output->numel, want.output->numel);
        char what[64];
        snprintf(what, sizeof what, "rank %d: val_step output of image %lld", tu_rank,
                 (long long)i);
        tu_assert_close(got.output->data, want.output->data, got.output->numel, 1e-4, 1e-5,
                        what);
        duet_val_output_clear(&got);
        duet_val_output_clear(&want);
        duet_batch_clear(&one);
    }
    duet_batch_clear(&all);
    TU_OK(duet_comm_barrier(tu_comm));
}

/* The shipped config's setup (configs/pix2pix_tiny.cfg: BatchNorm in both
 * networks) with SyncBatchNorm and without dropout: N ranks with 6/N samples
 * each match one process with the whole batch: every log value and every
 * gradient at every iteration, then the parameters, the BatchNorm running
 * statistics (which SyncBatchNorm keeps identical on every rank) and
 * bit-identical replicas. The discriminator sees the fake and the real
 * pairs in two forwards, each normalised over its own global batch, and its
 * frozen forward in the generator step still reduces its statistics'
 * gradients for the generator's backward. Then evaluation
 * (assert_val_steps_local). */
static void test_batchnorm_syncbn_matches_one_process(void **state) {
    (void)state;
    const tu_gan_run run = {batch_per_iter, 2e-4f, ITERS, B, 1e-6, 0};
    duet_model *ref = tiny_pix2pix_norm(DUET_GEN_NORM_BN);
    duet_wrapper_opts wo = duet_wrapper_opts_default();
    wo.sync_bn = true;
    duet_wrapper *w = NULL;
    TU_OK(duet_wrapper_create(tiny_pix2pix_norm(DUET_GEN_NORM_BN), tu_comm, cpu, 1, &wo, &w));
    assert_int_equal(duet_wrapper_num_ddps(w), 2);
    duet_model *m = duet_wrapper_model(w);
    duet_optimizer_set *ro = tu_adam_pair(ref, run.lr), *o = tu_adam_pair(m, run.lr);
    tu_noise_masks nm = {0};
    const int64_t n = B / tu_size;
    double worst[ITERS];
    for (int it = 0; it < ITERS; it++) {
        duet_batch b = {0}, local = {0};
        run.batch(&b, it);
        TU_OK(duet_batch_slice(&local, &b, tu_rank * n, n));
        duet_log_vars lr, lw;
        TU_OK(duet_model_train_step(ref, &b, ro, &lr));
        tu_noise_masks_update(&nm, duet_model_module(ref));
        TU_OK(duet_wrapper_train_step(w, &local, o, &lw));
        assert_int_equal(lr.count, 5); /* four losses and MMEditing's total */
        assert_int_equal(lw.count, lr.count);
        for (int i = 0; i < lw.count; i++) {
            assert_string_equal(lw.names[i], lr.names[i]);
            if (fabs(lw.values[i] - lr.values[i]) > 1e-5 * fabs(lr.values[i]) + 1e-7)
                fail_msg("rank %d of %d, iteration %d: %s %.9g, one process %.9g", tu_rank,
                         tu_size, it, lw.names[i], lw.values[i], lr.values[i]);
        }
        worst[it] = assert_grads_close(m, ref, it, it == 0 ? 1e-4 : 1e-3);
        duet_batch_clear(&local);
        duet_batch_clear(&b);
    }
    if (tu_rank == 0)
        printf("    %d process%s: gradients within %.2g, %.2g, %.2g of their largest\n", tu_size,
               tu_size == 1 ? "" : "es", worst[0], worst[1], worst[2]);
    tu_gan_assert_ranks_agree(w, ref, &nm, &run);
    assert_val_steps_local(m, ref);
    duet_optimizer_set_destroy(o);
    duet_optimizer_set_destroy(ro);
    duet_wrapper_destroy(w);
    duet_model_destroy(ref);
}

/* One DDP around the whole Pix2Pix model (MMEditing's plain
 * DistributedDataParallel) cannot work: the discriminator step's backward
 * reaches only the discriminator's parameters, so the reduction is left
 * unfinished when the next forward comes. It must fail with the clear error
 * on every rank, not hang. */
static void test_whole_model_ddp_fails_everywhere(void **state) {
    (void)state;
    const tu_gan_run run = {batch_of, 2e-4f, ITERS, B, 1e-6, 0};
    tu_gan_whole_model_fails_everywhere(tiny_pix2pix(), &run, WHOLE_ITER, WHOLE_NEEDLE);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ranks_match_one_process),
        cmocka_unit_test(test_batchnorm_syncbn_matches_one_process),
        cmocka_unit_test(test_whole_model_ddp_fails_everywhere),
    };
    return TU_GAN_RUN_GROUP(tests);
}
