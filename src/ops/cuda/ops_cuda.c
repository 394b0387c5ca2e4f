/* Ops whose inputs are on a CUDA device (ops_internal.h): activations,
 * losses and conv2d, each recorded on the tape with a backward that runs on
 * the device. The nodes are named "<op> (cuda)": the tape's list of what a
 * CPU backward does not read does not apply to them (their backward reads
 * every input and the output). Scalars the host needs (a loss's value, the
 * gradient reaching a loss) are read with a copy. */
#include "cuda/cuda_internal.h"
#include "ops/cuda/cuda_ops.h"

#include <math.h>

/* ---- add, sub, mul, scale: the rows' CUDA kernels (op_table.h) ------------- */

static int binary_k(const duet__op_args *a, duet__cuda_binary op) {
    return duet__cuda_binary_forward(a->out->device.index, op, a->out->data, a->in[0]->data,
                                     a->in[1]->data, a->out->numel);
}

int duet__cuda_k_add(const duet__op_args *a) { return binary_k(a, DUET__BIN_ADD); }
int duet__cuda_k_sub(const duet__op_args *a) { return binary_k(a, DUET__BIN_SUB); }
int duet__cuda_k_mul(const duet__op_args *a) { return binary_k(a, DUET__BIN_MUL); }

/* The two input gradients may be one buffer (add(x, x)): each is a kernel
 * of its own on the one stream, so both contributions land. */
static int binary_backward_k(const duet__op_args *a, duet__cuda_binary op, const char *name) {
    const duet_tensor *y = a->out;
    const int dev = y->device.index;
    if (a->gin[0] != NULL)
        DUET_TRY(duet__cuda_grad_accumulate(dev, name, a->gin[0], a->gout,
                                            op == DUET__BIN_MUL ? a->in[1]->data : NULL, 1.0f,
                                            y->numel));
    if (a->gin[1] != NULL)
        DUET_TRY(duet__cuda_grad_accumulate(dev, name, a->gin[1], a->gout,
                                            op == DUET__BIN_MUL ? a->in[0]->data : NULL,
                                            op == DUET__BIN_SUB ? -1.0f : 1.0f, y->numel));
    return DUET_OK;
}

int duet__cuda_k_add_backward(const duet__op_args *a) {
    return binary_backward_k(a, DUET__BIN_ADD, "add");
}
int duet__cuda_k_sub_backward(const duet__op_args *a) {
    return binary_backward_k(a, DUET__BIN_SUB, "sub");
}
int duet__cuda_k_mul_backward(const duet__op_args *a) {
    return binary_backward_k(a, DUET__BIN_MUL, "mul");
}

/* scale's params: its factor first (elementwise.c's scale_params). */
int duet__cuda_k_scale(const duet__op_args *a) {
    return duet__cuda_scale_forward(a->out->device.index, a->out->data, a->in[0]->data,
                                    *(const float *)a->params, a->out->numel);
}

int duet__cuda_k_scale_backward(const duet__op_args *a) {
    return duet__cuda_grad_accumulate(a->out->device.index, "scale", a->gin[0], a->gout, NULL,
                                      *(const float *)a->params, a->out->numel);
}

/* ---- activations: the rows' CUDA kernels -------------------------------------
 * The params are activation.c's: relu's and leaky_relu's slope first,
 * elu's alpha first. */

static int act_k(const duet__op_args *a, duet__cuda_act act) {
    const float slope = a->params != NULL ? *(const float *)a->params : 0.0f;
    return duet__cuda_act_forward(a->out->device.index, act, a->out->data, a->in[0]->data, slope,
                                  a->out->numel);
}

/* The rectifiers' gradient comes from the input's sign (in place, the
 * output's, the same sign for the slopes >= 0 the in-place ops take),
 * sigmoid's, tanh's and elu's from the output. */
static int act_backward_k(const duet__op_args *a, duet__cuda_act act) {
    const float slope = a->params != NULL ? *(const float *)a->params : 0.0f;
    const bool rect = act == DUET__ACT_RELU || act == DUET__ACT_LEAKY_RELU;
    const float *saved = rect ? a->in[0]->data : a->out->data;
    return duet__cuda_act_backward(a->out->device.index, act, a->gin[0], a->gout, saved, slope,
                                   a->out->numel);
}

int duet__cuda_k_relu(const duet__op_args *a) { return act_k(a, DUET__ACT_RELU); }
int duet__cuda_k_relu_backward(const duet__op_args *a) { return act_backward_k(a, DUET__ACT_RELU); }
int duet__cuda_k_leaky_relu(const duet__op_args *a) { return act_k(a, DUET__ACT_LEAKY_RELU); }
int duet__cuda_k_leaky_relu_backward(const duet__op_args *a) {
    return act_backward_k(a, DUET__ACT_LEAKY_RELU);
}
int duet__cuda_k_sigmoid(const duet__op_args *a) { return act_k(a, DUET__ACT_SIGMOID); }
int duet__cuda_k_sigmoid_backward(const duet__op_args *a) {
    return act_backward_k(a, DUET__ACT_SIGMOID);
}
int duet__cuda_k_tanh(const duet__op_args *a) { return act_k(a, DUET__ACT_TANH); }
int duet__cuda_k_tanh_backward(const duet__op_args *a) { return act_backward_k(a, DUET__ACT_TANH); }
int duet__cuda_k_elu(const duet__op_args *a) { return act_k(a, DUET__ACT_ELU); }
int duet__cuda_k_elu_backward(const duet__op_args *a) { return act_backward_k(a, DUET__ACT_ELU); }

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
