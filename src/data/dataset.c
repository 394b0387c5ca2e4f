/* Super-resolution datasets (random-crop training set, whole-image
 * validation set, from a GT folder and optionally a paired LQ folder, an
 * annotation file or LMDBs; their samples made by a pipeline run by the
 * engine, pipeline.c) and the repeat wrapper. After creation a dataset is
 * read-only, so duet_dataset_get may run on several threads at once. */
#include "duet/data.h"
#include "data/data_internal.h"
#include "data/pipeline.h"

#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

enum ds_kind { DS_SR_TRAIN, DS_SR_VAL, DS_REPEAT, DS_CUSTOM };

typedef struct sr_item {
    char *name;    /* file name in gt_dir (and lq_dir) */
    char *gt_path;
    char *lq_path; /* NULL without lq_dir */
    duet_image *gt; /* cached pixels; NULL when lazy */
    duet_image *lq;
} sr_item;

struct duet_dataset {
    enum ds_kind kind;
    int64_t size;
    int scale;
    /* SR sets */
    duet_sr_dataset_opts opts; /* gt_dir / lq_dir point at the copies below */
    char *gt_dir;
    char *lq_dir;
    char *ann_file;
    duet__lmdb *gt_db; /* SRLmdbDataset: the stores; items' paths are keys */
    duet__lmdb *lq_db;
    sr_item *items;
    duet_pipeline *pipeline;
    /* repeat */
    duet_dataset *inner;
    int64_t times;
    /* a dataset of one's own (duet_dataset_create) */
    const duet_dataset_ops *ops;
    void *impl;
};

static int custom_get_sr(const duet_dataset *ds, const duet_dataset *d, int64_t index,
                         uint64_t seed, int64_t epoch, duet_sample *out);

duet_sr_dataset_opts duet_sr_dataset_options_default(void) {
    duet_sr_dataset_opts o;
    memset(&o, 0, sizeof(o));
    o.scale = 4;
    o.gt_size = 128;
    o.use_hflip = true;
    o.use_vflip = true;
    o.use_transpose = true;
    o.lazy = false;
    o.max_pixels = DUET_IMAGE_MAX_PIXELS_DEFAULT;
    return o;
}

void duet_sample_clear(duet_sample *s) {
    if (s == NULL) return;
    duet_tensor_release(s->lq);
    duet_tensor_release(s->gt);
    memset(s, 0, sizeof(*s));
}

/* ---- folder listing ------------------------------------------------------ */

static bool is_image_name(const char *name) {
    const char *dot = strrchr(name, '.');
    if (dot == NULL || name[0] == '.') return false;
    return strcasecmp(dot, ".png") == 0 || strcasecmp(dot, ".jpg") == 0 ||
           strcasecmp(dot, ".jpeg") == 0;
}

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

void duet__free_names(char **names, int64_t n) {
    for (int64_t i = 0; i < n; i++) free(names[i]);
    free(names);
}

/* Image file names (regular files) of `dir`, sorted by strcmp. */
int duet__list_images(const char *dir, char ***out, int64_t *count) {
    *out = NULL;
    *count = 0;
    DIR *d = opendir(dir);
    if (d == NULL)
        return duet__error(errno == ENOENT ? DUET_ENOTFOUND : DUET_EIO,
                           "cannot open image folder %s: %s", dir, strerror(errno));
    char **names = NULL;
    int64_t n = 0, cap = 0;
    int rc = DUET_OK;
    struct dirent *e;
    while (rc == DUET_OK && (e = readdir(d)) != NULL) {
        if (!is_image_name(e->d_name)) continue;
        char *path = duet__path_join(dir, e->d_name);
        struct stat sb;
        bool regular = path != NULL && stat(path, &sb) == 0 && S_ISREG(sb.st_mode);
        free(path);
        if (!regular) continue;
        if (n == cap) {
            cap = cap ? cap * 2 : 64;
            char **bigger = realloc(names, sizeof(char *) * (size_t)cap);
            if (bigger == NULL) {
                rc = duet__error(DUET_ENOMEM, "listing %s: out of memory", dir);
                break;
            }
            names = bigger;
        }
        names[n] = strdup(e->d_name);
        if (names[n] == NULL) rc = duet__error(DUET_ENOMEM, "listing %s: out of memory", dir);
        else n++;
    }
    closedir(d);
    if (rc != DUET_OK) {
        duet__free_names(names, n);
        return rc;
    }
    if (n == 0) {
        free(names);
        return duet__error(DUET_ENOTFOUND, "no images (*.png, *.jpg, *.jpeg) in %s", dir);
    }
    qsort(names, (size_t)n, sizeof(char *), cmp_str);
    *out = names;
    *count = n;
    return DUET_OK;
}

/* The GT names of an annotation file: each non-blank line's text up to its
 * first space (MMEditing's line.split(' ')[0]), in the file's order. */
static int read_annotation(const char *path, char ***out, int64_t *count) {
    *out = NULL;
    *count = 0;
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return duet__error(errno == ENOENT ? DUET_ENOTFOUND : DUET_EIO,
                           "cannot open annotation file %s: %s", path, strerror(errno));
    char **names = NULL, *line = NULL;
    size_t lcap = 0;
    int64_t n = 0, cap = 0, lineno = 0;
    int rc = DUET_OK;
    ssize_t len;
    while (rc == DUET_OK && (len = getline(&line, &lcap, f)) >= 0) {
        lineno++;
        while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r')) line[--len] = '\0';
        if (strspn(line, " \t") == (size_t)len) continue; /* blank */
        size_t nl = strcspn(line, " ");
        if (nl == 0 || memchr(line, '\0', (size_t)len) != NULL) {
            rc = duet__error(DUET_EFORMAT, "%s:%lld: no image name at the start of the line "
                             "(want \"name.png (h,w,c)\")", path, (long long)lineno);
            break;
        }
        if (n == cap) {
            cap = cap ? cap * 2 : 256;
            char **bigger = realloc(names, sizeof(char *) * (size_t)cap);
            if (bigger == NULL) {
                rc = duet__error(DUET_ENOMEM, "reading %s: out of memory", path);
                break;
            }
            names = bigger;
        }
        names[n] = strndup(line, nl);
        if (names[n] == NULL) rc = duet__error(DUET_ENOMEM, "reading %s: out of memory", path);
        else n++;
    }
    if (rc == DUET_OK && ferror(f)) rc = duet__error(DUET_EIO, "cannot read %s", path);
    free(line);
    fclose(f);
    if (rc == DUET_OK && n == 0)
        rc = duet__error(DUET_ENOTFOUND, "annotation file %s lists no images", path);
    if (rc != DUET_OK) {
        duet__free_names(names, n);
        return rc;
    }
    *out = names;
    *count = n;
    return DUET_OK;
}

/* lq_dir/<tmpl with {} = GT name's basename without extension><extension>
 * (MMEditing's filename_tmpl). */
static char *annotated_lq_path(const char *lq_dir, const char *gt_name, const char *tmpl) {
    const char *base = strrchr(gt_name, '/');
    base = base != NULL ? base + 1 : gt_name;
    const char *dot = strrchr(base, '.');
    size_t stem = dot != NULL && dot != base ? (size_t)(dot - base) : strlen(base);
    const char *ext = base + stem;
    const char *brace = strstr(tmpl, "{}");
    char *name = brace != NULL
                     ? duet__strf("%.*s%.*s%s%s", (int)(brace - tmpl), tmpl, (int)stem, base,
                                  brace + 2, ext)
                     : duet__strf("%s%s", tmpl, ext);
    char *path = name != NULL ? duet__path_join(lq_dir, name) : NULL;
    free(name);
    return path;
}

/* ---- creation ------------------------------------------------------------- */

static int check_pair(const duet_dataset *ds, const sr_item *it, const duet_image *gt,
                      const duet_image *lq) {
    int64_t s = ds->scale;
    if (lq == NULL) {
        if (ds->kind == DS_SR_TRAIN && (gt->height < ds->opts.gt_size ||
                                        gt->width < ds->opts.gt_size))
            return duet__error(DUET_ESHAPE, "%s: %lldx%lld (WxH) is smaller than the %lld "
                               "pixel crop (gt_size)", it->gt_path, (long long)gt->width,
                               (long long)gt->height, (long long)ds->opts.gt_size);
        if (gt->height < s || gt->width < s)
            return duet__error(DUET_ESHAPE, "%s: %lldx%lld (WxH) is smaller than the scale %lld",
                               it->gt_path, (long long)gt->width, (long long)gt->height,
                               (long long)s);
        return DUET_OK;
    }
    if (ds->kind == DS_SR_TRAIN ? (gt->height != lq->height * s || gt->width != lq->width * s)
                                : (gt->height < lq->height * s || gt->width < lq->width * s))
        return duet__error(DUET_ESHAPE, "%s is %lldx%lld (WxH) but its LQ %s is %lldx%lld: "
                           "want the GT %s %lld times the LQ", it->gt_path,
                           (long long)gt->width, (long long)gt->height, it->lq_path,
                           (long long)lq->width, (long long)lq->height,
                           ds->kind == DS_SR_TRAIN ? "exactly" : "at least", (long long)s);
    if (ds->kind == DS_SR_TRAIN && (lq->height * s < ds->opts.gt_size ||
                                    lq->width * s < ds->opts.gt_size))
        return duet__error(DUET_ESHAPE, "%s: %lldx%lld (WxH) is smaller than the %lld pixel "
                           "crop (gt_size)", it->gt_path, (long long)gt->width,
                           (long long)gt->height, (long long)ds->opts.gt_size);
    return DUET_OK;
}

/* An image from an LMDB store: the PNG under `key`, decoded as
 * "PATH[key]" in messages. */
static int load_lmdb(duet__lmdb *db, const char *key, int64_t max_pixels, duet_image **out) {
    void *bytes = NULL;
    size_t n = 0;
    DUET_TRY(duet__lmdb_get(db, key, &bytes, &n));
    char *name = duet__strf("%s[%s]", duet__lmdb_path(db), key);
    int rc = name == NULL ? duet__error(DUET_ENOMEM, "out of memory")
                          : duet_image_decode_limited(bytes, n, name, max_pixels, out);
    free(name);
    free(bytes);
    return rc;
}

static int load_one(const duet_dataset *ds, duet__lmdb *db, const char *path, duet_image **out) {
    return db != NULL ? load_lmdb(db, path, ds->opts.max_pixels, out)
                      : duet_image_load_limited(path, ds->opts.max_pixels, out);
}

/* Loads item i's images (GT, and LQ when paired) and checks their sizes. */
static int load_item(const duet_dataset *ds, const sr_item *it, duet_image **gt,
                     duet_image **lq) {
    *gt = NULL;
    *lq = NULL;
    DUET_TRY(load_one(ds, ds->gt_db, it->gt_path, gt));
    int rc = DUET_OK;
    if (it->lq_path != NULL) rc = load_one(ds, ds->lq_db, it->lq_path, lq);
    if (rc == DUET_OK) rc = check_pair(ds, it, *gt, *lq);
    if (rc != DUET_OK) {
        duet_image_destroy(*gt);
        duet_image_destroy(*lq);
        *gt = *lq = NULL;
    }
    return rc;
}

duet_pipeline_spec duet_sr_pipeline_spec(const duet_sr_dataset_opts *o, bool train) {
    duet_pipeline_spec s = {.scale = o->scale, .lmdb = o->lmdb};
    s.dataset = o->lmdb ? "SRLmdbDataset" : o->ann_file ? "SRAnnotationDataset"
                : o->lq_dir ? "SRFolderDataset" : "SRFolderGTDataset";
    s.path_keys[0] = "gt";
    s.db_paths[0] = o->gt_dir;
    if (o->lq_dir != NULL) {
        s.path_keys[1] = "lq";
        s.db_paths[1] = o->lq_dir;
    } else {
        /* made from the GT: by PairedRandomCrop in training, after the
         * pipeline for validation */
        s.optional_key = "lq";
    }
    (void)train;
    return s;
}

/* A pipeline of one's own must give the network RGB values in [0, 1]
 * (duet's SR networks and metrics take those) and, in training, crop. Its
 * PairedRandomCrop's size is the one the images are checked against. */
static int sr_check_pipeline(duet_dataset *ds, bool train) {
    const duet_pipeline *p = ds->pipeline;
    const char *last = p->n ? p->steps[p->n - 1].where : "pipeline";
    const duet__step *crop = duet__pipeline_find(p, &duet__t_paired_random_crop);
    ds->opts.gt_size = crop ? *(const int64_t *)crop->opts : 0;
    if (train && crop == NULL)
        return duet__error(DUET_ECONFIG, "%s: the pipeline lacks PairedRandomCrop: duet's SR "
                           "training crops lq and gt", last);
    bool gt = false;
    for (int i = 0; i < p->nfinal; i++) gt |= strcmp(p->final[i].key, "gt") == 0;
    if (!gt)
        return duet__error(DUET_ECONFIG, "%s: the pipeline lacks LoadImageFromFile for gt", last);
    for (int i = 0; i < p->nfinal; i++) {
        const duet__pkey_state *k = &p->final[i];
        if (strcmp(k->key, "lq") != 0 && strcmp(k->key, "gt") != 0) continue;
        if (!k->unit)
            return duet__error(DUET_ECONFIG, "%s: the pipeline gives the network '%s' outside "
                               "[0, 1]: duet's SR networks take RescaleToZeroOne's values (a "
                               "Normalize there must have mean 0 and std 1)", last, k->key);
        if (k->bgr)
            return duet__error(DUET_ECONFIG, "%s: the pipeline gives the network BGR images "
                               "('%s': a BGR load without a Normalize with to_rgb = true): "
                               "duet's SR data is RGB; load with channel_order = \"rgb\"",
                               last, k->key);
    }
    return DUET_OK;
}

/* The dataset's pipeline: the options' list, or the one its fields say. */
static int sr_pipeline(duet_dataset *ds, const duet_sr_dataset_opts *o, bool train) {
    if (o->pipeline != NULL) {
        if (o->pipeline->spec.scale != o->scale)
            return duet__error(DUET_EINVAL, "SR dataset: its pipeline was read for scale %d, "
                               "the dataset's is %d", o->pipeline->spec.scale, o->scale);
        ds->pipeline = duet__pipeline_retain(o->pipeline);
        return sr_check_pipeline(ds, train);
    }
    /* switched-off flips still draw (ratio 0), so the crops stay the same */
    const char *keys = "[\"lq\", \"gt\"]";
    duet__str t = {0};
    duet__str_addf(&t, "( { type = \"LoadImageFromFile\"; key = \"gt\"; channel_order = \"rgb\"; },\n");
    if (o->lq_dir != NULL)
        duet__str_addf(&t, "{ type = \"LoadImageFromFile\"; key = \"lq\"; channel_order = "
                       "\"rgb\"; },\n");
    duet__str_addf(&t, "{ type = \"RescaleToZeroOne\"; keys = %s; },\n", keys);
    if (train) {
        duet__str_addf(&t, "{ type = \"PairedRandomCrop\"; gt_patch_size = %lld; },\n",
                       (long long)o->gt_size);
        duet__str_addf(&t, "{ type = \"Flip\"; keys = %s; flip_ratio = %s; direction = "
                       "\"horizontal\"; },\n", keys, o->use_hflip ? "0.5" : "0.0");
        duet__str_addf(&t, "{ type = \"Flip\"; keys = %s; flip_ratio = %s; direction = "
                       "\"vertical\"; },\n", keys, o->use_vflip ? "0.5" : "0.0");
        duet__str_addf(&t, "{ type = \"RandomTransposeHW\"; keys = %s; transpose_ratio = %s; "
                       "},\n", keys, o->use_transpose ? "0.5" : "0.0");
    }
    duet__str_addf(&t, "{ type = \"ImageToTensor\"; keys = %s; },\n", keys);
    duet__str_addf(&t, "{ type = \"Collect\"; keys = %s; } )", keys);
    if (t.failed) {
        duet__str_free(&t);
        return duet__error(DUET_ENOMEM, "SR dataset: out of memory");
    }
    const char *text = duet__str_get(&t);
    duet_sr_dataset_opts disk = *o;
    disk.lmdb = false; /* the dataset reads its images itself: the steps load from it */
    duet_pipeline_spec spec = duet_sr_pipeline_spec(&disk, train);
    int rc = duet_pipeline_parse(text, "<SR dataset>", &spec, &ds->pipeline);
    duet__str_free(&t);
    return rc;
}

static int sr_create(duet_dataset **out, const duet_sr_dataset_opts *opts, enum ds_kind kind) {
    *out = NULL;
    const char *what = kind == DS_SR_TRAIN ? "SR training set" : "SR validation set";
    if (opts == NULL || opts->gt_dir == NULL)
        return duet__error(DUET_EINVAL, "%s: gt_dir is required", what);
    if (opts->scale < 1 || opts->scale > DUET_MAX_SCALE)
        return duet__error(DUET_EINVAL, "%s: scale %d must be in [1, %d]", what, opts->scale,
                           DUET_MAX_SCALE);
    if (kind == DS_SR_TRAIN && opts->pipeline == NULL &&
        (opts->gt_size < opts->scale || opts->gt_size % opts->scale != 0))
        return duet__error(DUET_EINVAL, "%s: gt_size %lld must be a positive multiple of the "
                           "scale %d", what, (long long)opts->gt_size, opts->scale);
    duet_dataset *ds = calloc(1, sizeof(*ds));
    if (ds == NULL) return duet__error(DUET_ENOMEM, "%s: out of memory", what);
    ds->kind = kind;
    ds->scale = opts->scale;
    ds->opts = *opts;
    ds->gt_dir = strdup(opts->gt_dir);
    ds->lq_dir = opts->lq_dir ? strdup(opts->lq_dir) : NULL;
    ds->ann_file = opts->ann_file ? strdup(opts->ann_file) : NULL;
    ds->opts.gt_dir = ds->gt_dir;
    ds->opts.lq_dir = ds->lq_dir;
    ds->opts.ann_file = ds->ann_file;
    ds->opts.filename_tmpl = NULL; /* used below only, not kept */
    if (ds->gt_dir == NULL || (opts->lq_dir && ds->lq_dir == NULL) ||
        (opts->ann_file && ds->ann_file == NULL)) {
        duet_dataset_destroy(ds);
        return duet__error(DUET_ENOMEM, "%s: out of memory", what);
    }
    if (opts->ann_file != NULL && opts->lq_dir == NULL) {
        duet_dataset_destroy(ds);
        return duet__error(DUET_EINVAL, "%s: an annotation file (%s) needs an LQ folder, as "
                           "MMEditing's SRAnnotationDataset", what, opts->ann_file);
    }
    if (opts->lmdb && (opts->lq_dir == NULL || opts->ann_file != NULL)) {
        duet_dataset_destroy(ds);
        return duet__error(DUET_EINVAL, "%s: LMDB data (%s) needs an LQ LMDB and no annotation "
                           "file (the keys are its meta_info.txt's), as MMEditing's "
                           "SRLmdbDataset", what, opts->gt_dir);
    }
    char **names = NULL;
    int64_t n = 0;
    char *meta = opts->lmdb ? duet__path_join(ds->gt_dir, "meta_info.txt") : NULL;
    int rc = opts->lmdb && meta == NULL ? duet__error(DUET_ENOMEM, "out of memory") : DUET_OK;
    if (rc == DUET_OK && opts->lmdb) rc = duet__lmdb_open(ds->gt_dir, &ds->gt_db);
    if (rc == DUET_OK && opts->lmdb) rc = duet__lmdb_open(ds->lq_dir, &ds->lq_db);
    if (rc == DUET_OK)
        rc = opts->lmdb ? read_annotation(meta, &names, &n)
             : opts->ann_file != NULL ? read_annotation(opts->ann_file, &names, &n)
                                      : duet__list_images(ds->gt_dir, &names, &n);
    free(meta);
    if (rc != DUET_OK) {
        duet_dataset_destroy(ds);
        return duet__error_context(rc, "%s", what);
    }
    ds->items = calloc((size_t)n, sizeof(sr_item));
    if (ds->items == NULL) {
        duet__free_names(names, n);
        duet_dataset_destroy(ds);
        return duet__error(DUET_ENOMEM, "%s: out of memory", what);
    }
    ds->size = n;
    for (int64_t i = 0; i < n; i++) ds->items[i].name = names[i]; /* now owned by items */
    free(names);
    rc = sr_pipeline(ds, opts, kind == DS_SR_TRAIN);
    for (int64_t i = 0; i < n && rc == DUET_OK; i++) {
        sr_item *it = &ds->items[i];
        if (opts->lmdb) { /* MMEditing's key: the name up to its first '.' */
            it->gt_path = strndup(it->name, strcspn(it->name, "."));
            it->lq_path = it->gt_path != NULL ? strdup(it->gt_path) : NULL;
            if (it->gt_path == NULL || it->lq_path == NULL)
                rc = duet__error(DUET_ENOMEM, "%s: out of memory", what);
            else if (!opts->lazy)
                rc = load_item(ds, it, &it->gt, &it->lq);
            else if ((rc = duet__lmdb_get(ds->gt_db, it->gt_path, NULL, NULL)) == DUET_OK)
                rc = duet__lmdb_get(ds->lq_db, it->lq_path, NULL, NULL);
            if (rc != DUET_OK && rc != DUET_ENOMEM) {
                char *msg = duet__strdup(duet_last_error());
                rc = duet__error(rc, "%s: %s/meta_info.txt, entry %lld: %s", what, ds->gt_dir,
                                 (long long)(i + 1), msg ? msg : "");
                free(msg);
            }
            continue;
        }
        it->gt_path = duet__path_join(ds->gt_dir, it->name);
        if (ds->lq_dir != NULL)
            it->lq_path = opts->ann_file != NULL || opts->filename_tmpl != NULL
                              ? annotated_lq_path(ds->lq_dir, it->name,
                                                  opts->filename_tmpl ? opts->filename_tmpl : "{}")
                              : duet__path_join(ds->lq_dir, it->name);
        if (it->gt_path == NULL || (ds->lq_dir && it->lq_path == NULL)) {
            rc = duet__error(DUET_ENOMEM, "%s: out of memory", what);
            break;
        }
        struct stat sb;
        if (opts->ann_file != NULL && stat(it->gt_path, &sb) != 0)
            rc = duet__error(DUET_ENOTFOUND, "%s: %s, entry %lld, names %s, which is missing", what,
                             opts->ann_file, (long long)(i + 1), it->gt_path);
        else if (it->lq_path && stat(it->lq_path, &sb) != 0)
            rc = duet__error(DUET_ENOTFOUND, "%s: %s has no LQ image %s (%s)", what, it->gt_path,
                             it->lq_path, opts->ann_file != NULL
                                              ? "the LQ name is filename_tmpl's"
                                              : "paired folders need the same file names");
        else if (!opts->lazy)
            rc = load_item(ds, it, &it->gt, &it->lq);
    }
    if (rc != DUET_OK) {
        duet_dataset_destroy(ds);
        return rc;
    }
    *out = ds;
    return DUET_OK;
}

int duet_sr_train_dataset_create(const duet_sr_dataset_opts *opts, duet_dataset **out) {
    return sr_create(out, opts, DS_SR_TRAIN);
}

int duet_sr_val_dataset_create(const duet_sr_dataset_opts *opts, duet_dataset **out) {
    return sr_create(out, opts, DS_SR_VAL);
}

int duet_repeat_dataset_create(duet_dataset *inner, int64_t times, duet_dataset **out) {
    *out = NULL;
    if (inner == NULL || times < 1) {
        duet_dataset_destroy(inner);
        return duet__error(DUET_EINVAL, "repeat dataset: need a dataset and times >= 1 (got "
                           "%lld)", (long long)times);
    }
    if (inner->size > INT64_MAX / times) {
        /* The message reads the size: before inner is freed. */
        int rc = duet__error(DUET_EINVAL, "repeat dataset: %lld samples x times = %lld is more "
                             "than 2^63 samples; use a smaller times (at most %lld here)",
                             (long long)inner->size, (long long)times,
                             (long long)(INT64_MAX / inner->size));
        duet_dataset_destroy(inner);
        return rc;
    }
    duet_dataset *ds = calloc(1, sizeof(*ds));
    if (ds == NULL) {
        duet_dataset_destroy(inner);
        return duet__error(DUET_ENOMEM, "repeat dataset: out of memory");
    }
    ds->kind = DS_REPEAT;
    ds->inner = inner;
    ds->times = times;
    ds->size = inner->size * times;
    ds->scale = inner->scale;
    *out = ds;
    return DUET_OK;
}

void duet_dataset_destroy(duet_dataset *ds) {
    if (ds == NULL) return;
    if (ds->items != NULL)
        for (int64_t i = 0; i < ds->size; i++) {
            free(ds->items[i].name);
            free(ds->items[i].gt_path);
            free(ds->items[i].lq_path);
            duet_image_destroy(ds->items[i].gt);
            duet_image_destroy(ds->items[i].lq);
        }
    free(ds->items);
    free(ds->gt_dir);
    free(ds->lq_dir);
    free(ds->ann_file);
    duet__lmdb_close(ds->gt_db);
    duet__lmdb_close(ds->lq_db);
    duet_pipeline_destroy(ds->pipeline);
    duet_dataset_destroy(ds->inner);
    if (ds->kind == DS_CUSTOM && ds->ops->destroy != NULL) ds->ops->destroy(ds->impl);
    free(ds);
}

int64_t duet_dataset_size(const duet_dataset *ds) { return ds->size; }

int duet_dataset_scale(const duet_dataset *ds) { return ds->scale; }

const char *duet_dataset_name(const duet_dataset *ds, int64_t index) {
    DUET_ASSERT(index >= 0 && index < ds->size);
    while (ds->kind == DS_REPEAT) {
        index %= ds->inner->size;
        ds = ds->inner;
    }
    if (ds->kind == DS_CUSTOM)
        return ds->ops->sample_name != NULL ? ds->ops->sample_name(ds->impl, index) : NULL;
    return ds->items[index].name;
}

/* ---- samples ------------------------------------------------------------------ */

static uint64_t mix64(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

duet_rng duet_dataset_sample_rng(uint64_t seed, int64_t epoch, int64_t index) {
    uint64_t stream = mix64(mix64((uint64_t)epoch ^ 0x6461746173657400ULL /* "dataset" */) +
                            (uint64_t)index);
    return duet_rng_make(seed, stream);
}

/* The LQ of a GT tensor (1, 3, H, W): bicubic downscale by 1/scale, then
 * rounded to 8 bits as an LQ file written by MATLAB or BasicSR would be. */
static int downscale(const duet_tensor *gt, int scale, duet_tensor **out) {
    DUET_TRY(duet_imresize_tensor(gt, 1.0 / scale, out));
    float *d = (*out)->data;
    for (int64_t i = 0; i < (*out)->numel; i++)
        d[i] = nearbyintf(fmaxf(0.0f, fminf(255.0f, d[i] * 255.0f))) / 255.0f;
    return DUET_OK;
}

/* The images of one SR sample, handed to the pipeline's loads. */
typedef struct sr_io {
    const duet_dataset *ds;
    const duet_image *gt, *lq;
    duet_image *trimmed; /* validation: the GT cut to the LQ's grid */
} sr_io;

static int sr_load(void *ctx, const char *key, const char *path, duet_image **img,
                   bool *borrowed) {
    sr_io *io = ctx;
    (void)path;
    *borrowed = true;
    if (strcmp(key, "lq") == 0) {
        *img = (duet_image *)io->lq;
        return DUET_OK;
    }
    const duet_image *gt = io->gt;
    int64_t s = io->ds->scale, h = gt->height - gt->height % s, w = gt->width - gt->width % s;
    if (io->lq != NULL) h = io->lq->height * s, w = io->lq->width * s;
    if (io->ds->kind == DS_SR_TRAIN || (h == gt->height && w == gt->width)) {
        *img = (duet_image *)gt;
        return DUET_OK;
    }
    /* validation: the whole image, cut at the bottom and right to the LQ's grid */
    if (io->trimmed == NULL) {
        DUET_TRY(duet_image_create(h, w, 3, &io->trimmed));
        for (int64_t y = 0; y < h; y++)
            memcpy(io->trimmed->data + y * w * 3, gt->data + y * gt->width * 3, (size_t)(w * 3));
    }
    *img = io->trimmed;
    return DUET_OK;
}

/* Sample i of an SR set: its pipeline's lq and gt (lq made from gt after
 * a validation pipeline of a GT-only set), and gt_path its file name. */
static int sr_get_item(const duet_dataset *d, int64_t i, duet_rng *rng, duet_batch *out) {
    const sr_item *it = &d->items[i];
    duet_image *own_gt = NULL, *own_lq = NULL;
    sr_io io = {.ds = d, .gt = it->gt, .lq = it->lq};
    if (d->opts.lazy) {
        DUET_TRY(load_item(d, it, &own_gt, &own_lq));
        io.gt = own_gt;
        io.lq = own_lq;
    }
    duet__pipe_io pio = {.load = sr_load, .ctx = &io, .max_pixels = d->opts.max_pixels};
    duet__psample s;
    memset(&s, 0, sizeof s);
    s.rng = rng;
    s.io = &pio;
    s.paths[0] = it->gt_path;
    s.paths[1] = it->lq_path;
    static const char *const pair[] = {"lq", "gt", NULL};
    duet_batch b = {0};
    duet_tensor *lq = NULL;
    int rc = duet__pipeline_run(d->pipeline, &s);
    if (rc == DUET_OK) rc = duet__psample_to_batch(&s, pair, false, &b);
    duet__psample_clear(&s);
    duet_tensor *gt = duet_batch_tensor_get(&b, "gt");
    if (rc == DUET_OK && gt == NULL)
        rc = duet__error(DUET_ECONFIG, "SR dataset: its pipeline gives no 'gt'");
    if (rc == DUET_OK) {
        lq = duet_batch_tensor_get(&b, "lq");
        rc = lq ? (duet_tensor_retain(lq), DUET_OK) : downscale(gt, d->scale, &lq);
    }
    if (rc == DUET_OK) rc = duet_batch_add_tensor(out, "lq", lq);
    if (rc == DUET_OK) rc = duet_batch_add_tensor(out, "gt", gt);
    if (rc == DUET_OK) rc = duet_batch_add_meta(out, "gt_path", 1, (const char *[]){it->name});
    duet_tensor_release(lq);
    duet_batch_clear(&b);
    duet_image_destroy(io.trimmed);
    duet_image_destroy(own_gt);
    duet_image_destroy(own_lq);
    return rc == DUET_OK ? rc : duet__error_context(rc, "%s", it->gt_path);
}

int duet_dataset_get(const duet_dataset *ds, int64_t index, uint64_t seed, int64_t epoch,
                     duet_sample *out) {
    memset(out, 0, sizeof(*out));
    if (index < 0 || index >= ds->size)
        return duet__error(DUET_EINVAL, "dataset: index %lld out of range [0, %lld)",
                           (long long)index, (long long)ds->size);
    const duet_dataset *d = ds;
    while (d->kind == DS_REPEAT) d = d->inner;
    return custom_get_sr(ds, d, index, seed, epoch, out);
}

/* ---- samples as named tensors ------------------------------------------------- */

int duet_dataset_create(const duet_dataset_ops *ops, void *impl, int64_t size,
                        duet_dataset **out) {
    *out = NULL;
    DUET_ASSERT(ops != NULL);
    if (ops->get == NULL || size < 1) {
        if (ops->destroy != NULL) ops->destroy(impl);
        return duet__error(DUET_EINVAL, "dataset %s: needs a get function and at least one "
                           "sample (size %lld)", ops->name ? ops->name : "?", (long long)size);
    }
    duet_dataset *ds = calloc(1, sizeof(*ds));
    if (ds == NULL) {
        if (ops->destroy != NULL) ops->destroy(impl);
        return duet__error(DUET_ENOMEM, "dataset: out of memory");
    }
    ds->kind = DS_CUSTOM;
    ds->size = size;
    ds->scale = 1;
    ds->ops = ops;
    ds->impl = impl;
    *out = ds;
    return DUET_OK;
}

int duet_dataset_get_item(const duet_dataset *ds, int64_t index, uint64_t seed, int64_t epoch,
                          duet_batch *out) {
    DUET_ASSERT(out->ntensors == 0 && out->nmeta == 0);
    if (index < 0 || index >= ds->size)
        return duet__error(DUET_EINVAL, "dataset: index %lld out of range [0, %lld)",
                           (long long)index, (long long)ds->size);
    const duet_dataset *d = ds;
    int64_t i = index;
    while (d->kind == DS_REPEAT) {
        i %= d->inner->size;
        d = d->inner;
    }
    /* The randomness belongs to the outer index: repeats of one image get
     * different crops. */
    duet_rng rng = duet_dataset_sample_rng(seed, epoch, index);
    int rc = d->kind == DS_CUSTOM ? d->ops->get(d->impl, i, &rng, out)
                                  : sr_get_item(d, i, &rng, out);
    if (rc == DUET_OK && out->nsamples != 1)
        rc = duet__error(DUET_ESHAPE, "dataset %s: sample %lld has %lld samples in dim 0 "
                         "(a sample is a batch of one)", d->kind == DS_CUSTOM ? d->ops->name
                                                                               : "SR",
                         (long long)i, (long long)out->nsamples);
    if (rc != DUET_OK) duet_batch_clear(out);
    return rc;
}

/* duet_dataset_get on a dataset of one's own: its "lq" and "gt" (either may
 * be absent: NULL), as (C, H, W) views. */
static int custom_get_sr(const duet_dataset *ds, const duet_dataset *d, int64_t index,
                         uint64_t seed, int64_t epoch, duet_sample *out) {
    duet_batch b = {0};
    DUET_TRY(duet_dataset_get_item(ds, index, seed, epoch, &b));
    int rc = DUET_OK;
    const char *names[2] = {"lq", "gt"};
    duet_tensor **dst[2] = {&out->lq, &out->gt};
    for (int k = 0; k < 2 && rc == DUET_OK; k++) {
        duet_tensor *t = duet_batch_tensor_get(&b, names[k]);
        if (t != NULL && t->ndim == 4)
            rc = duet_tensor_view(t, 3, t->shape + 1, dst[k]);
    }
    duet_batch_clear(&b);
    if (rc != DUET_OK) {
        duet_sample_clear(out);
        return rc;
    }
    out->name = duet_dataset_name(d, index % d->size);
    out->index = index;
    return DUET_OK;
}
