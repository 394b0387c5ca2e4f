/* duet_conv2d_dilated (src/ops/conv_dilated.c): finite-difference gradients
 * for input, weight and bias (dilation 2 and 3, stride 1 and 2, padding),
 * and the op equal to duet_conv2d with the kernel spread out by the
 * dilation (zeros between the taps), forward and every gradient; dilation
 * 1 equal to duet_conv2d; shape errors. */
#include <math.h>
#include <string.h>

#include "testutil.h"

typedef struct dargs {
    int stride, pad, dil;
} dargs;

static int op_dilated(void *ctx, duet_tensor *const *in, duet_tensor **out) {
    const dargs *a = ctx;
    return duet_conv2d_dilated(in[0], in[1], in[2], a->stride, a->pad, a->dil, out);
}

static void test_gradcheck(void **state) {
    (void)state;
    const dargs cases[] = {{1, 2, 2}, {2, 3, 3}, {1, 0, 2}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        duet_rng rng = duet_rng_make(40 + c, 0);
        duet_tensor *x = tu_randn(&rng, 4, (int64_t[]){2, 3, 9, 8}, 1.0f);
        duet_tensor *w = tu_randn(&rng, 4, (int64_t[]){4, 3, 3, 3}, 0.3f);
        duet_tensor *b = tu_randn(&rng, 1, (int64_t[]){4}, 0.1f);
        x->requires_grad = w->requires_grad = b->requires_grad = true;
        duet_tensor *in[3] = {x, w, b};
        tu_gradcheck(op_dilated, (void *)&cases[c], 3, in, 1e-2, 2e-2, 2e-3, 60);
        duet_tensor_release(x);
        duet_tensor_release(w);
        duet_tensor_release(b);
    }
}

/* The (O, C, d(K-1)+1, ...) kernel with w's taps d apart, zeros between. */
static duet_tensor *spread(const duet_tensor *w, int d) {
    const int64_t o = w->shape[0], c = w->shape[1], k = w->shape[2];
    const int64_t e = d * (k - 1) + 1;
    duet_tensor *s = tu_zeros(4, (int64_t[]){o, c, e, e});
    for (int64_t a = 0; a < o * c; a++)
        for (int64_t i = 0; i < k; i++)
            for (int64_t j = 0; j < k; j++)
                s->data[(a * e + i * d) * e + j * d] = w->data[(a * k + i) * k + j];
    return s;
}

static void close_to(const float *got, const float *want, int64_t n, const char *what) {
    double mx = 0;
    for (int64_t i = 0; i < n; i++) mx = fmax(mx, fabs(want[i]));
    tu_assert_close(got, want, n, 1e-5, 1e-5 * (mx + 1e-30), what);
}

static void test_equals_spread_kernel(void **state) {
    (void)state;
    const dargs cases[] = {{1, 2, 2}, {1, 4, 4}, {2, 1, 3}, {1, 1, 1}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const dargs *a = &cases[c];
        duet_rng rng = duet_rng_make(7 + c, 1);
        duet_tensor *x = tu_randn(&rng, 4, (int64_t[]){2, 5, 13, 11}, 1.0f);
        duet_tensor *w = tu_randn(&rng, 4, (int64_t[]){6, 5, 3, 3}, 0.3f);
        duet_tensor *b = tu_randn(&rng, 1, (int64_t[]){6}, 0.1f);
        duet_tensor *ws = spread(w, a->dil);
        duet_tensor *x2 = NULL, *b2 = NULL;
        TU_OK(duet_tensor_clone(x, &x2));
        TU_OK(duet_tensor_clone(b, &b2));
        x->requires_grad = w->requires_grad = b->requires_grad = true;
        x2->requires_grad = ws->requires_grad = b2->requires_grad = true;
        duet_tensor *y = NULL, *y2 = NULL;
        /* one tape per backward: each op's forward right before its own */
        TU_OK(duet_conv2d_dilated(x, w, b, a->stride, a->pad, a->dil, &y));
        duet_tensor *r = tu_randn(&rng, 4, y->shape, 1.0f);
        tu_backprop_with(y, r->data);
        TU_OK(duet_conv2d(x2, ws, b2, a->stride, a->pad, &y2));
        assert_int_equal(y->numel, y2->numel);
        assert_int_equal(y->shape[2], y2->shape[2]);
        close_to(y->data, y2->data, y->numel, "forward");
        tu_backprop_with(y2, r->data);
        close_to(x->grad, x2->grad, x->numel, "grad x");
        close_to(b->grad, b2->grad, b->numel, "grad b");
        /* the weight's gradient is the spread kernel's at the taps */
        duet_tensor *gw = tu_zeros(4, w->shape);
        const int64_t k = 3, e = a->dil * (k - 1) + 1;
        for (int64_t q = 0; q < 30; q++)
            for (int64_t i = 0; i < k; i++)
                for (int64_t j = 0; j < k; j++)
                    gw->data[(q * k + i) * k + j] = ws->grad[(q * e + i * a->dil) * e + j * a->dil];
        close_to(w->grad, gw->data, w->numel, "grad w");
        duet_tensor *ts[] = {x, w, b, ws, x2, b2, y, y2, r, gw};
        for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++) duet_tensor_release(ts[i]);
    }
}

static void test_errors(void **state) {
    (void)state;
    duet_tensor *x = tu_zeros(4, (int64_t[]){1, 2, 5, 5}), *w = tu_zeros(4, (int64_t[]){3, 2, 3, 3});
    duet_tensor *y = NULL;
    tu_expect_error(duet_conv2d_dilated(x, w, NULL, 1, 0, 3, &y), DUET_ESHAPE, "conv2d_dilated",
                    "empty output", NULL);
    tu_expect_error(duet_conv2d_dilated(x, w, NULL, 1, 1, 0, &y), DUET_EINVAL, "dilation", NULL);
    duet_tensor *w2 = tu_zeros(4, (int64_t[]){3, 4, 3, 3});
    tu_expect_error(duet_conv2d_dilated(x, w2, NULL, 1, 2, 2, &y), DUET_ESHAPE, "channels", NULL);
    duet_tensor_release(x);
    duet_tensor_release(w);
    duet_tensor_release(w2);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gradcheck),
        cmocka_unit_test(test_equals_spread_kernel),
        cmocka_unit_test(test_errors),
    };
    return tu_exit(cmocka_run_group_tests(tests, NULL, NULL));
}
