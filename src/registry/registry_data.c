/* Builders for MMEditing 0.x's translation datasets from their config
 * groups, with the `pipeline` list written as MMEditing's configs write it:
 *
 *   train = { type = "GenerationPairedDataset"; dataroot = "data/pix2pix_tiny";
 *             test_mode = false;
 *             pipeline = ( { type = "LoadPairedImageFromFile"; key = "pair"; },
 *                          { type = "Resize"; keys = ["img_a", "img_b"];
 *                            scale = [286, 286]; interpolation = "bicubic"; },
 *                          ... ); };
 *
 * The pipeline list is read by the data layer's engine (duet_pipeline_read):
 * every key of every step is read (or refused with its file and line), so
 * a typo or an option duet does not implement is an error, never ignored. */
#include "registry/registry_data.h"

#include <stdio.h>
#include <string.h>

static int build_translation(duet_config *d, const char *path, bool paired, duet_dataset **out) {
    duet_translation_opts o = {0};
    o.paired = paired;
    DUET_TRY(duet_config_get_string(d, "dataroot", &o.dataroot));
    DUET_TRY(duet_config_get_bool_or(d, "test_mode", false, &o.test_mode));
    int64_t max_pixels = DUET_IMAGE_MAX_PIXELS_DEFAULT;
    DUET_TRY(duet_config_get_int_in_or(d, "max_image_pixels", DUET_IMAGE_MAX_PIXELS_DEFAULT, 0,
                                       INT64_MAX, &max_pixels));
    DUET_TRY(duet_image_pixel_limit(max_pixels, &o.max_pixels));
    duet_pipeline_spec spec = duet_translation_pipeline_spec(paired);
    duet_pipeline *p = NULL;
    DUET_TRY(duet_pipeline_read(d, path, &spec, &p));
    o.pipeline = p;
    int rc = duet_translation_dataset_create(&o, out);
    duet_pipeline_destroy(p);
    return rc;
}

int duet__translation_infer_input(duet_config *cfg, const char *key, const char *image,
                                  int64_t max_pixels, duet_tensor **out) {
    *out = NULL;
    static const char path[] = "data.val";
    if (strcmp(key, "img_a") != 0 && strcmp(key, "img_b") != 0)
        return duet__error(DUET_EINVAL, "infer: the model takes '%s', not an image of a "
                           "translation sample (img_a, img_b)", key);
    if (!duet_config_has(cfg, path))
        return duet__error(DUET_ECONFIG, "%s: the model translates '%s' images, and infer "
                           "prepares them with %s.pipeline (as duet test does); the config "
                           "has no %s", duet_config_name(cfg), key, path, path);
    duet_config *d = NULL;
    DUET_TRY(duet_config_sub(cfg, path, &d));
    const char *type = NULL;
    int rc = duet_config_get_string(d, "type", &type);
    bool paired = false;
    if (rc == DUET_OK) {
        paired = strcmp(type, "GenerationPairedDataset") == 0;
        if (!paired && strcmp(type, "GenerationUnpairedDataset") != 0) {
            char *where = NULL;
            rc = duet_config_where(d, "type", &where);
            if (rc == DUET_OK)
                rc = duet__error(DUET_ECONFIG, "%s: %s.type is \"%s\"; infer for a model that "
                                 "translates '%s' reads the pipeline of a "
                                 "GenerationPairedDataset or GenerationUnpairedDataset", where,
                                 path, type, key);
            free(where);
        }
    }
    duet_pipeline *p = NULL;
    duet_pipeline_spec spec = duet_translation_pipeline_spec(paired);
    if (rc == DUET_OK) rc = duet_pipeline_read(d, path, &spec, &p);
    if (rc == DUET_OK) rc = duet_translation_one_image(p, key, image, max_pixels, out);
    duet_pipeline_destroy(p);
    duet_config_destroy(d);
    return rc;
}

int duet__build_generation_paired(duet_config *d, const char *path, bool train,
                                  duet_dataset **out) {
    (void)train; /* test_mode says which folder, as in MMEditing */
    return build_translation(d, path, true, out);
}

int duet__build_generation_unpaired(duet_config *d, const char *path, bool train,
                                    duet_dataset **out) {
    (void)train;
    return build_translation(d, path, false, out);
}
