/* MMEditing's partial convolutions (mmedit/models/common/partial_conv.py,
 * mask_conv_module.py) and PConvEncoderDecoder (backbones/encoder_decoders:
 * PConvEncoder, PConvDecoder), under MMEditing's names: encoder.enc<i> and
 * decoder.dec<i>, each a MaskConvModule with children conv (PartialConv2d:
 * weight, bias without a norm, buffer weight_mask_updater), bn, activate.
 *
 * PartialConv2d(x, mask): with W the window sums of the mask over the
 * kernel (all input channels for multi_channel, else the one mask
 * channel), updated = clamp(W, 0, 1), ratio = numel / (W + eps) * updated
 * (numel = the updater kernel's C * k * k), out = conv(x * mask) * ratio
 * + bias * updated; MMEditing's ((raw - b) * ratio + b) * updated is the
 * same for a 0/1 mask (ratio already holds the factor updated). The mask
 * side carries no gradient (torch.no_grad in MMEditing). */
#include "models/models_internal.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* ---- PartialConv2d ------------------------------------------------------------------ */

typedef struct pconv_impl {
    int in, out, k, stride, pad;
    bool multi_channel;
    float eps;
} pconv_impl;

/* The mask side: ratio (N, O, OH, OW) and updated (N, O or 1, OH, OW) of
 * PartialConv2d, plus updated's first channel (N, 1, OH, OW) for the bias
 * term. mask (N, C or 1, H, W). */
static int mask_update(const pconv_impl *p, const duet_tensor *mask, duet_tensor **ratio,
                       duet_tensor **updated, duet_tensor **updated1) {
    *ratio = *updated = *updated1 = NULL;
    const int64_t n = mask->shape[0], c = mask->shape[1], h = mask->shape[2],
                  w = mask->shape[3];
    const int64_t oh = (h + 2 * p->pad - p->k) / p->stride + 1,
                  ow = (w + 2 * p->pad - p->k) / p->stride + 1;
    const int64_t oc = p->multi_channel ? p->out : 1;
    const float numel = (float)(c * p->k * p->k);
    /* On the host (mapped: in place on the CPU, copies elsewhere): the
     * window sums with their ratio have no op. The outputs live on the
     * mask's device. */
    const duet_device dev = duet_tensor_device(mask);
    duet_tensor *r = NULL, *u = NULL, *u1 = NULL;
    const float *mk = NULL;
    float *rd = NULL, *ud = NULL, *u1d = NULL;
    int rc = duet_tensor_create_on(dev, 4, (int64_t[]){n, p->out, oh, ow}, &r);
    if (rc == DUET_OK) rc = duet_tensor_create_on(dev, 4, (int64_t[]){n, oc, oh, ow}, &u);
    if (rc == DUET_OK) rc = duet_tensor_create_on(dev, 4, (int64_t[]){n, 1, oh, ow}, &u1);
    if (rc == DUET_OK) rc = duet_tensor_map_read(mask, &mk);
    if (rc == DUET_OK) rc = duet_tensor_map_write(r, false, &rd);
    if (rc == DUET_OK) rc = duet_tensor_map_write(u, false, &ud);
    if (rc == DUET_OK) rc = duet_tensor_map_write(u1, false, &u1d);
    if (rc != DUET_OK) goto done;
    for (int64_t b = 0; b < n; b++)
        for (int64_t y = 0; y < oh; y++)
            for (int64_t x = 0; x < ow; x++) {
                /* F.conv2d(mask, ones): an exact sum for a 0/1 mask */
                float s = 0.0f;
                for (int64_t ch = 0; ch < c; ch++)
                    for (int ky = 0; ky < p->k; ky++) {
                        const int64_t iy = y * p->stride - p->pad + ky;
                        if (iy < 0 || iy >= h) continue;
                        for (int kx = 0; kx < p->k; kx++) {
                            const int64_t ix = x * p->stride - p->pad + kx;
                            if (ix >= 0 && ix < w) s += mk[((b * c + ch) * h + iy) * w + ix];
                        }
                    }
                const float up = fminf(fmaxf(s, 0.0f), 1.0f);
                const float ra = numel / (s + p->eps) * up;
                const int64_t at = y * ow + x;
                u1d[b * oh * ow + at] = up;
                for (int64_t o = 0; o < p->out; o++) rd[(b * p->out + o) * oh * ow + at] = ra;
                for (int64_t o = 0; o < oc; o++) ud[(b * oc + o) * oh * ow + at] = up;
            }
done:
    duet_tensor_unmap_read(mask, mk);
    if (r != NULL) {
        int urc = duet_tensor_unmap_write(r, rd);
        if (rc == DUET_OK) rc = urc;
    }
    if (u != NULL) {
        int urc = duet_tensor_unmap_write(u, ud);
        if (rc == DUET_OK) rc = urc;
    }
    if (u1 != NULL) {
        int urc = duet_tensor_unmap_write(u1, u1d);
        if (rc == DUET_OK) rc = urc;
    }
    if (rc != DUET_OK) {
        duet_tensor_release(r);
        duet_tensor_release(u);
        duet_tensor_release(u1);
        return rc;
    }
    *ratio = r;
    *updated = u;
    *updated1 = u1;
    return DUET_OK;
}

int duet__pconv_forward(duet_module *self, duet_tensor *x, duet_tensor *mask, duet_tensor **out,
                        duet_tensor **new_mask) {
    *out = NULL;
    if (new_mask != NULL) *new_mask = NULL;
    const pconv_impl *p = duet_module_impl(self);
    char sx[DUET_SHAPE_STR_MAX], sm[DUET_SHAPE_STR_MAX];
    const int64_t mc = p->multi_channel ? p->in : 1;
    if (x->ndim != 4 || x->shape[1] != p->in || mask->ndim != 4 ||
        mask->shape[0] != x->shape[0] || mask->shape[1] != mc || mask->shape[2] != x->shape[2] ||
        mask->shape[3] != x->shape[3])
        return duet__error(DUET_ESHAPE, "PartialConv2d: input %s and mask %s; expected (N, %d, "
                           "H, W) and (N, %lld, H, W)", duet_shape_str(x, sx, sizeof sx),
                           duet_shape_str(mask, sm, sizeof sm), p->in, (long long)mc);
    duet_tensor *w = duet_module_param(self, "weight"), *b = duet_module_param(self, "bias");
    duet_tensor *ratio = NULL, *updated = NULL, *updated1 = NULL, *xm = NULL, *raw = NULL,
                *y = NULL, *bias = NULL, *b4 = NULL, *sum = NULL, *full = NULL;
    int rc = mask_update(p, mask, &ratio, &updated, &updated1);
    if (rc != DUET_OK) return rc;
    /* input * mask; a single-channel mask spread over the input's channels */
    if (p->multi_channel) {
        rc = duet_mul(x, mask, &xm);
    } else {
        /* (N, 1, H, W) -> (N, in, H, W): the one channel repeated */
        duet_tensor **copies = malloc((size_t)p->in * sizeof *copies);
        if (copies == NULL) {
            rc = duet__error(DUET_ENOMEM, "PartialConv2d: out of memory");
        } else {
            for (int i = 0; i < p->in; i++) copies[i] = mask;
            rc = duet_concat_channels(p->in, copies, &full);
            free(copies);
        }
        if (rc == DUET_OK) rc = duet_mul(x, full, &xm);
    }
    if (rc == DUET_OK) rc = duet_conv2d(xm, w, NULL, p->stride, p->pad, &raw);
    duet_tensor_release(xm);
    if (rc == DUET_OK) rc = duet_mul(raw, ratio, &y);
    duet_tensor_release(raw);
    if (rc == DUET_OK && b != NULL) {
        /* bias * updated as a 1x1 conv of the updated mask's one channel
         * with the bias as an (O, 1, 1, 1) kernel: the bias gets its
         * gradient, sum over the updated positions, through the conv. */
        rc = duet_reshape(b, 4, (int64_t[]){p->out, 1, 1, 1}, &b4);
        if (rc == DUET_OK) rc = duet_conv2d(updated1, b4, NULL, 1, 0, &bias);
        if (rc == DUET_OK) rc = duet_add_inplace(y, bias, &sum);
        duet_tensor_release(y);
        y = sum;
    }
    duet_tensor_release(b4);
    duet_tensor_release(bias);
    duet_tensor_release(full);
    duet_tensor_release(ratio);
    duet_tensor_release(updated1);
    if (rc != DUET_OK) {
        duet_tensor_release(y);
        duet_tensor_release(updated);
        return duet__error_context(rc, "PartialConv2d");
    }
    *out = y;
    if (new_mask != NULL) *new_mask = updated;
    else duet_tensor_release(updated);
    return DUET_OK;
}

static int pconv_module_forward(duet_module *self, int nin, duet_tensor *const *in,
                                duet_tensor **out) {
    *out = NULL;
    if (nin != 2)
        return duet__error(DUET_EINVAL, "PartialConv2d takes the input and its mask, got %d "
                           "inputs", nin);
    return duet__pconv_forward(self, in[0], in[1], out, NULL);
}

static const duet_module_type pconv_type = {"PartialConv2d", pconv_module_forward, free};

/* mmcv's kaiming_init(mode='fan_out', distribution='normal') for a
 * ConvModule whose conv has no init_weights of its own: std = gain /
 * sqrt(O k k), gain sqrt(2 / (1 + a^2)); bias 0. */
static int kaiming_fan_out(duet_tensor *w, float a, duet_rng *rng) {
    const double fan_out = (double)w->shape[0] * (double)w->shape[2] * (double)w->shape[3];
    const float std = (float)(sqrt(2.0 / (1.0 + (double)a * a)) / sqrt(fan_out));
    float *d = NULL;
    int rc = duet_tensor_map_write(w, false, &d);
    for (int64_t i = 0; rc == DUET_OK && i < w->numel; i++) d[i] = std * duet_rng_normal(rng);
    if (rc == DUET_OK) rc = duet_tensor_unmap_write(w, d);
    return rc;
}

static int pconv_create(int in, int out, int k, int stride, int pad, bool bias, float act_a,
                        duet_rng *rng, duet_module **outm) {
    *outm = NULL;
    pconv_impl *p = malloc(sizeof *p);
    if (p == NULL) return duet__error(DUET_ENOMEM, "PartialConv2d: out of memory");
    *p = (pconv_impl){in, out, k, stride, pad, true, 1e-8f};
    duet_module *m = NULL;
    DUET_TRY(duet_module_create(&pconv_type, p, &m));
    duet_tensor *w = NULL, *b = NULL, *ones = NULL;
    int rc = duet_tensor_create4(out, in, k, k, &w);
    if (rc == DUET_OK) rc = kaiming_fan_out(w, act_a, rng);
    if (rc == DUET_OK) rc = duet_module_add_param(m, "weight", w);
    else duet_tensor_release(w);
    if (rc == DUET_OK && bias) {
        rc = duet_tensor_create(1, (int64_t[]){out}, &b); /* zeros */
        if (rc == DUET_OK) rc = duet_module_add_param(m, "bias", b);
    }
    if (rc == DUET_OK) rc = duet_tensor_create4(out, in, k, k, &ones);
    if (rc == DUET_OK) {
        rc = duet_tensor_fill(ones, 1.0f);
        if (rc == DUET_OK) rc = duet_module_add_buffer(m, "weight_mask_updater", ones, false);
        else duet_tensor_release(ones);
    }
    if (rc != DUET_OK) {
        duet_module_destroy(m);
        return rc;
    }
    *outm = m;
    return DUET_OK;
}

/* ---- MaskConvModule: conv (PartialConv2d), bn, activate --------------------------- */

typedef enum mcm_act { MCM_NONE, MCM_RELU, MCM_LRELU } mcm_act;

int duet__mask_conv_forward(duet_module *self, duet_tensor *x, duet_tensor *mask,
                            duet_tensor **out, duet_tensor **new_mask) {
    *out = NULL;
    *new_mask = NULL;
    duet_tensor *h = NULL, *m = NULL;
    DUET_TRY(duet__pconv_forward(duet_module_child(self, "conv"), x, mask, &h, &m));
    const char *after[2] = {"bn", "activate"};
    int rc = DUET_OK;
    for (int i = 0; i < 2 && rc == DUET_OK; i++) {
        duet_module *c = duet_module_child(self, after[i]);
        if (c == NULL) continue;
        duet_tensor *next = NULL;
        rc = duet_module_forward(c, h, &next);
        duet_tensor_release(h);
        h = next;
    }
    if (rc != DUET_OK) {
        duet_tensor_release(h);
        duet_tensor_release(m);
        return rc;
    }
    *out = h;
    *new_mask = m;
    return DUET_OK;
}

static int mcm_forward(duet_module *self, int nin, duet_tensor *const *in, duet_tensor **out) {
    *out = NULL;
    if (nin != 2)
        return duet__error(DUET_EINVAL, "MaskConvModule takes the input and its mask");
    duet_tensor *m = NULL;
    DUET_TRY(duet__mask_conv_forward(self, in[0], in[1], out, &m));
    duet_tensor_release(m);
    return DUET_OK;
}

static const duet_module_type mcm_type = {"MaskConvModule", mcm_forward, NULL};

/* mmcv's ConvModule with conv_cfg PConv (multi_channel): bias only without
 * a norm (bias='auto'); BN weight 1, bias 0; init as kaiming_fan_out with
 * LeakyReLU's slope as a. */
static int mcm_create(int in, int out, int k, int stride, int pad, bool norm, mcm_act act,
                      duet_rng *rng, duet_module **outm) {
    *outm = NULL;
    duet_module *m = NULL, *c = NULL;
    DUET_TRY(duet_module_create(&mcm_type, NULL, &m));
    int rc = pconv_create(in, out, k, stride, pad, !norm, act == MCM_LRELU ? 0.2f : 0.0f, rng,
                          &c);
    if (rc == DUET_OK) rc = duet_module_add_child(m, "conv", c);
    if (rc == DUET_OK && norm) {
        rc = duet_batch_norm2d_module_create(out, 1e-5f, 0.1f, &c);
        if (rc == DUET_OK) rc = duet_module_add_child(m, "bn", c);
    }
    if (rc == DUET_OK && act != MCM_NONE) {
        rc = duet_activation_module_create(act == MCM_RELU ? DUET_ACT_RELU : DUET_ACT_LEAKY_RELU,
                                           0.2f, &c);
        if (rc == DUET_OK) rc = duet_module_add_child(m, "activate", c);
    }
    if (rc != DUET_OK) {
        duet_module_destroy(m);
        return rc;
    }
    *outm = m;
    return DUET_OK;
}

/* ---- PConvEncoder, PConvDecoder, PConvEncoderDecoder -------------------------------- */

typedef struct pconv_encdec_impl {
    duet_pconv_encdec_opts opts;
} pconv_encdec_impl;

duet_pconv_encdec_opts duet_pconv_encdec_opts_default(void) {
    return (duet_pconv_encdec_opts){.in_channels = 3, .num_layers = 7, .norm = true,
                                    .norm_eval = false};
}

/* The encoder's output channels of layer i (1-based): 64, 128, 256, 512... */
static int enc_channels(int i) { return i == 1 ? 64 : i == 2 ? 128 : i == 3 ? 256 : 512; }

int duet_pconv_encdec_forward(duet_module *self, duet_tensor *x, duet_tensor *mask,
                              duet_tensor **out, duet_tensor **final_mask) {
    *out = NULL;
    if (final_mask != NULL) *final_mask = NULL;
    const pconv_encdec_impl *g = duet_module_impl(self);
    const int L = g->opts.num_layers;
    const int64_t need = (int64_t)1 << L;
    if (x->ndim != 4 || x->shape[1] != g->opts.in_channels || x->shape[2] % need != 0 ||
        x->shape[3] % need != 0) {
        char s[DUET_SHAPE_STR_MAX];
        return duet__error(DUET_ESHAPE, "PConvEncoderDecoder: input %s; expected (N, %d, H, W) "
                           "with H and W multiples of 2^num_layers = %lld",
                           duet_shape_str(x, s, sizeof s), g->opts.in_channels,
                           (long long)need);
    }
    duet_module *enc = duet_module_child(self, "encoder"), *dec = duet_module_child(self, "decoder");
    /* norm_eval (MMEditing's fine-tuning stage): PConvEncoder.train() puts
     * its BatchNorm layers back in eval mode, running statistics used and
     * kept; here before every forward, which is the same. */
    if (g->opts.norm_eval)
        for (size_t i = 0; i < duet_module_child_count(enc); i++) {
            duet_module *bn = duet_module_child(duet_module_child_at(enc, i), "bn");
            if (bn != NULL) duet_module_train(bn, false);
        }
    duet_tensor *feats[DUET_PCONV_MAX_LAYERS + 1] = {0}, *masks[DUET_PCONV_MAX_LAYERS + 1] = {0};
    feats[0] = duet_tensor_retain(x);
    masks[0] = duet_tensor_retain(mask);
    int rc = DUET_OK;
    char name[16];
    for (int i = 1; i <= L && rc == DUET_OK; i++) {
        snprintf(name, sizeof name, "enc%d", i);
        rc = duet__mask_conv_forward(duet_module_child(enc, name), feats[i - 1], masks[i - 1],
                                     &feats[i], &masks[i]);
    }
    duet_tensor *h = NULL, *hm = NULL;
    if (rc == DUET_OK) {
        h = duet_tensor_retain(feats[L]);
        hm = duet_tensor_retain(masks[L]);
    }
    for (int i = L; i >= 1 && rc == DUET_OK; i--) {
        duet_tensor *uh = NULL, *um = NULL, *ch = NULL, *cm = NULL;
        rc = duet_upsample_nearest(h, 2, &uh);
        if (rc == DUET_OK) rc = duet_upsample_nearest(hm, 2, &um);
        if (rc == DUET_OK) rc = duet_concat_channels(2, (duet_tensor *[]){uh, feats[i - 1]}, &ch);
        if (rc == DUET_OK) rc = duet_concat_channels(2, (duet_tensor *[]){um, masks[i - 1]}, &cm);
        duet_tensor_release(uh);
        duet_tensor_release(um);
        duet_tensor_release(h);
        duet_tensor_release(hm);
        h = hm = NULL;
        snprintf(name, sizeof name, "dec%d", i);
        if (rc == DUET_OK) rc = duet__mask_conv_forward(duet_module_child(dec, name), ch, cm, &h, &hm);
        duet_tensor_release(ch);
        duet_tensor_release(cm);
    }
    for (int i = 0; i <= L; i++) {
        duet_tensor_release(feats[i]);
        duet_tensor_release(masks[i]);
    }
    if (rc != DUET_OK) {
        duet_tensor_release(h);
        duet_tensor_release(hm);
        return duet__error_context(rc, "PConvEncoderDecoder forward");
    }
    *out = h;
    if (final_mask != NULL) *final_mask = hm;
    else duet_tensor_release(hm);
    return DUET_OK;
}

static int encdec_forward(duet_module *self, int nin, duet_tensor *const *in, duet_tensor **out) {
    *out = NULL;
    if (nin != 2)
        return duet__error(DUET_EINVAL, "PConvEncoderDecoder takes the masked image and the "
                           "mask, got %d inputs", nin);
    return duet_pconv_encdec_forward(self, in[0], in[1], out, NULL);
}

static const duet_module_type encdec_type = {"PConvEncoderDecoder", encdec_forward, free};
static const duet_module_type enc_type = {"PConvEncoder", NULL, NULL};
static const duet_module_type dec_type = {"PConvDecoder", NULL, NULL};

int duet_pconv_encdec_create(const duet_pconv_encdec_opts *opts, duet_rng *rng,
                             duet_module **out) {
    *out = NULL;
    const duet_pconv_encdec_opts o = *opts;
    if (o.in_channels < 1 || o.num_layers < 4 || o.num_layers > DUET_PCONV_MAX_LAYERS)
        return duet__error(DUET_EINVAL, "PConvEncoderDecoder: in_channels %d, num_layers %d "
                           "(4 to %d)", o.in_channels, o.num_layers, DUET_PCONV_MAX_LAYERS);
    pconv_encdec_impl *impl = malloc(sizeof *impl);
    if (impl == NULL) return duet__error(DUET_ENOMEM, "PConvEncoderDecoder: out of memory");
    impl->opts = o;
    duet_module *m = NULL, *enc = NULL, *dec = NULL, *c = NULL;
    DUET_TRY(duet_module_create(&encdec_type, impl, &m));
    int rc = duet_module_create(&enc_type, NULL, &enc);
    if (rc == DUET_OK) rc = duet_module_add_child(m, "encoder", enc);
    char name[16];
    /* PConvEncoder: enc1 7x7 (no norm), enc2 5x5, enc3 5x5, enc4.. 3x3,
     * stride 2, ReLU. */
    for (int i = 1; i <= o.num_layers && rc == DUET_OK; i++) {
        const int k = i == 1 ? 7 : i <= 3 ? 5 : 3;
        const int cin = i == 1 ? o.in_channels : enc_channels(i - 1);
        rc = mcm_create(cin, enc_channels(i), k, 2, k / 2, i > 1 && o.norm, MCM_RELU, rng, &c);
        snprintf(name, sizeof name, "enc%d", i);
        if (rc == DUET_OK && o.norm_frozen && duet_module_child(c, "bn") != NULL)
            duet_module_set_requires_grad(duet_module_child(c, "bn"), false);
        if (rc == DUET_OK) rc = duet_module_add_child(enc, name, c);
    }
    if (rc == DUET_OK) rc = duet_module_create(&dec_type, NULL, &dec);
    if (rc == DUET_OK) rc = duet_module_add_child(m, "decoder", dec);
    /* PConvDecoder, in MMEditing's order: dec5..decL (1024 -> 512), dec4,
     * dec3, dec2 (3x3, LeakyReLU 0.2), dec1 (64 + in -> in, no norm, no
     * activation, bias). */
    for (int j = 0; j < o.num_layers && rc == DUET_OK; j++) {
        const int i = j < o.num_layers - 4 ? 5 + j : 4 - (j - (o.num_layers - 4));
        const int cin = enc_channels(i) + (i == 1 ? o.in_channels : enc_channels(i - 1));
        const int cout = i == 1 ? o.in_channels : enc_channels(i - 1);
        rc = mcm_create(cin, cout, 3, 1, 1, i > 1 && o.norm, i > 1 ? MCM_LRELU : MCM_NONE, rng,
                        &c);
        snprintf(name, sizeof name, "dec%d", i);
        if (rc == DUET_OK) rc = duet_module_add_child(dec, name, c);
    }
    if (rc != DUET_OK) {
        duet_module_destroy(m);
        return rc;
    }
    *out = m;
    return DUET_OK;
}
