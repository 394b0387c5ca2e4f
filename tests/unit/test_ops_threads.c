/* The threaded non-GEMM kernels give the same results whatever the thread
 * count: each op's forward and backward on inputs large enough to be split
 * (above DUET__PAR_MIN_WORK), run with 1 and with 3 threads. Ops without a
 * GEMM must agree bit for bit (threads split channels or planes, never a
 * sum); conv2d, whose GEMM library may split its inner dimension, to float
 * rounding, on im2col + SGEMM and on oneDNN's float32 convolutions. */
#include "testutil.h"

#include <math.h>
#include <string.h>

#include "ops/ops_internal.h"

static void set_threads(int n) {
    duet_kernel_opts o = duet_kernel_opts_default();
    o.num_threads = n;
    assert_int_equal(duet_kernels_configure(&o), DUET_OK);
}

static duet_tensor *randn(duet_rng *rng, int64_t n, int64_t c, int64_t h, int64_t w, bool grad) {
    duet_tensor *t = NULL;
    assert_int_equal(duet_tensor_create4(n, c, h, w, &t), DUET_OK);
    for (int64_t i = 0; i < t->numel; i++) t->data[i] = duet_rng_normal(rng);
    t->requires_grad = grad;
    return t;
}

static duet_tensor *vec(duet_rng *rng, int64_t c, bool grad) {
    duet_tensor *t = NULL;
    assert_int_equal(duet_tensor_create(1, (int64_t[]){c}, &t), DUET_OK);
    for (int64_t i = 0; i < c; i++) t->data[i] = 1.0f + 0.1f * duet_rng_normal(rng);
    t->requires_grad = grad;
    return t;
}

/* Everything one run produces, concatenated. */
typedef struct result {
    float *v;
    int64_t n, cap;
} result;

static void keep(result *r, const float *x, int64_t n) {
    if (r->n + n > r->cap) {
        r->cap = (r->n + n) * 2;
        r->v = realloc(r->v, (size_t)r->cap * sizeof(float));
        assert_non_null(r->v);
    }
    memcpy(r->v + r->n, x, (size_t)n * sizeof(float));
    r->n += n;
}

static duet_tensor *sum2(duet_tensor *a, duet_tensor *b) {
    duet_tensor *s = NULL;
    assert_int_equal(duet_add(a, b, &s), DUET_OK);
    duet_tensor_release(a);
    duet_tensor_release(b);
    return s;
}

/* Batch norm -> add -> max pool -> pixel shuffle -> nearest and bilinear
 * upsampling -> mul -> L1, MSE and BCE losses; outputs and input gradients. */
static result run_no_gemm(int threads) {
    set_threads(threads);
    duet_rng rng = duet_rng_make(7, 0);
    duet_tensor *x = randn(&rng, 8, 16, 32, 32, true), *r = randn(&rng, 8, 16, 32, 32, true);
    duet_tensor *gamma = vec(&rng, 16, true), *beta = vec(&rng, 16, true);
    duet_tensor *rm = vec(&rng, 16, false), *rv = vec(&rng, 16, false);
    duet_tensor *bn = NULL, *sum = NULL, *lrelu = NULL, *pool = NULL, *ps = NULL, *psr = NULL,
                *near = NULL, *bil = NULL, *prod = NULL;
    duet_batch_norm_opts bo = duet_batch_norm_opts_default();
    assert_int_equal(duet_batch_norm2d(x, gamma, beta, rm, rv, NULL, &bo, &bn), DUET_OK);
    assert_int_equal(duet_add(bn, r, &sum), DUET_OK);
    assert_int_equal(duet_leaky_relu(sum, 0.2f, &lrelu), DUET_OK);
    assert_int_equal(duet_max_pool2d(lrelu, 2, 2, &pool), DUET_OK);    /* (8,16,16,16) */
    assert_int_equal(duet_pixel_shuffle(pool, 2, &ps), DUET_OK);       /* (8,4,32,32) */
    assert_int_equal(duet_relu_inplace(ps, &psr), DUET_OK);
    assert_int_equal(duet_upsample_nearest(psr, 2, &near), DUET_OK); /* (8,4,64,64) */
    assert_int_equal(duet_upsample_bilinear(psr, 2, &bil), DUET_OK); /* (8,4,64,64) */
    assert_int_equal(duet_mul(near, bil, &prod), DUET_OK);
    duet_tensor *l1 = NULL, *mse = NULL, *bce = NULL;
    assert_int_equal(duet_l1_loss(prod, bil, 0.5f, &l1), DUET_OK);
    assert_int_equal(duet_mse_loss(near, bil, 0.25f, &mse), DUET_OK);
    assert_int_equal(duet_bce_with_logits_const(prod, 1.0f, 0.1f, &bce), DUET_OK);
    duet_tensor *loss = sum2(sum2(l1, mse), bce);
    assert_int_equal(duet_backward(loss), DUET_OK);
    result res = {0};
    keep(&res, loss->data, 1);
    keep(&res, prod->data, prod->numel);
    keep(&res, rm->data, rm->numel);
    keep(&res, rv->data, rv->numel);
    keep(&res, x->grad, x->numel);
    keep(&res, r->grad, r->numel);
    keep(&res, gamma->grad, gamma->numel);
    keep(&res, beta->grad, beta->numel);
    duet_tensor *all[] = {loss, prod, bil, near, psr,   ps,   pool, lrelu,
                          sum,  bn,   x,   r,    gamma, beta, rm,   rv};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) duet_tensor_release(all[i]);
    return res;
}

/* 3x3 stride-1 and stride-2 convolutions with bias (columns of several
 * samples per GEMM in the second) and a 1x1; outputs and gradients. */
static result run_conv_on(int threads, duet_conv_path cp) {
    duet_kernel_opts o = duet_kernel_opts_default();
    o.num_threads = threads;
    o.conv = cp;
    assert_int_equal(duet_kernels_configure(&o), DUET_OK);
    duet_rng rng = duet_rng_make(11, 0);
    duet_tensor *x = randn(&rng, 4, 16, 32, 32, true);
    duet_tensor *w1 = randn(&rng, 16, 16, 3, 3, true), *w2 = randn(&rng, 24, 16, 3, 3, true);
    duet_tensor *w3 = randn(&rng, 8, 24, 1, 1, true);
    duet_tensor *b1 = vec(&rng, 16, true), *b2 = vec(&rng, 24, true);
    duet_tensor *y1 = NULL, *y2 = NULL, *y3 = NULL, *loss = NULL;
    assert_int_equal(duet_conv2d(x, w1, b1, 1, 1, &y1), DUET_OK);  /* (4,16,32,32) */
    assert_int_equal(duet_conv2d(y1, w2, b2, 2, 1, &y2), DUET_OK); /* (4,24,16,16) */
    assert_int_equal(duet_conv2d(y2, w3, NULL, 1, 0, &y3), DUET_OK);
    duet_tensor *t = randn(&rng, 4, 8, 16, 16, false);
    assert_int_equal(duet_mse_loss(y3, t, 1.0f, &loss), DUET_OK);
    assert_int_equal(duet_backward(loss), DUET_OK);
    result res = {0};
    keep(&res, y1->data, y1->numel);
    keep(&res, y3->data, y3->numel);
    duet_tensor *g[] = {x, w1, w2, w3, b1, b2};
    for (size_t i = 0; i < sizeof g / sizeof g[0]; i++) keep(&res, g[i]->grad, g[i]->numel);
    duet_tensor *all[] = {loss, t, y3, y2, y1, x, w1, w2, w3, b1, b2};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) duet_tensor_release(all[i]);
    return res;
}

static result run_conv(int threads) { return run_conv_on(threads, DUET_CONV_IM2COL); }

/* The first n values of a (1 thread) and b (3 threads) are the same bits. */
static void assert_same_bits(const result *a, const result *b, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        if (memcmp(&a->v[i], &b->v[i], sizeof(float)) != 0)
            fail_msg("value %lld differs: %.9g with 1 thread, %.9g with 3", (long long)i,
                     (double)a->v[i], (double)b->v[i]);
}

static void test_non_gemm_ops_are_bitwise_the_same(void **state) {
    (void)state;
    result a = run_no_gemm(1), b = run_no_gemm(3);
    assert_int_equal(a.n, b.n);
    assert_same_bits(&a, &b, a.n);
    free(a.v);
    free(b.v);
    set_threads(1);
}

static void test_conv_agrees_to_rounding(void **state) {
    (void)state;
    result a = run_conv(1), b = run_conv(3);
    assert_int_equal(a.n, b.n);
    tu_assert_close(b.v, a.v, a.n, 1e-4, 1e-4, "conv2d with 3 threads against 1");
    free(a.v);
    free(b.v);
    set_threads(1);
}

/* The same with the float32 convolutions on oneDNN's primitives
 * (DUET_CONV=onednn; the 16-channel convs go there): oneDNN splits the
 * work among its threads as it likes, so only agreement to rounding is
 * claimed (1 and 3 threads gave the same bits on this machine). */
static void test_onednn_conv_agrees_to_rounding(void **state) {
    (void)state;
    result a = run_conv_on(1, DUET_CONV_ONEDNN), b = run_conv_on(3, DUET_CONV_ONEDNN);
    assert_int_equal(a.n, b.n);
    tu_assert_close(b.v, a.v, a.n, 1e-4, 1e-4, "oneDNN conv2d with 3 threads against 1");
    free(a.v);
    free(b.v);
    set_threads(1);
}

/* Where a sample is a GEMM of its own, the threads take whole samples and
 * each product runs on one thread (sample_team in src/ops/conv.c): the
 * outputs and dX are then the same bits as with one thread. (dW is summed
 * per thread and the sums added in thread order: it agrees to rounding,
 * above, and would miss or double a thread's share if that went wrong.) */
static void test_conv_by_sample_is_bitwise(void **state) {
    (void)state;
    result a = run_conv(1), b = run_conv(3);
    /* keep() order: y1, y3, then x's gradient. */
    const int64_t n = 4 * 16 * 32 * 32 + 4 * 8 * 16 * 16 + 4 * 16 * 32 * 32;
    assert_true(a.n >= n && b.n == a.n);
    assert_same_bits(&a, &b, n);
    free(a.v);
    free(b.v);
    set_threads(1);
}

static void test_par_threads_rule(void **state) {
    (void)state;
    set_threads(4);
    assert_int_equal(duet__par_threads(DUET__PAR_MIN_WORK - 1), 1);
    assert_int_equal(duet__par_threads(DUET__PAR_MIN_WORK), 2);
    assert_int_equal(duet__par_threads(DUET__PAR_MIN_WORK * 100), 4);
    set_threads(1);
    assert_int_equal(duet__par_threads(DUET__PAR_MIN_WORK * 100), 1);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_non_gemm_ops_are_bitwise_the_same),
        cmocka_unit_test(test_conv_agrees_to_rounding),
        cmocka_unit_test(test_conv_by_sample_is_bitwise),
        cmocka_unit_test(test_onednn_conv_agrees_to_rounding),
        cmocka_unit_test(test_par_threads_rule),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
