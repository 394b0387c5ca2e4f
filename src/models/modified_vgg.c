/* MMEditing's ModifiedVGG discriminator
 * (mmedit/models/components/discriminators/modified_vgg.py), generalised
 * from 128x128 inputs to any multiple of 32. PyTorch default init. */
#include "duet/models.h"

#include <stdio.h>

typedef struct vgg_impl {
    duet_modified_vgg_opts opts;
} vgg_impl;

duet_modified_vgg_opts duet_modified_vgg_opts_default(void) {
    return (duet_modified_vgg_opts){.in_channels = 3, .mid_channels = 64, .input_size = 128};
}

/* The nine conv + BN stages after conv0_0: stage s uses conv<s/2>_<s%2+1>
 * style names; listed explicitly to read like the original. */
static const char *const conv_names[9] = {"conv0_1", "conv1_0", "conv1_1", "conv2_0", "conv2_1",
                                          "conv3_0", "conv3_1", "conv4_0", "conv4_1"};
static const char *const bn_names[9] = {"bn0_1", "bn1_0", "bn1_1", "bn2_0", "bn2_1",
                                        "bn3_0", "bn3_1", "bn4_0", "bn4_1"};

/* Replaces *cur by f(*cur), releasing the old tensor. */
static int step(duet_module *m, duet_tensor **cur) {
    duet_tensor *next = NULL;
    int rc = duet_module_forward(m, *cur, &next);
    duet_autograd_release(*cur);
    *cur = next;
    return rc;
}

/* In place over the fresh output of the conv, BN or linear before it (see
 * duet_leaky_relu_inplace): one activation buffer and one pass less. */
static int step_lrelu(duet_tensor **cur) {
    duet_tensor *next = NULL;
    int rc = duet_leaky_relu_inplace(*cur, 0.2f, &next);
    duet_autograd_release(*cur);
    *cur = next;
    return rc;
}

static int vgg_forward(duet_module *self, int nin, duet_tensor *const *in, duet_tensor **out) {
    *out = NULL;
    if (nin != 1) return duet__error(DUET_EINVAL, "ModifiedVGG takes one input, got %d", nin);
    const duet_modified_vgg_opts *o = &((const vgg_impl *)duet_module_impl(self))->opts;
    duet_tensor *x = in[0];
    if (x->ndim != 4 || x->shape[1] != o->in_channels || x->shape[2] != o->input_size ||
        x->shape[3] != o->input_size) {
        char s[DUET_SHAPE_STR_MAX];
        return duet__error(DUET_ESHAPE, "ModifiedVGG: input %s; this discriminator was built "
                           "for (N, %d, %d, %d)", duet_shape_str(x, s, sizeof s),
                           o->in_channels, o->input_size, o->input_size);
    }
    /* feat = lrelu(conv0_0(x)); nine times feat = lrelu(bn(conv(feat)))
     * (each _1 conv halves H and W); flatten; lrelu(linear1); linear2. */
    duet_tensor *h = duet_tensor_retain(x);
    int rc = step(duet_module_child(self, "conv0_0"), &h);
    if (rc == DUET_OK) rc = step_lrelu(&h);
    for (int s = 0; s < 9 && rc == DUET_OK; s++) {
        rc = step(duet_module_child(self, conv_names[s]), &h);
        if (rc == DUET_OK) rc = step(duet_module_child(self, bn_names[s]), &h);
        if (rc == DUET_OK) rc = step_lrelu(&h);
    }
    if (rc == DUET_OK) {
        duet_tensor *f = NULL;
        rc = duet_flatten(h, &f);
        duet_autograd_release(h);
        h = f;
    }
    if (rc == DUET_OK) rc = step(duet_module_child(self, "linear1"), &h);
    if (rc == DUET_OK) rc = step_lrelu(&h);
    if (rc == DUET_OK) rc = step(duet_module_child(self, "linear2"), &h);
    if (rc != DUET_OK) {
        duet_tensor_release(h);
        return duet__error_context(rc, "ModifiedVGG forward");
    }
    *out = h;
    return DUET_OK;
}

static const duet_module_type vgg_type = {"ModifiedVGG", vgg_forward, free};

int duet_modified_vgg_create(const duet_modified_vgg_opts *opts, duet_rng *rng,
                             duet_module **out) {
    *out = NULL;
    const duet_modified_vgg_opts o = *opts;
    if (o.in_channels < 1 || o.mid_channels < 1 || o.input_size < 32 || o.input_size % 32 != 0)
        return duet__error(DUET_EINVAL, "ModifiedVGG: in_channels %d, mid_channels %d, "
                           "input_size %d; channels must be positive and input_size a positive "
                           "multiple of 32 (five stride-2 convolutions)",
                           o.in_channels, o.mid_channels, o.input_size);
    vgg_impl *impl = malloc(sizeof *impl);
    if (impl == NULL) return duet__error(DUET_ENOMEM, "ModifiedVGG: out of memory");
    impl->opts = o;
    duet_module *m = NULL, *part = NULL;
    DUET_TRY(duet_module_create(&vgg_type, impl, &m));
    int mid = o.mid_channels;
    /* Output channels of conv0_1 .. conv4_1. */
    const int ch[9] = {mid, 2 * mid, 2 * mid, 4 * mid, 4 * mid, 8 * mid, 8 * mid, 8 * mid, 8 * mid};
    int rc = duet_conv2d_module_create(o.in_channels, mid, 3, 1, 1, true, rng, &part);
    if (rc == DUET_OK) rc = duet_module_add_child(m, "conv0_0", part);
    int prev = mid;
    for (int s = 0; s < 9 && rc == DUET_OK; s++) {
        bool down = s % 2 == 0; /* conv*_1: 4x4, stride 2, padding 1 */
        rc = duet_conv2d_module_create(prev, ch[s], down ? 4 : 3, down ? 2 : 1, 1, false, rng,
                                       &part);
        if (rc == DUET_OK) rc = duet_module_add_child(m, conv_names[s], part);
        if (rc == DUET_OK) rc = duet_batch_norm2d_module_create(ch[s], 1e-5f, 0.1f, &part);
        if (rc == DUET_OK) rc = duet_module_add_child(m, bn_names[s], part);
        prev = ch[s];
    }
    int64_t side = o.input_size / 32;
    int64_t feat = (int64_t)8 * mid * side * side;
    if (rc == DUET_OK && feat > INT32_MAX)
        rc = duet__error(DUET_EINVAL, "ModifiedVGG: %lld features into linear1 is too many",
                         (long long)feat);
    if (rc == DUET_OK) rc = duet_linear_module_create((int)feat, 100, true, rng, &part);
    if (rc == DUET_OK) rc = duet_module_add_child(m, "linear1", part);
    if (rc == DUET_OK) rc = duet_linear_module_create(100, 1, true, rng, &part);
    if (rc == DUET_OK) rc = duet_module_add_child(m, "linear2", part);
    if (rc != DUET_OK) {
        duet_module_destroy(m);
        return rc;
    }
    *out = m;
    return DUET_OK;
}
