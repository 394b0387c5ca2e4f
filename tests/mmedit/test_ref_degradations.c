/* Real-ESRGAN's degradations (src/data/degradations.c) against MMEditing
 * 0.16.1's own steps on the same image with the same draws
 * (tests/mmedit/degradations_ref.py -> degradations.safetensors): the seven
 * blur kernels and RandomBlur's filtering, UnsharpMasking as the
 * Real-ESRGAN configs set it and with OpenCV's fixed 7-tap kernel,
 * RandomNoise's Gaussian and Poisson noise in colour and gray,
 * RandomResize (bilinear, bicubic, area; down, up, OpenCV's integer
 * and 2x special cases, a drawn scale), RandomJPEGCompression at three
 * qualities, Quantize. Each case prints its
 * largest difference. Runs as the `mmedit` test mmedit_degradations. */
#include "testutil.h"

#include "data/degradations.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The entry `name` as malloc'd floats (through duet_tensor_copy_to_host);
 * *n its element count. */
static float *ref_floats(const duet_st *st, const char *name, int64_t *n) {
    duet_tensor *t = tu_ref_tensor(st, name);
    float *v = malloc((size_t)t->numel * sizeof *v);
    assert_non_null(v);
    TU_OK(duet_tensor_copy_to_host(t, v));
    *n = t->numel;
    duet_tensor_release(t);
    return v;
}

/* got against want (n values) within atol + rtol |want|; prints the
 * largest difference. */
static void expect_close(const char *what, const float *got, const float *want, int64_t n,
                         double atol, double rtol) {
    double worst = 0, worst_rel = 0;
    int64_t bad = 0, at = -1;
    for (int64_t i = 0; i < n; i++) {
        const double d = fabs((double)got[i] - want[i]);
        if (d > worst) worst = d, at = i;
        if (want[i] != 0) worst_rel = fmax(worst_rel, d / fabs(want[i]));
        bad += d > atol + rtol * fabs(want[i]);
    }
    printf("    %-22s max abs %.3g, max rel %.3g over %lld values\n", what, worst, worst_rel,
           (long long)n);
    if (bad > 0)
        fail_msg("%s: %lld of %lld values beyond %g + %g |want|; the largest %.3g at %lld "
                 "(got %.9g, want %.9g)", what, (long long)bad, (long long)n, atol, rtol, worst,
                 (long long)at, got[at], want[at]);
}

typedef struct fixture {
    duet_st *st;
    float *img;
    int64_t n;
} fixture;

enum { H = 64, W = 72, C = 3 };

static int setup(void **state) {
    fixture *f = calloc(1, sizeof *f);
    if (f == NULL) return -1;
    f->st = tu_ref_load("degradations.safetensors");
    f->img = ref_floats(f->st, "image", &f->n);
    *state = f;
    return f->n == H * W * C ? 0 : -1;
}

static int teardown(void **state) {
    fixture *f = *state;
    free(f->img);
    duet_st_destroy(f->st);
    free(f);
    return 0;
}

static const char *const kinds[7] = {"iso", "aniso", "generalized_iso", "generalized_aniso",
                                     "plateau_iso", "plateau_aniso", "sinc"};

static void test_blur_vs_mmedit(void **state) {
    fixture *f = *state;
    float *out = malloc((size_t)f->n * sizeof *out);
    assert_non_null(out);
    for (int i = 0; i < 7; i++) {
        char key[64];
        int64_t np = 0, nk = 0, no = 0;
        snprintf(key, sizeof key, "blur%d.params", i);
        float *p = ref_floats(f->st, key, &np);
        snprintf(key, sizeof key, "blur%d.kernel", i);
        float *want_k = ref_floats(f->st, key, &nk);
        snprintf(key, sizeof key, "blur%d.out", i);
        float *want = ref_floats(f->st, key, &no);
        assert_int_equal(np, 6);
        duet__blur_kind kind;
        TU_OK(duet__blur_kind_parse(kinds[i], &kind));
        const int k = (int)p[0];
        assert_int_equal(nk, (int64_t)k * k);
        double *kernel = malloc((size_t)nk * sizeof *kernel);
        float *kf = malloc((size_t)nk * sizeof *kf);
        assert_non_null(kernel);
        assert_non_null(kf);
        TU_OK(duet__blur_kernel(kind, k, p[1], p[2], p[3], p[4], p[5], kernel));
        for (int64_t j = 0; j < nk; j++) kf[j] = (float)kernel[j];
        char what[64];
        snprintf(what, sizeof what, "kernel %s", kinds[i]);
        /* The reference's float32 sigma matrices and LAPACK's inverse
         * round differently from the adjugate's by an ulp of float32. */
        expect_close(what, kf, want_k, nk, 1e-7, 1e-5);
        duet__filter2d(out, f->img, H, W, C, kernel, k);
        snprintf(what, sizeof what, "blur %s", kinds[i]);
        expect_close(what, out, want, no, 2e-6, 0);
        free(kernel);
        free(kf);
        free(p);
        free(want_k);
        free(want);
    }
    free(out);
}

static void test_unsharp_masking_vs_mmedit(void **state) {
    fixture *f = *state;
    float *out = malloc((size_t)f->n * sizeof *out);
    assert_non_null(out);
    for (int i = 0; i < 2; i++) {
        char key[64];
        int64_t np = 0, no = 0;
        snprintf(key, sizeof key, "unsharp%d.params", i);
        float *p = ref_floats(f->st, key, &np);
        snprintf(key, sizeof key, "unsharp%d.out", i);
        float *want = ref_floats(f->st, key, &no);
        TU_OK(duet__unsharp_masking(out, f->img, H, W, C, (int)p[0], p[1], p[2], p[3]));
        char what[64];
        snprintf(what, sizeof what, "unsharp k=%d", (int)p[0]);
        expect_close(what, out, want, no, 2e-6, 0);
        free(p);
        free(want);
    }
    free(out);
}

static void test_noise_vs_mmedit(void **state) {
    fixture *f = *state;
    static const char *const what[4] = {"gaussian colour", "gaussian gray", "poisson colour",
                                        "poisson gray"};
    float *out = malloc((size_t)f->n * sizeof *out);
    float *q = malloc((size_t)f->n * sizeof *q);
    assert_non_null(out);
    assert_non_null(q);
    for (int i = 0; i < 4; i++) {
        char key[64];
        int64_t np = 0, nd = 0, no = 0;
        snprintf(key, sizeof key, "noise%d.params", i);
        float *p = ref_floats(f->st, key, &np);
        snprintf(key, sizeof key, "noise%d.draws", i);
        float *draws = ref_floats(f->st, key, &nd);
        snprintf(key, sizeof key, "noise%d.out", i);
        float *want = ref_floats(f->st, key, &no);
        const bool gray = p[1] != 0;
        memcpy(out, f->img, (size_t)f->n * sizeof *out);
        if (i < 2) {
            assert_int_equal(nd, f->n); /* randn(h, w, c), gray noise or not */
            duet__gaussian_noise(out, H, W, C, draws, p[0], gray);
        } else {
            double levels = 0;
            TU_OK(duet__poisson_rates(q, &levels, f->img, H, W, C, gray));
            assert_int_equal(nd, gray ? H * W : f->n);
            double *counts = malloc((size_t)nd * sizeof *counts);
            assert_non_null(counts);
            for (int64_t j = 0; j < nd; j++) counts[j] = draws[j];
            duet__poisson_noise(out, H, W, C, q, counts, levels, p[0], gray);
            free(counts);
        }
        expect_close(what[i], out, want, no, 1e-6, 0);
        free(p);
        free(draws);
        free(want);
    }
    free(q);
    free(out);
}

static void test_resize_vs_mmedit(void **state) {
    fixture *f = *state;
    static const char *const names[3] = {"bilinear", "bicubic", "area"};
    for (int i = 0; i < 10; i++) {
        char key[64];
        int64_t np = 0, no = 0;
        snprintf(key, sizeof key, "resize%d.params", i);
        float *p = ref_floats(f->st, key, &np);
        snprintf(key, sizeof key, "resize%d.out", i);
        float *want = ref_floats(f->st, key, &no);
        const int64_t oh = (int64_t)p[1], ow = (int64_t)p[2];
        assert_int_equal(no, oh * ow * C);
        duet__resize_kind kind;
        TU_OK(duet__resize_kind_parse(names[(int)p[0]], &kind));
        float *out = malloc((size_t)no * sizeof *out);
        assert_non_null(out);
        TU_OK(duet__cv_resize_f32(out, oh, ow, f->img, H, W, C, kind));
        char what[64];
        snprintf(what, sizeof what, "resize %s %lldx%lld", names[(int)p[0]], (long long)oh,
                 (long long)ow);
        /* OpenCV's float resize (vectorised, fused multiply-adds) and
         * this scalar one round differently: within 4e-6, a thousandth of
         * an 8-bit level. */
        expect_close(what, out, want, no, 4e-6, 0);
        free(out);
        free(p);
        free(want);
    }
    /* A drawn scale: the output size as RandomResize computes it. */
    int64_t ns = 0, no = 0, oh = 0, ow = 0;
    float *scale = ref_floats(f->st, "resize_drawn.scale", &ns);
    float *want = ref_floats(f->st, "resize_drawn.out", &no);
    duet__random_resize_size(H, W, scale[0], false, &oh, &ow);
    assert_int_equal(no, oh * ow * C);
    float *out = malloc((size_t)no * sizeof *out);
    assert_non_null(out);
    TU_OK(duet__cv_resize_f32(out, oh, ow, f->img, H, W, C, DUET__RESIZE_BICUBIC));
    expect_close("resize drawn scale", out, want, no, 4e-6, 0);
    free(out);
    free(scale);
    free(want);
}

static void test_jpeg_vs_mmedit(void **state) {
    fixture *f = *state;
    float *out = malloc((size_t)f->n * sizeof *out);
    assert_non_null(out);
    for (int i = 0; i < 3; i++) {
        char key[64];
        int64_t nq = 0, no = 0;
        snprintf(key, sizeof key, "jpeg%d.quality", i);
        float *quality = ref_floats(f->st, key, &nq);
        snprintf(key, sizeof key, "jpeg%d.out", i);
        float *want = ref_floats(f->st, key, &no);
        memcpy(out, f->img, (size_t)f->n * sizeof *out);
        TU_OK(duet__jpeg_compress(out, H, W, (int)quality[0]));
        char what[64];
        snprintf(what, sizeof what, "jpeg quality %d", (int)quality[0]);
        expect_close(what, out, want, no, 0, 0); /* the same libjpeg-turbo arithmetic */
        free(quality);
        free(want);
    }
    free(out);
}

static void test_quantize_vs_mmedit(void **state) {
    fixture *f = *state;
    int64_t n = 0, no = 0;
    float *v = ref_floats(f->st, "quantize.in", &n);
    float *want = ref_floats(f->st, "quantize.out", &no);
    duet__quantize(v, n);
    expect_close("quantize", v, want, no, 0, 0);
    free(v);
    free(want);
}

/* The Poisson sampler's first two moments over many draws (no reference:
 * numpy's stream is its own). */
static void test_poisson_draw_moments(void **state) {
    (void)state;
    duet_rng rng = duet_rng_make(7, 0);
    static const double lambdas[3] = {0.5, 7.0, 180.0};
    for (int i = 0; i < 3; i++) {
        const int n = 200000;
        double s = 0, s2 = 0;
        for (int j = 0; j < n; j++) {
            const double k = duet__poisson_draw(&rng, lambdas[i]);
            assert_true(k >= 0 && k == floor(k));
            s += k;
            s2 += k * k;
        }
        const double mean = s / n, var = s2 / n - mean * mean;
        /* 6 standard errors of each estimate. */
        assert_true(fabs(mean - lambdas[i]) < 6 * sqrt(lambdas[i] / n));
        assert_true(fabs(var - lambdas[i]) < 6 * lambdas[i] * sqrt(2.0 / n) + 6 * sqrt(lambdas[i] / n));
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_blur_vs_mmedit),
        cmocka_unit_test(test_unsharp_masking_vs_mmedit),
        cmocka_unit_test(test_noise_vs_mmedit),
        cmocka_unit_test(test_resize_vs_mmedit),
        cmocka_unit_test(test_jpeg_vs_mmedit),
        cmocka_unit_test(test_quantize_vs_mmedit),
        cmocka_unit_test(test_poisson_draw_moments),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
