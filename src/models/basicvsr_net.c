/* MMEditing's BasicVSRNet (mmedit/models/backbones/sr_backbones/
 * basicvsr_net.py) with its SPyNet, SPyNetBasicModule and
 * ResidualBlocksWithInputConv, under the same names: spynet.mean/std
 * (buffers), spynet.basic_module.<l>.basic_module.<k>.conv (7x7 ConvModules,
 * ReLU but the last), backward_resblocks.main and forward_resblocks.main
 * (0: conv, 1: LeakyReLU(0.1), 2.<b>: ResidualBlockNoBN conv1/conv2),
 * fusion, upsample1/upsample2 (PixelShufflePack upsample_conv), conv_hr,
 * conv_last. duet's tensors have at most 4 dims: a sequence (n, t, c, h, w)
 * is held as (n, t*c, h, w), the same memory. */
#include "models/models_internal.h"

#include <inttypes.h>
#include <math.h>
#include <string.h>

/* ---- SPyNet ----------------------------------------------------------------------- */

#define SPYNET_LEVELS 6

/* The forward of a module that is its child `name` (SPyNetBasicModule's
 * basic_module, ResidualBlocksWithInputConv's main). */
static int forward_child(duet_module *self, const char *name, int nin, duet_tensor *const *in,
                         duet_tensor **out) {
    *out = NULL;
    if (nin != 1) return duet__error(DUET_EINVAL, "%s takes one input, got %d", name, nin);
    return duet_module_forward(duet_module_child(self, name), in[0], out);
}

static int spynet_basic_forward(duet_module *self, int nin, duet_tensor *const *in,
                                duet_tensor **out) {
    return forward_child(self, "basic_module", nin, in, out);
}

static const duet_module_type spynet_basic_type = {"SPyNetBasicModule", spynet_basic_forward,
                                                   NULL};

/* mmcv ConvModule's init_weights (run by its constructor): kaiming_normal
 * with mode fan_out and ReLU's gain, bias 0. */
static int kaiming_fan_out(duet_module *conv, duet_rng *rng) {
    duet_tensor *w = duet_module_param(conv, "weight"), *b = duet_module_param(conv, "bias");
    const int64_t fan_out = w->shape[0] * w->shape[2] * w->shape[3];
    const double std = sqrt(2.0) / sqrt((double)fan_out);
    float *p = NULL;
    DUET_TRY(duet_tensor_map_write(w, false, &p));
    for (int64_t i = 0; i < w->numel; i++) p[i] = (float)(std * duet_rng_normal(rng));
    DUET_TRY(duet_tensor_unmap_write(w, p));
    return b != NULL ? duet_tensor_fill(b, 0.0f) : DUET_OK;
}

/* SPyNetBasicModule: 8 -> 32 -> 64 -> 32 -> 16 -> 2 channels, 7x7 pad 3. */
static int spynet_basic_create(duet_rng *rng, duet_module **out) {
    static const int ch[6] = {8, 32, 64, 32, 16, 2};
    duet_module *m = NULL, *seq = NULL, *cm = NULL;
    int rc = duet_module_create(&spynet_basic_type, NULL, &m);
    if (rc == DUET_OK) rc = duet_sequential_create(&seq);
    if (rc == DUET_OK) rc = duet_module_add_child(m, "basic_module", seq);
    for (int k = 0; k < 5 && rc == DUET_OK; k++) {
        const duet__cm_opts o = {.in_channels = ch[k], .out_channels = ch[k + 1], .kernel = 7,
                                 .stride = 1, .padding = 3, .bias = true,
                                 .act = k < 4 ? DUET__CM_ACT_RELU : DUET__CM_ACT_NONE};
        cm = NULL;
        rc = duet__conv_module_create(&o, rng, &cm);
        if (rc == DUET_OK) rc = kaiming_fan_out(duet_module_child(cm, "conv"), rng);
        if (rc == DUET_OK) rc = duet_sequential_append(seq, cm);
        else duet_module_destroy(cm);
    }
    if (rc != DUET_OK) {
        duet_module_destroy(m);
        return rc;
    }
    *out = m;
    return DUET_OK;
}

/* Releases n tensors of an array (NULLs skipped). */
static void release_all(duet_tensor **t, int n) {
    for (int i = 0; i < n; i++) {
        duet_tensor_release(t[i]);
        t[i] = NULL;
    }
}

/* (x - mean) / std per channel, with the module's buffers. */
static int spynet_normalize(duet_module *self, duet_tensor *x, duet_tensor **out) {
    const duet_tensor *mean = duet_module_buffer(self, "mean"), *std = duet_module_buffer(self, "std");
    float m[3], sd[3], scale[3], shift[3];
    DUET_TRY(duet_tensor_copy_to_host(mean, m));
    DUET_TRY(duet_tensor_copy_to_host(std, sd));
    for (int c = 0; c < 3; c++) {
        scale[c] = 1.0f / sd[c];
        shift[c] = -m[c] / sd[c];
    }
    return duet_channel_affine(x, scale, shift, out);
}

/* SPyNet.compute_flow: the flow from ref to supp, coarse to fine. */
static int spynet_compute_flow(duet_module *self, duet_tensor *ref, duet_tensor *supp,
                               duet_tensor **out) {
    *out = NULL;
    duet_module *levels = duet_module_child(self, "basic_module");
    duet_tensor *r[SPYNET_LEVELS] = {0}, *s[SPYNET_LEVELS] = {0};
    duet_tensor *flow = NULL, *up = NULL, *flow_up = NULL, *warped = NULL, *cat = NULL,
                *res = NULL;
    /* r[L], s[L]: pyramid level L, 0 the coarsest (MMEditing's ref[::-1]). */
    int rc = spynet_normalize(self, ref, &r[SPYNET_LEVELS - 1]);
    if (rc == DUET_OK) rc = spynet_normalize(self, supp, &s[SPYNET_LEVELS - 1]);
    for (int l = SPYNET_LEVELS - 2; l >= 0 && rc == DUET_OK; l--) {
        rc = duet_avg_pool2d(r[l + 1], 2, 2, &r[l]);
        if (rc == DUET_OK) rc = duet_avg_pool2d(s[l + 1], 2, 2, &s[l]);
    }
    if (rc == DUET_OK)
        rc = duet_tensor_create_on(duet_tensor_device(ref), 4,
                                   (const int64_t[]){ref->shape[0], 2, r[0]->shape[2],
                                                     r[0]->shape[3]},
                                   &flow);
    for (int l = 0; l < SPYNET_LEVELS && rc == DUET_OK; l++) {
        if (l == 0) {
            flow_up = duet_tensor_retain(flow);
        } else {
            /* F.interpolate(flow, scale_factor=2, bilinear, align_corners=True) * 2 */
            rc = duet_resize_bilinear_ac(flow, 2 * flow->shape[2], 2 * flow->shape[3], &up);
            if (rc == DUET_OK) rc = duet_scale(up, 2.0f, &flow_up);
            duet_tensor_release(up);
            up = NULL;
        }
        if (rc == DUET_OK) rc = duet_flow_warp(s[l], flow_up, DUET_FLOW_PAD_BORDER, &warped);
        if (rc == DUET_OK)
            rc = duet_concat_channels(3, (duet_tensor *[]){r[l], warped, flow_up}, &cat);
        if (rc == DUET_OK)
            rc = duet_module_forward(duet_module_child_at(levels, (size_t)l), cat, &res);
        duet_tensor_release(flow);
        flow = NULL;
        if (rc == DUET_OK) rc = duet_add(flow_up, res, &flow);
        duet_tensor_release(flow_up);
        duet_tensor_release(warped);
        duet_tensor_release(cat);
        duet_tensor_release(res);
        flow_up = warped = cat = res = NULL;
    }
    release_all(r, SPYNET_LEVELS);
    release_all(s, SPYNET_LEVELS);
    if (rc != DUET_OK) {
        duet_tensor_release(flow);
        return rc;
    }
    *out = flow;
    return DUET_OK;
}

static int spynet_forward(duet_module *self, int nin, duet_tensor *const *in, duet_tensor **out) {
    *out = NULL;
    if (nin != 2) return duet__error(DUET_EINVAL, "SPyNet takes two inputs (ref, supp), got %d", nin);
    const duet_tensor *ref = in[0], *supp = in[1];
    char sr[DUET_SHAPE_STR_MAX], ss[DUET_SHAPE_STR_MAX];
    duet_shape_str(ref, sr, sizeof sr);
    duet_shape_str(supp, ss, sizeof ss);
    if (ref->ndim != 4 || ref->shape[1] != 3 || supp->ndim != 4 ||
        memcmp(ref->shape, supp->shape, sizeof ref->shape) != 0)
        return duet__error(DUET_ESHAPE, "SPyNet: ref %s and supp %s must both be (N, 3, H, W)",
                           sr, ss);
    /* MMEditing resizes other sizes to the next multiple of 32 (bilinear,
     * align_corners=False) and the flow back; duet has no such resize yet. */
    if (ref->shape[2] % 32 != 0 || ref->shape[3] % 32 != 0)
        return duet__error(DUET_ESHAPE, "SPyNet: frames %s; duet's SPyNet takes heights and "
                           "widths divisible by 32 (MMEditing's resize of other sizes is not "
                           "implemented)", sr);
    const int rc = spynet_compute_flow(self, in[0], in[1], out);
    return rc == DUET_OK ? rc : duet__error_context(rc, "SPyNet forward");
}

static const duet_module_type spynet_type = {"SPyNet", spynet_forward, NULL};

int duet_spynet_create(duet_rng *rng, duet_module **out) {
    *out = NULL;
    duet_module *m = NULL, *list = NULL, *level = NULL;
    duet_tensor *mean = NULL, *std = NULL;
    int rc = duet_module_create(&spynet_type, NULL, &m);
    if (rc == DUET_OK) rc = duet_sequential_create(&list);
    if (rc == DUET_OK) rc = duet_module_add_child(m, "basic_module", list);
    for (int l = 0; l < SPYNET_LEVELS && rc == DUET_OK; l++) {
        rc = spynet_basic_create(rng, &level);
        if (rc == DUET_OK) rc = duet_sequential_append(list, level);
    }
    if (rc == DUET_OK) rc = duet_tensor_create4(1, 3, 1, 1, &mean);
    if (rc == DUET_OK) rc = duet_tensor_create4(1, 3, 1, 1, &std);
    if (rc == DUET_OK) {
        const float mv[3] = {0.485f, 0.456f, 0.406f}, sv[3] = {0.229f, 0.224f, 0.225f};
        rc = duet_tensor_copy_from_host(mean, mv);
        if (rc == DUET_OK) rc = duet_tensor_copy_from_host(std, sv);
    }
    if (rc == DUET_OK) {
        rc = duet_module_add_buffer(m, "mean", mean, false);
        mean = NULL;
    }
    if (rc == DUET_OK) {
        rc = duet_module_add_buffer(m, "std", std, false);
        std = NULL;
    }
    duet_tensor_release(mean);
    duet_tensor_release(std);
    if (rc != DUET_OK) {
        duet_module_destroy(m);
        return rc;
    }
    *out = m;
    return DUET_OK;
}

/* ---- ResidualBlocksWithInputConv -------------------------------------------------- */

static int resblocks_forward(duet_module *self, int nin, duet_tensor *const *in,
                             duet_tensor **out) {
    return forward_child(self, "main", nin, in, out);
}

static const duet_module_type resblocks_type = {"ResidualBlocksWithInputConv",
                                                resblocks_forward, NULL};

static int resblocks_create(int in_ch, int out_ch, int blocks, duet_rng *rng,
                            duet_module **out) {
    duet_module *m = NULL, *main = NULL, *part = NULL, *body = NULL;
    int rc = duet_module_create(&resblocks_type, NULL, &m);
    if (rc == DUET_OK) rc = duet_sequential_create(&main);
    if (rc == DUET_OK) rc = duet_module_add_child(m, "main", main);
    if (rc == DUET_OK) rc = duet_conv2d_module_create(in_ch, out_ch, 3, 1, 1, true, rng, &part);
    if (rc == DUET_OK) rc = duet_sequential_append(main, part);
    if (rc == DUET_OK) rc = duet_activation_module_create(DUET_ACT_LEAKY_RELU, 0.1f, &part);
    if (rc == DUET_OK) rc = duet_sequential_append(main, part);
    if (rc == DUET_OK) rc = duet_sequential_create(&body);
    if (rc == DUET_OK) rc = duet_sequential_append(main, body);
    for (int b = 0; b < blocks && rc == DUET_OK; b++) {
        rc = duet__resblock_nobn_create(out_ch, 1.0f, rng, &part);
        if (rc == DUET_OK) rc = duet_sequential_append(body, part);
    }
    if (rc != DUET_OK) {
        duet_module_destroy(m);
        return rc;
    }
    *out = m;
    return DUET_OK;
}

/* ---- BasicVSRNet ------------------------------------------------------------------ */

typedef struct basicvsr_impl {
    duet_basicvsr_net_opts o;
} basicvsr_impl;

duet_basicvsr_net_opts duet_basicvsr_net_opts_default(void) {
    return (duet_basicvsr_net_opts){.mid_channels = 64, .num_blocks = 30};
}

/* check_if_mirror_extended: t even and frame i equal to frame t-1-i in
 * every sample (CPU data only; elsewhere false, which computes the same
 * flows twice). */
static bool mirror_extended(const duet_tensor *lrs, int64_t t) {
    if (t % 2 != 0 || duet_tensor_device(lrs).type != DUET_DEVICE_CPU) return false;
    const float *data = NULL;
    if (duet_tensor_map_read(lrs, &data) != DUET_OK) return false;
    const int64_t frame = 3 * lrs->shape[2] * lrs->shape[3];
    bool mirrored = true;
    for (int64_t s = 0; s < lrs->shape[0] && mirrored; s++)
        for (int64_t i = 0; i < t / 2 && mirrored; i++) {
            const float *a = data + (s * t + i) * frame;
            const float *b = data + (s * t + t - 1 - i) * frame;
            for (int64_t k = 0; k < frame; k++)
                if (!(a[k] == b[k])) {
                    mirrored = false;
                    break;
                }
        }
    duet_tensor_unmap_read(lrs, data);
    return mirrored;
}

/* *cur = act(m(*cur)) with LeakyReLU(0.1) when lrelu. */
static int layer(duet_module *m, bool lrelu, duet_tensor **cur) {
    DUET_TRY(duet__gan_step(m, cur));
    if (!lrelu) return DUET_OK;
    duet_tensor *y = NULL;
    const int rc = duet_leaky_relu(*cur, 0.1f, &y);
    duet_tensor_release(*cur);
    *cur = y;
    return rc;
}

/* Frames [start, start + count) of every sample as (n * count, 3, h, w). */
static int frames(duet_tensor *lrs, int64_t start, int64_t count, duet_tensor **out) {
    duet_tensor *s = NULL;
    DUET_TRY(duet_slice_channels(lrs, 3 * start, 3 * count, &s));
    const int rc = duet_reshape(
        s, 4, (const int64_t[]){lrs->shape[0] * count, 3, lrs->shape[2], lrs->shape[3]}, out);
    duet_tensor_release(s);
    return rc;
}

static int basicvsr_forward(duet_module *self, int nin, duet_tensor *const *in,
                            duet_tensor **out) {
    *out = NULL;
    if (nin != 1) return duet__error(DUET_EINVAL, "BasicVSRNet takes one input, got %d", nin);
    const basicvsr_impl *g = duet_module_impl(self);
    duet_tensor *lrs = in[0];
    char sx[DUET_SHAPE_STR_MAX];
    duet_shape_str(lrs, sx, sizeof sx);
    if (lrs->ndim != 4 || lrs->shape[1] % 3 != 0 || lrs->shape[1] < 6)
        return duet__error(DUET_ESHAPE, "BasicVSRNet: input %s must be (N, T*3, H, W), the "
                           "frames (N, T, 3, H, W) of MMEditing with T >= 2", sx);
    if (lrs->shape[2] < 64 || lrs->shape[3] < 64)
        return duet__error(DUET_ESHAPE, "BasicVSRNet: input %s: the height and width of inputs "
                           "should be at least 64 (as MMEditing's)", sx);
    const int64_t n = lrs->shape[0], t = lrs->shape[1] / 3, h = lrs->shape[2],
                  w = lrs->shape[3];
    duet_module *spynet = duet_module_child(self, "spynet");
    duet_module *bwd = duet_module_child(self, "backward_resblocks");
    duet_module *fwd = duet_module_child(self, "forward_resblocks");
    duet_module *fusion = duet_module_child(self, "fusion");
    duet_module *up1 = duet_module_child(self, "upsample1");
    duet_module *up2 = duet_module_child(self, "upsample2");
    duet_module *conv_hr = duet_module_child(self, "conv_hr");
    duet_module *conv_last = duet_module_child(self, "conv_last");
    DUET_ASSERT(spynet && bwd && fwd && fusion && up1 && up2 && conv_hr && conv_last);

    duet_tensor **lr = calloc((size_t)t, sizeof *lr);
    duet_tensor **feats = calloc((size_t)t, sizeof *feats);
    duet_tensor *l1 = NULL, *l2 = NULL, *f = NULL, *fb = NULL, *ff = NULL, *prop = NULL,
                *flow = NULL, *tmp = NULL, *cur = NULL, *base = NULL, *y = NULL;
    int rc = lr != NULL && feats != NULL ? DUET_OK
                                         : duet__error(DUET_ENOMEM, "BasicVSRNet: out of memory");
    for (int64_t i = 0; i < t && rc == DUET_OK; i++) rc = duet_slice_channels(lrs, 3 * i, 3, &lr[i]);

    /* compute_flow: flows_backward from frames 0..t-2 to 1..t-1, and
     * flows_forward the other way unless the sequence is mirror-extended
     * (then flows_forward[i - 1] is flows_backward[t - 1 - i]). Both as
     * (n, (t-1)*2, h, w). */
    if (rc == DUET_OK) rc = frames(lrs, 0, t - 1, &l1);
    if (rc == DUET_OK) rc = frames(lrs, 1, t - 1, &l2);
    const int64_t fshape[4] = {n, 2 * (t - 1), h, w};
    if (rc == DUET_OK) rc = duet_module_forward2(spynet, l1, l2, &f);
    if (rc == DUET_OK) rc = duet_reshape(f, 4, fshape, &fb);
    duet_tensor_release(f);
    f = NULL;
    const bool mirror = rc == DUET_OK && mirror_extended(lrs, t);
    if (rc == DUET_OK && !mirror) {
        rc = duet_module_forward2(spynet, l2, l1, &f);
        if (rc == DUET_OK) rc = duet_reshape(f, 4, fshape, &ff);
    }

    /* backward-time propagation */
    if (rc == DUET_OK) rc = duet_tensor_create_on(duet_tensor_device(lrs), 4,
                                                 (const int64_t[]){n, g->o.mid_channels, h, w},
                                                 &prop);
    for (int64_t i = t - 1; i >= 0 && rc == DUET_OK; i--) {
        if (i < t - 1) {
            rc = duet_slice_channels(fb, 2 * i, 2, &flow);
            if (rc == DUET_OK) rc = duet_flow_warp(prop, flow, DUET_FLOW_PAD_ZEROS, &tmp);
            duet_tensor_release(prop);
            duet_tensor_release(flow);
            prop = tmp;
            flow = tmp = NULL;
        }
        if (rc == DUET_OK) rc = duet_concat_channels(2, (duet_tensor *[]){lr[i], prop}, &tmp);
        duet_tensor_release(prop);
        prop = tmp;
        tmp = NULL;
        if (rc == DUET_OK) rc = duet__gan_step(bwd, &prop);
        if (rc == DUET_OK) feats[i] = duet_tensor_retain(prop);
    }

    /* forward-time propagation and the reconstruction of each frame */
    duet_tensor_release(prop);
    prop = NULL;
    if (rc == DUET_OK) rc = duet_tensor_create_on(duet_tensor_device(lrs), 4,
                                                 (const int64_t[]){n, g->o.mid_channels, h, w},
                                                 &prop);
    for (int64_t i = 0; i < t && rc == DUET_OK; i++) {
        if (i > 0) {
            rc = mirror ? duet_slice_channels(fb, 2 * (t - 1 - i), 2, &flow)
                        : duet_slice_channels(ff, 2 * (i - 1), 2, &flow);
            if (rc == DUET_OK) rc = duet_flow_warp(prop, flow, DUET_FLOW_PAD_ZEROS, &tmp);
            duet_tensor_release(prop);
            duet_tensor_release(flow);
            prop = tmp;
            flow = tmp = NULL;
        }
        if (rc == DUET_OK) rc = duet_concat_channels(2, (duet_tensor *[]){lr[i], prop}, &tmp);
        duet_tensor_release(prop);
        prop = tmp;
        tmp = NULL;
        if (rc == DUET_OK) rc = duet__gan_step(fwd, &prop);
        if (rc == DUET_OK) rc = duet_concat_channels(2, (duet_tensor *[]){feats[i], prop}, &cur);
        if (rc == DUET_OK) rc = layer(fusion, true, &cur);
        if (rc == DUET_OK) rc = layer(up1, true, &cur);
        if (rc == DUET_OK) rc = layer(up2, true, &cur);
        if (rc == DUET_OK) rc = layer(conv_hr, true, &cur);
        if (rc == DUET_OK) rc = layer(conv_last, false, &cur);
        if (rc == DUET_OK) rc = duet_upsample_bilinear(lr[i], 4, &base);
        /* conv_last's output is fresh: out += base in place */
        if (rc == DUET_OK) rc = duet_add_inplace(cur, base, &tmp);
        duet_tensor_release(cur);
        duet_tensor_release(base);
        cur = base = NULL;
        /* feats[i] is done with: its slot holds the frame's output */
        duet_tensor_release(feats[i]);
        feats[i] = tmp;
        tmp = NULL;
    }
    if (rc == DUET_OK) rc = duet_concat_channels((int)t, feats, &y);

    duet_tensor_release(prop);
    duet_tensor_release(l1);
    duet_tensor_release(l2);
    duet_tensor_release(f);
    duet_tensor_release(fb);
    duet_tensor_release(ff);
    if (lr != NULL) release_all(lr, (int)t);
    if (feats != NULL) release_all(feats, (int)t);
    free(lr);
    free(feats);
    if (rc != DUET_OK) return duet__error_context(rc, "BasicVSRNet forward");
    *out = y;
    return DUET_OK;
}

static const duet_module_type basicvsr_type = {"BasicVSRNet", basicvsr_forward, free};

int duet_basicvsr_net_create(const duet_basicvsr_net_opts *opts, duet_rng *rng,
                             duet_module **out) {
    *out = NULL;
    const duet_basicvsr_net_opts o = *opts;
    if (o.mid_channels < 1 || o.num_blocks < 0)
        return duet__error(DUET_EINVAL, "BasicVSRNet: mid_channels %d and num_blocks %d; "
                           "channels must be positive and blocks non-negative",
                           o.mid_channels, o.num_blocks);
    basicvsr_impl *impl = malloc(sizeof *impl);
    if (impl == NULL) return duet__error(DUET_ENOMEM, "BasicVSRNet: out of memory");
    impl->o = o;
    duet_module *m = NULL, *part = NULL;
    DUET_TRY(duet_module_create(&basicvsr_type, impl, &m));
    const int mid = o.mid_channels;
    /* MMEditing's construction order (BasicVSRNet.init_weights loads only a
     * pretrained file: each part keeps its own init). */
    int rc = duet_spynet_create(rng, &part);
    if (rc == DUET_OK) rc = duet_module_add_child(m, "spynet", part);
    if (rc == DUET_OK) rc = resblocks_create(mid + 3, mid, o.num_blocks, rng, &part);
    if (rc == DUET_OK) rc = duet_module_add_child(m, "backward_resblocks", part);
    if (rc == DUET_OK) rc = resblocks_create(mid + 3, mid, o.num_blocks, rng, &part);
    if (rc == DUET_OK) rc = duet_module_add_child(m, "forward_resblocks", part);
    if (rc == DUET_OK) rc = duet_conv2d_module_create(2 * mid, mid, 1, 1, 0, true, rng, &part);
    if (rc == DUET_OK) rc = duet_module_add_child(m, "fusion", part);
    if (rc == DUET_OK) rc = duet__pixel_shuffle_pack_create(mid, mid, 2, 3, rng, &part);
    if (rc == DUET_OK) rc = duet_module_add_child(m, "upsample1", part);
    if (rc == DUET_OK) rc = duet__pixel_shuffle_pack_create(mid, 64, 2, 3, rng, &part);
    if (rc == DUET_OK) rc = duet_module_add_child(m, "upsample2", part);
    if (rc == DUET_OK) rc = duet_conv2d_module_create(64, 64, 3, 1, 1, true, rng, &part);
    if (rc == DUET_OK) rc = duet_module_add_child(m, "conv_hr", part);
    if (rc == DUET_OK) rc = duet_conv2d_module_create(64, 3, 3, 1, 1, true, rng, &part);
    if (rc == DUET_OK) rc = duet_module_add_child(m, "conv_last", part);
    if (rc != DUET_OK) {
        duet_module_destroy(m);
        return rc;
    }
    *out = m;
    return DUET_OK;
}
