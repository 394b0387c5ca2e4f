/* BasicRestorer around EDSR and RDN under the DistributedDataParallelWrapper,
 * run under mpiexec -n 1, 2 and 3 with a global batch of 6: N ranks with
 * 6/N samples each match one process with the whole batch (each rank
 * computes that reference itself) after every one of 3 iterations: the
 * log values (averaged over the ranks), every parameter's gradient (the
 * DDP's average against the whole batch's), Adam's exp_avg and
 * exp_avg_sq, and the parameters; the parameters are bit-identical on
 * every rank and the DDP's replicas agree. The models are the `mmedit`
 * tests' (tu_sr_backbone_ref_model: EDSR x4 with res_scale 0.1 and a mean
 * shift with std != 1, RDN x3), built by the registry from MMEditing's keys. */
#include "testutil_gan.h"

#include <math.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

enum { B = 6, ITERS = 3 };
static const float LR = 1e-4f;
static const char *cpu[] = {"cpu"};

typedef struct net_case {
    const char *name;
    int scale;
    double max_noisy; /* tu_gan_run's: 0 for 1 in 50 */
} net_case;

static const net_case *current;

/* The global batch of iteration `it`, the same on every rank: 8x8 LQ and
 * their (unrelated) GTs at the model's scale. */
static void global_batch(duet_batch *b, int it) {
    duet_rng rng = duet_rng_make(900 + (uint64_t)it, 0);
    const int64_t s = 8 * current->scale;
    duet_tensor *lq = tu_rand(&rng, 4, (int64_t[]){B, 3, 8, 8}, 0, 1);
    duet_tensor *gt = tu_rand(&rng, 4, (int64_t[]){B, 3, s, s}, 0, 1);
    memset(b, 0, sizeof *b);
    TU_OK(duet_batch_add_tensor(b, "lq", lq));
    TU_OK(duet_batch_add_tensor(b, "gt", gt));
    duet_tensor_release(lq);
    duet_tensor_release(gt);
}

static duet_optimizer_set *adam(duet_model *m) {
    duet_optimizer_set *s = NULL;
    TU_OK(duet_optimizer_set_create(&s));
    duet_adam_opts a = duet_adam_opts_default();
    a.lr = LR;
    TU_OK(duet_optimizer_set_add_adam(s, m, "generator", &a));
    return s;
}

/* Each parameter's gradient against the reference's: 1e-3 |want| + 1e-4
 * max|want| (test_ref_basic_restorer.c's tolerance against PyTorch). */
static void compare_grads(duet_model *got, duet_model *want, int it) {
    duet_named_tensors pg = {0}, pw = {0};
    TU_OK(duet_module_named_parameters(duet_model_module(got), false, &pg));
    TU_OK(duet_module_named_parameters(duet_model_module(want), false, &pw));
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
    snprintf(path, sizeof path, "/tmp/duet_sr_backbones_mpi_%ld_%d_%s.safetensors",
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

/* Adam's moments against the reference's: exp_avg to the gradients'
 * tolerance, exp_avg_sq to twice it (it is quadratic in them). Returns
 * how many were compared. */
static int compare_moments(duet_optimizer_set *got, duet_optimizer_set *want, int it) {
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

static void ranks_match_one_process(const net_case *c) {
    current = c;
    const tu_gan_run run = {global_batch, LR, ITERS, B, 1e-6, c->max_noisy};
    duet_model *ref = tu_sr_backbone_ref_model(c->name, 2031);
    duet_wrapper *w = NULL;
    TU_OK(duet_wrapper_create(tu_sr_backbone_ref_model(c->name, 2031), tu_comm, cpu, 1, NULL,
                              &w));
    assert_int_equal(duet_wrapper_num_ddps(w), 1);
    duet_model *m = duet_wrapper_model(w);
    duet_optimizer_set *oref = adam(ref), *ow = adam(m);
    duet_named_tensors params = {0};
    TU_OK(duet_module_named_parameters(duet_model_module(ref), false, &params));
    const int nparams = (int)params.count;
    duet_named_tensors_clear(&params);
    tu_noise_masks nm = {0};
    const int64_t n = B / tu_size;
    for (int it = 0; it < ITERS; it++) {
        duet_batch b = {0}, local = {0};
        global_batch(&b, it);
        TU_OK(duet_batch_slice(&local, &b, tu_rank * n, n));
        duet_log_vars lr, lw;
        TU_OK(duet_model_train_step(ref, &b, oref, &lr));
        tu_noise_masks_update(&nm, duet_model_module(ref));
        TU_OK(duet_wrapper_train_step(w, &local, ow, &lw));
        assert_int_equal(lr.count, 2); /* loss_pix, loss */
        assert_int_equal(lw.count, lr.count);
        for (int i = 0; i < lw.count; i++) {
            assert_string_equal(lw.names[i], lr.names[i]);
            if (fabs(lw.values[i] - lr.values[i]) > 1e-4 * fabs(lr.values[i]) + 1e-7)
                fail_msg("rank %d, iteration %d: %s: %.8g, one process %.8g", tu_rank, it,
                         lw.names[i], lw.values[i], lr.values[i]);
        }
        compare_grads(m, ref, it);
        assert_int_equal(compare_moments(ow, oref, it), 2 * nparams);
        duet_batch_clear(&local);
        duet_batch_clear(&b);
    }
    duet_optimizer_set_destroy(oref);
    duet_optimizer_set_destroy(ow);
    tu_gan_assert_ranks_agree(w, ref, &nm, &run);
    duet_wrapper_destroy(w);
    duet_model_destroy(ref);
}

static void test_edsr_ranks_match_one_process(void **state) {
    (void)state;
    static const net_case c = {"edsr", 4, 0};
    ranks_match_one_process(&c);
}

static void test_rdn_ranks_match_one_process(void **state) {
    (void)state;
    /* RDN's gradients spread over more decades (test_ref_sr_backbones.c):
     * 1038 of its 44,779 parameter elements (2.3%) have had a reference
     * gradient below 3e-4 of their tensor's largest by iteration 3. */
    static const net_case c = {"rdn", 3, 1.0 / 20};
    ranks_match_one_process(&c);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_edsr_ranks_match_one_process),
        cmocka_unit_test(test_rdn_ranks_match_one_process),
    };
    return TU_GAN_RUN_GROUP(tests);
}
