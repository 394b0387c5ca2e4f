/* Losses with mean reduction times a loss weight, as scalars of shape [1]:
 * L1, MSE, and binary cross-entropy with logits (against a tensor or a
 * constant target). L1 and MSE pass gradients to the target too when it
 * requires grad (as PyTorch); BCE to the logits only. Per-element terms
 * and gradients are ops_math.h's, shared with the CUDA kernels. */
#include "ops/ops_internal.h"

#include <math.h>

/* ---- kernels ---------------------------------------------------------------- */

/* sum |p - t| over n */
static double l1_sum(const float *p, const float *t, int64_t n) {
    double total = 0.0;
    for (int64_t i = 0; i < n; i += 1024) {
        int64_t end = i + 1024 < n ? i + 1024 : n;
        double part = 0.0;
        for (int64_t j = i; j < end; j++) part += duet__l1_term(p[j], t[j]);
        total += part;
    }
    return total;
}

/* sum (p - t)^2 over n */
static double mse_sum(const float *p, const float *t, int64_t n) {
    double total = 0.0;
    for (int64_t i = 0; i < n; i += 1024) {
        int64_t end = i + 1024 < n ? i + 1024 : n;
        double part = 0.0;
        for (int64_t j = i; j < end; j++) part += duet__mse_term(p[j], t[j]);
        total += part;
    }
    return total;
}

/* g += c * sign(p - t), sign(0) = 0 as torch.sign; c carries the direction
 * (negative for the target) and weight * dout / n. */
static void l1_backward(float *g, const float *p, const float *t, float c, int64_t n) {
#pragma omp parallel for num_threads(duet__par_threads(3 * n)) schedule(static)
    for (int64_t i = 0; i < n; i++) g[i] += duet__l1_grad(p[i], t[i], c);
}

/* g += c * (p - t), c = +-2 * weight * dout / n */
static void mse_backward(float *g, const float *p, const float *t, float c, int64_t n) {
#pragma omp parallel for num_threads(duet__par_threads(3 * n)) schedule(static)
    for (int64_t i = 0; i < n; i++) g[i] += duet__mse_grad(p[i], t[i], c);
}

/* Stable per-element BCE with logits: max(x,0) - x*t + log1p(exp(-|x|)).
 * t is a tensor (tstride 1) or one constant (tstride 0). */
static double bce_sum(const float *x, const float *t, int64_t tstride, int64_t n) {
    double total = 0.0;
    for (int64_t i = 0; i < n; i += 1024) {
        int64_t end = i + 1024 < n ? i + 1024 : n;
        double part = 0.0;
        for (int64_t j = i; j < end; j++) part += duet__bce_logits_term(x[j], t[j * tstride]);
        total += part;
    }
    return total;
}

/* gx += c * (sigmoid(x) - t), sigmoid without overflow; c = weight * dout / n */
static void bce_backward(float *gx, const float *x, const float *t, int64_t tstride, float c,
                         int64_t n) {
#pragma omp parallel for num_threads(duet__par_threads(8 * n)) schedule(static)
    for (int64_t i = 0; i < n; i++) gx[i] += duet__bce_logits_grad(x[i], t[i * tstride], c);
}

/* ---- L1 and MSE ------------------------------------------------------------------------ */

typedef struct weight_ctx {
    float weight;
} weight_ctx;

typedef void (*pair_backward)(float *g, const float *p, const float *t, float c, int64_t n);

/* Shared backward of L1 (scale 1) and MSE (scale 2): the prediction gets
 * +c * f(p - t), the target -c * f(p - t). */
static int pair_loss_backward(duet_node *node, pair_backward kernel, float scale) {
    const weight_ctx *wc = node->ctx;
    const duet_tensor *p = node->inputs[0], *t = node->inputs[1];
    const float c = (float)((double)scale * wc->weight * node->output->grad[0] / (double)p->numel);
    float *gp = duet_node_input_grad(node, 0);
    if (gp != NULL) kernel(gp, p->data, t->data, c, p->numel);
    float *gt = duet_node_input_grad(node, 1);
    if (gt != NULL) kernel(gt, p->data, t->data, -c, p->numel);
    return DUET_OK;
}

static int l1_backward_node(duet_node *node) {
    return pair_loss_backward(node, l1_backward, 1.0f);
}

static int mse_backward_node(duet_node *node) {
    return pair_loss_backward(node, mse_backward, 2.0f);
}

typedef double (*pair_sum)(const float *p, const float *t, int64_t n);

static int pair_loss(const char *op, pair_sum sum, duet_backward_fn backward, duet_tensor *pred,
                     duet_tensor *target, float weight, duet_tensor **out) {
    DUET_ASSERT(pred != NULL && target != NULL && out != NULL);
    *out = NULL;
    DUET_TRY(duet__op_check_same_shape(op, pred, target));
    duet_tensor *y = NULL;
    DUET_TRY(duet_tensor_create(1, (int64_t[]){1}, &y));
    y->data[0] = (float)((double)weight * sum(pred->data, target->data, pred->numel) /
                         (double)pred->numel);
    duet_tensor *inputs[2] = {pred, target};
    weight_ctx *wc = NULL;
    if (duet_autograd_needs_record(2, inputs)) {
        wc = malloc(sizeof *wc);
        if (wc == NULL) {
            duet_tensor_release(y);
            return duet__error(DUET_ENOMEM, "%s: out of memory", op);
        }
        wc->weight = weight;
    }
    return duet__op_finish(y, op, backward, wc, free, 2, inputs, out);
}

int duet_l1_loss(duet_tensor *pred, duet_tensor *target, float weight, duet_tensor **out) {
    duet_device dev;
    DUET__OP_DEVICE(out, "l1_loss", "pred,target", &dev, pred, target);
    if (dev.type == DUET_DEVICE_CUDA)
        return DUET__ON_CUDA("l1_loss", dev,
                             duet__cuda_loss_op(DUET__LOSS_L1, pred, target, 0.0f, weight, out));
    return pair_loss("l1_loss", l1_sum, l1_backward_node, pred, target, weight, out);
}

int duet_mse_loss(duet_tensor *pred, duet_tensor *target, float weight, duet_tensor **out) {
    duet_device dev;
    DUET__OP_DEVICE(out, "mse_loss", "pred,target", &dev, pred, target);
    if (dev.type == DUET_DEVICE_CUDA)
        return DUET__ON_CUDA("mse_loss", dev,
                             duet__cuda_loss_op(DUET__LOSS_MSE, pred, target, 0.0f, weight, out));
    return pair_loss("mse_loss", mse_sum, mse_backward_node, pred, target, weight, out);
}

/* ---- BCE with logits ----------------------------------------------------------------------
 * The node's only input is the logits (the target gets no gradient); the
 * target tensor is kept alive by the context instead. */

typedef struct bce_ctx {
    float weight;
    float target_const;  /* used when target is NULL */
    duet_tensor *target; /* retained, or NULL */
} bce_ctx;

static void bce_ctx_free(void *p) {
    bce_ctx *c = p;
    if (c == NULL) return;
    duet_tensor_release(c->target);
    free(c);
}

static int bce_backward_node(duet_node *node) {
    const bce_ctx *bc = node->ctx;
    const duet_tensor *x = node->inputs[0];
    float *gx = duet_node_input_grad(node, 0);
    if (gx == NULL) return DUET_OK;
    const float c = (float)((double)bc->weight * node->output->grad[0] / (double)x->numel);
    if (bc->target != NULL) bce_backward(gx, x->data, bc->target->data, 1, c, x->numel);
    else bce_backward(gx, x->data, &bc->target_const, 0, c, x->numel);
    return DUET_OK;
}

/* target NULL: every target is target_const. */
static int bce_loss(const char *op, duet_tensor *logits, duet_tensor *target, float target_const,
                    float weight, duet_tensor **out) {
    DUET_ASSERT(logits != NULL && out != NULL);
    *out = NULL;
    if (target != NULL) DUET_TRY(duet__op_check_same_shape(op, logits, target));
    duet_tensor *y = NULL;
    DUET_TRY(duet_tensor_create(1, (int64_t[]){1}, &y));
    const float *t = target != NULL ? target->data : &target_const;
    y->data[0] = (float)((double)weight * bce_sum(logits->data, t, target != NULL ? 1 : 0,
                                                  logits->numel) / (double)logits->numel);
    bce_ctx *bc = NULL;
    if (duet_autograd_needs_record(1, &logits)) {
        bc = malloc(sizeof *bc);
        if (bc == NULL) {
            duet_tensor_release(y);
            return duet__error(DUET_ENOMEM, "%s: out of memory", op);
        }
        bc->weight = weight;
        bc->target_const = target_const;
        bc->target = duet_tensor_retain(target);
    }
    return duet__op_finish(y, op, bce_backward_node, bc, bce_ctx_free, 1, &logits, out);
}

int duet_bce_with_logits(duet_tensor *logits, duet_tensor *target, float weight,
                         duet_tensor **out) {
    DUET_ASSERT(target != NULL);
    duet_device dev;
    DUET__OP_DEVICE(out, "bce_with_logits", "logits,target", &dev, logits, target);
    if (dev.type == DUET_DEVICE_CUDA)
        return DUET__ON_CUDA("bce_with_logits", dev,
                             duet__cuda_loss_op(DUET__LOSS_BCE_LOGITS, logits, target, 0.0f,
                                                weight, out));
    return bce_loss("bce_with_logits", logits, target, 0.0f, weight, out);
}

int duet_bce_with_logits_const(duet_tensor *logits, float target, float weight,
                               duet_tensor **out) {
    duet_device dev;
    DUET__OP_DEVICE(out, "bce_with_logits_const", "logits", &dev, logits);
    if (dev.type == DUET_DEVICE_CUDA)
        return DUET__ON_CUDA("bce_with_logits_const", dev,
                             duet__cuda_loss_op(DUET__LOSS_BCE_LOGITS, logits, NULL, target,
                                                weight, out));
    return bce_loss("bce_with_logits_const", logits, NULL, target, weight, out);
}
