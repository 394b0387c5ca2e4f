/* What backward and duet_autograd_release free, and when: each node right
 * after its own backward (its context and its references to saved tensors),
 * a second backward through a freed graph fails clearly, values that no
 * recorded backward reads go at release, relu's bit mask gives the float
 * mask's gradients, and duet_alloc_stats counts what duet allocates. */
#include "testutil.h"

#include <math.h>
#include <string.h>

/* ---- a test op: y = x, whose backward records what it saw ------------------ */

typedef struct probe {
    bool *freed;               /* set by the context's free */
    const bool *other_freed;   /* another probe's flag, read in backward */
    bool other_was_freed;      /* what backward saw */
    int output_refs;           /* the output's refcount seen in backward */
    bool ran;
} probe;

static bool probe_a_freed, probe_b_freed;
static probe *probe_a_seen; /* A's probe outlives its node for the checks */

static void probe_free(void *p) {
    probe *pr = p;
    *pr->freed = true;
    if (pr != probe_a_seen) free(pr);
}

static int probe_backward(duet_node *node) {
    probe *pr = node->ctx;
    pr->ran = true;
    pr->other_was_freed = pr->other_freed != NULL && *pr->other_freed;
    pr->output_refs = node->output->refcount;
    float *gx = duet_node_input_grad(node, 0);
    if (gx != NULL)
        for (int64_t i = 0; i < node->output->numel; i++) gx[i] += node->output->grad[i];
    return DUET_OK;
}

static int probe_op(duet_tensor *x, probe *pr, duet_tensor **out) {
    TU_OK(duet_tensor_clone(x, out));
    return duet_autograd_record(*out, "probe", probe_backward, pr, probe_free, 1, &x);
}

/* h = A(x), l = sum(B(h)): when A's backward runs, B (which ran before it)
 * has already been freed, and with it B's reference to h. */
static void test_node_freed_after_its_backward(void **state) {
    (void)state;
    duet_rng rng = duet_rng_make(3, 0);
    const int64_t s[1] = {4};
    duet_tensor *x = tu_randn(&rng, 1, s, 1.0f);
    x->requires_grad = true;
    probe_a_freed = probe_b_freed = false;
    probe *a = calloc(1, sizeof *a), *b = calloc(1, sizeof *b);
    a->freed = &probe_a_freed;
    a->other_freed = &probe_b_freed;
    b->freed = &probe_b_freed;
    probe_a_seen = a;
    duet_tensor *h = NULL, *g = NULL, *l = NULL;
    TU_OK(probe_op(x, a, &h));
    TU_OK(probe_op(h, b, &g));
    TU_OK(duet_sum(g, &l));
    duet_tensor_release(h); /* the tape's references remain: A's output, B's input */
    duet_tensor_release(g);
    TU_OK(duet_backward(l));
    assert_true(a->ran);
    assert_true(a->other_was_freed);
    assert_int_equal(a->output_refs, 1); /* h: A's own reference only */
    assert_true(probe_a_freed);
    for (int i = 0; i < 4; i++) assert_true(x->grad[i] == 1.0f);
    probe_a_seen = NULL;
    free(a);
    duet_tensor_release(x);
    duet_tensor_release(l);
}

/* PyTorch's "Trying to backward through the graph a second time". */
static void test_second_backward_fails(void **state) {
    (void)state;
    duet_rng rng = duet_rng_make(4, 0);
    const int64_t s[1] = {3};
    duet_tensor *w = tu_randn(&rng, 1, s, 1.0f), *y = NULL, *l = NULL;
    w->requires_grad = true;
    TU_OK(duet_scale(w, 2.0f, &y));
    TU_OK(duet_sum(y, &l));
    TU_OK(duet_backward(l));
    int rc = duet_backward(l);
    assert_int_equal(rc, DUET_ESTATE);
    assert_non_null(strstr(duet_last_error(), "second time"));
    /* A loss that never had a history still gets the other message. */
    duet_tensor *c = NULL;
    TU_OK(duet_tensor_clone(l, &c));
    assert_int_equal(duet_backward(c), DUET_EINVAL);
    assert_null(strstr(duet_last_error(), "second time"));
    duet_tensor_release(c);
    duet_tensor_release(w);
    duet_tensor_release(y);
    duet_tensor_release(l);
}

/* x -> conv(w1) -> relu -> conv(w2) -> sum, releasing the intermediates with
 * duet_autograd_release (release_values) or duet_tensor_release. Returns x's
 * gradient (a new tensor); *freed tells whether the relu output lost its
 * values at release. */
static duet_tensor *conv_chain(bool w2_trainable, bool release_values, bool *freed) {
    duet_rng rng = duet_rng_make(5, 0);
    duet_tensor *x = tu_randn(&rng, 4, (int64_t[]){2, 3, 6, 6}, 1.0f);
    duet_tensor *w1 = tu_randn(&rng, 4, (int64_t[]){4, 3, 3, 3}, 0.5f);
    duet_tensor *w2 = tu_randn(&rng, 4, (int64_t[]){2, 4, 3, 3}, 0.5f);
    x->requires_grad = true;
    w2->requires_grad = w2_trainable;
    duet_tensor *y = NULL, *r = NULL, *z = NULL, *l = NULL;
    TU_OK(duet_conv2d(x, w1, NULL, 1, 1, &y));
    TU_OK(duet_relu(y, &r));
    if (release_values) duet_autograd_release(y);
    else duet_tensor_release(y);
    TU_OK(duet_conv2d(r, w2, NULL, 1, 1, &z));
    duet_tensor *keep = duet_tensor_retain(r); /* to look at, after the release */
    if (release_values) duet_autograd_release(r);
    else duet_tensor_release(r);
    /* keep holds a reference, so nothing may be freed yet ... */
    assert_non_null(keep->data);
    duet_tensor *peek = keep;
    int refs = peek->refcount;
    if (release_values) {
        /* ... until it goes the same way. */
        duet_autograd_release(keep);
        *freed = refs == 3 && peek->data == NULL; /* tape refs only: conv2 input, relu output */
    } else {
        duet_tensor_release(keep);
        *freed = false;
    }
    TU_OK(duet_sum(z, &l));
    TU_OK(duet_backward(l));
    duet_tensor *gx = NULL;
    TU_OK(duet_tensor_from_data(4, x->shape, x->grad, &gx));
    duet_tensor *ts[6] = {x, w1, w2, z, l, NULL};
    for (int i = 0; i < 6; i++) duet_tensor_release(ts[i]);
    return gx;
}

static void test_release_frees_unread_values(void **state) {
    (void)state;
    bool freed = false;
    duet_tensor *ref = conv_chain(false, false, &freed);
    duet_tensor *got = conv_chain(false, true, &freed);
    /* A frozen conv reads not its input, relu keeps a mask: freed. */
    assert_true(freed);
    for (int64_t i = 0; i < ref->numel; i++) assert_true(got->data[i] == ref->data[i]);
    duet_tensor_release(got);
    duet_tensor_release(ref);
    /* A trainable conv reads its input for dW: kept, same gradients. */
    ref = conv_chain(true, false, &freed);
    got = conv_chain(true, true, &freed);
    assert_false(freed);
    for (int64_t i = 0; i < ref->numel; i++) assert_true(got->data[i] == ref->data[i]);
    duet_tensor_release(got);
    duet_tensor_release(ref);
}

/* A weight made trainable after the forward that freed its conv's input:
 * a clear error, not a read of freed values. */
static void test_requires_grad_changed_after_release(void **state) {
    (void)state;
    duet_rng rng = duet_rng_make(6, 0);
    duet_tensor *x = tu_randn(&rng, 4, (int64_t[]){1, 2, 4, 4}, 1.0f);
    duet_tensor *w = tu_randn(&rng, 4, (int64_t[]){2, 2, 3, 3}, 0.5f);
    x->requires_grad = true;
    duet_tensor *r = NULL, *z = NULL, *l = NULL;
    TU_OK(duet_relu(x, &r));
    TU_OK(duet_conv2d(r, w, NULL, 1, 1, &z));
    duet_autograd_release(r); /* w frozen: freed */
    TU_OK(duet_sum(z, &l));
    w->requires_grad = true;
    assert_int_equal(duet_backward(l), DUET_ESTATE);
    assert_non_null(strstr(duet_last_error(), "freed after forward"));
    assert_int_equal(duet_tape_size(), 0);
    duet_tensor *ts[4] = {x, w, z, l};
    for (int i = 0; i < 4; i++) duet_tensor_release(ts[i]);
}

/* relu and leaky_relu from the bit mask: the gradient of x > 0 (NaN and
 * exactly 0 on the negative side), over a length that is not a multiple of
 * the 64-bit words. */
static void test_relu_mask_gradients(void **state) {
    (void)state;
    const int64_t n = 131;
    duet_rng rng = duet_rng_make(7, 0);
    duet_tensor *x = tu_randn(&rng, 1, &n, 1.0f);
    x->data[0] = 0.0f;
    x->data[1] = -0.0f;
    x->data[2] = NAN;
    x->data[129] = 2.0f; /* in the last, partial word */
    x->data[130] = -2.0f;
    x->requires_grad = true;
    const float slopes[2] = {0.0f, 0.2f};
    for (int k = 0; k < 2; k++) {
        duet_tensor *y = NULL, *l = NULL;
        if (k == 0) TU_OK(duet_relu(x, &y));
        else TU_OK(duet_leaky_relu(x, slopes[k], &y));
        TU_OK(duet_sum(y, &l));
        duet_tensor_zero_grad(x);
        TU_OK(duet_backward(l));
        for (int64_t i = 0; i < n; i++) {
            float want = x->data[i] > 0.0f ? 1.0f : slopes[k];
            if (x->grad[i] != want) fail_msg("slope %g: grad[%lld] = %g, want %g", slopes[k],
                                             (long long)i, x->grad[i], want);
        }
        duet_tensor_release(y);
        duet_tensor_release(l);
    }
    duet_tensor_release(x);
}

static void test_alloc_stats(void **state) {
    (void)state;
    size_t live0 = 0, peak0 = 0, live1 = 0, peak1 = 0, live2 = 0, peak2 = 0;
    duet_alloc_reset_peak();
    duet_alloc_stats(&live0, &peak0);
    assert_true(peak0 == live0);
    const size_t big = (size_t)3 << 20;
    void *p = duet_aligned_alloc(big);
    assert_non_null(p);
    memset(p, 1, big);
    duet_alloc_stats(&live1, &peak1);
    assert_true(live1 >= live0 + big);
    assert_true(peak1 >= live1);
    duet_aligned_free(p);
    duet_alloc_stats(&live2, &peak2);
    assert_true(live2 == live0);
    assert_true(peak2 == peak1); /* the peak remembers */
    duet_alloc_reset_peak();
    duet_alloc_stats(&live2, &peak2);
    assert_true(peak2 == live2);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_node_freed_after_its_backward),
        cmocka_unit_test(test_second_backward_fails),
        cmocka_unit_test(test_release_frees_unread_values),
        cmocka_unit_test(test_requires_grad_changed_after_release),
        cmocka_unit_test(test_relu_mask_gradients),
        cmocka_unit_test(test_alloc_stats),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
