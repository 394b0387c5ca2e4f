/* The pipeline rows on an image's geometry and values: Resize, Crop,
 * FixedCrop, PairedRandomCrop, Flip, RandomTransposeHW, RescaleToZeroOne,
 * Normalize, each with MMEditing 0.16's options and order of np.random
 * calls, drawing from the sample's rng. A key the sample does not hold
 * (the spec's optional key before it is made) is passed over. */
#include "data/pipeline.h"
#include "data/translation.h"

#include <math.h>
#include <string.h>

/* ---- Resize ---------------------------------------------------------------------- */

typedef struct resize_opts {
    int64_t width, height;
    bool cubic; /* 'bicubic' (OpenCV's INTER_CUBIC), else OpenCV's bilinear */
} resize_opts;

static int read_resize(duet_config *c, duet__pipe_read *r, duet__step *st) {
    static const char *const interp[] = {"bilinear", "bicubic", NULL};
    const char *s = NULL;
    bool keep_ratio = false;
    int64_t wh[2];
    DUET_TRY(duet__pipe_read_keys(c, r, st, DUET__PIPE_MAX_KEYS));
    DUET_TRY(duet__pipe_opts(st, sizeof(resize_opts)));
    resize_opts *o = st->opts;
    if (duet_config_kind(c, "scale") != DUET_CONFIG_ARRAY)
        return duet__pipe_bad(c, "scale", "must be the output size [w, h] (MMEditing's Resize "
                              "passes it to mmcv.imresize, which reads (w, h); a scale factor "
                              "is not supported)");
    /* mmcv.imresize takes the tuple as (w, h); MMEditing passes it on as is */
    DUET_TRY(duet__pipe_int_pair(c, "scale", 0, 1, true, wh));
    o->width = wh[0];
    o->height = wh[1];
    DUET_TRY(duet_config_get_bool_or(c, "keep_ratio", false, &keep_ratio));
    if (keep_ratio) return duet__pipe_bad(c, "keep_ratio", "= true is not supported");
    DUET_TRY(duet__pipe_string_in(c, "interpolation", "bilinear", interp, &s));
    o->cubic = strcmp(s, "bicubic") == 0;
    return duet__pipe_need_images(r, st, true, "resizes");
}

static int apply_resize(const duet__step *st, duet__psample *s) {
    const resize_opts *o = st->opts;
    for (int k = 0; k < st->nkeys; k++) {
        duet__pentry *e = duet__psample_get(s, st->keys[k]);
        if (e == NULL) continue;
        duet__pimage *m = &e->im;
        const char *what = e->path ? e->path : e->key;
        uint8_t *d = malloc((size_t)(o->width * o->height * m->c));
        if (d == NULL) return duet__error(DUET_ENOMEM, "%s: out of memory", what);
        int rc = o->cubic ? duet__cv_resize_cubic_u8(m->u8, m->h, m->w, m->c, d, o->height,
                                                     o->width)
                          : duet_image_resize_bilinear_u8(m->u8, m->h, m->w, m->c, d,
                                                          o->height, o->width);
        if (rc != DUET_OK) {
            free(d);
            return duet__error_context(rc, "%s", what);
        }
        if (m->owned) free(m->u8);
        m->u8 = d;
        m->owned = true;
        m->h = o->height;
        m->w = o->width;
    }
    return DUET_OK;
}

const duet__transform duet__t_resize = {
    .name = "Resize", .read = read_resize, .apply = apply_resize,
};

/* ---- Crop, FixedCrop ------------------------------------------------------------------ */

typedef struct crop_opts {
    int64_t height, width; /* crop_size (h, w) */
    bool random;           /* Crop: random window (else centred) */
    bool has_pos;          /* FixedCrop: crop_pos (x, y) given */
    int64_t pos_x, pos_y;
} crop_opts;

static int read_crop(duet_config *c, duet__pipe_read *r, duet__step *st) {
    int64_t hw[2];
    bool pad = false;
    DUET_TRY(duet__pipe_read_keys(c, r, st, DUET__PIPE_MAX_KEYS));
    DUET_TRY(duet__pipe_opts(st, sizeof(crop_opts)));
    crop_opts *o = st->opts;
    if (!duet_config_has(c, "crop_size")) return duet__pipe_bad(c, "crop_size", "is required");
    DUET_TRY(duet__pipe_int_pair(c, "crop_size", 0, 1, false, hw)); /* (h, w) */
    o->height = hw[0];
    o->width = hw[1];
    DUET_TRY(duet_config_get_bool_or(c, "random_crop", true, &o->random));
    DUET_TRY(duet_config_get_bool_or(c, "is_pad_zeros", false, &pad));
    if (pad) return duet__pipe_bad(c, "is_pad_zeros", "= true is not supported");
    return duet__pipe_need_images(r, st, false, "crops");
}

/* Crop: a window per key, min(size, crop); random: x then y drawn
 * (np.random.randint(0, data_w - crop_w + 1), then for y). */
static int apply_crop(const duet__step *st, duet__psample *s) {
    const crop_opts *o = st->opts;
    for (int k = 0; k < st->nkeys; k++) {
        duet__pentry *e = duet__psample_get(s, st->keys[k]);
        if (e == NULL) continue;
        duet__pimage *m = &e->im;
        int64_t ch = o->height < m->h ? o->height : m->h;
        int64_t cw = o->width < m->w ? o->width : m->w;
        int64_t x = (m->w - cw) / 2, y = (m->h - ch) / 2;
        if (o->random) {
            x = duet_rng_int(s->rng, 0, m->w - cw);
            y = duet_rng_int(s->rng, 0, m->h - ch);
        }
        DUET_TRY(duet__pimage_crop(m, x, y, cw, ch, e->path ? e->path : e->key));
    }
    return DUET_OK;
}

const duet__transform duet__t_crop = {
    .name = "Crop", .read = read_crop, .apply = apply_crop, .random = true,
};

static int read_fixed_crop(duet_config *c, duet__pipe_read *r, duet__step *st) {
    int64_t hw[2];
    DUET_TRY(duet__pipe_read_keys(c, r, st, DUET__PIPE_MAX_KEYS));
    DUET_TRY(duet__pipe_opts(st, sizeof(crop_opts)));
    crop_opts *o = st->opts;
    if (!duet_config_has(c, "crop_size")) return duet__pipe_bad(c, "crop_size", "is required");
    DUET_TRY(duet__pipe_int_pair(c, "crop_size", 0, 1, true, hw)); /* (h, w) */
    o->height = hw[0];
    o->width = hw[1];
    if (duet_config_has(c, "crop_pos")) {
        int64_t xy[2];
        DUET_TRY(duet__pipe_int_pair(c, "crop_pos", 0, 0, true, xy)); /* (x, y) */
        o->has_pos = true;
        o->pos_x = xy[0];
        o->pos_y = xy[1];
    }
    return duet__pipe_need_images(r, st, false, "crops");
}

/* FixedCrop: one window for all keys, which must be of one size. */
static int apply_fixed_crop(const duet__step *st, duet__psample *s) {
    const crop_opts *o = st->opts;
    duet__pentry *e0 = duet__psample_get(s, st->keys[0]);
    if (e0 == NULL) return DUET_OK;
    int64_t dh = e0->im.h, dw = e0->im.w;
    int64_t ch = o->height < dh ? o->height : dh, cw = o->width < dw ? o->width : dw;
    int64_t x, y;
    if (!o->has_pos) {
        /* np.random.randint(0, data_w - crop_w + 1), then the same for y */
        x = duet_rng_int(s->rng, 0, dw - cw);
        y = duet_rng_int(s->rng, 0, dh - ch);
    } else {
        x = o->pos_x;
        y = o->pos_y;
        if (x >= dw || y >= dh)
            return duet__error(DUET_ESHAPE, "%s: crop_pos (%lld, %lld) is outside the "
                               "%lldx%lld (WxH) image %s", st->where, (long long)x,
                               (long long)y, (long long)dw, (long long)dh, e0->path);
        cw = dw - x < cw ? dw - x : cw;
        ch = dh - y < ch ? dh - y : ch;
    }
    for (int k = 0; k < st->nkeys; k++) {
        duet__pentry *e = duet__psample_get(s, st->keys[k]);
        if (e == NULL) continue;
        if (e->im.h != dh || e->im.w != dw)
            return duet__error(DUET_ESHAPE, "%s: FixedCrop needs images of one size: "
                               "'%s' is %lldx%lld (WxH), '%s' %lldx%lld (%s)", st->where,
                               e0->key, (long long)dw, (long long)dh, e->key,
                               (long long)e->im.w, (long long)e->im.h, e->path);
        DUET_TRY(duet__pimage_crop(&e->im, x, y, cw, ch, e->path ? e->path : e->key));
    }
    return DUET_OK;
}

const duet__transform duet__t_fixed_crop = {
    .name = "FixedCrop", .read = read_fixed_crop, .apply = apply_fixed_crop, .random = true,
};

/* ---- PairedRandomCrop -------------------------------------------------------------------- */

typedef struct paired_crop_opts {
    int64_t gt_size;
} paired_crop_opts;

static int read_paired_crop(duet_config *c, duet__pipe_read *r, duet__step *st) {
    if (r->spec->scale < 1)
        return duet__pipe_bad(c, "type", "= \"PairedRandomCrop\" belongs to the SR datasets");
    DUET_TRY(duet__pipe_opts(st, sizeof(paired_crop_opts)));
    paired_crop_opts *o = st->opts;
    DUET_TRY(duet_config_get_int_in(c, "gt_patch_size", 1, (int64_t)1 << 24, &o->gt_size));
    if (o->gt_size % r->spec->scale != 0)
        return duet__pipe_bad(c, "gt_patch_size", "= %lld is not a multiple of the scale %d",
                              (long long)o->gt_size, r->spec->scale);
    st->nkeys = 2;
    snprintf(st->keys[0], DUET__PIPE_KEY_LEN, "lq");
    snprintf(st->keys[1], DUET__PIPE_KEY_LEN, "gt");
    if (duet__pipe_state(r, "gt") == NULL)
        return duet__error(DUET_ECONFIG, "%s: 'gt' is not loaded by an earlier step", st->where);
    duet__pkey_state *lq = duet__pipe_state(r, "lq");
    if (lq == NULL && r->spec->optional_key == NULL)
        return duet__error(DUET_ECONFIG, "%s: 'lq' is not loaded by an earlier step", st->where);
    DUET_TRY(duet__pipe_need_images(r, st, false, "crops"));
    if (lq == NULL) { /* made from the GT crop */
        duet__pkey_state *gt = duet__pipe_state(r, "gt");
        DUET_TRY(duet__pipe_state_add(r, c, "type", "lq", &lq));
        *lq = *gt;
        snprintf(lq->key, sizeof lq->key, "lq");
    }
    return DUET_OK;
}

/* A GT crop's LQ: (C, H, W) float of its values in [0, 1] downscaled by
 * duet_imresize (MATLAB's bicubic), rounded to 8-bit levels as an LQ file
 * made by MATLAB or BasicSR would be. The LQ keeps the GT's pending flags. */
static int lq_from_gt(const duet__pentry *gt, int scale, duet__pentry *lq) {
    const duet__pimage *g = &gt->im;
    duet_tensor *t = NULL, *small = NULL;
    DUET_TRY(duet_tensor_create(3, (int64_t[]){g->c, g->h, g->w}, &t));
    const int64_t hw = g->h * g->w;
    for (int64_t i = 0; i < hw; i++)
        for (int c = 0; c < g->c; c++)
            t->data[c * hw + i] = g->u8 ? g->u8[i * g->c + c] / 255.0f : g->f[i * g->c + c];
    int rc = duet_imresize_tensor(t, 1.0 / scale, &small);
    duet_tensor_release(t);
    if (rc != DUET_OK) return duet__error_context(rc, "%s", gt->path ? gt->path : "gt");
    duet__pimage *m = &lq->im;
    *m = *g;
    m->h = small->shape[1];
    m->w = small->shape[2];
    const int64_t shw = m->h * m->w, n = shw * m->c;
    m->u8 = g->u8 ? malloc((size_t)n) : NULL;
    m->f = g->u8 ? NULL : malloc(sizeof(float) * (size_t)n);
    m->owned = true;
    if (m->u8 == NULL && m->f == NULL) {
        duet_tensor_release(small);
        return duet__error(DUET_ENOMEM, "lq: out of memory");
    }
    for (int64_t i = 0; i < shw; i++)
        for (int c = 0; c < m->c; c++) {
            float v = nearbyintf(fmaxf(0.0f, fminf(255.0f, small->data[c * shw + i] * 255.0f)));
            if (m->u8) m->u8[i * m->c + c] = (uint8_t)v;
            else m->f[i * m->c + c] = v / 255.0f;
        }
    duet_tensor_release(small);
    lq->is_image = true;
    lq->bgr = gt->bgr;
    lq->path = gt->path;
    return DUET_OK;
}

/* MMEditing's PairedRandomCrop: an LQ window of gt_size / scale drawn top,
 * then left, and the GT window at scale times that. Without an LQ image
 * (SRFolderGTDataset) the grid is the GT's divided by the scale and the
 * LQ is made from the GT crop. */
static int apply_paired_crop(const duet__step *st, duet__psample *s) {
    const paired_crop_opts *o = st->opts;
    const int64_t sc = s->spec->scale, gs = o->gt_size, ls = gs / sc;
    duet__pentry *gt = duet__psample_get(s, "gt"), *lq = duet__psample_get(s, "lq");
    int64_t lh = lq ? lq->im.h : gt->im.h / sc, lw = lq ? lq->im.w : gt->im.w / sc;
    if (lh < ls || lw < ls || (lq && (gt->im.h != lh * sc || gt->im.w != lw * sc)))
        return duet__error(DUET_ESHAPE, "%s: %s is %lldx%lld (WxH)%s; the crop wants %lld "
                           "pixels at scale %lld", st->where, gt->path, (long long)gt->im.w,
                           (long long)gt->im.h, lq ? ", not the scale times its LQ" : "",
                           (long long)gs, (long long)sc);
    int64_t top = duet_rng_int(s->rng, 0, lh - ls), left = duet_rng_int(s->rng, 0, lw - ls);
    DUET_TRY(duet__pimage_crop(&gt->im, left * sc, top * sc, gs, gs, gt->path));
    if (lq != NULL) return duet__pimage_crop(&lq->im, left, top, ls, ls, lq->path);
    DUET_TRY(duet__psample_put(s, "lq", &lq));
    return lq_from_gt(duet__psample_get(s, "gt"), (int)sc, lq);
}

const duet__transform duet__t_paired_random_crop = {
    .name = "PairedRandomCrop", .read = read_paired_crop, .apply = apply_paired_crop,
    .random = true,
};

/* ---- Flip, RandomTransposeHW ------------------------------------------------------------- */

typedef struct flip_opts {
    double ratio;
    bool vertical;
} flip_opts;

static int read_flip(duet_config *c, duet__pipe_read *r, duet__step *st) {
    static const char *const dirs[] = {"horizontal", "vertical", NULL};
    const char *d = NULL;
    DUET_TRY(duet__pipe_read_keys(c, r, st, DUET__PIPE_MAX_KEYS));
    DUET_TRY(duet__pipe_opts(st, sizeof(flip_opts)));
    flip_opts *o = st->opts;
    DUET_TRY(duet_config_get_double_in_or(c, "flip_ratio", 0.5, 0.0, 1.0, &o->ratio));
    DUET_TRY(duet__pipe_string_in(c, "direction", "horizontal", dirs, &d));
    o->vertical = strcmp(d, "vertical") == 0;
    return duet__pipe_need_images(r, st, false, "flips");
}

/* mmcv.imflip_ in place: horizontal reverses each row's pixels, vertical
 * the rows. */
static void flip_pixels(uint8_t *d, int64_t h, int64_t w, size_t px, bool vertical) {
    uint8_t tmp[4 * sizeof(float)];
    if (!vertical) {
        for (int64_t y = 0; y < h; y++)
            for (int64_t x = 0; x < w / 2; x++) {
                uint8_t *a = d + (size_t)(y * w + x) * px, *b = d + (size_t)(y * w + w - 1 - x) * px;
                memcpy(tmp, a, px), memcpy(a, b, px), memcpy(b, tmp, px);
            }
        return;
    }
    size_t row = (size_t)w * px;
    for (int64_t y = 0; y < h / 2; y++) {
        uint8_t *a = d + (size_t)y * row, *b = d + (size_t)(h - 1 - y) * row;
        for (size_t i = 0; i < row; i++) {
            uint8_t v = a[i];
            a[i] = b[i];
            b[i] = v;
        }
    }
}

/* np.random.random() < flip_ratio: one draw for all keys. */
static int apply_flip(const duet__step *st, duet__psample *s) {
    const flip_opts *o = st->opts;
    if (!(duet_rng_uniform_double(s->rng) < o->ratio)) return DUET_OK;
    for (int k = 0; k < st->nkeys; k++) {
        duet__pentry *e = duet__psample_get(s, st->keys[k]);
        if (e == NULL) continue;
        duet__pimage *m = &e->im;
        DUET_TRY(duet__pimage_own(m, e->key));
        size_t es = m->u8 ? 1 : sizeof(float);
        flip_pixels(m->u8 ? m->u8 : (uint8_t *)m->f, m->h, m->w, (size_t)m->c * es, o->vertical);
    }
    return DUET_OK;
}

const duet__transform duet__t_flip = {
    .name = "Flip", .read = read_flip, .apply = apply_flip, .random = true,
};

typedef struct transpose_opts {
    double ratio;
} transpose_opts;

static int read_transpose(duet_config *c, duet__pipe_read *r, duet__step *st) {
    DUET_TRY(duet__pipe_read_keys(c, r, st, DUET__PIPE_MAX_KEYS));
    DUET_TRY(duet__pipe_opts(st, sizeof(transpose_opts)));
    transpose_opts *o = st->opts;
    DUET_TRY(duet_config_get_double_in_or(c, "transpose_ratio", 0.5, 0.0, 1.0, &o->ratio));
    return duet__pipe_need_images(r, st, false, "transposes");
}

/* np.random.random() < transpose_ratio: (H, W, C) -> (W, H, C) for all keys. */
static int apply_transpose(const duet__step *st, duet__psample *s) {
    const transpose_opts *o = st->opts;
    if (!(duet_rng_uniform_double(s->rng) < o->ratio)) return DUET_OK;
    for (int k = 0; k < st->nkeys; k++) {
        duet__pentry *e = duet__psample_get(s, st->keys[k]);
        if (e == NULL) continue;
        duet__pimage *m = &e->im;
        size_t es = m->u8 ? 1 : sizeof(float), px = (size_t)m->c * es;
        const uint8_t *src = m->u8 ? m->u8 : (const uint8_t *)m->f;
        uint8_t *dst = malloc((size_t)(m->h * m->w) * px + 1);
        if (dst == NULL) return duet__error(DUET_ENOMEM, "%s: out of memory", e->key);
        for (int64_t y = 0; y < m->h; y++)
            for (int64_t x = 0; x < m->w; x++)
                memcpy(dst + (size_t)(x * m->h + y) * px, src + (size_t)(y * m->w + x) * px, px);
        if (m->u8) {
            if (m->owned) free(m->u8);
            m->u8 = dst;
            m->owned = true;
        } else {
            free(m->f);
            m->f = (float *)dst;
        }
        int64_t h = m->h;
        m->h = m->w;
        m->w = h;
    }
    return DUET_OK;
}

const duet__transform duet__t_transpose = {
    .name = "RandomTransposeHW", .read = read_transpose, .apply = apply_transpose,
    .random = true,
};

/* ---- RescaleToZeroOne, Normalize -------------------------------------------------------- */

static int read_rescale(duet_config *c, duet__pipe_read *r, duet__step *st) {
    DUET_TRY(duet__pipe_read_keys(c, r, st, DUET__PIPE_MAX_KEYS));
    DUET_TRY(duet__pipe_need_images(r, st, false, "rescales"));
    for (int i = 0; i < st->nkeys; i++) {
        duet__pkey_state *k = duet__pipe_state(r, st->keys[i]);
        if (k != NULL) k->is_float = k->unit = true;
    }
    return DUET_OK;
}

/* img.astype(np.float32) / 255.: pending on 8-bit images (done when the
 * values are read). */
static int apply_rescale(const duet__step *st, duet__psample *s) {
    for (int k = 0; k < st->nkeys; k++) {
        duet__pentry *e = duet__psample_get(s, st->keys[k]);
        if (e == NULL) continue;
        duet__pimage *m = &e->im;
        if (m->u8 != NULL && !m->unit) {
            m->unit = true;
            continue;
        }
        DUET_TRY(duet__pimage_to_float(m, e->key));
        for (int64_t i = 0; i < m->h * m->w * m->c; i++) m->f[i] = m->f[i] / 255.0f;
    }
    return DUET_OK;
}

const duet__transform duet__t_rescale = {
    .name = "RescaleToZeroOne", .read = read_rescale, .apply = apply_rescale,
};

typedef struct normalize_opts {
    float mean[3], std[3]; /* in the order of the image's channels */
    bool to_rgb;
    bool identity; /* mean 0, std 1: only the channel swap */
} normalize_opts;

static int read_normalize(duet_config *c, duet__pipe_read *r, duet__step *st) {
    double m[4], sd[4];
    size_t nm = 0, ns = 0;
    bool save = false;
    DUET_TRY(duet__pipe_read_keys(c, r, st, DUET__PIPE_MAX_KEYS));
    DUET_TRY(duet__pipe_opts(st, sizeof(normalize_opts)));
    normalize_opts *o = st->opts;
    DUET_TRY(duet_config_get_double_array(c, "mean", m, 4, &nm));
    DUET_TRY(duet_config_get_double_array(c, "std", sd, 4, &ns));
    if (nm != 3 && nm != 1) return duet__pipe_bad(c, "mean", "must have 3 values (or 1)");
    if (ns != 3 && ns != 1) return duet__pipe_bad(c, "std", "must have 3 values (or 1)");
    o->identity = true;
    for (int i = 0; i < 3; i++) {
        /* np.array(..., dtype=np.float32), broadcast like numpy */
        o->mean[i] = (float)m[nm == 1 ? 0 : i];
        o->std[i] = (float)sd[ns == 1 ? 0 : i];
        if (!(o->std[i] > 0) && !(o->std[i] < 0))
            return duet__pipe_bad(c, "std", "must not hold 0");
        o->identity &= o->mean[i] == 0.0f && o->std[i] == 1.0f;
    }
    DUET_TRY(duet_config_get_bool_or(c, "to_rgb", false, &o->to_rgb));
    DUET_TRY(duet_config_get_bool_or(c, "save_original", false, &save)); /* *_unnormalised */
    DUET_TRY(duet__pipe_need_images(r, st, false, "normalizes"));
    for (int i = 0; i < st->nkeys; i++) {
        duet__pkey_state *k = duet__pipe_state(r, st->keys[i]);
        if (k == NULL) continue;
        k->is_float = true;
        k->unit &= o->identity;
        k->bgr ^= o->to_rgb;
    }
    return DUET_OK;
}

/* mmcv.imnormalize: float32, BGR -> RGB when to_rgb, then
 * cv2.subtract(img, mean) and cv2.multiply(img, 1 / std) with float64 mean
 * and 1 / std of the float32 config values: OpenCV subtracts the scalar as
 * float32 but multiplies in double and rounds the product once (as
 * MMEditing 0.16.1 on OpenCV 4.8.1 does, tests/ref/gen_mmedit_refs.py; a
 * float32 1 / std is 1 ulp off in ~5% of the values for std 0.2). Mean 0
 * and std 1 change no value: an 8-bit image stays 8-bit. */
static int apply_normalize(const duet__step *st, duet__psample *s) {
    const normalize_opts *o = st->opts;
    for (int k = 0; k < st->nkeys; k++) {
        duet__pentry *e = duet__psample_get(s, st->keys[k]);
        if (e == NULL) continue;
        duet__pimage *m = &e->im;
        if (o->to_rgb) e->bgr = !e->bgr;
        if (o->identity && m->u8 != NULL) {
            m->swap ^= o->to_rgb && m->c == 3;
            continue;
        }
        DUET_TRY(duet__pimage_to_float(m, e->path ? e->path : e->key));
        if (o->to_rgb && m->c == 3) {
            m->swap = true;
            DUET_TRY(duet__pimage_realize_swap(m, e->key));
        }
        double inv[3];
        for (int c = 0; c < 3; c++) inv[c] = 1.0 / (double)o->std[c];
        for (int64_t i = 0; i < m->h * m->w; i++)
            for (int c = 0; c < m->c && c < 3; c++)
                m->f[i * m->c + c] =
                    (float)((double)(m->f[i * m->c + c] - o->mean[c]) * inv[c]);
    }
    return DUET_OK;
}

const duet__transform duet__t_normalize = {
    .name = "Normalize", .read = read_normalize, .apply = apply_normalize,
};
