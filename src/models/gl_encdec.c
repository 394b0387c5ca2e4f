/* MMEditing's GLEncoderDecoder with GLEncoder, GLDilationNeck and GLDecoder
 * (mmedit/models/backbones/encoder_decoders/), the Global&Local inpaintor's
 * generator, under MMEditing's names; every conv is an mmcv ConvModule
 * (conv_module.c, the neck's dilated). The chain of numbered ConvModules,
 * the neck and the encoder-decoder frame are shared with DeepFill's
 * generator (deepfill.c), which builds its stage 1 as a GLEncoderDecoder
 * of DeepFill parts. */
#include <stdio.h>

#include "models/models_internal.h"

/* ---- the three parts --------------------------------------------------------------- */

typedef struct part_impl {
    const char *prefix; /* "enc" / "dec" */
    int n;
    duet__chain_out_act out_act;
    unsigned upsample_after; /* bit i: F.interpolate(scale_factor=2) after conv i + 1 */
} part_impl;

int duet__conv_chain_forward(duet_module *self, int nin, duet_tensor *const *in,
                             duet_tensor **out) {
    *out = NULL;
    const part_impl *p = duet_module_impl(self);
    if (nin != 1)
        return duet__error(DUET_EINVAL, "%s takes one input, got %d", duet_module_type_name(self),
                           nin);
    duet_tensor *h = duet_tensor_retain(in[0]);
    int rc = DUET_OK;
    for (int i = 1; i <= p->n && rc == DUET_OK; i++) {
        char name[16];
        snprintf(name, sizeof name, "%s%d", p->prefix, i);
        rc = duet__gan_step(duet_module_child(self, name), &h);
        if (rc == DUET_OK && (p->upsample_after >> (i - 1) & 1u)) {
            duet_tensor *y = NULL;
            rc = duet_upsample_nearest(h, 2, &y);
            duet_tensor_release(h);
            h = y;
        }
    }
    if (rc == DUET_OK && p->out_act != DUET__CHAIN_OUT_NONE) {
        duet_tensor *y = NULL;
        switch (p->out_act) {
        case DUET__CHAIN_OUT_CLIP: rc = duet_clamp(h, -1.0f, 1.0f, &y); break;
        case DUET__CHAIN_OUT_SIGMOID: rc = duet_sigmoid(h, &y); break;
        default: rc = duet_tanh(h, &y); break;
        }
        duet_tensor_release(h);
        h = y;
    }
    if (rc != DUET_OK) {
        duet_tensor_release(h);
        return rc;
    }
    *out = h;
    return DUET_OK;
}

static const duet_module_type encoder_type = {"GLEncoder", duet__conv_chain_forward, free};
static const duet_module_type decoder_type = {"GLDecoder", duet__conv_chain_forward, free};

static int neck_forward(duet_module *self, int nin, duet_tensor *const *in, duet_tensor **out) {
    *out = NULL;
    if (nin != 1) return duet__error(DUET_EINVAL, "GLDilationNeck takes one input, got %d", nin);
    return duet_module_forward(duet_module_child(self, "dilation_convs"), in[0], out);
}

static const duet_module_type neck_type = {"GLDilationNeck", neck_forward, NULL};

typedef struct encdec_impl {
    int in_channels;
} encdec_impl;

static int encdec_forward(duet_module *self, int nin, duet_tensor *const *in, duet_tensor **out) {
    *out = NULL;
    if (nin != 1)
        return duet__error(DUET_EINVAL, "GLEncoderDecoder takes one input, got %d", nin);
    const int c = ((const encdec_impl *)duet_module_impl(self))->in_channels;
    if (in[0]->ndim != 4 || in[0]->shape[1] != c || in[0]->shape[2] % 4 != 0 ||
        in[0]->shape[3] % 4 != 0)
        return duet__error(DUET_ESHAPE, "GLEncoderDecoder: the input must be (N, %d, H, W), the "
                           "masked image and the mask, with H and W multiples of 4", c);
    duet_tensor *h = duet_tensor_retain(in[0]);
    static const char *const parts[] = {"encoder", "dilation_neck", "decoder"};
    int rc = DUET_OK;
    for (int i = 0; i < 3 && rc == DUET_OK; i++)
        rc = duet__gan_step(duet_module_child(self, parts[i]), &h);
    if (rc != DUET_OK) {
        duet_tensor_release(h);
        return duet__error_context(rc, "GLEncoderDecoder forward");
    }
    *out = h;
    return DUET_OK;
}

static const duet_module_type encdec_type = {"GLEncoderDecoder", encdec_forward, free};

int duet__add_numbered(duet_module *m, const char *prefix, int i, int rc,
                       duet_module *const *part) {
    if (rc != DUET_OK) return rc;
    char name[16];
    snprintf(name, sizeof name, "%s%d", prefix, i);
    return duet_module_add_child(m, name, *part);
}

int duet__conv_chain_create(const duet_module_type *type, const char *prefix, int n,
                            duet__chain_out_act out_act, unsigned upsample_after,
                            duet_module **out) {
    *out = NULL;
    part_impl *p = malloc(sizeof *p);
    if (p == NULL) return duet__error(DUET_ENOMEM, "%s: out of memory", type->name);
    *p = (part_impl){prefix, n, out_act, upsample_after};
    return duet_module_create(type, p, out);
}

static int encoder_create(bool norm, duet_rng *rng, duet_module **out) {
    static const int ch[6] = {64, 128, 128, 256, 256, 256}, ks[6] = {5, 3, 3, 3, 3, 3},
                     st[6] = {1, 2, 1, 2, 1, 1};
    duet_module *m = NULL, *part = NULL;
    DUET_TRY(duet__conv_chain_create(&encoder_type, "enc", 6, DUET__CHAIN_OUT_NONE, 0, &m));
    int rc = DUET_OK, in = 4;
    for (int i = 0; i < 6 && rc == DUET_OK; i++) {
        duet__cm_opts cm = {.in_channels = in, .out_channels = ch[i], .kernel = ks[i],
                            .stride = st[i], .padding = (ks[i] - 1) / 2, .bias = !norm,
                            .with_norm = norm, .norm = DUET_GEN_NORM_BN,
                            .act = DUET__CM_ACT_RELU};
        rc = duet__add_numbered(m, "enc", i + 1, duet__conv_module_create(&cm, rng, &part), &part);
        in = ch[i];
    }
    if (rc != DUET_OK) duet_module_destroy(m);
    else *out = m;
    return rc;
}

static int decoder_create(bool norm, bool sigmoid, duet_rng *rng, duet_module **out) {
    /* in, out, kernel, deconv */
    static const int spec[7][4] = {{256, 256, 3, 0}, {256, 256, 3, 0}, {256, 128, 4, 1},
                                   {128, 128, 3, 0}, {128, 64, 4, 1},  {64, 32, 3, 0},
                                   {32, 3, 3, 0}};
    duet_module *m = NULL, *part = NULL;
    DUET_TRY(duet__conv_chain_create(&decoder_type, "dec", 7,
                                     sigmoid ? DUET__CHAIN_OUT_SIGMOID : DUET__CHAIN_OUT_CLIP, 0,
                                     &m));
    int rc = DUET_OK;
    for (int i = 0; i < 7 && rc == DUET_OK; i++) {
        const bool last = i == 6, n = norm && !last;
        duet__cm_opts cm = {.in_channels = spec[i][0], .out_channels = spec[i][1],
                            .kernel = spec[i][2], .stride = spec[i][3] ? 2 : 1, .padding = 1,
                            .deconv = spec[i][3] != 0, .bias = !n, .with_norm = n,
                            .norm = DUET_GEN_NORM_BN,
                            .act = last ? DUET__CM_ACT_NONE : DUET__CM_ACT_RELU};
        rc = duet__add_numbered(m, "dec", i + 1, duet__conv_module_create(&cm, rng, &part), &part);
    }
    if (rc != DUET_OK) duet_module_destroy(m);
    else *out = m;
    return rc;
}

int duet__gl_dilation_neck_create(const duet__neck_opts *o, duet_rng *rng, duet_module **out) {
    *out = NULL;
    duet_module *m = NULL, *seq = NULL, *part = NULL;
    DUET_TRY(duet_module_create(&neck_type, NULL, &m));
    int rc = duet_sequential_create(&seq);
    if (rc == DUET_OK) rc = duet_module_add_child(m, "dilation_convs", seq);
    for (int i = 0; i < 4 && rc == DUET_OK; i++) {
        const int d = 2 << i;
        duet__cm_opts cm = {.in_channels = o->channels, .out_channels = o->channels, .kernel = 3,
                            .stride = 1, .padding = d, .dilation = d, .bias = !o->norm,
                            .reflect = o->reflect, .with_norm = o->norm,
                            .norm = DUET_GEN_NORM_BN, .act = o->act};
        rc = o->gated ? duet__gated_conv_create(&cm, true, rng, &part)
                      : duet__conv_module_create(&cm, rng, &part);
        if (rc == DUET_OK) rc = duet_sequential_append(seq, part);
    }
    if (rc != DUET_OK) duet_module_destroy(m);
    else *out = m;
    return rc;
}

int duet__gl_encdec_assemble(int in_channels, duet_module *encoder, duet_module *decoder,
                             duet_module *neck, duet_module **out) {
    *out = NULL;
    duet_module *m = NULL;
    encdec_impl *impl = malloc(sizeof *impl);
    int rc = impl == NULL ? duet__error(DUET_ENOMEM, "GLEncoderDecoder: out of memory")
                          : DUET_OK;
    if (rc == DUET_OK) {
        impl->in_channels = in_channels;
        rc = duet_module_create(&encdec_type, impl, &m);
    }
    /* MMEditing's order: encoder, decoder, dilation_neck */
    if (rc == DUET_OK) rc = duet_module_add_child(m, "encoder", encoder);
    else duet_module_destroy(encoder);
    if (rc == DUET_OK) rc = duet_module_add_child(m, "decoder", decoder);
    else duet_module_destroy(decoder);
    if (rc == DUET_OK) rc = duet_module_add_child(m, "dilation_neck", neck);
    else duet_module_destroy(neck);
    if (rc != DUET_OK) {
        duet_module_destroy(m);
        return rc;
    }
    *out = m;
    return DUET_OK;
}

int duet_gl_encdec_create(const duet_gl_encdec_opts *opts, duet_rng *init_rng,
                          duet_module **out) {
    *out = NULL;
    if (init_rng == NULL) return duet__error(DUET_EINVAL, "GLEncoderDecoder: init rng is NULL");
    duet_module *enc = NULL, *dec = NULL, *neck = NULL;
    const duet__neck_opts no = {.channels = 256, .norm = opts->neck_norm,
                                .act = DUET__CM_ACT_RELU};
    int rc = encoder_create(opts->encoder_norm, init_rng, &enc);
    if (rc == DUET_OK) rc = decoder_create(opts->decoder_norm, opts->out_sigmoid, init_rng, &dec);
    if (rc == DUET_OK) rc = duet__gl_dilation_neck_create(&no, init_rng, &neck);
    if (rc != DUET_OK) {
        duet_module_destroy(enc);
        duet_module_destroy(dec);
        return rc;
    }
    return duet__gl_encdec_assemble(4, enc, dec, neck, out);
}
