/* Spectral normalisation of a weight (torch.nn.utils.spectral_norm, which
 * mmcv's ConvModule(with_spectral_norm=True) applies: DeepFillv2's
 * SN-PatchGAN). The weight W (O, ...) is viewed as a matrix (O, K); u (O)
 * and v (K) hold the power iteration's vectors between calls. In training,
 * n_power_iterations steps of v = normalize(W^T u), u = normalize(W v)
 * update u and v in place (no gradient flows through them, as PyTorch runs
 * them under no_grad); then sigma = u . (W v) and out = W / sigma, whose
 * gradient reaches W through both W and sigma:
 *   dW = G / sigma - (<G, W> / sigma^2) u v^T.
 * normalize(x) = x / max(||x||, eps), as F.normalize. Sums in double. */
#include "ops/ops_internal.h"

#include <math.h>
#include <stdlib.h>

typedef struct sn_ctx {
    double sigma;
    float *u, *v; /* copies of the vectors sigma used */
    int64_t o, k;
} sn_ctx;

static void sn_free(void *p) {
    sn_ctx *c = p;
    if (c == NULL) return;
    free(c->u);
    free(c->v);
    free(c);
}

static void normalize(float *x, const double *y, int64_t n, float eps) {
    double s = 0.0;
    for (int64_t i = 0; i < n; i++) s += y[i] * y[i];
    double norm = fmax(sqrt(s), (double)eps);
    for (int64_t i = 0; i < n; i++) x[i] = (float)(y[i] / norm);
}

/* y (o) = W v */
static void mat_vec(const float *w, const float *v, int64_t o, int64_t k, double *y) {
    for (int64_t i = 0; i < o; i++) {
        double s = 0.0;
        for (int64_t j = 0; j < k; j++) s += (double)w[i * k + j] * v[j];
        y[i] = s;
    }
}

/* y (k) = W^T u */
static void mat_t_vec(const float *w, const float *u, int64_t o, int64_t k, double *y) {
    for (int64_t j = 0; j < k; j++) y[j] = 0.0;
    for (int64_t i = 0; i < o; i++)
        for (int64_t j = 0; j < k; j++) y[j] += (double)w[i * k + j] * u[i];
}

static int sn_backward(duet_node *node) {
    const sn_ctx *c = node->ctx;
    float *gw = duet_node_input_grad(node, 0);
    if (gw == NULL) return DUET_OK; /* no gradient wanted (or the tape reports the failed allocation) */
    const float *g = node->output->grad, *w = node->inputs[0]->data;
    double gw_dot = 0.0;
    for (int64_t i = 0; i < c->o * c->k; i++) gw_dot += (double)g[i] * w[i];
    const double s = c->sigma, coef = gw_dot / (s * s);
    for (int64_t i = 0; i < c->o; i++)
        for (int64_t j = 0; j < c->k; j++) {
            int64_t n = i * c->k + j;
            gw[n] += (float)((double)g[n] / s - coef * c->u[i] * c->v[j]);
        }
    return DUET_OK;
}

int duet_spectral_norm(duet_tensor *w, duet_tensor *u, duet_tensor *v, bool update,
                       int n_power_iterations, float eps, duet_tensor **out) {
    DUET__OP_ON_CPU(out, "spectral_norm", "weight,u,v", w, u, v);
    const int64_t o = w->shape[0], k = w->numel / w->shape[0];
    char ws[DUET_SHAPE_STR_MAX], us[DUET_SHAPE_STR_MAX], vs[DUET_SHAPE_STR_MAX];
    if (w->ndim < 2 || u->numel != o || v->numel != k)
        return duet__error(DUET_ESHAPE, "spectral_norm: weight %s needs u of %lld and v of "
                           "%lld elements, got u %s and v %s",
                           duet_shape_str(w, ws, sizeof ws), (long long)o, (long long)k,
                           duet_shape_str(u, us, sizeof us), duet_shape_str(v, vs, sizeof vs));
    if (n_power_iterations < 0 || !(eps > 0))
        return duet__error(DUET_EINVAL, "spectral_norm: n_power_iterations must be >= 0 and "
                           "eps > 0, got %d and %g", n_power_iterations, (double)eps);
    double *tmp = malloc((size_t)(o > k ? o : k) * sizeof *tmp);
    sn_ctx *c = calloc(1, sizeof *c);
    duet_tensor *y = NULL;
    int rc = tmp == NULL || c == NULL ? duet__error(DUET_ENOMEM, "spectral_norm: out of memory")
                                      : duet_tensor_create_uninit(w->ndim, w->shape, &y);
    if (rc == DUET_OK) {
        c->o = o, c->k = k;
        c->u = malloc((size_t)o * sizeof *c->u);
        c->v = malloc((size_t)k * sizeof *c->v);
        if (c->u == NULL || c->v == NULL) rc = duet__error(DUET_ENOMEM, "spectral_norm: out of memory");
    }
    if (rc == DUET_OK) {
        for (int it = 0; update && it < n_power_iterations; it++) {
            mat_t_vec(w->data, u->data, o, k, tmp);
            normalize(v->data, tmp, k, eps);
            mat_vec(w->data, v->data, o, k, tmp);
            normalize(u->data, tmp, o, eps);
        }
        memcpy(c->u, u->data, (size_t)o * sizeof *c->u);
        memcpy(c->v, v->data, (size_t)k * sizeof *c->v);
        mat_vec(w->data, c->v, o, k, tmp);
        double s = 0.0;
        for (int64_t i = 0; i < o; i++) s += (double)c->u[i] * tmp[i];
        c->sigma = s;
        if (!(s != 0.0) || !isfinite(s))
            rc = duet__error(DUET_ENUMERIC, "spectral_norm: sigma = %g for weight %s (a zero "
                             "or non-finite weight?)", s, duet_shape_str(w, ws, sizeof ws));
    }
    free(tmp);
    if (rc != DUET_OK) {
        sn_free(c);
        duet_tensor_release(y);
        return rc;
    }
    for (int64_t i = 0; i < w->numel; i++) y->data[i] = (float)(w->data[i] / c->sigma);
    return duet__op_finish_unread(
        duet__op_finish(y, "spectral_norm", sn_backward, c, sn_free, 1, &w, out), out);
}
