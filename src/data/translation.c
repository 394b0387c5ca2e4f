/* MMEditing 0.x's image-to-image translation datasets as duet datasets of
 * named tensors:
 *   GenerationPairedDataset:   dataroot/{train,test}/ of A|B images side by
 *                              side; LoadPairedImageFromFile splits them.
 *   GenerationUnpairedDataset: dataroot/{trainA,trainB,testA,testB}/;
 *                              max(len A, len B) samples, A by index modulo
 *                              its length, B at random in training and by
 *                              index in test mode.
 * Files are found as MMEditing's scan_folder does (recursively, sorted by
 * path) and decoded on every access, as its pipeline (run by the engine,
 * pipeline.c) loads them. */
#include <dirent.h>
#include <errno.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#include "data/pipeline.h"

typedef struct files {
    char **paths; /* sorted */
    int64_t n;
} files;

typedef struct translation {
    bool paired, test_mode;
    char *root; /* dataroot/phase (paired) */
    files a, b; /* unpaired: A and B; paired: the pairs in a */
    duet_pipeline *pipeline;
    int64_t max_pixels;
} translation;

/* ---- folders --------------------------------------------------------------- */

static void files_free(files *f) {
    for (int64_t i = 0; i < f->n; i++) free(f->paths[i]);
    free(f->paths);
    memset(f, 0, sizeof *f);
}

static int cmp_str(const void *x, const void *y) {
    return strcmp(*(char *const *)x, *(char *const *)y);
}

/* MMEditing's IMG_EXTENSIONS: the ones duet decodes, and the ones it would
 * list but duet cannot read (refused rather than silently skipped, which
 * would change the dataset's length and indices). */
static int image_kind(const char *name) {
    const char *dot = strrchr(name, '.');
    if (dot == NULL) return 0;
    if (!strcasecmp(dot, ".png") || !strcasecmp(dot, ".jpg") || !strcasecmp(dot, ".jpeg"))
        return 1;
    if (!strcasecmp(dot, ".ppm") || !strcasecmp(dot, ".bmp") || !strcasecmp(dot, ".tif") ||
        !strcasecmp(dot, ".tiff"))
        return 2;
    return 0;
}

static int add_path(files *f, int64_t *cap, char *path) {
    if (f->n == *cap) {
        int64_t c = *cap ? *cap * 2 : 64;
        char **p = realloc(f->paths, sizeof(char *) * (size_t)c);
        if (p == NULL) {
            free(path);
            return duet__error(DUET_ENOMEM, "listing images: out of memory");
        }
        f->paths = p;
        *cap = c;
    }
    f->paths[f->n++] = path;
    return DUET_OK;
}

/* Image files under dir, recursively (hidden entries skipped). */
static int scan(const char *dir, files *f, int64_t *cap, int depth) {
    if (depth > 32) return duet__error(DUET_EINVAL, "%s: folders nested too deep", dir);
    DIR *d = opendir(dir);
    if (d == NULL)
        return duet__error(errno == ENOENT ? DUET_ENOTFOUND : DUET_EIO,
                           "cannot open image folder %s: %s", dir, strerror(errno));
    int rc = DUET_OK;
    struct dirent *e;
    while (rc == DUET_OK && (e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.') continue;
        size_t len = strlen(dir) + strlen(e->d_name) + 2;
        char *path = malloc(len);
        if (path == NULL) {
            rc = duet__error(DUET_ENOMEM, "listing %s: out of memory", dir);
            break;
        }
        snprintf(path, len, "%s/%s", dir, e->d_name);
        struct stat sb;
        if (stat(path, &sb) != 0) {
            free(path);
            continue;
        }
        if (S_ISDIR(sb.st_mode)) {
            rc = scan(path, f, cap, depth + 1);
            free(path);
        } else if (S_ISREG(sb.st_mode) && image_kind(e->d_name) == 2) {
            rc = duet__error(DUET_EUNSUPPORTED, "%s: duet reads PNG and JPEG images only "
                             "(convert it, or move it out of %s)", path, dir);
            free(path);
        } else if (S_ISREG(sb.st_mode) && image_kind(e->d_name) == 1) {
            rc = add_path(f, cap, path);
        } else {
            free(path);
        }
    }
    closedir(d);
    return rc;
}

/* dataroot/sub, listed and sorted; an empty folder is an error. */
static int list_folder(const char *root, const char *sub, char **dir_out, files *f) {
    memset(f, 0, sizeof *f);
    size_t len = strlen(root) + strlen(sub) + 2;
    char *dir = malloc(len);
    if (dir == NULL) return duet__error(DUET_ENOMEM, "out of memory");
    snprintf(dir, len, "%s/%s", root, sub);
    int64_t cap = 0;
    int rc = scan(dir, f, &cap, 0);
    if (rc == DUET_OK && f->n == 0)
        rc = duet__error(DUET_ENOTFOUND, "no images (*.png, *.jpg, *.jpeg) in %s", dir);
    if (rc != DUET_OK) {
        files_free(f);
        free(dir);
        return rc;
    }
    qsort(f->paths, (size_t)f->n, sizeof(char *), cmp_str);
    if (dir_out != NULL) *dir_out = dir;
    else free(dir);
    return DUET_OK;
}

/* ---- creation ------------------------------------------------------------------ */

duet_pipeline_spec duet_translation_pipeline_spec(bool paired) {
    duet_pipeline_spec s = {.require_collect = true};
    if (paired) {
        s.dataset = "GenerationPairedDataset";
        s.pair_key = "pair";
        s.load_hint = ": GenerationPairedDataset loads its A|B images with "
                      "LoadPairedImageFromFile (key \"pair\")";
    } else {
        s.dataset = "GenerationUnpairedDataset";
        s.path_keys[0] = "img_a";
        s.path_keys[1] = "img_b";
        s.load_hint = ": give \"img_a\" or \"img_b\"";
    }
    return s;
}

static void translation_destroy(void *impl) {
    translation *t = impl;
    if (t == NULL) return;
    files_free(&t->a);
    files_free(&t->b);
    free(t->root);
    duet_pipeline_destroy(t->pipeline);
    free(t);
}

static int translation_get(const void *impl, int64_t index, duet_rng *rng, duet_batch *out);

static const char *translation_name(const void *impl, int64_t index) {
    const translation *t = impl;
    const char *p = t->a.paths[index % t->a.n];
    const char *slash = strrchr(p, '/');
    return slash ? slash + 1 : p;
}

static const duet_dataset_ops paired_ops = {
    .name = "GenerationPairedDataset",
    .get = translation_get,
    .sample_name = translation_name,
    .destroy = translation_destroy,
};

static const duet_dataset_ops unpaired_ops = {
    .name = "GenerationUnpairedDataset",
    .get = translation_get,
    .sample_name = translation_name,
    .destroy = translation_destroy,
};

int duet_translation_dataset_create(const duet_translation_opts *o, duet_dataset **out) {
    *out = NULL;
    const char *what = o->paired ? "GenerationPairedDataset" : "GenerationUnpairedDataset";
    if (o->dataroot == NULL || o->pipeline == NULL)
        return duet__error(DUET_EINVAL, "%s: dataroot and the pipeline are required", what);
    if ((o->pipeline->spec.pair_key != NULL) != o->paired)
        return duet__error(DUET_EINVAL, "%s: the pipeline was read for %s", what,
                           o->pipeline->spec.dataset);
    translation *t = calloc(1, sizeof *t);
    if (t == NULL) return duet__error(DUET_ENOMEM, "%s: out of memory", what);
    t->paired = o->paired;
    t->test_mode = o->test_mode;
    t->max_pixels = o->max_pixels;
    t->pipeline = duet__pipeline_retain(o->pipeline);
    const char *phase = o->test_mode ? "test" : "train";
    int rc;
    if (o->paired) {
        rc = list_folder(o->dataroot, phase, &t->root, &t->a);
    } else {
        char sub[8];
        snprintf(sub, sizeof sub, "%sA", phase);
        rc = list_folder(o->dataroot, sub, NULL, &t->a);
        snprintf(sub, sizeof sub, "%sB", phase);
        if (rc == DUET_OK) rc = list_folder(o->dataroot, sub, NULL, &t->b);
    }
    if (rc != DUET_OK) {
        translation_destroy(t);
        return duet__error_context(rc, "%s", what);
    }
    int64_t size = o->paired ? t->a.n : (t->a.n > t->b.n ? t->a.n : t->b.n);
    return duet_dataset_create(o->paired ? &paired_ops : &unpaired_ops, t, size, out);
}

/* ---- samples --------------------------------------------------------------------- */

static int translation_get(const void *impl, int64_t index, duet_rng *rng, duet_batch *out) {
    const translation *t = impl;
    duet__pipe_io io = {.max_pixels = t->max_pixels};
    duet__psample s;
    memset(&s, 0, sizeof s);
    s.rng = rng;
    s.io = &io;
    s.paths[0] = t->a.paths[index % t->a.n]; /* the pair, or img_a */
    if (!t->paired) {
        /* prepare_train_data draws idx_b before the pipeline runs */
        int64_t ib = t->test_mode ? index % t->b.n : duet_rng_int(rng, 0, t->b.n - 1);
        s.paths[1] = t->b.paths[ib];
    }
    int rc = duet__pipeline_run(t->pipeline, &s);
    if (rc == DUET_OK) rc = duet__psample_to_batch(&s, NULL, true, out);
    duet__psample_clear(&s);
    return rc;
}

/* ---- one image (duet infer) -------------------------------------------------- */

int duet_translation_one_image(const duet_pipeline *p, const char *key, const char *path,
                               int64_t max_pixels, duet_tensor **out) {
    *out = NULL;
    if (strcmp(key, "img_a") != 0 && strcmp(key, "img_b") != 0)
        return duet__error(DUET_EINVAL, "infer: '%s' is not an image of a translation sample "
                           "(img_a, img_b)", key);
    /* A test pipeline draws nothing; a random step draws from a fixed rng. */
    duet_rng rng = duet_rng_make(0, 0);
    duet__pipe_io io = {.max_pixels = max_pixels};
    duet__psample s;
    memset(&s, 0, sizeof s);
    s.rng = &rng;
    s.io = &io;
    duet_batch batch = {0};
    int rc = duet__pipeline_run_key(p, key, path, &s);
    if (rc == DUET_OK) rc = duet__psample_to_batch(&s, NULL, false, &batch);
    if (rc == DUET_OK) *out = duet_tensor_retain(duet_batch_tensor_get(&batch, key));
    duet_batch_clear(&batch);
    duet__psample_clear(&s);
    return rc;
}
