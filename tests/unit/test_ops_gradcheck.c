/* Finite-difference gradient checks for every op and every
 * differentiable input, plus the semantics that a gradient check cannot see
 * (aliasing inputs, numerics at large |x|, edge clamping, exact index
 * formulas, recording rules, shape errors). PyTorch comparisons are in
 * test_ref_ops_functional.c and test_ref_ops_layers.c. */
#include "testutil.h"

#include <math.h>
#include <string.h>

/* |got - want| <= tol, failing on NaN and infinities too (cmocka's
 * assert_float_equal accepts inf == 62.5 and NaN == 0). */
#define ASSERT_NEAR(got, want, tol)                                                        \
    do {                                                                                   \
        double g_ = (got), w_ = (want);                                                    \
        if (!(fabs(g_ - w_) <= (double)(tol)))                                             \
            fail_msg("%s = %.9g, want %.9g (tolerance %g)", #got, g_, w_, (double)(tol));  \
    } while (0)

#define EPS 1e-2
#define RTOL 1e-2
#define ATOL 2e-3

static duet_tensor *randn_grad(duet_rng *rng, int ndim, const int64_t *shape, float scale) {
    duet_tensor *t = tu_randn(rng, ndim, shape, scale);
    t->requires_grad = true;
    return t;
}

/* Moves every value at least `margin` away from 0 (kinks of relu and |.|). */
static void push_from_zero(duet_tensor *t, float margin) {
    for (int64_t i = 0; i < t->numel; i++)
        t->data[i] = t->data[i] >= 0.0f ? t->data[i] + margin : t->data[i] - margin;
}

static void release_all(int n, duet_tensor **ts) {
    for (int i = 0; i < n; i++) duet_tensor_release(ts[i]);
}

/* ---- op adapters for tu_gradcheck ------------------------------------------------ */

static int g_relu(void *c, duet_tensor *const *in, duet_tensor **out) {
    (void)c;
    return duet_relu(in[0], out);
}
static int g_leaky_relu(void *c, duet_tensor *const *in, duet_tensor **out) {
    return duet_leaky_relu(in[0], *(float *)c, out);
}
static int g_sigmoid(void *c, duet_tensor *const *in, duet_tensor **out) {
    (void)c;
    return duet_sigmoid(in[0], out);
}
static int g_tanh(void *c, duet_tensor *const *in, duet_tensor **out) {
    (void)c;
    return duet_tanh(in[0], out);
}
static int g_add(void *c, duet_tensor *const *in, duet_tensor **out) {
    (void)c;
    return duet_add(in[0], in[1], out);
}
static int g_sub(void *c, duet_tensor *const *in, duet_tensor **out) {
    (void)c;
    return duet_sub(in[0], in[1], out);
}
static int g_mul(void *c, duet_tensor *const *in, duet_tensor **out) {
    (void)c;
    return duet_mul(in[0], in[1], out);
}
static int g_scale(void *c, duet_tensor *const *in, duet_tensor **out) {
    return duet_scale(in[0], *(float *)c, out);
}
static int g_channel_affine(void *c, duet_tensor *const *in, duet_tensor **out) {
    const float *v = c; /* scale[3], shift[3] */
    return duet_channel_affine(in[0], v, v + 3, out);
}
static int g_pixel_shuffle(void *c, duet_tensor *const *in, duet_tensor **out) {
    return duet_pixel_shuffle(in[0], *(int *)c, out);
}
static int g_bilinear(void *c, duet_tensor *const *in, duet_tensor **out) {
    return duet_upsample_bilinear(in[0], *(int *)c, out);
}
static int g_flatten(void *c, duet_tensor *const *in, duet_tensor **out) {
    (void)c;
    return duet_flatten(in[0], out);
}
static int g_reshape(void *c, duet_tensor *const *in, duet_tensor **out) {
    (void)c;
    return duet_reshape(in[0], 3, (int64_t[]){4, 5, 6}, out);
}
static int g_concat(void *c, duet_tensor *const *in, duet_tensor **out) {
    return duet_concat_channels(*(int *)c, in, out);
}
static int g_sum(void *c, duet_tensor *const *in, duet_tensor **out) {
    (void)c;
    return duet_sum(in[0], out);
}
static int g_mean(void *c, duet_tensor *const *in, duet_tensor **out) {
    (void)c;
    return duet_mean(in[0], out);
}
static int g_l1(void *c, duet_tensor *const *in, duet_tensor **out) {
    return duet_l1_loss(in[0], in[1], *(float *)c, out);
}
static int g_mse(void *c, duet_tensor *const *in, duet_tensor **out) {
    return duet_mse_loss(in[0], in[1], *(float *)c, out);
}
static int g_bce(void *c, duet_tensor *const *in, duet_tensor **out) {
    return duet_bce_with_logits(in[0], in[1], *(float *)c, out);
}
static int g_bce_const(void *c, duet_tensor *const *in, duet_tensor **out) {
    const float *a = c; /* target, weight */
    return duet_bce_with_logits_const(in[0], a[0], a[1], out);
}

/* ---- gradient checks ----------------------------------------------------------------- */

static void test_gradcheck_activations(void **state) {
    (void)state;
    duet_rng rng = duet_rng_make(11, 0);
    const int64_t s[4] = {2, 3, 4, 5};
    duet_tensor *x = randn_grad(&rng, 4, s, 1.0f);
    push_from_zero(x, 0.1f); /* EPS = 0.01 never crosses the kink */
    tu_gradcheck(g_relu, NULL, 1, &x, EPS, RTOL, ATOL, 120);
    float slope = 0.2f;
    tu_gradcheck(g_leaky_relu, &slope, 1, &x, EPS, RTOL, ATOL, 120);
    slope = -0.5f; /* any slope, as PyTorch */
    tu_gradcheck(g_leaky_relu, &slope, 1, &x, EPS, RTOL, ATOL, 120);
    tu_gradcheck(g_sigmoid, NULL, 1, &x, EPS, RTOL, ATOL, 120);
    tu_gradcheck(g_tanh, NULL, 1, &x, EPS, RTOL, ATOL, 120);
    duet_tensor_release(x);
}

static void test_gradcheck_elementwise(void **state) {
    (void)state;
    duet_rng rng = duet_rng_make(12, 0);
    const int64_t s[3] = {3, 4, 5};
    duet_tensor *in[2] = {randn_grad(&rng, 3, s, 1.0f), randn_grad(&rng, 3, s, 1.0f)};
    tu_gradcheck(g_add, NULL, 2, in, EPS, RTOL, ATOL, 60);
    tu_gradcheck(g_sub, NULL, 2, in, EPS, RTOL, ATOL, 60);
    tu_gradcheck(g_mul, NULL, 2, in, EPS, RTOL, ATOL, 60);
    /* Only one input differentiable: the other gets nothing. */
    duet_tensor_release(in[1]);
    in[1] = tu_randn(&rng, 3, s, 1.0f);
    tu_gradcheck(g_mul, NULL, 2, in, EPS, RTOL, ATOL, 60);
    assert_null(in[1]->grad);
    float k = -1.7f;
    tu_gradcheck(g_scale, &k, 1, in, EPS, RTOL, ATOL, 60);
    release_all(2, in);

    const int64_t s4[4] = {2, 3, 2, 3};
    duet_tensor *x = randn_grad(&rng, 4, s4, 1.0f);
    float affine[6] = {2.0f, -0.5f, 4.4f, 0.1f, -1.0f, 3.0f};
    tu_gradcheck(g_channel_affine, affine, 1, &x, EPS, RTOL, ATOL, 36);
    duet_tensor_release(x);
}

static void test_gradcheck_resample(void **state) {
    (void)state;
    duet_rng rng = duet_rng_make(13, 0);
    int r = 2;
    duet_tensor *x = randn_grad(&rng, 4, (int64_t[]){2, 8, 3, 5}, 1.0f);
    tu_gradcheck(g_pixel_shuffle, &r, 1, &x, EPS, RTOL, ATOL, 240);
    duet_tensor_release(x);
    r = 3;
    x = randn_grad(&rng, 4, (int64_t[]){1, 18, 2, 3}, 1.0f);
    tu_gradcheck(g_pixel_shuffle, &r, 1, &x, EPS, RTOL, ATOL, 108);
    duet_tensor_release(x);
    /* Odd sizes and a single row: both edges clamp. Every element is
     * checked. */
    const int64_t shapes[4][4] = {{2, 2, 5, 7}, {1, 2, 3, 5}, {1, 1, 5, 3}, {1, 1, 1, 4}};
    const int factors[4] = {2, 3, 4, 3};
    for (int i = 0; i < 4; i++) {
        int f = factors[i];
        x = randn_grad(&rng, 4, shapes[i], 1.0f);
        tu_gradcheck(g_bilinear, &f, 1, &x, EPS, RTOL, ATOL, 200);
        duet_tensor_release(x);
    }
}

static void test_gradcheck_shape(void **state) {
    (void)state;
    duet_rng rng = duet_rng_make(14, 0);
    duet_tensor *x = randn_grad(&rng, 4, (int64_t[]){2, 3, 4, 5}, 1.0f);
    tu_gradcheck(g_flatten, NULL, 1, &x, EPS, RTOL, ATOL, 120);
    tu_gradcheck(g_reshape, NULL, 1, &x, EPS, RTOL, ATOL, 120);
    duet_tensor_release(x);

    duet_tensor *in[3] = {randn_grad(&rng, 4, (int64_t[]){2, 1, 3, 2}, 1.0f),
                          tu_randn(&rng, 4, (int64_t[]){2, 3, 3, 2}, 1.0f),
                          randn_grad(&rng, 4, (int64_t[]){2, 2, 3, 2}, 1.0f)};
    int n = 3;
    tu_gradcheck(g_concat, &n, 3, in, EPS, RTOL, ATOL, 100);
    assert_null(in[1]->grad);
    release_all(3, in);

    /* More inputs than a node holds: concatenated in two steps. */
    duet_tensor *many[11];
    for (int i = 0; i < 11; i++)
        many[i] = randn_grad(&rng, 4, (int64_t[]){2, 1 + i % 3, 2, 2}, 1.0f);
    n = 11;
    tu_gradcheck(g_concat, &n, 11, many, EPS, RTOL, ATOL, 40);
    release_all(11, many);
}

static void test_gradcheck_reductions_and_losses(void **state) {
    (void)state;
    duet_rng rng = duet_rng_make(15, 0);
    const int64_t s[4] = {2, 3, 4, 5};
    duet_tensor *x = randn_grad(&rng, 4, s, 1.0f);
    tu_gradcheck(g_sum, NULL, 1, &x, EPS, RTOL, ATOL, 120);
    tu_gradcheck(g_mean, NULL, 1, &x, EPS, RTOL, 1e-4, 120);
    duet_tensor_release(x);

    /* Both the prediction and the target differentiable. */
    duet_tensor *in[2] = {randn_grad(&rng, 4, s, 1.0f), randn_grad(&rng, 4, s, 1.0f)};
    float w = 3.0f;
    tu_gradcheck(g_mse, &w, 2, in, EPS, RTOL, 1e-4, 120);
    /* L1: keep pred - target away from 0. */
    duet_tensor *d = tu_randn(&rng, 4, s, 1.0f);
    push_from_zero(d, 0.1f);
    for (int64_t i = 0; i < d->numel; i++) in[1]->data[i] = in[0]->data[i] + d->data[i];
    duet_tensor_release(d);
    tu_gradcheck(g_l1, &w, 2, in, EPS, RTOL, 1e-4, 120);
    release_all(2, in);

    duet_tensor *bin[2] = {randn_grad(&rng, 4, s, 3.0f), tu_rand(&rng, 4, s, 0.0f, 1.0f)};
    w = 0.8f;
    tu_gradcheck(g_bce, &w, 2, bin, EPS, RTOL, 1e-4, 120);
    assert_null(bin[1]->grad);
    float args[2] = {1.0f, 1.5f};
    tu_gradcheck(g_bce_const, args, 1, bin, EPS, RTOL, 1e-4, 120);
    args[0] = 0.0f;
    tu_gradcheck(g_bce_const, args, 1, bin, EPS, RTOL, 1e-4, 120);
    release_all(2, bin);
}

/* ---- semantics ------------------------------------------------------------------------- */

/* backward of sum(y) for a y built by the caller */
static void backward_sum(duet_tensor *y) {
    duet_tensor *l = NULL;
    TU_OK(duet_sum(y, &l));
    TU_OK(duet_backward(l));
    duet_tensor_release(l);
}

static void test_same_input_twice(void **state) {
    (void)state;
    duet_rng rng = duet_rng_make(16, 0);
    duet_tensor *x = randn_grad(&rng, 2, (int64_t[]){3, 7}, 1.0f);
    duet_tensor *y = NULL;
    TU_OK(duet_add(x, x, &y));
    backward_sum(y);
    duet_tensor_release(y);
    for (int64_t i = 0; i < x->numel; i++) ASSERT_NEAR(x->grad[i], 2.0f, 0.0f);

    duet_tensor_zero_grad(x);
    TU_OK(duet_sub(x, x, &y));
    backward_sum(y);
    duet_tensor_release(y);
    for (int64_t i = 0; i < x->numel; i++) ASSERT_NEAR(x->grad[i], 0.0f, 0.0f);

    duet_tensor_zero_grad(x);
    TU_OK(duet_mul(x, x, &y)); /* d x^2 = 2x */
    backward_sum(y);
    duet_tensor_release(y);
    for (int64_t i = 0; i < x->numel; i++)
        ASSERT_NEAR(x->grad[i], 2.0f * x->data[i], 1e-6);

    duet_tensor *xs[3] = {x, x, x};
    duet_tensor_zero_grad(x);
    TU_OK(duet_concat_channels(3, xs, &y));
    assert_int_equal(y->shape[1], 21);
    backward_sum(y);
    duet_tensor_release(y);
    for (int64_t i = 0; i < x->numel; i++) ASSERT_NEAR(x->grad[i], 3.0f, 0.0f);

    /* Gradients accumulate across backward passes on leaves. */
    TU_OK(duet_add(x, x, &y));
    backward_sum(y);
    duet_tensor_release(y);
    for (int64_t i = 0; i < x->numel; i++) ASSERT_NEAR(x->grad[i], 5.0f, 0.0f);
    duet_tensor_release(x);
}

static void test_activation_values(void **state) {
    (void)state;
    const float v[8] = {-100.0f, -3.0f, -0.5f, 0.0f, 0.25f, 2.0f, 100.0f, -INFINITY};
    duet_tensor *x = NULL, *y = NULL;
    TU_OK(duet_tensor_from_data(1, (int64_t[]){8}, v, &x));
    TU_OK(duet_relu(x, &y));
    for (int i = 0; i < 8; i++) ASSERT_NEAR(y->data[i], v[i] > 0 ? v[i] : 0.0f, 0.0f);
    duet_tensor_release(y);
    TU_OK(duet_leaky_relu(x, 0.1f, &y));
    for (int i = 0; i < 7; i++)
        ASSERT_NEAR(y->data[i], v[i] > 0 ? v[i] : 0.1f * v[i], 1e-6);
    duet_tensor_release(y);
    TU_OK(duet_sigmoid(x, &y));
    for (int i = 0; i < 8; i++) {
        double want = 1.0 / (1.0 + exp(-(double)v[i]));
        assert_true(isfinite(y->data[i]));
        ASSERT_NEAR(y->data[i], want, 1e-7 + 1e-6 * want);
    }
    duet_tensor_release(y);
    TU_OK(duet_tanh(x, &y));
    for (int i = 0; i < 8; i++) ASSERT_NEAR(y->data[i], tanh((double)v[i]), 1e-6);
    duet_tensor_release(y);
    duet_tensor_release(x);

    /* NaN passes through every activation, as in PyTorch (a NaN that a
     * relu turned into 0 would hide a diverged run). */
    TU_OK(duet_tensor_from_data(1, (int64_t[]){2}, (float[]){NAN, -NAN}, &x));
    int (*acts[3])(duet_tensor *, duet_tensor **) = {duet_relu, duet_sigmoid, duet_tanh};
    for (int k = 0; k < 3; k++) {
        TU_OK(acts[k](x, &y));
        assert_true(isnan(y->data[0]) && isnan(y->data[1]));
        duet_tensor_release(y);
    }
    TU_OK(duet_leaky_relu(x, 0.2f, &y));
    assert_true(isnan(y->data[0]) && isnan(y->data[1]));
    duet_tensor_release(y);
    duet_tensor_release(x);
}

/* At exactly 0 PyTorch takes the negative side: relu' = 0, leaky' = slope. */
static void test_relu_gradient_at_zero(void **state) {
    (void)state;
    duet_tensor *x = NULL, *y = NULL;
    TU_OK(duet_tensor_from_data(1, (int64_t[]){3}, (float[]){-1.0f, 0.0f, 2.0f}, &x));
    x->requires_grad = true;
    TU_OK(duet_relu(x, &y));
    backward_sum(y);
    duet_tensor_release(y);
    tu_assert_close(x->grad, (float[]){0.0f, 0.0f, 1.0f}, 3, 0, 0, "relu'");
    duet_tensor_zero_grad(x);
    TU_OK(duet_leaky_relu(x, 0.2f, &y));
    backward_sum(y);
    duet_tensor_release(y);
    tu_assert_close(x->grad, (float[]){0.2f, 0.2f, 1.0f}, 3, 0, 0, "leaky_relu'");
    duet_tensor_release(x);
}

/* sigmoid and tanh take their backward from the saved output: at saturation
 * the gradient is 0 (not NaN) and elsewhere y (1 - y), 1 - y^2. */
static void test_saturated_gradients(void **state) {
    (void)state;
    const float v[4] = {-100.0f, -1.0f, 1.5f, 100.0f};
    duet_tensor *x = NULL, *y = NULL;
    TU_OK(duet_tensor_from_data(1, (int64_t[]){4}, v, &x));
    x->requires_grad = true;
    TU_OK(duet_sigmoid(x, &y));
    backward_sum(y);
    for (int i = 0; i < 4; i++) {
        double s = 1.0 / (1.0 + exp(-(double)v[i]));
        ASSERT_NEAR(x->grad[i], s * (1.0 - s), 1e-6);
    }
    duet_tensor_release(y);
    duet_tensor_zero_grad(x);
    TU_OK(duet_tanh(x, &y));
    backward_sum(y);
    for (int i = 0; i < 4; i++) {
        double t = tanh((double)v[i]);
        ASSERT_NEAR(x->grad[i], 1.0 - t * t, 1e-6);
    }
    duet_tensor_release(y);
    duet_tensor_release(x);
}

static void test_pixel_shuffle_layout(void **state) {
    (void)state;
    /* x[n, c*r*r + i*r + j, h, w] = 1000n + 100c + 10(i*r + j) + (h*W + w)
     * must land at out[n, c, h*r + i, w*r + j]. */
    const int r = 3;
    const int64_t N = 2, C = 2, H = 2, W = 3;
    duet_tensor *x = NULL, *y = NULL;
    TU_OK(duet_tensor_create4(N, C * r * r, H, W, &x));
    for (int64_t n = 0; n < N; n++)
        for (int64_t k = 0; k < C * r * r; k++)
            for (int64_t p = 0; p < H * W; p++)
                x->data[(n * C * r * r + k) * H * W + p] =
                    (float)(1000 * n + 100 * (k / (r * r)) + 10 * (k % (r * r)) + p);
    TU_OK(duet_pixel_shuffle(x, r, &y));
    assert_int_equal(y->ndim, 4);
    assert_int_equal(y->shape[1], C);
    assert_int_equal(y->shape[2], H * r);
    assert_int_equal(y->shape[3], W * r);
    for (int64_t n = 0; n < N; n++)
        for (int64_t c = 0; c < C; c++)
            for (int64_t oh = 0; oh < H * r; oh++)
                for (int64_t ow = 0; ow < W * r; ow++) {
                    int64_t i = oh % r, j = ow % r, h = oh / r, w = ow / r;
                    float want = (float)(1000 * n + 100 * c + 10 * (i * r + j) + h * W + w);
                    ASSERT_NEAR(y->data[((n * C + c) * H * r + oh) * W * r + ow], want,
                                       0.0f);
                }
    duet_tensor_release(y);
    duet_tensor_release(x);
}

static void test_bilinear_values(void **state) {
    (void)state;
    /* One row [0, 1], x2: PyTorch gives [0, 0.25, 0.75, 1] (both ends
     * clamped), and the same in every output row. */
    duet_tensor *x = NULL, *y = NULL;
    TU_OK(duet_tensor_from_data(4, (int64_t[]){1, 1, 1, 2}, (float[]){0.0f, 1.0f}, &x));
    TU_OK(duet_upsample_bilinear(x, 2, &y));
    assert_int_equal(y->shape[2], 2);
    assert_int_equal(y->shape[3], 4);
    const float want[8] = {0.0f, 0.25f, 0.75f, 1.0f, 0.0f, 0.25f, 0.75f, 1.0f};
    tu_assert_close(y->data, want, 8, 0.0, 1e-7, "bilinear [0,1] x2");
    duet_tensor_release(y);
    duet_tensor_release(x);

    /* x4 of [0, 4]: source coordinates (o + 0.5)/4 - 0.5 clamped at 0:
     * 0, 0, 0.125, 0.375, 0.625, 0.875, then the far edge repeats 1. */
    TU_OK(duet_tensor_from_data(4, (int64_t[]){1, 1, 1, 2}, (float[]){0.0f, 4.0f}, &x));
    TU_OK(duet_upsample_bilinear(x, 4, &y));
    const float want4[8] = {0.0f, 0.0f, 0.5f, 1.5f, 2.5f, 3.5f, 4.0f, 4.0f};
    tu_assert_close(y->data, want4, 8, 0.0, 1e-6, "bilinear [0,4] x4 row 0");
    duet_tensor_release(y);
    duet_tensor_release(x);

    /* A constant image stays constant; a ramp in h stays a ramp inside. */
    duet_rng rng = duet_rng_make(17, 0);
    x = tu_rand(&rng, 4, (int64_t[]){2, 3, 5, 7}, 0.0f, 1.0f);
    duet_tensor_fill(x, 0.375f);
    TU_OK(duet_upsample_bilinear(x, 3, &y));
    for (int64_t i = 0; i < y->numel; i++) ASSERT_NEAR(y->data[i], 0.375f, 1e-6);
    duet_tensor_release(y);
    duet_tensor_release(x);

    /* Gradient: sum of the output gives each input f*f in total. */
    x = tu_rand(&rng, 4, (int64_t[]){1, 2, 3, 5}, 0.0f, 1.0f);
    x->requires_grad = true;
    TU_OK(duet_upsample_bilinear(x, 4, &y));
    backward_sum(y);
    double total = 0.0;
    for (int64_t i = 0; i < x->numel; i++) total += x->grad[i];
    ASSERT_NEAR(total, 16.0 * (double)x->numel, 1e-3);
    duet_tensor_release(y);
    duet_tensor_release(x);
}

static void test_bce_large_logits(void **state) {
    (void)state;
    const float v[4] = {50.0f, -50.0f, 50.0f, -50.0f};
    const float t[4] = {1.0f, 0.0f, 0.0f, 1.0f};
    duet_tensor *x = NULL, *tt = NULL, *l = NULL;
    TU_OK(duet_tensor_from_data(1, (int64_t[]){4}, v, &x));
    TU_OK(duet_tensor_from_data(1, (int64_t[]){4}, t, &tt));
    x->requires_grad = true;
    TU_OK(duet_bce_with_logits(x, tt, 2.0f, &l));
    /* mean(~0, ~0, 50, 50) * 2 = 50 */
    ASSERT_NEAR(l->data[0], 50.0f, 1e-5);
    assert_int_equal(l->ndim, 1);
    assert_int_equal(l->shape[0], 1);
    TU_OK(duet_backward(l));
    duet_tensor_release(l);
    /* d/dx = w/n (sigmoid(x) - t): 0, 0, +0.5, -0.5 */
    const float g[4] = {0.0f, 0.0f, 0.5f, -0.5f};
    tu_assert_close(x->grad, g, 4, 1e-6, 1e-7, "bce grad at |x| = 50");

    /* A constant target, with |x| = 200 (exp would overflow naively). */
    x->data[0] = 200.0f;
    x->data[1] = -200.0f;
    duet_tensor_zero_grad(x);
    TU_OK(duet_bce_with_logits_const(x, 1.0f, 1.0f, &l));
    /* per element: ~0, 200, ~0, 50 */
    ASSERT_NEAR(l->data[0], 250.0f / 4.0f, 1e-4);
    TU_OK(duet_backward(l));
    duet_tensor_release(l);
    for (int i = 0; i < 4; i++) assert_true(isfinite(x->grad[i]));
    ASSERT_NEAR(x->grad[1], -0.25f, 1e-7);
    ASSERT_NEAR(x->grad[3], -0.25f, 1e-7);
    duet_tensor_release(tt);
    duet_tensor_release(x);
}

static void test_loss_values(void **state) {
    (void)state;
    duet_tensor *p = NULL, *t = NULL, *l = NULL;
    TU_OK(duet_tensor_from_data(2, (int64_t[]){2, 2}, (float[]){1.0f, 2.0f, 3.0f, 4.0f}, &p));
    TU_OK(duet_tensor_from_data(2, (int64_t[]){2, 2}, (float[]){0.0f, 2.0f, 5.0f, 3.0f}, &t));
    p->requires_grad = true;
    t->requires_grad = true;
    TU_OK(duet_l1_loss(p, t, 0.5f, &l)); /* 0.5 * (1 + 0 + 2 + 1) / 4 */
    ASSERT_NEAR(l->data[0], 0.5f, 1e-7);
    TU_OK(duet_backward(l));
    duet_tensor_release(l);
    /* sign(p - t) * w / n with sign(0) = 0; the target the opposite */
    tu_assert_close(p->grad, (float[]){0.125f, 0.0f, -0.125f, 0.125f}, 4, 0, 1e-8, "l1 dp");
    tu_assert_close(t->grad, (float[]){-0.125f, 0.0f, 0.125f, -0.125f}, 4, 0, 1e-8, "l1 dt");
    duet_tensor_zero_grad(p);
    duet_tensor_zero_grad(t);
    TU_OK(duet_mse_loss(p, t, 2.0f, &l)); /* 2 * (1 + 0 + 4 + 1) / 4 */
    ASSERT_NEAR(l->data[0], 3.0f, 1e-6);
    TU_OK(duet_backward(l));
    duet_tensor_release(l);
    tu_assert_close(p->grad, (float[]){1.0f, 0.0f, -2.0f, 1.0f}, 4, 0, 1e-7, "mse dp");
    tu_assert_close(t->grad, (float[]){-1.0f, 0.0f, 2.0f, -1.0f}, 4, 0, 1e-7, "mse dt");
    TU_OK(duet_mean(p, &l));
    ASSERT_NEAR(l->data[0], 2.5f, 1e-7);
    duet_tensor_release(l);
    TU_OK(duet_sum(p, &l));
    ASSERT_NEAR(l->data[0], 10.0f, 1e-7);
    duet_tensor_release(l);
    duet_tape_clear();
    duet_tensor_release(p);
    duet_tensor_release(t);
}

static void test_channel_affine_values(void **state) {
    (void)state;
    duet_tensor *x = NULL, *y = NULL;
    TU_OK(duet_tensor_from_data(4, (int64_t[]){2, 2, 1, 2}, (float[]){1, 2, 3, 4, 5, 6, 7, 8},
                                &x));
    TU_OK(duet_channel_affine(x, (float[]){2.0f, -1.0f}, (float[]){0.5f, 10.0f}, &y));
    const float want[8] = {2.5f, 4.5f, 7.0f, 6.0f, 10.5f, 12.5f, 3.0f, 2.0f};
    tu_assert_close(y->data, want, 8, 0, 0, "channel_affine");
    duet_tensor_release(y);
    duet_tensor_release(x);
}

static void test_reshape_shares_and_flows(void **state) {
    (void)state;
    duet_rng rng = duet_rng_make(18, 0);
    duet_tensor *x = randn_grad(&rng, 4, (int64_t[]){2, 3, 2, 2}, 1.0f);
    duet_tensor *f = NULL, *r = NULL, *y = NULL;
    TU_OK(duet_flatten(x, &f));
    assert_int_equal(f->ndim, 2);
    assert_int_equal(f->shape[0], 2);
    assert_int_equal(f->shape[1], 12);
    TU_OK(duet_reshape(f, 1, (int64_t[]){24}, &r));
    assert_memory_equal(r->data, x->data, 24 * sizeof(float));
    /* y = r * r through the chain: dx = 2x */
    TU_OK(duet_mul(r, r, &y));
    backward_sum(y);
    for (int64_t i = 0; i < x->numel; i++)
        ASSERT_NEAR(x->grad[i], 2.0f * x->data[i], 1e-6);
    /* The tape is gone: the results are constants now. */
    assert_false(y->requires_grad);
    assert_null(y->grad_fn);
    assert_int_equal(duet_tape_size(), 0);
    duet_tensor_release(y);
    duet_tensor_release(r);
    duet_tensor_release(f);
    duet_tensor_release(x);
}

static void test_recording_rules(void **state) {
    (void)state;
    duet_rng rng = duet_rng_make(19, 0);
    const int64_t s[2] = {4, 4};
    duet_tensor *a = tu_randn(&rng, 2, s, 1.0f), *b = randn_grad(&rng, 2, s, 1.0f);
    duet_tensor *y = NULL;
    assert_int_equal(duet_tape_size(), 0);
    /* No input requires grad: nothing recorded. */
    TU_OK(duet_tanh(a, &y));
    assert_int_equal(duet_tape_size(), 0);
    assert_false(y->requires_grad);
    duet_tensor_release(y);
    /* One does: recorded, the output requires grad. */
    TU_OK(duet_add(a, b, &y));
    assert_int_equal(duet_tape_size(), 1);
    assert_true(y->requires_grad);
    assert_non_null(y->grad_fn);
    assert_string_equal(y->grad_fn->op, "add");
    duet_tensor_release(y);
    duet_tape_clear();
    /* Grad mode off: nothing recorded even though b requires grad. */
    bool prev = duet_set_grad_enabled(false);
    TU_OK(duet_leaky_relu(b, 0.2f, &y));
    duet_tensor *l = NULL;
    TU_OK(duet_mse_loss(y, a, 1.0f, &l));
    assert_int_equal(duet_tape_size(), 0);
    assert_false(l->requires_grad);
    duet_set_grad_enabled(prev);
    duet_tensor_release(l);
    duet_tensor_release(y);
    /* BCE: the target never gets a gradient, even when it requires grad;
     * a target alone requiring grad records nothing. */
    duet_tensor *t = tu_rand(&rng, 2, s, 0.0f, 1.0f);
    t->requires_grad = true;
    TU_OK(duet_bce_with_logits(a, t, 1.0f, &l));
    assert_int_equal(duet_tape_size(), 0);
    duet_tensor_release(l);
    TU_OK(duet_bce_with_logits(b, t, 1.0f, &l));
    TU_OK(duet_backward(l));
    assert_non_null(b->grad);
    assert_null(t->grad);
    duet_tensor_release(l);
    duet_tensor_release(t);
    duet_tensor_release(a);
    duet_tensor_release(b);
}

/* Fails unless the call returned DUET_ESHAPE, left *out NULL (it is set to a
 * non-NULL marker first) and left a message naming the op and both shapes. */
#define EXPECT_SHAPE_ERROR(call, op, s1, s2)                                            \
    do {                                                                               \
        y = (duet_tensor *)&marker;                                                    \
        int rc_ = (call);                                                              \
        check_shape_error(rc_, y, op, s1, s2);                                         \
    } while (0)

static void check_shape_error(int rc, const duet_tensor *out, const char *op, const char *s1,
                              const char *s2) {
    assert_null(out);
    tu_expect_error(rc, DUET_ESHAPE, op, s1, s2, NULL); /* s2 may be NULL */
}

static void test_shape_errors(void **state) {
    (void)state;
    duet_tensor *a = tu_zeros(4, (int64_t[]){2, 3, 4, 5});
    duet_tensor *b = tu_zeros(4, (int64_t[]){2, 3, 5, 4});
    duet_tensor *c = tu_zeros(2, (int64_t[]){2, 60});
    duet_tensor *y = NULL;
    int marker;
    EXPECT_SHAPE_ERROR(duet_add(a, b, &y), "add", "[2, 3, 4, 5]", "[2, 3, 5, 4]");
    EXPECT_SHAPE_ERROR(duet_sub(a, c, &y), "sub", "[2, 3, 4, 5]", "[2, 60]");
    EXPECT_SHAPE_ERROR(duet_mul(b, a, &y), "mul", "[2, 3, 5, 4]", "[2, 3, 4, 5]");
    EXPECT_SHAPE_ERROR(duet_l1_loss(a, b, 1.0f, &y), "l1_loss", "[2, 3, 4, 5]",
                       "[2, 3, 5, 4]");
    EXPECT_SHAPE_ERROR(duet_mse_loss(a, c, 1.0f, &y), "mse_loss", "[2, 3, 4, 5]", "[2, 60]");
    EXPECT_SHAPE_ERROR(duet_bce_with_logits(c, a, 1.0f, &y), "bce_with_logits", "[2, 60]",
                       "[2, 3, 4, 5]");
    duet_tensor *ab[2] = {a, b};
    EXPECT_SHAPE_ERROR(duet_concat_channels(2, ab, &y), "concat_channels", "[2, 3, 4, 5]",
                       "[2, 3, 5, 4]");
    const int64_t bad[2] = {7, 17};
    EXPECT_SHAPE_ERROR(duet_reshape(a, 2, bad, &y), "reshape",
                       "[2, 3, 4, 5]", "[7, 17]");
    EXPECT_SHAPE_ERROR(duet_pixel_shuffle(a, 2, &y), "pixel_shuffle", "[2, 3, 4, 5]", NULL);
    EXPECT_SHAPE_ERROR(duet_upsample_bilinear(c, 2, &y), "upsample_bilinear", "[2, 60]",
                       NULL);
    duet_tensor *v = tu_zeros(1, (int64_t[]){6});
    EXPECT_SHAPE_ERROR(duet_channel_affine(v, NULL, NULL, &y), "channel_affine", "[6]", NULL);
    assert_int_equal(duet_pixel_shuffle(a, 0, &y), DUET_EINVAL);
    assert_int_equal(duet_upsample_bilinear(a, 0, &y), DUET_EINVAL);
    assert_int_equal(duet_concat_channels(0, ab, &y), DUET_EINVAL);
    assert_null(y);
    assert_int_equal(duet_tape_size(), 0);
    duet_tensor_release(v);
    duet_tensor_release(a);
    duet_tensor_release(b);
    duet_tensor_release(c);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gradcheck_activations),
        cmocka_unit_test(test_gradcheck_elementwise),
        cmocka_unit_test(test_gradcheck_resample),
        cmocka_unit_test(test_gradcheck_shape),
        cmocka_unit_test(test_gradcheck_reductions_and_losses),
        cmocka_unit_test(test_same_input_twice),
        cmocka_unit_test(test_activation_values),
        cmocka_unit_test(test_relu_gradient_at_zero),
        cmocka_unit_test(test_saturated_gradients),
        cmocka_unit_test(test_pixel_shuffle_layout),
        cmocka_unit_test(test_bilinear_values),
        cmocka_unit_test(test_bce_large_logits),
        cmocka_unit_test(test_loss_values),
        cmocka_unit_test(test_channel_affine_values),
        cmocka_unit_test(test_reshape_shares_and_flows),
        cmocka_unit_test(test_recording_rules),
        cmocka_unit_test(test_shape_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
