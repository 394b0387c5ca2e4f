/* torch.clamp(x, min, max) (GLDecoder's out_act 'clip'): the forward
 * clamps, the backward passes the gradient where min <= x <= max (both
 * bounds included, as PyTorch's clamp_backward) and 0 elsewhere, read from
 * the input. */
#include "ops/ops_internal.h"

typedef struct clamp_ctx {
    float lo, hi;
} clamp_ctx;

static int clamp_backward(duet_node *node) {
    float *gx = duet_node_input_grad(node, 0);
    if (gx == NULL) return DUET_OK;
    const clamp_ctx *c = node->ctx;
    const float *x = node->inputs[0]->data, *g = node->output->grad;
    for (int64_t i = 0; i < node->output->numel; i++)
        if (x[i] >= c->lo && x[i] <= c->hi) gx[i] += g[i];
    return DUET_OK;
}

int duet_clamp(duet_tensor *x, float lo, float hi, duet_tensor **out) {
    DUET_ASSERT(x != NULL && out != NULL);
    DUET__OP_ON_CPU(out, "clamp", "x", x);
    if (!(lo <= hi))
        return duet__error(DUET_EINVAL, "clamp: min %g must not exceed max %g", lo, hi);
    duet_tensor *y = NULL;
    DUET_TRY(duet_tensor_create_uninit(x->ndim, x->shape, &y));
    for (int64_t i = 0; i < x->numel; i++) {
        const float v = x->data[i];
        y->data[i] = v < lo ? lo : v > hi ? hi : v;
    }
    clamp_ctx *c = NULL;
    if (duet_autograd_needs_record(1, &x)) {
        c = malloc(sizeof *c);
        if (c == NULL) {
            duet_tensor_release(y);
            return duet__error(DUET_ENOMEM, "clamp: out of memory recording the op");
        }
        *c = (clamp_ctx){lo, hi};
    }
    return duet__op_finish(y, "clamp", clamp_backward, c, free, 1, &x, out);
}
