/* Real-ESRGAN's degradations as MMEditing 0.16.1 computes them
 * (random_degradations.py, blur_kernels.py, UnsharpMasking and Quantize in
 * augmentation.py), with every random draw a parameter; degradations.h
 * says what each does and which draws feed it. Where MMEditing computes in
 * numpy float32 (the sigma matrices, the noise, UnsharpMasking's blend),
 * so does this file, so that the values agree to float32 rounding. */
#include "data/degradations.h"

#include <jpeglib.h>
#include <math.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const blur_names[] = {"iso", "aniso", "generalized_iso", "generalized_aniso",
                                         "plateau_iso", "plateau_aniso", "sinc"};

int duet__blur_kind_parse(const char *name, duet__blur_kind *out) {
    for (size_t i = 0; i < sizeof blur_names / sizeof blur_names[0]; i++)
        if (strcmp(name, blur_names[i]) == 0) {
            *out = (duet__blur_kind)i;
            return DUET_OK;
        }
    return duet__error(DUET_EINVAL, "RandomBlur: kernel type '%s' is not one of iso, aniso, "
                       "generalized_iso, generalized_aniso, plateau_iso, plateau_aniso, sinc",
                       name);
}

/* S^-1 in float32 of S = diag(sx^2, sy^2) rotated by theta, as
 * get_rotated_sigma_matrix and np.linalg.inv compute it (float32
 * products and sums; the 2 x 2 inverse by its adjugate). */
static void inverse_sigma(bool iso, double sx, double sy, double theta, float inv[4]) {
    float s[4];
    if (iso) {
        float v = (float)(sx * sx);
        s[0] = v, s[1] = 0.0f, s[2] = 0.0f, s[3] = v;
    } else {
        const float d0 = (float)(sx * sx), d1 = (float)(sy * sy);
        const float c = (float)cos(theta), n = (float)sin(theta);
        /* rot = [[c, -n], [n, c]]; rot diag rot^T */
        const float a00 = c * d0, a01 = -n * d1, a10 = n * d0, a11 = c * d1; /* rot diag */
        s[0] = a00 * c + a01 * -n;
        s[1] = a00 * n + a01 * c;
        s[2] = a10 * c + a11 * -n;
        s[3] = a10 * n + a11 * c;
    }
    const float det = s[0] * s[3] - s[1] * s[2];
    inv[0] = s[3] / det, inv[1] = -s[1] / det, inv[2] = -s[2] / det, inv[3] = s[0] / det;
}

int duet__blur_kernel(duet__blur_kind kind, int ksize, double sigma_x, double sigma_y,
                      double theta, double beta, double omega, double *out) {
    if (ksize < 1 || ksize > 255 || ksize % 2 == 0)
        return duet__error(DUET_EINVAL, "RandomBlur: kernel size %d (an odd number, 1 to 255)",
                           ksize);
    if ((unsigned)kind > DUET__BLUR_SINC)
        return duet__error(DUET_EINVAL, "RandomBlur: kernel kind %d", (int)kind);
    const bool gen = kind == DUET__BLUR_GENERALIZED_ISO || kind == DUET__BLUR_GENERALIZED_ANISO;
    const bool plateau = kind == DUET__BLUR_PLATEAU_ISO || kind == DUET__BLUR_PLATEAU_ANISO;
    const bool iso = kind == DUET__BLUR_ISO || kind == DUET__BLUR_GENERALIZED_ISO ||
                     kind == DUET__BLUR_PLATEAU_ISO;
    if (kind != DUET__BLUR_SINC &&
        (!(sigma_x > 0) || (!iso && !(sigma_y > 0)) || ((gen || plateau) && !(beta > 0))))
        return duet__error(DUET_EINVAL, "RandomBlur (%s): sigma_x %g, sigma_y %g, beta %g must "
                           "be positive", blur_names[kind], sigma_x, sigma_y, beta);
    const int half = ksize / 2;
    double sum = 0.0;
    float inv[4] = {0};
    if (kind != DUET__BLUR_SINC) inverse_sigma(iso, sigma_x, sigma_y, theta, inv);
    for (int i = 0; i < ksize; i++) {
        for (int j = 0; j < ksize; j++) {
            /* _mesh_grid: x along the columns, y along the rows. */
            const double x = j - half, y = i - half;
            double v;
            if (kind == DUET__BLUR_SINC) {
                const double r = sqrt(x * x + y * y);
                v = r == 0.0 ? omega * omega / (4.0 * M_PI)
                             : omega * j1(omega * r) / (2.0 * M_PI * r);
            } else {
                const double d = (x * inv[0] + y * inv[2]) * x + (x * inv[1] + y * inv[3]) * y;
                v = gen ? exp(-0.5 * pow(d, beta))
                    : plateau ? 1.0 / (pow(d, beta) + 1.0)
                              : exp(-0.5 * d);
            }
            out[i * ksize + j] = v;
            sum += v;
        }
    }
    for (int i = 0; i < ksize * ksize; i++) out[i] /= sum;
    return DUET_OK;
}

/* OpenCV's BORDER_REFLECT_101 (gfedcb|abcdefgh|gfedcba) for index p of n. */
static int64_t reflect101(int64_t p, int64_t n) {
    if (n == 1) return 0;
    while (p < 0 || p >= n) p = p < 0 ? -p : 2 * (n - 1) - p;
    return p;
}

void duet__filter2d(float *dst, const float *src, int64_t h, int64_t w, int c,
                    const double *kernel, int ksize) {
    const int a = ksize / 2;
    for (int64_t y = 0; y < h; y++) {
        for (int64_t x = 0; x < w; x++) {
            for (int ch = 0; ch < c; ch++) {
                double s = 0.0;
                for (int i = 0; i < ksize; i++) {
                    const float *row = src + reflect101(y + i - a, h) * w * c;
                    for (int j = 0; j < ksize; j++)
                        s += kernel[i * ksize + j] * row[reflect101(x + j - a, w) * c + ch];
                }
                dst[(y * w + x) * c + ch] = (float)s;
            }
        }
    }
}

/* cv2.getGaussianKernel(n, sigma) (CV_64F): OpenCV's fixed tables for n
 * <= 7 with sigma <= 0, else exp(-x^2 / (2 sigma^2)) normalised. */
static void gaussian_kernel_1d(int n, double sigma, double *k) {
    static const double small[4][7] = {
        {1.0},
        {0.25, 0.5, 0.25},
        {0.0625, 0.25, 0.375, 0.25, 0.0625},
        {0.03125, 0.109375, 0.21875, 0.28125, 0.21875, 0.109375, 0.03125}};
    if (n <= 7 && sigma <= 0) {
        memcpy(k, small[n / 2], (size_t)n * sizeof *k);
        return;
    }
    const double s = sigma > 0 ? sigma : ((n - 1) * 0.5 - 1) * 0.3 + 0.8;
    const double scale2x = -0.5 / (s * s);
    double sum = 0.0;
    for (int i = 0; i < n; i++) {
        const double x = i - (n - 1) * 0.5;
        k[i] = exp(scale2x * x * x);
        sum += k[i];
    }
    for (int i = 0; i < n; i++) k[i] /= sum;
}

/* filter2D with the kernel k1 k1^T, as two 1-D passes (rows, then
 * columns) in double: k^2 -> 2k multiply-adds per value, the sums of
 * filter2D's within rounding. tmp holds h * w * c doubles. */
static void filter_separable(float *dst, const float *src, int64_t h, int64_t w, int c,
                             const double *k1, int k, double *tmp) {
    const int a = k / 2;
    for (int64_t y = 0; y < h; y++)
        for (int64_t x = 0; x < w; x++)
            for (int ch = 0; ch < c; ch++) {
                double s = 0.0;
                for (int j = 0; j < k; j++)
                    s += k1[j] * src[(y * w + reflect101(x + j - a, w)) * c + ch];
                tmp[(y * w + x) * c + ch] = s;
            }
    for (int64_t y = 0; y < h; y++)
        for (int64_t x = 0; x < w; x++)
            for (int ch = 0; ch < c; ch++) {
                double s = 0.0;
                for (int i = 0; i < k; i++)
                    s += k1[i] * tmp[(reflect101(y + i - a, h) * w + x) * c + ch];
                dst[(y * w + x) * c + ch] = (float)s;
            }
}

int duet__unsharp_masking(float *out, const float *img, int64_t h, int64_t w, int c,
                          int kernel_size, double sigma, double weight, double threshold) {
    if (kernel_size < 1 || kernel_size > 255 || kernel_size % 2 == 0)
        return duet__error(DUET_EINVAL, "UnsharpMasking: kernel_size %d (an odd number, 1 to "
                           "255)", kernel_size);
    const int64_t n = h * w * c;
    const int k = kernel_size;
    double *k1 = malloc((size_t)k * sizeof *k1);
    double *tmp = malloc((size_t)n * sizeof *tmp);
    float *blur = malloc((size_t)n * sizeof *blur);
    float *mask = calloc((size_t)(n > 0 ? n : 1), sizeof *mask);
    int rc = DUET_OK;
    if (k1 == NULL || tmp == NULL || blur == NULL || mask == NULL) {
        rc = duet__error(DUET_ENOMEM, "UnsharpMasking: out of memory (%lld x %lld x %d image)",
                         (long long)h, (long long)w, c);
        goto done;
    }
    /* MMEditing's kernel is np.matmul(k, k.T): separable. */
    gaussian_kernel_1d(k, sigma, k1);
    filter_separable(blur, img, h, w, c, k1, k, tmp);
    /* residue in blur; the mask in float32 arithmetic, as numpy's. */
    const float th = (float)threshold, wt = (float)weight;
    for (int64_t i = 0; i < n; i++) {
        blur[i] = img[i] - blur[i];
        mask[i] = fabsf(blur[i]) * 255.0f > th ? 1.0f : 0.0f;
    }
    filter_separable(out, mask, h, w, c, k1, k, tmp); /* the soft mask */
    for (int64_t i = 0; i < n; i++) {
        float sharp = img[i] + wt * blur[i];
        sharp = sharp < 0.0f ? 0.0f : sharp > 1.0f ? 1.0f : sharp;
        const float soft = out[i];
        out[i] = soft * sharp + (1.0f - soft) * img[i];
    }
done:
    free(k1);
    free(tmp);
    free(blur);
    free(mask);
    return rc;
}

void duet__gaussian_noise(float *img, int64_t h, int64_t w, int c, const float *normals,
                          double sigma, bool gray) {
    const float s = (float)sigma; /* numpy: float32 array * Python float */
    for (int64_t p = 0; p < h * w; p++)
        for (int ch = 0; ch < c; ch++)
            img[p * c + ch] += normals[p * c + (gray ? 0 : ch)] * s;
}

static int cmp_float(const void *a, const void *b) {
    const float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

/* clip(round(v * 255), 0, 255) / 255 in float32, round half to even. */
static float quantize1(float v) {
    float r = rintf(v * 255.0f);
    r = r < 0.0f ? 0.0f : r > 255.0f ? 255.0f : r;
    return r / 255.0f;
}

int duet__poisson_rates(float *q, double *levels, const float *img, int64_t h, int64_t w, int c,
                        bool gray) {
    const int oc = gray ? 1 : c;
    const int64_t n = h * w * oc;
    if (gray && c != 3)
        return duet__error(DUET_EINVAL, "RandomNoise: gray Poisson noise needs 3 channels, not "
                           "%d", c);
    for (int64_t p = 0; p < h * w; p++) {
        if (gray) {
            /* cv2.cvtColor(img[..., ::-1], BGR2GRAY): B 0.114 + G 0.587 + R 0.299 */
            const float *px = img + p * c;
            q[p] = quantize1(px[2] * 0.114f + px[1] * 0.587f + px[0] * 0.299f);
        } else {
            for (int ch = 0; ch < c; ch++) q[p * c + ch] = quantize1(img[p * c + ch]);
        }
    }
    float *sorted = malloc((size_t)(n > 0 ? n : 1) * sizeof *sorted);
    if (sorted == NULL) return duet__error(DUET_ENOMEM, "RandomNoise: out of memory");
    memcpy(sorted, q, (size_t)n * sizeof *sorted);
    qsort(sorted, (size_t)n, sizeof *sorted, cmp_float);
    int64_t distinct = n > 0 ? 1 : 0;
    for (int64_t i = 1; i < n; i++) distinct += sorted[i] != sorted[i - 1];
    free(sorted);
    *levels = pow(2.0, ceil(log2((double)distinct)));
    return DUET_OK;
}

void duet__poisson_noise(float *img, int64_t h, int64_t w, int c, const float *q,
                         const double *counts, double levels, double scale, bool gray) {
    for (int64_t p = 0; p < h * w; p++)
        for (int ch = 0; ch < c; ch++) {
            const int64_t i = gray ? p : p * c + ch;
            const double noise = counts[i] / levels - (double)q[i];
            img[p * c + ch] = (float)((double)img[p * c + ch] + noise * scale);
        }
}

double duet__poisson_draw(duet_rng *rng, double lambda) {
    if (!(lambda > 0)) return 0.0;
    if (lambda < 10.0) { /* Knuth's product of uniforms */
        const double l = exp(-lambda);
        double k = 0.0, p = duet_rng_uniform_double(rng);
        while (p > l) {
            k += 1.0;
            p *= duet_rng_uniform_double(rng);
        }
        return k;
    }
    /* Hoermann's PTRS (transformed rejection with squeeze), as numpy's. */
    const double slam = sqrt(lambda), loglam = log(lambda);
    const double b = 0.931 + 2.53 * slam, a = -0.059 + 0.02483 * b;
    const double invalpha = 1.1239 + 1.1328 / (b - 3.4), vr = 0.9277 - 3.6224 / (b - 2);
    for (;;) {
        const double u = duet_rng_uniform_double(rng) - 0.5, v = duet_rng_uniform_double(rng);
        const double us = 0.5 - fabs(u);
        const double k = floor((2 * a / us + b) * u + lambda + 0.43);
        if (us >= 0.07 && v <= vr) return k;
        if (k < 0 || (us < 0.013 && v > us)) continue;
        if (log(v) + log(invalpha) - log(a / (us * us) + b) <= -lambda + k * loglam - lgamma(k + 1))
            return k;
    }
}

/* libjpeg's errors jump back here instead of exiting. */
typedef struct jpeg_err {
    struct jpeg_error_mgr pub; /* first: libjpeg casts cinfo->err to it */
    jmp_buf back;
    char msg[JMSG_LENGTH_MAX];
} jpeg_err;

static void on_jpeg_error(j_common_ptr cinfo) {
    jpeg_err *e = (jpeg_err *)cinfo->err;
    (*cinfo->err->format_message)(cinfo, e->msg);
    longjmp(e->back, 1);
}

int duet__jpeg_compress(float *img, int64_t h, int64_t w, int quality) {
    if (quality < 1 || quality > 100 || h < 1 || w < 1 || h > 65500 || w > 65500)
        return duet__error(DUET_EINVAL, "RandomJPEGCompression: quality %d (1 to 100) on a "
                           "%lld x %lld image (1 to 65500 each)", quality, (long long)h,
                           (long long)w);
    struct jpeg_compress_struct enc;
    struct jpeg_decompress_struct dec;
    jpeg_err err;
    memset(&enc, 0, sizeof enc);
    memset(&dec, 0, sizeof dec);
    unsigned char *rgb = malloc((size_t)(h * w * 3));
    /* jpeg_mem_dest's buffer: written by libjpeg through their addresses,
     * so they hold their values after a longjmp. */
    unsigned char *out = NULL;
    unsigned long out_size = 0;
    volatile bool enc_made = false, dec_made = false;
    int rc = DUET_OK;
    if (rgb == NULL) {
        rc = duet__error(DUET_ENOMEM, "RandomJPEGCompression: out of memory");
        goto done;
    }
    /* img * 255 to 8 bits as OpenCV's convertTo (saturate_cast: round half
     * to even), channels reversed: OpenCV takes channel 0 for blue. */
    for (int64_t p = 0; p < h * w; p++)
        for (int ch = 0; ch < 3; ch++) {
            float v = rintf(img[p * 3 + 2 - ch] * 255.0f);
            rgb[p * 3 + ch] = (unsigned char)(v < 0.0f ? 0.0f : v > 255.0f ? 255.0f : v);
        }
    enc.err = jpeg_std_error(&err.pub);
    dec.err = enc.err;
    err.pub.error_exit = on_jpeg_error;
    if (setjmp(err.back)) {
        rc = duet__error(DUET_EIO, "RandomJPEGCompression: libjpeg: %s", err.msg);
        goto done;
    }
    jpeg_create_compress(&enc);
    enc_made = true;
    jpeg_mem_dest(&enc, &out, &out_size);
    enc.image_width = (JDIMENSION)w;
    enc.image_height = (JDIMENSION)h;
    enc.input_components = 3;
    enc.in_color_space = JCS_RGB;
    jpeg_set_defaults(&enc);
    jpeg_set_quality(&enc, quality, TRUE);
    jpeg_start_compress(&enc, TRUE);
    while (enc.next_scanline < enc.image_height) {
        JSAMPROW row = rgb + (size_t)enc.next_scanline * (size_t)w * 3;
        jpeg_write_scanlines(&enc, &row, 1);
    }
    jpeg_finish_compress(&enc);
    jpeg_create_decompress(&dec);
    dec_made = true;
    jpeg_mem_src(&dec, out, out_size);
    jpeg_read_header(&dec, TRUE);
    dec.out_color_space = JCS_RGB;
    jpeg_start_decompress(&dec);
    if (dec.output_width != (JDIMENSION)w || dec.output_height != (JDIMENSION)h ||
        dec.output_components != 3) {
        rc = duet__error(DUET_EIO, "RandomJPEGCompression: libjpeg decoded %ux%ux%d from a "
                         "%lldx%lldx3 image", dec.output_width, dec.output_height,
                         dec.output_components, (long long)w, (long long)h);
        goto done;
    }
    while (dec.output_scanline < dec.output_height) {
        JSAMPROW row = rgb + (size_t)dec.output_scanline * (size_t)w * 3;
        jpeg_read_scanlines(&dec, &row, 1);
    }
    jpeg_finish_decompress(&dec);
    for (int64_t p = 0; p < h * w; p++)
        for (int ch = 0; ch < 3; ch++) img[p * 3 + 2 - ch] = (float)rgb[p * 3 + ch] / 255.0f;
done:
    if (enc_made) jpeg_destroy_compress(&enc);
    if (dec_made) jpeg_destroy_decompress(&dec);
    free(out);
    free(rgb);
    return rc;
}

void duet__quantize(float *img, int64_t n) {
    for (int64_t i = 0; i < n; i++) img[i] = quantize1(img[i]);
}
