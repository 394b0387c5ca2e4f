/* MATLAB's bicubic imresize (see duet/data.h for the definition): per
 * dimension, a table of taps (input index, weight) per output pixel, then
 * a separable pass over rows and one over columns. */
#include "duet/data.h"

#include <math.h>
#include <string.h>

/* Keys' cubic convolution kernel with a = -0.5. */
static double cubic(double x) {
    double ax = fabs(x), ax2 = ax * ax, ax3 = ax2 * ax;
    if (ax <= 1.0) return 1.5 * ax3 - 2.5 * ax2 + 1.0;
    if (ax <= 2.0) return -0.5 * ax3 + 2.5 * ax2 - 4.0 * ax + 2.0;
    return 0.0;
}

/* MATLAB's symmetric padding, 0-based: the sequence 0..n-1 followed by
 * n-1..0, repeated (so -1 -> 0, -2 -> 1, n -> n-1). */
static int64_t mirror(int64_t i, int64_t n) {
    int64_t period = 2 * n;
    int64_t m = i % period;
    if (m < 0) m += period;
    return m < n ? m : period - 1 - m;
}

int64_t duet_imresize_length(int64_t in_length, double scale) {
    double v = (double)in_length * scale;
    double r = nearbyint(v);
    if (fabs(v - r) <= 1e-9 * fmax(1.0, fabs(v))) return (int64_t)r;
    return (int64_t)ceil(v);
}

/* Taps of one dimension: for output k, idx[k*taps + p] (0-based input
 * index, mirrored) and w[k*taps + p] (normalised weight). */
typedef struct taps {
    int64_t taps;
    int64_t *idx;
    float *w;
} taps;

static void taps_free(taps *t) {
    free(t->idx);
    free(t->w);
}

static int taps_make(taps *t, int64_t in_len, int64_t out_len, double scale) {
    bool antialias = scale < 1.0;
    double kw = antialias ? 4.0 / scale : 4.0;
    /* One tap more on each side than the support needs: a tap whose weight
     * turns out to be 0 costs nothing and the support is always covered. */
    int64_t p = (int64_t)ceil(kw) + 2;
    t->taps = p;
    t->idx = malloc(sizeof(int64_t) * (size_t)(out_len * p));
    t->w = malloc(sizeof(float) * (size_t)(out_len * p));
    double *wd = malloc(sizeof(double) * (size_t)p);
    if (t->idx == NULL || t->w == NULL || wd == NULL) {
        taps_free(t);
        free(wd);
        return duet__error(DUET_ENOMEM, "imresize: out of memory for %lld x %lld taps",
                           (long long)out_len, (long long)p);
    }
    for (int64_t k = 0; k < out_len; k++) {
        /* 1-based output pixel k+1 maps to 1-based input position u. */
        double u = (double)(k + 1) / scale + 0.5 * (1.0 - 1.0 / scale);
        double left = floor(u - kw / 2.0);
        double sum = 0.0;
        for (int64_t j = 0; j < p; j++) {
            double d = u - (left + (double)j);
            wd[j] = antialias ? scale * cubic(d * scale) : cubic(d);
            sum += wd[j];
            t->idx[k * p + j] = mirror((int64_t)left + j - 1, in_len);
        }
        DUET_ASSERT(sum > 0.0);
        for (int64_t j = 0; j < p; j++) t->w[k * p + j] = (float)(wd[j] / sum);
    }
    free(wd);
    return DUET_OK;
}

int duet_imresize(float *out, const float *in, int64_t channels, int64_t height, int64_t width,
                  double scale) {
    if (!(scale > 0.0) || !isfinite(scale) || channels < 1 || height < 1 || width < 1)
        return duet__error(DUET_EINVAL, "imresize: bad arguments (C %lld, H %lld, W %lld, "
                           "scale %g)", (long long)channels, (long long)height,
                           (long long)width, scale);
    int64_t oh = duet_imresize_length(height, scale), ow = duet_imresize_length(width, scale);
    if (oh < 1 || ow < 1)
        return duet__error(DUET_EINVAL, "imresize: %lldx%lld scaled by %g is empty",
                           (long long)height, (long long)width, scale);
    taps th = {0}, tw = {0};
    int rc = taps_make(&th, height, oh, scale);
    if (rc == DUET_OK) rc = taps_make(&tw, width, ow, scale);
    /* tmp (C, OH, W): rows resized, columns not yet */
    float *tmp = rc == DUET_OK ? malloc(sizeof(float) * (size_t)(channels * oh * width)) : NULL;
    if (rc == DUET_OK && tmp == NULL)
        rc = duet__error(DUET_ENOMEM, "imresize: out of memory");
    if (rc != DUET_OK) {
        taps_free(&th);
        taps_free(&tw);
        return rc;
    }
    for (int64_t c = 0; c < channels; c++) {
        const float *src = in + c * height * width;
        float *dst = tmp + c * oh * width;
        for (int64_t y = 0; y < oh; y++) {
            float *row = dst + y * width;
            memset(row, 0, sizeof(float) * (size_t)width);
            for (int64_t j = 0; j < th.taps; j++) {
                float w = th.w[y * th.taps + j];
                if (w == 0.0f) continue;
                const float *srow = src + th.idx[y * th.taps + j] * width;
                for (int64_t x = 0; x < width; x++) row[x] += w * srow[x];
            }
        }
    }
    for (int64_t c = 0; c < channels; c++)
        for (int64_t y = 0; y < oh; y++) {
            const float *row = tmp + (c * oh + y) * width;
            float *orow = out + (c * oh + y) * ow;
            for (int64_t x = 0; x < ow; x++) {
                const int64_t *idx = tw.idx + x * tw.taps;
                const float *w = tw.w + x * tw.taps;
                float acc = 0.0f;
                for (int64_t j = 0; j < tw.taps; j++) acc += w[j] * row[idx[j]];
                orow[x] = acc;
            }
        }
    free(tmp);
    taps_free(&th);
    taps_free(&tw);
    return DUET_OK;
}

int duet_imresize_tensor(const duet_tensor *in, double scale, duet_tensor **out) {
    *out = NULL;
    char shape[DUET_SHAPE_STR_MAX];
    int64_t n, c, h, w;
    if (in->ndim == 3) {
        n = 1, c = in->shape[0], h = in->shape[1], w = in->shape[2];
    } else if (in->ndim == 4) {
        n = in->shape[0], c = in->shape[1], h = in->shape[2], w = in->shape[3];
    } else {
        return duet__error(DUET_ESHAPE, "imresize: want (C, H, W) or (N, C, H, W), got %s",
                           duet_shape_str(in, shape, sizeof(shape)));
    }
    if (!(scale > 0.0) || !isfinite(scale))
        return duet__error(DUET_EINVAL, "imresize: bad scale %g", scale);
    int64_t oh = duet_imresize_length(h, scale), ow = duet_imresize_length(w, scale);
    duet_tensor *t = NULL;
    if (in->ndim == 3)
        DUET_TRY(duet_tensor_create(3, (int64_t[]){c, oh, ow}, &t));
    else
        DUET_TRY(duet_tensor_create4(n, c, oh, ow, &t));
    /* N and C are both just planes here. */
    int rc = duet_imresize(t->data, in->data, n * c, h, w, scale);
    if (rc != DUET_OK) {
        duet_tensor_release(t);
        return rc;
    }
    *out = t;
    return DUET_OK;
}

int duet_image_resize(const duet_image *in, double scale, duet_image **out) {
    *out = NULL;
    int64_t c = in->channels, h = in->height, w = in->width;
    if (!(scale > 0.0) || !isfinite(scale))
        return duet__error(DUET_EINVAL, "image resize: bad scale %g", scale);
    int64_t oh = duet_imresize_length(h, scale), ow = duet_imresize_length(w, scale);
    float *planes = malloc(sizeof(float) * (size_t)(c * h * w));
    float *res = malloc(sizeof(float) * (size_t)(c * (oh > 0 ? oh : 1) * (ow > 0 ? ow : 1)));
    duet_image *img = NULL;
    int rc = planes && res ? DUET_OK : duet__error(DUET_ENOMEM, "image resize: out of memory");
    if (rc == DUET_OK) {
        /* HWC bytes -> CHW floats on the 0..255 scale, as MATLAB works on
         * uint8 input. */
        for (int64_t y = 0; y < h; y++)
            for (int64_t x = 0; x < w; x++)
                for (int64_t k = 0; k < c; k++)
                    planes[(k * h + y) * w + x] = (float)in->data[(y * w + x) * c + k];
        rc = duet_imresize(res, planes, c, h, w, scale);
    }
    if (rc == DUET_OK) rc = duet_image_create(oh, ow, (int)c, &img);
    if (rc == DUET_OK)
        for (int64_t k = 0; k < c; k++)
            for (int64_t y = 0; y < oh; y++)
                for (int64_t x = 0; x < ow; x++) {
                    float v = fmaxf(0.0f, fminf(255.0f, res[(k * oh + y) * ow + x]));
                    img->data[(y * ow + x) * c + k] = (uint8_t)nearbyintf(v);
                }
    free(planes);
    free(res);
    if (rc == DUET_OK) *out = img;
    return rc;
}
