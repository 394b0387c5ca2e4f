/* MMEditing's super-resolution datasets from their config groups:
 * SRFolderGTDataset, SRFolderDataset, SRAnnotationDataset, SRLmdbDataset
 * (LoadImageFromFile with io_backend "lmdb"), and the
 * RepeatDataset wrapper MMEditing's SR configs put around them, with the
 * `pipeline` list written as MMEditing writes it (or duet's flat keys:
 * gt_patch_size, use_hflip, use_vflip, use_transpose).
 *
 * duet's SR pipeline is fixed (duet/data.h: load, random crop on the
 * scale's grid, flips, transpose, values in [0, 1]); a pipeline list is read
 * step by step into its options, and a step it cannot honour (a Normalize,
 * BGR channels, a flip ratio other than 0.5) is an error naming the step,
 * never ignored. */
#include "registry/registry_data.h"

#include <math.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

/* Error at `key` of the config view c: "x.cfg:12: 'key' msg". */
static int bad(duet_config *c, const char *key, const char *msg) {
    return duet_config_error(c, key, "'%s' %s", key, msg);
}

/* `keys` must name lq and gt (in either order), both: duet's SR steps work
 * on the pair. */
static int want_lq_gt(duet_config *c) {
    const char *names[4];
    size_t n = 0;
    DUET_TRY(duet_config_get_string_array(c, "keys", names, 4, &n));
    bool lq = false, gt = false;
    for (size_t i = 0; i < n; i++) {
        lq |= strcmp(names[i], "lq") == 0;
        gt |= strcmp(names[i], "gt") == 0;
    }
    if (n != 2 || !lq || !gt)
        return bad(c, "keys", "must be [\"lq\", \"gt\"]: duet's SR steps work on the pair");
    return DUET_OK;
}

static int ratio_half(duet_config *c, const char *key) {
    double r = 0.5;
    DUET_TRY(duet_config_get_double_or(c, key, 0.5, &r));
    if (r != 0.5) return bad(c, key, "must be 0.5 (duet flips and transposes with p = 0.5)");
    return DUET_OK;
}

typedef struct sr_seen {
    bool load_lq, load_gt, rescale, crop;
    bool bgr_lq, bgr_gt; /* channel order so far: loaded BGR, or swapped once more */
} sr_seen;

/* Normalize: mmcv's imnormalize, (x - mean) / std then BGR<->RGB with
 * to_rgb; duet's SR images stay in [0, 1], so only mean 0 and std 1 (the SR
 * configs' "to_rgb after a BGR load") are honoured. */
static int read_normalize(duet_config *c, sr_seen *seen) {
    double mean[4], std[4];
    size_t nm = 0, ns = 0;
    DUET_TRY(want_lq_gt(c));
    DUET_TRY(duet_config_get_double_array(c, "mean", mean, 4, &nm));
    DUET_TRY(duet_config_get_double_array(c, "std", std, 4, &ns));
    bool identity = nm == 3 && ns == 3;
    for (size_t i = 0; identity && i < 3; i++) identity = mean[i] == 0.0 && std[i] == 1.0;
    if (!identity)
        return bad(c, "mean", "and std must be [0, 0, 0] and [1, 1, 1]: duet's SR networks see "
                   "values in [0, 1]");
    bool to_rgb = false;
    DUET_TRY(duet_config_get_bool_or(c, "to_rgb", true, &to_rgb));
    if (to_rgb) {
        seen->bgr_lq = !seen->bgr_lq;
        seen->bgr_gt = !seen->bgr_gt;
    }
    return DUET_OK;
}

/* LoadImageFromFile's io_backend: "disk" for the folder datasets, "lmdb"
 * with db_path = the LMDB of its key (gt_folder or lq_folder) for
 * SRLmdbDataset, as MMEditing's configs write it. */
static int read_io_backend(duet_config *c, bool lq, const duet_sr_dataset_opts *o) {
    const char *s = NULL;
    DUET_TRY(duet_config_get_string_or(c, "io_backend", "disk", &s));
    if (strcmp(s, "disk") == 0) {
        if (o->lmdb)
            return bad(c, "io_backend", "is \"disk\", but SRLmdbDataset's images are in LMDB: "
                       "use io_backend = \"lmdb\" with db_path = the dataset's folder");
        return DUET_OK;
    }
    if (strcmp(s, "lmdb") != 0)
        return bad(c, "io_backend", "must be \"disk\" (image files) or \"lmdb\" "
                   "(SRLmdbDataset); see docs/div2k.md");
    if (!o->lmdb)
        return bad(c, "io_backend", "is \"lmdb\", which reads SRLmdbDataset's keys, but this "
                   "dataset reads image files: use \"disk\", or type = \"SRLmdbDataset\" with "
                   "gt_folder and lq_folder the .lmdb folders (docs/div2k.md)");
    DUET_TRY(duet_config_get_string(c, "db_path", &s));
    const char *want = lq ? o->lq_dir : o->gt_dir;
    if (strcmp(s, want) != 0)
        return duet_config_error(c, "db_path", "'db_path' \"%s\" is not the dataset's %s "
                                 "\"%s\": duet reads %s from there", s,
                                 lq ? "lq_folder" : "gt_folder", want, lq ? "lq" : "gt");
    return DUET_OK;
}

static int read_sr_step(duet_config *c, const char *type, bool train, duet_sr_dataset_opts *o,
                        sr_seen *seen) {
    const char *s = NULL;
    if (strcmp(type, "LoadImageFromFile") == 0) {
        DUET_TRY(duet_config_get_string(c, "key", &s));
        bool lq = strcmp(s, "lq") == 0;
        if (!lq && strcmp(s, "gt") != 0) return bad(c, "key", "must be \"lq\" or \"gt\"");
        if (lq ? seen->load_lq : seen->load_gt) return bad(c, "key", "is loaded twice");
        *(lq ? &seen->load_lq : &seen->load_gt) = true;
        DUET_TRY(read_io_backend(c, lq, o));
        DUET_TRY(duet_config_get_string_or(c, "flag", "color", &s));
        if (strcmp(s, "color") != 0 && strcmp(s, "unchanged") != 0)
            return bad(c, "flag", "must be \"color\" or \"unchanged\" (duet loads 3-channel RGB)");
        DUET_TRY(duet_config_get_string_or(c, "channel_order", "bgr", &s));
        if (strcmp(s, "rgb") != 0 && strcmp(s, "bgr") != 0)
            return bad(c, "channel_order", "must be \"rgb\" or \"bgr\"");
        *(lq ? &seen->bgr_lq : &seen->bgr_gt) = strcmp(s, "bgr") == 0;
        return DUET_OK;
    }
    if (strcmp(type, "RescaleToZeroOne") == 0) {
        seen->rescale = true;
        return want_lq_gt(c);
    }
    if (strcmp(type, "Normalize") == 0) return read_normalize(c, seen);
    if (strcmp(type, "PairedRandomCrop") == 0) {
        if (!train) return bad(c, "type", "(a random crop) has no place in a validation pipeline");
        DUET_TRY(duet_config_get_int_in(c, "gt_patch_size", 1, (int64_t)1 << 24, &o->gt_size));
        seen->crop = true;
        return DUET_OK;
    }
    if (strcmp(type, "Flip") == 0 || strcmp(type, "RandomTransposeHW") == 0) {
        if (!train) return bad(c, "type", "(a random step) has no place in a validation pipeline");
        DUET_TRY(want_lq_gt(c));
        if (strcmp(type, "RandomTransposeHW") == 0) {
            o->use_transpose = true;
            return ratio_half(c, "transpose_ratio");
        }
        DUET_TRY(ratio_half(c, "flip_ratio"));
        DUET_TRY(duet_config_get_string_or(c, "direction", "horizontal", &s));
        if (strcmp(s, "horizontal") == 0) o->use_hflip = true;
        else if (strcmp(s, "vertical") == 0) o->use_vflip = true;
        else return bad(c, "direction", "must be \"horizontal\" or \"vertical\"");
        return DUET_OK;
    }
    if (strcmp(type, "Collect") == 0 || strcmp(type, "ImageToTensor") == 0) {
        DUET_TRY(want_lq_gt(c));
        if (duet_config_has(c, "meta_keys")) duet_config_mark_used(c, "meta_keys");
        return DUET_OK;
    }
    return bad(c, "type", "is not a step of duet's SR pipeline (LoadImageFromFile, "
               "RescaleToZeroOne, Normalize to RGB, PairedRandomCrop, Flip, RandomTransposeHW, "
               "Collect, ImageToTensor): duet's SR data is RGB in [0, 1] with no other "
               "transform");
}

/* The MMEditing pipeline list of the dataset group d into o. */
static int read_sr_pipeline(duet_config *d, bool train, duet_sr_dataset_opts *o) {
    size_t n = 0;
    DUET_TRY(duet_config_length(d, "pipeline", &n));
    o->use_hflip = o->use_vflip = o->use_transpose = false; /* each on when a step says so */
    sr_seen seen = {false, false, false, false, false, false};
    for (size_t i = 0; i < n; i++) {
        char key[32];
        snprintf(key, sizeof key, "pipeline.[%zu]", i);
        duet_config *c = NULL;
        DUET_TRY(duet_config_sub(d, key, &c));
        const char *type = NULL;
        int rc = duet_config_get_string(c, "type", &type);
        if (rc == DUET_OK) rc = read_sr_step(c, type, train, o, &seen);
        duet_config_destroy(c);
        DUET_TRY(rc);
    }
    if (!seen.load_gt || !seen.rescale || (train && !seen.crop))
        return duet_config_error(d, "pipeline", "'pipeline' lacks %s: duet's SR pipeline loads "
                                 "lq and gt, crops them (training) and scales them to [0, 1]",
                                 !seen.load_gt ? "LoadImageFromFile for gt"
                                 : !seen.rescale ? "RescaleToZeroOne" : "PairedRandomCrop");
    if (seen.bgr_gt || (seen.load_lq && seen.bgr_lq))
        return duet_config_error(d, "pipeline", "'pipeline' gives the network BGR images (a BGR "
                                 "load without a Normalize with to_rgb = true): duet's SR data "
                                 "is RGB; load with channel_order = \"rgb\"");
    return DUET_OK;
}

/* SRFolderGTDataset (GT folder, LQ by bicubic), SRFolderDataset (paired
 * folders), SRAnnotationDataset (paired, listed in an annotation file) and
 * SRLmdbDataset (paired LMDB folders, listed in the GT's meta_info.txt). */
static int build_sr(duet_config *d, bool train, bool paired, bool annotated, bool lmdb,
                    duet_dataset **out) {
    duet_sr_dataset_opts o = duet_sr_dataset_options_default();
    o.lmdb = lmdb;
    int64_t scale = 4, gt_size = o.gt_size;
    DUET_TRY(duet_config_get_string(d, "gt_folder", &o.gt_dir));
    if (paired) DUET_TRY(duet_config_get_string(d, "lq_folder", &o.lq_dir));
    if (annotated) DUET_TRY(duet_config_get_string(d, "ann_file", &o.ann_file));
    if (paired && !lmdb)
        DUET_TRY(duet_config_get_string_or(d, "filename_tmpl", "{}", &o.filename_tmpl));
    if (lmdb) {
        size_t ng = strlen(o.gt_dir), nl = strlen(o.lq_dir);
        if (ng < 5 || strcmp(o.gt_dir + ng - 5, ".lmdb") != 0)
            return bad(d, "gt_folder", "must be an LMDB folder ending in .lmdb, as MMEditing's "
                       "SRLmdbDataset wants (duet prepare div2k --lmdb makes them)");
        if (nl < 5 || strcmp(o.lq_dir + nl - 5, ".lmdb") != 0)
            return bad(d, "lq_folder", "must be an LMDB folder ending in .lmdb, as MMEditing's "
                       "SRLmdbDataset wants (duet prepare div2k --lmdb makes them)");
    }
    DUET_TRY(duet_config_get_int_in_or(d, "scale", 4, 1, DUET_MAX_SCALE, &scale));
    /* An annotated set is MMEditing's tens of thousands of sub-images:
     * read from disk per sample unless asked otherwise. */
    DUET_TRY(duet_config_get_bool_or(d, "lazy", annotated || lmdb, &o.lazy));
    bool test_mode = !train;
    DUET_TRY(duet_config_get_bool_or(d, "test_mode", !train, &test_mode));
    if (test_mode == train)
        return bad(d, "test_mode", train ? "is true, but this is the training set"
                                         : "is false, but this is an evaluation set");
    int64_t max_pixels = DUET_IMAGE_MAX_PIXELS_DEFAULT;
    DUET_TRY(duet_config_get_int_in_or(d, "max_image_pixels", DUET_IMAGE_MAX_PIXELS_DEFAULT, 0,
                                       INT64_MAX, &max_pixels));
    DUET_TRY(duet_image_pixel_limit(max_pixels, &o.max_pixels));
    if (duet_config_has(d, "pipeline")) {
        DUET_TRY(read_sr_pipeline(d, train, &o));
        gt_size = o.gt_size;
    } else if (train) {
        DUET_TRY(duet_config_get_int_in_or(d, "gt_patch_size", o.gt_size, 1, (int64_t)1 << 24,
                                           &gt_size));
        DUET_TRY(duet_config_get_bool_or(d, "use_hflip", true, &o.use_hflip));
        DUET_TRY(duet_config_get_bool_or(d, "use_vflip", true, &o.use_vflip));
        DUET_TRY(duet_config_get_bool_or(d, "use_transpose", true, &o.use_transpose));
    }
    o.scale = (int)scale;
    o.gt_size = gt_size;
    int rc = train ? duet_sr_train_dataset_create(&o, out) : duet_sr_val_dataset_create(&o, out);
    /* A folder or file that is not there yet: most often data not prepared. */
    if (rc == DUET_ENOTFOUND) {
        char *msg = duet__strdup(duet_last_error()); /* the next error overwrites it */
        if (msg != NULL)
            rc = duet__error(rc, "%s (to download and prepare DIV2K, Set5 and Set14 as "
                             "MMEditing's SR configs expect them, see docs/div2k.md)", msg);
        free(msg);
    }
    return rc;
}

int duet__build_sr_folder_gt(duet_config *d, const char *path, bool train, duet_dataset **out) {
    (void)path; /* the config view's keys carry it in their messages */
    return build_sr(d, train, false, false, false, out);
}

int duet__build_sr_folder(duet_config *d, const char *path, bool train, duet_dataset **out) {
    (void)path;
    return build_sr(d, train, true, false, false, out);
}

int duet__build_sr_annotation(duet_config *d, const char *path, bool train,
                              duet_dataset **out) {
    (void)path;
    return build_sr(d, train, true, true, false, out);
}

int duet__build_sr_lmdb(duet_config *d, const char *path, bool train, duet_dataset **out) {
    (void)path;
    return build_sr(d, train, true, false, true, out);
}

/* MMEditing's RepeatDataset: its `dataset` group is the set; `times` is
 * read where every training set's is (data.train.times, build.c). */
int duet__build_repeat(duet_config *d, const char *path, bool train, duet_dataset **out) {
    (void)path;
    if (!duet_config_has(d, "dataset"))
        return duet_config_error(d, "type", "RepeatDataset needs its 'dataset' group");
    return duet_build_dataset(d, "dataset", train, out);
}
