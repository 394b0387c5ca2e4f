/* The builder for MMEditing 0.x's ImgInpaintingDataset from its config
 * group, with the `pipeline` list as MMEditing's inpainting configs write it:
 *
 *   train = { type = "ImgInpaintingDataset"; ann_file = "data/x/train.txt";
 *             data_prefix = "data/x"; test_mode = false;
 *             pipeline = ( { type = "LoadImageFromFile"; key = "gt_img"; },
 *                          { type = "LoadMask"; mask_mode = "bbox";
 *                            mask_config = { max_bbox_shape = [128, 128];
 *                              max_bbox_delta = 40; min_margin = 20;
 *                              img_shape = [256, 256]; }; },
 *                          ... ); };
 *
 * The pipeline list is read by the data layer's engine (duet_pipeline_read):
 * every key of every step is read or refused with its file and line. */
#include "registry/registry_data.h"

#include <stdio.h>
#include <string.h>

int duet__build_img_inpainting(duet_config *d, const char *path, bool train, duet_dataset **out) {
    (void)train;
    duet_inpainting_opts o;
    memset(&o, 0, sizeof o);
    bool test_mode = false;
    DUET_TRY(duet_config_get_string(d, "ann_file", &o.ann_file));
    DUET_TRY(duet_config_get_string_or(d, "data_prefix", NULL, &o.data_prefix));
    DUET_TRY(duet_config_get_bool_or(d, "test_mode", false, &test_mode));
    int64_t max_pixels = DUET_IMAGE_MAX_PIXELS_DEFAULT;
    DUET_TRY(duet_config_get_int_in_or(d, "max_image_pixels", DUET_IMAGE_MAX_PIXELS_DEFAULT, 0,
                                       INT64_MAX, &max_pixels));
    DUET_TRY(duet_image_pixel_limit(max_pixels, &o.max_pixels));
    duet_pipeline_spec spec = duet_inpainting_pipeline_spec();
    duet_pipeline *p = NULL;
    DUET_TRY(duet_pipeline_read(d, path, &spec, &p));
    o.pipeline = p;
    int rc = duet_inpainting_dataset_create(&o, out);
    duet_pipeline_destroy(p);
    return rc;
}

int duet__inpainting_infer_input(duet_config *cfg, const char *image, const char *mask,
                                 int64_t max_pixels, duet_batch *out) {
    static const char path[] = "data.val";
    if (!duet_config_has(cfg, path))
        return duet__error(DUET_ECONFIG, "%s: infer prepares the image and mask with "
                           "%s.pipeline (as duet test does); the config has no %s",
                           duet_config_name(cfg), path, path);
    duet_config *d = NULL;
    DUET_TRY(duet_config_sub(cfg, path, &d));
    duet_pipeline_spec spec = duet_inpainting_pipeline_spec();
    duet_pipeline *p = NULL;
    int rc = duet_pipeline_read(d, path, &spec, &p);
    duet_config_destroy(d);
    if (rc == DUET_OK) rc = duet_inpainting_one_image(p, image, mask, max_pixels, out);
    duet_pipeline_destroy(p);
    return rc;
}
