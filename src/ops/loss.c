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

/* ---- the rows ---------------------------------------------------------------------
 * Each loss is weight * sum / n, the sum in double (loss.c's kernels). BCE's
 * constant target is saved buffer 0 (one float on the device, read with
 * stride 0), so that one kernel serves both BCE rows and every device. */

typedef struct loss_params {
    float weight;
    float target_const; /* bce_with_logits_const */
} loss_params;

static int loss_check(const char *op, int nin, duet_tensor *const *in, void *params,
                      duet__op_plan *plan) {
    if (nin > 1) DUET_TRY(duet__op_check_same_shape(op, in[0], in[1]));
    plan->ndim = 1;
    plan->shape[0] = 1;
    if (nin == 1) {
        plan->saved_bytes[0] = sizeof(float);
        plan->saved_from[0] = &((const loss_params *)params)->target_const;
    }
    return DUET_OK;
}

#define LOSS_CHECK(name)                                                                   \
    static int name##_check(int nin, duet_tensor *const *in, void *params, bool record,    \
                            duet_device dev, duet__op_plan *plan) {                        \
        (void)record, (void)dev;                                                           \
        return loss_check(#name, nin, in, params, plan);                                   \
    }
LOSS_CHECK(l1_loss)
LOSS_CHECK(mse_loss)
LOSS_CHECK(bce_with_logits)
LOSS_CHECK(bce_with_logits_const)

/* weight * sum / n into the [1] output. */
static int loss_store(const duet__op_args *a, double sum) {
    const loss_params *p = a->params;
    a->out->data[0] = (float)((double)p->weight * sum / (double)a->in[0]->numel);
    return DUET_OK;
}

static int l1_k(const duet__op_args *a) {
    return loss_store(a, l1_sum(a->in[0]->data, a->in[1]->data, a->in[0]->numel));
}

static int mse_k(const duet__op_args *a) {
    return loss_store(a, mse_sum(a->in[0]->data, a->in[1]->data, a->in[0]->numel));
}

/* The target: in[1] (stride 1), or the saved constant (stride 0). */
static int bce_k(const duet__op_args *a) {
    const bool c = a->nin == 1;
    return loss_store(a, bce_sum(a->in[0]->data, c ? a->saved[0] : a->in[1]->data, c ? 0 : 1,
                                 a->in[0]->numel));
}

typedef void (*pair_backward)(float *g, const float *p, const float *t, float c, int64_t n);

/* Shared backward of L1 (scale 1) and MSE (scale 2): the prediction gets
 * +c * f(p - t), the target -c * f(p - t). */
static int pair_loss_backward(const duet__op_args *a, pair_backward kernel, float scale) {
    const loss_params *lp = a->params;
    const duet_tensor *p = a->in[0], *t = a->in[1];
    const float c = (float)((double)scale * lp->weight * a->gout[0] / (double)p->numel);
    if (a->gin[0] != NULL) kernel(a->gin[0], p->data, t->data, c, p->numel);
    if (a->gin[1] != NULL) kernel(a->gin[1], p->data, t->data, -c, p->numel);
    return DUET_OK;
}

static int l1_backward_k(const duet__op_args *a) {
    return pair_loss_backward(a, l1_backward, 1.0f);
}

static int mse_backward_k(const duet__op_args *a) {
    return pair_loss_backward(a, mse_backward, 2.0f);
}

/* The logits only, the target gets no gradient. */
static int bce_backward_k(const duet__op_args *a) {
    const loss_params *lp = a->params;
    const duet_tensor *x = a->in[0];
    const bool cst = a->nin == 1;
    const float c = (float)((double)lp->weight * a->gout[0] / (double)x->numel);
    bce_backward(a->gin[0], x->data, cst ? a->saved[0] : a->in[1]->data, cst ? 0 : 1, c,
                 x->numel);
    return DUET_OK;
}

const duet__op_def duet__op_def_l1_loss = {
    .id = DUET__OP_L1_LOSS,
    .inputs = "pred,target",
    .params_size = sizeof(loss_params),
    .check = l1_loss_check,
    .forward = {DUET__OP_CPU_SIM(l1_k), [DUET_DEVICE_CUDA] = DUET__OP_CUDA(duet__cuda_k_l1_loss)},
    .backward = {DUET__OP_CPU_SIM(l1_backward_k),
                 [DUET_DEVICE_CUDA] = DUET__OP_CUDA(duet__cuda_k_l1_loss_backward)},
};

const duet__op_def duet__op_def_mse_loss = {
    .id = DUET__OP_MSE_LOSS,
    .inputs = "pred,target",
    .params_size = sizeof(loss_params),
    .check = mse_loss_check,
    .forward = {DUET__OP_CPU_SIM(mse_k),
                [DUET_DEVICE_CUDA] = DUET__OP_CUDA(duet__cuda_k_mse_loss)},
    .backward = {DUET__OP_CPU_SIM(mse_backward_k),
                 [DUET_DEVICE_CUDA] = DUET__OP_CUDA(duet__cuda_k_mse_loss_backward)},
};

const duet__op_def duet__op_def_bce_with_logits = {
    .id = DUET__OP_BCE_WITH_LOGITS,
    .inputs = "logits,target",
    .params_size = sizeof(loss_params),
    .check = bce_with_logits_check,
    .forward = {DUET__OP_CPU_SIM(bce_k), [DUET_DEVICE_CUDA] = DUET__OP_CUDA(duet__cuda_k_bce)},
    .backward = {DUET__OP_CPU_SIM(bce_backward_k),
                 [DUET_DEVICE_CUDA] = DUET__OP_CUDA(duet__cuda_k_bce_backward)},
    .no_grad_inputs = 1u << 1,
};

const duet__op_def duet__op_def_bce_with_logits_const = {
    .id = DUET__OP_BCE_WITH_LOGITS_CONST,
    .inputs = "logits",
    .params_size = sizeof(loss_params),
    .check = bce_with_logits_const_check,
    .forward = {DUET__OP_CPU_SIM(bce_k), [DUET_DEVICE_CUDA] = DUET__OP_CUDA(duet__cuda_k_bce)},
    .backward = {DUET__OP_CPU_SIM(bce_backward_k),
                 [DUET_DEVICE_CUDA] = DUET__OP_CUDA(duet__cuda_k_bce_backward)},
};

int duet_l1_loss(duet_tensor *pred, duet_tensor *target, float weight, duet_tensor **out) {
    DUET_ASSERT(pred != NULL && target != NULL && out != NULL);
    return DUET__OP_RUN(DUET__OP_L1_LOSS, (&(loss_params){.weight = weight}), out, pred, target);
}

int duet_mse_loss(duet_tensor *pred, duet_tensor *target, float weight, duet_tensor **out) {
    DUET_ASSERT(pred != NULL && target != NULL && out != NULL);
    return DUET__OP_RUN(DUET__OP_MSE_LOSS, (&(loss_params){.weight = weight}), out, pred, target);
}

/* The node's inputs are the logits and the target, the target without a
 * gradient (no_grad_inputs): the node keeps it alive. */
int duet_bce_with_logits(duet_tensor *logits, duet_tensor *target, float weight,
                         duet_tensor **out) {
    DUET_ASSERT(logits != NULL && target != NULL && out != NULL);
    return DUET__OP_RUN(DUET__OP_BCE_WITH_LOGITS, (&(loss_params){.weight = weight}), out,
                        logits, target);
}

int duet_bce_with_logits_const(duet_tensor *logits, float target, float weight,
                               duet_tensor **out) {
    DUET_ASSERT(logits != NULL && out != NULL);
    return DUET__OP_RUN(DUET__OP_BCE_WITH_LOGITS_CONST,
                        (&(loss_params){.weight = weight, .target_const = target}), out, logits);
}
