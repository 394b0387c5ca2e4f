/* GenerationPairedDataset / GenerationUnpairedDataset (src/data/translation.c,
 * src/registry/registry_data.c): MMEditing's pipeline steps pixel for pixel
 * (crop windows and flips drawn from the sample rng in MMEditing's order,
 * one window and one flip for both halves of a pair, separate ones in the
 * unpaired pipeline), normalisation values and channel order, the unpaired
 * index rule, OpenCV's bicubic weights, the loader's batches, and errors. */
#include <string.h>
#include <sys/stat.h>

#include "data/translation.h" /* duet__cv_resize_cubic_u8 (white-box) */
#include "duet/train.h"
#include "testutil.h"

#define SEED 7u

/* PNG at dir/sub/name from an RGB image. */
static void save(const char *dir, const char *sub, const char *name, const duet_image *img) {
    char d[512], p[600];
    snprintf(d, sizeof d, "%s/%s", dir, sub);
    mkdir(d, 0755);
    snprintf(p, sizeof p, "%s/%s", d, name);
    TU_OK(duet_image_save_png(img, p));
}

/* An A|B image of two h x w halves; B is A when same. Caller frees. */
static duet_image *pair_image(duet_rng *rng, int64_t h, int64_t w, bool same) {
    duet_image *a = tu_random_image(rng, h, w, 3), *b = tu_random_image(rng, h, w, 3), *p = NULL;
    TU_OK(duet_image_create(h, 2 * w, 3, &p));
    for (int64_t y = 0; y < h; y++) {
        memcpy(p->data + y * 2 * w * 3, a->data + y * w * 3, (size_t)(w * 3));
        memcpy(p->data + (y * 2 * w + w) * 3, (same ? a : b)->data + y * w * 3, (size_t)(w * 3));
    }
    duet_image_destroy(a);
    duet_image_destroy(b);
    return p;
}

/* MMEditing's result for one image: crop (x, y, cw, ch) of the (h, w) RGB
 * bytes at column offset x0 of a row of width rw, flipped when asked,
 * astype(float32) / 255, BGR unless to_rgb, then (v - 0.5) * (1 / 0.5). */
static void expect_image(const duet_tensor *got, const duet_image *src, int64_t x0, int64_t x,
                         int64_t y, int64_t cw, int64_t ch, bool hflip, bool to_rgb) {
    assert_int_equal(got->ndim, 4);
    assert_int_equal(got->shape[1], 3);
    assert_int_equal(got->shape[2], ch);
    assert_int_equal(got->shape[3], cw);
    for (int c = 0; c < 3; c++)
        for (int64_t r = 0; r < ch; r++)
            for (int64_t q = 0; q < cw; q++) {
                int64_t sx = x0 + x + (hflip ? cw - 1 - q : q), sy = y + r;
                int sc = to_rgb ? c : 2 - c;
                float v = (float)src->data[(sy * src->width + sx) * 3 + sc] / 255.0f;
                float want = (v - 0.5f) * (float)(1.0 / 0.5);
                float g = got->data[(c * ch + r) * cw + q];
                if (g != want)
                    fail_msg("channel %d (%lld, %lld): got %.9g, want %.9g", c, (long long)r,
                             (long long)q, g, want);
            }
}

static duet_config *load_cfg(const char *text) {
    duet_config *cfg = NULL;
    TU_OK(duet_config_load_string(text, "<test>", &cfg));
    return cfg;
}

#define NORM_STEPS(keys, rgb)                                                              \
    "{ type = \"RescaleToZeroOne\"; keys = " keys "; },"                                \
    "{ type = \"Normalize\"; keys = " keys "; to_rgb = " rgb ";"                        \
    "  mean = [0.5, 0.5, 0.5]; std = [0.5, 0.5, 0.5]; },"                                \
    "{ type = \"ImageToTensor\"; keys = " keys "; },"                                     \
    "{ type = \"Collect\"; keys = " keys "; meta_keys = [\"img_a_path\", \"img_b_path\"]; }"

static duet_dataset *build(const char *dir, const char *type, const char *extra,
                           const char *pipeline) {
    char text[4096];
    snprintf(text, sizeof text, "train = { type = \"%s\"; dataroot = \"%s\"; %s\n"
             "pipeline = ( %s ); };\n", type, dir, extra, pipeline);
    duet_config *cfg = load_cfg(text);
    duet_dataset *ds = NULL;
    TU_OK(duet_build_dataset(cfg, "train", true, &ds));
    TU_OK(duet_config_check_unused(cfg));
    duet_config_destroy(cfg);
    return ds;
}

/* ---- paired ------------------------------------------------------------------ */

static void test_paired_one_window_one_flip(void **state) {
    tu_tmpdir *fx = *state;
    duet_rng r = duet_rng_make(1, 0);
    duet_image *src[3];
    char name[32];
    for (int i = 0; i < 3; i++) {
        src[i] = pair_image(&r, 20, 24, false);
        snprintf(name, sizeof name, "%d.png", i);
        save(fx->dir, "train", name, src[i]);
    }
    duet_dataset *ds = build(fx->dir, "GenerationPairedDataset", "",
        "{ type = \"LoadPairedImageFromFile\"; io_backend = \"disk\"; key = \"pair\";"
        "  flag = \"color\"; },"
        "{ type = \"FixedCrop\"; keys = [\"img_a\", \"img_b\"]; crop_size = [12, 16]; },"
        "{ type = \"Flip\"; keys = [\"img_a\", \"img_b\"]; direction = \"horizontal\"; },"
        NORM_STEPS("[\"img_a\", \"img_b\"]", "true"));
    assert_int_equal(duet_dataset_size(ds), 3);
    int flips = 0, xs = 0;
    for (int64_t epoch = 0; epoch < 3; epoch++)
        for (int64_t i = 0; i < 3; i++) {
            duet_batch b = {0};
            TU_OK(duet_dataset_get_item(ds, i, SEED, epoch, &b));
            /* The draws MMEditing makes: FixedCrop x then y, Flip one. */
            duet_rng rng = duet_dataset_sample_rng(SEED, epoch, i);
            int64_t x = duet_rng_int(&rng, 0, 24 - 16), y = duet_rng_int(&rng, 0, 20 - 12);
            bool flip = duet_rng_uniform_double(&rng) < 0.5;
            flips += flip;
            xs += x != 0;
            expect_image(duet_batch_tensor_get(&b, "img_a"), src[i], 0, x, y, 16, 12, flip, true);
            expect_image(duet_batch_tensor_get(&b, "img_b"), src[i], 24, x, y, 16, 12, flip, true);
            const char *pa = duet_batch_meta_get(&b, "img_a_path", 0);
            snprintf(name, sizeof name, "train/%d.png", (int)i);
            assert_non_null(strstr(pa, name));
            assert_string_equal(pa, duet_batch_meta_get(&b, "img_b_path", 0));
            duet_batch_clear(&b);
        }
    /* Both branches were taken (the check above sees flips and shifts). */
    assert_true(flips > 0 && flips < 9);
    assert_true(xs > 0);
    assert_string_equal(duet_dataset_name(ds, 1), "1.png");
    duet_dataset_destroy(ds);
    for (int i = 0; i < 3; i++) duet_image_destroy(src[i]);
}

/* to_rgb = false keeps mmcv's BGR order; Normalize's values. */
static void test_paired_bgr_and_values(void **state) {
    tu_tmpdir *fx = *state;
    duet_image *p = NULL;
    TU_OK(duet_image_create(1, 4, 3, &p));
    const uint8_t px[12] = {0, 128, 255, 10, 20, 30, 255, 0, 128, 40, 50, 60};
    memcpy(p->data, px, 12);
    save(fx->dir, "test", "p.png", p);
    duet_dataset *ds = build(fx->dir, "GenerationPairedDataset", "test_mode = true;",
        "{ type = \"LoadPairedImageFromFile\"; key = \"pair\"; }," NORM_STEPS("[\"img_a\", \"img_b\"]",
                                                                       "false"));
    duet_batch b = {0};
    TU_OK(duet_dataset_get_item(ds, 0, SEED, 0, &b));
    const duet_tensor *a = duet_batch_tensor_get(&b, "img_a");
    expect_image(a, p, 0, 0, 0, 2, 1, false, false);
    /* pixel 0 is RGB (0, 128, 255): BGR gives 1, (128/255 - .5) * 2, -1 */
    assert_true(a->data[0] == 1.0f);
    assert_true(a->data[4] == -1.0f);
    assert_float_equal(a->data[2], (128.0f / 255.0f - 0.5f) * 2.0f, 0);
    duet_batch_clear(&b);
    duet_dataset_destroy(ds);
    duet_image_destroy(p);
}

/* Resize then crop: the same bytes for A and B when the halves are equal,
 * and the OpenCV size. */
static void test_paired_resize_same_for_both(void **state) {
    tu_tmpdir *fx = *state;
    duet_rng r = duet_rng_make(2, 0);
    duet_image *p = pair_image(&r, 16, 16, true);
    save(fx->dir, "train", "x.png", p);
    duet_dataset *ds = build(fx->dir, "GenerationPairedDataset", "",
        "{ type = \"LoadPairedImageFromFile\"; key = \"pair\"; },"
        "{ type = \"Resize\"; keys = [\"img_a\", \"img_b\"]; scale = [22, 18];"
        "  interpolation = \"bicubic\"; },"
        "{ type = \"FixedCrop\"; keys = [\"img_a\", \"img_b\"]; crop_size = [16, 16]; },"
        "{ type = \"Flip\"; keys = [\"img_a\", \"img_b\"]; }," NORM_STEPS("[\"img_a\", \"img_b\"]",
                                                                 "true"));
    for (int64_t e = 0; e < 6; e++) {
        duet_batch b = {0};
        TU_OK(duet_dataset_get_item(ds, 0, SEED, e, &b));
        const duet_tensor *a = duet_batch_tensor_get(&b, "img_a"), *bb = duet_batch_tensor_get(&b, "img_b");
        assert_int_equal(a->shape[2], 16);
        assert_int_equal(a->shape[3], 16);
        assert_true(tu_same_data(a, bb));
        duet_batch_clear(&b);
    }
    duet_dataset_destroy(ds);
    duet_image_destroy(p);
}

/* ---- OpenCV's bicubic ---------------------------------------------------------- */

/* 2x: OpenCV's weights for fractions 0.75 and 0.25 are (-72, 536, 1800, -216)
 * and (-216, 1800, 536, -72) / 2048; edge taps repeat the border pixel. */
static void test_cv_cubic_2x(void **state) {
    (void)state;
    const uint8_t src[4] = {10, 50, 200, 90};
    uint8_t got[8];
    TU_OK(duet__cv_resize_cubic_u8(src, 1, 4, 1, got, 1, 8));
    const int w75[4] = {-72, 536, 1800, -216}, w25[4] = {-216, 1800, 536, -72};
    for (int d = 0; d < 8; d++) {
        /* source x = (d + 0.5) / 2 - 0.5: floor is d/2 - 1 for even d */
        int first = (d % 2 == 0 ? d / 2 - 1 : d / 2) - 1;
        const int *w = d % 2 == 0 ? w75 : w25;
        long long v = 0;
        for (int k = 0; k < 4; k++) {
            int i = first + k < 0 ? 0 : first + k > 3 ? 3 : first + k;
            v += (long long)src[i] * w[k] * 2048; /* the vertical weight of a 1-row image */
        }
        long long q = (v + (1LL << 21)) >> 22;
        q = q < 0 ? 0 : q > 255 ? 255 : q;
        if (got[d] != q) fail_msg("x %d: got %d, want %lld", d, got[d], q);
    }
    /* Same size: unchanged. */
    duet_rng r = duet_rng_make(3, 0);
    duet_image *img = tu_random_image(&r, 5, 7, 3);
    uint8_t same[105];
    TU_OK(duet__cv_resize_cubic_u8(img->data, 5, 7, 3, same, 5, 7));
    assert_memory_equal(same, img->data, 105);
    duet_image_destroy(img);
}

/* ---- unpaired ------------------------------------------------------------------ */

static void make_unpaired(const char *dir, const char *phase, int na, int nb,
                          duet_image **a, duet_image **b) {
    duet_rng r = duet_rng_make(4, 0);
    char sub[16], name[32];
    for (int i = 0; i < na; i++) {
        a[i] = tu_random_image(&r, 12, 14, 3);
        snprintf(sub, sizeof sub, "%sA", phase);
        snprintf(name, sizeof name, "a%d.png", i);
        save(dir, sub, name, a[i]);
    }
    for (int i = 0; i < nb; i++) {
        b[i] = tu_random_image(&r, 12 + i, 14, 3);
        snprintf(sub, sizeof sub, "%sB", phase);
        snprintf(name, sizeof name, "b%d.png", i);
        save(dir, sub, name, b[i]);
    }
}

#define UNPAIRED_LOAD                                                        \
    "{ type = \"LoadImageFromFile\"; io_backend = \"disk\"; key = \"img_a\"; flag = \"color\"; }," \
    "{ type = \"LoadImageFromFile\"; io_backend = \"disk\"; key = \"img_b\"; flag = \"color\"; },"

static void test_unpaired_index_rule_and_crops(void **state) {
    tu_tmpdir *fx = *state;
    duet_image *a[3], *b[5];
    make_unpaired(fx->dir, "train", 3, 5, a, b);
    duet_dataset *ds = build(fx->dir, "GenerationUnpairedDataset", "test_mode = false;",
        UNPAIRED_LOAD
        "{ type = \"Crop\"; keys = [\"img_a\", \"img_b\"]; crop_size = [8, 10];"
        "  random_crop = true; },"
        "{ type = \"Flip\"; keys = [\"img_a\"]; direction = \"horizontal\"; },"
        "{ type = \"Flip\"; keys = [\"img_b\"]; direction = \"horizontal\"; },"
        NORM_STEPS("[\"img_a\", \"img_b\"]", "true"));
    assert_int_equal(duet_dataset_size(ds), 5); /* max(len A, len B) */
    bool seen[5] = {false};
    for (int64_t e = 0; e < 4; e++)
        for (int64_t i = 0; i < 5; i++) {
            duet_batch bt = {0};
            TU_OK(duet_dataset_get_item(ds, i, SEED, e, &bt));
            /* MMEditing's order: idx_b, Crop A (x, y), Crop B (x, y), Flip A, Flip B */
            duet_rng rng = duet_dataset_sample_rng(SEED, e, i);
            int64_t ib = duet_rng_int(&rng, 0, 4);
            seen[ib] = true;
            const duet_image *ia = a[i % 3], *im = b[ib];
            int64_t ax = duet_rng_int(&rng, 0, ia->width - 10), ay = duet_rng_int(&rng, 0, ia->height - 8);
            int64_t bx = duet_rng_int(&rng, 0, im->width - 10), by = duet_rng_int(&rng, 0, im->height - 8);
            bool fa = duet_rng_uniform_double(&rng) < 0.5, fb = duet_rng_uniform_double(&rng) < 0.5;
            expect_image(duet_batch_tensor_get(&bt, "img_a"), ia, 0, ax, ay, 10, 8, fa, true);
            expect_image(duet_batch_tensor_get(&bt, "img_b"), im, 0, bx, by, 10, 8, fb, true);
            char want[16];
            snprintf(want, sizeof want, "trainB/b%d.png", (int)ib);
            assert_non_null(strstr(duet_batch_meta_get(&bt, "img_b_path", 0), want));
            duet_batch_clear(&bt);
        }
    int distinct = 0;
    for (int k = 0; k < 5; k++) distinct += seen[k];
    assert_true(distinct >= 3); /* B is drawn, not tied to the index */
    duet_dataset_destroy(ds);
    for (int i = 0; i < 3; i++) duet_image_destroy(a[i]);
    for (int i = 0; i < 5; i++) duet_image_destroy(b[i]);
}

static void test_unpaired_test_mode_by_index(void **state) {
    tu_tmpdir *fx = *state;
    duet_image *a[4], *b[2];
    make_unpaired(fx->dir, "test", 4, 2, a, b);
    duet_dataset *ds = build(fx->dir, "GenerationUnpairedDataset", "test_mode = true;",
        UNPAIRED_LOAD "{ type = \"Crop\"; keys = [\"img_a\", \"img_b\"]; crop_size = [8, 10];"
        "  random_crop = false; }," NORM_STEPS("[\"img_a\", \"img_b\"]", "true"));
    assert_int_equal(duet_dataset_size(ds), 4);
    for (int64_t i = 0; i < 4; i++) {
        duet_batch bt = {0};
        TU_OK(duet_dataset_get_item(ds, i, SEED, 3, &bt));
        const duet_image *im = b[i % 2];
        /* centre crop: max(0, size - crop) // 2 */
        expect_image(duet_batch_tensor_get(&bt, "img_a"), a[i], 0, 2, 2, 10, 8, false, true);
        expect_image(duet_batch_tensor_get(&bt, "img_b"), im, 0, 2, (im->height - 8) / 2, 10, 8,
                     false, true);
        char want[16];
        snprintf(want, sizeof want, "testB/b%d.png", (int)(i % 2));
        assert_non_null(strstr(duet_batch_meta_get(&bt, "img_b_path", 0), want));
        snprintf(want, sizeof want, "testA/a%d.png", (int)i);
        assert_non_null(strstr(duet_batch_meta_get(&bt, "img_a_path", 0), want));
        duet_batch_clear(&bt);
    }
    duet_dataset_destroy(ds);
    for (int i = 0; i < 4; i++) duet_image_destroy(a[i]);
    for (int i = 0; i < 2; i++) duet_image_destroy(b[i]);
}

/* The loader stacks the named tensors; two ranks' halves are the batch of one. */
static void test_loader_batches(void **state) {
    tu_tmpdir *fx = *state;
    duet_image *a[3], *b[3];
    make_unpaired(fx->dir, "train", 3, 3, a, b);
    duet_dataset *ds = build(fx->dir, "GenerationUnpairedDataset", "",
        UNPAIRED_LOAD "{ type = \"Crop\"; keys = [\"img_a\", \"img_b\"]; crop_size = [8, 8]; },"
        NORM_STEPS("[\"img_a\", \"img_b\"]", "true"));
    duet_loader_opts lo = duet_loader_options_default();
    lo.samples_per_gpu = 2;
    lo.seed = SEED;
    lo.prefetch = 0;
    duet_loader *l = NULL;
    TU_OK(duet_loader_create(ds, &lo, &l));
    duet_data_batch *db = NULL;
    TU_OK(duet_loader_next(l, &db));
    duet_tensor *ta = duet_batch_tensor_get(&db->batch, "img_a");
    assert_non_null(ta);
    assert_int_equal(ta->shape[0], 2);
    assert_int_equal(ta->shape[2], 8);
    for (int64_t k = 0; k < 2; k++) {
        duet_batch one = {0};
        TU_OK(duet_dataset_get_item(ds, db->indices[k], SEED, db->epoch, &one));
        duet_tensor *want = duet_batch_tensor_get(&one, "img_b");
        assert_memory_equal(duet_batch_tensor_get(&db->batch, "img_b")->data + k * want->numel,
                            want->data, sizeof(float) * (size_t)want->numel);
        duet_batch_clear(&one);
    }
    duet_data_batch_destroy(db);
    duet_loader_destroy(l);
    duet_dataset_destroy(ds);
    for (int i = 0; i < 3; i++) duet_image_destroy(a[i]), duet_image_destroy(b[i]);
}

/* ---- errors ---------------------------------------------------------------------- */

static void expect_build_error(const char *dir, const char *type, const char *pipeline, int want,
                               const char *n1, const char *n2) {
    char text[4096];
    snprintf(text, sizeof text, "train = { type = \"%s\"; dataroot = \"%s\";\n"
             "pipeline = ( %s ); };\n", type, dir, pipeline);
    duet_config *cfg = load_cfg(text);
    duet_dataset *ds = NULL;
    tu_expect_error(duet_build_dataset(cfg, "train", true, &ds), want, n1, n2, NULL);
    assert_null(ds);
    duet_config_destroy(cfg);
}

#define PAIR_LOAD "{ type = \"LoadPairedImageFromFile\"; key = \"pair\"; },"

static void test_errors(void **state) {
    tu_tmpdir *fx = *state;
    const char *P = "GenerationPairedDataset";
    /* No folder yet. */
    expect_build_error(fx->dir, P, PAIR_LOAD NORM_STEPS("[\"img_a\"]", "true"), DUET_ENOTFOUND,
                       "/train", NULL);
    duet_image *odd = NULL;
    TU_OK(duet_image_create(4, 7, 3, &odd));
    save(fx->dir, "train", "odd.png", odd);
    duet_image_destroy(odd);
    /* An A|B image of odd width fails when read, naming the file. */
    char text[4096];
    snprintf(text, sizeof text, "train = { type = \"%s\"; dataroot = \"%s\"; pipeline = ( "
             PAIR_LOAD NORM_STEPS("[\"img_a\", \"img_b\"]", "true") " ); };", P, fx->dir);
    duet_config *cfg = load_cfg(text);
    duet_dataset *ds = NULL;
    TU_OK(duet_build_dataset(cfg, "train", true, &ds));
    duet_batch b = {0};
    tu_expect_error(duet_dataset_get_item(ds, 0, SEED, 0, &b), DUET_ESHAPE, "odd.png",
                    "even width", "7x4", NULL);
    assert_int_equal(b.ntensors, 0);
    duet_dataset_destroy(ds);
    duet_config_destroy(cfg);
    /* Unknown step key: named with its line by the unused-key check. */
    cfg = load_cfg("train = { type = \"GenerationPairedDataset\"; dataroot = \"/x\";\n"
                   "pipeline = ( { type = \"Flip\"; keys = [\"img_a\"];\n"
                   "  flip_ration = 0.5; } ); };\n");
    (void)duet_build_dataset(cfg, "train", true, &ds); /* no folder /x: read keys first */
    assert_null(ds);
    tu_expect_error(duet_config_check_unused(cfg), DUET_ECONFIG, "<test>:3", "flip_ration", NULL);
    duet_config_destroy(cfg);
    /* Step checks, each naming the step. */
    expect_build_error(fx->dir, P, PAIR_LOAD "{ type = \"Blur\"; keys = [\"img_a\"]; }",
                       DUET_ECONFIG, "<test>:2", "Blur");
    expect_build_error(fx->dir, P, PAIR_LOAD "{ type = \"Resize\"; keys = [\"img_a\"]; "
                       "scale = [8, 8]; interpolation = \"area\"; },"
                       NORM_STEPS("[\"img_a\"]", "true"), DUET_ECONFIG, "interpolation",
                       "bilinear");
    expect_build_error(fx->dir, P, PAIR_LOAD "{ type = \"RescaleToZeroOne\"; keys = [\"img_a\"]; },"
                       "{ type = \"Resize\"; keys = [\"img_a\"]; scale = [8, 8]; "
                       "interpolation = \"bicubic\"; }," NORM_STEPS("[\"img_a\"]", "true"),
                       DUET_EUNSUPPORTED, "pipeline.[2] (Resize)", "before RescaleToZeroOne");
    expect_build_error(fx->dir, P, PAIR_LOAD "{ type = \"RescaleToZeroOne\"; keys = [\"img_a\"]; }",
                       DUET_ECONFIG, "end with Collect", NULL);
    expect_build_error(fx->dir, P, "{ type = \"LoadImageFromFile\"; key = \"img_a\"; },"
                       NORM_STEPS("[\"img_a\"]", "true"), DUET_ECONFIG, "LoadPairedImageFromFile",
                       "<test>:2");
    expect_build_error(fx->dir, P, PAIR_LOAD "{ type = \"Flip\"; keys = [\"img_c\"]; },"
                       NORM_STEPS("[\"img_a\"]", "true"), DUET_ECONFIG, "img_c", "keys");
    expect_build_error(fx->dir, P, PAIR_LOAD "{ type = \"Flip\"; keys = [\"img_a\"]; "
                       "flip_ratio = 1.5; }," NORM_STEPS("[\"img_a\"]", "true"), DUET_ECONFIG,
                       "flip_ratio", "<= 1, got 1.5");
    expect_build_error(fx->dir, P, PAIR_LOAD "{ type = \"Collect\"; keys = [\"img_a\"]; }",
                       DUET_ECONFIG, "ImageToTensor", NULL);
    /* Unpaired: an image used before it is loaded; a BMP among the files. */
    const char *U = "GenerationUnpairedDataset";
    expect_build_error(fx->dir, U, "{ type = \"LoadImageFromFile\"; key = \"img_a\"; },"
                       NORM_STEPS("[\"img_a\", \"img_b\"]", "true"), DUET_ECONFIG,
                       "'img_b' is not loaded", NULL);
    duet_rng r = duet_rng_make(5, 0);
    duet_image *x = tu_random_image(&r, 8, 8, 3);
    save(fx->dir, "trainA", "a.png", x);
    save(fx->dir, "trainB", "b.png", x);
    duet_image_destroy(x);
    char bmp[600];
    snprintf(bmp, sizeof bmp, "%s/trainB/c.bmp", fx->dir);
    tu_write_text(bmp, "BM");
    expect_build_error(fx->dir, U, UNPAIRED_LOAD NORM_STEPS("[\"img_a\", \"img_b\"]", "true"),
                       DUET_EUNSUPPORTED, "c.bmp", "PNG and JPEG");
}

/* configs/pix2pix_tiny.cfg: its data groups read every key they hold and
 * give 64x64 img_a / img_b (train: 64 -> 72 -> crop 64; val: 64 kept), and
 * its model builds. */
static void test_pix2pix_tiny_config(void **state) {
    tu_tmpdir *fx = *state;
    const char *src = getenv("DUET_SOURCE_DIR");
    if (src == NULL) fail_msg("DUET_SOURCE_DIR is not set");
    duet_rng r = duet_rng_make(6, 0);
    duet_image *p = pair_image(&r, 64, 64, false);
    save(fx->dir, "train", "a.png", p);
    save(fx->dir, "test", "b.png", p);
    duet_image_destroy(p);
    char path[512], set[600];
    snprintf(path, sizeof path, "%s/configs/pix2pix_tiny.cfg", src);
    duet_config *cfg = NULL;
    TU_OK(duet_config_load(path, &cfg));
    const char *groups[2] = {"data.train", "data.val"};
    for (int g = 0; g < 2; g++) {
        snprintf(set, sizeof set, "%s.dataroot=\"%s\"", groups[g], fx->dir);
        TU_OK(duet_config_set(cfg, set));
        duet_dataset *ds = NULL;
        TU_OK(duet_build_dataset(cfg, groups[g], g == 0, &ds));
        duet_batch b = {0};
        TU_OK(duet_dataset_get_item(ds, 0, SEED, 0, &b));
        for (int k = 0; k < 2; k++) {
            const duet_tensor *t = duet_batch_tensor_get(&b, k ? "img_b" : "img_a");
            assert_non_null(t);
            assert_int_equal(t->shape[2], 64);
            assert_int_equal(t->shape[3], 64);
        }
        duet_batch_clear(&b);
        duet_dataset_destroy(ds);
        duet_config *view = NULL;
        TU_OK(duet_config_sub(cfg, groups[g], &view));
        if (g == 0) TU_OK(duet_config_mark_used(view, "times")); /* the runner's key */
        TU_OK(duet_config_check_unused(view));
        duet_config_destroy(view);
    }
    duet_model *m = NULL;
    TU_OK(duet_build_model(cfg, "model", &r, &m));
    duet_model_destroy(m);
    duet_config_destroy(cfg);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        TU_TMPDIR_TEST(test_paired_one_window_one_flip),
        TU_TMPDIR_TEST(test_paired_bgr_and_values),
        TU_TMPDIR_TEST(test_paired_resize_same_for_both),
        cmocka_unit_test(test_cv_cubic_2x),
        TU_TMPDIR_TEST(test_unpaired_index_rule_and_crops),
        TU_TMPDIR_TEST(test_unpaired_test_mode_by_index),
        TU_TMPDIR_TEST(test_loader_batches),
        TU_TMPDIR_TEST(test_errors),
        TU_TMPDIR_TEST(test_pix2pix_tiny_config),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
