/* safetensors: writer/reader round trip (float tensors, raw I64/U8, 0-d
 * scalars, metadata, insertion order, 8-byte header padding), dtype
 * conversion of hand-made F16/BF16/F64/I32 files, every kind of corrupt file
 * (DUET_EFORMAT naming the file), and the atomic save. */
#include "testutil.h"

#include <math.h>
#include <string.h>
#include <sys/stat.h>

/* A file made by hand: 8-byte length, the JSON as given (unpadded), body. */
static void write_st(const char *path, const char *json, const void *body, size_t nbody) {
    size_t hl = strlen(json);
    unsigned char *buf = malloc(8 + hl + nbody + 1);
    uint64_t h = hl;
    memcpy(buf, &h, 8);
    memcpy(buf + 8, json, hl);
    if (nbody > 0) memcpy(buf + 8 + hl, body, nbody);
    tu_write_file(path, buf, 8 + hl + nbody);
    free(buf);
}

static void test_round_trip(void **state) {
    tu_tmpdir *fx = *state;
    char path[512];
    tu_path(path, sizeof path, fx->dir, "rt.safetensors");
    duet_rng rng = duet_rng_make(3, 0);
    duet_tensor *a = tu_randn(&rng, 4, (int64_t[]){2, 3, 4, 5}, 1.0f);
    duet_tensor *b = tu_randn(&rng, 1, (int64_t[]){7}, 10.0f);
    duet_tensor *c = tu_randn(&rng, 2, (int64_t[]){3, 1}, 0.1f);
    int64_t steps[3] = {INT64_C(1) << 40, -5, 12345};
    int64_t scalar = 9;
    unsigned char blob[5] = {0, 1, 2, 250, 255};

    duet_st_writer *w = NULL;
    TU_OK(duet_st_writer_create(&w));
    /* Insertion order deliberately not alphabetical. */
    TU_OK(duet_st_writer_add(w, "zeta.weight", a));
    TU_OK(duet_st_writer_add(w, "alpha.bias", b));
    TU_OK(duet_st_writer_add_raw(w, "opt.step", "I64", 1, (int64_t[]){3}, steps, sizeof steps));
    TU_OK(duet_st_writer_add_raw(w, "bn.num_batches_tracked", "I64", 0, NULL, &scalar, 8));
    TU_OK(duet_st_writer_add_raw(w, "blob", "U8", 1, (int64_t[]){5}, blob, sizeof blob));
    TU_OK(duet_st_writer_add(w, "mid", c));
    TU_OK(duet_st_writer_set_meta(w, "iteration", "100"));
    TU_OK(duet_st_writer_set_meta(w, "config", "model = { type = \"SRGAN\"; };\n\"quoted\"\t\\"));
    TU_OK(duet_st_writer_set_meta(w, "iteration", "200")); /* replaces */
    /* Data is copied when added: changing the source afterwards must not
     * change the file. */
    float a0 = a->data[0];
    a->data[0] = 1234.5f;
    assert_int_equal(duet_st_writer_add(w, "mid", c), DUET_EINVAL);
    assert_non_null(strstr(duet_last_error(), "mid"));
    assert_int_equal(duet_st_writer_add_raw(w, "x", "I64", 1, (int64_t[]){3}, steps, 16),
                     DUET_EINVAL);
    assert_int_equal(duet_st_writer_add_raw(w, "y", "Q8", 1, (int64_t[]){3}, steps, 3),
                     DUET_EINVAL);
    TU_OK(duet_st_writer_save(w, path));
    duet_st_writer_destroy(w);
    a->data[0] = a0;

    duet_st *st = NULL;
    TU_OK(duet_st_load(path, &st));
    assert_int_equal(duet_st_count(st), 6);
    const char *order[6] = {"zeta.weight", "alpha.bias", "opt.step", "bn.num_batches_tracked",
                            "blob", "mid"};
    for (size_t i = 0; i < 6; i++) assert_string_equal(duet_st_name(st, i), order[i]);
    assert_true(duet_st_has(st, "mid"));
    assert_false(duet_st_has(st, "mi"));

    duet_tensor *t = NULL;
    TU_OK(duet_st_get(st, "zeta.weight", &t));
    assert_int_equal(t->ndim, 4);
    assert_true(duet_tensor_same_shape(t, a));
    assert_memory_equal(t->data, a->data, (size_t)a->numel * sizeof(float));
    duet_tensor_release(t);
    TU_OK(duet_st_get(st, "alpha.bias", &t));
    assert_memory_equal(t->data, b->data, sizeof(float) * 7);
    duet_tensor_release(t);

    /* I64 through the float path and the raw path. */
    TU_OK(duet_st_get(st, "opt.step", &t));
    assert_int_equal(t->numel, 3);
    assert_true(t->data[0] == (float)(INT64_C(1) << 40) && t->data[1] == -5.0f &&
                t->data[2] == 12345.0f);
    duet_tensor_release(t);
    const char *dtype;
    const void *bytes;
    size_t nbytes;
    int ndim;
    int64_t shape[DUET_MAX_DIMS];
    TU_OK(duet_st_raw(st, "opt.step", &dtype, &bytes, &nbytes, &ndim, shape));
    assert_string_equal(dtype, "I64");
    assert_int_equal(nbytes, sizeof steps);
    assert_int_equal(ndim, 1);
    assert_int_equal(shape[0], 3);
    assert_memory_equal(bytes, steps, sizeof steps);
    TU_OK(duet_st_raw(st, "bn.num_batches_tracked", &dtype, &bytes, &nbytes, &ndim, shape));
    assert_int_equal(ndim, 0);
    assert_int_equal(nbytes, 8);
    assert_memory_equal(bytes, &scalar, 8);
    /* A 0-d scalar reads as shape [1]. */
    TU_OK(duet_st_get(st, "bn.num_batches_tracked", &t));
    assert_int_equal(t->ndim, 1);
    assert_int_equal(t->numel, 1);
    assert_true(t->data[0] == 9.0f);
    duet_tensor_release(t);
    TU_OK(duet_st_raw(st, "blob", &dtype, &bytes, &nbytes, NULL, NULL));
    assert_string_equal(dtype, "U8");
    assert_memory_equal(bytes, blob, 5);
    TU_OK(duet_st_get(st, "blob", &t));
    assert_true(t->data[3] == 250.0f && t->data[4] == 255.0f);
    duet_tensor_release(t);

    /* copy_into: right shape copies, wrong shape names both shapes. */
    duet_tensor *dst = tu_zeros(2, (int64_t[]){3, 1});
    TU_OK(duet_st_copy_into(st, "mid", dst));
    assert_memory_equal(dst->data, c->data, 3 * sizeof(float));
    duet_tensor_release(dst);
    dst = tu_zeros(1, (int64_t[]){3});
    assert_int_equal(duet_st_copy_into(st, "mid", dst), DUET_ESHAPE);
    assert_non_null(strstr(duet_last_error(), "[3, 1]"));
    assert_non_null(strstr(duet_last_error(), "[3]"));
    duet_tensor_release(dst);

    assert_int_equal(duet_st_get(st, "nope", &t), DUET_ENOTFOUND);
    assert_null(t);
    assert_non_null(strstr(duet_last_error(), "nope"));
    assert_non_null(strstr(duet_last_error(), path));

    assert_string_equal(duet_st_meta(st, "iteration"), "200");
    assert_string_equal(duet_st_meta(st, "config"),
                        "model = { type = \"SRGAN\"; };\n\"quoted\"\t\\");
    assert_null(duet_st_meta(st, "epoch"));
    duet_st_destroy(st);

    /* The header is padded with spaces to a multiple of 8 and the body
     * follows it directly. */
    size_t n;
    unsigned char *raw = tu_read_file(path, &n);
    uint64_t hl;
    memcpy(&hl, raw, 8);
    assert_int_equal(hl % 8, 0);
    assert_true(raw[8] == '{');
    size_t last = 8 + (size_t)hl - 1;
    while (raw[last] == ' ') last--;
    assert_true(raw[last] == '}');
    size_t body = (size_t)a->numel * 4 + 7 * 4 + sizeof steps + 8 + 5 + 3 * 4;
    assert_int_equal(n, 8 + hl + body);
    free(raw);

    duet_tensor_release(a);
    duet_tensor_release(b);
    duet_tensor_release(c);
}

static void test_empty_writer(void **state) {
    tu_tmpdir *fx = *state;
    char path[512];
    tu_path(path, sizeof path, fx->dir, "empty.safetensors");
    duet_st_writer *w = NULL;
    TU_OK(duet_st_writer_create(&w));
    TU_OK(duet_st_writer_save(w, path));
    duet_st_writer_destroy(w);
    duet_st *st = NULL;
    TU_OK(duet_st_load(path, &st));
    assert_int_equal(duet_st_count(st), 0);
    assert_null(duet_st_meta(st, "x"));
    duet_st_destroy(st);
}

/* Hand-made file with JSON keys out of data order and every converted
 * dtype, with known bit patterns. */
static void test_dtype_conversion(void **state) {
    tu_tmpdir *fx = *state;
    char path[512];
    tu_path(path, sizeof path, fx->dir, "dtypes.safetensors");
    unsigned char body[256];
    size_t at = 0;
    /* F16: 1, -2, 65504 (max), 2^-24 (smallest subnormal), -0, inf, 0.5+2^-11 */
    uint16_t h[7] = {0x3C00, 0xC000, 0x7BFF, 0x0001, 0x8000, 0x7C00, 0x3801};
    memcpy(body + at, h, sizeof h);
    at += sizeof h; /* 14 */
    /* BF16: 1, -3.5 */
    uint16_t bf[2] = {0x3F80, 0xC060};
    memcpy(body + at, bf, sizeof bf);
    at += sizeof bf; /* 18 */
    double f64[2] = {0.1, -1e10};
    memcpy(body + at, f64, sizeof f64);
    at += sizeof f64; /* 34 */
    int32_t i32[2] = {-7, 2000000};
    memcpy(body + at, i32, sizeof i32);
    at += sizeof i32; /* 42 */
    assert_int_equal(at, 42);
    const char *json = "{\"i32\":{\"dtype\":\"I32\",\"shape\":[2],\"data_offsets\":[34,42]},"
                       "\"h\":{\"dtype\":\"F16\",\"shape\":[7],\"data_offsets\":[0,14]},"
                       "\"__metadata__\":{\"format\":\"pt\"},"
                       "\"f64\":{\"dtype\":\"F64\",\"shape\":[1,2],\"data_offsets\":[18,34]},"
                       "\"bf\":{\"dtype\":\"BF16\",\"shape\":[2],\"data_offsets\":[14,18]}}";
    write_st(path, json, body, at);
    duet_st *st = NULL;
    TU_OK(duet_st_load(path, &st));
    /* File order is data order, not JSON order. */
    assert_string_equal(duet_st_name(st, 0), "h");
    assert_string_equal(duet_st_name(st, 1), "bf");
    assert_string_equal(duet_st_name(st, 2), "f64");
    assert_string_equal(duet_st_name(st, 3), "i32");
    assert_string_equal(duet_st_meta(st, "format"), "pt");
    duet_tensor *t = NULL;
    TU_OK(duet_st_get(st, "h", &t));
    float want_h[7] = {1.0f, -2.0f, 65504.0f, 5.9604644775390625e-08f, -0.0f, INFINITY,
                       0.50048828125f};
    for (int i = 0; i < 7; i++) assert_true(t->data[i] == want_h[i]);
    assert_true(signbit(t->data[4]));
    duet_tensor_release(t);
    TU_OK(duet_st_get(st, "bf", &t));
    assert_true(t->data[0] == 1.0f && t->data[1] == -3.5f);
    duet_tensor_release(t);
    TU_OK(duet_st_get(st, "f64", &t));
    assert_int_equal(t->ndim, 2);
    assert_true(t->data[0] == 0.1f && t->data[1] == -1e10f);
    duet_tensor_release(t);
    TU_OK(duet_st_get(st, "i32", &t));
    assert_true(t->data[0] == -7.0f && t->data[1] == 2000000.0f);
    duet_tensor_release(t);
    duet_st_destroy(st);
}

/* Loads `path`, expects DUET_EFORMAT, a message naming the file and
 * containing `needle`. */
static void expect_format_error(const char *path, const char *needle) {
    duet_st *st = (duet_st *)(uintptr_t)1;
    int rc = duet_st_load(path, &st);
    if (rc != DUET_EFORMAT)
        fail_msg("%s: expected DUET_EFORMAT, got %s: %s", path, duet_err_name(rc),
                 duet_last_error());
    assert_null(st);
    const char *msg = duet_last_error();
    if (strstr(msg, path) == NULL || strstr(msg, needle) == NULL)
        fail_msg("message '%s' should name %s and say '%s'", msg, path, needle);
}

static void test_corrupt_files(void **state) {
    tu_tmpdir *fx = *state;
    char path[512];
    float body[4] = {1, 2, 3, 4};
    const char *good = "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                       "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,16]}}";
    tu_path(path, sizeof path, fx->dir, "good.safetensors");
    write_st(path, good, body, 16);
    duet_st *st = NULL;
    TU_OK(duet_st_load(path, &st));
    duet_st_destroy(st);

    /* Truncated: the last byte of data is gone. */
    tu_path(path, sizeof path, fx->dir, "truncated.safetensors");
    write_st(path, good, body, 15);
    expect_format_error(path, "past the end");
    /* Truncated inside the length field. */
    tu_path(path, sizeof path, fx->dir, "tiny.safetensors");
    tu_write_file(path, "\x10\x00\x00", 3);
    expect_format_error(path, "truncated");
    /* Header length larger than the file. */
    tu_path(path, sizeof path, fx->dir, "badlen.safetensors");
    unsigned char hdr[24] = {0};
    uint64_t big = 1000;
    memcpy(hdr, &big, 8);
    memcpy(hdr + 8, "{}              ", 16);
    tu_write_file(path, hdr, sizeof hdr);
    expect_format_error(path, "header length");
    /* Not JSON, and JSON that is not an object. */
    tu_path(path, sizeof path, fx->dir, "badjson.safetensors");
    write_st(path, "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],", body, 8);
    expect_format_error(path, "bad JSON");
    tu_path(path, sizeof path, fx->dir, "array.safetensors");
    write_st(path, "[1, 2]", NULL, 0);
    expect_format_error(path, "not an object");
    /* Duplicate keys. */
    tu_path(path, sizeof path, fx->dir, "dup.safetensors");
    write_st(path, "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
                   "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", body, 8);
    expect_format_error(path, "bad JSON");
    /* Unknown dtype. */
    tu_path(path, sizeof path, fx->dir, "dtype.safetensors");
    write_st(path, "{\"a\":{\"dtype\":\"F31\",\"shape\":[2],\"data_offsets\":[0,8]}}", body, 8);
    expect_format_error(path, "unknown dtype 'F31'");
    /* Shape product * dtype size != span. */
    tu_path(path, sizeof path, fx->dir, "span.safetensors");
    write_st(path, "{\"a\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}", body, 8);
    expect_format_error(path, "needs 12 bytes");
    /* Overlapping entries. */
    tu_path(path, sizeof path, fx->dir, "overlap.safetensors");
    write_st(path, "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                   "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}", body, 12);
    expect_format_error(path, "overlaps");
    /* A hole before an entry. */
    tu_path(path, sizeof path, fx->dir, "hole.safetensors");
    write_st(path, "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}", body, 12);
    expect_format_error(path, "hole");
    /* Bytes after the last entry. */
    tu_path(path, sizeof path, fx->dir, "extra.safetensors");
    write_st(path, "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", body, 12);
    expect_format_error(path, "cover 8 bytes");
    /* end < begin, negative offsets, missing fields, bad shape. */
    tu_path(path, sizeof path, fx->dir, "reversed.safetensors");
    write_st(path, "{\"a\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[8,0]}}", body, 8);
    expect_format_error(path, "end before begin");
    tu_path(path, sizeof path, fx->dir, "negative.safetensors");
    write_st(path, "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[-8,0]}}", body, 8);
    expect_format_error(path, "data_offsets");
    tu_path(path, sizeof path, fx->dir, "noshape.safetensors");
    write_st(path, "{\"a\":{\"dtype\":\"F32\",\"data_offsets\":[0,8]}}", body, 8);
    expect_format_error(path, "'shape'");
    tu_path(path, sizeof path, fx->dir, "negdim.safetensors");
    write_st(path, "{\"a\":{\"dtype\":\"F32\",\"shape\":[-2],\"data_offsets\":[0,8]}}", body, 8);
    expect_format_error(path, "dimension 0");
    /* Metadata values must be strings. */
    tu_path(path, sizeof path, fx->dir, "meta.safetensors");
    write_st(path, "{\"__metadata__\":{\"iteration\":5}}", NULL, 0);
    expect_format_error(path, "metadata 'iteration'");

    /* A missing file is not a format error, but still names the file. */
    tu_path(path, sizeof path, fx->dir, "missing.safetensors");
    assert_int_equal(duet_st_load(path, &st), DUET_ENOTFOUND);
    assert_non_null(strstr(duet_last_error(), path));
}

static void test_atomic_save(void **state) {
    tu_tmpdir *fx = *state;
    char path[512];
    tu_path(path, sizeof path, fx->dir, "ckpt.safetensors");
    assert_int_equal(tu_count_entries(fx->dir), 0);
    duet_tensor *t = tu_zeros(1, (int64_t[]){4});
    duet_st_writer *w = NULL;
    TU_OK(duet_st_writer_create(&w));
    TU_OK(duet_st_writer_add(w, "x", t));
    TU_OK(duet_st_writer_set_meta(w, "v", "1"));
    TU_OK(duet_st_writer_save(w, path));
    /* Overwrite in place with new content; only the final file remains. */
    TU_OK(duet_st_writer_set_meta(w, "v", "2"));
    TU_OK(duet_st_writer_save(w, path));
    duet_st_writer_destroy(w);
    assert_int_equal(tu_count_entries(fx->dir), 1);
    duet_st *st = NULL;
    TU_OK(duet_st_load(path, &st));
    assert_string_equal(duet_st_meta(st, "v"), "2");
    duet_st_destroy(st);
    struct stat sb;
    assert_int_equal(stat(path, &sb), 0);
    assert_true(S_ISREG(sb.st_mode));

    /* A save that cannot happen (no such folder) fails with EIO and leaves
     * nothing behind. */
    char bad[600];
    snprintf(bad, sizeof bad, "%s/no_such_dir/x.safetensors", fx->dir);
    TU_OK(duet_st_writer_create(&w));
    TU_OK(duet_st_writer_add(w, "x", t));
    assert_int_equal(duet_st_writer_save(w, bad), DUET_EIO);
    assert_non_null(strstr(duet_last_error(), "no_such_dir"));
    duet_st_writer_destroy(w);
    assert_int_equal(tu_count_entries(fx->dir), 1);
    duet_tensor_release(t);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        TU_TMPDIR_TEST(test_round_trip),
        TU_TMPDIR_TEST(test_empty_writer),
        TU_TMPDIR_TEST(test_dtype_conversion),
        TU_TMPDIR_TEST(test_corrupt_files),
        TU_TMPDIR_TEST(test_atomic_save),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
