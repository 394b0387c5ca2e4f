/* GenerationPairedDataset's pipeline against tests/ref/ref_translation.py, a
 * numpy port of MMEditing's LoadPairedImageFromFile, Resize (OpenCV's
 * INTER_CUBIC, up and down), FixedCrop (crop_pos), Flip (ratio 1, both
 * directions), RescaleToZeroOne, Normalize (to_rgb, uneven mean and std) and
 * ImageToTensor: every value equal. As the `mmedit` test mmedit_translation,
 * the same against MMEditing's own pipeline on OpenCV
 * (tests/ref/gen_mmedit_refs.py). */
#include <stdio.h>
#include <sys/stat.h>

#include "duet/train.h"
#include "testutil.h"

typedef struct ref_case {
    const char *name;
    int resize_w, resize_h, crop_h, crop_w, pos_x, pos_y;
    const char *direction;
} ref_case;

/* The same as CASES in ref_translation.py. */
static const ref_case CASES[] = {
    {"up", 27, 41, 24, 27, 0, 11, "horizontal"}, /* every column: both edges */
    {"down", 13, 17, 17, 10, 3, 0, "vertical"},  /* every row */
};

static void test_pipeline_matches_numpy(void **state) {
    tu_tmpdir *fx = *state;
    duet_st *st = tu_ref_load("translation_pipeline.safetensors");
    for (size_t c = 0; c < sizeof CASES / sizeof CASES[0]; c++) {
        const ref_case *rc = &CASES[c];
        char key[64], dir[512], path[600];
        snprintf(key, sizeof key, "%s_pair", rc->name);
        duet_tensor *pair = tu_ref_tensor(st, key); /* (H, 2W, 3) bytes */
        duet_image *img = NULL;
        TU_OK(duet_image_create(pair->shape[0], pair->shape[1], 3, &img));
        for (int64_t i = 0; i < pair->numel; i++) img->data[i] = (uint8_t)pair->data[i];
        snprintf(dir, sizeof dir, "%s/%s", fx->dir, rc->name);
        mkdir(dir, 0755);
        snprintf(path, sizeof path, "%s/train", dir);
        mkdir(path, 0755);
        snprintf(path, sizeof path, "%s/train/p.png", dir);
        TU_OK(duet_image_save_png(img, path));
        duet_image_destroy(img);
        duet_tensor_release(pair);

        char text[2048];
        snprintf(text, sizeof text,
                 "d = { type = \"GenerationPairedDataset\"; dataroot = \"%s\"; pipeline = (\n"
                 "{ type = \"LoadPairedImageFromFile\"; key = \"pair\"; },\n"
                 "{ type = \"Resize\"; keys = [\"img_a\", \"img_b\"]; scale = [%d, %d];\n"
                 "  interpolation = \"bicubic\"; },\n"
                 "{ type = \"FixedCrop\"; keys = [\"img_a\", \"img_b\"]; crop_size = [%d, %d];\n"
                 "  crop_pos = [%d, %d]; },\n"
                 "{ type = \"Flip\"; keys = [\"img_a\", \"img_b\"]; flip_ratio = 1.0;\n"
                 "  direction = \"%s\"; },\n"
                 "{ type = \"RescaleToZeroOne\"; keys = [\"img_a\", \"img_b\"]; },\n"
                 "{ type = \"Normalize\"; keys = [\"img_a\", \"img_b\"]; to_rgb = true;\n"
                 "  mean = [0.5, 0.4, 0.3]; std = [0.5, 0.25, 0.2]; },\n"
                 "{ type = \"ImageToTensor\"; keys = [\"img_a\", \"img_b\"]; },\n"
                 "{ type = \"Collect\"; keys = [\"img_a\", \"img_b\"]; } ); };\n",
                 dir, rc->resize_w, rc->resize_h, rc->crop_h, rc->crop_w, rc->pos_x, rc->pos_y,
                 rc->direction);
        duet_config *cfg = NULL;
        TU_OK(duet_config_load_string(text, "<test>", &cfg));
        duet_dataset *ds = NULL;
        TU_OK(duet_build_dataset(cfg, "d", true, &ds));
        TU_OK(duet_config_check_unused(cfg));
        duet_batch b = {0};
        TU_OK(duet_dataset_get_item(ds, 0, 1, 0, &b));
        for (int k = 0; k < 2; k++) {
            snprintf(key, sizeof key, "%s_%s", rc->name, k ? "b" : "a");
            duet_tensor *want = tu_ref_tensor(st, key);
            duet_tensor *got = duet_batch_tensor_get(&b, k ? "img_b" : "img_a");
            assert_int_equal(got->numel, want->numel);
            assert_int_equal(got->shape[2], want->shape[1]);
            for (int64_t i = 0; i < got->numel; i++)
                if (got->data[i] != want->data[i])
                    fail_msg("%s[%lld]: got %.9g, numpy %.9g", key, (long long)i, got->data[i],
                             want->data[i]);
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
        TU_TMPDIR_TEST(test_pipeline_matches_numpy),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
