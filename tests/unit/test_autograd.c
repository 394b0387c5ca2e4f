/* autograd: the tape, accumulation, the gradient-ready hook (exactly once per
 * backward, after the last contribution, never without a gradient), grad
 * mode, detach and backward observers. Uses tiny ops defined here, so that
 * the tape is tested apart from the real kernels. */
#include "testutil.h"

#include <string.h>

/* ---- test ops ----------------------------------------------------------- */

static int mul_backward(duet_node *n) {
    const float *up = n->output->grad;
    duet_tensor *a = n->inputs[0], *b = n->inputs[1];
    float *ga = duet_node_input_grad(n, 0);
    float *gb = duet_node_input_grad(n, 1);
    for (int64_t i = 0; i < a->numel; i++) {
        if (ga) ga[i] += up[i] * b->data[i];
        if (gb) gb[i] += up[i] * a->data[i];
    }
    return DUET_OK;
}

static int t_mul(duet_tensor *a, duet_tensor *b, duet_tensor **out) {
    DUET_TRY(duet_tensor_create_like(a, out));
    for (int64_t i = 0; i < a->numel; i++) (*out)->data[i] = a->data[i] * b->data[i];
    duet_tensor *in[2] = {a, b};
    if (duet_autograd_needs_record(2, in))
        return duet_autograd_record(*out, "t_mul", mul_backward, NULL, NULL, 2, in);
    return DUET_OK;
}

static int add_backward(duet_node *n) {
    const float *up = n->output->grad;
    for (int k = 0; k < 2; k++) {
        float *g = duet_node_input_grad(n, k);
        if (g)
            for (int64_t i = 0; i < n->output->numel; i++) g[i] += up[i];
    }
    return DUET_OK;
}

static int t_add(duet_tensor *a, duet_tensor *b, duet_tensor **out) {
    DUET_TRY(duet_tensor_create_like(a, out));
    for (int64_t i = 0; i < a->numel; i++) (*out)->data[i] = a->data[i] + b->data[i];
    duet_tensor *in[2] = {a, b};
    if (duet_autograd_needs_record(2, in))
        return duet_autograd_record(*out, "t_add", add_backward, NULL, NULL, 2, in);
    return DUET_OK;
}

static int sum_backward(duet_node *n) {
    float *g = duet_node_input_grad(n, 0);
    if (g)
        for (int64_t i = 0; i < n->inputs[0]->numel; i++) g[i] += n->output->grad[0];
    return DUET_OK;
}

static int t_sum(duet_tensor *x, duet_tensor **out) {
    DUET_TRY(duet_tensor_create(1, (int64_t[]){1}, out));
    double s = 0;
    for (int64_t i = 0; i < x->numel; i++) s += x->data[i];
    (*out)->data[0] = (float)s;
    if (duet_autograd_needs_record(1, &x))
        return duet_autograd_record(*out, "t_sum", sum_backward, NULL, NULL, 1, &x);
    return DUET_OK;
}

static duet_tensor *vec(int n, float start, float step, bool requires_grad) {
    duet_tensor *t = tu_zeros(1, (int64_t[]){n});
    for (int i = 0; i < n; i++) t->data[i] = start + step * i;
    t->requires_grad = requires_grad;
    return t;
}

/* ---- hook recorder ------------------------------------------------------ */

typedef struct hook_log {
    int calls;
    int order;          /* global call order */
    float snapshot[8];  /* the gradient as it was when the hook fired */
} hook_log;
static int hook_clock;

static void record_hook(void *ctx, duet_tensor *t) {
    hook_log *h = ctx;
    h->calls++;
    h->order = hook_clock++;
    memcpy(h->snapshot, t->grad, (size_t)t->numel * sizeof(float));
}

/* ---- tests ---------------------------------------------------------------- */

static void test_chain_gradients(void **state) {
    (void)state;
    duet_tensor *w = vec(4, 1, 1, true), *x = vec(4, 0.5f, -1, false);
    duet_tensor *p = NULL, *s = NULL;
    TU_OK(t_mul(w, x, &p));
    TU_OK(t_sum(p, &s));
    assert_true(s->requires_grad);
    assert_int_equal(duet_tape_size(), 2);
    TU_OK(duet_backward(s));
    assert_int_equal(duet_tape_size(), 0);
    tu_assert_close(w->grad, x->data, 4, 0, 0, "dL/dw = x");
    assert_null(x->grad);
    /* The intermediate survives as a constant while the caller holds it. */
    assert_null(p->grad_fn);
    assert_false(p->requires_grad);
    duet_tensor *ps[] = {p, s, w, x};
    for (int i = 0; i < 4; i++) duet_tensor_release(ps[i]);
}

static void test_hook_once_after_last_use(void **state) {
    (void)state;
    /* w is used twice (like a discriminator run on two inputs in one graph):
     * the hook must fire once, with both contributions already summed. */
    duet_tensor *w = vec(3, 1, 1, true), *x1 = vec(3, 2, 0, false), *x2 = vec(3, -1, 3, false);
    duet_tensor *late = vec(3, 1, 0, true), *unused = vec(3, 1, 0, true);
    hook_log hw = {0}, hl = {0}, hu = {0};
    duet_autograd_set_grad_hook(w, record_hook, &hw);
    duet_autograd_set_grad_hook(late, record_hook, &hl);
    duet_autograd_set_grad_hook(unused, record_hook, &hu);
    hook_clock = 0;
    duet_tensor *a = NULL, *b = NULL, *c = NULL, *d = NULL, *s = NULL;
    TU_OK(t_mul(w, x1, &a));
    TU_OK(t_mul(w, x2, &b));
    TU_OK(t_add(a, b, &c));
    TU_OK(t_mul(c, late, &d));
    TU_OK(t_sum(d, &s));
    TU_OK(duet_backward(s));
    assert_int_equal(hw.calls, 1);
    assert_int_equal(hl.calls, 1);
    assert_int_equal(hu.calls, 0);
    assert_null(unused->grad);
    /* late was used last in forward, so its gradient is ready first. */
    assert_true(hl.order < hw.order);
    float want[3];
    for (int i = 0; i < 3; i++) want[i] = late->data[i] * (x1->data[i] + x2->data[i]);
    tu_assert_close(hw.snapshot, want, 3, 0, 0, "w grad complete when its hook fired");
    tu_assert_close(w->grad, want, 3, 0, 0, "w grad");

    /* A second backward accumulates and fires the hook once more. */
    duet_tensor *e = NULL, *s2 = NULL;
    TU_OK(t_mul(w, x1, &e));
    TU_OK(t_sum(e, &s2));
    TU_OK(duet_backward(s2));
    assert_int_equal(hw.calls, 2);
    assert_int_equal(hl.calls, 1);
    for (int i = 0; i < 3; i++) want[i] += x1->data[i];
    tu_assert_close(w->grad, want, 3, 0, 0, "accumulated w grad");
    duet_tensor *all[] = {w, x1, x2, late, unused, a, b, c, d, s, e, s2};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) duet_tensor_release(all[i]);
}

static void test_same_tensor_twice_in_one_node(void **state) {
    (void)state;
    duet_tensor *w = vec(2, 3, 1, true);
    hook_log h = {0};
    duet_autograd_set_grad_hook(w, record_hook, &h);
    duet_tensor *sq = NULL, *s = NULL;
    TU_OK(t_mul(w, w, &sq));
    TU_OK(t_sum(sq, &s));
    TU_OK(duet_backward(s));
    assert_int_equal(h.calls, 1);
    float want[2] = {2 * w->data[0], 2 * w->data[1]};
    tu_assert_close(w->grad, want, 2, 0, 0, "d(w*w)/dw");
    duet_tensor_release(sq);
    duet_tensor_release(s);
    duet_tensor_release(w);
}

static void test_frozen_and_no_grad(void **state) {
    (void)state;
    duet_tensor *w = vec(2, 1, 1, false), *x = vec(2, 1, 1, false);
    duet_tensor *p = NULL;
    TU_OK(t_mul(w, x, &p));
    assert_false(p->requires_grad);
    assert_int_equal(duet_tape_size(), 0);
    duet_tensor_release(p);

    w->requires_grad = true;
    bool prev = duet_set_grad_enabled(false);
    assert_true(prev);
    assert_false(duet_grad_enabled());
    TU_OK(t_mul(w, x, &p));
    assert_false(p->requires_grad);
    assert_int_equal(duet_tape_size(), 0);
    duet_set_grad_enabled(prev);
    assert_true(duet_grad_enabled());
    duet_tensor_release(p);
    duet_tensor_release(w);
    duet_tensor_release(x);
}

static void test_detach(void **state) {
    (void)state;
    duet_tensor *w = vec(2, 1, 1, true), *x = vec(2, 2, 0, false);
    duet_tensor *p = NULL, *dp = NULL, *q = NULL, *s = NULL;
    TU_OK(t_mul(w, x, &p));
    TU_OK(duet_detach(p, &dp));
    assert_false(dp->requires_grad);
    assert_ptr_equal(dp->data, p->data);
    TU_OK(t_mul(dp, w, &q));
    TU_OK(t_sum(q, &s));
    TU_OK(duet_backward(s));
    /* Only the path through q's second input counts: d/dw = dp = w*x. */
    float want[2] = {w->data[0] * x->data[0], w->data[1] * x->data[1]};
    tu_assert_close(w->grad, want, 2, 0, 0, "grad through the undetached input only");
    duet_tensor *all[] = {w, x, p, dp, q, s};
    for (int i = 0; i < 6; i++) duet_tensor_release(all[i]);
}

static void test_backward_errors(void **state) {
    (void)state;
    duet_tensor *w = vec(2, 1, 1, true), *x = vec(2, 1, 1, false);
    duet_tensor *p = NULL;
    TU_OK(t_mul(w, x, &p));
    assert_int_equal(duet_backward(p), DUET_EINVAL); /* not a scalar */
    assert_non_null(strstr(duet_last_error(), "one element"));
    assert_int_equal(duet_tape_size(), 0);
    duet_tensor *c = vec(1, 1, 0, false);
    assert_int_equal(duet_backward(c), DUET_EINVAL); /* no history */
    duet_tensor_release(c);
    duet_tensor_release(p);
    duet_tensor_release(w);
    duet_tensor_release(x);
}

typedef struct obs_state {
    int progress, ends, fail;
} obs_state;
static void obs_progress(void *ctx) { ((obs_state *)ctx)->progress++; }
static int obs_end(void *ctx) {
    obs_state *o = ctx;
    o->ends++;
    return o->fail ? duet__error(DUET_EMPI, "observer failed") : DUET_OK;
}

static void test_observers(void **state) {
    (void)state;
    obs_state o = {0};
    duet_backward_observer ob = {obs_progress, obs_end, &o};
    int id = -1;
    TU_OK(duet_autograd_add_observer(&ob, &id));
    duet_tensor *w = vec(2, 1, 1, true), *x = vec(2, 1, 1, false);
    duet_tensor *p = NULL, *s = NULL;
    TU_OK(t_mul(w, x, &p));
    TU_OK(t_sum(p, &s));
    TU_OK(duet_backward(s));
    assert_int_equal(o.progress, 2);
    assert_int_equal(o.ends, 1);
    duet_tensor_release(p);
    duet_tensor_release(s);
    o.fail = 1;
    TU_OK(t_mul(w, x, &p));
    TU_OK(t_sum(p, &s));
    assert_int_equal(duet_backward(s), DUET_EMPI);
    assert_int_equal(o.ends, 2);
    duet_autograd_remove_observer(id);
    duet_tensor_release(p);
    duet_tensor_release(s);
    TU_OK(t_mul(w, x, &p));
    TU_OK(t_sum(p, &s));
    TU_OK(duet_backward(s));
    assert_int_equal(o.ends, 2);
    duet_tensor *all[] = {w, x, p, s};
    for (int i = 0; i < 4; i++) duet_tensor_release(all[i]);
}

static void count_leaf(void *ctx, duet_tensor *leaf) {
    (void)leaf;
    (*(int *)ctx)++;
}

static void test_visit_leaves(void **state) {
    (void)state;
    duet_tensor *w1 = vec(2, 1, 1, true), *w2 = vec(2, 1, 1, true), *w3 = vec(2, 1, 1, true);
    duet_tensor *a = NULL, *b = NULL, *c = NULL;
    TU_OK(t_mul(w1, w2, &a));
    TU_OK(t_mul(a, w1, &b)); /* w1 reachable twice: visited once */
    TU_OK(t_mul(w3, w3, &c)); /* not reachable from b */
    int count = 0;
    TU_OK(duet_autograd_visit_leaves(&b, 1, count_leaf, &count));
    assert_int_equal(count, 2);
    /* A root that is itself a leaf, and also reachable from another root,
     * is reported once. */
    count = 0;
    duet_tensor *roots[] = {w1, b};
    TU_OK(duet_autograd_visit_leaves(roots, 2, count_leaf, &count));
    assert_int_equal(count, 2);
    duet_tape_clear();
    assert_int_equal(duet_tape_size(), 0);
    duet_tensor *all[] = {w1, w2, w3, a, b, c};
    for (int i = 0; i < 6; i++) duet_tensor_release(all[i]);
}

static void test_external_grad_storage(void **state) {
    (void)state;
    /* DDP points parameter gradients into one contiguous buffer. */
    float buffer[4] = {0};
    duet_tensor *w = vec(2, 1, 1, true), *x = vec(2, 5, 1, false);
    duet_tensor_set_grad_storage(w, buffer + 1);
    duet_tensor *p = NULL, *s = NULL;
    TU_OK(t_mul(w, x, &p));
    TU_OK(t_sum(p, &s));
    TU_OK(duet_backward(s));
    assert_true(buffer[0] == 0.0f && buffer[3] == 0.0f);
    assert_true(buffer[1] == 5.0f && buffer[2] == 6.0f);
    duet_tensor *all[] = {w, x, p, s};
    for (int i = 0; i < 4; i++) duet_tensor_release(all[i]);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_chain_gradients),
        cmocka_unit_test(test_hook_once_after_last_use),
        cmocka_unit_test(test_same_tensor_twice_in_one_node),
        cmocka_unit_test(test_frozen_and_no_grad),
        cmocka_unit_test(test_detach),
        cmocka_unit_test(test_backward_errors),
        cmocka_unit_test(test_observers),
        cmocka_unit_test(test_visit_leaves),
        cmocka_unit_test(test_external_grad_storage),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
