/* PConvInpaintor's train_step against MMEditing 0.16.1's own
 * (tests/ref/gen_mmedit_refs.py, PConvInpaintorSpec ->
 * pconv_inpaintor.safetensors): pconv_256x256_stage1_8x1_places.py on
 * 32x32 images with 4 layers and BatchNorm, its losses (L1 hole and valid,
 * perceptual and style on the composite and on the raw output, masked TV)
 * over a tiny VGG, built by duet's registry from the same keys
 * (tu_pconv_ref_model). duet loads the reference's init.* strictly by name
 * (generator.*, the partial convs' weight_mask_updater buffers, and
 * loss_percep.vgg.*: the frozen VGG is in MMEditing's state dict). Steps 1
 * and 2 compare every log value, every gradient the update used, Adam's
 * moments and every state entry; all 4 steps (the file's: 4.5M parameters
 * and their mask updaters per step) the distance from the float64 run
 * (issue 19's yardstick). PyTorch float32 lands far from its
 * float64 run here (1.6e-3 after step 1, 1.4e-2 after step 10 of a 10-step
 * file; duet 5.8e-5 and 1.5e-5), so the allowances this test derives from it are loose: a
 * partial conv's eps of 1e-3 instead of 1e-8 passes here and fails
 * test_ref_pconv.c's network check, which pins the numerics without them.
 * Runs as the `mmedit` test mmedit_pconv_inpaintor. */
#include "testutil.h"

#include <stdio.h>

#define LR 2e-4

static const char *const log_keys[8] = {
    "loss_l1_hole",    "loss_l1_valid",  "loss_composed_percep", "loss_composed_style",
    "loss_out_percep", "loss_out_style", "loss_tv",              "loss"};

static void test_pconv_inpaintor_train_step_vs_mmedit(void **state) {
    static const char *const parts[1] = {"generator"};
    (void)state;
    duet_st *st = tu_ref_load("pconv_inpaintor.safetensors");
    duet_model *m = tu_pconv_ref_model(5);
    duet_module *root = duet_model_module(m);
    tu_ref_load_state(root, st, "init.");
    duet_optimizer_set *opts = NULL;
    TU_OK(duet_optimizer_set_create(&opts));
    duet_adam_opts a = duet_adam_opts_default();
    a.lr = (float)LR;
    TU_OK(duet_optimizer_set_add_adam(opts, m, "generator", &a));
    duet_batch b = {0};
    static const char *const keys[3] = {"gt_img", "mask", "masked_img"};
    assert_int_equal(tu_ref_batch(&b, st, keys, 3), 3);
    duet_log_vars log;
    int step = 1;
    for (char key[32] = "log1.loss"; duet_st_has(st, key);
         snprintf(key, sizeof key, "log%d.loss", ++step)) {
        TU_OK(duet_model_train_step(m, &b, opts, &log));
        tu_compare_distance(root, st, step, parts, 1);
        if (step > 2) continue;
        tu_ref_compare_log(st, &log, step, log_keys, 8);
        assert_int_equal(tu_ref_compare_part_grads(m, st, step, parts, 1), 1);
        tu_ref_compare_state_noisy(root, st, step, LR, 0, 1.0 / 12);
        tu_compare_adam_moments(opts, parts, 1, st, step);
    }
    assert_int_equal(step - 1, 4); /* gen_mmedit_refs.py's PConvInpaintorSpec.steps */
    assert_int_equal(duet_tape_size(), 0);
    duet_batch_clear(&b);
    duet_optimizer_set_destroy(opts);
    duet_model_destroy(m);
    duet_st_destroy(st);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pconv_inpaintor_train_step_vs_mmedit),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
