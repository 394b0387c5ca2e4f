/* ESRGAN under the DistributedDataParallelWrapper, run under mpiexec -n 1,
 * 2 and 3 with a global batch of 6 (test_srgan.c's checks for the
 * relativistic GAN step, whose discriminator runs three times per
 * discriminator step and twice per generator step): with SyncBatchNorm, N
 * ranks with 6/N samples each match one process with the whole batch after
 * 3 iterations and hold bit-identical parameters; without it, training runs
 * and the parameters stay identical across ranks; a first iteration without
 * a generator step (disc_init_steps) is fine; one DDP around the whole
 * model fails on every rank with the unfinished-reduction error, in bounded
 * time. Each rank computes the single-process reference itself.
 *
 * MMEditing's relativistic means (torch.mean(real_d_pred) and friends) are
 * taken over each GPU's share of the batch under DDP, not over the whole
 * batch: N ranks are therefore one process with the whole batch whose
 * means are taken per share of B/N samples (duet__esrgan_set_mean_groups),
 * which is the reference here. */
#include "testutil.h"
#include "models/models_internal.h"

#include <math.h>
#include <string.h>

enum { B = 6, ITERS = 3 };
static const float LR = 1e-4f;
/* Parameters to rtol 1e-4 and this atol, 1e-6 + 1% of Adam's reach in
 * ITERS steps: the discriminator's relativistic gradients are known to
 * ~1e-3 of their largest only (its real and fake terms nearly cancel;
 * test_ref_esrgan measures PyTorch float32 against float64 the same), so
 * an element with a gradient of a few percent of the largest has its Adam
 * step known to ~1% of lr. (test_srgan.c: 1e-6.) */
static const double PARAM_ATOL = 1e-6 + 0.01 * 1e-4 * ITERS;
static duet_comm *world;
static int g_rank, g_size;
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
    TU_OK(duet_esrgan_create(&m, &o, &rng));
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
    duet_named_tensors_free(&g);
    return m;
}

static duet_model *tiny_esrgan(void) { return tiny_esrgan_init(0); }

/* The single-process reference: the whole batch, the relativistic means
 * per rank's share. */
static duet_model *reference_esrgan(int disc_init_steps) {
    duet_model *m = tiny_esrgan_init(disc_init_steps);
    duet__esrgan_set_mean_groups(m, g_size);
    return m;
}

static duet_optimizer_set *adam_pair(duet_model *m) {
    duet_optimizer_set *s = NULL;
    TU_OK(duet_optimizer_set_create(&s));
    duet_adam_opts a = duet_adam_opts_default();
    a.lr = LR;
    TU_OK(duet_optimizer_set_add_adam(s, m, "generator", a));
    TU_OK(duet_optimizer_set_add_adam(s, m, "discriminator", a));
    return s;
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

/* Per parameter element: set when its reference gradient was ever at
 * float32 noise level (nonzero, below 3e-4 of the tensor's largest), where
 * Adam's normalised first steps may go either way (see test_ref_srgan.c). */
typedef struct noise_masks {
    size_t count;
    bool **mask;
} noise_masks;

static void masks_update(noise_masks *nm, duet_module *root) {
    duet_named_tensors l = {0};
    TU_OK(duet_module_named_parameters(root, false, &l));
    if (nm->mask == NULL) {
        nm->count = l.count;
        nm->mask = calloc(l.count, sizeof *nm->mask);
        for (size_t i = 0; i < l.count; i++)
            nm->mask[i] = calloc((size_t)l.items[i].tensor->numel, sizeof(bool));
    }
    for (size_t i = 0; i < l.count; i++) {
        const duet_tensor *t = l.items[i].tensor;
        if (t->grad == NULL) continue;
        double gmax = 0;
        for (int64_t k = 0; k < t->numel; k++) gmax = fmax(gmax, fabs(t->grad[k]));
        for (int64_t k = 0; k < t->numel; k++)
            nm->mask[i][k] |= t->grad[k] != 0.0f && fabs(t->grad[k]) < 3e-4 * gmax;
    }
    duet_named_tensors_free(&l);
}

static void masks_free(noise_masks *nm) {
    for (size_t i = 0; i < nm->count; i++) free(nm->mask[i]);
    free(nm->mask);
}

/* Parameters (to rtol 1e-4 / atol 1e-6, noise-level elements within Adam's
 * reach) and buffers (to 1e-4) of `got` against `want`. */
static void assert_model_close(duet_model *got, duet_model *want, const noise_masks *nm) {
    duet_named_tensors pg = {0}, pw = {0}, bg = {0}, bw = {0};
    TU_OK(duet_module_named_parameters(duet_model_module(got), false, &pg));
    TU_OK(duet_module_named_parameters(duet_model_module(want), false, &pw));
    assert_int_equal(pg.count, pw.count);
    int64_t total = 0, noisy = 0;
    for (size_t i = 0; i < pg.count; i++) {
        assert_string_equal(pg.items[i].name, pw.items[i].name);
        const duet_tensor *a = pg.items[i].tensor, *b = pw.items[i].tensor;
        for (int64_t k = 0; k < a->numel; k++) {
            double d = fabs((double)a->data[k] - b->data[k]);
            total++;
            if (nm->mask[i][k]) {
                noisy++;
                if (d > 2.1 * LR * ITERS)
                    fail_msg("rank %d: %s[%lld]: %.8g vs %.8g", g_rank, pg.items[i].name,
                             (long long)k, a->data[k], b->data[k]);
            } else if (d > PARAM_ATOL + 1e-4 * fabs((double)b->data[k])) {
                fail_msg("rank %d of %d: %s[%lld]: got %.8g, one process %.8g "
                         "(rtol 1e-4, atol %.2g)", g_rank, g_size, pg.items[i].name,
                         (long long)k, a->data[k], b->data[k], PARAM_ATOL);
            }
        }
    }
    assert_true(noisy * 50 < total);
    TU_OK(duet_module_named_buffers(duet_model_module(got), &bg));
    TU_OK(duet_module_named_buffers(duet_model_module(want), &bw));
    assert_int_equal(bg.count, bw.count);
    for (size_t i = 0; i < bg.count; i++) {
        assert_string_equal(bg.items[i].name, bw.items[i].name);
        tu_assert_close(bg.items[i].tensor->data, bw.items[i].tensor->data,
                        bw.items[i].tensor->numel, 1e-4, 1e-6, bg.items[i].name);
    }
    duet_named_tensors_free(&pg);
    duet_named_tensors_free(&pw);
    duet_named_tensors_free(&bg);
    duet_named_tensors_free(&bw);
}

/* Every parameter equal, bit for bit, to rank 0's. */
static void assert_params_identical(duet_model *m) {
    duet_named_tensors l = {0};
    TU_OK(duet_module_named_parameters(duet_model_module(m), false, &l));
    int bad = 0;
    for (size_t i = 0; i < l.count; i++) {
        const duet_tensor *t = l.items[i].tensor;
        float *r0 = malloc((size_t)t->numel * sizeof *r0);
        memcpy(r0, t->data, (size_t)t->numel * sizeof *r0);
        TU_OK(duet_comm_bcast(world, r0, (size_t)t->numel, DUET_DTYPE_F32, 0));
        if (memcmp(r0, t->data, (size_t)t->numel * sizeof *r0) != 0) bad++;
        free(r0);
    }
    TU_OK(duet_comm_allreduce(world, &bad, 1, DUET_DTYPE_I32, DUET_REDUCE_SUM));
    assert_int_equal(bad, 0);
    duet_named_tensors_free(&l);
}

/* ITERS iterations of the reference (one process, whole batch) and of the
 * wrapped model (this rank's share). */
static void train_pair(duet_model *ref, duet_wrapper *w, noise_masks *nm, bool compare_logs) {
    duet_optimizer_set *oref = adam_pair(ref), *ow = adam_pair(duet_wrapper_model(w));
    int64_t n = B / g_size;
    for (int it = 0; it < ITERS; it++) {
        duet_batch b, local = {0};
        global_batch(&b, it);
        TU_OK(duet_batch_slice(&local, &b, g_rank * n, n));
        duet_log_vars lr, lw;
        TU_OK(duet_model_train_step(ref, &b, oref, &lr));
        masks_update(nm, duet_model_module(ref));
        TU_OK(duet_wrapper_train_step(w, &local, ow, &lw));
        assert_int_equal(lr.count, lw.count);
        for (int i = 0; i < lw.count; i++) {
            assert_true(isfinite(lw.values[i]));
            /* Averaged over ranks, mean losses are the whole batch's. */
            double tol = 1e-4 * fabs(lr.values[i]) + 1e-7;
            if (compare_logs && fabs(lw.values[i] - lr.values[i]) > tol)
                fail_msg("rank %d, iteration %d: %s: %.8g, one process %.8g", g_rank, it,
                         lw.names[i], lw.values[i], lr.values[i]);
        }
        duet_batch_clear(&local);
        duet_batch_clear(&b);
    }
    duet_optimizer_set_destroy(oref);
    duet_optimizer_set_destroy(ow);
}

static void test_syncbn_matches_one_process(void **state) {
    (void)state;
    duet_model *ref = reference_esrgan(0);
    duet_wrapper_opts o = duet_wrapper_opts_default();
    o.sync_bn = true;
    duet_wrapper *w = NULL;
    TU_OK(duet_wrapper_create(&w, tiny_esrgan(), world, cpu, 1, &o));
    assert_int_equal(duet_wrapper_num_ddps(w), 2);
    noise_masks nm = {0};
    train_pair(ref, w, &nm, true);
    assert_model_close(duet_wrapper_model(w), ref, &nm);
    assert_params_identical(duet_wrapper_model(w));
    /* SyncBatchNorm keeps the running statistics identical too. */
    TU_OK(duet_wrapper_check_replicas(w));
    assert_int_equal(duet_srgan_step_counter(duet_wrapper_model(w)), ITERS);
    masks_free(&nm);
    duet_wrapper_destroy(w);
    duet_model_destroy(ref);
}

static void test_without_syncbn(void **state) {
    (void)state;
    duet_model *ref = tiny_esrgan();
    duet_wrapper *w = NULL;
    TU_OK(duet_wrapper_create(&w, tiny_esrgan(), world, cpu, 1, NULL));
    noise_masks nm = {0};
    /* Local batch statistics: the losses are not the whole batch's (except
     * on one process), but every rank applies the same averaged update. */
    train_pair(ref, w, &nm, g_size == 1);
    assert_params_identical(duet_wrapper_model(w));
    if (g_size == 1) assert_model_close(duet_wrapper_model(w), ref, &nm);
    masks_free(&nm);
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
    TU_OK(duet_wrapper_create(&w, tiny_esrgan_init(1), world, cpu, 1, &o));
    noise_masks nm = {0};
    train_pair(ref, w, &nm, true);
    assert_model_close(duet_wrapper_model(w), ref, &nm);
    assert_params_identical(duet_wrapper_model(w));
    masks_free(&nm);
    duet_wrapper_destroy(w);
    duet_model_destroy(ref);
}

static void test_whole_model_ddp_fails_everywhere(void **state) {
    (void)state;
    duet_wrapper_opts o = duet_wrapper_opts_default();
    o.kind = DUET_WRAPPER_WHOLE_MODEL;
    duet_wrapper *w = NULL;
    TU_OK(duet_wrapper_create(&w, tiny_esrgan(), world, cpu, 1, &o));
    duet_optimizer_set *opts = adam_pair(duet_wrapper_model(w));
    int64_t n = B / g_size;
    double t0 = duet_time_now();
    int rc = DUET_OK, it = 0;
    for (; it < ITERS && rc == DUET_OK; it++) {
        duet_batch b, local = {0};
        global_batch(&b, it);
        TU_OK(duet_batch_slice(&local, &b, g_rank * n, n));
        duet_log_vars log;
        rc = duet_wrapper_train_step(w, &local, opts, &log);
        duet_batch_clear(&local);
        duet_batch_clear(&b);
    }
    double elapsed = duet_time_now() - t0;
    assert_int_equal(rc, DUET_EUNUSED);
    assert_int_equal(it, 2); /* the generator step of iteration 1 left it unfinished */
    const char *msg = duet_last_error();
    if (g_rank == 0) printf("    rank 0, after %.2f s: %s\n", elapsed, msg);
    assert_non_null(strstr(msg, "discriminator.conv0_0.weight"));
    assert_true(elapsed < 60.0);
    /* Every rank saw the same failure. */
    int failed = rc == DUET_EUNUSED, all = 0;
    all = failed;
    TU_OK(duet_comm_allreduce(world, &all, 1, DUET_DTYPE_I32, DUET_REDUCE_SUM));
    assert_int_equal(all, g_size);
    duet_optimizer_set_destroy(opts);
    duet_wrapper_destroy(w);
}

static int setup(void **state) {
    (void)state;
    if (duet_comm_world(&world) != DUET_OK) return -1;
    g_rank = duet_comm_rank(world);
    g_size = duet_comm_size(world);
    duet_log_set_rank(g_rank, false);
    return 0;
}

static int teardown(void **state) {
    (void)state;
    duet_comm_destroy(world);
    return 0;
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_syncbn_matches_one_process),
        cmocka_unit_test(test_without_syncbn),
        cmocka_unit_test(test_disc_init_steps),
        cmocka_unit_test(test_whole_model_ddp_fails_everywhere),
    };
    int failed = cmocka_run_group_tests(tests, setup, teardown);
    duet_comm_finalize();
    return failed;
}
