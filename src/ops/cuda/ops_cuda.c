/* Ops whose inputs are on a CUDA device (ops_internal.h): activations,
 * losses and conv2d, each recorded on the tape with a backward that runs on
 * the device. The nodes are named "<op> (cuda)": the tape's list of what a
 * CPU backward does not read does not apply to them (their backward reads
 * every input and the output). Scalars the host needs (a loss's value, the
 * gradient reaching a loss) are read with a copy. */
#include "cuda/cuda.h"
#include "ops/cuda/cuda_ops.h"

#include <math.h>

static const char *act_op(duet__cuda_act act) {
    switch (act) {
    case DUET__ACT_RELU: return "relu (cuda)";
    case DUET__ACT_LEAKY_RELU: return "leaky_relu (cuda)";
    case DUET__ACT_SIGMOID: return "sigmoid (cuda)";
    case DUET__ACT_ELU: return "elu (cuda)";
    default: return "tanh (cuda)";
    }
}

/* ---- add, sub, mul, scale -------------------------------------------------- */

static const char *binary_op_name(duet__cuda_binary op) {
    return op == DUET__BIN_ADD ? "add (cuda)" : op == DUET__BIN_SUB ? "sub (cuda)" : "mul (cuda)";
}

/* The two input gradients may be one buffer (add(x, x)): each is a kernel
 * of its own on the one stream, so both contributions land. */
static int binary_backward_node(duet_node *node) {
    const duet__cuda_binary *op = node->ctx;
    const duet_tensor *y = node->output;
    const int dev = y->device.index;
    float *ga = duet_node_input_grad(node, 0);
    if (ga != NULL)
        DUET_TRY(duet__cuda_grad_accumulate(dev, node->op, ga, y->grad,
                                            *op == DUET__BIN_MUL ? node->inputs[1]->data : NULL,
                                            1.0f, y->numel));
    float *gb = duet_node_input_grad(node, 1);
    if (gb != NULL)
        DUET_TRY(duet__cuda_grad_accumulate(dev, node->op, gb, y->grad,
                                            *op == DUET__BIN_MUL ? node->inputs[0]->data : NULL,
                                            *op == DUET__BIN_SUB ? -1.0f : 1.0f, y->numel));
    return DUET_OK;
}

int duet__cuda_binary_op(duet__cuda_binary op, duet_tensor *a, duet_tensor *b, duet_tensor **out) {
    *out = NULL;
    const char *name = binary_op_name(op);
    DUET_TRY(duet_device_check(a->device));
    DUET_TRY(duet__op_check_same_shape(name, a, b));
    duet_tensor *y = NULL;
    DUET_TRY(duet_tensor_create_on(a->device, a->ndim, a->shape, &y));
    int rc = duet__cuda_binary_forward(a->device.index, op, y->data, a->data, b->data, y->numel);
    duet_tensor *inputs[2] = {a, b};
    duet__cuda_binary *c = NULL;
    if (rc == DUET_OK && duet_autograd_needs_record(2, inputs)) {
        c = malloc(sizeof *c);
        if (c == NULL) rc = duet__error(DUET_ENOMEM, "%s: out of memory", name);
        else *c = op;
    }
    if (rc != DUET_OK) {
        duet_tensor_release(y);
        return rc;
    }
    rc = duet__op_finish(y, name, binary_backward_node, c, free, 2, inputs, out);
    return op == DUET__BIN_MUL ? rc : duet__op_finish_unread(rc, out);
}

static int scale_backward_node(duet_node *node) {
    const float *s = node->ctx;
    float *gx = duet_node_input_grad(node, 0);
    if (gx == NULL) return DUET_OK;
    return duet__cuda_grad_accumulate(node->output->device.index, node->op, gx,
                                      node->output->grad, NULL, *s, node->output->numel);
}

int duet__cuda_scale_op(duet_tensor *x, float s, duet_tensor **out) {
    *out = NULL;
    const char *name = "scale (cuda)";
    DUET_TRY(duet_device_check(x->device));
    duet_tensor *y = NULL;
    DUET_TRY(duet_tensor_create_on(x->device, x->ndim, x->shape, &y));
    int rc = duet__cuda_scale_forward(x->device.index, y->data, x->data, s, y->numel);
    float *c = NULL;
    if (rc == DUET_OK && duet_autograd_needs_record(1, &x)) {
        c = malloc(sizeof *c);
        if (c == NULL) rc = duet__error(DUET_ENOMEM, "%s: out of memory", name);
        else *c = s;
    }
    if (rc != DUET_OK) {
        duet_tensor_release(y);
        return rc;
    }
    return duet__op_finish_unread(
        duet__op_finish(y, name, scale_backward_node, c, free, 1, &x, out), out);
}

/* ---- activations ------------------------------------------------------------ */

typedef struct act_ctx {
    duet__cuda_act act;
    float slope;
} act_ctx;

static int act_backward_node(duet_node *node) {
    const act_ctx *c = node->ctx;
    float *gx = duet_node_input_grad(node, 0);
    if (gx == NULL) return DUET_OK;
    const duet_tensor *y = node->output;
    /* The rectifiers' gradient comes from the input's sign, sigmoid's and
     * tanh's from the output. */
    const bool rect = c->act == DUET__ACT_RELU || c->act == DUET__ACT_LEAKY_RELU;
    const float *saved = rect ? node->inputs[0]->data : y->data;
    return duet__cuda_act_backward(y->device.index, c->act, gx, y->grad, saved, c->slope,
                                   y->numel);
}

int duet__cuda_act_op(duet__cuda_act act, duet_tensor *x, float slope, duet_tensor **out) {
    *out = NULL;
    const char *op = act_op(act);
    DUET_TRY(duet_device_check(x->device));
    duet_tensor *y = NULL;
    DUET_TRY(duet_tensor_create_on(x->device, x->ndim, x->shape, &y));
    int rc = duet__cuda_act_forward(x->device.index, act, y->data, x->data, slope, x->numel);
    act_ctx *c = NULL;
    if (rc == DUET_OK && duet_autograd_needs_record(1, &x)) {
        c = malloc(sizeof *c);
        if (c == NULL) rc = duet__error(DUET_ENOMEM, "%s: out of memory", op);
        else *c = (act_ctx){.act = act, .slope = slope};
    }
    if (rc != DUET_OK) {
        duet_tensor_release(y);
        return rc;
    }
    return duet__op_finish(y, op, act_backward_node, c, free, 1, &x, out);
}

/* ---- losses ------------------------------------------------------------------ */

typedef struct loss_ctx {
    duet__cuda_loss loss;
    float weight;
    duet_tensor *target; /* BCE's target (retained), or NULL */
    float *target_const; /* BCE's constant target: one float on the device */
} loss_ctx;

static void loss_ctx_free(void *p) {
    loss_ctx *c = p;
    if (c == NULL) return;
    if (c->target_const != NULL) duet__cuda_free(c->target->device.index, c->target_const);
    duet_tensor_release(c->target);
    free(c);
}

static const char *loss_op(duet__cuda_loss loss) {
    switch (loss) {
    case DUET__LOSS_L1: return "l1_loss (cuda)";
    case DUET__LOSS_MSE: return "mse_loss (cuda)";
    default: return "bce_with_logits (cuda)";
    }
}

/* The gradient reaching the loss (one float on the device) on the host. */
static int read_scalar(const duet_tensor *t, const float *p, float *out, const char *op) {
    return duet__device_copy(duet_device_cpu(), out, t->device, p, sizeof *out, op);
}

static int loss_backward_node(duet_node *node) {
    const loss_ctx *c = node->ctx;
    const duet_tensor *p = node->inputs[0];
    const int dev = p->device.index;
    float dout;
    DUET_TRY(read_scalar(node->output, node->output->grad, &dout, node->op));
    if (c->loss == DUET__LOSS_BCE_LOGITS) {
        /* The logits only, as the CPU's. */
        float *gx = duet_node_input_grad(node, 0);
        if (gx == NULL) return DUET_OK;
        const float cc = (float)((double)c->weight * dout / (double)p->numel);
        const float *t = c->target_const != NULL ? c->target_const : c->target->data;
        return duet__cuda_loss_backward(dev, c->loss, gx, p->data, t,
                                        c->target_const != NULL ? 0 : 1, cc, p->numel);
    }
    /* L1 (scale 1) and MSE (scale 2): +c to the prediction, -c to the target. */
    const double scale = c->loss == DUET__LOSS_MSE ? 2.0 : 1.0;
    const float cc = (float)(scale * c->weight * dout / (double)p->numel);
    const duet_tensor *t = node->inputs[1];
    float *gp = duet_node_input_grad(node, 0);
    if (gp != NULL) DUET_TRY(duet__cuda_loss_backward(dev, c->loss, gp, p->data, t->data, 1, cc,
                                                      p->numel));
    float *gt = duet_node_input_grad(node, 1);
    if (gt != NULL) DUET_TRY(duet__cuda_loss_backward(dev, c->loss, gt, p->data, t->data, 1, -cc,
                                                      p->numel));
    return DUET_OK;
}

int duet__cuda_loss_op(duet__cuda_loss loss, duet_tensor *pred, duet_tensor *target,
                       float target_const, float weight, duet_tensor **out) {
    *out = NULL;
    const char *op = loss_op(loss);
    DUET_TRY(duet_device_check(pred->device));
    if (target != NULL) DUET_TRY(duet__op_check_same_shape(op, pred, target));
    const int dev = pred->device.index;
    loss_ctx *c = calloc(1, sizeof *c);
    if (c == NULL) return duet__error(DUET_ENOMEM, "%s: out of memory", op);
    c->loss = loss;
    c->weight = weight;
    int rc = DUET_OK;
    if (target == NULL) {
        /* The constant target as one float on the device, kept with the
         * target tensor's device for the free. */
        c->target = duet_tensor_retain(pred);
        rc = duet__cuda_alloc(dev, sizeof(float), false, op, (void **)&c->target_const);
        if (rc == DUET_OK)
            rc = duet__cuda_copy(pred->device, c->target_const, duet_device_cpu(), &target_const,
                                 sizeof target_const, op);
    } else if (loss == DUET__LOSS_BCE_LOGITS) {
        c->target = duet_tensor_retain(target);
    }
    /* weight * sum / n, summed in double on the device, finished on the host
     * as the CPU's. */
    double *sum = NULL;
    double total = 0.0;
    if (rc == DUET_OK) rc = duet__cuda_alloc(dev, sizeof *sum, false, op, (void **)&sum);
    if (rc == DUET_OK)
        rc = duet__cuda_loss_sum(dev, loss, sum, pred->data,
                                 target != NULL ? target->data : c->target_const,
                                 target != NULL ? 1 : 0, pred->numel);
    if (rc == DUET_OK)
        rc = duet__cuda_copy(duet_device_cpu(), &total, pred->device, sum, sizeof total, op);
    duet__cuda_free(dev, sum);
    duet_tensor *y = NULL;
    if (rc == DUET_OK) rc = duet_tensor_create_on(pred->device, 1, (int64_t[]){1}, &y);
    if (rc == DUET_OK) {
        const float v = (float)((double)weight * total / (double)pred->numel);
        rc = duet_tensor_copy_from_host(y, &v);
    }
    if (rc != DUET_OK) {
        duet_tensor_release(y);
        loss_ctx_free(c);
        return rc;
    }
    /* L1 and MSE pass gradients to the target too; BCE to the logits only. */
    duet_tensor *inputs[2] = {pred, target};
    const int ninputs = loss == DUET__LOSS_BCE_LOGITS ? 1 : 2;
    if (!duet_autograd_needs_record(ninputs, inputs)) {
        loss_ctx_free(c);
        c = NULL;
    }
    return duet__op_finish(y, op, loss_backward_node, c, loss_ctx_free, ninputs, inputs, out);
}

/* ---- conv2d ---------------------------------------------------------------- */

static void conv_ctx_free(void *p) { free(p); }

static int conv_backward_node(duet_node *node) {
    const duet__conv_dims *d = node->ctx;
    const duet_tensor *x = node->inputs[0], *w = node->inputs[1];
    float *dx = duet_node_input_grad(node, 0);
    float *dw = duet_node_input_grad(node, 1);
    float *db = node->ninputs > 2 ? duet_node_input_grad(node, 2) : NULL;
    if (dx == NULL && dw == NULL && db == NULL) return DUET_OK;
    return duet__cuda_conv2d_backward(x->device.index, d, x->data, w->data, node->output->grad,
                                      dx, dw, db);
}

int duet__cuda_conv2d_op(const duet__conv_dims *d, duet_tensor *x, duet_tensor *w, duet_tensor *b,
                         duet_tensor **out) {
    *out = NULL;
    const char *op = "conv2d (cuda)";
    DUET_TRY(duet_device_check(x->device));
    duet_tensor *y = NULL;
    DUET_TRY(duet_tensor_create_on(x->device, 4, (int64_t[]){d->n, d->o, d->oh, d->ow}, &y));
    int rc = duet__cuda_conv2d_forward(x->device.index, d, x->data, w->data,
                                       b != NULL ? b->data : NULL, y->data);
    duet_tensor *inputs[3] = {x, w, b};
    const int ninputs = b != NULL ? 3 : 2;
    duet__conv_dims *c = NULL;
    if (rc == DUET_OK && duet_autograd_needs_record(ninputs, inputs)) {
        c = malloc(sizeof *c);
        if (c == NULL) rc = duet__error(DUET_ENOMEM, "%s: out of memory", op);
        else *c = *d;
    }
    if (rc != DUET_OK) {
        duet_tensor_release(y);
        return rc;
    }
    return duet__op_finish_unread(
        duet__op_finish(y, op, conv_backward_node, c, conv_ctx_free, ninputs, inputs, out), out);
}

/* ---- sum, mean ---------------------------------------------------------------- */

static int reduce_backward_node(duet_node *node) {
    const bool *mean = node->ctx;
    const duet_tensor *x = node->inputs[0];
    float *gx = duet_node_input_grad(node, 0);
    if (gx == NULL) return DUET_OK;
    float g;
    DUET_TRY(read_scalar(node->output, node->output->grad, &g, node->op));
    if (*mean) g = (float)(g / (double)x->numel);
    return duet__cuda_add_scalar(x->device.index, node->op, gx, g, x->numel);
}

int duet__cuda_reduce_op(bool mean, duet_tensor *x, duet_tensor **out) {
    *out = NULL;
    const char *op = mean ? "mean (cuda)" : "sum (cuda)";
    DUET_TRY(duet_device_check(x->device));
    const int dev = x->device.index;
    double *sum = NULL, total = 0.0;
    DUET_TRY(duet__cuda_alloc(dev, sizeof *sum, false, op, (void **)&sum));
    int rc = duet__cuda_sum(dev, op, sum, x->data, x->numel);
    if (rc == DUET_OK)
        rc = duet__cuda_copy(duet_device_cpu(), &total, x->device, sum, sizeof total, op);
    duet__cuda_free(dev, sum);
    duet_tensor *y = NULL;
    if (rc == DUET_OK) rc = duet_tensor_create_on(x->device, 1, (int64_t[]){1}, &y);
    if (rc == DUET_OK) {
        const float v = (float)(mean ? total / (double)x->numel : total);
        rc = duet_tensor_copy_from_host(y, &v);
    }
    bool *c = NULL;
    if (rc == DUET_OK && duet_autograd_needs_record(1, &x)) {
        c = malloc(sizeof *c);
        if (c == NULL) rc = duet__error(DUET_ENOMEM, "%s: out of memory", op);
        else *c = mean;
    }
    if (rc != DUET_OK) {
        duet_tensor_release(y);
        return rc;
    }
    return duet__op_finish(y, op, reduce_backward_node, c, free, 1, &x, out);
}

/* ---- linear ----------------------------------------------------------------- */

typedef struct linear_ctx {
    int64_t rows, in, outf;
} linear_ctx;

static int linear_backward_node(duet_node *node) {
    const linear_ctx *c = node->ctx;
    const duet_tensor *x = node->inputs[0], *w = node->inputs[1], *b = node->inputs[2];
    const float *dy = node->output->grad; /* (rows, OUT) */
    const int dev = x->device.index;
    float *dx = duet_node_input_grad(node, 0);
    float *dw = duet_node_input_grad(node, 1);
    float *db = b != NULL ? duet_node_input_grad(node, 2) : NULL;
    /* dX (rows, IN) += dY (rows, OUT) W (OUT, IN) */
    if (dx != NULL)
        DUET_TRY(duet__cuda_sgemm(dev, node->op, false, false, c->rows, c->in, c->outf, 1.0f, dy,
                                  c->outf, w->data, c->in, 1.0f, dx, c->in));
    /* dW (OUT, IN) += dY^T (OUT, rows) X (rows, IN) */
    if (dw != NULL)
        DUET_TRY(duet__cuda_sgemm(dev, node->op, true, false, c->outf, c->in, c->rows, 1.0f, dy,
                                  c->outf, x->data, c->in, 1.0f, dw, c->in));
    if (db != NULL) DUET_TRY(duet__cuda_col_sum_acc(dev, node->op, db, dy, c->rows, c->outf));
    return DUET_OK;
}

int duet__cuda_linear_op(duet_tensor *x, duet_tensor *w, duet_tensor *b, int64_t rows, int64_t in,
                         int64_t outf, int ndim, const int64_t *y_shape, duet_tensor **out) {
    *out = NULL;
    const char *op = "linear (cuda)";
    DUET_TRY(duet_device_check(x->device));
    const int dev = x->device.index;
    duet_tensor *y = NULL;
    DUET_TRY(duet_tensor_create_on(x->device, ndim, y_shape, &y));
    int rc = b != NULL ? duet__cuda_broadcast_rows(dev, op, y->data, b->data, rows, outf) : DUET_OK;
    /* Y (rows, OUT) = X (rows, IN) W^T (IN, OUT) (+ the bias already there) */
    if (rc == DUET_OK)
        rc = duet__cuda_sgemm(dev, op, false, true, rows, outf, in, 1.0f, x->data, in, w->data, in,
                              b != NULL ? 1.0f : 0.0f, y->data, outf);
    duet_tensor *inputs[3] = {x, w, b};
    linear_ctx *c = NULL;
    if (rc == DUET_OK && duet_autograd_needs_record(3, inputs)) {
        c = malloc(sizeof *c);
        if (c == NULL) rc = duet__error(DUET_ENOMEM, "%s: out of memory", op);
        else *c = (linear_ctx){.rows = rows, .in = in, .outf = outf};
    }
    if (rc != DUET_OK) {
        duet_tensor_release(y);
        return rc;
    }
    return duet__op_finish_unread(
        duet__op_finish(y, op, linear_backward_node, c, free, 3, inputs, out), out);
}
