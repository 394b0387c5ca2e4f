/* The layer ops against PyTorch (tests/ref/ref_ops_layers.py): conv2d 3x3 s1 p1 and
 * 4x4 s2 p1 (with and without bias), linear, batch_norm2d in training mode
 * (output, gradients, running statistics and num_batches after the update)
 * and eval mode, max_pool2d 2x2. Outputs and all gradients to 1e-4 relative
 * (plus 1e-5 absolute for entries near zero). */
#include "testutil.h"

#include <string.h>

#define RTOL 1e-4
#define ATOL 1e-5

/* Backward of L = sum(out * r), r from the reference file. */
static void backprop_with(duet_tensor *out, const duet_tensor *r) {
    assert_int_equal(out->numel, r->numel);
    tu_backprop_with(out, r->data);
}

static duet_tensor *leaf(const duet_st *st, const char *name) {
    duet_tensor *t = tu_ref_tensor(st, name);
    t->requires_grad = true;
    return t;
}

static void check(const duet_st *st, const char *prefix, const char *what, const duet_tensor *t,
                  const float *data) {
    char key[64];
    snprintf(key, sizeof key, "%s.%s", prefix, what);
    tu_assert_ref(st, key, data, t->numel, RTOL, ATOL);
}

static void conv_case(const duet_st *st, const char *p, int stride, int pad, bool bias) {
    char k[64];
    snprintf(k, sizeof k, "%s.x", p);
    duet_tensor *x = leaf(st, k);
    snprintf(k, sizeof k, "%s.w", p);
    duet_tensor *w = leaf(st, k);
    duet_tensor *b = NULL;
    if (bias) {
        snprintf(k, sizeof k, "%s.b", p);
        b = leaf(st, k);
    }
    snprintf(k, sizeof k, "%s.r", p);
    duet_tensor *r = tu_ref_tensor(st, k);
    duet_tensor *y = NULL;
    TU_OK(duet_conv2d(x, w, b, stride, pad, &y));
    check(st, p, "y", y, y->data);
    backprop_with(y, r);
    check(st, p, "dx", x, x->grad);
    check(st, p, "dw", w, w->grad);
    if (bias) check(st, p, "db", b, b->grad);
    duet_tensor_release(y);
    duet_tensor_release(r);
    duet_tensor_release(x);
    duet_tensor_release(w);
    duet_tensor_release(b);
}

static void test_conv(void **state) {
    (void)state;
    duet_st *st = tu_ref_load("ops_layers.safetensors");
    conv_case(st, "conv3", 1, 1, true);
    conv_case(st, "conv4", 2, 1, true);
    conv_case(st, "conv4nb", 2, 1, false);
    duet_st_destroy(st);
}

static void test_linear(void **state) {
    (void)state;
    duet_st *st = tu_ref_load("ops_layers.safetensors");
    duet_tensor *x = leaf(st, "lin.x"), *w = leaf(st, "lin.w"), *b = leaf(st, "lin.b");
    duet_tensor *r = tu_ref_tensor(st, "lin.r");
    duet_tensor *y = NULL;
    TU_OK(duet_linear(x, w, b, &y));
    check(st, "lin", "y", y, y->data);
    backprop_with(y, r);
    check(st, "lin", "dx", x, x->grad);
    check(st, "lin", "dw", w, w->grad);
    check(st, "lin", "db", b, b->grad);
    duet_tensor *ts[] = {x, w, b, r, y};
    for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++) duet_tensor_release(ts[i]);
    duet_st_destroy(st);
}

static void bn_case(const duet_st *st, const char *p, bool training) {
    char k[64];
#define KEY(s) (snprintf(k, sizeof k, "%s.%s", p, s), k)
    duet_tensor *x = leaf(st, KEY("x")), *w = leaf(st, KEY("w")), *b = leaf(st, KEY("b"));
    duet_tensor *rm = tu_ref_tensor(st, KEY("rm")), *rv = tu_ref_tensor(st, KEY("rv"));
    duet_tensor *r = tu_ref_tensor(st, KEY("r"));
    duet_tensor *nb = tu_zeros(1, (int64_t[]){1});
    nb->data[0] = 5.0f;
    duet_batch_norm_opts o = duet_batch_norm_opts_default();
    o.training = training;
    duet_tensor *y = NULL;
    TU_OK(duet_batch_norm2d(x, w, b, rm, rv, nb, &o, &y));
    check(st, p, "y", y, y->data);
    check(st, p, "rm_after", rm, rm->data);
    check(st, p, "rv_after", rv, rv->data);
    check(st, p, "nb_after", nb, nb->data);
    backprop_with(y, r);
    check(st, p, "dx", x, x->grad);
    check(st, p, "dw", w, w->grad);
    check(st, p, "db", b, b->grad);
#undef KEY
    duet_tensor *ts[] = {x, w, b, rm, rv, r, nb, y};
    for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++) duet_tensor_release(ts[i]);
}

static void test_batch_norm(void **state) {
    (void)state;
    duet_st *st = tu_ref_load("ops_layers.safetensors");
    bn_case(st, "bntrain", true);
    bn_case(st, "bneval", false);
    duet_st_destroy(st);
}

static void test_max_pool(void **state) {
    (void)state;
    duet_st *st = tu_ref_load("ops_layers.safetensors");
    duet_tensor *x = leaf(st, "pool.x"), *r = tu_ref_tensor(st, "pool.r");
    duet_tensor *y = NULL;
    TU_OK(duet_max_pool2d(x, 2, 2, &y));
    check(st, "pool", "y", y, y->data);
    backprop_with(y, r);
    check(st, "pool", "dx", x, x->grad);
    duet_tensor_release(y);
    duet_tensor_release(r);
    duet_tensor_release(x);
    duet_st_destroy(st);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_conv),
        cmocka_unit_test(test_linear),
        cmocka_unit_test(test_batch_norm),
        cmocka_unit_test(test_max_pool),
    };
    return cmocka_run_group_tests_name("ref_ops_layers", tests, NULL, NULL);
}
