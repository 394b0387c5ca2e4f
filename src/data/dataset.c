/* Super-resolution datasets (random-crop training set, whole-image
 * validation set, from a GT folder and optionally a paired LQ folder) and
 * the repeat wrapper. After creation a dataset is read-only, so
 * duet_dataset_get may run on several threads at once. */
#include "duet/data.h"
#include "data/data_internal.h"

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

static int sr_create(duet_dataset **out, const duet_sr_dataset_opts *opts, enum ds_kind kind) {
    *out = NULL;
    const char *what = kind == DS_SR_TRAIN ? "SR training set" : "SR validation set";
    if (opts == NULL || opts->gt_dir == NULL)
        return duet__error(DUET_EINVAL, "%s: gt_dir is required", what);
    if (opts->scale < 1 || opts->scale > DUET_MAX_SCALE)
        return duet__error(DUET_EINVAL, "%s: scale %d must be in [1, %d]", what, opts->scale,
                           DUET_MAX_SCALE);
    if (kind == DS_SR_TRAIN && (opts->gt_size < opts->scale || opts->gt_size % opts->scale != 0))
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

/* A (3, h, w) float tensor in [0, 1] from the rectangle of `img` at
 * (top, left). */
static int crop_to_tensor(const duet_image *img, int64_t top, int64_t left, int64_t h, int64_t w,
                          duet_tensor **out) {
    DUET_TRY(duet_tensor_create(3, (int64_t[]){3, h, w}, out));
    float *d = (*out)->data;
    for (int64_t y = 0; y < h; y++) {
        const uint8_t *row = img->data + ((top + y) * img->width + left) * 3;
        for (int64_t x = 0; x < w; x++)
            for (int64_t c = 0; c < 3; c++) d[(c * h + y) * w + x] = row[x * 3 + c] / 255.0f;
    }
    return DUET_OK;
}

/* The LQ of a GT tensor (3, H, W): bicubic downscale by 1/scale, then
 * rounded to 8 bits as an LQ file written by MATLAB or BasicSR would be. */
static int downscale(const duet_tensor *gt, int scale, duet_tensor **out) {
    DUET_TRY(duet_imresize_tensor(gt, 1.0 / scale, out));
    float *d = (*out)->data;
    for (int64_t i = 0; i < (*out)->numel; i++)
        d[i] = nearbyintf(fmaxf(0.0f, fminf(255.0f, d[i] * 255.0f))) / 255.0f;
    return DUET_OK;
}

/* In-place flips of a (C, H, W) tensor. */
static void hflip(duet_tensor *t) {
    int64_t w = t->shape[2], rows = t->shape[0] * t->shape[1];
    for (int64_t r = 0; r < rows; r++) {
        float *row = t->data + r * w;
        for (int64_t x = 0; x < w / 2; x++) {
            float v = row[x];
            row[x] = row[w - 1 - x];
            row[w - 1 - x] = v;
        }
    }
}

static void vflip(duet_tensor *t) {
    int64_t c = t->shape[0], h = t->shape[1], w = t->shape[2];
    for (int64_t k = 0; k < c; k++)
        for (int64_t y = 0; y < h / 2; y++) {
            float *a = t->data + (k * h + y) * w, *b = t->data + (k * h + h - 1 - y) * w;
            for (int64_t x = 0; x < w; x++) {
                float v = a[x];
                a[x] = b[x];
                b[x] = v;
            }
        }
}

/* (C, H, W) -> new (C, W, H). */
static int transpose_hw(duet_tensor **t) {
    duet_tensor *src = *t, *dst = NULL;
    int64_t c = src->shape[0], h = src->shape[1], w = src->shape[2];
    DUET_TRY(duet_tensor_create(3, (int64_t[]){c, w, h}, &dst));
    for (int64_t k = 0; k < c; k++)
        for (int64_t y = 0; y < h; y++)
            for (int64_t x = 0; x < w; x++)
                dst->data[(k * w + x) * h + y] = src->data[(k * h + y) * w + x];
    duet_tensor_release(src);
    *t = dst;
    return DUET_OK;
}

static int sr_train_get(const duet_dataset *ds, const sr_item *it, const duet_image *gt,
                        const duet_image *lq, duet_rng *rng, duet_sample *out) {
    int64_t s = ds->scale, gs = ds->opts.gt_size, ls = gs / s;
    /* Crop corner in LQ pixels (MMEditing's PairedRandomCrop draws top then
     * left); the GT corner is that times the scale. Without an LQ image
     * the "LQ grid" is the GT's divided by the scale. */
    int64_t lh = lq ? lq->height : gt->height / s, lw = lq ? lq->width : gt->width / s;
    int64_t top = duet_rng_int(rng, 0, lh - ls), left = duet_rng_int(rng, 0, lw - ls);
    bool do_h = duet_rng_uniform(rng) < 0.5f;
    bool do_v = duet_rng_uniform(rng) < 0.5f;
    bool do_t = duet_rng_uniform(rng) < 0.5f;
    int rc = crop_to_tensor(gt, top * s, left * s, gs, gs, &out->gt);
    if (rc == DUET_OK)
        rc = lq ? crop_to_tensor(lq, top, left, ls, ls, &out->lq) : downscale(out->gt, (int)s, &out->lq);
    if (rc != DUET_OK) return duet__error_context(rc, "%s", it->gt_path);
    if (ds->opts.use_hflip && do_h) {
        hflip(out->gt);
        hflip(out->lq);
    }
    if (ds->opts.use_vflip && do_v) {
        vflip(out->gt);
        vflip(out->lq);
    }
    if (ds->opts.use_transpose && do_t) {
        rc = transpose_hw(&out->gt);
        if (rc == DUET_OK) rc = transpose_hw(&out->lq);
    }
    return rc;
}

static int sr_val_get(const duet_dataset *ds, const sr_item *it, const duet_image *gt,
                      const duet_image *lq, duet_sample *out) {
    int64_t s = ds->scale;
    int rc;
    if (lq != NULL) {
        rc = crop_to_tensor(lq, 0, 0, lq->height, lq->width, &out->lq);
        if (rc == DUET_OK) rc = crop_to_tensor(gt, 0, 0, lq->height * s, lq->width * s, &out->gt);
    } else {
        rc = crop_to_tensor(gt, 0, 0, gt->height - gt->height % s, gt->width - gt->width % s,
                            &out->gt);
        if (rc == DUET_OK) rc = downscale(out->gt, (int)s, &out->lq);
    }
    return rc == DUET_OK ? rc : duet__error_context(rc, "%s", it->gt_path);
}

int duet_dataset_get(const duet_dataset *ds, int64_t index, uint64_t seed, int64_t epoch,
                     duet_sample *out) {
    memset(out, 0, sizeof(*out));
    if (index < 0 || index >= ds->size)
        return duet__error(DUET_EINVAL, "dataset: index %lld out of range [0, %lld)",
                           (long long)index, (long long)ds->size);
    /* The randomness belongs to the outer index: repeats of one image get
     * different crops. */
    duet_rng rng = duet_dataset_sample_rng(seed, epoch, index);
    const duet_dataset *d = ds;
    int64_t i = index;
    while (d->kind == DS_REPEAT) {
        i %= d->inner->size;
        d = d->inner;
    }
    if (d->kind == DS_CUSTOM) return custom_get_sr(ds, d, index, seed, epoch, out);
    const sr_item *it = &d->items[i];
    duet_image *gt = it->gt, *lq = it->lq, *own_gt = NULL, *own_lq = NULL;
    if (d->opts.lazy) {
        DUET_TRY(load_item(d, it, &own_gt, &own_lq));
        gt = own_gt;
        lq = own_lq;
    }
    int rc = d->kind == DS_SR_TRAIN ? sr_train_get(d, it, gt, lq, &rng, out)
                                    : sr_val_get(d, it, gt, lq, out);
    duet_image_destroy(own_gt);
    duet_image_destroy(own_lq);
    if (rc != DUET_OK) {
        duet_sample_clear(out);
        return rc;
    }
    out->name = it->name;
    out->index = index;
    return DUET_OK;
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

/* (C, H, W) sample tensor -> (1, C, H, W) view sharing its data. */
static int add_as_one(duet_batch *b, const char *name, duet_tensor *t) {
    int64_t shape[4] = {1, t->shape[0], t->shape[1], t->shape[2]};
    duet_tensor *v = NULL;
    DUET_TRY(duet_tensor_view(t, 4, shape, &v));
    int rc = duet_batch_add_tensor(b, name, v);
    duet_tensor_release(v);
    return rc;
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
    if (d->kind == DS_CUSTOM) {
        /* The randomness belongs to the outer index, as for the SR sets. */
        duet_rng rng = duet_dataset_sample_rng(seed, epoch, index);
        int rc = d->ops->get(d->impl, i, &rng, out);
        if (rc == DUET_OK && out->nsamples != 1)
            rc = duet__error(DUET_ESHAPE, "dataset %s: sample %lld has %lld samples in dim 0 "
                             "(a sample is a batch of one)", d->ops->name, (long long)i,
                             (long long)out->nsamples);
        if (rc != DUET_OK) duet_batch_clear(out);
        return rc;
    }
    duet_sample s;
    DUET_TRY(duet_dataset_get(ds, index, seed, epoch, &s));
    int rc = add_as_one(out, "lq", s.lq);
    if (rc == DUET_OK) rc = add_as_one(out, "gt", s.gt);
    if (rc == DUET_OK) rc = duet_batch_add_meta(out, "gt_path", 1, &s.name);
    duet_sample_clear(&s);
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
