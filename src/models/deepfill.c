/* MMEditing's DeepFillEncoderDecoder (DeepFillv1 and v2's generator) and
 * its parts, under MMEditing's names (see duet/models.h): DeepFillEncoder
 * and DeepFillDecoder are chains of numbered ConvModules or
 * SimpleGatedConvModules (gl_encdec.c's chain, conv_module.c,
 * gated_conv.c); stage 1 is a GLEncoderDecoder assembled from them with a
 * GLDilationNeck; stage 2, DeepFillRefiner, adds a ContextualAttentionNeck
 * (contextual_attention.c) beside a second dilation neck. */
#include <math.h>
#include <stdio.h>

#include "models/models_internal.h"

/* MMEditing's int(c * channel_factor). */
static int scaled(int c, double factor) { return (int)(c * factor); }

/* A ConvModule, or a SimpleGatedConvModule whose feature act is ELU when
 * the ConvModule would have had an activation (MMEditing replaces act_cfg
 * by feat_act_cfg, ELU unless the decoder's last conv turns it off). */
static int df_conv(const duet__cm_opts *cm, bool gated, duet_rng *rng, duet_module **out) {
    return gated ? duet__gated_conv_create(cm, cm->act != DUET__CM_ACT_NONE, rng, out)
                 : duet__conv_module_create(cm, rng, out);
}

/* ---- DeepFillEncoder, DeepFillDecoder ------------------------------------------------- */

static const duet_module_type encoder_type = {"DeepFillEncoder", duet__conv_chain_forward, free};
static const duet_module_type decoder_type = {"DeepFillDecoder", duet__conv_chain_forward, free};

static const int enc_channels[3][6] = {{32, 64, 64, 128, 128, 128},
                                       {32, 32, 64, 64, 128, 128},
                                       {32, 32, 64, 128, 128, 128}};
static const char *const enc_type_names[3] = {"stage1", "stage2_conv", "stage2_attention"};

/* -1 for an unknown encoder_type (the encoder's create says so). */
static int encoder_out_channels(const duet_deepfill_encoder_opts *o) {
    if ((unsigned)o->encoder_type > DUET_DEEPFILL_ENC_STAGE2_ATTENTION) return -1;
    return scaled(enc_channels[o->encoder_type][5], o->channel_factor);
}

duet_deepfill_encoder_opts duet_deepfill_encoder_opts_default(void) {
    return (duet_deepfill_encoder_opts){.in_channels = 5, .channel_factor = 1.0};
}

int duet_deepfill_encoder_create(const duet_deepfill_encoder_opts *o, duet_rng *init_rng,
                                 duet_module **out) {
    *out = NULL;
    if (init_rng == NULL) return duet__error(DUET_EINVAL, "DeepFillEncoder: init rng is NULL");
    if ((unsigned)o->encoder_type > DUET_DEEPFILL_ENC_STAGE2_ATTENTION)
        return duet__error(DUET_EINVAL, "DeepFillEncoder: unknown encoder_type %d",
                           (int)o->encoder_type);
    const int *ch = enc_channels[o->encoder_type];
    if (o->in_channels < 1 || !(o->channel_factor > 0) || scaled(ch[0], o->channel_factor) < 1)
        return duet__error(DUET_EINVAL, "DeepFillEncoder (%s): in_channels %d and "
                           "channel_factor %g leave a layer without channels",
                           enc_type_names[o->encoder_type], o->in_channels, o->channel_factor);
    static const int ks[6] = {5, 3, 3, 3, 3, 3}, st[6] = {1, 2, 1, 2, 1, 1};
    duet_module *m = NULL, *part = NULL;
    DUET_TRY(duet__conv_chain_create(&encoder_type, "enc", 6, DUET__CHAIN_OUT_NONE, 0, &m));
    int rc = DUET_OK, in = o->in_channels;
    for (int i = 0; i < 6 && rc == DUET_OK; i++) {
        const duet__cm_opts cm = {.in_channels = in,
                                  .out_channels = scaled(ch[i], o->channel_factor),
                                  .kernel = ks[i], .stride = st[i], .padding = (ks[i] - 1) / 2,
                                  .bias = true, .reflect = o->reflect, .act = DUET__CM_ACT_ELU};
        rc = duet__add_numbered(m, "enc", i + 1, df_conv(&cm, o->gated, init_rng, &part), &part);
        in = cm.out_channels;
    }
    if (rc != DUET_OK) duet_module_destroy(m);
    else *out = m;
    return rc;
}

duet_deepfill_decoder_opts duet_deepfill_decoder_opts_default(void) {
    return (duet_deepfill_decoder_opts){.in_channels = 128, .channel_factor = 1.0,
                                        .out_act = DUET_DEEPFILL_OUT_CLIP};
}

int duet_deepfill_decoder_create(const duet_deepfill_decoder_opts *o, duet_rng *init_rng,
                                 duet_module **out) {
    *out = NULL;
    if (init_rng == NULL) return duet__error(DUET_EINVAL, "DeepFillDecoder: init rng is NULL");
    static const int ch[7] = {128, 128, 64, 64, 32, 16, 3};
    if (o->in_channels < 1 || !(o->channel_factor > 0) || scaled(ch[5], o->channel_factor) < 1)
        return duet__error(DUET_EINVAL, "DeepFillDecoder: in_channels %d and channel_factor %g "
                           "leave a layer without channels", o->in_channels, o->channel_factor);
    if ((unsigned)o->out_act > DUET_DEEPFILL_OUT_NONE)
        return duet__error(DUET_EINVAL, "DeepFillDecoder: unknown out_act %d", (int)o->out_act);
    static const duet__chain_out_act acts[4] = {DUET__CHAIN_OUT_CLIP, DUET__CHAIN_OUT_TANH,
                                                DUET__CHAIN_OUT_SIGMOID, DUET__CHAIN_OUT_NONE};
    duet_module *m = NULL, *part = NULL;
    DUET_TRY(duet__conv_chain_create(&decoder_type, "dec", 7, acts[o->out_act],
                                     1u << 1 | 1u << 3, &m));
    int rc = DUET_OK, in = o->in_channels;
    for (int i = 0; i < 7 && rc == DUET_OK; i++) {
        const bool last = i == 6;
        const duet__cm_opts cm = {.in_channels = in,
                                  .out_channels = last ? 3 : scaled(ch[i], o->channel_factor),
                                  .kernel = 3, .stride = 1, .padding = 1, .bias = true,
                                  .reflect = o->reflect,
                                  .act = last ? DUET__CM_ACT_NONE : DUET__CM_ACT_ELU};
        rc = duet__add_numbered(m, "dec", i + 1, df_conv(&cm, o->gated, init_rng, &part), &part);
        in = cm.out_channels;
    }
    if (rc != DUET_OK) duet_module_destroy(m);
    else *out = m;
    return rc;
}

/* ---- GLDilationNeck ---------------------------------------------------------------- */

duet_gl_dilation_neck_opts duet_gl_dilation_neck_opts_default(void) {
    return (duet_gl_dilation_neck_opts){.in_channels = 256};
}

int duet_gl_dilation_neck_create(const duet_gl_dilation_neck_opts *o, duet_rng *init_rng,
                                 duet_module **out) {
    *out = NULL;
    if (init_rng == NULL) return duet__error(DUET_EINVAL, "GLDilationNeck: init rng is NULL");
    if (o->in_channels < 1)
        return duet__error(DUET_EINVAL, "GLDilationNeck: in_channels %d", o->in_channels);
    const duet__neck_opts no = {.channels = o->in_channels, .norm = o->norm, .gated = o->gated,
                                .reflect = o->reflect,
                                .act = o->elu ? DUET__CM_ACT_ELU : DUET__CM_ACT_RELU};
    return duet__gl_dilation_neck_create(&no, init_rng, out);
}

/* ---- ContextualAttentionNeck ------------------------------------------------------------ */

int duet_ca_neck_forward(duet_module *m, duet_tensor *x, duet_tensor *mask, duet_tensor **out,
                         duet_tensor **offset) {
    *out = NULL;
    if (offset != NULL) *offset = NULL;
    if (!duet_module_is(m, "ContextualAttentionNeck"))
        return duet__error(DUET_EINVAL, "duet_ca_neck_forward: the module is a %s",
                           duet_module_type_name(m));
    duet_tensor *h = NULL, *off = NULL;
    int rc = duet_contextual_attention(duet_module_child(m, "contextual_attention"), x, x, mask,
                                       &h, offset != NULL ? &off : NULL);
    if (rc == DUET_OK) rc = duet__gan_step(duet_module_child(m, "conv1"), &h);
    if (rc == DUET_OK) rc = duet__gan_step(duet_module_child(m, "conv2"), &h);
    if (rc != DUET_OK) {
        duet_tensor_release(h);
        duet_tensor_release(off);
        return duet__error_context(rc, "ContextualAttentionNeck");
    }
    *out = h;
    if (offset != NULL) *offset = off;
    return DUET_OK;
}

static int ca_neck_module_forward(duet_module *self, int nin, duet_tensor *const *in,
                                  duet_tensor **out) {
    *out = NULL;
    if (nin != 2)
        return duet__error(DUET_EINVAL, "ContextualAttentionNeck takes (x, mask), got %d "
                           "inputs", nin);
    return duet_ca_neck_forward(self, in[0], in[1], out, NULL);
}

static const duet_module_type ca_neck_type = {"ContextualAttentionNeck", ca_neck_module_forward,
                                              NULL};

duet_ca_neck_opts duet_ca_neck_opts_default(void) {
    return (duet_ca_neck_opts){.in_channels = 128, .fuse_kernel_size = 3,
                               .softmax_scale = 10.0f};
}

int duet_ca_neck_create(const duet_ca_neck_opts *o, duet_rng *init_rng, duet_module **out) {
    *out = NULL;
    if (init_rng == NULL)
        return duet__error(DUET_EINVAL, "ContextualAttentionNeck: init rng is NULL");
    if (o->in_channels < 1)
        return duet__error(DUET_EINVAL, "ContextualAttentionNeck: in_channels %d",
                           o->in_channels);
    duet_module *m = NULL, *part = NULL;
    DUET_TRY(duet_module_create(&ca_neck_type, NULL, &m));
    int rc = duet_contextual_attention_create(o->fuse_kernel_size, o->softmax_scale, &part);
    if (rc == DUET_OK) rc = duet_module_add_child(m, "contextual_attention", part);
    static const char *const convs[2] = {"conv1", "conv2"};
    for (int i = 0; i < 2 && rc == DUET_OK; i++) {
        const duet__cm_opts cm = {.in_channels = o->in_channels, .out_channels = o->in_channels,
                                  .kernel = 3, .stride = 1, .padding = 1, .bias = true,
                                  .reflect = o->reflect, .act = DUET__CM_ACT_ELU};
        rc = df_conv(&cm, o->gated, init_rng, &part);
        if (rc == DUET_OK) rc = duet_module_add_child(m, convs[i], part);
    }
    if (rc != DUET_OK) duet_module_destroy(m);
    else *out = m;
    return rc;
}

/* ---- DeepFillRefiner ---------------------------------------------------------------------- */

int duet_deepfill_refiner_forward(duet_module *m, duet_tensor *x, duet_tensor *mask,
                                  duet_tensor **out, duet_tensor **offset) {
    *out = NULL;
    if (offset != NULL) *offset = NULL;
    if (!duet_module_is(m, "DeepFillRefiner"))
        return duet__error(DUET_EINVAL, "duet_deepfill_refiner_forward: the module is a %s",
                           duet_module_type_name(m));
    char sx[DUET_SHAPE_STR_MAX], sm[DUET_SHAPE_STR_MAX];
    if (x->ndim != 4 || x->shape[2] % 8 != 0 || x->shape[3] % 8 != 0 || mask->ndim != 4 ||
        mask->shape[0] != x->shape[0] || mask->shape[1] != 1 || mask->shape[2] != x->shape[2] ||
        mask->shape[3] != x->shape[3])
        return duet__error(DUET_ESHAPE, "DeepFillRefiner: x %s must be (N, C, H, W) with H and "
                           "W multiples of 8 and mask %s (N, 1, H, W)",
                           duet_shape_str(x, sx, sizeof sx), duet_shape_str(mask, sm, sizeof sm));
    duet_tensor *conv_x = NULL, *att_x = NULL, *small_mask = NULL, *att = NULL, *cat = NULL;
    int rc = duet_module_forward(duet_module_child(m, "encoder_conv"), x, &conv_x);
    if (rc == DUET_OK) rc = duet__gan_step(duet_module_child(m, "dilation_neck"), &conv_x);
    if (rc == DUET_OK) rc = duet_module_forward(duet_module_child(m, "encoder_attention"), x,
                                                &att_x);
    /* F.interpolate(mask, size=att_x's): nearest, mask[i * 4, j * 4]. */
    if (rc == DUET_OK) rc = duet_subsample_nearest(mask, (int)(x->shape[2] / att_x->shape[2]),
                                                   &small_mask);
    if (rc == DUET_OK)
        rc = duet_ca_neck_forward(duet_module_child(m, "contextual_attention_neck"), att_x,
                                  small_mask, &att, offset);
    if (rc == DUET_OK) rc = duet_concat_channels(2, (duet_tensor *[]){conv_x, att}, &cat);
    if (rc == DUET_OK) rc = duet_module_forward(duet_module_child(m, "decoder"), cat, out);
    duet_tensor *ts[] = {conv_x, att_x, small_mask, att, cat};
    for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++) duet_tensor_release(ts[i]);
    if (rc != DUET_OK) {
        if (offset != NULL) {
            duet_tensor_release(*offset);
            *offset = NULL;
        }
        return duet__error_context(rc, "DeepFillRefiner");
    }
    return DUET_OK;
}

static int refiner_module_forward(duet_module *self, int nin, duet_tensor *const *in,
                                  duet_tensor **out) {
    *out = NULL;
    if (nin != 2)
        return duet__error(DUET_EINVAL, "DeepFillRefiner takes (x, mask), got %d inputs", nin);
    return duet_deepfill_refiner_forward(self, in[0], in[1], out, NULL);
}

static const duet_module_type refiner_type = {"DeepFillRefiner", refiner_module_forward, NULL};

duet_deepfill_refiner_opts duet_deepfill_refiner_opts_default(void) {
    duet_deepfill_refiner_opts o = {
        .encoder_attention = duet_deepfill_encoder_opts_default(),
        .encoder_conv = duet_deepfill_encoder_opts_default(),
        .dilation_neck = duet_gl_dilation_neck_opts_default(),
        .contextual_attention = duet_ca_neck_opts_default(),
        .decoder = duet_deepfill_decoder_opts_default(),
    };
    o.encoder_attention.encoder_type = DUET_DEEPFILL_ENC_STAGE2_ATTENTION;
    o.encoder_conv.encoder_type = DUET_DEEPFILL_ENC_STAGE2_CONV;
    o.dilation_neck.in_channels = 128;
    o.dilation_neck.elu = true;
    o.decoder.in_channels = 256;
    return o;
}

static int refiner_check(const duet_deepfill_refiner_opts *o) {
    const int conv_c = encoder_out_channels(&o->encoder_conv),
              att_c = encoder_out_channels(&o->encoder_attention);
    if (conv_c != o->dilation_neck.in_channels)
        return duet__error(DUET_EINVAL, "DeepFillRefiner: encoder_conv gives %d channels, "
                           "dilation_neck.in_channels is %d", conv_c,
                           o->dilation_neck.in_channels);
    if (att_c != o->contextual_attention.in_channels)
        return duet__error(DUET_EINVAL, "DeepFillRefiner: encoder_attention gives %d channels, "
                           "contextual_attention.in_channels is %d", att_c,
                           o->contextual_attention.in_channels);
    if (conv_c + att_c != o->decoder.in_channels)
        return duet__error(DUET_EINVAL, "DeepFillRefiner: the necks give %d + %d channels, "
                           "decoder.in_channels is %d", conv_c, att_c, o->decoder.in_channels);
    if (o->encoder_conv.in_channels != o->encoder_attention.in_channels)
        return duet__error(DUET_EINVAL, "DeepFillRefiner: encoder_conv.in_channels %d and "
                           "encoder_attention.in_channels %d differ (both read x)",
                           o->encoder_conv.in_channels, o->encoder_attention.in_channels);
    return DUET_OK;
}

int duet_deepfill_refiner_create(const duet_deepfill_refiner_opts *o, duet_rng *init_rng,
                                 duet_module **out) {
    *out = NULL;
    if (init_rng == NULL) return duet__error(DUET_EINVAL, "DeepFillRefiner: init rng is NULL");
    DUET_TRY(refiner_check(o));
    duet_module *m = NULL, *part = NULL;
    DUET_TRY(duet_module_create(&refiner_type, NULL, &m));
    /* MMEditing's order of the children */
    int rc = duet_deepfill_encoder_create(&o->encoder_attention, init_rng, &part);
    if (rc == DUET_OK) rc = duet_module_add_child(m, "encoder_attention", part);
    if (rc == DUET_OK) rc = duet_deepfill_encoder_create(&o->encoder_conv, init_rng, &part);
    if (rc == DUET_OK) rc = duet_module_add_child(m, "encoder_conv", part);
    if (rc == DUET_OK) rc = duet_ca_neck_create(&o->contextual_attention, init_rng, &part);
    if (rc == DUET_OK) rc = duet_module_add_child(m, "contextual_attention_neck", part);
    if (rc == DUET_OK) rc = duet_gl_dilation_neck_create(&o->dilation_neck, init_rng, &part);
    if (rc == DUET_OK) rc = duet_module_add_child(m, "dilation_neck", part);
    if (rc == DUET_OK) rc = duet_deepfill_decoder_create(&o->decoder, init_rng, &part);
    if (rc == DUET_OK) rc = duet_module_add_child(m, "decoder", part);
    if (rc != DUET_OK) duet_module_destroy(m);
    else *out = m;
    return rc;
}

/* ---- DeepFillEncoderDecoder ---------------------------------------------------------------- */

int duet_deepfill_encdec_forward(duet_module *m, duet_tensor *x, duet_tensor **stage1,
                                 duet_tensor **stage2, duet_tensor **offset) {
    *stage1 = *stage2 = NULL;
    if (offset != NULL) *offset = NULL;
    if (!duet_module_is(m, "DeepFillEncoderDecoder"))
        return duet__error(DUET_EINVAL, "duet_deepfill_encdec_forward: the module is a %s",
                           duet_module_type_name(m));
    char sx[DUET_SHAPE_STR_MAX];
    if (x->ndim != 4 || x->shape[1] < 4 || x->shape[2] % 8 != 0 || x->shape[3] % 8 != 0)
        return duet__error(DUET_ESHAPE, "DeepFillEncoderDecoder: the input %s must be (N, C, H, "
                           "W), the masked image, the ones (input_with_ones) and the mask, with "
                           "H and W multiples of 8", duet_shape_str(x, sx, sizeof sx));
    const int64_t c = x->shape[1];
    duet_tensor *img = NULL, *mask = NULL, *rest = NULL, *s1 = NULL, *mask3 = NULL,
                *diff = NULL, *hole = NULL, *img1 = NULL, *in2 = NULL;
    int rc = duet_slice_channels(x, 0, 3, &img);
    if (rc == DUET_OK) rc = duet_slice_channels(x, c - 1, 1, &mask);
    if (rc == DUET_OK) rc = duet_slice_channels(x, 3, c - 3, &rest);
    if (rc == DUET_OK) rc = duet_module_forward(duet_module_child(m, "stage1"), x, &s1);
    /* stage1 * mask + masked_img * (1 - mask), as masked_img + (stage1 -
     * masked_img) * mask: equal, with the same gradients */
    if (rc == DUET_OK)
        rc = duet_concat_channels(3, (duet_tensor *[]){mask, mask, mask}, &mask3);
    if (rc == DUET_OK) rc = duet_sub(s1, img, &diff);
    if (rc == DUET_OK) rc = duet_mul(diff, mask3, &hole);
    if (rc == DUET_OK) rc = duet_add(img, hole, &img1);
    if (rc == DUET_OK) rc = duet_concat_channels(2, (duet_tensor *[]){img1, rest}, &in2);
    if (rc == DUET_OK)
        rc = duet_deepfill_refiner_forward(duet_module_child(m, "stage2"), in2, mask, stage2,
                                           offset);
    duet_tensor *ts[] = {img, mask, rest, mask3, diff, hole, img1, in2};
    for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++) duet_tensor_release(ts[i]);
    if (rc != DUET_OK) {
        duet_tensor_release(s1);
        return duet__error_context(rc, "DeepFillEncoderDecoder");
    }
    *stage1 = s1;
    return DUET_OK;
}

static int encdec_module_forward(duet_module *self, int nin, duet_tensor *const *in,
                                 duet_tensor **out) {
    *out = NULL;
    if (nin != 1)
        return duet__error(DUET_EINVAL, "DeepFillEncoderDecoder takes one input, got %d", nin);
    duet_tensor *s1 = NULL, *s2 = NULL;
    int rc = duet_deepfill_encdec_forward(self, in[0], &s1, &s2, NULL);
    if (rc == DUET_OK) rc = duet_concat_channels(2, (duet_tensor *[]){s1, s2}, out);
    duet_tensor_release(s1);
    duet_tensor_release(s2);
    return rc;
}

static const duet_module_type encdec_type = {"DeepFillEncoderDecoder", encdec_module_forward,
                                             NULL};

duet_deepfill_encdec_opts duet_deepfill_encdec_opts_default(void) {
    duet_deepfill_encdec_opts o = {
        .encoder = duet_deepfill_encoder_opts_default(),
        .dilation_neck = duet_gl_dilation_neck_opts_default(),
        .decoder = duet_deepfill_decoder_opts_default(),
        .stage2 = duet_deepfill_refiner_opts_default(),
        .init_gain = 0.02f,
    };
    o.dilation_neck.in_channels = 128;
    o.dilation_neck.elu = true;
    return o;
}

/* DeepFillEncoderDecoder.init_weights: normal_init(0, gain) (bias 0) on
 * every nn.Conv2d (MMEditing's gain: 0.02), constant_init(1) (bias 0) on
 * the norms. */
static int init_weights(duet_module *m, float gain, duet_rng *rng) {
    duet_tensor *w = duet_module_param(m, "weight"), *b = duet_module_param(m, "bias");
    if (duet_module_is(m, "Conv2d")) {
        if (w != NULL) {
            float *d = NULL;
            DUET_TRY(duet_tensor_map_write(w, false, &d));
            for (int64_t i = 0; i < w->numel; i++) d[i] = gain * duet_rng_normal(rng);
            DUET_TRY(duet_tensor_unmap_write(w, d));
        }
        if (b != NULL) DUET_TRY(duet_tensor_fill(b, 0.0f));
    } else if (duet_module_is(m, "BatchNorm2d")) {
        if (w != NULL) DUET_TRY(duet_tensor_fill(w, 1.0f));
        if (b != NULL) DUET_TRY(duet_tensor_fill(b, 0.0f));
    }
    for (size_t i = 0; i < duet_module_child_count(m); i++)
        DUET_TRY(init_weights(duet_module_child_at(m, i), gain, rng));
    return DUET_OK;
}

int duet_deepfill_encdec_create(const duet_deepfill_encdec_opts *o, duet_rng *init_rng,
                                duet_module **out) {
    *out = NULL;
    if (init_rng == NULL)
        return duet__error(DUET_EINVAL, "DeepFillEncoderDecoder: init rng is NULL");
    if (!(o->init_gain > 0.0f && o->init_gain < 1e3f))
        return duet__error(DUET_EINVAL, "DeepFillEncoderDecoder: init_cfg.gain is %g: the "
                           "normal init's standard deviation must be positive and finite",
                           (double)o->init_gain);
    const int enc_c = encoder_out_channels(&o->encoder);
    if (enc_c != o->dilation_neck.in_channels || enc_c != o->decoder.in_channels)
        return duet__error(DUET_EINVAL, "DeepFillEncoderDecoder: stage1's encoder gives %d "
                           "channels, dilation_neck.in_channels is %d, decoder.in_channels %d",
                           enc_c, o->dilation_neck.in_channels, o->decoder.in_channels);
    if (o->encoder.in_channels < 4 ||
        o->stage2.encoder_conv.in_channels != o->encoder.in_channels)
        return duet__error(DUET_EINVAL, "DeepFillEncoderDecoder: stage1's encoder takes %d "
                           "channels (masked image, ones, mask: 5; without the ones 4), "
                           "stage2's encoders %d: they must be equal (at least 4)",
                           o->encoder.in_channels, o->stage2.encoder_conv.in_channels);
    DUET_TRY(refiner_check(&o->stage2));
    duet_module *m = NULL, *enc = NULL, *dec = NULL, *neck = NULL, *s1 = NULL, *s2 = NULL;
    DUET_TRY(duet_module_create(&encdec_type, NULL, &m));
    int rc = duet_deepfill_encoder_create(&o->encoder, init_rng, &enc);
    if (rc == DUET_OK) rc = duet_deepfill_decoder_create(&o->decoder, init_rng, &dec);
    if (rc == DUET_OK) rc = duet_gl_dilation_neck_create(&o->dilation_neck, init_rng, &neck);
    if (rc == DUET_OK) {
        rc = duet__gl_encdec_assemble((int)o->encoder.in_channels, enc, dec, neck, &s1);
        enc = dec = neck = NULL;
    }
    if (rc == DUET_OK) rc = duet_module_add_child(m, "stage1", s1);
    if (rc == DUET_OK) rc = duet_deepfill_refiner_create(&o->stage2, init_rng, &s2);
    if (rc == DUET_OK) rc = duet_module_add_child(m, "stage2", s2);
    if (rc != DUET_OK) {
        duet_module_destroy(enc);
        duet_module_destroy(dec);
        duet_module_destroy(neck);
        duet_module_destroy(m);
        return rc;
    }
    rc = init_weights(m, o->init_gain, init_rng);
    if (rc != DUET_OK) {
        duet_module_destroy(m);
        return rc;
    }
    *out = m;
    return DUET_OK;
}
