/* ImgInpaintingDataset (src/data/inpainting.c, src/registry/registry_inpainting.c):
 * random masks by their properties (bbox inside MMEditing's limits and
 * shrink range; irregular masks binary, inside the area ratio, stroke and
 * segment counts in range, stroke widths seen), the sample's tensors
 * (masked_img = gt_img * (1 - mask), normalisation and BGR order, mask_bbox
 * the mask's box), the same sample at any world size through the loader,
 * mask modes set and file, and config errors. Pixel equality with
 * MMEditing's own pipeline on OpenCV is test_ref_inpainting (mmedit). */
#include <string.h>
#include <sys/stat.h>

#include "duet/train.h"
#include "testutil.h"

static void test_bbox_in_limits(void **state) {
    (void)state;
    duet_mask_opts o = duet_mask_options_default(DUET_MASK_BBOX);
    o.img_h = 64, o.img_w = 80;
    o.max_bbox[0] = 24, o.max_bbox[1] = 32;
    o.max_delta[0] = 10, o.max_delta[1] = 7;
    o.min_margin[0] = 4, o.min_margin[1] = 6;
    TU_OK(duet_mask_options_check(&o));
    bool seen_shrink[2] = {false, false}, seen_full[2] = {false, false};
    for (int i = 0; i < 2000; i++) {
        duet_rng rng = duet_dataset_sample_rng(3, 0, i);
        int64_t b[4];
        duet_mask_random_bbox(&o, &rng, b);
        const int64_t img[2] = {o.img_h, o.img_w};
        for (int k = 0; k < 2; k++) {
            int64_t pos = b[k], size = b[k + 2];
            assert_true(pos >= o.min_margin[k]);
            /* the box's far edge stays inside the margin (randint's
             * exclusive top: strictly less than img - margin) */
            assert_true(pos + size < img[k] - o.min_margin[k]);
            assert_true(size <= o.max_bbox[k]);
            assert_true(size >= o.max_bbox[k] - o.max_delta[k] / 2);
            seen_shrink[k] |= size == o.max_bbox[k] - o.max_delta[k] / 2;
            seen_full[k] |= size == o.max_bbox[k];
        }
    }
    assert_true(seen_shrink[0] && seen_shrink[1] && seen_full[0] && seen_full[1]);
}

static void test_bbox_options_refused(void **state) {
    (void)state;
    duet_mask_opts o = duet_mask_options_default(DUET_MASK_BBOX);
    o.max_bbox[0] = 300;
    tu_expect_error(duet_mask_options_check(&o), DUET_EINVAL, "larger than img_shape", NULL);
    o = duet_mask_options_default(DUET_MASK_BBOX);
    o.max_delta[1] = 128;
    tu_expect_error(duet_mask_options_check(&o), DUET_EINVAL, "max_bbox_delta", NULL);
    o = duet_mask_options_default(DUET_MASK_BBOX);
    o.min_margin[0] = 64;
    tu_expect_error(duet_mask_options_check(&o), DUET_EINVAL, "min_margin", NULL);
}

static void test_irregular_properties(void **state) {
    (void)state;
    duet_mask_opts o = duet_mask_options_default(DUET_MASK_IRREGULAR);
    o.img_h = o.img_w = 64;
    o.num_vertices[0] = 2, o.num_vertices[1] = 5;
    o.length_range[0] = 5, o.length_range[1] = 30;
    o.brush_width[0] = 3, o.brush_width[1] = 9;
    o.area_ratio[0] = 0.05, o.area_ratio[1] = 0.6;
    uint8_t *m = malloc(64 * 64), *m2 = malloc(64 * 64);
    int64_t min_strokes = 99, max_strokes = 0;
    for (int i = 0; i < 200; i++) {
        duet_rng rng = duet_dataset_sample_rng(5, 1, i), again = rng;
        int64_t strokes = 0, segs = 0;
        TU_OK(duet_mask_irregular(&o, &rng, m, &strokes, &segs));
        assert_true(strokes >= 2 && strokes < 5);
        assert_true(segs >= strokes && segs <= 5 * strokes);
        min_strokes = strokes < min_strokes ? strokes : min_strokes;
        max_strokes = strokes > max_strokes ? strokes : max_strokes;
        int64_t sum = 0;
        for (int k = 0; k < 64 * 64; k++) {
            assert_true(m[k] == 0 || m[k] == 1);
            sum += m[k];
        }
        double ratio = (double)sum / (64.0 * 64.0);
        assert_true(ratio > 0.05 && ratio < 0.6);
        /* the same rng state draws the same mask */
        TU_OK(duet_mask_irregular(&o, &again, m2, NULL, NULL));
        assert_memory_equal(m, m2, 64 * 64);
    }
    assert_int_equal(min_strokes, 2);
    assert_int_equal(max_strokes, 4);
    /* one stroke of fixed width: its thickness across a straight run */
    o.num_vertices[0] = 1, o.num_vertices[1] = 2;
    o.brush_width[0] = 7, o.brush_width[1] = 8;
    o.area_ratio[0] = 0.0, o.area_ratio[1] = 1.0;
    duet_rng rng = duet_rng_make(1, 2);
    TU_OK(duet_mask_irregular(&o, &rng, m, NULL, NULL));
    int64_t widest = 0;
    for (int y = 0; y < 64; y++) {
        int64_t run = 0;
        for (int x = 0; x < 64; x++) run += m[y * 64 + x];
        widest = run > widest ? run : widest;
    }
    for (int x = 0; x < 64; x++) {
        int64_t run = 0;
        for (int y = 0; y < 64; y++) run += m[y * 64 + x];
        widest = run > widest ? run : widest;
    }
    assert_true(widest >= 7);
    /* an impossible area ratio ends with an error, not a hang */
    o.area_ratio[0] = 0.99, o.area_ratio[1] = 1.0;
    o.brush_width[0] = 1, o.brush_width[1] = 2;
    tu_expect_error(duet_mask_irregular(&o, &rng, m, NULL, NULL), DUET_EINVAL, "area ratio",
                    NULL);
    free(m);
    free(m2);
}

/* n random 40x48 (h x w) images im0.png.. under dir/img, an annotation file
 * dir/ann.txt, and (when masks) mask files under dir/masks listed in
 * dir/masks.txt and as each line's second word. */
static void make_set(const char *dir, int n, bool masks, duet_image **keep) {
    char p[600], sub[600];
    snprintf(sub, sizeof sub, "%s/img", dir);
    mkdir(sub, 0755);
    snprintf(sub, sizeof sub, "%s/masks", dir);
    mkdir(sub, 0755);
    duet_rng rng = duet_rng_make(11, 0);
    char ann[4096] = "", list[4096] = "";
    for (int i = 0; i < n; i++) {
        duet_image *img = tu_random_image(&rng, 40, 48, 3);
        snprintf(p, sizeof p, "%s/img/im%d.png", dir, i);
        TU_OK(duet_image_save_png(img, p));
        if (keep) keep[i] = img;
        else duet_image_destroy(img);
        duet_image *m = NULL;
        TU_OK(duet_image_create(40, 48, 1, &m));
        for (int64_t k = 0; k < 40 * 48; k++) m->data[k] = (k % 48) < 10 + i ? 255 : 0;
        snprintf(p, sizeof p, "%s/masks/m%d.png", dir, i);
        TU_OK(duet_image_save_png(m, p));
        duet_image_destroy(m);
        size_t l = strlen(ann);
        if (masks) snprintf(ann + l, sizeof ann - l, "img/im%d.png masks/m%d.png\n", i, i);
        else snprintf(ann + l, sizeof ann - l, "img/im%d.png\n\n", i);
        l = strlen(list);
        snprintf(list + l, sizeof list - l, "m%d.png\n", i);
    }
    snprintf(p, sizeof p, "%s/ann.txt", dir);
    tu_write_text(p, ann);
    snprintf(p, sizeof p, "%s/masks.txt", dir);
    tu_write_text(p, list);
}

static duet_dataset *build(const char *dir, const char *mask_step, const char *extra_steps) {
    char text[4096];
    snprintf(text, sizeof text,
             "d = { type = \"ImgInpaintingDataset\"; ann_file = \"%s/ann.txt\";\n"
             "  data_prefix = \"%s\"; test_mode = false; pipeline = (\n"
             "  { type = \"LoadImageFromFile\"; key = \"gt_img\"; },\n"
             "  %s,\n"
             "  %s\n"
             "  { type = \"Normalize\"; keys = [\"gt_img\"]; mean = [127.5, 127.5, 127.5];\n"
             "    std = [127.5, 127.5, 127.5]; to_rgb = false; },\n"
             "  { type = \"GetMaskedImage\"; },\n"
             "  { type = \"Collect\"; keys = [\"gt_img\", \"masked_img\", \"mask\", "
             "\"mask_bbox\"];\n"
             "    meta_keys = [\"gt_img_path\"]; },\n"
             "  { type = \"ImageToTensor\"; keys = [\"gt_img\", \"masked_img\", \"mask\"]; },\n"
             "  { type = \"ToTensor\"; keys = [\"mask_bbox\"]; } ); };\n",
             dir, dir, mask_step, extra_steps);
    duet_config *cfg = NULL;
    TU_OK(duet_config_load_string(text, "<test>", &cfg));
    duet_dataset *ds = NULL;
    TU_OK(duet_build_dataset(cfg, "d", true, &ds));
    TU_OK(duet_config_check_unused(cfg));
    duet_config_destroy(cfg);
    return ds;
}

static const char BBOX_STEP[] =
    "{ type = \"LoadMask\"; mask_mode = \"bbox\"; mask_config = { max_bbox_shape = [16, 20];\n"
    "  max_bbox_delta = 8; min_margin = 2; img_shape = [32, 32]; }; }";
static const char CROP_RESIZE[] =
    "{ type = \"Crop\"; keys = [\"gt_img\"]; crop_size = [36, 36]; random_crop = true; },\n"
    "{ type = \"Resize\"; keys = [\"gt_img\"]; scale = [32, 32]; keep_ratio = false; },\n";

/* masked_img = gt_img * (1 - mask); mask binary; mask_bbox is the mask's box. */
static void check_sample(duet_batch *b, bool bbox) {
    duet_tensor *gt = duet_batch_tensor_get(b, "gt_img"), *mi = duet_batch_tensor_get(b, "masked_img");
    duet_tensor *m = duet_batch_tensor_get(b, "mask");
    assert_non_null(gt);
    assert_non_null(mi);
    assert_non_null(m);
    int64_t h = gt->shape[2], w = gt->shape[3];
    assert_int_equal(m->shape[1], 1);
    assert_int_equal(m->shape[2], h);
    assert_int_equal(m->shape[3], w);
    int64_t holes = 0;
    for (int64_t i = 0; i < h * w; i++) {
        assert_true(m->data[i] == 0.0f || m->data[i] == 1.0f);
        holes += m->data[i] == 1.0f;
        for (int c = 0; c < 3; c++) {
            float g = gt->data[c * h * w + i], v = mi->data[c * h * w + i];
            assert_true(g >= -1.0f && g <= 1.0f);
            assert_true(v == (m->data[i] == 1.0f ? 0.0f : g));
        }
    }
    assert_true(holes > 0);
    duet_tensor *bb = duet_batch_tensor_get(b, "mask_bbox");
    if (!bbox) {
        assert_null(bb);
        return;
    }
    assert_non_null(bb);
    int64_t t = (int64_t)bb->data[0], l = (int64_t)bb->data[1], bh = (int64_t)bb->data[2],
            bw = (int64_t)bb->data[3];
    assert_int_equal(holes, bh * bw);
    for (int64_t y = 0; y < h; y++)
        for (int64_t x = 0; x < w; x++) {
            bool in = y >= t && y < t + bh && x >= l && x < l + bw;
            assert_true(m->data[y * w + x] == (in ? 1.0f : 0.0f));
        }
}

static void test_dataset_bbox_sample(void **state) {
    tu_tmpdir *fx = *state;
    make_set(fx->dir, 3, false, NULL);
    duet_dataset *ds = build(fx->dir, BBOX_STEP, CROP_RESIZE);
    assert_int_equal(duet_dataset_size(ds), 3);
    assert_string_equal(duet_dataset_name(ds, 2), "im2.png");
    duet_batch b = {0}, again = {0}, other = {0};
    TU_OK(duet_dataset_get_item(ds, 1, 42, 0, &b));
    assert_int_equal(duet_batch_tensor_get(&b, "gt_img")->shape[2], 32);
    check_sample(&b, true);
    /* the same (seed, epoch, index): the same tensors */
    TU_OK(duet_dataset_get_item(ds, 1, 42, 0, &again));
    const char *names[] = {"gt_img", "masked_img", "mask", "mask_bbox"};
    for (int k = 0; k < 4; k++) {
        duet_tensor *x = duet_batch_tensor_get(&b, names[k]), *y = duet_batch_tensor_get(&again, names[k]);
        assert_memory_equal(x->data, y->data, sizeof(float) * (size_t)x->numel);
    }
    /* another epoch draws another box (over a few tries) */
    bool differs = false;
    for (int e = 1; e < 6 && !differs; e++) {
        TU_OK(duet_dataset_get_item(ds, 1, 42, e, &other));
        differs = memcmp(duet_batch_tensor_get(&other, "mask_bbox")->data,
                         duet_batch_tensor_get(&b, "mask_bbox")->data, 4 * sizeof(float)) != 0;
        duet_batch_clear(&other);
    }
    assert_true(differs);
    duet_batch_clear(&b);
    duet_batch_clear(&again);
    duet_dataset_destroy(ds);
}

/* Without crop and resize: gt_img is the file's BGR bytes normalised as
 * mmcv does ((v - 127.5) * (1 / 127.5) in double), the mask a file's. */
static void test_dataset_file_mask_values(void **state) {
    tu_tmpdir *fx = *state;
    duet_image *imgs[2];
    make_set(fx->dir, 2, true, imgs);
    duet_dataset *ds = build(fx->dir, "{ type = \"LoadMask\"; mask_mode = \"file\"; }", "");
    for (int i = 0; i < 2; i++) {
        duet_batch b = {0};
        TU_OK(duet_dataset_get_item(ds, i, 1, 0, &b));
        check_sample(&b, false);
        duet_tensor *gt = duet_batch_tensor_get(&b, "gt_img"), *m = duet_batch_tensor_get(&b, "mask");
        for (int64_t p = 0; p < 40 * 48; p++) {
            assert_true(m->data[p] == ((p % 48) < 10 + i ? 1.0f : 0.0f));
            for (int c = 0; c < 3; c++) {
                float v = (float)imgs[i]->data[p * 3 + (2 - c)];
                float want = (float)((double)(v - 127.5f) * (1.0 / (double)127.5f));
                assert_true(gt->data[c * 40 * 48 + p] == want);
            }
        }
        const char *path = duet_batch_meta_get(&b, "gt_img_path", 0);
        assert_non_null(path);
        assert_non_null(strstr(path, "img/im"));
        duet_batch_clear(&b);
        duet_image_destroy(imgs[i]);
    }
    duet_dataset_destroy(ds);
}

static void test_dataset_set_and_irregular(void **state) {
    tu_tmpdir *fx = *state;
    make_set(fx->dir, 4, false, NULL);
    char step[1024];
    snprintf(step, sizeof step,
             "{ type = \"LoadMask\"; mask_mode = \"set\"; mask_config = { mask_list_file = "
             "\"%s/masks.txt\"; prefix = \"%s/masks\"; io_backend = \"disk\"; flag = "
             "\"unchanged\"; }; }", fx->dir, fx->dir);
    duet_dataset *ds = build(fx->dir, step, "");
    bool seen[4] = {false};
    for (int i = 0; i < 40; i++) {
        duet_batch b = {0};
        TU_OK(duet_dataset_get_item(ds, i % 4, 9, i, &b));
        check_sample(&b, false);
        duet_tensor *m = duet_batch_tensor_get(&b, "mask");
        int64_t cols = 0;
        for (int x = 0; x < 48; x++) cols += m->data[x] == 1.0f;
        assert_true(cols >= 10 && cols <= 13);
        seen[cols - 10] = true;
        duet_batch_clear(&b);
    }
    for (int k = 0; k < 4; k++) assert_true(seen[k]);
    duet_dataset_destroy(ds);
    ds = build(fx->dir,
               "{ type = \"LoadMask\"; mask_mode = \"irregular\"; mask_config = { img_shape = "
               "[40, 48]; num_vertices = [2, 6]; max_angle = 4.0; length_range = [5, 20]; "
               "brush_width = [3, 8]; area_ratio_range = [0.05, 0.5]; }; }",
               "{ type = \"Flip\"; keys = [\"gt_img\", \"mask\"]; flip_ratio = 0.5; "
               "direction = \"horizontal\"; },");
    duet_batch b = {0};
    TU_OK(duet_dataset_get_item(ds, 0, 9, 0, &b));
    check_sample(&b, false);
    duet_batch_clear(&b);
    duet_dataset_destroy(ds);
}

/* The loader at world size 1, 2 and 3 gives each dataset index the same
 * sample: masks drawn from (seed, epoch, index), never from the rank. */
static void test_same_mask_any_world_size(void **state) {
    tu_tmpdir *fx = *state;
    make_set(fx->dir, 6, false, NULL);
    duet_dataset *ds = build(fx->dir, BBOX_STEP, CROP_RESIZE);
    float boxes[6][4];
    bool have[6] = {false};
    for (int world = 1; world <= 3; world++)
        for (int rank = 0; rank < world; rank++) {
            duet_loader_opts lo = duet_loader_options_default();
            lo.world_size = world, lo.rank = rank, lo.seed = 77;
            lo.samples_per_gpu = 1;
            lo.prefetch = rank % 2; /* with and without the prefetch thread */
            lo.one_epoch = true;
            duet_loader *l = NULL;
            TU_OK(duet_loader_create(ds, &lo, &l));
            duet_data_batch *db = NULL;
            for (;;) {
                TU_OK(duet_loader_next(l, &db));
                if (db == NULL) break;
                int64_t idx = db->indices[0];
                duet_tensor *bb = duet_batch_tensor_get(&db->batch, "mask_bbox");
                assert_non_null(bb);
                if (!have[idx]) memcpy(boxes[idx], bb->data, sizeof boxes[idx]);
                else assert_memory_equal(boxes[idx], bb->data, sizeof boxes[idx]);
                have[idx] = true;
                duet_data_batch_destroy(db);
            }
            duet_loader_destroy(l);
        }
    for (int i = 0; i < 6; i++) assert_true(have[i]);
    duet_dataset_destroy(ds);
}

static int build_text(const char *text) {
    duet_config *cfg = NULL;
    TU_OK(duet_config_load_string(text, "<cfg>", &cfg));
    duet_dataset *ds = NULL;
    int rc = duet_build_dataset(cfg, "d", true, &ds);
    duet_dataset_destroy(ds);
    duet_config_destroy(cfg);
    return rc;
}

static void test_errors(void **state) {
    tu_tmpdir *fx = *state;
    make_set(fx->dir, 1, false, NULL);
    char text[2048];
    /* a missing image names the file and the line */
    char p[600];
    snprintf(p, sizeof p, "%s/bad.txt", fx->dir);
    tu_write_text(p, "img/im0.png\nimg/nope.png\n");
    snprintf(text, sizeof text,
             "d = { type = \"ImgInpaintingDataset\"; ann_file = \"%s\"; data_prefix = \"%s\";\n"
             "pipeline = ( { type = \"LoadImageFromFile\"; key = \"gt_img\"; },\n"
             "{ type = \"LoadMask\"; }, { type = \"GetMaskedImage\"; } ); };", p, fx->dir);
    tu_expect_error(build_text(text), DUET_ENOTFOUND, "bad.txt:2", "nope.png", NULL);
    /* an unknown mask mode names its line */
    snprintf(text, sizeof text,
             "d = { type = \"ImgInpaintingDataset\"; ann_file = \"%s/ann.txt\";\n"
             "pipeline = ( { type = \"LoadImageFromFile\"; key = \"gt_img\"; },\n"
             "{ type = \"LoadMask\"; mask_mode = \"ff\"; }, { type = \"GetMaskedImage\"; } ); };",
             fx->dir);
    tu_expect_error(build_text(text), DUET_ECONFIG, "<cfg>:3", "mask_mode", NULL);
    /* a bbox larger than its image */
    snprintf(text, sizeof text,
             "d = { type = \"ImgInpaintingDataset\"; ann_file = \"%s/ann.txt\";\n"
             "pipeline = ( { type = \"LoadImageFromFile\"; key = \"gt_img\"; },\n"
             "{ type = \"LoadMask\"; mask_config = { img_shape = [64, 64]; }; },\n"
             "{ type = \"GetMaskedImage\"; } ); };", fx->dir);
    tu_expect_error(build_text(text), DUET_ECONFIG, "mask_config", "larger than img_shape",
                    NULL);
    /* no GetMaskedImage */
    snprintf(text, sizeof text,
             "d = { type = \"ImgInpaintingDataset\"; ann_file = \"%s/ann.txt\";\n"
             "pipeline = ( { type = \"LoadImageFromFile\"; key = \"gt_img\"; } ); };", fx->dir);
    tu_expect_error(build_text(text), DUET_ECONFIG, "GetMaskedImage", NULL);
    /* a mask of another size than the image: at get time, named */
    duet_dataset *ds = build(fx->dir, BBOX_STEP, "");
    duet_batch b = {0};
    tu_expect_error(duet_dataset_get_item(ds, 0, 1, 0, &b), DUET_ESHAPE, "GetMaskedImage",
                    "img_shape", NULL);
    duet_batch_clear(&b);
    duet_dataset_destroy(ds);
}

/* OpenCV's bilinear: identity at the same size, a constant stays constant,
 * the exact midpoint when doubling a 2-pixel row. */
static void test_bilinear_basics(void **state) {
    (void)state;
    uint8_t src[2 * 3] = {10, 20, 30, 40, 50, 60}, dst[16];
    TU_OK(duet_image_resize_bilinear_u8(src, 1, 2, 3, dst, 1, 2));
    assert_memory_equal(src, dst, 6);
    uint8_t row[2] = {0, 200}, out[4];
    TU_OK(duet_image_resize_bilinear_u8(row, 1, 2, 1, out, 1, 4));
    /* positions -0.25 (clamped), 0.25, 0.75, 1.25 (clamped) */
    assert_int_equal(out[0], 0);
    assert_int_equal(out[1], 50);
    assert_int_equal(out[2], 150);
    assert_int_equal(out[3], 200);
    uint8_t flat[5 * 7];
    memset(flat, 77, sizeof flat);
    uint8_t o2[3 * 4];
    TU_OK(duet_image_resize_bilinear_u8(flat, 5, 7, 1, o2, 3, 4));
    for (int i = 0; i < 12; i++) assert_int_equal(o2[i], 77);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bbox_in_limits),
        cmocka_unit_test(test_bbox_options_refused),
        cmocka_unit_test(test_irregular_properties),
        cmocka_unit_test(test_bilinear_basics),
        TU_TMPDIR_TEST(test_dataset_bbox_sample),
        TU_TMPDIR_TEST(test_dataset_file_mask_values),
        TU_TMPDIR_TEST(test_dataset_set_and_irregular),
        TU_TMPDIR_TEST(test_same_mask_any_world_size),
        TU_TMPDIR_TEST(test_errors),
    };
    return tu_exit(cmocka_run_group_tests(tests, NULL, NULL));
}
