/* PSNR and SSIM exactly as MMEditing computes them
 * (mmedit/core/evaluation/metrics.py): the output goes through tensor2img
 * (clamp to [0,1], *255, round, uint8, RGB -> BGR, HWC), then crop_border,
 * optionally the Y channel of bgr2ycbcr, then the formulas in float64. */
#include "duet/models.h"
#include "duet/ops.h"

#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

void duet_tensor2img(uint8_t *img, const float *chw, int64_t c, int64_t h, int64_t w) {
    for (int64_t k = 0; k < c; k++) {
        /* img_np[[2, 1, 0]]: the colour channels are stored BGR. */
        int64_t src = c == 3 ? 2 - k : k;
        const float *plane = chw + src * h * w;
        for (int64_t i = 0; i < h * w; i++) {
            float v = plane[i];
            v = v < 0.0f ? 0.0f : (v > 1.0f ? 1.0f : v);
            /* numpy's round: half to even, in float32 as numpy computes it. */
            float r = nearbyintf(v * 255.0f);
            img[i * c + k] = (uint8_t)r;
        }
    }
}

/* One plane of doubles (h, w) per channel: the cropped image, or its Y
 * channel (bgr2ycbcr y_only, on img/255 then scaled back by 255). */
static int to_planes(double **out, int64_t *nplanes, const uint8_t *img, int64_t h, int64_t w,
                     int64_t c, int crop, bool y_only) {
    int64_t oh = h - 2 * crop, ow = w - 2 * crop;
    int64_t np_ = y_only ? 1 : c;
    double *p = malloc((size_t)(np_ * oh * ow) * sizeof *p);
    if (p == NULL) return duet__error(DUET_ENOMEM, "metrics: out of memory");
    for (int64_t y = 0; y < oh; y++) {
        for (int64_t x = 0; x < ow; x++) {
            const uint8_t *px = img + ((y + crop) * w + (x + crop)) * c;
            if (y_only) {
                /* img / 255. in float32, then np.dot with float64 weights. */
                double b = (float)px[0] / 255.0f, g = (float)px[1] / 255.0f,
                       r = (float)px[2] / 255.0f;
                double yv = b * 24.966 + g * 128.553 + r * 65.481 + 16.0;
                p[y * ow + x] = yv / 255.0 * 255.0;
            } else {
                for (int64_t k = 0; k < c; k++) p[(k * oh + y) * ow + x] = px[k];
            }
        }
    }
    *out = p;
    *nplanes = np_;
    return DUET_OK;
}

static int check_args(const char *what, int64_t h, int64_t w, int64_t c, int crop,
                      const char *convert_to, int64_t min_size, bool *y_only) {
    *y_only = false;
    if (convert_to != NULL) {
        if (strcasecmp(convert_to, "y") != 0)
            return duet__error(DUET_EINVAL, "%s: convert_to '%s' is not supported (use 'y' or "
                               "nothing)", what, convert_to);
        if (c != 3)
            return duet__error(DUET_EINVAL, "%s: convert_to 'y' needs 3 channels, got %" PRId64,
                               what, c);
        *y_only = true;
    }
    if (c < 1 || crop < 0 || h - 2 * crop < min_size || w - 2 * crop < min_size)
        return duet__error(DUET_EINVAL,
                           "%s: a %" PRId64 "x%" PRId64 " image with crop_border %d leaves less "
                           "than %" PRId64 " pixels a side", what, h, w, crop, min_size);
    return DUET_OK;
}

int duet_psnr(const uint8_t *img1, const uint8_t *img2, int64_t h, int64_t w, int64_t c,
              int crop_border, const char *convert_to, double *out) {
    bool y_only;
    DUET_TRY(check_args("psnr", h, w, c, crop_border, convert_to, 1, &y_only));
    double *a = NULL, *b = NULL;
    int64_t n = 0;
    int rc = to_planes(&a, &n, img1, h, w, c, crop_border, y_only);
    if (rc == DUET_OK) rc = to_planes(&b, &n, img2, h, w, c, crop_border, y_only);
    if (rc == DUET_OK) {
        int64_t count = n * (h - 2 * crop_border) * (w - 2 * crop_border);
        double sse = 0.0;
        for (int64_t i = 0; i < count; i++) sse += (a[i] - b[i]) * (a[i] - b[i]);
        double mse = sse / (double)count;
        *out = mse == 0.0 ? INFINITY : 20.0 * log10(255.0 / sqrt(mse));
    }
    free(a);
    free(b);
    return rc;
}

/* cv2.getGaussianKernel(11, 1.5): normalised exp(-(i-5)^2 / (2 sigma^2)). */
static void gaussian_kernel(double k[11]) {
    double s = 0.0;
    for (int i = 0; i < 11; i++) {
        double d = i - 5;
        k[i] = exp(-d * d / (2.0 * 1.5 * 1.5));
        s += k[i];
    }
    for (int i = 0; i < 11; i++) k[i] /= s;
}

/* out (h-10, w-10) = valid-mode correlation of in (h, w) with the separable
 * window k k^T, as cv2.filter2D(...)[5:-5, 5:-5]. tmp holds h*(w-10). */
static void filter_valid(double *out, const double *in, double *tmp, int64_t h, int64_t w,
                         const double k[11]) {
    int64_t ow = w - 10, oh = h - 10;
    for (int64_t y = 0; y < h; y++)
        for (int64_t x = 0; x < ow; x++) {
            double s = 0.0;
            for (int j = 0; j < 11; j++) s += k[j] * in[y * w + x + j];
            tmp[y * ow + x] = s;
        }
    for (int64_t y = 0; y < oh; y++)
        for (int64_t x = 0; x < ow; x++) {
            double s = 0.0;
            for (int j = 0; j < 11; j++) s += k[j] * tmp[(y + j) * ow + x];
            out[y * ow + x] = s;
        }
}

/* MMEditing's _ssim on one channel. */
static double ssim_plane(const double *a, const double *b, int64_t h, int64_t w, double *work) {
    const double c1 = (0.01 * 255) * (0.01 * 255), c2 = (0.03 * 255) * (0.03 * 255);
    double k[11];
    gaussian_kernel(k);
    int64_t n = h * w, on = (h - 10) * (w - 10);
    double *mu1 = work, *mu2 = mu1 + on, *s11 = mu2 + on, *s22 = s11 + on, *s12 = s22 + on;
    double *prod = s12 + on, *tmp = prod + n;
    filter_valid(mu1, a, tmp, h, w, k);
    filter_valid(mu2, b, tmp, h, w, k);
    for (int64_t i = 0; i < n; i++) prod[i] = a[i] * a[i];
    filter_valid(s11, prod, tmp, h, w, k);
    for (int64_t i = 0; i < n; i++) prod[i] = b[i] * b[i];
    filter_valid(s22, prod, tmp, h, w, k);
    for (int64_t i = 0; i < n; i++) prod[i] = a[i] * b[i];
    filter_valid(s12, prod, tmp, h, w, k);
    double sum = 0.0;
    for (int64_t i = 0; i < on; i++) {
        double m1 = mu1[i] * mu1[i], m2 = mu2[i] * mu2[i], m12 = mu1[i] * mu2[i];
        double sig1 = s11[i] - m1, sig2 = s22[i] - m2, sig12 = s12[i] - m12;
        sum += ((2 * m12 + c1) * (2 * sig12 + c2)) / ((m1 + m2 + c1) * (sig1 + sig2 + c2));
    }
    return sum / (double)on;
}

int duet_ssim(const uint8_t *img1, const uint8_t *img2, int64_t h, int64_t w, int64_t c,
              int crop_border, const char *convert_to, double *out) {
    bool y_only;
    DUET_TRY(check_args("ssim", h, w, c, crop_border, convert_to, 11, &y_only));
    double *a = NULL, *b = NULL, *work = NULL;
    int64_t n = 0;
    int rc = to_planes(&a, &n, img1, h, w, c, crop_border, y_only);
    if (rc == DUET_OK) rc = to_planes(&b, &n, img2, h, w, c, crop_border, y_only);
    int64_t ph = h - 2 * crop_border, pw = w - 2 * crop_border;
    if (rc == DUET_OK) {
        work = malloc((size_t)(5 * (ph - 10) * (pw - 10) + ph * pw + ph * (pw - 10)) *
                      sizeof *work);
        if (work == NULL) rc = duet__error(DUET_ENOMEM, "ssim: out of memory");
    }
    if (rc == DUET_OK) {
        double s = 0.0;
        for (int64_t k = 0; k < n; k++)
            s += ssim_plane(a + k * ph * pw, b + k * ph * pw, ph, pw, work);
        *out = s / (double)n;
    }
    free(a);
    free(b);
    free(work);
    return rc;
}

/* ---- evaluation of a batch ---------------------------------------------------- */

duet_test_cfg duet_test_cfg_default(void) {
    return (duet_test_cfg){.nmetrics = 2, .metrics = {"PSNR", "SSIM"}, .crop_border = 0,
                           .convert_to = NULL};
}

int duet_evaluate(const duet_test_cfg *cfg, const duet_tensor *output, const duet_tensor *gt,
                  duet_log_vars *metrics) {
    duet_log_vars_clear(metrics);
    if (output->ndim != 4 || !duet_tensor_same_shape(output, gt)) {
        char s1[DUET_SHAPE_STR_MAX], s2[DUET_SHAPE_STR_MAX];
        return duet__error(DUET_ESHAPE, "evaluate: output %s and gt %s must be the same (N,C,H,W)",
                           duet_shape_str(output, s1, sizeof s1),
                           duet_shape_str(gt, s2, sizeof s2));
    }
    for (int m = 0; m < cfg->nmetrics; m++)
        if (strcasecmp(cfg->metrics[m], "PSNR") != 0 && strcasecmp(cfg->metrics[m], "SSIM") != 0)
            return duet__error(DUET_EINVAL, "evaluate: metric '%s' is not supported (PSNR, SSIM)",
                               cfg->metrics[m]);
    int64_t n = output->shape[0], c = output->shape[1], h = output->shape[2],
            w = output->shape[3];
    size_t bytes = (size_t)(c * h * w);
    uint8_t *a = malloc(bytes), *b = malloc(bytes);
    const float *od = NULL, *gd = NULL; /* host views (copies of a device's tensors) */
    double sums[DUET_MAX_METRICS] = {0};
    int rc = a != NULL && b != NULL ? DUET_OK : duet__error(DUET_ENOMEM, "evaluate: out of memory");
    if (rc == DUET_OK) rc = duet_tensor_map_read(output, &od);
    if (rc == DUET_OK) rc = duet_tensor_map_read(gt, &gd);
    for (int64_t i = 0; i < n && rc == DUET_OK; i++) {
        duet_tensor2img(a, od + i * c * h * w, c, h, w);
        duet_tensor2img(b, gd + i * c * h * w, c, h, w);
        for (int m = 0; m < cfg->nmetrics && rc == DUET_OK; m++) {
            double v = 0.0;
            if (strcasecmp(cfg->metrics[m], "PSNR") == 0)
                rc = duet_psnr(a, b, h, w, c, cfg->crop_border, cfg->convert_to, &v);
            else
                rc = duet_ssim(a, b, h, w, c, cfg->crop_border, cfg->convert_to, &v);
            sums[m] += v;
        }
    }
    for (int m = 0; m < cfg->nmetrics && rc == DUET_OK; m++)
        rc = duet_log_vars_set(metrics, cfg->metrics[m], sums[m] / (double)n);
    duet_tensor_unmap_read(output, od);
    duet_tensor_unmap_read(gt, gd);
    free(a);
    free(b);
    return rc;
}

/* ---- inpainting (OneStageInpaintor.forward_test) ------------------------------ */

/* tensor2img(min_max=(-1, 1)) of sample i of t (N, C, H, W), whose values
 * td holds on the host, into img. */
static void signed_to_img(uint8_t *img, const duet_tensor *t, const float *td, int64_t i,
                          float *scratch) {
    const int64_t c = t->shape[1], h = t->shape[2], w = t->shape[3], k = c * h * w;
    for (int64_t j = 0; j < k; j++) {
        const float v = td[i * k + j];
        scratch[j] = ((v < -1.0f ? -1.0f : v > 1.0f ? 1.0f : v) + 1.0f) * 0.5f;
    }
    duet_tensor2img(img, scratch, c, h, w);
}

/* MMEditing's L1Evaluation on one sample: the L1 of res against gt in the
 * hole, on the CPU from the host values rd, gd, md of res, gt and mask. */
static int sample_l1(const duet_tensor *gt, const duet_tensor *mask, const float *rd,
                     const float *gd, const float *md, int64_t i, double *out) {
    const int64_t c = gt->shape[1], h = gt->shape[2], w = gt->shape[3], mc = mask->shape[1];
    duet_tensor *r1 = NULL, *g1 = NULL, *m1 = NULL, *l = NULL;
    float v = 0.0f;
    int rc = duet_tensor_from_data(4, (int64_t[]){1, c, h, w}, rd + i * c * h * w, &r1);
    if (rc == DUET_OK)
        rc = duet_tensor_from_data(4, (int64_t[]){1, c, h, w}, gd + i * c * h * w, &g1);
    if (rc == DUET_OK)
        rc = duet_tensor_from_data(4, (int64_t[]){1, mc, h, w}, md + i * mc * h * w, &m1);
    if (rc == DUET_OK) rc = duet_l1_loss_masked(r1, g1, m1, 1.0f, &l);
    if (rc == DUET_OK) rc = duet_tensor_item(l, &v);
    if (rc == DUET_OK) *out = v;
    duet_tensor *ts[4] = {r1, g1, m1, l};
    for (int t = 0; t < 4; t++) duet_tensor_release(ts[t]);
    return rc;
}

int duet_inpainting_evaluate(const char *const *metrics, int nmetrics, const duet_tensor *res,
                             const duet_tensor *img, const duet_tensor *gt,
                             const duet_tensor *mask, duet_log_vars *out) {
    duet_log_vars_clear(out);
    if (img->ndim != 4 || !duet_tensor_same_shape(img, gt) || !duet_tensor_same_shape(res, gt) ||
        mask->ndim != 4 || mask->shape[0] != gt->shape[0])
        return duet__error(DUET_ESHAPE, "inpainting metrics: the output, the composite, gt_img "
                           "and the mask must be (N, C, H, W) of one N, H, W");
    const int64_t n = gt->shape[0], c = gt->shape[1], h = gt->shape[2], w = gt->shape[3];
    const size_t k = (size_t)(c * h * w);
    uint8_t *a = malloc(k), *b = malloc(k);
    float *scratch = malloc(k * sizeof *scratch);
    double sums[DUET_MAX_METRICS] = {0};
    int rc = a != NULL && b != NULL && scratch != NULL
                 ? DUET_OK
                 : duet__error(DUET_ENOMEM, "inpainting metrics: out of memory");
    for (int j = 0; j < nmetrics && rc == DUET_OK; j++)
        if (j >= DUET_MAX_METRICS || (strcmp(metrics[j], "l1") != 0 &&
                                      strcmp(metrics[j], "psnr") != 0 &&
                                      strcmp(metrics[j], "ssim") != 0))
            rc = duet__error(DUET_EINVAL, "inpainting metrics: '%s' (l1, psnr, ssim; at most "
                             "%d)", metrics[j], DUET_MAX_METRICS);
    const float *rd = NULL, *id = NULL, *gd = NULL, *md = NULL; /* host views */
    if (rc == DUET_OK) rc = duet_tensor_map_read(res, &rd);
    if (rc == DUET_OK) rc = duet_tensor_map_read(img, &id);
    if (rc == DUET_OK) rc = duet_tensor_map_read(gt, &gd);
    if (rc == DUET_OK) rc = duet_tensor_map_read(mask, &md);
    for (int64_t i = 0; i < n && rc == DUET_OK; i++) {
        signed_to_img(a, img, id, i, scratch);
        signed_to_img(b, gt, gd, i, scratch);
        for (int j = 0; j < nmetrics && rc == DUET_OK; j++) {
            double v = 0.0;
            if (strcmp(metrics[j], "psnr") == 0) rc = duet_psnr(a, b, h, w, c, 0, NULL, &v);
            else if (strcmp(metrics[j], "ssim") == 0) rc = duet_ssim(a, b, h, w, c, 0, NULL, &v);
            else rc = sample_l1(gt, mask, rd, gd, md, i, &v);
            sums[j] += v;
        }
    }
    for (int j = 0; j < nmetrics && rc == DUET_OK; j++)
        rc = duet_log_vars_set(out, metrics[j], sums[j] / (double)n);
    duet_tensor_unmap_read(res, rd);
    duet_tensor_unmap_read(img, id);
    duet_tensor_unmap_read(gt, gd);
    duet_tensor_unmap_read(mask, md);
    free(a);
    free(b);
    free(scratch);
    return rc;
}
