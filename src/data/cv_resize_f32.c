/* OpenCV's cv::resize on float32 images (imgproc/src/resize.cpp, its
 * generic float path), as cv2.resize runs it for MMEditing's RandomResize:
 * INTER_LINEAR and INTER_CUBIC separable in float (coefficients at
 * half-pixel centres, edges clamped), INTER_AREA as OpenCV's area
 * decimation when shrinking (block means for integer factors, its
 * coverage table otherwise) and as its linear variant when enlarging; a 2x
 * shrink asked as linear runs as area, as OpenCV switches it. */
#include "data/degradations.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

int duet__resize_kind_parse(const char *name, duet__resize_kind *out) {
    if (strcmp(name, "bilinear") == 0) *out = DUET__RESIZE_BILINEAR;
    else if (strcmp(name, "bicubic") == 0) *out = DUET__RESIZE_BICUBIC;
    else if (strcmp(name, "area") == 0) *out = DUET__RESIZE_AREA;
    else
        return duet__error(DUET_EINVAL, "RandomResize: resize_opt '%s' is not one of bilinear, "
                           "bicubic, area", name);
    return DUET_OK;
}

/* OpenCV's interpolateCubic (a = -0.75), in float. */
static void cubic_coeffs(float x, float c[4]) {
    const float a = -0.75f;
    c[0] = ((a * (x + 1) - 5 * a) * (x + 1) + 8 * a) * (x + 1) - 4 * a;
    c[1] = ((a + 2) * x - (a + 3)) * x * x + 1;
    c[2] = ((a + 2) * (1 - x) - (a + 3)) * (1 - x) * (1 - x) + 1;
    c[3] = 1.f - c[0] - c[1] - c[2];
}

static int64_t clampi(int64_t i, int64_t n) { return i < 0 ? 0 : i >= n ? n - 1 : i; }

/* The first tap and the ksize weights of each output index along one
 * axis (resize()'s xofs/alpha, yofs/beta). */
static void axis_taps(int64_t in, int64_t out, bool cubic, bool area_mode, int64_t *first,
                      float *w) {
    const double inv_scale = (double)out / (double)in, scale = 1.0 / inv_scale;
    const int ksize = cubic ? 4 : 2;
    for (int64_t d = 0; d < out; d++) {
        int64_t s;
        float f;
        if (!area_mode) {
            f = (float)((d + 0.5) * scale - 0.5);
            s = (int64_t)floorf(f);
            f -= (float)s;
        } else {
            s = (int64_t)floor(d * scale);
            f = (float)((d + 1) - (s + 1) * inv_scale);
            f = f <= 0 ? 0.f : f - floorf(f);
        }
        if (!cubic && s < 0) f = 0, s = 0;
        if (!cubic && s >= in - 1) f = 0, s = in - 1;
        if (cubic) {
            cubic_coeffs(f, w + d * ksize);
            first[d] = s - 1;
        } else {
            w[d * 2] = 1.f - f;
            w[d * 2 + 1] = f;
            first[d] = s;
        }
    }
}

/* Linear or cubic: the horizontal pass per source row, then the vertical
 * combination, both in float as OpenCV's HResize / VResize. */
static int resize_separable(float *dst, int64_t oh, int64_t ow, const float *src, int64_t h,
                            int64_t w, int c, bool cubic, bool area_mode) {
    const int k = cubic ? 4 : 2;
    int64_t *xo = malloc((size_t)ow * sizeof *xo), *yo = malloc((size_t)oh * sizeof *yo);
    float *xw = malloc((size_t)(ow * k) * sizeof *xw), *yw = malloc((size_t)(oh * k) * sizeof *yw);
    float *rows = malloc((size_t)(k * ow * c) * sizeof *rows);
    int rc = DUET_OK;
    if (xo == NULL || yo == NULL || xw == NULL || yw == NULL || rows == NULL) {
        rc = duet__error(DUET_ENOMEM, "RandomResize: out of memory");
        goto done;
    }
    axis_taps(w, ow, cubic, area_mode, xo, xw);
    axis_taps(h, oh, cubic, area_mode, yo, yw);
    for (int64_t dy = 0; dy < oh; dy++) {
        for (int t = 0; t < k; t++) {
            const float *s = src + clampi(yo[dy] + t, h) * w * c;
            float *r = rows + t * ow * c;
            for (int64_t dx = 0; dx < ow; dx++) {
                const float *a = xw + dx * k;
                for (int ch = 0; ch < c; ch++) {
                    float v = s[clampi(xo[dx], w) * c + ch] * a[0];
                    for (int j = 1; j < k; j++) v += s[clampi(xo[dx] + j, w) * c + ch] * a[j];
                    r[dx * c + ch] = v;
                }
            }
        }
        const float *b = yw + dy * k;
        float *d = dst + dy * ow * c;
        for (int64_t i = 0; i < ow * c; i++) {
            float v = b[0] * rows[i];
            for (int t = 1; t < k; t++) v += b[t] * rows[t * ow * c + i];
            d[i] = v;
        }
    }
done:
    free(xo);
    free(yo);
    free(xw);
    free(yw);
    free(rows);
    return rc;
}

/* OpenCV's resizeAreaFast_: the mean of each iy x ix block, summed in
 * float in the block's row-major order, times 1 / area. */
static void resize_area_fast(float *dst, int64_t oh, int64_t ow, const float *src, int64_t w,
                             int c, int ix, int iy) {
    const float scale = 1.f / (float)(ix * iy);
    for (int64_t dy = 0; dy < oh; dy++)
        for (int64_t dx = 0; dx < ow; dx++)
            for (int ch = 0; ch < c; ch++) {
                float sum = 0;
                for (int sy = 0; sy < iy; sy++)
                    for (int sx = 0; sx < ix; sx++)
                        sum += src[((dy * iy + sy) * w + dx * ix + sx) * c + ch];
                dst[(dy * ow + dx) * c + ch] = sum * scale;
            }
}

typedef struct area_tap {
    int64_t di, si;
    float alpha;
} area_tap;

/* computeResizeAreaTab: which source cells cover each output cell, and by
 * how much. Returns the count (at most 2 * in + out). */
static int64_t area_tab(int64_t in, int64_t out, double scale, area_tap *tab) {
    int64_t k = 0;
    for (int64_t d = 0; d < out; d++) {
        const double f1 = d * scale, f2 = f1 + scale;
        const double cell = fmin(scale, in - f1);
        int64_t s1 = (int64_t)ceil(f1), s2 = (int64_t)floor(f2);
        s2 = s2 < in - 1 ? s2 : in - 1;
        s1 = s1 < s2 ? s1 : s2;
        if (s1 - f1 > 1e-3) tab[k++] = (area_tap){d, s1 - 1, (float)((s1 - f1) / cell)};
        for (int64_t s = s1; s < s2; s++) tab[k++] = (area_tap){d, s, (float)(1.0 / cell)};
        if (f2 - s2 > 1e-3) tab[k++] = (area_tap){d, s2, (float)(fmin(fmin(f2 - s2, 1.), cell) / cell)};
    }
    return k;
}

/* ResizeArea_Invoker: each source row's horizontal weighted sums into buf,
 * added into the output row's sum times the row's weight. */
static int resize_area(float *dst, int64_t oh, int64_t ow, const float *src, int64_t h,
                       int64_t w, int c) {
    area_tap *xt = malloc((size_t)(2 * w + ow) * sizeof *xt);
    area_tap *yt = malloc((size_t)(2 * h + oh) * sizeof *yt);
    float *buf = malloc((size_t)(ow * c) * sizeof *buf), *sum = malloc((size_t)(ow * c) * sizeof *sum);
    int rc = DUET_OK;
    if (xt == NULL || yt == NULL || buf == NULL || sum == NULL) {
        rc = duet__error(DUET_ENOMEM, "RandomResize: out of memory");
        goto done;
    }
    const int64_t nx = area_tab(w, ow, (double)w / ow, xt), ny = area_tab(h, oh, (double)h / oh, yt);
    const int64_t n = ow * c;
    memset(sum, 0, (size_t)n * sizeof *sum);
    int64_t prev = ny > 0 ? yt[0].di : 0;
    for (int64_t j = 0; j < ny; j++) {
        const float beta = yt[j].alpha;
        const float *s = src + yt[j].si * w * c;
        memset(buf, 0, (size_t)n * sizeof *buf);
        for (int64_t k = 0; k < nx; k++)
            for (int ch = 0; ch < c; ch++)
                buf[xt[k].di * c + ch] = buf[xt[k].di * c + ch] + s[xt[k].si * c + ch] * xt[k].alpha;
        if (yt[j].di != prev) {
            float *d = dst + prev * n;
            for (int64_t i = 0; i < n; i++) {
                d[i] = sum[i];
                sum[i] = beta * buf[i];
            }
            prev = yt[j].di;
        } else {
            for (int64_t i = 0; i < n; i++) sum[i] += beta * buf[i];
        }
    }
    memcpy(dst + prev * n, sum, (size_t)n * sizeof *sum);
done:
    free(xt);
    free(yt);
    free(buf);
    free(sum);
    return rc;
}

int duet__cv_resize_f32(float *dst, int64_t oh, int64_t ow, const float *src, int64_t h,
                        int64_t w, int c, duet__resize_kind kind) {
    if (h < 1 || w < 1 || oh < 1 || ow < 1 || c < 1 || (unsigned)kind > DUET__RESIZE_AREA)
        return duet__error(DUET_EINVAL, "RandomResize: %lld x %lld x %d to %lld x %lld (kind %d)",
                           (long long)h, (long long)w, c, (long long)oh, (long long)ow, (int)kind);
    if (oh == h && ow == w) {
        memcpy(dst, src, (size_t)(h * w * c) * sizeof *dst);
        return DUET_OK;
    }
    const double sx = (double)w / ow, sy = (double)h / oh;
    const int ix = (int)lround(sx), iy = (int)lround(sy);
    const bool fast = fabs(sx - ix) < DBL_EPSILON && fabs(sy - iy) < DBL_EPSILON;
    if (kind == DUET__RESIZE_BILINEAR && fast && ix == 2 && iy == 2) kind = DUET__RESIZE_AREA;
    if (kind == DUET__RESIZE_AREA && sx >= 1 && sy >= 1) {
        if (fast) {
            resize_area_fast(dst, oh, ow, src, w, c, ix, iy);
            return DUET_OK;
        }
        return resize_area(dst, oh, ow, src, h, w, c);
    }
    return resize_separable(dst, oh, ow, src, h, w, c, kind == DUET__RESIZE_BICUBIC,
                            kind == DUET__RESIZE_AREA);
}

void duet__random_resize_size(int64_t h, int64_t w, double scale, bool is_size_even,
                              int64_t *oh, int64_t *ow) {
    double fh = h * scale, fw = w * scale;
    if (is_size_even) fh = 2 * floor(fh / 2), fw = 2 * floor(fw / 2);
    *oh = (int64_t)fh;
    *ow = (int64_t)fw;
}
