/* conv2d: forward and backward against a direct (loop) convolution in
 * double for several kernels, strides, paddings and non-square inputs, on
 * oneDNN's float32 convolutions (where conv_onednn.c takes the shape) and
 * on im2col + SGEMM;
 * finite-difference gradient checks of x, w and b; the same in bf16 mixed
 * precision against the rounded inputs, on oneDNN's convolutions and on
 * im2col's bf16 columns; accumulation into existing gradients; skipped work
 * for inputs that need no gradient; shape errors. */
#include "testutil.h"
#include "ops/ops_internal.h"

#include <math.h>
#include <pthread.h>
#include <string.h>

/* ---- helpers --------------------------------------------------------------- */

typedef struct cfg {
    int64_t n, c, h, w, o, kh, kw;
    int stride, pad;
    bool bias;
} cfg;

static int64_t out_size(int64_t in, int64_t k, int s, int p) { return (in + 2 * p - k) / s + 1; }

/* Direct convolution in double: y (N, O, OH, OW). */
static void naive_forward(double *y, const float *x, const float *w, const float *b,
                          const cfg *c) {
    int64_t oh = out_size(c->h, c->kh, c->stride, c->pad),
            ow = out_size(c->w, c->kw, c->stride, c->pad);
    for (int64_t n = 0; n < c->n; n++)
        for (int64_t o = 0; o < c->o; o++)
            for (int64_t i = 0; i < oh; i++)
                for (int64_t j = 0; j < ow; j++) {
                    double s = b != NULL ? b[o] : 0.0;
                    for (int64_t ci = 0; ci < c->c; ci++)
                        for (int64_t a = 0; a < c->kh; a++)
                            for (int64_t bb = 0; bb < c->kw; bb++) {
                                int64_t ih = i * c->stride - c->pad + a;
                                int64_t iw = j * c->stride - c->pad + bb;
                                if (ih < 0 || ih >= c->h || iw < 0 || iw >= c->w) continue;
                                s += (double)x[((n * c->c + ci) * c->h + ih) * c->w + iw] *
                                     w[((o * c->c + ci) * c->kh + a) * c->kw + bb];
                            }
                    y[((n * c->o + o) * oh + i) * ow + j] = s;
                }
}

/* Gradients of L = sum(y * r) by the same loops. */
static void naive_backward(double *dx, double *dw, double *db, const float *x, const float *w,
                           const float *r, const cfg *c) {
    int64_t oh = out_size(c->h, c->kh, c->stride, c->pad),
            ow = out_size(c->w, c->kw, c->stride, c->pad);
    for (int64_t n = 0; n < c->n; n++)
        for (int64_t o = 0; o < c->o; o++)
            for (int64_t i = 0; i < oh; i++)
                for (int64_t j = 0; j < ow; j++) {
                    double g = r[((n * c->o + o) * oh + i) * ow + j];
                    db[o] += g;
                    for (int64_t ci = 0; ci < c->c; ci++)
                        for (int64_t a = 0; a < c->kh; a++)
                            for (int64_t bb = 0; bb < c->kw; bb++) {
                                int64_t ih = i * c->stride - c->pad + a;
                                int64_t iw = j * c->stride - c->pad + bb;
                                if (ih < 0 || ih >= c->h || iw < 0 || iw >= c->w) continue;
                                int64_t xi = ((n * c->c + ci) * c->h + ih) * c->w + iw;
                                int64_t wi = ((o * c->c + ci) * c->kh + a) * c->kw + bb;
                                dx[xi] += g * w[wi];
                                dw[wi] += g * x[xi];
                            }
                }
}

static void assert_close_d(const float *got, const double *want, int64_t n, double tol,
                           const char *what) {
    float *wf = malloc((size_t)n * sizeof(float));
    assert_non_null(wf);
    for (int64_t i = 0; i < n; i++) wf[i] = (float)want[i];
    tu_assert_close(got, wf, n, tol, tol, what);
    free(wf);
}

static const cfg configs[] = {
    {2, 3, 8, 8, 4, 3, 3, 1, 1, true},  /* 3x3 s1 p1, the generator's conv */
    {2, 3, 8, 8, 5, 4, 4, 2, 1, true},  /* 4x4 s2 p1, the discriminator's */
    {2, 4, 7, 5, 3, 3, 3, 2, 0, false}, /* stride 2, no padding, odd non-square */
    {1, 5, 6, 4, 6, 1, 1, 1, 0, true},  /* 1x1: no columns needed */
    {3, 2, 5, 9, 2, 3, 5, 1, 2, false}, /* non-square kernel, padding 2 */
    {2, 2, 4, 4, 3, 4, 4, 3, 1, true},  /* stride 3 leaves input unread */
    {1, 3, 3, 3, 2, 3, 3, 1, 1, true},  /* output as small as the input */
    /* The conv runs samples in chunks that share one GEMM (about 256
     * output pixels per chunk): a chunk of two and a last chunk of one,
     * one sample per chunk, and 1x1 convs in one chunk. */
    {3, 2, 12, 12, 3, 3, 3, 1, 1, true},
    {2, 2, 48, 48, 3, 3, 3, 1, 1, false},
    {3, 4, 6, 6, 5, 1, 1, 1, 0, false},
    {3, 3, 64, 64, 2, 4, 4, 2, 1, true},
    /* Columns over CONV_TILE_MAX_FLOATS (2M) are built a tile of output
     * rows at a time: two tiles of 65 and 64 rows; and at stride 2, 64 and
     * 63 rows, where a tile's first row reads padding. */
    {2, 16, 129, 127, 3, 3, 3, 1, 1, true},
    {2, 16, 255, 200, 2, 4, 4, 2, 1, false},
    /* Output rows wider than im2col's bf16 stage (4096): at a stride each
     * row is gathered and rounded on its own. */
    {1, 2, 2, 8200, 2, 4, 4, 2, 1, true},
    /* 16 channels and more, as in a network's inner layers, where bf16
     * mixed precision and float32 use oneDNN's JIT convolutions: 3x3 s1
     * and 4x4 s2, and 4x4 s2 on an odd size with a bias. */
    {3, 16, 10, 9, 32, 3, 3, 1, 1, true},
    {2, 32, 12, 12, 16, 4, 4, 2, 1, false},
    {2, 16, 13, 11, 24, 4, 4, 2, 1, true},
    /* 3x3 stride 1 without padding (CycleGAN's and the inpaintors' convs
     * after an explicit reflect padding), and a map smaller than the
     * Winograd kernels' 4x4 output tile. */
    {2, 32, 16, 16, 32, 3, 3, 1, 0, true},
    {2, 16, 5, 5, 16, 3, 3, 1, 1, false},
};

/* Random x, w and (when c->bias) b for config c, all requiring gradients. */
static void conv_inputs(duet_rng *rng, const cfg *c, duet_tensor **x, duet_tensor **w,
                        duet_tensor **b) {
    *x = tu_randn(rng, 4, (int64_t[]){c->n, c->c, c->h, c->w}, 1.0f);
    *w = tu_randn(rng, 4, (int64_t[]){c->o, c->c, c->kh, c->kw}, 0.5f);
    *b = c->bias ? tu_randn(rng, 1, (int64_t[]){c->o}, 1.0f) : NULL;
    (*x)->requires_grad = (*w)->requires_grad = true;
    if (*b != NULL) (*b)->requires_grad = true;
}

/* ---- tests ----------------------------------------------------------------- */

/* The kernels on 2 threads with convolution path cp. */
static void set_conv_path(duet_conv_path cp, bool bf16) {
    duet_kernel_opts o = duet_kernel_opts_default();
    o.conv = cp;
    o.bf16 = bf16;
    o.num_threads = 2;
    TU_OK(duet_kernels_configure(&o));
}

/* Whether the kernels' float32 convolutions name oneDNN's JIT kernels, and
 * its Winograd ones. */
static bool impl_is_jit(const duet_kernels_info *ki) {
    return strncmp(ki->conv_impl, "jit", 3) == 0 || strncmp(ki->conv_impl, "brg", 3) == 0;
}

static bool impl_is_wino(const duet_kernels_info *ki) {
    return strncmp(ki->conv_impl, "jit_wino", 8) == 0;
}

/* ONEDNN: float32 convolutions on oneDNN's primitives where conv_onednn.c
 * takes them (16 input and output channels and more), which must then run
 * the forward and the backward; WINOGRAD: as ONEDNN, the 3x3 stride-1 ones
 * on the Winograd kernels where the CPU has them (the check's 16->16 3x3
 * named them), the weight gradient too; IM2COL: every conv on im2col +
 * SGEMM. The same 1e-4 against float64 on every path. */
static void f32_vs_direct(duet_conv_path path) {
    set_conv_path(path, false);
    duet_kernels_info ki;
    TU_OK(duet_kernels_info_get(&ki));
    const bool onednn = path != DUET_CONV_IM2COL;
    const bool jit = impl_is_jit(&ki), wino = impl_is_wino(&ki);
    if (path == DUET_CONV_WINOGRAD && jit) assert_true(wino || !duet_cpu_info_get().avx512f);
    duet_rng rng = duet_rng_make(11, 0);
    for (size_t k = 0; k < sizeof configs / sizeof configs[0]; k++) {
        const cfg *c = &configs[k];
        duet_tensor *x, *w, *b;
        conv_inputs(&rng, c, &x, &w, &b);
        const uint64_t runs = duet__conv_onednn_runs();
        const uint64_t wruns = duet__conv_onednn_winograd_runs();
        duet_tensor *y = NULL;
        TU_OK(duet_conv2d(x, w, b, c->stride, c->pad, &y));
        int64_t oh = out_size(c->h, c->kh, c->stride, c->pad),
                ow = out_size(c->w, c->kw, c->stride, c->pad);
        assert_int_equal(y->ndim, 4);
        assert_int_equal(y->shape[0], c->n);
        assert_int_equal(y->shape[1], c->o);
        assert_int_equal(y->shape[2], oh);
        assert_int_equal(y->shape[3], ow);
        double *want = calloc((size_t)y->numel, sizeof(double));
        naive_forward(want, x->data, w->data, b ? b->data : NULL, c);
        char what[64];
        snprintf(what, sizeof what, "config %zu forward", k);
        assert_close_d(y->data, want, y->numel, 1e-4, what);

        duet_tensor *r = tu_randn(&rng, 4, y->shape, 1.0f);
        tu_backprop_with(y, r->data);
        const uint64_t ran = duet__conv_onednn_runs() - runs;
        const bool wide = c->c >= 16 && c->o >= 16;
        if (onednn && wide && jit) assert_int_equal(ran, 2);
        else assert_int_equal(ran, 0);
        const bool wino_shape = wide && c->kh == 3 && c->kw == 3 && c->stride == 1;
        assert_int_equal(duet__conv_onednn_winograd_runs() - wruns,
                         path == DUET_CONV_WINOGRAD && wino && wino_shape ? 2 : 0);
        double *dx = calloc((size_t)x->numel, sizeof(double));
        double *dw = calloc((size_t)w->numel, sizeof(double));
        double *db = calloc((size_t)c->o, sizeof(double));
        naive_backward(dx, dw, db, x->data, w->data, r->data, c);
        snprintf(what, sizeof what, "config %zu dx", k);
        assert_close_d(x->grad, dx, x->numel, 1e-4, what);
        snprintf(what, sizeof what, "config %zu dw", k);
        assert_close_d(w->grad, dw, w->numel, 1e-4, what);
        if (b != NULL) {
            snprintf(what, sizeof what, "config %zu db", k);
            assert_close_d(b->grad, db, c->o, 1e-4, what);
        }
        free(want);
        free(dx);
        free(dw);
        free(db);
        duet_tensor_release(r);
        duet_tensor_release(y);
        duet_tensor_release(x);
        duet_tensor_release(w);
        duet_tensor_release(b);
    }
}

static void test_forward_backward_vs_direct(void **state) {
    (void)state;
    f32_vs_direct(DUET_CONV_ONEDNN);
}

static void test_winograd_forward_backward_vs_direct(void **state) {
    (void)state;
    f32_vs_direct(DUET_CONV_WINOGRAD);
}

static void test_im2col_forward_backward_vs_direct(void **state) {
    (void)state;
    f32_vs_direct(DUET_CONV_IM2COL);
}

static float *copy_floats(const float *src, int64_t n) {
    float *out = malloc((size_t)n * sizeof(float));
    assert_non_null(out);
    memcpy(out, src, (size_t)n * sizeof(float));
    return out;
}

/* y, dx, dw and db of one conv (x, w, b and the output gradient from seed),
 * copied out; the caller frees the four arrays. */
typedef struct conv_result {
    float *y, *dx, *dw, *db;
    int64_t ny, nx, nw, nb;
} conv_result;

static conv_result conv_run(const cfg *c, uint64_t seed) {
    duet_rng rng = duet_rng_make(seed, 0);
    duet_tensor *x, *w, *b;
    conv_inputs(&rng, c, &x, &w, &b);
    duet_tensor *y = NULL;
    TU_OK(duet_conv2d(x, w, b, c->stride, c->pad, &y));
    duet_tensor *r = tu_randn(&rng, 4, y->shape, 1.0f);
    tu_backprop_with(y, r->data);
    conv_result out = {.ny = y->numel, .nx = x->numel, .nw = w->numel, .nb = c->o};
    out.y = copy_floats(y->data, y->numel);
    out.dx = copy_floats(x->grad, x->numel);
    out.dw = copy_floats(w->grad, w->numel);
    out.db = copy_floats(b->grad, c->o);
    duet_tensor_release(r);
    duet_tensor_release(y);
    duet_tensor_release(x);
    duet_tensor_release(w);
    duet_tensor_release(b);
    return out;
}

static void conv_result_free(conv_result *r) {
    free(r->y);
    free(r->dx);
    free(r->dw);
    free(r->db);
}

/* oneDNN's calls run on chunks of samples (conv_onednn.c): 5 samples in
 * chunks of 3 and 2 (two shapes), and in 5 chunks of 1, give what the
 * whole batch in one call gives: y and dx sample by sample (1e-6), dw and
 * db summed over the chunks (1e-5 relative; 1e-4 absolute on dw's entries,
 * up to about 20: the Winograd kernels' dW sums in another order by
 * chunk, 5e-5 apart at most), on each oneDNN path (bf16 where the
 * CPU has it). A chunk whose offset or count is wrong moves whole samples. */
static void test_onednn_sample_chunks(void **state) {
    (void)state;
    const cfg c = {5, 16, 10, 9, 32, 3, 3, 1, 1, true};
    const int64_t per = (int64_t)sizeof(float) * (16 * 10 * 9 + 32 * 10 * 9);
    const duet_cpu_info ci = duet_cpu_info_get();
    const struct {
        duet_conv_path path;
        bool bf16;
    } runs[] = {{DUET_CONV_ONEDNN, false}, {DUET_CONV_WINOGRAD, false}, {DUET_CONV_AUTO, true}};
    for (size_t k = 0; k < sizeof runs / sizeof runs[0]; k++) {
        if (runs[k].bf16 && !ci.avx512_bf16 && !ci.amx_bf16) continue;
        set_conv_path(runs[k].path, runs[k].bf16);
        const int64_t old = duet__conv_onednn_chunk_bytes((int64_t)1 << 40);
        const uint64_t before = duet__conv_onednn_runs();
        conv_result whole = conv_run(&c, 21);
        /* Not vacuous: where oneDNN has the kernels, they ran. */
        duet_kernels_info ki;
        TU_OK(duet_kernels_info_get(&ki));
        const char *impl = runs[k].bf16 ? ki.bf16_conv_impl : ki.conv_impl;
        if (strncmp(impl, "jit", 3) == 0 || strncmp(impl, "brg", 3) == 0)
            assert_int_equal(duet__conv_onednn_runs() - before, 2);
        const int64_t chunk[2] = {3 * per, 1};
        for (int j = 0; j < 2; j++) {
            duet__conv_onednn_chunk_bytes(chunk[j]);
            conv_result part = conv_run(&c, 21);
            char what[64];
            snprintf(what, sizeof what, "path %zu chunks %d y", k, j);
            tu_assert_close(part.y, whole.y, whole.ny, 1e-6, 1e-6, what);
            snprintf(what, sizeof what, "path %zu chunks %d dx", k, j);
            tu_assert_close(part.dx, whole.dx, whole.nx, 1e-6, 1e-6, what);
            snprintf(what, sizeof what, "path %zu chunks %d dw", k, j);
            tu_assert_close(part.dw, whole.dw, whole.nw, 1e-5, 1e-4, what);
            snprintf(what, sizeof what, "path %zu chunks %d db", k, j);
            tu_assert_close(part.db, whole.db, whole.nb, 1e-5, 1e-5, what);
            conv_result_free(&part);
        }
        duet__conv_onednn_chunk_bytes(old);
        conv_result_free(&whole);
    }
}

/* x rounded to bf16 (round to nearest even), as a new float array. */
static float *rounded(const float *x, int64_t n) {
    uint16_t *h = malloc((size_t)n * sizeof(uint16_t));
    float *r = malloc((size_t)n * sizeof(float));
    assert_non_null(h);
    assert_non_null(r);
    duet_f32_to_bf16(h, x, (size_t)n);
    duet_bf16_to_f32(r, h, (size_t)n);
    free(h);
    return r;
}

/* In bf16 mixed precision (where the CPU has it), on 2 threads: y is the
 * direct convolution of the bf16-rounded x and w; dx that of the rounded
 * dY and w; dw that of the rounded dY and x; db the float32 sum of the
 * unrounded dY. Every product sums in float32, so 1e-4 holds; the float32
 * convolution of the unrounded inputs is visibly further away. Two passes
 * through the same tensors: the gradients must be twice one pass's (the op
 * adds into dx, dw and db).
 *
 * onednn: through oneDNN's bf16 convolution primitives where it has JIT
 * kernels, which it must for 16 input channels and more (fewer channels
 * and odd strides go to conv.c's path). Otherwise through conv.c's
 * columns written in bf16 by im2col, for every kernel, stride and padding
 * above, the chunks of several samples and the row tiles. */
static void bf16_vs_direct(bool onednn) {
    tu_bf16_or_skip(2);
    duet__conv_onednn_enable(onednn);
    duet_rng rng = duet_rng_make(12, 0);
    double worst_unrounded = 0.0;
    for (size_t k = 0; k < sizeof configs / sizeof configs[0]; k++) {
        const cfg *c = &configs[k];
        duet_tensor *x, *w, *b;
        conv_inputs(&rng, c, &x, &w, &b);
        const uint64_t runs = duet__conv_onednn_runs();
        duet_tensor *y = NULL;
        TU_OK(duet_conv2d(x, w, b, c->stride, c->pad, &y));
        float *xr = rounded(x->data, x->numel), *wr = rounded(w->data, w->numel);
        double *want = calloc((size_t)y->numel, sizeof(double));
        naive_forward(want, xr, wr, b ? b->data : NULL, c);
        char what[64];
        snprintf(what, sizeof what, "bf16 config %zu forward", k);
        assert_close_d(y->data, want, y->numel, 1e-4, what);
        double *plain = calloc((size_t)y->numel, sizeof(double));
        naive_forward(plain, x->data, w->data, b ? b->data : NULL, c);
        for (int64_t i = 0; i < y->numel; i++)
            worst_unrounded = fmax(worst_unrounded, fabs(y->data[i] - plain[i]));

        duet_tensor *r = tu_randn(&rng, 4, y->shape, 1.0f);
        float *rr = rounded(r->data, r->numel);
        tu_backprop_with(y, r->data);
        duet_tensor_release(y);
        TU_OK(duet_conv2d(x, w, b, c->stride, c->pad, &y));
        tu_backprop_with(y, r->data);
        const uint64_t ran = duet__conv_onednn_runs() - runs;
        if (!onednn) assert_int_equal(ran, 0);
        else if (ran != 0 || c->c >= 16) assert_int_equal(ran, 4); /* 2 forwards, 2 backwards */
        double *dx = calloc((size_t)x->numel, sizeof(double));
        double *dw = calloc((size_t)w->numel, sizeof(double));
        double *db = calloc((size_t)c->o, sizeof(double));
        double *db_r = calloc((size_t)c->o, sizeof(double));
        naive_backward(dx, dw, db_r, xr, wr, rr, c);
        for (int64_t i = 0; i < x->numel; i++) dx[i] *= 2.0;
        for (int64_t i = 0; i < w->numel; i++) dw[i] *= 2.0;
        snprintf(what, sizeof what, "bf16 config %zu dx, two passes", k);
        assert_close_d(x->grad, dx, x->numel, 2e-4, what);
        snprintf(what, sizeof what, "bf16 config %zu dw, two passes", k);
        assert_close_d(w->grad, dw, w->numel, 2e-4, what);
        if (b != NULL) {
            memset(dx, 0, (size_t)x->numel * sizeof(double));
            memset(dw, 0, (size_t)w->numel * sizeof(double));
            naive_backward(dx, dw, db, x->data, w->data, r->data, c);
            for (int64_t o = 0; o < c->o; o++) db[o] *= 2.0;
            snprintf(what, sizeof what, "bf16 config %zu db, two passes", k);
            assert_close_d(b->grad, db, c->o, 2e-4, what);
        }
        free(xr), free(wr), free(rr), free(want), free(plain);
        free(dx), free(dw), free(db), free(db_r);
        duet_tensor_release(r);
        duet_tensor_release(y);
        duet_tensor_release(x);
        duet_tensor_release(w);
        duet_tensor_release(b);
    }
    assert_true(worst_unrounded > 1e-2); /* bf16 did run */
}

static void test_bf16_onednn_vs_direct_on_rounded_inputs(void **state) {
    (void)state;
    bf16_vs_direct(true);
}

static void test_bf16_im2col_vs_direct_on_rounded_inputs(void **state) {
    (void)state;
    bf16_vs_direct(false);
}

/* oneDNN's bf16 backward with only one of dx and dw wanted (a frozen
 * network's weights, or an image input): the one computed equals that of
 * the backward that computes both, and the other stays absent. */
static void test_bf16_onednn_one_gradient(void **state) {
    (void)state;
    tu_bf16_or_skip(2);
    const cfg c = {2, 16, 10, 9, 32, 3, 3, 1, 1, true};
    duet_rng rng = duet_rng_make(14, 0);
    duet_tensor *x, *w, *b;
    conv_inputs(&rng, &c, &x, &w, &b);
    duet_tensor *y = NULL;
    TU_OK(duet_conv2d(x, w, b, c.stride, c.pad, &y));
    duet_tensor *r = tu_randn(&rng, 4, y->shape, 1.0f);
    tu_backprop_with(y, r->data);
    duet_tensor_release(y);
    float *dx = malloc((size_t)x->numel * sizeof(float));
    float *dw = malloc((size_t)w->numel * sizeof(float));
    memcpy(dx, x->grad, (size_t)x->numel * sizeof(float));
    memcpy(dw, w->grad, (size_t)w->numel * sizeof(float));
    for (int only_dx = 0; only_dx < 2; only_dx++) {
        duet_tensor *x1 = tu_randn(&rng, 4, x->shape, 1.0f);
        duet_tensor *w1 = tu_randn(&rng, 4, w->shape, 1.0f);
        memcpy(x1->data, x->data, (size_t)x->numel * sizeof(float));
        memcpy(w1->data, w->data, (size_t)w->numel * sizeof(float));
        x1->requires_grad = only_dx;
        w1->requires_grad = !only_dx;
        const uint64_t runs = duet__conv_onednn_runs();
        TU_OK(duet_conv2d(x1, w1, b, c.stride, c.pad, &y));
        tu_backprop_with(y, r->data);
        duet_tensor_release(y);
        assert_int_equal(duet__conv_onednn_runs() - runs, 2);
        if (only_dx) {
            assert_null(w1->grad);
            assert_memory_equal(x1->grad, dx, (size_t)x->numel * sizeof(float));
        } else {
            assert_null(x1->grad);
            assert_memory_equal(w1->grad, dw, (size_t)w->numel * sizeof(float));
        }
        duet_tensor_release(x1);
        duet_tensor_release(w1);
    }
    free(dx);
    free(dw);
    duet_tensor_release(r);
    duet_tensor_release(x);
    duet_tensor_release(w);
    duet_tensor_release(b);
}

/* Back to float32 on the default threads, oneDNN's convs allowed. */
static int kernels_teardown(void **state) {
    duet__conv_onednn_enable(true);
    return tu_kernels_default(state);
}

/* Which path each conv path setting takes: AUTO keeps float32 on im2col
 * without DUET_CONV (and says so in the kernels info), ONEDNN moves it to oneDNN's JIT
 * convolutions, WINOGRAD to the Winograd ones (all three passes), IM2COL keeps bf16 mixed precision on im2col's bf16 columns
 * too; a weight-only backward (dx not wanted) in float32 is all GEMM. */
static void test_conv_path_setting(void **state) {
    (void)state;
    const cfg c = {2, 16, 10, 9, 32, 3, 3, 1, 1, true};
    const duet_conv_path paths[] = {DUET_CONV_AUTO, DUET_CONV_ONEDNN, DUET_CONV_IM2COL,
                                    DUET_CONV_WINOGRAD};
    unsetenv("DUET_CONV"); /* AUTO reads it: the default is what is tested */
    const duet_cpu_info ci = duet_cpu_info_get();
    const bool has_bf16 = ci.avx512_bf16 || ci.amx_bf16;
    for (int bf16 = 0; bf16 < 2; bf16++)
        for (size_t p = 0; p < 4; p++)
            for (int want_dx = 0; want_dx < 2; want_dx++) {
                if (bf16 && !has_bf16) continue;
                set_conv_path(paths[p], bf16);
                duet_kernels_info ki;
                TU_OK(duet_kernels_info_get(&ki));
                const bool jit = impl_is_jit(&ki), wino = impl_is_wino(&ki);
                const bool f32_onednn =
                    paths[p] == DUET_CONV_ONEDNN || paths[p] == DUET_CONV_WINOGRAD;
                if (!f32_onednn) {
                    assert_string_equal(ki.conv_impl, "im2col + sgemm");
                    assert_int_equal(ki.conv, DUET_CONV_IM2COL);
                } else {
                    assert_int_equal(ki.conv, paths[p]);
                    if (paths[p] == DUET_CONV_ONEDNN) assert_false(wino);
                }
                assert_non_null(strstr(ki.summary, ki.conv_impl));
                duet_rng rng = duet_rng_make(15, 0);
                duet_tensor *x, *w, *b;
                conv_inputs(&rng, &c, &x, &w, &b);
                x->requires_grad = want_dx;
                const uint64_t runs = duet__conv_onednn_runs();
                duet_tensor *y = NULL;
                TU_OK(duet_conv2d(x, w, b, c.stride, c.pad, &y));
                duet_tensor *r = tu_randn(&rng, 4, y->shape, 1.0f);
                tu_backprop_with(y, r->data);
                /* In float32 a weight-only backward is oneDNN's on the
                 * Winograd kernels only. */
                int want;
                if (bf16) want = paths[p] == DUET_CONV_IM2COL ? 0 : 2;
                else if (!f32_onednn || !jit) want = 0;
                else want = wino ? 2 : 1 + want_dx;
                assert_int_equal(duet__conv_onednn_runs() - runs, want);
                duet_tensor_release(r);
                duet_tensor_release(y);
                duet_tensor_release(x);
                duet_tensor_release(w);
                duet_tensor_release(b);
            }
}

/* An unknown name for the conv path is refused with the four names. */
static void test_conv_path_parse(void **state) {
    (void)state;
    duet_conv_path cp;
    TU_OK(duet_conv_path_parse("onednn", &cp));
    assert_int_equal(cp, DUET_CONV_ONEDNN);
    TU_OK(duet_conv_path_parse("winograd", &cp));
    assert_int_equal(cp, DUET_CONV_WINOGRAD);
    assert_string_equal(duet_conv_path_name(DUET_CONV_WINOGRAD), "winograd");
    assert_int_equal(duet_conv_path_parse("direct", &cp), DUET_EINVAL);
    assert_non_null(strstr(duet_last_error(), "auto, onednn, im2col or winograd"));
}

typedef struct conv_args {
    int stride, pad;
} conv_args;

static int conv_op(void *ctx, duet_tensor *const *in, duet_tensor **out) {
    const conv_args *a = ctx;
    return duet_conv2d(in[0], in[1], in[2], a->stride, a->pad, out);
}

static void gradcheck_conv(int64_t n, int64_t c, int64_t h, int64_t o, int64_t k, int stride,
                           int pad, bool bias, uint64_t seed) {
    duet_rng rng = duet_rng_make(seed, 1);
    duet_tensor *x = tu_randn(&rng, 4, (int64_t[]){n, c, h, h}, 1.0f);
    duet_tensor *w = tu_randn(&rng, 4, (int64_t[]){o, c, k, k}, 0.5f);
    duet_tensor *b = bias ? tu_randn(&rng, 1, (int64_t[]){o}, 1.0f) : NULL;
    x->requires_grad = w->requires_grad = true;
    if (b != NULL) b->requires_grad = true;
    conv_args a = {stride, pad};
    duet_tensor *in[3] = {x, w, b};
    tu_gradcheck(conv_op, &a, 3, in, 1e-2, 1e-2, 2e-3, 64);
    duet_tensor_release(x);
    duet_tensor_release(w);
    duet_tensor_release(b);
}

static void test_gradcheck_3x3_s1_p1(void **state) {
    (void)state;
    gradcheck_conv(2, 3, 6, 4, 3, 1, 1, true, 1);
}

static void test_gradcheck_4x4_s2_p1(void **state) {
    (void)state;
    gradcheck_conv(2, 3, 8, 4, 4, 2, 1, true, 2);
}

static void test_gradcheck_no_bias_p0(void **state) {
    (void)state;
    gradcheck_conv(2, 2, 7, 3, 3, 1, 0, false, 3);
    gradcheck_conv(1, 3, 8, 2, 4, 2, 0, false, 4);
}

static void test_gradcheck_1x1(void **state) {
    (void)state;
    gradcheck_conv(2, 4, 3, 5, 1, 1, 0, true, 5);
}

/* Backward adds to existing gradients, and an input that needs no gradient
 * gets none (the first conv on data computes no dX). */
static void test_accumulate_and_skip(void **state) {
    (void)state;
    duet_rng rng = duet_rng_make(21, 0);
    duet_tensor *x = tu_randn(&rng, 4, (int64_t[]){2, 3, 6, 6}, 1.0f);
    duet_tensor *w = tu_randn(&rng, 4, (int64_t[]){4, 3, 3, 3}, 0.5f);
    duet_tensor *b = tu_randn(&rng, 1, (int64_t[]){4}, 1.0f);
    w->requires_grad = b->requires_grad = true;
    duet_tensor *y = NULL;
    TU_OK(duet_conv2d(x, w, b, 1, 1, &y));
    duet_tensor *r = tu_randn(&rng, 4, y->shape, 1.0f);
    tu_backprop_with(y, r->data);
    duet_tensor_release(y);
    assert_null(x->grad);
    float *w1 = malloc((size_t)w->numel * sizeof(float)), *b1 = malloc(4 * sizeof(float));
    memcpy(w1, w->grad, (size_t)w->numel * sizeof(float));
    memcpy(b1, b->grad, 4 * sizeof(float));
    TU_OK(duet_conv2d(x, w, b, 1, 1, &y));
    tu_backprop_with(y, r->data);
    duet_tensor_release(y);
    for (int64_t i = 0; i < w->numel; i++) w1[i] *= 2.0f;
    for (int i = 0; i < 4; i++) b1[i] *= 2.0f;
    tu_assert_close(w->grad, w1, w->numel, 1e-5, 1e-5, "dw after two passes");
    tu_assert_close(b->grad, b1, 4, 1e-5, 1e-5, "db after two passes");
    free(w1);
    free(b1);
    duet_tensor_release(r);
    duet_tensor_release(x);
    duet_tensor_release(w);
    duet_tensor_release(b);
}

/* Without grad mode or inputs that require grad nothing is recorded. */
static void test_no_record(void **state) {
    (void)state;
    duet_rng rng = duet_rng_make(22, 0);
    duet_tensor *x = tu_randn(&rng, 4, (int64_t[]){1, 2, 5, 5}, 1.0f);
    duet_tensor *w = tu_randn(&rng, 4, (int64_t[]){3, 2, 3, 3}, 1.0f);
    duet_tensor *y = NULL;
    size_t before = duet_tape_size();
    TU_OK(duet_conv2d(x, w, NULL, 1, 1, &y));
    assert_int_equal(duet_tape_size(), before);
    assert_false(y->requires_grad);
    duet_tensor_release(y);
    w->requires_grad = true;
    bool prev = duet_set_grad_enabled(false);
    TU_OK(duet_conv2d(x, w, NULL, 1, 1, &y));
    duet_set_grad_enabled(prev);
    assert_int_equal(duet_tape_size(), before);
    duet_tensor_release(y);
    TU_OK(duet_conv2d(x, w, NULL, 1, 1, &y));
    assert_int_equal(duet_tape_size(), before + 1);
    assert_true(y->requires_grad);
    duet_tensor_release(y);
    duet_tape_clear();
    duet_tensor_release(x);
    duet_tensor_release(w);
}

static void expect_shape_error(duet_tensor *x, duet_tensor *w, duet_tensor *b, int s, int p,
                               const char *shape1, const char *shape2) {
    duet_tensor *y = (duet_tensor *)(uintptr_t)1;
    int rc = duet_conv2d(x, w, b, s, p, &y);
    assert_null(y);
    tu_expect_error(rc, DUET_ESHAPE, "conv2d", shape1, shape2, NULL);
}

static void test_shape_errors(void **state) {
    (void)state;
    duet_tensor *x = tu_zeros(4, (int64_t[]){2, 3, 8, 8});
    duet_tensor *w = tu_zeros(4, (int64_t[]){4, 5, 3, 3});
    duet_tensor *w3 = tu_zeros(4, (int64_t[]){4, 3, 3, 3});
    duet_tensor *big = tu_zeros(4, (int64_t[]){4, 3, 11, 11});
    duet_tensor *b = tu_zeros(1, (int64_t[]){5});
    duet_tensor *x2 = tu_zeros(2, (int64_t[]){2, 3});
    expect_shape_error(x, w, NULL, 1, 1, "[2, 3, 8, 8]", "[4, 5, 3, 3]");
    expect_shape_error(x, w3, b, 1, 1, "[5]", "[4, 3, 3, 3]");
    expect_shape_error(x, big, NULL, 1, 1, "[2, 3, 8, 8]", "[4, 3, 11, 11]");
    expect_shape_error(x2, w3, NULL, 1, 1, "[2, 3]", "[4, 3, 3, 3]");
    duet_tensor *y = NULL;
    assert_int_equal(duet_conv2d(x, w3, NULL, 0, 1, &y), DUET_EINVAL);
    assert_int_equal(duet_conv2d(x, w3, NULL, 1, -1, &y), DUET_EINVAL);
    assert_null(y);
    duet_tensor_release(x);
    duet_tensor_release(w);
    duet_tensor_release(w3);
    duet_tensor_release(big);
    duet_tensor_release(b);
    duet_tensor_release(x2);
}

/* The im2col scratch is per thread: a conv on another thread gives the same
 * result, and that thread's scratch is freed when it exits (ASan checks). */
typedef struct thread_job {
    duet_tensor *x, *w, *y;
    int rc;
} thread_job;

static void *thread_conv(void *p) {
    thread_job *j = p;
    j->rc = duet_conv2d(j->x, j->w, NULL, 2, 1, &j->y);
    return NULL;
}

static void test_other_thread(void **state) {
    (void)state;
    duet_rng rng = duet_rng_make(23, 0);
    thread_job j = {tu_randn(&rng, 4, (int64_t[]){2, 3, 9, 9}, 1.0f),
                    tu_randn(&rng, 4, (int64_t[]){4, 3, 4, 4}, 1.0f), NULL, -1};
    duet_tensor *y = NULL;
    TU_OK(duet_conv2d(j.x, j.w, NULL, 2, 1, &y));
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, thread_conv, &j), 0);
    assert_int_equal(pthread_join(th, NULL), 0);
    TU_OK(j.rc);
    tu_assert_close(j.y->data, y->data, y->numel, 0, 0, "conv on another thread");
    duet_tensor_release(j.y);
    duet_tensor_release(y);
    duet_tensor_release(j.x);
    duet_tensor_release(j.w);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_forward_backward_vs_direct, kernels_teardown),
        cmocka_unit_test_teardown(test_winograd_forward_backward_vs_direct, kernels_teardown),
        cmocka_unit_test_teardown(test_im2col_forward_backward_vs_direct, kernels_teardown),
        cmocka_unit_test_teardown(test_onednn_sample_chunks, kernels_teardown),
        cmocka_unit_test_teardown(test_conv_path_setting, kernels_teardown),
        cmocka_unit_test(test_conv_path_parse),
        cmocka_unit_test_teardown(test_bf16_onednn_vs_direct_on_rounded_inputs, kernels_teardown),
        cmocka_unit_test_teardown(test_bf16_im2col_vs_direct_on_rounded_inputs, kernels_teardown),
        cmocka_unit_test_teardown(test_bf16_onednn_one_gradient, kernels_teardown),
        cmocka_unit_test(test_gradcheck_3x3_s1_p1),
        cmocka_unit_test(test_gradcheck_4x4_s2_p1),
        cmocka_unit_test(test_gradcheck_no_bias_p0),
        cmocka_unit_test(test_gradcheck_1x1),
        cmocka_unit_test(test_accumulate_and_skip),
        cmocka_unit_test(test_no_record),
        cmocka_unit_test(test_shape_errors),
        cmocka_unit_test(test_other_thread),
    };
    return tu_exit(cmocka_run_group_tests_name("ops_conv", tests, NULL, NULL));
}
