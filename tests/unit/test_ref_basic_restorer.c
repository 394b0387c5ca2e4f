/* BasicRestorer's train_step (MSRResNet + L1, MMEditing's PSNR training of
 * the SRGAN generator) against PyTorch: tests/ref/ref_basic_restorer.py
 * (the model written from MMEditing's basic_restorer.py), and, as the
 * `mmedit` test, MMEditing 0.16.1 itself (tests/ref/gen_mmedit_refs.py).
 * Two steps on one batch from the same weights: the log values, every
 * gradient, every state-dict entry and Adam's moments, at
 * test_ref_srgan.c's tolerances. */
#include "testutil.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#define LR 2e-4

/* MMEditing's log keys: the pixel loss and parse_losses' total. */
static void compare_log(const duet_st *st, const duet_log_vars *log, int step) {
    static const char *const names[2] = {"loss_pix", "loss"};
    tu_ref_compare_log(st, log, step, names, 2);
}

/* Every parameter's gradient: 1e-3 |want| + 1e-4 max|want|. */
static void compare_grads(duet_module *root, const duet_st *st, int step) {
    /* conv_first, 2 blocks x 2 convs, upsample1, upsample2, conv_hr,
     * conv_last: weight and bias each. */
    assert_int_equal(tu_ref_compare_grads(root, st, step), 2 * (1 + 2 * 2 + 4));
}

static void test_basic_restorer_train_step_vs_pytorch(void **state) {
    (void)state;
    static const char *const parts[1] = {"generator"};
    duet_st *st = tu_ref_load("basic_restorer.safetensors");
    duet_basic_restorer_opts o = duet_basic_restorer_opts_default();
    o.generator.mid_channels = 16;
    o.generator.num_blocks = 2;
    duet_rng rng = duet_rng_make(3, 0);
    duet_model *m = NULL;
    TU_OK(duet_basic_restorer_create(&o, &rng, &m));
    duet_module *root = duet_model_module(m);
    tu_ref_load_state(root, st, "init.");
    duet_optimizer_set *opts = NULL;
    TU_OK(duet_optimizer_set_create(&opts));
    duet_adam_opts a = duet_adam_opts_default();
    a.lr = (float)LR;
    TU_OK(duet_optimizer_set_add_adam(opts, m, "generator", &a));
    duet_batch b = {0};
    duet_tensor *lq = tu_ref_tensor(st, "lq"), *gt = tu_ref_tensor(st, "gt");
    TU_OK(duet_batch_add_tensor(&b, "lq", lq));
    TU_OK(duet_batch_add_tensor(&b, "gt", gt));
    duet_log_vars log;
    /* 2 steps of ref_basic_restorer.py, 10 of MMEditing's (see
     * test_ref_srgan.c). */
    int step = 1;
    for (char key[32] = "log1.loss_pix"; duet_st_has(st, key);
         snprintf(key, sizeof key, "log%d.loss_pix", ++step)) {
        TU_OK(duet_model_train_step(m, &b, opts, &log));
        tu_compare_distance(root, st, step, parts, 1);
        if (step > 2) continue;
        compare_log(st, &log, step);
        compare_grads(root, st, step);
        tu_ref_compare_state(root, st, step, LR, 0);
        tu_compare_adam_moments(opts, parts, 1, st, step);
    }
    assert_true(step - 1 >= 2);
    assert_int_equal(duet_tape_size(), 0);
    duet_batch_clear(&b);
    duet_tensor_release(lq);
    duet_tensor_release(gt);
    duet_optimizer_set_destroy(opts);
    duet_model_destroy(m);
    duet_st_destroy(st);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_basic_restorer_train_step_vs_pytorch),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
