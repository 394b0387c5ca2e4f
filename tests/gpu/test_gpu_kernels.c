/* The CUDA kernels against the CPU: activations and losses (ops_math.h's
 * functions, which the CPU ops run), Adam's fused update against
 * duet_adam_update on the CPU (bit for bit: no FMA contraction, IEEE sqrt
 * and division), and the cuBLASLt GEMM against duet_sgemm (float32, TF32
 * off). Needs a GPU; exits 77 (skipped) without. */
#include "testutil.h"

#include "cuda/cuda.h"
#include "gpu/gpu_skip.h"
#include "ops/cuda/cuda_ops.h"
#include "ops/ops_math.h"

#include <math.h>
#include <string.h>

static const duet_device GPU = {DUET_DEVICE_CUDA, 0};

/* n values: random normals of scale 6, with 0, -0, +-80 and a NaN first. */
static duet_tensor *inputs(duet_rng *rng, int64_t n) {
    duet_tensor *t = tu_randn(rng, 1, &n, 6.0f);
    t->data[0] = 0.0f;
    t->data[1] = -0.0f;
    t->data[2] = 80.0f;
    t->data[3] = -80.0f;
    t->data[4] = NAN;
    return t;
}

static duet_tensor *to_gpu(const duet_tensor *h) {
    duet_tensor *d = NULL;
    TU_OK(duet_tensor_to(h, GPU, &d));
    return d;
}

static void to_host(const duet_tensor *d, float *out) { TU_OK(duet_tensor_copy_to_host(d, out)); }

/* Raw device bytes to the host, ordered after the compute stream's work (a
 * plain cudaMemcpy runs on the legacy stream, which does not wait for duet's
 * non-blocking one). */
static int from_device(void *host, const void *dev, size_t bytes) {
    return duet__cuda_copy(duet_device_cpu(), host, GPU, dev, bytes, "test");
}

/* The same float bit for bit, or both NaN: the GPU's arithmetic makes its
 * one canonical NaN where the CPU keeps the input NaN's bits. */
static bool same_bits(float a, float b) {
    return memcmp(&a, &b, sizeof a) == 0 || (isnan(a) && isnan(b));
}

/* Within `ulps` units in the last place (NaN matches NaN). */
static bool close_ulps(float a, float b, int ulps) {
    if (isnan(a) || isnan(b)) return isnan(a) && isnan(b);
    if (a == b) return true;
    int32_t ia, ib;
    memcpy(&ia, &a, 4);
    memcpy(&ib, &b, 4);
    if ((ia < 0) != (ib < 0)) return fabsf(a - b) < 1e-30f;
    return abs(ia - ib) <= ulps;
}

static void test_activations(void **state) {
    (void)state;
    duet_rng rng = duet_rng_make(3, 0);
    const int64_t n = 1000003;
    duet_tensor *x = inputs(&rng, n), *g = tu_randn(&rng, 1, &n, 1.0f);
    duet_tensor *dx = to_gpu(x), *dg = to_gpu(g), *dy = NULL, *dgx = NULL;
    TU_OK(duet_tensor_create_on(GPU, 1, &n, &dy));
    float *y = malloc((size_t)n * sizeof *y), *gx = malloc((size_t)n * sizeof *gx);
    const duet__cuda_act acts[] = {DUET__ACT_RELU, DUET__ACT_LEAKY_RELU, DUET__ACT_SIGMOID,
                                   DUET__ACT_TANH, DUET__ACT_ELU};
    for (size_t a = 0; a < sizeof acts / sizeof acts[0]; a++) {
        const float slope = 0.2f;
        TU_OK(duet__cuda_act_forward(0, acts[a], dy->data, dx->data, slope, n));
        to_host(dy, y);
        int64_t bad = -1;
        for (int64_t i = 0; i < n && bad < 0; i++) {
            const float v = x->data[i];
            switch (acts[a]) {
            case DUET__ACT_RELU: if (!same_bits(y[i], duet__relu(v))) bad = i; break;
            case DUET__ACT_LEAKY_RELU:
                if (!same_bits(y[i], duet__leaky_relu(v, slope))) bad = i;
                break;
            /* CUDA's expf and tanhf are within 2 ulp of glibc's. */
            case DUET__ACT_SIGMOID: if (!close_ulps(y[i], duet__sigmoid(v), 8)) bad = i; break;
            /* slope is ELU's alpha here; CUDA's expm1f is within 2 ulp too. */
            case DUET__ACT_ELU: if (!close_ulps(y[i], duet__elu(v, slope), 8)) bad = i; break;
            default: if (!close_ulps(y[i], duet__tanh(v), 4)) bad = i; break;
            }
        }
        if (bad >= 0) fail_msg("activation %zu at %lld: x %g, gpu %g", a, (long long)bad,
                               (double)x->data[bad], (double)y[bad]);
        /* Backward from the saved input (rectifiers) or this output: the
         * same arithmetic on the same floats, bit for bit. */
        TU_OK(duet_tensor_create_on(GPU, 1, &n, &dgx));
        TU_OK(duet_tensor_fill(dgx, 0.5f));
        const bool rect = acts[a] == DUET__ACT_RELU || acts[a] == DUET__ACT_LEAKY_RELU;
        TU_OK(duet__cuda_act_backward(0, acts[a], dgx->data, dg->data, rect ? dx->data : dy->data,
                                      slope, n));
        to_host(dgx, gx);
        for (int64_t i = 0; i < n && bad < 0; i++) {
            const float gi = g->data[i];
            float want;
            switch (acts[a]) {
            case DUET__ACT_RELU: want = duet__leaky_relu_grad(gi, x->data[i] > 0.0f, 0.0f); break;
            case DUET__ACT_LEAKY_RELU:
                want = duet__leaky_relu_grad(gi, x->data[i] > 0.0f, slope);
                break;
            case DUET__ACT_SIGMOID: want = duet__sigmoid_grad(gi, y[i]); break;
            case DUET__ACT_ELU: want = duet__elu_grad(gi, y[i], slope); break;
            default: want = duet__tanh_grad(gi, y[i]); break;
            }
            if (!same_bits(gx[i], 0.5f + want)) bad = i;
        }
        if (bad >= 0) fail_msg("activation %zu backward at %lld: gpu %g", a, (long long)bad,
                               (double)gx[bad]);
        duet_tensor_release(dgx);
    }
    /* And the CPU op itself agrees with the function the kernel ran. */
    duet_tensor *cy = NULL;
    TU_OK(duet_leaky_relu(x, 0.2f, &cy));
    TU_OK(duet__cuda_act_forward(0, DUET__ACT_LEAKY_RELU, dy->data, dx->data, 0.2f, n));
    to_host(dy, y);
    for (int64_t i = 0; i < n; i++)
        if (!same_bits(y[i], cy->data[i]))
            fail_msg("leaky_relu at %lld: gpu %g, cpu op %g", (long long)i, (double)y[i],
                     (double)cy->data[i]);
    duet_tensor_release(cy);
    free(y);
    free(gx);
    duet_tensor_release(dy);
    duet_tensor_release(dg);
    duet_tensor_release(dx);
    duet_tensor_release(g);
    duet_tensor_release(x);
}

static void test_losses(void **state) {
    (void)state;
    duet_rng rng = duet_rng_make(4, 0);
    const int64_t n = 777777;
    duet_tensor *p = tu_randn(&rng, 1, &n, 3.0f), *t = tu_rand(&rng, 1, &n, 0.0f, 1.0f);
    duet_tensor *dp = to_gpu(p), *dt = to_gpu(t), *dg = NULL;
    void *dsum = NULL;
    TU_OK(duet__cuda_alloc(0, sizeof(double), false, "test", &dsum));
    float *g = malloc((size_t)n * sizeof *g);
    const duet__cuda_loss losses[] = {DUET__LOSS_L1, DUET__LOSS_MSE, DUET__LOSS_BCE_LOGITS};
    for (size_t l = 0; l < 3; l++) {
        /* The CPU op's value: weight * sum / n in double. */
        duet_tensor *cpu = NULL;
        if (losses[l] == DUET__LOSS_L1) TU_OK(duet_l1_loss(p, t, 1.0f, &cpu));
        else if (losses[l] == DUET__LOSS_MSE) TU_OK(duet_mse_loss(p, t, 1.0f, &cpu));
        else TU_OK(duet_bce_with_logits(p, t, 1.0f, &cpu));
        double sum = 0.0, again = 0.0;
        TU_OK(duet__cuda_loss_sum(0, losses[l], dsum, dp->data, dt->data, 1, n));
        TU_OK(from_device(&sum, dsum, sizeof sum));
        TU_OK(duet__cuda_loss_sum(0, losses[l], dsum, dp->data, dt->data, 1, n));
        TU_OK(from_device(&again, dsum, sizeof again));
        assert_memory_equal(&sum, &again, sizeof sum); /* the same order every run */
        const float gpu = (float)(sum / (double)n);
        if (!(fabsf(gpu - cpu->data[0]) <= 1e-6f * fabsf(cpu->data[0])))
            fail_msg("loss %zu: gpu %.9g, cpu %.9g", l, (double)gpu, (double)cpu->data[0]);
        duet_tensor_release(cpu);
        /* Gradients: the same arithmetic per element. */
        TU_OK(duet_tensor_create_on(GPU, 1, &n, &dg));
        const float c = 0.37f;
        TU_OK(duet__cuda_loss_backward(0, losses[l], dg->data, dp->data, dt->data, 1, c, n));
        to_host(dg, g);
        for (int64_t i = 0; i < n; i++) {
            const float pi = p->data[i], ti = t->data[i];
            float want;
            if (losses[l] == DUET__LOSS_L1) want = duet__l1_grad(pi, ti, c);
            else if (losses[l] == DUET__LOSS_MSE) want = duet__mse_grad(pi, ti, c);
            else want = duet__bce_logits_grad(pi, ti, c);
            /* BCE's gradient runs CUDA's expf (within 2 ulp of glibc's),
             * and sigmoid(x) - t may cancel: an absolute bound, a few ulp
             * of c. */
            const bool ok = losses[l] == DUET__LOSS_BCE_LOGITS
                                ? fabsf(g[i] - want) <= fabsf(c) * 1e-6f
                                : same_bits(g[i], 0.0f + want);
            if (!ok) fail_msg("loss %zu gradient at %lld: gpu %g, cpu %g", l, (long long)i,
                              (double)g[i], (double)want);
        }
        duet_tensor_release(dg);
    }
    /* A constant target (stride 0). */
    float one = 1.0f;
    void *done = NULL;
    TU_OK(duet__cuda_alloc(0, sizeof one, false, "test", &done));
    TU_OK(duet__cuda_copy(GPU, done, duet_device_cpu(), &one, sizeof one, "test"));
    duet_tensor *cpu = NULL;
    TU_OK(duet_bce_with_logits_const(p, 1.0f, 1.0f, &cpu));
    double sum = 0.0;
    TU_OK(duet__cuda_loss_sum(0, DUET__LOSS_BCE_LOGITS, dsum, dp->data, done, 0, n));
    TU_OK(from_device(&sum, dsum, sizeof sum));
    assert_true(fabsf((float)(sum / (double)n) - cpu->data[0]) <= 1e-6f * cpu->data[0]);
    duet_tensor_release(cpu);
    duet__cuda_free(0, done);
    duet__cuda_free(0, dsum);
    free(g);
    duet_tensor_release(dt);
    duet_tensor_release(dp);
    duet_tensor_release(t);
    duet_tensor_release(p);
}

/* Adam's fused kernel over three tensors (one spanning several chunks,
 * steps that differ per tensor) against the CPU's update, bit for bit. */
static void test_adam_fused_matches_cpu(void **state) {
    (void)state;
    duet_rng rng = duet_rng_make(5, 0);
    enum { T = 3 };
    const int64_t sizes[T] = {16384 * 3 + 5, 1, 1000};
    duet_tensor *cp[T], *cm[T], *cv[T], *gp[T], *gm[T], *gv[T];
    for (int i = 0; i < T; i++) {
        cp[i] = tu_randn(&rng, 1, &sizes[i], 1.0f);
        cm[i] = tu_zeros(1, &sizes[i]);
        cv[i] = tu_zeros(1, &sizes[i]);
        TU_OK(duet_tensor_ensure_grad(cp[i]));
        gp[i] = to_gpu(cp[i]);
        gm[i] = to_gpu(cm[i]);
        gv[i] = to_gpu(cv[i]);
        TU_OK(duet_tensor_ensure_grad(gp[i]));
    }
    const duet_adam_hparams hp = {.lr = 2e-3f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f,
                                  .weight_decay = 0.01f};
    int64_t steps[T] = {0, 5, 0};
    for (int s = 0; s < 4; s++) {
        for (int i = 0; i < T; i++) {
            for (int64_t j = 0; j < sizes[i]; j++) cp[i]->grad[j] = duet_rng_normal(&rng);
            duet_tensor gview = *gp[i];
            gview.data = gp[i]->grad;
            TU_OK(duet_tensor_copy_from_host(&gview, cp[i]->grad));
            steps[i]++;
        }
        TU_OK(duet_adam_update(T, cp, cm, cv, steps, &hp));
        TU_OK(duet_adam_update(T, gp, gm, gv, steps, &hp));
    }
    for (int i = 0; i < T; i++) {
        float *h = malloc((size_t)sizes[i] * sizeof *h);
        to_host(gp[i], h);
        assert_memory_equal(h, cp[i]->data, (size_t)sizes[i] * sizeof *h);
        to_host(gm[i], h);
        assert_memory_equal(h, cm[i]->data, (size_t)sizes[i] * sizeof *h);
        to_host(gv[i], h);
        assert_memory_equal(h, cv[i]->data, (size_t)sizes[i] * sizeof *h);
        free(h);
    }
    /* Mixed devices in one update are refused, naming the parameter. */
    duet_tensor *mixed[2] = {gp[0], cp[1]}, *mm[2] = {gm[0], cm[1]}, *mv[2] = {gv[0], cv[1]};
    assert_int_equal(duet_adam_update(2, mixed, mm, mv, steps, &hp), DUET_EDEVICE);
    assert_non_null(strstr(duet_last_error(), "parameter 1 is on cpu"));
    for (int i = 0; i < T; i++) {
        duet_tensor_release(cp[i]);
        duet_tensor_release(cm[i]);
        duet_tensor_release(cv[i]);
        duet_tensor_release(gp[i]);
        duet_tensor_release(gm[i]);
        duet_tensor_release(gv[i]);
    }
}

/* C = alpha op(A) op(B) + beta C for every transpose pair, padded leading
 * dimensions, beta 0 and 1, against duet_sgemm on the CPU. */
static void test_sgemm(void **state) {
    (void)state;
    duet_rng rng = duet_rng_make(6, 0);
    const int64_t m = 67, n = 129, k = 200, pad = 3;
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++)
            for (int b1 = 0; b1 < 2; b1++) {
                const int64_t arows = ta ? k : m, acols = ta ? m : k;
                const int64_t brows = tb ? n : k, bcols = tb ? k : n;
                const int64_t lda = acols + pad, ldb = bcols + pad, ldc = n + pad;
                duet_tensor *a = tu_randn(&rng, 2, (int64_t[]){arows, lda}, 1.0f);
                duet_tensor *b = tu_randn(&rng, 2, (int64_t[]){brows, ldb}, 1.0f);
                duet_tensor *c = tu_randn(&rng, 2, (int64_t[]){m, ldc}, 1.0f);
                duet_tensor *da = to_gpu(a), *db = to_gpu(b), *dc = to_gpu(c);
                const float alpha = 0.75f, beta = b1 ? 1.0f : 0.0f;
                duet_sgemm(ta, tb, m, n, k, alpha, a->data, lda, b->data, ldb, beta, c->data, ldc);
                TU_OK(duet__cuda_sgemm(0, "test", ta, tb, m, n, k, alpha, da->data, lda, db->data,
                                       ldb, beta, dc->data, ldc));
                float *got = malloc((size_t)c->numel * sizeof *got);
                to_host(dc, got);
                for (int64_t i = 0; i < m; i++)
                    for (int64_t j = 0; j < n; j++) {
                        const float w = c->data[i * ldc + j], g = got[i * ldc + j];
                        if (!(fabsf(g - w) <= 2e-5f * sqrtf((float)k) * 4.0f))
                            fail_msg("sgemm ta %d tb %d beta %g at (%lld, %lld): gpu %g, cpu %g",
                                     ta, tb, (double)beta, (long long)i, (long long)j, (double)g,
                                     (double)w);
                    }
                /* Again (the cached algorithm): the same bits. */
                if (b1 == 0) {
                    float *again = malloc((size_t)c->numel * sizeof *again);
                    TU_OK(duet__cuda_sgemm(0, "test", ta, tb, m, n, k, alpha, da->data, lda,
                                           db->data, ldb, beta, dc->data, ldc));
                    to_host(dc, again);
                    assert_memory_equal(again, got, (size_t)c->numel * sizeof *again);
                    /* TF32 on: about 10 bits of mantissa in the products. */
                    assert_false(duet__cuda_gemm_allow_tf32(true));
                    TU_OK(duet__cuda_sgemm(0, "test", ta, tb, m, n, k, alpha, da->data, lda,
                                           db->data, ldb, beta, dc->data, ldc));
                    assert_true(duet__cuda_gemm_allow_tf32(false));
                    to_host(dc, again);
                    for (int64_t i = 0; i < m; i++)
                        for (int64_t j = 0; j < n; j++)
                            assert_true(fabsf(again[i * ldc + j] - c->data[i * ldc + j]) <=
                                        0.05f + 0.01f * fabsf(c->data[i * ldc + j]));
                    free(again);
                }
                /* The padding between rows is left alone. */
                for (int64_t i = 0; i < m; i++)
                    for (int64_t j = n; j < ldc; j++) assert_true(got[i * ldc + j] == c->data[i * ldc + j]);
                free(got);
                duet_tensor_release(dc);
                duet_tensor_release(db);
                duet_tensor_release(da);
                duet_tensor_release(c);
                duet_tensor_release(b);
                duet_tensor_release(a);
            }
}

/* conv2d on cuDNN against the CPU's op, forward and backward (input,
 * weight and bias gradients, accumulated onto what was there), for a
 * strided padded shape and a 1x1 one; the algorithms of a shape are chosen
 * once. */
static void test_conv2d(void **state) {
    (void)state;
    duet_rng rng = duet_rng_make(7, 0);
    const duet__conv_dims shapes[] = {
        {.n = 2, .c = 3, .h = 9, .w = 11, .o = 5, .kh = 3, .kw = 3, .stride = 2, .pad = 1},
        {.n = 3, .c = 16, .h = 12, .w = 12, .o = 8, .kh = 1, .kw = 1, .stride = 1, .pad = 0},
        {.n = 1, .c = 64, .h = 20, .w = 20, .o = 64, .kh = 3, .kw = 3, .stride = 1, .pad = 1},
    };
    for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; k++) {
        duet__conv_dims d = shapes[k];
        d.oh = (d.h + 2 * d.pad - d.kh) / d.stride + 1;
        d.ow = (d.w + 2 * d.pad - d.kw) / d.stride + 1;
        duet_tensor *x = tu_randn(&rng, 4, (int64_t[]){d.n, d.c, d.h, d.w}, 1.0f);
        duet_tensor *w = tu_randn(&rng, 4, (int64_t[]){d.o, d.c, d.kh, d.kw}, 0.3f);
        duet_tensor *b = tu_randn(&rng, 1, (int64_t[]){d.o}, 1.0f);
        x->requires_grad = w->requires_grad = b->requires_grad = true;
        duet_tensor *y = NULL;
        TU_OK(duet_conv2d(x, w, b, (int)d.stride, (int)d.pad, &y));
        assert_true(y->shape[2] == d.oh && y->shape[3] == d.ow);
        duet_tensor *r = tu_randn(&rng, 4, y->shape, 1.0f);
        /* The GPU's gradients start from these, as the CPU's from zero. */
        duet_tensor *gx0 = tu_randn(&rng, 4, x->shape, 1.0f), *gw0 = tu_randn(&rng, 4, w->shape, 1.0f);
        duet_tensor *gb0 = tu_randn(&rng, 1, b->shape, 1.0f);
        duet_tensor *dx = to_gpu(x), *dw = to_gpu(w), *db = to_gpu(b), *dr = to_gpu(r);
        duet_tensor *dgx = to_gpu(gx0), *dgw = to_gpu(gw0), *dgb = to_gpu(gb0), *dy = NULL;
        TU_OK(duet_tensor_create_on(GPU, 4, y->shape, &dy));
        TU_OK(duet__cuda_conv2d_forward(0, &d, dx->data, dw->data, db->data, dy->data));
        const uint64_t searched = duet__cuda_conv_algo_searches();
        TU_OK(duet__cuda_conv2d_forward(0, &d, dx->data, dw->data, db->data, dy->data));
        assert_int_equal(duet__cuda_conv_algo_searches(), searched);
        float *got = malloc((size_t)y->numel * sizeof *got);
        to_host(dy, got);
        const double tol = 1e-5 * sqrt((double)(d.c * d.kh * d.kw));
        tu_assert_close(got, y->data, y->numel, tol, tol, "conv2d forward");
        free(got);
        tu_backprop_with(y, r->data);
        TU_OK(duet__cuda_conv2d_backward(0, &d, dx->data, dw->data, dr->data, dgx->data,
                                         dgw->data, dgb->data));
        duet_tensor *grads[3] = {dgx, dgw, dgb}, *cpu[3] = {x, w, b}, *start[3] = {gx0, gw0, gb0};
        const char *what[3] = {"conv2d input gradient", "conv2d weight gradient",
                               "conv2d bias gradient"};
        for (int i = 0; i < 3; i++) {
            float *h = malloc((size_t)grads[i]->numel * sizeof *h);
            to_host(grads[i], h);
            for (int64_t j = 0; j < grads[i]->numel; j++) h[j] -= start[i]->data[j];
            const double gt = 1e-5 * sqrt((double)(d.n * d.oh * d.ow * d.o));
            tu_assert_close(h, cpu[i]->grad, grads[i]->numel, gt, gt, what[i]);
            free(h);
        }
        duet_tensor *all[] = {x, w, b, y, r, gx0, gw0, gb0, dx, dw, db, dr, dgx, dgw, dgb, dy};
        for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) duet_tensor_release(all[i]);
    }
}

int main(void) {
    gpu_or_skip("test_gpu_kernels");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_activations),
        cmocka_unit_test(test_losses),
        cmocka_unit_test(test_adam_fused_matches_cpu),
        cmocka_unit_test(test_sgemm),
        cmocka_unit_test(test_conv2d),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
