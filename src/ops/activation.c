/* Activations: relu, leaky_relu, sigmoid, tanh (PyTorch semantics).
 *
 * relu and leaky_relu keep for backward a bit mask of x > 0 (as PyTorch's
 * mask; the gradient at exactly 0 is the negative side's), one bit per
 * element instead of the input's 32: neither their input nor their output
 * need stay alive for them (duet_autograd_release can free both when the
 * next op does not read them, e.g. a frozen convolution). sigmoid and tanh
 * use the saved output, as PyTorch does. The per-element math is
 * ops_math.h's, shared with the CUDA kernels. */
#include "ops/ops_internal.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

/* ---- kernels ---------------------------------------------------------------- */

/* expm1(x) for x <= 0 (ELU's negative side) in operations a compiler can
 * vectorise, where libm's expm1f is a call per element (9% of a DeepFillv1
 * step went there). x = k ln2 + r with |r| <= ln2 / 2 (k by the 1.5 * 2^23
 * rounding trick, ln2 in two parts so that k * LN2_HI is exact), expm1(r)
 * by its Taylor series to r^8 (the first term left out is below 2^-31 of
 * |r|), then expm1(x) = 2^k expm1(r) + (2^k - 1), where 2^k - 1 is exact
 * for the k that matter and no cancellation happens for k = 0. Below -30
 * the result is -1 in float anyway (the caller passes no NaN). Within 2 ulp of the
 * double-precision expm1 on every float in [-30, 0] (test_ops_layers).
 * Compiled with -std=c11, so no FMA contraction: every clone below gives
 * the same bits. */
static inline float expm1_nonpositive(float x) {
    const float LOG2E = 1.44269504088896341f, LN2_HI = 0.693145751953125f,
                LN2_LO = 1.42860682030941723e-6f, ROUND = 12582912.0f; /* 1.5 * 2^23 */
    x = x < -30.0f ? -30.0f : x;
    const float kf = (x * LOG2E + ROUND) - ROUND;
    const float r = (x - kf * LN2_HI) - kf * LN2_LO;
    float p = 1.0f / 40320.0f;
    p = p * r + 1.0f / 5040.0f;
    p = p * r + 1.0f / 720.0f;
    p = p * r + 1.0f / 120.0f;
    p = p * r + 1.0f / 24.0f;
    p = p * r + 1.0f / 6.0f;
    p = p * r + 0.5f;
    p = p * r + 1.0f;
    p = p * r;
    const int32_t bits = ((int32_t)kf + 127) * (1 << 23);
    float scale;
    memcpy(&scale, &bits, sizeof scale);
    return scale * p + (scale - 1.0f);
}

/* out = elu(x): x where x > 0, alpha * expm1(x) elsewhere; also compiled
 * for AVX2 and AVX-512, picked at load time. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
__attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#endif
static void elu_range(float *out, const float *x, float alpha, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        const float v = x[i];
        const float e = alpha * expm1_nonpositive(v < 0.0f ? v : 0.0f);
        /* -0 and NaN: alpha * v is alpha * expm1(v) */
        out[i] = v > 0.0f ? v : v < 0.0f ? e : alpha * v;
    }
}

static void elu_forward(float *out, const float *x, float alpha, int64_t n) {
    const int64_t chunk = 4096, chunks = (n + chunk - 1) / chunk;
#pragma omp parallel for num_threads(duet__par_threads(n)) schedule(static)
    for (int64_t c = 0; c < chunks; c++) {
        const int64_t base = c * chunk, len = n - base < chunk ? n - base : chunk;
        elu_range(out + base, x + base, alpha, len);
    }
}

/* The mask word of x[0, len), len <= 64: bit j is x[j] > 0 (false for
 * NaN). */
static uint64_t positive_word(const float *x, int64_t len) {
    uint64_t m = 0;
    for (int64_t j = 0; j < len; j++)
        m |= (uint64_t)(x[j] > 0.0f) << j;
    return m;
}

/* Elements per chunk a thread takes in the rectifiers: whole mask words. */
#define RECTIFY_CHUNK 4096

/* rectify_kernel on whole words: out[0, 64 * words) and bits[0, words). Each
 * word goes as two halves of 32 elements, copied to the stack first (out
 * may be x): a 32-bit mask and a select per element are loops the compiler
 * turns into vector compares and blends, where a 64-bit mask built one
 * shift at a time stayed scalar (the tiny SRGAN's activations took 4.9% of
 * its step against PyTorch's 1.7%). Bit j of a word is element j, as in
 * positive_word: the low half's mask is the word's low 32 bits. Also
 * compiled for AVX2 and AVX-512, picked at load time. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
__attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#endif
static void rectify_words(float *out, const float *x, uint64_t *bits, float slope, bool is_relu,
                          int64_t words) {
    for (int64_t w = 0; w < words; w++) {
        uint64_t m = 0;
        for (int h = 0; h < 2; h++) {
            const int64_t base = w * 64 + h * 32;
            float t[32];
            memcpy(t, x + base, sizeof t);
            uint32_t mh = 0;
            for (int j = 0; j < 32; j++) mh |= (uint32_t)(t[j] > 0.0f) << j;
            m |= (uint64_t)mh << (32 * h);
            if (is_relu) {
                for (int j = 0; j < 32; j++) out[base + j] = duet__relu(t[j]);
            } else {
                for (int j = 0; j < 32; j++) out[base + j] = duet__leaky_relu(t[j], slope);
            }
        }
        if (bits != NULL) bits[w] = m;
    }
}

/* out = relu(x) (is_relu) or leaky_relu(x, slope), and, when bits is not
 * NULL, the mask bits[w] = positive_word(x + 64w) in the same pass; out may
 * be x (the mask word is read before its elements are overwritten).
 * Threads take whole chunks of words. */
static void rectify_kernel(float *out, const float *x, uint64_t *bits, float slope, bool is_relu,
                           int64_t n) {
    const int64_t full = n / 64, chunks = (full * 64 + RECTIFY_CHUNK - 1) / RECTIFY_CHUNK;
#pragma omp parallel for num_threads(duet__par_threads(n)) schedule(static)
    for (int64_t c = 0; c < chunks; c++) {
        const int64_t w0 = c * (RECTIFY_CHUNK / 64);
        const int64_t nw = full - w0 < RECTIFY_CHUNK / 64 ? full - w0 : RECTIFY_CHUNK / 64;
        rectify_words(out + w0 * 64, x + w0 * 64, bits != NULL ? bits + w0 : NULL, slope,
                      is_relu, nw);
    }
    /* The last, partial word. */
    const int64_t base = full * 64, len = n - base;
    if (len == 0) return;
    if (bits != NULL) bits[full] = positive_word(x + base, len);
    for (int64_t j = 0; j < len; j++)
        out[base + j] = is_relu ? duet__relu(x[base + j]) : duet__leaky_relu(x[base + j], slope);
}

/* masked_backward on whole words, in halves of 32 as rectify_words (gx
 * and gout are different tensors' gradients; no restrict all the same: the
 * compiler versions the loop on their overlap). */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
__attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#endif
static void masked_backward_words(float *gx, const float *gout,
                                  const uint64_t *bits, float slope, int64_t words) {
    for (int64_t w = 0; w < words; w++) {
        for (int h = 0; h < 2; h++) {
            const uint32_t mh = (uint32_t)(bits[w] >> (32 * h));
            const int64_t base = w * 64 + h * 32;
            for (int j = 0; j < 32; j++)
                gx[base + j] += duet__leaky_relu_grad(gout[base + j], (mh >> j) & 1u, slope);
        }
    }
}

/* gx += mask ? gout : slope * gout (relu: slope 0, which adds +0 where
 * masked off, as the float-mask version did) */
static void masked_backward(float *gx, const float *gout, const uint64_t *bits, float slope,
                            int64_t n) {
    const int64_t full = n / 64, chunks = (full * 64 + RECTIFY_CHUNK - 1) / RECTIFY_CHUNK;
#pragma omp parallel for num_threads(duet__par_threads(n)) schedule(static)
    for (int64_t c = 0; c < chunks; c++) {
        const int64_t w0 = c * (RECTIFY_CHUNK / 64);
        const int64_t nw = full - w0 < RECTIFY_CHUNK / 64 ? full - w0 : RECTIFY_CHUNK / 64;
        masked_backward_words(gx + w0 * 64, gout + w0 * 64, bits + w0, slope, nw);
    }
    const int64_t base = full * 64, len = n - base;
    for (int64_t j = 0; j < len; j++)
        gx[base + j] += duet__leaky_relu_grad(gout[base + j], (bits[full] >> j) & 1u, slope);
}

/* out = 1 / (1 + exp(-x)), without overflow for large |x|. */
static void sigmoid_forward(float *out, const float *x, int64_t n) {
    for (int64_t i = 0; i < n; i++) out[i] = duet__sigmoid(x[i]);
}

/* gx += gout * y * (1 - y), y the saved output */
static void sigmoid_backward(float *gx, const float *gout, const float *y, int64_t n) {
    for (int64_t i = 0; i < n; i++) gx[i] += duet__sigmoid_grad(gout[i], y[i]);
}

static void tanh_forward(float *out, const float *x, int64_t n) {
    for (int64_t i = 0; i < n; i++) out[i] = duet__tanh(x[i]);
}

/* gx += gout * (1 - y^2), y the saved output */
static void tanh_backward(float *gx, const float *gout, const float *y, int64_t n) {
    for (int64_t i = 0; i < n; i++) gx[i] += duet__tanh_grad(gout[i], y[i]);
}

/* ---- relu, leaky_relu -------------------------------------------------------------- */

/* relu (is_relu, slope 0) and leaky_relu; saved buffer 0: the mask, one bit
 * per element (positive_word of each 64), when recorded. */
typedef struct rectify_params {
    float slope;
    bool is_relu;
} rectify_params;

static int rectify_check(int nin, duet_tensor *const *in, void *params, bool record,
                         duet_device dev, duet__op_plan *plan) {
    (void)nin, (void)params, (void)dev;
    duet__op_plan_like(plan, in[0]);
    if (record) plan->saved_bytes[0] = (size_t)((in[0]->numel + 63) / 64) * sizeof(uint64_t);
    return DUET_OK;
}

/* out may be in[0] (in place). */
static int rectify_k(const duet__op_args *a) {
    const rectify_params *p = a->params;
    rectify_kernel(a->out->data, a->in[0]->data, a->saved[0], p->slope, p->is_relu,
                   a->out->numel);
    return DUET_OK;
}

static int rectify_backward_k(const duet__op_args *a) {
    const rectify_params *p = a->params;
    masked_backward(a->gin[0], a->gout, a->saved[0], p->is_relu ? 0.0f : p->slope,
                    a->out->numel);
    return DUET_OK;
}

/* relu_backward (gy, x) -> gy * m, m from the rectifier's mask (1 where x >
 * 0, else slope), copied from its node into saved buffer 0: the recorded
 * form of relu's and leaky_relu's backward. Its derivative in gy is m; in
 * x it is zero, and x is an input all the same, as in PyTorch's
 * threshold_backward and leaky_relu_backward: a backward through the
 * gradient reaches what made x (a Linear's bias before the activation) and
 * gives it a zero gradient rather than none. A DDP counts on that:
 * WGAN-GP's penalty backpropagated on its own through a discriminator
 * ending in Linear + LeakyReLU (DeepFillv1) would otherwise leave the bias
 * unready and the reduction unfinished. */
typedef struct relu_backward_params {
    float slope;
    const void *bits; /* the rectifier's saved mask on the device (check only) */
} relu_backward_params;

static int relu_backward_check(int nin, duet_tensor *const *in, void *params, bool record,
                               duet_device dev, duet__op_plan *plan) {
    (void)nin, (void)record, (void)dev;
    const relu_backward_params *p = params;
    DUET_TRY(duet__op_check_same_shape("relu_backward", in[0], in[1]));
    duet__op_plan_like(plan, in[0]);
    plan->saved_bytes[0] = (size_t)((in[0]->numel + 63) / 64) * sizeof(uint64_t);
    plan->saved_from[0] = p->bits;
    plan->saved_on_device[0] = true;
    return DUET_OK;
}

static inline float mask_factor(const uint64_t *bits, int64_t i, float slope) {
    return (bits[i / 64] >> (i % 64)) & 1u ? 1.0f : slope;
}

static int relu_backward_k(const duet__op_args *a) {
    const float slope = ((const relu_backward_params *)a->params)->slope;
    const uint64_t *bits = a->saved[0];
    const float *gy = a->in[0]->data;
    float *g = a->out->data;
    for (int64_t i = 0; i < a->out->numel; i++) g[i] = gy[i] * mask_factor(bits, i, slope);
    return DUET_OK;
}

static int relu_backward_backward_k(const duet__op_args *a) {
    const float slope = ((const relu_backward_params *)a->params)->slope;
    const uint64_t *bits = a->saved[0];
    float *ggy = a->gin[0];
    if (ggy != NULL)
        for (int64_t i = 0; i < a->out->numel; i++)
            ggy[i] += a->gout[i] * mask_factor(bits, i, slope);
    return DUET_OK; /* x: zero, but reached (gin[1] exists) */
}

const duet__op_def duet__op_def_relu_backward = {
    .id = DUET__OP_RELU_BACKWARD,
    .inputs = "gy,x",
    .params_size = sizeof(relu_backward_params),
    .check = relu_backward_check,
    DUET__OP_CPU(relu_backward_k, relu_backward_backward_k),
    .output_unread = true,
};

/* In recorded ops: gx = relu_backward(gy, x) with the saved bits; the
 * second derivative is zero. */
static int masked_graph(duet_node *node, duet_tensor *gy, const bool *want, duet_tensor **gx) {
    if (!want[0]) return DUET_OK;
    const rectify_params *p = duet__op_node_params(node);
    const relu_backward_params q = {.slope = p->is_relu ? 0.0f : p->slope,
                                    .bits = duet__op_node_saved(node, 0)};
    return DUET__OP_RUN(DUET__OP_RELU_BACKWARD, &q, &gx[0], gy, node->inputs[0]);
}

const duet__op_def duet__op_def_relu = {
    .id = DUET__OP_RELU,
    .inputs = "x",
    .params_size = sizeof(rectify_params),
    .check = rectify_check,
    .forward = {DUET__OP_CPU_SIM(rectify_k),
                [DUET_DEVICE_CUDA] = DUET__OP_CUDA(duet__cuda_k_relu)},
    .backward = {DUET__OP_CPU_SIM(rectify_backward_k),
                 [DUET_DEVICE_CUDA] = DUET__OP_CUDA(duet__cuda_k_relu_backward)},
    .graph_backward = masked_graph,
    .output_unread = true,
};

const duet__op_def duet__op_def_leaky_relu = {
    .id = DUET__OP_LEAKY_RELU,
    .inputs = "x",
    .params_size = sizeof(rectify_params),
    .check = rectify_check,
    .forward = {DUET__OP_CPU_SIM(rectify_k),
                [DUET_DEVICE_CUDA] = DUET__OP_CUDA(duet__cuda_k_leaky_relu)},
    .backward = {DUET__OP_CPU_SIM(rectify_backward_k),
                 [DUET_DEVICE_CUDA] = DUET__OP_CUDA(duet__cuda_k_leaky_relu_backward)},
    .graph_backward = masked_graph,
    .output_unread = true,
};

int duet_relu(duet_tensor *x, duet_tensor **out) {
    DUET_ASSERT(x != NULL && out != NULL);
    return DUET__OP_RUN(DUET__OP_RELU, (&(rectify_params){0.0f, true}), out, x);
}

int duet_leaky_relu(duet_tensor *x, float negative_slope, duet_tensor **out) {
    DUET_ASSERT(x != NULL && out != NULL);
    return DUET__OP_RUN(DUET__OP_LEAKY_RELU, (&(rectify_params){negative_slope, false}), out, x);
}

/* ---- relu, leaky_relu in place ---------------------------------------------------
 * For an op's fresh output that nobody else reads (ops_internal.h): the
 * activation overwrites x and the result is x itself (nothing recorded) or
 * a recorded view of it. The mask is taken from x before it is
 * overwritten, so the gradients are the copying op's for any slope. */

bool duet_can_overwrite(const duet_tensor *x) {
    /* The caller's reference, plus the producing node's when recorded. */
    if (!duet_tensor_owns_data(x)) return false;
    int refs = duet_tensor_refcount(x);
    if (x->grad_fn == NULL) return !x->requires_grad && refs == 1;
    return refs == 2 && duet_autograd_output_unread(x);
}

/* x = relu(x) or leaky_relu(x, slope) in place when x is overwritable. */
static int rectify_inplace(duet_tensor *x, float slope, bool is_relu, duet_tensor **out) {
    DUET_ASSERT(x != NULL && out != NULL);
    *out = NULL;
    if (!(slope >= 0.0f) || !duet_can_overwrite(x))
        return is_relu ? duet_relu(x, out) : duet_leaky_relu(x, slope, out);
    const rectify_params p = {slope, is_relu};
    return duet__op_run(is_relu ? DUET__OP_RELU : DUET__OP_LEAKY_RELU,
                        &(duet__op_call){.nin = 1, .in = &x, .nrecord = 1, .params = &p,
                                         .inplace = true},
                        out);
}

int duet_relu_inplace(duet_tensor *x, duet_tensor **out) {
    return rectify_inplace(x, 0.0f, true, out);
}

int duet_leaky_relu_inplace(duet_tensor *x, float negative_slope, duet_tensor **out) {
    return rectify_inplace(x, negative_slope, false, out);
}

/* ---- sigmoid, tanh ------------------------------------------------------------------ */

static int same_shape_check(int nin, duet_tensor *const *in, void *params, bool record,
                            duet_device dev, duet__op_plan *plan) {
    (void)nin, (void)params, (void)record, (void)dev;
    duet__op_plan_like(plan, in[0]);
    return DUET_OK;
}

static int sigmoid_k(const duet__op_args *a) {
    sigmoid_forward(a->out->data, a->in[0]->data, a->out->numel);
    return DUET_OK;
}

static int sigmoid_backward_k(const duet__op_args *a) {
    sigmoid_backward(a->gin[0], a->gout, a->out->data, a->out->numel);
    return DUET_OK;
}

static int tanh_k(const duet__op_args *a) {
    tanh_forward(a->out->data, a->in[0]->data, a->out->numel);
    return DUET_OK;
}

static int tanh_backward_k(const duet__op_args *a) {
    tanh_backward(a->gin[0], a->gout, a->out->data, a->out->numel);
    return DUET_OK;
}

const duet__op_def duet__op_def_sigmoid = {
    .id = DUET__OP_SIGMOID,
    .inputs = "x",
    .check = same_shape_check,
    .forward = {DUET__OP_CPU_SIM(sigmoid_k),
                [DUET_DEVICE_CUDA] = DUET__OP_CUDA(duet__cuda_k_sigmoid)},
    .backward = {DUET__OP_CPU_SIM(sigmoid_backward_k),
                 [DUET_DEVICE_CUDA] = DUET__OP_CUDA(duet__cuda_k_sigmoid_backward)},
};

const duet__op_def duet__op_def_tanh = {
    .id = DUET__OP_TANH,
    .inputs = "x",
    .check = same_shape_check,
    .forward = {DUET__OP_CPU_SIM(tanh_k), [DUET_DEVICE_CUDA] = DUET__OP_CUDA(duet__cuda_k_tanh)},
    .backward = {DUET__OP_CPU_SIM(tanh_backward_k),
                 [DUET_DEVICE_CUDA] = DUET__OP_CUDA(duet__cuda_k_tanh_backward)},
};

int duet_sigmoid(duet_tensor *x, duet_tensor **out) {
    DUET_ASSERT(x != NULL && out != NULL);
    return DUET__OP_RUN(DUET__OP_SIGMOID, NULL, out, x);
}

int duet_tanh(duet_tensor *x, duet_tensor **out) {
    DUET_ASSERT(x != NULL && out != NULL);
    return DUET__OP_RUN(DUET__OP_TANH, NULL, out, x);
}

/* ---- elu -------------------------------------------------------------------------- */

typedef struct elu_params {
    float alpha;
} elu_params;

static int elu_check(int nin, duet_tensor *const *in, void *params, bool record, duet_device dev,
                     duet__op_plan *plan) {
    (void)nin, (void)record, (void)dev;
    const float alpha = ((const elu_params *)params)->alpha;
    if (!(alpha > 0.0f))
        return duet__error(DUET_EINVAL, "elu: alpha must be > 0, got %g", (double)alpha);
    duet__op_plan_like(plan, in[0]);
    return DUET_OK;
}

static int elu_k(const duet__op_args *a) {
    elu_forward(a->out->data, a->in[0]->data, ((const elu_params *)a->params)->alpha,
                a->out->numel);
    return DUET_OK;
}

static int elu_backward_k(const duet__op_args *a) {
    const float alpha = ((const elu_params *)a->params)->alpha;
    const float *g = a->gout, *y = a->out->data;
    for (int64_t i = 0; i < a->out->numel; i++) a->gin[0][i] += duet__elu_grad(g[i], y[i], alpha);
    return DUET_OK;
}

/* elu_backward (gy, y) -> gy * d, d = 1 where y > 0, else y + alpha (=
 * alpha exp(x)): elu's backward in recorded ops. y is the recorded output
 * of elu, so the second derivative alpha exp(x) = d(d)/dy * dy/dx flows
 * through it: the gradient to y is gout * gy where y <= 0. */
static int elu_backward_fwd_k(const duet__op_args *a) {
    const float alpha = ((const elu_params *)a->params)->alpha;
    const float *gy = a->in[0]->data, *y = a->in[1]->data;
    float *o = a->out->data;
    for (int64_t i = 0; i < a->out->numel; i++)
        o[i] = gy[i] * (y[i] > 0.0f ? 1.0f : y[i] + alpha);
    return DUET_OK;
}

static int elu_backward_bwd_k(const duet__op_args *a) {
    const float alpha = ((const elu_params *)a->params)->alpha;
    const float *gy = a->in[0]->data, *y = a->in[1]->data, *g = a->gout;
    for (int64_t i = 0; i < a->out->numel; i++) {
        const bool pos = y[i] > 0.0f;
        if (a->gin[0] != NULL) a->gin[0][i] += g[i] * (pos ? 1.0f : y[i] + alpha);
        if (a->gin[1] != NULL && !pos) a->gin[1][i] += g[i] * gy[i];
    }
    return DUET_OK;
}

static int elu_backward_check(int nin, duet_tensor *const *in, void *params, bool record,
                              duet_device dev, duet__op_plan *plan) {
    (void)nin, (void)params, (void)record, (void)dev;
    DUET_TRY(duet__op_check_same_shape("elu_backward", in[0], in[1]));
    duet__op_plan_like(plan, in[0]);
    return DUET_OK;
}

const duet__op_def duet__op_def_elu_backward = {
    .id = DUET__OP_ELU_BACKWARD,
    .inputs = "gy,y",
    .params_size = sizeof(elu_params),
    .check = elu_backward_check,
    DUET__OP_CPU(elu_backward_fwd_k, elu_backward_bwd_k),
    .output_unread = true,
};

static int elu_graph(duet_node *node, duet_tensor *gy, const bool *want, duet_tensor **gx) {
    if (!want[0]) return DUET_OK;
    return DUET__OP_RUN(DUET__OP_ELU_BACKWARD, duet__op_node_params(node), &gx[0], gy,
                        node->output);
}

const duet__op_def duet__op_def_elu = {
    .id = DUET__OP_ELU,
    .inputs = "x",
    .params_size = sizeof(elu_params),
    .check = elu_check,
    .forward = {DUET__OP_CPU_SIM(elu_k), [DUET_DEVICE_CUDA] = DUET__OP_CUDA(duet__cuda_k_elu)},
    .backward = {DUET__OP_CPU_SIM(elu_backward_k),
                 [DUET_DEVICE_CUDA] = DUET__OP_CUDA(duet__cuda_k_elu_backward)},
    .graph_backward = elu_graph,
};

int duet_elu(duet_tensor *x, float alpha, duet_tensor **out) {
    DUET_ASSERT(x != NULL && out != NULL);
    return DUET__OP_RUN(DUET__OP_ELU, (&(elu_params){alpha}), out, x);
}
