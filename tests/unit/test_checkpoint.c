/* Checkpoint files: save a small GAN-shaped module tree (nn.h layers) with an
 * Adam and an SGD optimizer and metadata, resume into a differently
 * initialised copy (bit-identical state, bit-identical continuation),
 * strict and non-strict loading (missing / unexpected keys, required
 * prefixes, shape mismatches, optimizers), metadata parsing, corrupt and
 * partial files leaving the model unchanged, and the atomic save. */
#include "testutil.h"

#include <string.h>

#include "duet/train.h"

typedef struct {
    bool extra;      /* an extra child "extra" (Conv2d 3->2) */
    bool no_disc;    /* no discriminator */
    int gen_out;     /* conv_first output channels (4 matches) */
} model_opts;

/* generator { conv_first: Conv2d(3, gen_out, 3), upsample: Sequential(Conv2d(gen_out, 16, 3)) },
 * discriminator { conv0_0: Conv2d(3, 4, 3, no bias), bn0_0: BatchNorm2d(4),
 * linear1: Linear(8, 2) }: the tree of tests/ref/ref_safetensors.py. */
static duet_module *build_model(uint64_t seed, model_opts o) {
    duet_rng rng = duet_rng_make(seed, 0);
    duet_module *model, *gen, *up, *disc, *m;
    TU_OK(duet_sequential_create(&model));
    TU_OK(duet_sequential_create(&gen));
    TU_OK(duet_conv2d_module_create(3, o.gen_out, 3, 1, 1, true, &rng, &m));
    TU_OK(duet_module_add_child(gen, "conv_first", m));
    TU_OK(duet_sequential_create(&up));
    TU_OK(duet_conv2d_module_create(o.gen_out, 16, 3, 1, 1, true, &rng, &m));
    TU_OK(duet_sequential_append(up, m));
    TU_OK(duet_module_add_child(gen, "upsample", up));
    TU_OK(duet_module_add_child(model, "generator", gen));
    if (!o.no_disc) {
        TU_OK(duet_sequential_create(&disc));
        TU_OK(duet_conv2d_module_create(3, 4, 3, 1, 1, false, &rng, &m));
        TU_OK(duet_module_add_child(disc, "conv0_0", m));
        TU_OK(duet_batch_norm2d_module_create(4, 1e-5f, 0.1f, &m));
        /* Non-default buffers, so that loading them is visible. */
        duet_tensor *rm = duet_module_buffer(m, "running_mean");
        for (int64_t i = 0; i < rm->numel; i++) rm->data[i] = duet_rng_normal(&rng);
        duet_module_buffer(m, "num_batches_tracked")->data[0] = (float)(seed % 100);
        TU_OK(duet_module_add_child(disc, "bn0_0", m));
        TU_OK(duet_linear_module_create(8, 2, true, &rng, &m));
        TU_OK(duet_module_add_child(disc, "linear1", m));
        TU_OK(duet_module_add_child(model, "discriminator", disc));
    }
    if (o.extra) {
        TU_OK(duet_conv2d_module_create(3, 2, 1, 1, 0, true, &rng, &m));
        TU_OK(duet_module_add_child(model, "extra", m));
    }
    return model;
}

static const model_opts k_same = {false, false, 4};

static duet_optimizer *make_adam(duet_module *part) {
    duet_named_tensors p;
    TU_OK(duet_module_named_parameters(part, true, &p));
    duet_adam_opts o = duet_adam_opts_default();
    o.lr = 1e-2f;
    duet_optimizer *opt = NULL;
    TU_OK(duet_adam_create(&p, &o, &opt));
    duet_named_tensors_clear(&p);
    return opt;
}

static duet_optimizer *make_sgd(duet_module *part) {
    duet_named_tensors p;
    TU_OK(duet_module_named_parameters(part, true, &p));
    duet_sgd_opts o = duet_sgd_opts_default();
    o.lr = 0.1f;
    o.momentum = 0.9f;
    duet_optimizer *opt = NULL;
    TU_OK(duet_sgd_create(&p, &o, &opt));
    duet_named_tensors_clear(&p);
    return opt;
}

/* Gradients from a seeded stream: the same seed gives the same gradients
 * for two models of the same shape. */
static void fake_grads(duet_module *model, uint64_t seed) {
    duet_named_tensors p;
    TU_OK(duet_module_named_parameters(model, true, &p));
    duet_rng rng = duet_rng_make(seed, 7);
    for (size_t i = 0; i < p.count; i++) {
        duet_tensor *t = p.items[i].tensor;
        TU_OK(duet_tensor_ensure_grad(t));
        for (int64_t j = 0; j < t->numel; j++) t->grad[j] = duet_rng_normal(&rng);
    }
    duet_named_tensors_clear(&p);
}

static void test_save_resume_continue(void **state) {
    tu_tmpdir *fx = *state;
    char path[512];
    tu_path(path, sizeof path, fx->dir, "iter_7.safetensors");
    duet_module *a = build_model(1, k_same);
    duet_optimizer *ga = make_adam(duet_module_child(a, "generator"));
    duet_optimizer *da = make_sgd(duet_module_child(a, "discriminator"));
    for (uint64_t it = 0; it < 2; it++) {
        fake_grads(a, 100 + it);
        TU_OK(duet_optimizer_step(ga));
        TU_OK(duet_optimizer_step(da));
    }
    const char *config = "model = { type = \"SRGAN\"; };\ntotal_iters = 10;\n";
    duet_named_optimizer opts_a[] = {{"generator", ga}, {"discriminator", da}};
    duet_meta_item meta[] = {{"iter", "7"}, {"config", config}, {"rng_state", "1 2 3"},
                             {"seed", "18446744073709551615"}};
    TU_OK(duet_checkpoint_save(path, a, opts_a, 2, meta, 4));
    assert_int_equal(tu_count_entries(fx->dir), 1);

    /* The file: unwrapped names, optimizer states under optimizer.<name>. */
    duet_st *raw = NULL;
    TU_OK(duet_st_load(path, &raw));
    assert_true(duet_st_has(raw, "generator.conv_first.weight"));
    assert_true(duet_st_has(raw, "discriminator.bn0_0.num_batches_tracked"));
    assert_true(duet_st_has(raw, "optimizer.generator.step"));
    assert_true(duet_st_has(raw, "optimizer.discriminator.step"));
    assert_string_equal(duet_st_meta(raw, "duet_version"), DUET_VERSION_STRING);
    duet_st_destroy(raw);

    duet_module *b = build_model(2, k_same);
    tu_assert_same_state(a, b, false);
    duet_optimizer *gb = make_adam(duet_module_child(b, "generator"));
    duet_optimizer *db = make_sgd(duet_module_child(b, "discriminator"));
    duet_named_optimizer opts_b[] = {{"generator", gb}, {"discriminator", db}};
    duet_st *ck = NULL;
    TU_OK(duet_checkpoint_resume(path, b, opts_b, 2, &ck));
    tu_assert_same_state(a, b, true);
    assert_true(duet_optimizer_steps(gb) == 2 && duet_optimizer_steps(db) == 2);
    int64_t iter;
    TU_OK(duet_checkpoint_meta_int(ck, "iter", &iter));
    assert_int_equal(iter, 7);
    uint64_t seed;
    TU_OK(duet_checkpoint_meta_uint(ck, "seed", &seed));
    assert_true(seed == UINT64_MAX);
    assert_string_equal(duet_st_meta(ck, "config"), config);
    assert_string_equal(duet_st_meta(ck, "rng_state"), "1 2 3");
    assert_int_equal(duet_checkpoint_meta_int(ck, "epoch", &iter), DUET_ENOTFOUND);
    assert_non_null(strstr(duet_last_error(), path));
    assert_int_equal(duet_checkpoint_meta_int(ck, "rng_state", &iter), DUET_EFORMAT);
    assert_non_null(strstr(duet_last_error(), "'rng_state' is '1 2 3'"));
    duet_st_destroy(ck);

    /* The restored optimizers continue exactly as the originals. */
    for (uint64_t it = 2; it < 4; it++) {
        fake_grads(a, 100 + it);
        fake_grads(b, 100 + it);
        TU_OK(duet_optimizer_step(ga));
        TU_OK(duet_optimizer_step(da));
        TU_OK(duet_optimizer_step(gb));
        TU_OK(duet_optimizer_step(db));
    }
    tu_assert_same_state(a, b, true);

    /* Saving again over the same path replaces it atomically. */
    TU_OK(duet_checkpoint_save(path, b, opts_b, 2, NULL, 0));
    assert_int_equal(tu_count_entries(fx->dir), 1);
    TU_OK(duet_st_load(path, &ck));
    assert_null(duet_st_meta(ck, "iter"));
    duet_st_destroy(ck);

    duet_optimizer_destroy(ga);
    duet_optimizer_destroy(da);
    duet_optimizer_destroy(gb);
    duet_optimizer_destroy(db);
    duet_module_destroy(a);
    duet_module_destroy(b);
}

static void test_strict_and_non_strict(void **state) {
    tu_tmpdir *fx = *state;
    char weights[512], full[512];
    tu_path(weights, sizeof weights, fx->dir, "weights.safetensors");
    tu_path(full, sizeof full, fx->dir, "full.safetensors");
    duet_module *a = build_model(1, k_same);
    duet_optimizer *ga = make_adam(duet_module_child(a, "generator"));
    duet_optimizer *da = make_sgd(duet_module_child(a, "discriminator"));
    fake_grads(a, 5);
    TU_OK(duet_optimizer_step(ga));
    TU_OK(duet_optimizer_step(da));
    duet_named_optimizer opts[] = {{"generator", ga}, {"discriminator", da}};
    TU_OK(duet_checkpoint_save(weights, a, NULL, 0, NULL, 0));
    TU_OK(duet_checkpoint_save(full, a, opts, 2, NULL, 0));

    /* --resume from a weights-only file: refused before anything changes. */
    duet_module *b = build_model(2, k_same);
    duet_module *b0 = build_model(2, k_same);
    duet_optimizer *gb = make_adam(duet_module_child(b, "generator"));
    duet_optimizer *db = make_sgd(duet_module_child(b, "discriminator"));
    duet_named_optimizer opts_b[] = {{"generator", gb}, {"discriminator", db}};
    tu_expect_error(duet_checkpoint_resume(weights, b, opts_b, 2, NULL), DUET_ENOTFOUND,
                    "no state for optimizer 'generator'", NULL);
    assert_non_null(strstr(duet_last_error(), weights));
    tu_assert_same_state(b, b0, true);
    /* Strict optimizers: the file holds a state nobody claims. */
    duet_st *ck = NULL;
    TU_OK(duet_st_load(full, &ck));
    tu_expect_error(duet_checkpoint_load_optimizers(ck, opts_b, 1, true), DUET_ENOTFOUND,
                    "'optimizer.discriminator.", NULL);
    TU_OK(duet_checkpoint_load_optimizers(ck, opts_b, 1, false));
    assert_true(duet_optimizer_steps(gb) == 1 && duet_optimizer_steps(db) == 0);
    duet_named_optimizer bad[] = {{"gen.x", gb}};
    tu_expect_error(duet_checkpoint_load_optimizers(ck, bad, 1, false), DUET_EINVAL, "gen.x", NULL);
    /* Loading weights strictly from a full checkpoint ignores optimizer.*. */
    TU_OK(duet_checkpoint_load_model(ck, b, true, NULL, NULL, NULL));
    tu_assert_same_state(a, b, true);
    duet_st_destroy(ck);

    /* A model with an extra child: strict fails and lists it, leaving the
     * model unchanged; non-strict loads the rest and counts it. */
    model_opts extra = k_same;
    extra.extra = true;
    duet_module *c = build_model(3, extra);
    duet_module *c0 = build_model(3, extra);
    size_t nmissing = 99, nunexpected = 99;
    tu_expect_error(duet_checkpoint_load_weights(weights, c, true, NULL, &nmissing, &nunexpected),
                    DUET_ENOTFOUND, "extra.weight", NULL);
    assert_non_null(strstr(duet_last_error(), weights));
    tu_assert_same_state(c, c0, true);
    tu_expect_error(duet_checkpoint_load_weights(weights, c, false, "extra.", NULL, NULL),
                    DUET_ENOTFOUND, "lacks 2 weights the model needs (extra.*): extra.weight, "
                    "extra.bias", NULL);
    tu_assert_same_state(c, c0, true);
    TU_OK(duet_checkpoint_load_weights(full, c, false, "generator.", &nmissing, &nunexpected));
    assert_int_equal(nmissing, 2);
    assert_int_equal(nunexpected, 0);
    duet_tensor *w = duet_module_param(duet_module_child(c, "extra"), "weight");
    duet_tensor *w0 = duet_module_param(duet_module_child(c0, "extra"), "weight");
    assert_memory_equal(w->data, w0->data, (size_t)w->numel * sizeof(float));
    duet_tensor *g = duet_module_param(
        duet_module_child(duet_module_child(c, "generator"), "conv_first"), "weight");
    duet_tensor *ga_w = duet_module_param(
        duet_module_child(duet_module_child(a, "generator"), "conv_first"), "weight");
    assert_memory_equal(g->data, ga_w->data, (size_t)g->numel * sizeof(float));

    /* A generator-only model (duet test): the discriminator's 8 entries are
     * unexpected, not an error, when loading non-strictly. */
    model_opts gen_only = k_same;
    gen_only.no_disc = true;
    duet_module *d = build_model(4, gen_only);
    TU_OK(duet_checkpoint_load_weights(full, d, false, "generator.", &nmissing, &nunexpected));
    assert_int_equal(nmissing, 0);
    assert_int_equal(nunexpected, 8);
    tu_expect_error(duet_checkpoint_load_weights(full, d, true, NULL, NULL, NULL), DUET_ENOTFOUND,
                    "discriminator.linear1.bias", NULL);

    /* Shapes must match even non-strictly. */
    model_opts wide = k_same;
    wide.gen_out = 5;
    duet_module *e = build_model(5, wide);
    tu_expect_error(duet_checkpoint_load_weights(weights, e, false, NULL, NULL, NULL), DUET_ESHAPE,
                    "generator.conv_first.weight", NULL);

    tu_expect_error(duet_checkpoint_save(full, a, bad, 1, NULL, 0), DUET_EINVAL, "gen.x", NULL);

    duet_optimizer_destroy(ga);
    duet_optimizer_destroy(da);
    duet_optimizer_destroy(gb);
    duet_optimizer_destroy(db);
    duet_module_destroy(a);
    duet_module_destroy(b);
    duet_module_destroy(b0);
    duet_module_destroy(c);
    duet_module_destroy(c0);
    duet_module_destroy(d);
    duet_module_destroy(e);
}

static void test_corrupt_checkpoint(void **state) {
    tu_tmpdir *fx = *state;
    char path[512], cut[512];
    tu_path(path, sizeof path, fx->dir, "good.safetensors");
    tu_path(cut, sizeof cut, fx->dir, "cut.safetensors");
    duet_module *a = build_model(1, k_same);
    TU_OK(duet_checkpoint_save(path, a, NULL, 0, NULL, 0));
    /* Copy all but the last 10 bytes. */
    size_t n;
    unsigned char *buf = tu_read_file(path, &n);
    tu_write_file(cut, buf, n - 10);
    free(buf);
    duet_module *b = build_model(2, k_same), *b0 = build_model(2, k_same);
    tu_expect_error(duet_checkpoint_load_weights(cut, b, false, NULL, NULL, NULL), DUET_EFORMAT,
                    cut, NULL);
    tu_expect_error(duet_checkpoint_resume(cut, b, NULL, 0, NULL), DUET_EFORMAT, "truncated", NULL);
    tu_assert_same_state(b, b0, true);
    duet_module_destroy(a);
    duet_module_destroy(b);
    duet_module_destroy(b0);
}

int main(void) {
    duet_log_set_level(DUET_LOG_ERROR); /* the non-strict loads warn by design */
    const struct CMUnitTest tests[] = {
        TU_TMPDIR_TEST(test_save_resume_continue),
        TU_TMPDIR_TEST(test_strict_and_non_strict),
        TU_TMPDIR_TEST(test_corrupt_checkpoint),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
