/* safetensors checksums: every file duet writes records one per tensor;
 * loading verifies them and names the first tensor (in file order) whose
 * bytes changed: a flipped bit, a NaN written over a weight, two tensors
 * swapped. Files without checksums (as PyTorch writes) still load. */
#include "testutil.h"

#include <math.h>
#include <string.h>

static unsigned char *read_all(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *buf = malloc((size_t)len);
    assert_int_equal(fread(buf, 1, (size_t)len, f), (size_t)len);
    fclose(f);
    *n = (size_t)len;
    return buf;
}

/* The first occurrence of the string `needle` in buf[0, n) (must exist). */
static unsigned char *find_text(unsigned char *buf, size_t n, const char *needle) {
    size_t k = strlen(needle);
    for (size_t i = 0; i + k <= n; i++)
        if (memcmp(buf + i, needle, k) == 0) return buf + i;
    fail_msg("'%s' is not in the file", needle);
    return NULL;
}

/* Writes a, b, c (b and c of the same shape) and returns the body offset. */
static size_t write_three(const char *path) {
    duet_rng rng = duet_rng_make(5, 0);
    duet_tensor *a = tu_randn(&rng, 2, (int64_t[]){3, 4}, 1.0f);
    duet_tensor *b = tu_randn(&rng, 1, (int64_t[]){6}, 1.0f);
    duet_tensor *c = tu_randn(&rng, 1, (int64_t[]){6}, 1.0f);
    duet_st_writer *w = NULL;
    TU_OK(duet_st_writer_create(&w));
    TU_OK(duet_st_writer_add(w, "gen.a", a));
    TU_OK(duet_st_writer_add(w, "gen.b", b));
    TU_OK(duet_st_writer_add(w, "gen.c", c));
    TU_OK(duet_st_writer_set_meta(w, "iter", "7"));
    TU_OK(duet_st_writer_save(w, path));
    duet_st_writer_destroy(w);
    duet_tensor_release(a);
    duet_tensor_release(b);
    duet_tensor_release(c);
    size_t n;
    unsigned char *buf = read_all(path, &n);
    uint64_t hl;
    memcpy(&hl, buf, 8);
    free(buf);
    return 8 + (size_t)hl;
}

/* Loading `path` fails naming the file and `tensor`. */
static void expect_corrupt(const char *path, const char *tensor) {
    duet_st *st = NULL;
    assert_int_equal(duet_st_load(path, &st), DUET_EFORMAT);
    assert_null(st);
    const char *msg = duet_last_error();
    char want[128];
    snprintf(want, sizeof want, "tensor '%s' (bytes", tensor);
    if (strstr(msg, path) == NULL || strstr(msg, want) == NULL ||
        strstr(msg, "fails its checksum") == NULL)
        fail_msg("want the file and '%s' in: %s", want, msg);
}

static void test_written_files_verify(void **state) {
    tu_tmpdir *fx = *state;
    char path[512];
    tu_path(path, sizeof path, fx->dir, "ok.safetensors");
    write_three(path);
    duet_st *st = NULL;
    TU_OK(duet_st_load(path, &st));
    assert_true(duet_st_has_checksums(st));
    assert_string_equal(duet_st_meta(st, "checksum_algorithm"), "duet-h64");
    assert_non_null(duet_st_meta(st, "checksum/gen.b"));
    assert_string_equal(duet_st_meta(st, "iter"), "7");
    assert_string_equal(duet_st_path(st), path);
    duet_st_destroy(st);
}

/* One bit of each tensor's data flipped in turn: that tensor is named. */
static void test_flipped_bit_names_tensor(void **state) {
    tu_tmpdir *fx = *state;
    char path[512];
    tu_path(path, sizeof path, fx->dir, "flip.safetensors");
    const char *names[3] = {"gen.a", "gen.b", "gen.c"};
    size_t starts[3] = {0, 12 * 4, 18 * 4}; /* body offsets: a (12 floats), b, c */
    for (int k = 0; k < 3; k++) {
        size_t body = write_three(path);
        size_t n;
        unsigned char *buf = read_all(path, &n);
        buf[body + starts[k] + 5] ^= 0x10;
        tu_write_file(path, buf, n);
        free(buf);
        expect_corrupt(path, names[k]);
    }
}

static void test_nan_and_swap(void **state) {
    tu_tmpdir *fx = *state;
    char path[512];
    tu_path(path, sizeof path, fx->dir, "nan.safetensors");
    size_t body = write_three(path);
    size_t n;
    unsigned char *buf = read_all(path, &n);
    float nan = NAN;
    memcpy(buf + body + 3 * 4, &nan, 4); /* a[3] */
    tu_write_file(path, buf, n);
    free(buf);
    expect_corrupt(path, "gen.a");

    /* b and c swapped (same shape, both valid floats): the first in file
     * order is named. */
    body = write_three(path);
    buf = read_all(path, &n);
    unsigned char tmp[24];
    memcpy(tmp, buf + body + 48, 24);
    memcpy(buf + body + 48, buf + body + 72, 24);
    memcpy(buf + body + 72, tmp, 24);
    tu_write_file(path, buf, n);
    free(buf);
    expect_corrupt(path, "gen.b");
}

/* A file as PyTorch's safetensors writes it: no checksums, loads as is. */
static void test_file_without_checksums_loads(void **state) {
    tu_tmpdir *fx = *state;
    char path[512];
    tu_path(path, sizeof path, fx->dir, "torch.safetensors");
    const char json[] = "{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}";
    float body[2] = {1.5f, -2.0f};
    size_t hl = strlen(json);
    unsigned char buf[256];
    uint64_t h = hl;
    memcpy(buf, &h, 8);
    memcpy(buf + 8, json, hl);
    memcpy(buf + 8 + hl, body, sizeof body);
    tu_write_file(path, buf, 8 + hl + sizeof body);
    duet_st *st = NULL;
    TU_OK(duet_st_load(path, &st));
    assert_false(duet_st_has_checksums(st));
    duet_tensor *t = NULL;
    TU_OK(duet_st_get(st, "w", &t));
    assert_true(t->data[1] == -2.0f);
    duet_tensor_release(t);
    duet_st_destroy(st);
}

/* Tampered metadata: a checksum removed (or naming a missing tensor). */
static void test_missing_checksum(void **state) {
    tu_tmpdir *fx = *state;
    char path[512];
    tu_path(path, sizeof path, fx->dir, "meta.safetensors");
    write_three(path);
    size_t n;
    unsigned char *buf = read_all(path, &n);
    /* Rename the key "checksum/gen.b" to "checksum/gen.x" (same length). */
    find_text(buf, n, "checksum/gen.b")[13] = 'x';
    tu_write_file(path, buf, n);
    free(buf);
    duet_st *st = NULL;
    assert_int_equal(duet_st_load(path, &st), DUET_EFORMAT);
    if (strstr(duet_last_error(), "tensor 'gen.b' has no checksum") == NULL)
        fail_msg("%s", duet_last_error());
}

/* Every metadata entry of a real checkpoint, edited in place (same length,
 * so the JSON stays valid): the load fails naming that entry. Also an entry
 * removed (its checksum left) and one added (no checksum). */
static void test_metadata_edits(void **state) {
    tu_tmpdir *fx = *state;
    char path[512];
    tu_path(path, sizeof path, fx->dir, "ckpt.safetensors");
    duet_rng rng = duet_rng_make(9, 0);
    duet_tensor *a = tu_randn(&rng, 1, (int64_t[]){5}, 1.0f);
    duet_st_writer *w = NULL;
    TU_OK(duet_st_writer_create(&w));
    TU_OK(duet_st_writer_add(w, "gen.a", a));
    /* The runner's resume position (src/runner/runner_ckpt.c's names). */
    enum { NKEYS = 9 };
    static const char *keys[NKEYS] = {"iter", "epoch", "sampler_position", "seed", "rng_seed",
                                      "rng_stream", "rng_counter", "world_size",
                                      "samples_per_gpu"};
    static const char *vals[NKEYS] = {"1200", "3", "48", "2026", "2026", "0", "987654", "2",
                                      "16"};
    for (size_t i = 0; i < NKEYS; i++) TU_OK(duet_st_writer_set_meta(w, keys[i], vals[i]));
    assert_int_equal(duet_st_writer_set_meta(w, "checksum_meta/iter", "0"), DUET_EINVAL);
    assert_int_equal(duet_st_writer_set_meta(w, "checksum/gen.a", "0"), DUET_EINVAL);
    TU_OK(duet_st_writer_save(w, path));
    duet_st_writer_destroy(w);
    duet_tensor_release(a);
    duet_st *st = NULL;
    TU_OK(duet_st_load(path, &st));
    duet_st_destroy(st);
    size_t n;
    unsigned char *orig = read_all(path, &n);
    for (size_t i = 0; i < NKEYS; i++) {
        char needle[64];
        snprintf(needle, sizeof needle, "\"%s\":\"%s\"", keys[i], vals[i]);
        unsigned char *buf = malloc(n);
        memcpy(buf, orig, n);
        /* The value's first digit, one up (9 wraps to 1). */
        unsigned char *d = find_text(buf, n, needle) + strlen(keys[i]) + 4;
        *d = *d == '9' ? '1' : (unsigned char)(*d + 1);
        tu_write_file(path, buf, n);
        free(buf);
        assert_int_equal(duet_st_load(path, &st), DUET_EFORMAT);
        char want[64];
        snprintf(want, sizeof want, "metadata entry '%s' = ", keys[i]);
        if (strstr(duet_last_error(), want) == NULL ||
            strstr(duet_last_error(), "fails its checksum") == NULL)
            fail_msg("edit of %s: %s", keys[i], duet_last_error());
    }
    /* Renaming "iter" to "itex" (same length): a checksum for an entry the
     * file lacks; the renamed entry itself has none. */
    unsigned char *buf = malloc(n);
    memcpy(buf, orig, n);
    find_text(buf, n, "\"iter\":")[4] = 'x';
    tu_write_file(path, buf, n);
    assert_int_equal(duet_st_load(path, &st), DUET_EFORMAT);
    if (strstr(duet_last_error(), "'itex' has no checksum") == NULL &&
        strstr(duet_last_error(), "entry 'iter', which the file lacks") == NULL)
        fail_msg("%s", duet_last_error());
    free(buf);
    /* The untouched file still loads. */
    tu_write_file(path, orig, n);
    TU_OK(duet_st_load(path, &st));
    duet_st_destroy(st);
    free(orig);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        TU_TMPDIR_TEST(test_written_files_verify),
        TU_TMPDIR_TEST(test_flipped_bit_names_tensor),
        TU_TMPDIR_TEST(test_nan_and_swap),
        TU_TMPDIR_TEST(test_file_without_checksums_loads),
        TU_TMPDIR_TEST(test_missing_checksum),
        TU_TMPDIR_TEST(test_metadata_edits),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
