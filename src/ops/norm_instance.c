/* Instance normalisation (PyTorch's instance_norm with use_input_stats and
 * no running statistics, as nn.InstanceNorm2d's defaults and MMEditing's
 * norm_cfg=dict(type='IN')).
 *
 * Each (sample, channel) plane of M = H*W values is normalised by its own
 * mean and biased variance: xhat = (x - mean) * rstd, rstd = 1/sqrt(var +
 * eps), y = xhat * weight[c] + bias[c]. With g = dy * weight[c]:
 *   dx = rstd * (g - mean(g) - xhat * mean(g * xhat))
 *   dweight[c] += sum over samples and pixels of dy * xhat
 *   dbias[c]   += sum of dy
 * The forward keeps mean and rstd per plane (2*N*C floats); xhat is
 * recomputed from the saved input. */
#include "ops/ops_internal.h"

#include <inttypes.h>
#include <math.h>

typedef struct inorm_ctx {
    int64_t planes;     /* N*C */
    float *mean, *rstd; /* (N*C) each, one allocation */
} inorm_ctx;

static void inorm_ctx_free(void *p) {
    inorm_ctx *c = p;
    if (c == NULL) return;
    free(c->mean);
    free(c);
}

/* out (M) = (x - mean) * rstd * a + b for one plane; statistics in double. */
static void inorm_plane_forward(float *out, float *mean_out, float *rstd_out, const float *x,
                                int64_t m, float a, float b, float eps) {
    const double mean = duet__sum_f32(x, m) / (double)m;
    double ss = 0.0;
    for (int64_t i = 0; i < m; i++) {
        const double d = x[i] - mean;
        ss += d * d;
    }
    const float rstd = (float)(1.0 / sqrt(ss / (double)m + (double)eps));
    const float mf = (float)mean;
    for (int64_t i = 0; i < m; i++) out[i] = (x[i] - mf) * rstd * a + b;
    *mean_out = mf;
    *rstd_out = rstd;
}

/* One plane's backward: gx (M) += rstd * a * (dy - mean(dy) - xhat * mean(dy * xhat));
 * *sdy and *sdyx get sum(dy) and sum(dy * xhat) for the affine gradients. */
static void inorm_plane_backward(float *gx, double *sdy, double *sdyx, const float *dy,
                                 const float *x, int64_t m, float mean, float rstd, float a) {
    double s1 = 0.0, s2 = 0.0;
    for (int64_t i = 0; i < m; i++) {
        const double xh = (double)(x[i] - mean) * rstd;
        s1 += dy[i];
        s2 += dy[i] * xh;
    }
    *sdy = s1;
    *sdyx = s2;
    if (gx == NULL) return;
    const float mdy = (float)(s1 / (double)m), mdyx = (float)(s2 / (double)m);
    const float k = rstd * a;
    for (int64_t i = 0; i < m; i++) {
        const float xh = (x[i] - mean) * rstd;
        gx[i] += k * (dy[i] - mdy - xh * mdyx);
    }
}

static int instance_norm2d_backward(duet_node *node) {
    const inorm_ctx *c = node->ctx;
    const duet_tensor *x = node->inputs[0], *wt = node->inputs[1];
    const int64_t ch = x->shape[1], m = x->shape[2] * x->shape[3];
    float *gx = duet_node_input_grad(node, 0);
    float *gw = wt != NULL ? duet_node_input_grad(node, 1) : NULL;
    float *gb = node->inputs[2] != NULL ? duet_node_input_grad(node, 2) : NULL;
    const float *dy = node->output->grad;
    for (int64_t q = 0; q < c->planes; q++) {
        const int64_t cc = q % ch;
        double sdy, sdyx;
        inorm_plane_backward(gx != NULL ? gx + q * m : NULL, &sdy, &sdyx, dy + q * m,
                             x->data + q * m, m, c->mean[q], c->rstd[q],
                             wt != NULL ? wt->data[cc] : 1.0f);
        if (gw != NULL) gw[cc] += (float)sdyx;
        if (gb != NULL) gb[cc] += (float)sdy;
    }
    return DUET_OK;
}

static int inorm_check(const duet_tensor *x, const duet_tensor *w, const duet_tensor *b,
                       float eps) {
    char sx[DUET_SHAPE_STR_MAX], sp[DUET_SHAPE_STR_MAX];
    duet_shape_str(x, sx, sizeof sx);
    if (x->ndim != 4)
        return duet__error(DUET_ESHAPE, "instance_norm2d: input %s must be 4-D (N, C, H, W)",
                           sx);
    if (x->shape[2] * x->shape[3] < 2)
        return duet__error(DUET_ESHAPE, "instance_norm2d: input %s has one pixel per plane; "
                           "instance statistics need more than 1 spatial element", sx);
    if ((w == NULL) != (b == NULL))
        return duet__error(DUET_EINVAL, "instance_norm2d: weight and bias must both be given "
                           "(affine) or both be NULL");
    for (int i = 0; i < 2; i++) {
        const duet_tensor *t = i == 0 ? w : b;
        if (t != NULL && (t->ndim != 1 || t->shape[0] != x->shape[1]))
            return duet__error(DUET_ESHAPE, "instance_norm2d: %s %s does not match input %s "
                               "(want [%" PRId64 "])", i == 0 ? "weight" : "bias",
                               duet_shape_str(t, sp, sizeof sp), sx, x->shape[1]);
    }
    if (!(eps > 0.0f))
        return duet__error(DUET_EINVAL, "instance_norm2d: eps %g must be positive", (double)eps);
    return DUET_OK;
}

int duet_instance_norm2d(duet_tensor *x, duet_tensor *weight, duet_tensor *bias, float eps,
                         duet_tensor **out) {
    DUET_ASSERT(x != NULL && out != NULL);
    DUET__OP_ON_CPU(out, "instance_norm2d", "x,weight,bias", x, weight, bias);
    DUET_TRY(inorm_check(x, weight, bias, eps));
    const int64_t ch = x->shape[1], planes = x->shape[0] * ch, m = x->shape[2] * x->shape[3];
    inorm_ctx *c = malloc(sizeof *c);
    float *stats = malloc((size_t)(2 * planes) * sizeof(float));
    duet_tensor *y = NULL;
    int rc = c != NULL && stats != NULL ? duet_tensor_create_uninit(4, x->shape, &y)
                                        : duet__error(DUET_ENOMEM, "instance_norm2d: out of "
                                                      "memory for %" PRId64 " planes", planes);
    if (rc != DUET_OK) {
        free(c);
        free(stats);
        return rc;
    }
    *c = (inorm_ctx){planes, stats, stats + planes};
    for (int64_t q = 0; q < planes; q++) {
        const int64_t cc = q % ch;
        inorm_plane_forward(y->data + q * m, &c->mean[q], &c->rstd[q], x->data + q * m, m,
                            weight != NULL ? weight->data[cc] : 1.0f,
                            bias != NULL ? bias->data[cc] : 0.0f, eps);
    }
    duet_tensor *ins[3] = {x, weight, bias};
    return duet__op_finish(y, "instance_norm2d", instance_norm2d_backward, c, inorm_ctx_free, 3,
                            ins, out);
}
