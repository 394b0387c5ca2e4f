/* BasicRestorer around MMEditing's EDSR and RDN: train_step against
 * MMEditing 0.16.1's own (tests/ref/gen_mmedit_refs.py, edsr_spec ->
 * edsr.safetensors, rdn_spec -> rdn.safetensors), the models of
 * edsr_x4c64b16_g1_300k_div2k.py (res_scale 0.1, rgb_std (0.9, 1.1, 1.25))
 * and rdn_x3c64b16_g1_1000k_div2k.py shrunk, built by duet's registry from
 * the same keys (tu_sr_backbone_ref_model). duet loads the reference's
 * init.* strictly by name, so every parameter name is MMEditing's and no
 * other entry exists on either side. Steps 1 and 2 compare the log values,
 * every gradient the update used, Adam's moments and every state entry;
 * all 10 steps the distance from MMEditing's float64 run (issue 19's
 * yardstick: at most 3 times PyTorch float32's). Runs as the `mmedit`
 * tests mmedit_edsr and mmedit_rdn (DUET_TEST_FILTER picks one). */
#include "testutil.h"

#include <stdio.h>

#define LR 1e-4

/* max_noisy: the share of state elements whose reference gradient may lie at
 * noise level (tu_ref_compare_state_noisy). */
static void train_step_vs_mmedit(const char *name, int ngrads, double max_noisy) {
    static const char *const parts[1] = {"generator"};
    static const char *const log_keys[2] = {"loss_pix", "loss"};
    char file[64];
    snprintf(file, sizeof file, "%s.safetensors", name);
    duet_st *st = tu_ref_load(file);
    duet_model *m = tu_sr_backbone_ref_model(name, 3);
    duet_module *root = duet_model_module(m);
    tu_ref_load_state(root, st, "init.");
    duet_optimizer_set *opts = NULL;
    TU_OK(duet_optimizer_set_create(&opts));
    duet_adam_opts a = duet_adam_opts_default();
    a.lr = (float)LR;
    TU_OK(duet_optimizer_set_add_adam(opts, m, "generator", &a));
    duet_batch b = {0};
    static const char *const keys[2] = {"lq", "gt"};
    assert_int_equal(tu_ref_batch(&b, st, keys, 2), 2);
    duet_log_vars log;
    int step = 1;
    for (char key[32] = "log1.loss_pix"; duet_st_has(st, key);
         snprintf(key, sizeof key, "log%d.loss_pix", ++step)) {
        TU_OK(duet_model_train_step(m, &b, opts, &log));
        tu_compare_distance(root, st, step, parts, 1);
        if (step > 2) continue;
        tu_ref_compare_log(st, &log, step, log_keys, 2);
        assert_int_equal(tu_ref_compare_grads(root, st, step), ngrads);
        tu_ref_compare_state_noisy(root, st, step, LR, 0, max_noisy);
        tu_compare_adam_moments(opts, parts, 1, st, step);
    }
    assert_int_equal(step - 1, 10);
    assert_int_equal(duet_tape_size(), 0);
    duet_batch_clear(&b);
    duet_optimizer_set_destroy(opts);
    duet_model_destroy(m);
    duet_st_destroy(st);
}

static void test_edsr_train_step_vs_mmedit(void **state) {
    (void)state;
    /* conv_first, 2 blocks x 2 convs, conv_after_body, 2 upsample convs,
     * conv_last: weight and bias each. */
    train_step_vs_mmedit("edsr", 2 * (1 + 2 * 2 + 1 + 2 + 1), 1.0 / 50);
}

static void test_rdn_train_step_vs_mmedit(void **state) {
    (void)state;
    /* sfe1, sfe2, 3 RDBs x (3 dense layers + lff), gff.0, gff.1, one
     * upscale conv (x3), output: weight and bias each. RDN's gradients
     * spread over more decades than the 1 in 50 noise-level elements the
     * other restorers stay under: in step 1, 1488 of its 44,779 (3.3%) lie
     * below 3e-4 of their tensor's largest, most in the dense layers'
     * weights from input channels a ReLU left nearly dead (rdbs.2.layers.2:
     * 357 of 2304) and in upscale.0 (153). */
    train_step_vs_mmedit("rdn", 2 * (2 + 3 * (3 + 1) + 2 + 1 + 1), 1.0 / 20);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_edsr_train_step_vs_mmedit),
        cmocka_unit_test(test_rdn_train_step_vs_mmedit),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
