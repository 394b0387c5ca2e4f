/* MMEditing's MSRResNet (mmedit/models/backbones/sr_backbones/sr_resnet.py)
 * with its ResidualBlockNoBN and PixelShufflePack (mmedit/models/common),
 * under the same names; EDSR (edsr.c) builds from the same two blocks. */
#include "models/models_internal.h"

/* Replaces *cur by m's output for it (releasing the old tensor). */
static int step(duet_module *m, duet_tensor **cur) {
    duet_tensor *next = NULL;
    int rc = duet_module_forward(m, *cur, &next);
    duet_autograd_release(*cur);
    *cur = next;
    return rc;
}

/* The activations and the residual additions run in place over the fresh
 * output of the conv before them (duet_leaky_relu_inplace and friends fall
 * back to copying when that output is shared): no new activation buffer,
 * one pass less over memory, the same values and gradients. */
static int step_lrelu(float slope, duet_tensor **cur) {
    duet_tensor *next = NULL;
    int rc = duet_leaky_relu_inplace(*cur, slope, &next);
    duet_autograd_release(*cur);
    *cur = next;
    return rc;
}

/* ---- ResidualBlockNoBN: x + conv2(relu(conv1(x))) * res_scale --------------- */

typedef struct resblock_impl {
    float res_scale;
} resblock_impl;

static int resblock_forward(duet_module *self, int nin, duet_tensor *const *in,
                            duet_tensor **out) {
    *out = NULL;
    if (nin != 1) return duet__error(DUET_EINVAL, "ResidualBlockNoBN takes one input");
    const resblock_impl *b = duet_module_impl(self);
    duet_tensor *h = duet_tensor_retain(in[0]), *r = NULL;
    int rc = step(duet_module_child_at(self, 0), &h);
    if (rc == DUET_OK) {
        duet_tensor *a = NULL;
        rc = duet_relu_inplace(h, &a);
        duet_tensor_release(h);
        h = a;
    }
    if (rc == DUET_OK) rc = step(duet_module_child_at(self, 1), &h);
    /* out * 1.0 is out: MSRResNet's blocks skip the scaling. */
    if (rc == DUET_OK && b->res_scale != 1.0f) {
        duet_tensor *s = NULL;
        rc = duet_scale(h, b->res_scale, &s);
        duet_tensor_release(h);
        h = s;
    }
    if (rc == DUET_OK) rc = duet_add_inplace(h, in[0], &r);
    duet_tensor_release(h);
    *out = r;
    return rc;
}

static const duet_module_type resblock_type = {"ResidualBlockNoBN", resblock_forward, free};

int duet__resblock_nobn_create(int mid, float res_scale, duet_rng *rng, duet_module **out) {
    *out = NULL;
    resblock_impl *b = malloc(sizeof *b);
    if (b == NULL) return duet__error(DUET_ENOMEM, "ResidualBlockNoBN: out of memory");
    b->res_scale = res_scale;
    duet_module *m = NULL;
    DUET_TRY(duet_module_create(&resblock_type, b, &m));
    const char *names[2] = {"conv1", "conv2"};
    for (int i = 0; i < 2; i++) {
        duet_module *conv = NULL;
        int rc = duet_conv2d_module_create(mid, mid, 3, 1, 1, true, rng, &conv);
        if (rc == DUET_OK) rc = duet_module_add_child(m, names[i], conv);
        if (rc != DUET_OK) {
            duet_module_destroy(m);
            return rc;
        }
    }
    /* The block's own init_weights (scale 0.1) runs for res_scale == 1 only
     * (MSRResNet); another res_scale keeps PyTorch's default init (EDSR). */
    int irc = res_scale == 1.0f ? duet_default_init_weights(m, 0.1f, rng) : DUET_OK;
    if (irc != DUET_OK) {
        duet_module_destroy(m);
        return irc;
    }
    *out = m;
    return DUET_OK;
}

/* ---- PixelShufflePack: pixel_shuffle(upsample_conv(x), scale) ------------- */

typedef struct pack_impl {
    int scale;
} pack_impl;

static int pack_forward(duet_module *self, int nin, duet_tensor *const *in, duet_tensor **out) {
    *out = NULL;
    if (nin != 1) return duet__error(DUET_EINVAL, "PixelShufflePack takes one input");
    const pack_impl *p = duet_module_impl(self);
    duet_tensor *h = NULL;
    DUET_TRY(duet_module_forward(duet_module_child_at(self, 0), in[0], &h));
    int rc = duet_pixel_shuffle(h, p->scale, out);
    duet_autograd_release(h); /* the conv output: neither backward reads it */
    return rc;
}

static const duet_module_type pack_type = {"PixelShufflePack", pack_forward, free};

int duet__pixel_shuffle_pack_create(int in_ch, int out_ch, int scale, int kernel, duet_rng *rng,
                                    duet_module **out) {
    *out = NULL;
    pack_impl *p = malloc(sizeof *p);
    if (p == NULL) return duet__error(DUET_ENOMEM, "PixelShufflePack: out of memory");
    p->scale = scale;
    duet_module *m = NULL, *conv = NULL;
    DUET_TRY(duet_module_create(&pack_type, p, &m));
    int rc = duet_conv2d_module_create(in_ch, out_ch * scale * scale, kernel, 1, (kernel - 1) / 2,
                                       true, rng, &conv);
    if (rc == DUET_OK) rc = duet_module_add_child(m, "upsample_conv", conv);
    if (rc != DUET_OK) {
        duet_module_destroy(m);
        return rc;
    }
    /* PixelShufflePack.init_weights: default_init_weights(self, 1). */
    rc = duet_default_init_weights(m, 1.0f, rng);
    if (rc != DUET_OK) {
        duet_module_destroy(m);
        return rc;
    }
    *out = m;
    return DUET_OK;
}

/* ---- MSRResNet ---------------------------------------------------------------- */

typedef struct msr_impl {
    duet_msrresnet_opts opts;
} msr_impl;

duet_msrresnet_opts duet_msrresnet_opts_default(void) {
    return (duet_msrresnet_opts){.in_channels = 3, .out_channels = 3, .mid_channels = 64,
                                 .num_blocks = 16, .upscale_factor = 4};
}

static int msr_forward(duet_module *self, int nin, duet_tensor *const *in, duet_tensor **out) {
    *out = NULL;
    if (nin != 1) return duet__error(DUET_EINVAL, "MSRResNet takes one input, got %d", nin);
    const msr_impl *g = duet_module_impl(self);
    duet_tensor *x = in[0];
    if (x->ndim != 4 || x->shape[1] != g->opts.in_channels) {
        char s[DUET_SHAPE_STR_MAX];
        return duet__error(DUET_ESHAPE, "MSRResNet: input %s; expected (N, %d, H, W)",
                           duet_shape_str(x, s, sizeof s), g->opts.in_channels);
    }
    duet_module *conv_first = duet_module_child(self, "conv_first");
    duet_module *trunk = duet_module_child(self, "trunk_net");
    duet_module *up1 = duet_module_child(self, "upsample1");
    duet_module *up2 = duet_module_child(self, "upsample2"); /* x4 only */
    duet_module *conv_hr = duet_module_child(self, "conv_hr");
    duet_module *conv_last = duet_module_child(self, "conv_last");
    DUET_ASSERT(conv_first && trunk && up1 && conv_hr && conv_last);

    /* feat = lrelu(conv_first(x)); out = trunk_net(feat); out = upsample(s);
     * out = conv_last(lrelu(conv_hr(out))) + bilinear(x). */
    duet_tensor *h = duet_tensor_retain(x), *up = NULL, *y = NULL;
    int rc = step(conv_first, &h);
    if (rc == DUET_OK) rc = step_lrelu(0.1f, &h);
    if (rc == DUET_OK) rc = step(trunk, &h);
    if (rc == DUET_OK) rc = step(up1, &h);
    if (rc == DUET_OK && up2 != NULL) rc = step(up2, &h);
    if (rc == DUET_OK) rc = step(conv_hr, &h);
    if (rc == DUET_OK) rc = step_lrelu(0.1f, &h);
    if (rc == DUET_OK) rc = step(conv_last, &h);
    if (rc == DUET_OK) rc = duet_upsample_bilinear(x, g->opts.upscale_factor, &up);
    if (rc == DUET_OK) rc = duet_add_inplace(h, up, &y);
    duet_tensor_release(h);
    duet_tensor_release(up);
    if (rc != DUET_OK) return duet__error_context(rc, "MSRResNet forward");
    *out = y;
    return DUET_OK;
}

static const duet_module_type msr_type = {"MSRResNet", msr_forward, free};

static int add_conv(duet_module *m, const char *name, int in, int out, duet_rng *rng) {
    duet_module *conv = NULL;
    DUET_TRY(duet_conv2d_module_create(in, out, 3, 1, 1, true, rng, &conv));
    return duet_module_add_child(m, name, conv);
}

int duet_msrresnet_create(const duet_msrresnet_opts *opts, duet_rng *rng, duet_module **out) {
    *out = NULL;
    const duet_msrresnet_opts o = *opts;
    if (o.in_channels < 1 || o.out_channels < 1 || o.mid_channels < 1 || o.num_blocks < 0)
        return duet__error(DUET_EINVAL, "MSRResNet: in %d, out %d, mid %d channels and %d "
                           "blocks; channels must be positive and blocks non-negative",
                           o.in_channels, o.out_channels, o.mid_channels, o.num_blocks);
    if (o.upscale_factor < 2 || o.upscale_factor > 4)
        return duet__error(DUET_EINVAL, "MSRResNet: unsupported scale factor %d; supported "
                           "ones are 2, 3 and 4", o.upscale_factor);
    msr_impl *impl = malloc(sizeof *impl);
    if (impl == NULL) return duet__error(DUET_ENOMEM, "MSRResNet: out of memory");
    impl->opts = o;
    duet_module *m = NULL, *trunk = NULL, *part = NULL;
    DUET_TRY(duet_module_create(&msr_type, impl, &m));
    int mid = o.mid_channels;
    int rc = add_conv(m, "conv_first", o.in_channels, mid, rng);
    if (rc == DUET_OK) rc = duet_sequential_create(&trunk);
    if (rc == DUET_OK) rc = duet_module_add_child(m, "trunk_net", trunk);
    for (int i = 0; i < o.num_blocks && rc == DUET_OK; i++) {
        rc = duet__resblock_nobn_create(mid, 1.0f, rng, &part);
        if (rc == DUET_OK) rc = duet_sequential_append(trunk, part);
    }
    int s1 = o.upscale_factor == 4 ? 2 : o.upscale_factor;
    if (rc == DUET_OK) rc = duet__pixel_shuffle_pack_create(mid, mid, s1, 3, rng, &part);
    if (rc == DUET_OK) rc = duet_module_add_child(m, "upsample1", part);
    if (rc == DUET_OK && o.upscale_factor == 4) {
        rc = duet__pixel_shuffle_pack_create(mid, mid, 2, 3, rng, &part);
        if (rc == DUET_OK) rc = duet_module_add_child(m, "upsample2", part);
    }
    if (rc == DUET_OK) rc = add_conv(m, "conv_hr", mid, mid, rng);
    if (rc == DUET_OK) rc = add_conv(m, "conv_last", mid, o.out_channels, rng);
    if (rc != DUET_OK) {
        duet_module_destroy(m);
        return rc;
    }
    /* MSRResNet.init_weights (MMEditing 0.x, run by the restorer after
     * construction): default_init_weights(m, 0.1) for conv_first, conv_hr
     * and conv_last only. The trunk's blocks were initialised with 0.1 by
     * their own constructor (ResidualBlockNoBN, res_scale 1) and the
     * upsamplers keep PixelShufflePack's own init_weights, scale 1. */
    const char *scaled[3] = {"conv_first", "conv_hr", "conv_last"};
    int irc = DUET_OK;
    for (int i = 0; i < 3 && irc == DUET_OK; i++) {
        duet_module *c = duet_module_child(m, scaled[i]);
        if (c != NULL) irc = duet_default_init_weights(c, 0.1f, rng);
    }
    if (irc != DUET_OK) {
        duet_module_destroy(m);
        return irc;
    }
    *out = m;
    return DUET_OK;
}
