/* DeepFillv2's TwoStageInpaintor train_step against MMEditing 0.16.1's own
 * (tests/ref/gen_mmedit_refs.py, DeepFillv2 -> deepfillv2.safetensors):
 * the model of deepfillv2_256x256_8x2_places.py on 72x72 images, every
 * generator part's channels times 1/3, the SN-PatchGAN of 16 channels with
 * the mask as its fourth input channel, hinge loss 0.1, L1 in the hole and
 * in the valid region for both stages, disc_step 1, built by duet's
 * registry from the same keys (tu_deepfillv2_ref_model). duet loads the reference's init.* strictly
 * by name, the spectral norm's weight_u and weight_v included: the power
 * iteration that moves them in each of the discriminator's three training
 * forwards per step (fake, real, the generator's adversarial term) starts
 * from MMEditing's vectors.
 * Steps 1 and 2 compare every log value, every gradient each update used,
 * the Adam moments and every state-dict entry (the SN buffers are state
 * entries); all 10 steps the distance from MMEditing's float64 run (issue
 * 19's yardstick) and the SN buffers, which depend on the weights alone.
 * Runs as the `mmedit` test mmedit_deepfillv2. */
#include "testutil.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#define LR 1e-4

static const char *const log_keys[7] = {
    "fake_loss", "real_loss", "stage1_loss_l1_hole", "stage1_loss_l1_valid",
    "stage2_loss_l1_hole", "stage2_loss_l1_valid", "stage2_loss_g_fake"};

/* The spectral norm's buffers after `step` steps (0: init.*): six convs,
 * weight_u and weight_v each, to 1e-5 (unit vectors; the float32 power
 * iteration on weights within the state tolerance of float64's). Returns
 * the count. */
static int compare_sn_buffers(duet_model *m, const duet_st *st, int step) {
    duet_named_tensors l = {0};
    TU_OK(duet_module_named_buffers(duet_model_part(m, "disc"), &l));
    int n = 0;
    for (size_t i = 0; i < l.count; i++) {
        const char *name = l.items[i].name;
        const size_t len = strlen(name);
        if (len < 8 || (strcmp(name + len - 8, "weight_u") != 0 &&
                        strcmp(name + len - 8, "weight_v") != 0))
            continue;
        char key[256];
        if (step == 0) snprintf(key, sizeof key, "init.disc.%s", name);
        else snprintf(key, sizeof key, "step%d.disc.%s", step, name);
        tu_assert_ref(st, key, l.items[i].tensor->data, l.items[i].tensor->numel, 0, 1e-5);
        n++;
    }
    duet_named_tensors_clear(&l);
    return n;
}

static void make_batch(duet_batch *b, const duet_st *st) {
    static const char *const keys[3] = {"gt_img", "mask", "masked_img"};
    assert_int_equal(tu_ref_batch(b, st, keys, 3), 3);
}

static void test_deepfillv2_train_step_vs_mmedit(void **state) {
    static const char *const parts[2] = {"generator", "disc"};
    (void)state;
    duet_st *st = tu_ref_load("deepfillv2.safetensors");
    duet_model *m = tu_deepfillv2_ref_model();
    duet_module *root = duet_model_module(m);
    tu_ref_load_state(root, st, "init.");
    /* Loaded, not drawn: the first power iteration starts from MMEditing's u. */
    assert_int_equal(compare_sn_buffers(m, st, 0), 12);
    duet_optimizer_set *opts = tu_adam_pair(m, (float)LR);
    duet_batch b = {0};
    make_batch(&b, st);
    duet_log_vars log;
    int step = 1;
    for (char key[64] = "step1.disc.conv1.conv.weight_orig"; duet_st_has(st, key);
         snprintf(key, sizeof key, "step%d.disc.conv1.conv.weight_orig", ++step)) {
        TU_OK(duet_model_train_step(m, &b, opts, &log));
        tu_compare_distance(root, st, step, parts, 2);
        assert_int_equal(compare_sn_buffers(m, st, step), 12);
        if (step > 2) continue;
        tu_ref_compare_log(st, &log, step, log_keys, 7);
        /* both parts step in every step (disc_step 1) */
        assert_int_equal(tu_ref_compare_part_grads(m, st, step, parts, 2), 2);
        tu_ref_compare_state_noisy(root, st, step, LR, 0, 1.0 / 12);
        tu_compare_adam_moments(opts, parts, 2, st, step);
    }
    assert_int_equal(step - 1, 10);
    assert_int_equal(duet_tape_size(), 0);
    duet_batch_clear(&b);
    duet_optimizer_set_destroy(opts);
    duet_model_destroy(m);
    duet_st_destroy(st);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_deepfillv2_train_step_vs_mmedit),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
