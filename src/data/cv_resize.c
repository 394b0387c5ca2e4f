/* OpenCV's bicubic resize of 8-bit images (cv::resize with INTER_CUBIC, its
 * generic scalar path), which mmcv.imresize(..., interpolation='bicubic')
 * runs for MMEditing's Resize step. Not MATLAB's imresize (resize.c):
 * a = -0.75 instead of -0.5, no antialiasing when shrinking, and integer
 * arithmetic on 11-bit weights. */
#include <math.h>
#include <string.h>

#include "data/translation.h"

#define COEF_BITS 11
#define COEF_SCALE (1 << COEF_BITS)

/* OpenCV's interpolateCubic: the four weights of taps -1, 0, 1, 2 for a
 * fractional position x in [0, 1), in float as OpenCV computes them. */
static void cubic_coeffs(float x, float c[4]) {
    const float a = -0.75f;
    c[0] = ((a * (x + 1) - 5 * a) * (x + 1) + 8 * a) * (x + 1) - 4 * a;
    c[1] = ((a + 2) * x - (a + 3)) * x * x + 1;
    c[2] = ((a + 2) * (1 - x) - (a + 3)) * (1 - x) * (1 - x) + 1;
    c[3] = 1.f - c[0] - c[1] - c[2];
}

/* For each output index: the first source tap (before clamping) and the
 * four fixed-point weights (saturate_cast<short>(w * 2048): round half to
 * even, as cvRound). */
static void taps(int64_t in, int64_t out, int64_t *first, int16_t *w) {
    const double scale = 1.0 / ((double)out / (double)in);
    for (int64_t d = 0; d < out; d++) {
        float f = (float)((d + 0.5) * scale - 0.5);
        float fl = floorf(f);
        float c[4];
        cubic_coeffs(f - fl, c);
        first[d] = (int64_t)fl - 1;
        for (int k = 0; k < 4; k++) {
            long v = lrintf(c[k] * COEF_SCALE);
            w[d * 4 + k] = (int16_t)(v > 32767 ? 32767 : v < -32768 ? -32768 : v);
        }
    }
}

static int64_t clamp_index(int64_t i, int64_t n) { return i < 0 ? 0 : i >= n ? n - 1 : i; }

int duet__cv_resize_cubic_u8(const uint8_t *src, int64_t h, int64_t w, int c, uint8_t *dst,
                             int64_t oh, int64_t ow) {
    if (h < 1 || w < 1 || oh < 1 || ow < 1 || c < 1 || c > 4)
        return duet__error(DUET_EINVAL, "bicubic resize: bad sizes %lldx%lld -> %lldx%lld "
                           "(%d channels)", (long long)w, (long long)h, (long long)ow,
                           (long long)oh, c);
    int64_t *xfirst = malloc(sizeof(int64_t) * (size_t)ow);
    int64_t *yfirst = malloc(sizeof(int64_t) * (size_t)oh);
    int16_t *xw = malloc(sizeof(int16_t) * 4 * (size_t)ow);
    int16_t *yw = malloc(sizeof(int16_t) * 4 * (size_t)oh);
    /* Rows of the horizontal pass, as OpenCV keeps them: int sums of 8-bit
     * values times weights, not yet shifted. */
    int32_t *rows = malloc(sizeof(int32_t) * (size_t)h * (size_t)(ow * c));
    if (!xfirst || !yfirst || !xw || !yw || !rows) {
        free(xfirst), free(yfirst), free(xw), free(yw), free(rows);
        return duet__error(DUET_ENOMEM, "bicubic resize: out of memory for %lldx%lld",
                           (long long)ow, (long long)oh);
    }
    taps(w, ow, xfirst, xw);
    taps(h, oh, yfirst, yw);
    /* Horizontal pass over every source row (taps outside are the edge pixel). */
    for (int64_t y = 0; y < h; y++) {
        const uint8_t *s = src + y * w * c;
        int32_t *r = rows + y * ow * c;
        for (int64_t x = 0; x < ow; x++)
            for (int ch = 0; ch < c; ch++) {
                int32_t v = 0;
                for (int k = 0; k < 4; k++)
                    v += (int32_t)s[clamp_index(xfirst[x] + k, w) * c + ch] * xw[x * 4 + k];
                r[x * c + ch] = v;
            }
    }
    /* Vertical pass, then OpenCV's FixedPtCast: (v + 2^21) >> 22, clamped. */
    for (int64_t y = 0; y < oh; y++) {
        const int32_t *r[4];
        for (int k = 0; k < 4; k++) r[k] = rows + clamp_index(yfirst[y] + k, h) * ow * c;
        uint8_t *d = dst + y * ow * c;
        for (int64_t i = 0; i < ow * c; i++) {
            int64_t v = 0;
            for (int k = 0; k < 4; k++) v += (int64_t)r[k][i] * yw[y * 4 + k];
            /* Arithmetic shift: floor for negative sums, as OpenCV's int >>. */
            int64_t q = (v + ((int64_t)1 << (2 * COEF_BITS - 1))) >> (2 * COEF_BITS);
            d[i] = (uint8_t)(q < 0 ? 0 : q > 255 ? 255 : q);
        }
    }
    free(xfirst), free(yfirst), free(xw), free(yw), free(rows);
    return DUET_OK;
}
