/* The wrapper's cross-rank pieces under mpiexec -n 1, 2, 3: log values
 * averaged over ranks (and ranks that log different names fail together),
 * each trainable part synchronised by its own DDP (a step that trains only
 * one part leaves the other untouched and both identical across ranks),
 * and the device rule on every rank. */
#include "testutil.h"

#include <math.h>
#include <string.h>

static const char *cpu[] = {"cpu"};

static void test_log_average(void **state) {
    (void)state;
    duet_log_vars lv;
    duet_log_vars_clear(&lv);
    TU_OK(duet_log_vars_set(&lv, "loss_a", (double)tu_rank));
    TU_OK(duet_log_vars_set(&lv, "loss_b", 1.0 + tu_rank * tu_rank));
    TU_OK(duet_log_vars_average(&lv, tu_comm));
    double a, b, want_b = 0;
    for (int r = 0; r < tu_size; r++) want_b += (1.0 + r * r) / tu_size;
    assert_true(duet_log_vars_get(&lv, "loss_a", &a));
    assert_true(duet_log_vars_get(&lv, "loss_b", &b));
    assert_true(fabs(a - (tu_size - 1) / 2.0) < 1e-12);
    assert_true(fabs(b - want_b) < 1e-12);
    /* The last rank logs another name: every rank fails, none hangs. */
    duet_log_vars_clear(&lv);
    TU_OK(duet_log_vars_set(&lv, tu_rank == tu_size - 1 && tu_size > 1 ? "loss_x" : "loss_a", 1));
    int rc = duet_log_vars_average(&lv, tu_comm);
    assert_int_equal(rc, tu_size > 1 ? DUET_EMISMATCH : DUET_OK);
}

/* A two-part model: "g" and "d" linear layers; train_step updates only the
 * part named in the batch metadata column "part" with SGD. */
static int two_train_step(duet_model *m, const duet_batch *b, duet_optimizer_set *opts,
                          duet_log_vars *log) {
    const char *which = duet_batch_meta_get(b, "part", 0);
    duet_module *part = duet_model_part(m, which);
    duet_optimizer *opt = NULL;
    DUET_TRY(duet_optimizer_set_require(opts, which, &opt));
    duet_tensor *x = NULL, *y = NULL, *loss = NULL;
    DUET_TRY(duet_batch_require(b, "x", &x));
    DUET_TRY(duet_module_forward(part, x, &y));
    int rc = duet_mean(y, &loss);
    if (rc == DUET_OK) rc = duet_log_vars_set(log, "loss", loss->data[0]);
    if (rc == DUET_OK) {
        duet_optimizer_zero_grad(opt);
        rc = duet_backward(loss);
    }
    if (rc == DUET_OK) rc = duet_optimizer_step(opt);
    duet_tensor_release(y);
    duet_tensor_release(loss);
    return rc; /* duet_model_train_step averages the log values */
}

static const duet_model_ops two_ops = {
    .name = "TwoParts",
    .train_step = two_train_step,
};
static const duet_module_type two_root = {"TwoParts", NULL, NULL};

static duet_model *two_parts(uint64_t seed) {
    duet_rng rng = duet_rng_make(seed, 0);
    duet_module *root = NULL, *g = NULL, *d = NULL;
    TU_OK(duet_module_create(&two_root, NULL, &root));
    TU_OK(duet_linear_module_create(3, 2, true, &rng, &g));
    TU_OK(duet_module_add_child(root, "g", g));
    TU_OK(duet_linear_module_create(3, 1, true, &rng, &d));
    TU_OK(duet_module_add_child(root, "d", d));
    duet_model *m = NULL;
    TU_OK(duet_model_create(&two_ops, NULL, root, &m));
    return m;
}

static void test_parts_sync_separately(void **state) {
    (void)state;
    /* Rank-dependent init: the DDPs broadcast rank 0's parameters. */
    duet_wrapper *w = NULL;
    TU_OK(duet_wrapper_create(two_parts(10 + (uint64_t)tu_rank), tu_comm, cpu, 1, NULL, &w));
    duet_model *ref = two_parts(10); /* rank 0's, trained on the global batch */
    duet_model *m = duet_wrapper_model(w);
    duet_optimizer_set *ow = NULL, *oref = NULL;
    TU_OK(duet_optimizer_set_create(&ow));
    TU_OK(duet_optimizer_set_create(&oref));
    duet_sgd_opts so = duet_sgd_opts_default();
    so.lr = 0.5f;
    TU_OK(duet_optimizer_set_add_sgd(ow, m, "g", &so));
    TU_OK(duet_optimizer_set_add_sgd(ow, m, "d", &so));
    TU_OK(duet_optimizer_set_add_sgd(oref, ref, "g", &so));
    TU_OK(duet_optimizer_set_add_sgd(oref, ref, "d", &so));
    const char *parts[3] = {"g", "g", "d"}; /* two generator steps, then one for d */
    for (int s = 0; s < 3; s++) {
        int64_t n = 2 * tu_size; /* global batch: 2 samples per rank */
        duet_rng rng = duet_rng_make(77 + (uint64_t)s, 0);
        duet_tensor *x = tu_randn(&rng, 2, (int64_t[]){n, 3}, 1);
        const char *col[12];
        for (int64_t i = 0; i < n; i++) col[i] = parts[s];
        duet_batch b = {0}, local = {0};
        TU_OK(duet_batch_add_tensor(&b, "x", x));
        TU_OK(duet_batch_add_meta(&b, "part", n, col));
        TU_OK(duet_batch_slice(&local, &b, 2 * tu_rank, 2));
        duet_tensor *d0 = tu_flat_params(duet_model_part(m, "d"));
        duet_log_vars lw, lr;
        TU_OK(duet_wrapper_train_step(w, &local, ow, &lw));
        TU_OK(duet_model_train_step(ref, &b, oref, &lr));
        /* The averaged log is the global batch's mean loss. */
        assert_true(fabs(lw.values[0] - lr.values[0]) < 1e-5);
        duet_tensor *d1 = tu_flat_params(duet_model_part(m, "d"));
        if (s < 2) tu_assert_close(d1->data, d0->data, d0->numel, 0, 0, "d untouched in a g step");
        duet_tensor_release(d0);
        duet_tensor_release(d1);
        duet_batch_clear(&local);
        duet_batch_clear(&b);
        duet_tensor_release(x);
    }
    const char *names[2] = {"g", "d"};
    for (int p = 0; p < 2; p++) {
        duet_tensor *got = tu_flat_params(duet_model_part(m, names[p]));
        duet_tensor *want = tu_flat_params(duet_model_part(ref, names[p]));
        tu_assert_close(got->data, want->data, want->numel, 1e-5, 1e-6, names[p]);
        duet_tensor_release(got);
        duet_tensor_release(want);
    }
    TU_OK(duet_wrapper_check_replicas(w));
    duet_optimizer_set_destroy(ow);
    duet_optimizer_set_destroy(oref);
    duet_model_destroy(ref);
    duet_wrapper_destroy(w);
}

static void test_one_device_per_process(void **state) {
    (void)state;
    duet_wrapper *w = NULL;
    const char *two[] = {"0", "1"};
    assert_int_equal(duet_wrapper_create(two_parts(1), tu_comm, two, 2, NULL, &w), DUET_EINVAL);
    assert_non_null(strstr(duet_last_error(), "exactly one device per process"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_log_average),
        cmocka_unit_test(test_parts_sync_separately),
        cmocka_unit_test(test_one_device_per_process),
    };
    int failed = cmocka_run_group_tests(tests, tu_world_setup, tu_world_teardown);
    duet_comm_finalize();
    return failed;
}
