/* ContextualAttentionModule against MMEditing's own module
 * (tests/ref/ref_contextual_attention.py loads it from the mmedit venv):
 * output, attention scores and the gradients wrt x and context, with and
 * without a mask; finite-difference checks of the ops it is built from. */
#include "testutil.h"

#include <math.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#define EPS 1e-2
#define RTOL 2e-2
#define ATOL 3e-3

static void run_case(const char *name, bool masked) {
    char path[4096];
    snprintf(path, sizeof path, "%s/contextual_attention.safetensors", tu_ref_dir());
    if (access(path, R_OK) != 0)
        tu_skip("%s missing: no mmedit venv when the references were written "
                "(scripts/make-mmedit-venv.sh)", path);
    duet_st *ref = tu_ref_load("contextual_attention.safetensors");
    duet_module *m = NULL;
    TU_OK(duet_contextual_attention_create(3, 10.0f, &m));
    duet_tensor *fk = duet_module_buffer(m, "fuse_kernel");
    tu_assert_ref(ref, "fuse_kernel", fk->data, fk->numel, 0.0, 0.0);
    duet_tensor *x = tu_ref_tensor(ref, "x"), *c = tu_ref_tensor(ref, "context");
    duet_tensor *mask = tu_ref_tensor(ref, "mask");
    x->requires_grad = true;
    c->requires_grad = true;
    duet_tensor *out = NULL, *attn = NULL;
    TU_OK(duet_contextual_attention(m, x, c, masked ? mask : NULL, &out, &attn));
    char key[128];
    snprintf(key, sizeof key, "%s.out", name);
    tu_assert_ref(ref, key, out->data, out->numel, 1e-4, 1e-5);
    snprintf(key, sizeof key, "%s.attention", name);
    tu_assert_ref(ref, key, attn->data, attn->numel, 1e-4, 1e-6);
    snprintf(key, sizeof key, "%s.r", name);
    duet_tensor *r = tu_ref_tensor(ref, key);
    tu_backprop_with(out, r->data);
    snprintf(key, sizeof key, "%s.grad.x", name);
    tu_assert_ref(ref, key, x->grad, x->numel, 1e-3, 1e-4);
    snprintf(key, sizeof key, "%s.grad.context", name);
    tu_assert_ref(ref, key, c->grad, c->numel, 1e-3, 1e-4);
    duet_tensor *ts[] = {x, c, mask, out, attn, r};
    for (int i = 0; i < 6; i++) duet_tensor_release(ts[i]);
    duet_module_destroy(m);
    duet_st_destroy(ref);
}

static void test_nomask(void **state) {
    (void)state;
    run_case("nomask", false);
}

static void test_mask(void **state) {
    (void)state;
    run_case("mask", true);
}

/* ---- the ops' gradients ------------------------------------------------------ */

static int g_slice(void *c, duet_tensor *const *in, duet_tensor **out) {
    (void)c;
    return duet_slice0(in[0], 1, 2, out);
}
static int g_patches(void *c, duet_tensor *const *in, duet_tensor **out) {
    (void)c;
    return duet_extract_patches(in[0], 4, 2, 1, out);
}
static int g_sub(void *c, duet_tensor *const *in, duet_tensor **out) {
    (void)c;
    return duet_subsample_nearest(in[0], 2, out);
}
static int g_norm(void *c, duet_tensor *const *in, duet_tensor **out) {
    (void)c;
    return duet_normalize_rows(in[0], 1e-4f, out);
}
static int g_fuse(void *c, duet_tensor *const *in, duet_tensor **out) {
    (void)c;
    return duet_fuse_correlation(in[0], 3, out);
}
static int g_softmax(void *c, duet_tensor *const *in, duet_tensor **out) {
    return duet_softmax_channels(in[0], 3.0f, c, out);
}

static void test_ops_gradcheck(void **state) {
    (void)state;
    duet_rng rng = duet_rng_make(12, 0);
    duet_tensor *x = tu_randn(&rng, 4, (int64_t[]){3, 2, 6, 6}, 1.0f);
    x->requires_grad = true;
    tu_gradcheck(g_slice, NULL, 1, &x, EPS, RTOL, ATOL, 60);
    tu_gradcheck(g_patches, NULL, 1, &x, EPS, RTOL, ATOL, 60);
    tu_gradcheck(g_sub, NULL, 1, &x, EPS, RTOL, ATOL, 60);
    tu_gradcheck(g_norm, NULL, 1, &x, EPS, RTOL, ATOL, 60);
    duet_tensor_release(x);
    duet_tensor *corr = tu_randn(&rng, 4, (int64_t[]){2, 12, 3, 4}, 1.0f);
    corr->requires_grad = true;
    tu_gradcheck(g_fuse, NULL, 1, &corr, EPS, RTOL, ATOL, 96);
    uint8_t masked[24] = {0};
    masked[3] = masked[14] = masked[15] = 1;
    tu_gradcheck(g_softmax, NULL, 1, &corr, EPS, RTOL, ATOL, 96);
    tu_gradcheck(g_softmax, masked, 1, &corr, EPS, RTOL, ATOL, 96);
    duet_tensor *y = NULL;
    TU_OK(duet_softmax_channels(corr, 3.0f, masked, &y));
    assert_float_equal(y->data[3 * 12], 0.0f, 0.0f);
    duet_tape_clear();
    duet_tensor_release(y);
    /* Sample 1 with every channel masked: zeros there, no NaN, no gradient;
     * sample 0 a softmax as before. */
    uint8_t all1[24] = {0};
    memset(all1 + 12, 1, 12);
    all1[5] = 1;
    tu_gradcheck(g_softmax, all1, 1, &corr, EPS, RTOL, ATOL, 96);
    TU_OK(duet_softmax_channels(corr, 3.0f, all1, &y));
    for (int64_t i = 12 * 12; i < 24 * 12; i++) assert_true(y->data[i] == 0.0f);
    for (int64_t i = 0; i < 12; i++) {
        double sum = 0.0;
        for (int l = 0; l < 12; l++) sum += y->data[l * 12 + i];
        assert_float_equal(sum, 1.0, 1e-5);
    }
    duet_tape_clear();
    duet_tensor_release(y);
    duet_tensor_release(corr);
    /* Errors name the op and the shape. */
    duet_tensor *bad = tu_zeros(4, (int64_t[]){1, 5, 2, 2}), *o = NULL;
    tu_expect_error(duet_fuse_correlation(bad, 3, &o), DUET_ESHAPE, "fuse_correlation",
                    "[1, 5, 2, 2]", NULL);
    duet_module *m = NULL;
    TU_OK(duet_contextual_attention_create(3, 10.0f, &m));
    duet_tensor *odd = tu_zeros(4, (int64_t[]){1, 2, 5, 6});
    tu_expect_error(duet_contextual_attention(m, odd, odd, NULL, &o, NULL), DUET_ESHAPE,
                    "ContextualAttentionModule", "even", NULL);
    duet_tensor_release(odd);
    /* A hole over the whole image leaves no context patch to attend to:
     * the output is 0 (MMEditing's module gives NaN). */
    duet_tensor *fx = tu_randn(&rng, 4, (int64_t[]){2, 4, 8, 8}, 1.0f), *fo = NULL;
    duet_tensor *full = tu_zeros(4, (int64_t[]){2, 1, 8, 8});
    for (int64_t i = 64; i < 128; i++) full->data[i] = 1.0f; /* sample 1 only */
    TU_OK(duet_contextual_attention(m, fx, fx, full, &fo, NULL));
    int64_t nonzero0 = 0;
    for (int64_t i = 0; i < fo->numel; i++) {
        assert_true(isfinite(fo->data[i]));
        if (i < fo->numel / 2) nonzero0 += fo->data[i] != 0.0f;
        else assert_true(fo->data[i] == 0.0f);
    }
    assert_true(nonzero0 > 0);
    duet_tensor_release(fo);
    duet_tensor_release(full);
    duet_tensor_release(fx);
    duet_tensor_release(bad);
    duet_module_destroy(m);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_nomask),
        cmocka_unit_test(test_mask),
        cmocka_unit_test(test_ops_gradcheck),
    };
    return tu_exit(cmocka_run_group_tests(tests, NULL, NULL));
}
