/* Pix2Pix's train_step against PyTorch (tests/ref/ref_pix2pix.py: the model
 * written from MMEditing's pix2pix.py, same weights, batch and dropout
 * masks): two steps, each comparing the log values, every gradient the
 * step's updates used and every state-dict entry afterwards, at
 * test_ref_srgan's tolerances. The discriminator step comes first and the
 * generator step backpropagates through the output computed before it,
 * so a model that re-ran the generator, dropped its graph or stepped in
 * SRGAN's order fails here. Also: the step counter, disc_init_steps
 * (no generator step, no generator log keys), and a run resumed from a
 * saved dropout rng and step counter matching an uninterrupted one
 * bitwise. */
#include "testutil.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#define LR 2e-4

static duet_pix2pix_opts tiny_opts(void) {
    duet_pix2pix_opts o = duet_pix2pix_opts_default();
    o.generator.num_down = 6;
    o.generator.base_channels = 4;
    o.discriminator.base_channels = 4;
    o.dropout_seed = 77;
    return o;
}

static duet_model *tiny_model(void) {
    duet_pix2pix_opts o = tiny_opts();
    duet_rng rng = duet_rng_make(5, 0);
    duet_model *m = NULL;
    TU_OK(duet_pix2pix_create(&o, &rng, &m));
    return m;
}

static duet_optimizer_set *adam_pair(duet_model *m) {
    duet_optimizer_set *s = NULL;
    TU_OK(duet_optimizer_set_create(&s));
    duet_adam_opts a = duet_adam_opts_default();
    a.lr = (float)LR;
    a.beta1 = 0.5f;
    TU_OK(duet_optimizer_set_add_adam(s, m, "generator", &a));
    TU_OK(duet_optimizer_set_add_adam(s, m, "discriminator", &a));
    return s;
}

static void compare_log(const duet_st *st, const duet_log_vars *log, int step) {
    static const char *const names[4] = {"loss_gan_d_fake", "loss_gan_d_real", "loss_gan_g",
                                         "loss_pixel"};
    tu_ref_compare_log(st, log, step, names, 4);
}

/* Every parameter's gradient: 1e-3 |want| + 1e-4 max|want|. */
static void compare_grads(duet_module *root, const duet_st *st, int step) {
    assert_int_equal(tu_ref_compare_grads(root, st, step), 44);
}

static void pair_batch(duet_batch *b, const duet_st *st) {
    duet_tensor *a = tu_ref_tensor(st, "img_a"), *c = tu_ref_tensor(st, "img_b");
    TU_OK(duet_batch_add_tensor(b, "img_a", a));
    TU_OK(duet_batch_add_tensor(b, "img_b", c));
    duet_tensor_release(a);
    duet_tensor_release(c);
}

static void test_pix2pix_train_step_vs_pytorch(void **state) {
    static const char *const parts[2] = {"generator", "discriminator"};
    (void)state;
    duet_st *st = tu_ref_load("pix2pix.safetensors");
    duet_model *m = tiny_model();
    duet_module *root = duet_model_module(m);
    tu_ref_load_state(root, st, "init.");
    duet_optimizer_set *opts = adam_pair(m);
    duet_batch b = {0};
    pair_batch(&b, st);
    duet_log_vars log;
    /* 2 steps of ref_pix2pix.py, 10 of MMEditing's (see test_ref_srgan.c). */
    int step = 1;
    for (char key[32] = "log1.loss_pixel"; duet_st_has(st, key);
         snprintf(key, sizeof key, "log%d.loss_pixel", ++step)) {
        TU_OK(duet_model_train_step(m, &b, opts, &log));
        tu_compare_distance(root, st, step, parts, 2);
        if (step > 2) continue;
        compare_log(st, &log, step);
        compare_grads(root, st, step);
        tu_ref_compare_state(root, st, step, LR, 0);
        tu_compare_adam_moments(opts, parts, 2, st, step);
    }
    assert_true(step - 1 >= 2);
    assert_int_equal(duet_pix2pix_step_counter(m), step - 1);
    assert_int_equal(duet_tape_size(), 0);
    duet_batch_clear(&b);
    duet_optimizer_set_destroy(opts);
    duet_model_destroy(m);
    duet_st_destroy(st);
}

/* disc_init_steps 1: the first step updates the discriminator only and
 * logs no generator keys; the generator's weights stay put. */
static void test_pix2pix_disc_init_steps(void **state) {
    (void)state;
    duet_st *st = tu_ref_load("pix2pix.safetensors");
    duet_pix2pix_opts o = tiny_opts();
    o.disc_init_steps = 1;
    duet_rng rng = duet_rng_make(5, 0);
    duet_model *m = NULL;
    TU_OK(duet_pix2pix_create(&o, &rng, &m));
    duet_module *gen = duet_model_part(m, "generator");
    /* Entry 0 is model.model.0.conv.weight (borrowed: it shows updates). */
    duet_named_tensors before = {0};
    TU_OK(duet_module_state(gen, &before));
    float first = before.items[0].tensor->data[0];
    duet_optimizer_set *opts = adam_pair(m);
    duet_batch b = {0};
    pair_batch(&b, st);
    duet_log_vars log;
    TU_OK(duet_model_train_step(m, &b, opts, &log));
    assert_int_equal(log.count, 2); /* no generator step: no "loss" */
    double v;
    assert_false(duet_log_vars_get(&log, "loss_gan_g", &v));
    assert_true(before.items[0].tensor->data[0] == first);
    assert_int_equal(duet_tape_size(), 0);
    TU_OK(duet_model_train_step(m, &b, opts, &log));
    assert_int_equal(log.count, 5);
    assert_true(before.items[0].tensor->data[0] != first);
    duet_named_tensors_clear(&before);
    duet_batch_clear(&b);
    duet_optimizer_set_destroy(opts);
    duet_model_destroy(m);
    duet_st_destroy(st);
}

/* Three steps in one go equal two steps, then a fresh model that loads the
 * state dict, the optimizer states, the step counter and the dropout rng,
 * and takes the third step: bitwise. */
static void test_pix2pix_resume_bitwise(void **state) {
    (void)state;
    duet_st *st = tu_ref_load("pix2pix.safetensors");
    duet_batch b = {0};
    pair_batch(&b, st);
    duet_log_vars log;
    duet_model *full = tiny_model();
    duet_optimizer_set *fo = adam_pair(full);
    for (int i = 0; i < 3; i++) TU_OK(duet_model_train_step(full, &b, fo, &log));

    duet_model *first = tiny_model();
    duet_optimizer_set *o1 = adam_pair(first);
    for (int i = 0; i < 2; i++) TU_OK(duet_model_train_step(first, &b, o1, &log));
    duet_st_writer *w = NULL;
    TU_OK(duet_st_writer_create(&w));
    TU_OK(duet_module_save_state(duet_model_module(first), w, "model."));
    TU_OK(duet_optimizer_save_state(duet_optimizer_set_get(o1, "generator"), w, "opt_g."));
    TU_OK(duet_optimizer_save_state(duet_optimizer_set_get(o1, "discriminator"), w, "opt_d."));
    char dir[256], path[300];
    assert_non_null(tu_mkdtemp(dir, sizeof dir, "duet_pix2pix"));
    tu_path(path, sizeof path, dir, "ckpt.safetensors");
    TU_OK(duet_st_writer_save(w, path));
    duet_st_writer_destroy(w);
    const duet_rng saved_rng = *duet_pix2pix_dropout_rng(first);
    const int64_t saved_counter = duet_pix2pix_step_counter(first);

    duet_model *resumed = tiny_model();
    duet_optimizer_set *o2 = adam_pair(resumed);
    duet_st *ck = NULL;
    TU_OK(duet_st_load(path, &ck));
    TU_OK(duet_module_load_state(duet_model_module(resumed), ck, "model.", true, NULL, NULL));
    TU_OK(duet_optimizer_load_state(duet_optimizer_set_get(o2, "generator"), ck, "opt_g."));
    TU_OK(duet_optimizer_load_state(duet_optimizer_set_get(o2, "discriminator"), ck, "opt_d."));
    duet_st_destroy(ck);
    *duet_pix2pix_dropout_rng(resumed) = saved_rng;
    duet_pix2pix_set_step_counter(resumed, saved_counter);
    TU_OK(duet_model_train_step(resumed, &b, o2, &log));
    tu_assert_same_state(duet_model_module(full), duet_model_module(resumed), true);
    /* Without the rng the masks differ, and so do the weights. */
    duet_model *norng = tiny_model();
    duet_optimizer_set *o3 = adam_pair(norng);
    TU_OK(duet_st_load(path, &ck));
    TU_OK(duet_module_load_state(duet_model_module(norng), ck, "model.", true, NULL, NULL));
    TU_OK(duet_optimizer_load_state(duet_optimizer_set_get(o3, "generator"), ck, "opt_g."));
    TU_OK(duet_optimizer_load_state(duet_optimizer_set_get(o3, "discriminator"), ck, "opt_d."));
    duet_st_destroy(ck);
    duet_pix2pix_set_step_counter(norng, saved_counter);
    TU_OK(duet_model_train_step(norng, &b, o3, &log));
    tu_assert_same_state(duet_model_module(full), duet_model_module(norng), false);

    duet_optimizer_set_destroy(fo);
    duet_optimizer_set_destroy(o1);
    duet_optimizer_set_destroy(o2);
    duet_optimizer_set_destroy(o3);
    duet_model_destroy(full);
    duet_model_destroy(first);
    duet_model_destroy(resumed);
    duet_model_destroy(norng);
    tu_rm_tree(dir);
    duet_batch_clear(&b);
    duet_st_destroy(st);
}

/* val_step: the generator in training mode (dropout on, so the output
 * differs from eval mode), the dropout rng left where training had it, so
 * two evaluations agree bitwise and training masks do not depend on them. */
static void test_pix2pix_val_step(void **state) {
    (void)state;
    duet_st *st = tu_ref_load("pix2pix.safetensors");
    duet_model *m = tiny_model();
    duet_batch b = {0};
    pair_batch(&b, st);
    const duet_rng before = *duet_pix2pix_dropout_rng(m);
    duet_val_output v1 = {0}, v2 = {0};
    TU_OK(duet_model_val_step(m, &b, &v1));
    assert_true(duet_pix2pix_dropout_rng(m)->counter == before.counter);
    TU_OK(duet_model_val_step(m, &b, &v2));
    assert_int_equal(v1.nsamples, 2);
    assert_int_equal(v1.metrics.count, 0);
    assert_memory_equal(v1.output->data, v2.output->data,
                        (size_t)v1.output->numel * sizeof(float));
    duet_tensor *eval = NULL;
    duet_module_train(duet_model_module(m), false);
    TU_OK(duet_model_forward(m, duet_batch_tensor_get(&b, "img_a"), &eval));
    assert_memory_not_equal(v1.output->data, eval->data, (size_t)eval->numel * sizeof(float));
    duet_tensor_release(eval);
    duet_val_output_clear(&v1);
    duet_val_output_clear(&v2);
    duet_batch_clear(&b);
    duet_model_destroy(m);
    duet_st_destroy(st);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pix2pix_train_step_vs_pytorch),
        cmocka_unit_test(test_pix2pix_disc_init_steps),
        cmocka_unit_test(test_pix2pix_resume_bitwise),
        cmocka_unit_test(test_pix2pix_val_step),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
