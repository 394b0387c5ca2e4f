/* MMEditing 0.x's ImgInpaintingDataset as a duet dataset of named tensors
 * (its pipeline runs through the engine, pipeline.c), the pipeline rows of
 * its masks (LoadMask, GetMaskedImage), the mask generators of
 * mmedit.core.mask (random_bbox, get_irregular_mask) and OpenCV's bilinear
 * resize that mmcv.imresize runs by default. Every random choice comes from
 * the sample's rng, in MMEditing's order of np.random calls. */
#include <math.h>
#include <string.h>

#include "data/pipeline.h"
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

/* ---- LoadMask, GetMaskedImage ------------------------------------------------------ */

/* An int n is the range [n, n + 1), as MMEditing's; else a pair [lo, hi). */
static int read_range(duet_config *k, const char *key, int64_t lo_def, int64_t hi_def,
                      int64_t v[2]) {
    if (duet_config_kind(k, key) == DUET_CONFIG_INT) {
        DUET_TRY(duet_config_get_int_in(k, key, 0, 16384, &v[0]));
        v[1] = v[0] + 1;
        return DUET_OK;
    }
    if (!duet_config_has(k, key)) {
        v[0] = lo_def, v[1] = hi_def;
        return DUET_OK;
    }
    return duet__pipe_int_pair(k, key, 0, 0, false, v);
}

static int read_mask_config(duet_config *k, duet_mask_opts *m) {
    duet_mask_mode mm = m->mode;
    int64_t v[2];
    if (mm == DUET_MASK_BBOX || mm == DUET_MASK_IRREGULAR) {
        DUET_TRY(duet__pipe_int_pair(k, "img_shape", 256, 1, false, v));
        m->img_h = v[0], m->img_w = v[1];
    }
    if (mm == DUET_MASK_BBOX) {
        DUET_TRY(duet__pipe_int_pair(k, "max_bbox_shape", 128, 1, false, m->max_bbox));
        DUET_TRY(duet__pipe_int_pair(k, "max_bbox_delta", 40, 0, false, m->max_delta));
        DUET_TRY(duet__pipe_int_pair(k, "min_margin", 20, 0, false, m->min_margin));
    }
    if (mm == DUET_MASK_IRREGULAR) {
        DUET_TRY(read_range(k, "num_vertices", 4, 8, m->num_vertices));
        DUET_TRY(read_range(k, "length_range", 10, 100, m->length_range));
        DUET_TRY(read_range(k, "brush_width", 10, 40, m->brush_width));
        DUET_TRY(duet_config_get_double_in_or(k, "max_angle", 4.0, 1e-9, 1e6, &m->max_angle));
        if (duet_config_has(k, "area_ratio_range")) {
            double d[3];
            size_t n = 0;
            DUET_TRY(duet_config_get_double_array(k, "area_ratio_range", d, 3, &n));
            if (n != 2)
                return duet__pipe_bad(k, "area_ratio_range", "must be two numbers [min, max]");
            m->area_ratio[0] = d[0], m->area_ratio[1] = d[1];
        }
    }
    if (mm == DUET_MASK_SET) {
        const char *s = NULL;
        DUET_TRY(duet_config_get_string(k, "mask_list_file", &m->mask_list_file));
        DUET_TRY(duet_config_get_string(k, "prefix", &m->prefix));
        DUET_TRY(duet__pipe_string_in(k, "io_backend", "disk", (const char *const[]){"disk", NULL},
                                      &s));
        DUET_TRY(duet_config_get_string_or(k, "flag", "unchanged", &s));
        if (duet_config_has(k, "file_client_kwargs"))
            DUET_TRY(duet_config_mark_used(k, "file_client_kwargs"));
    }
    return DUET_OK;
}

/* LoadMask's options; mask_list_file and prefix are copied here (the
 * config's strings do not outlive the read). */
typedef struct load_mask_opts {
    duet_mask_opts mask;
    char *list_file, *prefix;
} load_mask_opts;

static void free_load_mask(void *p) {
    load_mask_opts *o = p;
    if (o == NULL) return;
    free(o->list_file);
    free(o->prefix);
    free(o);
}

static int read_load_mask(duet_config *c, duet__pipe_read *r, duet__step *st) {
    static const char *const modes[] = {"bbox", "irregular", "set", "file", NULL};
    const char *mode = NULL;
    DUET_TRY(duet__pipe_string_in(c, "mask_mode", "bbox", modes, &mode));
    DUET_TRY(duet__pipe_opts(st, sizeof(load_mask_opts)));
    load_mask_opts *o = st->opts;
    duet_mask_mode mm = mode[0] == 'b' ? DUET_MASK_BBOX : mode[0] == 'i' ? DUET_MASK_IRREGULAR
                        : mode[0] == 's' ? DUET_MASK_SET : DUET_MASK_FILE;
    o->mask = duet_mask_options_default(mm);
    if (!duet_config_has(c, "mask_config")) {
        if (mm == DUET_MASK_SET)
            return duet__pipe_bad(c, "mask_mode", "= \"set\" needs mask_config.mask_list_file "
                                  "and prefix");
    } else {
        duet_config *k = NULL;
        DUET_TRY(duet_config_sub(c, "mask_config", &k));
        int rc = read_mask_config(k, &o->mask);
        if (rc == DUET_OK && mm == DUET_MASK_SET) {
            o->list_file = duet__strdup(o->mask.mask_list_file);
            o->prefix = duet__strdup(o->mask.prefix);
            if (o->list_file == NULL || o->prefix == NULL)
                rc = duet__error(DUET_ENOMEM, "LoadMask: out of memory");
            o->mask.mask_list_file = o->list_file;
            o->mask.prefix = o->prefix;
        }
        if (rc == DUET_OK && duet_mask_options_check(&o->mask) != DUET_OK) {
            char *msg = duet__strdup(duet_last_error());
            rc = duet_config_error(c, "mask_config", "'mask_config': %s",
                                   msg ? msg : "invalid mask options");
            free(msg);
        }
        duet_config_destroy(k);
        DUET_TRY(rc);
    }
    duet__pkey_state *k = NULL;
    DUET_TRY(duet__pipe_state_add(r, c, "type", "mask", &k));
    if (mm == DUET_MASK_BBOX) {
        DUET_TRY(duet__pipe_state_add(r, c, "type", "mask_bbox", &k));
        k->is_image = false;
    }
    return DUET_OK;
}

/* A mask file: its first channel (the decoder gives RGB; gray is replicated),
 * nonzero -> 1, as mmcv.imfrombytes(flag='unchanged')[..., 0:1] > 0. */
static int load_mask_file(const char *path, int64_t max_pixels, duet__pentry *e) {
    duet_image *im = NULL;
    DUET_TRY(duet_image_load_limited(path, max_pixels, &im));
    duet__pimage *m = &e->im;
    m->h = im->height;
    m->w = im->width;
    m->c = 1;
    m->owned = true;
    m->u8 = malloc((size_t)(m->h * m->w) + 1);
    if (m->u8 == NULL) {
        duet_image_destroy(im);
        return duet__error(DUET_ENOMEM, "%s: out of memory", path);
    }
    /* BGR's channel 0 is the file's blue */
    for (int64_t i = 0; i < m->h * m->w; i++) m->u8[i] = im->data[i * 3 + 2] > 0;
    duet_image_destroy(im);
    return DUET_OK;
}

static int apply_load_mask(const duet__step *st, duet__psample *s) {
    const duet_mask_opts *o = &((const load_mask_opts *)st->opts)->mask;
    duet__pentry *e = NULL;
    DUET_TRY(duet__psample_put(s, "mask", &e));
    e->is_image = true;
    if (s->mask_file != NULL) return load_mask_file(s->mask_file, s->io->max_pixels, e);
    if (o->mode == DUET_MASK_SET) {
        if (s->nmask_set < 1)
            return duet__error(DUET_ESTATE, "%s: no mask set given", st->where);
        int64_t k = randint(s->rng, 0, s->nmask_set);
        return load_mask_file(s->mask_set[k], s->io->max_pixels, e);
    }
    if (o->mode == DUET_MASK_FILE) {
        if (s->mask_path == NULL)
            return duet__error(DUET_ECONFIG, "%s: mask_mode 'file' and the sample has no mask "
                               "file", st->where);
        return load_mask_file(s->mask_path, s->io->max_pixels, e);
    }
    duet__pimage *m = &e->im;
    m->h = o->img_h;
    m->w = o->img_w;
    m->c = 1;
    m->owned = true;
    m->u8 = calloc((size_t)(m->h * m->w), 1);
    if (m->u8 == NULL) return duet__error(DUET_ENOMEM, "LoadMask: out of memory");
    if (o->mode == DUET_MASK_IRREGULAR) return duet_mask_irregular(o, s->rng, m->u8, NULL, NULL);
    int64_t bbox[4];
    duet_mask_random_bbox(o, s->rng, bbox);
    for (int64_t y = bbox[0]; y < bbox[0] + bbox[2]; y++)
        memset(m->u8 + y * m->w + bbox[1], 1, (size_t)bbox[3]);
    DUET_TRY(duet__psample_put(s, "mask_bbox", &e));
    e->nints = 4;
    memcpy(e->ints, bbox, sizeof bbox);
    return DUET_OK;
}

const duet__transform duet__t_load_mask = {
    .name = "LoadMask", .read = read_load_mask, .apply = apply_load_mask,
    .free_opts = free_load_mask, .random = true,
};

static int read_masked_image(duet_config *c, duet__pipe_read *r, duet__step *st) {
    const char *img = NULL, *mask = NULL;
    DUET_TRY(duet_config_get_string_or(c, "img_name", "gt_img", &img));
    DUET_TRY(duet_config_get_string_or(c, "mask_name", "mask", &mask));
    st->nkeys = 2;
    snprintf(st->keys[0], DUET__PIPE_KEY_LEN, "%s", img);
    snprintf(st->keys[1], DUET__PIPE_KEY_LEN, "%s", mask);
    for (int i = 0; i < 2; i++)
        if (duet__pipe_state(r, st->keys[i]) == NULL)
            return duet__error(DUET_ECONFIG, "%s: GetMaskedImage needs '%s'%s", st->where,
                               st->keys[i], i ? " (LoadMask before it)" : "");
    DUET_TRY(duet__pipe_need_images(r, st, false, "masks"));
    duet__pkey_state *k = NULL;
    DUET_TRY(duet__pipe_state_add(r, c, "type", "masked_img", &k));
    *k = *duet__pipe_state(r, st->keys[0]);
    snprintf(k->key, sizeof k->key, "masked_img");
    k->is_float = true;
    return DUET_OK;
}

/* masked_img = img * (1. - mask): float32 times float64 0/1. */
static int apply_masked_image(const duet__step *st, duet__psample *s) {
    duet__pentry *g = duet__psample_get(s, st->keys[0]), *k = duet__psample_get(s, st->keys[1]);
    const duet__pimage *mk = &k->im;
    duet__pimage *im = &g->im;
    if (mk->h != im->h || mk->w != im->w)
        return duet__error(DUET_ESHAPE, "%s: GetMaskedImage: the mask is %lldx%lld (WxH), "
                           "but %s is %lldx%lld after the pipeline's Crop/Resize: the "
                           "mask must be %lldx%lld (duet infer --mask: a %lldx%lld image; "
                           "a config: LoadMask's img_shape)", st->where, (long long)mk->w,
                           (long long)mk->h, g->path, (long long)im->w, (long long)im->h,
                           (long long)im->w, (long long)im->h, (long long)im->w,
                           (long long)im->h);
    DUET_TRY(duet__pimage_to_float(im, g->path));
    duet__pentry *out = NULL;
    DUET_TRY(duet__psample_put(s, "masked_img", &out));
    g = duet__psample_get(s, st->keys[0]);
    k = duet__psample_get(s, st->keys[1]);
    out->is_image = true;
    out->bgr = g->bgr;
    out->path = g->path;
    out->im = (duet__pimage){.h = g->im.h, .w = g->im.w, .c = g->im.c};
    const int64_t hw = g->im.h * g->im.w, c = g->im.c;
    out->im.f = malloc(sizeof(float) * (size_t)(hw * c) + 1);
    if (out->im.f == NULL) return duet__error(DUET_ENOMEM, "%s: out of memory", g->path);
    for (int64_t i = 0; i < hw; i++)
        for (int64_t ch = 0; ch < c; ch++)
            out->im.f[i * c + ch] =
                k->im.u8[i] ? g->im.f[i * c + ch] * 0.0f : g->im.f[i * c + ch];
    return DUET_OK;
}

const duet__transform duet__t_masked_image = {
    .name = "GetMaskedImage", .read = read_masked_image, .apply = apply_masked_image,
};

/* ---- the dataset ----------------------------------------------------------------- */

typedef struct inpainting {
    char **images, **masks; /* full paths; masks[i] may be NULL */
    int64_t n;
    char **set;             /* mask set files (mode set) */
    int64_t nset;
    duet_pipeline *pipeline;
    int64_t max_pixels;
} inpainting;

duet_pipeline_spec duet_inpainting_pipeline_spec(void) {
    /* mask_bbox: only bbox masks have one; Collect passes over it otherwise */
    duet_pipeline_spec s = {.dataset = "ImgInpaintingDataset", .path_keys = {"gt_img"},
                            .optional_key = "mask_bbox"};
    return s;
}

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
    duet_pipeline_destroy(t->pipeline);
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

/* The pipeline must give the model its masked image. */
static int check_pipeline(const duet_pipeline *p) {
    if (duet__pipeline_find(p, &duet__t_masked_image) == NULL)
        return duet__error(DUET_ECONFIG, "%s: the pipeline needs LoadMask and GetMaskedImage "
                           "(the model takes masked_img and mask)",
                           p->n ? p->steps[p->n - 1].where : "pipeline");
    return DUET_OK;
}

int duet_inpainting_dataset_create(const duet_inpainting_opts *o, duet_dataset **out) {
    *out = NULL;
    if (o->ann_file == NULL || o->pipeline == NULL)
        return duet__error(DUET_EINVAL, "ImgInpaintingDataset: ann_file and the pipeline are "
                           "required");
    DUET_TRY(check_pipeline(o->pipeline));
    const duet__step *lm = duet__pipeline_find(o->pipeline, &duet__t_load_mask);
    const duet_mask_opts *mask = lm ? &((const load_mask_opts *)lm->opts)->mask : NULL;
    inpainting *t = calloc(1, sizeof *t);
    if (t == NULL) return duet__error(DUET_ENOMEM, "ImgInpaintingDataset: out of memory");
    t->max_pixels = o->max_pixels;
    t->pipeline = duet__pipeline_retain(o->pipeline);
    const char *prefix = o->data_prefix ? o->data_prefix : ".";
    int rc = read_list(o->ann_file, prefix, "image", &t->images, &t->masks, &t->n);
    if (rc == DUET_OK && mask && mask->mode == DUET_MASK_SET)
        rc = read_list(mask->mask_list_file, mask->prefix, "mask", &t->set, NULL, &t->nset);
    if (rc == DUET_OK && mask && mask->mode == DUET_MASK_FILE)
        for (int64_t i = 0; i < t->n && rc == DUET_OK; i++)
            if (t->masks[i] == NULL)
                rc = duet__error(DUET_ECONFIG, "%s: line of %s has no mask file (mask_mode "
                                 "'file' reads the second word of each line)", o->ann_file,
                                 t->images[i]);
    if (rc != DUET_OK) {
        inpainting_destroy(t);
        return duet__error_context(rc, "ImgInpaintingDataset");
    }
    return duet_dataset_create(&inpainting_ops, t, t->n, out);
}

/* ---- samples ------------------------------------------------------------------------ */

static int run_pipeline(const duet_pipeline *p, duet__psample *s, duet_batch *out) {
    static const char *const all[] = {"gt_img", "masked_img", "mask", "mask_bbox", NULL};
    int rc = duet__pipeline_run(p, s);
    if (rc == DUET_OK) rc = duet__psample_to_batch(s, all, false, out);
    duet__pentry *g = duet__psample_get(s, "gt_img");
    /* what a writer of these images needs: MMEditing's inpainting data is
     * BGR (LoadImageFromFile's default, Normalize without to_rgb), which its
     * cv2.imwrite writes as such; a PNG writer of RGB must swap it back */
    const char *order = g && g->bgr ? "bgr" : "rgb";
    if (rc == DUET_OK) rc = duet_batch_add_meta(out, "channel_order", 1, &order);
    if (rc == DUET_OK) rc = duet_batch_add_meta(out, "gt_img_path", 1, &s->paths[0]);
    duet__psample_clear(s);
    return rc;
}

static int inpainting_get(const void *impl, int64_t index, duet_rng *rng, duet_batch *out) {
    const inpainting *t = impl;
    duet__pipe_io io = {.max_pixels = t->max_pixels};
    duet__psample s;
    memset(&s, 0, sizeof s);
    s.rng = rng;
    s.io = &io;
    s.paths[0] = t->images[index];
    s.mask_path = t->masks[index];
    s.mask_set = t->set;
    s.nmask_set = t->nset;
    return run_pipeline(t->pipeline, &s, out);
}

int duet_inpainting_one_image(const duet_pipeline *p, const char *path, const char *mask_path,
                              int64_t max_pixels, duet_batch *out) {
    DUET_TRY(check_pipeline(p));
    duet_rng rng = duet_rng_make(0, 0);
    duet__pipe_io io = {.max_pixels = max_pixels};
    duet__psample s;
    memset(&s, 0, sizeof s);
    s.rng = &rng;
    s.io = &io;
    s.paths[0] = path;
    s.mask_file = mask_path;
    return run_pipeline(p, &s, out);
}
