/* Faults of issue 10 that a single process can reproduce: a failed PNG write
 * must leave the file it would replace alone (and never write through a
 * symlink), decompression bombs are refused from the header, the repeat
 * dataset's overflow message (a use-after-free before), the sampler with
 * samples_per_gpu = 2^62, range-checked config getters (file, line, key),
 * integer literals libconfig 1.5 would wrap, the work-dir lock and the
 * removal of stale temporary checkpoints. */
#include "testutil.h"

#include <dirent.h>
#include <errno.h>
#include <float.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jpeglib.h>

#include "runner/runner_internal.h"

static void expect_file(const char *path, const char *want) {
    size_t n = 0;
    unsigned char *got = tu_read_file(path, &n);
    if (n != strlen(want) || memcmp(got, want, n) != 0)
        fail_msg("%s changed: now %zu bytes '%.40s', want '%s'", path, n, (char *)got, want);
    free(got);
}

/* Names in dir that contain `part`. */
static int count_names(const char *dir, const char *part) {
    DIR *d = opendir(dir);
    assert_non_null(d);
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) n += strstr(e->d_name, part) != NULL;
    closedir(d);
    return n;
}

/* ---- writes ------------------------------------------------------------------ */

/* A disk that fills up mid-write (RLIMIT_FSIZE makes write() fail with
 * EFBIG, as ENOSPC would): the user's file at the path must survive. */
static void test_failed_write_keeps_existing_file(void **state) {
    tu_tmpdir *fx = *state;
    char path[512];
    tu_path(path, sizeof path, fx->dir, "photo.png");
    tu_write_text(path, "the user's photo");
    duet_rng rng = duet_rng_make(3, 0);
    duet_image *img = tu_random_image(&rng, 256, 256, 3); /* ~200 kB of PNG */
    struct rlimit old;
    assert_int_equal(getrlimit(RLIMIT_FSIZE, &old), 0);
    struct rlimit small = {4096, old.rlim_max};
    void (*prev)(int) = signal(SIGXFSZ, SIG_IGN);
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &small), 0);
    int rc = duet_image_save_png(img, path);
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &old), 0);
    signal(SIGXFSZ, prev);
    tu_expect_error(rc, DUET_EIO, "photo.png", NULL);
    expect_file(path, "the user's photo");
    assert_int_equal(count_names(fx->dir, ".duet-"), 0); /* our temporary file is gone */
    /* And a write that succeeds replaces it whole. */
    TU_OK(duet_image_save_png(img, path));
    duet_image *back = NULL;
    TU_OK(duet_image_load(path, &back));
    assert_memory_equal(back->data, img->data, 256 * 256 * 3);
    duet_image_destroy(back);
    duet_image_destroy(img);
}

/* A symlink at the path is replaced; its target is never written. */
static void test_save_does_not_follow_symlink(void **state) {
    tu_tmpdir *fx = *state;
    char target[512], link[512];
    tu_path(target, sizeof target, fx->dir, "precious.txt");
    tu_path(link, sizeof link, fx->dir, "out.png");
    tu_write_text(target, "do not touch");
    assert_int_equal(symlink(target, link), 0);
    duet_rng rng = duet_rng_make(4, 0);
    duet_image *img = tu_random_image(&rng, 8, 8, 3);
    TU_OK(duet_image_save_png(img, link));
    expect_file(target, "do not touch");
    struct stat st;
    assert_int_equal(lstat(link, &st), 0);
    assert_true(S_ISREG(st.st_mode));
    duet_image_destroy(img);
}

/* ---- infer / test outputs ------------------------------------------------------ */

static void test_outputs_refused(void **state) {
    tu_tmpdir *fx = *state;
    char in_a[512], in_b[512], out_dir[512], link[512], target[512];
    tu_path(in_a, sizeof in_a, fx->dir, "a.png");
    tu_path(in_b, sizeof in_b, fx->dir, "a.jpg");
    tu_write_text(in_a, "png");
    tu_write_text(in_b, "jpg");
    /* An output that is the input itself (--out = the input's folder). */
    const char *one[] = {in_a};
    tu_expect_error(duet__check_outputs(fx->dir, one, 1, NULL, 0, NULL, 0), DUET_EINVAL,
                    "would replace the input", in_a, NULL);
    /* Two inputs, one output name. */
    tu_path(out_dir, sizeof out_dir, fx->dir, "out");
    assert_int_equal(mkdir(out_dir, 0777), 0);
    const char *two[] = {in_a, in_b};
    tu_expect_error(duet__check_outputs(out_dir, two, 2, NULL, 0, NULL, 0), DUET_EINVAL, in_a, in_b,
                    "out/a.png", NULL);
    /* A symlink at an output path. */
    tu_path(target, sizeof target, fx->dir, "target.txt");
    tu_write_text(target, "x");
    tu_path(link, sizeof link, out_dir, "a.png");
    assert_int_equal(symlink(target, link), 0);
    tu_expect_error(duet__check_outputs(out_dir, one, 1, NULL, 0, NULL, 0), DUET_EINVAL,
                    "symbolic link", link, NULL);
    assert_int_equal(unlink(link), 0);
    /* The input folder given as --out (test --out on the validation set). */
    const char *dirs[] = {fx->dir};
    const char *names[] = {"a.jpg"};
    tu_expect_error(duet__check_outputs(fx->dir, names, 1, dirs, 1, NULL, 0), DUET_EINVAL,
                    "is the input folder", NULL);
    /* A fine run: a new output, and an old output that is replaced. */
    TU_OK(duet__check_outputs(out_dir, one, 1, dirs, 1, NULL, 0));
    tu_write_text(link, "an earlier output");
    TU_OK(duet__check_outputs(out_dir, one, 1, dirs, 1, NULL, 0));
    /* infer --mask OUT/a.png --out OUT: the output for input a.png would
     * replace the mask (issue 35). */
    const char *others[] = {NULL, link};
    tu_expect_error(duet__check_outputs(out_dir, one, 1, NULL, 0, others, 2), DUET_EINVAL,
                    "is the input", link, NULL);
}

/* duet__safe_write and duet__safe_check_inputs (issue 35): a link at the
 * output's name is replaced, never written through; a folder is refused;
 * a failed write leaves nothing; an output that is an input (through a
 * hard link or a symlink) is refused naming both. */
static void test_safe_file(void **state) {
    tu_tmpdir *fx = *state;
    char target[512], out[512], path[512];
    tu_path(target, sizeof target, fx->dir, "target.txt");
    tu_path(out, sizeof out, fx->dir, "out.bin");
    tu_write_text(target, "precious");
    assert_int_equal(symlink(target, out), 0);
    TU_OK(duet__safe_write(out, "new", 3));
    expect_file(target, "precious");
    expect_file(out, "new");
    struct stat st;
    assert_int_equal(lstat(out, &st), 0);
    assert_true(S_ISREG(st.st_mode));
    /* Two writes never share a temporary name. */
    char *t1 = duet__safe_temp_name(out), *t2 = duet__safe_temp_name(out);
    assert_non_null(strstr(t1, "/.out.bin.duet-"));
    assert_string_not_equal(t1, t2);
    free(t1);
    free(t2);
    /* A folder as the output; a folder that does not exist. */
    tu_expect_error(duet__safe_write(fx->dir, "x", 1), DUET_EINVAL, "is a folder", NULL);
    tu_expect_error(duet__safe_write(tu_path(path, sizeof path, fx->dir, "no/such/file"), "x", 1),
                    DUET_EIO, "no/such/file", NULL);
    assert_int_equal(count_names(fx->dir, ".duet-"), 0);
    /* Output = input: the same name, a hard link, a symlink to it. */
    const char *in[] = {NULL, target};
    tu_expect_error(duet__safe_check_inputs(target, in, 2), DUET_EINVAL, "is the input",
                    target, NULL);
    assert_int_equal(link(target, tu_path(path, sizeof path, fx->dir, "hard.txt")), 0);
    tu_expect_error(duet__safe_check_inputs(path, in, 2), DUET_EINVAL, path, target, NULL);
    assert_int_equal(symlink(target, tu_path(path, sizeof path, fx->dir, "soft.txt")), 0);
    tu_expect_error(duet__safe_check_inputs(path, in, 2), DUET_EINVAL, path, target, NULL);
    TU_OK(duet__safe_check_inputs(out, in, 2));
    TU_OK(duet__safe_check_inputs(tu_path(path, sizeof path, fx->dir, "new.txt"), in, 2));
    expect_file(target, "precious");
}

/* ---- decompression bombs ------------------------------------------------------ */

/* Appends a PNG chunk (length, type, data, CRC) at b + *at. */
static void put_chunk(unsigned char *b, size_t *at, const char *type, const unsigned char *data,
                      uint32_t len) {
    unsigned char *p = b + *at;
    p[0] = (unsigned char)(len >> 24), p[1] = (unsigned char)(len >> 16);
    p[2] = (unsigned char)(len >> 8), p[3] = (unsigned char)len;
    memcpy(p + 4, type, 4);
    if (len > 0) memcpy(p + 8, data, len);
    uint32_t c = 0xffffffffu; /* zlib's crc32 of type + data, bitwise */
    for (uint32_t i = 4; i < 8 + len; i++) {
        c ^= p[i];
        for (int k = 0; k < 8; k++) c = (c >> 1) ^ (0xedb88320u & (0u - (c & 1u)));
    }
    c ^= 0xffffffffu;
    p[8 + len] = (unsigned char)(c >> 24), p[9 + len] = (unsigned char)(c >> 16);
    p[10 + len] = (unsigned char)(c >> 8), p[11 + len] = (unsigned char)c;
    *at += 12 + len;
}

/* A PNG that declares w x h with an empty IDAT (a few dozen bytes): the
 * decoder would fail on the data, but the limit must refuse it first, from
 * the header. */
static unsigned char *bomb_png(uint32_t w, uint32_t h, size_t *n) {
    static const unsigned char sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
    unsigned char ihdr[13] = {(unsigned char)(w >> 24), (unsigned char)(w >> 16),
                              (unsigned char)(w >> 8), (unsigned char)w,
                              (unsigned char)(h >> 24), (unsigned char)(h >> 16),
                              (unsigned char)(h >> 8), (unsigned char)h, 8, 2, 0, 0, 0};
    unsigned char *b = calloc(1, 8 + 25 + 12 + 12);
    memcpy(b, sig, 8);
    size_t at = 8;
    put_chunk(b, &at, "IHDR", ihdr, 13);
    put_chunk(b, &at, "IDAT", NULL, 0);
    put_chunk(b, &at, "IEND", NULL, 0);
    *n = at;
    return b;
}

static void test_pixel_limit_png(void **state) {
    (void)state;
    size_t n = 0;
    unsigned char *b = bomb_png(20000, 20000, &n);
    duet_image *img = NULL;
    unsetenv("DUET_MAX_IMAGE_PIXELS");
    tu_expect_error(duet_image_decode(b, n, "bomb.png", &img), DUET_EUNSUPPORTED, "bomb.png",
                    "20000x20000", "89478485", "DUET_MAX_IMAGE_PIXELS", NULL);
    assert_null(img);
    /* The environment variable lowers (or raises) the limit. */
    free(b);
    b = bomb_png(100, 100, &n);
    setenv("DUET_MAX_IMAGE_PIXELS", "9999", 1);
    tu_expect_error(duet_image_decode(b, n, "small.png", &img), DUET_EUNSUPPORTED, "9999", NULL);
    setenv("DUET_MAX_IMAGE_PIXELS", "lots", 1);
    tu_expect_error(duet_image_decode(b, n, "small.png", &img), DUET_EINVAL,
                    "DUET_MAX_IMAGE_PIXELS", NULL);
    /* Within the limit the header passes and the (empty) data is what fails. */
    setenv("DUET_MAX_IMAGE_PIXELS", "10000", 1);
    tu_expect_error(duet_image_decode(b, n, "small.png", &img), DUET_EFORMAT, NULL);
    unsetenv("DUET_MAX_IMAGE_PIXELS");
    /* An explicit limit; 0 is none. */
    tu_expect_error(duet_image_decode_limited(b, n, "small.png", 9999, &img), DUET_EUNSUPPORTED,
                    NULL);
    tu_expect_error(duet_image_decode_limited(b, n, "small.png", 0, &img), DUET_EFORMAT, NULL);
    free(b);
}

/* A 16x16 baseline JPEG from libjpeg (duet has no JPEG writer). */
static void write_jpeg(const char *path) {
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    struct jpeg_compress_struct c;
    struct jpeg_error_mgr err;
    c.err = jpeg_std_error(&err);
    jpeg_create_compress(&c);
    jpeg_stdio_dest(&c, f);
    c.image_width = 16;
    c.image_height = 16;
    c.input_components = 3;
    c.in_color_space = JCS_RGB;
    jpeg_set_defaults(&c);
    jpeg_start_compress(&c, TRUE);
    unsigned char row[16 * 3];
    for (int i = 0; i < 16 * 3; i++) row[i] = (unsigned char)(i * 5);
    while (c.next_scanline < 16) {
        JSAMPROW r = row;
        jpeg_write_scanlines(&c, &r, 1);
    }
    jpeg_finish_compress(&c);
    jpeg_destroy_compress(&c);
    fclose(f);
}

/* A real JPEG whose SOF0 size is patched to 30000 x 30000. */
static void test_pixel_limit_jpeg(void **state) {
    tu_tmpdir *fx = *state;
    char path[512];
    tu_path(path, sizeof path, fx->dir, "x.jpg");
    write_jpeg(path);
    size_t n = 0;
    unsigned char *b = tu_read_file(path, &n);
    duet_image *ok = NULL;
    TU_OK(duet_image_decode(b, n, "x.jpg", &ok));
    duet_image_destroy(ok);
    size_t i = 2;
    while (i + 9 < n && !(b[i] == 0xff && b[i + 1] == 0xc0)) i++;
    assert_true(i + 9 < n);
    b[i + 5] = 30000 >> 8, b[i + 6] = 30000 & 0xff; /* height */
    b[i + 7] = 30000 >> 8, b[i + 8] = 30000 & 0xff; /* width */
    duet_image *out = NULL;
    unsetenv("DUET_MAX_IMAGE_PIXELS");
    tu_expect_error(duet_image_decode(b, n, "bomb.jpg", &out), DUET_EUNSUPPORTED,
                    "30000x30000", NULL);
    free(b);
}

/* ---- datasets and the sampler --------------------------------------------------- */

static void test_repeat_overflow_message(void **state) {
    tu_tmpdir *fx = *state;
    duet_rng rng = duet_rng_make(6, 0);
    for (int i = 0; i < 3; i++) {
        char name[32], path[512];
        snprintf(name, sizeof name, "%d.png", i);
        duet_image *img = tu_random_image(&rng, 16, 16, 3);
        TU_OK(duet_image_save_png(img, tu_path(path, sizeof path, fx->dir, name)));
        duet_image_destroy(img);
    }
    duet_sr_dataset_opts o = duet_sr_dataset_options_default();
    o.gt_dir = fx->dir;
    o.gt_size = 8;
    duet_dataset *ds = NULL, *rep = NULL;
    TU_OK(duet_sr_train_dataset_create(&o, &ds));
    /* 2^62 x 3 does not fit: the message must give the inner size, read
     * before the inner dataset is freed. */
    tu_expect_error(duet_repeat_dataset_create(ds, (int64_t)1 << 62, &rep), DUET_EINVAL,
                    "3 samples", "4611686018427387904", NULL);
    assert_null(rep);
}

static void test_sampler_huge_batch(void **state) {
    (void)state;
    duet_sampler *s = NULL;
    tu_expect_error(duet_sampler_create(10, 2, 0, (int64_t)1 << 62, 1, true, &s), DUET_ESHAPE,
                    "4611686018427387904", NULL);
    /* ceil(size / group) * group does not fit either. */
    tu_expect_error(duet_sampler_create(INT64_MAX, 3, 0, INT64_MAX / 3, 1, true, &s),
                    DUET_EINVAL, "overflow", NULL);
    assert_null(s);
}

/* ---- config ---------------------------------------------------------------------- */

static duet_config *load_text(tu_tmpdir *fx, const char *name, const char *text) {
    char path[512];
    tu_write_text(tu_path(path, sizeof path, fx->dir, name), text);
    duet_config *cfg = NULL;
    TU_OK(duet_config_load(path, &cfg));
    return cfg;
}

static void test_config_ranges(void **state) {
    tu_tmpdir *fx = *state;
    duet_config *cfg = load_text(fx, "r.cfg",
                                 "data = {\n  prefetch = -1;\n  scale = 4294967300L;\n};\n"
                                 "lr = 2e-4;\ngamma = -1.0;\nbucket_cap_mb = 0;\nok = 3;\n");
    int64_t v = 0;
    double d = 0;
    tu_expect_error(duet_config_get_int_in_or(cfg, "data.prefetch", 2, 0, 64, &v), DUET_ECONFIG,
                    "r.cfg:2", "'data.prefetch'", "[0, 64]", "-1", NULL);
    tu_expect_error(duet_config_get_int_in(cfg, "data.scale", 1, 64, &v), DUET_ECONFIG,
                    "r.cfg:3", "4294967300", NULL);
    tu_expect_error(duet_config_get_double_in_or(cfg, "gamma", 0.1, 0, FLT_MAX, &d),
                    DUET_ECONFIG, "r.cfg:6", ">= 0", NULL);
    tu_expect_error(duet_config_get_double_in_or(cfg, "bucket_cap_mb", 0, DBL_TRUE_MIN, 1e6, &d),
                    DUET_ECONFIG, "r.cfg:7", "> 0", NULL);
    TU_OK(duet_config_get_int_in(cfg, "ok", 1, 3, &v));
    assert_int_equal(v, 3);
    /* An absent key gives the default, unchecked. */
    TU_OK(duet_config_get_int_in_or(cfg, "absent", -7, 0, 1, &v));
    assert_int_equal(v, -7);
    duet_config_destroy(cfg);

    /* libconfig reads 1e999 as inf, for which it has no literal: refused
     * at load (a config duet keeps must write back and read again), with
     * the key and line, however deep. */
    char path[512];
    tu_write_text(tu_path(path, sizeof path, fx->dir, "inf.cfg"),
                  "ok = 1.5;\nopt = {\n  lr = 1e999;\n};\n");
    cfg = (duet_config *)(uintptr_t)1;
    tu_expect_error(duet_config_load(path, &cfg), DUET_ECONFIG, "inf.cfg:3", "'opt.lr'",
                    "finite", NULL);
    assert_null(cfg);
    tu_expect_error(duet_config_load_string("a = (1, { b = [2.0, -1e400]; });\n", "<s>", &cfg),
                    DUET_ECONFIG, "'a.[1].b.[1]'", "finite", NULL);
    assert_null(cfg);
    TU_OK(duet_config_load_string("lr = 1e-3;\n", "<s>", &cfg));
    tu_expect_error(duet_config_set(cfg, "lr=1e999"), DUET_ECONFIG, NULL);
    tu_expect_error(duet_config_set(cfg, "lrs=[1.0, 1e999]"), DUET_ECONFIG, "finite", NULL);
    assert_false(duet_config_has(cfg, "lrs"));
    duet_config_destroy(cfg);
}

/* libconfig 1.5 reads `scale = 4294967300;` as 4: refused at load, in the
 * file itself or in an included one; strings, comments, floats, L-suffixed
 * and in-range integers are fine. */
static void test_config_wrapping_literals(void **state) {
    tu_tmpdir *fx = *state;
    char path[512];
    duet_config *cfg = NULL;
    tu_write_text(tu_path(path, sizeof path, fx->dir, "w.cfg"),
                  "# 99999999999 in a comment\nname = \"4294967300\";\nf = 1e10;\n"
                  "big = 4294967300L;\nneg = -2147483648;\n/* 5000000000 */\ndata = {\n"
                  "  scale = 4294967300;\n};\n");
    tu_expect_error(duet_config_load(path, &cfg), DUET_ECONFIG, "w.cfg:8", "'scale'",
                    "4294967300", "4294967300L", NULL);
    assert_null(cfg);
    tu_write_text(tu_path(path, sizeof path, fx->dir, "inc.cfg"), "a = 1;\nb = -3000000000;\n");
    tu_write_text(tu_path(path, sizeof path, fx->dir, "top.cfg"),
                  "@include \"inc.cfg\"\nc = 0x1F;\n");
    tu_expect_error(duet_config_load(path, &cfg), DUET_ECONFIG, "inc.cfg:2", "'b'", NULL);
    tu_write_text(tu_path(path, sizeof path, fx->dir, "inc.cfg"), "a = 1;\nb = -3000000000L;\n");
    TU_OK(duet_config_load(path, &cfg));
    int64_t v = 0;
    TU_OK(duet_config_get_int(cfg, "b", &v));
    assert_int_equal(v, -3000000000LL);
    duet_config_destroy(cfg);
    tu_expect_error(duet_config_load_string("x = 0xFFFFFFFFF;", "<meta>", &cfg), DUET_ECONFIG,
                    "<meta>:1", NULL);
    /* 64-bit literals (issue 35): 2^63 saturated to 2^63 - 1, a 65-bit hex
     * literal read as -1, 2^63 in hex read as negative; the limits
     * themselves are exact. */
    static const char *const bad64[] = {"total_iters = 9223372036854775808L;",
                                        "total_iters = 0x10000000000000000L;",
                                        "total_iters = 0x8000000000000000L;",
                                        "total_iters = -9223372036854775809L;",
                                        "total_iters = 99999999999999999999999L;"};
    for (size_t i = 0; i < sizeof bad64 / sizeof bad64[0]; i++)
        tu_expect_error(duet_config_load_string(bad64[i], "<64>", &cfg), DUET_ECONFIG,
                        "<64>:1", "'total_iters'", "64-bit", NULL);
    TU_OK(duet_config_load_string("a = 9223372036854775807L; b = -9223372036854775808L;\n"
                                  "c = 0x7FFFFFFFFFFFFFFFL; d = 0x7FFFFFFF;", "<64>", &cfg));
    TU_OK(duet_config_get_int(cfg, "a", &v));
    assert_true(v == INT64_MAX);
    TU_OK(duet_config_get_int(cfg, "b", &v));
    assert_true(v == INT64_MIN);
    TU_OK(duet_config_get_int(cfg, "c", &v));
    assert_true(v == INT64_MAX);
    TU_OK(duet_config_get_int(cfg, "d", &v));
    assert_true(v == INT32_MAX);
    /* --set: a literal inside a list is checked like one in a file; an
     * integer too large for 64 bits is not taken as a string. */
    tu_expect_error(duet_config_set(cfg, "e=[1, 4294967300]"), DUET_ECONFIG, "4294967300L",
                    NULL);
    tu_expect_error(duet_config_set(cfg, "e=9223372036854775808L"), DUET_ECONFIG, "64-bit",
                    NULL);
    tu_expect_error(duet_config_set(cfg, "e=0x10000000000000000"), DUET_ECONFIG, "64-bit", NULL);
    assert_false(duet_config_has(cfg, "e"));
    TU_OK(duet_config_set(cfg, "e=4294967300"));
    TU_OK(duet_config_get_int(cfg, "e", &v));
    assert_true(v == 4294967300LL);
    duet_config_destroy(cfg);
    /* A NUL byte anywhere (here in a comment before the wrapping literal)
     * is refused with its line; it switched the check off before. */
    FILE *f = fopen(tu_path(path, sizeof path, fx->dir, "nul.cfg"), "wb");
    assert_non_null(f);
    static const char nul_text[] = "a = 1;\n# x\0y\ntotal_iters = 4294967300;\n";
    assert_int_equal(fwrite(nul_text, 1, sizeof nul_text - 1, f), sizeof nul_text - 1);
    assert_int_equal(fclose(f), 0);
    tu_expect_error(duet_config_load(path, &cfg), DUET_ECONFIG, "nul.cfg:2", "NUL byte", NULL);
    assert_null(cfg);
}

/* The registry narrows config numbers to int and float: out of range is an
 * error, not a wrapped value (layer 4294967300 is not layer 4). */
static void test_registry_narrowing(void **state) {
    (void)state;
    static const char *const bad[] = {
        "p = { type = \"PerceptualLoss\"; layer_ids = [4294967300L]; layer_weights = [1.0];"
        " cfg = [4, 4, 0, 8]; };",
        "p = { type = \"PerceptualLoss\"; layer_ids = [4]; layer_weights = [1e39];"
        " cfg = [4, 4, 0, 8]; };",
        "p = { type = \"PerceptualLoss\"; layer_ids = [4]; layer_weights = [1.0];"
        " cfg = (4, 4294967300L, 0, 8); };",
        "p = { type = \"MSRResNet\"; mid_channels = 4294967304L; };",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        duet_config *cfg = NULL;
        TU_OK(duet_config_load_string(bad[i], "<reg>", &cfg));
        duet_rng rng = duet_rng_make(1, 0);
        duet_module *m = NULL;
        int rc = duet_build_module(cfg, "p", &rng, &m);
        if (rc != DUET_ECONFIG)
            fail_msg("case %zu: want DUET_ECONFIG, got %s (%s)", i, duet_err_name(rc),
                     duet_last_error());
        assert_null(m);
        duet_config_destroy(cfg);
    }
}

/* ---- the work dir ------------------------------------------------------------------ */

static void test_workdir_lock(void **state) {
    tu_tmpdir *fx = *state;
    duet__run a, b;
    memset(&a, 0, sizeof a);
    memset(&b, 0, sizeof b);
    a.work_dir = fx->dir;
    b.work_dir = fx->dir;
    TU_OK(duet__workdir_lock(&a));
    assert_true(a.lock_fd >= 0);
    char path[512], want[64];
    size_t n = 0;
    unsigned char *text = tu_read_file(tu_path(path, sizeof path, fx->dir, "duet.lock"), &n);
    snprintf(want, sizeof want, "pid %ld on host ", (long)getpid());
    assert_non_null(strstr((char *)text, want));
    free(text);
    /* A second holder (another open file: flock conflicts even within one
     * process) is refused with the first one's pid. */
    tu_expect_error(duet__workdir_lock(&b), DUET_ESTATE, "in use by another duet run", want,
                    NULL);
    assert_int_equal(b.lock_fd, -1);
    /* A run that opened duet.lock just before the holder ended: the holder
     * removes the file (issue 33: no duet.lock left behind), and the
     * waiter's lock on the removed file must not count. */
    int early = open(path, O_RDWR);
    assert_true(early >= 0);
    duet__workdir_unlock(&a);
    struct stat st;
    assert_int_equal(stat(path, &st), -1); /* removed when the run ended */
    assert_int_equal(flock(early, LOCK_EX | LOCK_NB), 0); /* a lock on the removed file */
    TU_OK(duet__workdir_lock(&b));         /* a lock on a new duet.lock, held */
    assert_int_equal(stat(path, &st), 0);
    duet__run c;
    memset(&c, 0, sizeof c);
    c.work_dir = fx->dir;
    tu_expect_error(duet__workdir_lock(&c), DUET_ESTATE, "in use by another duet run", NULL);
    close(early);
    duet__workdir_unlock(&b);
    assert_int_equal(stat(path, &st), -1);
}

static void test_stale_temps_removed(void **state) {
    tu_tmpdir *fx = *state;
    static const char *const stale[] = {"iter_4.safetensors.tmp.123.0",
                                        "latest.safetensors.tmp.99999.12",
                                        ".iter_4.safetensors.duet-0123456789abcdef"};
    static const char *const keep[] = {"iter_4.safetensors", "notes.safetensors.tmp.txt",
                                       "x.safetensors.tmp.1", "x.tmp.1.2", ".safetensors.tmp.1.2",
                                       "iter_2.safetensors.tmp.1.2.3",
                                       ".x.safetensors.duet-0123", "x.safetensors.duet-0123456789abcdef",
                                       "..safetensors.duet-0123456789abcdefa"};
    char path[512];
    for (size_t i = 0; i < 3; i++) tu_write_text(tu_path(path, sizeof path, fx->dir, stale[i]), "");
    for (size_t i = 0; i < 9; i++) tu_write_text(tu_path(path, sizeof path, fx->dir, keep[i]), "");
    /* A folder and a symlink with the pattern are not removed either. */
    assert_int_equal(mkdir(tu_path(path, sizeof path, fx->dir, "d.safetensors.tmp.1.2"), 0777), 0);
    assert_int_equal(symlink("/nonexistent",
                             tu_path(path, sizeof path, fx->dir, "l.safetensors.tmp.1.2")), 0);
    duet__run r;
    memset(&r, 0, sizeof r);
    r.work_dir = fx->dir;
    TU_OK(duet__workdir_lock(&r));
    TU_OK(duet__workdir_clean_temps(&r));
    duet__workdir_unlock(&r);
    struct stat st;
    for (size_t i = 0; i < 3; i++)
        assert_int_not_equal(lstat(tu_path(path, sizeof path, fx->dir, stale[i]), &st), 0);
    for (size_t i = 0; i < 9; i++)
        if (lstat(tu_path(path, sizeof path, fx->dir, keep[i]), &st) != 0)
            fail_msg("%s was removed", keep[i]);
    assert_int_equal(lstat(tu_path(path, sizeof path, fx->dir, "d.safetensors.tmp.1.2"), &st), 0);
    assert_int_equal(lstat(tu_path(path, sizeof path, fx->dir, "l.safetensors.tmp.1.2"), &st), 0);
}

int main(void) {
    duet_log_set_level(DUET_LOG_ERROR);
    const struct CMUnitTest tests[] = {
        TU_TMPDIR_TEST(test_failed_write_keeps_existing_file),
        TU_TMPDIR_TEST(test_safe_file),
        TU_TMPDIR_TEST(test_save_does_not_follow_symlink),
        TU_TMPDIR_TEST(test_outputs_refused),
        cmocka_unit_test(test_pixel_limit_png),
        TU_TMPDIR_TEST(test_pixel_limit_jpeg),
        TU_TMPDIR_TEST(test_repeat_overflow_message),
        cmocka_unit_test(test_sampler_huge_batch),
        TU_TMPDIR_TEST(test_config_ranges),
        TU_TMPDIR_TEST(test_config_wrapping_literals),
        cmocka_unit_test(test_registry_narrowing),
        TU_TMPDIR_TEST(test_workdir_lock),
        TU_TMPDIR_TEST(test_stale_temps_removed),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
