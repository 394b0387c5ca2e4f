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

/* What relu (slope 0) and leaky_relu keep for backward. */
typedef struct mask_ctx {
    float slope;
    uint64_t *bits; /* positive_word of each 64 elements of the input */
} mask_ctx;

static void mask_ctx_free(void *p) {
    mask_ctx *c = p;
    if (c == NULL) return;
    duet_aligned_free(c->bits);
    free(c);
}

/* The context of a node to be recorded for x, its mask not yet filled (the
 * forward does that), or NULL with *rc set when memory ran out. */
static mask_ctx *mask_make(const duet_tensor *x, float slope, int *rc) {
    *rc = DUET_OK;
    mask_ctx *c = calloc(1, sizeof *c);
    if (c != NULL)
        c->bits = duet_aligned_alloc((size_t)((x->numel + 63) / 64) * sizeof(uint64_t));
    if (c == NULL || c->bits == NULL) {
        mask_ctx_free(c);
        char sx[DUET_SHAPE_STR_MAX];
        *rc = duet__error(DUET_ENOMEM, "relu: out of memory for the backward mask of %s",
                          duet_shape_str(x, sx, sizeof sx));
        return NULL;
    }
    c->slope = slope;
    return c;
}

static int masked_backward_node(duet_node *node) {
    const mask_ctx *c = node->ctx;
    float *gx = duet_node_input_grad(node, 0);
    if (gx != NULL) masked_backward(gx, node->output->grad, c->bits, c->slope, node->output->numel);
    return DUET_OK;
}

/* relu_backward (gy, x) -> gy * m, m in the context (1 where x > 0, else
 * slope): the recorded form of relu's and leaky_relu's backward. Its
 * derivative in gy is m; in x it is zero, and x is an input all the same,
 * as in PyTorch's threshold_backward and leaky_relu_backward: a backward
 * through the gradient reaches what made x (a Linear's bias before the
 * activation) and gives it a zero gradient rather than none. A DDP counts
 * on that: WGAN-GP's penalty backpropagated on its own through a
 * discriminator ending in Linear + LeakyReLU (DeepFillv1) would otherwise
 * leave the bias unready and the reduction unfinished. */
static int relu_backward_node(duet_node *node) {
    const float *m = node->ctx, *g = node->output->grad;
    float *ggy = duet_node_input_grad(node, 0);
    if (ggy != NULL)
        for (int64_t i = 0; i < node->output->numel; i++) ggy[i] += g[i] * m[i];
    (void)duet_node_input_grad(node, 1); /* x: zero, but reached */
    return DUET_OK;
}

/* In recorded ops: gx = relu_backward(gy, x) with the saved bits; the
 * second derivative is zero. */
static int masked_graph(duet_node *node, duet_tensor *gy, const bool *want, duet_tensor **gx) {
    if (!want[0]) return DUET_OK;
    const mask_ctx *c = node->ctx;
    const duet_tensor *y = node->output;
    DUET_TRY(duet__op_check_same_shape("relu_backward", gy, y));
    float *m = malloc((size_t)y->numel * sizeof *m);
    duet_tensor *g = NULL;
    int rc = m == NULL ? duet__error(DUET_ENOMEM, "relu_backward: out of memory")
                       : duet_tensor_create_uninit(y->ndim, y->shape, &g);
    if (rc != DUET_OK) {
        free(m);
        return rc;
    }
    for (int64_t i = 0; i < y->numel; i++) {
        m[i] = (c->bits[i / 64] >> (i % 64)) & 1u ? 1.0f : c->slope;
        g->data[i] = gy->data[i] * m[i];
    }
    duet_tensor *ins[2] = {gy, node->inputs[0]};
    return duet__op_finish_unread(
        duet__op_finish(g, "relu_backward", relu_backward_node, m, free, 2, ins, &gx[0]),
        &gx[0]);
}

/* out = relu(x) (is_relu; slope 0) or leaky_relu(x, slope), copying. */
static int rectify(duet_tensor *x, float slope, bool is_relu, duet_tensor **out) {
    const char *op = is_relu ? "relu" : "leaky_relu";
    DUET_ASSERT(x != NULL && out != NULL);
    *out = NULL;
    duet_tensor *y = NULL;
    DUET_TRY(duet_tensor_create_uninit(x->ndim, x->shape, &y));
    mask_ctx *c = NULL;
    if (duet_autograd_needs_record(1, &x)) {
        int rc = DUET_OK;
        if ((c = mask_make(x, slope, &rc)) == NULL) {
            duet_tensor_release(y);
            return rc;
        }
    }
    rectify_kernel(y->data, x->data, c != NULL ? c->bits : NULL, slope, is_relu, y->numel);
    DUET_TRY(duet__op_finish_unread(
        duet__op_finish(y, op, masked_backward_node, c, mask_ctx_free, 1, &x, out), out));
    duet_autograd_set_graph_backward(*out, masked_graph);
    return DUET_OK;
}

int duet_relu(duet_tensor *x, duet_tensor **out) {
    duet_device dev;
    DUET__OP_DEVICE(out, "relu", "x", &dev, x);
    if (dev.type == DUET_DEVICE_CUDA)
        return DUET__ON_CUDA("relu", dev, duet__cuda_act_op(DUET__ACT_RELU, x, 0.0f, out));
    return rectify(x, 0.0f, true, out);
}

int duet_leaky_relu(duet_tensor *x, float negative_slope, duet_tensor **out) {
    duet_device dev;
    DUET__OP_DEVICE(out, "leaky_relu", "x", &dev, x);
    if (dev.type == DUET_DEVICE_CUDA)
        return DUET__ON_CUDA("leaky_relu", dev,
                             duet__cuda_act_op(DUET__ACT_LEAKY_RELU, x, negative_slope, out));
    return rectify(x, negative_slope, false, out);
}

/* ---- relu, leaky_relu in place ---------------------------------------------------
 * For an op's fresh output that nobody else reads (ops_internal.h): the
 * activation overwrites x and the result is a view of it. The mask is taken
 * from x before it is overwritten, so the gradients are the copying op's for
 * any slope. */

bool duet_can_overwrite(const duet_tensor *x) {
    /* The caller's reference, plus the producing node's when recorded. */
    if (!duet_tensor_owns_data(x)) return false;
    int refs = duet_tensor_refcount(x);
    if (x->grad_fn == NULL) return !x->requires_grad && refs == 1;
    return refs == 2 && duet_autograd_output_unread(x);
}

/* The result of an in-place op on x: x itself when nothing is recorded,
 * else a view of x recorded as the op's output. */
static int inplace_result(duet_tensor *x, duet_tensor **y) {
    if (!duet_autograd_needs_record(1, &x)) {
        *y = duet_tensor_retain(x);
        return DUET_OK;
    }
    return duet_tensor_view(x, x->ndim, x->shape, y);
}

/* x = relu(x) or leaky_relu(x, slope) in place when x is overwritable. */
static int rectify_inplace(duet_tensor *x, float slope, bool is_relu, duet_tensor **out) {
    const char *op = is_relu ? "relu" : "leaky_relu";
    DUET_ASSERT(x != NULL && out != NULL);
    *out = NULL;
    if (!(slope >= 0.0f) || !duet_can_overwrite(x)) return rectify(x, slope, is_relu, out);
    duet_tensor *y = NULL;
    DUET_TRY(inplace_result(x, &y));
    mask_ctx *c = NULL;
    if (y != x) {
        int rc = DUET_OK;
        if ((c = mask_make(x, slope, &rc)) == NULL) {
            duet_tensor_release(y);
            return rc;
        }
    }
    rectify_kernel(x->data, x->data, c != NULL ? c->bits : NULL, slope, is_relu, x->numel);
    if (y == x) {
        *out = y;
        return DUET_OK;
    }
    DUET_TRY(duet__op_finish_unread(
        duet__op_finish(y, op, masked_backward_node, c, mask_ctx_free, 1, &x, out), out));
    duet_autograd_set_graph_backward(*out, masked_graph);
    return DUET_OK;
}

int duet_relu_inplace(duet_tensor *x, duet_tensor **out) {
    duet_device dev;
    DUET__OP_DEVICE(out, "relu", "x", &dev, x);
    /* On a GPU, a new output (the in-place form is the CPU's saving). */
    if (dev.type == DUET_DEVICE_CUDA) return duet_relu(x, out);
    return rectify_inplace(x, 0.0f, true, out);
}

int duet_leaky_relu_inplace(duet_tensor *x, float negative_slope, duet_tensor **out) {
    duet_device dev;
    DUET__OP_DEVICE(out, "leaky_relu", "x", &dev, x);
    if (dev.type == DUET_DEVICE_CUDA) return duet_leaky_relu(x, negative_slope, out);
    return rectify_inplace(x, negative_slope, false, out);
}

/* ---- sigmoid, tanh ------------------------------------------------------------------ */

static int sigmoid_backward_node(duet_node *node) {
    float *gx = duet_node_input_grad(node, 0);
    if (gx != NULL)
        sigmoid_backward(gx, node->output->grad, node->output->data, node->output->numel);
    return DUET_OK;
}

static int tanh_backward_node(duet_node *node) {
    float *gx = duet_node_input_grad(node, 0);
    if (gx != NULL)
        tanh_backward(gx, node->output->grad, node->output->data, node->output->numel);
    return DUET_OK;
}

int duet_sigmoid(duet_tensor *x, duet_tensor **out) {
    DUET_ASSERT(x != NULL && out != NULL);
    duet_device dev;
    DUET__OP_DEVICE(out, "sigmoid", "x", &dev, x);
    if (dev.type == DUET_DEVICE_CUDA)
        return DUET__ON_CUDA("sigmoid", dev, duet__cuda_act_op(DUET__ACT_SIGMOID, x, 0.0f, out));
    duet_tensor *y = NULL;
    DUET_TRY(duet_tensor_create_uninit(x->ndim, x->shape, &y));
    sigmoid_forward(y->data, x->data, y->numel);
    return duet__op_finish(y, "sigmoid", sigmoid_backward_node, NULL, NULL, 1, &x, out);
}

/* ---- elu -------------------------------------------------------------------------- */

static int elu_backward_node(duet_node *node) {
    float *gx = duet_node_input_grad(node, 0);
    const float alpha = *(const float *)node->ctx;
    const float *g = node->output->grad, *y = node->output->data;
    if (gx != NULL)
        for (int64_t i = 0; i < node->output->numel; i++) gx[i] += duet__elu_grad(g[i], y[i], alpha);
    return DUET_OK;
}

/* In recorded ops: gx = gy * d with d = 1 where y > 0, else y + alpha
 * (= alpha exp(x)): d = c1 + c2 * y, c1 and c2 constants, and y the
 * recorded output, so the second derivative alpha exp(x) flows through
 * this node again. */
static int elu_graph(duet_node *node, duet_tensor *gy, const bool *want, duet_tensor **gx) {
    if (!want[0]) return DUET_OK;
    const float alpha = *(const float *)node->ctx;
    duet_tensor *y = node->output, *c1 = NULL, *c2 = NULL, *c2y = NULL, *d = NULL;
    int rc = duet_tensor_create(y->ndim, y->shape, &c1);
    if (rc == DUET_OK) rc = duet_tensor_create(y->ndim, y->shape, &c2);
    if (rc == DUET_OK) {
        for (int64_t i = 0; i < y->numel; i++) {
            const bool pos = y->data[i] > 0.0f;
            c1->data[i] = pos ? 1.0f : alpha;
            c2->data[i] = pos ? 0.0f : 1.0f;
        }
        rc = duet_mul(c2, y, &c2y);
    }
    if (rc == DUET_OK) rc = duet_add(c1, c2y, &d);
    if (rc == DUET_OK) rc = duet_mul(gy, d, &gx[0]);
    duet_tensor_release(c1);
    duet_tensor_release(c2);
    duet_tensor_release(c2y);
    duet_tensor_release(d);
    return rc;
}

int duet_elu(duet_tensor *x, float alpha, duet_tensor **out) {
    DUET_ASSERT(x != NULL && out != NULL);
    duet_device dev;
    DUET__OP_DEVICE(out, "elu", "x", &dev, x);
    if (!(alpha > 0.0f))
        return duet__error(DUET_EINVAL, "elu: alpha must be > 0, got %g", (double)alpha);
    if (dev.type == DUET_DEVICE_CUDA)
        return DUET__ON_CUDA("elu", dev, duet__cuda_act_op(DUET__ACT_ELU, x, alpha, out));
    float *a = malloc(sizeof *a);
    duet_tensor *y = NULL;
    int rc = a == NULL ? duet__error(DUET_ENOMEM, "elu: out of memory")
                       : duet_tensor_create_uninit(x->ndim, x->shape, &y);
    if (rc != DUET_OK) {
        free(a);
        return rc;
    }
    *a = alpha;
    elu_forward(y->data, x->data, alpha, x->numel);
    DUET_TRY(duet__op_finish(y, "elu", elu_backward_node, a, free, 1, &x, out));
    duet_autograd_set_graph_backward(*out, elu_graph);
    return DUET_OK;
}

int duet_tanh(duet_tensor *x, duet_tensor **out) {
    DUET_ASSERT(x != NULL && out != NULL);
    duet_device dev;
    DUET__OP_DEVICE(out, "tanh", "x", &dev, x);
    if (dev.type == DUET_DEVICE_CUDA)
        return DUET__ON_CUDA("tanh", dev, duet__cuda_act_op(DUET__ACT_TANH, x, 0.0f, out));
    duet_tensor *y = NULL;
    DUET_TRY(duet_tensor_create_uninit(x->ndim, x->shape, &y));
    tanh_forward(y->data, x->data, y->numel);
    return duet__op_finish(y, "tanh", tanh_backward_node, NULL, NULL, 1, &x, out);
}
