/* MMEditing's GLEncoderDecoder with GLEncoder, GLDilationNeck and GLDecoder
 * (mmedit/models/backbones/encoder_decoders/), the Global&Local inpaintor's
 * generator, under MMEditing's names. The neck's dilated ConvModules are a
 * module type of this file (a Conv2d whose forward is duet_conv2d_dilated);
 * the rest are mmcv ConvModules (conv_module.c). */
#include <stdio.h>

#include "models/models_internal.h"

/* ---- the dilated Conv2d and its ConvModule ---------------------------------------- */

typedef struct dconv_impl {
    int padding, dilation;
} dconv_impl;

static int dconv_forward(duet_module *self, int nin, duet_tensor *const *in, duet_tensor **out) {
    *out = NULL;
    if (nin != 1) return duet__error(DUET_EINVAL, "Conv2d takes one input, got %d", nin);
    const dconv_impl *d = duet_module_impl(self);
    return duet_conv2d_dilated(in[0], duet_module_param(self, "weight"),
                               duet_module_param(self, "bias"), 1, d->padding, d->dilation, out);
}

static const duet_module_type dconv_type = {"Conv2d", dconv_forward, free};

/* A 3x3 stride-1 Conv2d of `ch` channels with `dilation`, PyTorch's default
 * init (taken from a duet_conv2d_module_create of the same shape). */
static int dconv_create(int ch, int dilation, bool bias, duet_rng *rng, duet_module **out) {
    *out = NULL;
    duet_module *plain = NULL, *m = NULL;
    DUET_TRY(duet_conv2d_module_create(ch, ch, 3, 1, dilation, bias, rng, &plain));
    dconv_impl *impl = malloc(sizeof *impl);
    if (impl == NULL) {
        duet_module_destroy(plain);
        return duet__error(DUET_ENOMEM, "GLDilationNeck: out of memory");
    }
    *impl = (dconv_impl){dilation, dilation};
    int rc = duet_module_create(&dconv_type, impl, &m);
    if (rc == DUET_OK)
        rc = duet_module_add_param(m, "weight",
                                   duet_tensor_retain(duet_module_param(plain, "weight")));
    if (rc == DUET_OK && bias)
        rc = duet_module_add_param(m, "bias", duet_tensor_retain(duet_module_param(plain, "bias")));
    duet_module_destroy(plain);
    if (rc != DUET_OK) {
        duet_module_destroy(m);
        return rc;
    }
    *out = m;
    return DUET_OK;
}

/* conv, optional bn, ReLU in order. */
static int seq_forward(duet_module *self, int nin, duet_tensor *const *in, duet_tensor **out) {
    *out = NULL;
    if (nin != 1) return duet__error(DUET_EINVAL, "ConvModule takes one input, got %d", nin);
    duet_tensor *h = duet_tensor_retain(in[0]);
    static const char *const parts[] = {"conv", "bn", "activate"};
    int rc = DUET_OK;
    for (int i = 0; i < 3 && rc == DUET_OK; i++) {
        duet_module *p = duet_module_child(self, parts[i]);
        if (p != NULL) rc = duet__gan_step(p, &h);
    }
    if (rc != DUET_OK) {
        duet_tensor_release(h);
        return rc;
    }
    *out = h;
    return DUET_OK;
}

static const duet_module_type dconv_module_type = {"ConvModule", seq_forward, NULL};

static int dconv_module_create(int ch, int dilation, bool norm, duet_rng *rng, duet_module **out) {
    *out = NULL;
    duet_module *m = NULL, *part = NULL;
    DUET_TRY(duet_module_create(&dconv_module_type, NULL, &m));
    int rc = dconv_create(ch, dilation, !norm, rng, &part);
    if (rc == DUET_OK) rc = duet_module_add_child(m, "conv", part);
    if (rc == DUET_OK && norm) {
        rc = duet_batch_norm2d_module_create(ch, 1e-5f, 0.1f, &part);
        if (rc == DUET_OK) rc = duet_module_add_child(m, "bn", part);
    }
    if (rc == DUET_OK) {
        rc = duet_activation_module_create(DUET_ACT_RELU, 0.0f, &part);
        if (rc == DUET_OK) rc = duet_module_add_child(m, "activate", part);
    }
    if (rc != DUET_OK) {
        duet_module_destroy(m);
        return rc;
    }
    *out = m;
    return DUET_OK;
}

/* ---- the three parts --------------------------------------------------------------- */

typedef struct part_impl {
    const char *prefix; /* "enc" / "dec" */
    int n;
    int out_act;        /* 0 none, 1 clip, 2 sigmoid */
} part_impl;

static int part_forward(duet_module *self, int nin, duet_tensor *const *in, duet_tensor **out) {
    *out = NULL;
    if (nin != 1) return duet__error(DUET_EINVAL, "GL part takes one input, got %d", nin);
    const part_impl *p = duet_module_impl(self);
    duet_tensor *h = duet_tensor_retain(in[0]);
    int rc = DUET_OK;
    for (int i = 1; i <= p->n && rc == DUET_OK; i++) {
        char name[16];
        snprintf(name, sizeof name, "%s%d", p->prefix, i);
        rc = duet__gan_step(duet_module_child(self, name), &h);
    }
    if (rc == DUET_OK && p->out_act != 0) {
        duet_tensor *y = NULL;
        rc = p->out_act == 1 ? duet_clamp(h, -1.0f, 1.0f, &y) : duet_sigmoid(h, &y);
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

static const duet_module_type encoder_type = {"GLEncoder", part_forward, free};
static const duet_module_type decoder_type = {"GLDecoder", part_forward, free};

static int neck_forward(duet_module *self, int nin, duet_tensor *const *in, duet_tensor **out) {
    *out = NULL;
    if (nin != 1) return duet__error(DUET_EINVAL, "GLDilationNeck takes one input, got %d", nin);
    return duet_module_forward(duet_module_child(self, "dilation_convs"), in[0], out);
}

static const duet_module_type neck_type = {"GLDilationNeck", neck_forward, NULL};

static int encdec_forward(duet_module *self, int nin, duet_tensor *const *in, duet_tensor **out) {
    *out = NULL;
    if (nin != 1)
        return duet__error(DUET_EINVAL, "GLEncoderDecoder takes one input, got %d", nin);
    if (in[0]->ndim != 4 || in[0]->shape[1] != 4 || in[0]->shape[2] % 4 != 0 ||
        in[0]->shape[3] % 4 != 0)
        return duet__error(DUET_ESHAPE, "GLEncoderDecoder: the input must be (N, 4, H, W), the "
                           "masked image and the mask, with H and W multiples of 4");
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

static const duet_module_type encdec_type = {"GLEncoderDecoder", encdec_forward, NULL};

static int add_cm(duet_module *m, const char *prefix, int i, const duet__cm_opts *cm,
                  duet_rng *rng) {
    duet_module *part = NULL;
    char name[16];
    snprintf(name, sizeof name, "%s%d", prefix, i);
    DUET_TRY(duet__conv_module_create(cm, rng, &part));
    return duet_module_add_child(m, name, part);
}

static int part_create(const duet_module_type *type, const char *prefix, int n, int out_act,
                       duet_module **out) {
    part_impl *p = malloc(sizeof *p);
    if (p == NULL) return duet__error(DUET_ENOMEM, "GLEncoderDecoder: out of memory");
    *p = (part_impl){prefix, n, out_act};
    return duet_module_create(type, p, out);
}

static int encoder_create(bool norm, duet_rng *rng, duet_module **out) {
    static const int ch[6] = {64, 128, 128, 256, 256, 256}, ks[6] = {5, 3, 3, 3, 3, 3},
                     st[6] = {1, 2, 1, 2, 1, 1};
    duet_module *m = NULL;
    DUET_TRY(part_create(&encoder_type, "enc", 6, 0, &m));
    int rc = DUET_OK, in = 4;
    for (int i = 0; i < 6 && rc == DUET_OK; i++) {
        duet__cm_opts cm = {.in_channels = in, .out_channels = ch[i], .kernel = ks[i],
                            .stride = st[i], .padding = (ks[i] - 1) / 2, .bias = !norm,
                            .with_norm = norm, .norm = DUET_GEN_NORM_BN,
                            .act = DUET__CM_ACT_RELU};
        rc = add_cm(m, "enc", i + 1, &cm, rng);
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
    duet_module *m = NULL;
    DUET_TRY(part_create(&decoder_type, "dec", 7, sigmoid ? 2 : 1, &m));
    int rc = DUET_OK;
    for (int i = 0; i < 7 && rc == DUET_OK; i++) {
        const bool last = i == 6, n = norm && !last;
        duet__cm_opts cm = {.in_channels = spec[i][0], .out_channels = spec[i][1],
                            .kernel = spec[i][2], .stride = spec[i][3] ? 2 : 1, .padding = 1,
                            .deconv = spec[i][3] != 0, .bias = !n, .with_norm = n,
                            .norm = DUET_GEN_NORM_BN,
                            .act = last ? DUET__CM_ACT_NONE : DUET__CM_ACT_RELU};
        rc = add_cm(m, "dec", i + 1, &cm, rng);
    }
    if (rc != DUET_OK) duet_module_destroy(m);
    else *out = m;
    return rc;
}

static int neck_create(bool norm, duet_rng *rng, duet_module **out) {
    duet_module *m = NULL, *seq = NULL, *part = NULL;
    DUET_TRY(duet_module_create(&neck_type, NULL, &m));
    int rc = duet_sequential_create(&seq);
    if (rc == DUET_OK) rc = duet_module_add_child(m, "dilation_convs", seq);
    for (int i = 0; i < 4 && rc == DUET_OK; i++) {
        rc = dconv_module_create(256, 2 << i, norm, rng, &part);
        if (rc == DUET_OK) rc = duet_sequential_append(seq, part);
    }
    if (rc != DUET_OK) duet_module_destroy(m);
    else *out = m;
    return rc;
}

int duet_gl_encdec_create(const duet_gl_encdec_opts *opts, duet_rng *init_rng,
                          duet_module **out) {
    *out = NULL;
    if (init_rng == NULL) return duet__error(DUET_EINVAL, "GLEncoderDecoder: init rng is NULL");
    duet_module *m = NULL, *part = NULL;
    DUET_TRY(duet_module_create(&encdec_type, NULL, &m));
    /* MMEditing's order: encoder, decoder, dilation_neck */
    int rc = encoder_create(opts->encoder_norm, init_rng, &part);
    if (rc == DUET_OK) rc = duet_module_add_child(m, "encoder", part);
    if (rc == DUET_OK) rc = decoder_create(opts->decoder_norm, opts->out_sigmoid, init_rng, &part);
    if (rc == DUET_OK) rc = duet_module_add_child(m, "decoder", part);
    if (rc == DUET_OK) rc = neck_create(opts->neck_norm, init_rng, &part);
    if (rc == DUET_OK) rc = duet_module_add_child(m, "dilation_neck", part);
    if (rc != DUET_OK) {
        duet_module_destroy(m);
        return rc;
    }
    *out = m;
    return DUET_OK;
}
