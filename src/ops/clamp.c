/* torch.clamp(x, min, max) (GLDecoder's out_act 'clip'): the forward
 * clamps, the backward passes the gradient where min <= x <= max (both
 * bounds included, as PyTorch's clamp_backward) and 0 elsewhere, read from
 * the input. */
#include "ops/ops_internal.h"

typedef struct clamp_params {
    float lo, hi;
} clamp_params;

static int clamp_check(int nin, duet_tensor *const *in, void *params, bool record,
                       duet_device dev, duet__op_plan *plan) {
    (void)nin, (void)record, (void)dev;
    const clamp_params *p = params;
    if (!(p->lo <= p->hi))
        return duet__error(DUET_EINVAL, "clamp: min %g must not exceed max %g", (double)p->lo,
                           (double)p->hi);
    duet__op_plan_like(plan, in[0]);
    return DUET_OK;
}

static int clamp_k(const duet__op_args *a) {
    const clamp_params *p = a->params;
    const float *x = a->in[0]->data;
    float *y = a->out->data;
    for (int64_t i = 0; i < a->out->numel; i++) {
        const float v = x[i];
        y[i] = v < p->lo ? p->lo : v > p->hi ? p->hi : v;
    }
    return DUET_OK;
}

static int clamp_backward_k(const duet__op_args *a) {
    const clamp_params *p = a->params;
    const float *x = a->in[0]->data, *g = a->gout;
    float *gx = a->gin[0];
    for (int64_t i = 0; i < a->out->numel; i++)
        if (x[i] >= p->lo && x[i] <= p->hi) gx[i] += g[i];
    return DUET_OK;
}

const duet__op_def duet__op_def_clamp = {
    .id = DUET__OP_CLAMP,
    .inputs = "x",
    .params_size = sizeof(clamp_params),
    .check = clamp_check,
    DUET__OP_CPU(clamp_k, clamp_backward_k),
};

int duet_clamp(duet_tensor *x, float lo, float hi, duet_tensor **out) {
    DUET_ASSERT(x != NULL && out != NULL);
    return DUET__OP_RUN(DUET__OP_CLAMP, (&(clamp_params){lo, hi}), out, x);
}
