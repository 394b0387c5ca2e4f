/* Private to src/data/: Real-ESRGAN's degradations, the functions behind
 * MMEditing 0.16.1's RandomBlur, RandomNoise, RandomJPEGCompression,
 * RandomResize, UnsharpMasking and Quantize (mmedit/datasets/pipelines/
 * random_degradations.py, blur_kernels.py, augmentation.py), on host float
 * images laid out as MMEditing's numpy arrays: (h, w, c) interleaved,
 * values nominally in [0, 1]. Every random quantity is a parameter: the
 * pipeline step that wires a function in draws it from the sample's RNG,
 * in the order below, so that N processes see what 1 process sees.
 *
 * MMEditing's draws, in order (np.random unless said; a range [a, b] is
 * np.random.uniform(a, b), which draws even when a == b):
 *
 * RandomBlur(params) on one image:
 *   1. u < prob? (uniform(), only when params has prob: skip the step when
 *      u > prob);
 *   2. kernel_type = np.random.choice(kernel_list, p=kernel_prob) (one
 *      uniform against the cumulative probabilities);
 *   3. kernel_size = random.choice(kernel_size) (Python's `random`, not
 *      numpy's);
 *   4. sigma_x in sigma_x, sigma_y in sigma_y, rotate_angle in
 *      rotate_angle, beta_gau in beta_gaussian, beta_pla in beta_plateau,
 *      omega in omega (default [pi/3, pi] below kernel size 13, [pi/5, pi]
 *      from 13): six uniforms, all drawn whatever the kernel type;
 *   5. random_mixed_kernels([kernel_type], [1], ...): np.random.choice
 *      again (one uniform, its result fixed), then for the Gaussian kinds
 *      sigma_x again (uniform(sigma_x, sigma_x)), for the anisotropic ones
 *      sigma_y and rotation again; for generalized and plateau kernels one
 *      uniform() <= 0.5 and then beta = uniform(beta, 1) or uniform(1, beta):
 *      the beta the kernel uses is a second draw between 1 and step 4's;
 *      for sinc omega again (uniform(omega, omega));
 *   6. duet__blur_kernel with the final values, duet__filter2d.
 * RandomResize: uniform for prob; np.random.choice(resize_opt); without
 *   target_size np.random.choice(['up', 'down', 'keep'], resize_mode_prob)
 *   and the scale uniform(1, s1) or uniform(s0, 1) ('keep': no draw, 1);
 *   with resize_step, per further image a uniform(-step, step); then
 *   duet__random_resize_size and duet__cv_resize_f32.
 * RandomNoise: uniform for prob; np.random.choice(noise_type);
 *   gaussian: sigma = uniform(gaussian_sigma) / 255, gray = uniform() <
 *     gaussian_gray_noise_prob, then randn(h, w, c) (all c channels drawn
 *     even for gray noise, which uses channel 0's) -> duet__gaussian_noise;
 *   poisson: scale = uniform(poisson_scale), gray = uniform() <
 *     poisson_gray_noise_prob, then np.random.poisson(rate) over the rates
 *     of duet__poisson_rates (h, w, 1 or c) -> duet__poisson_noise.
 * RandomJPEGCompression: uniform for prob; quality = round(uniform(q0, q1))
 *   (Python's round: half to even) -> duet__jpeg_compress.
 * DegradationsWithShuffle: np.random.shuffle over its shuffle_idx entries
 *   (a permutation), then each degradation's own draws in the new order.
 * UnsharpMasking, Quantize: no draws. */
#ifndef DUET_DATA_DEGRADATIONS_H
#define DUET_DATA_DEGRADATIONS_H

#include <stdbool.h>
#include <stdint.h>

#include "duet/base.h"

typedef enum duet__blur_kind {
    DUET__BLUR_ISO,               /* 'iso' */
    DUET__BLUR_ANISO,             /* 'aniso' */
    DUET__BLUR_GENERALIZED_ISO,   /* 'generalized_iso' */
    DUET__BLUR_GENERALIZED_ANISO, /* 'generalized_aniso' */
    DUET__BLUR_PLATEAU_ISO,       /* 'plateau_iso' */
    DUET__BLUR_PLATEAU_ANISO,     /* 'plateau_aniso' */
    DUET__BLUR_SINC               /* 'sinc' */
} duet__blur_kind;

/* kind's index by MMEditing's name ('iso', ..., 'sinc'); DUET_EINVAL
 * naming it when unknown. */
int duet__blur_kind_parse(const char *name, duet__blur_kind *out);

/* The kernel (ksize x ksize, row-major, summing to 1) of blur_kernels.py
 * for the final parameter values (see the draws above): Gaussian
 * exp(-x^T S^-1 x / 2), generalized exp(-(x^T S^-1 x)^beta / 2), plateau
 * 1 / ((x^T S^-1 x)^beta + 1), S = diag(sx^2, sy^2) rotated by theta
 * (isotropic kinds: sx^2 I), S and S^-1 in float32 as MMEditing's; sinc:
 * the circular low-pass omega J1(omega r) / (2 pi r), omega^2 / (4 pi) at
 * the centre. ksize odd, 1..255; sigmas and beta positive. */
int duet__blur_kernel(duet__blur_kind kind, int ksize, double sigma_x, double sigma_y,
                      double theta, double beta, double omega, double *out);

/* cv2.filter2D(img, -1, kernel) on an (h, w, c) float image: correlation
 * with the ksize x ksize kernel centred, BORDER_REFLECT_101, sums in
 * double. dst may not alias src. OpenCV sums large kernels (11 x 11 and
 * up) through its DFT: the two agree within float32 rounding, not
 * bitwise. */
void duet__filter2d(float *dst, const float *src, int64_t h, int64_t w, int c,
                    const double *kernel, int ksize);

/* UnsharpMasking(kernel_size, sigma, weight, threshold) on img: with K the
 * outer product of cv2.getGaussianKernel(kernel_size, sigma) (sigma <= 0:
 * 0.3 ((kernel_size - 1) / 2 - 1) + 0.8),
 *   residue = img - filter2D(img, K); mask = |residue| * 255 > threshold;
 *   soft = filter2D(mask, K); sharp = clip(img + weight * residue, 0, 1);
 *   out = soft * sharp + (1 - soft) * img.
 * out (h, w, c) may not alias img. DUET_EINVAL for an even or too large
 * kernel_size; DUET_ENOMEM. */
int duet__unsharp_masking(float *out, const float *img, int64_t h, int64_t w, int c,
                          int kernel_size, double sigma, double weight, double threshold);

/* RandomResize's interpolations (resize_opt). */
typedef enum duet__resize_kind {
    DUET__RESIZE_BILINEAR, /* cv2.INTER_LINEAR */
    DUET__RESIZE_BICUBIC,  /* cv2.INTER_CUBIC */
    DUET__RESIZE_AREA      /* cv2.INTER_AREA */
} duet__resize_kind;
/* kind by MMEditing's name; DUET_EINVAL naming it when unknown ('lanczos'
 * too, which no Real-ESRGAN config uses). */
int duet__resize_kind_parse(const char *name, duet__resize_kind *out);
/* cv2.resize(src, (ow, oh), interpolation=kind) of an (h, w, c) float
 * image into dst (oh, ow, c), OpenCV's generic float path
 * (cv_resize_f32.c says which); the same size is a copy. DUET_EINVAL,
 * DUET_ENOMEM. */
int duet__cv_resize_f32(float *dst, int64_t oh, int64_t ow, const float *src, int64_t h,
                        int64_t w, int c, duet__resize_kind kind);
/* RandomResize's output size for the drawn scale factor: (int(h * s),
 * int(w * s)), each first rounded down to even with is_size_even. */
void duet__random_resize_size(int64_t h, int64_t w, double scale, bool is_size_even,
                              int64_t *oh, int64_t *ow);

/* RandomNoise's Gaussian noise in place: img += float32(normals) * sigma
 * (sigma already divided by 255), normals (h, w, c) standard normal
 * draws; gray: every channel gets channel 0's noise. */
void duet__gaussian_noise(float *img, int64_t h, int64_t w, int c, const float *normals,
                          double sigma, bool gray);

/* RandomNoise's Poisson noise, first half: the quantized image q =
 * clip(round(v * 255), 0, 255) / 255 of img (gray: of its luma, cv2's
 * BGR2GRAY of the RGB image: 0.299 R + 0.587 G + 0.114 B), into q (h, w, 1
 * when gray, else c), and *levels = 2^ceil(log2(number of distinct values
 * of q)). The draws are counts ~ Poisson(q * levels), one per value of q. */
int duet__poisson_rates(float *q, double *levels, const float *img, int64_t h, int64_t w, int c,
                        bool gray);
/* Second half, in place: img += (counts / levels - q) * scale, the gray
 * noise (h, w, 1) added to every channel. */
void duet__poisson_noise(float *img, int64_t h, int64_t w, int c, const float *q,
                         const double *counts, double levels, double scale, bool gray);
/* One Poisson(lambda) draw from rng (the pipeline's; numpy's own sampler
 * draws other values from its own stream). lambda >= 0. */
double duet__poisson_draw(duet_rng *rng, double lambda);

/* RandomJPEGCompression in place on an (h, w, 3) image in [0, 1]:
 * cv2.imdecode(cv2.imencode('.jpg', img * 255, [IMWRITE_JPEG_QUALITY,
 * quality]), 1) / 255, as MMEditing runs it on its RGB arrays: OpenCV
 * reads channel 0 as blue, so libjpeg sees (c2, c1, c0) as RGB; values
 * rounded to 8 bits as saturate_cast (half to even), libjpeg-turbo's
 * defaults (4:2:0, islow DCT, fancy upsampling). quality 1..100.
 * DUET_EINVAL naming the step, DUET_EIO for a libjpeg failure. */
int duet__jpeg_compress(float *img, int64_t h, int64_t w, int quality);

/* Quantize in place over n values: clip(round(v * 255), 0, 255) / 255
 * (round half to even, as np.round), MMEditing's "quantize and clip" (0.16.1
 * has no separate Clip step). */
void duet__quantize(float *img, int64_t n);

#endif
