/* mmcv's ConvModule for the generation backbones: an optional explicit
 * ReflectionPad2d ("padding_layer"), a Conv2d (dilated or not) or
 * ConvTranspose2d ("conv"),
 * an optional BatchNorm2d ("bn") or InstanceNorm2d ("in") after the conv,
 * and an optional activation ("activate") before the conv or after the
 * norm. The activations make fresh tensors; mmcv's in-place ReLU changes
 * only what the caller sees of its input, which UnetSkipConnectionBlock
 * reproduces explicitly (duet__conv_module_act). */
#include "models/models_internal.h"

/* ---- the dilated Conv2d ------------------------------------------------------------- */

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

/* A stride-1 Conv2d with dilation, PyTorch's default init (taken from a
 * duet_conv2d_module_create of the same shape). */
static int dconv_create(const duet__cm_opts *o, int padding, duet_rng *rng, duet_module **out) {
    *out = NULL;
    duet_module *plain = NULL, *m = NULL;
    DUET_TRY(duet_conv2d_module_create(o->in_channels, o->out_channels, o->kernel, 1, padding,
                                       o->bias, rng, &plain));
    dconv_impl *impl = malloc(sizeof *impl);
    if (impl == NULL) {
        duet_module_destroy(plain);
        return duet__error(DUET_ENOMEM, "ConvModule: out of memory");
    }
    *impl = (dconv_impl){padding, o->dilation};
    int rc = duet_module_create(&dconv_type, impl, &m);
    if (rc == DUET_OK)
        rc = duet_module_add_param(m, "weight",
                                   duet_tensor_retain(duet_module_param(plain, "weight")));
    if (rc == DUET_OK && o->bias)
        rc = duet_module_add_param(m, "bias", duet_tensor_retain(duet_module_param(plain, "bias")));
    duet_module_destroy(plain);
    if (rc != DUET_OK) {
        duet_module_destroy(m);
        return rc;
    }
    *out = m;
    return DUET_OK;
}

/* ---- ConvModule ---------------------------------------------------------------------- */

typedef struct cm_impl {
    duet__cm_opts o;
} cm_impl;

int duet__gan_step(duet_module *m, duet_tensor **cur) {
    duet_tensor *next = NULL;
    int rc = duet_module_forward(m, *cur, &next);
    duet_tensor_release(*cur);
    *cur = next;
    return rc;
}

int duet__conv_module_act(duet_module *m, duet_tensor *x, duet_tensor **out) {
    duet_module *act = duet_module_child(m, "activate");
    if (act == NULL) {
        *out = duet_tensor_retain(x);
        return DUET_OK;
    }
    return duet_module_forward(act, x, out);
}

int duet__conv_module_forward(duet_module *m, duet_tensor *x, bool skip_act, duet_tensor **out) {
    *out = NULL;
    const duet__cm_opts *o = &((const cm_impl *)duet_module_impl(m))->o;
    const char *const norm_name = o->norm == DUET_GEN_NORM_BN ? "bn" : "in";
    duet_tensor *h = duet_tensor_retain(x);
    int rc = DUET_OK;
    if (o->act_first && !skip_act && o->act != DUET__CM_ACT_NONE)
        rc = duet__gan_step(duet_module_child(m, "activate"), &h);
    if (rc == DUET_OK && o->reflect) rc = duet__gan_step(duet_module_child(m, "padding_layer"), &h);
    if (rc == DUET_OK) rc = duet__gan_step(duet_module_child(m, "conv"), &h);
    if (rc == DUET_OK && o->with_norm) rc = duet__gan_step(duet_module_child(m, norm_name), &h);
    if (rc == DUET_OK && !o->act_first && !skip_act && o->act != DUET__CM_ACT_NONE)
        rc = duet__gan_step(duet_module_child(m, "activate"), &h);
    if (rc != DUET_OK) {
        duet_tensor_release(h);
        return rc;
    }
    *out = h;
    return DUET_OK;
}

static int cm_forward(duet_module *self, int nin, duet_tensor *const *in, duet_tensor **out) {
    *out = NULL;
    if (nin != 1) return duet__error(DUET_EINVAL, "ConvModule takes one input, got %d", nin);
    return duet__conv_module_forward(self, in[0], false, out);
}

static const duet_module_type cm_type = {"ConvModule", cm_forward, free};

int duet_conv_module_act_first(const duet_module *m, bool *act_first) {
    if (duet_module_get_type(m) != &cm_type)
        return duet__error(DUET_EINVAL, "a %s is not a ConvModule", duet_module_type_name(m));
    *act_first = ((const cm_impl *)duet_module_impl(m))->o.act_first;
    return DUET_OK;
}

/* Adds *part as child name of m when rc (the status of making it) is OK.
 * part is read only after the call that made it has run: C leaves the
 * order of argument evaluation open. */
static int add(duet_module *m, const char *name, int rc, duet_module *const *part) {
    return rc != DUET_OK ? rc : duet_module_add_child(m, name, *part);
}

int duet__conv_module_create(const duet__cm_opts *o, duet_rng *rng, duet_module **out) {
    *out = NULL;
    if (o->dilation > 1 && (o->deconv || o->stride != 1))
        return duet__error(DUET_EINVAL, "ConvModule: a dilated conv must be a stride-1 Conv2d");
    cm_impl *impl = malloc(sizeof *impl);
    if (impl == NULL) return duet__error(DUET_ENOMEM, "ConvModule: out of memory");
    impl->o = *o;
    duet_module *m = NULL, *part = NULL;
    DUET_TRY(duet_module_create(&cm_type, impl, &m));
    int rc = DUET_OK;
    if (o->reflect)
        rc = add(m, "padding_layer", duet_reflection_pad2d_module_create(o->padding, &part), &part);
    const int pad = o->reflect ? 0 : o->padding;
    if (rc == DUET_OK && o->spectral_norm && o->deconv)
        rc = duet__error(DUET_EUNSUPPORTED, "ConvModule: spectral norm on a ConvTranspose2d "
                         "is not supported");
    else if (rc == DUET_OK && o->spectral_norm)
        rc = add(m, "conv",
                 duet_sn_conv2d_module_create(o->in_channels, o->out_channels, o->kernel,
                                              o->stride, pad, o->bias, 1e-12f, rng, &part),
                 &part);
    else if (rc == DUET_OK && o->deconv)
        rc = add(m, "conv",
                 duet_conv_transpose2d_module_create(o->in_channels, o->out_channels, o->kernel,
                                                     o->stride, pad, o->output_padding,
                                                     o->bias, rng, &part),
                 &part);
    else if (rc == DUET_OK && o->dilation > 1)
        rc = add(m, "conv", dconv_create(o, pad, rng, &part), &part);
    else if (rc == DUET_OK)
        rc = add(m, "conv",
                 duet_conv2d_module_create(o->in_channels, o->out_channels, o->kernel, o->stride,
                                           pad, o->bias, rng, &part),
                 &part);
    if (rc == DUET_OK && o->with_norm) {
        /* mmcv's build_norm_layer: eps 1e-5; BN momentum 0.1; IN affine off. */
        if (o->norm == DUET_GEN_NORM_BN)
            rc = add(m, "bn", duet_batch_norm2d_module_create(o->out_channels, 1e-5f, 0.1f, &part),
                     &part);
        else
            rc = add(m, "in", duet_instance_norm2d_module_create(o->out_channels, 1e-5f, false,
                                                                &part),
                     &part);
    }
    if (rc == DUET_OK && o->act != DUET__CM_ACT_NONE) {
        const duet_activation kind = o->act == DUET__CM_ACT_RELU    ? DUET_ACT_RELU
                                     : o->act == DUET__CM_ACT_LRELU ? DUET_ACT_LEAKY_RELU
                                     : o->act == DUET__CM_ACT_ELU   ? DUET_ACT_ELU
                                                                    : DUET_ACT_TANH;
        rc = add(m, "activate", duet_activation_module_create(kind, 0.2f, &part), &part);
    }
    if (rc != DUET_OK) {
        duet_module_destroy(m);
        return rc;
    }
    *out = m;
    return DUET_OK;
}
