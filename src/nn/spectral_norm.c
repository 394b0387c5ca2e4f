/* Conv2d and Linear under torch.nn.utils.spectral_norm (mmcv's ConvModule
 * and MMEditing's LinearModule with with_spectral_norm=True: DeepFillv2's
 * SN-PatchGAN discriminator). The module is a "Conv2d" or "Linear" with
 * PyTorch's names after spectral_norm(layer): parameters bias and
 * weight_orig, buffers weight_u (O) and weight_v (C*K*K, or IN); each
 * forward runs the layer with duet_spectral_norm(weight_orig), updating
 * weight_u and weight_v by one power iteration in training mode only, as
 * PyTorch does. */
#include "duet/nn.h"
#include "duet/ops.h"

#include <math.h>
#include <stdlib.h>

typedef struct sn_impl {
    bool linear; /* a Linear (weight_orig (OUT, IN)), else a Conv2d */
    int stride, padding;
    float eps;
} sn_impl;

static int sn_forward(duet_module *self, int nin, duet_tensor *const *in, duet_tensor **out) {
    *out = NULL;
    const sn_impl *c = duet_module_impl(self);
    if (nin != 1)
        return duet__error(DUET_EINVAL, "%s (spectral norm) takes one input, got %d",
                           c->linear ? "Linear" : "Conv2d", nin);
    duet_tensor *w = NULL;
    DUET_TRY(duet_spectral_norm(duet_module_param(self, "weight_orig"),
                                duet_module_buffer(self, "weight_u"),
                                duet_module_buffer(self, "weight_v"),
                                duet_module_is_training(self), 1, c->eps, &w));
    int rc = c->linear ? duet_linear(in[0], w, duet_module_param(self, "bias"), out)
                       : duet_conv2d(in[0], w, duet_module_param(self, "bias"), c->stride,
                                     c->padding, out);
    duet_tensor_release(w);
    return rc;
}

static const duet_module_type sn_conv_type = {"Conv2d", sn_forward, free};
static const duet_module_type sn_linear_type = {"Linear", sn_forward, free};

/* n values of N(0, 1) from rng, scaled to unit length (F.normalize). */
static int unit_normal(int64_t n, float eps, duet_rng *rng, duet_tensor **out) {
    float *d = malloc((size_t)n * sizeof *d);
    if (d == NULL) return duet__error(DUET_ENOMEM, "spectral norm: out of memory for %lld values",
                                      (long long)n);
    double s = 0.0;
    for (int64_t i = 0; i < n; i++) {
        d[i] = duet_rng_normal(rng);
        s += (double)d[i] * d[i];
    }
    double norm = fmax(sqrt(s), (double)eps);
    for (int64_t i = 0; i < n; i++) d[i] = (float)(d[i] / norm);
    int rc = duet_tensor_from_data(1, (int64_t[]){n}, d, out);
    free(d);
    return rc;
}

/* The module of `type` that spectral_norm(plain) makes: plain's bias, its
 * weight as weight_orig, then u (OUT) and v (numel / OUT) drawn from rng in
 * PyTorch's order. plain is consumed; impl is owned (freed on failure). */
static int sn_wrap(duet_module *plain, const duet_module_type *type, sn_impl *impl,
                   duet_rng *rng, duet_module **out) {
    *out = NULL;
    duet_module *m = NULL;
    int rc = impl == NULL ? duet__error(DUET_ENOMEM, "%s (spectral norm): out of memory",
                                        type->name)
                          : duet_module_create(type, impl, &m);
    duet_tensor *w = duet_module_param(plain, "weight"), *b = duet_module_param(plain, "bias");
    if (rc == DUET_OK && b != NULL) rc = duet_module_add_param(m, "bias", duet_tensor_retain(b));
    if (rc == DUET_OK) rc = duet_module_add_param(m, "weight_orig", duet_tensor_retain(w));
    duet_tensor *u = NULL, *v = NULL;
    if (rc == DUET_OK) rc = unit_normal(w->shape[0], impl->eps, rng, &u);
    if (rc == DUET_OK) rc = duet_module_add_buffer(m, "weight_u", u, false);
    if (rc == DUET_OK) rc = unit_normal(w->numel / w->shape[0], impl->eps, rng, &v);
    if (rc == DUET_OK) rc = duet_module_add_buffer(m, "weight_v", v, false);
    duet_module_destroy(plain);
    if (rc != DUET_OK) {
        duet_module_destroy(m);
        return rc;
    }
    *out = m;
    return DUET_OK;
}

int duet_sn_conv2d_module_create(int in_channels, int out_channels, int kernel, int stride,
                                 int padding, bool bias, float eps, duet_rng *rng,
                                 duet_module **out) {
    *out = NULL;
    if (!(eps > 0))
        return duet__error(DUET_EINVAL, "Conv2d (spectral norm): eps must be > 0, got %g",
                           (double)eps);
    /* A plain Conv2d first: the same init and draws as PyTorch's Conv2d,
     * whose weight spectral_norm then renames weight_orig. */
    duet_module *conv = NULL;
    DUET_TRY(duet_conv2d_module_create(in_channels, out_channels, kernel, stride, padding, bias,
                                       rng, &conv));
    sn_impl *c = malloc(sizeof *c);
    if (c != NULL) *c = (sn_impl){.linear = false, .stride = stride, .padding = padding, .eps = eps};
    return sn_wrap(conv, &sn_conv_type, c, rng, out);
}

int duet_sn_linear_module_create(int in_features, int out_features, bool bias, float eps,
                                 duet_rng *rng, duet_module **out) {
    *out = NULL;
    if (!(eps > 0))
        return duet__error(DUET_EINVAL, "Linear (spectral norm): eps must be > 0, got %g",
                           (double)eps);
    duet_module *lin = NULL;
    DUET_TRY(duet_linear_module_create(in_features, out_features, bias, rng, &lin));
    sn_impl *c = malloc(sizeof *c);
    if (c != NULL) *c = (sn_impl){.linear = true, .eps = eps};
    return sn_wrap(lin, &sn_linear_type, c, rng, out);
}
