/* MMEditing 0.x's ImgInpaintingDataset with its pipeline (LoadImageFromFile,
 * LoadMask, Crop, Resize, Flip, Normalize, GetMaskedImage, Collect) as a
 * duet dataset of named tensors, the mask generators of mmedit.core.mask
 * (random_bbox, get_irregular_mask) and OpenCV's bilinear resize that
 * mmcv.imresize runs by default. Every random choice comes from the
 * sample's rng, in MMEditing's order of np.random calls. */
#include <math.h>
#include <string.h>

#include "data/translation.h"

/* ---- masks ------------------------------------------------------------------ */

duet_mask_opts duet_mask_options_default(duet_mask_mode mode) {
    duet_mask_opts o;
    memset(&o, 0, sizeof o);
    o.mode = mode;
    o.img_h = o.img_w = 256;
    o.max_bbox[0] = o.max_bbox[1] = 128;
    o.max_delta[0] = o.max_delta[1] = 40;
    o.min_margin[0] = o.min_margin[1] = 20;
    o.num_vertices[0] = 4;
    o.num_vertices[1] = 12;
    o.max_angle = 4.0;
    o.length_range[0] = 10;
    o.length_range[1] = 100;
    o.brush_width[0] = 10;
    o.brush_width[1] = 40;
    o.area_ratio[0] = 0.15;
    o.area_ratio[1] = 0.5;
    return o;
}

static int bad_range(const char *name, int64_t lo, int64_t hi) {
    return duet__error(DUET_EINVAL, "LoadMask: %s = (%lld, %lld) must be a range [lo, hi) with "
                       "0 <= lo < hi", name, (long long)lo, (long long)hi);
}

int duet_mask_options_check(const duet_mask_opts *o) {
    if (o->mode == DUET_MASK_SET && (o->mask_list_file == NULL || o->prefix == NULL))
        return duet__error(DUET_EINVAL, "LoadMask: mask_mode 'set' needs mask_list_file and "
                           "prefix");
    if (o->mode != DUET_MASK_BBOX && o->mode != DUET_MASK_IRREGULAR) return DUET_OK;
    if (o->img_h < 1 || o->img_w < 1 || o->img_h > 16384 || o->img_w > 16384)
        return duet__error(DUET_EINVAL, "LoadMask: img_shape (%lld, %lld) must be 1..16384",
                           (long long)o->img_h, (long long)o->img_w);
    if (o->mode == DUET_MASK_BBOX) {
        const int64_t img[2] = {o->img_h, o->img_w};
        for (int i = 0; i < 2; i++) {
            if (o->max_bbox[i] < 1 || o->max_delta[i] < 0 || o->min_margin[i] < 0)
                return duet__error(DUET_EINVAL, "LoadMask: max_bbox_shape must be >= 1, "
                                   "max_bbox_delta and min_margin >= 0");
            if (o->max_bbox[i] > img[i])
                return duet__error(DUET_EINVAL, "LoadMask: max_bbox_shape (%lld, %lld) is "
                                   "larger than img_shape (%lld, %lld)",
                                   (long long)o->max_bbox[0], (long long)o->max_bbox[1],
                                   (long long)o->img_h, (long long)o->img_w);
            if (o->max_delta[i] / 2 * 2 >= o->max_bbox[i])
                return duet__error(DUET_EINVAL, "LoadMask: max_bbox_delta (%lld, %lld) must be "
                                   "smaller than max_bbox_shape (%lld, %lld)",
                                   (long long)o->max_delta[0], (long long)o->max_delta[1],
                                   (long long)o->max_bbox[0], (long long)o->max_bbox[1]);
            /* np.random.randint(margin, img - margin - max) needs a non-empty range */
            if (img[i] - o->max_bbox[i] - o->min_margin[i] <= o->min_margin[i])
                return duet__error(DUET_EINVAL, "LoadMask: min_margin (%lld, %lld) cannot be "
                                   "kept for img_shape (%lld, %lld) and max_bbox_shape (%lld, "
                                   "%lld)", (long long)o->min_margin[0],
                                   (long long)o->min_margin[1], (long long)o->img_h,
                                   (long long)o->img_w, (long long)o->max_bbox[0],
                                   (long long)o->max_bbox[1]);
        }
        return DUET_OK;
    }
    if (o->num_vertices[0] < 0 || o->num_vertices[1] <= o->num_vertices[0])
        return bad_range("num_vertices", o->num_vertices[0], o->num_vertices[1]);
    if (o->length_range[0] < 0 || o->length_range[1] <= o->length_range[0])
        return bad_range("length_range", o->length_range[0], o->length_range[1]);
    if (o->brush_width[0] < 0 || o->brush_width[1] <= o->brush_width[0])
        return bad_range("brush_width", o->brush_width[0], o->brush_width[1]);
    if (!(o->max_angle > 0) || o->max_angle > 1e6)
        return duet__error(DUET_EINVAL, "LoadMask: max_angle = %g must be > 0", o->max_angle);
    if (!(o->area_ratio[0] >= 0 && o->area_ratio[0] < o->area_ratio[1] &&
          o->area_ratio[1] <= 1))
        return duet__error(DUET_EINVAL, "LoadMask: area_ratio_range = (%g, %g) must satisfy "
                           "0 <= min < max <= 1", o->area_ratio[0], o->area_ratio[1]);
    return DUET_OK;
}

/* np.random.randint(lo, hi): [lo, hi). */
static int64_t randint(duet_rng *rng, int64_t lo, int64_t hi) {
    return duet_rng_int(rng, lo, hi - 1);
}

void duet_mask_random_bbox(const duet_mask_opts *o, duet_rng *rng, int64_t bbox[4]) {
    int64_t top = randint(rng, o->min_margin[0], o->img_h - o->min_margin[0] - o->max_bbox[0]);
    int64_t left = randint(rng, o->min_margin[1], o->img_w - o->min_margin[1] - o->max_bbox[1]);
    int64_t dt = randint(rng, 0, o->max_delta[0] / 2 + 1);
    int64_t dl = randint(rng, 0, o->max_delta[1] / 2 + 1);
    bbox[0] = top + dt;
    bbox[1] = left + dl;
    bbox[2] = o->max_bbox[0] - dt;
    bbox[3] = o->max_bbox[1] - dl;
}

/* Every pixel (x = column, y = row) within width / 2 of the segment
 * (x0, y0)-(x1, y1) set to 1, clipped to the mask. */
static void draw_stroke(uint8_t *m, int64_t h, int64_t w, int64_t x0, int64_t y0, int64_t x1,
                        int64_t y1, int64_t width) {
    double r = (double)width / 2.0;
    int64_t pad = (int64_t)ceil(r);
    int64_t xa = (x0 < x1 ? x0 : x1) - pad, xb = (x0 > x1 ? x0 : x1) + pad;
    int64_t ya = (y0 < y1 ? y0 : y1) - pad, yb = (y0 > y1 ? y0 : y1) + pad;
    if (xa < 0) xa = 0;
    if (ya < 0) ya = 0;
    if (xb > w - 1) xb = w - 1;
    if (yb > h - 1) yb = h - 1;
    double dx = (double)(x1 - x0), dy = (double)(y1 - y0), len2 = dx * dx + dy * dy;
    for (int64_t y = ya; y <= yb; y++)
        for (int64_t x = xa; x <= xb; x++) {
            double px = (double)(x - x0), py = (double)(y - y0);
            double t = len2 > 0 ? (px * dx + py * dy) / len2 : 0;
            t = t < 0 ? 0 : t > 1 ? 1 : t;
            double ex = px - t * dx, ey = py - t * dy;
            if (ex * ex + ey * ey <= r * r) m[y * w + x] = 1;
        }
}

/* random_irregular_mask: one draw. Its start_x is drawn over the width but
 * used as cv2's y (a row), start_y over the height as x (a column); kept. */
static void irregular_once(const duet_mask_opts *o, duet_rng *rng, uint8_t *m,
                           int64_t *nstrokes, int64_t *nsegments) {
    const int64_t h = o->img_h, w = o->img_w;
    memset(m, 0, (size_t)(h * w));
    int64_t nv = randint(rng, o->num_vertices[0], o->num_vertices[1]);
    int64_t segs = 0;
    int64_t max_angle = (int64_t)ceil(o->max_angle); /* randint(0, 4.0) is [0, 4) */
    for (int64_t i = 0; i < nv; i++) {
        int64_t sx = randint(rng, 0, w), sy = randint(rng, 0, h);
        int64_t nd = randint(rng, 1, 6);
        int64_t angle[5], length[5], width[5];
        for (int64_t d = 0; d < nd; d++) angle[d] = randint(rng, 0, max_angle);
        for (int64_t d = 0; d < nd; d++)
            length[d] = randint(rng, o->length_range[0], o->length_range[1]);
        for (int64_t d = 0; d < nd; d++)
            width[d] = randint(rng, o->brush_width[0], o->brush_width[1]);
        for (int64_t d = 0; d < nd; d++) {
            double a = 0.01 + (double)angle[d];
            if (i % 2 == 0) a = 2 * M_PI - a;
            /* .astype(np.int32): toward zero */
            int64_t ex = (int64_t)((double)sx + (double)length[d] * sin(a));
            int64_t ey = (int64_t)((double)sy + (double)length[d] * cos(a));
            /* cv2.line(mask, (start_y, start_x), (end_y, end_x)): (column, row) */
            draw_stroke(m, h, w, sy, sx, ey, ex, width[d]);
            sx = ex;
            sy = ey;
            segs++;
        }
    }
    *nstrokes = nv;
    *nsegments = segs;
}

int duet_mask_irregular(const duet_mask_opts *o, duet_rng *rng, uint8_t *mask, int64_t *strokes,
                        int64_t *segments) {
    DUET_TRY(duet_mask_options_check(o));
    const double area = (double)(o->img_h * o->img_w);
    for (int tries = 0; tries < 1000; tries++) {
        int64_t nv = 0, ns = 0, sum = 0;
        irregular_once(o, rng, mask, &nv, &ns);
        for (int64_t i = 0; i < o->img_h * o->img_w; i++) sum += mask[i];
        double ratio = (double)sum / area;
        if (o->area_ratio[0] < ratio && ratio < o->area_ratio[1]) {
            if (strokes) *strokes = nv;
            if (segments) *segments = ns;
            return DUET_OK;
        }
    }
    return duet__error(DUET_EINVAL, "LoadMask: 1000 irregular masks of %lldx%lld, none with a "
                       "hole area ratio in (%g, %g): widen area_ratio_range or change the "
                       "strokes", (long long)o->img_h, (long long)o->img_w, o->area_ratio[0],
                       o->area_ratio[1]);
}

/* ---- OpenCV's bilinear resize ------------------------------------------------- */

#define COEF_BITS 11
#define COEF_ONE (1 << COEF_BITS)

/* cv::resize's linear taps: first source index and the two 11-bit weights
 * (saturate_cast<short>(w * 2048)). Columns (`clamp`): a position before the
 * first or after the last pixel takes that pixel alone. Rows: OpenCV keeps
 * the weights there and repeats the edge row instead (the index may be -1
 * or in - 1; the caller clamps it), which rounds differently. */
static void linear_taps(int64_t in, int64_t out, bool clamp, int64_t *first, int16_t *wt) {
    const double inv = (double)out / (double)in, scale = 1.0 / inv;
    for (int64_t d = 0; d < out; d++) {
        float f = (float)((d + 0.5) * scale - 0.5);
        int64_t s = (int64_t)floorf(f);
        f -= (float)s;
        if (clamp && s < 0) f = 0, s = 0;
        if (clamp && s >= in - 1) f = 0, s = in - 1;
        first[d] = s;
        wt[d * 2] = (int16_t)lrintf((1.f - f) * COEF_ONE);
        wt[d * 2 + 1] = (int16_t)lrintf(f * COEF_ONE);
    }
}

static int64_t clamp_row(int64_t i, int64_t n) { return i < 0 ? 0 : i >= n ? n - 1 : i; }

int duet_image_resize_bilinear_u8(const uint8_t *src, int64_t h, int64_t w, int c,
                                  uint8_t *dst, int64_t oh, int64_t ow) {
    if (h < 1 || w < 1 || oh < 1 || ow < 1 || c < 1 || c > 4)
        return duet__error(DUET_EINVAL, "bilinear resize: bad sizes %lldx%lld -> %lldx%lld "
                           "(%d channels)", (long long)w, (long long)h, (long long)ow,
                           (long long)oh, c);
    int64_t *xs = malloc(sizeof(int64_t) * (size_t)ow), *ys = malloc(sizeof(int64_t) * (size_t)oh);
    int16_t *xw = malloc(sizeof(int16_t) * 2 * (size_t)ow);
    int16_t *yw = malloc(sizeof(int16_t) * 2 * (size_t)oh);
    int32_t *rows = malloc(sizeof(int32_t) * (size_t)h * (size_t)(ow * c));
    if (!xs || !ys || !xw || !yw || !rows) {
        free(xs), free(ys), free(xw), free(yw), free(rows);
        return duet__error(DUET_ENOMEM, "bilinear resize: out of memory for %lldx%lld",
                           (long long)ow, (long long)oh);
    }
    linear_taps(w, ow, true, xs, xw);
    linear_taps(h, oh, false, ys, yw);
    /* Horizontal pass: int sums of bytes times 11-bit weights. */
    for (int64_t y = 0; y < h; y++) {
        const uint8_t *s = src + y * w * c;
        int32_t *r = rows + y * ow * c;
        for (int64_t x = 0; x < ow; x++) {
            int64_t x1 = xs[x] + 1 < w ? xs[x] + 1 : xs[x];
            for (int ch = 0; ch < c; ch++)
                r[x * c + ch] = (int32_t)s[xs[x] * c + ch] * xw[x * 2] +
                                (int32_t)s[x1 * c + ch] * xw[x * 2 + 1];
        }
    }
    /* Vertical pass as OpenCV's VResizeLinearVec_32s8u computes it (its
     * universal-intrinsics path, taken with and without setUseOptimized):
     * each row sum >> 4 times the weight, the high 16 bits of each product
     * added, then (sum + 2) >> 2. Its scalar FixedPtCast ((v + 2^21) >> 22)
     * is one level higher on some pixels. */
    for (int64_t y = 0; y < oh; y++) {
        const int32_t *r0 = rows + clamp_row(ys[y], h) * ow * c;
        const int32_t *r1 = rows + clamp_row(ys[y] + 1, h) * ow * c;
        uint8_t *d = dst + y * ow * c;
        for (int64_t i = 0; i < ow * c; i++) {
            int32_t a = ((r0[i] >> 4) * yw[y * 2]) >> 16;
            int32_t b = ((r1[i] >> 4) * yw[y * 2 + 1]) >> 16;
            int32_t q = (a + b + 2) >> 2;
            d[i] = (uint8_t)(q < 0 ? 0 : q > 255 ? 255 : q);
        }
    }
    free(xs), free(ys), free(xw), free(yw), free(rows);
    return DUET_OK;
}

/* ---- the dataset ----------------------------------------------------------------- */

typedef struct inpainting {
    char **images, **masks; /* full paths; masks[i] may be NULL */
    int64_t n;
    char **set;             /* mask set files (mode set) */
    int64_t nset;
    duet_mask_opts mask;
    duet_istep *steps;
    size_t nsteps;
    int64_t max_pixels;
} inpainting;

static void free_list(char **l, int64_t n) {
    if (l == NULL) return;
    for (int64_t i = 0; i < n; i++) free(l[i]);
    free(l);
}

static void inpainting_destroy(void *impl) {
    inpainting *t = impl;
    if (t == NULL) return;
    free_list(t->images, t->n);
    free_list(t->masks, t->n);
    free_list(t->set, t->nset);
    free(t->steps);
    free(t);
}

/* The lines of `file`: first word -> prefix/word into (*first)[i], second
 * word (when `second`) into (*second)[i] or NULL. Blank lines skipped. */
static int read_list(const char *file, const char *prefix, const char *what, char ***first,
                     char ***second, int64_t *count) {
    unsigned char *bytes = NULL;
    size_t len = 0;
    DUET_TRY(duet__read_file(file, &bytes, &len));
    char *text = malloc(len + 1);
    if (text != NULL) memcpy(text, bytes, len), text[len] = '\0';
    duet_aligned_free(bytes);
    if (text == NULL) return duet__error(DUET_ENOMEM, "%s: out of memory", file);
    int64_t cap = 0, n = 0;
    char **a = NULL, **b = NULL;
    int rc = DUET_OK;
    int64_t line = 0;
    char *save = NULL;
    for (char *p = text; rc == DUET_OK && p != NULL && *p != '\0';) {
        char *nl = strchr(p, '\n');
        if (nl) *nl = '\0';
        line++;
        char *w1 = strtok_r(p, " \t\r", &save);
        char *w2 = w1 ? strtok_r(NULL, " \t\r", &save) : NULL;
        p = nl ? nl + 1 : NULL;
        if (w1 == NULL) continue;
        if (n == cap) {
            cap = cap ? cap * 2 : 64;
            char **na = realloc(a, sizeof(char *) * (size_t)cap);
            if (na) a = na;
            char **nb = na && second ? realloc(b, sizeof(char *) * (size_t)cap) : b;
            if (nb) b = nb;
            if (na == NULL || (second && nb == NULL)) {
                rc = duet__error(DUET_ENOMEM, "%s: out of memory", file);
                break;
            }
        }
        a[n] = duet__path_join(prefix, w1);
        if (second) b[n] = w2 ? duet__path_join(prefix, w2) : NULL;
        n++;
        if (a[n - 1] == NULL || (second && w2 && b[n - 1] == NULL)) {
            rc = duet__error(DUET_ENOMEM, "%s: out of memory", file);
            break;
        }
        FILE *f = fopen(a[n - 1], "rb");
        if (f == NULL)
            rc = duet__error(DUET_ENOTFOUND, "%s:%lld: %s %s not found", file, (long long)line,
                             what, a[n - 1]);
        else fclose(f);
    }
    free(text);
    if (rc == DUET_OK && n == 0)
        rc = duet__error(DUET_ENOTFOUND, "%s: no %s listed", file, what);
    if (rc != DUET_OK) {
        free_list(a, n);
        free_list(b, n);
        return rc;
    }
    *first = a;
    if (second) *second = b;
    *count = n;
    return DUET_OK;
}

static int check_steps(const duet_istep *s, size_t n, const duet_mask_opts *mask) {
    bool loaded = false, has_mask = false, is_float = false, formatted = false, masked = false;
    for (size_t i = 0; i < n; i++) {
        const duet_istep *st = &s[i];
        if (formatted && st->kind != DUET_ISTEP_FORMAT)
            return duet__error(DUET_ECONFIG, "%s: only ImageToTensor/ToTensor/Collect may follow "
                               "Collect", st->where);
        if (st->kind == DUET_ISTEP_LOAD) {
            if (loaded) return duet__error(DUET_ECONFIG, "%s: gt_img is loaded twice", st->where);
            loaded = true;
            continue;
        }
        if (!loaded)
            return duet__error(DUET_ECONFIG, "%s: comes before LoadImageFromFile (key gt_img)",
                               st->where);
        switch (st->kind) {
        case DUET_ISTEP_LOAD_MASK:
            if (has_mask) return duet__error(DUET_ECONFIG, "%s: a second LoadMask", st->where);
            has_mask = true;
            break;
        case DUET_ISTEP_CROP:
        case DUET_ISTEP_RESIZE:
            if (is_float)
                return duet__error(DUET_EUNSUPPORTED, "%s: duet crops and resizes 8-bit images "
                                   "only: put it before Normalize and RescaleToZeroOne",
                                   st->where);
            break;
        case DUET_ISTEP_FLIP:
            if (st->flip_mask && !has_mask)
                return duet__error(DUET_ECONFIG, "%s: flips 'mask' before LoadMask", st->where);
            break;
        case DUET_ISTEP_RESCALE:
        case DUET_ISTEP_NORMALIZE: is_float = true; break;
        case DUET_ISTEP_MASKED:
            if (!has_mask)
                return duet__error(DUET_ECONFIG, "%s: GetMaskedImage needs LoadMask before it",
                                   st->where);
            masked = true;
            break;
        case DUET_ISTEP_FORMAT: formatted = true; break;
        default: break;
        }
    }
    if (!masked)
        return duet__error(DUET_ECONFIG, "%s: the pipeline needs LoadMask and GetMaskedImage "
                           "(the model takes masked_img and mask)",
                           n ? s[n - 1].where : "pipeline");
    (void)mask;
    return DUET_OK;
}

static int inpainting_get(const void *impl, int64_t index, duet_rng *rng, duet_batch *out);

static const char *inpainting_name(const void *impl, int64_t index) {
    const inpainting *t = impl;
    const char *p = t->images[index % t->n];
    const char *slash = strrchr(p, '/');
    return slash ? slash + 1 : p;
}

static const duet_dataset_ops inpainting_ops = {
    .name = "ImgInpaintingDataset",
    .get = inpainting_get,
    .sample_name = inpainting_name,
    .destroy = inpainting_destroy,
};

int duet_inpainting_dataset_create(const duet_inpainting_opts *o, duet_dataset **out) {
    *out = NULL;
    if (o->ann_file == NULL)
        return duet__error(DUET_EINVAL, "ImgInpaintingDataset: ann_file is required");
    DUET_TRY(check_steps(o->steps, o->nsteps, &o->mask));
    DUET_TRY(duet_mask_options_check(&o->mask));
    inpainting *t = calloc(1, sizeof *t);
    if (t == NULL) return duet__error(DUET_ENOMEM, "ImgInpaintingDataset: out of memory");
    t->mask = o->mask;
    t->max_pixels = o->max_pixels;
    t->nsteps = o->nsteps;
    t->steps = malloc(sizeof(duet_istep) * (o->nsteps ? o->nsteps : 1));
    int rc = t->steps ? DUET_OK : duet__error(DUET_ENOMEM, "ImgInpaintingDataset: out of memory");
    if (rc == DUET_OK) memcpy(t->steps, o->steps, sizeof(duet_istep) * o->nsteps);
    const char *prefix = o->data_prefix ? o->data_prefix : ".";
    if (rc == DUET_OK)
        rc = read_list(o->ann_file, prefix, "image", &t->images, &t->masks, &t->n);
    if (rc == DUET_OK && o->mask.mode == DUET_MASK_SET)
        rc = read_list(o->mask.mask_list_file, o->mask.prefix, "mask", &t->set, NULL, &t->nset);
    if (rc == DUET_OK && o->mask.mode == DUET_MASK_FILE)
        for (int64_t i = 0; i < t->n && rc == DUET_OK; i++)
            if (t->masks[i] == NULL)
                rc = duet__error(DUET_ECONFIG, "%s: line of %s has no mask file (mask_mode "
                                 "'file' reads the second word of each line)", o->ann_file,
                                 t->images[i]);
    if (rc != DUET_OK) {
        inpainting_destroy(t);
        return duet__error_context(rc, "ImgInpaintingDataset");
    }
    t->mask.mask_list_file = t->mask.prefix = NULL; /* read; not kept */
    return duet_dataset_create(&inpainting_ops, t, t->n, out);
}

/* ---- samples ------------------------------------------------------------------------ */

typedef struct sample {
    int64_t h, w;      /* gt_img */
    uint8_t *u8;       /* gt_img, HWC 3 channels, until it turns float */
    float *f;
    int64_t mh, mw;    /* mask */
    uint8_t *mask;     /* 0/1 */
    bool has_bbox;
    int64_t bbox[4];
    float *masked;     /* masked_img, HWC */
    bool bgr;          /* the channels' order so far: loaded BGR, swapped by to_rgb */
    const char *path;
} sample;

static void sample_free(sample *s) {
    free(s->u8);
    free(s->f);
    free(s->mask);
    free(s->masked);
}

static int load_image(const char *path, int64_t max_pixels, bool bgr, sample *s) {
    duet_image *im = NULL;
    DUET_TRY(duet_image_load_limited(path, max_pixels, &im));
    s->h = im->height;
    s->w = im->width;
    s->u8 = im->data;
    im->data = NULL;
    duet_image_destroy(im);
    if (bgr)
        for (int64_t i = 0; i < s->h * s->w; i++) {
            uint8_t v = s->u8[i * 3];
            s->u8[i * 3] = s->u8[i * 3 + 2];
            s->u8[i * 3 + 2] = v;
        }
    return DUET_OK;
}

/* A mask file: its first channel (the decoder gives RGB; gray is replicated),
 * nonzero -> 1, as mmcv.imfrombytes(flag='unchanged')[..., 0:1] > 0. */
static int load_mask_file(const char *path, int64_t max_pixels, sample *s) {
    duet_image *im = NULL;
    DUET_TRY(duet_image_load_limited(path, max_pixels, &im));
    s->mh = im->height;
    s->mw = im->width;
    s->mask = malloc((size_t)(s->mh * s->mw));
    if (s->mask == NULL) {
        duet_image_destroy(im);
        return duet__error(DUET_ENOMEM, "%s: out of memory", path);
    }
    /* BGR's channel 0 is the file's blue */
    for (int64_t i = 0; i < s->mh * s->mw; i++) s->mask[i] = im->data[i * 3 + 2] > 0;
    duet_image_destroy(im);
    return DUET_OK;
}

static int make_mask(const inpainting *t, int64_t index, duet_rng *rng, sample *s) {
    const duet_mask_opts *o = &t->mask;
    if (o->mode == DUET_MASK_SET) {
        int64_t k = randint(rng, 0, t->nset);
        return load_mask_file(t->set[k], t->max_pixels, s);
    }
    if (o->mode == DUET_MASK_FILE) return load_mask_file(t->masks[index], t->max_pixels, s);
    s->mh = o->img_h;
    s->mw = o->img_w;
    s->mask = calloc((size_t)(s->mh * s->mw), 1);
    if (s->mask == NULL) return duet__error(DUET_ENOMEM, "LoadMask: out of memory");
    if (o->mode == DUET_MASK_IRREGULAR) return duet_mask_irregular(o, rng, s->mask, NULL, NULL);
    duet_mask_random_bbox(o, rng, s->bbox);
    s->has_bbox = true;
    for (int64_t y = s->bbox[0]; y < s->bbox[0] + s->bbox[2]; y++)
        memset(s->mask + y * s->mw + s->bbox[1], 1, (size_t)s->bbox[3]);
    return DUET_OK;
}

static int crop_u8(sample *s, int64_t x, int64_t y, int64_t cw, int64_t ch) {
    uint8_t *d = malloc((size_t)(cw * ch * 3));
    if (d == NULL) return duet__error(DUET_ENOMEM, "%s: out of memory", s->path);
    for (int64_t r = 0; r < ch; r++)
        memcpy(d + r * cw * 3, s->u8 + ((y + r) * s->w + x) * 3, (size_t)(cw * 3));
    free(s->u8);
    s->u8 = d;
    s->h = ch;
    s->w = cw;
    return DUET_OK;
}

static int to_float(sample *s) {
    if (s->f != NULL) return DUET_OK;
    s->f = malloc(sizeof(float) * (size_t)(s->h * s->w * 3));
    if (s->f == NULL) return duet__error(DUET_ENOMEM, "%s: out of memory", s->path);
    for (int64_t i = 0; i < s->h * s->w * 3; i++) s->f[i] = (float)s->u8[i];
    free(s->u8);
    s->u8 = NULL;
    return DUET_OK;
}

/* Flip of an (h, w) array of `px`-byte pixels in place. */
static void flip_bytes(uint8_t *d, int64_t h, int64_t w, size_t px, bool vertical) {
    uint8_t tmp[16];
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

static int run_step(const inpainting *t, const duet_istep *st, int64_t index, duet_rng *rng,
                    const char *mask_path, sample *s) {
    switch (st->kind) {
    case DUET_ISTEP_LOAD:
        s->bgr = st->bgr;
        return load_image(s->path, t->max_pixels, st->bgr, s);
    case DUET_ISTEP_LOAD_MASK:
        if (mask_path != NULL) return load_mask_file(mask_path, t->max_pixels, s);
        return make_mask(t, index, rng, s);
    case DUET_ISTEP_CROP: {
        /* Crop: min(size, crop) windows; random: x then y offset drawn */
        int64_t ch = st->height < s->h ? st->height : s->h;
        int64_t cw = st->width < s->w ? st->width : s->w;
        int64_t x = (s->w - cw) / 2, y = (s->h - ch) / 2;
        if (st->random_crop) {
            x = randint(rng, 0, s->w - cw + 1);
            y = randint(rng, 0, s->h - ch + 1);
        }
        return crop_u8(s, x, y, cw, ch);
    }
    case DUET_ISTEP_RESIZE: {
        uint8_t *d = malloc((size_t)(st->width * st->height * 3));
        if (d == NULL) return duet__error(DUET_ENOMEM, "%s: out of memory", s->path);
        int rc = st->cubic
                     ? duet__cv_resize_cubic_u8(s->u8, s->h, s->w, 3, d, st->height, st->width)
                     : duet_image_resize_bilinear_u8(s->u8, s->h, s->w, 3, d, st->height,
                                                     st->width);
        if (rc != DUET_OK) {
            free(d);
            return duet__error_context(rc, "%s", s->path);
        }
        free(s->u8);
        s->u8 = d;
        s->h = st->height;
        s->w = st->width;
        return DUET_OK;
    }
    case DUET_ISTEP_FLIP:
        if (duet_rng_uniform_double(rng) < st->flip_ratio) {
            if (s->u8) flip_bytes(s->u8, s->h, s->w, 3, st->vertical);
            else flip_bytes((uint8_t *)s->f, s->h, s->w, 3 * sizeof(float), st->vertical);
            if (st->flip_mask) flip_bytes(s->mask, s->mh, s->mw, 1, st->vertical);
        }
        return DUET_OK;
    case DUET_ISTEP_RESCALE:
        DUET_TRY(to_float(s));
        for (int64_t i = 0; i < s->h * s->w * 3; i++) s->f[i] = s->f[i] / 255.0f;
        return DUET_OK;
    case DUET_ISTEP_NORMALIZE: {
        /* mmcv.imnormalize as translation.c: float32 subtract, double multiply */
        DUET_TRY(to_float(s));
        double inv[3];
        for (int c = 0; c < 3; c++) inv[c] = 1.0 / (double)st->std[c];
        if (st->to_rgb) s->bgr = !s->bgr;
        for (int64_t i = 0; i < s->h * s->w; i++) {
            if (st->to_rgb) {
                float v = s->f[i * 3];
                s->f[i * 3] = s->f[i * 3 + 2];
                s->f[i * 3 + 2] = v;
            }
            for (int c = 0; c < 3; c++)
                s->f[i * 3 + c] = (float)((double)(s->f[i * 3 + c] - st->mean[c]) * inv[c]);
        }
        return DUET_OK;
    }
    case DUET_ISTEP_MASKED: {
        if (s->mh != s->h || s->mw != s->w)
            return duet__error(DUET_ESHAPE, "%s: GetMaskedImage: the mask is %lldx%lld (WxH), "
                               "but %s is %lldx%lld after the pipeline's Crop/Resize: the "
                               "mask must be %lldx%lld (duet infer --mask: a %lldx%lld image; "
                               "a config: LoadMask's img_shape)", st->where,
                               (long long)s->mw, (long long)s->mh, s->path, (long long)s->w,
                               (long long)s->h, (long long)s->w, (long long)s->h,
                               (long long)s->w, (long long)s->h);
        DUET_TRY(to_float(s));
        free(s->masked);
        s->masked = malloc(sizeof(float) * (size_t)(s->h * s->w * 3));
        if (s->masked == NULL) return duet__error(DUET_ENOMEM, "%s: out of memory", s->path);
        /* clean_img * (1. - mask): float32 times float64 0/1 */
        for (int64_t i = 0; i < s->h * s->w; i++)
            for (int c = 0; c < 3; c++)
                s->masked[i * 3 + c] = s->mask[i] ? s->f[i * 3 + c] * 0.0f : s->f[i * 3 + c];
        return DUET_OK;
    }
    case DUET_ISTEP_FORMAT:
        return DUET_OK;
    }
    return DUET_OK;
}

/* HWC float -> (1, 3, H, W) named tensor. */
static int add_image(duet_batch *out, const char *name, const float *hwc, int64_t h, int64_t w) {
    duet_tensor *t = NULL;
    DUET_TRY(duet_tensor_create(4, (int64_t[]){1, 3, h, w}, &t));
    for (int64_t i = 0; i < h * w; i++)
        for (int c = 0; c < 3; c++) t->data[c * h * w + i] = hwc[i * 3 + c];
    int rc = duet_batch_add_tensor(out, name, t);
    duet_tensor_release(t);
    return rc;
}

static int build_batch(const sample *s, duet_batch *out) {
    DUET_TRY(add_image(out, "gt_img", s->f, s->h, s->w));
    DUET_TRY(add_image(out, "masked_img", s->masked, s->h, s->w));
    duet_tensor *m = NULL;
    DUET_TRY(duet_tensor_create(4, (int64_t[]){1, 1, s->mh, s->mw}, &m));
    for (int64_t i = 0; i < s->mh * s->mw; i++) m->data[i] = (float)s->mask[i];
    int rc = duet_batch_add_tensor(out, "mask", m);
    duet_tensor_release(m);
    DUET_TRY(rc);
    if (s->has_bbox) {
        duet_tensor *b = NULL;
        DUET_TRY(duet_tensor_create(2, (int64_t[]){1, 4}, &b));
        for (int k = 0; k < 4; k++) b->data[k] = (float)s->bbox[k];
        rc = duet_batch_add_tensor(out, "mask_bbox", b);
        duet_tensor_release(b);
        DUET_TRY(rc);
    }
    /* what a writer of these images needs: MMEditing's inpainting data is
     * BGR (LoadImageFromFile's default, Normalize without to_rgb), which its
     * cv2.imwrite writes as such; a PNG writer of RGB must swap it back */
    const char *order = s->bgr ? "bgr" : "rgb";
    DUET_TRY(duet_batch_add_meta(out, "channel_order", 1, &order));
    return duet_batch_add_meta(out, "gt_img_path", 1, &s->path);
}

static int run_pipeline(const inpainting *t, int64_t index, duet_rng *rng, const char *path,
                        const char *mask_path, duet_batch *out) {
    sample s;
    memset(&s, 0, sizeof s);
    s.path = path;
    int rc = DUET_OK;
    for (size_t i = 0; i < t->nsteps && rc == DUET_OK; i++)
        rc = run_step(t, &t->steps[i], index, rng, mask_path, &s);
    if (rc == DUET_OK) rc = build_batch(&s, out);
    sample_free(&s);
    return rc;
}

static int inpainting_get(const void *impl, int64_t index, duet_rng *rng, duet_batch *out) {
    const inpainting *t = impl;
    return run_pipeline(t, index, rng, t->images[index], NULL, out);
}

int duet_inpainting_one_image(const duet_istep *steps, size_t nsteps, const char *path,
                              const char *mask_path, int64_t max_pixels, duet_batch *out) {
    DUET_TRY(check_steps(steps, nsteps, NULL));
    inpainting t;
    memset(&t, 0, sizeof t);
    t.steps = (duet_istep *)steps;
    t.nsteps = nsteps;
    t.max_pixels = max_pixels;
    duet_rng rng = duet_rng_make(0, 0);
    return run_pipeline(&t, 0, &rng, path, mask_path, out);
}
