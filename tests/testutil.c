#include "testutil.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

duet_tensor *tu_randn(duet_rng *rng, int ndim, const int64_t *shape, float scale) {
    duet_tensor *t = NULL;
    TU_OK(duet_tensor_create(&t, ndim, shape));
    for (int64_t i = 0; i < t->numel; i++) t->data[i] = scale * duet_rng_normal(rng);
    return t;
}

duet_tensor *tu_rand(duet_rng *rng, int ndim, const int64_t *shape, float lo, float hi) {
    duet_tensor *t = NULL;
    TU_OK(duet_tensor_create(&t, ndim, shape));
    for (int64_t i = 0; i < t->numel; i++) t->data[i] = lo + (hi - lo) * duet_rng_uniform(rng);
    return t;
}

duet_tensor *tu_zeros(int ndim, const int64_t *shape) {
    duet_tensor *t = NULL;
    TU_OK(duet_tensor_create(&t, ndim, shape));
    return t;
}

void tu_assert_close(const float *got, const float *want, int64_t n, double rtol, double atol,
                     const char *what) {
    int64_t bad = -1, worst = 0;
    double worst_err = 0.0;
    for (int64_t i = 0; i < n; i++) {
        double err = fabs((double)got[i] - (double)want[i]);
        bool ok = err <= atol + rtol * fabs((double)want[i]) && !isnan(got[i]) == !isnan(want[i]);
        if (!ok && bad < 0) bad = i;
        if (err > worst_err || isnan(err)) {
            worst_err = err;
            worst = i;
        }
    }
    if (bad >= 0)
        fail_msg("%s: element %lld: got %.8g, want %.8g (rtol %g, atol %g); largest error %.3g "
                 "at %lld (got %.8g, want %.8g)",
                 what, (long long)bad, got[bad], want[bad], rtol, atol, worst_err,
                 (long long)worst, got[worst], want[worst]);
}

/* L = sum(out * R) as a recorded op, so the gradient check needs no other op
 * than the one under test. */
typedef struct dot_ctx {
    const float *r;
} dot_ctx;

static int dot_backward(duet_node *node) {
    dot_ctx *c = node->ctx;
    float *g = duet_node_input_grad(node, 0);
    if (g == NULL) return DUET_OK;
    float up = node->output->grad[0];
    for (int64_t i = 0; i < node->inputs[0]->numel; i++) g[i] += up * c->r[i];
    return DUET_OK;
}

static double dot_value(const duet_tensor *out, const float *r) {
    double s = 0.0;
    for (int64_t i = 0; i < out->numel; i++) s += (double)out->data[i] * r[i];
    return s;
}

static double eval_loss(tu_op_fn fn, void *ctx, int n, duet_tensor *const *inputs,
                        const float *r) {
    bool prev = duet_set_grad_enabled(false);
    duet_tensor *out = NULL;
    TU_OK(fn(ctx, inputs, &out));
    double v = dot_value(out, r);
    duet_tensor_release(out);
    duet_set_grad_enabled(prev);
    (void)n;
    return v;
}

void tu_gradcheck(tu_op_fn fn, void *ctx, int n, duet_tensor *const *inputs, double eps,
                  double rtol, double atol, int max_per_input) {
    duet_rng rng = duet_rng_make(1234, 99);
    duet_tensor *out = NULL;
    for (int i = 0; i < n; i++)
        if (inputs[i] != NULL && inputs[i]->requires_grad) duet_tensor_zero_grad(inputs[i]);
    TU_OK(fn(ctx, inputs, &out));
    float *r = malloc((size_t)out->numel * sizeof(float));
    assert_non_null(r);
    for (int64_t i = 0; i < out->numel; i++) r[i] = duet_rng_normal(&rng);
    duet_tensor *loss = NULL;
    TU_OK(duet_tensor_create(&loss, 1, (int64_t[]){1}));
    loss->data[0] = (float)dot_value(out, r);
    dot_ctx *dc = malloc(sizeof *dc);
    dc->r = r;
    TU_OK(duet_autograd_record(loss, "tu_dot", dot_backward, dc, free, 1, &out));
    TU_OK(duet_backward(loss));
    duet_tensor_release(loss);
    duet_tensor_release(out);

    for (int i = 0; i < n; i++) {
        duet_tensor *x = inputs[i];
        if (x == NULL || !x->requires_grad) continue;
        if (x->grad == NULL) fail_msg("gradcheck: input %d got no gradient", i);
        int64_t count = x->numel < max_per_input ? x->numel : max_per_input;
        for (int64_t c = 0; c < count; c++) {
            int64_t j = x->numel <= max_per_input ? c : duet_rng_int(&rng, 0, x->numel - 1);
            float saved = x->data[j];
            x->data[j] = (float)(saved + eps);
            double lp = eval_loss(fn, ctx, n, inputs, r);
            x->data[j] = (float)(saved - eps);
            double lm = eval_loss(fn, ctx, n, inputs, r);
            x->data[j] = saved;
            double num = (lp - lm) / (2.0 * eps);
            double ana = x->grad[j];
            if (fabs(num - ana) > atol + rtol * fabs(num))
                fail_msg("gradcheck: input %d element %lld: analytic %.6g, numeric %.6g "
                         "(rtol %g, atol %g)", i, (long long)j, ana, num, rtol, atol);
        }
    }
    free(r);
}

const char *tu_ref_dir(void) {
    const char *d = getenv("DUET_REF_DIR");
    if (d == NULL || d[0] == '\0')
        fail_msg("DUET_REF_DIR is not set: run this test through ctest, which writes the "
                 "PyTorch reference files first (tests/ref/gen_refs.py)");
    return d;
}

duet_st *tu_ref_load(const char *name) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", tu_ref_dir(), name);
    duet_st *st = NULL;
    int rc = duet_st_load(path, &st);
    if (rc != DUET_OK)
        fail_msg("cannot load reference file %s (%s): %s; it is written by "
                 "tests/ref/gen_refs.py with Debian's python3-torch",
                 path, duet_err_name(rc), duet_last_error());
    return st;
}

duet_tensor *tu_ref_tensor(const duet_st *st, const char *name) {
    duet_tensor *t = NULL;
    TU_OK(duet_st_get(st, name, &t));
    return t;
}

void tu_assert_ref(const duet_st *st, const char *name, const float *got, int64_t n,
                   double rtol, double atol) {
    duet_tensor *want = tu_ref_tensor(st, name);
    if (want->numel != n)
        fail_msg("%s: %lld values computed, the reference has %lld", name, (long long)n,
                 (long long)want->numel);
    tu_assert_close(got, want->data, n, rtol, atol, name);
    duet_tensor_release(want);
}
