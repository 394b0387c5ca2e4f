/* duet against PyTorch/numpy references: MMEditing's PSNR, SSIM and
 * tensor2img (tests/ref/ref_metrics.py). */
#include "testutil.h"

#include <math.h>
#include <string.h>

/* A stored (N, H, W, C) float tensor of uint8 values back to bytes. */
static uint8_t *to_bytes(const duet_tensor *t) {
    uint8_t *b = malloc((size_t)t->numel);
    assert_non_null(b);
    for (int64_t i = 0; i < t->numel; i++) b[i] = (uint8_t)t->data[i];
    return b;
}

static void test_tensor2img(void **state) {
    (void)state;
    duet_st *st = tu_ref_load("metrics.safetensors");
    duet_tensor *in = tu_ref_tensor(st, "t2i.in");
    duet_tensor *want = tu_ref_tensor(st, "t2i.out");
    int64_t c = in->shape[1], h = in->shape[2], w = in->shape[3];
    uint8_t *img = malloc((size_t)in->numel);
    float *got = malloc((size_t)in->numel * sizeof *got);
    for (int64_t n = 0; n < in->shape[0]; n++)
        duet_tensor2img(img + n * c * h * w, in->data + n * c * h * w, c, h, w);
    for (int64_t i = 0; i < in->numel; i++) got[i] = img[i];
    tu_assert_close(got, want->data, want->numel, 0, 0, "tensor2img");
    free(img);
    free(got);
    duet_tensor_release(in);
    duet_tensor_release(want);
    duet_st_destroy(st);
}

static void test_psnr_ssim(void **state) {
    (void)state;
    duet_st *st = tu_ref_load("metrics.safetensors");
    duet_tensor *ta = tu_ref_tensor(st, "img.a"), *tb = tu_ref_tensor(st, "img.b");
    uint8_t *a = to_bytes(ta), *b = to_bytes(tb);
    int64_t n = ta->shape[0], h = ta->shape[1], w = ta->shape[2], c = ta->shape[3];
    const char *modes[] = {"rgb", "y"};
    const int crops[] = {0, 4};
    for (int m = 0; m < 2; m++) {
        for (int k = 0; k < 2; k++) {
            float psnr[2], ssim[2];
            for (int64_t i = 0; i < n; i++) {
                double p, s;
                const char *conv = m == 1 ? "y" : NULL;
                TU_OK(duet_psnr(a + i * h * w * c, b + i * h * w * c, h, w, c, crops[k], conv, &p));
                TU_OK(duet_ssim(a + i * h * w * c, b + i * h * w * c, h, w, c, crops[k], conv, &s));
                psnr[i] = (float)p;
                ssim[i] = (float)s;
            }
            char key[64];
            snprintf(key, sizeof key, "psnr.%s.%d", modes[m], crops[k]);
            tu_assert_ref(st, key, psnr, n, 1e-6, 0);
            snprintf(key, sizeof key, "ssim.%s.%d", modes[m], crops[k]);
            tu_assert_ref(st, key, ssim, n, 1e-6, 0);
        }
    }
    free(a);
    free(b);
    duet_tensor_release(ta);
    duet_tensor_release(tb);
    duet_st_destroy(st);
}

static void test_evaluate(void **state) {
    (void)state;
    duet_st *st = tu_ref_load("metrics.safetensors");
    duet_tensor *out = tu_ref_tensor(st, "eval.out"), *gt = tu_ref_tensor(st, "eval.gt");
    duet_test_cfg cfg = duet_test_cfg_default();
    cfg.crop_border = 4;
    cfg.convert_to = "y";
    duet_log_vars lv;
    TU_OK(duet_evaluate(&cfg, out, gt, &lv));
    double p = 0, s = 0;
    assert_true(duet_log_vars_get(&lv, "PSNR", &p));
    assert_true(duet_log_vars_get(&lv, "SSIM", &s));
    float got[2] = {(float)p, (float)s};
    tu_assert_ref(st, "eval.psnr", got, 1, 1e-6, 0);
    tu_assert_ref(st, "eval.ssim", got + 1, 1, 1e-6, 0);
    duet_tensor_release(out);
    duet_tensor_release(gt);
    duet_st_destroy(st);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tensor2img),
        cmocka_unit_test(test_psnr_ssim),
        cmocka_unit_test(test_evaluate),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
