/* PSNR / SSIM / tensor2img: properties that follow from MMEditing's
 * formulas by hand (the PyTorch-side values are in test_ref_srgan.c). */
#include "testutil.h"

#include <math.h>
#include <string.h>

static uint8_t *image(int64_t h, int64_t w, int64_t c, uint64_t seed) {
    uint8_t *img = malloc((size_t)(h * w * c));
    duet_rng rng = duet_rng_make(seed, 0);
    for (int64_t i = 0; i < h * w * c; i++) img[i] = (uint8_t)duet_rng_int(&rng, 20, 235);
    return img;
}

static void test_psnr_constant_difference(void **state) {
    (void)state;
    int64_t h = 16, w = 12, c = 3;
    uint8_t *a = image(h, w, c, 1), *b = malloc((size_t)(h * w * c));
    for (int64_t i = 0; i < h * w * c; i++) b[i] = (uint8_t)(a[i] + 5);
    double p;
    TU_OK(duet_psnr(a, b, h, w, c, 0, NULL, &p));
    assert_true(fabs(p - 20.0 * log10(255.0 / 5.0)) < 1e-9);
    /* Gray difference d: Y differs by d * (24.966+128.553+65.481)/255. */
    for (int64_t i = 0; i < h * w; i++) {
        a[3 * i + 1] = a[3 * i + 2] = a[3 * i];
        b[3 * i] = b[3 * i + 1] = b[3 * i + 2] = (uint8_t)(a[3 * i] + 5);
    }
    TU_OK(duet_psnr(a, b, h, w, c, 0, "y", &p));
    assert_true(fabs(p - 20.0 * log10(255.0 / (5.0 * 219.0 / 255.0))) < 1e-4);
    TU_OK(duet_psnr(a, a, h, w, c, 0, NULL, &p));
    assert_true(isinf(p) && p > 0);
    free(a);
    free(b);
}

static void test_crop_border(void **state) {
    (void)state;
    int64_t h = 30, w = 28, c = 3;
    uint8_t *a = image(h, w, c, 2), *b = malloc((size_t)(h * w * c));
    memcpy(b, a, (size_t)(h * w * c));
    /* Differences only in the 3-pixel frame: invisible with crop_border 3. */
    for (int64_t y = 0; y < h; y++)
        for (int64_t x = 0; x < w; x++)
            if (y < 3 || x < 3 || y >= h - 3 || x >= w - 3) b[(y * w + x) * c] ^= 0x40;
    double p, s;
    TU_OK(duet_psnr(a, b, h, w, c, 3, NULL, &p));
    assert_true(isinf(p));
    TU_OK(duet_ssim(a, b, h, w, c, 3, NULL, &s));
    assert_true(fabs(s - 1.0) < 1e-12);
    TU_OK(duet_psnr(a, b, h, w, c, 2, NULL, &p));
    assert_false(isinf(p));
    TU_OK(duet_ssim(a, b, h, w, c, 0, NULL, &s));
    assert_true(s < 1.0);
    free(a);
    free(b);
}

static void test_ssim_properties(void **state) {
    (void)state;
    int64_t h = 24, w = 24, c = 3;
    uint8_t *a = image(h, w, c, 3), *b = image(h, w, c, 4);
    double s_aa, s_ab, s_ba;
    TU_OK(duet_ssim(a, a, h, w, c, 0, NULL, &s_aa));
    TU_OK(duet_ssim(a, b, h, w, c, 0, NULL, &s_ab));
    TU_OK(duet_ssim(b, a, h, w, c, 0, NULL, &s_ba));
    assert_true(fabs(s_aa - 1.0) < 1e-12);
    assert_true(fabs(s_ab - s_ba) < 1e-12);
    assert_true(s_ab < 0.5);
    /* Constant images x and y: SSIM = (2xy + C1) / (x^2 + y^2 + C1). */
    memset(a, 100, (size_t)(h * w * c));
    memset(b, 120, (size_t)(h * w * c));
    TU_OK(duet_ssim(a, b, h, w, c, 0, NULL, &s_ab));
    double c1 = (0.01 * 255) * (0.01 * 255);
    assert_true(fabs(s_ab - (2 * 100.0 * 120 + c1) / (100.0 * 100 + 120.0 * 120 + c1)) < 1e-9);
    free(a);
    free(b);
}

static void test_errors(void **state) {
    (void)state;
    uint8_t *a = image(12, 12, 3, 5);
    double v;
    assert_int_equal(duet_ssim(a, a, 12, 12, 3, 1, NULL, &v), DUET_EINVAL);
    assert_int_equal(duet_psnr(a, a, 12, 12, 3, 6, NULL, &v), DUET_EINVAL);
    assert_int_equal(duet_psnr(a, a, 12, 12, 3, 0, "ycbcr", &v), DUET_EINVAL);
    assert_non_null(strstr(duet_last_error(), "ycbcr"));
    assert_int_equal(duet_psnr(a, a, 12, 12, 1, 0, "y", &v), DUET_EINVAL);
    free(a);
}

static void test_tensor2img_layout(void **state) {
    (void)state;
    /* (3, 1, 2): R = {-1, 0.5}, G = {0.2, 1}, B = {2, 0.004} */
    const float chw[6] = {-1.0f, 0.5f, 0.2f, 1.0f, 2.0f, 0.004f};
    uint8_t img[6];
    duet_tensor2img(img, chw, 3, 1, 2);
    /* pixel 0: B G R = 255, 51, 0; pixel 1: 1, 255, 128 (127.5 rounds to even) */
    const uint8_t want[6] = {255, 51, 0, 1, 255, 128};
    assert_memory_equal(img, want, 6);
}

static void test_evaluate_batch(void **state) {
    (void)state;
    duet_rng rng = duet_rng_make(9, 0);
    int64_t shape[4] = {2, 3, 20, 20};
    duet_tensor *out = tu_rand(&rng, 4, shape, 0, 1), *gt = NULL;
    TU_OK(duet_tensor_clone(out, &gt));
    for (int64_t i = 0; i < gt->numel / 2; i++) gt->data[i] = 0.5f; /* sample 0 differs */
    duet_test_cfg cfg = duet_test_cfg_default();
    duet_log_vars lv;
    TU_OK(duet_evaluate(&cfg, out, gt, &lv));
    double p, s;
    assert_true(duet_log_vars_get(&lv, "PSNR", &p));
    assert_true(duet_log_vars_get(&lv, "SSIM", &s));
    assert_true(isinf(p)); /* mean with the identical sample 1 */
    /* SSIM: mean of sample 0's value and 1 */
    uint8_t a[1200], b[1200];
    duet_tensor2img(a, out->data, 3, 20, 20);
    duet_tensor2img(b, gt->data, 3, 20, 20);
    double s0;
    TU_OK(duet_ssim(a, b, 20, 20, 3, 0, NULL, &s0));
    assert_true(fabs(s - (s0 + 1.0) / 2) < 1e-12);
    cfg.metrics[0] = "NIQE";
    assert_int_equal(duet_evaluate(&cfg, out, gt, &lv), DUET_EINVAL);
    duet_tensor_release(out);
    duet_tensor_release(gt);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_psnr_constant_difference),
        cmocka_unit_test(test_crop_border),
        cmocka_unit_test(test_ssim_properties),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_tensor2img_layout),
        cmocka_unit_test(test_evaluate_batch),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
