/* ImgInpaintingDataset's deterministic steps against MMEditing's own
 * pipeline on OpenCV (tests/ref/gen_mmedit_refs.py, InpaintingPipeline):
 * LoadImageFromFile (BGR), LoadMask mask_mode 'file', Resize with
 * mmcv.imresize's default bilinear (shrink and enlarge), Normalize (127.5,
 * 127.5), GetMaskedImage and ImageToTensor: every value equal. Runs as the
 * `mmedit` test mmedit_inpainting_pipeline. */
#include <stdio.h>
#include <string.h>

#include "duet/train.h"
#include "testutil.h"

static void save_png(const duet_st *st, const char *key, int channels, const char *path) {
    duet_tensor *t = tu_ref_tensor(st, key);
    duet_image *img = NULL;
    TU_OK(duet_image_create(t->shape[0], t->shape[1], channels, &img));
    for (int64_t i = 0; i < t->numel; i++) img->data[i] = (uint8_t)t->data[i];
    TU_OK(duet_image_save_png(img, path));
    duet_image_destroy(img);
    duet_tensor_release(t);
}

static void test_pipeline_matches_mmedit(void **state) {
    tu_tmpdir *fx = *state;
    duet_st *st = tu_ref_load("inpainting_pipeline.safetensors");
    static const char *const cases[] = {"down", "up"};
    for (int c = 0; c < 2; c++) {
        char key[64], path[600], text[2048];
        snprintf(key, sizeof key, "%s_img", cases[c]);
        snprintf(path, sizeof path, "%s/%s.png", fx->dir, cases[c]);
        save_png(st, key, 3, path);
        snprintf(key, sizeof key, "%s_mask_png", cases[c]);
        snprintf(path, sizeof path, "%s/%s_mask.png", fx->dir, cases[c]);
        save_png(st, key, 1, path);
        snprintf(path, sizeof path, "%s/ann_%s.txt", fx->dir, cases[c]);
        snprintf(text, sizeof text, "%s.png %s_mask.png\n", cases[c], cases[c]);
        tu_write_text(path, text);
        snprintf(text, sizeof text,
                 "d = { type = \"ImgInpaintingDataset\"; ann_file = \"%s\";\n"
                 "  data_prefix = \"%s\"; pipeline = (\n"
                 "  { type = \"LoadImageFromFile\"; key = \"gt_img\"; },\n"
                 "  { type = \"LoadMask\"; mask_mode = \"file\"; },\n"
                 "  { type = \"Resize\"; keys = [\"gt_img\"]; scale = [30, 24]; "
                 "keep_ratio = false; },\n"
                 "  { type = \"Normalize\"; keys = [\"gt_img\"]; mean = [127.5, 127.5, 127.5];\n"
                 "    std = [127.5, 127.5, 127.5]; to_rgb = false; },\n"
                 "  { type = \"GetMaskedImage\"; },\n"
                 "  { type = \"ImageToTensor\"; keys = [\"gt_img\", \"masked_img\", \"mask\"]; }"
                 " ); };\n", path, fx->dir);
        duet_config *cfg = NULL;
        TU_OK(duet_config_load_string(text, "<test>", &cfg));
        duet_dataset *ds = NULL;
        TU_OK(duet_build_dataset(cfg, "d", true, &ds));
        TU_OK(duet_config_check_unused(cfg));
        duet_batch b = {0};
        TU_OK(duet_dataset_get_item(ds, 0, 1, 0, &b));
        static const char *const names[] = {"gt_img", "masked_img", "mask"};
        for (int k = 0; k < 3; k++) {
            snprintf(key, sizeof key, "%s_%s", cases[c], names[k]);
            duet_tensor *want = tu_ref_tensor(st, key); /* (C, H, W) */
            duet_tensor *got = duet_batch_tensor_get(&b, names[k]);
            assert_non_null(got);
            assert_int_equal(got->numel, want->numel);
            assert_int_equal(got->shape[2], want->shape[1]);
            assert_int_equal(got->shape[3], want->shape[2]);
            for (int64_t i = 0; i < got->numel; i++)
                if (got->data[i] != want->data[i])
                    fail_msg("%s[%lld]: got %.9g, MMEditing %.9g", key, (long long)i,
                             got->data[i], want->data[i]);
            duet_tensor_release(want);
        }
        duet_batch_clear(&b);
        duet_dataset_destroy(ds);
        duet_config_destroy(cfg);
    }
    duet_st_destroy(st);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        TU_TMPDIR_TEST(test_pipeline_matches_mmedit),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
