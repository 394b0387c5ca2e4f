/* Element-wise binary ops (add, sub, mul), scaling and the constant
 * per-channel affine map.
 *
 * Backward kernels accumulate (+=). The two input gradients of a binary op
 * may be one buffer (add(x, x)): each is updated in its own pass, so both
 * contributions land. */
#include "ops/ops_internal.h"

#include <inttypes.h>
#include <string.h>

/* ---- kernels ---------------------------------------------------------------- */

static void add_forward(float *out, const float *a, const float *b, int64_t n) {
#pragma omp parallel for num_threads(duet__par_threads(3 * n)) schedule(static)
    for (int64_t i = 0; i < n; i++) out[i] = a[i] + b[i];
}

static void sub_forward(float *out, const float *a, const float *b, int64_t n) {
#pragma omp parallel for num_threads(duet__par_threads(3 * n)) schedule(static)
    for (int64_t i = 0; i < n; i++) out[i] = a[i] - b[i];
}

static void mul_forward(float *out, const float *a, const float *b, int64_t n) {
#pragma omp parallel for num_threads(duet__par_threads(3 * n)) schedule(static)
    for (int64_t i = 0; i < n; i++) out[i] = a[i] * b[i];
}

/* g += s * gout */
static void axpy_backward(float *g, const float *gout, float s, int64_t n) {
#pragma omp parallel for num_threads(duet__par_threads(2 * n)) schedule(static)
    for (int64_t i = 0; i < n; i++) g[i] += s * gout[i];
}

/* g += gout * other */
static void mul_backward(float *g, const float *gout, const float *other, int64_t n) {
#pragma omp parallel for num_threads(duet__par_threads(3 * n)) schedule(static)
    for (int64_t i = 0; i < n; i++) g[i] += gout[i] * other[i];
}

/* out (N, C, inner) = x * scale[c] + shift[c] */
static void channel_affine_forward(float *out, const float *x, const float *scale,
                                   const float *shift, int64_t n, int64_t c, int64_t inner) {
#pragma omp parallel for collapse(2) num_threads(duet__par_threads(2 * n * c * inner)) schedule(static)
    for (int64_t s = 0; s < n; s++)
        for (int64_t ch = 0; ch < c; ch++) {
            const float a = scale[ch], b = shift[ch];
            const float *xs = x + (s * c + ch) * inner;
            float *os = out + (s * c + ch) * inner;
            for (int64_t i = 0; i < inner; i++) os[i] = xs[i] * a + b;
        }
}

/* gx (N, C, inner) += gout * scale[c] */
static void channel_affine_backward(float *gx, const float *gout, const float *scale, int64_t n,
                                    int64_t c, int64_t inner) {
    for (int64_t s = 0; s < n; s++)
        for (int64_t ch = 0; ch < c; ch++)
            axpy_backward(gx + (s * c + ch) * inner, gout + (s * c + ch) * inner, scale[ch],
                          inner);
}

/* ---- add, sub, mul ---------------------------------------------------------- */

static int add_backward(duet_node *node) {
    const float *go = node->output->grad;
    int64_t n = node->output->numel;
    float *ga = duet_node_input_grad(node, 0);
    if (ga != NULL) axpy_backward(ga, go, 1.0f, n);
    float *gb = duet_node_input_grad(node, 1);
    if (gb != NULL) axpy_backward(gb, go, 1.0f, n);
    return DUET_OK;
}

static int sub_backward(duet_node *node) {
    const float *go = node->output->grad;
    int64_t n = node->output->numel;
    float *ga = duet_node_input_grad(node, 0);
    if (ga != NULL) axpy_backward(ga, go, 1.0f, n);
    float *gb = duet_node_input_grad(node, 1);
    if (gb != NULL) axpy_backward(gb, go, -1.0f, n);
    return DUET_OK;
}

static int mul_backward_node(duet_node *node) {
    const float *go = node->output->grad;
    int64_t n = node->output->numel;
    const float *a = node->inputs[0]->data, *b = node->inputs[1]->data;
    float *ga = duet_node_input_grad(node, 0);
    if (ga != NULL) mul_backward(ga, go, b, n);
    float *gb = duet_node_input_grad(node, 1);
    if (gb != NULL) mul_backward(gb, go, a, n);
    return DUET_OK;
}

typedef void (*binary_kernel)(float *out, const float *a, const float *b, int64_t n);

/* ---- the backwards in recorded ops (autograd.h's duet_graph_backward_fn) ---- */

static int add_graph(duet_node *node, duet_tensor *gy, const bool *want, duet_tensor **gx) {
    (void)node;
    for (int k = 0; k < 2; k++)
        if (want[k]) gx[k] = duet_tensor_retain(gy);
    return DUET_OK;
}

static int sub_graph(duet_node *node, duet_tensor *gy, const bool *want, duet_tensor **gx) {
    (void)node;
    if (want[0]) gx[0] = duet_tensor_retain(gy);
    return want[1] ? duet_scale(gy, -1.0f, &gx[1]) : DUET_OK;
}

/* d(a b) = gy b, gy a: both factors are recorded tensors, so the product
 * rule's second derivative flows through them. */
static int mul_graph(duet_node *node, duet_tensor *gy, const bool *want, duet_tensor **gx) {
    if (want[0]) DUET_TRY(duet_mul(gy, node->inputs[1], &gx[0]));
    if (want[1]) DUET_TRY(duet_mul(gy, node->inputs[0], &gx[1]));
    return DUET_OK;
}

static duet_graph_backward_fn binary_graph(duet_backward_fn backward);

static int binary_op(const char *op, binary_kernel kernel, duet_backward_fn backward,
                     duet_tensor *a, duet_tensor *b, duet_tensor **out) {
    DUET_ASSERT(a != NULL && b != NULL && out != NULL);
    *out = NULL;
    DUET_TRY(duet__op_check_same_shape(op, a, b));
    duet_tensor *y = NULL;
    DUET_TRY(duet_tensor_create_uninit(a->ndim, a->shape, &y));
    kernel(y->data, a->data, b->data, y->numel);
    duet_tensor *inputs[2] = {a, b};
    DUET_TRY(duet__op_finish(y, op, backward, NULL, NULL, 2, inputs, out));
    duet_autograd_set_graph_backward(*out, binary_graph(backward));
    return DUET_OK;
}

int duet_add(duet_tensor *a, duet_tensor *b, duet_tensor **out) {
    duet_device dev;
    DUET__OP_DEVICE(out, "add", "a,b", &dev, a, b);
    if (dev.type == DUET_DEVICE_CUDA)
        return DUET__ON_CUDA("add", dev, duet__cuda_binary_op(DUET__BIN_ADD, a, b, out));
    return duet__op_finish_unread(binary_op("add", add_forward, add_backward, a, b, out), out);
}

int duet_add_inplace(duet_tensor *a, duet_tensor *b, duet_tensor **out) {
    DUET_ASSERT(a != NULL && b != NULL && out != NULL);
    duet_device dev;
    DUET__OP_DEVICE(out, "add", "a,b", &dev, a, b);
    /* On a GPU, a new output (the in-place form is the CPU's saving). */
    if (dev.type == DUET_DEVICE_CUDA) return duet_add(a, b, out);
    if (a == b || b->data == a->data || !duet_can_overwrite(a)) return duet_add(a, b, out);
    DUET_TRY(duet__op_check_same_shape("add", a, b));
    duet_tensor *inputs[2] = {a, b};
    duet_tensor *y = NULL;
    if (duet_autograd_needs_record(2, inputs))
        DUET_TRY(duet_tensor_view(a, a->ndim, a->shape, &y));
    else
        y = duet_tensor_retain(a);
    add_forward(a->data, a->data, b->data, a->numel);
    if (y == a) {
        *out = y;
        return DUET_OK;
    }
    DUET_TRY(duet__op_finish(y, "add", add_backward, NULL, NULL, 2, inputs, out));
    duet_autograd_set_graph_backward(*out, add_graph);
    return DUET_OK;
}

int duet_sub(duet_tensor *a, duet_tensor *b, duet_tensor **out) {
    duet_device dev;
    DUET__OP_DEVICE(out, "sub", "a,b", &dev, a, b);
    if (dev.type == DUET_DEVICE_CUDA)
        return DUET__ON_CUDA("sub", dev, duet__cuda_binary_op(DUET__BIN_SUB, a, b, out));
    return duet__op_finish_unread(binary_op("sub", sub_forward, sub_backward, a, b, out), out);
}

int duet_mul(duet_tensor *a, duet_tensor *b, duet_tensor **out) {
    duet_device dev;
    DUET__OP_DEVICE(out, "mul", "a,b", &dev, a, b);
    if (dev.type == DUET_DEVICE_CUDA)
        return DUET__ON_CUDA("mul", dev, duet__cuda_binary_op(DUET__BIN_MUL, a, b, out));
    return binary_op("mul", mul_forward, mul_backward_node, a, b, out);
}

static duet_graph_backward_fn binary_graph(duet_backward_fn backward) {
    if (backward == add_backward) return add_graph;
    if (backward == sub_backward) return sub_graph;
    return backward == mul_backward_node ? mul_graph : NULL;
}

/* ---- scale ------------------------------------------------------------------ */

typedef struct scale_ctx {
    float s;
} scale_ctx;

static int scale_backward(duet_node *node) {
    const scale_ctx *c = node->ctx;
    float *gx = duet_node_input_grad(node, 0);
    if (gx != NULL) axpy_backward(gx, node->output->grad, c->s, node->output->numel);
    return DUET_OK;
}

static int scale_graph(duet_node *node, duet_tensor *gy, const bool *want, duet_tensor **gx) {
    return want[0] ? duet_scale(gy, ((const scale_ctx *)node->ctx)->s, &gx[0]) : DUET_OK;
}

int duet_scale(duet_tensor *x, float s, duet_tensor **out) {
    DUET_ASSERT(x != NULL && out != NULL);
    duet_device dev;
    DUET__OP_DEVICE(out, "scale", "x", &dev, x);
    if (dev.type == DUET_DEVICE_CUDA)
        return DUET__ON_CUDA("scale", dev, duet__cuda_scale_op(x, s, out));
    duet_tensor *y = NULL;
    DUET_TRY(duet_tensor_create_uninit(x->ndim, x->shape, &y));
    for (int64_t i = 0; i < y->numel; i++) y->data[i] = s * x->data[i];
    scale_ctx *c = NULL;
    if (duet_autograd_needs_record(1, &x)) {
        c = malloc(sizeof *c);
        if (c == NULL) {
            duet_tensor_release(y);
            return duet__error(DUET_ENOMEM, "scale: out of memory for the saved factor");
        }
        c->s = s;
    }
    DUET_TRY(duet__op_finish_unread(
        duet__op_finish(y, "scale", scale_backward, c, free, 1, &x, out), out));
    duet_autograd_set_graph_backward(*out, scale_graph);
    return DUET_OK;
}

/* ---- channel_affine -------------------------------------------------------------- */

/* scale then shift, C floats each, copied so that the caller's arrays may go
 * away before backward. */
typedef struct affine_ctx {
    int64_t c;
    float v[];
} affine_ctx;

static int channel_affine_backward_node(duet_node *node) {
    const affine_ctx *ac = node->ctx;
    const duet_tensor *x = node->inputs[0];
    float *gx = duet_node_input_grad(node, 0);
    if (gx != NULL)
        channel_affine_backward(gx, node->output->grad, ac->v, x->shape[0], ac->c,
                                x->numel / (x->shape[0] * ac->c));
    return DUET_OK;
}

int duet_channel_affine(duet_tensor *x, const float *scale, const float *shift,
                        duet_tensor **out) {
    DUET_ASSERT(x != NULL && out != NULL);
    DUET__OP_ON_CPU(out, "channel_affine", "x", x);
    if (x->ndim < 2) {
        char sx[DUET_SHAPE_STR_MAX];
        return duet__error(DUET_ESHAPE, "channel_affine: input %s has no channel dimension; "
                           "expected (N, C, ...)", duet_shape_str(x, sx, sizeof sx));
    }
    int64_t n = x->shape[0], c = x->shape[1], inner = x->numel / (n * c);
    /* NULL scale means 1, NULL shift means 0. */
    affine_ctx *ac = malloc(sizeof *ac + 2 * (size_t)c * sizeof(float));
    if (ac == NULL)
        return duet__error(DUET_ENOMEM, "channel_affine: out of memory for %" PRId64
                           " channels", c);
    ac->c = c;
    for (int64_t i = 0; i < c; i++) {
        ac->v[i] = scale != NULL ? scale[i] : 1.0f;
        ac->v[c + i] = shift != NULL ? shift[i] : 0.0f;
    }
    duet_tensor *y = NULL;
    int rc = duet_tensor_create_uninit(x->ndim, x->shape, &y);
    if (rc != DUET_OK) {
        free(ac);
        return rc;
    }
    channel_affine_forward(y->data, x->data, ac->v, ac->v + c, n, c, inner);
    return duet__op_finish_unread(
        duet__op_finish(y, "channel_affine", channel_affine_backward_node, ac, free, 1, &x, out),
        out);
}
