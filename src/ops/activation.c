/* Activations: relu, leaky_relu, sigmoid, tanh (PyTorch semantics).
 *
 * relu and leaky_relu take their backward mask from the saved input
 * (x > 0, as PyTorch; the gradient at exactly 0 is the negative side's);
 * sigmoid and tanh from the saved output, as PyTorch does. */
#include "ops/ops_internal.h"

#include <math.h>

/* ---- kernels ---------------------------------------------------------------- */

/* out = max(x, 0), NaN passing through as in PyTorch */
static void relu_forward(float *out, const float *x, int64_t n) {
    for (int64_t i = 0; i < n; i++) out[i] = duet__op_pick(x[i] < 0.0f, 0.0f, x[i]);
}

/* gx += x > 0 ? gout : 0 */
static void relu_backward(float *gx, const float *gout, const float *x, int64_t n) {
    for (int64_t i = 0; i < n; i++) gx[i] += duet__op_pick(x[i] > 0.0f, gout[i], 0.0f);
}

/* out = x > 0 ? x : slope * x */
static void leaky_relu_forward(float *out, const float *x, float slope, int64_t n) {
    for (int64_t i = 0; i < n; i++) out[i] = duet__op_pick(x[i] > 0.0f, x[i], slope * x[i]);
}

/* gx += x > 0 ? gout : slope * gout */
static void leaky_relu_backward(float *gx, const float *gout, const float *x, float slope,
                                int64_t n) {
    for (int64_t i = 0; i < n; i++)
        gx[i] += duet__op_pick(x[i] > 0.0f, gout[i], slope * gout[i]);
}

/* out = 1 / (1 + exp(-x)), without overflow for large |x|. */
static void sigmoid_forward(float *out, const float *x, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        float e = expf(-fabsf(x[i])); /* in (0, 1] */
        float p = 1.0f / (1.0f + e);
        out[i] = duet__op_pick(x[i] >= 0.0f, p, e * p);
    }
}

/* gx += gout * y * (1 - y), y the saved output */
static void sigmoid_backward(float *gx, const float *gout, const float *y, int64_t n) {
    for (int64_t i = 0; i < n; i++) gx[i] += gout[i] * y[i] * (1.0f - y[i]);
}

static void tanh_forward(float *out, const float *x, int64_t n) {
    for (int64_t i = 0; i < n; i++) out[i] = tanhf(x[i]);
}

/* gx += gout * (1 - y^2), y the saved output */
static void tanh_backward(float *gx, const float *gout, const float *y, int64_t n) {
    for (int64_t i = 0; i < n; i++) gx[i] += gout[i] * (1.0f - y[i] * y[i]);
}

/* ---- relu, leaky_relu -------------------------------------------------------------- */

typedef struct slope_ctx {
    float slope;
} slope_ctx;

static int relu_backward_node(duet_node *node) {
    float *gx = duet_node_input_grad(node, 0);
    if (gx != NULL)
        relu_backward(gx, node->output->grad, node->inputs[0]->data, node->output->numel);
    return DUET_OK;
}

static int leaky_relu_backward_node(duet_node *node) {
    const slope_ctx *c = node->ctx;
    float *gx = duet_node_input_grad(node, 0);
    if (gx != NULL)
        leaky_relu_backward(gx, node->output->grad, node->inputs[0]->data, c->slope,
                            node->output->numel);
    return DUET_OK;
}

int duet_relu(duet_tensor *x, duet_tensor **out) {
    DUET_ASSERT(x != NULL && out != NULL);
    *out = NULL;
    duet_tensor *y = NULL;
    DUET_TRY(duet_tensor_create_uninit(&y, x->ndim, x->shape));
    relu_forward(y->data, x->data, y->numel);
    return duet__op_finish(y, "relu", relu_backward_node, NULL, NULL, 1, &x, out);
}

int duet_leaky_relu(duet_tensor *x, float negative_slope, duet_tensor **out) {
    DUET_ASSERT(x != NULL && out != NULL);
    *out = NULL;
    duet_tensor *y = NULL;
    DUET_TRY(duet_tensor_create_uninit(&y, x->ndim, x->shape));
    leaky_relu_forward(y->data, x->data, negative_slope, y->numel);
    slope_ctx *c = NULL;
    if (duet_autograd_needs_record(1, &x)) {
        c = malloc(sizeof *c);
        if (c == NULL) {
            duet_tensor_release(y);
            return duet__error(DUET_ENOMEM, "leaky_relu: out of memory for the saved slope");
        }
        c->slope = negative_slope;
    }
    return duet__op_finish(y, "leaky_relu", leaky_relu_backward_node, c, free, 1, &x, out);
}

/* ---- relu, leaky_relu in place ---------------------------------------------------
 * For an op's fresh output that nobody else reads (ops.h): the
 * activation overwrites x and the result is a view of it. The backward takes
 * its mask from the output, which is exact: for slope >= 0, y > 0 exactly
 * when x > 0 (NaN fails both). */

static int relu_inplace_backward_node(duet_node *node) {
    float *gx = duet_node_input_grad(node, 0);
    if (gx != NULL)
        relu_backward(gx, node->output->grad, node->output->data, node->output->numel);
    return DUET_OK;
}

static int leaky_relu_inplace_backward_node(duet_node *node) {
    const slope_ctx *c = node->ctx;
    float *gx = duet_node_input_grad(node, 0);
    if (gx != NULL)
        leaky_relu_backward(gx, node->output->grad, node->output->data, c->slope,
                            node->output->numel);
    return DUET_OK;
}

bool duet_can_overwrite(const duet_tensor *x) {
    /* The caller's reference, plus the producing node's when recorded. */
    if (!duet_tensor_owns_data(x)) return false;
    int refs = duet_tensor_refcount(x);
    if (x->grad_fn == NULL) return !x->requires_grad && refs == 1;
    return refs == 2 && x->grad_fn->output == x && x->grad_fn->output_unread;
}

/* The result of an in-place op on x: x itself when nothing is recorded,
 * else a view of x recorded as the op's output. */
static int inplace_result(duet_tensor *x, duet_tensor **y) {
    if (!duet_autograd_needs_record(1, &x)) {
        *y = duet_tensor_retain(x);
        return DUET_OK;
    }
    return duet_tensor_view(y, x, x->ndim, x->shape);
}

int duet_relu_inplace(duet_tensor *x, duet_tensor **out) {
    DUET_ASSERT(x != NULL && out != NULL);
    *out = NULL;
    if (!duet_can_overwrite(x)) return duet_relu(x, out);
    duet_tensor *y = NULL;
    DUET_TRY(inplace_result(x, &y));
    relu_forward(x->data, x->data, x->numel);
    if (y == x) {
        *out = y;
        return DUET_OK;
    }
    return duet__op_finish(y, "relu", relu_inplace_backward_node, NULL, NULL, 1, &x, out);
}

int duet_leaky_relu_inplace(duet_tensor *x, float negative_slope, duet_tensor **out) {
    DUET_ASSERT(x != NULL && out != NULL);
    *out = NULL;
    if (!(negative_slope >= 0.0f) || !duet_can_overwrite(x))
        return duet_leaky_relu(x, negative_slope, out);
    duet_tensor *y = NULL;
    DUET_TRY(inplace_result(x, &y));
    slope_ctx *c = NULL;
    if (y != x) {
        c = malloc(sizeof *c);
        if (c == NULL) {
            duet_tensor_release(y);
            return duet__error(DUET_ENOMEM, "leaky_relu: out of memory for the saved slope");
        }
        c->slope = negative_slope;
    }
    leaky_relu_forward(x->data, x->data, negative_slope, x->numel);
    if (y == x) {
        *out = y;
        return DUET_OK;
    }
    return duet__op_finish(y, "leaky_relu", leaky_relu_inplace_backward_node, c, free, 1, &x,
                            out);
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
    *out = NULL;
    duet_tensor *y = NULL;
    DUET_TRY(duet_tensor_create_uninit(&y, x->ndim, x->shape));
    sigmoid_forward(y->data, x->data, y->numel);
    return duet__op_finish(y, "sigmoid", sigmoid_backward_node, NULL, NULL, 1, &x, out);
}

int duet_tanh(duet_tensor *x, duet_tensor **out) {
    DUET_ASSERT(x != NULL && out != NULL);
    *out = NULL;
    duet_tensor *y = NULL;
    DUET_TRY(duet_tensor_create_uninit(&y, x->ndim, x->shape));
    tanh_forward(y->data, x->data, y->numel);
    return duet__op_finish(y, "tanh", tanh_backward_node, NULL, NULL, 1, &x, out);
}
