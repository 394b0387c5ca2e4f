/* The image-to-image GAN ops (conv_transpose2d, instance_norm2d,
 * reflection_pad2d, dropout): central finite-difference gradient checks of
 * every differentiable input, plus what a gradient check cannot see:
 * conv_transpose2d as the exact adjoint of conv2d, dropout's replay from a
 * saved rng, its eval and p = 0 / p = 1 behaviour and kept fraction, and
 * the shape errors naming the op and the shapes. PyTorch comparisons are in
 * test_ref_ops_gan.c. */
#include "testutil.h"

#include <math.h>
#include <string.h>

#define EPS 1e-2
#define RTOL 1e-2
#define ATOL 2e-3

static duet_tensor *randn_grad(duet_rng *rng, int ndim, const int64_t *shape, float scale) {
    duet_tensor *t = tu_randn(rng, ndim, shape, scale);
    t->requires_grad = true;
    return t;
}

static void release_all(int n, duet_tensor **ts) {
    for (int i = 0; i < n; i++) duet_tensor_release(ts[i]);
}

/* ---- conv_transpose2d ------------------------------------------------------------ */

typedef struct tconv_args {
    int stride, pad, out_pad;
} tconv_args;

static int g_tconv(void *c, duet_tensor *const *in, duet_tensor **out) {
    const tconv_args *a = c;
    return duet_conv_transpose2d(in[0], in[1], in[2], a->stride, a->pad, a->out_pad, out);
}

static int g_tconv_nobias(void *c, duet_tensor *const *in, duet_tensor **out) {
    const tconv_args *a = c;
    return duet_conv_transpose2d(in[0], in[1], NULL, a->stride, a->pad, a->out_pad, out);
}

static void test_gradcheck_conv_transpose2d(void **state) {
    (void)state;
    duet_rng rng = duet_rng_make(21, 0);
    tconv_args unet = {2, 1, 0}, resnet = {2, 1, 1}, odd = {3, 2, 2};
    duet_tensor *in[3] = {randn_grad(&rng, 4, (int64_t[]){2, 3, 3, 4}, 1.0f),
                          randn_grad(&rng, 4, (int64_t[]){3, 2, 4, 4}, 0.5f),
                          randn_grad(&rng, 1, (int64_t[]){2}, 1.0f)};
    tu_gradcheck(g_tconv, &unet, 3, in, EPS, RTOL, ATOL, 60);
    tu_gradcheck(g_tconv_nobias, &odd, 2, in, EPS, RTOL, ATOL, 60);
    release_all(3, in);
    duet_tensor *in3[3] = {randn_grad(&rng, 4, (int64_t[]){1, 2, 3, 3}, 1.0f),
                           randn_grad(&rng, 4, (int64_t[]){2, 3, 3, 3}, 0.5f),
                           randn_grad(&rng, 1, (int64_t[]){3}, 1.0f)};
    tu_gradcheck(g_tconv, &resnet, 3, in3, EPS, RTOL, ATOL, 60);
    release_all(3, in3);
}

/* <conv_transpose2d(x, w), y> == <x, conv2d(y, w)>: the transposed conv is
 * the adjoint of conv2d with the same weight (read as (C_in, C_out) one way
 * and (O, C) the other), the property that defines it. */
static void test_conv_transpose2d_is_conv_adjoint(void **state) {
    (void)state;
    duet_rng rng = duet_rng_make(22, 0);
    duet_tensor *x = tu_randn(&rng, 4, (int64_t[]){2, 3, 4, 5}, 1.0f);
    duet_tensor *w = tu_randn(&rng, 4, (int64_t[]){3, 4, 4, 4}, 1.0f);
    duet_tensor *t = NULL, *c = NULL;
    TU_OK(duet_conv_transpose2d(x, w, NULL, 2, 1, 0, &t)); /* (2, 4, 8, 10) */
    assert_int_equal(t->shape[2], 8);
    assert_int_equal(t->shape[3], 10);
    duet_tensor *y = tu_randn(&rng, 4, t->shape, 1.0f);
    TU_OK(duet_conv2d(y, w, NULL, 2, 1, &c)); /* (2, 3, 4, 5) */
    double lhs = 0.0, rhs = 0.0;
    for (int64_t i = 0; i < t->numel; i++) lhs += (double)t->data[i] * y->data[i];
    for (int64_t i = 0; i < x->numel; i++) rhs += (double)x->data[i] * c->data[i];
    if (!(fabs(lhs - rhs) <= 1e-4 * fabs(rhs) + 1e-3))
        fail_msg("<tconv(x), y> = %.9g but <x, conv(y)> = %.9g", lhs, rhs);
    duet_tensor *ts[5] = {x, w, t, y, c};
    release_all(5, ts);
}

/* ---- instance_norm2d, reflection_pad2d ---------------------------------------------- */

static int g_inorm(void *c, duet_tensor *const *in, duet_tensor **out) {
    (void)c;
    return duet_instance_norm2d(in[0], in[1], in[2], 1e-5f, out);
}

static int g_inorm_plain(void *c, duet_tensor *const *in, duet_tensor **out) {
    (void)c;
    return duet_instance_norm2d(in[0], NULL, NULL, 1e-5f, out);
}

static void test_gradcheck_instance_norm2d(void **state) {
    (void)state;
    duet_rng rng = duet_rng_make(23, 0);
    duet_tensor *in[3] = {randn_grad(&rng, 4, (int64_t[]){2, 3, 3, 4}, 2.0f),
                          randn_grad(&rng, 1, (int64_t[]){3}, 1.0f),
                          randn_grad(&rng, 1, (int64_t[]){3}, 1.0f)};
    tu_gradcheck(g_inorm, NULL, 3, in, EPS, RTOL, ATOL, 72);
    tu_gradcheck(g_inorm_plain, NULL, 1, in, EPS, RTOL, ATOL, 72);
    /* Every plane of the output has mean 0 and biased variance 1 - eps-ish. */
    duet_tensor *y = NULL;
    TU_OK(duet_instance_norm2d(in[0], NULL, NULL, 1e-5f, &y));
    for (int64_t q = 0; q < 6; q++) {
        double s = 0.0, ss = 0.0;
        for (int64_t i = 0; i < 12; i++) s += y->data[q * 12 + i];
        for (int64_t i = 0; i < 12; i++) ss += (double)y->data[q * 12 + i] * y->data[q * 12 + i];
        assert_true(fabs(s / 12) < 1e-6);
        assert_true(fabs(ss / 12 - 1.0) < 1e-4);
    }
    duet_tensor_release(y);
    release_all(3, in);
}

static int g_pad(void *c, duet_tensor *const *in, duet_tensor **out) {
    const int *p = c;
    return duet_reflection_pad2d(in[0], p[0], p[1], p[2], p[3], out);
}

static void test_gradcheck_reflection_pad2d(void **state) {
    (void)state;
    duet_rng rng = duet_rng_make(24, 0);
    duet_tensor *x = randn_grad(&rng, 4, (int64_t[]){1, 2, 4, 5}, 1.0f);
    int p3[4] = {3, 3, 3, 3}, asym[4] = {4, 1, 0, 2};
    tu_gradcheck(g_pad, p3, 1, &x, EPS, RTOL, ATOL, 40);
    tu_gradcheck(g_pad, asym, 1, &x, EPS, RTOL, ATOL, 40);
    /* Row 0 of a 1-row-padded plane is input row 1: no edge repeat. */
    duet_tensor *y = NULL;
    TU_OK(duet_reflection_pad2d(x, 1, 1, 1, 1, &y));
    for (int64_t j = 0; j < 5; j++) assert_true(y->data[j + 1] == x->data[5 + j]);
    assert_true(y->data[0] == x->data[5 + 1]);
    duet_tensor_release(y);
    duet_tensor_release(x);
}

/* ---- dropout ------------------------------------------------------------------------- */

typedef struct dropout_args {
    float p;
    duet_rng saved; /* every call replays the mask from this state */
} dropout_args;

static int g_dropout(void *c, duet_tensor *const *in, duet_tensor **out) {
    const dropout_args *a = c;
    duet_rng rng = a->saved;
    return duet_dropout(in[0], a->p, true, &rng, out);
}

static void test_gradcheck_dropout(void **state) {
    (void)state;
    duet_rng rng = duet_rng_make(25, 0);
    duet_tensor *x = randn_grad(&rng, 4, (int64_t[]){2, 3, 4, 5}, 1.0f);
    dropout_args a = {0.3f, duet_rng_make(99, 1)};
    tu_gradcheck(g_dropout, &a, 1, &x, EPS, RTOL, ATOL, 120);
    duet_tensor_release(x);
}

/* A saved rng replays the mask bitwise; the next call draws a new one; the
 * kept fraction is about 1-p; eval mode and p = 0 are the identity without
 * draws; p = 1 zeroes everything. */
static void test_dropout_semantics(void **state) {
    (void)state;
    duet_rng init = duet_rng_make(26, 0);
    duet_tensor *x = tu_rand(&init, 4, (int64_t[]){4, 8, 16, 16}, 0.5f, 1.5f); /* no zeros */
    duet_rng rng = duet_rng_make(5, 2), saved = rng;
    duet_tensor *a = NULL, *b = NULL, *c = NULL;
    TU_OK(duet_dropout(x, 0.5f, true, &rng, &a));
    assert_int_equal(rng.counter, saved.counter + (uint64_t)x->numel);
    TU_OK(duet_dropout(x, 0.5f, true, &rng, &c));
    rng = saved;
    TU_OK(duet_dropout(x, 0.5f, true, &rng, &b));
    assert_memory_equal(a->data, b->data, (size_t)x->numel * sizeof(float));
    assert_memory_not_equal(a->data, c->data, (size_t)x->numel * sizeof(float));
    int64_t kept = 0;
    for (int64_t i = 0; i < x->numel; i++) {
        if (a->data[i] == 0.0f) continue;
        kept++;
        assert_true(a->data[i] == x->data[i] * 2.0f);
    }
    /* 8192 Bernoulli(0.5) draws: sd 45, so +-300 is far outside chance. */
    assert_true(kept > 4096 - 300 && kept < 4096 + 300);
    duet_tensor_release(a);
    duet_tensor_release(b);
    duet_tensor_release(c);

    rng = saved;
    TU_OK(duet_dropout(x, 0.5f, false, &rng, &a));
    assert_ptr_equal(a, x);
    duet_tensor_release(a);
    TU_OK(duet_dropout(x, 0.0f, true, &rng, &a));
    assert_ptr_equal(a, x);
    duet_tensor_release(a);
    assert_int_equal(rng.counter, saved.counter);
    TU_OK(duet_dropout(x, 1.0f, true, &rng, &a));
    for (int64_t i = 0; i < x->numel; i++) assert_true(a->data[i] == 0.0f);
    duet_tensor_release(a);
    tu_expect_error(duet_dropout(x, 1.5f, true, &rng, &a), DUET_EINVAL, "dropout", "1.5", NULL);
    assert_null(a);
    duet_tensor_release(x);
}

/* ---- shape errors -------------------------------------------------------------------- */

static void test_shape_errors(void **state) {
    (void)state;
    duet_tensor *x = tu_zeros(4, (int64_t[]){2, 3, 4, 4}), *y = NULL;
    duet_tensor *w = tu_zeros(4, (int64_t[]){4, 2, 3, 3});
    duet_tensor *b = tu_zeros(1, (int64_t[]){5});
    duet_tensor *w_ok = tu_zeros(4, (int64_t[]){3, 2, 3, 3});
    duet_tensor *flat = tu_zeros(2, (int64_t[]){2, 3});
    duet_tensor *one = tu_zeros(4, (int64_t[]){2, 3, 1, 1});
    tu_expect_error(duet_conv_transpose2d(x, w, NULL, 2, 1, 0, &y), DUET_ESHAPE,
                    "conv_transpose2d", "[2, 3, 4, 4]", "[4, 2, 3, 3]", NULL);
    assert_null(y);
    tu_expect_error(duet_conv_transpose2d(x, w_ok, b, 2, 1, 0, &y), DUET_ESHAPE,
                    "conv_transpose2d", "[5]", "[3, 2, 3, 3]", NULL);
    tu_expect_error(duet_conv_transpose2d(x, w_ok, NULL, 2, 1, 2, &y), DUET_EINVAL,
                    "conv_transpose2d", "output_padding 2", NULL);
    tu_expect_error(duet_instance_norm2d(flat, NULL, NULL, 1e-5f, &y), DUET_ESHAPE,
                    "instance_norm2d", "[2, 3]", NULL);
    tu_expect_error(duet_instance_norm2d(one, NULL, NULL, 1e-5f, &y), DUET_ESHAPE,
                    "instance_norm2d", "[2, 3, 1, 1]", NULL);
    tu_expect_error(duet_instance_norm2d(x, b, b, 1e-5f, &y), DUET_ESHAPE, "instance_norm2d",
                    "[5]", "[2, 3, 4, 4]", NULL);
    tu_expect_error(duet_reflection_pad2d(x, 4, 0, 0, 0, &y), DUET_ESHAPE, "reflection_pad2d",
                    "left 4", "[2, 3, 4, 4]", NULL);
    tu_expect_error(duet_reflection_pad2d(flat, 1, 1, 1, 1, &y), DUET_ESHAPE,
                    "reflection_pad2d", "[2, 3]", NULL);
    assert_null(y);
    duet_tensor *ts[6] = {x, w, b, w_ok, flat, one};
    release_all(6, ts);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gradcheck_conv_transpose2d),
        cmocka_unit_test(test_conv_transpose2d_is_conv_adjoint),
        cmocka_unit_test(test_gradcheck_instance_norm2d),
        cmocka_unit_test(test_gradcheck_reflection_pad2d),
        cmocka_unit_test(test_gradcheck_dropout),
        cmocka_unit_test(test_dropout_semantics),
        cmocka_unit_test(test_shape_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
