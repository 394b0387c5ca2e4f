/* Limits that fixed buffers used to put on real models and paths: a model
 * part's name past 127 characters (the wrapper cut it before looking the
 * part up), a tensor name past the 512-byte checksum key, and DDP counts
 * above 2^24 (they travelled as floats, which round them). */
#include "testutil.h"

#include <string.h>

#include "ddp/ddp_internal.h"

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

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_wrapper_long_part_names),
        TU_TMPDIR_TEST(test_checksum_of_long_tensor_name),
        cmocka_unit_test(test_ddp_agreement_counts_exact),
    };
    int failed = cmocka_run_group_tests(tests, tu_world_setup, tu_world_teardown);
    return duet_comm_finalize() == DUET_OK ? failed : 1;
}
