/* base's shared helpers (src/base/str.c): the growable string that replaced
 * the fixed 256/512-byte name lists, whole-file reads, path joining and
 * string copies. */
#include <stdio.h>
#include <string.h>

#include "testutil.h"

/* Appends far past any of the old fixed buffers (512 bytes) and checks every
 * byte: a list of 300 long names must come back whole. */
static void test_str_grows_without_truncating(void **state) {
    (void)state;
    duet__str b = {0};
    assert_string_equal(duet__str_get(&b), "");
    char want[300 * 40 + 1] = "";
    size_t at = 0;
    for (int i = 0; i < 300; i++) {
        duet__str_add_item(&b, ", ", "generator.body.%d.conv_%03d", i, i);
        at += (size_t)snprintf(want + at, sizeof want - at, "%sgenerator.body.%d.conv_%03d",
                               i ? ", " : "", i, i);
    }
    assert_false(b.failed);
    assert_int_equal(b.len, strlen(want));
    assert_string_equal(duet__str_get(&b), want);
    duet__str_addf(&b, " (%d)", 300);
    assert_int_equal(b.len, strlen(want) + 6);
    assert_string_equal(duet__str_get(&b) + strlen(want), " (300)");
    duet__str_free(&b);
    assert_null(b.s);
    assert_int_equal(b.len, 0);
}

static void test_path_join_and_strdup(void **state) {
    (void)state;
    char *p = duet__path_join("work_dirs/run", "iter_10.safetensors");
    assert_string_equal(p, "work_dirs/run/iter_10.safetensors");
    char *d = duet__strdup(p);
    assert_ptr_not_equal(d, p);
    assert_string_equal(d, p);
    free(p);
    free(d);
    assert_null(duet__strdup(NULL));
}

static void test_read_file(void **state) {
    tu_tmpdir *fx = *state;
    char *path = duet__path_join(fx->dir, "bytes.bin");
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    unsigned char data[5000];
    for (size_t i = 0; i < sizeof data; i++) data[i] = (unsigned char)(i * 7 + 3);
    assert_int_equal(fwrite(data, 1, sizeof data, f), sizeof data);
    fclose(f);
    unsigned char *got = NULL;
    size_t n = 0;
    TU_OK(duet__read_file(path, &got, &n));
    assert_int_equal(n, sizeof data);
    assert_memory_equal(got, data, sizeof data);
    assert_int_equal((uintptr_t)got % 64, 0);
    duet_aligned_free(got);
    free(path);

    path = duet__path_join(fx->dir, "missing.bin");
    assert_int_equal(duet__read_file(path, &got, &n), DUET_ENOTFOUND);
    assert_null(got);
    assert_non_null(strstr(duet_last_error(), "missing.bin"));
    free(path);
    /* A directory is not a regular file. */
    assert_int_equal(duet__read_file(fx->dir, &got, &n), DUET_EIO);
    assert_non_null(strstr(duet_last_error(), "not a regular file"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_str_grows_without_truncating),
        cmocka_unit_test(test_path_join_and_strdup),
        TU_TMPDIR_TEST(test_read_file),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
