/* duet_autograd_grad and second-order autograd (create_graph): for each op
 * with a backward in recorded ops, the gradient it gives equals the fused
 * backward's, and finite differences of <R2, grad> match the second-order
 * gradients a backward through the recorded gradient gives (the gradient
 * checks of gradients); the first-order backwards of the ops those
 * backwards are built from; the gradient penalty's pieces; the hook, .grad
 * and tape rules; the errors. */
#include "testutil.h"

#include <math.h>
#include <string.h>

#define EPS 1e-2
#define RTOL 2e-2
#define ATOL 3e-3

typedef int (*fwd_fn)(void *ctx, duet_tensor *const *in, duet_tensor **y);

static duet_tensor *randn_grad(duet_rng *rng, int ndim, const int64_t *shape, float scale) {
    duet_tensor *t = tu_randn(rng, ndim, shape, scale);
    t->requires_grad = true;
    return t;
}

static void push_from_zero(duet_tensor *t, float margin) {
    for (int64_t i = 0; i < t->numel; i++)
        t->data[i] = t->data[i] >= 0.0f ? t->data[i] + margin : t->data[i] - margin;
}

/* A fixed pseudo-random tensor of t's shape (the same every call). */
static duet_tensor *fixed_like(const duet_tensor *t, uint64_t seed) {
    duet_rng rng = duet_rng_make(seed, 7);
    return tu_randn(&rng, t->ndim, t->shape, 1.0f);
}

/* g = d<R1, f(in)>/d in[which], with history when create_graph. */
static duet_tensor *grad_of(fwd_fn f, void *ctx, duet_tensor *const *in, int which,
                            bool create_graph) {
    bool prev = duet_set_grad_enabled(true);
    duet_tensor *y = NULL, *g = NULL;
    TU_OK(f(ctx, in, &y));
    duet_tensor *r1 = fixed_like(y, 11);
    TU_OK(duet_autograd_grad(1, &y, &r1, 1, &in[which], create_graph, &g));
    duet_tensor_release(r1);
    duet_tensor_release(y);
    duet_set_grad_enabled(prev);
    assert_non_null(g);
    assert_true(duet_tensor_same_shape(g, in[which]));
    return g;
}

static double dot_fixed(const duet_tensor *g, uint64_t seed) {
    duet_tensor *r = fixed_like(g, seed);
    double s = 0.0;
    for (int64_t i = 0; i < g->numel; i++) s += (double)g->data[i] * r->data[i];
    duet_tensor_release(r);
    return s;
}

/* First order: the recorded-ops gradient equals the fused backward's.
 * Second order: d<R2, g>/d in[k] by finite differences equals what a
 * backward through g gives, for every input k that requires grad. */
static void check_grad_of_grad(fwd_fn f, void *ctx, int n, duet_tensor *const *in, int which,
                               double eps, double rtol, double atol) {
    /* Fused first order. */
    for (int k = 0; k < n; k++) duet_tensor_zero_grad(in[k]);
    duet_tensor *y = NULL, *r1 = NULL, *w = NULL, *l = NULL;
    TU_OK(f(ctx, in, &y));
    r1 = fixed_like(y, 11);
    TU_OK(duet_mul(y, r1, &w));
    TU_OK(duet_sum(w, &l));
    TU_OK(duet_backward(l));
    duet_tensor *fused = NULL;
    TU_OK(duet_tensor_clone(in[which], &fused));
    memcpy(fused->data, in[which]->grad, (size_t)fused->numel * sizeof(float));
    duet_tensor *tmp[] = {y, r1, w, l};
    for (int i = 0; i < 4; i++) duet_tensor_release(tmp[i]);
    duet_tensor *g0 = grad_of(f, ctx, in, which, false);
    duet_tape_clear();
    tu_assert_close(g0->data, fused->data, g0->numel, 1e-4, 1e-5, "recorded vs fused gradient");
    duet_tensor_release(g0);
    duet_tensor_release(fused);

    /* Second order. */
    for (int k = 0; k < n; k++) duet_tensor_zero_grad(in[k]);
    duet_tensor *g = grad_of(f, ctx, in, which, true);
    assert_true(g->requires_grad);
    duet_tensor *r2 = fixed_like(g, 13), *gw = NULL, *loss = NULL;
    TU_OK(duet_mul(g, r2, &gw));
    TU_OK(duet_sum(gw, &loss));
    TU_OK(duet_backward(loss));
    duet_tensor_release(r2);
    duet_tensor_release(gw);
    duet_tensor_release(loss);
    duet_tensor_release(g);
    assert_int_equal(duet_tape_size(), 0);
    for (int k = 0; k < n; k++) {
        duet_tensor *x = in[k];
        for (int64_t j = 0; j < x->numel; j++) {
            const float saved = x->data[j];
            x->data[j] = (float)(saved + eps);
            duet_tensor *gp = grad_of(f, ctx, in, which, false);
            duet_tape_clear();
            x->data[j] = (float)(saved - eps);
            duet_tensor *gm = grad_of(f, ctx, in, which, false);
            duet_tape_clear();
            x->data[j] = saved;
            const double num = (dot_fixed(gp, 13) - dot_fixed(gm, 13)) / (2.0 * eps);
            duet_tensor_release(gp);
            duet_tensor_release(gm);
            const double ana = x->grad != NULL ? x->grad[j] : 0.0;
            if (fabs(num - ana) > atol + rtol * fabs(num))
                fail_msg("grad of grad wrt input %d (of the gradient wrt input %d) element %lld: "
                         "analytic %.6g, numeric %.6g", k, which, (long long)j, ana, num);
        }
    }
}

/* ---- the ops ----------------------------------------------------------------- */

typedef struct conv_case {
    int stride, pad;
    bool elu, bias;
    float slope; /* leaky_relu's when not elu */
} conv_case;

/* act(conv2d(x, w, b)): ELU gives every second derivative. */
static int f_conv(void *c, duet_tensor *const *in, duet_tensor **y) {
    const conv_case *cc = c;
    duet_tensor *h = NULL;
    DUET_TRY(duet_conv2d(in[0], in[1], cc->bias ? in[2] : NULL, cc->stride, cc->pad, &h));
    int rc = cc->elu ? duet_elu(h, 1.0f, y) : duet_leaky_relu(h, cc->slope, y);
    duet_tensor_release(h);
    return rc;
}

static void test_conv2d(void **state) {
    (void)state;
    duet_rng rng = duet_rng_make(1, 0);
    /* DeepFillv1's geometry (5x5, stride 2, padding 2) on an odd size, and
     * 3x3 stride 1. */
    const conv_case cases[] = {{2, 2, true, true, 0.0f}, {1, 1, true, true, 0.0f},
                               {2, 1, true, false, 0.0f}};
    const int64_t ks[] = {5, 3, 3};
    for (int c = 0; c < 3; c++) {
        duet_tensor *in[3] = {
            randn_grad(&rng, 4, (int64_t[]){2, 2, 7, 7}, 1.0f),
            randn_grad(&rng, 4, (int64_t[]){3, 2, ks[c], ks[c]}, 0.3f),
            randn_grad(&rng, 1, (int64_t[]){3}, 0.3f)};
        int n = cases[c].bias ? 3 : 2;
        for (int which = 0; which < n; which++)
            check_grad_of_grad(f_conv, (void *)&cases[c], n, in, which, 1e-3, RTOL, ATOL);
        for (int k = 0; k < 3; k++) duet_tensor_release(in[k]);
    }
}

/* conv2d then leaky_relu: its second derivative is zero, so the gradient
 * wrt x does not depend on x; wrt w it does (through dx = W^T dy). */
static void test_conv2d_leaky(void **state) {
    (void)state;
    duet_rng rng = duet_rng_make(2, 0);
    const conv_case cc = {2, 2, false, true, 0.2f};
    duet_tensor *in[3] = {randn_grad(&rng, 4, (int64_t[]){1, 2, 6, 6}, 1.0f),
                          randn_grad(&rng, 4, (int64_t[]){2, 2, 5, 5}, 0.3f),
                          randn_grad(&rng, 1, (int64_t[]){2}, 0.3f)};
    for (int which = 0; which < 2; which++)
        check_grad_of_grad(f_conv, (void *)&cc, 3, in, which, 1e-3, RTOL, ATOL);
    for (int k = 0; k < 3; k++) duet_tensor_release(in[k]);
}

/* elu(linear(x, w, b)) and leaky_relu of it, x 3-D to go through the 2-D
 * views. */
static int f_linear(void *c, duet_tensor *const *in, duet_tensor **y) {
    (void)c;
    duet_tensor *h = NULL, *e = NULL;
    DUET_TRY(duet_linear(in[0], in[1], in[2], &h));
    int rc = duet_elu(h, 1.0f, &e);
    if (rc == DUET_OK) rc = duet_leaky_relu(e, 0.2f, y);
    duet_tensor_release(h);
    duet_tensor_release(e);
    return rc;
}

static void test_linear(void **state) {
    (void)state;
    duet_rng rng = duet_rng_make(3, 0);
    duet_tensor *in[3] = {randn_grad(&rng, 3, (int64_t[]){2, 3, 4}, 1.0f),
                          randn_grad(&rng, 2, (int64_t[]){5, 4}, 0.5f),
                          randn_grad(&rng, 1, (int64_t[]){5}, 0.5f)};
    for (int which = 0; which < 3; which++)
        check_grad_of_grad(f_linear, NULL, 3, in, which, EPS, RTOL, ATOL);
    for (int k = 0; k < 3; k++) duet_tensor_release(in[k]);
}

typedef enum { A_RELU, A_LEAKY, A_ELU } act_kind;

/* act(x) * x: the product makes the second derivative of a piecewise
 * linear activation visible (d/dx of m x + m x = 2m). */
static int f_act(void *c, duet_tensor *const *in, duet_tensor **y) {
    act_kind k = *(const act_kind *)c;
    duet_tensor *a = NULL;
    DUET_TRY(k == A_RELU ? duet_relu(in[0], &a)
             : k == A_LEAKY ? duet_leaky_relu(in[0], 0.2f, &a)
                            : duet_elu(in[0], 0.7f, &a));
    int rc = duet_mul(a, in[0], y);
    duet_tensor_release(a);
    return rc;
}

static void test_activations(void **state) {
    (void)state;
    duet_rng rng = duet_rng_make(4, 0);
    duet_tensor *x = randn_grad(&rng, 2, (int64_t[]){3, 7}, 1.0f);
    push_from_zero(x, 0.05f);
    for (act_kind k = A_RELU; k <= A_ELU; k++)
        check_grad_of_grad(f_act, &k, 1, &x, 0, 1e-3, RTOL, ATOL);
    duet_tensor_release(x);
}

/* e = elu(reshape(0.5 (a b - a + b))), then y = e (as (12, 1)) times
 * mean(flatten(e)) * sum(e) through linear with a (1, 1) weight: add, sub,
 * mul, scale, reshape, flatten, sum and mean, nonlinear throughout. */
static int f_elementwise(void *c, duet_tensor *const *in, duet_tensor **y) {
    (void)c;
    duet_tensor *p = NULL, *s = NULL, *t = NULL, *u = NULL, *r = NULL, *e = NULL, *f = NULL,
                *m = NULL, *su = NULL, *sm = NULL, *q = NULL, *e2 = NULL;
    int rc = duet_mul(in[0], in[1], &p);
    if (rc == DUET_OK) rc = duet_sub(p, in[0], &s);
    if (rc == DUET_OK) rc = duet_add(s, in[1], &t);
    if (rc == DUET_OK) rc = duet_scale(t, 0.5f, &u);
    if (rc == DUET_OK) rc = duet_reshape(u, 3, (int64_t[]){2, 3, 2}, &r);
    if (rc == DUET_OK) rc = duet_elu(r, 1.0f, &e);
    if (rc == DUET_OK) rc = duet_flatten(e, &f);
    if (rc == DUET_OK) rc = duet_mean(f, &m);
    if (rc == DUET_OK) rc = duet_sum(e, &su);
    if (rc == DUET_OK) rc = duet_mul(m, su, &sm);
    /* (N, rest) * mean * sum: the scalars broadcast through reshape. */
    if (rc == DUET_OK) rc = duet_reshape(sm, 2, (int64_t[]){1, 1}, &q);
    if (rc == DUET_OK) rc = duet_reshape(e, 2, (int64_t[]){12, 1}, &e2);
    if (rc == DUET_OK) rc = duet_linear(e2, q, NULL, y);
    duet_tensor *tmp[] = {p, s, t, u, r, e, f, m, su, sm, q, e2};
    for (size_t i = 0; i < sizeof tmp / sizeof tmp[0]; i++) duet_tensor_release(tmp[i]);
    return rc;
}

static void test_elementwise(void **state) {
    (void)state;
    duet_rng rng = duet_rng_make(5, 0);
    duet_tensor *in[2] = {randn_grad(&rng, 2, (int64_t[]){12, 1}, 1.0f),
                          randn_grad(&rng, 2, (int64_t[]){12, 1}, 1.0f)};
    for (int which = 0; which < 2; which++)
        check_grad_of_grad(f_elementwise, NULL, 2, in, which, EPS, RTOL, ATOL);
    duet_tensor_release(in[0]);
    duet_tensor_release(in[1]);
}

/* ---- first-order backwards of the building blocks ------------------------------ */

typedef struct wg_case {
    int kh, kw, stride, pad;
} wg_case;

static int g_wgrad(void *c, duet_tensor *const *in, duet_tensor **out) {
    const wg_case *w = c;
    return duet_conv2d_weight_grad(in[0], in[1], w->kh, w->kw, w->stride, w->pad, out);
}
static int g_transpose(void *c, duet_tensor *const *in, duet_tensor **out) {
    (void)c;
    return duet_transpose2d(in[0], out);
}
static int g_sum_channels(void *c, duet_tensor *const *in, duet_tensor **out) {
    (void)c;
    return duet_sum_channels(in[0], out);
}
static int g_channel_norm(void *c, duet_tensor *const *in, duet_tensor **out) {
    (void)c;
    return duet_channel_norm(in[0], out);
}

static void test_building_blocks(void **state) {
    (void)state;
    duet_rng rng = duet_rng_make(6, 0);
    const wg_case wc = {5, 5, 2, 2};
    duet_tensor *wg[2] = {randn_grad(&rng, 4, (int64_t[]){2, 3, 7, 7}, 1.0f),
                          randn_grad(&rng, 4, (int64_t[]){2, 4, 4, 4}, 1.0f)};
    tu_gradcheck(g_wgrad, (void *)&wc, 2, wg, EPS, RTOL, ATOL, 60);
    /* Its values: conv2d's fused dw for the same x and dy. */
    duet_tensor *w = randn_grad(&rng, 4, (int64_t[]){4, 3, 5, 5}, 1.0f), *y = NULL, *dw = NULL;
    wg[0]->requires_grad = false;
    TU_OK(duet_conv2d(wg[0], w, NULL, 2, 2, &y));
    tu_backprop_with(y, wg[1]->data);
    TU_OK(duet_conv2d_weight_grad(wg[0], wg[1], 5, 5, 2, 2, &dw));
    tu_assert_close(dw->data, w->grad, dw->numel, 1e-4, 1e-5, "conv2d_weight_grad vs conv2d dw");
    duet_tape_clear();
    duet_tensor *ts[] = {wg[0], wg[1], w, y, dw};
    for (int i = 0; i < 5; i++) duet_tensor_release(ts[i]);

    duet_tensor *m = randn_grad(&rng, 2, (int64_t[]){3, 5}, 1.0f);
    tu_gradcheck(g_transpose, NULL, 1, &m, EPS, RTOL, ATOL, 60);
    duet_tensor *t = NULL;
    TU_OK(duet_transpose2d(m, &t));
    assert_int_equal(t->shape[0], 5);
    assert_float_equal(t->data[1 * 3 + 2], m->data[2 * 5 + 1], 0.0f);
    duet_tape_clear();
    duet_tensor_release(t);
    duet_tensor_release(m);

    duet_tensor *x = randn_grad(&rng, 4, (int64_t[]){2, 3, 2, 3}, 1.0f);
    tu_gradcheck(g_sum_channels, NULL, 1, &x, EPS, RTOL, ATOL, 60);
    tu_gradcheck(g_channel_norm, NULL, 1, &x, EPS, RTOL, ATOL, 60);
    duet_tensor *nrm = NULL;
    TU_OK(duet_channel_norm(x, &nrm));
    assert_int_equal(nrm->ndim, 3);
    double want = sqrt(pow(x->data[1], 2) + pow(x->data[7], 2) + pow(x->data[13], 2));
    assert_true(fabs(nrm->data[1] - want) < 1e-5);
    duet_tape_clear();
    duet_tensor_release(nrm);
    duet_tensor_release(x);
}

/* ---- rules --------------------------------------------------------------------- */

static int n_hook;
static void count_hook(void *ctx, duet_tensor *t) {
    (void)ctx;
    (void)t;
    n_hook++;
}

/* grad leaves .grad and hooks alone and keeps the tape; with create_graph a
 * backward through the penalty fires each parameter's hook once and sums
 * both paths into .grad. */
static void test_hooks_and_grads(void **state) {
    (void)state;
    duet_rng rng = duet_rng_make(7, 0);
    duet_tensor *x = randn_grad(&rng, 4, (int64_t[]){2, 1, 6, 6}, 1.0f);
    duet_tensor *w = randn_grad(&rng, 4, (int64_t[]){2, 1, 5, 5}, 0.3f);
    duet_autograd_set_grad_hook(w, count_hook, NULL);
    n_hook = 0;
    duet_tensor *h = NULL, *e = NULL, *s = NULL, *g = NULL;
    TU_OK(duet_conv2d(x, w, NULL, 2, 2, &h));
    TU_OK(duet_elu(h, 1.0f, &e));
    TU_OK(duet_sum(e, &s));
    const size_t before = duet_tape_size();
    TU_OK(duet_autograd_grad(1, &s, NULL, 1, &x, false, &g));
    assert_false(g->requires_grad);
    assert_int_equal(duet_tape_size(), before);
    assert_null(x->grad);
    assert_null(w->grad);
    assert_int_equal(n_hook, 0);
    duet_tensor_release(g);
    TU_OK(duet_autograd_grad(1, &s, NULL, 1, &x, true, &g));
    assert_true(g->requires_grad);
    assert_true(duet_tape_size() > before);
    assert_null(w->grad);
    assert_int_equal(n_hook, 0);
    /* total = s + sum(g^2): w gets both paths, the hook fires once. */
    duet_tensor *g2 = NULL, *p = NULL, *total = NULL;
    TU_OK(duet_mul(g, g, &g2));
    TU_OK(duet_sum(g2, &p));
    TU_OK(duet_add(s, p, &total));
    TU_OK(duet_backward(total));
    assert_int_equal(n_hook, 1);
    assert_non_null(w->grad);
    assert_int_equal(duet_tape_size(), 0);
    duet_tensor *ts[] = {x, w, h, e, s, g, g2, p, total};
    for (int i = 0; i < 9; i++) duet_tensor_release(ts[i]);
}

/* Intermediates freed after forward (duet_autograd_release) whose values no
 * backward reads do not stop a gradient: conv2d's input when its weight is
 * frozen, relu's input, conv2d's output. */
static void test_released_intermediates(void **state) {
    (void)state;
    duet_rng rng = duet_rng_make(9, 0);
    duet_tensor *x = randn_grad(&rng, 4, (int64_t[]){1, 2, 6, 6}, 1.0f);
    duet_tensor *w1 = randn_grad(&rng, 4, (int64_t[]){3, 2, 3, 3}, 0.5f);
    duet_tensor *w2 = tu_randn(&rng, 4, (int64_t[]){2, 3, 3, 3}, 0.5f); /* frozen */
    duet_tensor *h = NULL, *a = NULL, *o = NULL, *e = NULL, *s = NULL, *g = NULL, *g2 = NULL;
    TU_OK(duet_conv2d(x, w1, NULL, 1, 1, &h));
    TU_OK(duet_relu(h, &a));
    duet_autograd_release(h);
    TU_OK(duet_conv2d(a, w2, NULL, 2, 1, &o));
    duet_autograd_release(a);
    TU_OK(duet_elu(o, 1.0f, &e));
    TU_OK(duet_sum(e, &s));
    TU_OK(duet_autograd_grad(1, &s, NULL, 1, &x, false, &g));
    TU_OK(duet_autograd_grad(1, &s, NULL, 1, &x, true, &g2));
    tu_assert_close(g2->data, g->data, g->numel, 0.0, 0.0, "grad with and without graph");
    duet_tensor *sq = NULL, *p = NULL, *total = NULL;
    TU_OK(duet_mul(g2, g2, &sq));
    TU_OK(duet_sum(sq, &p));
    TU_OK(duet_add(s, p, &total));
    TU_OK(duet_backward(total));
    assert_non_null(w1->grad);
    assert_null(w2->grad);
    duet_tensor *ts[] = {x, w1, w2, o, e, s, g, g2, sq, p, total};
    for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++) duet_tensor_release(ts[i]);
}

/* A Linear's bias before relu or leaky_relu: the gradient in the input does
 * not depend on it, yet a backward through that gradient reaches it, as in
 * PyTorch (leaky_relu_backward takes the forward's input): the bias gets an
 * exact zero gradient and its ready hook fires once (a DDP waits for it:
 * WGAN-GP's penalty backpropagated alone through DeepFillv1's
 * discriminators). Copying and in-place forms. */
static void test_rectifier_reaches_bias(void **state) {
    (void)state;
    for (int k = 0; k < 4; k++) {
        duet_rng rng = duet_rng_make(12, (uint64_t)k);
        duet_tensor *x = randn_grad(&rng, 2, (int64_t[]){3, 5}, 1.0f);
        duet_tensor *w = randn_grad(&rng, 2, (int64_t[]){4, 5}, 0.5f);
        duet_tensor *b = randn_grad(&rng, 1, (int64_t[]){4}, 0.5f);
        duet_autograd_set_grad_hook(b, count_hook, NULL);
        n_hook = 0;
        duet_tensor *h = NULL, *y = NULL, *s = NULL, *g = NULL, *g2 = NULL, *p = NULL;
        TU_OK(duet_linear(x, w, b, &h));
        const float slope = k % 2 ? 0.2f : 0.0f;
        if (k < 2) TU_OK(duet_leaky_relu(h, slope, &y));
        else TU_OK(duet_leaky_relu_inplace(h, slope, &y));
        TU_OK(duet_sum(y, &s));
        TU_OK(duet_autograd_grad(1, &s, NULL, 1, &x, true, &g));
        TU_OK(duet_mul(g, g, &g2));
        TU_OK(duet_sum(g2, &p));
        TU_OK(duet_backward(p));
        if (b->grad == NULL) fail_msg("case %d: the bias got no gradient", k);
        for (int64_t i = 0; i < b->numel; i++) assert_true(b->grad[i] == 0.0f);
        assert_int_equal(n_hook, 1);
        assert_non_null(w->grad);
        assert_int_equal(duet_tape_size(), 0);
        duet_tensor *ts[] = {x, w, b, h, y, s, g, g2, p};
        for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++) duet_tensor_release(ts[i]);
    }
}

static void test_errors(void **state) {
    (void)state;
    duet_rng rng = duet_rng_make(8, 0);
    duet_tensor *x = randn_grad(&rng, 4, (int64_t[]){1, 2, 4, 4}, 1.0f);
    duet_tensor *other = randn_grad(&rng, 2, (int64_t[]){2, 2}, 1.0f);
    duet_tensor *noreq = tu_randn(&rng, 2, (int64_t[]){2, 2}, 1.0f);
    duet_tensor *p = NULL, *s = NULL, *g = (duet_tensor *)1;
    /* max_pool2d has no backward in recorded ops: named. */
    TU_OK(duet_max_pool2d(x, 2, 2, &p));
    TU_OK(duet_sum(p, &s));
    tu_expect_error(duet_autograd_grad(1, &s, NULL, 1, &x, true, &g), DUET_EUNSUPPORTED,
                    "max_pool2d", NULL);
    assert_null(g);
    /* An input the output does not depend on. */
    tu_expect_error(duet_autograd_grad(1, &s, NULL, 1, &other, false, &g), DUET_EINVAL,
                    "do not depend on inputs[0]", NULL);
    assert_null(g);
    tu_expect_error(duet_autograd_grad(1, &s, NULL, 1, &noreq, false, &g), DUET_EINVAL,
                    "inputs[0] does not require grad", NULL);
    /* A wrong grad_outputs shape. */
    tu_expect_error(duet_autograd_grad(1, &s, &other, 1, &x, false, &g), DUET_ESHAPE,
                    "grad_outputs[0]", NULL);
    /* The tape survived every failure: a backward still runs. */
    TU_OK(duet_backward(s));
    assert_non_null(x->grad);
    duet_tensor *ts[] = {x, other, noreq, p, s};
    for (int i = 0; i < 5; i++) duet_tensor_release(ts[i]);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_conv2d),         cmocka_unit_test(test_conv2d_leaky),
        cmocka_unit_test(test_linear),         cmocka_unit_test(test_activations),
        cmocka_unit_test(test_elementwise),    cmocka_unit_test(test_building_blocks),
        cmocka_unit_test(test_hooks_and_grads), cmocka_unit_test(test_errors),
        cmocka_unit_test(test_released_intermediates),
        cmocka_unit_test(test_rectifier_reaches_bias),
    };
    return tu_exit(cmocka_run_group_tests(tests, NULL, NULL));
}
