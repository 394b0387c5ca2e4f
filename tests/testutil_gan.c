/* See testutil_gan.h. Moved from tests/mpi/test_srgan.c and
 * test_esrgan_mpi.c, which had their own copies. */
#include "testutil_gan.h"

#include <inttypes.h>
#include <math.h>
#include <string.h>
#include <unistd.h>

static const char *cpu[] = {"cpu"};

void tu_noise_masks_update(tu_noise_masks *nm, duet_module *root) {
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
    duet_named_tensors_clear(&l);
}

void tu_noise_masks_free(tu_noise_masks *nm) {
    for (size_t i = 0; i < nm->count; i++) free(nm->mask[i]);
    free(nm->mask);
    memset(nm, 0, sizeof *nm);
}

void tu_gan_assert_model_close(duet_model *got, duet_model *want, const tu_noise_masks *nm,
                               const tu_gan_run *run) {
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
                if (d > 2.1 * run->lr * run->iters)
                    fail_msg("rank %d: %s[%lld]: %.8g vs %.8g", tu_rank, pg.items[i].name,
                             (long long)k, a->data[k], b->data[k]);
            } else if (d > run->param_atol + 1e-4 * fabs((double)b->data[k])) {
                fail_msg("rank %d of %d: %s[%lld]: got %.8g, one process %.8g (rtol 1e-4, "
                         "atol %.2g)", tu_rank, tu_size, pg.items[i].name, (long long)k,
                         a->data[k], b->data[k], run->param_atol);
            }
        }
    }
    const double cap = run->max_noisy > 0 ? run->max_noisy : 1.0 / 50;
    if (!((double)noisy < cap * (double)total))
        fail_msg("%lld of %lld parameter elements had a noise-level reference gradient, more "
                 "than the %.3g allowed", (long long)noisy, (long long)total, cap);
    TU_OK(duet_module_named_buffers(duet_model_module(got), &bg));
    TU_OK(duet_module_named_buffers(duet_model_module(want), &bw));
    assert_int_equal(bg.count, bw.count);
    for (size_t i = 0; i < bg.count; i++) {
        assert_string_equal(bg.items[i].name, bw.items[i].name);
        tu_assert_close(bg.items[i].tensor->data, bw.items[i].tensor->data,
                        bw.items[i].tensor->numel, 1e-4, 1e-6, bg.items[i].name);
    }
    duet_named_tensors_clear(&pg);
    duet_named_tensors_clear(&pw);
    duet_named_tensors_clear(&bg);
    duet_named_tensors_clear(&bw);
}

void tu_gan_assert_ranks_agree(duet_wrapper *w, duet_model *ref, tu_noise_masks *nm,
                               const tu_gan_run *run) {
    duet_model *m = duet_wrapper_model(w);
    tu_gan_assert_model_close(m, ref, nm, run);
    tu_gan_assert_params_identical(m);
    TU_OK(duet_wrapper_check_replicas(w));
    tu_noise_masks_free(nm);
}

void tu_gan_assert_part_syncs(duet_wrapper *w, const char *part, int64_t want) {
    for (size_t i = 0; i < duet_wrapper_num_ddps(w); i++)
        if (strcmp(duet_wrapper_ddp_name(w, i), part) == 0) {
            duet_ddp_stats st = duet_ddp_get_stats(duet_wrapper_ddp(w, i));
            if (st.syncs != want)
                fail_msg("%s: %" PRId64 " synchronised backwards, want %" PRId64, part,
                         st.syncs, want);
            return;
        }
    fail_msg("the wrapper has no DDP for part '%s'", part);
}

void tu_gan_assert_params_identical(duet_model *m) {
    duet_named_tensors l = {0};
    TU_OK(duet_module_named_parameters(duet_model_module(m), false, &l));
    int bad = 0;
    for (size_t i = 0; i < l.count; i++) {
        const duet_tensor *t = l.items[i].tensor;
        float *r0 = malloc((size_t)t->numel * sizeof *r0);
        memcpy(r0, t->data, (size_t)t->numel * sizeof *r0);
        TU_OK(duet_comm_bcast(tu_comm, r0, (size_t)t->numel, DUET_DTYPE_F32, 0));
        if (memcmp(r0, t->data, (size_t)t->numel * sizeof *r0) != 0) bad++;
        free(r0);
    }
    TU_OK(duet_comm_allreduce(tu_comm, &bad, 1, DUET_DTYPE_I32, DUET_REDUCE_SUM));
    assert_int_equal(bad, 0);
    duet_named_tensors_clear(&l);
}

void tu_gan_train_pair(duet_model *ref, duet_wrapper *w, tu_noise_masks *nm, bool compare_logs,
                       const tu_gan_run *run) {
    duet_optimizer_set *oref = tu_adam_pair(ref, run->lr);
    duet_optimizer_set *ow = tu_adam_pair(duet_wrapper_model(w), run->lr);
    int64_t n = run->batch_size / tu_size;
    for (int it = 0; it < run->iters; it++) {
        duet_batch b = {0}, local = {0};
        run->batch(&b, it);
        TU_OK(duet_batch_slice(&local, &b, tu_rank * n, n));
        duet_log_vars lr, lw;
        TU_OK(duet_model_train_step(ref, &b, oref, &lr));
        tu_noise_masks_update(nm, duet_model_module(ref));
        TU_OK(duet_wrapper_train_step(w, &local, ow, &lw));
        assert_int_equal(lr.count, lw.count);
        for (int i = 0; i < lw.count; i++) {
            assert_true(isfinite(lw.values[i]));
            /* Averaged over ranks, mean losses are the whole batch's. */
            double tol = 1e-4 * fabs(lr.values[i]) + 1e-7;
            if (compare_logs && fabs(lw.values[i] - lr.values[i]) > tol)
                fail_msg("rank %d, iteration %d: %s: %.8g, one process %.8g", tu_rank, it,
                         lw.names[i], lw.values[i], lr.values[i]);
        }
        duet_batch_clear(&local);
        duet_batch_clear(&b);
    }
    duet_optimizer_set_destroy(oref);
    duet_optimizer_set_destroy(ow);
}

void tu_gan_whole_model_fails_everywhere(duet_model *m, const tu_gan_run *run, int want_iter,
                                         const char *needle) {
    duet_wrapper_opts o = duet_wrapper_opts_default();
    o.kind = DUET_WRAPPER_WHOLE_MODEL;
    duet_wrapper *w = NULL;
    TU_OK(duet_wrapper_create(m, tu_comm, cpu, 1, &o, &w));
    duet_optimizer_set *opts = tu_adam_pair(duet_wrapper_model(w), run->lr);
    int64_t n = run->batch_size / tu_size;
    double t0 = duet_time_now();
    int rc = DUET_OK, it = 0;
    for (; it < run->iters && rc == DUET_OK; it++) {
        duet_batch b = {0}, local = {0};
        run->batch(&b, it);
        TU_OK(duet_batch_slice(&local, &b, tu_rank * n, n));
        duet_log_vars log;
        rc = duet_wrapper_train_step(w, &local, opts, &log);
        duet_batch_clear(&local);
        duet_batch_clear(&b);
    }
    double elapsed = duet_time_now() - t0;
    const char *msg = duet_last_error();
    if (tu_rank == 0) printf("    rank 0, iteration %d, after %.2f s: %s\n", it, elapsed, msg);
    fflush(stdout);
    assert_int_equal(rc, DUET_EUNUSED);
    assert_int_equal(it, want_iter);
    if (strstr(msg, needle) == NULL || strstr(msg, "got no gradient") == NULL)
        fail_msg("rank %d: \"%s\" lacks \"%s\" or \"got no gradient\"", tu_rank, msg, needle);
    /* No time bound: a rank left hanging is CTest's timeout (and the
     * watchdog's error), not a clock reading on a shared machine. */
    /* Every rank saw the same failure (this collective would hang, and the
     * test time out, if one rank were left inside a reduction). */
    int all = rc == DUET_EUNUSED;
    TU_OK(duet_comm_allreduce(tu_comm, &all, 1, DUET_DTYPE_I32, DUET_REDUCE_SUM));
    assert_int_equal(all, tu_size);
    duet_optimizer_set_destroy(opts);
    duet_wrapper_destroy(w);
}

/* ---- tu_tiny_deepfill_disc -------------------------------------------------- */

static int tiny_disc_forward(duet_module *self, int nin, duet_tensor *const *in,
                             duet_tensor **out) {
    (void)nin;
    duet_tensor *a = NULL, *b = NULL, *c = NULL, *d = NULL, *e = NULL, *f = NULL;
    int rc = duet_module_forward(duet_module_child(self, "conv1"), in[0], &a);
    if (rc == DUET_OK) rc = duet_elu(a, 1.0f, &b);
    if (rc == DUET_OK) rc = duet_module_forward(duet_module_child(self, "conv2"), b, &c);
    if (rc == DUET_OK) rc = duet_elu(c, 1.0f, &d);
    if (rc == DUET_OK) rc = duet_flatten(d, &e);
    if (rc == DUET_OK) rc = duet_module_forward(duet_module_child(self, "fc"), e, &f);
    if (rc == DUET_OK) rc = duet_leaky_relu(f, 0.2f, out);
    duet_tensor *ts[] = {a, b, c, d, e, f};
    for (int i = 0; i < 6; i++) duet_tensor_release(ts[i]);
    return rc;
}

static const duet_module_type tiny_disc_type = {"TinyDeepFillDisc", tiny_disc_forward, NULL};

void tu_tiny_deepfill_disc(duet_rng *rng, duet_module **out) {
    duet_module *m = NULL, *c1 = NULL, *c2 = NULL, *fc = NULL;
    TU_OK(duet_module_create(&tiny_disc_type, NULL, &m));
    TU_OK(duet_conv2d_module_create(3, 4, 5, 2, 2, true, rng, &c1));
    TU_OK(duet_module_add_child(m, "conv1", c1));
    TU_OK(duet_conv2d_module_create(4, 8, 5, 2, 2, true, rng, &c2));
    TU_OK(duet_module_add_child(m, "conv2", c2));
    TU_OK(duet_linear_module_create(32, 1, true, rng, &fc));
    TU_OK(duet_module_add_child(m, "fc", fc));
    *out = m;
}

int tu_gan_world_setup(void **state) {
    if (tu_world_setup(state) != 0) return -1;
    duet_log_set_rank(tu_rank, false);
    return 0;
}

int tu_gan_finalize(int failed) {
    duet_comm_finalize();
    return failed;
}

duet_optimizer_set *tu_adam_generator(duet_model *m, double lr) {
    duet_optimizer_set *s = NULL;
    TU_OK(duet_optimizer_set_create(&s));
    duet_adam_opts a = duet_adam_opts_default();
    a.lr = lr;
    TU_OK(duet_optimizer_set_add_adam(s, m, "generator", &a));
    return s;
}

void tu_assert_model_grads_close(duet_model *got, duet_model *want, bool trainable_only, int it) {
    duet_named_tensors pg = {0}, pw = {0};
    TU_OK(duet_module_named_parameters(duet_model_module(got), trainable_only, &pg));
    TU_OK(duet_module_named_parameters(duet_model_module(want), trainable_only, &pw));
    assert_int_equal(pg.count, pw.count);
    for (size_t i = 0; i < pg.count; i++) {
        const duet_tensor *a = pg.items[i].tensor, *b = pw.items[i].tensor;
        assert_non_null(a->grad);
        assert_non_null(b->grad);
        double gmax = 0;
        for (int64_t k = 0; k < b->numel; k++) gmax = fmax(gmax, fabs(b->grad[k]));
        for (int64_t k = 0; k < a->numel; k++) {
            double d = fabs((double)a->grad[k] - b->grad[k]);
            if (d > 1e-3 * fabs(b->grad[k]) + 1e-4 * gmax)
                fail_msg("rank %d of %d, iteration %d: %s.grad[%lld]: %.8g, one process %.8g",
                         tu_rank, tu_size, it, pg.items[i].name, (long long)k, a->grad[k],
                         b->grad[k]);
        }
    }
    duet_named_tensors_clear(&pg);
    duet_named_tensors_clear(&pw);
}

/* The optimizer's state as a safetensors file this rank reads back. */
static duet_st *adam_state(duet_optimizer_set *s, const char *tag) {
    char path[256];
    snprintf(path, sizeof path, "/tmp/duet_adam_state_%ld_%d_%s.safetensors",
             (long)getpid(), tu_rank, tag);
    duet_st_writer *w = NULL;
    TU_OK(duet_st_writer_create(&w));
    TU_OK(duet_optimizer_save_state(duet_optimizer_set_get(s, "generator"), w, ""));
    TU_OK(duet_st_writer_save(w, path));
    duet_st_writer_destroy(w);
    duet_st *st = NULL;
    TU_OK(duet_st_load(path, &st));
    unlink(path);
    return st;
}

int tu_assert_adam_moments_close(duet_optimizer_set *got, duet_optimizer_set *want, int it) {
    duet_st *sg = adam_state(got, "got"), *sw = adam_state(want, "want");
    assert_int_equal(duet_st_count(sg), duet_st_count(sw));
    int n = 0;
    for (size_t i = 0; i < duet_st_count(sw); i++) {
        const char *name = duet_st_name(sw, i);
        const size_t len = strlen(name);
        const bool sq = len > 11 && strcmp(name + len - 11, ".exp_avg_sq") == 0;
        if (!sq && !(len > 8 && strcmp(name + len - 8, ".exp_avg") == 0)) continue;
        duet_tensor *a = NULL, *b = NULL;
        TU_OK(duet_st_get(sg, name, &a));
        TU_OK(duet_st_get(sw, name, &b));
        assert_int_equal(a->numel, b->numel);
        double mmax = 0;
        for (int64_t k = 0; k < b->numel; k++) mmax = fmax(mmax, fabs(b->data[k]));
        const double f = sq ? 2.0 : 1.0;
        for (int64_t k = 0; k < a->numel; k++) {
            double d = fabs((double)a->data[k] - b->data[k]);
            if (d > f * (1e-3 * fabs(b->data[k]) + 1e-4 * mmax) + 1e-30)
                fail_msg("rank %d of %d, iteration %d: %s[%lld]: %.8g, one process %.8g",
                         tu_rank, tu_size, it, name, (long long)k, a->data[k], b->data[k]);
        }
        duet_tensor_release(a);
        duet_tensor_release(b);
        n++;
    }
    duet_st_destroy(sg);
    duet_st_destroy(sw);
    return n;
}
