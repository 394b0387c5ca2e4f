/* The layer ops besides conv (tests/unit/test_ops_conv.c; duet_sgemm is in
 * test_kernels.c): linear, batch_norm2d
 * (training and eval statistics, running updates, gradients, and the
 * SyncBatchNorm reduce path checked by splitting a batch in two),
 * max_pool2d (values, argmax routing, ties, NaN, overlap; the 2x2 stride-2
 * loop against the general rule), elu's
 * vectorised expm1 against double precision, and relu / leaky_relu (their
 * vectorised mask words) against their definitions, and Adam's vectorised,
 * threaded update against its scalar element (duet__adam_element). */
#include "testutil.h"

#include <math.h>
#include <string.h>

#include "ops/ops_internal.h"

/* ---- linear ---------------------------------------------------------------- */

static int linear_op(void *ctx, duet_tensor *const *in, duet_tensor **out) {
    (void)ctx;
    return duet_linear(in[0], in[1], in[2], out);
}

static void test_linear_forward(void **state) {
    (void)state;
    duet_rng rng = duet_rng_make(6, 0);
    /* 3-D input: the leading dims are batch dims, as in F.linear. */
    duet_tensor *x = tu_randn(&rng, 3, (int64_t[]){2, 3, 5}, 1.0f);
    duet_tensor *w = tu_randn(&rng, 2, (int64_t[]){4, 5}, 1.0f);
    duet_tensor *b = tu_randn(&rng, 1, (int64_t[]){4}, 1.0f);
    for (int with_bias = 0; with_bias < 2; with_bias++) {
        duet_tensor *y = NULL;
        TU_OK(duet_linear(x, w, with_bias ? b : NULL, &y));
        assert_int_equal(y->ndim, 3);
        assert_int_equal(y->shape[0], 2);
        assert_int_equal(y->shape[1], 3);
        assert_int_equal(y->shape[2], 4);
        float want[24];
        for (int r = 0; r < 6; r++)
            for (int o = 0; o < 4; o++) {
                double s = with_bias ? b->data[o] : 0.0;
                for (int i = 0; i < 5; i++) s += (double)x->data[r * 5 + i] * w->data[o * 5 + i];
                want[r * 4 + o] = (float)s;
            }
        tu_assert_close(y->data, want, 24, 1e-5, 1e-5, "linear forward");
        duet_tensor_release(y);
    }
    duet_tensor_release(x);
    duet_tensor_release(w);
    duet_tensor_release(b);
}

static void test_linear_gradcheck(void **state) {
    (void)state;
    duet_rng rng = duet_rng_make(7, 0);
    duet_tensor *x = tu_randn(&rng, 2, (int64_t[]){3, 6}, 1.0f);
    duet_tensor *w = tu_randn(&rng, 2, (int64_t[]){4, 6}, 1.0f);
    duet_tensor *b = tu_randn(&rng, 1, (int64_t[]){4}, 1.0f);
    x->requires_grad = w->requires_grad = b->requires_grad = true;
    duet_tensor *in[3] = {x, w, b};
    tu_gradcheck(linear_op, NULL, 3, in, 1e-2, 1e-2, 1e-3, 64);
    duet_tensor *in2[3] = {x, w, NULL};
    tu_gradcheck(linear_op, NULL, 3, in2, 1e-2, 1e-2, 1e-3, 64);
    duet_tensor_release(x);
    duet_tensor_release(w);
    duet_tensor_release(b);
}

static void test_linear_shape_errors(void **state) {
    (void)state;
    duet_tensor *x = tu_zeros(2, (int64_t[]){3, 6});
    duet_tensor *w = tu_zeros(2, (int64_t[]){4, 5});
    duet_tensor *w6 = tu_zeros(2, (int64_t[]){4, 6});
    duet_tensor *b = tu_zeros(1, (int64_t[]){3});
    duet_tensor *y = NULL;
    tu_expect_error(duet_linear(x, w, NULL, &y), DUET_ESHAPE, "linear", "[3, 6]", "[4, 5]",
                    NULL);
    tu_expect_error(duet_linear(x, w6, b, &y), DUET_ESHAPE, "linear", "[3]", "[4, 6]", NULL);
    assert_null(y);
    duet_tensor_release(x);
    duet_tensor_release(w);
    duet_tensor_release(w6);
    duet_tensor_release(b);
}

/* ---- batch norm ------------------------------------------------------------- */

#define BN_N 4
#define BN_C 3
#define BN_S 6 /* H*W = 3*2 */

typedef struct bn_args {
    duet_batch_norm_opts opts;
    duet_tensor *rm, *rv;
} bn_args;

static int bn_op(void *ctx, duet_tensor *const *in, duet_tensor **out) {
    bn_args *a = ctx;
    return duet_batch_norm2d(in[0], in[1], in[2], a->rm, a->rv, NULL, &a->opts, out);
}

static void test_bn_train_forward_and_running(void **state) {
    (void)state;
    duet_rng rng = duet_rng_make(8, 0);
    duet_tensor *x = tu_randn(&rng, 4, (int64_t[]){BN_N, BN_C, 3, 2}, 2.0f);
    for (int64_t i = 0; i < x->numel; i++) x->data[i] += 1.5f; /* a non-zero mean */
    duet_tensor *w = tu_randn(&rng, 1, (int64_t[]){BN_C}, 1.0f);
    duet_tensor *b = tu_randn(&rng, 1, (int64_t[]){BN_C}, 1.0f);
    duet_tensor *rm = tu_randn(&rng, 1, (int64_t[]){BN_C}, 1.0f);
    duet_tensor *rv = tu_rand(&rng, 1, (int64_t[]){BN_C}, 0.5f, 2.0f);
    duet_tensor *nb = tu_zeros(1, (int64_t[]){1});
    nb->data[0] = 3.0f;
    float rm0[BN_C], rv0[BN_C];
    memcpy(rm0, rm->data, sizeof rm0);
    memcpy(rv0, rv->data, sizeof rv0);
    duet_batch_norm_opts o = duet_batch_norm_opts_default();
    assert_true(o.training);
    assert_true(fabsf(o.momentum - 0.1f) < 1e-7f && fabsf(o.eps - 1e-5f) < 1e-10f);
    assert_null(o.reduce);
    duet_tensor *y = NULL;
    TU_OK(duet_batch_norm2d(x, w, b, rm, rv, nb, &o, &y));
    float want[BN_N * BN_C * BN_S], wrm[BN_C], wrv[BN_C];
    for (int c = 0; c < BN_C; c++) {
        double s = 0, sq = 0, cnt = BN_N * BN_S;
        for (int n = 0; n < BN_N; n++)
            for (int q = 0; q < BN_S; q++) s += x->data[(n * BN_C + c) * BN_S + q];
        double mean = s / cnt;
        for (int n = 0; n < BN_N; n++)
            for (int q = 0; q < BN_S; q++) {
                double d = x->data[(n * BN_C + c) * BN_S + q] - mean;
                sq += d * d;
            }
        for (int n = 0; n < BN_N; n++)
            for (int q = 0; q < BN_S; q++) {
                int i = (n * BN_C + c) * BN_S + q;
                want[i] = (float)((x->data[i] - mean) / sqrt(sq / cnt + 1e-5) * w->data[c] +
                                  b->data[c]);
            }
        wrm[c] = (float)(0.9 * rm0[c] + 0.1 * mean);
        wrv[c] = (float)(0.9 * rv0[c] + 0.1 * sq / (cnt - 1));
    }
    tu_assert_close(y->data, want, y->numel, 1e-5, 1e-5, "bn train forward");
    tu_assert_close(rm->data, wrm, BN_C, 1e-5, 1e-6, "running_mean");
    tu_assert_close(rv->data, wrv, BN_C, 1e-5, 1e-6, "running_var (unbiased)");
    assert_true(nb->data[0] == 4.0f);
    duet_tensor_release(y);

    /* Eval: running statistics, nothing updated. */
    o.training = false;
    memcpy(rm0, rm->data, sizeof rm0);
    memcpy(rv0, rv->data, sizeof rv0);
    TU_OK(duet_batch_norm2d(x, w, b, rm, rv, nb, &o, &y));
    for (int n = 0; n < BN_N; n++)
        for (int c = 0; c < BN_C; c++)
            for (int q = 0; q < BN_S; q++) {
                int i = (n * BN_C + c) * BN_S + q;
                want[i] = (float)((x->data[i] - rm0[c]) / sqrt(rv0[c] + 1e-5) * w->data[c] +
                                  b->data[c]);
            }
    tu_assert_close(y->data, want, y->numel, 1e-5, 1e-5, "bn eval forward");
    tu_assert_close(rm->data, rm0, BN_C, 0, 0, "running_mean unchanged in eval");
    tu_assert_close(rv->data, rv0, BN_C, 0, 0, "running_var unchanged in eval");
    assert_true(nb->data[0] == 4.0f);
    duet_tensor_release(y);
    duet_tensor *ts[] = {x, w, b, rm, rv, nb};
    for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++) duet_tensor_release(ts[i]);
}

static void bn_gradcheck(bool training, bool affine) {
    duet_rng rng = duet_rng_make(9, training * 2 + affine);
    duet_tensor *x = tu_randn(&rng, 4, (int64_t[]){BN_N, BN_C, 3, 2}, 1.0f);
    duet_tensor *w = affine ? tu_rand(&rng, 1, (int64_t[]){BN_C}, 0.5f, 1.5f) : NULL;
    duet_tensor *b = affine ? tu_randn(&rng, 1, (int64_t[]){BN_C}, 1.0f) : NULL;
    bn_args a = {duet_batch_norm_opts_default(), NULL, NULL};
    a.opts.training = training;
    a.rm = tu_randn(&rng, 1, (int64_t[]){BN_C}, 0.5f);
    a.rv = tu_rand(&rng, 1, (int64_t[]){BN_C}, 0.5f, 2.0f);
    x->requires_grad = true;
    if (affine) w->requires_grad = b->requires_grad = true;
    duet_tensor *in[3] = {x, w, b};
    tu_gradcheck(bn_op, &a, 3, in, 1e-2, 2e-2, 2e-3, 72);
    duet_tensor_release(x);
    duet_tensor_release(w);
    duet_tensor_release(b);
    duet_tensor_release(a.rm);
    duet_tensor_release(a.rv);
}

static void test_bn_gradcheck(void **state) {
    (void)state;
    bn_gradcheck(true, true);
    bn_gradcheck(true, false);
    bn_gradcheck(false, true);
}

/* A stand-in for the other process of a two-process SyncBatchNorm: adds the
 * statistics of the other half of the batch, in the order the op asks for
 * them (forward [sum, count], forward [squared deviations], backward
 * [sum dy, sum dy*xhat]). */
typedef struct fake_peer {
    const float *x;  /* the other half (n, C, S) */
    const float *dy; /* its upstream gradient */
    int64_t n;
    int phase;
    double mean[BN_C], invstd[BN_C];
} fake_peer;

static int fake_reduce(void *ctx, float *buf, int64_t count) {
    fake_peer *p = ctx;
    for (int c = 0; c < BN_C; c++) {
        double s0 = 0, s1 = 0;
        for (int64_t n = 0; n < p->n; n++)
            for (int q = 0; q < BN_S; q++) {
                int64_t i = (n * BN_C + c) * BN_S + q;
                double xv = p->x[i];
                if (p->phase == 0) {
                    s0 += xv;
                    s1 += 1;
                } else if (p->phase == 1) {
                    s0 += (xv - p->mean[c]) * (xv - p->mean[c]);
                } else {
                    s0 += p->dy[i];
                    s1 += p->dy[i] * (xv - p->mean[c]) * p->invstd[c];
                }
            }
        buf[c] += (float)s0;
        if (p->phase != 1) buf[BN_C + c] += (float)s1;
    }
    if (p->phase == 0) {
        assert_int_equal(count, 2 * BN_C);
        for (int c = 0; c < BN_C; c++) p->mean[c] = buf[c] / buf[BN_C + c];
    } else if (p->phase == 1) {
        assert_int_equal(count, BN_C);
        for (int c = 0; c < BN_C; c++)
            p->invstd[c] = 1.0 / sqrt(buf[c] / (BN_N * BN_S) + 1e-5);
    } else {
        assert_int_equal(p->phase, 2);
        assert_int_equal(count, 2 * BN_C);
    }
    p->phase++;
    return DUET_OK;
}

static void test_bn_sync_split_batch(void **state) {
    (void)state;
    duet_rng rng = duet_rng_make(10, 0);
    duet_tensor *x = tu_randn(&rng, 4, (int64_t[]){BN_N, BN_C, 3, 2}, 1.0f);
    for (int64_t i = 0; i < x->numel / 2; i++) x->data[i] += 2.0f; /* halves differ */
    duet_tensor *w = tu_rand(&rng, 1, (int64_t[]){BN_C}, 0.5f, 1.5f);
    duet_tensor *b = tu_randn(&rng, 1, (int64_t[]){BN_C}, 1.0f);
    duet_tensor *r = tu_randn(&rng, 4, x->shape, 1.0f);
    duet_tensor *rm = tu_zeros(1, (int64_t[]){BN_C}), *rv = tu_zeros(1, (int64_t[]){BN_C});
    duet_tensor_fill(rv, 1.0f);
    x->requires_grad = w->requires_grad = b->requires_grad = true;
    duet_batch_norm_opts o = duet_batch_norm_opts_default();
    duet_tensor *y = NULL;
    TU_OK(duet_batch_norm2d(x, w, b, rm, rv, NULL, &o, &y));
    tu_backprop_with(y, r->data);

    const int64_t half = BN_N / 2, hn = half * BN_C * BN_S;
    float dw_sum[BN_C] = {0}, db_sum[BN_C] = {0};
    for (int part = 0; part < 2; part++) {
        const int64_t mine = part * hn, other = (1 - part) * hn;
        duet_tensor *xh = NULL, *wh = NULL, *bh = NULL, *yh = NULL;
        TU_OK(duet_tensor_from_data(4, (int64_t[]){half, BN_C, 3, 2}, x->data + mine, &xh));
        TU_OK(duet_tensor_clone(w, &wh));
        TU_OK(duet_tensor_clone(b, &bh));
        xh->requires_grad = wh->requires_grad = bh->requires_grad = true;
        duet_tensor *rmh = tu_zeros(1, (int64_t[]){BN_C}), *rvh = tu_zeros(1, (int64_t[]){BN_C});
        duet_tensor_fill(rvh, 1.0f);
        fake_peer peer = {.x = x->data + other, .dy = r->data + other, .n = half};
        duet_batch_norm_opts oh = duet_batch_norm_opts_default();
        oh.reduce = fake_reduce;
        oh.reduce_ctx = &peer;
        TU_OK(duet_batch_norm2d(xh, wh, bh, rmh, rvh, NULL, &oh, &yh));
        assert_int_equal(peer.phase, 2);
        tu_backprop_with(yh, r->data + mine);
        assert_int_equal(peer.phase, 3);
        tu_assert_close(yh->data, y->data + mine, hn, 1e-5, 1e-5, "half-batch output");
        tu_assert_close(xh->grad, x->grad + mine, hn, 1e-4, 1e-5, "half-batch dx");
        tu_assert_close(rmh->data, rm->data, BN_C, 1e-5, 1e-6, "half-batch running_mean");
        tu_assert_close(rvh->data, rv->data, BN_C, 1e-5, 1e-6, "half-batch running_var");
        for (int c = 0; c < BN_C; c++) {
            dw_sum[c] += wh->grad[c];
            db_sum[c] += bh->grad[c];
        }
        duet_tensor *ts[] = {xh, wh, bh, yh, rmh, rvh};
        for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++) duet_tensor_release(ts[i]);
    }
    /* The affine gradients stay local; their sum over processes is the whole. */
    tu_assert_close(dw_sum, w->grad, BN_C, 1e-4, 1e-5, "sum of half-batch dw");
    tu_assert_close(db_sum, b->grad, BN_C, 1e-4, 1e-5, "sum of half-batch db");
    duet_tensor *ts[] = {x, w, b, r, rm, rv, y};
    for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++) duet_tensor_release(ts[i]);
}

static int failing_reduce(void *ctx, float *buf, int64_t count) {
    (void)ctx;
    (void)buf;
    (void)count;
    return duet__error(DUET_EMPI, "peer went away");
}

static void test_bn_errors(void **state) {
    (void)state;
    duet_tensor *x = tu_zeros(4, (int64_t[]){2, 3, 2, 2});
    duet_tensor *one = tu_zeros(4, (int64_t[]){1, 3, 1, 1});
    duet_tensor *w4 = tu_zeros(1, (int64_t[]){4});
    duet_tensor *y = NULL;
    duet_batch_norm_opts o = duet_batch_norm_opts_default();
    tu_expect_error(duet_batch_norm2d(x, w4, NULL, NULL, NULL, NULL, &o, &y), DUET_ESHAPE,
                    "batch_norm2d", "[4]", "[2, 3, 2, 2]", NULL);
    tu_expect_error(duet_batch_norm2d(one, NULL, NULL, NULL, NULL, NULL, &o, &y), DUET_EINVAL,
                    "batch_norm2d", "more than one value", NULL);
    o.reduce = failing_reduce;
    tu_expect_error(duet_batch_norm2d(x, NULL, NULL, NULL, NULL, NULL, &o, &y), DUET_EMPI,
                    "batch_norm2d", "peer went away", NULL);
    o.training = false;
    o.reduce = NULL;
    tu_expect_error(duet_batch_norm2d(x, NULL, NULL, NULL, NULL, NULL, &o, &y), DUET_EINVAL,
                    "batch_norm2d", "running", NULL);
    assert_null(y);
    duet_tensor_release(x);
    duet_tensor_release(one);
    duet_tensor_release(w4);
}

/* ---- max pool ---------------------------------------------------------------- */

typedef struct pool_args {
    int k, s;
} pool_args;

static int pool_op(void *ctx, duet_tensor *const *in, duet_tensor **out) {
    const pool_args *a = ctx;
    return duet_max_pool2d(in[0], a->k, a->s, out);
}

/* Distinct values 0.05 apart in a random order, so that a finite
 * difference never changes which element is the maximum. */
static duet_tensor *distinct(duet_rng *rng, int64_t n, int64_t c, int64_t h, int64_t w) {
    duet_tensor *x = tu_zeros(4, (int64_t[]){n, c, h, w});
    int64_t *perm = malloc((size_t)x->numel * sizeof(int64_t));
    duet_rng_permutation(rng, perm, x->numel);
    for (int64_t i = 0; i < x->numel; i++) x->data[i] = 0.05f * (float)perm[i] - 1.0f;
    free(perm);
    return x;
}

static void test_max_pool_forward_and_grad(void **state) {
    (void)state;
    duet_rng rng = duet_rng_make(12, 0);
    const pool_args cases[] = {{2, 2}, {3, 2}, {2, 1}, {3, 3}};
    for (size_t t = 0; t < sizeof cases / sizeof cases[0]; t++) {
        const int k = cases[t].k, s = cases[t].s;
        duet_tensor *x = distinct(&rng, 2, 3, 7, 6);
        duet_tensor *y = NULL;
        TU_OK(duet_max_pool2d(x, k, s, &y));
        const int64_t oh = (7 - k) / s + 1, ow = (6 - k) / s + 1;
        assert_int_equal(y->shape[2], oh);
        assert_int_equal(y->shape[3], ow);
        float *want = malloc((size_t)y->numel * sizeof(float));
        for (int64_t p = 0; p < 6; p++)
            for (int64_t i = 0; i < oh; i++)
                for (int64_t j = 0; j < ow; j++) {
                    float m = -INFINITY;
                    for (int a = 0; a < k; a++)
                        for (int b = 0; b < k; b++)
                            m = fmaxf(m, x->data[p * 42 + (i * s + a) * 6 + j * s + b]);
                    want[(p * oh + i) * ow + j] = m;
                }
        tu_assert_close(y->data, want, y->numel, 0, 0, "max_pool2d forward");
        free(want);
        duet_tensor_release(y);
        x->requires_grad = true;
        pool_args a = cases[t];
        tu_gradcheck(pool_op, &a, 1, &x, 1e-3, 1e-3, 1e-3, 1000);
        duet_tensor_release(x);
    }
}

static void test_max_pool_ties_nan_errors(void **state) {
    (void)state;
    /* Ties: the first maximum in window order gets the gradient. */
    duet_tensor *x = tu_zeros(4, (int64_t[]){1, 1, 2, 4});
    x->requires_grad = true;
    duet_tensor *y = NULL;
    TU_OK(duet_max_pool2d(x, 2, 2, &y));
    tu_backprop_with(y, (float[]){1.0f, 2.0f});
    duet_tensor_release(y);
    float want[8] = {1, 0, 2, 0, 0, 0, 0, 0};
    tu_assert_close(x->grad, want, 8, 0, 0, "tie gradient");
    /* A NaN in the window propagates, as in PyTorch. */
    x->data[5] = NAN;
    x->data[2] = 7.0f;
    x->requires_grad = false;
    TU_OK(duet_max_pool2d(x, 2, 2, &y));
    /* x (1, 1, 2, 4): window 0 holds elements 0, 1, 4, 5; window 1 holds 2, 3, 6, 7. */
    assert_true(isnan(y->data[0]));
    assert_true(y->data[1] == 7.0f);
    duet_tensor_release(y);
    duet_tensor *small = tu_zeros(4, (int64_t[]){1, 2, 3, 1});
    tu_expect_error(duet_max_pool2d(small, 2, 2, &y), DUET_ESHAPE, "max_pool2d", "[1, 2, 3, 1]",
                    NULL);
    assert_null(y);
    duet_tensor_release(small);
    duet_tensor_release(x);
}

/* 2x2 stride-2 pooling (its own vectorised loop) against the rule of the
 * general one, on planes with odd and even sides, many ties and NaNs:
 * every output, and which input each output's gradient reaches (the first
 * maximum in row-major window order; the first NaN when there is one). */
static void test_max_pool_2x2_ties_and_nans(void **state) {
    (void)state;
    duet_rng rng = duet_rng_make(13, 0);
    const int64_t sides[3][2] = {{7, 6}, {8, 9}, {64, 64}};
    for (int t = 0; t < 3; t++) {
        const int64_t h = sides[t][0], w = sides[t][1], oh = h / 2, ow = w / 2, planes = 2 * 3;
        duet_tensor *x = tu_zeros(4, (int64_t[]){2, 3, h, w});
        for (int64_t i = 0; i < x->numel; i++) {
            const uint64_t r = duet_rng_u64(&rng) % 16;
            x->data[i] = r == 0 ? NAN : r == 1 ? -INFINITY : (float)(r % 3) - 1.0f;
        }
        x->requires_grad = true;
        duet_tensor *y = NULL;
        TU_OK(duet_max_pool2d(x, 2, 2, &y));
        float *dy = malloc((size_t)y->numel * sizeof(float));
        float *want_dx = calloc((size_t)x->numel, sizeof(float));
        assert_true(dy != NULL && want_dx != NULL);
        for (int64_t p = 0; p < planes; p++)
            for (int64_t i = 0; i < oh; i++)
                for (int64_t j = 0; j < ow; j++) {
                    const int64_t q = (p * oh + i) * ow + j;
                    int64_t best = -1;
                    for (int a = 0; a < 2 && (best < 0 || !isnan(x->data[best])); a++)
                        for (int b = 0; b < 2; b++) {
                            const int64_t idx = (p * h + 2 * i + a) * w + 2 * j + b;
                            const float v = x->data[idx];
                            if (best < 0 || v > x->data[best] || isnan(v)) best = idx;
                            if (isnan(v)) break;
                        }
                    const float want = x->data[best];
                    if (memcmp(&want, &y->data[q], sizeof want) != 0)
                        fail_msg("%lldx%lld: y[%lld] = %g, want %g", (long long)h, (long long)w,
                                 (long long)q, (double)y->data[q], (double)want);
                    dy[q] = (float)(q + 1);
                    want_dx[best] += dy[q];
                }
        tu_backprop_with(y, dy);
        for (int64_t i = 0; i < x->numel; i++)
            if (x->grad[i] != want_dx[i])
                fail_msg("%lldx%lld: dx[%lld] = %g, want %g", (long long)h, (long long)w,
                         (long long)i, (double)x->grad[i], (double)want_dx[i]);
        free(dy);
        free(want_dx);
        duet_tensor_release(y);
        duet_tensor_release(x);
    }
}

/* ---- elu ------------------------------------------------------------------- */

/* Distance in units in the last place between two finite floats of one sign. */
static int64_t ulps(float a, float b) {
    int32_t ia, ib;
    memcpy(&ia, &a, sizeof ia);
    memcpy(&ib, &b, sizeof ib);
    return ia > ib ? (int64_t)ia - ib : (int64_t)ib - ia;
}

/* elu's forward (its own expm1, activation.c) within 2 ulp of double
 * precision's expm1 on every 61st float of [-30, 0] (about 17 million,
 * denormals included) and on -30 to -100, with alpha 1; alpha 0.7 within
 * 3 float roundings (and half the denormal spacing); x > 0, -0, -inf and
 * NaN as PyTorch gives them. */
static void test_elu_forward_accuracy(void **state) {
    (void)state;
    const uint32_t neg_zero = 0x80000000u, neg_30 = 0xc1f00000u, stride = 61;
    const int64_t n = (int64_t)((neg_30 - neg_zero) / stride) + 1 + 8;
    duet_tensor *x = NULL;
    TU_OK(duet_tensor_create(1, (int64_t[]){n}, &x));
    for (int64_t i = 0; i < n - 8; i++) {
        const uint32_t b = neg_zero + (uint32_t)i * stride;
        memcpy(&x->data[i], &b, sizeof b);
    }
    const float extra[8] = {-30.0f, -31.5f, -87.0f, -100.0f, 0.5f, 3.0f, 1e-30f, -1e-38f};
    memcpy(x->data + n - 8, extra, sizeof extra);
    for (int a = 0; a < 2; a++) {
        const float alpha = a == 0 ? 1.0f : 0.7f;
        duet_tensor *y = NULL;
        TU_OK(duet_elu(x, alpha, &y));
        int64_t worst = 0;
        float worst_x = 0.0f;
        for (int64_t i = 0; i < n; i++) {
            const float v = x->data[i];
            if (v > 0.0f) {
                assert_true(y->data[i] == v);
                continue;
            }
            const double want = (double)alpha * expm1((double)v);
            if (a == 0) {
                const int64_t u = ulps(y->data[i], (float)want);
                if (u > worst) worst = u, worst_x = v;
            } else if (fabs(y->data[i] - want) > 3.0 * 0x1p-24 * fabs(want) + 0x1p-149) {
                fail_msg("elu(%a, 0.7) = %a, want %a", (double)v, (double)y->data[i], want);
            }
        }
        if (worst > 2) fail_msg("elu: %lld ulp from expm1 at x = %a", (long long)worst, (double)worst_x);
        duet_tensor_release(y);
    }
    duet_tensor_release(x);
    /* -0 stays -0 (alpha * expm1(-0)), -inf gives -alpha, NaN stays NaN. */
    duet_tensor *s = NULL, *t = NULL;
    TU_OK(duet_tensor_create(1, (int64_t[]){3}, &s));
    s->data[0] = -0.0f;
    s->data[1] = -INFINITY;
    s->data[2] = NAN;
    TU_OK(duet_elu(s, 0.5f, &t));
    assert_true(t->data[0] == 0.0f && signbit(t->data[0]));
    assert_true(t->data[1] == -0.5f);
    assert_true(isnan(t->data[2]));
    duet_tensor_release(s);
    duet_tensor_release(t);
}

/* ---- relu, leaky_relu ----------------------------------------------------------- */

/* relu and leaky_relu (slopes 0.2 and -0.5, copying and in place) against
 * their definitions element by element, bit for bit, on sizes around the
 * kernels' 64-element mask words and 4096-element chunks (a partial last
 * word, a partial last chunk, one large enough for threads), with +-0,
 * +-inf and NaN among the inputs: the output, and the gradient of
 * sum(out * r), which reads back the bit mask. */
static void test_rectifiers_elementwise(void **state) {
    (void)state;
    const int64_t sizes[] = {1, 31, 33, 63, 64, 65, 4096, 4096 + 64 * 3 + 5, 70001};
    const float slopes[] = {0.0f, 0.2f, -0.5f}; /* 0: relu */
    const float special[] = {0.0f, -0.0f, INFINITY, -INFINITY, NAN, 1e-38f, -1e-38f};
    duet_rng rng = duet_rng_make(11, 0);
    for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++) {
        const int64_t n = sizes[si];
        duet_tensor *x0 = tu_randn(&rng, 1, (int64_t[]){n}, 1.0f);
        duet_tensor *r = tu_randn(&rng, 1, (int64_t[]){n}, 1.0f);
        for (int64_t i = 0; i < n; i += 5) x0->data[i] = special[(i / 5) % 7];
        for (size_t k = 0; k < sizeof slopes / sizeof slopes[0]; k++) {
            for (int inplace = 0; inplace < 2; inplace++) {
                const float slope = slopes[k];
                duet_tensor *x = NULL, *h = NULL, *y = NULL, *m = NULL, *loss = NULL;
                TU_OK(duet_tensor_create(1, (int64_t[]){n}, &x));
                memcpy(x->data, x0->data, (size_t)n * sizeof(float));
                x->requires_grad = true;
                /* A fresh op output that the in-place form may overwrite. */
                TU_OK(duet_scale(x, 1.0f, &h));
                if (slope == 0.0f) TU_OK(inplace ? duet_relu_inplace(h, &y) : duet_relu(h, &y));
                else
                    TU_OK(inplace ? duet_leaky_relu_inplace(h, slope, &y)
                                  : duet_leaky_relu(h, slope, &y));
                duet_tensor_release(h);
                for (int64_t i = 0; i < n; i++) {
                    const float v = x0->data[i];
                    const float want = slope == 0.0f ? (v < 0.0f ? 0.0f : v)
                                                     : (v > 0.0f ? v : slope * v);
                    if (memcmp(&want, &y->data[i], sizeof want) != 0)
                        fail_msg("n %lld slope %g inplace %d: out[%lld] = %a for x %a, want %a",
                                 (long long)n, (double)slope, inplace, (long long)i,
                                 (double)y->data[i], (double)v, (double)want);
                }
                TU_OK(duet_mul(y, r, &m));
                TU_OK(duet_sum(m, &loss));
                TU_OK(duet_backward(loss));
                for (int64_t i = 0; i < n; i++) {
                    const float v = x0->data[i], g = r->data[i];
                    const float want = 0.0f + (v > 0.0f ? g : slope * g);
                    if (memcmp(&want, &x->grad[i], sizeof want) != 0)
                        fail_msg("n %lld slope %g inplace %d: grad[%lld] = %a for x %a, want %a",
                                 (long long)n, (double)slope, inplace, (long long)i,
                                 (double)x->grad[i], (double)v, (double)want);
                }
                duet_tensor_release(loss);
                duet_tensor_release(m);
                duet_tensor_release(y);
                duet_tensor_release(x);
            }
        }
        duet_tensor_release(r);
        duet_tensor_release(x0);
    }
}

/* ---- adam ------------------------------------------------------------------ */

/* duet_adam_update (vectorised, in chunks over threads) against
 * duet__adam_element one element at a time, bit for bit, with and without
 * weight decay, over two tensors: one large enough for threads and a
 * partial last chunk, one of 5 elements; second moments include zeros, and
 * the two tensors are at different steps. */
static void test_adam_update_matches_elementwise(void **state) {
    (void)state;
    const int64_t sizes[2] = {70001, 5}, steps[2] = {3, 1};
    duet_rng rng = duet_rng_make(9, 0);
    for (int wd = 0; wd < 2; wd++) {
        const duet_adam_hparams hp = {.lr = 0.01f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f,
                                      .weight_decay = wd ? 0.01f : 0.0f};
        duet_tensor *p[2], *m[2], *v[2];
        float *want_p[2], *want_m[2], *want_v[2];
        for (int i = 0; i < 2; i++) {
            const int64_t n = sizes[i];
            p[i] = tu_randn(&rng, 1, (int64_t[]){n}, 1.0f);
            m[i] = tu_randn(&rng, 1, (int64_t[]){n}, 0.1f);
            v[i] = tu_randn(&rng, 1, (int64_t[]){n}, 0.1f);
            TU_OK(duet_tensor_ensure_grad(p[i]));
            for (int64_t j = 0; j < n; j++) {
                v[i]->data[j] = j % 7 == 0 ? 0.0f : v[i]->data[j] * v[i]->data[j];
                p[i]->grad[j] = duet_rng_normal(&rng);
            }
            want_p[i] = malloc((size_t)n * sizeof(float));
            want_m[i] = malloc((size_t)n * sizeof(float));
            want_v[i] = malloc((size_t)n * sizeof(float));
            assert_true(want_p[i] != NULL && want_m[i] != NULL && want_v[i] != NULL);
            memcpy(want_p[i], p[i]->data, (size_t)n * sizeof(float));
            memcpy(want_m[i], m[i]->data, (size_t)n * sizeof(float));
            memcpy(want_v[i], v[i]->data, (size_t)n * sizeof(float));
            duet__adam_consts k;
            duet__adam_consts_make(&hp, steps[i], &k);
            for (int64_t j = 0; j < n; j++)
                duet__adam_element(&want_p[i][j], &want_m[i][j], &want_v[i][j], p[i]->grad[j], &k);
        }
        TU_OK(duet_adam_update(2, p, m, v, steps, &hp));
        for (int i = 0; i < 2; i++) {
            const float *got[3] = {p[i]->data, m[i]->data, v[i]->data};
            const float *want[3] = {want_p[i], want_m[i], want_v[i]};
            for (int t = 0; t < 3; t++)
                for (int64_t j = 0; j < sizes[i]; j++)
                    if (memcmp(&got[t][j], &want[t][j], sizeof(float)) != 0)
                        fail_msg("wd %d tensor %d %s[%lld] = %a, want %a", wd, i,
                                 t == 0 ? "param" : t == 1 ? "exp_avg" : "exp_avg_sq",
                                 (long long)j, (double)got[t][j], (double)want[t][j]);
            free(want_p[i]);
            free(want_m[i]);
            free(want_v[i]);
            duet_tensor_release(p[i]);
            duet_tensor_release(m[i]);
            duet_tensor_release(v[i]);
        }
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_linear_forward),
        cmocka_unit_test(test_linear_gradcheck),
        cmocka_unit_test(test_linear_shape_errors),
        cmocka_unit_test(test_bn_train_forward_and_running),
        cmocka_unit_test(test_bn_gradcheck),
        cmocka_unit_test(test_bn_sync_split_batch),
        cmocka_unit_test(test_bn_errors),
        cmocka_unit_test(test_max_pool_forward_and_grad),
        cmocka_unit_test(test_max_pool_ties_nan_errors),
        cmocka_unit_test(test_max_pool_2x2_ties_and_nans),
        cmocka_unit_test(test_elu_forward_accuracy),
        cmocka_unit_test(test_rectifiers_elementwise),
        cmocka_unit_test(test_adam_update_matches_elementwise),
    };
    return cmocka_run_group_tests_name("ops_layers", tests, NULL, NULL);
}
