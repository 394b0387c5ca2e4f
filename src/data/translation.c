/* MMEditing 0.x's image-to-image translation datasets as duet datasets of
 * named tensors:
 *   GenerationPairedDataset:   dataroot/{train,test}/ of A|B images side by
 *                              side; LoadPairedImageFromFile splits them.
 *   GenerationUnpairedDataset: dataroot/{trainA,trainB,testA,testB}/;
 *                              max(len A, len B) samples, A by index modulo
 *                              its length, B at random in training and by
 *                              index in test mode.
 * Files are found as MMEditing's scan_folder does (recursively, sorted by
 * path) and decoded on every access, as its pipeline loads them. */
#include <dirent.h>
#include <errno.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#include "data/translation.h"

static const char *const slot_names[DUET_TSLOT_COUNT] = {"img_a", "img_b", "pair"};

typedef struct files {
    char **paths; /* sorted */
    int64_t n;
} files;

typedef struct translation {
    bool paired, test_mode;
    char *root; /* dataroot/phase (paired) */
    files a, b; /* unpaired: A and B; paired: the pairs in a */
    duet_tstep *steps;
    size_t nsteps;
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

/* ---- the pipeline check ------------------------------------------------------ */

/* What each image is at a point of the pipeline. */
typedef struct slot_state {
    bool loaded, is_float, tensor;
} slot_state;

static int check_pipeline(const duet_translation_opts *o) {
    slot_state s[DUET_TSLOT_COUNT] = {{0}};
    bool collected = false;
    for (size_t i = 0; i < o->nsteps; i++) {
        const duet_tstep *st = &o->steps[i];
        if (collected)
            return duet__error(DUET_ECONFIG, "%s: no step may follow Collect", st->where);
        if (st->kind == DUET_TSTEP_LOAD_PAIRED && !o->paired)
            return duet__error(DUET_ECONFIG, "%s: LoadPairedImageFromFile belongs to "
                               "GenerationPairedDataset; use LoadImageFromFile with key "
                               "img_a and img_b here", st->where);
        if (st->kind == DUET_TSTEP_LOAD && o->paired)
            return duet__error(DUET_ECONFIG, "%s: GenerationPairedDataset loads its A|B images "
                               "with LoadPairedImageFromFile (key \"pair\")", st->where);
        for (int k = 0; k < st->nkeys; k++) {
            int id = st->keys[k];
            slot_state *ss = &s[id];
            bool loads = st->kind == DUET_TSTEP_LOAD || st->kind == DUET_TSTEP_LOAD_PAIRED;
            if (loads) {
                if (ss->loaded || (st->kind == DUET_TSTEP_LOAD_PAIRED && s[DUET_TSLOT_A].loaded))
                    return duet__error(DUET_ECONFIG, "%s: '%s' is loaded twice", st->where,
                                       slot_names[id]);
                /* The pair itself is not kept: only its halves. */
                if (st->kind == DUET_TSTEP_LOAD_PAIRED)
                    s[DUET_TSLOT_A].loaded = s[DUET_TSLOT_B].loaded = true;
                else ss->loaded = true;
                continue;
            }
            if (id == DUET_TSLOT_PAIR)
                return duet__error(DUET_EUNSUPPORTED, "%s: duet keeps only the halves img_a and "
                                   "img_b of a pair: name those in keys", st->where);
            if (!ss->loaded)
                return duet__error(DUET_ECONFIG, "%s: '%s' is not loaded by an earlier step",
                                   st->where, slot_names[id]);
            if (ss->tensor && st->kind != DUET_TSTEP_COLLECT)
                return duet__error(DUET_ECONFIG, "%s: '%s' is already a tensor (ImageToTensor "
                                   "comes after the image steps)", st->where, slot_names[id]);
            switch (st->kind) {
            case DUET_TSTEP_RESIZE:
                if (ss->is_float)
                    return duet__error(DUET_EUNSUPPORTED, "%s: duet resizes 8-bit images only: "
                                       "put Resize before RescaleToZeroOne and Normalize",
                                       st->where);
                break;
            case DUET_TSTEP_RESCALE:
            case DUET_TSTEP_NORMALIZE: ss->is_float = true; break;
            case DUET_TSTEP_TO_TENSOR: ss->tensor = true; break;
            case DUET_TSTEP_COLLECT:
                if (!ss->tensor)
                    return duet__error(DUET_ECONFIG, "%s: Collect takes '%s', which no "
                                       "ImageToTensor step converted", st->where,
                                       slot_names[id]);
                break;
            default: break;
            }
        }
        if (st->kind == DUET_TSTEP_COLLECT) collected = true;
    }
    if (!collected)
        return duet__error(DUET_ECONFIG, "%s: the pipeline must end with Collect (keys = "
                           "[\"img_a\", \"img_b\"]), which names the sample's tensors",
                           o->nsteps ? o->steps[o->nsteps - 1].where : "pipeline");
    return DUET_OK;
}

/* ---- creation ------------------------------------------------------------------ */

static void translation_destroy(void *impl) {
    translation *t = impl;
    if (t == NULL) return;
    files_free(&t->a);
    files_free(&t->b);
    free(t->root);
    free(t->steps);
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
    if (o->dataroot == NULL)
        return duet__error(DUET_EINVAL, "%s: dataroot is required", what);
    DUET_TRY(check_pipeline(o));
    translation *t = calloc(1, sizeof *t);
    if (t == NULL) return duet__error(DUET_ENOMEM, "%s: out of memory", what);
    t->paired = o->paired;
    t->test_mode = o->test_mode;
    t->max_pixels = o->max_pixels;
    t->nsteps = o->nsteps;
    t->steps = malloc(sizeof(duet_tstep) * (o->nsteps ? o->nsteps : 1));
    int rc = t->steps ? DUET_OK : duet__error(DUET_ENOMEM, "%s: out of memory", what);
    if (rc == DUET_OK) memcpy(t->steps, o->steps, sizeof(duet_tstep) * o->nsteps);
    const char *phase = o->test_mode ? "test" : "train";
    if (rc == DUET_OK && o->paired) {
        rc = list_folder(o->dataroot, phase, &t->root, &t->a);
    } else if (rc == DUET_OK) {
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

/* One image of a sample: 8-bit (u8) or float (f), HWC, 3 channels. */
typedef struct img {
    int64_t h, w;
    uint8_t *u8;
    float *f;
    const char *path;
} img;

static void img_free(img *m) {
    free(m->u8);
    free(m->f);
    m->u8 = NULL;
    m->f = NULL;
}

static void swap_rb(img *m) {
    int64_t n = m->h * m->w;
    for (int64_t i = 0; i < n; i++) {
        if (m->u8) {
            uint8_t v = m->u8[i * 3];
            m->u8[i * 3] = m->u8[i * 3 + 2];
            m->u8[i * 3 + 2] = v;
        } else {
            float v = m->f[i * 3];
            m->f[i * 3] = m->f[i * 3 + 2];
            m->f[i * 3 + 2] = v;
        }
    }
}

/* Rectangle (x, y, cw, ch) of m (element size es) into a new buffer. */
static int crop(img *m, int64_t x, int64_t y, int64_t cw, int64_t ch) {
    size_t es = m->u8 ? 1 : sizeof(float);
    uint8_t *src = m->u8 ? m->u8 : (uint8_t *)m->f;
    uint8_t *dst = malloc((size_t)(cw * ch * 3) * es);
    if (dst == NULL) return duet__error(DUET_ENOMEM, "%s: out of memory", m->path);
    for (int64_t r = 0; r < ch; r++)
        memcpy(dst + (size_t)(r * cw * 3) * es, src + (size_t)(((y + r) * m->w + x) * 3) * es,
               (size_t)(cw * 3) * es);
    free(src);
    if (m->u8) m->u8 = dst;
    else m->f = (float *)dst;
    m->h = ch;
    m->w = cw;
    return DUET_OK;
}

/* mmcv.imflip_: horizontal reverses each row's pixels, vertical the rows. */
static void flip(img *m, bool vertical) {
    size_t es = m->u8 ? 1 : sizeof(float), px = 3 * es;
    uint8_t *d = m->u8 ? m->u8 : (uint8_t *)m->f;
    uint8_t tmp[3 * sizeof(float)];
    if (!vertical) {
        for (int64_t y = 0; y < m->h; y++)
            for (int64_t x = 0; x < m->w / 2; x++) {
                uint8_t *a = d + (size_t)(y * m->w + x) * px;
                uint8_t *b = d + (size_t)(y * m->w + m->w - 1 - x) * px;
                memcpy(tmp, a, px), memcpy(a, b, px), memcpy(b, tmp, px);
            }
    } else {
        size_t row = (size_t)m->w * px;
        for (int64_t y = 0; y < m->h / 2; y++) {
            uint8_t *a = d + (size_t)y * row, *b = d + (size_t)(m->h - 1 - y) * row;
            for (size_t i = 0; i < row; i++) {
                uint8_t v = a[i];
                a[i] = b[i];
                b[i] = v;
            }
        }
    }
}

/* 8-bit to float32 byte values (what astype(np.float32) gives). */
static int to_float(img *m) {
    if (m->f != NULL) return DUET_OK;
    int64_t n = m->h * m->w * 3;
    m->f = malloc(sizeof(float) * (size_t)n);
    if (m->f == NULL) return duet__error(DUET_ENOMEM, "%s: out of memory", m->path);
    for (int64_t i = 0; i < n; i++) m->f[i] = (float)m->u8[i];
    free(m->u8);
    m->u8 = NULL;
    return DUET_OK;
}

static int load(const translation *t, const char *path, bool bgr, img *m) {
    duet_image *im = NULL;
    DUET_TRY(duet_image_load_limited(path, t->max_pixels, &im));
    m->h = im->height;
    m->w = im->width;
    m->u8 = im->data; /* taken over from the image */
    m->path = path;
    im->data = NULL;
    duet_image_destroy(im);
    /* mmcv.imfrombytes gives BGR; duet decodes RGB. */
    if (bgr) swap_rb(m);
    return DUET_OK;
}

/* LoadPairedImageFromFile: A is the left half, B the right one. */
static int load_pair(const translation *t, const char *path, img s[DUET_TSLOT_COUNT]) {
    img pair = {0};
    DUET_TRY(load(t, path, true, &pair));
    if (pair.w % 2 != 0) {
        int64_t w = pair.w, h = pair.h;
        img_free(&pair);
        return duet__error(DUET_ESHAPE, "%s: an A|B pair image needs an even width (A left, B "
                           "right, each half as wide), this one is %lldx%lld (WxH)", path,
                           (long long)w, (long long)h);
    }
    int64_t half = pair.w / 2;
    img *a = &s[DUET_TSLOT_A], *b = &s[DUET_TSLOT_B];
    *a = pair;
    *b = pair;
    b->u8 = malloc((size_t)(pair.h * pair.w * 3));
    int rc = b->u8 ? DUET_OK : duet__error(DUET_ENOMEM, "%s: out of memory", path);
    if (rc == DUET_OK) {
        memcpy(b->u8, pair.u8, (size_t)(pair.h * pair.w * 3));
        rc = crop(a, 0, 0, half, pair.h);
    }
    if (rc == DUET_OK) rc = crop(b, half, 0, half, pair.h);
    return rc;
}

static int run_step(const translation *t, const duet_tstep *st, duet_rng *rng,
                    const char *paths[2], img s[DUET_TSLOT_COUNT]) {
    switch (st->kind) {
    case DUET_TSTEP_LOAD:
        return load(t, paths[st->keys[0]], st->bgr, &s[st->keys[0]]);
    case DUET_TSTEP_LOAD_PAIRED:
        return load_pair(t, paths[0], s);
    case DUET_TSTEP_RESIZE:
        for (int k = 0; k < st->nkeys; k++) {
            img *m = &s[st->keys[k]];
            uint8_t *d = malloc((size_t)(st->width * st->height * 3));
            if (d == NULL) return duet__error(DUET_ENOMEM, "%s: out of memory", m->path);
            int rc = duet__cv_resize_cubic_u8(m->u8, m->h, m->w, 3, d, st->height, st->width);
            if (rc != DUET_OK) {
                free(d);
                return duet__error_context(rc, "%s", m->path);
            }
            free(m->u8);
            m->u8 = d;
            m->h = st->height;
            m->w = st->width;
        }
        return DUET_OK;
    case DUET_TSTEP_FIXED_CROP: {
        img *m0 = &s[st->keys[0]];
        int64_t dh = m0->h, dw = m0->w;
        int64_t ch = st->height < dh ? st->height : dh, cw = st->width < dw ? st->width : dw;
        int64_t x, y;
        if (!st->has_pos) {
            /* np.random.randint(0, data_w - crop_w + 1), then the same for y */
            x = duet_rng_int(rng, 0, dw - cw);
            y = duet_rng_int(rng, 0, dh - ch);
        } else {
            x = st->pos_x;
            y = st->pos_y;
            if (x >= dw || y >= dh)
                return duet__error(DUET_ESHAPE, "%s: crop_pos (%lld, %lld) is outside the "
                                   "%lldx%lld (WxH) image %s", st->where, (long long)x,
                                   (long long)y, (long long)dw, (long long)dh, m0->path);
            cw = dw - x < cw ? dw - x : cw;
            ch = dh - y < ch ? dh - y : ch;
        }
        for (int k = 0; k < st->nkeys; k++) {
            img *m = &s[st->keys[k]];
            if (m->h != dh || m->w != dw)
                return duet__error(DUET_ESHAPE, "%s: FixedCrop needs images of one size: "
                                   "'%s' is %lldx%lld (WxH), '%s' %lldx%lld (%s)", st->where,
                                   slot_names[st->keys[0]], (long long)dw, (long long)dh,
                                   slot_names[st->keys[k]], (long long)m->w, (long long)m->h,
                                   m->path);
            DUET_TRY(crop(m, x, y, cw, ch));
        }
        return DUET_OK;
    }
    case DUET_TSTEP_CROP:
        for (int k = 0; k < st->nkeys; k++) {
            img *m = &s[st->keys[k]];
            int64_t ch = st->height < m->h ? st->height : m->h;
            int64_t cw = st->width < m->w ? st->width : m->w;
            int64_t x = (m->w - cw) / 2, y = (m->h - ch) / 2;
            if (st->random_crop) {
                x = duet_rng_int(rng, 0, m->w - cw);
                y = duet_rng_int(rng, 0, m->h - ch);
            }
            DUET_TRY(crop(m, x, y, cw, ch));
        }
        return DUET_OK;
    case DUET_TSTEP_FLIP:
        /* np.random.random() < flip_ratio: one draw for all keys */
        if (duet_rng_uniform_double(rng) < st->flip_ratio)
            for (int k = 0; k < st->nkeys; k++) flip(&s[st->keys[k]], st->vertical);
        return DUET_OK;
    case DUET_TSTEP_RESCALE:
        for (int k = 0; k < st->nkeys; k++) {
            img *m = &s[st->keys[k]];
            DUET_TRY(to_float(m));
            for (int64_t i = 0; i < m->h * m->w * 3; i++) m->f[i] = m->f[i] / 255.0f;
        }
        return DUET_OK;
    case DUET_TSTEP_NORMALIZE:
        /* mmcv.imnormalize: float32, BGR -> RGB when to_rgb, then
         * cv2.subtract(img, mean) and cv2.multiply(img, 1 / std) with
         * float64 mean and 1 / std of the float32 config values: OpenCV
         * subtracts the scalar as float32 but multiplies in double and
         * rounds the product once (as MMEditing 0.16.1 on OpenCV 4.8.1 does,
         * tests/ref/gen_mmedit_refs.py; a float32 1 / std is 1 ulp off in
         * ~5% of the values for std 0.2). */
        for (int k = 0; k < st->nkeys; k++) {
            img *m = &s[st->keys[k]];
            DUET_TRY(to_float(m));
            if (st->to_rgb) swap_rb(m);
            double inv[3];
            for (int c = 0; c < 3; c++) inv[c] = 1.0 / (double)st->std[c];
            for (int64_t i = 0; i < m->h * m->w; i++)
                for (int c = 0; c < 3; c++)
                    m->f[i * 3 + c] = (float)((double)(m->f[i * 3 + c] - st->mean[c]) * inv[c]);
        }
        return DUET_OK;
    case DUET_TSTEP_TO_TENSOR:
        for (int k = 0; k < st->nkeys; k++) DUET_TRY(to_float(&s[st->keys[k]]));
        return DUET_OK;
    case DUET_TSTEP_COLLECT:
        return DUET_OK; /* read by build_batch */
    }
    return DUET_OK;
}

/* Collect: each key as a (1, 3, H, W) tensor, meta columns of the paths. */
static int build_batch(const duet_tstep *col, const char *paths[2], img s[DUET_TSLOT_COUNT],
                       duet_batch *out) {
    for (int k = 0; k < col->nkeys; k++) {
        img *m = &s[col->keys[k]];
        duet_tensor *t = NULL;
        DUET_TRY(duet_tensor_create(4, (int64_t[]){1, 3, m->h, m->w}, &t));
        /* HWC -> CHW, as ImageToTensor's transpose(2, 0, 1) */
        for (int64_t i = 0; i < m->h * m->w; i++)
            for (int c = 0; c < 3; c++) t->data[c * m->h * m->w + i] = m->f[i * 3 + c];
        int rc = duet_batch_add_tensor(out, slot_names[col->keys[k]], t);
        duet_tensor_release(t);
        DUET_TRY(rc);
    }
    static const char *const meta[2] = {"img_a_path", "img_b_path"};
    for (int k = 0; k < 2; k++)
        if (col->meta_path[k]) DUET_TRY(duet_batch_add_meta(out, meta[k], 1, &paths[k]));
    return DUET_OK;
}

static int translation_get(const void *impl, int64_t index, duet_rng *rng, duet_batch *out) {
    const translation *t = impl;
    const char *paths[2];
    paths[0] = t->a.paths[index % t->a.n];
    if (t->paired) {
        paths[1] = paths[0]; /* img_b_path is the pair's path too */
    } else {
        /* prepare_train_data draws idx_b before the pipeline runs */
        int64_t ib = t->test_mode ? index % t->b.n : duet_rng_int(rng, 0, t->b.n - 1);
        paths[1] = t->b.paths[ib];
    }
    img s[DUET_TSLOT_COUNT];
    memset(s, 0, sizeof s);
    int rc = DUET_OK;
    for (size_t i = 0; i < t->nsteps && rc == DUET_OK; i++) {
        rc = run_step(t, &t->steps[i], rng, paths, s);
        if (rc == DUET_OK && t->steps[i].kind == DUET_TSTEP_COLLECT)
            rc = build_batch(&t->steps[i], paths, s, out);
    }
    for (int k = 0; k < DUET_TSLOT_COUNT; k++) img_free(&s[k]);
    return rc;
}

/* ---- one image (duet infer) -------------------------------------------------- */

int duet_translation_one_image(const duet_tstep *steps, size_t nsteps, bool paired, int slot,
                               const char *path, int64_t max_pixels, duet_tensor **out) {
    *out = NULL;
    duet_translation_opts o = {.paired = paired, .steps = steps, .nsteps = nsteps};
    DUET_TRY(check_pipeline(&o));
    translation t = {.paired = paired, .max_pixels = max_pixels};
    /* A test pipeline draws nothing; a random step draws from a fixed rng. */
    duet_rng rng = duet_rng_make(0, 0);
    const char *paths[2] = {path, path};
    img s[DUET_TSLOT_COUNT];
    memset(s, 0, sizeof s);
    duet_batch batch = {0};
    bool collected = false;
    int rc = DUET_OK;
    for (size_t i = 0; i < nsteps && rc == DUET_OK && !collected; i++) {
        duet_tstep st = steps[i];
        /* The file is the image the model takes: the half of a pair (so
         * loaded as LoadPairedImageFromFile loads, in BGR, without the
         * split) or the unpaired image of that key. */
        if (st.kind == DUET_TSTEP_LOAD_PAIRED || st.kind == DUET_TSTEP_LOAD) {
            if (st.kind == DUET_TSTEP_LOAD_PAIRED || st.keys[0] == slot)
                rc = load(&t, path, st.kind == DUET_TSTEP_LOAD_PAIRED || st.bgr, &s[slot]);
            continue;
        }
        bool has = false;
        for (int k = 0; k < st.nkeys; k++) has |= st.keys[k] == slot;
        if (!has) continue;
        st.nkeys = 1;
        st.keys[0] = slot;
        st.meta_path[0] = st.meta_path[1] = false;
        if (st.kind == DUET_TSTEP_COLLECT) {
            rc = build_batch(&st, paths, s, &batch);
            collected = true;
        } else {
            rc = run_step(&t, &st, &rng, paths, s);
        }
    }
    if (rc == DUET_OK && !collected)
        rc = duet__error(DUET_ECONFIG, "%s: the pipeline's Collect does not take '%s', the "
                         "image the model translates", nsteps ? steps[nsteps - 1].where
                                                              : "pipeline", slot_names[slot]);
    if (rc == DUET_OK) *out = duet_tensor_retain(duet_batch_tensor_get(&batch, slot_names[slot]));
    duet_batch_clear(&batch);
    for (int k = 0; k < DUET_TSLOT_COUNT; k++) img_free(&s[k]);
    return rc;
}
