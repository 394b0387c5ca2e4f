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
 * Every key of every step is read or refused with its file and line. */
#include "registry/registry_data.h"

#include <stdio.h>
#include <string.h>

#define MAX_STEPS 32

static int bad(duet_config *c, const char *key, const char *msg) {
    return duet_config_error(c, key, "'%s' %s", key, msg);
}

/* An int or a pair of ints [a, b] (MMEditing's int | tuple[int]). */
static int read_int_or_pair(duet_config *c, const char *key, int64_t def, int64_t lo,
                            int64_t v[2]) {
    if (!duet_config_has(c, key)) {
        v[0] = v[1] = def;
        return DUET_OK;
    }
    if (duet_config_kind(c, key) == DUET_CONFIG_INT) {
        DUET_TRY(duet_config_get_int_in(c, key, lo, 16384, &v[0]));
        v[1] = v[0];
        return DUET_OK;
    }
    double d[3];
    size_t n = 0;
    DUET_TRY(duet_config_get_double_array(c, key, d, 3, &n));
    if (n != 2) return bad(c, key, "must be an integer or two integers [a, b]");
    for (int i = 0; i < 2; i++) {
        if (d[i] != (double)(int64_t)d[i] || d[i] < (double)lo || d[i] > 16384)
            return bad(c, key, "must hold integers in range (at most 16384)");
        v[i] = (int64_t)d[i];
    }
    return DUET_OK;
}

static int read_keys(duet_config *c, bool mask_ok, bool *with_mask) {
    const char *names[8];
    size_t n = 0;
    DUET_TRY(duet_config_get_string_array(c, "keys", names, 8, &n));
    bool gt = false;
    for (size_t i = 0; i < n; i++) {
        if (strcmp(names[i], "gt_img") == 0) gt = true;
        else if (mask_ok && strcmp(names[i], "mask") == 0) *with_mask = true;
        else
            return bad(c, "keys", mask_ok ? "names an image duet does not have here (gt_img, "
                                            "mask)"
                                          : "must be [\"gt_img\"] (duet's inpainting pipeline "
                                            "transforms the ground truth here)");
    }
    if (!gt) return bad(c, "keys", "must name \"gt_img\"");
    return DUET_OK;
}

static int read_mask(duet_config *c, duet_mask_opts *m) {
    const char *mode = NULL;
    DUET_TRY(duet_config_get_string_or(c, "mask_mode", "bbox", &mode));
    duet_mask_mode mm;
    if (strcmp(mode, "bbox") == 0) mm = DUET_MASK_BBOX;
    else if (strcmp(mode, "irregular") == 0) mm = DUET_MASK_IRREGULAR;
    else if (strcmp(mode, "set") == 0) mm = DUET_MASK_SET;
    else if (strcmp(mode, "file") == 0) mm = DUET_MASK_FILE;
    else return bad(c, "mask_mode", "is not one duet has (bbox, irregular, set, file)");
    *m = duet_mask_options_default(mm);
    if (!duet_config_has(c, "mask_config")) {
        if (mm == DUET_MASK_SET)
            return bad(c, "mask_mode", "= \"set\" needs mask_config.mask_list_file and prefix");
        return DUET_OK;
    }
    duet_config *k = NULL;
    DUET_TRY(duet_config_sub(c, "mask_config", &k));
    int64_t v[2];
    int rc = DUET_OK;
    if (mm == DUET_MASK_BBOX || mm == DUET_MASK_IRREGULAR) {
        rc = read_int_or_pair(k, "img_shape", 256, 1, v);
        m->img_h = v[0], m->img_w = v[1];
    }
    if (rc == DUET_OK && mm == DUET_MASK_BBOX) {
        rc = read_int_or_pair(k, "max_bbox_shape", 128, 1, m->max_bbox);
        if (rc == DUET_OK) rc = read_int_or_pair(k, "max_bbox_delta", 40, 0, m->max_delta);
        if (rc == DUET_OK) rc = read_int_or_pair(k, "min_margin", 20, 0, m->min_margin);
    }
    if (rc == DUET_OK && mm == DUET_MASK_IRREGULAR) {
        /* an int n is the range [n, n + 1), as MMEditing's */
        int64_t dv[3][2] = {{4, 8}, {10, 100}, {10, 40}};
        const char *keys[3] = {"num_vertices", "length_range", "brush_width"};
        int64_t *dst[3] = {m->num_vertices, m->length_range, m->brush_width};
        for (int i = 0; i < 3 && rc == DUET_OK; i++) {
            if (duet_config_kind(k, keys[i]) == DUET_CONFIG_INT) {
                rc = duet_config_get_int_in(k, keys[i], 0, 16384, &dst[i][0]);
                dst[i][1] = dst[i][0] + 1;
            } else if (duet_config_has(k, keys[i])) {
                rc = read_int_or_pair(k, keys[i], 0, 0, dst[i]);
            } else {
                dst[i][0] = dv[i][0], dst[i][1] = dv[i][1];
            }
        }
        if (rc == DUET_OK)
            rc = duet_config_get_double_in_or(k, "max_angle", 4.0, 1e-9, 1e6, &m->max_angle);
        if (rc == DUET_OK && duet_config_has(k, "area_ratio_range")) {
            double d[3];
            size_t n = 0;
            rc = duet_config_get_double_array(k, "area_ratio_range", d, 3, &n);
            if (rc == DUET_OK && n != 2)
                rc = bad(k, "area_ratio_range", "must be two numbers [min, max]");
            if (rc == DUET_OK) m->area_ratio[0] = d[0], m->area_ratio[1] = d[1];
        }
    }
    if (rc == DUET_OK && mm == DUET_MASK_SET) {
        const char *s = NULL;
        rc = duet_config_get_string(k, "mask_list_file", &m->mask_list_file);
        if (rc == DUET_OK) rc = duet_config_get_string(k, "prefix", &m->prefix);
        if (rc == DUET_OK) rc = duet_config_get_string_or(k, "io_backend", "disk", &s);
        if (rc == DUET_OK && strcmp(s, "disk") != 0)
            rc = bad(k, "io_backend", "must be \"disk\" (duet reads files)");
        if (rc == DUET_OK) rc = duet_config_get_string_or(k, "flag", "unchanged", &s);
        if (rc == DUET_OK && duet_config_has(k, "file_client_kwargs"))
            rc = duet_config_mark_used(k, "file_client_kwargs");
    }
    if (rc == DUET_OK) {
        rc = duet_mask_options_check(m);
        if (rc != DUET_OK) {
            char *msg = duet__strdup(duet_last_error());
            rc = duet_config_error(c, "mask_config", "'mask_config': %s",
                                   msg ? msg : "invalid mask options");
            free(msg);
        }
    }
    duet_config_destroy(k);
    return rc;
}

static int read_step(duet_config *c, const char *type, duet_mask_opts *mask, bool *has_mask,
                     duet_istep *st) {
    bool with_mask = false;
    if (strcmp(type, "LoadImageFromFile") == 0) {
        const char *s = NULL;
        bool keep = false;
        st->kind = DUET_ISTEP_LOAD;
        DUET_TRY(duet_config_get_string_or(c, "key", "gt", &s));
        if (strcmp(s, "gt_img") != 0)
            return bad(c, "key", "must be \"gt_img\" (ImgInpaintingDataset's image)");
        DUET_TRY(duet_config_get_string_or(c, "io_backend", "disk", &s));
        if (strcmp(s, "disk") != 0) return bad(c, "io_backend", "must be \"disk\"");
        DUET_TRY(duet_config_get_string_or(c, "flag", "color", &s));
        if (strcmp(s, "color") != 0) return bad(c, "flag", "must be \"color\"");
        DUET_TRY(duet_config_get_bool_or(c, "save_original_img", false, &keep));
        DUET_TRY(duet_config_get_string_or(c, "channel_order", "bgr", &s));
        if (strcmp(s, "bgr") != 0 && strcmp(s, "rgb") != 0)
            return bad(c, "channel_order", "must be \"bgr\" or \"rgb\"");
        st->bgr = strcmp(s, "bgr") == 0;
        return DUET_OK;
    }
    if (strcmp(type, "LoadMask") == 0) {
        st->kind = DUET_ISTEP_LOAD_MASK;
        *has_mask = true;
        return read_mask(c, mask);
    }
    if (strcmp(type, "GetMaskedImage") == 0) {
        const char *s = NULL;
        st->kind = DUET_ISTEP_MASKED;
        DUET_TRY(duet_config_get_string_or(c, "img_name", "gt_img", &s));
        if (strcmp(s, "gt_img") != 0) return bad(c, "img_name", "must be \"gt_img\"");
        DUET_TRY(duet_config_get_string_or(c, "mask_name", "mask", &s));
        if (strcmp(s, "mask") != 0) return bad(c, "mask_name", "must be \"mask\"");
        return DUET_OK;
    }
    if (strcmp(type, "Collect") == 0 || strcmp(type, "ImageToTensor") == 0 ||
        strcmp(type, "ToTensor") == 0) {
        static const char *const known[] = {"gt_img", "masked_img", "mask", "mask_bbox",
                                            "gt_img_path", NULL};
        st->kind = DUET_ISTEP_FORMAT;
        const char *names[8];
        size_t n = 0;
        for (int pass = 0; pass < 2; pass++) {
            const char *key = pass ? "meta_keys" : "keys";
            if (pass && !duet_config_has(c, key)) break;
            DUET_TRY(duet_config_get_string_array(c, key, names, 8, &n));
            for (size_t i = 0; i < n; i++) {
                bool ok = false;
                for (const char *const *k = known; *k; k++) ok |= strcmp(*k, names[i]) == 0;
                if (!ok)
                    return bad(c, key, "names a key duet's inpainting samples do not have "
                                       "(gt_img, masked_img, mask, mask_bbox, gt_img_path)");
            }
        }
        if (strcmp(type, "ImageToTensor") == 0) {
            bool f = true;
            DUET_TRY(duet_config_get_bool_or(c, "to_float32", true, &f));
        }
        return DUET_OK;
    }
    if (strcmp(type, "Flip") == 0) {
        const char *d = NULL;
        st->kind = DUET_ISTEP_FLIP;
        DUET_TRY(read_keys(c, true, &with_mask));
        st->flip_mask = with_mask;
        DUET_TRY(duet_config_get_double_in_or(c, "flip_ratio", 0.5, 0.0, 1.0, &st->flip_ratio));
        DUET_TRY(duet_config_get_string_or(c, "direction", "horizontal", &d));
        if (strcmp(d, "horizontal") != 0 && strcmp(d, "vertical") != 0)
            return bad(c, "direction", "must be \"horizontal\" or \"vertical\"");
        st->vertical = strcmp(d, "vertical") == 0;
        return DUET_OK;
    }
    DUET_TRY(read_keys(c, false, &with_mask));
    if (strcmp(type, "Crop") == 0) {
        int64_t hw[2];
        bool pad = false;
        st->kind = DUET_ISTEP_CROP;
        DUET_TRY(read_int_or_pair(c, "crop_size", 0, 1, hw)); /* (h, w) */
        if (!duet_config_has(c, "crop_size")) return bad(c, "crop_size", "is required");
        st->height = hw[0], st->width = hw[1];
        DUET_TRY(duet_config_get_bool_or(c, "random_crop", true, &st->random_crop));
        DUET_TRY(duet_config_get_bool_or(c, "is_pad_zeros", false, &pad));
        if (pad) return bad(c, "is_pad_zeros", "= true is not supported");
        return DUET_OK;
    }
    if (strcmp(type, "Resize") == 0) {
        int64_t hw[2];
        bool keep = false;
        const char *s = NULL;
        st->kind = DUET_ISTEP_RESIZE;
        if (duet_config_kind(c, "scale") != DUET_CONFIG_ARRAY)
            return bad(c, "scale", "must be the output size [h, w] (MMEditing's Resize "
                                   "passes it to mmcv.imresize, which reads (w, h))");
        DUET_TRY(read_int_or_pair(c, "scale", 0, 1, hw));
        /* mmcv.imresize takes the tuple as (w, h) */
        st->width = hw[0], st->height = hw[1];
        DUET_TRY(duet_config_get_bool_or(c, "keep_ratio", false, &keep));
        if (keep) return bad(c, "keep_ratio", "= true is not supported");
        DUET_TRY(duet_config_get_string_or(c, "interpolation", "bilinear", &s));
        if (strcmp(s, "bilinear") != 0 && strcmp(s, "bicubic") != 0)
            return bad(c, "interpolation", "must be \"bilinear\" or \"bicubic\"");
        st->cubic = strcmp(s, "bicubic") == 0;
        return DUET_OK;
    }
    if (strcmp(type, "RescaleToZeroOne") == 0) {
        st->kind = DUET_ISTEP_RESCALE;
        return DUET_OK;
    }
    if (strcmp(type, "Normalize") == 0) {
        double m[4], s[4];
        size_t nm = 0, ns = 0;
        bool save = false;
        st->kind = DUET_ISTEP_NORMALIZE;
        DUET_TRY(duet_config_get_double_array(c, "mean", m, 4, &nm));
        DUET_TRY(duet_config_get_double_array(c, "std", s, 4, &ns));
        if (nm != 3 && nm != 1) return bad(c, "mean", "must have 3 values (or 1)");
        if (ns != 3 && ns != 1) return bad(c, "std", "must have 3 values (or 1)");
        for (int i = 0; i < 3; i++) {
            st->mean[i] = (float)m[nm == 1 ? 0 : i];
            st->std[i] = (float)s[ns == 1 ? 0 : i];
            if (st->std[i] == 0) return bad(c, "std", "must not hold 0");
        }
        DUET_TRY(duet_config_get_bool_or(c, "to_rgb", false, &st->to_rgb));
        DUET_TRY(duet_config_get_bool_or(c, "save_original", false, &save));
        return DUET_OK;
    }
    return bad(c, "type", "is not an inpainting pipeline step duet has (LoadImageFromFile, "
                          "LoadMask, Crop, Resize, Flip, RescaleToZeroOne, Normalize, "
                          "GetMaskedImage, Collect, ImageToTensor, ToTensor)");
}

static int read_pipeline(duet_config *d, const char *path, duet_mask_opts *mask,
                         duet_istep steps[MAX_STEPS], size_t *nsteps) {
    size_t n = 0;
    if (duet_config_kind(d, "pipeline") != DUET_CONFIG_LIST)
        return duet_config_error(d, "pipeline", "%s.pipeline must be a list of steps ( {type "
                                 "= \"...\"; ...}, ... ) as in MMEditing's configs", path);
    DUET_TRY(duet_config_length(d, "pipeline", &n));
    if (n == 0 || n > MAX_STEPS)
        return duet_config_error(d, "pipeline", "%s.pipeline has %zu steps (1 to %d)", path, n,
                                 MAX_STEPS);
    memset(steps, 0, sizeof(duet_istep) * MAX_STEPS);
    bool has_mask = false;
    *mask = duet_mask_options_default(DUET_MASK_BBOX);
    for (size_t i = 0; i < n; i++) {
        char key[32];
        snprintf(key, sizeof key, "pipeline.[%zu]", i);
        duet_config *c = NULL;
        DUET_TRY(duet_config_sub(d, key, &c));
        const char *type = NULL;
        int rc = duet_config_get_string(c, "type", &type);
        if (rc == DUET_OK) {
            char *where = NULL;
            rc = duet_config_where(c, "type", &where);
            if (rc == DUET_OK)
                duet__label_set(steps[i].where, sizeof steps[i].where, "%s: %s.%s (%s)", where,
                                path, key, type);
            free(where);
            if (rc == DUET_OK) rc = read_step(c, type, mask, &has_mask, &steps[i]);
        }
        duet_config_destroy(c);
        DUET_TRY(rc);
    }
    *nsteps = n;
    return DUET_OK;
}

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
    duet_istep steps[MAX_STEPS];
    DUET_TRY(read_pipeline(d, path, &o.mask, steps, &o.nsteps));
    o.steps = steps;
    return duet_inpainting_dataset_create(&o, out);
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
    duet_istep steps[MAX_STEPS];
    duet_mask_opts m;
    size_t n = 0;
    int rc = read_pipeline(d, path, &m, steps, &n);
    duet_config_destroy(d);
    DUET_TRY(rc);
    return duet_inpainting_one_image(steps, n, image, mask, max_pixels, out);
}
