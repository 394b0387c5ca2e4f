/* MMEditing's UNetDiscriminatorWithSpectralNorm
 * (mmedit/models/components/discriminators/unet_disc.py), Real-ESRGAN's
 * discriminator, under the same names: conv_0, conv_1..conv_8 under
 * spectral_norm (duet_sn_conv2d_module_create: weight_orig, weight_u,
 * weight_v), conv_9. Its forward is MMEditing's line by line. */
#include "models/models_internal.h"

#include <stdlib.h>

typedef struct unet_disc {
    duet_unet_disc_sn_opts opts;
} unet_disc;

duet_unet_disc_sn_opts duet_unet_disc_sn_opts_default(void) {
    return (duet_unet_disc_sn_opts){.in_channels = 3, .mid_channels = 64,
                                    .skip_connection = true};
}

/* out = lrelu(conv_<i>(x), 0.2). */
static int conv_lrelu(duet_module *self, int i, duet_tensor *x, duet_tensor **out) {
    char name[8] = "conv_0";
    name[5] = (char)('0' + i);
    duet_module *conv = duet_module_child(self, name);
    DUET_ASSERT(conv != NULL);
    duet_tensor *h = NULL;
    int rc = duet_module_forward(conv, x, &h);
    /* The convolution's output is fresh: LeakyReLU runs in place. */
    if (rc == DUET_OK) rc = duet_leaky_relu_inplace(h, 0.2f, out);
    duet_tensor_release(h);
    return rc;
}

/* out = lrelu(conv_<i>(upsample(x))) (+ skip). */
static int up_block(duet_module *self, int i, duet_tensor *x, duet_tensor *skip,
                    duet_tensor **out) {
    duet_tensor *u = NULL, *h = NULL;
    int rc = duet_upsample_bilinear(x, 2, &u);
    if (rc == DUET_OK) rc = conv_lrelu(self, i, u, &h);
    duet_tensor_release(u);
    if (rc == DUET_OK && skip != NULL) rc = duet_add(h, skip, out);
    else if (rc == DUET_OK) *out = duet_tensor_retain(h);
    duet_tensor_release(h);
    return rc;
}

static int unet_disc_forward(duet_module *self, int nin, duet_tensor *const *in,
                             duet_tensor **out) {
    *out = NULL;
    if (nin != 1)
        return duet__error(DUET_EINVAL, "UNetDiscriminatorWithSpectralNorm takes one input, "
                           "got %d", nin);
    const unet_disc *d = duet_module_impl(self);
    duet_tensor *x = in[0];
    if (x->ndim != 4 || x->shape[1] != d->opts.in_channels || x->shape[2] % 8 != 0 ||
        x->shape[3] % 8 != 0) {
        char s[DUET_SHAPE_STR_MAX];
        return duet__error(DUET_ESHAPE, "UNetDiscriminatorWithSpectralNorm: input %s; expected "
                           "(N, %d, H, W) with H and W multiples of 8 (three stride-2 "
                           "convolutions, then three x2 upsamplings added to them)",
                           duet_shape_str(x, s, sizeof s), d->opts.in_channels);
    }
    const bool skip = d->opts.skip_connection;
    duet_tensor *f0 = NULL, *f1 = NULL, *f2 = NULL, *f3 = NULL, *f4 = NULL, *f5 = NULL;
    duet_tensor *f6 = NULL, *f7 = NULL, *f8 = NULL;
    int rc = conv_lrelu(self, 0, x, &f0);
    if (rc == DUET_OK) rc = conv_lrelu(self, 1, f0, &f1);
    if (rc == DUET_OK) rc = conv_lrelu(self, 2, f1, &f2);
    if (rc == DUET_OK) rc = conv_lrelu(self, 3, f2, &f3);
    if (rc == DUET_OK) rc = up_block(self, 4, f3, skip ? f2 : NULL, &f4);
    if (rc == DUET_OK) rc = up_block(self, 5, f4, skip ? f1 : NULL, &f5);
    if (rc == DUET_OK) rc = up_block(self, 6, f5, skip ? f0 : NULL, &f6);
    if (rc == DUET_OK) rc = conv_lrelu(self, 7, f6, &f7);
    if (rc == DUET_OK) rc = conv_lrelu(self, 8, f7, &f8);
    if (rc == DUET_OK) rc = duet_module_forward(duet_module_child(self, "conv_9"), f8, out);
    duet_tensor *all[] = {f0, f1, f2, f3, f4, f5, f6, f7, f8};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) duet_tensor_release(all[i]);
    if (rc != DUET_OK) return duet__error_context(rc, "UNetDiscriminatorWithSpectralNorm forward");
    return DUET_OK;
}

static const duet_module_type unet_disc_type = {"UNetDiscriminatorWithSpectralNorm",
                                                unet_disc_forward, free};

int duet_unet_disc_sn_create(const duet_unet_disc_sn_opts *opts, duet_rng *rng,
                             duet_module **out) {
    *out = NULL;
    const duet_unet_disc_sn_opts o = *opts;
    if (o.in_channels < 1 || o.mid_channels < 1 || o.mid_channels > (1 << 20))
        return duet__error(DUET_EINVAL, "UNetDiscriminatorWithSpectralNorm: in_channels %d and "
                           "mid_channels %d must be positive", o.in_channels, o.mid_channels);
    unet_disc *impl = calloc(1, sizeof *impl);
    if (impl == NULL)
        return duet__error(DUET_ENOMEM, "UNetDiscriminatorWithSpectralNorm: out of memory");
    impl->opts = o;
    duet_module *m = NULL, *conv = NULL;
    DUET_TRY(duet_module_create(&unet_disc_type, impl, &m));
    const int c = o.mid_channels;
    /* MMEditing's constructor order: conv_0, conv_1..3 (down), conv_4..6
     * (up), conv_7, conv_8, conv_9; each spectral_norm draws u then v right
     * after its Conv2d's init. */
    static const struct { int in, out, kernel, stride; } sn[8] = {
        {1, 2, 4, 2}, {2, 4, 4, 2}, {4, 8, 4, 2}, {8, 4, 3, 1},
        {4, 2, 3, 1}, {2, 1, 3, 1}, {1, 1, 3, 1}, {1, 1, 3, 1}};
    int rc = duet_conv2d_module_create(o.in_channels, c, 3, 1, 1, true, rng, &conv);
    if (rc == DUET_OK) rc = duet_module_add_child(m, "conv_0", conv);
    for (int i = 0; i < 8 && rc == DUET_OK; i++) {
        char name[8] = "conv_1";
        name[5] = (char)('1' + i);
        rc = duet_sn_conv2d_module_create(c * sn[i].in, c * sn[i].out, sn[i].kernel,
                                          sn[i].stride, 1, false, 1e-12f, rng, &conv);
        if (rc == DUET_OK) rc = duet_module_add_child(m, name, conv);
    }
    if (rc == DUET_OK) rc = duet_conv2d_module_create(c, 1, 3, 1, 1, true, rng, &conv);
    if (rc == DUET_OK) rc = duet_module_add_child(m, "conv_9", conv);
    if (rc != DUET_OK) {
        duet_module_destroy(m);
        return duet__error_context(rc, "UNetDiscriminatorWithSpectralNorm");
    }
    *out = m;
    return DUET_OK;
}
