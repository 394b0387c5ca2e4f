/* Dropout (nn.Dropout) with its mask drawn from duet's counter-based RNG.
 *
 * PyTorch draws bernoulli(1 - p) from its global generator; duet draws one
 * duet_rng_uniform per element, in element order, and keeps the element
 * when the draw is < 1 - p. The mask is then a pure function of the rng
 * state before the call (three integers), which a checkpoint saves, so a
 * resumed run drops the same elements bitwise. Kept elements are scaled by
 * 1/(1-p) computed in float, as ATen does. The backward multiplies by the
 * same saved factors (0 or 1/(1-p)). */
#include "ops/ops_internal.h"

typedef struct dropout_ctx {
    float *factor; /* numel floats: 0 or 1/(1-p) */
} dropout_ctx;

static void dropout_ctx_free(void *p) {
    dropout_ctx *c = p;
    if (c == NULL) return;
    free(c->factor);
    free(c);
}

/* factor (n) = draw < keep ? scale : 0, out (n) = x * factor */
static void dropout_forward(float *out, float *factor, const float *x, int64_t n, float keep,
                            float scale, duet_rng *rng) {
    for (int64_t i = 0; i < n; i++) {
        factor[i] = duet_rng_uniform(rng) < keep ? scale : 0.0f;
        out[i] = x[i] * factor[i];
    }
}

/* gx (n) += gout * factor */
static void dropout_backward_kernel(float *gx, const float *gout, const float *factor,
                                    int64_t n) {
    for (int64_t i = 0; i < n; i++) gx[i] += gout[i] * factor[i];
}

static int dropout_backward(duet_node *node) {
    const dropout_ctx *c = node->ctx;
    float *gx = duet_node_input_grad(node, 0);
    if (gx != NULL)
        dropout_backward_kernel(gx, node->output->grad, c->factor, node->output->numel);
    return DUET_OK;
}

int duet_dropout(duet_tensor *x, float p, bool training, duet_rng *rng, duet_tensor **out) {
    DUET_ASSERT(x != NULL && out != NULL);
    DUET__OP_ON_CPU(out, "dropout", "x", x);
    if (!(p >= 0.0f && p <= 1.0f))
        return duet__error(DUET_EINVAL, "dropout: probability %g must be in [0, 1]", (double)p);
    if (!training || p == 0.0f) {
        *out = duet_tensor_retain(x);
        return DUET_OK;
    }
    if (rng == NULL)
        return duet__error(DUET_EINVAL, "dropout: training mode needs an rng for the mask");
    const float keep = 1.0f - p;
    /* p == 1 keeps nothing; ATen's 1/(1-p) would be inf and 0 * inf NaN. */
    const float scale = keep > 0.0f ? 1.0f / keep : 0.0f;
    dropout_ctx *c = malloc(sizeof *c);
    float *factor = malloc((size_t)x->numel * sizeof(float));
    duet_tensor *y = NULL;
    int rc = c != NULL && factor != NULL
                 ? duet_tensor_create_uninit(x->ndim, x->shape, &y)
                 : duet__error(DUET_ENOMEM, "dropout: out of memory for the mask");
    if (rc != DUET_OK) {
        free(c);
        free(factor);
        return rc;
    }
    c->factor = factor;
    dropout_forward(y->data, factor, x->data, x->numel, keep, scale, rng);
    return duet__op_finish(y, "dropout", dropout_backward, c, dropout_ctx_free, 1, &x, out);
}
