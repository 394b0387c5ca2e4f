/* MMEditing's RRDBNet (mmedit/models/backbones/sr_backbones/rrdb_net.py),
 * ESRGAN's generator: conv_first, body.<i> (RRDB: rdb1..rdb3, each a
 * ResidualDenseBlock conv1..conv5), conv_body, nearest x2 + conv_up1,
 * nearest x2 + conv_up2, conv_hr, conv_last; LeakyReLU 0.2 throughout.
 * Unlike MSRResNet there is no global skip from a bilinear upsampled input. */
#include "duet/models.h"

#include <stdio.h>

/* *cur = m(*cur), releasing the old tensor. */
static int step(duet_module *m, duet_tensor **cur) {
    duet_tensor *next = NULL;
    int rc = duet_module_forward(m, *cur, &next);
    duet_tensor_release(*cur);
    *cur = next;
    return rc;
}

/* *cur = lrelu(*cur, 0.2), in place over a fresh conv output (MMEditing's
 * LeakyReLU(inplace=True)); the values and gradients are the copying op's. */
static int step_lrelu(duet_tensor **cur) {
    duet_tensor *next = NULL;
    int rc = duet_leaky_relu_inplace(*cur, 0.2f, &next);
    duet_tensor_release(*cur);
    *cur = next;
    return rc;
}

/* out = h * 0.2 + x, consuming h: the dense blocks' and RRDB's residual
 * scaling. The scaled copy is fresh, so the addition runs in place on it. */
static int residual_02(duet_tensor *h, duet_tensor *x, duet_tensor **out) {
    duet_tensor *s = NULL;
    int rc = duet_scale(h, 0.2f, &s);
    duet_tensor_release(h);
    if (rc == DUET_OK) rc = duet_add_inplace(s, x, out);
    duet_tensor_release(s);
    return rc;
}

/* ---- ResidualDenseBlock ------------------------------------------------------------
 * x1 = lrelu(conv1(x)), x2 = lrelu(conv2([x, x1])), ..., x5 = conv5([x, x1..x4]);
 * out = x5 * 0.2 + x. conv_i maps mid + (i-1) * growth channels to growth
 * (conv5: to mid). */

static int rdb_forward(duet_module *self, int nin, duet_tensor *const *in, duet_tensor **out) {
    *out = NULL;
    if (nin != 1) return duet__error(DUET_EINVAL, "ResidualDenseBlock takes one input");
    duet_tensor *feats[5] = {in[0], NULL, NULL, NULL, NULL};
    duet_tensor *cat = NULL, *h = NULL;
    int rc = DUET_OK;
    for (int i = 0; i < 5 && rc == DUET_OK; i++) {
        /* torch.cat((x, x1, ..., x_i), 1); conv1 reads x itself. */
        if (i == 0) {
            cat = duet_tensor_retain(in[0]);
        } else {
            rc = duet_concat_channels(i + 1, feats, &cat);
            if (rc != DUET_OK) break;
        }
        h = cat;
        rc = step(duet_module_child_at(self, i), &h);
        if (rc == DUET_OK && i < 4) rc = step_lrelu(&h);
        if (rc != DUET_OK) break;
        if (i < 4) {
            feats[i + 1] = h;
            h = NULL;
        }
    }
    for (int i = 1; i < 5; i++) duet_tensor_release(feats[i]);
    if (rc != DUET_OK) {
        duet_tensor_release(h);
        return rc;
    }
    return residual_02(h, in[0], out);
}

static const duet_module_type rdb_type = {"ResidualDenseBlock", rdb_forward, NULL};

static int rdb_create(duet_module **out, int mid, int growth, duet_rng *rng) {
    DUET_TRY(duet_module_create(&rdb_type, NULL, out));
    int rc = DUET_OK;
    for (int i = 0; i < 5 && rc == DUET_OK; i++) {
        char name[8];
        snprintf(name, sizeof name, "conv%d", i + 1);
        duet_module *conv = NULL;
        rc = duet_conv2d_module_create(mid + i * growth, i == 4 ? mid : growth, 3, 1, 1, true,
                                       rng, &conv);
        if (rc == DUET_OK) rc = duet_module_add_child(*out, name, conv);
    }
    if (rc != DUET_OK) {
        duet_module_destroy(*out);
        *out = NULL;
        return rc;
    }
    /* ResidualDenseBlock.init_weights, run by its constructor:
     * default_init_weights(conv_i, 0.1) for each of the five convs. */
    rc = duet_default_init_weights(*out, 0.1f, rng);
    if (rc != DUET_OK) {
        duet_module_destroy(*out);
        *out = NULL;
    }
    return rc;
}

/* ---- RRDB: rdb3(rdb2(rdb1(x))) * 0.2 + x ----------------------------------------- */

static int rrdb_forward(duet_module *self, int nin, duet_tensor *const *in, duet_tensor **out) {
    *out = NULL;
    if (nin != 1) return duet__error(DUET_EINVAL, "RRDB takes one input");
    duet_tensor *h = duet_tensor_retain(in[0]);
    int rc = DUET_OK;
    for (int i = 0; i < 3 && rc == DUET_OK; i++) rc = step(duet_module_child_at(self, i), &h);
    if (rc != DUET_OK) {
        duet_tensor_release(h);
        return rc;
    }
    return residual_02(h, in[0], out);
}

static const duet_module_type rrdb_type = {"RRDB", rrdb_forward, NULL};

static int rrdb_create(duet_module **out, int mid, int growth, duet_rng *rng) {
    DUET_TRY(duet_module_create(&rrdb_type, NULL, out));
    int rc = DUET_OK;
    for (int i = 0; i < 3 && rc == DUET_OK; i++) {
        char name[8];
        snprintf(name, sizeof name, "rdb%d", i + 1);
        duet_module *rdb = NULL;
        rc = rdb_create(&rdb, mid, growth, rng);
        if (rc == DUET_OK) rc = duet_module_add_child(*out, name, rdb);
    }
    if (rc != DUET_OK) {
        duet_module_destroy(*out);
        *out = NULL;
    }
    return rc;
}

/* ---- RRDBNet ----------------------------------------------------------------------- */

typedef struct rrdbnet_impl {
    duet_rrdbnet_opts opts;
} rrdbnet_impl;

duet_rrdbnet_opts duet_rrdbnet_opts_default(void) {
    return (duet_rrdbnet_opts){.in_channels = 3, .out_channels = 3, .mid_channels = 64,
                               .num_blocks = 23, .growth_channels = 32, .upscale_factor = 4};
}

static int rrdbnet_forward(duet_module *self, int nin, duet_tensor *const *in,
                           duet_tensor **out) {
    *out = NULL;
    if (nin != 1) return duet__error(DUET_EINVAL, "RRDBNet takes one input, got %d", nin);
    const rrdbnet_impl *g = duet_module_impl(self);
    duet_tensor *x = in[0];
    if (x->ndim != 4 || x->shape[1] != g->opts.in_channels) {
        char s[DUET_SHAPE_STR_MAX];
        return duet__error(DUET_ESHAPE, "RRDBNet: input %s; expected (N, %d, H, W)",
                           duet_shape_str(x, s, sizeof s), g->opts.in_channels);
    }
    duet_module *conv_first = duet_module_child(self, "conv_first");
    duet_module *body = duet_module_child(self, "body");
    duet_module *conv_body = duet_module_child(self, "conv_body");
    duet_module *up[2] = {duet_module_child(self, "conv_up1"), duet_module_child(self, "conv_up2")};
    duet_module *conv_hr = duet_module_child(self, "conv_hr");
    duet_module *conv_last = duet_module_child(self, "conv_last");
    DUET_ASSERT(conv_first && body && conv_body && up[0] && up[1] && conv_hr && conv_last);

    /* feat = conv_first(x); feat = feat + conv_body(body(feat));
     * feat = lrelu(conv_up1(nearest2(feat))); feat = lrelu(conv_up2(nearest2(feat)));
     * out = conv_last(lrelu(conv_hr(feat))). */
    duet_tensor *feat = duet_tensor_retain(x), *h = NULL, *sum = NULL;
    int rc = step(conv_first, &feat);
    if (rc == DUET_OK) {
        h = duet_tensor_retain(feat);
        rc = step(body, &h);
    }
    if (rc == DUET_OK) rc = step(conv_body, &h);
    /* conv_body's output is fresh: the skip addition runs in place on it. */
    if (rc == DUET_OK) rc = duet_add_inplace(h, feat, &sum);
    duet_tensor_release(h);
    duet_tensor_release(feat);
    feat = sum;
    for (int i = 0; i < 2 && rc == DUET_OK; i++) {
        duet_tensor *u = NULL;
        rc = duet_upsample_nearest(feat, 2, &u);
        duet_tensor_release(feat);
        feat = u;
        if (rc == DUET_OK) rc = step(up[i], &feat);
        if (rc == DUET_OK) rc = step_lrelu(&feat);
    }
    if (rc == DUET_OK) rc = step(conv_hr, &feat);
    if (rc == DUET_OK) rc = step_lrelu(&feat);
    if (rc == DUET_OK) rc = step(conv_last, &feat);
    if (rc != DUET_OK) {
        duet_tensor_release(feat);
        return duet__error_context(rc, "RRDBNet forward");
    }
    *out = feat;
    return DUET_OK;
}

static const duet_module_type rrdbnet_type = {"RRDBNet", rrdbnet_forward, free};

static int add_conv(duet_module *m, const char *name, int in, int out, duet_rng *rng) {
    duet_module *conv = NULL;
    DUET_TRY(duet_conv2d_module_create(in, out, 3, 1, 1, true, rng, &conv));
    return duet_module_add_child(m, name, conv);
}

int duet_rrdbnet_create(const duet_rrdbnet_opts *opts, duet_rng *rng, duet_module **out) {
    *out = NULL;
    const duet_rrdbnet_opts o = *opts;
    if (o.in_channels < 1 || o.out_channels < 1 || o.mid_channels < 1 ||
        o.growth_channels < 1 || o.num_blocks < 0)
        return duet__error(DUET_EINVAL, "RRDBNet: in %d, out %d, mid %d, growth %d channels and "
                           "%d blocks; channels must be positive and blocks non-negative",
                           o.in_channels, o.out_channels, o.mid_channels, o.growth_channels,
                           o.num_blocks);
    if (o.upscale_factor != 4)
        return duet__error(DUET_EUNSUPPORTED, "RRDBNet: scale %d; duet's RRDBNet is x4 only "
                           "(MMEditing's x1/x2 variants add a pixel_unshuffle first)",
                           o.upscale_factor);
    rrdbnet_impl *impl = malloc(sizeof *impl);
    if (impl == NULL) return duet__error(DUET_ENOMEM, "RRDBNet: out of memory");
    impl->opts = o;
    duet_module *m = NULL, *body = NULL, *part = NULL;
    DUET_TRY(duet_module_create(&rrdbnet_type, impl, &m));
    const int mid = o.mid_channels;
    int rc = add_conv(m, "conv_first", o.in_channels, mid, rng);
    if (rc == DUET_OK) rc = duet_sequential_create(&body);
    if (rc == DUET_OK) rc = duet_module_add_child(m, "body", body);
    for (int i = 0; i < o.num_blocks && rc == DUET_OK; i++) {
        rc = rrdb_create(&part, mid, o.growth_channels, rng);
        if (rc == DUET_OK) rc = duet_sequential_append(body, part);
    }
    const char *convs[5] = {"conv_body", "conv_up1", "conv_up2", "conv_hr", "conv_last"};
    for (int i = 0; i < 5 && rc == DUET_OK; i++)
        rc = add_conv(m, convs[i], mid, i == 4 ? o.out_channels : mid, rng);
    if (rc != DUET_OK) {
        duet_module_destroy(m);
        return rc;
    }
    /* RRDBNet.init_weights(pretrained=None), run by the restorer:
     * default_init_weights(m, 0.1) for conv_first, conv_body, conv_up1,
     * conv_up2, conv_hr and conv_last. The dense blocks' convs were scaled
     * by 0.1 in their constructor. */
    const char *scaled[6] = {"conv_first", "conv_body", "conv_up1", "conv_up2", "conv_hr",
                             "conv_last"};
    int irc = DUET_OK;
    for (int i = 0; i < 6 && irc == DUET_OK; i++)
        irc = duet_default_init_weights(duet_module_child(m, scaled[i]), 0.1f, rng);
    if (irc != DUET_OK) {
        duet_module_destroy(m);
        return irc;
    }
    *out = m;
    return DUET_OK;
}
