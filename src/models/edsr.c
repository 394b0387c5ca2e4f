/* MMEditing's EDSR (mmedit/models/backbones/sr_backbones/edsr.py) with its
 * UpsampleModule, under the same names: conv_first, body.<i>.conv1/conv2,
 * conv_after_body, upsample.<j>.upsample_conv, conv_last. The mean shift
 * (rgb_mean, rgb_std) is a constant of the network, not state. */
#include "models/models_internal.h"

#include <math.h>

/* *cur = m(*cur), releasing the old tensor. */
static int step(duet_module *m, duet_tensor **cur) {
    duet_tensor *next = NULL;
    int rc = duet_module_forward(m, *cur, &next);
    duet_tensor_release(*cur);
    *cur = next;
    return rc;
}

typedef struct edsr_impl {
    duet_edsr_opts opts;
    /* Per channel of the input: the mean shift in, (x - mean) / std as
     * x * in_scale + in_shift; of the output: x * std + mean. */
    float in_scale[DUET_EDSR_MAX_RGB], in_shift[DUET_EDSR_MAX_RGB];
    float out_scale[DUET_EDSR_MAX_RGB], out_shift[DUET_EDSR_MAX_RGB];
} edsr_impl;

duet_edsr_opts duet_edsr_opts_default(void) {
    return (duet_edsr_opts){.in_channels = 3, .out_channels = 3, .mid_channels = 64,
                            .num_blocks = 16, .upscale_factor = 4, .res_scale = 1.0f,
                            .rgb_len = 3, .rgb_mean = {0.4488f, 0.4371f, 0.4040f},
                            .rgb_std = {1.0f, 1.0f, 1.0f}};
}

static int edsr_forward(duet_module *self, int nin, duet_tensor *const *in, duet_tensor **out) {
    *out = NULL;
    if (nin != 1) return duet__error(DUET_EINVAL, "EDSR takes one input, got %d", nin);
    const edsr_impl *g = duet_module_impl(self);
    duet_tensor *x = in[0];
    if (x->ndim != 4 || x->shape[1] != g->opts.in_channels) {
        char s[DUET_SHAPE_STR_MAX];
        return duet__error(DUET_ESHAPE, "EDSR: input %s; expected (N, %d, H, W)",
                           duet_shape_str(x, s, sizeof s), g->opts.in_channels);
    }
    duet_module *conv_first = duet_module_child(self, "conv_first");
    duet_module *body = duet_module_child(self, "body");
    duet_module *after = duet_module_child(self, "conv_after_body");
    duet_module *up = duet_module_child(self, "upsample");
    duet_module *conv_last = duet_module_child(self, "conv_last");
    DUET_ASSERT(conv_first && body && after && up && conv_last);

    /* x = (x - mean) / std; x = conv_first(x); res = conv_after_body(body(x))
     * + x; x = conv_last(upsample(res)); x * std + mean. With std 1 (EDSR's
     * configs) x * 1 + (-mean) rounds as x - mean. */
    duet_tensor *feat = NULL, *h = NULL, *sum = NULL, *y = NULL;
    int rc = duet_channel_affine(x, g->in_scale, g->in_shift, &feat);
    if (rc == DUET_OK) rc = step(conv_first, &feat);
    if (rc == DUET_OK) {
        h = duet_tensor_retain(feat);
        rc = step(body, &h);
    }
    if (rc == DUET_OK) rc = step(after, &h);
    /* conv_after_body's output is fresh: the skip addition runs in place. */
    if (rc == DUET_OK) rc = duet_add_inplace(h, feat, &sum);
    duet_tensor_release(h);
    duet_tensor_release(feat);
    if (rc == DUET_OK) rc = step(up, &sum);
    if (rc == DUET_OK) rc = step(conv_last, &sum);
    if (rc == DUET_OK) rc = duet_channel_affine(sum, g->out_scale, g->out_shift, &y);
    duet_tensor_release(sum);
    if (rc != DUET_OK) return duet__error_context(rc, "EDSR forward");
    *out = y;
    return DUET_OK;
}

static const duet_module_type edsr_type = {"EDSR", edsr_forward, free};

static int add_conv(duet_module *m, const char *name, int in, int out, duet_rng *rng) {
    duet_module *conv = NULL;
    DUET_TRY(duet_conv2d_module_create(in, out, 3, 1, 1, true, rng, &conv));
    return duet_module_add_child(m, name, conv);
}

/* MMEditing's UpsampleModule: PixelShufflePack(mid, mid, 2, 3) per factor of
 * 2 for a power of two, one PixelShufflePack(mid, mid, 3, 3) for 3. */
static int upsample_create(int scale, int mid, duet_rng *rng, duet_module **out) {
    DUET_TRY(duet_sequential_create(out));
    int rc = DUET_OK;
    int factor = (scale & (scale - 1)) == 0 ? 2 : 3;
    for (int s = scale; s > 1 && rc == DUET_OK; s /= factor) {
        duet_module *pack = NULL;
        rc = duet__pixel_shuffle_pack_create(mid, mid, factor, 3, rng, &pack);
        if (rc == DUET_OK) rc = duet_sequential_append(*out, pack);
    }
    if (rc != DUET_OK) {
        duet_module_destroy(*out);
        *out = NULL;
    }
    return rc;
}

/* The mean shift's constants; DUET_EINVAL for a length or a std the
 * network cannot use. */
static int mean_shift(const duet_edsr_opts *o, edsr_impl *impl) {
    if (o->rgb_len < 1 || o->rgb_len > DUET_EDSR_MAX_RGB)
        return duet__error(DUET_EINVAL, "EDSR: %d values of rgb_mean and rgb_std (1 to %d)",
                           o->rgb_len, DUET_EDSR_MAX_RGB);
    if (o->rgb_len != 1 && !(o->rgb_len == o->in_channels && o->rgb_len == o->out_channels))
        return duet__error(DUET_EINVAL, "EDSR: rgb_mean and rgb_std have %d values; they need "
                           "1 or one per channel (in_channels %d, out_channels %d)", o->rgb_len,
                           o->in_channels, o->out_channels);
    /* in_channels == out_channels here, or one value broadcast to both. */
    const int channels = o->in_channels > o->out_channels ? o->in_channels : o->out_channels;
    for (int c = 0; c < channels; c++) {
        const int k = o->rgb_len == 1 ? 0 : c;
        const float mean = o->rgb_mean[k], std = o->rgb_std[k];
        if (!(std != 0.0f) || !isfinite(std) || !isfinite(mean))
            return duet__error(DUET_EINVAL, "EDSR: rgb_std[%d] = %g, rgb_mean[%d] = %g: the std "
                               "must be finite and nonzero", k, std, k, mean);
        impl->in_scale[c] = 1.0f / std;
        impl->in_shift[c] = -mean / std;
        impl->out_scale[c] = std;
        impl->out_shift[c] = mean;
    }
    return DUET_OK;
}

int duet_edsr_create(const duet_edsr_opts *opts, duet_rng *rng, duet_module **out) {
    *out = NULL;
    const duet_edsr_opts o = *opts;
    if (o.in_channels < 1 || o.out_channels < 1 || o.mid_channels < 1 || o.num_blocks < 0 ||
        o.in_channels > DUET_EDSR_MAX_RGB || o.out_channels > DUET_EDSR_MAX_RGB)
        return duet__error(DUET_EINVAL, "EDSR: in %d, out %d, mid %d channels and %d blocks; "
                           "channels must be positive (in and out at most %d) and blocks "
                           "non-negative", o.in_channels, o.out_channels, o.mid_channels,
                           o.num_blocks, DUET_EDSR_MAX_RGB);
    int f = o.upscale_factor;
    if (f < 2 || f > 64 || ((f & (f - 1)) != 0 && f != 3))
        return duet__error(DUET_EINVAL, "EDSR: scale %d is not supported; supported scales: "
                           "2^n and 3", f);
    if (!isfinite(o.res_scale))
        return duet__error(DUET_EINVAL, "EDSR: res_scale %g", o.res_scale);
    edsr_impl *impl = calloc(1, sizeof *impl);
    if (impl == NULL) return duet__error(DUET_ENOMEM, "EDSR: out of memory");
    impl->opts = o;
    int rc = mean_shift(&o, impl);
    if (rc != DUET_OK) {
        free(impl);
        return rc;
    }
    duet_module *m = NULL, *body = NULL, *part = NULL;
    DUET_TRY(duet_module_create(&edsr_type, impl, &m));
    const int mid = o.mid_channels;
    /* Constructed in MMEditing's order, so that one seed draws the same
     * shapes in turn (EDSR.init_weights leaves PyTorch's default init). */
    rc = add_conv(m, "conv_first", o.in_channels, mid, rng);
    if (rc == DUET_OK) rc = duet_sequential_create(&body);
    if (rc == DUET_OK) rc = duet_module_add_child(m, "body", body);
    for (int i = 0; i < o.num_blocks && rc == DUET_OK; i++) {
        rc = duet__resblock_nobn_create(mid, o.res_scale, rng, &part);
        if (rc == DUET_OK) rc = duet_sequential_append(body, part);
    }
    if (rc == DUET_OK) rc = add_conv(m, "conv_after_body", mid, mid, rng);
    if (rc == DUET_OK) rc = upsample_create(f, mid, rng, &part);
    if (rc == DUET_OK) rc = duet_module_add_child(m, "upsample", part);
    if (rc == DUET_OK) rc = add_conv(m, "conv_last", mid, o.out_channels, rng);
    if (rc != DUET_OK) {
        duet_module_destroy(m);
        return rc;
    }
    *out = m;
    return DUET_OK;
}
