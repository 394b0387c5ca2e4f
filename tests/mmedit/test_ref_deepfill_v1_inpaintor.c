/* DeepFillv1Inpaintor and TwoStageInpaintor (src/models/two_stage_inpaintor.c).
 * DeepFillv1Inpaintor's train_step against MMEditing 0.16.1's own
 * (tests/ref/gen_mmedit_refs.py, DeepFillv1Inpaintor ->
 * deepfill_v1_inpaintor.safetensors): the model built by MMEditing's
 * registry from deepfillv1_256x256_8x2_places.py shrunk to 72x72
 * (tu_tiny_deepfill_v1_opts), disc_step 2, the penalty's alphas from duet's
 * rng on both sides. Step 1 updates the discriminators alone (fake, real,
 * both penalties), step 2 both; those two compare every log value, every
 * gradient each update used, the Adam moments and every state-dict entry;
 * all 10 the distance from MMEditing's float64 run. Runs as the `mmedit`
 * test mmedit_deepfill_v1_inpaintor. The penalty's second-order gradient
 * on its own, through each of DeepFillv1's discriminators, is
 * mmedit_deepfill_discs' (test_ref_deepfill_discs.c, gp.*).
 * The tests named test_ts_unit_* need no reference and run as the unit
 * test two_stage_inpaintor: which part each step updates for disc_step 3
 * and the log keys of each step (DeepFillv1 with the penalty; a
 * TwoStageInpaintor with the mask as the discriminator's fourth channel,
 * an SN discriminator and hinge loss, and one with WGAN-GP on its one
 * discriminator; disc_step 0, the generator alone), a bitwise resume in the middle of a
 * run of discriminator steps (the penalty's rng included), val_step and
 * forward, and the errors (options and config). */
#include "testutil.h"

#include "duet/train.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#define LR 1e-4
enum { S = 72 };

static duet_model *make_model(const duet_two_stage_inpaintor_opts *o) {
    duet_rng rng = duet_rng_make(5, 0);
    duet_model *m = NULL;
    TU_OK(duet_two_stage_inpaintor_create(o, &rng, &m));
    return m;
}

static duet_optimizer_set *adam_pair(duet_model *m) {
    duet_optimizer_set *s = NULL;
    TU_OK(duet_optimizer_set_create(&s));
    duet_adam_opts a = duet_adam_opts_default();
    a.lr = (float)LR; /* the DeepFill configs' Adam(lr=0.0001), betas (0.9, 0.999) */
    TU_OK(duet_optimizer_set_add_adam(s, m, "generator", &a));
    TU_OK(duet_optimizer_set_add_adam(s, m, "disc", &a));
    return s;
}

/* The batch of two 72x72 samples: from the reference file, or (no fixture)
 * made here the same way: images in [-1, 1], box holes. */
static void make_batch(duet_batch *b, const duet_st *st) {
    static const char *const keys[4] = {"gt_img", "mask", "masked_img", "mask_bbox"};
    if (st != NULL) {
        assert_int_equal(tu_ref_batch(b, st, keys, 4), 4);
        return;
    }
    static const int boxes[2][4] = {{20, 18, 24, 28}, {30, 36, 20, 16}};
    duet_tensor *gt = NULL;
    TU_OK(duet_tensor_create(4, (int64_t[]){2, 3, S, S}, &gt));
    duet_rng r = duet_rng_make(12, 0);
    for (int64_t i = 0; i < gt->numel; i++) gt->data[i] = 2.0f * (float)duet_rng_uniform(&r) - 1;
    tu_inpainting_batch(b, gt, boxes, true);
}

/* MMEditing's log keys of DeepFillv1Inpaintor's train_step; a step holds
 * those of the parts that moved. */
static const char *const log_keys[] = {
        "fake_loss_global",    "fake_loss_local",      "loss_disc_shift_global",
        "loss_disc_shift_local", "real_loss_global",   "real_loss_local",
        "loss_gp_global",      "loss_gp_local",        "stage1_loss_l1_hole",
        "stage1_loss_l1_valid", "stage2_loss_l1_hole", "stage2_loss_l1_valid",
        "stage2_loss_g_fake"};
enum { NLOG = sizeof log_keys / sizeof *log_keys };

static void test_deepfill_v1_train_step_vs_mmedit(void **state) {
    static const char *const parts[2] = {"generator", "disc"};
    (void)state;
    duet_st *st = tu_ref_load("deepfill_v1_inpaintor.safetensors");
    duet_two_stage_inpaintor_opts o = tu_tiny_deepfill_v1_opts();
    o.disc_step = 2;
    duet_model *m = make_model(&o);
    duet_module *root = duet_model_module(m);
    tu_ref_load_state(root, st, "init.");
    duet_optimizer_set *opts = adam_pair(m);
    duet_batch b = {0};
    make_batch(&b, st);
    duet_log_vars log;
    int step = 1;
    for (char key[64] = "step1.disc.local_disc.fc.linear.bias"; duet_st_has(st, key);
         snprintf(key, sizeof key, "step%d.disc.local_disc.fc.linear.bias", ++step)) {
        TU_OK(duet_model_train_step(m, &b, opts, &log));
        tu_compare_distance(root, st, step, parts, 2);
        if (step > 2) continue;
        tu_ref_compare_log_present(st, &log, step, log_keys, NLOG);
        assert_int_equal(tu_ref_compare_part_grads(m, st, step, parts, 2), step); /* D; D then G */
        tu_ref_compare_state(root, st, step, LR, 0);
        /* MMEditing's Adam has no state before its first step (duet's
         * holds zeros): the generator's from step 2 on. */
        static const char *const disc_only[1] = {"disc"};
        if (step == 1) tu_compare_adam_moments(opts, disc_only, 1, st, step);
        else tu_compare_adam_moments(opts, parts, 2, st, step);
    }
    assert_true(step - 1 >= 2);
    assert_int_equal(duet_tape_size(), 0);
    duet_batch_clear(&b);
    duet_optimizer_set_destroy(opts);
    duet_model_destroy(m);
    duet_st_destroy(st);
}

/* DeepFillv2's TwoStageInpaintor in small: the DeepFillv1 generator of
 * tu_tiny_deepfill_v1_opts, an SN MultiLayerDiscriminator on cat(image,
 * mask) (3 convs of 8 channels, LeakyReLU, fc 8*9*9 to 1), hinge 0.1. */
static duet_two_stage_inpaintor_opts tiny_two_stage(void) {
    duet_two_stage_inpaintor_opts o = tu_tiny_deepfill_v1_opts();
    o.deepfill_v1 = false;
    o.disc = o.discs.global;
    o.disc.in_channels = 4;
    o.disc.max_channels = 8;
    o.disc.num_convs = 3;
    o.disc.fc_in_channels = 8 * 9 * 9;
    o.disc.act = o.disc.out_act = DUET_MLD_ACT_LRELU;
    o.disc.with_spectral_norm = true;
    o.disc_input_with_mask = true;
    o.gp_weight = 0.0f;
    o.disc_shift_weight = 0.0f;
    o.loss_gan.gan_type = "hinge";
    o.loss_gan.loss_weight = 0.1f;
    return o;
}

/* Whether each part's first parameter moved in the last step. */
static void moved(duet_model *m, float *last_g, float *last_d, bool *g, bool *d) {
    duet_named_tensors lg = {0}, ld = {0};
    TU_OK(duet_module_named_parameters(duet_model_part(m, "generator"), false, &lg));
    TU_OK(duet_module_named_parameters(duet_model_part(m, "disc"), false, &ld));
    const float vg = lg.items[0].tensor->data[0], vd = ld.items[0].tensor->data[0];
    *g = vg != *last_g;
    *d = vd != *last_d;
    *last_g = vg;
    *last_d = vd;
    duet_named_tensors_clear(&lg);
    duet_named_tensors_clear(&ld);
}

/* Which keys the log of a step holds: every one of want (n) and no other. */
static void log_is(const duet_log_vars *log, const char *const *want, int n, int step) {
    /* Every step parses some losses: MMEditing's total "loss" is there too. */
    double total = NAN;
    if (!duet_log_vars_get(log, "loss", &total) || !isfinite(total))
        fail_msg("step %d: no finite log value loss", step);
    n++;
    for (int i = 0; i < n - 1; i++) {
        double v = NAN;
        if (!duet_log_vars_get(log, want[i], &v)) fail_msg("step %d: no log value %s", step, want[i]);
        if (!isfinite(v)) fail_msg("step %d: %s = %g", step, want[i], v);
    }
    if (log->count != n) {
        char all[512] = "";
        for (int i = 0; i < log->count; i++) {
            strncat(all, " ", sizeof all - strlen(all) - 1);
            strncat(all, log->names[i], sizeof all - strlen(all) - 1);
        }
        fail_msg("step %d: %d log values (want %d):%s", step, log->count, n, all);
    }
}

/* disc_step 3: D, D, D+G, D, D, D+G; the log holds what ran, under
 * MMEditing's names. */
static void schedule(duet_two_stage_inpaintor_opts o, const char *const *d_keys, int nd,
                     const char *const *g_keys, int ng) {
    o.disc_step = 3;
    duet_model *m = make_model(&o);
    duet_optimizer_set *opts = adam_pair(m);
    duet_batch b = {0};
    make_batch(&b, NULL);
    float lg = NAN, ld = NAN;
    bool g = false, d = false;
    moved(m, &lg, &ld, &g, &d);
    duet_log_vars log;
    for (int it = 0; it < 6; it++) {
        TU_OK(duet_model_train_step(m, &b, opts, &log));
        moved(m, &lg, &ld, &g, &d);
        const bool want_g = it % 3 == 2;
        if (g != want_g || !d)
            fail_msg("step %d: generator %s, discriminator %s (want %s, updated)", it,
                     g ? "updated" : "not updated", d ? "updated" : "not updated",
                     want_g ? "updated" : "not updated");
        const char *keys[16];
        int n = 0;
        for (int i = 0; i < nd; i++) keys[n++] = d_keys[i];
        for (int i = 0; i < ng && want_g; i++) keys[n++] = g_keys[i];
        log_is(&log, keys, n, it);
        assert_int_equal(duet_two_stage_inpaintor_disc_step_count(m), (it + 1) % 3);
        assert_int_equal(duet_tape_size(), 0);
    }
    duet_batch_clear(&b);
    duet_optimizer_set_destroy(opts);
    duet_model_destroy(m);
}

static void test_ts_unit_schedule_deepfill_v1(void **state) {
    (void)state;
    static const char *const d_keys[] = {
        "fake_loss_global", "fake_loss_local", "loss_disc_shift_global", "loss_disc_shift_local",
        "real_loss_global", "real_loss_local", "loss_gp_global", "loss_gp_local"};
    static const char *const g_keys[] = {"stage1_loss_l1_hole", "stage1_loss_l1_valid",
                                         "stage2_loss_l1_hole", "stage2_loss_l1_valid",
                                         "stage2_loss_g_fake"};
    schedule(tu_tiny_deepfill_v1_opts(), d_keys, 8, g_keys, 5);
}

static void test_ts_unit_schedule_two_stage(void **state) {
    (void)state;
    static const char *const d_keys[] = {"fake_loss", "real_loss"};
    static const char *const g_keys[] = {"stage1_loss_l1_hole", "stage1_loss_l1_valid",
                                         "stage2_loss_l1_hole", "stage2_loss_l1_valid",
                                         "stage2_loss_g_fake"};
    schedule(tiny_two_stage(), d_keys, 2, g_keys, 5);
    /* WGAN-GP on TwoStageInpaintor's one discriminator (no spectral norm,
     * the image alone), with DiscShiftLoss */
    static const char *const d_keys_gp[] = {"fake_loss", "loss_disc_shift", "real_loss",
                                            "loss_gp"};
    duet_two_stage_inpaintor_opts gp = tiny_two_stage();
    gp.disc.with_spectral_norm = gp.disc_input_with_mask = false;
    gp.disc.in_channels = 3;
    gp.gp_weight = 10.0f;
    gp.disc_shift_weight = 0.001f;
    gp.loss_gan.gan_type = "wgan";
    schedule(gp, d_keys_gp, 4, g_keys, 5);
    /* disc_step 0: the generator alone, every step; loss_gan in stage 1
     * too (TwoStageInpaintor's discriminator takes any image). */
    duet_two_stage_inpaintor_opts o = tiny_two_stage();
    o.disc_step = 0;
    o.stage1[o.nstage1++] = DUET_INPAINT_LOSS_GAN;
    duet_model *m = make_model(&o);
    duet_optimizer_set *opts = adam_pair(m);
    duet_batch b = {0};
    make_batch(&b, NULL);
    duet_log_vars log;
    float lg = NAN, ld = NAN;
    bool g = false, d = false;
    moved(m, &lg, &ld, &g, &d);
    static const char *const keys[] = {"stage1_loss_l1_hole", "stage1_loss_l1_valid",
                                       "stage1_loss_g_fake", "stage2_loss_l1_hole",
                                       "stage2_loss_l1_valid", "stage2_loss_g_fake"};
    for (int it = 0; it < 2; it++) {
        TU_OK(duet_model_train_step(m, &b, opts, &log));
        moved(m, &lg, &ld, &g, &d);
        assert_true(g);
        assert_false(d);
        log_is(&log, keys, 6, it);
    }
    duet_batch_clear(&b);
    duet_optimizer_set_destroy(opts);
    duet_model_destroy(m);
}

/* Steps 0..k-1, a checkpoint (weights, both optimizers, the model's state
 * through its save/load hooks: disc_step_count and the penalty's rng), then
 * the rest on a fresh model: bitwise the uninterrupted run. */
static void resume_at(const duet_two_stage_inpaintor_opts *o, int k, int total) {
    duet_batch b = {0};
    make_batch(&b, NULL);
    duet_log_vars log;
    duet_model *full = make_model(o);
    duet_optimizer_set *fo = adam_pair(full);
    for (int i = 0; i < total; i++) TU_OK(duet_model_train_step(full, &b, fo, &log));

    duet_model *first = make_model(o);
    duet_optimizer_set *o1 = adam_pair(first);
    for (int i = 0; i < k; i++) TU_OK(duet_model_train_step(first, &b, o1, &log));
    duet_st_writer *w = NULL;
    TU_OK(duet_st_writer_create(&w));
    TU_OK(duet_module_save_state(duet_model_module(first), w, "model."));
    TU_OK(duet_optimizer_save_state(duet_optimizer_set_get(o1, "generator"), w, "opt_g."));
    TU_OK(duet_optimizer_save_state(duet_optimizer_set_get(o1, "disc"), w, "opt_d."));
    TU_OK(duet_model_save_state(first, w));
    char dir[256], path[300];
    assert_non_null(tu_mkdtemp(dir, sizeof dir, "duet_ts_resume"));
    tu_path(path, sizeof path, dir, "ckpt.safetensors");
    TU_OK(duet_st_writer_save(w, path));
    duet_st_writer_destroy(w);

    duet_model *resumed = make_model(o);
    duet_optimizer_set *o2 = adam_pair(resumed);
    duet_st *ck = NULL;
    TU_OK(duet_st_load(path, &ck));
    TU_OK(duet_module_load_state(duet_model_module(resumed), ck, "model.", true, NULL, NULL));
    TU_OK(duet_optimizer_load_state(duet_optimizer_set_get(o2, "generator"), ck, "opt_g."));
    TU_OK(duet_optimizer_load_state(duet_optimizer_set_get(o2, "disc"), ck, "opt_d."));
    TU_OK(duet_model_load_state(resumed, ck));
    duet_st_destroy(ck);
    assert_int_equal(duet_two_stage_inpaintor_disc_step_count(resumed),
                     duet_two_stage_inpaintor_disc_step_count(first));
    assert_true(duet_two_stage_inpaintor_gp_rng(resumed)->counter ==
                duet_two_stage_inpaintor_gp_rng(first)->counter);
    for (int i = k; i < total; i++) TU_OK(duet_model_train_step(resumed, &b, o2, &log));
    tu_assert_same_state(duet_model_module(full), duet_model_module(resumed), true);
    assert_true(duet_two_stage_inpaintor_gp_rng(resumed)->counter ==
                duet_two_stage_inpaintor_gp_rng(full)->counter);

    duet_optimizer_set_destroy(fo);
    duet_optimizer_set_destroy(o1);
    duet_optimizer_set_destroy(o2);
    duet_model_destroy(full);
    duet_model_destroy(first);
    duet_model_destroy(resumed);
    tu_rm_tree(dir);
    duet_batch_clear(&b);
}

/* disc_step 3, stopped after step 4 of 6 (disc_step_count 1: inside a run
 * of discriminator steps); the penalty draws 4 alphas a step. */
static void test_ts_unit_resume_bitwise(void **state) {
    (void)state;
    duet_two_stage_inpaintor_opts o = tu_tiny_deepfill_v1_opts();
    o.disc_step = 3;
    resume_at(&o, 4, 6);
}

/* val_step: the composite of stage 2's output with the known pixels (equal
 * to masked_img outside the hole, bitwise), l1/psnr/ssim when the batch
 * has gt_img; forward on cat(masked_img, mask) gives the same image. */
static void test_ts_unit_val_step(void **state) {
    (void)state;
    duet_two_stage_inpaintor_opts o = tu_tiny_deepfill_v1_opts();
    o.nmetrics = 3;
    o.metrics[0] = "l1";
    o.metrics[1] = "psnr";
    o.metrics[2] = "ssim";
    duet_model *m = make_model(&o);
    assert_string_equal(duet_model_input_key(m), "masked_img");
    duet_batch b = {0};
    make_batch(&b, NULL);
    duet_val_output v = {0};
    TU_OK(duet_model_val_step(m, &b, &v));
    assert_int_equal(v.nsamples, 2);
    assert_int_equal(v.metrics.count, 3);
    double l1 = 0, psnr = 0, ssim = 0;
    assert_true(duet_log_vars_get(&v.metrics, "l1", &l1));
    assert_true(duet_log_vars_get(&v.metrics, "psnr", &psnr));
    assert_true(duet_log_vars_get(&v.metrics, "ssim", &ssim));
    assert_true(l1 > 0 && l1 < 2);
    assert_true(psnr > 0 && isfinite(psnr));
    assert_true(ssim > 0 && ssim < 1);
    duet_tensor *mask = duet_batch_tensor_get(&b, "mask");
    duet_tensor *masked = duet_batch_tensor_get(&b, "masked_img");
    int64_t holes = 0;
    for (int64_t i = 0; i < v.output->numel; i++) {
        const int64_t n = i / (3 * S * S), p = i % (S * S);
        if (mask->data[n * S * S + p] == 0.0f) assert_true(v.output->data[i] == masked->data[i]);
        else holes += v.output->data[i] != masked->data[i];
    }
    assert_true(holes > 0);
    duet_tensor *pair[2] = {masked, mask}, *x = NULL, *y = NULL;
    TU_OK(duet_concat_channels(2, pair, &x));
    TU_OK(duet_model_forward(m, x, &y));
    assert_memory_equal(y->data, v.output->data, (size_t)y->numel * sizeof(float));
    duet_tensor_release(x);
    duet_tensor_release(y);
    tu_expect_error(duet_model_forward(m, masked, &y), DUET_ESHAPE, "cat(masked_img, mask)", NULL);
    duet_val_output_clear(&v);
    duet_batch_clear(&b);
    duet_model_destroy(m);
}

static void create_fails(const duet_two_stage_inpaintor_opts *o, const char *needle) {
    duet_rng rng = duet_rng_make(5, 0);
    duet_model *m = NULL;
    tu_expect_error(duet_two_stage_inpaintor_create(o, &rng, &m), DUET_EINVAL, needle, NULL);
    assert_null(m);
}

/* Options MMEditing fails on, or that duet cannot run, are refused with
 * what is wrong; a hole box larger than local_size fails the step. */
static void test_ts_unit_errors(void **state) {
    (void)state;
    duet_two_stage_inpaintor_opts o = tu_tiny_deepfill_v1_opts();
    o.local_h = o.local_w = 16;
    duet_model *m = make_model(&o);
    duet_optimizer_set *opts = adam_pair(m);
    duet_batch b = {0};
    make_batch(&b, NULL);
    duet_log_vars log;
    tu_expect_error(duet_model_train_step(m, &b, opts, &log), DUET_EINVAL,
                    "larger than train_cfg.local_size", NULL);
    assert_int_equal(duet_tape_size(), 0);
    duet_batch_clear(&b);
    duet_optimizer_set_destroy(opts);
    duet_model_destroy(m);

    o = tu_tiny_deepfill_v1_opts();
    o.l1_valid_weight = 0.0f;
    create_fails(&o, "stage1_loss_type names 'loss_l1_valid' but the model has no loss_l1_valid");
    o = tu_tiny_deepfill_v1_opts();
    o.stage1[o.nstage1++] = DUET_INPAINT_LOSS_GAN;
    create_fails(&o, "'loss_gan' in stage1_loss_type");
    o = tu_tiny_deepfill_v1_opts();
    o.nstage1 = o.nstage2 = 0;
    create_fails(&o, "both empty");
    o = tu_tiny_deepfill_v1_opts();
    o.input_with_ones = false;
    create_fails(&o, "encdec.stage1.encoder.in_channels is 5");
    o = tiny_two_stage();
    o.gp_weight = 10.0f;
    create_fails(&o, "loss_gp with disc_input_with_mask");
    o = tiny_two_stage();
    o.disc_input_with_mask = false;
    o.disc.in_channels = 3;
    o.gp_weight = 10.0f;
    create_fails(&o, "loss_gp through a discriminator with with_spectral_norm");
    o = tu_tiny_deepfill_v1_opts();
    o.discs.local.with_norm = true;
    create_fails(&o, "loss_gp through a discriminator local_disc with norm_cfg");
    o = tiny_two_stage();
    o.disc_input_with_mask = false;
    create_fails(&o, "disc.in_channels is 4");
    o = tu_tiny_deepfill_v1_opts();
    o.metrics[0] = "PSNR";
    create_fails(&o, "metric 'PSNR'");
}

/* DeepFillv1Inpaintor from a config in MMEditing's keys (its DeepFillv1
 * config's model at tu_tiny_deepfill_v1_opts' sizes): the parts and
 * options of the C helper; keys duet cannot honour are named. */
static const char *const v1_model =
    "  encdec = { type = \"DeepFillEncoderDecoder\";\n"
    "    stage1 = { type = \"GLEncoderDecoder\";\n"
    "      encoder = { type = \"DeepFillEncoder\"; channel_factor = 0.25; padding_mode = \"reflect\"; };\n"
    "      decoder = { type = \"DeepFillDecoder\"; in_channels = 32; channel_factor = 0.25;"
    " padding_mode = \"reflect\"; };\n"
    "      dilation_neck = { type = \"GLDilationNeck\"; in_channels = 32;"
    " act_cfg = { type = \"ELU\"; }; padding_mode = \"reflect\"; }; };\n"
    "    stage2 = { type = \"DeepFillRefiner\";\n"
    "      encoder_attention = { type = \"DeepFillEncoder\"; encoder_type = \"stage2_attention\";"
    " channel_factor = 0.25; padding_mode = \"reflect\"; };\n"
    "      encoder_conv = { type = \"DeepFillEncoder\"; encoder_type = \"stage2_conv\";"
    " channel_factor = 0.25; padding_mode = \"reflect\"; };\n"
    "      dilation_neck = { type = \"GLDilationNeck\"; in_channels = 32;"
    " act_cfg = { type = \"ELU\"; }; padding_mode = \"reflect\"; };\n"
    "      contextual_attention = { type = \"ContextualAttentionNeck\"; in_channels = 32;"
    " padding_mode = \"reflect\"; };\n"
    "      decoder = { type = \"DeepFillDecoder\"; in_channels = 64; channel_factor = 0.25;"
    " padding_mode = \"reflect\"; }; }; };\n"
    "  disc = { type = \"DeepFillv1Discriminators\";\n"
    "    global_disc_cfg = { type = \"MultiLayerDiscriminator\"; in_channels = 3; max_channels = 16;"
    " fc_in_channels = 400; fc_out_channels = 1; num_convs = 4; act_cfg = { type = \"ELU\"; };"
    " out_act_cfg = { type = \"LeakyReLU\"; negative_slope = 0.2; }; };\n"
    "    local_disc_cfg = { type = \"MultiLayerDiscriminator\"; in_channels = 3; max_channels = 16;"
    " fc_in_channels = 64; fc_out_channels = 1; num_convs = 4; act_cfg = { type = \"ELU\"; };"
    " out_act_cfg = { type = \"LeakyReLU\"; negative_slope = 0.2; }; }; };\n"
    "  stage1_loss_type = [\"loss_l1_hole\", \"loss_l1_valid\"];\n"
    "  stage2_loss_type = [\"loss_l1_hole\", \"loss_l1_valid\", \"loss_gan\"];\n"
    "  loss_gan = { type = \"GANLoss\"; gan_type = \"wgan\"; loss_weight = 0.01; };\n"
    "  loss_l1_hole = { type = \"L1Loss\"; loss_weight = 1.0; };\n"
    "  loss_l1_valid = { type = \"L1Loss\"; loss_weight = 1.0; };\n"
    "  loss_gp = { type = \"GradientPenaltyLoss\"; loss_weight = 10.0; };\n"
    "  loss_disc_shift = { type = \"DiscShiftLoss\"; loss_weight = 0.001; };\n";

static int build_typed(const char *type, const char *model_keys, const char *extra,
                       duet_model **m) {
    char text[8192];
    snprintf(text, sizeof text, "model = { type = \"%s\";\n%s%s };\n", type, model_keys, extra);
    duet_config *cfg = NULL;
    TU_OK(duet_config_load_string(text, "<cfg>", &cfg));
    duet_rng rng = duet_rng_make(5, 0);
    *m = NULL;
    int rc = duet_build_model(cfg, "model", &rng, m);
    if (rc == DUET_OK) rc = duet_config_check_unused(cfg);
    duet_config_destroy(cfg);
    return rc;
}

static int build_model(const char *model_keys, const char *extra, duet_model **m) {
    return build_typed("DeepFillv1Inpaintor", model_keys, extra, m);
}

static void test_ts_unit_config(void **state) {
    (void)state;
    static const char *const cfgs =
        "  train_cfg = { disc_step = 5; local_size = [32, 32]; };\n"
        "  test_cfg = { metrics = [\"l1\", \"psnr\", \"ssim\"]; };\n";
    duet_model *m = NULL;
    TU_OK(build_model(v1_model, cfgs, &m));
    assert_string_equal(duet_model_type_name(m), "DeepFillv1Inpaintor");
    duet_two_stage_inpaintor_opts o = tu_tiny_deepfill_v1_opts();
    o.disc_step = 5;
    duet_model *c = make_model(&o);
    duet_named_tensors pa, pb;
    TU_OK(duet_module_named_parameters(duet_model_module(m), false, &pa));
    TU_OK(duet_module_named_parameters(duet_model_module(c), false, &pb));
    assert_int_equal(pa.count, pb.count);
    for (size_t i = 0; i < pa.count; i++) {
        assert_string_equal(pa.items[i].name, pb.items[i].name);
        assert_int_equal(pa.items[i].tensor->numel, pb.items[i].tensor->numel);
    }
    duet_named_tensors_clear(&pa);
    duet_named_tensors_clear(&pb);
    assert_non_null(duet_model_part(m, "loss_gp"));
    assert_non_null(duet_model_part(m, "loss_disc_shift"));
    duet_model_destroy(c);
    duet_model_destroy(m);

    tu_expect_error(build_model(v1_model, "  train_cfg = { disc_step = 5; };\n", &m),
                    DUET_ECONFIG, "train_cfg.local_size is required", NULL);
    tu_expect_error(build_model(v1_model, "  train_cfg = { local_size = [32, 32]; };\n", &m),
                    DUET_ECONFIG, "train_cfg.disc_step is required", NULL);
    char extra[1024];
    snprintf(extra, sizeof extra, "%s  loss_tv = { type = \"MaskedTVLoss\"; loss_weight = 0.1; };\n",
             cfgs);
    tu_expect_error(build_model(v1_model, extra, &m), DUET_ECONFIG, "'loss_tv'", NULL);
    /* a stage list naming a loss duet does not compute */
    char keys[8192];
    snprintf(keys, sizeof keys, "%s", v1_model);
    char *at = strstr(keys, "[\"loss_l1_hole\", \"loss_l1_valid\"]");
    assert_non_null(at);
    static const char repl[] = "[\"loss_tv\",      \"loss_l1_valid\"]";
    memcpy(at, repl, sizeof repl - 1);
    tu_expect_error(build_model(keys, cfgs, &m), DUET_ECONFIG, "'loss_tv' is not a loss duet "
                    "computes", NULL);
    /* TwoStageInpaintor's discriminator is one network */
    tu_expect_error(build_typed("TwoStageInpaintor", v1_model, cfgs, &m), DUET_EUNSUPPORTED,
                    "'DeepFillv1Discriminators' is not supported here (duet has "
                    "MultiLayerDiscriminator)", NULL);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_deepfill_v1_train_step_vs_mmedit),
        cmocka_unit_test(test_ts_unit_schedule_deepfill_v1),
        cmocka_unit_test(test_ts_unit_schedule_two_stage),
        cmocka_unit_test(test_ts_unit_resume_bitwise),
        cmocka_unit_test(test_ts_unit_val_step),
        cmocka_unit_test(test_ts_unit_errors),
        cmocka_unit_test(test_ts_unit_config),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
