/* The CUDA kernels of the op table's rows (op_table.h's duet__cuda_k_*):
 * add, sub, mul, scale, the activations, the losses, sum and mean, linear
 * (cuBLASLt) and conv2d (cuDNN). Each is a plain kernel over its
 * duet__op_args, as the CPU's: the shared entry duet__op_run has checked
 * the devices, allocated the output and saved buffers on the device and
 * records the node; these only launch (cuda_ops.h). Scalars the host needs
 * (a loss's value, the gradient reaching a loss) are read with a copy. */
#include "cuda/cuda.h"
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

/* ---- losses: the rows' CUDA kernels -----------------------------------------
 * The params are loss.c's: the weight first. BCE's constant target is the
 * row's saved buffer 0 (one float on the device). */

/* The gradient reaching a loss or a reduction (one float on the device) on
 * the host. */
static int read_scalar(const duet_tensor *t, const float *p, float *out, const char *op) {
    return duet__device_copy(duet_device_cpu(), out, t->device, p, sizeof *out, op);
}

/* The target of a loss kernel and its stride. */
static const float *loss_target(const duet__op_args *a, int64_t *tstride) {
    *tstride = a->nin > 1 ? 1 : 0;
    return a->nin > 1 ? a->in[1]->data : a->saved[0];
}

/* weight * sum / n, summed in double on the device, finished on the host as
 * the CPU's, into the [1] output. */
static int loss_k(const duet__op_args *a, duet__cuda_loss loss, const char *op) {
    const duet_tensor *p = a->in[0];
    const int dev = p->device.index;
    const float weight = *(const float *)a->params;
    int64_t tstride;
    const float *t = loss_target(a, &tstride);
    double *sum = NULL, total = 0.0;
    DUET_TRY(duet__cuda_alloc(dev, sizeof *sum, false, op, (void **)&sum));
    int rc = duet__cuda_loss_sum(dev, loss, sum, p->data, t, tstride, p->numel);
    if (rc == DUET_OK)
        rc = duet__cuda_copy(duet_device_cpu(), &total, p->device, sum, sizeof total, op);
    duet__cuda_free(dev, sum);
    if (rc != DUET_OK) return rc;
    const float v = (float)((double)weight * total / (double)p->numel);
    return duet__cuda_copy(a->out->device, a->out->data, duet_device_cpu(), &v, sizeof v, op);
}

/* L1 and MSE: +c to the prediction, -c to the target; BCE: the logits. */
static int loss_backward_k(const duet__op_args *a, duet__cuda_loss loss, const char *op) {
    const duet_tensor *p = a->in[0];
    const int dev = p->device.index;
    const float weight = *(const float *)a->params;
    float dout;
    DUET_TRY(read_scalar(a->out, a->gout, &dout, op));
    int64_t tstride;
    const float *t = loss_target(a, &tstride);
    const double scale = loss == DUET__LOSS_MSE ? 2.0 : 1.0;
    const float c = (float)(scale * weight * dout / (double)p->numel);
    if (a->gin[0] != NULL)
        DUET_TRY(duet__cuda_loss_backward(dev, loss, a->gin[0], p->data, t, tstride, c, p->numel));
    if (loss != DUET__LOSS_BCE_LOGITS && a->gin[1] != NULL)
        DUET_TRY(duet__cuda_loss_backward(dev, loss, a->gin[1], p->data, t, tstride, -c,
                                          p->numel));
    return DUET_OK;
}

int duet__cuda_k_l1_loss(const duet__op_args *a) { return loss_k(a, DUET__LOSS_L1, "l1_loss"); }
int duet__cuda_k_l1_loss_backward(const duet__op_args *a) {
    return loss_backward_k(a, DUET__LOSS_L1, "l1_loss");
}
int duet__cuda_k_mse_loss(const duet__op_args *a) { return loss_k(a, DUET__LOSS_MSE, "mse_loss"); }
int duet__cuda_k_mse_loss_backward(const duet__op_args *a) {
    return loss_backward_k(a, DUET__LOSS_MSE, "mse_loss");
}
int duet__cuda_k_bce(const duet__op_args *a) {
    return loss_k(a, DUET__LOSS_BCE_LOGITS, "bce_with_logits");
}
int duet__cuda_k_bce_backward(const duet__op_args *a) {
    return loss_backward_k(a, DUET__LOSS_BCE_LOGITS, "bce_with_logits");
}

/* ---- conv2d: the row's CUDA kernels on cuDNN ---------------------------------- */

int duet__cuda_k_conv2d(const duet__op_args *a) {
    const duet__conv_dims d = duet__conv2d_params_dims(a->params);
    const duet_tensor *x = a->in[0], *w = a->in[1], *b = a->in[2];
    return duet__cuda_conv2d_forward(x->device.index, &d, x->data, w->data,
                                     b != NULL ? b->data : NULL, a->out->data);
}

int duet__cuda_k_conv2d_backward(const duet__op_args *a) {
    const duet__conv_dims d = duet__conv2d_params_dims(a->params);
    const duet_tensor *x = a->in[0], *w = a->in[1];
    return duet__cuda_conv2d_backward(x->device.index, &d, x->data, w->data, a->gout, a->gin[0],
                                      a->gin[1], a->nin > 2 ? a->gin[2] : NULL);
}

/* ---- sum, mean: the rows' CUDA kernels ---------------------------------------- */

static int reduce_k(const duet__op_args *a, bool mean, const char *op) {
    const duet_tensor *x = a->in[0];
    const int dev = x->device.index;
    double *sum = NULL, total = 0.0;
    DUET_TRY(duet__cuda_alloc(dev, sizeof *sum, false, op, (void **)&sum));
    int rc = duet__cuda_sum(dev, op, sum, x->data, x->numel);
    if (rc == DUET_OK)
        rc = duet__cuda_copy(duet_device_cpu(), &total, x->device, sum, sizeof total, op);
    duet__cuda_free(dev, sum);
    if (rc != DUET_OK) return rc;
    const float v = (float)(mean ? total / (double)x->numel : total);
    return duet__cuda_copy(a->out->device, a->out->data, duet_device_cpu(), &v, sizeof v, op);
}

static int reduce_backward_k(const duet__op_args *a, bool mean, const char *op) {
    const duet_tensor *x = a->in[0];
    float g;
    DUET_TRY(read_scalar(a->out, a->gout, &g, op));
    if (mean) g = (float)(g / (double)x->numel);
    return duet__cuda_add_scalar(x->device.index, op, a->gin[0], g, x->numel);
}

int duet__cuda_k_sum(const duet__op_args *a) { return reduce_k(a, false, "sum"); }
int duet__cuda_k_sum_backward(const duet__op_args *a) { return reduce_backward_k(a, false, "sum"); }
int duet__cuda_k_mean(const duet__op_args *a) { return reduce_k(a, true, "mean"); }
int duet__cuda_k_mean_backward(const duet__op_args *a) {
    return reduce_backward_k(a, true, "mean");
}

/* ---- linear: the row's CUDA kernels (params: linear.c's rows, in, outf) ---- */

typedef struct linear_sizes {
    int64_t rows, in, outf;
} linear_sizes;

int duet__cuda_k_linear(const duet__op_args *a) {
    const linear_sizes *p = a->params;
    const duet_tensor *x = a->in[0], *w = a->in[1], *b = a->in[2];
    const int dev = x->device.index;
    float *y = a->out->data;
    if (b != NULL) DUET_TRY(duet__cuda_broadcast_rows(dev, "linear", y, b->data, p->rows, p->outf));
    /* Y (rows, OUT) = X (rows, IN) W^T (IN, OUT) (+ the bias already there) */
    return duet__cuda_sgemm(dev, "linear", false, true, p->rows, p->outf, p->in, 1.0f, x->data,
                            p->in, w->data, p->in, b != NULL ? 1.0f : 0.0f, y, p->outf);
}

int duet__cuda_k_linear_backward(const duet__op_args *a) {
    const linear_sizes *c = a->params;
    const duet_tensor *x = a->in[0], *w = a->in[1];
    const float *dy = a->gout; /* (rows, OUT) */
    const int dev = x->device.index;
    float *dx = a->gin[0], *dw = a->gin[1], *db = a->nin > 2 ? a->gin[2] : NULL;
    /* dX (rows, IN) += dY (rows, OUT) W (OUT, IN) */
    if (dx != NULL)
        DUET_TRY(duet__cuda_sgemm(dev, "linear", false, false, c->rows, c->in, c->outf, 1.0f, dy,
                                  c->outf, w->data, c->in, 1.0f, dx, c->in));
    /* dW (OUT, IN) += dY^T (OUT, rows) X (rows, IN) */
    if (dw != NULL)
        DUET_TRY(duet__cuda_sgemm(dev, "linear", true, false, c->outf, c->in, c->rows, 1.0f, dy,
                                  c->outf, x->data, c->in, 1.0f, dw, c->in));
    if (db != NULL) DUET_TRY(duet__cuda_col_sum_acc(dev, "linear", db, dy, c->rows, c->outf));
    return DUET_OK;
}
