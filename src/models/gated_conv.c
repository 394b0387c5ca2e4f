/* MMEditing's SimpleGatedConvModule (mmedit/models/common/
 * gated_conv_module.py), DeepFillv2's convolution: one ConvModule to twice
 * the output channels, split in halves along the channels,
 *   y = feat_act(first half) * gate_act(second half)
 * with ELU and Sigmoid by default. The ConvModule carries the padding
 * (reflect or zeros), stride and dilation; its own activation is off. */
#include "models/models_internal.h"

typedef struct gated_impl {
    int out_channels;
} gated_impl;

static int gated_forward(duet_module *self, int nin, duet_tensor *const *in, duet_tensor **out) {
    *out = NULL;
    if (nin != 1)
        return duet__error(DUET_EINVAL, "SimpleGatedConvModule takes one input, got %d", nin);
    const int64_t c = ((const gated_impl *)duet_module_impl(self))->out_channels;
    duet_tensor *h = NULL, *feat = NULL, *gate = NULL;
    int rc = duet_module_forward(duet_module_child(self, "conv"), in[0], &h);
    if (rc == DUET_OK) rc = duet_slice_channels(h, 0, c, &feat);
    if (rc == DUET_OK) rc = duet_slice_channels(h, c, c, &gate);
    duet_tensor_release(h);
    duet_module *fa = duet_module_child(self, "feat_act");
    duet_module *ga = duet_module_child(self, "gate_act");
    if (rc == DUET_OK && fa != NULL) rc = duet__gan_step(fa, &feat);
    if (rc == DUET_OK && ga != NULL) rc = duet__gan_step(ga, &gate);
    if (rc == DUET_OK) rc = duet_mul(feat, gate, out);
    duet_tensor_release(feat);
    duet_tensor_release(gate);
    return rc;
}

static const duet_module_type gated_type = {"SimpleGatedConvModule", gated_forward, free};

static int gated_create(const duet__cm_opts *o, bool feat_act, bool gate_act, duet_rng *rng,
                        duet_module **out) {
    *out = NULL;
    gated_impl *impl = malloc(sizeof *impl);
    if (impl == NULL) return duet__error(DUET_ENOMEM, "SimpleGatedConvModule: out of memory");
    impl->out_channels = o->out_channels;
    duet_module *m = NULL, *part = NULL;
    DUET_TRY(duet_module_create(&gated_type, impl, &m));
    duet__cm_opts cm = *o;
    cm.out_channels = 2 * o->out_channels;
    cm.act = DUET__CM_ACT_NONE;
    int rc = duet__conv_module_create(&cm, rng, &part);
    if (rc == DUET_OK) rc = duet_module_add_child(m, "conv", part);
    if (rc == DUET_OK && feat_act) {
        rc = duet_activation_module_create(DUET_ACT_ELU, 0.0f, &part);
        if (rc == DUET_OK) rc = duet_module_add_child(m, "feat_act", part);
    }
    if (rc == DUET_OK && gate_act) {
        rc = duet_activation_module_create(DUET_ACT_SIGMOID, 0.0f, &part);
        if (rc == DUET_OK) rc = duet_module_add_child(m, "gate_act", part);
    }
    if (rc != DUET_OK) {
        duet_module_destroy(m);
        return rc;
    }
    *out = m;
    return DUET_OK;
}

int duet__gated_conv_create(const duet__cm_opts *o, bool feat_act, duet_rng *rng,
                            duet_module **out) {
    return gated_create(o, feat_act, true, rng, out);
}

duet_gated_conv_opts duet_gated_conv_opts_default(void) {
    return (duet_gated_conv_opts){.in_channels = 3, .out_channels = 3, .kernel = 3, .stride = 1,
                                  .padding = 1, .dilation = 1, .feat_act = true,
                                  .gate_act = true};
}

int duet_simple_gated_conv_module_create(const duet_gated_conv_opts *o, duet_rng *init_rng,
                                         duet_module **out) {
    *out = NULL;
    if (init_rng == NULL)
        return duet__error(DUET_EINVAL, "SimpleGatedConvModule: init rng is NULL");
    if (o->in_channels < 1 || o->out_channels < 1 || o->kernel < 1 || o->stride < 1 ||
        o->padding < 0 || o->dilation < 1)
        return duet__error(DUET_EINVAL, "SimpleGatedConvModule: in_channels %d, out_channels "
                           "%d, kernel %d, stride %d, dilation %d must be positive and padding "
                           "%d not negative", o->in_channels, o->out_channels, o->kernel,
                           o->stride, o->dilation, o->padding);
    const duet__cm_opts cm = {.in_channels = o->in_channels, .out_channels = o->out_channels,
                              .kernel = o->kernel, .stride = o->stride, .padding = o->padding,
                              .dilation = o->dilation, .bias = true, .reflect = o->reflect};
    return gated_create(&cm, o->feat_act, o->gate_act, init_rng, out);
}
