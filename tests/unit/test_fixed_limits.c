/* Limits that fixed buffers used to put on real models and paths: a model
 * part's name past 127 characters (the wrapper cut it before looking the
 * part up), a tensor name past the 512-byte checksum key, DDP counts above
 * 2^24 (they travelled as floats, which round them), config key names past
 * 255 characters and key paths past 1023 characters or 64 levels, --set on
 * a long key, optimizers for a part with a long name, and EMA hooks with
 * more than 4 module_keys or names past 63 characters. */
#include "testutil.h"

#include <string.h>

#include "ddp/ddp_internal.h"
#include "runner/runner_internal.h"

static const duet_model_ops part_ops = {.name = "LongNames"};
static const duet_module_type root_type = {"LongNames", NULL, NULL};

static char *long_name(size_t n, char fill) {
    char *s = malloc(n + 1);
    assert_non_null(s);
    memset(s, fill, n);
    memcpy(s, "part_", 5);
    s[n] = '\0';
    return s;
}

/* Two parts whose names agree on their first 150 characters: each must get
 * its own DDP under its full name. */
static void test_wrapper_long_part_names(void **state) {
    (void)state;
    duet_rng rng = duet_rng_make(3, 0);
    char *a = long_name(300, 'a'), *b = long_name(300, 'a');
    b[299] = 'b';
    duet_module *root = NULL, *m = NULL;
    TU_OK(duet_module_create(&root_type, NULL, &root));
    TU_OK(duet_linear_module_create(3, 2, true, &rng, &m));
    TU_OK(duet_module_add_child(root, a, m));
    TU_OK(duet_linear_module_create(3, 2, true, &rng, &m));
    TU_OK(duet_module_add_child(root, b, m));
    duet_model *model = NULL;
    TU_OK(duet_model_create(&part_ops, NULL, root, &model));
    const char *cpu[] = {"cpu"};
    duet_wrapper *w = NULL;
    TU_OK(duet_wrapper_create(model, tu_comm, cpu, 1, NULL, &w));
    assert_int_equal(duet_wrapper_num_ddps(w), 2);
    assert_string_equal(duet_wrapper_ddp_name(w, 0), a);
    assert_string_equal(duet_wrapper_ddp_name(w, 1), b);
    assert_true(duet_is_ddp(duet_model_part(model, a)));
    assert_true(duet_is_ddp(duet_model_part(model, b)));
    duet_wrapper_destroy(w);
    free(a);
    free(b);
}

/* A checkpoint whose tensor name is longer than the old 512-byte key
 * buffer loads with its checksum verified. */
static void test_checksum_of_long_tensor_name(void **state) {
    tu_tmpdir *fx = *state;
    char *name = long_name(700, 'w');
    duet_tensor *t = tu_zeros(1, (int64_t[]){3});
    t->data[1] = 2.5f;
    duet_st_writer *wr = NULL;
    TU_OK(duet_st_writer_create(&wr));
    TU_OK(duet_st_writer_add(wr, name, t));
    char *path = duet__path_join(fx->dir, "long.safetensors");
    TU_OK(duet_st_writer_save(wr, path));
    duet_st_writer_destroy(wr);
    duet_st *st = NULL;
    TU_OK(duet_st_load(path, &st));
    assert_true(duet_st_has_checksums(st));
    duet_tensor *back = NULL;
    TU_OK(duet_st_get(st, name, &back));
    assert_true(back->data[1] == 2.5f);
    duet_tensor_release(back);
    duet_st_destroy(st);
    duet_tensor_release(t);
    free(path);
    free(name);
}

/* The agreement reduces each rank's message with MAX; done here by hand
 * for two ranks whose counts differ by one just above 2^24 (float32 makes
 * them equal) and far above it. */
static void test_ddp_agreement_counts_exact(void **state) {
    (void)state;
    const size_t big[][2] = {{(1u << 24) + 1, 1u << 24},
                             {(1u << 24) + 3, (1u << 24) + 2},
                             {(size_t)5000000000ULL, (size_t)4999999999ULL}};
    for (size_t c = 0; c < sizeof big / sizeof big[0]; c++) {
        int64_t r0[DUET__DDP_AGREE_LEN], r1[DUET__DDP_AGREE_LEN], v[DUET__DDP_AGREE_LEN];
        duet__ddp_agree_encode(r0, 7, big[c][0], false);
        duet__ddp_agree_encode(r1, 7, big[c][1], c == 2);
        for (int i = 0; i < DUET__DDP_AGREE_LEN; i++) v[i] = r0[i] > r1[i] ? r0[i] : r1[i];
        duet__ddp_agreement a = duet__ddp_agree_decode(v);
        assert_int_equal(a.max_started, 7);
        assert_int_equal(a.min_started, 7);
        assert_int_equal(a.max_ready, big[c][0]);
        assert_int_equal(a.min_ready, big[c][1]);
        assert_true(a.max_ready != a.min_ready);
        assert_int_equal(a.any_error, c == 2);
    }
}

/* The config of text, loaded (fails the test when it does not load). */
static duet_config *load_cfg(const char *text) {
    duet_config *cfg = NULL;
    TU_OK(duet_config_load_string(text, "long.cfg", &cfg));
    return cfg;
}

/* A member name of 300 characters is read like any other (the walk used to
 * call a name of 256 or more a malformed path). */
static void test_config_long_key_name(void **state) {
    (void)state;
    char *key = long_name(300, 'k');
    char *text = duet__strf("g = { %s = 5; };", key);
    char *path = duet__strf("g.%s", key);
    duet_config *cfg = load_cfg(text);
    int64_t v = 0;
    TU_OK(duet_config_get_int(cfg, path, &v));
    assert_int_equal(v, 5);
    TU_OK(duet_config_check_unused(cfg));
    duet_config_destroy(cfg);
    free(path);
    free(text);
    free(key);
}

/* Five levels of 300-character names: views four deep read the innermost
 * key, and messages name the whole path (1500 characters, past the old
 * 1024-byte path buffers). */
static void test_config_long_key_path(void **state) {
    (void)state;
    char *n[5];
    duet__str text = {0}, full = {0};
    for (int i = 0; i < 5; i++) {
        n[i] = long_name(300, (char)('a' + i));
        duet__str_addf(&text, "%s = { ", n[i]);
        duet__str_add_item(&full, ".", "%s", n[i]);
    }
    duet__str_addf(&text, "x = 1; stray = 2; }; }; }; }; };");
    duet_config *root = load_cfg(duet__str_get(&text));
    duet_config *view[5] = {root};
    for (int i = 0; i < 4; i++) TU_OK(duet_config_sub(view[i], n[i], &view[i + 1]));
    int64_t v = 0;
    duet_config *inner = NULL;
    TU_OK(duet_config_sub(view[4], n[4], &inner));
    TU_OK(duet_config_get_int(inner, "x", &v));
    assert_int_equal(v, 1);
    /* A missing key's message names it under the whole prefix. */
    char *missing = duet__strf("%s.missing", duet__str_get(&full));
    assert_int_equal(duet_config_get_int(inner, "missing", &v), DUET_ECONFIG);
    assert_non_null(strstr(duet_last_error(), missing));
    /* The unused key's message names its whole path. */
    char *stray = duet__strf("'%s.stray'", duet__str_get(&full));
    assert_int_equal(duet_config_check_unused(root), DUET_ECONFIG);
    assert_non_null(strstr(duet_last_error(), stray));
    free(stray);
    free(missing);
    duet_config_destroy(inner);
    for (int i = 4; i >= 0; i--) duet_config_destroy(view[i]);
    for (int i = 0; i < 5; i++) free(n[i]);
    duet__str_free(&text);
    duet__str_free(&full);
}

/* 80 levels: the unknown key's path has all of them (it stopped at 64). */
static void test_config_deep_key_path(void **state) {
    (void)state;
    enum { DEPTH = 80 };
    duet__str text = {0}, full = {0};
    for (int i = 0; i < DEPTH; i++) {
        duet__str_addf(&text, "g%d = { ", i);
        duet__str_add_item(&full, ".", "g%d", i);
    }
    duet__str_addf(&text, "stray = 1;");
    for (int i = 0; i < DEPTH; i++) duet__str_addf(&text, " };");
    duet_config *cfg = load_cfg(duet__str_get(&text));
    char *stray = duet__strf("unknown key '%s.stray'", duet__str_get(&full));
    assert_int_equal(duet_config_check_unused(cfg), DUET_ECONFIG);
    assert_non_null(strstr(duet_last_error(), stray));
    free(stray);
    duet_config_destroy(cfg);
    duet__str_free(&text);
    duet__str_free(&full);
}

/* --set of a 64-bit value on a 32-bit key with a 300-character name
 * replaces that key (it used to remove and re-add a name cut at 255). */
static void test_config_set_long_key(void **state) {
    (void)state;
    char *key = long_name(300, 's');
    char *text = duet__strf("g = { %s = 1; };", key);
    char *set = duet__strf("g.%s=5000000000", key);
    char *path = duet__strf("g.%s", key);
    duet_config *cfg = load_cfg(text);
    TU_OK(duet_config_set(cfg, set));
    int64_t v = 0;
    TU_OK(duet_config_get_int(cfg, path, &v));
    assert_int_equal(v, 5000000000LL);
    size_t n = 0;
    TU_OK(duet_config_length(cfg, "g", &n));
    assert_int_equal(n, 1);
    TU_OK(duet_config_check_unused(cfg));
    duet_config_destroy(cfg);
    free(path);
    free(set);
    free(text);
    free(key);
}

/* A model whose parts are a, b, ... (linear 3 -> 2 each). */
static duet_model *model_with_parts(char **names, size_t n) {
    duet_rng rng = duet_rng_make(5, 0);
    duet_module *root = NULL;
    TU_OK(duet_module_create(&root_type, NULL, &root));
    for (size_t i = 0; i < n; i++) {
        duet_module *m = NULL;
        TU_OK(duet_linear_module_create(3, 2, true, &rng, &m));
        TU_OK(duet_module_add_child(root, names[i], m));
    }
    duet_model *model = NULL;
    TU_OK(duet_model_create(&part_ops, NULL, root, &model));
    return model;
}

/* optimizers.<part> for a part named with 300 characters (the group's
 * path was cut at 255 before it was opened). */
static void test_optimizer_for_long_part(void **state) {
    (void)state;
    char *part = long_name(300, 'p');
    duet_model *model = model_with_parts(&part, 1);
    char *text = duet__strf("optimizers = { %s = { type = \"Adam\"; lr = 0.001; }; };", part);
    duet_config *cfg = load_cfg(text);
    duet_optimizer_set *set = NULL;
    TU_OK(duet_build_optimizers(cfg, "optimizers", model, &set));
    assert_int_equal(duet_optimizer_set_count(set), 1);
    assert_string_equal(duet_optimizer_set_name(set, 0), part);
    TU_OK(duet_config_check_unused(cfg));
    duet_optimizer_set_destroy(set);
    duet_config_destroy(cfg);
    duet_model_destroy(model);
    free(text);
    free(part);
}

/* An EMA hook with six module_keys, one of them 300 characters long: all
 * are read (at most 4 of at most 63 characters were), and before start_iter
 * each copy takes its part's state, found under the part's whole name. */
static void test_ema_many_long_keys(void **state) {
    (void)state;
    enum { NKEYS = 6 };
    char *parts[2 * NKEYS];
    duet__str keys = {0};
    for (int i = 0; i < NKEYS; i++) {
        parts[i] = i == 0 ? long_name(300, 'e') : duet__strf("net%d", i);
        parts[NKEYS + i] = duet__strf("%s_ema", parts[i]);
        duet__str_add_item(&keys, ", ", "\"%s\"", parts[NKEYS + i]);
    }
    duet_model *model = model_with_parts(parts, 2 * NKEYS);
    char *text = duet__strf("custom_hooks = ( { type = \"ExponentialMovingAverageHook\"; "
                            "module_keys = [%s]; interval = 1; start_iter = 10; } );",
                            duet__str_get(&keys));
    duet__run r = {0};
    r.cfg = load_cfg(text);
    r.model = model;
    TU_OK(duet__run_read_ema(&r));
    assert_int_equal(r.ema.n, NKEYS);
    for (int i = 0; i < NKEYS; i++) assert_string_equal(r.ema.keys[i], parts[NKEYS + i]);
    TU_OK(duet__run_ema_after_iter(&r, 0));
    for (int i = 0; i < NKEYS; i++) {
        duet_module *net = duet_model_part(model, parts[i]);
        duet_module *ema = duet_model_part(model, parts[NKEYS + i]);
        for (size_t p = 0; p < duet_module_param_count(net); p++) {
            const duet_tensor *a = duet_module_param_at(net, p), *b = duet_module_param_at(ema, p);
            assert_memory_equal(a->data, b->data, (size_t)a->numel * sizeof(float));
        }
    }
    duet__run_clear_ema(&r);
    duet_config_destroy(r.cfg);
    duet_model_destroy(model);
    free(text);
    duet__str_free(&keys);
    for (int i = 0; i < 2 * NKEYS; i++) free(parts[i]);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_wrapper_long_part_names),
        TU_TMPDIR_TEST(test_checksum_of_long_tensor_name),
        cmocka_unit_test(test_ddp_agreement_counts_exact),
        cmocka_unit_test(test_config_long_key_name),
        cmocka_unit_test(test_config_long_key_path),
        cmocka_unit_test(test_config_deep_key_path),
        cmocka_unit_test(test_config_set_long_key),
        cmocka_unit_test(test_optimizer_for_long_part),
        cmocka_unit_test(test_ema_many_long_keys),
    };
    int failed = cmocka_run_group_tests(tests, tu_world_setup, tu_world_teardown);
    return duet_comm_finalize() == DUET_OK ? failed : 1;
}
