/* The inpaintors' ops (src/ops/inpaint.c): mask_composite, l1_loss_masked
 * and crop_boxes against values written out by hand, finite-difference
 * gradient checks of each differentiable input, and the shape and range
 * errors naming the op. GLInpaintor's train_step against MMEditing's own
 * (tests/mmedit/test_ref_gl_inpaintor.c) checks them in the model. */
#include "testutil.h"

#include <math.h>
#include <string.h>

#define EPS 1e-2
#define RTOL 1e-2
#define ATOL 2e-3

static duet_tensor *randn_grad(duet_rng *rng, int ndim, const int64_t *shape) {
    duet_tensor *t = tu_randn(rng, ndim, shape, 1.0f);
    t->requires_grad = true;
    return t;
}

/* A 0/1 mask (N, C, H, W) with about a third of the pixels in the hole. */
static duet_tensor *make_mask(duet_rng *rng, int64_t n, int64_t c, int64_t h, int64_t w) {
    duet_tensor *m = tu_zeros(4, (int64_t[]){n, c, h, w});
    for (int64_t i = 0; i < m->numel; i++) m->data[i] = duet_rng_uniform(rng) < 0.35f;
    return m;
}

static duet_tensor *mask_of_test; /* the gradient checks' constant mask */

static int g_composite(void *c, duet_tensor *const *in, duet_tensor **out) {
    (void)c;
    return duet_mask_composite(in[0], in[1], mask_of_test, out);
}

static int g_masked_l1(void *c, duet_tensor *const *in, duet_tensor **out) {
    return duet_l1_loss_masked(in[0], in[1], mask_of_test, *(const float *)c, out);
}

static int g_crop(void *c, duet_tensor *const *in, duet_tensor **out) {
    (void)c;
    static const int64_t tops[2] = {1, 0}, lefts[2] = {2, 3};
    return duet_crop_boxes(in[0], tops, lefts, 3, 2, out);
}

static void test_mask_composite(void **state) {
    (void)state;
    duet_rng rng = duet_rng_make(3, 0);
    const int64_t shape[4] = {2, 3, 4, 5};
    for (int mc = 1; mc <= 3; mc += 2) { /* one channel for all, and one per channel */
        mask_of_test = make_mask(&rng, 2, mc, 4, 5);
        duet_tensor *in[2] = {randn_grad(&rng, 4, shape), randn_grad(&rng, 4, shape)};
        duet_tensor *y = NULL;
        TU_OK(duet_mask_composite(in[0], in[1], mask_of_test, &y));
        for (int64_t i = 0; i < y->numel; i++) {
            const int64_t n = i / 60, ch = i / 20 % 3, p = i % 20;
            const float m = mask_of_test->data[(n * mc + (mc == 1 ? 0 : ch)) * 20 + p];
            assert_true(y->data[i] == (m != 0.0f ? in[1]->data[i] : in[0]->data[i]));
        }
        duet_tensor_release(y);
        duet_tape_clear();
        tu_gradcheck(g_composite, NULL, 2, in, EPS, RTOL, ATOL, 60);
        duet_tensor_release(in[0]);
        duet_tensor_release(in[1]);
        duet_tensor_release(mask_of_test);
    }
}

static void test_l1_loss_masked(void **state) {
    (void)state;
    duet_rng rng = duet_rng_make(4, 0);
    const int64_t shape[4] = {2, 3, 4, 5};
    mask_of_test = make_mask(&rng, 2, 1, 4, 5);
    duet_tensor *p = randn_grad(&rng, 4, shape), *t = tu_randn(&rng, 4, shape, 1.0f);
    const float w = 0.5f;
    duet_tensor *l = NULL;
    TU_OK(duet_l1_loss_masked(p, t, mask_of_test, w, &l));
    /* sum(|p - t| * m) / (sum of the mask over the 3 channels) * w */
    double num = 0, den = 0;
    for (int64_t i = 0; i < p->numel; i++) {
        const float m = mask_of_test->data[i / 60 * 20 + i % 20];
        num += fabs((double)p->data[i] - t->data[i]) * m;
        den += m;
    }
    assert_float_equal(l->data[0], w * num / den, 1e-6 * fabs(w * num / den));
    duet_tensor_release(l);
    duet_tape_clear();
    float weight = 0.5f;
    duet_tensor *in[2] = {p, t};
    tu_gradcheck(g_masked_l1, &weight, 2, in, 1e-3, RTOL, ATOL, 60);
    /* An empty mask gives 0 (MMEditing's eps), not NaN. */
    duet_tensor *none = tu_zeros(4, (int64_t[]){2, 1, 4, 5});
    TU_OK(duet_l1_loss_masked(p, t, none, 1.0f, &l));
    assert_true(l->data[0] == 0.0f);
    duet_tensor_release(l);
    duet_tensor_release(none);
    duet_tensor_release(p);
    duet_tensor_release(t);
    duet_tensor_release(mask_of_test);
}

static void test_crop_boxes(void **state) {
    (void)state;
    duet_rng rng = duet_rng_make(5, 0);
    duet_tensor *x = randn_grad(&rng, 4, (int64_t[]){2, 2, 4, 5}), *y = NULL;
    const int64_t tops[2] = {1, 0}, lefts[2] = {2, 3};
    TU_OK(duet_crop_boxes(x, tops, lefts, 3, 2, &y));
    assert_int_equal(y->shape[0], 2);
    assert_int_equal(y->shape[2], 3);
    assert_int_equal(y->shape[3], 2);
    for (int64_t n = 0; n < 2; n++)
        for (int64_t c = 0; c < 2; c++)
            for (int64_t i = 0; i < 3; i++)
                for (int64_t j = 0; j < 2; j++)
                    assert_true(y->data[((n * 2 + c) * 3 + i) * 2 + j] ==
                                x->data[((n * 2 + c) * 4 + tops[n] + i) * 5 + lefts[n] + j]);
    duet_tensor_release(y);
    duet_tape_clear();
    tu_gradcheck(g_crop, NULL, 1, &x, EPS, RTOL, ATOL, 60);
    duet_tensor_release(x);
}

static void test_inpaint_ops_errors(void **state) {
    (void)state;
    duet_tensor *x = tu_zeros(4, (int64_t[]){2, 3, 4, 5}), *y = NULL;
    duet_tensor *bad = tu_zeros(4, (int64_t[]){2, 2, 4, 5});
    assert_int_equal(duet_mask_composite(x, x, bad, &y), DUET_ESHAPE);
    assert_non_null(strstr(duet_last_error(), "mask_composite: the mask (2, 2, 4, 5)"));
    assert_int_equal(duet_l1_loss_masked(x, x, bad, 1.0f, &y), DUET_ESHAPE);
    assert_non_null(strstr(duet_last_error(), "l1_loss_masked"));
    const int64_t tops[2] = {0, 2}, lefts[2] = {0, 0};
    assert_int_equal(duet_crop_boxes(x, tops, lefts, 3, 3, &y), DUET_EINVAL);
    assert_non_null(strstr(duet_last_error(), "sample 1's patch (top 2, left 0, 3x3) leaves"));
    assert_null(y);
    duet_tensor_release(x);
    duet_tensor_release(bad);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_mask_composite),
        cmocka_unit_test(test_l1_loss_masked),
        cmocka_unit_test(test_crop_boxes),
        cmocka_unit_test(test_inpaint_ops_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
