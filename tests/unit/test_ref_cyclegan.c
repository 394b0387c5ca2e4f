/* CycleGAN's train_step against PyTorch (tests/ref/ref_cyclegan.py: the
 * model written from MMEditing's cycle_gan.py and GANImageBuffer, same
 * weights, batch and pool draws): two steps, each comparing the log values,
 * every gradient the step's updates used, every state-dict entry and both
 * pools' images afterwards, at test_ref_srgan's tolerances. The pools hold 2
 * images and the batch 2, so step 2 runs the random branch (the reference
 * asserts that it both swaps and keeps). Also: disc_init_steps (no
 * generator step), buffer_size 0, val_step, a run resumed through the
 * model's save_state / load_state hooks matching an uninterrupted one
 * bitwise, and the registry's keys. */
#include "testutil.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#define LR 2e-4

static duet_cyclegan_opts tiny_opts(void) {
    duet_cyclegan_opts o = duet_cyclegan_opts_default();
    o.generator.base_channels = 4;
    o.generator.num_blocks = 1;
    o.discriminator.base_channels = 4;
    o.discriminator.num_conv = 2;
    o.buffer_size = 2;
    o.pool_seed = 2024;
    return o;
}

static duet_model *model_of(const duet_cyclegan_opts *o) {
    duet_rng rng = duet_rng_make(5, 0);
    duet_model *m = NULL;
    TU_OK(duet_cyclegan_create(o, &rng, &m));
    return m;
}

static duet_model *tiny_model(void) {
    duet_cyclegan_opts o = tiny_opts();
    return model_of(&o);
}

static duet_optimizer_set *adam_pair(duet_model *m) {
    duet_optimizer_set *s = NULL;
    TU_OK(duet_optimizer_set_create(&s));
    duet_adam_opts a = duet_adam_opts_default();
    a.lr = (float)LR;
    a.beta1 = 0.5f;
    TU_OK(duet_optimizer_set_add_adam(s, m, "generators", &a));
    TU_OK(duet_optimizer_set_add_adam(s, m, "discriminators", &a));
    return s;
}

static const char *const log_names[8] = {"loss_gan_d_a", "loss_gan_d_b", "loss_id_a",
                                         "loss_id_b",    "loss_gan_g_a", "loss_gan_g_b",
                                         "loss_cycle_a", "loss_cycle_b"};

static void compare_log(const duet_st *st, const duet_log_vars *log, int step) {
    /* The eight terms, then MMEditing's total: the generators'
     * parse_losses (the last one of the step). */
    assert_int_equal(log->count, 9);
    assert_string_equal(log->names[8], "loss");
    double g = 0;
    for (int i = 2; i < 8; i++) g += log->values[i];
    assert_true(fabs(log->values[8] - g) <= 1e-12 * fabs(g));
    for (int i = 0; i < 8; i++) {
        /* MMEditing's order: the discriminators step's keys, then the generators'. */
        assert_string_equal(log->names[i], log_names[i]);
        char key[64];
        snprintf(key, sizeof key, "log%d.%s", step, log_names[i]);
        float got = (float)log->values[i];
        const double a = tu_ref_allowance(st, key);
        tu_assert_ref(st, key, &got, 1, a * 1e-4, a * 1e-7);
    }
}

/* The bias of a convolution followed by instance norm gets a gradient that
 * is zero in exact arithmetic (the norm removes each channel's mean): the
 * float64 reference holds ~1e-16 there, float32 ~1e-7. Such tensors are
 * compared against 1e-6 absolute, and their elements count as noise in
 * tu_ref_compare_state. */
#define STRUCTURAL_ZERO 1e-10

/* Every parameter's gradient: 1e-3 |want| + 1e-4 max|want|. */
static void compare_grads(duet_module *root, const duet_st *st, int step) {
    duet_named_tensors l = {0};
    TU_OK(duet_module_named_parameters(root, false, &l));
    for (size_t i = 0; i < l.count; i++) {
        char key[256];
        snprintf(key, sizeof key, "grad%d.%s", step, l.items[i].name);
        duet_tensor *t = l.items[i].tensor, *want = tu_ref_tensor(st, key);
        if (t->grad == NULL) fail_msg("%s: no gradient", key);
        const double mx = tu_max_abs(want);
        const double a = tu_ref_allowance(st, key);
        if (mx < STRUCTURAL_ZERO) tu_assert_ref(st, key, t->grad, t->numel, 0, a * 1e-6);
        else tu_assert_ref(st, key, t->grad, t->numel, a * 1e-3, a * 1e-4 * mx);
        duet_tensor_release(want);
    }
    /* 2 x 8 convolutions with bias in the generators, 2 x 4 in the
     * discriminators, under MMEditing's names. */
    assert_int_equal(l.count, 48);
    assert_string_equal(l.items[0].name, "generators.a.model.0.conv.weight");
    assert_string_equal(l.items[47].name, "discriminators.b.model.3.bias");
    duet_named_tensors_clear(&l);
}

/* The model's save_state into a file, loaded back (borrowed by the caller:
 * destroy). */
static duet_st *saved_state(duet_model *m, const char *dir) {
    duet_st_writer *w = NULL;
    TU_OK(duet_st_writer_create(&w));
    TU_OK(duet_model_save_state(m, w));
    char path[300];
    tu_path(path, sizeof path, dir, "state.safetensors");
    TU_OK(duet_st_writer_save(w, path));
    duet_st_writer_destroy(w);
    duet_st *st = NULL;
    TU_OK(duet_st_load(path, &st));
    return st;
}

/* Both pools' images (the generated images, so float noise of the
 * generators: 1e-4 relative, 1e-5 absolute). */
static void compare_pools(duet_model *m, const duet_st *st, int step, const char *dir) {
    duet_st *s = saved_state(m, dir);
    for (int i = 0; i < 2; i++) {
        const char which = "ab"[i];
        char key[64], name[64];
        snprintf(key, sizeof key, "pool%d.%c", step, which);
        snprintf(name, sizeof name, DUET_MODEL_STATE_PREFIX "cyclegan.pool_%c", which);
        duet_tensor *got = NULL;
        TU_OK(duet_st_get(s, name, &got));
        tu_assert_ref(st, key, got->data, got->numel, 1e-4, 1e-5);
        assert_int_equal(duet_cyclegan_pool_count(m, which), 2);
        duet_tensor_release(got);
    }
    duet_st_destroy(s);
}

static void pair_batch(duet_batch *b, const duet_st *st) {
    duet_tensor *a = tu_ref_tensor(st, "img_a"), *c = tu_ref_tensor(st, "img_b");
    TU_OK(duet_batch_add_tensor(b, "img_a", a));
    TU_OK(duet_batch_add_tensor(b, "img_b", c));
    duet_tensor_release(a);
    duet_tensor_release(c);
}

static void test_cyclegan_train_step_vs_pytorch(void **state) {
    static const char *const parts[2] = {"generators", "discriminators"};
    tu_tmpdir *fx = *state;
    duet_st *st = tu_ref_load("cyclegan.safetensors");
    duet_model *m = tiny_model();
    duet_module *root = duet_model_module(m);
    tu_ref_load_state(root, st, "init.");
    duet_optimizer_set *opts = adam_pair(m);
    duet_batch b = {0};
    pair_batch(&b, st);
    duet_log_vars log;
    /* 2 steps of ref_cyclegan.py, 10 of MMEditing's (see test_ref_srgan.c). */
    int step = 1;
    for (char key[32] = "log1.loss_cycle_a"; duet_st_has(st, key);
         snprintf(key, sizeof key, "log%d.loss_cycle_a", ++step)) {
        TU_OK(duet_model_train_step(m, &b, opts, &log));
        tu_compare_distance(root, st, step, parts, 2);
        if (step > 2) continue;
        compare_log(st, &log, step);
        compare_grads(root, st, step);
        tu_ref_compare_state(root, st, step, LR, STRUCTURAL_ZERO);
        compare_pools(m, st, step, fx->dir);
        tu_compare_adam_moments(opts, parts, 2, st, step);
    }
    assert_true(step - 1 >= 2);
    assert_int_equal(duet_cyclegan_step_counter(m), step - 1);
    assert_int_equal(duet_tape_size(), 0);
    duet_batch_clear(&b);
    duet_optimizer_set_destroy(opts);
    duet_model_destroy(m);
    duet_st_destroy(st);
}

/* disc_init_steps 1: the first step updates the discriminators only and
 * logs only their keys; the generators stay put. id_loss off: no id keys. */
static void test_cyclegan_disc_init_steps(void **state) {
    (void)state;
    duet_st *st = tu_ref_load("cyclegan.safetensors");
    duet_cyclegan_opts o = tiny_opts();
    o.disc_init_steps = 1;
    o.id_loss_weight = 0.0f;
    duet_model *m = model_of(&o);
    assert_null(duet_model_part(m, "id_loss"));
    duet_tensor *w = duet_module_param(
        duet_module_child(duet_module_child(duet_module_child(
            duet_module_child(duet_model_part(m, "generators"), "b"), "model"), "0"), "conv"),
        "weight");
    const float first = w->data[0];
    duet_optimizer_set *opts = adam_pair(m);
    duet_batch b = {0};
    pair_batch(&b, st);
    duet_log_vars log;
    TU_OK(duet_model_train_step(m, &b, opts, &log));
    assert_int_equal(log.count, 2);
    assert_string_equal(log.names[0], "loss_gan_d_a");
    assert_string_equal(log.names[1], "loss_gan_d_b");
    assert_true(w->data[0] == first);
    assert_int_equal(duet_tape_size(), 0);
    /* MMEditing counts the step whether or not the generators stepped. */
    assert_int_equal(duet_cyclegan_step_counter(m), 1);
    TU_OK(duet_model_train_step(m, &b, opts, &log));
    /* The discriminators' keys first, then the generators'. */
    assert_int_equal(log.count, 7);
    assert_string_equal(log.names[0], "loss_gan_d_a");
    assert_string_equal(log.names[2], "loss_gan_g_a");
    assert_string_equal(log.names[5], "loss_cycle_b");
    /* The generators' parse_losses total (MMEditing's discriminators log
     * none: their log_vars keep only loss_gan_d_a / _b). */
    assert_string_equal(log.names[6], "loss");
    double sum = 0;
    for (int i = 2; i < 6; i++) sum += log.values[i];
    assert_true(fabs(log.values[6] - sum) <= 1e-12 * fabs(sum));
    assert_true(w->data[0] != first);
    assert_int_equal(duet_tape_size(), 0);
    duet_batch_clear(&b);
    duet_optimizer_set_destroy(opts);
    duet_model_destroy(m);
    duet_st_destroy(st);
}

/* buffer_size 0: the pools answer with the images themselves and keep
 * nothing; with a pool, the first steps store what they answer with. */
static void test_cyclegan_pool_sizes(void **state) {
    tu_tmpdir *fx = *state;
    duet_st *st = tu_ref_load("cyclegan.safetensors");
    duet_cyclegan_opts o = tiny_opts();
    o.buffer_size = 0;
    duet_model *none = model_of(&o);
    o.buffer_size = 5;
    duet_model *five = model_of(&o);
    duet_optimizer_set *o1 = adam_pair(none), *o2 = adam_pair(five);
    duet_batch b = {0};
    pair_batch(&b, st);
    duet_log_vars l1, l2;
    TU_OK(duet_model_train_step(none, &b, o1, &l1));
    TU_OK(duet_model_train_step(five, &b, o2, &l2));
    /* Same weights, and a filling pool answers with the fakes: same losses. */
    for (int i = 0; i < l1.count; i++) assert_true(l1.values[i] == l2.values[i]);
    assert_int_equal(duet_cyclegan_pool_count(none, 'a'), 0);
    assert_int_equal(duet_cyclegan_pool_count(five, 'a'), 2);
    assert_int_equal(duet_cyclegan_pool_rng(five)->counter, 0); /* no draw while filling */
    duet_st *s = saved_state(none, fx->dir);
    assert_string_equal(duet_st_meta(s, "cyclegan.pool_a.count"), "0");
    assert_false(duet_st_has(s, DUET_MODEL_STATE_PREFIX "cyclegan.pool_a"));
    duet_st_destroy(s);
    duet_batch_clear(&b);
    duet_optimizer_set_destroy(o1);
    duet_optimizer_set_destroy(o2);
    duet_model_destroy(none);
    duet_model_destroy(five);
    duet_st_destroy(st);
}

/* One run of `steps` steps from a fresh tiny model. */
static duet_model *run_steps(const duet_batch *b, int steps, duet_optimizer_set **opts) {
    duet_model *m = tiny_model();
    *opts = adam_pair(m);
    duet_log_vars log;
    for (int i = 0; i < steps; i++) TU_OK(duet_model_train_step(m, b, *opts, &log));
    return m;
}

/* Four steps in one go equal two steps, a checkpoint (state dict,
 * optimizers, and the model's save_state: step counter, pool rng, pools),
 * and two steps of a fresh model that loads it: bitwise. The pools are
 * full after step 1, so steps 3 and 4 draw from the rng and read the
 * pools. Leaving out the pools' images (or the rng) breaks the equality. */
static void test_cyclegan_resume_bitwise(void **state) {
    tu_tmpdir *fx = *state;
    duet_st *st = tu_ref_load("cyclegan.safetensors");
    duet_batch b = {0};
    pair_batch(&b, st);
    duet_log_vars log;
    duet_optimizer_set *fo = NULL, *o1 = NULL;
    duet_model *full = run_steps(&b, 4, &fo);
    duet_model *first = run_steps(&b, 2, &o1);
    duet_st_writer *w = NULL;
    TU_OK(duet_st_writer_create(&w));
    TU_OK(duet_module_save_state(duet_model_module(first), w, "model."));
    TU_OK(duet_optimizer_save_state(duet_optimizer_set_get(o1, "generators"), w, "opt_g."));
    TU_OK(duet_optimizer_save_state(duet_optimizer_set_get(o1, "discriminators"), w, "opt_d."));
    TU_OK(duet_model_save_state(first, w));
    char path[300];
    tu_path(path, sizeof path, fx->dir, "ckpt.safetensors");
    TU_OK(duet_st_writer_save(w, path));
    duet_st_writer_destroy(w);

    for (int variant = 0; variant < 2; variant++) {
        duet_st *ck = NULL, *use = NULL;
        TU_OK(duet_st_load(path, &ck));
        /* variant 1: the same checkpoint without the pools' images. */
        if (variant == 1) TU_OK(duet_st_view_without(ck, DUET_MODEL_STATE_PREFIX, &use));
        duet_model *resumed = tiny_model();
        duet_optimizer_set *o2 = adam_pair(resumed);
        const duet_st *src = variant == 0 ? ck : use;
        TU_OK(duet_module_load_state(duet_model_module(resumed), src, "model.", true, NULL,
                                     NULL));
        TU_OK(duet_optimizer_load_state(duet_optimizer_set_get(o2, "generators"), src, "opt_g."));
        TU_OK(duet_optimizer_load_state(duet_optimizer_set_get(o2, "discriminators"), src,
                                        "opt_d."));
        int rc = duet_model_load_state(resumed, src);
        if (variant == 0) {
            TU_OK(rc);
            assert_int_equal(duet_cyclegan_step_counter(resumed), 2);
            for (int i = 0; i < 2; i++) TU_OK(duet_model_train_step(resumed, &b, o2, &log));
            tu_assert_same_state(duet_model_module(full), duet_model_module(resumed), true);
            assert_true(duet_cyclegan_pool_rng(resumed)->counter ==
                        duet_cyclegan_pool_rng(full)->counter);
        } else {
            /* A checkpoint whose pool tensors are gone does not load. */
            assert_int_equal(rc, DUET_ENOTFOUND);
            assert_non_null(strstr(duet_last_error(), "state.cyclegan.pool_a"));
        }
        duet_st_destroy(use);
        duet_st_destroy(ck);
        duet_optimizer_set_destroy(o2);
        duet_model_destroy(resumed);
    }
    /* Without the model's state (fresh pools and rng) the run differs. */
    duet_st *ck = NULL;
    TU_OK(duet_st_load(path, &ck));
    duet_model *fresh = tiny_model();
    duet_optimizer_set *o3 = adam_pair(fresh);
    TU_OK(duet_module_load_state(duet_model_module(fresh), ck, "model.", true, NULL, NULL));
    TU_OK(duet_optimizer_load_state(duet_optimizer_set_get(o3, "generators"), ck, "opt_g."));
    TU_OK(duet_optimizer_load_state(duet_optimizer_set_get(o3, "discriminators"), ck, "opt_d."));
    for (int i = 0; i < 2; i++) TU_OK(duet_model_train_step(fresh, &b, o3, &log));
    tu_assert_same_state(duet_model_module(full), duet_model_module(fresh), false);
    duet_st_destroy(ck);

    duet_optimizer_set_destroy(fo);
    duet_optimizer_set_destroy(o1);
    duet_optimizer_set_destroy(o3);
    duet_model_destroy(full);
    duet_model_destroy(first);
    duet_model_destroy(fresh);
    duet_batch_clear(&b);
    duet_st_destroy(st);
}

/* val_step: fake_b for test direction a2b, fake_a for b2a (relative to
 * the training direction: b2a flips it back); forward is the generator of
 * the test direction. */
static void test_cyclegan_val_step(void **state) {
    (void)state;
    duet_st *st = tu_ref_load("cyclegan.safetensors");
    duet_batch b = {0};
    pair_batch(&b, st);
    duet_tensor *img_a = duet_batch_tensor_get(&b, "img_a"),
                *img_b = duet_batch_tensor_get(&b, "img_b");
    duet_cyclegan_opts o = tiny_opts();
    duet_model *m = model_of(&o);
    o.test_b2a = true;
    duet_model *back = model_of(&o);
    o.b2a = true;
    duet_model *flipped = model_of(&o); /* b2a training, b2a test: G_a on img_b */
    duet_val_output v = {0}, vb = {0}, vf = {0};
    TU_OK(duet_model_val_step(m, &b, &v));
    TU_OK(duet_model_val_step(back, &b, &vb));
    TU_OK(duet_model_val_step(flipped, &b, &vf));
    assert_int_equal(v.nsamples, 2);
    assert_int_equal(v.metrics.count, 0);
    duet_tensor *fb = NULL, *fa = NULL, *ff = NULL;
    TU_OK(duet_model_forward(m, img_a, &fb));
    TU_OK(duet_model_forward(back, img_b, &fa));
    TU_OK(duet_model_forward(flipped, img_b, &ff));
    duet_tape_clear();
    assert_memory_equal(v.output->data, fb->data, (size_t)fb->numel * sizeof(float));
    assert_memory_equal(vb.output->data, fa->data, (size_t)fa->numel * sizeof(float));
    assert_memory_equal(vf.output->data, ff->data, (size_t)ff->numel * sizeof(float));
    /* Same weights (same seed): the flipped model's G_a is m's G_a. */
    assert_memory_not_equal(fb->data, ff->data, (size_t)fb->numel * sizeof(float));
    duet_tensor *ga = NULL;
    TU_OK(duet_model_forward(m, img_b, &ga));
    duet_tape_clear();
    assert_memory_equal(ga->data, ff->data, (size_t)ff->numel * sizeof(float));
    duet_tensor_release(ga);
    duet_tensor_release(fb);
    duet_tensor_release(fa);
    duet_tensor_release(ff);
    duet_val_output_clear(&v);
    duet_val_output_clear(&vb);
    duet_val_output_clear(&vf);
    duet_model_destroy(m);
    duet_model_destroy(back);
    duet_model_destroy(flipped);
    duet_batch_clear(&b);
    duet_st_destroy(st);
}

static const char cfg_text[] =
    "model = { type = \"CycleGAN\";\n"
    "  generator = { type = \"ResnetGenerator\"; in_channels = 3; out_channels = 3;\n"
    "    base_channels = 4; norm_cfg = { type = \"IN\"; }; use_dropout = false;\n"
    "    num_blocks = 1; padding_mode = \"reflect\"; init_cfg = { type = \"normal\"; "
    "gain = 0.02; }; };\n"
    "  discriminator = { type = \"PatchDiscriminator\"; in_channels = 3; base_channels = 4;\n"
    "    num_conv = 2; norm_cfg = { type = \"IN\"; }; init_cfg = { type = \"normal\"; "
    "gain = 0.02; }; };\n"
    "  gan_loss = { type = \"GANLoss\"; gan_type = \"lsgan\"; real_label_val = 1.0;\n"
    "    fake_label_val = 0.0; loss_weight = 1.0; };\n"
    "  cycle_loss = { type = \"L1Loss\"; loss_weight = 10.0; reduction = \"mean\"; };\n"
    "  id_loss = { type = \"L1Loss\"; loss_weight = 0.5; reduction = \"mean\"; };\n"
    "  train_cfg = { direction = \"a2b\"; buffer_size = 2; };\n"
    "  test_cfg = { direction = \"a2b\"; show_input = true; };\n"
    "};\n";

/* The registry builds MMEditing's config into the tiny model (same
 * parameter names and shapes as the reference), and names bad keys. */
static void test_cyclegan_registry(void **state) {
    (void)state;
    duet_config *cfg = NULL;
    TU_OK(duet_config_load_string(cfg_text, "<cyclegan>", &cfg));
    duet_rng rng = duet_rng_make(1, 0);
    duet_model *m = NULL;
    TU_OK(duet_build_model(cfg, "model", &rng, &m));
    TU_OK(duet_config_check_unused(cfg));
    assert_string_equal(duet_model_type_name(m), "CycleGAN");
    duet_st *st = tu_ref_load("cyclegan.safetensors");
    TU_OK(duet_module_load_state(duet_model_module(m), st, "init.", true, NULL, NULL));
    assert_non_null(duet_model_part(m, "id_loss"));
    duet_st_destroy(st);
    duet_model_destroy(m);
    duet_config_destroy(cfg);

    static const struct {
        const char *from, *to, *want;
    } bad[] = {
        {"buffer_size = 2", "buffer_size = -1", "model.train_cfg.buffer_size"},
        {"direction = \"a2b\"; buffer", "direction = \"up\"; buffer", "train_cfg.direction"},
        {"padding_mode = \"reflect\"", "padding_mode = \"zeros\"", "padding_mode"},
        {"\"ResnetGenerator\"", "\"UnetGenerator\"", "model.generator.type"},
        {"out_channels = 3", "out_channels = 1", "id_loss"},
        {"buffer_size = 2;", "buffer_size = 2; bufer = 1;", "bufer"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char text[sizeof cfg_text + 64];
        const char *at = strstr(cfg_text, bad[i].from);
        assert_non_null(at);
        snprintf(text, sizeof text, "%.*s%s%s", (int)(at - cfg_text), cfg_text, bad[i].to,
                 at + strlen(bad[i].from));
        TU_OK(duet_config_load_string(text, "<bad>", &cfg));
        int rc = duet_build_model(cfg, "model", &rng, &m);
        if (rc == DUET_OK) {
            rc = duet_config_check_unused(cfg);
            duet_model_destroy(m);
        }
        assert_int_not_equal(rc, DUET_OK);
        if (strstr(duet_last_error(), bad[i].want) == NULL)
            fail_msg("case %zu: '%s' does not name %s", i, duet_last_error(), bad[i].want);
        duet_config_destroy(cfg);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        TU_TMPDIR_TEST(test_cyclegan_train_step_vs_pytorch),
        cmocka_unit_test(test_cyclegan_disc_init_steps),
        TU_TMPDIR_TEST(test_cyclegan_pool_sizes),
        TU_TMPDIR_TEST(test_cyclegan_resume_bitwise),
        cmocka_unit_test(test_cyclegan_val_step),
        cmocka_unit_test(test_cyclegan_registry),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
