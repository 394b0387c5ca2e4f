/* MMEditing's super-resolution datasets from their config groups:
 * SRFolderGTDataset, SRFolderDataset, SRAnnotationDataset, SRLmdbDataset
 * (LoadImageFromFile with io_backend "lmdb"), and the
 * RepeatDataset wrapper MMEditing's SR configs put around them, with the
 * `pipeline` list written as MMEditing writes it (or duet's flat keys:
 * gt_patch_size, use_hflip, use_vflip, use_transpose).
 *
 * The pipeline list is read by the data layer's engine (duet_pipeline_read);
 * the SR dataset checks that it gives the network RGB values in [0, 1]. */
#include "registry/registry_data.h"

#include <math.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

/* Error at `key` of the config view c: "x.cfg:12: 'key' msg". */
static int bad(duet_config *c, const char *key, const char *msg) {
    return duet_config_error(c, key, "'%s' %s", key, msg);
}

/* SRFolderGTDataset (GT folder, LQ by bicubic), SRFolderDataset (paired
 * folders), SRAnnotationDataset (paired, listed in an annotation file) and
 * SRLmdbDataset (paired LMDB folders, listed in the GT's meta_info.txt). */
static int build_sr(duet_config *d, const char *path, bool train, bool paired, bool annotated,
                    bool lmdb, duet_dataset **out) {
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
    o.scale = (int)scale;
    duet_pipeline *p = NULL;
    if (duet_config_has(d, "pipeline")) {
        duet_pipeline_spec spec = duet_sr_pipeline_spec(&o, train);
        DUET_TRY(duet_pipeline_read(d, path, &spec, &p));
        o.pipeline = p;
    } else if (train) {
        DUET_TRY(duet_config_get_int_in_or(d, "gt_patch_size", o.gt_size, 1, (int64_t)1 << 24,
                                           &gt_size));
        DUET_TRY(duet_config_get_bool_or(d, "use_hflip", true, &o.use_hflip));
        DUET_TRY(duet_config_get_bool_or(d, "use_vflip", true, &o.use_vflip));
        DUET_TRY(duet_config_get_bool_or(d, "use_transpose", true, &o.use_transpose));
    }
    o.gt_size = gt_size;
    int rc = train ? duet_sr_train_dataset_create(&o, out) : duet_sr_val_dataset_create(&o, out);
    duet_pipeline_destroy(p);
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
    return build_sr(d, path, train, false, false, false, out);
}

int duet__build_sr_folder(duet_config *d, const char *path, bool train, duet_dataset **out) {
    return build_sr(d, path, train, true, false, false, out);
}

int duet__build_sr_annotation(duet_config *d, const char *path, bool train,
                              duet_dataset **out) {
    return build_sr(d, path, train, true, true, false, out);
}

int duet__build_sr_lmdb(duet_config *d, const char *path, bool train, duet_dataset **out) {
    return build_sr(d, path, train, true, false, true, out);
}

/* MMEditing's RepeatDataset: its `dataset` group is the set; `times` is
 * read where every training set's is (data.train.times, build.c). */
int duet__build_repeat(duet_config *d, const char *path, bool train, duet_dataset **out) {
    (void)path;
    if (!duet_config_has(d, "dataset"))
        return duet_config_error(d, "type", "RepeatDataset needs its 'dataset' group");
    return duet_build_dataset(d, "dataset", train, out);
}
