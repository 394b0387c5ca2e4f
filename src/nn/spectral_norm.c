/* Conv2d under torch.nn.utils.spectral_norm (mmcv's ConvModule with
 * with_spectral_norm=True: DeepFillv2's SN-PatchGAN discriminator). The
 * module is a "Conv2d" with PyTorch's names after spectral_norm(conv):
 * parameters bias and weight_orig, buffers weight_u (O) and weight_v
 * (C*K*K); each forward convolves with duet_spectral_norm(weight_orig),
 * updating weight_u and weight_v by one power iteration in training mode
 * only, as PyTorch does. */
#include "duet/nn.h"
#include "duet/ops.h"

#include <math.h>
#include <stdlib.h>

typedef struct sn_conv_impl {
    int stride, padding;
    float eps;
} sn_conv_impl;

static int sn_conv_forward(duet_module *self, int nin, duet_tensor *const *in,
                           duet_tensor **out) {
    *out = NULL;
    if (nin != 1)
        return duet__error(DUET_EINVAL, "Conv2d (spectral norm) takes one input, got %d", nin);
    const sn_conv_impl *c = duet_module_impl(self);
    duet_tensor *w = NULL;
    DUET_TRY(duet_spectral_norm(duet_module_param(self, "weight_orig"),
                                duet_module_buffer(self, "weight_u"),
                                duet_module_buffer(self, "weight_v"),
                                duet_module_is_training(self), 1, c->eps, &w));
    int rc = duet_conv2d(in[0], w, duet_module_param(self, "bias"), c->stride, c->padding, out);
    duet_tensor_release(w);
    return rc;
}

static const duet_module_type sn_conv_type = {"Conv2d", sn_conv_forward, free};

/* n values of N(0, 1) from rng, scaled to unit length (F.normalize). */
static int unit_normal(int64_t n, float eps, duet_rng *rng, duet_tensor **out) {
    DUET_TRY(duet_tensor_create(1, (int64_t[]){n}, out));
    double s = 0.0;
    for (int64_t i = 0; i < n; i++) {
        (*out)->data[i] = duet_rng_normal(rng);
        s += (double)(*out)->data[i] * (*out)->data[i];
    }
    double norm = fmax(sqrt(s), (double)eps);
    for (int64_t i = 0; i < n; i++) (*out)->data[i] = (float)((*out)->data[i] / norm);
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
    duet_module *conv = NULL, *m = NULL;
    DUET_TRY(duet_conv2d_module_create(in_channels, out_channels, kernel, stride, padding, bias,
                                       rng, &conv));
    sn_conv_impl *c = malloc(sizeof *c);
    int rc = c == NULL ? duet__error(DUET_ENOMEM, "Conv2d (spectral norm): out of memory")
                       : DUET_OK;
    if (rc == DUET_OK) {
        *c = (sn_conv_impl){stride, padding, eps};
        rc = duet_module_create(&sn_conv_type, c, &m);
    }
    duet_tensor *w = duet_module_param(conv, "weight"), *b = duet_module_param(conv, "bias");
    if (rc == DUET_OK && b != NULL) rc = duet_module_add_param(m, "bias", duet_tensor_retain(b));
    if (rc == DUET_OK) rc = duet_module_add_param(m, "weight_orig", duet_tensor_retain(w));
    duet_tensor *u = NULL, *v = NULL;
    if (rc == DUET_OK) rc = unit_normal(out_channels, eps, rng, &u);
    if (rc == DUET_OK) rc = duet_module_add_buffer(m, "weight_u", u, false);
    if (rc == DUET_OK) rc = unit_normal(w->numel / out_channels, eps, rng, &v);
    if (rc == DUET_OK) rc = duet_module_add_buffer(m, "weight_v", v, false);
    duet_module_destroy(conv);
    if (rc != DUET_OK) {
        duet_module_destroy(m);
        return rc;
    }
    *out = m;
    return DUET_OK;
}
