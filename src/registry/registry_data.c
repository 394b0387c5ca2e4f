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
 * Every key of every step is read (or refused with its file and line), so
 * a typo or an option duet does not implement is an error, never ignored. */
#include "registry/registry_data.h"

#include <stdio.h>
#include <string.h>


#define MAX_STEPS 32

/* Error for a bad value at `key` of a step: "x.cfg:12: data.train.pipeline.[1].key: ...". */
static int bad(duet_config *c, const char *key, const char *fmt, const char *value) {
    char *msg = duet__strf(fmt, value);
    if (msg == NULL) return duet__error(DUET_ENOMEM, "config: out of memory for a message");
    int rc = duet_config_error(c, key, "'%s' %s", key, msg);
    free(msg);
    return rc;
}

static int read_string_in(duet_config *c, const char *key, const char *def,
                          const char *const *allowed, const char *hint, const char **out) {
    DUET_TRY(duet_config_get_string_or(c, key, def, out));
    for (const char *const *a = allowed; *a != NULL; a++)
        if (strcmp(*a, *out) == 0) return DUET_OK;
    /* hint is one of this file's literals: no '%' of its own. */
    char *fmt = duet__strf("= \"%%s\" is not supported (%s)", hint);
    if (fmt == NULL) return duet__error(DUET_ENOMEM, "config: out of memory");
    int rc = bad(c, key, fmt, *out);
    free(fmt);
    return rc;
}

static int slot_of(const char *name) {
    if (strcmp(name, "img_a") == 0) return DUET_TSLOT_A;
    if (strcmp(name, "img_b") == 0) return DUET_TSLOT_B;
    if (strcmp(name, "pair") == 0) return DUET_TSLOT_PAIR;
    return -1;
}

static int read_keys(duet_config *c, duet_tstep *st) {
    const char *names[8];
    size_t n = 0;
    DUET_TRY(duet_config_get_string_array(c, "keys", names, 8, &n));
    if (n == 0 || n > 2) return bad(c, "keys", "%smust name 1 or 2 images (img_a, img_b)", "");
    for (size_t i = 0; i < n; i++) {
        int id = slot_of(names[i]);
        if (id < 0) return bad(c, "keys", "names \"%s\", not an image (img_a, img_b)", names[i]);
        for (size_t j = 0; j < i; j++)
            if (st->keys[j] == id) return bad(c, "keys", "names \"%s\" twice", names[i]);
        st->keys[i] = id;
    }
    st->nkeys = (int)n;
    return DUET_OK;
}

/* A pair of positive ints, as MMEditing's (h, w) / (w, h) tuples. */
static int read_pair(duet_config *c, const char *key, int64_t lo, int64_t v[2]) {
    double d[3];
    size_t n = 0;
    if (duet_config_kind(c, key) == DUET_CONFIG_FLOAT)
        return bad(c, key, "%smust be two integers [a, b] (a scale factor is not supported)",
                   "");
    DUET_TRY(duet_config_get_double_array(c, key, d, 3, &n));
    if (n != 2) return bad(c, key, "%smust be two integers [a, b]", "");
    for (int i = 0; i < 2; i++) {
        if (d[i] != (double)(int64_t)d[i] || d[i] < (double)lo || d[i] > 16384)
            return bad(c, key, "%smust hold integers in the range the step allows (>= 1 for "
                       "sizes, >= 0 for positions, at most 16384)", "");
        v[i] = (int64_t)d[i];
    }
    return DUET_OK;
}

static const char *const only_disk[] = {"disk", NULL};
static const char *const only_color[] = {"color", NULL};
static const char *const orders[] = {"bgr", "rgb", NULL};

static int read_load(duet_config *c, bool paired, duet_tstep *st) {
    const char *s = NULL, *key = NULL;
    bool keep = false;
    DUET_TRY(read_string_in(c, "io_backend", "disk", only_disk, "duet reads files: \"disk\"", &s));
    DUET_TRY(read_string_in(c, "flag", "color", only_color, "duet loads 3-channel images: "
                            "\"color\"", &s));
    DUET_TRY(duet_config_get_bool_or(c, "save_original_img", false, &keep)); /* ori_* unused */
    /* MMEditing's default key, 'gt', names no image of these datasets. */
    DUET_TRY(duet_config_get_string_or(c, "key", "gt", &key));
    if (paired) {
        if (strcmp(key, "pair") != 0)
            return bad(c, "key", "= \"%s\": LoadPairedImageFromFile reads the dataset's "
                       "pair_path: key = \"pair\"", key);
        st->kind = DUET_TSTEP_LOAD_PAIRED;
        st->keys[0] = DUET_TSLOT_PAIR;
        st->bgr = true; /* mmcv.imfrombytes' default, whatever channel_order says */
    } else {
        int id = slot_of(key);
        if (id != DUET_TSLOT_A && id != DUET_TSLOT_B)
            return bad(c, "key", "= \"%s\": give \"img_a\" or \"img_b\"", key);
        DUET_TRY(read_string_in(c, "channel_order", "bgr", orders, "\"bgr\" or \"rgb\"", &s));
        st->kind = DUET_TSTEP_LOAD;
        st->keys[0] = id;
        st->bgr = strcmp(s, "bgr") == 0;
    }
    st->nkeys = 1;
    return DUET_OK;
}

static int read_step(duet_config *c, const char *type, bool paired, duet_tstep *st) {
    if (strcmp(type, "LoadImageFromFile") == 0 || strcmp(type, "LoadPairedImageFromFile") == 0) {
        if ((strcmp(type, "LoadPairedImageFromFile") == 0) != paired)
            return bad(c, "type", "= \"%s\" belongs to the other dataset (paired: "
                       "LoadPairedImageFromFile with key \"pair\"; unpaired: "
                       "LoadImageFromFile with key \"img_a\" and \"img_b\")", type);
        return read_load(c, paired, st);
    }
    DUET_TRY(read_keys(c, st));
    if (strcmp(type, "Resize") == 0) {
        static const char *const interp[] = {"bicubic", NULL};
        const char *s = NULL;
        bool keep_ratio = false;
        int64_t wh[2];
        st->kind = DUET_TSTEP_RESIZE;
        /* mmcv.imresize takes the tuple as (w, h); MMEditing passes it on as is. */
        DUET_TRY(read_pair(c, "scale", 1, wh));
        st->width = wh[0];
        st->height = wh[1];
        DUET_TRY(duet_config_get_bool_or(c, "keep_ratio", false, &keep_ratio));
        if (keep_ratio) return bad(c, "keep_ratio", "= true%s is not supported", "");
        return read_string_in(c, "interpolation", "bilinear", interp, "duet has OpenCV's "
                              "\"bicubic\"; MMEditing's default is \"bilinear\"", &s);
    }
    if (strcmp(type, "FixedCrop") == 0 || strcmp(type, "Crop") == 0) {
        int64_t hw[2];
        DUET_TRY(read_pair(c, "crop_size", 1, hw)); /* (h, w) */
        st->height = hw[0];
        st->width = hw[1];
        if (type[0] == 'F') {
            st->kind = DUET_TSTEP_FIXED_CROP;
            if (duet_config_has(c, "crop_pos")) {
                int64_t xy[2];
                DUET_TRY(read_pair(c, "crop_pos", 0, xy)); /* (x, y) */
                st->has_pos = true;
                st->pos_x = xy[0];
                st->pos_y = xy[1];
            }
        } else {
            st->kind = DUET_TSTEP_CROP;
            DUET_TRY(duet_config_get_bool_or(c, "random_crop", true, &st->random_crop));
        }
        return DUET_OK;
    }
    if (strcmp(type, "Flip") == 0) {
        static const char *const dirs[] = {"horizontal", "vertical", NULL};
        const char *d = NULL;
        st->kind = DUET_TSTEP_FLIP;
        DUET_TRY(duet_config_get_double_in_or(c, "flip_ratio", 0.5, 0.0, 1.0, &st->flip_ratio));
        DUET_TRY(read_string_in(c, "direction", "horizontal", dirs,
                                "\"horizontal\" or \"vertical\"", &d));
        st->vertical = strcmp(d, "vertical") == 0;
        return DUET_OK;
    }
    if (strcmp(type, "RescaleToZeroOne") == 0) {
        st->kind = DUET_TSTEP_RESCALE;
        return DUET_OK;
    }
    if (strcmp(type, "Normalize") == 0) {
        double m[4], s[4];
        size_t nm = 0, ns = 0;
        bool save = false;
        st->kind = DUET_TSTEP_NORMALIZE;
        DUET_TRY(duet_config_get_double_array(c, "mean", m, 4, &nm));
        DUET_TRY(duet_config_get_double_array(c, "std", s, 4, &ns));
        if (nm != 3 && nm != 1) return bad(c, "mean", "%smust have 3 values (or 1)", "");
        if (ns != 3 && ns != 1) return bad(c, "std", "%smust have 3 values (or 1)", "");
        for (int i = 0; i < 3; i++) {
            /* np.array(..., dtype=np.float32), broadcast like numpy */
            st->mean[i] = (float)m[nm == 1 ? 0 : i];
            st->std[i] = (float)s[ns == 1 ? 0 : i];
            if (!(st->std[i] > 0) && !(st->std[i] < 0))
                return bad(c, "std", "%smust not hold 0", "");
        }
        DUET_TRY(duet_config_get_bool_or(c, "to_rgb", false, &st->to_rgb));
        DUET_TRY(duet_config_get_bool_or(c, "save_original", false, &save)); /* *_unnormalised */
        return DUET_OK;
    }
    if (strcmp(type, "ImageToTensor") == 0) {
        bool f32 = true;
        st->kind = DUET_TSTEP_TO_TENSOR;
        return duet_config_get_bool_or(c, "to_float32", true, &f32); /* duet's are float */
    }
    if (strcmp(type, "Collect") == 0) {
        const char *mk[4];
        size_t n = 0;
        st->kind = DUET_TSTEP_COLLECT;
        if (duet_config_has(c, "meta_keys"))
            DUET_TRY(duet_config_get_string_array(c, "meta_keys", mk, 4, &n));
        for (size_t i = 0; i < n; i++) {
            if (strcmp(mk[i], "img_a_path") == 0) st->meta_path[0] = true;
            else if (strcmp(mk[i], "img_b_path") == 0) st->meta_path[1] = true;
            else return bad(c, "meta_keys", "names \"%s\" (duet has img_a_path, img_b_path)",
                            mk[i]);
        }
        return DUET_OK;
    }
    return bad(c, "type", "= \"%s\" is not a pipeline step duet has (LoadImageFromFile, "
               "LoadPairedImageFromFile, Resize, FixedCrop, Crop, Flip, RescaleToZeroOne, "
               "Normalize, ImageToTensor, Collect)", type);
}

/* The `pipeline` list of the dataset group d (at `path`) into steps[n]. */
static int read_pipeline(duet_config *d, const char *path, bool paired,
                         duet_tstep steps[MAX_STEPS], size_t *nsteps) {
    size_t n = 0;
    if (duet_config_kind(d, "pipeline") != DUET_CONFIG_LIST) {
        char *where = NULL;
        DUET_TRY(duet_config_where(d, "pipeline", &where));
        int rc = duet__error(DUET_ECONFIG, "%s: %s.pipeline must be a list of steps ( {type = "
                             "\"...\"; ...}, ... ) as in MMEditing's configs", where, path);
        free(where);
        return rc;
    }
    DUET_TRY(duet_config_length(d, "pipeline", &n));
    if (n == 0 || n > MAX_STEPS)
        return duet__error(DUET_ECONFIG, "%s: %s.pipeline has %zu steps (1 to %d)",
                           duet_config_name(d), path, n, MAX_STEPS);
    memset(steps, 0, sizeof(duet_tstep) * MAX_STEPS);
    for (size_t i = 0; i < n; i++) {
        char key[32]; /* "pipeline.[i]": 12 characters and a size_t's 20 digits at most */
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
            if (rc == DUET_OK) rc = read_step(c, type, paired, &steps[i]);
        }
        duet_config_destroy(c);
        DUET_TRY(rc);
    }
    *nsteps = n;
    return DUET_OK;
}

static int build_translation(duet_config *d, const char *path, bool paired, duet_dataset **out) {
    duet_translation_opts o = {0};
    o.paired = paired;
    DUET_TRY(duet_config_get_string(d, "dataroot", &o.dataroot));
    DUET_TRY(duet_config_get_bool_or(d, "test_mode", false, &o.test_mode));
    int64_t max_pixels = DUET_IMAGE_MAX_PIXELS_DEFAULT;
    DUET_TRY(duet_config_get_int_in_or(d, "max_image_pixels", DUET_IMAGE_MAX_PIXELS_DEFAULT, 0,
                                       INT64_MAX, &max_pixels));
    DUET_TRY(duet_image_pixel_limit(max_pixels, &o.max_pixels));
    duet_tstep steps[MAX_STEPS];
    DUET_TRY(read_pipeline(d, path, paired, steps, &o.nsteps));
    o.steps = steps;
    return duet_translation_dataset_create(&o, out);
}

int duet__translation_infer_input(duet_config *cfg, const char *key, const char *image,
                                  int64_t max_pixels, duet_tensor **out) {
    *out = NULL;
    static const char path[] = "data.val";
    const int slot = slot_of(key);
    if (slot != DUET_TSLOT_A && slot != DUET_TSLOT_B)
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
    duet_tstep steps[MAX_STEPS];
    size_t n = 0;
    if (rc == DUET_OK) rc = read_pipeline(d, path, paired, steps, &n);
    if (rc == DUET_OK)
        rc = duet_translation_one_image(steps, n, paired, slot, image, max_pixels, out);
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
