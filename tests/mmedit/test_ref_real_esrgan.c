/* RealESRGAN's train_step against MMEditing 0.16.1's own
 * (tests/ref/gen_mmedit_refs.py, RealESRGANSpec -> realesrnet.safetensors
 * and realesrgan.safetensors): both stages of MMEditing's Real-ESRGAN
 * configs shrunk, built by duet's registry from the same keys
 * (tu_real_esrgan_ref_model). duet loads the reference's init.* strictly
 * by name (generator_ema and step_counter included), so every name is
 * MMEditing's and no other entry exists on either side. After each
 * train_step the EMA hook's update (momentum 0.999, as the reference's
 * ExponentialMovingAverageHook) runs. Steps 1 and 2 compare the log
 * values, every gradient the updates used, Adam's moments and every state
 * entry (the discriminator's spectral-norm u and v, generator_ema and
 * step_counter among them); all 10 steps the distance from MMEditing's
 * float64 run (issue 19's yardstick). The GAN stage's start_iter 0 makes
 * its first step reload the generator from generator_ema, whose init the
 * reference moved away from the generator's. Runs as the `mmedit` tests
 * mmedit_realesrnet and mmedit_realesrgan (DUET_TEST_FILTER picks one). */
#include "testutil.h"

#include <stdio.h>

/* max_noisy: the share of state elements whose reference gradient may lie at
 * noise level (tu_ref_compare_state_noisy). */
static void train_step_vs_mmedit(const char *stage, double lr, int nparts, double max_noisy) {
    static const char *const parts[2] = {"generator", "discriminator"};
    static const char *const log_keys[] = {"loss_pix", "loss_perceptual", "loss_gan", "loss",
                                           "loss_d_real", "loss_d_fake"};
    char file[64];
    snprintf(file, sizeof file, "%s.safetensors", stage);
    duet_st *st = tu_ref_load(file);
    duet_model *m = tu_real_esrgan_ref_model(stage, 3);
    duet_module *root = duet_model_module(m);
    tu_ref_load_state(root, st, "init.");
    duet_optimizer_set *opts = NULL;
    TU_OK(duet_optimizer_set_create(&opts));
    duet_adam_opts a = duet_adam_opts_default();
    a.lr = (float)lr;
    a.beta2 = 0.99f; /* the configs' betas (0.9, 0.99) */
    for (int p = 0; p < nparts; p++) TU_OK(duet_optimizer_set_add_adam(opts, m, parts[p], &a));
    duet_batch b = {0};
    static const char *const keys[3] = {"lq", "gt", "gt_unsharp"};
    assert_int_equal(tu_ref_batch(&b, st, keys, 3), 3);
    duet_module *gen = duet_model_part(m, "generator");
    duet_module *ema = duet_model_part(m, "generator_ema");
    assert_non_null(ema);
    duet_log_vars log;
    int step = 1;
    for (char key[32] = "log1.loss_pix"; duet_st_has(st, key);
         snprintf(key, sizeof key, "log%d.loss_pix", ++step)) {
        TU_OK(duet_model_train_step(m, &b, opts, &log));
        TU_OK(duet_ema_update(ema, gen, 0.999f, 0.0f)); /* the runner's EMA hook */
        tu_compare_distance(root, st, step, parts, nparts);
        if (step > 2) continue;
        tu_ref_compare_log_present(st, &log, step, log_keys, sizeof log_keys / sizeof *log_keys);
        assert_int_equal(tu_ref_compare_part_grads(m, st, step, parts, nparts), nparts);
        tu_ref_compare_state_noisy(root, st, step, lr, 0, max_noisy);
        tu_compare_adam_moments(opts, parts, nparts, st, step);
    }
    assert_int_equal(step - 1, 10);
    assert_int_equal(duet_tape_size(), 0);
    duet_batch_clear(&b);
    duet_optimizer_set_destroy(opts);
    duet_model_destroy(m);
    duet_st_destroy(st);
}

static void test_realesrnet_train_step_vs_mmedit(void **state) {
    (void)state;
    /* The pixel loss alone on the x0.1-initialised RRDBNet spreads its
     * gradients over more decades than the 1 in 50 noise-level elements
     * the GAN stage stays under (as RDN's, test_ref_sr_backbones.c): by step
     * 2, 1183 of the 50,775 state elements (the generator's 25,387 and as
     * many of generator_ema, which has no gradient) lie below 3e-4 of
     * their tensor's largest gradient. */
    train_step_vs_mmedit("realesrnet", 2e-4, 1, 1.0 / 20);
}

static void test_realesrgan_train_step_vs_mmedit(void **state) {
    (void)state;
    train_step_vs_mmedit("realesrgan", 1e-4, 2, 1.0 / 50);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_realesrnet_train_step_vs_mmedit),
        cmocka_unit_test(test_realesrgan_train_step_vs_mmedit),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
