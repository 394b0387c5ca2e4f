/* GLInpaintor's train_step against MMEditing 0.16.1's own (tests/ref/
 * gen_mmedit_refs.py, GLInpaintor -> gl_inpaintor.safetensors): the model
 * built by MMEditing's registry from gl_256x256_8x12_places.py shrunk to
 * 32x32 with the schedule iter_tc 0, iter_td 1, so step 1 trains the
 * generator on L1 alone, step 2 the discriminators alone, step 3 both.
 * Those three steps compare every log value, every gradient each update
 * used, the Adam moments and every state-dict entry; all 10 the distance
 * from MMEditing's float64 run (issue 19's yardstick). Runs as the `mmedit`
 * test mmedit_gl_inpaintor. Without the fixture, the schedule tests below
 * still run (they need no reference): which part each step updates for
 * disc_step 2, and a bitwise resume in the middle of a run of
 * discriminator steps and across the switch. */
#include "testutil.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#define LR 4e-4

static duet_gl_inpaintor_opts tiny_opts(void) { return tu_tiny_gl_inpaintor_opts(); }

static duet_model *make_model(const duet_gl_inpaintor_opts *o) {
    duet_rng rng = duet_rng_make(5, 0);
    duet_model *m = NULL;
    TU_OK(duet_gl_inpaintor_create(o, &rng, &m));
    return m;
}

static duet_optimizer_set *adam_pair(duet_model *m) {
    duet_optimizer_set *s = NULL;
    TU_OK(duet_optimizer_set_create(&s));
    duet_adam_opts a = duet_adam_opts_default();
    a.lr = (float)LR; /* the config's Adam(lr=0.0004), betas (0.9, 0.999) */
    TU_OK(duet_optimizer_set_add_adam(s, m, "generator", &a));
    TU_OK(duet_optimizer_set_add_adam(s, m, "disc", &a));
    return s;
}

/* The batch: from the reference file, or (no fixture) made here the same
 * way: random images in [-1, 1], box holes. */
static void make_batch(duet_batch *b, const duet_st *st) {
    static const char *const keys[4] = {"gt_img", "mask", "masked_img", "mask_bbox"};
    if (st != NULL) {
        assert_int_equal(tu_ref_batch(b, st, keys, 4), 4);
        return;
    }
    static const int boxes[2][4] = {{8, 10, 12, 14}, {3, 5, 16, 9}};
    duet_tensor *gt = NULL;
    TU_OK(duet_tensor_create(4, (int64_t[]){2, 3, 32, 32}, &gt));
    duet_rng r = duet_rng_make(12, 0);
    for (int64_t i = 0; i < gt->numel; i++) gt->data[i] = 2.0f * (float)duet_rng_uniform(&r) - 1;
    tu_inpainting_batch(b, gt, boxes, true);
}

/* MMEditing's log keys of GLInpaintor's train_step; a step holds those of
 * the parts that moved. */
static const char *const log_keys[6] = {"fake_loss", "real_loss", "loss_disc_shift",
                                        "loss_g_fake", "loss_l1_hole", "loss_l1_valid"};

static void test_gl_inpaintor_train_step_vs_mmedit(void **state) {
    static const char *const parts[2] = {"generator", "disc"};
    static const int parts_updated[3] = {1, 1, 2}; /* G; D; D then G */
    (void)state;
    duet_st *st = tu_ref_load("gl_inpaintor.safetensors");
    duet_gl_inpaintor_opts o = tiny_opts();
    duet_model *m = make_model(&o);
    duet_module *root = duet_model_module(m);
    tu_ref_load_state(root, st, "init.");
    duet_optimizer_set *opts = adam_pair(m);
    duet_batch b = {0};
    make_batch(&b, st);
    duet_log_vars log;
    int step = 1;
    for (char key[48] = "step1.disc.fc.bias"; duet_st_has(st, key);
         snprintf(key, sizeof key, "step%d.disc.fc.bias", ++step)) {
        TU_OK(duet_model_train_step(m, &b, opts, &log));
        tu_compare_distance(root, st, step, parts, 2);
        if (step > 3) continue;
        tu_ref_compare_log_present(st, &log, step, log_keys, 6);
        assert_int_equal(tu_ref_compare_part_grads(m, st, step, parts, 2), parts_updated[step - 1]);
        /* The elements with a noise-level reference gradient in some step
         * so far (below 3e-4 of their tensor's largest) are 2.4% of the
         * state after step 1 and 4.8% after step 3 (up to 4.9% of dec3's
         * weights in step 1): the GL generator's 256-channel convolutions at
         * 8x8 spread the gradients over more decades than SRGAN's, whose 1
         * in 50 is the default bound. Each stays within what Adam moves. */
        tu_ref_compare_state_noisy(root, st, step, LR, 0, 1.0 / 12);
        /* MMEditing's Adam has no state before its first step (duet's
         * holds zeros): the discriminators' from step 2 on. */
        tu_compare_adam_moments(opts, parts, step == 1 ? 1 : 2, st, step);
    }
    assert_true(step - 1 >= 3);
    assert_int_equal(duet_gl_inpaintor_cur_iter(m), step - 1);
    assert_int_equal(duet_tape_size(), 0);
    duet_batch_clear(&b);
    duet_optimizer_set_destroy(opts);
    duet_model_destroy(m);
    duet_st_destroy(st);
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

/* disc_step 2, iter_tc 1, iter_td 3, start_iter 0: MMEditing's schedule
 * updates G, G, D, D, D, D+G, D, D+G, ... (cur_iter 0 .. 7), and the log
 * holds the keys of what ran. */
static void test_gl_unit_schedule(void **state) {
    (void)state;
    duet_gl_inpaintor_opts o = tiny_opts();
    o.disc_step = 2;
    o.iter_tc = 1;
    o.iter_td = 3;
    duet_model *m = make_model(&o);
    duet_optimizer_set *opts = adam_pair(m);
    duet_batch b = {0};
    make_batch(&b, NULL);
    static const bool want_g[8] = {1, 1, 0, 0, 0, 1, 0, 1}, want_d[8] = {0, 0, 1, 1, 1, 1, 1, 1};
    static const bool want_adv[8] = {0, 0, 0, 0, 0, 1, 0, 1};
    float lg = NAN, ld = NAN;
    bool g = false, d = false;
    moved(m, &lg, &ld, &g, &d);
    duet_log_vars log;
    for (int it = 0; it < 8; it++) {
        TU_OK(duet_model_train_step(m, &b, opts, &log));
        moved(m, &lg, &ld, &g, &d);
        double v = 0;
        if (g != want_g[it] || d != want_d[it])
            fail_msg("cur_iter %d: generator %s, discriminators %s (want %s, %s)", it,
                     g ? "updated" : "not updated", d ? "updated" : "not updated",
                     want_g[it] ? "updated" : "not", want_d[it] ? "updated" : "not");
        assert_int_equal(duet_log_vars_get(&log, "loss_l1_hole", &v), want_g[it]);
        assert_int_equal(duet_log_vars_get(&log, "real_loss", &v), want_d[it]);
        assert_int_equal(duet_log_vars_get(&log, "loss_g_fake", &v), want_adv[it]);
        assert_int_equal(duet_gl_inpaintor_cur_iter(m), it + 1);
        assert_int_equal(duet_tape_size(), 0);
    }
    duet_batch_clear(&b);
    duet_optimizer_set_destroy(opts);
    duet_model_destroy(m);
}

/* Steps 0..k-1, a checkpoint (weights, both optimizers, the model's state
 * through its save/load hooks), then the rest on a fresh model: bitwise the
 * uninterrupted run. k = 3 stops between two discriminator steps of a run
 * (disc_step_count 1), k = 5 right after the switch to both. */
static void resume_at(int k, int total) {
    duet_gl_inpaintor_opts o = tiny_opts();
    o.disc_step = 2;
    o.iter_tc = 1;
    o.iter_td = 3;
    duet_batch b = {0};
    make_batch(&b, NULL);
    duet_log_vars log;
    duet_model *full = make_model(&o);
    duet_optimizer_set *fo = adam_pair(full);
    for (int i = 0; i < total; i++) TU_OK(duet_model_train_step(full, &b, fo, &log));

    duet_model *first = make_model(&o);
    duet_optimizer_set *o1 = adam_pair(first);
    for (int i = 0; i < k; i++) TU_OK(duet_model_train_step(first, &b, o1, &log));
    duet_st_writer *w = NULL;
    TU_OK(duet_st_writer_create(&w));
    TU_OK(duet_module_save_state(duet_model_module(first), w, "model."));
    TU_OK(duet_optimizer_save_state(duet_optimizer_set_get(o1, "generator"), w, "opt_g."));
    TU_OK(duet_optimizer_save_state(duet_optimizer_set_get(o1, "disc"), w, "opt_d."));
    TU_OK(duet_model_save_state(first, w));
    char dir[256], path[300];
    assert_non_null(tu_mkdtemp(dir, sizeof dir, "duet_gl_resume"));
    tu_path(path, sizeof path, dir, "ckpt.safetensors");
    TU_OK(duet_st_writer_save(w, path));
    duet_st_writer_destroy(w);

    duet_model *resumed = make_model(&o);
    duet_optimizer_set *o2 = adam_pair(resumed);
    duet_st *ck = NULL;
    TU_OK(duet_st_load(path, &ck));
    TU_OK(duet_module_load_state(duet_model_module(resumed), ck, "model.", true, NULL, NULL));
    TU_OK(duet_optimizer_load_state(duet_optimizer_set_get(o2, "generator"), ck, "opt_g."));
    TU_OK(duet_optimizer_load_state(duet_optimizer_set_get(o2, "disc"), ck, "opt_d."));
    TU_OK(duet_model_load_state(resumed, ck));
    duet_st_destroy(ck);
    assert_int_equal(duet_gl_inpaintor_cur_iter(resumed), k);
    assert_int_equal(duet_gl_inpaintor_disc_step_count(resumed),
                     duet_gl_inpaintor_disc_step_count(first));
    for (int i = k; i < total; i++) TU_OK(duet_model_train_step(resumed, &b, o2, &log));
    tu_assert_same_state(duet_model_module(full), duet_model_module(resumed), true);

    duet_optimizer_set_destroy(fo);
    duet_optimizer_set_destroy(o1);
    duet_optimizer_set_destroy(o2);
    duet_model_destroy(full);
    duet_model_destroy(first);
    duet_model_destroy(resumed);
    tu_rm_tree(dir);
    duet_batch_clear(&b);
}

static void test_gl_unit_resume_bitwise(void **state) {
    (void)state;
    resume_at(3, 6); /* inside a run of discriminator steps: count 1 */
    resume_at(5, 7); /* just after the switch to both */
}

/* val_step: the composite of the output with the known pixels (equal to
 * masked_img outside the hole, bitwise), l1/psnr/ssim when the batch has
 * gt_img; forward on cat(masked_img, mask) gives the same image. */
static void test_gl_unit_val_step(void **state) {
    (void)state;
    duet_gl_inpaintor_opts o = tiny_opts();
    o.nmetrics = 3;
    o.metrics[0] = "l1";
    o.metrics[1] = "psnr";
    o.metrics[2] = "ssim";
    duet_model *m = make_model(&o);
    duet_batch b = {0};
    make_batch(&b, NULL);
    duet_val_output v = {0};
    duet_module_train(duet_model_module(m), false);
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
        const int64_t n = i / (3 * 1024), p = i % 1024;
        if (mask->data[n * 1024 + p] == 0.0f) assert_true(v.output->data[i] == masked->data[i]);
        else holes += v.output->data[i] != masked->data[i];
    }
    assert_true(holes > 0);
    duet_tensor *pair[2] = {masked, mask}, *x = NULL, *y = NULL;
    TU_OK(duet_concat_channels(2, pair, &x));
    TU_OK(duet_model_forward(m, x, &y));
    assert_memory_equal(y->data, v.output->data, (size_t)y->numel * sizeof(float));
    duet_tensor_release(x);
    duet_tensor_release(y);
    duet_val_output_clear(&v);
    duet_batch_clear(&b);
    duet_model_destroy(m);
}

/* A hole box larger than local_size, and disc_step 0 with a stretch of
 * iterations left with nothing to train, are errors that say so. */
static void test_gl_unit_errors(void **state) {
    (void)state;
    duet_gl_inpaintor_opts o = tiny_opts();
    o.local_h = o.local_w = 10;
    duet_model *m = make_model(&o);
    duet_optimizer_set *opts = adam_pair(m);
    duet_batch b = {0};
    make_batch(&b, NULL);
    duet_log_vars log;
    assert_int_equal(duet_model_train_step(m, &b, opts, &log), DUET_EINVAL);
    assert_non_null(strstr(duet_last_error(), "larger than train_cfg.local_size"));
    assert_int_equal(duet_tape_size(), 0);
    duet_batch_clear(&b);
    duet_optimizer_set_destroy(opts);
    duet_model_destroy(m);
    o = tiny_opts();
    o.disc_step = 0;
    duet_rng rng = duet_rng_make(5, 0);
    assert_int_equal(duet_gl_inpaintor_create(&o, &rng, &m), DUET_EINVAL);
    assert_non_null(strstr(duet_last_error(), "nothing to train"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gl_inpaintor_train_step_vs_mmedit),
        cmocka_unit_test(test_gl_unit_schedule),
        cmocka_unit_test(test_gl_unit_resume_bitwise),
        cmocka_unit_test(test_gl_unit_val_step),
        cmocka_unit_test(test_gl_unit_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
