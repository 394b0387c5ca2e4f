/* Checkpoint files: save a small GAN-shaped module tree (nn.h layers) with an
 * Adam and an SGD optimizer and metadata, resume into a differently
 * initialised copy (bit-identical state, bit-identical continuation),
 * strict and non-strict loading (missing / unexpected keys, required
 * prefixes, shape mismatches, optimizers), metadata parsing, corrupt and
 * partial files leaving the model unchanged, and the atomic save. */
#include "testutil.h"

#include <dirent.h>
#include <string.h>
#include <unistd.h>

#include "duet/train.h"

typedef struct {
    char dir[256];
} fixture;

static int setup(void **state) {
    fixture *fx = calloc(1, sizeof *fx);
    const char *tmp = getenv("TMPDIR");
    snprintf(fx->dir, sizeof fx->dir, "%s/duet_ckpt_XXXXXX", tmp != NULL && tmp[0] ? tmp : "/tmp");
    if (mkdtemp(fx->dir) == NULL) return -1;
    *state = fx;
    return 0;
}

static int count_files(const char *dir) {
    DIR *d = opendir(dir);
    assert_non_null(d);
    int n = 0;
    struct dirent *de;
    while ((de = readdir(d)) != NULL)
        if (strcmp(de->d_name, ".") != 0 && strcmp(de->d_name, "..") != 0) n++;
    closedir(d);
    return n;
}

static int teardown(void **state) {
    fixture *fx = *state;
    DIR *d = opendir(fx->dir);
    if (d != NULL) {
        struct dirent *de;
        char p[512];
        while ((de = readdir(d)) != NULL) {
            if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0) continue;
            snprintf(p, sizeof p, "%s/%s", fx->dir, de->d_name);
            unlink(p);
        }
        closedir(d);
    }
    rmdir(fx->dir);
    free(fx);
    return 0;
}

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
    TU_OK(duet_conv2d_module_create(&m, 3, o.gen_out, 3, 1, 1, true, &rng));
    TU_OK(duet_module_add_child(gen, "conv_first", m));
    TU_OK(duet_sequential_create(&up));
    TU_OK(duet_conv2d_module_create(&m, o.gen_out, 16, 3, 1, 1, true, &rng));
    TU_OK(duet_sequential_append(up, m));
    TU_OK(duet_module_add_child(gen, "upsample", up));
    TU_OK(duet_module_add_child(model, "generator", gen));
    if (!o.no_disc) {
        TU_OK(duet_sequential_create(&disc));
        TU_OK(duet_conv2d_module_create(&m, 3, 4, 3, 1, 1, false, &rng));
        TU_OK(duet_module_add_child(disc, "conv0_0", m));
        TU_OK(duet_batchnorm2d_module_create(&m, 4, 1e-5f, 0.1f));
        /* Non-default buffers, so that loading them is visible. */
        duet_tensor *rm = duet_module_buffer(m, "running_mean");
        for (int64_t i = 0; i < rm->numel; i++) rm->data[i] = duet_rng_normal(&rng);
        duet_module_buffer(m, "num_batches_tracked")->data[0] = (float)(seed % 100);
        TU_OK(duet_module_add_child(disc, "bn0_0", m));
        TU_OK(duet_linear_module_create(&m, 8, 2, true, &rng));
        TU_OK(duet_module_add_child(disc, "linear1", m));
        TU_OK(duet_module_add_child(model, "discriminator", disc));
    }
    if (o.extra) {
        TU_OK(duet_conv2d_module_create(&m, 3, 2, 1, 1, 0, true, &rng));
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
    TU_OK(duet_adam_create(&opt, &p, o));
    duet_named_tensors_free(&p);
    return opt;
}

static duet_optimizer *make_sgd(duet_module *part) {
    duet_named_tensors p;
    TU_OK(duet_module_named_parameters(part, true, &p));
    duet_sgd_opts o = duet_sgd_opts_default();
    o.lr = 0.1f;
    o.momentum = 0.9f;
    duet_optimizer *opt = NULL;
    TU_OK(duet_sgd_create(&opt, &p, o));
    duet_named_tensors_free(&p);
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
    duet_named_tensors_free(&p);
}

/* Every state-dict entry of a and b bitwise equal (want_equal) or at least
 * one differs (!want_equal). */
static void assert_same_state(duet_module *a, duet_module *b, bool want_equal) {
    duet_named_tensors sa, sb;
    TU_OK(duet_module_state(a, &sa));
    TU_OK(duet_module_state(b, &sb));
    assert_int_equal(sa.count, sb.count);
    bool all_equal = true;
    for (size_t i = 0; i < sa.count; i++) {
        assert_string_equal(sa.items[i].name, sb.items[i].name);
        const duet_tensor *x = sa.items[i].tensor, *y = sb.items[i].tensor;
        assert_int_equal(x->numel, y->numel);
        bool eq = memcmp(x->data, y->data, (size_t)x->numel * sizeof(float)) == 0;
        if (want_equal && !eq) fail_msg("%s differs", sa.items[i].name);
        all_equal &= eq;
    }
    if (!want_equal) assert_false(all_equal);
    duet_named_tensors_free(&sa);
    duet_named_tensors_free(&sb);
}

static void path_in(const fixture *fx, const char *name, char *out, size_t size) {
    snprintf(out, size, "%s/%s", fx->dir, name);
}

static void test_save_resume_continue(void **state) {
    fixture *fx = *state;
    char path[512];
    path_in(fx, "iter_7.safetensors", path, sizeof path);
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
    assert_int_equal(count_files(fx->dir), 1);

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
    assert_same_state(a, b, false);
    duet_optimizer *gb = make_adam(duet_module_child(b, "generator"));
    duet_optimizer *db = make_sgd(duet_module_child(b, "discriminator"));
    duet_named_optimizer opts_b[] = {{"generator", gb}, {"discriminator", db}};
    duet_st *ck = NULL;
    TU_OK(duet_checkpoint_resume(path, b, opts_b, 2, &ck));
    assert_same_state(a, b, true);
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
    assert_same_state(a, b, true);

    /* Saving again over the same path replaces it atomically. */
    TU_OK(duet_checkpoint_save(path, b, opts_b, 2, NULL, 0));
    assert_int_equal(count_files(fx->dir), 1);
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

static void expect_error(int rc, int want, const char *needle) {
    if (rc != want)
        fail_msg("expected %s, got %s: %s", duet_err_name(want), duet_err_name(rc),
                 duet_last_error());
    if (strstr(duet_last_error(), needle) == NULL)
        fail_msg("message '%s' should contain '%s'", duet_last_error(), needle);
}

static void test_strict_and_non_strict(void **state) {
    fixture *fx = *state;
    char weights[512], full[512];
    path_in(fx, "weights.safetensors", weights, sizeof weights);
    path_in(fx, "full.safetensors", full, sizeof full);
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
    expect_error(duet_checkpoint_resume(weights, b, opts_b, 2, NULL), DUET_ENOTFOUND,
                 "no state for optimizer 'generator'");
    assert_non_null(strstr(duet_last_error(), weights));
    assert_same_state(b, b0, true);
    /* Strict optimizers: the file holds a state nobody claims. */
    duet_st *ck = NULL;
    TU_OK(duet_st_load(full, &ck));
    expect_error(duet_checkpoint_load_optimizers(ck, opts_b, 1, true), DUET_ENOTFOUND,
                 "'optimizer.discriminator.");
    TU_OK(duet_checkpoint_load_optimizers(ck, opts_b, 1, false));
    assert_true(duet_optimizer_steps(gb) == 1 && duet_optimizer_steps(db) == 0);
    duet_named_optimizer bad[] = {{"gen.x", gb}};
    expect_error(duet_checkpoint_load_optimizers(ck, bad, 1, false), DUET_EINVAL, "gen.x");
    /* Loading weights strictly from a full checkpoint ignores optimizer.*. */
    TU_OK(duet_checkpoint_load_model(ck, b, true, NULL, NULL, NULL));
    assert_same_state(a, b, true);
    duet_st_destroy(ck);

    /* A model with an extra child: strict fails and lists it, leaving the
     * model unchanged; non-strict loads the rest and counts it. */
    model_opts extra = k_same;
    extra.extra = true;
    duet_module *c = build_model(3, extra);
    duet_module *c0 = build_model(3, extra);
    size_t nmissing = 99, nunexpected = 99;
    expect_error(duet_checkpoint_load_weights(weights, c, true, NULL, &nmissing, &nunexpected),
                 DUET_ENOTFOUND, "extra.weight");
    assert_non_null(strstr(duet_last_error(), weights));
    assert_same_state(c, c0, true);
    expect_error(duet_checkpoint_load_weights(weights, c, false, "extra.", NULL, NULL),
                 DUET_ENOTFOUND, "lacks 2 weights the model needs (extra.*): extra.weight, "
                 "extra.bias");
    assert_same_state(c, c0, true);
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
    expect_error(duet_checkpoint_load_weights(full, d, true, NULL, NULL, NULL), DUET_ENOTFOUND,
                 "discriminator.linear1.bias");

    /* Shapes must match even non-strictly. */
    model_opts wide = k_same;
    wide.gen_out = 5;
    duet_module *e = build_model(5, wide);
    expect_error(duet_checkpoint_load_weights(weights, e, false, NULL, NULL, NULL), DUET_ESHAPE,
                 "generator.conv_first.weight");

    expect_error(duet_checkpoint_save(full, a, bad, 1, NULL, 0), DUET_EINVAL, "gen.x");

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
    fixture *fx = *state;
    char path[512], cut[512];
    path_in(fx, "good.safetensors", path, sizeof path);
    path_in(fx, "cut.safetensors", cut, sizeof cut);
    duet_module *a = build_model(1, k_same);
    TU_OK(duet_checkpoint_save(path, a, NULL, 0, NULL, 0));
    /* Copy all but the last 10 bytes. */
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)n);
    assert_int_equal(fread(buf, 1, (size_t)n, f), (size_t)n);
    fclose(f);
    f = fopen(cut, "wb");
    assert_int_equal(fwrite(buf, 1, (size_t)n - 10, f), (size_t)n - 10);
    fclose(f);
    free(buf);
    duet_module *b = build_model(2, k_same), *b0 = build_model(2, k_same);
    expect_error(duet_checkpoint_load_weights(cut, b, false, NULL, NULL, NULL), DUET_EFORMAT,
                 cut);
    expect_error(duet_checkpoint_resume(cut, b, NULL, 0, NULL), DUET_EFORMAT, "truncated");
    assert_same_state(b, b0, true);
    duet_module_destroy(a);
    duet_module_destroy(b);
    duet_module_destroy(b0);
}

/* The checkpoint example in duet/train.h, verbatim but for the path. */
static int header_example(const char *dir, duet_module *model, duet_optimizer *g_opt,
                          duet_optimizer *d_opt, const char *text, int64_t *iter_out) {
    char path[512];
    snprintf(path, sizeof path, "%s/iter_1000.safetensors", dir);
    duet_named_optimizer opts[] = {{"generator", g_opt}, {"discriminator", d_opt}};
    duet_meta_item meta[] = {{"iter", "1000"}, {"config", text}};
    DUET_TRY(duet_checkpoint_save(path, model, opts, 2, meta, 2));

    duet_st *ck = NULL;                                 // --resume
    DUET_TRY(duet_checkpoint_resume(path, model, opts, 2, &ck));
    int64_t iter;
    DUET_TRY(duet_checkpoint_meta_int(ck, "iter", &iter));
    duet_st_destroy(ck);
    *iter_out = iter;
    return DUET_OK;
}

static void test_header_example(void **state) {
    fixture *fx = *state;
    duet_module *model = build_model(1, k_same);
    duet_optimizer *g = make_adam(duet_module_child(model, "generator"));
    duet_optimizer *d = make_sgd(duet_module_child(model, "discriminator"));
    int64_t iter = 0;
    TU_OK(header_example(fx->dir, model, g, d, "total_iters = 1000;", &iter));
    assert_int_equal(iter, 1000);
    duet_optimizer_destroy(g);
    duet_optimizer_destroy(d);
    duet_module_destroy(model);
}

int main(void) {
    duet_log_set_level(DUET_LOG_ERROR); /* the non-strict loads warn by design */
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_save_resume_continue, setup, teardown),
        cmocka_unit_test_setup_teardown(test_strict_and_non_strict, setup, teardown),
        cmocka_unit_test_setup_teardown(test_corrupt_checkpoint, setup, teardown),
        cmocka_unit_test_setup_teardown(test_header_example, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
